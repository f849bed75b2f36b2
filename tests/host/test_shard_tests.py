"""scripts/shard-tests splits the guest suite's files into the debug lane's guests and the Debian
lane's (run-tests): every file must run in exactly one shard whatever the weights, and the split
must balance the measured weights (else the sharded lane is no shorter)."""
import glob
import os
import subprocess

import pytest

from kdat_harness import REPO

SHARD = os.path.join(REPO, "scripts", "shard-tests")


KERNELS = ["debug", "debian"]


def shard(k, n, kernel="debug", head_start=0):
    r = subprocess.run([SHARD, "--kernel", kernel, "--head-start", str(head_start), str(k), str(n)],
                       capture_output=True, text=True, check=True)
    return r.stdout.split()


def weights(kernel="debug"):
    out = {}
    with open(os.path.join(REPO, "tests", "guest", f"{kernel}-weights.txt")) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                seconds, name = line.split()
                out[f"tests/guest/{name}"] = float(seconds)
    return out


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_every_guest_test_file_is_in_exactly_one_shard(n, kernel):
    files = sorted(os.path.relpath(p, REPO)
                   for p in glob.glob(os.path.join(REPO, "tests", "guest", "test_*.py")))
    shards = [shard(k, n, kernel) for k in range(1, n + 1)]
    listed = [f for s in shards for f in s]
    assert sorted(listed) == files, "a file missing from every shard, or in two"


@pytest.mark.parametrize("kernel", KERNELS)
def test_two_shards_are_within_the_longest_file_of_each_other(kernel):
    w = weights(kernel)
    loads = [sum(w.get(f, 10.0) for f in shard(k, 2, kernel)) for k in (1, 2)]
    assert abs(loads[0] - loads[1]) <= max(w.values()), loads


def test_the_debug_weights_are_the_default():
    r = subprocess.run([SHARD, "1", "2"], capture_output=True, text=True, check=True)
    assert r.stdout.split() == shard(1, 2, "debug")


@pytest.mark.parametrize("kernel", KERNELS)
def test_every_weighed_file_exists(kernel):
    # a stale name would leave the real file at the default weight and the split unbalanced
    for name in weights(kernel):
        assert os.path.exists(os.path.join(REPO, name)), name


@pytest.mark.parametrize("args", [["0", "2"], ["3", "2"], ["x", "2"], ["1"],
                                  ["--kernel", "vanilla", "1", "2"], ["--kernel", "debian", "1"]])
def test_a_bad_shard_number_is_refused(args):
    r = subprocess.run([SHARD, *args], capture_output=True, text=True)
    assert r.returncode != 0 and r.stdout == ""


@pytest.mark.parametrize("head_start", [500, 1500])
def test_a_head_start_gives_the_first_shard_that_much_more(head_start):
    """run-tests starts the first debug guest before the others: with --head-start S it takes
    about S seconds more of the weights than the second, so that both end together."""
    w = weights("debug")
    loads = [sum(w.get(f, 10.0) for f in shard(k, 2, head_start=head_start)) for k in (1, 2)]
    assert abs(loads[0] - loads[1] - head_start) <= max(w.values()), loads


@pytest.mark.parametrize("value", ["x", "-5", "inf", "nan"])
def test_a_bad_head_start_is_refused(value):
    r = subprocess.run([SHARD, "--head-start", value, "1", "2"], capture_output=True, text=True)
    assert r.returncode != 0 and r.stdout == "" and "--head-start" in r.stderr
