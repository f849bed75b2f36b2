"""User-QP EPs (ABI 4, KDAT_IOC_UQP_*) driven with raw ioctls: the attributes kdat hands out for
each QP transition, the active side's internal event and ESTABLISH, and bad input (wrong QP
numbers, states, handles, flags).  The QPs here are made-up numbers: the kernel cannot tell (see
include/kdat/uapi/kdat.h), and the CM only sends them to the peer.  The real-QP data tests are the
UserQp GoogleTests (user/tests/guest/user_qp_test.cpp, run by test_libkdat.py)."""
import time

import pytest

from kdat_harness.dat import (DAT, Kdat, expect_dat_error, host_addr, kd, kdat_files,  # noqa: F401
                              next_port, side, wait_cr)
from kdat_harness.guest import UAPI

C = UAPI.consts
T = 5_000_000
INTERNAL = C["KDAT_EVENT_UQP_CONNECT_RESPONSE"]
QPS = {"INIT": C["KDAT_QPS_INIT"], "RTR": C["KDAT_QPS_RTR"], "RTS": C["KDAT_QPS_RTS"],
       "ERR": C["KDAT_QPS_ERR"]}
# enum ibv_qp_attr_mask (= the kernel's IB_QP_*)
STATE, ACCESS, PKEY, PORT, AV, MTU, TIMEOUT, RETRY, RNR_RETRY, RQ_PSN, ORD, MIN_RNR, SQ_PSN, \
    IRD, DEST_QPN = (1 << 0, 1 << 3, 1 << 4, 1 << 5, 1 << 7, 1 << 8, 1 << 9, 1 << 10, 1 << 11,
                     1 << 12, 1 << 13, 1 << 15, 1 << 16, 1 << 17, 1 << 20)
FAKE_QPN = 0x1234


def dtype(status):
    return status & DAT["DAT_TYPE_MASK"]


def uqp_create(k, s, qp_num=FAKE_QPN, **attr):
    return k.call("uqp_create", ia=s.ia, connect_evd=s.evd, qp_num=qp_num, attr=attr or None)


def new_uqp(k, s, qp_num=FAKE_QPN, **attr):
    r = uqp_create(k, s, qp_num, **attr)
    assert r.status == DAT["DAT_SUCCESS"], hex(r.status)
    return r.ep


def expect_connect_response(k, evd, ep):
    """The kdat-internal event of a user-QP EP whose REP arrived (no DAT name)."""
    ev = k.try_wait(evd, T)
    assert ev is not None and ev.number == INTERNAL, ev
    assert ev.ep == ep and ev.private_data_size == 0
    return ev


def attr(k, ep, state, cr=0):
    return k.call("uqp_attr", ep=ep, cr=cr, qp_state=QPS[state])


@pytest.fixture
def two(kdat_files, rdma):
    return side(kdat_files()), side(kdat_files())


def test_a_user_ep_is_an_ep_with_the_user_qp_flag_and_init_attributes(kd, rdma):
    s = side(kd)
    ep = new_uqp(kd, s)
    assert kd.ep_state(ep) == "UNCONNECTED"
    with kd.table() as t:
        flags = [r.flags for _, r in t.live_records() if r.handle == ep]
    assert len(flags) == 1 and flags[0] & C["KDAT_RECF_USER_QP"]
    r = attr(kd, ep, "INIT")
    assert r.status == DAT["DAT_SUCCESS"]
    assert r.attr_mask == STATE | PKEY | PORT | ACCESS
    assert (r.qp_state, r.pkey_index, r.port_num) == (QPS["INIT"], 0, 1)
    assert r.qp_access_flags == 0x7     # local write, remote write, remote read
    r = attr(kd, ep, "ERR")
    assert (r.status, r.attr_mask, r.qp_state) == (DAT["DAT_SUCCESS"], STATE, QPS["ERR"])
    # a kernel EP's QP is kdat's own: no attributes for it
    kep = s.ep()
    assert dtype(attr(kd, kep, "INIT").status) == DAT["DAT_INVALID_PARAMETER"]
    assert dtype(kd.call("uqp_establish", ep=kep).status) == DAT["DAT_INVALID_PARAMETER"]


@pytest.mark.parametrize("qpn", [0, 1, 1 << 24, 0xFFFFFFFF])
def test_impossible_qp_numbers_are_refused(kd, rdma, qpn):
    s = side(kd)
    r = uqp_create(kd, s, qpn)
    assert dtype(r.status) == DAT["DAT_INVALID_PARAMETER"] and r.ep == 0
    with kd.table() as t:
        assert [r.handle for _, r in t.live_records() if r.type == C["KDAT_REC_EP"]] == []


def test_a_qp_number_in_use_by_another_ep_of_the_file_on_the_device_is_refused(kd, rdma):
    s = side(kd)
    new_uqp(kd, s, 0x100)
    assert dtype(uqp_create(kd, s, 0x100).status) == DAT["DAT_INVALID_PARAMETER"]
    # another IA of the same file on the same device too
    s2 = side(kd)
    assert dtype(uqp_create(kd, s2, 0x100).status) == DAT["DAT_INVALID_PARAMETER"]
    new_uqp(kd, s, 0x101)


def test_qp_numbers_in_use_are_found_among_many_eps_and_a_freed_ep_s_number_is_free(kd, rdma):
    """The in-use check is an index by QP number (a list walk made N creates cost N^2): it must
    still find every live EP's number, user QP or kernel QP, among hundreds that share its
    buckets, and forget an EP once it is freed."""
    s = side(kd)
    # the kernel EP's QP first: rxe numbers QPs cyclically, so late in a run its number may be
    # any of the made-up ones below, which must then leave it out
    kep = s.ep()
    with kd.table() as t:
        kqpn = [r.qp_num for _, r in t.live_records() if r.handle == kep][0]
    numbers = [0x400 + 256 * i for i in range(40)] + [0x10000 + i for i in range(200)]
    numbers = [n for n in numbers if n != kqpn]
    eps = {n: new_uqp(kd, s, n) for n in numbers}
    for n in numbers:
        assert dtype(uqp_create(kd, s, n).status) == DAT["DAT_INVALID_PARAMETER"], hex(n)
    assert dtype(uqp_create(kd, s, kqpn).status) == DAT["DAT_INVALID_PARAMETER"]
    for n in numbers[::2]:
        kd.ep_free(eps.pop(n))
    kd.ep_free(kep)
    for n in numbers[::2] + [kqpn]:
        eps[n] = new_uqp(kd, s, n)
    for n in numbers + [kqpn]:
        assert dtype(uqp_create(kd, s, n).status) == DAT["DAT_INVALID_PARAMETER"], hex(n)


def test_ep_reset_may_give_a_user_ep_a_new_qp_and_checks_the_number(kd, rdma):
    """ep_reset's qp_num (libkdat uses it on iWARP, where siw cannot take a QP out of ERR): the
    EP's QP from then on, checked as uqp_create checks it; 0 keeps the QP; a kernel EP has none to
    change.  A refused number leaves the EP as it was (not reset)."""
    s = side(kd)
    ep = new_uqp(kd, s, 0x300)
    other = new_uqp(kd, s, 0x301)
    kep = s.ep()

    def qpn_of(handle):
        with kd.table() as t:
            return [r.qp_num for _, r in t.live_records() if r.handle == handle][0]

    def reset(handle, qpn):
        return kd.call("ep_reset", ep=handle, qp_num=qpn).status

    for bad in (1, 1 << 24, 0x301):     # a special QP, 25 bits, another EP's
        assert dtype(reset(ep, bad)) == DAT["DAT_INVALID_PARAMETER"], bad
        assert qpn_of(ep) == 0x300
    assert dtype(reset(kep, 0x302)) == DAT["DAT_INVALID_PARAMETER"]
    assert reset(ep, 0x302) == DAT["DAT_SUCCESS"]
    assert qpn_of(ep) == 0x302 and kd.ep_state(ep) == "UNCONNECTED"
    assert dtype(uqp_create(kd, s, 0x300).status) == DAT["DAT_SUCCESS"]  # the old one is free
    assert reset(ep, 0) == DAT["DAT_SUCCESS"] and qpn_of(ep) == 0x302
    assert reset(other, 0x301) == DAT["DAT_SUCCESS"]    # its own number: kept
    assert reset(kep, 0) == DAT["DAT_SUCCESS"]


def test_another_file_may_use_the_same_number_as_the_kernel_cannot_see_its_qps(kdat_files, rdma):
    # Documented limit: a QP belongs to a uverbs file kdat cannot look into.
    a, b = side(kdat_files()), side(kdat_files())
    new_uqp(a.k, a, 0x200)
    new_uqp(b.k, b, 0x200)


def test_uqp_create_checks_its_evd_and_attributes(kd, rdma):
    s = side(kd)
    assert dtype(kd.call("uqp_create", ia=s.ia, connect_evd=0, qp_num=FAKE_QPN).status) == \
        DAT["DAT_INVALID_HANDLE"]
    assert dtype(kd.call("uqp_create", ia=s.ia, connect_evd=s.crevd + 0x10000,
                         qp_num=FAKE_QPN).status) == DAT["DAT_INVALID_HANDLE"]
    dto = kd.evd_create(s.ia, 4, Kdat.EVD_DTO)
    assert dtype(kd.call("uqp_create", ia=s.ia, connect_evd=dto, qp_num=FAKE_QPN).status) == \
        DAT["DAT_INVALID_HANDLE"]
    assert dtype(uqp_create(kd, s, FAKE_QPN, retry_count=8).status) == DAT["DAT_INVALID_PARAMETER"]


@pytest.mark.parametrize("state", [0, 4, 5, 7, 0xFFFFFFFF])
def test_unknown_qp_states_are_invalid_parameter(kd, rdma, state):
    s = side(kd)
    ep = new_uqp(kd, s)
    r = kd.call("uqp_attr", ep=ep, qp_state=state)
    assert dtype(r.status) == DAT["DAT_INVALID_PARAMETER"]
    assert r.attr_mask == 0


def test_rtr_and_rts_before_any_rep_are_invalid_state(kd, rdma):
    s = side(kd)
    ep = new_uqp(kd, s)
    for st in ("RTR", "RTS"):
        r = attr(kd, ep, st)
        assert dtype(r.status) == DAT["DAT_INVALID_STATE"] and r.attr_mask == 0
    assert dtype(kd.call("uqp_establish", ep=ep).status) == DAT["DAT_INVALID_STATE"]
    assert dtype(kd.call("uqp_establish", ep=ep, flags=2).status) == DAT["DAT_INVALID_PARAMETER"]


def test_active_side_rep_gives_rtr_rts_and_establish_sends_the_rtu(two):
    client, server = two
    port = next_port()
    server.k.psp_create(server.ia, server.crevd, port)
    sep = server.ep(max_rdma_read_in=4, max_rdma_read_out=4)
    cep = new_uqp(client.k, client, max_rdma_read_in=2, max_rdma_read_out=3)
    client.k.ep_connect(cep, host_addr(), port, T, private_data=b"uqp")
    # while connecting: no INIT (the QP is past it) and no RTR yet
    assert dtype(attr(client.k, cep, "INIT").status) == DAT["DAT_INVALID_STATE"]
    crev = wait_cr(server)
    assert server.k.cr_query(crev.cr).private_data == b"uqp"
    server.k.cr_accept(crev.cr, sep, private_data=b"rep")
    expect_connect_response(client.k, client.evd, cep)
    assert client.k.ep_state(cep) == "ACTIVE_CONNECTION_PENDING"   # no state of its own

    rtr = attr(client.k, cep, "RTR")
    assert rtr.status == DAT["DAT_SUCCESS"]
    assert rtr.attr_mask & (STATE | AV | MTU | DEST_QPN | RQ_PSN | IRD) == \
        STATE | AV | MTU | DEST_QPN | RQ_PSN | IRD
    assert rtr.qp_state == QPS["RTR"] and 1 <= rtr.path_mtu <= 5
    assert 2 <= rtr.dest_qp_num < 1 << 24
    assert rtr.max_dest_rd_atomic == 2          # our IRD (the acceptor's ORD is 4)
    ah = rtr.ah_attr
    assert ah.is_global == 1 and ah.port_num == 1
    assert bytes(ah.dgid) == bytes(10) + b"\xff\xff" + bytes([192, 0, 2, 1])  # ::ffff:192.0.2.1
    rts = attr(client.k, cep, "RTS")
    assert rts.status == DAT["DAT_SUCCESS"]
    assert rts.attr_mask & (STATE | TIMEOUT | RETRY | RNR_RETRY | SQ_PSN | ORD) == \
        STATE | TIMEOUT | RETRY | RNR_RETRY | SQ_PSN | ORD
    # kdat's default transport retries are 6: rxe retries 7 forever (kdat_conn.h)
    assert rts.max_rd_atomic == 3 and rts.retry_cnt == 6 and rts.rnr_retry == 7
    assert dtype(client.k.call("uqp_attr", ep=cep, cr=crev.cr, qp_state=QPS["RTR"]).status) == \
        DAT["DAT_INVALID_HANDLE"]    # the CR is the other file's

    client.k.do("uqp_establish", ep=cep)
    est = client.k.expect_event(client.evd, "CONNECTION_EVENT_ESTABLISHED")
    assert est.private_data == b"rep"
    server.k.expect_event(server.evd, "CONNECTION_EVENT_ESTABLISHED")
    assert client.k.ep_state(cep) == "CONNECTED"
    q = client.k.ep_query(cep)
    assert (q.attr.max_rdma_read_in, q.attr.max_rdma_read_out) == (2, 3)
    # once is enough; RTR/RTS are over
    assert dtype(client.k.call("uqp_establish", ep=cep).status) == DAT["DAT_INVALID_STATE"]
    assert dtype(attr(client.k, cep, "RTR").status) == DAT["DAT_INVALID_STATE"]
    assert dtype(attr(client.k, cep, "INIT").status) == DAT["DAT_INVALID_STATE"]

    client.k.ep_disconnect(cep)
    client.k.expect_event(client.evd, "CONNECTION_EVENT_DISCONNECTED")
    server.k.expect_event(server.evd, "CONNECTION_EVENT_DISCONNECTED")
    assert attr(client.k, cep, "ERR").attr_mask == STATE
    client.k.ep_reset(cep)
    assert attr(client.k, cep, "INIT").status == DAT["DAT_SUCCESS"]


def test_a_held_dreq_waits_for_requests_done_and_only_user_eps_may_hold_one(two):
    """KDAT_CLOSE_HOLD_DREQ (dat_ep_disconnect(3DAT)'s graceful order for a QP the kernel cannot
    see): the EP is DISCONNECT_PENDING and its DREQ waits for KDAT_CLOSE_REQUESTS_DONE; only a
    user-QP EP may ask, and only in those two forms."""
    client, server = two
    graceful, hold, done = C["KDAT_CLOSE_GRACEFUL"], C["KDAT_CLOSE_HOLD_DREQ"], \
        C["KDAT_CLOSE_REQUESTS_DONE"]
    port = next_port()
    server.k.psp_create(server.ia, server.crevd, port)
    sep = server.ep()
    cep = new_uqp(client.k, client, qp_num=0x2345)
    # not connected: a graceful disconnect of an UNCONNECTED EP is refused, held or not
    assert dtype(client.k.status("ep_disconnect", ep=cep, flags=graceful | hold)) == \
        DAT["DAT_INVALID_STATE"]
    client.k.ep_connect(cep, host_addr(), port, T)
    server.k.cr_accept(wait_cr(server).cr, sep)
    expect_connect_response(client.k, client.evd, cep)
    assert attr(client.k, cep, "RTR").status == DAT["DAT_SUCCESS"]
    assert attr(client.k, cep, "RTS").status == DAT["DAT_SUCCESS"]
    client.k.do("uqp_establish", ep=cep)
    client.k.expect_event(client.evd, "CONNECTION_EVENT_ESTABLISHED")
    server.k.expect_event(server.evd, "CONNECTION_EVENT_ESTABLISHED")

    for flags in (graceful | hold, done):      # a kernel QP's requests are the kernel's to see
        assert server.k.status("ep_disconnect", ep=sep, flags=flags) == \
            DAT["DAT_CLASS_ERROR"] | DAT["DAT_INVALID_PARAMETER"] | DAT["DAT_INVALID_ARG2"]
    for flags in (hold, hold | done, graceful | done, graceful | hold | done, done | 2):
        assert server.k.status("ep_disconnect", ep=cep, flags=flags) != DAT["DAT_SUCCESS"]
        assert client.k.status("ep_disconnect", ep=cep, flags=flags) == \
            DAT["DAT_CLASS_ERROR"] | DAT["DAT_INVALID_PARAMETER"] | DAT["DAT_INVALID_ARG2"], hex(flags)
    assert client.k.ep_state(cep) == server.k.ep_state(sep) == "CONNECTED"
    assert client.k.status("ep_disconnect", ep=cep, flags=done) == DAT["DAT_SUCCESS"]  # none held
    assert client.k.ep_state(cep) == "CONNECTED"

    client.k.do("ep_disconnect", ep=cep, flags=graceful | hold)
    assert client.k.ep_state(cep) == "DISCONNECT_PENDING"
    assert server.k.try_wait(server.evd, 300_000) is None, "the held DREQ went out"
    assert client.k.try_wait(client.evd, 0) is None
    assert server.k.ep_state(sep) == "CONNECTED"
    client.k.do("ep_disconnect", ep=cep, flags=done)
    server.k.expect_event(server.evd, "CONNECTION_EVENT_DISCONNECTED")
    client.k.expect_event(client.evd, "CONNECTION_EVENT_DISCONNECTED")
    assert client.k.ep_state(cep) == "DISCONNECTED"
    assert client.k.status("ep_disconnect", ep=cep, flags=done) == DAT["DAT_SUCCESS"]  # no effect
    assert client.k.try_wait(client.evd, 100_000) is None


def test_establish_failed_rejects_the_rep(two):
    client, server = two
    port = next_port()
    server.k.psp_create(server.ia, server.crevd, port)
    sep = server.ep()
    cep = new_uqp(client.k, client)
    client.k.ep_connect(cep, host_addr(), port, T)
    server.k.cr_accept(wait_cr(server).cr, sep)
    expect_connect_response(client.k, client.evd, cep)
    client.k.do("uqp_establish", ep=cep, flags=C["KDAT_UQP_ESTABLISH_FAILED"])
    client.k.expect_event(client.evd, "CONNECTION_EVENT_NON_PEER_REJECTED")
    assert client.k.ep_state(cep) == "DISCONNECTED"
    server.k.expect_event(server.evd, "CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR", 20_000_000)
    client.k.expect_no_event(client.evd)


def test_passive_side_gets_rtr_rts_from_the_cr_with_the_accept_s_depths(two):
    client, server = two
    port = next_port()
    server.k.psp_create(server.ia, server.crevd, port)
    cep = client.ep(max_rdma_read_in=2, max_rdma_read_out=3)
    sep = new_uqp(server.k, server, max_rdma_read_in=4, max_rdma_read_out=4)
    client.k.ep_connect(cep, host_addr(), port, T)
    cr = wait_cr(server).cr
    assert dtype(server.k.call("uqp_attr", ep=sep, cr=cr, qp_state=QPS["INIT"]).status) == \
        DAT["DAT_INVALID_PARAMETER"]    # a CR only for RTR/RTS
    assert dtype(server.k.call("uqp_attr", ep=sep, cr=cr + 0x10000,
                               qp_state=QPS["RTR"]).status) == DAT["DAT_INVALID_HANDLE"]
    rtr = attr(server.k, sep, "RTR", cr)
    assert rtr.status == DAT["DAT_SUCCESS"]
    want = AV | DEST_QPN | RQ_PSN | IRD | MIN_RNR
    assert rtr.attr_mask & want == want
    assert rtr.max_dest_rd_atomic == 3     # min(our IRD 4, the requester's ORD 3)
    rts = attr(server.k, sep, "RTS", cr)
    assert rts.status == DAT["DAT_SUCCESS"] and rts.max_rd_atomic == 2   # min(4, its IRD 2)
    # the CR is still pending: accept it (the kernel sends our made-up QPN in the REP)
    server.k.cr_accept(cr, sep, private_data=b"ok")
    assert server.k.ep_state(sep) in ("COMPLETION_PENDING", "CONNECTED")   # the RTU is quick
    client.k.expect_event(client.evd, "CONNECTION_EVENT_ESTABLISHED")
    server.k.expect_event(server.evd, "CONNECTION_EVENT_ESTABLISHED")
    q = server.k.ep_query(sep)
    assert (q.attr.max_rdma_read_in, q.attr.max_rdma_read_out) == (3, 2)
    # the CR is spent; a CONNECTED EP gets no RTR anymore
    assert dtype(attr(server.k, sep, "RTR", cr).status) == DAT["DAT_INVALID_HANDLE"]
    assert dtype(attr(server.k, sep, "RTR").status) == DAT["DAT_INVALID_STATE"]
    server.k.ep_disconnect(sep, graceful=True)
    server.k.expect_event(server.evd, "CONNECTION_EVENT_DISCONNECTED")
    client.k.expect_event(client.evd, "CONNECTION_EVENT_DISCONNECTED")


def test_passive_rtr_with_a_cr_that_names_another_ep_is_refused(two):
    client, server = two
    port = next_port()
    reserved = server.ep()
    server.k.rsp_create(server.ia, reserved, port, server.crevd)
    sep = new_uqp(server.k, server)
    client.k.ep_connect(client.ep(), host_addr(), port, T)
    cr = wait_cr(server).cr
    r = attr(server.k, sep, "RTR", cr)
    assert dtype(r.status) == DAT["DAT_INVALID_PARAMETER"] and r.attr_mask == 0
    # nothing changed: the CR is still there and the reserved EP still waits for it
    assert server.k.ep_state(reserved) == "PASSIVE_CONNECTION_PENDING"
    assert server.k.cr_query(cr).ep == reserved


def test_a_user_ep_that_never_establishes_times_out(two):
    client, server = two
    port = next_port()
    server.k.psp_create(server.ia, server.crevd, port)
    sep = server.ep()
    cep = new_uqp(client.k, client)
    client.k.ep_connect(cep, host_addr(), port, 300_000)
    server.k.cr_accept(wait_cr(server).cr, sep)
    expect_connect_response(client.k, client.evd, cep)
    client.k.expect_event(client.evd, "CONNECTION_EVENT_TIMED_OUT", 5_000_000)
    assert client.k.ep_state(cep) == "DISCONNECTED"
    assert dtype(client.k.call("uqp_establish", ep=cep).status) == DAT["DAT_INVALID_STATE"]
    assert dtype(attr(client.k, cep, "RTR").status) == DAT["DAT_INVALID_STATE"]
    server.k.expect_event(server.evd, "CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR", 20_000_000)


def test_closing_the_file_mid_connect_leaves_nothing_behind(kdat_files, rdma):
    server = side(kdat_files())
    port = next_port()
    server.k.psp_create(server.ia, server.crevd, port)
    for _ in range(3):
        k = kdat_files()
        c = side(k)
        cep = new_uqp(k, c)
        k.ep_connect(cep, host_addr(), port, T)
        cr = wait_cr(server).cr
        server.k.cr_accept(cr, server.ep())
        expect_connect_response(k, c.evd, cep)
        k.close()      # the REP is never answered: the id goes with the file
        ev = server.k.try_wait(server.evd, 20_000_000)
        assert ev is not None and ev.name in ("CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR",
                                              "CONNECTION_EVENT_DISCONNECTED"), ev


def test_establish_races_the_timeout_and_free_without_harm(two):
    """ESTABLISH takes the id's handler mutex while the connect timeout or an ep_free may be
    destroying the id: every round ends with exactly one outcome, and the kernel log stays clean
    (the debug kernel's lockdep and KASAN watch the pin that keeps the id alive)."""
    import random
    import threading
    client, server = two
    port = next_port()
    server.k.psp_create(server.ia, server.crevd, port)
    rng = random.Random(6)
    # a timeout about as long as connect-to-REP takes here (the debug kernel is much slower)
    took = []
    for _ in range(3):
        cep, sep = new_uqp(client.k, client, qp_num=0xfff), server.ep()
        t0 = time.monotonic()
        client.k.ep_connect(cep, host_addr(), port, T)
        server.k.cr_accept(wait_cr(server).cr, sep)
        expect_connect_response(client.k, client.evd, cep)
        took.append(time.monotonic() - t0)
        client.k.ep_free(cep)
        server.k.ep_free(sep)
        while server.k.try_wait(server.evd, 100_000) is not None:
            pass
    timeout_us = max(20_000, int(min(took) * 1.5e6))
    outcomes = {"ESTABLISHED": 0, "TIMED_OUT": 0, "freed": 0, "no_request": 0}
    for i in range(40):
        cep = new_uqp(client.k, client, qp_num=0x1000 + i)
        sep = server.ep()
        client.k.ep_connect(cep, host_addr(), port, timeout_us)
        crev = server.k.try_wait(server.crevd, 2 * T)
        if crev is None:      # timed out before the REQ left
            client.k.expect_event(client.evd, "TIMED_OUT")
            outcomes["no_request"] += 1
            client.k.ep_free(cep)
            server.k.ep_free(sep)
            continue
        cr = crev.cr
        if server.k.status("cr_accept", cr=cr, ep=sep) != DAT["DAT_SUCCESS"]:
            server.k.ep_free(sep)
            client.k.ep_free(cep)
            continue
        ev = client.k.try_wait(client.evd, T)
        assert ev is not None
        established = False
        if ev.number != INTERNAL:          # the timeout beat the REP
            assert ev.name == "CONNECTION_EVENT_TIMED_OUT", ev
            outcomes["TIMED_OUT"] += 1
        else:
            time.sleep(rng.random() * timeout_us / 1e6)   # before or after the timeout
            free_it = i % 4 == 3
            t = threading.Thread(target=lambda: client.k.status("ep_free", ep=cep)) if free_it else None
            if t:
                t.start()
            st = client.k.status("uqp_establish", ep=cep)
            if t:
                t.join()
                outcomes["freed"] += 1
                while client.k.try_wait(client.evd, 100_000) is not None:
                    pass    # whatever the freed EP had posted
            elif st == DAT["DAT_SUCCESS"]:
                assert client.k.expect_event(client.evd, "ESTABLISHED")
                outcomes["ESTABLISHED"] += 1
                established = True
            else:
                assert dtype(st) == DAT["DAT_INVALID_STATE"]
                client.k.expect_event(client.evd, "TIMED_OUT")
                outcomes["TIMED_OUT"] += 1
            if not free_it:
                client.k.expect_no_event(client.evd, 50_000)
        # the server's side ends one way or another; drain it
        while server.k.try_wait(server.evd, 200_000) is not None:
            pass
        if not (ev.number == INTERNAL and i % 4 == 3):
            client.k.ep_free(cep)
            if established:   # a connection freed ends as an abrupt disconnect: DISCONNECTED
                assert client.k.expect_event(client.evd, "DISCONNECTED").ep == cep
        server.k.ep_free(sep)
    print("establish race outcomes:", outcomes, "timeout", timeout_us, "us")
    assert outcomes["ESTABLISHED"] + outcomes["TIMED_OUT"] + outcomes["freed"] >= 20, outcomes
