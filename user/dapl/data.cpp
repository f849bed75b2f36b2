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

}  // namespace

void fill_data_table(DAT_PROVIDER &p) {
  p.lmr_create_func = &lmr_create;
  p.lmr_query_func = &lmr_query;
  p.lmr_free_func = &lmr_free;
  p.ep_post_send_func = &post_send;
  p.ep_post_recv_func = &post_recv;
  p.ep_post_rdma_read_func = &post_rdma_read;
  p.ep_post_rdma_write_func = &post_rdma_write;
  // Not yet (README): RMRs, LMR sync, send with invalidate, RDMA read to RMR.
  KDAT_NOT_IMPLEMENTED(p, lmr_sync_rdma_read_func);
  KDAT_NOT_IMPLEMENTED(p, lmr_sync_rdma_write_func);
  KDAT_NOT_IMPLEMENTED(p, rmr_create_func);
  KDAT_NOT_IMPLEMENTED(p, rmr_create_for_ep_func);
  KDAT_NOT_IMPLEMENTED(p, rmr_query_func);
  KDAT_NOT_IMPLEMENTED(p, rmr_bind_func);
  KDAT_NOT_IMPLEMENTED(p, rmr_free_func);
  KDAT_NOT_IMPLEMENTED(p, ep_post_send_with_invalidate_func);
  KDAT_NOT_IMPLEMENTED(p, ep_post_rdma_read_to_rmr_func);
}

}  // namespace kdat::dapl
