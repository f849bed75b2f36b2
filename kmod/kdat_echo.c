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

static struct kdat_ia *ia;
static struct kdat_evd *evd;
static struct kdat_sp *psp;
static struct kdat_ep *client_ep;
static struct work_struct event_work;
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
	default: return "OTHER";
	}
}

static void echo_request(struct kdat_cr *cr, const struct kdat_event_info *ev)
{
	u8 reply[KDAT_PRIVATE_DATA_MAX];
	struct kdat_ep_attr attr = {};
	struct kdat_ep *ep;
	u32 n;

	if (kdat_ep_create(ia, evd, NULL, NULL, &attr, &ep)) {
		kdat_cr_reject(cr, NULL, 0);
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
		switch (ev->number) {
		case KDAT_DAT_CONNECTION_REQUEST_EVENT:
			echo_request(ev->cr, ev);
			break;
		case KDAT_DAT_CONNECTION_EVENT_ESTABLISHED:
			established++;
			if (ev->ep == client_ep) {
				memcpy(peer_pdata, ev->private_data, ev->private_data_size);
				peer_pdata[ev->private_data_size] = '\0';
				kdat_ep_disconnect(client_ep, KDAT_CLOSE_GRACEFUL);
			}
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
			/* a served connection is over: its EP goes */
			if (ev->ep != client_ep)
				kdat_ep_free(ev->ep);
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
	struct kdat_ep_attr attr = {};
	kdat_ret_t ret;

	if (!in4_pton(connect_addr, -1, (u8 *)&sin.sin_addr.s_addr, '\0', NULL))
		return -EINVAL;
	ret = kdat_ep_create(ia, evd, NULL, NULL, &attr, &client_ep);
	if (ret)
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

static int __init echo_init(void)
{
	int err = -EIO;

	echo_wq = alloc_ordered_workqueue("kdat_echo", 0);
	if (!echo_wq)
		return -ENOMEM;
	INIT_WORK(&event_work, echo_event_work);
	if (kdat_ia_open(ia_name, &ia)) {
		pr_warn("kdat_echo: no IA for '%s'\n", ia_name);
		goto err_wq;
	}
	if (kdat_evd_create(ia, 1024, KDAT_EVD_CR | KDAT_EVD_CONNECTION, echo_upcall, NULL, &evd))
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
	WRITE_ONCE(stopping, true);
	cancel_work_sync(&event_work);
	kdat_ia_close(ia, KDAT_IA_CLOSE_ABRUPT);
	flush_workqueue(echo_wq);
err_wq:
	destroy_workqueue(echo_wq);
	return err;
}

static void __exit echo_exit(void)
{
	WRITE_ONCE(stopping, true);
	cancel_work_sync(&event_work);
	/* Abrupt close frees the PSP, EPs (peers see DISCONNECTED) and the EVD. */
	kdat_ia_close(ia, KDAT_IA_CLOSE_ABRUPT);
	flush_workqueue(echo_wq);
	destroy_workqueue(echo_wq);
}

module_init(echo_init);
module_exit(echo_exit);
MODULE_DESCRIPTION("kdat sample kernel consumer: an echo service over the in-kernel API");
MODULE_LICENSE("GPL");
