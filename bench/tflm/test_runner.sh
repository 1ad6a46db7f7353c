#!/usr/bin/env bash
# Checks runner.cc's contract on one build: its outputs equal the pip
# tflite_micro interpreter's on a model of TFLM's, and every bad input gets
# its exit code (2 arguments, 1 files) and a message, with no output file.
# Usage: bench/tflm/test_runner.sh TFLM_SRC_DIR BUILD_DIR
set -uo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 TFLM_SRC_DIR BUILD_DIR" >&2
  exit 2
fi
model=$(realpath "$1")/tensorflow/lite/micro/models/person_detect.tflite
runner=$(realpath "$2")/default/runner
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
failures=0
# expect CODE MESSAGE_PART ARGS...: the runner exits CODE, says MESSAGE_PART
# on stderr and leaves no out.bin.
expect() {
  local code=$1 part=$2
  shift 2
  rm -f out.bin
  "$runner" "$@" 2>err.txt
  local got=$?
  if [ "$got" -ne "$code" ] || ! grep -q -- "$part" err.txt || [ -e out.bin ]; then
    echo "FAIL: runner $* -> exit $got, stderr '$(cat err.txt)' (want $code, '$part')"
    failures=$((failures + 1))
  fi
}
python3 -c "import numpy as np; np.random.default_rng(7).integers(0, 256, 3 * 96 * 96, dtype=np.uint8).tofile('in.bin')"
head -c 1000 "$model" >truncated.tflite
expect 2 usage "$model" in.bin
expect 2 "N must be a positive integer" "$model" in.bin 0 out.bin
expect 2 "N must be a positive integer" "$model" in.bin 3x out.bin
expect 2 "arena_MiB must be" "$model" in.bin 3 out.bin 0
expect 1 "holds 27648 bytes; 4 records of 9216" "$model" in.bin 4 out.bin
expect 1 "cannot open" "$model" missing.bin 3 out.bin
expect 1 "not a valid TFLite flatbuffer" truncated.tflite in.bin 3 out.bin

# The good path: 3 records, byte-identical to the pip interpreter.
"$runner" "$model" in.bin 3 out.bin || { echo "FAIL: the good run exited $?"; failures=$((failures + 1)); }
python3 - "$model" <<'PY' || failures=$((failures + 1))
import sys
import numpy as np
from tflite_micro.python.tflite_micro import runtime
it = runtime.Interpreter.from_file(sys.argv[1])
want = b""
for x in np.fromfile("in.bin", np.int8).reshape(3, 1, 96, 96, 1):
    it.set_input(x, 0)
    it.invoke()
    want += it.get_output(0).tobytes()
got = open("out.bin", "rb").read()
if got != want:
    sys.exit(f"FAIL: runner {got.hex()} != pip {want.hex()}")
PY
if [ "$failures" -ne 0 ]; then
  echo "$failures runner checks failed"
  exit 1
fi
echo "runner checks passed"
