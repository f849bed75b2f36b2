"""Two processes, each with its own /dev/kdat file: connections across them, a peer that is
killed or closes its file, and handles that mean nothing in another file."""
import pytest

from kdat_harness.agent import Agent
from kdat_harness.dat import (DAT, client, connect_pair, host_addr,  # noqa: F401
                              kdat_files, next_port, server, wait_cr)

T = 5_000_000


@pytest.fixture
def agent(kdat_module, kernel_log, rdma):
    a = Agent()
    yield a
    a.close()


def _hex(d):
    return bytes.fromhex(d["hex"])


def _agent_server_connected(agent, client, pd=b"", accept_pd=b""):
    port = next_port()
    agent.m("psp_create", agent.ia, agent.crevd, port)
    cep = client.ep()
    client.k.ep_connect(cep, host_addr(), port, T, private_data=pd)
    crev = agent.m("expect_event", agent.crevd, "CONNECTION_REQUEST_EVENT", T)
    sep = agent.m("ep")
    agent.m("cr_accept", crev["cr"], sep, private_data=accept_pd)
    return port, cep, sep, crev


def test_client_and_server_in_two_processes(agent, client):
    port, cep, sep, crev = _agent_server_connected(agent, client, b"from parent", b"from child")
    ev = client.k.expect_event(client.evd, "ESTABLISHED")
    assert ev.private_data == b"from child"
    sev = agent.m("expect_event", agent.evd, "ESTABLISHED", T)
    assert sev["ep"] == sep
    assert agent.m("ep_query", sep)["state"] == "CONNECTED"
    client.k.ep_disconnect(cep)
    client.k.expect_event(client.evd, "DISCONNECTED")
    agent.m("expect_event", agent.evd, "DISCONNECTED", T)
    assert agent.m("ep_query", sep)["state"] == "DISCONNECTED"
    r = agent.raw("cr_query", crev["cr"])   # the CR is gone after the accept
    assert r.get("err") == "DAT_INVALID_HANDLE", r


def test_server_in_parent_client_in_child_private_data_both_ways(agent, server):
    port = next_port()
    server.k.psp_create(server.ia, server.crevd, port)
    cep = agent.m("ep")
    agent.m("ep_connect", cep, host_addr(), port, T, private_data=b"child says hi")
    crev = wait_cr(server)
    cr = server.k.cr_query(crev.cr)
    assert cr.private_data == b"child says hi"
    assert cr.remote_addr.port == agent.m("ep_query", cep)["local_addr"]["port"]
    sep = server.ep()
    server.k.cr_accept(crev.cr, sep, private_data=b"parent says hi")
    server.k.expect_event(server.evd, "ESTABLISHED")
    ev = agent.m("expect_event", agent.evd, "ESTABLISHED", T)
    assert _hex(ev["private_data"]) == b"parent says hi"
    server.k.ep_disconnect(sep, graceful=True)
    server.k.expect_event(server.evd, "DISCONNECTED")
    agent.m("expect_event", agent.evd, "DISCONNECTED", T)


def test_kill_9_of_the_connected_peer_disconnects_the_local_ep(agent, client):
    port, cep, sep, crev = _agent_server_connected(agent, client)
    client.k.expect_event(client.evd, "ESTABLISHED")
    agent.kill()
    ev = client.k.try_wait(client.evd, 10_000_000)
    assert ev is not None and ev.name in ("CONNECTION_EVENT_DISCONNECTED", "CONNECTION_EVENT_BROKEN"), ev
    assert client.k.ep_state(cep) == "DISCONNECTED"
    client.k.expect_no_event(client.evd, 300_000)


def test_kill_9_of_a_peer_holding_our_cr_ends_the_connect_without_established(agent, client):
    port = next_port()
    agent.m("psp_create", agent.ia, agent.crevd, port)
    cep = client.ep()
    client.k.ep_connect(cep, host_addr(), port, 30_000_000)
    agent.m("expect_event", agent.crevd, "CONNECTION_REQUEST_EVENT", T)
    agent.kill()
    ev = client.k.try_wait(client.evd, 10_000_000)
    assert ev is not None and ev.name in ("CONNECTION_EVENT_NON_PEER_REJECTED",
                                          "CONNECTION_EVENT_PEER_REJECTED"), ev
    assert client.k.ep_state(cep) == "DISCONNECTED"
    client.k.expect_no_event(client.evd, 300_000)


@pytest.mark.parametrize("who", ["server", "client"])
def test_close_of_one_file_disconnects_the_other_side(client, server, who):
    p = connect_pair(client, server)
    gone, stay, ep = (server, client, p.cep) if who == "server" else (client, server, p.sep)
    gone.k.close()
    ev = stay.k.try_wait(stay.evd, 10_000_000)
    assert ev is not None and ev.name in ("CONNECTION_EVENT_DISCONNECTED", "CONNECTION_EVENT_BROKEN"), ev
    assert ev.ep == ep
    assert stay.k.ep_state(ep) == "DISCONNECTED"


def test_handles_of_one_file_are_invalid_in_another(kdat_files, client, server):
    p = connect_pair(client, server)
    fresh = kdat_files()
    for cmd, field, h in [("ia_query", "ia", client.ia), ("evd_dequeue", "evd", client.evd),
                          ("ep_query", "ep", p.cep), ("ep_disconnect", "ep", p.cep),
                          ("psp_query", "psp", p.psp), ("cr_query", "cr", p.crev.cr),
                          ("evd_wait", "evd", client.evd)]:
        kw = {field: h}
        if cmd == "evd_wait":
            kw.update(timeout_us=1000, threshold=1)
        r = fresh.call(cmd, **kw)
        assert r.status & DAT["DAT_TYPE_MASK"] == DAT["DAT_INVALID_HANDLE"], (cmd, hex(r.status))
    # and nothing happened to the owner's objects
    assert client.k.ep_state(p.cep) == "CONNECTED"
    client.k.expect_no_event(client.evd, 200_000)


def test_handles_of_another_process_are_invalid_in_ours(agent, client):
    ep = agent.m("ep")
    mine = {client.ia, client.evd, client.crevd}
    for cmd, field, h in [("ep_query", "ep", ep), ("evd_dequeue", "evd", agent.evd),
                          ("ia_query", "ia", agent.ia)]:
        if h in mine:
            continue  # the same small number may name one of our own objects
        r = client.k.call(cmd, **{field: h})
        assert r.status & DAT["DAT_TYPE_MASK"] == DAT["DAT_INVALID_HANDLE"], (cmd, hex(r.status))
    assert agent.m("ep_query", ep)["state"] == "UNCONNECTED"
