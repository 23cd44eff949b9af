#!/usr/bin/env bash
# Alloy against PyTorch at its defaults and at its best on one CUDA GPU: the rows, the protocol
# and the outputs are described in tools/bench/gpu_bench.py (--help prints it).
#
#   tools/bench/gpu_vs_pytorch.sh --dry-run                    # every row, no GPU needed
#   tools/bench/gpu_vs_pytorch.sh --parts resnet50 --rounds 3 --out DIR
#   tools/bench/gpu_vs_pytorch.sh --time-budget 300 --commit TEXT --results-dir DIR --tar FILE
#   tools/bench/gpu_vs_pytorch.sh --device cpu --python /usr/bin/python3   # the rehearsal
#
# The driver needs only Python 3.9's standard library; the PyTorch rows run with --python
# (default python3), without LD_LIBRARY_PATH (PyTorch loads the cuDNN and cuBLAS of its own
# wheels: a path set for Alloy's libraries makes it load others and refuse to start).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
driver=python3
command -v "$driver" >/dev/null || driver=/usr/bin/python3
exec "$driver" "$here/gpu_bench.py" --command-line "$(printf '%q ' "$0" "$@")" "$@"
