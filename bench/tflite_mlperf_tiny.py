#!/usr/bin/env python3
"""TFLite (XNNPACK, ai-edge-litert) on the MLPerf Tiny reference models: the peer of
benches/mlperf_tiny.rs, on the same .tflite files (every one under DIR). Batch-1 median
latency (ms) and batch-64 median throughput (inputs/s; the input resized to 64), at each
thread count; seeded random int8 inputs. Each figure is timed for at least SECONDS (as long as
criterion times octet's), after a warm-up, and the whole set is measured REPEATS times, a
minute or so apart on a shared machine: each row keeps the peer's best repeat (all of them
under "repeats").

    python3 bench/tflite_mlperf_tiny.py [--dir tests/data/mlperf_tiny] [--threads 1 2]
        [--seconds 3] [--repeats 3] [--json OUT]

Prints one JSON row per model, thread count and repeat. Run it in the same command as the
benchmark it is compared with, on a quiet machine.
"""
import argparse, glob, json, os, statistics, time

import numpy as np
from ai_edge_litert.interpreter import Interpreter


def timed(fn, seconds, min_runs=10):
    """Median seconds per call of `fn`, called for at least `seconds` after a warm-up of a
    tenth of that."""
    start = time.perf_counter()
    while time.perf_counter() - start < seconds / 10:
        fn()
    out = []
    start = time.perf_counter()
    while len(out) < min_runs or time.perf_counter() - start < seconds:
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def interpreter(path, batch, threads):
    it = Interpreter(model_path=path, num_threads=threads)
    d = it.get_input_details()[0]
    if batch != d["shape"][0]:
        it.resize_tensor_input(d["index"], [batch, *d["shape"][1:]])
    it.allocate_tensors()
    d = it.get_input_details()[0]
    x = np.random.default_rng(batch).integers(-128, 128, d["shape"], dtype=np.int8)
    it.set_tensor(d["index"], x)
    return it


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="tests/data/mlperf_tiny")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.dir, "*.tflite")))
    if not files:
        raise SystemExit(f"no .tflite files under {a.dir}")
    best = {}
    for rep in range(a.repeats):
        for path in files:
            model = os.path.splitext(os.path.basename(path))[0]
            for t in a.threads:
                b1 = timed(interpreter(path, 1, t).invoke, a.seconds)
                b64 = timed(interpreter(path, 64, t).invoke, a.seconds)
                run = dict(batch1_ms=round(b1 * 1e3, 4), batch64_img_s=round(64 / b64, 1))
                print(json.dumps(dict(model=model, threads=t, repeat=rep, **run)), flush=True)
                row = best.setdefault((model, t), dict(
                    engine="tflite-xnnpack", model=model, precision="int8", threads=t,
                    batch1_ms=run["batch1_ms"], batch64_img_s=run["batch64_img_s"], repeats=[]))
                row["batch1_ms"] = min(row["batch1_ms"], run["batch1_ms"])
                row["batch64_img_s"] = max(row["batch64_img_s"], run["batch64_img_s"])
                row["repeats"].append(run)
    rows = list(best.values())
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
