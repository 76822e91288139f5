#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Attribute `make bench-trace`'s instruction traces to functions.

    attribute.py VMLINUX_NM RUST_TRACE REF_TRACE OUT_JSON [NVIDIA_TRACE]

VMLINUX_NM is `nm` of the kernel the traces ran on (booted with nokaslr);
the traces are gdb_trace.py's JSON. Every traced instruction counts for
the function that contains it (its own instructions, not its callees').
Prints the instructions per call into each client and, for the whole
round trip, every function whose count differs between the two clients
(persistent mode, Rust against the C reference client); then the
invalidating round trip and the free callback of one invalidation
(64 KiB) of every client, and where the Rust client differs from NVIDIA's
nvidia-peermem (from the reference client without NVIDIA_TRACE); writes
them all to OUT_JSON.
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


def round_trip(name_of, calls):
    """(instructions per phase, per function) of a round trip."""
    per_phase = collections.defaultdict(int)
    per_function = collections.Counter()
    for call in calls:
        per_phase[call["phase"]] += len(call["rips"])
        per_function.update(name_of(pc) for pc in call["rips"])
    return per_phase, readable(per_function)


def load(nm_path, trace_path):
    """{"persistent": (per phase, per function) of the persistent round trip
    (empty for NVIDIA's client), "invalidating": the same of the
    invalidating one, "free_callback": (instructions, per function)}."""
    with open(trace_path) as f:
        trace = json.load(f)
    kernel = kernel_symbols(nm_path)
    name_of = namer(kernel + [(a, n) for a, n in trace["symbols"]])
    out = {"persistent": round_trip(name_of, trace["calls"])}
    # The client was reloaded for the invalidating half: its own symbols.
    inval = trace["invalidation"]
    name_of = namer(kernel + [(a, n) for a, n in inval["symbols"]])
    out["invalidating"] = round_trip(name_of, trace.get("invalidating", {}).get("calls", []))
    inval_fn = collections.Counter(name_of(pc) for pc in inval["rips"])
    out["free_callback"] = (len(inval["rips"]), readable(inval_fn))
    return out


def per_call_table(title, clients, phases):
    """Prints instructions per call of each client; returns the JSON rows."""
    print(title)
    print(f"  {'call':<14}" + "".join(f" {c:>7}" for c in clients))
    rows = {}
    for p in PHASES:
        print(f"  {p:<14}" + "".join(f" {phases[c][p]:>7}" for c in clients))
        rows[p] = {c: phases[c][p] for c in clients}
    totals = {c: sum(phases[c].values()) for c in clients}
    print(f"  {'cycle':<14}" + "".join(f" {totals[c]:>7}" for c in clients))
    rows["cycle"] = totals
    return rows


def differences(rs_fn, ref_fn, title, other="ref"):
    print(title)
    names = sorted(set(rs_fn) | set(ref_fn), key=lambda n: (-(rs_fn[n] - ref_fn[n]), n))
    rows = []
    for n in names:
        d = rs_fn[n] - ref_fn[n]
        if d:
            rows.append({"function": n, "rust": rs_fn[n], other: ref_fn[n], "diff": d})
            print(f"  {n[:90]:<90} {rs_fn[n]:>6} {ref_fn[n]:>6} {d:>+6}")
    return rows


def main():
    nm, rs_path, ref_path, out = sys.argv[1:5]
    traces = {"rust": load(nm, rs_path), "ref": load(nm, ref_path)}
    if len(sys.argv) > 5:
        traces["nvidia"] = load(nm, sys.argv[5])
    base = "nvidia" if "nvidia" in traces else "ref"
    rs, ref = traces["rust"], traces["ref"]
    report = {}
    report["per_call"] = per_call_table(
        "Instructions per call into the client (64 KiB, persistent), single-stepped:",
        ["rust", "ref"], {c: traces[c]["persistent"][0] for c in ("rust", "ref")})
    report["by_function"] = differences(
        rs["persistent"][1], ref["persistent"][1],
        "\nWhere they differ, by function (its own instructions, whole round trip):")
    clients = list(traces)
    report["invalidating_per_call"] = per_call_table(
        "\nInstructions per call into the client (64 KiB, invalidating), single-stepped:",
        clients, {c: traces[c]["invalidating"][0] for c in clients})
    report["invalidating_by_function"] = differences(
        rs["invalidating"][1], traces[base]["invalidating"][1],
        f"\nWhere rust and {base} differ, by function (invalidating round trip):", base)
    print("\nThe free callback of one invalidation (64 KiB, invalidating mode; the core's"
          " invalidate included), single-stepped:")
    print(f"  {'':<14}" + "".join(f" {c:>7}" for c in clients))
    print(f"  {'free_callback':<14}" + "".join(f" {traces[c]['free_callback'][0]:>7}"
                                              for c in clients))
    report["free_callback"] = {c: traces[c]["free_callback"][0] for c in clients}
    report["free_callback_by_function"] = differences(
        rs["free_callback"][1], traces[base]["free_callback"][1],
        f"\nWhere rust and {base} differ, by function (the free callback):", base)
    # (the names of earlier runs' JSON: cycle = the persistent round trip)
    report["cycle"] = report["per_call"]["cycle"]
    with open(out, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
