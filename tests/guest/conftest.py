"""Fixtures for tests that run inside the kdat guest (scripts/vm-run)."""
import os

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
    r = guest.unload_module()
    assert r.returncode == 0, f"rmmod kdat failed: {r.stderr}"


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
