// SPDX-License-Identifier: GPL-2.0
/*
 * Objects and their owners: the handle table of one owner (an open file or a kernel
 * consumer's IA), references, and each object's record in the shared table.
 */
#include <linux/module.h>
#include <linux/slab.h>
#include "kdat_base.h"
#include "kdat_trace.h"

/*
 * A kernel consumer's name, as rdma_cm's resource tracking shows its cm_ids ("[name]" in
 * rdma res show cm_id).  rdma_cm keeps the pointer, not a copy, for as long as an id lives,
 * and an id may outlive its IA and its consumer's module (an orphan ends later), so each
 * name is copied once and kept until kdat unloads: one per consumer module ever seen.
 */
struct kdat_owner_name {
	struct list_head node;
	char name[];
};

static LIST_HEAD(kdat_owner_names);
static DEFINE_MUTEX(kdat_owner_names_lock);

const char *kdat_owner_name(const char *owner)
{
	size_t len = strnlen(owner, MODULE_NAME_LEN - 1);
	const char *found = KBUILD_MODNAME;	/* no memory: the ids are labeled kdat's */
	struct kdat_owner_name *n;

	mutex_lock(&kdat_owner_names_lock);
	list_for_each_entry(n, &kdat_owner_names, node) {
		if (strlen(n->name) == len && !strncmp(n->name, owner, len)) {
			found = n->name;
			goto out;
		}
	}
	n = kmalloc(struct_size(n, name, len + 1), GFP_KERNEL);
	if (n) {
		memcpy(n->name, owner, len);
		n->name[len] = '\0';
		list_add(&n->node, &kdat_owner_names);
		found = n->name;
	}
out:
	mutex_unlock(&kdat_owner_names_lock);
	return found;
}

/* At unload, when no cm_id is left. */
void kdat_owner_names_free(void)
{
	struct kdat_owner_name *n, *next;

	list_for_each_entry_safe(n, next, &kdat_owner_names, node) {
		list_del(&n->node);
		kfree(n);
	}
}

void kdat_ctx_release(struct kref *ref)
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
	mutex_init(&ctx->lock);
	ctx->table = kdat_table_create(kernel_owner, &ctx->lock);
	if (!ctx->table) {
		kfree(ctx);
		return NULL;
	}
	ctx->net = get_net(net);
	ctx->kern_name = kernel_owner ? kdat_owner_name(kernel_owner) : NULL;
	xa_init_flags(&ctx->objs, XA_FLAGS_ALLOC1);
	hash_init(ctx->qpns);
	INIT_LIST_HEAD(&ctx->ias);
	kref_init(&ctx->ref);
	return ctx;
}

static void kdat_obj_free(struct kdat_obj *obj)
{
	struct kdat_ctx *ctx = obj->ctx;

	/* IB resources went with kdat_*_kill(); what is left is memory. */
	if (obj->cls && obj->cls->release)
		obj->cls->release(obj);
	if (obj->cls && obj->cls->cache)
		kmem_cache_free(*obj->cls->cache, obj);
	else
		kfree(obj);
	kref_put(&ctx->ref, kdat_ctx_release);
}

static void kdat_obj_free_work(struct work_struct *work)
{
	kdat_obj_free(container_of(work, struct kdat_obj, release_work));
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

static void kdat_obj_release_now(struct kref *ref)
{
	kdat_obj_free(container_of(ref, struct kdat_obj, ref));
}

/*
 * A put from a sleeping context that holds none of kdat's locks (an EP's
 * finish, after its QP and id are gone): the last one frees at once.  Waking
 * a kdat_wq worker per object cost a tearing-down consumer about a fifth of
 * its time (bench/conn, 1000 connections).
 */
void kdat_obj_put_now(struct kdat_obj *obj)
{
	might_sleep();
	if (!obj)
		return;
	lockdep_assert_not_held(&obj->ctx->lock);
	kref_put(&obj->ref, kdat_obj_release_now);
}

void kdat_obj_get_ref(struct kdat_obj *obj)
{
	kref_get(&obj->ref);
}

/* Whose lock a record is written under: its object's own, or the owner's. */
static struct mutex *kdat_obj_rec_lock(struct kdat_obj *obj)
{
	return obj->cls->rec_lock ? obj->cls->rec_lock(obj) : &obj->ctx->lock;
}

/*
 * Adds obj to ctx: the lowest free slot of the shared table, with the slot's
 * next generation in the handle.  Caller holds ctx->lock.
 */
int kdat_obj_add(struct kdat_ctx *ctx, struct kdat_obj *obj, enum kdat_obj_type type,
		 const struct kdat_obj_class *cls)
{
	struct kdat_record *rec;
	u32 slot, handle;
	int ret;

	lockdep_assert_held(&ctx->lock);
	obj->cls = cls;
	obj->type = type;
	obj->ctx = ctx;
	lockdep_assert_held(kdat_obj_rec_lock(obj));
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
	rec->type = cls->rec_type;
	rec->created_ns = obj->created_ns;
	rec->changed_ns = obj->changed_ns;
	kdat_table_write_end(ctx->table, rec, 1);
	kref_get(&ctx->ref);
	return 0;
}

/* Removes the handle and frees its record; the table's reference is the caller's to drop. */
void kdat_obj_unlink(struct kdat_obj *obj)
{
	struct kdat_ctx *ctx = obj->ctx;
	struct kdat_record *rec;
	u16 gen;

	lockdep_assert_held(&ctx->lock);
	lockdep_assert_held(kdat_obj_rec_lock(obj));
	obj->dead = true;
	if (obj->handle) {
		xa_erase(&ctx->objs, KDAT_HANDLE_SLOT(obj->handle));
		rec = kdat_table_write_begin(ctx->table, KDAT_HANDLE_SLOT(obj->handle));
		gen = rec->generation;
		memset((void *)rec + sizeof(rec->seq), 0, sizeof(*rec) - sizeof(rec->seq));
		rec->generation = gen;
		kdat_table_write_end(ctx->table, rec, -1);
		WRITE_ONCE(obj->freed_handle, obj->handle);
		smp_store_release(&obj->handle, 0);	/* kdat_obj_event_handle() */
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

/*
 * Rewrites obj's record in the shared table from the object as it is now.
 * Called at every change userspace may watch; caller holds the object's
 * lock (kdat_obj_rec_lock), which makes it the record's single writer.
 */
void kdat_rec_sync(struct kdat_obj *obj)
{
	struct kdat_ctx *ctx = obj->ctx;
	struct kdat_record *rec;
	u32 handle = obj->handle;

	lockdep_assert_held(kdat_obj_rec_lock(obj));
	if (!handle)
		return;
	rec = kdat_table_write_begin(ctx->table, KDAT_HANDLE_SLOT(handle));
	memset((void *)rec + sizeof(rec->seq), 0, sizeof(*rec) - sizeof(rec->seq));
	rec->handle = handle;
	rec->generation = KDAT_HANDLE_GENERATION(handle);
	rec->type = obj->cls->rec_type;
	rec->last_event = obj->last_event;
	rec->events = obj->events;
	rec->created_ns = obj->created_ns;
	rec->changed_ns = obj->changed_ns;
	obj->cls->rec_fill(rec, obj);
	kdat_table_write_end(ctx->table, rec, 0);
}

/* kdat_rec_sync() for callers without the object's lock. */
void kdat_rec_sync_unlocked(struct kdat_obj *obj)
{
	struct mutex *lock = kdat_obj_rec_lock(obj);

	mutex_lock(lock);
	kdat_rec_sync(obj);
	mutex_unlock(lock);
}

u32 kdat_obj_handle(void *p)
{
	struct kdat_obj *obj = p;

	return obj ? READ_ONCE(obj->handle) : 0;	/* records of other objects read it */
}

/*
 * The handle an event names: a queued event pins its objects, and one whose
 * object was freed before the event was taken names the handle it had (as
 * DAT's events name a freed EP); the generation makes it stale to any call.
 */
u32 kdat_obj_event_handle(void *p)
{
	struct kdat_obj *obj = p;
	u32 handle;

	if (!obj)
		return 0;
	/* pairs with kdat_obj_unlink()'s release: a 0 here means freed_handle is set */
	handle = smp_load_acquire(&obj->handle);
	return handle ? handle : READ_ONCE(obj->freed_handle);
}

void kdat_event_get_refs(struct kdat_event_info *info)
{
	if (info->ep)
		kdat_obj_get_ref(kdat_obj_of(info->ep));
	if (info->sp)
		kdat_obj_get_ref(kdat_obj_of(info->sp));
	if (info->cr)
		kdat_obj_get_ref(kdat_obj_of(info->cr));
}

void kdat_event_put_refs(struct kdat_event_info *info)
{
	if (info->ep)
		kdat_obj_put(kdat_obj_of(info->ep));
	if (info->sp)
		kdat_obj_put(kdat_obj_of(info->sp));
	if (info->cr)
		kdat_obj_put(kdat_obj_of(info->cr));
}

/*
 * The handler of every rdma_cm id kdat creates.  An id's context is the
 * object it belongs to now (a CR's id becomes its EP's on accept, an EP's
 * becomes an orphan's when the EP walks away), so the event goes to that
 * object's kind.
 */
int kdat_cm_upcall(struct rdma_cm_id *id, struct rdma_cm_event *ev)
{
	struct kdat_obj *obj = id->context;

	if (trace_kdat_cm_event_enabled())
		trace_kdat_cm_event(obj->ctx ? kdat_table_id(obj->ctx->table) : 0, obj->type,
				    READ_ONCE(obj->handle), id, ev->event, ev->status);

	return obj->cls->cm_event ? obj->cls->cm_event(obj, id, ev) : 0;
}
