"""Event rings (include/kdat/uapi/kdat.h, "Event rings"): KDAT_IOC_EVD_RING's file, the shared ring
consumed with the header's head/tail protocol from Python, poll() on the ring's file,
KDAT_IOC_EVD_RING_WAIT, the backlog behind a full ring, and a consumer that writes garbage."""
import ctypes
import fcntl
import os
import select
import threading
import time

import pytest

from kdat_harness.dat import (DAT, EVENT_VALUE, Kdat, client, dat_subtype, host_addr,  # noqa: F401
                              is_success, kd,
                              kdat_files, next_port, server, side, status_name)
from kdat_harness.guest import UAPI, errno
from kdat_harness.shared import (MAP_SHARED, PAGE, PROT_READ, PROT_WRITE, Mapping, ring_map_size)
from kdat_harness.timing import allowed_lateness, assert_prompt, judge_on_time

C = UAPI.consts
T = 5_000_000
# a ring entry: the event and its UD tail (ABI 7)
EVENT_SIZE = ctypes.sizeof(UAPI.structs["kdat_ring_entry"])
POLLHUP_ERR = select.POLLHUP | select.POLLERR


def dat_type(status):
    return status & DAT["DAT_TYPE_MASK"]


def is_type(status, name):
    return dat_type(status) == DAT[name]


def page_align(n):
    return (n + PAGE - 1) // PAGE * PAGE


def roundup_pow2(n):
    p = 1
    while p < n:
        p <<= 1
    return p


def rejects(k, ia, evd, n):
    """n EPs on connect EVD `evd`, each connecting to a port nobody listens on: one
    NON_PEER_REJECTED each, eventually.  Returns the EPs."""
    eps = [k.ep_create(ia, evd) for _ in range(n)]
    for ep in eps:
        k.ep_connect(ep, host_addr(), next_port(), T)
    return eps


def posted(k, eps, timeout=20.0):
    """Wait until each EP's event has been posted (its table record names it), taking nothing."""
    with k.table() as t:
        for ep in eps:
            r = t.wait_for(lambda r: r.events > 0, ep, timeout=timeout)
            assert r is not None and r.events > 0, f"no event posted for EP {ep:#x}"


NR_IOCTL, NR_POLL = 16, 7   # x86_64


def blocked_in(tid_box, nr, timeout=10.0):
    """Wait until the thread whose native id lands in tid_box sleeps in syscall nr."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tid = tid_box.get("tid")
        if tid:
            try:
                with open(f"/proc/self/task/{tid}/syscall") as f:
                    if f.read().split()[0] == str(nr):
                        with open(f"/proc/self/task/{tid}/stat") as f2:
                            if f2.read().rsplit(")", 1)[1].split()[0] == "S":
                                return
            except (FileNotFoundError, IndexError):
                pass
        time.sleep(0.01)
    raise AssertionError(f"the thread never blocked in syscall {nr}")


def in_thread(fn):
    """Run fn in a thread: (thread, box); box gets 'tid' at once and 'r' with fn's result."""
    box = {}

    def run():
        box["tid"] = threading.get_native_id()
        box["r"] = fn()
    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, box


def poll_mask(fd, timeout_ms=0):
    p = select.poll()
    p.register(fd, select.POLLIN)
    r = p.poll(timeout_ms)
    return r[0][1] if r else 0


@pytest.fixture
def ia(kd, rdma):
    return kd.ia_open(host_addr())


# ---- KDAT_IOC_EVD_RING ----------------------------------------------------------------------------

@pytest.mark.parametrize("qlen", [1, 2, 3, 5, 16, 100, 4096, 4097, 65536])
def test_evd_ring_returns_its_file_entries_and_map_size(kd, ia, qlen):
    if qlen > kd.ia_query(ia).max_evd_qlen:
        pytest.skip("the IA does not offer that qlen")
    evd = kd.evd_create(ia, qlen, Kdat.EVD_CONNECTION, ring=True)
    with kd.evd_ring(evd) as ring:
        want = min(roundup_pow2(qlen), C["KDAT_RING_MAX_ENTRIES"])
        assert ring.entries == want
        assert ring.map_size == ring_map_size(want) == C["KDAT_RING_ENTRIES_OFFSET"] + want * EVENT_SIZE
        assert ring.fd >= 0
        assert fcntl.fcntl(ring.fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
        h = ring.header()
        assert (h.entries, h.mask, h.entry_size, h.evd) == (want, want - 1, EVENT_SIZE, evd)
        assert h.head == h.tail and h.backlog == 0 and h.overflow == 0 and h.flags == 0
        with kd.table() as t:
            assert t.record(evd).flags & C["KDAT_RECF_RING"]


def test_an_evd_gets_one_ring_once(kd, ia):
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION, ring=True)
    with kd.evd_ring(evd):
        r = kd.call("evd_ring", evd=evd)      # the ioctl itself works: a DAT status
        assert not is_success(r.status), "a second ring for one EVD"
    r = kd.call("evd_ring", evd=evd)          # nor after its file is closed
    assert not is_success(r.status)


def test_evd_ring_of_a_stale_or_unknown_handle_is_invalid_handle(kd, ia):
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION, ring=True)
    kd.evd_free(evd)
    for h in (evd, 0, ia, 0xFFFFFFFF):
        r = kd.call("evd_ring", evd=h)
        assert is_type(r.status, "DAT_INVALID_HANDLE"), (hex(h), status_name(r.status))


def test_events_queued_before_the_ring_come_through_it(kd, ia):
    evd = kd.evd_create(ia, 8, Kdat.EVD_CONNECTION, ring=True)
    eps = rejects(kd, ia, evd, 2)
    posted(kd, eps)
    with kd.evd_ring(evd) as ring:
        evs = ring.drain(2)
        assert sorted(e.ep for e in evs) == sorted(eps)
        assert {e.name for e in evs} == {"CONNECTION_EVENT_NON_PEER_REJECTED"}
        assert is_type(ring.wait(1, 100_000).status, "DAT_TIMEOUT_EXPIRED")


# ---- the same events as the ioctl path ------------------------------------------------------------

def _scenario(client, server, use_ring):
    """Connect with private data both ways, then disconnect; every event of both sides in order,
    handles replaced by the role they name."""
    port = next_port()
    rings = {}
    if use_ring:
        for name, s, evd in (("c", client, client.evd), ("s", server, server.evd),
                             ("scr", server, server.crevd)):
            rings[name] = s.k.evd_ring(evd)

    def next_event(name, k, evd):
        if use_ring:
            return rings[name].drain(1)[0]
        return k.evd_wait(evd, T)

    psp = server.k.psp_create(server.ia, server.crevd, port)
    cep = client.ep()
    sep = server.ep()
    roles = {cep: "cep", sep: "sep", psp: "psp", client.evd: "cevd", server.evd: "sevd",
             server.crevd: "screvd", 0: 0}
    out = []

    def norm(e):
        roles.setdefault(e.cr, "cr")
        return (e.name, roles.get(e.evd, e.evd), roles.get(e.ep, e.ep), roles.get(e.sp, e.sp),
                roles.get(e.cr, e.cr), e.dto_status, e.cookie, e.transfered_length,
                e.private_data_size, e.private_data)

    client.k.ep_connect(cep, host_addr(), port, T, private_data=b"client says hello")
    crev = next_event("scr", server.k, server.crevd)
    out.append(norm(crev))
    server.k.cr_accept(crev.cr, sep, private_data=b"server says welcome")
    out.append(norm(next_event("c", client.k, client.evd)))
    out.append(norm(next_event("s", server.k, server.evd)))
    client.k.ep_disconnect(cep, graceful=True)
    out.append(norm(next_event("c", client.k, client.evd)))
    out.append(norm(next_event("s", server.k, server.evd)))
    for r in rings.values():
        assert r.available() == 0 and r.header().backlog == 0
        r.close()
    return out


def test_ring_events_are_what_the_ioctl_path_gives(kdat_files, rdma):
    plain = _scenario(side(kdat_files()), side(kdat_files()), use_ring=False)
    ringed = _scenario(side(kdat_files(), ring=True), side(kdat_files(), ring=True), use_ring=True)
    assert [e[0] for e in plain] == ["CONNECTION_REQUEST_EVENT", "CONNECTION_EVENT_ESTABLISHED",
                                     "CONNECTION_EVENT_ESTABLISHED",
                                     "CONNECTION_EVENT_DISCONNECTED",
                                     "CONNECTION_EVENT_DISCONNECTED"]
    assert plain[1][-1] == b"server says welcome"
    assert ringed == plain


# ---- poll() ----------------------------------------------------------------------------------------

def test_poll_is_readable_exactly_while_events_wait(kd, ia):
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION, ring=True)
    with kd.evd_ring(evd) as ring:
        assert poll_mask(ring.fd) == 0
        r, _, _ = select.select([ring.fd], [], [], 0)
        assert r == []
        rejects(kd, ia, evd, 1)
        assert poll_mask(ring.fd, 10_000) & select.POLLIN
        r, _, _ = select.select([ring.fd], [], [], 0)
        assert r == [ring.fd]
        ep = select.epoll()
        ep.register(ring.fd, select.EPOLLIN)
        assert ep.poll(0) == [(ring.fd, select.EPOLLIN)]
        assert [e.name for e in ring.take()] == ["CONNECTION_EVENT_NON_PEER_REJECTED"]
        assert poll_mask(ring.fd) == 0, "readable after the consumer took everything"
        assert ep.poll(0) == []
        ep.close()


def test_poll_wakes_a_sleeping_poller(kd, ia):
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION, ring=True)
    with kd.evd_ring(evd) as ring:
        th, box = in_thread(lambda: poll_mask(ring.fd, 60_000))
        blocked_in(box, NR_POLL)
        t0 = time.monotonic()
        rejects(kd, ia, evd, 1)
        th.join(70)
        assert box["r"] & select.POLLIN
        assert_prompt(time.monotonic() - t0, 60, "the poller's wake-up")


def test_poll_reports_hup_and_err_once_the_evd_is_freed(kd, ia):
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION, ring=True)
    with kd.evd_ring(evd) as ring:
        ep = select.epoll()
        ep.register(ring.fd, select.EPOLLIN)
        assert ep.poll(0) == []
        kd.evd_free(evd)
        assert poll_mask(ring.fd) & POLLHUP_ERR == POLLHUP_ERR
        got = dict(ep.poll(1))
        assert got.get(ring.fd, 0) & (select.EPOLLHUP | select.EPOLLERR) == \
            select.EPOLLHUP | select.EPOLLERR
        ep.close()
        assert ring.header().flags & C["KDAT_RING_DEAD"], "the ring says its EVD is gone"
        r = ring.wait(1, 0)
        assert is_type(r.status, "DAT_INVALID_HANDLE"), status_name(r.status)


def test_poll_hup_when_closing_the_ia_frees_the_evd(kd, ia):
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION, ring=True)
    with kd.evd_ring(evd) as ring:
        kd.ia_close(ia)
        assert poll_mask(ring.fd) & POLLHUP_ERR == POLLHUP_ERR
        assert ring.header().flags & C["KDAT_RING_DEAD"]


# ---- KDAT_IOC_EVD_RING_WAIT ------------------------------------------------------------------------

def test_ring_wait_times_out_in_about_the_time_asked(kd, ia):
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION, ring=True)
    with kd.evd_ring(evd) as ring:
        for timeout_us in (200_000, 600_000, 3_000_000):
            def attempt(start):
                t0 = time.monotonic()
                start()
                r = ring.wait(1, timeout_us)
                dt = time.monotonic() - t0
                assert is_type(r.status, "DAT_TIMEOUT_EXPIRED"), status_name(r.status)
                assert r.available == 0
                return dt

            judge_on_time(attempt, timeout_us / 1e6, what="RING_WAIT's timeout")
        # 0: just refill, no wait -- as quick as a call that never waits (ia_query); the fastest
        # of five each, so that one lost time slice does not decide
        took, plain = [], []
        for _ in range(5):
            t0 = time.monotonic()
            r = ring.wait(1, 0)
            took.append(time.monotonic() - t0)
            assert is_type(r.status, "DAT_TIMEOUT_EXPIRED")
            t0 = time.monotonic()
            kd.ia_query(ia)
            plain.append(time.monotonic() - t0)
        assert min(took) <= allowed_lateness(min(plain)), (took, plain)


def test_ring_wait_threshold_and_it_takes_nothing(kd, ia):
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION, ring=True)
    with kd.evd_ring(evd) as ring:
        for bad in (0, ring.entries + 1, 0xFFFFFFFF):
            r = ring.wait(bad, 1000)
            assert is_type(r.status, "DAT_INVALID_PARAMETER"), (bad, status_name(r.status))
        eps = rejects(kd, ia, evd, 2)
        r = ring.wait(2, T)
        assert is_success(r.status), status_name(r.status)
        assert r.available == 2
        r = ring.wait(3, 200_000)
        assert is_type(r.status, "DAT_TIMEOUT_EXPIRED") and r.available == 2
        r = ring.wait(1, 0)
        assert is_success(r.status) and r.available == 2, "RING_WAIT took an event"
        assert sorted(e.ep for e in ring.take()) == sorted(eps)
        assert ring.wait(1, 0).available == 0


def test_ring_wait_wakes_when_the_threshold_is_reached(kd, ia):
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION, ring=True)
    with kd.evd_ring(evd) as ring:
        th, box = in_thread(lambda: ring.wait(3, 60_000_000))
        blocked_in(box, NR_IOCTL)
        posted(kd, rejects(kd, ia, evd, 2))
        th.join(0.5)
        assert th.is_alive(), "woke below the threshold"
        t0 = time.monotonic()
        rejects(kd, ia, evd, 1)
        th.join(70)
        assert not th.is_alive()
        assert is_success(box["r"].status) and box["r"].available == 3
        assert_prompt(time.monotonic() - t0, 60, "the wake-up at the threshold")
        assert len(ring.take()) == 3


def test_ring_wait_is_aborted_when_its_evd_goes(kd, ia):
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION, ring=True)
    with kd.evd_ring(evd) as ring:
        th, box = in_thread(lambda: ring.wait(1, 30_000_000))
        blocked_in(box, NR_IOCTL)
        kd.ia_close(ia)           # abrupt: frees the EVD under its waiter
        th.join(20)
        assert not th.is_alive()
        assert is_type(box["r"].status, "DAT_ABORT"), status_name(box["r"].status)
        assert poll_mask(ring.fd) & POLLHUP_ERR == POLLHUP_ERR


# ---- a full ring: backlog, refill, nothing lost ---------------------------------------------------

def _wait_header(ring, pred, timeout=20.0):
    deadline = time.monotonic() + timeout
    while True:
        h = ring.header()
        if pred(h) or time.monotonic() > deadline:
            return h
        time.sleep(0.02)


def test_events_beyond_the_ring_wait_in_the_backlog_and_none_is_lost(client, server):
    n = 8
    port = next_port()
    # small rings: EVDs of qlen 2
    screvd = server.k.evd_create(server.ia, 2, Kdat.EVD_CR | Kdat.EVD_CONNECTION, ring=True)
    cevd = client.k.evd_create(client.ia, 2, Kdat.EVD_CONNECTION, ring=True)
    crring = server.k.evd_ring(screvd)
    cring = client.k.evd_ring(cevd)
    try:
        assert crring.entries == cring.entries == 2
        server.k.psp_create(server.ia, screvd, port)
        ceps = [client.k.ep_create(client.ia, cevd) for _ in range(n)]
        for ep in ceps:
            client.k.ep_connect(ep, host_addr(), port, 30_000_000)
        # n requests, 2 fit: the rest wait behind the ring
        h = _wait_header(crring, lambda h: h.backlog == n - 2)
        assert (h.tail - h.head) & 0xFFFFFFFF == 2 and h.backlog == n - 2 and h.overflow == 0
        assert poll_mask(crring.fd) & select.POLLIN
        crs = crring.drain(n, max_take=1)
        assert [e.name for e in crs] == ["CONNECTION_REQUEST_EVENT"] * n
        assert len({e.cr for e in crs}) == n, "a CR came twice"
        ports = {server.k.cr_query(e.cr).remote_addr.port for e in crs}
        assert ports == {client.k.ep_query(ep).local_addr.port for ep in ceps}
        assert crring.header().backlog == 0

        seps = []
        for e in crs:
            sep = server.ep()
            server.k.cr_accept(e.cr, sep)
            seps.append(sep)
        for _ in seps:
            server.k.expect_event(server.evd, "ESTABLISHED")
        for sep in seps:
            server.k.ep_disconnect(sep)
        for _ in seps:
            server.k.expect_event(server.evd, "DISCONNECTED")
        # 2n events for the client: ESTABLISHED then DISCONNECTED per EP, 2 in the ring
        h = _wait_header(cring, lambda h: h.backlog == 2 * n - 2)
        assert h.backlog == 2 * n - 2 and h.overflow == 0, (h.backlog, h.overflow)
        evs = cring.drain(2 * n)
        per_ep = {}
        for e in evs:
            per_ep.setdefault(e.ep, []).append(e.name)
        assert sorted(per_ep) == sorted(ceps)
        for ep, names in per_ep.items():
            assert names == ["CONNECTION_EVENT_ESTABLISHED", "CONNECTION_EVENT_DISCONNECTED"], (ep, names)
        r = cring.wait(1, 200_000)
        assert is_type(r.status, "DAT_TIMEOUT_EXPIRED"), "an event came twice"
        assert cring.header().backlog == 0 and cring.header().overflow == 0
    finally:
        crring.close()
        cring.close()


# ---- the mapping -----------------------------------------------------------------------------------

def test_ring_mmap_with_a_wrong_length_or_offset_is_einval(kd, ia):
    evd = kd.evd_create(ia, 8, Kdat.EVD_CONNECTION, ring=True)
    with kd.evd_ring(evd, map_it=False) as ring:
        rw = PROT_READ | PROT_WRITE
        for length, offset in [(page_align(ring.map_size) + PAGE, 0), (ring.map_size, PAGE),
                               (PAGE, PAGE), (ring.map_size, C["KDAT_MMAP_VIEW"]),
                               (64 * page_align(ring.map_size), 0)]:
            err, m = Mapping.try_map(ring.fd, length, rw, MAP_SHARED, offset)
            if m:
                m.close()
            assert err == errno.EINVAL, (length, offset)
        with Mapping(ring.fd, ring.map_size, rw, MAP_SHARED, 0) as m:
            assert m.u32(UAPI.structs["kdat_ring_header"].evd.offset) == evd


def test_the_ring_mapping_outlives_the_evd(kd, ia):
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION, ring=True)
    ring = kd.evd_ring(evd)
    try:
        eps = rejects(kd, ia, evd, 1)
        assert ring.drain(1)[0].ep == eps[0]
        kd.ep_free(eps[0])
        kd.evd_free(evd)
        h = ring.header()
        assert h.flags & C["KDAT_RING_DEAD"] and h.evd == evd
        assert ring.take() == []
        # a new mapping of a dead EVD's ring: either it shows the same dead ring, or a clear errno
        err, m = Mapping.try_map(ring.fd, ring.map_size, PROT_READ | PROT_WRITE, MAP_SHARED, 0)
        if m:
            with m:
                assert m.u32(UAPI.structs["kdat_ring_header"].flags.offset) & C["KDAT_RING_DEAD"]
        else:
            assert err in (errno.ENODEV, errno.ENXIO, errno.EPIPE, errno.EINVAL), err
    finally:
        ring.close()


def test_closing_the_ring_file_leaves_the_evd_its_ring(kd, ia):
    """The ring is the EVD's, not the file's: events keep arriving in it (RING_WAIT counts them),
    no second ring is handed out, EVD_WAIT still refuses, and the EVD frees cleanly."""
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION, ring=True)
    ring = kd.evd_ring(evd)
    ring.close()
    eps = rejects(kd, ia, evd, 2)
    posted(kd, eps)
    r = kd.call("evd_ring_wait", evd=evd, threshold=2, timeout_us=T)
    assert is_success(r.status) and r.available == 2, (status_name(r.status), r.available)
    assert is_type(kd.call("evd_ring", evd=evd).status, "DAT_INVALID_STATE")
    assert is_type(kd.status("evd_wait", evd=evd, timeout_us=0, threshold=1), "DAT_INVALID_STATE")
    for ep in eps:
        kd.ep_free(ep)
    kd.evd_free(evd)


# ---- a consumer that writes garbage ---------------------------------------------------------------

@pytest.mark.parametrize("garbage", ["ahead", "behind", "huge"])
def test_a_garbage_head_harms_nothing_and_loses_nothing(kd, ia, garbage):
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION, ring=True)
    with kd.evd_ring(evd) as ring:
        first = rejects(kd, ia, evd, 1)
        assert ring.drain(1)[0].ep == first[0]
        real_head = ring.head
        assert real_head == ring.tail
        ring.head = {"ahead": real_head + 12345, "behind": real_head - ring.entries - 5,
                     "huge": real_head + 0x80000000}[garbage] & 0xFFFFFFFF
        eps = rejects(kd, ia, evd, 3)
        posted(kd, eps)       # the kernel took all three in while the head was garbage
        # it still answers every call with a DAT status, and wrote no entry beyond one ring
        r = ring.wait(1, 0)
        assert dat_type(r.status) in (DAT["DAT_SUCCESS"], DAT["DAT_TIMEOUT_EXPIRED"]), \
            status_name(r.status)
        assert r.available <= ring.entries
        assert (ring.tail - real_head) & 0xFFFFFFFF <= ring.entries
        h = ring.header()
        assert h.overflow == 0 and h.entries == ring.entries and h.evd == evd
        # the consumer's real head again: everything posted meanwhile comes, once
        ring.head = real_head
        got = [e.ep for e in ring.drain(3)]
        assert sorted(got) == sorted(eps), "an event was lost or came twice"
        assert is_type(ring.wait(1, 100_000).status, "DAT_TIMEOUT_EXPIRED")
        assert kd.ep_state(eps[0]) == "DISCONNECTED"


def test_kernel_fields_written_by_the_consumer_are_ignored(kd, ia):
    RH = UAPI.structs["kdat_ring_header"]
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION, ring=True)
    with kd.evd_ring(evd) as ring:
        rejects(kd, ia, evd, 1)
        ring.drain(1)
        tail = ring.tail
        for f, v in (("tail", 7777), ("entries", 1 << 20), ("mask", 0xFFFFFFFF),
                     ("entry_size", 1), ("backlog", 99), ("flags", 0xFF)):
            ring.map.set_u32(getattr(RH, f).offset, v)
        eps = rejects(kd, ia, evd, 1)
        _wait_header(ring, lambda h: h.tail == tail + 1, timeout=10)
        h = ring.header()
        assert h.tail == tail + 1, "the kernel used the tail the consumer wrote"
        off = C["KDAT_RING_ENTRIES_OFFSET"] + (tail & (ring.entries - 1)) * EVENT_SIZE
        ev = UAPI.structs["kdat_event"].from_buffer_copy(ring.map.read(off, EVENT_SIZE))
        assert ev.ep == eps[0] and ev.number == EVENT_VALUE["CONNECTION_EVENT_NON_PEER_REJECTED"]


# ---- one consumer: the ring's ----------------------------------------------------------------------

def test_evd_wait_and_dequeue_refuse_a_ring_evd_and_leave_its_ring_alone(kd, ia):
    """A ring has one consumer (ABI 5): EVD_WAIT and EVD_DEQUEUE on a ring-mode EVD are
    DAT_INVALID_STATE (EVD_IN_USE), before and after its ring is mapped, and take nothing."""
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION, ring=True)
    eps = rejects(kd, ia, evd, 1)
    posted(kd, eps)
    for name, args in (("evd_dequeue", {}), ("evd_wait", {"timeout_us": 0, "threshold": 1})):
        st = kd.status(name, evd=evd, **args)
        assert is_type(st, "DAT_INVALID_STATE"), (name, status_name(st))
        assert dat_subtype(st) == DAT["DAT_INVALID_STATE_EVD_IN_USE"], (name, status_name(st))
    with kd.evd_ring(evd) as ring:
        eps += rejects(kd, ia, evd, 2)
        assert is_success(ring.wait(3, T).status)
        head = ring.head
        for name, args in (("evd_dequeue", {}), ("evd_wait", {"timeout_us": T, "threshold": 1})):
            assert is_type(kd.status(name, evd=evd, **args), "DAT_INVALID_STATE")
        assert ring.head == head, "the kernel wrote head"
        got = ring.take()
        assert sorted(e.ep for e in got) == sorted(eps) and len(got) == 3


def test_evd_ring_of_an_evd_not_made_for_a_ring_is_invalid_state(kd, ia):
    """Ring mode is chosen at creation: a plain EVD gets no ring, and keeps working."""
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION)
    r = kd.call("evd_ring", evd=evd)
    assert is_type(r.status, "DAT_INVALID_STATE") and r.fd == -1, status_name(r.status)
    assert is_type(kd.call("evd_ring_wait", evd=evd, threshold=1, timeout_us=0).status,
                   "DAT_INVALID_STATE")
    eps = rejects(kd, ia, evd, 1)
    assert kd.expect_event(evd, "NON_PEER_REJECTED").ep == eps[0]


def test_the_ring_offsets_are_where_the_header_has_its_fields(kd, ia):
    """KDAT_IOC_EVD_RING publishes each field's place (struct kdat_ring_offsets); the consumer
    finds them there.  This kernel's are struct kdat_ring_header's."""
    RH = UAPI.structs["kdat_ring_header"]
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION, ring=True)
    with kd.evd_ring(evd) as ring:
        off = ring.off
        for f in ("head", "tail", "entries", "mask", "entry_size", "backlog", "overflow", "flags"):
            assert getattr(off, f) == getattr(RH, f).offset, f
        assert off.array == C["KDAT_RING_ENTRIES_OFFSET"] and off.reserved == 0
        assert ring.map.u32(off.entries) == ring.entries
        assert ring.map.u32(off.entry_size) == EVENT_SIZE


# ---- out fields are not inputs ----------------------------------------------------------------------

def test_stale_out_fields_in_a_request_are_ignored(kd, ia):
    """The header fails an ioctl (EINVAL) for a wrong size or a non-zero reserved field only; a
    caller reusing a struct leaves earlier outputs in it (as evd_wait's nmore is ignored)."""
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION, ring=True)
    s = kd.new("evd_ring", evd=evd)
    s.fd, s.entries, s.map_size = 5, 7, 4096
    r = kd.ioctl("evd_ring", s)
    assert is_success(r.status), status_name(r.status)
    os.close(r.fd)
    s = kd.new("evd_ring_wait", evd=evd, threshold=1, timeout_us=0)
    s.available = 3
    r = kd.ioctl("evd_ring_wait", s)
    assert is_type(r.status, "DAT_TIMEOUT_EXPIRED") and r.available == 0
