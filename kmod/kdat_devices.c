// SPDX-License-Identifier: GPL-2.0
/*
 * RDMA device tracking: kdat registers an ib_client so that ib_core tells it
 * when devices come and go (rxe links added and deleted at run time).  When a
 * device goes, every IA on it is torn off the device before we return, since
 * ib_core unregisters the device right after.
 */
#include <linux/slab.h>
#include "kdat_priv.h"

static LIST_HEAD(kdat_devices);
DEFINE_MUTEX(kdat_devices_lock);	/* kdat_devices and each device's ias */

static struct ib_client kdat_ib_client;

static int kdat_ib_add(struct ib_device *ibdev)
{
	struct kdat_device *dev;

	dev = kzalloc(sizeof(*dev), GFP_KERNEL);
	if (!dev)
		return -ENOMEM;
	dev->ibdev = ibdev;
	INIT_LIST_HEAD(&dev->ias);
	mutex_lock(&kdat_devices_lock);
	list_add_tail(&dev->node, &kdat_devices);
	mutex_unlock(&kdat_devices_lock);
	ib_set_client_data(ibdev, &kdat_ib_client, dev);
	return 0;
}

static void kdat_ib_remove(struct ib_device *ibdev, void *client_data)
{
	struct kdat_device *dev = client_data;
	struct kdat_ia **ias;
	struct kdat_ia *ia;
	unsigned int n = 0, i;

	/* Collect the IAs with a reference each; tear them down without the lock. */
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

	for (i = 0; i < n; i++) {
		kdat_ia_device_removed(ias[i]);
		kdat_obj_put(&ias[i]->obj);
	}
	kfree(ias);
	kdat_orphans_reap(ibdev);
	kfree(dev);
}

static struct ib_client kdat_ib_client = {
	.name = "kdat",
	.add = kdat_ib_add,
	.remove = kdat_ib_remove,
};

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

int kdat_devices_init(void)
{
	return ib_register_client(&kdat_ib_client);
}

void kdat_devices_exit(void)
{
	/* ib_core calls .remove for every device before this returns. */
	ib_unregister_client(&kdat_ib_client);
}
