// SPDX-License-Identifier: GPL-2.0
/*
 * rdmacm_bench_conn: the same connection benchmark as kdat_bench_conn, with
 * raw in-kernel rdma_cm calls: the limit kdat is measured against.  Every
 * connection gets its own CQ (polled from a workqueue; a kdat EP had one too
 * until kdat's EPs began to share their IA's CQs, kmod/kdat_cq.c) and an RC
 * QP with 16+1 send and receive slots on one shared PD.  The
 * connection steps run in the rdma_cm event handler; the benchmark thread
 * only starts connects/disconnects and waits.  Phases: bench_conn.h.
 */
#include <linux/slab.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>
#include "bench_conn.h"

#define BENCH_DTOS	16

enum bench_side { SIDE_CLIENT = 1, SIDE_SERVER };

struct bench_conn {
	struct rdma_cm_id *id;
	struct ib_cq *cq;
	struct ib_qp *qp;
	enum bench_side side;
};

static struct rdma_cm_id *listen_id;
static struct ib_pd *pd;
static struct bench_conn *cli, *srv, *idle_conns;
static int n_cli, n_idle;
static atomic_t n_srv;
static atomic_t s_est, c_est, s_disc, c_disc, failures;

static int bench_qp(struct bench_conn *c, struct ib_device *dev, struct rdma_cm_id *id)
{
	struct ib_qp_init_attr init = {};
	int err;

	c->cq = ib_alloc_cq(dev, c, 2 * BENCH_DTOS + 2, 0, IB_POLL_WORKQUEUE);
	if (IS_ERR(c->cq)) {
		c->cq = NULL;
		return -ENOMEM;
	}
	init.send_cq = c->cq;
	init.recv_cq = c->cq;
	init.cap.max_send_wr = BENCH_DTOS + 1;
	init.cap.max_recv_wr = BENCH_DTOS + 1;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	init.sq_sig_type = IB_SIGNAL_REQ_WR;
	init.qp_type = IB_QPT_RC;
	if (id) {
		err = rdma_create_qp(id, pd, &init);
		if (!err)
			c->qp = id->qp;
	} else {
		c->qp = ib_create_qp(pd, &init);
		err = PTR_ERR_OR_ZERO(c->qp);
		if (err)
			c->qp = NULL;
	}
	if (err) {
		ib_free_cq(c->cq);
		c->cq = NULL;
	}
	return err;
}

/* The cm_id first (no more callbacks), then the QP, then its CQ. */
static void bench_conn_free(struct bench_conn *c)
{
	if (c->id)
		rdma_destroy_id(c->id);
	if (c->qp)
		ib_destroy_qp(c->qp);
	if (c->cq)
		ib_free_cq(c->cq);
	memset(c, 0, sizeof(*c));
}

static void bench_conn_param(struct rdma_conn_param *param)
{
	memset(param, 0, sizeof(*param));
	param->retry_count = 7;
	param->rnr_retry_count = 7;
}

/* A request on the listener: a new cm_id, a QP, accept.  Nonzero destroys the id. */
static int bench_request(struct rdma_cm_id *id)
{
	struct rdma_conn_param param;
	struct bench_conn *c;
	int i = atomic_inc_return(&n_srv) - 1;

	if (i >= n)
		goto fail;
	c = &srv[i];
	c->side = SIDE_SERVER;
	id->context = c;
	if (bench_qp(c, id->device, id))
		goto fail;
	bench_conn_param(&param);
	if (rdma_accept(id, &param)) {
		ib_destroy_qp(c->qp);
		ib_free_cq(c->cq);
		c->qp = NULL;
		c->cq = NULL;
		goto fail;
	}
	c->id = id;
	return 0;
fail:
	atomic_inc(&failures);
	bench_kick();
	return -ENOMEM;
}

static int bench_handler(struct rdma_cm_id *id, struct rdma_cm_event *event)
{
	struct bench_conn *c = id->context;
	struct rdma_conn_param param;
	int err = 0;

	switch (event->event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		return bench_request(id);
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		err = rdma_resolve_route(id, 30000);
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		err = bench_qp(c, id->device, id);
		if (!err) {
			bench_conn_param(&param);
			err = rdma_connect_locked(id, &param);
		}
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		atomic_inc(c->side == SIDE_SERVER ? &s_est : &c_est);
		bench_kick();
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		if (c->side == SIDE_SERVER)
			rdma_disconnect(id);	/* the DREP */
		atomic_inc(c->side == SIDE_SERVER ? &s_disc : &c_disc);
		bench_kick();
		break;
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
		break;
	default:
		err = -EIO;
		break;
	}
	if (err) {
		atomic_inc(&failures);
		bench_kick();
	}
	return 0;
}

static void bench_reset_counters(void)
{
	atomic_set(&s_est, 0);
	atomic_set(&c_est, 0);
	atomic_set(&s_disc, 0);
	atomic_set(&c_disc, 0);
	atomic_set(&failures, 0);
}

static int bench_connect(void)
{
	unsigned long deadline = jiffies + timeout_s * HZ;
	struct sockaddr_in src, dst;
	struct bench_conn *c;
	int seen, err = 0;

	if (n_cli || atomic_read(&n_srv))
		return -EBUSY;
	connected = 0;
	bench_reset_counters();
	if (bench_sockaddr(&src, 0) || bench_sockaddr(&dst, port))
		return -EINVAL;
	while (atomic_read(&s_est) < n || atomic_read(&c_est) < n) {
		seen = atomic_read(&bench_seq);
		while (n_cli < n && n_cli - atomic_read(&c_est) < window) {
			c = &cli[n_cli++];
			c->side = SIDE_CLIENT;
			c->id = rdma_create_id(&init_net, bench_handler, c, RDMA_PS_TCP,
					       IB_QPT_RC);
			if (IS_ERR(c->id)) {
				c->id = NULL;
				err = -ENOMEM;
				goto out;
			}
			if (rdma_resolve_addr(c->id, (struct sockaddr *)&src,
					      (struct sockaddr *)&dst, 30000)) {
				err = -EIO;
				goto out;
			}
		}
		if (atomic_read(&failures)) {
			err = -EIO;
			goto out;
		}
		if (!bench_wait(seen, deadline)) {
			err = -ETIMEDOUT;
			goto out;
		}
	}
	connected = min(atomic_read(&s_est), atomic_read(&c_est));
out:
	errors += atomic_read(&failures);
	return err;
}

static int bench_disconnect(void)
{
	unsigned long deadline = jiffies + timeout_s * HZ;
	int i, seen, issued = 0, nsrv = min(atomic_read(&n_srv), n);
	u64 t0;

	while (atomic_read(&s_disc) < nsrv || atomic_read(&c_disc) < n_cli) {
		seen = atomic_read(&bench_seq);
		while (issued < n_cli && issued - atomic_read(&c_disc) < window) {
			if (rdma_disconnect(cli[issued++].id))
				errors++;
		}
		if (!bench_wait(seen, deadline))
			return -ETIMEDOUT;
	}
	t0 = ktime_get_ns();
	for (i = 0; i < nsrv; i++)
		bench_conn_free(&srv[i]);
	for (i = 0; i < n_cli; i++)
		bench_conn_free(&cli[i]);
	teardown_free_ns = ktime_get_ns() - t0;
	n_cli = 0;
	atomic_set(&n_srv, 0);
	connected = 0;
	return 0;
}

static int bench_idle(void)
{
	if (n_idle)
		return -EBUSY;
	while (n_idle < n) {
		if (bench_qp(&idle_conns[n_idle], listen_id->device, NULL))
			return -ENOMEM;
		n_idle++;
	}
	return 0;
}

static int bench_free(void)
{
	while (n_idle > 0)
		bench_conn_free(&idle_conns[--n_idle]);
	return 0;
}

static int __init bench_init(void)
{
	struct sockaddr_in sin;
	int err = -ENOMEM;

	if (!bench_params_ok() || bench_sockaddr(&sin, port))
		return -EINVAL;
	cli = kvcalloc(n, sizeof(*cli), GFP_KERNEL);
	srv = kvcalloc(n, sizeof(*srv), GFP_KERNEL);
	idle_conns = kvcalloc(n, sizeof(*idle_conns), GFP_KERNEL);
	if (!cli || !srv || !idle_conns)
		goto err_mem;
	listen_id = rdma_create_id(&init_net, bench_handler, NULL, RDMA_PS_TCP, IB_QPT_RC);
	if (IS_ERR(listen_id)) {
		err = PTR_ERR(listen_id);
		goto err_mem;
	}
	err = rdma_bind_addr(listen_id, (struct sockaddr *)&sin);
	if (!err && !listen_id->device)
		err = -ENODEV;
	if (!err)
		err = rdma_listen(listen_id, 1024);
	if (err)
		goto err_id;
	pd = ib_alloc_pd(listen_id->device, 0);
	if (IS_ERR(pd)) {
		err = PTR_ERR(pd);
		goto err_id;
	}
	return 0;

err_id:
	rdma_destroy_id(listen_id);
err_mem:
	kvfree(idle_conns);
	kvfree(srv);
	kvfree(cli);
	return err;
}

static void __exit bench_exit(void)
{
	int i, nsrv;

	/* no more requests, and none half handled */
	rdma_destroy_id(listen_id);
	nsrv = min(atomic_read(&n_srv), n);
	for (i = 0; i < nsrv; i++)
		bench_conn_free(&srv[i]);
	for (i = 0; i < n_cli; i++)
		bench_conn_free(&cli[i]);
	bench_free();
	ib_dealloc_pd(pd);
	kvfree(idle_conns);
	kvfree(srv);
	kvfree(cli);
}

module_init(bench_init);
module_exit(bench_exit);
MODULE_DESCRIPTION("kdat benchmark reference: connection setup/teardown with raw rdma_cm");
MODULE_LICENSE("GPL");
