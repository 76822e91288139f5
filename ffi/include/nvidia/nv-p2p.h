/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The NVIDIA P2P kernel API exported by nvidia.ko, declared from the
 * published contract (shared/CONTRACT.md section 2) for builds that have no
 * NVIDIA driver source. With NVIDIA_SRC set, the build uses the driver's own
 * nv-p2p.h.
 */
#ifndef PEERMEM_RS_NV_P2P_H
#define PEERMEM_RS_NV_P2P_H

#include <linux/types.h>

struct pci_dev;

enum nvidia_p2p_page_size_type {
	NVIDIA_P2P_PAGE_SIZE_4KB = 0,
	NVIDIA_P2P_PAGE_SIZE_64KB = 1,
	NVIDIA_P2P_PAGE_SIZE_128KB = 2,
	NVIDIA_P2P_PAGE_SIZE_COUNT
};

struct nvidia_p2p_page {
	u64 physical_address;
	union nvidia_p2p_request_registers {
		struct {
			u32 wreqmb_h;
			u32 rreqmb_h;
			u32 rreqmb_0;
			u32 reserved[3];
		} fermi;
	} registers;
};

/*
 * Page table versions, as the driver stamps them (NVIDIA's open kernel
 * modules, kernel-open/nvidia/nv-p2p.h):
 *   0x00010002  up to 575.x: 32 bytes, ends with gpu_uuid;
 *   0x00020000  580.65.06 and later: 40 bytes, adds a trailing flags word.
 * This header describes the newest layout. A client must read flags only
 * from a page table whose major version is 2 or more: an older driver
 * allocates 32 bytes.
 */
#define NVIDIA_P2P_PAGE_TABLE_VERSION 0x00020000
#define NVIDIA_P2P_DMA_MAPPING_VERSION 0x00020003

/* Page table flags (version 0x00020000 and later). */
#define NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE 0x1

#define NVIDIA_P2P_VERSION_MAJOR(v) (((v) >> 16) & 0xffff)
#define NVIDIA_P2P_VERSION_MINOR(v) ((v) & 0xffff)
#define NVIDIA_P2P_VERSION_COMPATIBLE(p, v)                                   \
	(NVIDIA_P2P_VERSION_MAJOR((p)->version) == NVIDIA_P2P_VERSION_MAJOR(v) && \
	 NVIDIA_P2P_VERSION_MINOR((p)->version) >= NVIDIA_P2P_VERSION_MINOR(v))

struct nvidia_p2p_page_table {
	u32 version;
	u32 page_size; /* enum nvidia_p2p_page_size_type */
	struct nvidia_p2p_page **pages;
	u32 entries;
	u8 *gpu_uuid;
	u32 flags;	/* version 0x00020000 and later only */
};

struct nvidia_p2p_dma_mapping {
	u32 version;
	enum nvidia_p2p_page_size_type page_size_type;
	u32 entries;
	u64 *dma_addresses;
	void *private;
	struct pci_dev *pci_dev;
};

/*
 * Flags of the persistent calls. nvidia_p2p_get_pages_persistent() and
 * nvidia_p2p_put_pages_persistent() exist from driver 535 on; before that
 * (515, 525) nvidia_p2p_get_pages() with a NULL free callback pins
 * persistently and nvidia_p2p_put_pages() unpins. From 535 on a NULL free
 * callback is refused with -EINVAL.
 */
#define NVIDIA_P2P_FLAGS_DEFAULT 0

int nvidia_p2p_get_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 u64 length, struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data);
int nvidia_p2p_put_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 struct nvidia_p2p_page_table *page_table);
int nvidia_p2p_get_pages_persistent(u64 virtual_address, u64 length,
				    struct nvidia_p2p_page_table **page_table,
				    u32 flags);
int nvidia_p2p_put_pages_persistent(u64 virtual_address,
				    struct nvidia_p2p_page_table *page_table,
				    u32 flags);
int nvidia_p2p_dma_map_pages(struct pci_dev *peer,
			     struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping);
int nvidia_p2p_dma_unmap_pages(struct pci_dev *peer,
			       struct nvidia_p2p_page_table *page_table,
			       struct nvidia_p2p_dma_mapping *dma_mapping);
int nvidia_p2p_free_page_table(struct nvidia_p2p_page_table *page_table);
int nvidia_p2p_free_dma_mapping(struct nvidia_p2p_dma_mapping *dma_mapping);

#define NVIDIA_P2P_PAGE_SIZE_64KB_BYTES 0x10000ULL

#endif /* PEERMEM_RS_NV_P2P_H */
