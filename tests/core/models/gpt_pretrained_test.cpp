// A pretrained GPT-2 in Hugging Face's safetensors layout loads into an Alloy GPT: every tensor
// where it belongs, the Conv1D weights transposed, a longer position table cropped, F16 and BF16
// widened exactly, with or without the "transformer." prefix; the causal-mask buffers and the
// tied head passed over; a missing, misshapen, unplaceable or integer tensor is an error naming
// the file and the tensor. End to end: alloy train --init-from starts from the file's weights.
#include "core/models/gpt_pretrained.h"

#include <boost/test/unit_test.hpp>
#include <cstring>
#include <map>

#include "core/checkpoint/safetensors.h"
#include "core/digest.h"
#include "core/half.h"
#include "tests/support/process.h"

using namespace alloy;
using namespace alloy::models;
using namespace alloy::test;

namespace {

GptConfig tiny_config(bool bias = true) {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.block_size = 4;
  c.vocab_size = 11;
  c.bias = bias;
  return c;
}

// A value of tensor `name` at flat index i: (n - 128) / 64 for an odd n below 128, so never 0
// and exact in F16 and BF16, and varied across tensors.
float value_of(const std::string& name, std::int64_t i) {
  const auto n = static_cast<float>(8 * (std::hash<std::string>{}(name) % 8) + 4 * (i % 8) + 1);
  return (n - 128.0f) / 64.0f;
}

struct Stored {
  Shape shape;
  DType dtype = DType::f32;
};

// Hugging Face's GPT-2 tensors of `c` (positions: `positions`), in its names and shapes.
std::map<std::string, Stored> pretrained_layout(const GptConfig& c, std::int64_t positions,
                                                int layers) {
  const std::int64_t e = c.n_embd;
  std::map<std::string, Stored> t;
  t["wte.weight"] = {{c.vocab_size, e}};
  t["wpe.weight"] = {{positions, e}};
  t["lm_head.weight"] = {{c.vocab_size, e}};
  for (int l = 0; l < layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    for (const char* norm : {"ln_1.", "ln_2."}) {
      t[h + norm + "weight"] = {{e}};
      if (c.bias) t[h + norm + "bias"] = {{e}};
    }
    const std::pair<const char*, Shape> linear[] = {{"attn.c_attn.", {e, 3 * e}},
                                                    {"attn.c_proj.", {e, e}},
                                                    {"mlp.c_fc.", {e, 4 * e}},
                                                    {"mlp.c_proj.", {4 * e, e}}};
    for (const auto& [layer, shape] : linear) {
      t[h + layer + "weight"] = {shape};
      if (c.bias) t[h + layer + "bias"] = {{shape[1]}};
    }
    t[h + "attn.bias"] = {{1, 1, positions, positions}};
    t[h + "attn.masked_bias"] = {{}};
  }
  t["ln_f.weight"] = {{e}};
  if (c.bias) t["ln_f.bias"] = {{e}};
  return t;
}

// The safetensors file of `tensors`, each filled with value_of in its dtype, names prefixed:
// written by Alloy's exporter, which takes any names.
void write_pretrained(const std::string& path, const std::map<std::string, Stored>& tensors,
                      const std::string& prefix = "") {
  checkpoint::CheckpointState state;
  for (const auto& [name, stored] : tensors) {
    checkpoint::NamedTensor tensor{prefix + name, stored.dtype, stored.shape, {}};
    for (std::int64_t i = 0; i < shape_numel(stored.shape); ++i) {
      const float v = value_of(name, i);
      const auto append = [&tensor](const auto& value) {
        const auto* bytes = reinterpret_cast<const unsigned char*>(&value);
        tensor.data.insert(tensor.data.end(), bytes, bytes + sizeof value);
      };
      if (stored.dtype == DType::f32) {
        append(v);
      } else if (stored.dtype == DType::i32) {
        append(static_cast<std::int32_t>(v));
      } else {
        append(stored.dtype == DType::f16 ? float_to_half_bits(v) : float_to_bf16_bits(v));
      }
    }
    state.parameters.push_back(std::move(tensor));
  }
  checkpoint::export_safetensors(state, path);
}

std::string error_of(Gpt& model, const std::string& path) {
  try {
    load_gpt2_pretrained(model, path);
  } catch (const Error& error) {
    return error.what();
  }
  return "(loaded)";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gpt_pretrained)

BOOST_AUTO_TEST_CASE(every_tensor_lands_in_place_transposed_cropped_and_widened) {
  TempDir dir;
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const std::string prefix : {"", "transformer."}) {
      std::map<std::string, Stored> layout = pretrained_layout(tiny_config(), 6, 2);
      for (auto& entry : layout)
        entry.second.dtype = dtype;
      const std::string path = dir.file("gpt2.safetensors");
      write_pretrained(path, layout, prefix);
      Generator generator(1);
      Gpt model(tiny_config(), generator);
      load_gpt2_pretrained(model, path);
      for (const nn::Parameter* param : model.parameters()) {
        const std::string name = gpt2_pretrained_name(param->name);
        BOOST_TEST_REQUIRE(layout.count(name) == 1u, param->name << " -> " << name);
        const Shape& stored = layout[name].shape;
        const bool transposed = name.find(".c_") != std::string::npos && stored.size() == 2;
        const float* got = param->value.data<float>();
        for (std::int64_t i = 0; i < param->value.numel(); ++i) {
          // Alloy's [out, in] element (o, k) is the file's [in, out] element (k, o).
          const std::int64_t rows = param->value.ndim() == 2 ? param->value.dim(1) : 1;
          const std::int64_t source = transposed ? (i % rows) * param->value.dim(0) + i / rows : i;
          BOOST_TEST_REQUIRE(got[i] == value_of(name, source),
                             dtype_name(dtype) << " " << prefix << name << "[" << i << "]");
        }
      }
    }
  }
  BOOST_TEST(gpt2_pretrained_name("h.1.mlp.body.mlp.c_fc.weight") == "h.1.mlp.c_fc.weight");
  BOOST_TEST(gpt2_pretrained_name("h.0.attn.body.ln_1.bias") == "h.0.ln_1.bias");
  BOOST_TEST(gpt2_pretrained_name("transformer.wpe") == "wpe.weight");
}

BOOST_AUTO_TEST_CASE(a_file_that_does_not_fit_is_an_error_naming_the_tensor) {
  TempDir dir;
  const std::string path = dir.file("gpt2.safetensors");
  Generator generator(1);
  Gpt model(tiny_config(), generator);

  std::map<std::string, Stored> missing = pretrained_layout(tiny_config(), 4, 2);
  missing.erase("h.1.mlp.c_fc.bias");
  write_pretrained(path, missing);
  BOOST_TEST(error_of(model, path) ==
             "pretrained GPT-2 " + path + " has no tensor h.1.mlp.c_fc.bias");

  GptConfig wider_vocab = tiny_config();
  wider_vocab.vocab_size = 12;
  write_pretrained(path, pretrained_layout(wider_vocab, 4, 2));
  BOOST_TEST(error_of(model, path) ==
             "pretrained GPT-2 " + path +
                 ": tensor wte.weight is [12, 8], but this run's GPT needs [11, 8] (--vocab-size, "
                 "--n-embd)");

  write_pretrained(path, pretrained_layout(tiny_config(), 3, 2));  // fewer positions: no crop
  BOOST_TEST(error_of(model, path).find("tensor wpe.weight is [3, 8]") != std::string::npos);

  write_pretrained(path, pretrained_layout(tiny_config(), 4, 3));
  BOOST_TEST(error_of(model, path).find("holds tensor h.2.") != std::string::npos);

  Gpt unbiased(tiny_config(false), generator);
  write_pretrained(path, pretrained_layout(tiny_config(), 4, 2));
  BOOST_TEST(error_of(unbiased, path)
                     .find("holds tensor h.0.attn.c_attn.bias that this run's "
                           "GPT has no place for") != std::string::npos,
             error_of(unbiased, path));

  std::map<std::string, Stored> integers = pretrained_layout(tiny_config(), 4, 2);
  integers["ln_f.weight"].dtype = DType::i32;
  write_pretrained(path, integers);
  BOOST_TEST(error_of(model, path) ==
             "pretrained GPT-2 " + path + ": tensor ln_f.weight is i32, not F32, F16 or BF16");
}

BOOST_AUTO_TEST_CASE(alloy_train_init_from_starts_from_the_files_weights) {
  TempDir dir;
  const std::string path = dir.file("gpt2.safetensors");
  write_pretrained(path, pretrained_layout(tiny_config(), 6, 2));
  Generator generator(1);
  Gpt model(tiny_config(), generator);
  load_gpt2_pretrained(model, path);
  const std::vector<std::string> args = {
      "train", "--model",      "gpt", "--n-layer",    "2",     "--n-head",     "2", "--n-embd",
      "8",     "--block-size", "4",   "--vocab-size", "11",    "--batch-size", "2", "--steps",
      "1",     "--optimizer",  "sgd", "--lr",         "1e-30", "--log-json",   "-", "--init-from",
      path};
  const ProcessResult run = run_alloy(args);
  BOOST_TEST_REQUIRE(run.exit_code == 0, run.errors);
  // A step far below half an ulp of every weight (none is 0, none under 1/2) changes none.
  BOOST_TEST(json_event_field(run.output, "end", "params_digest") ==
             "\"" + params_digest(model.parameters()) + "\"");

  const ProcessResult missing = run_alloy({"train", "--model", "gpt", "--n-layer", "2", "--steps",
                                           "1", "--init-from", dir.file("none.safetensors")});
  BOOST_TEST(missing.exit_code == 1);
  BOOST_TEST(missing.errors.find("none.safetensors") != std::string::npos, missing.errors);
  const ProcessResult image = run_alloy({"train", "--model", "lenet", "--init-from", path});
  BOOST_TEST(image.exit_code == 2);
  BOOST_TEST(image.errors.find("--init-from applies to sequence models") != std::string::npos,
             image.errors);
}

BOOST_AUTO_TEST_SUITE_END()
