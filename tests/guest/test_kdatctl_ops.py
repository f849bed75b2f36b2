"""kdatctl for an operator (#71): every record names its RDMA device and port, the filters by
address, port, qualifier and QP number, watch woken by the tables' change (KDAT_IOC_TABLE_WAIT),
and the device and module totals that outlive an IA (KDAT_IOC_DEV_COUNTERS)."""
import json
import os
import queue
import subprocess
import threading
import time

from kdat_harness import KDATCTL
from kdat_harness.dat import (client, connect_pair, host_addr, kd, kdat_files,  # noqa: F401
                              next_port, server, side)
from kdat_harness.timing import FLOOR_S, LOAD_FACTOR, SleepControl

T = 5_000_000
EXACT = ("connects", "requests", "accepts", "established", "non_peer_rejected",
         "rejected_no_listener")


def kdatctl(*argv):
    r = subprocess.run([KDATCTL, *argv], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (argv, r.returncode, r.stderr)
    return r.stdout


def objects(*filters):
    doc = json.loads(kdatctl("list", "-j", *filters))
    return {o["handle"]: o for t in doc["tables"] for o in t["objects"]}


def test_every_record_names_its_rdma_device_and_port_and_the_filters_find_it(client, server,
                                                                             rdma):
    p = connect_pair(client, server)
    mine = objects(f"--pid={os.getpid()}")
    assert len(mine) >= 8, mine   # two IAs, four EVDs, two EPs, a PSP
    assert {(o["rdma_device"], o["rdma_port"]) for o in mine.values()} == {
        (rdma["KDAT_TEST_IBDEV"], 1)}, mine
    cep = next(o for h, o in mine.items() if h == p.cep)
    assert cep["qp_num"] and cep["remote"].endswith(f":{p.port}")
    assert set(objects("--qpn", str(cep["qp_num"]))) == {p.cep}
    # the qualifier: the client EP's remote one, and the PSP's
    assert set(objects("-p", str(os.getpid()), "--conn-qual", str(p.port))) == {p.cep, p.psp}
    local_port = int(cep["local"].rsplit(":", 1)[1])
    assert set(objects("--port", str(local_port))) >= {p.cep}
    by_addr = objects("--pid", str(os.getpid()), "--addr", host_addr())
    assert {p.cep, p.sep, p.psp, client.ia, server.ia} <= set(by_addr)
    assert objects("--pid", str(os.getpid()), "--addr", "192.0.2.254") == {}
    assert set(objects("--pid", str(os.getpid()), "--rdma-dev", rdma["KDAT_TEST_IBDEV"],
                       "--rdma-port", "1")) == set(mine)
    assert objects("--pid", str(os.getpid()), "--rdma-port", "2") == {}
    text = kdatctl("show", str(client.k.table().header().id), hex(p.cep))
    assert f"rdma_port    {rdma['KDAT_TEST_IBDEV']}/1" in text, text
    bad = subprocess.run([KDATCTL, "list", "--rdma-dev", "nosuchdev"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 1 and "no RDMA device 'nosuchdev'" in bad.stderr, bad.stderr
    bad = subprocess.run([KDATCTL, "list", "--addr", "kdat0"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "not an IPv4 or IPv6 address" in bad.stderr, bad.stderr


def totals():
    doc = json.loads(kdatctl("-j", "totals"))
    return doc["module"], {d["device"]: d for d in doc["devices"]}


def test_device_and_module_totals_keep_what_closed_ias_counted(kdat_files, rdma):
    dev = rdma["KDAT_TEST_IBDEV"]
    module_before, devices_before = totals()
    assert dev in devices_before, devices_before
    c, s = side(kdat_files()), side(kdat_files())
    connect_pair(c, s)
    cep = c.ep()
    c.k.ep_connect(cep, host_addr(), next_port(), T)   # nobody listens
    c.k.expect_event(c.evd, "NON_PEER_REJECTED")
    c.k.ia_close(c.ia)
    s.k.ia_close(s.ia)
    assert f"ia 0x{c.ia:08x}" not in kdatctl("counters", "--pid", str(os.getpid()))
    module_after, devices_after = totals()
    want = {"connects": 2, "requests": 1, "accepts": 1, "established": 2,
            "non_peer_rejected": 1, "rejected_no_listener": 1}
    assert {k: module_after[k] - module_before[k] for k in EXACT} == want
    assert {k: devices_after[dev][k] - devices_before[dev][k] for k in EXACT} == want
    assert devices_after[dev]["number"] == devices_before[dev]["number"] >= 1
    text = kdatctl("totals").splitlines()
    assert text[0].startswith("module connects "), text
    assert any(line.startswith(f"device {dev} number ") for line in text), text


class Watch:
    """kdatctl watch --json on this process's tables, its lines read by a thread."""

    def __init__(self, *args):
        self.proc = subprocess.Popen([KDATCTL, "watch", "-j", "--pid", str(os.getpid()), *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put((time.monotonic(), json.loads(line)))

    def until(self, pred, timeout=30):
        end = time.monotonic() + timeout
        while True:
            at, line = self.lines.get(timeout=max(0.01, end - time.monotonic()))
            if pred(line):
                return at, line

    def cpu_s(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def wakeups(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            return next(int(line.split()[1]) for line in f
                        if line.startswith("voluntary_ctxt_switches"))

    def stop(self):
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, err


def test_watch_is_woken_by_a_change_and_sleeps_while_idle(client):
    w = Watch()
    try:
        w.until(lambda x: x.get("handle") == client.ia and x["change"] == "new")
        time.sleep(0.5)                      # its start-up work done
        cpu0, wake0 = w.cpu_s(), w.wakeups()
        time.sleep(3)
        idle_cpu, idle_wakeups = w.cpu_s() - cpu0, w.wakeups() - wake0
        # A 200 ms poll would wake 15 times here and read every table each time; the wait wakes
        # once a second (its slice, for signals) and reads nothing.
        assert idle_wakeups <= 6, f"an idle watch woke {idle_wakeups} times in 3 s"
        assert idle_cpu <= 0.02, f"an idle watch used {idle_cpu:.3f} s of CPU in 3 s"
        delays = []
        for _ in range(3):                   # up to three attempts, as the timing tests make
            ctl = SleepControl(0.2, count=2)
            made = time.monotonic()
            ep = client.ep()
            at, line = w.until(lambda x: x.get("handle") == ep and x["change"] == "new")
            delays.append(at - made)
            assert line["type"] == "EP" and line["to"] == "UNCONNECTED"
            assert line["rdma_port"] == 1 and line["rdma_device"]
            bound = FLOOR_S + LOAD_FACTOR * ctl.lateness()
            if delays[-1] <= bound:
                break
        print(f"watch: idle CPU {idle_cpu:.3f} s, {idle_wakeups} wake-ups in 3 s; change "
              f"reported after {', '.join(f'{d * 1000:.1f}' for d in delays)} ms (bound {bound * 1000:.1f} ms)")
        assert delays[-1] <= bound, (delays, bound)
        client.k.ep_free(ep)
        at, line = w.until(lambda x: x.get("handle") == ep and x["change"] == "freed")
        assert line["from"] == "UNCONNECTED"
    finally:
        rc, err = w.stop()
    assert rc == 0, err


def test_watch_duration_and_count_end_it(kdat_module):
    start = time.monotonic()
    subprocess.run([KDATCTL, "watch", "--duration", "1500"], check=True, timeout=30,
                   capture_output=True)
    took = time.monotonic() - start
    assert 1.5 <= took < 10, took
    subprocess.run([KDATCTL, "watch", "-c", "1"], check=True, timeout=30, capture_output=True)


# ---- the two commands under kdatctl, as the ABI has them ------------------------------------

def test_dev_counters_lists_the_module_then_each_device_and_refuses_an_unknown_number(kd, rdma):
    from kdat_harness.dat import DAT, dat_type
    module = kd.call("dev_counters", device=0)
    assert module.status == DAT["DAT_SUCCESS"] and module.name == b"" and module.next >= 1
    names, number = {}, module.next
    while number:
        r = kd.call("dev_counters", device=number)
        assert r.status == DAT["DAT_SUCCESS"] and (r.next == 0 or r.next > number), r.next
        names[r.name.decode()] = number
        number = r.next
    assert rdma["KDAT_TEST_IBDEV"] in names, names
    gone = kd.call("dev_counters", device=0xFFFF)
    assert dat_type(gone.status) == DAT["DAT_INVALID_PARAMETER"], hex(gone.status)
    assert dat_type(kd.call("dev_counters", device=0xFFFFFFFF).status) == \
        DAT["DAT_INVALID_PARAMETER"]


def test_table_wait_returns_the_count_at_once_times_out_and_wakes_on_a_change(kd, rdma):
    from kdat_harness.dat import DAT, dat_type
    now = kd.call("table_wait", changes=0, timeout_us=0)
    assert now.status == DAT["DAT_SUCCESS"] and now.changes >= 1
    start = time.monotonic()
    idle = kd.call("table_wait", changes=2**64 - 1, timeout_us=0)   # a count never seen: at once
    assert idle.status == DAT["DAT_SUCCESS"]
    still = kd.call("table_wait", changes=idle.changes, timeout_us=200_000)
    took = time.monotonic() - start
    if still.status == DAT["DAT_SUCCESS"]:      # something else in the guest wrote a record
        assert still.changes != idle.changes
    else:
        assert dat_type(still.status) == DAT["DAT_TIMEOUT_EXPIRED"], hex(still.status)
        assert still.changes == idle.changes and took >= 0.2, took
    seen = kd.call("table_wait", changes=0, timeout_us=0).changes
    woke = {}

    def waiter():
        woke["r"] = kd.call("table_wait", changes=seen, timeout_us=20_000_000)
        woke["at"] = time.monotonic()
    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.3)
    made = time.monotonic()
    ia = kd.ia_open(host_addr())
    t.join(timeout=30)
    kd.ia_close(ia)
    assert woke["r"].status == DAT["DAT_SUCCESS"] and woke["r"].changes > seen
    assert woke["at"] - made < 5, woke["at"] - made
