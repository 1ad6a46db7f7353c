#!/usr/bin/env python3
"""Runs one .tflite model on the same inputs through the pip `tflite_micro`
interpreter and the two TFLM builds of bench/tflm/build.sh (default double
rounding, -DTFLITE_SINGLE_ROUNDING=1), plus any outputs given with --extra
(e.g. octet's logits), and reports as JSON how the outputs of every pair differ.

pip vs default should be 0 differing bytes (that validates the build);
default vs single_rounding is the effect of the rounding variant alone.

  compare.py MODEL --build-dir OUT_DIR --random N [--seed S]
  compare.py MODEL --build-dir OUT_DIR --inputs inputs.bin --count N \
      [--extra octet=logits.bin] [--save-dir DIR] [--jobs J] [--out r.json]

Inputs and outputs are raw records: every input (output) tensor's bytes, in
the model's order, one record per image, as bench/tflm/runner.cc takes them.
"""
import argparse
import concurrent.futures as cf
import functools
import hashlib
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

VARIANTS = ("default", "single_rounding")


def _each(getter):
    """getter(0), getter(1), ... until the pip API's IndexError (its only way
    to tell how many input or output tensors there are)."""
    for i in itertools.count():
        try:
            yield getter(i)
        except IndexError:
            return


def tensor_details(model_path, arena_bytes):
    """Input and output (shape, dtype) lists, as the pip interpreter sees them."""
    from tflite_micro.python.tflite_micro import runtime

    interp = runtime.Interpreter.from_file(model_path, arena_size=arena_bytes)
    ins = [(tuple(d["shape"]), np.dtype(d["dtype"])) for d in _each(interp.get_input_details)]
    outs = [(tuple(d["shape"]), np.dtype(d["dtype"])) for d in _each(interp.get_output_details)]
    return ins, outs


def record_bytes(details):
    return sum(int(np.prod(s)) * t.itemsize for s, t in details)


def run_pip_shard(model_path, ins, arena_bytes, data, count):
    """The pip interpreter on `count` records of `data`; returns raw outputs."""
    from tflite_micro.python.tflite_micro import runtime

    interp = runtime.Interpreter.from_file(model_path, arena_size=arena_bytes)
    rec = record_bytes(ins)
    out = bytearray()
    for k in range(count):
        off = k * rec
        for i, (shape, dtype) in enumerate(ins):
            n = int(np.prod(shape)) * dtype.itemsize
            arr = np.frombuffer(data, dtype, count=int(np.prod(shape)), offset=off).reshape(shape)
            interp.set_input(arr, i)
            off += n
        interp.invoke()
        for o in _each(interp.get_output):
            out += np.ascontiguousarray(o).tobytes()
    return bytes(out)


# LiteRT's kernel sets: BUILTIN (with its default XNNPACK delegate), BUILTIN
# without default delegates (ruy/optimized kernels), BUILTIN_REF (reference).
LITERT_RESOLVERS = {
    "litert": "AUTO",
    "litert_nodelegate": "BUILTIN_WITHOUT_DEFAULT_DELEGATES",
    "litert_ref": "BUILTIN_REF",
}


def run_litert_shard(model_path, resolver, ins, data, count):
    """LiteRT (ai-edge-litert) on `count` records; returns raw outputs."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interp = Interpreter(model_path=model_path,
                         experimental_op_resolver_type=OpResolverType[resolver])
    interp.allocate_tensors()
    in_idx = [d["index"] for d in interp.get_input_details()]
    out_idx = [d["index"] for d in interp.get_output_details()]
    rec = record_bytes(ins)
    out = bytearray()
    for k in range(count):
        off = k * rec
        for idx, (shape, dtype) in zip(in_idx, ins):
            n = int(np.prod(shape))
            interp.set_tensor(idx, np.frombuffer(data, dtype, count=n, offset=off).reshape(shape))
            off += n * dtype.itemsize
        interp.invoke()
        for idx in out_idx:
            out += np.ascontiguousarray(interp.get_tensor(idx)).tobytes()
    return bytes(out)


def run_runner_shard(runner, model_path, arena_mib, data, count):
    with tempfile.TemporaryDirectory() as tmp:
        inp, outp = os.path.join(tmp, "in.bin"), os.path.join(tmp, "out.bin")
        with open(inp, "wb") as f:
            f.write(data)
        r = subprocess.run([runner, model_path, inp, str(count), outp, str(arena_mib)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{runner} failed ({r.returncode}): {r.stderr.strip()}")
        with open(outp, "rb") as f:
            return f.read()


def sharded(fn, data, count, rec, jobs):
    """fn(shard_bytes, shard_count) over `jobs` contiguous shards of the
    records, each in its own process; the outputs joined in order."""
    per = -(-count // jobs)
    shards = [(s, min(per, count - s)) for s in range(0, count, per)]
    with cf.ProcessPoolExecutor(max_workers=len(shards)) as ex:
        futs = [ex.submit(fn, data[s * rec:(s + n) * rec], n) for s, n in shards]
        return b"".join(f.result() for f in futs)


def diff(a, b, outs, count):
    """Differing bytes/records, the largest difference and argmax changes."""
    if len(a) != len(b):
        return {"error": f"sizes differ: {len(a)} vs {len(b)} bytes"}
    dtype = outs[0][1]
    rec_elems = record_bytes(outs) // dtype.itemsize
    x = np.frombuffer(a, dtype).astype(np.int64).reshape(count, rec_elems)
    y = np.frombuffer(b, dtype).astype(np.int64).reshape(count, rec_elems)
    ne = x != y
    return {
        "differing_bytes": int(np.count_nonzero(np.frombuffer(a, np.uint8) != np.frombuffer(b, np.uint8))),
        "differing_values": int(np.count_nonzero(ne)),
        "differing_records": int(np.count_nonzero(ne.any(axis=1))),
        "max_abs_diff": int(np.abs(x - y).max()) if ne.any() else 0,
        "differing_argmax": int(np.count_nonzero(x.argmax(axis=1) != y.argmax(axis=1))),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="the .tflite file")
    ap.add_argument("--build-dir", required=True, help="OUT_DIR of bench/tflm/build.sh")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--random", type=int, metavar="N", help="N seeded random input records")
    src.add_argument("--inputs", help="raw input records (with --count)")
    ap.add_argument("--count", type=int, help="how many records --inputs holds")
    ap.add_argument("--seed", type=int, default=0, help="seed of --random (default 0)")
    ap.add_argument("--extra", action="append", default=[], metavar="NAME=FILE",
                    help="more raw outputs to compare (e.g. octet=octet_logits.bin)")
    ap.add_argument("--litert", action="store_true",
                    help="also run LiteRT (ai-edge-litert): " + ", ".join(LITERT_RESOLVERS))
    ap.add_argument("--jobs", type=int, default=1, help="processes per engine (default 1)")
    ap.add_argument("--arena-mib", type=int, default=64, help="arena of every TFLM interpreter in MiB (default 64)")
    ap.add_argument("--save-dir", help="also write each engine's raw outputs here")
    ap.add_argument("--out", help="write the JSON here too (default: stdout only)")
    a = ap.parse_args()

    arena_bytes = a.arena_mib << 20  # the same arena for pip and the runners
    ins, outs = tensor_details(a.model, arena_bytes)
    if not outs or len({t for _, t in outs}) != 1:
        sys.exit(f"error: {a.model}: need outputs of one dtype, got {outs}")
    rec_in, rec_out = record_bytes(ins), record_bytes(outs)
    if a.random is not None:
        if a.random < 1:
            sys.exit("error: --random must be at least 1")
        count = a.random
        data = np.random.default_rng(a.seed).integers(0, 256, count * rec_in, dtype=np.uint8).tobytes()
    else:
        if a.count is None or a.count < 1:
            sys.exit("error: --inputs needs --count N (N >= 1)")
        count = a.count
        with open(a.inputs, "rb") as f:
            data = f.read()
        if len(data) != count * rec_in:
            sys.exit(f"error: {a.inputs} holds {len(data)} bytes; {count} records of "
                     f"{rec_in} bytes need {count * rec_in}")
    jobs = max(1, min(a.jobs, count))

    results, seconds = {}, {}
    t = time.time()
    results["pip"] = sharded(functools.partial(run_pip_shard, a.model, ins, arena_bytes), data, count, rec_in, jobs)
    seconds["pip"] = round(time.time() - t, 2)
    for v in VARIANTS:
        runner = os.path.join(a.build_dir, v, "runner")
        if not os.access(runner, os.X_OK):
            sys.exit(f"error: {runner} missing: run bench/tflm/build.sh first")
        t = time.time()
        results[v] = sharded(functools.partial(run_runner_shard, runner, a.model, a.arena_mib),
                             data, count, rec_in, jobs)
        seconds[v] = round(time.time() - t, 2)
    engine_errors = {}
    if a.litert:
        for name, resolver in LITERT_RESOLVERS.items():
            t = time.time()
            try:
                results[name] = sharded(functools.partial(run_litert_shard, a.model, resolver, ins),
                                        data, count, rec_in, jobs)
            except (ValueError, RuntimeError) as e:  # LiteRT refuses some TFLM-only models
                engine_errors[name] = str(e).split(".")[0]
                continue
            seconds[name] = round(time.time() - t, 2)
    for spec in a.extra:
        name, _, path = spec.partition("=")
        if not name or not path or name in results:
            sys.exit(f"error: --extra wants a new NAME=FILE, got '{spec}'")
        with open(path, "rb") as f:
            results[name] = f.read()
        if len(results[name]) != count * rec_out:
            sys.exit(f"error: {path} holds {len(results[name])} bytes; {count} records of "
                     f"{rec_out} output bytes need {count * rec_out}")
    if a.save_dir:
        os.makedirs(a.save_dir, exist_ok=True)
        for name, b in results.items():
            with open(os.path.join(a.save_dir, f"{name}.bin"), "wb") as f:
                f.write(b)

    with open(a.model, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(a.build_dir, "BUILD_INFO")) as f:
        build_info = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
    report = {
        "model": os.path.basename(a.model), "model_sha256": sha,
        "inputs": f"random seed {a.seed}" if a.random is not None else os.path.basename(a.inputs),
        "records": count, "input_record_bytes": rec_in, "output_record_bytes": rec_out,
        "output_dtype": str(outs[0][1]), "tflm_commit": build_info.get("tflm_commit"),
        "pip_tflite_micro": _pip_version(), "seconds": seconds, "engine_errors": engine_errors,
        "pairs": {f"{p} vs {q}": diff(results[p], results[q], outs, count)
                  for p, q in itertools.combinations(results, 2)},
    }
    text = json.dumps(report, indent=2)
    print(text)
    if a.out:
        tmp = a.out + ".partial"
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, a.out)


def _pip_version():
    from importlib.metadata import version

    return version("tflite-micro")


if __name__ == "__main__":
    main()
