"""The DAT 2.0 provider libdaplkdat under Debian's unmodified dapl2-utils (dtestcm, dtest,
dapltest), some side by side with DAPL's own libdaplofa on the same Soft-RoCE netdev, plus the
provider's error paths through a C consumer of the DAT API (user/dapl/tests/provider_check.c).
(test_dapl_suite.py runs every program of dapl2-utils over both providers and asserts that kdat
passes wherever libdaplofa does; the figures of both side by side are bench/'s.)

Both providers come from the dat.conf the build writes (build/user/dapl/dat.conf, selected with
DAT_OVERRIDE): `kdat` is libdaplkdat, `ofa-v2-<netdev>` is libdaplofa.  Each run's outcome and
figures are appended to dapl-side-by-side.txt in the results directory (KDAT_RESULTS).

KDAT_DTESTCM_COUNT sets dtestcm's connection count (default 1000, the acceptance figure; 50 on
the debug lane's kernel)."""
import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass

import pytest

from kdat_harness.dapl import DAPL_DIR, DAT_CONF, hang_report, without_quit_reply_race
from kdat_harness.dapl import conf_entries as _conf_entries
from kdat_harness.dapl import listens as _listens
from kdat_harness.dapl import ofa_name as _ofa_name
from kdat_harness.dat import kdat_files, next_port, wait_cr  # noqa: F401 (kdat_files: a fixture)
from kdat_harness.dat import side as kernel_side

CHECK = os.path.join(DAPL_DIR, "dapl_provider_check")
FIRST_MESSAGE = os.path.join(DAPL_DIR, "dapl_first_message")
# The debug lane's kernel (KASAN, lockdep, kmemleak) is several times slower: fewer connections.
COUNT = int(os.environ.get("KDAT_DTESTCM_COUNT",
                           "50" if os.environ.get("KDAT_DEBUG_KERNEL") == "1" else "1000"))
DEBUG_KERNEL = os.environ.get("KDAT_DEBUG_KERNEL") == "1"
RUN_TIMEOUT = 120 if DEBUG_KERNEL else 300  # s, per program
# s, a guard against a stall (dtest -B 20 -b 65536: 20 x 64 KB RDMA writes each way, an RDMA read,
# 100 x 64 KB ping-pongs). In polling mode both processes spin on the guest's 2 vCPUs and rxe's
# work waits for them, so on a loaded debug kernel dtest -p takes well over a minute, over either
# provider.
DTEST_TIMEOUT = 300 if DEBUG_KERNEL else 60


@dataclass
class Pair:
    server_rc: object
    server_out: str
    client_rc: object
    client_out: str
    seconds: float
    hang: str = ""  # hang_report() of what was killed for hanging

    def text(self):
        return (f"--- server (rc {self.server_rc}):\n{self.server_out[-3000:]}\n"
                f"--- client (rc {self.client_rc}):\n{self.client_out[-3000:]}"
                + (f"\n--- hung, before the kill:\n{self.hang}" if self.hang else ""))


def _run_pair(program, provider, addr, server_args=(), client_args=(), timeout=RUN_TIMEOUT):
    """Runs `program -s` and then `program -h addr` against it; returns both outcomes."""
    env = dict(os.environ, DAT_OVERRIDE=DAT_CONF)
    start = time.monotonic()
    # The server's output goes to a file: a pipe nobody reads while the client runs would fill
    # (verbose dtestcm writes far more than a pipe holds) and stall the server.
    server_log = tempfile.TemporaryFile(mode="w+")
    # (line-buffered: a server killed for hanging leaves all it printed)
    server = subprocess.Popen(["stdbuf", "-oL", program, "-P", provider, "-s", *server_args],
                              env=env, cwd="/tmp", stdout=server_log, stderr=subprocess.STDOUT,
                              text=True)
    hang = ""
    try:
        deadline = time.monotonic() + 60
        while not _listens(server.pid) and server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        client_rc, client_out = None, ""
        if server.poll() is None:
            try:
                c = subprocess.run([program, "-P", provider, "-h", addr, *client_args], env=env,
                                   cwd="/tmp", capture_output=True, text=True, timeout=timeout)
                client_rc, client_out = c.returncode, c.stdout + c.stderr
            except subprocess.TimeoutExpired as e:
                # (subprocess.run has killed the client: only the server is left to look at)
                hang = hang_report({"server": server.pid})
                client_rc = "timeout"
                client_out = (e.stdout or b"").decode(errors="replace") if isinstance(
                    e.stdout, bytes) else (e.stdout or "")
        try:
            server_rc = server.wait(timeout=timeout if client_rc is not None else 5)
        except subprocess.TimeoutExpired:
            hang += hang_report({"server": server.pid})
            server.kill()
            server.wait()
            server_rc = "timeout"
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        server_log.seek(0)
        server_out = server_log.read()
        server_log.close()
    return Pair(server_rc, server_out, client_rc, client_out, time.monotonic() - start, hang)


def _record(line):
    results = os.environ.get("KDAT_RESULTS")
    if results and os.path.isdir(results):
        with open(os.path.join(results, "dapl-side-by-side.txt"), "a") as f:
            f.write(line + "\n")


def _dtestcm_verdict(r, count, ud=False):
    """None if dtestcm passed on both sides, else what went wrong (first error line).  Runs are
    verbose (-v): only then does dtestcm report each disconnect.  UD EPs (-u) are freed without a
    disconnect; their private data goes both ways (48 bytes 1..48 from the client, returned +1
    each by the server's accept), which dtestcm prints first and last of."""
    wanted = [(r.server_out, f"ALL {count} CONNECTED on Server!"),
              (r.client_out, f"ALL {count} CONNECTED on Client!"),
              (r.server_out, "DAPL Connection Test Complete"),
              (r.client_out, "DAPL Connection Test Complete")]
    if ud:
        last = f"Freed EP[{count - 1}]"
        wanted += [(r.server_out, last), (r.client_out, last)]
        asked = re.findall(r"CONN REQUEST Private Data \S+\[0\]=(\d+) \[47\]=(\d+)", r.server_out)
        answered = re.findall(r"CONN\[\d+\] Private Data \S+\[0\]=(\d+) \[47\]=(\d+)",
                              r.client_out)
        if asked != [("1", "48")] * count or answered != [("2", "49")] * count:
            return f"UD private data: server saw {asked}, client got {answered}"
    else:
        wanted += [(r.server_out, f"Successfully disconnected all {count} EP's"),
                   (r.client_out, f"Successfully disconnected all {count} EP's")]
    if r.server_rc == 0 and r.client_rc == 0 and all(w in out for out, w in wanted):
        return None
    rcs = f"server rc {r.server_rc}, client rc {r.client_rc}"
    for out in (r.server_out, r.client_out):
        for line in out.splitlines():
            # (" ERR: Checking ASYNC EVD..." is a normal verbose line of dtestcm)
            if re.search(r"\bERR|Error|error|DAT_[A-Z_]+ *$", line) and "ASYNC EVD" not in line:
                return f"{line.strip()} ({rcs})"
    return rcs


def _dtestcm(provider, rdma, port, count=COUNT, extra=()):
    args = ["-v", "-c", str(count), "-p", str(port), *extra]
    r = _run_pair("dtestcm", provider, rdma["KDAT_TEST_ADDR"], args, args)
    verdict = _dtestcm_verdict(r, count, ud="-u" in extra)
    cps = re.search(r"Connections:\s*([\d.]+) usec, CPS\s*([\d.]+)", r.client_out)
    _record(f"dtestcm {' '.join(['-c', str(count), *extra])} {provider}: "
            f"{'PASS' if verdict is None else 'FAIL: ' + verdict}; "
            f"{r.seconds:.1f} s wall" + (f", client {cps.group(1)} us/connection, "
                                          f"{cps.group(2)} CPS" if cps else ""))
    return r, verdict


def test_dat_conf_registers_kdat_on_the_rxe_netdev(rdma):
    entries = _conf_entries()
    lib, params = entries["kdat"]
    assert lib.endswith(".so.2.0.0") and os.path.exists(lib), lib
    assert params.split()[0] == rdma["KDAT_TEST_NETDEV"]
    assert entries[_ofa_name()][1].split()[0] == rdma["KDAT_TEST_NETDEV"]


def test_dtestcm_over_kdat(kdat_module, rdma, kernel_log):
    r, verdict = _dtestcm("kdat", rdma, 20100)
    assert verdict is None, f"dtestcm -c {COUNT} over kdat: {verdict}\n{r.text()}"


def test_dtestcm_over_kdat_waiting_on_many_psps(kdat_module, rdma, kernel_log):
    """-w: evd_wait instead of dequeue polling; -m -b 20: the server listens on 20 PSPs."""
    burst = 20
    # dtestcm's client connects in whole bursts (h_ep[i + ii] for ii < burst) over an array of
    # -c entries: a count that is not a multiple of -b makes it pass the handles past the end
    # (NULL or heap garbage) to dat_ep_connect, which libdat2 answers with DAT_INVALID_HANDLE_EP
    # before any provider call.  So the count is a whole number of bursts.
    count = max(burst, min(COUNT, 200) // burst * burst)
    r, verdict = _dtestcm("kdat", rdma, 20300, count=count, extra=("-w", "-m", "-b", str(burst)))
    assert verdict is None, f"dtestcm -w -m -b 20 -c {count} over kdat: {verdict}\n{r.text()}"


def test_dtestcm_ud_over_kdat(kdat_module, rdma, kernel_log):
    """-u: UD endpoints (DAT's IB extension) whose "connections" are SIDR address exchanges;
    dtestcm asks max_message_size 2048 on rxe's 1024-byte MTU (clamped, not refused), returns the
    client's 48 bytes of private data +1 each through the accept and checks them in the UD
    ESTABLISHED events, which it polls with evd_dequeue."""
    r, verdict = _dtestcm("kdat", rdma, 20400, count=4, extra=("-u",))
    assert verdict is None, f"dtestcm -u -c 4 over kdat: {verdict}\n{r.text()}"


def test_dtestcm_ud_waiting_over_kdat(kdat_module, rdma, kernel_log):
    """-u -w: the same, with the UD events taken by evd_wait."""
    r, verdict = _dtestcm("kdat", rdma, 20450, count=4, extra=("-u", "-w"))
    assert verdict is None, f"dtestcm -u -w -c 4 over kdat: {verdict}\n{r.text()}"


# dtest's defaults (4 MB buffers, bursts of 1000 RDMA writes each way) take many minutes on rxe
# under TCG; these sizes run every phase (private data, RMR exchange, RDMA write, RDMA read,
# send/recv ping-pong, disconnect) in seconds.
DTEST_ARGS = ("-B", "20", "-b", "65536")


def _dtest(provider, rdma, args=()):
    r = _run_pair("dtest", provider, rdma["KDAT_TEST_ADDR"], args, args, timeout=DTEST_TIMEOUT)
    # dtest prints its verdict; its exit status is 0 even for FAILED (Debian's dapl2-utils 2.1).
    passed = ("PASSED" in r.server_out and "PASSED" in r.client_out
              and "FAILED" not in r.server_out + r.client_out)
    first_error = next((line.strip() for line in (r.server_out + r.client_out).splitlines()
                        if re.search(r"Error|ERR|FAILED|DAT_[A-Z_]{4,}", line)), None)
    if not passed:
        first_error = f"{first_error} (server rc {r.server_rc}, client rc {r.client_rc})"
    _record(f"dtest {' '.join((*args, provider))}: "
            f"{'PASS' if passed else 'FAIL: ' + first_error}; {r.seconds:.1f} s wall")
    return r, passed, first_error


def test_dtest_over_kdat(kdat_module, rdma, kernel_log):
    """Debian's unmodified dtest over libdaplkdat (user-owned QPs, kdat connection management):
    private data both ways, the RMR exchange, RDMA write, RDMA read, send/recv ping-pong and the
    disconnect all pass on both sides."""
    r, passed, first_error = _dtest("kdat", rdma, DTEST_ARGS)
    assert passed, f"dtest over kdat: {first_error}\n{r.text()}"
    for side in (r.server_out, r.client_out):
        # what dtest prints once each phase has checked its data (RDMA read and the ping-pong
        # run only for a provider that offers DAT_IB_RDMA_READ)
        for phase in ("CONNECTED!", "RDMA write buffer contains", "RCV RDMA read buffer contains",
                      "Message PingPong: (100 x 65536)"):
            assert phase in side, f"dtest over kdat did not reach {phase!r}:\n{r.text()}"


def _counters(out, prefix):
    """{name: value} of the ' DCNT_<prefix>_... = N' lines dtestx -p prints (the first of each)."""
    found = {}
    for name, value in re.findall(rf"^ (DCNT_{prefix}_\w+) = (\d+)\s*$", out, re.M):
        found.setdefault(name, int(value))
    return found


def test_dtestx_counters_over_kdat(kdat_module, rdma, kernel_log):
    """dtestx -p over kdat passes and prints the IB extension's counters with what each side did
    (libdaplofa, built without counters, prints none: the suite only checks that it passes).
    Each side posts 7 receives (256 bytes each), one send (the RMR message, 16 bytes), one RDMA
    write with immediate data (256 bytes), one compare-and-swap and two fetch-and-adds, and
    receives the peer's message and its write with immediate data."""
    r = _run_pair("dtestx", "kdat", rdma["KDAT_TEST_ADDR"], ["-p"], ["-p"], timeout=120)
    verdict = "IB extension test - immed/atomic test PASSED"
    passed = verdict in r.server_out and verdict in r.client_out
    _record(f"dtestx -p kdat: {'PASS' if passed else 'FAIL'}; {r.seconds:.1f} s wall")
    assert passed and r.server_rc == 0 and r.client_rc == 0, r.text()
    each_side = {"DCNT_EP_CONNECT": None, "DCNT_EP_DISCONNECT": None,
                 "DCNT_EP_POST_RECV": 7, "DCNT_EP_POST_RECV_DATA": 7 * 256,
                 "DCNT_EP_POST_SEND": 1, "DCNT_EP_POST_SEND_DATA": 16,
                 "DCNT_EP_POST_WRITE_IMM": 1, "DCNT_EP_POST_WRITE_IMM_DATA": 256,
                 "DCNT_EP_POST_CMP_SWAP": 1, "DCNT_EP_POST_FETCH_ADD": 2,
                 "DCNT_EP_RECV": 1, "DCNT_EP_RECV_DATA": 16,
                 "DCNT_EP_RECV_RDMA_IMM": 1, "DCNT_EP_RECV_RDMA_IMM_DATA": 256}
    for side, out, est in (("server", r.server_out, "DCNT_IA_CM_PASSIVE_EST"),
                           ("client", r.client_out, "DCNT_IA_CM_ACTIVE_EST")):
        ep = _counters(out, "EP")
        ia = _counters(out, "IA")
        for name, want in each_side.items():
            got = ep.get(name)
            if want is None:  # the server only accepts: DCNT_EP_CONNECT counts dat_ep_connect
                want = 1 if side == "client" or name == "DCNT_EP_DISCONNECT" else 0
            assert got == want, f"{side}: {name} = {got}, wanted {want}\n{r.text()}"
        assert ia.get(est) == 1 and ia.get("DCNT_IA_EP_CREATE") == 1, f"{side}: {ia}\n{r.text()}"
        assert ia.get("DCNT_IA_LMR_CREATE") == 11, f"{side}: {ia}\n{r.text()}"


def test_provider_connection_management_and_error_paths(kdat_module, rdma, kernel_log):
    """provider_check: PSP/RSP/provider-PSP connections, accept/reject with private data,
    dup_connect, disconnect, CNO, and bad/stale/wrong-type handles, bad parameters, state errors."""
    if not os.access(CHECK, os.X_OK):
        pytest.fail(f"{CHECK} is missing: build it with 'make'")
    env = dict(os.environ, DAT_OVERRIDE=DAT_CONF)
    r = subprocess.run([CHECK, "kdat", rdma["KDAT_TEST_ADDR"], "21000"], env=env,
                       capture_output=True, text=True, timeout=RUN_TIMEOUT)
    out = r.stdout + r.stderr
    # each FAIL with the line provider_check printed before it: what it got instead
    lines = out.splitlines()
    failed = [f"{lines[i - 1].strip()}\n{line}" if i > 0 and lines[i - 1].startswith("     (")
              else line for i, line in enumerate(lines) if line.startswith("FAIL")]
    summary = re.search(r"^checks: (\d+) failed: (\d+)$", out, re.M)
    _record(f"provider_check kdat: {summary.group(0) if summary else 'no summary'} (rc {r.returncode})")
    assert r.returncode == 0 and not failed, "\n".join(failed) + "\n" + out[-4000:]
    assert summary and int(summary.group(1)) >= 100 and summary.group(2) == "0", out[-2000:]


@pytest.fixture
def listener(kdat_files, rdma):
    """A kernel-API IA with a CR EVD (kdat_harness.dat.side), on its own file."""
    return kernel_side(kdat_files())


def test_provider_eps_ask_for_dapls_transport_retry_count(kdat_module, rdma, kernel_log,
                                                          listener):
    """DAT's EP attributes have no transport retry count, so the provider picks one: DAPL's
    (IB_RC_RETRY_COUNT 7, which rxe takes as "for ever"), not kdat.ko's default 6.  With 6, an
    RDMA write can fail DAT_DTO_ERR_TRANSPORT on a loaded guest with no packet lost: rxe's 268 ms
    ACK timer fires whenever the guest stalls.  The count travels in the REQ
    (the passive side's QP takes it from there): a kernel-API listener reads it in the CR of a
    DAT client's connect, and rejects it."""
    port = next_port()
    listener.k.psp_create(listener.ia, listener.crevd, port)
    env = dict(os.environ, DAT_OVERRIDE=DAT_CONF)
    client = subprocess.Popen([FIRST_MESSAGE, "client", "kdat", rdma["KDAT_TEST_ADDR"], str(port),
                               "silent"], env=env, cwd="/tmp", stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        crev = wait_cr(listener, timeout_us=30_000_000)
        cr = listener.k.cr_query(crev.cr)
        listener.k.cr_reject(crev.cr)
        out, _ = client.communicate(timeout=RUN_TIMEOUT)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    assert (cr.remote_retry_count, cr.remote_rnr_retry_count) == (7, 7), out
    assert client.returncode != 0 and "connected=1" not in out, out


# ---- conformance runs over kdat and over libdaplofa (each provider is run the same way; both
# must pass)

# On the debug kernel only kdat runs: libdaplofa never touches kdat.ko, whose memory and locking
# that lane is for, and the reference's own runs there only measure rxe on a slow kernel (and
# can fail on their own: "Server_Info_Send-reaping DTO problem"). The side-by-side comparison is
# made on Debian's kernel.
PROVIDERS = ("kdat",) if DEBUG_KERNEL else ("kdat", "libdaplofa")


def _provider(which):
    return "kdat" if which == "kdat" else _ofa_name()


def _dapltest_server(provider, log):
    """Starts `dapltest -T S` and returns once it listens (or after 20 s)."""
    env = dict(os.environ, DAT_OVERRIDE=DAT_CONF)
    server = subprocess.Popen(["stdbuf", "-oL", "dapltest", "-T", "S", "-D", provider], env=env,
                              cwd="/tmp", stdout=log, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and server.poll() is None:
        log.seek(0)
        if "Awaiting connection" in log.read():
            break
        time.sleep(0.1)
    return server


@pytest.mark.parametrize("service_point", ["psp", "rsp"])
@pytest.mark.parametrize("which", PROVIDERS)
def test_dapltest_transaction_with_rdma_read(kdat_module, rdma, kernel_log, which, service_point):
    """dapltest -T T sizes its buffers by ia_query's max_lmr_block_size (0 once: "buffer too
    large") and copies the attributes of an EP made with ep_attr NULL into its data EPs (RDMA
    read 0/0 once: reads never completed).  SR, RDMA read and RDMA write each way.  With -r the
    server listens on RSPs and accepts with a NULL EP: the RSP's EP (a user QP) must be made
    ready before the accept (once both ends were ESTABLISHED and the first send never completed)."""
    provider = _provider(which)
    rsp = ["-r"] if service_point == "rsp" else []
    env = dict(os.environ, DAT_OVERRIDE=DAT_CONF)
    addr = rdma["KDAT_TEST_ADDR"]
    with tempfile.TemporaryFile(mode="w+") as log:
        server = _dapltest_server(provider, log)
        try:
            client = subprocess.Popen(
                ["dapltest", "-T", "T", "-s", addr, "-D", provider, "-i", "20", *rsp,
                 "client", "SR", "4096", "server", "SR", "4096", "client", "RR", "4096",
                 "server", "RR", "4096", "client", "RW", "4096", "server", "RW", "4096"],
                env=env, cwd="/tmp", stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                out, _ = client.communicate(timeout=DTEST_TIMEOUT * 2)
            except subprocess.TimeoutExpired:
                # a hang: what both sides wait for
                hung = hang_report({"client": client.pid, "server": server.pid})
                client.kill()
                out, _ = client.communicate()
                log.seek(0)
                pytest.fail(f"dapltest -T T {' '.join(rsp)} over {provider} hung:\n{out[-3000:]}"
                            f"\n--- server:\n{log.read()[-2000:]}\n{hung}")
            # from here on the server's output is the quit's
            quit_mark = os.fstat(log.fileno()).st_size
            subprocess.run(["dapltest", "-T", "Q", "-s", addr, "-D", provider], env=env,
                           cwd="/tmp", capture_output=True, text=True, timeout=DTEST_TIMEOUT)
            server.wait(timeout=DTEST_TIMEOUT)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        log.seek(0)
        server_out = log.read()
    server_judged = server_out[:quit_mark] + without_quit_reply_race(server_out[quit_mark:])
    errors = [line for line in out.splitlines() + server_judged.splitlines()
              if re.search(r"error|too large|fail", line, re.I)]
    ok = not errors and all(f"Total {what}" in out for what in ("Send", "RDMA Read", "RDMA Write"))
    _record(f"dapltest -T T {' '.join(rsp)} SR/RR/RW {provider}: "
            f"{'PASS' if ok else 'FAIL: ' + (errors[0] if errors else 'no totals')}")
    assert ok, f"dapltest -T T over {provider}:\n{out[-3000:]}\n--- server:\n{server_out[-2000:]}"


# Polling differs from test_dtest_over_kdat only in user space (the provider's dequeue loop):
# the kernel paths the debug kernel watches are the same.  There, both processes would spin on
# the guest's 2 vCPUs for minutes, taking two host cores from the lanes beside it.
@pytest.mark.skipif(DEBUG_KERNEL, reason="user-space polling; its kernel paths run in "
                    "test_dtest_over_kdat on this kernel")
@pytest.mark.parametrize("which", PROVIDERS)
def test_dtest_polling(kdat_module, rdma, kernel_log, which):
    """dtest -p polls its DTO EVDs with `dat_evd_dequeue(..) == DAT_QUEUE_EMPTY`: an empty DTO
    EVD must answer the bare DAT_QUEUE_EMPTY, as libdaplofa's do."""
    provider = _provider(which)
    r, passed, first_error = _dtest(provider, rdma, ("-p", *DTEST_ARGS))
    assert passed, f"dtest -p over {provider}: {first_error}\n{r.text()}"


@pytest.mark.parametrize("which", PROVIDERS)
def test_freeing_a_connected_ep_posts_its_disconnected(kdat_module, rdma, kernel_log, which):
    """dat_ep_free of a CONNECTED EP, server's or client's: DISCONNECTED on the freed EP's connect
    EVD, naming the freed handle, and on the peer's -- as libdaplofa, whose dat_ep_free disconnects
    abruptly first.  dtestcm -w frees EPs by index and counts those events: without them it
    waited for ever when two DREQs were handled out of order."""
    if not os.access(CHECK, os.X_OK):
        pytest.fail(f"{CHECK} is missing: build it with 'make'")
    provider = _provider(which)
    env = dict(os.environ, DAT_OVERRIDE=DAT_CONF)
    r = subprocess.run([CHECK, "--free-connected", provider, rdma["KDAT_TEST_ADDR"], "21400"],
                       env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    out = r.stdout + r.stderr
    summary = re.search(r"^checks: (\d+) failed: (\d+)$", out, re.M)
    _record(f"provider_check --free-connected {provider}: "
            f"{summary.group(0) if summary else 'no summary'} (rc {r.returncode})")
    assert r.returncode == 0 and "FAIL" not in out, out[-3000:]
    # ia_open; per side: psp, connect, ESTABLISHED, free, its event, its handle, the peer's; close
    assert summary and int(summary.group(1)) == 16 and summary.group(2) == "0", out[-2000:]


@pytest.mark.parametrize("which", PROVIDERS)
def test_dapltest_limits(kdat_module, rdma, kernel_log, which):
    """dapltest -T L opens and closes IAs over and over (the provider must register again after
    its last IA closed) and listens on qualifier 0xaffab1e (above 16 bits: mapped to a port)."""
    provider = _provider(which)
    env = dict(os.environ, DAT_OVERRIDE=DAT_CONF)
    tests = ("limit_ia", "limit_pz", "limit_evd", "limit_ep", "limit_psp", "limit_lmr")
    c = subprocess.run(["dapltest", "-T", "L", "-D", provider, "-m", "8", *tests], env=env,
                       cwd="/tmp", capture_output=True, text=True, timeout=RUN_TIMEOUT)
    out = c.stdout + c.stderr
    counts = re.findall(r"LimitTest: \w+ (?:created|opened): (\d+)", out)
    errors = [line for line in out.splitlines() if re.search(r"fails|error", line, re.I)]
    ok = len(counts) == len(tests) and all(n == "8" for n in counts) and not errors
    _record(f"dapltest -T L -m 8 {' '.join(tests)} {provider}: "
            f"{'PASS' if ok else 'FAIL: ' + (errors[0] if errors else str(counts))}")
    assert ok, f"dapltest -T L over {provider}:\n{out[-3000:]}"
