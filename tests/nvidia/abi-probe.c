// SPDX-License-Identifier: GPL-2.0
/*
 * ABI probe: one line for each size, offset, constant and prototype that
 * nvidia_peermem_rs relies on in <nvidia/nv-p2p.h> and <rdma/peer_mem.h>, as
 * the header set on the include path declares it. tests/nvidia/abi-oracle.sh
 * compiles it against ffi/include and against each NVIDIA release's own
 * headers and compares the lines.
 *
 * Compiled for the host with -nostdinc: the only headers are the ones under
 * test and tests/nvidia/abi-stub (<linux/types.h>, <linux/scatterlist.h>,
 * the x86_64 kernel's types). The structures hold only fixed-width integers,
 * enums and pointers, laid out by the same x86_64 ABI as in the kernel.
 */
#include <linux/types.h>

/* At file scope, as the kernel's headers declare them before these. */
struct device;
struct pci_dev;

#include <nvidia/nv-p2p.h>
#include <rdma/peer_mem.h>

int printf(const char *fmt, ...);

#define SIZE(s)								\
	printf("%s size=%zu align=%zu\n", #s, sizeof(struct s),		\
	       _Alignof(struct s))
#define FIELD(s, f)							\
	printf("%s.%s offset=%zu size=%zu\n", #s, #f,			\
	       __builtin_offsetof(struct s, f), sizeof(((struct s *)0)->f))
#define CONST(c) printf("%s value=0x%llx\n", #c, (unsigned long long)(c))
#define ABSENT(c) printf("%s absent\n", #c)
/* Whether @e has the type @t, as the kernel's C sees it. */
#define TYPE(name, e, t)						\
	printf("%s type=%s\n", name,					\
	       __builtin_types_compatible_p(__typeof__(e), t) ?		\
	       "as-ffi-include" : "DIFFERENT")
#define CB(s, f, t) TYPE(#s "." #f, ((struct s *)0)->f, t)
#define FN(f, t) TYPE(#f, f, t)

#define NV_VERSION_MAJOR(v) (((v) >> 16) & 0xffff)

int main(void)
{
	/* nv-p2p.h: the structures the module reads. */
	SIZE(nvidia_p2p_page);
	FIELD(nvidia_p2p_page, physical_address);
	FIELD(nvidia_p2p_page, registers);

	SIZE(nvidia_p2p_page_table);
	FIELD(nvidia_p2p_page_table, version);
	FIELD(nvidia_p2p_page_table, page_size);
	FIELD(nvidia_p2p_page_table, pages);
	FIELD(nvidia_p2p_page_table, entries);
	FIELD(nvidia_p2p_page_table, gpu_uuid);
#if NV_VERSION_MAJOR(NVIDIA_P2P_PAGE_TABLE_VERSION) >= 2
	FIELD(nvidia_p2p_page_table, flags);
#else
	printf("nvidia_p2p_page_table.flags absent\n");
#endif

	SIZE(nvidia_p2p_dma_mapping);
	FIELD(nvidia_p2p_dma_mapping, version);
	FIELD(nvidia_p2p_dma_mapping, page_size_type);
	FIELD(nvidia_p2p_dma_mapping, entries);
	FIELD(nvidia_p2p_dma_mapping, dma_addresses);
	FIELD(nvidia_p2p_dma_mapping, private);
	FIELD(nvidia_p2p_dma_mapping, pci_dev);

	printf("enum_nvidia_p2p_page_size_type size=%zu\n",
	       sizeof(enum nvidia_p2p_page_size_type));
	CONST(NVIDIA_P2P_PAGE_SIZE_4KB);
	CONST(NVIDIA_P2P_PAGE_SIZE_64KB);
	CONST(NVIDIA_P2P_PAGE_SIZE_128KB);
	CONST(NVIDIA_P2P_PAGE_SIZE_COUNT);
	CONST(NVIDIA_P2P_PAGE_TABLE_VERSION);
	CONST(NVIDIA_P2P_DMA_MAPPING_VERSION);
#ifdef NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE
	CONST(NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE);
#else
	ABSENT(NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE);
#endif
#ifdef NVIDIA_P2P_FLAGS_DEFAULT
	CONST(NVIDIA_P2P_FLAGS_DEFAULT);
#else
	ABSENT(NVIDIA_P2P_FLAGS_DEFAULT);
#endif

	/* nv-p2p.h: the calls the module makes. */
	FN(nvidia_p2p_get_pages,
	   int (u64, u32, u64, u64, struct nvidia_p2p_page_table **,
		void (*)(void *), void *));
	FN(nvidia_p2p_put_pages,
	   int (u64, u32, u64, struct nvidia_p2p_page_table *));
	FN(nvidia_p2p_get_pages_persistent,
	   int (u64, u64, struct nvidia_p2p_page_table **, u32));
	FN(nvidia_p2p_put_pages_persistent,
	   int (u64, struct nvidia_p2p_page_table *, u32));
	FN(nvidia_p2p_dma_map_pages,
	   int (struct pci_dev *, struct nvidia_p2p_page_table *,
		struct nvidia_p2p_dma_mapping **));
	FN(nvidia_p2p_dma_unmap_pages,
	   int (struct pci_dev *, struct nvidia_p2p_page_table *,
		struct nvidia_p2p_dma_mapping *));
	FN(nvidia_p2p_free_page_table, int (struct nvidia_p2p_page_table *));
	FN(nvidia_p2p_free_dma_mapping, int (struct nvidia_p2p_dma_mapping *));

	/* peer_mem.h: the client the module registers. */
	CONST(IB_PEER_MEMORY_NAME_MAX);
	CONST(IB_PEER_MEMORY_VER_MAX);
	CONST(PEER_MEM_INVALIDATE_UNMAPS);
	SIZE(peer_memory_client);
	FIELD(peer_memory_client, name);
	FIELD(peer_memory_client, version);
	FIELD(peer_memory_client, acquire);
	FIELD(peer_memory_client, get_pages);
	FIELD(peer_memory_client, dma_map);
	FIELD(peer_memory_client, dma_unmap);
	FIELD(peer_memory_client, put_pages);
	FIELD(peer_memory_client, get_page_size);
	FIELD(peer_memory_client, release);
	CB(peer_memory_client, acquire,
	   int (*)(unsigned long, size_t, void *, char *, void **));
	CB(peer_memory_client, get_pages,
	   int (*)(unsigned long, size_t, int, int, struct sg_table *, void *,
		   u64));
	CB(peer_memory_client, dma_map,
	   int (*)(struct sg_table *, void *, struct device *, int, int *));
	CB(peer_memory_client, dma_unmap,
	   int (*)(struct sg_table *, void *, struct device *));
	CB(peer_memory_client, put_pages, void (*)(struct sg_table *, void *));
	CB(peer_memory_client, get_page_size, unsigned long (*)(void *));
	CB(peer_memory_client, release, void (*)(void *));
	SIZE(peer_memory_client_ex);
	FIELD(peer_memory_client_ex, client);
	FIELD(peer_memory_client_ex, ex_size);
	FIELD(peer_memory_client_ex, flags);
	TYPE("invalidate_peer_memory", invalidate_peer_memory,
	     int (*)(void *, u64));
	FN(ib_register_peer_memory_client,
	   void *(const struct peer_memory_client *, invalidate_peer_memory *));
	FN(ib_unregister_peer_memory_client, void (void *));
	return 0;
}
