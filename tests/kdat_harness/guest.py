"""Guest-side helpers: the kdat module, Soft-RoCE, the kernel log and raw ioctls on /dev/kdat."""
import ctypes
import errno
import fcntl
import os
import re
import shlex
import subprocess
import time
import weakref

from . import REPO
from . import known_defects
from .uapi import Uapi

# The modules built for the kernel this guest runs (scripts/vm-run says where).
KMOD_DIR = os.environ.get("KDAT_KMOD_DIR") or os.path.join(REPO, "kmod")
KMOD = os.path.join(KMOD_DIR, "kdat.ko")
# The sample kernel consumer (kmod/samples/), built against kdat.ko's exports.
ECHO_KO = os.path.join(KMOD_DIR, "samples", "kdat_echo.ko")
BLKIO_KO = os.path.join(KMOD_DIR, "samples", "kdat_blkio.ko")
DEV = "/dev/kdat"
UAPI = Uapi()

# What scripts/check-kernel-log looks for; the same patterns, read from the script itself.
_CHECK = os.path.join(REPO, "scripts", "check-kernel-log")
REPORT_RE = re.compile(re.search(r"pattern='(.*)'", open(_CHECK).read()).group(1))


def in_guest():
    return os.path.isdir("/run/kdat-results") and os.environ.get("KDAT_REPO") == REPO


def run(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def module_loaded(name="kdat"):
    return os.path.isdir(f"/sys/module/{name}")


def load_module(path=KMOD, *params):
    run("modprobe", "-a", "rdma_cm", "ib_core")
    run("insmod", path, *params)


def unload_module(name="kdat"):
    return run("rmmod", name, check=False)


def wait_for(cond, timeout_s, what):
    """Polls cond() every 0.2 s; fails with `what` if it is still false after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def unload_kdat_at_session_end(timeout=15):
    """rmmod kdat, retried for a while: a process a test killed may still be exiting (closing
    its /dev/kdat file).  Fails with who keeps kdat loaded if it stays."""
    deadline = time.monotonic() + timeout
    while True:
        r = unload_module()
        if r.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert r.returncode == 0, f"rmmod kdat failed: {r.stderr}\n{who_keeps_kdat_loaded()}"


def rdma_up(netns=0):
    """Run scripts/rdma-up and return the variables it exports."""
    args = [os.path.join(REPO, "scripts", "rdma-up")]
    if netns:
        args += ["--netns", str(netns)]
    out = run(*args).stdout
    env = {}
    for line in out.splitlines():
        for tok in shlex.split(line)[1:]:
            k, _, v = tok.partition("=")
            env[k] = v
    os.environ.update(env)
    return env


def _kmsg_records():
    """[(sequence number, message)] of the kernel log buffer, from /dev/kmsg."""
    records = []
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                data = os.read(fd, 16384)
            except BlockingIOError:
                break
            except BrokenPipeError:
                continue        # records overwritten while we read: go on with the next
            if not data:
                break
            head, _, text = data.decode(errors="replace").partition(";")
            records.append((int(head.split(",")[1]), text.split("\n", 1)[0]))
    finally:
        os.close(fd)
    return records


def rxe_runs_tasks_on_a_work_queue():
    """True for the rxe of 6.4 and later (6.12 here; 6.1 has tasklets), which runs its tasks on a
    work queue (rxe_alloc_wq).  Two differences of that rxe show in the tests:
    rxe_post_send schedules a user QP's send task instead of running it in the call, so
    ibv_post_send returns before the packet is sent; and rxe_do_local_ops no longer schedules
    the completer, so a fast registration stays in the send queue until the completer reaches
    it, and a retry (an RNR NAK, an ACK timeout) that rewinds the queue past it runs it again,
    finds the MR registered ("mr->lkey = ... not free") and puts the QP in error: the
    connection is lost."""
    with open("/proc/kallsyms") as f:
        return any(line.rstrip().endswith(" rxe_alloc_wq\t[rdma_rxe]") for line in f)


# what rxe says when it runs a fast registration a second time (rxe-replays-fast-reg)
RXE_FAST_REG_REPLAYED = re.compile(r"rxe_reg_fast_mr: +mr->lkey = 0x[0-9a-f]+ not free")


def show_rxe_retries():
    """Makes the work-queue rxe log its retries and its replayed fast registrations, which it
    prints only as dynamic debug (6.1's rxe warns of a replay unasked), so that a test can tell
    a connection rxe lost from one kdat lost.  The messages print only when a retry happens."""
    if not rxe_runs_tasks_on_a_work_queue():
        return
    control = "/sys/kernel/debug/dynamic_debug/control"
    if not os.path.exists(control):
        run("mount", "-t", "debugfs", "none", "/sys/kernel/debug")
    for words in ("not free", "nak timer fired", "retransmit timer fired"):
        with open(control, "w") as f:
            f.write(f'module rdma_rxe format "{words}" +p\n')


def rxe_fast_reg_replays(lines):
    """How many fast registrations rxe ran twice, by the kernel log's lines."""
    return sum(1 for line in lines if RXE_FAST_REG_REPLAYED.search(line))


class KernelLog:
    """Remembers where the kernel log stood, to look only at what came after.  By the records'
    sequence numbers (/dev/kmsg), not by counting lines: once the log buffer is full, old lines
    drop out as new ones come, and a line count stops growing (a test then saw none of its own
    messages)."""

    def __init__(self):
        records = _kmsg_records()
        self.start = records[-1][0] if records else -1
        # names of scripts/known-kernel-defects that reports() excuses (a test that provokes one)
        self.allow = []
        self.excused = []

    def new_lines(self):
        return [text for seq, text in _kmsg_records() if seq > self.start]

    def reports(self):
        return reports(self.new_lines(), self.allow, self.excused)


def reports(lines, allow=(), excused=None):
    """The report lines of `lines`, but for the known defects named in `allow` (each excused one
    is appended to `excused` as (name, its first line))."""
    kept, found = known_defects.excuse(lines, list(allow))
    if excused is not None:
        excused.extend(found)
    return [line for line in kept if REPORT_RE.search(line)]


# ---- what this process holds of kdat ----------------------------------------------------------
#
# Every /dev/kdat file, ring file and mapping the harness makes registers here, and each closes
# itself when it becomes garbage.  A test that fails half-way may leave its objects reachable
# (pytest keeps the traceback, and with it the test's locals): the guest conftest closes what a
# test left open and fails it, so a failure never keeps the module loaded for the tests after it.

_OPEN = weakref.WeakSet()


def track(obj):
    """Register obj (it has .close()) as holding a kdat file or mapping until it is closed."""
    _OPEN.add(obj)


def untrack(obj):
    _OPEN.discard(obj)


def close_all_open():
    """Close every registered object still open; returns their descriptions."""
    left = [(obj, repr(obj)) for obj in list(_OPEN)]
    for obj, _ in left:
        obj.close()
    return [name for _, name in left]


def _is_kdat_file(target):
    return target == DEV or target.startswith("anon_inode:[kdat-")


def holdings(pid="self"):
    """(fds, mappings) of a process that are kdat's: /dev/kdat files, ring and table files and
    their mappings. Other files whose names merely contain 'kdat' (/run/kdat-results, libkdat.so)
    are not. Empty lists for a process that is gone."""
    fds, maps = [], []
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if _is_kdat_file(target):
                fds.append((int(fd), target))
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and _is_kdat_file(parts[5].strip()):
                    maps.append(line.strip())
    except OSError:
        pass
    return fds, maps


def release_raw(fds, maps):
    """Close fds and unmap mappings (lines of /proc/self/maps) that no registered object owns."""
    for fd, _ in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    libc = ctypes.CDLL(None, use_errno=True)
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    for line in maps:
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        libc.munmap(lo, hi - lo)


def orphans():
    """kdat's pending orphans (/sys/class/misc/kdat/orphans): one line each."""
    try:
        with open("/sys/class/misc/kdat/orphans") as f:
            return f.read().splitlines()
    except OSError:
        return []


def refcnt():
    with open("/sys/module/kdat/refcnt") as f:
        return int(f.read())


def who_keeps_kdat_loaded():
    """Why rmmod would fail: the refcount and holders, every process with a kdat file or mapping,
    kernel consumers' tables and kdat's pending orphans."""
    lines = []
    try:
        lines.append(f"refcnt {refcnt()}")
    except OSError:
        return "kdat is not loaded"
    holders = "/sys/module/kdat/holders"
    if os.path.isdir(holders):
        lines.append(f"holders {sorted(os.listdir(holders))}")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        fds, maps = holdings(pid)
        if fds or maps:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                cmd = "?"
            lines.append(f"pid {pid} ({cmd}): files {[t for _, t in fds]}, "
                         f"mappings {[m.split(None, 5)[5] for m in maps]}")
    try:
        fd = os.open(DEV, os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        lines.append(f"cannot open {DEV} to list kernel consumers: {e}")
    else:
        try:
            from .dat import Kdat
            with Kdat(Device(fd=fd)) as k:
                for t in k.table_list()[1]:
                    if t.flags & UAPI.consts["KDAT_TABLE_KERNEL"]:
                        lines.append(f"kernel consumer {t.comm!r}: {t.live} live objects")
        except Exception as e:  # a diagnostic never hides the failure it explains
            lines.append(f"listing kernel consumers failed: {e!r}")
    lines += [f"orphan {o}" for o in orphans()] or ["no orphans"]
    return "\n".join(lines)


class Device:
    """A raw open file of /dev/kdat with ioctl(name, struct) -> struct (raising OSError)."""

    def __init__(self, path=DEV, fd=None):
        self.fd = os.open(path, os.O_RDWR | os.O_CLOEXEC) if fd is None else fd
        self._closer = weakref.finalize(self, os.close, self.fd)
        track(self)

    def __repr__(self):
        return f"Device(fd {self.fd})"

    def close(self):
        if self.fd >= 0:
            self._closer()
            self.fd = -1
            untrack(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def ioctl(self, name_or_number, arg=None):
        cmd = UAPI.ioctls[name_or_number] if isinstance(name_or_number, str) else name_or_number
        if arg is None:
            fcntl.ioctl(self.fd, cmd, 0)
            return None
        buf = ctypes.create_string_buffer(bytes(arg), ctypes.sizeof(arg))
        fcntl.ioctl(self.fd, cmd, buf, True)
        return type(arg).from_buffer_copy(buf.raw)

    def ioctl_errno(self, name_or_number, arg=None):
        """The errno an ioctl fails with, or 0."""
        try:
            self.ioctl(name_or_number, arg)
            return 0
        except OSError as e:
            return e.errno


__all__ = ["Device", "KernelLog", "UAPI", "close_all_open", "errno", "holdings", "in_guest",
           "load_module", "module_loaded", "orphans", "rdma_up", "refcnt", "release_raw", "run",
           "track", "unload_module", "untrack", "who_keeps_kdat_loaded"]


class OneCpu:
    """A context in which only CPU 0 is online (tcg-text-poke-int3).  Enabling or disabling a trace
    event patches kernel text (jump labels, through int3: text_poke_bp); in a TCG guest with a
    second vCPU running, that vCPU can still execute the int3 after the patch is over, and 6.12
    dies of "Oops: int3" in ttwu_do_activate (a generic event toggled in a loop kills a 6.12
    guest within seconds; with one CPU online, 2,000 toggles pass).  Tracing tests patch with the
    other CPUs offline and bring them back after."""

    def __init__(self):
        self.offlined = []

    def __enter__(self):
        base = "/sys/devices/system/cpu"
        for name in sorted(os.listdir(base)):
            path = os.path.join(base, name, "online")
            if re.fullmatch(r"cpu[1-9]\d*", name) and os.path.exists(path):
                with open(path) as f:
                    if f.read().strip() != "1":
                        continue
                with open(path, "w") as f:
                    f.write("0")
                self.offlined.append(path)
        return self

    def __exit__(self, *exc):
        for path in reversed(self.offlined):
            with open(path, "w") as f:
                f.write("1")
        self.offlined = []
