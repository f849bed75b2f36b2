// SPDX-License-Identifier: GPL-2.0
/*
 * The RDMA devices kdat knows (kdat_ia.c's ib_client adds and removes them as
 * ib_core reports them) and the IAs open on each.
 */
#include <linux/idr.h>
#include <linux/slab.h>
#include "kdat_base.h"

static LIST_HEAD(kdat_devices);
DEFINE_MUTEX(kdat_devices_lock);	/* kdat_devices and each device's ias */

/* Lowest free first, so that the numbers records carry stay small. */
static DEFINE_IDA(kdat_device_ids);

/* The module's totals: every IA's counts since the module was loaded. */
atomic64_t kdat_module_stats[KDAT_IA_NR_COUNTERS];

static void kdat_dev_stats_release(struct kref *ref)
{
	struct kdat_dev_stats *stats = container_of(ref, struct kdat_dev_stats, ref);

	ida_free(&kdat_device_ids, stats->id);
	kfree(stats);
}

/**
 * kdat_dev_stats_put() - drop a reference on a device's totals
 * @stats: the totals, or NULL
 *
 * The last reference frees them and their device number.
 */
void kdat_dev_stats_put(struct kdat_dev_stats *stats)
{
	if (stats)
		kref_put(&stats->ref, kdat_dev_stats_release);
}

/* Records a device ib_core told us about (ib_client add). */
struct kdat_device *kdat_device_add(struct ib_device *ibdev)
{
	struct kdat_device *dev;
	int id;

	dev = kzalloc(sizeof(*dev), GFP_KERNEL);
	if (!dev)
		return NULL;
	dev->stats = kzalloc(sizeof(*dev->stats), GFP_KERNEL);
	id = ida_alloc_range(&kdat_device_ids, 1, U16_MAX, GFP_KERNEL);
	if (!dev->stats || id < 0) {
		if (id >= 0)
			ida_free(&kdat_device_ids, id);
		kfree(dev->stats);
		kfree(dev);
		return NULL;
	}
	kref_init(&dev->stats->ref);
	dev->stats->id = id;
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
	/* the IAs that counted into them keep them until they go */
	kdat_dev_stats_put(dev->stats);
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

/**
 * kdat_dev_counters() - a device's or the module's connection counter totals
 * @device: a device number (struct kdat_record.device), or 0 for the module
 * @next: set to the lowest listed device number above @device, 0 for none
 * @name: set to the device's name ("" for the module)
 * @name_len: @name's size
 * @values: set to the totals, in KDAT_IA_COUNTERS order
 * @room: @values' length
 *
 * Return: DAT_SUCCESS, or DAT_INVALID_PARAMETER when @device names no device
 * kdat knows (it went, or never was).
 */
kdat_ret_t kdat_dev_counters(u32 device, u32 *next, char *name, size_t name_len, u64 *values,
			     u32 room)
{
	struct kdat_dev_stats *found = NULL;
	atomic64_t *v = kdat_module_stats;
	struct kdat_device *dev;
	unsigned int i;

	*next = 0;
	name[0] = 0;
	mutex_lock(&kdat_devices_lock);
	list_for_each_entry(dev, &kdat_devices, node) {
		if (dev->stats->id == device) {
			found = dev->stats;
			/* the device is registered while listed: its name is there */
			strscpy(name, dev_name(&dev->ibdev->dev), name_len);
		} else if (dev->stats->id > device && (!*next || dev->stats->id < *next)) {
			*next = dev->stats->id;
		}
	}
	if (device && !found) {
		mutex_unlock(&kdat_devices_lock);
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	}
	if (found)
		v = found->v;
	for (i = 0; i < min_t(u32, room, KDAT_IA_NR_COUNTERS); i++)
		values[i] = atomic64_read(&v[i]);
	mutex_unlock(&kdat_devices_lock);
	return KDAT_DAT_SUCCESS;
}
