#include "apps/train/train_config.h"

#include "core/data/channels.h"
#include "core/data/image_folder.h"
#include "core/data/synthetic.h"
#include "core/error.h"
#include "core/models/models.h"
#include "core/setting_error.h"

namespace alloy::app {

namespace {

// An image folder's default size and channels: ImageNet's.
constexpr int kFolderImageSize = 224;

}  // namespace

data::DatasetPair load_training_data(const TrainConfig& o) {
  data::DatasetPair data;
  if (o.dataset == "folder") {
    data::ImageFolderOptions folder;
    folder.size = o.image_size > 0 ? o.image_size : kFolderImageSize;
    folder.channels = o.channels > 0 ? o.channels : 3;
    folder.augment = o.augment == "default";
    folder.seed = static_cast<std::uint64_t>(o.seed);
    data = data::read_image_folder(o.data_dir, folder);
  } else {
    data::SyntheticShape synthetic;
    if (o.synthetic_size > 0) synthetic.train_size = o.synthetic_size;
    if (o.image_size > 0) synthetic.image_size = o.image_size;
    synthetic.channels =
        o.channels > 0 ? o.channels : data::default_synthetic_channels(synthetic.image_size);
    if (o.num_classes > 0) synthetic.classes = o.num_classes;
    data =
        data::load_datasets(o.dataset, o.data_dir, static_cast<std::uint64_t>(o.seed), synthetic);
  }
  const std::string where = o.dataset == "synthetic" ? "" : " (in " + o.data_dir + ")";
  for (data::Dataset* set : {&data.train, &data.test}) {
    if (set->size() == 0) fail(set->name, where, " holds no examples");
    if (o.channels > 0 && !set->source) *set = data::convert_channels(*set, o.channels);
    const Shape shape = set->example_shape();
    if (shape[1] != shape[2]) {
      fail(set->name, where, " has ", shape[1], "x", shape[2],
           " images; the models take square ones");
    }
    if (o.image_size > 0 && shape[1] != o.image_size) {
      setting_failure(set->name, where, " has ", shape[1], "x", shape[2], " images, not the ",
                      o.image_size, "x", o.image_size, " of {image_size} (", o.dataset,
                      " is not resized; synthetic data is generated at any size, folder data "
                      "resized)");
    }
    if (o.num_classes > 0 && set->classes != o.num_classes) {
      setting_failure(set->name, where, " has ", set->classes, " classes, not the ", o.num_classes,
                      " of {num_classes}");
    }
  }
  // A clear error before any training for lenet at 32x32, say.
  models::check_model_input(o.model, models::image_shape_of(data.train.example_shape()));
  if (o.batch_size > data.train.size()) {
    setting_fail("{batch_size} ", o.batch_size, " is larger than the ", data.train.size(),
                 " examples of ", data.train.name, ": an epoch would have no step");
  }
  return data;
}

}  // namespace alloy::app
