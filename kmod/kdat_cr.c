// SPDX-License-Identifier: GPL-2.0
/*
 * Connection requests: query, accept and reject of a request that reached a service
 * point.
 */
#include <linux/slab.h>
#include <rdma/ib_cm.h>
#include "kdat_conn.h"
#include "kdat_trace.h"

static void kdat_cr_rec_fill(struct kdat_record *rec, struct kdat_obj *obj)
{
	struct kdat_cr *cr = container_of(obj, struct kdat_cr, obj);

	rec->state = cr->remote_gone ? KDAT_CR_REMOTE_GONE : KDAT_CR_PENDING;
	rec->owner = kdat_obj_handle(cr->ia);
	rec->link = kdat_obj_handle(cr->sp);
	rec->link2 = kdat_obj_handle(cr->ep);
	kdat_addr_out(&rec->local_addr, &cr->local_addr.sa);
	kdat_addr_out(&rec->remote_addr, &cr->remote_addr.sa);
	kdat_rec_port(rec, cr->ia);
}

/* Before accept/reject: the requester may give up (REJ, timeout). */
static int kdat_cr_cm_event(struct kdat_obj *obj, struct rdma_cm_id *id,
			    struct rdma_cm_event *ev)
{
	struct kdat_cr *cr = container_of(obj, struct kdat_cr, obj);
	struct kdat_ctx *ctx = cr->obj.ctx;

	mutex_lock(&ctx->lock);
	if (ev->event == RDMA_CM_EVENT_REJECTED ||
	    ev->event == RDMA_CM_EVENT_CONNECT_ERROR ||
	    ev->event == RDMA_CM_EVENT_UNREACHABLE ||
	    ev->event == RDMA_CM_EVENT_DISCONNECTED)
		cr->remote_gone = true;
	kdat_rec_sync(&cr->obj);
	mutex_unlock(&ctx->lock);
	return 0;
}

/* as an EP's (kdat_ep_release): cr->ia stays readable while the CR's memory lives */
static void kdat_cr_release(struct kdat_obj *obj)
{
	struct kdat_cr *cr = container_of(obj, struct kdat_cr, obj);

	if (cr->ia)	/* not yet set on a CR that failed to link */
		kdat_obj_put(&cr->ia->obj);
}

const struct kdat_obj_class kdat_cr_class = {
	.rec_type = KDAT_REC_CR,
	.rec_fill = kdat_cr_rec_fill,
	.cm_event = kdat_cr_cm_event,
	.release = kdat_cr_release,
};

/* Caller holds ctx->lock; returns the child id (if still owned) to destroy. */
static struct rdma_cm_id *kdat_cr_kill(struct kdat_cr *cr)
{
	struct rdma_cm_id *id = cr->cm_id;

	lockdep_assert_held(&cr->obj.ctx->lock);
	kdat_obj_unlink(&cr->obj);
	list_del_init(&cr->ia_node);
	cr->cm_id = NULL;
	return id;
}

static void kdat_cr_finish(struct kdat_cr *cr, struct rdma_cm_id *id)
{
	if (id) {
		cr->ia->cm->destroy_id(id);
		kdat_obj_put(&cr->obj);		/* the id's */
	}
	kdat_obj_put(&cr->sp->obj);
	if (cr->ep)
		kdat_obj_put(&cr->ep->obj);
	kdat_obj_put(&cr->obj);			/* the handle table's */
}

kdat_ret_t kdat_cr_query(struct kdat_cr *cr, struct kdat_cr_info *info)
{
	struct kdat_ctx *ctx = cr->obj.ctx;

	memset(info, 0, sizeof(*info));
	mutex_lock(&ctx->lock);
	if (cr->obj.dead) {
		mutex_unlock(&ctx->lock);
		return kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_CR);
	}
	info->sp = cr->sp;
	info->ep = cr->ep;
	info->remote_rdma_read_in = cr->remote_ird;
	info->remote_rdma_read_out = cr->remote_ord;
	info->remote_retry_count = cr->remote_retry_count;
	info->remote_rnr_retry_count = cr->remote_rnr_retry_count;
	info->remote_flow_control = cr->remote_flow_control;
	memcpy(&info->remote_addr, &cr->remote_addr, sizeof(cr->remote_addr));
	memcpy(&info->local_addr, &cr->local_addr, sizeof(cr->local_addr));
	info->private_data_size = cr->private_data_size;
	memcpy(info->private_data, cr->private_data, cr->private_data_size);
	mutex_unlock(&ctx->lock);
	return KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(kdat_cr_query);

/* The IRD/ORD an accept of cr on ep gets: the smaller of ours, the requester's offer and the device's. */
void kdat_ep_accept_depths(struct kdat_ep *ep, struct kdat_cr *cr, u32 *ird, u32 *ord)
{
	*ird = min3(ep->attr.max_rdma_read_in, cr->remote_ord,
		    min_t(u32, ep->ia->ibdev->attrs.max_qp_rd_atom, U8_MAX));
	*ord = min3(ep->attr.max_rdma_read_out, cr->remote_ird,
		    min_t(u32, ep->ia->ibdev->attrs.max_qp_init_rd_atom, U8_MAX));
}

/*
 * rdma_accept() must run under the id's handler mutex, which ranks above
 * ctx->lock and ep->lock: take it first, then revalidate everything under
 * those.
 */
static struct rdma_cm_id *kdat_cr_lock_id(struct kdat_cr *cr)
{
	struct kdat_ctx *ctx = cr->obj.ctx;
	struct rdma_cm_id *id;

	mutex_lock(&ctx->lock);
	id = cr->obj.dead || cr->busy ? NULL : cr->cm_id;
	/* Only the busy owner may kill the CR or take its id from here on. */
	if (id)
		cr->busy = true;
	mutex_unlock(&ctx->lock);
	if (id)
		cr->ia->cm->lock_handler(id);
	return id;
}

static void kdat_cr_unlock_id(struct kdat_cr *cr, struct rdma_cm_id *id)
{
	struct rdma_cm_id *gone = NULL;

	if (!id)
		return;
	cr->ia->cm->unlock_handler(id);
	mutex_lock(&cr->obj.ctx->lock);
	cr->busy = false;
	/*
	 * The device went while we owned the id, so kdat_ia_device_removed()
	 * left it to us: it goes now (rdma_cm's removal waits for it).
	 */
	if (cr->ia->removed && cr->cm_id == id) {
		cr->cm_id = NULL;
		cr->remote_gone = true;
		kdat_rec_sync(&cr->obj);
		gone = id;
	}
	mutex_unlock(&cr->obj.ctx->lock);
	if (gone) {
		cr->ia->cm->destroy_id(gone);
		kdat_obj_put(&cr->obj);		/* the id's */
	}
}

/*
 * What both accepts check before the CR is consumed: private data that fits
 * the reply, a CR still pending, an EP of the caller's, of the same IA and of
 * the request's kind (RC or UD; an RC request defaults to the PSP's own EP),
 * in a state that takes `stimulus`, on a device still there.  On success the
 * id's handler mutex, ctx->lock and the EP's lock are held, in that order
 * (the CR's id: *idp; the EP: *epp); on failure none is.
 */
static kdat_ret_t kdat_cr_claim(struct kdat_cr *cr, struct kdat_ep **epp,
				const void *pdata, s32 pdata_size,
				unsigned int stimulus, struct rdma_cm_id **idp)
{
	struct kdat_ctx *ctx = cr->obj.ctx;
	struct kdat_ep *ep = *epp;
	struct rdma_cm_id *id;
	kdat_ret_t ret;

	*idp = NULL;
	ret = kdat_check_private_data(pdata, pdata_size,
				      kdat_pdata_max(cr->ia, cr->ud ? KDAT_IB_SIDR_REP_FIELD :
							     KDAT_IB_REP_FIELD));
	if (ret)
		return ret;
	if (ep && ep->obj.ctx != ctx)
		return kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);

	id = kdat_cr_lock_id(cr);
	mutex_lock(&ctx->lock);
	if (cr->obj.dead || !id || cr->cm_id != id) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_CR);
		goto refused;
	}
	/* a consumer-flag PSP's CR, and every UD one, names no EP */
	if (!ep)
		ep = cr->ep;
	if (!ep) {
		ret = kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
		goto refused;
	}
	mutex_lock(&ep->lock);
	if (ep->obj.dead)
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
	else if (ep->ia != cr->ia || (cr->ep && cr->ep != ep) || kdat_ep_is_ud(ep) != cr->ud)
		ret = kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	else
		ret = kdat_ep_check(ep, stimulus);
	if (!ret && ep->ia->removed)
		ret = kdat_invalid_state(ep);
	if (!ret) {
		*epp = ep;
		*idp = id;
		return KDAT_DAT_SUCCESS;
	}
	mutex_unlock(&ep->lock);
refused:
	mutex_unlock(&ctx->lock);
	kdat_cr_unlock_id(cr, id);
	return ret;
}

/*
 * A UD request, accepted on a UD EP (kdat_cr_claim's locks held): the SIDR
 * reply names the EP's QP and goes at once (the QP has been in RTS since its
 * creation), and the EP's ESTABLISHED names the requester.  The CR and its
 * id end with the call.
 */
static kdat_ret_t kdat_cr_accept_ud(struct kdat_cr *cr, struct kdat_ep *ep,
				    struct rdma_cm_id *id, const void *pdata, s32 pdata_size)
{
	struct rdma_conn_param param = {};
	u8 wire[KDAT_PDATA_WIRE_MAX];
	struct kdat_event_ud peer;
	int err;

	param.qp_num = ep->uqp->qpn;
	kdat_ep_step(ep, KDAT_EP_STIM_UD_ACCEPT, NULL, 0);
	mutex_unlock(&ep->lock);
	/* consumed: the reply goes without our locks, under the id's handler mutex */
	list_del_init(&cr->ia_node);
	kdat_obj_unlink(&cr->obj);
	cr->cm_id = NULL;
	kdat_obj_get_ref(&ep->obj);
	mutex_unlock(&cr->obj.ctx->lock);

	kdat_ia_count(cr->ia, KDAT_IA_COUNTER_ACCEPTS);
	/* rdma_cm takes no Q_Key of 0: name its UDP port space's own */
	param.qkey = RDMA_UDP_QKEY;
	param.private_data = wire;
	param.private_data_len = kdat_pdata_wrap(cr->ia, wire, pdata, pdata_size);
	err = cr->remote_gone ? -ECONNRESET : ep->cm->accept(id, &param);
	kdat_ud_passive_peer(cr->ia, cr, &peer);
	mutex_lock(&ep->lock);
	if (!ep->obj.dead && !err)
		kdat_ep_step_ud(ep, KDAT_EP_STIM_UD_ESTABLISHED, cr->private_data,
				cr->private_data_size, &peer);
	else if (!ep->obj.dead)
		kdat_ep_step_ud(ep, KDAT_EP_STIM_UD_UNREACHABLE, NULL, 0, &peer);
	mutex_unlock(&ep->lock);
	kdat_cr_unlock_id(cr, id);
	/* the reply is sent (ib_cm keeps it until it has gone): the id may go */
	kdat_cr_finish(cr, id);
	kdat_obj_put(&ep->obj);
	return KDAT_DAT_SUCCESS;
}

kdat_ret_t kdat_cr_accept(struct kdat_cr *cr, struct kdat_ep *ep, const void *pdata,
			  s32 pdata_size)
{
	struct kdat_ctx *ctx = cr->obj.ctx;
	struct rdma_conn_param param = {};
	struct rdma_cm_id *id, *dead_id = NULL;
	bool ctx_locked = true;
	u8 wire[KDAT_PDATA_WIRE_MAX];
	kdat_ret_t ret;
	int err;

	ret = kdat_cr_claim(cr, &ep, pdata, pdata_size,
			    cr->ud ? KDAT_EP_STIM_UD_ACCEPT : KDAT_EP_STIM_ACCEPT, &id);
	if (ret)
		return ret;
	if (cr->ud)	/* set at its creation */
		return kdat_cr_accept_ud(cr, ep, id, pdata, pdata_size);

	kdat_ep_accept_depths(ep, cr, &ep->ird, &ep->ord);

	/* From here the CR is consumed: the id moves to the EP. */
	list_del_init(&cr->ia_node);
	kdat_obj_unlink(&cr->obj);
	cr->cm_id = NULL;
	id->context = ep;
	kdat_obj_get_ref(&ep->obj);	/* the id's; the CR's id reference goes below */
	ep->cm_id = id;
	ep->active = false;
	kdat_ep_step(ep, KDAT_EP_STIM_ACCEPT, NULL, 0);

	err = cr->remote_gone ? -ECONNRESET : 0;
	/* a user QP is in RTS already: the process applied KDAT_IOC_UQP_ATTR's */
	if (!err && !ep->uqp)
		err = kdat_qp_modify_cm(ep, id, IB_QPS_INIT);
	if (!err && !ep->uqp)
		err = kdat_qp_modify_cm(ep, id, IB_QPS_RTR);
	if (!err && !ep->uqp)
		err = kdat_qp_modify_cm(ep, id, IB_QPS_RTS);
	if (!err) {
		param.private_data = wire;
		param.private_data_len = kdat_pdata_wrap(cr->ia, wire, pdata, pdata_size);
		param.responder_resources = ep->ird;
		param.initiator_depth = ep->ord;
		param.flow_control = ep->attr.flow_control;
		param.rnr_retry_count = ep->attr.rnr_retry_count;
		param.qp_num = kdat_ep_qpn(ep);
		/*
		 * The REP goes out without our locks (no CM call is made under
		 * them); our handler mutex keeps the id, and whatever moves the
		 * EP on meanwhile (free, disconnect) hands the id to an orphan.
		 * The CR is consumed: from here only the EP's lock is needed.
		 */
		mutex_unlock(&ep->lock);
		mutex_unlock(&ctx->lock);
		ctx_locked = false;
		err = ep->cm->accept(id, &param);
		mutex_lock(&ep->lock);
		if (ep->obj.dead || ep->cm_id != id || !kdat_ep_state_accepting(ep->state)) {
			if (err)
				kdat_orphan_retire(id);
			err = 0;
		}
	}
	if (err) {
		/* Establishment cannot complete: dat_cr_accept(3DAT)'s ACCEPT_COMPLETION_ERROR. */
		dead_id = kdat_ep_detach_id(ep);
		kdat_ep_step(ep, KDAT_EP_STIM_ACCEPT_FAILED, NULL, 0);
	}
	mutex_unlock(&ep->lock);
	if (ctx_locked)
		mutex_unlock(&ctx->lock);
	kdat_cr_unlock_id(cr, id);
	/* the consumed CR: its id reference moved to the EP above */
	kdat_obj_put(&cr->obj);
	kdat_cr_finish(cr, NULL);
	if (dead_id)
		kdat_destroy_id_later(ep->ia->cm, dead_id, &ep->obj);
	return KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(kdat_cr_accept);

kdat_ret_t kdat_cr_reject(struct kdat_cr *cr, const void *pdata, s32 pdata_size)
{
	struct kdat_ctx *ctx = cr->obj.ctx;
	struct kdat_ep *provider_ep = NULL;
	struct kdat_ep_wire ep_wire = {};
	u8 wire[KDAT_PDATA_WIRE_MAX];
	struct rdma_cm_id *id;
	bool send_rej;
	kdat_ret_t ret;

	/* a UD request's reject is a SIDR reply: its field is smaller */
	ret = kdat_check_private_data(pdata, pdata_size,
				      kdat_pdata_max(cr->ia, cr->ud ? KDAT_IB_SIDR_REP_FIELD :
							     KDAT_IB_REJ_FIELD));
	if (ret)
		return ret;
	id = kdat_cr_lock_id(cr);
	mutex_lock(&ctx->lock);
	/*
	 * No id and no accept/reject at work on it: the device took the id
	 * (kdat_ia_device_removed).  The CR is still the consumer's to free,
	 * and IA teardown frees CRs this way.
	 */
	if (cr->obj.dead || (id ? cr->cm_id != id : cr->cm_id || cr->busy)) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_CR);
		mutex_unlock(&ctx->lock);
		kdat_cr_unlock_id(cr, id);
		return ret;
	}
	kdat_ia_count(cr->ia, KDAT_IA_COUNTER_REJECTS);
	/* the CR's handler, which sets remote_gone, waits for our handler mutex */
	send_rej = id && !cr->remote_gone;
	if (cr->ep && !cr->ep->obj.dead) {
		mutex_lock(&cr->ep->lock);
		kdat_ep_step(cr->ep, KDAT_EP_STIM_REJECT, NULL, 0);
		mutex_unlock(&cr->ep->lock);
		/* An EP the provider made for this request goes with it (as in DAPL). */
		if (cr->ep->provider_created) {
			provider_ep = cr->ep;
			kdat_obj_get_ref(&provider_ep->obj);
			kdat_ep_kill(provider_ep, &ep_wire);
		}
	}
	kdat_cr_kill(cr);
	mutex_unlock(&ctx->lock);
	/* The REJ after ctx->lock, which the CM's handlers take; the handler mutex keeps the id. */
	if (send_rej)
		cr->ia->cm->reject(id, wire, kdat_pdata_wrap(cr->ia, wire, pdata, pdata_size),
				   IB_CM_REJ_CONSUMER_DEFINED);
	if (id)
		cr->ia->cm->unlock_handler(id);	/* the CR is dead: nobody else takes it */
	kdat_cr_finish(cr, id);
	if (provider_ep) {
		kdat_ep_finish(provider_ep, &ep_wire);
		kdat_obj_put(&provider_ep->obj);
	}
	return KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(kdat_cr_reject);

void kdat_cr_post(struct kdat_cr *cr)
{
	struct kdat_event_info info = {
		.number = KDAT_DAT_CONNECTION_REQUEST_EVENT,
		.sp = cr->sp,
		.cr = cr,
		.ep = cr->ep,
		.private_data_size = cr->private_data_size,
	};

	trace_kdat_cr_arrival(cr->obj.ctx ? kdat_table_id(cr->obj.ctx->table) : 0, cr->sp->obj.handle,
			      cr->obj.handle, cr->ep ? cr->ep->obj.handle : 0, cr->sp->conn_qual,
			      cr->private_data_size, &cr->local_addr.sa, &cr->remote_addr.sa, cr->cm_id);
	cr->sp->obj.last_event = KDAT_DAT_CONNECTION_REQUEST_EVENT;
	cr->sp->obj.events++;
	cr->obj.last_event = KDAT_DAT_CONNECTION_REQUEST_EVENT;
	cr->obj.events++;
	kdat_rec_sync(&cr->sp->obj);
	kdat_rec_sync(&cr->obj);
	memcpy(info.private_data, cr->private_data, cr->private_data_size);
	kdat_evd_post(cr->sp->evd, &info);
}
