// SPDX-License-Identifier: GPL-2.0
/*
 * kdat_bench_conn: connection setup and teardown rate through the in-kernel
 * API (include/kdat/kdat.h) and nothing else.  One IA; a PSP whose EVD also
 * carries the accepted EPs' connection events; the client EPs report on a
 * second EVD, so each event says which side it is from.  The phases and
 * parameters are described in bench_conn.h.
 */
#include <linux/mm.h>
#include <linux/slab.h>
#include <kdat/kdat.h>
#include "bench_conn.h"

static char *ia_name = "kdat0";
module_param(ia_name, charp, 0444);
MODULE_PARM_DESC(ia_name, "netdev or IP address of the IA");

/*
 * abrupt=1: the client disconnects abruptly, as rdma_disconnect() does (QP to
 * error, then the DREQ); the default is DAT's graceful disconnect, whose QP
 * stays usable until the peer's DREP (dat_ep_disconnect(3DAT): in-progress
 * requests "must try to be completed successfully first").
 */
static bool abrupt;
module_param(abrupt, bool, 0444);
MODULE_PARM_DESC(abrupt, "disconnect abruptly (rdma_disconnect's QP semantics)");

static struct kdat_ia *ia;
static struct kdat_evd *srv_evd, *cli_evd;
static struct kdat_sp *psp;
static struct kdat_ep **cli, **srv, **idle_eps;
static int n_cli, n_srv, n_idle;
static struct kdat_event_info *ev;

static void bench_upcall(struct kdat_evd *evd, void *context)
{
	bench_kick();
}

static const struct kdat_ep_attr bench_attr;

static void bench_free_eps(struct kdat_ep **eps, int *count)
{
	while (*count > 0) {
		if (kdat_ep_free(eps[--*count]))
			errors++;
	}
}

/* Server EVD: requests to accept, then the accepted EPs' events. */
static void bench_server_event(int *est, int *disc)
{
	struct kdat_ep *ep;

	switch (ev->number) {
	case KDAT_DAT_CONNECTION_REQUEST_EVENT:
		if (n_srv >= n ||
		    kdat_ep_create(ia, srv_evd, NULL, NULL, &bench_attr, &ep)) {
			kdat_cr_reject(ev->cr, NULL, 0);
			errors++;
			break;
		}
		if (kdat_cr_accept(ev->cr, ep, NULL, 0)) {
			kdat_ep_free(ep);
			errors++;
			break;
		}
		srv[n_srv++] = ep;
		break;
	case KDAT_DAT_CONNECTION_EVENT_ESTABLISHED:
		(*est)++;
		break;
	case KDAT_DAT_CONNECTION_EVENT_DISCONNECTED:
		(*disc)++;
		break;
	default:
		errors++;
		break;
	}
}

static void bench_client_event(int *est, int *disc)
{
	switch (ev->number) {
	case KDAT_DAT_CONNECTION_EVENT_ESTABLISHED:
		(*est)++;
		break;
	case KDAT_DAT_CONNECTION_EVENT_DISCONNECTED:
		(*disc)++;
		break;
	default:
		errors++;
		break;
	}
}

/* Dequeues everything both EVDs hold; true if there was anything. */
static bool bench_drain(int *s_est, int *s_disc, int *c_est, int *c_disc)
{
	bool any = false;

	while (!kdat_evd_dequeue(srv_evd, ev, NULL)) {
		bench_server_event(s_est, s_disc);
		any = true;
	}
	while (!kdat_evd_dequeue(cli_evd, ev, NULL)) {
		bench_client_event(c_est, c_disc);
		any = true;
	}
	return any;
}

static int bench_connect(void)
{
	unsigned long deadline = jiffies + timeout_s * HZ;
	int s_est = 0, s_disc = 0, c_est = 0, c_disc = 0, seen, err0 = errors;
	struct sockaddr_in sin;

	if (n_cli || n_srv)
		return -EBUSY;
	connected = 0;
	if (bench_sockaddr(&sin, 0))
		return -EINVAL;
	while (s_est < n || c_est < n) {
		while (n_cli < n && n_cli - c_est < window) {
			struct kdat_ep **ep = &cli[n_cli];

			if (kdat_ep_create(ia, cli_evd, NULL, NULL, &bench_attr, ep))
				return -ENOMEM;
			n_cli++;
			if (kdat_ep_connect(*ep, (struct sockaddr *)&sin, port, 30000000,
					    NULL, 0, KDAT_DAT_QOS_BEST_EFFORT,
					    KDAT_CONNECT_DEFAULT))
				return -EIO;
		}
		seen = atomic_read(&bench_seq);
		if (bench_drain(&s_est, &s_disc, &c_est, &c_disc))
			continue;
		if (errors != err0 || s_disc || c_disc)
			return -EIO;
		if (!bench_wait(seen, deadline))
			return -ETIMEDOUT;
	}
	connected = min(s_est, c_est);
	return errors != err0 ? -EIO : 0;
}

static int bench_disconnect(void)
{
	unsigned long deadline = jiffies + timeout_s * HZ;
	int s_est = 0, s_disc = 0, c_est = 0, c_disc = 0, seen, issued = 0;
	u64 t0;

	while (s_disc < n_srv || c_disc < n_cli) {
		while (issued < n_cli && issued - c_disc < window) {
			if (kdat_ep_disconnect(cli[issued++],
					       abrupt ? KDAT_CLOSE_ABRUPT : KDAT_CLOSE_GRACEFUL))
				errors++;
		}
		seen = atomic_read(&bench_seq);
		if (bench_drain(&s_est, &s_disc, &c_est, &c_disc))
			continue;
		if (!bench_wait(seen, deadline))
			return -ETIMEDOUT;
	}
	t0 = ktime_get_ns();
	bench_free_eps(srv, &n_srv);
	bench_free_eps(cli, &n_cli);
	teardown_free_ns = ktime_get_ns() - t0;
	connected = 0;
	return 0;
}

static int bench_idle(void)
{
	if (n_idle)
		return -EBUSY;
	while (n_idle < n) {
		if (kdat_ep_create(ia, cli_evd, NULL, NULL, &bench_attr, &idle_eps[n_idle]))
			return -ENOMEM;
		n_idle++;
	}
	return 0;
}

static int bench_free(void)
{
	bench_free_eps(idle_eps, &n_idle);
	return 0;
}

static int __init bench_init(void)
{
	u32 qlen = min(2 * n + 64, 65536);

	if (!bench_params_ok())
		return -EINVAL;
	cli = kvcalloc(n, sizeof(*cli), GFP_KERNEL);
	srv = kvcalloc(n, sizeof(*srv), GFP_KERNEL);
	idle_eps = kvcalloc(n, sizeof(*idle_eps), GFP_KERNEL);
	ev = kzalloc(sizeof(*ev), GFP_KERNEL);
	if (!cli || !srv || !idle_eps || !ev)
		goto err_mem;
	if (kdat_ia_open(ia_name, &ia)) {
		pr_warn("kdat_bench_conn: no IA for '%s'\n", ia_name);
		goto err_mem;
	}
	if (kdat_evd_create(ia, qlen, KDAT_EVD_FLAGS_ALL, bench_upcall, NULL, &srv_evd) ||
	    kdat_evd_create(ia, qlen, KDAT_EVD_FLAGS_ALL, bench_upcall, NULL, &cli_evd) ||
	    kdat_psp_create(ia, port, srv_evd, KDAT_PSP_CONSUMER, &psp)) {
		kdat_ia_close(ia, KDAT_IA_CLOSE_ABRUPT);
		goto err_mem;
	}
	return 0;

err_mem:
	kfree(ev);
	kvfree(idle_eps);
	kvfree(srv);
	kvfree(cli);
	return -EIO;
}

static void __exit bench_exit(void)
{
	/* frees the PSP, every EP (connected ones are disconnected) and the EVDs */
	kdat_ia_close(ia, KDAT_IA_CLOSE_ABRUPT);
	kfree(ev);
	kvfree(idle_eps);
	kvfree(srv);
	kvfree(cli);
}

module_init(bench_init);
module_exit(bench_exit);
MODULE_DESCRIPTION("kdat benchmark: connection setup/teardown rate over include/kdat/kdat.h");
MODULE_LICENSE("GPL");
