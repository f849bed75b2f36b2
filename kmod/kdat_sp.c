// SPDX-License-Identifier: GPL-2.0
/*
 * Service points: public (PSP) and reserved (RSP) listeners, and the connection
 * requests their rdma_cm ids receive.
 */
#include <linux/module.h>
#include <linux/slab.h>
#include <rdma/ib_cm.h>
#include "kdat_conn.h"

/*
 * Requests a PSP holds before they are accepted or rejected, at most (like
 * somaxconn); requests beyond it are refused: NON_PEER_REJECTED at the
 * requester.  Changeable at run time in /sys/module/kdat/parameters/.
 */
#define KDAT_LISTEN_BACKLOG	128
static unsigned int listen_backlog = KDAT_LISTEN_BACKLOG;
module_param(listen_backlog, uint, 0644);
MODULE_PARM_DESC(listen_backlog, "unanswered connection requests a PSP holds (default 128)");
#define KDAT_RSP_BACKLOG	1

static void kdat_sp_rec_fill(struct kdat_record *rec, struct kdat_obj *obj)
{
	struct sockaddr_storage ss;
	struct kdat_sp *sp = container_of(obj, struct kdat_sp, obj);

	rec->type = sp->is_rsp ? KDAT_REC_RSP : KDAT_REC_PSP;
	rec->state = sp->is_rsp && sp->rsp_used ? KDAT_SP_USED : KDAT_SP_LISTENING;
	rec->owner = kdat_obj_handle(sp->ia);
	rec->link = kdat_obj_handle(sp->evd);
	rec->link2 = kdat_obj_handle(sp->ep);
	rec->flags = sp->flags & KDAT_PSP_PROVIDER ? KDAT_RECF_PROVIDER : 0;
	rec->conn_qual = sp->conn_qual;
	if (sp->ia) {
		kdat_ss_with_port(&ss, &sp->ia->addr, sp->conn_qual);
		kdat_addr_out(&rec->local_addr, (struct sockaddr *)&ss);
	}
	kdat_rec_port(rec, sp->ia);
}

static int kdat_sp_cm_event(struct kdat_obj *obj, struct rdma_cm_id *id,
			    struct rdma_cm_event *ev);

/* as an EP's (kdat_ep_release): sp->ia stays readable while the SP's memory lives */
static void kdat_sp_release(struct kdat_obj *obj)
{
	kdat_obj_put(&container_of(obj, struct kdat_sp, obj)->ia->obj);
}

static const struct kdat_obj_class kdat_sp_class = {
	.rec_type = KDAT_REC_PSP,
	.rec_fill = kdat_sp_rec_fill,
	.cm_event = kdat_sp_cm_event,
	.release = kdat_sp_release,
};

/*
 * The PSP's second listener, for UD EPs' SIDR requests on the same port in
 * RDMA_PS_UDP.  Best effort: a port another UDP-space listener holds leaves
 * the PSP to RC requests (a UD requester then finds no listener).
 */
static void kdat_sp_listen_ud(struct kdat_sp *sp, struct sockaddr *addr)
{
	struct rdma_cm_id *id;
	int err;

	if (!kdat_ud_may_listen(sp))
		return;
	id = sp->ia->cm->create_id(sp->obj.ctx->net, kdat_cm_upcall, sp, sp->obj.ctx->kern_name,
				   RDMA_PS_UDP);
	if (IS_ERR(id))
		return;
	err = sp->ia->cm->bind_addr(id, addr);
	if (!err)
		err = sp->ia->cm->listen(id, KDAT_LISTEN_BACKLOG);
	if (err) {
		kdat_destroy_id_later(sp->ia->cm, id, NULL);
		return;
	}
	kdat_obj_get_ref(&sp->obj);	/* the id's */
	sp->listen_ud_id = id;
}

static kdat_ret_t kdat_sp_listen(struct kdat_sp *sp)
{
	struct sockaddr_storage addr;
	struct rdma_cm_id *id;
	int err;

	id = sp->ia->cm->create_id(sp->obj.ctx->net, kdat_cm_upcall, sp, sp->obj.ctx->kern_name,
				   RDMA_PS_TCP);
	if (IS_ERR(id))
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_DEVICE);
	kdat_ss_with_port(&addr, &sp->ia->addr, sp->conn_qual);
	err = sp->ia->cm->bind_addr(id, (struct sockaddr *)&addr);
	if (!err)
		err = sp->ia->cm->listen(id, sp->is_rsp ? KDAT_RSP_BACKLOG : KDAT_LISTEN_BACKLOG);
	if (err) {
		/* rdma_destroy_id() takes the handler mutex: never under ctx->lock */
		kdat_destroy_id_later(sp->ia->cm, id, NULL);
		if (err == -EADDRINUSE)
			return kdat_err(KDAT_DAT_CONN_QUAL_IN_USE, KDAT_DAT_NO_SUBTYPE);
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_NO_SUBTYPE);
	}
	kdat_obj_get_ref(&sp->obj);	/* the id's */
	sp->listen_id = id;
	kdat_sp_listen_ud(sp, (struct sockaddr *)&addr);
	return KDAT_DAT_SUCCESS;
}

/* A PSP, or (ep set) an RSP on ep; handle: as for kdat_ia_open_in() */
kdat_ret_t kdat_sp_create_in(struct kdat_ia *ia, u64 conn_qual, struct kdat_evd *evd,
			     u32 flags, struct kdat_ep *ep, struct kdat_sp **out, u32 *handle)
{
	struct kdat_ctx *ctx = ia->obj.ctx;
	struct kdat_ep *locked = NULL;
	struct kdat_sp *sp;
	kdat_ret_t ret;

	if (conn_qual == 0 || conn_qual > U16_MAX)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	if (flags & ~KDAT_PSP_PROVIDER)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG4);
	if (!evd)
		return kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EVD_CR);
	sp = kzalloc(sizeof(*sp), GFP_KERNEL);
	if (!sp)
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
	sp->ia = ia;
	sp->conn_qual = conn_qual;
	sp->flags = flags;
	sp->is_rsp = ep != NULL;

	mutex_lock(&ctx->lock);
	if (ia->obj.dead || ia->closing) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_IA);
		goto err;
	}
	if (ia->removed) {
		ret = kdat_err(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE);
		goto err;
	}
	if (!kdat_evd_fits(evd, ia, KDAT_EVD_CR)) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EVD_CR);
		goto err;
	}
	if (ep) {
		/* held until the EP is the RSP's: nothing moves it on in between */
		mutex_lock(&ep->lock);
		locked = ep;
		if (ep->obj.dead || ep->ia != ia) {
			ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
			goto err;
		}
		ret = kdat_ep_check(ep, KDAT_EP_STIM_RSP_CREATE);
		if (ret)
			goto err;
	}
	if (kdat_obj_add(ctx, &sp->obj, KDAT_OBJ_SP, &kdat_sp_class)) {
		ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
		goto err;
	}
	kdat_obj_get_ref(&ia->obj);	/* kdat_sp_release() drops it */
	ret = kdat_sp_listen(sp);
	if (ret) {
		kdat_obj_unlink(&sp->obj);
		if (locked)
			mutex_unlock(&locked->lock);
		mutex_unlock(&ctx->lock);
		kdat_obj_put(&sp->obj);
		return ret;
	}
	sp->evd = evd;
	kdat_evd_use(evd);
	list_add_tail(&sp->ia_node, &ia->sps);
	if (ep) {
		sp->ep = ep;
		ep->rsp = sp;
		kdat_obj_get_ref(&ep->obj);
		kdat_ep_step(ep, KDAT_EP_STIM_RSP_CREATE, NULL, 0);
		mutex_unlock(&ep->lock);
	}
	kdat_rec_sync(&sp->obj);
	if (handle)
		*handle = sp->obj.handle;
	mutex_unlock(&ctx->lock);
	if (out)
		*out = sp;
	return KDAT_DAT_SUCCESS;
err:
	if (locked)
		mutex_unlock(&locked->lock);
	mutex_unlock(&ctx->lock);
	kfree(sp);
	return ret;
}

kdat_ret_t kdat_psp_create(struct kdat_ia *ia, u64 conn_qual, struct kdat_evd *evd,
			   u32 flags, struct kdat_sp **psp)
{
	return kdat_sp_create_in(ia, conn_qual, evd, flags, NULL, psp, NULL);
}
EXPORT_SYMBOL_GPL(kdat_psp_create);

kdat_ret_t kdat_rsp_create(struct kdat_ia *ia, u64 conn_qual, struct kdat_ep *ep,
			   struct kdat_evd *evd, struct kdat_sp **rsp)
{
	if (!ep)
		return kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
	return kdat_sp_create_in(ia, conn_qual, evd, KDAT_PSP_CONSUMER, ep, rsp, NULL);
}
EXPORT_SYMBOL_GPL(kdat_rsp_create);

/* Caller holds ctx->lock; returns the listening id to destroy after unlocking. */
struct rdma_cm_id *kdat_sp_kill(struct kdat_sp *sp)
{
	struct rdma_cm_id *id = sp->listen_id;
	struct kdat_ep *ep = sp->ep;

	lockdep_assert_held(&sp->obj.ctx->lock);
	kdat_obj_unlink(&sp->obj);
	list_del_init(&sp->ia_node);
	sp->listen_id = NULL;
	if (ep) {
		sp->ep = NULL;
		if (ep->rsp == sp) {
			mutex_lock(&ep->lock);
			ep->rsp = NULL;
			kdat_ep_step(ep, KDAT_EP_STIM_RSP_FREE, NULL, 0);
			mutex_unlock(&ep->lock);
		}
		kdat_obj_put(&ep->obj);
	}
	return id;
}

void kdat_sp_finish(struct kdat_sp *sp, struct rdma_cm_id *id)
{
	struct kdat_ctx *ctx = sp->obj.ctx;
	struct rdma_cm_id *ud_id;

	if (id) {
		sp->ia->cm->destroy_id(id);
		kdat_obj_put(&sp->obj);
	}
	/* the device's removal may have taken it meanwhile */
	mutex_lock(&ctx->lock);
	ud_id = sp->listen_ud_id;
	sp->listen_ud_id = NULL;
	mutex_unlock(&ctx->lock);
	if (ud_id) {
		sp->ia->cm->destroy_id(ud_id);
		kdat_obj_put(&sp->obj);
	}
	mutex_lock(&ctx->lock);
	kdat_evd_unuse(sp->evd);
	sp->evd = NULL;
	mutex_unlock(&ctx->lock);
	kdat_obj_put(&sp->obj);
}

kdat_ret_t kdat_sp_free(struct kdat_sp *sp)
{
	struct kdat_ctx *ctx = sp->obj.ctx;
	struct rdma_cm_id *id;

	mutex_lock(&ctx->lock);
	if (sp->obj.dead) {
		mutex_unlock(&ctx->lock);
		return kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_PSP);
	}
	id = kdat_sp_kill(sp);
	mutex_unlock(&ctx->lock);
	kdat_sp_finish(sp, id);
	return KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(kdat_sp_free);

/* Caller holds ctx->lock: are as many requests pending on sp as it may hold? */
static bool kdat_sp_backlog_full(struct kdat_sp *sp)
{
	u32 limit = max_t(u32, READ_ONCE(listen_backlog), 1), n = 0;
	struct kdat_cr *cr;

	lockdep_assert_held(&sp->obj.ctx->lock);
	list_for_each_entry(cr, &sp->ia->crs, ia_node)
		if (cr->sp == sp && ++n >= limit)
			return true;
	return false;
}

/*
 * Refuses a request kdat cannot take, as the provider's reject so that a kdat
 * requester reports NON_PEER_REJECTED (dat_ep_dup_connect(3DAT) lists a full
 * "Backlog of the requested Service Point" among its causes): marked in
 * kdat's header, or for a raw IA the IB CM's own "no resources" reason, which
 * a plain rdma_cm peer sees as a reject that is not the consumer's.  The
 * handler then returns non-zero and rdma_cm destroys the id.
 */
static void kdat_cm_refuse(struct kdat_ia *ia, struct rdma_cm_id *id)
{
	u8 hdr[KDAT_PDATA_HDR];

	if (ia->pdata_raw) {
		ia->cm->reject(id, NULL, 0, IB_CM_REJ_NO_RESOURCES);
		return;
	}
	kdat_pdata_wrap(ia, hdr, NULL, 0);
	hdr[3] |= KDAT_PDATA_F_PROVIDER;
	ia->cm->reject(id, hdr, sizeof(hdr), IB_CM_REJ_CONSUMER_DEFINED);
}

/* A request arrived on a listener; returns non-zero to have rdma_cm refuse it. */
static int kdat_cm_request(struct kdat_sp *sp, struct rdma_cm_id *id,
			   struct rdma_cm_event *ev)
{
	struct kdat_ctx *ctx = sp->obj.ctx;
	struct kdat_ia *ia = sp->ia;
	struct kdat_ep *pep = NULL;
	struct kdat_cr *cr;
	const u8 *pdata;
	kdat_ret_t ret;
	u32 len;

	cr = kzalloc(sizeof(*cr), GFP_KERNEL);
	if (!cr)
		return -ENOMEM;
	/* a SIDR request, on the UD listener of a PSP that may have one */
	cr->ud = id->ps == RDMA_PS_UDP;
	if (cr->ud && !kdat_ud_may_listen(sp))
		goto refuse_unlocked;
	if (sp->flags & KDAT_PSP_PROVIDER) {
		static const struct kdat_ep_attr defaults;

		pep = kdat_ep_new(ia, &defaults, NULL, &ret);
		if (!pep) {
			kfree(cr);
			/* -ENOMEM makes the CM drop the REQ so that it is retried */
			if (KDAT_RET_TYPE(ret) == KDAT_DAT_INSUFFICIENT_RESOURCES)
				return -ENOMEM;
			kdat_ia_count(ia, KDAT_IA_COUNTER_REQUESTS_REFUSED);
			return -ECONNREFUSED;
		}
		pep->provider_created = true;
	}

	mutex_lock(&ctx->lock);
	if (sp->obj.dead || ia->removed || (sp->is_rsp && (sp->rsp_used || !sp->ep)) ||
	    kdat_sp_backlog_full(sp))
		goto refuse;
	if (kdat_obj_add(ctx, &cr->obj, KDAT_OBJ_CR, &kdat_cr_class))
		goto refuse;
	if (pep && kdat_ep_link(pep, sp->evd, NULL, NULL)) {
		kdat_obj_unlink(&cr->obj);
		mutex_unlock(&ctx->lock);
		kdat_obj_put(&cr->obj);
		cr = NULL;
		goto refuse_unlocked;
	}
	cr->ia = ia;
	cr->sp = sp;
	cr->cm_id = id;
	kdat_obj_get_ref(&ia->obj);
	kdat_obj_get_ref(&sp->obj);
	kdat_obj_get_ref(&cr->obj);	/* the id's */
	id->context = cr;
	list_add_tail(&cr->ia_node, &ia->crs);
	if (cr->ud) {
		len = kdat_pdata_unwrap_ud(ia, ev->param.ud.private_data,
					   ev->param.ud.private_data_len, &pdata, &cr->remote_qpn);
	} else {
		/*
		 * ib_cm hands the REQ's fields over from our side's point of
		 * view (its responder_resources is the requester's initiator
		 * depth), so swap back: the CR reports the requester's own
		 * IRD and ORD.
		 */
		cr->remote_ird = ev->param.conn.initiator_depth;
		cr->remote_ord = ev->param.conn.responder_resources;
		cr->remote_retry_count = ev->param.conn.retry_count;
		cr->remote_rnr_retry_count = ev->param.conn.rnr_retry_count;
		cr->remote_flow_control = ev->param.conn.flow_control;
		len = kdat_pdata_unwrap(ia, ev->param.conn.private_data,
					ev->param.conn.private_data_len, &pdata);
	}
	memcpy(cr->private_data, pdata, len);
	cr->private_data_size = len;
	kdat_sockaddr_copy(&cr->remote_addr, (struct sockaddr *)&id->route.addr.dst_addr);
	kdat_sockaddr_copy(&cr->local_addr, (struct sockaddr *)&id->route.addr.src_addr);
	if (sp->is_rsp) {
		sp->rsp_used = true;
		cr->ep = sp->ep;
		kdat_obj_get_ref(&cr->ep->obj);
		mutex_lock(&cr->ep->lock);
		kdat_ep_step(cr->ep, KDAT_EP_STIM_CR_ARRIVED, NULL, 0);
		mutex_unlock(&cr->ep->lock);
	} else if (pep) {
		cr->ep = pep;
		kdat_obj_get_ref(&pep->obj);
		mutex_lock(&pep->lock);
		kdat_ep_step(pep, KDAT_EP_STIM_PROVIDER_BIND, NULL, 0);
		mutex_unlock(&pep->lock);
	}
	/* counted before the consumer hears of it */
	kdat_ia_count(ia, KDAT_IA_COUNTER_REQUESTS);
	kdat_cr_post(cr);
	mutex_unlock(&ctx->lock);
	if (pep)
		kdat_ia_unuse_pd(ia);
	return 0;

refuse:
	mutex_unlock(&ctx->lock);
refuse_unlocked:
	if (pep) {
		kdat_ep_discard(pep);
		kdat_ia_unuse_pd(ia);
	}
	kfree(cr);
	/* counted before the requester hears of it */
	kdat_ia_count(ia, KDAT_IA_COUNTER_REQUESTS_REFUSED);
	kdat_cm_refuse(ia, id);
	return -ECONNREFUSED;
}

static int kdat_sp_cm_event(struct kdat_obj *obj, struct rdma_cm_id *id,
			    struct rdma_cm_event *ev)
{
	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
		return kdat_cm_request(container_of(obj, struct kdat_sp, obj), id, ev);
	return 0;	/* the listener's own DEVICE_REMOVAL: handled by the ib_client */
}
