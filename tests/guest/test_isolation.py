"""Isolation (issue #8): objects belong to the file that made them (and to processes that inherit
it); nothing userspace can read from kdat looks like a kernel address; /dev/kdat's mode and the
udev rule decide who may open it."""
import errno
import grp
import os
import shutil
import struct
import subprocess
import tempfile

from kdat_harness import REPO, guest
from kdat_harness.dat import (Kdat, client, connect_pair, host_addr, kdat_files,  # noqa: F401
                              next_port, server, side)

NOBODY = 65534
# x86-64 kernel addresses (direct map, vmalloc, modules, text) all sit in the top half.
KERNEL_HALF = 0xffff800000000000


def _pointer_shaped(buf, what):
    """Every 8-byte window at 4-byte alignment of buf, as an address; the kernel-half ones."""
    raw = bytes(buf)
    bad = []
    for off in range(0, len(raw) - 7, 4):
        (v,) = struct.unpack_from("<Q", raw, off)
        if v >= KERNEL_HALF and v != 0xffffffffffffffff:
            bad.append((what, off, hex(v)))
    return bad


def test_an_inherited_file_reaches_the_parents_objects(kdat_module, rdma, kernel_log):
    """fork(): the child shares the open file, so the parent's handles work there."""
    with Kdat() as k:
        s = side(k)
        ep = s.ep()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                ok = k.ep_state(ep) == "UNCONNECTED" and k.ia_query(s.ia).device_name != ""
                os.write(w, b"1" if ok else b"0")
            finally:
                os._exit(0)
        os.close(w)
        got = os.read(r, 1)
        os.waitpid(pid, 0)
        os.close(r)
        assert got == b"1"
        assert k.ep_state(ep) == "UNCONNECTED"


def test_no_ioctl_output_table_or_ring_exposes_a_kernel_address(client, server):
    """A whole connection's worth of outputs: queries, events, CR, table records, ring entries."""
    # a ring with an entry in it: a connect to a port nobody listens on is refused
    revd = client.k.evd_create(client.ia, 8, Kdat.EVD_CONNECTION, ring=True)
    ring = client.k.evd_ring(revd)
    refused = client.k.ep_create(client.ia, revd)
    client.k.ep_connect(refused, host_addr(), next_port(), 5_000_000)
    assert [e.ep for e in ring.drain(1)] == [refused]
    p = connect_pair(client, server, client_pd=b"\0" * 8, accept_pd=b"\0" * 8)
    bad = []
    for k, s, eps in ((client.k, client, [p.cep]), (server.k, server, [p.sep])):
        bad += _pointer_shaped(k.call("ia_query", ia=s.ia), "ia_query")
        for ep in eps:
            bad += _pointer_shaped(k.call("ep_query", ep=ep), "ep_query")
        bad += _pointer_shaped(k.call("version"), "version")
        with k.table() as t:
            bad += _pointer_shaped(t.map.read(0, 4096), "table header")
            for slot, rec in t.all_records():
                bad += _pointer_shaped(rec, f"table slot {slot}")
    bad += _pointer_shaped(server.k.call("psp_query", psp=p.psp), "psp_query")
    bad += _pointer_shaped(server.k.call("cr_query", cr=p.crev.cr), "cr_query")
    bad += _pointer_shaped(p.crev.raw, "CR event")
    bad += _pointer_shaped(p.sev.raw, "ESTABLISHED event")
    bad += _pointer_shaped(ring.map.read(0, ring.map_size), "event ring")
    client.k.ep_disconnect(p.cep)
    ev = server.k.expect_event(server.evd, "DISCONNECTED")
    bad += _pointer_shaped(ev.raw, "DISCONNECTED event")
    _, tables = client.k.table_list()
    bad += _pointer_shaped(client.k.table_list_raw(len(tables))[1], "table_list")
    ring.close()
    assert bad == [], bad


def _open_as(uid, gid, groups):
    """errno of open('/dev/kdat') in a child with these credentials (0 = it opened)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.setgroups(groups)
            os.setgid(gid)
            os.setuid(uid)
            try:
                os.close(os.open(guest.DEV, os.O_RDWR))
            except OSError as e:
                code = e.errno
        except BaseException:   # noqa: B902 - report anything as a failure
            code = 255
        os.write(w, bytes([code]))
        os._exit(0)
    os.close(w)
    code = os.read(r, 1)[0]
    os.waitpid(pid, 0)
    os.close(r)
    return code


def _rule():
    """GROUP and MODE the udev rule gives /dev/kdat (scripts/99-kdat.rules)."""
    with open(os.path.join(REPO, "scripts", "99-kdat.rules")) as f:
        line = next(x for x in f if x.startswith("KERNEL==\"kdat\""))
    fields = dict(kv.split("=", 1) for kv in line.replace("==", "~").split(", ") if "=" in kv)
    return fields["GROUP"].strip('"\n'), int(fields["MODE"].strip('"\n'), 8)


def test_unprivileged_open_is_eacces_by_default_and_the_rule_grants_its_group(kdat_module, rdma,
                                                                             kernel_log):
    st = os.stat(guest.DEV)
    assert st.st_mode & 0o777 == 0o600 and st.st_uid == 0
    assert _open_as(NOBODY, NOBODY, []) == errno.EACCES
    group, mode = _rule()
    assert (group, mode) == ("rdma", 0o660)
    # What udev does with the rule (the guest runs no udevd): the group gets read/write.
    # The "rdma" group may not exist in this root file system, so a stand-in gid plays it.
    gid = 4242
    os.chown(guest.DEV, 0, gid)
    os.chmod(guest.DEV, mode)
    try:
        assert _open_as(NOBODY, NOBODY, [gid]) == 0
        assert _open_as(NOBODY, NOBODY, []) == errno.EACCES
        assert _open_as(NOBODY, gid + 1, [gid + 1]) == errno.EACCES
    finally:
        os.chown(guest.DEV, 0, 0)
        os.chmod(guest.DEV, 0o600)



def _as(uid, gid, groups, cmd, env):
    """cmd run with these credentials (and no capabilities): the CompletedProcess."""
    def drop():
        os.setgroups(groups)
        os.setgid(gid)
        os.setuid(uid)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, preexec_fn=drop,
                          timeout=300)


def test_the_rdma_group_connects_through_the_rule_and_others_are_told_why(kdat_module, rdma,
                                                                          kernel_log):
    """The group the udev rule names (which the packages and make install create, see
    tests/host/) is a real one: with the rule applied as udev applies it, a user in it runs a
    libkdat connection, and a user outside it is refused with EACCES and told what decides."""
    group, mode = _rule()
    gid = grp.getgrnam(group).gr_gid   # the guest's /etc/group is the host's
    rule = "/run/udev/rules.d/99-kdat.rules"
    where = tempfile.mkdtemp(dir="/tmp")   # the checkout may be where nobody may enter
    os.makedirs(os.path.dirname(rule), exist_ok=True)
    shutil.copy(os.path.join(REPO, "scripts", "99-kdat.rules"), rule)
    try:
        out = subprocess.run(["udevadm", "test", "--action=add", "/sys/class/misc/kdat"],
                             capture_output=True, text=True)
        st = os.stat(guest.DEV)
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (0, gid, mode), \
            (oct(st.st_mode), st.st_gid, out.stderr[-2000:])
        os.chmod(where, 0o755)
        for f in ("kdat_guest_tests", "kdatctl", "libkdat.so.0"):
            shutil.copy(os.path.join(REPO, "build", "user", f), where)
        env = {"LD_LIBRARY_PATH": where, "PATH": "/usr/bin:/bin", "KDAT_TEST_ADDR": host_addr(),
               "KDAT_TEST_NETDEV": rdma.get("KDAT_TEST_NETDEV", "kdat0")}

        member = _as(NOBODY, NOBODY, [gid], [os.path.join(where, "kdat_guest_tests"), "--gtest_color=no",
                     "--gtest_filter=Connect.AcceptWithPrivateDataBothWaysThenGracefulDisconnect"],
                     env)
        assert member.returncode == 0 and "[  PASSED  ] 1 test" in member.stdout, \
            member.stdout[-3000:] + member.stderr[-2000:]

        assert _open_as(NOBODY, NOBODY, []) == errno.EACCES
        other = _as(NOBODY, NOBODY, [], [os.path.join(where, "kdatctl"), "list"], env)
        assert other.returncode == 1, other
        assert "/dev/kdat" in other.stderr and "Permission denied" in other.stderr and \
            "group" in other.stderr and "udev rule" in other.stderr, other.stderr
    finally:
        shutil.rmtree(where)
        os.unlink(rule)
        os.chown(guest.DEV, 0, 0)
        os.chmod(guest.DEV, 0o600)
