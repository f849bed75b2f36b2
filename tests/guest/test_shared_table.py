"""The shared object table (include/kdat/uapi/kdat.h, "Shared object table (mmap of /dev/kdat)"): read
from outside any library, through a read-only mapping of /dev/kdat and the header's seqcount
protocol.  Every record must say what the ioctls say about the same object."""
import ctypes
import faulthandler
import os
import signal
import time

import pytest

from kdat_harness import guest
from kdat_harness.dat import (DAT, EVENT_VALUE, STATE_VALUE, Kdat, addr_from, client,  # noqa: F401
                              connect_pair, expect_dat_error, host_addr, ipv4, kd, kdat_files,
                              next_port, server, side, wait_cr)
from kdat_harness.guest import UAPI, errno
from kdat_harness.shared import (MAP_PRIVATE, MAP_SHARED, PAGE, PROT_READ, PROT_WRITE, Mapping,
                                 ObjectTable, StaleRecord, handle_generation, handle_slot)

C = UAPI.consts
T = 5_000_000
MAP_SIZE = C["KDAT_TABLE_MAP_SIZE"]
REC = {n[len("KDAT_REC_"):]: v for n, v in C.items() if n.startswith("KDAT_REC_")}
KERNEL_POINTER = 0xFFFF800000000000


def boottime_ns():
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


def my_comm():
    with open("/proc/self/comm") as f:
        return f.read().strip()[:15]


def ev(name):
    return EVENT_VALUE[name if name in EVENT_VALUE else "CONNECTION_EVENT_" + name]


def table_id(k):
    with k.table(PAGE) as t:
        return t.header().id


def assert_freed(t, handle, rec_before):
    """The slot of a freed handle: handle 0, type FREE, the generation kept."""
    with pytest.raises(StaleRecord):
        t.record(handle)
    rec = t.slot(handle_slot(handle))
    assert rec.handle == 0, f"slot {handle_slot(handle)} still holds {rec.handle:#x}"
    assert rec.type == C["KDAT_REC_FREE"]
    assert rec.generation == rec_before.generation == handle_generation(handle)


def assert_times(rec, since_ns):
    now = boottime_ns()
    assert since_ns <= rec.created_ns <= rec.changed_ns <= now, (since_ns, rec.created_ns,
                                                                  rec.changed_ns, now)


# ---- the header --------------------------------------------------------------------------------

def test_header_names_the_layout_and_the_opener(kdat_module, kernel_log):
    before = boottime_ns()
    with Kdat() as k, k.table() as t:
        h = t.header()
        assert h.magic == C["KDAT_TABLE_MAGIC"]
        assert h.layout == C["KDAT_TABLE_LAYOUT"]
        assert h.header_size == C["KDAT_TABLE_HEADER_SIZE"]
        assert h.record_size == C["KDAT_TABLE_RECORD_SIZE"] == ctypes.sizeof(UAPI.structs["kdat_record"])
        assert h.max_slots == C["KDAT_TABLE_MAX_SLOTS"]
        assert h.pid == os.getpid()
        assert h.uid == os.geteuid()
        assert h.comm.decode() == my_comm()
        assert h.flags == 0, "a file's table is neither KERNEL nor CLOSED"
        assert h.high_water == 0 and h.live == 0, "a new file owns nothing"
        assert before <= h.created_ns <= boottime_ns()


def test_header_counts_live_objects_and_high_water(kd, rdma):
    with kd.table() as t:
        u0 = t.header().updates
        ia = kd.ia_open(host_addr())
        evds = [kd.evd_create(ia, 4, Kdat.EVD_CONNECTION) for _ in range(3)]
        ep = kd.ep_create(ia, evds[0])
        handles = [ia, *evds, ep]
        h = t.header()
        assert h.live == 5
        assert h.high_water == max(handle_slot(x) for x in handles)
        assert h.updates >= u0 + 5, "every record write counts"
        kd.ep_free(ep)
        kd.evd_free(evds[2])
        h2 = t.header()
        assert h2.live == 3
        assert h2.high_water == h.high_water, "high_water never goes down"
        assert h2.updates > h.updates
        assert len(t.live_records()) == 3


# ---- records of each object type ---------------------------------------------------------------

def test_handles_name_distinct_slots_with_their_generation(kd, rdma):
    ia = kd.ia_open(host_addr())
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION | Kdat.EVD_CR)
    ep = kd.ep_create(ia, evd)
    psp = kd.psp_create(ia, evd, next_port())
    handles = [ia, evd, ep, psp]
    slots = [handle_slot(h) for h in handles]
    assert len(set(slots)) == 4 and 0 not in slots
    assert {handle_slot(h) for h in handles} == {UAPI.macro("KDAT_HANDLE_SLOT", h) for h in handles}
    with kd.table() as t:
        for h in handles:
            rec = t.record(h)
            assert rec.handle == h
            assert rec.generation == handle_generation(h) == UAPI.macro("KDAT_HANDLE_GENERATION", h)
            assert rec.seq % 2 == 0


def test_ia_evd_ep_psp_rsp_records_after_create_and_after_free(kd, rdma):
    before = boottime_ns()
    ia = kd.ia_open(host_addr())
    evd = kd.evd_create(ia, 8, Kdat.EVD_CONNECTION)
    crevd = kd.evd_create(ia, 8, Kdat.EVD_CR | Kdat.EVD_CONNECTION)
    reqevd = kd.evd_create(ia, 8, Kdat.EVD_DTO)
    ep = kd.ep_create(ia, evd, request_evd=reqevd, max_rdma_read_in=3, max_rdma_read_out=2)
    rsp_ep = kd.ep_create(ia, evd)
    port, rport = next_port(), next_port()
    psp = kd.psp_create(ia, crevd, port, provider=True)
    rsp = kd.rsp_create(ia, rsp_ep, rport, crevd)
    iaq = kd.ia_query(ia)
    with kd.table() as t:
        r = t.record(ia)
        assert r.type == REC["IA"] and r.state == C["KDAT_IA_UP"]
        assert (r.owner, r.link, r.link2) == (0, 0, 0)
        assert addr_from(r.local_addr) == iaq.local_addr
        assert_times(r, before)

        for e in (evd, crevd, reqevd):
            r = t.record(e)
            assert r.type == REC["EVD"] and r.owner == ia and r.link == 0
            assert not r.flags & C["KDAT_RECF_RING"]

        q = kd.ep_query(ep)
        r = t.record(ep)
        assert r.type == REC["EP"]
        assert r.state == STATE_VALUE["UNCONNECTED"] == q.state_value
        assert r.owner == ia and r.link == evd and r.link2 == reqevd
        assert r.transitions == q.transitions
        assert (r.ird, r.ord) == (3, 2) == (q.attr.max_rdma_read_in, q.attr.max_rdma_read_out)
        assert r.flags & (C["KDAT_RECF_ACTIVE"] | C["KDAT_RECF_PROVIDER"]) == 0
        assert r.last_event == 0 and r.events == 0
        assert_times(r, before)

        r = t.record(rsp_ep)
        assert r.state == STATE_VALUE["RESERVED"] == kd.ep_query(rsp_ep).state_value

        r = t.record(psp)
        assert r.type == REC["PSP"] and r.state == C["KDAT_SP_LISTENING"]
        assert r.owner == ia and r.link == crevd and r.link2 == 0 and r.conn_qual == port
        assert r.flags & C["KDAT_RECF_PROVIDER"]
        la = addr_from(r.local_addr)
        assert (la.family, la.ip) == (iaq.local_addr.family, iaq.local_addr.ip)

        r = t.record(rsp)
        assert r.type == REC["RSP"] and r.state == C["KDAT_SP_LISTENING"]
        # "EVD (RSP: EP)": the parenthesis is link2, as the CR row's "SP (EP named)" is
        assert r.owner == ia and r.link == crevd and r.link2 == rsp_ep and r.conn_qual == rport
        assert not r.flags & C["KDAT_RECF_PROVIDER"]

        saved = {h: t.record(h) for h in (psp, rsp, ep, rsp_ep, evd, crevd, reqevd, ia)}
        kd.psp_free(psp)
        kd.rsp_free(rsp)
        kd.ep_free(ep)
        kd.ep_free(rsp_ep)
        for e in (evd, crevd, reqevd):
            kd.evd_free(e)
        kd.ia_close(ia)
        for h, rec in saved.items():
            assert_freed(t, h, rec)
        assert t.header().live == 0


def test_reusing_a_slot_bumps_the_generation_and_the_old_handle_is_invalid(kd, rdma):
    ia = kd.ia_open(host_addr())
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION)
    old = kd.ep_create(ia, evd)
    kd.ep_free(old)
    seen = [old]
    new = None
    for _ in range(64):      # slots are not promised lowest-first: look for the reuse
        h = kd.ep_create(ia, evd)
        if handle_slot(h) == handle_slot(old):
            new = h
            break
        seen.append(h)
    assert new is not None, "the freed slot was never reused"
    assert new != old
    assert handle_generation(new) != handle_generation(old)
    with kd.table() as t:
        assert t.record(new).generation == handle_generation(new)
        with pytest.raises(StaleRecord):
            t.record(old)
    expect_dat_error("INVALID_HANDLE", kd.ep_query, old)
    expect_dat_error("INVALID_HANDLE", kd.ep_free, old)
    expect_dat_error("INVALID_HANDLE", kd.ep_connect, old, host_addr(), next_port(), T)
    assert kd.ep_state(new) == "UNCONNECTED", "the stale handle's calls touched the new EP"


def test_the_evd_record_holds_its_stream_flags_and_ring_flag(client):
    """An EVD's record: state = the KDAT_EVD_* streams it was created with; RECF_RING once it
    has a ring (the queue length is not mirrored: DTO posts do not take the owner's lock)."""
    k = client.k
    evd = k.evd_create(client.ia, 8, C["KDAT_EVD_CONNECTION"] | C["KDAT_EVD_CR"], ring=True)
    with k.table() as t:
        r = t.record(evd)
        assert r.state == C["KDAT_EVD_CONNECTION"] | C["KDAT_EVD_CR"]
        assert r.owner == client.ia
        assert not r.flags & C["KDAT_RECF_RING"]
        ring = k.evd_ring(evd)
        try:
            assert t.record(evd).flags & C["KDAT_RECF_RING"]
        finally:
            ring.close()


# ---- the EP record follows the connection -------------------------------------------------------

def _check_ep(t, k, ep, last_event, events, since):
    q = k.ep_query(ep)
    r = t.record(ep)
    assert r.state == q.state_value, (r.state, q.state)
    assert r.transitions == q.transitions
    assert r.last_event == last_event, (hex(r.last_event), hex(last_event))
    assert r.events == events
    assert addr_from(r.local_addr) == q.local_addr
    assert addr_from(r.remote_addr) == q.remote_addr
    assert_times(r, since)
    return q, r


def test_ep_records_follow_connect_and_disconnect_on_both_sides(client, server):
    since = boottime_ns()
    with client.k.table() as ct, server.k.table() as st:
        p = connect_pair(client, server, client_pd=b"hello",
                         client_attrs={"max_rdma_read_in": 4, "max_rdma_read_out": 4},
                         server_attrs={"max_rdma_read_in": 2, "max_rdma_read_out": 2})
        est = ev("ESTABLISHED")
        cq, cr = _check_ep(ct, client.k, p.cep, est, 1, since)
        sq, sr = _check_ep(st, server.k, p.sep, est, 1, since)
        for q, r in ((cq, cr), (sq, sr)):
            assert q.state == "CONNECTED"
            assert (r.ird, r.ord) == (q.attr.max_rdma_read_in, q.attr.max_rdma_read_out)
        assert cr.flags & C["KDAT_RECF_ACTIVE"] and not sr.flags & C["KDAT_RECF_ACTIVE"]
        assert cr.conn_qual == p.port == cq.remote_addr.port
        # a passive EP's remote qualifier: the requester's port (ep_query's remote port), or
        # none (kdat treats that port as no service, see dup_connect)
        assert sr.conn_qual in (0, sq.remote_addr.port)
        assert addr_from(cr.remote_addr).ip == host_addr()
        assert addr_from(sr.remote_addr).port == addr_from(cr.local_addr).port
        assert cr.owner == client.ia and cr.link == client.evd
        assert sr.owner == server.ia and sr.link == server.evd
        changed = (cr.changed_ns, sr.changed_ns)

        client.k.ep_disconnect(p.cep)
        client.k.expect_event(client.evd, "DISCONNECTED")
        server.k.expect_event(server.evd, "DISCONNECTED")
        dis = ev("DISCONNECTED")
        cq, cr = _check_ep(ct, client.k, p.cep, dis, 2, since)
        sq, sr = _check_ep(st, server.k, p.sep, dis, 2, since)
        assert cq.state == sq.state == "DISCONNECTED"
        assert cr.changed_ns > changed[0] and sr.changed_ns > changed[1]


def test_ep_record_while_the_connect_is_pending(client, server):
    port = next_port()
    server.k.psp_create(server.ia, server.crevd, port)
    cep = client.ep()
    with client.k.table() as t:
        client.k.ep_connect(cep, host_addr(), port, T)
        r = t.record(cep)
        assert r.state in (STATE_VALUE["ACTIVE_CONNECTION_PENDING"],), r.state
        assert r.flags & C["KDAT_RECF_ACTIVE"]
        assert r.conn_qual == port
        assert r.last_event == 0 and r.events == 0
        crev = wait_cr(server)
        server.k.cr_reject(crev.cr)
        client.k.expect_event(client.evd, "PEER_REJECTED")
        r = t.record(cep)
        assert r.state == client.k.ep_query(cep).state_value == STATE_VALUE["DISCONNECTED"]
        assert r.last_event == ev("PEER_REJECTED") and r.events == 1


# ---- service points and connection requests -----------------------------------------------------

def test_cr_record_pending_then_freed_by_accept(client, server):
    port = next_port()
    psp = server.k.psp_create(server.ia, server.crevd, port)
    cep = client.ep()
    with server.k.table() as t:
        client.k.ep_connect(cep, host_addr(), port, T, private_data=b"cr")
        crev = wait_cr(server)
        q = server.k.cr_query(crev.cr)
        r = t.record(crev.cr)
        assert r.type == REC["CR"] and r.state == C["KDAT_CR_PENDING"]
        assert r.owner == server.ia and r.link == psp and r.link2 == 0
        assert addr_from(r.remote_addr) == q.remote_addr
        assert addr_from(r.local_addr) == q.local_addr
        assert addr_from(r.remote_addr).port == client.k.ep_query(cep).local_addr.port
        assert r.last_event == ev("CONNECTION_REQUEST_EVENT") and r.events == 1
        pr = t.record(psp)
        assert pr.last_event == ev("CONNECTION_REQUEST_EVENT") and pr.events == 1
        saved = r
        sep = server.ep()
        server.k.cr_accept(crev.cr, sep)
        assert_freed(t, crev.cr, saved)
        client.k.expect_event(client.evd, "ESTABLISHED")
        server.k.expect_event(server.evd, "ESTABLISHED")
        assert t.record(sep).state == STATE_VALUE["CONNECTED"]


def test_provider_psp_cr_names_its_ep_and_reject_frees_both(client, server):
    port = next_port()
    psp = server.k.psp_create(server.ia, server.crevd, port, provider=True)
    cep = client.ep()
    with server.k.table() as t:
        client.k.ep_connect(cep, host_addr(), port, T)
        crev = wait_cr(server)
        assert crev.ep
        r = t.record(crev.cr)
        assert r.type == REC["CR"] and r.link == psp and r.link2 == crev.ep
        er = t.record(crev.ep)
        assert er.type == REC["EP"] and er.flags & C["KDAT_RECF_PROVIDER"]
        assert er.state == STATE_VALUE["TENTATIVE_CONNECTION_PENDING"]
        assert er.link == server.crevd, "a provider EP's connect EVD is the PSP's EVD"
        saved_cr, saved_ep = r, er
        server.k.cr_reject(crev.cr)
        client.k.expect_event(client.evd, "PEER_REJECTED")
        assert_freed(t, crev.cr, saved_cr)
        assert_freed(t, crev.ep, saved_ep)


def test_rsp_record_is_used_after_its_request(client, server):
    port = next_port()
    sep = server.ep()
    rsp = server.k.rsp_create(server.ia, sep, port, server.crevd)
    cep = client.ep()
    with server.k.table() as t:
        client.k.ep_connect(cep, host_addr(), port, T)
        crev = wait_cr(server)
        assert crev.sp == rsp
        r = t.record(rsp)
        assert r.state == C["KDAT_SP_USED"]
        assert t.record(crev.cr).link == rsp and t.record(crev.cr).link2 == sep
        server.k.cr_reject(crev.cr)
        client.k.expect_event(client.evd, "PEER_REJECTED")


def test_cr_record_says_remote_gone_when_the_requester_gives_up(kdat_files, server, rdma):
    port = next_port()
    server.k.psp_create(server.ia, server.crevd, port)
    c = side(kdat_files())
    cep = c.ep()
    c.k.ep_connect(cep, host_addr(), port, T)
    crev = wait_cr(server)
    with server.k.table() as t:
        assert t.record(crev.cr).state == C["KDAT_CR_PENDING"]
        c.k.close()       # tears the pending connect down: the requester is gone
        # nothing is posted for it: the record is the only place that says so
        r = t.wait_for(lambda r: r.state == C["KDAT_CR_REMOTE_GONE"], crev.cr, timeout=10)
        assert r is not None and r.state == C["KDAT_CR_REMOTE_GONE"]


# ---- the IA and its device ------------------------------------------------------------------------

@pytest.fixture
def removable_rxe(kdat_module, kernel_log, rdma):
    """The session's rxe device, deleted by the test and re-created afterwards (as in
    test_device_removal.py)."""
    yield rdma["KDAT_TEST_IBDEV"]
    guest.run("rdma", "link", "delete", rdma["KDAT_TEST_IBDEV"], check=False)
    guest.rdma_up()


def test_ia_record_says_device_removed(removable_rxe, rdma):
    port = next_port()
    with Kdat() as k, k.table() as t:
        ia = k.ia_open(rdma["KDAT_TEST_NETDEV"])
        crevd = k.evd_create(ia, 8, k.EVD_CR)
        evd = k.evd_create(ia, 8, k.EVD_CONNECTION)
        k.psp_create(ia, crevd, port)
        s, c = k.ep_create(ia, evd), k.ep_create(ia, evd)
        k.ep_connect(c, ipv4(rdma["KDAT_TEST_ADDR"]), port, T)
        k.cr_accept(k.expect_event(crevd, "CONNECTION_REQUEST_EVENT").cr, s)
        k.expect_event(evd, "ESTABLISHED")
        k.expect_event(evd, "ESTABLISHED")
        assert t.record(ia).state == C["KDAT_IA_UP"]

        guest.run("rdma", "link", "delete", removable_rxe)
        k.expect_event(evd, "BROKEN")
        k.expect_event(evd, "BROKEN")
        expect_dat_error("DAT_INVALID_STATE", k.ia_query, ia)
        assert t.record(ia).state == C["KDAT_IA_DEVICE_REMOVED"]
        for ep in (s, c):
            r = t.record(ep)
            assert r.state == STATE_VALUE["DISCONNECTED"]
            assert r.last_event == ev("BROKEN")
        for ep in (s, c):
            k.ep_free(ep)


# ---- the mmap contract -----------------------------------------------------------------------------

@pytest.mark.parametrize("prot,flags", [(PROT_READ | PROT_WRITE, MAP_SHARED),
                                        (PROT_WRITE, MAP_SHARED),
                                        (PROT_READ | PROT_WRITE, MAP_PRIVATE)],
                         ids=["rw-shared", "w-shared", "rw-private"])
@pytest.mark.parametrize("where", ["KDAT_MMAP_TABLE", "KDAT_MMAP_VIEW"])
def test_writable_mapping_is_eacces(kd, prot, flags, where):
    if where == "KDAT_MMAP_VIEW":
        kd.table_attach(table_id(kd))
    err, m = Mapping.try_map(kd.fd, PAGE, prot, flags, C[where])
    if m:
        m.close()
    assert err == errno.EACCES


def test_mprotect_of_a_read_only_mapping_to_write_is_eacces(kd):
    with Mapping(kd.fd, MAP_SIZE, PROT_READ, MAP_SHARED, C["KDAT_MMAP_TABLE"]) as m:
        assert m.mprotect(PROT_READ | PROT_WRITE) == errno.EACCES
        assert m.mprotect(PROT_READ | PROT_WRITE, PAGE) == errno.EACCES
        assert m.u32(0) == C["KDAT_TABLE_MAGIC"], "the mapping still reads"


@pytest.mark.parametrize("offset", [PAGE, 2 * PAGE, C["KDAT_MMAP_VIEW"] + PAGE,
                                    C["KDAT_MMAP_VIEW"] - PAGE, 2 * C["KDAT_MMAP_VIEW"],
                                    MAP_SIZE])
def test_mmap_at_another_offset_is_einval(kd, offset):
    err, m = Mapping.try_map(kd.fd, PAGE, PROT_READ, MAP_SHARED, offset)
    if m:
        m.close()
    assert err == errno.EINVAL


@pytest.mark.parametrize("where", ["KDAT_MMAP_TABLE", "KDAT_MMAP_VIEW"])
def test_mmap_longer_than_the_table_is_einval(kd, where):
    kd.table_attach(table_id(kd))
    for length in (MAP_SIZE + PAGE, 2 * MAP_SIZE):
        err, m = Mapping.try_map(kd.fd, length, PROT_READ, MAP_SHARED, C[where])
        if m:
            m.close()
        assert err == errno.EINVAL, length
    for length in (PAGE, MAP_SIZE):   # at most the table: these are fine
        with Mapping(kd.fd, length, PROT_READ, MAP_SHARED, C[where]) as m:
            assert m.u32(0) == C["KDAT_TABLE_MAGIC"]


def test_mmap_view_before_attach_is_enxio(kd):
    err, m = Mapping.try_map(kd.fd, PAGE, PROT_READ, MAP_SHARED, C["KDAT_MMAP_VIEW"])
    if m:
        m.close()
    assert err == errno.ENXIO


def test_touching_a_record_page_past_high_water_is_sigbus(kd, rdma):
    ia = kd.ia_open(host_addr())
    with kd.table() as t:
        assert t.high_water() == handle_slot(ia)
    pid = os.fork()
    if pid == 0:     # the child touches the last slot's page: SIGBUS kills it
        try:
            faulthandler.disable()     # die quietly
            m = Mapping(kd.fd, MAP_SIZE, PROT_READ, MAP_SHARED, 0)
            m.u32(MAP_SIZE - C["KDAT_TABLE_RECORD_SIZE"])
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGBUS, status


def test_mapping_outlives_close_of_its_file(kdat_files, rdma):
    k = kdat_files()
    ia = k.ia_open(host_addr())
    evd = k.evd_create(ia, 4, Kdat.EVD_CONNECTION)
    ep = k.ep_create(ia, evd)
    t = k.table()
    try:
        h = t.header()
        before = {x: t.record(x) for x in (ia, evd, ep)}
        assert not h.flags & C["KDAT_TABLE_CLOSED"]
        k.close()
        h2 = t.header()
        assert h2.flags & C["KDAT_TABLE_CLOSED"]
        assert (h2.magic, h2.id, h2.pid) == (h.magic, h.id, h.pid)
        for x, rec in before.items():
            r = t.slot(handle_slot(x))     # readable, whole, and either as before or freed
            assert r.seq % 2 == 0
            assert r.generation == rec.generation
            assert r.handle in (x, 0)
            if r.handle:
                assert r.type == rec.type
        live = sum(1 for _, r in t.live_records())
        assert h2.live == live, "header.live agrees with the records it left"
    finally:
        t.close()


def test_a_file_sees_only_its_own_records(kdat_files, rdma):
    a, b = kdat_files(), kdat_files()
    ia = a.ia_open(host_addr())
    evd = a.evd_create(ia, 4, Kdat.EVD_CONNECTION)
    a.ep_create(ia, evd)
    with a.table() as ta, b.table() as tb:
        assert tb.header().live == 0 and tb.header().high_water == 0
        assert ta.header().id != tb.header().id
        ib = b.ia_open(host_addr())
        assert [r.handle for _, r in tb.live_records()] == [ib]
        assert ta.header().live == 3
        assert ib not in [r.handle for _, r in ta.live_records()]


def test_no_word_of_the_table_looks_like_a_kernel_pointer(client, server):
    p = connect_pair(client, server, client_pd=b"x" * 16)
    server.k.psp_create(server.ia, server.crevd, next_port(), provider=True)
    cep = client.ep()
    client.k.ep_connect(cep, host_addr(), p.port, T)
    wait_cr(server)      # a pending CR, too
    for k in (client.k, server.k):
        with k.table() as t:
            pages = t.mapped_pages()
            assert len(pages) >= 2
            for off in pages:
                page = t.map.read(off, PAGE)
                words = [int.from_bytes(page[i:i + 8], "little") for i in range(0, PAGE, 8)]
                bad = [(off + 8 * i, hex(w)) for i, w in enumerate(words) if w >= KERNEL_POINTER]
                assert not bad, f"kernel-pointer-like words in the table: {bad[:8]}"


def test_records_are_never_torn_while_the_kernel_writes(client, server):
    """Readers race a connection's state changes: every copy the protocol accepts is whole."""
    with client.k.table() as t:
        for _ in range(3):
            p = connect_pair(client, server)
            client.k.ep_disconnect(p.cep)
            for _ in range(200):
                r = t.record(p.cep)
                assert r.type == REC["EP"] and r.owner == client.ia and r.link == client.evd
                assert r.state in STATE_VALUE.values()
                if r.state == STATE_VALUE["DISCONNECTED"]:
                    break
            client.k.expect_event(client.evd, "DISCONNECTED")
            server.k.expect_event(server.evd, "DISCONNECTED")
            assert t.record(p.cep).state == STATE_VALUE["DISCONNECTED"]


@pytest.mark.parametrize("where", ["KDAT_MMAP_TABLE", "KDAT_MMAP_VIEW"])
def test_a_mapping_split_by_munmap_still_shows_each_page_where_it_belongs(kd, rdma, where):
    """munmap of a mapping's first page leaves a vma that starts at table page 1: its pages are
    the table's pages 1, 2, ..., not the header again (issue #23)."""
    kd.table_attach(table_id(kd))
    kd.ia_open(host_addr())
    with Mapping(kd.fd, 3 * PAGE, PROT_READ, MAP_SHARED, C[where]) as whole, \
            Mapping(kd.fd, 3 * PAGE, PROT_READ, MAP_SHARED, C[where]) as split:
        assert whole.read(0, 4) == split.read(0, 4)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        assert libc.munmap(split.addr, PAGE) == 0
        page1 = whole.read(PAGE, PAGE)
        assert page1 != whole.read(0, PAGE), "the record page differs from the header"
        assert split.read(PAGE, PAGE) == page1
        assert split.u32(PAGE) != C["KDAT_TABLE_MAGIC"]
