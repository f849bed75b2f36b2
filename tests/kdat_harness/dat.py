"""A thin Pythonic client over the raw /dev/kdat ioctls, for the guest tests.

Every struct comes from the parsed header (guest.UAPI), every DAT number from the generated DAT
mirror (table.dat_constants()) and the state table (table.Table()): nothing is retyped here.

    k = Kdat()                                  # or Kdat(device) to wrap an open guest.Device
    ia = k.ia_open("kdat0")
    evd = k.evd_create(ia, 8, k.EVD_ALL)
    ep = k.ep_create(ia, evd, max_rdma_read_in=4)
    k.ep_connect(ep, "192.0.2.1", 20001, 2_000_000, private_data=b"hi")
    ev = k.evd_wait(evd, 2_000_000)             # Event(name='CONNECTION_EVENT_...', ...)
    k.ep_query(ep).state                        # 'CONNECTED', 'DISCONNECTED', ...

Methods raise DatError when the DAT status is not DAT_SUCCESS (OSError when the ioctl itself
fails).  k.call("ep_connect", ep=..., ...) returns the raw struct without looking at its status;
k.status(...) returns just the status.
"""
import ctypes
import ipaddress
import itertools
import os
import socket
import sys
import time
import types
from dataclasses import dataclass, field

from . import guest
from .table import Table, dat_constants

U = guest.UAPI
C = U.consts
DAT = dat_constants()
TABLE = Table()

TYPE_MASK = DAT["DAT_TYPE_MASK"]
SUBTYPE_MASK = DAT["DAT_SUBTYPE_MASK"]
CLASS_ERROR = DAT["DAT_CLASS_ERROR"]
SUCCESS = DAT["DAT_SUCCESS"]
TIMEOUT_INFINITE = C["KDAT_TIMEOUT_INFINITE"]

_SUBTYPE_PREFIXES = ("DAT_NO_SUBTYPE", "DAT_SUB_", "DAT_RESOURCE_", "DAT_INVALID_HANDLE_",
                     "DAT_INVALID_HANDLE1", "DAT_INVALID_HANDLE2", "DAT_INVALID_ARG",
                     "DAT_INVALID_STATE_")
_EVENT_PREFIXES = ("DAT_DTO_COMPLETION_EVENT", "DAT_CONNECTION_REQUEST_EVENT",
                   "DAT_CONNECTION_EVENT_", "DAT_ASYNC_ERROR_", "DAT_SOFTWARE_EVENT")

# DAT return types: the mirror's constants that are a whole type field (and DAT_SUCCESS).
TYPE_NAME = {SUCCESS: "DAT_SUCCESS"}
for _n, _v in DAT.items():
    if (_v and _v & TYPE_MASK == _v and not _v & SUBTYPE_MASK and not _n.startswith(_SUBTYPE_PREFIXES)
            and _n not in ("DAT_TYPE_MASK",)):
        TYPE_NAME[_v] = _n
TYPE_VALUE = {v: k for k, v in TYPE_NAME.items()}
SUBTYPE_NAME = {v: n for n, v in DAT.items() if n.startswith(_SUBTYPE_PREFIXES)}
SUBTYPE_VALUE = {n: v for n, v in DAT.items() if n.startswith(_SUBTYPE_PREFIXES)}
# Event numbers by name without the DAT_ prefix: 'CONNECTION_EVENT_ESTABLISHED', ...
EVENT_VALUE = {n[4:]: v for n, v in DAT.items() if n.startswith(_EVENT_PREFIXES)}
EVENT_NAME = {v: n for n, v in EVENT_VALUE.items()}
# Private data limits over the IB CM (RoCE here): its fields carry REQ 92 bytes of which rdma_cm
# takes 36, REP 196, REJ 148 (IBTA); kdat's own length header comes off each.
PDATA_HEADER = C["KDAT_PRIVATE_DATA_HEADER"]
CONNECT_PDATA_MAX = 92 - 36 - PDATA_HEADER
ACCEPT_PDATA_MAX = 196 - PDATA_HEADER
REJECT_PDATA_MAX = 148 - PDATA_HEADER
STATE_VALUE = dict(TABLE.state_value)   # 'UNCONNECTED' -> DAT_EP_STATE_UNCONNECTED
STATE_NAME = dict(TABLE.state_name)

_ATTR_MASK = {
    "max_rdma_read_in": C["KDAT_EP_ATTR_RDMA_READ_IN"],
    "max_rdma_read_out": C["KDAT_EP_ATTR_RDMA_READ_OUT"],
    "retry_count": C["KDAT_EP_ATTR_RETRY_COUNT"],
    "rnr_retry_count": C["KDAT_EP_ATTR_RNR_RETRY_COUNT"],
    "flow_control": C["KDAT_EP_ATTR_FLOW_CONTROL"],
}

# Every command: short name -> (struct name, ioctl name), from the header.
COMMANDS = {}
for _ioc in U.ioctls:
    _short = _ioc[len("KDAT_IOC_"):].lower()
    COMMANDS[_short] = ("kdat_" + _short, _ioc)


def dat_type(status):
    return status & TYPE_MASK


def dat_subtype(status):
    return status & SUBTYPE_MASK


def is_success(status):
    return status == SUCCESS


def status_name(status):
    """'DAT_INVALID_STATE/DAT_INVALID_STATE_EP_CONNECTED' (or a hex number for unknown parts)."""
    t = TYPE_NAME.get(dat_type(status), hex(dat_type(status)))
    st = dat_subtype(status)
    if st:
        t += "/" + SUBTYPE_NAME.get(st, hex(st))
    if status & ~(TYPE_MASK | SUBTYPE_MASK | CLASS_ERROR):
        t += f" (raw {status:#x})"
    return t


def invalid_state_subtype(state_name):
    """The DAT_INVALID_STATE subtype naming an EP state (as ep_table.h's kdat_ep_invalid_state_subtype)."""
    short = {"UNCONNECTED": "UNCONNECTED", "RESERVED": "RESERVED",
             "PASSIVE_CONNECTION_PENDING": "PASSCONNPENDING",
             "ACTIVE_CONNECTION_PENDING": "ACTCONNPENDING",
             "TENTATIVE_CONNECTION_PENDING": "TENTCONNPENDING", "CONNECTED": "CONNECTED",
             "DISCONNECT_PENDING": "DISCPENDING", "DISCONNECTED": "DISCONNECTED",
             "COMPLETION_PENDING": "COMPLPENDING"}[state_name]
    return DAT["DAT_INVALID_STATE_EP_" + short]


class DatError(Exception):
    """A DAT status other than DAT_SUCCESS, with .status (the full DAT_RETURN), .type, .subtype,
    .type_name ('DAT_INVALID_STATE'), .subtype_name and .op (the command)."""

    def __init__(self, op, status, result=None):
        self.op = op
        self.status = status
        self.type = dat_type(status)
        self.subtype = dat_subtype(status)
        self.type_name = TYPE_NAME.get(self.type, hex(self.type))
        self.subtype_name = SUBTYPE_NAME.get(self.subtype, hex(self.subtype))
        self.result = result
        super().__init__(f"{op}: {status_name(status)} ({status:#x})")


# ---- addresses -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Addr:
    family: int
    ip: str
    port: int
    scope_id: int = 0


def ipv4(ip, port=0):
    """struct kdat_addr for an IPv4 literal (family AF_INET, address in addr[0:4], network order)."""
    a = U.new("kdat_addr")
    a.family = C["KDAT_AF_INET"]
    a.port = port
    packed = socket.inet_aton(ip)
    for i, b in enumerate(packed):
        a.addr[i] = b
    return a


def ipv6(ip, port=0, scope_id=0):
    a = U.new("kdat_addr")
    a.family = C["KDAT_AF_INET6"]
    a.port = port
    a.scope_id = scope_id
    for i, b in enumerate(ipaddress.IPv6Address(ip).packed):
        a.addr[i] = b
    return a


def addr_from(s):
    """struct kdat_addr -> Addr."""
    raw = bytes(s.addr)
    if s.family == C["KDAT_AF_INET"]:
        ip = socket.inet_ntoa(raw[:4])
    elif s.family == C["KDAT_AF_INET6"]:
        ip = str(ipaddress.IPv6Address(raw))
    else:
        ip = ""
    return Addr(s.family, ip, s.port, s.scope_id)


# ---- conversion of results -------------------------------------------------------------------

def _is_struct(t):
    return isinstance(t, type) and issubclass(t, ctypes.Structure)


def to_py(s):
    """A ctypes struct -> SimpleNamespace: char arrays as str, kdat_addr as Addr, nested structs as
    namespaces, other arrays as bytes (u8) or lists; .raw keeps the struct."""
    out = types.SimpleNamespace(raw=s)
    for fname, ftype in s._fields_:
        v = getattr(s, fname)
        if _is_struct(ftype):
            v = addr_from(v) if ftype is U.structs["kdat_addr"] else to_py(v)
        elif issubclass(ftype, ctypes.Array):
            if ftype._type_ is ctypes.c_char:
                v = v.decode(errors="replace")
            elif ftype._type_ is ctypes.c_uint8:
                v = bytes(v)
            else:
                v = list(v)
        setattr(out, fname, v)
    if hasattr(out, "private_data") and hasattr(out, "private_data_size"):
        n = max(0, min(int(out.private_data_size), len(out.private_data)))
        out.private_data = out.private_data[:n]
    return out


@dataclass
class Event:
    number: int
    name: str
    evd: int
    ep: int
    sp: int
    cr: int
    dto_status: int
    cookie: int
    transfered_length: int
    private_data_size: int
    private_data: bytes
    nmore: int = 0
    raw: object = field(default=None, repr=False)
    # a UD exchange's peer (struct kdat_event_ud), when the event ends one (ABI 7)
    ud: object = field(default=None, repr=False)

    @classmethod
    def from_struct(cls, ev, nmore=0, ud=None):
        n = max(0, min(ev.private_data_size, len(ev.private_data)))
        if ud is not None and not ud.flags & C["KDAT_UD_EVENT"]:
            assert bytes(ud) == bytes(len(bytes(ud))), "a tail without KDAT_UD_EVENT is zero"
            ud = None
        return cls(ev.number, EVENT_NAME.get(ev.number, hex(ev.number)), ev.evd, ev.ep, ev.sp,
                   ev.cr, ev.dto_status, ev.cookie, ev.transfered_length, ev.private_data_size,
                   bytes(ev.private_data)[:n], nmore, ev, ud)


# ---- the client ------------------------------------------------------------------------------

class Kdat:
    """One open file of /dev/kdat with a method per ioctl."""

    EVD_DTO = C["KDAT_EVD_DTO"]
    EVD_CONNECTION = C["KDAT_EVD_CONNECTION"]
    EVD_CR = C["KDAT_EVD_CR"]
    EVD_ALL = C["KDAT_EVD_FLAGS_ALL"]
    EVD_RING_MODE = C["KDAT_EVD_RING_MODE"]

    def __init__(self, device=None):
        self.dev = device if device is not None else guest.Device()

    @property
    def fd(self):
        return self.dev.fd

    def close(self):
        self.dev.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- raw access --
    @staticmethod
    def new(cmd, **fields):
        """The zeroed request struct of a command ('ep_connect') with size set and fields filled in.
        private_data=bytes also sets private_data_size unless it is given; addresses may be given
        as an IPv4 literal string."""
        sname, _ = COMMANDS[cmd]
        s = U.new(sname)
        pd = fields.pop("private_data", None)
        if pd is not None:
            pd = bytes(pd)
            arr = s.private_data
            if len(pd) > len(arr):
                raise ValueError(f"private data of {len(pd)} bytes does not fit the struct")
            for i, b in enumerate(pd):
                arr[i] = b
            if fields.get("private_data_size") is None:
                fields["private_data_size"] = len(pd)
        for k, v in fields.items():
            if v is None:
                continue
            if k == "attr" and isinstance(v, dict):
                for ak, av in v.items():
                    setattr(s.attr, ak, av)
                continue
            if isinstance(v, str) and k.endswith("addr"):
                v = ipv4(v)
            elif isinstance(v, str):
                v = v.encode()
            setattr(s, k, v)
        return s

    def ioctl(self, cmd, struct):
        """Issue a command with a prepared struct (cmd: 'ep_connect' or an ioctl number)."""
        name = COMMANDS[cmd][1] if isinstance(cmd, str) else cmd
        return self.dev.ioctl(name, struct)

    def ioctl_errno(self, cmd, struct=None):
        name = COMMANDS[cmd][1] if isinstance(cmd, str) else cmd
        return self.dev.ioctl_errno(name, struct)

    def call(self, cmd, **fields):
        """The result struct of one command; never raises on the DAT status (OSError still)."""
        return self.ioctl(cmd, self.new(cmd, **fields))

    def status(self, cmd, **fields):
        return self.call(cmd, **fields).status

    def do(self, cmd, **fields):
        """call() and raise DatError unless DAT_SUCCESS."""
        r = self.call(cmd, **fields)
        if not is_success(r.status):
            raise DatError(cmd, r.status, r)
        return r

    # -- module --
    def version(self):
        return to_py(self.call("version"))

    # -- IA --
    def ia_open(self, name, flags=0):
        return self.do("ia_open", name=name, flags=flags).ia

    def ia_close(self, ia, graceful=False):
        flags = C["KDAT_IA_CLOSE_GRACEFUL"] if graceful else C["KDAT_IA_CLOSE_ABRUPT"]
        self.do("ia_close", ia=ia, flags=flags)

    def ia_query(self, ia):
        return to_py(self.do("ia_query", ia=ia))

    def ia_counters(self, ia, table=0):
        """{name: value} of an IA's counters (this file's, or of table `table`), in list order;
        raises DatError (INVALID_HANDLE, PRIVILEGES_VIOLATION, INVALID_PARAMETER)."""
        r = self.do("ia_counters", table=table, ia=ia)
        names = U.counters
        assert r.count == len(names), (r.count, names)
        return {name: r.value[i] for i, name in enumerate(names)}

    # -- EVD --
    def evd_create(self, ia, qlen=16, flags=None, ring=False):
        """An EVD; ring=True creates it in ring mode (KDAT_EVD_RING_MODE): evd_ring() maps its
        ring, which is then the only way to its events."""
        flags = self.EVD_ALL if flags is None else flags
        return self.do("evd_create", ia=ia, qlen=qlen,
                       flags=flags | (self.EVD_RING_MODE if ring else 0)).evd

    def evd_free(self, evd):
        self.do("evd_free", evd=evd)

    def evd_wait(self, evd, timeout_us, threshold=1):
        """The next event; DatError (type DAT_TIMEOUT_EXPIRED) when none came in time."""
        r = self.do("evd_wait", evd=evd, timeout_us=timeout_us, threshold=threshold)
        return Event.from_struct(r.event, r.nmore, r.ud)

    def try_wait(self, evd, timeout_us, threshold=1):
        """The next event, or None on DAT_TIMEOUT_EXPIRED."""
        try:
            return self.evd_wait(evd, timeout_us, threshold)
        except DatError as e:
            if e.type == DAT["DAT_TIMEOUT_EXPIRED"]:
                return None
            raise

    def evd_dequeue(self, evd):
        r = self.do("evd_dequeue", evd=evd)
        return Event.from_struct(r.event, r.nmore, r.ud)

    def try_dequeue(self, evd):
        try:
            return self.evd_dequeue(evd)
        except DatError as e:
            if e.type == DAT["DAT_QUEUE_EMPTY"]:
                return None
            raise

    def expect_event(self, evd, name, timeout_us=5_000_000):
        """Wait for the next event and assert it is `name` ('CONNECTION_EVENT_ESTABLISHED' or just
        'ESTABLISHED' for connection events)."""
        if name not in EVENT_VALUE:
            name = "CONNECTION_EVENT_" + name
        ev = self.try_wait(evd, timeout_us)
        assert ev is not None, f"no event on EVD {evd} within {timeout_us} us, expected {name}"
        assert ev.name == name, f"expected {name}, got {ev}"
        return ev

    def expect_no_event(self, evd, timeout_us=300_000):
        ev = self.try_wait(evd, timeout_us)
        assert ev is None, f"unexpected event on EVD {evd}: {ev}"

    # -- EP --
    def ep_create(self, ia, connect_evd, request_evd=0, recv_evd=0, **attrs):
        return self.do("ep_create", ia=ia, connect_evd=connect_evd, request_evd=request_evd,
                       recv_evd=recv_evd, attr=attrs).ep

    def ep_free(self, ep):
        self.do("ep_free", ep=ep)

    def ep_query(self, ep):
        """Namespace: state (name), state_value, attr (namespace), local_addr, remote_addr (Addr),
        connect_evd, request_evd, recv_evd, transitions."""
        q = to_py(self.do("ep_query", ep=ep))
        q.state_value = q.state
        q.state = STATE_NAME.get(q.state, hex(q.state))
        return q

    def ep_state(self, ep):
        return self.ep_query(ep).state

    def ep_modify(self, ep, mask=None, **attrs):
        if mask is None:
            mask = 0
            for k in attrs:
                mask |= _ATTR_MASK[k]
        self.do("ep_modify", ep=ep, mask=mask, attr=attrs)

    def ep_reset(self, ep):
        self.do("ep_reset", ep=ep)

    @staticmethod
    def _connect_fields(private_data, private_data_size):
        return {"private_data": private_data, "private_data_size": private_data_size}

    def ep_connect(self, ep, addr, conn_qual, timeout_us, private_data=b"", qos=0, flags=0,
                   private_data_size=None):
        if isinstance(addr, str):
            addr = ipv4(addr)
        self.do("ep_connect", ep=ep, remote_addr=addr, conn_qual=conn_qual, timeout_us=timeout_us,
                qos=qos, flags=flags, **self._connect_fields(private_data, private_data_size))

    def ep_dup_connect(self, ep, dup_ep, timeout_us, private_data=b"", qos=0,
                       private_data_size=None):
        self.do("ep_dup_connect", ep=ep, dup_ep=dup_ep, timeout_us=timeout_us, qos=qos,
                **self._connect_fields(private_data, private_data_size))

    def ep_disconnect(self, ep, graceful=False, flags=None):
        if flags is None:
            flags = C["KDAT_CLOSE_GRACEFUL"] if graceful else C["KDAT_CLOSE_ABRUPT"]
        self.do("ep_disconnect", ep=ep, flags=flags)

    # -- service points and CRs --
    def psp_create(self, ia, evd, conn_qual, provider=False, flags=None):
        if flags is None:
            flags = C["KDAT_PSP_PROVIDER"] if provider else C["KDAT_PSP_CONSUMER"]
        return self.do("psp_create", ia=ia, evd=evd, conn_qual=conn_qual, flags=flags).psp

    def psp_free(self, psp):
        self.do("psp_free", psp=psp)

    def psp_query(self, psp):
        return to_py(self.do("psp_query", psp=psp))

    def rsp_create(self, ia, ep, conn_qual, evd):
        return self.do("rsp_create", ia=ia, ep=ep, conn_qual=conn_qual, evd=evd).rsp

    def rsp_free(self, rsp):
        self.do("rsp_free", rsp=rsp)

    def cr_query(self, cr):
        return to_py(self.do("cr_query", cr=cr))

    def cr_accept(self, cr, ep=0, private_data=b"", private_data_size=None):
        self.do("cr_accept", cr=cr, ep=ep, private_data=private_data,
                private_data_size=private_data_size)

    def cr_reject(self, cr, private_data=b"", private_data_size=None):
        self.do("cr_reject", cr=cr, private_data=private_data, private_data_size=private_data_size)

    # -- shared object table (ABI 3) --
    def table(self, length=None):
        """This file's object table, mapped read-only at KDAT_MMAP_TABLE (shared.ObjectTable)."""
        from .shared import TABLE_MAP_SIZE, ObjectTable
        return ObjectTable(self.fd, C["KDAT_MMAP_TABLE"], length or TABLE_MAP_SIZE)

    def view(self, length=None):
        """The table KDAT_IOC_TABLE_ATTACH selected, mapped at KDAT_MMAP_VIEW."""
        from .shared import TABLE_MAP_SIZE, ObjectTable
        return ObjectTable(self.fd, C["KDAT_MMAP_VIEW"], length or TABLE_MAP_SIZE)

    def table_list_raw(self, capacity=64, tables=None):
        """KDAT_IOC_TABLE_LIST into a ctypes array of `capacity` kdat_table_info (or the given one):
        (result struct, array)."""
        info = U.structs["kdat_table_info"]
        if tables is None:
            tables = (info * max(capacity, 1))()
        ptr = ctypes.addressof(tables) if capacity else 0
        r = self.call("table_list", capacity=capacity, tables=ptr)
        return r, tables

    def table_list(self, capacity=64):
        """(count, [namespace of each kdat_table_info returned]); grows the array until all fit."""
        while True:
            r, arr = self.table_list_raw(capacity)
            if not is_success(r.status):
                raise DatError("table_list", r.status, r)
            if r.count <= capacity:
                return r.count, [to_py(arr[i]) for i in range(r.count)]
            capacity = r.count + 8

    def table_attach(self, table_id):
        self.do("table_attach", id=table_id)

    # -- event rings (ABI 3) --
    def evd_ring(self, evd, map_it=True):
        """KDAT_IOC_EVD_RING: a shared.Ring with the ring's fd, mapped read/write (unless map_it
        is False)."""
        from .shared import Ring
        return Ring(self, evd, self.do("evd_ring", evd=evd), map_it)

    def evd_ring_wait(self, evd, threshold=1, timeout_us=0):
        """The KDAT_IOC_EVD_RING_WAIT result struct (status, available), not raising."""
        return self.call("evd_ring_wait", evd=evd, threshold=threshold, timeout_us=timeout_us)


# ---- test helpers ----------------------------------------------------------------------------

_ports = itertools.count(20000 + (os.getpid() % 50) * 400)


def next_port():
    """A connection qualifier no other test in this run uses."""
    return next(_ports)


def host_addr():
    return os.environ.get("KDAT_TEST_ADDR", "192.0.2.1")


def host_netdev():
    return os.environ.get("KDAT_TEST_NETDEV", "kdat0")


@dataclass
class Side:
    """One side of a connection: a Kdat file with an IA, a connection EVD and a CR EVD."""
    k: Kdat
    ia: int
    evd: int     # connection events
    crevd: int   # CR events (created with CR and CONNECTION flags: provider EPs may post here)

    def ep(self, **attrs):
        return self.k.ep_create(self.ia, self.evd, **attrs)


def side(k, name=None, qlen=32, ring=False):
    """An IA with a connection EVD and a CR EVD; ring=True makes both ring-mode EVDs (their
    events then come only through evd_ring())."""
    ia = k.ia_open(name or host_addr())
    evd = k.evd_create(ia, qlen, Kdat.EVD_CONNECTION, ring=ring)
    crevd = k.evd_create(ia, qlen, Kdat.EVD_CR | Kdat.EVD_CONNECTION, ring=ring)
    return Side(k, ia, evd, crevd)


def wait_cr(s, timeout_us=5_000_000):
    """The next CONNECTION_REQUEST_EVENT on a side's CR EVD."""
    return s.k.expect_event(s.crevd, "CONNECTION_REQUEST_EVENT", timeout_us)


def wait_state(k, ep, state, timeout_s=5.0):
    """Poll ep_query until the EP reaches `state`; returns the last state seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        st = k.ep_state(ep)
        if st == state or time.monotonic() > deadline:
            return st
        time.sleep(0.02)


def connect_pair(client, server, port=None, client_pd=b"", accept_pd=b"", client_attrs=None,
                 server_attrs=None, timeout_us=5_000_000):
    """Connect a new client EP to a new server EP through a consumer PSP; both ESTABLISHED.
    Returns a namespace: port, psp, cep, sep, cr (its query), cev (client event), sev."""
    port = port or next_port()
    psp = server.k.psp_create(server.ia, server.crevd, port)
    cep = client.ep(**(client_attrs or {}))
    sep = server.ep(**(server_attrs or {}))
    client.k.ep_connect(cep, host_addr(), port, timeout_us, private_data=client_pd)
    crev = wait_cr(server)
    cr = server.k.cr_query(crev.cr)
    server.k.cr_accept(crev.cr, sep, private_data=accept_pd)
    cev = client.k.expect_event(client.evd, "ESTABLISHED")
    sev = server.k.expect_event(server.evd, "ESTABLISHED")
    return types.SimpleNamespace(port=port, psp=psp, cep=cep, sep=sep, cr=cr, crev=crev, cev=cev,
                                 sev=sev)


def expect_dat_error(type_name, fn, *args, subtype=None, **kwargs):
    """Call fn and assert it raises DatError of that type (and subtype name/value if given)."""
    if not type_name.startswith("DAT_"):
        type_name = "DAT_" + type_name
    try:
        fn(*args, **kwargs)
    except DatError as e:
        assert e.type_name == type_name, f"expected {type_name}, got {e}"
        if subtype is not None:
            want = subtype if isinstance(subtype, int) else SUBTYPE_VALUE[subtype]
            assert e.subtype == want, f"expected subtype {SUBTYPE_NAME.get(want, want)}, got {e}"
        return e
    raise AssertionError(f"expected {type_name}, but the call succeeded")


# ---- pytest fixtures (import them into a test module to use them) ---------------------------

# Destinations on the test netdev's subnet (192.0.2.0/24) that nobody answers for:
SILENT_HOST = "192.0.2.99"   # no neighbour: address resolution gives up after 2 s (UNREACHABLE)
BLACK_HOLE = "192.0.2.98"    # with the black_hole fixture's neighbour entry, REQs go nowhere

# Only where pytest runs already: importing it is most of this module's import time (seconds
# under TCG), which every agent and owner process the tests start (agent.py,
# test_table_view.py) would pay again for fixtures it never uses.
pytest = sys.modules.get("pytest")

if pytest is not None:
    @pytest.fixture
    def kd(dev):
        """A Kdat over the conftest's `dev` (module loaded, kernel log checked)."""
        k = Kdat(dev)
        yield k
        k.close()

    @pytest.fixture
    def kdat_files(kdat_module, kernel_log):
        """A factory of extra Kdat files, all closed at the end of the test."""
        opened = []

        def make():
            k = Kdat()
            opened.append(k)
            return k
        yield make
        for k in opened:
            k.close()

    @pytest.fixture
    def server(kdat_files, rdma):
        """A Side on its own file."""
        return side(kdat_files())

    @pytest.fixture
    def client(kdat_files, rdma):
        """A Side on its own file."""
        return side(kdat_files())

    @pytest.fixture
    def black_hole(rdma):
        """BLACK_HOLE made a permanent neighbour of the test netdev for the test."""
        dev = rdma["KDAT_TEST_NETDEV"]
        guest.run("ip", "neigh", "replace", BLACK_HOLE, "lladdr", "02:00:00:00:00:98", "dev", dev,
                  "nud", "permanent")
        yield BLACK_HOLE
        guest.run("ip", "neigh", "del", BLACK_HOLE, "dev", dev, check=False)
