/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kdat_blk's tracepoints (tracefs: events/kdat_blk/): every controller state
 * change, every queue connect a target refused (with its reason), and every
 * request that ends in error.  "ctrl" is the controller's name (kdatbN, as
 * /sys/class/kdat-blk lists it); states, reasons and opcodes print as words
 * (their values reach the exported formats as numbers, for perf and
 * trace-cmd).
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM kdat_blk

#if !defined(_KDAT_BLK_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define _KDAT_BLK_TRACE_H

#include <linux/tracepoint.h>
#include "kdat_blk_proto.h"

#ifndef KDAT_BLK_TRACE_ONCE_
#define KDAT_BLK_TRACE_ONCE_
/* The controller's states: the one list the enum, the names and the traces are made from. */
#define KBLK_STATES(X)				\
	X(CONNECTING, "connecting")		\
	X(LIVE, "live")				\
	X(RESETTING, "resetting")		\
	X(DEAD, "dead")				\
	X(DELETING, "deleting")

#define KBLK_STATE_ENUM_(name, text) KBLK_##name,
enum kblk_state { KBLK_STATES(KBLK_STATE_ENUM_) KBLK_NR_STATES };
/* a controller's name, kdatbN (copied: __string's helpers differ between kernels) */
#define KBLK_TRACE_NAME_LEN	16
#endif

TRACE_DEFINE_ENUM(KBLK_CONNECTING);
TRACE_DEFINE_ENUM(KBLK_LIVE);
TRACE_DEFINE_ENUM(KBLK_RESETTING);
TRACE_DEFINE_ENUM(KBLK_DEAD);
TRACE_DEFINE_ENUM(KBLK_DELETING);
TRACE_DEFINE_ENUM(KBLK_REJ_VERSION);
TRACE_DEFINE_ENUM(KBLK_REJ_DEPTH);
TRACE_DEFINE_ENUM(KBLK_REJ_RESOURCES);
TRACE_DEFINE_ENUM(KBLK_REJ_QUEUE);
TRACE_DEFINE_ENUM(KBLK_OP_READ);
TRACE_DEFINE_ENUM(KBLK_OP_WRITE);
TRACE_DEFINE_ENUM(KBLK_OP_FLUSH);
TRACE_DEFINE_ENUM(KBLK_OP_DISCARD);

#define KBLK_TRACE_STATE_(name, text) { KBLK_##name, text },
#define kblk_trace_state(s) __print_symbolic(s, KBLK_STATES(KBLK_TRACE_STATE_) { ~0u, "?" })
#define kblk_trace_reason(r)					\
	__print_symbolic(r, { 0, "NONE" }, { KBLK_REJ_VERSION, "VERSION" },	\
			 { KBLK_REJ_DEPTH, "DEPTH" },		\
			 { KBLK_REJ_RESOURCES, "RESOURCES" },	\
			 { KBLK_REJ_QUEUE, "QUEUE" })
#define kblk_trace_op(o)					\
	__print_symbolic(o, { KBLK_OP_READ, "READ" },			\
			 { KBLK_OP_WRITE, "WRITE" }, { KBLK_OP_FLUSH, "FLUSH" },	\
			 { KBLK_OP_DISCARD, "DISCARD" })

TRACE_EVENT(kdat_blk_state,
	TP_PROTO(const char *ctrl, unsigned int from, unsigned int to),
	TP_ARGS(ctrl, from, to),
	TP_STRUCT__entry(
		__array(char, ctrl, KBLK_TRACE_NAME_LEN)
		__field(unsigned int, from)
		__field(unsigned int, to)
	),
	TP_fast_assign(
		strscpy(__entry->ctrl, ctrl, KBLK_TRACE_NAME_LEN);
		__entry->from = from;
		__entry->to = to;
	),
	TP_printk("ctrl=%s %s -> %s", __entry->ctrl, kblk_trace_state(__entry->from),
		  kblk_trace_state(__entry->to))
);

TRACE_EVENT(kdat_blk_refused,
	TP_PROTO(const char *ctrl, u16 qid, u32 reason),
	TP_ARGS(ctrl, qid, reason),
	TP_STRUCT__entry(
		__array(char, ctrl, KBLK_TRACE_NAME_LEN)
		__field(u16, qid)
		__field(u32, reason)
	),
	TP_fast_assign(
		strscpy(__entry->ctrl, ctrl, KBLK_TRACE_NAME_LEN);
		__entry->qid = qid;
		__entry->reason = reason;
	),
	TP_printk("ctrl=%s qid=%u reason=%s", __entry->ctrl, __entry->qid,
		  kblk_trace_reason(__entry->reason))
);

TRACE_EVENT(kdat_blk_io_error,
	TP_PROTO(const char *ctrl, u16 qid, u16 tag, u8 op, u64 sector, u32 bytes, int error),
	TP_ARGS(ctrl, qid, tag, op, sector, bytes, error),
	TP_STRUCT__entry(
		__array(char, ctrl, KBLK_TRACE_NAME_LEN)
		__field(u16, qid)
		__field(u16, tag)
		__field(u8, op)
		__field(u64, sector)
		__field(u32, bytes)
		__field(int, error)
	),
	TP_fast_assign(
		strscpy(__entry->ctrl, ctrl, KBLK_TRACE_NAME_LEN);
		__entry->qid = qid;
		__entry->tag = tag;
		__entry->op = op;
		__entry->sector = sector;
		__entry->bytes = bytes;
		__entry->error = error;
	),
	TP_printk("ctrl=%s qid=%u tag=%u op=%s sector=%llu bytes=%u error=%d", __entry->ctrl,
		  __entry->qid, __entry->tag, kblk_trace_op(__entry->op),
		  (unsigned long long)__entry->sector, __entry->bytes, __entry->error)
);

#endif /* _KDAT_BLK_TRACE_H */

#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE kdat_blk_trace
#include <trace/define_trace.h>
