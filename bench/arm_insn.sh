#!/usr/bin/env bash
# Instruction counts of the int8 runtime on aarch64 under QEMU user mode: per image and per
# conv/fc op, scalar vs NEON vs NEON+dotprod kernels, for LeNet and ResNet-18 (the test
# models of octet-testkit). Writes bench/results/arm_instructions.json. MODELS (default
# "lenet resnet18") picks them; a `-double` suffix (lenet-double) is the same model in
# TensorFlow Lite's double rounding (runtime/examples/arm_count.rs); a path to an .o8
# (bench/imported_models.sh DIR: the MLPerf Tiny models) is counted per image only. Models
# already in OUT that MODELS does not name are kept, each with the commit it was counted at.
#
#   bench/arm_insn.sh QEMU_SRC_DIR|LIBINSN.so [OUT.json]
#
# QEMU_SRC_DIR: QEMU's source at the installed qemu-aarch64's version (the insn plugin,
# tests/plugin/insn.c, or tests/tcg/plugins/insn.c / contrib/plugins/insn.c in newer trees,
# and include/qemu/qemu-plugin.h); the plugin is built under target/arm_insn/. Or a plugin
# already built against the installed QEMU. Needs gcc, glib's headers (libglib2.0-dev),
# gcc-aarch64-linux-gnu, qemu-user and the rustup target aarch64-unknown-linux-gnu.
#
# Each count is one run of runtime/examples/arm_count, whose setup (building the model, the
# image, every op's buffers) does not depend on what it then runs: per image = count(1 image)
# − count(nothing), per op = count(1 call of that op's kernel) − count(nothing).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n 7,9p "$0"; exit 2; }
src=$1
out=${2:-bench/results/arm_instructions.json}
work=target/arm_insn
mkdir -p "$work"

if [ -d "$src" ]; then
  plugin_c=
  for c in tests/plugin/insn.c tests/tcg/plugins/insn.c contrib/plugins/insn.c; do
    [ -f "$src/$c" ] && { plugin_c=$src/$c; break; }
  done
  hdr=
  for h in include/qemu/qemu-plugin.h include/plugins/qemu-plugin.h; do
    [ -f "$src/$h" ] && { hdr=$(dirname "$src/$h"); break; }
  done
  [ -n "$plugin_c" ] && [ -n "$hdr" ] || { echo "no insn.c / qemu-plugin.h under $src" >&2; exit 1; }
  # shellcheck disable=SC2046
  gcc -shared -fPIC -O2 -I "$hdr" $(pkg-config --cflags glib-2.0) "$plugin_c" \
    -o "$work/libinsn.so" $(pkg-config --libs glib-2.0)
  plugin=$work/libinsn.so
  plugin_src=${plugin_c#"$src"/}
else
  plugin=$src
  plugin_src=$(basename "$src")
fi

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/aarch64}
cargo build --release -q -p octet-runtime --features std --example arm_count \
  --target aarch64-unknown-linux-gnu
bin=$CARGO_TARGET_DIR/aarch64-unknown-linux-gnu/release/examples/arm_count
qemu=(qemu-aarch64 -cpu max -L /usr/aarch64-linux-gnu)

# count ARGS...: prints "ARGS... COUNT" (the plugin's log goes to a file of its own).
count() {
  local log
  log=$(mktemp "$work/log.XXXXXX")
  "${qemu[@]}" -plugin "$plugin,inline=on" -d plugin -D "$log" "$bin" "$@" >/dev/null
  echo "$* $(sed -n 's/^insns: //p' "$log")"
  rm -f "$log"
}
export -f count
export plugin bin work
export QEMU_CMD="${qemu[*]}"

jobs=$work/jobs.txt
: >"$jobs"
models=${MODELS:-lenet resnet18}
for model in $models; do
  "${qemu[@]}" "$bin" "$model" list >"$work/ops_$(basename "$model" .o8).txt"
  for k in scalar neon neondot; do
    echo "$model $k 0 - 0" >>"$jobs"
    echo "$model $k 1 - 0" >>"$jobs"
    while read -r idx _; do
      echo "$model $k 0 $idx 1" >>"$jobs"
    done <"$work/ops_$(basename "$model" .o8).txt"
  done
done
# Two runs at a time: each is one emulated thread.
xargs -P "$(nproc)" -L 1 bash -c 'qemu=($QEMU_CMD); count "$@"' _ <"$jobs" >"$work/counts.txt"

python3 - "$work" "$out" "$*" "$("${qemu[0]}" --version | head -1)" \
  "$(git describe --always --dirty)" "$plugin_src" "$models" <<'PY'
import json, sys
work, out, args, qver, commit, plugin, models = sys.argv[1:]
import os
counts = {}
for line in open(f"{work}/counts.txt"):
    *key, n = line.split()
    counts[tuple(key)] = int(n)
old = json.load(open(out)) if os.path.exists(out) else {"models": {}}
res = {
    "command": f"bench/arm_insn.sh {args}",
    "qemu": qver,
    "qemu_cpu": "max",
    "plugin": f"{plugin} (inline=on)",
    "commit": commit,
    "method": "instructions retired by qemu-aarch64 (TCG plugin count) for runtime/examples/arm_count, "
              "the model prepared for the kernel set as octet run prepares it (each op's parameters "
              "once, weights and the adds' tables packed); per image = run(1 image) - run(nothing), per op = run(1 call of the op's kernel on "
              "random data of its shape) - run(nothing); the fixed part (model build, parse, "
              "buffers) is the same in every run",
    "models": {},
}
# Models counted before and not now, as they were (each names its commit).
for key, m in old["models"].items():
    m.setdefault("commit", old.get("commit"))
    res["models"][key] = m
names = {"lenet": "LeNet (common::lenet(1), 1x32x32)",
         "resnet18": "ResNet-18 (common::resnet18(1), 3x32x32)"}
for path in models.split():
    model = os.path.basename(path).removesuffix(".o8")
    base = model.removesuffix("-double")
    if path.endswith(".o8"):
        name = f"{model} (MLPerf Tiny, imported .o8, TFLite's double rounding)"
    else:
        name = names[base] + (", TFLite's double rounding" if base != model else ", single rounding")
    ops = []
    for line in open(f"{work}/ops_{model}.txt"):
        idx, macs, desc = line.split(maxsplit=2)
        ops.append((idx, int(macs), desc.strip()))
    macs_total = sum(m for _, m, _ in ops)
    m = {"name": name, "commit": commit, "conv_fc_macs_per_image": macs_total or None, "kernels": {}}
    for k in ["scalar", "neon", "neondot"]:
        base = counts[(path, k, "0", "-", "0")]
        img = counts[(path, k, "1", "-", "0")] - base
        kops = []
        for idx, macs, desc in ops:
            n = counts[(path, k, "0", idx, "1")] - base
            kops.append({"index": int(idx), "op": desc, "macs": macs, "instructions": n,
                         "instructions_per_mac": round(n / macs, 4)})
        m["kernels"][k] = {
            "fixed_overhead": base,
            "instructions_per_image": img,
            "instructions_per_conv_fc_mac": round(img / macs_total, 4) if macs_total else None,
            "ops": kops,
        }
    res["models"][model] = m
json.dump(res, open(out, "w"), indent=1)
open(out, "a").write("\n")
for model, m in res["models"].items():
    ks = m["kernels"]
    print(f"\n{m['name']}: instructions per image")
    print(f"  scalar {ks['scalar']['instructions_per_image']:,}  neon {ks['neon']['instructions_per_image']:,}"
          f"  neondot {ks['neondot']['instructions_per_image']:,}")
    print(f"  {'op':>3} {'':44} {'MACs':>10} {'scalar':>14} {'neon':>14} {'neondot':>14}   insn/MAC s / n / d")
    for i, o in enumerate(ks["scalar"]["ops"]):
        n, d = ks["neon"]["ops"][i], ks["neondot"]["ops"][i]
        print(f"  {o['index']:>3} {o['op']:44} {o['macs']:>10,} {o['instructions']:>14,} {n['instructions']:>14,}"
              f" {d['instructions']:>14,}   {o['instructions_per_mac']:.3f} / {n['instructions_per_mac']:.3f} / {d['instructions_per_mac']:.3f}")
print(f"\nwrote {out}")
PY
