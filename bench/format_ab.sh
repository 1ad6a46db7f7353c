#!/usr/bin/env bash
# Format 3's promise to octet's own exports, measured: a checkpoint exported by an older octet
# (format 2, one rounding) and by this one with `--rounding single` gives the same output bytes
# on the test split, each run by its own binary; the default export (TFLite's double rounding)
# is reported beside them (differing bytes, accuracy). Writes $OUT (default
# bench/results/format3_ab.json) with the machine, both binaries' commits and the command.
#
#   bash bench/format_ab.sh OLD_OCTET NEW_OCTET NAME=CHECKPOINT[:IMAGES] ...
#
# IMAGES: the first N Fashion-MNIST test images (default 0: all of them). Environment: DATA
# (default fashion-mnist), EXPORT_FLAGS (default "--test-images 50 --no-plots": the ablation's
# images, which do not change the .o8), OLD_COMMIT (the commit the old binary was built from,
# recorded).
set -euo pipefail
[ $# -ge 3 ] || { sed -n 8,8p "$0"; exit 2; }
command="$0 $*"
old=$(realpath "$1"); new=$(realpath "$2"); shift 2
cd "$(dirname "$0")/.."
out=${OUT:-bench/results/format3_ab.json}
data=${DATA:-fashion-mnist}
flags=${EXPORT_FLAGS:---test-images 50 --no-plots}
work=target/format_ab
mkdir -p "$work"
rows=()
for arg in "$@"; do
  name=${arg%%=*}; rest=${arg#*=}
  ckpt=${rest%%:*}; images=0
  [ "$rest" = "$ckpt" ] || images=${rest#*:}
  # shellcheck disable=SC2086
  "$old" export "$ckpt" -o "$work/${name}_old.o8" $flags >/dev/null
  # shellcheck disable=SC2086
  "$new" export "$ckpt" -o "$work/${name}_single.o8" --rounding single $flags >/dev/null
  # shellcheck disable=SC2086
  "$new" export "$ckpt" -o "$work/${name}_double.o8" $flags >/dev/null
  for v in old single double; do
    b=$new; [ $v = old ] && b=$old
    "$b" run "$work/${name}_$v.o8" --data "$data" --images "$images" \
      --logits "$work/${name}_$v.logits" --json >"$work/${name}_$v.json"
  done
  rows+=("$name")
done
python3 - "$out" "$work" "$old" "$new" "OLD_COMMIT=${OLD_COMMIT:-} $command" "${rows[@]}" <<'PY'
import json, os, platform, subprocess, sys
out, work, old, new, command, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
def load(name, v):
    with open(f"{work}/{name}_{v}.json") as f:
        run = json.load(f)
    with open(f"{work}/{name}_{v}.logits", "rb") as f:
        return run, f.read()
models = {}
for name in names:
    runs = {v: load(name, v) for v in ("old", "single", "double")}
    base = runs["old"][1]
    def differ(v):
        return sum(a != b for a, b in zip(base, runs[v][1]))
    models[name] = {
        "images": runs["old"][0]["images"],
        "logit_bytes": len(base),
        "accuracy": {v: r[0]["accuracy"] for v, r in runs.items()},
        "differing_bytes_vs_old": {"single": differ("single"), "double": differ("double")},
        "o8_bytes": {v: os.path.getsize(f"{work}/{name}_{v}.o8") for v in runs},
    }
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
result = {
    "what": "octet's own exports across the format change: the old binary's default (format 2), this one's --rounding single and its default (double), output bytes of each run by its own binary",
    "machine": {"cpu": cpu, "cores": os.cpu_count(), "system": platform.platform()},
    "commit": commit, "old_binary": old, "old_commit": os.environ.get("OLD_COMMIT", "unknown"),
    "new_binary": new,
    "command": command, "models": models,
}
tmp = out + ".tmp"
with open(tmp, "w") as f:
    json.dump(result, f, indent=2)
    f.write("\n")
os.replace(tmp, out)
for name, m in models.items():
    d = m["differing_bytes_vs_old"]
    print(f"{name}: {m['images']} images; --rounding single vs the old export: {d['single']} differing bytes; "
          f"double: {d['double']}; accuracy {m['accuracy']}")
PY
