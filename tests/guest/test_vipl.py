"""The VIPL connection API (libvipl-kdat, user/vipl) in the guest: its GoogleTests
(build/user/vipl/vipl_guest_tests, one test per semantic of VI-GM's VipConnectRequest and the
server and peer sides), and two-process runs of the plain C program vipl_connect (server and
client are separate processes with their own /dev/kdat files)."""
import json
import os
import re
import subprocess
import time

import pytest

from kdat_harness import KDATCTL, REPO
from kdat_harness.timing import assert_prompt

BUILD = os.path.join(REPO, "build", "user", "vipl")
GTEST = os.path.join(BUILD, "vipl_guest_tests")
PROGRAM = os.path.join(BUILD, "vipl_connect")
SILENT_HOST = "192.0.2.99"


def _need(path):
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is missing: build it with 'make'")


def test_vipl_guest_tests_pass(kdat_module, rdma, kernel_log):
    _need(GTEST)
    args = [GTEST, "--gtest_color=no"]
    results = os.environ.get("KDAT_RESULTS")
    if results and os.path.isdir(results):
        args.append(f"--gtest_output=xml:{os.path.join(results, 'vipl-guest-gtest.xml')}")
    env = dict(os.environ, KDAT_TEST_ADDR=rdma.get("KDAT_TEST_ADDR", "192.0.2.1"),
               KDAT_TEST_NETDEV=rdma.get("KDAT_TEST_NETDEV", "kdat0"))
    r = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
    out = r.stdout + r.stderr
    failed = re.findall(r"^\[  FAILED  \] (\S+)", out, re.M)
    passed = re.search(r"^\[  PASSED  \] (\d+) test", out, re.M)
    assert r.returncode == 0, (f"vipl_guest_tests failed ({sorted(set(failed))}):\n"
                               + "\n".join(out.splitlines()[-150:]))
    assert passed and int(passed.group(1)) >= 20, out[-2000:]


# ---- two processes: the C program ------------------------------------------------------------

# The connect and wait timeouts of the runs that must connect: long enough for the other process to
# start and reach the CM on a loaded debug kernel (a server whose wait runs out before its
# client's request comes answers VIP_NO_MATCH), and never waited out when both are well.
WAIT_MS = 60000

VIP = {"VIP_SUCCESS": 0, "VIP_TIMEOUT": 4, "VIP_REJECT": 5, "VIP_NO_MATCH": 14}


def _parse(out):
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _start(*args):
    _need(PROGRAM)
    return subprocess.Popen([PROGRAM, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)


def _finish(proc, timeout=WAIT_MS / 1000 + 30):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, _parse(out), out + err


def _ended(proc):
    """What a process that is still running had printed, after killing it (for a failure's message)."""
    proc.kill()
    out, err = proc.communicate(timeout=30)
    return f"\n--- the other process (rc {proc.returncode}):\n{out}{err}"


@pytest.fixture
def env(kdat_module, rdma, kernel_log):
    return rdma["KDAT_TEST_NETDEV"], rdma["KDAT_TEST_ADDR"]


def _conn_qual(disc):
    """libvipl-kdat's discriminator -> connection qualifier (FNV-1a, see user/vipl/src/wire.hpp)."""
    h = 2166136261
    for b in disc.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return 16384 + h % 16384


def _wait_listening(disc, timeout=15.0):
    """Until the server process's VipConnectWait listens (kdatctl sees its PSP)."""
    port = _conn_qual(disc)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        out = subprocess.run([KDATCTL, "list", "--json"], capture_output=True, text=True).stdout
        for table in json.loads(out)["tables"]:
            for o in table["objects"]:
                if o["type"] == "PSP" and o["state"] == "LISTENING" and o["conn_qual"] == port:
                    return
        time.sleep(0.05)
    pytest.fail(f"nobody listens on {port} for discriminator {disc!r}")


def _disc(tag):
    return f"{tag}{os.getpid() % 10000}{int(time.monotonic() * 1000) % 100000}"


def test_two_processes_connect_and_the_server_vi_errs_when_the_client_goes(env):
    netdev, addr = env
    sd, cd = _disc("s"), _disc("client-")
    server = _start("server", netdev, sd, WAIT_MS, "accept", 10000)
    _wait_listening(sd)
    # Reliable delivery, held for 1 s, then the client exits without VipDisconnect.
    rc, c, cout = _finish(_start("client", netdev, addr, sd, cd, WAIT_MS, 2, 1000))
    assert rc == VIP["VIP_SUCCESS"], cout + _ended(server)
    assert c["result"] == "VIP_SUCCESS"
    assert c["remote_reliability"] == "2" and c["remote_mtu"] == "65536" and c["remote_qos"] == "7"
    assert c["remote_rdma_write"] == "1" and c["remote_rdma_read"] == "0"
    rc, s, sout = _finish(server)
    assert rc == VIP["VIP_SUCCESS"], sout
    assert s["remote_disc"] == cd, "the client's discriminator reaches VipConnectWait unchanged"
    assert s["remote_host"] == addr
    assert s["remote_reliability"] == "2" and s["remote_qos"] == "7"
    assert s["result"] == "VIP_SUCCESS"
    assert s["state"] == "ERROR", "a Reliable Delivery VI whose peer went away is in Error"


def test_two_processes_reject(env):
    netdev, addr = env
    sd = _disc("r")
    server = _start("server", netdev, sd, WAIT_MS, "reject")
    _wait_listening(sd)
    rc, c, cout = _finish(_start("client", netdev, addr, sd, "c", WAIT_MS))
    assert rc == VIP["VIP_REJECT"] and c["result"] == "VIP_REJECT", cout + _ended(server)
    rc, s, sout = _finish(server)
    assert rc == 0 and s["result"] == "VIP_SUCCESS", sout


def test_two_processes_no_match_then_the_right_discriminator(env):
    netdev, addr = env
    sd = _disc("m")
    server = _start("server", netdev, sd, WAIT_MS, "accept")
    _wait_listening(sd)
    t0 = time.monotonic()
    rc, c, cout = _finish(_start("client", netdev, addr, sd + "-other", "c", 60000), 90)
    assert rc == VIP["VIP_NO_MATCH"], cout
    assert_prompt(time.monotonic() - t0, 60, "the no-match answer")
    rc, c, cout = _finish(_start("client", netdev, addr, sd, "c", WAIT_MS, 2, 500))
    assert rc == VIP["VIP_SUCCESS"], cout + _ended(server)
    rc, s, sout = _finish(server)
    assert rc == 0 and s["result"] == "VIP_SUCCESS", sout


def test_two_processes_server_down_is_timeout_after_the_timeout(env):
    """The command-line client gets VIP_TIMEOUT, never before its 1.5 s.  How late is judged in
    process, where the timeout's own start and end are seen (vipl_test.cpp, guest::on_time): around
    a whole process the exit's teardown of a connect still resolving an address counts too, and no
    control beside it has that."""
    netdev, addr = env
    t0 = time.monotonic()
    rc, c, cout = _finish(_start("client", netdev, SILENT_HOST, "s", "c", 1500))
    dt = time.monotonic() - t0
    assert rc == VIP["VIP_TIMEOUT"], cout
    assert dt >= 1.5, f"VIP_TIMEOUT after {dt:.3f} s of 1.5 s"


def test_two_processes_peer_connection(env):
    netdev, addr = env
    da, db = _disc("pa"), _disc("pb")
    a = _start("peer", netdev, addr, da, db, WAIT_MS)
    time.sleep(0.3)
    b = _start("peer", netdev, addr, db, da, WAIT_MS)
    for p in (a, b):
        rc, out, text = _finish(p)
        assert rc == 0 and out["result"] == "VIP_SUCCESS", text
        assert out["remote_mtu"] == "65536"
