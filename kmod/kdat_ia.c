// SPDX-License-Identifier: GPL-2.0
/*
 * Interface adapters: opening one on a netdev or address, its limits, closing it, an
 * owner's teardown and the removal of the device under it.
 */
#include <linux/inet.h>
#include <linux/inetdevice.h>
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/slab.h>
#include <net/net_namespace.h>
#include "kdat_conn.h"

static void kdat_ia_rec_fill(struct kdat_record *rec, struct kdat_obj *obj)
{
	struct kdat_ia *ia = container_of(obj, struct kdat_ia, obj);

	rec->state = ia->removed ? KDAT_IA_DEVICE_REMOVED : KDAT_IA_UP;
	kdat_addr_out(&rec->local_addr, (struct sockaddr *)&ia->addr);
	kdat_rec_port(rec, ia);
}

/* the last reference (teardown has usually unlisted its counters already) */
static void kdat_ia_release(struct kdat_obj *obj)
{
	struct kdat_ia *ia = container_of(obj, struct kdat_ia, obj);

	kdat_table_del_stats(obj->ctx->table, &ia->stats);
	kdat_dev_stats_put(ia->dev_stats);
}

static const struct kdat_obj_class kdat_ia_class = {
	.rec_type = KDAT_REC_IA,
	.rec_fill = kdat_ia_rec_fill,
	.release = kdat_ia_release,
};

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
kdat_ret_t kdat_ia_open_in(struct kdat_ctx *ctx, const char *name, u32 flags,
			   struct kdat_ia **out, u32 *handle)
{
	struct kdat_device *kdev;
	struct rdma_cm_id *probe;
	struct kdat_ia *ia;
	kdat_ret_t ret;
	int err;

	if (flags & ~KDAT_IA_OPEN_FLAGS)
		return kdat_err(KDAT_DAT_INVALID_PARAMETER, KDAT_DAT_INVALID_ARG2);
	ia = kzalloc(sizeof(*ia), GFP_KERNEL);
	if (!ia)
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
	ia->pdata_raw = flags & KDAT_IA_PDATA_RAW;
	INIT_LIST_HEAD(&ia->evds);
	INIT_LIST_HEAD(&ia->eps);
	INIT_LIST_HEAD(&ia->sps);
	INIT_LIST_HEAD(&ia->crs);
	INIT_LIST_HEAD(&ia->lmrs);
	INIT_LIST_HEAD(&ia->rmrs);
	INIT_LIST_HEAD(&ia->mrs);
	atomic_set(&ia->eps_finishing, 0);
	init_waitqueue_head(&ia->finish_wq);
	kdat_cqs_init(ia);
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
	ia->local_dma_lkey = ia->pd->local_dma_lkey;

	mutex_lock(&ctx->lock);
	if (kdat_obj_add(ctx, &ia->obj, KDAT_OBJ_IA, &kdat_ia_class)) {
		mutex_unlock(&ctx->lock);
		ret = kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
		goto err_pd;
	}
	ia->stats.handle = ia->obj.handle;
	if (kdat_table_add_stats(ctx->table, &ia->stats)) {
		kdat_obj_unlink(&ia->obj);
		mutex_unlock(&ctx->lock);
		ib_dealloc_pd(ia->pd);
		kdat_obj_put(&ia->obj);
		return kdat_err(KDAT_DAT_INSUFFICIENT_RESOURCES, KDAT_DAT_RESOURCE_MEMORY);
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
	kref_get(&kdev->stats->ref);
	ia->dev_stats = kdev->stats;
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
	info->max_connect_private_data = kdat_pdata_max(ia, KDAT_IB_REQ_FIELD);
	info->max_accept_private_data = kdat_pdata_max(ia, KDAT_IB_REP_FIELD);
	info->max_reject_private_data = kdat_pdata_max(ia, KDAT_IB_REJ_FIELD);
	info->max_rdma_read_in = min_t(u32, ia->ibdev->attrs.max_qp_rd_atom, U8_MAX);
	info->max_rdma_read_out = min_t(u32, ia->ibdev->attrs.max_qp_init_rd_atom, U8_MAX);
	info->max_eps = KDAT_MAX_EPS;
	info->max_evd_qlen = KDAT_MAX_EVD_QLEN;
	info->max_dtos = ia->ibdev->attrs.max_qp_wr;
	info->max_iov = ia->ibdev->attrs.max_send_sge;
	info->max_rdma_read_iov = min_t(u32, ia->ibdev->attrs.max_sge_rd,
					 ia->ibdev->attrs.max_send_sge);
	info->supported_qos = KDAT_DAT_QOS_BEST_EFFORT;
out:
	mutex_unlock(&ctx->lock);
	return ret;
}
EXPORT_SYMBOL_GPL(kdat_ia_query);

/*
 * The PD goes last, once every QP and MR on it is gone, and once: an IA
 * closed while its device is being removed reaches here from both paths
 * (they freed it twice: a use-after-free in ib_dealloc_pd, KASAN).
 */
static void kdat_ia_free_pd(struct kdat_ia *ia)
{
	struct ib_pd *pd;

	/* an EP freed by another thread may still be destroying its QP */
	wait_event(ia->finish_wq, !atomic_read(&ia->eps_finishing));
	kdat_cqs_check_empty(ia);
	pd = xchg(&ia->pd, NULL);
	if (pd)
		ib_dealloc_pd(pd);
}

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
			struct kdat_ep_wire wire = {};

			kdat_obj_get_ref(&ep->obj);
			kdat_ep_kill(ep, &wire);
			mutex_unlock(&ctx->lock);
			kdat_ep_finish(ep, &wire);
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
	kdat_table_del_stats(ctx->table, &ia->stats);	/* its handle reads no more counters */
	list_del_init(&ia->ctx_node);
	mutex_lock(&kdat_devices_lock);
	list_del_init(&ia->dev_node);
	mutex_unlock(&kdat_devices_lock);
	mutex_unlock(&ctx->lock);
	/* Pending deferred id destructions may still hold the PD's QPs' ids. */
	flush_workqueue(kdat_wq);
	mutex_lock(&ctx->lock);
	kdat_ia_free_memory(ia);	/* after a removal: only what is left of them */
	kdat_ia_free_mrs(ia);
	mutex_unlock(&ctx->lock);
	kdat_ia_free_pd(ia);
	kdat_obj_put(&ia->obj);
}

void kdat_ia_counters(struct kdat_ia *ia, u64 *values, u32 count)
{
	u32 i;

	for (i = 0; i < count; i++)
		values[i] = i < KDAT_IA_NR_COUNTERS ? atomic64_read(&ia->stats.v[i]) : 0;
}
EXPORT_SYMBOL_GPL(kdat_ia_counters);

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
		max += 2;	/* its RC and UD listeners */
	list_for_each_entry(cr, &ia->crs, ia_node)
		max++;
	ids = kcalloc(max + 1, 2 * sizeof(*ids), GFP_KERNEL | __GFP_NOFAIL);
	ia->removed = true;
	kdat_rec_sync(&ia->obj);
	list_for_each_entry(ep, &ia->eps, ia_node) {
		mutex_lock(&ep->lock);
		kdat_ep_step(ep, KDAT_EP_STIM_DEVICE_REMOVED, NULL, 0);
		kdat_uqp_end_exchanges(ep);	/* their ids go from kdat_wq, flushed below */
		ids[2 * n] = kdat_ep_detach_id(ep);
		mutex_unlock(&ep->lock);
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
		if (sp->listen_ud_id) {
			ids[2 * n] = sp->listen_ud_id;
			ids[2 * n + 1] = (void *)sp;
			sp->listen_ud_id = NULL;
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
				kdat_ep_wait_unpinned((struct kdat_ep *)obj);
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
			/* the EP's calls test ep->qp under its lock */
			mutex_lock(&ep->lock);
			kdat_ep_free_qp(ep);
			mutex_unlock(&ep->lock);
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
	kdat_ia_release_memory(ia);
	kdat_ia_release_mrs(ia);
	mutex_unlock(&ctx->lock);
	kdat_ia_free_pd(ia);
}

kdat_ret_t __kdat_ia_open(struct net *net, const char *name, u32 flags, struct kdat_ia **ia,
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
	ret = kdat_ia_open_in(ctx, name, flags, ia, NULL);
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

/*
 * kdat's ib_client: ib_core tells it when devices come and go (rxe links
 * added and deleted at run time).  When a device goes, every IA on it is
 * torn off the device before we return, since ib_core unregisters the
 * device right after.
 */
static struct ib_client kdat_ib_client;

static int kdat_ib_add(struct ib_device *ibdev)
{
	struct kdat_device *dev = kdat_device_add(ibdev);

	if (!dev)
		return -ENOMEM;
	ib_set_client_data(ibdev, &kdat_ib_client, dev);
	return 0;
}

static void kdat_ib_remove(struct ib_device *ibdev, void *client_data)
{
	struct kdat_device *dev = client_data;
	struct kdat_ia **ias = kdat_device_remove(dev);
	unsigned int i;

	for (i = 0; ias[i]; i++) {
		kdat_ia_device_removed(ias[i]);
		kdat_obj_put(&ias[i]->obj);
	}
	kfree(ias);
	kdat_orphans_reap(ibdev);
	kfree(dev);
}

static struct ib_client kdat_ib_client = {
	.name = "kdat",
	.add = kdat_ib_add,
	.remove = kdat_ib_remove,
};

int kdat_ib_client_register(void)
{
	return ib_register_client(&kdat_ib_client);
}

void kdat_ib_client_unregister(void)
{
	/* ib_core calls .remove for every device before this returns. */
	ib_unregister_client(&kdat_ib_client);
}
