#!/usr/bin/env bash
# The int8 runtime on microcontrollers, under QEMU: firmware/ on a Cortex-M4F (mps2-an386,
# thumbv7em-none-eabihf) and a Cortex-M3 (mps2-an385, thumbv7m-none-eabi), for a LeNet on
# 1×32×32 (the architecture `octet demo` exports) and on 3×32×32 in octet's single rounding,
# the first again in TensorFlow Lite's double rounding, and the embedded op set (depthwise,
# TFLite's add and average pool, pad, softmax, int8 input, double rounding), random weights
# (the test models' writer, arena planned as the exporter plans it:
# runtime/examples/mcu_inputs.rs). Every output byte must equal the host's (Model::run, scalar
# and fastest kernels).
#
#   bash bench/mcu.sh          instructions per inference (total, per op), stability, flash,
#                              RAM; JSON on stdout, or in $OUT (written through a temp file)
#   bash bench/mcu.sh check    the logits only (CI: .ci/mcu.sh)
#
# Environment: KERNELS (default scalar,auto: names of Kernels::from_name, run one after the
# other on the device; the firmware's arena is the largest any of them needs on the core),
# MODELS (default "lenet1=lenet1 lenet3=lenet3 lenet1d=lenet1-double embedded=embedded":
# NAME=SPEC, SPEC one of bench/mcu_inputs.sh's MCU_BUILT_MODELS or an .o8 file, e.g.
# demo=runs/demo/last.o8 for the model `octet demo` exports or an imported TFLite model;
# relative paths from the current directory; bench/mcu_inputs.sh, shared with
# bench/mcu_peer.sh), IMAGES (default 4: inputs per model, raw bytes of its input encoding),
# TARGETS (default cortex-m4f,cortex-m3: the cores to run on), QEMU_TIMEOUT (default 120 s per
# run), CARGO_TARGET_DIR (default target/ and firmware/target/).
# Needs qemu-system-arm, arm-none-eabi-size or llvm-size, python3 (not in check mode) and the
# rustup targets thumbv7em-none-eabihf and thumbv7m-none-eabi (.ci/mcu.sh installs them).
#
# Instructions: QEMU's -icount shift=0 makes virtual time one nanosecond per instruction;
# the firmware reads SysTick at 40 instructions per tick (calibrated against a loop of known
# length) and resolves single instructions by stepping across a tick edge (firmware/src/clock.rs).
# Counts include a few instructions of the measuring calls; they repeat exactly.
set -euo pipefail
[ -z "${OUT:-}" ] || OUT=$(realpath -m "$OUT")
caller=$PWD
cd "$(dirname "$0")/.."
repo=$PWD
# shellcheck source=bench/mcu_inputs.sh
. bench/mcu_inputs.sh
mode=${1:-bench}
case $mode in bench | check) ;; *)
  sed -n 11,13p "$0" >&2
  exit 2
  ;;
esac
kernels=${KERNELS:-scalar,auto}
models=${MODELS:-lenet1=lenet1 lenet3=lenet3 lenet1d=lenet1-double embedded=embedded}
images=${IMAGES:-4}
qemu_timeout=${QEMU_TIMEOUT:-120}
all_targets=("thumbv7em-none-eabihf mps2-an386 cortex-m4f" "thumbv7m-none-eabi mps2-an385 cortex-m3")
targets=()
for cpu in $(tr ',' ' ' <<<"${TARGETS:-cortex-m4f,cortex-m3}"); do
  found=
  for t in "${all_targets[@]}"; do
    if [ "${t##* }" = "$cpu" ]; then targets+=("$t"); found=1; fi
  done
  [ -n "$found" ] || { echo "bench/mcu.sh: TARGETS: unknown core '$cpu' (cortex-m4f, cortex-m3)" >&2; exit 2; }
done
[ ${#targets[@]} -gt 0 ] || { echo "bench/mcu.sh: TARGETS is empty" >&2; exit 2; }

for tool in qemu-system-arm cargo; do
  command -v "$tool" >/dev/null || { echo "bench/mcu.sh: $tool not found (.ci/mcu.sh installs what is needed)" >&2; exit 1; }
done
size_tool=$(command -v arm-none-eabi-size || command -v llvm-size || true)
[ -n "$size_tool" ] || { echo "bench/mcu.sh: neither arm-none-eabi-size nor llvm-size found (apt-get install binutils-arm-none-eabi)" >&2; exit 1; }
installed=$(rustup target list --installed 2>/dev/null || true)
for t in "${targets[@]}"; do
  t=${t%% *}
  grep -qx "$t" <<<"$installed" || { echo "bench/mcu.sh: rustup target $t missing (rustup target add $t)" >&2; exit 1; }
done

host_target=${CARGO_TARGET_DIR:-$repo/target}
fw_target=${CARGO_TARGET_DIR:-$repo/firmware/target}
work=$host_target/mcu
rm -rf "$work"
mkdir -p "$work"

# Host side: each model's file, images and expected logits.
mcu_inputs_build "$host_target"
mcu_inputs_make "$work" "$models" "$images" "$caller"
models=
for i in "${!MCU_MODEL_NAMES[@]}"; do models+="${MCU_MODEL_NAMES[$i]}=${MCU_MODEL_SPECS[$i]} "; done

# expect_logits OUT DIR: every `run` line's logits equal DIR/expected.bin's bytes.
expect_logits() {
  local out=$1 dir=$2 expected n_out lines=0 bad=0
  expected=$(od -An -v -tx1 "$dir/expected.bin" | tr -d ' \n')
  n_out=$((${#expected} / 2 / images))
  while read -r line; do
    local i hex
    i=$(sed -n 's/.* image=\([0-9]*\) .*/\1/p' <<<"$line")
    hex=${line##*logits=}
    lines=$((lines + 1))
    if [ "$hex" != "${expected:$((i * 2 * n_out)):$((2 * n_out))}" ]; then
      echo "  logits differ from the host's: $line" >&2
      bad=1
    fi
  done < <(grep '^run ' "$out")
  # Every kernel set runs every image, but those this core lacks (reported `unavailable`).
  local sets
  sets=$(($(tr ',' '\n' <<<"$kernels" | wc -l) - $(grep -c '^unavailable ' "$out" || true)))
  [ "$lines" -eq $((images * sets)) ] || {
    echo "  expected $images images × $sets kernel sets, the firmware reported $lines runs" >&2
    bad=1
  }
  return $bad
}

fail=0
for t in "${targets[@]}"; do
  read -r target board cpu <<<"$t"
  for name in "${MCU_MODEL_NAMES[@]}"; do
    dir=$work/$name
    (cd firmware && OCTET_MCU_INPUTS=$dir OCTET_MCU_KERNELS=$kernels CARGO_TARGET_DIR=$fw_target \
      cargo build --release -q --target "$target")
    elf=$dir/firmware-$target.elf
    cp "$fw_target/$target/release/octet-firmware" "$elf"
    qemu=(timeout "$qemu_timeout" qemu-system-arm -M "$board" -nographic -monitor none -serial none
      -semihosting-config "enable=on,target=native" -icount "shift=0,sleep=off" -kernel "$elf")
    out=$dir/$target.txt
    status=0
    "${qemu[@]}" </dev/null >"$out" 2>&1 || status=$?
    ok=yes
    if [ $status -ne 0 ]; then
      [ $status -eq 124 ] && echo "  QEMU timed out after ${qemu_timeout}s" >&2
      grep '^error' "$out" >&2 || tail -5 "$out" >&2
      ok=no
    fi
    expect_logits "$out" "$dir" || ok=no
    if [ "$mode" = bench ]; then
      # Stability across runs: a second QEMU run prints exactly the same.
      "${qemu[@]}" </dev/null >"$out.again" 2>&1 || true
      if cmp -s "$out" "$out.again"; then echo yes >"$dir/$target.again"; else echo no >"$dir/$target.again"; fi
      "$size_tool" -A "$elf" >"$dir/$target.size"
    fi
    echo "$cpu ($board) $name: logits $([ $ok = yes ] && echo match || echo DIFFER)" \
      "$(sed -n 's/^run kernels=\([^ ]*\) resolved=\([^ ]*\) image=0 insn=\([0-9]*\).*/\1(\2) \3 insn/p' "$out" | tr '\n' ' ')" >&2
    [ $ok = yes ] || fail=1
  done
done
if [ $fail -ne 0 ]; then
  echo "bench/mcu.sh: FAILED (outputs under $work)" >&2
  exit 1
fi
[ "$mode" = check ] && { echo "bench/mcu.sh check: every logit byte matches the host's" >&2; exit 0; }

python3 - "$work" "$images" "$kernels" "$models" \
  "$(qemu-system-arm --version | head -1)" "$(rustc --version)" \
  "$(git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)" "${OUT:-}" \
  "${targets[@]}" <<'PY'
import hashlib, json, os, sys, tempfile

work, images, kernels, models, qemu, rustc, commit, out = sys.argv[1:9]
targets = [t.split() for t in sys.argv[9:]]
kernels = kernels.split(",")

def fields(line):
    return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)

results = []
for target, board, cpu in targets:
    for m in models.split():
        name, spec = m.split("=", 1)
        d = os.path.join(work, name)
        lines = open(os.path.join(d, target + ".txt")).read().splitlines()
        head = fields(next(l for l in lines if l.startswith("octet-mcu ")))
        parse = fields(next(l for l in lines if l.startswith("parse ")))
        prepare = fields(next(l for l in lines if l.startswith("prepare ")))
        peak = int(fields(next(l for l in lines if l.startswith("stack ")))["peak"])
        sections = {}
        for l in open(os.path.join(d, target + ".size")).read().splitlines():
            p = l.split()
            if len(p) >= 2 and p[0] in (".vector_table", ".text", ".rodata", ".data", ".bss", ".uninit"):
                sections[p[0]] = int(p[1])
        model_bytes = int(head["model_bytes"])
        packed_bytes = int(prepare.get("packed_bytes", 0))
        test_bytes = sum(os.path.getsize(os.path.join(d, f)) for f in ("images.bin", "expected.bin"))
        # Flash: code, constants (the model among them) and .data's initial values; the test
        # images and their expected logits are the harness's, not the application's.
        flash = sum(sections.get(s, 0) for s in (".vector_table", ".text", ".rodata", ".data")) - test_bytes
        static_ram = sum(sections.get(s, 0) for s in (".data", ".bss", ".uninit"))
        arena = int(head["arena_bytes"])
        per_kernels = {}
        for k in kernels:
            runs = [fields(l) for l in lines if l.startswith("run ") and fields(l)["kernels"] == k]
            if not runs:
                per_kernels[k] = {"unavailable": True}
                continue
            ops = [fields(l) for l in lines if l.startswith("op ") and fields(l)["kernels"] == k]
            stable = any(l == f"stable kernels={k} yes" for l in lines)
            total = int(runs[0]["insn"])
            macs = sum(int(o["macs"]) for o in ops)
            per_kernels[k] = {
                "resolved": runs[0]["resolved"],
                "instructions_per_inference": total,
                "instructions_per_image": [int(r["insn"]) for r in runs],
                "instructions_per_mac": round(total / macs, 3) if macs else None,
                "ops": [{"index": int(o["index"]), "kind": o["kind"], "macs": int(o["macs"]),
                         "instructions": int(o["insn"])} for o in ops],
                "ops_sum": sum(int(o["insn"]) for o in ops),
                "stable": stable and all(o["insn"] == o["repeat"] for o in ops),
                "stack_bytes": max(int(r["stack"]) for r in runs),
                "logits_match": all(r["match"] == "yes" for r in runs),
            }
        results.append({
            "target": target, "board": board, "cpu": cpu, "model": name, "spec": spec,
            # The inputs (runtime/examples/mcu_inputs.rs), to tell that other benchmarks ran
            # the same.
            "inputs_sha256": {f: hashlib.sha256(open(os.path.join(d, f), "rb").read()).hexdigest()
                              for f in ("model.o8", "images.bin", "expected.bin")},
            "model_bytes": model_bytes, "arena_bytes": arena, "images": int(images),
            "parse_instructions": int(parse["insn"]),
            # Each op's parameters, once (Model::prepare): runs then only dispatch.
            "prepare_instructions": int(prepare["insn"]),
            "kernels": per_kernels,
            "deterministic_across_runs": open(os.path.join(d, target + ".again")).read().strip() == "yes",
            # The packed image (the Cortex-M set's weights in its own order, in flash).
            "flash": {"bytes": flash, "model_bytes": model_bytes, "text_bytes": sections.get(".text", 0),
                      "packed_bytes": packed_bytes,
                      "other_bytes": flash - model_bytes - packed_bytes - sections.get(".text", 0)},
            "ram": {"bytes": static_ram + peak, "arena_bytes": arena, "stack_peak_bytes": peak,
                    "other_static_bytes": static_ram - arena},
            "sections": sections,
        })

doc = {
    "what": "octet-runtime on Cortex-M under QEMU -icount shift=0 (one instruction per ns of "
            "virtual time): instructions per inference (the measuring calls' few included), per op "
            "(Model::run_timed), exact repeats; flash = .vector_table + .text + .rodata (the model and its packed image) "
            "+ .data less the test images; RAM = .bss (the arena) + .data + the deepest stack "
            "(painted, scanned after each run)",
    "qemu": qemu, "rustc": rustc, "commit": commit, "kernels": kernels,
    "results": results,
}
text = json.dumps(doc, indent=1) + "\n"
if out:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(out)), suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, out)
    print(f"bench/mcu.sh: wrote {out}", file=sys.stderr)
else:
    sys.stdout.write(text)
for r in results:
    for k, v in r["kernels"].items():
        if v.get("unavailable"):
            print(f'{r["cpu"]:10} {r["model"]:7} {k}: unavailable on this core', file=sys.stderr)
            continue
        print(f'{r["cpu"]:10} {r["model"]:7} {k:7}({v["resolved"]}) {v["instructions_per_inference"]:>10} insn/inference '
              f'({v["instructions_per_mac"]} per MAC), stable {"yes" if v["stable"] else "no"}; '
              f'flash {r["flash"]["bytes"]} B (model {r["model_bytes"]}, packed {r["flash"]["packed_bytes"]}, '
              f'.text {r["flash"]["text_bytes"]}), '
              f'RAM {r["ram"]["bytes"]} B (arena {r["arena_bytes"]}, stack {r["ram"]["stack_peak_bytes"]})',
              file=sys.stderr)
PY
