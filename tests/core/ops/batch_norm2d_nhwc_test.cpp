// Channels-last batch norm on the CPU against the NCHW op on the permuted tensors: the same bits
// for every output (y, saved statistics, running statistics, dx, dweight, dbias), in every
// dtype, with and without the fused ReLU, its mask and the running update.
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "core/ops/batch_norm2d.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

// [N, C, H, W] to [N, H, W, C] (to_nhwc) or back, element by element: exact for every dtype,
// since each value goes through fp32 and back unchanged.
Tensor permuted(const Tensor& t, bool to_nhwc) {
  const Shape& s = t.shape();
  const std::int64_t n = s[0];
  const std::int64_t c = to_nhwc ? s[1] : s[3];
  const std::int64_t h = to_nhwc ? s[2] : s[1];
  const std::int64_t w = to_nhwc ? s[3] : s[2];
  const std::vector<float> in = t.to_floats();
  std::vector<float> out(in.size());
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t ch = 0; ch < c; ++ch) {
      for (std::int64_t p = 0; p < h * w; ++p) {
        const auto nchw = static_cast<std::size_t>((i * c + ch) * h * w + p);
        const auto nhwc = static_cast<std::size_t>((i * h * w + p) * c + ch);
        (to_nhwc ? out[nhwc] : out[nchw]) = to_nhwc ? in[nchw] : in[nhwc];
      }
    }
  }
  return Tensor::from_floats(to_nhwc ? Shape{n, h, w, c} : Shape{n, c, h, w}, out, t.dtype());
}

Tensor to_nhwc(const Tensor& t) {
  return permuted(t, true);
}

Tensor copy(const Tensor& t) {
  return Tensor::from_floats(t.shape(), t.to_floats(), t.dtype());
}

// NCHW shapes: C = 3, 8 and 64, planes of odd sizes, a 1x1 plane.
const Shape kShapes[] = {{3, 3, 5, 7}, {2, 8, 3, 3}, {4, 64, 3, 5}, {6, 5, 1, 1}};

}  // namespace

BOOST_AUTO_TEST_SUITE(batch_norm2d_nhwc)

BOOST_AUTO_TEST_CASE(nhwc_is_the_permuted_nchw_op_bit_for_bit) {
  Generator generator(91);
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const DType param_type : {DType::f32, dtype}) {
      for (const Shape& shape : kShapes) {
        for (const bool relu : {false, true}) {
          for (const bool update : {true, false}) {
            const std::int64_t channels = shape[1];
            const std::string what = std::string(dtype_name(dtype)) + " x " + shape_str(shape) +
                                     ", " + dtype_name(param_type) + " parameters" +
                                     (relu ? ", relu" : "") + (update ? "" : ", no update");
            const Tensor x = random_tensor(shape, dtype, generator, -2.0f, 3.0f);
            const Tensor weight = random_tensor({channels}, param_type, generator, 0.5f, 1.5f);
            const Tensor bias = random_tensor({channels}, param_type, generator);
            Tensor mean = random_tensor({channels}, param_type, generator);
            Tensor var = random_tensor({channels}, param_type, generator, 0.5f, 2.0f);
            Tensor mean_nhwc = copy(mean), var_nhwc = copy(var);
            BatchNormParams params;
            params.relu = relu;
            params.update_running_statistics = update;
            const BatchNormTrainResult nchw =
                batch_norm2d_train_forward(x, weight, bias, mean, var, params);
            params.layout = Layout::nhwc;
            const Tensor x_nhwc = to_nhwc(x);
            const BatchNormTrainResult nhwc =
                batch_norm2d_train_forward(x_nhwc, weight, bias, mean_nhwc, var_nhwc, params);
            BOOST_TEST(layout_name(nhwc.saved.layout) == std::string("nhwc"), what);
            BOOST_TEST(layout_name(nchw.saved.layout) == std::string("nchw"), what);
            BOOST_TEST(same_bits(nhwc.y, to_nhwc(nchw.y)), "train y " + what);
            BOOST_TEST(same_bits(nhwc.saved.mean, nchw.saved.mean), "saved mean " + what);
            BOOST_TEST(same_bits(nhwc.saved.invstd, nchw.saved.invstd), "saved invstd " + what);
            BOOST_TEST(same_bits(mean_nhwc, mean), "running mean " + what);
            BOOST_TEST(same_bits(var_nhwc, var), "running var " + what);

            BOOST_TEST(
                same_bits(batch_norm2d_eval_forward(x_nhwc, weight, bias, mean, var, params),
                          to_nhwc(batch_norm2d_eval_forward(x, weight, bias, mean, var,
                                                            BatchNormParams{0.1f, 1e-5f, relu}))),
                "eval y " + what);

            // dy of another dtype; the mask (the ReLU output, or none) and gradients that
            // accumulate onto random values.
            const Tensor dy = random_tensor(shape, DType::f32, generator);
            Tensor dweight = random_tensor({channels}, param_type, generator);
            Tensor dbias = random_tensor({channels}, param_type, generator);
            Tensor dweight_nhwc = copy(dweight), dbias_nhwc = copy(dbias);
            const Tensor mask = relu ? nchw.y : Tensor();
            const Tensor dx =
                batch_norm2d_backward(x, weight, dy, nchw.saved, dweight, dbias, mask);
            const Tensor dx_nhwc =
                batch_norm2d_backward(x_nhwc, weight, to_nhwc(dy), nhwc.saved, dweight_nhwc,
                                      dbias_nhwc, relu ? nhwc.y : Tensor());
            BOOST_TEST(same_bits(dx_nhwc, to_nhwc(dx)), "dx " + what);
            BOOST_TEST(same_bits(dweight_nhwc, dweight), "dweight " + what);
            BOOST_TEST(same_bits(dbias_nhwc, dbias), "dbias " + what);
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(the_channels_are_the_last_dimension) {
  // x [2, 3, 4, 5] read as NHWC has 5 channels: [3] parameters are refused, [5] taken.
  const Tensor x = Tensor::zeros({2, 3, 4, 5}, DType::f32);
  const Tensor c3 = Tensor::zeros({3}, DType::f32);
  const Tensor c5 = Tensor::from_floats({5}, std::vector<float>(5, 1.0f), DType::f32);
  Tensor mean3 = Tensor::zeros({3}, DType::f32), var3 = Tensor::zeros({3}, DType::f32);
  Tensor mean5 = Tensor::zeros({5}, DType::f32), var5 = copy(c5);
  BatchNormParams params;
  params.layout = Layout::nhwc;
  const auto names_op = [](const Error& error) {
    return std::string(error.what()).find("batch_norm2d") != std::string::npos;
  };
  BOOST_CHECK_EXCEPTION(batch_norm2d_train_forward(x, c3, c3, mean3, var3, params), Error,
                        names_op);
  BOOST_CHECK_EXCEPTION(batch_norm2d_eval_forward(x, c3, c3, mean3, var3, params), Error, names_op);
  BOOST_CHECK_EXCEPTION(
      batch_norm2d_train_forward(Tensor::zeros({24, 5}, DType::f32), c5, c5, mean5, var5, params),
      Error, names_op);
  const BatchNormTrainResult forward = batch_norm2d_train_forward(x, c5, c5, mean5, var5, params);
  BOOST_TEST(forward.y.shape() == x.shape());
  Tensor dweight = Tensor::zeros({5}, DType::f32), dbias = Tensor::zeros({5}, DType::f32);
  Tensor dweight3 = Tensor::zeros({3}, DType::f32), dbias3 = Tensor::zeros({3}, DType::f32);
  BOOST_CHECK_EXCEPTION(batch_norm2d_backward(x, c3, x, forward.saved, dweight3, dbias3), Error,
                        names_op);
  BOOST_TEST(batch_norm2d_backward(x, c5, x, forward.saved, dweight, dbias).shape() == x.shape());
}

BOOST_AUTO_TEST_SUITE_END()
