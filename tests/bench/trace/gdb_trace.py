# SPDX-License-Identifier: GPL-2.0
"""gdb side of `make bench-trace`: run as `gdb -batch -x gdb_trace.py`.

Environment: TRACE_LOG (the VM's console log), TRACE_OUT (JSON to write),
TRACE_CLIENT (rs, ref or nvidia: NVIDIA's nvidia-peermem, which has only
the invalidating half), TRACE_PORT (QEMU's gdbstub on 127.0.0.1).

Waits for the guest's TRACE-READY line, reads the client module's symbols
from its KSYM lines, breaks on the seven callbacks the PeerDirect core calls
(acquire, get_pages, dma_map, get_page_size, dma_unmap, put_pages, release)
and single-steps each call from its entry to its return, recording every
instruction address. Then (TRACE-READY-INVALIDATE: the client reloaded in
invalidating mode, its symbols in KSYM2 lines) it single-steps the same
seven callbacks of one more round trip, then the client's free callback
during one cudaFree of a registered 64 KiB buffer. QEMU's gdbstub keeps interrupts and timers off while
stepping, so the trace is the call's own path (and everything it calls:
the provider, the allocator, locks).
"""
import json
import os
import re
import time

import gdb

PHASES = ("acquire", "get_pages", "dma_map", "get_page_size", "dma_unmap", "put_pages", "release")
# NVIDIA's nvidia-peermem.c: its invalidating client's seven callbacks.
NVIDIA_ENTRIES = {"nv_mem_acquire": "acquire", "nv_mem_get_pages": "get_pages",
                  "nv_dma_map": "dma_map", "nv_mem_get_page_size": "get_page_size",
                  "nv_dma_unmap": "dma_unmap", "nv_mem_put_pages": "put_pages",
                  "nv_mem_release": "release"}
MASK = (1 << 64) - 1


def wait_ready(log, mark="TRACE-READY ", timeout_s=300):
    end = time.time() + timeout_s
    while time.time() < end:
        try:
            with open(log, errors="replace") as f:
                text = f.read()
        except OSError:
            text = ""
        if mark in text:
            return text
        time.sleep(0.2)
    raise gdb.GdbError("the guest never printed %s" % mark.strip())


def free_callback_entry(symbols, client):
    """Address of the client's free callback (the NVIDIA P2P one)."""
    for addr, name in symbols:
        if client == "ref" and name == "ref_free_cb":
            return addr
        if client == "nvidia" and name == "nv_get_p2p_free_callback":
            return addr
        # Rust v0 mangling of p2p::free_callback::<Registration>
        if client == "rs" and re.search(r"3p2p13free_callback", name):
            return addr
    raise gdb.GdbError("no symbol for the free callback")


def step_to_return(pc):
    """Single-steps from a call's first instruction to its return address;
    returns every instruction address executed."""
    ret = int(gdb.parse_and_eval("*(unsigned long *)%d" % reg("rsp"))) & MASK
    rips = [pc]
    while True:
        gdb.execute("stepi", to_string=True)
        pc = reg("pc")
        if pc == ret:
            return rips
        rips.append(pc)


def entry_points(symbols, client, mode="Persistent"):
    """Address -> phase of the client's seven callbacks (the Rust client's
    adapter of `mode`: Persistent or Invalidating)."""
    entries = {}
    for addr, name in symbols:
        if client == "ref":
            if name.startswith("ref_") and name[4:] in PHASES:
                entries[addr] = name[4:]
            continue
        if client == "nvidia":
            if name in NVIDIA_ENTRIES:
                entries[addr] = NVIDIA_ENTRIES[name]
            continue
        # Rust v0 mangling of client::Adapter<Persistent>::<phase>
        for phase in PHASES:
            if re.search(r"Adapter\w*%sE%d%sB" % (mode, len(phase), phase), name):
                entries[addr] = phase
    if client == "rs" and mode != "Persistent":
        # The two adapters differ in acquire only: the compiler keeps one
        # copy of each other callback, the Persistent one.
        persistent = entry_points(symbols, client)
        have = set(entries.values())
        entries.update({a: p for a, p in persistent.items() if p not in have})
    if client == "rs":
        # An adapter that only passes its pointer on (release) may be folded
        # into the trait method it calls: the table then points at
        # <mode as PeerMemoryClient>::<phase>.
        have = set(entries.values())
        for addr, name in symbols:
            for phase in set(PHASES) - have:
                if re.search(r"%sNt\w*16PeerMemoryClient%d%s$" % (mode, len(phase), phase), name):
                    entries.setdefault(addr, phase)
    return entries


def trace_round_trip(entries):
    """Single-steps every call into the client from the next acquire to
    its release; returns them."""
    missing = set(PHASES) - set(entries.values())
    if missing:
        raise gdb.GdbError("no symbol for the callbacks %s" % sorted(missing))
    for addr in entries:
        gdb.execute("break *0x%x" % addr, to_string=True)
    calls = []
    while not calls or calls[-1]["phase"] != "release":
        gdb.execute("continue", to_string=True)
        pc = reg("pc")
        if pc not in entries:
            raise gdb.GdbError("stopped outside the callbacks at 0x%x" % pc)
        rips = step_to_return(pc)
        calls.append({"phase": entries[rips[0]], "rips": rips})
    gdb.execute("delete", to_string=True)
    return calls


def reg(name):
    return int(gdb.parse_and_eval("$" + name)) & MASK


def main():
    log = os.environ["TRACE_LOG"]
    client = os.environ["TRACE_CLIENT"]
    gdb.execute("set architecture i386:x86-64", to_string=True)
    gdb.execute("set pagination off")
    symbols, calls = [], []
    if client != "nvidia":
        text = wait_ready(log)
        symbols = [(int(a, 16), n) for a, n in re.findall(r"KSYM ([0-9a-f]+) \w (\S+)", text)]
        entries = entry_points(symbols, client)
        gdb.execute("target remote 127.0.0.1:%s" % os.environ["TRACE_PORT"], to_string=True)
        calls = trace_round_trip(entries)
        gdb.execute("detach", to_string=True)

    # The client reloaded in invalidating mode: a round trip, then the free
    # callback.
    text = wait_ready(log, "TRACE-READY-INVALIDATE")
    symbols2 = [(int(a, 16), n) for a, n in re.findall(r"KSYM2 ([0-9a-f]+) \w (\S+)", text)]
    entry = free_callback_entry(symbols2, client)
    gdb.execute("target remote 127.0.0.1:%s" % os.environ["TRACE_PORT"], to_string=True)
    calls_inv = trace_round_trip(entry_points(symbols2, client, "Invalidating"))
    gdb.execute("break *0x%x" % entry, to_string=True)
    gdb.execute("continue", to_string=True)
    pc = reg("pc")
    if pc != entry:
        raise gdb.GdbError("stopped outside the free callback at 0x%x" % pc)
    invalidation = {"phase": "free_callback", "rips": step_to_return(pc), "symbols": symbols2}
    gdb.execute("delete", to_string=True)
    gdb.execute("detach", to_string=True)
    with open(os.environ["TRACE_OUT"], "w") as f:
        json.dump({"client": client, "symbols": symbols, "calls": calls,
                   "invalidating": {"calls": calls_inv, "symbols": symbols2},
                   "invalidation": invalidation}, f)


main()
