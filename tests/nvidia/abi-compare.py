#!/usr/bin/env python3
"""Compare two outputs of tests/nvidia/abi-probe.c: ours (ffi/include) and
one NVIDIA release's headers.

    abi-compare.py OURS.txt THEIRS.txt NAME

Prints the test's verdict object (JSON, one line) on stdout and each
difference on stderr; exits 1 when the headers differ in anything the module
relies on.

Every line must be equal, except where NVIDIA's headers are of an older
generation that the module knows and handles at run time:
  - nvidia_p2p_page_table: ffi/include declares the newest layout (version
    0x00020000, 40 bytes, a trailing flags word at 32). A page-table version
    0x0001xxxx (>= 0x00010002, drivers up to 575) must be the 32-byte layout
    without flags: the module reads flags only from a version-2 page table
    (kmod/p2p.rs PageTableLayout). Any other major is a layout the module
    cannot read.
  - NVIDIA_P2P_FLAGS_DEFAULT: absent before 570 (ffi/shim.c defines it as 0
    then); where NVIDIA's header has it, the value must be ours.
"""
import json
import sys

PT_GENERATION = {
    "nvidia_p2p_page_table",
    "nvidia_p2p_page_table.flags",
    "NVIDIA_P2P_PAGE_TABLE_VERSION",
    "NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE",
}
# The version-1 page table (up to 575.x), as kmod/abi.rs pins it.
PT_V1 = {
    "nvidia_p2p_page_table": "size=32 align=8",
    "nvidia_p2p_page_table.flags": "absent",
}


def parse(path):
    facts = {}
    for line in open(path):
        key, _, value = line.strip().partition(" ")
        if key:
            facts[key] = value
    return facts


def main():
    ours_path, theirs_path, name = sys.argv[1:4]
    ours, theirs = parse(ours_path), parse(theirs_path)
    diffs, notes = [], []

    def differ(key, what):
        diffs.append(f"{key}: {what}")

    for key, value in ours.items():
        if value.startswith("type=") and value != "type=as-ffi-include":
            differ(key, f"ffi/include itself declares it as the probe does not expect ({value})")
    for key in sorted(set(ours) | set(theirs)):
        if key in PT_GENERATION or key == "NVIDIA_P2P_FLAGS_DEFAULT":
            continue
        if key not in theirs:
            differ(key, f"absent from NVIDIA {name}'s headers (ffi/include: {ours[key]})")
        elif key not in ours:
            differ(key, f"absent from ffi/include (NVIDIA {name}: {theirs[key]})")
        elif ours[key] != theirs[key]:
            differ(key, f"ffi/include {ours[key]}, NVIDIA {name} {theirs[key]}")

    # The page-table generation.
    pt = theirs.get("NVIDIA_P2P_PAGE_TABLE_VERSION", "absent")
    try:
        version = int(pt.split("value=", 1)[1], 16)
    except (IndexError, ValueError):
        version = None
    if version is not None and version >> 16 == 1 and version >= 0x00010002:
        notes.append(f"page table version {version:#010x}: the 32-byte layout without flags")
        for key, want in PT_V1.items():
            if theirs.get(key) != want:
                differ(key, f"NVIDIA {name} {theirs.get(key, 'absent')}, but a version-1 "
                       f"page table is {want} (kmod/p2p.rs PageTableLayout::V1)")
        cacheable = theirs.get("NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE", "absent")
        if cacheable not in ("absent", ours.get("NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE")):
            differ("NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE",
                   f"ffi/include {ours.get('NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE')}, "
                   f"NVIDIA {name} {cacheable}")
    elif version is not None and version >> 16 == 2:
        notes.append(f"page table version {version:#010x}: the 40-byte layout with flags")
        for key in sorted(PT_GENERATION):
            if ours.get(key) != theirs.get(key):
                differ(key, f"ffi/include {ours.get(key, 'absent')}, NVIDIA {name} "
                       f"{theirs.get(key, 'absent')}")
    else:
        differ("NVIDIA_P2P_PAGE_TABLE_VERSION",
               f"NVIDIA {name} {pt}: the module reads page tables of version 0x0001xxxx "
               "(>= 0x00010002) and 0x0002xxxx only (kmod/p2p.rs PageTableLayout)")

    flags = theirs.get("NVIDIA_P2P_FLAGS_DEFAULT", "absent")
    if flags == "absent":
        notes.append("NVIDIA_P2P_FLAGS_DEFAULT absent (ffi/shim.c uses 0)")
    elif flags != "value=0x0" or ours.get("NVIDIA_P2P_FLAGS_DEFAULT") != flags:
        differ("NVIDIA_P2P_FLAGS_DEFAULT",
               f"ffi/include {ours.get('NVIDIA_P2P_FLAGS_DEFAULT')}, NVIDIA {name} {flags} "
               "(ffi/shim.c falls back to 0)")

    for d in diffs:
        print(f"nvidia-abi: {name}: {d}", file=sys.stderr)
    checked = len(set(ours) | set(theirs))
    print(json.dumps({
        "name": f"nvidia-abi:{name}:headers",
        "passed": not diffs,
        "reason": "" if not diffs else f"{len(diffs)} difference(s) from ffi/include: "
                  + "; ".join(d.split(":", 1)[0] for d in diffs),
        "figures": {"facts_compared": str(checked), "notes": "; ".join(notes)},
        "evidence": diffs[:20],
    }))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
