"""The module's life cycle: load, /dev/kdat, the version ioctl, clean unload, clean kernel log."""
import os
import re
import shutil
import stat

import pytest

from kdat_harness import KDATCTL, guest, kdat_version
from kdat_harness.guest import UAPI, errno



def test_load_creates_dev_kdat_0600_and_unload_removes_it(rdma, kernel_log):
    if guest.module_loaded():
        assert guest.unload_module().returncode == 0
    guest.load_module()
    st = os.stat(guest.DEV)
    assert stat.S_ISCHR(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o600
    r = guest.unload_module()
    assert r.returncode == 0, r.stderr
    assert not os.path.exists(guest.DEV)
    assert not guest.module_loaded()
    assert any("kdat: unloaded" in line for line in kernel_log.new_lines())
    guest.load_module()  # the session's other tests expect it loaded


def test_modprobe_loads_the_installed_module_and_udev_reads_its_rule(rdma, kernel_log, tmp_path):
    """What 'make install' gives a system (tests/host/test_install.py checks the tree it writes):
    kdat.ko in /lib/modules/KVER/updates, found by depmod and loaded by modprobe with rdma_cm and
    ib_core; the udev rule loads it when an RDMA device appears and gives the node its group and
    mode.  The guest's root is the host's, read-only: /lib/modules/KVER gets a tmpfs overlay and
    the rule goes to /run/udev/rules.d; udevadm test evaluates the rules as udevd would."""
    kver = os.uname().release
    moddir = f"/lib/modules/{kver}"
    if os.environ.get("KDAT_DEBUG_KERNEL") == "1":
        pytest.skip("the debug kernel is built without overlayfs, which this needs to install "
                    "into the read-only /lib/modules; Debian's kernel runs it")
    # depmod over every module of the kernel is slow over 9p: give it kdat and what
    # kdat needs (rdma_cm and ib_core with their own dependencies, from the kernel's modules.dep,
    # which names them as installed: .ko, or .ko.xz where the kernel compresses its modules)
    with open(f"{moddir}/modules.dep") as f:
        deps = dict(line.rstrip("\n").split(":", 1) for line in f if ":" in line)
    core = {m: next((k for k in deps if re.fullmatch(rf"kernel/drivers/infiniband/core/{m}\.ko"
                                                     r"(\.xz|\.zst|\.gz)?", k)), None)
            for m in ("rdma_cm", "ib_core")}
    assert all(core.values()), f"modules.dep names no {core}"
    wanted, todo = set(), list(core.values())
    while todo:
        mod = todo.pop()
        if mod not in wanted:
            wanted.add(mod)
            todo += deps[mod].split()
    up, work = tmp_path / "up", tmp_path / "work"
    up.mkdir()
    work.mkdir()
    rule = "/run/udev/rules.d/99-kdat.rules"
    if guest.module_loaded():
        assert guest.unload_module().returncode == 0
    try:
        guest.run("mount", "-t", "overlay", "overlay", "-o",
                  f"lowerdir={moddir},upperdir={up},workdir={work}", moddir)
        os.makedirs(f"{moddir}/updates", exist_ok=True)
        shutil.copy(guest.KMOD, f"{moddir}/updates/kdat.ko")
        guest.run("depmod", kver, f"{moddir}/updates/kdat.ko",
                  *[f"{moddir}/{m}" for m in sorted(wanted)])
        with open(f"{moddir}/modules.dep") as f:
            kdat_deps = [line.split(":", 1)[1].split() for line in f
                         if line.startswith("updates/kdat.ko:")]
        assert kdat_deps and set(core.values()) <= set(kdat_deps[0])
        guest.run("modprobe", "kdat")
        assert stat.S_ISCHR(os.stat(guest.DEV).st_mode)
        with open("/sys/module/kdat/version") as f:
            assert f.read().strip() == kdat_version()
        os.makedirs(os.path.dirname(rule), exist_ok=True)
        shutil.copy(os.path.join(os.environ["KDAT_REPO"], "scripts", "99-kdat.rules"), rule)
        dev = sorted(os.listdir("/sys/class/infiniband"))[0]
        added = guest.run("udevadm", "test", "--action=add", f"/sys/class/infiniband/{dev}",
                          check=False)
        assert "run: 'kmod load kdat'" in added.stdout + added.stderr, added.stderr[-2000:]
        node = guest.run("udevadm", "test", "--action=add", "/sys/class/misc/kdat", check=False)
        out = node.stdout + node.stderr
        assert re.search(r"Setting permissions /dev/kdat, uid=0, gid=\d+, mode=0660", out), out[-2000:]
        r = guest.run("modprobe", "-r", "kdat", check=False)
        assert r.returncode == 0, r.stderr
        assert not guest.module_loaded() and not os.path.exists(guest.DEV)
    finally:
        if os.path.exists(rule):
            os.unlink(rule)
        if guest.module_loaded():
            guest.unload_module()
        guest.run("umount", moddir, check=False)
        guest.load_module()  # the session's other tests expect it loaded
    assert not [line for line in kernel_log.new_lines() if "WARNING" in line or "BUG" in line]


def test_rmmod_is_refused_while_a_file_is_open(dev):
    r = guest.unload_module()
    assert r.returncode != 0
    assert "in use" in r.stderr
    assert guest.module_loaded()


def test_version_reports_abi_and_the_rxe_device(dev, rdma):
    v = dev.ioctl("KDAT_IOC_VERSION", UAPI.new("kdat_version"))
    assert v.abi_version == UAPI.consts["KDAT_ABI_VERSION"]
    assert (v.dat_major, v.dat_minor) == (2, 0)
    assert v.num_devices >= 1  # rxe_kdat0 from rdma-up


def test_rdma_device_added_after_load_is_seen(dev, rdma):
    before = dev.ioctl("KDAT_IOC_VERSION", UAPI.new("kdat_version")).num_devices
    guest.run("ip", "link", "add", "kdatx", "type", "dummy")
    try:
        guest.run("ip", "link", "set", "kdatx", "up")
        guest.run("rdma", "link", "add", "rxe_kdatx", "type", "rxe", "netdev", "kdatx")
        assert dev.ioctl("KDAT_IOC_VERSION", UAPI.new("kdat_version")).num_devices == before + 1
        guest.run("rdma", "link", "delete", "rxe_kdatx")
        assert dev.ioctl("KDAT_IOC_VERSION", UAPI.new("kdat_version")).num_devices == before
    finally:
        guest.run("rdma", "link", "delete", "rxe_kdatx", check=False)
        guest.run("ip", "link", "delete", "kdatx", check=False)


def test_bad_size_reserved_bits_and_unknown_command(dev):
    v = UAPI.new("kdat_version")
    v.size = 4
    assert dev.ioctl_errno("KDAT_IOC_VERSION", v) == errno.EINVAL
    v = UAPI.new("kdat_version")
    v.reserved[1] = 1
    assert dev.ioctl_errno("KDAT_IOC_VERSION", v) == errno.EINVAL
    unknown = (3 << 30) | (16 << 16) | (UAPI.consts["KDAT_IOC_MAGIC"] << 8) | 0xFE
    assert dev.ioctl_errno(unknown, UAPI.new("kdat_version")) == errno.ENOTTY


def test_user_library_sees_the_module(dev):
    """kdatctl version: its own version and the module's (include/kdat/version.h, the one
    source; MODULE_VERSION puts it in /sys/module/kdat/version), the ABI and DAT versions."""
    kdatctl = KDATCTL
    version = kdat_version()
    with open("/sys/module/kdat/version") as f:
        assert f.read().strip() == version
    for argv in (["version"], ["--version"]):
        r = guest.run(kdatctl, *argv)
        assert r.stdout.splitlines()[0] == f"kdatctl {version}", r.stdout
        assert (f"kdat.ko {version}, ABI {UAPI.consts['KDAT_ABI_VERSION']}, DAT 2.0, "
                in r.stdout.splitlines()[1]), r.stdout


def test_the_kernel_log_fixture_sees_new_lines_after_the_log_buffer_wrapped(kernel_log):
    """The kernel_log fixture is how tests see kdat's messages and reports: once the log buffer is
    full (a long session), old records drop out as new ones come, and it must still find the new
    ones (it once counted lines, and saw nothing after the buffer filled)."""
    with open("/proc/sys/kernel/printk_devkmsg") as f:
        old = f.read().strip()
    with open("/proc/sys/kernel/printk_devkmsg", "w") as f:
        f.write("on\n")       # no rate limit for our own writes
    try:
        filler = "kdat-test: filling the kernel log buffer " + "x" * 200
        before = guest.KernelLog()
        with open("/dev/kmsg", "w") as kmsg:
            for i in range(8192):            # 2 MB: several times the guest's log buffer
                kmsg.write(f"{filler} {i}\n")
                kmsg.flush()
        assert not any(f"{filler} 0" == line for line in before.new_lines()), \
            "the buffer did not wrap: the test proves nothing"
        marker = guest.KernelLog()
        with open("/dev/kmsg", "w") as kmsg:
            kmsg.write("kdat-test: the marker after the wrap\n")
        assert marker.new_lines() == ["kdat-test: the marker after the wrap"]
    finally:
        with open("/proc/sys/kernel/printk_devkmsg", "w") as f:
            f.write(old + "\n")


def test_ack_timeout_takes_0_to_31_and_refuses_the_rest(kdat_module):
    """ack_timeout is the exponent of the RC QPs' local ACK timeout (4.096 us * 2^n, 5 bits in
    the QP's attributes): 16 by default (DAPL's DAPL_ACK_TIMER), 0 for the CM's own value (19 on
    RoCE); anything else is
    refused with EINVAL and leaves the value as it was (user/tests/guest/user_qp_test.cpp checks
    that both sides' QPs get it)."""
    path = "/sys/module/kdat/parameters/ack_timeout"
    with open(path) as f:
        assert f.read().strip() == "16"
    try:
        for bad in ("32", "-1", "255", "sixteen", ""):
            with pytest.raises(OSError) as e:
                with open(path, "w") as f:
                    f.write(bad + "\n")
            assert e.value.errno == errno.EINVAL, bad
            with open(path) as f:
                assert f.read().strip() == "16", bad
        for good in ("0", "31", "18"):
            with open(path, "w") as f:
                f.write(good + "\n")
            with open(path) as f:
                assert f.read().strip() == good
    finally:
        with open(path, "w") as f:
            f.write("16\n")
