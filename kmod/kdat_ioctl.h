/* SPDX-License-Identifier: GPL-2.0 */
/* kdat.ko's userspace interface: the ioctls of /dev/kdat (kdat_ioctl.c). */
#ifndef KDAT_IOCTL_H
#define KDAT_IOCTL_H

#include <linux/fs.h>

int kdat_ioctl_init(void);
long kdat_ioctl(struct file *file, unsigned int cmd, unsigned long arg);

#endif /* KDAT_IOCTL_H */
