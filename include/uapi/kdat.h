/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note OR BSD-2-Clause */
/*
 * kdat userspace ABI: ioctls of /dev/kdat.
 *
 * Every command takes one fixed-size struct whose first field is its size in
 * bytes, set by the caller.  The kernel fails the ioctl itself only when it
 * cannot take the request in:
 *   EFAULT  the struct cannot be read or written,
 *   EINVAL  size is not the size of this struct, or a reserved field is not 0,
 *   ENOTTY  unknown command.
 * Otherwise the ioctl returns 0 and the DAT result (a DAT_RETURN: class, type
 * and subtype as in dat_error.h, see kdat_dat.h) is in the struct's status
 * field, followed by any output fields.  So structs can only grow at the end,
 * with a new size, and every DAT error reaches userspace with its subtype.
 *
 * Handles are small per-open-file numbers, never kernel pointers; 0 is never a
 * valid handle ("DAT_HANDLE_NULL").  A handle of one file means nothing in
 * another file.  close() tears down everything the file owns: connected
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

#define KDAT_DEVICE_NAME	"kdat"
#define KDAT_ABI_VERSION	2
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
	__u32 reserved;
};

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

/* ---- Event dispatcher -------------------------------------------------------- */

/* evd_create flags: which event streams may feed it (DAT_EVD_*_FLAG) */
#define KDAT_EVD_DTO		(1u << 0)
#define KDAT_EVD_CONNECTION	(1u << 3)
#define KDAT_EVD_CR		(1u << 4)
#define KDAT_EVD_FLAGS_ALL	(KDAT_EVD_DTO | KDAT_EVD_CONNECTION | KDAT_EVD_CR)

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

struct kdat_evd_wait {
	__u32 size;
	__u32 status;		/* DAT_SUCCESS, TIMEOUT_EXPIRED, INTERRUPTED_CALL, ... */
	__u32 evd;
	__u32 timeout_us;	/* KDAT_TIMEOUT_INFINITE or microseconds */
	__u32 threshold;	/* wake when this many events are queued (>= 1) */
	__u32 nmore;		/* out: events still queued after the one returned */
	struct kdat_event event; /* out */
};

struct kdat_evd_dequeue {
	__u32 size;
	__u32 status;		/* DAT_QUEUE_EMPTY when there is nothing */
	__u32 evd;
	__u32 nmore;		/* out */
	struct kdat_event event; /* out */
};

/* ---- Endpoint ------------------------------------------------------------- */

struct kdat_ep_attr {
	__u32 max_rdma_read_in;		/* IRD: RDMA reads the peer may have outstanding to us */
	__u32 max_rdma_read_out;	/* ORD: RDMA reads we may have outstanding */
	__u32 max_recv_dtos;
	__u32 max_request_dtos;
	__u32 max_recv_iov;
	__u32 max_request_iov;
	__u8 retry_count;		/* rdma_conn_param.retry_count, 0..7 */
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
	__u32 connect_evd;	/* required: connection events */
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
	__u32 reserved;
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

#define KDAT_IOC_VERSION	_IOWR(KDAT_IOC_MAGIC, 0x00, struct kdat_version)
#define KDAT_IOC_IA_OPEN	_IOWR(KDAT_IOC_MAGIC, 0x01, struct kdat_ia_open)
#define KDAT_IOC_IA_CLOSE	_IOWR(KDAT_IOC_MAGIC, 0x02, struct kdat_ia_close)
#define KDAT_IOC_IA_QUERY	_IOWR(KDAT_IOC_MAGIC, 0x03, struct kdat_ia_query)
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

#endif /* _UAPI_KDAT_H */
