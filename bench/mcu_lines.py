"""The lines the C firmwares under QEMU print (capi/examples/firmware's board code: octet's C
firmware, the CMSIS-NN peer of bench/mcu_peer.sh, the TFLM + CMSIS-NN runner of
bench/mcu_mlperf_tiny.sh), read back: one parser for all of them."""


def parse(path):
    """A firmware's output: "logits I: …" (per record), "ticks run I T", "differ I N" (output
    bytes that differ from the host's, where the firmware compares them), "ticks op I J T NAME"
    (per op), "arena BYTES", "calibration INSNS TICKS" and "stack BYTES"."""
    logits, runs, differ, ops, arena, cal, stack = {}, {}, {}, {}, None, None, None
    for line in open(path):
        f = line.split()
        if not f:
            continue
        if f[0] == "logits":
            logits[int(f[1].rstrip(":"))] = [int(v) for v in f[2:]]
        elif f[:2] == ["ticks", "run"]:
            runs[int(f[2])] = int(f[3])
        elif f[0] == "differ":
            differ[int(f[1])] = int(f[2])
        elif f[:2] == ["ticks", "op"]:
            ops.setdefault(int(f[3]), {"op": " ".join(f[5:]), "ticks": []})["ticks"].append(int(f[4]))
        elif f[0] == "arena":
            arena = int(f[1])
        elif f[0] == "calibration":
            cal = int(f[1]) / int(f[2])
        elif f[0] == "stack":
            stack = int(f[1])
    n = len(runs)
    return {"logits": [logits[i] for i in sorted(logits)], "ticks": [runs[i] for i in range(n)],
            "differ": [differ.get(i) for i in range(n)], "ops": [ops[j] for j in sorted(ops)],
            "arena": arena, "insn_per_tick": cal, "stack": stack}
