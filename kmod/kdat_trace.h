/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kdat's tracepoints (tracefs: events/kdat/).  Every endpoint step through the
 * state table (refused ones too: action says what the table answered), every
 * rdma_cm event kdat receives (a failed connect's reason is the event and
 * status before its step), and every connection request.  "table" is the
 * owner's shared-table id and "ep"/"sp"/"cr" the handles, as kdatctl lists
 * them.  State and stimulus names come from ep_table.h, the one table.
 *
 * Each event also carries what joins it with rdma_cma's own tracepoints and
 * `rdma res show cm_id`: the id's source and destination (address and port,
 * printed as rdma_cma prints them; a connection qualifier is the port) and,
 * on EP steps, the QP number (lqpn).  rdma_cma's restrack id (cm.id) is
 * private to the core; cm_id is the id's pointer, which follows one id from
 * a CR to its EP or an orphan.
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM kdat

#if !defined(_KDAT_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define _KDAT_TRACE_H

#include <linux/tracepoint.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <rdma/rdma_cm.h>
#include <kdat/ep_table.h>

#ifndef KDAT_TRACE_ONCE_
#define KDAT_TRACE_ONCE_
/* What an EP step prints of the EP's connection. */
struct kdat_trace_conn {
	const struct sockaddr *src, *dst;	/* NULL or unset: 0.0.0.0:0 */
	const struct rdma_cm_id *id;		/* the EP's id, or NULL */
	u32 qpn;
};

/*
 * An address as rdma_cma's tracepoints keep one (a sockaddr_in6-sized copy,
 * printed with %pISpc), read only as far as its family reaches.
 */
static inline void kdat_trace_addr(u8 *to, const struct sockaddr *sa)
{
	memset(to, 0, sizeof(struct sockaddr_in6));
	if (sa && sa->sa_family == AF_INET6)
		memcpy(to, sa, sizeof(struct sockaddr_in6));
	else if (sa && sa->sa_family == AF_INET)
		memcpy(to, sa, sizeof(struct sockaddr_in));
	else	/* %pISpc has no text for AF_UNSPEC */
		((struct sockaddr *)to)->sa_family = AF_INET;
}
#endif

#include "kdat_trace_enums.h"

/* each list from ep_table.h ends in a catch-all entry, which takes the X macros' last comma */
#define KDAT_TRACE_STATE_(name) { KDAT_EP_##name, #name },
#define KDAT_TRACE_STIM_(name, kind) { KDAT_EP_STIM_##name, #name },
#define kdat_trace_state(s) \
	__print_symbolic(s, KDAT_EP_STATES(KDAT_TRACE_STATE_) { ~0u, "?" })
#define kdat_trace_stimulus(s) \
	__print_symbolic(s, KDAT_EP_STIMULI(KDAT_TRACE_STIM_) { ~0u, "?" })
#define kdat_trace_action(a)					\
	__print_symbolic(a, { KDAT_EP_GO, "GO" }, { KDAT_EP_NOOP, "NOOP" },	\
			 { KDAT_EP_STALE, "STALE" }, { KDAT_EP_INVALID, "INVALID" })
#define kdat_trace_ep_event(e)						\
	__print_symbolic(e,						\
		{ KDAT_EP_EVENT_NONE, "NONE" },				\
		{ KDAT_EP_EVENT_ESTABLISHED, "ESTABLISHED" },		\
		{ KDAT_EP_EVENT_PEER_REJECTED, "PEER_REJECTED" },	\
		{ KDAT_EP_EVENT_NON_PEER_REJECTED, "NON_PEER_REJECTED" },	\
		{ KDAT_EP_EVENT_ACCEPT_COMPLETION_ERROR, "ACCEPT_COMPLETION_ERROR" }, \
		{ KDAT_EP_EVENT_DISCONNECTED, "DISCONNECTED" },		\
		{ KDAT_EP_EVENT_BROKEN, "BROKEN" },			\
		{ KDAT_EP_EVENT_TIMED_OUT, "TIMED_OUT" },		\
		{ KDAT_EP_EVENT_UNREACHABLE, "UNREACHABLE" })
#define kdat_trace_cm_event(e)						\
	__print_symbolic(e,						\
		{ RDMA_CM_EVENT_ADDR_RESOLVED, "ADDR_RESOLVED" },	\
		{ RDMA_CM_EVENT_ADDR_ERROR, "ADDR_ERROR" },		\
		{ RDMA_CM_EVENT_ROUTE_RESOLVED, "ROUTE_RESOLVED" },	\
		{ RDMA_CM_EVENT_ROUTE_ERROR, "ROUTE_ERROR" },		\
		{ RDMA_CM_EVENT_CONNECT_REQUEST, "CONNECT_REQUEST" },	\
		{ RDMA_CM_EVENT_CONNECT_RESPONSE, "CONNECT_RESPONSE" },	\
		{ RDMA_CM_EVENT_CONNECT_ERROR, "CONNECT_ERROR" },	\
		{ RDMA_CM_EVENT_UNREACHABLE, "UNREACHABLE" },		\
		{ RDMA_CM_EVENT_REJECTED, "REJECTED" },			\
		{ RDMA_CM_EVENT_ESTABLISHED, "ESTABLISHED" },		\
		{ RDMA_CM_EVENT_DISCONNECTED, "DISCONNECTED" },		\
		{ RDMA_CM_EVENT_DEVICE_REMOVAL, "DEVICE_REMOVAL" },	\
		{ RDMA_CM_EVENT_MULTICAST_JOIN, "MULTICAST_JOIN" },	\
		{ RDMA_CM_EVENT_MULTICAST_ERROR, "MULTICAST_ERROR" },	\
		{ RDMA_CM_EVENT_ADDR_CHANGE, "ADDR_CHANGE" },		\
		{ RDMA_CM_EVENT_TIMEWAIT_EXIT, "TIMEWAIT_EXIT" })
/* the id's fields, as rdma_cma's tracepoints print its addresses */
#define KDAT_TRACE_ID_FMT "src=%pISpc dst=%pISpc cm_id=%p"

TRACE_EVENT(kdat_ep_step,
	TP_PROTO(u64 table, u32 ep, unsigned int from, unsigned int stimulus,
		 unsigned int action, unsigned int to, u32 event, u32 effects,
		 const struct kdat_trace_conn *conn),
	TP_ARGS(table, ep, from, stimulus, action, to, event, effects, conn),
	TP_STRUCT__entry(
		__field(u64, table)
		__field(u32, ep)
		__field(unsigned int, from)
		__field(unsigned int, stimulus)
		__field(unsigned int, action)
		__field(unsigned int, to)
		__field(u32, event)
		__field(u32, effects)
		__field(u32, qpn)
		__field(const void *, cm_id)
		__array(u8, src, sizeof(struct sockaddr_in6))
		__array(u8, dst, sizeof(struct sockaddr_in6))
	),
	TP_fast_assign(
		__entry->table = table;
		__entry->ep = ep;
		__entry->from = from;
		__entry->stimulus = stimulus;
		__entry->action = action;
		__entry->to = to;
		__entry->event = event;
		__entry->effects = effects;
		__entry->qpn = conn->qpn;
		__entry->cm_id = conn->id;
		kdat_trace_addr(__entry->src, conn->src);
		kdat_trace_addr(__entry->dst, conn->dst);
	),
	TP_printk("table=%llu ep=%u %s %s -> %s action=%s event=%s effects=0x%x qpn=%u "
		  KDAT_TRACE_ID_FMT,
		  __entry->table, __entry->ep, kdat_trace_state(__entry->from),
		  kdat_trace_stimulus(__entry->stimulus), kdat_trace_state(__entry->to),
		  kdat_trace_action(__entry->action), kdat_trace_ep_event(__entry->event),
		  __entry->effects, __entry->qpn, __entry->src, __entry->dst, __entry->cm_id)
);

TRACE_EVENT(kdat_cm_event,
	TP_PROTO(u64 table, u32 type, u32 handle, const struct rdma_cm_id *id, int event,
		 int status),
	TP_ARGS(table, type, handle, id, event, status),
	TP_STRUCT__entry(
		__field(u64, table)
		__field(u32, type)
		__field(u32, handle)
		__field(int, event)
		__field(int, status)
		__field(const void *, cm_id)
		__array(u8, src, sizeof(struct sockaddr_in6))
		__array(u8, dst, sizeof(struct sockaddr_in6))
	),
	TP_fast_assign(
		__entry->table = table;
		__entry->type = type;
		__entry->handle = handle;
		__entry->event = event;
		__entry->status = status;
		__entry->cm_id = id;
		kdat_trace_addr(__entry->src, (const struct sockaddr *)&id->route.addr.src_addr);
		kdat_trace_addr(__entry->dst, (const struct sockaddr *)&id->route.addr.dst_addr);
	),
	TP_printk("table=%llu %s=%u %s status=%d " KDAT_TRACE_ID_FMT,
		  __entry->table,
		  __print_symbolic(__entry->type, { KDAT_OBJ_EP, "ep" }, { KDAT_OBJ_SP, "sp" },
				   { KDAT_OBJ_CR, "cr" }, { KDAT_OBJ_ORPHAN, "orphan" }),
		  __entry->handle, kdat_trace_cm_event(__entry->event), __entry->status,
		  __entry->src, __entry->dst, __entry->cm_id)
);

TRACE_EVENT(kdat_cr_arrival,
	TP_PROTO(u64 table, u32 sp, u32 cr, u32 ep, u64 conn_qual, u32 private_data_size,
		 const struct sockaddr *src, const struct sockaddr *dst, const struct rdma_cm_id *id),
	TP_ARGS(table, sp, cr, ep, conn_qual, private_data_size, src, dst, id),
	TP_STRUCT__entry(
		__field(u64, table)
		__field(u32, sp)
		__field(u32, cr)
		__field(u32, ep)
		__field(u64, conn_qual)
		__field(u32, private_data_size)
		__field(const void *, cm_id)
		__array(u8, src, sizeof(struct sockaddr_in6))
		__array(u8, dst, sizeof(struct sockaddr_in6))
	),
	TP_fast_assign(
		__entry->table = table;
		__entry->sp = sp;
		__entry->cr = cr;
		__entry->ep = ep;
		__entry->conn_qual = conn_qual;
		__entry->private_data_size = private_data_size;
		__entry->cm_id = id;
		kdat_trace_addr(__entry->src, src);
		kdat_trace_addr(__entry->dst, dst);
	),
	TP_printk("table=%llu sp=%u cr=%u ep=%u conn_qual=%llu private_data=%u " KDAT_TRACE_ID_FMT,
		  __entry->table, __entry->sp, __entry->cr, __entry->ep, __entry->conn_qual,
		  __entry->private_data_size, __entry->src, __entry->dst, __entry->cm_id)
);

#endif /* _KDAT_TRACE_H */

#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE kdat_trace
#include <trace/define_trace.h>
