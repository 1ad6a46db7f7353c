#!/usr/bin/env bash
# Validates the builds of bench/tflm/build.sh on TFLM's own quantized models:
# the pip tflite_micro interpreter and the `default` build must agree byte for
# byte; how the `single_rounding` build departs is the rounding variant's
# effect. Writes one JSON list of compare.py reports.
#
# Usage: bench/tflm/validate.sh TFLM_SRC_DIR BUILD_DIR OUT_JSON [N_RANDOM]
set -euo pipefail
if [ $# -lt 3 ] || [ $# -gt 4 ]; then
  echo "usage: $0 TFLM_SRC_DIR BUILD_DIR OUT_JSON [N_RANDOM, default 20]" >&2
  exit 2
fi
src=$(realpath "$1")
build=$(realpath "$2")
out=$(realpath -m "$3")
n=${4:-20}
here=$(realpath "$(dirname "$0")")
m=$src/tensorflow/lite/micro
# The int8 CNNs among TFLM's models, then the int8/int16 single-op models of
# its integration tests (conv, add, sub, pad, quantize, ... as TFLM tests them).
models=(
  "$m/models/person_detect.tflite"
  "$m/examples/micro_speech/models/micro_speech_quantized.tflite"
  "$m/examples/hello_world/models/hello_world_int8.tflite"
)
mapfile -t seanet < <(ls "$m"/integration_tests/seanet/*/*.tflite | sort -V)
models+=("${seanet[@]}")

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
i=0
for model in "${models[@]}"; do
  i=$((i + 1))
  # From $tmp: TFLM's python/ folder must not shadow the pip package.
  (cd "$tmp" && python3 "$here/compare.py" "$model" --build-dir "$build" \
    --random "$n" --seed "$i" --out "$tmp/$i.json" >/dev/null) ||
    { echo "error: compare.py failed on $model" >&2; exit 1; }
  python3 - "$tmp/$i.json" "${model#"$src"/}" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p = r["pairs"]
print(f'{sys.argv[2]}: pip~default {p["pip vs default"]["differing_bytes"]} B, '
      f'default~single {p["default vs single_rounding"]["differing_values"]} values')
PY
done
python3 - "$out" "$tmp" "$i" <<'PY'
import json, os, sys
out, tmp, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
reports = [json.load(open(os.path.join(tmp, f"{k}.json"))) for k in range(1, n + 1)]
with open(out + ".partial", "w") as f:
    json.dump(reports, f, indent=1)
    f.write("\n")
os.replace(out + ".partial", out)
PY
echo "wrote $out (${#models[@]} models)"
