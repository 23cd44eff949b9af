// The chunked tied head and loss on the CPU against a float64 reference (logits, softmax
// cross-entropy, dh and the table's gradient), at f32 and bf16, for one chunk and several, in one
// block of vocabulary rows and several, and the evaluation form's loss equal to the step's; an
// fp32 table with half h (O1) giving the bits of its half cast; and the memory the op holds at
// half dtypes about half of what it holds at f32, with no whole fp32 copy of the table.
#include "core/ops/lm_head_loss.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "core/memory.h"
#include "core/ops/elementwise.h"
#include "core/ops/step_tally.h"
#include "core/thread_pool.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

Tensor random_targets(std::int64_t rows, std::int64_t vocab, Generator& generator) {
  Tensor targets = Tensor::empty({rows}, DType::i32);
  for (std::int64_t i = 0; i < rows; ++i)
    targets.data<std::int32_t>()[i] =
        static_cast<std::int32_t>(generator.below(static_cast<std::uint64_t>(vocab)));
  return targets;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(lm_head_loss_suite)

BOOST_AUTO_TEST_CASE(step_matches_float64_reference_in_one_chunk_and_several) {
  set_cpu_threads(2);
  Generator generator(1);
  const std::int64_t rows = 23, channels = 16;
  const double loss_scale = 4.0;
  // 2085 rows of the table: more than one of the CPU's blocks of vocabulary rows at half dtypes.
  for (const std::int64_t vocab : {std::int64_t{41}, std::int64_t{2085}})
    for (const DType dtype : {DType::f32, DType::bf16}) {
      for (const std::int64_t chunk : {std::int64_t{0}, std::int64_t{1}, std::int64_t{7}}) {
        const std::string what = std::string(dtype_name(dtype)) + " vocab " +
                                 std::to_string(vocab) + " chunk " + std::to_string(chunk);
        const Tensor h = random_tensor({rows, channels}, dtype, generator, -2, 2);
        const Tensor wte = random_tensor({vocab, channels}, dtype, generator);
        const Tensor targets = random_targets(rows, vocab, generator);
        Tensor dwte = random_tensor({vocab, channels}, DType::f32, generator);
        const auto hv = to_doubles(h), wv = to_doubles(wte);
        std::vector<double> dh_expected(hv.size(), 0.0), dwte_expected = to_doubles(dwte);
        double loss_sum = 0.0;
        for (std::int64_t r = 0; r < rows; ++r) {
          std::vector<double> logits(static_cast<std::size_t>(vocab), 0.0);
          double m = -INFINITY;
          for (std::int64_t v = 0; v < vocab; ++v) {
            for (std::int64_t c = 0; c < channels; ++c)
              logits[static_cast<std::size_t>(v)] +=
                  hv[static_cast<std::size_t>(r * channels + c)] *
                  wv[static_cast<std::size_t>(v * channels + c)];
            m = std::max(m, logits[static_cast<std::size_t>(v)]);
          }
          double sum = 0.0;
          for (const double logit : logits)
            sum += std::exp(logit - m);
          const std::int32_t target = targets.data<std::int32_t>()[r];
          loss_sum += m + std::log(sum) - logits[static_cast<std::size_t>(target)];
          for (std::int64_t v = 0; v < vocab; ++v) {
            const double g = (std::exp(logits[static_cast<std::size_t>(v)] - m) / sum -
                              (v == target ? 1.0 : 0.0)) *
                             loss_scale / static_cast<double>(rows);
            for (std::int64_t c = 0; c < channels; ++c) {
              dh_expected[static_cast<std::size_t>(r * channels + c)] +=
                  g * wv[static_cast<std::size_t>(v * channels + c)];
              dwte_expected[static_cast<std::size_t>(v * channels + c)] +=
                  g * hv[static_cast<std::size_t>(r * channels + c)];
            }
          }
        }
        Tensor tally = make_step_tally(Device::cpu());
        const Tensor scale = Tensor::from_floats({1}, {static_cast<float>(loss_scale)});
        const Tensor dh = lm_head_loss_step(h, wte, targets, scale, tally, dwte, 0, chunk);
        BOOST_TEST((dh.dtype() == dtype));
        // Half logits and their gradient are rounded to the storage dtype before the GEMMs.
        const double rtol = dtype == DType::f32 ? 1e-4 : 4 * dtype_tolerance(dtype);
        const double atol = dtype == DType::f32 ? 1e-5 : 2e-2;
        BOOST_TEST(read_step_tally(tally).loss_sum == loss_sum,
                   boost::test_tools::tolerance(dtype == DType::f32 ? 1e-5 : 1e-2));
        check_close(dh, dh_expected, rtol, atol, "dh " + what);
        check_close(dwte, dwte_expected, rtol, atol, "dwte " + what);

        Tensor eval_tally = make_step_tally(Device::cpu());
        lm_head_loss(h, wte, targets, eval_tally, chunk);
        BOOST_TEST(read_step_tally(eval_tally).loss_sum == read_step_tally(tally).loss_sum, what);
      }
    }
}

BOOST_AUTO_TEST_CASE(an_fp32_table_with_half_h_gives_its_half_casts_bits) {
  set_cpu_threads(2);
  Generator generator(3);
  const std::int64_t rows = 11, channels = 8, vocab = 2085;
  for (const DType dtype : {DType::f16, DType::bf16}) {
    const Tensor h = random_tensor({rows, channels}, dtype, generator, -2, 2);
    const Tensor wte = random_tensor({vocab, channels}, DType::f32, generator);
    const Tensor targets = random_targets(rows, vocab, generator);
    const Tensor dwte0 = random_tensor({vocab, channels}, DType::f32, generator);
    const Tensor scale = Tensor::from_floats({1}, {2.0f});
    Tensor tally = make_step_tally(Device::cpu()), cast_tally = make_step_tally(Device::cpu());
    Tensor dwte = dwte0.clone(), cast_dwte = dwte0.clone();
    const Tensor dh = lm_head_loss_step(h, wte, targets, scale, tally, dwte, 0, 4);
    const Tensor cast_dh =
        lm_head_loss_step(h, cast(wte, dtype), targets, scale, cast_tally, cast_dwte, 0, 4);
    BOOST_TEST(same_bits(dh, cast_dh), dtype_name(dtype));
    BOOST_TEST(same_bits(dwte, cast_dwte), dtype_name(dtype));
    BOOST_TEST(read_step_tally(tally).loss_sum == read_step_tally(cast_tally).loss_sum);
  }
}

BOOST_AUTO_TEST_CASE(half_levels_hold_about_half_of_fp32_and_no_fp32_table) {
  // GPT-2's vocabulary, few channels: chunks of full size (three, two were they sized by half
  // logits' bytes) and small GEMMs.
  set_cpu_threads(2);
  Generator generator(5);
  const std::int64_t rows = 700, channels = 32, vocab = 50257;
  const Tensor h32 = random_tensor({rows, channels}, DType::f32, generator, -2, 2);
  const Tensor wte32 = random_tensor({vocab, channels}, DType::f32, generator);
  const Tensor targets = random_targets(rows, vocab, generator);
  const Tensor scale = Tensor::from_floats({1}, {1.0f});
  const Tensor h16 = cast(h32, DType::f16), wte16 = cast(wte32, DType::f16);
  struct Level {
    const char* name;
    const Tensor& h;
    const Tensor& wte;
    DType dwte;
  };
  // O0; O1: fp32 table and gradient, half h; O2: all half.
  const Level levels[] = {{"O0", h32, wte32, DType::f32},
                          {"O1", h16, wte32, DType::f32},
                          {"O2", h16, wte16, DType::f16}};
  MemoryStats& stats = memory_stats(Device::cpu());
  std::int64_t o0_peak = 0;
  for (const Level& level : levels) {
    Tensor tally = make_step_tally(Device::cpu());
    Tensor dwte = Tensor::zeros({vocab, channels}, level.dwte);
    stats.reset_peaks();
    const MemorySnapshot before = stats.snapshot();
    lm_head_loss_step(level.h, level.wte, targets, scale, tally, dwte);
    const MemorySnapshot after = stats.snapshot();
    const std::int64_t peak = after.total_peak - before.total_current;
    const std::int64_t workspace =
        after.peak_of(MemoryCategory::workspace) - before.current_of(MemoryCategory::workspace);
    BOOST_TEST_MESSAGE(level.name << ": the op held " << peak << " bytes, " << workspace
                                  << " of them workspace");
    if (level.dwte == DType::f32 && level.h.dtype() == DType::f32) {
      o0_peak = peak;
      continue;
    }
    // Half logits and their gradient: half of O0's, beside a few MiB of fp32 scratch.
    BOOST_TEST(peak <= o0_peak * 6 / 10, level.name);
    BOOST_TEST(workspace < vocab * channels * 4, level.name);  // less than a widened table
  }
}

BOOST_AUTO_TEST_CASE(chunks_hold_about_64_mib_of_fp32_logits) {
  BOOST_TEST(lm_head_chunk_rows(8192, 50257) == (64 << 20) / (50257 * 4));
  BOOST_TEST(lm_head_chunk_rows(768, 65) == 768);  // a small vocabulary: one chunk
}

BOOST_AUTO_TEST_SUITE_END()
