"""dat_ep_connect on real rdma_cm (Soft-RoCE): parameter checks and exactly one outcome per connect."""
import time

import pytest

from kdat_harness.dat import (CONNECT_PDATA_MAX, DAT, client, connect_pair, expect_dat_error, host_addr, invalid_state_subtype,  # noqa: F401
                              kdat_files, next_port, server, wait_cr, wait_state)
from kdat_harness.guest import UAPI
from kdat_harness.timing import judge_on_time

C = UAPI.consts
SILENT_HOST = "192.0.2.99"   # on kdat0's subnet, nobody there
T = 5_000_000                # a connect timeout long enough for every local outcome


def _pending(client, server, pd=b"", **attrs):
    """A client EP in ACTIVE_CONNECTION_PENDING with its CR delivered to a consumer PSP (not answered)."""
    port = next_port()
    psp = server.k.psp_create(server.ia, server.crevd, port)
    cep = client.ep(**attrs)
    client.k.ep_connect(cep, host_addr(), port, T, private_data=pd)
    crev = wait_cr(server)
    return port, psp, cep, crev


# ---- synchronous parameter checks ------------------------------------------------------------

def test_connect_timeout_zero_is_invalid_parameter(client):
    ep = client.ep()
    expect_dat_error("INVALID_PARAMETER", client.k.ep_connect, ep, host_addr(), next_port(), 0)
    assert client.k.ep_state(ep) == "UNCONNECTED"
    client.k.expect_no_event(client.evd, 100_000)


@pytest.mark.parametrize("size", [-1, CONNECT_PDATA_MAX + 1, "max+1", 200, C["KDAT_PRIVATE_DATA_MAX"], C["KDAT_PRIVATE_DATA_MAX"] + 1,
                                  0x7FFFFFFF, -0x80000000])
def test_connect_private_data_size_out_of_range_is_invalid_parameter(client, size):
    ep = client.ep()
    if size == "max+1":
        size = client.k.ia_query(client.ia).max_connect_private_data + 1
    expect_dat_error("INVALID_PARAMETER", client.k.ep_connect, ep, host_addr(), next_port(), T,
                     private_data=b"x" * (CONNECT_PDATA_MAX + 1), private_data_size=size)
    assert client.k.ep_state(ep) == "UNCONNECTED"
    client.k.expect_no_event(client.evd, 100_000)


@pytest.mark.parametrize("qos", ["DAT_QOS_HIGH_THROUGHPUT", "DAT_QOS_LOW_LATENCY", "DAT_QOS_ECONOMY",
                                 "DAT_QOS_PREMIUM"])
def test_connect_unsupported_qos_is_model_not_supported(client, qos):
    ep = client.ep()
    expect_dat_error("MODEL_NOT_SUPPORTED", client.k.ep_connect, ep, host_addr(), next_port(), T,
                     qos=DAT[qos])
    assert client.k.ep_state(ep) == "UNCONNECTED"
    client.k.expect_no_event(client.evd, 100_000)


@pytest.mark.parametrize("conn_qual", [0, 65536, 1 << 40])
def test_connect_conn_qual_out_of_range_is_invalid_parameter(client, conn_qual):
    ep = client.ep()
    expect_dat_error("INVALID_PARAMETER", client.k.ep_connect, ep, host_addr(), conn_qual, T)
    assert client.k.ep_state(ep) == "UNCONNECTED"


def test_connect_unknown_flags_and_address_family_are_refused(client):
    ep = client.ep()
    expect_dat_error("INVALID_PARAMETER", client.k.ep_connect, ep, host_addr(), next_port(), T, flags=0x80)
    r = client.k.call("ep_connect", ep=ep, conn_qual=next_port(), timeout_us=T)  # family 0
    assert r.status & DAT["DAT_TYPE_MASK"] in (DAT["DAT_INVALID_PARAMETER"], DAT["DAT_INVALID_ADDRESS"]), hex(r.status)
    assert client.k.ep_state(ep) == "UNCONNECTED"


def _to_state(client, server, state):
    """An EP of `client` brought into `state`."""
    k = client.k
    if state == "RESERVED":
        ep = client.ep()
        k.rsp_create(client.ia, ep, next_port(), client.crevd)
        return ep
    if state == "ACTIVE_CONNECTION_PENDING":
        return _pending(client, server)[2]
    port = next_port()
    server.k.psp_create(server.ia, server.crevd, port)
    ep, sep = client.ep(), server.ep()
    k.ep_connect(ep, host_addr(), port, T)
    server.k.cr_accept(wait_cr(server).cr, sep)
    k.expect_event(client.evd, "ESTABLISHED")
    if state == "DISCONNECTED":
        k.ep_disconnect(ep)
        k.expect_event(client.evd, "DISCONNECTED")
    return ep


@pytest.mark.parametrize("state", ["ACTIVE_CONNECTION_PENDING", "CONNECTED", "DISCONNECTED", "RESERVED"])
def test_connect_on_an_ep_not_unconnected_is_invalid_state_naming_the_state(client, server, state):
    ep = _to_state(client, server, state)
    assert client.k.ep_state(ep) == state
    expect_dat_error("INVALID_STATE", client.k.ep_connect, ep, host_addr(), next_port(), T,
                     subtype=invalid_state_subtype(state))
    assert client.k.ep_state(ep) == state
    client.k.expect_no_event(client.evd, 200_000)


# ---- the outcomes ----------------------------------------------------------------------------

def test_connect_accepted_established_on_both_sides_with_accept_private_data(client, server):
    port = next_port()
    server.k.psp_create(server.ia, server.crevd, port)
    cep, sep = client.ep(), server.ep()
    client.k.ep_connect(cep, host_addr(), port, T, private_data=b"hello")
    assert client.k.ep_state(cep) == "ACTIVE_CONNECTION_PENDING"
    crev = wait_cr(server)
    assert crev.cr != 0 and crev.ep == 0
    server.k.cr_accept(crev.cr, sep, private_data=b"accept-data\x00\xff")
    ev = client.k.expect_event(client.evd, "ESTABLISHED")
    assert ev.ep == cep and ev.evd == client.evd
    assert ev.private_data == b"accept-data\x00\xff"
    sev = server.k.expect_event(server.evd, "ESTABLISHED")
    assert sev.ep == sep
    c, s = client.k.ep_query(cep), server.k.ep_query(sep)
    assert (c.state, s.state) == ("CONNECTED", "CONNECTED")
    assert (c.remote_addr.ip, c.remote_addr.port) == (host_addr(), port)
    assert (s.local_addr.ip, s.local_addr.port) == (host_addr(), port)
    assert (s.remote_addr.ip, s.remote_addr.port) == (host_addr(), c.local_addr.port)
    assert c.local_addr.port != 0
    client.k.expect_no_event(client.evd, 300_000)
    server.k.expect_no_event(server.evd, 1000)
    server.k.expect_no_event(server.crevd, 1000)


def test_connect_peer_rejected_with_private_data(client, server):
    port, psp, cep, crev = _pending(client, server)
    server.k.cr_reject(crev.cr, private_data=b"go away")
    ev = client.k.expect_event(client.evd, "PEER_REJECTED")
    assert ev.ep == cep and ev.private_data == b"go away"
    assert client.k.ep_state(cep) == "DISCONNECTED"
    client.k.expect_no_event(client.evd, 300_000)


def test_connect_nobody_listening_is_non_peer_rejected(client):
    cep = client.ep()
    client.k.ep_connect(cep, host_addr(), next_port(), T)
    ev = client.k.expect_event(client.evd, "NON_PEER_REJECTED")
    assert ev.ep == cep
    assert client.k.ep_state(cep) == "DISCONNECTED"
    client.k.expect_no_event(client.evd, 300_000)


def test_connect_unreachable_host_is_unreachable(client):
    cep = client.ep()
    client.k.ep_connect(cep, SILENT_HOST, next_port(), 60_000_000)
    try:
        ev = client.k.expect_event(client.evd, "UNREACHABLE", 20_000_000)
        assert ev.ep == cep
        assert client.k.ep_state(cep) == "DISCONNECTED"
        client.k.expect_no_event(client.evd, 300_000)
    finally:
        client.k.call("ep_disconnect", ep=cep)


def test_connect_to_an_unroutable_address_is_made_and_unreachable(client):
    """The attempt is made and fails (dat_ep_dup_connect(3DAT): a remote host the Provider "cannot
    reach" is a DAT_CONNECTION_EVENT_UNREACHABLE): DAT_SUCCESS, then UNREACHABLE, before a timeout
    long enough for the transport's own give-up (four address lookups of 2 s if the lookup goes
    as far as the neighbour)."""
    cep = client.ep()
    r = client.k.call("ep_connect", ep=cep, remote_addr="203.0.113.9", conn_qual=next_port(),
                      timeout_us=60_000_000)
    assert r.status == DAT["DAT_SUCCESS"], hex(r.status)
    client.k.expect_event(client.evd, "UNREACHABLE", 20_000_000)
    assert client.k.ep_state(cep) == "DISCONNECTED"
    client.k.expect_no_event(client.evd, 300_000)


def test_connect_timeout_to_a_silent_host_is_timed_out(client):
    """Address resolution to a host without a neighbour takes seconds: the 200 ms timeout ends
    the attempt first, never early, and as late as a plain sleep beside it allows."""
    def attempt(start):
        cep = client.ep()
        t0 = time.monotonic()
        start()
        client.k.ep_connect(cep, SILENT_HOST, next_port(), 200_000)
        ev = client.k.expect_event(client.evd, "TIMED_OUT", 5_000_000)
        dt = time.monotonic() - t0
        assert ev.ep == cep
        assert client.k.ep_state(cep) == "DISCONNECTED"
        return dt

    judge_on_time(attempt, 0.2, what="TIMED_OUT")
    client.k.expect_no_event(client.evd, 1_000_000)


def test_connect_timeout_then_late_accept_gives_no_second_event(client, server):
    port = next_port()
    server.k.psp_create(server.ia, server.crevd, port)
    cep, sep = client.ep(), server.ep()
    client.k.ep_connect(cep, host_addr(), port, 300_000, private_data=b"late")
    crev = wait_cr(server)
    client.k.expect_event(client.evd, "TIMED_OUT", 5_000_000)
    assert client.k.ep_state(cep) == "DISCONNECTED"
    time.sleep(1.0)
    r = server.k.call("cr_accept", cr=crev.cr, ep=sep, private_data=b"too late", private_data_size=8)
    if r.status == DAT["DAT_SUCCESS"]:
        sev = server.k.try_wait(server.evd, 10_000_000)
        assert sev is not None and sev.name == "CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR", sev
        assert server.k.ep_state(sep) == "DISCONNECTED"
    else:
        assert server.k.ep_state(sep) == "UNCONNECTED", "a failed accept must leave the EP alone"
        server.k.expect_no_event(server.evd, 300_000)
    # The active side's one outcome was TIMED_OUT: nothing else, ever.
    client.k.expect_no_event(client.evd, 1_000_000)
    assert client.k.ep_state(cep) == "DISCONNECTED"


# ---- what the passive side sees ---------------------------------------------------------------

@pytest.mark.parametrize("pd", [b"", b"abc", bytes(range(CONNECT_PDATA_MAX))], ids=["0", "3", "max"])
def test_cr_query_shows_requester_address_port_qualifier_private_data_and_ird_ord(client, server, pd):
    port, psp, cep, crev = _pending(client, server, pd, max_rdma_read_in=3, max_rdma_read_out=2)
    assert crev.sp == psp
    cr = server.k.cr_query(crev.cr)
    c = client.k.ep_query(cep)
    assert c.state == "ACTIVE_CONNECTION_PENDING"
    assert cr.sp == psp and cr.ep == 0
    assert (cr.remote_addr.family, cr.remote_addr.ip) == (C["KDAT_AF_INET"], host_addr())
    assert c.local_addr.port != 0 and cr.remote_addr.port == c.local_addr.port
    assert (cr.local_addr.ip, cr.local_addr.port) == (host_addr(), port)
    assert cr.private_data_size == len(pd) and cr.private_data == pd
    assert (cr.remote_rdma_read_in, cr.remote_rdma_read_out) == (3, 2)
    server.k.cr_reject(crev.cr)
    client.k.expect_event(client.evd, "PEER_REJECTED")


def test_negotiated_ird_ord_is_the_min_of_both_offers(client, server):
    q = client.k.ia_query(client.ia)
    if q.max_rdma_read_in < 5 or q.max_rdma_read_out < 4:
        pytest.skip("device limits below the test's offers")
    port, psp, cep, crev = _pending(client, server, max_rdma_read_in=5, max_rdma_read_out=3)
    sep = server.ep(max_rdma_read_in=2, max_rdma_read_out=4)
    server.k.cr_accept(crev.cr, sep)
    client.k.expect_event(client.evd, "ESTABLISHED")
    server.k.expect_event(server.evd, "ESTABLISHED")
    c, s = client.k.ep_query(cep).attr, server.k.ep_query(sep).attr
    # the client's reads out land on the server's reads in, and the other way round:
    # (client in, client out, server in, server out)
    got = (c.max_rdma_read_in, c.max_rdma_read_out, s.max_rdma_read_in, s.max_rdma_read_out)
    assert got == (min(5, 4), min(3, 2), min(3, 2), min(5, 4))


def test_connect_again_after_reset(client, server):
    port, psp, cep, crev = _pending(client, server)
    server.k.cr_reject(crev.cr)
    client.k.expect_event(client.evd, "PEER_REJECTED")
    client.k.ep_reset(cep)
    assert client.k.ep_state(cep) == "UNCONNECTED"
    sep = server.ep()
    client.k.ep_connect(cep, host_addr(), port, T, private_data=b"again")
    crev = wait_cr(server)
    assert server.k.cr_query(crev.cr).private_data == b"again"
    server.k.cr_accept(crev.cr, sep)
    client.k.expect_event(client.evd, "ESTABLISHED")
    assert wait_state(client.k, cep, "CONNECTED") == "CONNECTED"


def test_retry_counts_and_flow_control_reach_the_wire(client, server):
    """rdma_connect(3): retry_count, rnr_retry_count and flow_control go into rdma_conn_param; the
    passive side sees the requester's values in its CR."""
    p = connect_pair(client, server,
                     client_attrs=dict(retry_count=3, rnr_retry_count=5, flow_control=1))
    assert (p.cr.remote_retry_count, p.cr.remote_rnr_retry_count, p.cr.remote_flow_control) == (
        3, 5, 1)
