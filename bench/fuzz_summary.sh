#!/usr/bin/env bash
# Summarises the logs of bench/fuzz_run.sh (one per fuzz target) as JSON: target, command,
# machine, dates, seconds, executions, corpus at start and end, crashes.
#
#   bash bench/fuzz_summary.sh /tmp/fuzz_parse.log /tmp/fuzz_parse_fixed.log > bench/results/fuzz_parse.json
set -euo pipefail
python3 - "$@" <<'EOF'
import json, re, sys

def summary(path):
    text = open(path, errors="replace").read()
    meta = dict(re.findall(r"^# (\w+)=(.*)$", text, re.M))
    stat = {k: float(v) for k, v in re.findall(r"^stat::(\w+):\s+([\d.]+)", text, re.M)}
    done = re.search(r"^Done (\d+) runs in (\d+) second", text, re.M)
    status = re.findall(r"^#(\d+)\s+(?:INITED|NEW|REDUCE|pulse|DONE).*?corp: (\d+)/(\S+)", text, re.M)
    inited = re.search(r"^#\d+\s+INITED.*?corp: (\d+)/(\S+)", text, re.M)
    crash_markers = ["ERROR: AddressSanitizer", "ERROR: libFuzzer", "panicked at",
                     "Test unit written to", "SUMMARY: ", "deadly signal", "out-of-memory",
                     "timeout after"]
    crashes = sum(text.count(m) for m in ("Test unit written to",))
    finished = "ended" in meta
    return {
        "target": meta.get("target"),
        "command": meta.get("command"),
        "machine": meta.get("machine"),
        "commit": meta.get("commit"),
        "started": meta.get("started"),
        "ended": meta.get("ended"),
        "finished": finished,
        "exit_status": int(meta["exit"]) if "exit" in meta else None,
        "seconds_requested": int(meta.get("seconds", 0)),
        "seconds_run": int(done.group(2)) if done else None,
        "executions": int(stat.get("number_of_executed_units", 0)) or (int(done.group(1)) if done else (int(status[-1][0]) if status else None)),
        "executions_per_s": stat.get("average_exec_per_sec"),
        "new_units_added": int(stat["new_units_added"]) if "new_units_added" in stat else None,
        "peak_rss_mb": stat.get("peak_rss_mb"),
        "corpus_start_files": int(meta.get("corpus_start_files", 0)),
        "corpus_start_bytes": int(meta.get("corpus_start_bytes", 0)),
        "corpus_after_load": {"units": int(inited.group(1)), "size": inited.group(2)} if inited else None,
        "corpus_end_files": int(meta["corpus_end_files"]) if "corpus_end_files" in meta else None,
        "corpus_end_bytes": int(meta["corpus_end_bytes"]) if "corpus_end_bytes" in meta else None,
        "corpus_last_status": {"units": int(status[-1][1]), "size": status[-1][2]} if status else None,
        "crashes": crashes,
        "crash_markers_found": [m for m in crash_markers if m in text],
        "artifacts": int(meta["artifacts"]) if "artifacts" in meta else None,
    }

runs = [summary(p) for p in sys.argv[1:]]
print(json.dumps({
    "what": "cargo fuzz on the .o8 parser (runtime/fuzz): Model::parse, then a scalar and a "
            "fastest-kernel run of every model it accepts; parse_fixed repairs file_len and the "
            "CRC first, so its inputs reach the validation behind the CRC check",
    "written_by": "bench/fuzz_summary.sh from the logs of bench/fuzz_run.sh",
    "runs": runs,
    "total_crashes": sum(r["crashes"] for r in runs),
}, indent=2))
EOF
