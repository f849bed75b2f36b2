"""Host-side checks of the endpoint state table against the rules of dat_ep_dup_connect(3DAT),
dat_ep_disconnect(3DAT) and dat_cr_accept(3DAT)."""
import collections
import re

import pytest

from kdat_harness import table
from kdat_harness.table import Table

T = Table()
CONNECTION_STATES = ["ACTIVE_CONNECTION_PENDING", "COMPLETION_PENDING"]
NOT_DISCONNECTABLE = ["UNCONNECTED", "RESERVED", "PASSIVE_CONNECTION_PENDING",
                      "TENTATIVE_CONNECTION_PENDING"]


def test_nine_dat_states_with_dat_values():
    assert len(T.states) == 9
    assert T.state_value["UNCONNECTED"] == 0
    assert T.state_value["CONNECTED"] == 9
    assert T.state_value["DISCONNECTED"] == 11
    # dat_ep_dup_connect(3DAT) says UNDISCONNECTED; the DAT headers' name is DISCONNECTED
    assert "UNDISCONNECTED" not in T.states


def test_rules_are_unique_and_well_formed():
    pairs = collections.Counter((r.state, r.stimulus) for r in T.rules)
    assert [p for p, n in pairs.items() if n > 1] == []
    for r in T.rules:
        assert r.state in T.states and r.next in T.states, r
        assert r.stimulus in T.stimuli, r
        assert r.action in ("GO", "NOOP"), r
        if r.action == "NOOP":
            assert r.next == r.state and r.event == "NONE", r


def test_every_state_reachable_from_unconnected():
    seen, todo = {"UNCONNECTED"}, ["UNCONNECTED"]
    while todo:
        s = todo.pop()
        for stim in T.stimuli:
            action, nxt, _ = T.lookup(s, stim)
            if action == "GO" and nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert seen == set(T.states)


@pytest.mark.parametrize("state", T.states)
def test_consumer_operations_never_silently_ignored(state):
    for stim, kind in T.stimuli.items():
        if kind == "OP":
            action, _, _ = T.lookup(state, stim)
            assert action in ("GO", "NOOP", "INVALID")


def test_connect_only_from_unconnected():  # dat_ep_dup_connect(3DAT)
    for s in T.states:
        for stim in ("CONNECT", "DUP_CONNECT"):
            action, nxt, _ = T.lookup(s, stim)
            if s == "UNCONNECTED":
                assert (action, nxt) == ("GO", "ACTIVE_CONNECTION_PENDING")
            else:
                assert action == "INVALID"


def test_dup_connect_copies_only_a_connected_eps_connection():  # dat_ep_dup_connect(3DAT)
    for s in T.states:
        action, nxt, event = T.lookup(s, "DUP_SOURCE")
        assert (action, nxt, event) == (("NOOP", s, "NONE") if s == "CONNECTED" else
                                        ("INVALID", s, "NONE"))


@pytest.mark.parametrize("stim,event", [
    ("ESTABLISHED", "ESTABLISHED"), ("PEER_REJECTED", "PEER_REJECTED"),
    ("NON_PEER_REJECTED", "NON_PEER_REJECTED"), ("UNREACHABLE", "UNREACHABLE"),
    ("TIMEOUT", "TIMED_OUT")])
def test_active_outcomes(stim, event):  # dat_ep_dup_connect(3DAT)
    action, nxt, ev = T.lookup("ACTIVE_CONNECTION_PENDING", stim)
    assert action == "GO" and ev == event
    assert nxt == ("CONNECTED" if stim == "ESTABLISHED" else "DISCONNECTED")


def test_late_provider_events_after_an_outcome_are_stale():
    # After TIMED_OUT (or any outcome) a late accept/reject must post nothing.
    for s in ("DISCONNECTED", "CONNECTED"):
        for stim in ("ESTABLISHED", "PEER_REJECTED", "TIMEOUT", "UNREACHABLE"):
            if (s, stim) == ("CONNECTED", "ESTABLISHED"):
                continue
            assert T.lookup(s, stim)[0] == "STALE", (s, stim)


def test_disconnect_rules():  # dat_ep_disconnect(3DAT)
    for flag in ("DISCONNECT_GRACEFUL", "DISCONNECT_ABRUPT"):
        for s in NOT_DISCONNECTABLE:
            assert T.lookup(s, flag)[0] == "INVALID"
        assert T.lookup("DISCONNECTED", flag) == ("NOOP", "DISCONNECTED", "NONE")
        for s in CONNECTION_STATES:
            assert T.lookup(s, flag) == ("GO", "DISCONNECTED", "DISCONNECTED")
    assert T.lookup("CONNECTED", "DISCONNECT_GRACEFUL") == ("GO", "DISCONNECT_PENDING", "NONE")
    assert T.lookup("CONNECTED", "DISCONNECT_ABRUPT") == ("GO", "DISCONNECTED", "DISCONNECTED")
    assert T.lookup("DISCONNECT_PENDING", "DISCONNECT_GRACEFUL")[0] == "NOOP"
    assert T.lookup("DISCONNECT_PENDING", "DISCONNECT_ABRUPT") == (
        "GO", "DISCONNECTED", "DISCONNECTED")
    assert T.lookup("DISCONNECT_PENDING", "POST_SEND")[0] == "INVALID"
    assert T.lookup("DISCONNECT_PENDING", "DRAINED") == ("GO", "DISCONNECTED", "DISCONNECTED")


def test_accept_rules():  # dat_cr_accept(3DAT)
    for s in ("UNCONNECTED", "PASSIVE_CONNECTION_PENDING", "TENTATIVE_CONNECTION_PENDING"):
        assert T.lookup(s, "ACCEPT") == ("GO", "COMPLETION_PENDING", "NONE")
    for s in ("RESERVED", "ACTIVE_CONNECTION_PENDING", "CONNECTED", "DISCONNECT_PENDING",
              "DISCONNECTED", "COMPLETION_PENDING"):
        assert T.lookup(s, "ACCEPT")[0] == "INVALID"
    assert T.lookup("COMPLETION_PENDING", "ESTABLISHED") == ("GO", "CONNECTED", "ESTABLISHED")
    for stim in ("ACCEPT_FAILED", "TIMEOUT", "BROKEN", "PEER_REJECTED"):
        assert T.lookup("COMPLETION_PENDING", stim) == (
            "GO", "DISCONNECTED", "ACCEPT_COMPLETION_ERROR")


def test_every_transition_into_disconnected_from_a_live_state_posts_one_event():
    live = CONNECTION_STATES + ["CONNECTED", "DISCONNECT_PENDING"]
    for r in T.rules:
        if r.action == "GO" and r.next == "DISCONNECTED" and r.state in live:
            assert r.event != "NONE", r


def test_effects_are_named_sets_and_only_on_transitions():
    with open(table.EP_TABLE_H) as f:
        text = f.read()
    sets = set(re.findall(r"#define KDAT_EP_FX_([A-Z]+)\s+(?:KDAT_EP_FX_|\(|0u)", text))
    assert sets == {"NONE", "CONNECTED", "ENDED", "CLOSED", "GRACEFUL", "HANGUP", "ABANDONED",
                    "WITHDRAWN"}
    for r in T.rules:
        assert r.effects in sets, r
        if r.action != "GO":
            assert r.effects == "NONE", r


def test_effects_end_what_a_transition_ends():
    for r in T.rules:
        if r.action != "GO":
            continue
        if r.next == "CONNECTED" and r.state != "CONNECTED":
            # the connect timeout is over
            assert r.effects == "CONNECTED", r
        elif r.next == "DISCONNECTED" and r.state in ("ACTIVE_CONNECTION_PENDING",
                                                      "COMPLETION_PENDING"):
            # an attempt ended: the timer stops and posted receives flush; the consumer's
            # disconnect also gives up the id (an accepted one to an orphan: dat_cr_accept(3DAT))
            if r.stimulus.startswith("DISCONNECT_"):
                assert r.effects == ("ABANDONED" if r.state == "ACTIVE_CONNECTION_PENDING"
                                     else "WITHDRAWN"), r
            else:
                assert r.effects == "ENDED", r
        elif r.next == "DISCONNECTED" and r.state in ("CONNECTED", "DISCONNECT_PENDING"):
            # a connection ended: every posted request completes before the event, except
            # when the device is going away (its QPs are destroyed with it, not drained);
            # an abrupt disconnect sends the DREQ first (dat_ep_disconnect(3DAT))
            want = {"DEVICE_REMOVED": "NONE", "DISCONNECT_ABRUPT": "HANGUP"}
            assert r.effects == want.get(r.stimulus, "CLOSED"), r
        elif (r.state, r.stimulus) == ("CONNECTED", "DISCONNECT_GRACEFUL"):
            # graceful: the DREQ waits for the requests in flight (dat_ep_disconnect(3DAT))
            assert r.effects == "GRACEFUL", r
        else:
            assert r.effects == "NONE", r


UD_OPS = ("UD_CONNECT", "UD_ACCEPT")
UD_OUTCOMES = {"UD_ESTABLISHED": "ESTABLISHED", "UD_REJECTED": "PEER_REJECTED",
               "UD_UNREACHABLE": "UNREACHABLE", "UD_TIMEOUT": "TIMED_OUT"}


def test_ud_exchanges_start_only_where_a_ud_ep_has_peers_or_none_yet():
    # a UD EP exchanges addresses while UNCONNECTED (no peer yet) or CONNECTED (more peers);
    # anywhere else (an ended EP, any RC connection state) the operation is refused
    for state in T.states:
        for op in UD_OPS:
            r = T.lookup(state, op)
            if state in ("UNCONNECTED", "CONNECTED"):
                assert r == ("NOOP", state, "NONE"), (state, op, r)
            else:
                assert r[0] == "INVALID", (state, op, r)


def test_each_ud_exchange_ends_with_exactly_one_event_and_only_a_peer_connects():
    for state in T.states:
        for stim, event in UD_OUTCOMES.items():
            action, nxt, ev = T.lookup(state, stim)
            if state not in ("UNCONNECTED", "CONNECTED"):
                # an EP that was reset, disconnected or lost its device: the outcome is stale
                assert (action, ev) == ("STALE", "NONE"), (state, stim)
                continue
            assert (action, ev) == ("GO", event), (state, stim)
            assert nxt == ("CONNECTED" if stim == "UD_ESTABLISHED" else state), (state, stim)
