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
