// SPDX-License-Identifier: GPL-2.0
/*
 * UD EPs: a process's UD QP (KDAT_UQP_UD, DAT's IB extension) has no
 * connection, only peers.  Each dat_ep_connect is an address exchange of its
 * own: an rdma_cm id in RDMA_PS_UDP resolves the address and route and sends
 * a SIDR request; the reply gives the peer's QPN, Q_Key and a path to it.
 * One EP may run many exchanges at once (dtestx -u runs four), so an
 * exchange's id is never the EP's cm_id: it lives in the exchange, and each
 * exchange ends exactly once, with one event through the table's UD rules.
 *
 * Who ends an exchange unlinks it from its EP's list under ep->lock: the
 * id's handler (an outcome: rdma_cm destroys the id on our return), the
 * connect timeout's work, or the EP's free, reset or device removal
 * (kdat_uqp_end_exchanges(), below the EP: the exchange's end work destroys
 * the id).  The exchange lives until its id is destroyed and its timeout
 * work is done (ref).  This file is above the EP (it steps it); the EP's own
 * code never calls here: /dev/kdat's EP_CONNECT does, for a UD EP.
 */
#include <linux/slab.h>
#include <linux/workqueue.h>
#include <linux/ip.h>
#include <rdma/ib_cache.h>
#include <rdma/ib_cm.h>
#include "kdat_conn.h"

/* The tail of an exchange's event: the peer as far as it is known. */
static void kdat_ud_peer_init(struct kdat_event_ud *peer, const union kdat_sockaddr *addr,
			      u32 flags)
{
	memset(peer, 0, sizeof(*peer));
	peer->flags = KDAT_UD_EVENT | flags;
	kdat_addr_out(&peer->addr, &addr->sa);
}

/*
 * Ends x with stimulus and its event, unless something else ended it
 * first; returns whether this caller ended it (and so owns its id's end).
 * Caller holds ep->lock.
 */
static bool kdat_ud_end(struct kdat_ud_exchange *x, unsigned int stimulus, const void *pdata,
			u32 pdata_len, const struct kdat_event_ud *peer)
{
	struct kdat_ep *ep = x->ep;
	struct kdat_event_ud failed;

	lockdep_assert_held(&ep->lock);
	if (list_empty(&x->node))
		return false;
	list_del_init(&x->node);
	if (!peer) {
		kdat_ud_peer_init(&failed, &x->remote, 0);
		peer = &failed;
	}
	if (!ep->obj.dead)
		kdat_ep_step_ud(ep, stimulus, pdata, pdata_len, peer);
	return true;
}

/* After an end by the handler or the timeout: the timeout need not run. */
static void kdat_ud_cancel_timeout(struct kdat_ud_exchange *x)
{
	if (cancel_delayed_work(&x->timeout))
		kdat_ud_exchange_put(x);	/* the timeout's */
}

static void kdat_ud_timeout_work(struct work_struct *work)
{
	struct kdat_ud_exchange *x = container_of(to_delayed_work(work), struct kdat_ud_exchange,
						  timeout);
	struct kdat_ep *ep = x->ep;
	bool ended;

	mutex_lock(&ep->lock);
	ended = kdat_ud_end(x, KDAT_EP_STIM_UD_TIMEOUT, NULL, 0, NULL);
	mutex_unlock(&ep->lock);
	if (ended) {
		/* a handler at work on the id finds the exchange over; this waits for it */
		ep->ia->cm->destroy_id(x->id);
		kdat_ud_exchange_put(x);	/* the id's */
	}
	kdat_ud_exchange_put(x);	/* the timeout's */
}

/* A SIDR reply that refused us: the peer consumer's reject, or anyone else's. */
static unsigned int kdat_ud_refusal(struct kdat_ia *ia, struct rdma_cm_event *ev,
				    const u8 **pdata, u32 *len)
{
	const u8 *raw = ev->param.ud.private_data;
	u32 raw_len = ev->param.ud.private_data_len;

	*len = 0;
	if (ev->status != IB_SIDR_REJECT || !raw)
		return KDAT_EP_STIM_UD_UNREACHABLE;
	/* kdat marks its own refusals (no UD listener, backlog full) */
	if (!ia->pdata_raw && raw_len >= KDAT_PDATA_HDR && raw[0] == KDAT_PDATA_MAGIC &&
	    raw[1] == KDAT_PDATA_VERSION && (raw[3] & KDAT_PDATA_F_PROVIDER))
		return KDAT_EP_STIM_UD_UNREACHABLE;
	*len = kdat_pdata_unwrap(ia, raw, raw_len, pdata);
	return KDAT_EP_STIM_UD_REJECTED;
}

/* rdma_cm's events on an exchange's id; non-zero: rdma_cm destroys the id. */
static int kdat_ud_upcall(struct rdma_cm_id *id, struct rdma_cm_event *ev)
{
	struct kdat_ud_exchange *x = id->context;
	struct kdat_ep *ep = x->ep;
	struct rdma_conn_param param = {};
	struct kdat_event_ud peer;
	unsigned int stimulus = KDAT_EP_STIM_UD_UNREACHABLE;
	const u8 *pdata = NULL;
	u32 len = 0;
	bool ended;
	int err;

	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		err = ep->cm->resolve_route(id, KDAT_RESOLVE_TIMEOUT_MS);
		if (!err)
			return 0;
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		mutex_lock(&ep->lock);
		param.qp_num = ep->uqp->qpn;
		ended = list_empty(&x->node);
		mutex_unlock(&ep->lock);
		if (ended)
			return 0;
		param.private_data = x->wire;
		param.private_data_len = x->wire_len;
		err = ep->cm->connect_locked(id, &param);
		if (!err)
			return 0;
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		kdat_ud_peer_init(&peer, &x->remote, KDAT_UD_AH_VALID);
		kdat_uqp_ah_out(&peer.ah, &ev->param.ud.ah_attr);
		peer.qpn = ev->param.ud.qp_num;
		peer.qkey = ev->param.ud.qkey;
		len = kdat_pdata_unwrap(ep->ia, ev->param.ud.private_data,
					ev->param.ud.private_data_len, &pdata);
		stimulus = KDAT_EP_STIM_UD_ESTABLISHED;
		break;
	case RDMA_CM_EVENT_UNREACHABLE:
		stimulus = kdat_ud_refusal(ep->ia, ev, &pdata, &len);
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:	/* also a Q_Key the CM refused */
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		break;
	default:
		return 0;
	}
	mutex_lock(&ep->lock);
	ended = kdat_ud_end(x, stimulus, pdata, len,
			    stimulus == KDAT_EP_STIM_UD_ESTABLISHED ? &peer : NULL);
	mutex_unlock(&ep->lock);
	if (!ended)
		return 0;	/* whoever ended it destroys the id */
	kdat_ud_cancel_timeout(x);
	kdat_ud_exchange_put(x);		/* the id's: rdma_cm destroys it after this upcall */
	return 1;
}

/*
 * dat_ep_connect of a UD EP (/dev/kdat's EP_CONNECT sends it here): the
 * arguments are checked as for any connect, then one exchange starts.
 */
kdat_ret_t kdat_ud_connect(struct kdat_ep *ep, const struct sockaddr *remote, u64 conn_qual,
			   u32 timeout_us, const void *pdata, s32 pdata_size, u32 qos, u32 flags)
{
	struct kdat_ia *ia = ep->ia;
	struct kdat_ud_exchange *x;
	struct rdma_cm_id *id;
	kdat_ret_t ret;
	int err;

	ret = kdat_connect_check(ep, remote, conn_qual, timeout_us, pdata, pdata_size, qos, flags);
	if (ret)
		return ret;
	x = kzalloc(sizeof(*x), GFP_KERNEL);
	if (!x)
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
	kdat_ud_exchange_init(x, ep, kdat_ud_timeout_work);
	kdat_sockaddr_copy(&x->remote, remote);
	kdat_sockaddr_set_port(&x->remote, conn_qual);

	mutex_lock(&ep->lock);
	if (ep->obj.dead) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
		goto fail;
	}
	ret = kdat_ep_check(ep, KDAT_EP_STIM_UD_CONNECT);
	if (ret)
		goto fail;
	if (ia->removed) {
		ret = kdat_invalid_state(ep);
		goto fail;
	}
	x->wire_len = kdat_pdata_wrap_ud(ia, x->wire, ep->uqp->qpn, pdata, pdata_size);
	id = ia->cm->create_id(ep->obj.ctx->net, kdat_ud_upcall, x, ep->obj.ctx->kern_name,
			       RDMA_PS_UDP);
	if (IS_ERR(id)) {
		ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_TEP);
		goto fail;
	}
	x->id = id;
	kdat_ia_count(ia, KDAT_IA_COUNTER_CONNECTS);
	kdat_ep_step(ep, KDAT_EP_STIM_UD_CONNECT, NULL, 0);
	/* its handler takes ep->lock: nothing reaches it before it is on the list */
	list_add_tail(&x->node, &ep->uqp->ud_exchanges);
	err = ia->cm->resolve_addr(id, (struct sockaddr *)&ia->addr, &x->remote.sa,
				   KDAT_RESOLVE_TIMEOUT_MS);
	if (err) {
		/* no lookup runs, so no handler: the exchange ends here, and its id below */
		ret = kdat_resolve_failed(err);
		if (ret == KDAT_UNREACHABLE_NOW) {
			kdat_ud_end(x, KDAT_EP_STIM_UD_UNREACHABLE, NULL, 0, NULL);
			ret = KDAT_DAT_SUCCESS;
		} else {
			list_del_init(&x->node);
		}
		mutex_unlock(&ep->lock);
		/* rdma_destroy_id() takes the handler mutex: never under ep->lock */
		ia->cm->destroy_id(id);
		kdat_ud_exchange_put(x);
		return ret;
	}
	if (timeout_us != KDAT_TIMEOUT_INFINITE) {
		refcount_inc(&x->ref);	/* the timeout's */
		queue_delayed_work(kdat_wq, &x->timeout, usecs_to_jiffies(timeout_us));
	}
	mutex_unlock(&ep->lock);
	return KDAT_DAT_SUCCESS;

fail:
	mutex_unlock(&ep->lock);
	kdat_ud_exchange_put(x);
	return ret;
}

/*
 * The requester of a UD request cr, as the accept's event names it: its
 * address and QPN, rdma_cm's UDP Q_Key, and on RoCE an address vector made
 * from the GID table (the SIDR request's own is not handed up by rdma_cm).
 * InfiniBand would need a path query: there the AH is left out.
 */
void kdat_ud_passive_peer(struct kdat_ia *ia, const struct kdat_cr *cr,
			  struct kdat_event_ud *peer)
{
	const struct ib_gid_attr *sgid;
	union kdat_sockaddr local = cr->local_addr, remote = cr->remote_addr;
	union ib_gid gid, dgid;

	kdat_ud_peer_init(peer, &cr->remote_addr, KDAT_UD_PASSIVE);
	peer->qpn = cr->remote_qpn;
	peer->qkey = RDMA_UDP_QKEY;
	if (!rdma_protocol_roce(ia->ibdev, ia->port_num))
		return;
	rdma_ip2gid(&local.sa, &gid);
	rdma_ip2gid(&remote.sa, &dgid);
	sgid = rdma_find_gid_by_port(ia->ibdev, &gid, IB_GID_TYPE_ROCE_UDP_ENCAP, ia->port_num,
				     NULL);
	if (IS_ERR(sgid))
		sgid = rdma_find_gid_by_port(ia->ibdev, &gid, IB_GID_TYPE_ROCE, ia->port_num, NULL);
	if (IS_ERR(sgid))
		return;
	peer->ah.is_global = 1;
	memcpy(peer->ah.dgid, dgid.raw, sizeof(peer->ah.dgid));
	peer->ah.sgid_index = sgid->index;
	peer->ah.hop_limit = IPDEFTTL;
	peer->ah.port_num = ia->port_num;
	peer->flags |= KDAT_UD_AH_VALID;
	rdma_put_gid_attr(sgid);
}

/*
 * A PSP of a process also listens for SIDR requests (a separate id: the
 * port spaces are separate, and rdma_cm refuses a SIDR request on an RC
 * listener).  RSPs and provider-flag PSPs name RC EPs, and kernel consumers
 * have no UD EPs: they do not.
 */
bool kdat_ud_may_listen(struct kdat_sp *sp)
{
	return !sp->is_rsp && !(sp->flags & KDAT_PSP_PROVIDER) && !sp->obj.ctx->kern_name &&
	       sp->ia->cm->init_qp_attr && kdat_uqp_ib(sp->ia);
}
