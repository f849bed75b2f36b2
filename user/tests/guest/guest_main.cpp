// kdat_guest_tests: every public call of libkdat against the real module.  Needs kdat.ko loaded
// and Soft-RoCE up (tests/guest/test_libkdat.py runs it in the guest); not part of ctest.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>

#include "guest_util.hpp"

namespace guest {

std::uint16_t next_port() {
  static std::atomic<unsigned> next{41000u + static_cast<unsigned>(::getpid() % 50) * 400u};
  return static_cast<std::uint16_t>(next++);
}

kdat::Event expect_event(kdat::Evd &evd, std::uint32_t number, kdat::Timeout timeout) {
  auto event = evd.try_wait(1, timeout);
  if (!event) {
    ADD_FAILURE() << "no event on EVD " << evd.handle() << ", expected "
                  << kdat::event_name(number);
    return {};
  }
  EXPECT_EQ(event->name(), kdat::event_name(number));
  return std::move(*event);
}

bool eventually(const std::function<bool()> &done, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

kdat::DatReturn error_code(const std::function<void()> &f) {
  try {
    f();
  } catch (const kdat::Error &e) {
    return e.code();
  }
  return {};
}

std::uint32_t error_type(const std::function<void()> &f) { return error_code(f).type(); }

kdat::Endpoint connect_pair(Side &client, kdat::Endpoint &client_ep, Side &server,
                            std::uint16_t port) {
  client_ep.connect(remote(), port, 10s);
  const auto req = expect_event(server.crevd, KDAT_DAT_CONNECTION_REQUEST_EVENT);
  kdat::Endpoint server_ep(server.ia, server.evd);
  kdat::ConnectionRequest cr(server.crevd, req);
  cr.accept(server_ep);
  expect_event(client.evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED);
  expect_event(server.evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED);
  return server_ep;
}

}  // namespace guest

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
