/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Input of the bindgen rule in Kbuild: every C declaration the Rust crate
 * needs beyond the kernel crate's own bindings. <rdma/peer_mem.h> and
 * <nvidia/nv-p2p.h> come from OFED_DIR / NVIDIA_SRC when set, otherwise from
 * ffi/include (our declarations of the published ABI).
 */
#include <linux/debugfs.h>
#include <linux/scatterlist.h>
#include <linux/seq_file.h>
#include <rdma/peer_mem.h>
#include <nvidia/nv-p2p.h>

#include "shim.h"

