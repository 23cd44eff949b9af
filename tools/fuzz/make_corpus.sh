#!/bin/sh
# Rewrites tests/data/checkpoint_corpus from tests/core/checkpoint/damaged_files.h (plus one
# valid file), keeping inputs added from fuzzer crashes. Run it after changing the format.
# Usage: tools/fuzz/make_corpus.sh [BUILD_DIR]    (default: build)
set -eu
build=${1:-build}
cmake --build "$build" --target core_checkpoint_corpus_test
"$build/tests/core_checkpoint_corpus_test" --run_test=corpus/regenerate --log_level=message
