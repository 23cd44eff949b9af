#!/usr/bin/env bash
# The project speaks for itself (ctest: tools_source_hygiene_test): its code says why, not when,
# and points at nothing outside the repository. Fails, listing each offending file:line, on
#  1. in core, amp, parallel, apps and tools: a word of 7-40 hex digits with at least one digit
#     and one letter a-f (a commit's abbreviated or full hash, a run's digest), and a 20YY-MM-DD
#     date. Not counted: 0x and 0b literals, the digits after a decimal point (a float
#     constant's fraction or exponent) and longer words (a SHA-256 test vector);
#  2. in every tracked text file but the records under docs/results/: the name of the old design
#     document, an issue cited by its number ("issue" or "issues", then a number) and a path
#     into the folder beside the checkout that the repository does not hold ("shared" then a
#     slash).
# Exit 77 (ctest: skipped) outside a git checkout or where git grep has no Perl regexes.
#
#   tests/tools/source_hygiene_test.sh [ROOT]   (ROOT: the checkout, by default this one's)
set -euo pipefail
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
cd "$root"
if ! command -v git >/dev/null || ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "source_hygiene_test: skipped: $root is not a git checkout"
  exit 77
fi
rc=0
git grep -qP '(?<=a)b' -- CMakeLists.txt >/dev/null 2>&1 || rc=$?
if ((rc > 1)); then
  echo "source_hygiene_test: skipped: this git has no Perl regexes (git grep -P)"
  exit 77
fi

code_dirs=(core amp parallel apps tools)
# Written so that this file does not match itself: [.] and [/] stand for the literal characters.
hex='(?i)(?<![\w.])(?!0b[01]+(?!\w))(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?!\w)'
date='(?<!\d)20\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])(?!\d)'
design='DESIGN[.]md'
issue='(?i)\bissues?\s+#?\d+'
shared='\bshared[/]'

failures=0
# check NAME PATTERN PATHSPEC...: git grep's hits in tracked text files (the working tree's
# contents), each as file:line: text.
check() {
  local name=$1 pattern=$2
  shift 2
  local hits rc=0
  hits=$(git grep -nIP -e "$pattern" -- "$@") || rc=$?
  if ((rc > 1)); then
    echo "source_hygiene_test: git grep failed (exit $rc) on the check for $name" >&2
    exit 2
  fi
  if [[ -n $hits ]]; then
    echo "source_hygiene_test: $name ($(wc -l <<<"$hits") lines):"
    sed -E 's/^([^:]+:[0-9]+):[[:space:]]*/  \1: /' <<<"$hits" | cut -c1-200
    failures=$((failures + 1))
  fi
}

check "a hex word (a commit hash or digest) in code" "$hex" "${code_dirs[@]}"
check "a date in code" "$date" "${code_dirs[@]}"
everything=(. ':!docs/results/')
check "the old design document" "$design" "${everything[@]}"
check "an issue by its number" "$issue" "${everything[@]}"
check "a path into the folder beside the checkout" "$shared" "${everything[@]}"

if ((failures)); then
  echo "source_hygiene_test: $failures of 5 checks failed: say why in words, not which commit," \
    "run, date or issue"
  exit 1
fi
echo "source_hygiene_test: no hashes, dates, issue numbers or outside paths"
