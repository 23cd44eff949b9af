// alloy train: parse, check what is available, pick the device, load the data (and the
// checkpoint to resume from), train with periodic checkpoints, report.
#include <iostream>
#include <memory>
#include <optional>

#include "apps/cli/cli.h"
#include "apps/cli/commands.h"
#include "apps/cli/exit_codes.h"
#include "apps/cli/launcher.h"
#include "apps/cli/sequence_flags.h"
#include "apps/cli/train_options.h"
#include "apps/cli/train_report.h"
#include "apps/train/checkpointer.h"
#include "apps/train/data_parallel.h"
#include "apps/train/device_choice.h"
#include "apps/train/elastic.h"
#include "apps/train/lm_trainer.h"
#include "apps/train/micro_batches.h"
#include "apps/train/stop_signals.h"
#include "apps/train/trainer.h"
#include "apps/train/training_state.h"
#include "core/checkpoint/sharded_checkpoint.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace alloy::app {

namespace {
void warn(const std::string& message) {
  std::cerr << "alloy: warning: " << message << std::endl;
}
}  // namespace

int run_train(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    print_train_help();
    return kExitSuccess;
  }
  TrainOptions options = parse_train_options(args);
  for (const char* flag : {"checkpoint-every", "keep-checkpoints"}) {
    if (options.was_given(flag) && options.checkpoint_dir.empty()) {
      usage_fail("--", flag, " needs --checkpoint-dir");
    }
  }
  std::optional<checkpoint::LoadedCheckpoint> resume = load_resume(options, warn);
  // A resumed run builds the checkpoint's model unless --model says otherwise, with the
  // settings it was not given from the checkpoint.
  if (resume) apply_checkpoint_defaults(resume->state, options);
  if (!options.resume.empty()) resolve_sequence_options(options, resume ? &*resume : nullptr);
  if (models::is_gpt_model(options.model)) {
    return run_lm_train(std::move(options), args, std::move(resume));
  }
  // Data parallelism: a launcher starts the workers and waits; a rank joins the group.
  parallel::Rendezvous placement = resolve_train_rendezvous(options);
  check_elastic_options(options, placement);
  make_elastic_launcher(options, placement);
  const WorkerRestart restart = worker_restart_from_environment();
  if (resume) {
    // Checked again in full once the model is built; this fails before any data is loaded.
    if (resume->state.model != options.model) {
      fail("checkpoint ", resume->path, " holds model ", resume->state.model,
           ", but this run builds ", options.model);
    }
  }
  // The global batch splits evenly among the ranks and each rank's share among the
  // micro-batches (--accumulation-steps), with the checkpoint's values where not given.
  micro_batch_size(options.batch_size, placement.world_size, options.accumulation_steps);
  const bool data_parallel = joins_process_group(options, placement);
  if (data_parallel) check_distributed_options(options, placement);
  if (placement.is_launcher()) {
    if (options.max_restarts > 0) {
      run_elastic_launcher(options, placement, args);
    } else {
      run_launcher(options, placement, args);
    }
    return kExitSuccess;
  }
  set_cpu_threads(options.threads);
  // The rank's GPU is current before the process group or anything else creates CUDA state.
  const DeviceChoice device = choose_device(options.device, placement, probe_cuda_devices());
  make_current(device.device);
  std::unique_ptr<parallel::ProcessGroup> group;
  if (data_parallel) {
    options.dist_backend = dist_backend(options, device);  // resolved, for the log
    group = join_process_group(placement, device.device, options.dist_backend);
  }
  if (group) check_ranks_agree(*group, restart, resume);
  const bool rank0 = !group || group->rank() == 0;  // the one that reports and saves
  if (rank0) {
    std::cerr << "alloy: " << device.explanation;
    if (group) std::cerr << "; " << options.dist_backend << " over " << group->size() << " rank(s)";
    std::cerr << std::endl;
  }

  std::optional<TrainReport> report;
  if (rank0) report.emplace(options, /*append_log=*/restart.generation > 0);
  TrainObserver silent;
  TrainObserver& observer = report ? static_cast<TrainObserver&>(*report) : silent;
  Trainer trainer(options, device.device, load_training_data(options));
  if (group) {
    trainer.join_data_parallel(*group, ddp_options(options));
  }
  // --zero 1 over several ranks: sharded checkpoints, each rank its own range.
  const bool sharded = trainer.data_parallel() && trainer.data_parallel()->zero();
  std::string resume_path;
  if (resume && resume->manifest && !sharded) {
    // Opened for range reads, but this run keeps whole tensors (--zero 1 on one process).
    resume->state =
        checkpoint::gather_sharded_state(*resume->manifest, checkpoint::step_dir_of(resume->path));
    resume->manifest.reset();
  }
  if (resume) {
    if (sharded) {
      restore_sharded_training_state(trainer, *resume, warn);
    } else {
      restore_training_state(trainer, resume->state, resume->path, warn);
    }
    std::cerr << "alloy: resuming from " << resume->path << " at epoch "
              << trainer.epochs_done() + 1 << ", step " << trainer.steps() << std::endl;
    resume_path = resume->path;
    resume.reset();  // the weights are in the model now
  }

  std::unique_ptr<Checkpointer> checkpointer;
  // Rank 0 saves, or with sharded checkpoints every rank its shard (rank 0 reports).
  if (!options.checkpoint_dir.empty() && (rank0 || sharded)) {
    Checkpointer::Saved saved;
    if (report) {
      saved = [&report](const std::string& path, std::int64_t step,
                        const Checkpointer::Timing& timing) {
        report->on_checkpoint(path, step, timing.stall_seconds, timing.write_seconds);
      };
    }
    checkpointer =
        std::make_unique<Checkpointer>(options.checkpoint_dir, options.keep_checkpoints, saved,
                                       options.async_checkpoint, sharded ? group.get() : nullptr);
  }
  const StopSignals signals;
  trainer.set_step_hook([&] {
    bool stop = signals.requested();
    // A sharded save is a collective: every rank stops (and saves) at the same step.
    if (checkpointer && sharded) stop = checkpointer->step(stop);
    // The last step of an epoch (or of the run, --steps) is saved by the epoch hook, after
    // evaluation.
    const bool epoch_ends =
        trainer.epoch_batches_done() == trainer.epoch_batches() || trainer.step_limit_reached();
    const bool due = options.checkpoint_every > 0 &&
                     trainer.steps() % options.checkpoint_every == 0 && !epoch_ends;
    if (checkpointer) checkpointer->poll();  // an asynchronous save that ended: log or fail
    if (checkpointer && (stop || due)) checkpointer->save(trainer);
    return stop;
  });
  trainer.set_epoch_hook([&] {
    if (checkpointer) checkpointer->save(trainer);
    if (checkpointer && sharded) return checkpointer->step(signals.requested());
    return signals.requested();
  });

  if (report && restart.generation > 0) {
    report->restart(restart.generation, restart.cause, resume_path);
  }
  if (report) report->start(trainer);
  try {
    trainer.run(observer);
  } catch (const TrainingDiverged& diverged) {
    // The file to go back to: the newest saved before the overflows began.
    if (!checkpointer) throw;
    checkpointer->finish();
    // The poll that saw the streak may have been read a few steps after its own.
    const std::string good = checkpointer->newest_at_or_before(diverged.step() - diverged.streak());
    const std::string message = command_message(diverged);
    if (good.empty()) {
      fail(message, "; no checkpoint from before the overflows is left in ", checkpointer->dir());
    }
    fail(message, "; the last checkpoint before the overflows began is ", good,
         ": continue from it with --resume ", good);
  }
  if (checkpointer) checkpointer->finish();  // the last save is durable and logged
  if (trainer.stopped()) {
    // Preemption: the contract's failure status (1), since the run did not finish.
    if (report) report->interrupted();
    const EpochProgress& progress = trainer.epoch_progress();
    std::cerr << "alloy: stopped by " << StopSignals::name(signals.signal()) << " at step "
              << trainer.steps() << " (";
    if (progress.batches > 0) {
      std::cerr << "epoch " << trainer.epochs_done() + 1 << ", batch " << progress.batches << " of "
                << trainer.epoch_batches();
    } else {
      std::cerr << trainer.epochs_done() << " of " << options.epochs << " epochs done";
    }
    std::cerr << "); ";
    if (checkpointer) {
      std::cerr << "saved " << checkpointer->last_path() << "; continue with --resume "
                << checkpointer->dir() << std::endl;
    } else {
      std::cerr << "no checkpoint saved (no --checkpoint-dir)" << std::endl;
    }
    return kExitFailure;
  }
  if (rank0 && trainer.data_parallel()) {
    const parallel::DistributedDataParallel& ddp = trainer.data_parallel()->ddp();
    std::cerr << "alloy: data parallel over " << ddp.world_size() << " ranks, "
              << ddp.buckets().size() << " gradient bucket(s): " << ddp.wait_seconds() << " s of "
              << ddp.step_seconds() << " s of steps waiting for allreduce (rank 0)" << std::endl;
  }
  const std::vector<std::string> digests = trainer.gather_params_digests();  // every rank's
  if (report) report->end(trainer, digests);
  return kExitSuccess;
}

}  // namespace alloy::app
