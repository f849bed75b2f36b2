// SPDX-License-Identifier: GPL-2.0
/*
 * /dev/kdat: per-file handle tables and the ioctl ABI of include/uapi/kdat.h.
 *
 * Every command: read the size word, insist on the exact struct size, copy
 * in, insist that reserved fields are zero, resolve handles in this file's
 * table only (holding a reference for the call), call the same function a
 * kernel consumer would, and copy the DAT status and outputs back.
 */
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include "kdat_priv.h"

static int kdat_copy_in(void __user *uarg, void *buf, size_t size)
{
	u32 usize;

	if (get_user(usize, (u32 __user *)uarg))
		return -EFAULT;
	if (usize != size)
		return -EINVAL;
	if (copy_from_user(buf, uarg, size))
		return -EFAULT;
	/*
	 * Every struct carries a status out: one that cannot be written back
	 * (read-only, partly unmapped) fails here, before any work is done,
	 * so EFAULT leaves the file as it was.  A thread that unmaps the
	 * argument while the call runs can still make the copy-out fail.
	 */
	if (copy_to_user(uarg, buf, size))
		return -EFAULT;
	return 0;
}

static int kdat_copy_out(void __user *uarg, const void *buf, size_t size)
{
	return copy_to_user(uarg, buf, size) ? -EFAULT : 0;
}

static bool kdat_nonzero(const void *p, size_t n)
{
	return memchr_inv(p, 0, n) != NULL;
}

/* Declares 'struct T a', copies it in, and returns the errno on failure. */
#define KDAT_IN(T, a, uarg)						\
	struct T a;							\
	int ioc_ret_ = kdat_copy_in(uarg, &a, sizeof(a));		\
	if (ioc_ret_)							\
		return ioc_ret_

#define KDAT_OUT(a, uarg)	kdat_copy_out(uarg, &a, sizeof(a))

#define KDAT_BAD_HANDLE(sub)	KDAT_ERR(KDAT_DAT_INVALID_HANDLE, sub)

static void *kdat_get(struct kdat_ctx *ctx, u32 handle, enum kdat_obj_type type)
{
	return kdat_obj_get(ctx, handle, type);
}

static void kdat_put(void *obj)
{
	if (obj)
		kdat_obj_put(obj);
}

/* ---- addresses ------------------------------------------------------------ */

void kdat_addr_out(struct kdat_addr *out, const struct sockaddr *sa)
{
	memset(out, 0, sizeof(*out));
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;

		out->family = KDAT_AF_INET;
		out->port = ntohs(sin->sin_port);
		memcpy(out->addr, &sin->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;

		out->family = KDAT_AF_INET6;
		out->port = ntohs(sin6->sin6_port);
		out->scope_id = sin6->sin6_scope_id;
		memcpy(out->addr, &sin6->sin6_addr, 16);
	}
}

static int kdat_addr_in(struct sockaddr_storage *ss, const struct kdat_addr *in)
{
	memset(ss, 0, sizeof(*ss));
	if (in->family == KDAT_AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)ss;

		if (in->scope_id || kdat_nonzero(in->addr + 4, 12))
			return -EINVAL;
		sin->sin_family = AF_INET;
		memcpy(&sin->sin_addr, in->addr, 4);
		return 0;
	}
	if (in->family == KDAT_AF_INET6) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_scope_id = in->scope_id;
		memcpy(&sin6->sin6_addr, in->addr, 16);
		return 0;
	}
	return -EINVAL;
}

/* ---- IA ------------------------------------------------------------------------ */

static long kdat_ioc_version(void __user *uarg)
{
	KDAT_IN(kdat_version, v, uarg);
	if (kdat_nonzero(v.reserved, sizeof(v.reserved)))
		return -EINVAL;
	v.abi_version = KDAT_ABI_VERSION;
	v.dat_major = 2;
	v.dat_minor = 0;
	v.num_devices = kdat_devices_count();
	return KDAT_OUT(v, uarg);
}

static long kdat_ioc_ia_open(struct kdat_ctx *ctx, void __user *uarg)
{
	KDAT_IN(kdat_ia_open, a, uarg);
	if (a.reserved)
		return -EINVAL;
	if (!memchr(a.name, '\0', sizeof(a.name))) {
		a.status = KDAT_ERR(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG1);
		return KDAT_OUT(a, uarg);
	}
	/* a.ia is written while the IA cannot be closed by a racing thread */
	a.status = kdat_ia_open_in(ctx, a.name, NULL, &a.ia);
	return KDAT_OUT(a, uarg);
}

static long kdat_ioc_ia_close(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_ia *ia;

	KDAT_IN(kdat_ia_close, a, uarg);
	ia = kdat_get(ctx, a.ia, KDAT_OBJ_IA);
	a.status = ia ? kdat_ia_close_in(ia, a.flags) : KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_IA);
	kdat_put(ia);
	return KDAT_OUT(a, uarg);
}

static long kdat_ioc_ia_query(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_ia_info *info;
	struct kdat_ia *ia;
	long ret;

	KDAT_IN(kdat_ia_query, a, uarg);
	if (a.reserved)
		return -EINVAL;
	info = kzalloc(sizeof(*info), GFP_KERNEL);
	if (!info)
		return -ENOMEM;
	ia = kdat_get(ctx, a.ia, KDAT_OBJ_IA);
	a.status = ia ? kdat_ia_query(ia, info) : KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_IA);
	kdat_put(ia);
	memset(a.device_name, 0, sizeof(a.device_name));
	memset(a.netdev_name, 0, sizeof(a.netdev_name));
	memset(&a.local_addr, 0, sizeof(a.local_addr));
	if (!a.status) {
		strscpy(a.device_name, info->device_name, sizeof(a.device_name));
		strscpy(a.netdev_name, info->netdev_name, sizeof(a.netdev_name));
		kdat_addr_out(&a.local_addr, (struct sockaddr *)&info->local_addr);
		a.max_connect_private_data = info->max_connect_private_data;
		a.max_accept_private_data = info->max_accept_private_data;
		a.max_reject_private_data = info->max_reject_private_data;
		a.max_rdma_read_in = info->max_rdma_read_in;
		a.max_rdma_read_out = info->max_rdma_read_out;
		a.max_eps = info->max_eps;
		a.max_evd_qlen = info->max_evd_qlen;
		a.max_dtos = info->max_dtos;
		a.max_iov = info->max_iov;
		a.supported_qos = info->supported_qos;
	}
	kfree(info);
	ret = KDAT_OUT(a, uarg);
	return ret;
}

/* ---- EVD ---------------------------------------------------------------------- */

static long kdat_ioc_evd_create(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_ia *ia;

	KDAT_IN(kdat_evd_create, a, uarg);
	ia = kdat_get(ctx, a.ia, KDAT_OBJ_IA);
	a.status = ia ? kdat_evd_create_in(ia, a.qlen, a.flags, NULL, NULL, NULL, &a.evd) :
		   KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_IA);
	kdat_put(ia);
	return KDAT_OUT(a, uarg);
}

static long kdat_ioc_evd_free(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_evd *evd;

	KDAT_IN(kdat_evd_free, a, uarg);
	if (a.reserved)
		return -EINVAL;
	evd = kdat_get(ctx, a.evd, KDAT_OBJ_EVD);
	a.status = evd ? kdat_evd_free(evd) : KDAT_BAD_HANDLE(KDAT_DAT_NO_SUBTYPE);
	kdat_put(evd);
	return KDAT_OUT(a, uarg);
}

/* Converts a taken event (holding object references) to the ABI and drops them. */
static void kdat_event_out(struct kdat_event *out, struct kdat_event_info *in)
{
	kdat_event_to_user(out, in);
	kdat_event_put_refs(in);
}

/*
 * A non-ring EVD's event (wait, or dequeue when timeout_us is NULL), taken
 * with its object references and handed out as the ABI has it.
 */
static kdat_ret_t kdat_take_event(struct kdat_evd *evd, const u32 *timeout_us, u32 threshold,
				  struct kdat_event *out, u32 *nmore)
{
	struct kdat_event_info *info = kzalloc(sizeof(*info), GFP_KERNEL);
	kdat_ret_t ret;

	if (!info)
		return KDAT_ERR(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
	ret = timeout_us ? kdat_evd_wait_ref(evd, *timeout_us, threshold, info, nmore) :
			   kdat_evd_dequeue_ref(evd, info, nmore);
	if (!ret)
		kdat_event_out(out, info);
	kfree(info);
	return ret;
}

static long kdat_ioc_evd_wait(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_evd *evd;

	KDAT_IN(kdat_evd_wait, a, uarg);
	evd = kdat_get(ctx, a.evd, KDAT_OBJ_EVD);
	if (!evd) {
		a.status = KDAT_BAD_HANDLE(KDAT_DAT_NO_SUBTYPE);
	} else if (READ_ONCE(evd->ring)) {
		/* a ring EVD: the kernel takes from the ring on the caller's behalf */
		a.status = kdat_evd_ring_wait(evd, a.timeout_us, a.threshold,
					      &a.event, &a.nmore, NULL);
	} else {
		a.status = kdat_take_event(evd, &a.timeout_us, a.threshold, &a.event, &a.nmore);
	}
	kdat_put(evd);
	return KDAT_OUT(a, uarg);
}

static long kdat_ioc_evd_dequeue(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_evd *evd;

	KDAT_IN(kdat_evd_dequeue, a, uarg);
	evd = kdat_get(ctx, a.evd, KDAT_OBJ_EVD);
	if (!evd) {
		a.status = KDAT_BAD_HANDLE(KDAT_DAT_NO_SUBTYPE);
	} else if (READ_ONCE(evd->ring)) {
		a.status = kdat_evd_ring_wait(evd, 0, 1, &a.event, &a.nmore, NULL);
		if ((a.status & KDAT_DAT_TYPE_MASK) == KDAT_DAT_TIMEOUT_EXPIRED)
			a.status = KDAT_ERR(KDAT_DAT_QUEUE_EMPTY, KDAT_DAT_NO_SUBTYPE);
	} else {
		a.status = kdat_take_event(evd, NULL, 0, &a.event, &a.nmore);
	}
	kdat_put(evd);
	return KDAT_OUT(a, uarg);
}

/* ---- EP ------------------------------------------------------------------------- */

/* An optional EVD handle: 0 is "none", anything else must resolve. */
static bool kdat_get_opt_evd(struct kdat_ctx *ctx, u32 handle, struct kdat_evd **evd)
{
	*evd = NULL;
	if (!handle)
		return true;
	*evd = kdat_get(ctx, handle, KDAT_OBJ_EVD);
	return *evd != NULL;
}

static long kdat_ioc_ep_create(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_evd *conn = NULL, *req = NULL, *recv = NULL;
	struct kdat_ia *ia;

	KDAT_IN(kdat_ep_create, a, uarg);
	if (a.reserved || kdat_nonzero(a.attr.reserved, sizeof(a.attr.reserved)))
		return -EINVAL;
	ia = kdat_get(ctx, a.ia, KDAT_OBJ_IA);
	if (!ia)
		a.status = KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_IA);
	else if (!a.connect_evd || !kdat_get_opt_evd(ctx, a.connect_evd, &conn))
		a.status = KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_EVD_CONN);
	else if (!kdat_get_opt_evd(ctx, a.request_evd, &req))
		a.status = KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_EVD_REQUEST);
	else if (!kdat_get_opt_evd(ctx, a.recv_evd, &recv))
		a.status = KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_EVD_RECV);
	else
		a.status = kdat_ep_create_in(ia, conn, req, recv, &a.attr, NULL, NULL, &a.ep);
	kdat_put(recv);
	kdat_put(req);
	kdat_put(conn);
	kdat_put(ia);
	return KDAT_OUT(a, uarg);
}

/* Resolves a.ep into 'ep' (with a reference) or sets a.status and jumps. */
#define KDAT_GET_EP(ctx, a, ep)						\
	do {								\
		ep = kdat_get(ctx, (a).ep, KDAT_OBJ_EP);		\
		if (!ep)						\
			(a).status = KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_EP); \
	} while (0)

static long kdat_ioc_ep_free(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_ep *ep;

	KDAT_IN(kdat_ep_free, a, uarg);
	if (a.reserved)
		return -EINVAL;
	KDAT_GET_EP(ctx, a, ep);
	if (ep)
		a.status = kdat_ep_free(ep);
	kdat_put(ep);
	return KDAT_OUT(a, uarg);
}

static long kdat_ioc_ep_query(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_ep_info *info;
	struct kdat_ep *ep;
	long ret;

	KDAT_IN(kdat_ep_query, a, uarg);
	info = kzalloc(sizeof(*info), GFP_KERNEL);
	if (!info)
		return -ENOMEM;
	KDAT_GET_EP(ctx, a, ep);
	if (ep)
		a.status = kdat_ep_query(ep, info);
	memset((u8 *)&a + offsetof(struct kdat_ep_query, state), 0,
	       sizeof(a) - offsetof(struct kdat_ep_query, state));
	if (ep && !a.status) {
		a.state = info->state;
		a.attr = info->attr;
		kdat_addr_out(&a.local_addr, (struct sockaddr *)&info->local_addr);
		kdat_addr_out(&a.remote_addr, (struct sockaddr *)&info->remote_addr);
		/* under the lock: a racing modify or free may drop these EVDs */
		mutex_lock(&ctx->lock);
		if (!ep->obj.dead) {
			a.connect_evd = kdat_obj_handle(ep->connect_evd);
			a.request_evd = kdat_obj_handle(ep->request_evd);
			a.recv_evd = kdat_obj_handle(ep->recv_evd);
		}
		mutex_unlock(&ctx->lock);
		a.transitions = (u32)info->transitions;
	}
	kdat_put(ep);
	kfree(info);
	ret = KDAT_OUT(a, uarg);
	return ret;
}

static long kdat_ioc_ep_modify(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_ep *ep;

	KDAT_IN(kdat_ep_modify, a, uarg);
	if (kdat_nonzero(a.attr.reserved, sizeof(a.attr.reserved)))
		return -EINVAL;
	KDAT_GET_EP(ctx, a, ep);
	if (ep)
		a.status = kdat_ep_modify(ep, a.mask, &a.attr);
	kdat_put(ep);
	return KDAT_OUT(a, uarg);
}

static long kdat_ioc_ep_reset(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_ep *ep;

	KDAT_IN(kdat_ep_reset, a, uarg);
	if (a.reserved)
		return -EINVAL;
	KDAT_GET_EP(ctx, a, ep);
	if (ep)
		a.status = kdat_ep_reset(ep);
	kdat_put(ep);
	return KDAT_OUT(a, uarg);
}

static long kdat_ioc_ep_connect(struct kdat_ctx *ctx, void __user *uarg)
{
	struct sockaddr_storage remote;
	struct kdat_ep *ep;

	KDAT_IN(kdat_ep_connect, a, uarg);
	if (a.reserved)
		return -EINVAL;
	KDAT_GET_EP(ctx, a, ep);
	if (ep) {
		if (kdat_addr_in(&remote, &a.remote_addr))
			a.status = KDAT_ERR(KDAT_DAT_INVALID_ADDRESS, KDAT_DAT_NO_SUBTYPE);
		else
			a.status = kdat_ep_connect(ep, (struct sockaddr *)&remote, a.conn_qual,
						   a.timeout_us, a.private_data,
						   a.private_data_size, a.qos, a.flags);
	}
	kdat_put(ep);
	return KDAT_OUT(a, uarg);
}

static long kdat_ioc_ep_dup_connect(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_ep *ep, *dup = NULL;

	KDAT_IN(kdat_ep_dup_connect, a, uarg);
	if (a.reserved)
		return -EINVAL;
	KDAT_GET_EP(ctx, a, ep);
	if (ep) {
		dup = kdat_get(ctx, a.dup_ep, KDAT_OBJ_EP);
		a.status = dup ? kdat_ep_dup_connect(ep, dup, a.timeout_us, a.private_data,
						     a.private_data_size, a.qos) :
			   KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE2);
	}
	kdat_put(dup);
	kdat_put(ep);
	return KDAT_OUT(a, uarg);
}

static long kdat_ioc_ep_disconnect(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_ep *ep;

	KDAT_IN(kdat_ep_disconnect, a, uarg);
	KDAT_GET_EP(ctx, a, ep);
	if (ep)
		a.status = kdat_ep_disconnect(ep, a.flags);
	kdat_put(ep);
	return KDAT_OUT(a, uarg);
}

/* ---- service points and CRs -------------------------------------------------- */

static long kdat_ioc_psp_create(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_evd *evd = NULL;
	struct kdat_ia *ia;

	KDAT_IN(kdat_psp_create, a, uarg);
	ia = kdat_get(ctx, a.ia, KDAT_OBJ_IA);
	if (!ia)
		a.status = KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_IA);
	else if (!kdat_get_opt_evd(ctx, a.evd, &evd) || !evd)
		a.status = KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_EVD_CR);
	else
		a.status = kdat_sp_create_in(ia, a.conn_qual, evd, a.flags, NULL, NULL, &a.psp);
	kdat_put(evd);
	kdat_put(ia);
	return KDAT_OUT(a, uarg);
}

static struct kdat_sp *kdat_get_sp(struct kdat_ctx *ctx, u32 handle, bool rsp)
{
	struct kdat_sp *sp = kdat_get(ctx, handle, KDAT_OBJ_SP);

	if (sp && sp->is_rsp != rsp) {
		kdat_put(sp);
		return NULL;
	}
	return sp;
}

static long kdat_ioc_psp_free(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_sp *sp;

	KDAT_IN(kdat_psp_free, a, uarg);
	if (a.reserved)
		return -EINVAL;
	sp = kdat_get_sp(ctx, a.psp, false);
	a.status = sp ? kdat_sp_free(sp) : KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_PSP);
	kdat_put(sp);
	return KDAT_OUT(a, uarg);
}

static long kdat_ioc_psp_query(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_sp *sp;

	KDAT_IN(kdat_psp_query, a, uarg);
	a.ia = 0;
	a.conn_qual = 0;
	a.evd = 0;
	a.flags = 0;
	sp = kdat_get_sp(ctx, a.psp, false);
	if (!sp) {
		a.status = KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_PSP);
	} else {
		mutex_lock(&ctx->lock);
		if (sp->obj.dead) {
			a.status = KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_PSP);
		} else {
			a.status = KDAT_DAT_SUCCESS;
			a.ia = sp->ia->obj.handle;
			a.conn_qual = sp->conn_qual;
			a.evd = kdat_obj_handle(sp->evd);
			a.flags = sp->flags;
		}
		mutex_unlock(&ctx->lock);
	}
	kdat_put(sp);
	return KDAT_OUT(a, uarg);
}

static long kdat_ioc_rsp_create(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_evd *evd = NULL;
	struct kdat_ep *ep = NULL;
	struct kdat_ia *ia;

	KDAT_IN(kdat_rsp_create, a, uarg);
	ia = kdat_get(ctx, a.ia, KDAT_OBJ_IA);
	if (!ia) {
		a.status = KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_IA);
	} else {
		ep = kdat_get(ctx, a.ep, KDAT_OBJ_EP);
		if (!ep)
			a.status = KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_EP);
		else if (!kdat_get_opt_evd(ctx, a.evd, &evd) || !evd)
			a.status = KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_EVD_CR);
		else
			a.status = kdat_sp_create_in(ia, a.conn_qual, evd, KDAT_PSP_CONSUMER, ep,
						     NULL, &a.rsp);
	}
	kdat_put(evd);
	kdat_put(ep);
	kdat_put(ia);
	return KDAT_OUT(a, uarg);
}

static long kdat_ioc_rsp_free(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_sp *sp;

	KDAT_IN(kdat_rsp_free, a, uarg);
	if (a.reserved)
		return -EINVAL;
	sp = kdat_get_sp(ctx, a.rsp, true);
	a.status = sp ? kdat_sp_free(sp) : KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_RSP);
	kdat_put(sp);
	return KDAT_OUT(a, uarg);
}

static long kdat_ioc_cr_query(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_cr_info *info;
	struct kdat_cr *cr;
	long ret;

	KDAT_IN(kdat_cr_query, a, uarg);
	if (kdat_nonzero(a.reserved, sizeof(a.reserved)))
		return -EINVAL;
	info = kzalloc(sizeof(*info), GFP_KERNEL);
	if (!info)
		return -ENOMEM;
	cr = kdat_get(ctx, a.cr, KDAT_OBJ_CR);
	a.status = cr ? kdat_cr_query(cr, info) : KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_CR);
	memset((u8 *)&a + offsetof(struct kdat_cr_query, sp), 0,
	       sizeof(a) - offsetof(struct kdat_cr_query, sp));
	if (!a.status) {
		/* info's SP and EP are only safe to read while the CR lives */
		mutex_lock(&ctx->lock);
		if (!cr->obj.dead) {
			a.sp = kdat_obj_handle(cr->sp);
			a.ep = kdat_obj_handle(cr->ep);
		}
		mutex_unlock(&ctx->lock);
		a.remote_rdma_read_in = info->remote_rdma_read_in;
		a.remote_rdma_read_out = info->remote_rdma_read_out;
		a.private_data_size = info->private_data_size;
		memcpy(a.private_data, info->private_data, info->private_data_size);
		kdat_addr_out(&a.remote_addr, (struct sockaddr *)&info->remote_addr);
		kdat_addr_out(&a.local_addr, (struct sockaddr *)&info->local_addr);
		a.remote_retry_count = info->remote_retry_count;
		a.remote_rnr_retry_count = info->remote_rnr_retry_count;
		a.remote_flow_control = info->remote_flow_control;
	}
	kdat_put(cr);
	kfree(info);
	ret = KDAT_OUT(a, uarg);
	return ret;
}

static long kdat_ioc_cr_accept(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_ep *ep = NULL;
	struct kdat_cr *cr;

	KDAT_IN(kdat_cr_accept, a, uarg);
	if (a.reserved)
		return -EINVAL;
	cr = kdat_get(ctx, a.cr, KDAT_OBJ_CR);
	if (cr && a.ep)
		ep = kdat_get(ctx, a.ep, KDAT_OBJ_EP);
	if (!cr)
		a.status = KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_CR);
	else if (a.ep && !ep)
		a.status = KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_EP);
	else
		a.status = kdat_cr_accept(cr, ep, a.private_data, a.private_data_size);
	kdat_put(ep);
	kdat_put(cr);
	return KDAT_OUT(a, uarg);
}

static long kdat_ioc_cr_reject(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_cr *cr;

	KDAT_IN(kdat_cr_reject, a, uarg);
	cr = kdat_get(ctx, a.cr, KDAT_OBJ_CR);
	a.status = cr ? kdat_cr_reject(cr, a.private_data, a.private_data_size) :
		   KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_CR);
	kdat_put(cr);
	return KDAT_OUT(a, uarg);
}

/* ---- event rings ------------------------------------------------------------ */

static long kdat_ioc_evd_ring(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_evd *evd;
	struct file *file = NULL;
	int fd = -1;
	long ret;

	KDAT_IN(kdat_evd_ring, a, uarg);
	evd = kdat_get(ctx, a.evd, KDAT_OBJ_EVD);
	if (!evd) {
		a.status = KDAT_BAD_HANDLE(KDAT_DAT_NO_SUBTYPE);
		return KDAT_OUT(a, uarg);
	}
	fd = get_unused_fd_flags(O_CLOEXEC);
	if (fd < 0) {
		a.status = KDAT_ERR(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_NO_SUBTYPE);
		goto out;
	}
	file = kdat_ring_attach(evd, a.evd, &a.entries, &a.map_size);
	if (IS_ERR(file)) {
		a.status = PTR_ERR(file) == -EBUSY ?
			KDAT_ERR(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE) :
			KDAT_ERR(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
		put_unused_fd(fd);
		file = NULL;
		goto out;
	}
	kdat_rec_sync_unlocked(&evd->obj);
	a.fd = fd;
out:
	kdat_put(evd);
	ret = KDAT_OUT(a, uarg);
	if (file) {
		if (ret) {
			/* the EVD keeps its ring; the fd never existed */
			put_unused_fd(fd);
			fput(file);
		} else {
			fd_install(fd, file);
		}
	}
	return ret;
}

static long kdat_ioc_evd_ring_wait(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_evd *evd;

	KDAT_IN(kdat_evd_ring_wait, a, uarg);
	evd = kdat_get(ctx, a.evd, KDAT_OBJ_EVD);
	if (!evd)
		a.status = KDAT_BAD_HANDLE(KDAT_DAT_NO_SUBTYPE);
	else if (!READ_ONCE(evd->ring))
		a.status = KDAT_ERR(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE);
	else
		a.status = kdat_evd_ring_wait(evd, a.timeout_us, a.threshold, NULL, NULL,
					      &a.available);
	kdat_put(evd);
	return KDAT_OUT(a, uarg);
}

/* ---- userspace QPs (kdat_uqp.c) ----------------------------------------------- */

static long kdat_ioc_uqp_create(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_evd *conn = NULL;
	struct kdat_ia *ia;

	KDAT_IN(kdat_uqp_create, a, uarg);
	if (kdat_nonzero(a.attr.reserved, sizeof(a.attr.reserved)))
		return -EINVAL;
	ia = kdat_get(ctx, a.ia, KDAT_OBJ_IA);
	if (!ia)
		a.status = KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_IA);
	else if (!a.connect_evd || !kdat_get_opt_evd(ctx, a.connect_evd, &conn))
		a.status = KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_EVD_CONN);
	else
		a.status = kdat_uqp_create(ia, conn, &a.attr, a.qp_num, &a.ep);
	kdat_put(conn);
	kdat_put(ia);
	if (a.status)
		a.ep = 0;
	return KDAT_OUT(a, uarg);
}

static long kdat_ioc_uqp_attr(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_cr *cr = NULL;
	struct kdat_ep *ep;

	KDAT_IN(kdat_uqp_attr, a, uarg);
	if (kdat_nonzero(a.reserved, sizeof(a.reserved)))
		return -EINVAL;
	/* everything after the inputs is output */
	memset((u8 *)&a + offsetof(struct kdat_uqp_attr, attr_mask), 0,
	       sizeof(a) - offsetof(struct kdat_uqp_attr, attr_mask));
	KDAT_GET_EP(ctx, a, ep);
	if (ep && a.cr) {
		cr = kdat_get(ctx, a.cr, KDAT_OBJ_CR);
		if (!cr)
			a.status = KDAT_BAD_HANDLE(KDAT_DAT_INVALID_HANDLE_CR);
	}
	if (ep && (cr || !a.cr))
		a.status = kdat_uqp_attr(ep, cr, a.qp_state, &a);
	kdat_put(cr);
	kdat_put(ep);
	return KDAT_OUT(a, uarg);
}

static long kdat_ioc_uqp_establish(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_ep *ep;

	KDAT_IN(kdat_uqp_establish, a, uarg);
	KDAT_GET_EP(ctx, a, ep);
	if (ep)
		a.status = kdat_uqp_establish(ep, a.flags);
	kdat_put(ep);
	return KDAT_OUT(a, uarg);
}

/* ---- shared tables: the list, and attaching a view ----------------------------- */

static long kdat_ioc_table_list(void __user *uarg)
{
	KDAT_IN(kdat_table_list, a, uarg);
	if (a.capacity > KDAT_TABLE_MAX_SLOTS)
		a.status = KDAT_ERR(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG3);
	else
		a.status = kdat_table_list(u64_to_user_ptr(a.tables), a.capacity, &a.count);
	return KDAT_OUT(a, uarg);
}

static long kdat_ioc_table_attach(struct kdat_ctx *ctx, void __user *uarg)
{
	struct kdat_table *t = NULL, *old;

	KDAT_IN(kdat_table_attach, a, uarg);
	a.status = kdat_table_find(a.id, &t);
	if (!a.status) {
		mutex_lock(&ctx->lock);
		old = ctx->view;
		ctx->view = t;
		mutex_unlock(&ctx->lock);
		kdat_table_put(old);	/* existing mappings keep their own reference */
	}
	return KDAT_OUT(a, uarg);
}

long kdat_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct kdat_ctx *ctx = file->private_data;
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case KDAT_IOC_VERSION:		return kdat_ioc_version(uarg);
	case KDAT_IOC_IA_OPEN:		return kdat_ioc_ia_open(ctx, uarg);
	case KDAT_IOC_IA_CLOSE:		return kdat_ioc_ia_close(ctx, uarg);
	case KDAT_IOC_IA_QUERY:		return kdat_ioc_ia_query(ctx, uarg);
	case KDAT_IOC_EVD_CREATE:	return kdat_ioc_evd_create(ctx, uarg);
	case KDAT_IOC_EVD_FREE:		return kdat_ioc_evd_free(ctx, uarg);
	case KDAT_IOC_EVD_WAIT:		return kdat_ioc_evd_wait(ctx, uarg);
	case KDAT_IOC_EVD_DEQUEUE:	return kdat_ioc_evd_dequeue(ctx, uarg);
	case KDAT_IOC_EP_CREATE:	return kdat_ioc_ep_create(ctx, uarg);
	case KDAT_IOC_EP_FREE:		return kdat_ioc_ep_free(ctx, uarg);
	case KDAT_IOC_EP_QUERY:		return kdat_ioc_ep_query(ctx, uarg);
	case KDAT_IOC_EP_MODIFY:	return kdat_ioc_ep_modify(ctx, uarg);
	case KDAT_IOC_EP_RESET:		return kdat_ioc_ep_reset(ctx, uarg);
	case KDAT_IOC_EP_CONNECT:	return kdat_ioc_ep_connect(ctx, uarg);
	case KDAT_IOC_EP_DUP_CONNECT:	return kdat_ioc_ep_dup_connect(ctx, uarg);
	case KDAT_IOC_EP_DISCONNECT:	return kdat_ioc_ep_disconnect(ctx, uarg);
	case KDAT_IOC_PSP_CREATE:	return kdat_ioc_psp_create(ctx, uarg);
	case KDAT_IOC_PSP_FREE:		return kdat_ioc_psp_free(ctx, uarg);
	case KDAT_IOC_PSP_QUERY:	return kdat_ioc_psp_query(ctx, uarg);
	case KDAT_IOC_RSP_CREATE:	return kdat_ioc_rsp_create(ctx, uarg);
	case KDAT_IOC_RSP_FREE:		return kdat_ioc_rsp_free(ctx, uarg);
	case KDAT_IOC_CR_QUERY:		return kdat_ioc_cr_query(ctx, uarg);
	case KDAT_IOC_CR_ACCEPT:	return kdat_ioc_cr_accept(ctx, uarg);
	case KDAT_IOC_CR_REJECT:	return kdat_ioc_cr_reject(ctx, uarg);
	case KDAT_IOC_EVD_RING:		return kdat_ioc_evd_ring(ctx, uarg);
	case KDAT_IOC_EVD_RING_WAIT:	return kdat_ioc_evd_ring_wait(ctx, uarg);
	case KDAT_IOC_TABLE_LIST:	return kdat_ioc_table_list(uarg);
	case KDAT_IOC_TABLE_ATTACH:	return kdat_ioc_table_attach(ctx, uarg);
	case KDAT_IOC_UQP_CREATE:	return kdat_ioc_uqp_create(ctx, uarg);
	case KDAT_IOC_UQP_ATTR:		return kdat_ioc_uqp_attr(ctx, uarg);
	case KDAT_IOC_UQP_ESTABLISH:	return kdat_ioc_uqp_establish(ctx, uarg);
	default:			return -ENOTTY;
	}
}
