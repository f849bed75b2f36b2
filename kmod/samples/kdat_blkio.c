// SPDX-License-Identifier: GPL-2.0
/*
 * kdat_blkio: block I/O the way iSER and NVMe over RDMA move it, over kdat's
 * kernel API only (include/kdat/kdat.h, "Block I/O"), between an initiator
 * and a target in this module, over the IA's own address.
 *
 * Each request is a scatterlist of separately allocated pages, the first
 * entry starting mid-page and the last ending mid-page.  The initiator
 * registers it for the peer (kdat_ep_post_reg_mr) and sends a command
 * carrying the rkey; the target RDMA-reads the pages for a write and
 * RDMA-writes them for a read, into its own mapped pages (no registration:
 * the local DMA key), checks or fills the data, and answers with a send that
 * ends the initiator's registration (KDAT_SGL_SEND_INV).  Up to `depth`
 * requests are in flight; half of them are issued from a softirq (an hrtimer)
 * to show that posting never sleeps.  The IA is raw (KDAT_IA_PDATA_RAW): the
 * connect carries a plain 8-byte header, as a wire protocol would.
 *
 *   insmod kdat_blkio.ko port=N [requests=R depth=D size=BYTES ia_name=NETDEV]
 *
 * runs at load, in a work item; `result` reads "running", then "passed" or
 * "failed: why", with the counts beside it.  rmmod disconnects and frees.
 */
#include <linux/completion.h>
#include <linux/hrtimer.h>
#include <linux/inet.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/workqueue.h>
#include <kdat/kdat.h>
#include "kdat_compat.h"

static char *ia_name = "kdat0";
module_param(ia_name, charp, 0444);
static int port;
module_param(port, int, 0444);
MODULE_PARM_DESC(port, "the target's port (required)");
static int requests = 1000;
module_param(requests, int, 0444);
static int depth = 32;
module_param(depth, int, 0444);
static int size = 65536;
module_param(size, int, 0444);
static int ops;
module_param(ops, int, 0444);
MODULE_PARM_DESC(ops, "0: writes and reads in turn, 1: writes only, 2: reads only");
MODULE_PARM_DESC(size, "bytes per request, a multiple of 512");
static int max_iov;
module_param(max_iov, int, 0444);
MODULE_PARM_DESC(max_iov, "DMA segments per work request (0: the device's); fewer split RDMAs");

/* results: counted from both EPs' completions and from softirqs at once */
static int param_get_atomic(char *buf, const struct kernel_param *kp)
{
	return sysfs_emit(buf, "%d\n", atomic_read((atomic_t *)kp->arg));
}

static const struct kernel_param_ops atomic_param_ops = { .get = param_get_atomic };
static atomic_t done, failed, verified, invalidated, softirq_posts, max_in_flight;
module_param_cb(done, &atomic_param_ops, &done, 0444);
module_param_cb(failed, &atomic_param_ops, &failed, 0444);
module_param_cb(verified, &atomic_param_ops, &verified, 0444);
module_param_cb(invalidated, &atomic_param_ops, &invalidated, 0444);
module_param_cb(softirq_posts, &atomic_param_ops, &softirq_posts, 0444);
module_param_cb(max_in_flight, &atomic_param_ops, &max_in_flight, 0444);
static char result[96] = "running";
module_param_string(result, result, sizeof(result), 0444);

#define BLKIO_MAX_DEPTH		128
#define BLKIO_MAX_PAGES		66	/* 256 KiB, plus the two part-pages */
#define BLKIO_HEAD		512	/* the first page's offset, the last page's length */

enum { BLKIO_WRITE, BLKIO_READ };

struct blkio_cmd {
	__le32 tag;
	__le32 op;
	__le32 seq;
	__le32 length;
	__le64 addr;
	__le32 rkey;
	__le32 pad;
};

struct blkio_rsp {
	__le32 tag;
	__le32 status;		/* 0, or 1: the target found other data than was written */
};

/* A message buffer (command or response) mapped as a one-entry scatterlist. */
struct blkio_msg {
	void *buf;
	struct scatterlist sg;
	struct kdat_sgl sgl;
	struct kdat_cqe cqe;
	struct blkio_slot *slot;
};

/* One request slot: the initiator's pages for it, or the target's. */
struct blkio_slot {
	u32 tag;
	u32 seq;
	u32 op;
	u32 rkey;
	u32 npages;
	struct page *pages[BLKIO_MAX_PAGES];
	struct scatterlist sg[BLKIO_MAX_PAGES];
	struct kdat_sgl sgl;
	struct kdat_mr *mr;		/* initiator only */
	struct kdat_cqe rdma_cqe;	/* target only */
	struct blkio_msg cmd;		/* initiator: the command it sends */
	struct blkio_msg rsp;		/* target: the response it sends */
	struct blkio_msg recv;		/* initiator: a response slot; target: a command slot */
	struct blkio_cmd got;		/* target: the command being served */
	struct hrtimer timer;		/* initiator: issues from softirq */
	/* initiator: the command's send and the response, either may complete first */
	atomic_t pending;
};

static struct kdat_ia *ia;
static struct kdat_evd *evd, *crevd;
static struct kdat_sp *psp;
static struct kdat_ep *iep, *tep;	/* initiator's and target's */
/*
 * The initiator's slots are its tags (depth of them).  The target's are its
 * command receives, twice the depth: a slot's receive is posted again once
 * its response has been sent, and a command that met an empty receive queue
 * would make the initiator retry its sends (RNR), which rxe in Linux 6.1
 * answers by running the fast registrations behind them a second time; that
 * fails (rxe_reg_fast_mr: "not free") and breaks the QP.
 */
static struct blkio_slot *islots, *tslots;
#define TARGET_SLOTS	(2 * depth)
static struct work_struct run_work;
static DECLARE_COMPLETION(all_done);
static atomic_t issued, completed, in_flight, issues;
static bool stopping;

static u8 pattern(u32 seq, u32 i)
{
	return (u8)(seq * 31 + i * 7 + 1);
}

static void fail_status(const char *why, u32 status)
{
	if (atomic_cmpxchg(&failed, 0, 1) == 0)
		snprintf(result, sizeof(result), "failed: %s (status 0x%x)", why, status);
	complete(&all_done);
}

static void fail(const char *why)
{
	fail_status(why, 0);
}

/* Walks the slot's bytes: fills them with the request's pattern, or counts those that differ. */
static u32 walk(struct blkio_slot *s, bool fill)
{
	u32 i, off = 0, bad = 0;
	struct scatterlist *sg;

	for_each_sg(s->sg, sg, s->npages, i) {
		u8 *p = kmap_local_page(sg_page(sg)) + sg->offset;
		u32 j;

		for (j = 0; j < sg->length; j++, off++) {
			if (fill)
				p[j] = pattern(s->seq, off);
			else if (p[j] != pattern(s->seq, off))
				bad++;
		}
		kunmap_local(p - sg->offset);
	}
	return bad;
}

static int slot_pages(struct blkio_slot *s, u32 bytes)
{
	u32 i, left = bytes;

	/* a first entry that starts mid-page, full pages, a last entry that ends mid-page */
	s->npages = 1 + (bytes - (PAGE_SIZE - BLKIO_HEAD)) / PAGE_SIZE + 1;
	if (s->npages > BLKIO_MAX_PAGES)
		return -EINVAL;
	sg_init_table(s->sg, s->npages);
	for (i = 0; i < s->npages; i++) {
		u32 off = i == 0 ? BLKIO_HEAD : 0;
		u32 len = min_t(u32, left, PAGE_SIZE - off);

		s->pages[i] = alloc_page(GFP_KERNEL);
		if (!s->pages[i] || !len)
			return -ENOMEM;
		sg_set_page(&s->sg[i], s->pages[i], len, off);
		left -= len;
	}
	return left ? -EINVAL : 0;
}

static int msg_init(struct blkio_msg *m, struct blkio_slot *s, u32 len,
		    void (*done_fn)(struct kdat_cqe *, const struct kdat_completion *))
{
	m->buf = kzalloc(len, GFP_KERNEL);
	if (!m->buf)
		return -ENOMEM;
	sg_init_one(&m->sg, m->buf, len);
	m->slot = s;
	m->cqe.done = done_fn;
	return kdat_sgl_map(ia, &m->sgl, &m->sg, 1, DMA_BIDIRECTIONAL) ? -EIO : 0;
}

/* ---- the initiator ------------------------------------------------------------------ */

static void issue(struct blkio_slot *s)
{
	struct blkio_cmd *c = s->cmd.buf;
	u64 addr;
	int n;

	if (READ_ONCE(stopping))
		return;
	s->seq = atomic_inc_return(&issued) - 1;
	if (s->seq >= requests)
		return;
	s->op = ops == 1 ? BLKIO_WRITE : ops == 2 ? BLKIO_READ :
		s->seq % 2 ? BLKIO_READ : BLKIO_WRITE;
	if (s->op == BLKIO_WRITE)
		walk(s, true);
	if (in_softirq())
		atomic_inc(&softirq_posts);
	if (kdat_sgl_map(ia, &s->sgl, s->sg, s->npages, DMA_BIDIRECTIONAL))
		return fail("sgl_map");
	if (kdat_ep_post_reg_mr(iep, s->mr, &s->sgl, KDAT_RMR_REMOTE_READ | KDAT_RMR_REMOTE_WRITE,
				&s->rkey, &addr))
		return fail("post_reg_mr");
	c->tag = cpu_to_le32(s->tag);
	c->op = cpu_to_le32(s->op);
	c->seq = cpu_to_le32(s->seq);
	c->length = cpu_to_le32(size);
	c->addr = cpu_to_le64(addr);
	c->rkey = cpu_to_le32(s->rkey);
	atomic_set(&s->pending, 2);
	n = atomic_inc_return(&in_flight);
	for (int seen = atomic_read(&max_in_flight); n > seen;)
		if (atomic_try_cmpxchg(&max_in_flight, &seen, n))
			break;
	if (kdat_ep_post_sgl(iep, KDAT_SGL_SEND, &s->cmd.sgl, &s->cmd.cqe, 0, 0))
		return fail("post command");
}

static enum hrtimer_restart issue_from_softirq(struct hrtimer *t)
{
	issue(container_of(t, struct blkio_slot, timer));
	return HRTIMER_NORESTART;
}

/* every other request goes out from a softirq, the rest from the completion's context */
static void issue_next(struct blkio_slot *s)
{
	if (atomic_inc_return(&issues) % 2)
		hrtimer_start(&s->timer, 0, HRTIMER_MODE_REL_SOFT);
	else
		issue(s);
}

/* The request's command went and its response came: the slot takes the next request. */
static void slot_put(struct blkio_slot *s)
{
	if (!atomic_dec_and_test(&s->pending))
		return;
	if (atomic_inc_return(&completed) == requests)
		complete(&all_done);
	else
		issue_next(s);
}

static void cmd_sent(struct kdat_cqe *cqe, const struct kdat_completion *c)
{
	if (c->dto_status != KDAT_DAT_DTO_SUCCESS) {
		if (!READ_ONCE(stopping))
			fail_status("command send", c->dto_status);
		return;
	}
	slot_put(container_of(cqe, struct blkio_msg, cqe)->slot);
}

static void rsp_received(struct kdat_cqe *cqe, const struct kdat_completion *c)
{
	struct blkio_msg *m = container_of(cqe, struct blkio_msg, cqe);
	struct blkio_rsp *r = m->buf;
	struct blkio_slot *s;
	u32 tag;

	if (c->dto_status != KDAT_DAT_DTO_SUCCESS) {
		if (!READ_ONCE(stopping))
			fail_status("response receive", c->dto_status);
		return;
	}
	tag = le32_to_cpu(r->tag);
	if (tag >= depth || le32_to_cpu(r->status))
		return fail(tag >= depth ? "bad tag" : "target saw other data than written");
	s = &islots[tag];
	if (c->invalidated_rkey != s->rkey)
		return fail("the response did not end the registration");
	atomic_inc(&invalidated);
	kdat_sgl_sync_for_cpu(ia, &s->sgl);
	kdat_sgl_unmap(ia, &s->sgl);
	if (s->op == BLKIO_READ) {
		if (walk(s, false))
			return fail("read data differs");
		atomic_inc(&verified);
	}
	atomic_dec(&in_flight);
	atomic_inc(&done);
	if (kdat_ep_post_recv_sgl(iep, &m->sgl, &m->cqe))
		return fail("repost response receive");
	slot_put(s);
}

/* ---- the target ----------------------------------------------------------------------- */

static void rsp_sent(struct kdat_cqe *cqe, const struct kdat_completion *c)
{
	struct blkio_slot *t = container_of(cqe, struct blkio_msg, cqe)->slot;

	if (c->dto_status != KDAT_DAT_DTO_SUCCESS) {
		if (!READ_ONCE(stopping))
			fail_status("response send", c->dto_status);
		return;
	}
	/* the slot's command buffer, pages and response are free again */
	if (kdat_ep_post_recv_sgl(tep, &t->recv.sgl, &t->recv.cqe))
		fail("repost command receive");
}

static void respond(struct blkio_slot *t, u32 status)
{
	struct blkio_rsp *r = t->rsp.buf;

	r->tag = t->got.tag;
	r->status = cpu_to_le32(status);
	if (kdat_ep_post_sgl(tep, KDAT_SGL_SEND_INV, &t->rsp.sgl, &t->rsp.cqe, 0,
			     le32_to_cpu(t->got.rkey)))
		fail("post response");
}

static void rdma_done(struct kdat_cqe *cqe, const struct kdat_completion *c)
{
	struct blkio_slot *t = container_of(cqe, struct blkio_slot, rdma_cqe);

	if (c->dto_status != KDAT_DAT_DTO_SUCCESS) {
		if (!READ_ONCE(stopping))
			fail_status("target RDMA", c->dto_status);
		return;
	}
	if (le32_to_cpu(t->got.op) == BLKIO_READ)
		return;		/* the response went out behind the write */
	kdat_sgl_sync_for_cpu(ia, &t->sgl);
	if (walk(t, false)) {
		respond(t, 1);
		return;
	}
	atomic_inc(&verified);
	respond(t, 0);
}

/*
 * The target holds the first commands until min(depth, requests) of them are in, so that the run
 * reaches its full depth on a kernel of any speed: on the debug kernel the first responses came
 * back before the initiator had issued its last slot, and a short run never had depth in flight.
 */
static DEFINE_SPINLOCK(held_lock);
static struct blkio_slot *held[BLKIO_MAX_DEPTH];
static int nheld;
static bool holding = true;

static void serve(struct blkio_slot *t);

/* true if t was held; the command that completes the batch serves the whole batch */
static bool hold(struct blkio_slot *t)
{
	unsigned long flags;
	int i, n;

	spin_lock_irqsave(&held_lock, flags);
	if (!holding) {
		spin_unlock_irqrestore(&held_lock, flags);
		return false;
	}
	held[nheld++] = t;
	n = nheld;
	if (n < min(depth, requests)) {
		spin_unlock_irqrestore(&held_lock, flags);
		return true;
	}
	holding = false;
	spin_unlock_irqrestore(&held_lock, flags);
	/* no longer holding: nobody else touches held[] */
	for (i = 0; i < n; i++)
		serve(held[i]);
	return true;
}

static void cmd_received(struct kdat_cqe *cqe, const struct kdat_completion *c)
{
	struct blkio_msg *m = container_of(cqe, struct blkio_msg, cqe);
	struct blkio_slot *t = m->slot;

	if (c->dto_status != KDAT_DAT_DTO_SUCCESS) {
		if (!READ_ONCE(stopping))
			fail_status("command receive", c->dto_status);
		return;
	}
	memcpy(&t->got, m->buf, sizeof(t->got));
	t->seq = le32_to_cpu(t->got.seq);
	if (le32_to_cpu(t->got.length) != size)
		return fail("command length");
	if (!hold(t))
		serve(t);
}

static void serve(struct blkio_slot *t)
{
	enum kdat_sgl_op op;

	if (le32_to_cpu(t->got.op) == BLKIO_READ) {
		walk(t, true);
		kdat_sgl_sync_for_device(ia, &t->sgl);
		op = KDAT_SGL_RDMA_WRITE;
	} else {
		op = KDAT_SGL_RDMA_READ;
	}
	if (kdat_ep_post_sgl(tep, op, &t->sgl, &t->rdma_cqe, le64_to_cpu(t->got.addr),
			     le32_to_cpu(t->got.rkey)))
		return fail("post target RDMA");
	/* RC orders the send after the write: the data is there when the response is */
	if (op == KDAT_SGL_RDMA_WRITE)
		respond(t, 0);
}

/* ---- setup ------------------------------------------------------------------------------ */

static int wait_event_number(struct kdat_evd *e, u32 number, struct kdat_event_info *ev)
{
	if (kdat_evd_wait(e, 10000000, 1, ev, NULL))
		return -ETIMEDOUT;
	return ev->number == number ? 0 : -EPROTO;
}

static int slots_init(void)
{
	u32 i;

	islots = kcalloc(depth, sizeof(*islots), GFP_KERNEL);
	tslots = kcalloc(TARGET_SLOTS, sizeof(*tslots), GFP_KERNEL);
	if (!islots)
		return -ENOMEM;
	/* every timer first: blkio_exit() cancels them all, however far this got */
	for (i = 0; i < depth; i++) {
		hrtimer_setup(&islots[i].timer, issue_from_softirq, CLOCK_MONOTONIC,
			      HRTIMER_MODE_REL_SOFT);
	}
	if (!tslots)
		return -ENOMEM;
	for (i = 0; i < TARGET_SLOTS; i++) {
		struct blkio_slot *t = &tslots[i];

		t->tag = i;
		if (slot_pages(t, size))
			return -ENOMEM;
		/* the target's pages stay mapped: the local DMA key covers them */
		if (kdat_sgl_map(ia, &t->sgl, t->sg, t->npages, DMA_BIDIRECTIONAL))
			return -EIO;
		t->rdma_cqe.done = rdma_done;
		if (msg_init(&t->recv, t, sizeof(struct blkio_cmd), cmd_received) ||
		    msg_init(&t->rsp, t, sizeof(struct blkio_rsp), rsp_sent))
			return -ENOMEM;
	}
	for (i = 0; i < depth; i++) {
		struct blkio_slot *s = &islots[i];

		s->tag = i;
		if (slot_pages(s, size) || kdat_mr_alloc(ia, s->npages, &s->mr) ||
		    msg_init(&s->cmd, s, sizeof(struct blkio_cmd), cmd_sent) ||
		    msg_init(&s->recv, s, sizeof(struct blkio_rsp), rsp_received))
			return -ENOMEM;
	}
	return 0;
}

static const char blkio_hello[8] = "BLKIO/1";

static void run(struct work_struct *work)
{
	struct kdat_ep_attr attr = {
		.max_rdma_read_in = 16, .max_rdma_read_out = 16,
		/* per request: the registration, the command and (target) an RDMA and a response */
		.max_request_dtos = 3 * depth + 2, .max_recv_dtos = 2 * depth + 2,
		.max_request_iov = BLKIO_MAX_PAGES / 2, .max_recv_iov = 1,
		/* a command may reach the target before its receive is posted again: retry */
		.retry_count = 7, .rnr_retry_count = 7,
	};
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct kdat_ia_info *info;
	struct kdat_event_info *ev;
	u32 i;

	info = kzalloc(sizeof(*info), GFP_KERNEL);
	ev = kzalloc(sizeof(*ev), GFP_KERNEL);
	if (!info || !ev || slots_init())
		goto setup_failed;
	if (kdat_ia_query(ia, info) || info->local_addr.ss_family != AF_INET)
		goto setup_failed;
	sin.sin_addr = ((struct sockaddr_in *)&info->local_addr)->sin_addr;
	attr.max_request_iov = min_t(u32, attr.max_request_iov, info->max_iov);
	if (max_iov > 0)
		attr.max_request_iov = min_t(u32, attr.max_request_iov, max_iov);
	/* an RDMA with more segments than a work request takes is posted as several */
	attr.max_request_dtos += depth * (DIV_ROUND_UP(BLKIO_MAX_PAGES,
				min(attr.max_request_iov, info->max_rdma_read_iov)) - 1);
	if (kdat_ep_create(ia, evd, evd, evd, &attr, &iep) ||
	    kdat_ep_create(ia, evd, evd, evd, &attr, &tep))
		goto setup_failed;
	/* receives go up before the connection, so that nothing arrives unexpected */
	for (i = 0; i < TARGET_SLOTS; i++)
		if ((i < depth &&
		     kdat_ep_post_recv_sgl(iep, &islots[i].recv.sgl, &islots[i].recv.cqe)) ||
		    kdat_ep_post_recv_sgl(tep, &tslots[i].recv.sgl, &tslots[i].recv.cqe))
			goto setup_failed;
	if (kdat_psp_create(ia, port, crevd, KDAT_PSP_CONSUMER, &psp) ||
	    kdat_ep_connect(iep, (struct sockaddr *)&sin, port, 10000000, blkio_hello,
			    sizeof(blkio_hello), KDAT_DAT_QOS_BEST_EFFORT, KDAT_CONNECT_DEFAULT) ||
	    wait_event_number(crevd, KDAT_DAT_CONNECTION_REQUEST_EVENT, ev) ||
	    kdat_cr_accept(ev->cr, tep, NULL, 0) ||
	    wait_event_number(evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED, ev) ||
	    wait_event_number(evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED, ev))
		goto setup_failed;
	kfree(info);
	kfree(ev);
	for (i = 0; i < depth && i < requests; i++)
		issue_next(&islots[i]);
	/* interruptible: a long run is not a hung task (nothing signals a kworker) */
	if (wait_for_completion_interruptible_timeout(&all_done, 600 * HZ) <= 0)
		fail("timed out");
	else if (!atomic_read(&failed))
		strscpy(result, "passed", sizeof(result));
	return;

setup_failed:
	kfree(info);
	kfree(ev);
	fail("setup");
}

static void slots_free(struct blkio_slot *slots, u32 n)
{
	u32 i, j;

	for (i = 0; slots && i < n; i++) {
		struct blkio_slot *s = &slots[i];
		struct blkio_msg *msgs[] = { &s->cmd, &s->rsp, &s->recv };

		for (j = 0; j < ARRAY_SIZE(msgs); j++) {
			kdat_sgl_unmap(ia, &msgs[j]->sgl);
			kfree(msgs[j]->buf);
		}
		kdat_sgl_unmap(ia, &s->sgl);
		for (j = 0; j < s->npages; j++)
			if (s->pages[j])
				__free_page(s->pages[j]);
	}
	kfree(slots);
}

static int __init blkio_init(void)
{
	if (port <= 0 || port > 65535 || depth < 1 || depth > BLKIO_MAX_DEPTH || requests < 1 ||
	    size < 2 * BLKIO_HEAD || size % 512 ||
	    size > (BLKIO_MAX_PAGES - 2) * PAGE_SIZE)
		return -EINVAL;
	if (kdat_ia_open_flags(&init_net, ia_name, KDAT_IA_PDATA_RAW, &ia))
		return -ENODEV;
	if (kdat_evd_create(ia, 4 * depth + 16, KDAT_EVD_FLAGS_ALL, NULL, NULL, &evd) ||
	    kdat_evd_create(ia, 16, KDAT_EVD_CR | KDAT_EVD_CONNECTION, NULL, NULL, &crevd)) {
		kdat_ia_close(ia, KDAT_IA_CLOSE_ABRUPT);
		return -ENOMEM;
	}
	INIT_WORK(&run_work, run);
	schedule_work(&run_work);
	return 0;
}

static void __exit blkio_exit(void)
{
	u32 i;

	WRITE_ONCE(stopping, true);
	complete(&all_done);
	flush_work(&run_work);
	for (i = 0; islots && i < depth; i++)
		hrtimer_cancel(&islots[i].timer);
	/* flushes every posted request (their callbacks see stopping) before the pages go */
	if (iep)
		kdat_ep_free(iep);
	if (tep)
		kdat_ep_free(tep);
	for (i = 0; islots && i < depth; i++)
		hrtimer_cancel(&islots[i].timer);
	slots_free(islots, depth);
	slots_free(tslots, TARGET_SLOTS);
	kdat_ia_close(ia, KDAT_IA_CLOSE_ABRUPT);	/* and the MRs, PSP, EVDs */
}

module_init(blkio_init);
module_exit(blkio_exit);
MODULE_DESCRIPTION("kdat sample kernel consumer: block I/O over scatterlists, per-request registration");
MODULE_LICENSE("GPL");
