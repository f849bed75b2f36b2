"""dat_ep_disconnect(3DAT): abrupt and graceful, the states it is allowed in, and reset."""
import time

import pytest

from kdat_harness.dat import (DAT, client, connect_pair, expect_dat_error, host_addr,  # noqa: F401
                              invalid_state_subtype, kdat_files, next_port, server, wait_cr)
from kdat_harness.guest import UAPI

C = UAPI.consts
T = 5_000_000


def _drain(k, evd, quiet_us=500_000):
    """Every event until none comes for quiet_us."""
    out = []
    while True:
        ev = k.try_wait(evd, quiet_us)
        if ev is None:
            return out
        out.append(ev)


@pytest.mark.parametrize("side_name", ["client", "server"])
def test_abrupt_disconnect_from_connected_both_sides_disconnected(client, server, side_name):
    p = connect_pair(client, server)
    me, ep, peer, pep = (client, p.cep, server, p.sep) if side_name == "client" else (server, p.sep, client, p.cep)
    me.k.ep_disconnect(ep)
    ev = me.k.expect_event(me.evd, "DISCONNECTED")
    assert ev.ep == ep
    assert me.k.ep_state(ep) == "DISCONNECTED"
    pev = peer.k.expect_event(peer.evd, "DISCONNECTED")
    assert pev.ep == pep
    assert peer.k.ep_state(pep) == "DISCONNECTED"
    me.k.expect_no_event(me.evd, 300_000)
    peer.k.expect_no_event(peer.evd, 1000)


def test_graceful_disconnect_from_connected_ends_disconnected(client, server):
    p = connect_pair(client, server)
    client.k.ep_disconnect(p.cep, graceful=True)
    assert client.k.ep_state(p.cep) in ("DISCONNECT_PENDING", "DISCONNECTED")
    ev = client.k.expect_event(client.evd, "DISCONNECTED")
    assert ev.ep == p.cep
    assert client.k.ep_state(p.cep) == "DISCONNECTED"
    server.k.expect_event(server.evd, "DISCONNECTED")
    assert server.k.ep_state(p.sep) == "DISCONNECTED"
    client.k.expect_no_event(client.evd, 300_000)


def test_graceful_then_graceful_again_posts_one_event(client, server):
    p = connect_pair(client, server)
    client.k.ep_disconnect(p.cep, graceful=True)
    client.k.ep_disconnect(p.cep, graceful=True)   # DISCONNECT_PENDING: no effect; DISCONNECTED: no-op
    evs = _drain(client.k, client.evd)
    assert [e.name for e in evs] == ["CONNECTION_EVENT_DISCONNECTED"]
    assert client.k.ep_state(p.cep) == "DISCONNECTED"


@pytest.mark.parametrize("graceful", [False, True])
def test_disconnect_of_a_disconnected_ep_is_a_silent_noop(client, server, graceful):
    p = connect_pair(client, server)
    client.k.ep_disconnect(p.cep)
    client.k.expect_event(client.evd, "DISCONNECTED")
    server.k.expect_event(server.evd, "DISCONNECTED")
    before = client.k.ep_query(p.cep).transitions
    client.k.ep_disconnect(p.cep, graceful=graceful)
    server.k.ep_disconnect(p.sep, graceful=graceful)
    assert client.k.ep_query(p.cep).transitions == before
    assert client.k.ep_state(p.cep) == "DISCONNECTED"
    client.k.expect_no_event(client.evd, 300_000)
    server.k.expect_no_event(server.evd, 1000)


def _ep_in(client, server, state):
    if state == "UNCONNECTED":
        return server, server.ep()
    if state == "RESERVED":
        ep = server.ep()
        server.k.rsp_create(server.ia, ep, next_port(), server.crevd)
        return server, ep
    port = next_port()
    if state == "PASSIVE_CONNECTION_PENDING":
        ep = server.ep()
        server.k.rsp_create(server.ia, ep, port, server.crevd)
    else:
        server.k.psp_create(server.ia, server.crevd, port, provider=True)
    client.k.ep_connect(client.ep(), host_addr(), port, T)
    crev = wait_cr(server)
    return server, crev.ep


@pytest.mark.parametrize("graceful", [False, True], ids=["abrupt", "graceful"])
@pytest.mark.parametrize("state", ["UNCONNECTED", "RESERVED", "PASSIVE_CONNECTION_PENDING",
                                   "TENTATIVE_CONNECTION_PENDING"])
def test_disconnect_is_invalid_state_before_a_connection_exists(client, server, state, graceful):
    s, ep = _ep_in(client, server, state)
    assert s.k.ep_state(ep) == state
    expect_dat_error("INVALID_STATE", s.k.ep_disconnect, ep, graceful=graceful,
                     subtype=invalid_state_subtype(state))
    assert s.k.ep_state(ep) == state
    s.k.expect_no_event(s.evd, 100_000)


@pytest.mark.parametrize("graceful", [False, True], ids=["abrupt", "graceful"])
def test_disconnect_during_active_connection_pending_aborts_with_one_event(client, server, graceful):
    port = next_port()
    server.k.psp_create(server.ia, server.crevd, port)
    cep = client.ep()
    client.k.ep_connect(cep, host_addr(), port, T)
    crev = wait_cr(server)
    assert client.k.ep_state(cep) == "ACTIVE_CONNECTION_PENDING"
    client.k.ep_disconnect(cep, graceful=graceful)
    ev = client.k.expect_event(client.evd, "DISCONNECTED")
    assert ev.ep == cep
    assert client.k.ep_state(cep) == "DISCONNECTED"
    # the server's accept now comes too late: the client must not see a second outcome
    sep = server.ep()
    r = server.k.call("cr_accept", cr=crev.cr, ep=sep)
    if r.status == DAT["DAT_SUCCESS"]:
        sev = server.k.try_wait(server.evd, T)
        assert sev is not None and sev.name in ("CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR",), sev
    client.k.expect_no_event(client.evd, 1_000_000)
    assert client.k.ep_state(cep) == "DISCONNECTED"


def test_disconnect_during_connect_to_a_silent_host(client):
    cep = client.ep()
    client.k.ep_connect(cep, "192.0.2.99", next_port(), 30_000_000)
    time.sleep(0.2)
    assert client.k.ep_state(cep) == "ACTIVE_CONNECTION_PENDING"
    client.k.ep_disconnect(cep)
    client.k.expect_event(client.evd, "DISCONNECTED")
    assert client.k.ep_state(cep) == "DISCONNECTED"
    client.k.expect_no_event(client.evd, 1_000_000)


def test_disconnect_right_after_accept_completion_pending_or_connected(client, server):
    port = next_port()
    server.k.psp_create(server.ia, server.crevd, port)
    cep, sep = client.ep(), server.ep()
    client.k.ep_connect(cep, host_addr(), port, T)
    crev = wait_cr(server)
    server.k.cr_accept(crev.cr, sep)
    server.k.ep_disconnect(sep)
    sevs = [e.name.replace("CONNECTION_EVENT_", "") for e in _drain(server.k, server.evd)]
    assert sevs in (["DISCONNECTED"], ["ESTABLISHED", "DISCONNECTED"]), sevs
    assert server.k.ep_state(sep) == "DISCONNECTED"
    first = client.k.try_wait(client.evd, T)
    assert first is not None, "the client saw no outcome at all"
    cevs = [first.name.replace("CONNECTION_EVENT_", "")]
    if cevs == ["ESTABLISHED"]:   # then the server's disconnect must reach it
        ev = client.k.try_wait(client.evd, T)
        cevs.append(ev.name.replace("CONNECTION_EVENT_", "") if ev else "(nothing within 5 s)")
    cevs += [e.name.replace("CONNECTION_EVENT_", "") for e in _drain(client.k, client.evd, 300_000)]
    assert cevs in (["ESTABLISHED", "DISCONNECTED"], ["NON_PEER_REJECTED"], ["PEER_REJECTED"],
                    ["ESTABLISHED", "BROKEN"]), f"client events {cevs}, server events {sevs}"
    assert client.k.ep_state(cep) == "DISCONNECTED"


@pytest.mark.parametrize("flags", [2, 7, 0x80000000])
def test_disconnect_bad_flags_is_invalid_parameter(client, server, flags):
    p = connect_pair(client, server)
    expect_dat_error("INVALID_PARAMETER", client.k.ep_disconnect, p.cep, flags=flags)
    assert client.k.ep_state(p.cep) == "CONNECTED"
    client.k.expect_no_event(client.evd, 200_000)
    server.k.expect_no_event(server.evd, 1000)


def test_reset_of_a_disconnected_ep_makes_it_connect_again(client, server):
    p = connect_pair(client, server)
    expect_dat_error("INVALID_STATE", client.k.ep_reset, p.cep,
                     subtype=invalid_state_subtype("CONNECTED"))
    client.k.ep_disconnect(p.cep)
    client.k.expect_event(client.evd, "DISCONNECTED")
    server.k.expect_event(server.evd, "DISCONNECTED")
    client.k.ep_reset(p.cep)
    assert client.k.ep_state(p.cep) == "UNCONNECTED"
    client.k.ep_connect(p.cep, host_addr(), p.port, T, private_data=b"round 2")
    crev = wait_cr(server)
    assert server.k.cr_query(crev.cr).private_data == b"round 2"
    sep2 = server.ep()
    server.k.cr_accept(crev.cr, sep2)
    client.k.expect_event(client.evd, "ESTABLISHED")
    server.k.expect_event(server.evd, "ESTABLISHED")
    assert client.k.ep_state(p.cep) == "CONNECTED"
    # the old server EP is reusable too
    server.k.ep_reset(p.sep)
    assert server.k.ep_state(p.sep) == "UNCONNECTED"


def test_ep_free_of_a_connected_ep_disconnects_the_peer(client, server):
    """Freeing a connected EP ends it as an abrupt disconnect (DAPL's dat_ep_free does one
    first): its own DISCONNECTED names the freed, now stale, handle; the peer hears it too."""
    p = connect_pair(client, server)
    client.k.ep_free(p.cep)
    expect_dat_error("INVALID_HANDLE", client.k.ep_query, p.cep)
    assert client.k.expect_event(client.evd, "DISCONNECTED").ep == p.cep
    client.k.expect_no_event(client.evd)
    assert server.k.expect_event(server.evd, "DISCONNECTED").ep == p.sep
    assert server.k.ep_state(p.sep) == "DISCONNECTED"


@pytest.mark.parametrize("then", ["ep_free", "ep_reset"])
def test_freeing_or_resetting_right_after_our_dreq_still_disconnects_the_peer(client, server, then):
    """An abrupt disconnect sends a DREQ; freeing (or resetting) the EP at once must not cancel
    it: destroying a CM id cancels a DREQ the IB CM has not sent yet, so kdat keeps the id until
    the DREP.  Back to back, for many connections: every server EP hears DISCONNECTED."""
    pairs = [connect_pair(client, server) for _ in range(12)]
    for p in pairs:
        client.k.ep_disconnect(p.cep, graceful=False)
        getattr(client.k, then)(p.cep)
    deadline = time.monotonic() + 30
    pending = {p.sep for p in pairs}
    while pending and time.monotonic() < deadline:
        ev = server.k.try_wait(server.evd, 1_000_000)
        if ev is not None and ev.name == "CONNECTION_EVENT_DISCONNECTED":
            pending.discard(ev.ep)
    assert not pending, f"{len(pending)} of {len(pairs)} server EPs never saw DISCONNECTED"
    for p in pairs:
        assert server.k.ep_state(p.sep) == "DISCONNECTED"
        if then == "ep_reset":
            assert client.k.ep_state(p.cep) == "UNCONNECTED"
