/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Stand-in for the kernel's <linux/types.h> when tests/nvidia/abi-probe.c is
 * compiled for the host: the few types nv-p2p.h and peer_mem.h use, as the
 * x86_64 kernel defines them (u64 and uint64_t are unsigned long long there,
 * so the prototypes of both header sets compare as the kernel sees them).
 */
#ifndef PEERMEM_ABI_STUB_TYPES_H
#define PEERMEM_ABI_STUB_TYPES_H

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef u8 uint8_t;
typedef u32 uint32_t;
typedef u64 uint64_t;
typedef __SIZE_TYPE__ size_t;
typedef _Bool bool;

#endif
