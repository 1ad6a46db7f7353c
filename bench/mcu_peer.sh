#!/usr/bin/env bash
# The peer on microcontrollers: CMSIS-NN (Arm's int8 kernels, C) on the same QEMU Cortex-M4F
# (mps2-an386, -icount shift=0), the same models, images and expected logits as bench/mcu.sh
# (runtime/examples/mcu_inputs.rs, through bench/mcu_inputs.sh: the same MODELS spec) and the
# same SysTick counting as octet's C firmware (capi/examples/firmware). CMSIS-NN gets the .o8
# file's own weights, biases (the input zero point unfolded), per-channel multipliers and
# shifts, through octet-runtime's decoding (`make_inputs peer-header`), and is built with its
# single-rounding requantization (CMSIS_NN_USE_SINGLE_ROUNDING), which is octet's. Its logits are compared byte for byte with
# the host runtime's (scalar kernels: mcu_inputs' expected.bin); octet's C API firmware runs
# alongside for its count (octet's Rust firmware and its per-op counts: bench/mcu.sh).
#
#   bench/mcu_peer.sh CMSIS_NN_DIR CMSIS6_DIR [OUT.json]
#
# CMSIS_NN_DIR: a CMSIS-NN source tree (Include/, Source/); CMSIS6_DIR: CMSIS 6 (CMSIS/Core/
# Include, on the include path for CMSIS-NN versions that want it). Nothing is fetched and
# nothing of theirs enters this repository. OUT.json (or $OUT; default
# bench/results/mcu_peer.json) is written through a temporary file. Environment: MODELS
# (default "lenet1=lenet1 lenet3=lenet3": NAME=SPEC as for bench/mcu.sh, e.g.
# "demo=runs/demo/last.o8 lenet3=lenet3"), IMAGES (default 8), PEER_OPT (default -Ofast:
# CMSIS-NN's optimisation level), CARGO_TARGET_DIR (default capi/target). Needs
# gcc-arm-none-eabi, libnewlib-arm-none-eabi, qemu-system-arm, python3 and the rustup target
# thumbv7em-none-eabihf.
set -euo pipefail
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  sed -n 12,23p "$0" >&2
  exit 2
fi
for d in "$1" "$2"; do
  [ -d "$d" ] || { echo "bench/mcu_peer.sh: $d: no such directory" >&2; exit 1; }
done
nn=$(cd "$1" && pwd)
core=$(cd "$2" && pwd)
caller=$PWD
repo=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${3:-${OUT:-$repo/bench/results/mcu_peer.json}}")
[ -d "$(dirname "$out")" ] || { echo "bench/mcu_peer.sh: $(dirname "$out"): no such directory" >&2; exit 1; }
opt=${PEER_OPT:--Ofast}
models=${MODELS:-lenet1=lenet1 lenet3=lenet3}
images=${IMAGES:-8}
if [ ! -f "$nn/Include/arm_nnfunctions.h" ] || [ ! -d "$nn/Source" ]; then
  echo "$nn is not a CMSIS-NN source tree (no Include/arm_nnfunctions.h, Source/)" >&2
  exit 1
fi
[ -d "$core/CMSIS/Core/Include" ] ||
  { echo "$core is not CMSIS 6 (no CMSIS/Core/Include)" >&2; exit 1; }

cd "$repo/capi"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/capi/target}
work=$CARGO_TARGET_DIR/mcu_peer
rm -rf "$work"
mkdir -p "$work"
# shellcheck source=capi/examples/firmware/mcu.sh
. examples/firmware/mcu.sh
# shellcheck source=bench/mcu_inputs.sh
. "$repo/bench/mcu_inputs.sh"
mcu_check_tools
mcu_inputs_build "$CARGO_TARGET_DIR"
mcu_inputs_make "$work" "$models" "$images" "$caller"
cargo build --release -q --lib --target thumbv7em-none-eabihf
cargo build --release -q --example make_inputs
make_inputs=$CARGO_TARGET_DIR/release/examples/make_inputs
octet_lib=$CARGO_TARGET_DIR/thumbv7em-none-eabihf/release/liboctet_capi.a

# CMSIS-NN's integer kernels (the float ones left out), one archive; the link keeps what is used.
# A second archive with CMSIS-NN's default (double) rounding is the control: it shows what the
# single-rounding flag changes.
find "$nn/Source/ConvolutionFunctions" "$nn/Source/FullyConnectedFunctions" \
  "$nn/Source/PoolingFunctions" "$nn/Source/NNSupportFunctions" -name '*.c' \
  ! -name '*_f16.c' ! -name '*_f32.c' ! -name '*_flt.c' | sort >"$work/nn_sources.txt"
nn_flags=("${MCU_ARCH[@]}" "$opt" -std=c11 -ffunction-sections -fdata-sections
  -I "$nn/Include" -I "$core/CMSIS/Core/Include")
build_nn() { # NAME EXTRA_FLAGS...
  local name=$1
  shift
  rm -rf "${work:?}/$name" && mkdir -p "$work/$name"
  # shellcheck disable=SC2016
  xargs -P "$(nproc)" -I{} sh -c 'arm-none-eabi-gcc "$@" -c {} -o "$0/$(basename {} .c).o"' \
    "$work/$name" "${nn_flags[@]}" "$@" <"$work/nn_sources.txt"
  rm -f "$work/$name.a"
  arm-none-eabi-ar rcs "$work/$name.a" "$work/$name"/*.o
}
build_nn cmsisnn -DCMSIS_NN_USE_SINGLE_ROUNDING
build_nn cmsisnn_double

for name in "${MCU_MODEL_NAMES[@]}"; do
  d=$work/$name
  "$make_inputs" c-inputs "$d"
  "$make_inputs" peer-header "$d/model.o8" "$d/peer_model.h"
  mcu_cc "$d/assets_images.o" examples/firmware/assets.S -DIMAGES_FILE="$d/images.bin"

  # The peer.
  mcu_cc "$d/peer_main.o" "$repo/bench/mcu_peer/main.c" -DCMSIS_NN_USE_SINGLE_ROUNDING \
    -I "$repo/bench/mcu_peer" -I "$d" -I "$nn/Include" -I "$core/CMSIS/Core/Include"
  mcu_link "$d/peer.elf" "$d/peer_main.o" "$d/assets_images.o" "$work/cmsisnn.a"
  mcu_run "$d/peer.elf" >"$d/peer.txt" || { cat "$d/peer.txt" >&2; echo "the peer failed" >&2; exit 1; }
  mcu_sizes "$d/peer.elf" >"$d/peer_size.json"
  mcu_link "$d/peer_double.elf" "$d/peer_main.o" "$d/assets_images.o" "$work/cmsisnn_double.a"
  mcu_run "$d/peer_double.elf" >"$d/peer_double.txt" ||
    { cat "$d/peer_double.txt" >&2; echo "the peer (double rounding) failed" >&2; exit 1; }

  # octet through its C API, the same model and images.
  mcu_cc "$d/octet_main.o" examples/firmware/main.c -I include -I "$d"
  mcu_cc "$d/assets_model.o" examples/firmware/assets.S -DMODEL_FILE="$d/model.o8" \
    -DIMAGE_FILE="$d/model.o8pk" -DIMAGES_FILE="$d/images.bin"
  mcu_link "$d/octet.elf" "$d/octet_main.o" "$d/assets_model.o" "$octet_lib"
  mcu_run "$d/octet.elf" >"$d/octet.txt" || { cat "$d/octet.txt" >&2; echo "octet's firmware failed" >&2; exit 1; }
  mcu_sizes "$d/octet.elf" >"$d/octet_size.json"
done

tmp=$(mktemp "$(dirname "$out")/.mcu_peer.XXXXXX")
specs=()
for i in "${!MCU_MODEL_NAMES[@]}"; do specs+=("${MCU_MODEL_NAMES[$i]}=${MCU_MODEL_SPECS[$i]}"); done
PYTHONPATH="$repo/bench" python3 - "$work" "$tmp" "MODELS='$models' IMAGES=$images bench/mcu_peer.sh $*" "$opt" "$(arm-none-eabi-gcc --version | head -1)" \
  "$(qemu-system-arm --version | head -1)" "$(git -C "$repo" describe --always --dirty)" \
  "$(git -C "$nn" describe --always --dirty 2>/dev/null ||
    echo "not a git tree; sha256 of Include/ and the compiled sources: $(
      find "$nn/Include" -type f | sort | cat - "$work/nn_sources.txt" | xargs cat | sha256sum | cut -c1-16)")" \
  "${specs[@]}" <<'PY'
import hashlib, json, sys
work, out, command, opt, gcc, qemu, commit, nn_commit = sys.argv[1:9]
specs = [s.split("=", 1) for s in sys.argv[9:]]

from mcu_lines import parse

def expected(path):
    return [[int(v) for v in l.split()[2:]] for l in open(path) if l.startswith("logits")]

res = {
    "command": command,
    "commit": commit,
    "cmsis_nn": {"version": nn_commit, "flags": f"-mcpu=cortex-m4 -mfpu=fpv4-sp-d16 -mfloat-abi=hard {opt} "
                 "-DCMSIS_NN_USE_SINGLE_ROUNDING (ARM_MATH_DSP from __ARM_FEATURE_DSP)",
                 "control": "the same harness linked with CMSIS-NN built without the flag (its default "
                            "double rounding, TFLite's reference): logits compared the same way",
                 "kernels": "arm_convolve_wrapper_s8 (arm_convolve_s8), arm_max_pool_s8, "
                            "arm_fully_connected_wrapper_s8 (per channel)"},
    "octet": "capi/examples/firmware (the C API over the thumbv7em-none-eabihf static library, "
             "release profile: opt-level 3, panic = abort), compiled C at -O2",
    "compiler": gcc,
    "qemu": qemu + ", machine mps2-an386 (Cortex-M4F), -icount shift=0",
    "method": "SysTick on the CPU clock with a wrap counter, read around each whole inference "
              "(pixels in, logits out) and, in a second pass, around the input conversion and "
              "each op; ticks converted to instructions by a loop of 4,000,000 instructions "
              "(under -icount shift=0 a tick is 40 instructions; resolution one tick). flash = "
              ".vectors+.text+.rodata+.ARM.exidx+.data (code, model constants; the test images "
              "excluded), static_ram = .data+.bss, stack = peak use (painted stack)",
    "models": {},
}
for name, spec in specs:
    d = f"{work}/{name}"
    want = expected(f"{d}/expected.txt")
    m = {"name": name, "spec": spec,
         # The inputs (runtime/examples/mcu_inputs.rs), to tell that other benchmarks ran the same.
         "inputs_sha256": {f: hashlib.sha256(open(f"{d}/{f}", "rb").read()).hexdigest()
                           for f in ("model.o8", "images.bin", "expected.bin")},
         "images": len(want), "octet_host_scalar_logits": want}
    for who in ("peer", "octet"):
        r = parse(f"{d}/{who}.txt")
        k = r["insn_per_tick"]
        insns = [round(t * k) for t in r["ticks"]]
        mism = sum(a != b for la, lb in zip(r["logits"], want) for a, b in zip(la, lb))
        e = {
            "instructions_per_image": insns,
            "instructions_mean": round(sum(insns) / len(insns)),
            "insn_per_tick": round(k, 4),
            "logits": r["logits"],
            "identical_to_octet": r["logits"] == want,
            "logit_bytes_differing": mism + len(want[0]) * abs(len(r["logits"]) - len(want)),
            "size_bytes": {**json.load(open(f"{d}/{who}_size.json")), "stack_peak": r["stack"]},
        }
        if r["ops"]:
            e["per_op"] = [{"index": j - 1 if j else None, "op": o["op"],
                            "instructions_mean": round(sum(o["ticks"]) / len(o["ticks"]) * k)}
                           for j, o in enumerate(r["ops"])]
        m["cmsis_nn" if who == "peer" else "octet_capi"] = e
    dbl = parse(f"{d}/peer_double.txt")["logits"]
    m["cmsis_nn"]["control_default_double_rounding"] = {
        "identical_to_octet": dbl == want,
        "logit_bytes_differing": sum(a != b for la, lb in zip(dbl, want) for a, b in zip(la, lb)),
    }
    res["models"][name] = m
json.dump(res, open(out, "w"), indent=1)
open(out, "a").write("\n")
for key, m in res["models"].items():
    p, o = m["cmsis_nn"], m["octet_capi"]
    print(f"\n{key} ({m['spec']})")
    for name, e in (("CMSIS-NN", p), ("octet (C API)", o)):
        s = e["size_bytes"]
        print(f"  {name:14} {e['instructions_mean']:>11,} instructions/image   identical to octet's "
              f"logits: {'yes' if e['identical_to_octet'] else 'NO (%d bytes differ)' % e['logit_bytes_differing']}"
              f"   flash {s['flash']:,} (text {s['text']:,}, rodata {s['rodata']:,})"
              f"  RAM {s['static_ram']:,} + stack {s['stack_peak']:,}")
    ctl = p["control_default_double_rounding"]
    print(f"  CMSIS-NN built without CMSIS_NN_USE_SINGLE_ROUNDING (control): "
          f"{ctl['logit_bytes_differing']} of {sum(map(len, m['octet_host_scalar_logits']))} logit bytes "
          "differ from octet's")
    for op in p["per_op"]:
        print(f"    {'' if op['index'] is None else op['index']:>2} {op['op']:44} {op['instructions_mean']:>10,}")
PY
mv "$tmp" "$out"
echo "wrote $out"
python3 -c 'import json,sys; sys.exit(0 if all(m["cmsis_nn"]["identical_to_octet"] for m in json.load(open(sys.argv[1]))["models"].values()) else 1)' "$out" ||
  { echo "CMSIS-NN's logits differ from octet's (see $out)" >&2; exit 1; }
