// Kernel bypass: UserEndpoints own real libibverbs QPs and CQs on the IA's rxe device; kdat.ko
// runs the CM.  Data moves with ibv_post_send/ibv_post_recv only; the QP's state is checked
// with ibv_query_qp after each step.
#include <infiniband/verbs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include <array>
#include <cstring>
#include <fstream>
#include <kdat/user_qp.hpp>
#include <vector>

#include "guest_util.hpp"
#include "timing.hpp"

namespace {

using namespace guest;
using kdat::CloseMode;
using kdat::EpState;

constexpr std::size_t kBuf = 4096;
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

// One side: its own /dev/kdat file, IA, EVDs, the device through libibverbs and a registered
// buffer.
struct UserSide : Side {
  UserSide() : verbs(ia), buf(kBuf), mr(verbs, buf.data(), buf.size(), kAccess) {}
  kdat::UserEndpoint ep(const kdat::UserQpAttributes &a = {}) {
    return kdat::UserEndpoint(ia, verbs, evd, a);
  }
  kdat::Verbs verbs;
  std::vector<std::uint8_t> buf;
  kdat::MemoryRegion mr;
};

void post_recv(kdat::UserEndpoint &ep, const kdat::MemoryRegion &mr, std::size_t offset,
               std::uint32_t length, std::uint64_t id) {
  ibv_sge sge{mr.address() + offset, length, mr.lkey()};
  ibv_recv_wr wr{};
  wr.wr_id = id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr *bad = nullptr;
  ASSERT_EQ(ibv_post_recv(ep.qp(), &wr, &bad), 0);
}

void post_send(kdat::UserEndpoint &ep, ibv_wr_opcode op, const kdat::MemoryRegion &mr,
               std::size_t offset, std::uint32_t length, std::uint64_t id,
               std::uint64_t remote_addr = 0, std::uint32_t rkey = 0) {
  ibv_sge sge{mr.address() + offset, length, mr.lkey()};
  ibv_send_wr wr{};
  wr.wr_id = id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = op;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr *bad = nullptr;
  ASSERT_EQ(ibv_post_send(ep.qp(), &wr, &bad), 0);
}

// Polls `cq` until `n` completions arrived (or the time is up).
std::vector<ibv_wc> poll(ibv_cq *cq, std::size_t n, std::chrono::milliseconds timeout = 10s) {
  std::vector<ibv_wc> got;
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (got.size() < n && std::chrono::steady_clock::now() < end) {
    ibv_wc wc{};
    const int r = ibv_poll_cq(cq, 1, &wc);
    if (r < 0) break;
    if (r == 1)
      got.push_back(wc);
    else
      std::this_thread::sleep_for(1ms);
  }
  return got;
}

// Nothing more in `cq` for a while.
bool cq_quiet(ibv_cq *cq) { return poll(cq, 1, 200ms).empty(); }

void fill(std::vector<std::uint8_t> &buf, std::size_t offset, std::size_t n, std::uint8_t seed) {
  for (std::size_t i = 0; i < n; i++) buf[offset + i] = static_cast<std::uint8_t>(seed + i * 7);
}

bool same(const std::vector<std::uint8_t> &a, std::size_t ao, const std::vector<std::uint8_t> &b,
          std::size_t bo, std::size_t n) {
  return std::memcmp(a.data() + ao, b.data() + bo, n) == 0;
}

// Connects client's `cep` to a new server UserEndpoint, both ESTABLISHED.
struct Pair {
  UserSide server, client;
  std::uint16_t port = next_port();
  kdat::Psp psp{server.ia, server.crevd, port};
  kdat::UserEndpoint cep = client.ep(reads());
  kdat::UserEndpoint sep = server.ep(reads());

  // RDMA reads need IRD/ORD: 0 (the default, as for every EP) allows none.
  static kdat::UserQpAttributes reads() {
    kdat::UserQpAttributes a;
    a.ep.max_rdma_read_in = 4;
    a.ep.max_rdma_read_out = 4;
    return a;
  }

  void connect() {
    cep.connect(remote(), port, 10s, kdat::as_private_data("hi"));
    kdat::ConnectionRequest cr(server.crevd,
                               expect_event(server.crevd, KDAT_DAT_CONNECTION_REQUEST_EVENT));
    EXPECT_EQ(kdat::to_string(cr.query().private_data), "hi");
    sep.accept(cr, kdat::as_private_data("ok"));
    // The passive QP is in RTS before the kernel accepted; the active one still in INIT.
    EXPECT_EQ(sep.qp_state(), IBV_QPS_RTS);
    EXPECT_EQ(sep.state(), EpState::COMPLETION_PENDING);
    EXPECT_EQ(cep.qp_state(), IBV_QPS_INIT);
    // The client's wait applies RTR/RTS and sends the RTU: the application sees ESTABLISHED only.
    const auto est = expect_event(client.evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED);
    EXPECT_EQ(est.private_data_string(), "ok");
    EXPECT_EQ(est.ep, cep.handle());
    expect_event(server.evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED);
    EXPECT_EQ(cep.state(), EpState::CONNECTED);
    EXPECT_EQ(sep.state(), EpState::CONNECTED);
    EXPECT_EQ(cep.qp_state(), IBV_QPS_RTS);
    EXPECT_EQ(sep.qp_state(), IBV_QPS_RTS);
  }
};

// A datagram of `len` bytes at `offset` of the side's buffer to the peer an exchange named, through
// an AH made from the event's address vector; waits for its completion.
void send_datagram(UserSide &side, kdat::UserEndpoint &ep, const kdat::UdPeer &peer,
                   std::size_t offset, std::uint32_t len, std::uint64_t id) {
  ASSERT_TRUE(peer.ah_valid);
  ibv_ah_attr attr = kdat::to_ibv_ah_attr(peer.ah);
  ibv_ah *ah = ibv_create_ah(side.verbs.pd(), &attr);
  ASSERT_NE(ah, nullptr) << std::strerror(errno);
  ibv_sge sge{side.mr.address() + offset, len, side.mr.lkey()};
  ibv_send_wr wr{};
  wr.wr_id = id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = peer.qpn;
  wr.wr.ud.remote_qkey = peer.qkey;
  ibv_send_wr *bad = nullptr;
  EXPECT_EQ(ibv_post_send(ep.qp(), &wr, &bad), 0);
  const auto sc = poll(ep.send_cq(), 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(sc[0].status);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
}

// A datagram arrived: the GRH's 40 bytes first (counted in byte_len), then the payload.
void expect_datagram(UserSide &to, kdat::UserEndpoint &ep, std::uint64_t id, UserSide &from,
                     std::size_t from_offset, std::uint32_t len, std::uint32_t src_qp) {
  const auto rc = poll(ep.recv_cq(), 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(rc[0].status);
  EXPECT_EQ(rc[0].wr_id, id);
  EXPECT_EQ(rc[0].byte_len, 40u + len);
  EXPECT_TRUE(rc[0].wc_flags & IBV_WC_GRH);
  EXPECT_EQ(rc[0].src_qp, src_qp);
  EXPECT_TRUE(same(to.buf, 40, from.buf, from_offset, len));
}

// UD (ABI 7): a UD QP is in RTS from its creation; each connect is an address exchange whose
// event names the peer (address vector, QPN, Q_Key) on both sides, and datagrams then go both
// ways to AHs made from those events.  A disconnect is abrupt, a reset brings the QP back to RTS.
TEST(UserQp, UdEndpointsExchangeAddressesAndSendDatagramsBothWays) {
  UserSide server, client;
  const std::uint16_t port = next_port();
  kdat::Psp psp{server.ia, server.crevd, port};
  kdat::UserQpAttributes ud;
  ud.ud = true;
  auto sep = server.ep(ud);
  auto cep = client.ep(ud);
  for (auto *ep : {&sep, &cep}) {
    EXPECT_TRUE(ep->ud());
    EXPECT_EQ(ep->qp_state(), IBV_QPS_RTS);
    EXPECT_EQ(ep->qkey(), 0x01234567u);  // rdma_cm's UDP port space's
    EXPECT_EQ(ep->state(), EpState::UNCONNECTED);
  }
  post_recv(sep, server.mr, 0, 40 + 64, 1);
  post_recv(cep, client.mr, 0, 40 + 64, 2);

  cep.connect(remote(), port, 10s, kdat::as_private_data("ud?"));
  kdat::ConnectionRequest cr(server.crevd,
                             expect_event(server.crevd, KDAT_DAT_CONNECTION_REQUEST_EVENT));
  EXPECT_EQ(kdat::to_string(cr.query().private_data), "ud?");
  sep.accept(cr, kdat::as_private_data("ud!"));
  const auto cev = expect_event(client.evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED);
  const auto sev = expect_event(server.evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED);
  ASSERT_TRUE(cev.ud.has_value());
  ASSERT_TRUE(sev.ud.has_value());
  EXPECT_FALSE(cev.ud->passive);
  EXPECT_TRUE(sev.ud->passive);
  EXPECT_EQ(cev.ud->qpn, sep.qp_num());
  EXPECT_EQ(sev.ud->qpn, cep.qp_num());
  EXPECT_EQ(cev.ud->qkey, sep.qkey());
  EXPECT_EQ(cev.private_data_string(), "ud!");
  EXPECT_EQ(sev.private_data_string(), "ud?");
  EXPECT_EQ(cep.state(), EpState::CONNECTED);
  EXPECT_EQ(sep.state(), EpState::CONNECTED);

  fill(client.buf, 1024, 16, 3);
  send_datagram(client, cep, *cev.ud, 1024, 16, 10);
  expect_datagram(server, sep, 1, client, 1024, 16, cep.qp_num());
  fill(server.buf, 2048, 64, 9);
  send_datagram(server, sep, *sev.ud, 2048, 64, 11);
  expect_datagram(client, cep, 2, server, 2048, 64, sep.qp_num());

  // graceful has nothing to drain on a UD EP: DISCONNECTED at once, the QP in ERR
  post_recv(cep, client.mr, 0, 40 + 64, 3);
  cep.disconnect(CloseMode::graceful);
  expect_event(client.evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED);
  EXPECT_EQ(cep.qp_state(), IBV_QPS_ERR);
  const auto flushed = poll(cep.recv_cq(), 1);
  ASSERT_EQ(flushed.size(), 1u);
  EXPECT_EQ(flushed[0].status, IBV_WC_WR_FLUSH_ERR);
  cep.reset();
  EXPECT_EQ(cep.state(), EpState::UNCONNECTED);
  EXPECT_EQ(cep.qp_state(), IBV_QPS_RTS);
  EXPECT_TRUE(cq_quiet(sep.recv_cq()));  // the client's end reached nothing of the server's
}

TEST(UserQp, FreshEndpointHasAnInitQpAndAUserQpRecord) {
  UserSide s;
  auto ep = s.ep();
  EXPECT_EQ(ep.qp_state(), IBV_QPS_INIT);
  EXPECT_EQ(ep.state(), EpState::UNCONNECTED);
  const auto rec = ep.endpoint().record();
  EXPECT_NE(rec.flags & KDAT_RECF_USER_QP, 0u);
  EXPECT_NE(ep.qp_num(), 0u);
  // The QP number is this EP's: a second EP of this file with it is refused.
  kdat_uqp_create arg{};
  arg.size = sizeof(arg);
  arg.ia = s.ia.handle();
  arg.connect_evd = s.evd.handle();
  arg.qp_num = ep.qp_num();
  ASSERT_EQ(::ioctl(s.device.fd(), KDAT_IOC_UQP_CREATE, &arg), 0);
  EXPECT_EQ(arg.status & KDAT_DAT_TYPE_MASK, KDAT_DAT_INVALID_PARAMETER);
  EXPECT_EQ(arg.ep, 0u);
}

// The kernel hands out local write and remote read/write for INIT; remote_atomic adds the peer's
// atomics (the DAT provider's IB extensions need them), and only then.
TEST(UserQp, RemoteAtomicAddsAtomicAccessToTheKernelsInitFlags) {
  UserSide s;
  const auto access = [](const kdat::UserEndpoint &ep) {
    ibv_qp_attr a{};
    ibv_qp_init_attr i{};
    EXPECT_EQ(ibv_query_qp(ep.qp(), &a, IBV_QP_ACCESS_FLAGS, &i), 0);
    return a.qp_access_flags;
  };
  auto plain = s.ep();
  EXPECT_EQ(access(plain), kAccess);
  kdat::UserQpAttributes a;
  a.remote_atomic = true;
  auto atomic = s.ep(a);
  EXPECT_EQ(atomic.qp_state(), IBV_QPS_INIT);
  EXPECT_EQ(access(atomic), kAccess | IBV_ACCESS_REMOTE_ATOMIC);
}

// An atomic from a peer completes only on a QP made with remote_atomic: compare-and-swap and
// fetch-and-add on the server's memory, the original values checked.
TEST(UserQp, AtomicsReachAQpMadeWithRemoteAtomic) {
  UserSide server, client;
  const std::uint16_t port = next_port();
  kdat::Psp psp{server.ia, server.crevd, port};
  kdat::UserQpAttributes a = Pair::reads();
  a.remote_atomic = true;
  kdat::UserEndpoint cep = client.ep(a);
  kdat::UserEndpoint sep = server.ep(a);
  // The server's target: an MR that allows remote atomics, 8-aligned.
  alignas(8) std::uint64_t target = 0x1111222233334444ULL;
  kdat::MemoryRegion tmr(server.verbs, &target, sizeof(target), kAccess | IBV_ACCESS_REMOTE_ATOMIC);
  cep.connect(remote(), port, 10s);
  kdat::ConnectionRequest cr(server.crevd,
                             expect_event(server.crevd, KDAT_DAT_CONNECTION_REQUEST_EVENT));
  sep.accept(cr);
  expect_event(client.evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED);
  expect_event(server.evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED);

  const auto atomic = [&](ibv_wr_opcode op, std::uint64_t compare_add, std::uint64_t swap,
                          std::uint64_t id) {
    ibv_sge sge{client.mr.address(), 8, client.mr.lkey()};
    ibv_send_wr wr{};
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.atomic.remote_addr = tmr.address();
    wr.wr.atomic.rkey = tmr.rkey();
    wr.wr.atomic.compare_add = compare_add;
    wr.wr.atomic.swap = swap;
    ibv_send_wr *bad = nullptr;
    ASSERT_EQ(ibv_post_send(cep.qp(), &wr, &bad), 0);
    const auto wc = poll(cep.send_cq(), 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc[0].status);
    EXPECT_EQ(wc[0].wr_id, id);
  };
  const auto original = [&] {
    std::uint64_t v = 0;
    std::memcpy(&v, client.buf.data(), sizeof(v));
    return v;
  };
  atomic(IBV_WR_ATOMIC_CMP_AND_SWP, 0x1111222233334444ULL, 0x5555666677778888ULL, 1);
  EXPECT_EQ(original(), 0x1111222233334444ULL);
  EXPECT_EQ(target, 0x5555666677778888ULL);
  atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, 0x10, 0, 2);
  EXPECT_EQ(original(), 0x5555666677778888ULL);
  EXPECT_EQ(target, 0x5555666677778898ULL);
  cep.disconnect(CloseMode::abrupt);
  expect_event(client.evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED);
  expect_event(server.evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED);
}

TEST(UserQp, SendRecvRdmaWriteAndReadWithVerifiedBytesThenGracefulDisconnect) {
  Pair p;
  // Receives posted before the connection exists (the QP is in INIT from creation).
  post_recv(p.sep, p.server.mr, 0, 256, 1);
  post_recv(p.sep, p.server.mr, 256, 256, 2);  // stays posted: flushed at the end
  post_recv(p.cep, p.client.mr, 512, 64, 3);   // stays posted: flushed at the end
  p.connect();

  // send/recv
  fill(p.client.buf, 0, 200, 11);
  post_send(p.cep, IBV_WR_SEND, p.client.mr, 0, 200, 10);
  auto sc = poll(p.cep.send_cq(), 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(sc[0].status);
  EXPECT_EQ(sc[0].wr_id, 10u);
  auto rc = poll(p.sep.recv_cq(), 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(rc[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(rc[0].wr_id, 1u);
  EXPECT_EQ(rc[0].byte_len, 200u);
  EXPECT_TRUE(same(p.server.buf, 0, p.client.buf, 0, 200));

  // RDMA write: client's bytes into the server's buffer at 1024
  fill(p.client.buf, 1024, 1000, 77);
  post_send(p.cep, IBV_WR_RDMA_WRITE, p.client.mr, 1024, 1000, 11, p.server.mr.address() + 1024,
            p.server.mr.rkey());
  sc = poll(p.cep.send_cq(), 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(sc[0].status);
  EXPECT_EQ(sc[0].opcode, IBV_WC_RDMA_WRITE);
  EXPECT_TRUE(same(p.server.buf, 1024, p.client.buf, 1024, 1000));

  // The negotiated read depths reached both QPs (ORD = max_rd_atomic, IRD = max_dest_rd_atomic).
  for (auto *ep : {&p.cep, &p.sep}) {
    ibv_qp_attr a{};
    ibv_qp_init_attr i{};
    ASSERT_EQ(ibv_query_qp(ep->qp(), &a, IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC, &i),
              0);
    EXPECT_EQ(a.max_rd_atomic, 4u);
    EXPECT_EQ(a.max_dest_rd_atomic, 4u);
    EXPECT_EQ(ep->endpoint().query().attributes.max_rdma_read_out, 4u);
  }
  {
    // Both sides retransmit after kdat's ACK timeout (module parameter ack_timeout, not the
    // CM's 19 on RoCE: 2.1 s a lost packet), with kdat's default of 6 retries (rxe retries 7
    // forever).
    unsigned timeout = 0;
    std::ifstream("/sys/module/kdat/parameters/ack_timeout") >> timeout;
    ASSERT_GE(timeout, 1u);
    ASSERT_LE(timeout, 30u);
    for (auto *ep : {&p.cep, &p.sep}) {
      ibv_qp_attr a{};
      ibv_qp_init_attr i{};
      ASSERT_EQ(ibv_query_qp(ep->qp(), &a, IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT, &i), 0);
      EXPECT_EQ(a.timeout, timeout);
      EXPECT_EQ(a.retry_cnt, 6u);
    }
  }
  {
    // ...and each QP targets the other: dest QPN is the peer's QP.
    ibv_qp_attr a{};
    ibv_qp_init_attr i{};
    ASSERT_EQ(ibv_query_qp(p.cep.qp(), &a, IBV_QP_DEST_QPN, &i), 0);
    EXPECT_EQ(a.dest_qp_num, p.sep.qp_num());
    ASSERT_EQ(ibv_query_qp(p.sep.qp(), &a, IBV_QP_DEST_QPN, &i), 0);
    EXPECT_EQ(a.dest_qp_num, p.cep.qp_num());
  }

  // RDMA read: the server's bytes at 3000 into the client's buffer at 2048
  fill(p.server.buf, 3000, 900, 201);
  std::memset(p.client.buf.data() + 2048, 0, 900);
  post_send(p.cep, IBV_WR_RDMA_READ, p.client.mr, 2048, 900, 12, p.server.mr.address() + 3000,
            p.server.mr.rkey());
  sc = poll(p.cep.send_cq(), 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(sc[0].status);
  EXPECT_EQ(sc[0].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(sc[0].byte_len, 900u);
  EXPECT_TRUE(same(p.client.buf, 2048, p.server.buf, 3000, 900));

  // Server to client too (a send into the client's posted receive would consume it: use write).
  fill(p.server.buf, 3900, 100, 3);
  post_send(p.sep, IBV_WR_RDMA_WRITE, p.server.mr, 3900, 100, 20, p.client.mr.address() + 3900,
            p.client.mr.rkey());
  sc = poll(p.sep.send_cq(), 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(same(p.client.buf, 3900, p.server.buf, 3900, 100));

  // Graceful: DREQ, the peer answers, both end DISCONNECTED and both QPs in ERR.
  p.cep.disconnect(CloseMode::graceful);
  EXPECT_TRUE(p.cep.state() == EpState::DISCONNECT_PENDING ||
              p.cep.state() == EpState::DISCONNECTED);
  expect_event(p.client.evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED);
  EXPECT_EQ(p.cep.state(), EpState::DISCONNECTED);
  EXPECT_EQ(p.cep.qp_state(), IBV_QPS_ERR);
  expect_event(p.server.evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED);
  EXPECT_EQ(p.sep.state(), EpState::DISCONNECTED);
  EXPECT_EQ(p.sep.qp_state(), IBV_QPS_ERR);
  // The receives still posted come back flushed, in the CQ, once each.
  rc = poll(p.sep.recv_cq(), 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(rc[0].wr_id, 2u);
  rc = poll(p.cep.recv_cq(), 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(rc[0].wr_id, 3u);
  EXPECT_TRUE(cq_quiet(p.sep.recv_cq()));
  EXPECT_TRUE(cq_quiet(p.cep.send_cq()));

  // reset: UNCONNECTED with a fresh INIT QP, and it connects again.
  p.cep.reset();
  p.sep.reset();
  EXPECT_EQ(p.cep.state(), EpState::UNCONNECTED);
  EXPECT_EQ(p.cep.qp_state(), IBV_QPS_INIT);
  EXPECT_EQ(p.sep.qp_state(), IBV_QPS_INIT);
  post_recv(p.sep, p.server.mr, 0, 64, 30);
  p.connect();
  fill(p.client.buf, 0, 64, 99);
  post_send(p.cep, IBV_WR_SEND, p.client.mr, 0, 64, 31);
  ASSERT_EQ(poll(p.cep.send_cq(), 1).size(), 1u);
  rc = poll(p.sep.recv_cq(), 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(same(p.server.buf, 0, p.client.buf, 0, 64));
}

TEST(UserQp, AbruptDisconnectFlushesPostedReceivesOnBothSides) {
  Pair p;
  p.connect();
  for (std::uint64_t i = 0; i < 3; i++) post_recv(p.sep, p.server.mr, i * 64, 64, 100 + i);
  for (std::uint64_t i = 0; i < 2; i++) post_recv(p.cep, p.client.mr, i * 64, 64, 200 + i);

  p.sep.disconnect(CloseMode::abrupt);
  // Abrupt: DISCONNECTED at once and the QP in ERR before disconnect() returned.
  EXPECT_EQ(p.sep.state(), EpState::DISCONNECTED);
  EXPECT_EQ(p.sep.qp_state(), IBV_QPS_ERR);
  auto rc = poll(p.sep.recv_cq(), 3);
  ASSERT_EQ(rc.size(), 3u);
  for (std::size_t i = 0; i < 3; i++) {
    EXPECT_EQ(rc[i].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(rc[i].wr_id, 100 + i);
  }
  expect_event(p.server.evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED);

  // The peer learns it from the kernel; libkdat moves its QP when it hands out the event.
  expect_event(p.client.evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED);
  EXPECT_EQ(p.cep.state(), EpState::DISCONNECTED);
  EXPECT_EQ(p.cep.qp_state(), IBV_QPS_ERR);
  rc = poll(p.cep.recv_cq(), 2);
  ASSERT_EQ(rc.size(), 2u);
  for (std::size_t i = 0; i < 2; i++) {
    EXPECT_EQ(rc[i].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(rc[i].wr_id, 200 + i);
  }
  // A send posted now fails at once (flushed): no data leaves a QP in ERR.
  post_send(p.cep, IBV_WR_SEND, p.client.mr, 0, 8, 300);
  const auto sc = poll(p.cep.send_cq(), 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, IBV_WC_WR_FLUSH_ERR);
  // Disconnecting again is the table's NOOP.
  EXPECT_NO_THROW(p.cep.disconnect(CloseMode::graceful));
}

// dat_ep_disconnect(3DAT)'s graceful order for a user QP: disconnect_after_requests() holds the
// DREQ while the process's requests are in flight (here a send that waits for the peer's receive:
// RNR, retried for ever), so the peer hears nothing and the send completes; requests_done() sends
// it.
TEST(UserQp, DisconnectAfterRequestsHoldsTheDreqUntilRequestsDone) {
  Pair p;
  p.connect();
  fill(p.client.buf, 0, 64, 9);
  post_send(p.cep, IBV_WR_SEND, p.client.mr, 0, 64, 400);  // no receive posted at the server yet
  p.cep.disconnect_after_requests();
  EXPECT_EQ(p.cep.state(), EpState::DISCONNECT_PENDING);
  EXPECT_EQ(p.cep.qp_state(), IBV_QPS_RTS);
  // A second graceful disconnect is the table's NOOP: still held.
  EXPECT_NO_THROW(p.cep.disconnect(CloseMode::graceful));
  EXPECT_FALSE(p.server.evd.try_wait(1, 300ms).has_value()) << "the DREQ went out";
  EXPECT_EQ(p.sep.state(), EpState::CONNECTED);
  EXPECT_EQ(p.cep.state(), EpState::DISCONNECT_PENDING);

  post_recv(p.sep, p.server.mr, 0, 64, 500);
  const auto sc = poll(p.cep.send_cq(), 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, IBV_WC_SUCCESS);
  const auto rc = poll(p.sep.recv_cq(), 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(same(p.client.buf, 0, p.server.buf, 0, 64));
  EXPECT_EQ(p.cep.state(), EpState::DISCONNECT_PENDING) << "nothing but requests_done() ends it";

  p.cep.requests_done();
  expect_event(p.server.evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED);
  expect_event(p.client.evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED);
  EXPECT_EQ(p.cep.state(), EpState::DISCONNECTED);
  EXPECT_EQ(p.cep.qp_state(), IBV_QPS_ERR);
  // Once the connection is over it does nothing.
  EXPECT_NO_THROW(p.cep.requests_done());
}

// An abrupt disconnect ends a held graceful one at once; the EP's next connection holds again.
TEST(UserQp, AbruptDisconnectEndsAHeldDreqAndTheResetEpHoldsAgain) {
  Pair p;
  p.connect();
  post_send(p.cep, IBV_WR_SEND, p.client.mr, 0, 64, 401);
  p.cep.disconnect_after_requests();
  EXPECT_EQ(p.cep.state(), EpState::DISCONNECT_PENDING);
  p.cep.disconnect(CloseMode::abrupt);
  EXPECT_EQ(p.cep.state(), EpState::DISCONNECTED);
  expect_event(p.client.evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED);
  expect_event(p.server.evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED);
  const auto sc = poll(p.cep.send_cq(), 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_NO_THROW(p.cep.requests_done());  // late: nothing held any more

  // The same client EP again, to a new server EP: held until requests_done(), as the first time.
  p.cep.reset();
  p.sep = p.server.ep(Pair::reads());
  p.connect();
  p.cep.disconnect_after_requests();
  EXPECT_FALSE(p.server.evd.try_wait(1, 300ms).has_value()) << "the DREQ went out";
  p.cep.requests_done();
  expect_event(p.server.evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED);
  expect_event(p.client.evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED);
}

TEST(UserQp, ConnectToANonListeningPortFailsAndTheQpGoesToErr) {
  UserSide s;
  auto ep = s.ep();
  post_recv(ep, s.mr, 0, 64, 1);
  // Nobody listens: the peer's CM (our own host) rejects the REQ.  The timeout is long so that
  // no load lets it fire before the reject arrives.
  ep.connect(remote(), next_port(), 20s);
  const auto ev = s.evd.wait(1, 30s);
  EXPECT_EQ(ev.number, KDAT_DAT_CONNECTION_EVENT_NON_PEER_REJECTED) << ev.name();
  EXPECT_EQ(ep.state(), EpState::DISCONNECTED);
  EXPECT_EQ(ep.qp_state(), IBV_QPS_ERR);
  const auto rc = poll(ep.recv_cq(), 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, IBV_WC_WR_FLUSH_ERR);
}

TEST(UserQp, ConnectTimeoutToASilentHostIsTimedOut) {
  // No neighbour at the address: address resolution gives up only after 2 s, so the 300 ms
  // timeout ends the attempt first, never early, and on time per the control.
  UserSide s;
  EXPECT_TRUE(judge_on_time(
      300ms,
      [&] {
        auto ep = s.ep();
        const auto t0 = Clock::now();  // the timeout starts in connect()
        ep.connect(kdat::Address::parse("192.0.2.99"), next_port(), 300ms);
        const auto ev = s.evd.wait(1, 20s);
        const auto took = Clock::now() - t0;
        EXPECT_EQ(ev.number, KDAT_DAT_CONNECTION_EVENT_TIMED_OUT) << ev.name();
        EXPECT_EQ(ep.state(), EpState::DISCONNECTED);
        EXPECT_EQ(ep.qp_state(), IBV_QPS_ERR);
        return took;
      },
      "the connect timeout"));
}

TEST(UserQp, TheConnectTimeoutStillRunsAfterTheRepUntilTheRtu) {
  // The REP arrives but nobody takes the client's events before its timeout: TIMED_OUT, the
  // server's accept fails, and the late internal event is consumed without effect.
  Pair p;
  p.cep.connect(remote(), p.port, 400ms);
  kdat::ConnectionRequest cr(p.server.crevd,
                             expect_event(p.server.crevd, KDAT_DAT_CONNECTION_REQUEST_EVENT));
  p.sep.accept(cr);
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(p.cep.state(), EpState::DISCONNECTED);
  const auto ev = expect_event(p.client.evd, KDAT_DAT_CONNECTION_EVENT_TIMED_OUT);
  EXPECT_EQ(ev.ep, p.cep.handle());
  EXPECT_EQ(p.cep.qp_state(), IBV_QPS_ERR);
  EXPECT_FALSE(p.client.evd.try_wait(1, 300ms).has_value());  // one outcome only
  const auto sev = p.server.evd.wait(1, 20s);
  EXPECT_EQ(sev.number, KDAT_DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR) << sev.name();
  EXPECT_EQ(p.sep.state(), EpState::DISCONNECTED);
  EXPECT_EQ(p.sep.qp_state(), IBV_QPS_ERR);
}

TEST(UserQp, RefusedAcceptLeavesTheConnectedQpAlone) {
  // Accepting on an EP the table refuses (CONNECTED already) fails before the QP is touched.
  Pair p;
  p.connect();
  UserSide other;
  auto oep = other.ep();
  oep.connect(remote(), p.port, 10s);
  kdat::ConnectionRequest cr(p.server.crevd,
                             expect_event(p.server.crevd, KDAT_DAT_CONNECTION_REQUEST_EVENT));
  EXPECT_EQ(error_type([&] { p.sep.accept(cr); }), KDAT_DAT_INVALID_STATE);
  EXPECT_EQ(p.sep.state(), EpState::CONNECTED);
  EXPECT_EQ(p.sep.qp_state(), IBV_QPS_RTS);  // the refused accept never touched it
  auto fresh = p.server.ep();
  fresh.accept(cr);
  expect_event(other.evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED);
  expect_event(p.server.evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED);
  EXPECT_EQ(fresh.qp_state(), IBV_QPS_RTS);
  EXPECT_EQ(oep.qp_state(), IBV_QPS_RTS);
}

TEST(UserQp, FreeingAConnectedUserEndpointDisconnectsThePeer) {
  Pair p;
  p.connect();
  post_recv(p.sep, p.server.mr, 0, 64, 7);
  { kdat::UserEndpoint gone = std::move(p.cep); }
  EXPECT_EQ(p.cep.handle(), 0u);
  expect_event(p.server.evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED);
  EXPECT_EQ(p.sep.qp_state(), IBV_QPS_ERR);
  const auto rc = poll(p.sep.recv_cq(), 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, IBV_WC_WR_FLUSH_ERR);
}

TEST(UserQp, EndpointsMayShareTheApplicationsCqs) {
  UserSide server, client;
  const auto port = next_port();
  kdat::Psp psp(server.ia, server.crevd, port);
  ibv_cq *shared = ibv_create_cq(server.verbs.context(), 32, nullptr, nullptr, 0);
  ASSERT_NE(shared, nullptr);
  {
    kdat::UserQpAttributes a;
    a.send_cq = shared;
    a.recv_cq = shared;
    auto s1 = server.ep(a);
    auto s2 = server.ep(a);
    EXPECT_EQ(s1.recv_cq(), shared);
    EXPECT_EQ(s2.send_cq(), shared);
    auto c1 = client.ep();
    auto c2 = client.ep();
    post_recv(s1, server.mr, 0, 64, 1);
    post_recv(s2, server.mr, 64, 64, 2);
    for (auto [c, s] : {std::pair{&c1, &s1}, std::pair{&c2, &s2}}) {
      c->connect(remote(), port, 10s);
      kdat::ConnectionRequest cr(server.crevd,
                                 expect_event(server.crevd, KDAT_DAT_CONNECTION_REQUEST_EVENT));
      s->accept(cr);
      expect_event(client.evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED);
      expect_event(server.evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED);
    }
    fill(client.buf, 0, 64, 5);
    post_send(c1, IBV_WR_SEND, client.mr, 0, 10, 1);
    post_send(c2, IBV_WR_SEND, client.mr, 0, 20, 2);
    const auto wc = poll(shared, 2);
    ASSERT_EQ(wc.size(), 2u);
    for (const auto &w : wc) {
      EXPECT_EQ(w.status, IBV_WC_SUCCESS);
      EXPECT_EQ(w.qp_num, w.wr_id == 1 ? s1.qp_num() : s2.qp_num());
      EXPECT_EQ(w.byte_len, w.wr_id == 1 ? 10u : 20u);
    }
  }  // the UserEndpoints go; the shared CQ is the application's
  EXPECT_EQ(ibv_destroy_cq(shared), 0);
}

// ---- against the kernel consumer kdat_echo -----------------------------------------------------

std::string echo_ko() {
  if (const char *path = std::getenv("KDAT_ECHO_KO")) return path;
  return env_or("KDAT_REPO", ".") + "/kmod/kdat_echo.ko";
}

std::string echo_param(const std::string &name) {
  std::ifstream in("/sys/module/kdat_echo/parameters/" + name);
  std::string value;
  std::getline(in, value);
  return value;
}

TEST(UserQp, UserQpConnectsToTheKernelEchoServiceAndDisconnects) {
  struct stat st {};
  if (::stat(echo_ko().c_str(), &st) != 0) GTEST_SKIP() << "no " << echo_ko();
  const auto port = next_port();
  const std::string cmd = "insmod " + echo_ko() + " listen_port=" + std::to_string(port);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  {
    UserSide client;
    auto ep = client.ep();
    ep.connect(remote(), port, 10s, kdat::as_private_data("uqp"));
    const auto ev = expect_event(client.evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED);
    EXPECT_EQ(ev.private_data_string(), "echo:uqp");
    EXPECT_EQ(ep.qp_state(), IBV_QPS_RTS);
    EXPECT_TRUE(eventually([] { return echo_param("established") == "1"; }));
    ep.disconnect(CloseMode::graceful);
    expect_event(client.evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED);
    EXPECT_EQ(ep.qp_state(), IBV_QPS_ERR);
    EXPECT_TRUE(eventually([] { return echo_param("disconnected") == "1"; }));
  }
  EXPECT_EQ(std::system("rmmod kdat_echo"), 0);
}

}  // namespace
