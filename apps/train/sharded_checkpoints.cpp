#include "apps/train/sharded_checkpoints.h"

#include "core/error.h"
#include "parallel/zero_shards.h"

namespace alloy::app {

void check_shard_boundaries(const checkpoint::Manifest& manifest, const std::string& path) {
  for (const checkpoint::ShardEntry& shard : manifest.shards) {
    const parallel::ShardRange range = parallel::shard_range(
        manifest.total, static_cast<int>(manifest.world_size), static_cast<int>(shard.rank));
    ALLOY_CHECK(shard.begin == range.begin && shard.end == range.end, "checkpoint ", path,
                ": shard ", shard.file, " holds [", shard.begin, ", ", shard.end, "), but rank ",
                shard.rank, " of ", manifest.world_size, " owns [", range.begin, ", ", range.end,
                ") of the ", manifest.total, " elements");
  }
}

}  // namespace alloy::app
