#!/usr/bin/env bash
# Packs a CUDA build of this repository for a bare GPU machine (one without Boost, Gloo, OpenBLAS
# or the data sets, and without a network): the build tree, the non-system runtime libraries
# and the data, in one archive that tools/gpu/on-device.sh unpacks at the same absolute paths
# there (so ctest's paths hold).
#
#   tools/gpu/pack.sh [--data FILE]... [--all]
#
# It copies the working tree (tracked and untracked-not-ignored files) to /tmp/alloy-gpu/src,
# builds it with -DALLOY_CUDA=ON -DALLOY_NATIVE=OFF (the GPU machine's CPU is not this one's)
# into /tmp/alloy-gpu/build, and writes .gpu/alloy-gpu.tar.xz and .gpu/on-device.sh. Only the
# `alloy` command, the GPU probes and the gpu-labelled tests are built and packed (--all builds
# every target, as CI's CUDA build would): the CPU tests never run there, and leaving them out
# halves the build and the archive. Each --data FILE (a text corpus, say) is packed into
# /tmp/alloy-gpu/data; Fashion-MNIST comes from /usr/share/datasets/fashion-mnist.
# Unchanged files keep their times, so a repack after a small change rebuilds only what changed.
# Extra CMake flags: ALLOY_GPU_CMAKE_ARGS. Exit 1 when the archive is too large to carry.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=/tmp/alloy-gpu
out=$root/.gpu
data_files=()
all=0
while (($#)); do
  case $1 in
    --data) data_files+=("$(realpath "${2:?pack.sh: --data needs a file}")"); shift 2 ;;
    --all) all=1; shift ;;
    *) echo "pack.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
for f in "${data_files[@]}"; do [[ -f $f ]] || { echo "pack.sh: no such file: $f" >&2; exit 2; }; done
fmnist=/usr/share/datasets/fashion-mnist
[[ -d $fmnist ]] || { echo "pack.sh: $fmnist is missing (tools/setup.sh installs it)" >&2; exit 1; }

mkdir -p "$out" "$top/src"
grep -qxF '/.gpu/' "$root/.git/info/exclude" 2>/dev/null || echo '/.gpu/' >>"$root/.git/info/exclude"
touch "$top/.packed-here"  # not archived: on-device.sh never unpacks over the packing tree

echo "pack: syncing the working tree to $top/src"
list=$(mktemp)
trap 'rm -f "$list" "$list".*' EXIT
(cd "$root" && git ls-files -z --cached --others --exclude-standard) | sort -z >"$list.want"
(cd "$top/src" && find . -type f -printf '%P\0') | sort -z >"$list.have"
comm -z -23 "$list.have" "$list.want" | (cd "$top/src" && xargs -0 -r rm -f)
# A file deleted but not yet committed is listed and missing: skipped, like git's own view.
(cd "$root" && xargs -0 -r cp -p -u --parents -P -t "$top/src/" <"$list.want" 2>/dev/null || true)

echo "pack: configuring and building $top/build (CUDA on, portable CPU code)"
cmake -S "$top/src" -B "$top/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DALLOY_CUDA=ON \
  -DALLOY_NATIVE=OFF ${ALLOY_GPU_CMAKE_ARGS:-} >"$out/configure.log" 2>&1 ||
  { tail -30 "$out/configure.log"; exit 1; }
ctest --test-dir "$top/build" -N -L gpu | awk '/Test +#/ {print $3}' >"$list.gpu"
targets=()
((all)) || targets=(alloy conv_algorithms gemm_algorithms $(cat "$list.gpu"))
ninja -C "$top/build" "${targets[@]}" >"$out/build.log" 2>&1 || { grep -B2 -A20 'FAILED' "$out/build.log" | head -60; exit 1; }

echo "pack: collecting the runtime libraries that are neither the system's nor CUDA's"
rm -rf "$top/lib" "$top/data"
mkdir -p "$top/lib" "$top/data"
find "$top/build/bin" "$top/build/tests" -maxdepth 1 -type f -perm -u+x -print0 |
  xargs -0 ldd 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' |
  grep -vE 'libcud|libcublas|libnccl|libnvrtc|libnvJitLink|libcupti' |
  while read -r lib; do cp -L "$lib" "$top/lib/"; done
for f in "${data_files[@]}"; do cp -p "$f" "$top/data/"; done

echo "pack: archiving"
# Test executables that no gpu-labelled test runs stay behind.
(cd "$top/build/tests" && find . -maxdepth 1 -type f -perm -u+x -printf '%P\n') | sort >"$list.exe"
sort "$list.gpu" | comm -23 "$list.exe" - | sed "s|^|${top#/}/build/tests/|" >"$list.skip"
# xz -9: its 64 MiB dictionary spans whole binaries, which share most of their code.
tar -cf - --exclude='*.o' --exclude='*.a' --exclude='.ninja_*' -X "$list.skip" -C / \
  "${top#/}/src" "${top#/}/build" "${top#/}/lib" "${top#/}/data" "${fmnist#/}" |
  xz -T0 -9 >"$out/alloy-gpu.tar.xz"
cp "$here/on-device.sh" "$out/on-device.sh"
size=$(du -m "$out/alloy-gpu.tar.xz" | cut -f1)
echo "pack: $out/alloy-gpu.tar.xz is ${size} MiB"
((size < 58)) || { echo "pack: too large to carry with the source tree (64 MiB in a call)"; exit 1; }
echo "pack: next, on the GPU machine (carry .gpu): bash .gpu/on-device.sh [COMMAND...]"
