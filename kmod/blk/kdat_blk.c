// SPDX-License-Identifier: GPL-2.0
/*
 * kdat_blk: a blk-mq block device whose I/O a kdat_blkt target serves over
 * RDMA, on kdat's kernel API only (include/kdat/kdat.h).
 *
 *   insmod kdat_blk.ko target=192.0.2.1 port=N [nr_queues=Q queue_depth=D
 *                      ctrl_loss_tmo=S reconnect_delay=S io_timeout=S ia_name=NETDEV]
 *
 * makes /dev/kdatb0.  One kdat EP per hardware queue; a request's pages are
 * registered for the target (a fast registration per request, one MR per
 * tag) and named in a command sent to it; the target moves the data by RDMA
 * and answers with a send that ends the registration (kdat_blk_proto.h).
 * A write of a page or less goes in the command's send when the target
 * offers it: no registration and no RDMA read (the latency of a small write).
 * Flush and discard pass through when the target's device has them.
 *
 * The connection events drive the device.  When a queue's connection ends
 * (the target unloaded, the device removed, the peer gone) the device
 * stops dispatching, every queue is torn down, the requests in flight go back
 * to blk-mq's requeue list, and the controller reconnects: every 100 ms for
 * the first 5 s, then at doubling intervals up to reconnect_delay seconds.
 * Once connected again the requests run again;
 * after ctrl_loss_tmo seconds without a connection, I/O fails instead (the
 * way nvme-rdma's ctrl_loss_tmo does).
 */
#include <linux/blk-mq.h>
#include <linux/blkdev.h>
#include <linux/inet.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/workqueue.h>
#include <kdat/kdat.h>
#include "kdat_blk_proto.h"
#include "kdat_compat.h"

static char *ia_name = "kdat0";
module_param(ia_name, charp, 0444);
MODULE_PARM_DESC(ia_name, "the local netdev (or IP address) whose RDMA device to use");
static char *target;
module_param(target, charp, 0444);
MODULE_PARM_DESC(target, "the target's IPv4 address (required)");
static int port;
module_param(port, int, 0444);
MODULE_PARM_DESC(port, "the target's port (required)");
static int nr_queues;
module_param(nr_queues, int, 0444);
MODULE_PARM_DESC(nr_queues, "hardware queues, one connection each (default: online CPUs, at most 16)");
static int queue_depth = 32;
module_param(queue_depth, int, 0444);
MODULE_PARM_DESC(queue_depth, "requests in flight per queue (1-128)");
static int ctrl_loss_tmo = 60;

/*
 * Writable while the module runs: an outage in progress is judged by the new
 * value at its next failed attempt (-1 rides out a target whose boot takes
 * as long as it takes; 0 gives up on a target known to be gone, which lets
 * the I/O fail and the device close without waiting out the old value).
 */
static int param_set_ctrl_loss_tmo(const char *val, const struct kernel_param *kp)
{
	int tmo, ret = kstrtoint(val, 0, &tmo);

	if (ret)
		return ret;
	if (tmo < -1) {
		pr_err("kdat_blk: ctrl_loss_tmo=%d: -1 (for ever) or more seconds\n", tmo);
		return -EINVAL;
	}
	WRITE_ONCE(ctrl_loss_tmo, tmo);
	return 0;
}

static const struct kernel_param_ops ctrl_loss_tmo_ops = {
	.set = param_set_ctrl_loss_tmo,
	.get = param_get_int,
};
module_param_cb(ctrl_loss_tmo, &ctrl_loss_tmo_ops, &ctrl_loss_tmo, 0644);
MODULE_PARM_DESC(ctrl_loss_tmo,
		 "seconds to keep reconnecting before I/O fails (-1: for ever; writable)");
static int reconnect_delay = 1;
module_param(reconnect_delay, int, 0444);
MODULE_PARM_DESC(reconnect_delay, "the most seconds between reconnect attempts, after the first 5 s (1-3600)");

/*
 * Reconnect attempts after a loss: every 100 ms for the first seconds (a
 * restarted target is back within them), then at doubling intervals up to
 * reconnect_delay.
 */
#define KBLK_FIRST_RETRY_MS	100
#define KBLK_FAST_RETRY_MS	5000
static int io_timeout = 30;
module_param(io_timeout, int, 0444);
MODULE_PARM_DESC(io_timeout, "seconds before a request with no answer resets the connection");

#define KBLK_CONNECT_TIMEOUT_US	(5 * 1000 * 1000)
/* a request's pages: at most one more than KBLK_MAX_IO_PAGES when the first starts mid-page */
#define KBLK_MR_PAGES		(KBLK_MAX_IO_PAGES + 1)

enum kblk_state {
	KBLK_CONNECTING,	/* the queues' connects are out; the device does not dispatch */
	KBLK_LIVE,
	KBLK_RESETTING,		/* a connection ended: the queues are being torn down */
	KBLK_DEAD,		/* ctrl_loss_tmo passed: I/O fails */
	KBLK_DELETING,		/* module unload */
	KBLK_NR_STATES
};

static const char *const state_names[KBLK_NR_STATES] = {
	[KBLK_CONNECTING] = "connecting", [KBLK_LIVE] = "live", [KBLK_RESETTING] = "resetting",
	[KBLK_DEAD] = "dead", [KBLK_DELETING] = "deleting",
};

/*
 * The controller's transitions, as the EP's are a table: the states each
 * state may go to.  A reset that finds the controller resetting, and an
 * unload that finds it deleting, stay where they are.
 */
static const u8 kblk_next_states[KBLK_NR_STATES] = {
	[KBLK_CONNECTING] = BIT(KBLK_LIVE) | BIT(KBLK_RESETTING) | BIT(KBLK_DELETING),
	[KBLK_LIVE] = BIT(KBLK_RESETTING) | BIT(KBLK_DELETING),
	[KBLK_RESETTING] = BIT(KBLK_RESETTING) | BIT(KBLK_CONNECTING) | BIT(KBLK_DEAD) |
			   BIT(KBLK_DELETING),
	[KBLK_DEAD] = BIT(KBLK_DELETING),
	[KBLK_DELETING] = BIT(KBLK_DELETING),
};

struct kblk_queue;

/* A response receive buffer. */
struct kblk_rsp_buf {
	struct kblk_queue *q;
	struct kblk_rsp rsp;
	struct scatterlist sg;
	struct kdat_sgl sgl;
	struct kdat_cqe cqe;
};

struct kblk_queue {
	u16 qid;
	bool live;			/* its connection is ESTABLISHED */
	struct kdat_evd *evd;		/* connection events (ctrl.lock); NULL when torn down */
	struct kdat_ep *ep;
	u32 inline_write_bytes;		/* what its accept offered, 0 for none */
	struct kdat_mr **mrs;		/* one per tag */
	struct kblk_rsp_buf *rsps;	/* queue_depth of them */
	struct work_struct event_work;
};

/* blk-mq's per-request data */
struct kblk_req {
	struct kblk_cmd cmd;
	struct scatterlist cmd_sg;
	struct kdat_sgl cmd_sgl;	/* unused (nents 0) when the data is inline */
	/* [0]: the command when the data is inline; [1..]: the data's pages */
	struct scatterlist sg[1 + KBLK_MAX_IO_PAGES];
	struct kdat_sgl data;		/* inline: the command and the data, one send */
	struct kdat_cqe send_cqe;
	struct kdat_cqe inv_cqe;
	struct kdat_mr *mr;		/* its tag's, while registered */
	u32 rkey;
	bool mapped;
	atomic_t refs;			/* the command's send and the response (or its invalidate) */
	blk_status_t status;
};

static struct {
	struct mutex lock;		/* state, the IA and the queues' EPs, EVDs and MRs */
	enum kblk_state state;
	struct kdat_ia *ia;
	struct sockaddr_in addr;
	struct kblk_queue *queues;
	struct blk_mq_tag_set tag_set;
	struct gendisk *disk;
	struct kblk_accept dev;		/* what queue 0's accept said */
	struct completion first_live;
	struct work_struct err_work;
	struct delayed_work connect_work;
	unsigned long lost_at;		/* jiffies when the connection was lost; 0 while connected */
	bool fail_io;			/* dead or deleting: queue_rq fails requests */
	bool quiesced;			/* the device's dispatch is stopped (ctrl.lock) */
	atomic_t reset_requested;	/* by a callback or a timeout (kblk_error) */
	u32 reconnects, resets;
	u32 last_resume_ms;		/* loss to live, the last time */
	u32 retry_ms;			/* the wait before the next reconnect attempt */
} ctrl;

static struct workqueue_struct *kblk_wq;

static int param_get_state(char *buf, const struct kernel_param *kp)
{
	return sysfs_emit(buf, "%s\n", state_names[READ_ONCE(ctrl.state)]);
}

static const struct kernel_param_ops state_ops = { .get = param_get_state };
module_param_cb(state, &state_ops, NULL, 0444);
MODULE_PARM_DESC(state, "connecting, live, resetting, dead or deleting (read-only)");
module_param_named(resets, ctrl.resets, uint, 0444);
MODULE_PARM_DESC(resets, "times a connection was lost or a request timed out (read-only)");
module_param_named(reconnects, ctrl.reconnects, uint, 0444);
MODULE_PARM_DESC(reconnects, "times the connection came back (read-only)");
module_param_named(last_resume_ms, ctrl.last_resume_ms, uint, 0444);
MODULE_PARM_DESC(last_resume_ms, "from the last connection loss to live again (read-only)");

/* Moves the controller to state if the table allows it; a transition it does not is a bug. */
static void set_state(enum kblk_state state)
{
	lockdep_assert_held(&ctrl.lock);
	if (WARN_ONCE(!(kblk_next_states[ctrl.state] & BIT(state)),
		      "kdat_blk: no transition from %s to %s\n",
		      state_names[ctrl.state], state_names[state]))
		return;
	WRITE_ONCE(ctrl.state, state);
}

/* A connection ended or misbehaved: tear down and reconnect (any context). */
static void kblk_error(void)
{
	atomic_set(&ctrl.reset_requested, 1);
	queue_work(kblk_wq, &ctrl.err_work);
}

static void kblk_quiesce(void)
{
	lockdep_assert_held(&ctrl.lock);
	if (ctrl.disk && !ctrl.quiesced)
		blk_mq_quiesce_queue(ctrl.disk->queue);
	ctrl.quiesced = true;
}

/* Dispatch again: the requeued requests first. */
static void kblk_unquiesce(void)
{
	lockdep_assert_held(&ctrl.lock);
	if (ctrl.disk && ctrl.quiesced) {
		blk_mq_unquiesce_queue(ctrl.disk->queue);
		blk_mq_kick_requeue_list(ctrl.disk->queue);
	}
	ctrl.quiesced = false;
}

/* ---- the I/O path ------------------------------------------------------------------- */

static void req_unmap(struct kblk_req *req)
{
	if (!req->mapped)
		return;
	if (req->cmd_sgl.nents)
		kdat_sgl_unmap(ctrl.ia, &req->cmd_sgl);
	if (req->data.nents)
		kdat_sgl_unmap(ctrl.ia, &req->data);
	req->mapped = false;
}

static void req_put(struct kblk_req *req)
{
	if (!atomic_dec_and_test(&req->refs))
		return;
	req_unmap(req);
	blk_mq_complete_request(blk_mq_rq_from_pdu(req));
}

/* The command's send, or the local invalidate after the response, completed. */
static void req_step_done(struct kblk_req *req, const struct kdat_completion *c)
{
	if (c->dto_status != KDAT_DAT_DTO_SUCCESS) {
		/* the connection is going: the reset requeues the request */
		kblk_error();
		return;
	}
	req_put(req);
}

static void cmd_sent(struct kdat_cqe *cqe, const struct kdat_completion *c)
{
	req_step_done(container_of(cqe, struct kblk_req, send_cqe), c);
}

static void inv_done(struct kdat_cqe *cqe, const struct kdat_completion *c)
{
	req_step_done(container_of(cqe, struct kblk_req, inv_cqe), c);
}

static void rsp_received(struct kdat_cqe *cqe, const struct kdat_completion *c)
{
	struct kblk_rsp_buf *b = container_of(cqe, struct kblk_rsp_buf, cqe);
	struct kblk_queue *q = b->q;
	u16 tag = le16_to_cpu(b->rsp.tag);
	s32 status = le32_to_cpu(b->rsp.status);
	struct request *rq;
	struct kblk_req *req;

	if (c->dto_status != KDAT_DAT_DTO_SUCCESS)
		return;		/* flushed */
	rq = tag < queue_depth ? blk_mq_tag_to_rq(ctrl.tag_set.tags[q->qid], tag) : NULL;
	if (c->byte_len < sizeof(b->rsp) || !rq || !blk_mq_request_started(rq)) {
		pr_err_ratelimited("kdat_blk: queue %u: a response for no request (tag %u)\n",
				   q->qid, tag);
		kblk_error();
		return;
	}
	req = blk_mq_rq_to_pdu(rq);
	req->status = status ? errno_to_blk_status(status < 0 ? status : -EIO) : BLK_STS_OK;
	/* the buffer is free again: posted before the request can end and its tag come back */
	if (kdat_ep_post_recv_sgl(q->ep, &b->sgl, &b->cqe))
		kblk_error();
	if (req->mr && c->invalidated_rkey != req->rkey) {
		/* the target did not end the registration: end it before the pages go back */
		if (kdat_ep_post_local_inv(q->ep, req->mr, &req->inv_cqe))
			kblk_error();
		return;
	}
	req_put(req);
}

static blk_status_t kblk_queue_rq(struct blk_mq_hw_ctx *hctx, const struct blk_mq_queue_data *bd)
{
	struct kblk_queue *q = hctx->driver_data;
	struct request *rq = bd->rq;
	struct kblk_req *req = blk_mq_rq_to_pdu(rq);
	struct kblk_cmd *cmd = &req->cmd;
	u64 addr = 0;
	int n = 0;

	if (READ_ONCE(ctrl.fail_io))
		return BLK_STS_IOERR;
	if (!READ_ONCE(q->live))
		return BLK_STS_RESOURCE;	/* a reset is on its way: it stops dispatch */
	memset(cmd, 0, sizeof(*cmd));
	switch (req_op(rq)) {
	case REQ_OP_READ:
		cmd->opcode = KBLK_OP_READ;
		break;
	case REQ_OP_WRITE:
		cmd->opcode = KBLK_OP_WRITE;
		if (rq->cmd_flags & REQ_FUA)
			cmd->flags |= KBLK_CMD_FUA;
		break;
	case REQ_OP_FLUSH:
		cmd->opcode = KBLK_OP_FLUSH;
		break;
	case REQ_OP_DISCARD:
		cmd->opcode = KBLK_OP_DISCARD;
		break;
	default:
		return BLK_STS_NOTSUPP;
	}
	blk_mq_start_request(rq);
	cmd->tag = cpu_to_le16(rq->tag);
	/* a flush covers the whole device: its position means nothing (6.12 leaves it at -1) */
	cmd->sector = cpu_to_le64(req_op(rq) == REQ_OP_FLUSH ? 0 : blk_rq_pos(rq));
	cmd->length = cpu_to_le32(blk_rq_bytes(rq));
	req->status = BLK_STS_OK;
	req->mr = NULL;
	req->data.nents = 0;
	req->cmd_sgl.nents = 0;
	if (cmd->opcode == KBLK_OP_READ || cmd->opcode == KBLK_OP_WRITE) {
		sg_init_table(req->sg, ARRAY_SIZE(req->sg));
		n = blk_rq_map_sg(rq, &req->sg[1]);
		if (n <= 0)
			return BLK_STS_IOERR;
	}
	if (cmd->opcode == KBLK_OP_WRITE && blk_rq_bytes(rq) <= q->inline_write_bytes &&
	    n <= KBLK_INLINE_MAX_SEGS) {
		/* the data follows the command in one send */
		cmd->flags |= KBLK_CMD_INLINE;
		sg_set_buf(&req->sg[0], cmd, sizeof(*cmd));
		if (kdat_sgl_map(ctrl.ia, &req->data, req->sg, 1 + n, DMA_TO_DEVICE))
			return BLK_STS_RESOURCE;
		req->mapped = true;
		atomic_set(&req->refs, 2);
		if (kdat_ep_post_sgl(q->ep, KDAT_SGL_SEND, &req->data, &req->send_cqe, 0, 0))
			goto busy;
		return BLK_STS_OK;
	}
	sg_init_one(&req->cmd_sg, cmd, sizeof(*cmd));
	if (kdat_sgl_map(ctrl.ia, &req->cmd_sgl, &req->cmd_sg, 1, DMA_TO_DEVICE))
		return BLK_STS_RESOURCE;
	req->mapped = true;
	if (cmd->opcode == KBLK_OP_READ || cmd->opcode == KBLK_OP_WRITE) {
		if (kdat_sgl_map(ctrl.ia, &req->data, &req->sg[1], n, rq_dma_dir(rq)))
			goto busy;
		req->mr = q->mrs[rq->tag];
		if (kdat_ep_post_reg_mr(q->ep, req->mr, &req->data,
					KDAT_RMR_REMOTE_READ | KDAT_RMR_REMOTE_WRITE, &req->rkey, &addr))
			goto busy;
		cmd->addr = cpu_to_le64(addr);
		cmd->rkey = cpu_to_le32(req->rkey);
	}
	atomic_set(&req->refs, 2);
	if (kdat_ep_post_sgl(q->ep, KDAT_SGL_SEND, &req->cmd_sgl, &req->send_cqe, 0, 0))
		goto busy;
	return BLK_STS_OK;
busy:
	/* the connection is ending (posts are refused): the reset takes it from here */
	req_unmap(req);
	return BLK_STS_RESOURCE;
}

static void kblk_complete_rq(struct request *rq)
{
	blk_mq_end_request(rq, ((struct kblk_req *)blk_mq_rq_to_pdu(rq))->status);
}

static enum blk_eh_timer_return kblk_timeout(struct request *rq)
{
	pr_warn_ratelimited("kdat_blk: request %u timed out: resetting the connection\n", rq->tag);
	kblk_error();
	return BLK_EH_RESET_TIMER;
}

static int kblk_init_hctx(struct blk_mq_hw_ctx *hctx, void *data, unsigned int hctx_idx)
{
	hctx->driver_data = &ctrl.queues[hctx_idx];
	return 0;
}

static int kblk_init_request(struct blk_mq_tag_set *set, struct request *rq,
			     unsigned int hctx_idx, unsigned int numa_node)
{
	struct kblk_req *req = blk_mq_rq_to_pdu(rq);

	req->send_cqe.done = cmd_sent;
	req->inv_cqe.done = inv_done;
	return 0;
}

static const struct blk_mq_ops kblk_mq_ops = {
	.queue_rq = kblk_queue_rq,
	.complete = kblk_complete_rq,
	.timeout = kblk_timeout,
	.init_hctx = kblk_init_hctx,
	.init_request = kblk_init_request,
};

static const struct block_device_operations kblk_fops = {
	.owner = THIS_MODULE,
};

/* ---- connections -------------------------------------------------------------------- */

/* Frees a queue's EP (flushing what was posted), its EVD, buffers and MRs. */
static void queue_teardown(struct kblk_queue *q)
{
	u32 i;

	lockdep_assert_held(&ctrl.lock);
	WRITE_ONCE(q->live, false);
	if (q->ep)
		kdat_ep_free(q->ep);	/* every posted request's callback has run */
	q->ep = NULL;
	if (q->evd)
		kdat_evd_free(q->evd);	/* a queued event work finds no EVD */
	q->evd = NULL;
	for (i = 0; q->rsps && i < queue_depth; i++)
		if (q->rsps[i].sgl.nents)
			kdat_sgl_unmap(ctrl.ia, &q->rsps[i].sgl);
	kfree(q->rsps);
	q->rsps = NULL;
	for (i = 0; q->mrs && i < queue_depth; i++)
		if (q->mrs[i])
			kdat_mr_free(q->mrs[i]);
	kfree(q->mrs);
	q->mrs = NULL;
}

static void queue_event(struct kdat_evd *evd, void *context)
{
	struct kblk_queue *q = context;

	queue_work(kblk_wq, &q->event_work);
}

static int queue_setup(struct kblk_queue *q)
{
	struct kdat_ep_attr attr = {
		/* per request: a registration, the command and perhaps an invalidate */
		.max_request_dtos = 3 * queue_depth + 2, .max_recv_dtos = queue_depth + 1,
		/* an inline write: the command and its data's segments */
		.max_request_iov = 1 + KBLK_INLINE_MAX_SEGS, .max_recv_iov = 1,
		.max_rdma_read_in = 16, .max_rdma_read_out = 0,
		.retry_count = 7, .rnr_retry_count = 7,
	};
	u32 i;

	lockdep_assert_held(&ctrl.lock);
	q->mrs = kcalloc(queue_depth, sizeof(*q->mrs), GFP_KERNEL);
	q->rsps = kcalloc(queue_depth, sizeof(*q->rsps), GFP_KERNEL);
	if (!q->mrs || !q->rsps)
		return -ENOMEM;
	if (kdat_evd_create(ctrl.ia, 16, KDAT_EVD_FLAGS_ALL, queue_event, q, &q->evd) ||
	    kdat_ep_create(ctrl.ia, q->evd, q->evd, q->evd, &attr, &q->ep))
		return -ENOMEM;
	for (i = 0; i < queue_depth; i++) {
		struct kblk_rsp_buf *b = &q->rsps[i];

		if (kdat_mr_alloc(ctrl.ia, KBLK_MR_PAGES, &q->mrs[i]))
			return -ENOMEM;
		b->q = q;
		b->cqe.done = rsp_received;
		sg_init_one(&b->sg, &b->rsp, sizeof(b->rsp));
		if (kdat_sgl_map(ctrl.ia, &b->sgl, &b->sg, 1, DMA_FROM_DEVICE) ||
		    kdat_ep_post_recv_sgl(q->ep, &b->sgl, &b->cqe))
			return -EIO;
	}
	return 0;
}

static int queue_connect(struct kblk_queue *q)
{
	struct kblk_connect req = {
		.magic = cpu_to_le32(KBLK_MAGIC), .version = cpu_to_le16(KBLK_VERSION),
		.qid = cpu_to_le16(q->qid), .queue_depth = cpu_to_le16(queue_depth),
		.nr_queues = cpu_to_le16(ctrl.tag_set.nr_hw_queues),
	};

	return kdat_ep_connect(q->ep, (struct sockaddr *)&ctrl.addr, port, KBLK_CONNECT_TIMEOUT_US,
			       &req, sizeof(req), KDAT_DAT_QOS_BEST_EFFORT,
			       KDAT_CONNECT_DEFAULT) ? -ENOTCONN : 0;
}

static bool requeue_one(struct request *rq, void *data)
{
	struct kblk_req *req = blk_mq_rq_to_pdu(rq);

	if (blk_mq_request_completed(rq))
		return true;
	req_unmap(req);
	blk_mq_requeue_request(rq, false);
	return true;
}

/*
 * Frees every queue (their callbacks have all run once their EPs are freed),
 * puts what was in flight back on the requeue list, and closes the IA.
 */
static void all_queues_teardown(void)
{
	u32 i;

	for (i = 0; i < ctrl.tag_set.nr_hw_queues; i++)
		queue_teardown(&ctrl.queues[i]);
	atomic_set(&ctrl.reset_requested, 0);
	/* unmapped while their IA is open */
	blk_mq_tagset_busy_iter(&ctrl.tag_set, requeue_one, NULL);
	if (ctrl.ia)
		kdat_ia_close(ctrl.ia, KDAT_IA_CLOSE_ABRUPT);
	ctrl.ia = NULL;
}

/* A fresh IA, every queue's EP and buffers, and their connects (the events say how they end). */
static void kblk_connect_work(struct work_struct *work)
{
	u32 i;

	mutex_lock(&ctrl.lock);
	if (ctrl.state != KBLK_CONNECTING)
		goto out;
	if (kdat_ia_open_flags(&init_net, ia_name, KDAT_IA_PDATA_RAW, &ctrl.ia)) {
		ctrl.ia = NULL;
		goto failed;
	}
	for (i = 0; i < ctrl.tag_set.nr_hw_queues; i++)
		if (queue_setup(&ctrl.queues[i]) || queue_connect(&ctrl.queues[i]))
			goto failed;
out:
	mutex_unlock(&ctrl.lock);
	return;
failed:
	set_state(KBLK_RESETTING);
	mutex_unlock(&ctrl.lock);
	kblk_error();
}

/* Every queue is ESTABLISHED: dispatch again. */
static void kblk_live(void)
{
	lockdep_assert_held(&ctrl.lock);
	set_state(KBLK_LIVE);
	if (ctrl.lost_at) {
		ctrl.last_resume_ms = jiffies_to_msecs(jiffies - ctrl.lost_at);
		ctrl.reconnects++;
		pr_info("kdat_blk: connected again after %u ms\n", ctrl.last_resume_ms);
	}
	ctrl.lost_at = 0;
	complete_all(&ctrl.first_live);
	kblk_unquiesce();
}

static bool accept_ok(const struct kdat_event_info *ev, struct kblk_queue *q)
{
	const struct kblk_accept *acc = (const void *)ev->private_data;

	if (ev->private_data_size < sizeof(*acc) || le32_to_cpu(acc->magic) != KBLK_MAGIC ||
	    le16_to_cpu(acc->version) != KBLK_VERSION || !le64_to_cpu(acc->capacity) ||
	    le32_to_cpu(acc->max_io_bytes) < PAGE_SIZE) {
		pr_err("kdat_blk: queue %u: the peer is not a kdat_blkt target of version %d\n",
		       q->qid, KBLK_VERSION);
		return false;
	}
	if (q->qid == 0) {
		if (ctrl.disk && le64_to_cpu(acc->capacity) != le64_to_cpu(ctrl.dev.capacity)) {
			pr_info("kdat_blk: the target's device is now %llu sectors\n",
				(unsigned long long)le64_to_cpu(acc->capacity));
			set_capacity_and_notify(ctrl.disk, le64_to_cpu(acc->capacity));
		}
		ctrl.dev = *acc;
	}
	q->inline_write_bytes = le16_to_cpu(acc->flags) & KBLK_F_INLINE_WRITE ?
		min_t(u32, le32_to_cpu(acc->inline_write_bytes), KBLK_INLINE_WRITE_BYTES) : 0;
	return true;
}

static void kblk_event_work(struct work_struct *work)
{
	struct kblk_queue *q = container_of(work, struct kblk_queue, event_work);
	struct kdat_event_info *ev = kmalloc(sizeof(*ev), GFP_KERNEL);
	bool ended = false;
	u32 i, live = 0;

	if (!ev) {
		kblk_error();
		return;
	}
	mutex_lock(&ctrl.lock);
	while (q->evd && !kdat_evd_dequeue(q->evd, ev, NULL)) {
		if (ev->number == KDAT_DAT_DTO_COMPLETION_EVENT)
			continue;
		if (ev->number == KDAT_DAT_CONNECTION_EVENT_ESTABLISHED && accept_ok(ev, q)) {
			WRITE_ONCE(q->live, true);
			continue;
		}
		if (ev->number == KDAT_DAT_CONNECTION_EVENT_PEER_REJECTED) {
			const struct kblk_reject *rej = (const void *)ev->private_data;

			if (ev->private_data_size >= sizeof(*rej) &&
			    le32_to_cpu(rej->magic) == KBLK_MAGIC)
				pr_err("kdat_blk: queue %u: the target refused it: %s (reason %u)\n",
				       q->qid, kblk_reject_reason(le32_to_cpu(rej->reason)),
				       le32_to_cpu(rej->reason));
		}
		ended = true;	/* refused, unreachable, timed out, disconnected, broken */
	}
	kfree(ev);
	if (ended && ctrl.state == KBLK_DELETING) {
		kblk_error();	/* what is in flight fails now, not at its timeout */
	} else if (ended && (ctrl.state == KBLK_LIVE || ctrl.state == KBLK_CONNECTING)) {
		set_state(KBLK_RESETTING);
		kblk_error();
	} else if (ctrl.state == KBLK_CONNECTING) {
		for (i = 0; i < ctrl.tag_set.nr_hw_queues; i++)
			live += READ_ONCE(ctrl.queues[i].live);
		if (live == ctrl.tag_set.nr_hw_queues)
			kblk_live();
	}
	mutex_unlock(&ctrl.lock);
}

/*
 * A connection ended: stop dispatch, tear every queue down (their callbacks
 * have all run once their EPs are freed), put what was in flight back on the
 * requeue list, and reconnect -- or, past ctrl_loss_tmo or when unloading,
 * fail the I/O.
 */
static void kblk_err_work(struct work_struct *work)
{
	int tmo = READ_ONCE(ctrl_loss_tmo);
	bool deleting, give_up;

	mutex_lock(&ctrl.lock);
	deleting = ctrl.state == KBLK_DELETING;
	/* a request from callbacks of EPs an earlier reset freed is stale */
	if (!deleting && ctrl.state != KBLK_RESETTING &&
	    (ctrl.state == KBLK_DEAD || !atomic_xchg(&ctrl.reset_requested, 0))) {
		mutex_unlock(&ctrl.lock);
		return;
	}
	set_state(deleting ? KBLK_DELETING : KBLK_RESETTING);
	if (!ctrl.lost_at && ctrl.disk && !deleting) {
		ctrl.lost_at = jiffies;
		ctrl.resets++;
		ctrl.retry_ms = KBLK_FIRST_RETRY_MS;
		pr_info("kdat_blk: connection lost: reconnecting (for %d s at most)\n", tmo);
	}
	kblk_quiesce();
	all_queues_teardown();
	/* no device yet: the first connection failed, and module load with it */
	give_up = deleting || !ctrl.disk ||
		  (tmo >= 0 && time_after_eq(jiffies, ctrl.lost_at + (unsigned long)tmo * HZ));
	if (give_up) {
		if (!deleting) {
			if (ctrl.disk)
				pr_err("kdat_blk: no connection for %lu s (ctrl_loss_tmo %d): failing I/O\n",
				       (jiffies - ctrl.lost_at) / HZ, tmo);
			set_state(KBLK_DEAD);
		}
		WRITE_ONCE(ctrl.fail_io, true);
		complete_all(&ctrl.first_live);
		kblk_unquiesce();
	} else {
		set_state(KBLK_CONNECTING);
		/*
		 * A restarted target is back within seconds: try soon, then less
		 * often (each attempt opens an IA and connects every queue).
		 */
		queue_delayed_work(kblk_wq, &ctrl.connect_work, msecs_to_jiffies(ctrl.retry_ms));
		if (jiffies_to_msecs(jiffies - ctrl.lost_at) >= KBLK_FAST_RETRY_MS)
			ctrl.retry_ms = min_t(u32, 2 * ctrl.retry_ms,
					      reconnect_delay * MSEC_PER_SEC);
	}
	mutex_unlock(&ctrl.lock);
}

/* ---- the device --------------------------------------------------------------------- */

static int kblk_add_disk(void)
{
	u32 lbs = le32_to_cpu(ctrl.dev.logical_block_size);
	u32 max_io = min_t(u32, le32_to_cpu(ctrl.dev.max_io_bytes), KBLK_MAX_IO_BYTES);
	u16 flags = le16_to_cpu(ctrl.dev.flags);
	struct queue_limits lim = {
		.logical_block_size = lbs,
		.physical_block_size = lbs,
		.max_hw_sectors = max_io >> SECTOR_SHIFT,
		.max_segments = KBLK_MAX_IO_PAGES,
		/* a fast registration takes a page list: only the ends may be part-pages */
		.virt_boundary_mask = PAGE_SIZE - 1,
	};
	unsigned int features = 0;
	struct gendisk *disk;
	int ret;

	if (flags & KBLK_F_WRITE_CACHE)
		features |= BLK_FEAT_WRITE_CACHE | BLK_FEAT_FUA;
	if (flags & KBLK_F_DISCARD) {
		lim.max_hw_discard_sectors = UINT_MAX >> SECTOR_SHIFT;
		lim.discard_granularity = max_t(u32, le32_to_cpu(ctrl.dev.discard_granularity), lbs);
	}
	disk = kdat_alloc_disk(&ctrl.tag_set, &lim, features, NULL);
	if (IS_ERR(disk))
		return PTR_ERR(disk);
	strscpy(disk->disk_name, "kdatb0", sizeof(disk->disk_name));
	disk->fops = &kblk_fops;
	set_capacity(disk, le64_to_cpu(ctrl.dev.capacity));
	mutex_lock(&ctrl.lock);
	ctrl.disk = disk;
	mutex_unlock(&ctrl.lock);
	ret = add_disk(disk);
	if (ret) {
		mutex_lock(&ctrl.lock);
		ctrl.disk = NULL;
		mutex_unlock(&ctrl.lock);
		put_disk(disk);
	}
	return ret;
}

static int check_params(void)
{
	if (!target || !in4_pton(target, -1, (u8 *)&ctrl.addr.sin_addr.s_addr, -1, NULL)) {
		pr_err("kdat_blk: target=%s: give the target's IPv4 address\n", target ?: "");
		return -EINVAL;
	}
	if (port <= 0 || port > 65535) {
		pr_err("kdat_blk: port=%d: give the target's port (1-65535)\n", port);
		return -EINVAL;
	}
	if (nr_queues < 0 || nr_queues > KBLK_MAX_QUEUES) {
		pr_err("kdat_blk: nr_queues=%d: 1-%d, or 0 for one per online CPU\n", nr_queues,
		       KBLK_MAX_QUEUES);
		return -EINVAL;
	}
	if (queue_depth < 1 || queue_depth > KBLK_MAX_QUEUE_DEPTH) {
		pr_err("kdat_blk: queue_depth=%d: 1-%d\n", queue_depth, KBLK_MAX_QUEUE_DEPTH);
		return -EINVAL;
	}
	if (reconnect_delay < 1 || reconnect_delay > 3600 || io_timeout < 1) {
		pr_err("kdat_blk: reconnect_delay=%d io_timeout=%d: reconnect_delay 1-3600, io_timeout 1 or more\n",
		       reconnect_delay, io_timeout);
		return -EINVAL;
	}
	return 0;
}

static void kblk_stop(void)
{
	u32 i;

	mutex_lock(&ctrl.lock);
	set_state(KBLK_DELETING);
	mutex_unlock(&ctrl.lock);
	cancel_delayed_work_sync(&ctrl.connect_work);
	/* tears the queues down, requeues what is in flight and fails it from now on */
	kblk_err_work(&ctrl.err_work);
	cancel_work_sync(&ctrl.err_work);
	for (i = 0; i < ctrl.tag_set.nr_hw_queues; i++)
		cancel_work_sync(&ctrl.queues[i].event_work);
}

static int __init kblk_init(void)
{
	u32 i;
	int ret = check_params();

	if (ret)
		return ret;
	ctrl.addr.sin_family = AF_INET;
	ctrl.addr.sin_port = htons(port);
	mutex_init(&ctrl.lock);
	init_completion(&ctrl.first_live);
	INIT_WORK(&ctrl.err_work, kblk_err_work);
	INIT_DELAYED_WORK(&ctrl.connect_work, kblk_connect_work);
	kblk_wq = alloc_workqueue("kdat_blk", WQ_MEM_RECLAIM, 0);
	if (!kblk_wq)
		return -ENOMEM;
	ctrl.tag_set.ops = &kblk_mq_ops;
	ctrl.tag_set.nr_hw_queues = nr_queues ?: min_t(u32, num_online_cpus(), KBLK_MAX_QUEUES);
	ctrl.tag_set.queue_depth = queue_depth;
	ctrl.tag_set.numa_node = NUMA_NO_NODE;
	ctrl.tag_set.cmd_size = sizeof(struct kblk_req);
	ctrl.tag_set.timeout = io_timeout * HZ;
	ctrl.queues = kcalloc(ctrl.tag_set.nr_hw_queues, sizeof(*ctrl.queues), GFP_KERNEL);
	if (!ctrl.queues) {
		ret = -ENOMEM;
		goto wq;
	}
	for (i = 0; i < ctrl.tag_set.nr_hw_queues; i++) {
		ctrl.queues[i].qid = i;
		INIT_WORK(&ctrl.queues[i].event_work, kblk_event_work);
	}
	ret = blk_mq_alloc_tag_set(&ctrl.tag_set);
	if (ret)
		goto queues;
	/* the first connection, synchronously (ctrl starts connecting): the size comes with it */
	kblk_connect_work(&ctrl.connect_work.work);
	wait_for_completion_timeout(&ctrl.first_live, 2 * KBLK_CONNECT_TIMEOUT_US / 1000000 * HZ);
	mutex_lock(&ctrl.lock);
	if (ctrl.state != KBLK_LIVE) {
		mutex_unlock(&ctrl.lock);
		pr_err("kdat_blk: cannot connect to %pI4 port %d through %s\n",
		       &ctrl.addr.sin_addr, port, ia_name);
		ret = -ENOTCONN;
		goto stop;
	}
	mutex_unlock(&ctrl.lock);
	ret = kblk_add_disk();
	if (ret)
		goto stop;
	pr_info("kdat_blk: %s: %llu sectors on %pI4 port %d, %u queues of %d\n",
		ctrl.disk->disk_name, (unsigned long long)get_capacity(ctrl.disk),
		&ctrl.addr.sin_addr, port, ctrl.tag_set.nr_hw_queues, queue_depth);
	return 0;
stop:
	kblk_stop();
	blk_mq_free_tag_set(&ctrl.tag_set);
queues:
	kfree(ctrl.queues);
wq:
	destroy_workqueue(kblk_wq);
	return ret;
}

static void __exit kblk_exit(void)
{
	/* I/O in flight while connected completes; while reconnecting, it fails */
	mutex_lock(&ctrl.lock);
	if (ctrl.state != KBLK_LIVE)
		WRITE_ONCE(ctrl.fail_io, true);
	set_state(KBLK_DELETING);
	kblk_unquiesce();
	mutex_unlock(&ctrl.lock);
	cancel_delayed_work_sync(&ctrl.connect_work);
	del_gendisk(ctrl.disk);
	kblk_stop();
	put_disk(ctrl.disk);
	blk_mq_free_tag_set(&ctrl.tag_set);
	kfree(ctrl.queues);
	destroy_workqueue(kblk_wq);
}

module_init(kblk_init);
module_exit(kblk_exit);
MODULE_DESCRIPTION("kdat block initiator: a blk-mq device served by a kdat_blkt target over RDMA");
MODULE_LICENSE("GPL");
