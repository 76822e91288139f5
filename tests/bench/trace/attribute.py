#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Attribute `make bench-trace`'s instruction traces to functions.

    attribute.py VMLINUX_NM RUST_TRACE REF_TRACE OUT_JSON

VMLINUX_NM is `nm` of the kernel the traces ran on (booted with nokaslr);
the traces are gdb_trace.py's JSON. Every traced instruction counts for
the function that contains it (its own instructions, not its callees').
Prints the instructions per call into each client and, for the whole
round trip, every function whose count differs between the two clients;
then the same for the free callback of one invalidation (64 KiB,
invalidating mode); writes them all to OUT_JSON.
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


def kernel_symbols(nm_path):
    syms = []
    with open(nm_path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[1] in "tTwW":
                syms.append((int(parts[0], 16), parts[2]))
    return syms


def namer(syms):
    """pc -> the name of the function containing it."""
    syms = sorted(syms)
    addrs = [a for a, _ in syms]

    def name_of(pc):
        i = bisect.bisect_right(addrs, pc) - 1
        return syms[i][1] if i >= 0 else "0x%x" % pc
    return name_of


def readable(per_function):
    names = demangle(sorted(per_function))
    out = collections.Counter()
    for n, k in per_function.items():
        out[names[n]] += k
    return out


def load(nm_path, trace_path):
    """(instructions per phase, per function) of the round trip, and
    (instructions, per function) of the free callback."""
    with open(trace_path) as f:
        trace = json.load(f)
    kernel = kernel_symbols(nm_path)
    name_of = namer(kernel + [(a, n) for a, n in trace["symbols"]])
    per_phase = collections.defaultdict(int)
    per_function = collections.Counter()
    for call in trace["calls"]:
        per_phase[call["phase"]] += len(call["rips"])
        per_function.update(name_of(pc) for pc in call["rips"])
    inval = trace["invalidation"]
    # The client was reloaded for it: its own symbols.
    name_of = namer(kernel + [(a, n) for a, n in inval["symbols"]])
    inval_fn = collections.Counter(name_of(pc) for pc in inval["rips"])
    return per_phase, readable(per_function), len(inval["rips"]), readable(inval_fn)


def differences(rs_fn, ref_fn, title):
    print(title)
    names = sorted(set(rs_fn) | set(ref_fn), key=lambda n: (-(rs_fn[n] - ref_fn[n]), n))
    rows = []
    for n in names:
        d = rs_fn[n] - ref_fn[n]
        if d:
            rows.append({"function": n, "rust": rs_fn[n], "ref": ref_fn[n], "diff": d})
            print(f"  {n[:90]:<90} {rs_fn[n]:>6} {ref_fn[n]:>6} {d:>+6}")
    return rows


def main():
    nm, rs_path, ref_path, out = sys.argv[1:5]
    rs_phase, rs_fn, rs_inval, rs_inval_fn = load(nm, rs_path)
    ref_phase, ref_fn, ref_inval, ref_inval_fn = load(nm, ref_path)
    print("Instructions per call into the client (64 KiB, persistent), single-stepped:")
    print(f"  {'call':<14} {'rust':>6} {'ref':>6} {'diff':>6}")
    for p in PHASES:
        print(f"  {p:<14} {rs_phase[p]:>6} {ref_phase[p]:>6} {rs_phase[p] - ref_phase[p]:>+6}")
    rs_total, ref_total = sum(rs_phase.values()), sum(ref_phase.values())
    print(f"  {'cycle':<14} {rs_total:>6} {ref_total:>6} {rs_total - ref_total:>+6}")
    rows = differences(rs_fn, ref_fn, "\nWhere they differ, by function (its own instructions, whole round trip):")
    print("\nThe free callback of one invalidation (64 KiB, invalidating mode; the core's"
          " invalidate included), single-stepped:")
    print(f"  {'free_callback':<14} {rs_inval:>6} {ref_inval:>6} {rs_inval - ref_inval:>+6}")
    inval_rows = differences(rs_inval_fn, ref_inval_fn,
                             "\nWhere they differ, by function (the free callback):")
    with open(out, "w") as f:
        json.dump({"per_call": {p: {"rust": rs_phase[p], "ref": ref_phase[p]} for p in PHASES},
                   "cycle": {"rust": rs_total, "ref": ref_total},
                   "by_function": rows,
                   "free_callback": {"rust": rs_inval, "ref": ref_inval},
                   "free_callback_by_function": inval_rows}, f, indent=1)


if __name__ == "__main__":
    main()
