/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kdat's tracepoints (tracefs: events/kdat/).  Every endpoint step through the
 * state table (refused ones too: action says what the table answered), every
 * rdma_cm event kdat receives (a failed connect's reason is the event and
 * status before its step), and every connection request.  "table" is the
 * owner's shared-table id and "ep"/"sp"/"cr" the handles, as kdatctl lists
 * them.  State and stimulus names come from ep_table.h, the one table.
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM kdat

#if !defined(_KDAT_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define _KDAT_TRACE_H

#include <linux/tracepoint.h>
#include <rdma/rdma_cm.h>
#include <kdat/ep_table.h>

#define KDAT_TRACE_STATE_(name) { KDAT_EP_##name, #name },
#define KDAT_TRACE_STIM_(name, kind) { KDAT_EP_STIM_##name, #name },
#define kdat_trace_state(s) \
	__print_symbolic(s, KDAT_EP_STATES(KDAT_TRACE_STATE_) { ~0u, "?" })
#define kdat_trace_stimulus(s) \
	__print_symbolic(s, KDAT_EP_STIMULI(KDAT_TRACE_STIM_) { ~0u, "?" })
#define kdat_trace_action(a)					\
	__print_symbolic(a, { KDAT_EP_GO, "GO" }, { KDAT_EP_NOOP, "NOOP" },	\
			 { KDAT_EP_STALE, "STALE" }, { KDAT_EP_INVALID, "INVALID" })
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

TRACE_EVENT(kdat_ep_step,
	TP_PROTO(u64 table, u32 ep, unsigned int from, unsigned int stimulus,
		 unsigned int action, unsigned int to, u32 event, u32 effects),
	TP_ARGS(table, ep, from, stimulus, action, to, event, effects),
	TP_STRUCT__entry(
		__field(u64, table)
		__field(u32, ep)
		__field(unsigned int, from)
		__field(unsigned int, stimulus)
		__field(unsigned int, action)
		__field(unsigned int, to)
		__field(u32, event)
		__field(u32, effects)
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
	),
	TP_printk("table=%llu ep=%u %s %s -> %s action=%s event=0x%x effects=0x%x",
		  __entry->table, __entry->ep, kdat_trace_state(__entry->from),
		  kdat_trace_stimulus(__entry->stimulus), kdat_trace_state(__entry->to),
		  kdat_trace_action(__entry->action), __entry->event, __entry->effects)
);

TRACE_EVENT(kdat_cm_event,
	TP_PROTO(u64 table, u32 type, u32 handle, int event, int status),
	TP_ARGS(table, type, handle, event, status),
	TP_STRUCT__entry(
		__field(u64, table)
		__field(u32, type)
		__field(u32, handle)
		__field(int, event)
		__field(int, status)
	),
	TP_fast_assign(
		__entry->table = table;
		__entry->type = type;
		__entry->handle = handle;
		__entry->event = event;
		__entry->status = status;
	),
	TP_printk("table=%llu %s=%u %s status=%d", __entry->table,
		  __print_symbolic(__entry->type, { KDAT_OBJ_EP, "ep" }, { KDAT_OBJ_SP, "sp" },
				   { KDAT_OBJ_CR, "cr" }, { KDAT_OBJ_ORPHAN, "orphan" }),
		  __entry->handle, kdat_trace_cm_event(__entry->event), __entry->status)
);

TRACE_EVENT(kdat_cr_arrival,
	TP_PROTO(u64 table, u32 sp, u32 cr, u32 ep, u64 conn_qual, u32 private_data_size),
	TP_ARGS(table, sp, cr, ep, conn_qual, private_data_size),
	TP_STRUCT__entry(
		__field(u64, table)
		__field(u32, sp)
		__field(u32, cr)
		__field(u32, ep)
		__field(u64, conn_qual)
		__field(u32, private_data_size)
	),
	TP_fast_assign(
		__entry->table = table;
		__entry->sp = sp;
		__entry->cr = cr;
		__entry->ep = ep;
		__entry->conn_qual = conn_qual;
		__entry->private_data_size = private_data_size;
	),
	TP_printk("table=%llu sp=%u cr=%u ep=%u conn_qual=%llu private_data=%u",
		  __entry->table, __entry->sp, __entry->cr, __entry->ep, __entry->conn_qual,
		  __entry->private_data_size)
);

#endif /* _KDAT_TRACE_H */

#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE kdat_trace
#include <trace/define_trace.h>
