/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kdat.ko's connection layer: endpoints, service points, connection
 * requests, orphaned ids, userspace QPs, the kernel data path and the IA's
 * life on its device, one file each, over the bottom layer (kdat_base.h).
 */
#ifndef KDAT_CONN_H
#define KDAT_CONN_H

#include <linux/completion.h>
#include <linux/hrtimer.h>
#include <linux/wait_bit.h>
#include <rdma/ib_cm.h>
#include <rdma/rdma_cm_ib.h>
#include "kdat_base.h"

#define KDAT_RESOLVE_TIMEOUT_MS	2000
/*
 * An address or route lookup that timed out is asked again this many times
 * (as DAPL's providers do): one lost ARP request or reply on a lossy wire must
 * not end a connect, and one 2 s lookup sees only two of the neighbour's
 * probes.  A hard error is UNREACHABLE at once; the connect's timer still
 * bounds the whole attempt.
 */
#define KDAT_RESOLVE_RETRIES	3
#define KDAT_DEFAULT_DTOS	16
#define KDAT_DEFAULT_IOV	1
/*
 * Transport retries of an EP that asks for none in particular: 6, not DAPL's
 * 7, because rxe takes 7 as "retry forever" (rxe_comp.c), so a send to a
 * peer that is gone never fails and a graceful disconnect waiting for it
 * never ends.  Hardware that counts 7 as 7 loses one retry (268 ms).
 */
#define KDAT_DEFAULT_RETRY_COUNT	6
#define KDAT_MAX_EPS		65536

/*
 * One address exchange of a UD EP (kdat_ud.c starts and ends it; kdat_uqp.c
 * ends what its EP leaves behind).
 */
struct kdat_ud_exchange {
	struct list_head node;		/* ep->uqp->ud_exchanges until it ends, under ep->lock */
	struct kdat_ep *ep;		/* holds a reference */
	struct rdma_cm_id *id;		/* its own RDMA_PS_UDP id; context: this exchange */
	struct delayed_work timeout;	/* the connect timeout, if finite */
	struct work_struct end;		/* destroys the id of an exchange ended by its EP */
	refcount_t ref;			/* the id's, and the timeout's while it is queued */
	union kdat_sockaddr remote;
	u8 wire[KDAT_PDATA_UD_WIRE_MAX];
	u8 wire_len;
};

/* A userspace QP's side of its EP (kdat_uqp.c). */
struct kdat_uqp {
	u32 qpn;			/* the process's QP; only ever sent to the peer */
	bool ud;			/* a UD QP: address exchanges, no connection (kdat_ud.c) */
	struct list_head ud_exchanges;	/* its active exchanges in flight, under ep->lock */
	bool rep_arrived;		/* active: REP in, waiting for UQP_ESTABLISH */
	bool establishing;		/* a UQP_ESTABLISH is at work (one at a time) */
	u8 rep_pdata[KDAT_PRIVATE_DATA_MAX];	/* the REP's, for ESTABLISHED */
	u32 rep_pdata_len;
};


struct kdat_ep {
	struct kdat_obj obj;
	/*
	 * The EP's own lock (kdat_base.h's lock order: inside ctx->lock and
	 * inside its id's handler mutex): its state and every field below
	 * that changes after creation, and its shared-table record.  The
	 * EP's CM handlers, its timer and its consumer's calls on it alone
	 * take only this; whatever also needs the owner's lists takes
	 * ctx->lock first.
	 */
	struct mutex lock;
	struct kdat_ia *ia;
	struct hlist_node qpn_node;	/* ctx->qpns while linked, under ctx->lock */
	/* ia->cm, for destroying an id after unlocking, when the IA may be gone */
	const struct kdat_cm_ops *cm;
	struct list_head ia_node;
	u32 state;			/* changed only by kdat_ep_step() */
	u64 transitions;
	u32 rec_syncs;			/* records written by steps (a handler's second write) */
	struct kdat_evd *connect_evd, *request_evd, *recv_evd;
	struct kdat_ep_attr attr;	/* requested attributes */
	u32 ird, ord;			/* negotiated when connected */
	struct ib_cq *cq;
	struct ib_qp *qp;
	atomic_t qp_freeing;		/* kdat_ep_free_qp() began */
	/*
	 * Posts (any context) hold post_lock around their ib_post_*; kdat
	 * closes posting under it before moving the QP to ERR or RESET or
	 * freeing it, so a post is either on the QP before the flush that
	 * follows, which completes it, or refused (kdat_qp.c).
	 */
	spinlock_t post_lock;
	bool posts_closed;
	/*
	 * rdma_connect(3): over iWARP "the active side of the connection send
	 * the first message" (MPA forbids a responder's FPDU before the
	 * initiator's first one).  An accepted kernel-QP EP's send-queue posts
	 * wait on held_sends until its first receive completes,
	 * first_send_hold_ms passes or the QP is flushed (kdat_qp.c).  Both
	 * under post_lock.
	 */
	bool first_send_hold;
	struct list_head held_sends;
	struct delayed_work hold_work;
	struct completion qp_freed;	/* ... and ended */
	struct rdma_cm_id *cm_id;	/* the connection's id, or NULL */
	/*
	 * CM calls at work on the EP's id (cm_id, or one it gave up) outside
	 * ep->lock: whoever destroys that id waits for them (kdat_ep_pin_id).
	 */
	atomic_t id_pins;
	bool active;			/* this EP connected actively */
	bool provider_created;		/* made by a provider-flag PSP */
	struct kdat_sp *rsp;		/* the RSP reserving it */
	/* what the active side asked for, for the route/connect steps and dup_connect */
	union kdat_sockaddr remote_addr;
	union kdat_sockaddr local_addr;
	u64 conn_qual;
	u32 connect_flags;
	u8 private_data[KDAT_IB_REQ_FIELD];	/* kept for the REQ: up to a raw IA's most */
	u8 private_data_size;
	struct kdat_ep_timer *timer;	/* the pending connect timeout, or NULL */
	u8 resolve_retries;		/* lookups this attempt may still ask again */
	struct rdma_cm_id *resolve_again;	/* the id resolve_work is to ask with */
	/* data transfer: per-request contexts, preallocated (kdat_qp.c) */
	spinlock_t wr_lock;		/* the free lists */
	struct kdat_wr *wrs;		/* max_request_dtos sends, then max_recv_dtos receives */
	struct kdat_wr *send_free, *recv_free;
	atomic_t sends_in_flight;	/* sends, RDMA and RMR binds not yet completed */
	bool ever_posted;		/* a request was posted: a flush must drain */
	u8 dreq;			/* enum kdat_ep_dreq, under ep->lock (kdat_ep_set_dreq) */
	/*
	 * kdat moved the QP to ERR and not out of it since: another ERR would
	 * only make the driver schedule its flush work again.
	 */
	bool qp_err;
	/* graceful_work was queued once: only then need the EP's finish wait for it */
	bool graceful_queued;
	struct work_struct graceful_work;
	struct work_struct resolve_work;	/* an address lookup asked again */
	/* a userspace QP instead of qp/cq (kdat_uqp.c), set at creation; NULL for kernel QPs */
	struct kdat_uqp *uqp;
};

/*
 * Where our own DREQ stands (the table's state says where the disconnect
 * stands for DAT): a sub-state of DISCONNECT_PENDING, and of DISCONNECTED
 * while an abrupt disconnect's DREQ is unanswered.
 */
enum kdat_ep_dreq {
	KDAT_DREQ_NONE,		/* none of ours is out or waiting */
	KDAT_DREQ_WAITS,	/* graceful: it waits for sends_in_flight == 0 */
	KDAT_DREQ_SENT,		/* it went out; its DISCONNECTED has not come */
	KDAT_DREQ_ANSWERED,	/* graceful: it came; graceful_work closes the EP */
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
	bool unmapped;			/* the device went away first */
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
 * timer up by as much as an eighth of its length; its expiry queues the work
 * that takes ep->lock.
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
	struct rdma_cm_id *listen_ud_id;	/* SIDR requests (kdat_ud_may_listen), or NULL */
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
	bool ud;			/* a SIDR request: accepted on a UD EP only */
	u32 remote_qpn;			/* UD: the requester's QP, from kdat's header (0: unknown) */
};

/*
 * The CM work a section under ep->lock leaves for after it: no CM call is
 * made under a lock that a CM handler takes.  dreq: a pinned id to send our
 * DREQ on; gone: a detached id to destroy.  kdat_ep_wire_run() does both.
 */
struct kdat_ep_wire {
	struct rdma_cm_id *dreq;
	struct rdma_cm_id *gone;
};

/*
 * Pins the EP's id (inline: the orphans below the EP wait on pins too) for a CM call made after ep->lock (our DREQ, a
 * UQP_ESTABLISH's RTU): until kdat_ep_unpin_id(), whoever destroys that id
 * waits (kdat_ep_wait_unpinned) and a handler that ends it defers its
 * destruction to kdat_wq.  Pins are per EP, not per id: a pin on an id the EP
 * has given up (to an orphan, after a reset) still holds it.  Caller holds
 * ep->lock, so a handler that finds no pin under it cannot race a new one.
 */
static inline struct rdma_cm_id *kdat_ep_pin_id(struct kdat_ep *ep)
{
	lockdep_assert_held(&ep->lock);
	atomic_inc(&ep->id_pins);
	return ep->cm_id;
}

static inline void kdat_ep_unpin_id(struct kdat_ep *ep)
{
	if (atomic_dec_and_test(&ep->id_pins))
		wake_up_var(&ep->id_pins);
}

static inline bool kdat_ep_id_pinned(struct kdat_ep *ep)
{
	return atomic_read(&ep->id_pins);
}

/* Before destroying an id the EP held: no locks held. */
static inline void kdat_ep_wait_unpinned(struct kdat_ep *ep)
{
	wait_var_event(&ep->id_pins, !atomic_read(&ep->id_pins));
}

/* kdat_ep.c, for the other objects' files */
kdat_ret_t kdat_invalid_state(struct kdat_ep *ep);
int kdat_qp_modify_cm(struct kdat_ep *ep, struct rdma_cm_id *id, enum ib_qp_state state);
void kdat_qp_set(struct kdat_ep *ep, enum ib_qp_state state);
void kdat_ia_unuse_pd(struct kdat_ia *ia);
struct kdat_ep *kdat_ep_new(struct kdat_ia *ia, const struct kdat_ep_attr *attr,
			    struct kdat_uqp *uqp, kdat_ret_t *ret);
int kdat_ep_cache_init(void);
void kdat_ep_cache_exit(void);
void kdat_ep_free_qp(struct kdat_ep *ep);
void kdat_ep_discard(struct kdat_ep *ep);
kdat_ret_t kdat_ep_link(struct kdat_ep *ep, struct kdat_evd *conn,
			struct kdat_evd *req, struct kdat_evd *recv);
void kdat_ep_kill(struct kdat_ep *ep, struct kdat_ep_wire *wire);
void kdat_ep_finish(struct kdat_ep *ep, struct kdat_ep_wire *wire);
kdat_ret_t kdat_check_private_data(const void *pdata, s32 size, u32 max);
/* kdat_resolve_failed(): not an error for the caller, an outcome for the EP */
#define KDAT_UNREACHABLE_NOW	1u
kdat_ret_t kdat_resolve_failed(int err);
kdat_ret_t kdat_connect_check(struct kdat_ep *ep, const struct sockaddr *remote, u64 conn_qual,
			      u32 timeout_us, const void *pdata, s32 pdata_size, u32 qos,
			      u32 flags);

/* kdat_sp.c */
struct rdma_cm_id *kdat_sp_kill(struct kdat_sp *sp);
void kdat_sp_finish(struct kdat_sp *sp, struct rdma_cm_id *id);

/* kdat_cr.c */
extern const struct kdat_obj_class kdat_cr_class;
void kdat_cr_post(struct kdat_cr *cr);

/* kdat_orphan.c */
struct rdma_cm_id *kdat_orphan_adopt(struct kdat_ep *ep, struct rdma_cm_id *id);
void kdat_orphan_retire(struct rdma_cm_id *id);
struct kdat_ep *kdat_orphan_ep(struct kdat_obj *obj);

/* kdat_ia.c */
int kdat_ib_client_register(void);
void kdat_ib_client_unregister(void);

void kdat_ctx_destroy(struct kdat_ctx *ctx);
kdat_ret_t kdat_ia_open_in(struct kdat_ctx *ctx, const char *name, u32 flags,
			   struct kdat_ia **ia, u32 *handle);
kdat_ret_t kdat_sp_create_in(struct kdat_ia *ia, u64 conn_qual, struct kdat_evd *evd,
			     u32 flags, struct kdat_ep *ep, struct kdat_sp **out, u32 *handle);
void kdat_ia_device_removed(struct kdat_ia *ia);
void kdat_orphans_reap(struct ib_device *ibdev);
ssize_t kdat_orphans_show(char *buf);
kdat_ret_t kdat_ia_close_in(struct kdat_ia *ia, u32 flags);
/* the data path's one report to the EP: a send completed (any context) */
void kdat_ep_send_done(struct kdat_ep *ep);
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
 * (timeout, disconnect, free) ended it while ep->lock was dropped for a
 * send.  Caller holds ep->lock.
 */
static inline bool kdat_ep_attempt_on(struct kdat_ep *ep, const struct rdma_cm_id *id)
{
	lockdep_assert_held(&ep->lock);
	return !ep->obj.dead && ep->cm_id == id && kdat_ep_state_connecting(ep->state);
}
void kdat_ep_destroy_id(struct kdat_ep *ep, struct rdma_cm_id *id);
void kdat_ep_accept_depths(struct kdat_ep *ep, struct kdat_cr *cr, u32 *ird, u32 *ord);
/* kdat_uqp.c: userspace QPs (kernel bypass) */
u32 kdat_ep_qpn(struct kdat_ep *ep);
bool kdat_uqp_ib(struct kdat_ia *ia);
bool kdat_uqp_qpn_valid(struct kdat_ia *ia, u32 qpn);
bool kdat_uqp_qpn_in_use(struct kdat_ia *ia, u32 qpn, struct kdat_ep *self);
void kdat_ep_qpn_index(struct kdat_ep *ep);
void kdat_ep_qpn_unindex(struct kdat_ep *ep);
kdat_ret_t kdat_uqp_check_renumber(struct kdat_ep *ep, u32 qpn);
kdat_ret_t kdat_ep_reset_to(struct kdat_ep *ep, u32 uqpn);
void kdat_uqp_rep_arrived(struct kdat_ep *ep, const u8 *pdata, u32 len);
void kdat_ud_exchange_init(struct kdat_ud_exchange *x, struct kdat_ep *ep,
			   work_func_t timeout_fn);
void kdat_ud_exchange_put(struct kdat_ud_exchange *x);
void kdat_uqp_end_exchanges(struct kdat_ep *ep);
void kdat_uqp_reset(struct kdat_ep *ep, u32 qpn);
kdat_ret_t kdat_uqp_create(struct kdat_ia *ia, struct kdat_evd *conn,
			   const struct kdat_ep_attr *attr, u32 qpn, u32 flags, u32 *handle);
kdat_ret_t kdat_uqp_attr(struct kdat_ep *ep, struct kdat_cr *cr, u32 qp_state,
			 struct kdat_uqp_attr *out);
kdat_ret_t kdat_uqp_establish(struct kdat_ep *ep, u32 flags);
kdat_ret_t kdat_ep_disconnect_user(struct kdat_ep *ep, u32 flags);
unsigned int kdat_ep_step_ud(struct kdat_ep *ep, unsigned int stimulus, const void *pdata,
			     u32 pdata_len, const struct kdat_event_ud *ud);
/* kdat_ud.c: UD EPs' address exchanges (SIDR) */
static inline bool kdat_ep_is_ud(const struct kdat_ep *ep)
{
	return ep->uqp && ep->uqp->ud;
}

kdat_ret_t kdat_ud_connect(struct kdat_ep *ep, const struct sockaddr *remote, u64 conn_qual,
			   u32 timeout_us, const void *pdata, s32 pdata_size, u32 qos, u32 flags);
void kdat_ud_passive_peer(struct kdat_ia *ia, const struct kdat_cr *cr,
			  struct kdat_event_ud *peer);
bool kdat_ud_may_listen(struct kdat_sp *sp);
/* kdat_cq.c: the CQs an IA's kernel QPs share */
void kdat_cqs_init(struct kdat_ia *ia);
struct ib_cq *kdat_cq_get(struct kdat_ia *ia, u32 nr_cqe);
void kdat_cq_put(struct kdat_ia *ia, struct ib_cq *cq, u32 nr_cqe);
void kdat_cqs_check_empty(struct kdat_ia *ia);
/* A completion's EP: CQs are shared, a QP is one EP's (its qp_context). */
static inline struct kdat_ep *kdat_wc_ep(const struct ib_wc *wc)
{
	return wc->qp->qp_context;
}

/* kdat_qp.c: a kernel EP's queues, below the EP and the data path */
int kdat_ep_wrs_init(struct kdat_ep *ep, bool posts);
void kdat_ep_wrs_exit(struct kdat_ep *ep);
struct kdat_wr *kdat_wr_get(struct kdat_ep *ep, bool recv);
void kdat_wr_put(struct kdat_ep *ep, struct kdat_wr *wr, bool recv);
void kdat_ep_flush(struct kdat_ep *ep);
bool kdat_ep_graceful_ready(struct kdat_ep *ep);
bool kdat_ep_may_post(struct kdat_ep *ep, unsigned int stimulus);
int kdat_qp_post_send(struct kdat_ep *ep, const struct ib_send_wr *wr);
int kdat_qp_post_recv(struct kdat_ep *ep, const struct ib_recv_wr *wr);
void kdat_ep_close_posts(struct kdat_ep *ep);
void kdat_ep_open_posts(struct kdat_ep *ep);
void kdat_ep_hold_first_sends(struct kdat_ep *ep);
void kdat_ep_flush_held(struct kdat_ep *ep);
void kdat_ep_first_recv(struct kdat_ep *ep);
kdat_ret_t kdat_post_failed(struct kdat_ep *ep, int err);
/* kdat_dto.c: the kernel data path, above the EP */
void kdat_ia_free_memory(struct kdat_ia *ia);
void kdat_ia_release_memory(struct kdat_ia *ia);
u32 kdat_dto_status(enum ib_wc_status status);
/* kdat_sgl.c */
void kdat_ia_free_mrs(struct kdat_ia *ia);
void kdat_ia_release_mrs(struct kdat_ia *ia);

/* kdat_obj_of() and the bottom layer's casts rely on it */
static_assert(offsetof(struct kdat_ia, obj) == 0);
static_assert(offsetof(struct kdat_evd, obj) == 0);
static_assert(offsetof(struct kdat_ep, obj) == 0);
static_assert(offsetof(struct kdat_sp, obj) == 0);
static_assert(offsetof(struct kdat_cr, obj) == 0);

#endif /* KDAT_CONN_H */
