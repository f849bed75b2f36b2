// SPDX-License-Identifier: GPL-2.0
/*
 * kdat_echo: a kernel consumer of kdat that uses nothing but
 * include/kdat/kdat.h, the way a storage driver would.
 *
 * Server (listen_port=N): listens on the IA, accepts every request on a fresh
 * EP with private data "echo:" + the requester's, and frees each EP once its
 * connection is gone.  Client (connect_addr=IP connect_port=N): connects at
 * load time with private data `pdata`, records the outcome and the peer's
 * accept data, and disconnects gracefully once established.
 * With data=1 the two exchange data once connected: the client binds an RMR
 * over a buffer and sends its address and key; the server RDMA-writes a
 * pattern into it, RDMA-reads it back, checks it and sends "done"; the client
 * checks its buffer and disconnects gracefully.
 * With flush_test=1 the client pre-posts receives once connected and
 * disconnects abruptly: they must all complete as flushed before its
 * DISCONNECTED event (dat_ep_disconnect(3DAT)), and a send afterwards must be
 * refused.
 * With graceful_test=1 the client sends to a server EP that has no receive
 * posted (RNR: the send stays in flight), disconnects gracefully and records
 * what dat_ep_disconnect(3DAT) says of DISCONNECT_PENDING: the state, a
 * refused send, a second graceful call that changes nothing, and an abrupt
 * call that ends it with the pending send flushed before DISCONNECTED.
 * With pending_test=1 the client stays connected and idle until a test
 * writes "graceful" to pending_act (after cutting the wire, say): then it
 * sends one message and disconnects gracefully at once, so the EP waits in
 * DISCONNECT_PENDING for the send, and records how the send and the
 * disconnect ended and when (pt_*).
 * With greet=1 (both sides) the server also sends a greeting as soon as its
 * EP is ESTABLISHED, and the client, which takes it in a receive of its own,
 * starts start_delay_ms after its ESTABLISHED: rdma_connect(3) says the
 * active side speaks first over iWARP, so there kdat holds the greeting until
 * the client's message arrives (or 1 s passed); greet_* and first_* say when.
 * Counters and the last outcome are read-only parameters in
 * /sys/module/kdat_echo/parameters/, for tests.
 */
#include <linux/inet.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/workqueue.h>
#include <kdat/kdat.h>

static char *ia_name = "kdat0";
module_param(ia_name, charp, 0444);
MODULE_PARM_DESC(ia_name, "netdev or IP address of the IA");
static int listen_port;
module_param(listen_port, int, 0444);
MODULE_PARM_DESC(listen_port, "serve echo on this connection qualifier (0: no server)");
static char *connect_addr = "";
module_param(connect_addr, charp, 0444);
static int connect_port;
module_param(connect_port, int, 0444);
static char *pdata = "kernel";
module_param(pdata, charp, 0444);
static bool data;
module_param(data, bool, 0444);
MODULE_PARM_DESC(data, "exchange data (send/recv, RDMA write and read) once connected");
static int verified, dto_errors, sends_done, recvs_done;
module_param(verified, int, 0444);
module_param(dto_errors, int, 0444);
/* Completed sends and receives: show where an exchange stopped. */
module_param(sends_done, int, 0444);
module_param(recvs_done, int, 0444);
/* Server: messages answered on ESTABLISHED because they came before it. */
static int late_answers;
module_param(late_answers, int, 0444);
static bool greet;
module_param(greet, bool, 0444);
MODULE_PARM_DESC(greet, "data=1: the server greets first, the client takes the greeting");
static int start_delay_ms;
module_param(start_delay_ms, int, 0444);
MODULE_PARM_DESC(start_delay_ms, "data=1 client: wait this long after ESTABLISHED before speaking");
/*
 * ms from the side's own ESTABLISHED (-1: not yet).  Server: its greeting's
 * send completed, its first receive completed.  Client: it posted its first
 * request, the greeting arrived.
 */
static int greet_sent_ms = -1, first_recv_ms = -1, first_post_ms = -1, greet_recv_ms = -1;
static int greet_status = -1;	/* server: the greeting's DTO status (-1: not completed) */
module_param(greet_status, int, 0444);
module_param(greet_sent_ms, int, 0444);
module_param(first_recv_ms, int, 0444);
module_param(first_post_ms, int, 0444);
module_param(greet_recv_ms, int, 0444);
static bool flush_test;
module_param(flush_test, bool, 0444);
static int flushed_before_disconnect, flushed_after_disconnect;
module_param(flushed_before_disconnect, int, 0444);
module_param(flushed_after_disconnect, int, 0444);
static char post_after_disconnect[16] = "none";
module_param_string(post_after_disconnect, post_after_disconnect,
		    sizeof(post_after_disconnect), 0444);
static bool graceful_test;
module_param(graceful_test, bool, 0444);
static int gt_state_after_graceful = -1, gt_state_after_second = -1, gt_state_after_abrupt = -1;
static int gt_flushed_sends;
module_param(gt_state_after_graceful, int, 0444);
module_param(gt_state_after_second, int, 0444);
module_param(gt_state_after_abrupt, int, 0444);
module_param(gt_flushed_sends, int, 0444);
static char gt_post_in_pending[16] = "none", gt_second_graceful[16] = "none";
module_param_string(gt_post_in_pending, gt_post_in_pending, sizeof(gt_post_in_pending), 0444);
module_param_string(gt_second_graceful, gt_second_graceful, sizeof(gt_second_graceful), 0444);
static bool pending_test;
module_param(pending_test, bool, 0444);
/* pt_send_status: the send's DTO status (-1: not completed); times in ms from the disconnect call */
static int pt_state_after_graceful = -1, pt_send_status = -1, pt_send_ms = -1, pt_end_ms = -1;
module_param(pt_state_after_graceful, int, 0444);
module_param(pt_send_status, int, 0444);
module_param(pt_send_ms, int, 0444);
module_param(pt_end_ms, int, 0444);
static char pt_end_event[32] = "none";
module_param_string(pt_end_event, pt_end_event, sizeof(pt_end_event), 0444);
static ktime_t pt_start;
static bool pt_started;	/* before the send: its events may come before the call returns */
#define FLUSH_RECVS	3
static u8 *flush_buf;
static struct kdat_lmr *flush_lmr;
static bool client_disconnected;

/* What tests read back. */
static int accepted, established, disconnected, rejected, failed;
module_param(accepted, int, 0444);
module_param(established, int, 0444);
module_param(disconnected, int, 0444);
module_param(rejected, int, 0444);
module_param(failed, int, 0444);
static char last_event[64] = "none";
module_param_string(last_event, last_event, sizeof(last_event), 0444);
static char peer_pdata[KDAT_PRIVATE_DATA_MAX + 1];
module_param_string(peer_pdata, peer_pdata, sizeof(peer_pdata), 0444);

#define ECHO_BUF	4096
#define ECHO_MAGIC	0x6b646174	/* "kdat" */

/* What the client sends the server: where to write. */
struct echo_msg {
	__le32 magic;
	__le32 rkey;
	__le64 addr;
	__le32 length;
	__le32 done;
	__le32 greeting;
};

/* rx and tx hold two messages: [0] the exchange's, [1] the greeting's */
enum { C_RECV = 1, C_SEND, C_WRITE, C_READ, C_BIND, C_GREET, C_GREET_RECV };

/* One connection's buffers, on either side. */
struct echo_conn {
	struct list_head node;
	struct kdat_ep *ep;
	struct echo_msg *rx, *tx;
	u8 *buf;				/* client: the RDMA target; server: pattern */
	u8 *readback;				/* server: RDMA read lands here */
	struct kdat_lmr *rx_lmr, *tx_lmr, *buf_lmr, *rb_lmr;
	struct kdat_rmr *rmr;
	struct echo_msg peer;			/* server: the client's window */
	/*
	 * Server: the client's message can complete before the EP's ESTABLISHED
	 * (its RTU is still on the way); posts wait for CONNECTED.
	 */
	bool established, write_pending;
	ktime_t established_at;
	ktime_t first_recv_at;		/* server, greet: its first receive (0: none yet) */
};

static LIST_HEAD(conns);

static struct kdat_ia *ia;
static struct kdat_evd *evd;
static struct kdat_sp *psp;
static struct kdat_ep *client_ep;
static struct work_struct event_work;
static struct delayed_work client_start_work;
static struct workqueue_struct *echo_wq;
static bool stopping;	/* set before the IA (and its EVD) goes */

static void echo_upcall(struct kdat_evd *e, void *context)
{
	queue_work(echo_wq, &event_work);
}

static const char *event_name(u32 number)
{
	switch (number) {
	case KDAT_DAT_CONNECTION_REQUEST_EVENT: return "CONNECTION_REQUEST";
	case KDAT_DAT_CONNECTION_EVENT_ESTABLISHED: return "ESTABLISHED";
	case KDAT_DAT_CONNECTION_EVENT_PEER_REJECTED: return "PEER_REJECTED";
	case KDAT_DAT_CONNECTION_EVENT_NON_PEER_REJECTED: return "NON_PEER_REJECTED";
	case KDAT_DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR: return "ACCEPT_COMPLETION_ERROR";
	case KDAT_DAT_CONNECTION_EVENT_DISCONNECTED: return "DISCONNECTED";
	case KDAT_DAT_CONNECTION_EVENT_BROKEN: return "BROKEN";
	case KDAT_DAT_CONNECTION_EVENT_TIMED_OUT: return "TIMED_OUT";
	case KDAT_DAT_CONNECTION_EVENT_UNREACHABLE: return "UNREACHABLE";
	case KDAT_DAT_DTO_COMPLETION_EVENT: return "DTO_COMPLETION";
	case KDAT_DAT_RMR_BIND_COMPLETION_EVENT: return "RMR_BIND_COMPLETION";
	default: return "OTHER";
	}
}

static u8 pattern(u32 i)
{
	return (u8)(i * 7 + 3);
}

/* ia_gone: kdat_ia_close() already freed the LMRs and RMRs with the IA. */
static void conn_release(struct echo_conn *c, bool ia_gone)
{
	list_del(&c->node);
	if (ia_gone)
		goto buffers;
	if (c->rmr)
		kdat_rmr_free(c->rmr);
	if (c->rx_lmr)
		kdat_lmr_free(c->rx_lmr);
	if (c->tx_lmr)
		kdat_lmr_free(c->tx_lmr);
	if (c->buf_lmr)
		kdat_lmr_free(c->buf_lmr);
	if (c->rb_lmr)
		kdat_lmr_free(c->rb_lmr);
buffers:
	kfree(c->rx);
	kfree(c->tx);
	kfree(c->buf);
	kfree(c->readback);
	kfree(c);
}

static void conn_free(struct echo_conn *c)
{
	conn_release(c, false);
}

/* After the IA is closed (no QP can DMA any more): the buffers themselves. */
static void conns_release_all(void)
{
	while (!list_empty(&conns))
		conn_release(list_first_entry(&conns, struct echo_conn, node), true);
}

static struct echo_conn *conn_find(struct kdat_ep *ep)
{
	struct echo_conn *c;

	list_for_each_entry(c, &conns, node)
		if (c->ep == ep)
			return c;
	return NULL;
}

/* Buffers for one connection; the server's receive is posted before it accepts. */
static struct echo_conn *conn_new(struct kdat_ep *ep, bool server)
{
	struct echo_conn *c = kzalloc(sizeof(*c), GFP_KERNEL);
	struct kdat_iov iov;
	kdat_ret_t ret = 0;
	u32 i;

	if (!c)
		return NULL;
	c->ep = ep;
	list_add(&c->node, &conns);
	c->rx = kcalloc(2, sizeof(*c->rx), GFP_KERNEL);
	c->tx = kcalloc(2, sizeof(*c->tx), GFP_KERNEL);
	c->buf = kzalloc(ECHO_BUF, GFP_KERNEL);
	c->readback = server ? kzalloc(ECHO_BUF, GFP_KERNEL) : NULL;
	if (!c->rx || !c->tx || !c->buf || (server && !c->readback))
		goto err;
	if (server)
		for (i = 0; i < ECHO_BUF; i++)
			c->buf[i] = pattern(i);
	ret = kdat_lmr_create(ia, c->rx, 2 * sizeof(*c->rx), &c->rx_lmr);
	if (!ret)
		ret = kdat_lmr_create(ia, c->tx, 2 * sizeof(*c->tx), &c->tx_lmr);
	if (!ret)
		ret = kdat_lmr_create(ia, c->buf, ECHO_BUF, &c->buf_lmr);
	if (!ret && server)
		ret = kdat_lmr_create(ia, c->readback, ECHO_BUF, &c->rb_lmr);
	if (ret)
		goto err;
	/* receives complete in the order they were posted: the greeting comes first */
	iov = (struct kdat_iov){ .lmr = c->rx_lmr, .offset = sizeof(*c->rx),
				 .length = sizeof(*c->rx) };
	if (greet && !server)
		ret = kdat_ep_post_recv(ep, &iov, 1, C_GREET_RECV);
	iov = (struct kdat_iov){ .lmr = c->rx_lmr, .length = sizeof(*c->rx) };
	if (!ret)
		ret = kdat_ep_post_recv(ep, &iov, 1, C_RECV);
	if (ret)
		goto err;
	return c;
err:
	pr_warn("kdat_echo: connection buffers: 0x%x\n", ret);
	conn_free(c);
	return NULL;
}

static int conn_send(struct echo_conn *c)
{
	struct kdat_iov iov = { .lmr = c->tx_lmr, .length = sizeof(*c->tx) };

	kdat_lmr_sync_for_device(c->tx_lmr);
	return kdat_ep_post_send(c->ep, &iov, 1, C_SEND) ? -EIO : 0;
}

static int ms_since(ktime_t t)
{
	return (int)ktime_ms_delta(ktime_get(), t);
}

/* Client: connected; expose the buffer to the server. */
static void client_start(struct echo_conn *c)
{
	struct kdat_iov iov = { .lmr = c->buf_lmr, .length = ECHO_BUF };
	u32 rkey;
	u64 addr;

	first_post_ms = ms_since(c->established_at);
	if (kdat_rmr_create(ia, &c->rmr) ||
	    kdat_rmr_bind(c->rmr, c->ep, &iov, KDAT_RMR_REMOTE_READ | KDAT_RMR_REMOTE_WRITE,
			  C_BIND, &rkey, &addr)) {
		dto_errors++;
		return;
	}
	c->tx->magic = cpu_to_le32(ECHO_MAGIC);
	c->tx->rkey = cpu_to_le32(rkey);
	c->tx->addr = cpu_to_le64(addr);
	c->tx->length = cpu_to_le32(ECHO_BUF);
}

/* flush_test: receives in flight, then an abrupt disconnect. */
static void flush_test_start(void)
{
	struct kdat_iov iov;
	int i;

	for (i = 0; i < FLUSH_RECVS; i++) {
		iov = (struct kdat_iov){ .lmr = flush_lmr, .offset = i * 64, .length = 64 };
		if (kdat_ep_post_recv(client_ep, &iov, 1, 100 + i))
			dto_errors++;
	}
	kdat_ep_disconnect(client_ep, KDAT_CLOSE_ABRUPT);
}

static int ep_state(struct kdat_ep *ep)
{
	struct kdat_ep_info *info = kzalloc(sizeof(*info), GFP_KERNEL);
	int state = -1;

	if (info && !kdat_ep_query(ep, info))
		state = info->state;
	kfree(info);
	return state;
}

/* graceful_test: a send the peer cannot take (no receive posted), then disconnects. */
static void graceful_test_start(void)
{
	struct kdat_iov iov = { .lmr = flush_lmr, .length = 8 };

	if (kdat_ep_post_send(client_ep, &iov, 1, 200))
		dto_errors++;
	kdat_ep_disconnect(client_ep, KDAT_CLOSE_GRACEFUL);
	gt_state_after_graceful = ep_state(client_ep);
	snprintf(gt_post_in_pending, sizeof(gt_post_in_pending), "0x%x",
		 kdat_ep_post_send(client_ep, &iov, 1, 201));
	snprintf(gt_second_graceful, sizeof(gt_second_graceful), "0x%x",
		 kdat_ep_disconnect(client_ep, KDAT_CLOSE_GRACEFUL));
	gt_state_after_second = ep_state(client_ep);
	kdat_ep_disconnect(client_ep, KDAT_CLOSE_ABRUPT);
	gt_state_after_abrupt = ep_state(client_ep);
}

static int pt_since_start_ms(void)
{
	return (int)ktime_ms_delta(ktime_get(), pt_start);
}

/* pending_test: the send, then the graceful disconnect that must wait for it. */
static int pending_act_set(const char *val, const struct kernel_param *kp)
{
	struct kdat_iov iov = { .lmr = flush_lmr, .length = 8 };

	if (!sysfs_streq(val, "graceful"))
		return -EINVAL;
	if (!pending_test || !client_ep || !flush_lmr || pt_started)
		return -EBUSY;
	pt_start = ktime_get();
	/* pairs with pending_test_event()'s acquire: pt_start is set when it sees pt_started */
	smp_store_release(&pt_started, true);
	if (kdat_ep_post_send(client_ep, &iov, 1, 300)) {
		WRITE_ONCE(pt_started, false);	/* nothing was sent: the test may try again */
		return -EIO;
	}
	kdat_ep_disconnect(client_ep, KDAT_CLOSE_GRACEFUL);
	pt_state_after_graceful = ep_state(client_ep);
	return 0;
}

static const struct kernel_param_ops pending_act_ops = { .set = pending_act_set };
module_param_cb(pending_act, &pending_act_ops, NULL, 0200);
MODULE_PARM_DESC(pending_act, "pending_test: write 'graceful' to send and disconnect gracefully");

static void pending_test_event(const struct kdat_event_info *ev)
{
	if (ev->number == KDAT_DAT_DTO_COMPLETION_EVENT) {
		if (ev->cookie == 300 && pt_send_status == -1) {
			pt_send_status = ev->dto_status;
			pt_send_ms = pt_since_start_ms();
		} else {
			dto_errors++;
		}
	} else if (ev->number != KDAT_DAT_CONNECTION_EVENT_ESTABLISHED &&
		   /* pairs with pending_act_set()'s release */
		   smp_load_acquire(&pt_started) && pt_end_ms == -1) {
		pt_end_ms = pt_since_start_ms();
		strscpy(pt_end_event, event_name(ev->number), sizeof(pt_end_event));
	}
}

static void flush_test_event(const struct kdat_event_info *ev)
{
	struct kdat_iov iov = { .lmr = flush_lmr, .length = 8 };

	if (ev->number == KDAT_DAT_DTO_COMPLETION_EVENT && graceful_test) {
		if (ev->dto_status == KDAT_DAT_DTO_ERR_FLUSHED && !client_disconnected &&
		    ev->cookie == 200)
			gt_flushed_sends++;
		else
			dto_errors++;
		return;
	}
	if (ev->number == KDAT_DAT_DTO_COMPLETION_EVENT) {
		if (ev->dto_status != KDAT_DAT_DTO_ERR_FLUSHED)
			dto_errors++;
		else if (client_disconnected)
			flushed_after_disconnect++;
		else
			flushed_before_disconnect++;
		return;
	}
	if (ev->number == KDAT_DAT_CONNECTION_EVENT_DISCONNECTED) {
		client_disconnected = true;
		snprintf(post_after_disconnect, sizeof(post_after_disconnect), "0x%x",
			 kdat_ep_post_send(client_ep, &iov, 1, 999));
	}
}

/* Server: write the pattern into the client's window. */
static void server_write(struct echo_conn *c)
{
	struct kdat_iov iov = { .lmr = c->buf_lmr,
		.length = min_t(u32, ECHO_BUF, le32_to_cpu(c->peer.length)) };

	if (kdat_ep_post_rdma_write(c->ep, &iov, 1, C_WRITE, le64_to_cpu(c->peer.addr),
				    le32_to_cpu(c->peer.rkey)))
		dto_errors++;
}

/* Server: connected; answer a message that came before the event. */
static void server_established(struct echo_conn *c)
{
	struct kdat_iov iov = { .lmr = c->tx_lmr, .offset = sizeof(*c->tx),
				.length = sizeof(*c->tx) };

	c->established = true;
	c->established_at = ktime_get();
	if (greet) {	/* before the client's message, which may be in already */
		c->tx[1].magic = cpu_to_le32(ECHO_MAGIC);
		c->tx[1].greeting = cpu_to_le32(1);
		kdat_lmr_sync_for_device(c->tx_lmr);
		if (kdat_ep_post_send(c->ep, &iov, 1, C_GREET))
			dto_errors++;
	}
	if (c->write_pending) {
		c->write_pending = false;
		late_answers++;
		server_write(c);
	}
}

/* One data transfer completion, on either side. */
static void echo_dto(const struct kdat_event_info *ev)
{
	struct echo_conn *c = conn_find(ev->ep);
	struct kdat_iov iov;
	bool server = c && c->readback;

	if (!c)
		return;
	if (ev->cookie == C_GREET)
		greet_status = ev->dto_status;
	if (ev->dto_status != KDAT_DAT_DTO_SUCCESS) {
		dto_errors++;
		return;
	}
	switch (ev->cookie) {
	case C_BIND:		/* client: the window is ready: tell the server */
		if (conn_send(c))
			dto_errors++;
		break;
	case C_GREET:		/* server */
		greet_sent_ms = ms_since(c->established_at);
		break;
	case C_GREET_RECV:	/* client */
		kdat_lmr_sync_for_cpu(c->rx_lmr);
		if (le32_to_cpu(c->rx[1].greeting) != 1)
			dto_errors++;
		else if (c->established_at)
			greet_recv_ms = ms_since(c->established_at);
		else	/* its completion came before the client's ESTABLISHED event */
			greet_recv_ms = 0;
		break;
	case C_RECV:
		recvs_done++;
		if (server && !c->first_recv_at) {
			c->first_recv_at = ktime_get();
			if (c->established)
				first_recv_ms = ms_since(c->established_at);
			else	/* before the server's ESTABLISHED */
				first_recv_ms = 0;
		}
		kdat_lmr_sync_for_cpu(c->rx_lmr);
		if (le32_to_cpu(c->rx->magic) != ECHO_MAGIC) {
			dto_errors++;
			break;
		}
		if (server) {
			c->peer = *c->rx;
			if (c->established)
				server_write(c);
			else
				c->write_pending = true;
		} else if (le32_to_cpu(c->rx->done)) {
			u32 i, bad = 0;

			kdat_lmr_sync_for_cpu(c->buf_lmr);
			for (i = 0; i < ECHO_BUF; i++)
				bad += c->buf[i] != pattern(i);
			if (!bad)
				verified++;
			else
				dto_errors++;
			kdat_ep_disconnect(c->ep, KDAT_CLOSE_GRACEFUL);
		}
		break;
	case C_WRITE:		/* server: read it back */
		iov = (struct kdat_iov){ .lmr = c->rb_lmr, .length = ECHO_BUF };
		if (kdat_ep_post_rdma_read(c->ep, &iov, 1, C_READ, le64_to_cpu(c->peer.addr),
					   le32_to_cpu(c->peer.rkey)))
			dto_errors++;
		break;
	case C_READ:
		kdat_lmr_sync_for_cpu(c->rb_lmr);
		if (memcmp(c->readback, c->buf, ECHO_BUF)) {
			dto_errors++;
			break;
		}
		verified++;
		c->tx->magic = cpu_to_le32(ECHO_MAGIC);
		c->tx->done = cpu_to_le32(1);
		if (conn_send(c))
			dto_errors++;
		break;
	case C_SEND:
		sends_done++;
		break;
	default:
		break;
	}
}

/* The server RDMA-reads back: both sides allow a few reads outstanding. */
static const struct kdat_ep_attr echo_attr = { .max_rdma_read_in = 4, .max_rdma_read_out = 4 };

static void echo_request(struct kdat_cr *cr, const struct kdat_event_info *ev)
{
	u8 reply[KDAT_PRIVATE_DATA_MAX];
	struct kdat_ep_attr attr = echo_attr;
	struct kdat_ep *ep;
	u32 n;

	/* one EVD for everything: DTO completions must precede DISCONNECTED */
	if (kdat_ep_create(ia, evd, data ? evd : NULL, data ? evd : NULL, &attr, &ep)) {
		kdat_cr_reject(cr, NULL, 0);
		failed++;
		return;
	}
	if (data && !conn_new(ep, true)) {
		kdat_cr_reject(cr, NULL, 0);
		kdat_ep_free(ep);
		failed++;
		return;
	}
	memcpy(reply, "echo:", 5);
	n = min_t(u32, ev->private_data_size, sizeof(reply) - 5);
	memcpy(reply + 5, ev->private_data, n);
	/* accept's limit is larger than connect's, so the echo always fits */
	if (kdat_cr_accept(cr, ep, reply, 5 + n)) {
		kdat_ep_free(ep);
		failed++;
		return;
	}
	accepted++;
}

/* Client, data=1: connected; it speaks start_delay_ms later (client_start_fn). */
static void client_established(struct echo_conn *c)
{
	c->established_at = ktime_get();
	queue_delayed_work(echo_wq, &client_start_work, msecs_to_jiffies(start_delay_ms));
}

static void echo_event_work(struct work_struct *work)
{
	struct kdat_event_info *ev;

	if (READ_ONCE(stopping))
		return;
	ev = kzalloc(sizeof(*ev), GFP_KERNEL);
	if (!ev)
		return;
	while (!kdat_evd_dequeue(evd, ev, NULL)) {
		strscpy(last_event, event_name(ev->number), sizeof(last_event));
		if ((flush_test || graceful_test) && ev->ep == client_ep)
			flush_test_event(ev);
		if (pending_test && ev->ep == client_ep)
			pending_test_event(ev);
		switch (ev->number) {
		case KDAT_DAT_CONNECTION_REQUEST_EVENT:
			echo_request(ev->cr, ev);
			break;
		case KDAT_DAT_CONNECTION_EVENT_ESTABLISHED:
			established++;
			if (ev->ep == client_ep) {
				memcpy(peer_pdata, ev->private_data, ev->private_data_size);
				peer_pdata[ev->private_data_size] = '\0';
				if (data && conn_find(client_ep))
					client_established(conn_find(client_ep));
				else if (flush_test)
					flush_test_start();
				else if (graceful_test)
					graceful_test_start();
				else if (!pending_test)	/* the test acts */
					kdat_ep_disconnect(client_ep, KDAT_CLOSE_GRACEFUL);
			} else if (data && conn_find(ev->ep)) {
				server_established(conn_find(ev->ep));
			}
			break;
		case KDAT_DAT_DTO_COMPLETION_EVENT:
		case KDAT_DAT_RMR_BIND_COMPLETION_EVENT:
			if (!((flush_test || graceful_test || pending_test) && ev->ep == client_ep))
				echo_dto(ev);
			break;
		case KDAT_DAT_CONNECTION_EVENT_PEER_REJECTED:
			rejected++;
			memcpy(peer_pdata, ev->private_data, ev->private_data_size);
			peer_pdata[ev->private_data_size] = '\0';
			break;
		case KDAT_DAT_CONNECTION_EVENT_DISCONNECTED:
		case KDAT_DAT_CONNECTION_EVENT_BROKEN:
		case KDAT_DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR:
			disconnected++;
			/* a served connection is over: its buffers and EP go */
			if (ev->ep != client_ep) {
				if (conn_find(ev->ep))
					conn_free(conn_find(ev->ep));
				kdat_ep_free(ev->ep);
			}
			break;
		default:
			failed++;
			break;
		}
	}
	kfree(ev);
}

static int echo_connect(void)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	struct kdat_ep_attr attr = echo_attr;
	bool dtos = data || flush_test || graceful_test || pending_test;
	kdat_ret_t ret;

	if (!in4_pton(connect_addr, -1, (u8 *)&sin.sin_addr.s_addr, '\0', NULL))
		return -EINVAL;
	ret = kdat_ep_create(ia, evd, dtos ? evd : NULL, dtos ? evd : NULL, &attr, &client_ep);
	if (ret)
		return -ENOMEM;
	if (flush_test || graceful_test || pending_test) {
		flush_buf = kzalloc(64 * FLUSH_RECVS, GFP_KERNEL);
		if (!flush_buf || kdat_lmr_create(ia, flush_buf, 64 * FLUSH_RECVS, &flush_lmr))
			return -ENOMEM;
	}
	/* receives may be posted before the connection exists */
	if (data && !conn_new(client_ep, false))
		return -ENOMEM;
	ret = kdat_ep_connect(client_ep, (struct sockaddr *)&sin, connect_port, 5000000,
			      pdata, strlen(pdata), KDAT_DAT_QOS_BEST_EFFORT,
			      KDAT_CONNECT_DEFAULT);
	if (ret) {
		pr_warn("kdat_echo: connect failed: 0x%x\n", ret);
		return -EIO;
	}
	return 0;
}

/* Stops event handling, then closes the IA; buffers go once no QP can DMA. */
static void client_start_fn(struct work_struct *work)
{
	struct echo_conn *c;
	int left;

	if (READ_ONCE(stopping))
		return;
	c = conn_find(client_ep);
	if (!c)
		return;
	/*
	 * A delayed work counts jiffies, and a guest whose ticks arrive late
	 * catches several up at once, so it can run early by ktime; the delay
	 * is a promise to the peer's test, so wait out what is left.
	 */
	left = start_delay_ms - ms_since(c->established_at);
	if (left > 0) {
		queue_delayed_work(echo_wq, &client_start_work,
				   max(1UL, msecs_to_jiffies(left)));
		return;
	}
	client_start(c);
}

static void echo_stop(void)
{
	WRITE_ONCE(stopping, true);
	cancel_work_sync(&event_work);
	cancel_delayed_work_sync(&client_start_work);
	/* Abrupt close frees the PSP, EPs (peers see DISCONNECTED), EVD and memory. */
	kdat_ia_close(ia, KDAT_IA_CLOSE_ABRUPT);
	conns_release_all();
	kfree(flush_buf);
	flush_workqueue(echo_wq);
	destroy_workqueue(echo_wq);
}

static int __init echo_init(void)
{
	int err = -EIO;

	echo_wq = alloc_ordered_workqueue("kdat_echo", 0);
	if (!echo_wq)
		return -ENOMEM;
	INIT_WORK(&event_work, echo_event_work);
	INIT_DELAYED_WORK(&client_start_work, client_start_fn);
	if (kdat_ia_open(ia_name, &ia)) {
		pr_warn("kdat_echo: no IA for '%s'\n", ia_name);
		goto err_wq;
	}
	if (kdat_evd_create(ia, 1024, KDAT_EVD_FLAGS_ALL, echo_upcall, NULL, &evd))
		goto err_ia;
	if (listen_port && kdat_psp_create(ia, listen_port, evd, KDAT_PSP_CONSUMER, &psp))
		goto err_ia;
	if (connect_addr[0]) {
		err = echo_connect();
		if (err)
			goto err_ia;
	}
	pr_info("kdat_echo: ready on %s (listen %d, connect '%s':%d)\n", ia_name, listen_port,
		connect_addr, connect_port);
	return 0;

err_ia:
	echo_stop();
	return err;
err_wq:
	destroy_workqueue(echo_wq);
	return err;
}

static void __exit echo_exit(void)
{
	echo_stop();
}

module_init(echo_init);
module_exit(echo_exit);
MODULE_DESCRIPTION("kdat sample kernel consumer: an echo service over the in-kernel API");
MODULE_LICENSE("GPL");
