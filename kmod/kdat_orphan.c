// SPDX-License-Identifier: GPL-2.0
/*
 * Orphaned ids: a half-made connection an EP walked away from (freed, its IA
 * closed), kept until rdma_cm ends it or its time is up.
 */
#include <linux/module.h>
#include <linux/slab.h>
#include "kdat_conn.h"

/*
 * An EP left COMPLETION_PENDING (disconnect, free) after it accepted: the
 * requester may already believe it is connected, and a REJ from us no longer
 * reaches it once it sent its RTU.  So the id lives on, owned by an orphan,
 * until the connection can be closed properly: on ESTABLISHED it sends a
 * DREQ; once rdma_cm reports the end (DISCONNECTED, REJECTED, errors) the id
 * is destroyed.  Module exit and device removal reap what is left.
 */
struct kdat_orphan {
	struct kdat_obj obj;		/* only .type: KDAT_OBJ_ORPHAN */
	struct list_head node;
	struct rdma_cm_id *id;
	/*
	 * The id's reference on its EP, kept until the id is gone: a handler
	 * that read the EP from the id before the adoption may still be
	 * waiting for the EP's lock.
	 */
	struct kdat_ep *ep;
	unsigned long adopted;		/* jiffies */
	unsigned long expires;		/* jiffies: kdat_orphans_expire() ends it then */
	bool wants_drep;		/* our DREQ is out; else the RTU (or REP's end) */
	bool reaping;			/* kdat_orphans_reap() destroys it */
};

/*
 * The CM ends every orphan by its own retry limits (a REP or DREQ is sent
 * max_cm_retries + 1 = 16 times, each waiting about 4.8 s over RoCE: some
 * 80 s).  kdat does not wait that long: an orphan still alive after
 * orphan_timeout_s has its id destroyed (a REJ for an unanswered REP, time
 * wait for an unanswered DREQ, both of which the peer's CM handles).
 */
#define KDAT_ORPHAN_TIMEOUT_S	30
static unsigned int orphan_timeout_s = KDAT_ORPHAN_TIMEOUT_S;
module_param(orphan_timeout_s, uint, 0644);
MODULE_PARM_DESC(orphan_timeout_s,
		 "seconds (1-3600) an abandoned connection may wait for the CM before kdat ends it (default 30)");

static LIST_HEAD(kdat_orphans);
static DEFINE_MUTEX(kdat_orphans_lock);
static void kdat_orphans_expire(struct work_struct *work);
static DECLARE_DELAYED_WORK(kdat_orphans_timer, kdat_orphans_expire);

static int kdat_orphan_event(struct kdat_obj *obj, struct rdma_cm_id *id,
			     struct rdma_cm_event *ev);

/* not in any owner's table: no handle, no record */
static const struct kdat_obj_class kdat_orphan_class = {
	.cm_event = kdat_orphan_event,
};

/*
 * Caller holds ep->lock and has detached id from ep; the id's reference on
 * ep goes to the orphan.  Returns the id if it could not be adopted (no
 * memory): the caller destroys it and drops that reference.
 */
struct rdma_cm_id *kdat_orphan_adopt(struct kdat_ep *ep, struct rdma_cm_id *id)
{
	struct kdat_orphan *o;

	lockdep_assert_held(&ep->lock);
	if (!id)
		return NULL;
	o = kzalloc(sizeof(*o), GFP_KERNEL);
	if (!o)
		return id;
	o->obj.type = KDAT_OBJ_ORPHAN;
	o->obj.cls = &kdat_orphan_class;
	o->id = id;
	o->ep = ep;
	o->wants_drep = ep->dreq == KDAT_DREQ_SENT;
	o->adopted = jiffies;
	o->expires = o->adopted +
		msecs_to_jiffies(clamp(READ_ONCE(orphan_timeout_s), 1u, 3600u) * MSEC_PER_SEC);
	mutex_lock(&kdat_orphans_lock);
	/* a non-empty list has the timer armed already (kdat_orphans_expire re-arms) */
	if (list_empty(&kdat_orphans))
		queue_delayed_work(kdat_wq, &kdat_orphans_timer, o->expires - o->adopted);
	list_add_tail(&o->node, &kdat_orphans);
	mutex_unlock(&kdat_orphans_lock);
	/* a handler running for this id re-reads the context and lands here */
	id->context = o;
	return NULL;
}

/* The EP an orphan's id held (KUnit's lock checks). */
struct kdat_ep *kdat_orphan_ep(struct kdat_obj *obj)
{
	return container_of(obj, struct kdat_orphan, obj)->ep;
}

/*
 * Takes o off the list unless kdat_orphans_reap() already has it (then the
 * reaper destroys the id and frees o).  True: the caller ends o.
 */
static bool kdat_orphan_unlink(struct kdat_orphan *o)
{
	bool mine;

	mutex_lock(&kdat_orphans_lock);
	mine = !o->reaping;
	if (mine)
		list_del(&o->node);
	mutex_unlock(&kdat_orphans_lock);
	return mine;
}

/*
 * The REP of an id that an orphan adopted while the REP was being sent could
 * not be sent: no CM event will end that orphan, so it ends here.  The id
 * goes back to the EP it holds a reference on (a stale context, as for any
 * detached id) and is destroyed from kdat_wq once our handler mutex is free.
 * Caller holds ep->lock and the id's handler mutex, so no orphan event runs.
 */
void kdat_orphan_retire(struct rdma_cm_id *id)
{
	struct kdat_orphan *o = id->context;

	lockdep_assert_held(&o->ep->lock);
	if (o->obj.type != KDAT_OBJ_ORPHAN)
		return;		/* not adopted (device removal, no memory): its taker destroys it */
	if (!kdat_orphan_unlink(o))
		return;
	id->context = o->ep;
	kdat_destroy_id_later(o->ep->cm, id, &o->ep->obj);
	kfree(o);
}

static int kdat_orphan_event(struct kdat_obj *obj, struct rdma_cm_id *id,
			     struct rdma_cm_event *ev)
{
	struct kdat_orphan *o = container_of(obj, struct kdat_orphan, obj);
	struct kdat_ep *ep;

	switch (ev->event) {
	case RDMA_CM_EVENT_ESTABLISHED:
		o->ep->cm->disconnect(id);	/* DREQ: the peer sees DISCONNECTED */
		return 0;
	case RDMA_CM_EVENT_DISCONNECTED:
		o->ep->cm->disconnect(id);	/* DREP, if the peer closed first */
		fallthrough;
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		if (!kdat_orphan_unlink(o))
			return 0;
		ep = o->ep;
		kfree(o);
		/*
		 * Our DREQ may still be on its way out (kdat_ep_wire_run): the
		 * id goes after it.  A pin taken before the adoption is seen
		 * here, after kdat_orphans_lock; none is taken after it.
		 */
		if (kdat_ep_id_pinned(ep)) {
			id->context = ep;	/* stale to the EP: later events end there */
			kdat_destroy_id_later(ep->cm, id, &ep->obj);
			return 0;
		}
		kdat_obj_put(&ep->obj);	/* frees later, from kdat_wq */
		return 1;	/* rdma_cm destroys the id */
	default:
		return 0;
	}
}

/* Destroys the orphans kdat_orphans_reap*() took off the list. */
static void kdat_orphans_destroy(struct list_head *reap)
{
	struct kdat_orphan *o, *tmp;

	list_for_each_entry_safe(o, tmp, reap, node) {
		kdat_ep_wait_unpinned(o->ep);	/* our DREQ may be on its way out */
		o->ep->cm->destroy_id(o->id);
		kdat_obj_put(&o->ep->obj);
		kfree(o);
	}
}

/* Destroys the orphans on ibdev (all of them if NULL). */
void kdat_orphans_reap(struct ib_device *ibdev)
{
	struct kdat_orphan *o, *tmp;
	LIST_HEAD(reap);

	if (!ibdev)
		cancel_delayed_work_sync(&kdat_orphans_timer);
	mutex_lock(&kdat_orphans_lock);
	list_for_each_entry_safe(o, tmp, &kdat_orphans, node) {
		if (!ibdev || o->id->device == ibdev) {
			o->reaping = true;
			list_move(&o->node, &reap);
		}
	}
	mutex_unlock(&kdat_orphans_lock);
	kdat_orphans_destroy(&reap);
}

/* orphan_timeout_s ran out for the oldest orphans; re-armed for the next one. */
static void kdat_orphans_expire(struct work_struct *work)
{
	unsigned long now = jiffies, next = 0;
	struct kdat_orphan *o, *tmp;
	bool more = false;
	LIST_HEAD(reap);

	mutex_lock(&kdat_orphans_lock);
	list_for_each_entry_safe(o, tmp, &kdat_orphans, node) {
		if (time_after_eq(now, o->expires)) {
			o->reaping = true;
			list_move(&o->node, &reap);
		} else if (!more || time_before(o->expires, next)) {
			next = o->expires;
			more = true;
		}
	}
	if (more)
		queue_delayed_work(kdat_wq, &kdat_orphans_timer, next - now);
	mutex_unlock(&kdat_orphans_lock);
	if (!list_empty(&reap))
		pr_info("kdat: ended %zu abandoned connection(s) the CM had not ended in %u s\n",
			list_count_nodes(&reap), READ_ONCE(orphan_timeout_s));
	kdat_orphans_destroy(&reap);
}

/*
 * /sys/class/misc/kdat/orphans: one line per orphan, oldest first, so that
 * "who keeps what alive" needs no debugger: what it waits for, its age and
 * the time left before kdat ends it (ms).
 */
ssize_t kdat_orphans_show(char *buf)
{
	unsigned long now = jiffies;
	struct kdat_orphan *o;
	unsigned int more = 0;
	int n = 0;

	mutex_lock(&kdat_orphans_lock);
	list_for_each_entry(o, &kdat_orphans, node) {
		/* a line is under 48 bytes; the last 64 of the page say what did not fit */
		if (n >= PAGE_SIZE - 64) {
			more++;
			continue;
		}
		n += sysfs_emit_at(buf, n, "%s age_ms=%u left_ms=%u\n",
				   o->wants_drep ? "drep" : "rtu",
				   jiffies_to_msecs(now - o->adopted),
				   time_after(o->expires, now) ?
				   jiffies_to_msecs(o->expires - now) : 0);
	}
	mutex_unlock(&kdat_orphans_lock);
	if (more)
		n += sysfs_emit_at(buf, n, "... %u more\n", more);
	return n;
}
