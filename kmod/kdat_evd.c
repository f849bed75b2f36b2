// SPDX-License-Identifier: GPL-2.0
/*
 * Event dispatchers: the queue of events of one EVD, waits and dequeues, and the
 * hand-off to its ring (kdat_ring.c) when userspace mapped one.
 */
#include <linux/slab.h>
#include <linux/sched/signal.h>
#include "kdat_base.h"

static void kdat_evd_rec_fill(struct kdat_record *rec, struct kdat_obj *obj)
{
	struct kdat_evd *evd = container_of(obj, struct kdat_evd, obj);

	rec->state = evd->flags & KDAT_EVD_FLAGS_ALL;
	rec->owner = kdat_obj_handle(evd->ia);
	rec->flags = READ_ONCE(evd->ring) ? KDAT_RECF_RING : 0;
	kdat_rec_port(rec, evd->ia);
}

/*
 * Empties the queue (putting the references its events hold) and frees the
 * spare slots, in one pass under the lock: at kill, and again at release for
 * whatever was recycled or posted since.
 */
static void kdat_evd_drain(struct kdat_evd *evd)
{
	struct kdat_qevent *qe, *tmp;
	unsigned long flags;
	LIST_HEAD(events);
	LIST_HEAD(spares);

	spin_lock_irqsave(&evd->lock, flags);
	list_splice_init(&evd->events, &events);
	evd->count = 0;
	list_splice_init(&evd->spares, &spares);
	evd->nspares = 0;
	spin_unlock_irqrestore(&evd->lock, flags);
	list_for_each_entry_safe(qe, tmp, &events, node) {
		kdat_event_put_refs(&qe->info);
		kfree(qe);
	}
	list_for_each_entry_safe(qe, tmp, &spares, node)
		kfree(qe);
}

static void kdat_evd_release(struct kdat_obj *obj)
{
	struct kdat_evd *evd = container_of(obj, struct kdat_evd, obj);

	kdat_evd_drain(evd);
	kdat_ring_put(evd->ring);
	kdat_obj_put(&evd->ia->obj);	/* as an EP's (kdat_ep_release) */
}

static const struct kdat_obj_class kdat_evd_class = {
	.rec_type = KDAT_REC_EVD,
	.rec_fill = kdat_evd_rec_fill,
	.release = kdat_evd_release,
};

/*
 * Queue an event.  Never drops one silently: if memory for it cannot be had,
 * the EVD counts it and the next wait/dequeue reports DAT_QUEUE_FULL.  A ring
 * with room takes it directly; otherwise it goes into a spare slot, or a new
 * one (GFP_KERNEL: process context).
 */
void kdat_evd_post(struct kdat_evd *evd, const struct kdat_event_info *info)
{
	struct kdat_qevent *qe;
	unsigned long flags;

	if (!evd)
		return;
	spin_lock_irqsave(&evd->lock, flags);
	if (evd->gone)
		goto dropped;
	if (evd->ring) {
		struct kdat_event_info with_evd = *info;

		/* straight into the ring unless it is full or others wait before us */
		with_evd.evd = evd;
		if (kdat_ring_fill(evd, &with_evd))
			goto posted;
	}
	qe = list_first_entry_or_null(&evd->spares, struct kdat_qevent, node);
	if (qe) {
		list_del(&qe->node);
		evd->nspares--;
	} else {
		spin_unlock_irqrestore(&evd->lock, flags);
		qe = kmalloc(sizeof(*qe), GFP_KERNEL);
		spin_lock_irqsave(&evd->lock, flags);
		if (evd->gone) {
			kfree(qe);
			goto dropped;
		}
	}
	if (qe) {
		/* A queued event pins the objects it names until it is taken. */
		qe->info = *info;
		qe->info.evd = evd;
		kdat_event_get_refs(&qe->info);
		list_add_tail(&qe->node, &evd->events);
		evd->count++;
	} else {
		evd->lost++;
	}
	if (evd->ring)
		kdat_ring_fill(evd, NULL);	/* mirror backlog and overflow */
posted:
	spin_unlock_irqrestore(&evd->lock, flags);
	wake_up_all(&evd->wq);
	if (evd->ring)
		kdat_ring_wake(evd);
	if (evd->upcall)
		evd->upcall(evd, evd->upcall_context);
	return;
dropped:
	/* nobody takes it: the consumer freed the EVD (its queued events went at kill) */
	spin_unlock_irqrestore(&evd->lock, flags);
}

/* handle: as for kdat_ia_open_in() */
kdat_ret_t kdat_evd_create_in(struct kdat_ia *ia, u32 qlen, u32 flags, kdat_upcall_t upcall,
			      void *context, struct kdat_evd **out, u32 *handle)
{
	struct kdat_ctx *ctx = ia->obj.ctx;
	struct kdat_evd *evd;
	kdat_ret_t ret = KDAT_DAT_SUCCESS;

	if (qlen == 0 || qlen > KDAT_MAX_EVD_QLEN)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	if (!(flags & KDAT_EVD_FLAGS_ALL) || (flags & ~(KDAT_EVD_FLAGS_ALL | KDAT_EVD_RING_MODE)))
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG3);
	evd = kzalloc(sizeof(*evd), GFP_KERNEL);
	if (!evd)
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
	evd->qlen = qlen;
	evd->flags = flags;
	evd->upcall = upcall;
	evd->upcall_context = context;
	spin_lock_init(&evd->lock);
	INIT_LIST_HEAD(&evd->events);
	INIT_LIST_HEAD(&evd->spares);
	init_waitqueue_head(&evd->wq);

	mutex_lock(&ctx->lock);
	if (ia->obj.dead || ia->closing) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_IA);
	} else if (ia->removed) {	/* like every other create on a gone device */
		ret = kdat_err(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE);
	} else if (kdat_obj_add(ctx, &evd->obj, KDAT_OBJ_EVD, &kdat_evd_class)) {
		ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
	} else {
		evd->ia = ia;
		kdat_obj_get_ref(&ia->obj);
		list_add_tail(&evd->ia_node, &ia->evds);
		kdat_rec_sync(&evd->obj);
		if (handle)
			*handle = evd->obj.handle;
		if (out)
			*out = evd;
	}
	mutex_unlock(&ctx->lock);
	if (ret)
		kfree(evd);
	return ret;
}

kdat_ret_t kdat_evd_create(struct kdat_ia *ia, u32 qlen, u32 flags,
			   kdat_upcall_t upcall, void *context, struct kdat_evd **out)
{
	/* rings are for userspace consumers */
	if (flags & KDAT_EVD_RING_MODE)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG3);
	return kdat_evd_create_in(ia, qlen, flags, upcall, context, out, NULL);
}
EXPORT_SYMBOL_GPL(kdat_evd_create);

/* Caller holds ctx->lock; drops the table's reference. */
void kdat_evd_kill(struct kdat_evd *evd)
{
	lockdep_assert_held(&evd->obj.ctx->lock);

	kdat_obj_unlink(&evd->obj);
	list_del_init(&evd->ia_node);
	spin_lock_irq(&evd->lock);
	evd->gone = true;
	if (evd->ring)
		kdat_ring_kill(evd);
	spin_unlock_irq(&evd->lock);
	kdat_evd_drain(evd);
	wake_up_all(&evd->wq);
	kdat_obj_put(&evd->obj);
}

kdat_ret_t kdat_evd_free(struct kdat_evd *evd)
{
	struct kdat_ctx *ctx = evd->obj.ctx;
	kdat_ret_t ret = KDAT_DAT_SUCCESS;

	mutex_lock(&ctx->lock);
	if (evd->obj.dead)
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_NO_SUBTYPE);
	else if (evd->users)
		ret = kdat_err(KDAT_DAT_INVALID_STATE, KDAT_DAT_INVALID_STATE_EVD_IN_USE);
	else if (READ_ONCE(evd->waiters))
		ret = kdat_err(KDAT_DAT_INVALID_STATE, KDAT_DAT_INVALID_STATE_EVD_WAITER);
	else
		kdat_evd_kill(evd);
	mutex_unlock(&ctx->lock);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_evd_free);

/* Takes the oldest event, converting nothing: handles are read by the caller. */
static kdat_ret_t kdat_evd_take(struct kdat_evd *evd, struct kdat_event_info *ev,
				u32 *nmore)
{
	struct kdat_qevent *qe = NULL;
	unsigned long flags;
	bool lost;

	spin_lock_irqsave(&evd->lock, flags);
	lost = evd->lost;
	evd->lost = 0;
	if (!lost && !list_empty(&evd->events)) {
		qe = list_first_entry(&evd->events, struct kdat_qevent, node);
		list_del(&qe->node);
		evd->count--;
		*ev = qe->info;
		kdat_evd_recycle(evd, qe);
	}
	if (nmore)
		*nmore = evd->count;
	spin_unlock_irqrestore(&evd->lock, flags);
	if (lost)
		return kdat_err(KDAT_DAT_QUEUE_FULL, KDAT_DAT_NO_SUBTYPE);
	if (!qe)
		return kdat_err(KDAT_DAT_QUEUE_EMPTY, KDAT_DAT_NO_SUBTYPE);
	return KDAT_DAT_SUCCESS;
}

kdat_ret_t kdat_evd_dequeue_ref(struct kdat_evd *evd, struct kdat_event_info *ev, u32 *nmore)
{
	if (READ_ONCE(evd->obj.dead))
		return kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_NO_SUBTYPE);
	return kdat_evd_take(evd, ev, nmore);
}

static bool kdat_evd_ready(struct kdat_evd *evd, u32 threshold)
{
	bool ready;

	spin_lock_irq(&evd->lock);
	ready = evd->count >= threshold || evd->lost || READ_ONCE(evd->obj.dead);
	spin_unlock_irq(&evd->lock);
	return ready;
}

kdat_ret_t kdat_evd_wait_ref(struct kdat_evd *evd, u32 timeout_us, u32 threshold,
			     struct kdat_event_info *ev, u32 *nmore)
{
	int err;

	if (threshold == 0 || threshold > evd->qlen)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG3);
	spin_lock_irq(&evd->lock);
	evd->waiters++;
	spin_unlock_irq(&evd->lock);
	err = kdat_wait_event_us(evd->wq, kdat_evd_ready(evd, threshold), timeout_us);
	spin_lock_irq(&evd->lock);
	evd->waiters--;
	spin_unlock_irq(&evd->lock);
	if (READ_ONCE(evd->obj.dead))
		return kdat_err(KDAT_DAT_ABORT, KDAT_DAT_NO_SUBTYPE);
	if (err == -ERESTARTSYS)
		return kdat_err(KDAT_DAT_INTERRUPTED_CALL, KDAT_DAT_NO_SUBTYPE);
	if (err && !kdat_evd_ready(evd, threshold))
		return kdat_err(KDAT_DAT_TIMEOUT_EXPIRED, KDAT_DAT_NO_SUBTYPE);
	return kdat_evd_take(evd, ev, nmore);
}

static bool kdat_evd_ring_ready(struct kdat_evd *evd, u32 threshold)
{
	bool ready;

	spin_lock_irq(&evd->lock);
	ready = evd->obj.dead || evd->lost || kdat_ring_ready(evd, threshold);
	spin_unlock_irq(&evd->lock);
	return ready;
}

/*
 * A ring EVD's wait: until the ring holds threshold events (the backlog
 * moved in first); its consumer takes them.  timeout_us 0 looks once.
 * available: events in the ring.
 */
kdat_ret_t kdat_evd_ring_wait(struct kdat_evd *evd, u32 timeout_us, u32 threshold,
			      u32 *available)
{
	kdat_ret_t ret = KDAT_DAT_SUCCESS;
	int err = 0;

	if (threshold == 0 || threshold > kdat_ring_entries(evd))
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG3);
	if (timeout_us) {
		spin_lock_irq(&evd->lock);
		evd->waiters++;
		spin_unlock_irq(&evd->lock);
		err = kdat_wait_event_us(evd->wq, kdat_evd_ring_ready(evd, threshold), timeout_us);
		spin_lock_irq(&evd->lock);
		evd->waiters--;
		spin_unlock_irq(&evd->lock);
	}
	spin_lock_irq(&evd->lock);
	if (evd->obj.dead) {
		ret = kdat_err(KDAT_DAT_ABORT, KDAT_DAT_NO_SUBTYPE);
	} else if (evd->lost) {
		/* reported once; the events behind it are still in order */
		evd->lost = 0;
		kdat_ring_fill(evd, NULL);
		ret = kdat_err(KDAT_DAT_QUEUE_FULL, KDAT_DAT_NO_SUBTYPE);
	} else if (kdat_ring_ready(evd, threshold)) {
		ret = KDAT_DAT_SUCCESS;
	} else if (err == -ERESTARTSYS) {
		ret = kdat_err(KDAT_DAT_INTERRUPTED_CALL, KDAT_DAT_NO_SUBTYPE);
	} else {
		ret = kdat_err(KDAT_DAT_TIMEOUT_EXPIRED, KDAT_DAT_NO_SUBTYPE);
	}
	if (available)
		*available = kdat_ring_available(evd);
	spin_unlock_irq(&evd->lock);
	return ret;
}

/* The in-kernel API: the consumer owns the objects an event names. */
kdat_ret_t kdat_evd_wait(struct kdat_evd *evd, u32 timeout_us, u32 threshold,
			 struct kdat_event_info *ev, u32 *nmore)
{
	kdat_ret_t ret = kdat_evd_wait_ref(evd, timeout_us, threshold, ev, nmore);

	if (!ret)
		kdat_event_put_refs(ev);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_evd_wait);

kdat_ret_t kdat_evd_dequeue(struct kdat_evd *evd, struct kdat_event_info *ev, u32 *nmore)
{
	kdat_ret_t ret = kdat_evd_dequeue_ref(evd, ev, nmore);

	if (!ret)
		kdat_event_put_refs(ev);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_evd_dequeue);

void kdat_evd_use(struct kdat_evd *evd)
{
	if (evd) {
		evd->users++;
		kdat_obj_get_ref(&evd->obj);
	}
}

void kdat_evd_unuse(struct kdat_evd *evd)
{
	if (evd) {
		evd->users--;
		kdat_obj_put(&evd->obj);
	}
}

bool kdat_evd_fits(struct kdat_evd *evd, struct kdat_ia *ia, u32 flag)
{
	return !evd || (!evd->obj.dead && evd->ia == ia && (evd->flags & flag));
}

/*
 * As kdat_evd_fits(), but the EVD may be another IA's of the same owner: an
 * EP's connect EVD (DAT lets one EVD take the connection events of EPs on
 * several IAs; dapltest's limit tests with -w do that).  Its events carry
 * handles, which are the owner's.  Caller holds ctx->lock.
 */
bool kdat_evd_fits_owner(struct kdat_evd *evd, struct kdat_ia *ia, u32 flag)
{
	lockdep_assert_held(&ia->obj.ctx->lock);
	return !evd || (!evd->obj.dead && evd->obj.ctx == ia->obj.ctx && (evd->flags & flag));
}
