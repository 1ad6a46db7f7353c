#!/usr/bin/env python3
"""Runs a .tflite with TensorFlow Lite Micro and TensorFlow Lite and compares every int8 output
byte with octet's runtime (`octet run MODEL --logits FILE`).

    python3 bench/tflite_check.py model.tflite --o8 model.o8 --images 500 --jobs 2
    python3 bench/tflite_check.py model.tflite --octet-logits logits.bin --images 500
    python3 bench/tflite_check.py kws_ref_model.tflite --random 1000 --seed 1 --interpreters tflm

octet runs the .o8 given with --o8, or else the .tflite itself (`octet run` imports it).

Inputs: with --random N, N seeded random tensors of the model's input type and shape (int8 or
uint8, uniform over the type's range), passed to octet as raw bytes (`octet run --inputs`);
otherwise the Fashion-MNIST test split (IDX, gzip) of --data, each 28x28 image centred in a
zeroed 32x32 one as octet's loader does (trainer/src/data/idx.rs), raw u8 pixels in file order:
the .tflite takes them as they are (its uint8 input and QUANTIZE make q = pixel - 128, as
octet).

Interpreters (--interpreters, comma-separated): tflm (TFLite Micro's reference kernels, pip
package tflite-micro), tflite (ai-edge-litert, its default optimized kernels), tflite-ref
(ai-edge-litert with the reference kernels, OpResolverType.BUILTIN_REF).

Prints (and with --out writes) JSON: per interpreter the images, differing bytes, differing
images, the largest absolute difference, the first few differences (image, class, octet,
other), seconds and images/s. Exit status: 0 when every byte agrees, 1 when some differ,
2 for bad arguments, 3 when a needed Python package is missing (the line says which).
"""

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

SIDE, PADDED = 28, 32
INTERPRETERS = ("tflm", "tflite", "tflite-ref")
MISSING_PACKAGE = 3


def load_fashion_mnist_test(data_dir, n):
    """The first n test images (0: all), 1x32x32 u8 each, as one (n, 32, 32) array."""
    import numpy as np

    path = os.path.join(data_dir, "t10k-images-idx3-ubyte.gz")
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic, count, rows, cols = (int.from_bytes(raw[i : i + 4], "big") for i in range(0, 16, 4))
    if magic != 0x803 or (rows, cols) != (SIDE, SIDE):
        sys.exit(f"{path}: not a Fashion-MNIST IDX image file (magic {magic:#x}, {rows}x{cols})")
    n = count if n == 0 else min(n, count)
    images = np.frombuffer(raw, dtype=np.uint8, count=n * SIDE * SIDE, offset=16)
    out = np.zeros((n, PADDED, PADDED), dtype=np.uint8)
    pad = (PADDED - SIDE) // 2
    out[:, pad : pad + SIDE, pad : pad + SIDE] = images.reshape(n, SIDE, SIDE)
    return out


def octet_logits(octet, model, data_dir, n, inputs=None):
    """`octet run MODEL --logits` over the first n test images, or over `inputs` (raw tensors,
    `--inputs`), as an int8 array."""
    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "logits.bin")
        cmd = [octet, "run", model, "--logits", path]
        if inputs is None:
            cmd += ["--data", "fashion-mnist:" + data_dir, "--images", str(n)]
        else:
            raw = os.path.join(tmp, "inputs.bin")
            inputs.tofile(raw)
            cmd += ["--inputs", raw]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        return np.fromfile(path, dtype=np.int8)


def input_details(model):
    """The model's input shape and numpy dtype (TFLite Micro's view of it)."""
    from tflite_micro.python.tflite_micro import runtime

    d = runtime.Interpreter.from_bytes(model, arena_size=64 << 20).get_input_details(0)
    return tuple(int(v) for v in d["shape"]), d["dtype"]


def random_inputs(model, n, seed):
    """n seeded random tensors of the model's input shape and type, uniform over the type."""
    import numpy as np

    shape, dtype = input_details(model)
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    return rng.integers(info.min, info.max + 1, size=(n, *shape[1:]), dtype=np.int64).astype(dtype)


# One interpreter per worker process, made by `_init` and used by `_run_chunk`.
_WORKER = {}


def _make(kind, model):
    if kind == "tflm":
        from tflite_micro.python.tflite_micro import runtime

        interp = runtime.Interpreter.from_bytes(model, arena_size=64 << 20)

        def run(x):
            interp.set_input(x, 0)
            interp.invoke()
            return interp.get_output(0).reshape(-1).copy()

        return run
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    resolver = OpResolverType.BUILTIN_REF if kind == "tflite-ref" else OpResolverType.AUTO
    interp = Interpreter(model_content=model, experimental_op_resolver_type=resolver, num_threads=1)
    interp.allocate_tensors()
    inp = interp.get_input_details()[0]["index"]
    out = interp.get_output_details()[0]["index"]

    def run(x):
        interp.set_tensor(inp, x)
        interp.invoke()
        return interp.get_tensor(out).reshape(-1).copy()

    return run


def _init(kind, model):
    _WORKER["run"] = _make(kind, model)


def _run_chunk(images):
    import numpy as np

    run = _WORKER["run"]
    return np.stack([run(img.reshape(1, *img.shape)) for img in images])


def run_interpreter(kind, model, images, jobs):
    """Logits (n, classes) int8 of `kind` over `images`, and the seconds it took."""
    import numpy as np

    start = time.perf_counter()
    chunks = np.array_split(images, max(1, min(jobs * 4, len(images))))
    with ProcessPoolExecutor(max_workers=jobs, initializer=_init, initargs=(kind, model)) as pool:
        parts = list(pool.map(_run_chunk, chunks))
    return np.concatenate(parts).astype(np.int8), time.perf_counter() - start


def compare(octet, other, examples):
    """Differing bytes and images, the largest |difference| and the first few differences."""
    import numpy as np

    diff = octet.astype(np.int16) - other.astype(np.int16)
    where = np.argwhere(diff != 0)
    return {
        "differing_bytes": int(len(where)),
        "differing_images": int(np.any(diff != 0, axis=1).sum()),
        "max_abs_difference": int(np.abs(diff).max()) if diff.size else 0,
        "first_differences": [
            {"image": int(i), "class": int(c), "octet": int(octet[i, c]), "other": int(other[i, c])}
            for i, c in where[:examples]
        ],
    }


def versions():
    from importlib import metadata

    out = {"python": sys.version.split()[0]}
    for pkg in ("tflite-micro", "ai-edge-litert", "numpy"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tflite", help="the .tflite model (octet convert MODEL.o8)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--o8", help="the .o8 model octet runs (default: the .tflite itself, imported)")
    src.add_argument("--octet-logits", help="octet's logits, already written by `octet run --logits`")
    p.add_argument("--octet", default="target/release/octet", help="the octet binary (default: %(default)s)")
    p.add_argument("--data", default="data/fashion-mnist-subset",
                   help="Fashion-MNIST IDX directory (default: %(default)s)")
    p.add_argument("--images", type=int, default=0, help="first N test images (0: all; default: %(default)s)")
    p.add_argument("--random", type=int, default=0, metavar="N",
                   help="N seeded random input tensors instead of images")
    p.add_argument("--seed", type=int, default=1, help="the random inputs' seed (default: %(default)s)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="worker processes per interpreter (default: the cores, %(default)s)")
    p.add_argument("--interpreters", default=",".join(INTERPRETERS),
                   help="comma-separated, of %s (default: all)" % ", ".join(INTERPRETERS))
    p.add_argument("--examples", type=int, default=5, help="differences listed per interpreter (default: %(default)s)")
    p.add_argument("--out", help="also write the JSON here")
    a = p.parse_args()
    a.interpreters = [k for k in a.interpreters.split(",") if k]
    bad = [k for k in a.interpreters if k not in INTERPRETERS]
    if bad or not a.interpreters:
        p.error(f"--interpreters: unknown {bad}; choose from {', '.join(INTERPRETERS)}")
    if a.images < 0 or a.jobs < 1 or a.random < 0:
        p.error("--images and --random must be >= 0 and --jobs >= 1")
    return a


def require_packages(kinds):
    """Exits with MISSING_PACKAGE and one line naming the package when one cannot be imported."""
    needed = {"numpy": "numpy"}
    # TFLite Micro also reads the model's input type for --random.
    needed["tflite_micro.python.tflite_micro.runtime"] = "tflite-micro"
    if any(k.startswith("tflite") and k != "tflm" for k in kinds):
        needed["ai_edge_litert.interpreter"] = "ai-edge-litert"
    for module, pkg in needed.items():
        try:
            __import__(module)
        except ImportError as e:
            print(f"SKIP: Python package {pkg} is not installed ({e}); pip install {pkg}", file=sys.stderr)
            sys.exit(MISSING_PACKAGE)


def main():
    a = parse_args()
    require_packages(a.interpreters)
    with open(a.tflite, "rb") as f:
        model = f.read()
    import numpy as np

    if a.random:
        images = random_inputs(model, a.random, a.seed)
        raw = images
    else:
        images = load_fashion_mnist_test(a.data, a.images)[..., None]
        raw = None
    n = len(images)
    if a.octet_logits:
        ours = np.fromfile(a.octet_logits, dtype=np.int8)
    else:
        ours = octet_logits(a.octet, a.o8 or a.tflite, a.data, n, raw)
    if ours.size % n:
        sys.exit(f"octet wrote {ours.size} logits, not a whole number per image for {n} images")
    ours = ours.reshape(n, -1)
    inputs = (f"{n} random {images.dtype} tensors of shape {list(images.shape[1:])}, seed {a.seed}"
              if a.random else f"the first {n} Fashion-MNIST test images of {a.data}")
    report = {"tflite": a.tflite, "o8": a.o8, "images": n, "inputs": inputs,
              "classes": ours.shape[1], "distinct_octet_outputs": int(len(np.unique(ours))),
              "jobs": a.jobs, "versions": versions(), "interpreters": {}}
    for kind in a.interpreters:
        theirs, secs = run_interpreter(kind, model, images, a.jobs)
        if theirs.shape != ours.shape:
            sys.exit(f"{kind}: logits of shape {theirs.shape}, octet's {ours.shape}")
        r = {"images": n, **compare(ours, theirs, a.examples), "seconds": round(secs, 3),
             "images_per_s": round(n / secs, 1)}
        report["interpreters"][kind] = r
        print(f"{kind}: {r['differing_bytes']} differing bytes in {r['differing_images']} of {n} images, "
              f"{r['images_per_s']} images/s on {a.jobs} process(es)", file=sys.stderr)
    text = json.dumps(report, indent=2)
    print(text)
    if a.out:
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            f.write(text + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, a.out)
    same = all(r["differing_bytes"] == 0 for r in report["interpreters"].values())
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
