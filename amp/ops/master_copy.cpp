#include "amp/ops/master_copy.h"

#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"

namespace alloy::amp {

void copy_masters_to_model(const std::vector<const Tensor*>& masters,
                           const std::vector<Tensor*>& model) {
  constexpr const char* op = "copy_masters_to_model";
  ALLOY_CHECK(masters.size() == model.size(), op, ": ", masters.size(), " masters but ",
              model.size(), " model parameters");
  for (std::size_t i = 0; i < masters.size(); ++i) {
    check_dtype(op, "master", *masters[i], DType::f32);
    check_shape(op, "model parameter", *model[i], masters[i]->shape());
    const Device device = common_device(op, {masters[i], model[i]});
    // On the CPU a pass per tensor costs nothing extra; the CUDA backend fuses them.
    if (!device.is_cpu()) no_kernel(op, device);
    cast_into(*masters[i], *model[i]);
  }
}

}  // namespace alloy::amp
