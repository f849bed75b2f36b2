"""The Python view of the ABI must match the C compiler's, and the DAT mirror must match DAT."""
import ctypes
import os
import subprocess
import tempfile

from kdat_harness import INCLUDE, REPO
from kdat_harness.uapi import Uapi

U = Uapi()


def _c_layout(structs):
    """sizeof and offsetof of each struct field, from the C compiler."""
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <kdat/uapi/kdat.h>", "int main(void) {"]
    for name, cls in structs.items():
        lines.append(f'printf("{name} size %zu\\n", sizeof(struct {name}));')
        for fname, _ in cls._fields_:
            lines.append(f'printf("{name}.{fname} %zu\\n", offsetof(struct {name}, {fname}));')
    lines.append("return 0; }")
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "layout.c")
        with open(src, "w") as f:
            f.write("\n".join(lines))
        exe = os.path.join(d, "layout")
        subprocess.run(["cc", "-I", INCLUDE, "-o", exe, src], check=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    return dict(line.rsplit(" ", 1) for line in out.splitlines())


def test_struct_layouts_match_the_compiler():
    assert U.structs, "no structs parsed from include/kdat/uapi/kdat.h"
    c = _c_layout(U.structs)
    for name, cls in U.structs.items():
        assert int(c[f"{name} size"]) == ctypes.sizeof(cls), name
        for fname, _ in cls._fields_:
            assert int(c[f"{name}.{fname}"]) == getattr(cls, fname).offset, (name, fname)


def test_ioctl_numbers_match_the_compiler():
    lines = ["#include <stdio.h>", "#include <kdat/uapi/kdat.h>", "int main(void) {"]
    for name in U.ioctls:
        lines.append(f'printf("{name} %lu\\n", (unsigned long){name});')
    lines.append("return 0; }")
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "ioc.c")
        open(src, "w").write("\n".join(lines))
        subprocess.run(["cc", "-I", INCLUDE, "-o", os.path.join(d, "ioc"), src], check=True)
        out = subprocess.run([os.path.join(d, "ioc")], capture_output=True, text=True).stdout
    c = dict((k, int(v)) for k, v in (line.split() for line in out.splitlines()))
    assert c == U.ioctls


def test_every_struct_has_size_first_and_no_implicit_padding():
    for name, cls in U.structs.items():
        fields = [f for f, _ in cls._fields_]
        if name.startswith("kdat_") and "size" in fields:
            assert fields[0] == "size", name
        end = 0
        for fname, ftype in cls._fields_:
            assert getattr(cls, fname).offset == end, f"implicit padding before {name}.{fname}"
            end += ctypes.sizeof(ftype)
        assert end == ctypes.sizeof(cls), f"implicit tail padding in {name}"


def test_dat_mirror_is_what_the_generator_prints():
    gen = subprocess.run([os.path.join(REPO, "scripts", "gen-dat-mirror")], check=True,
                         capture_output=True, text=True).stdout
    with open(os.path.join(INCLUDE, "kdat", "uapi", "kdat_dat.h")) as f:
        assert f.read() == gen, "include/kdat/uapi/kdat_dat.h is stale: run scripts/gen-dat-mirror"


# ---- the command list (include/kdat/uapi/kdat_commands.h) ---------------------------------------------

def test_the_command_list_names_every_ioctl_once():
    assert sorted(c.name for c in U.commands.values()) == sorted(U.ioctls)
    for short, c in U.commands.items():
        assert c.struct in U.structs, short
        assert U.ioctls[c.name] >> 16 & 0x3FFF == ctypes.sizeof(U.structs[c.struct]), short


def test_the_command_list_names_real_fields():
    types = {"ia", "evd", "ep", "psp", "rsp", "cr"}
    for short, c in U.commands.items():
        cls = U.structs[c.struct]
        assert U.offsetofend(c.struct, c.first) <= ctypes.sizeof(cls), short
        for h in c.handles:
            assert h.type in types, (short, h)
            assert dict(cls._fields_)[h.field] is ctypes.c_uint32, (short, h)
        if c.handles:
            assert cls.status.offset == 4, short
        for z in c.zeros:
            U.offsetofend(c.struct, z)      # raises if there is no such field


def test_every_field_named_reserved_is_in_the_command_list():
    """A reserved input the list leaves out would be ignored by the kernel, not refused.  (A
    nested attr.reserved is an input only where attr is: ep_create, ep_modify, uqp_create.)"""
    for short, c in U.commands.items():
        if "reserved" in dict(U.structs[c.struct]._fields_):
            assert "reserved" in c.zeros, short
    assert {s for s, c in U.commands.items() if "attr.reserved" in c.zeros} == \
        {"ep_create", "ep_modify", "uqp_create"}


# ---- the IA counters (include/kdat/uapi/kdat_counters.h) -------------------------------------------

def test_the_counter_list_is_what_the_compiler_enumerates():
    """The harness's names are the X-macro's, at the C enum's indexes, and all fit value[]."""
    src_lines = ["#include <stdio.h>", "#include <kdat/uapi/kdat.h>", "int main(void) {",
                 '#define P(NAME, name) printf("%s %d\\n", #name, KDAT_IA_COUNTER_##NAME);',
                 "KDAT_IA_COUNTERS(P)",
                 'printf("NR %d\\n", KDAT_IA_NR_COUNTERS);', "return 0; }"]
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "cnt.c")
        open(src, "w").write("\n".join(src_lines))
        subprocess.run(["cc", "-I", INCLUDE, "-o", os.path.join(d, "cnt"), src], check=True)
        out = subprocess.run([os.path.join(d, "cnt")], capture_output=True, text=True,
                             check=True).stdout.split("\n")
    pairs = [line.split() for line in out if line]
    assert pairs[-1] == ["NR", str(len(U.counters))]
    assert [name for name, _ in pairs[:-1]] == U.counters
    assert [int(i) for _, i in pairs[:-1]] == list(range(len(U.counters)))
    assert len(U.counters) <= U.consts["KDAT_IA_COUNTERS_ROOM"]
    assert dict(U.structs["kdat_ia_counters"]._fields_)["value"]._length_ == U.consts["KDAT_IA_COUNTERS_ROOM"]
