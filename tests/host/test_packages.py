"""Debian packages (issue #25): `make deb` (scripts/make-deb) builds them from the tree and lintian
passes them; scripts/package-root installs them into a throw-away root (an overlay on the host's /,
which stays untouched) where DKMS builds kdat for the guest kernel and a C++ program and an
out-of-tree kernel module are built against the installed development files.  The guest half
(tests/guest/test_packages.py) loads and runs all of that; this half leaves the root in
build/pkgroot for it.  A purge, on a copy of that root, takes away what the packages added."""
import os
import re
import subprocess

import pytest

from kdat_harness import REPO, kdat_version, supported_kernels
from kdat_harness.scratch_root import scratch_root

DEBDIR = os.path.join(REPO, "build", "deb")
PKGROOT = os.path.join(REPO, "build", "pkgroot")
PACKAGES = {"kdat-dkms", "libkdat0", "libvipl-kdat0", "libdaplkdat2", "libkdat-dev", "kdat-tools"}
DAT_ENTRY = 'kdat u2.0 nonthreadsafe default libdaplkdat.so.2 dapl.2.0 "*" ""'




def _debs():
    """Package name -> .deb, leaving out the -dbgsym packages debhelper adds."""
    debs = {subprocess.run(["dpkg-deb", "-f", os.path.join(DEBDIR, f), "Package"],
                           capture_output=True, text=True, check=True).stdout.strip():
            os.path.join(DEBDIR, f) for f in os.listdir(DEBDIR) if f.endswith(".deb")}
    return {name: path for name, path in debs.items() if not name.endswith("-dbgsym")}


def _contents(deb):
    out = subprocess.run(["dpkg-deb", "-c", deb], capture_output=True, text=True, check=True).stdout
    return {line.split()[5].lstrip(".") for line in out.splitlines()}


@pytest.fixture(scope="module")
def debs():
    r = subprocess.run([os.path.join(REPO, "scripts", "make-deb"), DEBDIR], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    return _debs()


@pytest.fixture(scope="module")
def pkgroot(debs):
    if os.geteuid() != 0:
        pytest.fail("scripts/package-root mounts an overlay and chroots: run the host tests as root")
    r = subprocess.run([os.path.join(REPO, "scripts", "package-root"), DEBDIR, PKGROOT],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    return os.path.join(PKGROOT, "upper")


def test_make_deb_builds_every_package_and_lintian_passes_them(debs):
    assert set(debs) == PACKAGES
    with open(os.path.join(DEBDIR, "lintian.txt")) as f:
        report = f.read()
    bad = [line for line in report.splitlines() if re.match(r"[EW]: ", line)]
    assert not bad, report


def test_each_package_holds_what_it_promises(debs):
    version, triplet = kdat_version(), subprocess.run(
        ["dpkg-architecture", "-qDEB_HOST_MULTIARCH"], capture_output=True, text=True,
        check=True).stdout.strip()
    lib = f"/usr/lib/{triplet}"
    src = f"/usr/src/kdat-{version}"
    want = {
        "kdat-dkms": {f"{src}/dkms.conf", f"{src}/kmod/Kbuild", f"{src}/kmod/kdat_ep.c",
                      f"{src}/kmod/blk/Kbuild", f"{src}/kmod/blk/kdat_blk.c",
                      f"{src}/kmod/blk/kdat_blkt.c", f"{src}/kmod/blk/kdat_blk_proto.h",
                      f"{src}/include/kdat/kdat.h", f"{src}/include/kdat/uapi/kdat.h",
                      f"{src}/dkms-symvers", "/lib/udev/rules.d/99-kdat.rules",
                      "/usr/lib/sysusers.d/kdat.conf", "/usr/share/man/man7/kdat.7.gz"},
        "libkdat0": {f"{lib}/libkdat.so.0", f"{lib}/libkdat.so.{version}"},
        "libvipl-kdat0": {f"{lib}/libvipl-kdat.so.0"},
        "libdaplkdat2": {f"{lib}/libdaplkdat.so.2"},
        "libkdat-dev": {"/usr/include/kdat/kdat.hpp", "/usr/include/kdat/uapi/kdat.h",
                        "/usr/include/kdat/ep_table.h", "/usr/include/kdat/vipl/vipl.h",
                        f"{lib}/libkdat.so", f"{lib}/libvipl-kdat.so", f"{lib}/pkgconfig/kdat.pc",
                        f"{lib}/pkgconfig/vipl-kdat.pc", f"{lib}/cmake/kdat/kdatConfig.cmake"},
        "kdat-tools": {"/usr/bin/kdatctl", "/usr/share/man/man8/kdatctl.8.gz"},
    }
    for pkg, paths in want.items():
        have = _contents(debs[pkg])
        assert paths <= have, f"{pkg} lacks {sorted(paths - have)}"
    # headers only in the project's namespace; no build outputs in the DKMS source
    dev = _contents(debs["libkdat-dev"])
    assert not [p for p in dev if p.startswith("/usr/include/") and not p.startswith("/usr/include/kdat")
                and p != "/usr/include/"]
    dkms = _contents(debs["kdat-dkms"])
    assert not [p for p in dkms if p.endswith((".o", ".ko", ".cmd", ".symvers"))]
    # the shared libraries carry symbol files; the provider its maintainer scripts
    for pkg, control in (("libkdat0", "symbols"), ("libvipl-kdat0", "symbols"),
                         ("libdaplkdat2", "postinst"), ("libdaplkdat2", "postrm"),
                         ("kdat-dkms", "postinst")):
        r = subprocess.run(["dpkg-deb", "-I", debs[pkg], control], capture_output=True, text=True)
        assert r.returncode == 0 and r.stdout.strip(), f"{pkg} has no {control}"


def _at(root, path):
    """`path` of the installed root in its upper layer: the host's own symlinks (Debian's merged
    /usr: /lib -> usr/lib) are below, so follow them as the merged root does."""
    return os.path.join(root, os.path.realpath("/" + path).lstrip("/"))


def _dat_conf(root):
    with open(os.path.join(root, "etc", "dat.conf")) as f:
        return f.read().splitlines()


def test_the_packages_install_into_a_throwaway_root(pkgroot):
    version = kdat_version()
    status = subprocess.run(["dpkg-query", "--admindir", os.path.join(pkgroot, "var/lib/dpkg"),
                             "-W", "-f", "${Package} ${db:Status-Abbrev}\n", *sorted(PACKAGES)],
                            capture_output=True, text=True)
    assert status.returncode == 0, status.stderr
    assert {line.split()[0]: line.split()[1] for line in status.stdout.splitlines()} == \
        {p: "ii" for p in PACKAGES}
    # DKMS built and installed kdat for the kernel of every supported series, and kept each
    # kernel's Module.symvers
    for kver in supported_kernels():
        # DKMS compresses the module where the kernel's own are (6.12: xz)
        kos = [p for p in (_at(pkgroot, f"lib/modules/{kver}/updates/dkms/kdat.ko{z}")
                           for z in ("", ".xz")) if os.path.isfile(p)]
        assert len(kos) == 1, f"no DKMS-built kdat.ko for {kver}"
        ko = kos[0]
        info = [subprocess.run(["modinfo", "-F", field, ko], capture_output=True, text=True,
                               check=True).stdout.strip() for field in ("version", "vermagic")]
        assert info[0] == version and info[1].startswith(kver + " "), (kver, info)
        # and the block driver pair, against that kdat.ko
        for module in ("kdat_blk", "kdat_blkt"):
            blk = [p for p in (_at(pkgroot, f"lib/modules/{kver}/updates/dkms/{module}.ko{z}")
                               for z in ("", ".xz")) if os.path.isfile(p)]
            assert len(blk) == 1, f"no DKMS-built {module}.ko for {kver}"
            depends = subprocess.run(["modinfo", "-F", "depends", blk[0]], capture_output=True,
                                     text=True, check=True).stdout.strip()
            assert "kdat" in depends.split(","), (module, kver, depends)
        symvers = os.path.join(pkgroot, "usr/src", f"kdat-{version}", kver, "Module.symvers")
        with open(symvers) as f:
            assert re.search(r"^0x[0-9a-f]+\tkdat_ep_connect\t", f.read(), re.M)
    # the provider registered itself; the host's own dat.conf did not change
    assert DAT_ENTRY in _dat_conf(pkgroot)
    assert not [line for line in _dat_conf("/") if line.startswith("kdat ")]
    # what a developer builds against the installed files
    for kver in supported_kernels():
        consumer = os.path.join(pkgroot, f"opt/kdat-pkgtest/module/{kver}/kdat_pkgtest.ko")
        deps = subprocess.run(["modinfo", "-F", "depends", consumer], capture_output=True,
                              text=True, check=True).stdout.strip()
        assert deps == "kdat"
    assert os.access(os.path.join(pkgroot, "opt/kdat-pkgtest/pkg_connect"), os.X_OK)


def test_dkms_refuses_a_kernel_outside_the_supported_range_by_name(pkgroot):
    """BUILD_EXCLUSIVE_KERNEL: a kernel kdat does not support gets DKMS's refusal, which names
    the directive, before any compiler runs."""
    with open(os.path.join(PKGROOT, "dkms-unsupported.txt")) as f:
        out = f.read()
    assert "BUILD_EXCLUSIVE" in out, out
    assert "error:" not in out and "gcc" not in out, out


def _copy_of(pkgroot, tmp_path):
    """The installed root once more, in a scratch root of its own (the guest still needs the
    original)."""
    subprocess.run(["cp", "-a", pkgroot, str(tmp_path / "up")], check=True)
    return scratch_root(tmp_path, tmp_path / "up")


def test_the_postinst_creates_the_rdma_group_with_or_without_systemd_sysusers(pkgroot, tmp_path):
    """The group the udev rule gives /dev/kdat to: kdat-dkms ships it as a sysusers.d entry and
    its postinst makes it, through systemd-sysusers, or addgroup where that is not installed.
    The host (like the root below) may have it already from libibverbs1: it is removed first."""
    with open(_at(pkgroot, "usr/lib/sysusers.d/kdat.conf")) as f:
        assert [line.split() for line in f if not line.startswith("#")] == [["g", "rdma", "-", "-"]]
    with _copy_of(pkgroot, tmp_path) as run:
        postinst = "/var/lib/dpkg/info/kdat-dkms.postinst"
        # DKMS's part of the postinst skips kernels without headers: it built kdat for them
        # already, and would only build it again
        run("sh", "-c", "rm /lib/modules/*/build")
        for without_sysusers in (False, True):
            if without_sysusers:
                run("rm", os.path.realpath("/usr/bin/systemd-sysusers"))
                assert run("sh", "-c", "command -v systemd-sysusers", check=False).returncode != 0
            run("groupdel", "rdma")
            assert run("getent", "group", "rdma", check=False).returncode == 2
            run(postinst, "configure", kdat_version())
            gid = int(run("getent", "group", "rdma").stdout.split(":")[2])
            assert 100 <= gid <= 999, f"rdma is not a system group (Debian: 100-999): {gid}"
            run(postinst, "configure", kdat_version())   # again: the group is kept, not doubled
            assert run("getent", "group", "rdma").stdout.split(":")[2] == str(gid)


def test_purge_takes_away_what_the_packages_added(pkgroot, tmp_path):
    """On a copy of the installed root: purging every package removes the module DKMS built, the
    per-kernel Module.symvers, /usr/src/kdat-VERSION and the dat.conf entry."""
    kver, version = supported_kernels()[0], kdat_version()
    with _copy_of(pkgroot, tmp_path) as run:
        merged = run.path
        run("dpkg", "--purge", *sorted(PACKAGES))
        assert DAT_ENTRY not in _dat_conf(merged)
        assert _dat_conf(merged) == _dat_conf("/")
        assert not (merged / "lib/modules" / kver / "updates/dkms/kdat.ko").exists()
        assert not (merged / "lib/modules" / kver / "updates/dkms/kdat.ko.xz").exists()
        assert not list((merged / "lib/modules" / kver / "updates/dkms").glob("kdat_blk*"))
        assert (merged / "lib/modules" / kver / "kernel").is_dir()  # the path is right
        assert not (merged / "usr/src" / f"kdat-{version}").exists()
        left = run("dkms", "status", "kdat", check=False)
        assert left.stdout.strip() == "", left.stdout
