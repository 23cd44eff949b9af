#include "core/data/dataset.h"

#include "core/data/idx.h"
#include "core/data/synthetic.h"
#include "core/error.h"

namespace alloy::data {

DatasetPair load_datasets(const std::string& kind, const std::string& directory,
                          std::uint64_t seed) {
  DatasetPair pair;
  if (kind == "fashion-mnist" || kind == "mnist") {
    pair.train = read_idx_dataset(directory, "train", kind + "/train");
    pair.test = read_idx_dataset(directory, "t10k", kind + "/test");
  } else if (kind == "synthetic") {
    pair.train = make_synthetic_dataset(kSyntheticTrainSize, seed, "synthetic/train");
    pair.test = make_synthetic_dataset(kSyntheticTestSize, seed, "synthetic/test");
  } else {
    usage_fail("unknown dataset '", kind, "' (choices: fashion-mnist, mnist, synthetic)");
  }
  return pair;
}

}  // namespace alloy::data
