#include <algorithm>
#include <kdat/ep_state.hpp>
#include <utility>
#include <vector>

namespace kdat {

const char *ep_state_name(std::uint32_t state) {
  switch (state) {
#define KDAT_CXX_NAME_(name) \
  case KDAT_EP_##name: return #name;
    KDAT_EP_STATES(KDAT_CXX_NAME_)
#undef KDAT_CXX_NAME_
    default: return "?";
  }
}

const char *stimulus_name(Stimulus stimulus) {
  switch (stimulus) {
#define KDAT_CXX_NAME_(name, kind) \
  case Stimulus::name: return #name;
    KDAT_EP_STIMULI(KDAT_CXX_NAME_)
#undef KDAT_CXX_NAME_
  }
  return "?";
}

Step lookup(EpState state, Stimulus stimulus) {
  const auto raw = kdat_ep_lookup(static_cast<unsigned>(state), static_cast<unsigned>(stimulus));
  return Step{static_cast<StepAction>(raw.action), static_cast<EpState>(raw.next), raw.event};
}

bool allows(EpState state, Stimulus stimulus) {
  return lookup(state, stimulus).action != StepAction::invalid;
}

DatReturn invalid_state_error(EpState state) {
  return {KDAT_DAT_CLASS_ERROR | KDAT_DAT_INVALID_STATE |
          kdat_ep_invalid_state_subtype(static_cast<unsigned>(state))};
}

bool reachable_in(std::uint32_t from, std::uint32_t to, std::uint32_t steps) {
  if (!ep_state_valid(from) || !ep_state_valid(to)) return false;
  static_assert(KDAT_EP_STATE_LIMIT <= 16, "states fit a 16-bit set");
  using Set = std::uint16_t;
  const auto advance = [](Set now) {
    Set next = 0;
#define KDAT_CXX_EDGE_(st, stim, act, nxt, ev, fx)                      \
  if (KDAT_EP_##act == KDAT_EP_GO && (now & (1u << KDAT_EP_##st)) != 0) \
    next = static_cast<Set>(next | (1u << KDAT_EP_##nxt));
    KDAT_EP_RULES(KDAT_CXX_EDGE_)
#undef KDAT_CXX_EDGE_
    return next;
  };
  // The set reachable in exactly k steps depends only on the set at k - 1, so the sequence
  // becomes periodic; remembering when each set was first seen lets a long gap (a reader that
  // slept through many transitions) jump over whole periods instead of iterating them.
  std::vector<std::pair<Set, std::int64_t>> seen;  // (set, step it was first seen at)
  Set now = static_cast<Set>(1u << from);
  std::int64_t remaining = steps;
  bool jumped = false;
  for (std::int64_t k = 0; remaining > 0; ++k, --remaining) {
    if (!jumped) {
      const auto it = std::find_if(seen.begin(), seen.end(),
                                   [now](const auto &entry) { return entry.first == now; });
      if (it != seen.end()) {
        remaining %= k - it->second;
        jumped = true;
        if (remaining == 0) break;
      } else {
        seen.emplace_back(now, k);
      }
    }
    now = advance(now);
  }
  return (now & (1u << to)) != 0;
}

}  // namespace kdat
