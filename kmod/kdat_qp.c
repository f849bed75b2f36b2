// SPDX-License-Identifier: GPL-2.0
/*
 * The send and receive queues of a kernel EP's QP, below the EP: the work
 * request contexts, the posting gate every post goes through, the first-send
 * hold on iWARP (rdma_connect(3): the active side sends the first message),
 * and the flush that moves the QP to ERR and waits for every posted request.
 * Nothing here calls up into the EP (kdat_ep.c) or into data transfer
 * (kdat_dto.c, kdat_sgl.c): they call down into it.
 */
#include <linux/moduleparam.h>
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

int kdat_ep_wrs_init(struct kdat_ep *ep, bool posts)
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

void kdat_ep_wrs_exit(struct kdat_ep *ep)
{
	kfree(ep->wrs);
	ep->wrs = NULL;
	ep->send_free = NULL;
	ep->recv_free = NULL;
}

struct kdat_wr *kdat_wr_get(struct kdat_ep *ep, bool recv)
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

void kdat_wr_put(struct kdat_ep *ep, struct kdat_wr *wr, bool recv)
{
	struct kdat_wr **head = recv ? &ep->recv_free : &ep->send_free;
	unsigned long flags;

	spin_lock_irqsave(&ep->wr_lock, flags);
	wr->next_free = *head;
	*head = wr;
	spin_unlock_irqrestore(&ep->wr_lock, flags);
}

/* ---- rdma_connect(3): over iWARP the active side sends first --------------------- */

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
