"""The passive side: dat_cr_accept / dat_cr_reject on consumer PSPs, provider PSPs and RSPs."""
import pytest

from kdat_harness.dat import (ACCEPT_PDATA_MAX, REJECT_PDATA_MAX, DAT, client, expect_dat_error, host_addr, invalid_state_subtype,  # noqa: F401
                              kdat_files, next_port, server, wait_cr)

T = 5_000_000


def _pending(client, server, pd=b"", provider=False):
    port = next_port()
    psp = server.k.psp_create(server.ia, server.crevd, port, provider=provider)
    cep = client.ep()
    client.k.ep_connect(cep, host_addr(), port, T, private_data=pd)
    return port, psp, cep, wait_cr(server)


def _connected_server_ep(client, server):
    """A server EP in CONNECTED (on its own connection)."""
    port, psp, cep, crev = _pending(client, server)
    sep = server.ep()
    server.k.cr_accept(crev.cr, sep)
    client.k.expect_event(client.evd, "ESTABLISHED")
    server.k.expect_event(server.evd, "ESTABLISHED")
    return sep


def _accept_then_established(client, server, cr, cep, sep=0, pd=b""):
    server.k.cr_accept(cr, sep, private_data=pd)
    ev = client.k.expect_event(client.evd, "ESTABLISHED")
    assert ev.ep == cep
    assert client.k.ep_state(cep) == "CONNECTED"
    return ev


# ---- accept -----------------------------------------------------------------------------------

def test_accept_on_explicit_unconnected_ep(client, server):
    port, psp, cep, crev = _pending(client, server, b"req")
    sep = server.ep()
    assert server.k.ep_state(sep) == "UNCONNECTED"
    ev = _accept_then_established(client, server, crev.cr, cep, sep, b"rep")
    assert ev.private_data == b"rep"
    assert server.k.expect_event(server.evd, "ESTABLISHED").ep == sep
    assert server.k.ep_state(sep) == "CONNECTED"


def test_accept_with_null_ep_on_a_consumer_psp_cr_fails_without_effect(client, server):
    port, psp, cep, crev = _pending(client, server)
    r = server.k.call("cr_accept", cr=crev.cr, ep=0)
    assert r.status & DAT["DAT_TYPE_MASK"] in (DAT["DAT_INVALID_PARAMETER"], DAT["DAT_INVALID_HANDLE"]), hex(r.status)
    assert client.k.ep_state(cep) == "ACTIVE_CONNECTION_PENDING"
    client.k.expect_no_event(client.evd, 200_000)
    # the CR is still there and can be accepted properly
    assert server.k.cr_query(crev.cr).sp == psp
    sep = server.ep()
    _accept_then_established(client, server, crev.cr, cep, sep)


@pytest.mark.parametrize("state", ["CONNECTED", "RESERVED"])
def test_accept_on_an_ep_in_the_wrong_state_fails_without_effect(client, server, state):
    if state == "CONNECTED":
        bad = _connected_server_ep(client, server)
    else:
        bad = server.ep()
        server.k.rsp_create(server.ia, bad, next_port(), server.crevd)
    before = server.k.ep_query(bad)
    port, psp, cep, crev = _pending(client, server, b"x")
    expect_dat_error("INVALID_STATE", server.k.cr_accept, crev.cr, bad, subtype=invalid_state_subtype(state))
    after = server.k.ep_query(bad)
    assert after.state == before.state == state
    assert after.transitions == before.transitions
    assert client.k.ep_state(cep) == "ACTIVE_CONNECTION_PENDING"
    assert server.k.cr_query(crev.cr).private_data == b"x"   # CR still valid
    sep = server.ep()
    _accept_then_established(client, server, crev.cr, cep, sep)


def test_accept_private_data_over_the_limit_fails_without_effect(client, server):
    port, psp, cep, crev = _pending(client, server)
    sep = server.ep()
    for size in (ACCEPT_PDATA_MAX + 1, server.k.ia_query(server.ia).max_accept_private_data + 1, 256, 257, -1):
        expect_dat_error("INVALID_PARAMETER", server.k.cr_accept, crev.cr, sep,
                         private_data=b"a" * (ACCEPT_PDATA_MAX + 1), private_data_size=size)
        assert server.k.ep_state(sep) == "UNCONNECTED"
    client.k.expect_no_event(client.evd, 200_000)
    pd = bytes((i * 7) & 0xFF for i in range(ACCEPT_PDATA_MAX))
    ev = _accept_then_established(client, server, crev.cr, cep, sep, pd)
    assert ev.private_data == pd


def test_a_used_cr_handle_is_invalid_after_accept(client, server):
    port, psp, cep, crev = _pending(client, server)
    sep = server.ep()
    _accept_then_established(client, server, crev.cr, cep, sep)
    expect_dat_error("INVALID_HANDLE", server.k.cr_query, crev.cr)
    expect_dat_error("INVALID_HANDLE", server.k.cr_accept, crev.cr, server.ep())
    expect_dat_error("INVALID_HANDLE", server.k.cr_reject, crev.cr)


# ---- RSP --------------------------------------------------------------------------------------

def test_rsp_reserves_the_ep_names_it_in_the_cr_and_accepts_with_null_ep(client, server):
    port = next_port()
    sep = server.ep()
    rsp = server.k.rsp_create(server.ia, sep, port, server.crevd)
    assert server.k.ep_state(sep) == "RESERVED"
    cep = client.ep()
    client.k.ep_connect(cep, host_addr(), port, T, private_data=b"to-rsp")
    crev = wait_cr(server)
    assert (crev.sp, crev.ep) == (rsp, sep)
    cr = server.k.cr_query(crev.cr)
    assert (cr.sp, cr.ep, cr.private_data) == (rsp, sep, b"to-rsp")
    assert server.k.ep_state(sep) == "PASSIVE_CONNECTION_PENDING"
    _accept_then_established(client, server, crev.cr, cep, 0, b"rsp-ok")
    assert server.k.expect_event(server.evd, "ESTABLISHED").ep == sep
    assert server.k.ep_state(sep) == "CONNECTED"


def test_rsp_reject_returns_the_ep_to_unconnected(client, server):
    port = next_port()
    sep = server.ep()
    server.k.rsp_create(server.ia, sep, port, server.crevd)
    cep = client.ep()
    client.k.ep_connect(cep, host_addr(), port, T)
    crev = wait_cr(server)
    server.k.cr_reject(crev.cr, private_data=b"no")
    assert client.k.expect_event(client.evd, "PEER_REJECTED").private_data == b"no"
    assert server.k.ep_state(sep) == "UNCONNECTED"


@pytest.mark.parametrize("state", ["RESERVED", "CONNECTED"])
def test_rsp_create_on_an_ep_not_unconnected_is_invalid_state(client, server, state):
    if state == "CONNECTED":
        ep = _connected_server_ep(client, server)
    else:
        ep = server.ep()
        server.k.rsp_create(server.ia, ep, next_port(), server.crevd)
    expect_dat_error("INVALID_STATE", server.k.rsp_create, server.ia, ep, next_port(), server.crevd,
                     subtype=invalid_state_subtype(state))
    assert server.k.ep_state(ep) == state


def test_rsp_free_unreserves_the_ep_and_frees_the_port(client, server):
    port = next_port()
    sep = server.ep()
    rsp = server.k.rsp_create(server.ia, sep, port, server.crevd)
    server.k.rsp_free(rsp)
    assert server.k.ep_state(sep) == "UNCONNECTED"
    expect_dat_error("INVALID_HANDLE", server.k.rsp_free, rsp)
    cep = client.ep()
    client.k.ep_connect(cep, host_addr(), port, T)
    client.k.expect_event(client.evd, "NON_PEER_REJECTED")


# ---- provider PSP -----------------------------------------------------------------------------

def test_provider_psp_creates_a_tentative_ep_and_accepts_with_null_ep(client, server):
    port, psp, cep, crev = _pending(client, server, b"prov", provider=True)
    assert crev.sp == psp and crev.ep != 0
    pep = crev.ep
    q = server.k.ep_query(pep)
    assert q.state == "TENTATIVE_CONNECTION_PENDING"
    assert q.connect_evd != 0
    cr = server.k.cr_query(crev.cr)
    assert (cr.ep, cr.private_data) == (pep, b"prov")
    _accept_then_established(client, server, crev.cr, cep, 0, b"prov-ok")
    assert server.k.expect_event(q.connect_evd, "ESTABLISHED").ep == pep
    assert server.k.ep_state(pep) == "CONNECTED"


def test_provider_psp_reject(client, server):
    port, psp, cep, crev = _pending(client, server, provider=True)
    pep = crev.ep
    assert pep != 0
    server.k.cr_reject(crev.cr, private_data=b"nope")
    assert client.k.expect_event(client.evd, "PEER_REJECTED").private_data == b"nope"
    assert client.k.ep_state(cep) == "DISCONNECTED"
    r = server.k.call("ep_query", ep=pep)  # freed with the CR, or back to UNCONNECTED
    if r.status == DAT["DAT_SUCCESS"]:
        assert r.state == DAT["DAT_EP_STATE_UNCONNECTED"]
    else:
        assert r.status & DAT["DAT_TYPE_MASK"] == DAT["DAT_INVALID_HANDLE"]


# ---- reject -----------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [0, 1, REJECT_PDATA_MAX])
def test_reject_delivers_private_data_and_invalidates_the_cr(client, server, n):
    port, psp, cep, crev = _pending(client, server)
    pd = bytes((255 - i) & 0xFF for i in range(n))
    server.k.cr_reject(crev.cr, private_data=pd)
    ev = client.k.expect_event(client.evd, "PEER_REJECTED")
    assert ev.private_data_size == n and ev.private_data == pd
    assert client.k.ep_state(cep) == "DISCONNECTED"
    expect_dat_error("INVALID_HANDLE", server.k.cr_query, crev.cr)
    expect_dat_error("INVALID_HANDLE", server.k.cr_reject, crev.cr)
    expect_dat_error("INVALID_HANDLE", server.k.cr_accept, crev.cr, server.ep())
    client.k.expect_no_event(client.evd, 300_000)


def test_reject_private_data_over_the_limit_fails_without_effect(client, server):
    port, psp, cep, crev = _pending(client, server)
    for size in (REJECT_PDATA_MAX + 1, server.k.ia_query(server.ia).max_reject_private_data + 1, 257, -1):
        expect_dat_error("INVALID_PARAMETER", server.k.cr_reject, crev.cr,
                         private_data=b"r" * (REJECT_PDATA_MAX + 1), private_data_size=size)
    assert client.k.ep_state(cep) == "ACTIVE_CONNECTION_PENDING"
    client.k.expect_no_event(client.evd, 200_000)
    server.k.cr_reject(crev.cr, private_data=b"r" * REJECT_PDATA_MAX)
    assert client.k.expect_event(client.evd, "PEER_REJECTED").private_data == b"r" * REJECT_PDATA_MAX


def test_psp_free_with_a_pending_cr_leaves_the_cr_usable_or_rejects_it(client, server):
    """Freeing the PSP stops new CRs; the pending CR must end in exactly one outcome for the client."""
    port, psp, cep, crev = _pending(client, server)
    server.k.psp_free(psp)
    r = server.k.call("cr_reject", cr=crev.cr)
    if r.status != DAT["DAT_SUCCESS"]:
        assert r.status & DAT["DAT_TYPE_MASK"] == DAT["DAT_INVALID_HANDLE"], hex(r.status)
    ev = client.k.try_wait(client.evd, T)
    assert ev is not None and ev.name in ("CONNECTION_EVENT_PEER_REJECTED",
                                          "CONNECTION_EVENT_NON_PEER_REJECTED"), ev
    client.k.expect_no_event(client.evd, 300_000)
    c2 = client.ep()
    client.k.ep_connect(c2, host_addr(), port, T)
    client.k.expect_event(client.evd, "NON_PEER_REJECTED")
