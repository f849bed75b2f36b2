// SPDX-License-Identifier: GPL-2.0
/*
 * The real connection manager backend: kdat_cm_ops on the kernel's rdma_cm
 * (kdat_cm.h), and the deferred destruction of an id whose handler may be running.
 */
#include <linux/module.h>
#include <linux/slab.h>
#include <net/net_namespace.h>
#include "kdat_base.h"

/*
 * An id made for an open file is the calling process's in rdma_cm's resource
 * tracking (rdma res show cm_id gives its pid and comm, as for ucma's ids);
 * a kernel consumer's carries the consumer's module name.
 */
static struct rdma_cm_id *kdat_rdma_create_id(struct net *net, rdma_cm_event_handler handler,
					       void *context, const char *kern_name,
					       enum rdma_ucm_port_space ps)
{
	return __rdma_create_kernel_id(net, handler, context, ps,
				       ps == RDMA_PS_UDP ? IB_QPT_UD : IB_QPT_RC, kern_name);
}

/*
 * The local ACK timeout of every RC QP kdat connects, 4.096 us * 2^value.
 * The CM's own on RoCE is 19 (2.1 s, from the path's packet life time): each
 * lost packet stalls its QP that long, and DAPL transfers under 10% loss
 * stall for good with it on rxe, over libdaplofa too.  16 (268 ms) is
 * DAPL's DAPL_ACK_TIMER default.  Never below the device's own ACK delay;
 * 0 keeps the CM's value.
 */
#define KDAT_ACK_TIMEOUT	16
static unsigned int ack_timeout = KDAT_ACK_TIMEOUT;

static int kdat_ack_timeout_set(const char *val, const struct kernel_param *kp)
{
	return param_set_uint_minmax(val, kp, 0, 31);
}

static const struct kernel_param_ops kdat_ack_timeout_ops = {
	.set = kdat_ack_timeout_set,
	.get = param_get_uint,
};

module_param_cb(ack_timeout, &kdat_ack_timeout_ops, &ack_timeout, 0644);
MODULE_PARM_DESC(ack_timeout,
		 "RC local ACK timeout, 4.096us * 2^n (0-31, default 16; 0: the CM's value)");

static int kdat_rdma_init_qp_attr(struct rdma_cm_id *id, struct ib_qp_attr *attr, int *mask)
{
	unsigned int timeout = READ_ONCE(ack_timeout);
	int ret;

	ret = rdma_init_qp_attr(id, attr, mask);
	if (ret || !(*mask & IB_QP_TIMEOUT) || !timeout)
		return ret;
	attr->timeout = max_t(unsigned int, timeout, id->device->attrs.local_ca_ack_delay);
	return 0;
}

/*
 * kdat drives its QPs itself (as librdmacm does for user QPs): the CM gives
 * the attributes for the next state, kdat adds access flags and read depths.
 */
static int kdat_rdma_modify_qp(struct rdma_cm_id *id, struct ib_qp *qp,
			       enum ib_qp_state state, u32 ird, u32 ord)
{
	struct ib_qp_attr attr = { .qp_state = state };
	int mask, ret;

	ret = kdat_rdma_init_qp_attr(id, &attr, &mask);
	if (ret)
		return ret;
	if (state == IB_QPS_INIT)
		attr.qp_access_flags = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE |
				       IB_ACCESS_REMOTE_READ;
	if (state == IB_QPS_RTR)
		attr.max_dest_rd_atomic = ird;
	if (state == IB_QPS_RTS)
		attr.max_rd_atomic = ord;
	return ib_modify_qp(qp, &attr, mask);
}

/*
 * siw reports an MPA reject (the peer's consumer reject, with its private
 * data) as -ECONNRESET, where rdma_cm's iWARP test looks for -ECONNREFUSED;
 * take a reset that brought private data for what it is.
 */
static const void *kdat_rdma_consumer_reject_data(struct rdma_cm_id *id,
						  struct rdma_cm_event *ev, u8 *len)
{
	const void *p = rdma_consumer_reject_data(id, ev, len);

	if (!p && id->device && rdma_protocol_iwarp(id->device, id->port_num) &&
	    ev->status == -ECONNRESET && ev->param.conn.private_data_len) {
		*len = ev->param.conn.private_data_len;
		p = ev->param.conn.private_data;
	}
	return p;
}

const struct kdat_cm_ops kdat_cm_rdma = {
	.create_id = kdat_rdma_create_id,
	.destroy_id = rdma_destroy_id,
	.bind_addr = rdma_bind_addr,
	.listen = rdma_listen,
	.resolve_addr = rdma_resolve_addr,
	.resolve_route = rdma_resolve_route,
	.connect_locked = rdma_connect_locked,
	.accept = rdma_accept,
	.reject = rdma_reject,
	.disconnect = rdma_disconnect,
	.lock_handler = rdma_lock_handler,
	.unlock_handler = rdma_unlock_handler,
	.consumer_reject_data = kdat_rdma_consumer_reject_data,
	.modify_qp = kdat_rdma_modify_qp,
	.init_qp_attr = kdat_rdma_init_qp_attr,
};

/* Deferred destruction of an id whose handler is running (it may not destroy itself). */
struct kdat_id_work {
	struct work_struct work;
	const struct kdat_cm_ops *cm;
	struct rdma_cm_id *id;
	struct kdat_obj *obj;
};

static void kdat_id_destroy_work(struct work_struct *work)
{
	struct kdat_id_work *w = container_of(work, struct kdat_id_work, work);

	if (w->obj && w->obj->cls->id_quiesce)
		w->obj->cls->id_quiesce(w->obj);
	w->cm->destroy_id(w->id);
	kdat_obj_put(w->obj);
	kfree(w);
}

void kdat_destroy_id_later(const struct kdat_cm_ops *cm, struct rdma_cm_id *id,
				  struct kdat_obj *obj)
{
	struct kdat_id_work *w;

	if (!id)
		return;
	w = kmalloc(sizeof(*w), GFP_KERNEL | __GFP_NOFAIL);
	w->cm = cm;
	w->id = id;
	w->obj = obj;
	INIT_WORK(&w->work, kdat_id_destroy_work);
	queue_work(kdat_wq, &w->work);
}
