// Reader for the IDX format of MNIST and Fashion-MNIST, plain or gzip-compressed (chosen by
// content, not by name). Every malformed input is an alloy::Error that names the file.
#pragma once

#include <string>

#include "core/data/dataset.h"

namespace alloy::data {

// u8 [N, 1, rows, cols] from an idx3-ubyte file (magic 0x00000803).
Tensor read_idx_images(const std::string& path);
// i32 [N] from an idx1-ubyte file (magic 0x00000801); labels must be below `classes`.
Tensor read_idx_labels(const std::string& path, int classes = 10);

// Reads "<prefix>-images-idx3-ubyte[.gz]" and "<prefix>-labels-idx1-ubyte[.gz]" from
// `directory` and checks the counts agree.
Dataset read_idx_dataset(const std::string& directory, const std::string& prefix,
                         const std::string& name);

}  // namespace alloy::data
