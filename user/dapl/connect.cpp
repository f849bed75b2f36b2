// Endpoints, service points and connection requests: DAT's connection management, carried out
// by kdat.ko (the EP state machine of include/kdat/ep_table.h on the kernel's rdma_cm) through
// libkdat.  The provider keeps no EP state of its own: states come from the kernel's table.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "data_path.hpp"
#include "provider.hpp"

namespace kdat::dapl {
namespace {

kdat::Timeout to_timeout(DAT_TIMEOUT timeout) {
  if (timeout == DAT_TIMEOUT_INFINITE) return kdat::infinite;
  return kdat::Timeout(timeout);
}

// DAT connection qualifiers are 64 bits, rdma_cm ports (what kdat.ko listens on and connects
// to) 16.  As libdaplofa (openib_cma's SID_TO_PORT): a qualifier up to 0xffff is the port itself,
// a larger one maps to 33534 + (qualifier % 32001), i.e. into 33534..65534.  psp_create,
// rsp_create and ep_connect all map, so a consumer's qualifier meets its peer's on either
// provider; queries and CR events report the qualifier as given.
DAT_CONN_QUAL service_port(DAT_CONN_QUAL conn_qual) {
  constexpr DAT_CONN_QUAL kModulus = 32001;
  constexpr DAT_CONN_QUAL kBase = 65535 - kModulus;
  return conn_qual > 0xffff ? kBase + conn_qual % kModulus : conn_qual;
}

// An EP's connect or dup_connect was handed to the kernel (its REQ goes out; a UD EP's: a
// request for the peer's address, the SIDR REQ).
void count_connect(Ep &ep) {
  ep.active = true;
  ++ep.counters[DCNT_EP_CONNECT];
  ++ep.ia->counters[ep.ud ? DCNT_IA_CM_AH_REQ_TX : DCNT_IA_CM_REQ_TX];
}

constexpr auto kServiceTypeUd = static_cast<DAT_SERVICE_TYPE>(DAT_IB_SERVICE_TYPE_UD);

// An EVD argument of an EP: NULL, or an EVD with `flag` of `ia` -- or, for the connect EVD
// (any_ia), of any IA sharing ia's kernel file: DAT lets one EVD take the connection events of
// EPs on several IAs, and dapltest's limit tests with -w do that.  DTO EVDs stay the IA's own
// (their CQs are its device context's).
Evd *ep_evd(Ia &ia, DAT_EVD_HANDLE handle, DAT_EVD_FLAGS flag, DAT_RETURN subtype,
            bool any_ia = false) {
  if (handle == DAT_HANDLE_NULL) return nullptr;
  auto &evd = lookup_as<Evd>(handle, subtype);
  const bool ours = evd.ia == &ia || (any_ia && evd.ia->file == ia.file);
  if (!ours || (evd.flags & flag) == 0) fail(DAT_INVALID_HANDLE, subtype);
  return &evd;
}

void count_use(Ep &ep, int delta) {
  for (Evd *evd : {ep.recv_evd, ep.request_evd, ep.connect_evd})
    if (evd != nullptr) evd->users += delta;
  if (ep.pz != nullptr) ep.pz->users += delta;
}

void fill_attr_defaults(DAT_EP_ATTR &attr, const kdat::EpAttributes &k) {
  attr.service_type = DAT_SERVICE_TYPE_RC;
  attr.max_message_size = 1u << 31;
  attr.max_rdma_size = 1u << 31;
  attr.qos = DAT_QOS_BEST_EFFORT;
  attr.max_recv_dtos = static_cast<DAT_COUNT>(k.max_recv_dtos);
  attr.max_request_dtos = static_cast<DAT_COUNT>(k.max_request_dtos);
  attr.max_recv_iov = static_cast<DAT_COUNT>(k.max_recv_iov);
  attr.max_request_iov = static_cast<DAT_COUNT>(k.max_request_iov);
  attr.max_rdma_read_in = static_cast<DAT_COUNT>(k.max_rdma_read_in);
  attr.max_rdma_read_out = static_cast<DAT_COUNT>(k.max_rdma_read_out);
  attr.max_rdma_read_iov = static_cast<DAT_COUNT>(k.max_request_iov);
  attr.max_rdma_write_iov = static_cast<DAT_COUNT>(k.max_request_iov);
}

// dat_ep_create's attributes for ep_attr NULL: libdaplofa's defaults (16 DTOs and 4 segments
// each way, 4 RDMA reads in and out, 2 GB messages), bounded by the device and by kdat.ko.
// Consumers copy these into EPs of their own (dapltest does), so RDMA read must work with them.
DAT_EP_ATTR default_attr(Ia &ia) {
  constexpr DAT_COUNT kDtos = 16;
  constexpr DAT_COUNT kIov = 4;
  constexpr DAT_COUNT kRdmaReads = 4;
  const auto d = ia.data_path->device_limits();
  const auto bound = [](DAT_COUNT value, std::int64_t limit) {
    return limit > 0 ? static_cast<DAT_COUNT>(std::min<std::int64_t>(value, limit)) : value;
  };
  DAT_EP_ATTR a{};
  a.service_type = DAT_SERVICE_TYPE_RC;
  a.qos = DAT_QOS_BEST_EFFORT;
  a.max_message_size = d && d->max_msg_sz > 0 ? std::min(d->max_msg_sz, 1u << 31) : 1u << 31;
  a.max_rdma_size = a.max_message_size;
  a.max_recv_dtos = bound(kDtos, d ? d->max_qp_wr : 0);
  a.max_request_dtos = a.max_recv_dtos;
  a.max_recv_iov = bound(kIov, d ? d->max_sge : 0);
  a.max_request_iov = a.max_recv_iov;
  a.max_rdma_read_iov = bound(a.max_recv_iov, d ? d->max_sge_rd : 0);
  a.max_rdma_write_iov = a.max_recv_iov;
  a.max_rdma_read_in = bound(bound(kRdmaReads, d ? d->max_qp_rd_atom : 0),
                             static_cast<std::int64_t>(ia.attributes.max_rdma_read_in));
  a.max_rdma_read_out = bound(bound(kRdmaReads, d ? d->max_qp_init_rd_atom : 0),
                              static_cast<std::int64_t>(ia.attributes.max_rdma_read_out));
  a.recv_completion_flags = DAT_COMPLETION_EVD_THRESHOLD_FLAG;
  a.request_completion_flags = DAT_COMPLETION_EVD_THRESHOLD_FLAG;
  return a;
}

constexpr std::uint8_t kDaplRetryCount = 7;

// arg: the attributes' position in the DAT call (ep_create 6, ep_create_with_srq 7).
kdat::EpAttributes to_kdat(const DAT_EP_ATTR &attr, DAT_RETURN arg = DAT_INVALID_ARG6) {
  if ((attr.service_type != DAT_SERVICE_TYPE_RC && attr.service_type != kServiceTypeUd) ||
      attr.qos != DAT_QOS_BEST_EFFORT)
    fail(DAT_MODEL_NOT_SUPPORTED);
  for (const DAT_COUNT c : {attr.max_recv_dtos, attr.max_request_dtos, attr.max_recv_iov,
                            attr.max_request_iov, attr.max_rdma_read_in, attr.max_rdma_read_out})
    if (c < 0) fail(DAT_INVALID_PARAMETER, arg);
  kdat::EpAttributes k;
  k.max_recv_dtos = static_cast<std::uint32_t>(attr.max_recv_dtos);
  k.max_request_dtos = static_cast<std::uint32_t>(attr.max_request_dtos);
  k.max_recv_iov = static_cast<std::uint32_t>(attr.max_recv_iov);
  k.max_request_iov = static_cast<std::uint32_t>(attr.max_request_iov);
  k.max_rdma_read_in = static_cast<std::uint32_t>(attr.max_rdma_read_in);
  k.max_rdma_read_out = static_cast<std::uint32_t>(attr.max_rdma_read_out);
  // DAT has no retry count in its EP attributes: DAPL's (IB_RC_RETRY_COUNT 7), which rxe counts
  // as "for ever".  kdat.ko's own default (6) makes rxe give up after six ACK timeouts without
  // an ACK; on a loaded TCG guest rxe's ACK timer fires with no packet lost, and six in a row would
  // fail a write that libdaplofa's QPs carry.
  k.retry_count = kDaplRetryCount;
  return k;
}

template <typename E>
Ep &register_ep(Ia &ia, E endpoint) {
  auto &ep = make_child<Ep>(ia, std::move(endpoint));
  ep.kernel_handle = ep.kernel().handle();
  ia.file->eps[ep.kernel_handle] = &ep;
  ep.qp = ia.data_path->make_queue_pair(ep);
  return ep;
}

// dat_ep_create, and dat_ep_create_with_srq (srq_handle not null; its arguments from the SRQ
// on sit one place further).
DAT_RETURN create_ep(DAT_IA_HANDLE ia_handle, DAT_PZ_HANDLE pz_handle, DAT_EVD_HANDLE recv_handle,
                     DAT_EVD_HANDLE request_handle, DAT_EVD_HANDLE connect_handle,
                     DAT_SRQ_HANDLE srq_handle, const DAT_EP_ATTR *attr, DAT_EP_HANDLE *out) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &ia = lookup_as<Ia>(ia_handle, DAT_INVALID_HANDLE_IA);
    const bool with_srq = srq_handle != DAT_HANDLE_NULL;
    Pz *pz = nullptr;
    if (pz_handle != DAT_HANDLE_NULL) {
      pz = &lookup_as<Pz>(pz_handle, DAT_INVALID_HANDLE_PZ);
      if (pz->ia != &ia) fail(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
    }
    Evd *recv = ep_evd(ia, recv_handle, DAT_EVD_DTO_FLAG, DAT_INVALID_HANDLE_EVD_RECV);
    Evd *request = ep_evd(ia, request_handle, DAT_EVD_DTO_FLAG, DAT_INVALID_HANDLE_EVD_REQUEST);
    Evd *connect =
        ep_evd(ia, connect_handle, DAT_EVD_CONNECTION_FLAG, DAT_INVALID_HANDLE_EVD_CONN, true);
    // kdat binds an EP to its connect EVD at creation (no UNCONFIGURED states).
    if (connect == nullptr) fail(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CONN);
    Srq *srq = nullptr;
    if (with_srq) {
      srq = &lookup_as<Srq>(srq_handle, DAT_INVALID_HANDLE_SRQ);
      if (srq->ia != &ia) fail(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ);
      // The receives it consumes complete on the recv EVD: without one they would be lost.
      if (recv == nullptr) fail(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_RECV);
      // ia_query: srq_ep_pz_difference_supported is FALSE.
      if (pz != srq->pz) fail(DAT_MODEL_NOT_SUPPORTED);
    }
    if (out == nullptr) fail(DAT_INVALID_PARAMETER, with_srq ? DAT_INVALID_ARG8 : DAT_INVALID_ARG7);
    DAT_EP_ATTR given = attr != nullptr ? *attr : default_attr(ia);
    attr = &given;
    const bool ud = given.service_type == kServiceTypeUd;
    if (ud) {
      // A UD EP is a user UD QP (data_path.hpp): it needs the IA's device (a PZ with a PD), an
      // IB CM and kdat.ko's UD EPs.  No RDMA on datagrams; a datagram is one packet, so the
      // largest message is the port's MTU: a larger request is lowered to it, not refused
      // (dtestcm -u asks 2048 of rxe's 1024-byte MTU), and ep_query reports what was granted.
      if (!offers_ud(ia)) fail(DAT_MODEL_NOT_SUPPORTED);
      if (pz == nullptr) fail(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
      if (!pz->pd) fail(DAT_MODEL_NOT_SUPPORTED);
      const auto limits = ia.data_path->device_limits();
      const DAT_SEG_LENGTH mtu = limits && limits->active_mtu != 0 ? limits->active_mtu : 1024;
      if (given.max_message_size == 0 || given.max_message_size > mtu) given.max_message_size = mtu;
      given.max_rdma_size = 0;
      given.max_rdma_read_in = given.max_rdma_read_out = 0;
      given.max_rdma_read_iov = given.max_rdma_write_iov = 0;
    }
    const kdat::EpAttributes k = to_kdat(given, with_srq ? DAT_INVALID_ARG7 : DAT_INVALID_ARG6);
    // With a PZ the EP gets a user-owned QP (the data path); without one, a kernel-QP EP.
    std::optional<kdat::UserEndpoint> user;
    if (pz != nullptr && pz->pd)
      user = ia.data_path->make_user_endpoint(*connect, recv, request, k, attr, srq);
    auto &ep = user ? register_ep(ia, std::move(*user))
                    : register_ep(ia, kdat::Endpoint(ia.kernel, *connect->kernel, k));
    ep.ud = ud;
    if (srq != nullptr) {
      ep.srq = srq;
      srq->eps.push_back(&ep);
    }
    ep.pz = pz;
    ep.recv_evd = recv;
    ep.request_evd = request;
    ep.connect_evd = connect;
    count_use(ep, +1);
    ++ia.counters[DCNT_IA_EP_CREATE];
    ep.attr = given;
    if (ep.user) {  // what the QP was made with (data_path.cpp's defaults for 0)
      ep.attr.max_recv_dtos = static_cast<DAT_COUNT>(k.max_recv_dtos != 0 ? k.max_recv_dtos : 64);
      ep.attr.max_request_dtos =
          static_cast<DAT_COUNT>(k.max_request_dtos != 0 ? k.max_request_dtos : 64);
      ep.attr.max_recv_iov = static_cast<DAT_COUNT>(k.max_recv_iov != 0 ? k.max_recv_iov : 4);
      ep.attr.max_request_iov =
          static_cast<DAT_COUNT>(k.max_request_iov != 0 ? k.max_request_iov : 4);
    }
    *out = ep.handle;
    return DAT_SUCCESS;
  });
}

DAT_RETURN ep_create(DAT_IA_HANDLE ia_handle, DAT_PZ_HANDLE pz_handle, DAT_EVD_HANDLE recv_handle,
                     DAT_EVD_HANDLE request_handle, DAT_EVD_HANDLE connect_handle,
                     const DAT_EP_ATTR *attr, DAT_EP_HANDLE *out) {
  return create_ep(ia_handle, pz_handle, recv_handle, request_handle, connect_handle,
                   DAT_HANDLE_NULL, attr, out);
}

DAT_RETURN ep_create_with_srq(DAT_IA_HANDLE ia_handle, DAT_PZ_HANDLE pz_handle,
                              DAT_EVD_HANDLE recv_handle, DAT_EVD_HANDLE request_handle,
                              DAT_EVD_HANDLE connect_handle, DAT_SRQ_HANDLE srq_handle,
                              const DAT_EP_ATTR *attr, DAT_EP_HANDLE *out) {
  if (srq_handle == DAT_HANDLE_NULL) return error(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ);
  return create_ep(ia_handle, pz_handle, recv_handle, request_handle, connect_handle, srq_handle,
                   attr, out);
}

DAT_RETURN ep_query(DAT_EP_HANDLE handle, DAT_EP_PARAM_MASK mask, DAT_EP_PARAM *param) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &ep = lookup_as<Ep>(handle, DAT_INVALID_HANDLE_EP);
    if ((mask & ~DAT_EP_FIELD_ALL) != 0) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    if (param == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    const kdat::EpInfo info = ep.kernel().query();
    to_sockaddr(info.local_address, ep.local_address);
    to_sockaddr(info.remote_address, ep.remote_address);
    std::memset(static_cast<void *>(param), 0, sizeof(*param));
    param->ia_handle = ep.ia->handle;
    param->ep_state = static_cast<DAT_EP_STATE>(info.state);
    param->local_ia_address_ptr = reinterpret_cast<DAT_IA_ADDRESS_PTR>(&ep.local_address);
    param->local_port_qual = info.local_address.port();
    param->remote_ia_address_ptr = reinterpret_cast<DAT_IA_ADDRESS_PTR>(&ep.remote_address);
    param->remote_port_qual = info.remote_address.port();
    param->pz_handle = ep.pz != nullptr ? ep.pz->handle : DAT_HANDLE_NULL;
    param->recv_evd_handle = ep.recv_evd != nullptr ? ep.recv_evd->handle : DAT_HANDLE_NULL;
    param->request_evd_handle =
        ep.request_evd != nullptr ? ep.request_evd->handle : DAT_HANDLE_NULL;
    param->connect_evd_handle =
        ep.connect_evd != nullptr ? ep.connect_evd->handle : DAT_HANDLE_NULL;
    param->srq_handle = ep.srq != nullptr ? ep.srq->handle : DAT_HANDLE_NULL;
    param->ep_attr = ep.attr;
    param->ep_attr.max_rdma_read_in = static_cast<DAT_COUNT>(info.attributes.max_rdma_read_in);
    param->ep_attr.max_rdma_read_out = static_cast<DAT_COUNT>(info.attributes.max_rdma_read_out);
    return DAT_SUCCESS;
  });
}

DAT_RETURN ep_modify(DAT_EP_HANDLE handle, DAT_EP_PARAM_MASK mask, const DAT_EP_PARAM *param) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &ep = lookup_as<Ep>(handle, DAT_INVALID_HANDLE_EP);
    if (mask == 0 || (mask & ~DAT_EP_FIELD_ALL) != 0) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    if (param == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    constexpr DAT_EP_PARAM_MASK supported =
        DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IN | DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_OUT;
    if ((mask & ~supported) != 0) fail(DAT_NOT_IMPLEMENTED);
    kdat::EpAttributes k;
    std::uint32_t kmask = 0;
    if (mask & DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IN) {
      if (param->ep_attr.max_rdma_read_in < 0) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
      k.max_rdma_read_in = static_cast<std::uint32_t>(param->ep_attr.max_rdma_read_in);
      kmask |= KDAT_EP_ATTR_RDMA_READ_IN;
    }
    if (mask & DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_OUT) {
      if (param->ep_attr.max_rdma_read_out < 0) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
      k.max_rdma_read_out = static_cast<std::uint32_t>(param->ep_attr.max_rdma_read_out);
      kmask |= KDAT_EP_ATTR_RDMA_READ_OUT;
    }
    ep.kernel().modify(kmask, k);
    if (kmask & KDAT_EP_ATTR_RDMA_READ_IN)
      ep.attr.max_rdma_read_in = param->ep_attr.max_rdma_read_in;
    if (kmask & KDAT_EP_ATTR_RDMA_READ_OUT)
      ep.attr.max_rdma_read_out = param->ep_attr.max_rdma_read_out;
    return DAT_SUCCESS;
  });
}

DAT_RETURN ep_connect(DAT_EP_HANDLE handle, DAT_IA_ADDRESS_PTR remote, DAT_CONN_QUAL conn_qual,
                      DAT_TIMEOUT timeout, DAT_COUNT pd_size, const DAT_PVOID pd, DAT_QOS qos,
                      DAT_CONNECT_FLAGS flags) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &ep = lookup_as<Ep>(handle, DAT_INVALID_HANDLE_EP);
    if (remote == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    const kdat::Address address = to_address(reinterpret_cast<const sockaddr *>(remote));
    const auto data = private_data(pd_size, pd, DAT_INVALID_ARG6);
    ep.kernel().connect(address, service_port(conn_qual), to_timeout(timeout), data,
                        static_cast<std::uint32_t>(qos), static_cast<std::uint32_t>(flags));
    count_connect(ep);
    // A UD EP's exchange needs no step of libkdat's (no REP to answer): its outcome is simply
    // the next event on the connect EVD, and several may be pending on one EP.
    if (!ep.ud) watch_connect(ep);
    return DAT_SUCCESS;
  });
}

DAT_RETURN ep_dup_connect(DAT_EP_HANDLE handle, DAT_EP_HANDLE dup_handle, DAT_TIMEOUT timeout,
                          DAT_COUNT pd_size, const DAT_PVOID pd, DAT_QOS qos) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &ep = lookup_as<Ep>(handle, DAT_INVALID_HANDLE_EP);
    auto &dup = lookup_as<Ep>(dup_handle, DAT_INVALID_HANDLE_EP);
    if (dup.ia != ep.ia) fail(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
    const auto data = private_data(pd_size, pd, DAT_INVALID_ARG5);
    ep.kernel().dup_connect(dup.kernel(), to_timeout(timeout), data,
                            static_cast<std::uint32_t>(qos));
    count_connect(ep);
    watch_connect(ep);
    return DAT_SUCCESS;
  });
}

DAT_RETURN ep_disconnect(DAT_EP_HANDLE handle, DAT_CLOSE_FLAGS flags) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &ep = lookup_as<Ep>(handle, DAT_INVALID_HANDLE_EP);
    if (flags != DAT_CLOSE_ABRUPT_FLAG && flags != DAT_CLOSE_GRACEFUL_FLAG)
      fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    // A UD EP has no connection to drain: its disconnect is always abrupt.
    const auto mode = flags == DAT_CLOSE_GRACEFUL_FLAG && !ep.ud ? kdat::CloseMode::graceful
                                                                 : kdat::CloseMode::abrupt;
    // A connection no disconnect has begun on: the table's graceful disconnect would start
    // draining it.
    const auto graceful_step =
        kdat::lookup(ep.kernel().state(), kdat::Stimulus::DISCONNECT_GRACEFUL);
    const bool connected =
        graceful_step.action == kdat::StepAction::go && kdat::is_draining(graceful_step.next);
    if (ep.user) {
      // Graceful with requests in flight: the DREQ waits for them (data_path.cpp, kDrainLimit).
      if (mode != kdat::CloseMode::graceful || !connected || !ep.qp->disconnect_after_requests())
        ep.user->disconnect(mode);  // abrupt: the QP is in ERR, posted DTOs flush
    } else {
      ep.kernel().disconnect(mode);
    }
    ++ep.counters[DCNT_EP_DISCONNECT];
    // the kernel's CM sends a DREQ (not for a UD EP: it has no connection)
    if (connected && !ep.ud) ++ep.ia->counters[DCNT_IA_CM_DREQ_TX];
    return DAT_SUCCESS;
  });
}

DAT_RETURN ep_get_status(DAT_EP_HANDLE handle, DAT_EP_STATE *state, DAT_BOOLEAN *recv_idle,
                         DAT_BOOLEAN *request_idle) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &ep = lookup_as<Ep>(handle, DAT_INVALID_HANDLE_EP);
    // Each answer is optional, as in libdaplofa: dtestx asks for the idle flags only.
    if (state != nullptr)
      *state = static_cast<DAT_EP_STATE>(ep.kernel().state());  // the shared table: no syscall
    if (ep.recv_evd != nullptr) (void)ep.ia->data_path->poll_completions(*ep.recv_evd);
    if (ep.request_evd != nullptr) (void)ep.ia->data_path->poll_completions(*ep.request_evd);
    if (recv_idle != nullptr) *recv_idle = ep.qp->outstanding_recv() == 0 ? DAT_TRUE : DAT_FALSE;
    if (request_idle != nullptr)
      *request_idle = ep.qp->outstanding_request() == 0 ? DAT_TRUE : DAT_FALSE;
    return DAT_SUCCESS;
  });
}

DAT_RETURN ep_free(DAT_EP_HANDLE handle) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &ep = lookup_as<Ep>(handle, DAT_INVALID_HANDLE_EP);
    // The kernel ends a connection freed with its EP with DISCONNECTED (kdat_ep_free).
    const bool connected = kdat::has_connection(ep.kernel().state());
    ep.kernel().free();
    if (connected) remember_freed_connection(*ep.ia, ep.kernel_handle, ep.handle);
    ++ep.ia->counters[DCNT_IA_EP_FREE];
    free_ep(ep);
    return DAT_SUCCESS;
  });
}

DAT_RETURN ep_reset(DAT_EP_HANDLE handle) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &ep = lookup_as<Ep>(handle, DAT_INVALID_HANDLE_EP);
    if (ep.user) {
      ep.user->reset();  // and the QP RESET -> INIT: what was posted is gone
      ep.ia->data_path->forget_ep(ep);
      unwatch_connect(ep);
      unhold(ep);
    } else {
      ep.kernel().reset();
    }
    return DAT_SUCCESS;
  });
}

// ---- PSP / RSP

Evd &cr_evd(Ia &ia, DAT_EVD_HANDLE handle) {
  auto &evd = lookup_as<Evd>(handle, DAT_INVALID_HANDLE_EVD_CR);
  if (evd.ia != &ia || (evd.flags & DAT_EVD_CR_FLAG) == 0 || !evd.kernel)
    fail(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CR);
  return evd;
}

Psp &make_psp(Ia &ia, DAT_CONN_QUAL conn_qual, Evd &evd, DAT_PSP_FLAGS flags) {
  if (flags != DAT_PSP_CONSUMER_FLAG && flags != DAT_PSP_PROVIDER_FLAG)
    fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
  kdat::Psp kernel(
      ia.kernel, *evd.kernel, service_port(conn_qual),
      flags == DAT_PSP_PROVIDER_FLAG ? kdat::PspFlags::provider : kdat::PspFlags::consumer);
  auto &psp = make_child<Psp>(ia, std::move(kernel));
  psp.conn_qual = conn_qual;
  psp.evd = &evd;
  psp.flags = flags;
  ++evd.users;
  ia.service_points[psp.kernel.handle()] = &psp;
  ++ia.counters[DCNT_IA_CM_LISTEN];
  return psp;
}

DAT_RETURN psp_create(DAT_IA_HANDLE ia_handle, DAT_CONN_QUAL conn_qual, DAT_EVD_HANDLE evd_handle,
                      DAT_PSP_FLAGS flags, DAT_PSP_HANDLE *out) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &ia = lookup_as<Ia>(ia_handle, DAT_INVALID_HANDLE_IA);
    auto &evd = cr_evd(ia, evd_handle);
    if (out == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
    *out = make_psp(ia, conn_qual, evd, flags).handle;
    ++ia.counters[DCNT_IA_PSP_CREATE];
    return DAT_SUCCESS;
  });
}

// Picks a free qualifier from the dynamic port range.
DAT_RETURN psp_create_any(DAT_IA_HANDLE ia_handle, DAT_CONN_QUAL *conn_qual,
                          DAT_EVD_HANDLE evd_handle, DAT_PSP_FLAGS flags, DAT_PSP_HANDLE *out) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &ia = lookup_as<Ia>(ia_handle, DAT_INVALID_HANDLE_IA);
    if (conn_qual == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    auto &evd = cr_evd(ia, evd_handle);
    if (out == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
    for (DAT_CONN_QUAL q = 49152; q <= 65535; ++q) {
      try {
        *out = make_psp(ia, q, evd, flags).handle;
        *conn_qual = q;
        ++ia.counters[DCNT_IA_PSP_CREATE_ANY];
        return DAT_SUCCESS;
      } catch (const kdat::Error &e) {
        if (e.code().type() != KDAT_DAT_CONN_QUAL_IN_USE) throw;
      }
    }
    return error(DAT_CONN_QUAL_UNAVAILABLE);
  });
}

DAT_RETURN psp_query(DAT_PSP_HANDLE handle, DAT_PSP_PARAM_MASK mask, DAT_PSP_PARAM *param) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &psp = lookup_as<Psp>(handle, DAT_INVALID_HANDLE_PSP);
    if ((mask & ~DAT_PSP_FIELD_ALL) != 0) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    if (param == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    param->ia_handle = psp.ia->handle;
    param->conn_qual = psp.conn_qual;
    param->evd_handle = psp.evd->handle;
    param->psp_flags = psp.flags;
    return DAT_SUCCESS;
  });
}

DAT_RETURN psp_free(DAT_PSP_HANDLE handle) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &psp = lookup_as<Psp>(handle, DAT_INVALID_HANDLE_PSP);
    const std::uint32_t k = psp.kernel.handle();
    psp.kernel.free();
    psp.ia->service_points.erase(k);
    --psp.evd->users;
    ++psp.ia->counters[DCNT_IA_PSP_FREE];
    drop_child(psp);
    return DAT_SUCCESS;
  });
}

DAT_RETURN rsp_create(DAT_IA_HANDLE ia_handle, DAT_CONN_QUAL conn_qual, DAT_EP_HANDLE ep_handle,
                      DAT_EVD_HANDLE evd_handle, DAT_RSP_HANDLE *out) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &ia = lookup_as<Ia>(ia_handle, DAT_INVALID_HANDLE_IA);
    auto &ep = lookup_as<Ep>(ep_handle, DAT_INVALID_HANDLE_EP);
    if (ep.ia != &ia) fail(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
    auto &evd = cr_evd(ia, evd_handle);
    if (out == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
    auto &rsp = make_child<Rsp>(
        ia, kdat::Rsp(ia.kernel, ep.kernel(), service_port(conn_qual), *evd.kernel));
    rsp.conn_qual = conn_qual;
    rsp.evd = &evd;
    rsp.ep = ep.handle;
    ++evd.users;
    ia.service_points[rsp.kernel.handle()] = &rsp;
    ++ia.counters[DCNT_IA_RSP_CREATE];
    ++ia.counters[DCNT_IA_CM_LISTEN];
    *out = rsp.handle;
    return DAT_SUCCESS;
  });
}

DAT_RETURN rsp_query(DAT_RSP_HANDLE handle, DAT_RSP_PARAM_MASK mask, DAT_RSP_PARAM *param) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &rsp = lookup_as<Rsp>(handle, DAT_INVALID_HANDLE_RSP);
    if ((mask & ~DAT_RSP_FIELD_ALL) != 0) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    if (param == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    param->ia_handle = rsp.ia->handle;
    param->conn_qual = rsp.conn_qual;
    param->evd_handle = rsp.evd->handle;
    param->ep_handle = rsp.ep;
    return DAT_SUCCESS;
  });
}

DAT_RETURN rsp_free(DAT_RSP_HANDLE handle) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &rsp = lookup_as<Rsp>(handle, DAT_INVALID_HANDLE_RSP);
    const std::uint32_t k = rsp.kernel.handle();
    rsp.kernel.free();
    rsp.ia->service_points.erase(k);
    --rsp.evd->users;
    ++rsp.ia->counters[DCNT_IA_RSP_FREE];
    drop_child(rsp);
    return DAT_SUCCESS;
  });
}

// ---- CR

DAT_RETURN cr_query(DAT_CR_HANDLE handle, DAT_CR_PARAM_MASK mask, DAT_CR_PARAM *param) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &cr = lookup_as<Cr>(handle, DAT_INVALID_HANDLE_CR);
    if ((mask & ~DAT_CR_FIELD_ALL) != 0) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    if (param == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    if (!cr.info) {
      cr.info = cr.kernel.query();
      to_sockaddr(cr.info->remote_address, cr.remote_address);
    }
    param->remote_ia_address_ptr = reinterpret_cast<DAT_IA_ADDRESS_PTR>(&cr.remote_address);
    param->remote_port_qual = cr.info->remote_address.port();
    param->private_data_size = static_cast<DAT_COUNT>(cr.info->private_data.size());
    param->private_data = cr.info->private_data.empty() ? nullptr : cr.info->private_data.data();
    param->local_ep_handle = cr.ep;
    return DAT_SUCCESS;
  });
}

DAT_RETURN cr_accept(DAT_CR_HANDLE handle, DAT_EP_HANDLE ep_handle, DAT_COUNT pd_size,
                     const DAT_PVOID pd) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &cr = lookup_as<Cr>(handle, DAT_INVALID_HANDLE_CR);
    const auto data = private_data(pd_size, pd, DAT_INVALID_ARG4);
    if (ep_handle == DAT_HANDLE_NULL) {
      // Only a request that names its EP (RSP, provider PSP) may be accepted without one.
      if (cr.ep == nullptr) fail(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
      // An RSP's EP may have a user QP: it must reach RTR/RTS before the kernel accepts, as
      // when the consumer names it (else both ends are ESTABLISHED and no DTO ever completes).
      const auto named = share(cr.ep);
      Ep *ep = named && named->type == DAT_HANDLE_TYPE_EP ? &static_cast<Ep &>(*named) : nullptr;
      if (ep != nullptr && ep->user)
        ep->user->accept(cr.kernel, data);
      else
        cr.kernel.accept(data);
      if (ep != nullptr) ep->active = false;
    } else {
      auto &ep = lookup_as<Ep>(ep_handle, DAT_INVALID_HANDLE_EP);
      if (ep.ia != cr.ia) fail(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
      if (ep.user)
        ep.user->accept(cr.kernel, data);  // the QP to RTR/RTS, then the kernel accepts
      else
        cr.kernel.accept(ep.kernel(), data);
      ep.active = false;
    }
    ++cr.ia->counters[DCNT_IA_SP_CR_ACCEPTED];
    ++cr.ia->counters[DCNT_IA_CM_REP_TX];
    drop_child(cr);
    return DAT_SUCCESS;
  });
}

DAT_RETURN cr_reject(DAT_CR_HANDLE handle, DAT_COUNT pd_size, const DAT_PVOID pd) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &cr = lookup_as<Cr>(handle, DAT_INVALID_HANDLE_CR);
    const auto data = private_data(pd_size, pd, DAT_INVALID_ARG3);
    cr.kernel.reject(data);
    ++cr.ia->counters[DCNT_IA_SP_CR_REJECTED];
    ++cr.ia->counters[DCNT_IA_CM_USER_REJ_TX];
    // Rejecting a provider-flag PSP's request frees the EP kdat made for it.
    if (cr.provider_ep) {
      if (auto object = share(cr.ep); object && object->type == DAT_HANDLE_TYPE_EP)
        free_ep(static_cast<Ep &>(*object));
    }
    drop_child(cr);
    return DAT_SUCCESS;
  });
}

}  // namespace

Ep &adopt_ep(Ia &ia, std::uint32_t handle) {
  auto &ep = register_ep(ia, kdat::Endpoint::adopt(ia.kernel, handle));
  const kdat::EpInfo info = ep.kernel().query();
  for (auto [k, slot] :
       {std::pair{info.connect_evd, &ep.connect_evd}, std::pair{info.request_evd, &ep.request_evd},
        std::pair{info.recv_evd, &ep.recv_evd}}) {
    const auto it = ia.evds.find(k);
    if (k != 0 && it != ia.evds.end()) *slot = it->second;
  }
  count_use(ep, +1);
  fill_attr_defaults(ep.attr, info.attributes);
  return ep;
}

// An event whose EVD is freed first never takes its entry, so the map is bounded: once full it
// is emptied, and the DISCONNECTED events still to come for those EPs name DAT_HANDLE_NULL.
constexpr std::size_t kFreedConnectionsKept = 4096;

void remember_freed_connection(Ia &ia, std::uint32_t kernel_handle, DAT_EP_HANDLE handle) {
  if (ia.file->freed_connected_eps.size() >= kFreedConnectionsKept)
    ia.file->freed_connected_eps.clear();
  ia.file->freed_connected_eps[kernel_handle] = handle;
}

// Forgets `ep` on the provider's side; the caller has freed (or lost) the kernel EP.  The
// kdat::Endpoint's destructor frees the kernel EP if it still exists (errors ignored).
void free_ep(Ep &ep) {
  ep.ia->data_path->forget_ep(ep);
  if (ep.srq != nullptr) std::erase(ep.srq->eps, &ep);
  ep.srq = nullptr;
  unwatch_connect(ep);
  unhold(ep);
  count_use(ep, -1);
  ep.pz = nullptr;
  ep.recv_evd = ep.request_evd = ep.connect_evd = nullptr;
  // By the handle kept at registration: the kernel EP may be freed already (handle() is 0).
  if (const auto it = ep.ia->file->eps.find(ep.kernel_handle);
      it != ep.ia->file->eps.end() && it->second == &ep)
    ep.ia->file->eps.erase(it);
  drop_child(ep);
}

void fill_connection_table(DAT_PROVIDER &p) {
  p.ep_create_func = &ep_create;
  p.ep_create_with_srq_func = &ep_create_with_srq;
  p.ep_query_func = &ep_query;
  p.ep_modify_func = &ep_modify;
  p.ep_connect_func = &ep_connect;
  p.ep_dup_connect_func = &ep_dup_connect;
  p.ep_disconnect_func = &ep_disconnect;
  p.ep_get_status_func = &ep_get_status;
  p.ep_free_func = &ep_free;
  p.ep_reset_func = &ep_reset;
  p.psp_create_func = &psp_create;
  p.psp_create_any_func = &psp_create_any;
  p.psp_query_func = &psp_query;
  p.psp_free_func = &psp_free;
  p.rsp_create_func = &rsp_create;
  p.rsp_query_func = &rsp_query;
  p.rsp_free_func = &rsp_free;
  p.cr_query_func = &cr_query;
  p.cr_accept_func = &cr_accept;
  p.cr_reject_func = &cr_reject;
  KDAT_NOT_IMPLEMENTED(p, cr_handoff_func);
}

}  // namespace kdat::dapl
