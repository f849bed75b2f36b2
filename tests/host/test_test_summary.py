"""scripts/test-summary: the one 'N passed, N failed' line over every lane's JUnit XML, and for each
failure the first lines of its message (a CI log kept only in part must still say why)."""
import os
import subprocess

from kdat_harness import REPO

SUMMARY = os.path.join(REPO, "scripts", "test-summary")


def _write(path, cases):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(f"<testsuites><testsuite>{cases}</testsuite></testsuites>")


def test_failures_are_listed_with_the_start_of_their_message(tmp_path):
    _write(str(tmp_path / "guest" / "guest-pytest.xml"),
           '<testcase classname="tests.guest.m" name="test_a"><failure message="AssertionError: '
           'server rc timeout&#10;second&#10;third&#10;fourth&#10;fifth">tb</failure></testcase>'
           '<testcase classname="tests.guest.m" name="test_b"/>'
           '<testcase classname="tests.guest.m" name="test_c"><skipped/></testcase>')
    _write(str(tmp_path / "wire" / "a" / "wire-pytest.xml"),
           '<testcase classname="tests.wire.m" name="test_d"><error message="">setup tb</error>'
           '</testcase>')
    r = subprocess.run([SUMMARY, str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    a = lines.index("FAILED guest/guest-pytest.xml: tests.guest.m::test_a")
    assert lines[a + 1:a + 5] == ["    AssertionError: server rc timeout", "    second",
                                  "    third", "    fourth"], lines
    d = lines.index("FAILED wire/a/wire-pytest.xml: tests.wire.m::test_d")
    assert lines[d + 1] == "    setup tb", lines
    assert lines[-1] == "1 passed, 2 failed, 1 skipped"


def test_all_passed_exits_zero_and_nothing_run_is_a_failure(tmp_path):
    _write(str(tmp_path / "host-pytest.xml"), '<testcase classname="m" name="t"/>')
    r = subprocess.run([SUMMARY, str(tmp_path)], capture_output=True, text=True)
    assert (r.returncode, r.stdout.splitlines()[-1]) == (0, "1 passed, 0 failed")
    empty = tmp_path / "empty"
    empty.mkdir()
    r = subprocess.run([SUMMARY, str(empty)], capture_output=True, text=True)
    assert r.returncode == 1 and "no test ran" in r.stderr
