"""The block driver pair between two hosts: kdat_blkt on the peer exports a RAM disk, kdat_blk here
makes /dev/kdatb0 on it.  The target's host is powered off hard under writes and comes back (a new,
empty RAM disk, kdat_blkt loaded again): the initiator reconnects, the writes in flight are
requeued and complete, and the device verifies afterwards.  On both wires: over iWARP (siw: 6
segments per send or RDMA write, 1 per RDMA read) kdat posts the target's RDMA of a command's 32
pages as several work requests."""
import os
import subprocess
import time

import pytest

from kdat_harness import blk as blkctl, guest
from kdat_harness.guest import wait_for
from kdat_harness.dat import next_port
from wire_helpers import record

BLK_KO = os.path.join(guest.KMOD_DIR, "blk", "kdat_blk.ko")
BLKT_KO = os.path.join(guest.KMOD_DIR, "blk", "kdat_blkt.ko")
DEV = "/dev/kdatb0"


def blk_param(name):
    return blkctl.attr("kdatb0", name)


def give_up_now():
    """The initiator fails what waits for the target at its next attempt (ctrl_loss_tmo is
    writable): a test that failed with the target away ends its I/O without waiting for it."""
    if blk_param("state") != "live":
        blkctl.set_attr("kdatb0", "ctrl_loss_tmo", 0)


def fio(*args):
    return subprocess.Popen(["fio", "--name=kdat", f"--filename={DEV}", "--direct=1",
                             "--ioengine=libaio", "--bs=16k", "--iodepth=8", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture
def remote_target(peer, link, kdat_module, kernel_log):
    """start(): a 64 MiB brd RAM disk exported by kdat_blkt on the peer (again after a boot);
    the teardown unloads the initiator here and the target there, whatever happened."""
    port = next_port()

    def start():
        peer.sh("modprobe brd rd_nr=1 rd_size=65536")
        peer.sh(f"insmod {BLKT_KO} path=/dev/ram0 port={port} ia_name={link.netdev}")

    start.port = port
    yield start
    # A test that failed half-way may have left the peer off, or requests waiting for a target
    # that is not there: power it on, and have the initiator end them (dead at its next attempt)
    # before it is unloaded.
    if not peer.powered:
        peer.power_on()
    if guest.module_loaded("kdat_blk"):
        give_up_now()
        wait_for(lambda: blk_param("state") in ("live", "dead"), 90,
                 "the initiator neither reconnected nor gave up")
        r = guest.unload_module("kdat_blk")
        assert r.returncode == 0, r.stderr
    peer.sh("rmmod kdat_blkt 2>/dev/null; rmmod brd 2>/dev/null; true")


def test_the_target_host_powered_off_under_writes_and_back(link, peer, remote_target):
    # ctrl_loss_tmo -1: the initiator waits for the target however long its host takes to boot
    # (power_on's own timeout bounds that): a finite limit can run out during a slow boot and
    # fail the writes EIO, and this test is about the return, not the give-up
    # (tests/guest/test_blk.py has that).
    remote_target()
    r = guest.run("insmod", BLK_KO, check=False)
    assert r.returncode == 0, r.stderr
    # no ia_name: the controller takes the device of the route to the target (the link's)
    assert blkctl.connect(target=link.peer_addr, port=remote_target.port, nr_queues=2,
                          queue_depth=8, reconnect_delay=1, ctrl_loss_tmo=-1) == "kdatb0"
    wait_for(lambda: os.path.exists(DEV), 30, f"{DEV} did not appear")
    run = fio("--rw=randwrite", "--size=48M")
    try:
        wait_for(lambda: blk_param("state") == "live", 30, "the initiator is not live")
        # writes flow before the fault (on a busy machine fio can be slow to get going)
        wait_for(lambda: int(peer.sh("cat /sys/module/kdat_blkt/parameters/writes")["out"]) > 100,
                 120, "no writes arrived at the target")
        assert run.poll() is None, "fio ended before the fault"
        peer.power_off()
        t0 = time.monotonic()
        wait_for(lambda: blk_param("state") == "connecting", 120, "the initiator saw no loss")
        lost = time.monotonic() - t0
        peer.power_on()
        remote_target()
        out, _ = run.communicate(timeout=600)
    finally:
        if run.poll() is None:
            give_up_now()
            run.kill()
            run.wait(timeout=120)
    assert run.returncode == 0, out[-3000:]
    assert blk_param("state") == "live"
    assert int(blk_param("reconnects")) >= 1
    record(link, "target host powered off", "kdat_blk under writes: loss noticed", "connecting",
           lost)
    record(link, "target host powered off", "kdat_blk: target back to I/O resuming", "live",
           int(blk_param("last_resume_ms")) / 1000)
    # the device works end to end on the new disk
    run = fio("--rw=randwrite", "--size=8M", "--verify=crc32c", "--do_verify=1",
              "--verify_fatal=1")
    out, _ = run.communicate(timeout=600)
    assert run.returncode == 0, out[-3000:]
