/* SPDX-License-Identifier: GPL-2.0 */
/* kdat.ko internals shared between its compilation units. */
#ifndef KDAT_PRIV_H
#define KDAT_PRIV_H

#include <linux/list.h>
#include <linux/mutex.h>
#include <rdma/ib_verbs.h>

/* One RDMA device kdat has been told about by ib_core (ib_client add). */
struct kdat_device {
	struct ib_device *ibdev;
	struct list_head node;		/* in kdat_devices, under kdat_devices_lock */
};

int kdat_devices_init(void);
void kdat_devices_exit(void);
unsigned int kdat_devices_count(void);

#endif /* KDAT_PRIV_H */
