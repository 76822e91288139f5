/* SPDX-License-Identifier: GPL-2.0 */
/* Stand-in for the kernel's <linux/scatterlist.h> (see types.h). */
#ifndef PEERMEM_ABI_STUB_SCATTERLIST_H
#define PEERMEM_ABI_STUB_SCATTERLIST_H

#include <linux/types.h>

struct scatterlist;
struct sg_table;

#endif
