#!/usr/bin/env bash
# Runs on the GPU machine, from the repository's root, with the .gpu folder that
# tools/gpu/pack.sh wrote:
#
#   bash .gpu/on-device.sh                 # probe, then ctest -L gpu
#   bash .gpu/on-device.sh CMD ARGS...     # probe, then CMD with the environment below
#
# It unpacks the bundle at /tmp/alloy-gpu (once per machine), finds cuBLAS, cuDNN and NCCL
# (CUDA's folders or the Python wheels of the machine's PyTorch), sets LD_LIBRARY_PATH, checks
# that every library of `alloy` resolves, and exports ALLOY (the command), ALLOY_BUILD,
# ALLOY_SRC and ALLOY_DATA (the files packed with --data). The probe goes to $OUT/probe.txt.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=/tmp/alloy-gpu
OUT=${OUT:-/tmp/alloy-gpu-out}
mkdir -p "$OUT"
sum=$(md5sum "$here/alloy-gpu.tar.xz" | cut -d' ' -f1)
if [[ -e $top/.packed-here ]]; then
  :  # the machine that packed the bundle: its build tree is in place
elif [[ $(cat "$top/.bundle-sum" 2>/dev/null) != "$sum" ]]; then
  rm -rf "$top"
  tar -xJf "$here/alloy-gpu.tar.xz" -C / || { echo "on-device: cannot unpack the bundle"; exit 1; }
  echo "$sum" >"$top/.bundle-sum"
fi
dirs=("$top/lib")
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
  [[ -d $d ]] && dirs+=("$d")
done
if py=$(command -v python3); then
  for s in $("$py" -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null); do
    for d in "$s"/nvidia/*/lib; do [[ -d $d ]] && dirs+=("$d"); done
  done
fi
LD_LIBRARY_PATH=$(IFS=:; echo "${dirs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
export ALLOY=$top/build/bin/alloy ALLOY_BUILD=$top/build ALLOY_SRC=$top/src ALLOY_DATA=$top/data
export PATH=$top/build/bin:$PATH
{
  echo "== probe $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) x $(nproc)"
  for l in libcudart libcublas libcublasLt libcudnn libnccl; do
    f=$(ldd "$ALLOY" | awk -v l="$l.so" 'index($1, l) == 1 {print $3; exit}')
    echo "$l -> ${f:-NOT FOUND}"
  done
  missing=$(ldd "$ALLOY" "$top"/build/tests/* 2>/dev/null | grep 'not found' | sort -u)
  [[ -z $missing ]] || { echo "unresolved libraries:"; echo "$missing"; }
  "$ALLOY" --version
} 2>&1 | tee "$OUT/probe.txt"
if (($#)); then
  "$@"
  exit $?
fi
ctest --test-dir "$ALLOY_BUILD" -L gpu --output-on-failure 2>&1 | tee "$OUT/ctest-gpu.txt" | tail -40
