// SPDX-License-Identifier: GPL-2.0
/*
 * The completion queues of an IA's kernel QPs, shared: each CQ serves as
 * many EPs as its entries cover, the way a storage driver shares its CQs
 * among its queues.  A CQ per EP cost each EP a CQ's creation and
 * destruction (on rxe a vmalloc'd queue, mapped and unmapped) and a page of
 * memory for 34 entries.  A completion finds its EP through its QP
 * (wc->qp->qp_context), so sharing changes nothing above: an EP's
 * completions still come in order, from one CQ's work.
 *
 * An IA's EPs take the device's completion vectors in turn, and share a CQ
 * only with EPs of the same vector: a driver's queues (one EP each) get
 * their completions from as many CQs as the device has vectors, not all
 * from one CQ's work.
 *
 * A CQ goes as soon as its last EP does, so nothing outlives the EPs that
 * needed it (an ib_core CQ pool would keep its CQs until the device goes).
 * Completions of a QP that is gone cannot run: its EP drained the QP before
 * destroying it (kdat_ep_free_qp), or never posted on it.
 */
#include <linux/slab.h>
#include "kdat_conn.h"

/* Entries of a shared CQ: 30 EPs of the default depth (16 + 16 + 2 each) */
#define KDAT_SHARED_CQ_CQES	1024

struct kdat_cq {
	struct list_head node;		/* ia->cqs, under ia->cq_lock */
	struct ib_cq *cq;		/* its cq_context is this kdat_cq */
	u32 vector;			/* its completion vector */
	u32 cqe_free;			/* entries no EP has taken */
	u32 users;			/* EPs whose QP uses it */
};

void kdat_cqs_init(struct kdat_ia *ia)
{
	mutex_init(&ia->cq_lock);
	INIT_LIST_HEAD(&ia->cqs);
}

/* Caller holds ia->cq_lock. */
static struct kdat_cq *kdat_cq_new(struct kdat_ia *ia, u32 nr_cqe, u32 vector)
{
	u32 max = ia->ibdev->attrs.max_cqe;
	struct kdat_cq *kcq;
	u32 size;

	lockdep_assert_held(&ia->cq_lock);
	if (nr_cqe > max)
		return NULL;
	size = clamp_t(u32, KDAT_SHARED_CQ_CQES, nr_cqe, max);
	kcq = kzalloc(sizeof(*kcq), GFP_KERNEL);
	if (!kcq)
		return NULL;
	kcq->cq = ib_alloc_cq(ia->ibdev, kcq, size, vector, IB_POLL_WORKQUEUE);
	if (IS_ERR(kcq->cq)) {
		kfree(kcq);
		return NULL;
	}
	kcq->vector = vector;
	kcq->cqe_free = size;
	list_add(&kcq->node, &ia->cqs);
	return kcq;
}

/* A CQ with nr_cqe entries for one EP's QP, on the IA's next vector; or NULL. */
struct ib_cq *kdat_cq_get(struct kdat_ia *ia, u32 nr_cqe)
{
	u32 vectors = max(ia->ibdev->num_comp_vectors, 1);
	struct kdat_cq *kcq, *found = NULL;
	u32 vector;

	mutex_lock(&ia->cq_lock);
	vector = ia->cq_next_vector++ % vectors;
	list_for_each_entry(kcq, &ia->cqs, node) {
		if (kcq->vector == vector && kcq->cqe_free >= nr_cqe) {
			found = kcq;
			break;
		}
	}
	if (!found)
		found = kdat_cq_new(ia, nr_cqe, vector);
	if (found) {
		found->cqe_free -= nr_cqe;
		found->users++;
	}
	mutex_unlock(&ia->cq_lock);
	return found ? found->cq : NULL;
}

/*
 * Gives back what kdat_cq_get() took, once the QP that used it is gone (and
 * its completions with it); the CQ goes with its last user.
 */
void kdat_cq_put(struct kdat_ia *ia, struct ib_cq *cq, u32 nr_cqe)
{
	struct kdat_cq *kcq = cq->cq_context;
	bool last;

	mutex_lock(&ia->cq_lock);
	kcq->cqe_free += nr_cqe;
	last = !--kcq->users;
	if (last)
		list_del(&kcq->node);
	mutex_unlock(&ia->cq_lock);
	if (!last)
		return;
	ib_free_cq(cq);
	kfree(kcq);
}

/* Every EP is gone before the PD (kdat_ia_free_pd), and its CQ with it. */
void kdat_cqs_check_empty(struct kdat_ia *ia)
{
	WARN_ON_ONCE(!list_empty(&ia->cqs));
}
