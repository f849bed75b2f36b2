// SPDX-License-Identifier: GPL-2.0
/*
 * Endpoints: the state machine driven by include/kdat/ep_table.h, the EP's QP and
 * CQ, connect, dup_connect, disconnect, and the rdma_cm events of an EP's id.
 *
 * Each endpoint owns its own RC QP and CQ from creation on; kdat drives the
 * QP's state itself from rdma_init_qp_attr() (the way librdmacm serves user
 * QPs), so receives can be posted before a connection exists and the same
 * code will serve userspace QPs.
 */
#include <linux/inet.h>
#include <linux/inetdevice.h>
#include <linux/jiffies.h>
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/wait_bit.h>
#include <net/net_namespace.h>
#include <rdma/ib_cm.h>
#include "kdat_conn.h"
#include "kdat_trace.h"

static void kdat_ep_rec_fill(struct kdat_record *rec, struct kdat_obj *obj)
{
	struct kdat_ep *ep = container_of(obj, struct kdat_ep, obj);
	bool connected = kdat_ep_state_connected(ep->state);

	rec->state = ep->state;
	rec->owner = kdat_obj_handle(ep->ia);
	rec->link = kdat_obj_handle(ep->connect_evd);
	rec->link2 = kdat_obj_handle(ep->request_evd);
	rec->transitions = ep->transitions;
	rec->ird = connected ? ep->ird : ep->attr.max_rdma_read_in;
	rec->ord = connected ? ep->ord : ep->attr.max_rdma_read_out;
	rec->flags = (ep->active ? KDAT_RECF_ACTIVE : 0) |
		     (ep->provider_created ? KDAT_RECF_PROVIDER : 0) |
		     (ep->uqp ? KDAT_RECF_USER_QP : 0);
	rec->conn_qual = ep->active ? ep->conn_qual : 0;
	rec->qp_num = kdat_ep_qpn(ep);
	if (ep->cm_id) {
		kdat_sockaddr_copy(&ep->local_addr,
				   (struct sockaddr *)&ep->cm_id->route.addr.src_addr);
		kdat_sockaddr_copy(&ep->remote_addr,
				   (struct sockaddr *)&ep->cm_id->route.addr.dst_addr);
	}
	kdat_addr_out(&rec->local_addr, &ep->local_addr.sa);
	kdat_addr_out(&rec->remote_addr, &ep->remote_addr.sa);
	kdat_rec_port(rec, ep->ia);
}

static int kdat_ep_cm_event(struct kdat_obj *obj, struct rdma_cm_id *id,
			    struct rdma_cm_event *ev);

static struct mutex *kdat_ep_rec_lock(struct kdat_obj *obj)
{
	return &container_of(obj, struct kdat_ep, obj)->lock;
}

/*
 * The EP's reference on its IA lives as long as the EP's memory: a call that
 * holds a dead EP (an ioctl racing the IA's close) may still read ep->ia.
 */
static void kdat_ep_release(struct kdat_obj *obj)
{
	struct kdat_ep *ep = container_of(obj, struct kdat_ep, obj);

	kfree(ep->uqp);
	kdat_obj_put(&ep->ia->obj);
}

/* a CM call may be at work on the id outside ep->lock (kdat_ep_pin_id) */
static void kdat_ep_id_quiesce(struct kdat_obj *obj)
{
	kdat_ep_wait_unpinned(container_of(obj, struct kdat_ep, obj));
}

/*
 * EPs come from a cache of their own: kmalloc would round the structure
 * (720 bytes on x86-64) up to 1 KiB, and a storage target keeps thousands.
 */
static struct kmem_cache *kdat_ep_cache;
/* kdat_obj_free() frees the object's pointer: the EP's own */
static_assert(offsetof(struct kdat_ep, obj) == 0);

int __init kdat_ep_cache_init(void)
{
	kdat_ep_cache = KMEM_CACHE(kdat_ep, SLAB_HWCACHE_ALIGN);
	return kdat_ep_cache ? 0 : -ENOMEM;
}

/* After every EP's release (destroy_workqueue(kdat_wq) ran them). */
void kdat_ep_cache_exit(void)
{
	kmem_cache_destroy(kdat_ep_cache);
}

static const struct kdat_obj_class kdat_ep_class = {
	.rec_type = KDAT_REC_EP,
	.cache = &kdat_ep_cache,
	.rec_fill = kdat_ep_rec_fill,
	.rec_lock = kdat_ep_rec_lock,
	.cm_event = kdat_ep_cm_event,
	.release = kdat_ep_release,
	.id_quiesce = kdat_ep_id_quiesce,
};

static void kdat_post_conn_event(struct kdat_ep *ep, u32 number, const void *pdata,
				 u32 pdata_len, const struct kdat_event_ud *ud)
{
	struct kdat_event_info info = { .number = number, .ep = ep };

	if (ud)
		info.ud = *ud;

	if (pdata && pdata_len) {
		info.private_data_size = min_t(u32, pdata_len, KDAT_PRIVATE_DATA_MAX);
		memcpy(info.private_data, pdata, info.private_data_size);
	}
	kdat_evd_post(ep->connect_evd, &info);
}

/* ---- the endpoint state machine ----------------------------------------------- */

kdat_ret_t kdat_invalid_state(struct kdat_ep *ep)
{
	return kdat_err(KDAT_DAT_INVALID_STATE,
			kdat_ep_invalid_state_subtype(ep->state));
}

/*
 * Stops the connect timeout.  A timer already running finds ep->timer changed
 * and does nothing.  Caller holds ep->lock.
 */
static void kdat_ep_stop_timer(struct kdat_ep *ep)
{
	struct kdat_ep_timer *t = ep->timer;

	lockdep_assert_held(&ep->lock);
	ep->timer = NULL;
	/* 0 or -1: it fired, and the work it queued finds ep->timer changed */
	if (t && hrtimer_try_to_cancel(&t->timer) == 1) {
		kdat_obj_put(&ep->obj);
		kfree(t);
	}
}

/*
 * events/kdat/kdat_ep_step: the table's answer for (state, stimulus), taken or
 * refused, with the connection's addresses: the id's while the EP has one,
 * else those it kept (its record's).  Caller holds ep->lock.
 */
static void kdat_ep_trace(struct kdat_ep *ep, unsigned int stimulus, struct kdat_ep_step step)
{
	bool go = step.action == KDAT_EP_GO;
	struct kdat_trace_conn conn = {
		.src = &ep->local_addr.sa,
		.dst = &ep->remote_addr.sa,
		.id = ep->cm_id,
	};

	if (!trace_kdat_ep_step_enabled())
		return;
	if (ep->cm_id) {
		conn.src = (struct sockaddr *)&ep->cm_id->route.addr.src_addr;
		conn.dst = (struct sockaddr *)&ep->cm_id->route.addr.dst_addr;
	}
	conn.qpn = kdat_ep_qpn(ep);
	trace_kdat_ep_step(ep->obj.ctx ? kdat_table_id(ep->obj.ctx->table) : 0, ep->obj.handle,
			   ep->state, stimulus, step.action, go ? step.next : ep->state,
			   go ? step.event : KDAT_EP_EVENT_NONE, go ? step.effects : 0, &conn);
}

/* The IA's counter of a connection event. */
static int kdat_event_counter(unsigned int event)
{
	switch (event) {
	case KDAT_EP_EVENT_ESTABLISHED:		return KDAT_IA_COUNTER_ESTABLISHED;
	case KDAT_EP_EVENT_PEER_REJECTED:	return KDAT_IA_COUNTER_PEER_REJECTED;
	case KDAT_EP_EVENT_NON_PEER_REJECTED:	return KDAT_IA_COUNTER_NON_PEER_REJECTED;
	case KDAT_EP_EVENT_ACCEPT_COMPLETION_ERROR: return KDAT_IA_COUNTER_ACCEPT_ERRORS;
	case KDAT_EP_EVENT_DISCONNECTED:	return KDAT_IA_COUNTER_DISCONNECTED;
	case KDAT_EP_EVENT_BROKEN:		return KDAT_IA_COUNTER_BROKEN;
	case KDAT_EP_EVENT_TIMED_OUT:		return KDAT_IA_COUNTER_TIMED_OUT;
	case KDAT_EP_EVENT_UNREACHABLE:		return KDAT_IA_COUNTER_UNREACHABLE;
	default:				return -1;
	}
}

/*
 * The IA's counters of a step the table took (KDAT_IA_COUNTERS); moved: to a
 * new state; why: a non-peer reject's reason.  Counted before the event is
 * posted, so that a consumer woken by it reads them.
 */
static void kdat_ep_count(struct kdat_ia *ia, unsigned int stimulus, bool moved,
			  unsigned int event, enum kdat_ia_counter why)
{
	int counter = kdat_event_counter(event);

	if (counter >= 0)
		kdat_ia_count(ia, counter);
	if (event == KDAT_EP_EVENT_NON_PEER_REJECTED)
		kdat_ia_count(ia, why);
	if (!moved)
		return;
	switch (stimulus) {
	case KDAT_EP_STIM_CONNECT:
	case KDAT_EP_STIM_DUP_CONNECT:
		kdat_ia_count(ia, KDAT_IA_COUNTER_CONNECTS);
		break;
	case KDAT_EP_STIM_ACCEPT:
		kdat_ia_count(ia, KDAT_IA_COUNTER_ACCEPTS);
		break;
	case KDAT_EP_STIM_DISCONNECT_GRACEFUL:
	case KDAT_EP_STIM_DISCONNECT_ABRUPT:
		kdat_ia_count(ia, KDAT_IA_COUNTER_DISCONNECTS);
		break;
	}
}

/* kdat_ep_send_done reads ep->dreq without ep->lock, from completion context. */
static void kdat_ep_set_dreq(struct kdat_ep *ep, enum kdat_ep_dreq dreq)
{
	lockdep_assert_held(&ep->lock);
	WRITE_ONCE(ep->dreq, dreq);
}

/*
 * Our own DREQ, sent by kdat_ep_wire_run() once ep->lock is dropped: no CM
 * call under a lock a handler takes.  Until the CM reports DISCONNECTED
 * (the DREP, or the DREQ timed out) the id must live: destroying it cancels
 * a DREQ the MAD layer has not sent yet, and the peer would never hear of
 * the disconnect.  So a freed or reset EP leaves such an id to an orphan.
 * Caller holds ep->lock.
 */
static void kdat_ep_send_dreq(struct kdat_ep *ep, struct kdat_ep_wire *wire)
{
	lockdep_assert_held(&ep->lock);

	if (!ep->cm_id || ep->dreq >= KDAT_DREQ_SENT)
		return;
	kdat_ep_set_dreq(ep, KDAT_DREQ_SENT);
	if (WARN_ON_ONCE(!wire || wire->dreq)) {
		/* every caller passes a wire; this only keeps the DREQ if one does not */
		ep->ia->cm->disconnect(ep->cm_id);
		return;
	}
	wire->dreq = kdat_ep_pin_id(ep);
}

/* After ep->lock: the DREQ a locked section decided on, then the id it gave up. */
static void kdat_ep_wire_run(struct kdat_ep *ep, struct kdat_ep_wire *wire)
{
	if (wire->dreq) {
		ep->cm->disconnect(wire->dreq);
		wire->dreq = NULL;
		kdat_ep_unpin_id(ep);
	}
	kdat_ep_destroy_id(ep, wire->gone);
	wire->gone = NULL;
}

/*
 * The wire effects of a consumer's disconnect (dat_ep_disconnect(3DAT)): the
 * DREQ now, or once the requests in flight are done (the last completion
 * sends it, and the peer's DREP or the CM's DREQ timeout ends it with
 * DISCONNECTED); an attempt's id given up.  Both go to wire, for the caller
 * to do after ep->lock.
 */
static void kdat_ep_apply_wire(struct kdat_ep *ep, unsigned int effects,
			       struct kdat_ep_wire *wire)
{
	struct rdma_cm_id *id;

	if (effects & KDAT_EP_FX_SEND_DREQ) {
		if (ep->dreq == KDAT_DREQ_WAITS)
			kdat_ep_set_dreq(ep, KDAT_DREQ_NONE);
		kdat_ep_send_dreq(ep, wire);
	}
	if (effects & KDAT_EP_FX_DRAIN) {
		/* waiting first: a last completion from now on queues the DREQ */
		kdat_ep_set_dreq(ep, KDAT_DREQ_WAITS);
		if (kdat_ep_graceful_ready(ep)) {
			kdat_ep_set_dreq(ep, KDAT_DREQ_NONE);
			kdat_ep_send_dreq(ep, wire);
		}
	}
	if (!(effects & (KDAT_EP_FX_DROP_ID | KDAT_EP_FX_ORPHAN_ID)))
		return;
	id = kdat_ep_detach_id(ep);
	/* accepted: the requester may be connected already, an orphan ends it */
	if (effects & KDAT_EP_FX_ORPHAN_ID)
		id = kdat_orphan_adopt(ep, id);
	if (!wire) {	/* only kdat_ep_disconnect() gives these up; never here */
		WARN_ON_ONCE(id);
		if (id)
			kdat_destroy_id_later(ep->ia->cm, id, &ep->obj);
		return;
	}
	wire->gone = id;
}

/*
 * The only place an EP's state changes: apply the table's answer for
 * (state, stimulus) with its effects, post the event it names (with the
 * private data the stimulus brought), and return the action.  wire: where
 * the CM work the effects name goes, for after ep->lock (kdat_ep_disconnect).
 * Caller holds ep->lock.
 */
static unsigned int kdat_ep_apply(struct kdat_ep *ep, unsigned int stimulus,
				  const void *pdata, u32 pdata_len, enum kdat_ia_counter why,
				  struct kdat_ep_wire *wire, const struct kdat_event_ud *ud)
{
	struct kdat_ep_step step = kdat_ep_lookup(ep->state, stimulus);
	bool go = step.action == KDAT_EP_GO;

	lockdep_assert_held(&ep->lock);
	kdat_ep_trace(ep, stimulus, step);
	if (!go)
		return step.action;
	/* the timeout need not pin the EP once the attempt is over either way */
	if (step.effects & KDAT_EP_FX_STOP_TIMER)
		kdat_ep_stop_timer(ep);
	/* the DREQ and the id given up: to wire, for after ep->lock */
	kdat_ep_apply_wire(ep, step.effects, wire);
	/* flushed completions reach their EVDs before the event below */
	if (step.effects & KDAT_EP_FX_FLUSH)
		kdat_ep_flush(ep);
	else if (step.effects & KDAT_EP_FX_QP_ERR)
		kdat_qp_set(ep, IB_QPS_ERR);
	kdat_ep_count(ep->ia, stimulus, step.next != ep->state, step.event, why);
	if (step.next != ep->state) {
		WRITE_ONCE(ep->state, step.next);	/* posts read it unlocked */
		ep->transitions++;
		ep->obj.changed_ns = ktime_get_boottime_ns();
	}
	if (step.event != KDAT_EP_EVENT_NONE) {
		ep->obj.last_event = step.event;
		ep->obj.events++;
	}
	/* the record first: a consumer woken by the event may read it at once */
	kdat_rec_sync(&ep->obj);
	ep->rec_syncs++;
	if (step.event != KDAT_EP_EVENT_NONE)
		kdat_post_conn_event(ep, step.event, pdata, pdata_len, ud);
	return step.action;
}

/*
 * A handler's record, for what its work changed besides a step (addresses,
 * IRD/ORD, an attempt's id): unless a step since syncs wrote it already,
 * after all of that work.  Caller holds ep->lock.
 */
static void kdat_ep_rec_sync_since(struct kdat_ep *ep, u32 syncs)
{
	lockdep_assert_held(&ep->lock);
	if (ep->rec_syncs == syncs)
		kdat_rec_sync(&ep->obj);
}

static unsigned int kdat_ep_step_why(struct kdat_ep *ep, unsigned int stimulus,
				     const void *pdata, u32 pdata_len, enum kdat_ia_counter why)
{
	return kdat_ep_apply(ep, stimulus, pdata, pdata_len, why, NULL, NULL);
}

unsigned int kdat_ep_step(struct kdat_ep *ep, unsigned int stimulus,
			  const void *pdata, u32 pdata_len)
{
	return kdat_ep_apply(ep, stimulus, pdata, pdata_len, KDAT_IA_COUNTER_REJECTED_OTHER, NULL,
			     NULL);
}

/* A UD EP's exchange ended (kdat_ud.c): its event carries the peer, ud. */
unsigned int kdat_ep_step_ud(struct kdat_ep *ep, unsigned int stimulus, const void *pdata,
			     u32 pdata_len, const struct kdat_event_ud *ud)
{
	return kdat_ep_apply(ep, stimulus, pdata, pdata_len, KDAT_IA_COUNTER_REJECTED_OTHER, NULL,
			     ud);
}

/* May this stimulus be applied now?  DAT_SUCCESS or the error to return. */
kdat_ret_t kdat_ep_check(struct kdat_ep *ep, unsigned int stimulus)
{
	struct kdat_ep_step step;

	lockdep_assert_held(&ep->lock);
	step = kdat_ep_lookup(ep->state, stimulus);
	if (step.action != KDAT_EP_INVALID)
		return KDAT_DAT_SUCCESS;
	kdat_ep_trace(ep, stimulus, step);	/* a refusal never reaches kdat_ep_step */
	return kdat_invalid_state(ep);
}

/* ---- QP state, driven from rdma_cm's attributes --------------------------------- */

int kdat_qp_modify_cm(struct kdat_ep *ep, struct rdma_cm_id *id,
			     enum ib_qp_state state)
{
	ep->qp_err = false;
	if (state == IB_QPS_RTS)
		kdat_ep_hold_first_sends(ep);	/* iWARP: rdma_connect(3), kdat_qp.c */
	return ep->ia->cm->modify_qp(id, ep->qp, state, ep->ird, ep->ord);
}

void kdat_qp_set(struct kdat_ep *ep, enum ib_qp_state state)
{
	struct ib_qp_attr attr = { .qp_state = state };

	if (!ep->qp || (state == IB_QPS_ERR && ep->qp_err))
		return;
	if (state == IB_QPS_ERR || state == IB_QPS_RESET) {
		kdat_ep_close_posts(ep);
		kdat_ep_flush_held(ep);
	}
	ib_modify_qp(ep->qp, &attr, IB_QP_STATE);
	ep->qp_err = state == IB_QPS_ERR;
}

/*
 * RESET -> INIT on the IA's port, so receives can be posted before any
 * connection exists; connect and accept refine it (INIT -> INIT) from the
 * cm id's attributes, keeping what was posted.
 */
static int kdat_qp_init(struct kdat_ep *ep)
{
	struct ib_qp_attr attr = {
		.qp_state = IB_QPS_INIT,
		.pkey_index = 0,
		.port_num = ep->ia->port_num,
		.qp_access_flags = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE |
				   IB_ACCESS_REMOTE_READ,
	};
	int err;

	if (!ep->qp)	/* a user QP: the process applies KDAT_IOC_UQP_ATTR's INIT */
		return 0;
	ep->qp_err = false;
	err = ib_modify_qp(ep->qp, &attr, IB_QP_STATE | IB_QP_PKEY_INDEX | IB_QP_PORT |
			   IB_QP_ACCESS_FLAGS);
	if (!err)
		kdat_ep_open_posts(ep);
	return err;
}

static kdat_ret_t kdat_ep_attr_check(struct kdat_ia *ia, const struct kdat_ep_attr *a)
{
	struct ib_device_attr *d = &ia->ibdev->attrs;

	if (a->max_rdma_read_in > min_t(u32, d->max_qp_rd_atom, U8_MAX) ||
	    a->max_rdma_read_out > min_t(u32, d->max_qp_init_rd_atom, U8_MAX) ||
	    a->retry_count > 7 || a->rnr_retry_count > 7 || a->flow_control > 1 ||
	    memchr_inv(a->reserved, 0, sizeof(a->reserved)))
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG5);
	if (a->max_recv_dtos > d->max_qp_wr || a->max_request_dtos > d->max_qp_wr ||
	    a->max_recv_iov > d->max_recv_sge || a->max_request_iov > d->max_send_sge)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG5);
	return KDAT_DAT_SUCCESS;
}

static void kdat_ep_attr_defaults(struct kdat_ia *ia, struct kdat_ep_attr *a)
{
	if (!a->max_recv_dtos)
		a->max_recv_dtos = KDAT_DEFAULT_DTOS;
	if (!a->max_request_dtos)
		a->max_request_dtos = KDAT_DEFAULT_DTOS;
	if (!a->max_recv_iov)
		a->max_recv_iov = KDAT_DEFAULT_IOV;
	if (!a->max_request_iov)
		a->max_request_iov = KDAT_DEFAULT_IOV;
	if (!a->retry_count)
		a->retry_count = KDAT_DEFAULT_RETRY_COUNT;
	if (!a->rnr_retry_count)
		a->rnr_retry_count = 7;
}

static void kdat_ep_qp_event(struct ib_event *ev, void *ctx)
{
}

/*
 * Keeps the IA's PD and device (teardown and device removal wait for it)
 * while an EP's QP is made outside ctx->lock; fails once the IA is closing
 * or its device is gone.
 */
static kdat_ret_t kdat_ia_use_pd(struct kdat_ia *ia)
{
	struct kdat_ctx *ctx = ia->obj.ctx;
	kdat_ret_t ret = KDAT_DAT_SUCCESS;

	mutex_lock(&ctx->lock);
	if (ia->obj.dead || ia->closing)
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_IA);
	else if (ia->removed)
		ret = kdat_err(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE);
	else
		atomic_inc(&ia->eps_finishing);
	mutex_unlock(&ctx->lock);
	return ret;
}

/* The last one out wakes the IA's teardown if it waits (atomic_dec_and_test orders). */
void kdat_ia_unuse_pd(struct kdat_ia *ia)
{
	if (atomic_dec_and_test(&ia->eps_finishing) && wq_has_sleeper(&ia->finish_wq))
		wake_up_all(&ia->finish_wq);
}

/*
 * The CQ entries an EP's QP takes: one extra per queue for ib_drain_qp()'s
 * markers.  Its DTO depths are fixed at creation (kdat_ep_modify() does not
 * change them), so its CQ gets back what it gave.
 */
static u32 kdat_ep_cqes(const struct kdat_ep *ep)
{
	return ep->attr.max_recv_dtos + ep->attr.max_request_dtos + 2;
}

static int kdat_ep_alloc_qp(struct kdat_ep *ep)
{
	struct kdat_ia *ia = ep->ia;
	struct ib_qp_init_attr init = {};
	const struct kdat_ep_attr *a = &ep->attr;

	ep->cq = kdat_cq_get(ia, kdat_ep_cqes(ep));
	if (!ep->cq)
		return -ENOMEM;
	init.event_handler = kdat_ep_qp_event;
	init.qp_context = ep;
	init.send_cq = ep->cq;
	init.recv_cq = ep->cq;
	init.cap.max_send_wr = a->max_request_dtos + 1;
	init.cap.max_recv_wr = a->max_recv_dtos + 1;
	init.cap.max_send_sge = a->max_request_iov;
	init.cap.max_recv_sge = a->max_recv_iov;
	init.sq_sig_type = IB_SIGNAL_REQ_WR;
	init.qp_type = IB_QPT_RC;
	ep->qp = ib_create_qp(ia->pd, &init);
	if (IS_ERR(ep->qp)) {
		ep->qp = NULL;
		kdat_cq_put(ia, ep->cq, kdat_ep_cqes(ep));
		ep->cq = NULL;
		return -ENOMEM;
	}
	return 0;
}

static void kdat_ep_resolve_work(struct work_struct *work);

/* Queues graceful_work (below) with the EP reference it drops; any context. */
static void kdat_ep_graceful_queue(struct kdat_ep *ep)
{
	WRITE_ONCE(ep->graceful_queued, true);
	kdat_obj_get_ref(&ep->obj);
	if (!queue_work(kdat_wq, &ep->graceful_work))
		kdat_obj_put(&ep->obj);
}

/*
 * The data path's one report to the EP (kdat_dto.c, kdat_sgl.c): a send
 * completed.  A graceful disconnect proceeds once the last one in flight
 * did.  Any context.
 */
void kdat_ep_send_done(struct kdat_ep *ep)
{
	if (atomic_dec_and_test(&ep->sends_in_flight) && READ_ONCE(ep->dreq) == KDAT_DREQ_WAITS)
		kdat_ep_graceful_queue(ep);
}

/*
 * A graceful disconnect's two waits end here, on kdat_wq.  Its sends
 * completed (kdat_ep_send_done queues this when the last one does): the DREQ goes
 * out.  Its DREQ was answered (kdat_cm_on_disconnected): the EP closes, QP
 * to ERR and flush, then DISCONNECTED.  That close runs here rather than
 * in the CM handler because ib_cm runs every connection's handlers on one
 * thread: a QP's move to ERR there (a firmware command on real hardware,
 * a flush it waits for with requests posted) would hold up every other
 * connection's CM work on the host.
 */
static void kdat_ep_graceful_work(struct work_struct *work)
{
	struct kdat_ep *ep = container_of(work, struct kdat_ep, graceful_work);
	struct kdat_ep_wire wire = {};

	mutex_lock(&ep->lock);
	if (ep->obj.dead) {
		/* kdat_ep_free_hang_up() ended the connection */
	} else if (ep->dreq == KDAT_DREQ_WAITS) {
		if (kdat_ep_state_draining(ep->state) && kdat_ep_graceful_ready(ep)) {
			kdat_ep_set_dreq(ep, KDAT_DREQ_NONE);
			kdat_ep_send_dreq(ep, &wire);	/* DISCONNECTED follows */
		}
	} else if (ep->dreq == KDAT_DREQ_ANSWERED) {
		kdat_ep_set_dreq(ep, KDAT_DREQ_NONE);
		/* STALE if an abrupt disconnect or the device's removal came first */
		kdat_ep_step(ep, KDAT_EP_STIM_DISCONNECTED, NULL, 0);
	}
	mutex_unlock(&ep->lock);
	kdat_ep_wire_run(ep, &wire);
	kdat_obj_put(&ep->obj);
}

/* uqp: a user QP's state (kdat_uqp.c), which the EP takes over; NULL: a kernel QP. */
struct kdat_ep *kdat_ep_new(struct kdat_ia *ia, const struct kdat_ep_attr *attr,
				   struct kdat_uqp *uqp, kdat_ret_t *ret)
{
	struct kdat_ep *ep;

	*ret = kdat_ep_attr_check(ia, attr);
	if (*ret)
		return NULL;
	*ret = kdat_ia_use_pd(ia);
	if (*ret)
		return NULL;
	ep = kmem_cache_zalloc(kdat_ep_cache, GFP_KERNEL);
	if (!ep) {
		kdat_ia_unuse_pd(ia);
		*ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
		return NULL;
	}
	mutex_init(&ep->lock);
	ep->ia = ia;
	ep->cm = ia->cm;
	ep->attr = *attr;
	kdat_ep_attr_defaults(ia, &ep->attr);
	ep->state = KDAT_EP_UNCONNECTED;
	INIT_LIST_HEAD(&ep->ia_node);
	INIT_HLIST_NODE(&ep->qpn_node);
	if (!uqp && kdat_ep_alloc_qp(ep)) {
		kmem_cache_free(kdat_ep_cache, ep);
		kdat_ia_unuse_pd(ia);
		*ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_TEP);
		return NULL;
	}
	INIT_WORK(&ep->graceful_work, kdat_ep_graceful_work);
	INIT_WORK(&ep->resolve_work, kdat_ep_resolve_work);
	init_completion(&ep->qp_freed);
	spin_lock_init(&ep->post_lock);
	if (kdat_ep_wrs_init(ep, ia->own_ctx && !uqp) || kdat_qp_init(ep)) {
		kdat_ep_free_qp(ep);
		kdat_ep_wrs_exit(ep);
		kmem_cache_free(kdat_ep_cache, ep);
		kdat_ia_unuse_pd(ia);
		*ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
		return NULL;
	}
	ep->uqp = uqp;
	return ep;	/* the caller links or discards it, then kdat_ia_unuse_pd() */
}

/*
 * Frees the EP's QP and CQ once.  The consumer's kdat_ep_free() (no lock held)
 * and a device removal (ep->lock held) may both get here: the second waits
 * until the first has destroyed them, so that on return from either no
 * completion can run.
 */
void kdat_ep_free_qp(struct kdat_ep *ep)
{
	if (atomic_xchg(&ep->qp_freeing, 1)) {
		wait_for_completion(&ep->qp_freed);
		return;
	}
	/*
	 * What is still posted completes (flushed) before the QP goes: a
	 * destroyed QP's requests never complete, and their owners wait.
	 */
	if (ep->qp) {
		kdat_ep_close_posts(ep);
		kdat_ep_flush_held(ep);
		if (READ_ONCE(ep->ever_posted))
			ib_drain_qp(ep->qp);
		ib_destroy_qp(ep->qp);
	}
	if (ep->cq)
		kdat_cq_put(ep->ia, ep->cq, kdat_ep_cqes(ep));
	ep->qp = NULL;
	ep->cq = NULL;
	complete_all(&ep->qp_freed);
}

/* An EP that never got linked: everything it allocated. */
void kdat_ep_discard(struct kdat_ep *ep)
{
	kdat_ep_free_qp(ep);
	kdat_ep_wrs_exit(ep);
	kmem_cache_free(kdat_ep_cache, ep);
}

/*
 * Links a new EP into ctx and its IA; caller holds ctx->lock.  The EP's lock
 * covers its record from the first write: its handle is public from there.
 */
kdat_ret_t kdat_ep_link(struct kdat_ep *ep, struct kdat_evd *conn,
			       struct kdat_evd *req, struct kdat_evd *recv)
{
	struct kdat_ia *ia = ep->ia;

	lockdep_assert_held(&ia->obj.ctx->lock);
	mutex_lock(&ep->lock);
	if (kdat_obj_add(ia->obj.ctx, &ep->obj, KDAT_OBJ_EP, &kdat_ep_class)) {
		mutex_unlock(&ep->lock);
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
	}
	ep->connect_evd = conn;
	ep->request_evd = req;
	ep->recv_evd = recv;
	kdat_evd_use(conn);
	kdat_evd_use(req);
	kdat_evd_use(recv);
	kdat_obj_get_ref(&ia->obj);
	list_add_tail(&ep->ia_node, &ia->eps);
	kdat_ep_qpn_index(ep);
	kdat_rec_sync(&ep->obj);
	mutex_unlock(&ep->lock);
	return KDAT_DAT_SUCCESS;
}

/*
 * An EP with a kernel QP, or (uqp set) one for a user QP: then uqp is the
 * EP's on success and the caller's to free on failure.
 */
kdat_ret_t kdat_ep_create_in(struct kdat_ia *ia, struct kdat_evd *conn,
			     struct kdat_evd *req, struct kdat_evd *recv,
			     const struct kdat_ep_attr *attr, struct kdat_uqp *uqp,
			     struct kdat_ep **out, u32 *handle)
{
	static const struct kdat_ep_attr zero;
	struct kdat_ctx *ctx = ia->obj.ctx;
	struct kdat_ep *ep;
	kdat_ret_t ret;

	if (!conn)
		return kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EVD_CONN);
	if (ia->removed)
		return kdat_err(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE);
	ep = kdat_ep_new(ia, attr ? attr : &zero, uqp, &ret);
	if (!ep)
		return ret;
	mutex_lock(&ctx->lock);
	if (ia->obj.dead || ia->closing)
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_IA);
	else if (ia->removed)
		ret = kdat_err(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE);
	else if (!kdat_evd_fits_owner(conn, ia, KDAT_EVD_CONNECTION))
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EVD_CONN);
	else if (!kdat_evd_fits(req, ia, KDAT_EVD_DTO))
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EVD_REQUEST);
	else if (!kdat_evd_fits(recv, ia, KDAT_EVD_DTO))
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EVD_RECV);
	else if (uqp && kdat_uqp_qpn_in_use(ia, uqp->qpn, NULL))
		ret = kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG5);
	else
		ret = kdat_ep_link(ep, conn, req, recv);
	if (!ret && handle)
		*handle = ep->obj.handle;	/* as for kdat_ia_open_in() */
	mutex_unlock(&ctx->lock);
	if (ret) {
		ep->uqp = NULL;		/* still the caller's */
		kdat_ep_discard(ep);
	}
	kdat_ia_unuse_pd(ia);
	if (ret)
		return ret;
	if (out)
		*out = ep;
	return KDAT_DAT_SUCCESS;
}

kdat_ret_t kdat_ep_create(struct kdat_ia *ia, struct kdat_evd *conn,
			  struct kdat_evd *req, struct kdat_evd *recv,
			  const struct kdat_ep_attr *attr, struct kdat_ep **out)
{
	return kdat_ep_create_in(ia, conn, req, recv, attr, NULL, out, NULL);
}
EXPORT_SYMBOL_GPL(kdat_ep_create);

/*
 * Detaches the EP's connection id (and stops its timer); the caller destroys
 * the id once ep->lock is dropped.  Caller holds ep->lock.
 */
struct rdma_cm_id *kdat_ep_detach_id(struct kdat_ep *ep)
{
	struct rdma_cm_id *id = ep->cm_id;

	lockdep_assert_held(&ep->lock);
	ep->cm_id = NULL;
	ep->resolve_again = NULL;
	kdat_ep_stop_timer(ep);
	return id;
}

/* Destroys an id that held a reference on its EP; no locks held. */
void kdat_ep_destroy_id(struct kdat_ep *ep, struct rdma_cm_id *id)
{
	if (!id)
		return;
	kdat_ep_wait_unpinned(ep);	/* a CM call may be at work on it (kdat_ep_pin_id) */
	ep->cm->destroy_id(id);
	kdat_obj_put_now(&ep->obj);
}

/*
 * Takes the EP off the wire at once (abrupt): DREQ if connected (sent after
 * ep->lock), QP to ERR so posted work is flushed.  Caller holds ep->lock.
 */
static void kdat_ep_abort_wire(struct kdat_ep *ep, struct kdat_ep_wire *wire)
{
	lockdep_assert_held(&ep->lock);

	if (ep->cm_id && kdat_ep_state_connected(ep->state))
		kdat_ep_send_dreq(ep, wire);
	kdat_qp_set(ep, IB_QPS_ERR);
}

/*
 * Caller holds ctx->lock (the EP leaves the owner's handles and lists); the
 * EP's lock is taken here.  wire gets the DREQ to send and the id to destroy
 * after unlocking (kdat_ep_finish).
 */
void kdat_ep_kill(struct kdat_ep *ep, struct kdat_ep_wire *wire)
{
	struct rdma_cm_id *id;

	lockdep_assert_held(&ep->obj.ctx->lock);
	mutex_lock(&ep->lock);
	kdat_ep_abort_wire(ep, wire);
	kdat_uqp_end_exchanges(ep);
	kdat_obj_unlink(&ep->obj);
	list_del_init(&ep->ia_node);
	kdat_ep_qpn_unindex(ep);
	atomic_inc(&ep->ia->eps_finishing);	/* until kdat_ep_finish() freed the QP */
	if (ep->rsp && ep->rsp->ep == ep) {
		ep->rsp->ep = NULL;
		kdat_obj_put(&ep->obj);
	}
	ep->rsp = NULL;
	id = kdat_ep_detach_id(ep);
	/* accepted but not established, or our DREQ unanswered: finish it later */
	if (id && (kdat_ep_state_accepting(ep->state) || ep->dreq == KDAT_DREQ_SENT))
		id = kdat_orphan_adopt(ep, id);
	mutex_unlock(&ep->lock);
	wire->gone = id;
}

/* After kdat_ep_kill() and dropping the locks: release IB resources and references. */
void kdat_ep_finish(struct kdat_ep *ep, struct kdat_ep_wire *wire)
{
	struct kdat_ctx *ctx = ep->obj.ctx;

	kdat_ep_wire_run(ep, wire);
	/*
	 * Never queued (an abrupt close, no drain): nothing to wait for.  One
	 * queued from now on holds its own reference and finds the EP dead.
	 */
	if (READ_ONCE(ep->graceful_queued) && cancel_work_sync(&ep->graceful_work))
		kdat_obj_put(&ep->obj);	/* the work's; the handle table's is below */
	/* No completion can run after this: only then may the EVDs go. */
	kdat_ep_free_qp(ep);
	kdat_ep_wrs_exit(ep);
	kdat_ia_unuse_pd(ep->ia);	/* kdat_ep_kill() counted it in */
	mutex_lock(&ctx->lock);
	kdat_evd_unuse(ep->connect_evd);
	kdat_evd_unuse(ep->request_evd);
	kdat_evd_unuse(ep->recv_evd);
	ep->connect_evd = NULL;
	ep->request_evd = NULL;
	ep->recv_evd = NULL;
	mutex_unlock(&ctx->lock);
	kdat_obj_put_now(&ep->obj);	/* the handle table's */
}

/*
 * Freeing a connection ends it as the table's abrupt disconnect does, with
 * its DISCONNECTED on the connect EVD before the EP dies: DAPL's
 * dat_ep_free disconnects abruptly first, and programs (dtestcm) count that
 * event.  The queued event keeps the EP's memory; its handle is stale.
 * An attempt in flight still ends with no event (kdat_ep_kill).
 */
static void kdat_ep_free_hang_up(struct kdat_ep *ep)
{
	struct kdat_ep_wire wire = {};

	/*
	 * Not connected: nothing to end, and no lock to take.  It may connect
	 * from here on as after the check under the lock: kdat_ep_kill() then
	 * ends it without an event, as it ends an attempt.
	 */
	if (!kdat_ep_state_connected(READ_ONCE(ep->state)))
		return;
	mutex_lock(&ep->lock);
	if (!ep->obj.dead && kdat_ep_state_connected(ep->state))
		kdat_ep_apply(ep, KDAT_EP_STIM_DISCONNECT_ABRUPT, NULL, 0,
			      KDAT_IA_COUNTER_REJECTED_OTHER, &wire, NULL);
	mutex_unlock(&ep->lock);
	kdat_ep_wire_run(ep, &wire);
}

kdat_ret_t kdat_ep_free(struct kdat_ep *ep)
{
	struct kdat_ctx *ctx = ep->obj.ctx;
	struct kdat_ep_wire wire = {};

	kdat_ep_free_hang_up(ep);
	mutex_lock(&ctx->lock);
	if (ep->obj.dead) {
		mutex_unlock(&ctx->lock);
		return kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
	}
	kdat_ep_kill(ep, &wire);
	mutex_unlock(&ctx->lock);
	kdat_ep_finish(ep, &wire);
	return KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(kdat_ep_free);

kdat_ret_t kdat_ep_query(struct kdat_ep *ep, struct kdat_ep_info *info)
{
	memset(info, 0, sizeof(*info));
	mutex_lock(&ep->lock);
	if (ep->obj.dead) {
		mutex_unlock(&ep->lock);
		return kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
	}
	info->state = ep->state;
	info->attr = ep->attr;
	if (kdat_ep_state_connected(ep->state)) {
		info->attr.max_rdma_read_in = ep->ird;
		info->attr.max_rdma_read_out = ep->ord;
	}
	if (ep->cm_id) {
		kdat_sockaddr_copy(&ep->local_addr, (struct sockaddr *)&ep->cm_id->route.addr.src_addr);
		kdat_sockaddr_copy(&ep->remote_addr, (struct sockaddr *)&ep->cm_id->route.addr.dst_addr);
	}
	memcpy(&info->local_addr, &ep->local_addr, sizeof(ep->local_addr));
	memcpy(&info->remote_addr, &ep->remote_addr, sizeof(ep->remote_addr));
	info->transitions = ep->transitions;
	mutex_unlock(&ep->lock);
	return KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(kdat_ep_query);

kdat_ret_t kdat_ep_modify(struct kdat_ep *ep, u32 mask, const struct kdat_ep_attr *a)
{
	struct kdat_ep_attr next;
	kdat_ret_t ret;

	if (!mask || (mask & ~KDAT_EP_ATTR_ALL))
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	mutex_lock(&ep->lock);
	if (ep->obj.dead) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
		goto out;
	}
	ret = kdat_ep_check(ep, KDAT_EP_STIM_MODIFY);
	if (ret)
		goto out;
	next = ep->attr;
	if (mask & KDAT_EP_ATTR_RDMA_READ_IN)
		next.max_rdma_read_in = a->max_rdma_read_in;
	if (mask & KDAT_EP_ATTR_RDMA_READ_OUT)
		next.max_rdma_read_out = a->max_rdma_read_out;
	if (mask & KDAT_EP_ATTR_RETRY_COUNT)
		next.retry_count = a->retry_count;
	if (mask & KDAT_EP_ATTR_RNR_RETRY_COUNT)
		next.rnr_retry_count = a->rnr_retry_count;
	if (mask & KDAT_EP_ATTR_FLOW_CONTROL)
		next.flow_control = a->flow_control;
	ret = kdat_ep_attr_check(ep->ia, &next);
	if (!ret) {
		ep->attr = next;
		kdat_ep_step(ep, KDAT_EP_STIM_MODIFY, NULL, 0);
	}
out:
	mutex_unlock(&ep->lock);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_ep_modify);

/* uqpn: a user-QP EP's QP from now on (0: keep it); kdat_uqp_check_renumber() */
kdat_ret_t kdat_ep_reset_to(struct kdat_ep *ep, u32 uqpn)
{
	struct kdat_ctx *ctx = ep->obj.ctx;
	struct rdma_cm_id *id = NULL;
	kdat_ret_t ret;

	/* ctx->lock: a new user QP number is checked against the owner's other EPs */
	mutex_lock(&ctx->lock);
	mutex_lock(&ep->lock);
	if (ep->obj.dead) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
	} else if (ep->ia->removed) {
		ret = kdat_invalid_state(ep);
	} else {
		ret = kdat_ep_check(ep, KDAT_EP_STIM_RESET);
		if (!ret)
			ret = kdat_uqp_check_renumber(ep, uqpn);
		if (!ret) {
			id = kdat_ep_detach_id(ep);
			if (ep->dreq == KDAT_DREQ_SENT)	/* see kdat_ep_send_dreq() */
				id = kdat_orphan_adopt(ep, id);
			kdat_ep_set_dreq(ep, KDAT_DREQ_NONE);
			/* every posted request completes (flushed) before the QP forgets it */
			if (kdat_ep_state_ended(ep->state))
				kdat_ep_flush(ep);
			kdat_qp_set(ep, IB_QPS_RESET);
			kdat_qp_init(ep);
			kdat_uqp_reset(ep, uqpn);
			ep->active = false;
			ep->ird = 0;
			ep->ord = 0;
			memset(&ep->remote_addr, 0, sizeof(ep->remote_addr));
			memset(&ep->local_addr, 0, sizeof(ep->local_addr));
			kdat_ep_step(ep, KDAT_EP_STIM_RESET, NULL, 0);
		}
	}
	mutex_unlock(&ep->lock);
	mutex_unlock(&ctx->lock);
	kdat_ep_destroy_id(ep, id);
	return ret;
}

kdat_ret_t kdat_ep_reset(struct kdat_ep *ep)
{
	return kdat_ep_reset_to(ep, 0);
}
EXPORT_SYMBOL_GPL(kdat_ep_reset);

kdat_ret_t kdat_check_private_data(const void *pdata, s32 size, u32 max)
{
	if (size < 0 || size > max || (size && !pdata))
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG4);
	return KDAT_DAT_SUCCESS;
}

static kdat_ret_t kdat_check_qos(u32 qos)
{
	/* One service level: what the transport gives (DAT_QOS_BEST_EFFORT). */
	if (qos != KDAT_DAT_QOS_BEST_EFFORT)
		return kdat_err(KDAT_DAT_MODEL_NOT_SUPPORTED, KDAT_DAT_NO_SUBTYPE);
	return KDAT_DAT_SUCCESS;
}

/*
 * What an address lookup that failed at once means for a connect (an RC
 * attempt's or a UD exchange's): no route is an attempt made and failed
 * (UNREACHABLE, KDAT_UNREACHABLE_NOW: dat_ep_dup_connect(3DAT) reports a
 * remote host the Provider "cannot reach" as an event), anything else the
 * call's error.
 */
kdat_ret_t kdat_resolve_failed(int err)
{
	switch (err) {
	case -ENETUNREACH:
	case -EHOSTUNREACH:
	case -EADDRNOTAVAIL:
	case -ENODEV:
		return KDAT_UNREACHABLE_NOW;
	case -ENOMEM:
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
	default:
		return kdat_err(KDAT_DAT_INVALID_ADDRESS, KDAT_DAT_NO_SUBTYPE);
	}
}

static void kdat_ep_timeout_work(struct work_struct *work)
{
	struct kdat_ep_timer *t = container_of(work, struct kdat_ep_timer, work);
	struct kdat_ep *ep = t->ep;
	struct rdma_cm_id *id = NULL;

	mutex_lock(&ep->lock);
	if (ep->timer == t) {
		ep->timer = NULL;
		if (!ep->obj.dead && kdat_ep_state_connecting(ep->state)) {
			/* Cancel the wire attempt for real: destroying the id sends a REJ. */
			id = ep->cm_id;
			ep->cm_id = NULL;
			kdat_ep_step(ep, KDAT_EP_STIM_TIMEOUT, NULL, 0);
		}
	}
	mutex_unlock(&ep->lock);
	kdat_ep_destroy_id(ep, id);
	kfree(t);
	kdat_obj_put(&ep->obj);
}

static unsigned int kdat_ep_failure(struct kdat_ep *ep, unsigned int stimulus);

/*
 * An address lookup asked again (kdat_cm_on_resolve_error).  Not from the
 * ADDR_ERROR handler: rdma_resolve_addr() first cancels the id's previous
 * request and waits for its work, the very work that runs that handler.  The
 * id is pinned meanwhile; if the CM refuses the lookup, the attempt ends
 * UNREACHABLE (TIMED_OUT if late) and its id goes, as the timer's work does.
 */
static void kdat_ep_resolve_work(struct work_struct *work)
{
	struct kdat_ep *ep = container_of(work, struct kdat_ep, resolve_work);
	struct sockaddr_storage src;
	union kdat_sockaddr dst;
	struct rdma_cm_id *id, *gone = NULL;
	unsigned int stimulus;
	int err;

	mutex_lock(&ep->lock);
	/* the attempt that asked may have ended, and another begun, meanwhile */
	if (ep->obj.dead || !ep->cm_id || ep->cm_id != ep->resolve_again ||
	    !kdat_ep_state_connecting(ep->state)) {
		mutex_unlock(&ep->lock);
		kdat_obj_put(&ep->obj);	/* the work's */
		return;
	}
	ep->resolve_again = NULL;
	id = kdat_ep_pin_id(ep);
	src = ep->ia->addr;
	dst = ep->remote_addr;
	mutex_unlock(&ep->lock);
	err = ep->cm->resolve_addr(id, (struct sockaddr *)&src, &dst.sa, KDAT_RESOLVE_TIMEOUT_MS);
	if (err) {
		mutex_lock(&ep->lock);
		if (!ep->obj.dead && ep->cm_id == id && kdat_ep_state_connecting(ep->state)) {
			stimulus = kdat_ep_failure(ep, KDAT_EP_STIM_UNREACHABLE);
			gone = kdat_ep_detach_id(ep);
			kdat_ep_step(ep, stimulus, NULL, 0);
		}
		mutex_unlock(&ep->lock);
	}
	kdat_ep_unpin_id(ep);
	kdat_ep_destroy_id(ep, gone);
	kdat_obj_put(&ep->obj);	/* the work's */
}

static enum hrtimer_restart kdat_ep_timer_fired(struct hrtimer *timer)
{
	struct kdat_ep_timer *t = container_of(timer, struct kdat_ep_timer, timer);

	queue_work(kdat_wq, &t->work);
	return HRTIMER_NORESTART;
}

/*
 * Starts an active connection: a new cm id resolves the address, then the
 * route, then connects (kdat_ep_cm_event).  Caller holds ep->lock and has
 * checked the state; on success the EP is ACTIVE_CONNECTION_PENDING.
 */
static kdat_ret_t kdat_ep_start_connect(struct kdat_ep *ep, u32 timeout_us)
{
	/*
	 * The timeout counts from the call, not from the end of the id's
	 * creation and address lookup (tens of ms on a debug kernel).
	 */
	ktime_t deadline = ktime_add_us(ktime_get(), timeout_us);
	struct kdat_ep_timer *timer = NULL;
	struct rdma_cm_id *id;
	int err;

	lockdep_assert_held(&ep->lock);
	if (timeout_us != KDAT_TIMEOUT_INFINITE) {
		timer = kzalloc(sizeof(*timer), GFP_KERNEL);
		if (!timer)
			return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
	}
	id = ep->ia->cm->create_id(ep->obj.ctx->net, kdat_cm_upcall, ep, ep->obj.ctx->kern_name,
				   RDMA_PS_TCP);
	if (IS_ERR(id)) {
		kfree(timer);
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_TEP);
	}
	kdat_obj_get_ref(&ep->obj);	/* the id's */
	ep->resolve_retries = KDAT_RESOLVE_RETRIES;
	ep->resolve_again = NULL;
	err = ep->ia->cm->resolve_addr(id, (struct sockaddr *)&ep->ia->addr,
				       &ep->remote_addr.sa,
				       KDAT_RESOLVE_TIMEOUT_MS);
	if (err) {
		/* rdma_destroy_id() takes the handler mutex: never under ep->lock */
		kdat_destroy_id_later(ep->ia->cm, id, &ep->obj);
		kfree(timer);
		return kdat_resolve_failed(err);
	}
	ep->cm_id = id;
	ep->active = true;
	if (timer) {
		timer->ep = ep;
		kdat_obj_get_ref(&ep->obj);	/* the timer's */
		INIT_WORK(&timer->work, kdat_ep_timeout_work);
		hrtimer_setup(&timer->timer, kdat_ep_timer_fired, CLOCK_MONOTONIC,
			      HRTIMER_MODE_ABS_SOFT);
		ep->timer = timer;
		hrtimer_start(&timer->timer, deadline, HRTIMER_MODE_ABS_SOFT);
	}
	return KDAT_DAT_SUCCESS;
}

static kdat_ret_t kdat_connect_args(struct kdat_ep *ep, u32 timeout_us, const void *pdata,
				    s32 pdata_size, u32 qos)
{
	kdat_ret_t ret;

	if (timeout_us == 0)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG4);
	ret = kdat_check_private_data(pdata, pdata_size, kdat_pdata_max(ep->ia, KDAT_IB_REQ_FIELD));
	if (ret)
		return ret;
	return kdat_check_qos(qos);
}

static void kdat_ep_save_pdata(struct kdat_ep *ep, const void *pdata, s32 size)
{
	ep->private_data_size = size;
	if (size)
		memcpy(ep->private_data, pdata, size);
}

/* dat_ep_connect's arguments, in DAT's order: an RC EP's (below) and a UD EP's (kdat_ud.c) */
kdat_ret_t kdat_connect_check(struct kdat_ep *ep, const struct sockaddr *remote, u64 conn_qual,
			      u32 timeout_us, const void *pdata, s32 pdata_size, u32 qos,
			      u32 flags)
{
	kdat_ret_t ret;

	if (!remote || (remote->sa_family != AF_INET && remote->sa_family != AF_INET6))
		return kdat_err(KDAT_DAT_INVALID_ADDRESS, KDAT_DAT_NO_SUBTYPE);
	if (conn_qual == 0 || conn_qual > U16_MAX)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG3);
	if (flags & ~(KDAT_CONNECT_MULTIPATH_REQUESTED | KDAT_DAT_CONNECT_MULTIPATH_REQUIRED_FLAG))
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG8);
	ret = kdat_connect_args(ep, timeout_us, pdata, pdata_size, qos);
	if (ret)
		return ret;
	if (flags & KDAT_DAT_CONNECT_MULTIPATH_REQUIRED_FLAG)	/* one path only */
		return kdat_err(KDAT_DAT_MODEL_NOT_SUPPORTED, KDAT_DAT_NO_SUBTYPE);
	return KDAT_DAT_SUCCESS;
}

kdat_ret_t kdat_ep_connect(struct kdat_ep *ep, const struct sockaddr *remote,
			   u64 conn_qual, u32 timeout_us, const void *pdata,
			   s32 pdata_size, u32 qos, u32 flags)
{
	kdat_ret_t ret;

	ret = kdat_connect_check(ep, remote, conn_qual, timeout_us, pdata, pdata_size, qos, flags);
	if (ret)
		return ret;
	/*
	 * UD EPs are /dev/kdat's (user QPs), whose EP_CONNECT goes to
	 * kdat_ud_connect(); set at creation: no lock needed to tell.
	 */
	if (kdat_ep_is_ud(ep))
		return kdat_err(KDAT_DAT_MODEL_NOT_SUPPORTED, KDAT_DAT_NO_SUBTYPE);

	mutex_lock(&ep->lock);
	if (ep->obj.dead) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
		goto out;
	}
	ret = kdat_ep_check(ep, KDAT_EP_STIM_CONNECT);
	if (ret)
		goto out;
	if (ep->ia->removed) {
		ret = kdat_invalid_state(ep);
		goto out;
	}
	kdat_sockaddr_copy(&ep->remote_addr, remote);
	kdat_sockaddr_set_port(&ep->remote_addr, conn_qual);
	ep->conn_qual = conn_qual;
	ep->connect_flags = flags;
	kdat_ep_save_pdata(ep, pdata, pdata_size);
	ret = kdat_ep_start_connect(ep, timeout_us);
	if (ret == KDAT_UNREACHABLE_NOW) {
		kdat_ep_step(ep, KDAT_EP_STIM_CONNECT, NULL, 0);
		kdat_ep_step(ep, KDAT_EP_STIM_UNREACHABLE, NULL, 0);
		ret = KDAT_DAT_SUCCESS;
	} else if (!ret) {
		kdat_ep_step(ep, KDAT_EP_STIM_CONNECT, NULL, 0);
	}
out:
	mutex_unlock(&ep->lock);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_ep_connect);

kdat_ret_t kdat_ep_dup_connect(struct kdat_ep *ep, struct kdat_ep *dup, u32 timeout_us,
			       const void *pdata, s32 pdata_size, u32 qos)
{
	struct kdat_ctx *ctx = ep->obj.ctx;
	union kdat_sockaddr remote;
	u32 connect_flags;
	u64 conn_qual;
	kdat_ret_t ret;

	if (!dup || dup->obj.ctx != ctx)
		return kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE2);
	ret = kdat_connect_args(ep, timeout_us, pdata, pdata_size, qos);
	if (ret)
		return ret;
	/* the EP's own handle first, as DAT orders the checks; again under its lock below */
	if (READ_ONCE(ep->obj.dead))
		return kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
	if (dup == ep)
		return kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE2);
	/* a UD EP has peers, not a connection to copy or to make */
	if (kdat_ep_is_ud(ep) || kdat_ep_is_ud(dup))
		return kdat_err(KDAT_DAT_MODEL_NOT_SUPPORTED, KDAT_DAT_NO_SUBTYPE);
	/* What the new connection copies, read under dup's lock: two EP locks never nest. */
	mutex_lock(&dup->lock);
	if (dup->obj.dead)
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE2);
	else
		ret = kdat_ep_check(dup, KDAT_EP_STIM_DUP_SOURCE);
	/* The remote end of a passively accepted connection is not a service. */
	if (!ret && !dup->active)
		ret = kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	remote = dup->remote_addr;
	conn_qual = dup->conn_qual;
	connect_flags = dup->connect_flags;
	mutex_unlock(&dup->lock);
	if (ret)
		return ret;

	mutex_lock(&ep->lock);
	if (ep->obj.dead) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
		goto out;
	}
	ret = kdat_ep_check(ep, KDAT_EP_STIM_DUP_CONNECT);
	if (ret)
		goto out;
	if (ep->ia->removed) {
		ret = kdat_invalid_state(ep);
		goto out;
	}
	/* Same remote IA address, connection qualifier and connect flags. */
	ep->remote_addr = remote;
	kdat_sockaddr_set_port(&ep->remote_addr, conn_qual);
	ep->conn_qual = conn_qual;
	ep->connect_flags = connect_flags;
	kdat_ep_save_pdata(ep, pdata, pdata_size);
	ret = kdat_ep_start_connect(ep, timeout_us);
	if (ret == KDAT_UNREACHABLE_NOW) {
		kdat_ep_step(ep, KDAT_EP_STIM_DUP_CONNECT, NULL, 0);
		kdat_ep_step(ep, KDAT_EP_STIM_UNREACHABLE, NULL, 0);
		ret = KDAT_DAT_SUCCESS;
	} else if (!ret) {
		kdat_ep_step(ep, KDAT_EP_STIM_DUP_CONNECT, NULL, 0);
	}
out:
	mutex_unlock(&ep->lock);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_ep_dup_connect);

kdat_ret_t kdat_ep_disconnect(struct kdat_ep *ep, u32 flags)
{
	struct kdat_ep_wire wire = {};
	unsigned int stim;
	kdat_ret_t ret;

	if (flags != KDAT_CLOSE_ABRUPT && flags != KDAT_CLOSE_GRACEFUL)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	/* a UD EP has no connection to drain: its graceful disconnect is abrupt */
	stim = flags == KDAT_CLOSE_GRACEFUL && !kdat_ep_is_ud(ep) ?
	       KDAT_EP_STIM_DISCONNECT_GRACEFUL : KDAT_EP_STIM_DISCONNECT_ABRUPT;
	mutex_lock(&ep->lock);
	if (ep->obj.dead) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
		goto out;
	}
	ret = kdat_ep_check(ep, stim);
	if (!ret)	/* the rule's effects say what goes on the wire, and which id goes */
		kdat_ep_apply(ep, stim, NULL, 0, KDAT_IA_COUNTER_REJECTED_OTHER, &wire, NULL);
out:
	mutex_unlock(&ep->lock);
	kdat_ep_wire_run(ep, &wire);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_ep_disconnect);

/*
 * /dev/kdat's graceful disconnect of a user-QP EP (KDAT_CLOSE_HOLD_DREQ):
 * one count in sends_in_flight stands for the process's requests until it
 * reports them done (KDAT_CLOSE_REQUESTS_DONE), so the rule's drain holds
 * the DREQ as it does for a kernel QP's own requests.
 */
kdat_ret_t kdat_ep_disconnect_user(struct kdat_ep *ep, u32 flags)
{
	struct kdat_ep_wire wire = {};
	kdat_ret_t ret = KDAT_DAT_SUCCESS;

	mutex_lock(&ep->lock);
	if (ep->obj.dead) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
	} else if (!ep->uqp || (flags != KDAT_CLOSE_REQUESTS_DONE &&
				flags != (KDAT_CLOSE_GRACEFUL | KDAT_CLOSE_HOLD_DREQ))) {
		ret = kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	} else if (kdat_ep_is_ud(ep)) {
		/* nothing to drain: as kdat_ep_disconnect() */
		if (flags != KDAT_CLOSE_REQUESTS_DONE) {
			ret = kdat_ep_check(ep, KDAT_EP_STIM_DISCONNECT_ABRUPT);
			if (!ret)
				kdat_ep_apply(ep, KDAT_EP_STIM_DISCONNECT_ABRUPT, NULL, 0,
					      KDAT_IA_COUNTER_REJECTED_OTHER, &wire, NULL);
		}
	} else if (flags == KDAT_CLOSE_REQUESTS_DONE) {
		if (atomic_cmpxchg(&ep->sends_in_flight, 1, 0) == 1 &&
		    ep->dreq == KDAT_DREQ_WAITS && kdat_ep_state_draining(ep->state)) {
			kdat_ep_set_dreq(ep, KDAT_DREQ_NONE);
			kdat_ep_send_dreq(ep, &wire);	/* DISCONNECTED follows */
		}
	} else {
		ret = kdat_ep_check(ep, KDAT_EP_STIM_DISCONNECT_GRACEFUL);
		if (!ret) {
			atomic_set(&ep->sends_in_flight, 1);
			kdat_ep_apply(ep, KDAT_EP_STIM_DISCONNECT_GRACEFUL, NULL, 0,
				      KDAT_IA_COUNTER_REJECTED_OTHER, &wire, NULL);
			/* no drain began (not CONNECTED, or one already runs): none held */
			if (ep->dreq != KDAT_DREQ_WAITS)
				atomic_set(&ep->sends_in_flight, 0);
		}
	}
	mutex_unlock(&ep->lock);
	kdat_ep_wire_run(ep, &wire);
	return ret;
}

/*
 * What an EP's handler sends (or asks of the CM) after dropping ep->lock:
 * the MAD sends and the route resolution are the slow part of a handler, and
 * the consumer's calls on the EP wait for ep->lock.  The handler mutex keeps
 * the id alive meanwhile (destroy_id waits for it), and the id's reference
 * keeps the EP.
 */
enum kdat_cm_send_what { KDAT_SEND_NONE, KDAT_SEND_ADDR, KDAT_SEND_ROUTE, KDAT_SEND_REQ,
			 KDAT_SEND_RTU, KDAT_SEND_DREP, KDAT_SEND_COUNT };

struct kdat_cm_send {
	enum kdat_cm_send_what what;
	bool drop_id;			/* the id has nothing left to do for the EP */
	bool close_later;		/* graceful_work applies the DISCONNECTED */
	struct rdma_conn_param param;	/* REQ */
	u8 wire[KDAT_PDATA_WIRE_MAX];
};

/*
 * What a send's outcome is to the EP's table: the stimulus when it went out
 * and when the CM refused it.  KDAT_EP_STIM_COUNT: nothing yet, the CM's own
 * event follows (a route, a REP or REJ, the DREP's end).
 */
static const struct {
	unsigned int sent;
	unsigned int failed;
} kdat_send_outcome[KDAT_SEND_COUNT] = {
	[KDAT_SEND_NONE] = { KDAT_EP_STIM_COUNT, KDAT_EP_STIM_COUNT },
	/* queued: kdat_ep_resolve_work() reports a refused lookup itself */
	[KDAT_SEND_ADDR] = { KDAT_EP_STIM_COUNT, KDAT_EP_STIM_COUNT },
	[KDAT_SEND_ROUTE] = { KDAT_EP_STIM_COUNT, KDAT_EP_STIM_UNREACHABLE },
	[KDAT_SEND_REQ] = { KDAT_EP_STIM_COUNT, KDAT_EP_STIM_NON_PEER_REJECTED },
	[KDAT_SEND_RTU] = { KDAT_EP_STIM_ESTABLISHED, KDAT_EP_STIM_BROKEN },
	[KDAT_SEND_DREP] = { KDAT_EP_STIM_COUNT, KDAT_EP_STIM_COUNT },
};

/* Active side: the peer accepted (REP); finish like librdmacm does for its own QPs. */
static void kdat_cm_active_response(struct kdat_ep *ep, struct rdma_cm_id *id,
				    struct rdma_cm_event *ev, struct kdat_cm_send *send)
{
	const struct rdma_conn_param *c = &ev->param.conn;
	const u8 *pdata;
	u32 len;
	int err;

	/*
	 * The REP, seen from our side (ib_cm swaps its fields): initiator_depth
	 * is the acceptor's IRD, which bounds our ORD; responder_resources is
	 * its ORD, which our IRD must cover.
	 */
	ep->ord = min_t(u32, ep->attr.max_rdma_read_out, c->initiator_depth);
	ep->ird = min_t(u32, ep->attr.max_rdma_read_in, c->responder_resources);
	if (ep->uqp) {
		/* the process moves its QP, then KDAT_IOC_UQP_ESTABLISH sends the RTU */
		len = kdat_pdata_unwrap(ep->ia, c->private_data, c->private_data_len, &pdata);
		kdat_uqp_rep_arrived(ep, pdata, len);
		return;
	}
	err = kdat_qp_modify_cm(ep, id, IB_QPS_RTR);
	if (!err)
		err = kdat_qp_modify_cm(ep, id, IB_QPS_RTS);
	if (err) {
		kdat_ep_step(ep, KDAT_EP_STIM_BROKEN, NULL, 0);
		return;
	}
	send->what = KDAT_SEND_RTU;	/* then ESTABLISHED, kdat_cm_ep_sent() */
}

/*
 * Active side over iWARP: no REP step (the iWARP CM moves the QP to RTS
 * itself); ESTABLISHED brings the negotiated depths and the reply's data.
 */
static void kdat_cm_active_established(struct kdat_ep *ep, struct rdma_cm_event *ev)
{
	const struct rdma_conn_param *c = &ev->param.conn;
	const u8 *pdata;
	u32 len;

	ep->ord = min_t(u32, ep->attr.max_rdma_read_out, c->initiator_depth);
	ep->ird = min_t(u32, ep->attr.max_rdma_read_in, c->responder_resources);
	len = kdat_pdata_unwrap(ep->ia, c->private_data, c->private_data_len, &pdata);
	kdat_ep_step(ep, KDAT_EP_STIM_ESTABLISHED, pdata, len);
}

static void kdat_ep_non_peer_rejected(struct kdat_ep *ep, enum kdat_ia_counter reason);

static void kdat_cm_active_route(struct kdat_ep *ep, struct rdma_cm_id *id,
				 struct kdat_cm_send *send)
{
	struct rdma_conn_param *param = &send->param;
	int err;

	kdat_sockaddr_copy(&ep->local_addr, (struct sockaddr *)&id->route.addr.src_addr);
	/* a user QP is in INIT since its creation (KDAT_IOC_UQP_ATTR) */
	err = ep->uqp ? 0 : kdat_qp_modify_cm(ep, id, IB_QPS_INIT);
	if (err) {
		kdat_ep_non_peer_rejected(ep, KDAT_IA_COUNTER_REJECTED_OTHER);
		return;
	}
	memset(param, 0, sizeof(*param));	/* srq, qkey: none */
	param->private_data = send->wire;
	param->private_data_len = kdat_pdata_wrap(ep->ia, send->wire, ep->private_data,
						  ep->private_data_size);
	param->responder_resources = ep->attr.max_rdma_read_in;
	param->initiator_depth = ep->attr.max_rdma_read_out;
	param->flow_control = ep->attr.flow_control;
	param->retry_count = ep->attr.retry_count;
	param->rnr_retry_count = ep->attr.rnr_retry_count;
	param->qp_num = kdat_ep_qpn(ep);
	send->what = KDAT_SEND_REQ;
}

/*
 * How an active attempt's failure reaches the EP.  Once the connect timeout's
 * deadline has passed, the attempt timed out, even if the CM's own failure
 * (an address lookup that gave up, a REJ of the CM's) gets ep->lock before
 * the timer's work does: on a loaded machine that work can wait on a CPU or
 * on the lock for longer than the CM needs.  Caller holds ep->lock.
 */
static unsigned int kdat_ep_failure(struct kdat_ep *ep, unsigned int stimulus)
{
	lockdep_assert_held(&ep->lock);

	if (kdat_ep_state_connecting(ep->state) && ep->timer &&
	    ktime_compare(hrtimer_get_expires(&ep->timer->timer), ktime_get()) <= 0)
		return KDAT_EP_STIM_TIMEOUT;
	return stimulus;
}

/*
 * The attempt ended without the peer consumer's word: NON_PEER_REJECTED,
 * counted by reason, unless it is late enough to be the timeout's.
 */
static void kdat_ep_non_peer_rejected(struct kdat_ep *ep, enum kdat_ia_counter reason)
{
	kdat_ep_step_why(ep, kdat_ep_failure(ep, KDAT_EP_STIM_NON_PEER_REJECTED), NULL, 0, reason);
}

/* Why a REJ that is not the peer consumer's came (rdma_cm's status of REJECTED). */
static enum kdat_ia_counter kdat_reject_reason(const struct kdat_ia *ia, const u8 *rej, u32 len,
						int status)
{
	if (kdat_pdata_provider_reject(ia, rej, len, status))
		return KDAT_IA_COUNTER_REJECTED_BY_PROVIDER;
	/* IB/RoCE: the CM's REJ reason; iWARP: the TCP connect's errno */
	if (status == IB_CM_REJ_INVALID_SERVICE_ID || status == -ECONNREFUSED)
		return KDAT_IA_COUNTER_REJECTED_NO_LISTENER;
	return KDAT_IA_COUNTER_REJECTED_OTHER;
}

/*
 * The EP gives up its id: returns 1 to have rdma_cm destroy it after this
 * upcall.  Caller holds ep->lock, in the id's handler.
 */
static int kdat_cm_release_id(struct kdat_ep *ep, struct rdma_cm_id *id)
{
	lockdep_assert_held(&ep->lock);

	kdat_ep_detach_id(ep);
	/*
	 * A CM call outside ep->lock may be at work on the id (a
	 * UQP_ESTABLISH waiting for this handler's mutex, our DREQ): it must
	 * not find the id freed; destroy it later, after that.
	 */
	if (kdat_ep_id_pinned(ep)) {
		kdat_destroy_id_later(ep->ia->cm, id, &ep->obj);
		return 0;
	}
	return 1;
}

/*
 * A connection attempt that ended without a connection gives up its id
 * (kdat_cm_release_id); before: the state the event found.  Caller holds
 * ep->lock, in the id's handler.
 */
static int kdat_cm_attempt_over(struct kdat_ep *ep, struct rdma_cm_id *id, u32 before)
{
	lockdep_assert_held(&ep->lock);

	if (!kdat_ep_state_ended(ep->state) ||
	    (!kdat_ep_state_connecting(before) && !kdat_ep_state_accepting(before)))
		return 0;
	return kdat_cm_release_id(ep, id);
}

/*
 * The send a handler left for after ep->lock (struct kdat_cm_send), and
 * what follows from it; returns 1 if rdma_cm is to destroy the id.
 */
static int kdat_cm_ep_sent(struct kdat_ep *ep, struct rdma_cm_id *id,
			   struct rdma_cm_event *ev, struct kdat_cm_send *send)
{
	const struct rdma_conn_param *c = &ev->param.conn;
	unsigned int stimulus;
	const u8 *pdata;
	int err, destroy = 0;
	u32 before, len, syncs;

	switch (send->what) {
	case KDAT_SEND_DREP:
		err = ep->cm->disconnect(id);
		break;
	case KDAT_SEND_ADDR:
		/* not from this handler: see kdat_ep_resolve_work() */
		kdat_obj_get_ref(&ep->obj);	/* the work's */
		if (!queue_work(kdat_wq, &ep->resolve_work))
			kdat_obj_put(&ep->obj);
		err = 0;
		break;
	case KDAT_SEND_ROUTE:
		err = ep->cm->resolve_route(id, KDAT_RESOLVE_TIMEOUT_MS);
		break;
	case KDAT_SEND_REQ:
		err = ep->cm->connect_locked(id, &send->param);
		break;
	case KDAT_SEND_RTU:
		err = ep->cm->accept(id, NULL);
		break;
	default:
		return 0;
	}
	stimulus = err ? kdat_send_outcome[send->what].failed : kdat_send_outcome[send->what].sent;
	if (stimulus == KDAT_EP_STIM_COUNT)
		return 0;
	mutex_lock(&ep->lock);
	/* Unless the attempt ended meanwhile (timeout, disconnect, free): its id goes anyway. */
	if (kdat_ep_attempt_on(ep, id)) {
		syncs = ep->rec_syncs;
		before = ep->state;
		if (err) {
			kdat_ep_step(ep, kdat_ep_failure(ep, stimulus), NULL, 0);
		} else {
			len = kdat_pdata_unwrap(ep->ia, c->private_data, c->private_data_len, &pdata);
			kdat_ep_step(ep, stimulus, pdata, len);
		}
		destroy = kdat_cm_attempt_over(ep, id, before);
		kdat_ep_rec_sync_since(ep, syncs);
	}
	mutex_unlock(&ep->lock);
	return destroy;
}

/* ---- rdma_cm's events on an EP's id: one static map to the table's stimuli ---------- */

/* An event's own work before (or instead of) its stimulus: under ep->lock, kdat_ep_cm_event() */
typedef void (*kdat_cm_work_fn)(struct kdat_ep *ep, struct rdma_cm_id *id,
				struct rdma_cm_event *ev, struct kdat_cm_send *send);

/* The address is known: the route next (after ep->lock). */
static void kdat_cm_on_addr(struct kdat_ep *ep, struct rdma_cm_id *id,
			    struct rdma_cm_event *ev, struct kdat_cm_send *send)
{
	if (kdat_ep_state_connecting(ep->state))
		send->what = KDAT_SEND_ROUTE;
}

/*
 * The address or route lookup failed: a timeout is asked again while the
 * attempt has retries left (KDAT_RESOLVE_RETRIES; after ep->lock), anything
 * else is UNREACHABLE -- or TIMED_OUT once the consumer's deadline passed.
 */
static void kdat_cm_on_resolve_error(struct kdat_ep *ep, struct rdma_cm_id *id,
				     struct rdma_cm_event *ev, struct kdat_cm_send *send)
{
	unsigned int stimulus = kdat_ep_failure(ep, KDAT_EP_STIM_UNREACHABLE);

	if (stimulus == KDAT_EP_STIM_UNREACHABLE && kdat_ep_state_connecting(ep->state) &&
	    ev->status == -ETIMEDOUT && ep->resolve_retries) {
		ep->resolve_retries--;
		if (ev->event == RDMA_CM_EVENT_ADDR_ERROR) {
			send->what = KDAT_SEND_ADDR;
			ep->resolve_again = id;
		} else {
			send->what = KDAT_SEND_ROUTE;
		}
		return;
	}
	kdat_ep_step(ep, stimulus, NULL, 0);
}

static void kdat_cm_on_route(struct kdat_ep *ep, struct rdma_cm_id *id,
			     struct rdma_cm_event *ev, struct kdat_cm_send *send)
{
	if (kdat_ep_state_connecting(ep->state))
		kdat_cm_active_route(ep, id, send);
}

static void kdat_cm_on_rep(struct kdat_ep *ep, struct rdma_cm_id *id,
			   struct rdma_cm_event *ev, struct kdat_cm_send *send)
{
	if (kdat_ep_state_connecting(ep->state))
		kdat_cm_active_response(ep, id, ev, send);
}

static void kdat_cm_on_established(struct kdat_ep *ep, struct rdma_cm_id *id,
				   struct rdma_cm_event *ev, struct kdat_cm_send *send)
{
	if (kdat_ep_state_connecting(ep->state))
		kdat_cm_active_established(ep, ev);
	else	/* passive side: the RTU carries no private data */
		kdat_ep_step(ep, KDAT_EP_STIM_ESTABLISHED, NULL, 0);
}

/* The peer consumer's reject (PEER_REJECTED, its data) or anyone else's (NON_PEER_REJECTED). */
static void kdat_cm_on_rej(struct kdat_ep *ep, struct rdma_cm_id *id,
			   struct rdma_cm_event *ev, struct kdat_cm_send *send)
{
	const u8 *rej, *pdata;
	u32 plen;
	u8 len = 0;

	rej = ep->ia->cm->consumer_reject_data(id, ev, &len);
	if (rej && !kdat_pdata_provider_reject(ep->ia, rej, len, ev->status)) {
		plen = kdat_pdata_unwrap(ep->ia, rej, len, &pdata);
		kdat_ep_step(ep, KDAT_EP_STIM_PEER_REJECTED, pdata, plen);
	} else {
		kdat_ep_non_peer_rejected(ep, kdat_reject_reason(ep->ia, rej, len, ev->status));
	}
}

/*
 * DISCONNECTED: answer a peer's DREQ (DREP, after ep->lock; harmless after
 * our own DREQ) and step.  The answer to a graceful disconnect's DREQ
 * closes the EP from kdat_wq instead (kdat_ep_graceful_work), off ib_cm's
 * thread, once the DREP call is done.
 */
static void kdat_cm_on_disconnected(struct kdat_ep *ep, struct rdma_cm_id *id,
				    struct rdma_cm_event *ev, struct kdat_cm_send *send)
{
	send->what = KDAT_SEND_DREP;
	if (ep->dreq == KDAT_DREQ_SENT && kdat_ep_state_draining(ep->state)) {
		kdat_ep_set_dreq(ep, KDAT_DREQ_ANSWERED);
		send->close_later = true;
		return;
	}
	kdat_ep_set_dreq(ep, KDAT_DREQ_NONE);
	/*
	 * While accepting, this is the peer's DREQ (iWARP closes only after
	 * ESTABLISHED): the peer had our REP and was connected.  ib_cm works a
	 * connection's MADs on any CPU, so its DREQ can overtake its RTU and
	 * ib_cm then drops the RTU.  The connection was made
	 * (dat_cr_accept(3DAT)'s ACCEPT_COMPLETION_ERROR is for a Provider that
	 * "cannot complete the Connection establishment"): ESTABLISHED, then
	 * DISCONNECTED.
	 */
	if (kdat_ep_state_accepting(ep->state))
		kdat_ep_step(ep, KDAT_EP_STIM_ESTABLISHED, NULL, 0);
	kdat_ep_step(ep, KDAT_EP_STIM_DISCONNECTED, NULL, 0);
}

/*
 * The connection's time-wait is over.  Its id goes now, not at the EP's
 * free: ib_cm keeps a live id IDLE and silently drops a DREQ that reaches
 * it, so a peer whose DREP was lost would retry its DREQ into nothing until
 * its retries ran out (about 100 s on rxe).  With no id ib_cm answers such a
 * DREQ with a DREP itself.  The EP keeps its addresses (ep->local_addr).
 */
static void kdat_cm_on_timewait_exit(struct kdat_ep *ep, struct rdma_cm_id *id,
				     struct rdma_cm_event *ev, struct kdat_cm_send *send)
{
	/* ... or about to end: a graceful close still queued needs no id */
	send->drop_id = kdat_ep_state_ended(ep->state) || ep->dreq == KDAT_DREQ_ANSWERED;
}

/*
 * Every rdma_cm event an EP's id can get, and what it is to the EP: the
 * table's stimulus (a failure's read through kdat_ep_failure(): late, it is
 * the timeout's), and the event's own work, run first, which for the steps
 * of the active side's handshake and for a reject finds the stimulus itself.
 * An event not listed (ADDR_CHANGE) is nothing to the EP.
 */
enum kdat_cm_use { KDAT_CM_IGNORED, KDAT_CM_STIMULUS, KDAT_CM_FAILURE, KDAT_CM_WORK };

static const struct {
	u8 use;
	u8 stimulus;
	kdat_cm_work_fn work;
} kdat_cm_event_map[RDMA_CM_EVENT_TIMEWAIT_EXIT + 1] = {
	[RDMA_CM_EVENT_ADDR_RESOLVED] = { .use = KDAT_CM_WORK, .work = kdat_cm_on_addr },
	[RDMA_CM_EVENT_ADDR_ERROR] = { .use = KDAT_CM_WORK, .work = kdat_cm_on_resolve_error },
	[RDMA_CM_EVENT_ROUTE_RESOLVED] = { .use = KDAT_CM_WORK, .work = kdat_cm_on_route },
	[RDMA_CM_EVENT_ROUTE_ERROR] = { .use = KDAT_CM_WORK, .work = kdat_cm_on_resolve_error },
	[RDMA_CM_EVENT_CONNECT_RESPONSE] = { .use = KDAT_CM_WORK, .work = kdat_cm_on_rep },
	/* while accepting, the table makes it ACCEPT_COMPLETION_ERROR */
	[RDMA_CM_EVENT_CONNECT_ERROR] = { KDAT_CM_STIMULUS, KDAT_EP_STIM_BROKEN },
	[RDMA_CM_EVENT_UNREACHABLE] = { KDAT_CM_FAILURE, KDAT_EP_STIM_UNREACHABLE },
	[RDMA_CM_EVENT_REJECTED] = { .use = KDAT_CM_WORK, .work = kdat_cm_on_rej },
	[RDMA_CM_EVENT_ESTABLISHED] = { .use = KDAT_CM_WORK, .work = kdat_cm_on_established },
	/* its work steps DISCONNECTED, or leaves a graceful close to kdat_wq */
	[RDMA_CM_EVENT_DISCONNECTED] = { .use = KDAT_CM_WORK, .work = kdat_cm_on_disconnected },
	/* kdat's ib_client tears the IA down before rdma_cm gets here */
	[RDMA_CM_EVENT_DEVICE_REMOVAL] = { KDAT_CM_STIMULUS, KDAT_EP_STIM_DEVICE_REMOVED },
	[RDMA_CM_EVENT_TIMEWAIT_EXIT] = { .use = KDAT_CM_WORK, .work = kdat_cm_on_timewait_exit },
};

static_assert(KDAT_EP_STIM_COUNT <= U8_MAX);

static int kdat_ep_cm_event(struct kdat_obj *obj, struct rdma_cm_id *id,
			    struct rdma_cm_event *ev)
{
	struct kdat_ep *ep = container_of(obj, struct kdat_ep, obj);
	struct kdat_cm_send send;
	unsigned int use = KDAT_CM_IGNORED, stimulus = 0;
	int destroy;
	u32 before, syncs;

	send.what = KDAT_SEND_NONE;
	send.drop_id = false;
	send.close_later = false;
	if ((unsigned int)ev->event < ARRAY_SIZE(kdat_cm_event_map)) {
		use = kdat_cm_event_map[ev->event].use;
		stimulus = kdat_cm_event_map[ev->event].stimulus;
	}

	mutex_lock(&ep->lock);
	if (ep->obj.dead || ep->cm_id != id) {
		/*
		 * Stale: the EP moved on (timeout, abort, free) and whoever took
		 * the id destroys it -- or an orphan adopted it while we waited
		 * for the lock: then the event is the orphan's.
		 */
		bool adopted = id->context != ep;

		mutex_unlock(&ep->lock);
		return adopted ? kdat_cm_upcall(id, ev) : 0;
	}
	before = ep->state;
	syncs = ep->rec_syncs;
	if (use != KDAT_CM_IGNORED && kdat_cm_event_map[ev->event].work)
		kdat_cm_event_map[ev->event].work(ep, id, ev, &send);
	if (use == KDAT_CM_STIMULUS)
		kdat_ep_step(ep, stimulus, NULL, 0);
	else if (use == KDAT_CM_FAILURE)
		kdat_ep_step(ep, kdat_ep_failure(ep, stimulus), NULL, 0);
	destroy = send.drop_id ? kdat_cm_release_id(ep, id) :
				 kdat_cm_attempt_over(ep, id, before);
	kdat_ep_rec_sync_since(ep, syncs);	/* addresses, IRD/ORD */
	mutex_unlock(&ep->lock);
	if (send.what != KDAT_SEND_NONE && kdat_cm_ep_sent(ep, id, ev, &send))
		destroy = 1;
	if (send.close_later)
		kdat_ep_graceful_queue(ep);
	if (destroy)
		kdat_obj_put(&ep->obj);	/* the id's reference */
	return destroy;
}
