#!/usr/bin/env python3
"""Instructions per function of a Cortex-M firmware under QEMU: runs the ELF once with QEMU's
execution log (`-d in_asm,exec,nochain`: every translation block as translated, then every
execution of one) and sums, per symbol of `arm-none-eabi-nm -n`, the executions of each block
times its instructions. Under `-icount shift=0` these are the instructions bench/mcu.sh counts,
so the figures add up to its totals (the firmware's own runs included: bench/mcu.sh's firmware
runs every image several times).

    python3 bench/mcu_profile.py ELF [--board mps2-an386] [--top 25] [--blocks PATTERN]

ELF: e.g. target/mcu/NAME/firmware-thumbv7em-none-eabihf.elf after `bash bench/mcu.sh`
(octet), or target/mcu_mlperf_tiny/NAME/peer_release.elf (the TFLM peer). --blocks PATTERN
also lists the hottest translation blocks of the functions whose names contain PATTERN (their
addresses to read with `arm-none-eabi-objdump -d --start-address`). The log is large (about
1.5 GB for DS-CNN's firmware) and is written to a temporary file, removed at the end.
"""
import argparse
import bisect
import collections
import os
import shutil
import subprocess
import sys
import tempfile


def symbols(elf):
    out = subprocess.run(["arm-none-eabi-nm", "-C", "--defined-only", "-n", elf],
                         capture_output=True, text=True, check=True).stdout
    syms = []
    for line in out.splitlines():
        f = line.split(" ", 2)
        if len(f) == 3 and f[1] in "tTwW":
            syms.append((int(f[0], 16) & ~1, f[2]))
    return syms


def profile(log):
    """Instructions per translation block and executions per block start."""
    size, runs = {}, collections.Counter()
    start, n = None, 0
    with open(log, errors="replace") as f:
        for line in f:
            if line.startswith("IN:"):
                start, n = None, 0
            elif line.startswith("0x") and ":" in line[:12]:
                start = int(line[:10], 16) if start is None else start
                n += 1
            elif line.startswith("Trace"):
                if start is not None:
                    size[start] = n
                    start = None
                runs[int(line.split("[")[1].split("/")[1], 16)] += 1
    return size, runs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("elf")
    ap.add_argument("--board", default="mps2-an386")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--blocks", metavar="PATTERN")
    a = ap.parse_args()
    for tool in ("qemu-system-arm", "arm-none-eabi-nm"):
        if not shutil.which(tool):
            sys.exit(f"mcu_profile: {tool} not found (apt-get install qemu-system-arm binutils-arm-none-eabi)")
    if not os.path.isfile(a.elf):
        sys.exit(f"mcu_profile: {a.elf}: no such file")
    syms = symbols(a.elf)
    starts = [s for s, _ in syms]
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "exec.log")
        run = subprocess.run(
            ["qemu-system-arm", "-M", a.board, "-nographic", "-monitor", "none", "-serial", "none",
             "-semihosting-config", "enable=on,target=native", "-icount", "shift=0,sleep=off",
             "-kernel", a.elf, "-d", "in_asm,exec,nochain", "-D", log],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            timeout=1800)
        if run.returncode != 0:
            sys.exit(f"mcu_profile: the firmware exited with {run.returncode}: {run.stderr[-500:]}")
        size, runs = profile(log)

    def name(pc):
        i = bisect.bisect_right(starts, pc) - 1
        return syms[i][1] if i >= 0 else "?"

    per_fn = collections.Counter()
    for pc, k in runs.items():
        per_fn[name(pc)] += k * size.get(pc, 0)
    total = sum(per_fn.values())
    for fn, v in per_fn.most_common(a.top):
        print(f"{v:13,} {100 * v / total:5.1f}%  {fn[:110]}")
    print(f"{total:13,} instructions in all")
    if a.blocks:
        hot = sorted(((k * size.get(pc, 0), pc, k) for pc, k in runs.items()
                      if a.blocks in name(pc)), reverse=True)
        for v, pc, k in hot[:a.top]:
            print(f"  block {pc:08x}: {k:,} runs × {size.get(pc, 0)} instructions = {v:,}")


if __name__ == "__main__":
    main()
