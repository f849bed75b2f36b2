// Helpers for the guest tests (real kdat.ko, Soft-RoCE on kdat0/192.0.2.1, see scripts/rdma-up).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <kdat/kdat.hpp>
#include <string>
#include <thread>

namespace guest {

using namespace std::chrono_literals;

inline std::string env_or(const char *name, const char *fallback) {
  const char *v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}
inline std::string test_addr() { return env_or("KDAT_TEST_ADDR", "192.0.2.1"); }
inline std::string test_netdev() { return env_or("KDAT_TEST_NETDEV", "kdat0"); }
inline kdat::Address remote() { return kdat::Address::parse(test_addr()); }

// Connection qualifiers no other test of this run (nor the Python suite's 20000..39999) uses.
std::uint16_t next_port();

// A side of a connection: its own open file, an IA, a connection EVD and a CR EVD.
struct Side {
  explicit Side(std::uint32_t qlen = 16, std::uint32_t cr_qlen = 16)
      : ia(device, test_netdev()),
        evd(ia, qlen, KDAT_EVD_CONNECTION),
        crevd(ia, cr_qlen, KDAT_EVD_CR | KDAT_EVD_CONNECTION) {}
  kdat::Device device;
  kdat::Ia ia;
  kdat::Evd evd;
  kdat::Evd crevd;
};

// Waits for the next event and checks its number; fails the test (returning an empty event)
// when none arrives in time.
kdat::Event expect_event(kdat::Evd &evd, std::uint32_t number, kdat::Timeout timeout = 10s);

// Polls `done` until it holds or `timeout` passes.
bool eventually(const std::function<bool()> &done, std::chrono::milliseconds timeout = 10s);

// The DAT type of what `f` throws, or 0 if it throws nothing.
std::uint32_t error_type(const std::function<void()> &f);
kdat::DatReturn error_code(const std::function<void()> &f);

// Client connects, server accepts on a new EP; both see ESTABLISHED.  Returns the server EP.
kdat::Endpoint connect_pair(Side &client, kdat::Endpoint &client_ep, Side &server,
                            std::uint16_t port);

}  // namespace guest
