// SPDX-License-Identifier: GPL-2.0
/*
 * Data transfer for kernel EPs: LMRs (DMA-mapped kernel buffers), RMRs
 * (fast-registration MRs bound through an EP), send/receive/RDMA posts and
 * their completions as DAT events.
 *
 * The completion path runs on the CQ's workqueue and takes no kdat lock but
 * the EP's wr_lock and the EVD's lock, so the connection code may drain the
 * QP (ib_drain_qp) while holding ep->lock: that is how every completion is
 * queued before the DISCONNECTED event.
 */
#include <linux/dma-mapping.h>
#include <linux/moduleparam.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include "kdat_conn.h"

/* ---- per-request contexts -------------------------------------------------- */

static struct kdat_wr *kdat_wr_list(struct kdat_wr *ring, u32 n)
{
	u32 i;

	for (i = 0; i + 1 < n; i++)
		ring[i].next_free = &ring[i + 1];
	return n ? &ring[0] : NULL;
}


/*
 * posts: whether the kernel may post on this EP.  Only a kernel consumer's
 * EP with a kernel QP can: /dev/kdat has no data path and a user QP is
 * posted to from userspace, so those EPs do without the work request rings
 * (about 2 KiB per EP; the free lists stay empty).
 */
static void kdat_ep_hold_expired(struct work_struct *work);

int kdat_ep_dto_init(struct kdat_ep *ep, bool posts)
{
	u32 nsend = ep->attr.max_request_dtos, nrecv = ep->attr.max_recv_dtos;

	spin_lock_init(&ep->wr_lock);
	INIT_LIST_HEAD(&ep->held_sends);
	INIT_DELAYED_WORK(&ep->hold_work, kdat_ep_hold_expired);
	atomic_set(&ep->sends_in_flight, 0);
	if (!posts)
		return 0;
	/* one allocation for both: the default 16 + 16 fill a 1 KiB slab object */
	ep->wrs = kcalloc(nsend + nrecv, sizeof(*ep->wrs), GFP_KERNEL);
	if (!ep->wrs)
		return -ENOMEM;
	ep->send_free = kdat_wr_list(ep->wrs, nsend);
	ep->recv_free = kdat_wr_list(ep->wrs + nsend, nrecv);
	return 0;
}

void kdat_ep_dto_exit(struct kdat_ep *ep)
{
	kfree(ep->wrs);
	ep->wrs = NULL;
	ep->send_free = NULL;
	ep->recv_free = NULL;
}

static struct kdat_wr *kdat_wr_get(struct kdat_ep *ep, bool recv)
{
	struct kdat_wr **head = recv ? &ep->recv_free : &ep->send_free;
	struct kdat_wr *wr;
	unsigned long flags;

	spin_lock_irqsave(&ep->wr_lock, flags);
	wr = *head;
	if (wr)
		*head = wr->next_free;
	spin_unlock_irqrestore(&ep->wr_lock, flags);
	return wr;
}

static void kdat_wr_put(struct kdat_ep *ep, struct kdat_wr *wr, bool recv)
{
	struct kdat_wr **head = recv ? &ep->recv_free : &ep->send_free;
	unsigned long flags;

	spin_lock_irqsave(&ep->wr_lock, flags);
	wr->next_free = *head;
	*head = wr;
	spin_unlock_irqrestore(&ep->wr_lock, flags);
}

/* ---- completions ------------------------------------------------------------------ */

u32 kdat_dto_status(enum ib_wc_status status)
{
	switch (status) {
	case IB_WC_SUCCESS: return KDAT_DAT_DTO_SUCCESS;
	case IB_WC_WR_FLUSH_ERR: return KDAT_DAT_DTO_ERR_FLUSHED;
	case IB_WC_LOC_LEN_ERR: return KDAT_DAT_DTO_ERR_LOCAL_LENGTH;
	case IB_WC_LOC_QP_OP_ERR: return KDAT_DAT_DTO_ERR_LOCAL_EP;
	case IB_WC_LOC_PROT_ERR: return KDAT_DAT_DTO_ERR_LOCAL_PROTECTION;
	case IB_WC_BAD_RESP_ERR: return KDAT_DAT_DTO_ERR_BAD_RESPONSE;
	case IB_WC_REM_ACCESS_ERR: return KDAT_DAT_DTO_ERR_REMOTE_ACCESS;
	case IB_WC_REM_INV_REQ_ERR:
	case IB_WC_REM_OP_ERR: return KDAT_DAT_DTO_ERR_REMOTE_RESPONDER;
	case IB_WC_RNR_RETRY_EXC_ERR: return KDAT_DAT_DTO_ERR_RECEIVER_NOT_READY;
	case IB_WC_MW_BIND_ERR: return KDAT_DAT_RMR_OPERATION_FAILED;
	default: return KDAT_DAT_DTO_ERR_TRANSPORT;
	}
}

/* ---- seed 004: over iWARP the active side sends first ------------------------------ */

/*
 * MPA (RFC 5044) forbids a responder's FPDU before the initiator's first one,
 * and siw fails the initiator's connect when one comes with the MPA reply.
 * So an accepted kernel-QP EP on iWARP holds every send-queue post (a copy
 * of the one work request each kdat post makes) until its first receive
 * completes.  A consumer whose passive side speaks first breaks MPA's rule;
 * the hold must not hang it: after first_send_hold_ms the requests go out.
 * A flush of the QP posts them to the QP in ERR, which completes them
 * flushed like any other, so the DISCONNECTED still comes after them.
 */
static unsigned int first_send_hold_ms = 1000;
module_param(first_send_hold_ms, uint, 0644);
MODULE_PARM_DESC(first_send_hold_ms,
		 "iWARP: ms (1-60000) an accepted EP holds its first sends for the peer's first message (default 1000)");

struct kdat_held_send {
	struct list_head node;
	union {
		struct ib_send_wr wr;
		struct ib_rdma_wr rdma;
		struct ib_reg_wr reg;
	};
	struct ib_sge sge[];
};

/* The QP goes to RTS for a connection: hold its sends if it is iWARP's responder. */
void kdat_ep_hold_first_sends(struct kdat_ep *ep)
{
	bool hold = ep->qp && !ep->active &&
		    rdma_protocol_iwarp(ep->ia->ibdev, ep->ia->port_num);
	unsigned long flags;

	spin_lock_irqsave(&ep->post_lock, flags);
	ep->first_send_hold = hold;
	spin_unlock_irqrestore(&ep->post_lock, flags);
}

/* Caller holds post_lock; any context. */
static int kdat_hold_send(struct kdat_ep *ep, const struct ib_send_wr *wr)
{
	struct kdat_held_send *held;

	lockdep_assert_held(&ep->post_lock);
	held = kzalloc(struct_size(held, sge, wr->num_sge), GFP_ATOMIC);
	if (!held)
		return -ENOMEM;
	switch (wr->opcode) {
	case IB_WR_RDMA_WRITE:
	case IB_WR_RDMA_WRITE_WITH_IMM:
	case IB_WR_RDMA_READ:
		held->rdma = *rdma_wr(wr);
		break;
	case IB_WR_REG_MR:
		held->reg = *reg_wr(wr);
		break;
	default:
		held->wr = *wr;
		break;
	}
	held->wr.next = NULL;	/* every kdat post is one work request */
	memcpy(held->sge, wr->sg_list, wr->num_sge * sizeof(*wr->sg_list));
	held->wr.sg_list = held->sge;
	if (list_empty(&ep->held_sends)) {
		unsigned int ms = clamp(READ_ONCE(first_send_hold_ms), 1U, 60000U);

		kdat_obj_get_ref(&ep->obj);	/* the timer's */
		if (!queue_delayed_work(kdat_wq, &ep->hold_work, msecs_to_jiffies(ms)))
			kdat_obj_put(&ep->obj);
	}
	list_add_tail(&held->node, &ep->held_sends);
	return 0;
}

/* A held request that will never be posted completes flushed through its own done(). */
static void kdat_held_refused(struct kdat_ep *ep, struct kdat_held_send *held)
{
	struct ib_wc wc = {
		.wr_cqe = held->wr.wr_cqe,
		.status = IB_WC_WR_FLUSH_ERR,
		.qp = ep->qp,
	};

	held->wr.wr_cqe->done(ep->cq, &wc);
	kfree(held);
}

/* The hold's timer is not needed any more: the reference it holds goes. */
static void kdat_ep_hold_timer_stop(struct kdat_ep *ep)
{
	if (cancel_delayed_work(&ep->hold_work))
		kdat_obj_put(&ep->obj);
}

/*
 * The first receive completed (CQ context), or the peer did not speak within
 * first_send_hold_ms (kdat_wq): the held requests go out, in order and
 * before any post made after this.  Not while posting is closed: the flush
 * at work then takes them (kdat_ep_flush_held).
 */
void kdat_ep_first_recv(struct kdat_ep *ep)
{
	struct kdat_held_send *held, *next;
	unsigned long flags;
	LIST_HEAD(refused);

	spin_lock_irqsave(&ep->post_lock, flags);
	if (ep->first_send_hold && !ep->posts_closed) {
		ep->first_send_hold = false;
		list_for_each_entry_safe(held, next, &ep->held_sends, node) {
			if (ib_post_send(ep->qp, &held->wr, NULL)) {
				list_move_tail(&held->node, &refused);
			} else {
				list_del(&held->node);
				kfree(held);
			}
		}
	}
	spin_unlock_irqrestore(&ep->post_lock, flags);
	list_for_each_entry_safe(held, next, &refused, node)
		kdat_held_refused(ep, held);
	kdat_ep_hold_timer_stop(ep);
}

static void kdat_ep_hold_expired(struct work_struct *work)
{
	struct kdat_ep *ep = container_of(to_delayed_work(work), struct kdat_ep, hold_work);

	kdat_ep_first_recv(ep);
	kdat_obj_put(&ep->obj);
}

/*
 * Posting is closed, the QP about to go to ERR, RESET or away: the held
 * requests go to it in ERR, which completes them flushed like everything
 * else posted, so a drain after this waits for them too.
 */
void kdat_ep_flush_held(struct kdat_ep *ep)
{
	struct ib_qp_attr attr = { .qp_state = IB_QPS_ERR };
	struct kdat_held_send *held, *next;
	unsigned long flags;
	LIST_HEAD(taken);

	spin_lock_irqsave(&ep->post_lock, flags);
	ep->first_send_hold = false;
	list_splice_init(&ep->held_sends, &taken);
	spin_unlock_irqrestore(&ep->post_lock, flags);
	kdat_ep_hold_timer_stop(ep);
	if (list_empty(&taken))
		return;
	if (!ep->qp_err)
		ib_modify_qp(ep->qp, &attr, IB_QP_STATE);
	list_for_each_entry_safe(held, next, &taken, node) {
		list_del(&held->node);
		if (ib_post_send(ep->qp, &held->wr, NULL))
			kdat_held_refused(ep, held);
		else
			kfree(held);
	}
}

/* Graceful disconnect proceeds once the last in-flight send completed. */
void kdat_ep_send_done(struct kdat_ep *ep)
{
	if (atomic_dec_and_test(&ep->sends_in_flight) && READ_ONCE(ep->dreq) == KDAT_DREQ_WAITS)
		kdat_ep_graceful_queue(ep);
}

static void kdat_wr_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct kdat_wr *wr = container_of(wc->wr_cqe, struct kdat_wr, cqe);
	struct kdat_ep *ep = cq->cq_context;	/* each EP has its own CQ */
	bool recv = wr->kind == KDAT_WR_RECV;
	struct kdat_event_info info = {
		.number = wr->kind == KDAT_WR_BIND ? KDAT_DAT_RMR_BIND_COMPLETION_EVENT :
			  KDAT_DAT_DTO_COMPLETION_EVENT,
		.ep = ep,
		.cookie = wr->cookie,
		.dto_status = kdat_dto_status(wc->status),
		.transfered_length = recv ? wc->byte_len : wr->length,
	};

	if (recv && unlikely(READ_ONCE(ep->first_send_hold)))
		kdat_ep_first_recv(ep);
	if (wr->kind == KDAT_WR_BIND && wr->rmr)
		wr->rmr->bound = wc->status == IB_WC_SUCCESS;
	kdat_evd_post(recv ? READ_ONCE(ep->recv_evd) : READ_ONCE(ep->request_evd), &info);
	kdat_wr_put(ep, wr, recv);
	if (!recv)
		kdat_ep_send_done(ep);
}

/* ---- posting ------------------------------------------------------------------------ */

/*
 * Every post goes through these two.  -ESHUTDOWN: kdat closed posting (the
 * QP is being flushed, reset or freed) after the caller's state check.
 */
int kdat_qp_post_send(struct kdat_ep *ep, const struct ib_send_wr *wr)
{
	unsigned long flags;
	int err = -ESHUTDOWN;

	spin_lock_irqsave(&ep->post_lock, flags);
	if (!ep->posts_closed)
		err = unlikely(ep->first_send_hold) ? kdat_hold_send(ep, wr) :
		      ib_post_send(ep->qp, wr, NULL);
	spin_unlock_irqrestore(&ep->post_lock, flags);
	return err;
}

int kdat_qp_post_recv(struct kdat_ep *ep, const struct ib_recv_wr *wr)
{
	unsigned long flags;
	int err = -ESHUTDOWN;

	spin_lock_irqsave(&ep->post_lock, flags);
	if (!ep->posts_closed)
		err = ib_post_recv(ep->qp, wr, NULL);
	spin_unlock_irqrestore(&ep->post_lock, flags);
	return err;
}

/* Before the QP goes to ERR or RESET, or away: posts that got in are on it. */
void kdat_ep_close_posts(struct kdat_ep *ep)
{
	unsigned long flags;

	spin_lock_irqsave(&ep->post_lock, flags);
	ep->posts_closed = true;
	spin_unlock_irqrestore(&ep->post_lock, flags);
}

/* The QP is back in INIT. */
void kdat_ep_open_posts(struct kdat_ep *ep)
{
	unsigned long flags;

	spin_lock_irqsave(&ep->post_lock, flags);
	ep->posts_closed = false;
	ep->first_send_hold = false;
	spin_unlock_irqrestore(&ep->post_lock, flags);
}

/* A post's ib_post_* failed: refused (-ESHUTDOWN, posting closed) or out of room. */
kdat_ret_t kdat_post_failed(struct kdat_ep *ep, int err)
{
	if (err == -ESHUTDOWN)
		return kdat_err(KDAT_DAT_INVALID_STATE,
				kdat_ep_invalid_state_subtype(READ_ONCE(ep->state)));
	return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_TEP);
}

bool kdat_ep_may_post(struct kdat_ep *ep, unsigned int stimulus)
{
	struct kdat_ep_step step = kdat_ep_lookup(READ_ONCE(ep->state), stimulus);

	return step.action != KDAT_EP_INVALID && ep->qp && !READ_ONCE(ep->obj.dead);
}

static kdat_ret_t kdat_build_sges(struct kdat_ep *ep, const struct kdat_iov *iov, u32 n,
				  struct ib_sge *sge, u32 *total)
{
	u32 i;

	if (n > KDAT_MAX_IOV || (n && !iov))
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	*total = 0;
	for (i = 0; i < n; i++) {
		const struct kdat_iov *v = &iov[i];

		if (!v->lmr || v->lmr->ia != ep->ia || v->offset > v->lmr->length ||
		    v->length > v->lmr->length - v->offset)
			return kdat_err(KDAT_DAT_PROTECTION_VIOLATION, KDAT_DAT_NO_SUBTYPE);
		sge[i].addr = v->lmr->dma + v->offset;
		sge[i].length = v->length;
		sge[i].lkey = ep->ia->local_dma_lkey;
		*total += v->length;
	}
	return KDAT_DAT_SUCCESS;
}

kdat_ret_t kdat_ep_post_recv(struct kdat_ep *ep, const struct kdat_iov *iov, u32 n_iov,
			     u64 cookie)
{
	struct ib_sge sge[KDAT_MAX_IOV];
	struct ib_recv_wr wr = {};
	struct kdat_wr *ctx;
	kdat_ret_t ret;
	u32 total;
	int err;

	if (!kdat_ep_may_post(ep, KDAT_EP_STIM_POST_RECV))
		return kdat_err(KDAT_DAT_INVALID_STATE,
				kdat_ep_invalid_state_subtype(READ_ONCE(ep->state)));
	ret = kdat_build_sges(ep, iov, n_iov, sge, &total);
	if (ret)
		return ret;
	ctx = kdat_wr_get(ep, true);
	if (!ctx)
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_TEP);
	WRITE_ONCE(ep->ever_posted, true);
	ctx->cookie = cookie;
	ctx->length = total;
	ctx->kind = KDAT_WR_RECV;
	ctx->cqe.done = kdat_wr_done;
	wr.wr_cqe = &ctx->cqe;
	wr.sg_list = sge;
	wr.num_sge = n_iov;
	err = kdat_qp_post_recv(ep, &wr);
	if (err) {
		kdat_wr_put(ep, ctx, true);
		return kdat_post_failed(ep, err);
	}
	return KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(kdat_ep_post_recv);

static kdat_ret_t kdat_post_send_wr(struct kdat_ep *ep, struct ib_send_wr *wr,
				    struct kdat_wr *ctx)
{
	int err;

	WRITE_ONCE(ep->ever_posted, true);
	atomic_inc(&ep->sends_in_flight);
	err = kdat_qp_post_send(ep, wr);
	if (err) {
		atomic_dec(&ep->sends_in_flight);
		kdat_wr_put(ep, ctx, false);
		return kdat_post_failed(ep, err);
	}
	return KDAT_DAT_SUCCESS;
}

static kdat_ret_t kdat_ep_post(struct kdat_ep *ep, const struct kdat_iov *iov, u32 n_iov,
			       u64 cookie, u8 kind, u64 raddr, u32 rkey)
{
	struct ib_sge sge[KDAT_MAX_IOV];
	struct ib_rdma_wr rdma = {};
	struct ib_send_wr *wr = &rdma.wr;
	struct kdat_wr *ctx;
	kdat_ret_t ret;
	u32 total;

	if (!kdat_ep_may_post(ep, KDAT_EP_STIM_POST_SEND))
		return kdat_err(KDAT_DAT_INVALID_STATE,
				kdat_ep_invalid_state_subtype(READ_ONCE(ep->state)));
	ret = kdat_build_sges(ep, iov, n_iov, sge, &total);
	if (ret)
		return ret;
	ctx = kdat_wr_get(ep, false);
	if (!ctx)
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_TEP);
	ctx->cookie = cookie;
	ctx->length = total;
	ctx->kind = kind;
	ctx->rmr = NULL;
	ctx->cqe.done = kdat_wr_done;
	wr->wr_cqe = &ctx->cqe;
	wr->sg_list = sge;
	wr->num_sge = n_iov;
	wr->send_flags = IB_SEND_SIGNALED;
	switch (kind) {
	case KDAT_WR_SEND:
		wr->opcode = IB_WR_SEND;
		break;
	case KDAT_WR_RDMA_WRITE:
		wr->opcode = IB_WR_RDMA_WRITE;
		break;
	default:
		wr->opcode = IB_WR_RDMA_READ;
		break;
	}
	rdma.remote_addr = raddr;
	rdma.rkey = rkey;
	return kdat_post_send_wr(ep, wr, ctx);
}

kdat_ret_t kdat_ep_post_send(struct kdat_ep *ep, const struct kdat_iov *iov, u32 n_iov,
			     u64 cookie)
{
	return kdat_ep_post(ep, iov, n_iov, cookie, KDAT_WR_SEND, 0, 0);
}
EXPORT_SYMBOL_GPL(kdat_ep_post_send);

kdat_ret_t kdat_ep_post_rdma_write(struct kdat_ep *ep, const struct kdat_iov *iov,
				   u32 n_iov, u64 cookie, u64 target, u32 rmr_context)
{
	return kdat_ep_post(ep, iov, n_iov, cookie, KDAT_WR_RDMA_WRITE, target, rmr_context);
}
EXPORT_SYMBOL_GPL(kdat_ep_post_rdma_write);

kdat_ret_t kdat_ep_post_rdma_read(struct kdat_ep *ep, const struct kdat_iov *iov,
				  u32 n_iov, u64 cookie, u64 target, u32 rmr_context)
{
	if (n_iov > 1 && n_iov > ep->ia->ibdev->attrs.max_sge_rd)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG3);
	/* ORD 0 (negotiated or asked for): the QP could never issue it */
	if (!READ_ONCE(ep->ord))
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG1);
	return kdat_ep_post(ep, iov, n_iov, cookie, KDAT_WR_RDMA_READ, target, rmr_context);
}
EXPORT_SYMBOL_GPL(kdat_ep_post_rdma_read);

/* ---- disconnect support --------------------------------------------------------------- */

/*
 * Moves the QP to ERR and waits until every posted request has completed
 * (flushed if it had not run): their events are queued after this returns,
 * before the caller posts DISCONNECTED.  Caller holds ep->lock.
 */
void kdat_ep_flush(struct kdat_ep *ep)
{
	struct ib_qp_attr attr = { .qp_state = IB_QPS_ERR };

	lockdep_assert_held(&ep->lock);
	if (!ep->qp)
		return;
	kdat_ep_close_posts(ep);
	/*
	 * Nothing was ever posted (every /dev/kdat EP, and kernel EPs used only
	 * for connection management): ERR is enough, there is nothing to wait
	 * for.  Draining costs two marker requests and a CQ round trip per EP,
	 * under the EP's lock, which is what made teardown slow (bench/).
	 */
	if (!ep->qp_err)
		ib_modify_qp(ep->qp, &attr, IB_QP_STATE);
	ep->qp_err = true;
	kdat_ep_flush_held(ep);
	if (READ_ONCE(ep->ever_posted))
		ib_drain_qp(ep->qp);
}

bool kdat_ep_graceful_ready(struct kdat_ep *ep)
{
	return atomic_read(&ep->sends_in_flight) == 0;
}

/* ---- LMR and RMR ------------------------------------------------------------------------ */

kdat_ret_t kdat_lmr_create(struct kdat_ia *ia, void *buf, u64 length, struct kdat_lmr **out)
{
	struct kdat_ctx *ctx = ia->obj.ctx;
	struct kdat_lmr *lmr;
	kdat_ret_t ret = KDAT_DAT_SUCCESS;

	if (!buf || !length || !virt_addr_valid(buf) || length > U32_MAX)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	lmr = kzalloc(sizeof(*lmr), GFP_KERNEL);
	if (!lmr)
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
	mutex_lock(&ctx->lock);
	if (ia->obj.dead || ia->removed) {
		ret = kdat_err(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE);
		goto out;
	}
	lmr->dma = ib_dma_map_single(ia->ibdev, buf, length, DMA_BIDIRECTIONAL);
	if (ib_dma_mapping_error(ia->ibdev, lmr->dma)) {
		ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY_REGION);
		goto out;
	}
	lmr->ia = ia;
	lmr->buf = buf;
	lmr->length = length;
	list_add_tail(&lmr->ia_node, &ia->lmrs);
	*out = lmr;
out:
	mutex_unlock(&ctx->lock);
	if (ret)
		kfree(lmr);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_lmr_create);

static void kdat_lmr_release(struct kdat_lmr *lmr)
{
	list_del(&lmr->ia_node);
	if (!lmr->unmapped)
		ib_dma_unmap_single(lmr->ia->ibdev, lmr->dma, lmr->length, DMA_BIDIRECTIONAL);
	kfree(lmr);
}

kdat_ret_t kdat_lmr_free(struct kdat_lmr *lmr)
{
	struct kdat_ctx *ctx = lmr->ia->obj.ctx;

	mutex_lock(&ctx->lock);
	kdat_lmr_release(lmr);
	mutex_unlock(&ctx->lock);
	return KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(kdat_lmr_free);

void kdat_lmr_sync_for_cpu(struct kdat_lmr *lmr)
{
	if (READ_ONCE(lmr->unmapped))
		return;
	ib_dma_sync_single_for_cpu(lmr->ia->ibdev, lmr->dma, lmr->length, DMA_BIDIRECTIONAL);
}
EXPORT_SYMBOL_GPL(kdat_lmr_sync_for_cpu);

void kdat_lmr_sync_for_device(struct kdat_lmr *lmr)
{
	if (READ_ONCE(lmr->unmapped))
		return;
	ib_dma_sync_single_for_device(lmr->ia->ibdev, lmr->dma, lmr->length, DMA_BIDIRECTIONAL);
}
EXPORT_SYMBOL_GPL(kdat_lmr_sync_for_device);

kdat_ret_t kdat_rmr_create(struct kdat_ia *ia, struct kdat_rmr **out)
{
	struct kdat_ctx *ctx = ia->obj.ctx;
	struct kdat_rmr *rmr = kzalloc(sizeof(*rmr), GFP_KERNEL);

	if (!rmr)
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
	rmr->ia = ia;
	mutex_lock(&ctx->lock);
	list_add_tail(&rmr->ia_node, &ia->rmrs);
	mutex_unlock(&ctx->lock);
	*out = rmr;
	return KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(kdat_rmr_create);

static void kdat_rmr_release(struct kdat_rmr *rmr)
{
	list_del(&rmr->ia_node);
	if (rmr->mr)
		ib_dereg_mr(rmr->mr);
	kfree(rmr);
}

kdat_ret_t kdat_rmr_free(struct kdat_rmr *rmr)
{
	struct kdat_ctx *ctx = rmr->ia->obj.ctx;

	mutex_lock(&ctx->lock);
	kdat_rmr_release(rmr);
	mutex_unlock(&ctx->lock);
	return KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(kdat_rmr_free);

kdat_ret_t kdat_rmr_bind(struct kdat_rmr *rmr, struct kdat_ep *ep, const struct kdat_iov *iov,
			 u32 access, u64 cookie, u32 *rmr_context, u64 *target)
{
	struct kdat_ctx *ctx = ep->obj.ctx;
	struct ib_reg_wr reg = {};
	struct scatterlist sg;
	struct kdat_wr *wctx;
	kdat_ret_t ret;
	u32 pages;
	int n;

	if (!iov || !iov->lmr || access & ~(KDAT_RMR_REMOTE_READ | KDAT_RMR_REMOTE_WRITE) ||
	    iov->lmr->ia != ep->ia || rmr->ia != ep->ia || !iov->length ||
	    iov->offset > iov->lmr->length || iov->length > iov->lmr->length - iov->offset)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG3);
	/* ctx->lock: the RMR (the IA's lists); ep->lock: the EP's state and QP */
	mutex_lock(&ctx->lock);
	mutex_lock(&ep->lock);
	/* a bind is a send-queue request: where the table takes sends */
	if (ep->obj.dead || !kdat_ep_state_allows(ep->state, KDAT_EP_STIM_POST_SEND) || !ep->qp) {
		ret = kdat_err(KDAT_DAT_INVALID_STATE, kdat_ep_invalid_state_subtype(ep->state));
		goto out;
	}
	pages = DIV_ROUND_UP(offset_in_page(iov->lmr->dma + iov->offset) + iov->length, PAGE_SIZE);
	if (rmr->mr && rmr->max_pages < pages) {
		ib_dereg_mr(rmr->mr);
		rmr->mr = NULL;
	}
	if (!rmr->mr) {
		rmr->mr = ib_alloc_mr(ep->ia->pd, IB_MR_TYPE_MEM_REG, pages);
		if (IS_ERR(rmr->mr)) {
			rmr->mr = NULL;
			ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES,
				       KDAT_DAT_RESOURCE_MEMORY_REGION);
			goto out;
		}
		rmr->max_pages = pages;
	}
	sg_init_table(&sg, 1);
	sg_dma_address(&sg) = iov->lmr->dma + iov->offset;
	sg_dma_len(&sg) = iov->length;
	n = ib_map_mr_sg(rmr->mr, &sg, 1, NULL, PAGE_SIZE);
	if (n != 1) {
		ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY_REGION);
		goto out;
	}
	/* a new key per bind: the peer's old rmr_context stops working */
	ib_update_fast_reg_key(rmr->mr, ib_inc_rkey(rmr->mr->rkey));
	wctx = kdat_wr_get(ep, false);
	if (!wctx) {
		ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_TEP);
		goto out;
	}
	wctx->cookie = cookie;
	wctx->length = iov->length;
	wctx->kind = KDAT_WR_BIND;
	wctx->rmr = rmr;
	wctx->cqe.done = kdat_wr_done;
	rmr->bound = false;
	reg.wr.opcode = IB_WR_REG_MR;
	reg.wr.wr_cqe = &wctx->cqe;
	reg.wr.send_flags = IB_SEND_SIGNALED;
	reg.mr = rmr->mr;
	reg.key = rmr->mr->rkey;
	reg.access = IB_ACCESS_LOCAL_WRITE |
		     (access & KDAT_RMR_REMOTE_READ ? IB_ACCESS_REMOTE_READ : 0) |
		     (access & KDAT_RMR_REMOTE_WRITE ? IB_ACCESS_REMOTE_WRITE : 0);
	ret = kdat_post_send_wr(ep, &reg.wr, wctx);
	if (!ret) {
		*rmr_context = rmr->mr->rkey;
		*target = rmr->mr->iova;
	}
out:
	mutex_unlock(&ep->lock);
	mutex_unlock(&ctx->lock);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_rmr_bind);

/*
 * Device removal: the device's mappings and registrations of kernel
 * consumers' LMRs and RMRs go now; the objects stay on the IA's lists for
 * their consumer's kdat_lmr_free/kdat_rmr_free, or kdat_ia_close().
 */
void kdat_ia_release_memory(struct kdat_ia *ia)
{
	struct kdat_lmr *lmr;
	struct kdat_rmr *rmr;

	lockdep_assert_held(&ia->obj.ctx->lock);
	list_for_each_entry(rmr, &ia->rmrs, ia_node) {
		if (rmr->mr)
			ib_dereg_mr(rmr->mr);
		rmr->mr = NULL;
	}
	list_for_each_entry(lmr, &ia->lmrs, ia_node) {
		if (!lmr->unmapped)
			ib_dma_unmap_single(ia->ibdev, lmr->dma, lmr->length, DMA_BIDIRECTIONAL);
		lmr->unmapped = true;
	}
}

/* IA teardown: what kernel consumers did not free. */
void kdat_ia_free_memory(struct kdat_ia *ia)
{
	while (!list_empty(&ia->rmrs))
		kdat_rmr_release(list_first_entry(&ia->rmrs, struct kdat_rmr, ia_node));
	while (!list_empty(&ia->lmrs))
		kdat_lmr_release(list_first_entry(&ia->lmrs, struct kdat_lmr, ia_node));
}
