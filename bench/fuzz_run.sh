#!/usr/bin/env bash
# Runs a cargo-fuzz target for a fixed time at the lowest CPU priority, on a working copy of its
# seed corpus (corpus-run/TARGET beside the target, ignored by git), and leaves a log that
# bench/fuzz_summary.sh turns into bench/results/fuzz_TARGET.json. Targets: parse and
# parse_fixed (the .o8 parser, runtime/fuzz, corpus runtime/fuzz/corpus/TARGET) and
# tflite_import (`octet import`, export/fuzz, corpus the models of tests/data/mlperf_tiny).
#
#   bash bench/fuzz_run.sh parse_fixed 3600 /tmp/fuzz_parse_fixed.log
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`); RUSTC_BOOTSTRAP=1 lets a stable toolchain take
# the sanitizer flags. Not part of CI.
set -euo pipefail
target=${1:?target: parse, parse_fixed or tflite_import}
secs=${2:-3600}
log=${3:-/tmp/fuzz_${target}.log}
root=$(cd "$(dirname "$0")/.." && pwd)
case $target in
  tflite_import) cd "$root/export/fuzz"; seeds=("$root"/tests/data/mlperf_tiny/*.tflite) ;;
  *) cd "$root/runtime/fuzz"; seeds=(corpus/"$target"/*) ;;
esac
corpus=corpus-run/$target
mkdir -p "$corpus"
cp -n "${seeds[@]}" "$corpus"/ 2>/dev/null || true
{
  echo "# target=$target"
  echo "# seconds=$secs"
  echo "# started=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# machine=$(uname -srm); $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  echo "# commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- "$root/runtime/src" "$root/export/src" || echo '+uncommitted changes')"
  echo "# corpus_start_files=$(find "$corpus" -type f | wc -l)"
  echo "# corpus_start_bytes=$(du -sb "$corpus" | cut -f1)"
  echo "# command=RUSTC_BOOTSTRAP=1 nice -n 19 cargo fuzz run $target $corpus -- -max_total_time=$secs -print_final_stats=1"
} >"$log"
set +e
RUSTC_BOOTSTRAP=1 nice -n 19 cargo fuzz run "$target" "$corpus" -- \
  -max_total_time="$secs" -print_final_stats=1 >>"$log" 2>&1
rc=$?
set -e
{
  echo "# exit=$rc"
  echo "# ended=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# corpus_end_files=$(find "$corpus" -type f | wc -l)"
  echo "# corpus_end_bytes=$(du -sb "$corpus" | cut -f1)"
  echo "# artifacts=$(find artifacts/"$target" -type f 2>/dev/null | wc -l)"
} >>"$log"
exit $rc
