// The memory calls: validated here, carried out by the IA's DataPath (data_path.hpp).  The posts
// live in data_path.cpp, beside the QP they go to (one function per post).
#include "data_path.hpp"
#include "provider.hpp"

namespace kdat::dapl {
namespace {

DAT_RETURN lmr_create(DAT_IA_HANDLE ia_handle, DAT_MEM_TYPE type, DAT_REGION_DESCRIPTION region,
                      DAT_VLEN length, DAT_PZ_HANDLE pz_handle, DAT_MEM_PRIV_FLAGS privileges,
                      DAT_VA_TYPE va_type, DAT_LMR_HANDLE *out, DAT_LMR_CONTEXT *lmr_context,
                      DAT_RMR_CONTEXT *rmr_context, DAT_VLEN *registered_length,
                      DAT_VADDR *registered_address) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &ia = lookup_as<Ia>(ia_handle, DAT_INVALID_HANDLE_IA);
    auto &pz = lookup_as<Pz>(pz_handle, DAT_INVALID_HANDLE_PZ);
    if (pz.ia != &ia) fail(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
    if (type != DAT_MEM_TYPE_VIRTUAL || va_type != DAT_VA_TYPE_VA) fail(DAT_NOT_IMPLEMENTED);
    // A region of no bytes is a length error, as dapltest's FFT mem case 2 expects of every
    // provider (libdaplofa answers DAT_INSUFFICIENT_RESOURCES, ibv_reg_mr's ENOMEM on rxe, and
    // fails that case).
    if (length == 0) fail(DAT_LENGTH_ERROR);
    if (region.for_va == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    if (out == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG8);
    // DAT's privileges and the IB extension's remote atomics (the target of a peer's
    // dat_ib_post_cmp_and_swap / _fetch_and_add)
    constexpr DAT_MEM_PRIV_FLAGS known =
        static_cast<DAT_MEM_PRIV_FLAGS>(DAT_MEM_PRIV_ALL_FLAG | kPrivRemoteAtomic);
    if ((privileges & ~known) != 0) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6);
    MemoryKeys keys;
    auto registered = ia.data_path->register_memory(pz, region.for_va, length, privileges, keys);
    auto &lmr = make_child<Lmr>(ia);
    lmr.region = std::move(registered);
    lmr.pz = &pz;
    lmr.address = region.for_va;
    lmr.length = length;
    lmr.privileges = privileges;
    lmr.lmr_context = keys.lmr_context;
    lmr.rmr_context = keys.rmr_context;
    lmr.registered_length = keys.registered_length;
    lmr.registered_address = keys.registered_address;
    ++pz.users;
    ++ia.counters[DCNT_IA_LMR_CREATE];
    *out = lmr.handle;
    if (lmr_context != nullptr) *lmr_context = lmr.lmr_context;
    if (rmr_context != nullptr) *rmr_context = lmr.rmr_context;
    if (registered_length != nullptr) *registered_length = lmr.registered_length;
    if (registered_address != nullptr) *registered_address = lmr.registered_address;
    return DAT_SUCCESS;
  });
}

DAT_RETURN lmr_query(DAT_LMR_HANDLE handle, DAT_LMR_PARAM_MASK, DAT_LMR_PARAM *param) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &lmr = lookup_as<Lmr>(handle, DAT_INVALID_HANDLE_LMR);
    if (param == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    param->ia_handle = lmr.ia->handle;
    param->mem_type = DAT_MEM_TYPE_VIRTUAL;
    param->region_desc.for_va = lmr.address;
    param->length = lmr.length;
    param->pz_handle = lmr.pz->handle;
    param->mem_priv = lmr.privileges;
    param->va_type = DAT_VA_TYPE_VA;
    param->lmr_context = lmr.lmr_context;
    param->rmr_context = lmr.rmr_context;
    param->registered_size = lmr.registered_length;
    param->registered_address = lmr.registered_address;
    return DAT_SUCCESS;
  });
}

DAT_RETURN lmr_free(DAT_LMR_HANDLE handle) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &lmr = lookup_as<Lmr>(handle, DAT_INVALID_HANDLE_LMR);
    --lmr.pz->users;
    ++lmr.ia->counters[DCNT_IA_LMR_FREE];
    drop_child(lmr);
    return DAT_SUCCESS;
  });
}

// dat_lmr_sync_rdma_read / _write: the memory an RDMA device reads and writes here is coherent
// with the CPU's caches (ia_query's lmr_sync_req is FALSE), so there is nothing to flush; the
// call checks its arguments as DAT says: every segment lies in an LMR of the IA, named by its
// LMR context.
DAT_RETURN lmr_sync(DAT_IA_HANDLE ia_handle, const DAT_LMR_TRIPLET *segments, DAT_VLEN count) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &ia = lookup_as<Ia>(ia_handle, DAT_INVALID_HANDLE_IA);
    if (count > 0 && segments == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    for (DAT_VLEN i = 0; i < count; ++i)
      if (lmr_holding(ia, segments[i]) == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    return DAT_SUCCESS;
  });
}

// ---- RMRs: memory windows (data_path.hpp's MemoryWindow, bound on an EP's QP)

DAT_RETURN make_rmr(DAT_PZ_HANDLE pz_handle, DAT_RMR_HANDLE *out, bool per_ep) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &pz = lookup_as<Pz>(pz_handle, DAT_INVALID_HANDLE_PZ);
    if (out == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    Ia &ia = *pz.ia;
    DAT_RMR_CONTEXT context = 0;
    auto window = ia.data_path->make_memory_window(pz, per_ep, context);
    auto &rmr = make_child<Rmr>(ia);
    rmr.window = std::move(window);
    rmr.pz = &pz;
    rmr.scope = per_ep ? DAT_RMR_SCOPE_EP : DAT_RMR_SCOPE_PZ;
    rmr.context = context;
    ++pz.users;
    ++ia.counters[DCNT_IA_RMR_CREATE];
    *out = rmr.handle;
    return DAT_SUCCESS;
  });
}

DAT_RETURN rmr_create(DAT_PZ_HANDLE pz, DAT_RMR_HANDLE *out) { return make_rmr(pz, out, false); }

DAT_RETURN rmr_create_for_ep(DAT_PZ_HANDLE pz, DAT_RMR_HANDLE *out) {
  return make_rmr(pz, out, true);
}

DAT_RETURN rmr_query(DAT_RMR_HANDLE handle, DAT_RMR_PARAM_MASK, DAT_RMR_PARAM *param) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &rmr = lookup_as<Rmr>(handle, DAT_INVALID_HANDLE_RMR);
    if (param == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    param->ia_handle = rmr.ia->handle;
    param->pz_handle = rmr.pz->handle;
    param->lmr_triplet = rmr.target;
    param->mem_priv = rmr.privileges;
    param->rmr_context = rmr.context;
    param->rmr_scope = rmr.scope;
    param->va_type = DAT_VA_TYPE_VA;
    return DAT_SUCCESS;
  });
}

// The argument positions are dat_rmr_bind's: rmr 1, lmr 2, triplet 3, privileges 4, va_type 5,
// ep 6, cookie 7, flags 8, context 9.  A triplet of length 0 unbinds (its LMR is not looked at).
DAT_RETURN rmr_bind(DAT_RMR_HANDLE handle, DAT_LMR_HANDLE lmr_handle, const DAT_LMR_TRIPLET *target,
                    DAT_MEM_PRIV_FLAGS privileges, DAT_VA_TYPE va_type, DAT_EP_HANDLE ep_handle,
                    DAT_RMR_COOKIE cookie, DAT_COMPLETION_FLAGS flags, DAT_RMR_CONTEXT *context) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &rmr = lookup_as<Rmr>(handle, DAT_INVALID_HANDLE_RMR);
    auto &ep = lookup_as<Ep>(ep_handle, DAT_INVALID_HANDLE_EP);
    if (target == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    const bool unbind = target->segment_length == 0;
    const Lmr *lmr = nullptr;
    if (!unbind) lmr = &lookup_as<Lmr>(lmr_handle, DAT_INVALID_HANDLE_LMR);
    if (va_type != DAT_VA_TYPE_VA) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
    constexpr DAT_MEM_PRIV_FLAGS known =
        static_cast<DAT_MEM_PRIV_FLAGS>(DAT_MEM_PRIV_ALL_FLAG | kPrivRemoteAtomic);
    if ((privileges & ~known) != 0) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
    constexpr DAT_COMPLETION_FLAGS known_flags = static_cast<DAT_COMPLETION_FLAGS>(
        DAT_COMPLETION_SUPPRESS_FLAG | DAT_COMPLETION_UNSIGNALLED_FLAG |
        DAT_COMPLETION_BARRIER_FENCE_FLAG);
    if ((flags & ~known_flags) != 0) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG8);
    if (context == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG9);
    // The window, the memory and the EP must share a PZ (the PD the device checks).
    if (ep.pz != rmr.pz || (lmr != nullptr && lmr->pz != rmr.pz))
      fail(DAT_PROTECTION_VIOLATION, DAT_PROTECTION_VIOLATION);
    if (lmr != nullptr) {
      // within the LMR, by its LMR context as a DTO's segment would be
      if (target->lmr_context != lmr->lmr_context) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
      if (!lmr->within(*target)) fail(DAT_LENGTH_ERROR);
      // A window gives no remote right its memory does not have.
      constexpr DAT_MEM_PRIV_FLAGS remote = static_cast<DAT_MEM_PRIV_FLAGS>(
          DAT_MEM_PRIV_REMOTE_READ_FLAG | DAT_MEM_PRIV_REMOTE_WRITE_FLAG | kPrivRemoteAtomic);
      if ((privileges & remote & ~lmr->privileges) != 0)
        fail(DAT_PRIVILEGES_VIOLATION, DAT_PRIVILEGES_READ);
    }
    if (!ep.user) fail(DAT_NOT_IMPLEMENTED);  // a kernel-owned QP: no windows
    DAT_RMR_CONTEXT next = 0;
    const DAT_RETURN r = ep.qp->bind(rmr, lmr, *target, privileges, cookie, flags, next);
    if (r != DAT_SUCCESS) return r;
    rmr.target = unbind ? DAT_LMR_TRIPLET{} : *target;
    rmr.privileges = unbind ? DAT_MEM_PRIV_NONE_FLAG : privileges;
    rmr.context = next;
    rmr.bound_ep = unbind ? nullptr : &ep;
    *context = next;
    return DAT_SUCCESS;
  });
}

DAT_RETURN rmr_free(DAT_RMR_HANDLE handle) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &rmr = lookup_as<Rmr>(handle, DAT_INVALID_HANDLE_RMR);
    --rmr.pz->users;
    ++rmr.ia->counters[DCNT_IA_RMR_FREE];
    drop_child(rmr);
    return DAT_SUCCESS;
  });
}

}  // namespace

void fill_data_table(DAT_PROVIDER &p) {
  p.lmr_create_func = &lmr_create;
  p.lmr_query_func = &lmr_query;
  p.lmr_free_func = &lmr_free;
  p.ep_post_send_func = &post_send;
  p.ep_post_recv_func = &post_recv;
  p.ep_post_rdma_read_func = &post_rdma_read;
  p.ep_post_rdma_write_func = &post_rdma_write;
  p.rmr_create_func = &rmr_create;
  p.rmr_create_for_ep_func = &rmr_create_for_ep;
  p.rmr_query_func = &rmr_query;
  p.rmr_bind_func = &rmr_bind;
  p.rmr_free_func = &rmr_free;
  p.lmr_sync_rdma_read_func = &lmr_sync;
  p.lmr_sync_rdma_write_func = &lmr_sync;
  p.ep_post_send_with_invalidate_func = &post_send_with_invalidate;
  // Not yet (README): RDMA read to an RMR (iWARP's read into a local window).
  KDAT_NOT_IMPLEMENTED(p, ep_post_rdma_read_to_rmr_func);
}

}  // namespace kdat::dapl
