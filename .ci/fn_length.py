#!/usr/bin/env python3
"""Fails when a function outside tests is longer than LIMIT lines (default 120), counting
from its `fn` line to its closing brace, comments included: a function that long does
several jobs (issue 17). Reads the Rust files git tracks, less vendor/, tests, benches and
fuzz targets, and each file's `mod tests` onwards.

usage: python3 .ci/fn_length.py [LIMIT]
"""
import os
import re
import subprocess
import sys

limit = int(sys.argv[1]) if len(sys.argv) > 1 else 120
root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                      check=True).stdout.strip()
files = subprocess.run(["git", "ls-files", "*.rs"], cwd=root, capture_output=True, text=True,
                       check=True).stdout.split()
skip = re.compile(r"^(vendor/|tests/|benches/)|/(tests|benches|fuzz)/")
fn = re.compile(r'\s*(pub(\([^)]*\))?\s+)?(const\s+)?(unsafe\s+)?(extern "C"\s+)?fn\s+(\w+)')


def code(line):
    """The line without its comment, strings and chars (whose braces do not count)."""
    line = re.sub(r"//.*", "", line)
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    return re.sub(r"'(\\.|[^'\\])'", "''", line)


long = []
for f in files:
    if skip.search(f):
        continue
    lines = open(os.path.join(root, f), encoding="utf-8").read().split("\n")
    end = next((i for i, l in enumerate(lines) if re.match(r"\s*mod tests\s*\{", l)), len(lines))
    for i in range(end):
        m = fn.match(lines[i])
        if not m:
            continue
        depth, started, j = 0, False, i
        while j < len(lines):
            s = code(lines[j])
            for c in s:
                if c == "{":
                    depth, started = depth + 1, True
                elif c == "}":
                    depth -= 1
            if (started and depth == 0) or (not started and s.rstrip().endswith(";")):
                break
            j += 1
        if started and j - i + 1 > limit:
            long.append(f"{f}:{i + 1}: fn {m.group(6)} is {j - i + 1} lines (limit {limit})")
for l in long:
    print(l)
if long:
    print(f"{len(long)} function(s) over {limit} lines: split them at their seams", file=sys.stderr)
    sys.exit(1)
