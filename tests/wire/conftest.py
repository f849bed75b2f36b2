"""The two-host lane (scripts/vm-pair): this guest is A, the peer B is driven over the control
link (kdat_harness.wire).  Every test runs on both wires: RoCE (Soft-RoCE) and iWARP (siw)."""
import os
from dataclasses import dataclass

import pytest

from kdat_harness import guest, wire
from wire_helpers import sh


def pytest_collection_modifyitems(config, items):
    if os.environ.get("KDAT_WIRE_ROLE") == "a":
        return
    skip = pytest.mark.skip(reason="two-host test: run through 'make test-wire' or scripts/vm-pair")
    for item in items:
        item.add_marker(skip)


@dataclass(frozen=True)
class Wire:
    name: str      # "roce" or "iwarp"
    self_addr: str
    peer_addr: str
    netdev: str    # this guest's card of that wire (the peer's has the same name)
    ibdev: str

    def __str__(self):
        return self.name


def wire_of(name):
    e = os.environ
    up = name.upper()
    return Wire(name, e[f"KDAT_WIRE_{up}_SELF"], e[f"KDAT_WIRE_{up}_PEER"],
                e[f"KDAT_WIRE_{up}_NETDEV"], e[f"KDAT_WIRE_{up}_IBDEV"])


@pytest.fixture(params=["roce", "iwarp"])
def link(request):
    return wire_of(request.param)


@pytest.fixture(scope="session")
def peer():
    p = wire.Peer()
    yield p
    p.line.close()


@pytest.fixture(scope="session")
def kdat_module():
    """kdat.ko loaded here for the session (the peer loads its own at every boot)."""
    if not guest.module_loaded():
        guest.load_module()
    yield
    guest.unload_kdat_at_session_end()


# A test that drops packets with netem may meet rxe's own defect under loss (scripts/
# known-kernel-defects): that report, and only that one, is excused in its kernel logs.
LOSS_DEFECTS = ["rxe-completer-loss"]


@pytest.fixture
def kernel_log(request, peer):
    """Fails the test if it made either host's kernel log report an Oops, WARNING, BUG, ...
    (the peer's is also kept whole per boot by scripts/wire-peer, and vm-pair checks it).
    log.peer_lines() are the peer's lines since the test began."""
    log = guest.KernelLog()
    if "netem" in request.fixturenames:
        log.allow = list(LOSS_DEFECTS)
    before = int(peer.sh("dmesg | wc -l")["out"])
    log.peer_lines = lambda: peer.sh(f"dmesg | tail -n +{before + 1}")["out"].splitlines()
    yield log
    reports = log.reports()
    for name, first in log.excused:
        print(f"excused here ({name}, scripts/known-kernel-defects): {first}")
    assert not reports, "kernel log reports here during the test:\n" + "\n".join(log.new_lines())
    theirs = log.peer_lines()
    excused = []
    bad = guest.reports(theirs, log.allow, excused)
    for name, first in excused:
        print(f"excused on the peer ({name}, scripts/known-kernel-defects): {first}")
    assert not bad, "kernel log reports on the peer during the test:\n" + "\n".join(theirs)


@pytest.fixture
def remote(peer, link):
    """A process on the peer with an IA on the peer's side of the wire; killed afterwards."""
    agents = []

    def make():
        a = peer.agent(link.peer_addr)
        agents.append(a)
        return a

    yield make
    for a in agents:
        a.kill()


@pytest.fixture
def netem(peer, link):
    """netem(spec, here=True, there=True): a qdisc on this wire's card on either end; removed
    from both afterwards (and before, should an earlier test have died holding one)."""
    def clear():
        if "netem" in sh("tc", "qdisc", "show", "dev", link.netdev):
            sh("tc", "qdisc", "del", "dev", link.netdev, "root")
        peer.sh(f"tc qdisc del dev {link.netdev} root 2>/dev/null || true")

    def apply(spec, here=True, there=True):
        if here:
            sh("tc", "qdisc", "replace", "dev", link.netdev, "root", "netem", *spec.split())
        if there:
            peer.sh(f"tc qdisc replace dev {link.netdev} root netem {spec}")

    clear()
    yield apply
    clear()
