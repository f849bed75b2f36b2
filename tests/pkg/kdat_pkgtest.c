// SPDX-License-Identifier: GPL-2.0
/*
 * An out-of-tree kernel consumer built against the installed kdat (scripts/package-root builds it
 * with the headers and Module.symvers kdat-dkms keeps in /usr/src/kdat-VERSION): it opens an IA
 * on `netdev` at load and keeps it until unload, so the packaged module's table names it.
 */
#include <linux/module.h>
#include <kdat/kdat.h>
#include <kdat/version.h>

static char *netdev = "kdat0";
module_param(netdev, charp, 0444);
MODULE_PARM_DESC(netdev, "the netdev whose RDMA port the IA opens on");

static struct kdat_ia *ia;

static int __init kdat_pkgtest_init(void)
{
	struct kdat_ia_info info;

	if (kdat_ia_open(netdev, &ia))
		return -ENODEV;
	if (kdat_ia_query(ia, &info)) {
		kdat_ia_close(ia, KDAT_IA_CLOSE_ABRUPT);
		return -EIO;
	}
	pr_info("kdat_pkgtest: kdat %s, IA on %s (%s)\n", KDAT_VERSION, info.netdev_name,
		info.device_name);
	return 0;
}

static void __exit kdat_pkgtest_exit(void)
{
	kdat_ia_close(ia, KDAT_IA_CLOSE_ABRUPT);
}

module_init(kdat_pkgtest_init);
module_exit(kdat_pkgtest_exit);
MODULE_DESCRIPTION("kdat package test: an out-of-tree kernel consumer");
MODULE_LICENSE("GPL");
