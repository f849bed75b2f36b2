/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note OR BSD-2-Clause */
/*
 * An IA's connection counters as a list (included by <kdat/uapi/kdat.h>).
 */
#ifndef _UAPI_KDAT_COUNTERS_H
#define _UAPI_KDAT_COUNTERS_H

/*
 * KDAT_IA_COUNTERS(X) expands X(NAME, name) per counter, in the order of
 * struct kdat_ia_counters' value[]: the kernel counts from it, and kdatctl and
 * the test harness name the values from it.  Counters are only ever appended.
 * Each counts, since the IA was opened:
 *   CONNECTS              dat_ep_connect/dat_ep_dup_connect calls that started a connect
 *   REQUESTS              connection requests that reached the IA's PSPs and RSPs (CRs made)
 *   REQUESTS_REFUSED      requests kdat refused before any consumer saw them (backlog full,
 *                         RSP already used, listener being freed)
 *   ACCEPTS               dat_cr_accept calls that sent an accept
 *   REJECTS               dat_cr_reject calls
 *   ESTABLISHED           ESTABLISHED events (either side)
 *   PEER_REJECTED         PEER_REJECTED events: the remote consumer rejected our connect
 *   NON_PEER_REJECTED     NON_PEER_REJECTED events, whatever the reason; by reason:
 *   REJECTED_NO_LISTENER    nobody listened on the remote qualifier (CM reject, invalid
 *                           service id)
 *   REJECTED_BY_PROVIDER    the remote kdat refused the request itself (REQUESTS_REFUSED there)
 *   REJECTED_OTHER          anything else: a reject without the remote consumer's data,
 *                           a stale connection, a local QP or CM failure
 *   TIMED_OUT             TIMED_OUT events (the connect's own timeout)
 *   UNREACHABLE           UNREACHABLE events (address or route resolution failed, the CM
 *                         gave up on its retries)
 *   ACCEPT_ERRORS         ACCEPT_COMPLETION_ERROR events
 *   DISCONNECTS           dat_ep_disconnect calls that began a disconnect (graceful or abrupt)
 *   DISCONNECTED          DISCONNECTED events
 *   BROKEN                BROKEN events
 */
#define KDAT_IA_COUNTERS(X)						\
	X(CONNECTS, connects)						\
	X(REQUESTS, requests)						\
	X(REQUESTS_REFUSED, requests_refused)				\
	X(ACCEPTS, accepts)						\
	X(REJECTS, rejects)						\
	X(ESTABLISHED, established)					\
	X(PEER_REJECTED, peer_rejected)					\
	X(NON_PEER_REJECTED, non_peer_rejected)				\
	X(REJECTED_NO_LISTENER, rejected_no_listener)			\
	X(REJECTED_BY_PROVIDER, rejected_by_provider)			\
	X(REJECTED_OTHER, rejected_other)				\
	X(TIMED_OUT, timed_out)						\
	X(UNREACHABLE, unreachable)					\
	X(ACCEPT_ERRORS, accept_errors)					\
	X(DISCONNECTS, disconnects)					\
	X(DISCONNECTED, disconnected)					\
	X(BROKEN, broken)

#define KDAT_IA_COUNTER_ENUM_(NAME, name) KDAT_IA_COUNTER_##NAME,
enum kdat_ia_counter {
	KDAT_IA_COUNTERS(KDAT_IA_COUNTER_ENUM_)
	KDAT_IA_NR_COUNTERS
};
#undef KDAT_IA_COUNTER_ENUM_

/* value[]'s room: counters beyond it would grow struct kdat_ia_counters at its end. */
#define KDAT_IA_COUNTERS_ROOM	32

#endif /* _UAPI_KDAT_COUNTERS_H */
