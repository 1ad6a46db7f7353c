#!/usr/bin/env python3
"""Merges the rounds of `bash bench/gpu_train.sh ab` into one file: a change against its
baseline build, epoch-2 seconds per round and the ratio of the medians (below 1: the change
is faster).

usage: merge_ab.py GPU_TXT COMMAND DIR [DIR ...] > bench/results/<name>.json
Every DIR holds ab_old<i>.json / ab_new<i>.json; rounds of several calls are pooled.
"""
import glob
import json
import os
import statistics
import sys

gpu = open(sys.argv[1]).read().strip()
runs = {"old": [], "new": []}
for d in sys.argv[3:]:
    for side in runs:
        for f in sorted(glob.glob(os.path.join(d, f"ab_{side}*.json"))):
            runs[side].append(json.load(open(f)))
if not runs["old"] or not runs["new"]:
    sys.exit("merge_ab.py: no ab_old*.json or no ab_new*.json found")

def times(side):
    t = {}
    for r in runs[side]:
        for row in r["rows"]:
            if row.get("epoch2_s"):
                t.setdefault((row["model"], row["precision"], row["batch"]), []).append(row["epoch2_s"])
    return t

old, new = times("old"), times("new")
rows = []
for key in sorted(old.keys() & new.keys()):
    mo, mn = statistics.median(old[key]), statistics.median(new[key])
    rows.append(dict(model=key[0], precision=key[1], batch=key[2],
                     old_epoch2_s=old[key], new_epoch2_s=new[key],
                     old_median_s=round(mo, 4), new_median_s=round(mn, 4),
                     new_over_old=round(mn / mo, 3)))
json.dump(dict(gpu=gpu, command=sys.argv[2],
               old_commit=runs["old"][0]["commit"], new_commit=runs["new"][0]["commit"],
               protocol=runs["new"][0]["protocol"], rows=rows), sys.stdout, indent=1)
print()
