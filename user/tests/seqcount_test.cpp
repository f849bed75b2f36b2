// The seqcount reader of the shared table against an in-memory table: consistent copies only,
// odd seq and writes racing the copy are retried, a concurrent writer never yields a torn copy.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <kdat/table.hpp>
#include <thread>

#include "fake_table.hpp"

namespace {

using kdat::testing::ep_record;
using kdat::testing::FakeTable;

TEST(Seqcount, ReadsAStableRecord) {
  FakeTable t(8);
  t.write(3, ep_record(0x12340003, KDAT_EP_CONNECTED, 2));
  kdat_record out{};
  ASSERT_TRUE(kdat::seqcount::try_read(t.record(3), out));
  EXPECT_EQ(out.handle, 0x12340003u);
  EXPECT_EQ(out.state, static_cast<std::uint32_t>(KDAT_EP_CONNECTED));
  EXPECT_EQ(out.seq % 2, 0u);
}

TEST(Seqcount, OddSeqIsNotACopy) {
  FakeTable t(8);
  t.write(1, ep_record(0x10001, KDAT_EP_UNCONNECTED, 0));
  t.begin(1);
  kdat_record out{};
  EXPECT_FALSE(kdat::seqcount::try_read(t.record(1), out));
  t.finish(1);
  EXPECT_TRUE(kdat::seqcount::try_read(t.record(1), out));
}

TEST(Seqcount, StateFastPathFollowsTheSameProtocol) {
  FakeTable t(8);
  t.write(5, ep_record(0x50005, KDAT_EP_CONNECTED, 2));
  std::uint32_t handle = 0, state = 0;
  ASSERT_TRUE(kdat::seqcount::try_read_state(t.record(5), handle, state));
  EXPECT_EQ(handle, 0x50005u);
  EXPECT_EQ(state, static_cast<std::uint32_t>(KDAT_EP_CONNECTED));
  t.begin(5);
  EXPECT_FALSE(kdat::seqcount::try_read_state(t.record(5), handle, state));
  t.finish(5);
  EXPECT_TRUE(kdat::seqcount::try_read_state(t.record(5), handle, state));
}

TEST(Seqcount, WriteDuringTheCopyIsDetected) {
  // The writer starts and tears the record between the reader's copy and its seq re-check.
  FakeTable t(8);
  t.write(2, ep_record(0x20002, KDAT_EP_UNCONNECTED, 0));
  kdat_record out{};
  const bool ok = kdat::seqcount::try_read(t.record(2), out, [&] {
    t.begin(2);
    t.poke(2, offsetof(kdat_record, state) / 4, KDAT_EP_ACTIVE_CONNECTION_PENDING);
  });
  EXPECT_FALSE(ok);
  // A complete write between copy and check also changes seq (by two): still refused.
  t.finish(2);
  const bool ok2 = kdat::seqcount::try_read(
      t.record(2), out, [&] { t.write(2, ep_record(0x20002, KDAT_EP_CONNECTED, 2)); });
  EXPECT_FALSE(ok2);
  ASSERT_TRUE(kdat::seqcount::try_read(t.record(2), out));
  EXPECT_EQ(out.state, static_cast<std::uint32_t>(KDAT_EP_CONNECTED));
}

TEST(Seqcount, BlockingReadWaitsForTheWriterToFinish) {
  FakeTable t(8);
  t.write(4, ep_record(0x40004, KDAT_EP_UNCONNECTED, 0));
  t.begin(4);
  t.poke(4, offsetof(kdat_record, state) / 4, KDAT_EP_CONNECTED);
  std::atomic<bool> done{false};
  kdat_record got{};
  std::thread reader([&] {
    got = kdat::seqcount::read(t.record(4));
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(done.load()) << "returned a record that was mid-write";
  t.poke(4, offsetof(kdat_record, transitions) / 4, 1);
  t.finish(4);
  reader.join();
  EXPECT_EQ(got.state, static_cast<std::uint32_t>(KDAT_EP_CONNECTED));
  EXPECT_EQ(got.transitions, 1u);
}

TEST(Seqcount, StuckWriterIsAnError) {
  FakeTable t(8);
  t.begin(5);
  EXPECT_THROW((void)kdat::seqcount::read(t.record(5)), kdat::Error);
}

TEST(Seqcount, ConcurrentWriterNeverYieldsATornCopy) {
  // Every write makes all payload words equal to one counter; a torn copy would mix values.
  // The test ends on work done, not on a time slice: a busy host may give the reader little CPU
  // in any fixed interval, so it reads until it has taken enough copies across enough of the
  // writer's writes, with a deadline only as a backstop.
  FakeTable t(4);
  constexpr std::size_t words = sizeof(kdat_record) / 4;
  constexpr std::uint64_t wanted_copies = 500;
  constexpr std::uint64_t wanted_values = 20;
  // A jthread: a failed assertion returns from the test, and the writer is stopped and joined
  // on that path too.  The writer yields between writes, as the module's writers are idle
  // between state changes: a writer that never pauses can keep a reader on a busy host from
  // ever finding a stable copy, which read() reports after a second.
  std::jthread writer([&t](const std::stop_token &stop) {
    for (std::uint32_t v = 1; !stop.stop_requested(); ++v) {
      t.begin(1);
      for (std::size_t w = 1; w < words; ++w) t.poke(1, w, v);
      t.finish(1);
      std::this_thread::yield();
    }
  });
  std::uint64_t copies = 0;
  std::uint64_t values = 0;
  std::uint32_t last = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((copies < wanted_copies || values < wanted_values) &&
         std::chrono::steady_clock::now() < deadline) {
    const kdat_record r = kdat::seqcount::read(t.record(1));
    const auto *w = reinterpret_cast<const std::uint32_t *>(&r);
    for (std::size_t i = 2; i < words; ++i) ASSERT_EQ(w[i], w[1]) << "torn at word " << i;
    ASSERT_GE(w[1], last) << "went backwards";
    if (w[1] != last) ++values;
    last = w[1];
    ++copies;
  }
  writer.request_stop();
  writer.join();
  EXPECT_GE(copies, wanted_copies);
  EXPECT_GE(values, wanted_values) << "the copies did not overlap the writer's writes";
}

TEST(TableView, SnapshotListsLiveRecordsAndFindChecksTheHandle) {
  FakeTable t(8);
  t.write(1, ep_record(0xaaaa0001, KDAT_EP_CONNECTED, 2));
  t.write(3, ep_record(0xbbbb0003, KDAT_EP_UNCONNECTED, 0));
  kdat_record freed{};
  freed.generation = 0xcccc;
  t.write(2, freed);
  t.header()->live = 2;
  const kdat::TableView view(t.data(), t.size());
  const auto h = view.header();
  EXPECT_EQ(h.high_water, 3u);
  EXPECT_EQ(h.pid, 4242u);
  EXPECT_EQ(h.comm, "fake\"comm\\");
  const auto snap = view.snapshot();
  ASSERT_EQ(snap.records.size(), 2u);
  EXPECT_EQ(view.snapshot(true).records.size(), 3u);
  EXPECT_TRUE(view.find(0xaaaa0001).has_value());
  // The same slot with another generation: a stale handle finds nothing.
  EXPECT_FALSE(view.find(0xaaab0001).has_value());
  EXPECT_FALSE(view.find(0xcccc0002).has_value());
  // Past high_water (the page may not exist in the kernel's table): not read.
  EXPECT_FALSE(view.read(4).has_value());
  EXPECT_FALSE(view.read(0).has_value());
}

TEST(TableView, RejectsWhatIsNotATable) {
  FakeTable t(2);
  t.header()->magic = 0;
  EXPECT_THROW(kdat::TableView(t.data(), t.size()), kdat::Error);
  FakeTable u(2);
  EXPECT_THROW(kdat::TableView(u.data(), 100), kdat::Error);
}

}  // namespace
