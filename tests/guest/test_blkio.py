"""Block I/O over kdat's kernel API (#22): kdat_blkio, a kernel module that uses only
include/kdat/kdat.h, moves requests the way iSER and NVMe over RDMA do -- scatterlists of scattered
pages, a fast registration per request, the target's RDMA read or write, a response that ends the
registration (send with invalidate), completions as callbacks, posts from a softirq -- and checks
every byte both ways."""
import os
import time

import pytest

from kdat_harness import guest
from kdat_harness.dat import Kdat, next_port

PARAMS = "/sys/module/kdat_blkio/parameters"


def param(name):
    with open(os.path.join(PARAMS, name)) as f:
        return f.read().strip()


def result(timeout_s=600):
    deadline = time.monotonic() + timeout_s
    while param("result") == "running":
        assert time.monotonic() < deadline, "kdat_blkio still running"
        time.sleep(0.2)
    return param("result")


@pytest.fixture
def blkio(kdat_module, kernel_log, rdma):
    def load(**params):
        r = guest.run("insmod", guest.BLKIO_KO, *[f"{k}={v}" for k, v in params.items()],
                      check=False)
        assert r.returncode == 0, r.stderr
    yield load
    if guest.module_loaded("kdat_blkio"):
        r = guest.unload_module("kdat_blkio")
        assert r.returncode == 0, r.stderr


# max_iov 3: each 64 KiB request (18 scattered segments) is more than one work request takes, so
# kdat posts the target's RDMA read or write as 6 over consecutive remote ranges (as on iWARP,
# where a read takes one segment).
# The debug kernel (KASAN on every access, rxe's included) takes many times as long per request:
# there, 200 requests still cycle the 32 slots 6 times (the target holds the first 32 commands until
# all are in, so the full depth is reached at any speed).
MANY = 200 if os.environ.get("KDAT_DEBUG_KERNEL") == "1" else 2000


@pytest.mark.parametrize("depth,requests,size,max_iov",
                         [(1, 50, 4096, 0), (32, MANY, 65536, 0), (32, MANY, 65536, 3)])
def test_requests_move_every_byte_both_ways_with_many_in_flight(blkio, depth, requests, size,
                                                                max_iov):
    blkio(port=next_port(), depth=depth, requests=requests, size=size, max_iov=max_iov)
    assert result() == "passed", {p: param(p) for p in os.listdir(PARAMS)}
    assert int(param("done")) == requests
    assert int(param("verified")) == requests, "each write checked by the target, each read here"
    assert int(param("invalidated")) == requests, "every response ended its registration"
    assert int(param("failed")) == 0
    assert int(param("max_in_flight")) == depth
    assert int(param("softirq_posts")) > 0, "no request was posted from a softirq"


def test_unloading_mid_run_flushes_and_frees_everything(blkio):
    """rmmod while requests are in flight: the EPs flush them, nothing is left, kdat unloads."""
    blkio(port=next_port(), depth=32, requests=1_000_000, size=65536)
    deadline = time.monotonic() + 120
    while int(param("done")) < 100:
        assert param("result") == "running", param("result")
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert guest.unload_module("kdat_blkio").returncode == 0
    with Kdat() as k:
        assert not [t for t in k.table_list()[1] if t.comm == "kdat_blkio"]


def test_the_drivers_ia_counts_one_connection(blkio):
    blkio(port=next_port(), depth=4, requests=20, size=4096)
    assert result() == "passed"
    names = guest.UAPI.counters
    with Kdat() as k:
        tables = [t for t in k.table_list()[1] if t.comm == "kdat_blkio"]
        assert len(tables) == 1
        k.table_attach(tables[0].id)
        with k.view() as v:
            ias = [r.handle for _, r in v.live_records()
                   if r.type == guest.UAPI.consts["KDAT_REC_IA"]]
        counts = k.ia_counters(ias[0], table=tables[0].id)
    assert counts == dict.fromkeys(names, 0) | {"connects": 1, "requests": 1, "accepts": 1,
                                                 "established": 2}
