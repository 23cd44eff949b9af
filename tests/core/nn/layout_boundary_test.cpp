// Layout regions (nn::EnterLayout ... nn::LeaveLayout, Module::set_layout): the boundaries'
// permutes against element positions computed here, and a small convolution net and resnet18
// run channels-last against the same net run NCHW. On the CPU an NHWC op permutes to NCHW and
// back, so the two must agree bit for bit: outputs, input and parameter gradients, running
// statistics, in f32, f16 and bf16.
#include "core/nn/layout_boundary.h"

#include <boost/test/unit_test.hpp>
#include <memory>
#include <vector>

#include "core/models/zoo.h"
#include "tests/core/nn/layout_nets.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

void check_same(const Run& nhwc, const Run& nchw) {
  BOOST_TEST(same_bits(nhwc.y, nchw.y));
  BOOST_TEST(nhwc.dx.defined() == nchw.dx.defined());
  if (nchw.dx.defined()) BOOST_TEST(same_bits(nhwc.dx, nchw.dx));
  BOOST_REQUIRE_EQUAL(nhwc.grads.size(), nchw.grads.size());
  for (std::size_t i = 0; i < nchw.grads.size(); ++i)
    BOOST_TEST(same_bits(nhwc.grads[i], nchw.grads[i]));
  for (std::size_t i = 0; i < nchw.buffers.size(); ++i)
    BOOST_TEST(same_bits(nhwc.buffers[i], nchw.buffers[i]));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(layout_boundary)

BOOST_AUTO_TEST_CASE(the_boundaries_permute_under_nhwc_and_pass_through_under_nchw) {
  Generator generator(3);
  const Tensor x = random_tensor({2, 3, 4, 5}, DType::f32, generator);
  nn::EnterLayout enter;
  nn::LeaveLayout leave;
  BOOST_TEST(same_bits(enter.forward(x), x));
  BOOST_TEST(same_bits(leave.backward(x), x));
  enter.set_layout(Layout::nhwc);
  leave.set_layout(Layout::nhwc);
  const Tensor nhwc = enter.forward(x);
  BOOST_TEST((nhwc.shape() == Shape{2, 4, 5, 3}));
  const std::vector<double> in = to_doubles(x), out = to_doubles(nhwc);
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 3; ++c)
      for (int h = 0; h < 4; ++h)
        for (int w = 0; w < 5; ++w)
          BOOST_TEST(out[((n * 4 + h) * 5 + w) * 3 + c] == in[((n * 3 + c) * 4 + h) * 5 + w]);
  BOOST_TEST(same_bits(leave.forward(nhwc), x));
  BOOST_TEST(same_bits(enter.backward(nhwc), x));
  BOOST_TEST(same_bits(leave.backward(x), nhwc));
  BOOST_TEST(!enter.backward(Tensor()).defined());
}

BOOST_AUTO_TEST_CASE(one_channel_and_one_pixel_are_reshaped_not_permuted) {
  Generator generator(4);
  nn::EnterLayout enter;
  enter.set_layout(Layout::nhwc);
  const Tensor image = random_tensor({2, 1, 3, 3}, DType::f32, generator);
  const Tensor reshaped = enter.forward(image);
  BOOST_TEST((reshaped.shape() == Shape{2, 3, 3, 1}));
  BOOST_TEST(reshaped.raw() == image.raw());  // a view of the same storage
  nn::LeaveLayout leave;
  leave.set_layout(Layout::nhwc);
  const Tensor pooled = random_tensor({2, 1, 1, 7}, DType::f32, generator);
  const Tensor back = leave.forward(pooled);
  BOOST_TEST((back.shape() == Shape{2, 7, 1, 1}));
  BOOST_TEST(back.raw() == pooled.raw());
}

BOOST_AUTO_TEST_CASE(a_net_run_channels_last_equals_it_run_nchw_bit_for_bit) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    BOOST_TEST_CONTEXT(dtype_name(dtype)) {
      Generator generator(11);
      const Tensor x = random_tensor({4, 3, 8, 8}, dtype, generator);
      const Tensor dy = random_tensor({4, 5}, dtype, generator);
      auto nchw = layout_net(7);
      auto nhwc = layout_net(7);
      BOOST_TEST(nhwc->has_layout_region());
      if (dtype != DType::f32) {
        nchw->cast_parameters(dtype, /*keep_norm_fp32=*/true);
        nhwc->cast_parameters(dtype, /*keep_norm_fp32=*/true);
      }
      const auto params = nchw->parameters();
      const auto twins = nhwc->parameters();
      for (std::size_t i = 0; i < params.size(); ++i)
        twins[i]->value.copy_from(params[i]->value);
      nhwc->set_layout(Layout::nhwc);
      check_same(run_step(*nhwc, x, dy), run_step(*nchw, x, dy));
      nchw->set_training(false);
      nhwc->set_training(false);
      BOOST_TEST(same_bits(nhwc->forward(x), nchw->forward(x)));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_first_layer_after_enter_layout_skips_its_input_gradient) {
  Generator generator(5);
  auto net = layout_net(7);
  net->set_layout(Layout::nhwc);
  net->set_needs_input_grad(false);
  const Tensor x = random_tensor({2, 3, 8, 8}, DType::f32, generator);
  net->forward(x);
  BOOST_TEST(!net->backward(random_tensor({2, 5}, DType::f32, generator)).defined());
}

BOOST_AUTO_TEST_CASE(resnet18_has_a_layout_region_and_lenet_none) {
  Generator generator(1);
  BOOST_TEST(models::make_resnet(18, generator, 10, {})->has_layout_region());
  BOOST_TEST(!models::make_lenet(generator, 10)->has_layout_region());
}

BOOST_AUTO_TEST_SUITE_END()
