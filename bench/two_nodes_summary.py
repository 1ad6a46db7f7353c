#!/usr/bin/env python3
"""The summary of bench/gpu_two_nodes.sh: $OUT/two_nodes.json and $OUT/two_nodes.md.

usage: two_nodes_summary.py RUNS OUT --gpus N --batches 128,512 --precisions f32,bf16
         --images 50000 --machine M --commit C --command CMD [--sim-hostid 1]

Reads what the runs left in RUNS (runs/two_nodes): for run NAME, NAME.node<R>.out / .err (node
0's stdout holds octet's epoch lines), NAME.rc (the groups' exit codes, 124 = killed as hung)
and NAME.cmd; the peers' JSON under ddp2/ and ddp1/; the all-reduce JSON; the NCCL_DEBUG=INFO
logs under nccl_octet2/ and nccl_ddp2/. A run that is missing or failed gives null and why (the
error's last line). Every number comes from those files.
"""
import argparse
import glob
import json
import os
import re
import sys

GRADIENT_BYTES = 44_695_848  # ResNet-18's gradient, f32: the size that matters for training


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def json_lines(text):
    """The JSON objects among a stdout's lines (other lines are skipped)."""
    out = []
    for line in (text or "").splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def load_json(path):
    text = read(path)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


NOISE = r"octet launch:|ChildFailedError|error_file|errors\.html|traceback :|^\*+$|^=+$"
CAUSE = r"(?i)error|exception|out of memory|panicked|timed out|hang"


def failure(runs, name):
    """Why run NAME gave no number: not run, hung, or the last error line of a failed group."""
    rc = read(os.path.join(runs, f"{name}.rc"))
    if rc is None:
        return "not run"
    codes = rc.split()
    errs = sorted(glob.glob(os.path.join(runs, f"{name}.node*.err")))
    # A group that failed by itself tells most, then one killed as hung, then any.
    order = [i for i, c in enumerate(codes) if c not in ("0", "124")]
    order += [i for i, c in enumerate(codes) if c == "124"]
    order += [i for i in range(len(errs)) if i not in order]
    prefix = f"exit {'/'.join(codes)}"
    if "124" in codes:
        prefix += " (hung: killed at the limit)"
    for i in order:
        if i >= len(errs):
            continue
        lines = [l.strip() for l in (read(errs[i]) or "").splitlines() if l.strip()]
        # The cause, not the launchers' account of it: octet launch's own lines and torchrun's
        # ChildFailedError report come after the rank's error.
        cause = [l for l in lines if not re.search(NOISE, l) and re.search(CAUSE, l)]
        pick = cause or [l for l in lines if re.search(r"failed|Killed|HANG", l)] or lines
        if pick:
            return f"{prefix}; node {i}: {pick[-1][:300]}"
    return prefix


def rc_ok(runs, name):
    rc = read(os.path.join(runs, f"{name}.rc"))
    return rc is not None and all(c == "0" for c in rc.split())


def octet_epoch2(runs, name):
    """(epoch-2 record, error) from node 0's stdout of an octet training run."""
    lines = [v for v in json_lines(read(os.path.join(runs, f"{name}.node0.out")))
             if v.get("event") == "epoch"]
    e2 = next((v for v in lines if v.get("epoch") == 2), None)
    if e2 is not None and rc_ok(runs, name):
        return e2, None
    if rc_ok(runs, name):
        return None, f"no epoch-2 line in node 0's stdout ({len(lines)} epoch lines)"
    return None, failure(runs, name)


def peer_rows(runs, sub, name, world):
    """The peer's rows: its JSON file, else the rows rank 0 printed before it failed."""
    doc = load_json(os.path.join(runs, sub, f"peer_torch_{world}gpu.json"))
    if doc is not None:
        return doc.get("rows", []), doc
    return [v for v in json_lines(read(os.path.join(runs, f"{name}.node0.out")))
            if "batch_per_gpu" in v], None


def peer_row(rows, batch, precision, world):
    bf16 = precision == "bf16"
    for r in rows:
        if (r.get("model") == "resnet18" and r.get("batch_per_gpu") == batch
                and bool(r.get("amp_bf16")) == bf16 and r.get("gpus", world) == world):
            return r
    return None


def peer_epoch2(runs, sub, name, batch, precision, world):
    rows, _ = peer_rows(runs, sub, name, world)
    r = peer_row(rows, batch, precision, world)
    if r is not None and r.get("oom"):
        return None, None, "out of memory"
    if r is not None and r.get("epoch2_s") is not None:
        return r["epoch2_s"], r.get("images"), None
    if rc_ok(runs, name):
        return None, None, f"no row for resnet18 batch {batch} {precision} in the peer's output"
    return None, None, failure(runs, name)


def busbw_at(rows, size, key):
    for r in rows or []:
        if r.get("bytes") == size:
            return r.get(key)
    return None


def allreduce(runs, kind, name, path):
    """Peak bus bandwidth and that at ResNet-18's gradient size; octet's JSON or the peer's."""
    doc = load_json(path)
    if doc is None or not rc_ok(runs, name):
        return {"peak_busbw_gbs": None, "busbw_gbs_at_gradient": None,
                "error": failure(runs, name)}
    if kind == "octet":
        rows, key = doc.get("rows", []), "busbw_gbs"
        peak = doc.get("peak_busbw_gbs")
    else:  # peer_allreduce.py: a list of rows
        rows, key = doc, "busbw_GBs"
        peak = max((r.get(key) or 0 for r in rows), default=None)
    out = {"peak_busbw_gbs": peak, "busbw_gbs_at_gradient": busbw_at(rows, GRADIENT_BYTES, key),
           "world": doc.get("world") if isinstance(doc, dict) else int(re.sub(r"\D", "", os.path.basename(path)))}
    if isinstance(doc, dict) and doc.get("commit"):
        out["commit"] = doc["commit"]
    return out


def nccl_transport(folder):
    """What NCCL_DEBUG=INFO logs say: version, the NET/ lines, channels counted by transport."""
    files = sorted(glob.glob(os.path.join(folder, "*")))
    if not files:
        return None
    version, net, via = None, [], {}
    for f in files:
        for line in (read(f) or "").splitlines():
            msg = line.split("NCCL INFO ", 1)[-1].strip()
            m = re.search(r"NCCL version (\S+)", line)
            if m and version is None:
                version = m.group(1)
            m = re.search(r"\bvia (\S+)", msg)
            if m:
                parts = m.group(1).split("/")
                t = "/".join(parts[:2]) if parts[0] == "NET" else parts[0]
                via[t] = via.get(t, 0) + 1
            elif ("NET/" in msg or "Using network" in msg) and msg not in net:
                net.append(msg)
    return {"nccl_version": version, "net_lines": net[:30], "channels_via": via,
            "logs": len(files)}


def fmt(v, digits=3):
    return "–" if v is None else f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs")
    ap.add_argument("out")
    ap.add_argument("--gpus", type=int, required=True)
    ap.add_argument("--batches", default="128,512")
    ap.add_argument("--precisions", default="f32,bf16")
    ap.add_argument("--images", type=int, default=50000)
    ap.add_argument("--machine", default="unknown")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--command", default="")
    ap.add_argument("--sim-hostid", default="1")
    a = ap.parse_args()
    runs, n, half = a.runs, a.gpus, a.gpus // 2

    ar = {
        "octet_two_nodes": allreduce(runs, "octet", "allreduce_octet2",
                                     os.path.join(runs, "allreduce_octet2.json")),
        "octet_one_group": allreduce(runs, "octet", "allreduce_octet1",
                                     os.path.join(runs, "allreduce_octet1.json")),
        "ddp_two_nodes": allreduce(runs, "peer", "allreduce_ddp2",
                                   os.path.join(runs, "ddp2", f"allreduce_{n}gpu.json")),
        "ddp_one_group": allreduce(runs, "peer", "allreduce_ddp1",
                                   os.path.join(runs, "ddp1", f"allreduce_{n}gpu.json")),
    }
    octet_peak = ar["octet_two_nodes"]["peak_busbw_gbs"]
    one_group_run = any(os.path.exists(os.path.join(runs, f"octet1_b{b}_{p}.rc"))
                        for b in a.batches.split(",") for p in a.precisions.split(","))
    rows, errors = [], []
    for b in (int(x) for x in a.batches.split(",")):
        for p in a.precisions.split(","):
            e2, e_err = octet_epoch2(runs, f"octet2_b{b}_{p}")
            d2, d2_images, d2_err = peer_epoch2(runs, "ddp2", "ddp2", b, p, n)
            d1, _, d1_err = peer_epoch2(runs, "ddp1", "ddp1", b, p, n)
            o2 = e2["times"].get("train_s") if e2 else None
            row = {"batch_per_gpu": b, "precision": p,
                   "octet_two_nodes_epoch_s": o2,
                   "ddp_two_nodes_epoch_s": d2,
                   "ddp_one_group_epoch_s": d1,
                   "octet_over_ddp_two_nodes": None,
                   "octet_two_nodes_img_per_s": e2.get("images_per_s") if e2 else None,
                   "octet_two_nodes_comm_s": e2["times"].get("comm_s") if e2 else None,
                   "octet_two_nodes_comm_wait_s": e2["times"].get("comm_wait_s") if e2 else None,
                   "octet_two_nodes_train_busbw_gbs": e2["times"].get("busbw_gbs") if e2 else None,
                   "octet_two_nodes_allreduce_peak_busbw_gbs": octet_peak,
                   "octet_world": e2.get("world") if e2 else None}
            if o2 and d2:
                if d2_images is None or d2_images == a.images:
                    row["octet_over_ddp_two_nodes"] = round(o2 / d2, 3)
                else:
                    row["note"] = f"no ratio: octet ran {a.images} images, the peer {d2_images}"
            if e2:
                t_ = e2["times"]
                total = (t_.get("comm_s") or 0) + (t_.get("comm_wait_s") or 0)
                if "comm_exposed_s" in t_ and total > 0:
                    row["octet_two_nodes_comm_exposed_s"] = t_["comm_exposed_s"]
                    row["octet_two_nodes_comm_hidden"] = round(1 - t_["comm_exposed_s"] / total, 3)
            # The optional modes: octet without overlap (the A/B), both engines compressing.
            for key, name in (("octet_two_nodes_serial", f"octet2s_b{b}_{p}"),
                              ("octet_two_nodes_compress", f"octet2c_b{b}_{p}")):
                if os.path.exists(os.path.join(runs, f"{name}.rc")):
                    ex, ex_err = octet_epoch2(runs, name)
                    row[f"{key}_epoch_s"] = ex["times"].get("train_s") if ex else None
                    if ex_err:
                        row.setdefault("errors", {})[key] = ex_err
            if os.path.exists(os.path.join(runs, "ddp2c.rc")):
                dc, _, dc_err = peer_epoch2(runs, "ddp2c", "ddp2c", b, p, n)
                row["ddp_two_nodes_compress_epoch_s"] = dc
                if dc_err:
                    row.setdefault("errors", {})["ddp_two_nodes_compress"] = dc_err
                oc = row.get("octet_two_nodes_compress_epoch_s")
                if oc and dc:
                    row["octet_over_ddp_two_nodes_compress"] = round(oc / dc, 3)
            if one_group_run:
                e1, e1_err = octet_epoch2(runs, f"octet1_b{b}_{p}")
                row["octet_one_group_epoch_s"] = e1["times"].get("train_s") if e1 else None
                if e1_err:
                    row.setdefault("errors", {})["octet_one_group"] = e1_err
            for k, v in (("octet_two_nodes", e_err), ("ddp_two_nodes", d2_err),
                         ("ddp_one_group", d1_err)):
                if v:
                    row.setdefault("errors", {})[k] = v
            for k, v in row.get("errors", {}).items():
                errors.append(f"b{b} {p} {k}: {v}")
            rows.append(row)
    for k, v in ar.items():
        if v.get("error"):
            errors.append(f"all-reduce {k}: {v['error']}")

    commits = {v.get("commit") for v in ar.values() if v.get("commit")}
    doc = {
        "what": f"two simulated nodes on one host: 2 process groups x {half} GPUs, rendezvous on "
                "127.0.0.1, NCCL on its network transport (P2P and SHM disabled), octet against "
                "PyTorch DDP (peer_torch.py) under the same variables",
        "machine": a.machine, "gpus": n, "groups": f"2 x {half}",
        "commit": a.commit, "octet_binary_commit": sorted(commits)[0] if commits else None,
        "command": a.command, "images": a.images,
        "protocol": "ResNet-18, synthetic CIFAR-shaped data, batch per GPU, the images of an "
                    "epoch shared by the GPUs, constant lr, no augmentation; epoch 1 warms up, "
                    "epoch 2 is timed (octet: times.train_s of node 0's epoch-2 line; DDP: "
                    "epoch2_s). bf16: octet --precision bf16 against PyTorch bf16 autocast + "
                    "channels_last. Ratio below 1: octet faster.",
        "nccl": {"env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
                 "hostid_per_group": a.sim_hostid == "1",
                 "octet_transport": nccl_transport(os.path.join(runs, "nccl_octet2")),
                 "ddp_transport": nccl_transport(os.path.join(runs, "nccl_ddp2"))},
        "allreduce": ar,
        "rows": rows,
        "target": "octet's epoch <= DDP's under the same transport (and compressed, where run)",
        "target_met": all(r["octet_over_ddp_two_nodes"] is not None
                          and r["octet_over_ddp_two_nodes"] <= 1
                          and r.get("octet_over_ddp_two_nodes_compress", 0) <= 1
                          for r in rows) if rows else None,
        "errors": errors,
    }
    with open(os.path.join(a.out, "two_nodes.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")

    t = doc["nccl"]["octet_transport"] or {}
    md = [f"# Two simulated nodes on one host ({a.machine}; 2 groups x {half} GPUs)", "",
          f"Commit {a.commit} (binary {doc['octet_binary_commit'] or 'unknown'}); "
          f"`{a.command}`; {a.images} images per epoch.", "",
          "NCCL: " + (" ".join(f"{k}={v}" for k, v in doc["nccl"]["env"].items()) or "-")
          + (", NCCL_HOSTID per group" if doc["nccl"]["hostid_per_group"] else "")
          + f"; NCCL {t.get('nccl_version') or '?'}, channels "
          + (", ".join(f"{k} x{v}" for k, v in sorted(t.get("channels_via", {}).items())) or "?"),
          ""]
    md += [f"- {l}" for l in t.get("net_lines", [])[:6]]
    md += ["", "| batch/GPU | precision | octet 2 groups s | DDP 2 torchruns s | DDP standalone s "
           "| octet / DDP | octet busbw in training GB/s |"
           + (" octet 1 group s |" if one_group_run else ""),
           "|---:|---|---:|---:|---:|---:|---:|" + ("---:|" if one_group_run else "")]
    for r in rows:
        md.append(f"| {r['batch_per_gpu']} | {r['precision']} | {fmt(r['octet_two_nodes_epoch_s'])} "
                  f"| {fmt(r['ddp_two_nodes_epoch_s'])} | {fmt(r['ddp_one_group_epoch_s'])} "
                  f"| {fmt(r['octet_over_ddp_two_nodes'])} "
                  f"| {fmt(r['octet_two_nodes_train_busbw_gbs'], 1)} |"
                  + (f" {fmt(r.get('octet_one_group_epoch_s'))} |" if one_group_run else ""))
    if any("octet_two_nodes_comm_hidden" in r or "octet_two_nodes_serial_epoch_s" in r
           or "octet_two_nodes_compress_epoch_s" in r or "ddp_two_nodes_compress_epoch_s" in r
           for r in rows):
        md += ["", "Overlap and compression (octet: all-reduce hidden behind backward = 1 − "
               "compute's wait for the results / (transfer + wait for peers); serial = "
               "`--no-overlap`; compressed = `--grad-compress bf16` against DDP's "
               "`bf16_compress_hook`):", "",
               "| batch/GPU | precision | hidden | octet serial s | octet overlapped s "
               "| octet compressed s | DDP compressed s | octet / DDP compressed |",
               "|---:|---|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            h = r.get("octet_two_nodes_comm_hidden")
            md.append(f"| {r['batch_per_gpu']} | {r['precision']} "
                      f"| {'-' if h is None else f'{100 * h:.0f}%'} "
                      f"| {fmt(r.get('octet_two_nodes_serial_epoch_s'))} "
                      f"| {fmt(r['octet_two_nodes_epoch_s'])} "
                      f"| {fmt(r.get('octet_two_nodes_compress_epoch_s'))} "
                      f"| {fmt(r.get('ddp_two_nodes_compress_epoch_s'))} "
                      f"| {fmt(r.get('octet_over_ddp_two_nodes_compress'))} |")
    md += ["", "All-reduce bus bandwidth, GB/s (peak; at ResNet-18's 44.7 MB gradient):", "",
           "| | octet | PyTorch |", "|---|---:|---:|"]
    for label, o, d in (("two groups", "octet_two_nodes", "ddp_two_nodes"),
                        ("one group", "octet_one_group", "ddp_one_group")):
        md.append(f"| {label} | {fmt(ar[o]['peak_busbw_gbs'], 1)}; {fmt(ar[o]['busbw_gbs_at_gradient'], 1)} "
                  f"| {fmt(ar[d]['peak_busbw_gbs'], 1)}; {fmt(ar[d]['busbw_gbs_at_gradient'], 1)} |")
    if errors:
        md += ["", "Missing figures:", ""] + [f"- {e}" for e in errors]
    with open(os.path.join(a.out, "two_nodes.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    print(f"wrote {a.out}/two_nodes.json and two_nodes.md", file=sys.stderr)


if __name__ == "__main__":
    main()
