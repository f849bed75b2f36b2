// SPDX-License-Identifier: GPL-2.0
/*
 * Block I/O for kernel consumers (include/kdat/kdat.h, "Block I/O"):
 * scatterlists mapped per request, fast registration per request, and
 * completions as the consumer's callbacks.
 *
 * Nothing here takes a mutex or allocates on the post path: a post checks
 * the EP's state with the table (as the DAT posts do, kdat_dto.c), builds its
 * SGEs on the stack and posts through kdat_qp.c's gate.  Completions come
 * through a trampoline that reports each send's end to the EP
 * (kdat_ep_send_done: the graceful disconnect's sends in flight).
 */
#include <linux/dma-mapping.h>
#include <linux/slab.h>
#include "kdat_conn.h"

/* The SGEs one post may have: rxe's max_send_sge, and room on the stack. */
#define KDAT_SGL_MAX_SGES	32

struct kdat_mr {
	struct kdat_ia *ia;
	struct list_head ia_node;	/* ia->mrs, under ctx->lock */
	struct ib_mr *mr;
	u32 max_pages;
	/*
	 * The registration is posted unsignaled, but a failed or flushed one
	 * still completes (as in nvme-rdma): it needs a cqe.  Its error shows
	 * on the request posted after it, which fails the same way.
	 */
	struct ib_cqe reg_cqe;
};

static void kdat_mr_reg_done(struct ib_cq *cq, struct ib_wc *wc)
{
	if (wc->status != IB_WC_WR_FLUSH_ERR)
		pr_warn_ratelimited("kdat: a fast registration failed: %s (vendor error 0x%x)\n",
				    ib_wc_status_msg(wc->status), wc->vendor_err);
}

kdat_ret_t kdat_sgl_map(struct kdat_ia *ia, struct kdat_sgl *sgl, struct scatterlist *sg,
			u32 nents, enum dma_data_direction dir)
{
	struct scatterlist *s;
	u32 i;

	if (!sgl || !sg || !nents || !valid_dma_direction(dir))
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	if (READ_ONCE(ia->removed))
		return kdat_err(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE);
	sgl->sg = sg;
	sgl->nents = nents;
	sgl->dir = dir;
	sgl->length = 0;
	for_each_sg(sg, s, nents, i)
		sgl->length += s->length;
	sgl->dma_nents = ib_dma_map_sg(ia->ibdev, sg, nents, dir);
	if (sgl->dma_nents <= 0) {
		sgl->dma_nents = 0;
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY_REGION);
	}
	return KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(kdat_sgl_map);

void kdat_sgl_unmap(struct kdat_ia *ia, struct kdat_sgl *sgl)
{
	/* a removed device took its mappings with it (kdat_ia_device_removed) */
	if (sgl->dma_nents && !READ_ONCE(ia->removed))
		ib_dma_unmap_sg(ia->ibdev, sgl->sg, sgl->nents, sgl->dir);
	sgl->dma_nents = 0;
}
EXPORT_SYMBOL_GPL(kdat_sgl_unmap);

void kdat_sgl_sync_for_cpu(struct kdat_ia *ia, struct kdat_sgl *sgl)
{
	/* a software device (rxe, siw) maps by virtual address: nothing to sync */
	if (!READ_ONCE(ia->removed) && !ib_uses_virt_dma(ia->ibdev))
		dma_sync_sg_for_cpu(ia->ibdev->dma_device, sgl->sg, sgl->nents, sgl->dir);
}
EXPORT_SYMBOL_GPL(kdat_sgl_sync_for_cpu);

void kdat_sgl_sync_for_device(struct kdat_ia *ia, struct kdat_sgl *sgl)
{
	if (!READ_ONCE(ia->removed) && !ib_uses_virt_dma(ia->ibdev))
		dma_sync_sg_for_device(ia->ibdev->dma_device, sgl->sg, sgl->nents, sgl->dir);
}
EXPORT_SYMBOL_GPL(kdat_sgl_sync_for_device);

/* A part of a post completed; the post's last part tells the consumer, once. */
static void kdat_cqe_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct kdat_cqe *cqe = container_of(wc->wr_cqe, struct kdat_cqe, ib);
	struct kdat_ep *ep = kdat_wc_ep(wc);
	struct kdat_completion c = {};
	bool recv = cqe->recv;
	u32 status;

	if (recv && unlikely(READ_ONCE(ep->first_send_hold)))
		kdat_ep_first_recv(ep);
	if (wc->status != IB_WC_SUCCESS)
		cmpxchg(&cqe->wc_status, IB_WC_SUCCESS, wc->status);
	/* fully ordered: the other parts' wc_status is seen below */
	if (!atomic_dec_and_test(&cqe->parts))
		return;
	status = READ_ONCE(cqe->wc_status);
	c.dto_status = kdat_dto_status(status);
	c.byte_len = recv ? wc->byte_len : cqe->length;
	if (recv && status == IB_WC_SUCCESS && (wc->wc_flags & IB_WC_WITH_INVALIDATE))
		c.invalidated_rkey = wc->ex.invalidate_rkey;
	/* done() may reuse the cqe at once: read nothing from it after */
	cqe->done(cqe, &c);
	if (!recv)
		kdat_ep_send_done(ep);
}

/* Readies cqe for a post of `parts` work requests, each completing on it. */
static void kdat_cqe_arm(struct kdat_cqe *cqe, bool recv, u32 length, u32 parts)
{
	cqe->ib.done = kdat_cqe_done;
	cqe->recv = recv;
	cqe->length = length;
	cqe->wc_status = IB_WC_SUCCESS;
	atomic_set(&cqe->parts, parts);
}

/* Up to max SGEs of sgl's DMA segments from *pos on; advances *pos past them; returns the bytes. */
static u32 kdat_sgl_sges(struct kdat_ep *ep, const struct kdat_sgl *sgl, struct scatterlist **pos,
			 int *left, struct ib_sge *sge, u32 max, int *n)
{
	u32 bytes = 0;

	for (*n = 0; *left > 0 && (u32)*n < max; (*n)++, (*left)--, *pos = sg_next(*pos)) {
		sge[*n].addr = sg_dma_address(*pos);
		sge[*n].length = sg_dma_len(*pos);
		sge[*n].lkey = ep->ia->local_dma_lkey;
		bytes += sg_dma_len(*pos);
	}
	return bytes;
}

static kdat_ret_t kdat_sgl_refused(struct kdat_ep *ep)
{
	return kdat_err(KDAT_DAT_INVALID_STATE, kdat_ep_invalid_state_subtype(READ_ONCE(ep->state)));
}

static const enum ib_wr_opcode kdat_sgl_opcode[] = {
	[KDAT_SGL_SEND] = IB_WR_SEND,
	[KDAT_SGL_SEND_INV] = IB_WR_SEND_WITH_INV,
	[KDAT_SGL_RDMA_WRITE] = IB_WR_RDMA_WRITE,
	[KDAT_SGL_RDMA_READ] = IB_WR_RDMA_READ,
};

/*
 * Some parts of a post went out, the rest did not: the posted ones may still
 * move the consumer's pages, so the post stands and done() reports it failed
 * once they completed -- unless they all completed already, then nothing
 * moves the pages any more and the post fails here, without a done().
 */
static kdat_ret_t kdat_sgl_post_cut(struct kdat_ep *ep, struct kdat_cqe *cqe, u32 unposted,
				    int err)
{
	cmpxchg(&cqe->wc_status, IB_WC_SUCCESS,
		err == -ESHUTDOWN ? IB_WC_WR_FLUSH_ERR : IB_WC_LOC_QP_OP_ERR);
	if (!atomic_sub_and_test(unposted, &cqe->parts))
		return KDAT_DAT_SUCCESS;
	kdat_ep_send_done(ep);
	return kdat_post_failed(ep, err);
}

kdat_ret_t kdat_ep_post_sgl(struct kdat_ep *ep, enum kdat_sgl_op op, struct kdat_sgl *sgl,
			    struct kdat_cqe *cqe, u64 remote_addr, u32 rkey)
{
	struct ib_sge sge[KDAT_SGL_MAX_SGES];
	struct ib_rdma_wr rdma = {};
	struct ib_send_wr *wr = &rdma.wr;
	u32 max = min_t(u32, ep->attr.max_request_iov, KDAT_SGL_MAX_SGES), parts = 1, i;
	bool rdma_op = op == KDAT_SGL_RDMA_WRITE || op == KDAT_SGL_RDMA_READ;
	struct scatterlist *pos = sgl ? sgl->sg : NULL;
	int left = sgl ? sgl->dma_nents : 0, err = 0;

	if (!cqe || !cqe->done || op > KDAT_SGL_RDMA_READ)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	if (!kdat_ep_may_post(ep, KDAT_EP_STIM_POST_SEND) || !ep->wrs)
		return kdat_sgl_refused(ep);
	if (op == KDAT_SGL_RDMA_READ) {
		max = min_t(u32, max, ep->ia->ibdev->attrs.max_sge_rd);
		if (!READ_ONCE(ep->ord))
			return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG1);
	}
	if (rdma_op && !sgl)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG3);
	if (sgl && (left <= 0 || !max || (!rdma_op && left > max)))
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG3);
	if (rdma_op)
		parts = DIV_ROUND_UP(left, max);
	kdat_cqe_arm(cqe, false, sgl ? sgl->length : 0, parts);
	wr->wr_cqe = &cqe->ib;
	wr->sg_list = sge;
	wr->send_flags = IB_SEND_SIGNALED;
	wr->opcode = kdat_sgl_opcode[op];
	if (op == KDAT_SGL_SEND_INV)
		wr->ex.invalidate_rkey = rkey;
	rdma.rkey = rkey;
	rdma.remote_addr = remote_addr;
	WRITE_ONCE(ep->ever_posted, true);
	atomic_inc(&ep->sends_in_flight);
	for (i = 0; i < parts; i++) {
		int n;
		u32 bytes = kdat_sgl_sges(ep, sgl, &pos, &left, sge, max, &n);

		wr->num_sge = n;
		err = kdat_qp_post_send(ep, wr);
		if (err)
			break;
		rdma.remote_addr += bytes;
	}
	if (!err)
		return KDAT_DAT_SUCCESS;
	if (i)
		return kdat_sgl_post_cut(ep, cqe, parts - i, err);
	atomic_dec(&ep->sends_in_flight);
	return kdat_post_failed(ep, err);
}
EXPORT_SYMBOL_GPL(kdat_ep_post_sgl);

kdat_ret_t kdat_ep_post_recv_sgl(struct kdat_ep *ep, struct kdat_sgl *sgl, struct kdat_cqe *cqe)
{
	struct ib_sge sge[KDAT_SGL_MAX_SGES];
	struct ib_recv_wr wr = {};
	struct scatterlist *pos = sgl ? sgl->sg : NULL;
	int left = sgl ? sgl->dma_nents : 0, n;
	u32 max;

	if (!cqe || !cqe->done)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	if (!kdat_ep_may_post(ep, KDAT_EP_STIM_POST_RECV) || !ep->wrs)
		return kdat_sgl_refused(ep);
	max = min_t(u32, ep->attr.max_recv_iov, KDAT_SGL_MAX_SGES);
	if (sgl && (left <= 0 || left > max))
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG3);
	kdat_sgl_sges(ep, sgl, &pos, &left, sge, max, &n);
	kdat_cqe_arm(cqe, true, sgl ? sgl->length : 0, 1);
	wr.wr_cqe = &cqe->ib;
	wr.sg_list = sge;
	wr.num_sge = n;
	WRITE_ONCE(ep->ever_posted, true);
	n = kdat_qp_post_recv(ep, &wr);
	return n ? kdat_post_failed(ep, n) : KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(kdat_ep_post_recv_sgl);

kdat_ret_t kdat_mr_alloc(struct kdat_ia *ia, u32 max_pages, struct kdat_mr **out)
{
	struct kdat_ctx *ctx = ia->obj.ctx;
	struct kdat_mr *mr;
	kdat_ret_t ret = KDAT_DAT_SUCCESS;

	if (!max_pages || max_pages > ia->ibdev->attrs.max_fast_reg_page_list_len)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
	mutex_lock(&ctx->lock);
	if (ia->obj.dead || ia->removed) {
		ret = kdat_err(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE);
		goto out;
	}
	mr->mr = ib_alloc_mr(ia->pd, IB_MR_TYPE_MEM_REG, max_pages);
	if (IS_ERR(mr->mr)) {
		ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY_REGION);
		goto out;
	}
	mr->ia = ia;
	mr->max_pages = max_pages;
	mr->reg_cqe.done = kdat_mr_reg_done;
	list_add_tail(&mr->ia_node, &ia->mrs);
	*out = mr;
out:
	mutex_unlock(&ctx->lock);
	if (ret)
		kfree(mr);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_mr_alloc);

static void kdat_mr_release(struct kdat_mr *mr)
{
	list_del(&mr->ia_node);
	if (mr->mr)
		ib_dereg_mr(mr->mr);
	kfree(mr);
}

void kdat_mr_free(struct kdat_mr *mr)
{
	struct kdat_ctx *ctx = mr->ia->obj.ctx;

	mutex_lock(&ctx->lock);
	kdat_mr_release(mr);
	mutex_unlock(&ctx->lock);
}
EXPORT_SYMBOL_GPL(kdat_mr_free);

/*
 * Device removal: the MRs' registrations go now; the MRs stay on the IA's list
 * for their consumer's kdat_mr_free() or kdat_ia_close().
 */
void kdat_ia_release_mrs(struct kdat_ia *ia)
{
	struct kdat_mr *mr;

	lockdep_assert_held(&ia->obj.ctx->lock);
	list_for_each_entry(mr, &ia->mrs, ia_node) {
		if (mr->mr)
			ib_dereg_mr(mr->mr);
		mr->mr = NULL;
	}
}

/* IA teardown: the MRs a kernel consumer did not free.  ctx->lock held. */
void kdat_ia_free_mrs(struct kdat_ia *ia)
{
	lockdep_assert_held(&ia->obj.ctx->lock);
	while (!list_empty(&ia->mrs))
		kdat_mr_release(list_first_entry(&ia->mrs, struct kdat_mr, ia_node));
}

kdat_ret_t kdat_ep_post_reg_mr(struct kdat_ep *ep, struct kdat_mr *mr, struct kdat_sgl *sgl,
			       u32 access, u32 *rkey, u64 *addr)
{
	struct ib_reg_wr reg = {};
	int n;

	if (!mr || !sgl || sgl->dma_nents <= 0 || mr->ia != ep->ia ||
	    access & ~(KDAT_RMR_REMOTE_READ | KDAT_RMR_REMOTE_WRITE))
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	/* an MR whose device went away has no registration left (kdat_ia_release_mrs) */
	if (!kdat_ep_may_post(ep, KDAT_EP_STIM_POST_SEND) || !ep->wrs || !mr->mr)
		return kdat_sgl_refused(ep);
	n = ib_map_mr_sg(mr->mr, sgl->sg, sgl->dma_nents, NULL, PAGE_SIZE);
	if (n != sgl->dma_nents)	/* more pages than max_pages, or a gap inside a page */
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG3);
	/* a new key per registration: the peer's old one stops working */
	ib_update_fast_reg_key(mr->mr, ib_inc_rkey(mr->mr->rkey));
	reg.wr.opcode = IB_WR_REG_MR;
	reg.wr.wr_cqe = &mr->reg_cqe;	/* unsignaled: completes only if it fails */
	reg.mr = mr->mr;
	reg.key = mr->mr->rkey;
	reg.access = IB_ACCESS_LOCAL_WRITE |
		     (access & KDAT_RMR_REMOTE_READ ? IB_ACCESS_REMOTE_READ : 0) |
		     (access & KDAT_RMR_REMOTE_WRITE ? IB_ACCESS_REMOTE_WRITE : 0);
	WRITE_ONCE(ep->ever_posted, true);
	n = kdat_qp_post_send(ep, &reg.wr);
	if (n)
		return kdat_post_failed(ep, n);
	*rkey = mr->mr->rkey;
	*addr = mr->mr->iova;
	return KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(kdat_ep_post_reg_mr);

kdat_ret_t kdat_ep_post_local_inv(struct kdat_ep *ep, struct kdat_mr *mr, struct kdat_cqe *cqe)
{
	struct ib_send_wr wr = {};
	int n;

	if (!mr || mr->ia != ep->ia || !cqe || !cqe->done)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	if (!kdat_ep_may_post(ep, KDAT_EP_STIM_POST_SEND) || !ep->wrs || !mr->mr)
		return kdat_sgl_refused(ep);
	kdat_cqe_arm(cqe, false, 0, 1);
	wr.opcode = IB_WR_LOCAL_INV;
	wr.ex.invalidate_rkey = mr->mr->rkey;
	wr.wr_cqe = &cqe->ib;
	wr.send_flags = IB_SEND_SIGNALED;
	WRITE_ONCE(ep->ever_posted, true);
	atomic_inc(&ep->sends_in_flight);
	n = kdat_qp_post_send(ep, &wr);
	if (n) {
		atomic_dec(&ep->sends_in_flight);
		return kdat_post_failed(ep, n);
	}
	return KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(kdat_ep_post_local_inv);
