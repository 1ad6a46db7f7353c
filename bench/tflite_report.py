#!/usr/bin/env python3
"""Merges bench/tflite_check.py's per-model JSON files into one result file, with the machine,
the commit, the command and the package versions, written atomically; prints one line per
model and interpreter. Used by bench/tflite_equivalence.sh and bench/tflm_equivalence.sh.

    python3 bench/tflite_report.py OUT "WHAT" "COMMAND" NAME=FILE.json [NAME=FILE.json ...]
"""

import json
import os
import platform
import subprocess
import sys


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    out, what, command, parts = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    models = {}
    for p in parts:
        name, path = p.split("=", 1)
        with open(path) as f:
            models[name] = json.load(f)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    with open("/proc/cpuinfo") as f:
        info = f.read()
    cpu = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")),
               platform.processor())
    flags = next((l.split(":", 1)[1].split() for l in info.splitlines() if l.startswith("flags")), [])
    features = [f for f in ("avx2", "avx_vnni", "avx512_vnni", "amx_int8") if f in flags]
    result = {
        "what": what,
        "machine": {"cpu": cpu, "features": features, "cores": os.cpu_count(), "system": platform.platform()},
        "commit": commit + ("+uncommitted" if dirty else ""),
        "command": command,
        "versions": next(iter(models.values()))["versions"],
        "models": models,
    }
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, out)
    for name, m in models.items():
        for kind, r in m["interpreters"].items():
            print(f"{name} {kind}: {r['differing_bytes']} differing bytes in {r['differing_images']} of "
                  f"{r['images']} inputs, max |diff| {r['max_abs_difference']}, {r['images_per_s']} inputs/s")


if __name__ == "__main__":
    main()
