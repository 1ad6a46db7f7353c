"""Merges bench/gpu_zoo.sh's output (bench and accuracy stages, one or several directories)
into bench/results/zoo_fashion_mnist.json: per built-in network, float and int8 test accuracy on
full Fashion-MNIST (per-channel weights, and the ablation's per-tensor row), and epoch times of
octet and the PyTorch peer (its best mode per precision) on the same GPU, as ratios.

usage: python3 bench/merge_zoo.py OUT_DIR ... [--out bench/results/zoo_fashion_mnist.json]
       [--commit SHA] [--command TEXT] [--note TEXT ...]
"""
import argparse, glob, json, os


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--out", default="bench/results/zoo_fashion_mnist.json")
    ap.add_argument("--commit", default="")
    ap.add_argument("--command", default="")
    ap.add_argument("--note", action="append", default=[], help="a remark kept in the JSON")
    a = ap.parse_args()
    models, gpu, peer_meta = {}, "", {}
    octet_rows, peer_rows = [], []
    for d in a.dirs:
        if os.path.exists(f"{d}/gpu.txt"):
            gpu = open(f"{d}/gpu.txt").read().strip() or gpu
        if os.path.exists(f"{d}/octet_zoo_bench.json"):
            v = json.load(open(f"{d}/octet_zoo_bench.json"))
            octet_rows += v["rows"] if isinstance(v, dict) else v
        if os.path.exists(f"{d}/peer_zoo.json"):
            v = json.load(open(f"{d}/peer_zoo.json"))
            peer_rows += v["rows"]
            peer_meta = {k: v[k] for k in ("torch", "cuda", "cudnn", "device")}
        for path in glob.glob(f"{d}/export_*.json"):
            m = os.path.basename(path)[len("export_"):-len(".json")]
            try:
                ex = json.load(open(path))
            except json.JSONDecodeError:
                continue
            rows = {r["name"]: r for r in ex["ablation"]["rows"]}
            epochs = [json.loads(l) for l in open(f"{d}/train_{m}.jsonl") if l.startswith("{")]
            epochs = [e for e in epochs if e.get("event") == "epoch"]
            pc = rows["int8 weights + activations + bias"]
            pt = rows.get("int8 weights + activations + bias, per-tensor weights")
            fl = rows["float"]
            models.setdefault(m, {}).update({
                "epochs": len(epochs),
                "train_epoch_s": [round(e["times"]["train_s"], 3) for e in epochs],
                "float_test_accuracy_full_split": epochs[-1]["test_accuracy"] if epochs else None,
                "float_accuracy": fl["accuracy"],
                "int8_per_channel_accuracy": pc["accuracy"],
                "int8_per_tensor_accuracy": pt["accuracy"] if pt else None,
                "drop_per_channel_pp": round(100 * (fl["accuracy"] - pc["accuracy"]), 2),
                "drop_per_tensor_pp": round(100 * (fl["accuracy"] - pt["accuracy"]), 2) if pt else None,
                "test_images": fl["total"],
                "o8_bytes": ex.get("o8_bytes"),
            })
    for r in octet_rows:
        if r.get("epoch2_s") is None:
            continue
        m = models.setdefault(r["model"], {})
        p = r["precision"]
        peers = [q for q in peer_rows if q["model"] == r["model"] and q["precision"] == p
                 and q.get("epoch2_s") and q["batch"] == r["batch"]]
        best = min(peers, key=lambda q: q["epoch2_s"]) if peers else None
        m.setdefault("epoch_time_batch_%d" % r["batch"], {})[p] = {
            "octet_s": r["epoch2_s"],
            "peer_best_s": best["epoch2_s"] if best else None,
            "peer_best_mode": best["mode"] if best else None,
            "peer_modes_s": {q["mode"]: q["epoch2_s"] for q in peers},
            "ratio_octet_over_peer": round(r["epoch2_s"] / best["epoch2_s"], 3) if best else None,
        }
    out = {
        "what": "built-in networks trained on full Fashion-MNIST on one GPU: the float test accuracy on the whole test split (float_test_accuracy_full_split, the last epoch's), the export's ablation on its first test_images test images (float, int8 per-channel weights, int8 per-tensor weights: the runtime's bytes), and epoch times (50,000 random 3x32x32 images, epoch 2 of 2) of octet and the PyTorch peer built from the same descriptions (bench/peer_zoo.py), best mode per precision",
        "gpu": gpu, "peer": peer_meta, "commit": a.commit, "command": a.command,
        "notes": a.note,
        "models": models,
    }
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    os.replace(tmp, a.out)
    for m, v in models.items():
        print(m, json.dumps(v))


if __name__ == "__main__":
    main()
