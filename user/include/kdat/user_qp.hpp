// Kernel bypass: an EP whose queue pair is a real libibverbs QP owned by the process.
//
// kdat.ko runs connection management for the QP in the kernel (rdma_cm with the QP's number);
// the EP's states are the kernel's (include/kdat/ep_table.h) and every connection event arrives
// on the connect EVD as for any Endpoint.  Data transfer never enters kdat: post sends, receives,
// RDMA writes and reads with ibv_post_send/ibv_post_recv on qp(), poll send_cq()/recv_cq(),
// register memory with MemoryRegion (ibv_reg_mr).  Link libibverbs for those calls.
//
// The QP's state follows the EP's: libkdat applies the attributes the kernel hands out
// (KDAT_IOC_UQP_ATTR, see include/kdat/uapi/kdat.h) with ibv_modify_qp:
//   RESET -> INIT  when the UserEndpoint is made and by reset(): receives may be posted at once;
//   INIT -> RTR -> RTS
//                  passive: inside accept(), before the kernel accepts;
//                  active: when the peer's REP arrives.  The kernel reports it as a kdat-internal
//                  event on the connect EVD; Evd::wait()/try_wait()/dequeue() consume it
//                  themselves (apply RTR and RTS, tell the kernel to send the RTU) and go on, so
//                  the application only ever sees CONNECTION_EVENT_ESTABLISHED.  So the active
//                  side must keep waiting on (or dequeuing from) its connect EVD, through libkdat,
//                  for the connection to complete; if nobody does, the connect times out.
//                  iWARP (siw): the kernel hands out nothing for RTR and RTS; the iWARP CM takes
//                  the QP by its number and moves it to RTS itself when the MPA exchange is done,
//                  and the active side gets ESTABLISHED directly (no REP step).
//   -> ERR         when the EP ends up DISCONNECTED: abrupt disconnect() does it before it
//                  returns; any other end (the peer's disconnect, graceful disconnect completing,
//                  BROKEN, a failed connect) when libkdat takes that connection event from the
//                  connect EVD -- before the event is handed to the application -- or when sync()
//                  sees it.  Posted requests then complete with IBV_WC_WR_FLUSH_ERR in the CQs.
// Graceful disconnect: the kernel cannot see a user QP's queues, so disconnect(graceful)'s
// DISCONNECT_PENDING lasts only for the DREQ/DREP exchange.  For dat_ep_disconnect(3DAT)'s order
// (the requests in flight complete, then the DREQ), call disconnect_after_requests() instead and
// requests_done() once their completions are in: the kernel holds the DREQ until then.
//
// UD (UserQpAttributes::ud, ABI 7; DAT's DAT_IB_SERVICE_TYPE_UD): the QP is a UD QP and the EP
// exchanges addresses instead of connecting.  RESET -> INIT -> RTR -> RTS all happen when the
// UserEndpoint is made and in reset(): the QP can send and receive from the start, and the CM
// never moves it.  Each connect() is one exchange (a SIDR request; several may run at once, also
// on a CONNECTED EP): its outcome is one connection event whose Event::ud names the peer -- its
// address vector (to_ibv_ah_attr, for ibv_create_ah), QPN and Q_Key -- with ESTABLISHED, or
// PEER_REJECTED, UNREACHABLE or TIMED_OUT.  accept() of a UD request answers at once and
// ESTABLISHED (Event::ud->passive) follows on the connect EVD.  Send with ibv_post_send's
// wr.ud = {an AH of the peer, its qpn, its qkey}; a receive's byte_len counts the 40-byte GRH in
// front of the payload.  disconnect() is always abrupt: the QP goes to ERR.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <kdat/endpoint.hpp>
#include <kdat/ia.hpp>
#include <memory>
#include <string>

namespace kdat {

class ConnectionRequest;
class Evd;

// The IA's RDMA device opened through libibverbs, with one protection domain.  Every UserEndpoint
// and MemoryRegion made with it share the PD.  Move-only; one thread at a time for construction
// and destruction, the verbs objects are as thread-safe as libibverbs makes them.
class Verbs {
 public:
  // Opens the device ia.query().device_name.  Error(DAT_PROVIDER_NOT_FOUND) if libibverbs does not
  // list it, DAT_INSUFFICIENT_RESOURCES if it cannot be opened or the PD allocated.
  explicit Verbs(const Ia &ia);
  Verbs(Verbs &&) noexcept = default;
  Verbs &operator=(Verbs &&) noexcept = default;
  Verbs(const Verbs &) = delete;
  Verbs &operator=(const Verbs &) = delete;
  ~Verbs();

  [[nodiscard]] ibv_context *context() const;
  [[nodiscard]] ibv_pd *pd() const;
  [[nodiscard]] const std::string &device_name() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Memory registered with ibv_reg_mr on a Verbs' PD.  Move-only.
class MemoryRegion {
 public:
  // access: IBV_ACCESS_* (local write, remote read/write for RDMA targets).
  MemoryRegion(const Verbs &verbs, void *address, std::size_t length, int access);
  MemoryRegion(MemoryRegion &&other) noexcept;
  MemoryRegion &operator=(MemoryRegion &&other) noexcept;
  MemoryRegion(const MemoryRegion &) = delete;
  MemoryRegion &operator=(const MemoryRegion &) = delete;
  ~MemoryRegion();

  [[nodiscard]] ibv_mr *get() const { return mr_; }
  [[nodiscard]] std::uint32_t lkey() const { return mr_->lkey; }
  [[nodiscard]] std::uint32_t rkey() const { return mr_->rkey; }
  [[nodiscard]] std::uint64_t address() const;
  [[nodiscard]] std::size_t length() const { return mr_->length; }

 private:
  ibv_mr *mr_ = nullptr;
};

// The address vector the kernel handed out (a UD peer's, UdPeer::ah; a transition's ah_attr) as
// libibverbs takes it: for ibv_create_ah, or an RC QP's RTR.
[[nodiscard]] ibv_ah_attr to_ibv_ah_attr(const kdat_uqp_ah &ah);

struct UserQpAttributes {
  EpAttributes ep;  // IRD/ORD, retry and RNR counts, flow control (the DTO fields are unused)
  // A UD QP (IBV_QPT_UD) instead of an RC one: see the top of this header.  The kernel refuses it
  // on iWARP (DAT_MODEL_NOT_SUPPORTED); RDMA reads and atomics (remote_atomic) do not apply.
  bool ud = false;
  std::uint32_t max_send_wr = 16;
  std::uint32_t max_recv_wr = 16;
  std::uint32_t max_send_sge = 1;
  std::uint32_t max_recv_sge = 1;
  std::uint32_t max_inline_data = 0;
  // If the device refuses max_inline_data, make the QP without inline data instead of failing
  // (UserEndpoint::max_inline_data() says what was granted).
  bool inline_optional = false;
  // Also accept the peer's atomics (IBV_ACCESS_REMOTE_ATOMIC, added to the local write and remote
  // read/write the kernel hands out for INIT).  They take the responder resources of RDMA reads:
  // ep.max_rdma_read_in must not be 0 for them, nor the peer's max_rdma_read_out.
  bool remote_atomic = false;
  // CQs to use instead of making two (several EPs may share one, as DAT EVDs do); not owned:
  // they must outlive the UserEndpoint.  nullptr: the UserEndpoint makes and owns its own.
  ibv_cq *send_cq = nullptr;
  ibv_cq *recv_cq = nullptr;
  // A shared receive queue the QP takes its receives from (not owned: it must outlive the
  // UserEndpoint); max_recv_wr and max_recv_sge are then unused.  Its completions still come on
  // recv_cq, naming this QP's number.  A reset's new QP (iWARP) shares it too.
  ibv_srq *srq = nullptr;
};

// An EP with its own RC (or UD) QP and two CQs (send, receive; its own unless UserQpAttributes
// names some) on the Verbs' device.  Destruction frees the kernel EP (a connected EP is torn
// down: the peer sees DISCONNECTED), then the QP and the CQs it owns.
// Move-only; a moved-from UserEndpoint has handle 0.
// Thread-safety: as Endpoint.  The QP may be posted to and the CQs polled from any thread (as
// libibverbs allows) while libkdat changes the QP's state from the thread that takes connection
// events.
class UserEndpoint {
 public:
  UserEndpoint(const Ia &ia, const Verbs &verbs, const Evd &connect_evd,
               const UserQpAttributes &attributes = {});
  UserEndpoint(UserEndpoint &&other) noexcept;
  UserEndpoint &operator=(UserEndpoint &&other) noexcept;
  UserEndpoint(const UserEndpoint &) = delete;
  UserEndpoint &operator=(const UserEndpoint &) = delete;
  ~UserEndpoint();

  [[nodiscard]] std::uint32_t handle() const;
  // The kernel EP: state(), record(), query(), can(), connect(), dup_connect() work as for any
  // Endpoint.  Use this class's disconnect(), reset() and accept() rather than the Endpoint's or
  // the ConnectionRequest's: they also move the QP.
  [[nodiscard]] Endpoint &endpoint();
  [[nodiscard]] const Endpoint &endpoint() const;
  [[nodiscard]] EpState state() const { return endpoint().state(); }

  [[nodiscard]] ibv_qp *qp() const;
  [[nodiscard]] ibv_cq *send_cq() const;
  [[nodiscard]] ibv_cq *recv_cq() const;
  [[nodiscard]] std::uint32_t qp_num() const;
  // The most bytes a send or RDMA write may carry with IBV_SEND_INLINE (the QP's granted
  // cap.max_inline_data; at least what was asked for, or 0).
  [[nodiscard]] std::uint32_t max_inline_data() const;
  // ibv_query_qp's view of the QP's state.
  [[nodiscard]] ibv_qp_state qp_state() const;
  // A UD QP: yes (UserQpAttributes::ud).
  [[nodiscard]] bool ud() const;
  // A UD QP's Q_Key, as the kernel's INIT set it (peers of kdat send with it); 0 for RC.
  [[nodiscard]] std::uint32_t qkey() const;

  // dat_ep_connect; the outcome arrives on the connect EVD (see the top of this header).
  void connect(const Address &remote, std::uint64_t conn_qual, Timeout timeout,
               PrivateDataView private_data = {});
  // dat_cr_accept of `cr` on this EP: the QP goes to RTR and RTS, then the kernel accepts.  If the
  // accept is refused the QP goes back to INIT (the EP is unchanged) and the Error is rethrown.
  // UD: the QP is in RTS already; the kernel accepts (a request of the other kind, UD on RC or RC
  // on UD: DAT_INVALID_PARAMETER, arg 2).
  void accept(ConnectionRequest &cr, PrivateDataView private_data = {});
  // dat_ep_disconnect.  Abrupt (UD: always): the QP is in ERR when this returns.
  void disconnect(CloseMode mode = CloseMode::abrupt);
  // A graceful disconnect whose DREQ waits: the EP is DISCONNECT_PENDING (if it was CONNECTED;
  // in any other state this is disconnect(graceful)) and the DREQ goes when requests_done() is
  // called.  An abrupt disconnect, the peer's disconnect or free() still end it at once.
  void disconnect_after_requests();
  // The requests that were in flight at disconnect_after_requests() have completed: the DREQ
  // goes now.  Nothing happens if no DREQ is held (the connection ended meanwhile).
  void requests_done();
  // dat_ep_reset (a DISCONNECTED EP becomes UNCONNECTED) and the QP RESET -> INIT (UD: on to
  // RTS).  On iWARP (siw cannot take a QP out of ERR) the EP gets a new QP instead: qp() and
  // qp_num() change.
  void reset();
  // Applies ERR if the kernel's state is DISCONNECTED and the QP is not in ERR yet.  libkdat calls
  // it on every connection event it takes for this EP; call it yourself if you do not wait on the
  // connect EVD.  Reads the shared table: a syscall only when the QP must change.
  void sync();

  // libkdat internals (the Evd's event filter).
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kdat
