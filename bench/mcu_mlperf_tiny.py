#!/usr/bin/env python3
"""Writes bench/mcu_mlperf_tiny.sh's JSON from its work directory: octet's bench/mcu.sh
results (octet.json) and, per model, the TFLM + CMSIS-NN runner's lines from its release and
release_with_logs builds (NAME/peer_release.txt, NAME/peer_release_with_logs.txt, read by
bench/mcu_lines.py; "differ I N": the output bytes of record I that differ from the host's,
compared in the firmware) and its sizes (NAME/peer_size.json).

    python3 bench/mcu_mlperf_tiny.py WORK OUT.json --command C --commit C --tflm C
        --flags F --qemu Q --models "NAME=FILE ..."
"""
import argparse
import hashlib
import json
import os

from mcu_lines import parse

# The table (MLPerf Tiny v0.5 reference and the best closed-division results on a
# 120 MHz Cortex-M4, NUCLEO-L4R5ZI), by the reference model's file name.
PUBLISHED = {
    "pretrainedResnet_quant": ("image classification (ResNet-8)", 704.2, 165.1, "ST X-CUBE-AI 9.0"),
    "kws_ref_model": ("keyword spotting (DS-CNN)", 181.9, 43.2, "ST X-CUBE-AI 9.0"),
    "vww_96_int8": ("visual wake words (MobileNetV1 0.25)", 600.6, 88.9, "ST X-CUBE-AI 9.0"),
    "ad01_int8": ("anomaly detection (FC autoencoder)", 10.05, 4.05, "Plumerai 2023.05"),
}
MHZ = 120


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("out")
    for k in ("command", "commit", "tflm", "flags", "qemu", "models"):
        ap.add_argument("--" + k, required=True)
    a = ap.parse_args()
    octet = json.load(open(os.path.join(a.work, "octet.json")))
    by_name = {r["model"]: r for r in octet["results"]}
    res = {
        "what": "MLPerf Tiny reference models on a Cortex-M4F under QEMU mps2-an386 -icount "
                "shift=0 (one instruction per ns of virtual time): instructions per inference of "
                "octet (firmware/, the cortex-m-dsp kernels) and of stock TensorFlow Lite Micro "
                "with its CMSIS-NN kernels (OPTIMIZED_KERNEL_DIR=cmsis_nn), the same .tflite "
                "files, input records and counting; every output byte compared",
        "command": a.command,
        "commit": a.commit,
        "qemu": a.qemu,
        "octet": {"rustc": octet.get("rustc"), "method": octet.get("what")},
        "tflm_cmsis_nn": {
            "tflm_commit": a.tflm,
            "flags": a.flags,
            "harness": "bench/tflm_mcu/runner.cc: MicroMutableOpResolver, one interpreter for "
                       "the whole-inference counts, a second with a MicroProfilerInterface on the "
                       "same SysTick clock for the per-op counts (in the release_with_logs build: "
                       "the release build calls no profiler); capi/examples/firmware's board "
                       "code (SysTick counted against a loop of known length, painted stack); "
                       "every output byte compared in the firmware with octet's host outputs",
            "flash": ".vectors+.text+.rodata+.ARM.exidx+.data (code and model; the input records "
                     "excluded)",
            "ram": "the arena TFLM used (arena_used_bytes) + .data/.bss other than the arena "
                   "buffer + the deepest stack",
        },
        "targets": "octet <= 0.5 x TFLM + CMSIS-NN, and octet's instructions below the best "
                   "published cycle count at 120 MHz (instructions are a lower bound of cycles on "
                   "an M4)",
        "models": {},
    }
    for m in a.models.split():
        name, path = m.split("=", 1)
        stem = os.path.splitext(os.path.basename(path))[0]
        r = by_name[name]
        k = r["kernels"]["auto"]
        d = os.path.join(a.work, name)
        p = parse(os.path.join(d, "peer_release.txt"))
        ops = parse(os.path.join(d, "peer_release_with_logs.txt"))
        cal = p["insn_per_tick"]
        peer_insns = [round(t * cal) for t in p["ticks"]]
        # The runner compares every output byte with the host's in the firmware.
        differ = sum(p["differ"])
        images = len(p["ticks"])
        size = json.load(open(os.path.join(d, "peer_size.json")))
        arena_buf = 256 * 1024  # runner.cc's ARENA_BYTES: the buffer, of which `arena` is used
        octet_mean = k["instructions_per_inference"]
        peer_mean = round(sum(peer_insns) / len(peer_insns))
        task, ref_ms, best_ms, best_who = PUBLISHED.get(stem, (stem, None, None, None))
        best_cycles = round(best_ms * MHZ * 1000) if best_ms else None
        res["models"][name] = {
            "task": task,
            "tflite": path,
            "tflite_sha256": hashlib.sha256(open(path, "rb").read()).hexdigest(),
            "images": images,
            "inputs": "random int8 input records (runtime/examples/mcu_inputs.rs), the same for both",
            "macs": sum(o["macs"] for o in k["ops"]),
            "octet": {
                "instructions": octet_mean,
                "instructions_per_image": k["instructions_per_image"],
                "per_op": k["ops"],
                "outputs_equal_host": k["logits_match"],
                "flash_bytes": r["flash"],
                "ram_bytes": r["ram"],
            },
            "tflm_cmsis_nn": {
                "instructions": peer_mean,
                "instructions_per_image": peer_insns,
                "per_op": [{"index": j, "op": o["op"],
                            "instructions": round(sum(o["ticks"]) / len(o["ticks"]) * ops["insn_per_tick"])}
                           for j, o in enumerate(ops["ops"])],
                "per_op_build": "release_with_logs (the release build calls no profiler); its "
                                "whole-inference instructions: "
                                + str(round(sum(ops["ticks"]) / len(ops["ticks"]) * ops["insn_per_tick"])),
                "identical_to_octet": differ == 0 and images == len(k["instructions_per_image"]),
                "differing_bytes": differ,
                "flash_bytes": {"bytes": size["flash"], "text": size["text"], "rodata_and_model": size["rodata"],
                                "data": size["data"]},
                "ram_bytes": {"bytes": p["arena"] + size["static_ram"] - arena_buf + p["stack"],
                              "arena_used": p["arena"],
                              "other_static": size["static_ram"] - arena_buf,
                              "stack_peak": p["stack"]},
            },
            "octet_over_tflm": round(octet_mean / peer_mean, 3),
            "mlperf_tiny_v0_5_reference_ms": ref_ms,
            "best_published": {"engine": best_who, "ms": best_ms, "cycles_at_120_mhz": best_cycles},
            "targets_met": {
                "half_of_tflm": octet_mean <= 0.5 * peer_mean,
                "below_best_published": best_cycles is not None and octet_mean < best_cycles,
            },
        }
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
