#!/usr/bin/env python3
"""Checks make test's shared pool of QEMUs (tests/run-vm-suites.sh,
PEERMEM_VM_SLOTS) from its log: never more suites at once than the pool
has slots, and every suite the run started there (each kernel's) both
started and ended in it.

    pool-check.py SLOTS_DIR EXPECTED_SUITES JSON_OUT

SLOTS_DIR holds `log` ("<epoch> start|end <kernel>/<suite>" lines) and
`jobs` (the pool's size). Writes a verdict (suite "vm-pool", one test) to
JSON_OUT and prints one line; exit 1 if the check failed.
"""
import json
import os
import sys


def check(slots_dir, expected):
    try:
        jobs = int(open(os.path.join(slots_dir, "jobs")).read())
        lines = open(os.path.join(slots_dir, "log")).read().split("\n")
    except (OSError, ValueError) as e:
        return False, f"no pool log ({e})", {}
    events = []
    for line in lines:
        if not line.strip():
            continue
        t, what, name = line.split()
        # An end at the same instant as a start counts first.
        events.append((float(t), 0 if what == "end" else 1, what, name))
    events.sort()
    now = peak = 0
    started, ended = set(), set()
    for _, _, what, name in events:
        if what == "start":
            now += 1
            started.add(name)
            peak = max(peak, now)
        else:
            now -= 1
            ended.add(name)
    figures = {"slots": str(jobs), "peak": str(peak), "suites": str(len(started))}
    if peak > jobs:
        return False, f"{peak} suites ran at once in a pool of {jobs}", figures
    if len(started) != expected or started != ended:
        return False, (f"{len(started)} suites started and {len(ended)} ended "
                       f"in the pool, {expected} expected"), figures
    return True, "", figures


def main():
    slots_dir, expected, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    ok, reason, figures = check(slots_dir, expected)
    json.dump({"suite": "vm-pool", "tests": [{
        "name": "harness:vm-pool", "passed": ok, "reason": reason,
        "figures": figures, "evidence": []}]}, open(out, "w"))
    print(f"vm pool: {'ok' if ok else 'FAIL'}: peak {figures.get('peak', '?')} "
          f"of {figures.get('slots', '?')} slots, {figures.get('suites', '?')} "
          f"suites{': ' + reason if reason else ''}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
