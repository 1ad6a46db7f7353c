#!/usr/bin/env python3
"""The README's CPU table from bench/results/cpu_infer_*.json files (the peers time only the
3-channel models: the 1-channel rows are compared with those).

usage: cpu_table.py bench/results/cpu_infer_*.json
"""
import json, sys


def cell(text, r, ratios):
    """`text`, then the ratios of row `r` that were measured: (key, peer name) each."""
    parts = [f"{r[key]:.2f}× {peer}" for key, peer in ratios if r.get(key)]
    return text + (" (" + ", ".join(parts) + ")" if parts else "")


rows = ["| CPU (kernels) | model | b64 1 thread | b64 2 threads | b1 1 thread | b1 2 threads |",
        "|---|---|---|---|---|---|"]
for path in sys.argv[1:]:
    d = json.load(open(path))
    cpu = d["machine"].split(", ", 2)[-1] + " " + "/".join(f for f in d["cpu_features"] if f in ("avx2", "avx512_vnni", "avx_vnni", "amx_int8"))
    S = {(r["model"], r["threads"]): r for r in d["summary"]}
    for model in ("resnet18", "lenet", "resnet18-1ch", "lenet-1ch"):
        if (model, 1) not in S or (model, 2) not in S:
            continue  # not timed in this file's run
        r1, r2 = S[(model, 1)], S[(model, 2)]
        def tp(r):
            return cell(f"{r['octet_int8_batch64_img_s']:,.0f}", r,
                        [("throughput_octet_over_ort", "ORT"), ("throughput_octet_over_tflite", "TFLite")])
        def lat(r):
            return cell(f"{r['octet_int8_batch1_ms']:.3f} ms", r,
                        [("latency_ort_over_octet", "ORT"), ("latency_tflite_over_octet", "TFLite")])
        rows.append(f"| {cpu} ({r1['kernels']}) | {model} | {tp(r1)} | {tp(r2)} | {lat(r1)} | {lat(r2)} |")
        # other kernel sets timed on the same CPU (1 thread)
        for k in ("avx512_vnni", "avx2", "avx_vnni"):
            key = f"octet_int8_{k}_batch64_img_s"
            if r1.get(key):
                peers = [(f"throughput_octet_{k}_over_ort", "ORT"), (f"throughput_octet_{k}_over_tflite", "TFLite")]
                name = k.replace("avx512_", "avx512-").replace("_", "-")
                rows.append(f"| same CPU ({name} kernels forced) | {model} | {cell(f'{r1[key]:,.0f}', r1, peers)} | | {r1[f'octet_int8_{k}_batch1_ms']:.3f} ms | |")
print("\n".join(rows))
