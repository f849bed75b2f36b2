"""Per-IA connection counters (KDAT_IOC_IA_COUNTERS, include/kdat/uapi/kdat_counters.h, #25).

Each test opens its own IAs, so every counter starts at 0 and each is checked for its exact value
after real connections over rdma_cm on rxe: what was counted, and that nothing else was."""
import json
import subprocess

from kdat_harness import KDATCTL
from kdat_harness.dat import (BLACK_HOLE, DAT, SILENT_HOST, U, black_hole, client,  # noqa: F401
                              connect_pair, expect_dat_error, host_addr, kdat_files, next_port,
                              server, side, wait_cr)

T = 5_000_000


def counters(s):
    return s.k.ia_counters(s.ia)


def only(**want):
    """Every counter 0 except those given."""
    unknown = set(want) - set(U.counters)
    assert not unknown, unknown
    return {name: want.get(name, 0) for name in U.counters}


def test_a_new_ia_counts_nothing(client):
    assert counters(client) == only()


def test_connect_accept_and_graceful_disconnect_are_counted_on_both_sides(client, server):
    p = connect_pair(client, server)
    assert counters(client) == only(connects=1, established=1)
    assert counters(server) == only(requests=1, accepts=1, established=1)
    client.k.ep_disconnect(p.cep, graceful=True)
    client.k.expect_event(client.evd, "DISCONNECTED")
    server.k.expect_event(server.evd, "DISCONNECTED")
    assert counters(client) == only(connects=1, established=1, disconnects=1, disconnected=1)
    assert counters(server) == only(requests=1, accepts=1, established=1, disconnected=1)


def test_a_dup_connect_counts_as_a_connect_and_an_abrupt_disconnect_as_a_disconnect(client,
                                                                                   server):
    p = connect_pair(client, server)
    dup = client.ep()
    client.k.ep_dup_connect(dup, p.cep, T)        # to the same PSP
    crev = wait_cr(server)
    server.k.cr_accept(crev.cr, server.ep())
    client.k.expect_event(client.evd, "ESTABLISHED")
    server.k.expect_event(server.evd, "ESTABLISHED")
    client.k.ep_disconnect(p.cep, graceful=False)
    client.k.expect_event(client.evd, "DISCONNECTED")
    server.k.expect_event(server.evd, "DISCONNECTED")
    assert counters(client) == only(connects=2, established=2, disconnects=1, disconnected=1)
    assert counters(server) == only(requests=2, accepts=2, established=2, disconnected=1)


def test_a_consumer_reject_is_the_servers_reject_and_the_clients_peer_rejected(client, server):
    port = next_port()
    server.k.psp_create(server.ia, server.crevd, port)
    cep = client.ep()
    client.k.ep_connect(cep, host_addr(), port, T)
    server.k.cr_reject(wait_cr(server).cr, private_data=b"no")
    client.k.expect_event(client.evd, "PEER_REJECTED")
    assert counters(client) == only(connects=1, peer_rejected=1)
    assert counters(server) == only(requests=1, rejects=1)


def test_a_connect_nobody_listens_for_is_rejected_for_no_listener(client):
    cep = client.ep()
    client.k.ep_connect(cep, host_addr(), next_port(), T)
    client.k.expect_event(client.evd, "NON_PEER_REJECTED")
    assert counters(client) == only(connects=1, non_peer_rejected=1, rejected_no_listener=1)


def test_a_request_kdat_refuses_counts_on_both_ias(client, server):
    """A used RSP refuses the second request itself: the server's requests_refused, and the
    client's rejected_by_provider (kdat's own reject, not the consumer's)."""
    port = next_port()
    rsp_ep = server.ep()
    server.k.rsp_create(server.ia, rsp_ep, port, server.crevd)
    first = client.ep()
    client.k.ep_connect(first, host_addr(), port, T)
    wait_cr(server)
    second = client.ep()
    client.k.ep_connect(second, host_addr(), port, T)
    ev = client.k.expect_event(client.evd, "NON_PEER_REJECTED")
    assert ev.ep == second
    assert counters(server) == only(requests=1, requests_refused=1)
    assert counters(client) == only(connects=2, non_peer_rejected=1, rejected_by_provider=1)


def test_a_timeout_and_an_unreachable_host_are_counted_apart(client, black_hole):
    cep = client.ep()
    client.k.ep_connect(cep, black_hole, next_port(), 300_000)
    client.k.expect_event(client.evd, "TIMED_OUT", 20_000_000)
    assert counters(client) == only(connects=1, timed_out=1)
    cep = client.ep()
    client.k.ep_connect(cep, SILENT_HOST, next_port(), 60_000_000)
    client.k.expect_event(client.evd, "UNREACHABLE", 20_000_000)
    assert counters(client) == only(connects=2, timed_out=1, unreachable=1)


def test_counters_are_per_ia(kdat_files, rdma):
    k = kdat_files()
    a, b = side(k), side(k)
    s = side(kdat_files())
    connect_pair(a, s)
    assert counters(a) == only(connects=1, established=1)
    assert counters(b) == only()


def test_another_file_of_the_same_user_reads_them_by_table_id(client, server, kdat_files):
    connect_pair(client, server)
    other = kdat_files()
    tid = client.k.table().header().id
    assert other.ia_counters(client.ia, table=tid) == only(connects=1, established=1)


def test_bad_handles_and_tables_are_clear_errors(client, kdat_files):
    ep = client.ep()
    expect_dat_error("INVALID_HANDLE", client.k.ia_counters, ep, subtype="DAT_INVALID_HANDLE_IA")
    expect_dat_error("INVALID_HANDLE", client.k.ia_counters, 0, subtype="DAT_INVALID_HANDLE_IA")
    expect_dat_error("INVALID_HANDLE", client.k.ia_counters, client.ia ^ 0x10000)
    expect_dat_error("INVALID_PARAMETER", client.k.ia_counters, client.ia,
                     table=0xDEADBEEFDEADBEEF)
    # another file's IA handle means nothing in this file's table
    other = side(kdat_files())
    if other.ia != client.ia:
        expect_dat_error("INVALID_HANDLE", client.k.ia_counters, other.ia)


def test_a_closed_ia_has_no_counters_to_read(kdat_files, rdma):
    k = kdat_files()
    s = side(k)
    connect_pair(s, side(kdat_files()))
    k.ia_close(s.ia)
    expect_dat_error("INVALID_HANDLE", k.ia_counters, s.ia)
    # a new IA in the same slot starts from zero
    again = side(k)
    assert counters(again) == only()


def _kdatctl(*args):
    r = subprocess.run([KDATCTL, *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_kdatctl_counters_shows_the_ia_as_text_and_json(client, server, rdma):
    connect_pair(client, server)
    tid = client.k.table().header().id
    lines = _kdatctl("counters", "--table", str(tid)).splitlines()
    assert len(lines) == 1, lines
    words = lines[0].split()
    assert words[:2] == ["table", str(tid)] and words[6:8] == ["ia", f"0x{client.ia:08x}"], words
    assert words[8] == "local" and words[9].startswith(host_addr() + ":"), words
    assert words[10:12] == ["dev", f"{rdma['KDAT_TEST_IBDEV']}/1"], words
    pairs = dict(zip(words[12::2], (int(v) for v in words[13::2])))
    assert pairs == only(connects=1, established=1)
    doc = json.loads(_kdatctl("counters", "--json", "--table", str(tid)))
    assert len(doc) == 1
    row = doc[0]
    assert row["table"] == tid and row["ia"] == client.ia and row["ia_hex"] == f"0x{client.ia:08x}"
    assert (row["rdma_device"], row["rdma_port"]) == (rdma["KDAT_TEST_IBDEV"], 1)
    assert {k: row[k] for k in U.counters} == only(connects=1, established=1)
    # the server's IA, chosen by --ia among every table
    sid = server.k.table().header().id
    doc = json.loads(_kdatctl("counters", "--json", "--table", str(sid), "--ia", str(server.ia)))
    assert [(r["table"], r["ia"], r["accepts"]) for r in doc] == [(sid, server.ia, 1)]
