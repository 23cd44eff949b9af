#include "core/models/gpt_pretrained.h"

#include <cstring>
#include <set>
#include <utility>

#include "core/checkpoint/safetensors_read.h"
#include "core/error.h"
#include "core/half.h"

namespace alloy::models {

namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void replace_once(std::string& text, const std::string& from, const std::string& to) {
  const std::size_t at = text.find(from);
  if (at != std::string::npos) text.replace(at, from.size(), to);
}

// Conv1D stores [in, out]; Alloy's linear layers [out, in].
bool is_conv1d_weight(const std::string& pretrained_name) {
  return ends_with(pretrained_name, ".c_attn.weight") ||
         ends_with(pretrained_name, ".c_proj.weight") || ends_with(pretrained_name, ".c_fc.weight");
}

// Tensors of the file that are not weights: the attention's causal mask and the tied head.
bool passed_over(const std::string& name) {
  return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") ||
         name == "lm_head.weight";
}

// The flag that sets a dimension of `name`, for the message of a shape that does not fit.
const char* shape_flags(const std::string& name) {
  if (name == "wte.weight") return "--vocab-size, --n-embd";
  if (name == "wpe.weight") return "--block-size, --n-embd";
  return "--n-embd, --bias";
}

// Element i of the tensor, widened to fp32.
float element(const char* bytes, DType dtype, std::size_t i) {
  if (dtype == DType::f32) {
    float value;
    std::memcpy(&value, bytes + 4 * i, 4);
    return value;
  }
  std::uint16_t half;
  std::memcpy(&half, bytes + 2 * i, 2);
  return dtype == DType::f16 ? half_bits_to_float(half) : bf16_bits_to_float(half);
}

}  // namespace

std::string gpt2_pretrained_name(const std::string& alloy_name) {
  if (alloy_name == "transformer.wte") return "wte.weight";
  if (alloy_name == "transformer.wpe") return "wpe.weight";
  std::string name = alloy_name;
  replace_once(name, ".attn.body.ln_1.", ".ln_1.");
  replace_once(name, ".attn.body.attn.", ".attn.");
  replace_once(name, ".mlp.body.ln_2.", ".ln_2.");
  replace_once(name, ".mlp.body.mlp.", ".mlp.");
  return name;
}

void load_gpt2_pretrained(Gpt& model, const std::string& path) {
  const checkpoint::SafetensorsFile file = checkpoint::read_safetensors(path);
  const auto find = [&file](const std::string& name) -> const checkpoint::SafetensorsFile::Entry* {
    for (const std::string& key : {name, "transformer." + name}) {
      const auto it = file.tensors.find(key);
      if (it != file.tensors.end()) return &it->second;
    }
    return nullptr;
  };
  std::set<const checkpoint::SafetensorsFile::Entry*> used;
  for (nn::Parameter* param : model.parameters()) {
    Tensor& value = param->value;
    ALLOY_CHECK(value.device().is_cpu() && value.dtype() == DType::f32,
                "load_gpt2_pretrained: ", param->name, " is not an fp32 CPU tensor");
    const std::string name = gpt2_pretrained_name(param->name);
    const checkpoint::SafetensorsFile::Entry* entry = find(name);
    if (entry == nullptr) fail("pretrained GPT-2 ", path, " has no tensor ", name);
    used.insert(entry);
    if (entry->dtype != DType::f32 && entry->dtype != DType::f16 && entry->dtype != DType::bf16) {
      fail("pretrained GPT-2 ", path, ": tensor ", name, " is ", dtype_name(entry->dtype),
           ", not F32, F16 or BF16");
    }
    const bool transposed = is_conv1d_weight(name) && value.ndim() == 2;
    Shape expected = value.shape();
    if (transposed) std::swap(expected[0], expected[1]);
    // nanoGPT's crop_block_size: the first positions of a longer table.
    const bool cropped = name == "wpe.weight" && entry->shape.size() == 2 &&
                         entry->shape[1] == expected[1] && entry->shape[0] > expected[0];
    if (entry->shape != expected && !cropped) {
      fail("pretrained GPT-2 ", path, ": tensor ", name, " is ", shape_str(entry->shape),
           ", but this run's GPT needs ", shape_str(expected), " (", shape_flags(name), ")");
    }
    const char* bytes = file.bytes_of(*entry).data();
    float* out = value.data<float>();
    if (transposed) {
      const std::int64_t in = expected[0], outputs = expected[1];
      for (std::int64_t i = 0; i < in; ++i)
        for (std::int64_t o = 0; o < outputs; ++o)
          out[o * in + i] = element(bytes, entry->dtype, static_cast<std::size_t>(i * outputs + o));
    } else {
      const auto count = static_cast<std::size_t>(value.numel());  // a crop's leading rows
      for (std::size_t i = 0; i < count; ++i)
        out[i] = element(bytes, entry->dtype, i);
    }
  }
  const std::string prefix = "transformer.";
  for (const auto& [name, entry] : file.tensors) {
    const bool prefixed = name.compare(0, prefix.size(), prefix) == 0;
    if (used.count(&entry) == 0 && !passed_over(prefixed ? name.substr(prefix.size()) : name)) {
      fail("pretrained GPT-2 ", path, " holds tensor ", name,
           " that this run's GPT has no place for (--n-layer, --bias)");
    }
  }
}

}  // namespace alloy::models
