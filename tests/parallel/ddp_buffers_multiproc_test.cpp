// DistributedDataParallel::finish() copies rank 0's buffers (batch-norm statistics) to every
// rank, after the buckets, on the communication thread; inside no_sync() it does nothing. Ranks
// are forked children on 127.0.0.1 over Gloo.
#include <boost/test/unit_test.hpp>
#include <string>

#include "core/models/models.h"
#include "core/random.h"
#include "parallel/ddp.h"
#include "parallel/gloo_process_group.h"
#include "tests/parallel/forked.h"

using namespace alloy;
using namespace alloy::parallel;
using alloy::test::check_all_succeeded;
using alloy::test::expect;
using alloy::test::free_port;
using alloy::test::run_ranks;

namespace {

// Every f32 buffer holds `value` (the others, counters, are left alone).
void fill_buffers(nn::Module& model, float value) {
  for (nn::Buffer* buffer : model.buffers()) {
    if (buffer->value.dtype() == DType::f32) buffer->value.fill(value);
  }
}

// The first f32 buffer whose values are not all `value`, or "".
std::string first_buffer_not(nn::Module& model, float value) {
  for (nn::Buffer* buffer : model.buffers()) {
    if (buffer->value.dtype() != DType::f32) continue;
    for (const float each : buffer->value.to_floats()) {
      if (each != value) return buffer->name + " holds " + std::to_string(each);
    }
  }
  return {};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ddp_buffers)

BOOST_AUTO_TEST_CASE(finish_gives_every_rank_the_buffers_of_rank_0_except_inside_no_sync) {
  const int world = 3;
  const int port = free_port();
  check_all_succeeded(run_ranks(
      world,
      [&](int rank) {
        ProcessGroupOptions options;
        options.timeout = std::chrono::seconds(20);
        GlooProcessGroup group(rank, world, "127.0.0.1", port, options);
        Generator generator(9);
        auto model = models::make_model("resnet18", generator, 10);
        expect(!model->buffers().empty(), "resnet18 has no buffers");
        DdpOptions ddp_options;
        ddp_options.bucket_bytes = 1 << 20;  // several buckets before the buffers
        DistributedDataParallel ddp(*model, group, ddp_options);
        const float mine = 1.5f + static_cast<float>(rank);
        for (int step = 0; step < 2; ++step) {
          fill_buffers(*model, mine + static_cast<float>(step));
          {
            auto no_sync = ddp.no_sync();
            ddp.finish();
            const std::string kept = first_buffer_not(*model, mine + static_cast<float>(step));
            expect(kept.empty(), "inside no_sync, rank " + std::to_string(rank) + ": " + kept);
          }
          ddp.finish();  // no backward: every bucket forced, then the buffers
          const std::string wrong = first_buffer_not(*model, 1.5f + static_cast<float>(step));
          expect(wrong.empty(), "step " + std::to_string(step) + ", rank " + std::to_string(rank) +
                                    ": " + wrong + " instead of rank 0's value");
        }
      },
      std::chrono::seconds(120)));
}

BOOST_AUTO_TEST_SUITE_END()
