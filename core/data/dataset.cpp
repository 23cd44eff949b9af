#include "core/data/dataset.h"

#include <algorithm>

#include "core/data/idx.h"
#include "core/data/synthetic.h"
#include "core/error.h"

namespace alloy::data {

DatasetPair load_datasets(const std::string& kind, const std::string& directory, std::uint64_t seed,
                          const SyntheticShape& synthetic) {
  DatasetPair pair;
  if (kind == "fashion-mnist" || kind == "mnist") {
    pair.train = read_idx_dataset(directory, "train", kind + "/train");
    pair.test = read_idx_dataset(directory, "t10k", kind + "/test");
  } else if (kind == "synthetic") {
    const std::int64_t test_size =
        std::max<std::int64_t>(1, synthetic.train_size * kSyntheticTestSize / kSyntheticTrainSize);
    const SyntheticShape& s = synthetic;
    pair.train = make_synthetic_dataset(s.train_size, seed, "synthetic/train", s.classes,
                                        s.image_size, s.image_size, s.channels);
    pair.test = make_synthetic_dataset(test_size, seed, "synthetic/test", s.classes, s.image_size,
                                       s.image_size, s.channels);
  } else {
    usage_fail("unknown dataset '", kind, "' (choices: fashion-mnist, mnist, synthetic)");
  }
  return pair;
}

}  // namespace alloy::data
