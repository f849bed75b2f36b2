// vipl_guest_tests: the VIPL connection API (libvipl-kdat) against kdat.ko on Soft-RoCE, one test
// per semantic of VI-GM's VipConnectRequest documentation plus the server side, the peer model and
// bad input.  Run by tests/guest/test_vipl.py; not part of ctest.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <vipl.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <kdat/kdat.hpp>
#include <string>
#include <thread>
#include <vector>

#include "timing.hpp"
#include "wire.hpp"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string env_or(const char *name, const char *fallback) {
  const char *v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}
std::string netdev() { return env_or("KDAT_TEST_NETDEV", "kdat0"); }
std::string test_addr() { return env_or("KDAT_TEST_ADDR", "192.0.2.1"); }
constexpr const char *silent_host = "192.0.2.99";  // on kdat0's subnet, nobody there

std::vector<std::uint8_t> ipv4(const std::string &literal) {
  std::vector<std::uint8_t> out(4);
  EXPECT_EQ(inet_pton(AF_INET, literal.c_str(), out.data()), 1) << literal;
  return out;
}

// A discriminator no other test (or run) uses.
std::string disc(const char *what) {
  static std::atomic<unsigned> n{0};
  auto d = std::string(what) + "-" + std::to_string(::getpid() % 1000) + "-" +
           std::to_string(n++ % 1000);
  EXPECT_LE(d.size(), VIPL_KDAT_MAX_DISCRIMINATOR_LEN) << d;
  return d;
}

// A VIP_NET_ADDRESS with room for the largest one (so it can also be an output).
struct Addr {
  Addr() : buf(VIPL_KDAT_NET_ADDRESS_SIZE + 8, 0) {}
  Addr(const std::vector<std::uint8_t> &host, const std::string &d) : Addr() {
    get()->HostAddressLen = static_cast<VIP_UINT16>(host.size());
    get()->DiscriminatorLen = static_cast<VIP_UINT16>(d.size());
    std::memcpy(get()->HostAddress, host.data(), host.size());
    std::memcpy(get()->HostAddress + host.size(), d.data(), d.size());
  }
  VIP_NET_ADDRESS *get() { return reinterpret_cast<VIP_NET_ADDRESS *>(buf.data()); }
  std::vector<std::uint8_t> host() {
    return {get()->HostAddress, get()->HostAddress + get()->HostAddressLen};
  }
  std::string discriminator() {
    const auto *p = reinterpret_cast<const char *>(get()->HostAddress) + get()->HostAddressLen;
    return std::string(p, get()->DiscriminatorLen);
  }
  std::vector<std::uint8_t> buf;
};

#define EXPECT_VIP(expected, call) \
  EXPECT_STREQ(vipl_kdat_return_name(call), vipl_kdat_return_name(expected))
#define ASSERT_VIP(expected, call) \
  ASSERT_STREQ(vipl_kdat_return_name(call), vipl_kdat_return_name(expected))

VIP_VI_ATTRIBUTES attributes(VIP_PROTECTION_HANDLE ptag,
                             VIP_RELIABILITY_LEVEL level = VIP_SERVICE_RELIABLE_DELIVERY,
                             VIP_UINT32 mtu = 32768, VIP_QOS qos = 0, bool write = false,
                             bool read = false) {
  VIP_VI_ATTRIBUTES a{};
  a.ReliabilityLevel = level;
  a.MaxTransferSize = mtu;
  a.QoS = qos;
  a.Ptag = ptag;
  a.EnableRdmaWrite = write ? VIP_TRUE : VIP_FALSE;
  a.EnableRdmaRead = read ? VIP_TRUE : VIP_FALSE;
  return a;
}

VIP_VI_STATE state_of(VIP_VI_HANDLE vi) {
  VIP_VI_STATE s = static_cast<VIP_VI_STATE>(-1);
  EXPECT_VIP(VIP_SUCCESS, VipQueryVi(vi, &s, nullptr, nullptr, nullptr));
  return s;
}

bool eventually(const std::function<bool()> &done, std::chrono::milliseconds timeout = 10s) {
  const auto until = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// One open NIC with a protection tag; VIs made through it are destroyed at the end.
class Nic {
 public:
  Nic() {
    EXPECT_VIP(VIP_SUCCESS, VipOpenNic(netdev().c_str(), &handle));
    EXPECT_VIP(VIP_SUCCESS, VipQueryNic(handle, &attrs));
    EXPECT_VIP(VIP_SUCCESS, VipCreatePtag(handle, &ptag));
    host.assign(attrs.LocalNicAddress, attrs.LocalNicAddress + attrs.NicAddressLen);
  }
  ~Nic() {
    if (handle != nullptr) {
      EXPECT_VIP(VIP_SUCCESS, VipCloseNic(handle));
    }
  }
  VIP_VI_HANDLE vi(VIP_RELIABILITY_LEVEL level = VIP_SERVICE_RELIABLE_DELIVERY,
                   VIP_UINT32 mtu = 32768, VIP_QOS qos = 0, bool write = false, bool read = false) {
    auto a = attributes(ptag, level, mtu, qos, write, read);
    VIP_VI_HANDLE v = nullptr;
    EXPECT_VIP(VIP_SUCCESS, VipCreateVi(handle, &a, nullptr, nullptr, &v));
    return v;
  }
  Addr addr(const std::string &d) { return Addr(host, d); }

  VIP_NIC_HANDLE handle = nullptr;
  VIP_NIC_ATTRIBUTES attrs{};
  VIP_PROTECTION_HANDLE ptag = nullptr;
  std::vector<std::uint8_t> host;
};

// A VipConnectWait running in its own thread.
struct Wait {
  VIP_RETURN result = VIP_NOT_DONE;
  Addr remote;
  VIP_VI_ATTRIBUTES remote_attrs{};
  VIP_CONN_HANDLE conn = nullptr;
  Clock::duration took{};  // from just before VipConnectWait, which starts its timeout
};

std::future<Wait> wait_async(Nic &nic, const std::string &d, VIP_ULONG timeout_ms) {
  return std::async(std::launch::async, [&nic, d, timeout_ms] {
    Wait w;
    Addr local = nic.addr(d);
    const auto t0 = Clock::now();
    w.result = VipConnectWait(nic.handle, local.get(), timeout_ms, w.remote.get(), &w.remote_attrs,
                              &w.conn);
    w.took = Clock::now() - t0;
    return w;
  });
}

// Is a PSP of this user listening on `port`?  (Every process's object table, as kdatctl.)
bool listening(std::uint16_t port) {
  kdat::Device device;
  for (const auto &t : kdat::list_tables(device)) {
    if ((t.flags & KDAT_TABLE_CLOSED) != 0) continue;
    try {
      kdat::Device view;
      const auto table = kdat::ObjectTable::attach(view, t.id);
      for (const auto &r : table.snapshot().records)
        if (r.type == KDAT_REC_PSP && r.state == KDAT_SP_LISTENING && r.conn_qual == port)
          return true;
    } catch (const kdat::Error &) {
      // the table went away meanwhile
    }
  }
  return false;
}

// A client must not ask before the server's VipConnectWait listens (under TCG a thread may
// take a while to get there): wait until its qualifier has a listener.
void settle(const std::string &d) {
  const auto port = vipl_kdat_conn_qual(reinterpret_cast<const VIP_UINT8 *>(d.data()),
                                        static_cast<VIP_UINT16>(d.size()));
  EXPECT_TRUE(eventually([&] { return listening(port); })) << "nobody listens for " << d;
}

struct Request {
  VIP_RETURN result = VIP_NOT_DONE;
  VIP_VI_ATTRIBUTES remote{};
  Clock::duration took{};  // from just before VipConnectRequest, which starts its timeout
};

Request request(Nic &nic, VIP_VI_HANDLE vi, const std::string &local_disc,
                const std::vector<std::uint8_t> &host, const std::string &remote_disc,
                VIP_ULONG timeout_ms) {
  Request r;
  Addr local = nic.addr(local_disc);
  Addr remote(host, remote_disc);
  const auto t0 = Clock::now();
  r.result = VipConnectRequest(vi, local.get(), remote.get(), timeout_ms, &r.remote);
  r.took = Clock::now() - t0;
  return r;
}

// Connects client VI `cvi` to a new VI of `server` (accepting); returns the server's VI.
VIP_VI_HANDLE connect_pair(Nic &client, VIP_VI_HANDLE cvi, Nic &server,
                           VIP_RELIABILITY_LEVEL level = VIP_SERVICE_RELIABLE_DELIVERY) {
  const auto d = disc("pair");
  auto waiting = wait_async(server, d, 10000);
  settle(d);
  auto client_side = std::async(
      std::launch::async, [&] { return request(client, cvi, disc("pc"), server.host, d, 10000); });
  auto w = waiting.get();
  EXPECT_VIP(VIP_SUCCESS, w.result);
  const auto svi = server.vi(level);
  EXPECT_VIP(VIP_SUCCESS, VipConnectAccept(w.conn, svi));
  EXPECT_VIP(VIP_SUCCESS, client_side.get().result);
  return svi;
}

// ---- the NIC ---------------------------------------------------------------------------------

TEST(Vipl, NicAddressIsTheIaAddress) {
  Nic nic;
  EXPECT_EQ(nic.attrs.NicAddressLen, 4);
  EXPECT_EQ(nic.host, ipv4(test_addr()));
  EXPECT_EQ(nic.attrs.MaxDiscriminatorLen, VIPL_KDAT_MAX_DISCRIMINATOR_LEN);
  EXPECT_EQ(nic.attrs.ThreadSafe, VIP_TRUE);
  EXPECT_GT(nic.attrs.MaxVI, 0u);
  EXPECT_NE(std::string(nic.attrs.Name), "");
  VIP_NIC_HANDLE bad = nullptr;
  EXPECT_VIP(VIP_INVALID_PARAMETER, VipOpenNic("no-such-netdev", &bad));
  EXPECT_VIP(VIP_INVALID_PARAMETER, VipOpenNic(nullptr, &bad));
}

// ---- success: the remote VI's attributes, the discriminator unchanged ----------------------

TEST(Vipl, ConnectReturnsRemoteAttributesAndPassesTheDiscriminatorUnchanged) {
  Nic server, client;
  const auto sd = disc("srv");
  // A binary discriminator of the largest size, with zero bytes in it.
  std::string cd(VIPL_KDAT_MAX_DISCRIMINATOR_LEN, '\0');
  for (std::size_t i = 0; i < cd.size(); ++i) cd[i] = static_cast<char>(i * 37);
  auto waiting = wait_async(server, sd, 10000);
  settle(sd);
  const auto cvi = client.vi(VIP_SERVICE_RELIABLE_RECEPTION, 4096, 5, false, false);
  auto client_side = std::async(std::launch::async,
                                [&] { return request(client, cvi, cd, server.host, sd, 10000); });
  auto w = waiting.get();
  ASSERT_VIP(VIP_SUCCESS, w.result);
  // The server sees the client's host address and its LocalAddr discriminator, unchanged.
  EXPECT_EQ(w.remote.host(), client.host);
  EXPECT_EQ(w.remote.discriminator(), cd);
  EXPECT_EQ(w.remote_attrs.ReliabilityLevel, VIP_SERVICE_RELIABLE_RECEPTION);
  EXPECT_EQ(w.remote_attrs.MaxTransferSize, 4096u);
  EXPECT_EQ(w.remote_attrs.QoS, 5u);
  EXPECT_EQ(w.remote_attrs.EnableRdmaWrite, VIP_FALSE);
  EXPECT_EQ(w.remote_attrs.EnableRdmaRead, VIP_FALSE);
  EXPECT_EQ(w.remote_attrs.Ptag, nullptr);
  EXPECT_EQ(state_of(cvi), VIP_STATE_CONNECT_PENDING);

  const auto svi = server.vi(VIP_SERVICE_RELIABLE_RECEPTION, 65536, 9, true, true);
  ASSERT_VIP(VIP_SUCCESS, VipConnectAccept(w.conn, svi));
  const auto r = client_side.get();
  ASSERT_VIP(VIP_SUCCESS, r.result);
  // ...and the client gets the server VI's attributes: RDMA write and read enabled.
  EXPECT_EQ(r.remote.ReliabilityLevel, VIP_SERVICE_RELIABLE_RECEPTION);
  EXPECT_EQ(r.remote.MaxTransferSize, 65536u);
  EXPECT_EQ(r.remote.QoS, 9u);
  EXPECT_EQ(r.remote.EnableRdmaWrite, VIP_TRUE);
  EXPECT_EQ(r.remote.EnableRdmaRead, VIP_TRUE);
  EXPECT_EQ(state_of(cvi), VIP_STATE_CONNECTED);
  EXPECT_EQ(state_of(svi), VIP_STATE_CONNECTED);
  // The spent connection handle is gone.
  EXPECT_VIP(VIP_INVALID_PARAMETER, VipConnectReject(w.conn));
  // VipQueryVi reports the VI's own attributes.
  VIP_VI_STATE st;
  VIP_VI_ATTRIBUTES own{};
  VIP_BOOLEAN sq = VIP_FALSE, rq = VIP_FALSE;
  EXPECT_VIP(VIP_SUCCESS, VipQueryVi(svi, &st, &own, &sq, &rq));
  EXPECT_EQ(own.MaxTransferSize, 65536u);
  EXPECT_EQ(own.Ptag, server.ptag);
  EXPECT_EQ(sq, VIP_TRUE);
  EXPECT_EQ(rq, VIP_TRUE);
  EXPECT_VIP(VIP_SUCCESS, VipDisconnect(cvi));
  EXPECT_EQ(state_of(cvi), VIP_STATE_IDLE);
}

TEST(Vipl, ConnectedViCanBeUsedAgainAfterDisconnect) {
  Nic server, client;
  const auto cvi = client.vi();
  for (int round = 0; round < 3; ++round) {
    const auto svi = connect_pair(client, cvi, server);
    EXPECT_EQ(state_of(cvi), VIP_STATE_CONNECTED);
    EXPECT_VIP(VIP_SUCCESS, VipDisconnect(cvi));
    EXPECT_EQ(state_of(cvi), VIP_STATE_IDLE);
    EXPECT_TRUE(eventually([&] { return state_of(svi) != VIP_STATE_CONNECTED; }));
    EXPECT_VIP(VIP_SUCCESS, VipDisconnect(svi));
    EXPECT_VIP(VIP_SUCCESS, VipDestroyVi(svi));
  }
  EXPECT_VIP(VIP_SUCCESS, VipDestroyVi(cvi));
}

// ---- timeouts --------------------------------------------------------------------------------

TEST(Vipl, TimeoutZeroIsInvalidParameterAtOnce) {
  Nic server, client;
  const auto sd = disc("zero");
  auto waiting = wait_async(server, sd, 10000);
  settle(sd);
  const auto cvi = client.vi();
  const auto r = request(client, cvi, "z", server.host, sd, 0);
  EXPECT_VIP(VIP_INVALID_PARAMETER, r.result);
  // At once, refused before anything is sent: a request would reach the server, which would
  // sit on it for up to its 10 s wait (its VIP_TIMEOUT below shows that none did).
  EXPECT_TRUE(guest::prompt(r.took, 10s, "VipConnectRequest with timeout 0"));
  EXPECT_EQ(state_of(cvi), VIP_STATE_IDLE);
  // The server never saw a request: its wait times out.
  EXPECT_VIP(VIP_TIMEOUT, waiting.get().result);
  // The same rule for the server's wait and the peer request.
  Addr local = server.addr(sd), out;
  VIP_VI_ATTRIBUTES ra;
  VIP_CONN_HANDLE conn;
  EXPECT_VIP(VIP_INVALID_PARAMETER,
             VipConnectWait(server.handle, local.get(), 0, out.get(), &ra, &conn));
  Addr peer(server.host, "other");
  Addr mine = client.addr("mine");
  EXPECT_VIP(VIP_INVALID_PARAMETER, VipConnectPeerRequest(cvi, mine.get(), peer.get(), 0));
  EXPECT_EQ(state_of(cvi), VIP_STATE_IDLE);
}

TEST(Vipl, ServerDownIsTimeoutAfterTheTimeout) {
  Nic client;
  const auto cvi = client.vi();
  EXPECT_TRUE(guest::judge_on_time(700ms, [&] {
    const auto r = request(client, cvi, "c", ipv4(silent_host), disc("down"), 700);
    EXPECT_VIP(VIP_TIMEOUT, r.result);
    EXPECT_EQ(state_of(cvi), VIP_STATE_IDLE);
    return r.took;
  }));
}

TEST(Vipl, ServerDownIsTimeoutAfterALongerTimeoutToo) {
  // Long enough for the transport to give up first (address resolution on the silent
  // subnet: four 2 s lookups): VIPL still answers VIP_TIMEOUT, and only once the timeout has
  // expired.
  Nic client;
  const auto cvi = client.vi();
  EXPECT_TRUE(guest::judge_on_time(10s, [&] {
    const auto r = request(client, cvi, "c", ipv4(silent_host), disc("down"), 10000);
    EXPECT_VIP(VIP_TIMEOUT, r.result);
    EXPECT_EQ(state_of(cvi), VIP_STATE_IDLE);
    return r.took;
  }));
}

TEST(Vipl, ServerThatNeverAnswersIsTimeoutAfterTheTimeout) {
  Nic server, client;
  // Each attempt is a whole request the server sits on, on a discriminator of its own (so that
  // settle() waits for this attempt's listener); a late one (a stall of the guest) is tried
  // again, as judge_on_time does for every timeout here.
  EXPECT_TRUE(guest::judge_on_time(800ms, [&] {
    const auto sd = disc("silent");
    auto waiting = wait_async(server, sd, 10000);
    settle(sd);
    const auto cvi = client.vi();
    auto client_side = std::async(std::launch::async,
                                  [&] { return request(client, cvi, "c", server.host, sd, 800); });
    auto w = waiting.get();
    EXPECT_VIP(VIP_SUCCESS, w.result);  // the server has the request and sits on it
    const auto r = client_side.get();
    EXPECT_VIP(VIP_TIMEOUT, r.result);
    EXPECT_EQ(state_of(cvi), VIP_STATE_IDLE);
    // A late accept finds nobody; the server's VI is Idle again and the client VI stays Idle.
    const auto svi = server.vi();
    const auto late = VipConnectAccept(w.conn, svi);
    EXPECT_NE(late, VIP_SUCCESS) << vipl_kdat_return_name(late);
    EXPECT_EQ(state_of(svi), VIP_STATE_IDLE);
    EXPECT_EQ(state_of(cvi), VIP_STATE_IDLE);
    return r.took;
  }));
}

TEST(Vipl, InfiniteTimeoutWaitsUntilTheServerAccepts) {
  Nic server, client;
  const auto sd = disc("inf");
  auto waiting = wait_async(server, sd, VIP_INFINITE);
  settle(sd);
  const auto cvi = client.vi();
  auto client_side = std::async(
      std::launch::async, [&] { return request(client, cvi, "c", server.host, sd, VIP_INFINITE); });
  auto w = waiting.get();
  ASSERT_VIP(VIP_SUCCESS, w.result);
  std::this_thread::sleep_for(1500ms);  // longer than any finite timeout in these tests
  EXPECT_EQ(state_of(cvi), VIP_STATE_CONNECT_PENDING);
  const auto svi = server.vi();
  EXPECT_VIP(VIP_SUCCESS, VipConnectAccept(w.conn, svi));
  const auto r = client_side.get();
  EXPECT_VIP(VIP_SUCCESS, r.result);
  EXPECT_GE(r.took, 1500ms);  // it was asking before the sleep began
}

TEST(Vipl, InfiniteTimeoutToADownServerKeepsTryingUntilTheNicCloses) {
  auto client = std::make_unique<Nic>();
  const auto cvi = client->vi();
  const auto host = ipv4(silent_host);
  auto client_side = std::async(std::launch::async, [&] {
    return request(*client, cvi, "c", host, disc("inf-down"), VIP_INFINITE);
  });
  // Longer than the transport's own give-up (about 8 s: the 10 s case above).
  EXPECT_EQ(client_side.wait_for(10s), std::future_status::timeout);
  EXPECT_EQ(state_of(cvi), VIP_STATE_CONNECT_PENDING);
  EXPECT_VIP(VIP_SUCCESS, VipCloseNic(client->handle));
  client->handle = nullptr;
  // The close ends the infinite request: it returns, well within a bound no load reaches.
  ASSERT_EQ(client_side.wait_for(30s), std::future_status::ready);
  EXPECT_VIP(VIP_ERROR_RESOURCE, client_side.get().result);
  EXPECT_VIP(VIP_INVALID_PARAMETER, VipDestroyVi(cvi));  // went with the NIC
}

TEST(Vipl, InfiniteServerWaitEndsWhenTheNicCloses) {
  auto server = std::make_unique<Nic>();
  const auto sd = disc("close");
  auto waiting = wait_async(*server, sd, VIP_INFINITE);
  settle(sd);
  EXPECT_EQ(waiting.wait_for(1s), std::future_status::timeout);
  EXPECT_VIP(VIP_SUCCESS, VipCloseNic(server->handle));
  server->handle = nullptr;
  // The close ends the infinite wait: it returns, well within a bound no load reaches.
  ASSERT_EQ(waiting.wait_for(30s), std::future_status::ready);
  EXPECT_VIP(VIP_ERROR_RESOURCE, waiting.get().result);
}

// ---- reject and no match ---------------------------------------------------------------------

TEST(Vipl, ExplicitRejectIsReject) {
  Nic server, client;
  const auto sd = disc("rej");
  auto waiting = wait_async(server, sd, 10000);
  settle(sd);
  const auto cvi = client.vi();
  auto client_side = std::async(std::launch::async,
                                [&] { return request(client, cvi, "c", server.host, sd, 20000); });
  auto w = waiting.get();
  ASSERT_VIP(VIP_SUCCESS, w.result);
  EXPECT_VIP(VIP_SUCCESS, VipConnectReject(w.conn));
  const auto r = client_side.get();
  EXPECT_VIP(VIP_REJECT, r.result);
  // The answer comes when the server rejects, not held until the (long) timeout.
  EXPECT_TRUE(guest::prompt(r.took, 20s, "the rejected request"));
  EXPECT_EQ(state_of(cvi), VIP_STATE_IDLE);
  EXPECT_VIP(VIP_INVALID_PARAMETER, VipConnectReject(w.conn));  // answered once
}

TEST(Vipl, ServerUpButNotWaitingForThatDiscriminatorIsNoMatch) {
  Nic server, client;
  const auto sd = disc("right");
  // Long: it must outlast the unmatched request; the matching one below ends it.
  auto waiting = wait_async(server, sd, 20000);
  settle(sd);
  const auto cvi = client.vi();
  // Another discriminator (another qualifier: nobody listens there).
  auto other = disc("wrong");
  while (vipl::conn_qual(vipl::Bytes(other.begin(), other.end())) ==
         vipl::conn_qual(vipl::Bytes(sd.begin(), sd.end())))
    other += "x";
  const auto r = request(client, cvi, "c", server.host, other, 20000);
  EXPECT_VIP(VIP_NO_MATCH, r.result);
  // No match is an answer: the request does not wait for its timeout.
  EXPECT_TRUE(guest::prompt(r.took, 20s, "the unmatched request"));
  EXPECT_EQ(state_of(cvi), VIP_STATE_IDLE);
  // The server is still waiting for its own discriminator: a matching request succeeds.
  auto client_side = std::async(std::launch::async,
                                [&] { return request(client, cvi, "c", server.host, sd, 5000); });
  auto w = waiting.get();
  ASSERT_VIP(VIP_SUCCESS, w.result);
  EXPECT_VIP(VIP_SUCCESS, VipConnectAccept(w.conn, server.vi()));
  EXPECT_VIP(VIP_SUCCESS, client_side.get().result);
}

TEST(Vipl, SameQualifierOtherDiscriminatorIsNoMatchToo) {
  // Two discriminators that hash to one qualifier: the listener is there, and the server
  // matches the whole discriminator carried in the private data.
  Nic server, client;
  const auto sd = disc("hash");
  const auto q = vipl::conn_qual(vipl::Bytes(sd.begin(), sd.end()));
  std::string twin;
  for (unsigned i = 0;; ++i) {
    twin = "twin-" + std::to_string(i);
    if (vipl::conn_qual(vipl::Bytes(twin.begin(), twin.end())) == q) break;
  }
  auto waiting = wait_async(server, sd, 4000);
  settle(sd);
  const auto cvi = client.vi();
  const auto r = request(client, cvi, "c", server.host, twin, 20000);
  EXPECT_VIP(VIP_NO_MATCH, r.result);
  // No match is an answer: the request does not wait for its timeout.
  EXPECT_TRUE(guest::prompt(r.took, 20s, "the unmatched request"));
  EXPECT_VIP(VIP_TIMEOUT, waiting.get().result);  // its own wait was not consumed
}

TEST(Vipl, NobodyWaitingAtAllIsNoMatch) {
  Nic server, client;  // the server's NIC is open, no VipConnectWait
  const auto cvi = client.vi();
  const auto r = request(client, cvi, "c", server.host, disc("nobody"), 20000);
  EXPECT_VIP(VIP_NO_MATCH, r.result);
  // No match is an answer: the request does not wait for its timeout.
  EXPECT_TRUE(guest::prompt(r.took, 20s, "the unmatched request"));
}

TEST(Vipl, ServerWaitTimesOutAfterItsTimeout) {
  Nic server;
  EXPECT_TRUE(guest::judge_on_time(600ms, [&] {
    auto w = wait_async(server, disc("lonely"), 600).get();
    EXPECT_VIP(VIP_TIMEOUT, w.result);
    return w.took;
  }));
}

TEST(Vipl, TwoWaitsOnOneDiscriminatorServeTwoClients) {
  Nic server, client;
  const auto sd = disc("two");
  auto w1 = wait_async(server, sd, 10000);
  auto w2 = wait_async(server, sd, 10000);
  settle(sd);
  const auto a = client.vi(), b = client.vi();
  auto ra = std::async(std::launch::async,
                       [&] { return request(client, a, "a", server.host, sd, 8000); });
  // The second wait may register a moment after the first: ask until it has.
  auto rb = std::async(std::launch::async, [&] {
    Request r;
    const auto until = Clock::now() + 8s;
    do {
      r = request(client, b, "b", server.host, sd, 8000);
    } while (r.result == VIP_NO_MATCH && Clock::now() < until);
    return r;
  });
  auto x = w1.get(), y = w2.get();
  ASSERT_VIP(VIP_SUCCESS, x.result);
  ASSERT_VIP(VIP_SUCCESS, y.result);
  EXPECT_NE(x.remote.discriminator(), y.remote.discriminator());
  EXPECT_VIP(VIP_SUCCESS, VipConnectAccept(x.conn, server.vi()));
  EXPECT_VIP(VIP_SUCCESS, VipConnectAccept(y.conn, server.vi()));
  EXPECT_VIP(VIP_SUCCESS, ra.get().result);
  EXPECT_VIP(VIP_SUCCESS, rb.get().result);
}

// A plain kdat server (no VIPL) on a discriminator's qualifier.
struct RawServer {
  explicit RawServer(std::uint16_t port)
      : ia(device, netdev()),
        evd(ia, 16, KDAT_EVD_CONNECTION),
        crevd(ia, 16, KDAT_EVD_CR),
        psp(ia, crevd, port) {}
  kdat::Device device;
  kdat::Ia ia;
  kdat::Evd evd;
  kdat::Evd crevd;
  kdat::Psp psp;
};

std::uint16_t qual(const std::string &d) {
  return vipl_kdat_conn_qual(reinterpret_cast<const VIP_UINT8 *>(d.data()),
                             static_cast<VIP_UINT16>(d.size()));
}

TEST(Vipl, QualifierTakenByAnotherListenerIsErrorResource) {
  const auto sd = disc("taken");
  RawServer raw(qual(sd));
  Nic server;
  EXPECT_VIP(VIP_ERROR_RESOURCE, wait_async(server, sd, 500).get().result);
}

TEST(Vipl, NonViplServerOnTheQualifierIsNoMatchOrReject) {
  Nic client;
  const auto sd = disc("raw");
  RawServer raw(qual(sd));
  const auto cvi = client.vi();
  // It accepts, but not with a VIPL answer: not a VipConnectWait for us.
  auto accepted = std::async(std::launch::async, [&] {
    auto ev = raw.crevd.try_wait(1, kdat::Timeout(10s));
    if (!ev) return false;
    kdat::ConnectionRequest cr(raw.crevd, *ev);
    kdat::Endpoint ep(raw.ia, raw.evd);
    cr.accept(ep);
    auto est = raw.evd.try_wait(1, kdat::Timeout(10s));
    return est.has_value();
  });
  auto r = request(client, cvi, "c", client.host, sd, 8000);
  EXPECT_VIP(VIP_NO_MATCH, r.result);
  EXPECT_TRUE(accepted.get());
  EXPECT_EQ(state_of(cvi), VIP_STATE_IDLE);
  // It rejects without VIPL private data: an explicit reject.
  auto rejected = std::async(std::launch::async, [&] {
    auto ev = raw.crevd.try_wait(1, kdat::Timeout(10s));
    if (!ev) return false;
    kdat::ConnectionRequest cr(raw.crevd, *ev);
    cr.reject(kdat::as_private_data("no"));
    return true;
  });
  r = request(client, cvi, "c", client.host, sd, 8000);
  EXPECT_VIP(VIP_REJECT, r.result);
  EXPECT_TRUE(rejected.get());
  EXPECT_EQ(state_of(cvi), VIP_STATE_IDLE);
}

// ---- state -----------------------------------------------------------------------------------

TEST(Vipl, ViNotIdleIsInvalidState) {
  Nic server, client;
  const auto cvi = client.vi();
  // Connect pending: another thread is connecting it to a host that does not answer.
  auto pending = std::async(std::launch::async, [&] {
    return request(client, cvi, "c", ipv4(silent_host), disc("busy"), 2000);
  });
  ASSERT_TRUE(eventually([&] { return state_of(cvi) == VIP_STATE_CONNECT_PENDING; }));
  EXPECT_VIP(VIP_INVALID_STATE, request(client, cvi, "c", server.host, "x", 1000).result);
  EXPECT_VIP(VIP_INVALID_STATE, VipDestroyVi(cvi));
  EXPECT_VIP(VIP_INVALID_STATE, VipDisconnect(cvi));
  EXPECT_VIP(VIP_TIMEOUT, pending.get().result);
  // Connected.
  const auto svi = connect_pair(client, cvi, server);
  const auto r = request(client, cvi, "c", server.host, "x", 20000);
  EXPECT_VIP(VIP_INVALID_STATE, r.result);
  // Refused without waiting, neither for an answer nor for its (long) timeout.
  EXPECT_TRUE(guest::prompt(r.took, 20s, "the request on a connected VI"));
  EXPECT_EQ(state_of(cvi), VIP_STATE_CONNECTED);  // and still connected
  EXPECT_VIP(VIP_INVALID_STATE, VipDestroyVi(cvi));
  // Accepting on a connected VI: the connection handle survives for another VI.
  const auto again = disc("again");
  auto waiting = wait_async(server, again, 10000);
  settle(again);
  const auto other = client.vi();
  auto client_side = std::async(
      std::launch::async, [&] { return request(client, other, "o", server.host, again, 8000); });
  auto w = waiting.get();
  ASSERT_VIP(VIP_SUCCESS, w.result);
  EXPECT_VIP(VIP_INVALID_STATE, VipConnectAccept(w.conn, svi));
  EXPECT_VIP(VIP_SUCCESS, VipConnectAccept(w.conn, server.vi()));
  EXPECT_VIP(VIP_SUCCESS, client_side.get().result);
  // Idle: nothing to disconnect.
  EXPECT_VIP(VIP_INVALID_STATE, VipDisconnect(client.vi()));
}

TEST(Vipl, AcceptNeedsTheRequestersReliabilityLevel) {
  Nic server, client;
  const auto sd = disc("level");
  auto waiting = wait_async(server, sd, 10000);
  settle(sd);
  const auto cvi = client.vi(VIP_SERVICE_RELIABLE_DELIVERY);
  auto client_side = std::async(std::launch::async,
                                [&] { return request(client, cvi, "c", server.host, sd, 8000); });
  auto w = waiting.get();
  ASSERT_VIP(VIP_SUCCESS, w.result);
  const auto unreliable = server.vi(VIP_SERVICE_UNRELIABLE);
  EXPECT_VIP(VIP_INVALID_RELIABILITY_LEVEL, VipConnectAccept(w.conn, unreliable));
  EXPECT_EQ(state_of(unreliable), VIP_STATE_IDLE);
  EXPECT_VIP(VIP_SUCCESS, VipConnectAccept(w.conn, server.vi(VIP_SERVICE_RELIABLE_DELIVERY)));
  EXPECT_VIP(VIP_SUCCESS, client_side.get().result);
}

// VI-GM's VipConnectRequest: "For Reliable Delivery and Reliable Reception, the VI transitions to
// the Error State and any pending receive descriptors are marked as flushed."  The failure here is
// the peer going away; there is no VipPostRecv (kdat has no user data path), so the flush itself is
// kdat's (its DISCONNECTED flush, tested with the kernel data path), not visible here.
class ViplLostConnection : public ::testing::TestWithParam<VIP_RELIABILITY_LEVEL> {};

TEST_P(ViplLostConnection, ReliableViGoesToErrorUnreliableToIdle) {
  const auto level = GetParam();
  Nic server;
  auto client = std::make_unique<Nic>();
  const auto cvi = client->vi(level);
  const auto svi = connect_pair(*client, cvi, server, level);
  ASSERT_EQ(state_of(svi), VIP_STATE_CONNECTED);
  client.reset();  // the client's NIC closes: its connection is torn down
  const auto expected = level == VIP_SERVICE_UNRELIABLE ? VIP_STATE_IDLE : VIP_STATE_ERROR;
  EXPECT_TRUE(eventually([&] { return state_of(svi) != VIP_STATE_CONNECTED; }));
  EXPECT_EQ(state_of(svi), expected);
  if (expected == VIP_STATE_ERROR) {
    // An Error VI must be disconnected before it connects again or is destroyed.
    EXPECT_VIP(VIP_INVALID_STATE, request(server, svi, "s", server.host, "x", 1000).result);
    EXPECT_VIP(VIP_INVALID_STATE, VipDestroyVi(svi));
    EXPECT_VIP(VIP_SUCCESS, VipDisconnect(svi));
  }
  EXPECT_EQ(state_of(svi), VIP_STATE_IDLE);
  // ...and then it connects again.
  Nic again;
  const auto back = connect_pair(server, svi, again, level);
  EXPECT_EQ(state_of(svi), VIP_STATE_CONNECTED);
  EXPECT_EQ(state_of(back), VIP_STATE_CONNECTED);
  EXPECT_VIP(VIP_SUCCESS, VipDisconnect(svi));
  EXPECT_VIP(VIP_SUCCESS, VipDestroyVi(svi));
}

INSTANTIATE_TEST_SUITE_P(Levels, ViplLostConnection,
                         ::testing::Values(VIP_SERVICE_RELIABLE_DELIVERY,
                                           VIP_SERVICE_RELIABLE_RECEPTION, VIP_SERVICE_UNRELIABLE));

// ---- addresses and bad input -----------------------------------------------------------------

TEST(Vipl, LocalHostNotTheNicAddressIsInvalidParameter) {
  Nic server, client;
  const auto sd = disc("local");
  auto waiting = wait_async(server, sd, 2000);
  settle(sd);
  const auto cvi = client.vi();
  Addr wrong_local(ipv4("192.0.2.77"), "c");
  Addr remote(server.host, sd);
  VIP_VI_ATTRIBUTES ra;
  EXPECT_VIP(VIP_INVALID_PARAMETER,
             VipConnectRequest(cvi, wrong_local.get(), remote.get(), 1000, &ra));
  EXPECT_VIP(VIP_INVALID_PARAMETER,
             VipConnectPeerRequest(cvi, wrong_local.get(), remote.get(), 1000));
  // Malformed addresses: host length, discriminator length, missing pointers.
  Addr local = client.addr("c");
  local.get()->HostAddressLen = 5;
  EXPECT_VIP(VIP_INVALID_PARAMETER, VipConnectRequest(cvi, local.get(), remote.get(), 1000, &ra));
  Addr long_disc(server.host, std::string(VIPL_KDAT_MAX_DISCRIMINATOR_LEN + 1, 'd'));
  Addr ok_local = client.addr("c");
  EXPECT_VIP(VIP_INVALID_PARAMETER,
             VipConnectRequest(cvi, ok_local.get(), long_disc.get(), 1000, &ra));
  EXPECT_VIP(VIP_INVALID_PARAMETER, VipConnectRequest(cvi, nullptr, remote.get(), 1000, &ra));
  EXPECT_VIP(VIP_INVALID_PARAMETER, VipConnectRequest(cvi, ok_local.get(), nullptr, 1000, &ra));
  EXPECT_VIP(VIP_INVALID_PARAMETER,
             VipConnectRequest(cvi, ok_local.get(), remote.get(), 1000, nullptr));
  EXPECT_EQ(state_of(cvi), VIP_STATE_IDLE);
  // The server's LocalAddr is checked the same way.
  VIP_CONN_HANDLE conn;
  Addr out;
  EXPECT_VIP(VIP_INVALID_PARAMETER,
             VipConnectWait(server.handle, wrong_local.get(), 1000, out.get(), &ra, &conn));
  EXPECT_VIP(VIP_TIMEOUT, waiting.get().result);  // nothing reached the server
}

TEST(Vipl, BadHandlesAreInvalidParameterNeverACrash) {
  Nic nic;
  const auto made_up = reinterpret_cast<VIP_VI_HANDLE>(0x1234);
  VIP_VI_STATE st;
  VIP_VI_ATTRIBUTES a{};
  Addr l = nic.addr("l"), r = nic.addr("r");
  EXPECT_VIP(VIP_INVALID_PARAMETER, VipQueryVi(made_up, &st, nullptr, nullptr, nullptr));
  EXPECT_VIP(VIP_INVALID_PARAMETER, VipConnectRequest(made_up, l.get(), r.get(), 10, &a));
  EXPECT_VIP(VIP_INVALID_PARAMETER, VipDisconnect(nullptr));
  EXPECT_VIP(VIP_INVALID_PARAMETER, VipConnectAccept(nullptr, made_up));
  EXPECT_VIP(VIP_INVALID_PARAMETER, VipConnectReject(made_up));
  EXPECT_VIP(VIP_INVALID_PARAMETER, VipCloseNic(made_up));
  // A handle of another kind is no handle of this kind.
  EXPECT_VIP(VIP_INVALID_PARAMETER, VipQueryVi(nic.handle, &st, nullptr, nullptr, nullptr));
  const auto vi = nic.vi();
  EXPECT_VIP(VIP_INVALID_PARAMETER, VipCloseNic(vi));
  EXPECT_VIP(VIP_SUCCESS, VipDestroyVi(vi));
  // Stale: destroyed handles stay invalid (handles are never reused).
  EXPECT_VIP(VIP_INVALID_PARAMETER, VipDestroyVi(vi));
  EXPECT_VIP(VIP_INVALID_PARAMETER, VipQueryVi(vi, &st, nullptr, nullptr, nullptr));
  // VI attributes: reliability, MTU, protection tag, RDMA read, completion queues.
  VIP_VI_HANDLE v = nullptr;
  auto bad = attributes(nic.ptag, 3);
  EXPECT_VIP(VIP_INVALID_RELIABILITY_LEVEL, VipCreateVi(nic.handle, &bad, nullptr, nullptr, &v));
  bad = attributes(nic.ptag, VIP_SERVICE_RELIABLE_DELIVERY, 0);
  EXPECT_VIP(VIP_INVALID_MTU, VipCreateVi(nic.handle, &bad, nullptr, nullptr, &v));
  bad = attributes(reinterpret_cast<VIP_PROTECTION_HANDLE>(0x77));
  EXPECT_VIP(VIP_INVALID_PTAG, VipCreateVi(nic.handle, &bad, nullptr, nullptr, &v));
  bad = attributes(nic.ptag, VIP_SERVICE_UNRELIABLE, 4096, 0, false, true);
  EXPECT_VIP(VIP_INVALID_RDMAREAD, VipCreateVi(nic.handle, &bad, nullptr, nullptr, &v));
  auto good = attributes(nic.ptag);
  EXPECT_VIP(VIP_INVALID_PARAMETER,
             VipCreateVi(nic.handle, &good, reinterpret_cast<VIP_CQ_HANDLE>(1), nullptr, &v));
  // A ptag in use by a VI is not destroyed.
  const auto user = nic.vi();
  EXPECT_VIP(VIP_INVALID_STATE, VipDestroyPtag(nic.handle, nic.ptag));
  EXPECT_VIP(VIP_SUCCESS, VipDestroyVi(user));
  EXPECT_VIP(VIP_SUCCESS, VipDestroyPtag(nic.handle, nic.ptag));
  EXPECT_VIP(VIP_INVALID_PTAG, VipDestroyPtag(nic.handle, nic.ptag));
}

// ---- the peer model --------------------------------------------------------------------------

TEST(Vipl, PeerConnectionFromBothSides) {
  Nic a, b;
  const auto da = disc("peer-a"), db = disc("peer-b");
  const auto va = a.vi(VIP_SERVICE_RELIABLE_DELIVERY, 1000, 1, true, false);
  const auto vb = b.vi(VIP_SERVICE_RELIABLE_DELIVERY, 2000, 2, false, true);
  Addr la = a.addr(da), ra(b.host, db), lb = b.addr(db), rb(a.host, da);
  ASSERT_VIP(VIP_SUCCESS, VipConnectPeerRequest(va, la.get(), ra.get(), 10000));
  EXPECT_EQ(state_of(va), VIP_STATE_CONNECT_PENDING);
  VIP_VI_ATTRIBUTES got_a{}, got_b{};
  EXPECT_VIP(VIP_NOT_DONE, VipConnectPeerDone(va, &got_a));  // b has not asked yet
  std::this_thread::sleep_for(300ms);                        // a retries (or listens) meanwhile
  ASSERT_VIP(VIP_SUCCESS, VipConnectPeerRequest(vb, lb.get(), rb.get(), 10000));
  auto wa = std::async(std::launch::async, [&] { return VipConnectPeerWait(va, &got_a); });
  // b polls with VipConnectPeerDone until it is done.
  VIP_RETURN rb_result = VIP_NOT_DONE;
  EXPECT_TRUE(eventually([&] {
    rb_result = VipConnectPeerDone(vb, &got_b);
    return rb_result != VIP_NOT_DONE;
  }));
  EXPECT_VIP(VIP_SUCCESS, rb_result);
  EXPECT_VIP(VIP_SUCCESS, wa.get());
  EXPECT_EQ(got_a.MaxTransferSize, 2000u);
  EXPECT_EQ(got_a.QoS, 2u);
  EXPECT_EQ(got_a.EnableRdmaRead, VIP_TRUE);
  EXPECT_EQ(got_b.MaxTransferSize, 1000u);
  EXPECT_EQ(got_b.EnableRdmaWrite, VIP_TRUE);
  EXPECT_EQ(state_of(va), VIP_STATE_CONNECTED);
  EXPECT_EQ(state_of(vb), VIP_STATE_CONNECTED);
  // Done is answered once: afterwards there is no peer request pending.
  EXPECT_VIP(VIP_INVALID_STATE, VipConnectPeerDone(vb, &got_b));
  EXPECT_VIP(VIP_SUCCESS, VipDisconnect(va));
  EXPECT_TRUE(eventually([&] { return state_of(vb) == VIP_STATE_ERROR; }));
}

TEST(Vipl, PeersOfDifferentReliabilityLevelsBothFail) {
  Nic a, b;
  const auto da = disc("lv-a"), db = disc("lv-b");
  const auto va = a.vi(VIP_SERVICE_RELIABLE_DELIVERY), vb = b.vi(VIP_SERVICE_UNRELIABLE);
  Addr la = a.addr(da), ra(b.host, db), lb = b.addr(db), rb(a.host, da);
  const auto t0 = Clock::now();  // both timeouts start after this
  ASSERT_VIP(VIP_SUCCESS, VipConnectPeerRequest(va, la.get(), ra.get(), 20000));
  ASSERT_VIP(VIP_SUCCESS, VipConnectPeerRequest(vb, lb.get(), rb.get(), 20000));
  VIP_VI_ATTRIBUTES got_a{}, got_b{};
  auto wa = std::async(std::launch::async, [&] { return VipConnectPeerWait(va, &got_a); });
  EXPECT_VIP(VIP_INVALID_RELIABILITY_LEVEL, VipConnectPeerWait(vb, &got_b));
  EXPECT_VIP(VIP_INVALID_RELIABILITY_LEVEL, wa.get());
  // Refused, not timed out: both end long before their (long) timeouts.
  EXPECT_TRUE(guest::prompt(Clock::now() - t0, 20s, "the mismatched peers"));
  EXPECT_EQ(state_of(va), VIP_STATE_IDLE);
  EXPECT_EQ(state_of(vb), VIP_STATE_IDLE);
}

TEST(Vipl, PeerThatNeverAsksIsTimeoutForEitherRole) {
  Nic nic;
  // The larger (host, discriminator) connects, the smaller listens: try both.
  for (const auto &[local, remote] : {std::pair<std::string, std::string>{"zz-peer", "aa-peer"},
                                      std::pair<std::string, std::string>{"aa-peer", "zz-peer"}}) {
    // Judged like every timeout here: against sleeps beside it, tried again after a stall.
    EXPECT_TRUE(guest::judge_on_time(
        700ms,
        [&] {
          const auto vi = nic.vi();
          Addr l = nic.addr(disc(local.c_str())), r(nic.host, disc(remote.c_str()));
          const auto t0 = Clock::now();  // the timeout starts in VipConnectPeerRequest
          EXPECT_VIP(VIP_SUCCESS, VipConnectPeerRequest(vi, l.get(), r.get(), 700));
          VIP_VI_ATTRIBUTES got{};
          EXPECT_VIP(VIP_TIMEOUT, VipConnectPeerWait(vi, &got));
          const auto took = Clock::now() - t0;
          EXPECT_EQ(state_of(vi), VIP_STATE_IDLE);
          EXPECT_VIP(VIP_SUCCESS, VipDestroyVi(vi));
          return took;
        },
        local));
  }
}

TEST(Vipl, PendingPeerRequestIsAbandonedByDisconnect) {
  Nic nic;
  const auto vi = nic.vi();
  Addr l = nic.addr(disc("aa-ab")), r(nic.host, disc("zz-ab"));
  ASSERT_VIP(VIP_SUCCESS, VipConnectPeerRequest(vi, l.get(), r.get(), VIP_INFINITE));
  EXPECT_VIP(VIP_INVALID_STATE, VipConnectPeerRequest(vi, l.get(), r.get(), 1000));
  EXPECT_VIP(VIP_SUCCESS, VipDisconnect(vi));
  EXPECT_EQ(state_of(vi), VIP_STATE_IDLE);
  EXPECT_VIP(VIP_SUCCESS, VipDestroyVi(vi));
  // Connecting to yourself (same host and discriminator) makes no sense.
  const auto v2 = nic.vi();
  EXPECT_VIP(VIP_INVALID_PARAMETER, VipConnectPeerRequest(v2, l.get(), l.get(), 1000));
}

}  // namespace
