// SPDX-License-Identifier: GPL-2.0
/*
 * The EP operations of a userspace QP (kdat_uqp.c has the design): create an
 * EP for the process's QP, hand out the attributes of each QP transition,
 * and establish the connection (the RTU) once the process moved its QP.
 */
#include <linux/slab.h>
#include "kdat_conn.h"

static kdat_ret_t kdat_uqp_create_in(struct kdat_ia *ia, struct kdat_evd *conn,
				     const struct kdat_ep_attr *attr, u32 qpn, u32 flags,
				     struct kdat_ep **out, u32 *handle)
{
	struct kdat_uqp *uqp;
	kdat_ret_t ret;

	/*
	 * Over the IB CM the owner moves its QP with the attributes the CM
	 * gives (rdma_init_qp_attr); the iWARP CM takes the QP by its number
	 * when it connects or accepts and drives it itself (as for librdmacm's
	 * QPs).  A backend without either has no user-owned QPs.
	 */
	if (!ia->cm->init_qp_attr)
		return KDAT_ERR(KDAT_DAT_MODEL_NOT_SUPPORTED, KDAT_DAT_NO_SUBTYPE);
	if (!kdat_uqp_qpn_valid(ia, qpn))
		return KDAT_ERR(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG5);
	if (flags & ~KDAT_UQP_UD)
		return KDAT_ERR(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG6);
	/* UD exchanges are SIDR, an IB CM service: iWARP has none */
	if ((flags & KDAT_UQP_UD) && !kdat_uqp_ib(ia))
		return KDAT_ERR(KDAT_DAT_MODEL_NOT_SUPPORTED, KDAT_DAT_NO_SUBTYPE);
	uqp = kzalloc(sizeof(*uqp), GFP_KERNEL);
	if (!uqp)
		return KDAT_ERR(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
	uqp->qpn = qpn;
	uqp->ud = flags & KDAT_UQP_UD;
	INIT_LIST_HEAD(&uqp->ud_exchanges);
	ret = kdat_ep_create_in(ia, conn, NULL, NULL, attr, uqp, out, handle);
	if (ret)
		kfree(uqp);
	return ret;
}

kdat_ret_t kdat_uqp_create(struct kdat_ia *ia, struct kdat_evd *conn,
			   const struct kdat_ep_attr *attr, u32 qpn, u32 flags, u32 *handle)
{
	return kdat_uqp_create_in(ia, conn, attr, qpn, flags, NULL, handle);
}

/* The attributes kdat_uqp_attr hands out; alternate paths are not offered. */
#define KDAT_UQP_MASK (IB_QP_STATE | IB_QP_ACCESS_FLAGS | IB_QP_PKEY_INDEX | IB_QP_PORT | \
		       IB_QP_AV | IB_QP_PATH_MTU | IB_QP_TIMEOUT | IB_QP_RETRY_CNT | \
		       IB_QP_RNR_RETRY | IB_QP_RQ_PSN | IB_QP_MAX_QP_RD_ATOMIC | \
		       IB_QP_MIN_RNR_TIMER | IB_QP_SQ_PSN | IB_QP_MAX_DEST_RD_ATOMIC | \
		       IB_QP_DEST_QPN | IB_QP_QKEY)

static void kdat_uqp_attr_out(struct kdat_uqp_attr *out, const struct ib_qp_attr *a, int mask)
{
	mask &= KDAT_UQP_MASK;
	out->attr_mask = mask;
	out->qp_state = a->qp_state;
	if (mask & IB_QP_ACCESS_FLAGS)
		out->qp_access_flags = a->qp_access_flags;
	if (mask & IB_QP_PATH_MTU)
		out->path_mtu = a->path_mtu;
	if (mask & IB_QP_RQ_PSN)
		out->rq_psn = a->rq_psn;
	if (mask & IB_QP_SQ_PSN)
		out->sq_psn = a->sq_psn;
	if (mask & IB_QP_DEST_QPN)
		out->dest_qp_num = a->dest_qp_num;
	if (mask & IB_QP_PKEY_INDEX)
		out->pkey_index = a->pkey_index;
	if (mask & IB_QP_PORT)
		out->port_num = a->port_num;
	if (mask & IB_QP_MAX_QP_RD_ATOMIC)
		out->max_rd_atomic = a->max_rd_atomic;
	if (mask & IB_QP_MAX_DEST_RD_ATOMIC)
		out->max_dest_rd_atomic = a->max_dest_rd_atomic;
	if (mask & IB_QP_MIN_RNR_TIMER)
		out->min_rnr_timer = a->min_rnr_timer;
	if (mask & IB_QP_TIMEOUT)
		out->timeout = a->timeout;
	if (mask & IB_QP_RETRY_CNT)
		out->retry_cnt = a->retry_cnt;
	if (mask & IB_QP_RNR_RETRY)
		out->rnr_retry = a->rnr_retry;
	if (mask & IB_QP_AV)
		kdat_uqp_ah_out(&out->ah_attr, &a->ah_attr);
	if (mask & IB_QP_QKEY)
		out->qkey = a->qkey;
}

/*
 * A UD QP's transitions, as librdmacm makes them for a UD id: INIT with the
 * Q_Key of rdma_cm's UDP port space (the one its SIDR replies announce) on
 * the IA's port, then RTR and RTS with nothing from any peer.  Allowed
 * wherever the EP may start an exchange.  Caller holds ep->lock.
 */
static kdat_ret_t kdat_uqp_attr_ud(struct kdat_ep *ep, u32 qp_state, struct ib_qp_attr *a,
				   int *mask)
{
	lockdep_assert_held(&ep->lock);
	*mask = IB_QP_STATE;
	if (qp_state == KDAT_QPS_ERR)
		return KDAT_DAT_SUCCESS;
	if (!kdat_ep_state_allows(ep->state, KDAT_EP_STIM_UD_CONNECT))
		return KDAT_ERR(KDAT_DAT_INVALID_STATE, kdat_ep_invalid_state_subtype(ep->state));
	if (ep->ia->removed)
		return KDAT_ERR(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE);
	switch (qp_state) {
	case KDAT_QPS_INIT:
		a->pkey_index = 0;
		a->port_num = ep->ia->port_num;
		a->qkey = RDMA_UDP_QKEY;
		*mask |= IB_QP_PKEY_INDEX | IB_QP_PORT | IB_QP_QKEY;
		break;
	case KDAT_QPS_RTS:
		a->sq_psn = 0;
		*mask |= IB_QP_SQ_PSN;
		break;
	}
	return KDAT_DAT_SUCCESS;
}

/*
 * Passive side: cr is the request ep will accept.  The checks kdat_cr_accept
 * makes, so the attributes are those of the accept that follows.  Caller
 * holds ctx->lock (the CR's id lives while it is cr->cm_id under that lock)
 * and ep->lock.
 */
static kdat_ret_t kdat_uqp_accept_id(struct kdat_ep *ep, struct kdat_cr *cr,
				     struct rdma_cm_id **id, u32 *ird, u32 *ord)
{
	kdat_ret_t ret;

	lockdep_assert_held(&ep->obj.ctx->lock);
	lockdep_assert_held(&ep->lock);
	if (cr->obj.dead || !cr->cm_id || cr->busy)
		return KDAT_ERR(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_CR);
	/* a UD request has no path for an RC QP: kdat_cr_accept() refuses it too */
	if (ep->ia != cr->ia || (cr->ep && cr->ep != ep) || cr->ud)
		return KDAT_ERR(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	ret = kdat_ep_check(ep, KDAT_EP_STIM_ACCEPT);
	if (ret)
		return ret;
	*id = cr->cm_id;
	kdat_ep_accept_depths(ep, cr, ird, ord);
	return KDAT_DAT_SUCCESS;
}

kdat_ret_t kdat_uqp_attr(struct kdat_ep *ep, struct kdat_cr *cr, u32 qp_state,
			 struct kdat_uqp_attr *out)
{
	struct kdat_ctx *ctx = ep->obj.ctx;
	struct ib_qp_attr a = {};
	struct rdma_cm_id *id = NULL;
	u32 ird = 0, ord = 0;
	kdat_ret_t ret = KDAT_DAT_SUCCESS;
	int mask = 0;

	if (qp_state != KDAT_QPS_INIT && qp_state != KDAT_QPS_RTR &&
	    qp_state != KDAT_QPS_RTS && qp_state != KDAT_QPS_ERR)
		return KDAT_ERR(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG3);
	/* a CR only says where RTR and RTS come from */
	if (cr && qp_state != KDAT_QPS_RTR && qp_state != KDAT_QPS_RTS)
		return KDAT_ERR(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	if (cr && cr->obj.ctx != ctx)
		return KDAT_ERR(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_CR);

	/* ctx->lock for the CR, ep->lock for the EP */
	mutex_lock(&ctx->lock);
	mutex_lock(&ep->lock);
	if (ep->obj.dead) {
		ret = KDAT_ERR(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
		goto out;
	}
	if (!ep->uqp) {		/* a kernel QP is kdat's to move */
		ret = KDAT_ERR(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG1);
		goto out;
	}
	a.qp_state = qp_state;
	if (kdat_ep_is_ud(ep)) {
		/* no connection to take anything from: a CR names a peer, not a path */
		ret = cr ? KDAT_ERR(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2) :
			   kdat_uqp_attr_ud(ep, qp_state, &a, &mask);
		if (!ret)
			kdat_uqp_attr_out(out, &a, mask);
		goto out;
	}
	switch (qp_state) {
	case KDAT_QPS_ERR:
		mask = IB_QP_STATE;	/* always allowed: it only stops the QP */
		break;
	case KDAT_QPS_INIT:
		/* before any connection: where dat_ep_modify may change the QP */
		if (!kdat_ep_state_allows(ep->state, KDAT_EP_STIM_MODIFY)) {
			ret = KDAT_ERR(KDAT_DAT_INVALID_STATE,
				       kdat_ep_invalid_state_subtype(ep->state));
			goto out;
		}
		if (ep->ia->removed) {
			ret = KDAT_ERR(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE);
			goto out;
		}
		a.qp_access_flags = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE |
				    IB_ACCESS_REMOTE_READ;
		mask = IB_QP_STATE | IB_QP_ACCESS_FLAGS;
		if (!kdat_uqp_ib(ep->ia))	/* iWARP: the access flags only, as iw_cm's */
			break;
		/* what rdma_cm gives an RC id on RoCE: P_Key index 0 of the IA's port */
		a.pkey_index = 0;
		a.port_num = ep->ia->port_num;
		mask |= IB_QP_PKEY_INDEX | IB_QP_PORT;
		break;
	default:	/* RTR, RTS */
		if (cr) {
			ret = kdat_uqp_accept_id(ep, cr, &id, &ird, &ord);
			if (ret)
				goto out;
		} else if (kdat_ep_state_connecting(ep->state) &&
			   ep->uqp->rep_arrived && ep->cm_id) {
			id = ep->cm_id;
			ird = ep->ird;
			ord = ep->ord;
		} else {
			ret = KDAT_ERR(KDAT_DAT_INVALID_STATE,
				       kdat_ep_invalid_state_subtype(ep->state));
			goto out;
		}
		if (ep->ia->removed) {
			ret = KDAT_ERR(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE);
			goto out;
		}
		/*
		 * iWARP: nothing to apply (mask 0): the CM moves the QP to RTS
		 * when the MPA exchange is done.  Only a passive side asks (its
		 * accept's RTR/RTS); no REP reaches an active one.
		 */
		if (!kdat_uqp_ib(ep->ia))
			break;
		if (ep->ia->cm->init_qp_attr(id, &a, &mask)) {
			ret = KDAT_ERR(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE);
			goto out;
		}
		if (qp_state == KDAT_QPS_RTR) {
			a.max_dest_rd_atomic = ird;
			mask |= IB_QP_MAX_DEST_RD_ATOMIC;
		} else {
			a.max_rd_atomic = ord;
			mask |= IB_QP_MAX_QP_RD_ATOMIC;
		}
		break;
	}
	kdat_uqp_attr_out(out, &a, mask);
out:
	mutex_unlock(&ep->lock);
	mutex_unlock(&ctx->lock);
	return ret;
}

static void kdat_uqp_unpin(struct kdat_ep *ep)
{
	mutex_lock(&ep->lock);
	ep->uqp->establishing = false;
	mutex_unlock(&ep->lock);
	kdat_ep_unpin_id(ep);
}

kdat_ret_t kdat_uqp_establish(struct kdat_ep *ep, u32 flags)
{
	struct rdma_cm_id *id, *dead = NULL;
	struct kdat_uqp *uqp;
	kdat_ret_t ret = KDAT_DAT_SUCCESS;
	int err;

	if (flags & ~KDAT_UQP_ESTABLISH_FAILED)
		return KDAT_ERR(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	mutex_lock(&ep->lock);
	uqp = ep->uqp;
	if (ep->obj.dead)
		ret = KDAT_ERR(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
	else if (!uqp)
		ret = KDAT_ERR(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG1);
	else if (!kdat_ep_state_connecting(ep->state) || !uqp->rep_arrived ||
		 !ep->cm_id || uqp->establishing)
		ret = KDAT_ERR(KDAT_DAT_INVALID_STATE, kdat_ep_invalid_state_subtype(ep->state));
	if (ret) {
		mutex_unlock(&ep->lock);
		return ret;
	}
	uqp->establishing = true;
	id = kdat_ep_pin_id(ep);
	mutex_unlock(&ep->lock);

	ep->ia->cm->lock_handler(id);
	mutex_lock(&ep->lock);
	if (!kdat_ep_attempt_on(ep, id)) {
		/* timed out, disconnected or freed meanwhile: that outcome is posted */
		ret = KDAT_ERR(KDAT_DAT_INVALID_STATE, kdat_ep_invalid_state_subtype(ep->state));
		mutex_unlock(&ep->lock);
		goto out;
	}
	uqp->rep_arrived = false;
	mutex_unlock(&ep->lock);
	/*
	 * The RTU, as rdma_cm sends it for librdmacm's user QPs: without
	 * ep->lock, which no CM call is made under; the handler mutex keeps
	 * the id.
	 */
	err = flags ? -ECONNABORTED : ep->ia->cm->accept(id, NULL);
	mutex_lock(&ep->lock);
	if (!kdat_ep_attempt_on(ep, id)) {
		/* it ended while the RTU went out: its outcome is posted, its id goes */
		ret = KDAT_ERR(KDAT_DAT_INVALID_STATE, kdat_ep_invalid_state_subtype(ep->state));
	} else if (err) {
		/* destroying the id in this state sends the REJ */
		dead = kdat_ep_detach_id(ep);
		kdat_ep_step(ep, KDAT_EP_STIM_BROKEN, NULL, 0);
	} else {
		kdat_ep_step(ep, KDAT_EP_STIM_ESTABLISHED, uqp->rep_pdata, uqp->rep_pdata_len);
	}
	mutex_unlock(&ep->lock);
out:
	ep->ia->cm->unlock_handler(id);
	kdat_uqp_unpin(ep);
	kdat_ep_destroy_id(ep, dead);
	return ret;
}
#if IS_ENABLED(CONFIG_KUNIT)
kdat_ret_t kdat_test_uqp_create(struct kdat_ia *ia, struct kdat_evd *conn,
				const struct kdat_ep_attr *attr, u32 qpn, u32 flags,
				struct kdat_ep **out)
{
	return kdat_uqp_create_in(ia, conn, attr, qpn, flags, out, NULL);
}
EXPORT_SYMBOL_GPL(kdat_test_uqp_create);

kdat_ret_t kdat_test_uqp_establish(struct kdat_ep *ep, u32 flags)
{
	return kdat_uqp_establish(ep, flags);
}
EXPORT_SYMBOL_GPL(kdat_test_uqp_establish);
#endif
