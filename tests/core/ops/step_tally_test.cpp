// The step tally against the host arithmetic it replaces: the loss sum bit for bit with
// `sum += double(loss) * rows` in step order, the correct count with count_correct.
#include "core/ops/step_tally.h"

#include <boost/test/unit_test.hpp>
#include <cstring>

#include "core/ops/softmax_cross_entropy.h"
#include "core/random.h"
#include "core/round_trips.h"
#include "tests/support/gradcheck.h"

using namespace alloy;

namespace {

Tensor random_labels(std::int64_t rows, std::int64_t classes, Generator& generator) {
  std::vector<float> values;
  for (std::int64_t i = 0; i < rows; ++i)
    values.push_back(static_cast<float>(generator.below(static_cast<std::uint64_t>(classes))));
  return Tensor::from_floats({rows}, values, DType::i32);
}

// A random batch and its mean loss.
struct Batch {
  Tensor logits, labels, loss;
};

Batch random_batch(std::int64_t rows, std::int64_t classes, DType dtype, Generator& generator) {
  Batch batch;
  batch.logits = test::random_tensor({rows, classes}, dtype, generator);
  batch.labels = random_labels(rows, classes, generator);
  batch.loss = softmax_cross_entropy_forward(batch.logits, batch.labels).loss;
  return batch;
}

std::uint64_t bits(double value) {
  std::uint64_t out = 0;
  std::memcpy(&out, &value, sizeof out);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(step_tally)

BOOST_AUTO_TEST_CASE(sums_like_the_host_step_after_step) {
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    BOOST_TEST_CONTEXT("logits " << dtype_name(dtype)) {
      Generator generator(5);
      // A resumed epoch starts from its checkpoint's sums.
      const StepTally start{12.375, 17};
      Tensor tally = make_step_tally(Device::cpu(), start);
      double loss_sum = start.loss_sum;
      std::uint64_t correct = start.correct;
      for (const std::int64_t rows : {64, 64, 37, 1}) {
        const Tensor logits = test::random_tensor({rows, 10}, dtype, generator, -4.0f, 4.0f);
        const Tensor labels = random_labels(rows, 10, generator);
        const SoftmaxCrossEntropyResult loss = softmax_cross_entropy_forward(logits, labels);
        add_to_step_tally(tally, loss.loss, logits, labels);
        loss_sum += static_cast<double>(loss.loss.to_floats()[0]) * static_cast<double>(rows);
        correct += static_cast<std::uint64_t>(count_correct(logits, labels));
      }
      const StepTally result = read_step_tally(tally);
      BOOST_TEST(bits(result.loss_sum) == bits(loss_sum));
      BOOST_TEST(result.correct == correct);
      BOOST_TEST(result.correct > start.correct);  // the batches did count something
    }
  }
}

BOOST_AUTO_TEST_CASE(adding_reads_nothing_back_and_reading_counts_once) {
  Generator generator(9);
  Tensor tally = make_step_tally(Device::cpu());
  const Batch batch = random_batch(8, 4, DType::f16, generator);
  const std::uint64_t before = round_trips().downloads;
  for (int i = 0; i < 5; ++i)
    add_to_step_tally(tally, batch.loss, batch.logits, batch.labels);
  BOOST_TEST(round_trips().downloads == before);
  read_step_tally(tally);
  BOOST_TEST(round_trips().downloads == before + 1);
}

BOOST_AUTO_TEST_CASE(wrong_inputs_name_the_problem) {
  Generator generator(3);
  Tensor tally = make_step_tally(Device::cpu());
  const auto [logits, labels, loss] = random_batch(4, 3, DType::f32, generator);
  Tensor small = Tensor::zeros({2}, DType::i32);
  const auto names = [](const char* text) {
    return [text](const Error& error) {
      BOOST_TEST_MESSAGE(error.what());
      return std::string(error.what()).find(text) != std::string::npos;
    };
  };
  BOOST_CHECK_EXCEPTION(add_to_step_tally(small, loss, logits, labels), Error, names("tally"));
  BOOST_CHECK_EXCEPTION(add_to_step_tally(tally, logits, logits, labels), Error, names("loss"));
  BOOST_CHECK_EXCEPTION(add_to_step_tally(tally, loss, logits, random_labels(3, 3, generator)),
                        Error, names("labels"));
  BOOST_CHECK_EXCEPTION(read_step_tally(small), Error, names("tally"));
}

BOOST_AUTO_TEST_SUITE_END()
