/* SPDX-License-Identifier: GPL-2.0 */
/*
 * C helpers of nvidia_peermem_rs: thin wrappers over static inline kernel
 * functions and macros that bindgen cannot bind. Nothing else lives here.
 */
#ifndef PEERMEM_RS_SHIM_H
#define PEERMEM_RS_SHIM_H

#include <linux/fs.h>
#include <linux/types.h>

struct dentry;
struct device;
struct pci_dev;
struct scatterlist;
struct nvidia_p2p_page_table;

/*
 * debugfs_create_file() (a macro choosing the full or the short fops form
 * since 6.13, a function before: bindgen sees only the latter).
 */
struct dentry *pm_shim_debugfs_create_file(const char *name, umode_t mode,
					   struct dentry *parent, void *data,
					   const struct file_operations *fops);

/* to_pci_dev() for a PCI device; NULL for anything else. */
struct pci_dev *pm_shim_to_pci_dev(struct device *dev);

/* sg_set_page(sg, NULL, len, 0) plus sg_dma_address/sg_dma_len = addr/len. */
void pm_shim_sg_set_dma(struct scatterlist *sg, dma_addr_t addr,
			unsigned int len);

/*
 * The first @n entries of @sgl (a table from sg_alloc_table) as
 * pm_shim_sg_set_dma(sg, @addrs[i], @len) sets them, in one call: the walk
 * (sg_next) and the stores of every entry without two calls per entry.
 * Returns the number of entries filled (fewer than @n if the table is
 * shorter).
 */
unsigned int pm_shim_sg_fill_pages(struct scatterlist *sgl, const u64 *addrs,
				   unsigned int n, unsigned int len);

/* sg_dma_address(sg) and sg_dma_len(sg). */
dma_addr_t pm_shim_sg_dma_address(struct scatterlist *sg);
unsigned int pm_shim_sg_dma_len(struct scatterlist *sg);

/*
 * The persistent P2P calls exist from NVIDIA driver 535 on. They are weak
 * references, so the module loads on 515/525 too: whether both are there.
 */
bool pm_shim_p2p_has_persistent_api(void);

/*
 * Pins (unpins) persistently with what the loaded driver offers, in one
 * call: nvidia_p2p_get_pages_persistent() (put_pages_persistent()) where
 * the persistent calls exist, else nvidia_p2p_get_pages() with no free
 * callback (nvidia_p2p_put_pages()), the persistent pin of 515/525.
 */
int pm_shim_p2p_pin_persistent(u64 virtual_address, u64 length,
			       struct nvidia_p2p_page_table **page_table);
int pm_shim_p2p_unpin_persistent(u64 virtual_address,
				 struct nvidia_p2p_page_table *page_table);

/*
 * Which optional symbols the PeerDirect core exports, the sign of its
 * generation (weak references, resolved when this module loads; the core
 * is loaded before, since ib_register_peer_memory_client is a hard one):
 * ib_get_peer_private_data (MLNX_OFED 4.1 .. 5.0), ib_get_peer_client
 * (4.0 .. 5.0), ib_umem_activate_invalidation_notifier (every MLNX_OFED
 * from 4.0) and ib_umem_stop_invalidation_notifier (5.4-3.0.3.0 and later).
 */
bool pm_shim_core_has_private_data(void);
bool pm_shim_core_has_peer_client(void);
#ifdef PM_SHIM_CORE_EXPORTS
/*
 * Those symbols, for shim.c only. Their addresses are read, never called,
 * so they are declared as bare symbols: their prototypes use MOFED's
 * private types and differ across releases.
 */
extern const char ib_get_peer_private_data[] __weak;
extern const char ib_get_peer_client[] __weak;
extern const char ib_umem_activate_invalidation_notifier[] __weak;
extern const char ib_umem_stop_invalidation_notifier[] __weak;
#endif
bool pm_shim_core_has_activate_notifier(void);
bool pm_shim_core_has_stop_notifier(void);

/*
 * The calling process as NVIDIA's driver tells processes apart
 * (current->tgid): it keeps the pins of nvidia_p2p_get_pages() per process.
 */
pid_t pm_shim_current_tgid(void);

/* The calling task's own id (current->pid): which thread, not which process. */
pid_t pm_shim_current_pid(void);

/*
 * An RCU read-side critical section around the last thing a free callback
 * does. The kernel frees a module's text only after a grace period, which
 * cannot end while a CPU is inside one.
 */
void pm_shim_rcu_read_lock(void);
void pm_shim_rcu_read_unlock(void);

/*
 * The free callbacks' wait queue: a free callback that must wait
 * for a thread reading its page table sleeps until @done(@arg) returns
 * true, uninterruptibly; @done runs again after every wake-up. The caller
 * has looked once already (@done returned false; the common case,
 * nothing to wait for, makes no call here), so this looks first once
 * queued for a wake-up (__wait_event), as wait_event's second look.
 * A reader that ends while an invalidation runs wakes every waiter (each
 * looks at its own registration again).
 */
void pm_shim_free_wait(bool (*done)(void *arg), void *arg);
void pm_shim_free_wake(void);

/*
 * Registrations alive: a failed init waits until none is left.
 * The count is Rust's (kmod/wait.rs), the bits of @count_mask of @live
 * (the others are flags), with a base of 1 that only the waiter drops
 * while it waits: Rust decrements it inline while that leaves it above 0,
 * and calls put_last for the decrement that may reach 0. It reaches 0 only
 * under a spinlock the waiter checks it under, so the waiter cannot return
 * (and the module go) before the last put has woken it.
 */
void pm_shim_live_put_last(atomic_t *live, int count_mask);
void pm_shim_live_wait_none(atomic_t *live, int count_mask);

/*
 * Delay points of the test build (Kbuild PEERMEM_TEST_DELAYS=1), for the VM
 * scenarios that hold one of the module's own race windows open; the
 * product has none (kmod/test_delay.rs calls nothing there). The module
 * parameters test_delay (a point's name) and test_delay_ms arm one point
 * for one pass: it says so in the kernel log and busy-waits, so a point
 * may sit inside an RCU read-side section or under a spinlock, until a
 * write to test_delay_release or the end of test_delay_ms.
 */
enum pm_test_point {
	/* The free callback, after it dropped a reference that was not the last. */
	PM_TEST_FREE_CALLBACK_TAIL = 1,
	/* acquire, between its look at a failed load's decline and its module reference. */
	PM_TEST_ACQUIRE_MODULE_REF = 2,
};

void pm_shim_test_delay(unsigned int point);

/*
 * The test build's witness of dma_map's reading phase, the one a free
 * callback waits for while it holds the driver lock: a lock that lockdep
 * sees held from begin to end, and ordered once after memory reclaim
 * (reclaim may wait for the driver lock, which a callback holds while it
 * waits for the reader). An allocation that may reclaim inside the phase
 * is then a circular dependency lockdep reports. Nothing in the product.
 */
void pm_shim_test_reading_begin(void);
void pm_shim_test_reading_end(void);

/*
 * Whether a module named @name is loaded (or loading): its kobject in the
 * modules' kset, which THIS_MODULE (a macro) leads to, as /sys/module/@name.
 */
bool pm_shim_module_loaded(const char *name);

/* The spinlock that serialises the table of live registrations. */
void pm_shim_registry_lock(void);
void pm_shim_registry_unlock(void);

/*
 * KUnit test module only (defined in shim_kunit.c): a referenced PCI device
 * of the machine (any), or NULL; and dropping that reference.
 */
struct device *pm_shim_test_get_pci_device(void);
void pm_shim_test_put_pci_device(struct device *dev);

/*
 * KUnit test module only: where the C compiler puts what the kernel crate's
 * bindings describe too, to check them against: the sizes of spinlock_t and
 * sg_table, and the offsets in task_struct of se, rt, dl, stats, policy,
 * sched_info, tasks, mm and pid (@field 0 to 8).
 */
unsigned long pm_shim_test_task_offset(unsigned int field);
unsigned long pm_shim_test_spinlock_size(void);
unsigned long pm_shim_test_sg_table_size(void);

#endif /* PEERMEM_RS_SHIM_H */
