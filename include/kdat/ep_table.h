/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note OR BSD-2-Clause */
/*
 * The DAT endpoint state machine: the ONE table of (state, stimulus) ->
 * (action, next state, connection event).  kdat.ko drives every endpoint
 * transition through it; libkdat, KUnit and the Python harness read the same
 * rules (Python parses the KDAT_EP_RULE lines below, so keep one rule a line).
 *
 * States are DAT's own values (DAT_EP_STATE_* in dat.h).
 * dat_ep_dup_connect(3DAT) calls the outcome of a failed connect
 * "DAT_EP_STATE_UNDISCONNECTED"; no DAT header defines it and every
 * implementation uses DAT_EP_STATE_DISCONNECTED, so this table does too.
 *
 * Actions:
 *   GO       change to the next state and post the event (unless NONE).
 *   NOOP     succeed and change nothing (graceful disconnect while
 *            DISCONNECT_PENDING "has no effect", disconnecting a
 *            DISCONNECTED EP "is no-op": dat_ep_disconnect(3DAT)).
 *   STALE    a provider event for a state that has moved on (a late accept
 *            after TIMED_OUT, say): no state change and no event; the module
 *            tears down whatever the stale event refers to.
 *   INVALID  refuse with DAT_INVALID_STATE (subtype from the EP's state) and
 *            leave everything unchanged.
 * A pair that has no rule takes its stimulus' default: INVALID for consumer
 * operations, STALE for provider events.  So no consumer call is ever
 * silently ignored.
 *
 * Effects: what a GO transition does to the EP's resources, applied by the
 * module with the state change and before the event is posted (so that
 * flushed completions precede DISCONNECTED):
 *   NONE       nothing.
 *   CONNECTED  the connection is up: the connect timeout is over.
 *   ENDED      an attempt ended without a connection: the connect timeout is
 *              over and the QP goes to ERR (posted receives complete as
 *              flushed).
 *   CLOSED     a connection ended: the QP goes to ERR and every posted
 *              request completes (flushed if it had not run) before the
 *              event.
 * The wire work around a transition (REQ, REP, RTU, DREQ, REJ) and the
 * rdma_cm id's end stay with the caller, who knows whether it runs in the
 * id's handler.
 *
 * Plain C, no libc: included by the kernel, C, C++ and parsed by Python.
 */
#ifndef KDAT_EP_TABLE_H
#define KDAT_EP_TABLE_H

#include <kdat/uapi/kdat_dat.h>

enum kdat_ep_state {
	KDAT_EP_UNCONNECTED = KDAT_DAT_EP_STATE_UNCONNECTED,
	KDAT_EP_RESERVED = KDAT_DAT_EP_STATE_RESERVED,
	KDAT_EP_PASSIVE_CONNECTION_PENDING = KDAT_DAT_EP_STATE_PASSIVE_CONNECTION_PENDING,
	KDAT_EP_ACTIVE_CONNECTION_PENDING = KDAT_DAT_EP_STATE_ACTIVE_CONNECTION_PENDING,
	KDAT_EP_TENTATIVE_CONNECTION_PENDING = KDAT_DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING,
	KDAT_EP_CONNECTED = KDAT_DAT_EP_STATE_CONNECTED,
	KDAT_EP_DISCONNECT_PENDING = KDAT_DAT_EP_STATE_DISCONNECT_PENDING,
	KDAT_EP_DISCONNECTED = KDAT_DAT_EP_STATE_DISCONNECTED,
	KDAT_EP_COMPLETION_PENDING = KDAT_DAT_EP_STATE_COMPLETION_PENDING,
};

/* One past the largest state value, for tables indexed by state. */
#define KDAT_EP_STATE_LIMIT	(KDAT_EP_COMPLETION_PENDING + 1)

/* Every state, in DAT order: KDAT_EP_STATES(X) expands X(NAME) per state. */
#define KDAT_EP_STATES(X) \
	X(UNCONNECTED) X(RESERVED) X(PASSIVE_CONNECTION_PENDING) \
	X(ACTIVE_CONNECTION_PENDING) X(TENTATIVE_CONNECTION_PENDING) \
	X(CONNECTED) X(DISCONNECT_PENDING) X(DISCONNECTED) X(COMPLETION_PENDING)

/*
 * Stimuli.  KDAT_EP_STIMULI(X) expands X(NAME, KIND) where KIND is OP for a
 * consumer operation (default INVALID) or EV for a provider event (default
 * STALE).
 */
#define KDAT_EP_STIMULI(X) \
	X(CONNECT, OP)		/* dat_ep_connect */ \
	X(DUP_CONNECT, OP)	/* dat_ep_dup_connect(3DAT) */ \
	X(DUP_SOURCE, OP)	/* ... names this EP's connection to copy */ \
	X(DISCONNECT_GRACEFUL, OP) /* dat_ep_disconnect(3DAT), graceful */ \
	X(DISCONNECT_ABRUPT, OP) /* dat_ep_disconnect(3DAT), abrupt */ \
	X(ACCEPT, OP)		/* dat_cr_accept(3DAT) on this EP */ \
	X(REJECT, OP)		/* dat_cr_reject of a CR naming this EP */ \
	X(RSP_CREATE, OP)	/* dat_rsp_create reserves this EP */ \
	X(RSP_FREE, OP)		/* dat_rsp_free releases the reservation */ \
	X(MODIFY, OP)		/* dat_ep_modify */ \
	X(RESET, OP)		/* dat_ep_reset */ \
	/* dat_ep_disconnect(3DAT): no new sends or RDMA in DISCONNECT_PENDING */ \
	X(POST_SEND, OP)	/* send, RDMA write/read */ \
	X(POST_RECV, OP)	/* receive */ \
	X(CR_ARRIVED, EV)	/* a CR names this EP (RSP) */ \
	X(PROVIDER_BIND, EV)	/* provider-flag PSP gave this EP a CR */ \
	X(ESTABLISHED, EV)	/* rdma_cm ESTABLISHED */ \
	X(PEER_REJECTED, EV)	/* consumer reject from the peer */ \
	X(NON_PEER_REJECTED, EV) /* no listener, backlog full, transport error */ \
	X(UNREACHABLE, EV)	/* address/route resolution failed */ \
	X(TIMEOUT, EV)		/* the connect timeout expired */ \
	X(ACCEPT_FAILED, EV)	/* passive establishment failed (dat_cr_accept(3DAT)) */ \
	X(DISCONNECTED, EV)	/* peer DREQ, or our DREQ completed */ \
	X(DRAINED, EV)		/* graceful: in-progress requests completed */ \
	X(BROKEN, EV)		/* transport error on a connection */ \
	X(DEVICE_REMOVED, EV)	/* the RDMA device went away */ \
	X(UD_CONNECT, OP)	/* dat_ep_connect of a UD EP: one address exchange */ \
	X(UD_ACCEPT, OP)	/* dat_cr_accept of a UD request on a UD EP */ \
	X(UD_ESTABLISHED, EV)	/* an exchange gave the peer's address */ \
	X(UD_REJECTED, EV)	/* the peer consumer refused an exchange */ \
	X(UD_UNREACHABLE, EV)	/* an exchange failed: no route, no answer, refused */ \
	X(UD_TIMEOUT, EV)	/* an exchange's connect timeout expired */

enum kdat_ep_stimulus {
#define KDAT_EP_STIM_ENUM_(name, kind) KDAT_EP_STIM_##name,
	KDAT_EP_STIMULI(KDAT_EP_STIM_ENUM_)
#undef KDAT_EP_STIM_ENUM_
	KDAT_EP_STIM_COUNT
};

enum kdat_ep_action {
	KDAT_EP_GO,
	KDAT_EP_NOOP,
	KDAT_EP_STALE,
	KDAT_EP_INVALID,
};

/* Connection events an EP transition can post (DAT event numbers); NONE = 0. */
#define KDAT_EP_EVENT_NONE		0u
#define KDAT_EP_EVENT_ESTABLISHED	KDAT_DAT_CONNECTION_EVENT_ESTABLISHED
#define KDAT_EP_EVENT_PEER_REJECTED	KDAT_DAT_CONNECTION_EVENT_PEER_REJECTED
#define KDAT_EP_EVENT_NON_PEER_REJECTED	KDAT_DAT_CONNECTION_EVENT_NON_PEER_REJECTED
#define KDAT_EP_EVENT_ACCEPT_COMPLETION_ERROR KDAT_DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR
#define KDAT_EP_EVENT_DISCONNECTED	KDAT_DAT_CONNECTION_EVENT_DISCONNECTED
#define KDAT_EP_EVENT_BROKEN		KDAT_DAT_CONNECTION_EVENT_BROKEN
#define KDAT_EP_EVENT_TIMED_OUT		KDAT_DAT_CONNECTION_EVENT_TIMED_OUT
#define KDAT_EP_EVENT_UNREACHABLE	KDAT_DAT_CONNECTION_EVENT_UNREACHABLE

/* Effect bits, and the effect sets the rules name (KDAT_EP_FX_<SET>). */
#define KDAT_EP_FX_STOP_TIMER	0x1u	/* cancel the connect timeout */
#define KDAT_EP_FX_QP_ERR	0x2u	/* move the QP to ERR */
#define KDAT_EP_FX_FLUSH	0x4u	/* ... and wait for every posted request */
#define KDAT_EP_FX_SEND_DREQ	0x8u	/* send the DREQ now (before the flush) */
#define KDAT_EP_FX_DRAIN	0x10u	/* the DREQ waits for the requests in flight */
#define KDAT_EP_FX_DROP_ID	0x20u	/* destroy the attempt's id: the peer sees a REJ */
#define KDAT_EP_FX_ORPHAN_ID	0x40u	/* an orphan finishes the CM's exchange on the id */
#define KDAT_EP_FX_NONE		0u
#define KDAT_EP_FX_CONNECTED	KDAT_EP_FX_STOP_TIMER
#define KDAT_EP_FX_ENDED	(KDAT_EP_FX_STOP_TIMER | KDAT_EP_FX_QP_ERR)
#define KDAT_EP_FX_CLOSED	(KDAT_EP_FX_QP_ERR | KDAT_EP_FX_FLUSH)
/* the consumer's disconnects (dat_ep_disconnect(3DAT)) */
#define KDAT_EP_FX_GRACEFUL	KDAT_EP_FX_DRAIN
#define KDAT_EP_FX_HANGUP	(KDAT_EP_FX_CLOSED | KDAT_EP_FX_SEND_DREQ)
#define KDAT_EP_FX_ABANDONED	(KDAT_EP_FX_ENDED | KDAT_EP_FX_DROP_ID)
#define KDAT_EP_FX_WITHDRAWN	(KDAT_EP_FX_ENDED | KDAT_EP_FX_ORPHAN_ID)

/*
 * The rules: KDAT_EP_RULES(R) expands R(STATE, STIMULUS, ACTION, NEXT, EVENT,
 * EFFECTS) with bare names (KDAT_EP_<STATE>, KDAT_EP_STIM_<STIMULUS>,
 * KDAT_EP_<ACTION>, KDAT_EP_EVENT_<EVENT>, KDAT_EP_FX_<EFFECTS>).  NEXT is
 * the state itself where nothing changes.
 */
#define KDAT_EP_RULES(R) \
	/* --- connect and dup_connect: only from UNCONNECTED --- */ \
	/* (to ACTIVE_CONNECTION_PENDING on success: dat_ep_dup_connect(3DAT)) */ \
	R(UNCONNECTED, CONNECT, GO, ACTIVE_CONNECTION_PENDING, NONE, NONE) \
	R(UNCONNECTED, DUP_CONNECT, GO, ACTIVE_CONNECTION_PENDING, NONE, NONE) \
	/* dup_connect copies a "Connected local Endpoint" (dat_ep_dup_connect(3DAT)) */ \
	R(CONNECTED, DUP_SOURCE, NOOP, CONNECTED, NONE, NONE) \
	/* --- the active side's outcomes: one event each (dat_ep_dup_connect(3DAT)) --- */ \
	R(ACTIVE_CONNECTION_PENDING, ESTABLISHED, GO, CONNECTED, ESTABLISHED, CONNECTED) \
	R(ACTIVE_CONNECTION_PENDING, PEER_REJECTED, GO, DISCONNECTED, PEER_REJECTED, ENDED) \
	R(ACTIVE_CONNECTION_PENDING, NON_PEER_REJECTED, GO, DISCONNECTED, NON_PEER_REJECTED, ENDED) \
	R(ACTIVE_CONNECTION_PENDING, UNREACHABLE, GO, DISCONNECTED, UNREACHABLE, ENDED) \
	R(ACTIVE_CONNECTION_PENDING, TIMEOUT, GO, DISCONNECTED, TIMED_OUT, ENDED) \
	R(ACTIVE_CONNECTION_PENDING, BROKEN, GO, DISCONNECTED, NON_PEER_REJECTED, ENDED) \
	R(ACTIVE_CONNECTION_PENDING, DISCONNECTED, GO, DISCONNECTED, NON_PEER_REJECTED, ENDED) \
	R(ACTIVE_CONNECTION_PENDING, DEVICE_REMOVED, GO, DISCONNECTED, NON_PEER_REJECTED, ENDED) \
	/* --- the passive side (dat_cr_accept(3DAT)) --- */ \
	R(RESERVED, CR_ARRIVED, GO, PASSIVE_CONNECTION_PENDING, NONE, NONE) \
	R(UNCONNECTED, PROVIDER_BIND, GO, TENTATIVE_CONNECTION_PENDING, NONE, NONE) \
	R(UNCONNECTED, ACCEPT, GO, COMPLETION_PENDING, NONE, NONE) \
	R(PASSIVE_CONNECTION_PENDING, ACCEPT, GO, COMPLETION_PENDING, NONE, NONE) \
	R(TENTATIVE_CONNECTION_PENDING, ACCEPT, GO, COMPLETION_PENDING, NONE, NONE) \
	R(PASSIVE_CONNECTION_PENDING, REJECT, GO, UNCONNECTED, NONE, NONE) \
	R(TENTATIVE_CONNECTION_PENDING, REJECT, GO, UNCONNECTED, NONE, NONE) \
	R(COMPLETION_PENDING, ESTABLISHED, GO, CONNECTED, ESTABLISHED, CONNECTED) \
	R(COMPLETION_PENDING, ACCEPT_FAILED, GO, DISCONNECTED, ACCEPT_COMPLETION_ERROR, ENDED) \
	R(COMPLETION_PENDING, PEER_REJECTED, GO, DISCONNECTED, ACCEPT_COMPLETION_ERROR, ENDED) \
	R(COMPLETION_PENDING, NON_PEER_REJECTED, GO, DISCONNECTED, ACCEPT_COMPLETION_ERROR, ENDED) \
	R(COMPLETION_PENDING, UNREACHABLE, GO, DISCONNECTED, ACCEPT_COMPLETION_ERROR, ENDED) \
	R(COMPLETION_PENDING, TIMEOUT, GO, DISCONNECTED, ACCEPT_COMPLETION_ERROR, ENDED) \
	R(COMPLETION_PENDING, BROKEN, GO, DISCONNECTED, ACCEPT_COMPLETION_ERROR, ENDED) \
	/* (a peer's DREQ means it connected: the CM handler steps ESTABLISHED before it) */ \
	R(COMPLETION_PENDING, DISCONNECTED, GO, DISCONNECTED, ACCEPT_COMPLETION_ERROR, ENDED) \
	R(COMPLETION_PENDING, DEVICE_REMOVED, GO, DISCONNECTED, ACCEPT_COMPLETION_ERROR, ENDED) \
	/* --- service points --- */ \
	R(UNCONNECTED, RSP_CREATE, GO, RESERVED, NONE, NONE) \
	R(RESERVED, RSP_FREE, GO, UNCONNECTED, NONE, NONE) \
	R(PASSIVE_CONNECTION_PENDING, RSP_FREE, NOOP, PASSIVE_CONNECTION_PENDING, NONE, NONE) \
	/* --- disconnect (dat_ep_disconnect(3DAT)) --- */ \
	R(CONNECTED, DISCONNECT_GRACEFUL, GO, DISCONNECT_PENDING, NONE, GRACEFUL) \
	R(CONNECTED, DISCONNECT_ABRUPT, GO, DISCONNECTED, DISCONNECTED, HANGUP) \
	R(DISCONNECT_PENDING, DISCONNECT_GRACEFUL, NOOP, DISCONNECT_PENDING, NONE, NONE) \
	R(DISCONNECT_PENDING, DISCONNECT_ABRUPT, GO, DISCONNECTED, DISCONNECTED, HANGUP) \
	R(DISCONNECTED, DISCONNECT_GRACEFUL, NOOP, DISCONNECTED, NONE, NONE) \
	R(DISCONNECTED, DISCONNECT_ABRUPT, NOOP, DISCONNECTED, NONE, NONE) \
	/* an attempt aborted: the peer sees a REJ; an accept's id is finished apart */ \
	R(ACTIVE_CONNECTION_PENDING, DISCONNECT_GRACEFUL, GO, DISCONNECTED, DISCONNECTED, ABANDONED) \
	R(ACTIVE_CONNECTION_PENDING, DISCONNECT_ABRUPT, GO, DISCONNECTED, DISCONNECTED, ABANDONED) \
	R(COMPLETION_PENDING, DISCONNECT_GRACEFUL, GO, DISCONNECTED, DISCONNECTED, WITHDRAWN) \
	R(COMPLETION_PENDING, DISCONNECT_ABRUPT, GO, DISCONNECTED, DISCONNECTED, WITHDRAWN) \
	R(DISCONNECT_PENDING, DRAINED, GO, DISCONNECTED, DISCONNECTED, CLOSED) \
	R(CONNECTED, DISCONNECTED, GO, DISCONNECTED, DISCONNECTED, CLOSED) \
	R(DISCONNECT_PENDING, DISCONNECTED, GO, DISCONNECTED, DISCONNECTED, CLOSED) \
	R(CONNECTED, BROKEN, GO, DISCONNECTED, BROKEN, CLOSED) \
	R(DISCONNECT_PENDING, BROKEN, GO, DISCONNECTED, BROKEN, CLOSED) \
	R(CONNECTED, DEVICE_REMOVED, GO, DISCONNECTED, BROKEN, NONE) \
	R(DISCONNECT_PENDING, DEVICE_REMOVED, GO, DISCONNECTED, BROKEN, NONE) \
	/* --- a removed device leaves idle EPs unusable, with no event --- */ \
	R(UNCONNECTED, DEVICE_REMOVED, GO, DISCONNECTED, NONE, NONE) \
	R(RESERVED, DEVICE_REMOVED, GO, DISCONNECTED, NONE, NONE) \
	R(PASSIVE_CONNECTION_PENDING, DEVICE_REMOVED, GO, DISCONNECTED, NONE, NONE) \
	R(TENTATIVE_CONNECTION_PENDING, DEVICE_REMOVED, GO, DISCONNECTED, NONE, NONE) \
	/* --- modify: before a connection exists --- */ \
	R(UNCONNECTED, MODIFY, NOOP, UNCONNECTED, NONE, NONE) \
	R(RESERVED, MODIFY, NOOP, RESERVED, NONE, NONE) \
	R(PASSIVE_CONNECTION_PENDING, MODIFY, NOOP, PASSIVE_CONNECTION_PENDING, NONE, NONE) \
	R(TENTATIVE_CONNECTION_PENDING, MODIFY, NOOP, TENTATIVE_CONNECTION_PENDING, NONE, NONE) \
	/* --- reset: a DISCONNECTED EP is made reusable --- */ \
	R(DISCONNECTED, RESET, GO, UNCONNECTED, NONE, NONE) \
	R(UNCONNECTED, RESET, NOOP, UNCONNECTED, NONE, NONE) \
	/* --- data transfer requests --- */ \
	R(CONNECTED, POST_SEND, NOOP, CONNECTED, NONE, NONE) \
	R(UNCONNECTED, POST_RECV, NOOP, UNCONNECTED, NONE, NONE) \
	R(RESERVED, POST_RECV, NOOP, RESERVED, NONE, NONE) \
	R(PASSIVE_CONNECTION_PENDING, POST_RECV, NOOP, PASSIVE_CONNECTION_PENDING, NONE, NONE) \
	R(TENTATIVE_CONNECTION_PENDING, POST_RECV, NOOP, TENTATIVE_CONNECTION_PENDING, NONE, NONE) \
	R(ACTIVE_CONNECTION_PENDING, POST_RECV, NOOP, ACTIVE_CONNECTION_PENDING, NONE, NONE) \
	R(COMPLETION_PENDING, POST_RECV, NOOP, COMPLETION_PENDING, NONE, NONE) \
	R(CONNECTED, POST_RECV, NOOP, CONNECTED, NONE, NONE) \
	R(DISCONNECT_PENDING, POST_RECV, NOOP, DISCONNECT_PENDING, NONE, NONE) \
	/* --- UD EPs: each exchange is one peer's address, not the EP's state; */ \
	/* the first peer's makes the EP CONNECTED (sends need one), more may follow --- */ \
	R(UNCONNECTED, UD_CONNECT, NOOP, UNCONNECTED, NONE, NONE) \
	R(CONNECTED, UD_CONNECT, NOOP, CONNECTED, NONE, NONE) \
	R(UNCONNECTED, UD_ACCEPT, NOOP, UNCONNECTED, NONE, NONE) \
	R(CONNECTED, UD_ACCEPT, NOOP, CONNECTED, NONE, NONE) \
	R(UNCONNECTED, UD_ESTABLISHED, GO, CONNECTED, ESTABLISHED, CONNECTED) \
	R(CONNECTED, UD_ESTABLISHED, GO, CONNECTED, ESTABLISHED, NONE) \
	R(UNCONNECTED, UD_REJECTED, GO, UNCONNECTED, PEER_REJECTED, NONE) \
	R(CONNECTED, UD_REJECTED, GO, CONNECTED, PEER_REJECTED, NONE) \
	R(UNCONNECTED, UD_UNREACHABLE, GO, UNCONNECTED, UNREACHABLE, NONE) \
	R(CONNECTED, UD_UNREACHABLE, GO, CONNECTED, UNREACHABLE, NONE) \
	R(UNCONNECTED, UD_TIMEOUT, GO, UNCONNECTED, TIMED_OUT, NONE) \
	R(CONNECTED, UD_TIMEOUT, GO, CONNECTED, TIMED_OUT, NONE)

/* The answer for one (state, stimulus) pair. */
struct kdat_ep_step {
	unsigned int action;	/* enum kdat_ep_action */
	unsigned int next;	/* enum kdat_ep_state */
	unsigned int event;	/* KDAT_EP_EVENT_*, 0 for none */
	unsigned int effects;	/* KDAT_EP_FX_* bits, 0 for none */
};

/* Is this state one of the nine DAT states above? */
static inline int kdat_ep_state_valid(unsigned int state)
{
	switch (state) {
#define KDAT_EP_STATE_CASE_(name) case KDAT_EP_##name:
	KDAT_EP_STATES(KDAT_EP_STATE_CASE_)
#undef KDAT_EP_STATE_CASE_
		return 1;
	default:
		return 0;
	}
}

/* Is this stimulus a provider event (default STALE) rather than an operation? */
static inline int kdat_ep_stimulus_is_event(unsigned int stimulus)
{
	switch (stimulus) {
#define KDAT_EP_STIM_KIND_OP 0
#define KDAT_EP_STIM_KIND_EV 1
#define KDAT_EP_STIM_KIND_(name, kind) \
	case KDAT_EP_STIM_##name: return KDAT_EP_STIM_KIND_##kind;
	KDAT_EP_STIMULI(KDAT_EP_STIM_KIND_)
#undef KDAT_EP_STIM_KIND_
	default:
		return 0;
	}
}

/*
 * Look a pair up.  A switch over the rules: the compiler turns it into a
 * jump table, and a duplicate rule is a compile error (duplicate case).
 */
static inline struct kdat_ep_step kdat_ep_lookup(unsigned int state, unsigned int stimulus)
{
	struct kdat_ep_step step;

#define KDAT_EP_KEY_(st, stim) \
	((unsigned int)(st) * (unsigned int)KDAT_EP_STIM_COUNT + (unsigned int)(stim))
	switch (KDAT_EP_KEY_(state, stimulus)) {
#define KDAT_EP_RULE_CASE_(st, stim, act, nxt, ev, fx) \
	case KDAT_EP_KEY_(KDAT_EP_##st, KDAT_EP_STIM_##stim): \
		step.action = KDAT_EP_##act; \
		step.next = KDAT_EP_##nxt; \
		step.event = KDAT_EP_EVENT_##ev; \
		step.effects = KDAT_EP_FX_##fx; \
		return step;
	KDAT_EP_RULES(KDAT_EP_RULE_CASE_)
#undef KDAT_EP_RULE_CASE_
#undef KDAT_EP_KEY_
	default:
		break;
	}
	step.action = kdat_ep_stimulus_is_event(stimulus) ? KDAT_EP_STALE : KDAT_EP_INVALID;
	step.next = state;
	step.event = KDAT_EP_EVENT_NONE;
	step.effects = KDAT_EP_FX_NONE;
	return step;
}

/*
 * Table queries: what a state means, for code that asks about a state
 * without moving the EP (reports, the CM handler, teardown, the libraries).
 * Each answer is read off the rules above, so it follows any change to them.
 */

/* May this consumer operation be applied in this state (anything but INVALID)? */
static inline int kdat_ep_state_allows(unsigned int state, unsigned int stimulus)
{
	return kdat_ep_lookup(state, stimulus).action != KDAT_EP_INVALID;
}

/* An active connect is under way: the connect timeout ends it (TIMED_OUT). */
static inline int kdat_ep_state_connecting(unsigned int state)
{
	return kdat_ep_lookup(state, KDAT_EP_STIM_TIMEOUT).event == KDAT_EP_EVENT_TIMED_OUT;
}

/* Accepted, not yet established: a failure now is ACCEPT_COMPLETION_ERROR. */
static inline int kdat_ep_state_accepting(unsigned int state)
{
	return kdat_ep_lookup(state, KDAT_EP_STIM_ACCEPT_FAILED).action == KDAT_EP_GO;
}

/*
 * A connection exists (the negotiated RDMA read depths apply, a DREQ ends
 * it): the peer's disconnect ends it with DISCONNECTED
 * (dat_ep_disconnect(3DAT)).
 */
static inline int kdat_ep_state_connected(unsigned int state)
{
	return kdat_ep_lookup(state, KDAT_EP_STIM_DISCONNECTED).event == KDAT_EP_EVENT_DISCONNECTED;
}

/* A graceful disconnect waits for the EP's requests to complete (DRAINED). */
static inline int kdat_ep_state_draining(unsigned int state)
{
	return kdat_ep_lookup(state, KDAT_EP_STIM_DRAINED).action == KDAT_EP_GO;
}

/* The connection (or the attempt) is over: only dat_ep_reset makes the EP usable. */
static inline int kdat_ep_state_ended(unsigned int state)
{
	return kdat_ep_lookup(state, KDAT_EP_STIM_RESET).action == KDAT_EP_GO;
}

/* DAT_INVALID_STATE subtype naming the state an EP was in. */
static inline unsigned int kdat_ep_invalid_state_subtype(unsigned int state)
{
	switch (state) {
	case KDAT_EP_UNCONNECTED: return KDAT_DAT_INVALID_STATE_EP_UNCONNECTED;
	case KDAT_EP_RESERVED: return KDAT_DAT_INVALID_STATE_EP_RESERVED;
	case KDAT_EP_PASSIVE_CONNECTION_PENDING: return KDAT_DAT_INVALID_STATE_EP_PASSCONNPENDING;
	case KDAT_EP_ACTIVE_CONNECTION_PENDING: return KDAT_DAT_INVALID_STATE_EP_ACTCONNPENDING;
	case KDAT_EP_TENTATIVE_CONNECTION_PENDING: return KDAT_DAT_INVALID_STATE_EP_TENTCONNPENDING;
	case KDAT_EP_CONNECTED: return KDAT_DAT_INVALID_STATE_EP_CONNECTED;
	case KDAT_EP_DISCONNECT_PENDING: return KDAT_DAT_INVALID_STATE_EP_DISCPENDING;
	case KDAT_EP_DISCONNECTED: return KDAT_DAT_INVALID_STATE_EP_DISCONNECTED;
	case KDAT_EP_COMPLETION_PENDING: return KDAT_DAT_INVALID_STATE_EP_COMPLPENDING;
	default: return KDAT_DAT_INVALID_STATE_EP_NOTREADY;
	}
}

#endif /* KDAT_EP_TABLE_H */
