#include "core/ops/conv2d.h"

#include <boost/test/unit_test.hpp>
#include <string>

#include "core/thread_pool.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

Conv2dParams make_params(int sh, int sw, int ph, int pw) {
  Conv2dParams p;
  p.stride_h = sh;
  p.stride_w = sw;
  p.pad_h = ph;
  p.pad_w = pw;
  return p;
}

struct ConvCase {
  const char* name;
  Shape x, w;
  Conv2dParams params;
  bool bias;
};

// With the suite's two threads: batches below, at and above the thread count; chunks with
// several images per GEMM (tiny outputs); output rows and columns lying wholly in the padding.
const ConvCase kCases[] = {
    {"3x2 kernel", {3, 2, 5, 6}, {3, 2, 3, 2}, make_params(1, 1, 0, 0), true},
    {"strided padded non-square", {2, 3, 7, 5}, {4, 3, 3, 3}, make_params(2, 1, 1, 2), false},
    {"one image", {1, 2, 6, 6}, {2, 2, 3, 3}, make_params(1, 1, 1, 1), true},
    {"stride past the kernel", {5, 2, 9, 8}, {3, 2, 2, 2}, make_params(3, 3, 0, 0), true},
    {"padding wider than the kernel", {2, 1, 4, 5}, {2, 1, 2, 2}, make_params(1, 2, 2, 2), true},
    {"1x1 outputs", {5, 3, 3, 3}, {4, 3, 3, 3}, make_params(1, 1, 0, 0), true},
    {"2x3 outputs", {7, 2, 3, 4}, {3, 2, 2, 2}, make_params(1, 1, 0, 0), false},
    {"one channel like conv1", {3, 1, 10, 10}, {4, 1, 3, 3}, make_params(1, 1, 0, 0), true},
};

std::string describe(const ConvCase& c, DType dtype) {
  return std::string(c.name) + " " + dtype_name(dtype);
}

// Naive float64 convolution and its gradients, straight from the definition.
class Reference {
 public:
  Reference(const Shape& x, const Shape& w, const Conv2dParams& p)
      : n_(x[0]), c_(x[1]), h_(x[2]), w_(x[3]), k_(w[0]), r_(w[2]), s_(w[3]), p_(p) {
    out_h_ = (h_ + 2 * p.pad_h - r_) / p.stride_h + 1;
    out_w_ = (w_ + 2 * p.pad_w - s_) / p.stride_w + 1;
  }

  Shape y_shape() const { return {n_, k_, out_h_, out_w_}; }

  std::vector<double> forward(const std::vector<double>& x, const std::vector<double>& w,
                              const std::vector<double>& b) const {
    std::vector<double> y(static_cast<std::size_t>(shape_numel(y_shape())), 0.0);
    visit([&](std::size_t yi, std::size_t xi, std::size_t wi, std::size_t k) {
      y[yi] += x[xi] * w[wi];
      (void)k;
    });
    if (!b.empty()) {
      for (std::size_t i = 0; i < y.size(); ++i) {
        y[i] += b[(i / static_cast<std::size_t>(out_h_ * out_w_)) % static_cast<std::size_t>(k_)];
      }
    }
    return y;
  }

  struct Grads {
    std::vector<double> dx, dw, db;
  };

  Grads backward(const std::vector<double>& x, const std::vector<double>& w,
                 const std::vector<double>& dy) const {
    Grads g;
    g.dx.assign(static_cast<std::size_t>(n_ * c_ * h_ * w_), 0.0);
    g.dw.assign(static_cast<std::size_t>(k_ * c_ * r_ * s_), 0.0);
    g.db.assign(static_cast<std::size_t>(k_), 0.0);
    visit([&](std::size_t yi, std::size_t xi, std::size_t wi, std::size_t) {
      g.dx[xi] += dy[yi] * w[wi];
      g.dw[wi] += dy[yi] * x[xi];
    });
    for (std::size_t i = 0; i < dy.size(); ++i) {
      g.db[(i / static_cast<std::size_t>(out_h_ * out_w_)) % static_cast<std::size_t>(k_)] += dy[i];
    }
    return g;
  }

 private:
  // Calls f(y index, x index, w index, k) for every product in the convolution.
  template <class F>
  void visit(const F& f) const {
    for (std::int64_t n = 0; n < n_; ++n)
      for (std::int64_t k = 0; k < k_; ++k)
        for (std::int64_t oh = 0; oh < out_h_; ++oh)
          for (std::int64_t ow = 0; ow < out_w_; ++ow)
            for (std::int64_t c = 0; c < c_; ++c)
              for (std::int64_t r = 0; r < r_; ++r)
                for (std::int64_t s = 0; s < s_; ++s) {
                  const std::int64_t ih = oh * p_.stride_h - p_.pad_h + r;
                  const std::int64_t iw = ow * p_.stride_w - p_.pad_w + s;
                  if (ih < 0 || ih >= h_ || iw < 0 || iw >= w_) continue;
                  f(static_cast<std::size_t>(((n * k_ + k) * out_h_ + oh) * out_w_ + ow),
                    static_cast<std::size_t>(((n * c_ + c) * h_ + ih) * w_ + iw),
                    static_cast<std::size_t>(((k * c_ + c) * r_ + r) * s_ + s),
                    static_cast<std::size_t>(k));
                }
  }

  std::int64_t n_, c_, h_, w_, k_, r_, s_, out_h_, out_w_;
  Conv2dParams p_;
};

std::vector<double> plus(std::vector<double> a, const std::vector<double>& b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    a[i] += b[i];
  return a;
}

// Absolute slack for fp32 accumulation on top of the dtype's relative rounding.
constexpr double kAtol = 1e-5;

struct TwoThreads {
  TwoThreads() { set_cpu_threads(2); }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(conv2d, TwoThreads)

BOOST_AUTO_TEST_CASE(output_shape_follows_the_floor_formula) {
  for (const ConvCase& c : kCases) {
    const Shape y = conv2d_output_shape(c.x, c.w, c.params);
    BOOST_TEST((y == Reference(c.x, c.w, c.params).y_shape()), c.name);
  }
  BOOST_TEST((conv2d_output_shape({2, 3, 8, 7}, {5, 3, 3, 2}, make_params(2, 3, 1, 0)) ==
              Shape{2, 5, (8 + 2 - 3) / 2 + 1, (7 - 2) / 3 + 1}));
}

BOOST_AUTO_TEST_CASE(forward_matches_float64_reference) {
  Generator generator(1);
  for (const DType dtype : kFloatTypes) {
    for (const ConvCase& c : kCases) {
      const Tensor x = random_tensor(c.x, dtype, generator);
      const Tensor w = random_tensor(c.w, dtype, generator);
      const Tensor b = c.bias ? random_tensor({c.w[0]}, dtype, generator) : Tensor();
      const Reference reference(c.x, c.w, c.params);
      const Tensor y = conv2d_forward(x, w, b, c.params);
      BOOST_TEST((y.shape() == reference.y_shape()));
      BOOST_TEST((y.dtype() == dtype));
      const auto expected = reference.forward(to_doubles(x), to_doubles(w),
                                              c.bias ? to_doubles(b) : std::vector<double>{});
      check_close(y, expected, dtype_tolerance(dtype), kAtol, "y " + describe(c, dtype));
    }
  }
}

BOOST_AUTO_TEST_CASE(backward_matches_central_differences) {
  Generator generator(2);
  for (const ConvCase& c : kCases) {
    Tensor x = random_tensor(c.x, DType::f32, generator);
    Tensor w = random_tensor(c.w, DType::f32, generator);
    Tensor b = c.bias ? random_tensor({c.w[0]}, DType::f32, generator) : Tensor();
    const Reference reference(c.x, c.w, c.params);
    const Tensor dy = random_tensor(reference.y_shape(), DType::f32, generator);
    const auto weights = to_doubles(dy);
    const auto loss = [&] { return weighted_sum(conv2d_forward(x, w, b, c.params), weights); };
    // The loss is linear in each input, so a large step loses nothing to truncation and keeps
    // the fp32 rounding of the loss small next to the difference.
    constexpr float step = 0.25f;
    const auto numerical_dx = numerical_gradient(loss, x, step);
    const auto numerical_dw = numerical_gradient(loss, w, step);

    // Existing gradients are added to, not overwritten.
    Tensor dw = random_tensor(c.w, DType::f32, generator);
    Tensor db = c.bias ? random_tensor({c.w[0]}, DType::f32, generator) : Tensor();
    const auto dw_before = to_doubles(dw);
    const auto db_before = c.bias ? to_doubles(db) : std::vector<double>{};
    const Conv2dGrads grads = conv2d_backward(x, w, dy, dw, db, c.params, true);
    BOOST_TEST_REQUIRE(grads.dx.defined());
    BOOST_TEST((grads.dx.shape() == c.x));
    const std::string what = describe(c, DType::f32);
    check_close(grads.dx, numerical_dx, 1e-4, 1e-4, "dx vs central differences " + what);
    check_close(dw, plus(dw_before, numerical_dw), 1e-4, 1e-4, "dw vs central differences " + what);
    const auto exact = reference.backward(to_doubles(x), to_doubles(w), weights);
    check_close(grads.dx, exact.dx, 1e-5, kAtol, "dx vs float64 " + what);
    check_close(dw, plus(dw_before, exact.dw), 1e-5, kAtol, "dw vs float64 " + what);
    if (c.bias) {
      const auto numerical_db = numerical_gradient(loss, b, step);
      check_close(db, plus(db_before, numerical_db), 1e-4, 1e-4,
                  "db vs central differences " + what);
    }
  }
}

BOOST_AUTO_TEST_CASE(half_backward_matches_float64_reference) {
  Generator generator(3);
  for (const DType dtype : {DType::f16, DType::bf16}) {
    for (const ConvCase& c : kCases) {
      const Tensor x = random_tensor(c.x, dtype, generator);
      const Tensor w = random_tensor(c.w, dtype, generator);
      const Reference reference(c.x, c.w, c.params);
      const Tensor dy = random_tensor(reference.y_shape(), dtype, generator);
      Tensor dw = random_tensor(c.w, dtype, generator);
      Tensor db = random_tensor({c.w[0]}, dtype, generator);
      const auto dw_before = to_doubles(dw);
      const auto db_before = to_doubles(db);
      const Conv2dGrads grads = conv2d_backward(x, w, dy, dw, db, c.params, true);
      BOOST_TEST((grads.dx.dtype() == dtype));
      const auto exact = reference.backward(to_doubles(x), to_doubles(w), to_doubles(dy));
      const std::string what = describe(c, dtype);
      const double rtol = dtype_tolerance(dtype);
      check_close(grads.dx, exact.dx, rtol, kAtol, "dx " + what);
      check_close(dw, plus(dw_before, exact.dw), rtol, kAtol, "dw " + what);
      check_close(db, plus(db_before, exact.db), rtol, kAtol, "db " + what);
    }
  }
}

BOOST_AUTO_TEST_CASE(lenet_layers_match_float64_reference) {
  Generator generator(4);
  struct Layer {
    Shape x, w;
  };
  for (const Layer& layer :
       {Layer{{5, 1, 28, 28}, {20, 1, 3, 3}}, Layer{{5, 20, 13, 13}, {50, 20, 5, 5}}}) {
    const Conv2dParams p;
    const Tensor x = random_tensor(layer.x, DType::f32, generator);
    const Tensor w = random_tensor(layer.w, DType::f32, generator);
    const Tensor b = random_tensor({layer.w[0]}, DType::f32, generator);
    const Reference reference(layer.x, layer.w, p);
    const Tensor dy = random_tensor(reference.y_shape(), DType::f32, generator);
    const auto xs = to_doubles(x), ws = to_doubles(w), dys = to_doubles(dy);
    check_close(conv2d_forward(x, w, b, p), reference.forward(xs, ws, to_doubles(b)), 1e-5, 1e-4,
                "lenet y " + shape_str(layer.w));
    Tensor dw = Tensor::zeros(layer.w, DType::f32);
    Tensor db = Tensor::zeros({layer.w[0]}, DType::f32);
    const Conv2dGrads grads = conv2d_backward(x, w, dy, dw, db, p, true);
    const auto exact = reference.backward(xs, ws, dys);
    check_close(grads.dx, exact.dx, 1e-5, 1e-4, "lenet dx " + shape_str(layer.w));
    // The second layer's gradients sum in Winograd's transform domain (conv2d_winograd_5x5.h),
    // whose rounding grows with each weight's sum of |products| (405 of them, about 100 here;
    // measured up to 2e-6 of it), not with the result.
    check_close(dw, exact.dw, 1e-5, 4e-4, "lenet dw " + shape_str(layer.w));
    check_close(db, exact.db, 1e-5, 1e-4, "lenet db " + shape_str(layer.w));
  }
}

BOOST_AUTO_TEST_CASE(need_dx_false_skips_dx_only) {
  Generator generator(5);
  for (const DType dtype : kFloatTypes) {
    const ConvCase& c = kCases[1];
    const Tensor x = random_tensor(c.x, dtype, generator);
    const Tensor w = random_tensor(c.w, dtype, generator);
    const Tensor dy = random_tensor(conv2d_output_shape(c.x, c.w, c.params), dtype, generator);
    Tensor dw_with = Tensor::zeros(c.w, dtype), db_with = Tensor::zeros({c.w[0]}, dtype);
    Tensor dw_without = Tensor::zeros(c.w, dtype), db_without = Tensor::zeros({c.w[0]}, dtype);
    const Conv2dGrads with = conv2d_backward(x, w, dy, dw_with, db_with, c.params, true);
    const Conv2dGrads without = conv2d_backward(x, w, dy, dw_without, db_without, c.params, false);
    BOOST_TEST(with.dx.defined());
    BOOST_TEST(!without.dx.defined());
    BOOST_TEST(same_bits(dw_with, dw_without), dtype_name(dtype));
    BOOST_TEST(same_bits(db_with, db_without), dtype_name(dtype));
  }
}

BOOST_AUTO_TEST_CASE(batch_below_and_above_the_thread_count) {
  Generator generator(6);
  for (const int threads : {1, 3}) {
    set_cpu_threads(threads);
    for (const std::int64_t batch : {1, 2, 7}) {
      const Shape xs{batch, 3, 6, 5}, ws{4, 3, 3, 3};
      const Conv2dParams p = make_params(1, 2, 1, 1);
      const Tensor x = random_tensor(xs, DType::f32, generator);
      const Tensor w = random_tensor(ws, DType::f32, generator);
      const Tensor b = random_tensor({4}, DType::f32, generator);
      const Reference reference(xs, ws, p);
      const Tensor dy = random_tensor(reference.y_shape(), DType::f32, generator);
      const std::string what =
          "batch " + std::to_string(batch) + " threads " + std::to_string(threads);
      check_close(conv2d_forward(x, w, b, p),
                  reference.forward(to_doubles(x), to_doubles(w), to_doubles(b)), 1e-5, kAtol,
                  "y " + what);
      Tensor dw = Tensor::zeros(ws, DType::f32), db = Tensor::zeros({4}, DType::f32);
      const Conv2dGrads grads = conv2d_backward(x, w, dy, dw, db, p, true);
      const auto exact = reference.backward(to_doubles(x), to_doubles(w), to_doubles(dy));
      check_close(grads.dx, exact.dx, 1e-5, kAtol, "dx " + what);
      check_close(dw, exact.dw, 1e-5, kAtol, "dw " + what);
      check_close(db, exact.db, 1e-5, kAtol, "db " + what);
    }
  }
}

BOOST_AUTO_TEST_CASE(same_inputs_give_the_same_bits) {
  Generator generator(7);
  for (const DType dtype : kFloatTypes) {
    const Shape xs{9, 4, 12, 11}, ws{6, 4, 3, 3};
    const Conv2dParams p = make_params(1, 1, 1, 1);
    const Tensor x = random_tensor(xs, dtype, generator);
    const Tensor w = random_tensor(ws, dtype, generator);
    const Tensor b = random_tensor({6}, dtype, generator);
    const Tensor dy = random_tensor(conv2d_output_shape(xs, ws, p), dtype, generator);
    Tensor dw[2], db[2];
    Conv2dGrads grads[2];
    Tensor y[2];
    for (int run = 0; run < 2; ++run) {
      y[run] = conv2d_forward(x, w, b, p);
      dw[run] = Tensor::zeros(ws, dtype);
      db[run] = Tensor::zeros({6}, dtype);
      grads[run] = conv2d_backward(x, w, dy, dw[run], db[run], p, true);
    }
    BOOST_TEST(same_bits(y[0], y[1]), dtype_name(dtype));
    BOOST_TEST(same_bits(grads[0].dx, grads[1].dx), dtype_name(dtype));
    BOOST_TEST(same_bits(dw[0], dw[1]), dtype_name(dtype));
    BOOST_TEST(same_bits(db[0], db[1]), dtype_name(dtype));
  }
}

BOOST_AUTO_TEST_CASE(rejects_bad_shapes_dtypes_and_params) {
  const Tensor x = Tensor::zeros({2, 3, 6, 6}, DType::f32);
  const Tensor w = Tensor::zeros({4, 3, 3, 3}, DType::f32);
  const Tensor b = Tensor::zeros({4}, DType::f32);
  const Conv2dParams ok;
  const auto names_op = [](const Error& error) {
    return std::string(error.what()).find("conv2d") != std::string::npos;
  };
  BOOST_CHECK_EXCEPTION(conv2d_forward(Tensor::zeros({3, 6, 6}, DType::f32), w, b, ok), Error,
                        names_op);
  BOOST_CHECK_EXCEPTION(conv2d_forward(x, Tensor::zeros({4, 2, 3, 3}, DType::f32), b, ok), Error,
                        names_op);
  BOOST_CHECK_EXCEPTION(conv2d_forward(x, Tensor::zeros({4, 3, 3, 3}, DType::f16), b, ok), Error,
                        names_op);
  BOOST_CHECK_EXCEPTION(conv2d_forward(Tensor::zeros({2, 3, 6, 6}, DType::u8),
                                       Tensor::zeros({4, 3, 3, 3}, DType::u8), Tensor(), ok),
                        Error, names_op);
  BOOST_CHECK_EXCEPTION(conv2d_forward(x, w, Tensor::zeros({3}, DType::f32), ok), Error, names_op);
  BOOST_CHECK_EXCEPTION(conv2d_forward(x, Tensor::zeros({4, 3, 7, 3}, DType::f32), b, ok), Error,
                        names_op);
  BOOST_CHECK_EXCEPTION(conv2d_forward(x, w, b, make_params(0, 1, 0, 0)), Error, names_op);
  BOOST_CHECK_EXCEPTION(conv2d_forward(x, w, b, make_params(1, 1, -1, 0)), Error, names_op);
  BOOST_CHECK_EXCEPTION(conv2d_forward(Tensor::zeros({0, 3, 6, 6}, DType::f32), w, b, ok), Error,
                        names_op);

  const Tensor dy = Tensor::zeros({2, 4, 4, 4}, DType::f32);
  Tensor dw = Tensor::zeros({4, 3, 3, 3}, DType::f32);
  Tensor db = Tensor::zeros({4}, DType::f32);
  Tensor bad_dw = Tensor::zeros({4, 3, 3, 2}, DType::f32);
  Tensor half_db = Tensor::zeros({4}, DType::f16);
  BOOST_CHECK_EXCEPTION(
      conv2d_backward(x, w, Tensor::zeros({2, 4, 4, 5}, DType::f32), dw, db, ok, true), Error,
      names_op);
  BOOST_CHECK_EXCEPTION(conv2d_backward(x, w, dy, bad_dw, db, ok, true), Error, names_op);
  BOOST_CHECK_EXCEPTION(conv2d_backward(x, w, dy, dw, half_db, ok, true), Error, names_op);
  // A failed call leaves the gradients untouched.
  BOOST_TEST(dw.to_floats() == std::vector<float>(dw.numel(), 0.0f));
}

BOOST_AUTO_TEST_SUITE_END()
