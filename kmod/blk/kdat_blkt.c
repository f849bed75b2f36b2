// SPDX-License-Identifier: GPL-2.0
/*
 * kdat_blkt: exports a local block device (null_blk, brd, a loop device) to
 * kdat_blk initiators over kdat's kernel API (include/kdat/kdat.h only).
 *
 *   insmod kdat_blkt.ko path=/dev/ram0 port=N [ia_name=NETDEV max_queue_depth=D max_queues=Q]
 *
 * Each initiator connection is one queue: the target keeps twice its depth in
 * command slots, each with a command receive, a response and pages for one
 * command's data.  A write is an RDMA read of the initiator's registered pages
 * into the slot's, then a bio; a read is a bio, then an RDMA write; every
 * response to a command with registered data is a send with invalidate of
 * the initiator's registration (kdat_blk_proto.h).  A write of a page or
 * less may come inline instead: each command receive has a page behind the
 * command, and the bio writes from it.  Twice the depth, because a
 * slot's receive is posted again only once its response's send completed,
 * and the initiator may already have sent the tag's next command: a command
 * must never meet an empty receive queue (an RNR retry makes rxe run the
 * initiator's fast registrations a second time, which breaks the QP).
 *
 * The CM drives the queues: a connection request (its private data says the
 * queue and its depth) is accepted or refused from a work item, and a
 * queue whose connection ends is torn down once its slots are idle.
 */
#include <linux/bio.h>
#include <linux/blkdev.h>
#include <linux/in.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/wait_bit.h>
#include <linux/workqueue.h>
#include <net/ipv6.h>
#include <kdat/kdat.h>
#include "kdat_blk_proto.h"
#include "kdat_compat.h"

static char *ia_name = "kdat0";
module_param(ia_name, charp, 0444);
MODULE_PARM_DESC(ia_name, "the netdev (or IP address) whose RDMA device serves initiators");
static int port;
module_param(port, int, 0444);
MODULE_PARM_DESC(port, "the port initiators connect to (required)");
static char *path;
module_param(path, charp, 0444);
MODULE_PARM_DESC(path, "the block device to export, e.g. /dev/nullb0 (required)");
static int max_queue_depth = 64;
module_param(max_queue_depth, int, 0444);
MODULE_PARM_DESC(max_queue_depth, "the deepest queue an initiator may ask for (1-128)");
/* a queue costs its depth times two slots of KBLK_MAX_IO_BYTES each: about 17 MiB at depth 64 */
static int max_queues = 64;
module_param(max_queues, int, 0444);
MODULE_PARM_DESC(max_queues, "the most initiator queues connected at once, from all initiators (1-1024)");

/* a command receive's inline data lands in one page */
static_assert(KBLK_INLINE_WRITE_BYTES <= PAGE_SIZE);

enum blkt_step { BLKT_EXEC, BLKT_WRITE_DATA_IN, BLKT_REPLY };

struct blkt_queue;

struct blkt_msg {
	void *buf;
	struct scatterlist sg;
	struct kdat_sgl sgl;
	struct kdat_cqe cqe;
};

struct blkt_slot {
	struct blkt_queue *q;
	struct blkt_msg recv;		/* a command, and in recv_sg[1] its inline data */
	struct scatterlist recv_sg[2];
	struct page *inline_page;
	u32 inline_len;			/* the command's inline write data, in inline_page */
	struct blkt_msg rsp;
	struct kblk_cmd cmd;		/* the command being served */
	struct page *pages[KBLK_MAX_IO_PAGES];
	struct scatterlist sg[KBLK_MAX_IO_PAGES];
	struct kdat_sgl data;		/* mapped while the RDMA is posted */
	bool data_mapped;
	struct kdat_cqe rdma_cqe;
	struct bio bio;
	struct bio_vec bvecs[KBLK_MAX_IO_PAGES];
	struct work_struct work;	/* bios are submitted and posts made from here */
	struct list_head waiting;	/* on q->waiting until the connection is ESTABLISHED */
	enum blkt_step step;
	int status;
};

struct blkt_queue {
	struct list_head node;
	struct kdat_evd *evd;		/* the connection's events; completions are callbacks */
	struct kdat_ep *ep;
	struct work_struct event_work;
	struct work_struct error_work;	/* a protocol error: the connection ends */
	struct sockaddr_storage peer;	/* the initiator's address */
	/* a queue is (peer, host id, controller id, qid): kdat_blk_proto.h */
	u8 hostid[16];
	u64 ctrl_id;
	u16 qid, depth;
	u32 nslots;
	struct blkt_slot *slots;
	atomic_t busy;			/* slots between their command and their end */
	/*
	 * A command may arrive between our accept and the ESTABLISHED event (the
	 * initiator sends once it has our REP; our RTU-driven ESTABLISHED comes
	 * later), when no send is allowed yet: it waits here, as nvmet-rdma's
	 * commands wait for their queue to be live.
	 */
	spinlock_t wait_lock;
	struct list_head waiting;
	bool established;
	bool dying;			/* the connection ended: nothing is posted again */
	bool torn_down;
};

/* the exported device, opened exclusively (this module is its holder) */
static struct file *bdev_file;
static struct block_device *bdev;
static struct kdat_ia *ia;
/* DMA segments one work request of ours takes: a send or RDMA write, an RDMA read */
static u32 ia_max_iov, ia_max_read_iov;
static struct kdat_evd *cr_evd;
static struct kdat_sp *psp;
static struct workqueue_struct *blkt_wq;
static struct work_struct cr_work;
static DEFINE_MUTEX(queues_lock);	/* the queue list; taken by work items only */
static LIST_HEAD(queues);
static bool unloading;

static int param_get_queues(char *buf, const struct kernel_param *kp)
{
	struct blkt_queue *q;
	int n = 0;

	mutex_lock(&queues_lock);
	list_for_each_entry(q, &queues, node)
		n += !q->dying;
	mutex_unlock(&queues_lock);
	return sysfs_emit(buf, "%d\n", n);
}

static const struct kernel_param_ops queues_ops = { .get = param_get_queues };
module_param_cb(queues, &queues_ops, NULL, 0444);
MODULE_PARM_DESC(queues, "initiator queues connected now (read-only)");

/* commands served, by kind (read-only): counted from many queues at once */
static int param_get_count(char *buf, const struct kernel_param *kp)
{
	return sysfs_emit(buf, "%lld\n", atomic64_read((atomic64_t *)kp->arg));
}

static const struct kernel_param_ops count_ops = { .get = param_get_count };
static atomic64_t reads, writes, inline_writes, flushes, discards, failures;
module_param_cb(reads, &count_ops, &reads, 0444);
module_param_cb(writes, &count_ops, &writes, 0444);
module_param_cb(inline_writes, &count_ops, &inline_writes, 0444);
MODULE_PARM_DESC(inline_writes, "writes whose data came in the command (read-only; in writes too)");
module_param_cb(flushes, &count_ops, &flushes, 0444);
module_param_cb(discards, &count_ops, &discards, 0444);
module_param_cb(failures, &count_ops, &failures, 0444);
MODULE_PARM_DESC(failures, "commands answered with an error (read-only)");

static void slot_end(struct blkt_slot *s)
{
	struct blkt_queue *q = s->q;

	if (s->data_mapped) {
		kdat_sgl_unmap(ia, &s->data);
		s->data_mapped = false;
	}
	/* the bio may have read the inline page: the device's again */
	kdat_sgl_sync_for_device(ia, &s->recv.sgl);
	if (!READ_ONCE(q->dying) && kdat_ep_post_recv_sgl(q->ep, &s->recv.sgl, &s->recv.cqe))
		pr_warn_ratelimited("kdat_blkt: queue %u: cannot post a command receive\n", q->qid);
	/* the waker computes a hash of the address; it never touches q after the decrement */
	if (atomic_dec_and_test(&q->busy))
		wake_up_var(&q->busy);
}

static void rsp_sent(struct kdat_cqe *cqe, const struct kdat_completion *c)
{
	slot_end(container_of(cqe, struct blkt_slot, rsp.cqe));
}

/* Answers the command; a command with data ends the initiator's registration. */
static void respond(struct blkt_slot *s)
{
	struct kblk_rsp *r = s->rsp.buf;
	u32 rkey = le32_to_cpu(s->cmd.rkey);
	bool data = (s->cmd.opcode == KBLK_OP_READ || s->cmd.opcode == KBLK_OP_WRITE) &&
		    !(s->cmd.flags & KBLK_CMD_INLINE);

	r->tag = s->cmd.tag;
	r->status = cpu_to_le32(s->status);
	if (s->status)
		atomic64_inc(&failures);
	if (READ_ONCE(s->q->dying) ||
	    kdat_ep_post_sgl(s->q->ep, data ? KDAT_SGL_SEND_INV : KDAT_SGL_SEND, &s->rsp.sgl,
			     &s->rsp.cqe, 0, data ? rkey : 0))
		slot_end(s);
}

static void bio_done(struct bio *bio)
{
	struct blkt_slot *s = container_of(bio, struct blkt_slot, bio);

	s->status = blk_status_to_errno(bio->bi_status);
	bio_uninit(bio);
	/* end_io may run in hard interrupt context: post from the work item */
	s->step = BLKT_REPLY;
	queue_work(blkt_wq, &s->work);
}

static void submit(struct blkt_slot *s, blk_opf_t opf)
{
	u32 len = le32_to_cpu(s->cmd.length), i;

	bio_init(&s->bio, bdev, s->bvecs, KBLK_MAX_IO_PAGES, opf);
	/* a flush has no range: whatever sector it carries is not the device's (6.12 fails it) */
	if (!(opf & REQ_PREFLUSH))
		s->bio.bi_iter.bi_sector = le64_to_cpu(s->cmd.sector);
	s->bio.bi_end_io = bio_done;
	if (op_is_discard(opf))
		s->bio.bi_iter.bi_size = len;
	else if (s->cmd.flags & KBLK_CMD_INLINE)
		__bio_add_page(&s->bio, s->inline_page, len, 0);
	else
		for (i = 0; len; i++) {
			u32 n = min_t(u32, len, PAGE_SIZE);

			__bio_add_page(&s->bio, s->pages[i], n, 0);
			len -= n;
		}
	submit_bio(&s->bio);
}

static int map_data(struct blkt_slot *s, enum dma_data_direction dir)
{
	u32 len = le32_to_cpu(s->cmd.length), n = DIV_ROUND_UP(len, PAGE_SIZE), i;

	sg_init_table(s->sg, n);
	for (i = 0; i < n; i++)
		sg_set_page(&s->sg[i], s->pages[i], min_t(u32, len - i * PAGE_SIZE, PAGE_SIZE), 0);
	if (kdat_sgl_map(ia, &s->data, s->sg, n, dir))
		return -EIO;
	s->data_mapped = true;
	return 0;
}

static void rdma_done(struct kdat_cqe *cqe, const struct kdat_completion *c)
{
	struct blkt_slot *s = container_of(cqe, struct blkt_slot, rdma_cqe);

	/* a read's RDMA write: its response, posted behind it, ends the slot */
	if (s->cmd.opcode == KBLK_OP_READ)
		return;
	if (c->dto_status != KDAT_DAT_DTO_SUCCESS) {
		slot_end(s);	/* the connection is going: nobody waits for an answer */
		return;
	}
	kdat_sgl_sync_for_cpu(ia, &s->data);
	kdat_sgl_unmap(ia, &s->data);
	s->data_mapped = false;
	s->step = BLKT_WRITE_DATA_IN;	/* the bio is next */
	queue_work(blkt_wq, &s->work);
}

static int cmd_check(const struct kblk_cmd *cmd, u32 inline_len)
{
	u32 len = le32_to_cpu(cmd->length);
	u64 sector = le64_to_cpu(cmd->sector);
	u32 lbs = bdev_logical_block_size(bdev);

	/* inline data is a write's only, and a write's data comes one way */
	if (cmd->flags & KBLK_CMD_INLINE ? cmd->opcode != KBLK_OP_WRITE || !inline_len : inline_len)
		return -EPROTO;
	switch (cmd->opcode) {
	case KBLK_OP_FLUSH:
		return 0;
	case KBLK_OP_WRITE:
		if (cmd->flags & KBLK_CMD_INLINE && len != inline_len)
			return -EPROTO;	/* the send did not carry what the command says */
		fallthrough;
	case KBLK_OP_READ:
		if (!len || len > KBLK_MAX_IO_BYTES)
			return -EINVAL;
		break;
	case KBLK_OP_DISCARD:
		if (!bdev_max_discard_sectors(bdev))
			return -EOPNOTSUPP;
		break;
	default:
		return -EOPNOTSUPP;
	}
	if (len % lbs || (sector << SECTOR_SHIFT) % lbs)
		return -EINVAL;
	if (sector > bdev_nr_sectors(bdev) || (len >> SECTOR_SHIFT) > bdev_nr_sectors(bdev) - sector)
		return -ENOSPC;
	return 0;
}

static void slot_work(struct work_struct *work)
{
	struct blkt_slot *s = container_of(work, struct blkt_slot, work);
	struct blkt_queue *q = s->q;
	u32 rkey = le32_to_cpu(s->cmd.rkey);
	u64 addr = le64_to_cpu(s->cmd.addr);

	if (s->step == BLKT_WRITE_DATA_IN) {
		submit(s, REQ_OP_WRITE | (s->cmd.flags & KBLK_CMD_FUA ? REQ_FUA : 0));
		return;
	}
	if (s->step == BLKT_REPLY) {
		if (s->cmd.opcode == KBLK_OP_READ && !s->status) {
			if (READ_ONCE(q->dying) || map_data(s, DMA_TO_DEVICE)) {
				slot_end(s);
				return;
			}
			kdat_sgl_sync_for_device(ia, &s->data);
			if (kdat_ep_post_sgl(q->ep, KDAT_SGL_RDMA_WRITE, &s->data, &s->rdma_cqe,
					     addr, rkey)) {
				slot_end(s);
				return;
			}
		}
		/* RC orders the response after the write: the data is there when it is */
		respond(s);
		return;
	}
	s->status = cmd_check(&s->cmd, s->inline_len);
	if (s->status) {
		respond(s);
		return;
	}
	switch (s->cmd.opcode) {
	case KBLK_OP_READ:
		atomic64_inc(&reads);
		submit(s, REQ_OP_READ);
		break;
	case KBLK_OP_WRITE:
		atomic64_inc(&writes);
		if (s->cmd.flags & KBLK_CMD_INLINE) {
			atomic64_inc(&inline_writes);
			submit(s, REQ_OP_WRITE | (s->cmd.flags & KBLK_CMD_FUA ? REQ_FUA : 0));
			break;
		}
		/* the initiator's pages first */
		if (READ_ONCE(q->dying) || map_data(s, DMA_FROM_DEVICE) ||
		    kdat_ep_post_sgl(q->ep, KDAT_SGL_RDMA_READ, &s->data, &s->rdma_cqe, addr, rkey))
			slot_end(s);
		break;
	case KBLK_OP_FLUSH:
		atomic64_inc(&flushes);
		submit(s, REQ_OP_WRITE | REQ_PREFLUSH);
		break;
	case KBLK_OP_DISCARD:
		atomic64_inc(&discards);
		submit(s, REQ_OP_DISCARD);
		break;
	}
}

static void cmd_received(struct kdat_cqe *cqe, const struct kdat_completion *c)
{
	struct blkt_slot *s = container_of(cqe, struct blkt_slot, recv.cqe);

	if (c->dto_status != KDAT_DAT_DTO_SUCCESS)
		return;		/* flushed: the connection ended */
	atomic_inc(&s->q->busy);
	if (c->byte_len < sizeof(s->cmd)) {
		/*
		 * Without a whole command there is no tag to answer: the peer
		 * does not speak the protocol, and its connection ends (as
		 * nvmet-rdma ends a queue on a capsule shorter than a command).
		 */
		pr_warn_ratelimited("kdat_blkt: queue %u from %pISc: a message of %u bytes, shorter than a command: disconnecting\n",
				    s->q->qid, &s->q->peer, c->byte_len);
		WRITE_ONCE(s->q->dying, true);
		queue_work(system_wq, &s->q->error_work);
		slot_end(s);
		return;
	}
	kdat_sgl_sync_for_cpu(ia, &s->recv.sgl);
	memcpy(&s->cmd, s->recv.buf, sizeof(s->cmd));
	/* cmd_check() holds an inline write's length against it */
	s->inline_len = c->byte_len - sizeof(s->cmd);
	s->step = BLKT_EXEC;
	spin_lock_bh(&s->q->wait_lock);
	if (!s->q->established) {
		list_add_tail(&s->waiting, &s->q->waiting);
		spin_unlock_bh(&s->q->wait_lock);
		return;
	}
	spin_unlock_bh(&s->q->wait_lock);
	queue_work(blkt_wq, &s->work);
}

/* The connection is ESTABLISHED, or ending: the commands that waited run (or end). */
static void release_waiting(struct blkt_queue *q)
{
	struct blkt_slot *s, *next;
	LIST_HEAD(ready);

	spin_lock_bh(&q->wait_lock);
	q->established = true;
	list_splice_init(&q->waiting, &ready);
	spin_unlock_bh(&q->wait_lock);
	list_for_each_entry_safe(s, next, &ready, waiting) {
		list_del_init(&s->waiting);
		if (READ_ONCE(q->dying))
			slot_end(s);
		else
			queue_work(blkt_wq, &s->work);
	}
}

static int msg_init(struct blkt_msg *m, u32 len,
		    void (*done)(struct kdat_cqe *, const struct kdat_completion *))
{
	m->buf = kzalloc(len, GFP_KERNEL);
	if (!m->buf)
		return -ENOMEM;
	sg_init_one(&m->sg, m->buf, len);
	m->cqe.done = done;
	return kdat_sgl_map(ia, &m->sgl, &m->sg, 1, DMA_BIDIRECTIONAL) ? -EIO : 0;
}

/* A command receive: the command, then a page for a write's inline data. */
static int recv_init(struct blkt_slot *s)
{
	struct blkt_msg *m = &s->recv;

	m->buf = kzalloc(sizeof(struct kblk_cmd), GFP_KERNEL);
	s->inline_page = alloc_page(GFP_KERNEL);
	if (!m->buf || !s->inline_page)
		return -ENOMEM;
	sg_init_table(s->recv_sg, 2);
	sg_set_buf(&s->recv_sg[0], m->buf, sizeof(struct kblk_cmd));
	sg_set_page(&s->recv_sg[1], s->inline_page, KBLK_INLINE_WRITE_BYTES, 0);
	m->cqe.done = cmd_received;
	return kdat_sgl_map(ia, &m->sgl, s->recv_sg, 2, DMA_BIDIRECTIONAL) ? -EIO : 0;
}

static void msg_free(struct blkt_msg *m)
{
	if (m->buf)
		kdat_sgl_unmap(ia, &m->sgl);
	kfree(m->buf);
}

/* Frees a queue that no list holds; no queues_lock held (its event work takes it). */
static void queue_free(struct blkt_queue *q)
{
	u32 i, j;

	WRITE_ONCE(q->dying, true);
	if (q->ep)
		kdat_ep_free(q->ep);	/* every posted request's callback has run */
	release_waiting(q);
	/* bios still in flight end their slots from the work queue */
	while (!wait_var_event_timeout(&q->busy, !atomic_read(&q->busy), 10 * HZ))
		pr_warn("kdat_blkt: queue %u: %d commands still in progress\n", q->qid,
			atomic_read(&q->busy));
	flush_workqueue(blkt_wq);
	if (q->evd)
		kdat_evd_free(q->evd);	/* no upcall after this */
	cancel_work_sync(&q->event_work);
	cancel_work_sync(&q->error_work);	/* no completion queues it again */
	for (i = 0; q->slots && i < q->nslots; i++) {
		struct blkt_slot *s = &q->slots[i];

		msg_free(&s->recv);
		if (s->inline_page)
			__free_page(s->inline_page);
		msg_free(&s->rsp);
		for (j = 0; j < KBLK_MAX_IO_PAGES; j++)
			if (s->pages[j])
				__free_page(s->pages[j]);
	}
	kfree(q->slots);
	kfree(q);
}

/* Ends a queue's connection: nothing is posted on it again; reap_queues() frees it. */
static void queue_teardown(struct blkt_queue *q)
{
	lockdep_assert_held(&queues_lock);
	if (q->torn_down)
		return;
	q->torn_down = true;
	WRITE_ONCE(q->dying, true);
	kdat_ep_disconnect(q->ep, KDAT_CLOSE_ABRUPT);	/* flushes the posted requests */
}

/* Frees the queues whose connections ended (all of them when unloading). */
static void reap_queues(struct work_struct *work)
{
	struct blkt_queue *q, *next;
	LIST_HEAD(ended);

	mutex_lock(&queues_lock);
	list_for_each_entry_safe(q, next, &queues, node) {
		if (READ_ONCE(unloading))
			queue_teardown(q);
		if (q->torn_down)
			list_move_tail(&q->node, &ended);
	}
	mutex_unlock(&queues_lock);
	list_for_each_entry_safe(q, next, &ended, node)
		queue_free(q);
}

static DECLARE_WORK(reap_work, reap_queues);

static void queue_event(struct kdat_evd *evd, void *context)
{
	struct blkt_queue *q = context;

	queue_work(system_wq, &q->event_work);
}

static void queue_events(struct work_struct *work)
{
	struct blkt_queue *q = container_of(work, struct blkt_queue, event_work);
	struct kdat_event_info *ev = kmalloc(sizeof(*ev), GFP_KERNEL);
	bool ended = false;

	if (!ev)
		return;
	while (!kdat_evd_dequeue(q->evd, ev, NULL)) {
		if (ev->number == KDAT_DAT_CONNECTION_EVENT_ESTABLISHED) {
			pr_info("kdat_blkt: queue %u connected, depth %u\n", q->qid, q->depth);
			release_waiting(q);
		} else if (ev->number != KDAT_DAT_DTO_COMPLETION_EVENT) {
			ended = true;	/* DISCONNECTED, BROKEN, ACCEPT_COMPLETION_ERROR, ... */
		}
	}
	kfree(ev);
	if (!ended)
		return;
	mutex_lock(&queues_lock);
	if (!q->torn_down) {
		pr_info("kdat_blkt: queue %u disconnected\n", q->qid);
		queue_teardown(q);
	}
	mutex_unlock(&queues_lock);
	queue_work(system_wq, &reap_work);
}

/* A protocol error on the queue (a completion callback saw it): its connection ends. */
static void queue_error(struct work_struct *work)
{
	struct blkt_queue *q = container_of(work, struct blkt_queue, error_work);

	mutex_lock(&queues_lock);
	queue_teardown(q);
	mutex_unlock(&queues_lock);
	queue_work(system_wq, &reap_work);
}

static struct blkt_queue *queue_alloc(u16 qid, u16 depth)
{
	/*
	 * A command's pages may be more segments than one work request takes
	 * (siw: 6 per send or write, 1 per read): kdat then posts its RDMA as
	 * several, each a place in the send queue.
	 */
	u32 iov = min_t(u32, KBLK_MAX_IO_PAGES, ia_max_iov);
	u32 rdma_wrs = DIV_ROUND_UP(KBLK_MAX_IO_PAGES, min(iov, ia_max_read_iov));
	struct kdat_ep_attr attr = {
		.max_rdma_read_in = 16, .max_rdma_read_out = 16,
		/* per slot: a response and an RDMA; the receives */
		.max_request_dtos = 2 * depth * (1 + rdma_wrs) + 2, .max_recv_dtos = 2 * depth + 2,
		.max_request_iov = iov, .max_recv_iov = 2,
		.retry_count = 7, .rnr_retry_count = 7,
	};
	struct blkt_queue *q = kzalloc(sizeof(*q), GFP_KERNEL);
	u32 i, j;

	if (!q)
		return NULL;
	q->qid = qid;
	q->depth = depth;
	q->nslots = 2 * depth;
	INIT_WORK(&q->event_work, queue_events);
	INIT_WORK(&q->error_work, queue_error);
	spin_lock_init(&q->wait_lock);
	INIT_LIST_HEAD(&q->waiting);
	q->slots = kcalloc(q->nslots, sizeof(*q->slots), GFP_KERNEL);
	if (!q->slots ||
	    kdat_evd_create(ia, 16, KDAT_EVD_FLAGS_ALL, queue_event, q, &q->evd) ||
	    kdat_ep_create(ia, q->evd, q->evd, q->evd, &attr, &q->ep))
		goto fail;
	for (i = 0; i < q->nslots; i++) {
		struct blkt_slot *s = &q->slots[i];

		s->q = q;
		INIT_WORK(&s->work, slot_work);
		s->rdma_cqe.done = rdma_done;
		for (j = 0; j < KBLK_MAX_IO_PAGES; j++) {
			s->pages[j] = alloc_page(GFP_KERNEL);
			if (!s->pages[j])
				goto fail;
		}
		if (recv_init(s) ||
		    msg_init(&s->rsp, sizeof(struct kblk_rsp), rsp_sent))
			goto fail;
		/* before the accept: a command never meets an empty receive queue */
		if (kdat_ep_post_recv_sgl(q->ep, &s->recv.sgl, &s->recv.cqe))
			goto fail;
	}
	return q;
fail:
	queue_free(q);
	return NULL;
}

/* The same initiator host: the address without its port. */
static bool same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	if (a->ss_family == AF_INET6)
		return ipv6_addr_equal(&((const struct sockaddr_in6 *)a)->sin6_addr,
				       &((const struct sockaddr_in6 *)b)->sin6_addr);
	return false;
}

/*
 * Room for one more queue, qid of the controller ctrl_id of the host hostid
 * at `peer`: a queue that controller already has under that qid is its old
 * connection (the initiator reconnects after losing it, which we may not have
 * noticed) and ends; otherwise at most max_queues are connected at once.
 */
static bool queue_room(const struct sockaddr_storage *peer, const u8 *hostid, u64 ctrl_id,
		       u16 qid)
{
	struct blkt_queue *q, *old = NULL;
	int live = 0;

	mutex_lock(&queues_lock);
	list_for_each_entry(q, &queues, node) {
		if (q->torn_down)
			continue;
		if (q->qid == qid && q->ctrl_id == ctrl_id && !memcmp(q->hostid, hostid, 16) &&
		    same_host(&q->peer, peer))
			old = q;
		else
			live++;
	}
	if (live >= max_queues) {
		mutex_unlock(&queues_lock);
		pr_warn_ratelimited("kdat_blkt: refused queue %u from %pISc: %d queues connected, max_queues=%d\n",
				    qid, peer, live, max_queues);
		return false;
	}
	if (old) {
		pr_info("kdat_blkt: queue %u from %pISc connects again: its old connection ends\n",
			qid, peer);
		queue_teardown(old);
		queue_work(system_wq, &reap_work);
	}
	mutex_unlock(&queues_lock);
	return true;
}

static void reject(struct kdat_cr *cr, u32 reason)
{
	struct kblk_reject rej = {
		.magic = cpu_to_le32(KBLK_MAGIC), .reason = cpu_to_le32(reason),
	};

	kdat_cr_reject(cr, &rej, sizeof(rej));
}

static void connection_request(struct kdat_cr *cr)
{
	struct kdat_cr_info *info = kzalloc(sizeof(*info), GFP_KERNEL);
	const struct kblk_connect *req;
	struct kblk_accept acc = {
		.magic = cpu_to_le32(KBLK_MAGIC), .version = cpu_to_le16(KBLK_VERSION),
		.capacity = cpu_to_le64(bdev_nr_sectors(bdev)),
		.logical_block_size = cpu_to_le32(bdev_logical_block_size(bdev)),
		.max_io_bytes = cpu_to_le32(KBLK_MAX_IO_BYTES),
		.flags = cpu_to_le16(KBLK_F_INLINE_WRITE),
		.inline_write_bytes = cpu_to_le32(KBLK_INLINE_WRITE_BYTES),
	};
	struct blkt_queue *q;
	u16 depth, qid, nr;

	if (!info || kdat_cr_query(cr, info)) {
		kfree(info);
		reject(cr, KBLK_REJ_RESOURCES);
		return;
	}
	req = (const struct kblk_connect *)info->private_data;
	if (info->private_data_size < sizeof(*req) || le32_to_cpu(req->magic) != KBLK_MAGIC ||
	    le16_to_cpu(req->version) != KBLK_VERSION) {
		kfree(info);
		reject(cr, KBLK_REJ_VERSION);
		return;
	}
	depth = le16_to_cpu(req->queue_depth);
	qid = le16_to_cpu(req->qid);
	nr = le16_to_cpu(req->nr_queues);
	if (!depth || depth > max_queue_depth) {
		pr_info_ratelimited("kdat_blkt: refused queue %u from %pISc: depth %u (this target takes 1-%d)\n",
				    qid, &info->remote_addr, depth, max_queue_depth);
		kfree(info);
		reject(cr, KBLK_REJ_DEPTH);
		return;
	}
	if (!nr || nr > KBLK_MAX_QUEUES || qid >= nr) {
		pr_info_ratelimited("kdat_blkt: refused queue %u from %pISc: of %u queues (1-%d, each id below their number)\n",
				    qid, &info->remote_addr, nr, KBLK_MAX_QUEUES);
		kfree(info);
		reject(cr, KBLK_REJ_QUEUE);
		return;
	}
	if (!queue_room(&info->remote_addr, req->hostid, le64_to_cpu(req->ctrl_id), qid)) {
		kfree(info);
		reject(cr, KBLK_REJ_RESOURCES);
		return;
	}
	q = queue_alloc(qid, depth);
	if (!q) {
		kfree(info);
		reject(cr, KBLK_REJ_RESOURCES);
		return;
	}
	q->peer = info->remote_addr;
	memcpy(q->hostid, req->hostid, sizeof(q->hostid));
	q->ctrl_id = le64_to_cpu(req->ctrl_id);
	kfree(info);
	if (bdev_max_discard_sectors(bdev)) {
		acc.flags |= cpu_to_le16(KBLK_F_DISCARD);
		acc.discard_granularity = cpu_to_le32(bdev_discard_granularity(bdev));
	}
	if (bdev_write_cache(bdev))
		acc.flags |= cpu_to_le16(KBLK_F_WRITE_CACHE);
	mutex_lock(&queues_lock);
	list_add_tail(&q->node, &queues);
	mutex_unlock(&queues_lock);
	if (kdat_cr_accept(cr, q->ep, &acc, sizeof(acc))) {
		/* the EP gets no event: end the queue here */
		mutex_lock(&queues_lock);
		queue_teardown(q);
		mutex_unlock(&queues_lock);
		queue_work(system_wq, &reap_work);
	}
}

static void cr_events(struct work_struct *work)
{
	struct kdat_event_info *ev = kmalloc(sizeof(*ev), GFP_KERNEL);

	if (!ev)
		return;
	while (!READ_ONCE(unloading) && !kdat_evd_dequeue(cr_evd, ev, NULL))
		if (ev->number == KDAT_DAT_CONNECTION_REQUEST_EVENT)
			connection_request(ev->cr);
	kfree(ev);
}

static void cr_event(struct kdat_evd *evd, void *context)
{
	queue_work(system_wq, &cr_work);
}

static int __init blkt_init(void)
{
	struct kdat_ia_info info;

	if (port <= 0 || port > 65535) {
		pr_err("kdat_blkt: port=%d: give the port initiators connect to (1-65535)\n", port);
		return -EINVAL;
	}
	if (!path || !*path) {
		pr_err("kdat_blkt: path= is required: the block device to export\n");
		return -EINVAL;
	}
	if (max_queue_depth < 1 || max_queue_depth > KBLK_MAX_QUEUE_DEPTH) {
		pr_err("kdat_blkt: max_queue_depth=%d: 1-%d\n", max_queue_depth,
		       KBLK_MAX_QUEUE_DEPTH);
		return -EINVAL;
	}
	if (max_queues < 1 || max_queues > 1024) {
		pr_err("kdat_blkt: max_queues=%d: 1-1024\n", max_queues);
		return -EINVAL;
	}
	bdev_file = bdev_file_open_by_path(path, BLK_OPEN_READ | BLK_OPEN_WRITE, THIS_MODULE, NULL);
	if (IS_ERR(bdev_file)) {
		pr_err("kdat_blkt: cannot open %s: %ld\n", path, PTR_ERR(bdev_file));
		/* insmod would call ENOENT an unknown symbol */
		return PTR_ERR(bdev_file) == -ENOENT ? -ENODEV : PTR_ERR(bdev_file);
	}
	bdev = file_bdev(bdev_file);
	blkt_wq = alloc_workqueue("kdat_blkt", WQ_MEM_RECLAIM | WQ_HIGHPRI, 0);
	INIT_WORK(&cr_work, cr_events);
	if (!blkt_wq)
		goto put;
	if (kdat_ia_open_flags(&init_net, ia_name, KDAT_IA_PDATA_RAW, &ia)) {
		pr_err("kdat_blkt: no RDMA device for %s\n", ia_name);
		goto wq;
	}
	if (kdat_ia_query(ia, &info) || !info.max_iov || !info.max_rdma_read_iov) {
		pr_err("kdat_blkt: cannot query the RDMA device of %s\n", ia_name);
		goto close;
	}
	ia_max_iov = info.max_iov;
	ia_max_read_iov = info.max_rdma_read_iov;
	if (kdat_evd_create(ia, 64, KDAT_EVD_CR, cr_event, NULL, &cr_evd) ||
	    kdat_psp_create(ia, port, cr_evd, KDAT_PSP_CONSUMER, &psp)) {
		pr_err("kdat_blkt: cannot listen on port %d\n", port);
		goto close;
	}
	pr_info("kdat_blkt: exporting %s (%llu sectors) on %s port %d\n", path,
		(unsigned long long)bdev_nr_sectors(bdev), ia_name, port);
	return 0;
close:
	kdat_ia_close(ia, KDAT_IA_CLOSE_ABRUPT);
wq:
	destroy_workqueue(blkt_wq);
put:
	fput(bdev_file);
	return -ENODEV;
}

static void __exit blkt_exit(void)
{
	WRITE_ONCE(unloading, true);
	kdat_sp_free(psp);	/* no new connections */
	cancel_work_sync(&cr_work);
	/* every queue ends; a queue's event work may queue the reaper once more */
	reap_queues(NULL);
	cancel_work_sync(&reap_work);
	kdat_ia_close(ia, KDAT_IA_CLOSE_ABRUPT);
	destroy_workqueue(blkt_wq);
	fput(bdev_file);
}

module_init(blkt_init);
module_exit(blkt_exit);
MODULE_DESCRIPTION("kdat block target: exports a block device to kdat_blk initiators over RDMA");
MODULE_LICENSE("GPL");
