#include "apps/cli/lm_eval_command.h"

#include <cmath>
#include <cstdio>
#include <iostream>

#include "apps/cli/exit_codes.h"
#include "apps/cli/sequence_flags.h"
#include "apps/cli/train_options.h"
#include "apps/train/lm_trainer.h"
#include "apps/train/training_state.h"
#include "core/error.h"

namespace alloy::app {

int run_lm_eval(checkpoint::LoadedCheckpoint loaded, const po::variables_map& values, Device device,
                int threads, JsonLog* log, std::ostream& human) {
  for (const char* flag : {"data-dir", "image-size", "channels", "num-classes"}) {
    if (values.count(flag)) {
      usage_fail("--", flag, " applies to image models; checkpoint ", loaded.path, " holds ",
                 loaded.state.model, " (a sequence model: --data-file, --val-file)");
    }
  }
  // The training run's settings: the model's shape, the data and its split.
  TrainOptions train;
  train.resume = loaded.path;
  apply_checkpoint_defaults(loaded.state, train);
  train.steps = std::max<std::int64_t>(loaded.state.step, 1);  // for files without gpt.steps
  // The files given stand in for the checkpoint's (which older checkpoints lack).
  const auto give = [&](const char* flag, std::string& setting) {
    if (!values.count(flag)) return;
    setting = values[flag].as<std::string>();
    train.explicitly_set.insert(setting_of_flag(flag));
  };
  give("data-file", train.text.data_file);
  give("val-file", train.text.val_file);
  resolve_sequence_options(train, &loaded);
  train.threads = threads;
  if (values.count("allow-tf32")) train.allow_tf32 = values["allow-tf32"].as<bool>();
  if (values.count("attention-kernel")) {
    train.attention_kernel = values["attention-kernel"].as<std::string>();
  }

  LmTrainer trainer(train, device, load_token_corpus(train));
  trainer.restore(loaded.state, loaded.path, [](const std::string& message) {
    std::cerr << "alloy: warning: " << message << std::endl;
  });
  const std::string digest = trainer.params_digest();
  const char* level = amp::opt_level_name(train.precision.level);
  std::vector<checkpoint::NamedTensor>().swap(loaded.state.parameters);
  std::vector<checkpoint::NamedTensor>().swap(loaded.state.optimizer_state);
  const std::size_t tokens = trainer.corpus().val.tokens.size();
  if (tokens < 2) {
    fail("checkpoint ", loaded.path, ": ", train.dataset, " data ", trainer.corpus().val.name,
         " has no validation tokens to evaluate (", tokens, ")");
  }
  const double val_loss = trainer.val_loss();
  // A checkpoint of a run with --ema-decay holds its weight averages: their loss too.
  const bool ema = trainer.precision().ema_decay() > 0.0f;
  const double val_loss_ema = ema ? trainer.val_loss_ema() : 0.0;

  char figure[32];
  std::snprintf(figure, sizeof figure, "%.4f", val_loss);
  human << loaded.path << ": " << train.model << " " << level << ", step " << trainer.steps()
        << ": val_loss " << figure << " (perplexity ";
  std::snprintf(figure, sizeof figure, "%.2f", std::exp(val_loss));
  human << figure << ")";
  if (ema) {
    std::snprintf(figure, sizeof figure, "%.4f", val_loss_ema);
    human << ", val_loss_ema " << figure;
  }
  human << " on " << tokens - 1 << " " << trainer.corpus().val.name << " tokens, params_digest "
        << digest << std::endl;
  if (log) {
    JsonObject event;
    event.add("event", "eval")
        .add("checkpoint", loaded.path)
        .add("model", train.model)
        .add("opt_level", level)
        .add("device", device.str())
        .add("dataset", train.dataset)
        .add("step", trainer.steps())
        .add("val_tokens", static_cast<std::int64_t>(tokens - 1))
        .add("val_loss", val_loss)
        .add("params_digest", digest);
    if (ema) event.add("val_loss_ema", val_loss_ema);
    log->write(event);
  }
  return kExitSuccess;
}

}  // namespace alloy::app
