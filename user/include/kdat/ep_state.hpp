// The endpoint state machine as C++ sees it: thin, typed views of include/kdat/ep_table.h, the
// one table kdat.ko runs.  Nothing here restates a rule; everything expands the table's X-macros.
// All functions are pure and thread-safe.
#pragma once

#include <kdat/ep_table.h>

#include <cstdint>
#include <kdat/error.hpp>

namespace kdat {

enum class EpState : std::uint32_t {
#define KDAT_CXX_STATE_(name) name = KDAT_EP_##name,
  KDAT_EP_STATES(KDAT_CXX_STATE_)
#undef KDAT_CXX_STATE_
};

enum class Stimulus : unsigned {
#define KDAT_CXX_STIM_(name, kind) name = KDAT_EP_STIM_##name,
  KDAT_EP_STIMULI(KDAT_CXX_STIM_)
#undef KDAT_CXX_STIM_
};

enum class StepAction : unsigned {
  go = KDAT_EP_GO,
  noop = KDAT_EP_NOOP,
  stale = KDAT_EP_STALE,
  invalid = KDAT_EP_INVALID,
};

struct Step {
  StepAction action = StepAction::invalid;
  EpState next = EpState::UNCONNECTED;
  std::uint32_t event = 0;  // DAT event number the transition posts, 0 = none
};

// "CONNECTED", "ACTIVE_CONNECTION_PENDING", ...; "?" for a value that is no DAT EP state.
[[nodiscard]] const char *ep_state_name(std::uint32_t state);
[[nodiscard]] inline const char *ep_state_name(EpState state) {
  return ep_state_name(static_cast<std::uint32_t>(state));
}
[[nodiscard]] const char *stimulus_name(Stimulus stimulus);
[[nodiscard]] inline bool ep_state_valid(std::uint32_t state) {
  return kdat_ep_state_valid(state) != 0;
}

// What the table says for (state, stimulus).
[[nodiscard]] Step lookup(EpState state, Stimulus stimulus);
// Does the table accept this operation in this state (anything but INVALID)?
[[nodiscard]] bool allows(EpState state, Stimulus stimulus);
// Table queries (ep_table.h's kdat_ep_state_*): what a state means, read off the rules.
// A connection exists: CONNECTED or DISCONNECT_PENDING today.
[[nodiscard]] inline bool has_connection(EpState state) {
  return kdat_ep_state_connected(static_cast<unsigned>(state)) != 0;
}
// An active connect is under way (the connect timeout applies).
[[nodiscard]] inline bool is_connecting(EpState state) {
  return kdat_ep_state_connecting(static_cast<unsigned>(state)) != 0;
}
// Accepted, not yet established.
[[nodiscard]] inline bool is_accepting(EpState state) {
  return kdat_ep_state_accepting(static_cast<unsigned>(state)) != 0;
}
// A graceful disconnect waits here for the EP's requests in flight (dat_ep_disconnect(3DAT)).
[[nodiscard]] inline bool is_draining(EpState state) {
  return kdat_ep_state_draining(static_cast<unsigned>(state)) != 0;
}
// The connection or the attempt is over; only a reset makes the EP usable again.
[[nodiscard]] inline bool has_ended(EpState state) {
  return kdat_ep_state_ended(static_cast<unsigned>(state)) != 0;
}
// The DAT_INVALID_STATE return the kernel gives for an operation refused in `state`.
[[nodiscard]] DatReturn invalid_state_error(EpState state);

// Can an EP that was in `from` be in `to` after exactly `steps` state changes (GO rules)?
// A reader of the shared table sees the transitions counter, so this checks that what it saw
// between two snapshots is a legal path, even when it missed the states in between.
[[nodiscard]] bool reachable_in(std::uint32_t from, std::uint32_t to, std::uint32_t steps);

}  // namespace kdat
