// bench/state_read: what one look at an endpoint's state costs (kdat's shared table vs the
// EP_QUERY ioctl), and how soon a connection request wakes its consumer (kdat's event ring vs
// librdmacm's rdma_get_cm_event), measured side by side in one run on the same device.
//
// Output: a JSON object on stdout (bench/report turns it into bench/results/latest.md).
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <kdat/kdat.hpp>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string addr = "192.0.2.1";
  int reps = 7;
  long reads = 2'000'000;
  long ioctls = 100'000;
  int connects = 100;
  std::uint16_t port = 23500;
};

double ns_since(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double, std::nano>(t1 - t0).count();
}

// Median, min and max of a sample, as the report prints them.
struct Summary {
  double median = 0, min = 0, max = 0;
  std::size_t n = 0;
};

Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.n = v.size();
  s.min = v.front();
  s.max = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  return s;
}

std::string json(const char *name, const Summary &s) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "\"%s\": {\"median\": %.3f, \"min\": %.3f, \"max\": %.3f, \"n\": %zu}",
                name, s.median, s.min, s.max, s.n);
  return buf;
}

// ---- 1. state reads ---------------------------------------------------------------------------

void bench_state_reads(const Options &o, kdat::Ia &ia, std::vector<std::string> &out) {
  kdat::Evd evd(ia, 16);
  kdat::Endpoint ep(ia, evd);
  std::vector<double> table_ns, ioctl_ns;
  volatile std::uint32_t sink = 0;
  for (int r = 0; r < o.reps; ++r) {
    auto t0 = Clock::now();
    for (long i = 0; i < o.reads; ++i) sink = sink + static_cast<std::uint32_t>(ep.state());
    auto t1 = Clock::now();
    table_ns.push_back(ns_since(t0, t1) / static_cast<double>(o.reads));

    t0 = Clock::now();
    for (long i = 0; i < o.ioctls; ++i) sink = sink + static_cast<std::uint32_t>(ep.query().state);
    t1 = Clock::now();
    ioctl_ns.push_back(ns_since(t0, t1) / static_cast<double>(o.ioctls));
  }
  auto table = summarize(table_ns), ioctl = summarize(ioctl_ns);
  out.push_back(json("state_read_table_ns", table));
  out.push_back(json("state_read_ioctl_ns", ioctl));
  char buf[128];
  std::snprintf(buf, sizeof buf, "\"state_read_ratio\": %.2f", ioctl.median / table.median);
  out.push_back(buf);
}

// ---- 2. connection request delivery: kdat ring ---------------------------------------------

// The client stamps t0 just before its connect call; the server thread stamps the moment its
// wait returns with the request, then rejects it so the client can go again.
Summary bench_kdat_request_wake(const Options &o, kdat::Ia &ia) {
  kdat::Evd cr_evd(ia, 16, KDAT_EVD_CR);
  kdat::Psp psp(ia, cr_evd, o.port);
  kdat::Evd client_evd(ia, 16, KDAT_EVD_CONNECTION);
  kdat::Endpoint client(ia, client_evd);
  auto remote = kdat::Address::parse(o.addr);
  std::atomic<std::int64_t> t0_ns{0};
  std::vector<double> lat;

  std::thread server([&] {
    for (int i = 0; i < o.connects; ++i) {
      auto ev = cr_evd.wait(1, std::chrono::seconds(30));
      auto now = Clock::now().time_since_epoch();
      lat.push_back(static_cast<double>(std::chrono::nanoseconds(now).count() - t0_ns.load()));
      kdat::ConnectionRequest(cr_evd, ev).reject();
    }
  });
  for (int i = 0; i < o.connects; ++i) {
    t0_ns = std::chrono::nanoseconds(Clock::now().time_since_epoch()).count();
    client.connect(remote, o.port, std::chrono::seconds(10));
    auto ev = client_evd.wait(1, std::chrono::seconds(30));
    if (ev.number != KDAT_DAT_CONNECTION_EVENT_PEER_REJECTED)
      throw std::runtime_error("kdat: expected PEER_REJECTED, got " + ev.name());
    client.reset();
  }
  server.join();
  return summarize(lat);
}

// ---- 3. the same through librdmacm ----------------------------------------------------------

void check(int rc, const char *what) {
  if (rc) throw std::runtime_error(std::string("librdmacm: ") + what + ": " + std::strerror(errno));
}

rdma_cm_event_type next_event(rdma_event_channel *ch) {
  rdma_cm_event *e = nullptr;
  check(rdma_get_cm_event(ch, &e), "rdma_get_cm_event");
  auto type = e->event;
  rdma_ack_cm_event(e);
  return type;
}

Summary bench_rdmacm_request_wake(const Options &o) {
  std::uint16_t port = o.port + 1;
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(port);
  if (inet_pton(AF_INET, o.addr.c_str(), &sin.sin_addr) != 1)
    throw std::runtime_error("bad address " + o.addr);

  std::unique_ptr<rdma_event_channel, decltype(&rdma_destroy_event_channel)> server_ch(
      rdma_create_event_channel(), rdma_destroy_event_channel);
  std::unique_ptr<rdma_event_channel, decltype(&rdma_destroy_event_channel)> client_ch(
      rdma_create_event_channel(), rdma_destroy_event_channel);
  if (!server_ch || !client_ch) throw std::runtime_error("rdma_create_event_channel failed");
  rdma_cm_id *listener = nullptr;
  check(rdma_create_id(server_ch.get(), &listener, nullptr, RDMA_PS_TCP), "rdma_create_id");
  std::unique_ptr<rdma_cm_id, decltype(&rdma_destroy_id)> listener_owner(listener,
                                                                          rdma_destroy_id);
  check(rdma_bind_addr(listener, reinterpret_cast<sockaddr *>(&sin)), "rdma_bind_addr");
  check(rdma_listen(listener, 16), "rdma_listen");

  std::atomic<std::int64_t> t0_ns{0};
  std::vector<double> lat;
  std::thread server([&] {
    for (int i = 0; i < o.connects; ++i) {
      rdma_cm_event *e = nullptr;
      check(rdma_get_cm_event(server_ch.get(), &e), "rdma_get_cm_event");
      auto now = Clock::now().time_since_epoch();
      if (e->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
        rdma_ack_cm_event(e);
        --i;
        continue;
      }
      lat.push_back(static_cast<double>(std::chrono::nanoseconds(now).count() - t0_ns.load()));
      rdma_cm_id *child = e->id;
      rdma_reject(child, nullptr, 0);
      rdma_ack_cm_event(e);
      rdma_destroy_id(child);
    }
  });
  for (int i = 0; i < o.connects; ++i) {
    rdma_cm_id *id = nullptr;
    check(rdma_create_id(client_ch.get(), &id, nullptr, RDMA_PS_TCP), "rdma_create_id");
    t0_ns = std::chrono::nanoseconds(Clock::now().time_since_epoch()).count();
    check(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr *>(&sin), 2000),
          "rdma_resolve_addr");
    if (next_event(client_ch.get()) != RDMA_CM_EVENT_ADDR_RESOLVED)
      throw std::runtime_error("librdmacm: address not resolved");
    check(rdma_resolve_route(id, 2000), "rdma_resolve_route");
    if (next_event(client_ch.get()) != RDMA_CM_EVENT_ROUTE_RESOLVED)
      throw std::runtime_error("librdmacm: route not resolved");
    rdma_conn_param param{};
    param.qp_num = 1;  // no QP: the server rejects before any data could flow
    param.retry_count = 7;
    check(rdma_connect(id, &param), "rdma_connect");
    auto type = next_event(client_ch.get());
    if (type != RDMA_CM_EVENT_REJECTED)
      throw std::runtime_error(std::string("librdmacm: expected REJECTED, got ") +
                               rdma_event_str(type));
    rdma_destroy_id(id);
  }
  server.join();
  return summarize(lat);
}

}  // namespace

int main(int argc, char **argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--addr") o.addr = v;
    else if (k == "--reps") o.reps = std::stoi(v);
    else if (k == "--reads") o.reads = std::stol(v);
    else if (k == "--ioctls") o.ioctls = std::stol(v);
    else if (k == "--connects") o.connects = std::stoi(v);
    else if (k == "--port") o.port = static_cast<std::uint16_t>(std::stoi(v));
    else {
      std::fprintf(stderr,
                   "usage: state_read [--addr IP] [--reps N] [--reads N] [--ioctls N] "
                   "[--connects N] [--port P]\n");
      return 2;
    }
  }
  try {
    kdat::Device device;
    kdat::Ia ia(device, o.addr);
    std::vector<std::string> out;
    char buf[160];
    std::snprintf(buf, sizeof buf, "\"reps\": %d, \"reads\": %ld, \"ioctls\": %ld, \"connects\": %d",
                  o.reps, o.reads, o.ioctls, o.connects);
    out.push_back(buf);
    bench_state_reads(o, ia, out);
    auto kdat_wake = bench_kdat_request_wake(o, ia);
    auto cm_wake = bench_rdmacm_request_wake(o);
    out.push_back(json("request_wake_kdat_ns", kdat_wake));
    out.push_back(json("request_wake_rdmacm_ns", cm_wake));
    std::snprintf(buf, sizeof buf, "\"request_wake_ratio\": %.2f", cm_wake.median / kdat_wake.median);
    out.push_back(buf);
    std::printf("{");
    for (std::size_t i = 0; i < out.size(); ++i) std::printf("%s%s", i ? ",\n " : "\n ", out[i].c_str());
    std::printf("\n}\n");
  } catch (const std::exception &e) {
    std::fprintf(stderr, "state_read: %s\n", e.what());
    return 1;
  }
  return 0;
}
