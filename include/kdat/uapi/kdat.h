/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note OR BSD-2-Clause */
/*
 * kdat userspace ABI: ioctls of /dev/kdat.
 *
 * Every command takes one struct whose first field is its size in bytes, set
 * by the caller; the size in the ioctl number (_IOC_SIZE) is the same.  A
 * struct grows only at its end: the kernel takes any size from the one the
 * command was added with (KDAT_COMMANDS below) up, reads a shorter (older)
 * struct as if its missing tail were zero, accepts a longer (newer) one only
 * if the bytes it does not know are zero, and writes back no more than the
 * caller's size.  The kernel fails the ioctl itself only when it cannot take
 * the request in:
 *   EFAULT  the struct cannot be read or written,
 *   EINVAL  size is below the command's first size or differs from the size
 *           in the ioctl number, or a reserved field is not 0,
 *   E2BIG   a longer struct than this kernel knows has a non-zero tail,
 *   ENOTTY  unknown command (magic, number or direction).
 * Otherwise the ioctl returns 0 and the DAT result (a DAT_RETURN: class, type
 * and subtype as in dat_error.h, see kdat_dat.h) is in the struct's status
 * field, followed by any output fields (defined only when status is
 * DAT_SUCCESS), and every DAT error reaches userspace with its subtype.  A
 * command is all or nothing: when it fails with an errno, or its result
 * cannot be written back, the file is as it was before the call.
 *
 * Handles are per-open-file numbers, never kernel pointers; 0 is never a
 * valid handle ("DAT_HANDLE_NULL").  A handle is (generation << 16) | slot:
 * the slot is the object's record in the file's shared object table (see
 * "Shared object table" below), the generation changes each time the slot is
 * reused, so a handle kept after its object was freed is recognised as stale.
 * Generations start at a random value per file, so a handle of one file is
 * (but for a 1 in 65535 chance) invalid in another.  close() tears down everything the file owns: connected
 * endpoints are disconnected (the peer sees DISCONNECTED).
 *
 * Timeouts are in microseconds (DAT_TIMEOUT); KDAT_TIMEOUT_INFINITE waits
 * forever.
 *
 * Layout rules for this header (the Python harness parses it): fields are
 * __u8/__u16/__u32/__u64/__s32/char, arrays and nested kdat structs only, with
 * explicit padding so that no struct has implicit holes.
 */
#ifndef _UAPI_KDAT_H
#define _UAPI_KDAT_H

#include <linux/ioctl.h>
#include <linux/types.h>
#include "kdat_counters.h"

#define KDAT_DEVICE_NAME	"kdat"
#define KDAT_ABI_VERSION	8	/* 8: records' device and port, DEV_COUNTERS, TABLE_WAIT */
#define KDAT_IOC_MAGIC		0xDA

#define KDAT_TIMEOUT_INFINITE	0xffffffffu
#define KDAT_NAME_MAX		64
/* Room for private data in every struct; the IA reports the real limits. */
#define KDAT_PRIVATE_DATA_MAX	256
/*
 * kdat's header in front of the consumer's private data on the wire (magic,
 * version, length, 0): the IB CM's private data fields have no length, so
 * this is what delivers exactly the bytes sent.  The limits ia_query reports
 * are the transport's fields minus this (and minus rdma_cm's own header in a
 * connect request).
 */
#define KDAT_PRIVATE_DATA_HEADER 4

/* Address families in struct kdat_addr (the Linux AF_ values). */
#define KDAT_AF_INET		2
#define KDAT_AF_INET6		10

/* An IPv4 or IPv6 address with a port, in network byte order in addr[]. */
struct kdat_addr {
	__u16 family;		/* KDAT_AF_INET or KDAT_AF_INET6; 0 = none */
	__u16 port;		/* host byte order */
	__u32 scope_id;		/* IPv6 scope, else 0 */
	__u8 addr[16];		/* IPv4 in the first 4 bytes */
};

struct kdat_version {
	__u32 size;		/* in: sizeof(struct kdat_version) */
	__u32 abi_version;	/* out: KDAT_ABI_VERSION */
	__u32 dat_major;	/* out: DAT API version served: 2.0 */
	__u32 dat_minor;
	__u32 num_devices;	/* out: RDMA devices kdat currently sees */
	__u32 reserved[3];	/* must be zero */
};

/* ---- Interface adapter ---------------------------------------------------- */

struct kdat_ia_open {
	__u32 size;
	__u32 status;		/* out: DAT_RETURN */
	char name[KDAT_NAME_MAX]; /* in: netdev name or IP literal, NUL-terminated */
	__u32 ia;		/* out: handle */
	__u32 flags;		/* in: KDAT_IA_* (was reserved, 0: the default) */
};

/*
 * ia_open flags.  KDAT_IA_PDATA_RAW: the IA's private data goes on the wire
 * as the consumer gives it, without kdat's header (KDAT_PRIVATE_DATA_HEADER),
 * and what arrives is delivered as the transport carried it: on the IB CM
 * (InfiniBand, RoCE) its whole fixed-size field, zero-padded, as any rdma_cm
 * consumer sees it.  That is the wire format of plain rdma_cm peers (NVMe-oF,
 * iSER, RPC-over-RDMA); the IA's limits (ia_query) are the whole fields, and
 * a raw listener refuses a request it cannot take with the IB CM's "no
 * resources" reject instead of a marked header.  Without it (the default),
 * kdat peers get exactly the bytes sent; a field from a plain peer that
 * happens to begin like kdat's header is then read as one.
 */
#define KDAT_IA_PDATA_RAW	(1u << 0)
#define KDAT_IA_OPEN_FLAGS	KDAT_IA_PDATA_RAW

/* ia_close flags */
#define KDAT_IA_CLOSE_ABRUPT	0	/* free everything the IA owns */
#define KDAT_IA_CLOSE_GRACEFUL	1	/* fail with INVALID_STATE if it owns anything */

struct kdat_ia_close {
	__u32 size;
	__u32 status;
	__u32 ia;
	__u32 flags;
};

struct kdat_ia_query {
	__u32 size;
	__u32 status;
	__u32 ia;
	__u32 reserved;
	char device_name[KDAT_NAME_MAX];	/* out: RDMA device, e.g. rxe0 */
	char netdev_name[KDAT_NAME_MAX];	/* out: its netdev */
	struct kdat_addr local_addr;		/* out */
	__u32 max_connect_private_data;		/* out: what the transport carries */
	__u32 max_accept_private_data;
	__u32 max_reject_private_data;
	__u32 max_rdma_read_in;			/* out: device max_qp_rd_atom (IRD) */
	__u32 max_rdma_read_out;		/* out: device max_qp_init_rd_atom (ORD) */
	__u32 max_eps;				/* out: per IA */
	__u32 max_evd_qlen;
	__u32 max_dtos;				/* out: per work queue */
	__u32 max_iov;
	__u32 supported_qos;			/* out: DAT_QOS_* bits honoured; 0 = best effort only */
};

/*
 * An IA's connection counters (the list and what each counts: kdat_counters.h).
 * table 0: an IA of this file.  Otherwise an IA of the table with that id
 * (KDAT_IOC_TABLE_LIST), under KDAT_IOC_TABLE_ATTACH's rule: the table
 * owner's effective uid, or CAP_SYS_ADMIN (kernel tables: only that), else
 * DAT_PRIVILEGES_VIOLATION; an unknown id: DAT_INVALID_PARAMETER.  An ia that
 * names no IA there: DAT_INVALID_HANDLE.  The values are read without
 * stopping the counting: each is exact, and they are one moment's only while
 * the IA is idle.  count says how many this kernel keeps; value[] past it
 * reads 0.
 */
struct kdat_ia_counters {
	__u32 size;
	__u32 status;
	__u64 table;				/* in: a table id, 0 = this file */
	__u32 ia;				/* in: the IA's handle in that table */
	__u32 count;				/* out: KDAT_IA_NR_COUNTERS */
	__u64 value[KDAT_IA_COUNTERS_ROOM];	/* out: in KDAT_IA_COUNTERS order */
};

/*
 * ABI 8: the same counters summed over every IA an RDMA device has had, or
 * over every IA the module has had, kept after the IAs close.  device 0: the
 * module's totals, since it was loaded; otherwise a device's number as
 * records carry it (struct kdat_record.device), whose totals last as long as
 * kdat knows the device.  next: the lowest device number above device, 0 when
 * there is none, so a caller lists them all from 0.  A number that names no
 * device: DAT_INVALID_PARAMETER.  Anyone who may open /dev/kdat may read
 * them, as anyone may read a port's counters in sysfs.
 */
#define KDAT_DEV_NAME_MAX	64	/* IB_DEVICE_NAME_MAX */

struct kdat_dev_counters {
	__u32 size;
	__u32 status;
	__u32 device;				/* in: 0 = the module's totals */
	__u32 next;				/* out: the next device's number, 0 = none */
	char name[KDAT_DEV_NAME_MAX];		/* out: its ib_device name; "" for the module */
	__u32 count;				/* out: KDAT_IA_NR_COUNTERS */
	__u32 reserved;				/* must be zero */
	__u64 value[KDAT_IA_COUNTERS_ROOM];	/* out: in KDAT_IA_COUNTERS order */
};

/* ---- Event dispatcher -------------------------------------------------------- */

/* evd_create flags: which event streams may feed it (DAT_EVD_*_FLAG) */
#define KDAT_EVD_DTO		(1u << 0)
#define KDAT_EVD_CONNECTION	(1u << 3)
#define KDAT_EVD_CR		(1u << 4)
#define KDAT_EVD_FLAGS_ALL	(KDAT_EVD_DTO | KDAT_EVD_CONNECTION | KDAT_EVD_CR)
/*
 * ... and, from userspace only, how it is consumed: through its event ring
 * (KDAT_IOC_EVD_RING) and nothing else (ABI 5).  Chosen at creation: a ring
 * has one consumer, so EVD_WAIT and EVD_DEQUEUE refuse a ring-mode EVD, and
 * EVD_RING refuses any other.
 */
#define KDAT_EVD_RING_MODE	(1u << 8)

struct kdat_evd_create {
	__u32 size;
	__u32 status;
	__u32 ia;
	__u32 qlen;		/* in: events it must hold, 1..max_evd_qlen */
	__u32 flags;		/* in: KDAT_EVD_* */
	__u32 evd;		/* out */
};

struct kdat_evd_free {
	__u32 size;
	__u32 status;
	__u32 evd;
	__u32 reserved;
};

/* One event, as dat_evd_wait/dequeue return it. */
/*
 * An event names its objects by handle; one freed after the event was queued
 * keeps the handle it had (stale by its generation): a connected EP's
 * KDAT_IOC_EP_FREE queues its DISCONNECTED, naming the EP just freed.
 */
struct kdat_event {
	__u32 number;		/* DAT_EVENT_NUMBER */
	__u32 evd;		/* the EVD it came from */
	__u32 ep;		/* connection and DTO events; the EP a CR names */
	__u32 sp;		/* CR events: the PSP or RSP */
	__u32 cr;		/* CR events: the connection request */
	__u32 dto_status;	/* DTO events: DAT_DTO_COMPLETION_STATUS */
	__u64 cookie;		/* DTO events: the request's cookie */
	__u32 transfered_length; /* DTO events */
	__u32 private_data_size; /* connection events: the peer's private data */
	__u8 private_data[KDAT_PRIVATE_DATA_MAX];
};

/* An address vector, as struct ibv_ah_attr takes it (grh valid if is_global). */
struct kdat_uqp_ah {
	__u8 dgid[16];
	__u32 flow_label;
	__u16 dlid;
	__u8 sgid_index;
	__u8 hop_limit;
	__u8 traffic_class;
	__u8 sl;
	__u8 src_path_bits;
	__u8 static_rate;
	__u8 is_global;
	__u8 port_num;
	__u8 pad[2];
};

/* kdat_event_ud flags */
#define KDAT_UD_EVENT		(1u << 0)	/* the event ends a UD exchange: the tail is valid */
#define KDAT_UD_PASSIVE		(1u << 1)	/* the peer asked and we accepted */
#define KDAT_UD_AH_VALID	(1u << 2)	/* ah is the peer's address vector */

/*
 * The UD tail of a connection event (ABI 7), after struct kdat_event in
 * EVD_WAIT, EVD_DEQUEUE and ring entries: all zero unless the event ends an
 * exchange of a UD EP (KDAT_UQP_UD), where it names the peer to send to.
 * kdat_event itself never grows: it is the first size of EVD_WAIT/DEQUEUE.
 */
struct kdat_event_ud {
	struct kdat_uqp_ah ah;	/* with KDAT_UD_AH_VALID: for ibv_create_ah() */
	struct kdat_addr addr;	/* the peer's IA address and connection qualifier */
	__u32 qpn;		/* the peer's UD QP; 0 if it did not say (a raw IA's peer) */
	__u32 qkey;		/* its Q_Key, for the send's remote_qkey */
	__u32 flags;		/* KDAT_UD_* */
	__u32 reserved;
};

struct kdat_evd_wait {
	__u32 size;
	__u32 status;		/* DAT_SUCCESS, TIMEOUT_EXPIRED, INTERRUPTED_CALL, ... */
	__u32 evd;
	__u32 timeout_us;	/* KDAT_TIMEOUT_INFINITE or microseconds */
	__u32 threshold;	/* wake when this many events are queued (>= 1) */
	__u32 nmore;		/* out: events still queued after the one returned */
	struct kdat_event event; /* out */
	struct kdat_event_ud ud; /* out (ABI 7) */
};

struct kdat_evd_dequeue {
	__u32 size;
	__u32 status;		/* DAT_QUEUE_EMPTY when there is nothing */
	__u32 evd;
	__u32 nmore;		/* out */
	struct kdat_event event; /* out */
	struct kdat_event_ud ud; /* out (ABI 7) */
};

/* ---- Endpoint ------------------------------------------------------------- */

struct kdat_ep_attr {
	__u32 max_rdma_read_in;		/* IRD: RDMA reads the peer may have outstanding to us */
	__u32 max_rdma_read_out;	/* ORD: RDMA reads we may have outstanding */
	__u32 max_recv_dtos;
	__u32 max_request_dtos;
	__u32 max_recv_iov;
	__u32 max_request_iov;
	__u8 retry_count;		/* rdma_conn_param.retry_count, 1..7 (0: 6; rxe: 7 = infinite) */
	__u8 rnr_retry_count;		/* 0..7 (7 = infinite) */
	__u8 flow_control;		/* 0 or 1 */
	__u8 reserved[5];
};

/* ep_modify mask bits: which attributes to change */
#define KDAT_EP_ATTR_RDMA_READ_IN	(1u << 0)
#define KDAT_EP_ATTR_RDMA_READ_OUT	(1u << 1)
#define KDAT_EP_ATTR_RETRY_COUNT	(1u << 2)
#define KDAT_EP_ATTR_RNR_RETRY_COUNT	(1u << 3)
#define KDAT_EP_ATTR_FLOW_CONTROL	(1u << 4)
#define KDAT_EP_ATTR_ALL		(KDAT_EP_ATTR_RDMA_READ_IN | KDAT_EP_ATTR_RDMA_READ_OUT | KDAT_EP_ATTR_RETRY_COUNT | KDAT_EP_ATTR_RNR_RETRY_COUNT | KDAT_EP_ATTR_FLOW_CONTROL)

struct kdat_ep_create {
	__u32 size;
	__u32 status;
	__u32 ia;
	__u32 connect_evd;	/* required: connection events; may be another IA's of this file */
	__u32 request_evd;	/* 0 = none: DTO request completions */
	__u32 recv_evd;		/* 0 = none: receive completions */
	struct kdat_ep_attr attr; /* in; zeros pick the provider's defaults */
	__u32 ep;		/* out */
	__u32 reserved;
};

struct kdat_ep_free {
	__u32 size;
	__u32 status;
	__u32 ep;
	__u32 reserved;
};

struct kdat_ep_query {
	__u32 size;
	__u32 status;
	__u32 ep;
	__u32 state;		/* out: DAT_EP_STATE */
	struct kdat_ep_attr attr; /* out: attributes; IRD/ORD negotiated once connected */
	struct kdat_addr local_addr;	/* out: with the local port qualifier */
	struct kdat_addr remote_addr;	/* out: with the remote connection qualifier */
	__u32 connect_evd;
	__u32 request_evd;
	__u32 recv_evd;
	__u32 transitions;	/* out: state changes so far */
};

struct kdat_ep_modify {
	__u32 size;
	__u32 status;
	__u32 ep;
	__u32 mask;		/* KDAT_EP_ATTR_* */
	struct kdat_ep_attr attr;
};

struct kdat_ep_reset {
	__u32 size;
	__u32 status;
	__u32 ep;
	/*
	 * in: a user-QP EP's QP from now on (as uqp_create's qp_num); 0 keeps
	 * its QP.  iWARP needs it: siw cannot move a QP out of ERR, so a QP
	 * that was connected serves no second connection.
	 */
	__u32 qp_num;
};

/* connect flags (DAT_CONNECT_FLAGS) */
#define KDAT_CONNECT_DEFAULT		0u
#define KDAT_CONNECT_MULTIPATH_REQUESTED 1u

struct kdat_ep_connect {
	__u32 size;
	__u32 status;
	__u32 ep;
	__u32 timeout_us;	/* > 0, or KDAT_TIMEOUT_INFINITE */
	struct kdat_addr remote_addr; /* port ignored: conn_qual names the service */
	__u64 conn_qual;	/* connection qualifier: the remote port, 1..65535 */
	__u32 qos;		/* DAT_QOS bits */
	__u32 flags;		/* KDAT_CONNECT_* */
	__s32 private_data_size; /* 0..max_connect_private_data */
	__u32 reserved;
	__u8 private_data[KDAT_PRIVATE_DATA_MAX];
};

struct kdat_ep_dup_connect {
	__u32 size;
	__u32 status;
	__u32 ep;
	__u32 dup_ep;		/* a CONNECTED EP whose remote end to connect to */
	__u32 timeout_us;
	__u32 qos;
	__s32 private_data_size;
	__u32 reserved;
	__u8 private_data[KDAT_PRIVATE_DATA_MAX];
};

/* disconnect flags (DAT_CLOSE_FLAGS) */
#define KDAT_CLOSE_ABRUPT	0u
#define KDAT_CLOSE_GRACEFUL	1u
/*
 * A user-QP EP's graceful disconnect (dat_ep_disconnect(3DAT): its requests
 * in flight "must try to be completed successfully first, before disconnect
 * proceeds").  The kernel cannot see the process's send queue, so
 * GRACEFUL | HOLD_DREQ makes the EP DISCONNECT_PENDING and holds the DREQ
 * until the process reports those requests done with REQUESTS_DONE alone
 * (which does nothing once the EP has left DISCONNECT_PENDING or holds no
 * DREQ).  Either is DAT_INVALID_PARAMETER on an EP whose QP is the kernel's:
 * the kernel waits for those itself.
 */
#define KDAT_CLOSE_HOLD_DREQ	0x100u
#define KDAT_CLOSE_REQUESTS_DONE	0x200u

struct kdat_ep_disconnect {
	__u32 size;
	__u32 status;
	__u32 ep;
	__u32 flags;		/* KDAT_CLOSE_* */
};

/* ---- Service points and connection requests ------------------------------- */

/* psp_create flags (DAT_PSP_FLAGS) */
#define KDAT_PSP_CONSUMER	0u	/* the consumer brings the EP to accept on */
/*
 * kdat creates an EP per request, in TENTATIVE_CONNECTION_PENDING, with
 * default attributes and the PSP's EVD as its connect EVD; the CR event and
 * cr_query name it.  A reject frees it.
 */
#define KDAT_PSP_PROVIDER	1u

/*
 * A PSP holds at most listen_backlog (module parameter, default 128) requests
 * not yet accepted or rejected; kdat refuses more, and the requester gets
 * NON_PEER_REJECTED.
 */
struct kdat_psp_create {
	__u32 size;
	__u32 status;
	__u32 ia;
	__u32 evd;		/* CR events go here (an EVD created with KDAT_EVD_CR) */
	__u64 conn_qual;	/* the port to listen on, 1..65535 */
	__u32 flags;		/* KDAT_PSP_* */
	__u32 psp;		/* out */
};

struct kdat_psp_free {
	__u32 size;
	__u32 status;
	__u32 psp;
	__u32 reserved;
};

struct kdat_psp_query {
	__u32 size;
	__u32 status;
	__u32 psp;
	__u32 ia;		/* out */
	__u64 conn_qual;	/* out */
	__u32 evd;		/* out */
	__u32 flags;		/* out */
};

struct kdat_rsp_create {
	__u32 size;
	__u32 status;
	__u32 ia;
	__u32 ep;		/* an UNCONNECTED EP; it becomes RESERVED */
	__u64 conn_qual;
	__u32 evd;
	__u32 rsp;		/* out */
};

struct kdat_rsp_free {
	__u32 size;
	__u32 status;
	__u32 rsp;
	__u32 reserved;
};

struct kdat_cr_query {
	__u32 size;
	__u32 status;
	__u32 cr;
	__u32 sp;		/* out: the PSP or RSP it arrived on */
	__u32 ep;		/* out: the EP the CR names (RSP, provider PSP), else 0 */
	__u32 remote_rdma_read_in;  /* out: the requester's own max_rdma_read_in (IRD) */
	__u32 remote_rdma_read_out; /* out: the requester's own max_rdma_read_out (ORD) */
	__u32 private_data_size;    /* out */
	struct kdat_addr remote_addr; /* out: the remote IA address and port qualifier */
	struct kdat_addr local_addr;  /* out: with the connection qualifier */
	__u8 private_data[KDAT_PRIVATE_DATA_MAX];
	/* out: the requester's transport settings, as its rdma_conn_param carried them */
	__u8 remote_retry_count;
	__u8 remote_rnr_retry_count;
	__u8 remote_flow_control;
	__u8 reserved[5];
};

struct kdat_cr_accept {
	__u32 size;
	__u32 status;
	__u32 cr;
	__u32 ep;		/* 0: the EP the CR names */
	__s32 private_data_size;
	__u32 reserved;
	__u8 private_data[KDAT_PRIVATE_DATA_MAX];
};

struct kdat_cr_reject {
	__u32 size;
	__u32 status;
	__u32 cr;
	__s32 private_data_size;
	__u8 private_data[KDAT_PRIVATE_DATA_MAX];
};

/* ---- Shared object table (mmap of /dev/kdat) ------------------------------ */

/*
 * Every open file has an object table: a header page followed by one
 * fixed-size record per slot.  Every object of the file (IA, EVD, EP, PSP,
 * RSP, CR) owns the slot its handle names (handle & 0xffff).  mmap() of the
 * file at offset KDAT_MMAP_TABLE maps it read-only; KDAT_MMAP_VIEW maps the
 * table another file's KDAT_IOC_TABLE_ATTACH selected (kdatctl's view of
 * other processes and of kernel consumers).
 *
 * mmap rules: PROT_READ only (PROT_WRITE, or a later mprotect to it: EACCES);
 * the offset must be KDAT_MMAP_TABLE or KDAT_MMAP_VIEW and the length at most
 * KDAT_TABLE_MAP_SIZE (else EINVAL); KDAT_MMAP_VIEW before an attach: ENXIO.
 * A mapping outlives close() of its file: the header then has
 * KDAT_TABLE_CLOSED set and the records stay as they were last written.
 * Record pages exist up to header.high_water; touching a page past it that
 * the kernel has not populated yet raises SIGBUS.
 *
 * Memory ordering (the kernel is the only writer; one writer per table):
 *   writer:  seq++ (odd); smp_wmb(); write the fields; smp_wmb(); seq++ (even)
 *   reader:  do {
 *              s = load_acquire(&rec->seq);      retry while s is odd
 *              copy the record;
 *              fence(acquire);  (smp_rmb)
 *            } while (load_relaxed(&rec->seq) != s);
 * A copy made that way is one the kernel wrote as a whole.  It is the
 * record of the handle you hold only if copy.handle equals that handle; a
 * different handle (or 0) means your object was freed and the slot reused.
 * header.high_water is published with a release store after the slot's page
 * exists: load it with acquire.
 */
#define KDAT_MMAP_TABLE		0x0ULL
#define KDAT_MMAP_VIEW		0x10000000ULL

#define KDAT_TABLE_MAGIC	0x6b646174u	/* "kdat" */
#define KDAT_TABLE_LAYOUT	1
#define KDAT_TABLE_HEADER_SIZE	4096		/* records start here */
#define KDAT_TABLE_RECORD_SIZE	128
#define KDAT_TABLE_MAX_SLOTS	65536		/* slot 0 is never used */
#define KDAT_TABLE_MAP_SIZE	(KDAT_TABLE_HEADER_SIZE + KDAT_TABLE_MAX_SLOTS * KDAT_TABLE_RECORD_SIZE)
#define KDAT_HANDLE_SLOT(h)	((h) & 0xffffu)
#define KDAT_HANDLE_GENERATION(h) ((h) >> 16)

/* header.flags */
#define KDAT_TABLE_KERNEL	(1u << 0)	/* the table of a kernel consumer's IA */
#define KDAT_TABLE_CLOSED	(1u << 1)	/* the owning file or IA is gone */
/*
 * The file attached a view (KDAT_IOC_TABLE_ATTACH): an observer such as
 * kdatctl.  KDAT_IOC_TABLE_LIST leaves a viewer's table out while it holds no
 * objects, so observers never list (and attach to) each other's empty tables.
 */
#define KDAT_TABLE_VIEWER	(1u << 2)

struct kdat_table_header {
	__u32 magic;		/* KDAT_TABLE_MAGIC */
	__u32 layout;		/* KDAT_TABLE_LAYOUT */
	__u32 header_size;	/* KDAT_TABLE_HEADER_SIZE */
	__u32 record_size;	/* KDAT_TABLE_RECORD_SIZE */
	__u32 max_slots;	/* KDAT_TABLE_MAX_SLOTS */
	__u32 high_water;	/* slots 1..high_water have been used: read these */
	__u32 live;		/* objects alive now */
	__u32 flags;		/* KDAT_TABLE_* */
	__u64 id;		/* this table's id (KDAT_IOC_TABLE_LIST) */
	__u64 created_ns;	/* CLOCK_BOOTTIME when the file was opened */
	__u32 pid;		/* the opener (tgid) in its own PID namespace; 0 = kernel */
	__u32 uid;		/* its effective uid, in its own user namespace */
	char comm[16];		/* its name, or the kernel consumer's module */
	__u64 updates;		/* record writes so far */
};

/* record.type */
#define KDAT_REC_FREE		0
#define KDAT_REC_IA		1
#define KDAT_REC_EVD		2
#define KDAT_REC_EP		3
#define KDAT_REC_PSP		4
#define KDAT_REC_RSP		5
#define KDAT_REC_CR		6

/* record.state of service points and connection requests (EPs: DAT_EP_STATE) */
#define KDAT_SP_LISTENING	1	/* PSP listening; RSP waiting for its request */
#define KDAT_SP_USED		2	/* RSP: its one request arrived */
#define KDAT_CR_PENDING		1	/* waiting for accept or reject */
#define KDAT_CR_REMOTE_GONE	2	/* the requester gave up */
#define KDAT_IA_UP		1
#define KDAT_IA_DEVICE_REMOVED	2

/*
 * One object.  Fields by type ("-" = 0):
 *           state            owner  link          addresses            conn_qual
 *   IA      KDAT_IA_*        -      -             local                 -
 *   EVD     KDAT_EVD_* flags IA     -             -                     -
 *   EP      DAT_EP_STATE     IA     connect EVD   local/remote          remote qualifier
 *   PSP/RSP KDAT_SP_*        IA     EVD (RSP: EP) local                 listened on
 *   CR      KDAT_CR_*        IA     SP (EP named) local/remote          -
 * last_event and events count the connection/CR events posted about the
 * object; ird/ord are an EP's negotiated values once connected (requested
 * before).  Times are CLOCK_BOOTTIME nanoseconds.
 */
#define KDAT_RECF_ACTIVE	(1u << 0)	/* EP: connected (or connecting) actively */
#define KDAT_RECF_PROVIDER	(1u << 1)	/* EP made by a provider PSP; PSP with that flag */
#define KDAT_RECF_RING		(1u << 2)	/* EVD with an event ring */
#define KDAT_RECF_USER_QP	(1u << 3)	/* EP whose QP is a userspace QP (KDAT_IOC_UQP_CREATE) */
struct kdat_record {
	__u32 seq;		/* odd while the kernel writes the record */
	__u32 handle;		/* the live object's handle; 0 = slot free */
	__u16 type;		/* KDAT_REC_* */
	__u16 generation;	/* handle >> 16, kept while the slot is free */
	__u32 state;
	__u32 owner;		/* the IA's handle */
	__u32 link;
	__u32 link2;		/* EP: request EVD; CR: the EP it names */
	__u32 last_event;	/* DAT_EVENT_NUMBER, 0 = none yet */
	__u32 events;
	__u32 transitions;	/* EP state changes */
	__u16 ird;
	__u16 ord;
	__u32 flags;		/* KDAT_RECF_* */
	__u64 created_ns;
	__u64 changed_ns;	/* last state change */
	__u64 conn_qual;
	struct kdat_addr local_addr;
	struct kdat_addr remote_addr;
	__u32 qp_num;		/* EP: its QP's number (rdma res show qp/cm_id lqpn); 0 = none */
	__u16 device;		/* ABI 8: its IA's RDMA device (KDAT_IOC_DEV_COUNTERS); 0 = none */
	__u8 port_num;		/* ABI 8: its IA's port on that device; 0 = none */
	__u8 reserved;
};

/*
 * KDAT_IOC_TABLE_LIST: the tables the caller may attach to: those whose opener
 * the caller's PID namespace can see (kernel consumers' only from the initial
 * one) and that are the caller's euid's, or all of those with CAP_SYS_ADMIN.
 */
struct kdat_table_info {
	__u64 id;
	__u32 pid;		/* the opener as the caller's PID namespace numbers it */
	__u32 uid;		/* its euid in the caller's user namespace (overflowuid if unmapped) */
	__u32 flags;		/* KDAT_TABLE_* */
	__u32 live;
	char comm[16];
};

struct kdat_table_list {
	__u32 size;
	__u32 status;
	__u32 capacity;		/* in: entries room at tables */
	__u32 count;		/* out: tables there are (may exceed capacity) */
	__u64 tables;		/* in: user pointer to capacity struct kdat_table_info */
};

/*
 * Make this file's KDAT_MMAP_VIEW the table with this id.  Allowed for the
 * owner's effective uid, or with CAP_SYS_ADMIN (kernel tables: only that);
 * else DAT_PRIVILEGES_VIOLATION.  An unknown id: DAT_INVALID_PARAMETER.
 */
struct kdat_table_attach {
	__u32 size;
	__u32 status;
	__u64 id;
};

/*
 * ABI 8: sleep until the shared tables change.  The module counts every
 * record write of every table and every table's creation and close; the call
 * returns, with the count in changes, as soon as it differs from the changes
 * given (at once for 0), else DAT_TIMEOUT_EXPIRED after timeout_us
 * (KDAT_TIMEOUT_INFINITE: never; 0: at once), or DAT_INTERRUPTED_CALL on a
 * signal.  The count is module-wide: a wake may be for a table the caller
 * cannot see, so a watcher re-reads what it watches and waits again.
 */
struct kdat_table_wait {
	__u32 size;
	__u32 status;
	__u32 timeout_us;	/* in */
	__u32 reserved;		/* must be zero */
	__u64 changes;		/* in: the count last seen, 0 = none; out: the count now */
};

/* ---- Event rings (an EVD's own file) -------------------------------------- */

/*
 * KDAT_IOC_EVD_RING maps the ring of an EVD created with KDAT_EVD_RING_MODE:
 * it returns a new file (O_CLOEXEC) for it: mmap() it at offset 0 with
 * map_size bytes, PROT_READ | PROT_WRITE, MAP_SHARED; poll()/epoll on it
 * report EPOLLIN while events wait (in the ring or queued behind it) and
 * EPOLLHUP | EPOLLERR once the EVD is freed.  An EVD gets one ring, once;
 * events posted before it came wait in order and move into it.  The
 * fields' places in the mapping are in off (struct kdat_ring_offsets):
 * read them there, not from struct kdat_ring_header's layout.
 *
 * The kernel produces, the consumer consumes, one consumer at a time:
 *   kernel:   entry[tail & mask] = ev; store_release(&hdr->tail, tail + 1)
 *   consumer: t = load_acquire(&hdr->tail); h = hdr->head;
 *             while (h != t) { use entry[h & mask]; h++; }
 *             store_release(&hdr->head, h)
 * An entry is a struct kdat_ring_entry (entry_size bytes apart; ABI 6 and
 * before: a struct kdat_event, which the entry begins with).  Events never
 * get lost: when the ring is full the kernel keeps the rest queued in order
 * and sets backlog; KDAT_IOC_EVD_RING_WAIT (or a later event) moves them into
 * the ring as the consumer frees room.  So a consumer that finds the ring
 * empty but backlog > 0 calls RING_WAIT.  overflow counts events the kernel
 * could not queue at all (no memory); the next RING_WAIT reports
 * DAT_QUEUE_FULL once for them.  The kernel reads only head from this
 * memory and checks it; everything else in it is the kernel's to write.
 *
 * The ring has one consumer, the process that mapped it: KDAT_IOC_EVD_WAIT
 * and KDAT_IOC_EVD_DEQUEUE on a ring-mode EVD return DAT_INVALID_STATE
 * (DAT_INVALID_STATE_EVD_IN_USE), and the kernel never writes head.
 */
#define KDAT_RING_ENTRIES_OFFSET 4096
#define KDAT_RING_MAX_ENTRIES	 4096
#define KDAT_RING_MAP_SIZE(entries) \
	(KDAT_RING_ENTRIES_OFFSET + (entries) * sizeof(struct kdat_ring_entry))

/* One ring entry: the event and its UD tail, as EVD_WAIT returns them. */
struct kdat_ring_entry {
	struct kdat_event event;
	struct kdat_event_ud ud;
};

/* ring header flags */
#define KDAT_RING_DEAD		(1u << 0)	/* the EVD was freed */

struct kdat_ring_header {
	__u32 head;		/* consumer: next entry to take */
	__u32 pad0[15];		/* head has its own cache line */
	__u32 tail;		/* kernel: next entry to fill */
	__u32 entries;		/* a power of two */
	__u32 mask;		/* entries - 1 */
	__u32 entry_size;	/* sizeof(struct kdat_ring_entry) */
	__u32 backlog;		/* events queued in the kernel behind the ring */
	__u32 overflow;		/* events that could not be queued */
	__u32 flags;		/* KDAT_RING_* */
	__u32 evd;		/* the EVD's handle */
};

/*
 * Where each field of a ring's mapping is, in bytes from its start (the way
 * io_uring publishes its rings' offsets): a later kernel may move them.
 */
struct kdat_ring_offsets {
	__u32 head;		/* __u32: the consumer's */
	__u32 tail;		/* __u32 each, the kernel's: */
	__u32 entries;
	__u32 mask;
	__u32 entry_size;
	__u32 backlog;
	__u32 overflow;
	__u32 flags;
	__u32 array;		/* the first entry; entry i at array + (i & mask) * entry_size */
	__u32 reserved;
};

struct kdat_evd_ring {
	__u32 size;
	__u32 status;
	__u32 evd;
	__s32 fd;		/* out: the ring's file */
	__u32 entries;		/* out: roundup_pow_of_two(qlen), at most KDAT_RING_MAX_ENTRIES */
	__u32 map_size;		/* out: KDAT_RING_MAP_SIZE(entries) */
	struct kdat_ring_offsets off;	/* out (ABI 5) */
};

/*
 * Wait until the ring holds threshold events (1..entries), or the timeout
 * (µs, KDAT_TIMEOUT_INFINITE) passes: DAT_SUCCESS, TIMEOUT_EXPIRED,
 * INTERRUPTED_CALL, ABORT (EVD freed), QUEUE_FULL (overflow, once).  Moves
 * the backlog into the ring first; takes nothing.  timeout 0 = just refill.
 */
struct kdat_evd_ring_wait {
	__u32 size;
	__u32 status;
	__u32 evd;
	__u32 timeout_us;
	__u32 threshold;
	__u32 available;	/* out: events now in the ring */
};

/* ---- Userspace QPs: kernel bypass (ABI 4) ---------------------------------- */

/*
 * A user-QP EP connects a queue pair the process created itself through
 * libibverbs (an RC QP on the IA's RDMA device, its own CQs) instead of a
 * QP inside kdat.  kdat runs connection management for it in the kernel:
 * rdma_cm with the QP's number in rdma_conn_param, the way the kernel serves
 * librdmacm for user QPs.  The EP state machine is the same one (ep_table.h)
 * and every connection event still arrives on the connect EVD; data transfer
 * never enters kdat (post and poll with libibverbs).
 *
 * The QP's state is the process's to change (ibv_modify_qp): kdat hands out
 * the attributes of each transition with KDAT_IOC_UQP_ATTR, computed from the
 * connection exactly as rdma_init_qp_attr() computes them for librdmacm:
 *   INIT  at creation and after ep_reset (the IA's port, P_Key index 0,
 *         local write + remote read/write access), so receives can be posted
 *         before any connection exists;
 *   RTR, RTS
 *         passive side: before KDAT_IOC_CR_ACCEPT, asked with the CR (cr
 *         field) -- path, MTU, the requester's QP number and PSNs, and the
 *         IRD/ORD the accept will negotiate;
 *         active side: after the peer's REP arrived (see below);
 *   ERR   whenever the EP leaves the connection (any DISCONNECTED or failed
 *         outcome, abrupt disconnect): the QP flushes what is posted.
 *
 * The active side.  The REP arrives in the kernel; kdat posts
 * KDAT_EVENT_UQP_CONNECT_RESPONSE on the EP's connect EVD (a kdat-internal
 * event, not a DAT event: no state change, the EP stays
 * ACTIVE_CONNECTION_PENDING).  Its consumer -- libkdat does this inside
 * Evd::wait/dequeue, so applications never see it -- applies RTR and RTS and
 * issues KDAT_IOC_UQP_ESTABLISH, which sends the RTU and steps the EP to
 * CONNECTED: only then is CONNECTION_EVENT_ESTABLISHED posted (with the REP's
 * private data).  If the RTR/RTS could not be applied, ESTABLISH with
 * KDAT_UQP_ESTABLISH_FAILED rejects the REP: the EP ends DISCONNECTED with
 * NON_PEER_REJECTED.  The connect timeout keeps running until ESTABLISH: a
 * consumer that never answers gets TIMED_OUT (and the peer a REJ).
 *
 * What the kernel cannot check.  A user QP lives in the process's uverbs
 * file, which kdat cannot see: it cannot verify that qp_num names a QP of
 * the caller, its type or its state.  It checks what it can: the number is a
 * valid 24-bit QPN other than the special QPs 0 and 1, and no other live EP
 * of the caller on the same device uses it.  A wrong number is still safe:
 * kdat never modifies a QP by that number (the process does, through its own
 * uverbs handle, which the kernel checks), and the number only travels to
 * the peer in the REQ/REP -- exactly as librdmacm's qp_num does through
 * /dev/infiniband/rdma_cm, which the kernel does not check either.  A peer
 * pointed at someone else's QP sends packets that QP drops (wrong PSNs and
 * state, no rkey), as it would drop any packet a host on the fabric forges.
 *
 * User QPs need an IB CM transport (InfiniBand, RoCE): on iWARP the create
 * fails with DAT_MODEL_NOT_SUPPORTED.
 *
 * UD (ABI 7).  With KDAT_UQP_UD the QP is a UD QP and the EP exchanges
 * addresses instead of connecting (DAT's IB extension, DAT_IB_SERVICE_TYPE_UD):
 *   - INIT (Q_Key, port, P_Key index), RTR and RTS are all applied at
 *     creation and after ep_reset; the CM never moves the QP.
 *   - EP_CONNECT sends a SIDR request (rdma_cm's RDMA_PS_UDP) to the PSP's
 *     qualifier: each call is an exchange of its own, several may run at once,
 *     and it is allowed in UNCONNECTED and CONNECTED.  The outcome, once per
 *     call, is a connection event with the UD tail: ESTABLISHED (the peer's AH,
 *     QPN, Q_Key and the accept's private data), PEER_REJECTED, UNREACHABLE or
 *     TIMED_OUT.  The first ESTABLISHED makes the EP CONNECTED.
 *   - A PSP of a file also listens for SIDR requests; their CRs are accepted
 *     on UD EPs only (and RC CRs on RC EPs only: DAT_INVALID_PARAMETER, arg 2).
 *     The accept answers at once and posts ESTABLISHED with KDAT_UD_PASSIVE
 *     (the requester's AH, its QPN, the request's private data) on the EP.
 *     RSPs and provider-flag PSPs refuse SIDR requests.
 *   - The requester's QPN travels in kdat's private-data header (SIDR
 *     requests carry none): a raw IA's (KDAT_IA_PDATA_RAW) peer reports 0.
 *   - The passive side's AH is built from the GID table on RoCE; on
 *     InfiniBand (which needs a path query) KDAT_UD_AH_VALID stays clear.
 *   - A UD EP has no connection to end: a graceful disconnect is abrupt.
 */

/* uqp_create flags */
#define KDAT_UQP_UD		(1u << 0)	/* qp_num is a UD QP */

/* QP states (the values of enum ibv_qp_state and of the kernel's ib_qp_state) */
#define KDAT_QPS_RESET		0
#define KDAT_QPS_INIT		1
#define KDAT_QPS_RTR		2
#define KDAT_QPS_RTS		3
#define KDAT_QPS_ERR		6

/* The kdat-internal event of the active side (see above); never a DAT event number. */
#define KDAT_EVENT_UQP_CONNECT_RESPONSE	0x6b640001u

struct kdat_uqp_create {
	__u32 size;
	__u32 status;
	__u32 ia;
	__u32 connect_evd;	/* required: connection events */
	struct kdat_ep_attr attr; /* IRD/ORD, retry/RNR counts, flow control as for ep_create */
	__u32 qp_num;		/* in: the RC (or UD) QP (ibv_qp.qp_num) on the IA's device */
	__u32 ep;		/* out */
	__u32 flags;		/* in: KDAT_UQP_UD (ABI 7) */
	__u32 reserved;		/* must be zero */
};

/*
 * The attributes of one transition of the EP's user QP.  out: attr_mask has
 * the bits of enum ibv_qp_attr_mask (identical to the kernel's IB_QP_*, the
 * uverbs ABI) of the fields to pass to ibv_modify_qp; the others are 0.
 */
struct kdat_uqp_attr {
	__u32 size;
	__u32 status;
	__u32 ep;
	__u32 cr;		/* in: the CR to accept (passive RTR/RTS), else 0 */
	__u32 qp_state;		/* in: KDAT_QPS_INIT, _RTR, _RTS or _ERR */
	__u32 attr_mask;	/* out: IBV_QP_* */
	__u32 qp_access_flags;	/* out: IBV_ACCESS_* */
	__u32 path_mtu;		/* out: enum ibv_mtu */
	__u32 rq_psn;
	__u32 sq_psn;
	__u32 dest_qp_num;
	__u16 pkey_index;
	__u8 port_num;
	__u8 max_rd_atomic;	/* ORD */
	__u8 max_dest_rd_atomic; /* IRD */
	__u8 min_rnr_timer;
	__u8 timeout;
	__u8 retry_cnt;
	__u8 rnr_retry;
	__u8 reserved[3];	/* must be zero */
	struct kdat_uqp_ah ah_attr;
	__u32 qkey;		/* out (ABI 7): a UD QP's Q_Key (IBV_QP_QKEY) */
	__u32 reserved2;	/* must be zero */
};

/* uqp_establish flags */
#define KDAT_UQP_ESTABLISH_FAILED 1u	/* RTR/RTS could not be applied: reject the REP */

/*
 * Active side, after KDAT_EVENT_UQP_CONNECT_RESPONSE: the QP is in RTS, send
 * the RTU (or, with KDAT_UQP_ESTABLISH_FAILED, a REJ).  DAT_INVALID_STATE if
 * the EP is not waiting for it (it timed out or was disconnected meanwhile:
 * that outcome's event is on the connect EVD).
 */
struct kdat_uqp_establish {
	__u32 size;
	__u32 status;
	__u32 ep;
	__u32 flags;
};

#define KDAT_IOC_VERSION	_IOWR(KDAT_IOC_MAGIC, 0x00, struct kdat_version)
#define KDAT_IOC_IA_OPEN	_IOWR(KDAT_IOC_MAGIC, 0x01, struct kdat_ia_open)
#define KDAT_IOC_IA_CLOSE	_IOWR(KDAT_IOC_MAGIC, 0x02, struct kdat_ia_close)
#define KDAT_IOC_IA_QUERY	_IOWR(KDAT_IOC_MAGIC, 0x03, struct kdat_ia_query)
#define KDAT_IOC_IA_COUNTERS	_IOWR(KDAT_IOC_MAGIC, 0x04, struct kdat_ia_counters)
#define KDAT_IOC_EVD_CREATE	_IOWR(KDAT_IOC_MAGIC, 0x10, struct kdat_evd_create)
#define KDAT_IOC_EVD_FREE	_IOWR(KDAT_IOC_MAGIC, 0x11, struct kdat_evd_free)
#define KDAT_IOC_EVD_WAIT	_IOWR(KDAT_IOC_MAGIC, 0x12, struct kdat_evd_wait)
#define KDAT_IOC_EVD_DEQUEUE	_IOWR(KDAT_IOC_MAGIC, 0x13, struct kdat_evd_dequeue)
#define KDAT_IOC_EP_CREATE	_IOWR(KDAT_IOC_MAGIC, 0x20, struct kdat_ep_create)
#define KDAT_IOC_EP_FREE	_IOWR(KDAT_IOC_MAGIC, 0x21, struct kdat_ep_free)
#define KDAT_IOC_EP_QUERY	_IOWR(KDAT_IOC_MAGIC, 0x22, struct kdat_ep_query)
#define KDAT_IOC_EP_MODIFY	_IOWR(KDAT_IOC_MAGIC, 0x23, struct kdat_ep_modify)
#define KDAT_IOC_EP_RESET	_IOWR(KDAT_IOC_MAGIC, 0x24, struct kdat_ep_reset)
#define KDAT_IOC_EP_CONNECT	_IOWR(KDAT_IOC_MAGIC, 0x25, struct kdat_ep_connect)
#define KDAT_IOC_EP_DUP_CONNECT	_IOWR(KDAT_IOC_MAGIC, 0x26, struct kdat_ep_dup_connect)
#define KDAT_IOC_EP_DISCONNECT	_IOWR(KDAT_IOC_MAGIC, 0x27, struct kdat_ep_disconnect)
#define KDAT_IOC_PSP_CREATE	_IOWR(KDAT_IOC_MAGIC, 0x30, struct kdat_psp_create)
#define KDAT_IOC_PSP_FREE	_IOWR(KDAT_IOC_MAGIC, 0x31, struct kdat_psp_free)
#define KDAT_IOC_PSP_QUERY	_IOWR(KDAT_IOC_MAGIC, 0x32, struct kdat_psp_query)
#define KDAT_IOC_RSP_CREATE	_IOWR(KDAT_IOC_MAGIC, 0x33, struct kdat_rsp_create)
#define KDAT_IOC_RSP_FREE	_IOWR(KDAT_IOC_MAGIC, 0x34, struct kdat_rsp_free)
#define KDAT_IOC_CR_QUERY	_IOWR(KDAT_IOC_MAGIC, 0x40, struct kdat_cr_query)
#define KDAT_IOC_CR_ACCEPT	_IOWR(KDAT_IOC_MAGIC, 0x41, struct kdat_cr_accept)
#define KDAT_IOC_CR_REJECT	_IOWR(KDAT_IOC_MAGIC, 0x42, struct kdat_cr_reject)
#define KDAT_IOC_TABLE_LIST	_IOWR(KDAT_IOC_MAGIC, 0x50, struct kdat_table_list)
#define KDAT_IOC_TABLE_ATTACH	_IOWR(KDAT_IOC_MAGIC, 0x51, struct kdat_table_attach)
#define KDAT_IOC_TABLE_WAIT	_IOWR(KDAT_IOC_MAGIC, 0x52, struct kdat_table_wait)
#define KDAT_IOC_DEV_COUNTERS	_IOWR(KDAT_IOC_MAGIC, 0x05, struct kdat_dev_counters)
#define KDAT_IOC_EVD_RING	_IOWR(KDAT_IOC_MAGIC, 0x14, struct kdat_evd_ring)
#define KDAT_IOC_EVD_RING_WAIT	_IOWR(KDAT_IOC_MAGIC, 0x15, struct kdat_evd_ring_wait)
#define KDAT_IOC_UQP_CREATE	_IOWR(KDAT_IOC_MAGIC, 0x60, struct kdat_uqp_create)
#define KDAT_IOC_UQP_ATTR	_IOWR(KDAT_IOC_MAGIC, 0x61, struct kdat_uqp_attr)
#define KDAT_IOC_UQP_ESTABLISH	_IOWR(KDAT_IOC_MAGIC, 0x62, struct kdat_uqp_establish)

#include "kdat_commands.h"

#endif /* _UAPI_KDAT_H */
