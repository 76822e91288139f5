// SPDX-License-Identifier: GPL-2.0
/*
 * The same C helpers, compiled a second time for the KUnit test module
 * (Kbuild refuses one object in two modules).
 */
#include "shim.c"

struct device *pm_shim_test_get_pci_device(void)
{
	struct pci_dev *pdev = pci_get_device(PCI_ANY_ID, PCI_ANY_ID, NULL);

	return pdev ? &pdev->dev : NULL;
}

void pm_shim_test_put_pci_device(struct device *dev)
{
	if (dev)
		pci_dev_put(to_pci_dev(dev));
}

unsigned long pm_shim_test_task_offset(unsigned int field)
{
	switch (field) {
	case 0:
		return offsetof(struct task_struct, se);
	case 1:
		return offsetof(struct task_struct, rt);
	case 2:
		return offsetof(struct task_struct, dl);
	case 3:
		return offsetof(struct task_struct, stats);
	case 4:
		return offsetof(struct task_struct, policy);
	case 5:
		return offsetof(struct task_struct, sched_info);
	case 6:
		return offsetof(struct task_struct, tasks);
	case 7:
		return offsetof(struct task_struct, mm);
	case 8:
		return offsetof(struct task_struct, pid);
	}
	return 0;
}

unsigned long pm_shim_test_spinlock_size(void)
{
	return sizeof(spinlock_t);
}

unsigned long pm_shim_test_sg_table_size(void)
{
	return sizeof(struct sg_table);
}
