"""PyTorch peer for octet's network descriptions: each network built as a torch.nn.Module from
the same description octet trains (`octet describe MODEL --json`, the JSON of
models/src/spec/), so the architectures are the same by construction, and timed as
shared/peers/peer_torch.py times its models: SGD lr 0.1, momentum 0.9, weight decay 5e-4, random
CIFAR-shaped uint8 images in pinned host memory (host-to-device copy, normalisation, forward,
backward and step in the timed region), epoch 1 warms up, epoch 2 is timed.

usage: python3 peer_zoo.py NET.json ... [--batch 128] [--images 50000] [--precision f32,bf16]
                           [--mode eager,tuned,compile] [--out FILE]
  tuned: torch.backends.cudnn.benchmark = True; compile: torch.compile on top of tuned.
  bf16 rows use autocast + channels_last (what peer_torch.py does).
One JSON line per row on stdout; all rows to --out.
"""
import argparse, json, os, time
import torch, torch.nn as nn, torch.nn.functional as F


class Net(nn.Module):
    """The description's layers in order; each reads the previous output, or `input`."""

    def __init__(self, layers, channels, classes, side=32):
        super().__init__()
        self.layers = layers
        self.mods = nn.ModuleDict()
        shapes = {"input": (channels, side, side)}
        prev = "input"
        for l in layers:
            src = l.get("input") or prev
            c, h, w = shapes[src] if isinstance(shapes[src], tuple) else (shapes[src], 1, 1)
            key = l["name"].replace(".", "_")
            op = l["op"]
            if op in ("conv", "depthwise_conv"):
                k, s, p = l["kernel"], l.get("stride", 1), l.get("padding", 0)
                groups = c if op == "depthwise_conv" else 1
                out = c * l.get("multiplier", 1) if op == "depthwise_conv" else l["out"]
                self.mods[key] = nn.Conv2d(c, out, k, s, p, groups=groups, bias=l.get("bias", True))
                shape = (out, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1)
            elif op == "batch_norm":
                self.mods[key] = nn.BatchNorm2d(c)
                shape = (c, h, w)
            elif op in ("max_pool", "avg_pool"):
                k = l["kernel"]; s = l.get("stride") or k
                shape = (c, (h - k) // s + 1, (w - k) // s + 1)
            elif op == "global_avg_pool":
                shape = (c, 1, 1)
            elif op == "flatten":
                shape = c * h * w
            elif op == "linear":
                n = c * h * w if isinstance(shapes[src], tuple) else shapes[src]
                out = l.get("out") or classes
                self.mods[key] = nn.Linear(n, out)
                shape = out
            else:  # relu, relu6, add, dropout keep the shape
                shape = shapes[src]
            shapes[l["name"]] = shape
            prev = l["name"]

    def forward(self, x):
        vals = {"input": x}
        prev = "input"
        for l in self.layers:
            t = vals[l.get("input") or prev]
            op, key = l["op"], l["name"].replace(".", "_")
            if key in self.mods:
                y = self.mods[key](t)
            elif op == "relu":
                y = F.relu(t)
            elif op == "relu6":
                y = F.relu6(t)
            elif op == "max_pool":
                y = F.max_pool2d(t, l["kernel"], l.get("stride") or l["kernel"])
            elif op == "avg_pool":
                y = F.avg_pool2d(t, l["kernel"], l.get("stride") or l["kernel"])
            elif op == "global_avg_pool":
                y = F.adaptive_avg_pool2d(t, 1)
            elif op == "flatten":
                y = t.flatten(1)
            elif op == "add":
                y = t + vals[l["with"]]
            elif op == "dropout":
                y = F.dropout(t, l["p"], self.training)
            else:
                raise ValueError(f"unknown op {op}")
            vals[l["name"]] = y
            prev = l["name"]
        return vals[prev]


def epoch_times(layers, batch, amp, n_images, compile_):
    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    net = Net(layers, 3, 10).to(dev)
    if amp:
        net = net.to(memory_format=torch.channels_last)
    if compile_:
        # A fresh compiler state per run: one process compiles every (network, precision),
        # and dynamo's recompile limit (8) would otherwise send the later ones to eager.
        torch._dynamo.reset()
        net = torch.compile(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    crit = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(1)
    images = torch.randint(0, 256, (n_images, 3, 32, 32), dtype=torch.uint8, generator=g).pin_memory()
    labels = torch.randint(0, 10, (n_images,), generator=g).pin_memory()
    mean = torch.tensor([0.4914, 0.4822, 0.4465], device=dev).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.2023, 0.1994, 0.2010], device=dev).view(1, 3, 1, 1) * 255
    times = []
    for _ in range(2):
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        for i in range(0, n_images, batch):
            x = images[i:i + batch].to(dev, non_blocking=True)
            y = labels[i:i + batch].to(dev, non_blocking=True)
            x = (x.float() - mean) / std
            if amp:
                x = x.contiguous(memory_format=torch.channels_last)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                loss = crit(net(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        torch.cuda.synchronize(dev)
        times.append(time.perf_counter() - t0)
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("nets", nargs="+")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--images", type=int, default=50000)
    ap.add_argument("--precision", default="f32,bf16")
    ap.add_argument("--mode", default="eager,tuned,compile")
    ap.add_argument("--out", default="peer_zoo.json")
    a = ap.parse_args()
    rows = []
    for mode in a.mode.split(","):
        torch.backends.cudnn.benchmark = mode in ("tuned", "compile")
        for path in a.nets:
            name = os.path.splitext(os.path.basename(path))[0]
            layers = json.load(open(path))["layer"]
            for p in a.precision.split(","):
                row = dict(model=name, mode=mode, precision=p, batch=a.batch, images=a.images)
                try:
                    t = epoch_times(layers, a.batch, p == "bf16", a.images, mode == "compile")
                    row.update(epoch1_s=round(t[0], 3), epoch2_s=round(t[1], 3),
                               img_per_s=round(a.images / t[1], 1))
                except Exception as e:  # noqa: BLE001 - a row records what failed
                    row.update(error=f"{type(e).__name__}: {e}"[:300])
                    torch.cuda.empty_cache()
                print(json.dumps(row), flush=True)
                rows.append(row)
    with open(a.out, "w") as f:
        json.dump(dict(torch=torch.__version__, cuda=torch.version.cuda,
                       cudnn=torch.backends.cudnn.version(), device=torch.cuda.get_device_name(0),
                       rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
