// The provider's data path: memory registration, user-owned queue pairs and DTO completions.
// Everything that moves data goes through this one interface (one DataPath per IA).
//
// make_data_path gives the kernel-bypass data path: the IA's RDMA device opened with libibverbs
// (kdat::Verbs, one PD), every EP made with a PZ gets a user-owned RC QP (kdat::UserEndpoint)
// whose connection management kdat.ko drives, and every DTO EVD gets a CQ with a completion
// channel; posts go straight to the QP, completions are polled from the CQ into the EVD's local
// queue.  If the device cannot be opened by this process, PZs have no PD and EPs keep a
// kernel-owned QP whose posts answer DAT_NOT_IMPLEMENTED (connection management still works).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "provider.hpp"

namespace kdat::dapl {

// The atomics of the IB extensions (dat_ib_post_cmp_and_swap, dat_ib_post_fetch_and_add).
enum class AtomicOp { compare_and_swap, fetch_and_add };

// The DAT posts (the provider table's ep_post_send, _recv, _rdma_read and _rdma_write): the EP's
// handle is resolved beside the QP the request goes to, so a post is one function.  An EP
// without a user-owned QP answers DAT_NOT_IMPLEMENTED.
DAT_RETURN post_send(DAT_EP_HANDLE ep, DAT_COUNT segments, DAT_LMR_TRIPLET *iov,
                     DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags);
// dat_ep_post_send_with_invalidate: with invalidate TRUE the send also invalidates the peer's
// window `rmr_context` (its receive's event names it); with FALSE a plain send.
DAT_RETURN post_send_with_invalidate(DAT_EP_HANDLE ep, DAT_COUNT segments, DAT_LMR_TRIPLET *iov,
                                     DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags,
                                     DAT_BOOLEAN invalidate, DAT_RMR_CONTEXT rmr_context);
DAT_RETURN post_recv(DAT_EP_HANDLE ep, DAT_COUNT segments, DAT_LMR_TRIPLET *iov,
                     DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags);
DAT_RETURN post_rdma_read(DAT_EP_HANDLE ep, DAT_COUNT segments, DAT_LMR_TRIPLET *iov,
                          DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
                          DAT_COMPLETION_FLAGS flags);
DAT_RETURN post_rdma_write(DAT_EP_HANDLE ep, DAT_COUNT segments, DAT_LMR_TRIPLET *iov,
                           DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
                           DAT_COMPLETION_FLAGS flags);

// Per EP: the queue pair DTOs are posted to (the IB extensions' posts; the DAT ones above).
class QueuePair {
 public:
  virtual ~QueuePair() = default;
  // dat_ib_post_rdma_write_immed: an RDMA write whose 32-bit immediate data completes a receive
  // at the peer (DAT_IB_DTO_EVENT, DAT_IB_RDMA_WRITE_IMMED_DATA there).
  virtual DAT_RETURN post_rdma_write_immed(DAT_COUNT segments, DAT_LMR_TRIPLET *iov,
                                           DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
                                           DAT_UINT32 immed, DAT_COMPLETION_FLAGS flags) = 0;
  // An atomic on the 8 bytes at `remote`; their value before it lands in `local` (8 bytes).
  // compare_add: the value compared (compare-and-swap) or added; swap: the value stored if equal.
  virtual DAT_RETURN post_atomic(AtomicOp op, DAT_UINT64 compare_add, DAT_UINT64 swap,
                                 DAT_LMR_TRIPLET *local, DAT_DTO_COOKIE cookie,
                                 const DAT_RMR_TRIPLET *remote, DAT_COMPLETION_FLAGS flags) = 0;
  // dat_rmr_bind on this EP: binds the window of `rmr` to target.segment_length bytes of `lmr`
  // at target.virtual_address with `privileges` (remote read/write), or unbinds it (length 0,
  // `lmr` may be null); the bind's completion comes on the EP's request EVD as a
  // DAT_RMR_BIND_COMPLETION_EVENT.  `context`: the RMR context the window has once the bind
  // completes.  The checks that need no device (handles, PZs, bounds) are the caller's.
  virtual DAT_RETURN bind(Rmr & /*rmr*/, const Lmr * /*lmr*/, const DAT_LMR_TRIPLET & /*target*/,
                          DAT_MEM_PRIV_FLAGS /*privileges*/, DAT_RMR_COOKIE /*cookie*/,
                          DAT_COMPLETION_FLAGS /*flags*/, DAT_RMR_CONTEXT & /*context*/) {
    return error(DAT_NOT_IMPLEMENTED);
  }
  // dat_ep_disconnect(graceful) of a CONNECTED EP.  With requests in flight: the EP goes
  // DISCONNECT_PENDING, its DREQ held until they complete (dat_ep_disconnect(3DAT)), and true;
  // false: nothing to wait for, the caller disconnects as usual.
  virtual bool disconnect_after_requests() { return false; }
  // Posted receives / requests whose completions have not been taken from the CQ yet.
  [[nodiscard]] virtual std::size_t outstanding_recv() const { return 0; }
  [[nodiscard]] virtual std::size_t outstanding_request() const { return 0; }

  // UD EPs (DAT_IB_SERVICE_TYPE_UD); every other QP answers DAT_MODEL_NOT_SUPPORTED / nothing.
  // dat_ib_post_send_ud: a send of at most the port's MTU to the peer `ah` names (its AH, QPN;
  // the Q_Key is the one its exchange reported, or this QP's own for an AH made elsewhere).  It
  // completes as a DAT_IB_DTO_EVENT (DAT_IB_UD_SEND); receives as DAT_IB_UD_RECV, their length
  // counting the 40-byte GRH in front of the payload.
  virtual DAT_RETURN post_send_ud(DAT_COUNT /*segments*/, DAT_LMR_TRIPLET * /*iov*/,
                                  const DAT_IB_ADDR_HANDLE * /*ah*/, DAT_DTO_COOKIE /*cookie*/,
                                  DAT_COMPLETION_FLAGS /*flags*/) {
    return error(DAT_MODEL_NOT_SUPPORTED);
  }
  // An address handle (ibv_create_ah on the IA's PD) for the peer an exchange reported, kept with
  // its Q_Key until free_address_handle or this QP's destruction (before the QP's).  Failure
  // (DAT_INSUFFICIENT_RESOURCES) if verbs refuses it.
  [[nodiscard]] virtual ibv_ah *make_address_handle(const kdat::UdPeer & /*peer*/) {
    fail(DAT_MODEL_NOT_SUPPORTED);
  }
  // dat_ib_ud_ah_free: destroys `ah` if this QP made it (true), else leaves it (false).
  virtual bool free_address_handle(ibv_ah * /*ah*/) { return false; }
};

// Per SRQ (dat_srq_*): a verbs shared receive queue whose receives the QPs of its EPs consume.
// A receive's completion comes on the CQ of the consuming EP's recv EVD and names that EP.
class SharedReceiveQueue {
 public:
  virtual ~SharedReceiveQueue() = default;
  // dat_srq_post_recv (arguments after the SRQ: segments 2, iov 3).
  virtual DAT_RETURN post_recv(DAT_COUNT segments, DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie) = 0;
  // dat_srq_resize: the new max_recv_dtos (Failure if the device refuses it).
  virtual void resize(DAT_COUNT max_recv_dtos) = 0;
  // Receives posted whose completions have not been taken from a CQ yet.
  [[nodiscard]] virtual std::size_t outstanding() const = 0;
};

// Per PZ: the device's protection domain.  Destruction releases it (after the PZ's LMRs).
class ProtectionDomain {
 public:
  virtual ~ProtectionDomain() = default;
};

// Per LMR: registered memory.  Destruction deregisters it.
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
};

// Per RMR: a memory window.  Destruction deallocates it (bound or not).
class MemoryWindow {
 public:
  virtual ~MemoryWindow() = default;
};

// What the RDMA device allows (ibv_query_device, ibv_query_port of port 1), for ia_query and
// the EP defaults.  Counts are clamped to DAT_COUNT.
struct DeviceLimits {
  std::uint64_t max_mr_size = 0;
  std::int32_t max_qp = 0;
  std::int32_t max_qp_wr = 0;
  std::int32_t max_sge = 0;
  std::int32_t max_sge_rd = 0;
  std::int32_t max_cq = 0;
  std::int32_t max_cqe = 0;
  std::int32_t max_mr = 0;
  std::int32_t max_mw = 0;  // 0 also when the device cannot bind windows (no MEM_WINDOW cap)
  std::int32_t max_pd = 0;
  std::int32_t max_qp_rd_atom = 0;
  std::int32_t max_qp_init_rd_atom = 0;
  std::uint32_t max_msg_sz = 0;
  std::uint32_t active_mtu = 0;  // bytes; 0: unknown
  bool atomics = false;          // compare-and-swap and fetch-and-add (atomic_cap not NONE)
  bool iwarp = false;            // an iWARP RNIC: no IB CM, so no UD EPs
  bool mw_type2 = false;         // type 2 windows (dat_rmr_create_for_ep)
  std::int32_t max_srq = 0;
  std::int32_t max_srq_wr = 0;
  std::int32_t max_srq_sge = 0;
};

struct MemoryKeys {
  DAT_LMR_CONTEXT lmr_context = 0;
  DAT_RMR_CONTEXT rmr_context = 0;
  DAT_VLEN registered_length = 0;
  DAT_VADDR registered_address = 0;
};

// Per IA: protection domains, memory registration, queue pairs and DTO completions.
class DataPath {
 public:
  virtual ~DataPath() = default;
  // A short name for diagnostics ("kernel-qp").
  [[nodiscard]] virtual const char *name() const = 0;
  // The protection domain for a new PZ; nullptr when the device offers none to this process
  // (connection management does not need one).
  [[nodiscard]] virtual std::unique_ptr<ProtectionDomain> make_protection_domain() = 0;
  // The device's limits; opens the device (as make_protection_domain does) if that has not been
  // tried yet.  nullopt: this process cannot open it.
  [[nodiscard]] virtual std::optional<DeviceLimits> device_limits() = 0;
  // A user-owned QP EP for dat_ep_create with a PZ that has a PD; nullopt: use a kernel-QP EP.
  // `attr` is the consumer's (null: defaults); sizes the QP.  srq: its receives come from this
  // SRQ (dat_ep_create_with_srq).  Throws kdat::Error / Failure.
  [[nodiscard]] virtual std::optional<kdat::UserEndpoint> make_user_endpoint(
      Evd &connect, Evd *recv, Evd *request, const kdat::EpAttributes &attributes,
      const DAT_EP_ATTR *attr, Srq *srq) = 0;
  // dat_srq_create's queue, sized by srq.attr; Failure(DAT_MODEL_NOT_SUPPORTED) without a device
  // (or one without SRQs), Failure(DAT_INSUFFICIENT_RESOURCES) if the device refuses the size.
  [[nodiscard]] virtual std::unique_ptr<SharedReceiveQueue> make_shared_receive_queue(Srq &srq) = 0;
  // The QP for a new EP.  Never fails: a kernel-QP EP gets a QP whose posts answer
  // DAT_NOT_IMPLEMENTED, so connection management works on every EP.
  [[nodiscard]] virtual std::unique_ptr<QueuePair> make_queue_pair(Ep &ep) = 0;
  // dat_lmr_create for DAT_MEM_TYPE_VIRTUAL memory; throws Failure.
  [[nodiscard]] virtual std::unique_ptr<MemoryRegion> register_memory(Pz &pz, void *address,
                                                                      DAT_VLEN length,
                                                                      DAT_MEM_PRIV_FLAGS privileges,
                                                                      MemoryKeys &keys) = 0;
  // dat_rmr_create (per_ep false) and dat_rmr_create_for_ep (true): a memory window on the PZ's
  // PD, type 1 (any QP of the PD binds it and reaches it through its context: DAT_RMR_SCOPE_PZ)
  // or type 2 (bound by one QP, reached only through that QP: DAT_RMR_SCOPE_EP).  `context`:
  // its RMR context while unbound.  Failure(DAT_MODEL_NOT_SUPPORTED) on a device without
  // memory windows (max_mw 0; ia_query's max_rmrs says so).
  [[nodiscard]] virtual std::unique_ptr<MemoryWindow> make_memory_window(
      Pz &pz, bool per_ep, DAT_RMR_CONTEXT &context) = 0;
  // Moves completions of `evd`'s CQ into evd.local; returns how many.
  virtual std::size_t poll_completions(Evd &evd) = 0;
  // evd_dequeue's short way, for when nothing may come before the CQ's next completion
  // (evd.local and evd.held are empty): takes `evd`'s next completion event straight into `out`
  // instead of through evd.local.  1: `out` holds it; 0: the CQ is empty (polled); -1: not
  // taken this way (no CQ, or requests held: poll_completions must run).
  virtual int take_completion(Evd & /*evd*/, DAT_EVENT & /*out*/) { return -1; }
  // Before sleeping on `evd`: arms its CQ's notification (every time) and returns
  // the completion channel's fd (-1: the EVD has no CQ).  Completions that arrived before the
  // arming are moved to evd.local.  Completions polled into evd.local signal nobody: a sleeper
  // is woken by the channel's fd, which the first completion after the arming makes readable.
  virtual int arm(Evd &evd) = 0;
  // The channel's fd that arm() returned was readable after a sleep: takes one event.
  virtual void notified(Evd &evd) = 0;
  // Whether DTOs of `ep` posted to `evd`'s CQ have not completed yet (after a poll_completions:
  // once its QP is in ERR, their flushes are still to come).
  [[nodiscard]] virtual bool outstanding(const Ep &ep, Evd &evd) = 0;
  // Whether some EP holds requests back (rdma_connect(3)'s first-message rule on iWARP): they are
  // released by a poll of any of the IA's EVDs, so a waiter sleeps in short slices meanwhile.
  [[nodiscard]] virtual bool holding() const { return false; }
  // `ep` is freed or reset: forget its outstanding DTOs.
  virtual void forget_ep(Ep &ep) = 0;
  // `evd` is freed: destroy its CQ (its EPs are gone).
  virtual void forget_evd(Evd &evd) = 0;
};

// The data path for `ia` (see the top of this file).
[[nodiscard]] std::unique_ptr<DataPath> make_data_path(Ia &ia);

// Whether `ia` offers UD EPs (DAT_IB_ATTR_UD): a device this process opened (user QPs), not
// iWARP, and a kdat.ko of ABI 7 or later.
[[nodiscard]] bool offers_ud(Ia &ia);

}  // namespace kdat::dapl
