"""rdma_connect(3): "Connections established over iWARP RDMA devices currently require
that the active side of the connection send the first message."  MPA (RFC 5044) forbids a
responder's FPDU before the initiator's first one, and siw fails the initiator's connect if that
FPDU arrives together with the MPA reply.  kdat's provider keeps the rule for its consumers: on
iWARP a passive EP holds its requests until its first receive completes (posting them anyway
after 1 s, and completing them as flushed if the connection ends first).  On RoCE nothing is held.

dapl_first_message (user/dapl/tests/first_message.c): the server (on the peer, over kdat) posts a
send right after its CONNECTED, as dtest's server does; the client here decides when it speaks.
Times are seconds from each side's own CONNECTED."""
import os
import shlex
import subprocess
import time

import pytest

from kdat_harness import REPO
from kdat_harness.dat import next_port
from test_wire_dapl import CONF, dat_conf  # noqa: F401  (the fixture)

PROGRAM = os.path.join(REPO, "build", "user", "dapl", "dapl_first_message")
HOLD_LIMIT = 1.0  # kFirstSendHold in user/dapl/data_path.cpp


def _values(text):
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def run_first_message(peer, link, mode):
    """The server on the peer, the client here in `mode`; returns (server, client) key=value
    dicts, each with its program's whole output under 'out'."""
    port = next_port()
    provider = f"kdat-{link}"
    log = f"/tmp/kdat-first-message-{port}.log"
    cmd = " ".join(shlex.quote(a) for a in (PROGRAM, "server", provider, str(port)))
    job = peer.spawn(f"ulimit -l unlimited; DAT_OVERRIDE={CONF} timeout 60 {cmd} > {log} 2>&1")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        out = peer.sh(f"cat {log} 2>/dev/null; true")["out"]
        if "ready" in out or "error=" in out:
            break
        time.sleep(0.1)
    client = subprocess.run(["timeout", "60", PROGRAM, "client", provider, link.peer_addr,
                             str(port), mode], env=dict(os.environ, DAT_OVERRIDE=CONF),
                            capture_output=True, text=True)
    end = peer.wait(job, timeout=30)
    if end["rc"] is None:
        peer.kill(job)
    server_out = peer.sh(f"cat {log}; rm -f {log}")["out"]
    server = _values(server_out)
    server["out"] = f"rc {end['rc']}\n{server_out}"
    here = _values(client.stdout)
    here["out"] = f"rc {client.returncode}\n{client.stdout}{client.stderr}"
    return server, here


def _record(link, mode, server, client):
    print(f"{link.name} {mode}: server " + " ".join(
        f"{k}={server[k]}" for k in ("send_status", "send_at", "recv_status", "recv_at")
        if k in server) + "; client " + " ".join(
        f"{k}={client[k]}" for k in ("sent_at", "recv_status", "recv_at") if k in client))


def _show(server, client):
    return f"server (peer):\n{server['out']}\nclient (here):\n{client['out']}"


def test_a_passive_ep_sends_after_the_active_side_has_spoken_on_iwarp_only(dat_conf, link,
                                                                           peer, kernel_log):
    """The client speaks 0.5 s after CONNECTED.  iWARP: the server's send, posted at once, goes
    out only after the client's message arrived, so the client receives it after it spoke.
    RoCE: it goes out at once."""
    server, client = run_first_message(peer, link, "speaks")
    _record(link, "speaks", server, client)
    shown = _show(server, client)
    assert server.get("server_done") == "1" and client.get("client_done") == "1", shown
    assert server["send_status"] == "SUCCESS" and server["recv_status"] == "SUCCESS", shown
    assert client["recv_status"] == "SUCCESS" and client["message"] == "server speaks", shown
    send_at, sent_at = float(server["send_at"]), float(client["sent_at"])
    if link.name == "iwarp":
        # Each statement on one side's own clock (the two start at their own CONNECTED, which
        # need not be simultaneous): the server's message reached the client only after the
        # client had spoken (at 0.5 s), and the server's send completed before the hold's limit,
        # so what released it was the client's message.
        assert float(client["recv_at"]) >= sent_at, f"the send was not held\n{shown}"
        assert send_at < HOLD_LIMIT, f"not released by the client's message\n{shown}"
    else:
        assert send_at < sent_at - 0.2, f"RoCE must not hold\n{shown}"


def test_a_held_send_goes_out_after_the_limit_if_the_active_side_never_speaks(dat_conf, link,
                                                                               peer, kernel_log):
    """A protocol whose passive side speaks first breaks MPA's rule; the hold must not turn that
    into a hang: after 1 s the send goes out (and over siw, whose initiator has long read the
    MPA reply by then, arrives)."""
    if link.name != "iwarp":
        pytest.skip("nothing is held on RoCE")
    server, client = run_first_message(peer, link, "silent")
    _record(link, "silent", server, client)
    shown = _show(server, client)
    assert server.get("server_done") == "1" and client.get("client_done") == "1", shown
    assert server["send_status"] == "SUCCESS", shown
    assert client["recv_status"] == "SUCCESS" and client["message"] == "server speaks", shown
    assert HOLD_LIMIT - 0.05 <= float(server["send_at"]) < HOLD_LIMIT + 2.0, shown


def test_a_held_send_completes_flushed_when_the_connection_ends_first(dat_conf, link, peer,
                                                                      kernel_log):
    """The client leaves (abrupt disconnect) 0.3 s after CONNECTED without a word: the server's
    held send completes as flushed (before its DISCONNECTED, which the program waits for after
    it), never sent and never left outstanding."""
    if link.name != "iwarp":
        pytest.skip("nothing is held on RoCE")
    server, client = run_first_message(peer, link, "leaves")
    _record(link, "leaves", server, client)
    shown = _show(server, client)
    assert server.get("server_done") == "1" and client.get("client_done") == "1", shown
    assert server["send_status"] == "FLUSHED", shown
    assert float(server["send_at"]) < HOLD_LIMIT, f"flushed by the limit, not the end\n{shown}"
