"""kdat_echo, a kernel module that uses only include/kdat/kdat.h, against userspace EPs both ways."""
import json
import os
import subprocess
import time

import pytest

from kdat_harness import guest
from kdat_harness.dat import DAT, TABLE, Kdat, ipv4, next_port

ECHO_KO = guest.ECHO_KO
PARAMS = "/sys/module/kdat_echo/parameters"


def param(name):
    with open(os.path.join(PARAMS, name)) as f:
        return f.read().strip()


def wait_param(name, want, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if param(name) == want:
            return
        time.sleep(0.05)
    # every parameter: which step the exchange stopped at
    every = {n: param(n) for n in sorted(os.listdir(PARAMS))}
    raise AssertionError(f"{name} is {param(name)!r}, wanted {want!r}; kdat_echo: {every}")


@pytest.fixture
def echo(kdat_module, kernel_log):
    loaded = []

    def load(**params):
        guest.run("insmod", ECHO_KO, *[f"{k}={v}" for k, v in params.items()])
        loaded.append(True)

    yield load
    if loaded and guest.module_loaded("kdat_echo"):
        r = guest.unload_module("kdat_echo")
        assert r.returncode == 0, r.stderr


def test_user_ep_connects_to_the_kernel_echo_service(echo, rdma):
    port = next_port()
    echo(listen_port=port)
    with Kdat() as k:
        ia = k.ia_open("kdat0")
        evd = k.evd_create(ia, 16)
        ep = k.ep_create(ia, evd)
        k.ep_connect(ep, ipv4(rdma["KDAT_TEST_ADDR"]), port, 5_000_000, private_data=b"ping")
        ev = k.expect_event(evd, "CONNECTION_EVENT_ESTABLISHED")
        assert ev.private_data == b"echo:ping"
        assert k.ep_state(ep) == "CONNECTED"
        wait_param("accepted", "1")
        wait_param("established", "1")
        k.ep_disconnect(ep)
        k.expect_event(evd, "CONNECTION_EVENT_DISCONNECTED")
        # the kernel side sees the peer go and frees its EP
        wait_param("disconnected", "1")


def _connected_to_echo(k, rdma, port):
    """A userspace EP of `k` connected to kdat_echo listening on `port`: (its EVD, the EP)."""
    ia = k.ia_open("kdat0")
    evd = k.evd_create(ia, 16)
    ep = k.ep_create(ia, evd)
    k.ep_connect(ep, ipv4(rdma["KDAT_TEST_ADDR"]), port, 5_000_000)
    k.expect_event(evd, "CONNECTION_EVENT_ESTABLISHED")
    return evd, ep


def _cm_ids_on_port(port):
    out = subprocess.run(["rdma", "-j", "res", "show", "cm_id"], capture_output=True, text=True,
                         check=True).stdout
    return [i for i in json.loads(out) if i.get("src-addr", "").endswith(f":{port}")]


def test_rdma_res_names_the_kernel_consumer_as_its_cm_ids_owner(echo, rdma):
    """rdma res show cm_id labels a kernel consumer's ids with the consumer's module name (as it
    labels nvme-rdma's), not with kdat's: the listener and the id that accepted a userspace EP's
    connection both have comm "kdat_echo" and no pid (the text output brackets it: [kdat_echo])."""
    port = next_port()
    echo(listen_port=port)
    with Kdat() as k:
        evd, ep = _connected_to_echo(k, rdma, port)
        wait_param("established", "1")
        ids = _cm_ids_on_port(port)
        kernel = [i for i in ids if "pid" not in i]  # iproute2: a kernel id has no pid
        assert {i.get("state") for i in kernel} == {"LISTEN", "CONNECT"}, ids
        assert all(i.get("comm") == "kdat_echo" for i in kernel), ids
        k.ep_disconnect(ep)
        k.expect_event(evd, "CONNECTION_EVENT_DISCONNECTED")
    wait_param("disconnected", "1")


def test_unloading_the_kernel_consumer_disconnects_its_peers(echo, rdma):
    port = next_port()
    echo(listen_port=port)
    with Kdat() as k:
        evd, ep = _connected_to_echo(k, rdma, port)
        # a kernel consumer holds kdat: kdat cannot go first
        assert guest.unload_module("kdat").returncode != 0
        assert guest.unload_module("kdat_echo").returncode == 0
        k.expect_event(evd, "CONNECTION_EVENT_DISCONNECTED")
        assert k.ep_state(ep) == "DISCONNECTED"


def test_kernel_ep_connects_to_a_user_psp(echo, rdma):
    port = next_port()
    with Kdat() as k:
        ia = k.ia_open("kdat0")
        evd = k.evd_create(ia, 16)
        crevd = k.evd_create(ia, 16, flags=guest.UAPI.consts["KDAT_EVD_CR"])
        k.psp_create(ia, crevd, port)
        echo(connect_addr=rdma["KDAT_TEST_ADDR"], connect_port=port, pdata="fromkernel")
        req = k.expect_event(crevd, "CONNECTION_REQUEST_EVENT")
        cr = k.cr_query(req.cr)
        assert bytes(cr.private_data)[:cr.private_data_size] == b"fromkernel"
        ep = k.ep_create(ia, evd)
        k.cr_accept(req.cr, ep, private_data=b"fromuser")
        k.expect_event(evd, "CONNECTION_EVENT_ESTABLISHED")
        wait_param("established", "1")
        assert param("peer_pdata") == "fromuser"
        # the kernel client disconnects gracefully once established
        k.expect_event(evd, "CONNECTION_EVENT_DISCONNECTED")
        wait_param("disconnected", "1")


def test_kernel_ep_sees_a_user_reject_with_its_private_data(echo, rdma):
    port = next_port()
    with Kdat() as k:
        ia = k.ia_open("kdat0")
        crevd = k.evd_create(ia, 16, flags=guest.UAPI.consts["KDAT_EVD_CR"])
        k.psp_create(ia, crevd, port)
        echo(connect_addr=rdma["KDAT_TEST_ADDR"], connect_port=port)
        req = k.expect_event(crevd, "CONNECTION_REQUEST_EVENT")
        k.cr_reject(req.cr, private_data=b"go away")
        wait_param("rejected", "1")
        assert param("last_event") == "PEER_REJECTED"
        assert param("peer_pdata") == "go away"


def test_kernel_eps_exchange_data_send_recv_rdma_write_and_read(echo, rdma):
    """One kdat_echo instance is both client and server: an RMR bound by the client, RDMA write
    and read by the server, send/receive both ways, graceful disconnect after checking the data."""
    port = next_port()
    echo(listen_port=port, connect_addr=rdma["KDAT_TEST_ADDR"], connect_port=port, data=1)
    wait_param("verified", "2")          # the server read back its write, the client saw it
    wait_param("disconnected", "2")      # graceful disconnect reached both EPs
    assert param("dto_errors") == "0"
    assert param("failed") == "0"
    assert param("peer_pdata") == "echo:kernel"


def test_abrupt_disconnect_flushes_posted_receives_before_disconnected(echo, rdma):
    """dat_ep_disconnect(3DAT): abrupt disconnect completes outstanding requests unsuccessfully
    (flushed), every completion is queued before DISCONNECTED on a shared EVD, and nothing is posted
    afterwards."""
    port = next_port()
    echo(listen_port=port, connect_addr=rdma["KDAT_TEST_ADDR"], connect_port=port, flush_test=1)
    wait_param("flushed_before_disconnect", "3")
    wait_param("disconnected", "2")
    assert param("flushed_after_disconnect") == "0"
    assert param("dto_errors") == "0"
    d = DAT
    want = d["DAT_CLASS_ERROR"] | d["DAT_INVALID_STATE"] | d["DAT_INVALID_STATE_EP_DISCONNECTED"]
    assert int(param("post_after_disconnect"), 16) == want


def test_graceful_disconnect_waits_in_disconnect_pending(echo, rdma):
    """dat_ep_disconnect(3DAT): a graceful disconnect with a send in flight (the peer has no receive
    posted, so it cannot complete) stays in DISCONNECT_PENDING; no send may be posted then; a second
    graceful call changes nothing; an abrupt one ends it at once, the send flushed before
    DISCONNECTED."""
    port = next_port()
    echo(listen_port=port, connect_addr=rdma["KDAT_TEST_ADDR"], connect_port=port,
         graceful_test=1)
    st = TABLE.state_value
    wait_param("gt_state_after_abrupt", str(st["DISCONNECTED"]))
    assert param("gt_state_after_graceful") == str(st["DISCONNECT_PENDING"])
    d = DAT
    want = d["DAT_CLASS_ERROR"] | d["DAT_INVALID_STATE"] | d["DAT_INVALID_STATE_EP_DISCPENDING"]
    assert int(param("gt_post_in_pending"), 16) == want
    assert int(param("gt_second_graceful"), 16) == d["DAT_SUCCESS"]
    assert param("gt_state_after_second") == str(st["DISCONNECT_PENDING"])
    wait_param("gt_flushed_sends", "1")
    wait_param("disconnected", "2")   # the server EP sees the connection go too
    assert param("dto_errors") == "0"


def test_the_kernel_consumers_ia_counters_count_what_it_did(echo, rdma):
    """kdat_echo's IA, read through its table's id (root: CAP_SYS_ADMIN), counts the request it
    got, its accept and the connection; and its disconnect once the peer went."""
    port = next_port()
    echo(listen_port=port)
    names = guest.UAPI.counters
    with Kdat() as k:
        tables = [t for t in k.table_list()[1]
                  if t.flags & guest.UAPI.consts["KDAT_TABLE_KERNEL"] and t.comm == "kdat_echo"]
        assert len(tables) == 1, tables
        tid = tables[0].id
        k.table_attach(tid)
        with k.view() as v:
            ias = [r.handle for _, r in v.live_records()
                   if r.type == guest.UAPI.consts["KDAT_REC_IA"]]
        assert len(ias) == 1
        assert k.ia_counters(ias[0], table=tid) == dict.fromkeys(names, 0)
        evd, ep = _connected_to_echo(k, rdma, port)
        wait_param("established", "1")
        want = dict.fromkeys(names, 0) | {"requests": 1, "accepts": 1, "established": 1}
        assert k.ia_counters(ias[0], table=tid) == want
        k.ep_disconnect(ep)
        k.expect_event(evd, "CONNECTION_EVENT_DISCONNECTED")
        wait_param("disconnected", "1")
        assert k.ia_counters(ias[0], table=tid) == want | {"disconnected": 1}
