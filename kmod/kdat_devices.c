// SPDX-License-Identifier: GPL-2.0
/*
 * The RDMA devices kdat knows (kdat_ia.c's ib_client adds and removes them as
 * ib_core reports them) and the IAs open on each.
 */
#include <linux/slab.h>
#include "kdat_base.h"

static LIST_HEAD(kdat_devices);
DEFINE_MUTEX(kdat_devices_lock);	/* kdat_devices and each device's ias */

/* Records a device ib_core told us about (ib_client add). */
struct kdat_device *kdat_device_add(struct ib_device *ibdev)
{
	struct kdat_device *dev;

	dev = kzalloc(sizeof(*dev), GFP_KERNEL);
	if (!dev)
		return NULL;
	dev->ibdev = ibdev;
	INIT_LIST_HEAD(&dev->ias);
	mutex_lock(&kdat_devices_lock);
	list_add_tail(&dev->node, &kdat_devices);
	mutex_unlock(&kdat_devices_lock);
	return dev;
}

/*
 * Forgets a device that is going away and detaches its IAs from it; returns
 * them, each with a reference, in a NULL-terminated array for the caller to
 * tear down without the lock and free.
 */
struct kdat_ia **kdat_device_remove(struct kdat_device *dev)
{
	struct kdat_ia **ias;
	struct kdat_ia *ia;
	unsigned int n = 0;

	mutex_lock(&kdat_devices_lock);
	list_del(&dev->node);
	list_for_each_entry(ia, &dev->ias, dev_node)
		n++;
	ias = kcalloc(n + 1, sizeof(*ias), GFP_KERNEL | __GFP_NOFAIL);
	n = 0;
	list_for_each_entry(ia, &dev->ias, dev_node) {
		kref_get(&ia->obj.ref);
		ias[n++] = ia;
	}
	while (!list_empty(&dev->ias)) {
		ia = list_first_entry(&dev->ias, struct kdat_ia, dev_node);
		list_del_init(&ia->dev_node);
		ia->kdev = NULL;
	}
	mutex_unlock(&kdat_devices_lock);
	return ias;
}

/* Caller holds kdat_devices_lock. */
struct kdat_device *kdat_device_find(struct ib_device *ibdev)
{
	struct kdat_device *dev;

	lockdep_assert_held(&kdat_devices_lock);
	list_for_each_entry(dev, &kdat_devices, node)
		if (dev->ibdev == ibdev)
			return dev;
	return NULL;
}

unsigned int kdat_devices_count(void)
{
	struct kdat_device *dev;
	unsigned int n = 0;

	mutex_lock(&kdat_devices_lock);
	list_for_each_entry(dev, &kdat_devices, node)
		n++;
	mutex_unlock(&kdat_devices_lock);
	return n;
}
