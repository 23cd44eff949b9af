// ImageFolder trees, as torchvision reads them: DIR/train/CLASS/FILE and DIR/val/CLASS/FILE,
// the classes the sorted names of train's subfolders (label = position), each class's files
// sorted by name. Images stay on disk: the loader's threads decode each example (JPEG or PNG,
// core/data/image_decode.h) and crop and resize it (core/data/image_transform.h) when its batch
// is assembled: training images with the random crop and flip (unless augment is false, which
// gives them evaluation's centre crop), validation images with the centre crop. An image smaller
// than the crop is scaled up. CMYK JPEGs and 16-bit PNGs are refused (an Error naming the file),
// not converted.
#pragma once

#include <cstdint>
#include <string>

#include "core/data/dataset.h"

namespace alloy::data {

struct ImageFolderOptions {
  int size = 224;       // images become size x size
  int channels = 3;     // 3 (RGB) or 1 (luma)
  bool augment = true;  // the training set's random crop and flip
  std::uint64_t seed = 0;
};

// Errors (alloy::Error, one line naming the folder or file): no DIR/train or DIR/val, a class
// folder without files, a class of val that train does not have. A bad image file is an Error
// naming it when the loader reaches it.
DatasetPair read_image_folder(const std::string& directory, const ImageFolderOptions& options);

}  // namespace alloy::data
