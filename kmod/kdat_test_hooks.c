// SPDX-License-Identifier: GPL-2.0
/*
 * Entry points for kdat's KUnit suites (kunit/): swap an IA's connection
 * manager for a fake, remove its device, hold its owner's or an EP's lock.  Built only
 * with CONFIG_KUNIT.
 */
#include "kdat_conn.h"

#if IS_ENABLED(CONFIG_KUNIT)
int kdat_test_ia_set_cm_ops(struct kdat_ia *ia, const struct kdat_cm_ops *ops)
{
	struct kdat_ctx *ctx = ia->obj.ctx;
	int ret = 0;

	mutex_lock(&ctx->lock);
	if (ia->obj.dead || !list_empty(&ia->eps) || !list_empty(&ia->sps) ||
	    !list_empty(&ia->crs))
		ret = -EBUSY;
	else
		ia->cm = ops ? ops : &kdat_cm_rdma;
	mutex_unlock(&ctx->lock);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_test_ia_set_cm_ops);

/* /dev/kdat's EP_CONNECT on a UD EP: an address exchange (kdat_ud.c) */
kdat_ret_t kdat_test_ud_connect(struct kdat_ep *ep, const struct sockaddr *remote, u64 conn_qual,
				u32 timeout_us, const void *pdata, s32 pdata_size)
{
	return kdat_ud_connect(ep, remote, conn_qual, timeout_us, pdata, pdata_size,
			       KDAT_DAT_QOS_BEST_EFFORT, KDAT_CONNECT_DEFAULT);
}
EXPORT_SYMBOL_GPL(kdat_test_ud_connect);

void kdat_test_ia_device_removed(struct kdat_ia *ia)
{
	/* as kdat_ib_remove() does, for this one IA */
	mutex_lock(&kdat_devices_lock);
	list_del_init(&ia->dev_node);
	ia->kdev = NULL;
	mutex_unlock(&kdat_devices_lock);
	kdat_ia_device_removed(ia);
}
EXPORT_SYMBOL_GPL(kdat_test_ia_device_removed);

/* Holds (or releases) the lock of the IA's owner, as a long call on its lists would. */
void kdat_test_ia_hold_owner(struct kdat_ia *ia, bool hold)
{
	if (hold)
		mutex_lock(&ia->obj.ctx->lock);
	else
		mutex_unlock(&ia->obj.ctx->lock);
}
EXPORT_SYMBOL_GPL(kdat_test_ia_hold_owner);

/*
 * Holds (or releases) an EP's lock, as a long kdat call on it would: a test
 * queues the EP's CM upcalls and timer work behind it in a known order.
 */
void kdat_test_ep_hold(struct kdat_ep *ep, bool hold)
{
	if (hold)
		mutex_lock(&ep->lock);
	else
		mutex_unlock(&ep->lock);
}
EXPORT_SYMBOL_GPL(kdat_test_ep_hold);

void kdat_test_flush_work(void)
{
	flush_workqueue(kdat_wq);
}
EXPORT_SYMBOL_GPL(kdat_test_flush_work);

/*
 * For a fake CM to see which of its calls kdat makes under a lock that the
 * CM's handlers take (kdat_base.h: none may be): the owner's, or the EP's
 * that the id serves (itself, or through the orphan that adopted it).
 */
bool kdat_test_cm_call_locked(struct kdat_ia *ia, struct rdma_cm_id *id)
{
#ifdef CONFIG_LOCKDEP
	struct kdat_obj *obj = id ? READ_ONCE(id->context) : NULL;
	struct kdat_ep *ep = NULL;

	if (lockdep_is_held(&ia->obj.ctx->lock))
		return true;
	if (obj && obj->type == KDAT_OBJ_EP)
		ep = container_of(obj, struct kdat_ep, obj);
	else if (obj && obj->type == KDAT_OBJ_ORPHAN)
		ep = kdat_orphan_ep(obj);
	return ep && lockdep_is_held(&ep->lock);
#else
	return false;
#endif
}
EXPORT_SYMBOL_GPL(kdat_test_cm_call_locked);
#endif
