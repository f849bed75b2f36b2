// SPDX-License-Identifier: GPL-2.0
/*
 * KUnit: kdat's endpoint logic against a fake connection manager.
 *
 * The IA opens on the real Soft-RoCE device (PD, CQs and QPs are real), then
 * kdat_test_ia_set_cm_ops() swaps its rdma_cm for the fake below, which
 * records every call and lets a test deliver rdma_cm events in exact orders,
 * the way rdma_cm does: with the id's handler mutex held, destroying the id
 * when the handler returns non-zero, never after destroy_id began.  Holding
 * an id's handler mutex from the test is "an event for this id is already on
 * its way": kdat's other paths run meanwhile, and the event is delivered
 * after them -- the races a real fabric makes hard to provoke.
 *
 * Expected outcomes come from include/kdat/ep_table.h (kdat_ep_lookup), so
 * each case checks kdat against the table, not against a copy of it.
 */
#include <linux/delay.h>
#include <linux/inet.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/wait.h>
#include <linux/workqueue.h>
#include <kunit/test.h>
#include <rdma/ib_cm.h>
#include <kdat/kdat.h>
#include "kdat_cm.h"
#include "kdat_conn.h"

static char *ia_name = "kdat0";
module_param(ia_name, charp, 0444);

#define WAIT_US		5000000
#define SHORT_TIMEOUT_US 50000
#define MAX_EVENTS	16

/* ---- the fake CM -------------------------------------------------------------- */

enum fake_op {
	OP_CREATE, OP_DESTROY, OP_BIND, OP_LISTEN, OP_RESOLVE_ADDR, OP_RESOLVE_ROUTE,
	OP_CONNECT, OP_ACCEPT, OP_RTU, OP_REJECT, OP_DISCONNECT, OP_LOCK, OP_MODIFY_QP,
	OP_QP_ATTR, OP_COUNT
};

struct fake_id {
	struct rdma_cm_id id;
	struct mutex handler_mutex;	/* held around every upcall, as in rdma_cm */
	struct list_head node;
	unsigned int calls[OP_COUNT];
	bool destroyed;			/* destroy_id ran, or the CM destroyed it */
	bool cm_destroyed;		/* the handler returned non-zero */
	u8 reject_reason;
	u8 reject_len;
	u8 reject_pdata[IB_CM_REJ_PRIVATE_DATA_SIZE];
	/* what the last connect_locked sent */
	u32 connect_qpn;
	u8 connect_len;
	u8 connect_pdata[IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE];
};

static struct {
	struct mutex lock;		/* ids, calls, fail */
	struct list_head ids;
	unsigned int calls[OP_COUNT];
	int fail[OP_COUNT];		/* the next call of the op returns this */
	unsigned int unlocked;		/* accept/connect without the handler mutex */
	struct kdat_ia *ia;		/* the test IA: its owner and EP locks, the handlers' */
	unsigned int owner_held[OP_COUNT];	/* calls made holding one of them */
	unsigned int double_destroy;
	wait_queue_head_t wq;		/* destroyed ids */
	/* run inside the next accept (REP), where kdat holds neither ctx->lock nor ep->lock */
	void (*during_accept)(void *arg);
	void *during_accept_arg;
	/* the same for the next RTU */
	void (*during_rtu)(void *arg);
	void *during_rtu_arg;
	/* run inside the next disconnect (a DREQ, made after the EP's lock) */
	void (*during_disconnect)(void *arg);
	void *during_disconnect_arg;
} fake;

static struct fake_id *to_fake(struct rdma_cm_id *id)
{
	return container_of(id, struct fake_id, id);
}

/* Counts a call; returns the error injected for it, if any. */
static int fake_record(struct fake_id *f, enum fake_op op)
{
	int ret;

	mutex_lock(&fake.lock);
	if (f)
		f->calls[op]++;
	fake.calls[op]++;
	/* under fake.lock: fcm_exit() clears fake.ia before the IA goes */
	if (fake.ia && kdat_test_cm_call_locked(fake.ia, f ? &f->id : NULL))
		fake.owner_held[op]++;
	ret = fake.fail[op];
	fake.fail[op] = 0;
	mutex_unlock(&fake.lock);
	return ret;
}

static struct fake_id *fake_new(rdma_cm_event_handler handler, void *context)
{
	struct fake_id *f = kzalloc(sizeof(*f), GFP_KERNEL);

	if (!f)
		return NULL;
	mutex_init(&f->handler_mutex);
	f->id.event_handler = handler;
	f->id.context = context;
	f->id.ps = RDMA_PS_TCP;
	f->id.qp_type = IB_QPT_RC;
	mutex_lock(&fake.lock);
	list_add_tail(&f->node, &fake.ids);
	mutex_unlock(&fake.lock);
	return f;
}

static struct rdma_cm_id *fake_create_id(struct net *net, rdma_cm_event_handler handler,
					 void *context, const char *kern_name,
					 enum rdma_ucm_port_space ps)
{
	struct fake_id *f;
	int err = fake_record(NULL, OP_CREATE);

	if (err)
		return ERR_PTR(err);
	f = fake_new(handler, context);
	if (!f)
		return ERR_PTR(-ENOMEM);
	f->calls[OP_CREATE] = 1;
	f->id.ps = ps;
	f->id.qp_type = ps == RDMA_PS_UDP ? IB_QPT_UD : IB_QPT_RC;
	return &f->id;
}

static void fake_destroy_id(struct rdma_cm_id *id)
{
	struct fake_id *f = to_fake(id);

	fake_record(f, OP_DESTROY);
	/* waits for a running upcall; none is delivered after this */
	mutex_lock(&f->handler_mutex);
	if (f->destroyed)
		fake.double_destroy++;
	WRITE_ONCE(f->destroyed, true);
	mutex_unlock(&f->handler_mutex);
	wake_up_all(&fake.wq);
}

static void fake_copy_addr(struct sockaddr_storage *dst, const struct sockaddr *src)
{
	memset(dst, 0, sizeof(*dst));
	if (src && src->sa_family == AF_INET)
		memcpy(dst, src, sizeof(struct sockaddr_in));
}

static int fake_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	fake_copy_addr(&id->route.addr.src_addr, addr);
	return fake_record(to_fake(id), OP_BIND);
}

static int fake_listen(struct rdma_cm_id *id, int backlog)
{
	return fake_record(to_fake(id), OP_LISTEN);
}

static int fake_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src,
			     const struct sockaddr *dst, unsigned long timeout_ms)
{
	fake_copy_addr(&id->route.addr.src_addr, src);
	fake_copy_addr(&id->route.addr.dst_addr, dst);
	return fake_record(to_fake(id), OP_RESOLVE_ADDR);
}

static int fake_resolve_route(struct rdma_cm_id *id, unsigned long timeout_ms)
{
	return fake_record(to_fake(id), OP_RESOLVE_ROUTE);
}

static void fake_check_locked(struct fake_id *f)
{
	if (!lockdep_is_held(&f->handler_mutex)) {
		mutex_lock(&fake.lock);
		fake.unlocked++;
		mutex_unlock(&fake.lock);
	}
}

static int fake_connect_locked(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	struct fake_id *f = to_fake(id);

	f->connect_qpn = param->qp_num;
	f->connect_len = min_t(u8, param->private_data_len, sizeof(f->connect_pdata));
	memcpy(f->connect_pdata, param->private_data, f->connect_len);
	fake_check_locked(to_fake(id));
	return fake_record(to_fake(id), OP_CONNECT);
}

static int fake_accept(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	void (*during)(void *arg) = param ? fake.during_accept : fake.during_rtu;
	void *arg = param ? fake.during_accept_arg : fake.during_rtu_arg;

	fake_check_locked(to_fake(id));
	if (during) {
		if (param)
			fake.during_accept = NULL;
		else
			fake.during_rtu = NULL;
		during(arg);
	}
	return fake_record(to_fake(id), param ? OP_ACCEPT : OP_RTU);
}

static int fake_reject(struct rdma_cm_id *id, const void *pdata, u8 len, u8 reason)
{
	struct fake_id *f = to_fake(id);

	f->reject_reason = reason;
	f->reject_len = min_t(u8, len, sizeof(f->reject_pdata));
	memcpy(f->reject_pdata, pdata, f->reject_len);
	return fake_record(f, OP_REJECT);
}

static int fake_disconnect(struct rdma_cm_id *id)
{
	void (*during)(void *arg) = fake.during_disconnect;

	if (during) {
		fake.during_disconnect = NULL;
		during(fake.during_disconnect_arg);
	}
	return fake_record(to_fake(id), OP_DISCONNECT);
}

static void fake_lock_handler(struct rdma_cm_id *id)
{
	/* counted before it blocks: a test can see a caller waiting for it */
	fake_record(to_fake(id), OP_LOCK);
	mutex_lock(&to_fake(id)->handler_mutex);
}

static void fake_unlock_handler(struct rdma_cm_id *id)
{
	mutex_unlock(&to_fake(id)->handler_mutex);
}

static const void *fake_consumer_reject_data(struct rdma_cm_id *id, struct rdma_cm_event *ev,
					     u8 *len)
{
	if (ev->event != RDMA_CM_EVENT_REJECTED || ev->status != IB_CM_REJ_CONSUMER_DEFINED)
		return NULL;
	*len = ev->param.conn.private_data_len;
	return ev->param.conn.private_data;
}

/* A fake id has no route: QP transitions leave the real QP alone. */
static int fake_modify_qp(struct rdma_cm_id *id, struct ib_qp *qp, enum ib_qp_state state,
			  u32 ird, u32 ord)
{
	return fake_record(to_fake(id), OP_MODIFY_QP);
}

/* No path either: a user QP gets its state and nothing else. */
static int fake_init_qp_attr(struct rdma_cm_id *id, struct ib_qp_attr *attr, int *mask)
{
	*mask = IB_QP_STATE;
	return fake_record(to_fake(id), OP_QP_ATTR);
}

static const struct kdat_cm_ops fake_ops = {
	.create_id = fake_create_id,
	.destroy_id = fake_destroy_id,
	.bind_addr = fake_bind_addr,
	.listen = fake_listen,
	.resolve_addr = fake_resolve_addr,
	.resolve_route = fake_resolve_route,
	.connect_locked = fake_connect_locked,
	.accept = fake_accept,
	.reject = fake_reject,
	.disconnect = fake_disconnect,
	.lock_handler = fake_lock_handler,
	.unlock_handler = fake_unlock_handler,
	.consumer_reject_data = fake_consumer_reject_data,
	.modify_qp = fake_modify_qp,
	.init_qp_attr = fake_init_qp_attr,
};

/* The id created last (the EP's after a connect, the listener's after psp_create). */
static struct fake_id *fake_last(void)
{
	struct fake_id *f;

	mutex_lock(&fake.lock);
	f = list_empty(&fake.ids) ? NULL : list_last_entry(&fake.ids, struct fake_id, node);
	mutex_unlock(&fake.lock);
	return f;
}

/*
 * Delivers ev to f; the caller holds f's handler mutex.  Returns the
 * handler's answer, or -ENOENT if the id is destroyed (no upcall).
 */
static int fake_deliver_locked(struct fake_id *f, struct rdma_cm_event *ev)
{
	int ret;

	lockdep_assert_held(&f->handler_mutex);
	if (f->destroyed)
		return -ENOENT;
	ret = f->id.event_handler(&f->id, ev);
	if (ret) {
		/* rdma_cm destroys an id whose handler returned non-zero */
		f->cm_destroyed = true;
		WRITE_ONCE(f->destroyed, true);
		wake_up_all(&fake.wq);
	}
	return ret;
}

static int fake_deliver(struct fake_id *f, struct rdma_cm_event *ev)
{
	int ret;

	mutex_lock(&f->handler_mutex);
	ret = fake_deliver_locked(f, ev);
	mutex_unlock(&f->handler_mutex);
	return ret;
}

static struct rdma_cm_event fake_ev(enum rdma_cm_event_type type, int status,
				    const void *pdata, u8 len)
{
	struct rdma_cm_event ev = { .event = type, .status = status };

	ev.param.conn.private_data = pdata;
	ev.param.conn.private_data_len = len;
	return ev;
}

static int fake_event(struct fake_id *f, enum rdma_cm_event_type type)
{
	struct rdma_cm_event ev = fake_ev(type, 0, NULL, 0);

	return fake_deliver(f, &ev);
}

/*
 * A connection request on a listener: like rdma_cm, a child id with the
 * listener's handler and context gets CONNECT_REQUEST.  Returns the child.
 */
static struct fake_id *fake_request(struct kunit *test, struct fake_id *listener,
				    const char *pdata)
{
	struct rdma_cm_event ev = fake_ev(RDMA_CM_EVENT_CONNECT_REQUEST, 0, pdata,
					  pdata ? strlen(pdata) : 0);
	struct sockaddr_in *peer;
	struct fake_id *child;

	child = fake_new(listener->id.event_handler, listener->id.context);
	KUNIT_ASSERT_NOT_NULL(test, child);
	child->id.route.addr.src_addr = listener->id.route.addr.src_addr;
	peer = (struct sockaddr_in *)&child->id.route.addr.dst_addr;
	peer->sin_family = AF_INET;
	peer->sin_addr.s_addr = in_aton("192.0.2.88");
	peer->sin_port = htons(40000);
	ev.param.conn.initiator_depth = 1;
	ev.param.conn.responder_resources = 1;
	ev.param.conn.retry_count = 7;
	ev.param.conn.rnr_retry_count = 7;
	KUNIT_EXPECT_EQ(test, fake_deliver(child, &ev), 0);
	return child;
}

static bool fake_wait_destroyed(struct fake_id *f)
{
	return wait_event_timeout(fake.wq, READ_ONCE(f->destroyed), 5 * HZ) > 0;
}

static void fake_reset(void)
{
	struct fake_id *f, *tmp;

	mutex_lock(&fake.lock);
	list_for_each_entry_safe(f, tmp, &fake.ids, node) {
		list_del(&f->node);
		kfree(f);
	}
	memset(fake.calls, 0, sizeof(fake.calls));
	memset(fake.fail, 0, sizeof(fake.fail));
	memset(fake.owner_held, 0, sizeof(fake.owner_held));
	fake.ia = NULL;
	fake.unlocked = 0;
	fake.double_destroy = 0;
	fake.during_accept = NULL;
	fake.during_rtu = NULL;
	fake.during_disconnect = NULL;
	mutex_unlock(&fake.lock);
}

/* ---- the test fixture ------------------------------------------------------------- */

struct fcm_test {
	struct kdat_ia *ia;
	struct kdat_evd *evd;		/* connection events */
	struct kdat_evd *crevd;		/* connection requests */
	struct kdat_sp *psp;
	struct fake_id *listener;	/* the PSP's id */
	struct kdat_event_info ev;
	u16 port;
};

static int fcm_init(struct kunit *test)
{
	struct fcm_test *t = kunit_kzalloc(test, sizeof(*t), GFP_KERNEL);

	KUNIT_ASSERT_NOT_NULL(test, t);
	test->priv = t;
	fake_reset();
	KUNIT_ASSERT_EQ(test, kdat_ia_open(ia_name, &t->ia), KDAT_DAT_SUCCESS);
	KUNIT_ASSERT_EQ(test, kdat_test_ia_set_cm_ops(t->ia, &fake_ops), 0);
	mutex_lock(&fake.lock);
	fake.ia = t->ia;
	mutex_unlock(&fake.lock);
	KUNIT_ASSERT_EQ(test, kdat_evd_create(t->ia, 64, KDAT_EVD_CONNECTION, NULL, NULL,
					      &t->evd), KDAT_DAT_SUCCESS);
	KUNIT_ASSERT_EQ(test, kdat_evd_create(t->ia, 64, KDAT_EVD_CR, NULL, NULL, &t->crevd),
			KDAT_DAT_SUCCESS);
	t->port = 4000;
	KUNIT_ASSERT_EQ(test, kdat_psp_create(t->ia, t->port, t->crevd, KDAT_PSP_CONSUMER,
					      &t->psp), KDAT_DAT_SUCCESS);
	t->listener = fake_last();
	KUNIT_ASSERT_NOT_NULL(test, t->listener);
	KUNIT_EXPECT_EQ(test, t->listener->calls[OP_LISTEN], 1u);
	return 0;
}

static void fcm_exit(struct kunit *test)
{
	struct fcm_test *t = test->priv;
	struct fake_id *f, *tmp;
	LIST_HEAD(live);

	if (!t || !t->ia)
		return;
	mutex_lock(&fake.lock);
	fake.ia = NULL;
	mutex_unlock(&fake.lock);
	kdat_ia_close(t->ia, KDAT_IA_CLOSE_ABRUPT);
	/* Ids that outlive the IA are orphans (an accepted connection walked away from). */
	mutex_lock(&fake.lock);
	list_for_each_entry_safe(f, tmp, &fake.ids, node)
		if (!READ_ONCE(f->destroyed))
			list_move_tail(&f->node, &live);
	mutex_unlock(&fake.lock);
	list_for_each_entry_safe(f, tmp, &live, node) {
		/* an orphan ends on DISCONNECTED; an id still held by a freed object is a leak */
		fake_event(f, RDMA_CM_EVENT_DISCONNECTED);
		if (!READ_ONCE(f->destroyed)) {
			KUNIT_FAIL(test, "a cm id outlived its IA");
			list_del(&f->node);	/* leak it: kdat may still use it */
			continue;
		}
		mutex_lock(&fake.lock);
		list_move_tail(&f->node, &fake.ids);
		mutex_unlock(&fake.lock);
	}
	KUNIT_EXPECT_EQ(test, fake.unlocked, 0u);
	KUNIT_EXPECT_EQ(test, fake.double_destroy, 0u);
	/*
	 * The consumer's DREQ and REJ, like the handlers' sends, go out after
	 * the owner's and the EP's locks (kdat_base.h's lock order), on every
	 * path a test took.
	 */
	KUNIT_EXPECT_EQ(test, fake.owner_held[OP_DISCONNECT], 0u);
	KUNIT_EXPECT_EQ(test, fake.owner_held[OP_REJECT], 0u);
	KUNIT_EXPECT_EQ(test, fake.owner_held[OP_ACCEPT], 0u);
	KUNIT_EXPECT_EQ(test, fake.owner_held[OP_RTU], 0u);
	KUNIT_EXPECT_EQ(test, fake.owner_held[OP_CONNECT], 0u);
	fake_reset();
}

static struct kdat_ep *new_ep(struct kunit *test)
{
	struct fcm_test *t = test->priv;
	struct kdat_ep_attr attr = { .max_rdma_read_in = 1, .max_rdma_read_out = 1 };
	struct kdat_ep *ep;

	KUNIT_ASSERT_EQ(test, kdat_ep_create(t->ia, t->evd, NULL, NULL, &attr, &ep),
			KDAT_DAT_SUCCESS);
	return ep;
}

static u32 ep_state(struct kunit *test, struct kdat_ep *ep)
{
	struct kdat_ep_info *info = kunit_kzalloc(test, sizeof(*info), GFP_KERNEL);

	KUNIT_ASSERT_NOT_NULL(test, info);
	KUNIT_ASSERT_EQ(test, kdat_ep_query(ep, info), KDAT_DAT_SUCCESS);
	return info->state;
}

/* The table's answer, which must be GO (the case is built on it). */
static struct kdat_ep_step go(struct kunit *test, unsigned int state, unsigned int stim)
{
	struct kdat_ep_step s = kdat_ep_lookup(state, stim);

	KUNIT_EXPECT_EQ(test, s.action, (unsigned int)KDAT_EP_GO);
	return s;
}

static void expect_stale(struct kunit *test, unsigned int state, unsigned int stim)
{
	KUNIT_EXPECT_EQ(test, kdat_ep_lookup(state, stim).action, (unsigned int)KDAT_EP_STALE);
}

/*
 * The events on the connection EVD are exactly want[0..n) (0 entries are
 * skipped: a rule that posts nothing), in order, each for ep.  The first is
 * waited for (a timer may post it); the rest must be queued already.
 */
static void expect_events(struct kunit *test, struct kdat_ep *ep, const u32 *want,
			  unsigned int n)
{
	struct fcm_test *t = test->priv;
	u32 got[MAX_EVENTS];
	unsigned int i, k = 0, m = 0;
	kdat_ret_t ret;

	for (i = 0; i < n; i++)
		if (want[i])
			k++;
	if (k && kdat_evd_wait(t->evd, WAIT_US, 1, &t->ev, NULL) == KDAT_DAT_SUCCESS) {
		got[m++] = t->ev.number;
		KUNIT_EXPECT_PTR_EQ(test, t->ev.ep, ep);
	}
	while ((ret = kdat_evd_dequeue(t->evd, &t->ev, NULL)) == KDAT_DAT_SUCCESS) {
		if (m < MAX_EVENTS)
			got[m] = t->ev.number;
		m++;
		KUNIT_EXPECT_PTR_EQ(test, t->ev.ep, ep);
	}
	KUNIT_EXPECT_EQ(test, KDAT_RET_TYPE(ret), KDAT_DAT_QUEUE_EMPTY);
	KUNIT_EXPECT_EQ_MSG(test, m, k, "number of connection events");
	for (i = 0, k = 0; i < n && k < m && k < MAX_EVENTS; i++) {
		if (!want[i])
			continue;
		KUNIT_EXPECT_EQ_MSG(test, got[k], want[i], "event %u", k);
		k++;
	}
}

#define EXPECT_EVENTS(test, ep, ...) \
	expect_events(test, ep, (const u32[]){ __VA_ARGS__ }, \
		      ARRAY_SIZE(((const u32[]){ __VA_ARGS__ })))

static void expect_no_events(struct kunit *test)
{
	expect_events(test, NULL, NULL, 0);
}

/* The next connection request event; returns its CR. */
static struct kdat_cr *expect_cr(struct kunit *test)
{
	struct fcm_test *t = test->priv;

	KUNIT_ASSERT_EQ(test, kdat_evd_dequeue(t->crevd, &t->ev, NULL), KDAT_DAT_SUCCESS);
	KUNIT_ASSERT_EQ(test, t->ev.number, (u32)KDAT_DAT_CONNECTION_REQUEST_EVENT);
	return t->ev.cr;
}

/* ---- driving an EP with the fake ---------------------------------------------------- */

/* connect: ACTIVE_CONNECTION_PENDING with its id resolving the address. */
static struct fake_id *active_pending(struct kunit *test, struct kdat_ep *ep, u32 timeout_us)
{
	struct sockaddr_in peer = { .sin_family = AF_INET };
	struct fake_id *f;

	peer.sin_addr.s_addr = in_aton("192.0.2.77");
	KUNIT_ASSERT_EQ(test, kdat_ep_connect(ep, (struct sockaddr *)&peer, 4444, timeout_us,
					      "hello", 5, KDAT_DAT_QOS_BEST_EFFORT,
					      KDAT_CONNECT_DEFAULT), KDAT_DAT_SUCCESS);
	f = fake_last();
	KUNIT_ASSERT_NOT_NULL(test, f);
	KUNIT_EXPECT_EQ(test, f->calls[OP_RESOLVE_ADDR], 1u);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep),
			go(test, KDAT_EP_UNCONNECTED, KDAT_EP_STIM_CONNECT).next);
	return f;
}

/* ... and address and route resolved: the REQ is on the wire. */
static struct fake_id *active_routed(struct kunit *test, struct kdat_ep *ep, u32 timeout_us)
{
	struct fake_id *f = active_pending(test, ep, timeout_us);

	KUNIT_EXPECT_EQ(test, fake_event(f, RDMA_CM_EVENT_ADDR_RESOLVED), 0);
	KUNIT_EXPECT_EQ(test, f->calls[OP_RESOLVE_ROUTE], 1u);
	KUNIT_EXPECT_EQ(test, fake_event(f, RDMA_CM_EVENT_ROUTE_RESOLVED), 0);
	KUNIT_EXPECT_EQ(test, f->calls[OP_CONNECT], 1u);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), (u32)KDAT_EP_ACTIVE_CONNECTION_PENDING);
	return f;
}

/* ... and the peer's REP arrived: CONNECTED with one ESTABLISHED. */
static struct fake_id *active_connected(struct kunit *test, struct kdat_ep *ep)
{
	struct fake_id *f = active_routed(test, ep, KDAT_TIMEOUT_INFINITE);
	struct rdma_cm_event ev = fake_ev(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, NULL, 0);
	struct kdat_ep_step s = go(test, KDAT_EP_ACTIVE_CONNECTION_PENDING,
				   KDAT_EP_STIM_ESTABLISHED);

	KUNIT_EXPECT_EQ(test, fake_deliver(f, &ev), 0);
	KUNIT_EXPECT_EQ(test, f->calls[OP_RTU], 1u);
	EXPECT_EVENTS(test, ep, s.event);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
	return f;
}

/* A request on the PSP accepted on ep: COMPLETION_PENDING; returns the child id. */
static struct fake_id *passive_accepted(struct kunit *test, struct kdat_ep *ep)
{
	struct fcm_test *t = test->priv;
	struct fake_id *child = fake_request(test, t->listener, "req");
	struct kdat_cr *cr = expect_cr(test);

	KUNIT_ASSERT_EQ(test, kdat_cr_accept(cr, ep, "rep", 3), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_EQ(test, child->calls[OP_ACCEPT], 1u);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep),
			go(test, KDAT_EP_UNCONNECTED, KDAT_EP_STIM_ACCEPT).next);
	expect_no_events(test);
	return child;
}

/* A kdat call run by another thread, for what blocks on a handler mutex the test holds. */
struct async_call {
	struct work_struct work;
	struct completion done;
	struct kdat_ia *ia;
	struct kdat_ep *ep;
	struct kdat_cr *cr;
	u32 flags;
	kdat_ret_t ret;
	u32 state;		/* async_query_fn's answer */
	struct fake_id *f;	/* async_event_fn: the id and its event */
	struct rdma_cm_event ev;
};

static void async_event_fn(struct work_struct *work)
{
	struct async_call *a = container_of(work, struct async_call, work);

	a->ret = fake_deliver(a->f, &a->ev);
	complete_all(&a->done);
}

static void async_disconnect_fn(struct work_struct *work)
{
	struct async_call *a = container_of(work, struct async_call, work);

	a->ret = kdat_ep_disconnect(a->ep, a->flags);
	complete_all(&a->done);	/* async_finish() may follow a wait of its own */
}

static void async_query_fn(struct work_struct *work)
{
	struct async_call *a = container_of(work, struct async_call, work);
	struct kdat_ep_info *info = kzalloc(sizeof(*info), GFP_KERNEL);

	a->ret = info ? kdat_ep_query(a->ep, info) : -ENOMEM;
	a->state = info ? info->state : 0;
	kfree(info);
	complete_all(&a->done);
}

static void async_accept_fn(struct work_struct *work)
{
	struct async_call *a = container_of(work, struct async_call, work);

	a->ret = kdat_cr_accept(a->cr, a->ep, NULL, 0);
	complete_all(&a->done);	/* async_finish() may follow a wait of its own */
}

static struct async_call *async_start(struct kunit *test, work_func_t fn, struct kdat_ep *ep,
				      struct kdat_cr *cr, u32 flags)
{
	struct async_call *a = kunit_kzalloc(test, sizeof(*a), GFP_KERNEL);

	KUNIT_ASSERT_NOT_NULL(test, a);
	a->ep = ep;
	a->cr = cr;
	a->flags = flags;
	init_completion(&a->done);
	INIT_WORK(&a->work, fn);
	queue_work(system_unbound_wq, &a->work);
	return a;
}

/* Delivers ev to f from another thread (rdma_cm's work queue, in the real CM). */
static struct async_call *async_deliver(struct kunit *test, struct fake_id *f,
					struct rdma_cm_event ev)
{
	struct async_call *a = kunit_kzalloc(test, sizeof(*a), GFP_KERNEL);

	KUNIT_ASSERT_NOT_NULL(test, a);
	a->f = f;
	a->ev = ev;
	init_completion(&a->done);
	INIT_WORK(&a->work, async_event_fn);
	queue_work(system_unbound_wq, &a->work);
	return a;
}

static void async_removal_fn(struct work_struct *work)
{
	struct async_call *a = container_of(work, struct async_call, work);

	kdat_test_ia_device_removed(a->ia);
	complete_all(&a->done);	/* async_finish() may follow a wait of its own */
}

/* Device removal of the IA, by another thread; waits for it. */
static void async_removal(struct kunit *test, struct kdat_ia *ia)
{
	struct async_call *a = kunit_kzalloc(test, sizeof(*a), GFP_KERNEL);

	KUNIT_ASSERT_NOT_NULL(test, a);
	a->ia = ia;
	init_completion(&a->done);
	INIT_WORK(&a->work, async_removal_fn);
	queue_work(system_unbound_wq, &a->work);
	KUNIT_ASSERT_TRUE(test, wait_for_completion_timeout(&a->done, 10 * HZ) > 0);
}

static kdat_ret_t async_finish(struct kunit *test, struct async_call *a)
{
	KUNIT_ASSERT_TRUE(test, wait_for_completion_timeout(&a->done, 10 * HZ) > 0);
	return a->ret;
}

/* Waits until someone is blocked taking f's handler mutex (fake_lock_handler). */
static bool wait_lock_waiter(struct fake_id *f, unsigned int n)
{
	int i;

	for (i = 0; i < 250; i++) {
		if (READ_ONCE(f->calls[OP_LOCK]) >= n)
			return true;
		msleep(20);
	}
	return false;
}

/* ---- the cases ---------------------------------------------------------------------- */

/*
 * The connect timeout fires while the peer's REP is on its way: the REP
 * reaches kdat's handler only after the timer made the EP DISCONNECTED.
 * One TIMED_OUT, no ESTABLISHED, no RTU, the id destroyed once.
 */
static void timeout_then_connect_response(struct kunit *test)
{
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *f = active_routed(test, ep, SHORT_TIMEOUT_US);
	struct kdat_ep_step s = go(test, KDAT_EP_ACTIVE_CONNECTION_PENDING, KDAT_EP_STIM_TIMEOUT);
	struct rdma_cm_event rep = fake_ev(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, "late", 4);
	int ret;

	mutex_lock(&f->handler_mutex);		/* the REP's upcall has begun */
	EXPECT_EVENTS(test, ep, s.event);	/* the timer ran meanwhile */
	ret = fake_deliver_locked(f, &rep);
	mutex_unlock(&f->handler_mutex);
	KUNIT_EXPECT_EQ(test, ret, 0);
	KUNIT_EXPECT_TRUE(test, fake_wait_destroyed(f));
	expect_stale(test, s.next, KDAT_EP_STIM_ESTABLISHED);
	expect_no_events(test);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
	KUNIT_EXPECT_EQ(test, f->calls[OP_RTU], 0u);
	KUNIT_EXPECT_EQ(test, f->calls[OP_DESTROY], 1u);
	KUNIT_EXPECT_FALSE(test, f->cm_destroyed);
}

/*
 * The deadline passes while the CM's own failure (here: the address lookup
 * gave up) already waits for the EP's lock, ahead of the timer's work: a
 * loaded machine's order.  The consumer asked for a timeout and the attempt
 * outlived it: one TIMED_OUT, not UNREACHABLE, and the id destroyed once.
 */
static void timeout_due_before_addr_error(struct kunit *test)
{
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *f = active_pending(test, ep, SHORT_TIMEOUT_US);
	struct kdat_ep_step s = go(test, KDAT_EP_ACTIVE_CONNECTION_PENDING, KDAT_EP_STIM_TIMEOUT);
	struct async_call *a;

	KUNIT_EXPECT_EQ(test, kdat_ep_lookup(KDAT_EP_ACTIVE_CONNECTION_PENDING,
					     KDAT_EP_STIM_UNREACHABLE).event,
			(unsigned int)KDAT_EP_EVENT_UNREACHABLE);
	kdat_test_ep_hold(ep, true);
	a = async_deliver(test, f, fake_ev(RDMA_CM_EVENT_ADDR_ERROR, -ETIMEDOUT, NULL, 0));
	msleep(20);	/* the upcall starts and waits on the lock */
	/* the deadline passes: the timer's work queues up behind the upcall */
	msleep(3 * SHORT_TIMEOUT_US / 1000);
	kdat_test_ep_hold(ep, false);
	async_finish(test, a);
	EXPECT_EVENTS(test, ep, s.event);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
	KUNIT_EXPECT_TRUE(test, fake_wait_destroyed(f));
	KUNIT_EXPECT_EQ(test, f->calls[OP_DESTROY] + (f->cm_destroyed ? 1u : 0u), 1u);
	KUNIT_EXPECT_EQ(test, f->calls[OP_CONNECT], 0u);
}

/*
 * Per-EP locking: one EP's CM event and a consumer's disconnect of another
 * EP both finish while a third party holds the owner's lock and a third
 * EP's lock, as a long call on the owner's lists or on that EP would: no
 * EP's connection work waits for another's.
 */
static void ep_work_waits_for_no_other_lock(struct kunit *test)
{
	struct fcm_test *t = test->priv;
	struct kdat_ep *ep = new_ep(test), *ep2 = new_ep(test), *held = new_ep(test);
	struct fake_id *f = active_connected(test, ep);
	struct fake_id *f2 = active_connected(test, ep2);
	struct kdat_ep_step s = go(test, KDAT_EP_CONNECTED, KDAT_EP_STIM_DISCONNECTED);
	struct kdat_ep_step s2 = go(test, KDAT_EP_CONNECTED, KDAT_EP_STIM_DISCONNECT_ABRUPT);
	struct async_call *a, *a2;
	bool event_done, disconnect_done;

	kdat_test_ia_hold_owner(t->ia, true);
	kdat_test_ep_hold(held, true);
	a = async_deliver(test, f, fake_ev(RDMA_CM_EVENT_DISCONNECTED, 0, NULL, 0));
	event_done = wait_for_completion_timeout(&a->done, 5 * HZ) > 0;
	a2 = async_start(test, async_disconnect_fn, ep2, NULL, KDAT_CLOSE_ABRUPT);
	disconnect_done = wait_for_completion_timeout(&a2->done, 5 * HZ) > 0;
	kdat_test_ep_hold(held, false);
	kdat_test_ia_hold_owner(t->ia, false);
	KUNIT_EXPECT_TRUE(test, event_done);
	KUNIT_EXPECT_TRUE(test, disconnect_done);
	async_finish(test, a);
	KUNIT_EXPECT_EQ(test, async_finish(test, a2), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep2), s2.next);
	KUNIT_EXPECT_EQ(test, ep_state(test, held), (u32)KDAT_EP_UNCONNECTED);
	/* the DREP to the peer's DREQ, and our own DREQ */
	KUNIT_EXPECT_EQ(test, f->calls[OP_DISCONNECT], 1u);
	KUNIT_EXPECT_EQ(test, f2->calls[OP_DISCONNECT], 1u);
	/* in the order they ran: the event, then the disconnect */
	KUNIT_ASSERT_EQ(test, kdat_evd_dequeue(t->evd, &t->ev, NULL), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_PTR_EQ(test, t->ev.ep, ep);
	KUNIT_EXPECT_EQ(test, t->ev.number, s.event);
	KUNIT_ASSERT_EQ(test, kdat_evd_dequeue(t->evd, &t->ev, NULL), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_PTR_EQ(test, t->ev.ep, ep2);
	KUNIT_EXPECT_EQ(test, t->ev.number, s2.event);
	expect_no_events(test);
}

/* The other order: REP first, then the timeout's time passes without an event. */
static void connect_response_then_timeout(struct kunit *test)
{
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *f = active_routed(test, ep, SHORT_TIMEOUT_US);
	struct kdat_ep_step s = go(test, KDAT_EP_ACTIVE_CONNECTION_PENDING,
				   KDAT_EP_STIM_ESTABLISHED);
	struct rdma_cm_event rep = fake_ev(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, "fast", 4);
	struct fcm_test *t = test->priv;

	KUNIT_EXPECT_EQ(test, fake_deliver(f, &rep), 0);
	KUNIT_ASSERT_EQ(test, kdat_evd_dequeue(t->evd, &t->ev, NULL), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_EQ(test, t->ev.number, s.event);
	KUNIT_EXPECT_EQ(test, t->ev.private_data_size, 4u);
	KUNIT_EXPECT_EQ(test, memcmp(t->ev.private_data, "fast", 4), 0);
	msleep(3 * SHORT_TIMEOUT_US / 1000);
	expect_stale(test, s.next, KDAT_EP_STIM_TIMEOUT);
	expect_no_events(test);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
	KUNIT_EXPECT_FALSE(test, READ_ONCE(f->destroyed));
	KUNIT_EXPECT_EQ(test, f->calls[OP_RTU], 1u);
}

/*
 * iWARP's order: no REP step, ESTABLISHED straight from ACTIVE_CONNECTION_
 * PENDING with the reply's private data; kdat sends no RTU.
 */
static void established_without_rep(struct kunit *test)
{
	struct fcm_test *t = test->priv;
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *f = active_routed(test, ep, KDAT_TIMEOUT_INFINITE);
	struct kdat_ep_step s = go(test, KDAT_EP_ACTIVE_CONNECTION_PENDING,
				   KDAT_EP_STIM_ESTABLISHED);
	struct rdma_cm_event est = fake_ev(RDMA_CM_EVENT_ESTABLISHED, 0, "iwarp", 5);

	KUNIT_EXPECT_EQ(test, fake_deliver(f, &est), 0);
	KUNIT_ASSERT_EQ(test, kdat_evd_dequeue(t->evd, &t->ev, NULL), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_EQ(test, t->ev.number, s.event);
	KUNIT_EXPECT_EQ(test, t->ev.private_data_size, 5u);
	KUNIT_EXPECT_EQ(test, memcmp(t->ev.private_data, "iwarp", 5), 0);
	expect_no_events(test);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
	KUNIT_EXPECT_EQ(test, f->calls[OP_RTU], 0u);
}

/* The peer's REJ (consumer reject) arrives after the timeout: stale. */
static void reject_after_timeout(struct kunit *test)
{
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *f = active_routed(test, ep, SHORT_TIMEOUT_US);
	struct kdat_ep_step s = go(test, KDAT_EP_ACTIVE_CONNECTION_PENDING, KDAT_EP_STIM_TIMEOUT);
	struct rdma_cm_event rej = fake_ev(RDMA_CM_EVENT_REJECTED, IB_CM_REJ_CONSUMER_DEFINED,
					   "no", 2);
	int ret;

	mutex_lock(&f->handler_mutex);
	EXPECT_EVENTS(test, ep, s.event);
	ret = fake_deliver_locked(f, &rej);
	mutex_unlock(&f->handler_mutex);
	KUNIT_EXPECT_EQ(test, ret, 0);
	KUNIT_EXPECT_TRUE(test, fake_wait_destroyed(f));
	expect_stale(test, s.next, KDAT_EP_STIM_PEER_REJECTED);
	expect_no_events(test);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
	KUNIT_EXPECT_EQ(test, f->calls[OP_DESTROY], 1u);
}

/* A reject before any timeout: PEER_REJECTED with its private data, the id goes with it. */
static void reject_before_timeout(struct kunit *test)
{
	struct fcm_test *t = test->priv;
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *f = active_routed(test, ep, SHORT_TIMEOUT_US);
	struct kdat_ep_step s = go(test, KDAT_EP_ACTIVE_CONNECTION_PENDING,
				   KDAT_EP_STIM_PEER_REJECTED);
	struct rdma_cm_event rej = fake_ev(RDMA_CM_EVENT_REJECTED, IB_CM_REJ_CONSUMER_DEFINED,
					   "no", 2);

	KUNIT_EXPECT_EQ(test, fake_deliver(f, &rej), 1);	/* rdma_cm destroys it */
	KUNIT_ASSERT_EQ(test, kdat_evd_dequeue(t->evd, &t->ev, NULL), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_EQ(test, t->ev.number, s.event);
	KUNIT_EXPECT_EQ(test, t->ev.private_data_size, 2u);
	msleep(3 * SHORT_TIMEOUT_US / 1000);	/* the timer, cancelled, posts nothing */
	expect_no_events(test);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
	KUNIT_EXPECT_TRUE(test, f->cm_destroyed);
	KUNIT_EXPECT_EQ(test, f->calls[OP_DESTROY], 0u);
}

/*
 * Active side: the consumer disconnects while the REP is on its way.  One
 * DISCONNECTED, the REP is stale (no RTU, no ESTABLISHED).
 */
static void disconnect_races_established_active(struct kunit *test)
{
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *f = active_routed(test, ep, KDAT_TIMEOUT_INFINITE);
	struct kdat_ep_step s = go(test, KDAT_EP_ACTIVE_CONNECTION_PENDING,
				   KDAT_EP_STIM_DISCONNECT_ABRUPT);
	struct rdma_cm_event rep = fake_ev(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, NULL, 0);
	struct async_call *a;
	int ret;

	mutex_lock(&f->handler_mutex);
	/* its destroy_id waits for the upcall we are in */
	a = async_start(test, async_disconnect_fn, ep, NULL, KDAT_CLOSE_ABRUPT);
	EXPECT_EVENTS(test, ep, s.event);
	ret = fake_deliver_locked(f, &rep);
	mutex_unlock(&f->handler_mutex);
	KUNIT_EXPECT_EQ(test, ret, 0);
	KUNIT_EXPECT_EQ(test, async_finish(test, a), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_TRUE(test, READ_ONCE(f->destroyed));
	expect_stale(test, s.next, KDAT_EP_STIM_ESTABLISHED);
	expect_no_events(test);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
	KUNIT_EXPECT_EQ(test, f->calls[OP_RTU], 0u);
	KUNIT_EXPECT_EQ(test, f->calls[OP_DESTROY], 1u);
}

/*
 * Passive side: the consumer disconnects an accepted EP while the RTU
 * (ESTABLISHED) is on its way.  The EP gets one DISCONNECTED; the id lives on
 * as an orphan that sends the DREQ on ESTABLISHED and ends on DISCONNECTED.
 */
static void disconnect_races_established_passive(struct kunit *test)
{
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *child = passive_accepted(test, ep);
	struct kdat_ep_step s = go(test, KDAT_EP_COMPLETION_PENDING,
				   KDAT_EP_STIM_DISCONNECT_GRACEFUL);
	struct rdma_cm_event est = fake_ev(RDMA_CM_EVENT_ESTABLISHED, 0, NULL, 0);
	int ret;

	mutex_lock(&child->handler_mutex);
	KUNIT_EXPECT_EQ(test, kdat_ep_disconnect(ep, KDAT_CLOSE_GRACEFUL), KDAT_DAT_SUCCESS);
	ret = fake_deliver_locked(child, &est);
	mutex_unlock(&child->handler_mutex);
	KUNIT_EXPECT_EQ(test, ret, 0);
	EXPECT_EVENTS(test, ep, s.event);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
	expect_stale(test, s.next, KDAT_EP_STIM_ESTABLISHED);
	KUNIT_EXPECT_EQ(test, child->calls[OP_DISCONNECT], 1u);	/* the orphan's DREQ */
	KUNIT_EXPECT_FALSE(test, READ_ONCE(child->destroyed));
	/* the peer's DREP: the orphan is done, rdma_cm destroys the id */
	KUNIT_EXPECT_EQ(test, fake_event(child, RDMA_CM_EVENT_DISCONNECTED), 1);
	KUNIT_EXPECT_TRUE(test, child->cm_destroyed);
	expect_no_events(test);
}

/* ESTABLISHED first, the consumer's disconnect after: the ordinary order. */
static void established_then_disconnect_passive(struct kunit *test)
{
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *child = passive_accepted(test, ep);
	struct kdat_ep_step s1 = go(test, KDAT_EP_COMPLETION_PENDING, KDAT_EP_STIM_ESTABLISHED);
	struct kdat_ep_step s2 = go(test, s1.next, KDAT_EP_STIM_DISCONNECT_ABRUPT);

	KUNIT_EXPECT_EQ(test, fake_event(child, RDMA_CM_EVENT_ESTABLISHED), 0);
	/* a second ESTABLISHED is stale */
	expect_stale(test, s1.next, KDAT_EP_STIM_ESTABLISHED);
	KUNIT_EXPECT_EQ(test, fake_event(child, RDMA_CM_EVENT_ESTABLISHED), 0);
	KUNIT_EXPECT_EQ(test, kdat_ep_disconnect(ep, KDAT_CLOSE_ABRUPT), KDAT_DAT_SUCCESS);
	EXPECT_EVENTS(test, ep, s1.event, s2.event);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s2.next);
	KUNIT_EXPECT_EQ(test, child->calls[OP_DISCONNECT], 1u);
}

/*
 * Graceful disconnect: DISCONNECT_PENDING until the CM reports DISCONNECTED
 * (the peer's DREQ or DREP).  A second graceful is a no-op; a DISCONNECTED
 * after that is stale.
 */
static void dreq_during_disconnect_pending(struct kunit *test)
{
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *f = active_connected(test, ep);
	struct kdat_ep_step s1 = go(test, KDAT_EP_CONNECTED, KDAT_EP_STIM_DISCONNECT_GRACEFUL);
	struct kdat_ep_step s2 = go(test, s1.next, KDAT_EP_STIM_DISCONNECTED);

	KUNIT_EXPECT_EQ(test, kdat_ep_disconnect(ep, KDAT_CLOSE_GRACEFUL), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s1.next);
	KUNIT_EXPECT_EQ(test, f->calls[OP_DISCONNECT], 1u);	/* nothing in flight: DREQ */
	KUNIT_EXPECT_EQ(test, kdat_ep_lookup(s1.next, KDAT_EP_STIM_DISCONNECT_GRACEFUL).action,
			(unsigned int)KDAT_EP_NOOP);
	KUNIT_EXPECT_EQ(test, kdat_ep_disconnect(ep, KDAT_CLOSE_GRACEFUL), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s1.next);
	KUNIT_EXPECT_EQ(test, f->calls[OP_DISCONNECT], 1u);
	expect_no_events(test);
	/* the peer's DREQ crosses ours */
	KUNIT_EXPECT_EQ(test, fake_event(f, RDMA_CM_EVENT_DISCONNECTED), 0);
	EXPECT_EVENTS(test, ep, s1.event, s2.event);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s2.next);
	expect_stale(test, s2.next, KDAT_EP_STIM_DISCONNECTED);
	KUNIT_EXPECT_EQ(test, fake_event(f, RDMA_CM_EVENT_DISCONNECTED), 0);
	expect_no_events(test);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s2.next);
	/*
	 * time-wait over: the id goes now (ib_cm answers a late DREQ of the
	 * peer's only when no id is left), the EP stays as it is
	 */
	KUNIT_EXPECT_EQ(test, fake_event(f, RDMA_CM_EVENT_TIMEWAIT_EXIT), 1);
	KUNIT_EXPECT_TRUE(test, f->cm_destroyed);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s2.next);
	expect_no_events(test);
	/* reset: no id left to destroy */
	KUNIT_EXPECT_EQ(test, kdat_ep_reset(ep), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_EQ(test, f->calls[OP_DESTROY], 0u);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep),
			go(test, s2.next, KDAT_EP_STIM_RESET).next);
}

struct close_seen {
	struct kdat_ep *ep;
	bool on_graceful_work;
	unsigned int upcalls;
};

static void record_close_thread(struct kdat_evd *evd, void *context)
{
	struct close_seen *c = context;

	c->upcalls++;
	c->on_graceful_work = current_work() == &c->ep->graceful_work;
}

/*
 * The DREP that answers a graceful disconnect's DREQ closes the EP (QP to
 * ERR, DISCONNECTED) on kdat_wq, not in the CM handler: ib_cm runs every
 * connection's handlers on one thread.  The event is posted from the EP's
 * graceful work, which the upcall sees as the work it runs in.
 */
static void graceful_close_runs_off_the_cm_thread(struct kunit *test)
{
	struct fcm_test *t = test->priv;
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *f = active_connected(test, ep);
	struct kdat_ep_step s1 = go(test, KDAT_EP_CONNECTED, KDAT_EP_STIM_DISCONNECT_GRACEFUL);
	struct kdat_ep_step s2 = go(test, s1.next, KDAT_EP_STIM_DISCONNECTED);
	struct close_seen seen = { .ep = ep };

	KUNIT_EXPECT_EQ(test, kdat_ep_disconnect(ep, KDAT_CLOSE_GRACEFUL), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_EQ(test, f->calls[OP_DISCONNECT], 1u);
	t->evd->upcall_context = &seen;
	WRITE_ONCE(t->evd->upcall, record_close_thread);
	KUNIT_EXPECT_EQ(test, fake_event(f, RDMA_CM_EVENT_DISCONNECTED), 0);
	kdat_test_flush_work();
	WRITE_ONCE(t->evd->upcall, NULL);
	KUNIT_EXPECT_EQ(test, seen.upcalls, 1u);
	KUNIT_EXPECT_TRUE(test, seen.on_graceful_work);
	EXPECT_EVENTS(test, ep, s2.event);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s2.next);
	KUNIT_EXPECT_EQ(test, ep->dreq, (u8)KDAT_DREQ_NONE);
	/* the handler answered with a DREP all the same (harmless after our DREQ) */
	KUNIT_EXPECT_EQ(test, f->calls[OP_DISCONNECT], 2u);
}

struct abrupt_during {
	struct kunit *test;
	struct kdat_ep *ep;
	u8 dreq_seen;
	u32 state_seen;
};

static void abrupt_during_drep(void *arg)
{
	struct abrupt_during *d = arg;

	mutex_lock(&d->ep->lock);
	d->dreq_seen = d->ep->dreq;
	d->state_seen = d->ep->state;
	mutex_unlock(&d->ep->lock);
	KUNIT_EXPECT_EQ(d->test, kdat_ep_disconnect(d->ep, KDAT_CLOSE_ABRUPT), KDAT_DAT_SUCCESS);
}

/*
 * An abrupt disconnect between the DREP and the close it queues (here:
 * inside the handler's DREP call, before the close is queued) ends the
 * connection with one DISCONNECTED and no second DREQ; the close then
 * finds DISCONNECTED and is stale.
 */
static void abrupt_between_drep_and_graceful_close(struct kunit *test)
{
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *f = active_connected(test, ep);
	struct kdat_ep_step s = go(test, KDAT_EP_DISCONNECT_PENDING,
				   KDAT_EP_STIM_DISCONNECT_ABRUPT);
	struct abrupt_during d = { .test = test, .ep = ep };

	KUNIT_EXPECT_EQ(test, kdat_ep_disconnect(ep, KDAT_CLOSE_GRACEFUL), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_EQ(test, f->calls[OP_DISCONNECT], 1u);
	fake.during_disconnect = abrupt_during_drep;
	fake.during_disconnect_arg = &d;
	KUNIT_EXPECT_EQ(test, fake_event(f, RDMA_CM_EVENT_DISCONNECTED), 0);
	kdat_test_flush_work();
	KUNIT_EXPECT_EQ(test, d.dreq_seen, (u8)KDAT_DREQ_ANSWERED);
	KUNIT_EXPECT_EQ(test, d.state_seen, (u32)KDAT_EP_DISCONNECT_PENDING);
	EXPECT_EVENTS(test, ep, s.event);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
	KUNIT_EXPECT_EQ(test, ep->dreq, (u8)KDAT_DREQ_NONE);
	/* our DREQ and the handler's DREP; the abrupt one sent none */
	KUNIT_EXPECT_EQ(test, f->calls[OP_DISCONNECT], 2u);
}

/* Abrupt after graceful: DISCONNECTED at once; the CM's DISCONNECTED after it is stale. */
static void abrupt_after_graceful(struct kunit *test)
{
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *f = active_connected(test, ep);
	struct kdat_ep_step s1 = go(test, KDAT_EP_CONNECTED, KDAT_EP_STIM_DISCONNECT_GRACEFUL);
	struct kdat_ep_step s2 = go(test, s1.next, KDAT_EP_STIM_DISCONNECT_ABRUPT);

	KUNIT_EXPECT_EQ(test, kdat_ep_disconnect(ep, KDAT_CLOSE_GRACEFUL), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s1.next);
	KUNIT_EXPECT_EQ(test, kdat_ep_disconnect(ep, KDAT_CLOSE_ABRUPT), KDAT_DAT_SUCCESS);
	EXPECT_EVENTS(test, ep, s1.event, s2.event);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s2.next);
	/* the peer's answer to our DREQ */
	expect_stale(test, s2.next, KDAT_EP_STIM_DISCONNECTED);
	KUNIT_EXPECT_EQ(test, fake_event(f, RDMA_CM_EVENT_DISCONNECTED), 0);
	expect_no_events(test);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s2.next);
	/* a third disconnect is a no-op */
	KUNIT_EXPECT_EQ(test, kdat_ep_disconnect(ep, KDAT_CLOSE_ABRUPT), KDAT_DAT_SUCCESS);
	expect_no_events(test);
}

/* Abrupt while the peer's DREQ is on its way: one DISCONNECTED. */
static void abrupt_races_peer_dreq(struct kunit *test)
{
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *f = active_connected(test, ep);
	struct kdat_ep_step s = go(test, KDAT_EP_CONNECTED, KDAT_EP_STIM_DISCONNECT_ABRUPT);
	struct rdma_cm_event dreq = fake_ev(RDMA_CM_EVENT_DISCONNECTED, 0, NULL, 0);
	int ret;

	mutex_lock(&f->handler_mutex);
	KUNIT_EXPECT_EQ(test, kdat_ep_disconnect(ep, KDAT_CLOSE_ABRUPT), KDAT_DAT_SUCCESS);
	ret = fake_deliver_locked(f, &dreq);
	mutex_unlock(&f->handler_mutex);
	KUNIT_EXPECT_EQ(test, ret, 0);
	EXPECT_EVENTS(test, ep, s.event);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
}

struct dreq_during {
	struct kunit *test;
	struct kdat_ep *ep;
	struct fake_id *f;
	int handler_ret;
	bool destroyed_meanwhile;
};

/* Inside our DREQ: the consumer frees the EP and the peer's DREP ends the orphan. */
static void free_and_drep_during_dreq(void *arg)
{
	struct dreq_during *d = arg;

	KUNIT_EXPECT_EQ(d->test, kdat_ep_free(d->ep), KDAT_DAT_SUCCESS);
	d->handler_ret = fake_event(d->f, RDMA_CM_EVENT_DISCONNECTED);
	msleep(100);	/* time for a destruction that does not wait for us */
	d->destroyed_meanwhile = READ_ONCE(d->f->destroyed);
}

/*
 * The consumer's DREQ goes out after the EP's lock, on an id pinned under
 * it.  While it is at work, the EP is freed (its id goes to an orphan, which
 * waits for our DREP) and the DREP arrives (the orphan is done): the id must
 * outlive the DREQ call, then go exactly once, from kdat_wq.
 */
static void dreq_call_outlives_free_and_drep(struct kunit *test)
{
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *f = active_connected(test, ep);
	struct kdat_ep_step s = go(test, KDAT_EP_CONNECTED, KDAT_EP_STIM_DISCONNECT_ABRUPT);
	struct dreq_during d = { .test = test, .ep = ep, .f = f };

	fake.during_disconnect = free_and_drep_during_dreq;
	fake.during_disconnect_arg = &d;
	KUNIT_EXPECT_EQ(test, kdat_ep_disconnect(ep, KDAT_CLOSE_ABRUPT), KDAT_DAT_SUCCESS);
	EXPECT_EVENTS(test, ep, s.event);
	/* our DREQ, and the orphan's answer to the DISCONNECTED (a DREP, were it the peer's DREQ) */
	KUNIT_EXPECT_EQ(test, f->calls[OP_DISCONNECT], 2u);
	KUNIT_EXPECT_EQ(test, d.handler_ret, 0);	/* not rdma_cm's to destroy: it is pinned */
	KUNIT_EXPECT_FALSE(test, d.destroyed_meanwhile);
	KUNIT_EXPECT_TRUE(test, fake_wait_destroyed(f));
	KUNIT_EXPECT_FALSE(test, f->cm_destroyed);
	KUNIT_EXPECT_EQ(test, f->calls[OP_DESTROY], 1u);
}

/*
 * kdat_cr_accept waits for the CR id's handler mutex (an event for it is on
 * its way); meanwhile the consumer connects the EP elsewhere.  The accept
 * must see the new state: INVALID_STATE, the CR untouched and still usable.
 */
static void accept_on_ep_changed_under_it(struct kunit *test)
{
	struct fcm_test *t = test->priv;
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *child = fake_request(test, t->listener, "req");
	struct kdat_cr *cr = expect_cr(test);
	struct async_call *a;
	struct fake_id *f;
	kdat_ret_t ret;

	mutex_lock(&child->handler_mutex);
	a = async_start(test, async_accept_fn, ep, cr, 0);
	KUNIT_EXPECT_TRUE(test, wait_lock_waiter(child, 1));
	f = active_pending(test, ep, KDAT_TIMEOUT_INFINITE);
	mutex_unlock(&child->handler_mutex);
	ret = async_finish(test, a);
	KUNIT_EXPECT_EQ(test, ret, kdat_ep_lookup(KDAT_EP_ACTIVE_CONNECTION_PENDING,
						  KDAT_EP_STIM_ACCEPT).action == KDAT_EP_INVALID ?
			KDAT_ERR(KDAT_DAT_INVALID_STATE,
				 kdat_ep_invalid_state_subtype(KDAT_EP_ACTIVE_CONNECTION_PENDING)) :
			KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_EQ(test, child->calls[OP_ACCEPT], 0u);
	KUNIT_EXPECT_EQ(test, child->calls[OP_MODIFY_QP], 0u);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), (u32)KDAT_EP_ACTIVE_CONNECTION_PENDING);
	expect_no_events(test);
	/* the CR is still there: reject it */
	KUNIT_EXPECT_EQ(test, kdat_cr_reject(cr, "busy", 4), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_EQ(test, child->calls[OP_REJECT], 1u);
	KUNIT_EXPECT_EQ(test, child->reject_reason, (u8)IB_CM_REJ_CONSUMER_DEFINED);
	KUNIT_EXPECT_TRUE(test, READ_ONCE(child->destroyed));
	/* the EP's own attempt is untouched */
	KUNIT_EXPECT_FALSE(test, READ_ONCE(f->destroyed));
}

struct disconnect_call {
	struct kdat_ep *ep;
	kdat_ret_t ret;
};

static void disconnect_during_accept(void *arg)
{
	struct disconnect_call *c = arg;

	c->ret = kdat_ep_disconnect(c->ep, KDAT_CLOSE_GRACEFUL);
}

/*
 * The REP cannot be sent (no memory), and while it was being sent -- without
 * the EP's lock -- the consumer disconnected the EP, so an orphan adopted the id.
 * No CM event will come for that id, so the accept ends the orphan: the id is
 * destroyed now, not left until the device or the module goes.
 */
static void accept_send_fails_after_disconnect(struct kunit *test)
{
	struct fcm_test *t = test->priv;
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *child = fake_request(test, t->listener, "req");
	struct kdat_cr *cr = expect_cr(test);
	struct kdat_ep_step s1 = go(test, KDAT_EP_UNCONNECTED, KDAT_EP_STIM_ACCEPT);
	struct kdat_ep_step s2 = go(test, s1.next, KDAT_EP_STIM_DISCONNECT_GRACEFUL);
	struct disconnect_call c = { .ep = ep, .ret = -1 };

	fake.during_accept = disconnect_during_accept;
	fake.during_accept_arg = &c;
	fake.fail[OP_ACCEPT] = -ENOMEM;
	/* the EP moved on: its disconnect, not the lost REP, is what it reports */
	KUNIT_EXPECT_EQ(test, kdat_cr_accept(cr, ep, "rep", 3), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_EQ(test, c.ret, KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_EQ(test, child->calls[OP_ACCEPT], 1u);
	EXPECT_EVENTS(test, ep, s2.event);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s2.next);
	KUNIT_EXPECT_TRUE(test, fake_wait_destroyed(child));
	KUNIT_EXPECT_EQ(test, child->calls[OP_DISCONNECT], 0u);
	KUNIT_EXPECT_EQ(test, fake.double_destroy, 0u);
}

/*
 * The device goes while an accept waits for the CR id's handler mutex.
 * Removal must leave that id to the accept (it owns it), the accept fails
 * (its EP is DISCONNECTED by then), and the id goes as soon as the accept
 * lets go of it: rdma_cm's own removal waits for every id of the device.
 */
static void accept_races_device_removal(struct kunit *test)
{
	struct fcm_test *t = test->priv;
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *child = fake_request(test, t->listener, "req");
	struct kdat_cr *cr = expect_cr(test);
	struct kdat_ep_step s = go(test, KDAT_EP_UNCONNECTED, KDAT_EP_STIM_DEVICE_REMOVED);
	struct async_call *a;

	mutex_lock(&child->handler_mutex);
	a = async_start(test, async_accept_fn, ep, cr, 0);
	KUNIT_EXPECT_TRUE(test, wait_lock_waiter(child, 1));
	/* another thread: removal destroys ids, which takes their handler mutexes */
	async_removal(test, t->ia);
	KUNIT_EXPECT_TRUE(test, READ_ONCE(t->listener->destroyed));
	KUNIT_EXPECT_FALSE(test, READ_ONCE(child->destroyed));
	mutex_unlock(&child->handler_mutex);
	KUNIT_EXPECT_EQ(test, KDAT_RET_TYPE(async_finish(test, a)), KDAT_DAT_INVALID_STATE);
	KUNIT_EXPECT_EQ(test, child->calls[OP_ACCEPT], 0u);
	KUNIT_EXPECT_TRUE(test, fake_wait_destroyed(child));
	EXPECT_EVENTS(test, ep, s.event);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
	/* the CR is still the consumer's to free; nothing goes on the wire */
	KUNIT_EXPECT_EQ(test, kdat_cr_reject(cr, NULL, 0), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_EQ(test, child->calls[OP_REJECT], 0u);
}

/* The requester gave up (REJ) before the accept: ACCEPT_COMPLETION_ERROR, no REP sent. */
static void accept_after_requester_gone(struct kunit *test)
{
	struct fcm_test *t = test->priv;
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *child = fake_request(test, t->listener, "req");
	struct kdat_cr *cr = expect_cr(test);
	struct kdat_ep_step s1 = go(test, KDAT_EP_UNCONNECTED, KDAT_EP_STIM_ACCEPT);
	struct kdat_ep_step s2 = go(test, s1.next, KDAT_EP_STIM_ACCEPT_FAILED);

	KUNIT_EXPECT_EQ(test, fake_event(child, RDMA_CM_EVENT_REJECTED), 0);
	KUNIT_EXPECT_EQ(test, kdat_cr_accept(cr, ep, NULL, 0), KDAT_DAT_SUCCESS);
	EXPECT_EVENTS(test, ep, s1.event, s2.event);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s2.next);
	KUNIT_EXPECT_EQ(test, child->calls[OP_ACCEPT], 0u);
	KUNIT_EXPECT_TRUE(test, fake_wait_destroyed(child));
}

/* The requester's REJ (its timeout) after our accept: ACCEPT_COMPLETION_ERROR. */
static void reject_after_accept(struct kunit *test)
{
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *child = passive_accepted(test, ep);
	struct kdat_ep_step s = go(test, KDAT_EP_COMPLETION_PENDING,
				   KDAT_EP_STIM_NON_PEER_REJECTED);
	struct rdma_cm_event rej = fake_ev(RDMA_CM_EVENT_REJECTED, IB_CM_REJ_TIMEOUT, NULL, 0);

	KUNIT_EXPECT_EQ(test, fake_deliver(child, &rej), 1);
	EXPECT_EVENTS(test, ep, s.event);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
	KUNIT_EXPECT_TRUE(test, child->cm_destroyed);
	KUNIT_EXPECT_EQ(test, child->calls[OP_DESTROY], 0u);
}

/*
 * The requester's DREQ before its RTU (ib_cm works MADs on any CPU, and then
 * drops the late RTU): the requester was connected, so the acceptor sees
 * ESTABLISHED, then DISCONNECTED, and answers with a DREP -- not
 * dat_cr_accept(3DAT)'s ACCEPT_COMPLETION_ERROR, which is for a connection
 * that was never made.
 */
static void peer_dreq_before_rtu(struct kunit *test)
{
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *child = passive_accepted(test, ep);
	struct kdat_ep_step s1 = go(test, KDAT_EP_COMPLETION_PENDING, KDAT_EP_STIM_ESTABLISHED);
	struct kdat_ep_step s2 = go(test, s1.next, KDAT_EP_STIM_DISCONNECTED);

	KUNIT_EXPECT_EQ(test, s1.event, (u32)KDAT_EP_EVENT_ESTABLISHED);
	KUNIT_EXPECT_EQ(test, s2.event, (u32)KDAT_EP_EVENT_DISCONNECTED);
	/* the attempt's id is done with the DREP: rdma_cm destroys it */
	KUNIT_EXPECT_EQ(test, fake_event(child, RDMA_CM_EVENT_DISCONNECTED), 1);
	EXPECT_EVENTS(test, ep, s1.event, s2.event);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s2.next);
	KUNIT_EXPECT_EQ(test, child->calls[OP_DISCONNECT], 1u);	/* the DREP */
	KUNIT_EXPECT_TRUE(test, child->cm_destroyed);
	expect_no_events(test);
}

/*
 * A connected EP freed: the table's abrupt disconnect first, as DAPL's
 * dat_ep_free does, so its DISCONNECTED is posted (naming the freed EP) and
 * one DREQ goes out; the id waits in an orphan for the DREP, then goes.
 */
static void free_connected_ep_posts_disconnected(struct kunit *test)
{
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *f = active_connected(test, ep);
	struct kdat_ep_step s = go(test, KDAT_EP_CONNECTED, KDAT_EP_STIM_DISCONNECT_ABRUPT);

	KUNIT_EXPECT_EQ(test, s.event, (u32)KDAT_EP_EVENT_DISCONNECTED);
	KUNIT_EXPECT_EQ(test, kdat_ep_free(ep), KDAT_DAT_SUCCESS);
	EXPECT_EVENTS(test, ep, s.event);
	KUNIT_EXPECT_EQ(test, f->calls[OP_DISCONNECT], 1u);
	KUNIT_EXPECT_FALSE(test, READ_ONCE(f->destroyed));
	/* the peer's DREP: the orphan answers it and rdma_cm destroys the id */
	KUNIT_EXPECT_EQ(test, fake_event(f, RDMA_CM_EVENT_DISCONNECTED), 1);
	KUNIT_EXPECT_TRUE(test, f->cm_destroyed);
	expect_no_events(test);
}

/*
 * An accepted EP freed before ESTABLISHED: no event (the EP is gone); its id
 * becomes an orphan that closes the connection properly (DREQ on
 * ESTABLISHED) and is destroyed when the CM reports the end.
 */
static void free_completion_pending_ep(struct kunit *test)
{
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *child = passive_accepted(test, ep);

	KUNIT_EXPECT_EQ(test, kdat_ep_free(ep), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_FALSE(test, READ_ONCE(child->destroyed));
	KUNIT_EXPECT_EQ(test, fake_event(child, RDMA_CM_EVENT_ESTABLISHED), 0);
	KUNIT_EXPECT_EQ(test, child->calls[OP_DISCONNECT], 1u);
	KUNIT_EXPECT_EQ(test, fake_event(child, RDMA_CM_EVENT_TIMEWAIT_EXIT), 1);
	KUNIT_EXPECT_TRUE(test, child->cm_destroyed);
	expect_no_events(test);
}

/* rdma_accept itself fails: the same outcome. */
static void accept_fails_in_cm(struct kunit *test)
{
	struct fcm_test *t = test->priv;
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *child = fake_request(test, t->listener, "req");
	struct kdat_cr *cr = expect_cr(test);
	struct kdat_ep_step s = go(test, go(test, KDAT_EP_UNCONNECTED, KDAT_EP_STIM_ACCEPT).next,
				   KDAT_EP_STIM_ACCEPT_FAILED);

	fake.fail[OP_ACCEPT] = -EINVAL;
	KUNIT_EXPECT_EQ(test, kdat_cr_accept(cr, ep, NULL, 0), KDAT_DAT_SUCCESS);
	EXPECT_EVENTS(test, ep, s.event);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
	KUNIT_EXPECT_EQ(test, child->calls[OP_ACCEPT], 1u);
	KUNIT_EXPECT_TRUE(test, fake_wait_destroyed(child));
}

/* ---- user QPs: the process moves its QP, KDAT_IOC_UQP_ESTABLISH sends the RTU ---- */

/* An EP for the process's QP 0x1234. */
static struct kdat_ep *new_uqp_ep(struct kunit *test)
{
	struct fcm_test *t = test->priv;
	struct kdat_ep_attr attr = { .max_rdma_read_in = 1, .max_rdma_read_out = 1 };
	struct kdat_ep *ep;

	KUNIT_ASSERT_EQ(test, kdat_test_uqp_create(t->ia, t->evd, &attr, 0x1234, 0, &ep),
			KDAT_DAT_SUCCESS);
	return ep;
}

/* ... connecting, and the peer's REP is in: the process's turn (RTR, RTS, establish). */
static struct fake_id *uqp_rep_arrived(struct kunit *test, struct kdat_ep *ep)
{
	struct fake_id *f = active_routed(test, ep, KDAT_TIMEOUT_INFINITE);
	struct rdma_cm_event rep = fake_ev(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, NULL, 0);

	KUNIT_EXPECT_EQ(test, fake_deliver(f, &rep), 0);
	KUNIT_EXPECT_EQ(test, f->calls[OP_RTU], 0u);
	EXPECT_EVENTS(test, ep, KDAT_EVENT_UQP_CONNECT_RESPONSE);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), (u32)KDAT_EP_ACTIVE_CONNECTION_PENDING);
	return f;
}

/* A call by another thread, started inside the RTU (fake.during_rtu). */
struct during_rtu {
	struct kunit *test;
	struct kdat_ep *ep;
	struct async_call *a;
	bool seen;		/* it finished (or made its step) while the RTU was out */
};

/* A user-QP EP with the peer's REP in, and hook armed to run inside its RTU. */
static struct fake_id *uqp_rtu_armed(struct kunit *test, struct during_rtu *d,
				     void (*hook)(void *arg))
{
	d->test = test;
	d->ep = new_uqp_ep(test);
	fake.during_rtu = hook;
	fake.during_rtu_arg = d;
	return uqp_rep_arrived(test, d->ep);
}

static void query_during_rtu(void *arg)
{
	struct during_rtu *d = arg;

	d->a = async_start(d->test, async_query_fn, d->ep, NULL, 0);
	d->seen = wait_for_completion_timeout(&d->a->done, 5 * HZ) > 0;
}

/*
 * The RTU goes out without the EP's lock: a call on the EP (here a query)
 * or a CM handler need not wait for it.  Then ESTABLISHED.
 */
static void uqp_establish_rtu_unlocked(struct kunit *test)
{
	struct during_rtu d = {};
	struct fake_id *f = uqp_rtu_armed(test, &d, query_during_rtu);
	struct kdat_ep *ep = d.ep;
	struct kdat_ep_step s = go(test, KDAT_EP_ACTIVE_CONNECTION_PENDING,
				   KDAT_EP_STIM_ESTABLISHED);

	KUNIT_EXPECT_EQ(test, kdat_test_uqp_establish(ep, 0), KDAT_DAT_SUCCESS);
	KUNIT_ASSERT_NOT_NULL(test, d.a);
	KUNIT_EXPECT_EQ(test, async_finish(test, d.a), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_TRUE(test, d.seen);
	KUNIT_EXPECT_EQ(test, d.a->state, (u32)KDAT_EP_ACTIVE_CONNECTION_PENDING);
	KUNIT_EXPECT_EQ(test, f->calls[OP_RTU], 1u);
	EXPECT_EVENTS(test, ep, s.event);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
	/* a second establish finds no REP waiting */
	KUNIT_EXPECT_EQ(test, KDAT_RET_TYPE(kdat_test_uqp_establish(ep, 0)), KDAT_DAT_INVALID_STATE);
	KUNIT_EXPECT_EQ(test, f->calls[OP_RTU], 1u);
}

/* An abrupt disconnect by another thread while the RTU is being sent; waits for its step. */
static void disconnect_during_rtu(void *arg)
{
	struct during_rtu *d = arg;
	struct kdat_ep_info *info = kzalloc(sizeof(*info), GFP_KERNEL);
	int i;

	d->a = async_start(d->test, async_disconnect_fn, d->ep, NULL, KDAT_CLOSE_ABRUPT);
	/* its id waits for the establish to let go; the EP's step comes first */
	for (i = 0; info && i < 250; i++) {
		if (kdat_ep_query(d->ep, info) == KDAT_DAT_SUCCESS &&
		    info->state == KDAT_EP_DISCONNECTED) {
			d->seen = true;
			break;
		}
		msleep(20);
	}
	kfree(info);
}

/*
 * The EP is disconnected while its RTU is on the wire: the disconnect's
 * outcome stands (one DISCONNECTED, no ESTABLISHED), the establish reports
 * the state it found, and the id is destroyed once, after the establish.
 */
static void uqp_establish_races_disconnect(struct kunit *test)
{
	struct during_rtu d = {};
	struct fake_id *f = uqp_rtu_armed(test, &d, disconnect_during_rtu);
	struct kdat_ep *ep = d.ep;
	struct kdat_ep_step s = go(test, KDAT_EP_ACTIVE_CONNECTION_PENDING,
				   KDAT_EP_STIM_DISCONNECT_ABRUPT);

	KUNIT_EXPECT_EQ(test, kdat_test_uqp_establish(ep, 0),
			KDAT_ERR(KDAT_DAT_INVALID_STATE, kdat_ep_invalid_state_subtype(s.next)));
	KUNIT_ASSERT_NOT_NULL(test, d.a);
	KUNIT_EXPECT_TRUE(test, d.seen);
	KUNIT_EXPECT_EQ(test, async_finish(test, d.a), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_EQ(test, f->calls[OP_RTU], 1u);
	EXPECT_EVENTS(test, ep, s.event);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
	KUNIT_EXPECT_TRUE(test, fake_wait_destroyed(f));
	KUNIT_EXPECT_FALSE(test, f->cm_destroyed);
}

/* The RTU cannot be sent: BROKEN, and the id goes (destroying it sends the REJ). */
static void uqp_establish_rtu_fails(struct kunit *test)
{
	struct kdat_ep *ep = new_uqp_ep(test);
	struct fake_id *f = uqp_rep_arrived(test, ep);
	struct kdat_ep_step s = go(test, KDAT_EP_ACTIVE_CONNECTION_PENDING, KDAT_EP_STIM_BROKEN);

	fake.fail[OP_RTU] = -ENOMEM;
	KUNIT_EXPECT_EQ(test, kdat_test_uqp_establish(ep, 0), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_EQ(test, f->calls[OP_RTU], 1u);
	EXPECT_EVENTS(test, ep, s.event);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
	KUNIT_EXPECT_TRUE(test, fake_wait_destroyed(f));
}

/* Address resolution fails at once: the attempt is made and ends UNREACHABLE. */
static void unreachable_at_once(struct kunit *test)
{
	struct sockaddr_in peer = { .sin_family = AF_INET };
	struct kdat_ep *ep = new_ep(test);
	struct kdat_ep_step s = go(test, go(test, KDAT_EP_UNCONNECTED, KDAT_EP_STIM_CONNECT).next,
				   KDAT_EP_STIM_UNREACHABLE);
	struct fake_id *f;

	peer.sin_addr.s_addr = in_aton("192.0.2.77");
	fake.fail[OP_RESOLVE_ADDR] = -ENETUNREACH;
	KUNIT_EXPECT_EQ(test, kdat_ep_connect(ep, (struct sockaddr *)&peer, 4444, WAIT_US, NULL,
					      0, KDAT_DAT_QOS_BEST_EFFORT, KDAT_CONNECT_DEFAULT),
			KDAT_DAT_SUCCESS);
	f = fake_last();
	EXPECT_EVENTS(test, ep, s.event);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
	KUNIT_EXPECT_TRUE(test, fake_wait_destroyed(f));
}

/* The route cannot be resolved: UNREACHABLE, and the handler gives the id back. */
static void route_error(struct kunit *test)
{
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *f = active_pending(test, ep, WAIT_US);
	struct kdat_ep_step s = go(test, KDAT_EP_ACTIVE_CONNECTION_PENDING,
				   KDAT_EP_STIM_UNREACHABLE);

	KUNIT_EXPECT_EQ(test, fake_event(f, RDMA_CM_EVENT_ADDR_RESOLVED), 0);
	KUNIT_EXPECT_EQ(test, fake_event(f, RDMA_CM_EVENT_ROUTE_ERROR), 1);
	EXPECT_EVENTS(test, ep, s.event);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
	KUNIT_EXPECT_TRUE(test, f->cm_destroyed);
	KUNIT_EXPECT_EQ(test, f->calls[OP_CONNECT], 0u);
	/* the cancelled timer posts nothing */
	expect_no_events(test);
}

/* Waits (5 s at most) until f has had n calls of op; false if it had not. */
static bool fake_wait_calls(struct fake_id *f, unsigned int op, unsigned int n)
{
	unsigned long end = jiffies + 5 * HZ;

	while (READ_ONCE(f->calls[op]) < n && time_before(jiffies, end))
		msleep(20);
	return READ_ONCE(f->calls[op]) == n;
}

/*
 * A lookup that timed out (an ARP request or its reply lost) is asked again,
 * KDAT_RESOLVE_RETRIES times in one attempt, address and route alike, with no
 * event; the timeout after that is UNREACHABLE.  (The address is asked from
 * kdat's workqueue: rdma_resolve_addr() from the ADDR_ERROR handler would
 * wait for the work running that handler.)  (A hard error is UNREACHABLE
 * at once: route_error, unreachable_at_once.)
 */
static void resolve_timeouts_are_asked_again(struct kunit *test)
{
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *f = active_pending(test, ep, WAIT_US);
	u32 pending = ep_state(test, ep);
	struct kdat_ep_step s = go(test, pending, KDAT_EP_STIM_UNREACHABLE);
	struct rdma_cm_event addr_timeout = fake_ev(RDMA_CM_EVENT_ADDR_ERROR, -ETIMEDOUT, NULL, 0);
	struct rdma_cm_event route_timeout = fake_ev(RDMA_CM_EVENT_ROUTE_ERROR, -ETIMEDOUT,
						     NULL, 0);
	unsigned int i;

	for (i = 1; i < KDAT_RESOLVE_RETRIES; i++) {
		KUNIT_EXPECT_EQ(test, fake_deliver(f, &addr_timeout), 0);
		/* asked again from kdat's workqueue, not from the handler */
		KUNIT_EXPECT_TRUE(test, fake_wait_calls(f, OP_RESOLVE_ADDR, i + 1));
		KUNIT_EXPECT_EQ(test, ep_state(test, ep), pending);
	}
	KUNIT_EXPECT_EQ(test, fake_event(f, RDMA_CM_EVENT_ADDR_RESOLVED), 0);
	KUNIT_EXPECT_EQ(test, f->calls[OP_RESOLVE_ROUTE], 1u);
	/* the last retry goes to the route */
	KUNIT_EXPECT_EQ(test, fake_deliver(f, &route_timeout), 0);
	KUNIT_EXPECT_EQ(test, f->calls[OP_RESOLVE_ROUTE], 2u);
	expect_no_events(test);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), pending);
	/* retries spent: the next timeout ends the attempt */
	KUNIT_EXPECT_EQ(test, fake_deliver(f, &route_timeout), 1);
	KUNIT_EXPECT_EQ(test, f->calls[OP_RESOLVE_ROUTE], 2u);
	KUNIT_EXPECT_EQ(test, f->calls[OP_RESOLVE_ADDR], (unsigned int)KDAT_RESOLVE_RETRIES);
	KUNIT_EXPECT_EQ(test, f->calls[OP_CONNECT], 0u);
	EXPECT_EVENTS(test, ep, s.event);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
	KUNIT_EXPECT_TRUE(test, f->cm_destroyed);
}

/* Route resolution fails at once (in the ADDR_RESOLVED upcall): UNREACHABLE, the id goes. */
static void route_resolution_fails_at_once(struct kunit *test)
{
	struct kdat_ep *ep = new_ep(test);
	struct fake_id *f = active_pending(test, ep, WAIT_US);
	struct kdat_ep_step s = go(test, KDAT_EP_ACTIVE_CONNECTION_PENDING,
				   KDAT_EP_STIM_UNREACHABLE);

	fake.fail[OP_RESOLVE_ROUTE] = -ENOMEM;
	KUNIT_EXPECT_EQ(test, fake_event(f, RDMA_CM_EVENT_ADDR_RESOLVED), 1);
	KUNIT_EXPECT_EQ(test, f->calls[OP_RESOLVE_ROUTE], 1u);
	EXPECT_EVENTS(test, ep, s.event);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
	KUNIT_EXPECT_TRUE(test, f->cm_destroyed);
	KUNIT_EXPECT_EQ(test, f->calls[OP_CONNECT], 0u);
	/* the cancelled timer posts nothing */
	expect_no_events(test);
}

/* ---- device removal in every EP state ------------------------------------------------ */

struct removal_case {
	unsigned int state;
	bool cm_event;		/* rdma_cm's DEVICE_REMOVAL on the EP's id, not the ib_client */
	const char *name;
};

/* ## and # here, not in a nested macro: the state names are not expanded */
#define RC_IB(st) { KDAT_EP_##st, false, "ib_client " #st },
#define RC_CM(st) { KDAT_EP_##st, true, "cm_event " #st }

static const struct removal_case removal_cases[] = {
	KDAT_EP_STATES(RC_IB)
	/* the states in which the EP owns an id */
	RC_CM(ACTIVE_CONNECTION_PENDING), RC_CM(COMPLETION_PENDING), RC_CM(CONNECTED),
	RC_CM(DISCONNECT_PENDING),
};

static void removal_desc(const struct removal_case *c, char *desc)
{
	strscpy(desc, c->name, KUNIT_PARAM_DESC_SIZE);
}

KUNIT_ARRAY_PARAM(removal, removal_cases, removal_desc);

/* Drives a new EP to state; returns the EP (and its id, if it owns one). */
static struct kdat_ep *ep_in_state(struct kunit *test, unsigned int state, struct fake_id **id)
{
	struct fcm_test *t = test->priv;
	struct kdat_ep *ep = NULL;
	struct kdat_sp *sp;

	*id = NULL;
	switch (state) {
	case KDAT_EP_UNCONNECTED:
		ep = new_ep(test);
		break;
	case KDAT_EP_RESERVED:
	case KDAT_EP_PASSIVE_CONNECTION_PENDING:
		ep = new_ep(test);
		KUNIT_ASSERT_EQ(test, kdat_rsp_create(t->ia, 4001, ep, t->crevd, &sp),
				KDAT_DAT_SUCCESS);
		if (state == KDAT_EP_PASSIVE_CONNECTION_PENDING) {
			fake_request(test, fake_last(), "rsp");
			expect_cr(test);
			KUNIT_EXPECT_PTR_EQ(test, t->ev.ep, ep);
		}
		break;
	case KDAT_EP_TENTATIVE_CONNECTION_PENDING:
		KUNIT_ASSERT_EQ(test, kdat_psp_create(t->ia, 4002, t->crevd, KDAT_PSP_PROVIDER,
						      &sp), KDAT_DAT_SUCCESS);
		fake_request(test, fake_last(), "provider");
		expect_cr(test);
		ep = t->ev.ep;
		KUNIT_ASSERT_NOT_NULL(test, ep);
		break;
	case KDAT_EP_ACTIVE_CONNECTION_PENDING:
		ep = new_ep(test);
		*id = active_routed(test, ep, KDAT_TIMEOUT_INFINITE);
		break;
	case KDAT_EP_COMPLETION_PENDING:
		ep = new_ep(test);
		*id = passive_accepted(test, ep);
		break;
	case KDAT_EP_CONNECTED:
	case KDAT_EP_DISCONNECT_PENDING:
	case KDAT_EP_DISCONNECTED:
		ep = new_ep(test);
		*id = active_connected(test, ep);
		if (state == KDAT_EP_DISCONNECT_PENDING)
			KUNIT_EXPECT_EQ(test, kdat_ep_disconnect(ep, KDAT_CLOSE_GRACEFUL),
					KDAT_DAT_SUCCESS);
		if (state == KDAT_EP_DISCONNECTED) {
			KUNIT_EXPECT_EQ(test, kdat_ep_disconnect(ep, KDAT_CLOSE_ABRUPT),
					KDAT_DAT_SUCCESS);
			KUNIT_EXPECT_EQ(test, kdat_evd_dequeue(t->evd, &t->ev, NULL),
					KDAT_DAT_SUCCESS);
		}
		break;
	default:
		KUNIT_FAIL(test, "no way to state %u", state);
	}
	KUNIT_ASSERT_NOT_NULL(test, ep);
	KUNIT_ASSERT_EQ(test, ep_state(test, ep), state);
	expect_no_events(test);
	return ep;
}

static void device_removal_in_every_state(struct kunit *test)
{
	const struct removal_case *c = test->param_value;
	struct fcm_test *t = test->priv;
	struct kdat_ep_step s = kdat_ep_lookup(c->state, KDAT_EP_STIM_DEVICE_REMOVED);
	struct sockaddr_in peer = { .sin_family = AF_INET };
	struct fake_id *id, *f;
	struct kdat_ep *ep;
	int ret;

	/* every state has a rule, but a DISCONNECTED EP has nothing left to lose */
	KUNIT_EXPECT_EQ(test, s.action, c->state == KDAT_EP_DISCONNECTED ?
			(unsigned int)KDAT_EP_STALE : (unsigned int)KDAT_EP_GO);
	ep = ep_in_state(test, c->state, &id);
	if (c->cm_event) {
		KUNIT_ASSERT_NOT_NULL(test, id);
		ret = fake_event(id, RDMA_CM_EVENT_DEVICE_REMOVAL);
		/* an attempt that ended without a connection gives its id back */
		KUNIT_EXPECT_EQ(test, ret, c->state == KDAT_EP_ACTIVE_CONNECTION_PENDING ||
				c->state == KDAT_EP_COMPLETION_PENDING ? 1 : 0);
	} else {
		kdat_test_ia_device_removed(t->ia);
		/* every id on the IA is gone before the removal returns */
		mutex_lock(&fake.lock);
		list_for_each_entry(f, &fake.ids, node)
			KUNIT_EXPECT_TRUE(test, READ_ONCE(f->destroyed));
		mutex_unlock(&fake.lock);
	}
	EXPECT_EVENTS(test, ep, s.event);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
	if (!c->cm_event) {
		/* the EP is unusable */
		peer.sin_addr.s_addr = in_aton("192.0.2.77");
		KUNIT_EXPECT_EQ(test, KDAT_RET_TYPE(kdat_ep_connect(ep, (struct sockaddr *)&peer,
								   4444, WAIT_US, NULL, 0,
								   KDAT_DAT_QOS_BEST_EFFORT,
								   KDAT_CONNECT_DEFAULT)),
				KDAT_DAT_INVALID_STATE);
		KUNIT_EXPECT_EQ(test, KDAT_RET_TYPE(kdat_ep_reset(ep)), KDAT_DAT_INVALID_STATE);
		expect_no_events(test);
	}
	KUNIT_EXPECT_EQ(test, kdat_ep_free(ep), KDAT_DAT_SUCCESS);
	expect_no_events(test);
}

/* ---- UD EPs: address exchanges (kdat_ud.c) ------------------------------------------ */

#define UD_QPN		0x4321
#define UD_PEER_QPN	0x777

static struct kdat_ep *new_ud_ep(struct kunit *test)
{
	struct fcm_test *t = test->priv;
	struct kdat_ep_attr attr = {};
	struct kdat_ep *ep;

	KUNIT_ASSERT_EQ(test, kdat_test_uqp_create(t->ia, t->evd, &attr, UD_QPN, KDAT_UQP_UD, &ep),
			KDAT_DAT_SUCCESS);
	return ep;
}

/*
 * connect on a UD EP: an exchange with an id of its own in RDMA_PS_UDP, its
 * address and route resolved and the SIDR request sent with kdat's header,
 * the EP's QPN and the consumer's bytes.  The EP's state is unchanged.
 */
static struct fake_id *ud_sent(struct kunit *test, struct kdat_ep *ep, u32 timeout_us)
{
	static const u8 want[] = { KDAT_PDATA_MAGIC, KDAT_PDATA_VERSION, 5, KDAT_PDATA_F_UD_QPN,
				   0, 0, 0x43, 0x21, 'h', 'e', 'l', 'l', 'o' };
	struct sockaddr_in peer = { .sin_family = AF_INET };
	u32 before = ep_state(test, ep);
	struct fake_id *f;

	peer.sin_addr.s_addr = in_aton("192.0.2.77");
	/* the kernel API has no UD EPs: kdat_ep_connect refuses, /dev/kdat's path takes it */
	KUNIT_EXPECT_EQ(test, KDAT_RET_TYPE(kdat_ep_connect(ep, (struct sockaddr *)&peer, 4444,
							    timeout_us, NULL, 0,
							    KDAT_DAT_QOS_BEST_EFFORT,
							    KDAT_CONNECT_DEFAULT)),
			KDAT_DAT_MODEL_NOT_SUPPORTED);
	KUNIT_ASSERT_EQ(test, kdat_test_ud_connect(ep, (struct sockaddr *)&peer, 4444, timeout_us,
						   "hello", 5), KDAT_DAT_SUCCESS);
	f = fake_last();
	KUNIT_ASSERT_NOT_NULL(test, f);
	KUNIT_EXPECT_EQ(test, f->id.ps, RDMA_PS_UDP);
	KUNIT_EXPECT_EQ(test, f->calls[OP_RESOLVE_ADDR], 1u);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), before);
	KUNIT_EXPECT_EQ(test, fake_event(f, RDMA_CM_EVENT_ADDR_RESOLVED), 0);
	KUNIT_EXPECT_EQ(test, f->calls[OP_RESOLVE_ROUTE], 1u);
	KUNIT_EXPECT_EQ(test, fake_event(f, RDMA_CM_EVENT_ROUTE_RESOLVED), 0);
	KUNIT_EXPECT_EQ(test, f->calls[OP_CONNECT], 1u);
	KUNIT_EXPECT_EQ(test, f->connect_qpn, (u32)UD_QPN);
	KUNIT_EXPECT_EQ(test, f->connect_len, (u8)sizeof(want));
	KUNIT_EXPECT_EQ(test, memcmp(f->connect_pdata, want, sizeof(want)), 0);
	return f;
}

/*
 * rdma_cm's SIDR reply (cma_sidr_rep_handler): the peer, a path to it, the
 * accept's data; delivered with f's handler mutex taken here, or (locked)
 * already held by the test.
 */
static int ud_reply_as(struct fake_id *f, const char *pdata, bool locked)
{
	u8 field[IB_CM_SIDR_REP_PRIVATE_DATA_SIZE] = { KDAT_PDATA_MAGIC, KDAT_PDATA_VERSION };
	struct rdma_cm_event ev = { .event = RDMA_CM_EVENT_ESTABLISHED };
	struct ib_global_route *grh;

	field[2] = strlen(pdata);
	memcpy(field + KDAT_PDATA_HDR, pdata, field[2]);
	ev.param.ud.private_data = field;
	ev.param.ud.private_data_len = sizeof(field);
	ev.param.ud.qp_num = UD_PEER_QPN;
	ev.param.ud.qkey = RDMA_UDP_QKEY;
	ev.param.ud.ah_attr.type = RDMA_AH_ATTR_TYPE_ROCE;
	rdma_ah_set_port_num(&ev.param.ud.ah_attr, 1);
	rdma_ah_set_ah_flags(&ev.param.ud.ah_attr, IB_AH_GRH);
	grh = rdma_ah_retrieve_grh(&ev.param.ud.ah_attr);
	grh->dgid.raw[15] = 0x77;
	grh->sgid_index = 3;
	grh->hop_limit = 64;
	return locked ? fake_deliver_locked(f, &ev) : fake_deliver(f, &ev);
}

static int ud_reply(struct fake_id *f, const char *pdata)
{
	return ud_reply_as(f, pdata, false);
}

/* A SIDR reply that refuses: the peer consumer's (kdat header, its data) or kdat's own */
static int ud_refusal(struct fake_id *f, bool by_provider)
{
	u8 field[IB_CM_SIDR_REP_PRIVATE_DATA_SIZE] = { KDAT_PDATA_MAGIC, KDAT_PDATA_VERSION, 2 };
	struct rdma_cm_event ev = { .event = RDMA_CM_EVENT_UNREACHABLE, .status = IB_SIDR_REJECT };

	field[3] = by_provider ? KDAT_PDATA_F_PROVIDER : 0;
	field[2] = by_provider ? 0 : 2;
	memcpy(field + KDAT_PDATA_HDR, "no", 2);
	ev.param.ud.private_data = field;
	ev.param.ud.private_data_len = sizeof(field);
	return fake_deliver(f, &ev);
}

/* The reply's peer in the event's tail; the EP becomes CONNECTED; rdma_cm drops the id. */
static void ud_exchange_established(struct kunit *test)
{
	struct fcm_test *t = test->priv;
	struct kdat_ep *ep = new_ud_ep(test);
	struct kdat_ep_step s = go(test, KDAT_EP_UNCONNECTED, KDAT_EP_STIM_UD_ESTABLISHED);
	struct fake_id *f = ud_sent(test, ep, KDAT_TIMEOUT_INFINITE);

	KUNIT_EXPECT_EQ(test, ud_reply(f, "ok"), 1);
	KUNIT_EXPECT_TRUE(test, f->cm_destroyed);
	KUNIT_ASSERT_EQ(test, kdat_evd_dequeue(t->evd, &t->ev, NULL), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_EQ(test, t->ev.number, s.event);
	KUNIT_EXPECT_PTR_EQ(test, t->ev.ep, ep);
	KUNIT_EXPECT_EQ(test, t->ev.ud.flags, KDAT_UD_EVENT | KDAT_UD_AH_VALID);
	KUNIT_EXPECT_EQ(test, t->ev.ud.qpn, (u32)UD_PEER_QPN);
	KUNIT_EXPECT_EQ(test, t->ev.ud.qkey, (u32)RDMA_UDP_QKEY);
	KUNIT_EXPECT_EQ(test, t->ev.ud.ah.is_global, 1);
	KUNIT_EXPECT_EQ(test, t->ev.ud.ah.sgid_index, 3);
	KUNIT_EXPECT_EQ(test, t->ev.ud.ah.dgid[15], 0x77);
	KUNIT_EXPECT_EQ(test, t->ev.ud.addr.port, 4444);
	KUNIT_EXPECT_EQ(test, t->ev.private_data_size, 2u);
	KUNIT_EXPECT_EQ(test, memcmp(t->ev.private_data, "ok", 2), 0);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), s.next);
	expect_no_events(test);
}

/*
 * Four exchanges on one EP at once (dtestx -u), each ending its own way, in
 * an order of the peers' choosing: one event each, none for another's id.
 */
static void ud_exchanges_end_once_each(struct kunit *test)
{
	struct kdat_ep *ep = new_ud_ep(test);
	struct rdma_cm_event ev;
	struct fake_id *f[4];
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(f); i++)
		f[i] = ud_sent(test, ep, KDAT_TIMEOUT_INFINITE);
	KUNIT_EXPECT_EQ(test, ud_refusal(f[2], false), 1);
	KUNIT_EXPECT_EQ(test, ud_reply(f[1], "a"), 1);
	KUNIT_EXPECT_EQ(test, ud_refusal(f[0], true), 1);
	ev = fake_ev(RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, NULL, 0);
	KUNIT_EXPECT_EQ(test, fake_deliver(f[3], &ev), 1);
	/* a second outcome for an id that had its own reaches nothing */
	KUNIT_EXPECT_EQ(test, ud_reply(f[2], "late"), -ENOENT);
	EXPECT_EVENTS(test, ep, KDAT_EP_EVENT_PEER_REJECTED, KDAT_EP_EVENT_ESTABLISHED,
		      KDAT_EP_EVENT_UNREACHABLE, KDAT_EP_EVENT_UNREACHABLE);
	for (i = 0; i < ARRAY_SIZE(f); i++)
		KUNIT_EXPECT_TRUE(test, f[i]->cm_destroyed);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), (u32)KDAT_EP_CONNECTED);
}

/* The connect timeout ends an unanswered exchange once; its id goes, a late reply is lost. */
static void ud_timeout_then_reply(struct kunit *test)
{
	struct kdat_ep *ep = new_ud_ep(test);
	struct fake_id *f = ud_sent(test, ep, SHORT_TIMEOUT_US);

	EXPECT_EVENTS(test, ep, go(test, KDAT_EP_UNCONNECTED, KDAT_EP_STIM_UD_TIMEOUT).event);
	KUNIT_EXPECT_TRUE(test, fake_wait_destroyed(f));
	KUNIT_EXPECT_FALSE(test, f->cm_destroyed);
	KUNIT_EXPECT_EQ(test, ud_reply(f, "late"), -ENOENT);
	expect_no_events(test);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), (u32)KDAT_EP_UNCONNECTED);
}

/* A reply in time stops the timeout: one event, never a TIMED_OUT after it. */
static void ud_reply_then_timeout(struct kunit *test)
{
	struct kdat_ep *ep = new_ud_ep(test);
	struct fake_id *f = ud_sent(test, ep, SHORT_TIMEOUT_US);

	KUNIT_EXPECT_EQ(test, ud_reply(f, "ok"), 1);
	msleep(3 * SHORT_TIMEOUT_US / 1000);
	kdat_test_flush_work();
	EXPECT_EVENTS(test, ep, KDAT_EP_EVENT_ESTABLISHED);
}

/*
 * A reply on its way (its handler mutex held) when the timeout fires: the
 * timeout ends the exchange, and its destroy_id waits for the reply's
 * upcall, which finds the exchange over and leaves the id alone.
 */
static void ud_reply_waits_while_timeout_ends_it(struct kunit *test)
{
	struct fcm_test *t = test->priv;
	struct kdat_ep *ep = new_ud_ep(test);
	struct fake_id *f = ud_sent(test, ep, SHORT_TIMEOUT_US);

	mutex_lock(&f->handler_mutex);
	KUNIT_EXPECT_EQ(test, kdat_evd_wait(t->evd, WAIT_US, 1, &t->ev, NULL), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_EQ(test, t->ev.number, (u32)KDAT_EP_EVENT_TIMED_OUT);
	KUNIT_EXPECT_FALSE(test, READ_ONCE(f->destroyed));
	KUNIT_EXPECT_EQ(test, ud_reply_as(f, "late", true), 0);
	mutex_unlock(&f->handler_mutex);
	KUNIT_EXPECT_TRUE(test, fake_wait_destroyed(f));
	KUNIT_EXPECT_FALSE(test, f->cm_destroyed);
	expect_no_events(test);
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), (u32)KDAT_EP_UNCONNECTED);
}

/* Freeing (or resetting) the EP ends its exchanges with no event; their ids go. */
static void ud_free_ends_exchanges(struct kunit *test)
{
	struct kdat_ep *ep = new_ud_ep(test);
	struct fake_id *a = ud_sent(test, ep, SHORT_TIMEOUT_US);
	struct fake_id *b = ud_sent(test, ep, KDAT_TIMEOUT_INFINITE);

	KUNIT_EXPECT_EQ(test, kdat_ep_free(ep), KDAT_DAT_SUCCESS);
	KUNIT_EXPECT_TRUE(test, fake_wait_destroyed(a));
	KUNIT_EXPECT_TRUE(test, fake_wait_destroyed(b));
	KUNIT_EXPECT_FALSE(test, a->cm_destroyed || b->cm_destroyed);
	KUNIT_EXPECT_EQ(test, ud_reply(b, "late"), -ENOENT);
	msleep(2 * SHORT_TIMEOUT_US / 1000);
	kdat_test_flush_work();
	expect_no_events(test);
}

/* The address lookup fails at once: the exchange is made and ends UNREACHABLE, its id goes. */
static void ud_unreachable_at_once(struct kunit *test)
{
	struct sockaddr_in peer = { .sin_family = AF_INET };
	struct kdat_ep *ep = new_ud_ep(test);
	struct fake_id *f;

	peer.sin_addr.s_addr = in_aton("192.0.2.77");
	fake.fail[OP_RESOLVE_ADDR] = -ENETUNREACH;
	KUNIT_EXPECT_EQ(test, kdat_test_ud_connect(ep, (struct sockaddr *)&peer, 4444, WAIT_US,
						   NULL, 0), KDAT_DAT_SUCCESS);
	f = fake_last();
	EXPECT_EVENTS(test, ep, go(test, KDAT_EP_UNCONNECTED, KDAT_EP_STIM_UD_UNREACHABLE).event);
	KUNIT_EXPECT_TRUE(test, fake_wait_destroyed(f));
	KUNIT_EXPECT_EQ(test, ep_state(test, ep), (u32)KDAT_EP_UNCONNECTED);
	/* another error is the call's own, with no event */
	fake.fail[OP_RESOLVE_ADDR] = -EINVAL;
	KUNIT_EXPECT_EQ(test, kdat_test_ud_connect(ep, (struct sockaddr *)&peer, 4444, WAIT_US,
						   NULL, 0),
			KDAT_ERR(KDAT_DAT_INVALID_ADDRESS, KDAT_DAT_NO_SUBTYPE));
	KUNIT_EXPECT_TRUE(test, fake_wait_destroyed(fake_last()));
	expect_no_events(test);
}

/* A kernel consumer's PSP has no UD EPs to offer: a SIDR request is refused as kdat's own. */
static void ud_request_refused_by_kernel_psp(struct kunit *test)
{
	struct fcm_test *t = test->priv;
	u8 field[IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE - 36] = {};
	struct rdma_cm_event ev = { .event = RDMA_CM_EVENT_CONNECT_REQUEST };
	struct fake_id *child;

	child = fake_new(t->listener->id.event_handler, t->listener->id.context);
	KUNIT_ASSERT_NOT_NULL(test, child);
	child->id.ps = RDMA_PS_UDP;
	child->id.qp_type = IB_QPT_UD;
	ev.param.ud.private_data = field;
	ev.param.ud.private_data_len = sizeof(field);
	KUNIT_EXPECT_NE(test, fake_deliver(child, &ev), 0);
	KUNIT_EXPECT_EQ(test, child->calls[OP_REJECT], 1u);
	KUNIT_EXPECT_TRUE(test, child->reject_len >= KDAT_PDATA_HDR &&
			  (child->reject_pdata[3] & KDAT_PDATA_F_PROVIDER));
	KUNIT_EXPECT_EQ(test, kdat_evd_dequeue(t->crevd, &t->ev, NULL),
			KDAT_ERR(KDAT_DAT_QUEUE_EMPTY, KDAT_DAT_NO_SUBTYPE));
}

static struct kunit_case kdat_fake_cm_cases[] = {
	KUNIT_CASE(timeout_then_connect_response),
	KUNIT_CASE(connect_response_then_timeout),
	KUNIT_CASE(timeout_due_before_addr_error),
	KUNIT_CASE(ep_work_waits_for_no_other_lock),
	KUNIT_CASE(established_without_rep),
	KUNIT_CASE(reject_after_timeout),
	KUNIT_CASE(reject_before_timeout),
	KUNIT_CASE(disconnect_races_established_active),
	KUNIT_CASE(disconnect_races_established_passive),
	KUNIT_CASE(established_then_disconnect_passive),
	KUNIT_CASE(dreq_during_disconnect_pending),
	KUNIT_CASE(graceful_close_runs_off_the_cm_thread),
	KUNIT_CASE(abrupt_between_drep_and_graceful_close),
	KUNIT_CASE(abrupt_after_graceful),
	KUNIT_CASE(abrupt_races_peer_dreq),
	KUNIT_CASE(dreq_call_outlives_free_and_drep),
	KUNIT_CASE(accept_on_ep_changed_under_it),
	KUNIT_CASE(accept_after_requester_gone),
	KUNIT_CASE(accept_races_device_removal),
	KUNIT_CASE(accept_fails_in_cm),
	KUNIT_CASE(reject_after_accept),
	KUNIT_CASE(peer_dreq_before_rtu),
	KUNIT_CASE(free_connected_ep_posts_disconnected),
	KUNIT_CASE(free_completion_pending_ep),
	KUNIT_CASE(accept_send_fails_after_disconnect),
	KUNIT_CASE(uqp_establish_rtu_unlocked),
	KUNIT_CASE(uqp_establish_races_disconnect),
	KUNIT_CASE(uqp_establish_rtu_fails),
	KUNIT_CASE(unreachable_at_once),
	KUNIT_CASE(route_error),
	KUNIT_CASE(resolve_timeouts_are_asked_again),
	KUNIT_CASE(route_resolution_fails_at_once),
	KUNIT_CASE_PARAM(device_removal_in_every_state, removal_gen_params),
	KUNIT_CASE(ud_exchange_established),
	KUNIT_CASE(ud_exchanges_end_once_each),
	KUNIT_CASE(ud_timeout_then_reply),
	KUNIT_CASE(ud_reply_then_timeout),
	KUNIT_CASE(ud_reply_waits_while_timeout_ends_it),
	KUNIT_CASE(ud_free_ends_exchanges),
	KUNIT_CASE(ud_request_refused_by_kernel_psp),
	KUNIT_CASE(ud_unreachable_at_once),
	{}
};

static int fcm_suite_init(struct kunit_suite *suite)
{
	mutex_init(&fake.lock);
	INIT_LIST_HEAD(&fake.ids);
	init_waitqueue_head(&fake.wq);
	return 0;
}

static struct kunit_suite kdat_fake_cm_suite = {
	.name = "kdat_fake_cm",
	.suite_init = fcm_suite_init,
	.init = fcm_init,
	.exit = fcm_exit,
	.test_cases = kdat_fake_cm_cases,
};
kunit_test_suite(kdat_fake_cm_suite);

MODULE_DESCRIPTION("KUnit: kdat endpoint logic against a fake connection manager");
MODULE_LICENSE("GPL");
