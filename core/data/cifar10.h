// Reader for the CIFAR-10 binary version (cifar-10-batches-bin): data_batch_1.bin ..
// data_batch_5.bin (training) and test_batch.bin, each a sequence of 3073-byte records: one
// label byte (0-9), then the 32x32 image as its R, G and B planes (1024 bytes each, row-major),
// which is the [3, 32, 32] layout of a Dataset's images as it stands.
#pragma once

#include <string>
#include <vector>

#include "core/data/dataset.h"

namespace alloy::data {

constexpr int kCifar10Classes = 10;
constexpr int kCifar10Size = 32;
constexpr std::int64_t kCifar10RecordBytes = 1 + 3 * kCifar10Size * kCifar10Size;

// The records of `files`, in order, as one dataset named `name`. A missing or unreadable file,
// a size that is not a whole number of records, or a label above 9 is an Error naming the file.
Dataset read_cifar10_files(const std::vector<std::string>& files, const std::string& name);

// The training set (the five data batches) and the test set of `directory`, or of its
// cifar-10-batches-bin subdirectory (where the archive unpacks) when the files are there.
DatasetPair read_cifar10(const std::string& directory);

}  // namespace alloy::data
