// SPDX-License-Identifier: GPL-2.0
/*
 * kdat core: IA, EVD, EP, PSP/RSP and CR objects, the endpoint state machine
 * driven by include/kdat/ep_table.h, and the rdma_cm event handler.
 *
 * Each endpoint owns its own RC QP and CQ from creation on; kdat drives the
 * QP's state itself from rdma_init_qp_attr() (the way librdmacm serves user
 * QPs), so receives can be posted before a connection exists and the same
 * code will serve userspace QPs.
 */
#include <linux/inet.h>
#include <linux/inetdevice.h>
#include <linux/jiffies.h>
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <net/net_namespace.h>
#include <rdma/ib_cm.h>
#include "kdat_priv.h"

#define KDAT_RESOLVE_TIMEOUT_MS	2000
#define KDAT_DEFAULT_DTOS	16
#define KDAT_DEFAULT_IOV	1
#define KDAT_MAX_EVD_QLEN	65536
#define KDAT_MAX_EPS		65536
/*
 * Requests a PSP holds before they are accepted or rejected, at most (like
 * somaxconn); requests beyond it are refused: NON_PEER_REJECTED at the
 * requester.  Changeable at run time in /sys/module/kdat/parameters/.
 */
#define KDAT_LISTEN_BACKLOG	128
static unsigned int listen_backlog = KDAT_LISTEN_BACKLOG;
module_param(listen_backlog, uint, 0644);
MODULE_PARM_DESC(listen_backlog, "unanswered connection requests a PSP holds (default 128)");
#define KDAT_RSP_BACKLOG	1

/*
 * Private data.  The IB CM (InfiniBand, RoCE) carries fixed-size private data
 * fields and no length, so kdat puts a 4-byte header in front of the
 * consumer's bytes to deliver exactly what was sent: what a consumer may send
 * is the field minus rdma_cm's header (REQ only) minus kdat's.
 */
#define KDAT_PDATA_MAGIC	0xda
#define KDAT_PDATA_VERSION	1
/* KDAT_PDATA_HDR and KDAT_IB_CONNECT_PDATA are in kdat_priv.h */
#define KDAT_IB_ACCEPT_PDATA	(IB_CM_REP_PRIVATE_DATA_SIZE - KDAT_PDATA_HDR)
#define KDAT_IB_REJECT_PDATA	(IB_CM_REJ_PRIVATE_DATA_SIZE - KDAT_PDATA_HDR)
#define KDAT_PDATA_WIRE_MAX	(KDAT_PRIVATE_DATA_MAX + KDAT_PDATA_HDR)

/* header byte 3: a reject by kdat itself (backlog full, listener gone), not by the consumer */
#define KDAT_PDATA_F_PROVIDER	0x01

/* Builds the wire form of private data in buf; returns its length. */
static u8 kdat_pdata_wrap(u8 *buf, const void *pdata, u32 len)
{
	buf[0] = KDAT_PDATA_MAGIC;
	buf[1] = KDAT_PDATA_VERSION;
	buf[2] = len;
	buf[3] = 0;
	if (len)
		memcpy(buf + KDAT_PDATA_HDR, pdata, len);
	return KDAT_PDATA_HDR + len;
}

/*
 * The consumer's bytes from a received private data field.  A field without
 * kdat's header (a peer that is not kdat) is taken whole.
 */
static u32 kdat_pdata_unwrap(const u8 *raw, u32 raw_len, const u8 **data)
{
	*data = raw;
	if (!raw || !raw_len)
		return 0;
	if (raw_len >= KDAT_PDATA_HDR && raw[0] == KDAT_PDATA_MAGIC &&
	    raw[1] == KDAT_PDATA_VERSION && raw[2] <= raw_len - KDAT_PDATA_HDR) {
		*data = raw + KDAT_PDATA_HDR;
		return raw[2];
	}
	return min_t(u32, raw_len, KDAT_PRIVATE_DATA_MAX);
}

/* A REJ that kdat's provider side sent on its own (KDAT_PDATA_F_PROVIDER). */
static bool kdat_pdata_provider_reject(const u8 *raw, u32 raw_len)
{
	return raw && raw_len >= KDAT_PDATA_HDR && raw[0] == KDAT_PDATA_MAGIC &&
	       raw[1] == KDAT_PDATA_VERSION && (raw[3] & KDAT_PDATA_F_PROVIDER);
}

static kdat_ret_t kdat_err(u32 type, u32 subtype)
{
	return KDAT_ERR(type, subtype);
}

/* ---- objects, handles, references ------------------------------------------ */

static void kdat_ctx_release(struct kref *ref)
{
	struct kdat_ctx *ctx = container_of(ref, struct kdat_ctx, ref);

	WARN_ON(!xa_empty(&ctx->objs));
	xa_destroy(&ctx->objs);
	kdat_table_close(ctx->table);
	kdat_table_put(ctx->table);
	kdat_table_put(ctx->view);
	put_net(ctx->net);
	kfree(ctx);
}

/*
 * kernel_owner: the kernel consumer's name, or NULL for an open file.  net:
 * the network namespace every name, address and id of this owner lives in
 * (an open file's is its opener's, as an rdma_cm id's is its creator's).
 */
struct kdat_ctx *kdat_ctx_create(const char *kernel_owner, struct net *net)
{
	struct kdat_ctx *ctx = kzalloc(sizeof(*ctx), GFP_KERNEL);

	if (!ctx)
		return NULL;
	ctx->table = kdat_table_create(kernel_owner);
	if (!ctx->table) {
		kfree(ctx);
		return NULL;
	}
	ctx->net = get_net(net);
	mutex_init(&ctx->lock);
	xa_init_flags(&ctx->objs, XA_FLAGS_ALLOC1);
	INIT_LIST_HEAD(&ctx->ias);
	kref_init(&ctx->ref);
	return ctx;
}

static void kdat_obj_free_work(struct work_struct *work)
{
	struct kdat_obj *obj = container_of(work, struct kdat_obj, release_work);
	struct kdat_ctx *ctx = obj->ctx;

	/* IB resources went with kdat_*_kill(); what is left is memory. */
	if (obj->type == KDAT_OBJ_EVD)
		kdat_ring_put(((struct kdat_evd *)obj)->ring);
	if (obj->type == KDAT_OBJ_EP)
		kfree(((struct kdat_ep *)obj)->uqp);
	kfree(obj);
	kref_put(&ctx->ref, kdat_ctx_release);
}

static void kdat_obj_release(struct kref *ref)
{
	struct kdat_obj *obj = container_of(ref, struct kdat_obj, ref);

	/* Defer: the last put may come from an rdma_cm handler. */
	INIT_WORK(&obj->release_work, kdat_obj_free_work);
	queue_work(kdat_wq, &obj->release_work);
}

void kdat_obj_put(struct kdat_obj *obj)
{
	if (obj)
		kref_put(&obj->ref, kdat_obj_release);
}

static void kdat_obj_get_ref(struct kdat_obj *obj)
{
	kref_get(&obj->ref);
}

static const u16 kdat_rec_types[] = {
	[KDAT_OBJ_IA] = KDAT_REC_IA,
	[KDAT_OBJ_EVD] = KDAT_REC_EVD,
	[KDAT_OBJ_EP] = KDAT_REC_EP,
	[KDAT_OBJ_SP] = KDAT_REC_PSP,
	[KDAT_OBJ_CR] = KDAT_REC_CR,
};

/*
 * Adds obj to ctx: the lowest free slot of the shared table, with the slot's
 * next generation in the handle.  Caller holds ctx->lock.
 */
static int kdat_obj_add(struct kdat_ctx *ctx, struct kdat_obj *obj,
			enum kdat_obj_type type)
{
	struct kdat_record *rec;
	u32 slot, handle;
	int ret;

	lockdep_assert_held(&ctx->lock);
	obj->type = type;
	obj->ctx = ctx;
	kref_init(&obj->ref);
	ret = xa_alloc(&ctx->objs, &slot, obj, XA_LIMIT(1, KDAT_TABLE_MAX_SLOTS - 1),
		       GFP_KERNEL);
	if (ret < 0)
		return ret;
	handle = kdat_table_claim(ctx->table, slot);
	if (!handle) {
		xa_erase(&ctx->objs, slot);
		return -ENOMEM;
	}
	WRITE_ONCE(obj->handle, handle);
	obj->created_ns = ktime_get_boottime_ns();
	obj->changed_ns = obj->created_ns;
	rec = kdat_table_write_begin(ctx->table, slot);
	memset((void *)rec + sizeof(rec->seq), 0, sizeof(*rec) - sizeof(rec->seq));
	rec->handle = handle;
	rec->generation = KDAT_HANDLE_GENERATION(handle);
	rec->type = kdat_rec_types[type];
	rec->created_ns = obj->created_ns;
	rec->changed_ns = obj->changed_ns;
	kdat_table_write_end(ctx->table, rec, 1);
	kref_get(&ctx->ref);
	return 0;
}

/* Removes the handle and frees its record; the table's reference is the caller's to drop. */
static void kdat_obj_unlink(struct kdat_obj *obj)
{
	struct kdat_ctx *ctx = obj->ctx;
	struct kdat_record *rec;
	u16 gen;

	lockdep_assert_held(&ctx->lock);
	obj->dead = true;
	if (obj->handle) {
		xa_erase(&ctx->objs, KDAT_HANDLE_SLOT(obj->handle));
		rec = kdat_table_write_begin(ctx->table, KDAT_HANDLE_SLOT(obj->handle));
		gen = rec->generation;
		memset((void *)rec + sizeof(rec->seq), 0, sizeof(*rec) - sizeof(rec->seq));
		rec->generation = gen;
		kdat_table_write_end(ctx->table, rec, -1);
		WRITE_ONCE(obj->handle, 0);
	}
}

struct kdat_obj *kdat_obj_get(struct kdat_ctx *ctx, u32 handle,
			      enum kdat_obj_type type)
{
	struct kdat_obj *obj;

	if (!handle)
		return NULL;
	xa_lock(&ctx->objs);
	obj = xa_load(&ctx->objs, KDAT_HANDLE_SLOT(handle));
	if (obj && (READ_ONCE(obj->handle) != handle || obj->type != type ||
		    !kref_get_unless_zero(&obj->ref)))
		obj = NULL;
	xa_unlock(&ctx->objs);
	return obj;
}

static void kdat_sockaddr_copy(union kdat_sockaddr *dst, const struct sockaddr *src);

/* Socket address of an IA with a port, for SP records. */
static void kdat_ss_with_port(struct sockaddr_storage *ss, const struct sockaddr_storage *src,
			      u16 port)
{
	*ss = *src;
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons(port);
	else if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
}

static void kdat_rec_fill_ep(struct kdat_record *rec, struct kdat_ep *ep)
{
	bool connected = ep->state == KDAT_EP_CONNECTED ||
			 ep->state == KDAT_EP_DISCONNECT_PENDING;

	rec->state = ep->state;
	rec->owner = kdat_obj_handle(ep->ia);
	rec->link = kdat_obj_handle(ep->connect_evd);
	rec->link2 = kdat_obj_handle(ep->request_evd);
	rec->transitions = ep->transitions;
	rec->ird = connected ? ep->ird : ep->attr.max_rdma_read_in;
	rec->ord = connected ? ep->ord : ep->attr.max_rdma_read_out;
	rec->flags = (ep->active ? KDAT_RECF_ACTIVE : 0) |
		     (ep->provider_created ? KDAT_RECF_PROVIDER : 0) |
		     (ep->uqp ? KDAT_RECF_USER_QP : 0);
	rec->conn_qual = ep->active ? ep->conn_qual : 0;
	if (ep->cm_id) {
		kdat_sockaddr_copy(&ep->local_addr,
				   (struct sockaddr *)&ep->cm_id->route.addr.src_addr);
		kdat_sockaddr_copy(&ep->remote_addr,
				   (struct sockaddr *)&ep->cm_id->route.addr.dst_addr);
	}
	kdat_addr_out(&rec->local_addr, &ep->local_addr.sa);
	kdat_addr_out(&rec->remote_addr, &ep->remote_addr.sa);
}

static void kdat_rec_fill(struct kdat_record *rec, struct kdat_obj *obj)
{
	struct sockaddr_storage ss;
	struct kdat_evd *evd;
	struct kdat_sp *sp;
	struct kdat_cr *cr;
	struct kdat_ia *ia;

	switch (obj->type) {
	case KDAT_OBJ_IA:
		ia = (struct kdat_ia *)obj;
		rec->state = ia->removed ? KDAT_IA_DEVICE_REMOVED : KDAT_IA_UP;
		kdat_addr_out(&rec->local_addr, (struct sockaddr *)&ia->addr);
		break;
	case KDAT_OBJ_EVD:
		evd = (struct kdat_evd *)obj;
		rec->state = evd->flags;
		rec->owner = kdat_obj_handle(evd->ia);
		rec->flags = READ_ONCE(evd->ring) ? KDAT_RECF_RING : 0;
		break;
	case KDAT_OBJ_EP:
		kdat_rec_fill_ep(rec, (struct kdat_ep *)obj);
		break;
	case KDAT_OBJ_SP:
		sp = (struct kdat_sp *)obj;
		rec->type = sp->is_rsp ? KDAT_REC_RSP : KDAT_REC_PSP;
		rec->state = sp->is_rsp && sp->rsp_used ? KDAT_SP_USED : KDAT_SP_LISTENING;
		rec->owner = kdat_obj_handle(sp->ia);
		rec->link = kdat_obj_handle(sp->evd);
		rec->link2 = kdat_obj_handle(sp->ep);
		rec->flags = sp->flags & KDAT_PSP_PROVIDER ? KDAT_RECF_PROVIDER : 0;
		rec->conn_qual = sp->conn_qual;
		if (sp->ia) {
			kdat_ss_with_port(&ss, &sp->ia->addr, sp->conn_qual);
			kdat_addr_out(&rec->local_addr, (struct sockaddr *)&ss);
		}
		break;
	case KDAT_OBJ_CR:
		cr = (struct kdat_cr *)obj;
		rec->state = cr->remote_gone ? KDAT_CR_REMOTE_GONE : KDAT_CR_PENDING;
		rec->owner = kdat_obj_handle(cr->ia);
		rec->link = kdat_obj_handle(cr->sp);
		rec->link2 = kdat_obj_handle(cr->ep);
		kdat_addr_out(&rec->local_addr, &cr->local_addr.sa);
		kdat_addr_out(&rec->remote_addr, &cr->remote_addr.sa);
		break;
	default:
		break;
	}
}

/*
 * Rewrites obj's record in the shared table from the object as it is now.
 * Called at every change userspace may watch; caller holds ctx->lock, which
 * makes the kernel the table's single writer.
 */
void kdat_rec_sync(struct kdat_obj *obj)
{
	struct kdat_ctx *ctx = obj->ctx;
	struct kdat_record *rec;
	u32 handle = obj->handle;

	if (!handle)
		return;
	lockdep_assert_held(&ctx->lock);
	rec = kdat_table_write_begin(ctx->table, KDAT_HANDLE_SLOT(handle));
	memset((void *)rec + sizeof(rec->seq), 0, sizeof(*rec) - sizeof(rec->seq));
	rec->handle = handle;
	rec->generation = KDAT_HANDLE_GENERATION(handle);
	rec->type = kdat_rec_types[obj->type];
	rec->last_event = obj->last_event;
	rec->events = obj->events;
	rec->created_ns = obj->created_ns;
	rec->changed_ns = obj->changed_ns;
	kdat_rec_fill(rec, obj);
	kdat_table_write_end(ctx->table, rec, 0);
}

/* kdat_rec_sync() for callers without ctx->lock. */
void kdat_rec_sync_unlocked(struct kdat_obj *obj)
{
	mutex_lock(&obj->ctx->lock);
	kdat_rec_sync(obj);
	mutex_unlock(&obj->ctx->lock);
}

u32 kdat_obj_handle(void *p)
{
	struct kdat_obj *obj = p;

	return obj ? obj->handle : 0;
}

/* ---- events ----------------------------------------------------------------- */

/* The ABI's form of an event: handles instead of objects. */
void kdat_event_to_user(struct kdat_event *out, const struct kdat_event_info *in)
{
	memset(out, 0, sizeof(*out));
	out->number = in->number;
	out->evd = kdat_obj_handle(in->evd);
	out->ep = kdat_obj_handle(in->ep);
	out->sp = kdat_obj_handle(in->sp);
	out->cr = kdat_obj_handle(in->cr);
	out->dto_status = in->dto_status;
	out->cookie = in->cookie;
	out->transfered_length = in->transfered_length;
	out->private_data_size = min_t(u32, in->private_data_size, KDAT_PRIVATE_DATA_MAX);
	memcpy(out->private_data, in->private_data, out->private_data_size);
}

static void kdat_event_get_refs(struct kdat_event_info *info)
{
	if (info->ep)
		kdat_obj_get_ref(&info->ep->obj);
	if (info->sp)
		kdat_obj_get_ref(&info->sp->obj);
	if (info->cr)
		kdat_obj_get_ref(&info->cr->obj);
}

void kdat_event_put_refs(struct kdat_event_info *info)
{
	if (info->ep)
		kdat_obj_put(&info->ep->obj);
	if (info->sp)
		kdat_obj_put(&info->sp->obj);
	if (info->cr)
		kdat_obj_put(&info->cr->obj);
}

/*
 * Queue an event.  Never drops one silently: if memory for it cannot be had,
 * the EVD counts it and the next wait/dequeue reports DAT_QUEUE_FULL.
 */
void kdat_evd_post(struct kdat_evd *evd, const struct kdat_event_info *info)
{
	struct kdat_qevent *qe;
	unsigned long flags;

	if (!evd)
		return;
	qe = kmalloc(sizeof(*qe), GFP_KERNEL);
	spin_lock_irqsave(&evd->lock, flags);
	if (evd->ring) {
		struct kdat_event_info with_evd = *info;

		/* straight into the ring unless it is full or others wait before us */
		with_evd.evd = evd;
		if (kdat_ring_fill(evd, &with_evd)) {
			kfree(qe);
			qe = NULL;
			goto posted;
		}
	}
	if (qe) {
		/* A queued event pins the objects it names until it is taken. */
		qe->info = *info;
		qe->info.evd = evd;
		kdat_event_get_refs(&qe->info);
		list_add_tail(&qe->node, &evd->events);
		evd->count++;
	} else {
		evd->lost++;
	}
	if (evd->ring)
		kdat_ring_fill(evd, NULL);	/* mirror backlog and overflow */
posted:
	spin_unlock_irqrestore(&evd->lock, flags);
	wake_up_all(&evd->wq);
	if (evd->ring)
		kdat_ring_wake(evd);
	if (evd->upcall)
		evd->upcall(evd, evd->upcall_context);
}

static void kdat_post_conn_event(struct kdat_ep *ep, u32 number,
				 const void *pdata, u32 pdata_len)
{
	struct kdat_event_info *info;

	info = kzalloc(sizeof(*info), GFP_KERNEL);
	if (!info) {
		/* count it as lost on the EVD rather than vanish */
		kdat_evd_post(ep->connect_evd, &(struct kdat_event_info){ .number = number });
		return;
	}
	info->number = number;
	info->ep = ep;
	if (pdata && pdata_len) {
		info->private_data_size = min_t(u32, pdata_len, KDAT_PRIVATE_DATA_MAX);
		memcpy(info->private_data, pdata, info->private_data_size);
	}
	kdat_evd_post(ep->connect_evd, info);
	kfree(info);
}

/* ---- the endpoint state machine ----------------------------------------------- */

static kdat_ret_t kdat_invalid_state(struct kdat_ep *ep)
{
	return kdat_err(KDAT_DAT_INVALID_STATE,
			kdat_ep_invalid_state_subtype(ep->state));
}

/*
 * Stops the connect timeout.  A timer already running finds ep->timer changed
 * and does nothing.  Caller holds ctx->lock.
 */
static void kdat_ep_stop_timer(struct kdat_ep *ep)
{
	struct kdat_ep_timer *t = ep->timer;

	ep->timer = NULL;
	/* 0 or -1: it fired, and the work it queued finds ep->timer changed */
	if (t && hrtimer_try_to_cancel(&t->timer) == 1) {
		kdat_obj_put(&ep->obj);
		kfree(t);
	}
}

/*
 * The only place an EP's state changes: apply the table's answer for
 * (state, stimulus), post the event it names (with the private data the
 * stimulus brought), and return the action.  Caller holds ctx->lock.
 */
unsigned int kdat_ep_step(struct kdat_ep *ep, unsigned int stimulus,
			  const void *pdata, u32 pdata_len)
{
	struct kdat_ep_step step = kdat_ep_lookup(ep->state, stimulus);

	lockdep_assert_held(&ep->obj.ctx->lock);
	if (step.action != KDAT_EP_GO)
		return step.action;
	if (step.next != ep->state) {
		ep->state = step.next;
		ep->transitions++;
		ep->obj.changed_ns = ktime_get_boottime_ns();
		/* connected: the timeout is over (and need not pin the EP meanwhile) */
		if (ep->state == KDAT_EP_CONNECTED)
			kdat_ep_stop_timer(ep);
	}
	if (step.event != KDAT_EP_EVENT_NONE) {
		ep->obj.last_event = step.event;
		ep->obj.events++;
	}
	/* the record first: a consumer woken by the event may read it at once */
	kdat_rec_sync(&ep->obj);
	if (step.event != KDAT_EP_EVENT_NONE)
		kdat_post_conn_event(ep, step.event, pdata, pdata_len);
	return step.action;
}

/* May this stimulus be applied now?  DAT_SUCCESS or the error to return. */
kdat_ret_t kdat_ep_check(struct kdat_ep *ep, unsigned int stimulus)
{
	struct kdat_ep_step step = kdat_ep_lookup(ep->state, stimulus);

	return step.action == KDAT_EP_INVALID ? kdat_invalid_state(ep) : KDAT_DAT_SUCCESS;
}

/* ---- QP state, driven from rdma_cm's attributes --------------------------------- */

static int kdat_qp_modify_cm(struct kdat_ep *ep, struct rdma_cm_id *id,
			     enum ib_qp_state state)
{
	ep->qp_err = false;
	return ep->ia->cm->modify_qp(id, ep->qp, state, ep->ird, ep->ord);
}

static void kdat_qp_set(struct kdat_ep *ep, enum ib_qp_state state)
{
	struct ib_qp_attr attr = { .qp_state = state };

	if (!ep->qp || (state == IB_QPS_ERR && ep->qp_err))
		return;
	ib_modify_qp(ep->qp, &attr, IB_QP_STATE);
	ep->qp_err = state == IB_QPS_ERR;
}

/*
 * RESET -> INIT on the IA's port, so receives can be posted before any
 * connection exists; connect and accept refine it (INIT -> INIT) from the
 * cm id's attributes, keeping what was posted.
 */
static int kdat_qp_init(struct kdat_ep *ep)
{
	struct ib_qp_attr attr = {
		.qp_state = IB_QPS_INIT,
		.pkey_index = 0,
		.port_num = ep->ia->port_num,
		.qp_access_flags = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE |
				   IB_ACCESS_REMOTE_READ,
	};

	if (!ep->qp)	/* a user QP: the process applies KDAT_IOC_UQP_ATTR's INIT */
		return 0;
	ep->qp_err = false;
	return ib_modify_qp(ep->qp, &attr, IB_QP_STATE | IB_QP_PKEY_INDEX | IB_QP_PORT |
			    IB_QP_ACCESS_FLAGS);
}

/* ---- addresses ---------------------------------------------------------------------- */

static void kdat_sockaddr_copy(union kdat_sockaddr *dst, const struct sockaddr *src)
{
	memset(dst, 0, sizeof(*dst));
	if (src->sa_family == AF_INET)
		dst->in = *(const struct sockaddr_in *)src;
	else if (src->sa_family == AF_INET6)
		dst->in6 = *(const struct sockaddr_in6 *)src;
}

static void kdat_sockaddr_set_port(union kdat_sockaddr *a, u16 port)
{
	if (a->sa.sa_family == AF_INET)
		a->in.sin_port = htons(port);
	else if (a->sa.sa_family == AF_INET6)
		a->in6.sin6_port = htons(port);
}

/* ---- IA ------------------------------------------------------------------------------ */

/* Parses "netdev" or an IP literal into an IPv4/IPv6 address. */
static int kdat_name_to_addr(struct net *net, const char *name, struct sockaddr_storage *ss,
			     char *netdev_name)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
	struct net_device *ndev;
	struct in_device *idev;
	int ret = -ENODEV;

	memset(ss, 0, sizeof(*ss));
	netdev_name[0] = '\0';
	if (in4_pton(name, -1, (u8 *)&sin->sin_addr.s_addr, '\0', NULL)) {
		sin->sin_family = AF_INET;
		return 0;
	}
	if (in6_pton(name, -1, sin6->sin6_addr.s6_addr, '\0', NULL)) {
		sin6->sin6_family = AF_INET6;
		return 0;
	}
	ndev = dev_get_by_name(net, name);
	if (!ndev)
		return -ENODEV;
	rcu_read_lock();
	idev = __in_dev_get_rcu(ndev);
	if (idev && idev->ifa_list) {
		const struct in_ifaddr *ifa = rcu_dereference(idev->ifa_list);

		if (ifa) {
			sin->sin_family = AF_INET;
			sin->sin_addr.s_addr = ifa->ifa_local;
			strscpy(netdev_name, ndev->name, KDAT_NAME_MAX);
			ret = 0;
		}
	}
	rcu_read_unlock();
	dev_put(ndev);
	return ret;
}

static int kdat_noop_handler(struct rdma_cm_id *id, struct rdma_cm_event *ev)
{
	return 0;
}

/*
 * handle, when set, receives the new IA's handle while ctx->lock still
 * keeps the IA alive: a racing close by handle may free it at once.  So the
 * ioctls take only the handle and pass out == NULL: they never hold the
 * pointer.
 */
kdat_ret_t kdat_ia_open_in(struct kdat_ctx *ctx, const char *name, struct kdat_ia **out,
			   u32 *handle)
{
	struct kdat_device *kdev;
	struct rdma_cm_id *probe;
	struct kdat_ia *ia;
	kdat_ret_t ret;
	int err;

	ia = kzalloc(sizeof(*ia), GFP_KERNEL);
	if (!ia)
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
	INIT_LIST_HEAD(&ia->evds);
	INIT_LIST_HEAD(&ia->eps);
	INIT_LIST_HEAD(&ia->sps);
	INIT_LIST_HEAD(&ia->crs);
	INIT_LIST_HEAD(&ia->lmrs);
	INIT_LIST_HEAD(&ia->rmrs);
	atomic_set(&ia->eps_finishing, 0);
	init_waitqueue_head(&ia->finish_wq);
	INIT_LIST_HEAD(&ia->dev_node);
	ia->cm = &kdat_cm_rdma;

	if (kdat_name_to_addr(ctx->net, name, &ia->addr, ia->netdev_name)) {
		ret = kdat_err(KDAT_DAT_PROVIDER_NOT_FOUND, KDAT_DAT_NO_SUBTYPE);
		goto err_free;
	}
	/* Binding an id to the address tells which RDMA device serves it. */
	probe = rdma_create_id(ctx->net, kdat_noop_handler, NULL, RDMA_PS_TCP, IB_QPT_RC);
	if (IS_ERR(probe)) {
		ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_DEVICE);
		goto err_free;
	}
	err = rdma_bind_addr(probe, (struct sockaddr *)&ia->addr);
	if (err || !probe->device) {
		rdma_destroy_id(probe);
		ret = kdat_err(KDAT_DAT_PROVIDER_NOT_FOUND, KDAT_DAT_NO_SUBTYPE);
		goto err_free;
	}
	ia->ibdev = probe->device;
	ia->port_num = probe->port_num;
	if (!ia->netdev_name[0]) {
		struct net_device *ndev =
			dev_get_by_index(ctx->net, probe->route.addr.dev_addr.bound_dev_if);

		if (ndev) {
			strscpy(ia->netdev_name, ndev->name, KDAT_NAME_MAX);
			dev_put(ndev);
		}
	}
	rdma_destroy_id(probe);

	ia->pd = ib_alloc_pd(ia->ibdev, 0);
	if (IS_ERR(ia->pd)) {
		ia->pd = NULL;
		ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_PROTECTION_DOMAIN);
		goto err_free;
	}

	mutex_lock(&ctx->lock);
	if (kdat_obj_add(ctx, &ia->obj, KDAT_OBJ_IA)) {
		mutex_unlock(&ctx->lock);
		ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
		goto err_pd;
	}
	mutex_lock(&kdat_devices_lock);
	kdev = kdat_device_find(ia->ibdev);
	if (!kdev) {
		/* the device is going away under us */
		mutex_unlock(&kdat_devices_lock);
		kdat_obj_unlink(&ia->obj);
		mutex_unlock(&ctx->lock);
		ib_dealloc_pd(ia->pd);
		kdat_obj_put(&ia->obj);
		return kdat_err(KDAT_DAT_PROVIDER_NOT_FOUND, KDAT_DAT_NO_SUBTYPE);
	}
	ia->kdev = kdev;
	list_add_tail(&ia->dev_node, &kdev->ias);
	mutex_unlock(&kdat_devices_lock);
	list_add_tail(&ia->ctx_node, &ctx->ias);
	kdat_rec_sync(&ia->obj);
	if (handle)
		*handle = ia->obj.handle;
	mutex_unlock(&ctx->lock);
	if (out)
		*out = ia;
	return KDAT_DAT_SUCCESS;

err_pd:
	ib_dealloc_pd(ia->pd);
err_free:
	kfree(ia);
	return ret;
}

kdat_ret_t kdat_ia_query(struct kdat_ia *ia, struct kdat_ia_info *info)
{
	struct kdat_ctx *ctx = ia->obj.ctx;
	kdat_ret_t ret = KDAT_DAT_SUCCESS;

	memset(info, 0, sizeof(*info));
	mutex_lock(&ctx->lock);
	if (ia->obj.dead) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_IA);
		goto out;
	}
	if (ia->removed) {
		ret = kdat_err(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE);
		goto out;
	}
	strscpy(info->device_name, dev_name(&ia->ibdev->dev), KDAT_NAME_MAX);
	strscpy(info->netdev_name, ia->netdev_name, KDAT_NAME_MAX);
	info->local_addr = ia->addr;
	info->max_connect_private_data = KDAT_IB_CONNECT_PDATA;
	info->max_accept_private_data = KDAT_IB_ACCEPT_PDATA;
	info->max_reject_private_data = KDAT_IB_REJECT_PDATA;
	info->max_rdma_read_in = min_t(u32, ia->ibdev->attrs.max_qp_rd_atom, U8_MAX);
	info->max_rdma_read_out = min_t(u32, ia->ibdev->attrs.max_qp_init_rd_atom, U8_MAX);
	info->max_eps = KDAT_MAX_EPS;
	info->max_evd_qlen = KDAT_MAX_EVD_QLEN;
	info->max_dtos = ia->ibdev->attrs.max_qp_wr;
	info->max_iov = ia->ibdev->attrs.max_send_sge;
	info->supported_qos = KDAT_DAT_QOS_BEST_EFFORT;
out:
	mutex_unlock(&ctx->lock);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_ia_query);

/* ---- EVD ------------------------------------------------------------------------------ */

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

/* handle: as for kdat_ia_open_in() */
kdat_ret_t kdat_evd_create_in(struct kdat_ia *ia, u32 qlen, u32 flags, kdat_upcall_t upcall,
			      void *context, struct kdat_evd **out, u32 *handle)
{
	struct kdat_ctx *ctx = ia->obj.ctx;
	struct kdat_evd *evd;
	kdat_ret_t ret = KDAT_DAT_SUCCESS;

	if (qlen == 0 || qlen > KDAT_MAX_EVD_QLEN)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	if (!flags || (flags & ~KDAT_EVD_FLAGS_ALL))
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG3);
	evd = kzalloc(sizeof(*evd), GFP_KERNEL);
	if (!evd)
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
	evd->qlen = qlen;
	evd->flags = flags;
	evd->upcall = upcall;
	evd->upcall_context = context;
	spin_lock_init(&evd->lock);
	INIT_LIST_HEAD(&evd->events);
	init_waitqueue_head(&evd->wq);

	mutex_lock(&ctx->lock);
	if (ia->obj.dead || ia->closing) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_IA);
	} else if (ia->removed) {	/* like every other create on a gone device */
		ret = kdat_err(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE);
	} else if (kdat_obj_add(ctx, &evd->obj, KDAT_OBJ_EVD)) {
		ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
	} else {
		evd->ia = ia;
		kdat_obj_get_ref(&ia->obj);
		list_add_tail(&evd->ia_node, &ia->evds);
		kdat_rec_sync(&evd->obj);
		if (handle)
			*handle = evd->obj.handle;
		if (out)
			*out = evd;
	}
	mutex_unlock(&ctx->lock);
	if (ret)
		kfree(evd);
	return ret;
}

kdat_ret_t kdat_evd_create(struct kdat_ia *ia, u32 qlen, u32 flags,
			   kdat_upcall_t upcall, void *context, struct kdat_evd **out)
{
	return kdat_evd_create_in(ia, qlen, flags, upcall, context, out, NULL);
}
EXPORT_SYMBOL_GPL(kdat_evd_create);

static void kdat_evd_drain(struct kdat_evd *evd)
{
	struct kdat_qevent *qe, *tmp;
	unsigned long flags;
	LIST_HEAD(events);

	spin_lock_irqsave(&evd->lock, flags);
	list_splice_init(&evd->events, &events);
	evd->count = 0;
	spin_unlock_irqrestore(&evd->lock, flags);
	list_for_each_entry_safe(qe, tmp, &events, node) {
		kdat_event_put_refs(&qe->info);
		kfree(qe);
	}
}

/* Caller holds ctx->lock; drops the table's reference. */
static void kdat_evd_kill(struct kdat_evd *evd)
{
	kdat_obj_unlink(&evd->obj);
	list_del_init(&evd->ia_node);
	spin_lock_irq(&evd->lock);
	if (evd->ring)
		kdat_ring_kill(evd);
	spin_unlock_irq(&evd->lock);
	kdat_evd_drain(evd);
	wake_up_all(&evd->wq);
	kdat_obj_put(&evd->ia->obj);
	kdat_obj_put(&evd->obj);
}

kdat_ret_t kdat_evd_free(struct kdat_evd *evd)
{
	struct kdat_ctx *ctx = evd->obj.ctx;
	kdat_ret_t ret = KDAT_DAT_SUCCESS;

	mutex_lock(&ctx->lock);
	if (evd->obj.dead)
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_NO_SUBTYPE);
	else if (evd->users)
		ret = kdat_err(KDAT_DAT_INVALID_STATE, KDAT_DAT_INVALID_STATE_EVD_IN_USE);
	else if (READ_ONCE(evd->waiters))
		ret = kdat_err(KDAT_DAT_INVALID_STATE, KDAT_DAT_INVALID_STATE_EVD_WAITER);
	else
		kdat_evd_kill(evd);
	mutex_unlock(&ctx->lock);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_evd_free);

/* Takes the oldest event, converting nothing: handles are read by the caller. */
static kdat_ret_t kdat_evd_take(struct kdat_evd *evd, struct kdat_event_info *ev,
				u32 *nmore)
{
	struct kdat_qevent *qe = NULL;
	unsigned long flags;
	bool lost;

	spin_lock_irqsave(&evd->lock, flags);
	lost = evd->lost;
	evd->lost = 0;
	if (!lost && !list_empty(&evd->events)) {
		qe = list_first_entry(&evd->events, struct kdat_qevent, node);
		list_del(&qe->node);
		evd->count--;
	}
	if (nmore)
		*nmore = evd->count;
	spin_unlock_irqrestore(&evd->lock, flags);
	if (lost)
		return kdat_err(KDAT_DAT_QUEUE_FULL, KDAT_DAT_NO_SUBTYPE);
	if (!qe)
		return kdat_err(KDAT_DAT_QUEUE_EMPTY, KDAT_DAT_NO_SUBTYPE);
	*ev = qe->info;
	kfree(qe);
	return KDAT_DAT_SUCCESS;
}

kdat_ret_t kdat_evd_dequeue_ref(struct kdat_evd *evd, struct kdat_event_info *ev, u32 *nmore)
{
	if (READ_ONCE(evd->obj.dead))
		return kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_NO_SUBTYPE);
	return kdat_evd_take(evd, ev, nmore);
}

static bool kdat_evd_ready(struct kdat_evd *evd, u32 threshold)
{
	bool ready;

	spin_lock_irq(&evd->lock);
	ready = evd->count >= threshold || evd->lost || READ_ONCE(evd->obj.dead);
	spin_unlock_irq(&evd->lock);
	return ready;
}

kdat_ret_t kdat_evd_wait_ref(struct kdat_evd *evd, u32 timeout_us, u32 threshold,
			     struct kdat_event_info *ev, u32 *nmore)
{
	int err;

	if (threshold == 0 || threshold > evd->qlen)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG3);
	spin_lock_irq(&evd->lock);
	evd->waiters++;
	spin_unlock_irq(&evd->lock);
	err = kdat_wait_event_us(evd->wq, kdat_evd_ready(evd, threshold), timeout_us);
	spin_lock_irq(&evd->lock);
	evd->waiters--;
	spin_unlock_irq(&evd->lock);
	if (READ_ONCE(evd->obj.dead))
		return kdat_err(KDAT_DAT_ABORT, KDAT_DAT_NO_SUBTYPE);
	if (err == -ERESTARTSYS)
		return kdat_err(KDAT_DAT_INTERRUPTED_CALL, KDAT_DAT_NO_SUBTYPE);
	if (err && !kdat_evd_ready(evd, threshold))
		return kdat_err(KDAT_DAT_TIMEOUT_EXPIRED, KDAT_DAT_NO_SUBTYPE);
	return kdat_evd_take(evd, ev, nmore);
}

static bool kdat_evd_ring_ready(struct kdat_evd *evd, u32 threshold)
{
	bool ready;

	spin_lock_irq(&evd->lock);
	ready = evd->obj.dead || evd->lost || kdat_ring_ready(evd, threshold);
	spin_unlock_irq(&evd->lock);
	return ready;
}

/*
 * A ring EVD's wait: until the ring holds threshold events (the backlog
 * moved in first), then take one into out if asked.  timeout_us 0 looks
 * once.  available: events left in the ring.
 */
kdat_ret_t kdat_evd_ring_wait(struct kdat_evd *evd, u32 timeout_us, u32 threshold,
			      struct kdat_event *out, u32 *nmore, u32 *available)
{
	kdat_ret_t ret = KDAT_DAT_SUCCESS;
	int err = 0;

	if (threshold == 0 || threshold > kdat_ring_entries(evd))
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG3);
	if (timeout_us) {
		spin_lock_irq(&evd->lock);
		evd->waiters++;
		spin_unlock_irq(&evd->lock);
		err = kdat_wait_event_us(evd->wq, kdat_evd_ring_ready(evd, threshold), timeout_us);
		spin_lock_irq(&evd->lock);
		evd->waiters--;
		spin_unlock_irq(&evd->lock);
	}
	spin_lock_irq(&evd->lock);
	if (evd->obj.dead) {
		ret = kdat_err(KDAT_DAT_ABORT, KDAT_DAT_NO_SUBTYPE);
	} else if (evd->lost) {
		/* reported once; the events behind it are still in order */
		evd->lost = 0;
		kdat_ring_fill(evd, NULL);
		ret = kdat_err(KDAT_DAT_QUEUE_FULL, KDAT_DAT_NO_SUBTYPE);
	} else if (kdat_ring_ready(evd, threshold)) {
		if (out && !kdat_ring_take(evd, out, nmore))
			ret = kdat_err(KDAT_DAT_QUEUE_EMPTY, KDAT_DAT_NO_SUBTYPE);
	} else if (err == -ERESTARTSYS) {
		ret = kdat_err(KDAT_DAT_INTERRUPTED_CALL, KDAT_DAT_NO_SUBTYPE);
	} else {
		ret = kdat_err(KDAT_DAT_TIMEOUT_EXPIRED, KDAT_DAT_NO_SUBTYPE);
	}
	if (available)
		*available = kdat_ring_available(evd);
	spin_unlock_irq(&evd->lock);
	return ret;
}

/* The in-kernel API: the consumer owns the objects an event names. */
kdat_ret_t kdat_evd_wait(struct kdat_evd *evd, u32 timeout_us, u32 threshold,
			 struct kdat_event_info *ev, u32 *nmore)
{
	kdat_ret_t ret = kdat_evd_wait_ref(evd, timeout_us, threshold, ev, nmore);

	if (!ret)
		kdat_event_put_refs(ev);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_evd_wait);

kdat_ret_t kdat_evd_dequeue(struct kdat_evd *evd, struct kdat_event_info *ev, u32 *nmore)
{
	kdat_ret_t ret = kdat_evd_dequeue_ref(evd, ev, nmore);

	if (!ret)
		kdat_event_put_refs(ev);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_evd_dequeue);

/* ---- EP --------------------------------------------------------------------------------- */

static int kdat_cm_handler(struct rdma_cm_id *id, struct rdma_cm_event *ev);

static kdat_ret_t kdat_ep_attr_check(struct kdat_ia *ia, const struct kdat_ep_attr *a)
{
	struct ib_device_attr *d = &ia->ibdev->attrs;

	if (a->max_rdma_read_in > min_t(u32, d->max_qp_rd_atom, U8_MAX) ||
	    a->max_rdma_read_out > min_t(u32, d->max_qp_init_rd_atom, U8_MAX) ||
	    a->retry_count > 7 || a->rnr_retry_count > 7 || a->flow_control > 1 ||
	    memchr_inv(a->reserved, 0, sizeof(a->reserved)))
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG5);
	if (a->max_recv_dtos > d->max_qp_wr || a->max_request_dtos > d->max_qp_wr ||
	    a->max_recv_iov > d->max_recv_sge || a->max_request_iov > d->max_send_sge)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG5);
	return KDAT_DAT_SUCCESS;
}

static void kdat_ep_attr_defaults(struct kdat_ia *ia, struct kdat_ep_attr *a)
{
	if (!a->max_recv_dtos)
		a->max_recv_dtos = KDAT_DEFAULT_DTOS;
	if (!a->max_request_dtos)
		a->max_request_dtos = KDAT_DEFAULT_DTOS;
	if (!a->max_recv_iov)
		a->max_recv_iov = KDAT_DEFAULT_IOV;
	if (!a->max_request_iov)
		a->max_request_iov = KDAT_DEFAULT_IOV;
	if (!a->retry_count)
		a->retry_count = 7;
	if (!a->rnr_retry_count)
		a->rnr_retry_count = 7;
}

static void kdat_ep_qp_event(struct ib_event *ev, void *ctx)
{
}

/*
 * Keeps the IA's PD and device (teardown and device removal wait for it)
 * while an EP's QP is made outside ctx->lock; fails once the IA is closing
 * or its device is gone.
 */
static kdat_ret_t kdat_ia_use_pd(struct kdat_ia *ia)
{
	struct kdat_ctx *ctx = ia->obj.ctx;
	kdat_ret_t ret = KDAT_DAT_SUCCESS;

	mutex_lock(&ctx->lock);
	if (ia->obj.dead || ia->closing)
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_IA);
	else if (ia->removed)
		ret = kdat_err(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE);
	else
		atomic_inc(&ia->eps_finishing);
	mutex_unlock(&ctx->lock);
	return ret;
}

static void kdat_ia_unuse_pd(struct kdat_ia *ia)
{
	if (atomic_dec_and_test(&ia->eps_finishing))
		wake_up_all(&ia->finish_wq);
}

static int kdat_ep_alloc_qp(struct kdat_ep *ep)
{
	struct kdat_ia *ia = ep->ia;
	struct ib_qp_init_attr init = {};
	const struct kdat_ep_attr *a = &ep->attr;

	/* one extra slot per queue for ib_drain_qp()'s marker requests */
	ep->cq = ib_alloc_cq(ia->ibdev, ep, a->max_recv_dtos + a->max_request_dtos + 2,
			     0, IB_POLL_WORKQUEUE);
	if (IS_ERR(ep->cq)) {
		ep->cq = NULL;
		return -ENOMEM;
	}
	init.event_handler = kdat_ep_qp_event;
	init.qp_context = ep;
	init.send_cq = ep->cq;
	init.recv_cq = ep->cq;
	init.cap.max_send_wr = a->max_request_dtos + 1;
	init.cap.max_recv_wr = a->max_recv_dtos + 1;
	init.cap.max_send_sge = a->max_request_iov;
	init.cap.max_recv_sge = a->max_recv_iov;
	init.sq_sig_type = IB_SIGNAL_REQ_WR;
	init.qp_type = IB_QPT_RC;
	ep->qp = ib_create_qp(ia->pd, &init);
	if (IS_ERR(ep->qp)) {
		ep->qp = NULL;
		ib_free_cq(ep->cq);
		ep->cq = NULL;
		return -ENOMEM;
	}
	return 0;
}

static void kdat_ep_free_qp(struct kdat_ep *ep);

/* uqp: a user QP's state (kdat_uqp.c), which the EP takes over; NULL: a kernel QP. */
static struct kdat_ep *kdat_ep_new(struct kdat_ia *ia, const struct kdat_ep_attr *attr,
				   struct kdat_uqp *uqp, kdat_ret_t *ret)
{
	struct kdat_ep *ep;

	*ret = kdat_ep_attr_check(ia, attr);
	if (*ret)
		return NULL;
	*ret = kdat_ia_use_pd(ia);
	if (*ret)
		return NULL;
	ep = kzalloc(sizeof(*ep), GFP_KERNEL);
	if (!ep) {
		kdat_ia_unuse_pd(ia);
		*ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
		return NULL;
	}
	ep->ia = ia;
	ep->cm = ia->cm;
	ep->attr = *attr;
	kdat_ep_attr_defaults(ia, &ep->attr);
	ep->state = KDAT_EP_UNCONNECTED;
	INIT_LIST_HEAD(&ep->ia_node);
	if (!uqp && kdat_ep_alloc_qp(ep)) {
		kfree(ep);
		kdat_ia_unuse_pd(ia);
		*ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_TEP);
		return NULL;
	}
	if (kdat_ep_dto_init(ep, ia->own_ctx && !uqp) || kdat_qp_init(ep)) {
		kdat_ep_free_qp(ep);
		kdat_ep_dto_exit(ep);
		kfree(ep);
		kdat_ia_unuse_pd(ia);
		*ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
		return NULL;
	}
	ep->uqp = uqp;
	return ep;	/* the caller links or discards it, then kdat_ia_unuse_pd() */
}

static void kdat_ep_free_qp(struct kdat_ep *ep)
{
	if (ep->qp)
		ib_destroy_qp(ep->qp);
	if (ep->cq)
		ib_free_cq(ep->cq);	/* waits for completion processing */
	ep->qp = NULL;
	ep->cq = NULL;
}

/* An EP that never got linked: everything it allocated. */
static void kdat_ep_discard(struct kdat_ep *ep)
{
	kdat_ep_free_qp(ep);
	kdat_ep_dto_exit(ep);
	kfree(ep);
}

static void kdat_evd_use(struct kdat_evd *evd)
{
	if (evd) {
		evd->users++;
		kdat_obj_get_ref(&evd->obj);
	}
}

static void kdat_evd_unuse(struct kdat_evd *evd)
{
	if (evd) {
		evd->users--;
		kdat_obj_put(&evd->obj);
	}
}

/* Links a new EP into ctx and its IA; caller holds ctx->lock. */
static kdat_ret_t kdat_ep_link(struct kdat_ep *ep, struct kdat_evd *conn,
			       struct kdat_evd *req, struct kdat_evd *recv)
{
	struct kdat_ia *ia = ep->ia;

	if (kdat_obj_add(ia->obj.ctx, &ep->obj, KDAT_OBJ_EP))
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
	ep->connect_evd = conn;
	ep->request_evd = req;
	ep->recv_evd = recv;
	kdat_evd_use(conn);
	kdat_evd_use(req);
	kdat_evd_use(recv);
	kdat_obj_get_ref(&ia->obj);
	list_add_tail(&ep->ia_node, &ia->eps);
	kdat_rec_sync(&ep->obj);
	return KDAT_DAT_SUCCESS;
}

static bool kdat_evd_fits(struct kdat_evd *evd, struct kdat_ia *ia, u32 flag)
{
	return !evd || (!evd->obj.dead && evd->ia == ia && (evd->flags & flag));
}

/*
 * An EP with a kernel QP, or (uqp set) one for a user QP: then uqp is the
 * EP's on success and the caller's to free on failure.
 */
kdat_ret_t kdat_ep_create_in(struct kdat_ia *ia, struct kdat_evd *conn,
			     struct kdat_evd *req, struct kdat_evd *recv,
			     const struct kdat_ep_attr *attr, struct kdat_uqp *uqp,
			     struct kdat_ep **out, u32 *handle)
{
	static const struct kdat_ep_attr zero;
	struct kdat_ctx *ctx = ia->obj.ctx;
	struct kdat_ep *ep;
	kdat_ret_t ret;

	if (!conn)
		return kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EVD_CONN);
	if (ia->removed)
		return kdat_err(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE);
	ep = kdat_ep_new(ia, attr ? attr : &zero, uqp, &ret);
	if (!ep)
		return ret;
	mutex_lock(&ctx->lock);
	if (ia->obj.dead || ia->closing)
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_IA);
	else if (ia->removed)
		ret = kdat_err(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE);
	else if (!kdat_evd_fits(conn, ia, KDAT_EVD_CONNECTION))
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EVD_CONN);
	else if (!kdat_evd_fits(req, ia, KDAT_EVD_DTO))
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EVD_REQUEST);
	else if (!kdat_evd_fits(recv, ia, KDAT_EVD_DTO))
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EVD_RECV);
	else if (uqp && kdat_uqp_qpn_in_use(ia, uqp))
		ret = kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG5);
	else
		ret = kdat_ep_link(ep, conn, req, recv);
	if (!ret && handle)
		*handle = ep->obj.handle;	/* as for kdat_ia_open_in() */
	mutex_unlock(&ctx->lock);
	if (ret) {
		ep->uqp = NULL;		/* still the caller's */
		kdat_ep_discard(ep);
	}
	kdat_ia_unuse_pd(ia);
	if (ret)
		return ret;
	if (out)
		*out = ep;
	return KDAT_DAT_SUCCESS;
}

kdat_ret_t kdat_ep_create(struct kdat_ia *ia, struct kdat_evd *conn,
			  struct kdat_evd *req, struct kdat_evd *recv,
			  const struct kdat_ep_attr *attr, struct kdat_ep **out)
{
	return kdat_ep_create_in(ia, conn, req, recv, attr, NULL, out, NULL);
}
EXPORT_SYMBOL_GPL(kdat_ep_create);

/*
 * Detaches the EP's connection id (and stops its timer); the caller destroys
 * the id once ctx->lock is dropped.  Caller holds ctx->lock.
 */
struct rdma_cm_id *kdat_ep_detach_id(struct kdat_ep *ep)
{
	struct rdma_cm_id *id = ep->cm_id;

	ep->cm_id = NULL;
	kdat_ep_stop_timer(ep);
	return id;
}

/* Destroys an id that held a reference on its EP; no locks held. */
void kdat_ep_destroy_id(struct kdat_ep *ep, struct rdma_cm_id *id)
{
	if (!id)
		return;
	kdat_uqp_wait_unpinned(ep);	/* a UQP_ESTABLISH may be taking its handler mutex */
	ep->cm->destroy_id(id);
	kdat_obj_put(&ep->obj);
}

/* Deferred destruction of an id whose handler is running (it may not destroy itself). */
struct kdat_id_work {
	struct work_struct work;
	const struct kdat_cm_ops *cm;
	struct rdma_cm_id *id;
	struct kdat_obj *obj;
};

static void kdat_id_destroy_work(struct work_struct *work)
{
	struct kdat_id_work *w = container_of(work, struct kdat_id_work, work);

	if (w->obj && w->obj->type == KDAT_OBJ_EP)
		kdat_uqp_wait_unpinned((struct kdat_ep *)w->obj);
	w->cm->destroy_id(w->id);
	kdat_obj_put(w->obj);
	kfree(w);
}

static void kdat_destroy_id_later(const struct kdat_cm_ops *cm, struct rdma_cm_id *id,
				  struct kdat_obj *obj)
{
	struct kdat_id_work *w;

	if (!id)
		return;
	w = kmalloc(sizeof(*w), GFP_KERNEL | __GFP_NOFAIL);
	w->cm = cm;
	w->id = id;
	w->obj = obj;
	INIT_WORK(&w->work, kdat_id_destroy_work);
	queue_work(kdat_wq, &w->work);
}

/*
 * Our own DREQ.  Until the CM reports DISCONNECTED (the DREP, or the DREQ
 * timed out) the id must live: destroying it cancels a DREQ the MAD layer
 * has not sent yet, and the peer would never hear of the disconnect.  So a
 * freed or reset EP leaves such an id to an orphan.  Caller holds ctx->lock.
 */
void kdat_ep_send_dreq(struct kdat_ep *ep)
{
	if (!ep->cm_id)
		return;
	ep->dreq_pending = true;
	ep->ia->cm->disconnect(ep->cm_id);
}

/*
 * Takes the EP off the wire at once (abrupt): DREQ if connected, QP to ERR
 * so posted work is flushed.  Caller holds ctx->lock.
 */
static void kdat_ep_abort_wire(struct kdat_ep *ep)
{
	if (ep->cm_id && (ep->state == KDAT_EP_CONNECTED ||
			  ep->state == KDAT_EP_DISCONNECT_PENDING))
		kdat_ep_send_dreq(ep);
	kdat_qp_set(ep, IB_QPS_ERR);
}

static struct rdma_cm_id *kdat_orphan_adopt(struct kdat_ep *ep, struct rdma_cm_id *id);
static void kdat_orphan_retire(struct rdma_cm_id *id);

/* Caller holds ctx->lock; returns the id to destroy after unlocking. */
static struct rdma_cm_id *kdat_ep_kill(struct kdat_ep *ep)
{
	struct rdma_cm_id *id;

	kdat_ep_abort_wire(ep);
	kdat_obj_unlink(&ep->obj);
	list_del_init(&ep->ia_node);
	atomic_inc(&ep->ia->eps_finishing);	/* until kdat_ep_finish() freed the QP */
	if (ep->rsp && ep->rsp->ep == ep) {
		ep->rsp->ep = NULL;
		kdat_obj_put(&ep->obj);
	}
	ep->rsp = NULL;
	id = kdat_ep_detach_id(ep);
	/* accepted but not established, or our DREQ unanswered: finish it later */
	if (id && (ep->state == KDAT_EP_COMPLETION_PENDING || ep->dreq_pending))
		id = kdat_orphan_adopt(ep, id);
	return id;
}

/* After kdat_ep_kill() and dropping ctx->lock: release IB resources and references. */
static void kdat_ep_finish(struct kdat_ep *ep, struct rdma_cm_id *id)
{
	struct kdat_ctx *ctx = ep->obj.ctx;

	kdat_ep_destroy_id(ep, id);
	cancel_work_sync(&ep->graceful_work);
	/* No completion can run after this: only then may the EVDs go. */
	kdat_ep_free_qp(ep);
	kdat_ep_dto_exit(ep);
	if (atomic_dec_and_test(&ep->ia->eps_finishing))
		wake_up_all(&ep->ia->finish_wq);
	mutex_lock(&ctx->lock);
	kdat_evd_unuse(ep->connect_evd);
	kdat_evd_unuse(ep->request_evd);
	kdat_evd_unuse(ep->recv_evd);
	ep->connect_evd = NULL;
	ep->request_evd = NULL;
	ep->recv_evd = NULL;
	mutex_unlock(&ctx->lock);
	kdat_obj_put(&ep->ia->obj);
	kdat_obj_put(&ep->obj);		/* the handle table's */
}

kdat_ret_t kdat_ep_free(struct kdat_ep *ep)
{
	struct kdat_ctx *ctx = ep->obj.ctx;
	struct rdma_cm_id *id;

	mutex_lock(&ctx->lock);
	if (ep->obj.dead) {
		mutex_unlock(&ctx->lock);
		return kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
	}
	id = kdat_ep_kill(ep);
	mutex_unlock(&ctx->lock);
	kdat_ep_finish(ep, id);
	return KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(kdat_ep_free);

kdat_ret_t kdat_ep_query(struct kdat_ep *ep, struct kdat_ep_info *info)
{
	struct kdat_ctx *ctx = ep->obj.ctx;

	memset(info, 0, sizeof(*info));
	mutex_lock(&ctx->lock);
	if (ep->obj.dead) {
		mutex_unlock(&ctx->lock);
		return kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
	}
	info->state = ep->state;
	info->attr = ep->attr;
	if (ep->state == KDAT_EP_CONNECTED || ep->state == KDAT_EP_DISCONNECT_PENDING) {
		info->attr.max_rdma_read_in = ep->ird;
		info->attr.max_rdma_read_out = ep->ord;
	}
	if (ep->cm_id) {
		kdat_sockaddr_copy(&ep->local_addr, (struct sockaddr *)&ep->cm_id->route.addr.src_addr);
		kdat_sockaddr_copy(&ep->remote_addr, (struct sockaddr *)&ep->cm_id->route.addr.dst_addr);
	}
	memcpy(&info->local_addr, &ep->local_addr, sizeof(ep->local_addr));
	memcpy(&info->remote_addr, &ep->remote_addr, sizeof(ep->remote_addr));
	info->transitions = ep->transitions;
	mutex_unlock(&ctx->lock);
	return KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(kdat_ep_query);

kdat_ret_t kdat_ep_modify(struct kdat_ep *ep, u32 mask, const struct kdat_ep_attr *a)
{
	struct kdat_ctx *ctx = ep->obj.ctx;
	struct kdat_ep_attr next;
	kdat_ret_t ret;

	if (!mask || (mask & ~KDAT_EP_ATTR_ALL))
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	mutex_lock(&ctx->lock);
	if (ep->obj.dead) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
		goto out;
	}
	ret = kdat_ep_check(ep, KDAT_EP_STIM_MODIFY);
	if (ret)
		goto out;
	next = ep->attr;
	if (mask & KDAT_EP_ATTR_RDMA_READ_IN)
		next.max_rdma_read_in = a->max_rdma_read_in;
	if (mask & KDAT_EP_ATTR_RDMA_READ_OUT)
		next.max_rdma_read_out = a->max_rdma_read_out;
	if (mask & KDAT_EP_ATTR_RETRY_COUNT)
		next.retry_count = a->retry_count;
	if (mask & KDAT_EP_ATTR_RNR_RETRY_COUNT)
		next.rnr_retry_count = a->rnr_retry_count;
	if (mask & KDAT_EP_ATTR_FLOW_CONTROL)
		next.flow_control = a->flow_control;
	ret = kdat_ep_attr_check(ep->ia, &next);
	if (!ret) {
		ep->attr = next;
		kdat_ep_step(ep, KDAT_EP_STIM_MODIFY, NULL, 0);
	}
out:
	mutex_unlock(&ctx->lock);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_ep_modify);

kdat_ret_t kdat_ep_reset(struct kdat_ep *ep)
{
	struct kdat_ctx *ctx = ep->obj.ctx;
	struct rdma_cm_id *id = NULL;
	kdat_ret_t ret;

	mutex_lock(&ctx->lock);
	if (ep->obj.dead) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
	} else if (ep->ia->removed) {
		ret = kdat_invalid_state(ep);
	} else {
		ret = kdat_ep_check(ep, KDAT_EP_STIM_RESET);
		if (!ret) {
			id = kdat_ep_detach_id(ep);
			if (ep->dreq_pending)	/* see kdat_ep_send_dreq() */
				id = kdat_orphan_adopt(ep, id);
			ep->dreq_pending = false;
			/* every posted request completes (flushed) before the QP forgets it */
			if (ep->state == KDAT_EP_DISCONNECTED)
				kdat_ep_flush(ep);
			kdat_qp_set(ep, IB_QPS_RESET);
			kdat_qp_init(ep);
			kdat_uqp_reset(ep);
			ep->graceful_pending = false;
			ep->active = false;
			ep->ird = 0;
			ep->ord = 0;
			memset(&ep->remote_addr, 0, sizeof(ep->remote_addr));
			memset(&ep->local_addr, 0, sizeof(ep->local_addr));
			kdat_ep_step(ep, KDAT_EP_STIM_RESET, NULL, 0);
		}
	}
	mutex_unlock(&ctx->lock);
	kdat_ep_destroy_id(ep, id);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_ep_reset);

static kdat_ret_t kdat_check_private_data(const void *pdata, s32 size, u32 max)
{
	if (size < 0 || size > max || (size && !pdata))
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG4);
	return KDAT_DAT_SUCCESS;
}

static kdat_ret_t kdat_check_qos(u32 qos)
{
	/* One service level: what the transport gives (DAT_QOS_BEST_EFFORT). */
	if (qos != KDAT_DAT_QOS_BEST_EFFORT)
		return kdat_err(KDAT_DAT_MODEL_NOT_SUPPORTED, KDAT_DAT_NO_SUBTYPE);
	return KDAT_DAT_SUCCESS;
}

/*
 * Starts an active connection: a new cm id resolves the address, then the
 * route, then connects (kdat_cm_handler).  Caller holds ctx->lock and has
 * checked the state; on success the EP is ACTIVE_CONNECTION_PENDING.
 */
/* kdat_ep_start_connect(): not an error for the caller, an outcome for the EP. */
#define KDAT_UNREACHABLE_NOW	1u

static void kdat_ep_timeout_work(struct work_struct *work)
{
	struct kdat_ep_timer *t = container_of(work, struct kdat_ep_timer, work);
	struct kdat_ep *ep = t->ep;
	struct kdat_ctx *ctx = ep->obj.ctx;
	struct rdma_cm_id *id = NULL;

	mutex_lock(&ctx->lock);
	if (ep->timer == t) {
		ep->timer = NULL;
		if (!ep->obj.dead && ep->state == KDAT_EP_ACTIVE_CONNECTION_PENDING) {
			/* Cancel the wire attempt for real: destroying the id sends a REJ. */
			id = ep->cm_id;
			ep->cm_id = NULL;
			kdat_qp_set(ep, IB_QPS_ERR);
			kdat_ep_step(ep, KDAT_EP_STIM_TIMEOUT, NULL, 0);
		}
	}
	mutex_unlock(&ctx->lock);
	kdat_ep_destroy_id(ep, id);
	kfree(t);
	kdat_obj_put(&ep->obj);
}

static enum hrtimer_restart kdat_ep_timer_fired(struct hrtimer *timer)
{
	struct kdat_ep_timer *t = container_of(timer, struct kdat_ep_timer, timer);

	queue_work(kdat_wq, &t->work);
	return HRTIMER_NORESTART;
}

static kdat_ret_t kdat_ep_start_connect(struct kdat_ep *ep, u32 timeout_us)
{
	/*
	 * The timeout counts from the call, not from the end of the id's
	 * creation and address lookup (tens of ms on a debug kernel).
	 */
	ktime_t deadline = ktime_add_us(ktime_get(), timeout_us);
	struct kdat_ep_timer *timer = NULL;
	struct rdma_cm_id *id;
	int err;

	if (timeout_us != KDAT_TIMEOUT_INFINITE) {
		timer = kzalloc(sizeof(*timer), GFP_KERNEL);
		if (!timer)
			return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
	}
	id = ep->ia->cm->create_id(ep->obj.ctx->net, kdat_cm_handler, ep);
	if (IS_ERR(id)) {
		kfree(timer);
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_TEP);
	}
	kdat_obj_get_ref(&ep->obj);	/* the id's */
	err = ep->ia->cm->resolve_addr(id, (struct sockaddr *)&ep->ia->addr,
				       &ep->remote_addr.sa,
				       KDAT_RESOLVE_TIMEOUT_MS);
	if (err) {
		/* rdma_destroy_id() takes the handler mutex: never under ctx->lock */
		kdat_destroy_id_later(ep->ia->cm, id, &ep->obj);
		kfree(timer);
		switch (err) {
		case -ENETUNREACH:
		case -EHOSTUNREACH:
		case -EADDRNOTAVAIL:
		case -ENODEV:
			/* No route: the attempt is made and fails (seed 000: UNREACHABLE). */
			return KDAT_UNREACHABLE_NOW;
		case -ENOMEM:
			return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
		default:
			return kdat_err(KDAT_DAT_INVALID_ADDRESS, KDAT_DAT_NO_SUBTYPE);
		}
	}
	ep->cm_id = id;
	ep->active = true;
	if (timer) {
		timer->ep = ep;
		kdat_obj_get_ref(&ep->obj);	/* the timer's */
		INIT_WORK(&timer->work, kdat_ep_timeout_work);
		hrtimer_init(&timer->timer, CLOCK_MONOTONIC, HRTIMER_MODE_ABS_SOFT);
		timer->timer.function = kdat_ep_timer_fired;
		ep->timer = timer;
		hrtimer_start(&timer->timer, deadline, HRTIMER_MODE_ABS_SOFT);
	}
	return KDAT_DAT_SUCCESS;
}

static kdat_ret_t kdat_connect_args(struct kdat_ep *ep, u32 timeout_us, const void *pdata,
				    s32 pdata_size, u32 qos)
{
	kdat_ret_t ret;

	if (timeout_us == 0)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG4);
	ret = kdat_check_private_data(pdata, pdata_size, KDAT_IB_CONNECT_PDATA);
	if (ret)
		return ret;
	return kdat_check_qos(qos);
}

static void kdat_ep_save_pdata(struct kdat_ep *ep, const void *pdata, s32 size)
{
	ep->private_data_size = size;
	if (size)
		memcpy(ep->private_data, pdata, size);
}

kdat_ret_t kdat_ep_connect(struct kdat_ep *ep, const struct sockaddr *remote,
			   u64 conn_qual, u32 timeout_us, const void *pdata,
			   s32 pdata_size, u32 qos, u32 flags)
{
	struct kdat_ctx *ctx = ep->obj.ctx;
	kdat_ret_t ret;

	if (!remote || (remote->sa_family != AF_INET && remote->sa_family != AF_INET6))
		return kdat_err(KDAT_DAT_INVALID_ADDRESS, KDAT_DAT_NO_SUBTYPE);
	if (conn_qual == 0 || conn_qual > U16_MAX)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG3);
	if (flags & ~(KDAT_CONNECT_MULTIPATH_REQUESTED | KDAT_DAT_CONNECT_MULTIPATH_REQUIRED_FLAG))
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG8);
	ret = kdat_connect_args(ep, timeout_us, pdata, pdata_size, qos);
	if (ret)
		return ret;
	if (flags & KDAT_DAT_CONNECT_MULTIPATH_REQUIRED_FLAG)	/* one path only */
		return kdat_err(KDAT_DAT_MODEL_NOT_SUPPORTED, KDAT_DAT_NO_SUBTYPE);

	mutex_lock(&ctx->lock);
	if (ep->obj.dead) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
		goto out;
	}
	ret = kdat_ep_check(ep, KDAT_EP_STIM_CONNECT);
	if (ret)
		goto out;
	if (ep->ia->removed) {
		ret = kdat_invalid_state(ep);
		goto out;
	}
	kdat_sockaddr_copy(&ep->remote_addr, remote);
	kdat_sockaddr_set_port(&ep->remote_addr, conn_qual);
	ep->conn_qual = conn_qual;
	ep->connect_flags = flags;
	kdat_ep_save_pdata(ep, pdata, pdata_size);
	ret = kdat_ep_start_connect(ep, timeout_us);
	if (ret == KDAT_UNREACHABLE_NOW) {
		kdat_ep_step(ep, KDAT_EP_STIM_CONNECT, NULL, 0);
		kdat_qp_set(ep, IB_QPS_ERR);
		kdat_ep_step(ep, KDAT_EP_STIM_UNREACHABLE, NULL, 0);
		ret = KDAT_DAT_SUCCESS;
	} else if (!ret) {
		kdat_ep_step(ep, KDAT_EP_STIM_CONNECT, NULL, 0);
	}
out:
	mutex_unlock(&ctx->lock);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_ep_connect);

kdat_ret_t kdat_ep_dup_connect(struct kdat_ep *ep, struct kdat_ep *dup, u32 timeout_us,
			       const void *pdata, s32 pdata_size, u32 qos)
{
	struct kdat_ctx *ctx = ep->obj.ctx;
	kdat_ret_t ret;

	if (!dup || dup->obj.ctx != ctx)
		return kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE2);
	ret = kdat_connect_args(ep, timeout_us, pdata, pdata_size, qos);
	if (ret)
		return ret;
	mutex_lock(&ctx->lock);
	if (ep->obj.dead) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
		goto out;
	}
	if (dup->obj.dead || dup == ep) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE2);
		goto out;
	}
	if (dup->state != KDAT_EP_CONNECTED) {
		ret = kdat_invalid_state(dup);
		goto out;
	}
	/* The remote end of a passively accepted connection is not a service. */
	if (!dup->active) {
		ret = kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
		goto out;
	}
	ret = kdat_ep_check(ep, KDAT_EP_STIM_DUP_CONNECT);
	if (ret)
		goto out;
	if (ep->ia->removed) {
		ret = kdat_invalid_state(ep);
		goto out;
	}
	/* Same remote IA address, connection qualifier and connect flags. */
	ep->remote_addr = dup->remote_addr;
	kdat_sockaddr_set_port(&ep->remote_addr, dup->conn_qual);
	ep->conn_qual = dup->conn_qual;
	ep->connect_flags = dup->connect_flags;
	kdat_ep_save_pdata(ep, pdata, pdata_size);
	ret = kdat_ep_start_connect(ep, timeout_us);
	if (ret == KDAT_UNREACHABLE_NOW) {
		kdat_ep_step(ep, KDAT_EP_STIM_DUP_CONNECT, NULL, 0);
		kdat_qp_set(ep, IB_QPS_ERR);
		kdat_ep_step(ep, KDAT_EP_STIM_UNREACHABLE, NULL, 0);
		ret = KDAT_DAT_SUCCESS;
	} else if (!ret) {
		kdat_ep_step(ep, KDAT_EP_STIM_DUP_CONNECT, NULL, 0);
	}
out:
	mutex_unlock(&ctx->lock);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_ep_dup_connect);

kdat_ret_t kdat_ep_disconnect(struct kdat_ep *ep, u32 flags)
{
	struct kdat_ctx *ctx = ep->obj.ctx;
	struct rdma_cm_id *id = NULL;
	unsigned int stim;
	u32 old;
	kdat_ret_t ret;

	if (flags != KDAT_CLOSE_ABRUPT && flags != KDAT_CLOSE_GRACEFUL)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	stim = flags == KDAT_CLOSE_GRACEFUL ? KDAT_EP_STIM_DISCONNECT_GRACEFUL :
	       KDAT_EP_STIM_DISCONNECT_ABRUPT;
	mutex_lock(&ctx->lock);
	if (ep->obj.dead) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
		goto out;
	}
	ret = kdat_ep_check(ep, stim);
	if (ret)
		goto out;
	old = ep->state;
	switch (old) {
	case KDAT_EP_CONNECTED:
		if (stim == KDAT_EP_STIM_DISCONNECT_ABRUPT) {
			/* outstanding requests complete as flushed, before DISCONNECTED */
			kdat_ep_send_dreq(ep);
			kdat_ep_flush(ep);
			break;
		}
		/*
		 * Graceful: requests in flight complete first (DISCONNECT_PENDING);
		 * the last completion sends the DREQ, and the peer's DREP (or the
		 * CM's DREQ timeout) ends it with DISCONNECTED.
		 */
		ep->graceful_pending = true;
		if (kdat_ep_graceful_ready(ep)) {
			ep->graceful_pending = false;
			kdat_ep_send_dreq(ep);
		}
		break;
	case KDAT_EP_DISCONNECT_PENDING:
		if (stim == KDAT_EP_STIM_DISCONNECT_ABRUPT) {
			ep->graceful_pending = false;
			kdat_ep_send_dreq(ep);
			kdat_ep_flush(ep);
		}
		break;
	case KDAT_EP_ACTIVE_CONNECTION_PENDING:
		/* Abort establishment: the id goes, the peer sees a REJ; receives flush. */
		id = kdat_ep_detach_id(ep);
		kdat_qp_set(ep, IB_QPS_ERR);
		break;
	case KDAT_EP_COMPLETION_PENDING:
		/* We accepted: the requester may be connected already. */
		id = kdat_orphan_adopt(ep, kdat_ep_detach_id(ep));
		kdat_qp_set(ep, IB_QPS_ERR);
		break;
	default:
		break;
	}
	kdat_ep_step(ep, stim, NULL, 0);
out:
	mutex_unlock(&ctx->lock);
	kdat_ep_destroy_id(ep, id);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_ep_disconnect);

/* ---- service points -------------------------------------------------------------------- */

static kdat_ret_t kdat_sp_listen(struct kdat_sp *sp)
{
	struct sockaddr_storage addr;
	struct rdma_cm_id *id;
	int err;

	id = sp->ia->cm->create_id(sp->obj.ctx->net, kdat_cm_handler, sp);
	if (IS_ERR(id))
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_DEVICE);
	kdat_ss_with_port(&addr, &sp->ia->addr, sp->conn_qual);
	err = sp->ia->cm->bind_addr(id, (struct sockaddr *)&addr);
	if (!err)
		err = sp->ia->cm->listen(id, sp->is_rsp ? KDAT_RSP_BACKLOG : KDAT_LISTEN_BACKLOG);
	if (err) {
		/* rdma_destroy_id() takes the handler mutex: never under ctx->lock */
		kdat_destroy_id_later(sp->ia->cm, id, NULL);
		if (err == -EADDRINUSE)
			return kdat_err(KDAT_DAT_CONN_QUAL_IN_USE, KDAT_DAT_NO_SUBTYPE);
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_NO_SUBTYPE);
	}
	kdat_obj_get_ref(&sp->obj);	/* the id's */
	sp->listen_id = id;
	return KDAT_DAT_SUCCESS;
}

/* A PSP, or (ep set) an RSP on ep; handle: as for kdat_ia_open_in() */
kdat_ret_t kdat_sp_create_in(struct kdat_ia *ia, u64 conn_qual, struct kdat_evd *evd,
			     u32 flags, struct kdat_ep *ep, struct kdat_sp **out, u32 *handle)
{
	struct kdat_ctx *ctx = ia->obj.ctx;
	struct kdat_sp *sp;
	kdat_ret_t ret;

	if (conn_qual == 0 || conn_qual > U16_MAX)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	if (flags & ~KDAT_PSP_PROVIDER)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG4);
	if (!evd)
		return kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EVD_CR);
	sp = kzalloc(sizeof(*sp), GFP_KERNEL);
	if (!sp)
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
	sp->ia = ia;
	sp->conn_qual = conn_qual;
	sp->flags = flags;
	sp->is_rsp = ep != NULL;

	mutex_lock(&ctx->lock);
	if (ia->obj.dead || ia->closing) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_IA);
		goto err;
	}
	if (ia->removed) {
		ret = kdat_err(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE);
		goto err;
	}
	if (!kdat_evd_fits(evd, ia, KDAT_EVD_CR)) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EVD_CR);
		goto err;
	}
	if (ep) {
		if (ep->obj.dead || ep->ia != ia) {
			ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
			goto err;
		}
		ret = kdat_ep_check(ep, KDAT_EP_STIM_RSP_CREATE);
		if (ret)
			goto err;
	}
	if (kdat_obj_add(ctx, &sp->obj, KDAT_OBJ_SP)) {
		ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
		goto err;
	}
	ret = kdat_sp_listen(sp);
	if (ret) {
		kdat_obj_unlink(&sp->obj);
		mutex_unlock(&ctx->lock);
		kdat_obj_put(&sp->obj);
		return ret;
	}
	sp->evd = evd;
	kdat_evd_use(evd);
	kdat_obj_get_ref(&ia->obj);
	list_add_tail(&sp->ia_node, &ia->sps);
	if (ep) {
		sp->ep = ep;
		ep->rsp = sp;
		kdat_obj_get_ref(&ep->obj);
		kdat_ep_step(ep, KDAT_EP_STIM_RSP_CREATE, NULL, 0);
	}
	kdat_rec_sync(&sp->obj);
	if (handle)
		*handle = sp->obj.handle;
	mutex_unlock(&ctx->lock);
	if (out)
		*out = sp;
	return KDAT_DAT_SUCCESS;
err:
	mutex_unlock(&ctx->lock);
	kfree(sp);
	return ret;
}

kdat_ret_t kdat_psp_create(struct kdat_ia *ia, u64 conn_qual, struct kdat_evd *evd,
			   u32 flags, struct kdat_sp **psp)
{
	return kdat_sp_create_in(ia, conn_qual, evd, flags, NULL, psp, NULL);
}
EXPORT_SYMBOL_GPL(kdat_psp_create);

kdat_ret_t kdat_rsp_create(struct kdat_ia *ia, u64 conn_qual, struct kdat_ep *ep,
			   struct kdat_evd *evd, struct kdat_sp **rsp)
{
	if (!ep)
		return kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
	return kdat_sp_create_in(ia, conn_qual, evd, KDAT_PSP_CONSUMER, ep, rsp, NULL);
}
EXPORT_SYMBOL_GPL(kdat_rsp_create);

/* Caller holds ctx->lock; returns the listening id to destroy after unlocking. */
static struct rdma_cm_id *kdat_sp_kill(struct kdat_sp *sp)
{
	struct rdma_cm_id *id = sp->listen_id;
	struct kdat_ep *ep = sp->ep;

	kdat_obj_unlink(&sp->obj);
	list_del_init(&sp->ia_node);
	sp->listen_id = NULL;
	if (ep) {
		sp->ep = NULL;
		if (ep->rsp == sp) {
			ep->rsp = NULL;
			kdat_ep_step(ep, KDAT_EP_STIM_RSP_FREE, NULL, 0);
		}
		kdat_obj_put(&ep->obj);
	}
	return id;
}

static void kdat_sp_finish(struct kdat_sp *sp, struct rdma_cm_id *id)
{
	struct kdat_ctx *ctx = sp->obj.ctx;

	if (id) {
		sp->ia->cm->destroy_id(id);
		kdat_obj_put(&sp->obj);
	}
	mutex_lock(&ctx->lock);
	kdat_evd_unuse(sp->evd);
	sp->evd = NULL;
	mutex_unlock(&ctx->lock);
	kdat_obj_put(&sp->ia->obj);
	kdat_obj_put(&sp->obj);
}

kdat_ret_t kdat_sp_free(struct kdat_sp *sp)
{
	struct kdat_ctx *ctx = sp->obj.ctx;
	struct rdma_cm_id *id;

	mutex_lock(&ctx->lock);
	if (sp->obj.dead) {
		mutex_unlock(&ctx->lock);
		return kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_PSP);
	}
	id = kdat_sp_kill(sp);
	mutex_unlock(&ctx->lock);
	kdat_sp_finish(sp, id);
	return KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(kdat_sp_free);

/* ---- connection requests ---------------------------------------------------------------- */

/* Caller holds ctx->lock; returns the child id (if still owned) to destroy. */
static struct rdma_cm_id *kdat_cr_kill(struct kdat_cr *cr)
{
	struct rdma_cm_id *id = cr->cm_id;

	kdat_obj_unlink(&cr->obj);
	list_del_init(&cr->ia_node);
	cr->cm_id = NULL;
	return id;
}

static void kdat_cr_finish(struct kdat_cr *cr, struct rdma_cm_id *id)
{
	if (id) {
		cr->ia->cm->destroy_id(id);
		kdat_obj_put(&cr->obj);		/* the id's */
	}
	kdat_obj_put(&cr->sp->obj);
	if (cr->ep)
		kdat_obj_put(&cr->ep->obj);
	kdat_obj_put(&cr->ia->obj);
	kdat_obj_put(&cr->obj);			/* the handle table's */
}

kdat_ret_t kdat_cr_query(struct kdat_cr *cr, struct kdat_cr_info *info)
{
	struct kdat_ctx *ctx = cr->obj.ctx;

	memset(info, 0, sizeof(*info));
	mutex_lock(&ctx->lock);
	if (cr->obj.dead) {
		mutex_unlock(&ctx->lock);
		return kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_CR);
	}
	info->sp = cr->sp;
	info->ep = cr->ep;
	info->remote_rdma_read_in = cr->remote_ird;
	info->remote_rdma_read_out = cr->remote_ord;
	info->remote_retry_count = cr->remote_retry_count;
	info->remote_rnr_retry_count = cr->remote_rnr_retry_count;
	info->remote_flow_control = cr->remote_flow_control;
	memcpy(&info->remote_addr, &cr->remote_addr, sizeof(cr->remote_addr));
	memcpy(&info->local_addr, &cr->local_addr, sizeof(cr->local_addr));
	info->private_data_size = cr->private_data_size;
	memcpy(info->private_data, cr->private_data, cr->private_data_size);
	mutex_unlock(&ctx->lock);
	return KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(kdat_cr_query);

/* The IRD/ORD an accept of cr on ep gets: the smaller of ours, the requester's offer and the device's. */
void kdat_ep_accept_depths(struct kdat_ep *ep, struct kdat_cr *cr, u32 *ird, u32 *ord)
{
	*ird = min3(ep->attr.max_rdma_read_in, cr->remote_ord,
		    min_t(u32, ep->ia->ibdev->attrs.max_qp_rd_atom, U8_MAX));
	*ord = min3(ep->attr.max_rdma_read_out, cr->remote_ird,
		    min_t(u32, ep->ia->ibdev->attrs.max_qp_init_rd_atom, U8_MAX));
}

/*
 * rdma_accept() must run under the id's handler mutex, which ranks above
 * ctx->lock: take it first, then revalidate everything under ctx->lock.
 */
static struct rdma_cm_id *kdat_cr_lock_id(struct kdat_cr *cr)
{
	struct kdat_ctx *ctx = cr->obj.ctx;
	struct rdma_cm_id *id;

	mutex_lock(&ctx->lock);
	id = cr->obj.dead || cr->busy ? NULL : cr->cm_id;
	/* Only the busy owner may kill the CR or take its id from here on. */
	if (id)
		cr->busy = true;
	mutex_unlock(&ctx->lock);
	if (id)
		cr->ia->cm->lock_handler(id);
	return id;
}

static void kdat_cr_unlock_id(struct kdat_cr *cr, struct rdma_cm_id *id)
{
	struct rdma_cm_id *gone = NULL;

	if (!id)
		return;
	cr->ia->cm->unlock_handler(id);
	mutex_lock(&cr->obj.ctx->lock);
	cr->busy = false;
	/*
	 * The device went while we owned the id, so kdat_ia_device_removed()
	 * left it to us: it goes now (rdma_cm's removal waits for it).
	 */
	if (cr->ia->removed && cr->cm_id == id) {
		cr->cm_id = NULL;
		cr->remote_gone = true;
		kdat_rec_sync(&cr->obj);
		gone = id;
	}
	mutex_unlock(&cr->obj.ctx->lock);
	if (gone) {
		cr->ia->cm->destroy_id(gone);
		kdat_obj_put(&cr->obj);		/* the id's */
	}
}

kdat_ret_t kdat_cr_accept(struct kdat_cr *cr, struct kdat_ep *ep, const void *pdata,
			  s32 pdata_size)
{
	struct kdat_ctx *ctx = cr->obj.ctx;
	struct rdma_conn_param param = {};
	struct rdma_cm_id *id, *dead_id = NULL;
	u8 wire[KDAT_PDATA_WIRE_MAX];
	kdat_ret_t ret;
	int err;

	ret = kdat_check_private_data(pdata, pdata_size, KDAT_IB_ACCEPT_PDATA);
	if (ret)
		return ret;
	if (ep && ep->obj.ctx != ctx)
		return kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);

	id = kdat_cr_lock_id(cr);
	mutex_lock(&ctx->lock);
	if (cr->obj.dead || !id || cr->cm_id != id) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_CR);
		goto out;
	}
	if (!ep)
		ep = cr->ep;
	if (!ep) {
		/* A consumer-flag PSP's CR names no EP: the consumer must bring one. */
		ret = kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
		goto out;
	}
	if (ep->obj.dead) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_EP);
		goto out;
	}
	if (ep->ia != cr->ia || (cr->ep && cr->ep != ep)) {
		ret = kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
		goto out;
	}
	ret = kdat_ep_check(ep, KDAT_EP_STIM_ACCEPT);
	if (ret)
		goto out;
	if (ep->ia->removed) {
		ret = kdat_invalid_state(ep);
		goto out;
	}

	kdat_ep_accept_depths(ep, cr, &ep->ird, &ep->ord);

	/* From here the CR is consumed: the id moves to the EP. */
	list_del_init(&cr->ia_node);
	kdat_obj_unlink(&cr->obj);
	cr->cm_id = NULL;
	id->context = ep;
	kdat_obj_get_ref(&ep->obj);	/* the id's; the CR's id reference goes below */
	ep->cm_id = id;
	ep->active = false;
	kdat_ep_step(ep, KDAT_EP_STIM_ACCEPT, NULL, 0);

	err = cr->remote_gone ? -ECONNRESET : 0;
	/* a user QP is in RTS already: the process applied KDAT_IOC_UQP_ATTR's */
	if (!err && !ep->uqp)
		err = kdat_qp_modify_cm(ep, id, IB_QPS_INIT);
	if (!err && !ep->uqp)
		err = kdat_qp_modify_cm(ep, id, IB_QPS_RTR);
	if (!err && !ep->uqp)
		err = kdat_qp_modify_cm(ep, id, IB_QPS_RTS);
	if (!err) {
		param.private_data = wire;
		param.private_data_len = kdat_pdata_wrap(wire, pdata, pdata_size);
		param.responder_resources = ep->ird;
		param.initiator_depth = ep->ord;
		param.flow_control = ep->attr.flow_control;
		param.rnr_retry_count = ep->attr.rnr_retry_count;
		param.qp_num = kdat_ep_qpn(ep);
		/*
		 * The REP goes out without ctx->lock (the owner's handlers wait
		 * for it); our handler mutex keeps the id, and whatever moves the
		 * EP on meanwhile (free, disconnect) hands the id to an orphan.
		 */
		mutex_unlock(&ctx->lock);
		err = ep->cm->accept(id, &param);
		mutex_lock(&ctx->lock);
		if (ep->obj.dead || ep->cm_id != id || ep->state != KDAT_EP_COMPLETION_PENDING) {
			if (err)
				kdat_orphan_retire(id);
			err = 0;
		}
	}
	if (err) {
		/* Establishment cannot complete: seed 003's ACCEPT_COMPLETION_ERROR. */
		dead_id = kdat_ep_detach_id(ep);
		kdat_qp_set(ep, IB_QPS_ERR);
		kdat_ep_step(ep, KDAT_EP_STIM_ACCEPT_FAILED, NULL, 0);
	}
out:
	mutex_unlock(&ctx->lock);
	kdat_cr_unlock_id(cr, id);
	if (!ret) {
		/* the consumed CR: its id reference moved to the EP above */
		kdat_obj_put(&cr->obj);
		kdat_cr_finish(cr, NULL);
		if (dead_id)
			kdat_destroy_id_later(ep->ia->cm, dead_id, &ep->obj);
	}
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_cr_accept);

kdat_ret_t kdat_cr_reject(struct kdat_cr *cr, const void *pdata, s32 pdata_size)
{
	struct kdat_ctx *ctx = cr->obj.ctx;
	struct kdat_ep *provider_ep = NULL;
	struct rdma_cm_id *id, *ep_id = NULL;
	kdat_ret_t ret;

	ret = kdat_check_private_data(pdata, pdata_size, KDAT_IB_REJECT_PDATA);
	if (ret)
		return ret;
	id = kdat_cr_lock_id(cr);
	mutex_lock(&ctx->lock);
	/*
	 * No id and no accept/reject at work on it: the device took the id
	 * (kdat_ia_device_removed).  The CR is still the consumer's to free,
	 * and IA teardown frees CRs this way.
	 */
	if (cr->obj.dead || (id ? cr->cm_id != id : cr->cm_id || cr->busy)) {
		ret = kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_CR);
		mutex_unlock(&ctx->lock);
		kdat_cr_unlock_id(cr, id);
		return ret;
	}
	if (id && !cr->remote_gone) {
		u8 wire[KDAT_PDATA_WIRE_MAX];

		cr->ia->cm->reject(id, wire, kdat_pdata_wrap(wire, pdata, pdata_size),
				   IB_CM_REJ_CONSUMER_DEFINED);
	}
	if (cr->ep && !cr->ep->obj.dead) {
		kdat_ep_step(cr->ep, KDAT_EP_STIM_REJECT, NULL, 0);
		/* An EP the provider made for this request goes with it (as in DAPL). */
		if (cr->ep->provider_created) {
			provider_ep = cr->ep;
			kdat_obj_get_ref(&provider_ep->obj);
			ep_id = kdat_ep_kill(provider_ep);
		}
	}
	kdat_cr_kill(cr);
	mutex_unlock(&ctx->lock);
	if (id)
		cr->ia->cm->unlock_handler(id);	/* the CR is dead: nobody else takes it */
	kdat_cr_finish(cr, id);
	if (provider_ep) {
		kdat_ep_finish(provider_ep, ep_id);
		kdat_obj_put(&provider_ep->obj);
	}
	return KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(kdat_cr_reject);

/* ---- orphaned ids: a half-made connection we walked away from ------------------ */

/*
 * An EP left COMPLETION_PENDING (disconnect, free) after it accepted: the
 * requester may already believe it is connected, and a REJ from us no longer
 * reaches it once it sent its RTU.  So the id lives on, owned by an orphan,
 * until the connection can be closed properly: on ESTABLISHED it sends a
 * DREQ; once rdma_cm reports the end (DISCONNECTED, REJECTED, errors) the id
 * is destroyed.  Module exit and device removal reap what is left.
 */
struct kdat_orphan {
	struct kdat_obj obj;		/* only .type: KDAT_OBJ_ORPHAN */
	struct list_head node;
	struct rdma_cm_id *id;
	/*
	 * The id's reference on its EP, kept until the id is gone: a handler
	 * that read the EP from the id before the adoption may still be
	 * waiting for the EP's ctx->lock.
	 */
	struct kdat_ep *ep;
	unsigned long adopted;		/* jiffies */
	unsigned long expires;		/* jiffies: kdat_orphans_expire() ends it then */
	bool wants_drep;		/* our DREQ is out; else the RTU (or REP's end) */
	bool reaping;			/* kdat_orphans_reap() destroys it */
};

/*
 * The CM ends every orphan by its own retry limits (a REP or DREQ is sent
 * max_cm_retries + 1 = 16 times, each waiting about 4.8 s over RoCE: some
 * 80 s).  kdat does not wait that long: an orphan still alive after
 * orphan_timeout_s has its id destroyed (a REJ for an unanswered REP, time
 * wait for an unanswered DREQ, both of which the peer's CM handles).
 */
#define KDAT_ORPHAN_TIMEOUT_S	30
static unsigned int orphan_timeout_s = KDAT_ORPHAN_TIMEOUT_S;
module_param(orphan_timeout_s, uint, 0644);
MODULE_PARM_DESC(orphan_timeout_s,
		 "seconds (1-3600) an abandoned connection may wait for the CM before kdat ends it (default 30)");

static LIST_HEAD(kdat_orphans);
static DEFINE_MUTEX(kdat_orphans_lock);
static void kdat_orphans_expire(struct work_struct *work);
static DECLARE_DELAYED_WORK(kdat_orphans_timer, kdat_orphans_expire);

/*
 * Caller holds ctx->lock and has detached id from ep; the id's reference on
 * ep goes to the orphan.  Returns the id if it could not be adopted (no
 * memory): the caller destroys it and drops that reference.
 */
static struct rdma_cm_id *kdat_orphan_adopt(struct kdat_ep *ep, struct rdma_cm_id *id)
{
	struct kdat_orphan *o;

	if (!id)
		return NULL;
	o = kzalloc(sizeof(*o), GFP_KERNEL);
	if (!o)
		return id;
	o->obj.type = KDAT_OBJ_ORPHAN;
	o->id = id;
	o->ep = ep;
	o->wants_drep = ep->dreq_pending;
	o->adopted = jiffies;
	o->expires = o->adopted +
		msecs_to_jiffies(clamp(READ_ONCE(orphan_timeout_s), 1u, 3600u) * MSEC_PER_SEC);
	mutex_lock(&kdat_orphans_lock);
	/* a non-empty list has the timer armed already (kdat_orphans_expire re-arms) */
	if (list_empty(&kdat_orphans))
		queue_delayed_work(kdat_wq, &kdat_orphans_timer, o->expires - o->adopted);
	list_add_tail(&o->node, &kdat_orphans);
	mutex_unlock(&kdat_orphans_lock);
	/* a handler running for this id re-reads the context and lands here */
	id->context = o;
	return NULL;
}

/*
 * Takes o off the list unless kdat_orphans_reap() already has it (then the
 * reaper destroys the id and frees o).  True: the caller ends o.
 */
static bool kdat_orphan_unlink(struct kdat_orphan *o)
{
	bool mine;

	mutex_lock(&kdat_orphans_lock);
	mine = !o->reaping;
	if (mine)
		list_del(&o->node);
	mutex_unlock(&kdat_orphans_lock);
	return mine;
}

/*
 * The REP of an id that an orphan adopted while the REP was being sent could
 * not be sent: no CM event will end that orphan, so it ends here.  The id
 * goes back to the EP it holds a reference on (a stale context, as for any
 * detached id) and is destroyed from kdat_wq once our handler mutex is free.
 * Caller holds ctx->lock and the id's handler mutex, so no orphan event runs.
 */
static void kdat_orphan_retire(struct rdma_cm_id *id)
{
	struct kdat_orphan *o = id->context;

	if (o->obj.type != KDAT_OBJ_ORPHAN)
		return;		/* not adopted (device removal, no memory): its taker destroys it */
	if (!kdat_orphan_unlink(o))
		return;
	id->context = o->ep;
	kdat_destroy_id_later(o->ep->cm, id, &o->ep->obj);
	kfree(o);
}

static int kdat_orphan_event(struct kdat_orphan *o, struct rdma_cm_id *id,
			     struct rdma_cm_event *ev)
{
	switch (ev->event) {
	case RDMA_CM_EVENT_ESTABLISHED:
		o->ep->cm->disconnect(id);	/* DREQ: the peer sees DISCONNECTED */
		return 0;
	case RDMA_CM_EVENT_DISCONNECTED:
		o->ep->cm->disconnect(id);	/* DREP, if the peer closed first */
		fallthrough;
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		if (!kdat_orphan_unlink(o))
			return 0;
		kdat_obj_put(&o->ep->obj);	/* frees later, from kdat_wq */
		kfree(o);
		return 1;	/* rdma_cm destroys the id */
	default:
		return 0;
	}
}

/* Destroys the orphans kdat_orphans_reap*() took off the list. */
static void kdat_orphans_destroy(struct list_head *reap)
{
	struct kdat_orphan *o, *tmp;

	list_for_each_entry_safe(o, tmp, reap, node) {
		o->ep->cm->destroy_id(o->id);
		kdat_obj_put(&o->ep->obj);
		kfree(o);
	}
}

/* Destroys the orphans on ibdev (all of them if NULL). */
void kdat_orphans_reap(struct ib_device *ibdev)
{
	struct kdat_orphan *o, *tmp;
	LIST_HEAD(reap);

	if (!ibdev)
		cancel_delayed_work_sync(&kdat_orphans_timer);
	mutex_lock(&kdat_orphans_lock);
	list_for_each_entry_safe(o, tmp, &kdat_orphans, node) {
		if (!ibdev || o->id->device == ibdev) {
			o->reaping = true;
			list_move(&o->node, &reap);
		}
	}
	mutex_unlock(&kdat_orphans_lock);
	kdat_orphans_destroy(&reap);
}

/* orphan_timeout_s ran out for the oldest orphans; re-armed for the next one. */
static void kdat_orphans_expire(struct work_struct *work)
{
	unsigned long now = jiffies, next = 0;
	struct kdat_orphan *o, *tmp;
	bool more = false;
	LIST_HEAD(reap);

	mutex_lock(&kdat_orphans_lock);
	list_for_each_entry_safe(o, tmp, &kdat_orphans, node) {
		if (time_after_eq(now, o->expires)) {
			o->reaping = true;
			list_move(&o->node, &reap);
		} else if (!more || time_before(o->expires, next)) {
			next = o->expires;
			more = true;
		}
	}
	if (more)
		queue_delayed_work(kdat_wq, &kdat_orphans_timer, next - now);
	mutex_unlock(&kdat_orphans_lock);
	if (!list_empty(&reap))
		pr_info("kdat: ended %zu abandoned connection(s) the CM had not ended in %u s\n",
			list_count_nodes(&reap), READ_ONCE(orphan_timeout_s));
	kdat_orphans_destroy(&reap);
}

/*
 * /sys/class/misc/kdat/orphans: one line per orphan, oldest first, so that
 * "who keeps what alive" needs no debugger: what it waits for, its age and
 * the time left before kdat ends it (ms).
 */
ssize_t kdat_orphans_show(char *buf)
{
	unsigned long now = jiffies;
	struct kdat_orphan *o;
	unsigned int more = 0;
	int n = 0;

	mutex_lock(&kdat_orphans_lock);
	list_for_each_entry(o, &kdat_orphans, node) {
		/* a line is under 48 bytes; the last 64 of the page say what did not fit */
		if (n >= PAGE_SIZE - 64) {
			more++;
			continue;
		}
		n += sysfs_emit_at(buf, n, "%s age_ms=%u left_ms=%u\n",
				   o->wants_drep ? "drep" : "rtu",
				   jiffies_to_msecs(now - o->adopted),
				   time_after(o->expires, now) ?
				   jiffies_to_msecs(o->expires - now) : 0);
	}
	mutex_unlock(&kdat_orphans_lock);
	if (more)
		n += sysfs_emit_at(buf, n, "... %u more\n", more);
	return n;
}

/* ---- the rdma_cm event handler ----------------------------------------------------------- */

/* Which object an id's context is; every context starts with its struct kdat_obj. */
static struct kdat_obj *kdat_id_obj(struct rdma_cm_id *id)
{
	return id->context;
}

static void kdat_cr_post(struct kdat_cr *cr)
{
	struct kdat_event_info *info = kzalloc(sizeof(*info), GFP_KERNEL);

	if (!info) {
		kdat_evd_post(cr->sp->evd, &(struct kdat_event_info){
			.number = KDAT_DAT_CONNECTION_REQUEST_EVENT, .sp = cr->sp, .cr = cr });
		return;
	}
	cr->sp->obj.last_event = KDAT_DAT_CONNECTION_REQUEST_EVENT;
	cr->sp->obj.events++;
	cr->obj.last_event = KDAT_DAT_CONNECTION_REQUEST_EVENT;
	cr->obj.events++;
	kdat_rec_sync(&cr->sp->obj);
	kdat_rec_sync(&cr->obj);
	info->number = KDAT_DAT_CONNECTION_REQUEST_EVENT;
	info->sp = cr->sp;
	info->cr = cr;
	info->ep = cr->ep;
	info->private_data_size = cr->private_data_size;
	memcpy(info->private_data, cr->private_data, cr->private_data_size);
	kdat_evd_post(cr->sp->evd, info);
	kfree(info);
}

/* Caller holds ctx->lock: are as many requests pending on sp as it may hold? */
static bool kdat_sp_backlog_full(struct kdat_sp *sp)
{
	u32 limit = max_t(u32, READ_ONCE(listen_backlog), 1), n = 0;
	struct kdat_cr *cr;

	list_for_each_entry(cr, &sp->ia->crs, ia_node)
		if (cr->sp == sp && ++n >= limit)
			return true;
	return false;
}

/*
 * Refuses a request kdat cannot take, marked as the provider's reject so
 * that a kdat requester reports NON_PEER_REJECTED (seed 000: backlog full).
 * The handler then returns non-zero and rdma_cm destroys the id.
 */
static void kdat_cm_refuse(struct kdat_ia *ia, struct rdma_cm_id *id)
{
	u8 hdr[KDAT_PDATA_HDR];

	kdat_pdata_wrap(hdr, NULL, 0);
	hdr[3] |= KDAT_PDATA_F_PROVIDER;
	ia->cm->reject(id, hdr, sizeof(hdr), IB_CM_REJ_CONSUMER_DEFINED);
}

/* A request arrived on a listener; returns non-zero to have rdma_cm refuse it. */
static int kdat_cm_request(struct kdat_sp *sp, struct rdma_cm_id *id,
			   struct rdma_cm_event *ev)
{
	struct kdat_ctx *ctx = sp->obj.ctx;
	struct kdat_ia *ia = sp->ia;
	struct kdat_ep *pep = NULL;
	struct kdat_cr *cr;
	const u8 *pdata;
	kdat_ret_t ret;
	u32 len;

	cr = kzalloc(sizeof(*cr), GFP_KERNEL);
	if (!cr)
		return -ENOMEM;
	if (sp->flags & KDAT_PSP_PROVIDER) {
		static const struct kdat_ep_attr defaults;

		pep = kdat_ep_new(ia, &defaults, NULL, &ret);
		if (!pep) {
			kfree(cr);
			/* -ENOMEM makes the CM drop the REQ so that it is retried */
			return KDAT_RET_TYPE(ret) == KDAT_DAT_INSUFFICIENT_RESOURCES ?
				-ENOMEM : -ECONNREFUSED;
		}
		pep->provider_created = true;
	}

	mutex_lock(&ctx->lock);
	if (sp->obj.dead || ia->removed || (sp->is_rsp && (sp->rsp_used || !sp->ep)) ||
	    kdat_sp_backlog_full(sp))
		goto refuse;
	if (kdat_obj_add(ctx, &cr->obj, KDAT_OBJ_CR))
		goto refuse;
	if (pep && kdat_ep_link(pep, sp->evd, NULL, NULL)) {
		kdat_obj_unlink(&cr->obj);
		mutex_unlock(&ctx->lock);
		kdat_obj_put(&cr->obj);
		cr = NULL;
		goto refuse_unlocked;
	}
	cr->ia = ia;
	cr->sp = sp;
	cr->cm_id = id;
	kdat_obj_get_ref(&ia->obj);
	kdat_obj_get_ref(&sp->obj);
	kdat_obj_get_ref(&cr->obj);	/* the id's */
	id->context = cr;
	list_add_tail(&cr->ia_node, &ia->crs);
	/*
	 * ib_cm hands the REQ's fields over from our side's point of view
	 * (its responder_resources is the requester's initiator depth), so
	 * swap back: the CR reports the requester's own IRD and ORD.
	 */
	cr->remote_ird = ev->param.conn.initiator_depth;
	cr->remote_ord = ev->param.conn.responder_resources;
	cr->remote_retry_count = ev->param.conn.retry_count;
	cr->remote_rnr_retry_count = ev->param.conn.rnr_retry_count;
	cr->remote_flow_control = ev->param.conn.flow_control;
	len = kdat_pdata_unwrap(ev->param.conn.private_data, ev->param.conn.private_data_len,
				&pdata);
	memcpy(cr->private_data, pdata, len);
	cr->private_data_size = len;
	kdat_sockaddr_copy(&cr->remote_addr, (struct sockaddr *)&id->route.addr.dst_addr);
	kdat_sockaddr_copy(&cr->local_addr, (struct sockaddr *)&id->route.addr.src_addr);
	if (sp->is_rsp) {
		sp->rsp_used = true;
		cr->ep = sp->ep;
		kdat_obj_get_ref(&cr->ep->obj);
		kdat_ep_step(cr->ep, KDAT_EP_STIM_CR_ARRIVED, NULL, 0);
	} else if (pep) {
		cr->ep = pep;
		kdat_obj_get_ref(&pep->obj);
		kdat_ep_step(pep, KDAT_EP_STIM_PROVIDER_BIND, NULL, 0);
	}
	kdat_cr_post(cr);
	mutex_unlock(&ctx->lock);
	if (pep)
		kdat_ia_unuse_pd(ia);
	return 0;

refuse:
	mutex_unlock(&ctx->lock);
refuse_unlocked:
	if (pep) {
		kdat_ep_discard(pep);
		kdat_ia_unuse_pd(ia);
	}
	kfree(cr);
	kdat_cm_refuse(ia, id);
	return -ECONNREFUSED;
}

/*
 * What an EP's handler sends (or asks of the CM) after dropping ctx->lock:
 * the MAD sends and the route resolution are the slow part of a handler, and
 * every other handler and call of the same owner waits for ctx->lock.  The
 * handler mutex keeps the id alive meanwhile (destroy_id waits for it), and
 * the id's reference keeps the EP.
 */
struct kdat_cm_send {
	enum { KDAT_SEND_NONE, KDAT_SEND_ROUTE, KDAT_SEND_REQ, KDAT_SEND_RTU, KDAT_SEND_DREP } what;
	struct rdma_conn_param param;	/* REQ */
	u8 wire[KDAT_PDATA_WIRE_MAX];
};

/* Active side: the peer accepted (REP); finish like librdmacm does for its own QPs. */
static void kdat_cm_active_response(struct kdat_ep *ep, struct rdma_cm_id *id,
				    struct rdma_cm_event *ev, struct kdat_cm_send *send)
{
	const struct rdma_conn_param *c = &ev->param.conn;
	const u8 *pdata;
	u32 len;
	int err;

	/*
	 * The REP, seen from our side (ib_cm swaps its fields): initiator_depth
	 * is the acceptor's IRD, which bounds our ORD; responder_resources is
	 * its ORD, which our IRD must cover.
	 */
	ep->ord = min_t(u32, ep->attr.max_rdma_read_out, c->initiator_depth);
	ep->ird = min_t(u32, ep->attr.max_rdma_read_in, c->responder_resources);
	if (ep->uqp) {
		/* the process moves its QP, then KDAT_IOC_UQP_ESTABLISH sends the RTU */
		len = kdat_pdata_unwrap(c->private_data, c->private_data_len, &pdata);
		kdat_uqp_rep_arrived(ep, pdata, len);
		return;
	}
	err = kdat_qp_modify_cm(ep, id, IB_QPS_RTR);
	if (!err)
		err = kdat_qp_modify_cm(ep, id, IB_QPS_RTS);
	if (err) {
		kdat_qp_set(ep, IB_QPS_ERR);
		kdat_ep_step(ep, KDAT_EP_STIM_BROKEN, NULL, 0);
		return;
	}
	send->what = KDAT_SEND_RTU;	/* then ESTABLISHED, kdat_cm_ep_sent() */
}

/*
 * Active side over iWARP: no REP step (the iWARP CM moves the QP to RTS
 * itself); ESTABLISHED brings the negotiated depths and the reply's data.
 */
static void kdat_cm_active_established(struct kdat_ep *ep, struct rdma_cm_event *ev)
{
	const struct rdma_conn_param *c = &ev->param.conn;
	const u8 *pdata;
	u32 len;

	ep->ord = min_t(u32, ep->attr.max_rdma_read_out, c->initiator_depth);
	ep->ird = min_t(u32, ep->attr.max_rdma_read_in, c->responder_resources);
	len = kdat_pdata_unwrap(c->private_data, c->private_data_len, &pdata);
	kdat_ep_step(ep, KDAT_EP_STIM_ESTABLISHED, pdata, len);
}

static void kdat_cm_active_route(struct kdat_ep *ep, struct rdma_cm_id *id,
				 struct kdat_cm_send *send)
{
	struct rdma_conn_param *param = &send->param;
	int err;

	kdat_sockaddr_copy(&ep->local_addr, (struct sockaddr *)&id->route.addr.src_addr);
	/* a user QP is in INIT since its creation (KDAT_IOC_UQP_ATTR) */
	err = ep->uqp ? 0 : kdat_qp_modify_cm(ep, id, IB_QPS_INIT);
	if (err) {
		kdat_ep_step(ep, KDAT_EP_STIM_NON_PEER_REJECTED, NULL, 0);
		return;
	}
	memset(param, 0, sizeof(*param));	/* srq, qkey: none */
	param->private_data = send->wire;
	param->private_data_len = kdat_pdata_wrap(send->wire, ep->private_data,
						  ep->private_data_size);
	param->responder_resources = ep->attr.max_rdma_read_in;
	param->initiator_depth = ep->attr.max_rdma_read_out;
	param->flow_control = ep->attr.flow_control;
	param->retry_count = ep->attr.retry_count;
	param->rnr_retry_count = ep->attr.rnr_retry_count;
	param->qp_num = kdat_ep_qpn(ep);
	send->what = KDAT_SEND_REQ;
}

/*
 * How an active attempt's failure reaches the EP.  Once the connect timeout's
 * deadline has passed, the attempt timed out, even if the CM's own failure
 * (an address lookup that gave up, a REJ of the CM's) gets ctx->lock before
 * the timer's work does: on a loaded machine that work can wait on a CPU or
 * on the lock for longer than the CM needs.  Caller holds ctx->lock.
 */
static unsigned int kdat_ep_failure(struct kdat_ep *ep, unsigned int stimulus)
{
	if (ep->state == KDAT_EP_ACTIVE_CONNECTION_PENDING && ep->timer &&
	    ktime_compare(hrtimer_get_expires(&ep->timer->timer), ktime_get()) <= 0)
		return KDAT_EP_STIM_TIMEOUT;
	return stimulus;
}

/*
 * A connection attempt that ended without a connection gives up its id:
 * returns 1 to have rdma_cm destroy it after this upcall.  Caller holds
 * ctx->lock, in the id's handler; before: the state the event found.
 */
static int kdat_cm_attempt_over(struct kdat_ep *ep, struct rdma_cm_id *id, u32 before)
{
	if (before == ep->state || ep->state != KDAT_EP_DISCONNECTED ||
	    (before != KDAT_EP_ACTIVE_CONNECTION_PENDING &&
	     before != KDAT_EP_COMPLETION_PENDING))
		return 0;
	kdat_ep_detach_id(ep);
	kdat_qp_set(ep, IB_QPS_ERR);
	/*
	 * A UQP_ESTABLISH waiting for this handler's mutex must not find the
	 * id freed when it gets it: destroy it later, after that.
	 */
	if (kdat_uqp_pinned(ep)) {
		kdat_destroy_id_later(ep->ia->cm, id, &ep->obj);
		return 0;
	}
	return 1;
}

/*
 * The send a handler left for after ctx->lock (struct kdat_cm_send), and
 * what follows from it; returns 1 if rdma_cm is to destroy the id.
 */
static int kdat_cm_ep_sent(struct kdat_ep *ep, struct rdma_cm_id *id,
			   struct rdma_cm_event *ev, struct kdat_cm_send *send)
{
	struct kdat_ctx *ctx = ep->obj.ctx;
	const struct rdma_conn_param *c = &ev->param.conn;
	const u8 *pdata;
	int err, destroy = 0;
	u32 before, len;

	switch (send->what) {
	case KDAT_SEND_DREP:
		ep->cm->disconnect(id);
		return 0;
	case KDAT_SEND_ROUTE:
		err = ep->cm->resolve_route(id, KDAT_RESOLVE_TIMEOUT_MS);
		if (!err)
			return 0;
		break;
	case KDAT_SEND_REQ:
		err = ep->cm->connect_locked(id, &send->param);
		if (!err)
			return 0;
		break;
	case KDAT_SEND_RTU:
		err = ep->cm->accept(id, NULL);
		break;
	default:
		return 0;
	}
	mutex_lock(&ctx->lock);
	/* Unless the attempt ended meanwhile (timeout, disconnect, free): its id goes anyway. */
	if (kdat_ep_attempt_on(ep, id)) {
		before = ep->state;
		if (send->what == KDAT_SEND_ROUTE) {
			kdat_ep_step(ep, kdat_ep_failure(ep, KDAT_EP_STIM_UNREACHABLE), NULL, 0);
		} else if (send->what == KDAT_SEND_REQ) {
			kdat_ep_step(ep, kdat_ep_failure(ep, KDAT_EP_STIM_NON_PEER_REJECTED),
				     NULL, 0);
		} else if (err) {
			kdat_qp_set(ep, IB_QPS_ERR);
			kdat_ep_step(ep, KDAT_EP_STIM_BROKEN, NULL, 0);
		} else {
			len = kdat_pdata_unwrap(c->private_data, c->private_data_len, &pdata);
			kdat_ep_step(ep, KDAT_EP_STIM_ESTABLISHED, pdata, len);
		}
		destroy = kdat_cm_attempt_over(ep, id, before);
		kdat_rec_sync(&ep->obj);
	}
	mutex_unlock(&ctx->lock);
	return destroy;
}

/* Maps an rdma_cm event on an EP's id to the table's stimulus, doing the wire work. */
static int kdat_cm_ep_event(struct kdat_ep *ep, struct rdma_cm_id *id,
			    struct rdma_cm_event *ev)
{
	struct kdat_ctx *ctx = ep->obj.ctx;
	struct kdat_cm_send send;
	u32 before, plen;
	int destroy;
	u8 len = 0;
	const u8 *rej, *pdata;

	send.what = KDAT_SEND_NONE;

	mutex_lock(&ctx->lock);
	if (ep->obj.dead || ep->cm_id != id) {
		/*
		 * Stale: the EP moved on (timeout, abort, free) and whoever took
		 * the id destroys it -- or an orphan adopted it while we waited
		 * for the lock: then the event is the orphan's.
		 */
		bool adopted = id->context != ep;

		mutex_unlock(&ctx->lock);
		return adopted ? kdat_cm_handler(id, ev) : 0;
	}
	before = ep->state;
	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (ep->state == KDAT_EP_ACTIVE_CONNECTION_PENDING)
			send.what = KDAT_SEND_ROUTE;
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		if (ep->state == KDAT_EP_ACTIVE_CONNECTION_PENDING)
			kdat_cm_active_route(ep, id, &send);
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
		kdat_ep_step(ep, kdat_ep_failure(ep, KDAT_EP_STIM_UNREACHABLE), NULL, 0);
		break;
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		if (ep->state == KDAT_EP_ACTIVE_CONNECTION_PENDING)
			kdat_cm_active_response(ep, id, ev, &send);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		if (ep->state == KDAT_EP_ACTIVE_CONNECTION_PENDING)
			kdat_cm_active_established(ep, ev);
		else	/* passive side: the RTU carries no private data */
			kdat_ep_step(ep, KDAT_EP_STIM_ESTABLISHED, NULL, 0);
		break;
	case RDMA_CM_EVENT_REJECTED:
		rej = ep->ia->cm->consumer_reject_data(id, ev, &len);
		if (rej && !kdat_pdata_provider_reject(rej, len)) {
			plen = kdat_pdata_unwrap(rej, len, &pdata);
			kdat_ep_step(ep, KDAT_EP_STIM_PEER_REJECTED, pdata, plen);
		} else {
			kdat_ep_step(ep, kdat_ep_failure(ep, KDAT_EP_STIM_NON_PEER_REJECTED),
				     NULL, 0);
		}
		break;
	case RDMA_CM_EVENT_CONNECT_ERROR:
		if (ep->state == KDAT_EP_CONNECTED || ep->state == KDAT_EP_DISCONNECT_PENDING)
			kdat_ep_flush(ep);
		kdat_ep_step(ep, ep->state == KDAT_EP_COMPLETION_PENDING ?
			     KDAT_EP_STIM_ACCEPT_FAILED : KDAT_EP_STIM_BROKEN, NULL, 0);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		/* Answer a peer's DREQ (DREP); harmless after our own DREQ. */
		send.what = KDAT_SEND_DREP;
		ep->dreq_pending = false;
		ep->graceful_pending = false;
		if (ep->state == KDAT_EP_CONNECTED || ep->state == KDAT_EP_DISCONNECT_PENDING)
			kdat_ep_flush(ep);	/* completions first, then DISCONNECTED */
		kdat_ep_step(ep, KDAT_EP_STIM_DISCONNECTED, NULL, 0);
		break;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		/* kdat's ib_client tears the IA down before rdma_cm gets here. */
		kdat_ep_step(ep, KDAT_EP_STIM_DEVICE_REMOVED, NULL, 0);
		break;
	default:
		break;	/* TIMEWAIT_EXIT, ADDR_CHANGE: nothing for the EP */
	}
	destroy = kdat_cm_attempt_over(ep, id, before);
	kdat_rec_sync(&ep->obj);	/* addresses, IRD/ORD */
	mutex_unlock(&ctx->lock);
	if (send.what != KDAT_SEND_NONE && kdat_cm_ep_sent(ep, id, ev, &send))
		destroy = 1;
	if (destroy)
		kdat_obj_put(&ep->obj);	/* the id's reference */
	return destroy;
}

static int kdat_cm_handler(struct rdma_cm_id *id, struct rdma_cm_event *ev)
{
	struct kdat_obj *obj = kdat_id_obj(id);
	struct kdat_cr *cr;
	struct kdat_ctx *ctx;

	switch (obj->type) {
	case KDAT_OBJ_EP:
		return kdat_cm_ep_event((struct kdat_ep *)obj, id, ev);
	case KDAT_OBJ_ORPHAN:
		return kdat_orphan_event((struct kdat_orphan *)obj, id, ev);
	case KDAT_OBJ_SP:
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
			return kdat_cm_request((struct kdat_sp *)obj, id, ev);
		return 0;	/* the listener's own DEVICE_REMOVAL: handled by the ib_client */
	case KDAT_OBJ_CR:
		/* Before accept/reject: the requester may give up (REJ, timeout). */
		cr = (struct kdat_cr *)obj;
		ctx = cr->obj.ctx;
		mutex_lock(&ctx->lock);
		if (ev->event == RDMA_CM_EVENT_REJECTED ||
		    ev->event == RDMA_CM_EVENT_CONNECT_ERROR ||
		    ev->event == RDMA_CM_EVENT_UNREACHABLE ||
		    ev->event == RDMA_CM_EVENT_DISCONNECTED)
			cr->remote_gone = true;
		kdat_rec_sync(&cr->obj);
		mutex_unlock(&ctx->lock);
		return 0;
	default:
		return 0;
	}
}

/* ---- IA close, owner teardown, device removal --------------------------------------------- */

/* Frees everything the IA owns and the IA; caller holds no locks. */
static void kdat_ia_teardown(struct kdat_ia *ia)
{
	struct kdat_ctx *ctx = ia->obj.ctx;
	struct rdma_cm_id *id;

	/* ia->closing is set: nothing new joins the IA, what the loop frees stays freed */
	for (;;) {
		struct kdat_cr *cr;
		struct kdat_sp *sp;
		struct kdat_ep *ep;

		mutex_lock(&ctx->lock);
		cr = list_first_entry_or_null(&ia->crs, struct kdat_cr, ia_node);
		if (cr) {
			kdat_obj_get_ref(&cr->obj);
			mutex_unlock(&ctx->lock);
			kdat_cr_reject(cr, NULL, 0);
			kdat_obj_put(&cr->obj);
			continue;
		}
		sp = list_first_entry_or_null(&ia->sps, struct kdat_sp, ia_node);
		if (sp) {
			kdat_obj_get_ref(&sp->obj);
			id = kdat_sp_kill(sp);
			mutex_unlock(&ctx->lock);
			kdat_sp_finish(sp, id);
			kdat_obj_put(&sp->obj);
			continue;
		}
		ep = list_first_entry_or_null(&ia->eps, struct kdat_ep, ia_node);
		if (ep) {
			kdat_obj_get_ref(&ep->obj);
			id = kdat_ep_kill(ep);
			mutex_unlock(&ctx->lock);
			kdat_ep_finish(ep, id);
			kdat_obj_put(&ep->obj);
			continue;
		}
		mutex_unlock(&ctx->lock);
		break;
	}
	mutex_lock(&ctx->lock);
	while (!list_empty(&ia->evds))
		kdat_evd_kill(list_first_entry(&ia->evds, struct kdat_evd, ia_node));
	kdat_obj_unlink(&ia->obj);
	list_del_init(&ia->ctx_node);
	mutex_lock(&kdat_devices_lock);
	list_del_init(&ia->dev_node);
	mutex_unlock(&kdat_devices_lock);
	mutex_unlock(&ctx->lock);
	/* Pending deferred id destructions may still hold the PD's QPs' ids. */
	flush_workqueue(kdat_wq);
	mutex_lock(&ctx->lock);
	if (!ia->removed)
		kdat_ia_free_memory(ia);
	mutex_unlock(&ctx->lock);
	/* an EP freed by another thread may still be destroying its QP */
	wait_event(ia->finish_wq, !atomic_read(&ia->eps_finishing));
	if (ia->pd)
		ib_dealloc_pd(ia->pd);
	ia->pd = NULL;
	kdat_obj_put(&ia->obj);
}

kdat_ret_t kdat_ia_close_in(struct kdat_ia *ia, u32 flags)
{
	struct kdat_ctx *ctx = ia->obj.ctx;
	bool busy;

	if (flags != KDAT_IA_CLOSE_ABRUPT && flags != KDAT_IA_CLOSE_GRACEFUL)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	mutex_lock(&ctx->lock);
	/* a second close racing the first finds the IA closing: one teardown */
	if (ia->obj.dead || ia->closing) {
		mutex_unlock(&ctx->lock);
		return kdat_err(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_IA);
	}
	busy = !list_empty(&ia->eps) || !list_empty(&ia->sps) || !list_empty(&ia->crs) ||
	       !list_empty(&ia->evds);
	if (busy && flags == KDAT_IA_CLOSE_GRACEFUL) {
		mutex_unlock(&ctx->lock);
		return kdat_err(KDAT_DAT_INVALID_STATE, KDAT_DAT_INVALID_STATE_IA_IN_USE);
	}
	ia->closing = true;
	mutex_unlock(&ctx->lock);
	kdat_ia_teardown(ia);
	return KDAT_DAT_SUCCESS;
}

/* Closes every IA of an owner (file release); then drops the owner. */
void kdat_ctx_destroy(struct kdat_ctx *ctx)
{
	struct kdat_ia *ia;

	for (;;) {
		mutex_lock(&ctx->lock);
		ia = list_first_entry_or_null(&ctx->ias, struct kdat_ia, ctx_node);
		if (ia)
			kdat_obj_get_ref(&ia->obj);
		mutex_unlock(&ctx->lock);
		if (!ia)
			break;
		kdat_ia_close_in(ia, KDAT_IA_CLOSE_ABRUPT);
		kdat_obj_put(&ia->obj);
	}
	kdat_table_close(ctx->table);
	kref_put(&ctx->ref, kdat_ctx_release);
}

/*
 * The RDMA device is going away (ib_client remove): every EP gets its event,
 * and every IB resource of the IA is released before we return.
 */
void kdat_ia_device_removed(struct kdat_ia *ia)
{
	struct kdat_ctx *ctx = ia->obj.ctx;
	struct rdma_cm_id **ids;
	struct kdat_ep *ep;
	struct kdat_sp *sp;
	struct kdat_cr *cr;
	unsigned int n = 0, max = 0, i;

	mutex_lock(&ctx->lock);
	list_for_each_entry(ep, &ia->eps, ia_node)
		max++;
	list_for_each_entry(sp, &ia->sps, ia_node)
		max++;
	list_for_each_entry(cr, &ia->crs, ia_node)
		max++;
	ids = kcalloc(max + 1, 2 * sizeof(*ids), GFP_KERNEL | __GFP_NOFAIL);
	ia->removed = true;
	kdat_rec_sync(&ia->obj);
	list_for_each_entry(ep, &ia->eps, ia_node) {
		kdat_ep_step(ep, KDAT_EP_STIM_DEVICE_REMOVED, NULL, 0);
		ids[2 * n] = kdat_ep_detach_id(ep);
		ids[2 * n + 1] = (void *)ep;
		kdat_obj_get_ref(&ep->obj);
		n++;
	}
	list_for_each_entry(sp, &ia->sps, ia_node) {
		if (sp->listen_id) {
			ids[2 * n] = sp->listen_id;
			ids[2 * n + 1] = (void *)sp;
			sp->listen_id = NULL;
			n++;
		}
	}
	list_for_each_entry(cr, &ia->crs, ia_node) {
		if (cr->cm_id && !cr->busy) {
			ids[2 * n] = cr->cm_id;
			ids[2 * n + 1] = (void *)cr;
			cr->cm_id = NULL;
			cr->remote_gone = true;
			n++;
		}
	}
	mutex_unlock(&ctx->lock);

	for (i = 0; i < n; i++) {
		struct kdat_obj *obj = (struct kdat_obj *)ids[2 * i + 1];

		if (ids[2 * i]) {
			if (obj->type == KDAT_OBJ_EP)
				kdat_uqp_wait_unpinned((struct kdat_ep *)obj);
			ia->cm->destroy_id(ids[2 * i]);
			kdat_obj_put(obj);	/* the id's reference */
		}
	}
	flush_workqueue(kdat_wq);
	mutex_lock(&ctx->lock);
	for (i = 0; i < n; i++) {
		struct kdat_obj *obj = (struct kdat_obj *)ids[2 * i + 1];

		if (obj->type == KDAT_OBJ_EP) {
			ep = (struct kdat_ep *)obj;
			kdat_ep_free_qp(ep);
		}
	}
	mutex_unlock(&ctx->lock);
	for (i = 0; i < n; i++) {
		struct kdat_obj *obj = (struct kdat_obj *)ids[2 * i + 1];

		if (obj->type == KDAT_OBJ_EP)
			kdat_obj_put(obj);
	}
	kfree(ids);
	mutex_lock(&ctx->lock);
	kdat_ia_free_memory(ia);
	mutex_unlock(&ctx->lock);
	wait_event(ia->finish_wq, !atomic_read(&ia->eps_finishing));
	if (ia->pd)
		ib_dealloc_pd(ia->pd);
	ia->pd = NULL;
}

/* ---- the exported in-kernel API ---------------------------------------------------------- */

kdat_ret_t __kdat_ia_open(struct net *net, const char *name, struct kdat_ia **ia,
			  const char *owner)
{
	struct kdat_ctx *ctx;
	kdat_ret_t ret;

	if (!net || !name || !ia)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG1);
	/* the shared table names the kernel consumer by its module */
	ctx = kdat_ctx_create(owner ? owner : "kernel", net);
	if (!ctx)
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
	ret = kdat_ia_open_in(ctx, name, ia, NULL);
	if (ret) {
		kdat_ctx_destroy(ctx);
		return ret;
	}
	(*ia)->own_ctx = true;
	__module_get(THIS_MODULE);
	return KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(__kdat_ia_open);

kdat_ret_t kdat_ia_close(struct kdat_ia *ia, u32 flags)
{
	struct kdat_ctx *ctx = ia->obj.ctx;
	bool own = ia->own_ctx;
	kdat_ret_t ret;

	kdat_obj_get_ref(&ia->obj);
	ret = kdat_ia_close_in(ia, flags);
	kdat_obj_put(&ia->obj);
	if (!ret && own) {
		kdat_ctx_destroy(ctx);
		module_put(THIS_MODULE);
	}
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_ia_close);

