"""The Debian packages at work (issue #25), in the throw-away root tests/host/test_packages.py made
(build/pkgroot/upper: the packages installed by dpkg, kdat built by DKMS for this kernel, a C++
program and a kernel module built against the installed development files).  Here it goes over
the guest's own / in an overlay, and in a chroot there: modprobe loads the DKMS-built kdat, the
packaged udev rule loads it and sets the node's mode, kdatctl sees the module and a kernel
consumer, the C++ program connects, and Debian's dtest runs over the provider as the package
registered it in /etc/dat.conf (no DAT_OVERRIDE)."""
import json
import os
import re
import subprocess
import time

import pytest

from kdat_harness import REPO, guest, kdat_version
from kdat_harness.dapl import listens

UPPER = os.path.join(REPO, "build", "pkgroot", "upper")
PORT = 39917  # outside the suite's 20000..39999 allocations' busy range (fixed, one user)



@pytest.fixture(scope="module")
def root(rdma, tmp_path_factory):
    if os.environ.get("KDAT_DEBUG_KERNEL") == "1":
        pytest.skip("the debug kernel has no overlayfs, and DKMS built kdat for Debian's kernels")
    if not os.path.isdir(UPPER):
        pytest.fail(f"{UPPER} is missing: tests/host/test_packages.py (make test-host) makes it")
    base = tmp_path_factory.mktemp("pkgroot")
    up, work, merged = base / "up", base / "work", base / "merged"
    for d in (up, work, merged):
        d.mkdir()
    if guest.module_loaded():
        assert guest.unload_module().returncode == 0
    mounts = []

    def mount(*args):
        guest.run("mount", *args)
        mounts.append(args[-1])

    try:
        mount("-t", "overlay", "overlay", "-o",
              f"lowerdir={UPPER}:/,upperdir={up},workdir={work}", str(merged))
        mount("-t", "proc", "proc", str(merged / "proc"))
        mount("-t", "sysfs", "sysfs", str(merged / "sys"))
        mount("--bind", "/dev", str(merged / "dev"))
        mount("-t", "tmpfs", "tmpfs", str(merged / "tmp"))
        mount("-t", "tmpfs", "tmpfs", str(merged / "run"))
        yield str(merged)
    finally:
        guest.run("rmmod", "kdat_pkgtest", check=False)
        guest.run("rmmod", "kdat_blk", check=False)
        # rmmod, not modprobe -r: the guest's own modules.dep does not know the packaged kdat
        deadline = time.monotonic() + 15
        while guest.module_loaded() and guest.unload_module().returncode != 0:
            assert time.monotonic() < deadline, \
                f"the packaged kdat stays loaded:\n{guest.who_keeps_kdat_loaded()}"
            time.sleep(0.5)
        for m in reversed(mounts):
            guest.run("umount", m, check=False)
        guest.load_module()  # the session's other tests expect the tree's kdat loaded


def _in(root, *cmd, check=True, timeout=120):
    r = subprocess.run(["chroot", root, "env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                        "HOME=/root", *cmd], capture_output=True, text=True, timeout=timeout)
    if check:
        assert r.returncode == 0, f"{' '.join(cmd)}: rc {r.returncode}\n{r.stdout[-2000:]}{r.stderr[-2000:]}"
    return r


@pytest.fixture(scope="module")
def loaded(root):
    _in(root, "modprobe", "kdat")
    return root


def test_modprobe_loads_the_kdat_dkms_built(loaded, kernel_log):
    kver = os.uname().release
    path = _in(loaded, "modinfo", "-n", "kdat").stdout.strip()
    assert path in (f"/lib/modules/{kver}/updates/dkms/kdat.ko{z}" for z in ("", ".xz")), path
    with open("/sys/module/kdat/version") as f:
        assert f.read().strip() == kdat_version()
    with open("/sys/module/kdat/srcversion") as f:
        assert f.read().strip() == _in(loaded, "modinfo", "-F", "srcversion", path).stdout.strip()
    # DKMS signs what it builds when the kernel verifies signatures (Debian's does: its MOK key)
    signer = _in(loaded, "modinfo", "-F", "signer", path).stdout.strip()
    assert signer, "DKMS did not sign kdat.ko"
    assert os.path.exists("/dev/kdat")


def test_modprobe_loads_the_block_initiator_dkms_built_and_kdatctl_drives_it(loaded):
    kver = os.uname().release
    path = _in(loaded, "modinfo", "-n", "kdat_blk").stdout.strip()
    assert path in (f"/lib/modules/{kver}/updates/dkms/kdat_blk.ko{z}" for z in ("", ".xz")), path
    _in(loaded, "modprobe", "kdat_blk")
    try:
        assert os.path.exists("/dev/kdat-blk")
        assert json.loads(_in(loaded, "kdatctl", "-j", "blk", "list").stdout) == \
            {"controllers": []}
        refused = _in(loaded, "kdatctl", "blk", "connect", "-t", "192.0.2.1", "-p", "9",
                      "--queue-depth", "0", check=False)
        assert refused.returncode == 1 and "kdat_blk refused" in refused.stderr, refused.stderr
    finally:
        _in(loaded, "rmmod", "kdat_blk", check=False)


def test_the_packaged_udev_rule_loads_kdat_and_sets_the_nodes_mode(loaded):
    rule = os.path.join(loaded, "lib/udev/rules.d/99-kdat.rules")
    assert os.path.isfile(rule)
    dev = sorted(os.listdir("/sys/class/infiniband"))[0]
    added = _in(loaded, "udevadm", "test", "--action=add", f"/sys/class/infiniband/{dev}",
                check=False)
    assert "run: 'kmod load kdat'" in added.stdout + added.stderr, added.stderr[-2000:]
    node = _in(loaded, "udevadm", "test", "--action=add", "/sys/class/misc/kdat", check=False)
    out = node.stdout + node.stderr
    assert re.search(r"Setting permissions /dev/kdat, uid=0, gid=\d+, mode=0660", out), out[-2000:]


def test_kdatctl_names_the_module_and_an_out_of_tree_kernel_consumer(loaded, rdma, kernel_log):
    ko = f"/opt/kdat-pkgtest/module/{os.uname().release}/kdat_pkgtest.ko"
    _in(loaded, "insmod", ko, f"netdev={rdma['KDAT_TEST_NETDEV']}")
    try:
        version = _in(loaded, "kdatctl", "--version").stdout
        assert re.search(rf"^kdat\.ko {re.escape(kdat_version())}, ABI", version, re.M), version
        tables = json.loads(_in(loaded, "kdatctl", "list", "--json", "--comm",
                                "kdat_pkgtest").stdout)["tables"]
        assert len(tables) == 1 and "kernel" in tables[0]["flags"], tables
        assert [(o["type"], o["state"]) for o in tables[0]["objects"]] == [("IA", "UP")]
        ports = json.loads(_in(loaded, "kdatctl", "devices", "--json").stdout)["ports"]
        assert rdma["KDAT_TEST_NETDEV"] in [p["netdev"] for p in ports], ports
    finally:
        _in(loaded, "rmmod", "kdat_pkgtest", check=False)


def test_a_cpp_program_built_against_the_installed_libkdat_connects(loaded, rdma, kernel_log):
    r = _in(loaded, "/opt/kdat-pkgtest/pkg_connect", rdma["KDAT_TEST_NETDEV"],
            rdma["KDAT_TEST_ADDR"], str(PORT))
    assert "pkg_connect ok: CONNECTED -> DISCONNECTED" in r.stdout


def test_dtest_runs_over_the_provider_the_package_registered(loaded, rdma, kernel_log):
    """Debian's dtest, unmodified, over libdaplkdat as its package registered it in /etc/dat.conf
    (ia_params "*": the first active RDMA port; no DAT_OVERRIDE).  Burst and buffer size as in
    test_dapl_provider.py: dtest's defaults take minutes in a TCG guest."""
    with open(os.path.join(loaded, "etc/dat.conf")) as f:
        assert 'kdat u2.0 nonthreadsafe default libdaplkdat.so.2 dapl.2.0 "*" ""' in f.read()
    args = ["-B", "20", "-b", "65536"]
    env = ["env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"]
    server = subprocess.Popen(["chroot", loaded, *env, "dtest", "-P", "kdat", "-s", *args],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not listens(server.pid) and server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert listens(server.pid), "the dtest server never listened"
        client = _in(loaded, "dtest", "-P", "kdat", "-h", rdma["KDAT_TEST_ADDR"], *args,
                     timeout=300)
        server_out, _ = server.communicate(timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    for side in (client.stdout + client.stderr, server_out):
        # dtest's verdict (its exit status is 0 even when it fails)
        assert "PASSED" in side and "FAILED" not in side, side[-3000:]
        assert "CONNECTED!" in side
