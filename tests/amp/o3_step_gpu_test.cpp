// The LeNet recipe's O3 step on the CPU and on the CUDA device from the same fp16 weights and
// the same Fashion-MNIST batch, op by op (tests/support/o3_step.h): each op's result compared
// as the largest |difference|, the largest distance in ulp of its dtype and the count of
// differing elements, both as the step runs (each side on its own previous results: "chained")
// and with every device op fed the CPU's inputs ("own": the op's arithmetic alone); per weight
// gradient, the share of updates round-to-nearest loses, and the elements fp16 flushes to zero
// where an fp32 step from the same weights has none (loss scale 1), with how many of those the
// fp32 gradient would have moved. Then 20 steps from one start, and each convolution algorithm
// the device offers. The tables go to the log (--log_level=message); docs/PERFORMANCE.md ("O3
// on the GPU") quotes them. On the emulator every convolution is the same fp32 sum; on a GPU
// cuDNN's own algorithms (Winograd, FFT) are reported, not bounded: that is what the tables
// are for there.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "apps/train/train_step.h"
#include "core/ops/step_tally.h"
#include "tests/support/gpu.h"
#include "tests/support/o3_step.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/ops/cuda/conv2d.h"
#endif

using namespace alloy;
using namespace alloy::test;

namespace {

#ifdef ALLOY_CUDA_EMULATOR
constexpr bool kEmulated = true;
#else
constexpr bool kEmulated = false;
#endif

bool ends_with(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

std::string cell(const TensorDiff& d) {
  std::ostringstream out;
  out << std::setw(9) << std::setprecision(3) << d.max_abs << std::setw(5) << d.max_ulp
      << std::setw(8) << d.differing;
  return out.str();
}

// The recipe's CPU model after `steps` steps: where a compared step starts.
RecipeModel trained_cpu_model(const data::Dataset& set, std::int64_t steps) {
  RecipeModel model = make_recipe_lenet(amp::OptLevel::O3, Device::cpu());
  Tensor tally = make_step_tally(Device::cpu());
  for (std::int64_t step = 0; step < steps; ++step) {
    const Batch batch = recipe_batch(set, step, Device::cpu());
    app::train_step(*model.model, *model.precision, batch.images, batch.labels, tally);
  }
  return model;
}

RecipeModel copy_of(const RecipeModel& start, amp::OptLevel level, Device device,
                    const amp::AmpOverrides& overrides = {}) {
  RecipeModel model = make_recipe_lenet(level, device, 1, overrides);
  copy_weights(model, start);
  return model;
}

// Where the cuDNN convolutions' results are: their layers' outputs, input and filter gradients.
std::set<std::string> cudnn_results(const StepTrace& trace) {
  std::set<std::string> names;
  for (const TraceEntry& entry : trace.entries) {
    if (!ends_with(entry.name, " conv2d y")) continue;
    const std::string layer = entry.name.substr(0, entry.name.find(' '));
    names.insert({entry.name, layer + " conv2d dx", layer + ".weight grad"});
  }
  return names;
}

// Step `step` of the recipe (0-based) from the CPU's weights after the steps before it, at a
// static loss scale, on the CPU, on the device chained and fed, and in fp32 on the CPU
// (gradients only). Logs the table and checks the bounds below.
void compare_step(const data::Dataset& set, std::int64_t step, float loss_scale) {
  const RecipeModel start = trained_cpu_model(set, step);
  amp::AmpOverrides overrides;
  overrides.loss_scale = std::to_string(loss_scale);
  RecipeModel cpu = copy_of(start, amp::OptLevel::O3, Device::cpu(), overrides);
  RecipeModel chained = copy_of(start, amp::OptLevel::O3, Device::cuda(0), overrides);
  RecipeModel fed = copy_of(start, amp::OptLevel::O3, Device::cuda(0), overrides);
  RecipeModel fp32 = copy_of(start, amp::OptLevel::O0, Device::cpu());
  const Batch host = recipe_batch(set, step, Device::cpu());
  const Batch device = recipe_batch(set, step, Device::cuda(0));
  const StepTrace c = traced_step(cpu, host);
  const StepTrace g = traced_step(chained, device);
  const StepTrace f = traced_step(fed, device, &c);
  const StepTrace r = traced_step(fp32, host, nullptr, false);
  const std::set<std::string> cudnn = cudnn_results(c);

  std::ostringstream table;
  table << std::left << std::setw(18) << "op" << std::right << std::setw(8) << "elements"
        << "  chained: max|d|  ulp  differ  own: max|d|  ulp  differ   lost  fp16 0  would move  "
           "vs fp32\n";
  for (const TraceEntry& entry : c.entries) {
    const std::string& name = entry.name;
    if (ends_with(name, " before")) continue;
    const TensorDiff chained_diff = diff_tensors(g.at(name), entry.value);
    const TensorDiff own = diff_tensors(f.at(name), entry.value);
    table << std::left << std::setw(18) << name << std::right << std::setw(8) << entry.value.numel()
          << "  " << cell(chained_diff) << "    " << cell(own);
    if (ends_with(name, " grad")) {
      const std::string parameter = name.substr(0, name.size() - 5);
      const Tensor& w = c.at(parameter + " before");
      // The update multiplies the scaled gradient by 1 / scale.
      const LostUpdates lost = lost_updates(w, entry.value, kRecipeLr / loss_scale);
      const Underflow flushed = underflow(entry.value, r.at(name), w, kRecipeLr);
      const double error = relative_error(entry.value, r.at(name), loss_scale);
      table << std::setw(7) << std::setprecision(2)
            << (lost.nonzero ? double(lost.lost) / double(lost.nonzero) : 0.0) << std::setw(8)
            << flushed.flushed << std::setw(12) << flushed.would_move << std::setw(10) << error;
      // With a loss scale that keeps the gradients above fp16's subnormals, each is its fp32
      // value to a few fp16 roundings: under 1% on the emulator. At scale 1 the first
      // convolution's is a third off, its input gradient flushed.
      if (loss_scale >= 1024.0f) BOOST_TEST(error < 0.02, name << " against fp32");
    } else if (ends_with(name, " dx") || name == "dlogits") {
      table << std::setw(15) << underflow(entry.value, r.at(name), Tensor(), 0.0f).flushed
            << std::setw(22) << relative_error(entry.value, r.at(name), loss_scale);
    }
    table << "\n";

    if (ends_with(name, " updated")) {
      // One kernel, the same fp32 arithmetic on both sides; a GPU may contract w - lr * g into
      // an FMA, one fp32 rounding less, which can move the fp16 result by one ulp.
      BOOST_TEST(own.max_ulp <= 1, name << " from the same gradients");
      // A step moves a weight by lr * g, mostly under half its ulp (the "lost" column), so
      // gradients that differ by their roundings, or by one example's share where a ReLU
      // near zero flips, move it by a rounding or two; 2^-14 is 6x the largest difference
      // seen on the emulator at steps 1 and 11.
      BOOST_TEST(chained_diff.max_abs <= std::ldexp(1.0, -14), name);
    } else if (kEmulated || cudnn.count(name) == 0) {
      // One fp32 sum in another order, rounded once: 1 ulp; the bias a cuDNN convolution adds
      // to its rounded result (a second rounding): 1 more. Where a sum cancels, the orders'
      // fp32 difference (about terms x 2^-24 x the sum of |terms|) outgrows the result's ulp:
      // 2^-20 absolute covers the second convolution's 500 terms.
      BOOST_TEST(count_apart(f.at(name), entry.value, 2, std::ldexp(1.0, -20)) == 0,
                 name << " from the same inputs");
    }
  }
  BOOST_TEST_MESSAGE("O3 step " << step + 1 << " (lr " << kRecipeLr << ", loss scale " << loss_scale
                                << "), CPU against " << Device::cuda(0).str() << ":\n"
                                << table.str());
#ifdef ALLOY_HAVE_CUDA
  BOOST_TEST_MESSAGE("convolution algorithms:\n" << cuda::conv2d_algorithm_report(Device::cuda(0)));
#endif
}

#ifdef ALLOY_HAVE_CUDA
// Whether conv2d_algorithm_report's plan of input shape `x` ran `name` in `direction`.
bool ran_algorithm(const std::string& report, const Shape& x, const std::string& direction,
                   const std::string& name) {
  const std::string words = direction == "forward" ? "forward"
                            : direction == "data"  ? "input gradient"
                                                   : "filter gradient";
  std::istringstream lines(report);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(" x " + shape_str(x) + " ") != std::string::npos)
      return line.find(" " + words + " " + name + ";") != std::string::npos;
  }
  return false;
}
#endif

}  // namespace

BOOST_AUTO_TEST_SUITE(o3_step_gpu)

// Step 1 starts from zero biases (a cuDNN convolution's separate bias add is then exact); step
// 11 from the CPU's weights after 10 steps, at O3's loss scale 1 and at 1024.
BOOST_AUTO_TEST_CASE(one_o3_step_op_by_op_on_the_cpu_and_the_device) {
  const data::Dataset set = recipe_training_set();
#if defined(ALLOY_HAVE_CUDA) && !defined(ALLOY_CUDA_EMULATOR)
  // As `alloy train` chooses (--conv-algorithms measured). The emulator's measurements time
  // host threads, which would change its table from run to run: it keeps the heuristic order.
  cuda::set_conv_algorithm_choice(cuda::ConvAlgorithmChoice::measured);
#endif
  compare_step(set, 0, 1.0f);
  compare_step(set, 10, 1.0f);
  compare_step(set, 10, 1024.0f);
#ifdef ALLOY_HAVE_CUDA
  cuda::set_conv_algorithm_choice(cuda::ConvAlgorithmChoice::heuristic);
#endif
}

BOOST_AUTO_TEST_CASE(twenty_o3_steps_from_one_start) {
  const data::Dataset set = recipe_training_set();
  RecipeModel cpu = make_recipe_lenet(amp::OptLevel::O3, Device::cpu());
  RecipeModel gpu = copy_of(cpu, amp::OptLevel::O3, Device::cuda(0));
  Tensor cpu_tally = make_step_tally(Device::cpu());
  Tensor gpu_tally = make_step_tally(Device::cuda(0));
  std::ostringstream table;
  table << "step  loss cpu  loss gpu";
  for (const nn::Parameter* p : cpu.model->parameters())
    table << std::setw(24) << p->name;
  table << "\n";
  double cpu_sum = 0.0, gpu_sum = 0.0;  // the tallies' running sums of loss x rows
  for (std::int64_t step = 0; step < 20; ++step) {
    const Batch host = recipe_batch(set, step, Device::cpu());
    const Batch device = recipe_batch(set, step, Device::cuda(0));
    app::train_step(*cpu.model, *cpu.precision, host.images, host.labels, cpu_tally);
    app::train_step(*gpu.model, *gpu.precision, device.images, device.labels, gpu_tally);
    const double cpu_loss = (read_step_tally(cpu_tally).loss_sum - cpu_sum) / kRecipeBatch;
    const double gpu_loss = (read_step_tally(gpu_tally).loss_sum - gpu_sum) / kRecipeBatch;
    cpu_sum += cpu_loss * kRecipeBatch;
    gpu_sum += gpu_loss * kRecipeBatch;
    // The losses are means over 256 examples in fp32 from logits a few fp16 ulp apart.
    BOOST_TEST(std::fabs(cpu_loss - gpu_loss) <= 1e-3, "step " << step + 1);
    table << std::setw(4) << step + 1 << std::setprecision(5) << std::setw(10) << cpu_loss
          << std::setw(10) << gpu_loss;
    const auto params = cpu.model->parameters();
    const auto gpu_params = gpu.model->parameters();
    for (std::size_t i = 0; i < params.size(); ++i) {
      const TensorDiff d = diff_tensors(to_host(gpu_params[i]->value), params[i]->value);
      std::ostringstream part;
      part << d.differing << "/" << d.count << " " << std::setprecision(2) << d.max_abs;
      table << std::setw(24) << part.str();
    }
    table << "\n";
  }
  BOOST_TEST_MESSAGE("O3 weights, CPU against " << Device::cuda(0).str()
                                                << " (differing/elements max|d|):\n"
                                                << table.str());
}

#ifdef ALLOY_HAVE_CUDA
// Each convolution algorithm the device offers for the O3 step's f16 convolutions, one layer
// and direction at a time (the rest on their heuristic first choice), on the CPU's inputs: the
// op's own difference from the CPU.
BOOST_AUTO_TEST_CASE(every_convolution_algorithm_on_the_o3_step) {
  const data::Dataset set = recipe_training_set();
  const std::int64_t step = 10;
  const RecipeModel start = trained_cpu_model(set, step);
  RecipeModel cpu = copy_of(start, amp::OptLevel::O3, Device::cpu());
  const Batch host = recipe_batch(set, step, Device::cpu());
  const Batch device = recipe_batch(set, step, Device::cuda(0));
  const StepTrace c = traced_step(cpu, host);

  // Each convolution's layer, geometry and candidates per direction.
  struct Conv {
    std::string layer;
    Shape x;
    std::map<std::string, cuda::ConvCandidates> directions;
  };
  std::vector<Conv> convs;
  for (std::size_t i = 1; i < c.entries.size(); ++i) {
    const std::string& name = c.entries[i].name;
    if (!ends_with(name, " conv2d y")) continue;
    Conv conv{name.substr(0, name.find(' ')), c.entries[i - 1].value.shape(), {}};
    const Shape w = c.at(conv.layer + ".weight before").shape();
    const cpu::Conv2dGeometry g = conv2d_geometry(conv.x, w, {});
    for (const char* direction : {"forward", "data", "filter"}) {
      const bool has_dx = direction != std::string("data") || conv.layer != "0";
      if (has_dx)
        conv.directions[direction] =
            cuda::conv2d_candidates(Device::cuda(0), DType::f16, g, direction);
    }
    convs.push_back(conv);
  }
  const auto choice_line = [](const cuda::ConvCandidates& candidates,
                              const cuda::AlgorithmOffer& offer) {
    return cuda::conv_algorithm_key_text(candidates.key) + "\t" + std::to_string(offer.algo) +
           "\t" + std::to_string(offer.math_type) + "\n";
  };
  const std::map<std::string, std::string> result_of = {
      {"forward", " conv2d y"}, {"data", " conv2d dx"}, {"filter", ".weight grad"}};

  std::ostringstream table;
  table << "layer direction  algorithm                                            own: max|d|  ulp "
           " differ\n";
  for (const Conv& conv : convs) {
    for (const auto& [direction, candidates] : conv.directions) {
      for (const cuda::AlgorithmOffer& offer : candidates.offers) {
        // This offer here, every other direction of every convolution its first candidate.
        std::string lines;
        for (const Conv& other : convs) {
          for (const auto& [d, list] : other.directions) {
            const bool forced = &other == &conv && d == direction;
            lines += choice_line(list, forced ? offer : list.offers.front());
          }
        }
        cuda::reset_conv_algorithms();
        cuda::conv2d_forget_plans(Device::cuda(0));
        cuda::load_conv_algorithms(lines, "o3_step_gpu_test");
        cuda::set_conv_algorithm_choice(cuda::ConvAlgorithmChoice::measured);
        RecipeModel fed = copy_of(start, amp::OptLevel::O3, Device::cuda(0));
        const StepTrace f = traced_step(fed, device, &c);
        const std::string report = cuda::conv2d_algorithm_report(Device::cuda(0));
        const bool ran = ran_algorithm(report, conv.x, direction, offer.name);
        table << std::setw(5) << conv.layer << " " << std::left << std::setw(10) << direction
              << std::setw(53) << offer.name << std::right;
        // The emulator runs every offer; a GPU's cuDNN may refuse one it offered when it runs.
        if (kEmulated) BOOST_TEST(ran, conv.layer << " " << direction << " ran " << offer.name);
        if (!ran) {
          table << "  did not run\n";
          continue;
        }
        const std::string result = conv.layer + result_of.at(direction);
        if (kEmulated) {  // compare_step's bound
          BOOST_TEST(count_apart(f.at(result), c.at(result), 2, std::ldexp(1.0, -20)) == 0,
                     result << " by " << offer.name);
        }
        table << cell(diff_tensors(f.at(result), c.at(result))) << "\n";
      }
    }
  }
  cuda::reset_conv_algorithms();
  cuda::conv2d_forget_plans(Device::cuda(0));
  cuda::set_conv_algorithm_choice(cuda::ConvAlgorithmChoice::heuristic);
  BOOST_TEST_MESSAGE("O3 step " << step + 1 << ", each f16 convolution algorithm of "
                                << Device::cuda(0).str() << " against the CPU:\n"
                                << table.str());
}
#endif

BOOST_AUTO_TEST_SUITE_END()
