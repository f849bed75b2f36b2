// Concurrency: a reader hammering Endpoint::state()/record() during connect/disconnect storms
// never sees a torn or impossible record; an event ring much smaller than the events it gets
// (backlog in the kernel) loses and reorders nothing.
#include <atomic>
#include <map>

#include "guest_util.hpp"

namespace {

using namespace guest;

TEST(Storm, StateReaderSeesOnlyLegalTransitions) {
  Side server, client;
  const auto port = next_port();
  kdat::Psp psp(server.ia, server.crevd, port);
  kdat::Endpoint ep(client.ia, client.evd);
  const auto handle = ep.handle();

  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> reads{0}, changes{0}, unseen{0};
  std::string violation;
  std::map<std::uint32_t, int> states_seen;
  std::thread reader([&] {
    kdat::Record last = ep.record();
    while (!stop.load(std::memory_order_relaxed)) {
      kdat::Record now;
      try {
        now = ep.record();
      } catch (const std::exception &e) {
        violation = std::string("record(): ") + e.what();
        return;
      }
      reads.fetch_add(1, std::memory_order_relaxed);
      if (now.handle != handle || now.type != KDAT_REC_EP || (now.seq & 1u) != 0) {
        violation = "foreign, odd or mistyped record";
        return;
      }
      if (!kdat::ep_state_valid(now.state)) {
        violation = "state " + std::to_string(now.state) + " is no DAT EP state";
        return;
      }
      if (now.seq == last.seq) continue;
      if (now.seq < last.seq || now.transitions < last.transitions ||
          now.changed_ns < last.changed_ns) {
        violation = "went backwards";
        return;
      }
      const std::uint32_t steps = now.transitions - last.transitions;
      if (!kdat::reachable_in(last.state, now.state, steps)) {
        violation = std::string(kdat::ep_state_name(last.state)) + " -> " +
                    kdat::ep_state_name(now.state) + " in " + std::to_string(steps) +
                    " transitions is no path of the state table";
        return;
      }
      if (steps > 0) {
        changes.fetch_add(1, std::memory_order_relaxed);
        unseen.fetch_add(steps - 1, std::memory_order_relaxed);
        ++states_seen[now.state];
      }
      last = now;
    }
  });

  // The storm: connect, then accept or reject, disconnect either side, reset; again.  Failures
  // end the storm (never the test function: the reader must be joined first).
  constexpr int rounds = 150;
  std::uint32_t expected_transitions = 0;
  try {
    for (int i = 0; i < rounds && !HasFailure(); ++i) {
      ep.connect(remote(), port, 10s);
      kdat::ConnectionRequest cr(server.crevd,
                                 expect_event(server.crevd, KDAT_DAT_CONNECTION_REQUEST_EVENT));
      if (i % 3 == 2) {
        cr.reject();
        expect_event(client.evd, KDAT_DAT_CONNECTION_EVENT_PEER_REJECTED);
        expected_transitions += 3;  // pending, disconnected, reset
      } else {
        kdat::Endpoint sep(server.ia, server.evd);
        cr.accept(sep);
        expect_event(client.evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED);
        expect_event(server.evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED);
        expected_transitions += 4;  // pending, connected, disconnected, reset
        if (i % 2 == 0) {
          const bool graceful = i % 4 == 0;
          ep.disconnect(graceful ? kdat::CloseMode::graceful : kdat::CloseMode::abrupt);
          if (graceful) expected_transitions += 1;  // through DISCONNECT_PENDING
        } else {
          sep.disconnect(kdat::CloseMode::abrupt);
        }
        expect_event(client.evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED);
        expect_event(server.evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED);
      }
      if (ep.state() != kdat::EpState::DISCONNECTED) {
        ADD_FAILURE() << "round " << i << " ended in " << kdat::ep_state_name(ep.state());
        break;
      }
      ep.reset();
    }
  } catch (const std::exception &e) {
    ADD_FAILURE() << "storm: " << e.what();
  }
  stop = true;
  reader.join();
  EXPECT_EQ(violation, "");
  const auto rec = ep.record();
  if (!HasFailure()) {
    EXPECT_EQ(rec.transitions, expected_transitions);
  }
  EXPECT_GT(reads.load(), 1000u);
  // The reader competes for the CPU with the storm; it must have seen a good share of changes.
  EXPECT_GE(changes.load(), 10u);
  RecordProperty("reads", std::to_string(reads.load()));
  RecordProperty("changes_seen", std::to_string(changes.load()));
  RecordProperty("changes_unseen", std::to_string(unseen.load()));
  EXPECT_GT(states_seen[KDAT_EP_CONNECTED] + states_seen[KDAT_EP_ACTIVE_CONNECTION_PENDING], 0);
}

TEST(Storm, StateIsReadableFromManyThreadsWhileAnotherConnects) {
  Side server, client;
  const auto port = next_port();
  kdat::Psp psp(server.ia, server.crevd, port, kdat::PspFlags::provider);
  kdat::Endpoint ep(client.ia, client.evd);
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      try {
        while (!stop) {
          if (!kdat::ep_state_valid(static_cast<std::uint32_t>(ep.state()))) ++bad;
        }
      } catch (...) {
        ++bad;
      }
    });
  }
  try {
    for (int i = 0; i < 10 && !HasFailure(); ++i) {
      ep.connect(remote(), port, 10s);
      const auto req = expect_event(server.crevd, KDAT_DAT_CONNECTION_REQUEST_EVENT);
      auto sep = kdat::Endpoint::adopt(server.ia, req.ep);
      kdat::ConnectionRequest(server.crevd, req).accept();
      expect_event(client.evd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED);
      expect_event(server.crevd, KDAT_DAT_CONNECTION_EVENT_ESTABLISHED);
      ep.disconnect();
      expect_event(client.evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED);
      expect_event(server.crevd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED);
      ep.reset();
    }
  } catch (const std::exception &e) {
    ADD_FAILURE() << "storm: " << e.what();
  }
  stop = true;
  for (auto &t : readers) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(EventRing, FarMoreEventsThanTheRingHoldsArriveAllAndInOrder) {
  // qlen 4: a 4-entry ring on both sides; 12 requests and 12 rejections each pile up behind it.
  constexpr int n = 12;
  Side server(16, 4), client(4, 16);
  ASSERT_EQ(server.crevd.ring_entries(), 4u);
  ASSERT_EQ(client.evd.ring_entries(), 4u);
  const auto port = next_port();
  kdat::Psp psp(server.ia, server.crevd, port);
  std::vector<kdat::Endpoint> eps;
  for (int i = 0; i < n; ++i) {
    eps.emplace_back(client.ia, client.evd);
    const std::string tag = "req" + std::to_string(i);
    eps.back().connect(remote(), port, 60s, kdat::as_private_data(tag));
    // One at a time, so the order they arrive in is known: wait until the kernel has it.
    ASSERT_TRUE(eventually([&] { return server.crevd.pending() == static_cast<unsigned>(i + 1); }))
        << "request " << i << " did not arrive; pending " << server.crevd.pending();
  }
  EXPECT_EQ(server.crevd.pending(), static_cast<unsigned>(n));
  // Take them all, alternating wait and dequeue (dequeue must refill from the backlog too).
  std::vector<kdat::ConnectionRequest> crs;
  for (int i = 0; i < n; ++i) {
    std::optional<kdat::Event> ev;
    if (i % 2 == 0) {
      ev = server.crevd.wait(1, 10s);
    } else {
      ev = server.crevd.dequeue();
    }
    ASSERT_TRUE(ev.has_value()) << "event " << i << " lost";
    ASSERT_TRUE(ev->is_connection_request()) << ev->name();
    crs.emplace_back(server.crevd, *ev);
    EXPECT_EQ(kdat::to_string(crs.back().query().private_data), "req" + std::to_string(i))
        << "reordered";
  }
  EXPECT_FALSE(server.crevd.dequeue().has_value());
  EXPECT_EQ(server.crevd.pending(), 0u);

  // Now the client's 4-entry ring: reject one at a time, letting the events pile up.
  for (int i = 0; i < n; ++i) {
    crs[i].reject(kdat::as_private_data("no" + std::to_string(i)));
    ASSERT_TRUE(eventually([&] { return client.evd.pending() == static_cast<unsigned>(i + 1); }))
        << "rejection " << i << " did not arrive";
  }
  for (int i = 0; i < n; ++i) {
    const auto ev = client.evd.wait(1, 10s);
    EXPECT_EQ(ev.number, KDAT_DAT_CONNECTION_EVENT_PEER_REJECTED);
    EXPECT_EQ(ev.ep, eps[i].handle()) << "reordered at " << i;
    EXPECT_EQ(ev.private_data_string(), "no" + std::to_string(i));
  }
  EXPECT_FALSE(client.evd.dequeue().has_value());
}

}  // namespace
