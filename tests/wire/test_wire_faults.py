"""Faults on the wire between the two hosts, on both wires: loss, delay and reordering (tc netem
on both ends of the link), a partition (netem dropping everything both ways: the cable cut, the
cards still up), and the peer powered off hard (no DREQ, no REJ, no FIN) or rebooted.

Every EP must reach a terminal state within its own timeout or the CM's retry limit; each case
records what it saw (fault x state -> event, time to the terminal state) in
$KDAT_RESULTS/fault-matrix.jsonl, which README's fault matrix summarises."""
import json
import time

import pytest

from kdat_harness import guest
from kdat_harness.dat import DAT, TABLE, Kdat, next_port
from wire_helpers import connected, record, sh

CONNECT_TIMEOUT_US = 4_000_000


def partition(netem):
    netem("loss 100%")


def timed_event(k, evd, timeout_s):
    t0 = time.monotonic()
    ev = k.try_wait(evd, int(timeout_s * 1_000_000))
    return ev, time.monotonic() - t0


def ends_timed_out_at_its_timeout(k, evd, ep, t0):
    """ep's connect (started at t0, CONNECT_TIMEOUT_US) ends TIMED_OUT, DISCONNECTED: not before
    the timeout, soon after it (the timer, not a CM retry limit, ended it).  Returns the seconds."""
    ev, _ = timed_event(k, evd, 60)
    took = time.monotonic() - t0
    assert ev is not None and ev.name == "CONNECTION_EVENT_TIMED_OUT", ev
    assert k.ep_state(ep) == "DISCONNECTED"
    assert took >= CONNECT_TIMEOUT_US / 1e6 * 0.95, took
    assert took < CONNECT_TIMEOUT_US / 1e6 + 5, took
    return took


# ---- a partition, in each connection state ----------------------------------------------------

def test_a_partition_while_connecting_times_out_at_the_consumers_timeout(link, remote, netem,
                                                                         kdat_module, kernel_log):
    """The peer is known (its neighbour entry is fresh) but nothing crosses the wire: the
    requests go unanswered and the consumer's timeout ends the connect (dat_ep_dup_connect(3DAT):
    TIMED_OUT "When the timeout expired prior to completion of the Connection establishment")."""
    b = remote()
    port = next_port()
    b.m("psp_create", b.ia, b.crevd, port)
    with Kdat() as k:
        # a connection first, so that the neighbour entry is fresh and the REQ goes out
        connected(k, link, b)
        ia = k.ia_open(link.netdev)
        evd = k.evd_create(ia, 16)
        ep = k.ep_create(ia, evd)
        partition(netem)
        t0 = time.monotonic()
        k.ep_connect(ep, link.peer_addr, port, CONNECT_TIMEOUT_US)
        took = ends_timed_out_at_its_timeout(k, evd, ep, t0)
        record(link, "partition", "connecting (peer known)", "CONNECTION_EVENT_TIMED_OUT", took)
        b.m("expect_no_event", b.crevd, 300_000)
        # the timed-out attempt's id is released once the transport lets go of it: at once on
        # RoCE (a REJ is sent into the cut), on siw when its blocking TCP connect gives up
        # (net.ipv4.tcp_syn_retries, which scripts/wire-up sets to 3: 15 s)
        t0 = time.monotonic()
    took = time.monotonic() - t0
    assert took < 30, took
    record(link, "partition", "connecting: the owner's close after TIMED_OUT", "closed", took)


def test_a_dup_connect_across_a_partition_times_out_and_the_connection_it_copies_stays(
        link, remote, netem, kdat_module, kernel_log):
    """dat_ep_dup_connect(3DAT) to the remote end of a connection whose wire is cut: the
    request goes unanswered and the consumer's timeout ends it (TIMED_OUT); the connection it
    copied, idle, notices nothing, and an abrupt disconnect ends it at once."""
    b = remote()
    with Kdat() as k:
        evd, ep, _ = connected(k, link, b)
        ia = k.ia_open(link.netdev)
        evd2 = k.evd_create(ia, 16)
        dup = k.ep_create(ia, evd2)
        partition(netem)
        t0 = time.monotonic()
        k.ep_dup_connect(dup, ep, CONNECT_TIMEOUT_US)
        took = ends_timed_out_at_its_timeout(k, evd2, dup, t0)
        record(link, "partition", "dup_connect", "CONNECTION_EVENT_TIMED_OUT", took)
        b.m("expect_no_event", b.crevd, 300_000)
        k.expect_no_event(evd, 300_000)
        assert k.ep_state(ep) == "CONNECTED"
        t0 = time.monotonic()
        k.ep_disconnect(ep)
        ev, _ = timed_event(k, evd, 120)
        assert ev is not None and ev.name == "CONNECTION_EVENT_DISCONNECTED", ev
        assert time.monotonic() - t0 < 5
    # as after a timed-out connect: siw lets go of the attempt's id when TCP gives up on the SYN
    took = time.monotonic() - t0
    assert took < 30, took


def ep_toward_an_unknown_peer(k, link, netem):
    """(evd, ep) here, the wire cut and this host's neighbour entries flushed: an address lookup
    gets no answer."""
    ia = k.ia_open(link.netdev)
    evd = k.evd_create(ia, 16)
    ep = k.ep_create(ia, evd)
    partition(netem)
    sh("ip", "neigh", "flush", "dev", link.netdev)
    return evd, ep


def test_a_host_that_does_not_answer_at_all_is_unreachable(link, remote, netem, kdat_module,
                                                           kernel_log):
    """Nothing answers, not even address resolution (the neighbour entry flushed, the wire cut):
    the transport gives up before the consumer's long timeout (dat_ep_dup_connect(3DAT):
    UNREACHABLE "When the Provider cannot reach the remote host")."""
    with Kdat() as k:
        evd, ep = ep_toward_an_unknown_peer(k, link, netem)
        t0 = time.monotonic()
        k.ep_connect(ep, link.peer_addr, next_port(), 60_000_000)
        ev, _ = timed_event(k, evd, 90)
        took = time.monotonic() - t0
        assert ev is not None and ev.name == "CONNECTION_EVENT_UNREACHABLE", ev
        assert k.ep_state(ep) == "DISCONNECTED"
        assert took < 30, took
        record(link, "partition", "connecting (peer unknown)", ev.name, took)


def test_a_lost_address_lookup_is_asked_again_and_the_connect_goes_through(link, peer, remote,
                                                                           netem, kdat_module,
                                                                           kernel_log):
    """The first address lookup's ARP exchanges are lost (the neighbour entries flushed, the wire
    cut for 2.5 s, longer than one lookup's 2 s): the lookup is asked again, and once the wire
    heals the connect is ESTABLISHED -- not UNREACHABLE at the first lookup's timeout.  (A lossy
    wire loses an ARP request or reply now and then, as in the loss tests below.)"""
    b = remote()
    port = next_port()
    b.m("psp_create", b.ia, b.crevd, port)
    with Kdat() as k:
        evd, ep = ep_toward_an_unknown_peer(k, link, netem)
        peer.sh(f"ip neigh flush dev {link.netdev}")
        t0 = time.monotonic()
        k.ep_connect(ep, link.peer_addr, port, 30_000_000)
        time.sleep(2.5)
        netem("delay 0ms")                      # the wire heals
        req = b.m("expect_event", b.crevd, "CONNECTION_REQUEST_EVENT", 30_000_000)
        bep = b.m("ep")
        b.m("cr_accept", req["cr"], bep)
        ev, _ = timed_event(k, evd, 30)
        took = time.monotonic() - t0
        assert ev is not None and ev.name == "CONNECTION_EVENT_ESTABLISHED", ev
        # no reply could come before the wire healed: the first lookup timed out
        assert took > 2.5, took
        b.m("expect_event", b.evd, "CONNECTION_EVENT_ESTABLISHED", 10_000_000)
        k.ep_disconnect(ep)
        k.expect_event(evd, "DISCONNECTED", 10_000_000)
    record(link, "partition 2.5 s, then healed", "connecting, peer unknown", ev.name, took)


def test_a_partition_of_an_idle_connection_then_a_disconnect_here_ends_it(link, remote, netem,
                                                                          kdat_module,
                                                                          kernel_log):
    """An idle connection does not notice a cut wire (nothing is sent); an abrupt disconnect
    here ends it at once, a graceful one once the CM gives up on its DREQ."""
    b = remote()
    with Kdat() as k:
        evd, ep, _ = connected(k, link, b)
        evd2, ep2, _ = connected(k, link, b)
        partition(netem)
        k.expect_no_event(evd, 1_000_000)
        assert k.ep_state(ep) == "CONNECTED"
        t0 = time.monotonic()
        k.ep_disconnect(ep)
        ev, _ = timed_event(k, evd, 120)
        took = time.monotonic() - t0
        assert ev is not None and ev.name == "CONNECTION_EVENT_DISCONNECTED", ev
        record(link, "partition", "connected, abrupt disconnect here", ev.name, took)
        t0 = time.monotonic()
        k.ep_disconnect(ep2, graceful=True)
        ev, _ = timed_event(k, evd2, 120)
        took = time.monotonic() - t0
        assert ev is not None and ev.name == "CONNECTION_EVENT_DISCONNECTED", ev
        assert k.ep_state(ep2) == "DISCONNECTED"
        record(link, "partition", "connected, graceful disconnect here", ev.name, took)


def echo_param(name):
    with open(f"/sys/module/kdat_echo/parameters/{name}") as f:
        return f.read().strip()


# Where a graceful disconnect that waits for a send must end, at the latest: RoCE's EP first
# waits for the send (7 retries of the 268 ms ACK timeout), then for the CM's DREQ retries (16
# over 70-100 s, the row above); iWARP's send and close are TCP's.
PENDING_LIMIT_S = 150


@pytest.mark.parametrize("fault", ["partition", "peer powered off"])
def test_a_fault_during_a_pending_graceful_disconnect_ends_it(link, peer, netem, fault,
                                                              kdat_module, kernel_log):
    """Kernel consumers both ends: the wire is cut (or the peer powered off hard) while the
    connection is idle, then this side sends and disconnects gracefully, so its EP waits in
    DISCONNECT_PENDING for a send that cannot be answered.  The send completes (an error where
    the transport notices the loss), and the EP ends DISCONNECTED within the CM's retry limit,
    the send first (dat_ep_disconnect(3DAT))."""
    port = next_port()
    peer.sh(f"insmod {guest.ECHO_KO} ia_name={link.netdev} listen_port={port}")
    try:
        r = guest.run("insmod", guest.ECHO_KO, f"ia_name={link.netdev}",
                      f"connect_addr={link.peer_addr}", f"connect_port={port}", "pending_test=1",
                      check=False)
        assert r.returncode == 0, r.stderr
        try:
            guest.wait_for(lambda: echo_param("established") == "1", 30, "not connected")
            if fault == "partition":
                partition(netem)
            else:
                peer.power_off()
            time.sleep(1)
            with open("/sys/module/kdat_echo/parameters/pending_act", "w") as f:
                f.write("graceful")
            names = {v: k for k, v in TABLE.state_value.items()}
            state = names[int(echo_param("pt_state_after_graceful"))]
            deadline = time.monotonic() + PENDING_LIMIT_S + 30
            while echo_param("pt_end_ms") == "-1" and time.monotonic() < deadline:
                time.sleep(0.5)
            got = {p: echo_param(p) for p in ("pt_end_event", "pt_send_status", "pt_send_ms",
                                              "pt_end_ms", "dto_errors", "disconnected",
                                              "last_event")}
            assert got["pt_end_ms"] != "-1", f"the pending graceful disconnect did not end: {got}"
            end_s = int(got["pt_end_ms"]) / 1000
            send_status = int(got["pt_send_status"])
            send_s = int(got["pt_send_ms"]) / 1000
            # on RoCE the send is in flight until the transport gives up; on iWARP it may have
            # gone to TCP (completed) before the disconnect call returned
            if link.name == "roce":
                assert state == "DISCONNECT_PENDING", got
                assert send_status != DAT["DAT_DTO_SUCCESS"], got
            assert got["pt_end_event"] == "DISCONNECTED", got
            assert send_status != -1 and send_s <= end_s, got
            assert end_s < PENDING_LIMIT_S, got
            assert got["dto_errors"] == "0", got
        finally:
            assert guest.unload_module("kdat_echo").returncode == 0
    finally:
        if peer.powered:
            peer.sh("rmmod kdat_echo")
        else:
            peer.power_on()     # a new boot: nothing of the old one is loaded
    dto = {v: k for k, v in DAT.items() if k.startswith("DAT_DTO_")}
    record(link, fault, f"graceful disconnect here pending a send ({state})",
           f"send: {dto.get(send_status, send_status)} at {send_s:.2f} s; DISCONNECTED", end_s)


def test_an_accept_whose_reply_is_cut_off_ends_the_accepting_ep(link, remote, netem, kdat_module,
                                                                 kernel_log):
    """The request arrived here; the wire is cut before the accept: the accept's reply never
    arrives, and the accepting EP ends (not stuck in ACCEPT_PENDING / COMPLETION_PENDING)."""
    b = remote()
    port = next_port()
    with Kdat() as k:
        ia = k.ia_open(link.netdev)
        evd = k.evd_create(ia, 16)
        crevd = k.evd_create(ia, 16, flags=guest.UAPI.consts["KDAT_EVD_CR"])
        k.psp_create(ia, crevd, port)
        bep = b.m("ep")
        b.m("ep_connect", bep, link.self_addr, port, 8_000_000)
        req = k.expect_event(crevd, "CONNECTION_REQUEST_EVENT", 10_000_000)
        partition(netem)
        ep = k.ep_create(ia, evd)
        t0 = time.monotonic()
        k.cr_accept(req.cr, ep)
        ev, _ = timed_event(k, evd, 120)
        took = time.monotonic() - t0
        assert ev is not None, "the accepting EP never ended"
        if link.name == "roce":
            # the REP is retried until ib_cm gives up on the RTU: the accept failed
            assert ev.name == "CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR", ev
            assert k.ep_state(ep) == "DISCONNECTED"
        else:
            # iWARP: the TCP connection exists and the MPA reply is sent (TCP retransmits it
            # into the cut): the accepting side is connected as far as iWARP can tell
            assert ev.name == "CONNECTION_EVENT_ESTABLISHED", ev
        record(link, "partition", "accept sent (the reply cut off)", ev.name, took)
        # the requester, on the other side of the cut, ends by its own timeout
        bev = b.m("expect_event", b.evd, "CONNECTION_EVENT_TIMED_OUT", 30_000_000)
        assert bev["ep"] == bep
        if link.name == "iwarp":
            # and the connected side here ends when told to, although nothing crosses the wire
            t0 = time.monotonic()
            k.ep_disconnect(ep)
            ev, _ = timed_event(k, evd, 120)
            assert ev is not None and ev.name == "CONNECTION_EVENT_DISCONNECTED", ev
            record(link, "partition", "accepted, then abrupt disconnect here", ev.name,
                   time.monotonic() - t0)


# ---- loss, delay and reordering -----------------------------------------------------------------

@pytest.mark.parametrize("spec", ["loss 1%", "loss 10%", "delay 100ms", "delay 10ms reorder 25% 50%"])
def test_connects_and_disconnects_complete_through_a_lossy_slow_or_reordering_wire(
        link, remote, netem, spec, kdat_module, kernel_log):
    """Retries hide loss, delay and reordering: every connect is ESTABLISHED and every
    disconnect DISCONNECTED on both sides (within the CM's retry limits)."""
    b = remote()
    netem(spec)
    n = 6
    t0 = time.monotonic()
    with Kdat() as k:
        for i in range(n):
            evd, ep, bep = connected(k, link, b, timeout_us=60_000_000)
            k.ep_disconnect(ep, graceful=(i % 2 == 0))
            k.expect_event(evd, "DISCONNECTED", 60_000_000)
            b.m("expect_event", b.evd, "CONNECTION_EVENT_DISCONNECTED", 60_000_000)
            assert b.m("ep_state", bep) == "DISCONNECTED"
    record(link, spec, f"{n} connects + disconnects", "ESTABLISHED, DISCONNECTED",
           (time.monotonic() - t0) / n)


def cm_counter(link, group, msg):
    """ib_cm's count of one kind of CM message on this host's port (cm_tx_msgs/dreq, ...)."""
    with open(f"/sys/class/infiniband/{link.ibdev}/ports/1/{group}/{msg}") as f:
        return int(f.read())


def peer_ids_of(peer, link, port):
    """The peer's cm_ids on `port` (its side of connections to this host; rdma res there)."""
    out = peer.sh("rdma -j res show cm_id")["out"]
    return [i for i in json.loads(out) if i.get("src-addr", "").endswith(f":{port}")
            and i.get("dst-addr", "").startswith(link.self_addr + ":")]


@pytest.mark.parametrize("link", ["roce"], indirect=True)
def test_a_graceful_disconnect_whose_drep_is_lost_ends_with_the_peers_next_drep(
        link, peer, remote, netem, kdat_module, kernel_log):
    """The peer's DREP is lost.  Our DREQ's retries must still get one: the peer's EP gives up
    its id when the time-wait ends, and ib_cm answers a DREQ for no id with a DREP.  (ib_cm
    silently drops a DREQ that finds an idle id, so an EP that kept its id would leave us
    retrying into nothing until the CM's DREQ retry limit, about 100 s.)  RoCE only: on iWARP
    the disconnect is TCP's."""
    b = remote()
    port = next_port()
    with Kdat() as k:
        evd, ep, bep = connected(k, link, b, port)
        rx_drep = cm_counter(link, "cm_rx_msgs", "drep")
        retries = cm_counter(link, "cm_tx_retries", "dreq")
        assert peer_ids_of(peer, link, port)
        netem("loss 100%", here=False)          # everything the peer sends is lost
        t0 = time.monotonic()
        k.ep_disconnect(ep, graceful=True)
        b.m("expect_event", b.evd, "CONNECTION_EVENT_DISCONNECTED", 10_000_000)
        assert b.m("ep_state", bep) == "DISCONNECTED"
        # its DREP lost, the peer's time-wait (twice the packet lifetime) ends: its id goes
        deadline = time.monotonic() + 30
        while peer_ids_of(peer, link, port):
            assert time.monotonic() < deadline, "the peer's EP kept its id after the time-wait"
            time.sleep(0.5)
        assert k.ep_state(ep) == "DISCONNECT_PENDING"
        netem("delay 0ms", here=False)          # the wire heals
        ev, _ = timed_event(k, evd, 120)
        took = time.monotonic() - t0
        assert ev is not None and ev.name == "CONNECTION_EVENT_DISCONNECTED", ev
        assert k.ep_state(ep) == "DISCONNECTED"
        # ended by a DREP (not by the CM giving up on its DREQ), at the next retry or so
        assert cm_counter(link, "cm_rx_msgs", "drep") > rx_drep
        assert cm_counter(link, "cm_tx_retries", "dreq") - retries <= 3, took
        assert b.m("ep_state", bep) == "DISCONNECTED"
    record(link, "peer's DREP lost", "graceful disconnect here", ev.name, took)


# ---- the peer powered off hard, and rebooted ----------------------------------------------------

def test_the_peer_powered_off_hard_in_each_state(link, peer, remote, kdat_module, kernel_log):
    """The peer goes off without a word (no DREQ, no REJ, no FIN) with EPs here connected; each
    ends, and a connect to the dark host ends too.  Then the peer comes back and connects work
    again.  (The graceful disconnect, which waits for the CM's DREQ retries on RoCE, runs while
    the others are tried.)"""
    b = remote()
    port = next_port()
    with Kdat() as k:
        evd1, ep1, _ = connected(k, link, b, port)
        evd2, ep2, _ = connected(k, link, b)
        ia = k.ia_open(link.netdev)
        evd3 = k.evd_create(ia, 16)
        ep3 = k.ep_create(ia, evd3)
        peer.power_off()
        time.sleep(1)
        # idle connected: nothing noticed until this side acts
        k.expect_no_event(evd1, 500_000)
        assert k.ep_state(ep1) == "CONNECTED"
        t1 = time.monotonic()
        k.ep_disconnect(ep1, graceful=True)
        # connecting to a host that went dark (its neighbour entry still fresh): no answer
        t0 = time.monotonic()
        k.ep_connect(ep3, link.peer_addr, port, CONNECT_TIMEOUT_US)
        ev, _ = timed_event(k, evd3, 60)
        took = time.monotonic() - t0
        assert ev is not None and ev.name == "CONNECTION_EVENT_TIMED_OUT", ev
        record(link, "peer powered off", "connecting", ev.name, took)
        # dat_ep_dup_connect to the dark host's end of a connection: no answer either
        ep4 = k.ep_create(ia, evd3)
        t0 = time.monotonic()
        k.ep_dup_connect(ep4, ep2, CONNECT_TIMEOUT_US)
        ev, _ = timed_event(k, evd3, 60)
        took = time.monotonic() - t0
        assert ev is not None and ev.name == "CONNECTION_EVENT_TIMED_OUT" and ev.ep == ep4, ev
        record(link, "peer powered off", "dup_connect", ev.name, took)
        t0 = time.monotonic()
        k.ep_disconnect(ep2)
        ev, _ = timed_event(k, evd2, 120)
        took = time.monotonic() - t0
        assert ev is not None and ev.name == "CONNECTION_EVENT_DISCONNECTED", ev
        record(link, "peer powered off", "connected, abrupt disconnect here", ev.name, took)
        ev, _ = timed_event(k, evd1, 150)
        took = time.monotonic() - t1
        assert ev is not None and ev.name == "CONNECTION_EVENT_DISCONNECTED", ev
        assert k.ep_state(ep1) == "DISCONNECTED"
        record(link, "peer powered off", "connected, graceful disconnect here", ev.name, took)
    b.kill()
    peer.power_on()
    b = remote()
    with Kdat() as k:
        evd, ep, _ = connected(k, link, b)
        k.ep_disconnect(ep)
        k.expect_event(evd, "DISCONNECTED", 10_000_000)


def test_the_peer_rebooted_with_a_connection_open_here(link, peer, remote, kdat_module,
                                                       kernel_log):
    """The peer resets and boots again (its kdat loaded anew) while an EP here is connected to
    it; nothing tells this side.  On iWARP a new connection to it works at once.  On RoCE the
    rebooted peer's first QP has the number its old one had, so its REP names the connection
    this side still holds: ib_cm refuses the REP as a stale connection (IB's rule), sends the
    old connection a DREQ -- the stale EP here ends DISCONNECTED -- and the new attempt is left
    to its timeout (TIMED_OUT) while the peer's accepting EP gets the REJ
    (ACCEPT_COMPLETION_ERROR); the attempt after it connects."""
    b = remote()
    with Kdat() as k:
        evd, ep, _ = connected(k, link, b)
        peer.reboot()   # the agent's process goes with its host: its EP sends nothing
        b = remote()
        assert k.ep_state(ep) == "CONNECTED"   # nothing told this side
        if link.name == "roce":
            port = next_port()
            b.m("psp_create", b.ia, b.crevd, port)
            ia = k.ia_open(link.netdev)
            evd1 = k.evd_create(ia, 16)
            ep1 = k.ep_create(ia, evd1)
            t0 = time.monotonic()
            k.ep_connect(ep1, link.peer_addr, port, CONNECT_TIMEOUT_US)
            req = b.m("expect_event", b.crevd, "CONNECTION_REQUEST_EVENT", 10_000_000)
            b.m("cr_accept", req["cr"], b.m("ep"))
            ev, _ = timed_event(k, evd1, 60)
            assert ev is not None and ev.name == "CONNECTION_EVENT_TIMED_OUT", ev
            record(link, "peer rebooted", "first connect to it (stale REP)", ev.name,
                   time.monotonic() - t0)
            ev, _ = timed_event(k, evd, 30)
            assert ev is not None and ev.name == "CONNECTION_EVENT_DISCONNECTED", ev
            assert k.ep_state(ep) == "DISCONNECTED"
            record(link, "peer rebooted", "connected (the stale EP here)", ev.name,
                   time.monotonic() - t0)
            # the peer's accepting EP got the stale-connection REJ
            b.m("expect_event", b.evd, "CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR", 10_000_000)
        t0 = time.monotonic()
        evd2, ep2, _ = connected(k, link, b)
        record(link, "peer rebooted", "a new connect to it", "ESTABLISHED", time.monotonic() - t0)
        if link.name == "iwarp":
            assert k.ep_state(ep) == "CONNECTED"   # still nothing told this side
            t0 = time.monotonic()
            k.ep_disconnect(ep, graceful=True)
            ev, _ = timed_event(k, evd, 120)
            assert ev is not None and ev.name == "CONNECTION_EVENT_DISCONNECTED", ev
            record(link, "peer rebooted", "connected, graceful disconnect here", ev.name,
                   time.monotonic() - t0)
        k.ep_disconnect(ep2)
        k.expect_event(evd2, "DISCONNECTED", 10_000_000)
