#!/usr/bin/env bash
# Installs what Alloy's build, tests and data need (Debian packages), then configures and builds
# everything - the `alloy` command and the test executables - into build/.
#
#   tools/setup.sh                 packages (only the missing ones) + configure + build
#   tools/setup.sh --with-torch    also python3-torch, for tools/bench/lenet_pytorch.py
#   tools/setup.sh --no-build      packages only
#
# Idempotent: with every package present it runs no apt-get at all, and a second build only
# recompiles what changed. Runs as root, or as a user with sudo.
#
# Environment:
#   ALLOY_BUILD_DIR   build directory (default: build, beside this script's tools/)
#   ALLOY_CUDA        ON, OFF or AUTO (default AUTO: the CUDA backend builds when nvcc is found,
#                     on PATH, in $CUDACXX or in /usr/local/cuda/bin), or EMULATED: the CUDA
#                     backend built by the host compiler against tools/cuda_emulator, which
#                     runs it without a GPU (needs the toolkit's headers only)
#   ALLOY_JOBS        parallel compile jobs (default: the cores this process may use)
#   ALLOY_BUILD_TARGET  one target to build instead of everything (e.g. gpu_tests)
#   ALLOY_WITH_TORCH  1: same as --with-torch
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${ALLOY_BUILD_DIR:-$here/build}"
cuda="${ALLOY_CUDA:-AUTO}"
with_torch="${ALLOY_WITH_TORCH:-0}"
do_build=1

for arg in "$@"; do
  case "$arg" in
    --with-torch) with_torch=1 ;;
    --no-build) do_build=0 ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "setup.sh: unknown argument '$arg' (see tools/setup.sh --help)" >&2
      exit 2
      ;;
  esac
done

say() { echo "setup.sh: $*" >&2; }

# --- packages -------------------------------------------------------------------------------
packages=(
  build-essential            # g++, make, libc headers
  cmake                      # 3.24 or newer (bookworm has 3.25)
  ninja-build
  ccache                     # shared compile cache between build trees and CI reruns
  libboost-program-options-dev
  libboost-serialization-dev # checkpoint archives
  libboost-test-dev          # the test suites
  libboost-context-dev       # the CUDA emulator's fibers (ALLOY_CUDA=EMULATED)
  zlib1g-dev                 # .gz data files
  libturbojpeg0-dev          # JPEG files of image folders (TurboJPEG)
  libpng-dev                 # PNG files of image folders
  libopenblas-dev            # CPU GEMM (CMakeLists.txt: cblas.h + libopenblas)
  libgloo-dev                # CPU collectives for data-parallel training
  dataset-fashion-mnist      # /usr/share/datasets/fashion-mnist
  python3-numpy              # tools/ scripts
  python3-pil                # JPEG folders (idx_to_folder.py), the image fuzz seeds, the loader bench
  gzip
  clang-format               # the style_format test (tools/style/check_format.sh)
  clang                      # tools/fuzz/run.sh: libFuzzer with AddressSanitizer and UBSan
  libclang-rt-14-dev         #   (their runtimes)
)
if [[ "$with_torch" == 1 ]]; then
  packages+=(python3-torch)  # the PyTorch baseline of tools/bench (large)
  packages+=(python3-torchvision)  # tools/bench's loader and ResNet-50 baselines
fi

installed() {
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" == "install ok installed" ]]
}

missing=()
if command -v dpkg-query >/dev/null; then
  for package in "${packages[@]}"; do
    installed "$package" || missing+=("$package")
  done
else
  say "dpkg-query not found: not a Debian system, so no packages are installed; the build needs"
  say "the equivalents of: ${packages[*]}"
fi

if ((${#missing[@]})); then
  if [[ "$(id -u)" == 0 ]]; then
    as_root=()
  elif command -v sudo >/dev/null; then
    as_root=(sudo)
  else
    say "missing packages (${missing[*]}) and neither root nor sudo: install them and rerun"
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  say "installing ${missing[*]}"
  # The package lists are refreshed once, and only when something has to be installed.
  "${as_root[@]}" apt-get update -q
  "${as_root[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  say "all ${#packages[@]} packages present"
fi

[[ "$do_build" == 1 ]] || exit 0

# --- configure and build --------------------------------------------------------------------
if [[ "$cuda" != OFF ]] && ! command -v nvcc >/dev/null && [[ -z "${CUDACXX:-}" ]] &&
  [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"  # the toolkit's usual place, often not on PATH
fi

builds_cuda=0
if [[ "$cuda" == EMULATED ]]; then
  builds_cuda=1
elif [[ "$cuda" != OFF ]] && { command -v nvcc >/dev/null || [[ -n "${CUDACXX:-}" ]]; }; then
  builds_cuda=1
fi

# The cuDNN frontend's C++ headers (header-only; core/ops/cuda/attention_cudnn.cpp), from the
# PyPI package's wheel into a cache outside the checkout, once per version. CUDA builds only.
frontend_version=1.32.0
frontend_include=""
fetch_cudnn_frontend() {
  local cache="${XDG_CACHE_HOME:-$HOME/.cache}/alloy/cudnn-frontend-$frontend_version"
  frontend_include="$cache/include"
  [[ -f "$frontend_include/cudnn_frontend.h" ]] && return 0
  command -v python3 >/dev/null || { say "python3 is needed to fetch the cuDNN frontend"; exit 1; }
  local download
  download="$(mktemp -d)"
  say "fetching the cuDNN frontend $frontend_version's headers (PyPI nvidia-cudnn-frontend)"
  python3 -m pip download -q --no-deps -d "$download" "nvidia-cudnn-frontend==$frontend_version" ||
    { say "pip download nvidia-cudnn-frontend==$frontend_version failed"; rm -rf "$download"; exit 1; }
  mkdir -p "$cache"
  # Only include/ from the wheel (or sdist): unpacked beside the cache, then moved in whole.
  python3 - "$download" "$cache" <<'EOF'
import pathlib, shutil, sys, tarfile, tempfile, zipfile
download, cache = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
archive = next(download.iterdir())
staging = pathlib.Path(tempfile.mkdtemp(dir=cache))
if archive.suffix == ".whl":
    with zipfile.ZipFile(archive) as z:
        z.extractall(staging, [n for n in z.namelist() if n.startswith("include/")])
else:
    with tarfile.open(archive) as t:
        t.extractall(staging, [m for m in t.getmembers() if "/include/" in m.name])
found = next(staging.rglob("cudnn_frontend.h"), None)
if found is None:
    sys.exit(f"setup.sh: {archive.name} holds no include/cudnn_frontend.h")
shutil.rmtree(cache / "include", ignore_errors=True)
found.parent.rename(cache / "include")
shutil.rmtree(staging)
EOF
  rm -rf "$download"
}
if [[ "$builds_cuda" == 1 ]]; then fetch_cudnn_frontend; fi

jobs="${ALLOY_JOBS:-$(nproc 2>/dev/null || echo 2)}"
# ccache rewrites the paths under the checkout relative to the build directory, so every clone
# (CI's fresh one included) shares the objects another clone compiled.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$here}"
configure=(cmake -S "$here" -B "$build_dir" -DALLOY_CUDA="$cuda")
if [[ -n "$frontend_include" ]]; then configure+=(-DCUDNN_FRONTEND_INCLUDE_DIR="$frontend_include"); fi
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  # A fresh tree: Ninja and Release. An existing tree keeps its generator and build type.
  configure+=(-G Ninja -DCMAKE_BUILD_TYPE=Release)
fi
say "configuring $build_dir (ALLOY_CUDA=$cuda)"
"${configure[@]}"
say "building with $jobs jobs"
cmake --build "$build_dir" --parallel "$jobs" ${ALLOY_BUILD_TARGET:+--target "$ALLOY_BUILD_TARGET"}
say "done: $build_dir/bin/alloy; tests: ctest --test-dir $build_dir"
