// Test helpers in the spirit of Caffe's gradient checker: random inputs, comparison against
// float64 references with a report of the worst element, and central differences.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"

namespace alloy::test {

// A host tensor of uniform values in [low, high), rounded to `dtype`.
Tensor random_tensor(const Shape& shape, DType dtype, Generator& generator, float low = -1.0f,
                     float high = 1.0f);

// The tensor's values widened to double.
std::vector<double> to_doubles(const Tensor& tensor);

// A host f32 tensor of fl(x * factor) for each element x of a host tensor of any floating dtype:
// gradients multiplied beforehand (unscaled, clipped), against an op that multiplies as it reads.
Tensor multiplied(const Tensor& tensor, float factor);

// Whether two host tensors hold the same shape, dtype and bytes (two undefined ones do).
bool same_bits(const Tensor& a, const Tensor& b);

// same_bits for floating tensors whose NaNs may carry different payloads: x86 keeps an input
// NaN's payload through arithmetic where a GPU gives its canonical NaN, and no result of Alloy's
// depends on a payload. Every other value (the sign of a zero included) must match bit for bit.
bool same_bits_but_nan_payloads(const Tensor& a, const Tensor& b);

// Checks |actual - expected| <= atol + rtol * |expected| for every element and reports, in
// one BOOST_TEST failure, the count of bad elements and the worst one with its index.
void check_close(const std::vector<double>& actual, const std::vector<double>& expected,
                 double rtol, double atol, const std::string& what);
void check_close(const Tensor& actual, const std::vector<double>& expected, double rtol,
                 double atol, const std::string& what);

// Central differences of a scalar function with respect to every element of an f32 host
// tensor: (loss(x + step e_i) - loss(x - step e_i)) / (2 step). The tensor is restored.
std::vector<double> numerical_gradient(const std::function<double()>& loss, Tensor& input,
                                       float step);

// The smooth piece of a piecewise-smooth function that its last evaluation lay in: for a
// network, say, the sign of every ReLU input and the winner of every max-pooling window.
using Piece = std::vector<std::int32_t>;

// Central differences for functions with kinks (ReLU, max pooling). After each call of `loss`,
// `piece` tells which smooth piece that call evaluated. An element whose perturbed evaluations
// leave the piece of the unperturbed one straddles a kink, where the central difference is no
// derivative, and is reported as NaN instead of a value. Unlike a test on the differences
// themselves, this misses no kink however small its jump in slope (unless a perturbation
// crosses one and back again).
std::vector<double> numerical_gradient_off_kinks(const std::function<double()>& loss,
                                                 const std::function<Piece()>& piece, Tensor& input,
                                                 float step);

// check_close over the elements whose expected value is not NaN; fails when more than
// `max_skipped_share` of them were NaN (too many kinks make the check meaningless).
void check_close_off_kinks(const std::vector<double>& actual, const std::vector<double>& expected,
                           double rtol, double atol, double max_skipped_share,
                           const std::string& what);

// sum_i y_i * weights_i in double: the scalar whose gradient with respect to y is `weights`.
double weighted_sum(const Tensor& y, const std::vector<double>& weights);

// The relative tolerance that matches a storage dtype's rounding (a few ulps).
double dtype_tolerance(DType dtype);

}  // namespace alloy::test
