// SPDX-License-Identifier: GPL-2.0
/*
 * kdat: DAT (kDAPL/uDAPL 2.0) endpoints and connection management on the
 * kernel's rdma_cm, for kernel consumers and, through /dev/kdat, userspace.
 */
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/nsproxy.h>
#include <linux/sysfs.h>
#include <kdat/uapi/kdat.h>
#include <kdat/version.h>
#include "kdat_conn.h"
#include "kdat_ioctl.h"

struct workqueue_struct *kdat_wq;

static int kdat_open(struct inode *inode, struct file *file)
{
	/* the file acts in its opener's network namespace, wherever it is used later */
	struct kdat_ctx *ctx = kdat_ctx_create(NULL, current->nsproxy->net_ns);

	if (!ctx)
		return -ENOMEM;
	file->private_data = ctx;
	return 0;
}

/* close(): everything the file owns goes, connected EPs included. */
static int kdat_release(struct inode *inode, struct file *file)
{
	kdat_ctx_destroy(file->private_data);
	return 0;
}

/* The file's own object table, or the table TABLE_ATTACH chose (read-only). */
static int kdat_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct kdat_ctx *ctx = file->private_data;
	u64 off = (u64)vma->vm_pgoff << PAGE_SHIFT;
	struct kdat_table *t;
	int ret;

	if (off == KDAT_MMAP_TABLE) {
		return kdat_table_mmap(ctx->table, vma);
	} else if (off == KDAT_MMAP_VIEW) {
		mutex_lock(&ctx->lock);
		t = ctx->view;
		if (t)
			kdat_table_get(t);
		mutex_unlock(&ctx->lock);
		if (!t)
			return -ENXIO;
		ret = kdat_table_mmap(t, vma);
		kdat_table_put(t);
		return ret;
	}
	return -EINVAL;
}

static const struct file_operations kdat_fops = {
	.owner = THIS_MODULE,
	.open = kdat_open,
	.release = kdat_release,
	.unlocked_ioctl = kdat_ioctl,
	.mmap = kdat_mmap,
	.compat_ioctl = compat_ptr_ioctl,
};

static ssize_t orphans_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return kdat_orphans_show(buf);
}
static DEVICE_ATTR_RO(orphans);

static struct attribute *kdat_attrs[] = {
	&dev_attr_orphans.attr,
	NULL,
};
ATTRIBUTE_GROUPS(kdat);

static struct miscdevice kdat_misc = {
	.groups = kdat_groups,
	.minor = MISC_DYNAMIC_MINOR,
	.name = KDAT_DEVICE_NAME,
	.fops = &kdat_fops,
	.mode = 0600,	/* a udev rule (scripts/) may grant a group */
};

static int __init kdat_init(void)
{
	int ret;

	ret = kdat_ioctl_init();
	if (ret)
		return ret;
	ret = kdat_ep_cache_init();
	if (ret)
		return ret;
	kdat_wq = alloc_workqueue("kdat", WQ_UNBOUND | WQ_MEM_RECLAIM, 0);
	if (!kdat_wq) {
		ret = -ENOMEM;
		goto err_cache;
	}
	ret = kdat_ib_client_register();
	if (ret)
		goto err_wq;
	ret = misc_register(&kdat_misc);
	if (ret)
		goto err_devices;
	pr_info("kdat: %s (ABI %u) ready on /dev/%s\n", KDAT_VERSION, KDAT_ABI_VERSION,
		KDAT_DEVICE_NAME);
	return 0;

err_devices:
	kdat_ib_client_unregister();
err_wq:
	destroy_workqueue(kdat_wq);
err_cache:
	kdat_ep_cache_exit();
	return ret;
}

static void __exit kdat_exit(void)
{
	misc_deregister(&kdat_misc);
	kdat_orphans_reap(NULL);
	kdat_ib_client_unregister();
	/* every file and kernel IA is gone (module refcount); let releases finish */
	destroy_workqueue(kdat_wq);
	kdat_ep_cache_exit();		/* the last EP went with those releases */
	kdat_owner_names_free();	/* no cm_id is left to name */
	pr_info("kdat: unloaded\n");
}

module_init(kdat_init);
module_exit(kdat_exit);
MODULE_DESCRIPTION("DAT endpoints and connection management on rdma_cm");
MODULE_LICENSE("GPL");
MODULE_VERSION(KDAT_VERSION);
