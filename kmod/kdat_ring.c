// SPDX-License-Identifier: GPL-2.0
/*
 * Event rings: an EVD's events in memory shared with its userspace consumer,
 * behind a file of its own (mmap for the ring, poll for readiness).
 *
 * The kernel is the only producer and the mapping's owner the only consumer
 * (the EVD was created in ring mode: EVD_WAIT and EVD_DEQUEUE refuse it).
 * The kernel writes everything but head and trusts nothing it reads back
 * except head, which it bounds-checks: tail, the backlog count and the flags
 * are the kernel's private copies, mirrored into the header.
 * Events that find the ring full wait, in order and with their object
 * references, on the EVD's ordinary queue ("backlog"); every later post,
 * every RING_WAIT and every kernel-side take first moves them into the ring,
 * so per-EVD order is preserved and nothing is dropped.
 */
#include <linux/anon_inodes.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/log2.h>
#include <linux/mm.h>
#include <linux/poll.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>
#include <kdat/uapi/kdat_layout_check.h>
#include "kdat_base.h"

struct kdat_ring {
	struct kref ref;
	struct kdat_ring_header *hdr;	/* start of the vmalloc_user() area */
	size_t map_size;
	u32 entries;
	u32 tail;			/* the kernel's copy: next entry to fill */
	u32 backlog;			/* mirrors of what the kernel knows */
	u32 overflow;
	bool dead;
	wait_queue_head_t poll_wq;
};

static void kdat_ring_release(struct kref *ref)
{
	struct kdat_ring *r = container_of(ref, struct kdat_ring, ref);

	vfree(r->hdr);
	kfree(r);
}

void kdat_ring_put(struct kdat_ring *r)
{
	if (r)
		kref_put(&r->ref, kdat_ring_release);
}

static struct kdat_ring_entry *kdat_ring_entry(struct kdat_ring *r, u32 index)
{
	return (void *)r->hdr + KDAT_RING_ENTRIES_OFFSET +
		(size_t)(index & (r->entries - 1)) * sizeof(struct kdat_ring_entry);
}

static void kdat_ring_put_event(struct kdat_ring *r, const struct kdat_event_info *info)
{
	struct kdat_ring_entry *e = kdat_ring_entry(r, r->tail++);

	kdat_event_to_user(&e->event, &e->ud, info);
}

/* Events in the ring as the consumer's head says; a head out of range counts as full. */
static u32 kdat_ring_used(struct kdat_ring *r)
{
	u32 used = r->tail - READ_ONCE(r->hdr->head);

	return used > r->entries ? r->entries : used;
}

static void kdat_ring_publish(struct kdat_ring *r)
{
	/* the entry's bytes before the tail that makes them visible */
	smp_store_release(&r->hdr->tail, r->tail);
	WRITE_ONCE(r->hdr->backlog, r->backlog);
	WRITE_ONCE(r->hdr->overflow, r->overflow);
}

/*
 * Caller holds evd->lock.  Moves backlog into the ring while it has room and
 * says whether info (may be NULL) went in too; if not, it belongs behind the
 * backlog.
 */
bool kdat_ring_fill(struct kdat_evd *evd, const struct kdat_event_info *info)
{
	struct kdat_ring *r = evd->ring;
	struct kdat_qevent *qe, *tmp;
	bool taken = false;

	lockdep_assert_held(&evd->lock);
	list_for_each_entry_safe(qe, tmp, &evd->events, node) {
		if (kdat_ring_used(r) >= r->entries)
			break;
		kdat_ring_put_event(r, &qe->info);
		list_del(&qe->node);
		evd->count--;
		kdat_event_put_refs(&qe->info);
		kdat_evd_recycle(evd, qe);
	}
	if (info && list_empty(&evd->events) && kdat_ring_used(r) < r->entries) {
		kdat_ring_put_event(r, info);
		taken = true;
	}
	r->backlog = evd->count;
	r->overflow = evd->lost;
	kdat_ring_publish(r);
	return taken;
}

/* Caller holds evd->lock: the ring's readiness for a waiter. */
bool kdat_ring_ready(struct kdat_evd *evd, u32 threshold)
{
	lockdep_assert_held(&evd->lock);

	kdat_ring_fill(evd, NULL);
	return kdat_ring_used(evd->ring) >= threshold;
}

u32 kdat_ring_available(struct kdat_evd *evd)
{
	return kdat_ring_used(evd->ring);
}

u32 kdat_ring_entries(struct kdat_evd *evd)
{
	return evd->ring->entries;
}

void kdat_ring_wake(struct kdat_evd *evd)
{
	wake_up_interruptible_poll(&evd->ring->poll_wq, EPOLLIN | EPOLLRDNORM);
}

/* Caller holds evd->lock: the EVD is going away; wake pollers with HUP. */
void kdat_ring_kill(struct kdat_evd *evd)
{
	struct kdat_ring *r = evd->ring;

	lockdep_assert_held(&evd->lock);
	r->dead = true;
	WRITE_ONCE(r->hdr->flags, r->hdr->flags | KDAT_RING_DEAD);
	wake_up_interruptible_poll(&r->poll_wq, EPOLLHUP | EPOLLERR);
}

/* Where the mapping's fields are (struct kdat_ring_offsets), for KDAT_IOC_EVD_RING. */
void kdat_ring_offsets(struct kdat_ring_offsets *off)
{
	memset(off, 0, sizeof(*off));
	off->head = offsetof(struct kdat_ring_header, head);
	off->tail = offsetof(struct kdat_ring_header, tail);
	off->entries = offsetof(struct kdat_ring_header, entries);
	off->mask = offsetof(struct kdat_ring_header, mask);
	off->entry_size = offsetof(struct kdat_ring_header, entry_size);
	off->backlog = offsetof(struct kdat_ring_header, backlog);
	off->overflow = offsetof(struct kdat_ring_header, overflow);
	off->flags = offsetof(struct kdat_ring_header, flags);
	off->array = KDAT_RING_ENTRIES_OFFSET;
}

static __poll_t kdat_ring_poll(struct file *file, poll_table *wait)
{
	struct kdat_ring *r = file->private_data;
	__poll_t mask = 0;

	poll_wait(file, &r->poll_wq, wait);
	if (READ_ONCE(r->dead))
		mask |= EPOLLHUP | EPOLLERR;
	if (READ_ONCE(r->tail) != READ_ONCE(r->hdr->head) || READ_ONCE(r->backlog) ||
	    READ_ONCE(r->overflow))
		mask |= EPOLLIN | EPOLLRDNORM;
	return mask;
}

static int kdat_ring_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct kdat_ring *r = file->private_data;

	if (vma->vm_pgoff || vma->vm_end - vma->vm_start > PAGE_ALIGN(r->map_size))
		return -EINVAL;
	/* the consumer publishes head through this very memory */
	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	return remap_vmalloc_range(vma, r->hdr, 0);
}

static int kdat_ring_file_release(struct inode *inode, struct file *file)
{
	kdat_ring_put(file->private_data);
	return 0;
}

static const struct file_operations kdat_ring_fops = {
	.owner = THIS_MODULE,
	.poll = kdat_ring_poll,
	.mmap = kdat_ring_mmap,
	.release = kdat_ring_file_release,
	.llseek = noop_llseek,
};

/*
 * Give evd a ring and return a file for it, or an ERR_PTR; the caller
 * installs the file in an fd.  The EVD's queued events move into the ring.
 */
struct file *kdat_ring_attach(struct kdat_evd *evd, u32 handle, u32 *entries, u32 *map_size)
{
	struct kdat_ring *r;
	struct file *file;
	unsigned long flags;
	u32 n;

	n = roundup_pow_of_two(max_t(u32, evd->qlen, 1));
	n = min_t(u32, n, KDAT_RING_MAX_ENTRIES);
	r = kzalloc(sizeof(*r), GFP_KERNEL);
	if (!r)
		return ERR_PTR(-ENOMEM);
	kref_init(&r->ref);
	init_waitqueue_head(&r->poll_wq);
	r->entries = n;
	r->map_size = KDAT_RING_MAP_SIZE(n);
	r->hdr = vmalloc_user(PAGE_ALIGN(r->map_size));
	if (!r->hdr) {
		kfree(r);
		return ERR_PTR(-ENOMEM);
	}
	r->hdr->entries = n;
	r->hdr->mask = n - 1;
	r->hdr->entry_size = sizeof(struct kdat_ring_entry);
	r->hdr->evd = handle;
	kref_get(&r->ref);		/* the file's */
	file = anon_inode_getfile("[kdat-evd]", &kdat_ring_fops, r, O_RDWR | O_CLOEXEC);
	if (IS_ERR(file)) {
		kdat_ring_put(r);
		kdat_ring_put(r);
		return file;
	}
	spin_lock_irqsave(&evd->lock, flags);
	if (evd->ring || evd->obj.dead) {
		spin_unlock_irqrestore(&evd->lock, flags);
		fput(file);
		kdat_ring_put(r);
		return ERR_PTR(-EBUSY);
	}
	evd->ring = r;			/* the EVD's reference */
	kdat_ring_fill(evd, NULL);
	spin_unlock_irqrestore(&evd->lock, flags);
	*entries = n;
	*map_size = r->map_size;
	return file;
}
