// The kernel-bypass data path (see data_path.hpp).  One kdat::Verbs per IA: every PZ shares its
// protection domain (DAT's PZ isolation is not enforced between PZs of one IA: README).  An LMR
// is a verbs MR (lkey = LMR context, rkey = RMR context).  Each DTO EVD owns one CQ with a
// completion channel; an EP's request EVD's CQ is its QP's send CQ, its recv EVD's CQ the receive
// CQ.  Every work request is signalled; its wr_id names a record of the cookie, the length and
// the EVD (a slot of a table reused through a free list, so a post allocates nothing), so a
// completion becomes a DAT_DTO_COMPLETION_EVENT (DAT_COMPLETION_SUPPRESS_FLAG drops successful
// ones, errors are always reported).  Sends and RDMA writes of at most the QP's max_inline_data
// bytes go IBV_SEND_INLINE, as libdaplofa posts them.
//
// Polling a CQ is ibv_poll_cq alone: no system call.  The completion channel is read only by a
// waiter the channel's fd woke (DataPath::notified), and a CQ is armed before every sleep on it
// (DataPath::arm: arm, then poll again, so nothing that arrived before the arming is slept on).
// Completions moved to an EVD's local queue wake nobody through the EVD's eventfd: whoever
// sleeps on that EVD (evd_wait, cno_wait) armed its CQ first, so the completion's channel event
// wakes it.  The IB extensions' requests (RDMA write with immediate data, atomics, UD sends) and
// receives that carry immediate data or arrive on a UD QP complete as DAT_IB_DTO_EVENTs with a
// DAT_IB_EXTENSION_EVENT_DATA in the event's extension data.
//
// A UD EP (DAT_IB_SERVICE_TYPE_UD) has a UD QP, in RTS from its creation (libkdat): it sends
// datagrams only (dat_ib_post_send_ud, to an address handle a UD connection event gave), and its
// receives' lengths count the 40-byte GRH the device writes in front of the payload, as DAPL's
// consumers (dtestx) expect.  The address handles its events made are its QP's (UserQueuePair::
// make_address_handle), destroyed by dat_ib_ud_ah_free or with the QP.
#include "data_path.hpp"

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <unordered_map>
#include <vector>

namespace kdat::dapl {

// A DTO EVD's CQ and its completion channel (Evd::cq points here while cqs_ owns it).
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

namespace {

constexpr std::uint32_t kDefaultDtos = 64;
constexpr std::uint32_t kDefaultIov = 4;
// The inline data a user QP asks for (libdaplofa's default too); a device that offers less gets
// a QP without (UserQpAttributes::inline_optional).
constexpr std::uint32_t kInlineData = 256;
// Scatter/gather lists up to this long are built on the stack.
constexpr DAT_COUNT kStackSges = 8;
// rdma_connect(3): "Connections established over iWARP RDMA devices currently require that the
// active side of the connection send the first message" (MPA, RFC 5044: a responder's FPDU must not
// precede the initiator's first one; siw fails the initiator's connect if it arrives with the MPA
// reply).  A passive EP on iWARP therefore holds its requests until its first receive completes,
// and posts them anyway after kFirstSendHold: a protocol whose passive side speaks first breaks
// MPA's rule, and a hold must never become a hang.
constexpr auto kFirstSendHold = std::chrono::seconds(1);

// dat_ep_disconnect(3DAT): in a graceful disconnect the requests in flight "must try to be
// completed successfully first, before disconnect proceeds"; then the DREQ goes.  The kernel cannot
// see a user QP's send queue, so it holds the DREQ (KDAT_CLOSE_HOLD_DREQ) until this reports them
// done: every poll of the IA's CQs looks at the draining QPs, and evd_wait sleeps in short slices
// while one drains (holding()), as for held first sends.  A request that never completes (a send
// that a live peer never posts a receive for is retried for ever: DAPL's RNR retry count of 7 means
// no limit) holds the DREQ until kDrainLimit passes without a request completing; the requests
// still in flight then flush when it ends.  The limit counts from the last completion, not the
// disconnect: a drain that makes progress, however slowly (megabytes through rxe on a loaded
// machine), is not stuck.
constexpr auto kDrainLimit = std::chrono::seconds(10);

struct MrFreer {
  void operator()(ibv_mr *mr) const { (void)ibv_dereg_mr(mr); }
};

// Every PZ of the IA uses the Verbs' PD.
class SharedPd final : public ProtectionDomain {};

class VerbsMr final : public MemoryRegion {
 public:
  explicit VerbsMr(ibv_mr *mr) : mr_(mr) {}
  [[nodiscard]] ibv_mr *mr() const { return mr_.get(); }

 private:
  std::unique_ptr<ibv_mr, MrFreer> mr_;
};

struct MwFreer {
  void operator()(ibv_mw *mw) const { (void)ibv_dealloc_mw(mw); }
};

// An RMR's window.  ibv_mw's rkey is the key the window answers to: verbs updates it at a type 1
// bind; a type 2 window's new key is the consumer's choice at each bind, and verbs leaves the
// struct alone, so it is set here (the device's next bind of the window names it by that key).
class VerbsMw final : public MemoryWindow {
 public:
  explicit VerbsMw(ibv_mw *mw) : mw_(mw) {}
  [[nodiscard]] ibv_mw *mw() const { return mw_.get(); }
  [[nodiscard]] bool type2() const { return mw_->type == IBV_MW_TYPE_2; }
  // The key a peer reaches the window by now.
  [[nodiscard]] std::uint32_t rkey() const { return mw_->rkey; }
  // Type 2: whether a binding is valid (a new one must invalidate it first).
  [[nodiscard]] bool bound() const { return bound_; }
  // Type 2: a bind under `rkey` was posted (or, with nullopt, an invalidate).
  void posted(std::optional<std::uint32_t> rkey) {
    if (rkey) mw_->rkey = *rkey;
    bound_ = rkey.has_value();
  }

 private:
  std::unique_ptr<ibv_mw, MwFreer> mw_;
  bool bound_ = false;
};

// A window grants remote rights only; verbs' local ones are the MR's.
int window_access(DAT_MEM_PRIV_FLAGS privileges) {
  int access = 0;
  if (privileges & DAT_MEM_PRIV_REMOTE_READ_FLAG) access |= IBV_ACCESS_REMOTE_READ;
  if (privileges & DAT_MEM_PRIV_REMOTE_WRITE_FLAG) access |= IBV_ACCESS_REMOTE_WRITE;
  if (privileges & kPrivRemoteAtomic) access |= IBV_ACCESS_REMOTE_ATOMIC;
  return access;
}

int access_flags(DAT_MEM_PRIV_FLAGS privileges) {
  int access = 0;
  if (privileges & DAT_MEM_PRIV_LOCAL_WRITE_FLAG) access |= IBV_ACCESS_LOCAL_WRITE;
  if (privileges & DAT_MEM_PRIV_REMOTE_READ_FLAG) access |= IBV_ACCESS_REMOTE_READ;
  // verbs requires local write along with remote write and remote atomics
  if (privileges & DAT_MEM_PRIV_REMOTE_WRITE_FLAG)
    access |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  if (privileges & kPrivRemoteAtomic) access |= IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE;
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

// A receive that invalidated one of our windows (the peer's send with invalidate).  rxe (Debian
// 12's rdma-core 44 on its 6.1 kernel) hands the kernel's IB_WC_WITH_INVALIDATE (1 << 2) to
// userspace unconverted, where that bit is IBV_WC_IP_CSUM_OK, which an RC receive never has.
constexpr unsigned kWithInvalidate = IBV_WC_WITH_INV | IBV_WC_IP_CSUM_OK;

// What a DAT post asks for.
enum class Op {
  send,
  send_with_invalidate,  // a send that invalidates the peer's window (its RMR context)
  send_ud,               // dat_ib_post_send_ud: a datagram of a UD QP to an address handle
  recv,
  rdma_read,
  rdma_write,
  rdma_write_immed,
  compare_and_swap,
  fetch_and_add,
  bind,       // dat_rmr_bind: a window's bind (or, for a type 1 window, its unbind)
  invalidate  // dat_rmr_bind of a type 2 window: ends its binding (an unbind or before a rebind)
  // (invalidate stays last: kOpTraits below has one entry per Op up to it)
};

constexpr bool is_bind(Op op) { return op == Op::bind || op == Op::invalidate; }

constexpr bool is_atomic(Op op) { return op == Op::compare_and_swap || op == Op::fetch_and_add; }

// The operation a completion reports: DAT's DTOs, the IB extension's DTOs for its requests.
constexpr DAT_DTOS reported(Op op) {
  switch (op) {
    case Op::send:
    case Op::send_with_invalidate: return DAT_DTO_SEND;
    case Op::send_ud: return static_cast<DAT_DTOS>(DAT_IB_DTO_SEND_UD);
    case Op::recv: return DAT_DTO_RECEIVE;
    case Op::rdma_read: return DAT_DTO_RDMA_READ;
    case Op::rdma_write: return DAT_DTO_RDMA_WRITE;
    case Op::rdma_write_immed: return static_cast<DAT_DTOS>(DAT_IB_DTO_RDMA_WRITE_IMMED);
    case Op::compare_and_swap: return static_cast<DAT_DTOS>(DAT_IB_DTO_CMP_SWAP);
    case Op::fetch_and_add: return static_cast<DAT_DTOS>(DAT_IB_DTO_FETCH_ADD);
    case Op::bind:
    case Op::invalidate: break;  // a DAT_RMR_BIND_COMPLETION_EVENT names no DTO
  }
  return DAT_DTO_SEND;
}

// The extension event type of an IB extension request's completion.
constexpr std::optional<DAT_IB_EXT_TYPE> extension_of(Op op) {
  switch (op) {
    case Op::rdma_write_immed: return DAT_IB_RDMA_WRITE_IMMED;
    case Op::compare_and_swap: return DAT_IB_CMP_AND_SWAP;
    case Op::fetch_and_add: return DAT_IB_FETCH_AND_ADD;
    case Op::send_ud: return DAT_IB_UD_SEND;
    default: return std::nullopt;
  }
}

// What a completion needs to know of its request's operation, one load away: every completion
// asks, and the functions above compile to a chain of compares.  Built from them.
struct OpTraits {
  DAT_DTOS reported = DAT_DTO_SEND;
  DAT_IB_EXT_TYPE extension{};
  bool extended = false;
  bool bind = false;
};
constexpr std::size_t kOpCount = static_cast<std::size_t>(Op::invalidate) + 1;
constexpr std::array<OpTraits, kOpCount> kOpTraits = [] {
  std::array<OpTraits, kOpCount> traits{};
  for (std::size_t i = 0; i < kOpCount; ++i) {
    const auto op = static_cast<Op>(i);
    const auto extension = extension_of(op);
    traits[i] = {reported(op), extension.value_or(DAT_IB_EXT_TYPE{}), extension.has_value(),
                 is_bind(op)};
  }
  return traits;
}();

constexpr ibv_wr_opcode opcode_of(Op op) {
  switch (op) {
    case Op::rdma_read: return IBV_WR_RDMA_READ;
    case Op::rdma_write: return IBV_WR_RDMA_WRITE;
    case Op::rdma_write_immed: return IBV_WR_RDMA_WRITE_WITH_IMM;
    case Op::send_with_invalidate: return IBV_WR_SEND_WITH_INV;
    case Op::compare_and_swap: return IBV_WR_ATOMIC_CMP_AND_SWP;
    case Op::fetch_and_add: return IBV_WR_ATOMIC_FETCH_AND_ADD;
    default: return IBV_WR_SEND;
  }
}

// The state table's answer to "may this be posted now?" for every state, asked once when the
// library is loaded: ep_table.h's query is a switch over all the rules, and every post asks.
struct PostPermissions {
  std::array<bool, KDAT_EP_STATE_LIMIT> send{};
  std::array<bool, KDAT_EP_STATE_LIMIT> recv{};
  PostPermissions() {
    for (unsigned state = 0; state < KDAT_EP_STATE_LIMIT; ++state) {
      send[state] = kdat_ep_state_allows(state, KDAT_EP_STIM_POST_SEND) != 0;
      recv[state] = kdat_ep_state_allows(state, KDAT_EP_STIM_POST_RECV) != 0;
    }
  }
};
const PostPermissions kPostPermissions;

// One post as the consumer made it (its operation is post()'s template argument), with the
// positions of its arguments in the DAT call that made it (for the DAT_INVALID_ARGn subtypes).
struct Request {
  DAT_COUNT segments = 0;
  DAT_LMR_TRIPLET *iov = nullptr;
  DAT_DTO_COOKIE cookie{};
  const DAT_RMR_TRIPLET *remote = nullptr;
  DAT_COMPLETION_FLAGS flags{};
  std::uint32_t immed = 0;
  std::uint64_t compare_add = 0;
  std::uint64_t swap = 0;
  const DAT_IB_ADDR_HANDLE *ah = nullptr;  // a UD send's peer
  DAT_RETURN arg_segments = DAT_INVALID_ARG2;
  DAT_RETURN arg_iov = DAT_INVALID_ARG3;
  DAT_RETURN arg_remote = DAT_INVALID_ARG5;
  DAT_RETURN arg_flags = DAT_INVALID_ARG5;
};

// A DAT scatter/gather list as verbs SGEs: on the stack up to kStackSges segments (a post
// allocates nothing), on the heap beyond.  A segment longer than 32 bits is
// Failure(DAT_INVALID_PARAMETER, arg_iov).
class SgeList {
 public:
  SgeList(DAT_COUNT n, const DAT_LMR_TRIPLET *iov, DAT_RETURN arg_iov) {
    if (n > kStackSges) heap_.resize(static_cast<std::size_t>(n));
    sge_ = n > kStackSges ? heap_.data() : stack_.data();
    for (DAT_COUNT i = 0; i < n; ++i) {
      const DAT_LMR_TRIPLET &segment = iov[i];
      if (segment.segment_length > UINT32_MAX) fail(DAT_INVALID_PARAMETER, arg_iov);
      sge_[i].addr = segment.virtual_address;
      sge_[i].length = static_cast<std::uint32_t>(segment.segment_length);
      sge_[i].lkey = segment.lmr_context;
      length_ += segment.segment_length;
    }
  }
  SgeList(const SgeList &) = delete;
  SgeList &operator=(const SgeList &) = delete;
  [[nodiscard]] ibv_sge *data() const { return sge_; }
  [[nodiscard]] DAT_VLEN length() const { return length_; }

 private:
  std::array<ibv_sge, kStackSges> stack_;
  std::vector<ibv_sge> heap_;
  ibv_sge *sge_ = nullptr;
  DAT_VLEN length_ = 0;
};

// The EP counters of a successful post.
void count_post(Ep &ep, Op op, DAT_VLEN length) {
  auto &c = ep.counters;
  const auto add = [&](DAT_EP_COUNTERS posts, DAT_EP_COUNTERS bytes) {
    ++c[posts];
    c[bytes] += length;
  };
  switch (op) {
    case Op::send:
    case Op::send_with_invalidate: add(DCNT_EP_POST_SEND, DCNT_EP_POST_SEND_DATA); break;
    case Op::send_ud: add(DCNT_EP_POST_SEND_UD, DCNT_EP_POST_SEND_UD_DATA); break;
    case Op::recv: add(DCNT_EP_POST_RECV, DCNT_EP_POST_RECV_DATA); break;
    case Op::rdma_read: add(DCNT_EP_POST_READ, DCNT_EP_POST_READ_DATA); break;
    case Op::rdma_write: add(DCNT_EP_POST_WRITE, DCNT_EP_POST_WRITE_DATA); break;
    case Op::rdma_write_immed: add(DCNT_EP_POST_WRITE_IMM, DCNT_EP_POST_WRITE_IMM_DATA); break;
    case Op::compare_and_swap: ++c[DCNT_EP_POST_CMP_SWAP]; break;
    case Op::fetch_and_add: ++c[DCNT_EP_POST_FETCH_ADD]; break;
    case Op::bind:
    case Op::invalidate: break;  // no counter of DAT's or the extensions' counts binds
  }
}

// A posted work request, until its completion is taken.
// Kept small (it is written at every post and read at every completion): the DAT operation and
// the extension type follow from `op`.
struct Pending {
  Ep *ep = nullptr;    // null for a receive of an SRQ: the completion names the EP
  Evd *evd = nullptr;  // null for a receive of an SRQ: the CQ it completes on is the EP's
  Srq *srq = nullptr;
  DAT_RMR_HANDLE rmr = nullptr;  // a bind's (is_bind(op))
  DAT_DTO_COOKIE cookie{};
  DAT_VLEN length = 0;
  Op op = Op::send;
  bool suppress = false;
  [[nodiscard]] bool recv() const { return op == Op::recv; }
};

// The posted work requests whose completions have not been taken.  A request's wr_id is its
// slot's index (low 32 bits) and the slot's generation (high 32 bits), which changes whenever the
// slot is taken or freed: a completion of a request forgotten meanwhile (its EP reset or freed,
// its EVD freed) names an old generation and is ignored, even if the slot holds a newer request.
// An odd generation is a slot in use, so that one compare finds a live request, and a slot is 64
// bytes (an index is a shift); every completion looks its request up.
class PendingTable {
 public:
  // Records a new request, whose record `fill` writes in place; returns its wr_id.
  template <typename Fill>
  std::uint64_t add(Fill &&fill) {
    std::uint32_t i = free_;
    if (i == kNone) {
      i = static_cast<std::uint32_t>(slots_.size());
      slots_.emplace_back();
    } else {
      free_ = slots_[i].next_free;
    }
    Slot &s = slots_[i];
    fill(s.pending);
    ++s.generation;  // odd: in use
    return (std::uint64_t{s.generation} << 32) | i;
  }
  // The request `id` names; nullptr if it was forgotten.
  [[nodiscard]] Pending *find(std::uint64_t id) {
    const auto i = static_cast<std::uint32_t>(id);
    if (i >= slots_.size()) return nullptr;
    Slot &s = slots_[i];
    // an odd generation: a wr_id not made by add() (0, say) never names a free slot
    const auto generation = static_cast<std::uint32_t>(id >> 32);
    if (s.generation != generation || (generation & 1) == 0) return nullptr;
    return &s.pending;
  }
  void remove(std::uint64_t id) {
    if (find(id) != nullptr) release(static_cast<std::uint32_t>(id));
  }
  // Removes the request `id` names, which find() has just found.
  void remove_found(std::uint64_t id) { release(static_cast<std::uint32_t>(id)); }
  template <typename F>
  void remove_if(F &&f) {
    for (std::uint32_t i = 0; i < slots_.size(); ++i)
      if (slots_[i].used() && f(slots_[i].pending)) release(i);
  }
  template <typename F>
  [[nodiscard]] bool any(F &&f) const {
    return std::any_of(slots_.begin(), slots_.end(),
                       [&](const Slot &s) { return s.used() && f(s.pending); });
  }

 private:
  static constexpr std::uint32_t kNone = UINT32_MAX;
  struct Slot {
    Pending pending;
    std::uint32_t generation = 0;     // odd while the slot holds a request
    std::uint32_t next_free = kNone;  // while free: the next free slot (a LIFO list)
    [[nodiscard]] bool used() const { return (generation & 1) != 0; }
  };
  static_assert(sizeof(Slot) == 64);
  void release(std::uint32_t i) {
    Slot &s = slots_[i];
    ++s.generation;  // even: free
    s.next_free = free_;
    free_ = i;
  }
  std::vector<Slot> slots_;
  std::uint32_t free_ = kNone;  // the free slot reused first
};

class VerbsDataPath;

// A QP whose posts answer DAT_NOT_IMPLEMENTED: an EP without a user-owned QP.
class KernelQueuePair final : public QueuePair {
 public:
  DAT_RETURN post_rdma_write_immed(DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE,
                                   const DAT_RMR_TRIPLET *, DAT_UINT32,
                                   DAT_COMPLETION_FLAGS) override {
    return error(DAT_NOT_IMPLEMENTED);
  }
  DAT_RETURN post_atomic(AtomicOp, DAT_UINT64, DAT_UINT64, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE,
                         const DAT_RMR_TRIPLET *, DAT_COMPLETION_FLAGS) override {
    return error(DAT_NOT_IMPLEMENTED);
  }
};

class UserQueuePair final : public QueuePair {
 public:
  // The hot path keeps the EP's kernel endpoint (fixed for the EP's life) and its QP at hand.
  // dat_ep_reset may replace the QP (iWARP: a fresh one, since siw's cannot go back to INIT):
  // clear(), which every reset calls, takes it again.
  // ud_mtu: a UD QP's largest datagram (the port's active MTU; 0: unknown, not checked).
  UserQueuePair(Ep &ep, VerbsDataPath &path, std::uint32_t ud_mtu)
      : ep_(ep),
        path_(path),
        endpoint_(ep.user->endpoint()),
        qp_(ep.user->qp()),
        max_inline_data_(ep.user->max_inline_data()),
        ud_(ep.user->ud()),
        qkey_(ep.user->qkey()),
        ud_mtu_(ud_mtu) {}

  // A post of one of DAT's operations (the DAT call's arguments in `r`).
  // Inline into every caller: out of line, building its Request in memory and the call add
  // noticeably to the instructions of a post, the data path's hottest call.
  template <Op kOp>
  [[gnu::always_inline]] inline DAT_RETURN post(const Request &r);
  // dat_extension_op's arguments: the EP is 1, the operation 2 (dat_ib_extensions.h's macros).
  DAT_RETURN post_rdma_write_immed(DAT_COUNT n, DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
                                   const DAT_RMR_TRIPLET *remote, DAT_UINT32 immed,
                                   DAT_COMPLETION_FLAGS flags) override {
    return post<Op::rdma_write_immed>({.segments = n,
                                       .iov = iov,
                                       .cookie = cookie,
                                       .remote = remote,
                                       .flags = flags,
                                       .immed = immed,
                                       .arg_segments = DAT_INVALID_ARG3,
                                       .arg_iov = DAT_INVALID_ARG4,
                                       .arg_remote = DAT_INVALID_ARG6,
                                       .arg_flags = DAT_INVALID_ARG8});
  }
  DAT_RETURN post_atomic(AtomicOp op, DAT_UINT64 compare_add, DAT_UINT64 swap,
                         DAT_LMR_TRIPLET *local, DAT_DTO_COOKIE cookie,
                         const DAT_RMR_TRIPLET *remote, DAT_COMPLETION_FLAGS flags) override {
    // compare-and-swap has one value more before the buffers than fetch-and-add
    const bool cas = op == AtomicOp::compare_and_swap;
    const Request r{.segments = 1,
                    .iov = local,
                    .cookie = cookie,
                    .remote = remote,
                    .flags = flags,
                    .compare_add = compare_add,
                    .swap = swap,
                    .arg_iov = cas ? DAT_INVALID_ARG5 : DAT_INVALID_ARG4,
                    .arg_remote = cas ? DAT_INVALID_ARG7 : DAT_INVALID_ARG6,
                    .arg_flags = cas ? DAT_INVALID_ARG8 : DAT_INVALID_ARG7};
    return cas ? post<Op::compare_and_swap>(r) : post<Op::fetch_and_add>(r);
  }
  // dat_ib_post_send_ud(ep, segments 3, iov 4, ah 5, cookie 6, flags 7)
  DAT_RETURN post_send_ud(DAT_COUNT n, DAT_LMR_TRIPLET *iov, const DAT_IB_ADDR_HANDLE *ah,
                          DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags) override {
    return post<Op::send_ud>({.segments = n,
                              .iov = iov,
                              .cookie = cookie,
                              .flags = flags,
                              .ah = ah,
                              .arg_segments = DAT_INVALID_ARG3,
                              .arg_iov = DAT_INVALID_ARG4,
                              .arg_remote = DAT_INVALID_ARG5,
                              .arg_flags = DAT_INVALID_ARG7});
  }
  ibv_ah *make_address_handle(const kdat::UdPeer &peer) override {
    ibv_ah_attr attr = kdat::to_ibv_ah_attr(peer.ah);
    ibv_ah *ah = ibv_create_ah(qp_->pd, &attr);
    if (ah == nullptr) fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
    // A peer that did not say (0) is sent to with our own Q_Key: kdat's QPs share the kernel's.
    ahs_.emplace(ah, peer.qkey != 0 ? peer.qkey : qkey_);
    return ah;
  }
  bool free_address_handle(ibv_ah *ah) override {
    const auto it = ahs_.find(ah);
    if (it == ahs_.end()) return false;
    (void)ibv_destroy_ah(ah);
    ahs_.erase(it);
    return true;
  }
  [[nodiscard]] std::size_t outstanding_recv() const override { return recv_; }
  [[nodiscard]] std::size_t outstanding_request() const override { return request_; }
  DAT_RETURN bind(Rmr &rmr, const Lmr *lmr, const DAT_LMR_TRIPLET &target,
                  DAT_MEM_PRIV_FLAGS privileges, DAT_RMR_COOKIE cookie, DAT_COMPLETION_FLAGS flags,
                  DAT_RMR_CONTEXT &context) override;

  ~UserQueuePair() override;

  // A completion of this EP was taken; `ok`: it succeeded.
  void completed(bool recv, bool ok) {
    std::size_t &n = recv ? recv_ : request_;
    if (n > 0) --n;
    if (!recv && draining_) last_request_done_ = std::chrono::steady_clock::now();
    if (recv && first_send_ != FirstSend::open) first_receive(ok);
  }
  // The EP is reset or freed (its posts forgotten).
  void clear();
  // Releases held requests whose hold is over (the first receive completed, kFirstSendHold
  // passed, the connection ended or is being disconnected).
  void service_hold();
  bool disconnect_after_requests() override;
  // Sends the held DREQ once the requests in flight completed or none did for kDrainLimit; stops
  // draining if the connection ended another way.
  void service_drain();

 private:
  // Whether the first sends of this connection wait for its first receive (see kFirstSendHold).
  enum class FirstSend { undecided, hold, open };
  struct HeldRequest {
    std::uint64_t id = 0;
    ibv_send_wr wr{};
    std::vector<ibv_sge> sge;
  };

  // The checks only an atomic needs (see post()).
  void check_atomic(const Request &r);
  [[nodiscard]] bool must_hold();
  // The first receive of this connection completed (`ok`: successfully).
  void first_receive(bool ok);
  void hold(std::uint64_t id, const ibv_send_wr &wr);
  // Posts the held requests in order; those the QP refuses complete as flushed.
  void post_held();
  // Completes the held requests as flushed (the connection is over).
  void flush_held(std::size_t from = 0);
  void stop_holding();

  // The Q_Key a UD send to `ah` carries: its peer's, for an AH of this QP's; else our own.
  [[nodiscard]] std::uint32_t remote_qkey(ibv_ah *ah) const {
    const auto it = ahs_.find(ah);
    return it != ahs_.end() ? it->second : qkey_;
  }

  Ep &ep_;
  VerbsDataPath &path_;
  const kdat::Endpoint &endpoint_;
  ibv_qp *qp_;
  std::uint32_t max_inline_data_;
  bool ud_;               // a UD QP: datagrams (post_send_ud) and receives only
  std::uint32_t qkey_;    // a UD QP's own Q_Key
  std::uint32_t ud_mtu_;  // a UD datagram's most bytes (0: not checked)
  std::unordered_map<ibv_ah *, std::uint32_t> ahs_;  // the AHs it made, with their peers' Q_Keys
  std::size_t recv_ = 0;
  std::size_t request_ = 0;
  FirstSend first_send_ = FirstSend::undecided;
  bool flush_held_ = false;  // a receive failed: the QP is in error
  std::vector<HeldRequest> held_;
  std::chrono::steady_clock::time_point held_since_{};
  bool draining_ = false;  // its DREQ waits for its requests (service_drain)
  // While draining: when a request last completed, or the drain began (kDrainLimit counts from
  // the later).
  std::chrono::steady_clock::time_point last_request_done_{};
};

class VerbsDataPath final : public DataPath {
 public:
  explicit VerbsDataPath(Ia &ia) : ia_(ia) {}
  ~VerbsDataPath() override {
    // The IA frees its EPs (QPs) before its EVDs and this; CQs go before the device.
    for (auto &[evd, cq] : cqs_) evd->cq = nullptr;
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
    // A window is of use only if the device can bind it (rxe: types 1 and 2B; siw: none).
    l.max_mw = (d.device_cap_flags & IBV_DEVICE_MEM_WINDOW) != 0 ? d.max_mw : 0;
    l.mw_type2 =
        (d.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)) != 0;
    l.max_pd = d.max_pd;
    l.max_qp_rd_atom = d.max_qp_rd_atom;
    l.max_qp_init_rd_atom = d.max_qp_init_rd_atom;
    l.max_msg_sz = msg;
    l.atomics = d.atomic_cap != IBV_ATOMIC_NONE;
    l.iwarp = iwarp_;
    l.max_srq = d.max_srq;
    l.max_srq_wr = d.max_srq_wr;
    l.max_srq_sge = d.max_srq_sge;
    limits_ = l;
    return limits_;
  }

  [[nodiscard]] std::optional<kdat::UserEndpoint> make_user_endpoint(Evd &connect, Evd *recv,
                                                                     Evd *request,
                                                                     const kdat::EpAttributes &k,
                                                                     const DAT_EP_ATTR *attr,
                                                                     Srq *srq) override {
    if (!verbs_) return std::nullopt;
    kdat::UserQpAttributes q;
    q.ep = k;
    q.max_recv_wr = k.max_recv_dtos != 0 ? k.max_recv_dtos : kDefaultDtos;
    q.max_send_wr = k.max_request_dtos != 0 ? k.max_request_dtos : kDefaultDtos;
    q.max_recv_sge = std::max<std::uint32_t>(k.max_recv_iov != 0 ? k.max_recv_iov : kDefaultIov, 1);
    q.max_send_sge =
        std::max<std::uint32_t>(k.max_request_iov != 0 ? k.max_request_iov : kDefaultIov, 1);
    q.max_inline_data = kInlineData;
    q.inline_optional = true;
    // A UD EP's QP is a UD QP (connect.cpp checked that the IA offers them).
    q.ud = attr != nullptr &&
           attr->service_type == static_cast<DAT_SERVICE_TYPE>(DAT_IB_SERVICE_TYPE_UD);
    // The peer's atomics (dat_ib_post_cmp_and_swap, _fetch_and_add) need the QP's permission too.
    q.remote_atomic = !q.ud;
    if (recv != nullptr) q.recv_cq = cq_for(*recv).cq;
    if (request != nullptr) q.send_cq = cq_for(*request).cq;
    if (srq != nullptr) q.srq = verbs_srq(*srq);
    return kdat::UserEndpoint(ia_.kernel, *verbs_, *connect.kernel, q);
  }

  [[nodiscard]] std::unique_ptr<SharedReceiveQueue> make_shared_receive_queue(Srq &srq) override;

  // The verbs SRQ of `srq` (made by make_shared_receive_queue).
  static ibv_srq *verbs_srq(Srq &srq);

  [[nodiscard]] std::unique_ptr<QueuePair> make_queue_pair(Ep &ep) override {
    if (!ep.user) return std::make_unique<KernelQueuePair>();
    const auto limits = ep.user->ud() ? device_limits() : std::nullopt;
    return std::make_unique<UserQueuePair>(ep, *this, limits ? limits->active_mtu : 0);
  }

  [[nodiscard]] std::unique_ptr<MemoryRegion> register_memory(Pz &pz, void *address,
                                                              DAT_VLEN length,
                                                              DAT_MEM_PRIV_FLAGS privileges,
                                                              MemoryKeys &keys) override {
    if (!pz.pd || !verbs_) fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_PROTECTION_DOMAIN);
    // Every LMR may carry windows (dat_rmr_bind names any LMR of the PZ) where the device has
    // them; a device without them may refuse the flag.
    const auto limits = device_limits();
    const int bindable = limits && limits->max_mw > 0 ? IBV_ACCESS_MW_BIND : 0;
    ibv_mr *mr = ibv_reg_mr(verbs_->pd(), address, length, access_flags(privileges) | bindable);
    if (mr == nullptr) fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY_REGION);
    auto region = std::make_unique<VerbsMr>(mr);
    keys.lmr_context = mr->lkey;
    keys.rmr_context = mr->rkey;
    keys.registered_length = mr->length;
    keys.registered_address = reinterpret_cast<DAT_VADDR>(mr->addr);
    return region;
  }

  [[nodiscard]] std::unique_ptr<MemoryWindow> make_memory_window(
      Pz &pz, bool per_ep, DAT_RMR_CONTEXT &context) override {
    if (!pz.pd || !verbs_) fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_PROTECTION_DOMAIN);
    const auto limits = device_limits();
    if (!limits || limits->max_mw <= 0 || (per_ep && !limits->mw_type2))
      fail(DAT_MODEL_NOT_SUPPORTED);
    ibv_mw *mw = ibv_alloc_mw(verbs_->pd(), per_ep ? IBV_MW_TYPE_2 : IBV_MW_TYPE_1);
    if (mw == nullptr) fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY_REGION);
    auto window = std::make_unique<VerbsMw>(mw);
    context = mw->rkey;
    return window;
  }

  std::size_t poll_completions(Evd &evd) override {
    if (!holding_.empty()) service_holds();
    if (!draining_.empty()) service_drains();
    Cq *cq = evd.cq;
    return cq != nullptr ? poll(evd, *cq) : 0;
  }

  int take_completion(Evd &evd, DAT_EVENT &out) override {
    Cq *cq = evd.cq;
    if (cq == nullptr || serviced_) return -1;
    ibv_wc wc;
    while (ibv_poll_cq(cq->cq, 1, &wc) == 1)
      if (complete(evd, wc, out)) return 1;
    return 0;
  }

  [[nodiscard]] bool holding() const override { return serviced_; }

  int arm(Evd &evd) override {
    Cq *cq = evd.cq;
    if (cq == nullptr) return -1;
    // Armed before every sleep, never "still armed" from an earlier one: a notification that
    // never came (or came for a completion already polled) must not leave a sleeper unarmed.
    (void)ibv_req_notify_cq(cq->cq, 0);
    (void)poll(evd, *cq);  // what arrived before the arming
    return cq->channel->fd;
  }

  void notified(Evd &evd) override {
    Cq *cq = evd.cq;
    if (cq == nullptr) return;
    // One event per wake; the fd is non-blocking (EAGAIN: another waiter took it).  An event
    // left behind (an arming whose completion was polled before anyone slept) wakes the next
    // sleeper once, which takes it and sleeps again.
    ibv_cq *got = nullptr;
    void *context = nullptr;
    if (ibv_get_cq_event(cq->channel, &got, &context) == 0) ibv_ack_cq_events(got, 1);
  }

  bool outstanding(const Ep &ep, Evd &evd) override {
    if (!ep.user || evd.cq == nullptr) return false;
    return pending_.any([&](const Pending &p) { return p.ep == &ep && p.evd == &evd; });
  }

  void forget_ep(Ep &ep) override {
    pending_.remove_if([&](const Pending &p) { return p.ep == &ep; });
    if (ep.user && ep.qp) static_cast<UserQueuePair &>(*ep.qp).clear();
  }

  void forget_evd(Evd &evd) override {
    pending_.remove_if([&](const Pending &p) { return p.evd == &evd; });
    evd.cq = nullptr;
    cqs_.erase(&evd);
  }

  // Records a new posted request; returns its wr_id.
  std::uint64_t remember(Ep &ep, Evd &evd, DAT_DTO_COOKIE cookie, DAT_VLEN length, Op op,
                         bool suppress) {
    return pending_.add([&](Pending &p) {
      p.ep = &ep;
      p.evd = &evd;
      p.srq = nullptr;
      p.rmr = nullptr;
      p.cookie = cookie;
      p.length = length;
      p.op = op;
      p.suppress = suppress;
    });
  }
  // Records a bind or invalidate of `rmr`'s window posted on `ep`; returns its wr_id.
  std::uint64_t remember_bind(Ep &ep, Evd &evd, Rmr &rmr, DAT_RMR_COOKIE cookie, Op op,
                              bool suppress) {
    return pending_.add([&](Pending &p) {
      p.ep = &ep;
      p.evd = &evd;
      p.srq = nullptr;
      p.rmr = rmr.handle;
      p.cookie = cookie;
      p.length = 0;
      p.op = op;
      p.suppress = suppress;
    });
  }
  // A bind event that no device request makes (the unbind of a type 2 window that is not
  // bound): queued on `evd` as a completion would be, and its waiters woken.
  static void complete_bind_now(Evd &evd, Rmr &rmr, DAT_RMR_COOKIE cookie) {
    DAT_EVENT event{};
    event.event_number = DAT_RMR_BIND_COMPLETION_EVENT;
    event.evd_handle = evd.handle;
    auto &data = event.event_data.rmr_completion_event_data;
    data.rmr_handle = rmr.handle;
    data.user_cookie = cookie;
    data.status = DAT_RMR_BIND_SUCCESS;
    queue_event(evd, event);
  }
  void drop(std::uint64_t id) { pending_.remove(id); }
  // Records a receive posted to `srq`; returns its wr_id.
  std::uint64_t remember_srq_recv(Srq &srq, DAT_DTO_COOKIE cookie, DAT_VLEN length) {
    return pending_.add([&](Pending &p) {
      p.ep = nullptr;
      p.evd = nullptr;
      p.srq = &srq;
      p.rmr = nullptr;
      p.cookie = cookie;
      p.length = length;
      p.op = Op::recv;
      p.suppress = false;
    });
  }
  // `srq` is freed: its receives are forgotten (their completions make no events).
  void forget_srq(Srq &srq) {
    pending_.remove_if([&](const Pending &p) { return p.srq == &srq; });
  }

  // The MR a type 1 window's unbind names (a 0-byte bind of it), registered at the first.
  ibv_mr *unbind_anchor() {
    if (!unbind_anchor_) {
      unbind_anchor_.reset(ibv_reg_mr(verbs_->pd(), anchor_bytes_.data(), anchor_bytes_.size(),
                                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND));
      if (!unbind_anchor_) fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY_REGION);
    }
    return unbind_anchor_.get();
  }

  // Whether the IA's device is an iWARP RNIC (MPA's first-message rule applies).
  [[nodiscard]] bool iwarp() const { return iwarp_; }
  // Moves the completions of `evd`'s CQ to evd.local without servicing holds.
  void poll_only(Evd &evd) {
    if (evd.cq != nullptr) (void)poll(evd, *evd.cq);
  }
  // Completes the request `id` as flushed, as if the device had (nothing if it was forgotten).
  void complete_flushed(std::uint64_t id) {
    const Pending *p = pending_.find(id);
    if (p == nullptr) return;
    ibv_wc wc{};
    wc.wr_id = id;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    (void)take(*p->evd, wc);
  }
  void start_holding(UserQueuePair &qp) { enlist(holding_, qp); }
  void stop_holding(UserQueuePair &qp) { delist(holding_, qp); }
  void start_draining(UserQueuePair &qp) { enlist(draining_, qp); }
  void stop_draining(UserQueuePair &qp) { delist(draining_, qp); }

 private:
  std::size_t poll(Evd &evd, Cq &cq) {
    std::size_t added = 0;
    ibv_wc wc[16];
    for (;;) {
      const int n = ibv_poll_cq(cq.cq, 16, wc);
      for (int i = 0; i < n; ++i) added += take(evd, wc[i]);
      if (n < 16) break;
    }
    return added;
  }

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
    evd.cq = slot.get();
    return *slot;
  }

  // One completion of `evd`'s CQ into its local queue: 1 if it became an event.  Made aside
  // first: complete() may queue events itself (a release's flushed requests, through
  // completed()), which may grow evd.local, so no slot of it is held across the call.
  std::size_t take(Evd &evd, const ibv_wc &wc) {
    DAT_EVENT event;
    if (!complete(evd, wc, event)) return 0;
    evd.local.push_back(event);
    return 1;
  }

  // Settles one completion of `evd`'s CQ: its request leaves the table, and `event` gets the
  // DAT event it makes, written whole; false if it makes none (a request of an EP freed or reset
  // meanwhile, or a suppressed one that succeeded).
  // (Inline: a polled completion's whole path is take_completion and this.)
  [[gnu::always_inline]] bool complete(Evd &evd, const ibv_wc &wc, DAT_EVENT &event) {
    Pending *found = pending_.find(wc.wr_id);
    if (found == nullptr) return false;  // of an EP freed or reset meanwhile
    Pending p = *found;
    pending_.remove_found(wc.wr_id);
    if (p.srq != nullptr) [[unlikely]] {
      p.ep = srq_completed(p, wc.qp_num);
      if (p.ep == nullptr) return false;  // its EP was freed meanwhile
    }
    ++evd.counters[DCNT_EVD_DTO_CALLBACK];
    const bool ok = wc.status == IBV_WC_SUCCESS;
    const bool recv = p.recv();
    if (p.ep->qp) static_cast<UserQueuePair &>(*p.ep->qp).completed(recv, ok);
    // A receive is an extension's when the peer's request carried immediate data (the opcode
    // and flags of a completion in error mean nothing).
    const OpTraits &traits = kOpTraits[static_cast<std::size_t>(p.op)];
    DAT_DTOS operation = traits.reported;
    DAT_IB_EXT_TYPE extension = traits.extension;
    bool extended = traits.extended;
    bool immed = false;
    DAT_RMR_CONTEXT invalidated = 0;
    // A UD QP's receive: always the extension's (its length counts the GRH, as DAPL's does).
    const bool ud_recv = recv && p.ep->ud;
    if (ud_recv) [[unlikely]] {
      extension = DAT_IB_UD_RECV;
      extended = true;
      operation = static_cast<DAT_DTOS>(DAT_IB_DTO_RECV_UD);
      if (ok) {
        ++p.ep->counters[DCNT_EP_RECV_UD];
        p.ep->counters[DCNT_EP_RECV_UD_DATA] += wc.byte_len;
        if (wc.wc_flags & IBV_WC_WITH_IMM) {
          operation = static_cast<DAT_DTOS>(DAT_IB_DTO_RECV_UD_IMMED);
          immed = true;
        }
      }
    } else if (recv && ok) {
      auto &c = p.ep->counters;
      // The peer's send invalidated a window of ours: the event names its context, and the RMR
      // is unbound from now on.
      if (wc.wc_flags & kWithInvalidate) [[unlikely]] {
        invalidated = wc.invalidated_rkey;
        window_invalidated(*p.ep->ia, invalidated);
      }
      if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        ++c[DCNT_EP_RECV_RDMA_IMM];
        c[DCNT_EP_RECV_RDMA_IMM_DATA] += wc.byte_len;
        extension = DAT_IB_RDMA_WRITE_IMMED_DATA;
        extended = true;
        operation = static_cast<DAT_DTOS>(DAT_IB_DTO_RECV_IMMED);
        immed = true;
      } else if (wc.wc_flags & IBV_WC_WITH_IMM) {
        ++c[DCNT_EP_RECV_IMM];
        c[DCNT_EP_RECV_IMM_DATA] += wc.byte_len;
        extension = DAT_IB_RECV_IMMED_DATA;
        extended = true;
        operation = static_cast<DAT_DTOS>(DAT_IB_DTO_RECV_MSG_IMMED);
        immed = true;
      } else {
        ++c[DCNT_EP_RECV];
        c[DCNT_EP_RECV_DATA] += wc.byte_len;
      }
    }
    if (p.suppress && ok) return false;
    if (traits.bind) [[unlikely]] {
      event.event_number = DAT_RMR_BIND_COMPLETION_EVENT;
      event.evd_handle = evd.handle;
      event.event_data = {};
      auto &data = event.event_data.rmr_completion_event_data;
      data.rmr_handle = p.rmr;
      data.user_cookie = p.cookie;
      data.status = to_dat(wc.status);
      std::memset(event.event_extension_data, 0, sizeof(event.event_extension_data));
      return true;
    }
    event.event_number =
        extended ? static_cast<DAT_EVENT_NUMBER>(DAT_IB_DTO_EVENT) : DAT_DTO_COMPLETION_EVENT;
    event.evd_handle = evd.handle;
    event.event_data = {};
    auto &data = event.event_data.dto_completion_event_data;
    data.ep_handle = p.ep->handle;
    data.user_cookie = p.cookie;
    data.status = to_dat(wc.status);
    data.operation = operation;
    data.transfered_length = recv ? (ok ? wc.byte_len : 0) : p.length;
    data.rmr_context = invalidated;
    std::memset(event.event_extension_data, 0, sizeof(event.event_extension_data));
    if (extended) {
      DAT_IB_EXTENSION_EVENT_DATA ext{};
      ext.type = extension;
      ext.status = ok ? DAT_OP_SUCCESS : DAT_IB_OP_ERR;
      // As libdaplofa, the 32 bits go into and come out of the work request unchanged, so
      // either provider reads the other's immediate data.
      if (immed) ext.val.immed.data = wc.imm_data;
      // A datagram names its sender's QP (no AH: the consumer has the one its exchange gave).
      if (ud_recv && ok) ext.remote_ah.qpn = wc.src_qp;
      static_assert(sizeof(ext) <= sizeof(event.event_extension_data));
      std::memcpy(event.event_extension_data, &ext, sizeof(ext));
    }
    return true;
  }

  void enlist(std::vector<UserQueuePair *> &list, UserQueuePair &qp) {
    if (std::find(list.begin(), list.end(), &qp) == list.end()) list.push_back(&qp);
    serviced_ = true;
  }
  void delist(std::vector<UserQueuePair *> &list, UserQueuePair &qp) {
    std::erase(list, &qp);
    serviced_ = !holding_.empty() || !draining_.empty();
  }

  // The peer invalidated our window whose key is `rkey` (a send with invalidate): its RMR is
  // unbound.  Out of line: such receives are rare, and the walk is over the IA's objects.
  [[gnu::noinline]] static void window_invalidated(Ia &ia, std::uint32_t rkey) {
    for (Object *o : ia.children) {
      if (o->type != DAT_HANDLE_TYPE_RMR) continue;
      auto &rmr = static_cast<Rmr &>(*o);
      auto &window = static_cast<VerbsMw &>(*rmr.window);
      if (window.rkey() != rkey || rmr.target.segment_length == 0) continue;
      window.posted(std::nullopt);
      rmr.target = {};
      rmr.privileges = DAT_MEM_PRIV_NONE_FLAG;
      rmr.bound_ep = nullptr;
    }
  }

  // The SRQ receive `p` was taken from a CQ: the EP whose QP consumed it (null if it was freed
  // meanwhile).  Out of line: an EP's own receive, the common case, pays one test for it.
  [[gnu::noinline]] static Ep *srq_completed(const Pending &p, std::uint32_t qp_num) {
    srq_received(*p.srq);
    return srq_consumer(*p.srq, qp_num);
  }
  // An SRQ receive was taken from a CQ (srq.cpp's outstanding count).
  static void srq_received(Srq &srq);
  // The EP of `srq` whose QP is `qp_num` (the one that consumed a receive); null if freed.  A
  // walk of the SRQ's EPs: they are few, and a map would have to follow every iWARP reset's
  // new QP number.
  static Ep *srq_consumer(Srq &srq, std::uint32_t qp_num) {
    for (Ep *ep : srq.eps)
      if (ep->user && ep->user->qp()->qp_num == qp_num) return ep;
    return nullptr;
  }

  // Opens the IA's device once; false if this process cannot (PZs without PD, kernel-QP EPs:
  // see data_path.hpp).
  bool open() {
    if (!verbs_ && !tried_) {
      tried_ = true;
      try {
        verbs_.emplace(ia_.kernel);
        iwarp_ = verbs_->context()->device->transport_type == IBV_TRANSPORT_IWARP;
      } catch (const kdat::Error &) {
      }
    }
    return verbs_.has_value();
  }

  // Calls `step` on every QP of `list` that is still in it when its turn comes (a step may take
  // any of them out).  `busy` keeps the polls a step makes from coming back in here.
  template <class Step>
  static void service(bool &busy, const std::vector<UserQueuePair *> &list, Step step) {
    if (busy) return;
    busy = true;
    struct Done {
      bool &flag;
      ~Done() { flag = false; }
    } done{busy};
    const std::vector<UserQueuePair *> now = list;
    for (UserQueuePair *qp : now)
      if (std::find(list.begin(), list.end(), qp) != list.end()) step(*qp);
  }

  // Gives every holding QP its chance to release (each polls its EP's receive CQ first).  A
  // waiter on any EVD of the IA gets here; evd_wait sleeps in short slices while holding().
  // A release's flushes are taken through take(), not again here.
  void service_holds() {
    service(servicing_, holding_, [](UserQueuePair &qp) { qp.service_hold(); });
  }

  // Gives every draining QP its chance to send its DREQ (see kDrainLimit).
  void service_drains() {
    service(draining_servicing_, draining_, [](UserQueuePair &qp) { qp.service_drain(); });
  }

  Ia &ia_;
  bool tried_ = false;
  bool iwarp_ = false;
  bool servicing_ = false;
  bool draining_servicing_ = false;
  std::vector<UserQueuePair *> holding_;   // QPs with held requests (see kFirstSendHold)
  std::vector<UserQueuePair *> draining_;  // QPs whose DREQ waits for requests (kDrainLimit)
  // Whether either list is not empty: the completion paths test this one flag (enlist, delist).
  bool serviced_ = false;
  std::optional<kdat::Verbs> verbs_;
  std::optional<DeviceLimits> limits_;
  std::unordered_map<Evd *, std::unique_ptr<Cq>> cqs_;
  PendingTable pending_;
  std::array<std::byte, 64> anchor_bytes_{};
  std::unique_ptr<ibv_mr, MrFreer> unbind_anchor_;  // see unbind_anchor()
};

// dat_srq_*'s queue: a verbs SRQ on the IA's PD.  Its receives are recorded as an EP's are (the
// PendingTable), with the SRQ in place of the EP and the EVD: the completion's QP number names
// the EP, the CQ it comes on is that EP's recv EVD's.
class VerbsSrq final : public SharedReceiveQueue {
 public:
  VerbsSrq(Srq &srq, VerbsDataPath &path, ibv_srq *queue) : srq_(srq), path_(path), queue_(queue) {}
  VerbsSrq(const VerbsSrq &) = delete;
  VerbsSrq &operator=(const VerbsSrq &) = delete;
  ~VerbsSrq() override {
    path_.forget_srq(srq_);
    (void)ibv_destroy_srq(queue_);
  }

  DAT_RETURN post_recv(DAT_COUNT n, DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie) override {
    if (n < 0 || n > srq_.attr.max_recv_iov) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    if (n > 0 && iov == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    // Full: take what its EPs' receive CQs hold (that counts down) and count again.
    if (outstanding_ >= static_cast<std::size_t>(srq_.attr.max_recv_dtos)) {
      for (Ep *ep : srq_.eps)
        if (ep->recv_evd != nullptr) path_.poll_only(*ep->recv_evd);
      if (outstanding_ >= static_cast<std::size_t>(srq_.attr.max_recv_dtos))
        fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ);
    }
    const SgeList sge(n, iov, DAT_INVALID_ARG3);
    const std::uint64_t id = path_.remember_srq_recv(srq_, cookie, sge.length());
    ibv_recv_wr wr{};
    ibv_recv_wr *bad = nullptr;
    wr.wr_id = id;
    wr.sg_list = sge.data();
    wr.num_sge = n;
    const int rc = ibv_post_srq_recv(queue_, &wr, &bad);
    if (rc != 0) {
      path_.drop(id);
      if (rc == ENOMEM) fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ);
      if (rc == EINVAL) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
      fail(DAT_INTERNAL_ERROR);
    }
    ++outstanding_;
    return DAT_SUCCESS;
  }

  void resize(DAT_COUNT max_recv_dtos) override {
    if (max_recv_dtos <= 0) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    // Receives posted and not yet taken would not fit (DAPL answers the same).
    if (static_cast<std::size_t>(max_recv_dtos) < outstanding_) fail(DAT_INVALID_STATE);
    ibv_srq_attr attr{};
    attr.max_wr = static_cast<std::uint32_t>(max_recv_dtos);
    if (ibv_modify_srq(queue_, &attr, IBV_SRQ_MAX_WR) != 0)
      fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ);
    srq_.attr.max_recv_dtos = max_recv_dtos;
  }

  [[nodiscard]] std::size_t outstanding() const override { return outstanding_; }
  void received() {
    if (outstanding_ > 0) --outstanding_;
  }
  [[nodiscard]] ibv_srq *queue() const { return queue_; }

 private:
  Srq &srq_;
  VerbsDataPath &path_;
  ibv_srq *queue_;
  std::size_t outstanding_ = 0;
};

void VerbsDataPath::srq_received(Srq &srq) { static_cast<VerbsSrq &>(*srq.queue).received(); }

ibv_srq *VerbsDataPath::verbs_srq(Srq &srq) { return static_cast<VerbsSrq &>(*srq.queue).queue(); }

std::unique_ptr<SharedReceiveQueue> VerbsDataPath::make_shared_receive_queue(Srq &srq) {
  if (!open()) fail(DAT_MODEL_NOT_SUPPORTED);
  const auto limits = device_limits();
  if (!limits || limits->max_srq <= 0) fail(DAT_MODEL_NOT_SUPPORTED);
  const DAT_SRQ_ATTR &a = srq.attr;
  if (a.max_recv_dtos <= 0 || a.max_recv_dtos > limits->max_srq_wr || a.max_recv_iov <= 0 ||
      a.max_recv_iov > limits->max_srq_sge)
    fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  // No low watermark: its event would come from the device's async events, which the provider
  // does not read (ia_query: srq_watermarks_supported 0).
  if (a.low_watermark != DAT_SRQ_LW_DEFAULT) fail(DAT_MODEL_NOT_SUPPORTED);
  ibv_srq_init_attr init{};
  init.attr.max_wr = static_cast<std::uint32_t>(a.max_recv_dtos);
  init.attr.max_sge = static_cast<std::uint32_t>(a.max_recv_iov);
  ibv_srq *queue = ibv_create_srq(verbs_->pd(), &init);
  if (queue == nullptr) fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ);
  return std::make_unique<VerbsSrq>(srq, *this, queue);
}

template <Op kOp>
DAT_RETURN UserQueuePair::post(const Request &r) {
  // What depends on the operation is decided when this is compiled (one copy per operation).
  constexpr bool recv = kOp == Op::recv;
  constexpr bool send = kOp == Op::send || kOp == Op::send_with_invalidate || kOp == Op::send_ud;
  constexpr bool to_remote = !send && !recv;
  constexpr bool atomic = is_atomic(kOp);
  constexpr bool carries_data = send || kOp == Op::rdma_write || kOp == Op::rdma_write_immed;
  // A UD QP takes receives and datagrams only; a datagram needs a UD QP.
  if constexpr (kOp == Op::send_ud) {
    if (!ud_) fail(DAT_MODEL_NOT_SUPPORTED);
  } else if constexpr (!recv) {
    if (ud_) [[unlikely]]
      fail(DAT_MODEL_NOT_SUPPORTED);
  }
  const auto state = static_cast<unsigned>(endpoint_.state_inline());
  // The state table says where each may be posted: receives before the connection and while a
  // graceful disconnect drains (dat_ep_disconnect(3DAT) stops only new sends, RDMA and binds then),
  // not once it has ended; requests only while connected (kPostPermissions: its answers).
  const bool in_table = state < KDAT_EP_STATE_LIMIT;
  if constexpr (recv) {
    // An SRQ's EP takes its receives from the SRQ alone (dat_srq_post_recv), as over DAPL.
    if (ep_.srq != nullptr) fail(DAT_INVALID_STATE, DAT_INVALID_STATE_SRQ_IN_USE);
    if (!in_table || !kPostPermissions.recv[state])
      fail(DAT_INVALID_STATE, kdat_ep_invalid_state_subtype(state));
  } else if (!in_table || !kPostPermissions.send[state]) {
    fail(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY);
  }
  Evd *evd = recv ? ep_.recv_evd : ep_.request_evd;
  if (evd == nullptr)
    fail(DAT_INVALID_STATE,
         recv ? DAT_INVALID_STATE_EP_EVD_RECV : DAT_INVALID_STATE_EP_EVD_REQUEST);
  const DAT_COUNT n = r.segments;
  const DAT_COUNT max_iov = recv ? ep_.attr.max_recv_iov : ep_.attr.max_request_iov;
  if (n < 0 || n > max_iov) fail(DAT_INVALID_PARAMETER, r.arg_segments);
  if (n > 0 && r.iov == nullptr) fail(DAT_INVALID_PARAMETER, r.arg_iov);
  if (to_remote && r.remote == nullptr) fail(DAT_INVALID_PARAMETER, r.arg_remote);
  if constexpr (kOp == Op::send_ud) {
    if (r.ah == nullptr || r.ah->ah == nullptr) fail(DAT_INVALID_PARAMETER, r.arg_remote);
  }
  constexpr DAT_COMPLETION_FLAGS known = static_cast<DAT_COMPLETION_FLAGS>(
      DAT_COMPLETION_SUPPRESS_FLAG | DAT_COMPLETION_SOLICITED_WAIT_FLAG |
      DAT_COMPLETION_UNSIGNALLED_FLAG | DAT_COMPLETION_BARRIER_FENCE_FLAG |
      DAT_COMPLETION_EVD_THRESHOLD_FLAG);
  if ((r.flags & ~known) != 0) fail(DAT_INVALID_PARAMETER, r.arg_flags);
  // An EP with no outstanding RDMA read allowed (max_rdma_read_out 0: the QP's max_rd_atomic)
  // would accept the read and never complete it; atomics take the same initiator resources.
  // dat_ep_post_rdma_read's return values name DAT_INVALID_STATE for the EP's connection state
  // only and DAT_LENGTH_ERROR for buffer sizes; this is a resource limit ("failed due to
  // resource limitations"), as for max_request_dtos: DAT_INSUFFICIENT_RESOURCES, subtype the
  // RDMA read credits.
  if constexpr (kOp == Op::rdma_read || atomic) {
    if (ep_.attr.max_rdma_read_out <= 0) fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_CREDITS);
  }
  if constexpr (atomic) check_atomic(r);
  // When the queue looks full, reap finished requests (suppressed ones included, which nobody
  // dequeues) and count again.
  const std::size_t max_dtos =
      static_cast<std::size_t>(recv ? ep_.attr.max_recv_dtos : ep_.attr.max_request_dtos);
  std::size_t &outstanding = recv ? recv_ : request_;
  if (outstanding >= max_dtos) {
    (void)path_.poll_completions(*evd);
    if (outstanding >= max_dtos) fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
  }

  const SgeList sges(n, r.iov, r.arg_iov);
  ibv_sge *const sge = sges.data();
  const DAT_VLEN length = sges.length();
  // A datagram is one packet: at most the port's MTU (the device would fail it later).
  if constexpr (kOp == Op::send_ud) {
    if (ud_mtu_ != 0 && length > ud_mtu_) fail(DAT_LENGTH_ERROR);
  }
  const std::uint64_t id = path_.remember(ep_, *evd, r.cookie, length, kOp,
                                          (r.flags & DAT_COMPLETION_SUPPRESS_FLAG) != 0);
  int rc = 0;
  if constexpr (recv) {
    ibv_recv_wr wr;
    ibv_recv_wr *bad = nullptr;
    wr.wr_id = id;
    wr.next = nullptr;
    wr.sg_list = sge;
    wr.num_sge = n;
    rc = ibv_post_recv(qp_, &wr, &bad);
  } else {
    // Every member a device reads for these opcodes on an RC QP is set; the bind_mw/tso union
    // (IBV_WR_BIND_MW and IBV_WR_TSO only) is left as it is, as libdaplofa does: zeroing the
    // whole request was a tenth of a post's own cost.
    ibv_send_wr wr;
    ibv_send_wr *bad = nullptr;
    wr.wr_id = id;
    wr.next = nullptr;
    wr.imm_data = 0;
    wr.qp_type.xrc.remote_srqn = 0;
    wr.wr.atomic = {};
    wr.sg_list = sge;
    wr.num_sge = n;
    wr.opcode = opcode_of(kOp);
    wr.send_flags = IBV_SEND_SIGNALED;
    // Small sends and writes carry their data in the work request: the device copies it at the
    // post instead of reading the LMR later (so, as with libdaplofa, the LMR context of such a
    // post is not checked).
    if (carries_data && length > 0 && length <= max_inline_data_) wr.send_flags |= IBV_SEND_INLINE;
    if (r.flags & DAT_COMPLETION_SOLICITED_WAIT_FLAG) wr.send_flags |= IBV_SEND_SOLICITED;
    if (r.flags & DAT_COMPLETION_BARRIER_FENCE_FLAG) wr.send_flags |= IBV_SEND_FENCE;
    if constexpr (atomic) {
      wr.wr.atomic.remote_addr = r.remote->virtual_address;
      wr.wr.atomic.rkey = r.remote->rmr_context;
      wr.wr.atomic.compare_add = r.compare_add;
      wr.wr.atomic.swap = r.swap;
    } else if constexpr (to_remote) {
      wr.wr.rdma.remote_addr = r.remote->virtual_address;
      wr.wr.rdma.rkey = r.remote->rmr_context;
    }
    // As libdaplofa: the consumer's 32 bits unchanged (see take()).
    if constexpr (kOp == Op::rdma_write_immed) wr.imm_data = r.immed;
    // (a union with imm_data: the peer's RMR context to invalidate)
    if constexpr (kOp == Op::send_with_invalidate) wr.invalidate_rkey = r.immed;
    if constexpr (kOp == Op::send_ud) {
      wr.wr.ud.ah = r.ah->ah;
      wr.wr.ud.remote_qpn = r.ah->qpn;
      wr.wr.ud.remote_qkey = remote_qkey(r.ah->ah);
    }
    if (first_send_ != FirstSend::open && must_hold()) {
      hold(id, wr);
      ++outstanding;
      count_post(ep_, kOp, length);
      return DAT_SUCCESS;
    }
    rc = ibv_post_send(qp_, &wr, &bad);
  }
  if (rc != 0) {
    path_.drop(id);
    if (rc == ENOMEM) fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
    if (rc == EINVAL) fail(DAT_INVALID_PARAMETER, r.arg_segments);
    fail(DAT_INTERNAL_ERROR);
  }
  ++outstanding;
  count_post(ep_, kOp, length);
  return DAT_SUCCESS;
}

UserQueuePair::~UserQueuePair() {
  path_.stop_holding(*this);
  path_.stop_draining(*this);
  // The AHs not freed by dat_ib_ud_ah_free go before the QP (the Ep destroys this first).
  for (const auto &[ah, qkey] : ahs_) (void)ibv_destroy_ah(ah);
}

void UserQueuePair::first_receive(bool ok) {
  // The peer's first message is in: MPA allows this side to send now.
  first_send_ = FirstSend::open;
  if (held_.empty()) return;
  if (ok)
    post_held();
  else
    flush_held_ = true;  // completed as flushed by service_hold (not inside this take)
}

void UserQueuePair::clear() {
  qp_ = ep_.user->qp();
  max_inline_data_ = ep_.user->max_inline_data();
  qkey_ = ep_.user->qkey();
  recv_ = request_ = 0;
  held_.clear();  // their records went with the EP's (forget_ep)
  stop_holding();
  path_.stop_draining(*this);
  draining_ = false;
  first_send_ = FirstSend::undecided;
  flush_held_ = false;
}

bool UserQueuePair::must_hold() {
  if (first_send_ == FirstSend::undecided) {
    if (ep_.active || !path_.iwarp()) {
      first_send_ = FirstSend::open;
      return false;
    }
    first_send_ = FirstSend::hold;
    // The first receive may be in the CQ already, not yet taken by the consumer.
    if (ep_.recv_evd != nullptr) path_.poll_only(*ep_.recv_evd);
  }
  return first_send_ == FirstSend::hold;
}

void UserQueuePair::hold(std::uint64_t id, const ibv_send_wr &wr) {
  HeldRequest &h = held_.emplace_back();
  h.id = id;
  h.wr = wr;
  h.sge.assign(wr.sg_list, wr.sg_list + wr.num_sge);
  if (held_.size() == 1) {
    held_since_ = std::chrono::steady_clock::now();
    path_.start_holding(*this);
  }
}

void UserQueuePair::stop_holding() { path_.stop_holding(*this); }

void UserQueuePair::post_held() {
  first_send_ = FirstSend::open;
  std::size_t i = 0;
  for (; i < held_.size(); ++i) {
    HeldRequest &h = held_[i];
    h.wr.sg_list = h.sge.data();
    ibv_send_wr *bad = nullptr;
    if (ibv_post_send(qp_, &h.wr, &bad) != 0) break;
  }
  flush_held(i);
}

void UserQueuePair::flush_held(std::size_t from) {
  // Taken from the member first: complete_flushed() may come back here through completed().
  std::vector<HeldRequest> rest;
  rest.swap(held_);
  stop_holding();
  flush_held_ = false;
  for (std::size_t i = from; i < rest.size(); ++i) path_.complete_flushed(rest[i].id);
}

void UserQueuePair::service_hold() {
  if (ep_.recv_evd != nullptr) path_.poll_only(*ep_.recv_evd);  // may release (completed())
  if (held_.empty()) return;
  const kdat::EpState state = endpoint_.state();
  if (flush_held_ || kdat::has_ended(state))
    flush_held();
  else if (!kdat::allows(state, kdat::Stimulus::POST_SEND) ||
           std::chrono::steady_clock::now() - held_since_ >= kFirstSendHold)
    post_held();  // a disconnect waits for them, or the peer did not speak first
}

bool UserQueuePair::disconnect_after_requests() {
  if (ep_.request_evd != nullptr) path_.poll_only(*ep_.request_evd);  // completed() counts down
  if (request_ == 0) return false;
  ep_.user->disconnect_after_requests();
  draining_ = true;
  last_request_done_ = std::chrono::steady_clock::now();
  path_.start_draining(*this);
  return true;
}

void UserQueuePair::service_drain() {
  if (ep_.request_evd != nullptr) path_.poll_only(*ep_.request_evd);
  if (!kdat::is_draining(endpoint_.state())) {
    path_.stop_draining(*this);  // an abrupt disconnect or the peer ended it: no DREQ is held
    draining_ = false;
    return;
  }
  if (request_ > 0 && std::chrono::steady_clock::now() - last_request_done_ < kDrainLimit) return;
  path_.stop_draining(*this);
  draining_ = false;
  try {
    ep_.user->requests_done();
  } catch (const kdat::Error &) {
    // The EP ended meanwhile (freed, device gone): no DREQ is held any more.
  }
}

// An atomic that verbs would take but that could only complete in error is refused here: the
// device must have atomics, the original value is 8 bytes written into an LMR of this IA that
// allows local writes, and the remote address is 8-aligned (IB atomics work on aligned 64-bit
// words; rxe answers a misaligned one with an error).  Whether the peer's memory allows remote
// atomics only the peer knows: if not, the request completes with DAT_DTO_ERR_REMOTE_ACCESS.
void UserQueuePair::check_atomic(const Request &r) {
  const auto limits = path_.device_limits();
  if (!limits || !limits->atomics) fail(DAT_NOT_IMPLEMENTED);
  const DAT_LMR_TRIPLET &local = r.iov[0];
  if (local.segment_length != sizeof(std::uint64_t)) fail(DAT_LENGTH_ERROR);
  const Lmr *lmr = lmr_holding(*ep_.ia, local);
  if (lmr == nullptr || (access_flags(lmr->privileges) & IBV_ACCESS_LOCAL_WRITE) == 0)
    fail(DAT_PRIVILEGES_VIOLATION, DAT_PRIVILEGES_WRITE);
  if (r.remote->virtual_address % sizeof(std::uint64_t) != 0)
    fail(DAT_INVALID_PARAMETER, r.arg_remote);
}

// A bind takes a request slot (two for a type 2 window's rebind: the old binding is invalidated
// first), goes where DAT requests may (the state table), and completes on the request EVD.
DAT_RETURN UserQueuePair::bind(Rmr &rmr, const Lmr *lmr, const DAT_LMR_TRIPLET &target,
                               DAT_MEM_PRIV_FLAGS privileges, DAT_RMR_COOKIE cookie,
                               DAT_COMPLETION_FLAGS flags, DAT_RMR_CONTEXT &context) {
  if (ud_) fail(DAT_MODEL_NOT_SUPPORTED);  // no memory windows on a UD QP
  const auto state = static_cast<unsigned>(endpoint_.state_inline());
  if (state >= KDAT_EP_STATE_LIMIT || !kPostPermissions.send[state])
    fail(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY);
  Evd *evd = ep_.request_evd;
  if (evd == nullptr) fail(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_EVD_REQUEST);
  auto &window = static_cast<VerbsMw &>(*rmr.window);
  const bool unbind = target.segment_length == 0;
  const bool suppress = (flags & DAT_COMPLETION_SUPPRESS_FLAG) != 0;
  // A peer's send may have invalidated a type 2 window already: its receive says so (see
  // window_invalidated), and is taken first, since rxe on Debian's 6.1 kernel dereferences a
  // null QP when a type 2 window that is no longer bound is invalidated again.
  if (window.type2() && window.bound() && rmr.bound_ep != nullptr &&
      rmr.bound_ep->recv_evd != nullptr)
    path_.poll_only(*rmr.bound_ep->recv_evd);
  if (window.type2() && unbind && !window.bound()) {
    // nothing to end: the unbind is complete already
    context = window.rkey();
    if (!suppress) VerbsDataPath::complete_bind_now(*evd, rmr, cookie);
    return DAT_SUCCESS;
  }
  const std::size_t slots = window.type2() && window.bound() && !unbind ? 2 : 1;
  const auto max_dtos = static_cast<std::size_t>(ep_.attr.max_request_dtos);
  if (request_ + slots > max_dtos) {
    (void)path_.poll_completions(*evd);
    if (request_ + slots > max_dtos) fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
  }
  ibv_mw_bind_info info{};
  if (!unbind) {
    info.mr = static_cast<const VerbsMr &>(*lmr->region).mr();
    info.addr = target.virtual_address;
    info.length = target.segment_length;
    info.mw_access_flags = static_cast<unsigned>(window_access(privileges));
  } else {
    // A 0-byte bind still names an MR: providers read its lkey whatever the length (rxe's
    // and others' post paths), and the LMR bound last may be gone.
    info.mr = path_.unbind_anchor();
  }
  const unsigned signaled = IBV_SEND_SIGNALED;
  int rc = 0;
  if (!window.type2()) {
    // Type 1: verbs posts the bind and gives the window its next key.
    ibv_mw_bind bind{};
    bind.wr_id = path_.remember_bind(ep_, *evd, rmr, cookie, Op::bind, suppress);
    bind.send_flags = signaled;
    bind.bind_info = info;
    rc = ibv_bind_mw(qp_, window.mw(), &bind);
    if (rc != 0) path_.drop(bind.wr_id);
  } else {
    // Type 2: an invalidate of the current key (an unbind, or before a rebind; a rebind's
    // invalidate reports nothing unless it fails), then the bind under the next key.
    std::array<ibv_send_wr, 2> wr{};
    std::size_t n = 0;
    if (window.bound()) {
      wr[n].wr_id =
          path_.remember_bind(ep_, *evd, rmr, cookie, Op::invalidate, unbind ? suppress : true);
      wr[n].opcode = IBV_WR_LOCAL_INV;
      wr[n].send_flags = signaled;
      wr[n].invalidate_rkey = window.rkey();
      ++n;
    }
    if (!unbind) {
      wr[n].wr_id = path_.remember_bind(ep_, *evd, rmr, cookie, Op::bind, suppress);
      wr[n].opcode = IBV_WR_BIND_MW;
      wr[n].send_flags = signaled;
      wr[n].bind_mw.mw = window.mw();
      wr[n].bind_mw.rkey = ibv_inc_rkey(window.rkey());
      wr[n].bind_mw.bind_info = info;
      ++n;
    }
    if (n == 2) wr[0].next = &wr[1];
    ibv_send_wr *bad = nullptr;
    rc = ibv_post_send(qp_, wr.data(), &bad);
    if (rc != 0) {
      // verbs took the requests before `bad` (none, on rxe, which checks a list whole; none if
      // a provider leaves `bad` unset)
      std::size_t taken = 0;
      while (bad != nullptr && taken < n && &wr[taken] != bad) ++taken;
      for (std::size_t i = taken; i < n; ++i) path_.drop(wr[i].wr_id);
      request_ += taken;
      // an invalidate that was taken ends the binding though the bind after it was refused: a
      // second invalidate of the window would be the one rxe cannot take (see above)
      if (taken > 0 && wr[0].opcode == IBV_WR_LOCAL_INV) window.posted(std::nullopt);
    } else {
      window.posted(unbind ? std::nullopt : std::optional(wr[n - 1].bind_mw.rkey));
    }
  }
  if (rc != 0) {
    if (rc == ENOMEM) fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
    fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  }
  request_ += slots;
  context = window.rkey();
  return DAT_SUCCESS;
}

// A DAT post: the EP's handle checked first (a bad handle is DAT_INVALID_HANDLE whatever the
// data path can do), then the request posted in the same function (inline: the post is the
// whole cost of a data-path call; the compiler is told so, as post() is too large for it to
// inline on its own).
template <Op kOp>
[[gnu::always_inline]] inline DAT_RETURN post_to(DAT_EP_HANDLE handle, const Request &r) {
  return guard([&]() __attribute__((always_inline))->DAT_RETURN {
    const ProviderGuard lock(provider_lock);
    auto &ep = lookup_as<Ep>(handle, DAT_INVALID_HANDLE_EP);
    if (!ep.user) return error(DAT_NOT_IMPLEMENTED);  // its QP is the kernel's
    return static_cast<UserQueuePair &>(*ep.qp).post<kOp>(r);
  });
}

// dat_ep_post_rdma_read's and _write's arguments: segments, iov, cookie, remote, flags.
Request rdma_request(DAT_COUNT n, DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
                     const DAT_RMR_TRIPLET *remote, DAT_COMPLETION_FLAGS flags) {
  return {.segments = n,
          .iov = iov,
          .cookie = cookie,
          .remote = remote,
          .flags = flags,
          .arg_flags = DAT_INVALID_ARG6};
}

}  // namespace

// The standard posts' arguments: segments, iov, cookie, flags (send, recv) or segments, iov,
// cookie, remote, flags (RDMA) after the EP.
DAT_RETURN post_send(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
                     DAT_COMPLETION_FLAGS flags) {
  return post_to<Op::send>(ep, {.segments = n, .iov = iov, .cookie = cookie, .flags = flags});
}

DAT_RETURN post_send_with_invalidate(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
                                     DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags,
                                     DAT_BOOLEAN invalidate, DAT_RMR_CONTEXT rmr_context) {
  if (invalidate == DAT_FALSE) return post_send(ep, n, iov, cookie, flags);
  return post_to<Op::send_with_invalidate>(
      ep, {.segments = n, .iov = iov, .cookie = cookie, .flags = flags, .immed = rmr_context});
}

DAT_RETURN post_recv(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
                     DAT_COMPLETION_FLAGS flags) {
  return post_to<Op::recv>(ep, {.segments = n, .iov = iov, .cookie = cookie, .flags = flags});
}

DAT_RETURN post_rdma_read(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
                          DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
                          DAT_COMPLETION_FLAGS flags) {
  return post_to<Op::rdma_read>(ep, rdma_request(n, iov, cookie, remote, flags));
}

DAT_RETURN post_rdma_write(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
                           DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
                           DAT_COMPLETION_FLAGS flags) {
  return post_to<Op::rdma_write>(ep, rdma_request(n, iov, cookie, remote, flags));
}

std::unique_ptr<DataPath> make_data_path(Ia &ia) { return std::make_unique<VerbsDataPath>(ia); }

}  // namespace kdat::dapl
