"""scripts/shard-tests splits the guest suite's files into the debug lane's guests (run-tests):
every file must run in exactly one shard whatever the weights, and the split must balance the
measured weights (else the sharded lane is no shorter)."""
import glob
import os
import subprocess

import pytest

from kdat_harness import REPO

SHARD = os.path.join(REPO, "scripts", "shard-tests")


def shard(k, n):
    r = subprocess.run([SHARD, str(k), str(n)], capture_output=True, text=True, check=True)
    return r.stdout.split()


def weights():
    out = {}
    with open(os.path.join(REPO, "tests", "guest", "debug-weights.txt")) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                seconds, name = line.split()
                out[f"tests/guest/{name}"] = float(seconds)
    return out


@pytest.mark.parametrize("n", [1, 2, 3])
def test_every_guest_test_file_is_in_exactly_one_shard(n):
    files = sorted(os.path.relpath(p, REPO)
                   for p in glob.glob(os.path.join(REPO, "tests", "guest", "test_*.py")))
    shards = [shard(k, n) for k in range(1, n + 1)]
    listed = [f for s in shards for f in s]
    assert sorted(listed) == files, "a file missing from every shard, or in two"


def test_two_shards_are_within_the_longest_file_of_each_other():
    w = weights()
    loads = [sum(w.get(f, 10.0) for f in shard(k, 2)) for k in (1, 2)]
    assert abs(loads[0] - loads[1]) <= max(w.values()), loads


def test_every_weighed_file_exists():
    # a stale name would leave the real file at the default weight and the split unbalanced
    for name in weights():
        assert os.path.exists(os.path.join(REPO, name)), name


@pytest.mark.parametrize("args", [["0", "2"], ["3", "2"], ["x", "2"], ["1"]])
def test_a_bad_shard_number_is_refused(args):
    r = subprocess.run([SHARD, *args], capture_output=True, text=True)
    assert r.returncode != 0 and r.stdout == ""
