// Modules in the Caffe style: forward keeps what its backward needs, backward returns the
// gradient with respect to the input and accumulates parameter gradients. No tape: the
// network's structure is the order of the calls, which keeps memory and timing explicit.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/layout.h"
#include "core/tensor.h"

namespace alloy::nn {

// A learnable tensor and its gradient. `value` is the model's copy (half under O2/O3); the
// gradient has the value's dtype and shape and lives in the gradients category.
struct Parameter {
  std::string name;  // fully qualified, e.g. "features.0.weight"
  Tensor value;
  Tensor grad;
  bool is_norm = false;  // belongs to a normalisation layer (keep_batchnorm_fp32)
};

// A non-learnable tensor saved with the model (batch-norm running statistics).
struct Buffer {
  std::string name;
  Tensor value;
};

// Called with each parameter as soon as its gradient for this backward is final, in the
// order they become final (data-parallel bucketing starts its allreduces from here).
using GradReadyHook = std::function<void(Parameter&)>;

// How a training-mode forward behaves. A Sequential sets it around the children it recomputes
// (activation recomputation, `--recompute`): their first forward keeps nothing, and the forward
// run again just before their backward keeps what backward needs but must not count the batch
// a second time.
struct ForwardMode {
  bool keep_activations = true;
  bool update_running_statistics = true;  // batch norm's
};

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // forward keeps what backward needs only when keeps_activations(); backward releases it, so
  // activation memory never outlives one step. Evaluation-mode forwards keep nothing.
  virtual Tensor forward(const Tensor& x) = 0;
  virtual Tensor backward(const Tensor& dy) = 0;
  virtual std::string type_name() const = 0;
  // Hyper-parameters shown by describe(), e.g. "kernel=3, stride=1, padding=0".
  virtual std::string options() const { return {}; }

  // Parameters and buffers of this module and then of its children, in registration order.
  std::vector<Parameter*> parameters();
  std::vector<Buffer*> buffers();

  void set_training(bool training);
  bool training() const { return training_; }

  // Sets this module's and every descendant's forward mode.
  void set_forward_mode(ForwardMode mode);
  const ForwardMode& forward_mode() const { return forward_mode_; }
  // Whether forward keeps what backward needs: a training forward not marked to discard it.
  // A module of your own that tests training() instead stays correct when recomputed, but
  // keeps its activations twice as long.
  bool keeps_activations() const { return training_ && forward_mode_.keep_activations; }

  // A block is a unit of activation recomputation: `recompute_blocks` marks the blocks that a
  // Sequential holds, whose backward then runs their forward again instead of keeping their
  // activations in between. nn::ResidualBlock is one; override this in a module of your own.
  virtual bool is_block() const { return false; }
  // Marks (or unmarks) every block held by a Sequential in this module's tree, and returns
  // how many. Blocks inside a marked block are left alone: its recomputation covers them.
  virtual int recompute_blocks(bool recompute);

  // The memory order of the 4-D activations that convolution, batch norm and pooling modules
  // read and write, set on the whole tree. Only the modules between an nn::EnterLayout and its
  // nn::LeaveLayout see anything but NCHW (core/nn/layout_boundary.h), so a model runs
  // channels-last only where it says it can: keep every such module inside that region.
  void set_layout(Layout layout);
  Layout layout() const { return layout_; }
  // Whether this tree holds a layout region (an nn::EnterLayout).
  bool has_layout_region() const;
  // True for a module whose backward only reorders its output's gradient (nn::EnterLayout): a
  // Sequential starting with it lets the module after it skip the input gradient too.
  virtual bool only_reorders() const { return false; }

  // Whether backward must produce the input's gradient (false for a network's first layer).
  void set_needs_input_grad(bool needed) { needs_input_grad_ = needed; }

  // Sets every parameter gradient to zero, allocating gradients on first use; after that it
  // allocates nothing, on the host or the device.
  void zero_grad();

  // Converts every parameter (and its gradient) and every buffer to `dtype`; with
  // keep_norm_fp32, normalisation parameters and buffers go to f32 instead. Used by the amp
  // layer for O2/O3.
  void cast_parameters(DType dtype, bool keep_norm_fp32);

  // Moves parameters, gradients and buffers to `device`.
  void to_device(Device device);

  // Installs the hook on this module and every descendant. A leaf reports its parameters
  // at the end of its backward in reverse registration order, so over a whole backward the
  // hook sees parameters() reversed.
  void set_grad_ready_hook(GradReadyHook hook);

  // One line per module with its parameter shapes: the model's description in checkpoints.
  std::string describe() const;

 protected:
  Parameter& register_parameter(const std::string& name, Tensor value, bool is_norm = false);
  Buffer& register_buffer(const std::string& name, Tensor value);
  // Children are owned by their parent; the returned reference stays valid. The child's
  // parameter and buffer names (its whole subtree's) gain the prefix "name.", so register a
  // child once it is complete.
  template <class M>
  M& register_module(const std::string& name, std::unique_ptr<M> module) {
    M& reference = *module;
    static_cast<Module&>(reference).add_name_prefix(name + ".");
    children_.push_back({name, std::move(module)});
    return reference;
  }
  // The gradient to accumulate into: zeros of the value's dtype, shape and device, allocated
  // on first use (or after the value changed dtype or device).
  static Tensor& grad_of(Parameter& parameter);
  // Tells the hook this module's parameters' gradients are final (end of its backward).
  void notify_grads_ready();
  bool needs_input_grad() const { return needs_input_grad_; }
  const GradReadyHook& grad_ready_hook() const { return hook_; }
  // True for nn::EnterLayout: where a layout region starts.
  virtual bool enters_layout() const { return false; }

 private:
  void add_name_prefix(const std::string& prefix);
  void collect(std::vector<Parameter*>& params, std::vector<Buffer*>& buffers);
  void describe_into(const std::string& path, std::string& out) const;

  struct Child {
    std::string name;
    std::unique_ptr<Module> module;
  };
  // Stable addresses: parameters are referenced by optimizers and the amp layer.
  std::vector<std::unique_ptr<Parameter>> parameters_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<Child> children_;
  bool training_ = true;
  ForwardMode forward_mode_;
  Layout layout_ = Layout::nchw;
  bool needs_input_grad_ = true;
  GradReadyHook hook_;
};

}  // namespace alloy::nn
