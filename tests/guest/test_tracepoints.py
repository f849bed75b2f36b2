"""kdat's tracepoints (tracefs events/kdat/): an operator sees every endpoint step through the state
table, the rdma_cm event behind it, and connection requests, without writing a program.  Each
traced step is checked against the table (tests/kdat_harness/table.py parses ep_table.h, as the
module compiles it)."""
import json
import os
import re
import subprocess

import pytest

from kdat_harness.dat import (client, connect_pair, expect_dat_error, host_addr, kdat_files, next_port,  # noqa: F401
                              server, wait_cr)
from kdat_harness.guest import OneCpu
from kdat_harness.table import Table

TRACING = "/sys/kernel/tracing"
SILENT_HOST = "192.0.2.99"   # on kdat0's subnet, nobody there (as test_connect.py)
TABLE = Table()
STEP = re.compile(r"kdat_ep_step:\s+table=(?P<table>\d+) ep=(?P<ep>\d+) (?P<frm>\w+) (?P<stim>\w+) -> "
                  r"(?P<to>\w+) action=(?P<action>\w+) event=(?P<event>\w+) "
                  r"effects=0x(?P<effects>[0-9a-f]+) qpn=(?P<qpn>\d+) src=(?P<src>\S+) "
                  r"dst=(?P<dst>\S+) cm_id=(?P<cm_id>\S+)")
CM = re.compile(r"kdat_cm_event:\s+table=(\d+) (\w+)=(\d+) (\w+) status=(-?\d+) src=(\S+) dst=(\S+) "
                r"cm_id=(\S+)")
CR = re.compile(r"kdat_cr_arrival:\s+table=(\d+) sp=(\d+) cr=(\d+) ep=(\d+) conn_qual=(\d+) "
                r"private_data=(\d+) src=(\S+) dst=(\S+) cm_id=(\S+)")


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
    return [(m["frm"], m["stim"], m["to"], m["action"], m["event"], int(m["effects"], 16))
            for m in _step_matches(lines, table, ep)]


def _step_matches(lines, table, ep):
    return [m for m in map(STEP.search, lines) if m and int(m["table"]) == table and int(m["ep"]) == ep]


def _cm_before(lines, table, ep, stimulus):
    """(event, status) of the last rdma_cm event of `ep` traced before its step on `stimulus`."""
    last = None
    for line in lines:
        m, s = CM.search(line), STEP.search(line)
        if m and m[2] == "ep" and int(m[1]) == table and int(m[3]) == ep:
            last = (m[4], int(m[5]))
        elif s and int(s["table"]) == table and int(s["ep"]) == ep and s["stim"] == stimulus:
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
            assert event == want_event, (frm, stim, event, want_event)
        else:
            assert to == frm and event == "NONE", (frm, stim, to, event)
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
    assert steps[-1] == ("CONNECTED", "CONNECT", "CONNECTED", "INVALID", "NONE", 0), steps


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


def test_the_exported_formats_name_no_enum_constant(kdat_module):
    """perf and trace-cmd decode an event from its exported print format, and cannot evaluate a
    C enum constant there: every enum printed symbolically must reach the format as a number."""
    if not os.path.exists(os.path.join(TRACING, "events")):
        subprocess.run(["mount", "-t", "tracefs", "nodev", TRACING], check=True)
    for event in ("kdat_ep_step", "kdat_cm_event", "kdat_cr_arrival"):
        with open(os.path.join(TRACING, "events", "kdat", event, "format")) as f:
            fmt = f.read()
        assert "print fmt:" in fmt, fmt
        left = set(re.findall(r"\b(?:KDAT|RDMA)_\w+", fmt.split("print fmt:", 1)[1]))
        assert not left, f"{event}'s format names {sorted(left)}"


# ---- decoded by Debian's perf and trace-cmd ----------------------------------------------------

# What the tools record with kdat's events: rdma_cma's handler event, which names the core's
# restrack id (cm.id, rdma res show cm_id's cm-idn) with the same source and destination.
RDMA_CMA = re.compile(r"cm_event_handler:\s+cm\.id=(\d+) src=(\S+) dst=(\S+) tos=\d+ (\w+) ")


def _record(tool, where, scenario):
    """scenario() run while `tool` ("perf" or "trace-cmd") records kdat's events and rdma_cma's
    handler on every CPU; returns (scenario's result, the tool's decoded lines).  The recorder's
    workload says "ready" once the events are on and ends when told to."""
    data = os.path.join(where, f"{tool}.data")
    if tool == "perf":
        rec = ["perf", "record", "-q", "-N", "-B", "-a", "-e", "kdat:*",
               "-e", "rdma_cma:cm_event_handler", "-o", data, "--"]
        rep = ["perf", "script", "-i", data]
    else:
        rec = ["trace-cmd", "record", "-q", "-e", "kdat", "-e", "rdma_cma:cm_event_handler",
               "-o", data]
        rep = ["trace-cmd", "report", "-i", data]
    p = subprocess.Popen(rec + ["sh", "-c", "echo ready; read x"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=where)
    try:
        ready = p.stdout.readline()
        if ready != "ready\n":
            p.kill()
            pytest.fail(f"{tool} record did not start: {p.stderr.read()}")
        result = scenario()
    finally:
        try:
            p.stdin.write("\n")
            p.stdin.close()
        except BrokenPipeError:
            pass
        p.wait(timeout=120)
    err = p.stderr.read()
    assert p.returncode == 0, f"{tool} record: rc {p.returncode}: {err}"
    out = subprocess.run(rep, capture_output=True, text=True, check=True, cwd=where).stdout
    results = os.environ.get("KDAT_RESULTS")
    if results:   # the decoded trace, for whoever reads the run
        with open(os.path.join(results, f"tracepoints-{tool}.txt"), "w") as f:
            f.write(out)
    return result, out.splitlines()


def _connect_reject_timeout(client, server, addr):
    """One connection (up, seen by rdma res show, graceful down), one connect the peer rejects,
    one that times out.  Returns what the trace must show."""
    pair = connect_pair(client, server, client_pd=b"hello")
    with client.k.table() as t:
        qpn = t.record(pair.cep).qp_num
    with server.k.table() as t:
        server_qpn = t.record(pair.sep).qp_num
    res = json.loads(subprocess.run(["rdma", "-j", "res", "show", "cm_id"], capture_output=True,
                                    text=True, check=True).stdout)
    client.k.ep_disconnect(pair.cep, graceful=True)
    client.k.expect_event(client.evd, "DISCONNECTED")
    server.k.expect_event(server.evd, "DISCONNECTED")

    rport = next_port()
    server.k.psp_create(server.ia, server.crevd, rport)
    rep = client.ep()
    client.k.ep_connect(rep, addr, rport, 5_000_000)
    server.k.cr_reject(wait_cr(server).cr, private_data=b"no")
    client.k.expect_event(client.evd, "PEER_REJECTED")

    tport = next_port()
    tep = client.ep()
    client.k.ep_connect(tep, SILENT_HOST, tport, 200_000)
    client.k.expect_event(client.evd, "TIMED_OUT", 5_000_000)
    return dict(pair=pair, qpn=qpn, server_qpn=server_qpn, res=res, rport=rport, rep=rep,
                tport=tport, tep=tep)


@pytest.mark.parametrize("tool", ["perf", "trace-cmd"])
def test_perf_and_trace_cmd_decode_a_connect_a_reject_and_a_timeout(client, server, tool, tmp_path):
    addr = host_addr()
    os.chmod(tmp_path, 0o755)
    with OneCpu():  # the tool enables and disables the events: kernel text is patched
        s, lines = _record(tool, str(tmp_path),
                           lambda: _connect_reject_timeout(client, server, addr))
    text = "\n".join(lines)
    ct, st = _table_id(client), _table_id(server)

    # Every kdat line decodes whole: names where the kernel has enum constants, no numbers
    steps = [m for m in map(STEP.search, lines) if m]
    assert len(steps) == len([x for x in lines if "kdat_ep_step:" in x]), text
    for m in steps:
        assert {m["frm"], m["to"]} <= set(TABLE.states), m[0]
        assert m["stim"] in TABLE.stimuli and m["event"] in TABLE.event_value, m[0]
        assert m["action"] in ("GO", "NOOP", "STALE", "INVALID"), m[0]
    cms = [m for m in map(CM.search, lines) if m]
    assert cms and len(cms) == len([x for x in lines if "kdat_cm_event:" in x]), text

    # The connection: both sides' steps as the table has them, with its addresses and QP numbers
    pair = s["pair"]
    assert _check_against_table(_steps(lines, ct, pair.cep)) == "DISCONNECTED", text
    assert _check_against_table(_steps(lines, st, pair.sep)) == "DISCONNECTED", text
    up = [m for m in _step_matches(lines, ct, pair.cep) if m["stim"] == "ESTABLISHED"]
    assert len(up) == 1 and up[0]["to"] == "CONNECTED" and up[0]["event"] == "ESTABLISHED", text
    up = up[0]
    src, dst = up["src"], up["dst"]
    assert dst == f"{addr}:{pair.port}" and src.startswith(f"{addr}:") and src != f"{addr}:0", up[0]
    assert int(up["qpn"]) == s["qpn"], (up[0], s["qpn"])
    sup = [m for m in _step_matches(lines, st, pair.sep) if m["stim"] == "ESTABLISHED"]
    assert [(m["src"], m["dst"], int(m["qpn"])) for m in sup] == [(dst, src, s["server_qpn"])], text
    # the REP that made it: same id, same addresses
    rep = [m for m in cms if int(m[1]) == ct and m[2] == "ep" and int(m[3]) == pair.cep and
           m[4] == "CONNECT_RESPONSE"]
    assert [(m[5], m[6], m[7], m[8]) for m in rep] == [("0", src, dst, up["cm_id"])], text
    crs = [m for m in map(CR.search, lines) if m and int(m[1]) == st and int(m[5]) == pair.port]
    assert [(m[7], m[8]) for m in crs] == [(dst, src)], text

    # The join: rdma res show cm_id lists the same id by lqpn and addresses, and rdma_cma's own
    # tracepoint names its cm.id (cm-idn) beside the same event
    ids = [i for i in s["res"] if i.get("lqpn") == s["qpn"]]
    assert len(ids) == 1 and ids[0].get("src-addr") == src and ids[0].get("dst-addr") == dst, \
        (s["res"], src, dst)
    cma = [m for m in map(RDMA_CMA.search, lines) if m]
    assert cma, f"no rdma_cma:cm_event_handler line:\n{text}"
    assert (str(ids[0]["cm-idn"]), src, dst, "CONNECT_RESPONSE") in \
        {(m[1], m[2], m[3], m[4]) for m in cma}, text

    # The reject: its REJECTED event (a non-zero reason) before the PEER_REJECTED step
    rsteps = _step_matches(lines, ct, s["rep"])
    assert _check_against_table(_steps(lines, ct, s["rep"])) == "DISCONNECTED", text
    assert [m["stim"] for m in rsteps if m["action"] == "GO"] == ["CONNECT", "PEER_REJECTED"]
    assert rsteps[-1]["event"] == "PEER_REJECTED" and rsteps[-1]["dst"] == f"{addr}:{s['rport']}"
    assert int(rsteps[-1]["qpn"]) != 0, rsteps[-1][0]
    why = _cm_before(lines, ct, s["rep"], "PEER_REJECTED")
    assert why and why[0] == "REJECTED" and why[1] != 0, text

    # The timeout: to the silent host's qualifier, ended by the connect timer
    tsteps = _step_matches(lines, ct, s["tep"])
    assert _check_against_table(_steps(lines, ct, s["tep"])) == "DISCONNECTED", text
    assert [(m["stim"], m["event"]) for m in tsteps if m["action"] == "GO"] == \
        [("CONNECT", "NONE"), ("TIMEOUT", "TIMED_OUT")], text
    assert tsteps[-1]["dst"] == f"{SILENT_HOST}:{s['tport']}", tsteps[-1][0]
