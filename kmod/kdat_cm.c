// SPDX-License-Identifier: GPL-2.0
/*
 * The real connection manager backend: kdat_cm_ops on the kernel's rdma_cm
 * (kdat_cm.h).  KUnit builds also get the hooks that put a fake in its place.
 */
#include <linux/module.h>
#include <net/net_namespace.h>
#include "kdat_priv.h"

static struct rdma_cm_id *kdat_rdma_create_id(struct net *net, rdma_cm_event_handler handler,
					       void *context)
{
	return rdma_create_id(net, handler, context, RDMA_PS_TCP, IB_QPT_RC);
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

	ret = rdma_init_qp_attr(id, &attr, &mask);
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
	.init_qp_attr = rdma_init_qp_attr,
};

#if IS_ENABLED(CONFIG_KUNIT)
int kdat_test_ia_set_cm_ops(struct kdat_ia *ia, const struct kdat_cm_ops *ops)
{
	struct kdat_ctx *ctx = ia->obj.ctx;
	int ret = 0;

	mutex_lock(&ctx->lock);
	if (ia->obj.dead || !list_empty(&ia->eps) || !list_empty(&ia->sps) ||
	    !list_empty(&ia->crs))
		ret = -EBUSY;
	else
		ia->cm = ops ? ops : &kdat_cm_rdma;
	mutex_unlock(&ctx->lock);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_test_ia_set_cm_ops);

void kdat_test_ia_device_removed(struct kdat_ia *ia)
{
	/* as kdat_ib_remove() does, for this one IA */
	mutex_lock(&kdat_devices_lock);
	list_del_init(&ia->dev_node);
	ia->kdev = NULL;
	mutex_unlock(&kdat_devices_lock);
	kdat_ia_device_removed(ia);
}
EXPORT_SYMBOL_GPL(kdat_test_ia_device_removed);

/*
 * Holds (or releases) the lock of the IA's owner, as a long kdat call would:
 * a test queues CM upcalls and timer work behind it in a known order.
 */
void kdat_test_ia_hold_owner(struct kdat_ia *ia, bool hold)
{
	if (hold)
		mutex_lock(&ia->obj.ctx->lock);
	else
		mutex_unlock(&ia->obj.ctx->lock);
}
EXPORT_SYMBOL_GPL(kdat_test_ia_hold_owner);
#endif
