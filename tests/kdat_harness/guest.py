"""Guest-side helpers: the kdat module, Soft-RoCE, the kernel log and raw ioctls on /dev/kdat."""
import ctypes
import errno
import fcntl
import os
import re
import shlex
import subprocess

from . import REPO
from .uapi import Uapi

# The modules built for the kernel this guest runs: Debian's (kmod/) or the debug test kernel's.
KMOD_DIR = (os.path.join(REPO, "build", "debug", "kmod") if os.environ.get("KDAT_DEBUG_KERNEL") == "1"
            else os.path.join(REPO, "kmod"))
KMOD = os.path.join(KMOD_DIR, "kdat.ko")
DEV = "/dev/kdat"
UAPI = Uapi()

# What scripts/check-kernel-log looks for; the same patterns, read from the script itself.
_CHECK = os.path.join(REPO, "scripts", "check-kernel-log")
_REPORT_RE = re.compile(re.search(r"pattern='(.*)'", open(_CHECK).read()).group(1))


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


class KernelLog:
    """Remembers where the kernel log stood, to look only at what came after."""

    def __init__(self):
        self.start = len(self.read())

    @staticmethod
    def read():
        return run("dmesg").stdout.splitlines()

    def new_lines(self):
        return self.read()[self.start:]

    def reports(self):
        return [line for line in self.new_lines() if _REPORT_RE.search(line)]


class Device:
    """A raw open file of /dev/kdat with ioctl(name, struct) -> struct (raising OSError)."""

    def __init__(self, path=DEV):
        self.fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

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


__all__ = ["Device", "KernelLog", "UAPI", "errno", "in_guest", "load_module", "module_loaded",
           "rdma_up", "run", "unload_module"]
