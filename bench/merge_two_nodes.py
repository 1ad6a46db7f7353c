#!/usr/bin/env python3
"""Rounds of bench/gpu_two_nodes.sh in one result: each round's two_nodes.json kept whole, and
per batch and precision the same-round ratios octet / DDP (plain and compressed) with their
median. Rounds alternate the engines on a machine whose network speed drifts between calls,
so only ratios from one round are compared.

    python3 bench/merge_two_nodes.py OUT_STEM ROUND.json... [--note TEXT]
    # writes OUT_STEM.json and OUT_STEM.md
"""
import argparse
import json
import statistics


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("rounds", nargs="+")
    ap.add_argument("--note", default="")
    a = ap.parse_args()
    rounds = []
    for path in a.rounds:
        with open(path) as f:
            rounds.append(json.load(f))
    keys = [(r["batch_per_gpu"], r["precision"]) for r in rounds[0]["rows"]]
    rows = []
    for b, p in keys:
        per = [next(x for x in rd["rows"] if (x["batch_per_gpu"], x["precision"]) == (b, p))
               for rd in rounds]
        row = {"batch_per_gpu": b, "precision": p}
        for name, o, d in (("plain", "octet_two_nodes_epoch_s", "ddp_two_nodes_epoch_s"),
                           ("compressed", "octet_two_nodes_compress_epoch_s",
                            "ddp_two_nodes_compress_epoch_s")):
            pairs = [(x.get(o), x.get(d)) for x in per]
            ratios = [round(oo / dd, 3) for oo, dd in pairs if oo and dd]
            row[name] = {"octet_epoch_s": [oo for oo, _ in pairs], "ddp_epoch_s": [dd for _, dd in pairs],
                         "octet_over_ddp": ratios,
                         "median_octet_over_ddp": statistics.median(ratios) if ratios else None}
        row["octet_hidden"] = [x.get("octet_two_nodes_comm_hidden") for x in per]
        # The serial runs are an optional stage; a later round's summary repeats the first's.
        row["octet_serial_epoch_s"] = per[0].get("octet_two_nodes_serial_epoch_s")
        rows.append(row)
    doc = {"what": rounds[0]["what"], "machine": rounds[0]["machine"],
           "octet_binary_commit": rounds[0].get("octet_binary_commit"),
           "protocol": rounds[0]["protocol"], "note": a.note, "rows": rows, "rounds": rounds}
    with open(a.out + ".json", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    fmt = lambda xs: ", ".join("–" if x is None else f"{x:.3f}" for x in xs)
    md = [f"# Two simulated nodes, {doc['machine']}: {len(rounds)} rounds (octet {doc['octet_binary_commit']})",
          "", a.note, "",
          "| batch/GPU | precision | octet serial s (round 1) | octet s | DDP s | octet / DDP (median) "
          "| octet compressed s | DDP compressed s | octet / DDP compressed (median) | hidden |",
          "|---:|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pl, co = r["plain"], r["compressed"]
        med = lambda d: "–" if d["median_octet_over_ddp"] is None else f"**{d['median_octet_over_ddp']:.3f}**"
        md.append(f"| {r['batch_per_gpu']} | {r['precision']} | {fmt([r['octet_serial_epoch_s']])} "
                  f"| {fmt(pl['octet_epoch_s'])} | {fmt(pl['ddp_epoch_s'])} "
                  f"| {fmt(pl['octet_over_ddp'])} ({med(pl)}) | {fmt(co['octet_epoch_s'])} "
                  f"| {fmt(co['ddp_epoch_s'])} | {fmt(co['octet_over_ddp'])} ({med(co)}) "
                  f"| {', '.join('–' if h is None else f'{100 * h:.0f}%' for h in r['octet_hidden'])} |")
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
