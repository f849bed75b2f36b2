"""Running DAPL's programs in the guest: the dat.conf the build writes (build/user/dapl/dat.conf:
`kdat` is libdaplkdat, `ofa-v2-<netdev>` DAPL's libdaplofa) and when a server process is ready."""
import os
import re

from . import REPO

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
