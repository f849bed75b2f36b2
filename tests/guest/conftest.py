"""Fixtures for tests that run inside the kdat guest (scripts/vm-run)."""
import os
import time

import pytest

from kdat_harness import guest

HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_collection_modifyitems(config, items):
    if guest.in_guest():
        return
    skip = pytest.mark.skip(reason="guest test: run through 'make test' or scripts/vm-run")
    for item in items:
        if str(item.fspath).startswith(HERE + os.sep):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def rdma():
    """Soft-RoCE up on a dummy netdev; returns rdma-up's variables (KDAT_TEST_ADDR, ...)."""
    return guest.rdma_up()


@pytest.fixture(scope="session")
def kdat_module(rdma):
    """kdat.ko loaded for the whole session, unloaded (and checked) at the end."""
    if not guest.module_loaded():
        guest.load_module()
    yield
    # A process a test killed may still be exiting (closing its /dev/kdat file): allow it a moment.
    deadline = time.monotonic() + 15
    while True:
        r = guest.unload_module()
        if r.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert r.returncode == 0, f"rmmod kdat failed: {r.stderr}\n{_kdat_users()}"


def _kdat_users():
    """Who keeps kdat loaded: its refcount and every process with /dev/kdat open or mapped."""
    lines = []
    try:
        with open("/sys/module/kdat/refcnt") as f:
            lines.append(f"refcnt {f.read().strip()}")
    except OSError:
        pass
    if os.path.isdir("/sys/module/kdat/holders"):
        lines.append(f"holders {os.listdir('/sys/module/kdat/holders')}")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
            with open(f"/proc/{pid}/maps") as f:
                maps = [ln for ln in f if "kdat" in ln and ".so" not in ln]
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any("kdat" in fd for fd in fds) or maps:
            lines.append(f"pid {pid} ({cmd.strip()}): {sum('kdat' in fd for fd in fds)} fds, "
                         f"{len(maps)} mappings")
    return "\n".join(lines)


@pytest.fixture
def kernel_log():
    """Fails the test if it made the kernel log an Oops, WARNING, BUG, KASAN, lockdep report."""
    log = guest.KernelLog()
    yield log
    reports = log.reports()
    assert not reports, "kernel log reports during the test:\n" + "\n".join(log.new_lines())


@pytest.fixture
def dev(kdat_module, kernel_log):
    with guest.Device() as d:
        yield d
