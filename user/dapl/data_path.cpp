// The kernel-bypass data path (see data_path.hpp).  One kdat::Verbs per IA: every PZ shares its
// protection domain (DAT's PZ isolation is not enforced between PZs of one IA: README).  An LMR
// is a verbs MR (lkey = LMR context, rkey = RMR context).  Each DTO EVD owns one CQ with a
// completion channel; an EP's request EVD's CQ is its QP's send CQ, its recv EVD's CQ the receive
// CQ.  Every work request is signalled; its wr_id names a record of the cookie, the length and
// the EVD, so a completion becomes a DAT_DTO_COMPLETION_EVENT (DAT_COMPLETION_SUPPRESS_FLAG
// drops successful ones, errors are always reported).
#include "data_path.hpp"

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <unordered_map>

namespace kdat::dapl {
namespace {

constexpr std::uint32_t kDefaultDtos = 64;
constexpr std::uint32_t kDefaultIov = 4;
constexpr auto kSettleLimit = std::chrono::seconds(1);

struct MrFreer {
  void operator()(ibv_mr *mr) const { (void)ibv_dereg_mr(mr); }
};

// Every PZ of the IA uses the Verbs' PD.
class SharedPd final : public ProtectionDomain {};

class VerbsMr final : public MemoryRegion {
 public:
  explicit VerbsMr(ibv_mr *mr) : mr_(mr) {}

 private:
  std::unique_ptr<ibv_mr, MrFreer> mr_;
};

int access_flags(DAT_MEM_PRIV_FLAGS privileges) {
  int access = 0;
  if (privileges & DAT_MEM_PRIV_LOCAL_WRITE_FLAG) access |= IBV_ACCESS_LOCAL_WRITE;
  if (privileges & DAT_MEM_PRIV_REMOTE_READ_FLAG) access |= IBV_ACCESS_REMOTE_READ;
  // verbs requires local write along with remote write
  if (privileges & DAT_MEM_PRIV_REMOTE_WRITE_FLAG)
    access |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  return access;
}

DAT_DTO_COMPLETION_STATUS to_dat(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS: return DAT_DTO_SUCCESS;
    case IBV_WC_WR_FLUSH_ERR: return DAT_DTO_ERR_FLUSHED;
    case IBV_WC_LOC_LEN_ERR: return DAT_DTO_ERR_LOCAL_LENGTH;
    case IBV_WC_LOC_QP_OP_ERR:
    case IBV_WC_LOC_EEC_OP_ERR: return DAT_DTO_ERR_LOCAL_EP;
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_MW_BIND_ERR: return DAT_DTO_ERR_LOCAL_PROTECTION;
    case IBV_WC_BAD_RESP_ERR: return DAT_DTO_ERR_BAD_RESPONSE;
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_REM_INV_REQ_ERR: return DAT_DTO_ERR_REMOTE_ACCESS;
    case IBV_WC_REM_OP_ERR: return DAT_DTO_ERR_REMOTE_RESPONDER;
    case IBV_WC_RNR_RETRY_EXC_ERR: return DAT_DTO_ERR_RECEIVER_NOT_READY;
    default: return DAT_DTO_ERR_TRANSPORT;
  }
}

void wake(const Evd &evd) {
  const std::uint64_t one = 1;
  (void)!::write(evd.wake.get(), &one, sizeof(one));
  if (evd.cno != nullptr) (void)!::write(evd.cno->wake.get(), &one, sizeof(one));
}

// An EVD's CQ and its completion channel.
struct Cq {
  Cq() = default;
  Cq(const Cq &) = delete;
  Cq &operator=(const Cq &) = delete;
  ~Cq() {
    if (cq != nullptr) (void)ibv_destroy_cq(cq);
    if (channel != nullptr) (void)ibv_destroy_comp_channel(channel);
  }
  ibv_comp_channel *channel = nullptr;
  ibv_cq *cq = nullptr;
};

// A posted work request, until its completion is taken.
struct Pending {
  Ep *ep = nullptr;
  Evd *evd = nullptr;
  DAT_DTO_COOKIE cookie{};
  DAT_VLEN length = 0;
  DAT_DTOS operation = DAT_DTO_SEND;
  bool suppress = false;
  bool recv = false;
};

class VerbsDataPath;

// A QP whose posts answer DAT_NOT_IMPLEMENTED: an EP without a user-owned QP.
class KernelQueuePair final : public QueuePair {
 public:
  DAT_RETURN post_send(DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE,
                       DAT_COMPLETION_FLAGS) override {
    return error(DAT_NOT_IMPLEMENTED);
  }
  DAT_RETURN post_recv(DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE,
                       DAT_COMPLETION_FLAGS) override {
    return error(DAT_NOT_IMPLEMENTED);
  }
  DAT_RETURN post_rdma_read(DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE, const DAT_RMR_TRIPLET *,
                            DAT_COMPLETION_FLAGS) override {
    return error(DAT_NOT_IMPLEMENTED);
  }
  DAT_RETURN post_rdma_write(DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE, const DAT_RMR_TRIPLET *,
                             DAT_COMPLETION_FLAGS) override {
    return error(DAT_NOT_IMPLEMENTED);
  }
};

class UserQueuePair final : public QueuePair {
 public:
  UserQueuePair(Ep &ep, VerbsDataPath &path) : ep_(ep), path_(path) {}

  DAT_RETURN post_send(DAT_COUNT n, DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
                       DAT_COMPLETION_FLAGS flags) override {
    return post(DAT_DTO_SEND, n, iov, cookie, nullptr, flags);
  }
  DAT_RETURN post_recv(DAT_COUNT n, DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
                       DAT_COMPLETION_FLAGS flags) override {
    return post(DAT_DTO_RECEIVE, n, iov, cookie, nullptr, flags);
  }
  DAT_RETURN post_rdma_read(DAT_COUNT n, DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
                            const DAT_RMR_TRIPLET *remote, DAT_COMPLETION_FLAGS flags) override {
    return post(DAT_DTO_RDMA_READ, n, iov, cookie, remote, flags);
  }
  DAT_RETURN post_rdma_write(DAT_COUNT n, DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
                             const DAT_RMR_TRIPLET *remote, DAT_COMPLETION_FLAGS flags) override {
    return post(DAT_DTO_RDMA_WRITE, n, iov, cookie, remote, flags);
  }
  [[nodiscard]] std::size_t outstanding_recv() const override { return recv_; }
  [[nodiscard]] std::size_t outstanding_request() const override { return request_; }

  void completed(bool recv) {
    std::size_t &n = recv ? recv_ : request_;
    if (n > 0) --n;
  }
  void clear() { recv_ = request_ = 0; }

 private:
  DAT_RETURN post(DAT_DTOS op, DAT_COUNT n, DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
                  const DAT_RMR_TRIPLET *remote, DAT_COMPLETION_FLAGS flags);

  Ep &ep_;
  VerbsDataPath &path_;
  std::size_t recv_ = 0;
  std::size_t request_ = 0;
};

class VerbsDataPath final : public DataPath {
 public:
  explicit VerbsDataPath(Ia &ia) : ia_(ia) {}
  ~VerbsDataPath() override {
    // The IA frees its EPs (QPs) before its EVDs and this; CQs go before the device.
    cqs_.clear();
  }
  [[nodiscard]] const char *name() const override { return "user-qp"; }

  [[nodiscard]] std::unique_ptr<ProtectionDomain> make_protection_domain() override {
    if (!open()) return nullptr;
    return std::make_unique<SharedPd>();
  }

  [[nodiscard]] std::optional<DeviceLimits> device_limits() override {
    if (limits_ || !open()) return limits_;
    ibv_device_attr d{};
    if (ibv_query_device(verbs_->context(), &d) != 0) return std::nullopt;
    // rdma_cm (hence kdat.ko) binds the IA's address to one port; RoCE and rxe devices have
    // port 1 only.  Without it the message size stays DAT's 2 GB.
    ibv_port_attr port{};
    const bool port_known = ibv_query_port(verbs_->context(), 1, &port) == 0;
    const std::uint32_t msg = port_known ? port.max_msg_sz : 1u << 31;
    DeviceLimits l;
    // enum ibv_mtu: IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5
    if (port_known && port.active_mtu >= IBV_MTU_256 && port.active_mtu <= IBV_MTU_4096)
      l.active_mtu = 128u << port.active_mtu;
    l.max_mr_size = d.max_mr_size;
    l.max_qp = d.max_qp;
    l.max_qp_wr = d.max_qp_wr;
    l.max_sge = d.max_sge;
    l.max_sge_rd = d.max_sge_rd;
    l.max_cq = d.max_cq;
    l.max_cqe = d.max_cqe;
    l.max_mr = d.max_mr;
    l.max_mw = d.max_mw;
    l.max_pd = d.max_pd;
    l.max_qp_rd_atom = d.max_qp_rd_atom;
    l.max_qp_init_rd_atom = d.max_qp_init_rd_atom;
    l.max_msg_sz = msg;
    limits_ = l;
    return limits_;
  }

  [[nodiscard]] std::optional<kdat::UserEndpoint> make_user_endpoint(
      Evd &connect, Evd *recv, Evd *request, const kdat::EpAttributes &k,
      const DAT_EP_ATTR *attr) override {
    if (!verbs_) return std::nullopt;
    kdat::UserQpAttributes q;
    q.ep = k;
    q.max_recv_wr = k.max_recv_dtos != 0 ? k.max_recv_dtos : kDefaultDtos;
    q.max_send_wr = k.max_request_dtos != 0 ? k.max_request_dtos : kDefaultDtos;
    q.max_recv_sge = std::max<std::uint32_t>(k.max_recv_iov != 0 ? k.max_recv_iov : kDefaultIov, 1);
    q.max_send_sge =
        std::max<std::uint32_t>(k.max_request_iov != 0 ? k.max_request_iov : kDefaultIov, 1);
    (void)attr;
    if (recv != nullptr) q.recv_cq = cq_for(*recv).cq;
    if (request != nullptr) q.send_cq = cq_for(*request).cq;
    return kdat::UserEndpoint(ia_.kernel, *verbs_, *connect.kernel, q);
  }

  [[nodiscard]] std::unique_ptr<QueuePair> make_queue_pair(Ep &ep) override {
    if (ep.user) return std::make_unique<UserQueuePair>(ep, *this);
    return std::make_unique<KernelQueuePair>();
  }

  [[nodiscard]] std::unique_ptr<MemoryRegion> register_memory(Pz &pz, void *address,
                                                              DAT_VLEN length,
                                                              DAT_MEM_PRIV_FLAGS privileges,
                                                              MemoryKeys &keys) override {
    if (!pz.pd || !verbs_) fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_PROTECTION_DOMAIN);
    ibv_mr *mr = ibv_reg_mr(verbs_->pd(), address, length, access_flags(privileges));
    if (mr == nullptr) fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY_REGION);
    auto region = std::make_unique<VerbsMr>(mr);
    keys.lmr_context = mr->lkey;
    keys.rmr_context = mr->rkey;
    keys.registered_length = mr->length;
    keys.registered_address = reinterpret_cast<DAT_VADDR>(mr->addr);
    return region;
  }

  std::size_t poll_completions(Evd &evd) override {
    const auto it = cqs_.find(&evd);
    if (it == cqs_.end()) return 0;
    Cq &cq = *it->second;
    // Consume the channel's notifications (non-blocking fd): evd_wait re-arms before sleeping.
    ibv_cq *got = nullptr;
    void *context = nullptr;
    while (ibv_get_cq_event(cq.channel, &got, &context) == 0) ibv_ack_cq_events(got, 1);
    std::size_t added = 0;
    ibv_wc wc[16];
    for (;;) {
      const int n = ibv_poll_cq(cq.cq, 16, wc);
      if (n <= 0) break;
      for (int i = 0; i < n; ++i) added += take(evd, wc[i]);
    }
    if (added > 0) wake(evd);
    return added;
  }

  int arm(Evd &evd) override {
    const auto it = cqs_.find(&evd);
    if (it == cqs_.end()) return -1;
    (void)ibv_req_notify_cq(it->second->cq, 0);
    (void)poll_completions(evd);  // what arrived before the arming
    return it->second->channel->fd;
  }

  void settle(Ep &ep, Evd &evd) override {
    if (!ep.user || cqs_.find(&evd) == cqs_.end()) return;
    const auto deadline = std::chrono::steady_clock::now() + kSettleLimit;
    for (;;) {
      (void)poll_completions(evd);
      const bool left = std::any_of(pending_.begin(), pending_.end(), [&](const auto &p) {
        return p.second.ep == &ep && p.second.evd == &evd;
      });
      if (!left || std::chrono::steady_clock::now() >= deadline) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  void forget_ep(Ep &ep) override {
    std::erase_if(pending_, [&](const auto &p) { return p.second.ep == &ep; });
    if (ep.user && ep.qp) static_cast<UserQueuePair &>(*ep.qp).clear();
  }

  void forget_evd(Evd &evd) override {
    std::erase_if(pending_, [&](const auto &p) { return p.second.evd == &evd; });
    cqs_.erase(&evd);
  }

  // Records a posted request; returns its wr_id.
  std::uint64_t remember(const Pending &p) {
    const std::uint64_t id = ++next_id_;
    pending_.emplace(id, p);
    return id;
  }
  void drop(std::uint64_t id) { pending_.erase(id); }

 private:
  Cq &cq_for(Evd &evd) {
    auto &slot = cqs_[&evd];
    if (slot) return *slot;
    auto cq = std::make_unique<Cq>();
    cq->channel = ibv_create_comp_channel(verbs_->context());
    if (cq->channel == nullptr) fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEVD);
    const int flags = ::fcntl(cq->channel->fd, F_GETFL);
    (void)::fcntl(cq->channel->fd, F_SETFL, flags | O_NONBLOCK);
    ibv_device_attr attr{};
    int max_cqe = 4096;
    if (ibv_query_device(verbs_->context(), &attr) == 0) max_cqe = attr.max_cqe;
    const int size = std::min(std::max(static_cast<int>(evd.qlen), 4096), max_cqe);
    cq->cq = ibv_create_cq(verbs_->context(), size, nullptr, cq->channel, 0);
    if (cq->cq == nullptr) {
      cqs_.erase(&evd);
      fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEVD);
    }
    slot = std::move(cq);
    return *slot;
  }

  // One completion of `evd`'s CQ: 1 if it became an event.
  std::size_t take(Evd &evd, const ibv_wc &wc) {
    const auto it = pending_.find(wc.wr_id);
    if (it == pending_.end()) return 0;  // of an EP freed or reset meanwhile
    const Pending p = it->second;
    pending_.erase(it);
    if (p.ep->qp) static_cast<UserQueuePair &>(*p.ep->qp).completed(p.recv);
    if (p.suppress && wc.status == IBV_WC_SUCCESS) return 0;
    DAT_EVENT event{};
    event.event_number = DAT_DTO_COMPLETION_EVENT;
    event.evd_handle = evd.handle;
    auto &data = event.event_data.dto_completion_event_data;
    data.ep_handle = p.ep->handle;
    data.user_cookie = p.cookie;
    data.status = to_dat(wc.status);
    data.operation = p.operation;
    data.transfered_length = p.recv ? (wc.status == IBV_WC_SUCCESS ? wc.byte_len : 0) : p.length;
    evd.local.push_back(event);
    return 1;
  }

  // Opens the IA's device once; false if this process cannot (PZs without PD, kernel-QP EPs:
  // see data_path.hpp).
  bool open() {
    if (!verbs_ && !tried_) {
      tried_ = true;
      try {
        verbs_.emplace(ia_.kernel);
      } catch (const kdat::Error &) {
      }
    }
    return verbs_.has_value();
  }

  Ia &ia_;
  bool tried_ = false;
  std::optional<kdat::Verbs> verbs_;
  std::optional<DeviceLimits> limits_;
  std::unordered_map<Evd *, std::unique_ptr<Cq>> cqs_;
  std::unordered_map<std::uint64_t, Pending> pending_;
  std::uint64_t next_id_ = 0;
};

DAT_RETURN UserQueuePair::post(DAT_DTOS op, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
                               DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
                               DAT_COMPLETION_FLAGS flags) {
  const bool recv = op == DAT_DTO_RECEIVE;
  const kdat::EpState state = ep_.kernel().state();
  if (recv) {
    // Receives may be posted before the connection (DAT), not once it has ended.
    if (state == kdat::EpState::DISCONNECTED)
      fail(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_DISCONNECTED);
    if (state == kdat::EpState::DISCONNECT_PENDING)
      fail(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_DISCPENDING);
  } else if (state != kdat::EpState::CONNECTED) {
    fail(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY);
  }
  Evd *evd = recv ? ep_.recv_evd : ep_.request_evd;
  if (evd == nullptr)
    fail(DAT_INVALID_STATE,
         recv ? DAT_INVALID_STATE_EP_EVD_RECV : DAT_INVALID_STATE_EP_EVD_REQUEST);
  const DAT_COUNT max_iov = recv ? ep_.attr.max_recv_iov : ep_.attr.max_request_iov;
  if (n < 0 || n > max_iov) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  if (n > 0 && iov == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  const bool rdma = op == DAT_DTO_RDMA_READ || op == DAT_DTO_RDMA_WRITE;
  if (rdma && remote == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
  constexpr DAT_COMPLETION_FLAGS known = static_cast<DAT_COMPLETION_FLAGS>(
      DAT_COMPLETION_SUPPRESS_FLAG | DAT_COMPLETION_SOLICITED_WAIT_FLAG |
      DAT_COMPLETION_UNSIGNALLED_FLAG | DAT_COMPLETION_BARRIER_FENCE_FLAG |
      DAT_COMPLETION_EVD_THRESHOLD_FLAG);
  if ((flags & ~known) != 0)
    fail(DAT_INVALID_PARAMETER, rdma ? DAT_INVALID_ARG6 : DAT_INVALID_ARG5);
  // An EP with no outstanding RDMA read allowed (max_rdma_read_out 0: the QP's max_rd_atomic)
  // would accept the read and never complete it.  dat_ep_post_rdma_read's return values name
  // DAT_INVALID_STATE for the EP's connection state only and DAT_LENGTH_ERROR for buffer sizes;
  // this is a resource limit ("failed due to resource limitations"), as for max_request_dtos:
  // DAT_INSUFFICIENT_RESOURCES, subtype the RDMA read credits.
  if (op == DAT_DTO_RDMA_READ && ep_.attr.max_rdma_read_out <= 0)
    fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_CREDITS);
  // Reap finished requests (suppressed ones included) before counting what is outstanding.
  (void)path_.poll_completions(*evd);
  const std::size_t max_dtos =
      static_cast<std::size_t>(recv ? ep_.attr.max_recv_dtos : ep_.attr.max_request_dtos);
  if ((recv ? recv_ : request_) >= max_dtos) fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);

  std::vector<ibv_sge> sge(static_cast<std::size_t>(n));
  DAT_VLEN length = 0;
  for (DAT_COUNT i = 0; i < n; ++i) {
    if (iov[i].segment_length > UINT32_MAX) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    sge[i].addr = iov[i].virtual_address;
    sge[i].length = static_cast<std::uint32_t>(iov[i].segment_length);
    sge[i].lkey = iov[i].lmr_context;
    length += iov[i].segment_length;
  }
  Pending p;
  p.ep = &ep_;
  p.evd = evd;
  p.cookie = cookie;
  p.length = length;
  p.operation = op;
  p.suppress = (flags & DAT_COMPLETION_SUPPRESS_FLAG) != 0;
  p.recv = recv;
  const std::uint64_t id = path_.remember(p);
  int rc = 0;
  if (recv) {
    ibv_recv_wr wr{};
    ibv_recv_wr *bad = nullptr;
    wr.wr_id = id;
    wr.sg_list = sge.data();
    wr.num_sge = n;
    rc = ibv_post_recv(ep_.user->qp(), &wr, &bad);
  } else {
    ibv_send_wr wr{};
    ibv_send_wr *bad = nullptr;
    wr.wr_id = id;
    wr.sg_list = sge.data();
    wr.num_sge = n;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (flags & DAT_COMPLETION_SOLICITED_WAIT_FLAG) wr.send_flags |= IBV_SEND_SOLICITED;
    if (flags & DAT_COMPLETION_BARRIER_FENCE_FLAG) wr.send_flags |= IBV_SEND_FENCE;
    wr.opcode = op == DAT_DTO_SEND         ? IBV_WR_SEND
                : op == DAT_DTO_RDMA_WRITE ? IBV_WR_RDMA_WRITE
                                           : IBV_WR_RDMA_READ;
    if (rdma) {
      wr.wr.rdma.remote_addr = remote->virtual_address;
      wr.wr.rdma.rkey = remote->rmr_context;
    }
    rc = ibv_post_send(ep_.user->qp(), &wr, &bad);
  }
  if (rc != 0) {
    path_.drop(id);
    if (rc == ENOMEM) fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
    if (rc == EINVAL) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    fail(DAT_INTERNAL_ERROR);
  }
  ++(recv ? recv_ : request_);
  return DAT_SUCCESS;
}

}  // namespace

std::unique_ptr<DataPath> make_data_path(Ia &ia) { return std::make_unique<VerbsDataPath>(ia); }

}  // namespace kdat::dapl
