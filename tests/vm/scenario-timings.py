#!/usr/bin/env python3
"""Where a VM run's time goes: per scenario, per boot phase.

    scenario-timings.py RESULTS_DIR [TOP]

Reads RESULTS_DIR/<suite>/console.log (the PEERMEM-TIMING and
PEERMEM-SCENARIO-END ... secs= lines guest-init prints), writes
RESULTS_DIR/scenario-timings.json and prints the TOP (default 12) slowest
scenarios and each suite's boot / tests / leak-check split, in guest seconds.
"""
import glob
import json
import os
import re
import sys

END = re.compile(r"PEERMEM-SCENARIO-END (\S+) rc=(-?\d+) secs=(\d+)")
TIMING = re.compile(r"PEERMEM-TIMING (\S+) uptime=([\d.]+)")


def suite_timings(log_path):
    scenarios, marks = [], {}
    with open(log_path, errors="replace") as log:
        for line in log:
            m = END.search(line)
            if m:
                scenarios.append({"id": m.group(1), "secs": int(m.group(3))})
                continue
            m = TIMING.search(line)
            if m:
                marks[m.group(1)] = float(m.group(2))
    phases = {}
    if "init" in marks:
        phases["boot"] = round(marks["init"])
        if "tests-done" in marks:
            phases["tests"] = round(marks["tests-done"] - marks["init"])
            if "leak-check-done" in marks:
                phases["leak_check"] = round(marks["leak-check-done"] - marks["tests-done"])
    return {"phases": phases, "scenarios": scenarios}


def main():
    results = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    out = {}
    for log in sorted(glob.glob(os.path.join(results, "*", "console.log"))):
        suite_dir = os.path.dirname(log)
        t = suite_timings(log)
        for key, name in (("wall", "seconds"), ("host_cpu", "cpu-seconds")):
            try:
                with open(os.path.join(suite_dir, name)) as f:
                    t[key] = int(f.read())
            except (OSError, ValueError):
                pass
        out[os.path.basename(suite_dir)] = t
    with open(os.path.join(results, "scenario-timings.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    rows = [(s["secs"], suite, s["id"]) for suite, t in out.items() for s in t["scenarios"]]
    rows.sort(reverse=True)
    print(f"  slowest scenarios (guest seconds; all in {results}/scenario-timings.json):")
    for secs, suite, sid in rows[:top]:
        print(f"    {secs:5d}s  {suite:<24} {sid}")
    print("  per boot: wall / host CPU of its QEMU / guest boot / tests / final leak check (s):")
    for suite, t in sorted(out.items(), key=lambda kv: -kv[1].get("wall", 0)):
        p = t["phases"]
        print(f"    {suite:<34} {t.get('wall', '-'):>5} {t.get('host_cpu', '-'):>5} "
              f"{p.get('boot', '-'):>4} {p.get('tests', '-'):>5} {p.get('leak_check', '-'):>4}")
    boot = sum(t["phases"].get("boot", 0) for t in out.values())
    leak = sum(t["phases"].get("leak_check", 0) for t in out.values())
    print(f"  {len(out)} boots: {boot}s booting, {leak}s in the final leak checks")


if __name__ == "__main__":
    main()
