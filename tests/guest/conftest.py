"""Fixtures for tests that run inside the kdat guest (scripts/vm-run)."""
import os

import pytest

from kdat_harness import guest
# run-tests' two-guest lanes share the suite's files out as they go (KDAT_QUEUE)
from kdat_harness.work_queue import pytest_runtestloop  # noqa: F401

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.hookimpl(tryfirst=True)   # firstresult: before pytest's own makes the report
def pytest_runtest_makereport(item, call):
    """A test that pytest-timeout stopped: every task's kernel stack goes to the kernel log
    (sysrq t), which vm-run keeps as dmesg.txt, so that a hang in a child process or in the
    kernel shows where it was, not only the Python stack that waited for it."""
    if call.excinfo is not None and "Timeout >" in str(call.excinfo.value) and guest.in_guest():
        try:
            with open("/proc/sysrq-trigger", "w") as f:
                f.write("t")
        except OSError:
            pass


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
    guest.unload_kdat_at_session_end()


@pytest.fixture(autouse=True)
def nothing_of_kdat_left_open():
    """After every test (and all its other fixtures' teardown: autouse fixtures are set up first,
    so torn down last) this process holds no kdat file or mapping. A test that leaves one, for
    example because it failed before its own close() and pytest keeps its locals alive in the
    traceback, has them closed here and fails: one failure must not keep kdat loaded for the
    rest of the session."""
    yield
    if not guest.in_guest():
        return
    fds, maps = guest.holdings()
    if not fds and not maps:
        return
    closed = guest.close_all_open()
    raw_fds, raw_maps = guest.holdings()
    guest.release_raw(raw_fds, raw_maps)
    pytest.fail(f"the test left kdat files or mappings open: {len(fds)} files, {len(maps)} "
                f"mappings; closed {closed} and released {raw_fds} {raw_maps}", pytrace=False)


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
