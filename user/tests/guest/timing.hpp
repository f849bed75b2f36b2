// Judging durations on a machine that may be busy (the C++ twin of tests/kdat_harness/timing.py;
// used by user/tests/guest and user/vipl/tests/guest).
//
// A timeout must never end early, whatever the load: that is checked exactly.  How late it may
// end depends on the load (a guest on a shared 2-core host can lose its CPU for a second), so
// lateness is judged against a control measured beside it in the same run: plain timed sleeps of
// the same length in this process.  A kernel timer or a library's deadline cannot be more on
// time than a thread's sleep under the same load, except for its own wake-up work, which kFloor
// covers.
//
//   EXPECT_TRUE(guest::judge_on_time(1s, [&] {  // up to three attempts, each with its control
//     const auto t0 = guest::Clock::now();
//     ...                                          // the operation under test, and its checks
//     return guest::Clock::now() - t0;
//   }, "the timeout"));
//
// A call that must not wait is judged against the wait it was given, chosen long (seconds) so
// that no load stretches a prompt return that far: EXPECT_TRUE(guest::prompt(took, 20s)).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace guest {

using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

// Lateness that is not load: the call's overhead around the ioctl, a jiffy or two of timer
// rounding (HZ 250: 4 ms each), the work item's own run; idle in the guest, well under this.
// Same as timing.py's FLOOR_S.
inline constexpr Seconds kFloor = std::chrono::milliseconds(50);
// How many times the control's lateness the measured operation may be late: it does more than
// one wake-up (a timer, then a work item, then the waiter's wake).  Same as timing.py.
inline constexpr double kLoadFactor = 3;

// `count` timed sleeps of `asked` each, started now in threads (std::this_thread::sleep_for,
// measured with steady_clock).  lateness() waits for them and returns how late the latest one
// woke (>= 0).  The destructor joins the threads.
class SleepControl {
 public:
  explicit SleepControl(Clock::duration asked, std::size_t count = 1)
      : asked_(asked), took_(std::max<std::size_t>(count, 1)) {
    threads_.reserve(took_.size());
    for (auto &slot : took_) {
      threads_.emplace_back([this, &slot] {
        const auto t0 = Clock::now();
        std::this_thread::sleep_for(asked_);
        slot = Clock::now() - t0;  // each thread writes its own slot; join() publishes it
      });
    }
  }
  SleepControl(const SleepControl &) = delete;
  SleepControl &operator=(const SleepControl &) = delete;

  Seconds lateness() {
    for (auto &t : threads_)
      if (t.joinable()) t.join();
    const auto latest = *std::max_element(took_.begin(), took_.end());
    return std::max(Seconds(latest - asked_), Seconds::zero());
  }

 private:
  Clock::duration asked_;
  std::vector<Clock::duration> took_;  // before threads_: the threads are joined first
  std::vector<std::jthread> threads_;
};

inline Seconds allowed_lateness(Seconds control_lateness) {
  return kFloor + kLoadFactor * control_lateness;
}

// Seconds with `digits` decimals, for the messages.
inline std::string secs(Seconds s, int digits = 3) {
  std::array<char, 32> buf{};
  std::snprintf(buf.data(), buf.size(), "%.*f", digits, s.count());
  return buf.data();
}

// took >= asked (never early; compared in the clock's own ticks), and no later than the control
// allows.
inline ::testing::AssertionResult on_time(Clock::duration took, Clock::duration asked,
                                          SleepControl &control,
                                          std::string_view what = "the timeout") {
  if (took < asked)
    return ::testing::AssertionFailure()
           << what << " ended early: after " << secs(took, 4) << " s of " << secs(asked) << " s";
  const auto late = control.lateness();
  const auto allowed = allowed_lateness(late);
  if (took - asked > allowed)
    return ::testing::AssertionFailure()
           << what << " came " << secs(took - asked) << " s late (after " << secs(took) << " s of "
           << secs(asked) << " s); a plain sleep beside it was " << secs(late)
           << " s late, so at most " << secs(allowed) << " s is allowed";
  return ::testing::AssertionSuccess();
}

// Up to `attempts` runs of measure(), which runs the operation (with its own checks) and returns
// how long it took; each run is judged by on_time() against four sleeps of `asked` started beside
// it.  An early end fails at once (that is a bug whatever the load); a late one is tried again,
// since one stall of the guest can outlast every control (the same rule as timing.py's
// judge_on_time).
template <class Measure>
::testing::AssertionResult judge_on_time(Clock::duration asked, Measure measure,
                                         std::string_view what = "the timeout", int attempts = 3) {
  auto verdict = ::testing::AssertionSuccess();
  for (int i = 0; i < attempts; ++i) {
    SleepControl control(asked, 4);
    const Clock::duration took = measure();
    verdict = on_time(took, asked, control, what);
    if (verdict || took < asked) return verdict;
  }
  return verdict << " (late in each of " << attempts << " attempts)";
}

// A call that must not wait: it took less than half of the wait it was given (chosen long
// enough, seconds, that no load stretches a prompt return that far).
inline ::testing::AssertionResult prompt(Clock::duration took, Clock::duration waited,
                                         std::string_view what = "the call") {
  if (took < waited / 2) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << " took " << secs(took)
                                       << " s: it waited (for up to " << secs(waited, 1) << " s)";
}

}  // namespace guest
