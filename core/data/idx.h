// Reader for the IDX format of MNIST and Fashion-MNIST, plain or gzip-compressed (chosen by
// content, not by name). Every malformed input is an alloy::Error that names the file and the
// problem: unreadable or corrupt gzip data, wrong magic, unexpected dimensions, fewer bytes
// than the header promises, bytes after them, label values out of range.
#pragma once

#include <string>

#include "core/data/dataset.h"

namespace alloy::data {

// u8 [N, 1, rows, cols] from an idx3-ubyte file (magic 0x00000803), category data.
Tensor read_idx_images(const std::string& path);
// i32 [N] from an idx1-ubyte file (magic 0x00000801), category data; labels must be below
// `classes`.
Tensor read_idx_labels(const std::string& path, int classes = 10);

// Reads "<prefix>-images-idx3-ubyte[.gz]" and "<prefix>-labels-idx1-ubyte[.gz]" from
// `directory` (the plain file when both exist) and checks the counts agree. A missing
// directory's error says how to install the data or avoid needing it.
Dataset read_idx_dataset(const std::string& directory, const std::string& prefix,
                         const std::string& name);

}  // namespace alloy::data
