"""dat_ep_dup_connect(3DAT): connect a new EP to the remote end of a connected one."""
import pytest

from kdat_harness.dat import (CONNECT_PDATA_MAX, DAT, client, connect_pair, expect_dat_error, host_addr,  # noqa: F401
                              invalid_state_subtype, kdat_files, next_port, server, wait_cr)

T = 5_000_000


def test_dup_connect_reaches_the_same_remote_end_with_its_own_private_data(client, server):
    p = connect_pair(client, server, client_pd=b"first")
    assert p.cr.private_data == b"first"
    dup = client.ep()
    client.k.ep_dup_connect(dup, p.cep, T, private_data=b"second")
    assert client.k.ep_state(dup) == "ACTIVE_CONNECTION_PENDING"
    crev = wait_cr(server)
    assert crev.sp == p.psp
    cr = server.k.cr_query(crev.cr)
    assert cr.private_data == b"second"
    assert (cr.local_addr.ip, cr.local_addr.port) == (host_addr(), p.port)
    assert cr.remote_addr.ip == host_addr()
    assert cr.remote_addr.port == client.k.ep_query(dup).local_addr.port != p.cr.remote_addr.port
    sep2 = server.ep()
    server.k.cr_accept(crev.cr, sep2, private_data=b"ok2")
    ev = client.k.expect_event(client.evd, "ESTABLISHED")
    assert ev.ep == dup and ev.private_data == b"ok2"
    q = client.k.ep_query(dup)
    assert q.state == "CONNECTED"
    assert (q.remote_addr.ip, q.remote_addr.port) == (host_addr(), p.port)
    assert client.k.ep_state(p.cep) == "CONNECTED"   # the original is untouched


def test_dup_connect_can_be_rejected(client, server):
    p = connect_pair(client, server)
    dup = client.ep()
    client.k.ep_dup_connect(dup, p.cep, T)
    server.k.cr_reject(wait_cr(server).cr, private_data=b"no dup")
    ev = client.k.expect_event(client.evd, "PEER_REJECTED")
    assert ev.ep == dup and ev.private_data == b"no dup"
    assert client.k.ep_state(dup) == "DISCONNECTED"


@pytest.mark.parametrize("dup_state", ["UNCONNECTED", "DISCONNECTED", "ACTIVE_CONNECTION_PENDING"])
def test_dup_connect_from_an_ep_not_connected_is_invalid_state(client, server, dup_state):
    src = client.ep()
    if dup_state == "DISCONNECTED":
        p = connect_pair(client, server)
        src = p.cep
        client.k.ep_disconnect(src)
        client.k.expect_event(client.evd, "DISCONNECTED")
    elif dup_state == "ACTIVE_CONNECTION_PENDING":
        port = next_port()
        server.k.psp_create(server.ia, server.crevd, port)
        client.k.ep_connect(src, host_addr(), port, T)
        wait_cr(server)
    assert client.k.ep_state(src) == dup_state
    new = client.ep()
    expect_dat_error("INVALID_STATE", client.k.ep_dup_connect, new, src, T)
    assert client.k.ep_state(new) == "UNCONNECTED"
    client.k.expect_no_event(client.evd, 200_000)


def test_dup_connect_on_an_ep_not_unconnected_is_invalid_state(client, server):
    p = connect_pair(client, server)
    other = connect_pair(client, server)
    expect_dat_error("INVALID_STATE", client.k.ep_dup_connect, other.cep, p.cep, T,
                     subtype=invalid_state_subtype("CONNECTED"))
    assert client.k.ep_state(other.cep) == "CONNECTED"


def test_dup_connect_parameter_rules_are_those_of_connect(client, server):
    p = connect_pair(client, server)
    new = client.ep()
    expect_dat_error("INVALID_PARAMETER", client.k.ep_dup_connect, new, p.cep, 0)
    for size in (-1, CONNECT_PDATA_MAX + 1, client.k.ia_query(client.ia).max_connect_private_data + 1, 257):
        expect_dat_error("INVALID_PARAMETER", client.k.ep_dup_connect, new, p.cep, T,
                         private_data=b"d" * (CONNECT_PDATA_MAX + 1), private_data_size=size)
    for qos in ("DAT_QOS_HIGH_THROUGHPUT", "DAT_QOS_LOW_LATENCY", "DAT_QOS_ECONOMY", "DAT_QOS_PREMIUM"):
        expect_dat_error("MODEL_NOT_SUPPORTED", client.k.ep_dup_connect, new, p.cep, T, qos=DAT[qos])
    assert client.k.ep_state(new) == "UNCONNECTED"
    expect_dat_error("INVALID_HANDLE", client.k.ep_dup_connect, new, 0, T)
    expect_dat_error("INVALID_HANDLE", client.k.ep_dup_connect, new, 12345, T)
    client.k.expect_no_event(client.evd, 200_000)
    server.k.expect_no_event(server.crevd, 1000)
    # the maximum size is fine
    client.k.ep_dup_connect(new, p.cep, T, private_data=bytes(range(CONNECT_PDATA_MAX)))
    assert server.k.cr_query(wait_cr(server).cr).private_data == bytes(range(CONNECT_PDATA_MAX))


def test_dup_connect_timeout_when_the_peer_does_not_answer(client, server):
    p = connect_pair(client, server)
    dup = client.ep()
    client.k.ep_dup_connect(dup, p.cep, 300_000)
    wait_cr(server)   # delivered, never answered
    client.k.expect_event(client.evd, "TIMED_OUT", 5_000_000)
    assert client.k.ep_state(dup) == "DISCONNECTED"
    client.k.expect_no_event(client.evd, 500_000)
    assert client.k.ep_state(p.cep) == "CONNECTED"
