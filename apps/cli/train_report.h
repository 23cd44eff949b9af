// What `alloy train` tells its user: a progress bar on a terminal, one human line per epoch,
// and the JSON log of the command line contract (start, epoch and end events). Human lines go
// to standard output, or to standard error when the JSON log takes standard output.
#pragma once

#include <iosfwd>
#include <memory>
#include <string>

#include "apps/cli/json_log.h"
#include "apps/cli/progress.h"
#include "apps/cli/train_options.h"
#include "apps/train/trainer.h"

namespace alloy::app {

class TrainReport : public TrainObserver {
 public:
  // Opens the JSON log (if any) right away, so a bad path fails before any work.
  // `append_log`: continue the JSON log of an earlier generation of a restarted job.
  explicit TrainReport(const TrainOptions& options, bool append_log = false);

  void start(Trainer& trainer);
  void on_epoch_begin(std::int64_t epoch, std::int64_t batches) override;
  void on_step(std::int64_t batches, std::int64_t images, double seconds,
               const std::function<double()>& mean_loss) override;
  void on_epoch_end(const EpochStats& stats) override;
  // `digests`: every rank's params digest, by rank, in a data-parallel run (the end event
  // then carries world_size and params_digests, at world size 1 too); empty for a single
  // process. The start event of a data-parallel run names its dist_backend.
  void end(Trainer& trainer, const std::vector<std::string>& digests = {});
  // A checkpoint was written: the JSON log's checkpoint event, and a line for people when no
  // progress bar is being drawn.
  // `stall_seconds` and `write_seconds` as apps/train/checkpointer.h's Timing.
  void on_checkpoint(const std::string& path, std::int64_t step, double stall_seconds = 0,
                     double write_seconds = 0);
  // A restarted job's workers (apps/train/elastic.h): the JSON log's restart event, before start.
  // `checkpoint` is the file resumed from, empty for a fresh start.
  void restart(int generation, const std::string& cause, const std::string& checkpoint);
  // Training stopped mid-epoch: clears the progress bar.
  void interrupted() { progress_.reset(); }

 private:
  bool scheduled() const { return options_.lr_schedule != "constant" || options_.warmup_steps > 0; }

  const TrainOptions& options_;
  std::unique_ptr<JsonLog> log_;
  std::ostream& human_;
  std::unique_ptr<ProgressBar> progress_;
  double total_seconds_ = 0;
};

}  // namespace alloy::app
