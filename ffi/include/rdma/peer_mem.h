/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The PeerDirect peer-memory ABI of MLNX_OFED / DOCA-OFED ib_core, declared
 * from the published contract (shared/CONTRACT.md section 1) for builds that
 * have no OFED tree. With OFED_DIR set, the build uses OFED's own header.
 *
 * Layouts (x86_64): struct peer_memory_client is 136 bytes; the legacy
 * (MLNX_OFED <= 5.0) struct and struct peer_memory_client_ex are 152 bytes.
 */
#ifndef PEERMEM_RS_RDMA_PEER_MEM_H
#define PEERMEM_RS_RDMA_PEER_MEM_H

#include <linux/types.h>
#include <linux/scatterlist.h>

#define IB_PEER_MEMORY_NAME_MAX 64
#define IB_PEER_MEMORY_VER_MAX 16

/* Set in version[IB_PEER_MEMORY_VER_MAX - 1] to announce the extended client. */
#define PEER_MEMORY_CLIENT_EX_MARK 1
/* The core does not call dma_unmap/put_pages from inside an invalidation. */
#define PEER_MEM_INVALIDATE_UNMAPS (1 << 0)

struct device;

struct peer_memory_client {
	char name[IB_PEER_MEMORY_NAME_MAX];
	char version[IB_PEER_MEMORY_VER_MAX];
	int (*acquire)(unsigned long addr, size_t size,
		       void *peer_mem_private_data, char *peer_mem_name,
		       void **client_context);
	int (*get_pages)(unsigned long addr, size_t size, int write, int force,
			 struct sg_table *sg_head, void *client_context,
			 u64 core_context);
	int (*dma_map)(struct sg_table *sg_head, void *client_context,
		       struct device *dma_device, int dmasync, int *nmap);
	int (*dma_unmap)(struct sg_table *sg_head, void *client_context,
			 struct device *dma_device);
	void (*put_pages)(struct sg_table *sg_head, void *client_context);
	unsigned long (*get_page_size)(void *client_context);
	void (*release)(void *client_context);
};

/* MLNX_OFED 5.0 and older (4.9 LTS): two more callbacks after release. */
struct peer_memory_client_legacy {
	struct peer_memory_client client;
	void *(*get_context_private_data)(u64 peer_id);
	void (*put_context_private_data)(void *context);
};

/* MLNX_OFED 5.1 and newer: opt-in extension, overlays the legacy tail. */
struct peer_memory_client_ex {
	struct peer_memory_client client;
	size_t ex_size;
	u32 flags;
};

typedef int (*invalidate_peer_memory)(void *reg_handle, u64 core_context);

void *ib_register_peer_memory_client(const struct peer_memory_client *peer_client,
				     invalidate_peer_memory *invalidate_callback);
void ib_unregister_peer_memory_client(void *reg_handle);

#endif /* PEERMEM_RS_RDMA_PEER_MEM_H */
