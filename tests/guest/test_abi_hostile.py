"""A hostile caller of /dev/kdat: wrong sizes, reserved bits, unknown commands, bad pointers, bad
handles and random buffers.  The ioctl must fail cleanly (errno) or return a DAT status, and the
kernel log must stay clean (the kernel_log fixture)."""
import ctypes
import random
import zlib
import types

import pytest

from kdat_harness.dat import (COMMANDS, DAT, TYPE_NAME, Kdat, host_addr, kd, kdat_files,  # noqa: F401
                              next_port, side, wait_cr)
from kdat_harness.guest import UAPI, errno

C = UAPI.consts
T = 5_000_000
ALL = sorted(COMMANDS)
WITH_STATUS = [c for c in ALL if "status" in dict(UAPI.structs[COMMANDS[c][0]]._fields_)]


def _ioc(dirn, size, nr, magic=None):
    return (dirn << 30) | (size << 16) | ((C["KDAT_IOC_MAGIC"] if magic is None else magic) << 8) | nr


# ---- the ioctl itself fails -------------------------------------------------------------------

@pytest.mark.parametrize("delta", ["zero", "minus1", "plus1", "huge"])
@pytest.mark.parametrize("cmd", ALL)
def test_wrong_size_field_is_einval(kd, cmd, delta):
    s = Kdat.new(cmd)
    s.size = {"zero": 0, "minus1": s.size - 1, "plus1": s.size + 1, "huge": 0xFFFFFFFF}[delta]
    assert kd.ioctl_errno(cmd, s) == errno.EINVAL


def _field(s, dotted):
    """(the struct holding a dotted field, its last name)"""
    *path, last = dotted.split(".")
    for p in path:
        s = getattr(s, p)
    return s, last


ZERO_FIELDS = [(c, f) for c in ALL for f in UAPI.commands[c].zeros]


@pytest.mark.parametrize("cmd,fld", ZERO_FIELDS)
def test_reserved_field_set_is_einval(kd, cmd, fld):
    s = Kdat.new(cmd)
    holder, name = _field(s, fld)
    r = getattr(holder, name)
    if isinstance(r, ctypes.Array):
        r[len(r) - 1] = 1
    else:
        setattr(holder, name, 1 << 31)     # every scalar reserved field is a __u32
    assert kd.ioctl_errno(cmd, s) == errno.EINVAL


@pytest.mark.parametrize("cmd", ["ep_create", "ep_modify"])
def test_reserved_bytes_of_an_input_ep_attr_are_einval(kd, rdma, cmd):
    ia = kd.ia_open(host_addr())
    evd = kd.evd_create(ia, 4, Kdat.EVD_CONNECTION)
    ep = kd.ep_create(ia, evd)
    s = Kdat.new(cmd, ia=ia, connect_evd=evd) if cmd == "ep_create" else Kdat.new(cmd, ep=ep, mask=0)
    s.attr.reserved[2] = 0x5A
    assert kd.ioctl_errno(cmd, s) == errno.EINVAL


@pytest.mark.parametrize("cmd", ALL)
def test_null_pointer_is_efault(kd, cmd):
    assert kd.ioctl_errno(cmd, None) == errno.EFAULT


def test_unknown_commands_are_enotty(kd):
    known = set(UAPI.ioctls.values())
    s = Kdat.new("ia_open")
    size = ctypes.sizeof(s)
    ia_open = UAPI.ioctls["KDAT_IOC_IA_OPEN"]
    nr = ia_open & 0xFF
    cases = [_ioc(3, size, 0xFE), _ioc(3, size, 0x06), _ioc(3, size, 0x44),
             _ioc(3, size, nr, magic=0xDB),                   # another magic
             _ioc(1, size, nr), _ioc(2, size, nr), _ioc(0, 0, nr)]  # the direction
    for cmd in cases:
        assert cmd not in known
        assert kd.ioctl_errno(cmd, Kdat.new("ia_open", name="kdat0")) == errno.ENOTTY, hex(cmd)


# ---- structs that grow: older (shorter) and newer (longer) callers ------------------------------

def _grown(cmd, extra, tail=b"", **fields):
    """The command's struct followed by `extra` more bytes (tail, then zeros), size set to the
    whole; and the ioctl number that encodes that size."""
    s = Kdat.new(cmd, **fields)
    n = ctypes.sizeof(s) + extra
    s.size = n
    raw = bytes(s) + tail + bytes(extra - len(tail))
    cls = type("grown_" + cmd, (ctypes.Structure,),
               {"_fields_": [("s", type(s)), ("tail", ctypes.c_uint8 * extra)]})
    number = _ioc(3, n, UAPI.ioctls[COMMANDS[cmd][1]] & 0xFF)
    return cls.from_buffer_copy(raw), number


@pytest.mark.parametrize("delta", [-8, 8])
@pytest.mark.parametrize("cmd", ALL)
def test_a_size_in_the_number_unlike_the_size_word_is_einval(kd, cmd, delta):
    s = Kdat.new(cmd)
    number = _ioc(3, ctypes.sizeof(s) + delta, UAPI.ioctls[COMMANDS[cmd][1]] & 0xFF)
    assert kd.ioctl_errno(number, s) == errno.EINVAL


@pytest.mark.parametrize("cmd", ALL)
def test_a_struct_shorter_than_the_commands_first_is_einval(kd, cmd):
    c = UAPI.commands[cmd]
    first = UAPI.offsetofend(c.struct, c.first)
    s, number = _grown(cmd, 8)
    raw = bytes(s)[:first - 4]
    cls = ctypes.c_uint8 * len(raw)
    buf = cls.from_buffer_copy(raw)
    ctypes.c_uint32.from_buffer(buf).value = len(raw)
    assert kd.ioctl_errno(_ioc(3, len(raw), number & 0xFF), buf) == errno.EINVAL


@pytest.mark.parametrize("cmd", ALL)
def test_a_longer_struct_with_a_nonzero_tail_is_e2big_and_does_nothing(kd, rdma, cmd):
    ia = kd.ia_open(host_addr())
    live = _live(kd)
    fields = {"ia": ia} if "ia" in HANDLE_FIELDS.get(cmd, {}) else {}
    s, number = _grown(cmd, 16, tail=b"\0" * 11 + b"\x01", **fields)
    assert kd.ioctl_errno(number, s) == errno.E2BIG
    assert _live(kd) == live


def test_a_longer_struct_with_a_zero_tail_works_and_its_tail_is_left_alone(kd, rdma):
    """A newer program's struct: the kernel does the work, writes back only what it knows."""
    v, number = _grown("version", 24)
    r = kd.ioctl(number, v)
    assert r.s.abi_version == C["KDAT_ABI_VERSION"] and r.s.size == ctypes.sizeof(v)
    assert bytes(r.tail) == bytes(24)
    live = _live(kd)
    o, number = _grown("ia_open", 8, name=host_addr())
    r = kd.ioctl(number, o)
    assert r.s.status == 0 and r.s.ia != 0
    assert _live(kd) == live + 1
    assert kd.ia_query(r.s.ia).device_name.startswith("rxe")


# ---- bad handles: a DAT status -----------------------------------------------------------------

# Which handle type each handle field of each command takes: the kernel's own list.
HANDLE_FIELDS = {c: {h.field: h.type for h in cmd.handles}
                 for c, cmd in UAPI.commands.items() if cmd.handles}


@pytest.fixture
def ctx(kd, rdma):
    """One file with live objects of every type, a pending CR, and freed handles of every type."""
    k = kd
    s = side(k)
    port = next_port()
    psp = k.psp_create(s.ia, s.crevd, port)
    ep = s.ep()
    active = s.ep()
    k.ep_connect(active, host_addr(), port, 120_000_000)   # stays pending for the whole test
    cr = wait_cr(s).cr
    rsp_ep = s.ep()
    rsp = k.rsp_create(s.ia, rsp_ep, next_port(), s.crevd)
    uep = k.do("uqp_create", ia=s.ia, connect_evd=s.evd, qp_num=0x4321).ep   # a user-QP EP
    live = {"ia": {s.ia}, "evd": {s.evd, s.crevd}, "ep": {ep, active, rsp_ep, uep}, "psp": {psp},
            "rsp": {rsp}, "cr": {cr}}
    # freed ones last, so that no later allocation can reuse their numbers
    ia2 = k.ia_open(host_addr())
    evd2 = k.evd_create(s.ia, 4)
    ep2 = s.ep()
    psp2 = k.psp_create(s.ia, s.crevd, next_port())
    ep3 = s.ep()
    rsp2 = k.rsp_create(s.ia, ep3, next_port(), s.crevd)
    k.rsp_free(rsp2)
    k.ep_free(ep3)
    k.psp_free(psp2)
    k.ep_free(ep2)
    k.evd_free(evd2)
    k.ia_close(ia2)
    freed = {"ia": ia2, "evd": evd2, "ep": ep2, "psp": psp2, "rsp": rsp2}
    base = {
        "ia_close": {"ia": s.ia}, "ia_query": {"ia": s.ia},
        "evd_create": {"ia": s.ia, "qlen": 4, "flags": Kdat.EVD_ALL},
        "evd_free": {"evd": s.evd}, "evd_wait": {"evd": s.evd, "timeout_us": 1000, "threshold": 1},
        "evd_dequeue": {"evd": s.evd}, "evd_ring": {"evd": s.evd},
        "evd_ring_wait": {"evd": s.evd, "timeout_us": 1000, "threshold": 1},
        "ep_create": {"ia": s.ia, "connect_evd": s.evd},
        "ep_free": {"ep": ep}, "ep_query": {"ep": ep}, "ep_modify": {"ep": ep, "mask": 0},
        "ep_reset": {"ep": ep},
        "ep_connect": {"ep": ep, "remote_addr": host_addr(), "conn_qual": next_port(), "timeout_us": T},
        "ep_dup_connect": {"ep": ep, "dup_ep": ep, "timeout_us": T},
        "ep_disconnect": {"ep": ep}, "psp_create": {"ia": s.ia, "evd": s.crevd, "conn_qual": next_port()},
        "psp_free": {"psp": psp}, "psp_query": {"psp": psp},
        "rsp_create": {"ia": s.ia, "ep": ep, "evd": s.crevd, "conn_qual": next_port()},
        "rsp_free": {"rsp": rsp}, "cr_query": {"cr": cr}, "cr_accept": {"cr": cr, "ep": ep},
        "cr_reject": {"cr": cr},
        "uqp_create": {"ia": s.ia, "connect_evd": s.evd, "qp_num": 0x4322},
        "uqp_attr": {"ep": uep, "cr": cr, "qp_state": UAPI.consts["KDAT_QPS_RTR"]},
        "uqp_establish": {"ep": uep},
    }
    return types.SimpleNamespace(k=k, s=s, live=live, freed=freed, base=base, ep=ep, active=active,
                                 cr=cr, psp=psp)


def _bad_values(ctx, cmd, htype, fld):
    vals = {"12345": 12345, "max": 0xFFFFFFFF}
    if (cmd, fld) not in (("ep_create", "request_evd"), ("ep_create", "recv_evd"), ("cr_accept", "ep"),
                          ("uqp_attr", "cr")):
        # 0 means "none" / "the EP the CR names" there
        vals["zero"] = 0
    if htype in ctx.freed and ctx.freed[htype] not in ctx.live[htype]:
        vals["freed"] = ctx.freed[htype]
    for other, hs in ctx.live.items():
        if other == htype:
            continue
        for h in sorted(hs):
            if h not in ctx.live[htype]:
                vals["wrong-type-" + other] = h
                break
    return vals


@pytest.mark.parametrize("cmd,fld", [(c, f) for c in sorted(HANDLE_FIELDS) for f in HANDLE_FIELDS[c]])
def test_bad_handles_are_invalid_handle_and_change_nothing(ctx, cmd, fld):
    k = ctx.k
    htype = HANDLE_FIELDS[cmd][fld]
    for what, val in _bad_values(ctx, cmd, htype, fld).items():
        fields = dict(ctx.base[cmd])
        fields[fld] = val
        r = k.call(cmd, **fields)
        assert r.status & DAT["DAT_TYPE_MASK"] == DAT["DAT_INVALID_HANDLE"], \
            f"{cmd}.{fld}={val} ({what}): {TYPE_NAME.get(r.status & DAT['DAT_TYPE_MASK'], hex(r.status))}"
    # nothing was disturbed: the live objects are all still there and as they were
    assert k.ep_state(ctx.ep) == "UNCONNECTED"
    assert k.ep_state(ctx.active) == "ACTIVE_CONNECTION_PENDING"
    assert k.cr_query(ctx.cr).sp == ctx.psp
    k.ia_query(ctx.s.ia)
    k.expect_no_event(ctx.s.evd, 1000)


# ---- random buffers -----------------------------------------------------------------------------

def _fuzz_struct(rng, cmd, handles_max):
    cls = UAPI.structs[COMMANDS[cmd][0]]
    n = ctypes.sizeof(cls)
    s = cls.from_buffer_copy(bytes(rng.getrandbits(8) for _ in range(n)))
    s.size = n
    fields = dict(cls._fields_)
    if rng.random() < 0.7 and "reserved" in fields:
        r = s.reserved
        if isinstance(r, ctypes.Array):
            for i in range(len(r)):
                r[i] = 0
        else:
            s.reserved = 0
    if rng.random() < 0.7:
        for f in HANDLE_FIELDS.get(cmd, {}):
            setattr(s, f, rng.randrange(0, handles_max))
    if "timeout_us" in fields:
        s.timeout_us = rng.randrange(0, 3000)      # keep every wait short
    if "attr" in fields and rng.random() < 0.7:
        for i in range(len(s.attr.reserved)):
            s.attr.reserved[i] = 0
    if "private_data_size" in fields and rng.random() < 0.5:
        s.private_data_size = rng.randrange(-2, 300)
    return s


@pytest.mark.parametrize("cmd", ALL)
def test_random_buffers_do_not_hurt_the_kernel(kd, rdma, cmd):
    rng = random.Random(zlib.crc32(cmd.encode()))
    s = side(kd)
    port = next_port()
    kd.psp_create(s.ia, s.crevd, port)
    for _ in range(3):
        s.ep()
    for i in range(150):
        req = _fuzz_struct(rng, cmd, 12)
        try:
            r = kd.ioctl(cmd, req)
        except OSError as e:
            assert e.errno == errno.EINVAL, (cmd, i, e)
            continue
        if hasattr(r, "status"):
            assert r.status & DAT["DAT_TYPE_MASK"] in TYPE_NAME, (cmd, i, hex(r.status))
    # the file still works
    if cmd != "ia_close":
        assert kd.ia_query(s.ia).device_name.startswith("rxe")
    assert kd.version().abi_version == UAPI.consts["KDAT_ABI_VERSION"]


def test_the_module_still_connects_after_the_fuzzing(kdat_files, rdma):
    from kdat_harness.dat import connect_pair
    a, b = side(kdat_files()), side(kdat_files())
    p = connect_pair(a, b, client_pd=b"alive", accept_pd=b"yes")
    assert p.cev.private_data == b"yes" and p.cr.private_data == b"alive"


# ---- all or nothing: an argument that cannot be written back fails before any work ------------

def _live(k):
    with k.table() as t:
        return t.header().live


class _Arg:
    """A struct placed in anonymous memory at the end of a page, then made read-only, or with the
    next page unmapped so that the struct's tail is missing (`cut` bytes of it)."""

    def __init__(self, s, how):
        import mmap
        size = ctypes.sizeof(s)
        self.mem = mmap.mmap(-1, 2 * mmap.PAGESIZE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.mem))
        cut = 8 if how == "partly_mapped" else 0
        self.addr = base + mmap.PAGESIZE - (size - cut)
        ctypes.memmove(self.addr, bytes(s), size - cut)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        if how == "read_only":
            ctypes.memmove(self.addr, bytes(s), size)
            assert libc.mprotect(base, 2 * mmap.PAGESIZE, mmap.PROT_READ) == 0
        else:
            assert libc.mprotect(base + mmap.PAGESIZE, mmap.PAGESIZE, 0) == 0   # PROT_NONE
        self.base, self.libc = base, libc

    def close(self):
        import mmap
        self.libc.mprotect(self.base, 2 * mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_WRITE)


def _raw_errno(k, cmd, addr):
    """ioctl(2) with a raw user address (fcntl.ioctl takes only a C int or a buffer)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
    if libc.ioctl(k.fd, UAPI.ioctls[COMMANDS[cmd][1]], addr) == 0:
        return 0
    return ctypes.get_errno()


@pytest.mark.parametrize("how", ["read_only", "partly_mapped"])
def test_an_ia_open_whose_argument_cannot_be_written_back_creates_nothing(kd, rdma, how):
    kd.ia_open(host_addr())
    live = _live(kd)
    arg = _Arg(Kdat.new("ia_open", name=host_addr()), how)
    try:
        assert _raw_errno(kd, "ia_open", arg.addr) == errno.EFAULT
    finally:
        arg.close()
    assert _live(kd) == live, "an IA was made whose handle the caller never learns"


@pytest.mark.parametrize("how", ["read_only", "partly_mapped"])
def test_an_evd_ring_whose_argument_cannot_be_written_back_leaves_the_evd_as_it_was(kd, rdma, how):
    ia = kd.ia_open(host_addr())
    evd = kd.evd_create(ia, 8, Kdat.EVD_CONNECTION, ring=True)
    arg = _Arg(Kdat.new("evd_ring", evd=evd), how)
    try:
        assert _raw_errno(kd, "evd_ring", arg.addr) == errno.EFAULT
    finally:
        arg.close()
    with kd.evd_ring(evd) as ring:       # still an EVD without a ring: this one succeeds
        assert ring.entries >= 8


# A create whose handle cannot be written back after the work is undone: another thread flips the
# argument's page read-only and back while the command runs.  A fault before the work (the
# write-back check) writes no record; one after it (the copy-out) writes the create's and the
# undo's, so the table's update counter tells the two apart.
_CREATES = {
    "ia_open": ("ia", lambda k, s, port: {"name": host_addr()}, lambda k, h: k.ia_close(h)),
    "evd_create": ("evd", lambda k, s, port: {"ia": s.ia, "qlen": 4, "flags": Kdat.EVD_CONNECTION},
                   lambda k, h: k.evd_free(h)),
    "ep_create": ("ep", lambda k, s, port: {"ia": s.ia, "connect_evd": s.evd},
                  lambda k, h: k.ep_free(h)),
    "psp_create": ("psp", lambda k, s, port: {"ia": s.ia, "evd": s.crevd, "conn_qual": port},
                   lambda k, h: k.psp_free(h)),
}


@pytest.mark.parametrize("cmd", sorted(_CREATES))
def test_a_create_whose_handle_cannot_be_copied_out_is_undone(kd, rdma, cmd):
    import mmap
    import threading
    import time
    out, make, free = _CREATES[cmd]
    s = side(kd)
    port = next_port()
    req = Kdat.new(cmd, **make(kd, s, port))
    size = ctypes.sizeof(req)
    number = UAPI.ioctls[COMMANDS[cmd][1]]

    # mapped once: a mapping per read took the flipper's mmap lock twice an attempt
    table = kd.table()

    def updates():
        return table.header().updates

    # what one create and its free write, with nobody flipping anything
    per_success = set()
    for _ in range(3):
        before = updates()
        free(kd, getattr(kd.do(cmd, **make(kd, s, port)), out))
        per_success.add(updates() - before)
    assert len(per_success) == 1, per_success
    per_success = per_success.pop()

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
    mem = mmap.mmap(-1, mmap.PAGESIZE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    ctypes.memmove(base, bytes(req), size)     # written once: the kernel writes back what it read
    stop = threading.Event()

    def flipper():
        while not stop.is_set():
            libc.mprotect(base, mmap.PAGESIZE, mmap.PROT_READ)
            libc.mprotect(base, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_WRITE)

    live, start = _live(kd), updates()
    successes = faults = undone = attempts = 0
    t = threading.Thread(target=flipper)
    t.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (attempts < 300 or undone == 0):
            attempts += 1
            if libc.ioctl(kd.fd, number, base) == 0:
                r = type(req).from_buffer_copy(ctypes.string_at(base, size))
                assert r.status == 0, hex(r.status)
                successes += 1
                free(kd, getattr(r, out))
            else:
                assert ctypes.get_errno() == errno.EFAULT
                faults += 1
            undone_writes = updates() - start - successes * per_success
            assert undone_writes >= 0
            undone = undone_writes // per_success
    finally:
        stop.set()
        t.join()
        libc.mprotect(base, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_WRITE)
        table.close()
    assert _live(kd) == live, "a create that failed with EFAULT left an object behind"
    assert undone > 0, f"no fault came after the work in {attempts} attempts ({faults} faults)"
    assert successes > 0 and faults >= undone
