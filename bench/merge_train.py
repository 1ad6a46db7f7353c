#!/usr/bin/env python3
"""Merges `octet bench train` and peer_torch.py results of the same GPU command into one file.

usage: merge_train.py OCTET_JSON PEER_JSON GPU_TXT COMMAND > bench/results/train_<gpu>.json
The ratio is octet epoch-2 time / PyTorch epoch-2 time of the same precision (below 1: octet is
faster): octet f32 rows against PyTorch fp32, octet bf16 rows (--precision bf16) against PyTorch
bf16 autocast + channels_last.
"""
import json
import sys

octet, peer = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
gpu = open(sys.argv[3]).read().strip()
fp32 = {(r["model"], r["batch_per_gpu"]): r for r in peer["rows"] if not r.get("amp_bf16")}
bf16 = {(r["model"], r["batch_per_gpu"]): r for r in peer["rows"] if r.get("amp_bf16")}
rows = []

def ratio(a, b):
    return round(a / b, 3) if a and b else None


for r in octet["rows"]:
    key = (r["model"], r["batch"])
    p, b = fp32.get(key, {}), bf16.get(key, {})
    precision = r.get("precision", "f32")
    row = dict(model=r["model"], precision=precision, batch=r["batch"], images=r["images"],
               octet_epoch2_s=r.get("epoch2_s"), octet_oom=r.get("oom", False),
               octet_data_s=r.get("data_s"), octet_h2d_s=r.get("h2d_s"), octet_compute_s=r.get("compute_s"),
               torch_fp32_epoch2_s=p.get("epoch2_s"), torch_bf16_cl_epoch2_s=b.get("epoch2_s"))
    if precision == "bf16":
        row["octet_over_torch_bf16_cl"] = ratio(r.get("epoch2_s"), b.get("epoch2_s"))
    else:
        row["octet_over_torch_fp32"] = ratio(r.get("epoch2_s"), p.get("epoch2_s"))
    rows.append(row)
json.dump(dict(gpu=gpu, commit=octet["commit"], command=sys.argv[4], octet_command=octet["command"],
               protocol=octet["protocol"], torch=peer.get("torch"), cudnn=peer.get("cudnn"),
               rows=rows, octet_raw=octet["rows"], peer_raw=peer["rows"]), sys.stdout, indent=1)
print()
