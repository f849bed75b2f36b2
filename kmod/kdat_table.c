// SPDX-License-Identifier: GPL-2.0
/*
 * The shared object table: one record per handle slot, written by the kernel
 * under its owner's ctx->lock and mapped read-only into userspace, so that
 * reading an endpoint's state costs a few loads instead of an ioctl.
 *
 * The table's pages are allocated as slots are first used (slots are handed
 * out lowest first, so they fill page by page) and are freed only with the
 * table, which lives as long as its owner or any mapping of it.  The fault
 * handler hands out pages that exist and SIGBUSes the rest.
 */
#include <linux/anon_inodes.h>
#include <linux/capability.h>
#include <linux/file.h>
#include <linux/cred.h>
#include <linux/mm.h>
#include <linux/pid_namespace.h>
#include <linux/random.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <kdat/uapi/kdat_layout_check.h>
#include "kdat_base.h"

#define KDAT_TABLE_PAGES	DIV_ROUND_UP(KDAT_TABLE_MAP_SIZE, PAGE_SIZE)

struct kdat_table {
	struct kref ref;
	struct list_head node;		/* in kdat_tables while its owner lives */
	u64 id;
	kuid_t uid;
	struct pid *opener;		/* the opening process (tgid); NULL for a kernel consumer */
	bool kernel;
	u16 gen_base;			/* first generation of every slot */
	u32 high_water;			/* slots with a page (writer's copy) */
	struct mutex *writer_lock;	/* the owner's ctx->lock: slots are claimed under it */
	/*
	 * The header's counts: records are written under their objects' own
	 * locks (kdat_rec_sync), so two may end at once.
	 */
	spinlock_t hdr_lock;
	struct kdat_table_header *hdr;
	/* slot -> struct kdat_ia_stats of the live IAs; readers copy under its lock */
	struct xarray ia_stats;
	struct page *pages[KDAT_TABLE_PAGES];
};

static LIST_HEAD(kdat_tables);
static DEFINE_MUTEX(kdat_tables_lock);
static atomic64_t kdat_table_ids = ATOMIC64_INIT(0);

/*
 * Every change a watcher of the tables could see: record writes, tables made
 * and closed (KDAT_IOC_TABLE_WAIT).  From 1, so that 0 never matches.
 */
static atomic64_t kdat_tables_changes = ATOMIC64_INIT(1);
static DECLARE_WAIT_QUEUE_HEAD(kdat_tables_wq);

static void kdat_tables_changed(void)
{
	atomic64_inc(&kdat_tables_changes);
	/* full barrier: a waiter that missed the new count is on the queue by now */
	if (wq_has_sleeper(&kdat_tables_wq))
		wake_up_interruptible_all(&kdat_tables_wq);
}

/**
 * kdat_tables_wait() - sleep until the shared tables change
 * @changes: in: the change count the caller last saw (0: none); out: the count now
 * @timeout_us: how long to wait: KDAT_TIMEOUT_INFINITE, or microseconds (0: not at all)
 *
 * Return: DAT_SUCCESS as soon as the count differs from @changes,
 * DAT_TIMEOUT_EXPIRED when it did not change in time, DAT_INTERRUPTED_CALL on
 * a signal.
 */
kdat_ret_t kdat_tables_wait(u64 *changes, u32 timeout_us)
{
	u64 seen = *changes;
	int err = 0;

	if (timeout_us)
		err = kdat_wait_event_us(kdat_tables_wq,
					 atomic64_read(&kdat_tables_changes) != seen, timeout_us);
	*changes = atomic64_read(&kdat_tables_changes);
	if (*changes != seen)
		return KDAT_DAT_SUCCESS;
	if (err == -ERESTARTSYS)
		return kdat_err(KDAT_DAT_INTERRUPTED_CALL, KDAT_DAT_NO_SUBTYPE);
	return kdat_err(KDAT_DAT_TIMEOUT_EXPIRED, KDAT_DAT_NO_SUBTYPE);
}

/*
 * kernel_owner: a kernel consumer's name; NULL for an open file.
 * writer_lock: the lock slots are claimed under (the owner's ctx->lock).
 */
struct kdat_table *kdat_table_create(const char *kernel_owner, struct mutex *writer_lock)
{
	bool kernel = kernel_owner;
	struct kdat_table *t = kvzalloc(sizeof(*t), GFP_KERNEL);
	struct kdat_table_header *hdr;

	if (!t)
		return NULL;
	t->pages[0] = alloc_page(GFP_KERNEL | __GFP_ZERO);
	if (!t->pages[0]) {
		kvfree(t);
		return NULL;
	}
	kref_init(&t->ref);
	t->writer_lock = writer_lock;
	spin_lock_init(&t->hdr_lock);
	xa_init(&t->ia_stats);
	t->id = atomic64_inc_return(&kdat_table_ids);
	t->uid = current_euid();
	t->kernel = kernel;
	/* a handle of one file is (nearly always) stale in another */
	t->gen_base = get_random_u32_inclusive(1, 0xffff);
	hdr = page_address(t->pages[0]);
	t->hdr = hdr;
	hdr->magic = KDAT_TABLE_MAGIC;
	hdr->layout = KDAT_TABLE_LAYOUT;
	hdr->header_size = KDAT_TABLE_HEADER_SIZE;
	hdr->record_size = KDAT_TABLE_RECORD_SIZE;
	hdr->max_slots = KDAT_TABLE_MAX_SLOTS;
	hdr->id = t->id;
	hdr->created_ns = ktime_get_boottime_ns();
	hdr->flags = kernel ? KDAT_TABLE_KERNEL : 0;
	/*
	 * The header shows the opener as the opener's own namespaces see it;
	 * TABLE_LIST translates for each caller (kdat_table_list()).
	 */
	t->opener = kernel ? NULL : get_task_pid(current, PIDTYPE_TGID);
	hdr->pid = kernel ? 0 : task_tgid_vnr(current);
	hdr->uid = from_kuid_munged(current_user_ns(), t->uid);
	if (kernel)
		strscpy(hdr->comm, kernel_owner, sizeof(hdr->comm));
	else
		get_task_comm(hdr->comm, current);
	mutex_lock(&kdat_tables_lock);
	list_add_tail(&t->node, &kdat_tables);
	mutex_unlock(&kdat_tables_lock);
	kdat_tables_changed();
	return t;
}

static void kdat_table_release(struct kref *ref)
{
	struct kdat_table *t = container_of(ref, struct kdat_table, ref);
	unsigned int i;

	for (i = 0; i < KDAT_TABLE_PAGES; i++)
		if (t->pages[i])
			__free_page(t->pages[i]);
	put_pid(t->opener);
	xa_destroy(&t->ia_stats);
	kvfree(t);
}

void kdat_table_get(struct kdat_table *t)
{
	kref_get(&t->ref);
}

void kdat_table_put(struct kdat_table *t)
{
	if (t)
		kref_put(&t->ref, kdat_table_release);
}

/* The owning file attached a view of another table: see KDAT_TABLE_VIEWER. */
void kdat_table_mark_viewer(struct kdat_table *t)
{
	mutex_lock(&kdat_tables_lock);
	WRITE_ONCE(t->hdr->flags, t->hdr->flags | KDAT_TABLE_VIEWER);
	mutex_unlock(&kdat_tables_lock);
}

/* The owner is gone: unlist the table (idempotent); mappings keep what they see. */
void kdat_table_close(struct kdat_table *t)
{
	mutex_lock(&kdat_tables_lock);
	list_del_init(&t->node);
	mutex_unlock(&kdat_tables_lock);
	WRITE_ONCE(t->hdr->flags, t->hdr->flags | KDAT_TABLE_CLOSED);
	kdat_tables_changed();
}

static size_t kdat_slot_offset(u32 slot)
{
	return KDAT_TABLE_HEADER_SIZE + (size_t)slot * KDAT_TABLE_RECORD_SIZE;
}

static struct kdat_record *kdat_table_record(struct kdat_table *t, u32 slot)
{
	size_t off = kdat_slot_offset(slot);

	return page_address(t->pages[off >> PAGE_SHIFT]) + offset_in_page(off);
}

/*
 * Make slot usable (its page exists) and return the handle it gets now.
 * Caller holds the owner's ctx->lock.  0: no memory.
 */
u32 kdat_table_claim(struct kdat_table *t, u32 slot)
{
	size_t idx = kdat_slot_offset(slot) >> PAGE_SHIFT;
	struct kdat_record *rec;
	u16 gen;

	lockdep_assert_held(t->writer_lock);
	if (WARN_ON_ONCE(!slot || slot >= KDAT_TABLE_MAX_SLOTS))
		return 0;
	if (!t->pages[idx]) {
		struct page *page = alloc_page(GFP_KERNEL | __GFP_ZERO);

		if (!page)
			return 0;
		/* publish the page before a reader can learn of its slots */
		smp_store_release(&t->pages[idx], page);
	}
	if (slot > t->high_water) {
		t->high_water = slot;
		/* pairs with the reader's acquire: the page is there first */
		smp_store_release(&t->hdr->high_water, slot);
	}
	rec = kdat_table_record(t, slot);
	gen = rec->generation ? rec->generation + 1 : t->gen_base;
	if (!gen)
		gen = 1;
	return (u32)gen << 16 | slot;
}

/*
 * Open a record for writing (the seqcount's odd phase).  One record's
 * writers are serialised by the lock of its object (kdat_obj_rec_lock(),
 * which the caller asserts); readers retry across it.
 */
struct kdat_record *kdat_table_write_begin(struct kdat_table *t, u32 slot)
{
	struct kdat_record *rec = kdat_table_record(t, slot);

	WRITE_ONCE(rec->seq, rec->seq + 1);
	/* odd seq visible before any field changes (reader's final seq check) */
	smp_wmb();
	return rec;
}

void kdat_table_write_end(struct kdat_table *t, struct kdat_record *rec, int live_delta)
{
	/* all fields visible before seq turns even (reader's acquire of seq) */
	smp_wmb();
	WRITE_ONCE(rec->seq, rec->seq + 1);
	spin_lock(&t->hdr_lock);
	WRITE_ONCE(t->hdr->updates, t->hdr->updates + 1);
	if (live_delta)
		WRITE_ONCE(t->hdr->live, t->hdr->live + live_delta);
	spin_unlock(&t->hdr_lock);
	kdat_tables_changed();
}

/* ---- mmap ------------------------------------------------------------------ */

static void kdat_table_vm_open(struct vm_area_struct *vma)
{
	kdat_table_get(vma->vm_private_data);
}

static void kdat_table_vm_close(struct vm_area_struct *vma)
{
	kdat_table_put(vma->vm_private_data);
}

static vm_fault_t kdat_table_fault(struct vm_fault *vmf)
{
	struct kdat_table *t = vmf->vma->vm_private_data;
	unsigned long idx = vmf->pgoff;		/* page of the table (vm_pgoff 0 at mmap) */
	struct page *page;

	if (idx >= KDAT_TABLE_PAGES)
		return VM_FAULT_SIGBUS;
	/* pairs with the release in kdat_table_claim(): a zeroed page */
	page = smp_load_acquire(&t->pages[idx]);
	if (!page)
		return VM_FAULT_SIGBUS;
	get_page(page);
	vmf->page = page;
	return 0;
}

static const struct vm_operations_struct kdat_table_vm_ops = {
	.open = kdat_table_vm_open,
	.close = kdat_table_vm_close,
	.fault = kdat_table_fault,
};

static int kdat_table_file_release(struct inode *inode, struct file *file)
{
	kdat_table_put(file->private_data);
	return 0;
}

/* What a mapping pins instead of the device file (see kdat_table_mmap()). */
static const struct file_operations kdat_table_fops = {
	.owner = THIS_MODULE,
	.release = kdat_table_file_release,
	.llseek = noop_llseek,
};

int kdat_table_mmap(struct kdat_table *t, struct vm_area_struct *vma)
{
	struct file *file;

	if (vma->vm_flags & VM_WRITE)
		return -EACCES;
	if (vma->vm_end - vma->vm_start > PAGE_ALIGN(KDAT_TABLE_MAP_SIZE))
		return -EINVAL;
	/*
	 * A mapping must not keep the /dev/kdat file open: close() is what
	 * tears the owner's objects down.  So the vma pins a file of the
	 * table's own, and the table outlives its owner while mapped.
	 */
	kdat_table_get(t);
	file = anon_inode_getfile("[kdat-table]", &kdat_table_fops, t, O_RDONLY);
	if (IS_ERR(file)) {
		kdat_table_put(t);
		return PTR_ERR(file);
	}
	vma_set_file(vma, file);
	fput(file);		/* the vma holds its own reference now */
	/*
	 * Offsets are the table file's from here: page 0 is the header.  A vma
	 * split later (munmap of its first pages) keeps a vm_pgoff that still
	 * says which table page its start is.
	 */
	vma->vm_pgoff = 0;
	/* never writable, not even after mprotect() */
	vm_flags_clear(vma, VM_MAYWRITE);
	vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
	vma->vm_ops = &kdat_table_vm_ops;
	vma->vm_private_data = t;
	kdat_table_get(t);
	return 0;
}

/* ---- the list kdatctl reads, and attaching to another owner's table --------- */

/*
 * A table is there for the caller only if its PID namespace can see the
 * opener (a kernel consumer's: only from the initial PID namespace): others
 * are neither listed nor found.
 */
static bool kdat_table_visible(struct kdat_table *t)
{
	struct pid_namespace *ns = task_active_pid_ns(current);

	return t->kernel ? ns == &init_pid_ns : pid_nr_ns(t->opener, ns) != 0;
}

/* ...and the caller may view it if it is its euid's, or with CAP_SYS_ADMIN. */
static bool kdat_table_may_view(struct kdat_table *t)
{
	if (capable(CAP_SYS_ADMIN))
		return true;
	return !t->kernel && uid_eq(t->uid, current_euid());
}

kdat_ret_t kdat_table_list(void __user *ubuf, u32 capacity, u32 *count)
{
	struct kdat_table_info info;
	struct kdat_table_info *all;
	struct kdat_table *t;
	kdat_ret_t ret = KDAT_DAT_SUCCESS;
	u32 n = 0;

	all = kvcalloc(capacity ? capacity : 1, sizeof(*all), GFP_KERNEL);
	if (!all)
		return KDAT_ERR(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
	mutex_lock(&kdat_tables_lock);
	list_for_each_entry(t, &kdat_tables, node) {
		if (!kdat_table_visible(t) || !kdat_table_may_view(t))
			continue;
		/* an observer's own empty table is nothing to look at */
		if ((READ_ONCE(t->hdr->flags) & KDAT_TABLE_VIEWER) && !READ_ONCE(t->hdr->live))
			continue;
		if (n < capacity) {
			memset(&info, 0, sizeof(info));
			info.id = t->id;
			/* as the caller's PID and user namespaces see them */
			info.pid = t->kernel ? 0 : pid_nr_ns(t->opener, task_active_pid_ns(current));
			info.uid = from_kuid_munged(current_user_ns(), t->uid);
			info.flags = READ_ONCE(t->hdr->flags);
			info.live = READ_ONCE(t->hdr->live);
			memcpy(info.comm, t->hdr->comm, sizeof(info.comm));
			all[n] = info;
		}
		n++;
	}
	mutex_unlock(&kdat_tables_lock);
	*count = n;
	if (copy_to_user(ubuf, all, sizeof(*all) * min(n, capacity)))
		ret = KDAT_ERR(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG4);
	kvfree(all);
	return ret;
}

/* The table with this id, referenced, if the caller may see it. */
kdat_ret_t kdat_table_find(u64 id, struct kdat_table **out)
{
	kdat_ret_t ret = KDAT_ERR(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	struct kdat_table *t;

	mutex_lock(&kdat_tables_lock);
	list_for_each_entry(t, &kdat_tables, node) {
		if (t->id != id || !kdat_table_visible(t))
			continue;
		if (kdat_table_may_view(t)) {
			kdat_table_get(t);
			*out = t;
			ret = KDAT_DAT_SUCCESS;
		} else {
			ret = KDAT_ERR(KDAT_DAT_PRIVILEGES_VIOLATION, KDAT_DAT_NO_SUBTYPE);
		}
		break;
	}
	mutex_unlock(&kdat_tables_lock);
	return ret;
}

/* The table's id, as kdatctl lists it (tracepoints name owners by it); 0 for none. */
u64 kdat_table_id(const struct kdat_table *t)
{
	return t ? t->id : 0;
}

/* An IA's counters become readable by its handle (kdat_table_ia_counters). */
int kdat_table_add_stats(struct kdat_table *t, struct kdat_ia_stats *stats)
{
	return xa_err(xa_store(&t->ia_stats, KDAT_HANDLE_SLOT(stats->handle), stats,
			       GFP_KERNEL));
}

/*
 * ...and stop being: after this no reader holds them.  The slot may meanwhile
 * be a newer IA's: that one's entry stays.
 */
void kdat_table_del_stats(struct kdat_table *t, struct kdat_ia_stats *stats)
{
	xa_cmpxchg(&t->ia_stats, KDAT_HANDLE_SLOT(stats->handle), stats, NULL, GFP_KERNEL);
}

/* Copies the counters of the IA with this handle; room: values' length. */
kdat_ret_t kdat_table_ia_counters(struct kdat_table *t, u32 handle, u64 *values, u32 room)
{
	kdat_ret_t ret = KDAT_ERR(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_IA);
	struct kdat_ia_stats *stats;
	unsigned int i;

	xa_lock(&t->ia_stats);
	stats = xa_load(&t->ia_stats, KDAT_HANDLE_SLOT(handle));
	if (stats && handle && stats->handle == handle) {
		for (i = 0; i < min_t(u32, room, KDAT_IA_NR_COUNTERS); i++)
			values[i] = atomic64_read(&stats->v[i]);
		ret = KDAT_DAT_SUCCESS;
	}
	xa_unlock(&t->ia_stats);
	return ret;
}
