"""Interface adapters and event dispatchers through /dev/kdat: open, query, wait, dequeue, free."""
import json
import subprocess
import time

import pytest

from kdat_harness.dat import (ACCEPT_PDATA_MAX, CONNECT_PDATA_MAX, REJECT_PDATA_MAX, DAT, CLASS_ERROR, Kdat, expect_dat_error, host_addr, host_netdev,
                              kd, next_port, side, wait_cr, wait_state)  # noqa: F401  (fixture)
from kdat_harness.guest import UAPI
from kdat_harness.timing import assert_prompt, judge_on_time

C = UAPI.consts


@pytest.mark.parametrize("how", ["netdev", "ip"])
def test_ia_open_by_netdev_or_ip_and_query(kd, rdma, how):
    name = host_netdev() if how == "netdev" else host_addr()
    ia = kd.ia_open(name)
    assert ia != 0
    q = kd.ia_query(ia)
    assert q.device_name.startswith("rxe"), q.device_name
    assert q.netdev_name == host_netdev()
    assert (q.local_addr.family, q.local_addr.ip) == (C["KDAT_AF_INET"], host_addr())
    # IB CM over RoCE: REQ 92 bytes minus rdma_cm's 36-byte header, REP 196, REJ 148, each
    # minus kdat's length header.
    assert q.max_connect_private_data == CONNECT_PDATA_MAX == 52
    assert q.max_accept_private_data == ACCEPT_PDATA_MAX == 192
    assert q.max_reject_private_data == REJECT_PDATA_MAX == 144
    assert q.max_rdma_read_in >= 1
    assert q.max_rdma_read_out >= 1
    assert q.max_eps >= 1 and q.max_evd_qlen >= 1
    kd.ia_close(ia)
    expect_dat_error("INVALID_HANDLE", kd.ia_query, ia)


def test_two_ias_have_distinct_handles(kd, rdma):
    a = kd.ia_open(host_netdev())
    b = kd.ia_open(host_addr())
    assert a != b and 0 not in (a, b)


@pytest.mark.parametrize("name", ["nosuchdev0", "203.0.113.77", "lo"])
def test_ia_open_unknown_name_is_provider_not_found(kd, rdma, name):
    r = kd.call("ia_open", name=name)
    assert r.status & DAT["DAT_TYPE_MASK"] == DAT["DAT_PROVIDER_NOT_FOUND"], hex(r.status)
    assert r.status & CLASS_ERROR, "an error DAT_RETURN carries DAT_CLASS_ERROR (dat_error.h)"
    assert r.ia == 0


def test_ia_open_name_without_nul_is_rejected(kd, rdma):
    s = Kdat.new("ia_open")
    for i in range(len(s.name)):
        s.name[i] = b"k"
    r = kd.ioctl("ia_open", s)
    assert r.status != DAT["DAT_SUCCESS"]


def test_ia_close_graceful_refuses_while_it_owns_objects(kd, rdma):
    ia = kd.ia_open(host_addr())
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION)
    expect_dat_error("INVALID_STATE", kd.ia_close, ia, graceful=True)
    kd.ia_query(ia)
    kd.evd_free(evd)
    kd.ia_close(ia, graceful=True)
    expect_dat_error("INVALID_HANDLE", kd.ia_query, ia)


def test_ia_close_abrupt_frees_what_it_owns(kd, rdma):
    ia = kd.ia_open(host_addr())
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION)
    ep = kd.ep_create(ia, evd)
    kd.ia_close(ia)
    expect_dat_error("INVALID_HANDLE", kd.ep_query, ep)
    expect_dat_error("INVALID_HANDLE", kd.evd_dequeue, evd)


def test_an_ep_may_take_another_ia_s_connect_evd_through_the_same_file(kd, rdma):
    """DAT lets one EVD take the connection events of EPs on several IAs (dapltest -T L -w makes
    every EP's connect EVD IA #1's).  Through one file an EP's connect EVD may be another IA's;
    its DTO EVDs may not be.  When the EVD's IA closes first (abruptly), the EP's later
    connection events are dropped: the EP still disconnects and frees, and nothing is left
    behind (the module must unload after the run)."""
    a, b = side(kd), side(kd)
    dto_a = kd.evd_create(a.ia, 4, Kdat.EVD_DTO)
    expect_dat_error("INVALID_HANDLE", kd.ep_create, b.ia, a.evd, request_evd=dto_a,
                     subtype="DAT_INVALID_HANDLE_EVD_REQUEST")
    ep = kd.ep_create(b.ia, a.evd)
    assert kd.ep_query(ep).connect_evd == a.evd
    port = next_port()
    kd.psp_create(b.ia, b.crevd, port)
    sep = b.ep()
    kd.ep_connect(ep, host_addr(), port, 5_000_000)
    kd.cr_accept(wait_cr(b).cr, sep)
    ev = kd.expect_event(a.evd, "ESTABLISHED")
    assert ev.ep == ep and ev.evd == a.evd
    kd.expect_event(b.evd, "ESTABLISHED")
    kd.expect_no_event(b.evd, 100_000)
    kd.ia_close(a.ia)   # abrupt: its EVDs go, the EP of b stays
    expect_dat_error("INVALID_HANDLE", kd.evd_dequeue, a.evd)
    assert kd.ep_state(ep) == "CONNECTED"
    kd.ep_disconnect(ep)
    kd.expect_event(b.evd, "DISCONNECTED")    # the peer's, on b's own EVD
    assert wait_state(kd, ep, "DISCONNECTED") == "DISCONNECTED"
    kd.expect_no_event(b.evd, 100_000)        # the EP's own DISCONNECTED went nowhere
    kd.ep_free(ep)


def test_evd_create_bad_qlen_and_flags(kd, rdma):
    ia = kd.ia_open(host_addr())
    maxq = kd.ia_query(ia).max_evd_qlen
    expect_dat_error("INVALID_PARAMETER", kd.evd_create, ia, 0, Kdat.EVD_ALL)
    if maxq < 0xFFFFFFFF:
        expect_dat_error("INVALID_PARAMETER", kd.evd_create, ia, maxq + 1, Kdat.EVD_ALL)
    expect_dat_error("INVALID_PARAMETER", kd.evd_create, ia, 4, 1 << 30)


def test_evd_wait_on_empty_evd_times_out_after_roughly_the_timeout(kd, rdma):
    ia = kd.ia_open(host_addr())
    evd = kd.evd_create(ia, 4)
    for timeout_us in (100_000, 1_000_000):
        def attempt(start):
            nonlocal e
            t0 = time.monotonic()
            start()
            e = expect_dat_error("TIMEOUT_EXPIRED", kd.evd_wait, evd, timeout_us)
            return time.monotonic() - t0

        e = None
        judge_on_time(attempt, timeout_us / 1e6, what="evd_wait's timeout")
    assert e.status & CLASS_ERROR


def test_evd_wait_threshold_zero_is_invalid_parameter(kd, rdma):
    ia = kd.ia_open(host_addr())
    evd = kd.evd_create(ia, 4)
    t0 = time.monotonic()
    expect_dat_error("INVALID_PARAMETER", kd.evd_wait, evd, 60_000_000, threshold=0)
    assert_prompt(time.monotonic() - t0, 60, "threshold 0")


def test_evd_dequeue_empty_is_queue_empty(kd, rdma):
    ia = kd.ia_open(host_addr())
    evd = kd.evd_create(ia, 4)
    expect_dat_error("QUEUE_EMPTY", kd.evd_dequeue, evd)


def test_evd_free_while_an_ep_uses_it_is_invalid_state(kd, rdma):
    ia = kd.ia_open(host_addr())
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION)
    ep = kd.ep_create(ia, evd)
    expect_dat_error("INVALID_STATE", kd.evd_free, evd)
    expect_dat_error("QUEUE_EMPTY", kd.evd_dequeue, evd)  # still alive
    kd.ep_free(ep)
    kd.evd_free(evd)
    expect_dat_error("INVALID_HANDLE", kd.evd_dequeue, evd)


def test_evd_free_while_a_psp_uses_it_is_invalid_state(kd, rdma):
    from kdat_harness.dat import next_port
    ia = kd.ia_open(host_addr())
    evd = kd.evd_create(ia, 4, Kdat.EVD_CR)
    psp = kd.psp_create(ia, evd, next_port())
    expect_dat_error("INVALID_STATE", kd.evd_free, evd)
    kd.psp_free(psp)
    kd.evd_free(evd)


def test_ep_create_requires_a_connection_evd(kd, rdma):
    ia = kd.ia_open(host_addr())
    crevd = kd.evd_create(ia, 4, Kdat.EVD_CR)
    r = kd.call("ep_create", ia=ia, connect_evd=0)
    assert r.status & DAT["DAT_TYPE_MASK"] in (DAT["DAT_INVALID_HANDLE"], DAT["DAT_INVALID_PARAMETER"])
    r = kd.call("ep_create", ia=ia, connect_evd=crevd)
    assert r.status & DAT["DAT_TYPE_MASK"] in (DAT["DAT_INVALID_HANDLE"], DAT["DAT_INVALID_PARAMETER"])


def test_ep_create_query_defaults_and_modify(kd, rdma):
    ia = kd.ia_open(host_addr())
    q = kd.ia_query(ia)
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION)
    ep = kd.ep_create(ia, evd)
    e = kd.ep_query(ep)
    assert e.state == "UNCONNECTED"
    assert e.connect_evd == evd and e.request_evd == 0 and e.recv_evd == 0
    assert 0 <= e.attr.max_rdma_read_in <= q.max_rdma_read_in
    assert 0 <= e.attr.max_rdma_read_out <= q.max_rdma_read_out
    kd.ep_modify(ep, max_rdma_read_in=1, max_rdma_read_out=1, retry_count=5)
    e = kd.ep_query(ep)
    assert (e.attr.max_rdma_read_in, e.attr.max_rdma_read_out, e.attr.retry_count) == (1, 1, 5)
    assert e.state == "UNCONNECTED"
    kd.ep_modify(ep, mask=C["KDAT_EP_ATTR_RETRY_COUNT"], retry_count=3, max_rdma_read_in=0)
    e = kd.ep_query(ep)
    assert (e.attr.max_rdma_read_in, e.attr.retry_count) == (1, 3), "mask must limit the change"


def test_ep_rdma_read_limits_above_the_device_are_invalid_parameter(kd, rdma):
    ia = kd.ia_open(host_addr())
    q = kd.ia_query(ia)
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION)
    expect_dat_error("INVALID_PARAMETER", kd.ep_create, ia, evd, max_rdma_read_in=q.max_rdma_read_in + 1)
    expect_dat_error("INVALID_PARAMETER", kd.ep_create, ia, evd, max_rdma_read_out=q.max_rdma_read_out + 1)
    ep = kd.ep_create(ia, evd, max_rdma_read_in=q.max_rdma_read_in, max_rdma_read_out=q.max_rdma_read_out)
    expect_dat_error("INVALID_PARAMETER", kd.ep_modify, ep, max_rdma_read_in=q.max_rdma_read_in + 1)
    expect_dat_error("INVALID_PARAMETER", kd.ep_modify, ep, max_rdma_read_out=q.max_rdma_read_out + 1)
    a = kd.ep_query(ep).attr
    assert (a.max_rdma_read_in, a.max_rdma_read_out) == (q.max_rdma_read_in, q.max_rdma_read_out)


def test_ep_attr_ranges(kd, rdma):
    ia = kd.ia_open(host_addr())
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION)
    expect_dat_error("INVALID_PARAMETER", kd.ep_create, ia, evd, retry_count=8)
    expect_dat_error("INVALID_PARAMETER", kd.ep_create, ia, evd, rnr_retry_count=8)
    expect_dat_error("INVALID_PARAMETER", kd.ep_create, ia, evd, flow_control=2)
    ep = kd.ep_create(ia, evd)
    expect_dat_error("INVALID_PARAMETER", kd.ep_modify, ep, mask=1 << 20)


def test_psp_create_query_and_conn_qual_in_use(kd, rdma):
    from kdat_harness.dat import next_port
    ia = kd.ia_open(host_addr())
    evd = kd.evd_create(ia, 4, Kdat.EVD_CR)
    port = next_port()
    psp = kd.psp_create(ia, evd, port, provider=True)
    q = kd.psp_query(psp)
    assert (q.ia, q.conn_qual, q.evd, q.flags) == (ia, port, evd, C["KDAT_PSP_PROVIDER"])
    expect_dat_error("CONN_QUAL_IN_USE", kd.psp_create, ia, evd, port)
    expect_dat_error("INVALID_PARAMETER", kd.psp_create, ia, evd, 0)
    expect_dat_error("INVALID_PARAMETER", kd.psp_create, ia, evd, 65536)
    expect_dat_error("INVALID_PARAMETER", kd.psp_create, ia, evd, next_port(), flags=2)
    kd.psp_free(psp)
    expect_dat_error("INVALID_HANDLE", kd.psp_query, psp)
    kd.psp_free(kd.psp_create(ia, evd, port))  # the port is free again


def _kdat_cqs(before=()):
    """kdat's CQs as iproute2 lists them (a kernel CQ: comm is the module that made it, no pid),
    but those numbered in before."""
    out = subprocess.run(["rdma", "-j", "res", "show", "cq"], capture_output=True, text=True,
                         check=True).stdout
    return [c for c in json.loads(out)
            if c.get("comm") == "kdat" and "pid" not in c and c["cqn"] not in before]


def _comp_vectors():
    """rxe gives its device one completion vector per possible CPU."""
    with open("/sys/devices/system/cpu/possible") as f:
        spans = [r.partition("-") for r in f.read().strip().split(",")]
    return sum(int(b or a) - int(a) + 1 for a, _, b in spans)


def test_an_ias_eps_share_cqs_that_go_with_their_last_ep(kd, rdma):
    """An IA's kernel QPs share CQs (kmod/kdat_cq.c): its EPs take the device's completion vectors
    in turn, a CQ of 1024 entries serves 30 EPs of the default depth (16 + 16 + 2 entries each) on
    one vector, and a CQ is freed with its last EP, not kept until the IA or the device goes."""
    others = {c["cqn"] for c in _kdat_cqs()}  # another test's kernel consumer, if any
    vectors = _comp_vectors()

    def users():
        """EPs per CQ: ib_core counts each QP twice, as the user of its send and receive CQ."""
        cqs = _kdat_cqs(others)
        assert all(c["users"] % 2 == 0 for c in cqs), cqs
        return sorted(c["users"] // 2 for c in cqs)

    def expected(n):
        """n EPs made one after another: each vector's share of them, 30 to a CQ."""
        per_cq = []
        for v in range(vectors):
            on_v = len(range(v, n, vectors))
            per_cq += [30] * (on_v // 30) + ([on_v % 30] if on_v % 30 else [])
        return sorted(per_cq)

    ia = kd.ia_open(host_addr())
    evd = kd.evd_create(ia, 16, C["KDAT_EVD_CONNECTION"])
    eps = [kd.ep_create(ia, evd) for _ in range(31)]
    assert len(expected(31)) < 31  # this guest has fewer than 31 vCPUs: EPs share
    assert users() == expected(31), _kdat_cqs(others)
    assert all(c["cqe"] >= 1024 for c in _kdat_cqs(others))
    for ep in eps[1:]:
        kd.ep_free(ep)
    assert users() == [1]
    kd.ep_free(eps[0])
    assert users() == []
    # and an IA closed with EPs on it leaves none either
    for _ in range(3):
        kd.ep_create(ia, evd)
    assert users() == expected(3)
    kd.ia_close(ia)
    assert users() == []
