// SPDX-License-Identifier: GPL-2.0
/*
 * KUnit: real in-kernel connections through nothing but include/kdat/kdat.h
 * (the storage-driver view), twice: over Soft-RoCE (rxe, the IB CM) and over
 * Soft-iWARP (siw, the iWARP CM).  Needs kdat.ko loaded, an rxe device on the
 * netdev ia_name (scripts/rdma-up) and a siw device on siw_ia_name
 * (scripts/guest-kunit).
 */
#include <linux/delay.h>
#include <linux/inet.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <kunit/test.h>
#include <kdat/kdat.h>

static char *ia_name = "kdat0";
module_param(ia_name, charp, 0444);
static char *peer_addr = "192.0.2.1";
module_param(peer_addr, charp, 0444);
static char *siw_ia_name = "kdat1";
module_param(siw_ia_name, charp, 0444);
static char *siw_peer_addr = "203.0.113.1";
module_param(siw_peer_addr, charp, 0444);

#define WAIT_US		5000000
#define QUIET_US	300000

struct conn_test {
	struct kdat_ia *ia;
	struct kdat_evd *evd;		/* connection events, both sides */
	struct kdat_evd *crevd;		/* connection requests */
	struct kdat_sp *psp;
	struct sockaddr_in peer;
	u16 port;
	bool iwarp;			/* siw: the iWARP CM */
	struct kdat_event_info ev;
};

static u16 next_port = 31000;

/* The IA on netdev name (its RDMA device's name starting with driver), the peer at addr. */
static int conn_init_on(struct kunit *test, const char *name, const char *addr,
			const char *driver)
{
	struct conn_test *t = kunit_kzalloc(test, sizeof(*t), GFP_KERNEL);
	struct kdat_ia_info *info = kunit_kzalloc(test, sizeof(*info), GFP_KERNEL);

	KUNIT_ASSERT_NOT_NULL(test, t);
	KUNIT_ASSERT_NOT_NULL(test, info);
	test->priv = t;
	KUNIT_ASSERT_EQ(test, kdat_ia_open(name, &t->ia), KDAT_DAT_SUCCESS);
	KUNIT_ASSERT_EQ(test, kdat_ia_query(t->ia, info), KDAT_DAT_SUCCESS);
	KUNIT_ASSERT_EQ_MSG(test, strncmp(info->device_name, driver, strlen(driver)), 0,
			    "IA on %s is device %s", name, info->device_name);
	KUNIT_ASSERT_EQ(test, kdat_evd_create(t->ia, 64, KDAT_EVD_CONNECTION, NULL, NULL,
					      &t->evd), KDAT_DAT_SUCCESS);
	KUNIT_ASSERT_EQ(test, kdat_evd_create(t->ia, 64, KDAT_EVD_CR, NULL, NULL, &t->crevd),
			KDAT_DAT_SUCCESS);
	t->iwarp = !strcmp(driver, "siw");
	t->port = next_port++;
	KUNIT_ASSERT_EQ(test, kdat_psp_create(t->ia, t->port, t->crevd, KDAT_PSP_CONSUMER,
					      &t->psp), KDAT_DAT_SUCCESS);
	t->peer.sin_family = AF_INET;
	KUNIT_ASSERT_TRUE(test, in4_pton(addr, -1, (u8 *)&t->peer.sin_addr.s_addr, '\0',
					 NULL));
	return 0;
}

static int conn_init(struct kunit *test)
{
	return conn_init_on(test, ia_name, peer_addr, "rxe");
}

static int conn_init_siw(struct kunit *test)
{
	return conn_init_on(test, siw_ia_name, siw_peer_addr, "siw");
}

static void conn_exit(struct kunit *test)
{
	struct conn_test *t = test->priv;

	/* abrupt close frees every EP, the PSP and the EVDs */
	if (t && t->ia)
		kdat_ia_close(t->ia, KDAT_IA_CLOSE_ABRUPT);
}

static struct kdat_ep *new_ep(struct kunit *test)
{
	struct conn_test *t = test->priv;
	struct kdat_ep_attr attr = { .max_rdma_read_in = 2, .max_rdma_read_out = 2 };
	struct kdat_ep *ep;

	KUNIT_ASSERT_EQ(test, kdat_ep_create(t->ia, t->evd, NULL, NULL, &attr, &ep),
			KDAT_DAT_SUCCESS);
	return ep;
}

/* The next event on evd, which must be `number` (any if 0; for `ep` if given). */
static struct kdat_event_info *expect(struct kunit *test, struct kdat_evd *evd, u32 number,
				      struct kdat_ep *ep)
{
	struct conn_test *t = test->priv;

	KUNIT_ASSERT_EQ(test, kdat_evd_wait(evd, WAIT_US, 1, &t->ev, NULL), KDAT_DAT_SUCCESS);
	if (number)
		KUNIT_EXPECT_EQ(test, t->ev.number, number);
	if (ep)
		KUNIT_EXPECT_PTR_EQ(test, t->ev.ep, ep);
	return &t->ev;
}

static void expect_quiet(struct kunit *test, struct kdat_evd *evd)
{
	struct conn_test *t = test->priv;

	KUNIT_EXPECT_EQ(test, KDAT_RET_TYPE(kdat_evd_wait(evd, QUIET_US, 1, &t->ev, NULL)),
			KDAT_DAT_TIMEOUT_EXPIRED);
}

static u32 state(struct kunit *test, struct kdat_ep *ep)
{
	struct kdat_ep_info *info = kunit_kzalloc(test, sizeof(*info), GFP_KERNEL);

	KUNIT_ASSERT_NOT_NULL(test, info);
	KUNIT_ASSERT_EQ(test, kdat_ep_query(ep, info), KDAT_DAT_SUCCESS);
	return info->state;
}

static struct kdat_cr *connect_and_wait_cr(struct kunit *test, struct kdat_ep *cep,
					   const char *pdata, u32 timeout_us)
{
	struct conn_test *t = test->priv;
	struct kdat_event_info *ev;

	KUNIT_ASSERT_EQ(test, kdat_ep_connect(cep, (struct sockaddr *)&t->peer, t->port,
					      timeout_us, pdata, strlen(pdata),
					      KDAT_DAT_QOS_BEST_EFFORT, KDAT_CONNECT_DEFAULT),
			KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_EQ(test, state(test, cep), (u32)KDAT_EP_ACTIVE_CONNECTION_PENDING);
	ev = expect(test, t->crevd, KDAT_DAT_CONNECTION_REQUEST_EVENT, NULL);
	KUNIT_EXPECT_EQ(test, ev->private_data_size, (u32)strlen(pdata));
	KUNIT_EXPECT_EQ(test, memcmp(ev->private_data, pdata, strlen(pdata)), 0);
	return ev->cr;
}

/* Connect, accept, private data both ways, ESTABLISHED and CONNECTED on both sides. */
static void conn_accept_private_data_both_ways(struct kunit *test)
{
	struct conn_test *t = test->priv;
	struct kdat_ep *cep = new_ep(test), *sep = new_ep(test);
	bool seen_client = false, seen_server = false;
	struct kdat_event_info *ev;
	struct kdat_cr *cr;
	int i;

	cr = connect_and_wait_cr(test, cep, "request", WAIT_US);
	KUNIT_ASSERT_EQ(test, kdat_cr_accept(cr, sep, "reply", 5), KDAT_DAT_SUCCESS);
	/* one ESTABLISHED each, in either order; the active side's carries the reply */
	for (i = 0; i < 2; i++) {
		ev = expect(test, t->evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED, NULL);
		if (ev->ep == cep) {
			seen_client = true;
			KUNIT_EXPECT_EQ(test, ev->private_data_size, 5u);
			KUNIT_EXPECT_EQ(test, memcmp(ev->private_data, "reply", 5), 0);
		} else {
			KUNIT_EXPECT_PTR_EQ(test, ev->ep, sep);
			seen_server = true;
		}
	}
	KUNIT_EXPECT_TRUE(test, seen_client && seen_server);
	KUNIT_EXPECT_EQ(test, state(test, cep), (u32)KDAT_EP_CONNECTED);
	KUNIT_EXPECT_EQ(test, state(test, sep), (u32)KDAT_EP_CONNECTED);
	/* (the CR is gone with the accept: kernel consumers must not touch it again) */
}

static void conn_reject_private_data(struct kunit *test)
{
	struct conn_test *t = test->priv;
	struct kdat_ep *cep = new_ep(test);
	struct kdat_event_info *ev;
	struct kdat_cr *cr;

	cr = connect_and_wait_cr(test, cep, "may I", WAIT_US);
	KUNIT_ASSERT_EQ(test, kdat_cr_reject(cr, "no", 2), KDAT_DAT_SUCCESS);
	ev = expect(test, t->evd, KDAT_DAT_CONNECTION_EVENT_PEER_REJECTED, cep);
	KUNIT_EXPECT_EQ(test, ev->private_data_size, 2u);
	KUNIT_EXPECT_EQ(test, memcmp(ev->private_data, "no", 2), 0);
	KUNIT_EXPECT_EQ(test, state(test, cep), (u32)KDAT_EP_DISCONNECTED);
	expect_quiet(test, t->evd);
}

/* Connected pair helper: returns the client EP, *sepp the server's. */
static struct kdat_ep *connected_pair(struct kunit *test, struct kdat_ep **sepp)
{
	struct conn_test *t = test->priv;
	struct kdat_ep *cep = new_ep(test), *sep = new_ep(test);

	KUNIT_ASSERT_EQ(test, kdat_cr_accept(connect_and_wait_cr(test, cep, "x", WAIT_US), sep,
					     NULL, 0), KDAT_DAT_SUCCESS);
	expect(test, t->evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED, NULL);
	expect(test, t->evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED, NULL);
	*sepp = sep;
	return cep;
}

static void conn_dup_connect_same_remote_end(struct kunit *test)
{
	struct conn_test *t = test->priv;
	struct kdat_ep *sep, *cep = connected_pair(test, &sep), *dup = new_ep(test);
	struct kdat_event_info *ev;

	KUNIT_ASSERT_EQ(test, kdat_ep_dup_connect(dup, cep, WAIT_US, "dup", 3,
						  KDAT_DAT_QOS_BEST_EFFORT), KDAT_DAT_SUCCESS);
	/* the same PSP sees the second request, with the dup's private data */
	ev = expect(test, t->crevd, KDAT_DAT_CONNECTION_REQUEST_EVENT, NULL);
	KUNIT_EXPECT_EQ(test, ev->private_data_size, 3u);
	KUNIT_EXPECT_EQ(test, memcmp(ev->private_data, "dup", 3), 0);
	KUNIT_ASSERT_EQ(test, kdat_cr_reject(ev->cr, NULL, 0), KDAT_DAT_SUCCESS);
	expect(test, t->evd, KDAT_DAT_CONNECTION_EVENT_PEER_REJECTED, dup);
	/* a dup EP that is not connected is refused */
	KUNIT_EXPECT_EQ(test, KDAT_RET_TYPE(kdat_ep_dup_connect(new_ep(test), dup, WAIT_US, NULL,
							      0, KDAT_DAT_QOS_BEST_EFFORT)),
			KDAT_DAT_INVALID_STATE);
}

static void conn_graceful_disconnect(struct kunit *test)
{
	struct conn_test *t = test->priv;
	struct kdat_ep *sep, *cep = connected_pair(test, &sep);

	KUNIT_ASSERT_EQ(test, kdat_ep_disconnect(cep, KDAT_CLOSE_GRACEFUL), KDAT_DAT_SUCCESS);
	expect(test, t->evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED, NULL);
	expect(test, t->evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED, NULL);
	KUNIT_EXPECT_EQ(test, state(test, cep), (u32)KDAT_EP_DISCONNECTED);
	KUNIT_EXPECT_EQ(test, state(test, sep), (u32)KDAT_EP_DISCONNECTED);
	/* disconnecting a DISCONNECTED EP is a no-op */
	KUNIT_EXPECT_EQ(test, kdat_ep_disconnect(cep, KDAT_CLOSE_ABRUPT), KDAT_DAT_SUCCESS);
	expect_quiet(test, t->evd);
}

static void conn_abrupt_disconnect(struct kunit *test)
{
	struct conn_test *t = test->priv;
	struct kdat_ep *sep, *cep = connected_pair(test, &sep);

	KUNIT_ASSERT_EQ(test, kdat_ep_disconnect(sep, KDAT_CLOSE_ABRUPT), KDAT_DAT_SUCCESS);
	/* abrupt: DISCONNECTED at once, before the call returns */
	KUNIT_EXPECT_EQ(test, state(test, sep), (u32)KDAT_EP_DISCONNECTED);
	expect(test, t->evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED, NULL);
	expect(test, t->evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED, NULL);
	KUNIT_EXPECT_EQ(test, state(test, cep), (u32)KDAT_EP_DISCONNECTED);
	KUNIT_EXPECT_EQ(test, kdat_ep_reset(cep), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_EQ(test, state(test, cep), (u32)KDAT_EP_UNCONNECTED);
}

/* The timeout really cancels: a late accept yields no second event on the active side. */
static void conn_timeout_then_late_accept(struct kunit *test)
{
	struct conn_test *t = test->priv;
	struct kdat_ep *cep = new_ep(test), *sep = new_ep(test);
	struct kdat_cr *cr = connect_and_wait_cr(test, cep, "slow", 300000);
	kdat_ret_t ret;

	expect(test, t->evd, KDAT_DAT_CONNECTION_EVENT_TIMED_OUT, cep);
	KUNIT_EXPECT_EQ(test, state(test, cep), (u32)KDAT_EP_DISCONNECTED);
	msleep(500);
	/* the requester gave up: the accept completes with an error, asynchronously */
	ret = kdat_cr_accept(cr, sep, NULL, 0);
	KUNIT_EXPECT_EQ(test, ret, KDAT_DAT_SUCCESS);
	if (ret == KDAT_DAT_SUCCESS && !t->iwarp) {
		expect(test, t->evd, KDAT_DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR, sep);
	} else if (ret == KDAT_DAT_SUCCESS) {
		/*
		 * iWARP has no REJ and no RTU.  iw_cm destroys a requester's id
		 * only once its MPA reply is in (destroy_cm_id waits out
		 * CONN_SENT), so the requester's TCP stream is still open: the
		 * accept is ESTABLISHED when its reply is sent, and the
		 * requester's id, destroyed then, ends it with DISCONNECTED.
		 */
		expect(test, t->evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED, sep);
		expect(test, t->evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED, sep);
	}
	expect_quiet(test, t->evd);
	KUNIT_EXPECT_EQ(test, state(test, sep), (u32)KDAT_EP_DISCONNECTED);
}

/* Each suite needs its own array: KUnit keeps a case's status and log in it. */
static struct kunit_case kdat_conn_cases[] = {
	KUNIT_CASE(conn_accept_private_data_both_ways),
	KUNIT_CASE(conn_reject_private_data),
	KUNIT_CASE(conn_dup_connect_same_remote_end),
	KUNIT_CASE(conn_graceful_disconnect),
	KUNIT_CASE(conn_abrupt_disconnect),
	KUNIT_CASE(conn_timeout_then_late_accept),
	{}
};

static struct kunit_case kdat_conn_siw_cases[] = {
	KUNIT_CASE(conn_accept_private_data_both_ways),
	KUNIT_CASE(conn_reject_private_data),
	KUNIT_CASE(conn_dup_connect_same_remote_end),
	KUNIT_CASE(conn_graceful_disconnect),
	KUNIT_CASE(conn_abrupt_disconnect),
	KUNIT_CASE(conn_timeout_then_late_accept),
	{}
};

static struct kunit_suite kdat_conn_suite = {
	.name = "kdat_rxe_connections",
	.init = conn_init,
	.exit = conn_exit,
	.test_cases = kdat_conn_cases,
};

/* The same cases over Soft-iWARP: the iWARP CM's event order and private data. */
static struct kunit_suite kdat_conn_siw_suite = {
	.name = "kdat_siw_connections",
	.init = conn_init_siw,
	.exit = conn_exit,
	.test_cases = kdat_conn_siw_cases,
};
kunit_test_suites(&kdat_conn_suite, &kdat_conn_siw_suite);

MODULE_DESCRIPTION("KUnit: kdat in-kernel connections over Soft-RoCE and Soft-iWARP");
MODULE_LICENSE("GPL");
