"""Writes the PyTorch files octet's `.pth` tests read (tests/pth.rs), with PyTorch itself.

    python3 tests/data/make_lenet_pth.py            # needs torch (CPU is enough) and numpy

Builds octet's LeNet in PyTorch (the same state_dict names and shapes: conv1, conv2, fc1, fc2,
fc3, one input channel, 10 classes), trains it for two epochs on the bundled Fashion-MNIST
subset (seeded, on the CPU, no augmentation), and writes into tests/data/:

- lenet.pth: `torch.save(model.state_dict(), ...)`, what most PyTorch users have;
- lenet_logits.json: PyTorch's eval-mode logits for the first 8 test images of the subset,
  its accuracy and loss on the whole subset test split, and the normalisation used;
- lenet_checkpoint.pth: a training checkpoint dict as DataParallel/DDP code writes it
  (`{"epoch", "state_dict", "optimizer"}`, names prefixed `module.`; the optimizer
  entry without its momentum tensors, to keep the file small), its tensors in f16,
  bf16 and f64, the conv weights channels_last, plus an int64 `num_batches_tracked`: the
  variants octet must also read;
- legacy.pth: a state_dict in PyTorch's pre-1.6 (non-zip) format, which octet refuses;
- not_a_state_dict.pth: a zip-format file holding no tensors.

The images go through the steps octet's loader takes: 28x28 centred in a zeroed 32x32, then
(x/255 - mean)/std with the Fashion-MNIST statistics octet uses for the bundled subset.
"""

import gzip
import json
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
SUBSET = os.path.join(HERE, "..", "..", "data", "fashion-mnist-subset")
# octet's Normalization::fashion_mnist(); the test checks the JSON's copy against it.
MEAN, STD = 0.2860, 0.3530


class LeNet(nn.Module):
    """octet's LeNet (models/src/lenet.rs) for one-channel 32x32 images."""

    def __init__(self, cin=1, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(400, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = x.flatten(1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def idx(name):
    with gzip.open(os.path.join(SUBSET, name), "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4 : 4 + 4 * dims])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def images(prefix):
    """Padded u8 images (N, 1, 32, 32) and labels, as octet's IDX loader gives them."""
    x = idx(f"{prefix}-images-idx3-ubyte.gz")
    padded = np.zeros((x.shape[0], 1, 32, 32), np.uint8)
    padded[:, 0, 2:30, 2:30] = x
    y = idx(f"{prefix}-labels-idx1-ubyte.gz").astype(np.int64)
    return padded, y


def normalise(u8):
    return (torch.from_numpy(u8).float() / 255.0 - MEAN) / STD


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    xtr, ytr = images("train")
    xte, yte = images("t10k")
    xtr, ytr = normalise(xtr), torch.from_numpy(ytr)
    xte_t, yte_t = normalise(xte), torch.from_numpy(yte)

    net = LeNet()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    for epoch in range(2):
        net.train()
        perm = torch.randperm(len(ytr), generator=torch.Generator().manual_seed(epoch))
        for i in range(0, len(perm), 64):
            b = perm[i : i + 64]
            opt.zero_grad()
            F.cross_entropy(net(xtr[b]), ytr[b]).backward()
            opt.step()

    net.eval()
    with torch.no_grad():
        logits = net(xte_t)
        loss = F.cross_entropy(logits, yte_t).item()
        correct = int((logits.argmax(1) == yte_t).sum())
    sd = net.state_dict()
    torch.save(sd, os.path.join(HERE, "lenet.pth"))
    out = {
        "written_by": f"tests/data/make_lenet_pth.py, torch {torch.__version__}",
        "model": "lenet",
        "data": "bundled Fashion-MNIST subset, test split",
        "normalization": {"mean": [MEAN], "std": [STD]},
        "first_images": 8,
        "logits": [[float(v) for v in row] for row in logits[:8]],
        "labels": [int(v) for v in yte[:8]],
        "test_images": len(yte),
        "test_correct": correct,
        "test_loss": loss,
    }
    with open(os.path.join(HERE, "lenet_logits.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")

    dtypes = {"conv1": torch.float64, "conv2": torch.bfloat16, "fc1": torch.float16}
    variant = {}
    for k, v in sd.items():
        v = v.to(dtypes.get(k.split(".")[0], torch.float32))
        # A model moved to channels_last saves its conv weights in that (permuted) layout.
        variant["module." + k] = v.contiguous(memory_format=torch.channels_last) if v.dim() == 4 else v
    variant["module.bn.num_batches_tracked"] = torch.tensor(469, dtype=torch.int64)
    torch.save(
        {"epoch": 2, "state_dict": variant, "optimizer": opt.state_dict()["param_groups"]},
        os.path.join(HERE, "lenet_checkpoint.pth"),
    )
    torch.save(
        {"conv1.bias": sd["conv1.bias"]},
        os.path.join(HERE, "legacy.pth"),
        _use_new_zipfile_serialization=False,
    )
    torch.save({"epoch": 2, "lr": 0.05}, os.path.join(HERE, "not_a_state_dict.pth"))
    print(f"lenet: {correct}/{len(yte)} test images correct, loss {loss:.4f}")


if __name__ == "__main__":
    main()
