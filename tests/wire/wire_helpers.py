"""Helpers of the two-host tests (tests/wire/)."""
import json
import os
import socket
import subprocess

from kdat_harness.dat import next_port


def sh(*cmd):
    """A command on this host; its stdout.  Fails the test if it fails."""
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def unhex(v):
    """A value from the peer's agent: bytes travel as {"hex": ...}."""
    return bytes.fromhex(v["hex"]) if isinstance(v, dict) and set(v) == {"hex"} else v


def ip_reaches(addr, timeout=5):
    """Whether `addr` answers IP: a TCP connect to its discard port is refused (a reset came
    back) or accepted; silence or an unreachable route is False.  (The guests have no ping.)"""
    try:
        socket.create_connection((addr, 9), timeout=timeout).close()
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    return True


def connected(k, link, b, port=None, timeout_us=10_000_000):
    """A user EP here connected to a user EP of the peer's agent `b`: (evd, ep, peer's ep)."""
    port = port or next_port()
    b.m("psp_create", b.ia, b.crevd, port)
    ia = k.ia_open(link.netdev)
    evd = k.evd_create(ia, 16)
    ep = k.ep_create(ia, evd)
    k.ep_connect(ep, link.peer_addr, port, timeout_us)
    req = b.m("expect_event", b.crevd, "CONNECTION_REQUEST_EVENT", timeout_us)
    bep = b.m("ep")
    b.m("cr_accept", req["cr"], bep)
    k.expect_event(evd, "ESTABLISHED", timeout_us)
    b.m("expect_event", b.evd, "CONNECTION_EVENT_ESTABLISHED", timeout_us)
    return evd, ep, bep


MATRIX = os.path.join(os.environ.get("KDAT_RESULTS", "/tmp"), "fault-matrix.jsonl")


def record(link, fault, state, event, seconds):
    with open(MATRIX, "a") as f:
        f.write(json.dumps({"wire": link.name, "fault": fault, "state": state, "event": event,
                            "seconds": round(seconds, 2)}) + "\n")
