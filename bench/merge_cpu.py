#!/usr/bin/env python3
"""Merges criterion's estimates (benches/infer.rs) and ort_bench.py's rows into one file.

usage: merge_cpu.py CRITERION_DIR ORT_JSON COMMIT > bench/results/cpu_infer.json
Batch-1 rows are median latency in ms, batch-64 rows median throughput in img/s.
"""
import glob, json, os, platform, sys

crit, ort_path, commit = sys.argv[1], sys.argv[2], sys.argv[3]
octet = []
for est in glob.glob(os.path.join(crit, "*", "*", "*", "new", "estimates.json")):
    bench = json.load(open(os.path.join(os.path.dirname(est), "benchmark.json")))
    model, func = bench["group_id"], bench["function_id"]
    batch = int(bench["value_str"])
    median_s = json.load(open(est))["median"]["point_estimate"] * 1e-9
    engine, threads = func.split("/")
    octet.append(dict(engine=engine, model=model, threads=threads.replace("threads", "").lstrip("-"), batch=batch,
                      batch1_ms=round(median_s * 1e3, 4) if batch == 1 else None,
                      batch64_img_s=round(batch / median_s, 1) if batch == 64 else None))
peer = json.load(open(ort_path))


def find(rows, **kw):
    return [r for r in rows if all(str(r.get(k)) == str(v) for k, v in kw.items())]


summary = []
for model in ("lenet", "resnet18"):
    for threads in ("1", "2"):
        ours = find(octet, engine="int8", model=model, threads=threads)
        b1 = [r["batch1_ms"] for r in ours if r["batch1_ms"]] or [None]
        b64 = [r["batch64_img_s"] for r in ours if r["batch64_img_s"]] or [None]
        if threads == "2":
            b1 = [r["batch1_ms"] for r in find(octet, engine="int8", model=model, threads="1") if r["batch1_ms"]] or [None]
        ort8 = (find(peer, engine="onnxruntime", model=model, precision="int8", threads=threads) or [{}])[0]
        tfl = (find(peer, engine="tflite-xnnpack", model=model, threads=threads) or [{}])[0]
        cf = [r["batch64_img_s"] for r in find(octet, engine="candle-f32", model=model, threads=threads) if r["batch64_img_s"]] or [None]
        ratio = lambda a, b: round(a / b, 3) if a and b else None
        summary.append(dict(model=model, threads=int(threads),
                            octet_int8_batch1_ms=b1[0], ort_int8_batch1_ms=ort8.get("batch1_ms"),
                            tflite_int8_batch1_ms=tfl.get("batch1_ms"),
                            octet_int8_batch64_img_s=b64[0], ort_int8_batch64_img_s=ort8.get("batch64_img_s"),
                            tflite_int8_batch64_img_s=tfl.get("batch64_img_s"), candle_f32_batch64_img_s=cf[0],
                            throughput_octet_over_ort=ratio(b64[0], ort8.get("batch64_img_s")),
                            throughput_octet_over_candle_f32=ratio(b64[0], cf[0]),
                            latency_ort_over_octet=ratio(ort8.get("batch1_ms"), b1[0])))
json.dump(dict(commit=commit, machine=f"{platform.machine()}, {os.cpu_count()} cores",
               command="bash bench/cpu_infer.sh", summary=summary, octet=octet, peer=peer), sys.stdout, indent=1)
print()
