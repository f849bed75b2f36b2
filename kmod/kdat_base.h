/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kdat.ko's bottom layer: objects and their owners, handles, the shared
 * table, EVDs and their rings, the devices, the CM backend, the conversions
 * to the uapi and to kdat's private data framing.  Nothing here calls into
 * the connection layer (kdat_conn.h): that layer reaches down, and what the
 * bottom must know of each kind of object it gets through struct
 * kdat_obj_class.
 */
#ifndef KDAT_BASE_H
#define KDAT_BASE_H

#include <linux/hashtable.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/slab.h>
#include <linux/wait.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>
#include "kdat_compat.h"
#include <kdat/kdat.h>
#include "kdat_cm.h"

/*
 * Locks, outermost first.  A lock may be taken while holding only locks
 * above it in this table; lockdep checks the order, and every function that
 * wants a lock held says so with lockdep_assert_held().
 *
 *   lock                       kind     guards                                 file
 *   rdma_cm handler mutex      mutex    one id's upcalls (rdma_cm holds it      rdma_cm
 *                                       around each; cr_accept/cr_reject and
 *                                       UQP_ESTABLISH take it with
 *                                       rdma_lock_handler())
 *   ctx->lock                  mutex    every object of one owner (an open      kdat_obj.c
 *                                       file or one kernel IA): its lists,
 *                                       handles and table slots; the state
 *                                       and records of every kind but EPs
 *   ep->lock                   mutex    one EP: its state, its id, its         kdat_ep.c
 *                                       sub-states and its table record.
 *                                       Its handlers, timer, graceful work
 *                                       and the consumer's calls on it alone
 *                                       take just this one, so one EP's CM
 *                                       work never waits for another's
 *   kdat_orphans_lock          mutex    the orphan list and its timer           kdat_orphan.c
 *   kdat_devices_lock          mutex    the device list and each device's IAs   kdat_devices.c
 *   ia->cq_lock                mutex    the IA's shared CQs and their counts    kdat_cq.c
 *                                       (a CQ is freed after it is dropped)
 *   evd->lock                  spinlock one EVD's queue, its counts, its ring   kdat_evd.c,
 *                              (irqsave)(the ring's only kernel writer)          kdat_ring.c
 *   ep->post_lock              spinlock posts against the QP's ERR/RESET/free, kdat_qp.c
 *                              (irqsave)the iWARP first-send hold and its list
 *   ep->wr_lock                spinlock one EP's free request contexts           kdat_qp.c
 *                              (irqsave)(taken from completion context)
 *   ctx->objs' xa_lock         spinlock handle lookups (kdat_obj_get)             kdat_obj.c
 *   table->hdr_lock            spinlock the shared table header's counts          kdat_table.c
 *   kdat_tables_lock           mutex    the list of shared tables; taken with  kdat_table.c
 *                                       none of the above held
 *
 * Two EP locks are never held at once: what reads one EP for another
 * (dup_connect) copies it under its lock first.  A handler's upcall into a
 * kernel consumer runs under ep->lock (or ctx->lock), which is why upcalls
 * may not call into kdat (include/kdat/kdat.h).
 *
 * rdma_destroy_id() waits for running handlers, so it is never called with
 * ctx->lock or ep->lock held: ids are detached under the lock and destroyed
 * after it.  The same wait lets a handler (or cr_accept/cr_reject, holding
 * the handler mutex) send its REQ/REP/RTU/REJ/DREP after dropping its lock:
 * the id outlives it.  A consumer's DREQ goes after ep->lock too, on an id
 * pinned under it (kdat_ep_pin_id: its destroyer waits for the pin).
 * QP state changes stay under ep->lock: once an EP is killed,
 * kdat_ep_finish() may free its QP without waiting for any handler.
 *
 * Lifetime: every object has a kref.  The owner's handle table holds one
 * reference, each in-flight call holds one, an rdma_cm id holds one on its
 * context object.  The last put defers the teardown to kdat_wq, so a put is
 * legal anywhere, handlers included; kdat_obj_put_now() frees at once, for
 * the sleeping, unlocked end of a consumer's free.
 */

enum kdat_obj_type {
	KDAT_OBJ_IA = 1,
	KDAT_OBJ_EVD,
	KDAT_OBJ_EP,
	KDAT_OBJ_SP,
	KDAT_OBJ_CR,
	KDAT_OBJ_ORPHAN,	/* an id left behind by an EP (kdat_orphan.c) */
};

struct kdat_ctx;
struct kdat_obj;
struct kdat_record;

/*
 * What the bottom layer needs to know of each kind of object, given by the
 * file that owns the kind: the upper layers are reached through these, never
 * called by name from below.
 */
struct kdat_obj_class {
	u16 rec_type;				/* KDAT_REC_* */
	/* the kind's fields of its shared-table record; kdat_obj_rec_lock() held */
	void (*rec_fill)(struct kdat_record *rec, struct kdat_obj *obj);
	/* the lock the object's state and record change under; NULL: ctx->lock */
	struct mutex *(*rec_lock)(struct kdat_obj *obj);
	/* an rdma_cm event on an id whose context is the object (kdat_cm_upcall) */
	int (*cm_event)(struct kdat_obj *obj, struct rdma_cm_id *id, struct rdma_cm_event *ev);
	/* the last reference went, from kdat_wq: free what the kind owns besides the object */
	void (*release)(struct kdat_obj *obj);
	/* an id the object held is about to be destroyed: wait for what still uses it */
	void (*id_quiesce)(struct kdat_obj *obj);
	/* the kind's own slab cache (the object comes from it); NULL: kmalloc */
	struct kmem_cache **cache;
};

struct kdat_obj {
	const struct kdat_obj_class *cls;
	enum kdat_obj_type type;
	u32 handle;		/* in ctx->objs; 0 once freed */
	u32 freed_handle;	/* what handle was: events queued before the free name it */
	struct kdat_ctx *ctx;
	struct kref ref;
	bool dead;		/* freed by the consumer (or its IA closed) */
	struct work_struct release_work;
	/* for the shared table (ctx->lock) */
	u64 created_ns, changed_ns;
	u32 last_event, events;
};

/*
 * Every kind of object begins with its struct kdat_obj (kdat_conn.h asserts
 * it), so the bottom layer can hold the kinds it does not know by their obj.
 */
static inline struct kdat_obj *kdat_obj_of(void *kind)
{
	return kind;
}

struct kdat_table;
struct kdat_ring;

/* The owner of a set of objects and their handles. */
struct kdat_ctx {
	struct mutex lock;
	struct xarray objs;	/* slot -> struct kdat_obj * */
	struct list_head ias;	/* struct kdat_ia.ctx_node */
	struct kref ref;
	struct kdat_table *table;	/* the records of objs, shared read-only */
	struct kdat_table *view;	/* another owner's table (TABLE_ATTACH), or NULL */
	struct net *net;		/* where names, addresses and ids live (referenced) */
	const char *kern_name;		/* a kernel consumer's name for its cm_ids; NULL: a file's */
	/*
	 * The linked EPs by QP number (struct kdat_ep.qpn_node, under lock): a
	 * user QP's claimed number is checked against them at every create, so
	 * a list walk made creating N EPs cost N^2 (dtestcm in bench/).
	 */
	DECLARE_HASHTABLE(qpns, 8);
};

/*
 * The connection counters summed over a device's IAs (KDAT_IOC_DEV_COUNTERS).
 * The device and each IA opened on it hold a reference, so an IA whose
 * device went counts on into memory nobody reads; the number stays taken
 * until the last reference, so no record names two devices with one number.
 */
struct kdat_dev_stats {
	struct kref ref;
	u16 id;				/* struct kdat_record.device */
	atomic64_t v[KDAT_IA_NR_COUNTERS];
};

/* One RDMA device kdat has been told about by ib_core (ib_client add). */
struct kdat_device {
	struct ib_device *ibdev;
	struct kdat_dev_stats *stats;
	struct list_head node;		/* in kdat_devices */
	struct list_head ias;		/* struct kdat_ia.dev_node */
};

/*
 * An IA's connection counters (KDAT_IA_COUNTERS).  Counted under the owner's
 * ctx->lock or from the CM's handlers, read by any file that may view the
 * owner's table (kdat_table_ia_counters), hence atomics.
 */
struct kdat_ia_stats {
	u32 handle;			/* the IA's, for readers to check against */
	atomic64_t v[KDAT_IA_NR_COUNTERS];
};

struct kdat_ia {
	struct kdat_obj obj;
	struct kdat_ia_stats stats;	/* in the table's index while the IA lives */
	struct list_head ctx_node;
	struct list_head dev_node;	/* under kdat_devices_lock */
	struct kdat_device *kdev;	/* NULL once the device is gone */
	struct kdat_dev_stats *dev_stats;	/* its device's totals (referenced); set at open */
	struct ib_device *ibdev;
	u32 port_num;
	struct ib_pd *pd;		/* NULL once freed (kdat_ia_free_pd) */
	/* the PD's, for posts: a post that races the PD's end is refused, never dereferences it */
	u32 local_dma_lkey;
	const struct kdat_cm_ops *cm;	/* kdat_cm_rdma, or a KUnit fake */
	struct sockaddr_storage addr;
	char netdev_name[KDAT_NAME_MAX];
	struct list_head evds, eps, sps, crs;
	struct list_head lmrs, rmrs, mrs;	/* kernel consumers' memory */
	bool removed;			/* the device went away */
	bool closing;			/* ia_close or teardown began: no new objects */
	/*
	 * QPs/CQs being created or released outside ctx->lock (EPs being made
	 * or killed but not yet finished): the PD waits for them.
	 */
	atomic_t eps_finishing;
	wait_queue_head_t finish_wq;
	/* the CQs its kernel QPs share (kdat_cq.c) */
	struct mutex cq_lock;
	struct list_head cqs;
	u32 cq_next_vector;
	bool own_ctx;			/* a kernel consumer's private ctx */
	bool pdata_raw;			/* KDAT_IA_PDATA_RAW: no kdat header on the wire */
};

struct kdat_evd {
	struct kdat_obj obj;
	struct kdat_ia *ia;
	struct list_head ia_node;
	u32 flags;
	u32 qlen;
	spinlock_t lock;		/* events, spares, count, lost, waiters */
	struct list_head events;
	struct list_head spares;	/* slots of taken events, for the next posts */
	u32 nspares;
	u32 count;
	u32 lost;			/* events that could not be queued */
	u32 waiters;
	u32 users;			/* EPs and SPs posting to it (ctx->lock) */
	wait_queue_head_t wq;
	kdat_upcall_t upcall;
	void *upcall_context;
	struct kdat_ring *ring;		/* set once (under lock), freed with the EVD */
	/*
	 * Killed (lock): posts are dropped.  An EP of another IA of the owner may
	 * still use it as its connect EVD after this EVD's IA closed abruptly.
	 */
	bool gone;
};

/* Most slots an EVD keeps for reuse (and never more than its qlen). */
#define KDAT_EVD_SPARES_MAX	64

/* An event waiting in an EVD's queue, holding references on what it names. */
struct kdat_qevent {
	struct list_head node;
	struct kdat_event_info info;
};

/*
 * Caller holds evd->lock.  A taken event's slot (a dequeue's, or one the
 * ring took over): kept for the next post while the EVD has fewer than
 * min(qlen, KDAT_EVD_SPARES_MAX), freed otherwise, so an EVD in steady use
 * allocates nothing per event.
 */
static inline void kdat_evd_recycle(struct kdat_evd *evd, struct kdat_qevent *qe)
{
	lockdep_assert_held(&evd->lock);
	if (evd->nspares < min_t(u32, evd->qlen, KDAT_EVD_SPARES_MAX)) {
		list_add(&qe->node, &evd->spares);
		evd->nspares++;
	} else {
		kfree(qe);
	}
}

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

extern struct workqueue_struct *kdat_wq;

static inline kdat_ret_t kdat_err(u32 type, u32 subtype)
{
	return KDAT_ERR(type, subtype);
}

#define KDAT_MAX_EVD_QLEN	65536
#define KDAT_PDATA_HDR		KDAT_PRIVATE_DATA_HEADER

/*
 * Private data.  The IB CM (InfiniBand, RoCE) carries fixed-size private data
 * fields and no length, so kdat puts a 4-byte header in front of the
 * consumer's bytes to deliver exactly what was sent: what a consumer may send
 * is the field minus rdma_cm's header (REQ only) minus kdat's.  An IA opened
 * with KDAT_IA_PDATA_RAW sends and delivers the fields as they are, as a
 * plain rdma_cm peer (NVMe-oF, iSER) does: the whole field is the consumer's
 * to send, and what arrives is the whole field.
 */
#define KDAT_PDATA_MAGIC	0xda
#define KDAT_PDATA_VERSION	1
#define KDAT_IB_REQ_FIELD	(IB_CM_REQ_PRIVATE_DATA_SIZE - 36)	/* after rdma_cm's header */
#define KDAT_IB_REP_FIELD	IB_CM_REP_PRIVATE_DATA_SIZE
#define KDAT_IB_REJ_FIELD	IB_CM_REJ_PRIVATE_DATA_SIZE
#define KDAT_IB_ACCEPT_PDATA	(KDAT_IB_REP_FIELD - KDAT_PDATA_HDR)
#define KDAT_IB_REJECT_PDATA	(KDAT_IB_REJ_FIELD - KDAT_PDATA_HDR)
#define KDAT_PDATA_WIRE_MAX	(KDAT_PRIVATE_DATA_MAX + KDAT_PDATA_HDR)

/* header byte 3: a reject by kdat itself (backlog full, listener gone), not by the consumer */
#define KDAT_PDATA_F_PROVIDER	0x01
/* header byte 3: a UD request; the requester's QPN (4 bytes, big endian) follows the header */
#define KDAT_PDATA_F_UD_QPN	0x02
#define KDAT_PDATA_UD_QPN	4
/* UD: the SIDR reply's field (rdma_cm adds no header to it) */
#define KDAT_IB_SIDR_REP_FIELD	IB_CM_SIDR_REP_PRIVATE_DATA_SIZE
#define KDAT_PDATA_UD_WIRE_MAX	(KDAT_PDATA_WIRE_MAX + KDAT_PDATA_UD_QPN)

/* kdat_devices.c */
struct kdat_device *kdat_device_add(struct ib_device *ibdev);
struct kdat_ia **kdat_device_remove(struct kdat_device *dev);
unsigned int kdat_devices_count(void);
struct kdat_device *kdat_device_find(struct ib_device *ibdev);
void kdat_dev_stats_put(struct kdat_dev_stats *stats);
kdat_ret_t kdat_dev_counters(u32 device, u32 *next, char *name, size_t name_len, u64 *values,
			     u32 room);
extern struct mutex kdat_devices_lock;
extern atomic64_t kdat_module_stats[KDAT_IA_NR_COUNTERS];

/* kdat_table.c: the shared object table */
struct kdat_table *kdat_table_create(const char *kernel_owner, struct mutex *writer_lock);
void kdat_table_get(struct kdat_table *t);
void kdat_table_put(struct kdat_table *t);
void kdat_table_close(struct kdat_table *t);
u32 kdat_table_claim(struct kdat_table *t, u32 slot);
struct kdat_record *kdat_table_write_begin(struct kdat_table *t, u32 slot);
void kdat_table_write_end(struct kdat_table *t, struct kdat_record *rec, int live_delta);
int kdat_table_mmap(struct kdat_table *t, struct vm_area_struct *vma);
void kdat_table_mark_viewer(struct kdat_table *t);
kdat_ret_t kdat_table_list(void __user *ubuf, u32 capacity, u32 *count);
kdat_ret_t kdat_table_find(u64 id, struct kdat_table **out);
u64 kdat_table_id(const struct kdat_table *t);
int kdat_table_add_stats(struct kdat_table *t, struct kdat_ia_stats *stats);
void kdat_table_del_stats(struct kdat_table *t, struct kdat_ia_stats *stats);
kdat_ret_t kdat_table_ia_counters(struct kdat_table *t, u32 handle, u64 *values, u32 room);
kdat_ret_t kdat_tables_wait(u64 *changes, u32 timeout_us);

/* Counts for the IA, its device's totals and the module's, which outlive the IA. */
static inline void kdat_ia_count(struct kdat_ia *ia, enum kdat_ia_counter counter)
{
	atomic64_inc(&ia->stats.v[counter]);
	if (ia->dev_stats)
		atomic64_inc(&ia->dev_stats->v[counter]);
	atomic64_inc(&kdat_module_stats[counter]);
}

/* Every record names the RDMA device and port of the IA its object belongs to. */
static inline void kdat_rec_port(struct kdat_record *rec, const struct kdat_ia *ia)
{
	if (ia && ia->dev_stats) {
		rec->device = ia->dev_stats->id;
		rec->port_num = ia->port_num;
	}
}

/*
 * Waits until cond for timeout_us (KDAT_TIMEOUT_INFINITE: no limit) on an
 * hrtimer: never early, and not rounded up by the timer wheel as a jiffies
 * timeout is (by up to an eighth of its length).  0: cond holds; -ETIME;
 * -ERESTARTSYS.
 */
#define kdat_wait_event_us(wq, cond, timeout_us)					\
	((timeout_us) == KDAT_TIMEOUT_INFINITE ? wait_event_interruptible(wq, cond) :	\
	 wait_event_interruptible_hrtimeout(wq, cond,					\
					    ns_to_ktime((u64)(timeout_us) * NSEC_PER_USEC)))

/* kdat_ring.c: event rings (callers of the *_locked-style ones hold evd->lock) */
struct file *kdat_ring_attach(struct kdat_evd *evd, u32 handle, u32 *entries, u32 *map_size);
void kdat_ring_put(struct kdat_ring *r);
bool kdat_ring_fill(struct kdat_evd *evd, const struct kdat_event_info *info);
bool kdat_ring_ready(struct kdat_evd *evd, u32 threshold);
void kdat_ring_offsets(struct kdat_ring_offsets *off);
u32 kdat_ring_available(struct kdat_evd *evd);
u32 kdat_ring_entries(struct kdat_evd *evd);
void kdat_ring_kill(struct kdat_evd *evd);
void kdat_ring_wake(struct kdat_evd *evd);

/* kdat_obj.c: objects, handles, records, the CM upcall */
void kdat_ctx_release(struct kref *ref);
int kdat_obj_add(struct kdat_ctx *ctx, struct kdat_obj *obj, enum kdat_obj_type type,
		 const struct kdat_obj_class *cls);
void kdat_obj_unlink(struct kdat_obj *obj);
void kdat_obj_get_ref(struct kdat_obj *obj);
void kdat_event_get_refs(struct kdat_event_info *info);
int kdat_cm_upcall(struct rdma_cm_id *id, struct rdma_cm_event *ev);

/* kdat_pdata.c: kdat's private data header */
u8 kdat_pdata_wrap(const struct kdat_ia *ia, u8 *buf, const void *pdata, u32 len);
u32 kdat_pdata_unwrap(const struct kdat_ia *ia, const u8 *raw, u32 raw_len, const u8 **data);
u8 kdat_pdata_wrap_ud(const struct kdat_ia *ia, u8 *buf, u32 qpn, const void *pdata, u32 len);
u32 kdat_pdata_unwrap_ud(const struct kdat_ia *ia, const u8 *raw, u32 raw_len,
			 const u8 **data, u32 *qpn);
bool kdat_pdata_provider_reject(const struct kdat_ia *ia, const u8 *raw, u32 raw_len,
				int status);
u32 kdat_pdata_max(const struct kdat_ia *ia, u32 field);

/* kdat_cm.c */
void kdat_destroy_id_later(const struct kdat_cm_ops *cm, struct rdma_cm_id *id,
			   struct kdat_obj *obj);

/* kdat_evd.c */
void kdat_evd_kill(struct kdat_evd *evd);
void kdat_evd_use(struct kdat_evd *evd);
void kdat_evd_unuse(struct kdat_evd *evd);
bool kdat_evd_fits(struct kdat_evd *evd, struct kdat_ia *ia, u32 flag);
bool kdat_evd_fits_owner(struct kdat_evd *evd, struct kdat_ia *ia, u32 flag);

/* the objects' files */
struct kdat_ctx *kdat_ctx_create(const char *kernel_owner, struct net *net);
const char *kdat_owner_name(const char *owner);
void kdat_owner_names_free(void);
void kdat_rec_sync(struct kdat_obj *obj);
void kdat_rec_sync_unlocked(struct kdat_obj *obj);
void kdat_event_to_user(struct kdat_event *out, struct kdat_event_ud *ud,
			const struct kdat_event_info *in);
void kdat_uqp_ah_out(struct kdat_uqp_ah *out, const struct rdma_ah_attr *ah);
kdat_ret_t kdat_evd_ring_wait(struct kdat_evd *evd, u32 timeout_us, u32 threshold,
			      u32 *available);
kdat_ret_t kdat_evd_create_in(struct kdat_ia *ia, u32 qlen, u32 flags, kdat_upcall_t upcall,
			      void *context, struct kdat_evd **out, u32 *handle);
struct kdat_obj *kdat_obj_get(struct kdat_ctx *ctx, u32 handle,
			      enum kdat_obj_type type);
void kdat_obj_put(struct kdat_obj *obj);
void kdat_obj_put_now(struct kdat_obj *obj);
u32 kdat_obj_handle(void *obj);
u32 kdat_obj_event_handle(void *obj);
/* EVD waits that leave the event's object references to the caller. */
kdat_ret_t kdat_evd_wait_ref(struct kdat_evd *evd, u32 timeout_us, u32 threshold,
			     struct kdat_event_info *ev, u32 *nmore);
kdat_ret_t kdat_evd_dequeue_ref(struct kdat_evd *evd, struct kdat_event_info *ev,
				u32 *nmore);
void kdat_event_put_refs(struct kdat_event_info *info);
void kdat_evd_post(struct kdat_evd *evd, const struct kdat_event_info *info);

/* kdat_uapi.c: conversions to and from include/kdat/uapi/kdat.h */
void kdat_ss_with_port(struct sockaddr_storage *ss, const struct sockaddr_storage *src,
		       u16 port);
void kdat_sockaddr_copy(union kdat_sockaddr *dst, const struct sockaddr *src);
void kdat_sockaddr_set_port(union kdat_sockaddr *a, u16 port);
void kdat_addr_out(struct kdat_addr *out, const struct sockaddr *sa);
int kdat_addr_in(struct sockaddr_storage *ss, const struct kdat_addr *in);

#endif /* KDAT_BASE_H */
