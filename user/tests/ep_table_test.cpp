// The C++ side reads the same endpoint state table as kdat.ko (include/kdat/ep_table.h).
#include <gtest/gtest.h>
#include <kdat/ep_table.h>

#include <array>
#include <set>

namespace {

constexpr std::array kStates = {
#define KDAT_TEST_STATE_(name) KDAT_EP_##name,
    KDAT_EP_STATES(KDAT_TEST_STATE_)
#undef KDAT_TEST_STATE_
};

TEST(EpTable, NineStatesAllValid) {
  EXPECT_EQ(kStates.size(), 9u);
  for (auto s : kStates) EXPECT_TRUE(kdat_ep_state_valid(s));
  EXPECT_FALSE(kdat_ep_state_valid(1));  // DAT_EP_STATE_UNCONFIGURED_UNCONNECTED: not kdat's
}

TEST(EpTable, EveryRuleIsWhatLookupReturns) {
  int rules = 0;
#define KDAT_TEST_RULE_(st, stim, act, nxt, ev, fx)                                \
  {                                                                                \
    const auto step = kdat_ep_lookup(KDAT_EP_##st, KDAT_EP_STIM_##stim);           \
    EXPECT_EQ(step.action, static_cast<unsigned>(KDAT_EP_##act)) << #st " " #stim; \
    EXPECT_EQ(step.next, static_cast<unsigned>(KDAT_EP_##nxt)) << #st " " #stim;   \
    EXPECT_EQ(step.event, KDAT_EP_EVENT_##ev) << #st " " #stim;                    \
    EXPECT_EQ(step.effects, KDAT_EP_FX_##fx) << #st " " #stim;                     \
    ++rules;                                                                       \
  }
  KDAT_EP_RULES(KDAT_TEST_RULE_)
#undef KDAT_TEST_RULE_
  EXPECT_GT(rules, 40);
}

TEST(EpTable, DefaultsByStimulusKind) {
  // Consumer operations default to INVALID, provider events to STALE, state unchanged.
  const auto op = kdat_ep_lookup(KDAT_EP_CONNECTED, KDAT_EP_STIM_CONNECT);
  EXPECT_EQ(op.action, static_cast<unsigned>(KDAT_EP_INVALID));
  EXPECT_EQ(op.next, static_cast<unsigned>(KDAT_EP_CONNECTED));
  const auto ev = kdat_ep_lookup(KDAT_EP_DISCONNECTED, KDAT_EP_STIM_ESTABLISHED);
  EXPECT_EQ(ev.action, static_cast<unsigned>(KDAT_EP_STALE));
  EXPECT_EQ(ev.event, KDAT_EP_EVENT_NONE);
  EXPECT_EQ(op.effects, KDAT_EP_FX_NONE);
  EXPECT_EQ(ev.effects, KDAT_EP_FX_NONE);
}

TEST(EpTable, InvalidStateSubtypesAreDistinct) {
  std::set<unsigned> seen;
  for (auto s : kStates) seen.insert(kdat_ep_invalid_state_subtype(s));
  EXPECT_EQ(seen.size(), kStates.size());
}

// The table queries the kernel and the libraries ask instead of comparing states.
TEST(EpTable, QueriesNameTheStatesTheyMean) {
  using Query = int (*)(unsigned);
  const auto states_where = [](Query q) {
    std::set<unsigned> out;
    for (auto s : kStates)
      if (q(s)) out.insert(s);
    return out;
  };
  using S = std::set<unsigned>;
  EXPECT_EQ(states_where(kdat_ep_state_connected),
            (S{KDAT_EP_CONNECTED, KDAT_EP_DISCONNECT_PENDING}));
  EXPECT_EQ(states_where(kdat_ep_state_connecting), S{KDAT_EP_ACTIVE_CONNECTION_PENDING});
  EXPECT_EQ(states_where(kdat_ep_state_accepting), S{KDAT_EP_COMPLETION_PENDING});
  EXPECT_EQ(states_where(kdat_ep_state_draining), S{KDAT_EP_DISCONNECT_PENDING});
  EXPECT_EQ(states_where(kdat_ep_state_ended), S{KDAT_EP_DISCONNECTED});
  EXPECT_EQ(states_where([](unsigned s) { return kdat_ep_state_allows(s, KDAT_EP_STIM_MODIFY); }),
            (S{KDAT_EP_UNCONNECTED, KDAT_EP_RESERVED, KDAT_EP_PASSIVE_CONNECTION_PENDING,
               KDAT_EP_TENTATIVE_CONNECTION_PENDING}));
  // dat_ep_dup_connect(3DAT): dup_connect copies a "Connected local Endpoint", and only that
  EXPECT_EQ(
      states_where([](unsigned s) { return kdat_ep_state_allows(s, KDAT_EP_STIM_DUP_SOURCE); }),
      S{KDAT_EP_CONNECTED});
}

}  // namespace
