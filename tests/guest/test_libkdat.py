"""libkdat's guest GoogleTests (user/tests/guest, built as build/user/kdat_guest_tests): every public
call of the C++ library against the loaded module over Soft-RoCE, including two-process connections,
the kdat_echo kernel consumer, state-reader storms and event-ring backlog ordering."""
import os
import re
import subprocess

import pytest

from kdat_harness import REPO, guest

BINARY = os.path.join(REPO, "build", "user", "kdat_guest_tests")


def test_libkdat_guest_tests_pass(kdat_module, rdma, kernel_log):
    if not os.access(BINARY, os.X_OK):
        pytest.fail(f"{BINARY} is missing: build it with 'make'")
    if guest.module_loaded("kdat_echo"):
        guest.unload_module("kdat_echo")   # the tests load it with their own parameters
    args = [BINARY, "--gtest_color=no"]
    results = os.environ.get("KDAT_RESULTS")
    if results and os.path.isdir(results):
        args.append(f"--gtest_output=xml:{os.path.join(results, 'libkdat-guest-gtest.xml')}")
    env = dict(os.environ, KDAT_ECHO_KO=guest.ECHO_KO,
               KDAT_TEST_ADDR=rdma.get("KDAT_TEST_ADDR", "192.0.2.1"),
               KDAT_TEST_NETDEV=rdma.get("KDAT_TEST_NETDEV", "kdat0"))
    r = subprocess.run(args, capture_output=True, text=True, timeout=1200, env=env, cwd=REPO)
    out = r.stdout + r.stderr
    failed = re.findall(r"^\[  FAILED  \] (\S+)", out, re.M)
    passed = re.search(r"^\[  PASSED  \] (\d+) test", out, re.M)
    assert r.returncode == 0, (f"kdat_guest_tests failed ({sorted(set(failed))}):\n"
                               + "\n".join(out.splitlines()[-150:]))
    assert passed and int(passed.group(1)) > 0, out[-2000:]
