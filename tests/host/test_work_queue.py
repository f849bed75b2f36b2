"""kdat_harness.work_queue shares a suite's files out among run-tests' guests as they go: every
file must run in exactly one guest, the longest first, with pytest's fixture scopes intact, and
a guest that claims nothing must run nothing."""
import multiprocessing
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest

from kdat_harness import REPO
from kdat_harness.work_queue import DEFAULT_WEIGHT, Queue, order, read_weights

GUEST = os.path.join(REPO, "tests", "guest")
KERNELS = ["debug", "debian"]


def test_the_order_is_longest_first_with_ties_by_name_and_unknown_files_at_the_default():
    w = {"b.py": 30.0, "a.py": 30.0, "c.py": 5.0}
    assert order(["c.py", "d.py", "a.py", "b.py"], w) == ["a.py", "b.py", "d.py", "c.py"]
    assert DEFAULT_WEIGHT == 10.0


@pytest.mark.parametrize("kernel", KERNELS)
def test_every_weighed_file_exists(kernel):
    # a stale name would leave the real file at the default weight, out of its place in the order
    weights = read_weights(os.path.join(GUEST, f"{kernel}-weights.txt"))
    assert len(weights) > 10
    for name in weights:
        assert os.path.exists(os.path.join(GUEST, name)), name


def _claim_all(path, names, who, out):
    q = Queue(path, who)
    out.put((who, [n for n in names if q.claim(n)]))


def test_racing_processes_each_claim_a_file_exactly_once(tmp_path):
    names = [f"test_{i}.py" for i in range(200)]
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_claim_all, args=(str(tmp_path), names, f"g{k}", out))
             for k in range(6)]
    for p in procs:
        p.start()
    got = dict(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    claimed = [n for ns in got.values() for n in ns]
    assert sorted(claimed) == sorted(names), "a file claimed twice, or by nobody"
    for who, ns in got.items():
        for n in ns:
            with open(tmp_path / n / "owner") as f:
                assert f.read() == who + "\n"


@pytest.mark.parametrize("name", ["", ".", "..", "a/b.py"])
def test_a_name_that_is_not_a_file_name_is_refused(tmp_path, name):
    with pytest.raises(ValueError):
        Queue(str(tmp_path)).claim(name)


def test_a_missing_queue_directory_is_an_error_not_a_skipped_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        Queue(str(tmp_path / "gone")).claim("test_a.py")


# ---- the pytest loop, on a suite of its own ---------------------------------------------------

SUITE = {
    "conftest.py": f"""
        import os, sys, pytest
        sys.path.insert(0, {os.path.join(REPO, "tests")!r})
        from kdat_harness.work_queue import pytest_runtestloop  # noqa: F401

        def log(what):
            with open(os.environ["SUITE_LOG"], "a") as f:
                f.write(f"{{os.environ['KDAT_QUEUE_NAME']}} {{what}}\\n")

        @pytest.fixture(scope="session")
        def session_fx():
            log("session-up")
            yield
            log("session-down")

        @pytest.fixture(scope="module")
        def module_fx(request, session_fx):
            name = os.path.basename(str(request.fspath))
            log(f"module-up {{name}}")
            yield
            log(f"module-down {{name}}")
        """,
    "weights.txt": "# seconds name\n50 test_b.py\n40 test_a.py\n",
}
for letter, n in (("a", 3), ("b", 2), ("c", 4), ("d", 1), ("e", 2)):
    SUITE[f"test_{letter}.py"] = "\n".join(
        [f"import time\n\ndef test_{letter}{i}(module_fx):\n    time.sleep(0.05)\n" for i in range(n)])


def _suite(tmp_path):
    root = tmp_path / "suite"
    root.mkdir()
    for name, text in SUITE.items():
        (root / name).write_text(textwrap.dedent(text))
    return root


def _pytest(root, queue, name, log):
    env = dict(os.environ, SUITE_LOG=str(log), KDAT_QUEUE_NAME=name,
               KDAT_QUEUE_WEIGHTS=str(root / "weights.txt"))
    env.pop("KDAT_QUEUE", None)
    if queue:
        env["KDAT_QUEUE"] = str(queue)
    return subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                             f"--junitxml={root / (name + '.xml')}", str(root)],
                            env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def _ran(root, name):
    return [c.get("name") for c in ET.parse(root / f"{name}.xml").getroot().iter("testcase")]


def test_two_runs_sharing_a_queue_run_every_test_once_with_fixtures_set_up_and_torn_down(tmp_path):
    root, queue, log = _suite(tmp_path), tmp_path / "queue", tmp_path / "log"
    queue.mkdir()
    procs = {n: _pytest(root, queue, n, log) for n in ("g1", "g2")}
    for n, p in procs.items():
        out = p.communicate(timeout=120)[0]
        assert p.returncode == 0, out
    ran = {n: _ran(root, n) for n in procs}
    every = sorted(t for f, n in (("a", 3), ("b", 2), ("c", 4), ("d", 1), ("e", 2))
                   for t in (f"test_{f}{i}" for i in range(n)))
    assert sorted(ran["g1"] + ran["g2"]) == every, ran
    lines = log.read_text().splitlines()
    for n in procs:
        mine = [x.split(" ", 1)[1] for x in lines if x.startswith(n + " ")]
        files = sorted({t[5] for t in ran[n]})
        if not files:
            assert mine == [], "a run that claimed nothing set up nothing"
            continue
        # one session, each of its files' modules up and down once, the session down last
        assert mine[0] == "session-up" and mine[-1] == "session-down", mine
        for f in files:
            assert mine.count(f"module-up test_{f}.py") == 1, mine
            assert mine.count(f"module-down test_{f}.py") == 1, mine
        for f in sorted(set("abcde") - set(files)):
            assert f"module-up test_{f}.py" not in mine, "set up a file the other run claimed"
    assert sorted(os.listdir(queue)) == [f"test_{f}.py" for f in "abcde"]


def test_one_run_alone_takes_the_files_longest_first(tmp_path):
    root, queue, log = _suite(tmp_path), tmp_path / "queue", tmp_path / "log"
    queue.mkdir()
    p = _pytest(root, queue, "alone", log)
    out = p.communicate(timeout=120)[0]
    assert p.returncode == 0, out
    files = [t[5] for t in _ran(root, "alone")]
    # weights: b 50, a 40, the rest the default 10 each, by name
    assert list(dict.fromkeys(files)) == ["b", "a", "c", "d", "e"], files


def test_a_run_whose_files_are_all_claimed_runs_nothing(tmp_path):
    root, queue, log = _suite(tmp_path), tmp_path / "queue", tmp_path / "log"
    queue.mkdir()
    for f in "abcde":
        (queue / f"test_{f}.py").mkdir()
    p = _pytest(root, queue, "late", log)
    out = p.communicate(timeout=120)[0]
    assert p.returncode == 0, out
    assert _ran(root, "late") == []
    assert not log.exists(), "nothing set up"


def test_without_a_queue_pytest_runs_everything_in_its_own_order(tmp_path):
    root, log = _suite(tmp_path), tmp_path / "log"
    p = _pytest(root, None, "plain", log)
    out = p.communicate(timeout=120)[0]
    assert p.returncode == 0, out
    files = [t[5] for t in _ran(root, "plain")]
    assert list(dict.fromkeys(files)) == ["a", "b", "c", "d", "e"], files
