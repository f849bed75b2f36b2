// SPDX-License-Identifier: GPL-2.0
/*
 * kdat_blk: blk-mq block devices whose I/O kdat_blkt targets serve over RDMA,
 * on kdat's kernel API only (include/kdat/kdat.h).
 *
 * Controllers are made at run time, as NVMe over Fabrics' are: a write of an
 * option string to /dev/kdat-blk connects one, and a read of the same open
 * file names it:
 *
 *   target=ADDRESS,port=N[,nr_queues=Q,queue_depth=D,ctrl_loss_tmo=S,
 *   reconnect_delay=S,io_timeout=S,ia_name=NETDEV|ADDRESS,hostid=UUID]
 *
 * makes /dev/kdatbN (ADDRESS IPv4 or IPv6, in the writer's network
 * namespace; the local RDMA device is the one the route to the target leaves
 * by, unless ia_name names one).  /sys/class/kdat-blk/kdatbN/ shows it and
 * delete_controller there removes it.
 *
 * One kdat EP per hardware queue; a request's pages are registered for the
 * target (a fast registration per request, one MR per tag) and named in a
 * command sent to it; the target moves the data by RDMA and answers with a
 * send that ends the registration (kdat_blk_proto.h).  A write of a page or
 * less goes in the command's send when the target offers it: no
 * registration and no RDMA read (the latency of a small write).  Flush and
 * discard pass through when the target's device has them.
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
#include <linux/idr.h>
#include <linux/inet.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/parser.h>
#include <linux/random.h>
#include <linux/slab.h>
#include <linux/uuid.h>
#include <linux/workqueue.h>
#include <net/ip6_route.h>
#include <net/route.h>
#include <kdat/kdat.h>
#include "kdat_blk_proto.h"
#include "kdat_compat.h"

/*
 * Reconnect attempts after a loss: every 100 ms for the first seconds (a
 * restarted target is back within them), then at doubling intervals up to
 * reconnect_delay.
 */
#define KBLK_FIRST_RETRY_MS	100
#define KBLK_FAST_RETRY_MS	5000
#define KBLK_CONNECT_TIMEOUT_US	(5 * 1000 * 1000)
/* a request's pages: at most one more than KBLK_MAX_IO_PAGES when the first starts mid-page */
#define KBLK_MR_PAGES		(KBLK_MAX_IO_PAGES + 1)
/* an option string written to /dev/kdat-blk */
#define KBLK_MAX_OPTIONS	512

#define CREATE_TRACE_POINTS
#include "kdat_blk_trace.h"	/* enum kblk_state and its list, KBLK_STATES */

/* in the list's order, which is the enum's */
#define KBLK_STATE_NAME_(name, text) text,
static const char *const state_names[KBLK_NR_STATES] = { KBLK_STATES(KBLK_STATE_NAME_) };

/*
 * The controller's transitions, as the EP's are a table: the states each
 * state may go to.  A reset that finds the controller resetting, and a
 * delete that finds it deleting, stay where they are.
 */
static const u8 kblk_next_states[KBLK_NR_STATES] = {
	[KBLK_CONNECTING] = BIT(KBLK_LIVE) | BIT(KBLK_RESETTING) | BIT(KBLK_DELETING),
	[KBLK_LIVE] = BIT(KBLK_RESETTING) | BIT(KBLK_DELETING),
	[KBLK_RESETTING] = BIT(KBLK_RESETTING) | BIT(KBLK_CONNECTING) | BIT(KBLK_DEAD) |
			   BIT(KBLK_DELETING),
	[KBLK_DEAD] = BIT(KBLK_DELETING),
	[KBLK_DELETING] = BIT(KBLK_DELETING),
};

static_assert(IFNAMSIZ <= INET6_ADDRSTRLEN);

struct kblk_ctrl;
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
	struct kblk_ctrl *ctrl;
	u16 qid;
	bool live;			/* its connection is ESTABLISHED */
	struct kdat_evd *evd;		/* connection events (ctrl->lock); NULL when torn down */
	struct kdat_ep *ep;
	u32 inline_write_bytes;		/* what its accept offered, 0 for none */
	struct kdat_mr **mrs;		/* one per tag */
	struct kblk_rsp_buf *rsps;	/* queue_depth of them */
	struct work_struct event_work;
};

/* blk-mq's per-request data */
struct kblk_req {
	struct kblk_queue *q;
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

/* What a controller was made with (the option string). */
struct kblk_opts {
	struct sockaddr_storage addr;	/* the target's, with its port */
	char ia_name[INET6_ADDRSTRLEN];	/* a netdev's name is shorter (IFNAMSIZ) */
	bool ia_given;			/* ia_name was given, not found by route */
	u16 nr_queues, queue_depth;
	int ctrl_loss_tmo;		/* writable in sysfs */
	int reconnect_delay;		/* writable in sysfs */
	int io_timeout;
	uuid_t hostid;			/* this host's, unless hostid= names another */
};

struct kblk_ctrl {
	struct device dev;		/* /sys/class/kdat-blk/kdatbN; its release frees this */
	struct list_head node;		/* on kblk_ctrls while it may be deleted */
	int instance;			/* the N of kdatbN */
	u64 ctrl_id;			/* random: the target tells its queues from others' */
	struct kblk_opts opts;
	struct net *net;		/* the connecting process's */
	struct mutex lock;		/* state, the IA and the queues' EPs, EVDs and MRs */
	enum kblk_state state;
	struct kdat_ia *ia;
	struct kblk_queue *queues;
	struct blk_mq_tag_set tag_set;
	bool tag_set_ready;
	struct gendisk *disk;
	struct kblk_accept target_dev;	/* what queue 0's accept said */
	struct completion first_live;
	struct work_struct err_work;
	struct delayed_work connect_work;
	unsigned long lost_at;		/* jiffies when the connection was lost; 0 while connected */
	bool fail_io;			/* dead or deleting: queue_rq fails requests */
	bool quiesced;			/* the device's dispatch is stopped (lock) */
	atomic_t reset_requested;	/* by a callback or a timeout (kblk_error) */
	u32 reconnects, resets;
	u32 last_resume_ms;		/* loss to live, the last time */
	u32 retry_ms;			/* the wait before the next reconnect attempt */
};

static struct workqueue_struct *kblk_wq;
/* the host id a controller sends when its options name none: random per module load */
static uuid_t kblk_default_hostid;
static DEFINE_IDA(kblk_instances);
static DEFINE_MUTEX(kblk_ctrls_lock);	/* the list; taken before no ctrl->lock */
static LIST_HEAD(kblk_ctrls);

/* Moves the controller to state if the table allows it; a transition it does not is a bug. */
static void set_state(struct kblk_ctrl *ctrl, enum kblk_state state)
{
	lockdep_assert_held(&ctrl->lock);
	if (WARN_ONCE(!(kblk_next_states[ctrl->state] & BIT(state)),
		      "kdat_blk: no transition from %s to %s\n",
		      state_names[ctrl->state], state_names[state]))
		return;
	if (ctrl->state != state)
		trace_kdat_blk_state(dev_name(&ctrl->dev), ctrl->state, state);
	WRITE_ONCE(ctrl->state, state);
}

/* A connection ended or misbehaved: tear down and reconnect (any context). */
static void kblk_error(struct kblk_ctrl *ctrl)
{
	atomic_set(&ctrl->reset_requested, 1);
	queue_work(kblk_wq, &ctrl->err_work);
}

static void kblk_quiesce(struct kblk_ctrl *ctrl)
{
	lockdep_assert_held(&ctrl->lock);
	if (ctrl->disk && !ctrl->quiesced)
		blk_mq_quiesce_queue(ctrl->disk->queue);
	ctrl->quiesced = true;
}

/* Dispatch again: the requeued requests first. */
static void kblk_unquiesce(struct kblk_ctrl *ctrl)
{
	lockdep_assert_held(&ctrl->lock);
	if (ctrl->disk && ctrl->quiesced) {
		blk_mq_unquiesce_queue(ctrl->disk->queue);
		blk_mq_kick_requeue_list(ctrl->disk->queue);
	}
	ctrl->quiesced = false;
}

/* ---- the I/O path ------------------------------------------------------------------- */

static void req_unmap(struct kblk_req *req)
{
	struct kdat_ia *ia = req->q->ctrl->ia;

	if (!req->mapped)
		return;
	if (req->cmd_sgl.nents)
		kdat_sgl_unmap(ia, &req->cmd_sgl);
	if (req->data.nents)
		kdat_sgl_unmap(ia, &req->data);
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
		kblk_error(req->q->ctrl);
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
	struct kblk_ctrl *ctrl = q->ctrl;
	u16 tag = le16_to_cpu(b->rsp.tag);
	s32 status = le32_to_cpu(b->rsp.status);
	struct request *rq;
	struct kblk_req *req;

	if (c->dto_status != KDAT_DAT_DTO_SUCCESS)
		return;		/* flushed */
	rq = tag < ctrl->opts.queue_depth ?
		blk_mq_tag_to_rq(ctrl->tag_set.tags[q->qid], tag) : NULL;
	if (c->byte_len < sizeof(b->rsp) || !rq || !blk_mq_request_started(rq)) {
		pr_err_ratelimited("kdat_blk: %s: queue %u: a response for no request (tag %u)\n",
				   dev_name(&ctrl->dev), q->qid, tag);
		kblk_error(ctrl);
		return;
	}
	req = blk_mq_rq_to_pdu(rq);
	req->status = status ? errno_to_blk_status(status < 0 ? status : -EIO) : BLK_STS_OK;
	/* the buffer is free again: posted before the request can end and its tag come back */
	if (kdat_ep_post_recv_sgl(q->ep, &b->sgl, &b->cqe))
		kblk_error(ctrl);
	if (req->mr && c->invalidated_rkey != req->rkey) {
		/* the target did not end the registration: end it before the pages go back */
		if (kdat_ep_post_local_inv(q->ep, req->mr, &req->inv_cqe))
			kblk_error(ctrl);
		return;
	}
	req_put(req);
}

static blk_status_t kblk_queue_rq(struct blk_mq_hw_ctx *hctx, const struct blk_mq_queue_data *bd)
{
	struct kblk_queue *q = hctx->driver_data;
	struct kblk_ctrl *ctrl = q->ctrl;
	struct request *rq = bd->rq;
	struct kblk_req *req = blk_mq_rq_to_pdu(rq);
	struct kblk_cmd *cmd = &req->cmd;
	u64 addr = 0;
	int n = 0;

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
	if (READ_ONCE(ctrl->fail_io)) {
		trace_kdat_blk_io_error(dev_name(&ctrl->dev), q->qid, rq->tag, cmd->opcode,
					blk_rq_pos(rq), blk_rq_bytes(rq), -EIO);
		return BLK_STS_IOERR;
	}
	if (!READ_ONCE(q->live))
		return BLK_STS_RESOURCE;	/* a reset is on its way: it stops dispatch */
	blk_mq_start_request(rq);
	req->q = q;
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
		if (kdat_sgl_map(ctrl->ia, &req->data, req->sg, 1 + n, DMA_TO_DEVICE))
			return BLK_STS_RESOURCE;
		req->mapped = true;
		atomic_set(&req->refs, 2);
		if (kdat_ep_post_sgl(q->ep, KDAT_SGL_SEND, &req->data, &req->send_cqe, 0, 0))
			goto busy;
		return BLK_STS_OK;
	}
	sg_init_one(&req->cmd_sg, cmd, sizeof(*cmd));
	if (kdat_sgl_map(ctrl->ia, &req->cmd_sgl, &req->cmd_sg, 1, DMA_TO_DEVICE))
		return BLK_STS_RESOURCE;
	req->mapped = true;
	if (cmd->opcode == KBLK_OP_READ || cmd->opcode == KBLK_OP_WRITE) {
		if (kdat_sgl_map(ctrl->ia, &req->data, &req->sg[1], n, rq_dma_dir(rq)))
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
	struct kblk_req *req = blk_mq_rq_to_pdu(rq);

	if (req->status)
		trace_kdat_blk_io_error(dev_name(&req->q->ctrl->dev), req->q->qid, rq->tag,
					req->cmd.opcode, blk_rq_pos(rq), blk_rq_bytes(rq),
					blk_status_to_errno(req->status));
	blk_mq_end_request(rq, req->status);
}

static enum blk_eh_timer_return kblk_timeout(struct request *rq)
{
	struct kblk_queue *q = rq->mq_hctx->driver_data;

	pr_warn_ratelimited("kdat_blk: %s: request %u timed out: resetting the connection\n",
			    dev_name(&q->ctrl->dev), rq->tag);
	kblk_error(q->ctrl);
	return BLK_EH_RESET_TIMER;
}

static int kblk_init_hctx(struct blk_mq_hw_ctx *hctx, void *data, unsigned int hctx_idx)
{
	struct kblk_ctrl *ctrl = data;

	hctx->driver_data = &ctrl->queues[hctx_idx];
	return 0;
}

static int kblk_init_request(struct blk_mq_tag_set *set, struct request *rq,
			     unsigned int hctx_idx, unsigned int numa_node)
{
	struct kblk_req *req = blk_mq_rq_to_pdu(rq);
	struct kblk_ctrl *ctrl = set->driver_data;

	req->q = &ctrl->queues[hctx_idx];
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
	struct kblk_ctrl *ctrl = q->ctrl;
	u32 i;

	lockdep_assert_held(&ctrl->lock);
	WRITE_ONCE(q->live, false);
	if (q->ep)
		kdat_ep_free(q->ep);	/* every posted request's callback has run */
	q->ep = NULL;
	if (q->evd)
		kdat_evd_free(q->evd);	/* a queued event work finds no EVD */
	q->evd = NULL;
	for (i = 0; q->rsps && i < ctrl->opts.queue_depth; i++)
		if (q->rsps[i].sgl.nents)
			kdat_sgl_unmap(ctrl->ia, &q->rsps[i].sgl);
	kfree(q->rsps);
	q->rsps = NULL;
	for (i = 0; q->mrs && i < ctrl->opts.queue_depth; i++)
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
	struct kblk_ctrl *ctrl = q->ctrl;
	u16 depth = ctrl->opts.queue_depth;
	struct kdat_ep_attr attr = {
		/* per request: a registration, the command and perhaps an invalidate */
		.max_request_dtos = 3 * depth + 2, .max_recv_dtos = depth + 1,
		/* an inline write: the command and its data's segments */
		.max_request_iov = 1 + KBLK_INLINE_MAX_SEGS, .max_recv_iov = 1,
		.max_rdma_read_in = 16, .max_rdma_read_out = 0,
		.retry_count = 7, .rnr_retry_count = 7,
	};
	u32 i;

	lockdep_assert_held(&ctrl->lock);
	q->mrs = kcalloc(depth, sizeof(*q->mrs), GFP_KERNEL);
	q->rsps = kcalloc(depth, sizeof(*q->rsps), GFP_KERNEL);
	if (!q->mrs || !q->rsps)
		return -ENOMEM;
	if (kdat_evd_create(ctrl->ia, 16, KDAT_EVD_FLAGS_ALL, queue_event, q, &q->evd) ||
	    kdat_ep_create(ctrl->ia, q->evd, q->evd, q->evd, &attr, &q->ep))
		return -ENOMEM;
	for (i = 0; i < depth; i++) {
		struct kblk_rsp_buf *b = &q->rsps[i];

		if (kdat_mr_alloc(ctrl->ia, KBLK_MR_PAGES, &q->mrs[i]))
			return -ENOMEM;
		b->q = q;
		b->cqe.done = rsp_received;
		sg_init_one(&b->sg, &b->rsp, sizeof(b->rsp));
		if (kdat_sgl_map(ctrl->ia, &b->sgl, &b->sg, 1, DMA_FROM_DEVICE) ||
		    kdat_ep_post_recv_sgl(q->ep, &b->sgl, &b->cqe))
			return -EIO;
	}
	return 0;
}

static u16 addr_port(const struct sockaddr_storage *ss)
{
	return ss->ss_family == AF_INET6 ? ntohs(((const struct sockaddr_in6 *)ss)->sin6_port) :
					   ntohs(((const struct sockaddr_in *)ss)->sin_port);
}

static int queue_connect(struct kblk_queue *q)
{
	struct kblk_ctrl *ctrl = q->ctrl;
	struct kblk_connect req = {
		.magic = cpu_to_le32(KBLK_MAGIC), .version = cpu_to_le16(KBLK_VERSION),
		.qid = cpu_to_le16(q->qid), .queue_depth = cpu_to_le16(ctrl->opts.queue_depth),
		.nr_queues = cpu_to_le16(ctrl->tag_set.nr_hw_queues),
		.ctrl_id = cpu_to_le64(ctrl->ctrl_id),
	};

	memcpy(req.hostid, &ctrl->opts.hostid, sizeof(req.hostid));

	return kdat_ep_connect(q->ep, (struct sockaddr *)&ctrl->opts.addr,
			       addr_port(&ctrl->opts.addr), KBLK_CONNECT_TIMEOUT_US, &req,
			       sizeof(req), KDAT_DAT_QOS_BEST_EFFORT,
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
static void all_queues_teardown(struct kblk_ctrl *ctrl)
{
	u32 i;

	lockdep_assert_held(&ctrl->lock);
	for (i = 0; i < ctrl->tag_set.nr_hw_queues; i++)
		queue_teardown(&ctrl->queues[i]);
	atomic_set(&ctrl->reset_requested, 0);
	/* unmapped while their IA is open */
	if (ctrl->tag_set_ready)
		blk_mq_tagset_busy_iter(&ctrl->tag_set, requeue_one, NULL);
	if (ctrl->ia)
		kdat_ia_close(ctrl->ia, KDAT_IA_CLOSE_ABRUPT);
	ctrl->ia = NULL;
}

/*
 * The local address the route to the target leaves from: the IA is opened
 * on it, so the RDMA device is the one that reaches the target.
 */
static int route_source(struct net *net, const struct sockaddr_storage *dst, char *name,
			size_t size)
{
	if (dst->ss_family == AF_INET) {
		struct flowi4 fl4 = { .daddr = ((const struct sockaddr_in *)dst)->sin_addr.s_addr };
		struct rtable *rt = ip_route_output_key(net, &fl4);

		if (IS_ERR(rt))
			return PTR_ERR(rt);
		ip_rt_put(rt);
		snprintf(name, size, "%pI4", &fl4.saddr);
		return 0;
	}
	if (IS_ENABLED(CONFIG_IPV6) && dst->ss_family == AF_INET6) {
		struct flowi6 fl6 = { .daddr = ((const struct sockaddr_in6 *)dst)->sin6_addr };
		struct dst_entry *d;
		int ret;

		fl6.flowi6_oif = ((const struct sockaddr_in6 *)dst)->sin6_scope_id;
		ret = ip6_dst_lookup(net, NULL, &d, &fl6);
		if (ret)
			return ret;
		dst_release(d);
		snprintf(name, size, "%pI6c", &fl6.saddr);
		return 0;
	}
	return -EAFNOSUPPORT;
}

/* A fresh IA, every queue's EP and buffers, and their connects (the events say how they end). */
static void kblk_connect_work(struct work_struct *work)
{
	struct kblk_ctrl *ctrl = container_of(to_delayed_work(work), struct kblk_ctrl,
					      connect_work);
	u32 i;

	mutex_lock(&ctrl->lock);
	if (ctrl->state != KBLK_CONNECTING)
		goto out;
	/* the route may have changed since the last attempt */
	if (!ctrl->opts.ia_given &&
	    route_source(ctrl->net, &ctrl->opts.addr, ctrl->opts.ia_name,
			 sizeof(ctrl->opts.ia_name)))
		goto failed;
	if (kdat_ia_open_flags(ctrl->net, ctrl->opts.ia_name, KDAT_IA_PDATA_RAW, &ctrl->ia)) {
		ctrl->ia = NULL;
		goto failed;
	}
	for (i = 0; i < ctrl->tag_set.nr_hw_queues; i++)
		if (queue_setup(&ctrl->queues[i]) || queue_connect(&ctrl->queues[i]))
			goto failed;
out:
	mutex_unlock(&ctrl->lock);
	return;
failed:
	set_state(ctrl, KBLK_RESETTING);
	mutex_unlock(&ctrl->lock);
	kblk_error(ctrl);
}

/* Every queue is ESTABLISHED: dispatch again. */
static void kblk_live(struct kblk_ctrl *ctrl)
{
	lockdep_assert_held(&ctrl->lock);
	set_state(ctrl, KBLK_LIVE);
	if (ctrl->lost_at) {
		ctrl->last_resume_ms = jiffies_to_msecs(jiffies - ctrl->lost_at);
		ctrl->reconnects++;
		pr_info("kdat_blk: %s: connected again after %u ms\n", dev_name(&ctrl->dev),
			ctrl->last_resume_ms);
	}
	ctrl->lost_at = 0;
	complete_all(&ctrl->first_live);
	kblk_unquiesce(ctrl);
}

static bool accept_ok(struct kblk_ctrl *ctrl, const struct kdat_event_info *ev,
		      struct kblk_queue *q)
{
	const struct kblk_accept *acc = (const void *)ev->private_data;

	lockdep_assert_held(&ctrl->lock);
	if (ev->private_data_size < sizeof(*acc) || le32_to_cpu(acc->magic) != KBLK_MAGIC ||
	    le16_to_cpu(acc->version) != KBLK_VERSION || !le64_to_cpu(acc->capacity) ||
	    le32_to_cpu(acc->max_io_bytes) < PAGE_SIZE) {
		pr_err("kdat_blk: %s: queue %u: the peer is not a kdat_blkt target of version %d\n",
		       dev_name(&ctrl->dev), q->qid, KBLK_VERSION);
		return false;
	}
	if (q->qid == 0) {
		if (ctrl->disk &&
		    le64_to_cpu(acc->capacity) != le64_to_cpu(ctrl->target_dev.capacity)) {
			pr_info("kdat_blk: %s: the target's device is now %llu sectors\n",
				dev_name(&ctrl->dev), (unsigned long long)le64_to_cpu(acc->capacity));
			set_capacity_and_notify(ctrl->disk, le64_to_cpu(acc->capacity));
		}
		ctrl->target_dev = *acc;
	}
	q->inline_write_bytes = le16_to_cpu(acc->flags) & KBLK_F_INLINE_WRITE ?
		min_t(u32, le32_to_cpu(acc->inline_write_bytes), KBLK_INLINE_WRITE_BYTES) : 0;
	return true;
}

static void kblk_event_work(struct work_struct *work)
{
	struct kblk_queue *q = container_of(work, struct kblk_queue, event_work);
	struct kblk_ctrl *ctrl = q->ctrl;
	struct kdat_event_info *ev = kmalloc(sizeof(*ev), GFP_KERNEL);
	bool ended = false;
	u32 i, live = 0;

	if (!ev) {
		kblk_error(ctrl);
		return;
	}
	mutex_lock(&ctrl->lock);
	while (q->evd && !kdat_evd_dequeue(q->evd, ev, NULL)) {
		if (ev->number == KDAT_DAT_DTO_COMPLETION_EVENT)
			continue;
		if (ev->number == KDAT_DAT_CONNECTION_EVENT_ESTABLISHED && accept_ok(ctrl, ev, q)) {
			WRITE_ONCE(q->live, true);
			continue;
		}
		if (ev->number == KDAT_DAT_CONNECTION_EVENT_PEER_REJECTED) {
			const struct kblk_reject *rej = (const void *)ev->private_data;

			u32 reason = ev->private_data_size >= sizeof(*rej) &&
				     le32_to_cpu(rej->magic) == KBLK_MAGIC ?
				     le32_to_cpu(rej->reason) : 0;

			/* reason 0: refused by the CM or by a peer that is no target */
			trace_kdat_blk_refused(dev_name(&ctrl->dev), q->qid, reason);
			if (reason)
				pr_err("kdat_blk: %s: queue %u: the target refused it: %s (reason %u)\n",
				       dev_name(&ctrl->dev), q->qid, kblk_reject_reason(reason),
				       reason);
		}
		ended = true;	/* refused, unreachable, timed out, disconnected, broken */
	}
	kfree(ev);
	if (ended && ctrl->state == KBLK_DELETING) {
		kblk_error(ctrl);	/* what is in flight fails now, not at its timeout */
	} else if (ended && (ctrl->state == KBLK_LIVE || ctrl->state == KBLK_CONNECTING)) {
		set_state(ctrl, KBLK_RESETTING);
		kblk_error(ctrl);
	} else if (ctrl->state == KBLK_CONNECTING) {
		for (i = 0; i < ctrl->tag_set.nr_hw_queues; i++)
			live += READ_ONCE(ctrl->queues[i].live);
		if (live == ctrl->tag_set.nr_hw_queues)
			kblk_live(ctrl);
	}
	mutex_unlock(&ctrl->lock);
}

/*
 * A connection ended: stop dispatch, tear every queue down (their callbacks
 * have all run once their EPs are freed), put what was in flight back on the
 * requeue list, and reconnect -- or, past ctrl_loss_tmo or when deleting,
 * fail the I/O.
 */
static void kblk_err_work(struct work_struct *work)
{
	struct kblk_ctrl *ctrl = container_of(work, struct kblk_ctrl, err_work);
	int tmo = READ_ONCE(ctrl->opts.ctrl_loss_tmo);
	bool deleting, give_up;

	mutex_lock(&ctrl->lock);
	deleting = ctrl->state == KBLK_DELETING;
	/* a request from callbacks of EPs an earlier reset freed is stale */
	if (!deleting && ctrl->state != KBLK_RESETTING &&
	    (ctrl->state == KBLK_DEAD || !atomic_xchg(&ctrl->reset_requested, 0))) {
		mutex_unlock(&ctrl->lock);
		return;
	}
	set_state(ctrl, deleting ? KBLK_DELETING : KBLK_RESETTING);
	if (!ctrl->lost_at && ctrl->disk && !deleting) {
		ctrl->lost_at = jiffies;
		ctrl->resets++;
		ctrl->retry_ms = KBLK_FIRST_RETRY_MS;
		pr_info("kdat_blk: %s: connection lost: reconnecting (for %d s at most)\n",
			dev_name(&ctrl->dev), tmo);
	}
	kblk_quiesce(ctrl);
	all_queues_teardown(ctrl);
	/* no device yet: the first connection failed, and the connect with it */
	give_up = deleting || !ctrl->disk ||
		  (tmo >= 0 && time_after_eq(jiffies, ctrl->lost_at + (unsigned long)tmo * HZ));
	if (give_up) {
		if (!deleting) {
			if (ctrl->disk)
				pr_err("kdat_blk: %s: no connection for %lu s (ctrl_loss_tmo %d): failing I/O\n",
				       dev_name(&ctrl->dev), (jiffies - ctrl->lost_at) / HZ, tmo);
			set_state(ctrl, KBLK_DEAD);
		}
		WRITE_ONCE(ctrl->fail_io, true);
		complete_all(&ctrl->first_live);
		kblk_unquiesce(ctrl);
	} else {
		set_state(ctrl, KBLK_CONNECTING);
		/*
		 * A restarted target is back within seconds: try soon, then less
		 * often (each attempt opens an IA and connects every queue).
		 */
		queue_delayed_work(kblk_wq, &ctrl->connect_work, msecs_to_jiffies(ctrl->retry_ms));
		if (jiffies_to_msecs(jiffies - ctrl->lost_at) >= KBLK_FAST_RETRY_MS)
			ctrl->retry_ms = min_t(u32, 2 * ctrl->retry_ms,
					       READ_ONCE(ctrl->opts.reconnect_delay) * MSEC_PER_SEC);
	}
	mutex_unlock(&ctrl->lock);
}

/* ---- the device --------------------------------------------------------------------- */

static int kblk_add_disk(struct kblk_ctrl *ctrl)
{
	const struct kblk_accept *td = &ctrl->target_dev;
	u32 lbs = le32_to_cpu(td->logical_block_size);
	u32 max_io = min_t(u32, le32_to_cpu(td->max_io_bytes), KBLK_MAX_IO_BYTES);
	u16 flags = le16_to_cpu(td->flags);
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
		lim.discard_granularity = max_t(u32, le32_to_cpu(td->discard_granularity), lbs);
	}
	disk = kdat_alloc_disk(&ctrl->tag_set, &lim, features, ctrl);
	if (IS_ERR(disk))
		return PTR_ERR(disk);
	strscpy(disk->disk_name, dev_name(&ctrl->dev), sizeof(disk->disk_name));
	disk->fops = &kblk_fops;
	set_capacity(disk, le64_to_cpu(td->capacity));
	mutex_lock(&ctrl->lock);
	ctrl->disk = disk;
	mutex_unlock(&ctrl->lock);
	ret = device_add_disk(&ctrl->dev, disk, NULL);
	if (ret) {
		mutex_lock(&ctrl->lock);
		ctrl->disk = NULL;
		mutex_unlock(&ctrl->lock);
		put_disk(disk);
	}
	return ret;
}

/* Tears the queues down, requeues what is in flight and fails it from now on. */
static void kblk_stop(struct kblk_ctrl *ctrl)
{
	u32 i;

	mutex_lock(&ctrl->lock);
	set_state(ctrl, KBLK_DELETING);
	mutex_unlock(&ctrl->lock);
	cancel_delayed_work_sync(&ctrl->connect_work);
	kblk_err_work(&ctrl->err_work);
	cancel_work_sync(&ctrl->err_work);
	for (i = 0; i < ctrl->tag_set.nr_hw_queues; i++)
		cancel_work_sync(&ctrl->queues[i].event_work);
}

/*
 * Removes a controller made by kblk_create() (not on the list any more):
 * I/O in flight while connected completes; while reconnecting, it fails.
 */
static void kblk_delete(struct kblk_ctrl *ctrl)
{
	mutex_lock(&ctrl->lock);
	if (ctrl->state != KBLK_LIVE)
		WRITE_ONCE(ctrl->fail_io, true);
	set_state(ctrl, KBLK_DELETING);
	kblk_unquiesce(ctrl);
	mutex_unlock(&ctrl->lock);
	cancel_delayed_work_sync(&ctrl->connect_work);
	del_gendisk(ctrl->disk);
	kblk_stop(ctrl);
	pr_info("kdat_blk: %s: deleted\n", dev_name(&ctrl->dev));
	put_disk(ctrl->disk);
	blk_mq_free_tag_set(&ctrl->tag_set);
	device_unregister(&ctrl->dev);
}

/* Takes a controller off the list: whoever does, deletes it. */
static bool kblk_claim(struct kblk_ctrl *ctrl)
{
	bool mine;

	mutex_lock(&kblk_ctrls_lock);
	mine = !list_empty(&ctrl->node);
	list_del_init(&ctrl->node);
	mutex_unlock(&kblk_ctrls_lock);
	return mine;
}

/* ---- sysfs: /sys/class/kdat-blk/kdatbN ------------------------------------------------ */

static struct kblk_ctrl *to_ctrl(struct device *dev)
{
	return container_of(dev, struct kblk_ctrl, dev);
}

static ssize_t state_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%s\n", state_names[READ_ONCE(to_ctrl(dev)->state)]);
}
static DEVICE_ATTR_RO(state);

static ssize_t address_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct kblk_ctrl *ctrl = to_ctrl(dev);

	return sysfs_emit(buf, "target=%pISc,port=%u\n", &ctrl->opts.addr,
			  addr_port(&ctrl->opts.addr));
}
static DEVICE_ATTR_RO(address);

static ssize_t hostid_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%pUb\n", &to_ctrl(dev)->opts.hostid);
}
static DEVICE_ATTR_RO(hostid);

static ssize_t local_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct kblk_ctrl *ctrl = to_ctrl(dev);
	ssize_t n;

	mutex_lock(&ctrl->lock);
	n = sysfs_emit(buf, "%s\n", ctrl->opts.ia_name);
	mutex_unlock(&ctrl->lock);
	return n;
}
static DEVICE_ATTR_RO(local);

#define KBLK_U32_ATTR(field)								\
static ssize_t field##_show(struct device *dev, struct device_attribute *attr, char *buf)	\
{											\
	return sysfs_emit(buf, "%u\n", READ_ONCE(to_ctrl(dev)->field));			\
}											\
static DEVICE_ATTR_RO(field)

KBLK_U32_ATTR(resets);
KBLK_U32_ATTR(reconnects);
KBLK_U32_ATTR(last_resume_ms);

static ssize_t queues_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%u\n", to_ctrl(dev)->tag_set.nr_hw_queues);
}
static DEVICE_ATTR_RO(queues);

static ssize_t queue_depth_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%u\n", to_ctrl(dev)->opts.queue_depth);
}
static DEVICE_ATTR_RO(queue_depth);

/*
 * Writable while the controller runs: an outage in progress is judged by the
 * new value at its next failed attempt (-1 rides out a target whose boot
 * takes as long as it takes; 0 gives up on a target known to be gone, which
 * lets the I/O fail and the device close without waiting out the old value).
 */
static ssize_t ctrl_loss_tmo_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%d\n", READ_ONCE(to_ctrl(dev)->opts.ctrl_loss_tmo));
}

static ssize_t ctrl_loss_tmo_store(struct device *dev, struct device_attribute *attr,
				   const char *buf, size_t count)
{
	int tmo, ret = kstrtoint(buf, 0, &tmo);

	if (ret || tmo < -1) {
		dev_err(dev, "ctrl_loss_tmo=%.*s: -1 (for ever) or more seconds\n",
			(int)strcspn(buf, "\n"), buf);
		return -EINVAL;
	}
	WRITE_ONCE(to_ctrl(dev)->opts.ctrl_loss_tmo, tmo);
	return count;
}
static DEVICE_ATTR_RW(ctrl_loss_tmo);

static ssize_t reconnect_delay_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%d\n", READ_ONCE(to_ctrl(dev)->opts.reconnect_delay));
}

static ssize_t reconnect_delay_store(struct device *dev, struct device_attribute *attr,
				     const char *buf, size_t count)
{
	int delay, ret = kstrtoint(buf, 0, &delay);

	if (ret || delay < 1 || delay > 3600) {
		dev_err(dev, "reconnect_delay=%.*s: 1-3600 seconds\n",
			(int)strcspn(buf, "\n"), buf);
		return -EINVAL;
	}
	WRITE_ONCE(to_ctrl(dev)->opts.reconnect_delay, delay);
	return count;
}
static DEVICE_ATTR_RW(reconnect_delay);

static ssize_t delete_controller_store(struct device *dev, struct device_attribute *attr,
				       const char *buf, size_t count)
{
	struct kblk_ctrl *ctrl = to_ctrl(dev);

	/* an unload meanwhile would find the controller gone from the list and free what it uses */
	if (!try_module_get(THIS_MODULE))
		return -ENODEV;
	/* the attribute goes first: kblk_delete() waits for no store of its own */
	get_device(dev);
	if (device_remove_file_self(dev, attr) && kblk_claim(ctrl))
		kblk_delete(ctrl);
	put_device(dev);
	module_put(THIS_MODULE);
	return count;
}
static DEVICE_ATTR_WO(delete_controller);

static struct attribute *kblk_ctrl_attrs[] = {
	&dev_attr_state.attr,
	&dev_attr_address.attr,
	&dev_attr_local.attr,
	&dev_attr_hostid.attr,
	&dev_attr_queues.attr,
	&dev_attr_queue_depth.attr,
	&dev_attr_resets.attr,
	&dev_attr_reconnects.attr,
	&dev_attr_last_resume_ms.attr,
	&dev_attr_ctrl_loss_tmo.attr,
	&dev_attr_reconnect_delay.attr,
	&dev_attr_delete_controller.attr,
	NULL
};
ATTRIBUTE_GROUPS(kblk_ctrl);

static void kblk_ctrl_release(struct device *dev)
{
	struct kblk_ctrl *ctrl = to_ctrl(dev);

	if (ctrl->net)
		put_net(ctrl->net);
	ida_free(&kblk_instances, ctrl->instance);
	kfree(ctrl->queues);
	kfree(ctrl);
}

static struct class kblk_class = {
	.name = "kdat-blk",
	.dev_groups = kblk_ctrl_groups,
};

/* ---- making a controller: /dev/kdat-blk ------------------------------------------------ */

enum {
	OPT_TARGET, OPT_PORT, OPT_NR_QUEUES, OPT_QUEUE_DEPTH, OPT_CTRL_LOSS_TMO,
	OPT_RECONNECT_DELAY, OPT_IO_TIMEOUT, OPT_IA_NAME, OPT_HOSTID, OPT_ERR,
};

static const match_table_t kblk_opt_tokens = {
	{ OPT_TARGET, "target=%s" },
	{ OPT_PORT, "port=%d" },
	{ OPT_NR_QUEUES, "nr_queues=%d" },
	{ OPT_QUEUE_DEPTH, "queue_depth=%d" },
	{ OPT_CTRL_LOSS_TMO, "ctrl_loss_tmo=%d" },
	{ OPT_RECONNECT_DELAY, "reconnect_delay=%d" },
	{ OPT_IO_TIMEOUT, "io_timeout=%d" },
	{ OPT_IA_NAME, "ia_name=%s" },
	{ OPT_HOSTID, "hostid=%s" },
	{ OPT_ERR, NULL },
};

/* The target's address, IPv4 or IPv6 (an IPv6 one may name its interface: fe80::1%eth0). */
static int parse_target(struct net *net, const char *s, struct sockaddr_storage *ss)
{
	return inet_pton_with_scope(net, AF_UNSPEC, s, NULL, ss);
}

/* Parses an option string into opts; what is wrong is named in the log. */
static int parse_options(struct net *net, char *options, struct kblk_opts *opts)
{
	substring_t args[MAX_OPT_ARGS];
	bool have_target = false;
	int port = 0, value, token;
	char *p, *arg;

	*opts = (struct kblk_opts){
		.queue_depth = 32, .ctrl_loss_tmo = 60, .reconnect_delay = 1, .io_timeout = 30,
		.nr_queues = min_t(u32, num_online_cpus(), KBLK_MAX_QUEUES),
		.hostid = kblk_default_hostid,
	};
	while ((p = strsep(&options, ",\n")) != NULL) {
		if (!*p)
			continue;
		token = match_token(p, kblk_opt_tokens, args);
		if (token == OPT_TARGET || token == OPT_IA_NAME || token == OPT_HOSTID) {
			arg = match_strdup(args);
			if (!arg)
				return -ENOMEM;
			if (token == OPT_TARGET && parse_target(net, arg, &opts->addr)) {
				pr_err("kdat_blk: target=%s: give the target's IPv4 or IPv6 address\n",
				       arg);
				kfree(arg);
				return -EINVAL;
			}
			if (token == OPT_IA_NAME &&
			    strscpy(opts->ia_name, arg, sizeof(opts->ia_name)) < 0) {
				pr_err("kdat_blk: ia_name=%s: a netdev or a local address\n", arg);
				kfree(arg);
				return -EINVAL;
			}
			if (token == OPT_HOSTID && uuid_parse(arg, &opts->hostid)) {
				pr_err("kdat_blk: hostid=%s: a UUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)\n",
				       arg);
				kfree(arg);
				return -EINVAL;
			}
			have_target |= token == OPT_TARGET;
			opts->ia_given |= token == OPT_IA_NAME;
			kfree(arg);
			continue;
		}
		if (token == OPT_ERR || match_int(args, &value)) {
			pr_err("kdat_blk: %s: not an option of kdat_blk (target=, port=, nr_queues=, queue_depth=, ctrl_loss_tmo=, reconnect_delay=, io_timeout=, ia_name=, hostid=)\n",
			       p);
			return -EINVAL;
		}
		switch (token) {
		case OPT_PORT:
			port = value;
			break;
		case OPT_NR_QUEUES:
			if (value < 0 || value > KBLK_MAX_QUEUES) {
				pr_err("kdat_blk: nr_queues=%d: 1-%d, or 0 for one per online CPU\n",
				       value, KBLK_MAX_QUEUES);
				return -EINVAL;
			}
			if (value)
				opts->nr_queues = value;
			break;
		case OPT_QUEUE_DEPTH:
			if (value < 1 || value > KBLK_MAX_QUEUE_DEPTH) {
				pr_err("kdat_blk: queue_depth=%d: 1-%d\n", value,
				       KBLK_MAX_QUEUE_DEPTH);
				return -EINVAL;
			}
			opts->queue_depth = value;
			break;
		case OPT_CTRL_LOSS_TMO:
			if (value < -1) {
				pr_err("kdat_blk: ctrl_loss_tmo=%d: -1 (for ever) or more seconds\n",
				       value);
				return -EINVAL;
			}
			opts->ctrl_loss_tmo = value;
			break;
		case OPT_RECONNECT_DELAY:
			if (value < 1 || value > 3600) {
				pr_err("kdat_blk: reconnect_delay=%d: 1-3600 seconds\n", value);
				return -EINVAL;
			}
			opts->reconnect_delay = value;
			break;
		case OPT_IO_TIMEOUT:
			if (value < 1) {
				pr_err("kdat_blk: io_timeout=%d: 1 or more seconds\n", value);
				return -EINVAL;
			}
			opts->io_timeout = value;
			break;
		}
	}
	if (!have_target) {
		pr_err("kdat_blk: target=: give the target's IPv4 or IPv6 address\n");
		return -EINVAL;
	}
	if (port <= 0 || port > 65535) {
		pr_err("kdat_blk: port=%d: give the target's port (1-65535)\n", port);
		return -EINVAL;
	}
	if (opts->addr.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&opts->addr)->sin6_port = htons(port);
	else
		((struct sockaddr_in *)&opts->addr)->sin_port = htons(port);
	return 0;
}

/* Connects a controller and adds its disk; returns it listed, or an error. */
static struct kblk_ctrl *kblk_create(char *options)
{
	struct net *net = current->nsproxy->net_ns;
	struct kblk_ctrl *ctrl = kzalloc(sizeof(*ctrl), GFP_KERNEL);
	u32 i;
	int ret;

	if (!ctrl)
		return ERR_PTR(-ENOMEM);
	ret = parse_options(net, options, &ctrl->opts);
	if (ret) {
		kfree(ctrl);
		return ERR_PTR(ret);
	}
	ret = ida_alloc(&kblk_instances, GFP_KERNEL);
	if (ret < 0) {
		kfree(ctrl);
		return ERR_PTR(ret);
	}
	ctrl->instance = ret;
	ctrl->ctrl_id = get_random_u64();
	ctrl->net = get_net(net);
	INIT_LIST_HEAD(&ctrl->node);
	mutex_init(&ctrl->lock);
	init_completion(&ctrl->first_live);
	INIT_WORK(&ctrl->err_work, kblk_err_work);
	INIT_DELAYED_WORK(&ctrl->connect_work, kblk_connect_work);
	device_initialize(&ctrl->dev);
	ctrl->dev.class = &kblk_class;
	ctrl->dev.release = kblk_ctrl_release;
	/* from here the device's release frees the controller */
	ret = dev_set_name(&ctrl->dev, "kdatb%d", ctrl->instance);
	if (ret)
		goto put;
	ctrl->queues = kcalloc(ctrl->opts.nr_queues, sizeof(*ctrl->queues), GFP_KERNEL);
	if (!ctrl->queues) {
		ret = -ENOMEM;
		goto put;
	}
	for (i = 0; i < ctrl->opts.nr_queues; i++) {
		ctrl->queues[i].ctrl = ctrl;
		ctrl->queues[i].qid = i;
		INIT_WORK(&ctrl->queues[i].event_work, kblk_event_work);
	}
	ctrl->tag_set.ops = &kblk_mq_ops;
	ctrl->tag_set.nr_hw_queues = ctrl->opts.nr_queues;
	ctrl->tag_set.queue_depth = ctrl->opts.queue_depth;
	ctrl->tag_set.numa_node = NUMA_NO_NODE;
	ctrl->tag_set.cmd_size = sizeof(struct kblk_req);
	ctrl->tag_set.timeout = ctrl->opts.io_timeout * HZ;
	ctrl->tag_set.driver_data = ctrl;
	ret = blk_mq_alloc_tag_set(&ctrl->tag_set);
	if (ret)
		goto put;
	ctrl->tag_set_ready = true;
	ret = device_add(&ctrl->dev);
	if (ret)
		goto tag_set;
	/* the first connection, synchronously (the controller starts connecting): the size comes with it */
	kblk_connect_work(&ctrl->connect_work.work);
	wait_for_completion_timeout(&ctrl->first_live, 2 * KBLK_CONNECT_TIMEOUT_US / 1000000 * HZ);
	mutex_lock(&ctrl->lock);
	if (ctrl->state != KBLK_LIVE) {
		mutex_unlock(&ctrl->lock);
		pr_err("kdat_blk: cannot connect to %pISc port %u through %s\n", &ctrl->opts.addr,
		       addr_port(&ctrl->opts.addr), ctrl->opts.ia_name[0] ? ctrl->opts.ia_name :
		       "the route's device (there is no route)");
		ret = -ENOTCONN;
		goto stop;
	}
	mutex_unlock(&ctrl->lock);
	ret = kblk_add_disk(ctrl);
	if (ret)
		goto stop;
	mutex_lock(&kblk_ctrls_lock);
	list_add_tail(&ctrl->node, &kblk_ctrls);
	mutex_unlock(&kblk_ctrls_lock);
	pr_info("kdat_blk: %s: %llu sectors on %pISc port %u through %s, %u queues of %u\n",
		ctrl->disk->disk_name, (unsigned long long)get_capacity(ctrl->disk),
		&ctrl->opts.addr, addr_port(&ctrl->opts.addr), ctrl->opts.ia_name,
		ctrl->tag_set.nr_hw_queues, ctrl->opts.queue_depth);
	return ctrl;
stop:
	kblk_stop(ctrl);
	device_del(&ctrl->dev);
tag_set:
	blk_mq_free_tag_set(&ctrl->tag_set);
put:
	put_device(&ctrl->dev);
	return ERR_PTR(ret);
}

/* An open /dev/kdat-blk: one controller made per open file, named by a read. */
struct kblk_file {
	struct mutex lock;
	int instance;			/* -1 until a write made one */
};

static int kblk_dev_open(struct inode *inode, struct file *file)
{
	struct kblk_file *f = kzalloc(sizeof(*f), GFP_KERNEL);

	if (!f)
		return -ENOMEM;
	mutex_init(&f->lock);
	f->instance = -1;
	file->private_data = f;
	return 0;
}

static int kblk_dev_release(struct inode *inode, struct file *file)
{
	kfree(file->private_data);
	return 0;
}

static ssize_t kblk_dev_write(struct file *file, const char __user *ubuf, size_t count,
			      loff_t *pos)
{
	struct kblk_file *f = file->private_data;
	struct kblk_ctrl *ctrl;
	char *options;
	ssize_t ret = count;

	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	if (count > KBLK_MAX_OPTIONS) {
		pr_err("kdat_blk: an option string of %zu bytes: at most %d\n", count,
		       KBLK_MAX_OPTIONS);
		return -EINVAL;
	}
	options = memdup_user_nul(ubuf, count);
	if (IS_ERR(options))
		return PTR_ERR(options);
	mutex_lock(&f->lock);
	if (f->instance >= 0) {
		pr_err("kdat_blk: one controller per open of /dev/kdat-blk\n");
		ret = -EINVAL;
		goto out;
	}
	ctrl = kblk_create(options);
	if (IS_ERR(ctrl))
		ret = PTR_ERR(ctrl);
	else
		f->instance = ctrl->instance;
out:
	mutex_unlock(&f->lock);
	kfree(options);
	return ret;
}

static ssize_t kblk_dev_read(struct file *file, char __user *ubuf, size_t count, loff_t *pos)
{
	struct kblk_file *f = file->private_data;
	char buf[64];
	int n;

	mutex_lock(&f->lock);
	n = f->instance < 0 ? 0 :
		scnprintf(buf, sizeof(buf), "instance=%d,name=kdatb%d\n", f->instance,
			  f->instance);
	mutex_unlock(&f->lock);
	if (!n)
		return -EINVAL;		/* nothing made yet */
	return simple_read_from_buffer(ubuf, count, pos, buf, n);
}

static const struct file_operations kblk_dev_fops = {
	.owner = THIS_MODULE,
	.open = kblk_dev_open,
	.release = kblk_dev_release,
	.write = kblk_dev_write,
	.read = kblk_dev_read,
};

static struct miscdevice kblk_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "kdat-blk",
	.fops = &kblk_dev_fops,
	.mode = 0600,
};

static int __init kblk_init(void)
{
	int ret;

	uuid_gen(&kblk_default_hostid);
	kblk_wq = alloc_workqueue("kdat_blk", WQ_MEM_RECLAIM, 0);
	if (!kblk_wq)
		return -ENOMEM;
	ret = class_register(&kblk_class);
	if (ret)
		goto wq;
	ret = misc_register(&kblk_misc);
	if (ret)
		goto class;
	return 0;
class:
	class_unregister(&kblk_class);
wq:
	destroy_workqueue(kblk_wq);
	return ret;
}

static void __exit kblk_exit(void)
{
	struct kblk_ctrl *ctrl;

	/* no new controllers; those there are go, each I/O in flight completing or failing */
	misc_deregister(&kblk_misc);
	for (;;) {
		mutex_lock(&kblk_ctrls_lock);
		ctrl = list_first_entry_or_null(&kblk_ctrls, struct kblk_ctrl, node);
		if (ctrl)
			list_del_init(&ctrl->node);
		mutex_unlock(&kblk_ctrls_lock);
		if (!ctrl)
			break;
		kblk_delete(ctrl);
	}
	class_unregister(&kblk_class);
	destroy_workqueue(kblk_wq);
}

module_init(kblk_init);
module_exit(kblk_exit);
MODULE_DESCRIPTION("kdat block initiator: blk-mq devices served by kdat_blkt targets over RDMA");
MODULE_LICENSE("GPL");
