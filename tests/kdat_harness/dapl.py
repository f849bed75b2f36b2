"""Running DAPL's programs in the guest: the dat.conf the build writes (build/user/dapl/dat.conf:
`kdat` is libdaplkdat, `ofa-v2-<netdev>` DAPL's libdaplofa) and when a server process is ready."""
import collections
import json
import os
import re
import shutil
import subprocess

from . import KDATCTL, REPO

DAPL_DIR = os.path.join(REPO, "build", "user", "dapl")
DAT_CONF = os.path.join(DAPL_DIR, "dat.conf")


def conf_entries():
    """{name: (library, ia_params)} of the generated dat.conf (FileNotFoundError before 'make')."""
    entries = {}
    with open(DAT_CONF) as f:
        for line in f:
            m = re.match(r'(\S+)\s+u2\.0\s+\S+\s+\S+\s+(\S+)\s+dapl\.2\.0\s+"([^"]*)"', line)
            if m:
                entries[m.group(1)] = (m.group(2), m.group(3))
    return entries


def ofa_name():
    names = [n for n, (lib, _) in conf_entries().items() if lib.startswith("libdaplofa")]
    assert names, f"no libdaplofa entry in {DAT_CONF}"
    return names[0]


def _listening_inodes():
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] == "0A":  # TCP_LISTEN
                    inodes.add(fields[9])
    return inodes


def listens(pid):
    """Does process `pid` have a listening TCP socket (the dapl tests' info exchange)?"""
    inodes = _listening_inodes()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return False
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            return True
    return False


def _kdat_objects_summary(pid, most=20):
    """What kdat's tables hold for `pid`: a count of its objects by type and state, and the
    objects whose state is not the most common of their type (the ones a hang is about)."""
    r = subprocess.run([KDATCTL, "list", "--json", "--pid", str(pid)], capture_output=True,
                       text=True, timeout=30)
    if r.returncode != 0:
        return [f"kdatctl list: rc {r.returncode}: {r.stderr.strip()}"]
    objects = [o for t in json.loads(r.stdout)["tables"] for o in t["objects"]]
    counts = collections.Counter((o["type"], o["state"]) for o in objects)
    lines = ["objects: " + ", ".join(f"{n} {ty} {st}" for (ty, st), n in sorted(counts.items()))]
    usual = {}
    for (ty, st), n in counts.most_common():
        usual.setdefault(ty, st)
    # the odd ones, and every EVD and lone EP: their event counts tell an event the kernel never
    # posted from one the process never took
    odd = [o for o in objects if o["state"] != usual[o["type"]] or o["type"] == "EVD"
           or (o["type"] == "EP" and counts[(o["type"], o["state"])] == 1)]
    for o in odd[:most]:
        lines.append(f"  {o['type']} {o['handle_hex']} {o['state']} last_event {o['last_event']} "
                     f"events {o['events']} transitions {o['transitions']} "
                     f"flags {o['flags']} local {o['local']} remote {o['remote']}")
    if len(odd) > most:
        lines.append(f"  ... and {len(odd) - most} more")
    return lines


def hang_report(pids):
    """Where each process's threads wait (kernel stack, and gdb's user stacks) and what kdat's
    tables hold for it, for a test that is about to kill processes that hung."""
    lines = []
    for name, pid in pids.items():
        lines.append(f"--- {name} (pid {pid})")
        if not os.path.isdir(f"/proc/{pid}"):
            lines.append("(gone)")
            continue
        try:
            lines += _kdat_objects_summary(pid)
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            lines.append(f"kdatctl list: {e}")
        for task in sorted(os.listdir(f"/proc/{pid}/task")):
            try:
                with open(f"/proc/{pid}/task/{task}/stack") as f:
                    lines.append(f"task {task}:\n{f.read()}")
            except OSError as e:
                lines.append(f"task {task}: {e}")
        if not shutil.which("gdb"):
            lines.append("(no gdb: user stacks left out; 'make deps' installs it)")
            continue
        try:
            g = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
                               capture_output=True, text=True, timeout=120)
            lines += [x for x in g.stdout.splitlines() if x.startswith(("#", "Thread"))]
        except subprocess.TimeoutExpired:
            lines.append("(gdb took over 120 s)")
    return "\n".join(lines)


# `dapltest -T Q` races on rxe (and siw) whatever the provider: its client leaves with an abrupt
# disconnect as soon as the server's reply (Server_Info) has arrived, and rxe's responder posts
# that receive's completion before it sends the ACK, which it drops once the QP is in error
# (rxe_resp.c: COMPLETE before ACKNOWLEDGE; rxe_net.c drops a packet of a QP not READY).  The
# server's send of the reply then flushes at the disconnect and it prints this line; dapltest
# itself ignores that send's result ((void)send_control_data in dapl_server.c).
QUIT_REPLY_FLUSHED = "Test Error: Server_Info_Send-reaping DTO problem"


def without_quit_reply_race(quit_part):
    """A dapltest server's output from the moment `dapltest -T Q` was started, without the one
    line the quit's own race prints (QUIT_REPLY_FLUSHED): everything else in it still counts."""
    return "\n".join(line for line in quit_part.splitlines()
                     if QUIT_REPLY_FLUSHED not in line)
