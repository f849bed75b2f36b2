// The ring consumer against an in-memory ring with a producer that follows the kernel's side
// of the protocol: FIFO order across wrap-around, head published to the producer, a producer
// thread racing the consumer loses and reorders nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <deque>
#include <kdat/error.hpp>
#include <kdat/ring.hpp>
#include <kdat/types.hpp>
#include <thread>
#include <vector>

namespace {

class FakeRing {
 public:
  // entry_size: this kernel's (struct kdat_ring_entry), or an older one's (struct kdat_event).
  explicit FakeRing(std::uint32_t entries, std::uint32_t entry_size = sizeof(kdat_ring_entry))
      : memory_(KDAT_RING_MAP_SIZE(entries) / sizeof(std::uint64_t) + 1, 0) {
    auto *h = header();
    h->entries = entries;
    h->mask = entries - 1;
    h->entry_size = entry_size;
    h->evd = 0x10002;
  }
  kdat_ring_header *header() { return reinterpret_cast<kdat_ring_header *>(memory_.data()); }
  // What KDAT_IOC_EVD_RING reports for this kernel's layout.
  static kdat_ring_offsets offsets() {
    kdat_ring_offsets off{};
    off.head = offsetof(kdat_ring_header, head);
    off.tail = offsetof(kdat_ring_header, tail);
    off.entries = offsetof(kdat_ring_header, entries);
    off.mask = offsetof(kdat_ring_header, mask);
    off.entry_size = offsetof(kdat_ring_header, entry_size);
    off.backlog = offsetof(kdat_ring_header, backlog);
    off.overflow = offsetof(kdat_ring_header, overflow);
    off.flags = offsetof(kdat_ring_header, flags);
    off.array = KDAT_RING_ENTRIES_OFFSET;
    return off;
  }
  void *data() { return memory_.data(); }
  std::size_t size() const { return memory_.size() * sizeof(std::uint64_t); }

  // The kernel: append if there is room (head loaded with acquire), else keep it in backlog.
  bool produce(std::uint32_t number) {
    if (try_produce(number)) return true;
    backlog_.push_back(number);
    __atomic_store_n(&header()->backlog, static_cast<std::uint32_t>(backlog_.size()),
                     __ATOMIC_RELAXED);
    return false;
  }
  bool try_produce(std::uint32_t number) {
    kdat_ring_entry entry{};
    entry.event.number = number;
    entry.event.private_data_size = 4;
    std::memcpy(entry.event.private_data, &number, 4);
    return try_produce(entry);
  }
  // Writes entry_size bytes of `entry` (an older kernel's entry is the event alone).
  bool try_produce(const kdat_ring_entry &entry) {
    auto *h = header();
    const std::uint32_t head = __atomic_load_n(&h->head, __ATOMIC_ACQUIRE);
    const std::uint32_t tail = h->tail;
    if (tail - head == h->entries) return false;
    auto *slot = static_cast<std::byte *>(data()) + KDAT_RING_ENTRIES_OFFSET +
                 static_cast<std::size_t>(tail & h->mask) * h->entry_size;
    std::memcpy(slot, &entry, std::min<std::size_t>(h->entry_size, sizeof(entry)));
    __atomic_store_n(&h->tail, tail + 1, __ATOMIC_RELEASE);
    return true;
  }
  // RING_WAIT's refill: move the backlog in as room allows.
  void refill() {
    while (!backlog_.empty() && try_produce(backlog_.front())) backlog_.pop_front();
    __atomic_store_n(&header()->backlog, static_cast<std::uint32_t>(backlog_.size()),
                     __ATOMIC_RELAXED);
  }

 private:
  std::vector<std::uint64_t> memory_;
  std::deque<std::uint32_t> backlog_;
};

TEST(Ring, EmptyRingPopsNothing) {
  FakeRing r(4);
  kdat::RingConsumer c(r.data(), r.size(), FakeRing::offsets());
  EXPECT_EQ(c.entries(), 4u);
  EXPECT_EQ(c.available(), 0u);
  EXPECT_FALSE(c.pop_entry().has_value());
}

TEST(Ring, FifoAcrossWrapAroundAndHeadIsPublished) {
  FakeRing r(4);
  kdat::RingConsumer c(r.data(), r.size(), FakeRing::offsets());
  std::uint32_t next_in = 0, next_out = 0;
  for (int round = 0; round < 10; ++round) {
    while (r.produce(next_in)) ++next_in;  // fill to the brim (the last one goes to backlog)
    r.refill();                            // nothing fits; backlog stays
    EXPECT_EQ(c.available(), 4u);
    EXPECT_EQ(c.backlog(), 1u);
    for (int i = 0; i < 3; ++i) {
      const auto ev = c.pop_entry();
      ASSERT_TRUE(ev.has_value());
      EXPECT_EQ(ev->event.number, next_out++);
    }
    EXPECT_EQ(r.header()->head, next_out) << "head must reach the producer";
    r.refill();  // the backlogged one moves in
    EXPECT_EQ(c.backlog(), 0u);
    while (auto ev = c.pop_entry()) EXPECT_EQ(ev->event.number, next_out++);
    next_in = next_out;
  }
}

TEST(Ring, CountersWrapAround32Bits) {
  FakeRing r(8);
  r.header()->head = 0xfffffffeu;
  r.header()->tail = 0xfffffffeu;
  kdat::RingConsumer c(r.data(), r.size(), FakeRing::offsets());
  for (std::uint32_t i = 0; i < 6; ++i) ASSERT_TRUE(r.produce(i));
  EXPECT_EQ(c.available(), 6u);
  for (std::uint32_t i = 0; i < 6; ++i) EXPECT_EQ(c.pop_entry()->event.number, i);
  EXPECT_EQ(r.header()->head, 4u);
}

TEST(Ring, FlagsAndOverflowAreVisible) {
  FakeRing r(2);
  kdat::RingConsumer c(r.data(), r.size(), FakeRing::offsets());
  EXPECT_FALSE(c.dead());
  r.header()->overflow = 3;
  r.header()->flags = KDAT_RING_DEAD;
  EXPECT_EQ(c.overflow(), 3u);
  EXPECT_TRUE(c.dead());
}

TEST(Ring, RejectsBadGeometry) {
  FakeRing r(4);
  r.header()->entries = 3;
  EXPECT_THROW(kdat::RingConsumer(r.data(), r.size(), FakeRing::offsets()), kdat::Error);
  FakeRing s(4);
  s.header()->entry_size = 16;
  EXPECT_THROW(kdat::RingConsumer(s.data(), s.size(), FakeRing::offsets()), kdat::Error);
  FakeRing t(4);
  EXPECT_THROW(kdat::RingConsumer(t.data(), 4096 + 10, FakeRing::offsets()), kdat::Error);
  FakeRing u(4);
  u.header()->tail = 9;  // more than a ring ahead: corrupt
  kdat::RingConsumer cu(u.data(), u.size(), FakeRing::offsets());
  EXPECT_THROW((void)cu.pop_entry(), kdat::Error);
}

TEST(Ring, ConcurrentProducerLosesAndReordersNothing) {
  FakeRing r(8);
  kdat::RingConsumer c(r.data(), r.size(), FakeRing::offsets());
  constexpr std::uint32_t total = 200000;
  std::thread producer([&] {
    for (std::uint32_t i = 0; i < total;) {
      if (r.try_produce(i)) {
        ++i;
      } else {
        std::this_thread::yield();  // full: wait for the consumer to free a slot
      }
    }
  });
  std::uint32_t expected = 0;
  while (expected < total) {
    if (auto ev = c.pop_entry()) {
      ASSERT_EQ(ev->event.number, expected) << "lost or reordered";
      std::uint32_t payload = 0;
      std::memcpy(&payload, ev->event.private_data, 4);
      ASSERT_EQ(payload, expected) << "entry read before the producer finished it";
      ++expected;
    }
  }
  producer.join();
  EXPECT_EQ(c.available(), 0u);
}

// A kernel that lays the ring out differently (fields moved, entries further on) publishes
// other offsets: the consumer reads and writes only where they point.
TEST(Ring, FollowsThePublishedOffsets) {
  std::vector<std::uint64_t> memory((8192 + 4 * sizeof(kdat_event)) / sizeof(std::uint64_t), 0);
  auto *bytes = reinterpret_cast<std::byte *>(memory.data());
  const auto at = [&](std::uint32_t offset) {
    return reinterpret_cast<std::uint32_t *>(bytes + offset);
  };
  kdat_ring_offsets off{};
  off.head = 1024;
  off.tail = 0;
  off.entries = 2048;
  off.mask = 2052;
  off.entry_size = 2056;
  off.backlog = 3000;
  off.overflow = 3004;
  off.flags = 3008;
  off.array = 8192;
  *at(off.entries) = 4;
  *at(off.mask) = 3;
  *at(off.entry_size) = sizeof(kdat_event);
  kdat_event ev{};
  ev.number = 0x4001;
  std::memcpy(bytes + off.array + sizeof(kdat_event), &ev, sizeof(ev));  // slot 1
  *at(off.head) = 1;
  *at(off.tail) = 2;
  *at(off.backlog) = 5;
  kdat::RingConsumer c(memory.data(), memory.size() * sizeof(std::uint64_t), off);
  EXPECT_EQ(c.entries(), 4u);
  EXPECT_EQ(c.available(), 1u);
  EXPECT_EQ(c.backlog(), 5u);
  const auto got = c.pop_entry();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->event.number, 0x4001u);
  EXPECT_EQ(*at(off.head), 2u);
  EXPECT_EQ(*reinterpret_cast<std::uint32_t *>(bytes), 2u) << "tail (at 0) left alone";
}

// A UD EP's connection event carries its tail (ABI 7) through the ring, and the consumer reads
// it as an Event's `ud`; the other events' tails are zero, which is no UdPeer.
TEST(Ring, EntriesCarryTheUdTail) {
  FakeRing r(4);
  kdat::RingConsumer c(r.data(), r.size(), FakeRing::offsets());
  kdat_ring_entry entry{};
  entry.event.number = KDAT_DAT_CONNECTION_EVENT_ESTABLISHED;
  entry.event.ep = 0x30005;
  entry.event.private_data_size = 3;
  std::memcpy(entry.event.private_data, "abc", 3);
  entry.ud.flags = KDAT_UD_EVENT | KDAT_UD_PASSIVE | KDAT_UD_AH_VALID;
  entry.ud.qpn = 0x11;
  entry.ud.qkey = 0x01234567;
  entry.ud.ah.dlid = 7;
  entry.ud.ah.is_global = 1;
  entry.ud.ah.port_num = 1;
  entry.ud.ah.dgid[15] = 0x42;
  entry.ud.addr = kdat::Address::parse("192.0.2.2", 4791).raw;
  ASSERT_TRUE(r.try_produce(entry));
  ASSERT_TRUE(r.try_produce(42));  // an event without a tail after it
  const auto got = c.pop_entry();
  ASSERT_TRUE(got.has_value());
  const auto e = kdat::Event::from_raw(got->event, got->ud);
  EXPECT_EQ(e.private_data_string(), "abc");
  ASSERT_TRUE(e.ud.has_value());
  EXPECT_TRUE(e.ud->passive);
  EXPECT_TRUE(e.ud->ah_valid);
  EXPECT_EQ(e.ud->qpn, 0x11u);
  EXPECT_EQ(e.ud->qkey, 0x01234567u);
  EXPECT_EQ(e.ud->ah.dlid, 7);
  EXPECT_EQ(e.ud->ah.dgid[15], 0x42);
  EXPECT_EQ(e.ud->address.to_string(), "192.0.2.2:4791");
  const auto next = c.pop_entry();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->event.number, 42u);
  EXPECT_FALSE(kdat::Event::from_raw(next->event, next->ud).ud.has_value());
  // libkdat 0.1's pop() takes an entry's event alone, at the same stride
  ASSERT_TRUE(r.try_produce(entry));
  ASSERT_TRUE(r.try_produce(43));
  const auto old_call = c.pop();
  ASSERT_TRUE(old_call.has_value());
  EXPECT_EQ(old_call->ep, 0x30005u);
  EXPECT_EQ(c.pop()->number, 43u);
  EXPECT_FALSE(c.pop().has_value());
}

// An ABI 6 kernel's ring: entries are bare struct kdat_event (entry_size says so).  They are read
// at that stride and have no tail, whatever lies in the bytes after the event.
TEST(Ring, OlderKernelsEntriesHaveNoTail) {
  FakeRing r(4, sizeof(kdat_event));
  kdat::RingConsumer c(r.data(), r.size(), FakeRing::offsets());
  kdat_ring_entry entry{};
  entry.event.number = KDAT_DAT_CONNECTION_EVENT_ESTABLISHED;
  entry.ud.flags = KDAT_UD_EVENT;  // not written: the producer writes entry_size bytes only
  ASSERT_TRUE(r.try_produce(entry));
  // what follows the first event in memory is the second slot: make it look like a tail
  kdat_ring_entry second{};
  second.event.number = KDAT_UD_EVENT;
  second.event.evd = KDAT_UD_EVENT;
  ASSERT_TRUE(r.try_produce(second));
  for (std::uint32_t want :
       {std::uint32_t{KDAT_DAT_CONNECTION_EVENT_ESTABLISHED}, std::uint32_t{KDAT_UD_EVENT}}) {
    const auto got = c.pop_entry();
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->event.number, want);
    EXPECT_EQ(got->ud.flags, 0u);
    EXPECT_EQ(got->ud.qpn, 0u);
    EXPECT_FALSE(kdat::Event::from_raw(got->event, got->ud).ud.has_value());
  }
  EXPECT_FALSE(c.pop_entry().has_value());
}

TEST(Ring, RejectsOffsetsOutsideTheMapping) {
  FakeRing r(4);
  auto off = FakeRing::offsets();
  off.tail = static_cast<std::uint32_t>(r.size());  // just past the end
  EXPECT_THROW(kdat::RingConsumer(r.data(), r.size(), off), kdat::Error);
  off = FakeRing::offsets();
  off.head = 2;  // misaligned
  EXPECT_THROW(kdat::RingConsumer(r.data(), r.size(), off), kdat::Error);
  off = FakeRing::offsets();
  off.array = static_cast<std::uint32_t>(r.size()) - 8;  // entries would run past the end
  EXPECT_THROW(kdat::RingConsumer(r.data(), r.size(), off), kdat::Error);
}

}  // namespace
