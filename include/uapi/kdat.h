/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note OR BSD-2-Clause */
/*
 * kdat userspace ABI: ioctls of /dev/kdat.
 *
 * Rules for every command: the argument is a fixed-size struct whose first
 * field is its size in bytes (set by the caller), with explicit padding and
 * reserved fields that must be zero.  The kernel rejects a size it does not
 * know (-EINVAL) and unknown flags (-EINVAL), so structs can only grow at the
 * end, with a new size.
 */
#ifndef _UAPI_KDAT_H
#define _UAPI_KDAT_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define KDAT_DEVICE_NAME	"kdat"
#define KDAT_ABI_VERSION	1
#define KDAT_IOC_MAGIC		0xDA

struct kdat_version {
	__u32 size;		/* in: sizeof(struct kdat_version) */
	__u32 abi_version;	/* out: KDAT_ABI_VERSION */
	__u32 dat_major;	/* out: DAT API version served: 2.0 */
	__u32 dat_minor;
	__u32 num_devices;	/* out: RDMA devices kdat currently sees */
	__u32 reserved[3];	/* must be zero */
};

#define KDAT_IOC_VERSION	_IOWR(KDAT_IOC_MAGIC, 0x00, struct kdat_version)

#endif /* _UAPI_KDAT_H */
