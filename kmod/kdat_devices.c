// SPDX-License-Identifier: GPL-2.0
/*
 * RDMA device tracking: kdat registers an ib_client so that ib_core tells it
 * when devices come and go (rxe links added and deleted at run time).
 */
#include <linux/slab.h>
#include "kdat_priv.h"

static LIST_HEAD(kdat_devices);
static DEFINE_MUTEX(kdat_devices_lock);	/* protects kdat_devices */

static struct ib_client kdat_ib_client;

static int kdat_ib_add(struct ib_device *ibdev)
{
	struct kdat_device *dev;

	dev = kzalloc(sizeof(*dev), GFP_KERNEL);
	if (!dev)
		return -ENOMEM;
	dev->ibdev = ibdev;
	mutex_lock(&kdat_devices_lock);
	list_add_tail(&dev->node, &kdat_devices);
	mutex_unlock(&kdat_devices_lock);
	ib_set_client_data(ibdev, &kdat_ib_client, dev);
	dev_dbg(&ibdev->dev, "kdat: device added\n");
	return 0;
}

static void kdat_ib_remove(struct ib_device *ibdev, void *client_data)
{
	struct kdat_device *dev = client_data;

	mutex_lock(&kdat_devices_lock);
	list_del(&dev->node);
	mutex_unlock(&kdat_devices_lock);
	dev_dbg(&ibdev->dev, "kdat: device removed\n");
	kfree(dev);
}

static struct ib_client kdat_ib_client = {
	.name = "kdat",
	.add = kdat_ib_add,
	.remove = kdat_ib_remove,
};

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
