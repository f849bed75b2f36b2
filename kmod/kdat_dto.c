// SPDX-License-Identifier: GPL-2.0
/*
 * Data transfer for kernel EPs: LMRs (DMA-mapped kernel buffers), RMRs
 * (fast-registration MRs bound through an EP), send/receive/RDMA posts and
 * their completions as DAT events.  Posts go through the EP's queues
 * (kdat_qp.c, below); a send's completion is reported to the EP with
 * kdat_ep_send_done(), its one call up.
 *
 * The completion path runs on the CQ's workqueue and takes no kdat lock but
 * the EP's wr_lock and the EVD's lock, so the connection code may drain the
 * QP (ib_drain_qp) while holding ep->lock: that is how every completion is
 * queued before the DISCONNECTED event.
 */
#include <linux/dma-mapping.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include "kdat_conn.h"

/* ---- completions ------------------------------------------------------------------ */

u32 kdat_dto_status(enum ib_wc_status status)
{
	switch (status) {
	case IB_WC_SUCCESS: return KDAT_DAT_DTO_SUCCESS;
	case IB_WC_WR_FLUSH_ERR: return KDAT_DAT_DTO_ERR_FLUSHED;
	case IB_WC_LOC_LEN_ERR: return KDAT_DAT_DTO_ERR_LOCAL_LENGTH;
	case IB_WC_LOC_QP_OP_ERR: return KDAT_DAT_DTO_ERR_LOCAL_EP;
	case IB_WC_LOC_PROT_ERR: return KDAT_DAT_DTO_ERR_LOCAL_PROTECTION;
	case IB_WC_BAD_RESP_ERR: return KDAT_DAT_DTO_ERR_BAD_RESPONSE;
	case IB_WC_REM_ACCESS_ERR: return KDAT_DAT_DTO_ERR_REMOTE_ACCESS;
	case IB_WC_REM_INV_REQ_ERR:
	case IB_WC_REM_OP_ERR: return KDAT_DAT_DTO_ERR_REMOTE_RESPONDER;
	case IB_WC_RNR_RETRY_EXC_ERR: return KDAT_DAT_DTO_ERR_RECEIVER_NOT_READY;
	case IB_WC_MW_BIND_ERR: return KDAT_DAT_RMR_OPERATION_FAILED;
	default: return KDAT_DAT_DTO_ERR_TRANSPORT;
	}
}

static void kdat_wr_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct kdat_wr *wr = container_of(wc->wr_cqe, struct kdat_wr, cqe);
	struct kdat_ep *ep = kdat_wc_ep(wc);
	bool recv = wr->kind == KDAT_WR_RECV;
	struct kdat_event_info info = {
		.number = wr->kind == KDAT_WR_BIND ? KDAT_DAT_RMR_BIND_COMPLETION_EVENT :
			  KDAT_DAT_DTO_COMPLETION_EVENT,
		.ep = ep,
		.cookie = wr->cookie,
		.dto_status = kdat_dto_status(wc->status),
		.transfered_length = recv ? wc->byte_len : wr->length,
	};

	if (recv && unlikely(READ_ONCE(ep->first_send_hold)))
		kdat_ep_first_recv(ep);
	if (wr->kind == KDAT_WR_BIND && wr->rmr)
		wr->rmr->bound = wc->status == IB_WC_SUCCESS;
	kdat_evd_post(recv ? READ_ONCE(ep->recv_evd) : READ_ONCE(ep->request_evd), &info);
	kdat_wr_put(ep, wr, recv);
	if (!recv)
		kdat_ep_send_done(ep);
}

static kdat_ret_t kdat_build_sges(struct kdat_ep *ep, const struct kdat_iov *iov, u32 n,
				  struct ib_sge *sge, u32 *total)
{
	u32 i;

	if (n > KDAT_MAX_IOV || (n && !iov))
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	*total = 0;
	for (i = 0; i < n; i++) {
		const struct kdat_iov *v = &iov[i];

		if (!v->lmr || v->lmr->ia != ep->ia || v->offset > v->lmr->length ||
		    v->length > v->lmr->length - v->offset)
			return kdat_err(KDAT_DAT_PROTECTION_VIOLATION, KDAT_DAT_NO_SUBTYPE);
		sge[i].addr = v->lmr->dma + v->offset;
		sge[i].length = v->length;
		sge[i].lkey = ep->ia->local_dma_lkey;
		*total += v->length;
	}
	return KDAT_DAT_SUCCESS;
}

kdat_ret_t kdat_ep_post_recv(struct kdat_ep *ep, const struct kdat_iov *iov, u32 n_iov,
			     u64 cookie)
{
	struct ib_sge sge[KDAT_MAX_IOV];
	struct ib_recv_wr wr = {};
	struct kdat_wr *ctx;
	kdat_ret_t ret;
	u32 total;
	int err;

	if (!kdat_ep_may_post(ep, KDAT_EP_STIM_POST_RECV))
		return kdat_err(KDAT_DAT_INVALID_STATE,
				kdat_ep_invalid_state_subtype(READ_ONCE(ep->state)));
	ret = kdat_build_sges(ep, iov, n_iov, sge, &total);
	if (ret)
		return ret;
	ctx = kdat_wr_get(ep, true);
	if (!ctx)
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_TEP);
	WRITE_ONCE(ep->ever_posted, true);
	ctx->cookie = cookie;
	ctx->length = total;
	ctx->kind = KDAT_WR_RECV;
	ctx->cqe.done = kdat_wr_done;
	wr.wr_cqe = &ctx->cqe;
	wr.sg_list = sge;
	wr.num_sge = n_iov;
	err = kdat_qp_post_recv(ep, &wr);
	if (err) {
		kdat_wr_put(ep, ctx, true);
		return kdat_post_failed(ep, err);
	}
	return KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(kdat_ep_post_recv);

static kdat_ret_t kdat_post_send_wr(struct kdat_ep *ep, struct ib_send_wr *wr,
				    struct kdat_wr *ctx)
{
	int err;

	WRITE_ONCE(ep->ever_posted, true);
	atomic_inc(&ep->sends_in_flight);
	err = kdat_qp_post_send(ep, wr);
	if (err) {
		atomic_dec(&ep->sends_in_flight);
		kdat_wr_put(ep, ctx, false);
		return kdat_post_failed(ep, err);
	}
	return KDAT_DAT_SUCCESS;
}

static kdat_ret_t kdat_ep_post(struct kdat_ep *ep, const struct kdat_iov *iov, u32 n_iov,
			       u64 cookie, u8 kind, u64 raddr, u32 rkey)
{
	struct ib_sge sge[KDAT_MAX_IOV];
	struct ib_rdma_wr rdma = {};
	struct ib_send_wr *wr = &rdma.wr;
	struct kdat_wr *ctx;
	kdat_ret_t ret;
	u32 total;

	if (!kdat_ep_may_post(ep, KDAT_EP_STIM_POST_SEND))
		return kdat_err(KDAT_DAT_INVALID_STATE,
				kdat_ep_invalid_state_subtype(READ_ONCE(ep->state)));
	ret = kdat_build_sges(ep, iov, n_iov, sge, &total);
	if (ret)
		return ret;
	ctx = kdat_wr_get(ep, false);
	if (!ctx)
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_TEP);
	ctx->cookie = cookie;
	ctx->length = total;
	ctx->kind = kind;
	ctx->rmr = NULL;
	ctx->cqe.done = kdat_wr_done;
	wr->wr_cqe = &ctx->cqe;
	wr->sg_list = sge;
	wr->num_sge = n_iov;
	wr->send_flags = IB_SEND_SIGNALED;
	switch (kind) {
	case KDAT_WR_SEND:
		wr->opcode = IB_WR_SEND;
		break;
	case KDAT_WR_RDMA_WRITE:
		wr->opcode = IB_WR_RDMA_WRITE;
		break;
	default:
		wr->opcode = IB_WR_RDMA_READ;
		break;
	}
	rdma.remote_addr = raddr;
	rdma.rkey = rkey;
	return kdat_post_send_wr(ep, wr, ctx);
}

kdat_ret_t kdat_ep_post_send(struct kdat_ep *ep, const struct kdat_iov *iov, u32 n_iov,
			     u64 cookie)
{
	return kdat_ep_post(ep, iov, n_iov, cookie, KDAT_WR_SEND, 0, 0);
}
EXPORT_SYMBOL_GPL(kdat_ep_post_send);

kdat_ret_t kdat_ep_post_rdma_write(struct kdat_ep *ep, const struct kdat_iov *iov,
				   u32 n_iov, u64 cookie, u64 target, u32 rmr_context)
{
	return kdat_ep_post(ep, iov, n_iov, cookie, KDAT_WR_RDMA_WRITE, target, rmr_context);
}
EXPORT_SYMBOL_GPL(kdat_ep_post_rdma_write);

kdat_ret_t kdat_ep_post_rdma_read(struct kdat_ep *ep, const struct kdat_iov *iov,
				  u32 n_iov, u64 cookie, u64 target, u32 rmr_context)
{
	if (n_iov > 1 && n_iov > ep->ia->ibdev->attrs.max_sge_rd)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG3);
	/* ORD 0 (negotiated or asked for): the QP could never issue it */
	if (!READ_ONCE(ep->ord))
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG1);
	return kdat_ep_post(ep, iov, n_iov, cookie, KDAT_WR_RDMA_READ, target, rmr_context);
}
EXPORT_SYMBOL_GPL(kdat_ep_post_rdma_read);

/* ---- LMR and RMR ------------------------------------------------------------------------ */

kdat_ret_t kdat_lmr_create(struct kdat_ia *ia, void *buf, u64 length, struct kdat_lmr **out)
{
	struct kdat_ctx *ctx = ia->obj.ctx;
	struct kdat_lmr *lmr;
	kdat_ret_t ret = KDAT_DAT_SUCCESS;

	if (!buf || !length || !virt_addr_valid(buf) || length > U32_MAX)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	lmr = kzalloc(sizeof(*lmr), GFP_KERNEL);
	if (!lmr)
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
	mutex_lock(&ctx->lock);
	if (ia->obj.dead || ia->removed) {
		ret = kdat_err(KDAT_DAT_INVALID_STATE, KDAT_DAT_NO_SUBTYPE);
		goto out;
	}
	lmr->dma = ib_dma_map_single(ia->ibdev, buf, length, DMA_BIDIRECTIONAL);
	if (ib_dma_mapping_error(ia->ibdev, lmr->dma)) {
		ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY_REGION);
		goto out;
	}
	lmr->ia = ia;
	lmr->buf = buf;
	lmr->length = length;
	list_add_tail(&lmr->ia_node, &ia->lmrs);
	*out = lmr;
out:
	mutex_unlock(&ctx->lock);
	if (ret)
		kfree(lmr);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_lmr_create);

static void kdat_lmr_release(struct kdat_lmr *lmr)
{
	list_del(&lmr->ia_node);
	if (!lmr->unmapped)
		ib_dma_unmap_single(lmr->ia->ibdev, lmr->dma, lmr->length, DMA_BIDIRECTIONAL);
	kfree(lmr);
}

kdat_ret_t kdat_lmr_free(struct kdat_lmr *lmr)
{
	struct kdat_ctx *ctx = lmr->ia->obj.ctx;

	mutex_lock(&ctx->lock);
	kdat_lmr_release(lmr);
	mutex_unlock(&ctx->lock);
	return KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(kdat_lmr_free);

void kdat_lmr_sync_for_cpu(struct kdat_lmr *lmr)
{
	if (READ_ONCE(lmr->unmapped))
		return;
	ib_dma_sync_single_for_cpu(lmr->ia->ibdev, lmr->dma, lmr->length, DMA_BIDIRECTIONAL);
}
EXPORT_SYMBOL_GPL(kdat_lmr_sync_for_cpu);

void kdat_lmr_sync_for_device(struct kdat_lmr *lmr)
{
	if (READ_ONCE(lmr->unmapped))
		return;
	ib_dma_sync_single_for_device(lmr->ia->ibdev, lmr->dma, lmr->length, DMA_BIDIRECTIONAL);
}
EXPORT_SYMBOL_GPL(kdat_lmr_sync_for_device);

kdat_ret_t kdat_rmr_create(struct kdat_ia *ia, struct kdat_rmr **out)
{
	struct kdat_ctx *ctx = ia->obj.ctx;
	struct kdat_rmr *rmr = kzalloc(sizeof(*rmr), GFP_KERNEL);

	if (!rmr)
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
	rmr->ia = ia;
	mutex_lock(&ctx->lock);
	list_add_tail(&rmr->ia_node, &ia->rmrs);
	mutex_unlock(&ctx->lock);
	*out = rmr;
	return KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(kdat_rmr_create);

static void kdat_rmr_release(struct kdat_rmr *rmr)
{
	list_del(&rmr->ia_node);
	if (rmr->mr)
		ib_dereg_mr(rmr->mr);
	kfree(rmr);
}

kdat_ret_t kdat_rmr_free(struct kdat_rmr *rmr)
{
	struct kdat_ctx *ctx = rmr->ia->obj.ctx;

	mutex_lock(&ctx->lock);
	kdat_rmr_release(rmr);
	mutex_unlock(&ctx->lock);
	return KDAT_DAT_SUCCESS;
}
EXPORT_SYMBOL_GPL(kdat_rmr_free);

kdat_ret_t kdat_rmr_bind(struct kdat_rmr *rmr, struct kdat_ep *ep, const struct kdat_iov *iov,
			 u32 access, u64 cookie, u32 *rmr_context, u64 *target)
{
	struct kdat_ctx *ctx = ep->obj.ctx;
	struct ib_reg_wr reg = {};
	struct scatterlist sg;
	struct kdat_wr *wctx;
	kdat_ret_t ret;
	u32 pages;
	int n;

	if (!iov || !iov->lmr || access & ~(KDAT_RMR_REMOTE_READ | KDAT_RMR_REMOTE_WRITE) ||
	    iov->lmr->ia != ep->ia || rmr->ia != ep->ia || !iov->length ||
	    iov->offset > iov->lmr->length || iov->length > iov->lmr->length - iov->offset)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG3);
	/* ctx->lock: the RMR (the IA's lists); ep->lock: the EP's state and QP */
	mutex_lock(&ctx->lock);
	mutex_lock(&ep->lock);
	/* a bind is a send-queue request: where the table takes sends */
	if (ep->obj.dead || !kdat_ep_state_allows(ep->state, KDAT_EP_STIM_POST_SEND) || !ep->qp) {
		ret = kdat_err(KDAT_DAT_INVALID_STATE, kdat_ep_invalid_state_subtype(ep->state));
		goto out;
	}
	pages = DIV_ROUND_UP(offset_in_page(iov->lmr->dma + iov->offset) + iov->length, PAGE_SIZE);
	if (rmr->mr && rmr->max_pages < pages) {
		ib_dereg_mr(rmr->mr);
		rmr->mr = NULL;
	}
	if (!rmr->mr) {
		rmr->mr = ib_alloc_mr(ep->ia->pd, IB_MR_TYPE_MEM_REG, pages);
		if (IS_ERR(rmr->mr)) {
			rmr->mr = NULL;
			ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES,
				       KDAT_DAT_RESOURCE_MEMORY_REGION);
			goto out;
		}
		rmr->max_pages = pages;
	}
	sg_init_table(&sg, 1);
	sg_dma_address(&sg) = iov->lmr->dma + iov->offset;
	sg_dma_len(&sg) = iov->length;
	n = ib_map_mr_sg(rmr->mr, &sg, 1, NULL, PAGE_SIZE);
	if (n != 1) {
		ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY_REGION);
		goto out;
	}
	/* a new key per bind: the peer's old rmr_context stops working */
	ib_update_fast_reg_key(rmr->mr, ib_inc_rkey(rmr->mr->rkey));
	wctx = kdat_wr_get(ep, false);
	if (!wctx) {
		ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_TEP);
		goto out;
	}
	wctx->cookie = cookie;
	wctx->length = iov->length;
	wctx->kind = KDAT_WR_BIND;
	wctx->rmr = rmr;
	wctx->cqe.done = kdat_wr_done;
	rmr->bound = false;
	reg.wr.opcode = IB_WR_REG_MR;
	reg.wr.wr_cqe = &wctx->cqe;
	reg.wr.send_flags = IB_SEND_SIGNALED;
	reg.mr = rmr->mr;
	reg.key = rmr->mr->rkey;
	reg.access = IB_ACCESS_LOCAL_WRITE |
		     (access & KDAT_RMR_REMOTE_READ ? IB_ACCESS_REMOTE_READ : 0) |
		     (access & KDAT_RMR_REMOTE_WRITE ? IB_ACCESS_REMOTE_WRITE : 0);
	ret = kdat_post_send_wr(ep, &reg.wr, wctx);
	if (!ret) {
		*rmr_context = rmr->mr->rkey;
		*target = rmr->mr->iova;
	}
out:
	mutex_unlock(&ep->lock);
	mutex_unlock(&ctx->lock);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_rmr_bind);

/*
 * Device removal: the device's mappings and registrations of kernel
 * consumers' LMRs and RMRs go now; the objects stay on the IA's lists for
 * their consumer's kdat_lmr_free/kdat_rmr_free, or kdat_ia_close().
 */
void kdat_ia_release_memory(struct kdat_ia *ia)
{
	struct kdat_lmr *lmr;
	struct kdat_rmr *rmr;

	lockdep_assert_held(&ia->obj.ctx->lock);
	list_for_each_entry(rmr, &ia->rmrs, ia_node) {
		if (rmr->mr)
			ib_dereg_mr(rmr->mr);
		rmr->mr = NULL;
	}
	list_for_each_entry(lmr, &ia->lmrs, ia_node) {
		if (!lmr->unmapped)
			ib_dma_unmap_single(ia->ibdev, lmr->dma, lmr->length, DMA_BIDIRECTIONAL);
		lmr->unmapped = true;
	}
}

/* IA teardown: what kernel consumers did not free. */
void kdat_ia_free_memory(struct kdat_ia *ia)
{
	while (!list_empty(&ia->rmrs))
		kdat_rmr_release(list_first_entry(&ia->rmrs, struct kdat_rmr, ia_node));
	while (!list_empty(&ia->lmrs))
		kdat_lmr_release(list_first_entry(&ia->lmrs, struct kdat_lmr, ia_node));
}
