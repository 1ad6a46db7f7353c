#!/usr/bin/env bash
# octet against CMSIS-NN on a Cortex-M4F (QEMU mps2-an386, -icount shift=0), on the same inputs:
# the LeNet `octet demo` exports (1×32×32, trained on the bundled Fashion-MNIST subset; its first
# test images) and a 3-channel LeNet (3×32×32, random weights and images). Runs bench/mcu.sh
# (octet's Rust firmware: kernels auto, which is cortex-m-dsp on the M4, and scalar for
# reference; instructions per inference and per op, flash, RAM) and bench/mcu_peer.sh (CMSIS-NN,
# and octet through its C API) on the same MODELS, checks by digest that both ran the same model,
# images and expected logits (runtime/examples/mcu_inputs.rs makes them for both), and merges
# their JSON into bench/results/mcu_lenet.json. Prints a table.
#
#   bench/mcu_lenet.sh CMSIS_NN_DIR CMSIS6_DIR [DEMO.o8]
#
# DEMO.o8: the model `octet demo` exported (DIR/last.o8 of `octet demo --out DIR`, by default
# runs/demo/last.o8). Without it, the script runs `cargo run --release -- demo --epochs
# $DEMO_EPOCHS --out TMP` (DEMO_EPOCHS default 8, the demo's own default; built in
# $DEMO_TARGET_DIR, default target/: a first build compiles candle, the training itself takes
# about a minute on two cores) and uses TMP/last.o8, which is deleted afterwards.
# Environment: OUT (default bench/results/mcu_lenet.json; written through a temporary file),
# IMAGES (default 8), CARGO_TARGET_DIR and PEER_OPT (passed on to both benchmarks). Needs what
# bench/mcu.sh and bench/mcu_peer.sh need. Fails when any logit differs (after writing OUT).
set -euo pipefail
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  sed -n 11,20p "$0" >&2
  exit 2
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
for d in "$1" "$2"; do
  [ -d "$d" ] || { echo "bench/mcu_lenet.sh: $d: no such directory" >&2; exit 1; }
done
nn=$(cd "$1" && pwd)
core=$(cd "$2" && pwd)
out=$(realpath -m "${OUT:-$repo/bench/results/mcu_lenet.json}")
[ -d "$(dirname "$out")" ] || { echo "bench/mcu_lenet.sh: $(dirname "$out"): no such directory" >&2; exit 1; }
images=${IMAGES:-8}
command -v python3 >/dev/null || { echo "bench/mcu_lenet.sh: python3 not found" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mcu_lenet.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

if [ $# -eq 3 ]; then
  demo=$(realpath "$3")
  [ -f "$demo" ] || { echo "bench/mcu_lenet.sh: $3: no such file" >&2; exit 1; }
  demo_how="given: $3"
else
  epochs=${DEMO_EPOCHS:-8}
  echo "bench/mcu_lenet.sh: no DEMO.o8 given: running octet demo ($epochs epochs) into $tmp/demo" >&2
  (cd "$repo" && CARGO_TARGET_DIR=${DEMO_TARGET_DIR:-$repo/target} \
    cargo run --release -q -- demo --epochs "$epochs" --out "$tmp/demo") | tee "$tmp/demo.log" >&2
  demo=$tmp/demo/last.o8
  [ -f "$demo" ] || { echo "bench/mcu_lenet.sh: octet demo wrote no $demo" >&2; exit 1; }
  demo_how="octet demo --epochs $epochs, run by this script ($(grep -m1 -o 'int8 test accuracy: *[0-9.]*%' "$tmp/demo.log" | tr -s ' ') on the subset's 2,000 test images)"
fi
models="demo=$demo lenet3=lenet3"

echo "== bench/mcu.sh (octet's firmware, Cortex-M4F)" >&2
OUT=$tmp/octet.json KERNELS=scalar,auto TARGETS=cortex-m4f MODELS=$models IMAGES=$images \
  bash "$repo/bench/mcu.sh"
echo "== bench/mcu_peer.sh (CMSIS-NN, octet's C API)" >&2
# It writes its JSON before failing on differing logits: those are recorded, and fail below.
status=0
MODELS=$models IMAGES=$images bash "$repo/bench/mcu_peer.sh" "$nn" "$core" "$tmp/peer.json" >&2 ||
  status=$?
if [ $status -ne 0 ] && [ ! -f "$tmp/peer.json" ]; then
  echo "bench/mcu_lenet.sh: bench/mcu_peer.sh failed (status $status)" >&2
  exit 1
fi

python3 - "$tmp/octet.json" "$tmp/peer.json" "$out" "$demo" "$demo_how" "$repo" \
  "bench/mcu_lenet.sh $*" "$(git -C "$repo" describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)" \
  "$images" <<'PY'
import json, os, sys, tempfile

octet_path, peer_path, out, demo, demo_how, repo, command, commit, images = sys.argv[1:]
octet = json.load(open(octet_path))
peer = json.load(open(peer_path))

def ratio(a, b):
    return round(a / b, 3) if a is not None and b else None

def mean(v):
    return round(sum(v) / len(v))

demo_rel = os.path.relpath(demo, repo) if demo.startswith(repo + os.sep) else demo
demo_spec = demo_rel if demo_how.startswith("given") else "(the temporary output of octet demo)"
models = {}
failed = []
for name, what in (("demo", "LeNet 1x32x32 exported by `octet demo` (trained on the bundled "
                             "Fashion-MNIST subset), its first Fashion-MNIST test images"),
                   ("lenet3", "LeNet 3x32x32, random weights (runtime/examples/mcu_inputs.rs), "
                              "random images")):
    o = next(r for r in octet["results"] if r["model"] == name and r["cpu"] == "cortex-m4f")
    p = peer["models"][name]
    if o["inputs_sha256"] != p["inputs_sha256"]:
        sys.exit(f"bench/mcu_lenet.sh: {name}: the two benchmarks ran different inputs "
                 f"({o['inputs_sha256']} vs {p['inputs_sha256']})")
    auto, scalar = o["kernels"]["auto"], o["kernels"]["scalar"]
    cm, capi = p["cmsis_nn"], p["octet_capi"]
    total = {
        "octet": mean(auto["instructions_per_image"]),
        "octet_scalar": mean(scalar["instructions_per_image"]),
        "octet_capi": capi["instructions_mean"],
        "cmsis_nn": cm["instructions_mean"],
    }
    peer_ops = {op["index"]: op for op in cm["per_op"]}
    scalar_ops = {op["index"]: op for op in scalar["ops"]}
    ops = []
    for op in auto["ops"]:
        j = op["index"]
        c = peer_ops.get(j, {}).get("instructions_mean")
        ops.append({"index": j, "op": peer_ops.get(j, {}).get("op", op["kind"]), "macs": op["macs"],
                    "octet": op["instructions"], "octet_scalar": scalar_ops[j]["instructions"],
                    "cmsis_nn": c, "octet_over_cmsis_nn": ratio(op["instructions"], c)})
    # What lies outside the ops: octet's input load (u8 planar to int8) and logits copy,
    # CMSIS-NN's harness conversion (u8 planar to int8 HWC) and copy; the calls of both.
    rest_o = total["octet"] - auto["ops_sum"]
    rest_c = total["cmsis_nn"] - sum(op["instructions_mean"] for op in cm["per_op"]
                                     if op["index"] is not None)
    rest = {"octet": rest_o, "octet_scalar": total["octet_scalar"] - scalar["ops_sum"],
            "cmsis_nn": rest_c, "octet_over_cmsis_nn": ratio(rest_o, rest_c),
            "cmsis_nn_input_conversion": peer_ops[None]["instructions_mean"] if None in peer_ops else None}
    logits = {
        "octet_firmware_equals_host": auto["logits_match"] and scalar["logits_match"],
        "octet_capi_equals_host": capi["identical_to_octet"],
        "cmsis_nn_equals_octet": cm["identical_to_octet"],
        "cmsis_nn_logit_bytes_differing": cm["logit_bytes_differing"],
        "cmsis_nn_default_double_rounding_equals_octet":
            cm["control_default_double_rounding"]["identical_to_octet"],
        "cmsis_nn_default_double_rounding_bytes_differing":
            cm["control_default_double_rounding"]["logit_bytes_differing"],
    }
    for k in ("octet_firmware_equals_host", "octet_capi_equals_host", "cmsis_nn_equals_octet"):
        if not logits[k]:
            failed.append(f"{name}: {k}")
    size = lambda s: {"flash_bytes": s["flash"], "ram_bytes": s["static_ram"] + s["stack_peak"],
                      "text_bytes": s["text"], "rodata_bytes": s["rodata"],
                      "static_ram_bytes": s["static_ram"], "stack_peak_bytes": s["stack_peak"]}
    models[name] = {
        "what": what,
        "spec": demo_spec if name == "demo" else p["spec"],
        "inputs_sha256": o["inputs_sha256"],
        "images": p["images"],
        "macs_per_inference": sum(op["macs"] for op in auto["ops"]),
        "instructions_per_inference": {**total,
                                       "octet_over_cmsis_nn": ratio(total["octet"], total["cmsis_nn"]),
                                       "octet_scalar_over_cmsis_nn": ratio(total["octet_scalar"], total["cmsis_nn"]),
                                       "octet_capi_over_cmsis_nn": ratio(total["octet_capi"], total["cmsis_nn"])},
        "instructions_per_image": {"octet": auto["instructions_per_image"],
                                   "octet_scalar": scalar["instructions_per_image"],
                                   "octet_capi": capi["instructions_per_image"],
                                   "cmsis_nn": cm["instructions_per_image"]},
        "octet_kernels": {"auto": auto["resolved"], "scalar": scalar["resolved"]},
        "octet_counts_repeat_exactly": auto["stable"] and scalar["stable"] and o["deterministic_across_runs"],
        "per_op": ops,
        "outside_ops": rest,
        "logits": logits,
        "flash_ram": {
            "octet": {"flash_bytes": o["flash"]["bytes"], "ram_bytes": o["ram"]["bytes"],
                      "model_bytes": o["model_bytes"], "text_bytes": o["flash"]["text_bytes"],
                      "arena_bytes": o["arena_bytes"], "stack_peak_bytes": o["ram"]["stack_peak_bytes"],
                      "other_static_ram_bytes": o["ram"]["other_static_bytes"]},
            "octet_capi": size(capi["size_bytes"]),
            "cmsis_nn": size(cm["size_bytes"]),
        },
    }
    models[name]["targets"] = {"octet_le_cmsis_nn": total["octet"] <= total["cmsis_nn"]}
    if name == "demo":
        models[name]["targets"]["octet_le_1.5M"] = total["octet"] <= 1_500_000

doc = {
    "what": "octet-runtime against CMSIS-NN on a Cortex-M4F (QEMU mps2-an386, -icount shift=0: "
            "one instruction per ns of virtual time), the same models, images and expected logits "
            "(runtime/examples/mcu_inputs.rs, digests checked). Issue target: octet <= CMSIS-NN "
            "instructions per inference on both models, <= 1.5 M on the 1-channel LeNet.",
    "command": command,
    "commit": commit,
    "qemu": octet["qemu"],
    "rustc": octet["rustc"],
    "c_compiler": peer["compiler"],
    "cmsis_nn": peer["cmsis_nn"],
    "demo_model": {"path": demo_spec, "made_by": demo_how, "sha256": models["demo"]["inputs_sha256"]["model.o8"]},
    "method": {
        "octet": "bench/mcu.sh: firmware/ (Rust, release, LTO), kernels `auto` (resolved: cortex-m-dsp "
                 "on the M4) and `scalar` in one firmware; instructions exact (SysTick stepped to one "
                 "instruction), per op from Model::run_timed on image 0; total = mean over the images. "
                 + octet["what"],
        "octet_capi": "bench/mcu_peer.sh: the C API's static library (thumbv7em-none-eabihf) under "
                      "capi/examples/firmware, total only, SysTick to a tick (40 instructions); " + peer["octet"],
        "cmsis_nn": "bench/mcu_peer.sh: " + peer["method"],
        "outside_ops": "total minus the sum of the ops: octet's input load and logits copy, "
                       "CMSIS-NN's harness input conversion (u8 planar to int8 HWC) and copy, calls",
    },
    "images": int(images),
    "models": models,
}
text = json.dumps(doc, indent=1) + "\n"
fd, tmp = tempfile.mkstemp(dir=os.path.dirname(out), prefix=".mcu_lenet.", suffix=".tmp")
with os.fdopen(fd, "w") as f:
    f.write(text)
os.replace(tmp, out)

yn = lambda b: "yes" if b else "NO"
for name, m in models.items():
    t = m["instructions_per_inference"]
    print(f"\n{name}: {m['what']}")
    w = 12
    num = lambda v: "-" if v is None else format(v, ",")
    row = lambda label, a, b, c, r: print(f"  {label:46} {a:>{w}} {b:>{w}} {c:>{w}} {r:>9}")
    row("", "octet", "octet", "CMSIS-NN", "octet /")
    row("instructions per inference", m["octet_kernels"]["auto"], "scalar", "-Ofast", "CMSIS-NN")
    for op in m["per_op"]:
        row(f"{op['index']:>2} {op['op']}", num(op["octet"]), num(op["octet_scalar"]),
            num(op["cmsis_nn"]), op["octet_over_cmsis_nn"] or "-")
    r = m["outside_ops"]
    row("   input, output, calls", num(r["octet"]), num(r["octet_scalar"]), num(r["cmsis_nn"]),
        r["octet_over_cmsis_nn"] or "-")
    row("   total", num(t["octet"]), num(t["octet_scalar"]), num(t["cmsis_nn"]), t["octet_over_cmsis_nn"])
    row("   octet through the C API (total)", num(t["octet_capi"]), "", "", t["octet_capi_over_cmsis_nn"])
    fr = m["flash_ram"]
    for who, label in (("octet", "octet (Rust firmware)"), ("octet_capi", "octet (C API firmware)"),
                       ("cmsis_nn", "CMSIS-NN")):
        print(f"  {label:24} flash {fr[who]['flash_bytes']:>8,} B   RAM {fr[who]['ram_bytes']:>7,} B")
    lg = m["logits"]
    print(f"  logits identical: octet firmware = host {yn(lg['octet_firmware_equals_host'])}, "
          f"octet C API = host {yn(lg['octet_capi_equals_host'])}, CMSIS-NN = octet "
          f"{yn(lg['cmsis_nn_equals_octet'])} ({m['images']} images)")
    print("  targets: " + ", ".join(f"{k} {yn(v)}" for k, v in m["targets"].items()))
print(f"\nbench/mcu_lenet.sh: wrote {out}")
if failed:
    sys.exit("bench/mcu_lenet.sh: logits differ: " + "; ".join(failed))
PY
