"""UD EPs (ABI 7, KDAT_UQP_UD) over the real rdma_cm on rxe, with raw ioctls: each ep_connect is
an address exchange (a SIDR request in RDMA_PS_UDP), each ends with exactly one event carrying the
peer in the event's UD tail, and a PSP answers UD requests on UD EPs only.  The QPs are made-up
numbers, as in test_uqp_abi.py: the kernel only carries them to the peer.  Datagrams over real UD
QPs are the provider's tests (provider_check's ud: section, dtestx -u, dtestcm -u)."""
import ipaddress

import pytest

from kdat_harness.dat import (DAT, Kdat, Side, host_addr, kd, kdat_files,  # noqa: F401
                              next_port, side, wait_cr)
from kdat_harness.guest import UAPI

C = UAPI.consts
T = 5_000_000
QPS = {"INIT": C["KDAT_QPS_INIT"], "RTR": C["KDAT_QPS_RTR"], "RTS": C["KDAT_QPS_RTS"],
       "ERR": C["KDAT_QPS_ERR"]}
# enum ibv_qp_attr_mask (= the kernel's IB_QP_*)
STATE, PKEY, PORT, QKEY, SQ_PSN = 1 << 0, 1 << 4, 1 << 5, 1 << 6, 1 << 16
UDP_QKEY = 0x01234567           # rdma_cm's UDP port space (rdma_cm_ib.h)
UD, EVENT, PASSIVE, AH_VALID = (C["KDAT_UQP_UD"], C["KDAT_UD_EVENT"], C["KDAT_UD_PASSIVE"],
                                C["KDAT_UD_AH_VALID"])
SIDR_REP_PDATA = 136 - C["KDAT_PRIVATE_DATA_HEADER"]


def dtype(status):
    return status & DAT["DAT_TYPE_MASK"]


def subtype(status):
    return status & DAT["DAT_SUBTYPE_MASK"]


def new_ud(k, s, qp_num):
    r = k.call("uqp_create", ia=s.ia, connect_evd=s.evd, qp_num=qp_num, flags=UD)
    assert r.status == DAT["DAT_SUCCESS"], hex(r.status)
    return r.ep


def attr(k, ep, state, cr=0):
    return k.call("uqp_attr", ep=ep, cr=cr, qp_state=QPS[state])


def gid_of(addr):
    """The RoCE GID of an IPv4 address: IPv4-mapped IPv6."""
    return ipaddress.IPv6Address("::ffff:" + addr).packed


def check_peer(ev, qpn, port, passive, pdata):
    """The UD tail of an ESTABLISHED: the peer's QPN and Q_Key, its address, an AH back to it."""
    assert ev.name == "CONNECTION_EVENT_ESTABLISHED", ev
    assert ev.ud is not None, ev
    want = EVENT | AH_VALID | (PASSIVE if passive else 0)
    assert ev.ud.flags == want, hex(ev.ud.flags)
    assert (ev.ud.qpn, ev.ud.qkey) == (qpn, UDP_QKEY)
    assert ev.ud.addr.family == C["KDAT_AF_INET"]
    assert bytes(ev.ud.addr.addr)[:4] == ipaddress.IPv4Address(host_addr()).packed
    if not passive:     # the requester's port is rdma_cm's choice
        assert ev.ud.addr.port == port
    # loopback on one rxe device: the peer is our own address, over RoCE v2
    assert ev.ud.ah.is_global == 1 and ev.ud.ah.port_num == 1
    assert bytes(ev.ud.ah.dgid) == gid_of(host_addr())
    assert ev.ud.ah.hop_limit > 0
    assert ev.private_data == pdata


@pytest.fixture
def two(kdat_files, rdma):
    return side(kdat_files()), side(kdat_files())


def listening(two):
    """(client, server, port): the server's PSP listens on a port of its own."""
    client, server = two
    port = next_port()
    server.k.psp_create(server.ia, server.crevd, port)
    return client, server, port


def test_a_ud_ep_gets_init_rtr_rts_without_a_peer_and_the_udp_qkey(kd, rdma):
    s = side(kd)
    ep = new_ud(kd, s, 0x500)
    assert kd.ep_state(ep) == "UNCONNECTED"
    r = attr(kd, ep, "INIT")
    assert r.status == DAT["DAT_SUCCESS"]
    assert (r.attr_mask, r.qp_state, r.pkey_index, r.port_num, r.qkey) == \
        (STATE | PKEY | PORT | QKEY, QPS["INIT"], 0, 1, UDP_QKEY)
    r = attr(kd, ep, "RTR")
    assert (r.status, r.attr_mask, r.qp_state) == (DAT["DAT_SUCCESS"], STATE, QPS["RTR"])
    r = attr(kd, ep, "RTS")
    assert (r.status, r.attr_mask, r.qp_state, r.sq_psn) == \
        (DAT["DAT_SUCCESS"], STATE | SQ_PSN, QPS["RTS"], 0)
    # an RC user EP still gets no Q_Key
    rc = kd.call("uqp_create", ia=s.ia, connect_evd=s.evd, qp_num=0x501)
    r = attr(kd, rc.ep, "INIT")
    assert r.status == DAT["DAT_SUCCESS"] and not r.attr_mask & QKEY and r.qkey == 0


def test_unknown_uqp_flags_are_refused_and_a_ud_ep_is_not_dup_connected(kd, rdma):
    s = side(kd)
    r = kd.call("uqp_create", ia=s.ia, connect_evd=s.evd, qp_num=0x510, flags=UD << 1)
    assert dtype(r.status) == DAT["DAT_INVALID_PARAMETER"] and r.ep == 0
    assert subtype(r.status) == DAT["DAT_INVALID_ARG6"]
    ud = new_ud(kd, s, 0x511)
    kep = s.ep()
    r = kd.call("ep_dup_connect", ep=ud, dup_ep=kep, timeout_us=T)
    assert dtype(r.status) == DAT["DAT_MODEL_NOT_SUPPORTED"]


def test_an_exchange_gives_each_side_the_other_s_qpn_address_and_private_data(two):
    client, server, port = listening(two)
    sep, cep = new_ud(server.k, server, 0x600), new_ud(client.k, client, 0x601)
    client.k.ep_connect(cep, host_addr(), port, T, private_data=b"hello from the client")
    crev = wait_cr(server)
    assert crev.private_data == b"hello from the client"
    server.k.cr_accept(crev.cr, sep, private_data=b"welcome")
    cev = client.k.expect_event(client.evd, "ESTABLISHED")
    sev = server.k.expect_event(server.evd, "ESTABLISHED")
    assert (cev.ep, sev.ep) == (cep, sep)
    check_peer(cev, 0x600, port, False, b"welcome")
    check_peer(sev, 0x601, port, True, b"hello from the client")
    assert client.k.ep_state(cep) == server.k.ep_state(sep) == "CONNECTED"
    # the CR is over with its accept
    assert dtype(server.k.call("cr_query", cr=crev.cr).status) == DAT["DAT_INVALID_HANDLE"]
    client.k.expect_no_event(client.evd)
    server.k.expect_no_event(server.evd)


def test_four_exchanges_at_once_on_one_ep_each_end_once(two):
    """dtestx -u's shape: several ep_connects on one EP, all accepted on one EP of the peer."""
    client, server, port = listening(two)
    sep, cep = new_ud(server.k, server, 0x700), new_ud(client.k, client, 0x701)
    for i in range(4):
        client.k.ep_connect(cep, host_addr(), port, T, private_data=bytes([i]))
    seen = set()
    for _ in range(4):
        crev = wait_cr(server)
        seen.add(crev.private_data)
        server.k.cr_accept(crev.cr, sep, private_data=b"ok" + crev.private_data)
    assert seen == {bytes([i]) for i in range(4)}
    answers, asked = set(), set()
    for _ in range(4):
        ev = client.k.expect_event(client.evd, "ESTABLISHED")
        check_peer(ev, 0x700, port, False, ev.private_data)
        answers.add(ev.private_data)
        ev = server.k.expect_event(server.evd, "ESTABLISHED")
        check_peer(ev, 0x701, port, True, ev.private_data)
        asked.add(ev.private_data)
    assert answers == {b"ok" + bytes([i]) for i in range(4)}
    assert asked == {bytes([i]) for i in range(4)}
    client.k.expect_no_event(client.evd)
    # a CONNECTED UD EP still exchanges
    client.k.ep_connect(cep, host_addr(), port, T)
    server.k.cr_accept(wait_cr(server).cr, sep)
    check_peer(client.k.expect_event(client.evd, "ESTABLISHED"), 0x700, port, False, b"")


def test_ud_requests_need_ud_eps_and_rc_requests_rc_eps(two):
    client, server, port = listening(two)
    sud = new_ud(server.k, server, 0x800)
    src = server.ep()
    cud = new_ud(client.k, client, 0x801)
    client.k.ep_connect(cud, host_addr(), port, T)
    crev = wait_cr(server)
    r = server.k.call("cr_accept", cr=crev.cr, ep=src)
    assert (dtype(r.status), subtype(r.status)) == (DAT["DAT_INVALID_PARAMETER"],
                                                    DAT["DAT_INVALID_ARG2"])
    r = server.k.call("cr_accept", cr=crev.cr, ep=0)
    assert (dtype(r.status), subtype(r.status)) == (DAT["DAT_INVALID_PARAMETER"],
                                                    DAT["DAT_INVALID_ARG2"])
    # ... nor the attributes an RC user QP would take to accept it (a SIDR request has no path)
    ruqp = server.k.call("uqp_create", ia=server.ia, connect_evd=server.evd, qp_num=0x802).ep
    for state in ("RTR", "RTS"):
        r = attr(server.k, ruqp, state, cr=crev.cr)
        assert (dtype(r.status), subtype(r.status), r.attr_mask) == \
            (DAT["DAT_INVALID_PARAMETER"], DAT["DAT_INVALID_ARG2"], 0), state
    # and a UD EP takes no CR in UQP_ATTR at all
    r = attr(server.k, sud, "RTR", cr=crev.cr)
    assert (dtype(r.status), subtype(r.status)) == (DAT["DAT_INVALID_PARAMETER"],
                                                    DAT["DAT_INVALID_ARG2"])
    # too much private data for a SIDR reply
    r = server.k.call("cr_accept", cr=crev.cr, ep=sud, private_data=bytes(SIDR_REP_PDATA + 1))
    assert (dtype(r.status), subtype(r.status)) == (DAT["DAT_INVALID_PARAMETER"],
                                                    DAT["DAT_INVALID_ARG4"])
    # refused calls left the CR as it was: it is still accepted, with as much as fits
    server.k.cr_accept(crev.cr, sud, private_data=bytes(range(SIDR_REP_PDATA)))
    ev = client.k.expect_event(client.evd, "ESTABLISHED")
    assert ev.private_data == bytes(range(SIDR_REP_PDATA))
    server.k.expect_event(server.evd, "ESTABLISHED")
    # an RC request refuses a UD EP, then takes an RC one
    cep = client.ep()
    client.k.ep_connect(cep, host_addr(), port, T)
    crev = wait_cr(server)
    r = server.k.call("cr_accept", cr=crev.cr, ep=sud)
    assert (dtype(r.status), subtype(r.status)) == (DAT["DAT_INVALID_PARAMETER"],
                                                    DAT["DAT_INVALID_ARG2"])
    server.k.cr_accept(crev.cr, src)
    cev = client.k.expect_event(client.evd, "ESTABLISHED")
    assert cev.ud is None and cev.ep == cep


def test_a_reject_is_peer_rejected_with_its_data_and_leaves_the_ep_as_it_was(two):
    client, server, port = listening(two)
    cep = new_ud(client.k, client, 0x901)
    client.k.ep_connect(cep, host_addr(), port, T)
    server.k.cr_reject(wait_cr(server).cr, private_data=b"no thanks")
    ev = client.k.expect_event(client.evd, "PEER_REJECTED")
    assert ev.ud is not None and ev.ud.flags == EVENT and ev.private_data == b"no thanks"
    assert ev.ud.addr.port == port
    assert client.k.ep_state(cep) == "UNCONNECTED"
    client.k.expect_no_event(client.evd)


def test_no_listener_is_unreachable(kd, rdma):
    s = side(kd)
    cep = new_ud(kd, s, 0xa01)
    kd.ep_connect(cep, host_addr(), next_port(), T)
    ev = kd.expect_event(s.evd, "UNREACHABLE", 10 * T)
    assert ev.ud is not None and ev.ud.flags == EVENT and ev.ud.qpn == 0
    assert kd.ep_state(cep) == "UNCONNECTED"
    kd.expect_no_event(s.evd)


def test_an_unanswered_exchange_times_out_once_and_a_late_accept_still_answers(two):
    client, server, port = listening(two)
    sep, cep = new_ud(server.k, server, 0xb00), new_ud(client.k, client, 0xb01)
    client.k.ep_connect(cep, host_addr(), port, 300_000)
    crev = wait_cr(server)
    ev = client.k.expect_event(client.evd, "TIMED_OUT")
    assert ev.ud is not None and ev.ud.flags == EVENT
    assert client.k.ep_state(cep) == "UNCONNECTED"
    # the passive side does not know: its accept answers a requester that gave up
    server.k.cr_accept(crev.cr, sep)
    check_peer(server.k.expect_event(server.evd, "ESTABLISHED"), 0xb01, port, True, b"")
    client.k.expect_no_event(client.evd, 1_000_000)


def test_a_ud_ep_disconnects_at_once_and_resets_to_exchange_again(two):
    client, server, port = listening(two)
    sep, cep = new_ud(server.k, server, 0xc00), new_ud(client.k, client, 0xc01)
    client.k.ep_connect(cep, host_addr(), port, T)
    server.k.cr_accept(wait_cr(server).cr, sep)
    client.k.expect_event(client.evd, "ESTABLISHED")
    server.k.expect_event(server.evd, "ESTABLISHED")
    # graceful has nothing to drain: DISCONNECTED now, and the peer hears nothing
    client.k.ep_disconnect(cep, graceful=True)
    ev = client.k.expect_event(client.evd, "DISCONNECTED")
    assert ev.ud is None
    assert client.k.ep_state(cep) == "DISCONNECTED"
    server.k.expect_no_event(server.evd)
    assert dtype(attr(client.k, cep, "INIT").status) == DAT["DAT_INVALID_STATE"]
    assert dtype(client.k.call("ep_connect", ep=cep, remote_addr=None, conn_qual=port,
                               timeout_us=T).status) != DAT["DAT_SUCCESS"]
    client.k.ep_reset(cep)
    assert client.k.ep_state(cep) == "UNCONNECTED"
    assert attr(client.k, cep, "INIT").qkey == UDP_QKEY
    client.k.ep_connect(cep, host_addr(), port, T)
    server.k.cr_accept(wait_cr(server).cr, sep)
    check_peer(client.k.expect_event(client.evd, "ESTABLISHED"), 0xc00, port, False, b"")


def test_freeing_or_resetting_an_ep_ends_its_exchanges_without_an_event(two):
    """Exchanges still waiting for an answer when their EP goes (or is reset) end silently:
    their ids are destroyed, and a late answer reaches nothing."""
    client, server, port = listening(two)
    sep = new_ud(server.k, server, 0xd00)
    gone = new_ud(client.k, client, 0xd01)
    for _ in range(3):
        client.k.ep_connect(gone, host_addr(), port, T)
    crs = [wait_cr(server).cr for _ in range(3)]
    client.k.ep_free(gone)
    # ... and a disconnected EP's reset, with one still waiting
    cep = new_ud(client.k, client, 0xd02)
    client.k.ep_connect(cep, host_addr(), port, T)
    crs.append(wait_cr(server).cr)
    client.k.ep_connect(cep, host_addr(), port, T)
    last = wait_cr(server).cr
    server.k.cr_accept(last, sep)
    client.k.expect_event(client.evd, "ESTABLISHED")
    client.k.ep_disconnect(cep)
    client.k.expect_event(client.evd, "DISCONNECTED")
    client.k.ep_reset(cep)
    for cr in crs:
        server.k.cr_accept(cr, sep)
    for _ in range(len(crs) + 1):
        server.k.expect_event(server.evd, "ESTABLISHED")
    client.k.expect_no_event(client.evd, 1_000_000)
    assert client.k.ep_state(cep) == "UNCONNECTED"


def test_the_ud_tail_reaches_a_ring_mode_evd(kdat_files, rdma):
    ck, sk = kdat_files(), kdat_files()
    server = side(sk)
    ia = ck.ia_open(host_addr())
    evd = ck.evd_create(ia, 16, Kdat.EVD_CONNECTION, ring=True)
    client = Side(ck, ia, evd, 0)
    port = next_port()
    sk.psp_create(server.ia, server.crevd, port)
    sep = new_ud(sk, server, 0xe00)
    cep = new_ud(ck, client, 0xe01)
    with ck.evd_ring(evd) as ring:
        ck.ep_connect(cep, host_addr(), port, T, private_data=b"r")
        sk.cr_accept(wait_cr(server).cr, sep, private_data=b"R")
        r = ring.wait(1, T)
        assert r.status == DAT["DAT_SUCCESS"] and r.available == 1
        (ev,) = ring.take()
    assert ev.ep == cep
    check_peer(ev, 0xe00, port, False, b"R")
