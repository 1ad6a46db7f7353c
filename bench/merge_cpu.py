#!/usr/bin/env python3
"""Merges criterion's estimates (benches/infer.rs) and ort_bench.py's rows into one file.

usage: merge_cpu.py CRITERION_DIR[,DIR…] ORT_JSON[,ORT_JSON…] COMMIT > bench/results/cpu_infer_<cpu>.json
Batch-1 rows are median latency in ms, batch-64 rows median throughput in img/s. Every octet
row names the kernels that ran (`int8-<kernels>` in the benchmark id); the file records the
CPU model and its SIMD features, so figures from different machines are never mixed up. With
several runs of either (interleaved, on a shared machine), each figure is that engine's best run.
"""
import json, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_rows import best_of, cpu, criterion_rows, find, first, machine, ratio  # noqa: E402

crits, peer_paths, commit = sys.argv[1].split(","), sys.argv[2].split(","), sys.argv[3]
octet = best_of([r for crit in crits for r in criterion_rows(crit)],
                ("engine", "kernels", "model", "threads", "batch"))
peer = best_of([r for path in peer_paths for r in json.load(open(path))],
               ("engine", "model", "precision", "threads"))


summary = []
for model in ("lenet", "resnet18", "lenet-1ch", "resnet18-1ch"):
    # The default kernels are the ones timed at 2 threads too.
    default = first(find(octet, engine="int8", model=model, threads="2"), "kernels")
    peer_model = model.replace("-1ch", "")
    for threads in ("1", "2"):
        ours = find(octet, engine="int8", model=model, threads=threads, kernels=default)
        b1, b64 = first(ours, "batch1_ms"), first(ours, "batch64_img_s")
        ort8 = (find(peer, engine="onnxruntime", model=peer_model, precision="int8", threads=threads) or [{}])[0]
        tfl = (find(peer, engine="tflite-xnnpack", model=peer_model, threads=threads) or [{}])[0]
        cf = first(find(octet, engine="candle-f32", model=model, threads=threads), "batch64_img_s")
        others = sorted({r["kernels"] for r in find(octet, engine="int8", model=model, threads=threads)}
                        - {default, None})
        row = dict(model=model, threads=int(threads), kernels=default,
                   octet_int8_batch1_ms=b1, ort_int8_batch1_ms=ort8.get("batch1_ms"),
                   tflite_int8_batch1_ms=tfl.get("batch1_ms"),
                   octet_int8_batch64_img_s=b64, ort_int8_batch64_img_s=ort8.get("batch64_img_s"),
                   tflite_int8_batch64_img_s=tfl.get("batch64_img_s"), candle_f32_batch64_img_s=cf,
                   throughput_octet_over_ort=ratio(b64, ort8.get("batch64_img_s")),
                   throughput_octet_over_tflite=ratio(b64, tfl.get("batch64_img_s")),
                   throughput_octet_over_candle_f32=ratio(b64, cf),
                   latency_ort_over_octet=ratio(ort8.get("batch1_ms"), b1),
                   latency_tflite_over_octet=ratio(tfl.get("batch1_ms"), b1))
        # The other kernel sets timed on this CPU (what CPUs without the default's would run).
        for k in others:
            rows = find(octet, engine="int8", model=model, threads=threads, kernels=k)
            a1, a64 = first(rows, "batch1_ms"), first(rows, "batch64_img_s")
            key = k.replace("-", "_")
            row.update({f"octet_int8_{key}_batch1_ms": a1, f"octet_int8_{key}_batch64_img_s": a64,
                        f"throughput_octet_{key}_over_ort": ratio(a64, ort8.get("batch64_img_s")),
                        f"throughput_octet_{key}_over_tflite": ratio(a64, tfl.get("batch64_img_s"))})
        if peer_model != model:
            three = first(find(octet, engine="int8", model=peer_model, threads=threads, kernels=default),
                          "batch64_img_s")
            row.update(throughput_1ch_over_3ch=ratio(b64, three))
        summary.append(row)
json.dump(dict(commit=commit, machine=machine(), cpu_features=cpu()[1], command=os.environ.get("BENCH_COMMAND", "bash bench/cpu_infer.sh"), summary=summary, octet=octet, peer=peer),
          sys.stdout, indent=1)
print()
