#include "core/data/image_folder.h"

#include <algorithm>
#include <filesystem>
#include <utility>
#include <vector>

#include "core/data/image_decode.h"
#include "core/data/image_transform.h"
#include "core/error.h"

namespace alloy::data {

namespace {

namespace fs = std::filesystem;

// Sorted names of the entries of `directory` that are folders (or, with folders false, regular
// files), hidden ones left out.
std::vector<std::string> sorted_entries(const fs::path& directory, bool folders) {
  std::vector<std::string> names;
  std::error_code error;
  for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    if (folders ? it->is_directory(error) : it->is_regular_file(error)) names.push_back(name);
  }
  if (error) fail(directory.string(), ": cannot list: ", error.message());
  std::sort(names.begin(), names.end());
  return names;
}

class FolderSource : public ExampleSource {
 public:
  FolderSource(std::vector<std::string> files, const ImageFolderOptions& options, bool train)
      : files_(std::move(files)), options_(options), random_(train && options.augment) {}

  void load(std::int64_t index, std::int64_t epoch, std::uint8_t* pixels) const override {
    // The crop is drawn on the file's size; a JPEG whose crop is at least twice the output each
    // way is decoded at 1/2, 1/4 or 1/8 scale, the crop at least the output's size still (its
    // box scaled alike).
    CropBox box;
    const auto shrink_limit = [&](int width, int height) {
      box = random_ ? random_resized_crop(width, height, options_.seed, epoch, index)
                    : center_crop(width, height, options_.size);
      return std::min(box.width, box.height) / options_.size;
    };
    const DecodedImage image =
        decode_image(files_.at(static_cast<std::size_t>(index)), shrink_limit);
    if (image.width != image.file_width || image.height != image.file_height) {
      const double sx = static_cast<double>(image.width) / image.file_width;
      const double sy = static_cast<double>(image.height) / image.file_height;
      box.x *= sx;
      box.width *= sx;
      box.y *= sy;
      box.height *= sy;
    }
    resample(image, box, options_.size, options_.channels, pixels);
  }
  int channels() const override { return options_.channels; }
  int size() const override { return options_.size; }

 private:
  std::vector<std::string> files_;
  ImageFolderOptions options_;
  bool random_;
};

Dataset read_split(const fs::path& root, const std::string& split,
                   const std::vector<std::string>& classes, const ImageFolderOptions& options,
                   const std::string& name) {
  std::vector<std::string> files;
  std::vector<std::int32_t> labels;
  for (const std::string& folder : sorted_entries(root, true)) {
    const auto found = std::find(classes.begin(), classes.end(), folder);
    if (found == classes.end()) {
      fail((root / folder).string(), ": class '", folder, "' of ", split,
           " is not among train's classes");
    }
    const std::vector<std::string> names = sorted_entries(root / folder, false);
    if (names.empty()) fail((root / folder).string(), ": an empty class folder");
    for (const std::string& file : names) {
      files.push_back((root / folder / file).string());
      labels.push_back(static_cast<std::int32_t>(found - classes.begin()));
    }
  }
  if (files.empty()) fail(root.string(), ": no class folders");
  Dataset dataset;
  dataset.name = name;
  dataset.classes = static_cast<int>(classes.size());
  dataset.labels = Tensor::empty({static_cast<std::int64_t>(labels.size())}, DType::i32,
                                 Device::cpu(), MemoryCategory::data);
  std::copy(labels.begin(), labels.end(), dataset.labels.data<std::int32_t>());
  dataset.source = std::make_shared<FolderSource>(std::move(files), options, split == "train");
  return dataset;
}

}  // namespace

DatasetPair read_image_folder(const std::string& directory, const ImageFolderOptions& options) {
  ALLOY_CHECK(options.channels == 1 || options.channels == 3, "image folder ", directory,
              ": 1 or 3 channels, got ", options.channels);
  ALLOY_CHECK(options.size >= 1, "image folder ", directory, ": size must be positive");
  const fs::path root(directory);
  std::error_code error;
  for (const char* split : {"train", "val"}) {
    if (!fs::is_directory(root / split, error)) {
      fail((root / split).string(), ": no such folder (an image folder holds train/CLASS/* and ",
           "val/CLASS/*)");
    }
  }
  const std::vector<std::string> classes = sorted_entries(root / "train", true);
  DatasetPair pair;
  pair.train = read_split(root / "train", "train", classes, options, "folder/train");
  pair.test = read_split(root / "val", "val", classes, options, "folder/val");
  return pair;
}

}  // namespace alloy::data
