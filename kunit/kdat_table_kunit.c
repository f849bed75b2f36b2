// SPDX-License-Identifier: GPL-2.0
/*
 * KUnit: the endpoint state table (include/kdat/ep_table.h) against the
 * rules of dat_ep_dup_connect(3DAT), dat_ep_disconnect(3DAT) and
 * dat_cr_accept(3DAT), pair by pair, as the kernel compiles it.
 */
#include <kunit/test.h>
#include <kdat/ep_table.h>

static const unsigned int states[] = {
#define S_(name) KDAT_EP_##name,
	KDAT_EP_STATES(S_)
#undef S_
};

static struct kdat_ep_step step(unsigned int st, unsigned int stim)
{
	return kdat_ep_lookup(st, stim);
}

/* Every (state, stimulus) pair has an answer, and an operation never goes STALE. */
static void table_every_pair(struct kunit *test)
{
	unsigned int i, stim;

	for (i = 0; i < ARRAY_SIZE(states); i++) {
		for (stim = 0; stim < KDAT_EP_STIM_COUNT; stim++) {
			struct kdat_ep_step s = step(states[i], stim);

			KUNIT_EXPECT_TRUE(test, kdat_ep_state_valid(s.next));
			if (!kdat_ep_stimulus_is_event(stim))
				KUNIT_EXPECT_NE(test, s.action, (unsigned int)KDAT_EP_STALE);
			if (s.action != KDAT_EP_GO)
				KUNIT_EXPECT_EQ(test, s.next, states[i]);
			if (s.action == KDAT_EP_INVALID || s.action == KDAT_EP_STALE)
				KUNIT_EXPECT_EQ(test, s.event, KDAT_EP_EVENT_NONE);
		}
	}
}

/* Breadth-first from UNCONNECTED over GO transitions reaches all nine states. */
static void table_every_state_reachable(struct kunit *test)
{
	bool seen[KDAT_EP_STATE_LIMIT] = { [KDAT_EP_UNCONNECTED] = true };
	unsigned int queue[KDAT_EP_STATE_LIMIT], head = 0, tail = 0, i, stim;

	queue[tail++] = KDAT_EP_UNCONNECTED;
	while (head < tail) {
		unsigned int st = queue[head++];

		for (stim = 0; stim < KDAT_EP_STIM_COUNT; stim++) {
			struct kdat_ep_step s = step(st, stim);

			if (s.action == KDAT_EP_GO && !seen[s.next]) {
				seen[s.next] = true;
				queue[tail++] = s.next;
			}
		}
	}
	for (i = 0; i < ARRAY_SIZE(states); i++)
		KUNIT_EXPECT_TRUE_MSG(test, seen[states[i]], "state %u unreachable", states[i]);
}

/*
 * connect and dup_connect only from UNCONNECTED; one event per outcome
 * (dat_ep_dup_connect(3DAT)).
 */
static void table_connect(struct kunit *test)
{
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(states); i++) {
		struct kdat_ep_step c = step(states[i], KDAT_EP_STIM_CONNECT);
		struct kdat_ep_step d = step(states[i], KDAT_EP_STIM_DUP_CONNECT);
		unsigned int want = states[i] == KDAT_EP_UNCONNECTED ? KDAT_EP_GO : KDAT_EP_INVALID;

		KUNIT_EXPECT_EQ(test, c.action, want);
		KUNIT_EXPECT_EQ(test, d.action, want);
	}
	KUNIT_EXPECT_EQ(test, step(KDAT_EP_ACTIVE_CONNECTION_PENDING, KDAT_EP_STIM_TIMEOUT).event,
			KDAT_EP_EVENT_TIMED_OUT);
	KUNIT_EXPECT_EQ(test, step(KDAT_EP_ACTIVE_CONNECTION_PENDING,
				   KDAT_EP_STIM_PEER_REJECTED).event, KDAT_EP_EVENT_PEER_REJECTED);
	KUNIT_EXPECT_EQ(test, step(KDAT_EP_ACTIVE_CONNECTION_PENDING,
				   KDAT_EP_STIM_NON_PEER_REJECTED).event,
			KDAT_EP_EVENT_NON_PEER_REJECTED);
	KUNIT_EXPECT_EQ(test, step(KDAT_EP_ACTIVE_CONNECTION_PENDING,
				   KDAT_EP_STIM_UNREACHABLE).event, KDAT_EP_EVENT_UNREACHABLE);
	KUNIT_EXPECT_EQ(test, step(KDAT_EP_ACTIVE_CONNECTION_PENDING,
				   KDAT_EP_STIM_ESTABLISHED).next, (unsigned int)KDAT_EP_CONNECTED);
	/* a late accept after the timeout posts nothing */
	KUNIT_EXPECT_EQ(test, step(KDAT_EP_DISCONNECTED, KDAT_EP_STIM_ESTABLISHED).action,
			(unsigned int)KDAT_EP_STALE);
}

/* dat_ep_disconnect(3DAT): which states may be disconnected, and how. */
static void table_disconnect(struct kunit *test)
{
	static const unsigned int refused[] = {
		KDAT_EP_UNCONNECTED, KDAT_EP_RESERVED, KDAT_EP_PASSIVE_CONNECTION_PENDING,
		KDAT_EP_TENTATIVE_CONNECTION_PENDING,
	};
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(refused); i++) {
		KUNIT_EXPECT_EQ(test, step(refused[i], KDAT_EP_STIM_DISCONNECT_ABRUPT).action,
				(unsigned int)KDAT_EP_INVALID);
		KUNIT_EXPECT_EQ(test, step(refused[i], KDAT_EP_STIM_DISCONNECT_GRACEFUL).action,
				(unsigned int)KDAT_EP_INVALID);
	}
	KUNIT_EXPECT_EQ(test, step(KDAT_EP_CONNECTED, KDAT_EP_STIM_DISCONNECT_GRACEFUL).next,
			(unsigned int)KDAT_EP_DISCONNECT_PENDING);
	KUNIT_EXPECT_EQ(test, step(KDAT_EP_DISCONNECT_PENDING,
				   KDAT_EP_STIM_DISCONNECT_GRACEFUL).action,
			(unsigned int)KDAT_EP_NOOP);
	KUNIT_EXPECT_EQ(test, step(KDAT_EP_DISCONNECT_PENDING,
				   KDAT_EP_STIM_DISCONNECT_ABRUPT).next,
			(unsigned int)KDAT_EP_DISCONNECTED);
	KUNIT_EXPECT_EQ(test, step(KDAT_EP_DISCONNECTED, KDAT_EP_STIM_DISCONNECT_ABRUPT).action,
			(unsigned int)KDAT_EP_NOOP);
	KUNIT_EXPECT_EQ(test, step(KDAT_EP_DISCONNECT_PENDING, KDAT_EP_STIM_POST_SEND).action,
			(unsigned int)KDAT_EP_INVALID);
	KUNIT_EXPECT_EQ(test, step(KDAT_EP_ACTIVE_CONNECTION_PENDING,
				   KDAT_EP_STIM_DISCONNECT_GRACEFUL).next,
			(unsigned int)KDAT_EP_DISCONNECTED);
	KUNIT_EXPECT_EQ(test, step(KDAT_EP_COMPLETION_PENDING,
				   KDAT_EP_STIM_DISCONNECT_ABRUPT).event, KDAT_EP_EVENT_DISCONNECTED);
}

/*
 * accept on UNCONNECTED / PASSIVE / TENTATIVE only; failure is
 * ACCEPT_COMPLETION_ERROR (dat_cr_accept(3DAT)).
 */
static void table_accept(struct kunit *test)
{
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(states); i++) {
		unsigned int st = states[i];
		bool ok = st == KDAT_EP_UNCONNECTED || st == KDAT_EP_PASSIVE_CONNECTION_PENDING ||
			  st == KDAT_EP_TENTATIVE_CONNECTION_PENDING;

		KUNIT_EXPECT_EQ(test, step(st, KDAT_EP_STIM_ACCEPT).action,
				ok ? (unsigned int)KDAT_EP_GO : (unsigned int)KDAT_EP_INVALID);
	}
	KUNIT_EXPECT_EQ(test, step(KDAT_EP_COMPLETION_PENDING, KDAT_EP_STIM_ACCEPT_FAILED).event,
			KDAT_EP_EVENT_ACCEPT_COMPLETION_ERROR);
	KUNIT_EXPECT_EQ(test, step(KDAT_EP_COMPLETION_PENDING, KDAT_EP_STIM_TIMEOUT).next,
			(unsigned int)KDAT_EP_DISCONNECTED);
}

/*
 * The queries the module asks instead of comparing states, state by state;
 * dup_connect's source (dat_ep_dup_connect(3DAT): a "Connected local
 * Endpoint") among them.
 */
static void table_queries(struct kunit *test)
{
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(states); i++) {
		unsigned int s = states[i];
		bool idle = s == KDAT_EP_UNCONNECTED || s == KDAT_EP_RESERVED ||
			    s == KDAT_EP_PASSIVE_CONNECTION_PENDING ||
			    s == KDAT_EP_TENTATIVE_CONNECTION_PENDING;

		KUNIT_EXPECT_EQ_MSG(test, !!kdat_ep_state_connected(s),
				    s == KDAT_EP_CONNECTED || s == KDAT_EP_DISCONNECT_PENDING,
				    "state %u", s);
		KUNIT_EXPECT_EQ_MSG(test, !!kdat_ep_state_connecting(s),
				    s == KDAT_EP_ACTIVE_CONNECTION_PENDING, "state %u", s);
		KUNIT_EXPECT_EQ_MSG(test, !!kdat_ep_state_accepting(s),
				    s == KDAT_EP_COMPLETION_PENDING, "state %u", s);
		KUNIT_EXPECT_EQ_MSG(test, !!kdat_ep_state_draining(s),
				    s == KDAT_EP_DISCONNECT_PENDING, "state %u", s);
		KUNIT_EXPECT_EQ_MSG(test, !!kdat_ep_state_ended(s),
				    s == KDAT_EP_DISCONNECTED, "state %u", s);
		KUNIT_EXPECT_EQ_MSG(test, !!kdat_ep_state_allows(s, KDAT_EP_STIM_MODIFY), idle,
				    "state %u", s);
		KUNIT_EXPECT_EQ_MSG(test, !!kdat_ep_state_allows(s, KDAT_EP_STIM_DUP_SOURCE),
				    s == KDAT_EP_CONNECTED, "state %u", s);
	}
}

static struct kunit_case kdat_table_cases[] = {
	KUNIT_CASE(table_every_pair),
	KUNIT_CASE(table_every_state_reachable),
	KUNIT_CASE(table_connect),
	KUNIT_CASE(table_disconnect),
	KUNIT_CASE(table_accept),
	KUNIT_CASE(table_queries),
	{}
};

static struct kunit_suite kdat_table_suite = {
	.name = "kdat_ep_table",
	.test_cases = kdat_table_cases,
};
kunit_test_suite(kdat_table_suite);

MODULE_DESCRIPTION("KUnit: the kdat endpoint state table");
MODULE_LICENSE("GPL");
