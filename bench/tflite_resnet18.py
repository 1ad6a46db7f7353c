#!/usr/bin/env python3
"""One TFLite (XNNPACK, ai-edge-litert) figure of the peers' ResNet-18 int8 in ort_bench.py's row
format, appended to a JSON list, timed as ort_bench.py times it (its `timed`): batch-64
throughput (img/s, median of 30 runs) from resnet18_int8_b64.tflite, or batch-1 latency (ms,
median of 300) from the same file resized to one image. For machines whose copy of the tree cannot hold both model files (the GPU host's
`run` device caps it at 64 MiB): bench/device_cpu_infer.sh.

    python3 bench/tflite_resnet18.py PEER_DIR THREADS BATCH OUT.json
"""
import json, os, sys

import numpy as np
from ai_edge_litert.interpreter import Interpreter

peer, threads, batch, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, peer)
from ort_bench import timed  # noqa: E402

it = Interpreter(model_path=os.path.join(peer, "resnet18_int8_b64.tflite"), num_threads=threads)
d = it.get_input_details()[0]
if batch == 1:
    it.resize_tensor_input(d["index"], [1] + list(d["shape"][1:]))
it.allocate_tensors()
d = it.get_input_details()[0]
it.set_tensor(d["index"], np.random.default_rng(0).integers(-128, 128, d["shape"], dtype=np.int8))
m = timed(it.invoke, 300 if batch == 1 else 30, 50 if batch == 1 else 5)
row = dict(engine="tflite-xnnpack", model="resnet18", precision="int8", threads=threads)
if batch == 1:
    row["batch1_ms"] = round(m * 1e3, 4)
else:
    row["batch64_img_s"] = round(64 / m, 1)
rows = json.load(open(out)) if os.path.exists(out) else []
json.dump(rows + [row], open(out, "w"), indent=1)
print(json.dumps(row), flush=True)
