"""Debian's whole DAPL test suite (dapl2-utils: dapltest, dtest, dtestcm, dtestsrq, dtestx, all
unmodified, from /usr/bin) over both providers of the dat.conf the build writes
(build/user/dapl/dat.conf, selected with DAT_OVERRIDE), side by side: `ofa-v2-<netdev>` (DAPL's
libdaplofa) first, then `kdat` (libdaplkdat), in the same guest.

Each case of CASES names a program, its arguments and what passing means (exit status 0 and, where
the program prints a verdict, that verdict).  The rule: where libdaplofa passes a case on this rxe
device, kdat must pass it too.  Where libdaplofa itself fails, the case asserts only that kdat's run
ended within its timeout and left no process behind, and records kdat's outcome.

Every case's outcome over each provider (PASS/FAIL with the first error line, seconds, the verdict
line; for `dapltest -T P` also the throughput and latency it prints) is appended to dapl-suite.txt
in the results directory (KDAT_RESULTS).

Processes: dapltest's server (`dapltest -T S`) runs once per provider for the module's cases and is
restarted after a case that failed over that provider; dtest, dtestcm, dtestsrq and dtestx run as a
server/client pair per case.  Every process runs under a timeout, a hung one is killed (and its case
fails), and nothing of dapl2-utils is left running after a case or the module.

On the debug kernel (KDAT_DEBUG_KERNEL=1, several times slower) only the cases marked `debug=True`
run, with longer timeouts: those that test_dapl_provider.py (which runs on both kernels) does not
already cover -- dapltest -T P and -T F, dtestx (dtestsrq races there: see its case)."""
import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

import pytest

from kdat_harness import guest
from kdat_harness.dapl import DAPL_DIR, DAT_CONF, hang_report, without_quit_reply_race
from kdat_harness.dapl import listens as _listens
from kdat_harness.dapl import ofa_name as _ofa_name

DEBUG_KERNEL = os.environ.get("KDAT_DEBUG_KERNEL") == "1"
SLOW = 4 if DEBUG_KERNEL else 1  # timeouts scale with the kernel's speed
PROGRAMS = ("dapltest", "dtest", "dtestcm", "dtestsrq", "dtestx")
# dapltest's server port per provider: transaction and performance tests connect there; FFT and
# limit tests take their own ranges above it (FFT's connmgt listens on its -n port itself).
DAPLTEST_PORT = {"ofa": 23000, "kdat": 24000}
FFT_PORT_OFFSET = 500
LIMIT_PORT_OFFSET = 2000
SERVER_GRACE = 20 * SLOW  # s: a pair's server must end this long after its client did


def _port_key(provider):
    return "kdat" if provider == "kdat" else "ofa"


# ---- what passing means ------------------------------------------------------------------------

# A line that says what went wrong, for the record and the assertion message.  (dtestcm's verbose
# " ERR: Checking ASYNC EVD..." is a normal line; dapltest FFT's "Result: PASS" cases print the
# error they expected.)
ERROR_RE = re.compile(r"\bERR\b|ERROR|Error|error|FAIL|failed|fails|DAT_[A-Z_]{4,}|Segmentation|"
                      r"Abort|[Cc]ould ?n[o']t|[Cc]annot|timed out|Invalid")
NOT_AN_ERROR_RE = re.compile(r"ASYNC EVD|Result: PASS|DAT_IB_|DAT_EXTENSION_INTERFACE|"
                             r"Provider Specific Attribute")


@dataclass(frozen=True)
class Case:
    name: str  # the pytest id
    program: str
    # "dapltest": a dapltest client against the provider's dapltest server (-s, -D, -n added);
    # "quit": the same with -T Q, after which the server must exit; "local": dapltest without a
    # server (-D, -n added); "fft": the same with -s; "pair": `program -s` and
    # `program -h ADDR` (-P added to both); "alone": one process (-P added)
    mode: str
    args: tuple
    # strings the client's output (both sides' for a pair) must contain
    verdicts: tuple = ()
    # for a pair, strings the server's output must contain (default: the same as the client's)
    server_verdicts: tuple = None
    # a pattern whose every match must read as passing (FFT: each case's "Result: ...")
    each: tuple = None  # (pattern, passing group value, at least this many matches)
    # a count the output must reach: (pattern with one number group, at least)
    count: tuple = None
    # a pattern no output may match
    forbid: str = None
    timeout: float = 30  # s, per process (times SLOW); libdaplofa needs a few seconds at most
    debug: bool = False  # also on the debug kernel
    # why kdat must pass where libdaplofa fails on rxe (issue #20: where kdat can do better)
    better: str = ""
    figures: bool = False  # dapltest -T P: record the figures it prints
    marks: tuple = field(default=(), compare=False)
    # a pair's client only: dtestx -u takes -h for both roles and wants -c for the client's
    client_args: tuple = ()
    # reports of code outside kdat that the case provokes (scripts/known-kernel-defects)
    kernel_defects: tuple = ()
    # dtestx -u: a side may tear down before its own UD sends left (guest.rxe_runs_tasks_on_a_work_queue)
    teardown_race: bool = False


@dataclass
class Outcome:
    provider: str
    passed: bool
    error: str  # the first error line, "" if passed
    verdict: str  # the verdict line the program printed (or "")
    seconds: float
    hung: list  # processes that did not end within their timeout (killed)
    strays: list  # dapl2-utils processes left running afterwards (killed)
    outputs: list  # (label, rc, output)
    figures: str = ""

    def tail(self, chars=2500):
        return "\n".join(f"--- {self.provider} {label} (rc {rc}):\n{out[-chars:]}"
                         for label, rc, out in self.outputs)


def _first_error(outputs):
    for _, _, out in outputs:
        for line in out.splitlines():
            if ERROR_RE.search(line) and not NOT_AN_ERROR_RE.search(line):
                return line.strip()
    return ""


def _judge(case, outputs):
    """(passed, first error line, verdict line) of one run: outputs are (label, rc, text)."""
    problems = []
    verdict = ""
    for label, rc, out in outputs:
        if rc != 0:
            problems.append(f"{label} rc {rc}")
        wanted = case.verdicts
        if label == "server" and case.server_verdicts is not None:
            wanted = case.server_verdicts
        for w in wanted:
            hit = next((line.strip() for line in out.splitlines() if w in line), None)
            if hit is None:
                problems.append(f"{label} did not print {w!r}")
            elif not verdict:
                verdict = hit
        if case.each:
            pattern, good, at_least = case.each
            results = re.findall(pattern, out)
            bad = [r for r in results if r != good]
            if len(results) < at_least or bad:
                problems.append(f"{label}: {len(results) - len(bad)} of {at_least} "
                                f"cases {good}")
            verdict = verdict or f"{len(results) - len(bad)}/{len(results)} {good}"
        if case.forbid:
            bad = re.search(case.forbid, out, re.M)
            if bad:
                problems.append(f"{label}: {bad.group(0).strip()}")
        if case.count:
            pattern, at_least = case.count
            m = re.search(pattern, out)
            if not m or int(m.group(1)) < at_least:
                problems.append(f"{label}: {m.group(0) if m else 'no count'}, wanted "
                                f"{at_least}")
            verdict = m.group(0) if m else verdict
    if not problems:
        return True, "", verdict
    first = _first_error(outputs)
    return False, (f"{first} ({'; '.join(problems)})" if first else "; ".join(problems)), verdict


def _perf_figures(out):
    """dapltest -T P's 'raw:' line: op, ops, seg size, segs, pipeline, CPU %, ops/s, MB/s,
    latency mean, post mean, reap mean (us)."""
    m = re.search(r"^raw: (.*)$", out, re.M)
    if not m:
        return ""
    f = [x.strip() for x in m.group(1).split(",")]
    if len(f) < 11:
        return ""
    return (f"{f[6]} ops/s, {f[7]} MB/s, latency mean {f[8]} us (post {f[9]} us, reap "
            f"{f[10]} us), CPU {f[5]} %")


# ---- the cases ----------------------------------------------------------------------------------

T_END = "End of Work -- Client Exiting"
T_OPS = ("client", "SR", "1024", "server", "SR", "1024")


def _t(name, *args, ops=T_OPS, debug=False):
    return Case(f"dapltest-T-{name}", "dapltest", "dapltest", ("-T", "T", "-i", "10", *args, *ops),
                verdicts=(T_END,), debug=debug)


def _p(name, *args, debug=False):
    return Case(f"dapltest-P-{name}", "dapltest", "dapltest", ("-T", "P", "-i", "100", *args),
                verdicts=("raw: ", T_END), figures=True, debug=debug)


LIMIT_MAX = 100


def _limit(test, debug=False):
    """A limit test, its creates bounded by -m: each object count must reach it (dapltest exits 0
    whatever it found, even when the first create fails).  limit_rpost posts receives until the
    EP's queue is full (16 on both today): at least one.  limit_size_lmr doubles an LMR's
    size up to 1 GB, whatever -m says."""
    count = {"limit_rpost": (r"recv buffers posted per EP: (\d+)", 1),
             "limit_size_lmr": None}.get(test, (r"(?:created|opened): (\d+)", LIMIT_MAX))
    verdicts = ("bytes OK - stopping now",) if test == "limit_size_lmr" else ()
    return Case(f"dapltest-L-{test}", "dapltest", "local",
                ("-T", "L", "-m", str(LIMIT_MAX), test), verdicts=("Limitation Test", *verdicts),
                count=count, timeout=120 if test == "limit_size_lmr" else 30, debug=debug,
                kernel_defects=("rxe-user-mr-page-info",) if test == "limit_size_lmr" else ())


# The limit tests with -w 4: four IAs open at once in one process, each with its PZ, CNO, EVD, EP
# and LMR, every EP's connection events on IA #1's one connect EVD; the objects counted are made
# on the four IAs in turn.  Every count must reach -m, and no create may fail.  (libdaplofa now
# and then fails limit_rsp with DAT_CONN_QUAL_IN_USE, here as in the one-IA case: it binds rdma_cm
# ids to ephemeral ports (openib_cma's open_hca), the range DAPL's qualifier mapping lands in.)
LIMITS_WIDE = ("limit_ia", "limit_pz", "limit_cno", "limit_evd", "limit_ep", "limit_rsp",
               "limit_psp", "limit_lmr", "limit_rpost")


def _limits_wide():
    return Case("dapltest-L-w4", "dapltest", "local",
                ("-T", "L", "-m", str(LIMIT_MAX), "-w", "4", *LIMITS_WIDE),
                verdicts=("Limitation Test",),
                each=(r"(?:created|opened): (\d+)", str(LIMIT_MAX), len(LIMITS_WIDE) - 1),
                # limit_rpost ends when a post finds the EP's receive queue full
                forbid=r"^(?!.*dat_ep_post_recv fails: DAT_INSUFFICIENT_RESOURCES)"
                       r".*(?:fails|failed|unimplemented).*$", timeout=60)


# Number of cases each FFT feature of Debian's dapltest runs (dapl_fft_cmd.c: the others are
# "not yet implemented").
FFT_FEATURES = {"hwconn": 4, "endpoint": 3, "pz": 3, "mem": 5, "connmgt": 2, "queryinfo": 18}


# FFT features libdaplofa fails on rxe and kdat must pass (Case.better)
FFT_BETTER = {
    "mem": "case 2 registers 0 bytes and wants DAT_LENGTH_ERROR; libdaplofa hands the length "
           "to ibv_reg_mr, whose ENOMEM on rxe it answers as DAT_INSUFFICIENT_RESOURCES",
}


def _fft(feature, debug=False):
    """All cases of an FFT feature.  dapltest prints "Result: PASS" also for a case whose setup
    failed one of its DT_assert checks (say, dat_ia_open in case 1): passing means every case says
    PASS and no check failed ("... failed in file test/dapl_fft_....c, line N")."""
    return Case(f"dapltest-F-{feature}", "dapltest", "fft", ("-T", "F", "-f", feature),
                each=(r"Result: (\w+)", "PASS", FFT_FEATURES[feature]),
                forbid=r"^.* failed in file .*$", debug=debug,
                better=FFT_BETTER.get(feature, ""))


DTEST_PASS = ("DAPL Test Complete. PASSED",)
DTEST_SIZES = ("-B", "10", "-b", "4096")


def _dtest(name, *args, debug=False):
    return Case(f"dtest{name}", "dtest", "pair", (*args, *DTEST_SIZES), verdicts=DTEST_PASS,
                timeout=45, debug=debug)


def _dtestcm(name, count, port, *args, debug=False):
    return Case(f"dtestcm{name}", "dtestcm", "pair",
                ("-v", "-c", str(count), "-p", str(port), *args),
                verdicts=(f"Successfully disconnected all {count} EP's",
                          "DAPL Connection Test Complete"),
                server_verdicts=(f"ALL {count} CONNECTED on Server!",
                                 f"Successfully disconnected all {count} EP's",
                                 "DAPL Connection Test Complete"),
                timeout=60, debug=debug)


def _dtestsrq(name, conns, port, *args, debug=False):
    return Case(f"dtestsrq{name}", "dtestsrq", "pair", ("-c", str(conns), "-p", str(port), *args),
                verdicts=(f"ALL {conns} CONNECTED on client!", "Test Complete."),
                server_verdicts=(f"ALL {conns} CONNECTED on server!", "Test Complete."),
                debug=debug)


DTESTX_PASS = ("IB extension test - immed/atomic test PASSED",)

# libdaplofa's UD: DAPL's openib_cma provider refuses UD QPs outright (dapls_ib_qp_alloc: "create_qp
# Invalid argument" on any device; DAPL's UD exists only in its scm/ucm providers)
UD_BETTER = "UD EPs over rdma_cm's SIDR exchanges; libdaplofa has no UD"

CASES = [
    # dapltest -T T: transactions; 10 iterations of each OP list
    _t("SR"),
    _t("SR-V", "-V"),
    _t("RW", ops=("client", "RW", "4096", "server", "RW", "4096", *T_OPS)),
    _t("RW-V", "-V", ops=("client", "RW", "4096", "server", "RW", "4096")),
    _t("RR", ops=("client", "RR", "4096", "server", "RR", "4096", *T_OPS)),
    _t("RR-V", "-V", ops=("client", "RR", "4096", "server", "RR", "4096")),
    _t("SR-reap-on-recv", "-V", ops=("client", "SR", "1024", "-f", "server", "SR", "1024", "-f")),
    _t("SR-2-segments", "-V", ops=("client", "SR", "1024", "2", "server", "SR", "512", "4")),
    _t("w2", "-V", "-w", "2"),
    _t("t2", "-V", "-t", "2"),
    _t("t2-w2-RW", "-V", "-t", "2", "-w", "2",
       ops=("client", "RW", "4096", "server", "RW", "4096")),
    _t("RSP", "-V", "-r"),
    _t("RSP-w2", "-V", "-r", "-w", "2"),
    _t("polling", "-V", "-P", ops=("client", "RW", "4096", "server", "RR", "4096", *T_OPS)),
    # the man page's "more complicated transaction test", 10 iterations
    _t("mixed", "-V", "-t", "2", "-w", "2", ops=(
        "client", "RW", "4096", "1", "server", "RW", "2048", "4", "client", "SR", "1024", "4",
        "server", "SR", "4096", "2", "client", "SR", "1024", "3", "-f", "server", "SR", "2048",
        "1", "-f")),
    # dapltest -T P: performance (RDMA only: the performance test has no send/recv OP)
    _p("RW-blocking", "-m", "b", "RW", "4096", debug=True),
    _p("RW-polling", "-m", "p", "RW", "4096"),
    _p("RR-blocking", "-m", "b", "RR", "4096"),
    _p("RR-polling", "-m", "p", "RR", "4096"),
    _p("RW-pipeline-1", "-m", "p", "-p", "1", "RW", "65536", "2"),
    # dapltest -T L: each limit test, at most 100 objects
    *[_limit(t) for t in (
        "limit_ia", "limit_pz", "limit_cno", "limit_evd", "limit_ep", "limit_rsp", "limit_psp",
        "limit_lmr", "limit_rpost", "limit_size_lmr")],
    _limits_wide(),
    # dapltest -T F: each feature Debian's dapltest implements, all its cases
    *[_fft(f, debug=(f == "pz")) for f in FFT_FEATURES],
    # dtest: private data, RMR exchange, RDMA write, RDMA read, send/recv ping-pong, disconnect
    _dtest(""),
    _dtest("-polling", "-p"),
    _dtest("-cno", "-c"),
    _dtest("-times", "-t"),
    _dtest("-signal-rate-2", "-S", "2"),
    _dtest("-write-pingpong-checked", "-W", "-D"),
    _dtest("-write-streaming", "-w"),
    _dtest("-unidirectional", "-u"),
    _dtest("-verbose", "-v"),
    # dtestcm: connection setup and teardown rate
    _dtestcm("", 50, 22100),
    _dtestcm("-wait", 50, 22110, "-w"),
    _dtestcm("-multi-psp-wait", 40, 22120, "-m", "-b", "10", "-w"),
    # UD: "connections" are SIDR address exchanges; the client checks the private data the server
    # returns (+1 each) in its UD ESTABLISHED events
    *[Case(f"dtestcm-ud{tag}", "dtestcm", "pair", ("-v", "-u", "-c", "4", "-p", str(port), *more),
           verdicts=("ALL 4 CONNECTED on Client!", "DAPL Connection Test Complete"),
           server_verdicts=("ALL 4 CONNECTED on Server!", "DAPL Connection Test Complete"),
           better=UD_BETTER)
      for tag, port, more in (("", 22140, ()), ("-wait", 22150, ("-w",)))],
    # dtestsrq: -S 0 is its RC test without an SRQ; by default it uses one.  Not on the debug
    # kernel: its server waits for the completion of its last send while the client, once it
    # has that message, disconnects at once; rxe posts the receive's completion before it sends
    # the ACK, and on a fully preemptible kernel the client's QP can go to error in between, so
    # the ACK is dropped and the server's send flushed, with either provider.
    _dtestsrq("-no-srq", 1, 22200, "-S", "0"),
    _dtestsrq("-no-srq-2x2", 2, 22210, "-S", "0", "-B", "2"),
    # With an SRQ: after each disconnect dtestsrq waits on the async EVD for the EP's
    # DAT_ASYNC_ERROR_EP_BROKEN, which libdaplofa makes of verbs' "last WQE reached" of an SRQ's
    # QP; rxe never raises that, so libdaplofa hangs there (a short timeout); kdat's provider
    # says it when the connection ends.
    *[Case(f"dtestsrq-srq{tag}", "dtestsrq", "pair", ("-c", str(conns), "-p", str(port), *more),
           verdicts=(f"ALL {conns} CONNECTED on client!", "Test Complete."),
           server_verdicts=(f"ALL {conns} CONNECTED on server!", "Test Complete."), timeout=15,
           better="SRQs on the kernel-bypass data path; the EP_BROKEN rxe does not raise")
      for tag, conns, port, more in (("", 1, 22220, ()), ("-2x2", 2, 22230, ("-B", "2")))],
    # dtestx: IB extensions (RDMA write with immediate data, compare-and-swap, fetch-and-add)
    Case("dtestx", "dtestx", "pair", (), verdicts=DTESTX_PASS, timeout=45, debug=True),
    Case("dtestx-counters", "dtestx", "pair", ("-p",), verdicts=DTESTX_PASS, timeout=45),
    Case("dtestx-query", "dtestx", "alone", ("-q",), verdicts=("Open_Query:",)),
    # -u: 4 exchanges on one EP each way, 4 UD sends each way; -m: the client's 4 EPs to the
    # server's one
    *[Case(f"dtestx-ud{tag}", "dtestx", "pair", ("-u", *more), client_args=("-c",),
           verdicts=("UD test PASSED",), timeout=45, better=UD_BETTER, teardown_race=True)
      for tag, more in (("", ()), ("-multi", ("-m",)))],
    # last: dapltest -T Q asks the server to wait for its tests, clean up and exit
    Case("dapltest-Q", "dapltest", "quit", ("-T", "Q"), verdicts=(T_END,),
         server_verdicts=("DT_cs_Server", "Exiting.")),
]

# Cases kdat fails where libdaplofa passes (first error line over kdat in a comment); each is a
# strict xfail, so that the fix turns it into an XPASS failure and the mark must go.  None today:
# the last ones were dtestx, -p and -q (issue #20: no IB extensions until they were implemented).
XFAIL_REASONS = {}


def _params():
    out = []
    for case in CASES:
        marks = list(case.marks)
        if case.name in XFAIL_REASONS:
            marks.append(pytest.mark.xfail(strict=True, reason=XFAIL_REASONS[case.name]))
        if DEBUG_KERNEL and not case.debug:
            marks.append(pytest.mark.skip(reason="debug kernel: one case per program"))
        out.append(pytest.param(case, id=case.name, marks=marks))
    return out


# ---- processes ----------------------------------------------------------------------------------

def _env(extra=None):
    return dict(os.environ, DAT_OVERRIDE=DAT_CONF, **(extra or {}))


class Proc:
    """A dapl2-utils process with its output in a file (line-buffered through stdbuf, so that a
    process killed at its timeout still leaves what it printed)."""

    def __init__(self, label, argv, env=None):
        self.label = label
        self.argv = argv
        self.log = tempfile.TemporaryFile(mode="w+")
        self.p = subprocess.Popen(["stdbuf", "-oL", "-eL", *argv], env=_env(env), cwd="/tmp",
                                  stdout=self.log, stderr=subprocess.STDOUT, text=True,
                                  start_new_session=True)
        self.rc = None
        self.hang = ""  # hang_report() from just before a kill at the timeout

    @property
    def pid(self):
        return self.p.pid

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def running(self):
        return self.p.poll() is None

    def wait(self, timeout, also=None):
        """The exit status, or "timeout" (then the process was killed, after a look at where it
        and the processes `also` names ({label: pid}) wait)."""
        try:
            self.rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.hang = hang_report({self.label: self.pid, **(also or {})})
            self.kill()
            self.rc = "timeout"
        return self.rc

    def kill(self):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.p.wait()

    def close(self):
        self.kill()
        self.log.close()


def _dapl_processes():
    """{pid: comm} of every dapl2-utils program running in the guest."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if comm in PROGRAMS and state != "Z":
            found[int(pid)] = comm
    return found


def _reap_strays(keep):
    """Kills dapl2-utils processes other than `keep` (pids); returns what it found."""
    strays = {pid: comm for pid, comm in _dapl_processes().items() if pid not in keep}
    for pid in strays:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while any(pid in _dapl_processes() for pid in strays) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [f"{comm}[{pid}]" for pid, comm in sorted(strays.items())]


# What a pair's server prints once it waits for its client (dtestsrq and dtestx exchange nothing
# over TCP first; dtest and dtestcm do, and are ready once they listen).  Not dtest's "Server is
# waiting for client connection": it prints that before it listens, so a client started on it
# under load found no listener ("Couldn't connect") and the server then waited for ever; dtest is
# ready when its TCP socket listens (_listens).
SERVER_READY_RE = re.compile(r"server ready on port|waiting to snd addr|conn server waiting for "
                             r"client|Waiting for connect|waiting for connect", re.I)


def _wait_ready(server, pattern, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and server.running():
        if pattern.search(server.output()) or _listens(server.pid):
            return True
        time.sleep(0.05)
    return False


class _NotStarted:
    """The client of a pair whose server ended before it was ready."""

    def __init__(self, label):
        self.label = label
        self.rc = "not started"

    def output(self):
        return ""

    def close(self):
        pass


class DapltestServers:
    """One `dapltest -T S` per provider, started on first use and restarted after a case that
    failed over it; all killed at the end (also when a test failed)."""

    def __init__(self):
        self.servers = {}
        self.logs = {}  # provider -> output of servers that ended

    def port(self, provider):
        return DAPLTEST_PORT[_port_key(provider)]

    def get(self, provider):
        s = self.servers.get(provider)
        if s is not None and s.running():
            return s
        self.stop(provider)
        s = Proc("server", ["dapltest", "-T", "S", "-D", provider, "-n", str(self.port(provider))])
        self.servers[provider] = s
        ready = re.compile(r"Service Point Ready")
        deadline = time.monotonic() + 30 * SLOW
        while s.running() and not ready.search(s.output()) and time.monotonic() < deadline:
            time.sleep(0.05)
        return s

    def pids(self):
        return {s.pid for s in self.servers.values() if s.running()}

    def stop(self, provider):
        s = self.servers.pop(provider, None)
        if s is not None:
            self.logs[provider] = self.logs.get(provider, "") + s.output()
            s.close()

    def stop_all(self):
        for provider in list(self.servers):
            self.stop(provider)


@pytest.fixture(scope="module")
def dapltest_servers(kdat_module, rdma):
    servers = DapltestServers()
    try:
        yield servers
    finally:
        servers.stop_all()
        _reap_strays(set())


def _run(case, provider, addr, servers, pair_env=None):
    """One case over one provider: its Outcome.  `pair_env`: more environment for both processes
    of a pair."""
    timeout = case.timeout * SLOW
    start = time.monotonic()
    procs = []
    hung = []
    server_out = ""
    server_mark = 0  # a dapltest server's output before this case
    try:
        if case.mode in ("dapltest", "quit", "local", "fft"):
            base = servers.port(provider)
            if case.mode in ("dapltest", "quit"):
                server = servers.get(provider)
                if not server.running():
                    return Outcome(provider, False, "dapltest -T S did not start: "
                                   + _first_error([("", 0, server.output())]), "",
                                   time.monotonic() - start, [], [],
                                   [("server", server.p.poll(), server.output())])
                server_mark = len(server.output())
                extra = ("-s", addr, "-n", str(base))
            else:
                extra = ("-n", str(base + (FFT_PORT_OFFSET if case.mode == "fft"
                                           else LIMIT_PORT_OFFSET)))
                if case.mode == "fft":
                    extra = ("-s", addr, *extra)
            client = Proc("client", ["dapltest", case.args[0], case.args[1], "-D", provider,
                                     *extra, *case.args[2:]])
            procs.append(client)
            also = {"dapltest server": server.pid} if case.mode in ("dapltest", "quit") else {}
            if client.wait(timeout, also) == "timeout":
                hung.append("client")
            if case.mode == "quit":
                if server.wait(SERVER_GRACE) == "timeout":
                    hung.append("server")
                procs.append(server)
            elif case.mode == "dapltest":
                server_out = server.output()[server_mark:]
        elif case.mode == "alone":
            client = Proc("client", [case.program, "-P", provider, *case.args])
            procs.append(client)
            if client.wait(timeout) == "timeout":
                hung.append("client")
        else:
            server = Proc("server", [case.program, "-P", provider, "-s", *case.args], pair_env)
            procs.append(server)
            _wait_ready(server, SERVER_READY_RE, 30 * SLOW)
            if server.running():
                client = Proc("client", [case.program, "-P", provider, "-h", addr,
                                         *case.client_args, *case.args], pair_env)
                procs.insert(0, client)
                if client.wait(timeout) == "timeout":
                    hung.append("client")
                if server.wait(SERVER_GRACE if not hung else 1) == "timeout":
                    hung.append("server")
            else:
                server.rc = server.p.returncode
                procs.insert(0, _NotStarted("client"))
        outputs = [(p.label, p.rc, p.output()[server_mark if p.label == "server" else 0:])
                   for p in procs]
        if case.mode == "quit":  # the server's part is the quit's alone
            outputs = [(label, rc, without_quit_reply_race(out) if label == "server" else out)
                       for label, rc, out in outputs]
        outputs += [(f"{p.label} hung, before the kill", "-", p.hang)
                    for p in procs if getattr(p, "hang", "")]
    finally:
        for p in procs:
            if p.label == "server" and case.mode == "quit":
                servers.stop(provider)
            else:
                p.close()
    strays = _reap_strays(servers.pids())
    passed, error, verdict = _judge(case, outputs)
    if hung:
        passed = False
        error = f"{' and '.join(hung)} hung: killed after {timeout:.0f} s; {error}"
    if strays:
        passed = False
        error = f"left running: {', '.join(strays)}; {error}"
    if server_out:
        outputs.append(("dapltest server", "-", server_out))
    o = Outcome(provider, passed, error, verdict, time.monotonic() - start, hung, strays, outputs)
    if case.figures:
        o.figures = _perf_figures(outputs[0][2])
    if not passed and case.mode == "dapltest":
        # a failed test may leave the server's side of it stuck: the next case gets a new one
        servers.stop(provider)
    return o


# Each side of dtestx -u posts its UD sends with completions suppressed and, once it has the
# peer's messages, frees their buffers and its EP at once; the peer then waits in vain for the
# sends that had not left yet.
TEARDOWN_RACE = ("UD test PASSED", "dat_evd_wait for receive message returned DAT_TIMEOUT_EXPIRED")
SLOW_TEARDOWN = os.path.join(DAPL_DIR, "libdapl_slow_teardown.so")


def _teardown_raced(o):
    """One side of the pair passed and the other timed out waiting for a message."""
    sides = {label: out for label, _, out in o.outputs if label in ("client", "server")}
    if len(sides) != 2:
        return False
    client, server = sides["client"], sides["server"]
    return any(TEARDOWN_RACE[0] in a and TEARDOWN_RACE[1] in b
               for a, b in ((client, server), (server, client)))


def _record(case, o):
    line = (f"{case.name} {o.provider}: {'PASS' if o.passed else 'FAIL: ' + o.error}; "
            f"{o.seconds:.1f} s; verdict: {o.verdict or '-'}")
    if o.figures:
        line += f"; {o.figures}"
    results = os.environ.get("KDAT_RESULTS")
    if results and os.path.isdir(results):
        with open(os.path.join(results, "dapl-suite.txt"), "a") as f:
            f.write(line + "\n")
    print(line)


@pytest.mark.parametrize("case", _params())
def test_dapl_suite(case, kdat_module, rdma, kernel_log, dapltest_servers):
    kernel_log.allow.extend(case.kernel_defects)
    addr = rdma["KDAT_TEST_ADDR"]
    ofa = _run(case, _ofa_name(), addr, dapltest_servers)
    _record(case, ofa)
    kdat = _run(case, "kdat", addr, dapltest_servers)
    _record(case, kdat)
    if case.teardown_race and not kdat.passed and _teardown_raced(kdat):
        # rxe-deferred-user-send: allowed only where rxe defers a user QP's sends, and kdat must
        # then pass with both sides' teardown held back (user/dapl/tests/slow_teardown.c)
        assert guest.rxe_runs_tasks_on_a_work_queue(), f"{case.name}: {kdat.error}\n{kdat.tail()}"
        print(f"{case.name}: one side's teardown overtook its own UD sends "
              "(rxe-deferred-user-send); again with both teardowns held back")
        kdat = _run(case, "kdat", addr, dapltest_servers, {"LD_PRELOAD": SLOW_TEARDOWN})
        _record(case, kdat)
    if ofa.passed or case.better:
        assert kdat.passed, (f"{case.name}: libdaplofa {'passes' if ofa.passed else 'fails'}, "
                             f"kdat fails: {kdat.error}\n{kdat.tail()}\n{ofa.tail(1500)}")
    else:
        # libdaplofa fails this case on rxe: kdat must still end and clean up
        assert not kdat.hung and not kdat.strays, (
            f"{case.name} (libdaplofa fails it too: {ofa.error}): over kdat "
            f"{kdat.error}\n{kdat.tail()}\n{ofa.tail(1500)}")
