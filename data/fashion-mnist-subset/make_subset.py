#!/usr/bin/env python3
"""Regenerate the bundled, class-balanced Fashion-MNIST subset.

Takes the first N images of every class, in file order, from the full data set
and writes them in the same gzip IDX format (28x28, uint8). Output is
byte-for-byte reproducible: gzip level 9 with mtime 0 and no file name.

    python3 make_subset.py [--src DIR] [--out DIR] [--train-per-class 600] [--test-per-class 200]

Standard library only.
"""

import argparse
import gzip
import os
import struct
import sys

CLASSES = 10
IMAGES_MAGIC = 0x00000803
LABELS_MAGIC = 0x00000801


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def find(src, name):
    for candidate in (name + ".gz", name):
        path = os.path.join(src, candidate)
        if os.path.exists(path):
            return path
    sys.exit(f"{os.path.join(src, name)}.gz not found "
             "(apt-get install dataset-fashion-mnist, or pass --src DIR)")


def read_images(path):
    data = read(path)
    magic, n, rows, cols = struct.unpack(">IIII", data[:16])
    if magic != IMAGES_MAGIC:
        sys.exit(f"{path}: bad magic {magic:#010x}, expected {IMAGES_MAGIC:#010x}")
    size = rows * cols
    if len(data) != 16 + n * size:
        sys.exit(f"{path}: expected {16 + n * size} bytes, found {len(data)}")
    return rows, cols, [data[16 + i * size:16 + (i + 1) * size] for i in range(n)]


def read_labels(path):
    data = read(path)
    magic, n = struct.unpack(">II", data[:8])
    if magic != LABELS_MAGIC:
        sys.exit(f"{path}: bad magic {magic:#010x}, expected {LABELS_MAGIC:#010x}")
    if len(data) != 8 + n:
        sys.exit(f"{path}: expected {8 + n} bytes, found {len(data)}")
    return data[8:]


def write_gz(path, payload):
    # GzipFile with mtime=0 and an empty name keeps the output reproducible.
    with open(path, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as f:
            f.write(payload)


def subset(src, out, split, per_class):
    rows, cols, images = read_images(find(src, f"{split}-images-idx3-ubyte"))
    labels = read_labels(find(src, f"{split}-labels-idx1-ubyte"))
    if len(images) != len(labels):
        sys.exit(f"{split}: {len(images)} images but {len(labels)} labels")
    taken = [0] * CLASSES
    keep = []
    for i, label in enumerate(labels):
        if label >= CLASSES:
            sys.exit(f"{split}: label {label} at index {i} is not below {CLASSES}")
        if taken[label] < per_class:
            taken[label] += 1
            keep.append(i)
    if any(t < per_class for t in taken):
        sys.exit(f"{split}: not enough images per class: {taken}")
    n = len(keep)
    write_gz(os.path.join(out, f"{split}-images-idx3-ubyte.gz"),
             struct.pack(">IIII", IMAGES_MAGIC, n, rows, cols) + b"".join(images[i] for i in keep))
    write_gz(os.path.join(out, f"{split}-labels-idx1-ubyte.gz"),
             struct.pack(">II", LABELS_MAGIC, n) + bytes(labels[i] for i in keep))
    return n


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--out", default=here)
    parser.add_argument("--train-per-class", type=int, default=600)
    parser.add_argument("--test-per-class", type=int, default=200)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    n_train = subset(args.src, args.out, "train", args.train_per_class)
    n_test = subset(args.src, args.out, "t10k", args.test_per_class)
    total = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out)
                if f.endswith("-ubyte.gz"))
    print(f"wrote {n_train} train and {n_test} test images to {args.out} ({total} bytes)")


if __name__ == "__main__":
    main()
