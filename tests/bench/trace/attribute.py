#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Attribute `make bench-trace`'s instruction traces to functions.

    attribute.py VMLINUX_NM RUST_TRACE REF_TRACE OUT_JSON

VMLINUX_NM is `nm` of the kernel the traces ran on (booted with nokaslr);
the traces are gdb_trace.py's JSON. Every traced instruction counts for
the function that contains it (its own instructions, not its callees').
Prints the instructions per call into each client and, for the whole
round trip, every function whose count differs between the two clients;
writes both to OUT_JSON.
"""
import bisect
import collections
import json
import re
import subprocess
import sys

PHASES = ("acquire", "get_pages", "dma_map", "get_page_size", "dma_unmap", "put_pages", "release")


def demangle(names):
    """Rust v0 and C names as people read them (binutils' c++filt), without
    crate hashes and the module's own crate prefix."""
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True,
                         text=True, check=True).stdout.splitlines()
    tidy = [re.sub(r"\[[0-9a-f]+\]", "", n).replace("nvidia_peermem_rs::", "") for n in out]
    return dict(zip(names, tidy))


def load(nm_path, trace_path):
    with open(trace_path) as f:
        trace = json.load(f)
    syms = []
    with open(nm_path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[1] in "tTwW":
                syms.append((int(parts[0], 16), parts[2]))
    syms += [(a, n) for a, n in trace["symbols"]]
    syms.sort()
    addrs = [a for a, _ in syms]

    def name_of(pc):
        i = bisect.bisect_right(addrs, pc) - 1
        return syms[i][1] if i >= 0 else "0x%x" % pc

    per_phase = collections.defaultdict(int)
    per_function = collections.Counter()
    for call in trace["calls"]:
        per_phase[call["phase"]] += len(call["rips"])
        per_function.update(name_of(pc) for pc in call["rips"])
    names = demangle(sorted(per_function))
    readable = collections.Counter()
    for n, k in per_function.items():
        readable[names[n]] += k
    return per_phase, readable


def main():
    nm, rs_path, ref_path, out = sys.argv[1:5]
    rs_phase, rs_fn = load(nm, rs_path)
    ref_phase, ref_fn = load(nm, ref_path)
    print("Instructions per call into the client (64 KiB, persistent), single-stepped:")
    print(f"  {'call':<14} {'rust':>6} {'ref':>6} {'diff':>6}")
    for p in PHASES:
        print(f"  {p:<14} {rs_phase[p]:>6} {ref_phase[p]:>6} {rs_phase[p] - ref_phase[p]:>+6}")
    rs_total, ref_total = sum(rs_phase.values()), sum(ref_phase.values())
    print(f"  {'cycle':<14} {rs_total:>6} {ref_total:>6} {rs_total - ref_total:>+6}")
    print("\nWhere they differ, by function (its own instructions, whole round trip):")
    names = sorted(set(rs_fn) | set(ref_fn), key=lambda n: (-(rs_fn[n] - ref_fn[n]), n))
    rows = []
    for n in names:
        d = rs_fn[n] - ref_fn[n]
        if d:
            rows.append({"function": n, "rust": rs_fn[n], "ref": ref_fn[n], "diff": d})
            print(f"  {n[:90]:<90} {rs_fn[n]:>6} {ref_fn[n]:>6} {d:>+6}")
    with open(out, "w") as f:
        json.dump({"per_call": {p: {"rust": rs_phase[p], "ref": ref_phase[p]} for p in PHASES},
                   "cycle": {"rust": rs_total, "ref": ref_total},
                   "by_function": rows}, f, indent=1)


if __name__ == "__main__":
    main()
