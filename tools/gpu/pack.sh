#!/usr/bin/env bash
# Packs the CUDA build for a lent GPU machine within the 64 MiB a device call carries:
# ../shared/gpu/pack.sh builds the tree into /tmp/alloy-gpu and archives it at xz -6, which
# since the gpu tests grew comes to 107-118 MiB and which it then refuses. This archives the
# same tree again with the test binaries the gpu-labelled tests do not run left out, at xz -9
# (its 64 MiB dictionary spans whole binaries, which share most of their code): about 46 MiB
# (2026-11-26; all test binaries at -9 were 62 MiB, too close to the limit with the source).
#
#   tools/gpu/pack.sh            # then a device run with carry [".gpu"], as shared/gpu/README.md
set -euo pipefail
root=$(git rev-parse --show-toplevel)
top=/tmp/alloy-gpu
out=$root/.gpu
log=$(mktemp)
trap 'rm -f "$log" "$log.skip"' EXIT
if ! "$root/../shared/gpu/pack.sh" >"$log" 2>&1; then
  grep -q 'too large to carry' "$log" || { cat "$log"; exit 1; }
fi
grep -v 'too large to carry\|a call carries 64 MiB' "$log"
# The executables of the gpu-labelled tests; every other test binary stays behind.
ctest --test-dir "$top/build" -L gpu --show-only=json-v1 | python3 -c '
import json, os, sys
kept = {t["command"][0] for t in json.load(sys.stdin)["tests"] if t.get("command")}
tests = sys.argv[1]
for name in sorted(os.listdir(tests)):
    path = os.path.join(tests, name)
    if os.path.isfile(path) and os.access(path, os.X_OK) and path not in kept:
        print(path.lstrip("/"))
' "$top/build/tests" >"$log.skip"
echo "pack: archiving again at xz -9 without $(wc -l <"$log.skip") test binaries that no gpu test runs"
data=/usr/share/datasets/fashion-mnist
tar -cf - --exclude='*.o' --exclude='*.a' --exclude='.ninja_*' -X "$log.skip" -C / \
  "${top#/}/src" "${top#/}/build" "${top#/}/lib" "${data#/}" | xz -T2 -9 >"$out/alloy-gpu.tar.xz"
size=$(du -m "$out/alloy-gpu.tar.xz" | cut -f1)
echo "pack: $out/alloy-gpu.tar.xz is ${size} MiB"
((size < 58)) || { echo "pack: too large to carry with the source tree (64 MiB in all)"; exit 1; }
