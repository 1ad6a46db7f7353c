#!/usr/bin/env python3
"""Summarise `octet train --timeline DIR` CSVs: per rank and epoch, where each step's time went.

    python3 bench/timeline.py DIR [--epoch E] [--json OUT]

All times are on one host clock (µs), so ranks of one machine line up. Per rank it prints:
host queueing time per step, device time per step, device idle between steps (the device
waited for the host), how far ahead of the device the host ran, per all-reduce the wait
for the other ranks, the transfer and how long compute then waited for the result, and per
step the share of the all-reduces' time that backward hid; across ranks, which rank's device reached each
all-reduce last and by how much, and which rank's host was last to queue it.
"""
import argparse
import csv
import glob
import json
import os
import re
import statistics as st


def read(path):
    with open(path) as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summary(xs):
    return dict(mean=st.fmean(xs) if xs else float("nan"), p50=pct(xs, 0.5), p90=pct(xs, 0.9),
                total=sum(xs))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--epoch", type=int, help="epoch to summarise (default: the last one found)")
    ap.add_argument("--json", help="also write the summary here")
    a = ap.parse_args()
    files = glob.glob(os.path.join(a.dir, "steps_rank*_epoch*.csv"))
    if not files:
        raise SystemExit(f"no steps_rank*_epoch*.csv in {a.dir}: run octet train with --timeline {a.dir}")
    found = sorted({tuple(map(int, re.findall(r"rank(\d+)_epoch(\d+)", f)[0])) for f in files})
    epoch = a.epoch or max(e for _, e in found)
    ranks = sorted(r for r, e in found if e == epoch)
    out = dict(epoch=epoch, ranks={})
    comm = {}
    for r in ranks:
        s = read(os.path.join(a.dir, f"steps_rank{r}_epoch{epoch}.csv"))
        c_path = os.path.join(a.dir, f"comm_rank{r}_epoch{epoch}.csv")
        c = read(c_path) if os.path.exists(c_path) else []
        comm[r] = c
        ms = 1e-3
        host_q = [(x["host_end"] - x["host_start"]) * ms for x in s]
        dev_step = [(x["dev_end"] - x["dev_start"]) * ms for x in s]
        h2d = [(x["dev_h2d"] - x["dev_start"]) * ms for x in s]
        idle = [(b["dev_start"] - a_["dev_end"]) * ms for a_, b in zip(s, s[1:])]
        lead = [(x["dev_end"] - x["host_end"]) * ms for x in s]
        wait = [(x["dev_start"] - x["dev_arrived"]) * ms for x in c]
        xfer = [(x["dev_end"] - x["dev_start"]) * ms for x in c]
        # Compute's wait for each result: what backward did not hide (older CSVs lack it).
        exposed = [(x["exposed_end"] - x["exposed_start"]) * ms for x in c if "exposed_end" in x]
        per_step_comm, per_step_exposed = [0.0] * len(s), [0.0] * len(s)
        for x in c:
            if "exposed_end" not in x:
                continue
            for i, st_ in enumerate(s):
                if st_["dev_start"] <= x["exposed_end"] <= st_["dev_end"]:
                    per_step_comm[i] += (x["dev_end"] - x["dev_arrived"]) * ms
                    per_step_exposed[i] += (x["exposed_end"] - x["exposed_start"]) * ms
                    break
        hidden = [1 - e / t for t, e in zip(per_step_comm, per_step_exposed) if t > 0]
        span = (s[-1]["dev_end"] - s[0]["dev_start"]) * ms if s else 0.0
        out["ranks"][r] = dict(
            steps=len(s), span_ms=span, host_queue_ms=summary(host_q), device_step_ms=summary(dev_step),
            h2d_ms=summary(h2d), device_idle_between_steps_ms=summary(idle),
            host_ahead_of_device_ms=summary(lead), allreduce_wait_ms=summary(wait),
            allreduce_transfer_ms=summary(xfer), allreduce_exposed_ms=summary(exposed),
            step_hidden_share=summary(hidden), exposed_calls=len(exposed), allreduces=len(c))
    # Who arrives last at each all-reduce (device), and who queued it last (host).
    if len(ranks) > 1 and all(len(comm[r]) == len(comm[ranks[0]]) for r in ranks):
        n = len(comm[ranks[0]])
        last_dev = {r: 0 for r in ranks}
        last_host = {r: 0 for r in ranks}
        skew = []
        for i in range(n):
            arr = {r: comm[r][i]["dev_arrived"] for r in ranks}
            hst = {r: comm[r][i]["host"] for r in ranks}
            last_dev[max(arr, key=arr.get)] += 1
            last_host[max(hst, key=hst.get)] += 1
            skew.append((max(arr.values()) - min(arr.values())) * 1e-3)
        out["arrival"] = dict(calls=n, last_on_device=last_dev, last_on_host=last_host,
                              skew_ms=summary(skew))
    for r, v in out["ranks"].items():
        f = lambda k: f"{v[k]['mean']:.2f} (p50 {v[k]['p50']:.2f}, p90 {v[k]['p90']:.2f})"
        print(f"rank {r}, epoch {epoch}: {v['steps']} steps over {v['span_ms']:.0f} ms; per step:")
        print(f"  host queueing     {f('host_queue_ms')} ms")
        print(f"  device step       {f('device_step_ms')} ms  (h2d {v['h2d_ms']['mean']:.2f})")
        print(f"  device idle after {f('device_idle_between_steps_ms')} ms, {v['device_idle_between_steps_ms']['total']:.0f} ms in all")
        print(f"  host ahead by     {f('host_ahead_of_device_ms')} ms")
        if v["allreduces"]:
            print(f"  all-reduce wait   {f('allreduce_wait_ms')} ms over {v['allreduces']} calls, {v['allreduce_wait_ms']['total']:.0f} ms in all")
            print(f"  all-reduce xfer   {f('allreduce_transfer_ms')} ms")
            if v["exposed_calls"]:
                print(f"  compute waited    {f('allreduce_exposed_ms')} ms per call for the results")
                h = v["step_hidden_share"]
                print(f"  hidden per step   {100 * h['mean']:.0f}% of wait + transfer (p50 {100 * h['p50']:.0f}%, p90 {100 * h['p90']:.0f}%)")
    if "arrival" in out:
        a_ = out["arrival"]
        print(f"last to reach an all-reduce on the device: {a_['last_on_device']}; last to queue it on the host: "
              f"{a_['last_on_host']}; device arrival skew {a_['skew_ms']['mean']:.2f} ms (p90 {a_['skew_ms']['p90']:.2f})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
