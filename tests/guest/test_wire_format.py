"""Private data on the wire with plain rdma_cm peers (#22): an IA opened with KDAT_IA_PDATA_RAW is
byte-exact with a librdmacm program (build/user/plain_rdmacm_peer) both ways, as NVMe-oF or iSER
need; the default (framed) IA keeps kdat's header, which kdat peers use to get exactly the bytes
sent.  On RoCE the IB CM's fields have fixed sizes (REQ 56 bytes after rdma_cm's header, REP 196,
REJ 148): a raw receiver gets the whole field, zero-padded, as every rdma_cm consumer does."""
import os
import subprocess

import pytest

from kdat_harness import REPO
from kdat_harness.dat import (U, Kdat, Side, expect_dat_error, host_addr, kdat_files,  # noqa: F401
                              next_port, wait_cr)

C = U.consts
PEER = os.path.join(REPO, "build", "user", "plain_rdmacm_peer")
RAW = C["KDAT_IA_PDATA_RAW"]
REQ, REP, REJ = 56, 196, 148          # the IB CM's private data fields (REQ: after rdma_cm's)
HDR = C["KDAT_PRIVATE_DATA_HEADER"]
T = 5_000_000
# The payload that a framed kdat reads as its own header: magic, version, length 2.
LOOKS_FRAMED = b"\xda\x01\x02XABCDEFGH"


class Peer:
    """plain_rdmacm_peer in the background; lines() waits for it and returns its output."""

    def __init__(self, *args):
        self.p = subprocess.Popen([PEER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)

    def wait_listening(self):
        line = self.p.stdout.readline().strip()
        assert line == "listening", (line, self.p.stderr.read() if line == "" else "")

    def lines(self, timeout=30):
        out, err = self.p.communicate(timeout=timeout)
        assert self.p.returncode == 0, (out, err)
        return out.splitlines()

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.communicate()


@pytest.fixture
def peers():
    started = []

    def start(*args):
        p = Peer(*args)
        started.append(p)
        return p
    yield start
    for p in started:
        p.kill()


def fields(line):
    """'rejected status=28 len=3 data=616263' -> ('rejected', {'status': '28', ...})."""
    word, *rest = line.split()
    return word, dict(kv.split("=", 1) for kv in rest)


def data_of(line, kind):
    word, f = fields(line)
    assert word == kind, line
    data = bytes.fromhex(f["data"])
    assert int(f["len"]) == len(data)
    return data


def padded(payload, size):
    return payload + bytes(size - len(payload))


def _side(k, flags):
    """side() on an IA opened with these ia_open flags."""
    ia = k.ia_open(host_addr(), flags=flags)
    evd = k.evd_create(ia, 32, Kdat.EVD_CONNECTION)
    crevd = k.evd_create(ia, 32, Kdat.EVD_CR | Kdat.EVD_CONNECTION)
    return Side(k, ia, evd, crevd)


# ---- the IA's format and limits ------------------------------------------------------------------

def test_a_raw_ia_offers_the_whole_fields_and_a_framed_one_less_the_header(kdat_files, rdma):
    k = kdat_files()
    raw = k.ia_query(k.ia_open(host_addr(), flags=RAW))
    framed = k.ia_query(k.ia_open(host_addr()))
    assert (raw.max_connect_private_data, raw.max_accept_private_data,
            raw.max_reject_private_data) == (REQ, REP, REJ)
    assert (framed.max_connect_private_data, framed.max_accept_private_data,
            framed.max_reject_private_data) == (REQ - HDR, REP - HDR, REJ - HDR)


def test_an_unknown_ia_open_flag_is_an_invalid_parameter(kdat_files, rdma):
    k = kdat_files()
    expect_dat_error("INVALID_PARAMETER", k.ia_open, host_addr(), flags=1 << 7,
                     subtype="DAT_INVALID_ARG2")


def test_a_raw_connect_may_carry_the_whole_req_field_and_no_more(kdat_files, rdma):
    k = kdat_files()
    s = _side(k, RAW)
    ep = s.ep()
    expect_dat_error("INVALID_PARAMETER", k.ep_connect, ep, host_addr(), next_port(), T,
                     private_data=bytes(REQ + 1))
    f = _side(k, 0)
    expect_dat_error("INVALID_PARAMETER", k.ep_connect, f.ep(), host_addr(), next_port(), T,
                     private_data=bytes(REQ - HDR + 1))


# ---- a raw kdat EP and a plain rdma_cm listener --------------------------------------------------

def test_a_raw_kdat_connect_reaches_a_plain_listener_byte_for_byte(kdat_files, rdma, peers):
    port = next_port()
    peer = peers("server", host_addr(), str(port), "accept", b"ok".hex())
    peer.wait_listening()
    s = _side(kdat_files(), RAW)
    ep = s.ep()
    s.k.ep_connect(ep, host_addr(), port, T, private_data=LOOKS_FRAMED)
    ev = s.k.expect_event(s.evd, "ESTABLISHED")
    # the plain listener's two bytes, and the rest of the REP field as the CM carried it
    assert ev.private_data == padded(b"ok", REP)
    s.k.ep_disconnect(ep)
    s.k.expect_event(s.evd, "DISCONNECTED")
    out = peer.lines()
    assert data_of(out[0], "request") == padded(LOOKS_FRAMED, REQ), out
    assert out[1:] == ["established len=0 data=", "disconnected"], out


def test_a_framed_kdat_connect_shows_its_header_to_a_plain_listener(kdat_files, rdma, peers):
    """The control: without KDAT_IA_PDATA_RAW the same connect puts kdat's header first."""
    port = next_port()
    peer = peers("server", host_addr(), str(port), "reject", "")
    peer.wait_listening()
    s = _side(kdat_files(), 0)
    s.k.ep_connect(s.ep(), host_addr(), port, T, private_data=b"abc")
    s.k.expect_event(s.evd, "PEER_REJECTED")
    out = peer.lines()
    assert data_of(out[0], "request") == padded(b"\xda\x01\x03\x00abc", REQ), out


def test_a_plain_listeners_reject_reaches_a_raw_kdat_ep_as_its_bytes(kdat_files, rdma, peers):
    port = next_port()
    peer = peers("server", host_addr(), str(port), "reject", LOOKS_FRAMED.hex())
    peer.wait_listening()
    s = _side(kdat_files(), RAW)
    s.k.ep_connect(s.ep(), host_addr(), port, T)
    ev = s.k.expect_event(s.evd, "PEER_REJECTED")
    assert ev.private_data == padded(LOOKS_FRAMED, REJ)
    peer.lines()


# ---- a plain rdma_cm client and a raw kdat listener ----------------------------------------------

def test_a_plain_connect_reaches_a_raw_kdat_listener_and_its_accept_goes_back_as_sent(
        kdat_files, rdma, peers):
    s = _side(kdat_files(), RAW)
    port = next_port()
    s.k.psp_create(s.ia, s.crevd, port)
    peer = peers("client", host_addr(), str(port), LOOKS_FRAMED.hex())
    crev = wait_cr(s, 20_000_000)
    cr = s.k.cr_query(crev.cr)
    assert cr.private_data == padded(LOOKS_FRAMED, REQ), "a raw listener never reads a header"
    reply = b"\xda\x01\x00\x00hello"      # also shaped like kdat's header: sent as it is
    sep = s.ep()
    s.k.cr_accept(crev.cr, sep, private_data=reply)
    s.k.expect_event(s.evd, "ESTABLISHED", 20_000_000)
    s.k.expect_event(s.evd, "DISCONNECTED", 20_000_000)   # the client disconnects at once
    out = peer.lines()
    assert data_of(out[0], "established") == padded(reply, REP), out
    assert out[1] == "disconnected"


def test_a_raw_kdat_reject_reaches_a_plain_client_as_the_consumers(kdat_files, rdma, peers):
    s = _side(kdat_files(), RAW)
    port = next_port()
    s.k.psp_create(s.ia, s.crevd, port)
    peer = peers("client", host_addr(), str(port), "")
    crev = wait_cr(s, 20_000_000)
    s.k.cr_reject(crev.cr, private_data=b"nope")
    out = peer.lines()
    word, f = fields(out[0])
    assert word == "rejected" and f["status"] == "28", out      # IB_CM_REJ_CONSUMER_DEFINED
    assert data_of(out[0], "rejected") == padded(b"nope", REJ)


def test_a_raw_listener_refuses_what_it_cannot_take_as_the_cm_does(kdat_files, rdma, peers):
    """A used RSP cannot take a second request: a plain client sees the IB CM's 'no resources'
    reject (3), not a consumer's; a kdat client sees NON_PEER_REJECTED, by the provider."""
    s = _side(kdat_files(), RAW)
    port = next_port()
    s.k.rsp_create(s.ia, s.ep(), port, s.crevd)
    first = _side(kdat_files(), RAW)
    first.k.ep_connect(first.ep(), host_addr(), port, T)
    wait_cr(s)
    peer = peers("client", host_addr(), str(port), "")
    out = peer.lines()
    word, f = fields(out[0])
    assert word == "rejected" and f["status"] == "3", out      # IB_CM_REJ_NO_RESOURCES
    for flags in (RAW, 0):
        c = _side(kdat_files(), flags)
        c.k.ep_connect(c.ep(), host_addr(), port, T)
        c.k.expect_event(c.evd, "NON_PEER_REJECTED")
        counts = c.k.ia_counters(c.ia)
        assert (counts["non_peer_rejected"], counts["rejected_by_provider"]) == (1, 1), counts
    assert s.k.ia_counters(s.ia)["requests_refused"] == 3


# ---- two raw kdat IAs ------------------------------------------------------------------------------

def test_two_raw_kdat_ias_see_each_others_fields_whole(kdat_files, rdma):
    c, s = _side(kdat_files(), RAW), _side(kdat_files(), RAW)
    port = next_port()
    s.k.psp_create(s.ia, s.crevd, port)
    cep = c.ep()
    c.k.ep_connect(cep, host_addr(), port, T, private_data=b"req")
    crev = wait_cr(s)
    assert s.k.cr_query(crev.cr).private_data == padded(b"req", REQ)
    s.k.cr_accept(crev.cr, s.ep(), private_data=b"rep")
    ev = c.k.expect_event(c.evd, "ESTABLISHED")
    assert ev.private_data == padded(b"rep", REP)
