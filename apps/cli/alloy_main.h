// The `alloy` command as a function. apps/cli/main.cpp is nothing but a call to it, so a program of
// one's own that registers its models (core/models/models.h: register_model) and then calls
// run_alloy is the whole `alloy` command with those models: `my_program train --model NAME`,
// `mem --model NAME`, `eval` and `ckpt` behave exactly as `alloy`'s, data-parallel launches
// included (the launcher starts copies of this same program).
#pragma once

namespace alloy::app {

// Runs the command given by argv[1..] (train, eval, mem, ckpt, --help, --version) and returns
// the exit status of the command-line contract: 0 success, 2 usage error, 1 any other
// failure, with the failure's one line on standard error. Catches every exception. May
// re-execute this program (/proc/self/exe with the same argv) once, before anything else, to
// select OpenBLAS's best kernels for this CPU (core/ops/cpu/blas_core.h): call it first thing
// in main, with main's own argc and argv.
int run_alloy(int argc, char** argv);

}  // namespace alloy::app
