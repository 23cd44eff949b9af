// A pretrained GPT-2 as Hugging Face publishes it (the safetensors file of "gpt2", "gpt2-medium",
// ...; nanoGPT's init_from='gpt2'): its tensors go into an Alloy GPT of the same shape, so a run
// fine-tunes it. Hugging Face's names are nanoGPT's without the "transformer." prefix (either is
// taken): wte, wpe, h.N.ln_1, h.N.attn.c_attn, h.N.attn.c_proj, h.N.ln_2, h.N.mlp.c_fc,
// h.N.mlp.c_proj, ln_f. Its attention and MLP weights are Conv1D's, [in, out]: they are
// transposed into Alloy's [out, in]. The causal-mask buffers (h.N.attn.bias,
// h.N.attn.masked_bias) and the tied lm_head.weight are not weights of their own and are passed
// over. A file whose wpe has more positions than the model's block size gives its first ones
// (nanoGPT's crop_block_size). F32, F16 and BF16 tensors are widened exactly to fp32.
#pragma once

#include <string>

#include "core/models/gpt.h"

namespace alloy::models {

// Hugging Face's name of an Alloy GPT parameter ("h.0.attn.body.attn.c_attn.weight" ->
// "h.0.attn.c_attn.weight").
std::string gpt2_pretrained_name(const std::string& alloy_name);

// Loads the file at `path` into `model` (its parameters fp32, on the CPU). Throws Error naming
// the file and the tensor for a tensor the model lacks or has in another shape (with the flag
// that sets it), a dtype other than F32, F16 or BF16, or a tensor of the file that the model has
// no place for (e.g. biases into a --bias false model).
void load_gpt2_pretrained(Gpt& model, const std::string& path);

}  // namespace alloy::models
