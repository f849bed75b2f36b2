/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kdat in-kernel API (kDAPL style) for storage and filesystem drivers.
 *
 * Every call returns a DAT_RETURN (kdat_ret_t: class | type | subtype, the
 * KDAT_DAT_* values of <kdat/uapi/kdat_dat.h>); KDAT_DAT_SUCCESS is 0.  Objects are
 * opaque.  The endpoint state machine is include/kdat/ep_table.h.
 *
 * Context: every call may sleep (process context) except where noted.
 *
 * Upcalls (kdat_upcall_t) run in process context, in whichever thread queued
 * the event, and they run under kdat's locks:
 *  - an EP's connection event: that EP's lock, in an rdma_cm handler (which
 *    also holds the id's handler mutex), kdat's timeout or graceful-disconnect
 *    work, or the consumer's own call on the EP;
 *  - a connection request: the IA owner's lock and the listening id's
 *    handler mutex;
 *  - a completion (DTO EVDs): the work of the CQ the EP shares with other EPs
 *    of its IA, which kdat's disconnect and free of any of those EPs wait
 *    for (ib_drain_qp) while holding that EP's lock.
 * So an upcall makes no kdat call at all (every call may take one of those
 * locks or wait for the upcall's own thread), and waits for no lock of the
 * consumer's that is held across a kdat call: it wakes or queues work of its
 * own, and that work dequeues, posts, accepts or disconnects.
 *
 * Objects are pointers: once freed (by the consumer, or a CR by its accept
 * or reject, or a provider-created EP by its CR's reject) they must not be
 * passed again; the DAT rule that a stale handle "fails" holds for the
 * /dev/kdat handles, which are checked.
 *
 * Lifetime: an IA owns everything created on it; kdat_ia_close(ABRUPT) frees
 * it all (connected EPs are disconnected).  If the RDMA device goes away, the
 * IA's EPs get their connection events (BROKEN, NON_PEER_REJECTED, ...) and
 * later calls fail with DAT_INVALID_STATE; the consumer still frees its objects.
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

typedef u32 kdat_ret_t;

struct kdat_ia;
struct kdat_evd;
struct kdat_ep;
struct kdat_sp;		/* a PSP or an RSP */
struct kdat_cr;
struct kdat_lmr;	/* a kernel buffer registered for DMA */
struct kdat_rmr;	/* a window the peer may RDMA to/from */

/* One piece of a local buffer for a data transfer request. */
struct kdat_iov {
	struct kdat_lmr *lmr;
	u64 offset;
	u32 length;
};

/* rmr_bind access */
#define KDAT_RMR_REMOTE_READ	(1u << 0)
#define KDAT_RMR_REMOTE_WRITE	(1u << 1)
#define KDAT_MAX_IOV		8

#define KDAT_ERR(type, subtype)	(KDAT_DAT_CLASS_ERROR | (type) | (subtype))
#define KDAT_RET_TYPE(ret)	((ret) & KDAT_DAT_TYPE_MASK)

/* What an IA reports (ia_query). */
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
	u32 max_rdma_read_iov;	/* local segments one RDMA read takes (1 on iWARP) */
};

/* One event.  Object pointers are NULL where they do not apply. */
struct kdat_event_info {
	u32 number;			/* DAT_EVENT_NUMBER */
	struct kdat_evd *evd;
	struct kdat_ep *ep;
	struct kdat_sp *sp;
	struct kdat_cr *cr;
	u32 dto_status;
	u64 cookie;
	u32 transfered_length;
	u32 private_data_size;
	u8 private_data[KDAT_PRIVATE_DATA_MAX];
	/* a UD exchange's peer (user QPs only: /dev/kdat's UD EPs); zero otherwise */
	struct kdat_event_ud ud;
};

/* What an EP reports (ep_query). */
struct kdat_ep_info {
	u32 state;			/* DAT_EP_STATE */
	struct kdat_ep_attr attr;	/* IRD/ORD negotiated once connected */
	struct sockaddr_storage local_addr;
	struct sockaddr_storage remote_addr;
	u64 transitions;
};

/* A connection request (cr_query). */
struct kdat_cr_info {
	struct kdat_sp *sp;
	struct kdat_ep *ep;		/* the EP the CR names, or NULL */
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

/* Called each time an event is queued; the locks it runs under are listed at the top. */
typedef void (*kdat_upcall_t)(struct kdat_evd *evd, void *context);

kdat_ret_t __kdat_ia_open(struct net *net, const char *name, u32 flags, struct kdat_ia **ia,
			  const char *owner);
/*
 * Opens an IA of its own for the calling module, which the shared table names.
 * name (a netdev or an IP literal), and every address and id of the IA, are
 * in net: kdat_ia_open_net() names the namespace (kdat holds a reference while
 * the IA lives), kdat_ia_open() means the initial one.  flags: KDAT_IA_* of
 * <kdat/uapi/kdat.h>; KDAT_IA_PDATA_RAW makes the IA's private data byte-exact
 * with plain rdma_cm peers (no kdat header; what arrives is the transport's
 * whole field), for drivers that speak an existing wire protocol.
 */
#define kdat_ia_open_flags(net, name, flags, ia) \
	__kdat_ia_open(net, name, flags, ia, KBUILD_MODNAME)
#define kdat_ia_open_net(net, name, ia)	__kdat_ia_open(net, name, 0, ia, KBUILD_MODNAME)
#define kdat_ia_open(name, ia)		__kdat_ia_open(&init_net, name, 0, ia, KBUILD_MODNAME)
kdat_ret_t kdat_ia_close(struct kdat_ia *ia, u32 flags);
kdat_ret_t kdat_ia_query(struct kdat_ia *ia, struct kdat_ia_info *info);
/*
 * The IA's connection counters, KDAT_IA_COUNTERS order (<kdat/uapi/kdat_counters.h>),
 * into values[0..count); values past KDAT_IA_NR_COUNTERS are set to 0.  Any context.
 */
void kdat_ia_counters(struct kdat_ia *ia, u64 *values, u32 count);

kdat_ret_t kdat_evd_create(struct kdat_ia *ia, u32 qlen, u32 flags,
			   kdat_upcall_t upcall, void *context,
			   struct kdat_evd **evd);
kdat_ret_t kdat_evd_free(struct kdat_evd *evd);
/* Interruptible; timeout in µs or KDAT_TIMEOUT_INFINITE. */
kdat_ret_t kdat_evd_wait(struct kdat_evd *evd, u32 timeout_us, u32 threshold,
			 struct kdat_event_info *event, u32 *nmore);
/* Any context. */
kdat_ret_t kdat_evd_dequeue(struct kdat_evd *evd, struct kdat_event_info *event,
			    u32 *nmore);

/*
 * The EVDs must be ia's.  (Through /dev/kdat, the connect EVD may be another
 * IA's of the same file, as DAT allows; an IA opened here is its own owner.)
 */
kdat_ret_t kdat_ep_create(struct kdat_ia *ia, struct kdat_evd *connect_evd,
			  struct kdat_evd *request_evd, struct kdat_evd *recv_evd,
			  const struct kdat_ep_attr *attr, struct kdat_ep **ep);
/*
 * Frees a connected (or DISCONNECT_PENDING) EP as an abrupt disconnect would
 * end it: its flushed requests, then DISCONNECTED on its connect EVD, whose
 * ep names the freed EP (compare it, never use it), as DAPL's dat_ep_free.
 */
kdat_ret_t kdat_ep_free(struct kdat_ep *ep);
kdat_ret_t kdat_ep_query(struct kdat_ep *ep, struct kdat_ep_info *info);
kdat_ret_t kdat_ep_modify(struct kdat_ep *ep, u32 mask,
			  const struct kdat_ep_attr *attr);
kdat_ret_t kdat_ep_reset(struct kdat_ep *ep);
kdat_ret_t kdat_ep_connect(struct kdat_ep *ep, const struct sockaddr *remote,
			   u64 conn_qual, u32 timeout_us,
			   const void *private_data, s32 private_data_size,
			   u32 qos, u32 flags);
kdat_ret_t kdat_ep_dup_connect(struct kdat_ep *ep, struct kdat_ep *dup_ep,
			       u32 timeout_us, const void *private_data,
			       s32 private_data_size, u32 qos);
kdat_ret_t kdat_ep_disconnect(struct kdat_ep *ep, u32 flags);

kdat_ret_t kdat_psp_create(struct kdat_ia *ia, u64 conn_qual,
			   struct kdat_evd *evd, u32 flags, struct kdat_sp **psp);
kdat_ret_t kdat_rsp_create(struct kdat_ia *ia, u64 conn_qual,
			   struct kdat_ep *ep, struct kdat_evd *evd,
			   struct kdat_sp **rsp);
/* Frees a PSP or an RSP; pending CRs stay valid. */
kdat_ret_t kdat_sp_free(struct kdat_sp *sp);

kdat_ret_t kdat_cr_query(struct kdat_cr *cr, struct kdat_cr_info *info);
kdat_ret_t kdat_cr_accept(struct kdat_cr *cr, struct kdat_ep *ep,
			  const void *private_data, s32 private_data_size);
kdat_ret_t kdat_cr_reject(struct kdat_cr *cr, const void *private_data,
			  s32 private_data_size);

/*
 * Data transfer on kernel EPs.  Completions are DAT_DTO_COMPLETION_EVENTs on
 * the EP's request EVD (send, RDMA write/read) or receive EVD, carrying the
 * cookie, DAT_DTO_* status and length; RMR binds complete with a
 * DAT_RMR_BIND_COMPLETION_EVENT on the request EVD.  Posts are legal in the
 * states the table allows (seed 001: no sends in DISCONNECT_PENDING); on
 * disconnect outstanding requests complete as flushed, and every completion
 * is queued before the EP's DISCONNECTED event.  Posting may be done from
 * process or softirq context; it never sleeps.
 *
 * Seed 004: over iWARP the active side sends the first message.  On an
 * accepted EP of an iWARP device every send-queue post (send, RDMA, bind,
 * kdat_ep_post_sgl and friends) is held until the EP's first receive
 * completes, then posted in order; after 1 s without one it is posted anyway,
 * and if the connection ends first it completes flushed.  A held post has
 * returned success and counts as outstanding.  Nothing is held on RoCE/IB or
 * on an EP that connected actively.
 */
/* buf: kmalloc'ed (physically contiguous) memory that outlives the LMR. */
kdat_ret_t kdat_lmr_create(struct kdat_ia *ia, void *buf, u64 length,
			   struct kdat_lmr **lmr);
kdat_ret_t kdat_lmr_free(struct kdat_lmr *lmr);
/* Sync a buffer the device wrote to before the CPU reads it (and back). */
void kdat_lmr_sync_for_cpu(struct kdat_lmr *lmr);
void kdat_lmr_sync_for_device(struct kdat_lmr *lmr);
kdat_ret_t kdat_rmr_create(struct kdat_ia *ia, struct kdat_rmr **rmr);
/* Binds on a CONNECTED EP; rmr_context and target_address are what the peer uses. */
kdat_ret_t kdat_rmr_bind(struct kdat_rmr *rmr, struct kdat_ep *ep,
			 const struct kdat_iov *iov, u32 access, u64 cookie,
			 u32 *rmr_context, u64 *target_address);
kdat_ret_t kdat_rmr_free(struct kdat_rmr *rmr);

kdat_ret_t kdat_ep_post_recv(struct kdat_ep *ep, const struct kdat_iov *iov,
			     u32 n_iov, u64 cookie);
kdat_ret_t kdat_ep_post_send(struct kdat_ep *ep, const struct kdat_iov *iov,
			     u32 n_iov, u64 cookie);
kdat_ret_t kdat_ep_post_rdma_write(struct kdat_ep *ep, const struct kdat_iov *iov,
				   u32 n_iov, u64 cookie, u64 target_address,
				   u32 rmr_context);
kdat_ret_t kdat_ep_post_rdma_read(struct kdat_ep *ep, const struct kdat_iov *iov,
				  u32 n_iov, u64 cookie, u64 target_address,
				  u32 rmr_context);

/*
 * Block I/O: a request's pages as a scatterlist, registered per request,
 * completed by a callback.  The DAT calls above carry DAT's model (LMRs,
 * cookies, events on EVDs); a storage driver needs less per request:
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
 *   when the peer answers with KDAT_SGL_SEND_INV (the receive's completion
 *   names the invalidated rkey) or with kdat_ep_post_local_inv().
 * - Every post names a struct kdat_cqe that the caller owns until its done()
 *   has run.  done() runs in the polling context of the CQ the EP shares
 *   with other EPs of its IA (a workqueue, so it may not sleep for long),
 *   without any kdat lock, once per post (a flush error when the connection
 *   ended, or when the EP is freed), and may post again; it must not call
 *   kdat's sleeping calls (kdat_mr_free, kdat_ep_* other than the posts) nor
 *   wait for a lock held across them: kdat may be waiting, under its locks,
 *   for it to return (a disconnect, free or device removal of any EP on that
 *   CQ drains its QP).
 *
 * Once the IA's device is gone, kdat_sgl_unmap and the syncs do nothing and
 * registrations are refused; the removal released the device's side of the
 * IA's MRs (as of its LMRs and RMRs), and the consumer still frees them with
 * kdat_mr_free() (kdat_lmr_free(), kdat_rmr_free()), or kdat_ia_close() does.
 *
 * kdat_sgl_map/unmap and every kdat_ep_post_* here may be called from
 * process, softirq or blk-mq (atomic) context: they never sleep.  Posts are
 * refused (DAT_INVALID_STATE) where the state table refuses a send or a
 * receive; a disconnect flushes outstanding ones before DISCONNECTED, as
 * for the DAT posts.  kdat_mr_alloc() and kdat_mr_free() sleep.
 */
struct kdat_completion {
	u32 dto_status;		/* KDAT_DAT_DTO_* (DAT_DTO_SUCCESS, ..._ERR_FLUSHED, ...) */
	u32 byte_len;		/* a receive's bytes; a request's as posted */
	u32 invalidated_rkey;	/* a receive that ended a registration (SEND_INV), else 0 */
};

struct kdat_cqe {
	void (*done)(struct kdat_cqe *cqe, const struct kdat_completion *c);
	/* kdat's, while posted */
	struct ib_cqe ib;
	u32 length;
	u8 recv;
	atomic_t parts;		/* work requests of the post not completed yet */
	u32 wc_status;		/* the first failed part's, else IB_WC_SUCCESS */
};

struct kdat_sgl {
	struct scatterlist *sg;
	u32 nents;		/* the scatterlist's entries */
	int dma_nents;		/* its DMA segments, once mapped */
	u32 length;		/* bytes */
	enum dma_data_direction dir;
};

enum kdat_sgl_op {
	KDAT_SGL_SEND,
	KDAT_SGL_SEND_INV,	/* a send that also ends the peer's registration rkey */
	KDAT_SGL_RDMA_WRITE,
	KDAT_SGL_RDMA_READ,
};

struct kdat_mr;		/* a fast-registration memory region, one request at a time */

kdat_ret_t kdat_sgl_map(struct kdat_ia *ia, struct kdat_sgl *sgl, struct scatterlist *sg,
			u32 nents, enum dma_data_direction dir);
void kdat_sgl_unmap(struct kdat_ia *ia, struct kdat_sgl *sgl);
/* Before the CPU reads what the device wrote into the pages, and before the device reads the CPU's. */
void kdat_sgl_sync_for_cpu(struct kdat_ia *ia, struct kdat_sgl *sgl);
void kdat_sgl_sync_for_device(struct kdat_ia *ia, struct kdat_sgl *sgl);
/* sgl may be NULL for a send without data; rkey: the peer's (RDMA) or the one to end (SEND_INV) */
kdat_ret_t kdat_ep_post_sgl(struct kdat_ep *ep, enum kdat_sgl_op op, struct kdat_sgl *sgl,
			    struct kdat_cqe *cqe, u64 remote_addr, u32 rkey);
kdat_ret_t kdat_ep_post_recv_sgl(struct kdat_ep *ep, struct kdat_sgl *sgl, struct kdat_cqe *cqe);
kdat_ret_t kdat_mr_alloc(struct kdat_ia *ia, u32 max_pages, struct kdat_mr **mr);
/* Only once no registration of it is posted: after its request completed, or the EP was freed. */
void kdat_mr_free(struct kdat_mr *mr);
/*
 * Registers sgl's pages in mr for the peer (access: KDAT_RMR_REMOTE_*) with a
 * new key: *rkey and *addr are what the peer uses.  Unsignaled; a later post
 * on the EP is ordered after it.
 */
kdat_ret_t kdat_ep_post_reg_mr(struct kdat_ep *ep, struct kdat_mr *mr, struct kdat_sgl *sgl,
			       u32 access, u32 *rkey, u64 *addr);
kdat_ret_t kdat_ep_post_local_inv(struct kdat_ep *ep, struct kdat_mr *mr, struct kdat_cqe *cqe);

#endif /* KDAT_KDAT_H */
