#define ALLOY_GPU_SUPPORT_SOURCE
#include "tests/support/gpu.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <vector>

#include "core/backend.h"

namespace alloy::test {

RequireCuda::RequireCuda() {
  std::string reason;
  if (!cuda_available(&reason)) {
    std::cout << "SKIPPED: this test needs a usable CUDA device: " << reason << std::endl;
    std::exit(77);
  }
}

Tensor random_labels(std::int64_t count, std::int64_t classes, Generator& generator) {
  Tensor labels = Tensor::empty({count}, DType::i32);
  for (std::int64_t i = 0; i < count; ++i) {
    labels.data<std::int32_t>()[i] =
        static_cast<std::int32_t>(generator.below(static_cast<std::uint64_t>(classes)));
  }
  return labels;
}

Tensor to_cuda(const Tensor& host) {
  Tensor device = Tensor::empty(host.shape(), host.dtype(), Device::cuda(0), host.category());
  device.copy_from(host);
  return device;
}

Tensor to_host(const Tensor& device) {
  Tensor host = Tensor::empty(device.shape(), device.dtype(), Device::cpu(), device.category());
  host.copy_from(device);
  return host;
}

double gpu_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return 4.0 * std::ldexp(1.0, -11);  // 4 ulp of binary16
    case DType::bf16:
      return 4.0 * std::ldexp(1.0, -8);  // 4 ulp of bfloat16
    default:
      return 1e-4;  // fp32 reductions in another order
  }
}

namespace {
std::vector<double> as_doubles(const Tensor& host) {
  std::vector<double> values(static_cast<std::size_t>(host.numel()));
  if (host.dtype() == DType::i32) {
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = host.data<std::int32_t>()[i];
    return values;
  }
  if (host.dtype() == DType::u8) {
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = host.data<std::uint8_t>()[i];
    return values;
  }
  const std::vector<float> floats = host.to_floats();
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = floats[i];
  return values;
}
}  // namespace

namespace {
// check_gpu_close with an extra allowance per element (none when `extra` is empty).
void check_within(const Tensor& gpu, const Tensor& cpu, const std::vector<double>& extra,
                  const std::string& what, double rtol, double atol) {
  BOOST_REQUIRE_MESSAGE(gpu.device().is_cuda(),
                        what << ": expected a device tensor, got " << gpu.str());
  BOOST_REQUIRE_MESSAGE(gpu.shape() == cpu.shape() && gpu.dtype() == cpu.dtype(),
                        what << ": " << gpu.str() << " vs " << cpu.str());
  const Tensor host = to_host(gpu);
  const std::vector<double> actual = as_doubles(host);
  const std::vector<double> expected = as_doubles(cpu);
  std::size_t worst = 0, failures = 0;
  double worst_excess = 0.0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    if (std::isnan(a) && std::isnan(e)) continue;
    if (std::isinf(e) || std::isinf(a)) {
      if (a != e) {
        ++failures;
        worst = i;
        worst_excess = INFINITY;
      }
      continue;
    }
    const double allowed = atol + rtol * std::fabs(e) + (extra.empty() ? 0.0 : extra[i]);
    const double excess = std::fabs(a - e) - allowed;
    if (excess > 0.0 || std::isnan(a) != std::isnan(e)) {
      ++failures;
      if (excess > worst_excess || std::isnan(excess)) {
        worst_excess = std::isnan(excess) ? INFINITY : excess;
        worst = i;
      }
    }
  }
  std::ostringstream message;
  if (failures > 0) {
    message << what << ": " << failures << " of " << actual.size() << " elements outside rtol "
            << rtol << " atol " << atol << "; worst at " << worst << ": GPU " << actual[worst]
            << ", CPU " << expected[worst];
  }
  BOOST_CHECK_MESSAGE(failures == 0, message.str());
}
}  // namespace

void check_gpu_close(const Tensor& gpu, const Tensor& cpu, const std::string& what, double rtol,
                     double atol) {
  check_within(gpu, cpu, {}, what, rtol, atol);
}

void check_gpu_close_to_magnitude(const Tensor& gpu, const Tensor& cpu, const Tensor& magnitude,
                                  const std::string& what, double rtol, double atol, double scale) {
  BOOST_REQUIRE_MESSAGE(magnitude.device().is_cpu() && magnitude.shape() == cpu.shape(),
                        what << ": the magnitude is " << magnitude.str() << " for " << cpu.str());
  std::vector<double> extra = as_doubles(magnitude);
  for (double& value : extra)
    value = scale * std::fabs(value);
  check_within(gpu, cpu, extra, what, rtol, atol);
}

double magnitude_scale(DType data) {
  return data == DType::f32 ? std::ldexp(1.0, -16) : gpu_tolerance(data);
}

Tensor abs_f32(const Tensor& host) {
  std::vector<float> values = host.to_floats();
  for (float& value : values)
    value = std::fabs(value);
  return Tensor::from_floats(host.shape(), values);
}

}  // namespace alloy::test
