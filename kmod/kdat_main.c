// SPDX-License-Identifier: GPL-2.0
/*
 * kdat: DAT (kDAPL/uDAPL 2.0) endpoints and connection management on the
 * kernel's rdma_cm, for kernel consumers and, through /dev/kdat, userspace.
 */
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/uaccess.h>
#include <uapi/kdat.h>
#include "kdat_priv.h"

static long kdat_ioctl_version(void __user *uarg)
{
	struct kdat_version v;
	u32 size;

	if (get_user(size, (u32 __user *)uarg))
		return -EFAULT;
	if (size != sizeof(v))
		return -EINVAL;
	if (copy_from_user(&v, uarg, sizeof(v)))
		return -EFAULT;
	if (memchr_inv(v.reserved, 0, sizeof(v.reserved)))
		return -EINVAL;
	v.abi_version = KDAT_ABI_VERSION;
	v.dat_major = 2;
	v.dat_minor = 0;
	v.num_devices = kdat_devices_count();
	return copy_to_user(uarg, &v, sizeof(v)) ? -EFAULT : 0;
}

static long kdat_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case KDAT_IOC_VERSION:
		return kdat_ioctl_version(uarg);
	default:
		return -ENOTTY;
	}
}

static const struct file_operations kdat_fops = {
	.owner = THIS_MODULE,
	.unlocked_ioctl = kdat_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.llseek = no_llseek,
};

static struct miscdevice kdat_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = KDAT_DEVICE_NAME,
	.fops = &kdat_fops,
	.mode = 0600,	/* a udev rule (scripts/) may grant a group */
};

static int __init kdat_init(void)
{
	int ret;

	ret = kdat_devices_init();
	if (ret)
		return ret;
	ret = misc_register(&kdat_misc);
	if (ret) {
		kdat_devices_exit();
		return ret;
	}
	pr_info("kdat: ABI %u ready on /dev/%s\n", KDAT_ABI_VERSION, KDAT_DEVICE_NAME);
	return 0;
}

static void __exit kdat_exit(void)
{
	misc_deregister(&kdat_misc);
	kdat_devices_exit();
	pr_info("kdat: unloaded\n");
}

module_init(kdat_init);
module_exit(kdat_exit);
MODULE_DESCRIPTION("DAT endpoints and connection management on rdma_cm");
MODULE_LICENSE("GPL");
