// SPDX-License-Identifier: GPL-2.0
/*
 * /dev/kdat's ioctls, dispatched from the command list in include/kdat/uapi/kdat.h
 * (KDAT_COMMANDS): one descriptor per command, and one path for all of them.
 *
 * The path: take the struct in at any size from the command's first size up
 * (copy_struct_from_user: a shorter struct reads as zero-tailed, a longer one
 * must have a zero tail), write it straight back so that a struct that cannot
 * be written fails before any work, check the reserved fields, resolve the
 * handles in this file's table only (a reference each, held for the call),
 * run the handler (the same functions a kernel consumer calls), and copy the
 * DAT status and outputs back.  A handler whose work outlives a failed
 * copy-out (an object the caller will never learn of, an fd) has a 'done'
 * step that undoes it, so every command is all or nothing.
 *
 * A new command is its line in KDAT_COMMANDS, its handler below, and the
 * library's call.
 */
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/nospec.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include "kdat_conn.h"
#include "kdat_ioctl.h"

enum kdat_handle_type { KDAT_H_IA, KDAT_H_EVD, KDAT_H_EP, KDAT_H_PSP, KDAT_H_RSP, KDAT_H_CR };
enum { KDAT_HANDLE_REQUIRED, KDAT_HANDLE_OPTIONAL };

#define KDAT_IOC_MAX_HANDLES	4

/* One handle field of a command's struct. */
struct kdat_ioc_handle {
	u8 cmd;			/* the command's place in the list */
	u8 type;		/* enum kdat_handle_type */
	u8 optional;
	u16 offset;
	u16 subtype;		/* DAT_INVALID_HANDLE's subtype when it names nothing */
};

/* One reserved input field that must be zero. */
struct kdat_ioc_zero {
	u8 cmd;
	u16 offset;
	u16 len;
};

/* One command in flight: its kernel copy and its resolved handles. */
struct kdat_ioc_call {
	struct kdat_ctx *ctx;
	void *arg;			/* the struct, at the kernel's size */
	void *obj[KDAT_IOC_MAX_HANDLES];	/* in list order; NULL for an absent optional one */
	int fd;				/* EVD_RING: the fd being handed out */
	struct file *file;
};

struct kdat_ioc_desc {
	long (*handler)(struct kdat_ioc_call *call);
	u8 nr;			/* _IOC_NR of its number */
	u16 size;		/* this kernel's struct */
	u16 min_size;		/* the struct when the command was added */
	u8 first_handle, nr_handles;
	u8 first_zero, nr_zeros;
};

/* The one kernel copy the path makes: every command's struct fits (checked below). */
#define KDAT_IOC_ARG_MAX	512

#define KDAT_NOTHING(...)

static u32 *kdat_ioc_status(struct kdat_ioc_call *call)
{
	/* every struct with a handle has status right after size (checked below) */
	return (u32 *)call->arg + 1;
}

/* ---- IA --------------------------------------------------------------------- */

static long kdat_ioc_version(struct kdat_ioc_call *call)
{
	struct kdat_version *a = call->arg;

	a->abi_version = KDAT_ABI_VERSION;
	a->dat_major = 2;
	a->dat_minor = 0;
	a->num_devices = kdat_devices_count();
	return 0;
}

static long kdat_ioc_ia_open(struct kdat_ioc_call *call)
{
	struct kdat_ia_open *a = call->arg;

	a->ia = 0;
	if (!memchr(a->name, '\0', sizeof(a->name)))
		a->status = KDAT_ERR(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG1);
	else
		a->status = kdat_ia_open_in(call->ctx, a->name, a->flags, NULL, &a->ia);
	return 0;
}

/* Undoes a create whose handle could not be written back: the caller never learns it. */
static void kdat_ioc_undo_create(struct kdat_ioc_call *call, u32 handle, enum kdat_obj_type type)
{
	struct kdat_obj *obj = kdat_obj_get(call->ctx, handle, type);

	if (!obj)
		return;		/* already freed (a racing call guessed the handle) */
	switch (type) {
	case KDAT_OBJ_IA:
		kdat_ia_close_in(container_of(obj, struct kdat_ia, obj), KDAT_IA_CLOSE_ABRUPT);
		break;
	case KDAT_OBJ_EVD:
		kdat_evd_free(container_of(obj, struct kdat_evd, obj));
		break;
	case KDAT_OBJ_EP:
		kdat_ep_free(container_of(obj, struct kdat_ep, obj));
		break;
	case KDAT_OBJ_SP:
		kdat_sp_free(container_of(obj, struct kdat_sp, obj));
		break;
	default:
		break;
	}
	kdat_obj_put(obj);
}

static void kdat_ioc_ia_open_done(struct kdat_ioc_call *call, int copy_ret)
{
	struct kdat_ia_open *a = call->arg;

	if (copy_ret && !a->status)
		kdat_ioc_undo_create(call, a->ia, KDAT_OBJ_IA);
}

static long kdat_ioc_ia_close(struct kdat_ioc_call *call)
{
	struct kdat_ia_close *a = call->arg;

	a->status = kdat_ia_close_in(call->obj[0], a->flags);
	return 0;
}

static long kdat_ioc_ia_query(struct kdat_ioc_call *call)
{
	struct kdat_ia_query *a = call->arg;
	struct kdat_ia_info *info;

	info = kzalloc(sizeof(*info), GFP_KERNEL);
	if (!info)
		return -ENOMEM;
	a->status = kdat_ia_query(call->obj[0], info);
	memset(a->device_name, 0, sizeof(a->device_name));
	memset(a->netdev_name, 0, sizeof(a->netdev_name));
	memset(&a->local_addr, 0, sizeof(a->local_addr));
	if (!a->status) {
		strscpy(a->device_name, info->device_name, sizeof(a->device_name));
		strscpy(a->netdev_name, info->netdev_name, sizeof(a->netdev_name));
		kdat_addr_out(&a->local_addr, (struct sockaddr *)&info->local_addr);
		a->max_connect_private_data = info->max_connect_private_data;
		a->max_accept_private_data = info->max_accept_private_data;
		a->max_reject_private_data = info->max_reject_private_data;
		a->max_rdma_read_in = info->max_rdma_read_in;
		a->max_rdma_read_out = info->max_rdma_read_out;
		a->max_eps = info->max_eps;
		a->max_evd_qlen = info->max_evd_qlen;
		a->max_dtos = info->max_dtos;
		a->max_iov = info->max_iov;
		a->supported_qos = info->supported_qos;
	}
	kfree(info);
	return 0;
}

static long kdat_ioc_ia_counters(struct kdat_ioc_call *call)
{
	struct kdat_ia_counters *a = call->arg;
	struct kdat_table *t = call->ctx->table;

	a->count = KDAT_IA_NR_COUNTERS;
	memset(a->value, 0, sizeof(a->value));
	/* another owner's table: found only under TABLE_ATTACH's rule */
	if (a->table) {
		a->status = kdat_table_find(a->table, &t);
		if (a->status)
			return 0;
	}
	a->status = kdat_table_ia_counters(t, a->ia, a->value, ARRAY_SIZE(a->value));
	if (a->table)
		kdat_table_put(t);
	return 0;
}

static long kdat_ioc_dev_counters(struct kdat_ioc_call *call)
{
	struct kdat_dev_counters *a = call->arg;

	a->count = KDAT_IA_NR_COUNTERS;
	memset(a->value, 0, sizeof(a->value));
	a->status = kdat_dev_counters(a->device, &a->next, a->name, sizeof(a->name), a->value,
				      ARRAY_SIZE(a->value));
	return 0;
}

/* ---- EVD ------------------------------------------------------------------- */

static long kdat_ioc_evd_create(struct kdat_ioc_call *call)
{
	struct kdat_evd_create *a = call->arg;

	a->evd = 0;
	a->status = kdat_evd_create_in(call->obj[0], a->qlen, a->flags, NULL, NULL, NULL,
				       &a->evd);
	return 0;
}

static void kdat_ioc_evd_create_done(struct kdat_ioc_call *call, int copy_ret)
{
	struct kdat_evd_create *a = call->arg;

	if (copy_ret && !a->status)
		kdat_ioc_undo_create(call, a->evd, KDAT_OBJ_EVD);
}

static long kdat_ioc_evd_free(struct kdat_ioc_call *call)
{
	struct kdat_evd_free *a = call->arg;

	a->status = kdat_evd_free(call->obj[0]);
	return 0;
}

/*
 * A non-ring EVD's event (wait, or dequeue when timeout_us is NULL), taken
 * with its object references and handed out as the ABI has it.
 */
static kdat_ret_t kdat_take_event(struct kdat_evd *evd, const u32 *timeout_us, u32 threshold,
				  struct kdat_event *out, struct kdat_event_ud *ud, u32 *nmore)
{
	struct kdat_event_info info;
	kdat_ret_t ret;

	ret = timeout_us ? kdat_evd_wait_ref(evd, *timeout_us, threshold, &info, nmore) :
			   kdat_evd_dequeue_ref(evd, &info, nmore);
	if (!ret) {
		kdat_event_to_user(out, ud, &info);
		kdat_event_put_refs(&info);
	}
	return ret;
}

static long kdat_ioc_evd_wait(struct kdat_ioc_call *call)
{
	struct kdat_evd_wait *a = call->arg;
	struct kdat_evd *evd = call->obj[0];

	if (evd->flags & KDAT_EVD_RING_MODE)	/* its ring's consumer takes its events */
		a->status = KDAT_ERR(KDAT_DAT_INVALID_STATE, KDAT_DAT_INVALID_STATE_EVD_IN_USE);
	else
		a->status = kdat_take_event(evd, &a->timeout_us, a->threshold, &a->event,
					    &a->ud, &a->nmore);
	return 0;
}

static long kdat_ioc_evd_dequeue(struct kdat_ioc_call *call)
{
	struct kdat_evd_dequeue *a = call->arg;
	struct kdat_evd *evd = call->obj[0];

	if (evd->flags & KDAT_EVD_RING_MODE)	/* its ring's consumer takes its events */
		a->status = KDAT_ERR(KDAT_DAT_INVALID_STATE, KDAT_DAT_INVALID_STATE_EVD_IN_USE);
	else
		a->status = kdat_take_event(evd, NULL, 0, &a->event, &a->ud, &a->nmore);
	return 0;
}

static long kdat_ioc_evd_ring(struct kdat_ioc_call *call)
{
	struct kdat_evd_ring *a = call->arg;
	struct kdat_evd *evd = call->obj[0];
	struct file *file;
	int fd;

	a->fd = -1;
	memset(&a->off, 0, sizeof(a->off));
	if (!(evd->flags & KDAT_EVD_RING_MODE)) {	/* chosen at creation */
		a->status = KDAT_ERR(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE);
		return 0;
	}
	fd = get_unused_fd_flags(O_CLOEXEC);
	if (fd < 0) {
		a->status = KDAT_ERR(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_NO_SUBTYPE);
		return 0;
	}
	file = kdat_ring_attach(evd, a->evd, &a->entries, &a->map_size);
	if (IS_ERR(file)) {
		a->status = PTR_ERR(file) == -EBUSY ?
			KDAT_ERR(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE) :
			KDAT_ERR(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
		put_unused_fd(fd);
		return 0;
	}
	kdat_rec_sync_unlocked(&evd->obj);
	kdat_ring_offsets(&a->off);
	a->status = KDAT_DAT_SUCCESS;
	a->fd = fd;
	call->fd = fd;
	call->file = file;
	return 0;
}

/* The fd exists only once the caller has learnt its number. */
static void kdat_ioc_evd_ring_done(struct kdat_ioc_call *call, int copy_ret)
{
	if (!call->file)
		return;
	if (copy_ret) {
		/* the EVD keeps its ring; the fd never existed */
		put_unused_fd(call->fd);
		fput(call->file);
	} else {
		fd_install(call->fd, call->file);
	}
}

static long kdat_ioc_evd_ring_wait(struct kdat_ioc_call *call)
{
	struct kdat_evd_ring_wait *a = call->arg;
	struct kdat_evd *evd = call->obj[0];

	if (!READ_ONCE(evd->ring))
		a->status = KDAT_ERR(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE);
	else
		a->status = kdat_evd_ring_wait(evd, a->timeout_us, a->threshold, &a->available);
	return 0;
}

/* ---- EP --------------------------------------------------------------------- */

static long kdat_ioc_ep_create(struct kdat_ioc_call *call)
{
	struct kdat_ep_create *a = call->arg;

	a->ep = 0;
	a->status = kdat_ep_create_in(call->obj[0], call->obj[1], call->obj[2], call->obj[3],
				      &a->attr, NULL, NULL, &a->ep);
	return 0;
}

static void kdat_ioc_ep_create_done(struct kdat_ioc_call *call, int copy_ret)
{
	struct kdat_ep_create *a = call->arg;

	if (copy_ret && !a->status)
		kdat_ioc_undo_create(call, a->ep, KDAT_OBJ_EP);
}

static long kdat_ioc_ep_free(struct kdat_ioc_call *call)
{
	struct kdat_ep_free *a = call->arg;

	a->status = kdat_ep_free(call->obj[0]);
	return 0;
}

static long kdat_ioc_ep_query(struct kdat_ioc_call *call)
{
	struct kdat_ep_query *a = call->arg;
	struct kdat_ep *ep = call->obj[0];
	struct kdat_ep_info *info;

	info = kzalloc(sizeof(*info), GFP_KERNEL);
	if (!info)
		return -ENOMEM;
	a->status = kdat_ep_query(ep, info);
	memset((u8 *)a + offsetof(struct kdat_ep_query, state), 0,
	       sizeof(*a) - offsetof(struct kdat_ep_query, state));
	if (!a->status) {
		a->state = info->state;
		a->attr = info->attr;
		kdat_addr_out(&a->local_addr, (struct sockaddr *)&info->local_addr);
		kdat_addr_out(&a->remote_addr, (struct sockaddr *)&info->remote_addr);
		/* under the lock: a racing modify or free may drop these EVDs */
		mutex_lock(&call->ctx->lock);
		if (!ep->obj.dead) {
			a->connect_evd = kdat_obj_handle(ep->connect_evd);
			a->request_evd = kdat_obj_handle(ep->request_evd);
			a->recv_evd = kdat_obj_handle(ep->recv_evd);
		}
		mutex_unlock(&call->ctx->lock);
		a->transitions = (u32)info->transitions;
	}
	kfree(info);
	return 0;
}

static long kdat_ioc_ep_modify(struct kdat_ioc_call *call)
{
	struct kdat_ep_modify *a = call->arg;

	a->status = kdat_ep_modify(call->obj[0], a->mask, &a->attr);
	return 0;
}

static long kdat_ioc_ep_reset(struct kdat_ioc_call *call)
{
	struct kdat_ep_reset *a = call->arg;

	a->status = kdat_ep_reset_to(call->obj[0], a->qp_num);
	return 0;
}

static long kdat_ioc_ep_connect(struct kdat_ioc_call *call)
{
	struct kdat_ep_connect *a = call->arg;
	struct sockaddr_storage remote;

	if (kdat_addr_in(&remote, &a->remote_addr))
		a->status = KDAT_ERR(KDAT_DAT_INVALID_ADDRESS, KDAT_DAT_NO_SUBTYPE);
	else if (kdat_ep_is_ud(call->obj[0]))	/* an address exchange, not a connection */
		a->status = kdat_ud_connect(call->obj[0], (struct sockaddr *)&remote,
					    a->conn_qual, a->timeout_us, a->private_data,
					    a->private_data_size, a->qos, a->flags);
	else
		a->status = kdat_ep_connect(call->obj[0], (struct sockaddr *)&remote,
					    a->conn_qual, a->timeout_us, a->private_data,
					    a->private_data_size, a->qos, a->flags);
	return 0;
}

static long kdat_ioc_ep_dup_connect(struct kdat_ioc_call *call)
{
	struct kdat_ep_dup_connect *a = call->arg;

	a->status = kdat_ep_dup_connect(call->obj[0], call->obj[1], a->timeout_us,
					a->private_data, a->private_data_size, a->qos);
	return 0;
}

static long kdat_ioc_ep_disconnect(struct kdat_ioc_call *call)
{
	struct kdat_ep_disconnect *a = call->arg;

	if (a->flags & (KDAT_CLOSE_HOLD_DREQ | KDAT_CLOSE_REQUESTS_DONE))
		a->status = kdat_ep_disconnect_user(call->obj[0], a->flags);
	else
		a->status = kdat_ep_disconnect(call->obj[0], a->flags);
	return 0;
}

/* ---- service points and CRs ----------------------------------------------- */

static long kdat_ioc_psp_create(struct kdat_ioc_call *call)
{
	struct kdat_psp_create *a = call->arg;

	a->psp = 0;
	a->status = kdat_sp_create_in(call->obj[0], a->conn_qual, call->obj[1], a->flags,
				      NULL, NULL, &a->psp);
	return 0;
}

static void kdat_ioc_psp_create_done(struct kdat_ioc_call *call, int copy_ret)
{
	struct kdat_psp_create *a = call->arg;

	if (copy_ret && !a->status)
		kdat_ioc_undo_create(call, a->psp, KDAT_OBJ_SP);
}

static long kdat_ioc_psp_free(struct kdat_ioc_call *call)
{
	struct kdat_psp_free *a = call->arg;

	a->status = kdat_sp_free(call->obj[0]);
	return 0;
}

static long kdat_ioc_psp_query(struct kdat_ioc_call *call)
{
	struct kdat_psp_query *a = call->arg;
	struct kdat_sp *sp = call->obj[0];

	a->ia = 0;
	a->conn_qual = 0;
	a->evd = 0;
	a->flags = 0;
	mutex_lock(&call->ctx->lock);
	if (sp->obj.dead) {
		a->status = KDAT_ERR(KDAT_DAT_INVALID_HANDLE, KDAT_DAT_INVALID_HANDLE_PSP);
	} else {
		a->status = KDAT_DAT_SUCCESS;
		a->ia = sp->ia->obj.handle;
		a->conn_qual = sp->conn_qual;
		a->evd = kdat_obj_handle(sp->evd);
		a->flags = sp->flags;
	}
	mutex_unlock(&call->ctx->lock);
	return 0;
}

static long kdat_ioc_rsp_create(struct kdat_ioc_call *call)
{
	struct kdat_rsp_create *a = call->arg;

	a->rsp = 0;
	a->status = kdat_sp_create_in(call->obj[0], a->conn_qual, call->obj[2],
				      KDAT_PSP_CONSUMER, call->obj[1], NULL, &a->rsp);
	return 0;
}

static void kdat_ioc_rsp_create_done(struct kdat_ioc_call *call, int copy_ret)
{
	struct kdat_rsp_create *a = call->arg;

	if (copy_ret && !a->status)
		kdat_ioc_undo_create(call, a->rsp, KDAT_OBJ_SP);
}

static long kdat_ioc_rsp_free(struct kdat_ioc_call *call)
{
	struct kdat_rsp_free *a = call->arg;

	a->status = kdat_sp_free(call->obj[0]);
	return 0;
}

static long kdat_ioc_cr_query(struct kdat_ioc_call *call)
{
	struct kdat_cr_query *a = call->arg;
	struct kdat_cr *cr = call->obj[0];
	struct kdat_cr_info *info;

	info = kzalloc(sizeof(*info), GFP_KERNEL);
	if (!info)
		return -ENOMEM;
	a->status = kdat_cr_query(cr, info);
	memset((u8 *)a + offsetof(struct kdat_cr_query, sp), 0,
	       sizeof(*a) - offsetof(struct kdat_cr_query, sp));
	if (!a->status) {
		/* info's SP and EP are only safe to read while the CR lives */
		mutex_lock(&call->ctx->lock);
		if (!cr->obj.dead) {
			a->sp = kdat_obj_handle(cr->sp);
			a->ep = kdat_obj_handle(cr->ep);
		}
		mutex_unlock(&call->ctx->lock);
		a->remote_rdma_read_in = info->remote_rdma_read_in;
		a->remote_rdma_read_out = info->remote_rdma_read_out;
		a->private_data_size = info->private_data_size;
		memcpy(a->private_data, info->private_data, info->private_data_size);
		kdat_addr_out(&a->remote_addr, (struct sockaddr *)&info->remote_addr);
		kdat_addr_out(&a->local_addr, (struct sockaddr *)&info->local_addr);
		a->remote_retry_count = info->remote_retry_count;
		a->remote_rnr_retry_count = info->remote_rnr_retry_count;
		a->remote_flow_control = info->remote_flow_control;
	}
	kfree(info);
	return 0;
}

static long kdat_ioc_cr_accept(struct kdat_ioc_call *call)
{
	struct kdat_cr_accept *a = call->arg;

	a->status = kdat_cr_accept(call->obj[0], call->obj[1], a->private_data,
				   a->private_data_size);
	return 0;
}

static long kdat_ioc_cr_reject(struct kdat_ioc_call *call)
{
	struct kdat_cr_reject *a = call->arg;

	a->status = kdat_cr_reject(call->obj[0], a->private_data, a->private_data_size);
	return 0;
}

/* ---- shared tables: the list, and attaching a view ------------------------- */

static long kdat_ioc_table_list(struct kdat_ioc_call *call)
{
	struct kdat_table_list *a = call->arg;

	if (a->capacity > KDAT_TABLE_MAX_SLOTS)
		a->status = KDAT_ERR(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG3);
	else
		a->status = kdat_table_list(u64_to_user_ptr(a->tables), a->capacity, &a->count);
	return 0;
}

static long kdat_ioc_table_attach(struct kdat_ioc_call *call)
{
	struct kdat_table_attach *a = call->arg;
	struct kdat_ctx *ctx = call->ctx;
	struct kdat_table *t = NULL, *old;

	a->status = kdat_table_find(a->id, &t);
	if (!a->status) {
		mutex_lock(&ctx->lock);
		old = ctx->view;
		ctx->view = t;
		mutex_unlock(&ctx->lock);
		kdat_table_put(old);	/* existing mappings keep their own reference */
		kdat_table_mark_viewer(ctx->table);
	}
	return 0;
}

static long kdat_ioc_table_wait(struct kdat_ioc_call *call)
{
	struct kdat_table_wait *a = call->arg;

	a->status = kdat_tables_wait(&a->changes, a->timeout_us);
	return 0;
}

/* ---- userspace QPs (kdat_uqp.c) --------------------------------------------- */

static long kdat_ioc_uqp_create(struct kdat_ioc_call *call)
{
	struct kdat_uqp_create *a = call->arg;

	a->ep = 0;
	a->status = kdat_uqp_create(call->obj[0], call->obj[1], &a->attr, a->qp_num, a->flags,
				    &a->ep);
	if (a->status)
		a->ep = 0;
	return 0;
}

static void kdat_ioc_uqp_create_done(struct kdat_ioc_call *call, int copy_ret)
{
	struct kdat_uqp_create *a = call->arg;

	if (copy_ret && !a->status)
		kdat_ioc_undo_create(call, a->ep, KDAT_OBJ_EP);
}

static long kdat_ioc_uqp_attr(struct kdat_ioc_call *call)
{
	struct kdat_uqp_attr *a = call->arg;

	/* everything after the inputs is output */
	memset((u8 *)a + offsetof(struct kdat_uqp_attr, attr_mask), 0,
	       sizeof(*a) - offsetof(struct kdat_uqp_attr, attr_mask));
	a->status = kdat_uqp_attr(call->obj[0], call->obj[1], a->qp_state, a);
	return 0;
}

static long kdat_ioc_uqp_establish(struct kdat_ioc_call *call)
{
	struct kdat_uqp_establish *a = call->arg;

	a->status = kdat_uqp_establish(call->obj[0], a->flags);
	return 0;
}

/* ---- the descriptors, made from KDAT_COMMANDS ----------------------------------- */

/* Each command's place in the list. */
#define KDAT_CMD_INDEX(NAME, name, first)	kdat_cmd_##name,
enum { KDAT_COMMANDS(KDAT_CMD_INDEX, KDAT_NOTHING, KDAT_NOTHING) KDAT_NR_COMMANDS };

#define KDAT_DESC(NAME, name, first)						\
	{									\
		.handler = kdat_ioc_##name,					\
		.nr = _IOC_NR(KDAT_IOC_##NAME),					\
		.size = sizeof(struct kdat_##name) +				\
			BUILD_BUG_ON_ZERO(sizeof(struct kdat_##name) > KDAT_IOC_ARG_MAX), \
		.min_size = offsetofend(struct kdat_##name, first),		\
	},
/* handles and zeros are indexed into it at load (kdat_ioctl_init) */
static struct kdat_ioc_desc kdat_ioc_descs[KDAT_NR_COMMANDS] __ro_after_init = {
	KDAT_COMMANDS(KDAT_DESC, KDAT_NOTHING, KDAT_NOTHING)
};

/* A handle is a __u32, and a struct with one reports its status in word 1. */
#define KDAT_HANDLE_DESC(name, field, htype, use, sub)			\
	{									\
		.cmd = kdat_cmd_##name,						\
		.type = KDAT_H_##htype,						\
		.optional = KDAT_HANDLE_##use == KDAT_HANDLE_OPTIONAL,		\
		.offset = offsetof(struct kdat_##name, field) +			\
			BUILD_BUG_ON_ZERO(sizeof_field(struct kdat_##name, field) != 4) + \
			BUILD_BUG_ON_ZERO(offsetof(struct kdat_##name, status) != 4), \
		.subtype = KDAT_DAT_##sub,					\
	},
static const struct kdat_ioc_handle kdat_ioc_handles[] = {
	KDAT_COMMANDS(KDAT_NOTHING, KDAT_HANDLE_DESC, KDAT_NOTHING)
};

#define KDAT_ZERO_DESC(name, field)						\
	{									\
		.cmd = kdat_cmd_##name,						\
		.offset = offsetof(struct kdat_##name, field),			\
		.len = sizeof_field(struct kdat_##name, field),			\
	},
static const struct kdat_ioc_zero kdat_ioc_zeros[] = {
	KDAT_COMMANDS(KDAT_NOTHING, KDAT_NOTHING, KDAT_ZERO_DESC)
};

/* The resolved objects are handed to handlers as their own types. */
static_assert(offsetof(struct kdat_ia, obj) == 0 && offsetof(struct kdat_evd, obj) == 0 &&
	      offsetof(struct kdat_ep, obj) == 0 && offsetof(struct kdat_sp, obj) == 0 &&
	      offsetof(struct kdat_cr, obj) == 0);

/* Commands whose work must be undone, or completed, once the copy-out's result is known. */
static void (*const kdat_ioc_done[KDAT_NR_COMMANDS])(struct kdat_ioc_call *, int) = {
	[kdat_cmd_ia_open] = kdat_ioc_ia_open_done,
	[kdat_cmd_evd_create] = kdat_ioc_evd_create_done,
	[kdat_cmd_evd_ring] = kdat_ioc_evd_ring_done,
	[kdat_cmd_ep_create] = kdat_ioc_ep_create_done,
	[kdat_cmd_psp_create] = kdat_ioc_psp_create_done,
	[kdat_cmd_rsp_create] = kdat_ioc_rsp_create_done,
	[kdat_cmd_uqp_create] = kdat_ioc_uqp_create_done,
};

/* _IOC_NR -> 1 + the command's place in the list, or 0 for none */
static u8 kdat_ioc_index[_IOC_NRMASK + 1] __ro_after_init;

/* Indexes the list: each number its command, each command its run of handles and zeros. */
int kdat_ioctl_init(void)
{
	struct kdat_ioc_desc *d;
	unsigned int i;

	for (i = 0; i < KDAT_NR_COMMANDS; i++) {
		if (kdat_ioc_index[kdat_ioc_descs[i].nr])
			goto bad;
		kdat_ioc_index[kdat_ioc_descs[i].nr] = i + 1;
	}
	for (i = 0; i < ARRAY_SIZE(kdat_ioc_handles); i++) {
		d = &kdat_ioc_descs[kdat_ioc_handles[i].cmd];
		if (!d->nr_handles)
			d->first_handle = i;
		if (d->first_handle + d->nr_handles != i || d->nr_handles == KDAT_IOC_MAX_HANDLES)
			goto bad;
		d->nr_handles++;
	}
	for (i = 0; i < ARRAY_SIZE(kdat_ioc_zeros); i++) {
		d = &kdat_ioc_descs[kdat_ioc_zeros[i].cmd];
		if (!d->nr_zeros)
			d->first_zero = i;
		if (d->first_zero + d->nr_zeros != i)
			goto bad;
		d->nr_zeros++;
	}
	return 0;
bad:
	pr_err("kdat: KDAT_COMMANDS: entry %u repeats a number or is apart from its command\n", i);
	return -EINVAL;
}

static void *kdat_ioc_resolve(struct kdat_ctx *ctx, u32 handle, enum kdat_handle_type type)
{
	static const enum kdat_obj_type obj_type[] = {
		[KDAT_H_IA] = KDAT_OBJ_IA, [KDAT_H_EVD] = KDAT_OBJ_EVD, [KDAT_H_EP] = KDAT_OBJ_EP,
		[KDAT_H_PSP] = KDAT_OBJ_SP, [KDAT_H_RSP] = KDAT_OBJ_SP, [KDAT_H_CR] = KDAT_OBJ_CR,
	};
	struct kdat_obj *obj = kdat_obj_get(ctx, handle, obj_type[type]);

	/* a PSP handle never names an RSP, nor the other way round */
	if (obj && obj->type == KDAT_OBJ_SP &&
	    container_of(obj, struct kdat_sp, obj)->is_rsp != (type == KDAT_H_RSP)) {
		kdat_obj_put(obj);
		return NULL;
	}
	return obj;
}

long kdat_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct kdat_ioc_call call = { .ctx = file->private_data };
	void __user *uarg = (void __user *)arg;
	const struct kdat_ioc_handle *h;
	const struct kdat_ioc_zero *z;
	const struct kdat_ioc_desc *d;
	u64 buf[KDAT_IOC_ARG_MAX / sizeof(u64)];
	unsigned int idx, i;
	u32 usize, size_out;
	long ret;

	if (_IOC_TYPE(cmd) != KDAT_IOC_MAGIC || _IOC_DIR(cmd) != (_IOC_READ | _IOC_WRITE))
		return -ENOTTY;
	idx = kdat_ioc_index[_IOC_NR(cmd)];
	if (!idx)
		return -ENOTTY;
	idx = array_index_nospec(idx - 1, KDAT_NR_COMMANDS);
	d = &kdat_ioc_descs[idx];

	if (get_user(usize, (u32 __user *)uarg))
		return -EFAULT;
	if (usize != _IOC_SIZE(cmd) || usize < d->min_size)
		return -EINVAL;
	ret = copy_struct_from_user(buf, d->size, uarg, usize);
	if (ret)
		return ret;
	/*
	 * Every struct carries a result out: one that cannot be written back
	 * (read-only, partly unmapped) fails here, before any work is done.
	 */
	size_out = min_t(u32, usize, d->size);
	if (copy_to_user(uarg, buf, size_out))
		return -EFAULT;
	for (i = 0, z = &kdat_ioc_zeros[d->first_zero]; i < d->nr_zeros; i++, z++)
		if (memchr_inv((u8 *)buf + z->offset, 0, z->len))
			return -EINVAL;

	call.arg = buf;
	for (i = 0, h = &kdat_ioc_handles[d->first_handle]; i < d->nr_handles; i++, h++) {
		u32 handle = *(u32 *)((u8 *)buf + h->offset);

		if (!handle && h->optional)
			continue;
		call.obj[i] = kdat_ioc_resolve(call.ctx, handle, h->type);
		if (!call.obj[i]) {
			*kdat_ioc_status(&call) = KDAT_ERR(KDAT_DAT_INVALID_HANDLE, h->subtype);
			goto copy_out;
		}
	}
	ret = d->handler(&call);
	if (ret)
		goto put;
copy_out:
	/* a thread that unmaps the struct meanwhile still gets EFAULT, and the work undone */
	ret = copy_to_user(uarg, buf, size_out) ? -EFAULT : 0;
	if (kdat_ioc_done[idx])
		kdat_ioc_done[idx](&call, ret);
put:
	for (i = 0; i < d->nr_handles; i++)
		if (call.obj[i])
			kdat_obj_put(call.obj[i]);
	return ret;
}
