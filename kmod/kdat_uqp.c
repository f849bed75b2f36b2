// SPDX-License-Identifier: GPL-2.0
/*
 * Userspace QPs (kernel bypass).  A user-QP EP has no QP or CQ in the
 * kernel: the process created an RC QP through libibverbs and owns it.  kdat
 * runs connection management for it (rdma_cm with the QP number in
 * rdma_conn_param, as the kernel serves librdmacm's user QPs in ucma.c) and
 * hands out the attributes of each QP transition, which the process applies
 * with ibv_modify_qp.  The EP's states are the table's (ep_table.h), driven
 * by kdat_ep.c as for any EP; nothing here changes a state except through
 * kdat_ep_step().  The contract for userspace is in include/kdat/uapi/kdat.h.
 *
 * The active side, after the REP: kdat_ep.c calls kdat_uqp_rep_arrived()
 * from the id's handler instead of moving a kernel QP; the process applies
 * RTR and RTS and calls kdat_uqp_establish(), which sends the RTU under the
 * id's handler mutex.  That mutex ranks above ep->lock, so the id is taken
 * under ep->lock, the lock dropped and the handler mutex taken: while it
 * does, the id is pinned (kdat_ep_pin_id) and whoever detaches it meanwhile
 * destroys it only after the pin is gone (kdat_ep_wait_unpinned(); the
 * handler defers its own destruction), so the mutex cannot vanish under the
 * waiter.
 *
 * This file is the user QP's record, below the EP; the EP operations on a
 * user QP (create, attributes, establish) are in kdat_uqp_ep.c, above it.
 */
#include <linux/slab.h>
#include "kdat_conn.h"

/* The QP number the CM sends for this EP: the user QP's, or the kernel QP's. */
u32 kdat_ep_qpn(struct kdat_ep *ep)
{
	if (ep->uqp)
		return ep->uqp->qpn;
	return ep->qp ? ep->qp->qp_num : 0;
}

/* The IB CM hands a QP's attributes over; otherwise (iWARP) the CM moves the QP. */
bool kdat_uqp_ib(struct kdat_ia *ia)
{
	return rdma_cap_ib_cm(ia->ibdev, ia->port_num);
}

/* IB: QPs 0 and 1 are the special QPs, QPNs have 24 bits; iWARP: any but 0. */
bool kdat_uqp_qpn_valid(struct kdat_ia *ia, u32 qpn)
{
	return kdat_uqp_ib(ia) ? qpn >= 2 && qpn <= 0xffffff : qpn != 0;
}

/*
 * Does another live EP (not self) of this owner on the same device use QP
 * number qpn?  The only association kdat can check (see kdat.h).  The index
 * is by the number an EP had when linked or renumbered; the live number is
 * what counts (a removed device's EPs have none).  Caller holds ctx->lock.
 */
bool kdat_uqp_qpn_in_use(struct kdat_ia *ia, u32 qpn, struct kdat_ep *self)
{
	struct kdat_ep *ep;

	lockdep_assert_held(&ia->obj.ctx->lock);
	hash_for_each_possible(ia->obj.ctx->qpns, ep, qpn_node, qpn)
		if (ep != self && ep->ia->ibdev == ia->ibdev && kdat_ep_qpn(ep) == qpn)
			return true;
	return false;
}

/* A linked EP is found by its QP number from now on.  Caller holds ctx->lock. */
void kdat_ep_qpn_index(struct kdat_ep *ep)
{
	lockdep_assert_held(&ep->obj.ctx->lock);
	hash_add(ep->obj.ctx->qpns, &ep->qpn_node, kdat_ep_qpn(ep));
}

/* No-op for an EP never indexed.  Caller holds ctx->lock. */
void kdat_ep_qpn_unindex(struct kdat_ep *ep)
{
	lockdep_assert_held(&ep->obj.ctx->lock);
	hash_del(&ep->qpn_node);
}

/*
 * ep_reset with a new QP for the EP (qpn; 0: keep its QP): only a user-QP
 * EP has one to change.  Caller holds ctx->lock (the owner's other EPs)
 * and ep->lock.
 */
kdat_ret_t kdat_uqp_check_renumber(struct kdat_ep *ep, u32 qpn)
{
	lockdep_assert_held(&ep->obj.ctx->lock);
	lockdep_assert_held(&ep->lock);
	if (!qpn)
		return KDAT_DAT_SUCCESS;
	if (!ep->uqp || !kdat_uqp_qpn_valid(ep->ia, qpn) ||
	    kdat_uqp_qpn_in_use(ep->ia, qpn, ep))
		return KDAT_ERR(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	return KDAT_DAT_SUCCESS;
}

/* The last reference ends the exchange's hold on its EP. */
void kdat_ud_exchange_put(struct kdat_ud_exchange *x)
{
	if (!refcount_dec_and_test(&x->ref))
		return;
	kdat_obj_put(&x->ep->obj);
	kfree(x);
}

static void kdat_ud_end_work(struct work_struct *work)
{
	struct kdat_ud_exchange *x = container_of(work, struct kdat_ud_exchange, end);

	if (cancel_delayed_work_sync(&x->timeout))
		kdat_ud_exchange_put(x);	/* the timeout's */
	x->ep->ia->cm->destroy_id(x->id);
	kdat_ud_exchange_put(x);		/* the id's */
}

/* A new exchange of ep's, holding a reference on ep; its timeout runs timeout_fn. */
void kdat_ud_exchange_init(struct kdat_ud_exchange *x, struct kdat_ep *ep,
			   work_func_t timeout_fn)
{
	INIT_LIST_HEAD(&x->node);
	INIT_DELAYED_WORK(&x->timeout, timeout_fn);
	INIT_WORK(&x->end, kdat_ud_end_work);
	refcount_set(&x->ref, 1);
	x->ep = ep;
	kdat_obj_get_ref(&ep->obj);
}

/*
 * The EP ends every exchange it has in flight, with no event (free, reset,
 * device removal): their ids go from kdat_wq.  Caller holds ep->lock.
 */
void kdat_uqp_end_exchanges(struct kdat_ep *ep)
{
	struct kdat_ud_exchange *x, *tmp;

	lockdep_assert_held(&ep->lock);
	if (!kdat_ep_is_ud(ep))
		return;
	list_for_each_entry_safe(x, tmp, &ep->uqp->ud_exchanges, node) {
		list_del_init(&x->node);
		queue_work(kdat_wq, &x->end);
	}
}

/*
 * ep_reset: a new connection starts from scratch.  Caller holds ctx->lock
 * (the QP number other EPs are checked against) and ep->lock.
 */
void kdat_uqp_reset(struct kdat_ep *ep, u32 qpn)
{
	lockdep_assert_held(&ep->obj.ctx->lock);
	lockdep_assert_held(&ep->lock);
	if (ep->uqp) {
		kdat_uqp_end_exchanges(ep);
		/* a held DREQ whose connection ended before the process's report */
		atomic_set(&ep->sends_in_flight, 0);
		ep->uqp->rep_arrived = false;
		ep->uqp->rep_pdata_len = 0;
		if (qpn && qpn != ep->uqp->qpn) {	/* kdat_uqp_check_renumber() */
			kdat_ep_qpn_unindex(ep);
			ep->uqp->qpn = qpn;
			kdat_ep_qpn_index(ep);
			kdat_rec_sync(&ep->obj);	/* a NOOP reset is no step */
		}
	}
}

/*
 * Active side, from the id's handler (ep->lock held): the peer accepted.
 * The EP stays ACTIVE_CONNECTION_PENDING; the process is told to move its QP.
 */
void kdat_uqp_rep_arrived(struct kdat_ep *ep, const u8 *pdata, u32 len)
{
	struct kdat_uqp *uqp = ep->uqp;

	lockdep_assert_held(&ep->lock);
	uqp->rep_arrived = true;
	uqp->rep_pdata_len = min_t(u32, len, KDAT_PRIVATE_DATA_MAX);
	memcpy(uqp->rep_pdata, pdata, uqp->rep_pdata_len);
	kdat_evd_post(ep->connect_evd, &(struct kdat_event_info){
		.number = KDAT_EVENT_UQP_CONNECT_RESPONSE, .ep = ep });
}
