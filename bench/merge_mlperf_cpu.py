#!/usr/bin/env python3
"""Merges criterion's estimates (benches/mlperf_tiny.rs) and tflite_mlperf_tiny.py's rows into
one file: per model and thread count, octet's default kernels against TFLite (XNNPACK) at
batch 1 (median latency, ms) and batch 64 (median throughput, inputs/s), the ratios (above 1:
octet ahead), and octet's other kernel sets at 1 thread.

usage: merge_mlperf_cpu.py CRITERION_DIR[,DIR…] TFLITE_JSON[,TFLITE_JSON…] COMMIT > OUT.json

With several runs of either (interleaved, on a shared machine), each figure is that engine's
best run.
"""
import json, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_rows import best_of, cpu, criterion_rows, find, first, machine, ratio  # noqa: E402

crits, peer_paths, commit = sys.argv[1].split(","), sys.argv[2].split(","), sys.argv[3]
peer = best_of([r for path in peer_paths for r in json.load(open(path))], ("model", "threads"))
models = sorted({r["model"] for r in peer})
octet = best_of([r for crit in crits for r in criterion_rows(crit) if r["model"] in models],
                ("engine", "kernels", "model", "threads", "batch"))
summary = []
for model in models:
    # The default kernels are the ones timed at 2 threads too.
    default = first(find(octet, engine="int8", model=model, threads="2"), "kernels")
    for threads in ("1", "2"):
        ours = find(octet, engine="int8", model=model, threads=threads, kernels=default)
        b1, b64 = first(ours, "batch1_ms"), first(ours, "batch64_img_s")
        tfl = (find(peer, model=model, threads=threads) or [{}])[0]
        row = dict(model=model, threads=int(threads), kernels=default,
                   octet_batch1_ms=b1, tflite_batch1_ms=tfl.get("batch1_ms"),
                   octet_batch64_per_s=b64, tflite_batch64_per_s=tfl.get("batch64_img_s"),
                   latency_tflite_over_octet=ratio(tfl.get("batch1_ms"), b1),
                   throughput_octet_over_tflite=ratio(b64, tfl.get("batch64_img_s")))
        for r in find(octet, engine="int8", model=model, threads=threads):
            if r["kernels"] == default:
                continue
            key = r["kernels"].replace("-", "_")
            if r["batch1_ms"]:
                row[f"octet_{key}_batch1_ms"] = r["batch1_ms"]
            if r["batch64_img_s"]:
                row[f"octet_{key}_batch64_per_s"] = r["batch64_img_s"]
        summary.append(row)
json.dump(dict(commit=commit, machine=machine(), cpu_features=cpu()[1],
               command=os.environ.get("BENCH_COMMAND", "bash bench/cpu_mlperf_tiny.sh"), summary=summary, octet=octet, peer=peer),
          sys.stdout, indent=1)
print()
