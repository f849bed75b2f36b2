#include <kdat/connection_request.hpp>
#include <kdat/evd.hpp>
#include <kdat/user_qp.hpp>
#include <optional>
#include <utility>

#include "detail.hpp"

namespace kdat {

// The ABI's QP states and masks are libibverbs' own (and the kernel's: the uverbs ABI).
static_assert(KDAT_QPS_RESET == IBV_QPS_RESET && KDAT_QPS_INIT == IBV_QPS_INIT &&
              KDAT_QPS_RTR == IBV_QPS_RTR && KDAT_QPS_RTS == IBV_QPS_RTS &&
              KDAT_QPS_ERR == IBV_QPS_ERR);

namespace {

[[noreturn]] void throw_verbs(int err, const std::string &what) {
  throw Error({KDAT_DAT_CLASS_ERROR | KDAT_DAT_INSUFFICIENT_RESOURCES},
              what + ": " + std::strerror(err), err);
}

ibv_qp_attr to_ibv(const kdat_uqp_attr &k) {
  ibv_qp_attr a{};
  a.qp_state = static_cast<ibv_qp_state>(k.qp_state);
  a.qp_access_flags = static_cast<int>(k.qp_access_flags);
  a.path_mtu = static_cast<ibv_mtu>(k.path_mtu);
  a.rq_psn = k.rq_psn;
  a.sq_psn = k.sq_psn;
  a.dest_qp_num = k.dest_qp_num;
  a.pkey_index = k.pkey_index;
  a.port_num = k.port_num;
  a.max_rd_atomic = k.max_rd_atomic;
  a.max_dest_rd_atomic = k.max_dest_rd_atomic;
  a.min_rnr_timer = k.min_rnr_timer;
  a.timeout = k.timeout;
  a.retry_cnt = k.retry_cnt;
  a.rnr_retry = k.rnr_retry;
  a.qkey = k.qkey;
  a.ah_attr = to_ibv_ah_attr(k.ah_attr);
  return a;
}

// Moves `qp` to `state` by itself (no attributes the kernel must hand out: RESET, ERR).
void modify_state(ibv_qp *qp, ibv_qp_state state, const char *what) {
  ibv_qp_attr attr{};
  attr.qp_state = state;
  const int rc = ibv_modify_qp(qp, &attr, IBV_QP_STATE);
  if (rc != 0) throw_verbs(rc, what);
}

void establish_raw(int fd, std::uint32_t ep, std::uint32_t flags) {
  kdat_uqp_establish arg{};
  arg.ep = ep;
  arg.flags = flags;
  detail::ioctl_checked(fd, KDAT_IOC_UQP_ESTABLISH, arg, "uqp_establish");
}

}  // namespace

ibv_ah_attr to_ibv_ah_attr(const kdat_uqp_ah &ah) {
  ibv_ah_attr a{};
  a.dlid = ah.dlid;
  a.sl = ah.sl;
  a.src_path_bits = ah.src_path_bits;
  a.static_rate = ah.static_rate;
  a.is_global = ah.is_global;
  a.port_num = ah.port_num;
  std::memcpy(a.grh.dgid.raw, ah.dgid, sizeof(ah.dgid));
  a.grh.flow_label = ah.flow_label;
  a.grh.sgid_index = ah.sgid_index;
  a.grh.hop_limit = ah.hop_limit;
  a.grh.traffic_class = ah.traffic_class;
  return a;
}

// ---- Verbs ----------------------------------------------------------------------------------

struct [[gnu::visibility("hidden")]] Verbs::Impl {
  std::string name;
  ibv_context *context = nullptr;
  ibv_pd *pd = nullptr;
  ~Impl() {
    if (pd != nullptr) ibv_dealloc_pd(pd);
    if (context != nullptr) ibv_close_device(context);
  }
};

Verbs::Verbs(const Ia &ia) : impl_(std::make_unique<Impl>()) {
  impl_->name = ia.query().device_name;
  int n = 0;
  ibv_device **list = ibv_get_device_list(&n);
  if (list == nullptr) throw_verbs(errno, "ibv_get_device_list");
  for (int i = 0; i < n && impl_->context == nullptr; i++) {
    if (impl_->name == ibv_get_device_name(list[i])) impl_->context = ibv_open_device(list[i]);
  }
  const int err = errno;
  ibv_free_device_list(list);
  if (impl_->context == nullptr) {
    throw Error({KDAT_DAT_CLASS_ERROR | KDAT_DAT_PROVIDER_NOT_FOUND},
                "verbs: cannot open " + impl_->name + ": " + std::strerror(err), err);
  }
  impl_->pd = ibv_alloc_pd(impl_->context);
  if (impl_->pd == nullptr) throw_verbs(errno, "ibv_alloc_pd");
}

Verbs::~Verbs() = default;
ibv_context *Verbs::context() const { return impl_->context; }
ibv_pd *Verbs::pd() const { return impl_->pd; }
const std::string &Verbs::device_name() const { return impl_->name; }

// ---- MemoryRegion ---------------------------------------------------------------------------

MemoryRegion::MemoryRegion(const Verbs &verbs, void *address, std::size_t length, int access)
    : mr_(ibv_reg_mr(verbs.pd(), address, length, access)) {
  if (mr_ == nullptr) throw_verbs(errno, "ibv_reg_mr");
}

MemoryRegion::MemoryRegion(MemoryRegion &&other) noexcept
    : mr_(std::exchange(other.mr_, nullptr)) {}

MemoryRegion &MemoryRegion::operator=(MemoryRegion &&other) noexcept {
  if (this != &other) {
    if (mr_ != nullptr) ibv_dereg_mr(mr_);
    mr_ = std::exchange(other.mr_, nullptr);
  }
  return *this;
}

MemoryRegion::~MemoryRegion() {
  if (mr_ != nullptr) ibv_dereg_mr(mr_);
}

std::uint64_t MemoryRegion::address() const { return reinterpret_cast<std::uintptr_t>(mr_->addr); }

// ---- UserEndpoint ---------------------------------------------------------------------------

struct [[gnu::visibility("hidden")]] UserEndpoint::Impl final : detail::UserQpHook {
  std::shared_ptr<detail::DeviceState> state;
  ibv_cq *send_cq = nullptr;
  ibv_cq *recv_cq = nullptr;
  ibv_qp *qp = nullptr;
  bool own_send_cq = false, own_recv_cq = false;
  std::uint32_t max_inline_data = 0;  // what ibv_create_qp granted
  ibv_qp_init_attr init_attr{};       // as granted: a reset's new QP (fresh_qp_on_reset)
  // iWARP: siw cannot take a QP out of ERR, so a reset gives the EP a new QP (as librdmacm
  // makes one per connection) instead of RESET -> INIT.
  bool fresh_qp_on_reset = false;
  // A UD QP: INIT, RTR and RTS at once (bring_up), never moved by the CM; ERR applied here.
  bool ud = false;
  std::uint32_t qkey = 0;  // a UD QP's, from the kernel's INIT (IBV_QP_QKEY)
  std::optional<Endpoint> ep;
  std::uint32_t handle = 0;
  // QP state changes: the thread taking events and the caller's disconnect/reset/accept.
  std::recursive_mutex qp_mutex;
  ibv_qp_state known = IBV_QPS_RESET;  // the last state libkdat applied
  int extra_access = 0;                // IBV_ACCESS_* the application adds to the kernel's

  Impl() = default;
  Impl(const Impl &) = delete;
  Impl &operator=(const Impl &) = delete;
  ~Impl() {
    if (state && handle != 0) {
      std::lock_guard lock(state->uqp_mutex);
      state->uqps.erase(handle);
    }
    ep.reset();  // the kernel EP first: the peer is disconnected, the CM forgets the QP number
    if (qp != nullptr) ibv_destroy_qp(qp);
    if (own_send_cq) ibv_destroy_cq(send_cq);
    if (own_recv_cq) ibv_destroy_cq(recv_cq);
  }

  // Moves the QP to `qp_state` with the kernel's attributes (cr: the request being accepted).
  void apply(std::uint32_t qp_state, std::uint32_t cr = 0) {
    std::lock_guard lock(qp_mutex);
    if (ud && qp_state == KDAT_QPS_ERR) {
      // A UD QP has no connection whose end the kernel would describe: ERR takes no attributes.
      modify_state(qp, IBV_QPS_ERR, "ibv_modify_qp to ERR");
      known = IBV_QPS_ERR;
      return;
    }
    kdat_uqp_attr arg{};
    arg.ep = handle;
    arg.cr = cr;
    arg.qp_state = qp_state;
    detail::ioctl_checked(state->file.get(), KDAT_IOC_UQP_ATTR, arg, "uqp_attr");
    // Nothing to apply: on iWARP the CM moves the QP to RTS itself (it takes it by number).
    if (arg.attr_mask == 0) return;
    ibv_qp_attr attr = to_ibv(arg);
    if (arg.attr_mask & IBV_QP_ACCESS_FLAGS) attr.qp_access_flags |= extra_access;
    if (arg.attr_mask & IBV_QP_QKEY) qkey = arg.qkey;
    const int rc = ibv_modify_qp(qp, &attr, static_cast<int>(arg.attr_mask));
    if (rc != 0) {
      throw Error({KDAT_DAT_CLASS_ERROR | KDAT_DAT_INTERNAL_ERROR},
                  "ibv_modify_qp to " + std::to_string(qp_state) + ": " + std::strerror(rc), rc);
    }
    known = static_cast<ibv_qp_state>(qp_state);
  }

  // A fresh QP (RESET) made ready: INIT, so receives may be posted before any connection; a UD
  // QP goes on to RTR and RTS (it sends to whichever peer a send names).
  void bring_up() {
    std::lock_guard lock(qp_mutex);
    apply(KDAT_QPS_INIT);
    if (ud) {
      apply(KDAT_QPS_RTR);
      apply(KDAT_QPS_RTS);
    }
  }

  // A new QP for the next connection, the same as the first; the kernel takes its number in
  // ep_reset, then the old QP goes.  If the kernel refuses, the EP keeps its QP.
  void reset_with_new_qp() {
    std::lock_guard lock(qp_mutex);
    ibv_qp_init_attr init = init_attr;
    ibv_qp *fresh = ibv_create_qp(qp->pd, &init);
    if (fresh == nullptr) throw_verbs(errno, "ibv_create_qp (ep_reset)");
    kdat_ep_reset arg{};
    arg.ep = handle;
    arg.qp_num = fresh->qp_num;
    try {
      detail::ioctl_checked(state->file.get(), KDAT_IOC_EP_RESET, arg, "ep_reset");
    } catch (...) {
      ibv_destroy_qp(fresh);
      throw;
    }
    ibv_destroy_qp(std::exchange(qp, fresh));
    known = IBV_QPS_RESET;
    bring_up();
  }

  // RESET -> INIT (UD: -> RTS): a fresh QP for a new connection.
  void reinit() {
    std::lock_guard lock(qp_mutex);
    modify_state(qp, IBV_QPS_RESET, "ibv_modify_qp to RESET");
    known = IBV_QPS_RESET;
    bring_up();
  }

  void sync() {
    std::lock_guard lock(qp_mutex);
    if (known != IBV_QPS_ERR && known != IBV_QPS_RESET && has_ended(ep->state()))
      apply(KDAT_QPS_ERR);
  }

  void on_connect_response() noexcept override {
    std::lock_guard lock(qp_mutex);
    try {
      apply(KDAT_QPS_RTR);
      apply(KDAT_QPS_RTS);
    } catch (const Error &) {
      // The REP cannot be taken: the kernel rejects it and ends the connect (NON_PEER_REJECTED).
      try {
        establish_raw(state->file.get(), handle, KDAT_UQP_ESTABLISH_FAILED);
      } catch (const Error &) {
      }
      return;
    }
    try {
      establish_raw(state->file.get(), handle, 0);
    } catch (const Error &) {
      // DAT_INVALID_STATE: the connect timed out or was aborted meanwhile; its event follows.
    }
  }

  void on_connection_event() noexcept override {
    try {
      sync();
    } catch (const Error &) {
      // The QP could not be moved (the device is gone): nothing left to flush into.
    }
  }
};

UserEndpoint::UserEndpoint(const Ia &ia, const Verbs &verbs, const Evd &connect_evd,
                           const UserQpAttributes &attributes)
    : impl_(std::make_unique<Impl>()) {
  Impl &m = *impl_;
  m.state = ia.device();
  m.ud = attributes.ud;
  m.extra_access = attributes.remote_atomic && !attributes.ud ? IBV_ACCESS_REMOTE_ATOMIC : 0;
  m.send_cq = attributes.send_cq;
  if (m.send_cq == nullptr) {
    m.send_cq = ibv_create_cq(verbs.context(), static_cast<int>(attributes.max_send_wr), nullptr,
                              nullptr, 0);
    if (m.send_cq == nullptr) throw_verbs(errno, "ibv_create_cq (send)");
    m.own_send_cq = true;
  }
  m.recv_cq = attributes.recv_cq;
  if (m.recv_cq == nullptr) {
    m.recv_cq = ibv_create_cq(verbs.context(), static_cast<int>(attributes.max_recv_wr), nullptr,
                              nullptr, 0);
    if (m.recv_cq == nullptr) throw_verbs(errno, "ibv_create_cq (recv)");
    m.own_recv_cq = true;
  }
  ibv_qp_init_attr init{};
  init.send_cq = m.send_cq;
  init.recv_cq = m.recv_cq;
  init.cap.max_send_wr = attributes.max_send_wr;
  init.cap.max_recv_wr = attributes.max_recv_wr;
  init.cap.max_send_sge = attributes.max_send_sge;
  init.cap.max_recv_sge = attributes.max_recv_sge;
  init.cap.max_inline_data = attributes.max_inline_data;
  init.qp_type = attributes.ud ? IBV_QPT_UD : IBV_QPT_RC;
  if (attributes.srq != nullptr) {
    init.srq = attributes.srq;
    init.cap.max_recv_wr = 0;
    init.cap.max_recv_sge = 0;
  }
  m.qp = ibv_create_qp(verbs.pd(), &init);
  if (m.qp == nullptr && attributes.max_inline_data > 0 && attributes.inline_optional) {
    init.cap.max_inline_data = 0;  // the device offers less: no inline sends
    m.qp = ibv_create_qp(verbs.pd(), &init);
  }
  if (m.qp == nullptr) throw_verbs(errno, "ibv_create_qp");
  m.max_inline_data = init.cap.max_inline_data;  // ibv_create_qp wrote the granted caps
  m.init_attr = init;
  m.fresh_qp_on_reset = m.qp->context->device->transport_type == IBV_TRANSPORT_IWARP;

  kdat_uqp_create arg{};
  arg.ia = ia.handle();
  arg.connect_evd = connect_evd.handle();
  arg.attr = attributes.ep.to_raw();
  arg.qp_num = m.qp->qp_num;
  arg.flags = attributes.ud ? KDAT_UQP_UD : 0;
  detail::ioctl_checked(m.state->file.get(), KDAT_IOC_UQP_CREATE, arg, "uqp_create");
  m.handle = arg.ep;
  m.ep.emplace(Endpoint::adopt(ia, arg.ep));
  {
    std::lock_guard lock(m.state->uqp_mutex);
    m.state->uqps[m.handle] = &m;
  }
  m.bring_up();
}

UserEndpoint::UserEndpoint(UserEndpoint &&other) noexcept = default;
UserEndpoint &UserEndpoint::operator=(UserEndpoint &&other) noexcept = default;
UserEndpoint::~UserEndpoint() = default;

std::uint32_t UserEndpoint::handle() const { return impl_ ? impl_->handle : 0; }

Endpoint &UserEndpoint::endpoint() {
  if (!impl_) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_EP, "user endpoint");
  return *impl_->ep;
}

const Endpoint &UserEndpoint::endpoint() const {
  if (!impl_) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_EP, "user endpoint");
  return *impl_->ep;
}

ibv_qp *UserEndpoint::qp() const { return impl_ ? impl_->qp : nullptr; }
ibv_cq *UserEndpoint::send_cq() const { return impl_ ? impl_->send_cq : nullptr; }
ibv_cq *UserEndpoint::recv_cq() const { return impl_ ? impl_->recv_cq : nullptr; }
std::uint32_t UserEndpoint::qp_num() const { return impl_ ? impl_->qp->qp_num : 0; }
std::uint32_t UserEndpoint::max_inline_data() const { return impl_ ? impl_->max_inline_data : 0; }
bool UserEndpoint::ud() const { return impl_ && impl_->ud; }

std::uint32_t UserEndpoint::qkey() const {
  if (!impl_) return 0;
  std::lock_guard lock(impl_->qp_mutex);  // reset() sets it again
  return impl_->qkey;
}

ibv_qp_state UserEndpoint::qp_state() const {
  if (!impl_) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_EP, "ibv_query_qp");
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  const int rc = ibv_query_qp(impl_->qp, &attr, IBV_QP_STATE, &init);
  if (rc != 0) throw_verbs(rc, "ibv_query_qp");
  return attr.qp_state;
}

void UserEndpoint::connect(const Address &remote, std::uint64_t conn_qual, Timeout timeout,
                           PrivateDataView private_data) {
  endpoint().connect(remote, conn_qual, timeout, private_data);
}

void UserEndpoint::accept(ConnectionRequest &cr, PrivateDataView private_data) {
  Endpoint &ep = endpoint();
  std::lock_guard lock(impl_->qp_mutex);
  if (impl_->ud) {
    cr.accept(ep, private_data);  // the QP is in RTS since its creation: nothing to move
    return;
  }
  const std::uint32_t crh = cr.handle();
  const ibv_qp_state before = impl_->known;
  try {
    impl_->apply(KDAT_QPS_RTR, crh);
    impl_->apply(KDAT_QPS_RTS, crh);
    cr.accept(ep, private_data);
  } catch (...) {
    // The EP did not change.  If the QP did, make it ready for another try (RESET -> INIT).
    if (impl_->known != before) {
      try {
        impl_->reinit();
      } catch (const Error &) {
      }
    }
    throw;
  }
}

void UserEndpoint::disconnect(CloseMode mode) {
  endpoint().disconnect(mode);
  impl_->sync();
}

void UserEndpoint::disconnect_after_requests() {
  if (!impl_) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_EP, "ep_disconnect");
  kdat_ep_disconnect arg{};
  arg.ep = impl_->handle;
  arg.flags = KDAT_CLOSE_GRACEFUL | KDAT_CLOSE_HOLD_DREQ;
  detail::ioctl_checked(impl_->state->file.get(), KDAT_IOC_EP_DISCONNECT, arg, "ep_disconnect");
  impl_->sync();
}

void UserEndpoint::requests_done() {
  if (!impl_) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_EP, "ep_disconnect");
  kdat_ep_disconnect arg{};
  arg.ep = impl_->handle;
  arg.flags = KDAT_CLOSE_REQUESTS_DONE;
  detail::ioctl_checked(impl_->state->file.get(), KDAT_IOC_EP_DISCONNECT, arg, "ep_disconnect");
}

void UserEndpoint::reset() {
  if (impl_ && impl_->fresh_qp_on_reset) {
    impl_->reset_with_new_qp();
    return;
  }
  endpoint().reset();
  impl_->reinit();
}

void UserEndpoint::sync() {
  if (!impl_) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_EP, "user endpoint sync");
  impl_->sync();
}

bool detail::user_qp_filter(DeviceState &state, const Event &event) noexcept {
  const bool internal = event.number == KDAT_EVENT_UQP_CONNECT_RESPONSE;
  if (!internal && !event.is_connection_event()) return false;
  std::lock_guard lock(state.uqp_mutex);
  const auto it = state.uqps.find(event.ep);
  if (it == state.uqps.end()) {
    // A REP for a user QP nobody here drives (its UserEndpoint is gone): refuse it.
    if (internal) {
      try {
        establish_raw(state.file.get(), event.ep, KDAT_UQP_ESTABLISH_FAILED);
      } catch (const Error &) {
      }
    }
    return internal;
  }
  if (internal)
    it->second->on_connect_response();
  else
    it->second->on_connection_event();
  return internal;
}

}  // namespace kdat
