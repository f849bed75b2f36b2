// The typed C++ view of the state table: names, lookups, the pre-check error, and which state
// pairs a table reader may legally observe a given number of transitions apart.
#include <gtest/gtest.h>

#include <kdat/ep_state.hpp>
#include <string>

namespace {

using kdat::EpState;
using kdat::Stimulus;

TEST(EpState, NamesComeFromTheTable) {
  EXPECT_STREQ(kdat::ep_state_name(EpState::CONNECTED), "CONNECTED");
  EXPECT_STREQ(kdat::ep_state_name(KDAT_DAT_EP_STATE_ACTIVE_CONNECTION_PENDING),
               "ACTIVE_CONNECTION_PENDING");
  EXPECT_STREQ(kdat::ep_state_name(1), "?");
  EXPECT_STREQ(kdat::stimulus_name(Stimulus::DUP_CONNECT), "DUP_CONNECT");
}

TEST(EpState, LookupMatchesTheCTable) {
  const auto step = kdat::lookup(EpState::UNCONNECTED, Stimulus::CONNECT);
  EXPECT_EQ(step.action, kdat::StepAction::go);
  EXPECT_EQ(step.next, EpState::ACTIVE_CONNECTION_PENDING);
  EXPECT_TRUE(kdat::allows(EpState::DISCONNECTED, Stimulus::RESET));
  EXPECT_FALSE(kdat::allows(EpState::CONNECTED, Stimulus::CONNECT));
  EXPECT_TRUE(kdat::allows(EpState::DISCONNECTED, Stimulus::DISCONNECT_ABRUPT));  // NOOP is allowed
}

// The questions VIPL and the DAT provider ask instead of listing states themselves.
TEST(EpState, QueriesAreTheTables) {
  for (const auto s : {EpState::UNCONNECTED, EpState::RESERVED, EpState::PASSIVE_CONNECTION_PENDING,
                       EpState::ACTIVE_CONNECTION_PENDING, EpState::TENTATIVE_CONNECTION_PENDING,
                       EpState::CONNECTED, EpState::DISCONNECT_PENDING, EpState::DISCONNECTED,
                       EpState::COMPLETION_PENDING}) {
    const std::string name = kdat::ep_state_name(s);
    EXPECT_EQ(kdat::has_connection(s), s == EpState::CONNECTED || s == EpState::DISCONNECT_PENDING)
        << name;
    EXPECT_EQ(kdat::is_connecting(s), s == EpState::ACTIVE_CONNECTION_PENDING) << name;
    EXPECT_EQ(kdat::is_accepting(s), s == EpState::COMPLETION_PENDING) << name;
    EXPECT_EQ(kdat::has_ended(s), s == EpState::DISCONNECTED) << name;
  }
}

TEST(EpState, InvalidStateErrorIsTheKernels) {
  const auto e = kdat::invalid_state_error(EpState::CONNECTED);
  EXPECT_EQ(e.type(), KDAT_DAT_INVALID_STATE);
  EXPECT_EQ(e.subtype(), KDAT_DAT_INVALID_STATE_EP_CONNECTED);
  EXPECT_NE(e.value & KDAT_DAT_CLASS_ERROR, 0u);
}

TEST(EpState, ReachableInExactSteps) {
  constexpr auto U = KDAT_EP_UNCONNECTED, A = KDAT_EP_ACTIVE_CONNECTION_PENDING,
                 C = KDAT_EP_CONNECTED, D = KDAT_EP_DISCONNECTED, P = KDAT_EP_DISCONNECT_PENDING;
  EXPECT_TRUE(kdat::reachable_in(U, U, 0));
  EXPECT_FALSE(kdat::reachable_in(U, C, 0));
  EXPECT_TRUE(kdat::reachable_in(U, A, 1));
  // An RC EP's CONNECTED needs ACTIVE_CONNECTION_PENDING first; a UD EP's first exchange
  // (UD_ESTABLISHED) makes it CONNECTED in one step.
  EXPECT_TRUE(kdat::reachable_in(U, C, 1));
  EXPECT_NE(kdat_ep_lookup(U, KDAT_EP_STIM_ESTABLISHED).action, static_cast<unsigned>(KDAT_EP_GO));
  EXPECT_TRUE(kdat::reachable_in(U, C, 2));
  EXPECT_TRUE(kdat::reachable_in(C, D, 1));
  EXPECT_TRUE(kdat::reachable_in(C, D, 2));   // via DISCONNECT_PENDING
  EXPECT_TRUE(kdat::reachable_in(D, U, 1));   // reset
  EXPECT_FALSE(kdat::reachable_in(C, U, 1));  // no direct edge
  EXPECT_FALSE(kdat::reachable_in(P, C, 1));
  // Whole connect/disconnect/reset cycles (4 steps) and failed-connect cycles (3 steps).
  EXPECT_TRUE(kdat::reachable_in(U, U, 4 * 1000));
  EXPECT_TRUE(kdat::reachable_in(U, U, 3 * 1000 + 4));
  EXPECT_TRUE(kdat::reachable_in(U, C, 1000002));
  EXPECT_FALSE(kdat::reachable_in(U, 1, 5));  // not a state
}

TEST(EpState, ReachableInAgreesWithBruteForceForSmallSteps) {
  // Direct recursion over the rules as the reference for the periodic shortcut.
  const auto brute = [](auto &&self, unsigned from, unsigned to, unsigned steps) -> bool {
    if (steps == 0) return from == to;
#define KDAT_TEST_EDGE_(st, stim, act, nxt, ev, fx)          \
  if (KDAT_EP_##act == KDAT_EP_GO && from == KDAT_EP_##st && \
      self(self, KDAT_EP_##nxt, to, steps - 1))              \
    return true;
    KDAT_EP_RULES(KDAT_TEST_EDGE_)
#undef KDAT_TEST_EDGE_
    return false;
  };
  for (unsigned from = 0; from < KDAT_EP_STATE_LIMIT; ++from) {
    if (!kdat::ep_state_valid(from)) continue;
    for (unsigned to = 0; to < KDAT_EP_STATE_LIMIT; ++to) {
      if (!kdat::ep_state_valid(to)) continue;
      for (unsigned steps = 0; steps <= 6; ++steps) {
        EXPECT_EQ(kdat::reachable_in(from, to, steps), brute(brute, from, to, steps))
            << kdat::ep_state_name(from) << " -> " << kdat::ep_state_name(to) << " in " << steps;
      }
    }
  }
}

}  // namespace
