#!/usr/bin/env bash
# The GPU tests, in two steps: built here, run on the GPU machine.
#
#   bash bench/gpu_tests.sh pack   # here (needs `source ../shared/cuda/toolkit.sh`): builds, with
#                                  # --features nccl, every test target that holds a test ignored
#                                  # for wanting a GPU, each stripped into .carry/tests/NAME.tar.gz
#   bash bench/gpu_tests.sh run    # on the GPU machine: each binary under .carry/tests/ with
#                                  # --include-ignored, one line per binary, logs in $OUT/tests/
#
# One archive per binary: each is ~14 MB (candle's kernels inside), so a device call that may
# carry 64 MiB takes them in groups, e.g. carry .carry/tests/{ops_gpu,channels_last_gpu}.tar.gz.
#
# A test that needs a GPU is `#[ignore = "needs a CUDA GPU: ..."]`: a machine without one reports
# it ignored; here every test of those binaries runs, the ignored ones included.
# Environment (run): OCTET_TEST_SKIP (a --skip filter, default profile_resnet18: the CUDA
# kernels' benchmark, run by bench/gpu_infer.sh), OCTET_FASHION_MNIST (the full Fashion-MNIST,
# for cuda_fashion_mnist; default .carry/fashion-mnist).
set -uo pipefail
cd "$(dirname "$0")/.."
# What a test that needs CUDA says in its #[ignore]: a GPU, or NVRTC's library (a GPU machine has it).
MARK='ignore = "needs (a CUDA GPU|libnvrtc)'
case "${1:-}" in
  pack)
    set -e
    # package:target pairs, from the files that hold the marker.
    targets=()
    for f in $(grep -rlE --include='*.rs' "$MARK" --exclude-dir=target --exclude-dir=vendor .); do
      f=${f#./}
      dir=$(dirname "$f"); while [ ! -f "$dir/Cargo.toml" ]; do dir=$(dirname "$dir"); done
      pkg=$(sed -n 's/^name = "\(.*\)"/\1/p' "$dir/Cargo.toml" | head -1)
      case "$f" in
        */tests/common/*|tests/common/*) continue ;;
        */tests/*.rs|tests/*.rs) targets+=("$pkg:--test=$(basename "$f" .rs)") ;;
        *) targets+=("$pkg:--lib") ;;
      esac
    done
    mapfile -t targets < <(printf '%s\n' "${targets[@]}" | sort -u)
    args=()
    for t in "${targets[@]}"; do args+=(-p "${t%%:*}" "${t#*:}"); done
    echo "GPU test targets: ${targets[*]}"
    out=$(mktemp -d)
    rm -rf .carry/tests && mkdir -p .carry/tests
    cargo test --release --features nccl --no-run --message-format=json "${args[@]}" |
      python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])' |
      while read -r name exe; do
        cp "$exe" "$out/$name" && strip "$out/$name" && tar czf ".carry/tests/$name.tar.gz" -C "$out" "$name"
      done
    ls -la .carry/tests
    ;;
  run)
    export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
    export NCCL_NVLS_ENABLE=0 OCTET_DATA_DIR=$PWD/data
    export OCTET_FASHION_MNIST=${OCTET_FASHION_MNIST:-$PWD/.carry/fashion-mnist}
    OUT=${OUT:-bench/out}
    mkdir -p "$OUT/tests" /tmp/octet-tests
    status=0
    for a in .carry/tests/*.tar.gz; do
      name=$(basename "$a" .tar.gz)
      tar xzf "$a" -C /tmp/octet-tests || exit 1
      t=/tmp/octet-tests/$name
      timeout 300 "$t" --include-ignored --test-threads=1 --skip "${OCTET_TEST_SKIP:-profile_resnet18}" \
        > "$OUT/tests/$name.txt" 2>&1
      rc=$?
      [ $rc = 0 ] || status=1
      echo "$name: exit $rc, $(grep -E '^test result' "$OUT/tests/$name.txt" | tail -1)"
      grep -E '^test .*FAILED|panicked' "$OUT/tests/$name.txt" | head -5
    done
    exit $status
    ;;
  *) echo "usage: bash bench/gpu_tests.sh pack|run" >&2; exit 2 ;;
esac
