"""Readers of the memory /dev/kdat shares with userspace (include/kdat/uapi/kdat.h, ABI 3):

- ObjectTable: the shared object table (mmap of /dev/kdat at KDAT_MMAP_TABLE or KDAT_MMAP_VIEW),
  read with the header's seqcount protocol;
- Ring: an EVD's event ring (KDAT_IOC_EVD_RING's file), consumed with the header's head/tail
  protocol.

Mappings are made with libc's mmap() through ctypes, not Python's mmap module: that one dup()s the
file descriptor (so close() of the file would not be the last close while a mapping exists) and
cannot give the address mprotect() needs for a read-only mapping.

Nothing here is retyped from the header: every size, offset and flag comes from the parsed uapi.
"""
import ctypes
import errno
import mmap as _mmap
import os
import time
import weakref

from . import guest

U = guest.UAPI
C = U.consts

PROT_READ = _mmap.PROT_READ
PROT_WRITE = _mmap.PROT_WRITE
MAP_SHARED = _mmap.MAP_SHARED
MAP_PRIVATE = _mmap.MAP_PRIVATE
PAGE = _mmap.PAGESIZE

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mprotect.restype = ctypes.c_int
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_MAP_FAILED = ctypes.c_void_p(-1).value

Record = U.structs["kdat_record"]
Header = U.structs["kdat_table_header"]
RingHeader = U.structs["kdat_ring_header"]
EventStruct = U.structs["kdat_event"]
UdStruct = U.structs["kdat_event_ud"]
EntryStruct = U.structs["kdat_ring_entry"]

HEADER_SIZE = C["KDAT_TABLE_HEADER_SIZE"]
RECORD_SIZE = C["KDAT_TABLE_RECORD_SIZE"]
MAX_SLOTS = C["KDAT_TABLE_MAX_SLOTS"]
TABLE_MAP_SIZE = C["KDAT_TABLE_MAP_SIZE"]
RING_ENTRIES_OFFSET = C["KDAT_RING_ENTRIES_OFFSET"]

# Offsets of the fields the protocols load and store on their own.
_SEQ = Record.seq.offset
_HIGH_WATER = Header.high_water.offset


def handle_slot(h):
    return h & 0xFFFF          # KDAT_HANDLE_SLOT


def handle_generation(h):
    return h >> 16             # KDAT_HANDLE_GENERATION


def ring_map_size(entries):
    """KDAT_RING_MAP_SIZE(entries), evaluated from the header's macro."""
    return U.macro("KDAT_RING_MAP_SIZE", entries)


class Mapping:
    """One mmap() of a file: .addr, .length; u32/u64 loads and stores, bytes; close() unmaps."""

    def __init__(self, fd, length, prot=PROT_READ, flags=MAP_SHARED, offset=0):
        addr = _libc.mmap(None, length, prot, flags, fd, offset)
        if addr is None or addr == _MAP_FAILED:
            e = ctypes.get_errno()
            raise OSError(e, f"mmap(fd {fd}, {length:#x}, prot {prot}, flags {flags}, "
                             f"offset {offset:#x}): {os.strerror(e)}")
        self.addr = addr
        self.length = length
        self._unmapper = weakref.finalize(self, _libc.munmap, addr, length)
        guest.track(self)

    def __repr__(self):
        return f"Mapping({self.addr and hex(self.addr)}, {self.length:#x})"

    @staticmethod
    def try_map(fd, length, prot=PROT_READ, flags=MAP_SHARED, offset=0):
        """0 and the mapping, or the errno and None."""
        try:
            return 0, Mapping(fd, length, prot, flags, offset)
        except OSError as e:
            return e.errno, None

    def _check(self, off, n):
        if self.addr is None:
            raise ValueError("mapping is closed")
        if off < 0 or off + n > self.length:
            raise IndexError(f"[{off:#x}, +{n}) outside the mapping of {self.length:#x} bytes")
        return self.addr + off

    def u32(self, off):
        return ctypes.c_uint32.from_address(self._check(off, 4)).value

    def set_u32(self, off, v):
        ctypes.c_uint32.from_address(self._check(off, 4)).value = v & 0xFFFFFFFF

    def u64(self, off):
        return ctypes.c_uint64.from_address(self._check(off, 8)).value

    def read(self, off, n):
        return ctypes.string_at(self._check(off, n), n)

    def mprotect(self, prot, length=None):
        """0, or the errno mprotect() failed with."""
        if _libc.mprotect(self.addr, length or self.length, prot) == 0:
            return 0
        return ctypes.get_errno()

    def close(self):
        if self.addr is not None:
            self._unmapper()
            self.addr = None
            guest.untrack(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- the shared object table ------------------------------------------------------------------

class StaleRecord(LookupError):
    """The slot a handle names holds another handle (or none): the object was freed."""

    def __init__(self, handle, rec):
        self.handle = handle
        self.record = rec
        got = rec.handle if rec is not None else None
        super().__init__(f"handle {handle:#x}: slot {handle_slot(handle)} holds "
                         f"{'nothing readable' if got is None else hex(got)}")


class TornRecord(RuntimeError):
    """The seqcount never settled: the kernel left a record half-written."""


class ObjectTable:
    """A read-only mapping of an object table (the file's own, or the attached view).

        t = k.table()
        t.header()             # struct kdat_table_header (a copy)
        t.record(handle)       # struct kdat_record of that handle, or StaleRecord
        t.slot(n)              # the record in slot n, whatever it holds
        t.all_records()        # [(slot, record)] for slots 1..high_water
        t.live_records()       # the same, handle != 0 only
    """

    RETRIES = 200_000

    def __init__(self, fd, offset=C["KDAT_MMAP_TABLE"], length=TABLE_MAP_SIZE):
        self.map = Mapping(fd, length, PROT_READ, MAP_SHARED, offset)
        self.offset = offset
        self.torn_retries = 0   # how often a read had to retry (for the curious)

    def close(self):
        self.map.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def header(self):
        return Header.from_buffer_copy(self.map.read(0, ctypes.sizeof(Header)))

    def high_water(self):
        # x86 loads are acquire loads; the kernel publishes high_water with a release store
        return self.map.u32(_HIGH_WATER)

    @staticmethod
    def slot_offset(slot):
        return HEADER_SIZE + slot * RECORD_SIZE

    def slot(self, slot):
        """The record in `slot`, read with the seqcount protocol.  Only slots up to high_water are
        read (a record page past it may not exist: touching it would raise SIGBUS)."""
        if not 1 <= slot < MAX_SLOTS:
            raise IndexError(f"slot {slot} out of range")
        hw = self.high_water()
        if slot > hw:
            raise IndexError(f"slot {slot} is past high_water {hw}")
        off = self.slot_offset(slot)
        for _ in range(self.RETRIES):
            s = self.map.u32(off + _SEQ)
            if s & 1:
                self.torn_retries += 1
                continue
            raw = self.map.read(off, RECORD_SIZE)
            if self.map.u32(off + _SEQ) == s:
                return Record.from_buffer_copy(raw)
            self.torn_retries += 1
        raise TornRecord(f"slot {slot}: seq never settled (last {self.map.u32(off + _SEQ)})")

    def record(self, handle):
        """The record of a live handle; StaleRecord if the slot holds another handle or none."""
        slot = handle_slot(handle)
        if slot == 0 or slot > self.high_water():
            raise StaleRecord(handle, None)
        rec = self.slot(slot)
        if rec.handle != handle:
            raise StaleRecord(handle, rec)
        return rec

    def find(self, handle):
        """record(handle) or None."""
        try:
            return self.record(handle)
        except StaleRecord:
            return None

    def all_records(self):
        return [(s, self.slot(s)) for s in range(1, self.high_water() + 1)]

    def live_records(self):
        return [(s, r) for s, r in self.all_records() if r.handle != 0]

    def wait_for(self, pred, handle=None, timeout=10.0):
        """Re-read until pred(record) (or pred(header) without a handle) holds; returns the last
        copy.  For state the kernel changes without posting an event to await."""
        deadline = time.monotonic() + timeout
        while True:
            cur = self.find(handle) if handle is not None else self.header()
            if cur is not None and pred(cur):
                return cur
            if time.monotonic() > deadline:
                return cur
            time.sleep(0.01)

    def mapped_pages(self):
        """The pages that are safe to touch: the header page and the record pages that hold slots
        0..high_water."""
        last = self.slot_offset(self.high_water()) + RECORD_SIZE
        return range(0, min(last, self.map.length), PAGE)


# ---- event rings -----------------------------------------------------------------------------

class Ring:
    """An EVD's event ring: .fd (the ring's file), .entries, .map_size, .evd, .map (a Mapping).

        ring = k.evd_ring(evd)
        ring.take()            # [Event] consumed per the header's protocol (advances head)
        ring.wait(threshold, timeout_us)   # KDAT_IOC_EVD_RING_WAIT: the result struct
        ring.drain(n, timeout_us)          # take n events, refilling with RING_WAIT when needed
    """

    def __init__(self, k, evd, result, map_it=True):
        self.k = k
        self.evd = evd
        self.fd = result.fd
        self.entries = result.entries
        self.map_size = result.map_size
        self.off = result.off    # where the fields are: the kernel says (struct kdat_ring_offsets)
        self.result = result
        self.map = None
        self._closer = weakref.finalize(self, os.close, self.fd)
        guest.track(self)
        if map_it:
            self.map = Mapping(self.fd, self.map_size, PROT_READ | PROT_WRITE, MAP_SHARED, 0)

    def __repr__(self):
        return f"Ring(evd {self.evd:#x}, fd {self.fd})"

    def close(self):
        if self.map is not None:
            self.map.close()
            self.map = None
        if self.fd >= 0:
            self._closer()
            self.fd = -1
            guest.untrack(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def header(self):
        return RingHeader.from_buffer_copy(self.map.read(0, ctypes.sizeof(RingHeader)))

    @property
    def head(self):
        return self.map.u32(self.off.head)

    @head.setter
    def head(self, v):
        self.map.set_u32(self.off.head, v)

    @property
    def tail(self):
        return self.map.u32(self.off.tail)

    def available(self):
        return (self.tail - self.head) & 0xFFFFFFFF

    def entry(self, index):
        """The raw struct kdat_event at ring position `index` (masked)."""
        mask = self.map.u32(self.off.mask)
        off = self.off.array + (index & mask) * self.map.u32(self.off.entry_size)
        return EventStruct.from_buffer_copy(self.map.read(off, ctypes.sizeof(EventStruct)))

    def entry_ud(self, index):
        """The UD tail of the entry at `index` (struct kdat_event_ud), after its event."""
        mask = self.map.u32(self.off.mask)
        size = self.map.u32(self.off.entry_size)
        assert size == ctypes.sizeof(EntryStruct), size
        off = self.off.array + (index & mask) * size + ctypes.sizeof(EventStruct)
        return UdStruct.from_buffer_copy(self.map.read(off, ctypes.sizeof(UdStruct)))

    def take(self, limit=None):
        """Consume what the ring holds (up to `limit`): load tail (acquire), read the entries from
        head, then store the new head (release)."""
        from .dat import Event
        t = self.tail
        h = self.head
        n = (t - h) & 0xFFFFFFFF
        if n > self.entries:
            raise AssertionError(f"ring of {self.entries} claims {n} events (head {h}, tail {t})")
        if limit is not None:
            n = min(n, limit)
        out = [Event.from_struct(self.entry(h + i), ud=self.entry_ud(h + i)) for i in range(n)]
        if n:
            self.head = (h + n) & 0xFFFFFFFF
        return out

    def wait(self, threshold=1, timeout_us=0):
        """KDAT_IOC_EVD_RING_WAIT; the result struct (status, available), never raising on the
        DAT status."""
        return self.k.call("evd_ring_wait", evd=self.evd, threshold=threshold,
                           timeout_us=timeout_us)

    def drain(self, n, timeout_us=5_000_000, max_take=None):
        """Take n events: whatever the ring has, then RING_WAIT (which also moves the backlog in)
        for more; returns them in order.  Fails on a DAT error or when they do not come in time."""
        from .dat import is_success, status_name
        got = []
        deadline = time.monotonic() + timeout_us / 1e6
        while len(got) < n:
            want = n - len(got)
            evs = self.take(want if max_take is None else min(want, max_take))
            got.extend(evs)
            if len(got) >= n:
                break
            left = int((deadline - time.monotonic()) * 1e6)
            if left <= 0:
                raise AssertionError(f"only {len(got)} of {n} events within {timeout_us} us: "
                                     f"{[e.name for e in got]}")
            r = self.wait(1, left)
            if not is_success(r.status):
                raise AssertionError(f"ring_wait: {status_name(r.status)} after {len(got)} of "
                                     f"{n} events")
        return got


__all__ = ["Mapping", "ObjectTable", "Ring", "StaleRecord", "TornRecord", "handle_slot",
           "handle_generation", "ring_map_size", "PROT_READ", "PROT_WRITE", "MAP_SHARED",
           "MAP_PRIVATE", "PAGE", "errno"]
