"""What the shared libraries export: only their API.  The dynamic symbol table of each library the
build made (`readelf --dyn-syms`, demangled with c++filt) may hold no internals -- no `Impl`, no
`kdat::detail`, none of kdatctl's JSON helpers -- and every symbol of libkdat and libvipl-kdat
carries its version node (user/cmake/libkdat.map, user/vipl/vipl-kdat.map).  Each rule is also run
on a library made here to break it, so a rule that can no longer fail is noticed."""
import os
import re
import shutil
import subprocess

import pytest

from kdat_harness import REPO

BUILD = os.path.join(REPO, "build", "user")
# library -> the version nodes its symbols carry, a pattern (None: no node); a release that only
# adds symbols starts a node of its own (KDAT_0.1)
LIBRARIES = {
    "libkdat.so.0": r"KDAT_0(?:\.[0-9]+)?",
    "vipl/libvipl-kdat.so.0": "VIPL_KDAT_0",
    "dapl/libdaplkdat.so.2": None,
}
# What is never API: a pimpl's insides, the detail namespace, kdatctl's JSON helpers.
INTERNAL = re.compile(r"\bImpl\b|\bdetail::|\bjson_(?:escape|string)\b")
# libdaplkdat is loaded by libdat2, which looks up only these (dlsym).
DAPL_ENTRY_POINTS = {"dat_provider_init", "dat_provider_fini"}


def exported(path):
    """[(demangled name, version node or None)] of the symbols `path` defines for others."""
    out = subprocess.run(["readelf", "--dyn-syms", "--wide", path], capture_output=True, text=True,
                         check=True).stdout
    raw = []
    for line in out.splitlines():
        f = line.split()
        # Num: Value Size Type Bind Vis Ndx Name
        if len(f) < 8 or not f[0].rstrip(":").isdigit() or f[6] == "UND" or f[4] == "LOCAL":
            continue
        name, _, version = re.sub("@@", "@", f[7]).partition("@")
        raw.append((name, version or None))
    names = subprocess.run(["c++filt"], input="\n".join(n for n, _ in raw), capture_output=True,
                           text=True, check=True).stdout.splitlines()
    return [(demangled, version) for demangled, (_, version) in zip(names, raw)]


def problems(symbols, node):
    """Why `symbols` (from exported()) is not an API-only export under the version nodes that
    the pattern `node` matches."""
    found = [f"internal: {name}" for name, _ in symbols if INTERNAL.search(name)]
    if node is not None:
        # readelf shows a node's own symbol as the bare node name
        found += [f"not in {node}: {name}{'@' + v if v else ''}" for name, v in symbols
                  if not (v and re.fullmatch(node, v))
                  and not (re.fullmatch(node, name) and v in (None, name))]
    return found


def _built(lib):
    path = os.path.join(BUILD, lib)
    if not os.path.exists(path):
        pytest.fail(f"{path} is not built: run 'make all'")
    return path


@pytest.mark.parametrize("lib", sorted(LIBRARIES))
def test_a_library_exports_no_internals_and_versions_every_symbol(lib):
    symbols = exported(_built(lib))
    assert symbols, f"{lib} exports nothing"
    assert not problems(symbols, LIBRARIES[lib]), "\n".join(problems(symbols, LIBRARIES[lib]))


def test_libkdat_exports_only_its_namespace():
    symbols = exported(_built("libkdat.so.0"))
    ours = re.compile(r"(?:typeinfo (?:name )?for |vtable for )?kdat::")
    outside = [n for n, _ in symbols
               if not re.fullmatch(LIBRARIES["libkdat.so.0"], n) and not ours.match(n)]
    assert not outside, outside
    # the exception type is caught across the library boundary: its typeinfo must be there
    assert ("typeinfo for kdat::Error", "KDAT_0") in symbols


def test_libdaplkdat_exports_only_the_dat_entry_points():
    assert {n for n, _ in exported(_built("dapl/libdaplkdat.so.2"))} == DAPL_ENTRY_POINTS


def test_the_rules_fail_on_a_library_that_breaks_them(tmp_path):
    """A library with a pimpl, a detail function, a JSON helper and an unversioned C symbol: each
    is named.  The same library under a version script for everything passes the version rule."""
    cxx = shutil.which("g++") or pytest.fail("no g++")
    src = tmp_path / "leaky.cpp"
    src.write_text("namespace kdat {\n"
                   "struct UserEndpoint { struct Impl { void apply(); }; };\n"
                   "void UserEndpoint::Impl::apply() {}\n"
                   "namespace detail { void helper() {} }\n"
                   "int json_escape(int c) { return c; }\n"
                   "void api() {}\n"
                   "}\n"
                   'extern "C" void VipOpenNic() {}\n')
    plain = tmp_path / "libleaky.so"
    subprocess.run([cxx, "-shared", "-fPIC", "-o", plain, src], check=True)
    found = problems(exported(plain), "KDAT_0")
    for what in ("kdat::UserEndpoint::Impl::apply()", "kdat::detail::helper()",
                 "kdat::json_escape(int)"):
        assert f"internal: {what}" in found, found
    assert "not in KDAT_0: VipOpenNic" in found, found
    assert "not in KDAT_0: kdat::api()" in found, found

    script = tmp_path / "all.map"
    script.write_text("KDAT_0 { global: *; };\n")
    versioned = tmp_path / "libversioned.so"
    subprocess.run([cxx, "-shared", "-fPIC", f"-Wl,--version-script={script}", "-o", versioned,
                    src], check=True)
    found = problems(exported(versioned), "KDAT_0")
    assert not [p for p in found if p.startswith("not in")], found
    assert [p for p in found if p.startswith("internal")], found
