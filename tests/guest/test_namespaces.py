"""/dev/kdat in containers: a file acts in its opener's network namespace, and the table list
shows what the caller's PID and user namespaces can see, numbered as they number it.

Each case forks a child that enters new namespaces (unshare(2)) and reports back over a pipe."""
import ctypes
import json
import os



from kdat_harness.dat import DAT, Kdat, dat_type, host_addr, host_netdev, kd  # noqa: F401
from kdat_harness.guest import UAPI

C = UAPI.consts
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _unshare(flags):
    if _libc.unshare(flags) != 0:
        raise OSError(ctypes.get_errno(), f"unshare({flags:#x})")


def _in_child(fn, flags, pid_ns=False):
    """fn()'s JSON result, run in a child that did unshare(flags); with pid_ns, in the child's
    child, the first process of the new PID namespace."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            _unshare(flags | (CLONE_NEWPID if pid_ns else 0))
            if pid_ns:
                inner = os.fork()
                if inner != 0:
                    os.close(w)
                    _, status = os.waitpid(inner, 0)
                    os._exit(os.waitstatus_to_exitcode(status))
            out = {"result": fn()}
        except BaseException as e:   # reported to the test, which fails with it
            out = {"error": f"{type(e).__name__}: {e}"}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    out = json.loads(data)
    assert "error" not in out, out["error"]
    return out["result"]


def _ia_open_status(k, name):
    return k.status("ia_open", name=name)


# ---- network namespaces ---------------------------------------------------------------------

def test_a_file_opened_in_a_new_network_namespace_sees_only_that_namespace(kdat_module, kernel_log):
    """As librdmacm there ('Cannot assign requested address'): the host's netdev and address
    are not there, nor is anything but loopback."""
    def child():
        with Kdat() as k:
            return {n: _ia_open_status(k, n) for n in (host_netdev(), host_addr(), "lo", "127.0.0.1")}
    got = _in_child(child, CLONE_NEWNET)
    for name, status in got.items():
        assert dat_type(status) == DAT["DAT_PROVIDER_NOT_FOUND"], (name, hex(status))


def test_a_file_acts_in_its_openers_namespace_wherever_it_is_used(kd, rdma):
    """A file opened on the host and used by a process that moved into a new network namespace
    still opens the host's IA and listens on the host's address; a file that process opens
    itself does not."""
    port = 31000 + os.getpid() % 1000

    def child():
        ia = kd.ia_open(host_addr())
        evd = kd.evd_create(ia, 8, Kdat.EVD_CR)
        psp = kd.psp_create(ia, evd, port)
        q = kd.ia_query(ia)
        with Kdat() as mine:
            own = _ia_open_status(mine, host_addr())
        kd.psp_free(psp)
        kd.evd_free(evd)
        kd.ia_close(ia)
        return {"netdev": q.netdev_name, "own": own}
    got = _in_child(child, CLONE_NEWNET)
    assert got["netdev"] == host_netdev()
    assert dat_type(got["own"]) == DAT["DAT_PROVIDER_NOT_FOUND"], hex(got["own"])


def test_a_contained_process_connects_through_files_opened_on_the_host(kd, rdma):
    """Both files were opened in the initial namespace: the contained process listens through
    one and connects through the other, and the connection is a real one."""
    from kdat_harness.dat import connect_pair, side
    with Kdat() as other:
        def child():
            p = connect_pair(side(other), side(kd), client_pd=b"from-inside", accept_pd=b"ok")
            return [p.cr.private_data.decode(), p.cev.private_data.decode()]
        assert _in_child(child, CLONE_NEWNET) == ["from-inside", "ok"]


# ---- PID and user namespaces ------------------------------------------------------------------

def test_the_table_list_in_a_new_pid_namespace_shows_only_what_it_can_see(kd, rdma):
    with kd.table() as t:
        host_table = t.header().id

    def child():
        with Kdat() as k:
            n, tables = k.table_list()
            with k.table() as t:
                hdr = t.header()
            attach = k.status("table_attach", id=host_table)
            return {"pid": os.getpid(), "tables": [(x.id, x.pid) for x in tables],
                    "own": [hdr.id, hdr.pid], "attach": attach}
    got = _in_child(child, 0, pid_ns=True)
    assert got["pid"] == 1
    own_id, own_pid = got["own"]
    assert own_pid == 1, "the header numbers the opener as its own namespace does"
    assert got["tables"] == [[own_id, 1]], "only the caller's own table is there for it"
    # the host's table is not found at all (not PRIVILEGES_VIOLATION: that would tell it exists)
    assert dat_type(got["attach"]) == DAT["DAT_INVALID_PARAMETER"], hex(got["attach"])


def test_the_host_lists_a_contained_processs_table_under_its_host_pid(kd, rdma):
    r, w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.close(go_w)
        try:
            _unshare(CLONE_NEWPID)
            inner = os.fork()
            if inner == 0:
                with Kdat() as k:
                    with k.table() as t:
                        os.write(w, json.dumps([t.header().id, os.getpid()]).encode())
                    os.read(go_r, 1)       # keep the file open until the host has looked
                os._exit(0)
            os.waitpid(inner, 0)
        finally:
            os._exit(0)
    os.close(w)
    os.close(go_r)
    table_id, inner_pid = json.loads(os.read(r, 4096))
    try:
        _, tables = kd.table_list()
        mine = [t for t in tables if t.id == table_id]
        assert inner_pid == 1 and len(mine) == 1
        assert mine[0].pid not in (0, 1) and mine[0].pid != os.getpid(), mine[0].pid
        assert os.path.exists(f"/proc/{mine[0].pid}"), "the listed pid is the host's number"
    finally:
        os.write(go_w, b"x")
        os.close(go_w)
        os.close(r)
        os.waitpid(pid, 0)


def test_uids_are_shown_as_the_callers_user_namespace_maps_them(kd, rdma):
    def child():
        _unshare(CLONE_NEWUSER)
        with open("/proc/self/uid_map", "w") as f:
            f.write("1000 0 1\n")          # inside 1000 is the host's root
        with Kdat() as k:
            _, tables = k.table_list()
            with k.table() as t:
                hdr = t.header()
            own = [x for x in tables if x.id == hdr.id]
            return {"euid": os.geteuid(), "listed": own[0].uid if own else None, "header": hdr.uid}
    got = _in_child(child, 0)
    assert got["euid"] == 1000
    assert got["listed"] == 1000 and got["header"] == 1000
