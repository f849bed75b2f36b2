"""The block driver pair on kdat's kernel API (#22): kdat_blkt exports a RAM disk (brd) or a
null_blk device, and a kdat_blk controller made through /dev/kdat-blk makes /dev/kdatb0 on it over
rxe.  A filesystem, fio --verify, flush and discard, the target going away and coming back mid-run,
the RDMA device removed under I/O, several controllers at once, and options that are refused with a
message that says what to give."""
import hashlib
import json
import mmap
import os
import re
import select
import struct
import subprocess
import time

import pytest

from kdat_harness import KDATCTL, REPO, blk as blkctl, guest
from kdat_harness.guest import wait_for
from kdat_harness.dat import Kdat, next_port

BLK_KO = os.path.join(guest.KMOD_DIR, "blk", "kdat_blk.ko")
BLKT_KO = os.path.join(guest.KMOD_DIR, "blk", "kdat_blkt.ko")
DEV = "/dev/kdatb0"
# a librdmacm program (no kdat) that speaks the block protocol's connect as any peer could
PEER = os.path.join(REPO, "build", "user", "plain_rdmacm_peer")
KBLK_MAGIC = 0x4b424c4b
KBLK_REJ_RESOURCES, KBLK_REJ_QUEUE = 3, 4
MNT = "/tmp/kdat-blk-mnt"
# The debug kernel (KASAN checks every access of the I/O path, rxe's included) takes many times as
# long per request: its verify runs move an eighth of the data or less, which still cycles every tag
# of every queue a dozen times or more; the Debian kernel's lane moves it all.
DEBUG_KERNEL = os.environ.get("KDAT_DEBUG_KERNEL") == "1"


def verify_kib(mib, debug_kib):
    return debug_kib if DEBUG_KERNEL else mib * 1024


def blk_param(name, module="kdat_blk"):
    """kdat_blkt's module parameter, or the attribute of kdat_blk's first controller."""
    if module == "kdat_blk":
        return blkctl.attr("kdatb0", name)
    with open(f"/sys/module/{module}/parameters/{name}") as f:
        return f.read().strip()


def load_initiator():
    if not guest.module_loaded("kdat_blk"):
        r = guest.run("insmod", BLK_KO, check=False)
        assert r.returncode == 0, r.stderr


def has_module(name):
    return guest.run("modprobe", "-n", name, check=False).returncode == 0


def mounted():
    with open("/proc/mounts") as f:
        return any(line.split()[1] == MNT for line in f)


@pytest.fixture
def ramdisk(kdat_module):
    """A 64 MiB brd RAM disk to export (both kernels build brd as a module)."""
    assert has_module("brd"), "this kernel has no brd module (kunit/test-kernel.config builds one)"
    guest.run("modprobe", "brd", "rd_nr=1", "rd_size=65536")
    yield "/dev/ram0"
    assert guest.run("rmmod", "brd", check=False).returncode == 0


@pytest.fixture
def blk(kdat_module, kernel_log, rdma):
    """Loads kdat_blkt and kdat_blk; the teardown unmounts and unloads both, whatever happened."""
    port = next_port()

    def target(path, **params):
        args = [f"path={path}", f"port={port}", f"ia_name={rdma['KDAT_TEST_NETDEV']}"]
        r = guest.run("insmod", BLKT_KO, *args, *[f"{k}={v}" for k, v in params.items()],
                      check=False)
        assert r.returncode == 0, (r.stderr, kernel_log.new_lines())

    def initiator(**params):
        load_initiator()
        options = {"target": rdma["KDAT_TEST_ADDR"], "port": port,
                   "ia_name": rdma["KDAT_TEST_NETDEV"], **params}
        if options["ia_name"] is None:
            del options["ia_name"]      # the route's device
        try:
            name = blkctl.connect(**options)
        except OSError as e:
            raise AssertionError((e, kernel_log.new_lines())) from e
        wait_for(lambda: os.path.exists(f"/dev/{name}"), 30, f"/dev/{name} did not appear")
        return name

    target.port = port
    initiator.expect_resets = False
    guest.show_rxe_retries()
    yield target, initiator
    try:
        for name in blkctl.controllers() if not initiator.expect_resets else []:
            # a request that got no answer would only show as a reset after io_timeout
            wait_for(lambda: open(f"/sys/block/{name}/inflight").read().split() == ["0", "0"],
                     10, "requests still in flight with nothing running: an answer was lost")
            assert_losses_are_rxes(kernel_log.new_lines(), int(blkctl.attr(name, "resets")))
    finally:
        # whatever failed above, the modules go: the next test loads them again
        guest.run("umount", MNT, check=False)
        for module in ("kdat_blk", "kdat_blkt"):
            if guest.module_loaded(module):
                r = guest.unload_module(module)
                assert r.returncode == 0, r.stderr


def assert_losses_are_rxes(lines, losses):
    """Connections lost that the test did not cause: none, or rxe's own (rxe-replays-fast-reg in
    docs/testing.md: the work-queue rxe may run a fast registration twice on a retry, which
    puts the QP in error), each one announced by rxe in the log.  kdat_blk then reconnects
    and loses no I/O; the test's own checks (fio's verify) say so."""
    if not losses:
        return
    replays = guest.rxe_fast_reg_replays(lines)
    assert guest.rxe_runs_tasks_on_a_work_queue() and losses <= replays, \
        f"{losses} connection loss(es), {replays} announced by rxe: {lines[-30:]}"
    print(f"kdat_blk: {losses} loss(es), each after rxe ran a fast registration again "
          "(rxe-replays-fast-reg)")


def fio(*args, timeout=600, check=True):
    cmd = ["fio", "--name=kdat", f"--filename={DEV}", "--direct=1", "--ioengine=libaio",
           "--output-format=json", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check:
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r


@pytest.mark.parametrize("module,params,message", [
    ("kdat_blk", [], "target=: give the target's IPv4 or IPv6 address"),
    ("kdat_blk", ["target=192.0.2"], "target=192.0.2: give the target's IPv4 or IPv6 address"),
    ("kdat_blk", ["target=192.0.2.1"], "port=0: give the target's port"),
    ("kdat_blk", ["target=192.0.2.1", "port=4420", "queue_depth=0"], "queue_depth=0: 1-128"),
    ("kdat_blk", ["target=192.0.2.1", "port=4420", "queue_depth=129"], "queue_depth=129: 1-128"),
    ("kdat_blk", ["target=192.0.2.1", "port=4420", "nr_queues=17"], "nr_queues=17: 1-16"),
    ("kdat_blk", ["target=192.0.2.1", "port=4420", "reconnect_delay=0"],
     "reconnect_delay=0: 1-3600 seconds"),
    ("kdat_blk", ["target=192.0.2.1", "port=4420", "io_timeout=0"], "io_timeout=0: 1 or more"),
    ("kdat_blk", ["target=192.0.2.1", "port=4420", "ctrl_loss_tmo=-2"],
     "ctrl_loss_tmo=-2: -1 (for ever) or more"),
    ("kdat_blk", ["target=192.0.2.1", "port=4420", "queues=2"],
     "queues=2: not an option of kdat_blk"),
    ("kdat_blk", ["target=192.0.2.1", "port=4420", "queue_depth=many"],
     "queue_depth=many: not an option of kdat_blk"),
    ("kdat_blk", ["target=192.0.2.1", "port=PORT"], "cannot connect to 192.0.2.1 port"),
    ("kdat_blk", ["target=192.0.2.1", "port=PORT", "ia_name=kdat-no-such-netdev"],
     "cannot connect to 192.0.2.1 port"),
    ("kdat_blkt", ["port=4420"], "path= is required"),
    ("kdat_blkt", ["port=4420", "path=/dev/kdat-no-such-disk"], "cannot open /dev/kdat-no-such-disk"),
    ("kdat_blkt", ["path=/dev/null"], "port=0: give the port"),
    ("kdat_blkt", ["port=4420", "path=/dev/null", "max_queue_depth=0"], "max_queue_depth=0: 1-128"),
    ("kdat_blkt", ["port=4420", "path=/dev/null", "max_queues=0"], "max_queues=0: 1-1024"),
])
def test_bad_options_are_refused_with_a_clear_message(kdat_module, kernel_log, rdma, module,
                                                      params, message):
    """Nothing is made, and the kernel log says what to give: a controller's options written to
    /dev/kdat-blk are refused by the write (a connect to a port nobody listens on too, instead of
    leaving a device that never works); the target's module parameters by insmod."""
    params = [p.replace("PORT", str(next_port())) for p in params]
    if module == "kdat_blk":
        load_initiator()
        try:
            fd = os.open(blkctl.CONTROL, os.O_RDWR)
            try:
                with pytest.raises(OSError):
                    os.write(fd, ",".join(params).encode())
                with pytest.raises(OSError):    # nothing to name
                    os.read(fd, 128)
            finally:
                os.close(fd)
            assert blkctl.controllers() == []
        finally:
            assert guest.unload_module("kdat_blk").returncode == 0
    else:
        r = guest.run("insmod", BLKT_KO, *params, check=False)
        assert r.returncode != 0
        assert not guest.module_loaded(module)
    assert any(message in line for line in kernel_log.new_lines()), message


def test_a_target_refuses_a_queue_deeper_than_it_takes(ramdisk, blk, kernel_log, rdma):
    target, _ = blk
    target(ramdisk, max_queue_depth=8)
    load_initiator()
    with pytest.raises(OSError):
        blkctl.connect(target=rdma["KDAT_TEST_ADDR"], port=target.port, queue_depth=16)
    assert blkctl.controllers() == []
    lines = kernel_log.new_lines()
    assert any(f"refused queue 0 from {rdma['KDAT_TEST_ADDR']}: depth 16 (this target takes 1-8)"
               in line for line in lines)
    assert any("the target refused it: queue_depth is 0 or above the target's (reason 2)" in line
               for line in lines), lines


def test_a_filesystem_keeps_its_files_across_unmount_and_a_new_connection(ramdisk, blk):
    target, initiator = blk
    target(ramdisk)
    initiator(nr_queues=2, queue_depth=16)
    assert int(open("/sys/block/kdatb0/size").read()) == 65536 * 2, "the RAM disk's 64 MiB"
    guest.run("mkfs.ext4", "-q", "-F", DEV)
    os.makedirs(MNT, exist_ok=True)
    guest.run("mount", DEV, MNT)
    digests = {}
    # the debug kernel writes a tenth of it (mkfs and fsck read and write the rest of the disk)
    sizes = (4096, 100 << 10, 512 << 10) if DEBUG_KERNEL else (4096, 1 << 20, 5 << 20)
    for i, size in enumerate(sizes):
        data = os.urandom(size)
        with open(os.path.join(MNT, f"f{i}"), "wb") as f:
            f.write(data)
        digests[f"f{i}"] = hashlib.sha256(data).hexdigest()
    guest.run("umount", MNT)
    # a new controller, new connections: what is on the target's disk is what was written
    blkctl.disconnect("kdatb0")
    assert not os.path.exists(DEV) and blkctl.controllers() == []
    assert initiator(nr_queues=1, queue_depth=4) == "kdatb0"
    guest.run("fsck.ext4", "-n", "-f", DEV)
    guest.run("mount", DEV, MNT)
    for name, digest in digests.items():
        with open(os.path.join(MNT, name), "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == digest, name
    guest.run("umount", MNT)


def dd_sha256(*args):
    """sha256 of what dd writes to its stdout (of=/dev/stdout for a read)."""
    r = subprocess.run(["dd", *args, "status=none"], capture_output=True, check=True)
    return hashlib.sha256(r.stdout).hexdigest()


def test_controllers_are_made_shown_and_removed_at_run_time(ramdisk, blk, rdma, kernel_log):
    """Two controllers on one export, each its own disk: what one writes the other reads; each
    shows its address, local device, queues and counters in sysfs; one removed by its
    delete_controller leaves the other serving, and its name is free again.  The first names no
    ia_name and takes the route's (the target's own address here); an open file makes one
    controller."""
    target, initiator = blk
    target(ramdisk)
    a = initiator(nr_queues=1, queue_depth=4, ia_name=None)
    b = initiator(nr_queues=2, queue_depth=8)
    assert (a, b) == ("kdatb0", "kdatb1") and blkctl.controllers() == [a, b]
    addr = rdma["KDAT_TEST_ADDR"]
    assert blkctl.attr(a, "address") == f"target={addr},port={target.port}"
    assert blkctl.attr(a, "local") == addr, "the route to a local address leaves from it"
    assert blkctl.attr(b, "local") == rdma["KDAT_TEST_NETDEV"]
    assert [blkctl.attr(b, x) for x in ("state", "queues", "queue_depth", "resets", "reconnects")] \
        == ["live", "2", "8", "0", "0"]
    wait_for(lambda: blk_param("queues", "kdat_blkt") == "3", 10, "the target has not 3 queues")
    data = os.urandom(1 << 20)
    digest = hashlib.sha256(data).hexdigest()
    with open("/tmp/kdat-blk-data", "wb") as f:
        f.write(data)
    guest.run("dd", "if=/tmp/kdat-blk-data", f"of=/dev/{a}", "bs=64k", "seek=64", "oflag=direct",
              "status=none")
    assert dd_sha256(f"if=/dev/{b}", "bs=64k", "skip=64", "count=16", "iflag=direct") == digest
    blkctl.disconnect(a)
    assert blkctl.controllers() == [b] and not os.path.exists(f"/dev/{a}")
    assert any(f"kdat_blk: {a}: deleted" in line for line in kernel_log.new_lines())
    wait_for(lambda: blk_param("queues", "kdat_blkt") == "2", 10, "the target kept a's queue")
    assert dd_sha256(f"if=/dev/{b}", "bs=64k", "skip=64", "count=16", "iflag=direct") == digest
    fd = os.open(blkctl.CONTROL, os.O_RDWR)
    try:
        os.write(fd, f"target={addr},port={target.port}".encode())
        assert os.read(fd, 128) == f"instance=0,name={a}\n".encode()
        with pytest.raises(OSError):
            os.write(fd, f"target={addr},port={target.port}".encode())
    finally:
        os.close(fd)
    assert blkctl.controllers() == [a, b]
    assert any("one controller per open of /dev/kdat-blk" in line
               for line in kernel_log.new_lines())


def kdatctl(*argv):
    return subprocess.run([KDATCTL, *argv], capture_output=True, text=True, timeout=60)


def test_kdatctl_blk_connects_lists_and_disconnects(ramdisk, blk, rdma):
    """The administrator's commands: connect prints the name, list shows what sysfs has (text and
    JSON), a refused connect and an unknown name exit 1 with the reason."""
    target, _ = blk
    target(ramdisk)
    load_initiator()
    r = kdatctl("blk", "connect", "-t", rdma["KDAT_TEST_ADDR"], "-p", str(target.port),
                "--nr-queues", "1", "--queue-depth", "4", "--ctrl-loss-tmo", "-1")
    assert r.returncode == 0 and r.stdout == "kdatb0\n", (r.stdout, r.stderr)
    listing = json.loads(kdatctl("-j", "blk", "list").stdout)["controllers"]
    assert [(c["name"], c["state"], c["queues"], c["queue_depth"], c["ctrl_loss_tmo"],
             c["local"]) for c in listing] == \
        [("kdatb0", "live", 1, 4, -1, rdma["KDAT_TEST_ADDR"])], listing
    text = kdatctl("blk", "list").stdout
    assert text.startswith("kdatb0  live  target=") and "queues 1x4" in text, text
    bad = kdatctl("blk", "connect", "-t", rdma["KDAT_TEST_ADDR"], "-p", str(target.port),
                  "--queue-depth", "0")
    assert bad.returncode == 1 and "kdat_blk refused" in bad.stderr and \
        "Invalid argument" in bad.stderr, bad.stderr
    assert kdatctl("blk", "disconnect", "kdatb0").returncode == 0
    assert blkctl.controllers() == [] and not os.path.exists(DEV)
    gone = kdatctl("blk", "disconnect", "kdatb0")
    assert gone.returncode == 1 and "no controller kdatb0" in gone.stderr, gone.stderr
    assert json.loads(kdatctl("-j", "blk", "list").stdout) == {"controllers": []}


TRACING = "/sys/kernel/tracing"


class BlkTrace:
    """events/kdat_blk on an empty buffer until stop(); enabling and disabling patch kernel text,
    which is done with one CPU online (guest.OneCpu)."""

    @staticmethod
    def mount():
        if not os.path.exists(os.path.join(TRACING, "trace")):
            guest.run("mount", "-t", "tracefs", "nodev", TRACING)

    def __init__(self):
        self.mount()
        self._write("tracing_on", "0")
        self._write("trace", "")
        with guest.OneCpu():
            self._write("events/kdat_blk/enable", "1")
        self._write("tracing_on", "1")

    @staticmethod
    def _write(name, value):
        with open(os.path.join(TRACING, name), "w") as f:
            f.write(value)

    def text(self):
        with open(os.path.join(TRACING, "trace")) as f:
            return f.read()

    def stop(self):
        with guest.OneCpu():
            self._write("events/kdat_blk/enable", "0")
        self._write("trace", "")


def test_controller_states_refusals_and_io_errors_are_traced(ramdisk, blk, rdma):
    """An operator follows a controller without its log: a refused queue with the target's reason,
    every state change, and each request failed, in words (their formats carry numbers only,
    which perf and trace-cmd decode)."""
    target, initiator = blk
    target(ramdisk, max_queue_depth=8)
    load_initiator()
    BlkTrace.mount()
    for event in ("kdat_blk_state", "kdat_blk_refused", "kdat_blk_io_error"):
        with open(os.path.join(TRACING, "events", "kdat_blk", event, "format")) as f:
            fmt = f.read().split("print fmt:", 1)[1]
        assert not re.findall(r"\bKBLK_\w+", fmt), f"{event}'s format names an enum: {fmt}"
    trace = BlkTrace()
    try:
        with pytest.raises(OSError):
            blkctl.connect(target=rdma["KDAT_TEST_ADDR"], port=target.port, nr_queues=1,
                           queue_depth=16)
        name = initiator(nr_queues=1, queue_depth=4, ctrl_loss_tmo=0)
        initiator.expect_resets = True
        assert guest.unload_module("kdat_blkt").returncode == 0
        wait_for(lambda: blkctl.attr(name, "state") == "dead", 30, "the controller did not give up")
        fd = os.open(f"/dev/{name}", os.O_RDONLY | os.O_DIRECT)
        try:
            with mmap.mmap(-1, 4096) as buf, pytest.raises(OSError):
                os.preadv(fd, [buf], 8192)
        finally:
            os.close(fd)
        text = trace.text()
    finally:
        trace.stop()
    assert re.search(r"kdat_blk_refused: ctrl=kdatb0 qid=0 reason=DEPTH$", text, re.M), text
    states = re.findall(r"kdat_blk_state: ctrl=(kdatb0) (\w+) -> (\w+)$", text, re.M)
    assert [(a, b) for _, a, b in states] == [
        ("connecting", "resetting"), ("resetting", "dead"), ("dead", "deleting"),  # refused
        ("connecting", "live"), ("live", "resetting"), ("resetting", "dead")], text
    assert re.search(r"kdat_blk_io_error: ctrl=kdatb0 qid=0 tag=\d+ op=READ sector=16 bytes=4096 "
                     r"error=-5$", text, re.M), text


@pytest.mark.parametrize("rw,bs,iodepth,queue_depth,kib,fio_args,inline", [
    # one request at a time: 1024 writes, 1024 reads (64 on the debug kernel); never merged, so
    # every write is inline
    ("randwrite", "4k", 1, 4, verify_kib(4, 256), [], "all"),
    # blk-mq may merge neighbours
    ("randwrite", "4k", 32, 32, verify_kib(16, 1024), [], "some"),
    ("randwrite", "512", 1, 4, verify_kib(1, 64), [], "all"),  # a part of the inline page
    # every 4 KiB buffer straddles two pages: an inline send of the command and two segments
    ("randwrite", "4k", 4, 8, verify_kib(4, 256), ["--iomem_align=2048"], "some"),
    ("write", "128k", 4, 8, verify_kib(16, 2048), [], "none"),
    ("randwrite", "64k", 16, 16, verify_kib(16, 2048), [], "none"),
])
def test_fio_verifies_every_block(ramdisk, blk, rw, bs, iodepth, queue_depth, kib, fio_args,
                                  inline):
    """fio writes with a checksum in every block, then reads everything back and checks it.
    Writes of a page or less travel in the command's send (inline), larger ones are RDMA-read by
    the target from the initiator's registration: the target's counters say which path ran."""
    target, initiator = blk
    target(ramdisk)
    initiator(nr_queues=2, queue_depth=queue_depth)
    r = fio(f"--rw={rw}", f"--bs={bs}", f"--iodepth={iodepth}", f"--size={kib}k",
            "--verify=crc32c", "--do_verify=1", "--verify_fatal=1", *fio_args)
    job = json.loads(r.stdout[r.stdout.index("{"):])["jobs"][0]
    assert job["error"] == 0
    # every block written, then every block read back and checked
    assert job["write"]["io_kbytes"] == kib and job["read"]["io_kbytes"] == kib
    writes = int(blk_param("writes", "kdat_blkt"))
    inline_writes = int(blk_param("inline_writes", "kdat_blkt"))
    assert writes > 0 and int(blk_param("reads", "kdat_blkt")) > 0
    if inline == "all":
        assert inline_writes == writes, (inline_writes, writes)
    elif inline == "some":
        assert 0 < inline_writes <= writes, (inline_writes, writes)
    else:
        assert inline_writes == 0, (inline_writes, writes)
    assert int(blk_param("failures", "kdat_blkt")) == 0


def test_the_drivers_eps_are_in_the_shared_table_under_their_names(ramdisk, blk):
    target, initiator = blk
    target(ramdisk)
    initiator(nr_queues=2, queue_depth=4)
    ep_type = guest.UAPI.consts["KDAT_REC_EP"]
    with Kdat() as k:
        tables = {t.comm: t.id for t in k.table_list()[1]}
        assert {"kdat_blk", "kdat_blkt"} <= set(tables), tables
        counts = {}
        for comm in ("kdat_blk", "kdat_blkt"):
            k.table_attach(tables[comm])
            with k.view() as v:
                counts[comm] = sum(1 for _, r in v.live_records() if r.type == ep_type)
    assert counts == {"kdat_blk": 2, "kdat_blkt": 2}, "one EP per hardware queue on each side"


def test_flush_and_discard_reach_the_targets_device(blk, kdat_module):
    """null_blk with a volatile cache and discard: the initiator's queue says write back, an fsync
    becomes a flush at the target, and a discarded range reads back as zeros."""
    assert has_module("null_blk"), \
        "this kernel has no null_blk module (kunit/test-kernel.config builds one)"
    guest.run("modprobe", "null_blk", "nr_devices=1", "memory_backed=1", "cache_size=16",
              "discard=1", "gb=1", "bs=4096")
    try:
        target, initiator = blk
        target("/dev/nullb0")
        initiator(nr_queues=1, queue_depth=8)
        assert open("/sys/block/kdatb0/queue/write_cache").read().strip() == "write back"
        assert int(open("/sys/block/kdatb0/queue/discard_max_bytes").read()) > 0
        fio("--rw=write", "--bs=64k", "--size=4M", "--fsync=1")
        assert int(blk_param("flushes", "kdat_blkt")) > 0, "no flush reached the target"
        guest.run("blkdiscard", "-f", "-o", "0", "-l", str(1 << 20), DEV)
        assert int(blk_param("discards", "kdat_blkt")) > 0
        with open(DEV, "rb", buffering=0) as f:
            assert f.read(1 << 20) == bytes(1 << 20), "the discarded range is not zeros"
            assert f.read(4096) != bytes(4096), "past the range, the written data is still there"
        assert guest.unload_module("kdat_blk").returncode == 0
        assert guest.unload_module("kdat_blkt").returncode == 0
    finally:
        for module in ("kdat_blk", "kdat_blkt"):
            if guest.module_loaded(module):
                guest.unload_module(module)
        guest.run("rmmod", "null_blk", check=False)


def test_the_target_unloaded_and_reloaded_mid_verify_loses_nothing(ramdisk, blk, kernel_log):
    """The target goes away under a verify run and comes back: the requests in flight are
    requeued, the initiator reconnects, and every block still verifies."""
    target, initiator = blk
    target(ramdisk)
    initiator.expect_resets = True
    initiator(nr_queues=2, queue_depth=8, reconnect_delay=1, ctrl_loss_tmo=60)
    run = subprocess.Popen(["fio", "--name=kdat", f"--filename={DEV}", "--direct=1",
                            "--ioengine=libaio", "--rw=randwrite", "--bs=16k", "--iodepth=8",
                            f"--size={verify_kib(32, 8192)}k", "--verify=crc32c", "--do_verify=1",
                            "--verify_fatal=1"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: int(blk_param("writes", "kdat_blkt")) > 200, 120, "no writes arrived")
        before_unload = len(kernel_log.new_lines())
        assert guest.unload_module("kdat_blkt").returncode == 0
        wait_for(lambda: blk_param("state") == "connecting", 30, "the initiator saw no loss")
        time.sleep(2)
        target(ramdisk)
        out, _ = run.communicate(timeout=600)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, out[-3000:]
    assert blk_param("state") == "live"

    def resumes_in(lines):
        found = (re.search(r"kdat_blk: kdatb0: connected again after (\d+) ms", line)
                 for line in lines)
        return [int(m.group(1)) for m in found if m]

    lines = kernel_log.new_lines()
    earlier, resumes = resumes_in(lines[:before_unload]), resumes_in(lines[before_unload:])
    # the first reconnect after the unload is the target's restart; last_resume_ms the latest's
    assert int(blk_param("reconnects")) == len(earlier) + len(resumes) and resumes, (earlier, resumes)
    assert resumes[0] > 2000, f"the target was away for 2 s at least: {resumes}"
    assert int(blk_param("last_resume_ms")) == resumes[-1]
    # every loss but the restart's is rxe's
    assert_losses_are_rxes(lines, len(earlier) + len(resumes) - 1)
    print(f"kdat_blk: target restart to I/O resuming: {resumes[0]} ms")


@pytest.fixture
def removable_rxe(rdma):
    yield rdma["KDAT_TEST_IBDEV"]
    guest.run("rdma", "link", "delete", rdma["KDAT_TEST_IBDEV"], check=False)
    guest.rdma_up()


def test_rdma_device_removed_under_io_fails_io_then_everything_unloads(removable_rxe, ramdisk,
                                                                       blk):
    """rxe goes away with requests in flight: with ctrl_loss_tmo -1 the initiator keeps trying;
    ctrl_loss_tmo written while it does (3 s) applies to the outage in progress, and the I/O
    fails (fio sees errors, nothing hangs); both modules unload.  A value below -1 is refused
    at run time too, and changes nothing."""
    target, initiator = blk
    target(ramdisk)
    initiator.expect_resets = True
    initiator(nr_queues=2, queue_depth=8, ctrl_loss_tmo=-1)
    run = subprocess.Popen(["fio", "--name=kdat", f"--filename={DEV}", "--direct=1",
                            "--ioengine=libaio", "--rw=randrw", "--bs=16k", "--iodepth=8",
                            "--size=32M", "--time_based", "--runtime=120"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: int(blk_param("writes", "kdat_blkt")) > 100, 120, "no I/O arrived")
        guest.run("rdma", "link", "delete", removable_rxe)
        wait_for(lambda: blk_param("state") == "connecting", 60, "the initiator saw no loss")
        time.sleep(4)
        assert blk_param("state") == "connecting", "ctrl_loss_tmo -1 gave up"
        with pytest.raises(OSError):
            blkctl.set_attr("kdatb0", "ctrl_loss_tmo", -2)
        assert blk_param("ctrl_loss_tmo") == "-1"
        blkctl.set_attr("kdatb0", "ctrl_loss_tmo", 3)
        wait_for(lambda: blk_param("state") == "dead", 60, "I/O did not fail after 3 s")
        out, _ = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode != 0, "fio saw no error"
    with open(DEV, "rb", buffering=0) as f:
        with pytest.raises(OSError):
            os.pread(f.fileno(), 4096, 0)
    assert guest.unload_module("kdat_blk").returncode == 0
    assert guest.unload_module("kdat_blkt").returncode == 0


# ---- a peer that is not kdat_blk ----------------------------------------------------------------

def kblk_connect(qid, nr_queues, depth=8, ctrl_id=1):
    """struct kblk_connect as hex (kmod/blk/kdat_blk_proto.h): version 2, a made-up host id."""
    return struct.pack("<IHHHHIQ16s", KBLK_MAGIC, 2, qid, depth, nr_queues, 0, ctrl_id,
                       bytes(range(16))).hex()


def kblk_reject(reason):
    return struct.pack("<II", KBLK_MAGIC, reason).hex()


class RawQueue:
    """One connection of plain_rdmacm_peer to the target with a connect of our making, held until
    close(); `first` is its first line ("established ...", "rejected ...")."""

    def __init__(self, rdma, port, connect, send=None):
        self.p = subprocess.Popen([PEER, "client", rdma["KDAT_TEST_ADDR"], str(port), connect,
                                   "hold", *([send] if send else [])],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.first = self.p.stdout.readline().strip()

    def line(self, timeout):
        """The next line it prints, or None within `timeout` s."""
        ready, _, _ = select.select([self.p.stdout], [], [], timeout)
        return self.p.stdout.readline().strip() if ready else None

    def close(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            try:
                self.p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


@pytest.fixture
def raw_queues(rdma):
    """RawQueue(port, connect, send) for the test; every one is closed after it."""
    made = []

    def make(port, connect, send=None):
        q = RawQueue(rdma, port, connect, send)
        made.append(q)
        return q
    yield make
    for q in made:
        q.close()


def target_queues():
    return int(blk_param("queues", "kdat_blkt"))


@pytest.mark.parametrize("qid,nr_queues", [(0, 0), (2, 2), (16, 16), (16, 17), (65535, 1)])
def test_a_target_refuses_a_queue_id_or_count_the_protocol_does_not_have(
        ramdisk, blk, raw_queues, kernel_log, rdma, qid, nr_queues):
    """nr_queues is 1-16 (KBLK_MAX_QUEUES) and a queue's id is below it: anything else is refused
    with KBLK_REJ_QUEUE before the target allocates anything."""
    target, _ = blk
    target(ramdisk)
    q = raw_queues(target.port, kblk_connect(qid, nr_queues))
    # (the CM pads a reject's private data to its full size)
    assert q.first.startswith("rejected ") and f"data={kblk_reject(KBLK_REJ_QUEUE)}" in q.first, \
        q.first
    assert target_queues() == 0
    assert any(f"refused queue {qid} from {rdma['KDAT_TEST_ADDR']}: of {nr_queues} queues" in line
               for line in kernel_log.new_lines())


def test_a_host_connecting_a_queue_again_ends_its_old_connection(ramdisk, blk, raw_queues, rdma,
                                                                  kernel_log):
    """A host holds one connection per queue id: the target may not have noticed that an
    initiator lost its connection, so a new connect of the same queue from the same host ends the
    old one instead of adding a second (which a peer could repeat until the target's memory is
    gone)."""
    target, _ = blk
    target(ramdisk)
    old = raw_queues(target.port, kblk_connect(0, 1))
    assert old.first.startswith("established "), old.first
    wait_for(lambda: target_queues() == 1, 10, "the target does not count the queue")
    new = raw_queues(target.port, kblk_connect(0, 1))
    assert new.first.startswith("established "), new.first
    assert old.line(10) == "disconnected by peer"
    assert any(f"queue 0 from {rdma['KDAT_TEST_ADDR']} connects again" in line
               for line in kernel_log.new_lines())
    wait_for(lambda: target_queues() == 1, 10, "the old queue was not freed")
    # another controller of the same host has a queue 0 of its own
    other = raw_queues(target.port, kblk_connect(0, 1, ctrl_id=2))
    assert other.first.startswith("established "), other.first
    wait_for(lambda: target_queues() == 2, 10, "the other controller's queue is not counted")
    assert new.line(2) is None, "the other controller's connect ended this one"
    other.close()
    new.close()
    wait_for(lambda: target_queues() == 0, 10, "the queue was not freed after its disconnect")


def test_a_target_holds_at_most_max_queues(ramdisk, blk, raw_queues, rdma, kernel_log):
    target, _ = blk
    target(ramdisk, max_queues=2)
    held = [raw_queues(target.port, kblk_connect(qid, 3)) for qid in (0, 1)]
    assert all(q.first.startswith("established ") for q in held), [q.first for q in held]
    third = raw_queues(target.port, kblk_connect(2, 3))
    assert f"data={kblk_reject(KBLK_REJ_RESOURCES)}" in third.first, third.first
    assert any("refused queue 2 from" in line and "2 queues connected, max_queues=2" in line
               for line in kernel_log.new_lines())
    held[0].close()
    wait_for(lambda: target_queues() == 1, 10, "the closed queue was not freed")
    again = raw_queues(target.port, kblk_connect(2, 3))
    assert again.first.startswith("established "), again.first


def test_a_message_shorter_than_a_command_ends_its_connection(ramdisk, blk, raw_queues, rdma,
                                                              kernel_log):
    """Sent at once after the connect, before the target's ESTABLISHED: there is no tag to answer,
    so the target ends the connection (as nvmet-rdma does for a capsule shorter than a command)
    instead of leaving the peer waiting for an answer; the target serves the next connection."""
    target, _ = blk
    target(ramdisk)
    q = raw_queues(target.port, kblk_connect(0, 1), send="01020304")
    assert q.first.startswith("established "), q.first
    assert q.line(10) == "sent len=4"
    assert q.line(10) == "disconnected by peer"
    assert any("a message of 4 bytes, shorter than a command: disconnecting" in line
               for line in kernel_log.new_lines())
    wait_for(lambda: target_queues() == 0, 10, "the queue was not freed")
    again = raw_queues(target.port, kblk_connect(0, 1))
    assert again.first.startswith("established "), again.first
