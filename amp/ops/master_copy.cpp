#include "amp/ops/master_copy.h"

#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"

#ifdef ALLOY_HAVE_CUDA
#include "amp/ops/cuda/master_copy.h"
#include "core/cuda/context.h"
#endif

namespace alloy::amp {

void copy_masters_to_model(const std::vector<const Tensor*>& masters,
                           const std::vector<Tensor*>& model) {
  constexpr const char* op = "copy_masters_to_model";
  ALLOY_CHECK(masters.size() == model.size(), op, ": ", masters.size(), " masters but ",
              model.size(), " model parameters");
  for (std::size_t i = 0; i < masters.size(); ++i) {
    check_dtype(op, "master", *masters[i], DType::f32);
    check_floating(op, "model parameter", *model[i]);
    check_shape(op, "model parameter", *model[i], masters[i]->shape());
    const Device device = common_device(op, {masters[i], model[i]});
    ALLOY_CHECK(device == masters[0]->device(), op, ": parameter ", i, " is on ", device.str(),
                ", parameter 0 on ", masters[0]->device().str());
  }
  if (masters.empty()) return;
  const Device device = masters[0]->device();
  // On the CPU a pass per tensor costs nothing extra; the CUDA backend fuses them.
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      std::vector<cuda::MasterCopyItem> items;
      items.reserve(masters.size());
      for (std::size_t i = 0; i < masters.size(); ++i) {
        items.push_back(
            {masters[i]->data<float>(), model[i]->raw(), model[i]->dtype(), masters[i]->numel()});
      }
      cuda::copy_masters_to_model(items, alloy::cuda::stream_of(device));
      return;
    });
  for (std::size_t i = 0; i < masters.size(); ++i)
    cast_into(*masters[i], *model[i]);
}

}  // namespace alloy::amp
