#!/usr/bin/python3
"""demo-connect: one real connection through kdat, printed step by step (run in the guest by
'make demo'). A server process listens on a PSP; the client connects with private data; the server
accepts with private data; the client disconnects. Every endpoint state change and event is shown.
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from kdat_harness.dat import Kdat, ipv4  # noqa: E402

PORT = 4791 + 1000
ADDR = os.environ.get("KDAT_TEST_ADDR", "192.0.2.1")
T0 = time.monotonic()


def say(who, text):
    print(f"[{time.monotonic() - T0:6.3f}s] {who:6} {text}", flush=True)


def show_state(k, who, ep, last={}):
    state = k.ep_state(ep)
    if last.get((who, ep)) != state:
        say(who, f"EP {ep} state -> {state}")
        last[(who, ep)] = state


def event(k, who, evd):
    ev = k.evd_wait(evd, 10_000_000)
    extra = f" private data {ev.private_data!r}" if ev.private_data else ""
    say(who, f"event {ev.name}{extra}")
    return ev


def server(ready_w):
    k = Kdat()
    ia = k.ia_open("kdat0")
    crevd = k.evd_create(ia, 8, k.EVD_CR)
    connevd = k.evd_create(ia, 8, k.EVD_CONNECTION)
    k.psp_create(ia, crevd, PORT)
    ep = k.ep_create(ia, connevd, max_rdma_read_in=4, max_rdma_read_out=4)
    say("server", f"listening on {ADDR} qualifier {PORT} (PSP); EP {ep} ready")
    show_state(k, "server", ep)
    os.write(ready_w, b"1")
    req = event(k, "server", crevd)
    cr = k.cr_query(req.cr)
    say("server", f"CR from {cr.remote_addr.ip} port qualifier {cr.remote_addr.port}, "
                  f"IRD/ORD offered {cr.remote_rdma_read_in}/{cr.remote_rdma_read_out}")
    k.cr_accept(req.cr, ep, private_data=b"welcome")
    say("server", "cr_accept with private data b'welcome'")
    show_state(k, "server", ep)
    event(k, "server", connevd)
    show_state(k, "server", ep)
    event(k, "server", connevd)
    show_state(k, "server", ep)
    k.close()


def client():
    k = Kdat()
    ia = k.ia_open("kdat0")
    q = k.ia_query(ia)
    say("client", f"IA on {q.device_name} ({q.netdev_name}); private data limits "
                  f"connect {q.max_connect_private_data}, accept {q.max_accept_private_data}")
    evd = k.evd_create(ia, 8, k.EVD_CONNECTION)
    ep = k.ep_create(ia, evd, max_rdma_read_in=4, max_rdma_read_out=4)
    show_state(k, "client", ep)
    k.ep_connect(ep, ipv4(ADDR), PORT, 5_000_000, private_data=b"hello kdat")
    say("client", f"ep_connect to {ADDR}:{PORT} with private data b'hello kdat'")
    show_state(k, "client", ep)
    event(k, "client", evd)
    show_state(k, "client", ep)
    q = k.ep_query(ep)
    say("client", f"negotiated IRD/ORD {q.attr.max_rdma_read_in}/{q.attr.max_rdma_read_out}")
    k.ep_disconnect(ep, graceful=True)
    say("client", "ep_disconnect (graceful)")
    show_state(k, "client", ep)
    event(k, "client", evd)
    show_state(k, "client", ep)
    k.close()


def main():
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            server(ready_w)
        finally:
            os._exit(0)
    os.read(ready_r, 1)
    client()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
