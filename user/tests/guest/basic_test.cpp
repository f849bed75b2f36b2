// Device, IA, EVD (ring, wait, dequeue, poll, timeouts), EP and service points on their own.
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <set>

#include "guest_util.hpp"
#include "timing.hpp"

namespace {

using namespace guest;

TEST(Device, VersionIsAbi3) {
  const kdat::Device dev;
  const auto v = dev.version();
  EXPECT_EQ(v.abi, static_cast<std::uint32_t>(KDAT_ABI_VERSION));
  EXPECT_EQ(v.dat_major, 2u);
  EXPECT_EQ(v.dat_minor, 0u);
  EXPECT_GE(v.num_devices, 1u);
}

TEST(Ia, OpenByNetdevAndByAddressAndQuery) {
  const kdat::Device dev;
  const kdat::Ia by_name(dev, test_netdev());
  const kdat::Ia by_addr(dev, test_addr());
  EXPECT_NE(by_name.handle(), 0u);
  EXPECT_NE(by_name.handle(), by_addr.handle());
  const auto attrs = by_name.query();
  EXPECT_EQ(attrs.netdev_name, test_netdev());
  EXPECT_FALSE(attrs.device_name.empty());
  EXPECT_EQ(attrs.local_address.raw.family, KDAT_AF_INET);
  EXPECT_EQ(kdat::Address{attrs.local_address.raw}.to_string().rfind(test_addr(), 0), 0u);
  // RoCE over the IB CM: 56 - 4 bytes connect, 196 - 4 accept, 148 - 4 reject (README).
  EXPECT_EQ(attrs.max_connect_private_data, 52u);
  EXPECT_EQ(attrs.max_accept_private_data, 192u);
  EXPECT_EQ(attrs.max_reject_private_data, 144u);
  EXPECT_GT(attrs.max_evd_qlen, 0u);
  EXPECT_EQ(by_addr.query().netdev_name, test_netdev());
}

TEST(Ia, UnknownNameFails) {
  const kdat::Device dev;
  EXPECT_NE(error_type([&] { kdat::Ia(dev, "no-such-netdev"); }), 0u);
  EXPECT_NE(error_type([&] { kdat::Ia(dev, std::string(200, 'x')); }), 0u);
}

TEST(Ia, GracefulCloseRefusedWhileItOwnsObjectsAbruptCloseFreesThem) {
  const kdat::Device dev;
  kdat::Ia ia(dev, test_netdev());
  kdat::Evd evd(ia, 4);
  EXPECT_EQ(error_type([&] { ia.close(kdat::CloseMode::graceful); }), KDAT_DAT_INVALID_STATE);
  EXPECT_NE(ia.handle(), 0u);  // still open
  const auto ia_handle = ia.handle();
  ia.close(kdat::CloseMode::abrupt);
  EXPECT_EQ(ia.handle(), 0u);
  // The EVD went with it: its handle is stale now, and the table shows the slot free.
  EXPECT_FALSE(dev.table().find(evd.handle()).has_value());
  EXPECT_FALSE(dev.table().find(ia_handle).has_value());
  EXPECT_EQ(error_type([&] { evd.free(); }), KDAT_DAT_INVALID_HANDLE);
  EXPECT_EQ(error_type([&] { (void)ia.query(); }), KDAT_DAT_INVALID_HANDLE);
}

TEST(Ia, GracefulCloseOfAnEmptyIa) {
  const kdat::Device dev;
  kdat::Ia ia(dev, test_netdev());
  ia.close();
  EXPECT_EQ(ia.handle(), 0u);
}

TEST(Evd, RingSizeIsQlenRoundedUpAndEmptyRingDequeuesNothing) {
  Side s;
  kdat::Evd evd(s.ia, 5);
  EXPECT_EQ(evd.ring_entries(), 8u);
  EXPECT_GE(evd.fd(), 0);
  EXPECT_EQ(evd.pending(), 0u);
  EXPECT_FALSE(evd.dequeue().has_value());
  const auto record = s.device.table().find(evd.handle());
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->type, KDAT_REC_EVD);
  EXPECT_NE(record->flags & KDAT_RECF_RING, 0u);
}

TEST(Evd, WaitTimesOut) {
  Side s;
  EXPECT_TRUE(judge_on_time(
      20ms,
      [&] {
        const auto start = Clock::now();
        EXPECT_FALSE(s.evd.try_wait(1, 20ms).has_value());
        return Clock::now() - start;
      },
      "the EVD wait"));
  EXPECT_EQ(error_type([&] { (void)s.evd.wait(1, 1ms); }), KDAT_DAT_TIMEOUT_EXPIRED);
  EXPECT_EQ(error_type([&] { (void)s.evd.wait(0, 1ms); }), KDAT_DAT_INVALID_PARAMETER);
  EXPECT_EQ(error_type([&] { (void)s.evd.wait(s.evd.ring_entries() + 1, 1ms); }),
            KDAT_DAT_INVALID_PARAMETER);
  EXPECT_EQ(error_type([&] { (void)s.evd.wait(1, kdat::Timeout(-1)); }),
            KDAT_DAT_INVALID_PARAMETER);
}

// Events from connects to a port nobody listens on: each a NON_PEER_REJECTED.
void make_rejections(Side &s, std::vector<kdat::Endpoint> &eps, int n) {
  const auto port = next_port();
  for (int i = 0; i < n; ++i) {
    eps.emplace_back(s.ia, s.evd);
    eps.back().connect(remote(), port, 10s);
  }
}

TEST(Evd, PollReportsEventsAndWaitTakesThemFromTheRingWithoutASyscall) {
  Side s;
  pollfd p{s.evd.fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0);
  std::vector<kdat::Endpoint> eps;
  make_rejections(s, eps, 3);
  p.revents = 0;
  ASSERT_EQ(::poll(&p, 1, 10000), 1);
  EXPECT_NE(p.revents & POLLIN, 0);
  ASSERT_TRUE(eventually([&] { return s.evd.pending() == 3; }));
  // Point the device's descriptor at /dev/null: any ioctl now fails (ENOTTY), so succeeding
  // waits prove the events came straight from the mapped ring.
  const int devfd = s.device.fd();
  const int saved = ::dup(devfd);
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  ASSERT_GE(saved, 0);
  ASSERT_GE(null, 0);
  ASSERT_EQ(::dup2(null, devfd), devfd);
  std::vector<kdat::Event> got;
  std::string failure;
  try {
    got.push_back(s.evd.wait(3, 0us));  // threshold 3 is met in the ring
    got.push_back(s.evd.wait());
    if (auto e = s.evd.dequeue()) got.push_back(*e);
    if (s.evd.dequeue()) failure = "a fourth event";
  } catch (const std::exception &e) {
    failure = e.what();
  }
  ASSERT_EQ(::dup2(saved, devfd), devfd);
  ::close(saved);
  ::close(null);
  EXPECT_EQ(failure, "");
  ASSERT_EQ(got.size(), 3u);
  // Three connects in flight at once fail in any order (the ring's own order is checked by
  // EventRing.*): each EP exactly once.
  std::set<std::uint32_t> want, seen;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].number, KDAT_DAT_CONNECTION_EVENT_NON_PEER_REJECTED);
    EXPECT_EQ(got[i].evd, s.evd.handle());
    want.insert(eps[i].handle());
    seen.insert(got[i].ep);
  }
  EXPECT_EQ(seen, want);
  p.revents = 0;
  EXPECT_EQ(::poll(&p, 1, 0), 0);
}

TEST(Evd, WaitWithThresholdSleepsUntilEnoughArrive) {
  Side s;
  std::vector<kdat::Endpoint> eps;
  std::thread producer([&] {
    std::this_thread::sleep_for(50ms);
    make_rejections(s, eps, 2);
  });
  const auto first = s.evd.wait(2, 10s);
  producer.join();
  EXPECT_EQ(first.number, KDAT_DAT_CONNECTION_EVENT_NON_PEER_REJECTED);
  EXPECT_EQ(s.evd.pending(), 1u);
  (void)s.evd.wait();
}

TEST(Evd, FreeHangsUpTheRingFile) {
  Side s;
  kdat::Evd evd(s.ia, 4);
  const int copy = ::dup(evd.fd());
  ASSERT_GE(copy, 0);
  evd.free();
  EXPECT_EQ(evd.handle(), 0u);
  pollfd p{copy, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 1000), 1);
  EXPECT_NE(p.revents & (POLLHUP | POLLERR), 0);
  ::close(copy);
  EXPECT_EQ(error_type([&] { (void)evd.dequeue(); }), KDAT_DAT_INVALID_HANDLE);
}

TEST(Evd, FreeWhileAnEpUsesItIsRefused) {
  Side s;
  kdat::Evd evd(s.ia, 4);
  kdat::Endpoint ep(s.ia, evd);
  EXPECT_EQ(error_type([&] { evd.free(); }), KDAT_DAT_INVALID_STATE);
  ep.free();
  evd.free();
}

TEST(Endpoint, StateFromTheSharedTableMatchesQuery) {
  Side s;
  kdat::EpAttributes attrs;
  attrs.max_rdma_read_in = 2;
  attrs.max_rdma_read_out = 2;
  attrs.retry_count = 5;
  kdat::Endpoint ep(s.ia, s.evd, attrs);
  EXPECT_EQ(ep.state(), kdat::EpState::UNCONNECTED);
  const auto rec = ep.record();
  EXPECT_EQ(rec.handle, ep.handle());
  EXPECT_EQ(rec.type, KDAT_REC_EP);
  EXPECT_EQ(rec.owner, s.ia.handle());
  EXPECT_EQ(rec.link, s.evd.handle());
  EXPECT_EQ(rec.transitions, 0u);
  const auto info = ep.query();
  EXPECT_EQ(info.state, kdat::EpState::UNCONNECTED);
  EXPECT_EQ(info.connect_evd, s.evd.handle());
  EXPECT_EQ(info.attributes.max_rdma_read_in, 2u);
  EXPECT_EQ(info.attributes.retry_count, 5u);
  EXPECT_EQ(info.transitions, rec.transitions);
}

TEST(Endpoint, ModifyAndResetWhereTheTableAllows) {
  Side s;
  kdat::Endpoint ep(s.ia, s.evd);
  kdat::EpAttributes attrs;
  attrs.max_rdma_read_in = 1;
  attrs.rnr_retry_count = 7;
  attrs.flow_control = true;
  ASSERT_TRUE(ep.can(kdat::Stimulus::MODIFY));
  ep.modify(KDAT_EP_ATTR_RDMA_READ_IN | KDAT_EP_ATTR_RNR_RETRY_COUNT | KDAT_EP_ATTR_FLOW_CONTROL,
            attrs);
  const auto info = ep.query();
  EXPECT_EQ(info.attributes.max_rdma_read_in, 1u);
  EXPECT_EQ(info.attributes.rnr_retry_count, 7u);
  EXPECT_TRUE(info.attributes.flow_control);
  ASSERT_TRUE(ep.can(kdat::Stimulus::RESET));
  ep.reset();  // UNCONNECTED: a no-op
  EXPECT_EQ(ep.state(), kdat::EpState::UNCONNECTED);
}

TEST(Endpoint, PreCheckGivesTheKernelsInvalidState) {
  Side s;
  kdat::Endpoint ep(s.ia, s.evd);
  EXPECT_FALSE(ep.can(kdat::Stimulus::DISCONNECT_ABRUPT));
  const auto ours = error_code([&] { ep.require(kdat::Stimulus::DISCONNECT_ABRUPT); });
  const auto kernels = error_code([&] { ep.disconnect(kdat::CloseMode::abrupt); });
  EXPECT_EQ(ours.type(), KDAT_DAT_INVALID_STATE);
  EXPECT_EQ(ours, kernels);
  EXPECT_EQ(ours.subtype(), KDAT_DAT_INVALID_STATE_EP_UNCONNECTED);
  EXPECT_NO_THROW(ep.require(kdat::Stimulus::CONNECT));
}

TEST(Endpoint, StaleHandleIsInvalidHandleWithoutASyscall) {
  Side s;
  kdat::Endpoint ep(s.ia, s.evd);
  auto alias = kdat::Endpoint::adopt(s.ia, ep.handle());  // a second owner of the same EP
  const auto handle = ep.handle();
  ep.free();
  EXPECT_EQ(ep.handle(), 0u);
  EXPECT_EQ(error_type([&] { (void)ep.state(); }), KDAT_DAT_INVALID_HANDLE);
  EXPECT_EQ(error_type([&] { (void)alias.state(); }), KDAT_DAT_INVALID_HANDLE);
  // The slot is reused by the next EP with a new generation: the old handle stays stale.
  kdat::Endpoint next(s.ia, s.evd);
  if (KDAT_HANDLE_SLOT(next.handle()) == KDAT_HANDLE_SLOT(handle)) {
    EXPECT_NE(next.handle(), handle);
  }
  const auto code = error_code([&] { (void)alias.record(); });
  EXPECT_EQ(code.type(), KDAT_DAT_INVALID_HANDLE);
  EXPECT_EQ(code.subtype(), KDAT_DAT_INVALID_HANDLE_EP);
  EXPECT_EQ(error_type([&] { alias.reset(); }), KDAT_DAT_INVALID_HANDLE);  // the kernel agrees
  EXPECT_EQ(error_type([] {}), 0u);
  EXPECT_EQ(error_type([&] { (void)kdat::Endpoint::adopt(s.ia, handle); }),
            KDAT_DAT_INVALID_HANDLE);
}

TEST(Endpoint, PrivateDataLongerThanTheAbiIsALengthError) {
  Side s;
  kdat::Endpoint ep(s.ia, s.evd);
  const std::vector<std::byte> big(KDAT_PRIVATE_DATA_MAX + 1);
  EXPECT_EQ(error_type([&] { ep.connect(remote(), next_port(), 1s, big); }), KDAT_DAT_LENGTH_ERROR);
  EXPECT_EQ(ep.state(), kdat::EpState::UNCONNECTED);
}

TEST(ServicePoints, PspQueryAndConnQualInUse) {
  Side s;
  const auto port = next_port();
  kdat::Psp psp(s.ia, s.crevd, port, kdat::PspFlags::provider);
  const auto info = psp.query();
  EXPECT_EQ(info.conn_qual, port);
  EXPECT_EQ(info.ia, s.ia.handle());
  EXPECT_EQ(info.evd, s.crevd.handle());
  EXPECT_EQ(info.flags, kdat::PspFlags::provider);
  EXPECT_EQ(error_type([&] { kdat::Psp(s.ia, s.crevd, port); }), KDAT_DAT_CONN_QUAL_IN_USE);
  const auto rec = s.device.table().find(psp.handle());
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->type, KDAT_REC_PSP);
  EXPECT_EQ(rec->state, static_cast<std::uint32_t>(KDAT_SP_LISTENING));
  EXPECT_EQ(rec->conn_qual, port);
  psp.free();
  kdat::Psp again(s.ia, s.crevd, port);  // the qualifier is free again
}

TEST(ServicePoints, RspReservesTheEpUntilFreed) {
  Side s;
  kdat::Endpoint ep(s.ia, s.evd);
  kdat::Rsp rsp(s.ia, ep, next_port(), s.crevd);
  EXPECT_EQ(ep.state(), kdat::EpState::RESERVED);
  EXPECT_FALSE(ep.can(kdat::Stimulus::CONNECT));
  rsp.free();
  EXPECT_EQ(ep.state(), kdat::EpState::UNCONNECTED);
}

}  // namespace
