"""Other owners' tables (include/kdat/uapi/kdat.h, KDAT_IOC_TABLE_LIST, KDAT_IOC_TABLE_ATTACH and the
KDAT_MMAP_VIEW mapping): what kdatctl shows of other processes and of kernel consumers, and who may
see what."""
import ctypes
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

import pytest

from kdat_harness import KDATCTL, REPO, guest
from kdat_harness.dat import (DAT, STATE_VALUE, Kdat, connect_pair, host_addr, is_success, kd,  # noqa: F401
                              kdat_files, next_port, side, status_name)
from kdat_harness.guest import UAPI, errno
from kdat_harness.shared import MAP_SHARED, PAGE, PROT_READ, Mapping

C = UAPI.consts
INFO = UAPI.structs["kdat_table_info"]
NOBODY = 65534
ECHO_KO = guest.ECHO_KO


def is_type(status, name):
    return status & DAT["DAT_TYPE_MASK"] == DAT[name]


def table_id(k):
    with k.table(PAGE) as t:
        return t.header().id


def comm():
    with open("/proc/self/comm") as f:
        return f.read().strip()[:15]


def listed(k):
    count, tables = k.table_list()
    assert count == len(tables)
    return {t.id: t for t in tables}


# A child process with its own /dev/kdat file: an IA and an EVD at once, then one command a line.
_OWNER = r"""
import json, os, sys
sys.path.insert(0, %r)
from kdat_harness import dat
k = dat.Kdat()
ia = k.ia_open(dat.host_addr())
evd = k.evd_create(ia, 4, k.EVD_CONNECTION)
with k.table() as t:
    tid = t.header().id
print(json.dumps({"pid": os.getpid(), "id": tid, "ia": ia, "evd": evd}), flush=True)
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "ep":
        print(json.dumps(k.ep_create(ia, evd)), flush=True)
    elif cmd[0] == "ep_free":
        k.ep_free(int(cmd[1]))
        print(json.dumps(0), flush=True)
    elif cmd[0] == "close":
        k.close()
        print(json.dumps(0), flush=True)
""" % os.path.join(REPO, "tests")


class Owner:
    def __init__(self):
        self.p = subprocess.Popen([sys.executable, "-c", _OWNER], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, bufsize=1)
        hello = self._read()
        self.pid, self.id, self.ia, self.evd = (hello[x] for x in ("pid", "id", "ia", "evd"))

    def _read(self):
        line = self.p.stdout.readline()
        assert line, f"owner process died (rc {self.p.poll()})"
        return json.loads(line)

    def cmd(self, *words):
        self.p.stdin.write(" ".join(str(w) for w in words) + "\n")
        return self._read()

    def stop(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(10)


@pytest.fixture
def owner(kdat_module, kernel_log, rdma):
    o = Owner()
    yield o
    o.stop()


@pytest.fixture
def echo(kdat_module, kernel_log, rdma):
    """kdat_echo, the sample kernel consumer, listening on a fresh port; unloaded afterwards."""
    port = next_port()
    guest.run("insmod", ECHO_KO, f"listen_port={port}")
    yield port
    if guest.module_loaded("kdat_echo"):
        r = guest.unload_module("kdat_echo")
        assert r.returncode == 0, r.stderr


def in_child_as_nobody(fn, before=None):
    """Fork; in the child run before() as root, drop to uid/gid 65534 (no capabilities), run
    fn(state) and send back its JSON-able result."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(rfd)
            state = before() if before else None
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out = {"ok": fn(state)}
        except BaseException as e:   # noqa: B902 - everything goes back to the parent
            out = {"exc": repr(e)}
            code = 1
        os.write(wfd, json.dumps(out).encode())
        os._exit(code)
    os.close(wfd)
    data = b""
    while True:
        chunk = os.read(rfd, 65536)
        if not chunk:
            break
        data += chunk
    os.close(rfd)
    os.waitpid(pid, 0)
    res = json.loads(data)
    assert "ok" in res, res
    return res["ok"]


# ---- KDAT_IOC_TABLE_LIST -------------------------------------------------------------------------

def test_list_shows_our_own_table(kd, rdma):
    ia = kd.ia_open(host_addr())
    kd.evd_create(ia, 4, Kdat.EVD_CONNECTION)
    tables = listed(kd)
    mine = tables[table_id(kd)]
    assert mine.pid == os.getpid()
    assert mine.uid == os.geteuid()
    assert mine.comm == comm()
    assert mine.flags == 0
    assert mine.live == 2
    assert len(set(tables)) == len(tables)


def test_list_shows_another_process_table(kd, owner):
    tables = listed(kd)
    assert owner.id in tables, "the other process's table is not listed"
    o = tables[owner.id]
    assert o.pid == owner.pid and o.uid == 0
    assert o.comm == comm(), "the child runs the same python executable"
    assert o.pid != os.getpid()
    assert o.live == 2
    assert table_id(kd) in tables and table_id(kd) != owner.id


def test_list_count_is_the_total_when_capacity_is_smaller(kdat_files, kd):
    for _ in range(3):
        kdat_files()
    r, arr = kd.table_list_raw(64)
    assert is_success(r.status)
    total = r.count
    assert total >= 4
    # room for one: count is still the total, exactly one entry written
    sentinel = bytes([0xA5]) * ctypes.sizeof(INFO)
    arr = (INFO * 4)()
    for i in range(4):
        ctypes.memmove(ctypes.addressof(arr[i]), sentinel, len(sentinel))
    r, arr = kd.table_list_raw(1, arr)
    assert is_success(r.status), status_name(r.status)
    assert r.count == total
    assert bytes(arr[0]) != sentinel
    assert all(bytes(arr[i]) == sentinel for i in (1, 2, 3)), "wrote past capacity"
    # no room at all: just the count
    r = kd.call("table_list", capacity=0, tables=0)
    assert is_success(r.status) and r.count == total


def test_list_ignores_a_stale_count_in_the_request(kd):
    """count is an output: a request struct reused with the last answer in it still works (the
    header fails an ioctl only for a wrong size or a non-zero reserved field)."""
    total = kd.call("table_list", capacity=0, tables=0).count
    assert total >= 1
    r = kd.call("table_list", capacity=0, tables=0, count=total)
    assert is_success(r.status) and r.count == total


def test_list_with_a_hostile_capacity_or_pointer_fails_cleanly(kd):
    """A capacity far beyond what the buffer (or memory) holds, a pointer to nothing: an errno or a
    DAT error, and a clean kernel log (the kernel_log fixture)."""
    n = listed(kd)
    assert len(n) < 256
    arr = (INFO * 256)()
    for cap in (0xFFFFFFFF, 0x80000000, 0x10000000):
        try:
            r = kd.call("table_list", capacity=cap, tables=ctypes.addressof(arr))
        except OSError as e:
            assert e.errno in (errno.EFAULT, errno.EINVAL, errno.ENOMEM), e
            continue
        if is_success(r.status):
            assert r.count == len(n)
    for ptr in (8, 0, 0xFFFF800000000000, 0xFFFFFFFFFFFFF000):
        try:
            r = kd.call("table_list", capacity=4, tables=ptr)
        except OSError as e:
            assert e.errno == errno.EFAULT, e
            continue
        assert not is_success(r.status), f"a write to {ptr:#x} succeeded"
    assert table_id(kd) in listed(kd)


# ---- KDAT_IOC_TABLE_ATTACH and the view ----------------------------------------------------------

def test_attach_and_view_show_another_files_records_live(kdat_files, rdma):
    a, b = kdat_files(), kdat_files()
    ia = a.ia_open(host_addr())
    evd = a.evd_create(ia, 4, Kdat.EVD_CONNECTION)
    b.table_attach(table_id(a))
    with b.view() as v, b.table() as own:
        h = v.header()
        assert h.id == table_id(a) and h.pid == os.getpid() and h.flags == 0
        assert own.header().id != h.id, "the view is not the file's own table"
        assert {r.handle for _, r in v.live_records()} == {ia, evd}
        assert v.record(evd).type == C["KDAT_REC_EVD"] and v.record(evd).owner == ia
        ep = a.ep_create(ia, evd)     # live: no remapping, no new attach
        r = v.record(ep)
        assert r.type == C["KDAT_REC_EP"] and r.link == evd
        a.ep_free(ep)
        assert v.find(ep) is None
        assert v.header().live == 2
        a.close()
        h = v.header()
        assert h.flags & C["KDAT_TABLE_CLOSED"], "the view does not say its owner is gone"


def test_view_of_another_process_and_its_close(kd, owner):
    kd.table_attach(owner.id)
    with kd.view() as v:
        h = v.header()
        assert h.id == owner.id and h.pid == owner.pid and not h.flags & C["KDAT_TABLE_CLOSED"]
        assert v.record(owner.ia).type == C["KDAT_REC_IA"]
        assert v.record(owner.evd).owner == owner.ia
        ep = owner.cmd("ep")
        assert v.record(ep).state == STATE_VALUE["UNCONNECTED"]
        owner.cmd("close")
        assert v.header().flags & C["KDAT_TABLE_CLOSED"]
        assert v.header().magic == C["KDAT_TABLE_MAGIC"]
    owner.stop()


def test_attach_unknown_id_is_invalid_parameter(kd):
    ids = set(listed(kd))
    for bad in (max(ids) + 1000, 0xDEADBEEFDEADBEEF, 0xFFFFFFFFFFFFFFFF):
        st = kd.status("table_attach", id=bad)
        assert is_type(st, "DAT_INVALID_PARAMETER"), (hex(bad), status_name(st))
    err, m = Mapping.try_map(kd.fd, PAGE, PROT_READ, MAP_SHARED, C["KDAT_MMAP_VIEW"])
    if m:
        m.close()
    assert err == errno.ENXIO, "a failed attach selected a view"


def test_attach_replaces_the_view(kdat_files, rdma):
    a, b, c = kdat_files(), kdat_files(), kdat_files()
    a.ia_open(host_addr())
    c.table_attach(table_id(a))
    with c.view(PAGE) as v:
        assert v.header().id == table_id(a)
    c.table_attach(table_id(b))
    with c.view(PAGE) as v:
        assert v.header().id == table_id(b)


def test_kernel_consumer_table_is_listed_and_viewable(kd, echo):
    port = echo
    kernel = [t for t in listed(kd).values() if t.flags & C["KDAT_TABLE_KERNEL"]]
    assert kernel, "kdat_echo's table is not listed"
    t = [x for x in kernel if x.comm == "kdat_echo"]
    assert t, [x.comm for x in kernel]
    t = t[-1]
    assert t.pid == 0 and t.uid == 0
    kd.table_attach(t.id)
    with kd.view() as v:
        h = v.header()
        assert h.flags & C["KDAT_TABLE_KERNEL"] and h.pid == 0 and h.comm == b"kdat_echo"
        recs = [r for _, r in v.live_records()]
        ias = [r for r in recs if r.type == C["KDAT_REC_IA"]]
        psps = [r for r in recs if r.type == C["KDAT_REC_PSP"]]
        assert len(ias) == 1 and ias[0].state == C["KDAT_IA_UP"]
        assert [p.conn_qual for p in psps] == [port]
        assert psps[0].state == C["KDAT_SP_LISTENING"] and psps[0].owner == ias[0].handle
        assert guest.unload_module("kdat_echo").returncode == 0
        h = v.header()
        assert h.flags & C["KDAT_TABLE_CLOSED"], "the kernel consumer is gone, its table not"
    assert t.id not in listed(kd)


# ---- privileges ----------------------------------------------------------------------------------

def test_unprivileged_caller_may_not_attach_root_tables(kd, rdma):
    root_id = table_id(kd)

    def before():
        k = Kdat()                   # opened as root: its table's uid is 0
        return {"k": k, "own": table_id(k)}

    def as_nobody(state):
        k = state["k"]
        out = {"root": k.status("table_attach", id=root_id),
               "own_root_opened": k.status("table_attach", id=state["own"]),
               "bogus": k.status("table_attach", id=0xDEADBEEFDEADBEEF),
               "euid": os.geteuid()}
        count, tables = k.table_list()
        out["listed_uids"] = sorted({t.uid for t in tables})
        return out

    out = in_child_as_nobody(as_nobody, before)
    assert out["euid"] == NOBODY
    assert is_type(out["root"], "DAT_PRIVILEGES_VIOLATION"), status_name(out["root"])
    assert is_type(out["own_root_opened"], "DAT_PRIVILEGES_VIOLATION"), \
        "the table's owner is the euid that opened it (root), not the holder of the fd"
    assert is_type(out["bogus"], "DAT_INVALID_PARAMETER")
    assert 0 not in out["listed_uids"], "root's tables are listed to nobody"


def test_unprivileged_caller_may_not_read_root_or_kernel_ia_counters(kd, rdma, echo):
    """KDAT_IOC_IA_COUNTERS of another table follows TABLE_ATTACH's rule: the owner's uid or
    CAP_SYS_ADMIN.  The refusal comes before the handle is looked at."""
    ia = kd.ia_open(host_addr())
    root_id = table_id(kd)
    kernel_ids = [t.id for t in listed(kd).values() if t.flags & C["KDAT_TABLE_KERNEL"]]
    assert kernel_ids

    def before():
        return {"k": Kdat()}

    def as_nobody(state):
        k = state["k"]
        return {"root": k.status("ia_counters", table=root_id, ia=ia),
                "kernel": [k.status("ia_counters", table=i, ia=1) for i in kernel_ids]}

    out = in_child_as_nobody(as_nobody, before)
    assert is_type(out["root"], "DAT_PRIVILEGES_VIOLATION"), status_name(out["root"])
    for st in out["kernel"]:
        assert is_type(st, "DAT_PRIVILEGES_VIOLATION"), status_name(st)
    with Kdat() as other:     # root, another file: allowed
        assert set(other.ia_counters(ia, table=root_id).values()) == {0}


def test_unprivileged_owner_sees_its_own_tables_only(kd, rdma, echo):
    root_id = table_id(kd)
    kernel_ids = [t.id for t in listed(kd).values() if t.flags & C["KDAT_TABLE_KERNEL"]]
    assert kernel_ids
    mode = os.stat(guest.DEV).st_mode
    os.chmod(guest.DEV, 0o666)      # so that nobody can open a file of its own
    try:
        def as_nobody(_):
            with Kdat() as k:
                own = table_id(k)
                with k.table(PAGE) as t:
                    uid = t.header().uid
                _, tables = k.table_list()
                out = {"uid": uid, "listed": [[x.id, x.uid, x.flags] for x in tables],
                       "own": k.status("table_attach", id=own), "own_id": own,
                       "root": k.status("table_attach", id=root_id),
                       "kernel": [k.status("table_attach", id=i) for i in kernel_ids]}
                k.table_attach(own)
                with k.view(PAGE) as v:
                    out["view_uid"] = v.header().uid
                return out
        out = in_child_as_nobody(as_nobody)
    finally:
        os.chmod(guest.DEV, stat.S_IMODE(mode))
    assert out["uid"] == NOBODY
    assert is_success(out["own"]) and out["view_uid"] == NOBODY
    assert is_type(out["root"], "DAT_PRIVILEGES_VIOLATION"), status_name(out["root"])
    for st in out["kernel"]:
        assert is_type(st, "DAT_PRIVILEGES_VIOLATION"), "kernel tables: CAP_SYS_ADMIN only"
    assert out["listed"], "its own table is not listed"
    assert all(uid == NOBODY and not flags & C["KDAT_TABLE_KERNEL"] for _, uid, flags in out["listed"])
    assert out["own_id"] in [i for i, _, _ in out["listed"]]


def test_root_may_attach_any_table(kd, owner, echo):
    assert table_id(kd) in listed(kd)
    for t in listed(kd).values():
        st = kd.status("table_attach", id=t.id)
        assert is_success(st), (t, status_name(st))
    # and the list of root holds them all: the other process's, the kernel consumer's; ours
    # was listed until it attached a view: an empty observer's table is not
    ids = listed(kd)
    assert owner.id in ids and table_id(kd) not in ids
    assert any(t.flags & C["KDAT_TABLE_KERNEL"] for t in ids.values())


# ---- observers (KDAT_TABLE_VIEWER) and kdatctl ------------------------------------------------


def kdatctl(*argv, check=True):
    r = subprocess.run([KDATCTL, *argv], capture_output=True, text=True, timeout=60)
    if check:
        assert r.returncode == 0, (argv, r.returncode, r.stderr)
    return r


def test_a_viewer_is_not_listed_until_it_holds_objects(kdat_files, rdma):
    a, b, c = kdat_files(), kdat_files(), kdat_files()
    a.ia_open(host_addr())
    before = listed(c)
    assert table_id(b) in before, "a plain file's empty table is listed"
    b.table_attach(table_id(a))
    with b.table(PAGE) as t:
        assert t.header().flags & C["KDAT_TABLE_VIEWER"]
    now = listed(c)
    assert table_id(b) not in now, "an observer's empty table is listed"
    assert table_id(a) in now and table_id(c) in now
    ia = b.ia_open(host_addr())       # an observer that makes objects is shown like any owner
    shown = listed(c)
    assert table_id(b) in shown and shown[table_id(b)].live == 1
    b.ia_close(ia)
    assert table_id(b) not in listed(c)


def test_two_kdatctl_watchers_never_list_each_other(owner):
    """Each kdatctl file attaches a view, so no kdatctl shows another's tables: two watchers
    that did would attach to each other's tables in a loop, without end."""
    watchers = [subprocess.Popen([KDATCTL, "watch", "--json", "--duration", "3000"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(2)]
    outs = [w.communicate(timeout=120) for w in watchers]
    for w, (out, err) in zip(watchers, outs):
        assert w.returncode == 0, err
        lines = [json.loads(x) for x in out.splitlines()]
        tables = {x["table"] for x in lines}
        assert owner.id in tables, "the watcher did not see the owner's table"
        assert not [x for x in lines if x.get("comm") == "kdatctl"], "a watcher saw kdatctl's table"
        assert len(tables) <= 3, f"the watcher's tables grew: {sorted(tables)}"
    listing = json.loads(kdatctl("list", "--json", "--all").stdout)
    assert not [t for t in listing["tables"] if t["comm"] == "kdatctl"], listing


def test_kdatctl_filters_and_show(owner):
    ep = owner.cmd("ep")

    def objects(*filters):
        out = json.loads(kdatctl("list", "--json", *filters).stdout)
        return {(t["id"], o["handle"]) for t in out["tables"] for o in t["objects"]}

    mine = {(owner.id, h) for h in (owner.ia, owner.evd, ep)}
    assert objects("--pid", str(owner.pid)) == mine
    assert objects("--table", str(owner.id), "--type", "ep") == {(owner.id, ep)}
    assert objects("--pid", str(owner.pid), "--state", "UNCONNECTED") == {(owner.id, ep)}
    assert objects("--table", str(owner.id), "--ia", hex(owner.ia)) == mine
    assert objects("--pid", str(owner.pid), "--type", "PSP") == set()

    text = kdatctl("show", str(owner.id), hex(ep)).stdout
    assert f"table        {owner.id} (pid {owner.pid} " in text
    assert "type         EP" in text and "state        UNCONNECTED (" in text
    assert f"owner        0x{owner.ia:08x}" in text and f"link         0x{owner.evd:08x}" in text
    one = json.loads(kdatctl("show", "--json", str(owner.id), str(ep)).stdout)
    assert one["table"] == owner.id and one["object"]["handle"] == ep
    assert one["object"]["state"] == "UNCONNECTED"

    gone = kdatctl("show", str(owner.id), "0x7fff0fff", check=False)
    assert gone.returncode == 1 and "has no object 0x7fff0fff" in gone.stderr, gone.stderr
    nowhere = kdatctl("show", str(0xFFFFFFFFFF), "1", check=False)
    assert nowhere.returncode == 1 and f"no table {0xFFFFFFFFFF}" in nowhere.stderr
    bad = kdatctl("list", "--type", "QP", check=False)
    assert bad.returncode == 2 and "one of IA, EVD, EP, PSP, RSP, CR" in bad.stderr


def test_kdatctl_says_what_to_do_when_it_cannot_open_the_device(tmp_path):
    missing = kdatctl("--device", str(tmp_path / "kdat"), "list", check=False)
    assert missing.returncode == 1 and "modprobe kdat" in missing.stderr, missing.stderr
    # As nobody, from a directory nobody may enter (the checkout may be under /root, 0700):
    # kdatctl and its libkdat copied there, and a node it may not open.
    where = tempfile.mkdtemp(dir="/tmp")
    try:
        os.chmod(where, 0o755)
        shutil.copy(KDATCTL, where)
        shutil.copy(os.path.join(REPO, "build", "user", "libkdat.so.0"), where)
        node = os.path.join(where, "node")
        open(node, "w").close()
        os.chmod(node, 0)

        def try_open(_):
            return subprocess.run([os.path.join(where, "kdatctl"), "--device", node, "list"],
                                  capture_output=True, text=True,
                                  env={"LD_LIBRARY_PATH": where}).stderr
        err = in_child_as_nobody(try_open)
    finally:
        shutil.rmtree(where)
    assert "Permission denied" in err and "udev rule" in err, err


def test_ep_records_carry_the_qp_number_that_rdma_res_shows_under_our_pid(kdat_files, rdma):
    """kdatctl's qp_num joins an EP to iproute2's view: rdma res show cm_id lists a /dev/kdat
    file's ids under the calling process's pid and comm (it once named every one "[kdat]") with
    the same QP number."""
    client, server = side(kdat_files()), side(kdat_files())
    pair = connect_pair(client, server)
    with client.k.table() as t:
        qpn = t.record(pair.cep).qp_num
    with server.k.table() as t:
        server_qpn = t.record(pair.sep).qp_num
    assert qpn and server_qpn and qpn != server_qpn
    out = subprocess.run(["rdma", "-j", "res", "show", "cm_id"], capture_output=True, text=True,
                         check=True).stdout
    ids = json.loads(out)
    ours = [i for i in ids if i.get("pid") == os.getpid()]
    assert ours, f"no cm_id of pid {os.getpid()}: {ids}"
    assert all(i.get("comm") == comm() for i in ours), ours
    by_qpn = {i.get("lqpn"): i for i in ours}
    assert qpn in by_qpn, (qpn, ours)
    # iproute2 prints an address with its port: "src-addr": "192.0.2.1:7471"
    assert by_qpn[qpn].get("dst-addr", "").endswith(f":{pair.port}"), by_qpn[qpn]
    assert server_qpn in by_qpn, "the accepted id is the listener's process's too"
    listener = [i for i in ours if i.get("state") == "LISTEN" and
                i.get("src-addr", "").endswith(f":{pair.port}")]
    assert listener, ours


def test_kdatctl_devices_names_the_rxe_port_its_netdev_and_address(rdma):
    out = json.loads(kdatctl("devices", "--json").stdout)
    ports = {(p["device"], p["port"]): p for p in out["ports"]}
    p = ports.get((rdma["KDAT_TEST_IBDEV"], 1))
    assert p, out
    assert p["state"] == "ACTIVE" and p["link_layer"] == "Ethernet"
    assert p["netdev"] == rdma["KDAT_TEST_NETDEV"]
    assert rdma["KDAT_TEST_ADDR"] in p["addresses"]
    text = kdatctl("devices").stdout
    assert re.search(rf"^{rdma['KDAT_TEST_IBDEV']}\s+1 ACTIVE\s+Ethernet\s+{rdma['KDAT_TEST_NETDEV']}"
                     rf"\s+.*{re.escape(rdma['KDAT_TEST_ADDR'])}", text, re.M), text
