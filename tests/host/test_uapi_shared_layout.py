"""ABI 3's shared memory (the object table and the event rings) is laid out by constants in
include/kdat/uapi/kdat.h: they must agree with each other, with the structs, and the harness's reading of
them with the C compiler's."""
import ctypes
import os
import subprocess
import tempfile

import pytest

from kdat_harness import INCLUDE
from kdat_harness.uapi import Uapi

U = Uapi()
C = U.consts
PAGE = 4096
RING_SIZES = [1, 2, 3, 4, 7, 64, 1000, 4096]
HANDLES = [0x00010001, 0xFFFF0001, 0x12345678, 0xFFFFFFFF, 0x0000FFFF]


def _compile_and_run(body_lines):
    src = "\n".join(["#include <stdio.h>", "#include <stddef.h>", "#include <kdat/uapi/kdat.h>",
                     "int main(void) {", *body_lines, "return 0; }"])
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "c.c"), "w") as f:
            f.write(src)
        exe = os.path.join(d, "c")
        subprocess.run(["cc", "-Wall", "-Werror", "-I", INCLUDE, "-o", exe, os.path.join(d, "c.c")],
                       check=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    return dict(line.split() for line in out.splitlines())


@pytest.fixture(scope="module")
def c_values():
    lines = []
    for name in ("KDAT_TABLE_MAP_SIZE", "KDAT_MMAP_TABLE", "KDAT_MMAP_VIEW", "KDAT_TABLE_MAGIC",
                 "KDAT_TABLE_HEADER_SIZE", "KDAT_TABLE_RECORD_SIZE", "KDAT_TABLE_MAX_SLOTS",
                 "KDAT_RING_ENTRIES_OFFSET", "KDAT_RING_MAX_ENTRIES"):
        lines.append(f'printf("{name} %llu\\n", (unsigned long long)({name}));')
    for n in RING_SIZES:
        lines.append(f'printf("RING_MAP_SIZE_{n} %llu\\n", (unsigned long long)KDAT_RING_MAP_SIZE({n}));')
    for h in HANDLES:
        lines.append(f'printf("SLOT_{h:#x} %llu\\n", (unsigned long long)KDAT_HANDLE_SLOT({h:#x}u));')
        lines.append(f'printf("GEN_{h:#x} %llu\\n", (unsigned long long)KDAT_HANDLE_GENERATION({h:#x}u));')
    return {k: int(v) for k, v in _compile_and_run(lines).items()}


def test_harness_reads_the_mmap_constants_as_the_compiler_does(c_values):
    for name in ("KDAT_TABLE_MAP_SIZE", "KDAT_MMAP_TABLE", "KDAT_MMAP_VIEW", "KDAT_TABLE_MAGIC",
                 "KDAT_TABLE_HEADER_SIZE", "KDAT_TABLE_RECORD_SIZE", "KDAT_TABLE_MAX_SLOTS",
                 "KDAT_RING_ENTRIES_OFFSET", "KDAT_RING_MAX_ENTRIES"):
        assert C[name] == c_values[name], name


def test_harness_evaluates_the_function_like_macros_as_the_compiler_does(c_values):
    for n in RING_SIZES:
        assert U.macro("KDAT_RING_MAP_SIZE", n) == c_values[f"RING_MAP_SIZE_{n}"], n
    for h in HANDLES:
        assert U.macro("KDAT_HANDLE_SLOT", h) == c_values[f"SLOT_{h:#x}"]
        assert U.macro("KDAT_HANDLE_GENERATION", h) == c_values[f"GEN_{h:#x}"]
        assert (U.macro("KDAT_HANDLE_GENERATION", h) << 16) | U.macro("KDAT_HANDLE_SLOT", h) == h


def test_table_map_size_is_the_header_page_and_every_slot():
    hdr = U.structs["kdat_table_header"]
    rec = U.structs["kdat_record"]
    assert ctypes.sizeof(rec) == C["KDAT_TABLE_RECORD_SIZE"] == 128
    assert ctypes.sizeof(hdr) <= C["KDAT_TABLE_HEADER_SIZE"]
    assert C["KDAT_TABLE_HEADER_SIZE"] % PAGE == 0
    assert PAGE % C["KDAT_TABLE_RECORD_SIZE"] == 0, "a record must not straddle pages"
    assert C["KDAT_TABLE_MAP_SIZE"] == (C["KDAT_TABLE_HEADER_SIZE"]
                                        + C["KDAT_TABLE_MAX_SLOTS"] * C["KDAT_TABLE_RECORD_SIZE"])
    assert C["KDAT_TABLE_MAP_SIZE"] % PAGE == 0
    # a handle's slot field covers exactly the table's slots
    assert C["KDAT_TABLE_MAX_SLOTS"] == U.macro("KDAT_HANDLE_SLOT", 0xFFFFFFFF) + 1


def test_mmap_offsets_are_page_aligned_and_the_view_does_not_overlap_the_table():
    assert C["KDAT_MMAP_TABLE"] % PAGE == 0
    assert C["KDAT_MMAP_VIEW"] % PAGE == 0
    assert C["KDAT_MMAP_VIEW"] >= C["KDAT_MMAP_TABLE"] + C["KDAT_TABLE_MAP_SIZE"]


def test_record_fields_the_readers_rely_on():
    rec = U.structs["kdat_record"]
    assert rec.seq.offset == 0 and rec.seq.size == 4          # the seqcount comes first
    assert rec.handle.size == 4 and rec.generation.size == 2  # generation is handle >> 16
    for f, t in rec._fields_:
        if ctypes.sizeof(t) == 8 and not issubclass(t, ctypes.Array):
            assert getattr(rec, f).offset % 8 == 0, f
    assert U.structs["kdat_table_header"].high_water.offset % 4 == 0
    assert C["KDAT_TABLE_MAGIC"].to_bytes(4, "big") == b"kdat"


def test_ring_layout_is_self_consistent():
    ring = U.structs["kdat_ring_header"]
    ev = U.structs["kdat_ring_entry"]
    # an entry begins with the event as ABI 6 had it, so an older library reads its prefix
    assert U.structs["kdat_ring_entry"].event.offset == 0
    assert ctypes.sizeof(ev) == ctypes.sizeof(U.structs["kdat_event"]) + \
        ctypes.sizeof(U.structs["kdat_event_ud"])
    assert ctypes.sizeof(ring) <= C["KDAT_RING_ENTRIES_OFFSET"]
    assert C["KDAT_RING_ENTRIES_OFFSET"] % PAGE == 0
    # head is the consumer's: its own cache line, apart from everything the kernel writes
    assert ring.head.offset == 0
    assert ring.tail.offset >= 64
    assert all(getattr(ring, f).offset >= 64 for f, _ in ring._fields_ if f not in ("head", "pad0"))
    m = C["KDAT_RING_MAX_ENTRIES"]
    assert m > 0 and m & (m - 1) == 0, "the ring size cap is a power of two"
    assert ctypes.sizeof(ev) % 8 == 0, "ring entries keep their u64 cookie aligned"
    for n in RING_SIZES:
        assert U.macro("KDAT_RING_MAP_SIZE", n) == C["KDAT_RING_ENTRIES_OFFSET"] + n * ctypes.sizeof(ev)


def test_new_ioctls_take_their_own_structs():
    for name, sname in [("KDAT_IOC_TABLE_LIST", "kdat_table_list"),
                        ("KDAT_IOC_TABLE_ATTACH", "kdat_table_attach"),
                        ("KDAT_IOC_EVD_RING", "kdat_evd_ring"),
                        ("KDAT_IOC_EVD_RING_WAIT", "kdat_evd_ring_wait")]:
        assert (U.ioctls[name] >> 16) & 0x3FFF == ctypes.sizeof(U.structs[sname]), name
    assert len(set(U.ioctls.values())) == len(U.ioctls), "two commands share a number"
