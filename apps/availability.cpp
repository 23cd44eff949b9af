#include "apps/availability.h"

#include <cstdlib>

#include "core/error.h"

namespace alloy::app {

namespace {
// Environment variables a launcher (torchrun, mpirun, srun) sets for a multi-process job.
const char* const kWorldSizeVariables[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"};
}  // namespace

void check_train_features_available(const TrainOptions& o) {
  const amp::AmpProperties& p = o.precision;
  if (p.level != amp::OptLevel::O0) {
    fail("opt level ", amp::opt_level_name(p.level),
         " is not available yet: `alloy train` runs fp32 (O0) only until mixed-precision "
         "training lands; use --opt-level O0");
  }
  if (o.was_given("half-dtype") && p.half_dtype != DType::f16) {
    fail("--half-dtype bf16 is not available yet: mixed-precision training has not landed");
  }
  if (p.loss_scale.dynamic || p.loss_scale.static_scale != 1.0f) {
    fail("loss scaling (--loss-scale and its tuning flags) is not available yet: it comes with "
         "mixed-precision training, which has not landed");
  }
  if (o.nodes > 1 || o.gpus > 1) {
    fail(o.nodes > 1 ? "--nodes " : "--gpus ", o.nodes > 1 ? o.nodes : o.gpus,
         " is not available yet: data-parallel training has not landed; run one process");
  }
  for (const char* flag : {"master-addr", "master-port", "allreduce-fp32"}) {
    if (o.was_given(flag)) {
      fail("--", flag, " is not available yet: data-parallel training has not landed");
    }
  }
  for (const char* variable : kWorldSizeVariables) {
    const char* value = std::getenv(variable);
    if (value && std::atoi(value) > 1) {
      fail(variable, "=", value, " asks for a multi-process run, which is not available yet: ",
           "data-parallel training has not landed");
    }
  }
}

void command_not_available(const char* command, const char* missing_piece) {
  fail("`alloy ", command, "` is not available yet: ", missing_piece, " has not landed");
}

}  // namespace alloy::app
