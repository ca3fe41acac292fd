#!/bin/bash
# fuzz/run_bounded.sh TARGET CORPUS_DIR: one bounded libFuzzer run of TARGET
# for FERRY_FUZZ_SECONDS (default 60) over a scratch copy of CORPUS_DIR (the
# checked-in corpus is never written). Prints the final stats line
# ("#N DONE cov: C ft: F corp: ... exec/s: E") and exits non-zero on a
# crash, a leak or a timeout, printing the input that caused it.
set -uo pipefail
target=$(realpath -- "$1"); corpus=$(realpath -- "$2"); secs=${FERRY_FUZZ_SECONDS:-60}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cp -r "$corpus/." "$work/corpus/" 2>/dev/null || { mkdir -p "$work/corpus"; cp -r "$corpus/." "$work/corpus/"; }
cd "$work"
"$target" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$work/" corpus >log 2>&1
rc=$?
grep -E '^#[0-9]+[[:space:]]+DONE|^stat::' log
if ((rc != 0)); then
  tail -n 40 log
  for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-*; do
    [[ -e $f ]] && { echo "input $f:"; od -A x -t x1z "$f" | head -20; }
  done
  echo "fuzz: $(basename "$target") FAILED (exit $rc)"
  exit 1
fi
echo "fuzz: $(basename "$target") ran ${secs} s clean"
