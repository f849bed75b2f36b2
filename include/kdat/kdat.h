/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kdat in-kernel API (kDAPL style) for storage and filesystem drivers.
 * Every function, type and rule is documented in kernel-doc below;
 * scripts/check-kernel-doc checks it and `make docs` renders it.
 */
#ifndef KDAT_KDAT_H
#define KDAT_KDAT_H

#include <linux/types.h>
#include <linux/dma-direction.h>
#include <linux/scatterlist.h>
#include <linux/socket.h>
#include <net/net_namespace.h>
#include <rdma/ib_verbs.h>
#include <kdat/uapi/kdat.h>
#include <kdat/uapi/kdat_dat.h>
#include <kdat/ep_table.h>

/**
 * DOC: kdat overview
 *
 * kdat serves the DAT 2.0 (kDAPL/uDAPL) model on the kernel's rdma_cm: an
 * interface adapter (IA, struct kdat_ia) on one RDMA device, event
 * dispatchers (EVD, struct kdat_evd), endpoints (EP, struct kdat_ep) whose
 * states and connection events follow DAT's state machine
 * (include/kdat/ep_table.h), service points (PSP and RSP, struct kdat_sp)
 * and the connection requests (CR, struct kdat_cr) they receive, and memory
 * for data transfer (struct kdat_lmr, struct kdat_rmr, struct kdat_mr).
 * Every object is opaque and passed by pointer.
 *
 * Each IA opened here is its own owner: the objects created on it, and the
 * EVDs an EP or SP names, must all be that IA's.
 *
 * Every call that can fail returns a &typedef kdat_ret_t: %KDAT_DAT_SUCCESS
 * (0), or an error made of a DAT type and subtype, KDAT_ERR(type, subtype).
 * The Return: sections name both with DAT's names (the KDAT_DAT_* constants
 * of <kdat/uapi/kdat_dat.h> without their KDAT_ prefix), as in
 * DAT_INVALID_PARAMETER (DAT_INVALID_ARG2); KDAT_RET_TYPE() gives the type
 * alone.  A DAT_INVALID_STATE of an EP carries the subtype naming the state
 * the EP was in (DAT_INVALID_STATE_EP_CONNECTED, ...).
 *
 * Every call may sleep and must be made in process context, except where its
 * Context: says otherwise; none may be made from an upcall (see "kdat
 * upcalls").
 */

/**
 * DOC: kdat upcalls
 *
 * An EVD created with an upcall (&typedef kdat_upcall_t) calls it each time
 * an event is queued on it (or lost for want of memory), once the event is
 * in the queue.  Upcalls run in process context, in whichever thread queued
 * the event, and they run under kdat's locks:
 *
 * - an EP's connection event: that EP's lock, in an rdma_cm handler (which
 *   also holds the id's handler mutex), kdat's connect-timeout or
 *   graceful-disconnect work, or the consumer's own call on the EP
 *   (kdat_ep_connect(), kdat_ep_disconnect(), kdat_ep_free(), ...);
 * - a connection request: the lock of the IA's owner and the listening
 *   id's handler mutex;
 * - a completion (DTO EVDs): the work of the CQ the EP shares with other EPs
 *   of its IA, which kdat's disconnect and free of any of those EPs wait for
 *   (ib_drain_qp()) while holding that EP's lock.
 *
 * So an upcall makes no kdat call at all (every call may take one of those
 * locks or wait for the upcall's own thread), and waits for no lock of the
 * consumer's that is held across a kdat call: it wakes or queues work of its
 * own, and that work dequeues, posts, accepts or disconnects.  The block I/O
 * posts' done() callbacks have a rule of their own (see "kdat block I/O").
 */

/**
 * DOC: kdat object lifetime
 *
 * An object is valid from the call that creates it until the call that
 * frees it: kdat_ia_close(), kdat_evd_free(), kdat_ep_free(),
 * kdat_sp_free(), kdat_lmr_free(), kdat_rmr_free(), kdat_mr_free().  A CR
 * ends with its kdat_cr_accept() or kdat_cr_reject(), and an EP that kdat
 * created for a request to a KDAT_PSP_PROVIDER PSP ends with that request's
 * kdat_cr_reject() (after an accept it is the consumer's to free).  Once
 * freed an object must not be passed again, and no other call may be running
 * on it while it is freed: the DAT rule that a stale handle "fails" holds
 * for the handles of /dev/kdat, which are checked, not for pointers.  Other
 * calls on one object may come from several threads at once; kdat
 * serializes them.
 *
 * An IA owns everything created on it: kdat_ia_close() with
 * %KDAT_IA_CLOSE_ABRUPT frees what is left (pending CRs are rejected,
 * connected EPs disconnected).
 *
 * An event names objects by pointer, and kdat_evd_wait() or
 * kdat_evd_dequeue() leave them as valid as they are: the DISCONNECTED that
 * kdat_ep_free() queues for a connected EP names the freed EP (compare the
 * pointer, never use it).
 *
 * If the RDMA device goes away, the IA's EPs get their connection events
 * (BROKEN on a connection, NON_PEER_REJECTED on a connect, ACCEPT_COMPLETION_ERROR
 * on an accept; an idle EP becomes DISCONNECTED without one), later calls
 * that need the device fail with DAT_INVALID_STATE, and the device's
 * mappings and registrations of the IA's memory are gone; the consumer still
 * frees every object.
 */

/**
 * typedef kdat_ret_t - a DAT_RETURN
 *
 * Class, type and subtype of <kdat/uapi/kdat_dat.h>: %KDAT_DAT_SUCCESS (0)
 * or KDAT_ERR(type, subtype).
 */
typedef u32 kdat_ret_t;

struct kdat_ia;
struct kdat_evd;
struct kdat_ep;
struct kdat_sp;		/* a PSP or an RSP */
struct kdat_cr;
struct kdat_lmr;	/* a kernel buffer registered for DMA */
struct kdat_rmr;	/* a window the peer may RDMA to/from */

/**
 * struct kdat_iov - one piece of a local buffer for a data transfer request
 * @lmr: the LMR the piece lies in, of the EP's IA
 * @offset: bytes from the start of @lmr's buffer
 * @length: bytes
 */
struct kdat_iov {
	struct kdat_lmr *lmr;
	u64 offset;
	u32 length;
};

/* kdat_rmr_bind() and kdat_ep_post_reg_mr() access: what the peer may do */
#define KDAT_RMR_REMOTE_READ	(1u << 0)
#define KDAT_RMR_REMOTE_WRITE	(1u << 1)
/* The most pieces (struct kdat_iov) one DAT post takes */
#define KDAT_MAX_IOV		8

/**
 * KDAT_ERR() - the DAT error of a type and a subtype
 * @type: KDAT_DAT_* type (KDAT_DAT_INVALID_PARAMETER, ...)
 * @subtype: KDAT_DAT_* subtype (KDAT_DAT_INVALID_ARG2, ...), or KDAT_DAT_NO_SUBTYPE
 *
 * Context: Any context; a constant expression for constant arguments.
 * Return: the &typedef kdat_ret_t with DAT's error class.
 */
#define KDAT_ERR(type, subtype)	(KDAT_DAT_CLASS_ERROR | (type) | (subtype))

/**
 * KDAT_RET_TYPE() - the DAT type of a result
 * @ret: a &typedef kdat_ret_t
 *
 * Context: Any context.
 * Return: @ret's type alone (KDAT_DAT_INVALID_STATE, ...; 0 for success).
 */
#define KDAT_RET_TYPE(ret)	((ret) & KDAT_DAT_TYPE_MASK)

/**
 * struct kdat_ia_info - what an IA reports (kdat_ia_query())
 * @device_name: the RDMA device's name (rxe0, siw0, mlx5_0, ...)
 * @netdev_name: its netdev's name
 * @local_addr: the IA's address (port 0)
 * @max_connect_private_data: bytes of private data kdat_ep_connect() carries
 * @max_accept_private_data: bytes of private data kdat_cr_accept() carries
 * @max_reject_private_data: bytes of private data kdat_cr_reject() carries
 * @max_rdma_read_in: the largest IRD an EP may ask for (device's, at most 255)
 * @max_rdma_read_out: the largest ORD an EP may ask for (device's, at most 255)
 * @max_eps: EPs per IA (KDAT_MAX_EPS)
 * @max_evd_qlen: the largest qlen of kdat_evd_create()
 * @max_dtos: the device's work requests per queue
 * @max_iov: the device's scatter/gather entries per send-queue request
 * @supported_qos: DAT_QOS bits served: %KDAT_DAT_QOS_BEST_EFFORT only
 * @max_rdma_read_iov: local segments one RDMA read takes (1 on iWARP)
 *
 * The private data limits are the transport's fields less kdat's header (none
 * on an IA opened with %KDAT_IA_PDATA_RAW) and, for a connect, rdma_cm's.
 */
struct kdat_ia_info {
	char device_name[KDAT_NAME_MAX];
	char netdev_name[KDAT_NAME_MAX];
	struct sockaddr_storage local_addr;
	u32 max_connect_private_data;
	u32 max_accept_private_data;
	u32 max_reject_private_data;
	u32 max_rdma_read_in;
	u32 max_rdma_read_out;
	u32 max_eps;
	u32 max_evd_qlen;
	u32 max_dtos;
	u32 max_iov;
	u32 supported_qos;
	u32 max_rdma_read_iov;
};

/**
 * struct kdat_event_info - one event, as kdat_evd_wait() and kdat_evd_dequeue() return it
 * @number: DAT_EVENT_NUMBER: KDAT_DAT_DTO_COMPLETION_EVENT,
 *	KDAT_DAT_CONNECTION_EVENT_ESTABLISHED, KDAT_DAT_CONNECTION_REQUEST_EVENT, ...
 * @evd: the EVD it came from
 * @ep: connection and DTO events: the EP; a request: the EP its CR names, or NULL
 * @sp: a request: the PSP or RSP it came to
 * @cr: a request: the connection request, for kdat_cr_accept() or kdat_cr_reject()
 * @dto_status: DTO and bind events: KDAT_DAT_DTO_* (KDAT_DAT_DTO_ERR_FLUSHED, ...)
 * @cookie: DTO and bind events: the cookie the request was posted with
 * @transfered_length: DTO events: a receive's bytes received, a request's bytes posted
 * @private_data_size: bytes in @private_data
 * @private_data: the peer's private data: a request's, an active ESTABLISHED's
 *	(the accept's) or a PEER_REJECTED's
 * @ud: a UD exchange's peer (user QPs only: /dev/kdat's UD EPs); zero otherwise
 *
 * Object pointers are NULL where they do not apply.
 */
struct kdat_event_info {
	u32 number;
	struct kdat_evd *evd;
	struct kdat_ep *ep;
	struct kdat_sp *sp;
	struct kdat_cr *cr;
	u32 dto_status;
	u64 cookie;
	u32 transfered_length;
	u32 private_data_size;
	u8 private_data[KDAT_PRIVATE_DATA_MAX];
	struct kdat_event_ud ud;
};

/**
 * struct kdat_ep_info - what an EP reports (kdat_ep_query())
 * @state: its DAT_EP_STATE (enum kdat_ep_state)
 * @attr: its attributes; IRD and ORD are the negotiated ones once connected
 * @local_addr: its local address and port, once it has one
 * @remote_addr: the peer's address and port, once it has one
 * @transitions: the state changes it made
 */
struct kdat_ep_info {
	u32 state;
	struct kdat_ep_attr attr;
	struct sockaddr_storage local_addr;
	struct sockaddr_storage remote_addr;
	u64 transitions;
};

/**
 * struct kdat_cr_info - a connection request (kdat_cr_query())
 * @sp: the PSP or RSP it came to
 * @ep: the EP the CR names (an RSP's, or one kdat made for a provider PSP), or NULL
 * @remote_rdma_read_in: the requester's IRD
 * @remote_rdma_read_out: the requester's ORD
 * @remote_addr: the requester's address and port
 * @local_addr: the address and port it came to
 * @private_data_size: bytes in @private_data
 * @private_data: the requester's private data
 * @remote_retry_count: the requester's retry_count
 * @remote_rnr_retry_count: the requester's rnr_retry_count
 * @remote_flow_control: the requester's flow_control
 */
struct kdat_cr_info {
	struct kdat_sp *sp;
	struct kdat_ep *ep;
	u32 remote_rdma_read_in;
	u32 remote_rdma_read_out;
	struct sockaddr_storage remote_addr;
	struct sockaddr_storage local_addr;
	u32 private_data_size;
	u8 private_data[KDAT_PRIVATE_DATA_MAX];
	u8 remote_retry_count;
	u8 remote_rnr_retry_count;
	u8 remote_flow_control;
};

/**
 * typedef kdat_upcall_t - an EVD's upcall, called each time an event is queued
 * @evd: the EVD
 * @context: what kdat_evd_create() was given
 *
 * Context: Process context, under kdat's locks: see "kdat upcalls".  Makes no
 * kdat call.
 */
typedef void (*kdat_upcall_t)(struct kdat_evd *evd, void *context);

/**
 * __kdat_ia_open() - open an IA for the calling module
 * @net: the network namespace of @name and of every address and id of the IA
 * @name: a netdev (its first IPv4 address is the IA's) or an IP literal
 * @flags: KDAT_IA_* of <kdat/uapi/kdat.h>: 0, or %KDAT_IA_PDATA_RAW
 * @ia: the new IA, on success
 * @owner: the name the shared object table gives the IA's owner (KBUILD_MODNAME)
 *
 * Called through kdat_ia_open(), kdat_ia_open_net() and kdat_ia_open_flags().
 * The IA is its own owner; kdat holds a reference on @net and on its own
 * module while it is open.  %KDAT_IA_PDATA_RAW makes the IA's private data
 * byte-exact with plain rdma_cm peers (no kdat header; what arrives is the
 * transport's whole field), for drivers that speak an existing wire protocol.
 *
 * Context: Process context; sleeps.  Not from an upcall.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG1): @net, @name or @ia is NULL;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG2): @flags has an unknown bit;
 * * DAT_PROVIDER_NOT_FOUND: @name is no address or netdev with an IPv4
 *   address, no RDMA device serves it, or that device is going away;
 * * DAT_INSUFFICIENT_RESOURCES (DAT_RESOURCE_MEMORY, DAT_RESOURCE_DEVICE or
 *   DAT_RESOURCE_PROTECTION_DOMAIN): memory, an rdma_cm id or the PD.
 */
kdat_ret_t __kdat_ia_open(struct net *net, const char *name, u32 flags, struct kdat_ia **ia,
			  const char *owner);

/**
 * kdat_ia_open_flags() - open an IA in a namespace, with flags
 * @net: the network namespace (see __kdat_ia_open())
 * @name: a netdev or an IP literal
 * @flags: 0 or %KDAT_IA_PDATA_RAW
 * @ia: the new IA, on success
 *
 * Context: Process context; sleeps.  Not from an upcall.
 * Return: as __kdat_ia_open().
 */
#define kdat_ia_open_flags(net, name, flags, ia) \
	__kdat_ia_open(net, name, flags, ia, KBUILD_MODNAME)

/**
 * kdat_ia_open_net() - open an IA in a network namespace
 * @net: the network namespace (see __kdat_ia_open())
 * @name: a netdev or an IP literal
 * @ia: the new IA, on success
 *
 * Context: Process context; sleeps.  Not from an upcall.
 * Return: as __kdat_ia_open().
 */
#define kdat_ia_open_net(net, name, ia)	__kdat_ia_open(net, name, 0, ia, KBUILD_MODNAME)

/**
 * kdat_ia_open() - open an IA in the initial network namespace
 * @name: a netdev or an IP literal
 * @ia: the new IA, on success
 *
 * Context: Process context; sleeps.  Not from an upcall.
 * Return: as __kdat_ia_open().
 */
#define kdat_ia_open(name, ia)		__kdat_ia_open(&init_net, name, 0, ia, KBUILD_MODNAME)

/**
 * kdat_ia_close() - close an IA
 * @ia: the IA
 * @flags: %KDAT_IA_CLOSE_ABRUPT: free everything the IA owns (pending CRs are
 *	rejected, EPs freed, connected ones disconnected); %KDAT_IA_CLOSE_GRACEFUL:
 *	refuse while the IA has an EP, EVD, SP or CR
 *
 * On success @ia is freed.  LMRs, RMRs and MRs the consumer did not free are
 * freed with either flag.
 *
 * Context: Process context; sleeps, waits for the IA's rdma_cm handlers, CQ
 * work and kdat's work queue.  Not from an upcall or a done() callback.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG2): @flags is neither;
 * * DAT_INVALID_STATE (DAT_INVALID_STATE_IA_IN_USE): graceful, and the IA
 *   has an EP, EVD, SP or CR;
 * * DAT_INVALID_HANDLE (DAT_INVALID_HANDLE_IA): another close of @ia came first.
 */
kdat_ret_t kdat_ia_close(struct kdat_ia *ia, u32 flags);

/**
 * kdat_ia_query() - what an IA and its device offer
 * @ia: the IA
 * @info: filled in (zeroed on failure)
 *
 * Context: Process context; sleeps (takes the IA's lock).  Not from an upcall.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_STATE: the IA's device is gone;
 * * DAT_INVALID_HANDLE (DAT_INVALID_HANDLE_IA): the IA is being closed.
 */
kdat_ret_t kdat_ia_query(struct kdat_ia *ia, struct kdat_ia_info *info);

/**
 * kdat_ia_counters() - the IA's connection counters
 * @ia: the IA
 * @values: where they go, in KDAT_IA_COUNTERS order (<kdat/uapi/kdat_counters.h>)
 * @count: entries of @values; those past KDAT_IA_NR_COUNTERS are set to 0
 *
 * Context: Any context; takes no lock.
 */
void kdat_ia_counters(struct kdat_ia *ia, u64 *values, u32 count);

/**
 * kdat_evd_create() - create an event dispatcher
 * @ia: the IA
 * @qlen: 1..KDAT_MAX_EVD_QLEN (kdat_ia_info.max_evd_qlen): the largest
 *	threshold of kdat_evd_wait(), and how many freed event slots it keeps
 * @flags: the event streams it takes: %KDAT_EVD_DTO, %KDAT_EVD_CONNECTION,
 *	%KDAT_EVD_CR, at least one (not %KDAT_EVD_RING_MODE, userspace's)
 * @upcall: called each time an event is queued, or NULL (see "kdat upcalls")
 * @context: @upcall's second argument
 * @evd: the new EVD, on success
 *
 * The queue grows as events come; an event is lost only when memory for it
 * cannot be had, and the next wait or dequeue reports DAT_QUEUE_FULL.
 *
 * Context: Process context; sleeps (takes the IA's lock).  Not from an upcall.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG2): @qlen is 0 or too large;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG3): @flags names no stream, or an
 *   unknown bit or %KDAT_EVD_RING_MODE;
 * * DAT_INVALID_HANDLE (DAT_INVALID_HANDLE_IA): the IA is being closed;
 * * DAT_INVALID_STATE: the IA's device is gone;
 * * DAT_INSUFFICIENT_RESOURCES (DAT_RESOURCE_MEMORY).
 */
kdat_ret_t kdat_evd_create(struct kdat_ia *ia, u32 qlen, u32 flags,
			   kdat_upcall_t upcall, void *context,
			   struct kdat_evd **evd);

/**
 * kdat_evd_free() - free an event dispatcher
 * @evd: the EVD
 *
 * Events still queued are dropped.
 *
 * Context: Process context; sleeps (takes the IA's lock).  Not from an upcall.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_STATE (DAT_INVALID_STATE_EVD_IN_USE): an EP or SP uses it
 *   (until that EP or SP is freed);
 * * DAT_INVALID_STATE (DAT_INVALID_STATE_EVD_WAITER): a kdat_evd_wait() on it
 *   is under way;
 * * DAT_INVALID_HANDLE: another free of @evd, or its IA's close, came first.
 */
kdat_ret_t kdat_evd_free(struct kdat_evd *evd);

/**
 * kdat_evd_wait() - wait for events and take the oldest
 * @evd: the EVD
 * @timeout_us: µs to wait (0: look once), or %KDAT_TIMEOUT_INFINITE
 * @threshold: wake once this many events are queued, 1..@evd's qlen
 * @event: the oldest event, on success
 * @nmore: events still queued after it, or NULL
 *
 * Context: Process context; sleeps (interruptibly, on an hrtimer for a
 * timeout).  Not from an upcall.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG3): @threshold is 0 or above qlen;
 * * DAT_TIMEOUT_EXPIRED: fewer than @threshold events came in time;
 * * DAT_INTERRUPTED_CALL: a signal came first;
 * * DAT_ABORT: the EVD was freed meanwhile (its IA closed abruptly);
 * * DAT_QUEUE_FULL: an event was lost for want of memory (reported once; the
 *   events queued after it are still there);
 * * DAT_QUEUE_EMPTY: another caller took the events first.
 */
kdat_ret_t kdat_evd_wait(struct kdat_evd *evd, u32 timeout_us, u32 threshold,
			 struct kdat_event_info *event, u32 *nmore);

/**
 * kdat_evd_dequeue() - take the oldest event without waiting
 * @evd: the EVD
 * @event: the oldest event, on success
 * @nmore: events still queued after it, or NULL
 *
 * Context: Any context; does not sleep.  Not from an upcall.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_QUEUE_EMPTY: no event is queued;
 * * DAT_QUEUE_FULL: an event was lost for want of memory (reported once);
 * * DAT_INVALID_HANDLE: the EVD is being freed (its IA's close came first).
 */
kdat_ret_t kdat_evd_dequeue(struct kdat_evd *evd, struct kdat_event_info *event,
			    u32 *nmore);

/**
 * kdat_ep_create() - create an endpoint with its own RC QP
 * @ia: the IA
 * @connect_evd: its connection events (an EVD of @ia with %KDAT_EVD_CONNECTION)
 * @request_evd: its send-queue completions (an EVD of @ia with %KDAT_EVD_DTO),
 *	or NULL: they are not reported
 * @recv_evd: its receive completions (as @request_evd), or NULL
 * @attr: its attributes, or NULL; zero fields take kdat's defaults
 * @ep: the new EP, UNCONNECTED, on success
 *
 * The QP is created at once and taken to INIT, so receives may be posted
 * before a connection exists.  Its DTO depths and scatter/gather sizes are
 * fixed here; kdat_ep_modify() changes only the connection attributes.
 *
 * Context: Process context; sleeps.  Not from an upcall.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_HANDLE (DAT_INVALID_HANDLE_EVD_CONN, _EVD_REQUEST or
 *   _EVD_RECV): that EVD is NULL (connect only), another IA's, freed, or
 *   lacks the flag;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG5): @attr is above the device's
 *   limits, or has a retry count above 7, flow_control above 1 or a reserved
 *   byte set;
 * * DAT_INVALID_HANDLE (DAT_INVALID_HANDLE_IA): the IA is being closed;
 * * DAT_INVALID_STATE: the IA's device is gone;
 * * DAT_INSUFFICIENT_RESOURCES (DAT_RESOURCE_MEMORY, or DAT_RESOURCE_TEP: the
 *   QP or its CQ).
 */
kdat_ret_t kdat_ep_create(struct kdat_ia *ia, struct kdat_evd *connect_evd,
			  struct kdat_evd *request_evd, struct kdat_evd *recv_evd,
			  const struct kdat_ep_attr *attr, struct kdat_ep **ep);

/**
 * kdat_ep_free() - free an endpoint, in any state
 * @ep: the EP
 *
 * A connected (or DISCONNECT_PENDING) EP ends as an abrupt disconnect would
 * end it, as DAPL's dat_ep_free does: its flushed requests, then DISCONNECTED
 * on its connect EVD, whose &kdat_event_info.ep names the freed EP.  An attempt under way
 * ends without an event (the peer sees a reject).  Every request posted on
 * the EP has completed (flushed) before the call returns; an RSP on the EP
 * takes no more requests.
 *
 * Context: Process context; sleeps, waits for the EP's rdma_cm handler and
 * CQ work.  Not from an upcall or a done() callback.  May run the connect
 * EVD's upcall in the calling thread.
 * Return: %KDAT_DAT_SUCCESS, or DAT_INVALID_HANDLE (DAT_INVALID_HANDLE_EP):
 * another free of @ep came first.
 */
kdat_ret_t kdat_ep_free(struct kdat_ep *ep);

/**
 * kdat_ep_query() - an endpoint's state, attributes and addresses
 * @ep: the EP
 * @info: filled in (zeroed on failure)
 *
 * Context: Process context; sleeps (takes the EP's lock).  Not from an upcall.
 * Return: %KDAT_DAT_SUCCESS, or DAT_INVALID_HANDLE (DAT_INVALID_HANDLE_EP):
 * the EP is being freed.
 */
kdat_ret_t kdat_ep_query(struct kdat_ep *ep, struct kdat_ep_info *info);

/**
 * kdat_ep_modify() - change an endpoint's connection attributes
 * @ep: the EP
 * @mask: the attributes to change: KDAT_EP_ATTR_* (IRD, ORD, retry count,
 *	RNR retry count, flow control)
 * @attr: the new values (only @mask's are read)
 *
 * Only before a connection exists: in UNCONNECTED, RESERVED, and
 * PASSIVE_ or TENTATIVE_CONNECTION_PENDING.
 *
 * Context: Process context; sleeps (takes the EP's lock).  Not from an upcall.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG2): @mask is 0 or has an unknown bit;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG5): a new value is out of range
 *   (as for kdat_ep_create());
 * * DAT_INVALID_STATE (the EP's state): any other state;
 * * DAT_INVALID_HANDLE (DAT_INVALID_HANDLE_EP): the EP is being freed.
 */
kdat_ret_t kdat_ep_modify(struct kdat_ep *ep, u32 mask,
			  const struct kdat_ep_attr *attr);

/**
 * kdat_ep_reset() - make a DISCONNECTED endpoint UNCONNECTED again
 * @ep: the EP
 *
 * Its posted requests complete (flushed) first; its QP goes back to INIT and
 * its addresses and negotiated IRD/ORD are cleared.  On an UNCONNECTED EP it
 * does nothing.
 *
 * Context: Process context; sleeps, waits for the EP's rdma_cm handler and
 * CQ work.  Not from an upcall or a done() callback.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_STATE (the EP's state): the EP is in another state, or its
 *   IA's device is gone;
 * * DAT_INVALID_HANDLE (DAT_INVALID_HANDLE_EP): the EP is being freed.
 */
kdat_ret_t kdat_ep_reset(struct kdat_ep *ep);

/**
 * kdat_ep_connect() - connect an UNCONNECTED endpoint to a remote service
 * @ep: the EP
 * @remote: the peer IA's IPv4 or IPv6 address (its port is ignored)
 * @conn_qual: the service: the remote port, 1..65535
 * @timeout_us: µs for the whole attempt, counted from this call, or
 *	%KDAT_TIMEOUT_INFINITE; 0 is invalid (as in VI-GM's VipConnectRequest)
 * @private_data: for the peer's CR, or NULL if @private_data_size is 0
 * @private_data_size: 0..kdat_ia_info.max_connect_private_data
 * @qos: %KDAT_DAT_QOS_BEST_EFFORT, the one service level kdat has
 * @flags: %KDAT_CONNECT_DEFAULT or %KDAT_CONNECT_MULTIPATH_REQUESTED (one
 *	path is used)
 *
 * On success the EP is ACTIVE_CONNECTION_PENDING, and exactly one event on
 * its connect EVD ends the attempt, as dat_ep_dup_connect(3DAT) says:
 * ESTABLISHED (CONNECTED, with the accept's private data), or, the EP then
 * DISCONNECTED: PEER_REJECTED (the peer consumer's reject, with its data),
 * NON_PEER_REJECTED (no listener, a full backlog, a transport error),
 * UNREACHABLE (no route or address) or TIMED_OUT.  No route at once is still
 * a success, followed by UNREACHABLE.  The REQ offers the EP's IRD, ORD,
 * retry counts and flow control as rdma_connect(3)'s conn_param.
 *
 * Context: Process context; sleeps.  Not from an upcall.  May run the
 * connect EVD's upcall in the calling thread.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_ADDRESS: @remote is NULL or not IPv4/IPv6, or rdma_cm
 *   refused it;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG3): @conn_qual is out of range;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG8): @flags has an unknown bit;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG4): @timeout_us is 0, or the
 *   private data is too long, of negative size, or NULL with a size;
 * * DAT_MODEL_NOT_SUPPORTED: another @qos, or
 *   %KDAT_DAT_CONNECT_MULTIPATH_REQUIRED_FLAG;
 * * DAT_INVALID_STATE (the EP's state): not UNCONNECTED, or the IA's device
 *   is gone;
 * * DAT_INVALID_HANDLE (DAT_INVALID_HANDLE_EP): the EP is being freed;
 * * DAT_INSUFFICIENT_RESOURCES (DAT_RESOURCE_MEMORY, or DAT_RESOURCE_TEP: an
 *   rdma_cm id).
 */
kdat_ret_t kdat_ep_connect(struct kdat_ep *ep, const struct sockaddr *remote,
			   u64 conn_qual, u32 timeout_us,
			   const void *private_data, s32 private_data_size,
			   u32 qos, u32 flags);

/**
 * kdat_ep_dup_connect() - connect an endpoint to where another one is connected
 * @ep: the EP, UNCONNECTED
 * @dup_ep: a CONNECTED EP of the same IA that connected actively: the new
 *	connection goes to its remote address, connection qualifier and flags
 * @timeout_us: as for kdat_ep_connect()
 * @private_data: as for kdat_ep_connect()
 * @private_data_size: as for kdat_ep_connect()
 * @qos: as for kdat_ep_connect()
 *
 * dat_ep_dup_connect(3DAT); the attempt and its events are those of
 * kdat_ep_connect().  @dup_ep is read under its own lock, then @ep is
 * connected under its: the two EPs' locks are never held together.
 *
 * Context: Process context; sleeps.  Not from an upcall.  May run the
 * connect EVD's upcall in the calling thread.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_HANDLE (DAT_INVALID_HANDLE2): @dup_ep is NULL, another IA's,
 *   @ep itself, or being freed;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG4): @timeout_us is 0, or the
 *   private data is too long, of negative size, or NULL with a size;
 * * DAT_MODEL_NOT_SUPPORTED: another @qos;
 * * DAT_INVALID_STATE (@dup_ep's state): @dup_ep is not CONNECTED;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG2): @dup_ep was connected passively
 *   (its remote end is no service);
 * * DAT_INVALID_STATE (@ep's state): @ep is not UNCONNECTED, or the IA's
 *   device is gone;
 * * DAT_INVALID_HANDLE (DAT_INVALID_HANDLE_EP): @ep is being freed;
 * * DAT_INVALID_ADDRESS, DAT_INSUFFICIENT_RESOURCES: as for kdat_ep_connect().
 */
kdat_ret_t kdat_ep_dup_connect(struct kdat_ep *ep, struct kdat_ep *dup_ep,
			       u32 timeout_us, const void *private_data,
			       s32 private_data_size, u32 qos);

/**
 * kdat_ep_disconnect() - end a connection or a connection attempt
 * @ep: the EP
 * @flags: %KDAT_CLOSE_ABRUPT or %KDAT_CLOSE_GRACEFUL
 *
 * dat_ep_disconnect(3DAT).  Abrupt, on a CONNECTED or DISCONNECT_PENDING EP:
 * the DREQ goes at once, every posted request completes (flushed if it had
 * not run), then DISCONNECTED.  Graceful, on a CONNECTED EP: the EP is
 * DISCONNECT_PENDING (no new send-queue posts) until its send-queue requests
 * in flight completed; then the DREQ, and DISCONNECTED once the peer answers
 * (or the DREQ times out), after the flushed receives.  Graceful in
 * DISCONNECT_PENDING, and either in DISCONNECTED, does nothing.  Either
 * during an attempt (ACTIVE_CONNECTION_PENDING, COMPLETION_PENDING) aborts it
 * with DISCONNECTED: the peer sees a reject.
 *
 * Context: Process context; sleeps, may wait for the EP's CQ work.  Not from
 * an upcall or a done() callback.  May run the connect EVD's upcall in the
 * calling thread.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG2): @flags is neither;
 * * DAT_INVALID_STATE (the EP's state): UNCONNECTED, RESERVED,
 *   PASSIVE_CONNECTION_PENDING or TENTATIVE_CONNECTION_PENDING;
 * * DAT_INVALID_HANDLE (DAT_INVALID_HANDLE_EP): the EP is being freed.
 */
kdat_ret_t kdat_ep_disconnect(struct kdat_ep *ep, u32 flags);

/**
 * kdat_psp_create() - listen on a connection qualifier
 * @ia: the IA
 * @conn_qual: the port, 1..65535
 * @evd: where the requests' KDAT_DAT_CONNECTION_REQUEST_EVENTs go (an EVD of
 *	@ia with %KDAT_EVD_CR)
 * @flags: %KDAT_PSP_CONSUMER: the consumer brings the EP to accept on;
 *	%KDAT_PSP_PROVIDER: kdat makes an EP per request (TENTATIVE_CONNECTION_PENDING,
 *	default attributes, @evd as its connect EVD and no DTO EVD), named by the CR
 * @psp: the new PSP, on success
 *
 * The PSP holds at most listen_backlog requests (a module parameter, 128 by
 * default) not yet accepted or rejected; kdat refuses more, and their
 * requesters get NON_PEER_REJECTED.
 *
 * Context: Process context; sleeps.  Not from an upcall.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG2): @conn_qual is out of range;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG4): @flags is neither;
 * * DAT_INVALID_HANDLE (DAT_INVALID_HANDLE_EVD_CR): @evd is NULL, another
 *   IA's, freed, or lacks %KDAT_EVD_CR;
 * * DAT_INVALID_HANDLE (DAT_INVALID_HANDLE_IA): the IA is being closed;
 * * DAT_INVALID_STATE: the IA's device is gone;
 * * DAT_CONN_QUAL_IN_USE: something listens on that port already;
 * * DAT_INSUFFICIENT_RESOURCES (DAT_RESOURCE_MEMORY, DAT_RESOURCE_DEVICE, or
 *   no subtype: rdma_cm refused to listen).
 */
kdat_ret_t kdat_psp_create(struct kdat_ia *ia, u64 conn_qual,
			   struct kdat_evd *evd, u32 flags, struct kdat_sp **psp);

/**
 * kdat_rsp_create() - reserve an endpoint for one request on a connection qualifier
 * @ia: the IA
 * @conn_qual: the port, 1..65535
 * @ep: an UNCONNECTED EP of @ia, which becomes RESERVED
 * @evd: as for kdat_psp_create()
 * @rsp: the new RSP, on success
 *
 * The first request makes @ep PASSIVE_CONNECTION_PENDING and is named by its
 * CR; the RSP refuses any later one.
 *
 * Context: Process context; sleeps.  Not from an upcall.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_HANDLE (DAT_INVALID_HANDLE_EP): @ep is NULL, another IA's or
 *   being freed;
 * * DAT_INVALID_STATE (the EP's state): @ep is not UNCONNECTED;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG2), DAT_INVALID_HANDLE
 *   (DAT_INVALID_HANDLE_EVD_CR or _IA), DAT_INVALID_STATE (the device is
 *   gone), DAT_CONN_QUAL_IN_USE, DAT_INSUFFICIENT_RESOURCES: as for
 *   kdat_psp_create().
 */
kdat_ret_t kdat_rsp_create(struct kdat_ia *ia, u64 conn_qual,
			   struct kdat_ep *ep, struct kdat_evd *evd,
			   struct kdat_sp **rsp);

/**
 * kdat_sp_free() - free a PSP or an RSP
 * @sp: the service point
 *
 * It stops listening; requests pending on it stay valid, for
 * kdat_cr_accept() or kdat_cr_reject().  An RSP's EP still RESERVED becomes
 * UNCONNECTED.
 *
 * Context: Process context; sleeps, waits for the listener's rdma_cm
 * handlers.  Not from an upcall.
 * Return: %KDAT_DAT_SUCCESS, or DAT_INVALID_HANDLE (DAT_INVALID_HANDLE_PSP,
 * for an RSP too): another free of @sp came first.
 */
kdat_ret_t kdat_sp_free(struct kdat_sp *sp);

/**
 * kdat_cr_query() - what a connection request carries
 * @cr: the CR
 * @info: filled in (zeroed on failure)
 *
 * Context: Process context; sleeps (takes the IA's lock).  Not from an upcall.
 * Return: %KDAT_DAT_SUCCESS, or DAT_INVALID_HANDLE (DAT_INVALID_HANDLE_CR):
 * the CR was accepted or rejected meanwhile.
 */
kdat_ret_t kdat_cr_query(struct kdat_cr *cr, struct kdat_cr_info *info);

/**
 * kdat_cr_accept() - accept a connection request on an endpoint
 * @cr: the CR
 * @ep: an EP of the CR's IA, or NULL for the EP the CR names (an RSP's, or
 *	one kdat made for a provider PSP); if the CR names one, @ep is that one
 * @private_data: for the requester, or NULL if @private_data_size is 0
 * @private_data_size: 0..kdat_ia_info.max_accept_private_data
 *
 * dat_cr_accept(3DAT).  The EP (UNCONNECTED, PASSIVE_ or
 * TENTATIVE_CONNECTION_PENDING) becomes COMPLETION_PENDING and the REP goes;
 * ESTABLISHED on its connect EVD reports the connection, or
 * ACCEPT_COMPLETION_ERROR (the EP then DISCONNECTED, receives flushed) that
 * it could not be made, including when the reply could not be sent.  The
 * EP's IRD and ORD are the smaller of its own, the requester's offer and the
 * device's.  On success the CR is consumed; on failure it and the EP are as
 * they were.
 *
 * Context: Process context; sleeps, takes the CR's rdma_cm handler mutex.
 * Not from an upcall.  May run the connect EVD's upcall in the calling
 * thread.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG4): the private data is too long,
 *   of negative size, or NULL with a size;
 * * DAT_INVALID_HANDLE (DAT_INVALID_HANDLE_CR): the CR was accepted or
 *   rejected meanwhile (or its device is gone);
 * * DAT_INVALID_HANDLE (DAT_INVALID_HANDLE_EP): @ep is another IA's, or being
 *   freed;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG2): @ep is NULL and the CR names
 *   none, or @ep is not the one the CR names;
 * * DAT_INVALID_STATE (the EP's state): the EP is in another state, or the
 *   IA's device is gone.
 */
kdat_ret_t kdat_cr_accept(struct kdat_cr *cr, struct kdat_ep *ep,
			  const void *private_data, s32 private_data_size);

/**
 * kdat_cr_reject() - refuse a connection request
 * @cr: the CR
 * @private_data: for the requester's PEER_REJECTED, or NULL if
 *	@private_data_size is 0
 * @private_data_size: 0..kdat_ia_info.max_reject_private_data
 *
 * The requester gets a consumer reject (PEER_REJECTED, with the data), unless
 * it gave up already.  The CR is consumed; an RSP's EP goes back to
 * UNCONNECTED, and an EP kdat made for a provider PSP is freed.
 *
 * Context: Process context; sleeps, takes the CR's rdma_cm handler mutex.
 * Not from an upcall or a done() callback.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG4): the private data is too long,
 *   of negative size, or NULL with a size;
 * * DAT_INVALID_HANDLE (DAT_INVALID_HANDLE_CR): the CR was accepted or
 *   rejected meanwhile.
 */
kdat_ret_t kdat_cr_reject(struct kdat_cr *cr, const void *private_data,
			  s32 private_data_size);

/**
 * DOC: kdat data transfer
 *
 * Data transfer on kernel EPs.  Completions are DAT_DTO_COMPLETION_EVENTs on
 * the EP's request EVD (send, RDMA write and read) or receive EVD, carrying
 * the cookie, DAT_DTO_* status and length; RMR binds complete with a
 * DAT_RMR_BIND_COMPLETION_EVENT on the request EVD.  Posts are legal in the
 * states the state table allows: send-queue posts (sends, RDMA, binds) only
 * while CONNECTED (none in DISCONNECT_PENDING, as dat_ep_disconnect(3DAT)
 * says), receives in every state but DISCONNECTED.  On disconnect
 * outstanding requests complete as flushed, and every completion is queued
 * before the EP's DISCONNECTED event.  The posts may be called from process
 * or softirq context; they never sleep.
 *
 * Over iWARP the active side sends the first message (rdma_connect(3)).  On
 * an accepted EP of an iWARP device every send-queue post (send, RDMA, bind,
 * kdat_ep_post_sgl() and the other block I/O posts) is held until the EP's
 * first receive completes, then posted in order; after first_send_hold_ms (a
 * module parameter, 1 s by default) without one it is posted anyway, and if
 * the connection ends first it completes flushed.  A held post has returned
 * success and counts as outstanding.  Nothing is held on RoCE/IB or on an EP
 * that connected actively.
 */

/**
 * kdat_lmr_create() - register a kernel buffer for data transfer
 * @ia: the IA
 * @buf: kmalloc'ed (physically contiguous) memory that outlives the LMR
 * @length: bytes, 1..U32_MAX
 * @lmr: the new LMR, on success
 *
 * The buffer is DMA-mapped (bidirectional) for the IA's device; posts reach
 * it through the device's local DMA key.
 *
 * Context: Process context; sleeps (takes the IA's lock).  Not from an upcall.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG2): @buf is NULL or not in the
 *   kernel's linear map, or @length is 0 or too large;
 * * DAT_INVALID_STATE: the IA is being closed or its device is gone;
 * * DAT_INSUFFICIENT_RESOURCES (DAT_RESOURCE_MEMORY, or
 *   DAT_RESOURCE_MEMORY_REGION: the mapping failed).
 */
kdat_ret_t kdat_lmr_create(struct kdat_ia *ia, void *buf, u64 length,
			   struct kdat_lmr **lmr);

/**
 * kdat_lmr_free() - unmap and free an LMR
 * @lmr: the LMR, in no posted request
 *
 * Context: Process context; sleeps (takes the IA's lock).  Not from an upcall.
 * Return: %KDAT_DAT_SUCCESS.
 */
kdat_ret_t kdat_lmr_free(struct kdat_lmr *lmr);

/**
 * kdat_lmr_sync_for_cpu() - make what the device wrote into an LMR visible to the CPU
 * @lmr: the LMR
 *
 * Before the CPU reads the buffer after a receive or an RDMA read into it.
 * Does nothing once the IA's device is gone.
 *
 * Context: Any context.
 */
void kdat_lmr_sync_for_cpu(struct kdat_lmr *lmr);

/**
 * kdat_lmr_sync_for_device() - hand an LMR back to the device
 * @lmr: the LMR
 *
 * After the CPU wrote the buffer, before a post that reads it.  Does nothing
 * once the IA's device is gone.
 *
 * Context: Any context.
 */
void kdat_lmr_sync_for_device(struct kdat_lmr *lmr);

/**
 * kdat_rmr_create() - create an RMR, a window the peer may RDMA to or from
 * @ia: the IA
 * @rmr: the new RMR, unbound, on success
 *
 * Its memory registration is made by its first kdat_rmr_bind().
 *
 * Context: Process context; sleeps (takes the IA's lock).  Not from an upcall.
 * Return: %KDAT_DAT_SUCCESS, or DAT_INSUFFICIENT_RESOURCES (DAT_RESOURCE_MEMORY).
 */
kdat_ret_t kdat_rmr_create(struct kdat_ia *ia, struct kdat_rmr **rmr);

/**
 * kdat_rmr_bind() - bind an RMR to a piece of an LMR, through a CONNECTED endpoint
 * @rmr: the RMR, of @ep's IA
 * @ep: the EP whose send queue carries the bind
 * @iov: the piece: an LMR of @ep's IA, a non-empty range inside it
 * @access: what the peer may do: %KDAT_RMR_REMOTE_READ, %KDAT_RMR_REMOTE_WRITE
 * @cookie: the bind completion's cookie
 * @rmr_context: the key the peer uses, on success
 * @target_address: the address the peer uses, on success
 *
 * A fast registration posted on @ep's send queue, completing with a
 * DAT_RMR_BIND_COMPLETION_EVENT on its request EVD.  Each bind makes a new
 * key: the peer's previous @rmr_context stops working.
 *
 * Context: Process context; sleeps (takes the IA's and the EP's locks, may
 * allocate the registration).  Not from an upcall.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG3): @iov is NULL, empty, out of its
 *   LMR or another IA's, @access has an unknown bit, or @rmr is another IA's;
 * * DAT_INVALID_STATE (the EP's state): the EP is not CONNECTED (or has no
 *   QP any more: freed, its device gone);
 * * DAT_INSUFFICIENT_RESOURCES (DAT_RESOURCE_MEMORY_REGION: the registration;
 *   DAT_RESOURCE_TEP: the send queue is full).
 */
kdat_ret_t kdat_rmr_bind(struct kdat_rmr *rmr, struct kdat_ep *ep,
			 const struct kdat_iov *iov, u32 access, u64 cookie,
			 u32 *rmr_context, u64 *target_address);

/**
 * kdat_rmr_free() - free an RMR and its registration
 * @rmr: the RMR, with no bind posted
 *
 * Context: Process context; sleeps (takes the IA's lock).  Not from an upcall.
 * Return: %KDAT_DAT_SUCCESS.
 */
kdat_ret_t kdat_rmr_free(struct kdat_rmr *rmr);

/**
 * kdat_ep_post_recv() - post a receive
 * @ep: the EP
 * @iov: where the message goes, in order (NULL if @n_iov is 0)
 * @n_iov: pieces of @iov, 0..KDAT_MAX_IOV and at most the EP's max_recv_iov
 * @cookie: the completion's cookie
 *
 * Completes with a DAT_DTO_COMPLETION_EVENT on the EP's receive EVD.
 *
 * Context: Process or softirq context; does not sleep.  Not from an upcall.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_STATE (the EP's state): the EP is DISCONNECTED, being freed,
 *   or being flushed;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG2): @n_iov is above KDAT_MAX_IOV,
 *   or @iov is NULL;
 * * DAT_PROTECTION_VIOLATION: a piece's LMR is NULL, another IA's, or too
 *   short for it;
 * * DAT_INSUFFICIENT_RESOURCES (DAT_RESOURCE_TEP): max_recv_dtos receives
 *   are outstanding, or the QP refused the request.
 */
kdat_ret_t kdat_ep_post_recv(struct kdat_ep *ep, const struct kdat_iov *iov,
			     u32 n_iov, u64 cookie);

/**
 * kdat_ep_post_send() - post a send
 * @ep: the EP
 * @iov: the message, in order (NULL if @n_iov is 0)
 * @n_iov: pieces of @iov, 0..KDAT_MAX_IOV and at most the EP's max_request_iov
 * @cookie: the completion's cookie
 *
 * Completes with a DAT_DTO_COMPLETION_EVENT on the EP's request EVD.
 *
 * Context: Process or softirq context; does not sleep.  Not from an upcall.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_STATE (the EP's state): the EP is not CONNECTED, is being
 *   freed, or being flushed;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG2): @n_iov is above KDAT_MAX_IOV,
 *   or @iov is NULL;
 * * DAT_PROTECTION_VIOLATION: a piece's LMR is NULL, another IA's, or too
 *   short for it;
 * * DAT_INSUFFICIENT_RESOURCES (DAT_RESOURCE_TEP): max_request_dtos requests
 *   are outstanding, or the QP refused the request.
 */
kdat_ret_t kdat_ep_post_send(struct kdat_ep *ep, const struct kdat_iov *iov,
			     u32 n_iov, u64 cookie);

/**
 * kdat_ep_post_rdma_write() - post an RDMA write into the peer's memory
 * @ep: the EP
 * @iov: the local data, in order (NULL if @n_iov is 0)
 * @n_iov: pieces of @iov, as for kdat_ep_post_send()
 * @cookie: the completion's cookie
 * @target_address: the peer's address (its RMR's target_address, or within it)
 * @rmr_context: the peer's key (its RMR's rmr_context)
 *
 * Completes with a DAT_DTO_COMPLETION_EVENT on the EP's request EVD.
 *
 * Context: Process or softirq context; does not sleep.  Not from an upcall.
 * Return: as kdat_ep_post_send().
 */
kdat_ret_t kdat_ep_post_rdma_write(struct kdat_ep *ep, const struct kdat_iov *iov,
				   u32 n_iov, u64 cookie, u64 target_address,
				   u32 rmr_context);

/**
 * kdat_ep_post_rdma_read() - post an RDMA read from the peer's memory
 * @ep: the EP, with an ORD above 0
 * @iov: where the data goes, in order (NULL if @n_iov is 0)
 * @n_iov: pieces of @iov, as for kdat_ep_post_send(), and at most
 *	kdat_ia_info.max_rdma_read_iov when above 1
 * @cookie: the completion's cookie
 * @target_address: the peer's address (its RMR's target_address, or within it)
 * @rmr_context: the peer's key (its RMR's rmr_context)
 *
 * Completes with a DAT_DTO_COMPLETION_EVENT on the EP's request EVD.
 *
 * Context: Process or softirq context; does not sleep.  Not from an upcall.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG3): @n_iov is above the device's
 *   segments per RDMA read;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG1): the EP's ORD (asked for, or
 *   negotiated) is 0;
 * * the errors of kdat_ep_post_send().
 */
kdat_ret_t kdat_ep_post_rdma_read(struct kdat_ep *ep, const struct kdat_iov *iov,
				  u32 n_iov, u64 cookie, u64 target_address,
				  u32 rmr_context);

/**
 * DOC: kdat block I/O
 *
 * Block I/O: a request's pages as a scatterlist, registered per request,
 * completed by a callback.  The DAT posts (see "kdat data transfer") carry
 * DAT's model (LMRs, cookies, events on EVDs); a storage driver needs less
 * per request:
 *
 * - kdat_sgl_map() DMA-maps a scatterlist (a bio's pages, any size and
 *   alignment) for the IA's device.  As the local side of a post it needs
 *   no registration: the device's local DMA key covers it.  A send takes up
 *   to the EP's max_request_iov DMA segments, a receive max_recv_iov (the
 *   device's max_send_sge bounds those: 32 on rxe, 6 on siw).  An RDMA read
 *   or write takes any number: kdat posts it as several work requests over
 *   consecutive remote ranges when it has more segments than one takes
 *   (max_request_iov; for reads also kdat_ia_info.max_rdma_read_iov, 1 on
 *   iWARP), as rdma_rw does.  Each work request takes a place in the send
 *   queue (max_request_dtos); done() runs once, after the last one, with the
 *   first failure of any.
 * - Pages the peer must reach (an initiator's buffers, which the target
 *   RDMA-reads for a write and RDMA-writes for a read, as in iSER and
 *   NVMe-oF) are registered for one request: kdat_ep_post_reg_mr() posts a
 *   fast registration of a kdat_mr (kdat_mr_alloc(), one per request slot)
 *   ahead of the request that carries its rkey, and the registration ends
 *   when the peer answers with %KDAT_SGL_SEND_INV (the receive's completion
 *   names the invalidated rkey) or with kdat_ep_post_local_inv().
 * - Every post names a &struct kdat_cqe that the caller owns until its done()
 *   has run.  done() runs in the polling context of the CQ the EP shares
 *   with other EPs of its IA (a workqueue, so it may not sleep for long),
 *   without any kdat lock, once per post (a flush error when the connection
 *   ended, or when the EP is freed), and may post again; it must not call
 *   kdat's sleeping calls (kdat_mr_free(), kdat_ep_* other than the posts)
 *   nor wait for a lock held across them: kdat may be waiting, under its
 *   locks, for it to return (a disconnect, free or device removal of any EP
 *   on that CQ drains its QP).
 *
 * Once the IA's device is gone, kdat_sgl_unmap() and the syncs do nothing and
 * registrations are refused; the removal released the device's side of the
 * IA's MRs (as of its LMRs and RMRs), and the consumer still frees them with
 * kdat_mr_free() (kdat_lmr_free(), kdat_rmr_free()), or kdat_ia_close() does.
 *
 * kdat_sgl_map(), kdat_sgl_unmap(), the syncs and every kdat_ep_post_* here
 * may be called from process, softirq or blk-mq (atomic) context: they never
 * sleep.  Posts are refused (DAT_INVALID_STATE) where the state table
 * refuses a send or a receive; a disconnect flushes outstanding ones before
 * DISCONNECTED, as for the DAT posts.  kdat_mr_alloc() and kdat_mr_free()
 * sleep.
 */

/**
 * struct kdat_completion - how a block I/O post ended, for its done()
 * @dto_status: KDAT_DAT_DTO_* (KDAT_DAT_DTO_SUCCESS, KDAT_DAT_DTO_ERR_FLUSHED, ...):
 *	of the first failed work request of the post, if any
 * @byte_len: a receive's bytes received; a request's bytes as posted
 * @invalidated_rkey: a receive that ended a registration (%KDAT_SGL_SEND_INV):
 *	its rkey; otherwise 0
 */
struct kdat_completion {
	u32 dto_status;
	u32 byte_len;
	u32 invalidated_rkey;
};

/**
 * struct kdat_cqe - the caller's completion entry of one block I/O post
 * @done: called once when the post completed (see "kdat block I/O")
 * @ib: kdat's while posted
 * @length: kdat's while posted: the post's bytes
 * @recv: kdat's while posted: a receive
 * @parts: kdat's while posted: work requests of the post not completed yet
 * @wc_status: kdat's while posted: the first failed part's status, else
 *	IB_WC_SUCCESS
 *
 * The caller sets @done and owns the entry again once @done has run.
 */
struct kdat_cqe {
	void (*done)(struct kdat_cqe *cqe, const struct kdat_completion *c);
	struct ib_cqe ib;
	u32 length;
	u8 recv;
	atomic_t parts;
	u32 wc_status;
};

/**
 * struct kdat_sgl - a scatterlist mapped for an IA's device (kdat_sgl_map())
 * @sg: the scatterlist
 * @nents: the scatterlist's entries
 * @dma_nents: its DMA segments, once mapped (0 when not mapped)
 * @length: its bytes
 * @dir: the DMA direction it is mapped for
 */
struct kdat_sgl {
	struct scatterlist *sg;
	u32 nents;
	int dma_nents;
	u32 length;
	enum dma_data_direction dir;
};

/**
 * enum kdat_sgl_op - what kdat_ep_post_sgl() posts
 * @KDAT_SGL_SEND: a send
 * @KDAT_SGL_SEND_INV: a send that also ends the peer's registration of an rkey
 * @KDAT_SGL_RDMA_WRITE: an RDMA write of the local pages to the peer
 * @KDAT_SGL_RDMA_READ: an RDMA read of the peer's memory into the local pages
 */
enum kdat_sgl_op {
	KDAT_SGL_SEND,
	KDAT_SGL_SEND_INV,
	KDAT_SGL_RDMA_WRITE,
	KDAT_SGL_RDMA_READ,
};

struct kdat_mr;		/* a fast-registration memory region, one request at a time */

/**
 * kdat_sgl_map() - DMA-map a scatterlist for an IA's device
 * @ia: the IA
 * @sgl: filled in: the mapping, for the posts and kdat_sgl_unmap()
 * @sg: the scatterlist
 * @nents: its entries, at least 1
 * @dir: the DMA direction (DMA_TO_DEVICE for what is sent or RDMA-written, ...)
 *
 * Context: Process, softirq or blk-mq (atomic) context; does not sleep.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG2): @sgl or @sg is NULL, @nents is
 *   0, or @dir is invalid;
 * * DAT_INVALID_STATE: the IA's device is gone;
 * * DAT_INSUFFICIENT_RESOURCES (DAT_RESOURCE_MEMORY_REGION): the mapping failed.
 */
kdat_ret_t kdat_sgl_map(struct kdat_ia *ia, struct kdat_sgl *sgl, struct scatterlist *sg,
			u32 nents, enum dma_data_direction dir);

/**
 * kdat_sgl_unmap() - unmap a scatterlist kdat_sgl_map() mapped
 * @ia: the IA it was mapped for
 * @sgl: the mapping, in no posted request; unmapped (dma_nents 0) on return
 *
 * Does nothing once the IA's device is gone (the removal took the mapping).
 *
 * Context: Process, softirq or blk-mq (atomic) context; does not sleep.
 */
void kdat_sgl_unmap(struct kdat_ia *ia, struct kdat_sgl *sgl);

/**
 * kdat_sgl_sync_for_cpu() - make what the device wrote into the pages visible to the CPU
 * @ia: the IA it was mapped for
 * @sgl: the mapping
 *
 * Before the CPU reads what the device wrote.  Does nothing for a device that
 * maps by virtual address (rxe, siw), or once the IA's device is gone.
 *
 * Context: Process, softirq or blk-mq (atomic) context; does not sleep.
 */
void kdat_sgl_sync_for_cpu(struct kdat_ia *ia, struct kdat_sgl *sgl);

/**
 * kdat_sgl_sync_for_device() - hand the pages back to the device
 * @ia: the IA it was mapped for
 * @sgl: the mapping
 *
 * Before the device reads what the CPU wrote.  Does nothing for a device that
 * maps by virtual address (rxe, siw), or once the IA's device is gone.
 *
 * Context: Process, softirq or blk-mq (atomic) context; does not sleep.
 */
void kdat_sgl_sync_for_device(struct kdat_ia *ia, struct kdat_sgl *sgl);

/**
 * kdat_ep_post_sgl() - post a send or an RDMA operation of mapped pages
 * @ep: the EP, CONNECTED
 * @op: what to post
 * @sgl: the local pages (mapped for @ep's IA), or NULL for a send without data
 * @cqe: the caller's entry, with its done() set; the caller's again once
 *	done() ran
 * @remote_addr: RDMA: the peer's address
 * @rkey: RDMA: the peer's key; %KDAT_SGL_SEND_INV: the key whose
 *	registration the peer ends
 *
 * An RDMA operation with more segments than one work request takes goes as
 * several over consecutive remote ranges; done() runs once, after the last.
 * If only some of them could be posted, the call still succeeds while any of
 * them is outstanding, and done() reports the failure.
 *
 * Context: Process, softirq or blk-mq (atomic) context; does not sleep.  Not
 * from an upcall.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG2): @cqe or its done() is NULL,
 *   or @op is unknown;
 * * DAT_INVALID_STATE (the EP's state): the EP is not CONNECTED, is being
 *   freed, or being flushed;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG1): an RDMA read on an EP whose
 *   ORD is 0;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG3): RDMA without @sgl, @sgl not
 *   mapped, or a send with more segments than max_request_iov;
 * * DAT_INSUFFICIENT_RESOURCES (DAT_RESOURCE_TEP): the send queue is full.
 */
kdat_ret_t kdat_ep_post_sgl(struct kdat_ep *ep, enum kdat_sgl_op op, struct kdat_sgl *sgl,
			    struct kdat_cqe *cqe, u64 remote_addr, u32 rkey);

/**
 * kdat_ep_post_recv_sgl() - post a receive into mapped pages
 * @ep: the EP
 * @sgl: the pages (mapped for @ep's IA), or NULL for a receive without data
 * @cqe: the caller's entry, with its done() set; the caller's again once
 *	done() ran
 *
 * Context: Process, softirq or blk-mq (atomic) context; does not sleep.  Not
 * from an upcall.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG2): @cqe or its done() is NULL;
 * * DAT_INVALID_STATE (the EP's state): the EP is DISCONNECTED, being freed,
 *   or being flushed;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG3): @sgl is not mapped, or has
 *   more segments than max_recv_iov;
 * * DAT_INSUFFICIENT_RESOURCES (DAT_RESOURCE_TEP): the receive queue is full.
 */
kdat_ret_t kdat_ep_post_recv_sgl(struct kdat_ep *ep, struct kdat_sgl *sgl, struct kdat_cqe *cqe);

/**
 * kdat_mr_alloc() - allocate a fast-registration memory region
 * @ia: the IA
 * @max_pages: the most pages one registration of it covers, 1..the device's
 *	fast registration page list length
 * @mr: the new MR, on success
 *
 * Context: Process context; sleeps.  Not from an upcall or a done() callback.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG2): @max_pages is 0 or too large;
 * * DAT_INVALID_STATE: the IA is being closed or its device is gone;
 * * DAT_INSUFFICIENT_RESOURCES (DAT_RESOURCE_MEMORY, or
 *   DAT_RESOURCE_MEMORY_REGION: the device's MR).
 */
kdat_ret_t kdat_mr_alloc(struct kdat_ia *ia, u32 max_pages, struct kdat_mr **mr);

/**
 * kdat_mr_free() - free an MR
 * @mr: the MR
 *
 * Only once no registration of it is posted: after its request completed, or
 * the EP was freed.
 *
 * Context: Process context; sleeps.  Not from an upcall or a done() callback.
 */
void kdat_mr_free(struct kdat_mr *mr);

/**
 * kdat_ep_post_reg_mr() - register mapped pages for the peer, with a new key
 * @ep: the EP, CONNECTED
 * @mr: an MR of @ep's IA, with no registration in use
 * @sgl: the pages (mapped for @ep's IA)
 * @access: what the peer may do: %KDAT_RMR_REMOTE_READ, %KDAT_RMR_REMOTE_WRITE
 * @rkey: the key the peer uses, on success
 * @addr: the address the peer uses, on success
 *
 * Unsignaled: it has no completion of its own, and a later post on the EP is
 * ordered after it (a failed registration fails that post too).
 *
 * Context: Process, softirq or blk-mq (atomic) context; does not sleep.  Not
 * from an upcall.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG2): @mr or @sgl is NULL, @sgl is
 *   not mapped, @mr is another IA's, or @access has an unknown bit;
 * * DAT_INVALID_STATE (the EP's state): the EP is not CONNECTED, is being
 *   freed or flushed, or the IA's device is gone;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG3): the pages do not fit @mr (more
 *   than its max_pages, or a gap inside a page);
 * * DAT_INSUFFICIENT_RESOURCES (DAT_RESOURCE_TEP): the send queue is full.
 */
kdat_ret_t kdat_ep_post_reg_mr(struct kdat_ep *ep, struct kdat_mr *mr, struct kdat_sgl *sgl,
			       u32 access, u32 *rkey, u64 *addr);

/**
 * kdat_ep_post_local_inv() - end an MR's registration from this side
 * @ep: the EP, CONNECTED
 * @mr: the MR, of @ep's IA
 * @cqe: the caller's entry, with its done() set; the caller's again once
 *	done() ran
 *
 * Context: Process, softirq or blk-mq (atomic) context; does not sleep.  Not
 * from an upcall.
 * Return:
 * * %KDAT_DAT_SUCCESS: done;
 * * DAT_INVALID_PARAMETER (DAT_INVALID_ARG2): @mr or @cqe (or its done()) is
 *   NULL, or @mr is another IA's;
 * * DAT_INVALID_STATE (the EP's state): the EP is not CONNECTED, is being
 *   freed or flushed, or the IA's device is gone;
 * * DAT_INSUFFICIENT_RESOURCES (DAT_RESOURCE_TEP): the send queue is full.
 */
kdat_ret_t kdat_ep_post_local_inv(struct kdat_ep *ep, struct kdat_mr *mr, struct kdat_cqe *cqe);

#endif /* KDAT_KDAT_H */
