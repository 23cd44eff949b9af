#!/bin/sh
# Rewrites tests/data/checkpoint_corpus from tests/core/checkpoint/damaged_files.h (plus one
# valid file) and tests/data/safetensors_corpus from the faults and valid files of
# tests/core/checkpoint/safetensors_read_test.cpp, keeping inputs added from fuzzer crashes. Run
# it after changing either format.
# Usage: tools/fuzz/make_corpus.sh [BUILD_DIR]    (default: build)
set -eu
build=${1:-build}
cmake --build "$build" --target core_checkpoint_corpus_test core_checkpoint_safetensors_read_test
"$build/tests/core_checkpoint_corpus_test" --run_test=corpus/regenerate --log_level=message
"$build/tests/core_checkpoint_safetensors_read_test" --run_test=safetensors_read/regenerate \
  --log_level=message
