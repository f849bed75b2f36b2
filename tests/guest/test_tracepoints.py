"""kdat's tracepoints (tracefs events/kdat/): an operator sees every endpoint step through the state
table, the rdma_cm event behind it, and connection requests, without writing a program.  Each
traced step is checked against the table (tests/kdat_harness/table.py parses ep_table.h, as the
module compiles it)."""
import os
import re
import subprocess

import pytest

from kdat_harness.dat import (client, connect_pair, expect_dat_error, host_addr, kdat_files, next_port,  # noqa: F401
                              server)
from kdat_harness.guest import OneCpu
from kdat_harness.table import Table

TRACING = "/sys/kernel/tracing"
SILENT_HOST = "192.0.2.99"   # on kdat0's subnet, nobody there (as test_connect.py)
TABLE = Table()
STEP = re.compile(r"kdat_ep_step: table=(\d+) ep=(\d+) (\w+) (\w+) -> (\w+) action=(\w+) "
                  r"event=0x([0-9a-f]+) effects=0x([0-9a-f]+)")
CM = re.compile(r"kdat_cm_event: table=(\d+) (\w+)=(\d+) (\w+) status=(-?\d+)")
CR = re.compile(r"kdat_cr_arrival: table=(\d+) sp=(\d+) cr=(\d+) ep=(\d+) conn_qual=(\d+) "
                r"private_data=(\d+)")


def _write(name, value):
    with open(os.path.join(TRACING, name), "w") as f:
        f.write(value)


@pytest.fixture
def trace(kdat_module):
    """events/kdat enabled on an empty buffer for one test; returns a reader of the lines so far.
    The whole test runs on one CPU: enabling and disabling events patches kernel text (OneCpu)."""
    with OneCpu():
        yield from _trace()


def _trace():
    if not os.path.exists(os.path.join(TRACING, "trace")):
        subprocess.run(["mount", "-t", "tracefs", "nodev", TRACING], check=True)
    assert os.path.isdir(os.path.join(TRACING, "events", "kdat")), "kdat.ko registered no events"
    _write("tracing_on", "0")
    _write("buffer_size_kb", "4096")
    _write("trace", "")
    _write("events/kdat/enable", "1")
    _write("tracing_on", "1")

    def read():
        with open(os.path.join(TRACING, "trace")) as f:
            return f.read().splitlines()
    yield read
    _write("events/kdat/enable", "0")
    _write("trace", "")


def _table_id(side):
    return side.k.table().header().id


def _steps(lines, table, ep):
    """(from, stimulus, to, action, event, effects) of every traced step of one EP, in order."""
    out = []
    for line in lines:
        m = STEP.search(line)
        if m and int(m[1]) == table and int(m[2]) == ep:
            out.append((m[3], m[4], m[5], m[6], int(m[7], 16), int(m[8], 16)))
    return out


def _cm_before(lines, table, ep, stimulus):
    """(event, status) of the last rdma_cm event of `ep` traced before its step on `stimulus`."""
    last = None
    for line in lines:
        m, s = CM.search(line), STEP.search(line)
        if m and m[2] == "ep" and int(m[1]) == table and int(m[3]) == ep:
            last = (m[4], int(m[5]))
        elif s and int(s[1]) == table and int(s[2]) == ep and s[4] == stimulus:
            return last
    return None


def _check_against_table(steps):
    """Every traced step is the table's answer for its (state, stimulus), and they chain."""
    state = "UNCONNECTED"
    for frm, stim, to, action, event, _ in steps:
        assert frm == state, f"step {stim} traced from {frm}, but the EP was {state}: {steps}"
        want_action, want_next, want_event = TABLE.lookup(frm, stim)
        assert action == want_action, (frm, stim, action, want_action)
        if action == "GO":
            assert to == want_next, (frm, stim, to, want_next)
            assert event == TABLE.event_value[want_event], (frm, stim, event, want_event)
        else:
            assert to == frm and event == 0, (frm, stim, to, event)
        state = to
    return state


def test_a_connection_s_life_is_traced_step_by_step_as_the_table_has_it(client, server, trace):
    pair = connect_pair(client, server, client_pd=b"hello")
    client.k.ep_disconnect(pair.cep, graceful=True)
    client.k.expect_event(client.evd, "DISCONNECTED")
    server.k.expect_event(server.evd, "DISCONNECTED")
    lines = trace()
    ct, st = _table_id(client), _table_id(server)
    assert ct != st

    csteps = _steps(lines, ct, pair.cep)
    assert _check_against_table(csteps) == "DISCONNECTED", "\n".join(lines)
    # the state changes, in order (steps that keep the state, if the table has any, may sit between)
    assert [(s[0], s[2]) for s in csteps if s[0] != s[2]] == [
        ("UNCONNECTED", "ACTIVE_CONNECTION_PENDING"),
        ("ACTIVE_CONNECTION_PENDING", "CONNECTED"),
        ("CONNECTED", "DISCONNECT_PENDING"),
        ("DISCONNECT_PENDING", "DISCONNECTED"),
    ], "\n".join(lines)
    ssteps = _steps(lines, st, pair.sep)
    assert _check_against_table(ssteps) == "DISCONNECTED", "\n".join(lines)
    assert ("UNCONNECTED", "ACCEPT") in [(s[0], s[1]) for s in ssteps]

    # the request: on the server's table, its PSP, with the connect's private data
    crs = [m for m in map(CR.search, lines) if m]
    assert [(int(m[1]), int(m[2]), int(m[5]), int(m[6])) for m in crs] == \
        [(st, pair.psp, pair.port, len(b"hello"))], "\n".join(lines)
    # the rdma_cm event behind each side's ESTABLISHED step: the REP on the active side (kdat
    # sends the RTU itself), ESTABLISHED (the RTU) on the passive side; status 0 both
    assert _cm_before(lines, ct, pair.cep, "ESTABLISHED") == ("CONNECT_RESPONSE", 0), "\n".join(lines)
    assert _cm_before(lines, st, pair.sep, "ESTABLISHED") == ("ESTABLISHED", 0), "\n".join(lines)
    # the request arrived on the server's SP
    assert ("sp", "CONNECT_REQUEST") in {(m[2], m[4]) for m in map(CM.search, lines)
                                         if m and int(m[1]) == st and int(m[3]) == pair.psp}


def test_a_refused_call_is_traced_with_the_table_s_answer(client, server, trace):
    """A consumer call the table refuses (a second connect of a connected EP) is traced as INVALID
    with the state unchanged, and the call fails."""
    pair = connect_pair(client, server)
    assert TABLE.lookup("CONNECTED", "CONNECT")[0] == "INVALID"
    expect_dat_error("INVALID_STATE", client.k.ep_connect, pair.cep, host_addr(), next_port(), 5_000_000)
    steps = _steps(trace(), _table_id(client), pair.cep)
    assert steps[-1] == ("CONNECTED", "CONNECT", "CONNECTED", "INVALID", 0, 0), steps


def test_a_failed_connect_is_traced_with_the_cm_event_and_status_that_ended_it(client, trace):
    cep = client.ep()
    client.k.ep_connect(cep, SILENT_HOST, next_port(), 60_000_000)
    try:
        ev = client.k.expect_event(client.evd, "UNREACHABLE", 20_000_000)
        assert ev.ep == cep
    finally:
        client.k.call("ep_disconnect", ep=cep)
    lines = trace()
    ct = _table_id(client)
    steps = _steps(lines, ct, cep)
    assert _check_against_table(steps) == "DISCONNECTED", "\n".join(lines)
    assert [s[1] for s in steps if s[3] == "GO"] == ["CONNECT", "UNREACHABLE"]
    # the reason: the EP's last rdma_cm event before its UNREACHABLE step is an error with a status
    reason = _cm_before(lines, ct, cep, "UNREACHABLE")
    assert reason and reason[0] in ("ADDR_ERROR", "ROUTE_ERROR", "UNREACHABLE") and reason[1] != 0, \
        "\n".join(lines)
