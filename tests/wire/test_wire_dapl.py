"""Debian's DAPL programs (dapl2-utils, unmodified) between the two hosts: the server on the peer,
the client here, over kdat's provider (libdaplkdat) and over DAPL's own libdaplofa, in every
pairing -- kdat with kdat, libdaplofa with libdaplofa (the control), and each with the other.

Both providers speak plain rdma_cm on the wire: port = the connection qualifier (openib_cma's
SID_TO_PORT), the QP made by the provider, the data exchanged by the programs themselves.  kdat's
provider frames its private data (README) unless its dat.conf entry says `pdata=raw`: dapltest's
server checks the private data of each connect, so a framed kdat client and a libdaplofa server do
not share a wire format (the last test shows it), while a framed kdat server reads a libdaplofa
client's plain field whole, and `pdata=raw` speaks libdaplofa's format both ways.

The rule is test_dapl_suite's: where the control passes on a wire, every pairing with kdat must
pass too, on RoCE and on iWARP (where the iWARP CM takes the provider's user-owned QP by its
number and moves it itself, as it does librdmacm's)."""
import json
import os
import re
import shlex
import subprocess
import tempfile
import time

import pytest

from kdat_harness import KDATCTL, REPO, known_defects
from kdat_harness.dapl import without_quit_reply_race
from kdat_harness.dat import next_port

CONF = "/tmp/kdat-wire-dat.conf"
# where a DAPL program that dies by a signal leaves its core, on either host (kernel.core_pattern;
# %e: the program's name), for the backtrace a failure shows
CORE_PATTERN = "/tmp/kdat-core.%e.%p"
LIB = os.path.join(REPO, "build", "user", "dapl", "libdaplkdat.so.2.0.0")
# (server's provider, client's): every pairing that shares a wire format.  A framed kdat client
# with a libdaplofa server does not: test_a_framed_kdat_client_... shows what dapltest says.
PAIRINGS = [("ofa", "ofa"), ("kdat", "kdat"), ("kdat", "ofa"), ("ofa", "kdat-raw"),
            ("kdat-raw", "ofa")]

def conf_text(link, alias=None):
    """dat.conf of link's providers.  alias (name, as_name): as_name's entry is name's instead."""
    dev = link.netdev
    entries = {f"kdat-{link}": f'{LIB} dapl.2.0 "{dev}" ""',
               f"kdat-raw-{link}": f'{LIB} dapl.2.0 "{dev} pdata=raw" ""',
               f"ofa-{link}": f'libdaplofa.so.2 dapl.2.0 "{dev} 0" ""'}
    if alias:
        entries[alias[1]] = entries[alias[0]]
    return "".join(f"{name} u2.0 nonthreadsafe default {rest}\n" for name, rest in entries.items())


@pytest.fixture
def dat_conf(link, peer, kdat_module):
    """Both hosts' dat.conf for this wire (DAT_OVERRIDE)."""
    text = conf_text(link)
    with open(CONF, "w") as f:
        f.write(text)
    peer.sh(f"cat > {CONF} <<'EOF'\n{text}EOF")
    for run in (_here, peer.sh):
        run(f"sysctl -qw kernel.core_pattern={CORE_PATTERN}; rm -f /tmp/kdat-core.*")
    return link


def _here(cmd):
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    return {"rc": r.returncode, "out": r.stdout, "err": r.stderr}


def _signal_of(rc):
    """The signal a program died by: Popen's negative rc, or a shell's 128 + N; else None."""
    if isinstance(rc, int) and rc < 0:
        return -rc
    if isinstance(rc, int) and 128 < rc < 128 + 65:
        return rc - 128
    return None


def _core_backtrace(run, program):
    """The backtrace of every core `program` left on one host (run: that host's shell), and the
    cores removed: what a run that died by a signal shows."""
    script = (f"for c in /tmp/kdat-core.{program}.*; do [ -e \"$c\" ] || continue; "
              f"echo \"(core $c)\"; timeout 60 gdb -q -batch -ex 'thread apply all bt 16' "
              f"\"$(command -v {program})\" \"$c\" 2>&1 | grep -v '^\\[New LWP' "
              f"| head -100; rm -f \"$c\"; done; true")
    return run(script)["out"]


# Each program: the server's and the client's arguments (PORT and ADDR filled in), what both must
# print to pass, and the line that says the server waits for its client.
def _dapltest_t(port, addr, provider, iterations=50):
    # siw takes one SGE per RDMA read sink (libdaplofa then reports a short read): 1 segment there
    segs = "1" if provider.endswith("iwarp") else "2"
    ops = ["client", "SR", "4096", "1", "server", "SR", "4096", "1",
           "client", "RW", "4096", segs, "client", "RR", "4096", segs]
    return (["dapltest", "-T", "S", "-D", provider, "-n", str(port)],
            ["dapltest", "-T", "T", "-s", addr, "-D", provider, "-n", str(port), "-i", str(iterations),
             "-t", "2", "-w", "2", "-V", *ops])


PROGRAMS = {
    "dtest": dict(
        server=lambda port, addr, p: ["dtest", "-s", "-P", p, "-B", "10", "-b", "4096"],
        client=lambda port, addr, p: ["dtest", "-h", addr, "-P", p, "-B", "10", "-b", "4096"],
        verdicts=("DAPL Test Complete. PASSED",), server_verdicts=("DAPL Test Complete. PASSED",),
        ready=r"waiting for client connection", tcp=True,
        # its client opens the provider the server names over TCP, whatever its own -P says
        client_opens_servers_provider=True),
    "dtestcm": dict(
        server=lambda port, addr, p: ["dtestcm", "-s", "-P", p, "-c", "10", "-p", str(port)],
        client=lambda port, addr, p: ["dtestcm", "-h", addr, "-P", p, "-c", "10", "-p",
                                      str(port)],
        verdicts=("ALL 10 CONNECTED on Client!", "DAPL Connection Test Complete"),
        server_verdicts=("ALL 10 CONNECTED on Server!", "DAPL Connection Test Complete"),
        ready=r"Server ready on port", tcp=True,
        # as dtest's: "Running client on kdat" loads libdaplofa for an ofa server (LD_DEBUG)
        client_opens_servers_provider=True),
    "dapltest": dict(
        server=lambda port, addr, p: _dapltest_t(port, addr, p)[0],
        client=lambda port, addr, p, **kw: _dapltest_t(port, addr, p, **kw)[1],
        verdicts=("End of Work -- Client Exiting",), server_verdicts=(),
        ready=r"Service Point Ready|Dapltest: Service", tcp=False),
}
ERROR_RE = re.compile(r"\bERR\b|ERROR|Error |error:|FAILED|DAT_[A-Z_]{5,}|Segmentation|timed out|"
                      r"mismatch|problem")
NOT_AN_ERROR_RE = re.compile(r"ASYNC EVD")


def _errors(text):
    return [line.strip() for line in text.splitlines()
            if ERROR_RE.search(line) and not NOT_AN_ERROR_RE.search(line)]


# dapltest's server listens on its -n port and on the ports just above it (a PSP per test thread
# and EP): the qualifiers next_port hands out after one are skipped, so that a later test cannot
# meet a server of this one that is still going away.
DAPLTEST_PORTS = 16


def run_pair(peer, link, program, server_provider, client_provider, timeout=90, before_quit=None,
             while_running=None, **client_kw):
    """Runs `program`'s server on the peer and its client here; returns (ok, server, client)
    where server and client are (rc, output).  client_kw: the client's own options (dapltest:
    iterations).  while_running: called with the client's Popen once it has started.
    before_quit: called after the client ended, before dapltest's server is told to quit."""
    spec = PROGRAMS[program]
    port = next_port()
    if program == "dapltest":
        for _ in range(DAPLTEST_PORTS):
            next_port()
    log = f"/tmp/kdat-wire-dapl-{port}.log"
    sp, cp = f"{server_provider}-{link}", f"{client_provider}-{link}"
    server_cmd = " ".join(shlex.quote(a) for a in spec["server"](port, link.peer_addr, sp))
    # libdaplofa on siw registers memory that counts against RLIMIT_MEMLOCK
    job = peer.spawn(f"ulimit -l unlimited; ulimit -c unlimited; cd /tmp; DAT_OVERRIDE={CONF} "
                     f"timeout {timeout} stdbuf -oL {server_cmd} > {log} 2>&1")
    ready = re.compile(spec["ready"], re.I)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        out = peer.sh(f"cat {log} 2>/dev/null; true")["out"]
        if ready.search(out) or _errors(out):
            break
        time.sleep(0.2)
    if spec["tcp"]:  # dtest and dtestcm trade their parameters over TCP: wait for the listen
        while time.monotonic() < deadline and peer.sh(
                "ss -Hltnp | grep -c 'dtest' || true")["out"].strip() in ("", "0"):
            if _errors(peer.sh(f"cat {log}; true")["out"]):
                break
            time.sleep(0.2)
    else:
        time.sleep(1)
    env = dict(os.environ, DAT_OVERRIDE=CONF)
    client_conf = None
    if spec.get("client_opens_servers_provider") and cp != sp:
        # so here the server's provider name stands for the client's provider
        client_conf = f"/tmp/kdat-wire-dapl-client-{port}.conf"
        with open(client_conf, "w") as f:
            f.write(conf_text(link, alias=(cp, sp)))
        env["DAT_OVERRIDE"] = client_conf
    # the output goes to files: a pipe that nobody reads while while_running waits could fill
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            ["bash", "-c", "ulimit -l unlimited; ulimit -c unlimited; exec \"$@\"", "client",
             "timeout", str(timeout), "stdbuf", "-oL",
             *spec["client"](port, link.peer_addr, cp, **client_kw)],
            env=env, stdout=out, stderr=err, text=True, cwd="/tmp")
        try:
            if while_running:
                while_running(proc)
        except BaseException:
            proc.kill()
            proc.wait()
            peer.kill(job)
            raise
        proc.wait()
        out.seek(0)
        err.seek(0)
        client = subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), err.read())
    if before_quit:
        before_quit()
    quit_run = None
    quit_mark = None
    if program == "dapltest":  # its server serves until told to quit
        quit_mark = int(peer.sh(f"stat -c %s {log}")["out"].strip())
        quit_run = subprocess.run(["timeout", "30", "dapltest", "-T", "Q", "-s", link.peer_addr,
                               "-D", cp, "-n", str(port)], env=env, capture_output=True,
                              text=True)
    # A server whose client gave up waits for it until its timeout: 10 s are enough to tell
    # that from one that is still finishing its part (rc None: killed then).
    end = peer.wait(job, timeout=40 if client.returncode == 0 else 10)
    hang = None
    if end["rc"] is None:
        hang = _peer_hang_report(peer, spec["server"](port, link.peer_addr, sp)[0])
        peer.kill(job)
    server_out = peer.sh(f"cat {log}; rm -f {log}")["out"]
    server_judged = server_out
    if quit_mark is not None:
        server_judged = server_out[:quit_mark] + without_quit_reply_race(server_out[quit_mark:])
    client_out = client.stdout + client.stderr
    if client_conf:
        os.unlink(client_conf)
    ok = (client.returncode == 0 and end["rc"] == 0
          and all(v in client_out for v in spec["verdicts"])
          and all(v in server_out for v in spec["server_verdicts"])
          and not _errors(client_out) and not _errors(server_judged))
    # what a failure shows besides the server's own output
    if quit_run is not None and quit_run.returncode != 0:
        server_out += f"\n(the quit, dapltest -T Q: rc {quit_run.returncode})\n"
        server_out += (quit_run.stdout + quit_run.stderr)[-800:]
    if hang is not None:
        server_out += f"\n(the server, before the kill)\n{hang}"
    prog = os.path.basename(spec["server"](port, link.peer_addr, sp)[0])
    if _signal_of(end["rc"]) is not None:
        server_out += (f"\n(the server died by signal {_signal_of(end['rc'])})\n"
                       + _core_backtrace(peer.sh, prog))
    if _signal_of(client.returncode) is not None:
        client_out += (f"\n(the client died by signal {_signal_of(client.returncode)})\n"
                       + _core_backtrace(_here, prog))
    return ok, (end["rc"], server_out), (client.returncode, client_out)


def _peer_hang_report(peer, name):
    """kdat_harness.dapl.hang_report on the peer, for its processes called `name` (the server
    that did not end): their kdat objects and kernel and user stacks."""
    script = ("import subprocess, sys; from kdat_harness.dapl import hang_report; "
              "pids = subprocess.run(['pgrep', '-x', sys.argv[1]], capture_output=True, "
              "text=True).stdout.split(); "
              "print(hang_report({f'{sys.argv[1]} on the peer': int(p) for p in pids}))")
    r = peer.sh(f"PYTHONPATH=tests timeout 200 /usr/bin/python3 -c {shlex.quote(script)} "
                f"{shlex.quote(os.path.basename(name))}", timeout=240, check=False)
    return r["out"] + r["err"][-500:]


def _show(label, rc, out):
    return f"--- {label} (rc {rc}):\n{out[-6000:]}"


# On iWARP an FPDU that reaches the responder between siw_accept's MPA reply and its hand-over of
# the socket to the QP stays unread (a siw race, README "Where iWARP differs"); the siw the lane
# runs carries a fix (kunit/test-kernel-patches/0002-siw-*.patch), so dapltest -T T over kdat
# must pass on iWARP too.
# dtest's and dtestcm's clients check the private data of their CONNECTED events, so a framed
# kdat server's reaches a libdaplofa client with kdat's header in front (`pdata=raw` is for that):
# what each says, on both wires.
FRAMED_SERVER_MISMATCH = {"dtest": "Error with CONNECT event private data",
                          "dtestcm": "ERR CONN event pdata"}


# dtest's server sends as soon as it is CONNECTED, which MPA does not allow a responder before the
# initiator's first FPDU (RFC 5044; siw has no RTR). If that FPDU reaches the initiator before siw
# has read the MPA reply, siw reads both, calls it a protocol error and fails the connect
# (siw_recv_mpa_rr -> -EPROTO -> CONNECT_ERROR -22): the client never connects, the server saw
# CONNECTED and its receives flushed.  A kdat server keeps rdma_connect(3)'s rule (its sends wait
# for the client's first message: test_wire_first_message.py), so that is asserted never to happen
# with it; a libdaplofa server does not, and only with one is that signature tried again, on iWARP.
MPA_EARLY_FPDU_TRIES = 4


# libdaplofa's own dapltest client on siw now and then dies by SIGSEGV once its test is over (it
# has printed its totals, not "End of Work"), and on a loaded machine libdaplofa's own dapltest
# server on siw can fail with a send completed as LengthError ("Server_Info_Send-reaping DTO
# problem"), rc 0, no signal.  The control asks whether libdaplofa passes on this wire at all, so
# a control run that failed runs again, at most CONTROL_TRIES times, whatever the failure.  The
# SIGSEGV also hits libdaplofa's dtestcm client or server across from kdat, on either wire (a
# libdaplofa server that dies fails the kdat client too; the peer's shell reports the signal as rc
# 139).  So a mixed pairing also runs again when its libdaplofa side died by a signal, at most
# CONTROL_TRIES times, and every run that died by a signal shows the core's backtrace
# (_core_backtrace): a crash that kdat's side provoked every time still fails, and a rare one is
# printed for whoever reads the log.
CONTROL_TRIES = 3


def _died_by_signal(server, client):
    return any(_signal_of(rc) is not None for rc in (server[0], client[0]))


def _ofa_died_by_signal(server_provider, client_provider, server, client):
    """The libdaplofa side died by a signal (its kdat peer then fails for want of it)."""
    sides = ((server_provider, server[0]), (client_provider, client[0]))
    return any(p == "ofa" and _signal_of(rc) is not None for p, rc in sides)


def _mpa_early_fpdu(server, client):
    return ("CONNECTED!" in server[1] and "CONNECTED!" not in client[1]
            and ("status=-22" in client[1]
                 or "DAT_CONNECTION_EVENT_NON_PEER_REJECTED" in client[1]))


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_dapl_programs_pass_across_the_wire_wherever_libdaplofa_passes(dat_conf, link, peer,
                                                                       program, kernel_log):
    outcomes = {}
    for server_provider, client_provider in PAIRINGS:
        control = (server_provider, client_provider) == ("ofa", "ofa")
        mixed = "ofa" in (server_provider, client_provider) and not control
        early_fpdu = (link.name, program) == ("iwarp", "dtest") and server_provider == "ofa"
        tries = max(MPA_EARLY_FPDU_TRIES if early_fpdu else 1,
                    CONTROL_TRIES if control or mixed else 1)
        for attempt in range(1, tries + 1):
            outcome = run_pair(peer, link, program, server_provider, client_provider)
            if outcome[0] or attempt == tries:
                break
            if early_fpdu and _mpa_early_fpdu(outcome[1], outcome[2]):
                print(f"{server_provider}->{client_provider}: attempt {attempt} met siw's "
                      f"refusal of an FPDU that came with the MPA reply")
            elif control:
                how = " (died by a signal)" if _died_by_signal(outcome[1], outcome[2]) else ""
                print(f"control: attempt {attempt}: libdaplofa failed{how} (server rc "
                      f"{outcome[1][0]}, client rc {outcome[2][0]})\n"
                      + _show("server", *outcome[1]) + "\n" + _show("client", *outcome[2]))
            elif mixed and _ofa_died_by_signal(server_provider, client_provider,
                                               outcome[1], outcome[2]):
                print(f"{server_provider}->{client_provider}: attempt {attempt}: libdaplofa died "
                      f"by a signal (server rc {outcome[1][0]}, client rc {outcome[2][0]})\n"
                      + _show("server", *outcome[1]) + "\n" + _show("client", *outcome[2]))
            else:
                break
        outcomes[(server_provider, client_provider)] = outcome
    summary = ", ".join(f"{sp}->{cp} {'pass' if o[0] else 'FAIL'}"
                        for (sp, cp), o in outcomes.items())
    control_ok, control_server, control_client = outcomes[("ofa", "ofa")]
    assert control_ok, ("libdaplofa with libdaplofa fails on this wire: the control\n"
                        + _show("server", *control_server) + "\n" + _show("client", *control_client))
    for (sp, cp), (ok, server, client) in outcomes.items():
        if sp == cp == "ofa":
            continue
        if (sp, cp) == ("kdat", "ofa") and program in FRAMED_SERVER_MISMATCH:
            assert not ok and FRAMED_SERVER_MISMATCH[program] in client[1], (
                f"{program}: a framed kdat server's private data must reach a libdaplofa client "
                f"as kdat frames it\n" + _show("server", *server) + "\n" + _show("client", *client))
            continue
        assert ok, (f"{program} on {link}: server over {sp}, client over {cp} fails where "
                    f"libdaplofa passes ({summary})\n" + _show("server", *server) + "\n"
                    + _show("client", *client))


def test_a_framed_kdat_client_is_seen_by_a_libdaplofa_dapltest_server_and_a_raw_one_is_not(
        dat_conf, link, peer, kernel_log):
    """kdat's 4-byte private-data frame is on the wire: libdaplofa's dapltest server compares each
    connect's private data and reports the frame as a mismatch; the same client with pdata=raw
    passes clean.  (README: the dat.conf ia_params.)"""
    ok, server, client = run_pair(peer, link, "dapltest", "ofa", "kdat")
    assert "Private Data mismatch" in server[1], _show("server", *server)
    ok, server, client = run_pair(peer, link, "dapltest", "ofa", "kdat-raw")
    assert ok and "mismatch" not in server[1], (_show("server", *server) + "\n"
                                                + _show("client", *client))


def _dapltest_eps_here():
    """How many EPs the dapltest processes here hold (kdatctl)."""
    r = subprocess.run([KDATCTL, "list", "--json", "--comm", "dapltest", "--type", "EP"],
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        return 0
    return sum(len(t["objects"]) for t in json.loads(r.stdout)["tables"])


def _loss_once_the_command_is_in(netem, spec, applied):
    """A while_running hook for dapltest: netem(spec) once the client here holds more than its
    command's EP (it makes its test threads' EPs after its command's send completed and the
    server's answer arrived), or not at all if the client ends first.  applied: gets the time
    it was applied."""
    def hook(client):
        deadline = time.monotonic() + 60
        while client.poll() is None and time.monotonic() < deadline:
            if _dapltest_eps_here() > 1:
                netem(spec)
                applied.append(time.monotonic())
                return
            time.sleep(0.02)
    return hook


def _netem_drops(peer, link):
    """Packets netem dropped on this wire's card here and on the peer's."""
    def drops(text):
        m = re.search(r"qdisc netem .*?dropped (\d+)", text, re.S)
        return int(m.group(1)) if m else 0
    here = subprocess.run(["tc", "-s", "qdisc", "show", "dev", link.netdev], capture_output=True,
                          text=True).stdout
    return drops(here), drops(peer.sh(f"tc -s qdisc show dev {link.netdev}")["out"])


# What TCP did on a host while a run lasted (/proc/net/netstat and /proc/net/snmp): on iWARP, a
# siw socket closed with received data nobody read sends a reset instead of its FIN and drops what
# it had still to send (TCPAbortOnData), which would lose a message whose send had completed.
TCP_COUNTERS = ("TcpExt:TCPAbortOnData", "TcpExt:TCPAbortOnClose", "Tcp:OutRsts",
                "Tcp:EstabResets", "Tcp:InErrs")


def _tcp_counters(run):
    """TCP_COUNTERS on one host (run: that host's shell) as {name: value}."""
    lines = run("cat /proc/net/netstat /proc/net/snmp")["out"].splitlines()
    values = {}
    for names, numbers in zip(lines, lines[1:]):
        head, _, rest = names.partition(":")
        head2, _, rest2 = numbers.partition(":")
        if head != head2 or not rest2.split() or not rest2.split()[0].lstrip("-").isdigit():
            continue
        for name, number in zip(rest.split(), rest2.split()):
            values[f"{head}:{name}"] = int(number)
    return {name: values.get(name) for name in TCP_COUNTERS}


def _tcp_since(before, run):
    """What TCP_COUNTERS did on one host since before, as text."""
    after = _tcp_counters(run)
    return ", ".join(f"{name.split(':')[1]} +{after[name] - before[name]}"
                     if None not in (after[name], before[name]) else f"{name} ?"
                     for name in TCP_COUNTERS)


def _rxe_defect_seen(kernel_log):
    """rxe's completer defect under loss (scripts/known-kernel-defects) reported on either host
    since the test began."""
    return any(known_defects.excuse(lines, ["rxe-completer-loss"])[1]
               for lines in (kernel_log.new_lines(), kernel_log.peer_lines()))


def test_dapltest_over_kdat_passes_under_1_percent_loss_and_ends_by_itself_under_10(
        dat_conf, link, peer, netem, kernel_log):
    """netem drops packets both ways on the wire while dapltest -T T moves data (send/recv,
    RDMA write and read, 2 threads x 2 EPs; 50 and 30 iterations) over kdat on both hosts.  On
    RoCE each lost data packet is sent again after kdat's local ACK timeout (module parameter
    ack_timeout, 2^16 x 4.096 us = 268 ms); on iWARP TCP sends it again (and a lost SYN or MPA
    message costs TCP's retransmission timeout).  At 1% the test passes, clean, on both sides; a
    run in which rxe's own completer broke a QP (its WARN, scripts/known-kernel-defects:
    rxe-completer-loss) runs once more and must pass.  At 10% both
    programs must end by themselves, whatever dapltest then reports: a lost CM message costs
    the CM's 6 s REQ/REP retry, so a thread's connection can miss the 10 s in which dapltest's
    client waits for all of them to report ready (it then says so and gives up), and the peer's
    threads must see their receives flushed and end too (the wire is healed before the harness
    tells the server to quit, so a lost quit cannot pass for a stuck server).  Neither may wait
    for ever: a thread waiting for a receive on an EP whose peer gave up is woken by the flush, and
    kdat's ACK timeout (module parameter ack_timeout) keeps a QP from stalling for good with
    packets never sent again, as it can with the CM's own (19: 2.1 s).

    The loss starts once dapltest's command exchange is over (the client holds its test
    threads' EPs): dapltest's server disconnects that connection as soon as it has answered, so
    when the ACK of the client's command is lost, the DREQ comes before the resend, the client's
    send completes flushed (its QP goes to error on the DREQ, as rdma_cm's do) and the client
    gives up ("Client_Cmd_Send-reaping DTO problem, status = FAILURE"), while its server's
    threads wait for their connections with no timeout (DT_cr_event_wait): dapltest's protocol,
    with any provider (libdaplofa with libdaplofa too; README).  The iterations keep the lossy
    part the bulk of each run (with too few, dapltest is over before the loss begins); netem must
    have dropped packets in both halves (a half that passed with none dropped runs again, up to
    twice)."""
    halves, rerun, lossless = [("loss 1%", 50, 180), ("loss 10%", 30, 240)], set(), {}
    while halves:
        spec, iterations, timeout = halves.pop(0)
        applied, drops = [], []

        def heal():
            # The wire is healed before the server is told to quit: the quit is the harness's,
            # and a server whose threads still wait for a peer that gave up does not end on it.
            # (The qdiscs go, so that the next half counts its own drops.)
            if applied:
                drops.append(_netem_drops(peer, link))
                subprocess.run(["tc", "qdisc", "del", "dev", link.netdev, "root"], check=True)
                peer.sh(f"tc qdisc del dev {link.netdev} root")
        tcp_before = (_tcp_counters(_here), _tcp_counters(peer.sh))
        ok, server, client = run_pair(
            peer, link, "dapltest", "kdat", "kdat", timeout=timeout, iterations=iterations,
            while_running=_loss_once_the_command_is_in(netem, spec, applied), before_quit=heal)
        tcp = (f"TCP here (client): {_tcp_since(tcp_before[0], _here)}; "
               f"on the peer (server): {_tcp_since(tcp_before[1], peer.sh)}")
        print(f"{spec}: netem dropped {drops} (here, peer); dapltest "
              f"{'passed' if ok else 'did not pass'}; {tcp}")
        # The loss starts only once the client holds its test threads' EPs: a run that ended
        # before that failed on a clean wire, in dapltest's command exchange.
        assert applied, (
            f"dapltest ended before its test threads' EPs existed, on a clean wire (no {spec} "
            f"applied yet; {tcp})\n" + _show("server", *server) + "\n" + _show("client", *client))
        if ok and drops and sum(drops[0]) == 0 and lossless.get(spec, 0) < 2:
            # A run that passed with nothing dropped says nothing about loss (seen once, on 6.12,
            # cause not found; a run drops some 30-60 packets at 1%): it runs again, up to twice.
            lossless[spec] = lossless.get(spec, 0) + 1
            print(f"{spec}: netem dropped nothing in this run: once more")
            halves.insert(0, (spec, iterations, timeout))
            continue
        assert drops and sum(drops[0]) > 0, (
            f"netem dropped nothing while dapltest ran under {spec}: dropped {drops}\n"
            + _show("server", *server) + "\n" + _show("client", *client))
        if spec == "loss 1%":
            if not ok and spec not in rerun and _rxe_defect_seen(kernel_log):
                # rxe's own completer broke a QP (scripts/known-kernel-defects): not kdat's, and
                # not a verdict on the wire's loss; the half runs once more, and must pass.  The
                # WARN is rxe's WARN_ON_ONCE, so a second hit in this boot fails plainly.
                print(f"{spec}: rxe's completer defect (rxe-completer-loss) broke a QP in this "
                      "run: once more\n" + _show("server", *server) + "\n"
                      + _show("client", *client))
                rerun.add(spec)
                halves.insert(0, (spec, iterations, timeout))
                continue
            assert ok, ("dapltest over kdat under 1% loss\n" + _show("server", *server) + "\n"
                        + _show("client", *client)
                        + ("\n(rxe's completer defect was seen in the first run of this half)"
                           if spec in rerun else ""))
            continue
        ended = client[0] not in (None, 124) and server[0] is not None
        assert ended and "End of Work -- Client Exiting" in client[1], (
            "dapltest over kdat under 10% loss did not end by itself\n" + _show("server", *server)
            + "\n" + _show("client", *client))


@pytest.mark.parametrize("spec", ["delay 100ms", "delay 10ms reorder 25% 50%"])
def test_dapltest_over_kdat_passes_through_a_slow_or_reordering_wire(dat_conf, link, peer, netem,
                                                                    spec, kernel_log):
    """dapltest -T T (send/recv, RDMA write and read, 2 threads x 2 EPs, 10 iterations) over
    kdat on both hosts while netem delays every packet both ways by 100 ms, or delays them by
    10 ms and sends a quarter of them at once (out of order): the transports absorb both (RoCE's
    PSNs, with a NAK and a resend for what came early; TCP under iWARP), and the test passes
    clean on both sides.  (The connects and disconnects alone: test_wire_faults.py.)"""
    netem(spec)
    t0 = time.monotonic()
    ok, server, client = run_pair(peer, link, "dapltest", "kdat", "kdat", timeout=180,
                                  iterations=10)
    print(f"{link.name} {spec}: dapltest -T T {'passed' if ok else 'FAILED'} in "
          f"{time.monotonic() - t0:.1f} s")
    assert ok, (f"dapltest over kdat through '{spec}'\n" + _show("server", *server) + "\n"
                + _show("client", *client))
