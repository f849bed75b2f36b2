// SPDX-License-Identifier: GPL-2.0
/*
 * Entry points for kdat's KUnit suites (kunit/): swap an IA's connection
 * manager for a fake, remove its device, hold its owner's lock.  Built only
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

/*
 * Holds (or releases) the lock of the IA's owner, as a long kdat call would:
 * a test queues CM upcalls and timer work behind it in a known order.
 */
void kdat_test_ia_hold_owner(struct kdat_ia *ia, bool hold)
{
	if (hold)
		mutex_lock(&ia->obj.ctx->lock);
	else
		mutex_unlock(&ia->obj.ctx->lock);
}
EXPORT_SYMBOL_GPL(kdat_test_ia_hold_owner);

/*
 * For a fake CM to see which of its calls kdat makes under the owner's lock,
 * which the CM's handlers take (kdat_base.h: none may be).
 */
bool kdat_test_ia_owner_held(struct kdat_ia *ia)
{
#ifdef CONFIG_LOCKDEP
	return lockdep_is_held(&ia->obj.ctx->lock);
#else
	return false;
#endif
}
EXPORT_SYMBOL_GPL(kdat_test_ia_owner_held);
#endif
