"""The RDMA device goes away under kdat (rdma link delete): events, clear errors, no leak, reuse."""
import pytest

from kdat_harness import guest
from kdat_harness.dat import Kdat, expect_dat_error, ipv4, next_port


@pytest.fixture
def removable_rxe(kdat_module, kernel_log, rdma):
    """The session's rxe device, deleted by the test and re-created afterwards."""
    yield rdma["KDAT_TEST_IBDEV"]
    guest.run("rdma", "link", "delete", rdma["KDAT_TEST_IBDEV"], check=False)
    guest.rdma_up()


def test_device_removal_breaks_connections_and_leaves_clear_errors(removable_rxe, rdma):
    port = next_port()
    with Kdat() as k:
        ia = k.ia_open(rdma["KDAT_TEST_NETDEV"])
        crevd = k.evd_create(ia, 8, k.EVD_CR)
        evd = k.evd_create(ia, 8, k.EVD_CONNECTION)
        k.psp_create(ia, crevd, port)
        server, client, idle = k.ep_create(ia, evd), k.ep_create(ia, evd), k.ep_create(ia, evd)
        k.ep_connect(client, ipv4(rdma["KDAT_TEST_ADDR"]), port, 5_000_000)
        k.cr_accept(k.expect_event(crevd, "CONNECTION_REQUEST_EVENT").cr, server)
        k.expect_event(evd, "ESTABLISHED")
        k.expect_event(evd, "ESTABLISHED")

        guest.run("rdma", "link", "delete", removable_rxe)

        broken = {k.expect_event(evd, "BROKEN").ep, k.expect_event(evd, "BROKEN").ep}
        assert broken == {client, server}
        k.expect_no_event(evd)
        for ep in (client, server, idle):
            assert k.ep_state(ep) == "DISCONNECTED"
        expect_dat_error("DAT_INVALID_STATE", k.ep_reset, client)
        expect_dat_error("DAT_INVALID_STATE", k.ep_connect, idle, ipv4(rdma["KDAT_TEST_ADDR"]),
                         port, 1000)
        expect_dat_error("DAT_INVALID_STATE", k.ia_query, ia)
        # objects are still the consumer's to free
        for ep in (client, server, idle):
            k.ep_free(ep)

    # a new device with the same netdev serves a new IA without reloading kdat
    guest.rdma_up()
    with Kdat() as k:
        ia = k.ia_open(rdma["KDAT_TEST_NETDEV"])
        assert k.ia_query(ia).device_name == removable_rxe
