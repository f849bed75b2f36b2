/* SPDX-License-Identifier: GPL-2.0 */
/* kdat.ko internals shared between its compilation units. */
#ifndef KDAT_PRIV_H
#define KDAT_PRIV_H

#include <linux/hrtimer.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/wait.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>
#include <rdma/ib_cm.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>
#include <kdat/kdat.h>
#include "kdat_cm.h"

/*
 * Locking, in the order it must be taken:
 *   rdma_cm handler mutex (held around every CM event upcall, and taken with
 *     rdma_lock_handler() by cr_accept/cr_reject)
 *   -> ctx->lock: every object of one owner (an open file, or one kernel IA),
 *      their states, lists and handles
 *   -> evd->lock (spinlock): the event queue of one EVD
 *   -> kdat_devices_lock (only from ia open/close and device removal)
 * Taken with none of the above held:
 *   kdat_tables_lock (kdat_table.c): the list of shared tables; innermost.
 * The shared table of a ctx is written only under its ctx->lock (one writer
 * per seqcount); an event ring only under its EVD's evd->lock.
 * rdma_destroy_id() waits for running handlers, so it is never called with
 * ctx->lock held: ids are detached under the lock and destroyed after it.
 * The same wait lets a handler (or cr_accept, holding the handler mutex)
 * send its REQ/REP/RTU/DREP after dropping ctx->lock: the id outlives it.
 * QP state changes stay under ctx->lock: once an EP is killed,
 * kdat_ep_finish() may free its QP without waiting for any handler.
 *
 * Lifetime: every object has a kref.  The owner's handle table holds one
 * reference, each in-flight call holds one, an rdma_cm id holds one on its
 * context object.  The last put defers the teardown to kdat_wq, so a put is
 * legal anywhere, handlers included.
 */

enum kdat_obj_type {
	KDAT_OBJ_IA = 1,
	KDAT_OBJ_EVD,
	KDAT_OBJ_EP,
	KDAT_OBJ_SP,
	KDAT_OBJ_CR,
	KDAT_OBJ_ORPHAN,	/* an id left behind by an EP (kdat_core.c) */
};

struct kdat_ctx;

struct kdat_obj {
	enum kdat_obj_type type;
	u32 handle;		/* in ctx->objs; 0 once freed */
	struct kdat_ctx *ctx;
	struct kref ref;
	bool dead;		/* freed by the consumer (or its IA closed) */
	struct work_struct release_work;
	/* for the shared table (ctx->lock) */
	u64 created_ns, changed_ns;
	u32 last_event, events;
};

struct kdat_table;
struct kdat_ring;
struct kdat_uqp;

/* The owner of a set of objects and their handles. */
struct kdat_ctx {
	struct mutex lock;
	struct xarray objs;	/* slot -> struct kdat_obj * */
	struct list_head ias;	/* struct kdat_ia.ctx_node */
	struct kref ref;
	struct kdat_table *table;	/* the records of objs, shared read-only */
	struct kdat_table *view;	/* another owner's table (TABLE_ATTACH), or NULL */
	struct net *net;		/* where names, addresses and ids live (referenced) */
};

/* One RDMA device kdat has been told about by ib_core (ib_client add). */
struct kdat_device {
	struct ib_device *ibdev;
	struct list_head node;		/* in kdat_devices */
	struct list_head ias;		/* struct kdat_ia.dev_node */
};

struct kdat_ia {
	struct kdat_obj obj;
	struct list_head ctx_node;
	struct list_head dev_node;	/* under kdat_devices_lock */
	struct kdat_device *kdev;	/* NULL once the device is gone */
	struct ib_device *ibdev;
	u32 port_num;
	struct ib_pd *pd;
	const struct kdat_cm_ops *cm;	/* kdat_cm_rdma, or a KUnit fake */
	struct sockaddr_storage addr;
	char netdev_name[KDAT_NAME_MAX];
	struct list_head evds, eps, sps, crs;
	struct list_head lmrs, rmrs;		/* kernel consumers' memory */
	bool removed;			/* the device went away */
	bool closing;			/* ia_close or teardown began: no new objects */
	/*
	 * QPs/CQs being created or released outside ctx->lock (EPs being made
	 * or killed but not yet finished): the PD waits for them.
	 */
	atomic_t eps_finishing;
	wait_queue_head_t finish_wq;
	bool own_ctx;			/* a kernel consumer's private ctx */
};

struct kdat_evd {
	struct kdat_obj obj;
	struct kdat_ia *ia;
	struct list_head ia_node;
	u32 flags;
	u32 qlen;
	spinlock_t lock;		/* events, count, lost, waiters */
	struct list_head events;
	u32 count;
	u32 lost;			/* events that could not be queued */
	u32 waiters;
	u32 users;			/* EPs and SPs posting to it (ctx->lock) */
	wait_queue_head_t wq;
	kdat_upcall_t upcall;
	void *upcall_context;
	struct kdat_ring *ring;		/* set once (under lock), freed with the EVD */
};

/* An event waiting in an EVD's queue, holding references on what it names. */
struct kdat_qevent {
	struct list_head node;
	struct kdat_event_info info;
};

/*
 * An IPv4 or IPv6 socket address: all an EP needs to keep, at 28 bytes
 * rather than sockaddr_storage's 128 (a kernel consumer may hold thousands
 * of EPs).
 */
union kdat_sockaddr {
	struct sockaddr sa;
	struct sockaddr_in in;
	struct sockaddr_in6 in6;
};

/*
 * The most connect private data there is (the REQ's field less rdma_cm's
 * header and kdat's, see kdat_core.c): what an EP keeps from connect until
 * its REQ goes out.
 */
#define KDAT_PDATA_HDR		KDAT_PRIVATE_DATA_HEADER
#define KDAT_IB_CONNECT_PDATA	(IB_CM_REQ_PRIVATE_DATA_SIZE - 36 - KDAT_PDATA_HDR)

struct kdat_ep {
	struct kdat_obj obj;
	struct kdat_ia *ia;
	/* ia->cm, for destroying an id after unlocking, when the IA may be gone */
	const struct kdat_cm_ops *cm;
	struct list_head ia_node;
	u32 state;			/* changed only by kdat_ep_step() */
	u64 transitions;
	struct kdat_evd *connect_evd, *request_evd, *recv_evd;
	struct kdat_ep_attr attr;	/* requested attributes */
	u32 ird, ord;			/* negotiated when connected */
	struct ib_cq *cq;
	struct ib_qp *qp;
	struct rdma_cm_id *cm_id;	/* the connection's id, or NULL */
	bool active;			/* this EP connected actively */
	bool provider_created;		/* made by a provider-flag PSP */
	struct kdat_sp *rsp;		/* the RSP reserving it */
	/* what the active side asked for, for the route/connect steps and dup_connect */
	union kdat_sockaddr remote_addr;
	union kdat_sockaddr local_addr;
	u64 conn_qual;
	u32 connect_flags;
	u8 private_data[KDAT_IB_CONNECT_PDATA];
	u8 private_data_size;
	struct kdat_ep_timer *timer;	/* the pending connect timeout, or NULL */
	/* data transfer (kdat_dto.c): per-request contexts, preallocated */
	spinlock_t wr_lock;		/* the free lists */
	struct kdat_wr *wrs;		/* max_request_dtos sends, then max_recv_dtos receives */
	struct kdat_wr *send_free, *recv_free;
	atomic_t sends_in_flight;	/* sends, RDMA and RMR binds not yet completed */
	bool ever_posted;		/* a request was posted: a flush must drain */
	bool graceful_pending;		/* DISCONNECT_PENDING waits for sends_in_flight == 0 */
	bool dreq_pending;		/* our DREQ went out, its DISCONNECTED has not come */
	/*
	 * kdat moved the QP to ERR and not out of it since: another ERR would
	 * only make the driver schedule its flush work again (ctx->lock).
	 */
	bool qp_err;
	struct work_struct graceful_work;
	/* a userspace QP instead of qp/cq (kdat_uqp.c), set at creation; NULL for kernel QPs */
	struct kdat_uqp *uqp;
};

/*
 * One posted request's completion context: 32 bytes, so the default 16 + 16
 * fill one 1 KiB slab object.  Its EP is the CQ's context.
 */
struct kdat_wr {
	struct ib_cqe cqe;
	union {
		struct kdat_wr *next_free;	/* on a free list */
		struct kdat_rmr *rmr;		/* posted KDAT_WR_BIND */
	};
	u64 cookie;
	u32 length;
	u8 kind;			/* KDAT_WR_* */
};

enum { KDAT_WR_SEND, KDAT_WR_RDMA_WRITE, KDAT_WR_RDMA_READ, KDAT_WR_RECV, KDAT_WR_BIND };

/* A kernel buffer mapped for DMA on the IA's device (kernel consumers only). */
struct kdat_lmr {
	struct kdat_ia *ia;
	struct list_head ia_node;
	void *buf;
	u64 length;
	u64 dma;
};

/* A memory window for the peer: a fast-registration MR bound through an EP. */
struct kdat_rmr {
	struct kdat_ia *ia;
	struct list_head ia_node;
	struct ib_mr *mr;
	u32 max_pages;
	bool bound;
};

/* One connect attempt's timeout; it holds an EP reference until it has run. */
/*
 * The connect timeout: an hrtimer, because the timer wheel rounds a jiffies
 * timer up by as much as an eighth of its length (a 3 s timeout fired 0.22 s
 * late); its expiry queues the work that takes ctx->lock.
 */
struct kdat_ep_timer {
	struct hrtimer timer;
	struct work_struct work;
	struct kdat_ep *ep;
};

struct kdat_sp {
	struct kdat_obj obj;
	struct kdat_ia *ia;
	struct list_head ia_node;
	struct kdat_evd *evd;
	struct rdma_cm_id *listen_id;
	u64 conn_qual;
	u32 flags;			/* KDAT_PSP_* */
	struct kdat_ep *ep;		/* RSP: the reserved EP */
	bool is_rsp;
	bool rsp_used;			/* RSP: its one request has arrived */
};

struct kdat_cr {
	struct kdat_obj obj;
	struct kdat_ia *ia;
	struct list_head ia_node;
	struct kdat_sp *sp;
	struct kdat_ep *ep;		/* the EP it names, or NULL */
	struct rdma_cm_id *cm_id;	/* the passive child id, until accept/reject */
	bool remote_gone;		/* the requester gave up before our answer */
	bool busy;			/* an accept/reject owns cm_id right now */
	u32 remote_ird, remote_ord;
	u8 remote_retry_count, remote_rnr_retry_count, remote_flow_control;
	union kdat_sockaddr remote_addr;
	union kdat_sockaddr local_addr;
	u8 private_data[KDAT_PRIVATE_DATA_MAX];
	u8 private_data_size;
};

extern struct workqueue_struct *kdat_wq;

/* kdat_devices.c */
int kdat_devices_init(void);
void kdat_devices_exit(void);
unsigned int kdat_devices_count(void);
struct kdat_device *kdat_device_find(struct ib_device *ibdev);
extern struct mutex kdat_devices_lock;

/* kdat_table.c: the shared object table */
struct kdat_table *kdat_table_create(const char *kernel_owner);
void kdat_table_get(struct kdat_table *t);
void kdat_table_put(struct kdat_table *t);
void kdat_table_close(struct kdat_table *t);
u32 kdat_table_claim(struct kdat_table *t, u32 slot);
struct kdat_record *kdat_table_write_begin(struct kdat_table *t, u32 slot);
void kdat_table_write_end(struct kdat_table *t, struct kdat_record *rec, int live_delta);
int kdat_table_mmap(struct kdat_table *t, struct vm_area_struct *vma);
kdat_ret_t kdat_table_list(void __user *ubuf, u32 capacity, u32 *count);
kdat_ret_t kdat_table_find(u64 id, struct kdat_table **out);

/* kdat_ring.c: event rings (callers of the *_locked-style ones hold evd->lock) */
struct file *kdat_ring_attach(struct kdat_evd *evd, u32 handle, u32 *entries, u32 *map_size);
void kdat_ring_put(struct kdat_ring *r);
bool kdat_ring_fill(struct kdat_evd *evd, const struct kdat_event_info *info);
bool kdat_ring_ready(struct kdat_evd *evd, u32 threshold);
bool kdat_ring_take(struct kdat_evd *evd, struct kdat_event *out, u32 *nmore);
u32 kdat_ring_available(struct kdat_evd *evd);
u32 kdat_ring_entries(struct kdat_evd *evd);
void kdat_ring_kill(struct kdat_evd *evd);
void kdat_ring_wake(struct kdat_evd *evd);

/* kdat_core.c */
struct kdat_ctx *kdat_ctx_create(const char *kernel_owner, struct net *net);
void kdat_rec_sync(struct kdat_obj *obj);
void kdat_rec_sync_unlocked(struct kdat_obj *obj);
void kdat_event_to_user(struct kdat_event *out, const struct kdat_event_info *in);
kdat_ret_t kdat_evd_ring_wait(struct kdat_evd *evd, u32 timeout_us, u32 threshold,
			      struct kdat_event *out, u32 *nmore, u32 *available);
void kdat_ctx_destroy(struct kdat_ctx *ctx);
kdat_ret_t kdat_ia_open_in(struct kdat_ctx *ctx, const char *name,
			   struct kdat_ia **ia, u32 *handle);
kdat_ret_t kdat_evd_create_in(struct kdat_ia *ia, u32 qlen, u32 flags, kdat_upcall_t upcall,
			      void *context, struct kdat_evd **out, u32 *handle);
kdat_ret_t kdat_sp_create_in(struct kdat_ia *ia, u64 conn_qual, struct kdat_evd *evd,
			     u32 flags, struct kdat_ep *ep, struct kdat_sp **out, u32 *handle);
void kdat_ia_device_removed(struct kdat_ia *ia);
void kdat_orphans_reap(struct ib_device *ibdev);
ssize_t kdat_orphans_show(char *buf);
struct kdat_obj *kdat_obj_get(struct kdat_ctx *ctx, u32 handle,
			      enum kdat_obj_type type);
void kdat_obj_put(struct kdat_obj *obj);
u32 kdat_obj_handle(void *obj);
kdat_ret_t kdat_ia_close_in(struct kdat_ia *ia, u32 flags);
/* EVD waits that leave the event's object references to the caller. */
kdat_ret_t kdat_evd_wait_ref(struct kdat_evd *evd, u32 timeout_us, u32 threshold,
			     struct kdat_event_info *ev, u32 *nmore);
kdat_ret_t kdat_evd_dequeue_ref(struct kdat_evd *evd, struct kdat_event_info *ev,
				u32 *nmore);
void kdat_event_put_refs(struct kdat_event_info *info);
void kdat_evd_post(struct kdat_evd *evd, const struct kdat_event_info *info);

unsigned int kdat_ep_step(struct kdat_ep *ep, unsigned int stimulus,
			  const void *pdata, u32 pdata_len);
kdat_ret_t kdat_ep_check(struct kdat_ep *ep, unsigned int stimulus);
kdat_ret_t kdat_ep_create_in(struct kdat_ia *ia, struct kdat_evd *conn,
			     struct kdat_evd *req, struct kdat_evd *recv,
			     const struct kdat_ep_attr *attr, struct kdat_uqp *uqp,
			     struct kdat_ep **out, u32 *handle);
struct rdma_cm_id *kdat_ep_detach_id(struct kdat_ep *ep);

/*
 * The active connect that took id is still the EP's and pending: nothing
 * (timeout, disconnect, free) ended it while ctx->lock was dropped for a
 * send.  Caller holds ctx->lock.
 */
static inline bool kdat_ep_attempt_on(const struct kdat_ep *ep, const struct rdma_cm_id *id)
{
	return !ep->obj.dead && ep->cm_id == id && ep->state == KDAT_EP_ACTIVE_CONNECTION_PENDING;
}
void kdat_ep_destroy_id(struct kdat_ep *ep, struct rdma_cm_id *id);
void kdat_ep_accept_depths(struct kdat_ep *ep, struct kdat_cr *cr, u32 *ird, u32 *ord);

/* kdat_uqp.c: userspace QPs (kernel bypass) */
u32 kdat_ep_qpn(struct kdat_ep *ep);
bool kdat_uqp_qpn_in_use(struct kdat_ia *ia, struct kdat_uqp *uqp);
void kdat_uqp_rep_arrived(struct kdat_ep *ep, const u8 *pdata, u32 len);
void kdat_uqp_reset(struct kdat_ep *ep);
bool kdat_uqp_pinned(struct kdat_ep *ep);
void kdat_uqp_wait_unpinned(struct kdat_ep *ep);
kdat_ret_t kdat_uqp_create(struct kdat_ia *ia, struct kdat_evd *conn,
			   const struct kdat_ep_attr *attr, u32 qpn, u32 *handle);
kdat_ret_t kdat_uqp_attr(struct kdat_ep *ep, struct kdat_cr *cr, u32 qp_state,
			 struct kdat_uqp_attr *out);
kdat_ret_t kdat_uqp_establish(struct kdat_ep *ep, u32 flags);

/* kdat_dto.c */
int kdat_ep_dto_init(struct kdat_ep *ep, bool posts);
void kdat_ep_dto_exit(struct kdat_ep *ep);
void kdat_ep_flush(struct kdat_ep *ep);
void kdat_ep_send_dreq(struct kdat_ep *ep);
bool kdat_ep_graceful_ready(struct kdat_ep *ep);
void kdat_ia_free_memory(struct kdat_ia *ia);

/* kdat_uapi.c: conversions to and from include/uapi/kdat.h */
void kdat_addr_out(struct kdat_addr *out, const struct sockaddr *sa);
int kdat_addr_in(struct sockaddr_storage *ss, const struct kdat_addr *in);

/* kdat_ioctl.c */
int kdat_ioctl_init(void);
long kdat_ioctl(struct file *file, unsigned int cmd, unsigned long arg);

#endif /* KDAT_PRIV_H */
