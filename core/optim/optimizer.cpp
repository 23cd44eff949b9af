#include "core/optim/optimizer.h"

#include <limits>

#include "core/optim/adamw.h"
#include "core/optim/sgd.h"

namespace alloy::optim {

namespace {

void check_lr(const char* kind, float lr) {
  if (!(lr > 0.0f)) usage_fail(kind, ": lr must be > 0, got ", lr);
}

}  // namespace

Optimizer::Optimizer(const char* kind, std::vector<nn::Parameter*> params, OptimizerConfig config)
    : params_(std::move(params)), config_(std::move(config)) {
  check_lr(kind, config_.lr);
  if (!(config_.weight_decay >= 0.0f)) {
    usage_fail(kind, ": weight_decay must be >= 0, got ", config_.weight_decay);
  }
  for (const nn::Parameter* param : params_) {
    ALLOY_CHECK(param != nullptr, kind, ": null parameter");
    // Half weights (O3, or O2 without masters) are updated in fp32 and rounded; the state
    // stays fp32 either way.
    ALLOY_CHECK(is_floating(param->value.dtype()), kind, ": parameter ", param->name, " is ",
                param->value.str(), "; optimizers update floating-point weights");
  }
  const Device device = params_.empty() ? Device::cpu() : params_.front()->value.device();
  lr_ = Tensor::empty({1}, DType::f32, device, MemoryCategory::optimizer_state);
  step_ = Tensor::empty({2}, DType::i32, device, MemoryCategory::optimizer_state);
  set_lr(config_.lr);
  set_steps(0);
}

std::int64_t Optimizer::steps() const {
  std::int32_t count[2] = {0, 0};
  step_.download_to(count);  // one counted download on every backend
  return count[0];
}

void Optimizer::set_steps(std::int64_t steps) {
  // The kernels add one to an i32 count.
  ALLOY_CHECK(steps >= 0 && steps < std::numeric_limits<std::int32_t>::max(), config_.kind,
              ": step count ", steps, " is out of range");
  Tensor host = Tensor::empty({2}, DType::i32, Device::cpu(), MemoryCategory::workspace);
  host.data<std::int32_t>()[0] = static_cast<std::int32_t>(steps);
  host.data<std::int32_t>()[1] = 0;
  step_.copy_from(host);
}

void Optimizer::set_lr(float lr) {
  check_lr(config_.kind.c_str(), lr);
  config_.lr = lr;
  if (schedule_) schedule_->base_lr = lr;
  lr_.copy_from(Tensor::from_floats({1}, {lr}, DType::f32, MemoryCategory::workspace));
}

void Optimizer::set_schedule(std::optional<LrSchedule> schedule) {
  if (schedule) {
    schedule->base_lr = config_.lr;
    check_lr_schedule(config_.kind.c_str(), *schedule);
  }
  schedule_ = schedule;
  // Until the first step computes it, the rate is the schedule's first (for reports).
  if (schedule_) prepare_lr();
}

float Optimizer::current_lr() const {
  float lr = 0.0f;
  lr_.download_to(&lr);
  return lr;
}

void Optimizer::prepare_lr() {
  if (schedule_) apply_lr_schedule(*schedule_, step_, lr_);
}

void Optimizer::write_copies_to(std::vector<Tensor*> copies) {
  ALLOY_CHECK(copies.size() == params_.size(), config_.kind, ": ", copies.size(),
              " model copies for ", params_.size(), " parameters");
  for (std::size_t i = 0; i < copies.size(); ++i) {
    const Tensor& value = params_[i]->value;
    ALLOY_CHECK(copies[i] == nullptr ||
                    (value.dtype() == DType::f32 && copies[i]->defined() &&
                     is_floating(copies[i]->dtype()) && copies[i]->shape() == value.shape() &&
                     copies[i]->device() == value.device()),
                config_.kind, ": the model copy of ", params_[i]->name,
                " must be a floating tensor shaped and placed like ", value.str(),
                ", an f32 parameter");
  }
  copies_ = std::move(copies);
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config,
                                          std::vector<nn::Parameter*> params) {
  if (config.kind == "sgd") return std::make_unique<Sgd>(std::move(params), config);
  if (config.kind == "adamw") return std::make_unique<AdamW>(std::move(params), config);
  usage_fail("unknown optimizer '", config.kind, "' (choices: sgd, adamw)");
}

}  // namespace alloy::optim
