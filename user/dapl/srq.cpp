// The shared receive queue calls (dat_srq_*): validated here, the queue itself is the IA's
// DataPath's (data_path.hpp: a verbs SRQ on the IA's PD).  dat_ep_create_with_srq is in
// connect.cpp beside dat_ep_create.  No low watermark (ia_query's srq_watermarks_supported is 0):
// its event would come from the device's async events, which the provider does not read.
#include "data_path.hpp"
#include "provider.hpp"

namespace kdat::dapl {

Srq::~Srq() = default;

namespace {

DAT_RETURN srq_create(DAT_IA_HANDLE ia_handle, DAT_PZ_HANDLE pz_handle, DAT_SRQ_ATTR *attr,
                      DAT_SRQ_HANDLE *out) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &ia = lookup_as<Ia>(ia_handle, DAT_INVALID_HANDLE_IA);
    auto &pz = lookup_as<Pz>(pz_handle, DAT_INVALID_HANDLE_PZ);
    if (pz.ia != &ia) fail(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
    if (attr == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    if (out == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
    // An SRQ is the data path's: a PZ without a PD (no device this process can open) has none.
    if (!pz.pd) fail(DAT_MODEL_NOT_SUPPORTED);
    auto &srq = make_child<Srq>(ia);
    srq.pz = &pz;
    srq.attr = *attr;
    try {
      srq.queue = ia.data_path->make_shared_receive_queue(srq);
    } catch (...) {
      drop_child(srq);
      throw;
    }
    ++pz.users;
    *out = srq.handle;
    return DAT_SUCCESS;
  });
}

DAT_RETURN srq_free(DAT_SRQ_HANDLE handle) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &srq = lookup_as<Srq>(handle, DAT_INVALID_HANDLE_SRQ);
    if (!srq.eps.empty()) fail(DAT_INVALID_STATE, DAT_INVALID_STATE_SRQ_IN_USE);
    --srq.pz->users;
    srq.queue.reset();  // its receives are forgotten with it
    drop_child(srq);
    return DAT_SUCCESS;
  });
}

DAT_RETURN srq_post_recv(DAT_SRQ_HANDLE handle, DAT_COUNT segments, DAT_LMR_TRIPLET *iov,
                         DAT_DTO_COOKIE cookie) {
  return guard([&]() -> DAT_RETURN {
    const ProviderGuard lock(provider_lock);
    auto &srq = lookup_as<Srq>(handle, DAT_INVALID_HANDLE_SRQ);
    return srq.queue->post_recv(segments, iov, cookie);
  });
}

DAT_RETURN srq_query(DAT_SRQ_HANDLE handle, DAT_SRQ_PARAM_MASK mask, DAT_SRQ_PARAM *param) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &srq = lookup_as<Srq>(handle, DAT_INVALID_HANDLE_SRQ);
    if ((mask & ~DAT_SRQ_FIELD_ALL) != 0) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    if (param == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    param->ia_handle = srq.ia->handle;
    param->srq_state = DAT_SRQ_STATE_OPERATIONAL;
    param->pz_handle = srq.pz->handle;
    param->max_recv_dtos = srq.attr.max_recv_dtos;
    param->max_recv_iov = srq.attr.max_recv_iov;
    param->low_watermark = srq.attr.low_watermark;
    // Which posted receives an EP has begun to fill only the device knows (DAPL says the same).
    param->available_dto_count = DAT_VALUE_UNKNOWN;
    param->outstanding_dto_count = static_cast<DAT_COUNT>(srq.queue->outstanding());
    return DAT_SUCCESS;
  });
}

DAT_RETURN srq_resize(DAT_SRQ_HANDLE handle, DAT_COUNT max_recv_dtos) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &srq = lookup_as<Srq>(handle, DAT_INVALID_HANDLE_SRQ);
    srq.queue->resize(max_recv_dtos);
    return DAT_SUCCESS;
  });
}

DAT_RETURN srq_set_lw(DAT_SRQ_HANDLE handle, DAT_COUNT) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    (void)lookup_as<Srq>(handle, DAT_INVALID_HANDLE_SRQ);
    return error(DAT_MODEL_NOT_SUPPORTED);
  });
}

}  // namespace

void fill_srq_table(DAT_PROVIDER &p) {
  p.srq_create_func = &srq_create;
  p.srq_free_func = &srq_free;
  p.srq_post_recv_func = &srq_post_recv;
  p.srq_query_func = &srq_query;
  p.srq_resize_func = &srq_resize;
  p.srq_set_lw_func = &srq_set_lw;
}

}  // namespace kdat::dapl
