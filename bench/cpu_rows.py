"""What the CPU benchmark merges share: the CPU's model and SIMD features, and the int8
runtime's rows from criterion's estimates (benches/infer.rs, benches/mlperf_tiny.rs: benchmark
ids `int8-<kernels>/threads<T>` or `<engine>/threads-<T>`, the batch as the value)."""
import glob, json, os, platform


def cpu():
    """(model name, SIMD features) of this machine."""
    model, flags = platform.processor(), set()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith(("flags", "Features")):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    simd = [f for f in ("avx2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512vbmi", "avx_vnni",
                        "amx_int8", "asimd", "asimddp", "i8mm") if f in flags]
    return model, simd


def machine():
    """One line naming the machine, its cores (those this process may run on, where pinned)
    and CPU."""
    n, used = os.cpu_count(), len(os.sched_getaffinity(0))
    cores = f"{n} cores" if used == n else f"{used} of {n} cores (pinned)"
    return f"{platform.machine()}, {cores}, {cpu()[0]}"


def criterion_rows(crit):
    """One row per benchmark under criterion's directory: batch-1 median latency in ms,
    batch-64 median throughput in inputs/s."""
    rows = []
    for est in glob.glob(os.path.join(crit, "*", "*", "*", "new", "estimates.json")):
        bench = json.load(open(os.path.join(os.path.dirname(est), "benchmark.json")))
        model, func = bench["group_id"], bench["function_id"]
        batch = int(bench["value_str"])
        median_s = json.load(open(est))["median"]["point_estimate"] * 1e-9
        engine, threads = func.split("/")
        kernels = None
        if engine.startswith("int8-"):
            engine, kernels = "int8", engine[len("int8-"):]
        rows.append(dict(engine=engine, kernels=kernels, model=model,
                         threads=threads.replace("threads", "").lstrip("-"), batch=batch,
                         batch1_ms=round(median_s * 1e3, 4) if batch == 1 else None,
                         batch64_img_s=round(batch / median_s, 1) if batch == 64 else None))
    return rows


def find(rows, **kw):
    return [r for r in rows if all(str(r.get(k)) == str(v) for k, v in kw.items())]


def first(rows, key):
    return next((r[key] for r in rows if r.get(key)), None)


def ratio(a, b):
    return round(a / b, 3) if a and b else None


def best_of(rows, keys):
    """One row per distinct `keys` over several runs (interleaved, on a shared machine): each
    figure its best run's (lowest batch1_ms, highest batch64_img_s), repeats pooled."""
    out = []
    for r in rows:
        same = find(out, **{k: r.get(k) for k in keys})
        if not same:
            out.append(dict(r))
            continue
        best = same[0]
        for key, pick in (("batch1_ms", min), ("batch64_img_s", max)):
            if r.get(key) is not None:
                best[key] = r[key] if best.get(key) is None else pick(best[key], r[key])
        if "repeats" in r:
            best["repeats"] = best.get("repeats", []) + r["repeats"]
    return out
