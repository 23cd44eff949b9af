#include "apps/cli/sequence_flags.h"

#include <cmath>
#include <iterator>

#include "apps/cli/train_options.h"
#include "apps/train/lm_trainer.h"
#include "core/error.h"

namespace alloy::app {

namespace {

// The data and evaluation flags, for the check that other models are not given them (the
// model's are gpt_model_flags()).
const char* const kDataFlags[] = {"data-file",  "val-file",     "val-fraction",
                                  "eval-every", "eval-batches", "beta1",
                                  "beta2",      "eps",          "init-from"};

void check_probability(const char* flag, double value) {
  if (!(value >= 0.0 && value < 1.0)) usage_fail(flag, " must be in [0, 1), got ", value);
}

}  // namespace

po::options_description gpt_model_options(SequenceOptions::Flags& g) {
  using po::value;
  auto model = make_group("GPT shape (--model gpt, gpt2, gpt-shakespeare; nanoGPT's names)");
  model.add_options()("n-layer", value(&g.n_layer)->value_name("N"),
                      "transformer blocks (gpt, gpt2: 12; gpt-shakespeare: 6)")(
      "n-head", value(&g.n_head)->value_name("N"), "attention heads (12; 6)")(
      "n-embd", value(&g.n_embd)->value_name("N"), "width, a multiple of --n-head (768; 384)")(
      "block-size", value(&g.block_size)->value_name("T"), "context length (1024; 256)")(
      "dropout", value(&g.dropout)->value_name("P"), "dropout probability (0; 0.2)")(
      "vocab-size", value(&g.vocab_size)->value_name("V"),
      "token vocabulary (50257; --dataset text: the file's distinct bytes)")(
      "bias", value(&g.bias)->value_name("true|false"),
      "biases in the linear layers and layer norms (true; gpt-shakespeare: false)");
  return model;
}

const std::vector<std::string>& gpt_model_flags() {
  static const std::vector<std::string> flags = {"n-layer", "n-head",     "n-embd", "block-size",
                                                 "dropout", "vocab-size", "bias"};
  return flags;
}

namespace {

// `base` with the flags that `given` names laid over it.
models::GptConfig lay_flags_over(models::GptConfig c, const SequenceOptions::Flags& g,
                                 const std::function<bool(const std::string&)>& given) {
  if (given("n-layer")) c.n_layer = g.n_layer;
  if (given("n-head")) c.n_head = g.n_head;
  if (given("n-embd")) c.n_embd = g.n_embd;
  if (given("block-size")) c.block_size = g.block_size;
  if (given("vocab-size")) c.vocab_size = g.vocab_size;
  if (given("dropout")) {
    check_probability("--dropout", g.dropout);
    c.dropout = static_cast<float>(g.dropout);
  }
  if (given("bias")) {
    if (g.bias != "true" && g.bias != "false") {
      usage_fail("--bias must be true or false, got '", g.bias, "'");
    }
    c.bias = g.bias == "true";
  }
  models::check_gpt_config(c);
  return c;
}

}  // namespace

models::GptConfig resolve_gpt_config(const std::string& model, const SequenceOptions::Flags& g,
                                     const std::function<bool(const std::string&)>& given) {
  return lay_flags_over(models::gpt_preset(model), g, given);
}

po::options_description sequence_options_description(SequenceOptions& o) {
  using po::value;
  auto text = make_group("Sequence model data and evaluation");
  text.add_options()("data-file", value(&o.data_file)->value_name("FILE"),
                     "--dataset text: a text file, its bytes the tokens; --dataset tokens: "
                     "llm.c's uint16 token file of the training split")(
      "val-file", value(&o.val_file)->value_name("FILE"),
      "--dataset tokens: the validation split's token file")(
      "init-from", value(&o.init_from)->value_name("FILE"),
      "start from a pretrained GPT-2: Hugging Face's safetensors file of gpt2 (or -medium, "
      "-large, -xl with their --n-layer --n-head --n-embd); not read when resuming")(
      "val-fraction", value(&o.val_fraction)->default_value(o.val_fraction, "0.1")->value_name("F"),
      "--dataset text: the share of the file, at its end, held out for validation")(
      "eval-every", value(&o.eval_every)->default_value(o.eval_every)->value_name("N"),
      "estimate the validation loss every N steps (0: only the whole split at the end)")(
      "eval-batches", value(&o.eval_batches)->default_value(o.eval_batches)->value_name("K"),
      "batches of validation windows per estimate")(
      "beta1", value(&o.beta1)->default_value(o.beta1, "0.9")->value_name("X"), "AdamW's beta1")(
      "beta2", value(&o.beta2)->default_value(o.beta2, "0.999")->value_name("X"), "AdamW's beta2")(
      "eps", value(&o.eps)->default_value(o.eps, "1e-08")->value_name("X"), "AdamW's eps");
  po::options_description all;
  all.add(gpt_model_options(o.flags)).add(text);
  return all;
}

void resolve_sequence_options(TrainOptions& o, const checkpoint::LoadedCheckpoint* resumed) {
  if (!models::is_gpt_model(o.model)) {
    std::vector<std::string> flags = gpt_model_flags();
    flags.insert(flags.end(), std::begin(kDataFlags), std::end(kDataFlags));
    for (const std::string& flag : flags) {
      if (o.was_given(flag)) usage_fail("--", flag, " applies to sequence models (--model gpt)");
    }
    if (o.dataset == "text" || o.dataset == "tokens") {
      usage_fail("--dataset ", o.dataset, " feeds sequence models (--model gpt), not ", o.model);
    }
    return;
  }
  SequenceOptions& s = o.text;
  const auto given = [&o](const std::string& flag) { return o.was_given(flag); };
  // The checkpoint of the same model: its settings stand where no flag is given.
  const checkpoint::CheckpointState* saved =
      resumed && resumed->state.model == o.model && resumed->state.gpt.config ? &resumed->state
                                                                              : nullptr;
  if (saved) {
    s.gpt = lay_flags_over(gpt_config_of(*saved, resumed->path), s.flags, given);
    const checkpoint::GptRecord& r = saved->gpt;
    const auto take = [&](const char* flag, const auto& value, auto& setting) {
      if (!given(flag) && value) setting = *value;
    };
    take("data-file", r.data_file, s.data_file);
    take("val-file", r.val_file, s.val_file);
    take("val-fraction", r.val_fraction, s.val_fraction);
    take("eval-every", r.eval_every, s.eval_every);
    take("eval-batches", r.eval_batches, s.eval_batches);
    take("steps", r.steps, o.steps);
    if (!given("beta1")) s.beta1 = saved->optimizer.beta1;
    if (!given("beta2")) s.beta2 = saved->optimizer.beta2;
    if (!given("eps")) s.eps = saved->optimizer.eps;
  } else {
    s.gpt = resolve_gpt_config(o.model, s.flags, given);
  }
  // Runs without files, unless the checkpoint's run had them (apply_checkpoint_defaults).
  if (!given("dataset") && !(saved && saved->run.dataset)) o.dataset = "synthetic";
  if (o.dataset != "text" && o.dataset != "tokens" && o.dataset != "synthetic") {
    usage_fail("--model ", o.model, " trains on --dataset text, tokens or synthetic, not ",
               o.dataset);
  }
  if ((o.dataset == "text" || o.dataset == "tokens") && s.data_file.empty()) {
    usage_fail("--dataset ", o.dataset, " needs --data-file");
  }
  if (o.dataset != "tokens" && !s.val_file.empty()) {
    usage_fail("--val-file applies to --dataset tokens");
  }
  if (!(s.val_fraction > 0.0 && s.val_fraction < 1.0)) {
    usage_fail("--val-fraction must be in (0, 1), got ", s.val_fraction);
  }
  if (o.steps < 1) usage_fail("--model ", o.model, " trains for --steps N (N >= 1)");
  if (s.eval_every < 0) usage_fail("--eval-every must be at least 0, got ", s.eval_every);
  if (s.eval_batches < 1) usage_fail("--eval-batches must be at least 1, got ", s.eval_batches);
  check_probability("--beta1", s.beta1);
  check_probability("--beta2", s.beta2);
  if (!(s.eps > 0.0 && std::isfinite(s.eps))) usage_fail("--eps must be positive, got ", s.eps);
  if (o.optimizer != "adamw" &&
      (o.was_given("beta1") || o.was_given("beta2") || o.was_given("eps"))) {
    usage_fail("--beta1, --beta2 and --eps apply to --optimizer adamw");
  }
}

}  // namespace alloy::app
