// SPDX-License-Identifier: GPL-2.0
// pkg_connect NETDEV ADDR PORT: what a libkdat user builds against the installed packages
// (scripts/package-root compiles it with `pkg-config kdat`; tests/guest/test_packages.py runs it
// on the packaged module): one connection through /dev/kdat with private data both ways, then a
// graceful disconnect.  Exits 0 and prints "pkg_connect ok" only if every step happened.
#include <cstdio>
#include <cstdlib>
#include <kdat/kdat.hpp>
#include <string>

namespace {

using namespace std::chrono_literals;

kdat::Event next(kdat::Evd &evd, std::uint32_t number) {
  auto event = evd.wait(1, 10s);
  if (event.name() != kdat::event_name(number))
    throw std::runtime_error("expected " + std::string(kdat::event_name(number)) + ", got " +
                             std::string(event.name()));
  return event;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: pkg_connect NETDEV ADDR PORT\n");
    return 2;
  }
  try {
    const std::string netdev = argv[1];
    const auto port = static_cast<std::uint16_t>(std::atoi(argv[3]));
    kdat::Device server_dev, client_dev;
    kdat::Ia server_ia(server_dev, netdev), client_ia(client_dev, netdev);
    kdat::Evd server_evd(server_ia, 8, KDAT_EVD_CONNECTION);
    kdat::Evd cr_evd(server_ia, 8, KDAT_EVD_CR);
    kdat::Evd client_evd(client_ia, 8, KDAT_EVD_CONNECTION);
    kdat::Psp psp(server_ia, cr_evd, port);

    kdat::Endpoint client(client_ia, client_evd);
    client.connect(kdat::Address::parse(argv[2]), port, 10s, kdat::as_private_data("hello"));
    kdat::ConnectionRequest cr(cr_evd, next(cr_evd, KDAT_DAT_CONNECTION_REQUEST_EVENT));
    if (kdat::to_string(cr.query().private_data) != "hello") throw std::runtime_error("REQ data");
    kdat::Endpoint server(server_ia, server_evd);
    cr.accept(server, kdat::as_private_data("welcome"));
    if (next(client_evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED).private_data_string() != "welcome")
      throw std::runtime_error("REP data");
    (void)next(server_evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED);
    if (client.state() != kdat::EpState::CONNECTED) throw std::runtime_error("not CONNECTED");

    client.disconnect(kdat::CloseMode::graceful);
    (void)next(client_evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED);
    (void)next(server_evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED);
    std::printf("pkg_connect ok: %s -> %s\n", kdat::ep_state_name(KDAT_EP_CONNECTED),
                kdat::ep_state_name(KDAT_EP_DISCONNECTED));
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "pkg_connect: %s\n", e.what());
    return 1;
  }
}
