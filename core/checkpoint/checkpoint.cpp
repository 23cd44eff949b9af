#include "core/checkpoint/checkpoint.h"

#include <boost/archive/archive_exception.hpp>
#include <boost/archive/binary_iarchive.hpp>
#include <boost/archive/binary_oarchive.hpp>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>
#include <streambuf>

#include "core/error.h"

// Tensor bytes are stored as the host holds them; the format promises little-endian.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "checkpoints assume a little-endian host");

namespace alloy::checkpoint {

NamedTensor make_named_tensor(const std::string& name, const Tensor& tensor) {
  ALLOY_CHECK(tensor.defined(), "checkpoint: tensor ", name, " is undefined");
  NamedTensor saved;
  saved.name = name;
  saved.dtype = tensor.dtype();
  saved.shape = tensor.shape();
  saved.data.resize(tensor.nbytes());
  if (tensor.device().is_cpu()) {
    if (!saved.data.empty()) std::memcpy(saved.data.data(), tensor.raw(), saved.data.size());
  } else {
    Tensor staging =
        Tensor::empty(tensor.shape(), tensor.dtype(), Device::cpu(), MemoryCategory::workspace);
    staging.copy_from(tensor);
    if (!saved.data.empty()) std::memcpy(saved.data.data(), staging.raw(), saved.data.size());
  }
  return saved;
}

void restore_tensor(const NamedTensor& saved, const std::string& name, Tensor& target) {
  ALLOY_CHECK(saved.name == name, "checkpoint tensor ", saved.name, " cannot restore ", name);
  ALLOY_CHECK(target.defined(), "checkpoint tensor ", name, ": the target is undefined");
  ALLOY_CHECK(saved.dtype == target.dtype() && saved.shape == target.shape(), "checkpoint tensor ",
              name, " is ", dtype_name(saved.dtype), shape_str(saved.shape), ", but this run's is ",
              dtype_name(target.dtype()), shape_str(target.shape()));
  ALLOY_CHECK(saved.data.size() == target.nbytes(), "checkpoint tensor ", name, " holds ",
              saved.data.size(), " bytes, ", target.nbytes(), " expected");
  if (saved.data.empty()) return;
  if (target.device().is_cpu()) {
    std::memcpy(target.raw(), saved.data.data(), saved.data.size());
    return;
  }
  Tensor staging =
      Tensor::empty(target.shape(), target.dtype(), Device::cpu(), MemoryCategory::workspace);
  std::memcpy(staging.raw(), saved.data.data(), saved.data.size());
  target.copy_from(staging);
}

namespace {

void check_specs(const std::string& path, const std::vector<NamedTensor>& saved,
                 const std::string& model, const std::vector<TensorSpec>& specs, const char* kind) {
  for (const auto& spec : specs) {
    const NamedTensor* tensor = find_tensor(saved, spec.name);
    ALLOY_CHECK(tensor != nullptr, "checkpoint ", path, " has no ", kind, " ", spec.name,
                ", which this run's ", model, " needs");
    ALLOY_CHECK(tensor->shape == spec.shape, "checkpoint ", path, ": ", kind, " ", spec.name,
                " has shape ", shape_str(tensor->shape), ", but this run's ", model, " needs ",
                shape_str(spec.shape));
  }
  for (const auto& tensor : saved) {
    bool expected = false;
    for (const auto& spec : specs)
      expected = expected || spec.name == tensor.name;
    ALLOY_CHECK(expected, "checkpoint ", path, " holds ", kind, " ", tensor.name,
                ", which this run's ", model, " does not have");
  }
}

}  // namespace

void check_compatible(const std::string& path, const CheckpointState& state,
                      const std::string& model, const std::vector<TensorSpec>& parameters,
                      const std::vector<TensorSpec>& buffers) {
  ALLOY_CHECK(state.model == model, "checkpoint ", path, " holds model ", state.model,
              ", but this run builds ", model);
  check_specs(path, state.parameters, model, parameters, "parameter");
  check_specs(path, state.buffers, model, buffers, "buffer");
}

const NamedTensor* find_tensor(const std::vector<NamedTensor>& tensors, const std::string& name) {
  for (const auto& tensor : tensors) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

namespace {

// Reads the payload in place and tells how much of it is left, so every length read from a
// damaged archive is checked before anything is allocated for it.
class PayloadSource : public std::streambuf {
 public:
  explicit PayloadSource(std::string_view payload) {
    char* begin = const_cast<char*>(payload.data());  // only ever read
    setg(begin, begin, begin + payload.size());
  }
  std::uint64_t remaining() const { return static_cast<std::uint64_t>(egptr() - gptr()); }
};

// The archive's link to its PayloadSource (a Boost archive helper, keyed by address).
struct LoadBound {
  const PayloadSource* source = nullptr;
};
char load_bound_key;

// Boost's own std::string and std::vector loaders resize to whatever length the archive
// claims, so a damaged length could ask for terabytes; these check it against the bytes left.
template <class Archive>
void length_field(Archive& archive, std::uint64_t& length, std::uint64_t min_bytes_each,
                  const char* what) {
  archive& length;
  if constexpr (Archive::is_loading::value) {
    const PayloadSource* source = archive.template get_helper<LoadBound>(&load_bound_key).source;
    const std::uint64_t remaining = source->remaining();
    if (length > remaining / min_bytes_each) {
      fail("corrupt: ", what, " claims ", length, " entries, but only ", remaining,
           " payload bytes are left");
    }
  }
}

template <class Archive>
void bytes_field(Archive& archive, void* data, std::uint64_t size) {
  if (size == 0) return;
  if constexpr (Archive::is_loading::value) {
    archive.load_binary(data, size);
  } else {
    archive.save_binary(data, size);
  }
}

template <class Archive>
void field(Archive& archive, std::string& text) {
  std::uint64_t size = text.size();
  length_field(archive, size, 1, "a string");
  if constexpr (Archive::is_loading::value) text.resize(size);
  bytes_field(archive, text.data(), size);
}

template <class Archive>
void field(Archive& archive, std::vector<unsigned char>& bytes) {
  std::uint64_t size = bytes.size();
  length_field(archive, size, 1, "tensor data");
  if constexpr (Archive::is_loading::value) bytes.resize(size);
  bytes_field(archive, bytes.data(), size);
}

template <class Archive>
void field(Archive& archive, Shape& shape) {
  std::uint64_t size = shape.size();
  length_field(archive, size, sizeof(std::int64_t), "a shape");
  if constexpr (Archive::is_loading::value) shape.resize(size);
  for (auto& extent : shape)
    archive& extent;
}

template <class Archive>
void field(Archive& archive, DType& dtype) {
  auto code = static_cast<std::uint8_t>(dtype);
  archive& code;
  dtype = static_cast<DType>(code);  // checked by validate() once loading is done
}

// Boost loads a bool by copying a byte into it, and a byte other than 0 or 1 makes an invalid
// bool; a byte is loaded and checked instead.
template <class Archive>
void field(Archive& archive, bool& flag) {
  std::uint8_t code = flag ? 1 : 0;
  archive& code;
  if (code > 1) fail("corrupt: a flag holds ", static_cast<int>(code));
  flag = code == 1;
}

template <class Archive, class Item>
void field(Archive& archive, std::vector<Item>& items) {
  std::uint64_t size = items.size();
  length_field(archive, size, 1, "a list");
  if constexpr (Archive::is_loading::value) {
    // Grows as items actually arrive rather than reserving what the length claims.
    for (std::uint64_t i = 0; i < size; ++i) {
      Item item;
      archive& item;
      items.push_back(std::move(item));
    }
  } else {
    for (auto& item : items)
      archive& item;
  }
}

template <class Archive>
void field(Archive& archive, std::map<std::string, std::string>& entries) {
  std::uint64_t size = entries.size();
  length_field(archive, size, 2 * sizeof(std::uint64_t), "a map");
  if constexpr (Archive::is_loading::value) {
    for (std::uint64_t i = 0; i < size; ++i) {
      std::string key;
      std::string value;
      field(archive, key);
      field(archive, value);
      entries[key] = std::move(value);
    }
  } else {
    for (auto& [key, value] : entries) {
      std::string copy = key;
      field(archive, copy);
      field(archive, value);
    }
  }
}

// The byte count a tensor of this dtype and shape needs, or a "corrupt" error naming it.
std::uint64_t expected_bytes(const NamedTensor& tensor, const char* list) {
  if (static_cast<std::uint8_t>(tensor.dtype) > static_cast<std::uint8_t>(DType::i32)) {
    fail("corrupt: ", list, " tensor '", tensor.name, "' has unknown dtype code ",
         static_cast<int>(tensor.dtype));
  }
  std::uint64_t bytes = dtype_size(tensor.dtype);
  for (const std::int64_t extent : tensor.shape) {
    if (extent < 0) fail("corrupt: ", list, " tensor '", tensor.name, "' has extent ", extent);
    const auto extent_bytes = static_cast<std::uint64_t>(extent);
    if (extent_bytes != 0 && bytes > std::numeric_limits<std::uint64_t>::max() / extent_bytes) {
      fail("corrupt: ", list, " tensor '", tensor.name, "' has an impossible shape");
    }
    bytes *= extent_bytes;
  }
  return bytes;
}

void validate(const std::vector<NamedTensor>& tensors, const char* list) {
  std::set<std::string> names;
  for (const auto& tensor : tensors) {
    const std::uint64_t bytes = expected_bytes(tensor, list);
    if (bytes != tensor.data.size()) {
      fail("corrupt: ", list, " tensor '", tensor.name, "' holds ", tensor.data.size(),
           " bytes, but ", dtype_name(tensor.dtype), shape_str(tensor.shape), " needs ", bytes);
    }
    if (!names.insert(tensor.name).second) {
      fail("corrupt: ", list, " tensor '", tensor.name, "' appears twice");
    }
  }
}

// A Boost binary archive opens with the length-prefixed signature "serialization::archive".
// Boost's constructor allocates whatever length a damaged prefix claims, so it is compared here
// before an archive is built on the payload.
void check_archive_signature(std::string_view payload) {
  constexpr std::string_view kSignature = "serialization::archive";
  const std::uint64_t length = kSignature.size();
  char prefix[sizeof length];
  std::memcpy(prefix, &length, sizeof length);
  if (payload.size() < sizeof prefix + kSignature.size() ||
      payload.substr(0, sizeof prefix) != std::string_view(prefix, sizeof prefix) ||
      payload.substr(sizeof prefix, kSignature.size()) != kSignature) {
    fail("corrupt: invalid archive signature (the payload is not a Boost binary archive)");
  }
}

}  // namespace

}  // namespace alloy::checkpoint

namespace boost::serialization {

using namespace alloy::checkpoint;

template <class Archive>
void serialize(Archive& archive, NamedTensor& tensor, unsigned /*version*/) {
  field(archive, tensor.name);
  field(archive, tensor.dtype);
  field(archive, tensor.shape);
  field(archive, tensor.data);
}

template <class Archive>
void serialize(Archive& archive, AmpFields& amp, unsigned /*version*/) {
  field(archive, amp.opt_level);
  field(archive, amp.half_dtype);
  field(archive, amp.model_dtype);
  field(archive, amp.cast_policy);
  field(archive, amp.keep_batchnorm_fp32);
  field(archive, amp.master_weights);
  field(archive, amp.dynamic_loss_scale);
  archive& amp.static_scale& amp.init_scale& amp.scale_window;
  archive& amp.growth_factor& amp.backoff_factor& amp.min_scale& amp.max_scale;
}

template <class Archive>
void serialize(Archive& archive, ScalerFields& scaler, unsigned /*version*/) {
  archive& scaler.scale& scaler.clean_steps& scaler.skipped_steps& scaler.at_min_streak;
}

template <class Archive>
void serialize(Archive& archive, OptimizerFields& optimizer, unsigned /*version*/) {
  field(archive, optimizer.kind);
  archive& optimizer.lr& optimizer.momentum& optimizer.weight_decay;
  field(archive, optimizer.nesterov);
  archive& optimizer.beta1& optimizer.beta2& optimizer.eps& optimizer.steps;
}

template <class Archive>
void serialize(Archive& archive, RngState& rng, unsigned /*version*/) {
  field(archive, rng.name);
  for (auto& word : rng.state)
    archive& word;
}

// Boost records each class's version in the archive: a later build adds fields behind
// `if (version >= N)` and still reads these files.
template <class Archive>
void serialize(Archive& archive, CheckpointState& state, unsigned /*version*/) {
  field(archive, state.alloy_version);
  field(archive, state.model);
  field(archive, state.model_description);
  archive& state.amp;
  archive& state.epoch& state.step& state.step_in_epoch& state.world_size& state.seed;
  archive& state.batch_size;
  field(archive, state.rng_states);
  archive& state.scaler& state.optimizer;
  field(archive, state.parameters);
  field(archive, state.buffers);
  field(archive, state.optimizer_state);
  field(archive, state.params_digest);
  if constexpr (Archive::is_saving::value) {
    std::map<std::string, std::string> entries = extra_entries(state);
    field(archive, entries);
  } else {
    field(archive, state.extra);  // read_records takes the records out once the load is done
  }
}

}  // namespace boost::serialization

namespace alloy::checkpoint {

std::string serialize_state(const CheckpointState& state) {
  std::ostringstream out(std::ios::binary);
  {
    boost::archive::binary_oarchive archive(out);
    archive << state;
  }
  return out.str();
}

CheckpointState deserialize_state(std::string_view payload) {
  check_archive_signature(payload);
  CheckpointState state;
  try {
    PayloadSource source(payload);
    boost::archive::binary_iarchive archive(source);
    archive.get_helper<LoadBound>(&load_bound_key).source = &source;
    archive >> state;
    if (source.remaining() != 0) {
      fail("corrupt: ", source.remaining(), " unexpected bytes after the state");
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& error) {
    // Boost's archive_exception, std::bad_alloc, std::length_error, ...
    fail("corrupt: ", error.what());
  }
  validate(state.parameters, "parameters");
  validate(state.buffers, "buffers");
  validate(state.optimizer_state, "optimizer_state");
  read_records(state);
  return state;
}

}  // namespace alloy::checkpoint
