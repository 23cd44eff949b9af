// alloy train for sequence models: the device, the token data, the checkpoint to resume
// from, training in steps with periodic validation estimates and checkpoints (synchronous or
// asynchronous, apps/train/checkpointer.h), restarts (--max-restarts, apps/train/elastic.h), and
// the report (one human line per estimate; the JSON log's restart, start, eval, checkpoint and
// end events).
#include <cmath>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>

#include "apps/cli/exit_codes.h"
#include "apps/cli/json_log.h"
#include "apps/cli/launcher.h"
#include "apps/train/checkpointer.h"
#include "apps/train/data_parallel.h"
#include "apps/train/device_choice.h"
#include "apps/train/elastic.h"
#include "apps/train/lm_trainer.h"
#include "apps/train/micro_batches.h"
#include "apps/train/stop_signals.h"
#include "apps/train/training_state.h"
#include "core/checkpoint/checkpoint_file.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "parallel/distributed_sampler.h"

namespace alloy::app {

namespace {

void check_supported(const TrainOptions& o) {
  // Runs are measured in steps.
  if (o.was_given("epochs"))
    usage_fail("--epochs is not available for sequence models; use --steps");
}

// A save of the trainer where it stands now. The snapshot of an asynchronous save is the
// captured state: a copy of every tensor in host memory (on a GPU each a download that waits for
// the device), which the writer thread serializes and writes while training goes on.
Checkpointer::Source checkpoint_source(LmTrainer& trainer) {
  return {trainer.steps(), [&trainer] { return trainer.capture(); },
          [&trainer](SnapshotArena&) { return StateSnapshot(trainer.capture()); }};
}

void write_restart_event(JsonLog& log, const WorkerRestart& restart,
                         const std::string& resume_path) {
  JsonObject event;
  event.add("event", "restart")
      .add("generation", restart.generation)
      .add("cause", restart.cause)
      .add("checkpoint", resume_path);
  log.write(event);
}

}  // namespace

int run_lm_train(TrainOptions options, const std::vector<std::string>& args,
                 std::optional<checkpoint::LoadedCheckpoint> resume) {
  const TrainOptions& o = options;
  check_supported(o);
  // Data parallelism: a launcher starts the workers and waits (and with --max-restarts starts
  // them again after a failure); a rank joins the group.
  parallel::Rendezvous placement = resolve_train_rendezvous(options);
  check_elastic_options(options, placement);
  make_elastic_launcher(options, placement);
  const WorkerRestart restart = worker_restart_from_environment();
  // The global batch splits evenly among the ranks and each rank's share among the
  // micro-batches (--accumulation-steps); a UsageError if not.
  micro_batch_size(o.batch_size, placement.world_size, o.accumulation_steps);
  const bool data_parallel = joins_process_group(options, placement);
  if (data_parallel) check_distributed_options(options, placement);
  if (placement.is_launcher()) {
    if (o.max_restarts > 0) {
      run_elastic_launcher(options, placement, args);
    } else {
      run_launcher(options, placement, args);
    }
    return kExitSuccess;
  }
  set_cpu_threads(o.threads);
  const DeviceChoice device = choose_device(o.device, placement, probe_cuda_devices());
  make_current(device.device);
  std::unique_ptr<parallel::ProcessGroup> group;
  if (data_parallel) {
    options.dist_backend = dist_backend(options, device);
    group = join_process_group(placement, device.device, options.dist_backend);
  }
  const bool rank0 = !group || group->rank() == 0;  // the one that reports and saves
  if (rank0) std::cerr << "alloy: " << device.explanation << std::endl;
  std::unique_ptr<JsonLog> log;
  if (!o.log_json.empty() && rank0) {
    log = std::make_unique<JsonLog>(o.log_json, /*append=*/restart.generation > 0);
  }
  std::ostringstream silent;
  std::ostream& human = !rank0                    ? static_cast<std::ostream&>(silent)
                        : log && log->to_stdout() ? std::cerr
                                                  : std::cout;

  if (group) check_ranks_agree(*group, restart, resume);
  if (resume && resume->state.model != o.model) {
    fail("checkpoint ", resume->path, " holds model ", resume->state.model,
         ", but this run builds ", o.model);
  }
  // A resumed run takes its weights from the checkpoint: a pretrained file is not read.
  if (resume) options.text.init_from.clear();
  LmTrainer trainer(o, device.device, load_token_corpus(o));
  std::string resume_path;
  if (resume) {
    resume_path = resume->path;
    trainer.restore(resume->state, resume->path, [](const std::string& message) {
      std::cerr << "alloy: warning: " << message << std::endl;
    });
    if (rank0) {
      std::cerr << "alloy: resuming from " << resume->path << " at step " << trainer.steps()
                << std::endl;
    }
    resume.reset();
  }
  if (group) {
    trainer.join_data_parallel(*group, ddp_options(o));
  }
  std::unique_ptr<Checkpointer> checkpointer;  // rank 0 saves
  if (!o.checkpoint_dir.empty() && rank0) {
    Checkpointer::Saved saved;
    if (log) {
      saved = [&log](const std::string& path, std::int64_t step, const Checkpointer::Timing&) {
        JsonObject event;
        event.add("event", "checkpoint").add("path", path).add("step", step);
        log->write(event);
      };
    }
    checkpointer = std::make_unique<Checkpointer>(o.checkpoint_dir, o.keep_checkpoints, saved,
                                                  o.async_checkpoint);
  }

  const models::GptConfig& c = trainer.config();
  const std::int64_t parameters = trainer.parameter_count();
  const char* level = amp::opt_level_name(o.precision.level);
  const char* attention = trainer.attention_kernel_in_use();  // a bad choice fails here
  const bool cuda_graph = trainer.cuda_graph();  // as does --cuda-graph on that cannot capture
  human << o.model << " (" << parameters << " parameters: " << c.n_layer << " layers, " << c.n_head
        << " heads, " << c.n_embd << " wide, context " << c.block_size << ", vocabulary "
        << c.vocab_size << ") on " << device.device.str() << ", " << o.threads << " threads | "
        << o.dataset << ": " << trainer.corpus().train.tokens.size() << " train, "
        << trainer.corpus().val.tokens.size() << " validation tokens | " << level << " | "
        << o.optimizer << " lr " << o.lr << " | batch " << o.batch_size << " | " << o.steps
        << " steps | seed " << o.seed << std::endl;
  if (!cuda_graph && device.device.is_cuda() && o.cuda_graph == "auto") {
    human << "cuda graph: eager steps: " << trainer.cuda_graph_reason() << std::endl;
  }
  if (log && restart.generation > 0) write_restart_event(*log, restart, resume_path);
  if (log) {
    JsonObject event;
    event.add("event", "start")
        .add("model", o.model)
        .add("opt_level", level)
        .add("device", device.device.str())
        .add("world_size", trainer.world_size())
        .add("cuda_graph", cuda_graph)
        .add("cuda_graph_reason", trainer.cuda_graph_reason())
        .add("dataset", o.dataset)
        .add("parameters", parameters)
        .add("n_layer", c.n_layer)
        .add("n_head", c.n_head)
        .add("n_embd", c.n_embd)
        .add("block_size", c.block_size)
        .add("vocab_size", c.vocab_size)
        .add("steps", o.steps)
        .add("batch_size", o.batch_size)
        .add("attention_kernel", attention)
        .add("seed", o.seed);
    log->write(event);
  }

  const StopSignals signals;
  const auto step_hook = [&] {
    if (auto notice = trainer.take_cuda_graph_notice()) {
      std::cerr << "alloy: warning: " << *notice << std::endl;
    }
    const bool stop = signals.requested();
    const bool due = o.checkpoint_every > 0 && trainer.steps() % o.checkpoint_every == 0;
    if (checkpointer) checkpointer->poll();  // an asynchronous save that ended: log or fail
    if (checkpointer && (stop || due) && trainer.steps() < o.steps) {
      checkpointer->save(checkpoint_source(trainer));
    }
    return stop;
  };
  const auto eval_hook = [&](std::int64_t step, double val_loss, double train_loss) {
    human << "step " << step << "/" << o.steps << ": train loss " << std::fixed
          << std::setprecision(4) << train_loss << ", val loss " << val_loss << std::defaultfloat
          << std::setprecision(6) << ", lr " << trainer.precision().optimizer().current_lr() << ", "
          << static_cast<std::int64_t>(trainer.tokens_per_second()) << " tokens/s" << std::endl;
    if (log) {
      JsonObject event;
      event.add("event", "eval")
          .add("step", step)
          .add("val_loss", val_loss)
          .add("train_loss", train_loss);
      log->write(event);
    }
  };
  trainer.run(step_hook, eval_hook);
  // Waits for the last steps' device work, which their throughput includes.
  trainer.take_train_loss();
  if (trainer.steps() < o.steps) {             // stopped by a signal: the step hook saved
    if (checkpointer) checkpointer->finish();  // the save is durable and logged
    std::cerr << "alloy: stopped by " << StopSignals::name(signals.signal()) << " at step "
              << trainer.steps() << " of " << o.steps << "; ";
    if (!o.checkpoint_dir.empty()) {
      std::cerr << "continue with --resume " << o.checkpoint_dir << std::endl;
    } else {
      std::cerr << "no checkpoint saved (no --checkpoint-dir)" << std::endl;
    }
    return kExitFailure;
  }
  const double tokens_per_second = trainer.tokens_per_second();
  if (checkpointer) checkpointer->save(checkpoint_source(trainer));
  const double val_loss = trainer.val_loss();
  const bool ema = trainer.precision().ema_decay() > 0.0f;
  const double val_loss_ema = ema ? trainer.val_loss_ema() : 0.0;
  const std::vector<std::string> digests = trainer.gather_params_digests();  // every rank's
  // After the collectives, so that a failed save fails rank 0 alone; before the end event.
  if (checkpointer) checkpointer->finish();
  const std::string& digest = digests[static_cast<std::size_t>(trainer.rank())];
  human << "done: " << trainer.steps() << " steps, validation loss " << std::fixed
        << std::setprecision(4) << val_loss;
  if (ema) human << " (weight averages " << val_loss_ema << ")";
  human << std::defaultfloat << " over the whole split, "
        << static_cast<std::int64_t>(tokens_per_second) << " tokens/s, params " << digest
        << std::endl;
  if (log) {
    JsonObject event;
    event.add("event", "end")
        .add("step", trainer.steps())
        .add("val_loss", val_loss)
        .add("tokens_per_second", tokens_per_second)
        .add("params_digest", digest);
    if (ema) event.add("val_loss_ema", val_loss_ema);
    if (group) event.add("world_size", trainer.world_size()).add("params_digests", digests);
    log->write(event);
  }
  return kExitSuccess;
}

}  // namespace alloy::app
