// SPDX-License-Identifier: GPL-2.0
/*
 * C helpers of nvidia_peermem_rs (see shim.h). Linked into the same .ko as
 * the Rust crate; nothing here is exported.
 */
#include <linux/debugfs.h>
#include <linux/kobject.h>
#include <linux/lockdep.h>
#include <linux/math64.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/rcupdate.h>
#include <linux/scatterlist.h>
#include <linux/sched.h>
#include <linux/sched/mm.h>
#include <linux/spinlock.h>
#include <linux/timekeeping.h>
#include <linux/wait.h>
#include <nvidia/nv-p2p.h>

#define PM_SHIM_CORE_EXPORTS
#include "shim.h"

/*
 * The flags of the persistent calls. NVIDIA's nv-p2p.h names the default
 * (0) only in newer drivers (570); the headers of 535.261.03, 550.163.01 and
 * 555.58.02 lack the name while their persistent calls take flags and refuse
 * any but 0.
 */
#ifndef NVIDIA_P2P_FLAGS_DEFAULT
#define NVIDIA_P2P_FLAGS_DEFAULT 0
#endif

/* Weak: absent before driver 535 (see shim.h). */
extern int nvidia_p2p_get_pages_persistent(u64 virtual_address, u64 length,
					   struct nvidia_p2p_page_table **page_table,
					   u32 flags) __weak;
extern int nvidia_p2p_put_pages_persistent(u64 virtual_address,
					   struct nvidia_p2p_page_table *page_table,
					   u32 flags) __weak;

static DEFINE_SPINLOCK(pm_registry_lock);
static DECLARE_WAIT_QUEUE_HEAD(pm_free_wq);
static DECLARE_WAIT_QUEUE_HEAD(pm_live_wq);
/* Takes the live count to 0 (atomic_dec_and_lock); the waiter checks under it. */
static DEFINE_SPINLOCK(pm_live_lock);

struct dentry *pm_shim_debugfs_create_file(const char *name, umode_t mode,
					   struct dentry *parent, void *data,
					   const struct file_operations *fops)
{
	return debugfs_create_file(name, mode, parent, data, fops);
}

pid_t pm_shim_current_tgid(void)
{
	return current->tgid;
}

pid_t pm_shim_current_pid(void)
{
	return current->pid;
}

void pm_shim_rcu_read_lock(void)
{
	rcu_read_lock();
}

void pm_shim_rcu_read_unlock(void)
{
	rcu_read_unlock();
}

struct pci_dev *pm_shim_to_pci_dev(struct device *dev)
{
	if (!dev || !dev_is_pci(dev))
		return NULL;
	return to_pci_dev(dev);
}

void pm_shim_sg_set_dma(struct scatterlist *sg, dma_addr_t addr,
			unsigned int len)
{
	sg_set_page(sg, NULL, len, 0);
	sg_dma_address(sg) = addr;
	sg_dma_len(sg) = len;
}

unsigned int pm_shim_sg_fill_pages(struct scatterlist *sgl, const u64 *addrs,
				   unsigned int n, unsigned int len)
{
	struct scatterlist *sg = sgl;
	unsigned int i;

	for (i = 0; i < n && sg; i++, sg = sg_next(sg))
		pm_shim_sg_set_dma(sg, addrs[i], len);
	return i;
}

dma_addr_t pm_shim_sg_dma_address(struct scatterlist *sg)
{
	return sg_dma_address(sg);
}

unsigned int pm_shim_sg_dma_len(struct scatterlist *sg)
{
	return sg_dma_len(sg);
}

void pm_shim_registry_lock(void)
{
	spin_lock(&pm_registry_lock);
}

void pm_shim_registry_unlock(void)
{
	spin_unlock(&pm_registry_lock);
}

bool pm_shim_p2p_has_persistent_api(void)
{
	return nvidia_p2p_get_pages_persistent &&
	       nvidia_p2p_put_pages_persistent;
}

bool pm_shim_core_has_private_data(void)
{
	return ib_get_peer_private_data;
}

bool pm_shim_core_has_peer_client(void)
{
	return ib_get_peer_client;
}

bool pm_shim_core_has_activate_notifier(void)
{
	return ib_umem_activate_invalidation_notifier;
}

bool pm_shim_core_has_stop_notifier(void)
{
	return ib_umem_stop_invalidation_notifier;
}

int pm_shim_p2p_pin_persistent(u64 virtual_address, u64 length,
				struct nvidia_p2p_page_table **page_table)
{
	if (pm_shim_p2p_has_persistent_api())
		return nvidia_p2p_get_pages_persistent(virtual_address, length,
						       page_table,
						       NVIDIA_P2P_FLAGS_DEFAULT);
	return nvidia_p2p_get_pages(0, 0, virtual_address, length, page_table,
				    NULL, NULL);
}

int pm_shim_p2p_unpin_persistent(u64 virtual_address,
				 struct nvidia_p2p_page_table *page_table)
{
	if (pm_shim_p2p_has_persistent_api())
		return nvidia_p2p_put_pages_persistent(virtual_address,
						       page_table,
						       NVIDIA_P2P_FLAGS_DEFAULT);
	return nvidia_p2p_put_pages(0, 0, virtual_address, page_table);
}

void pm_shim_free_wait(bool (*done)(void *arg), void *arg)
{
	might_sleep();
	__wait_event(pm_free_wq, done(arg));
}

void pm_shim_free_wake(void)
{
	wake_up_all(&pm_free_wq);
}

void pm_shim_live_put_last(atomic_t *live, int count_mask)
{
	/* The count reaches 0 only while the base is dropped: a waiter is there. */
	spin_lock(&pm_live_lock);
	if (!(atomic_dec_return(live) & count_mask))
		wake_up_all(&pm_live_wq);
	spin_unlock(&pm_live_lock);
}

void pm_shim_live_wait_none(atomic_t *live, int count_mask)
{
	spin_lock(&pm_live_lock);
	/* Without the base, the last put takes the lock and wakes us. */
	atomic_dec(live);
	/*
	 * TASK_IDLE: uninterruptible, as the wait must be, but not counted as
	 * hung or as load. It may last as long as a process keeps GPU memory
	 * whose pin was left to it; in D state the hung-task detector would
	 * report the waiting insmod or rmmod every two minutes (and panic a
	 * node with hung_task_panic=1).
	 */
	if (atomic_read(live) & count_mask)
		(void)___wait_event(pm_live_wq,
				    !(atomic_read(live) & count_mask),
				    TASK_IDLE, 0, 0,
				    spin_unlock(&pm_live_lock); schedule();
				    spin_lock(&pm_live_lock));
	atomic_inc(live);
	spin_unlock(&pm_live_lock);
}

bool pm_shim_module_loaded(const char *name)
{
	struct kset *modules = THIS_MODULE->mkobj.kobj.kset;
	struct kobject *kobj;

	if (!modules)
		return false;
	kobj = kset_find_obj(modules, name);
	if (!kobj)
		return false;
	kobject_put(kobj);
	return true;
}

#ifdef PEERMEM_TEST_DELAYS
/* What modinfo shows of the test build: never a node's module. */
MODULE_INFO(test_build, "delay points (test_delay, test_delay_ms): the test bed's only");

static const char * const pm_test_points[] = {
	[PM_TEST_FREE_CALLBACK_TAIL] = "free_callback_tail",
	[PM_TEST_ACQUIRE_MODULE_REF] = "acquire_module_ref",
};

static char pm_test_delay_point[32];
module_param_string(test_delay, pm_test_delay_point,
		    sizeof(pm_test_delay_point), 0644);
MODULE_PARM_DESC(test_delay, "test build: the delay point armed for one pass");

static unsigned int pm_test_delay_ms;
module_param_named(test_delay_ms, pm_test_delay_ms, uint, 0644);
MODULE_PARM_DESC(test_delay_ms, "test build: how long the armed point busy-waits");

static DEFINE_SPINLOCK(pm_test_delay_lock);

/*
 * A held point is a gate: it ends when the scenario writes test_delay_release
 * (it saw the other side of the race land) or when test_delay_ms is over.
 */
static atomic_t pm_test_delay_releases = ATOMIC_INIT(0);

static int pm_test_delay_release_set(const char *val, const struct kernel_param *kp)
{
	atomic_inc(&pm_test_delay_releases);
	return 0;
}

static int pm_test_delay_release_get(char *buf, const struct kernel_param *kp)
{
	return sysfs_emit(buf, "%d\n", atomic_read(&pm_test_delay_releases));
}

static const struct kernel_param_ops pm_test_delay_release_ops = {
	.set = pm_test_delay_release_set,
	.get = pm_test_delay_release_get,
};
module_param_cb(test_delay_release, &pm_test_delay_release_ops, NULL, 0644);
MODULE_PARM_DESC(test_delay_release, "test build: any write ends the point held now");

void pm_shim_test_delay(unsigned int point)
{
	unsigned int ms = 0;
	u64 start, end;
	int seen;

	if (point >= ARRAY_SIZE(pm_test_points) || !pm_test_points[point])
		return;
	/* One pass: the first thread through takes the point and disarms it. */
	spin_lock(&pm_test_delay_lock);
	if (sysfs_streq(pm_test_delay_point, pm_test_points[point])) {
		ms = pm_test_delay_ms;
		pm_test_delay_point[0] = '\0';
	}
	seen = atomic_read(&pm_test_delay_releases);
	spin_unlock(&pm_test_delay_lock);
	if (!ms)
		return;
	pr_info("test delay %s: %u ms\n", pm_test_points[point], ms);
	/*
	 * Timed by the clock, not by mdelay(): under QEMU TCG a secondary
	 * CPU without a constant TSC calibrates its own delay loop (seen from
	 * 0.05x to 3x of the boot CPU's), which would shorten or stretch the
	 * window by as much on whichever CPU this thread runs.
	 */
	start = ktime_get_ns();
	end = start + (u64)ms * NSEC_PER_MSEC;
	while (ktime_get_ns() < end && atomic_read(&pm_test_delay_releases) == seen)
		cpu_relax();
	pr_info("test delay %s: done after %llu ms on CPU %d%s\n", pm_test_points[point],
		div_u64(ktime_get_ns() - start, NSEC_PER_MSEC), raw_smp_processor_id(),
		atomic_read(&pm_test_delay_releases) == seen ? "" : " (released)");
}

#ifdef CONFIG_LOCKDEP
static struct lock_class_key pm_test_reading_key;
static struct lockdep_map pm_test_reading_map =
	STATIC_LOCKDEP_MAP_INIT("nvidia_peermem_rs:reading", &pm_test_reading_key);
static bool pm_test_reading_primed;

void pm_shim_test_reading_begin(void)
{
	if (!READ_ONCE(pm_test_reading_primed)) {
		fs_reclaim_acquire(GFP_KERNEL);
		lock_map_acquire(&pm_test_reading_map);
		lock_map_release(&pm_test_reading_map);
		fs_reclaim_release(GFP_KERNEL);
		WRITE_ONCE(pm_test_reading_primed, true);
	}
	lock_map_acquire(&pm_test_reading_map);
}

void pm_shim_test_reading_end(void)
{
	lock_map_release(&pm_test_reading_map);
}
#else
void pm_shim_test_reading_begin(void)
{
}

void pm_shim_test_reading_end(void)
{
}
#endif
#else
void pm_shim_test_delay(unsigned int point)
{
}

void pm_shim_test_reading_begin(void)
{
}

void pm_shim_test_reading_end(void)
{
}
#endif
