/*
 * vipl_connect: a plain C VIPL program for the two-process guest tests (tests/guest/test_vipl.py).
 *
 *   vipl_connect server NIC DISC TIMEOUT_MS accept|reject [HOLD_MS]
 *   vipl_connect client NIC HOST REMOTE_DISC LOCAL_DISC TIMEOUT_MS [RELIABILITY [HOLD_MS]]
 *   vipl_connect peer NIC HOST LOCAL_DISC REMOTE_DISC TIMEOUT_MS [HOLD_MS]
 *
 * NIC is a netdev name or IP; HOST an IPv4 literal; discriminators are text.  Prints key=value
 * lines (result, remote address and attributes, the VI state after HOLD_MS) and exits with the
 * VIP_RETURN of the connect call.  A server that accepted watches its VI for HOLD_MS and prints
 * the state it ends in, so a test can see the VI go to Error when the client goes away.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vipl.h>

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static const char *state_name(VIP_VI_STATE s)
{
	switch (s) {
	case VIP_STATE_IDLE: return "IDLE";
	case VIP_STATE_CONNECTED: return "CONNECTED";
	case VIP_STATE_CONNECT_PENDING: return "CONNECT_PENDING";
	case VIP_STATE_ERROR: return "ERROR";
	}
	return "?";
}

/* host (4 bytes) + discriminator into a caller buffer of VIPL_KDAT_NET_ADDRESS_SIZE */
static VIP_NET_ADDRESS *make_addr(void *buf, const VIP_UINT8 *host, const char *disc)
{
	VIP_NET_ADDRESS *a = buf;

	a->HostAddressLen = 4;
	a->DiscriminatorLen = (VIP_UINT16)strlen(disc);
	memcpy(a->HostAddress, host, 4);
	memcpy(a->HostAddress + 4, disc, strlen(disc));
	return a;
}

static void print_attrs(const char *who, const VIP_VI_ATTRIBUTES *a)
{
	printf("%s_reliability=%u\n%s_mtu=%u\n%s_qos=%u\n%s_rdma_write=%u\n%s_rdma_read=%u\n",
	       who, a->ReliabilityLevel, who, a->MaxTransferSize, who, a->QoS, who,
	       a->EnableRdmaWrite, who, a->EnableRdmaRead);
}

static void watch(VIP_VI_HANDLE vi, long hold_ms)
{
	VIP_VI_STATE st = VIP_STATE_IDLE;
	long waited = 0;

	VipQueryVi(vi, &st, NULL, NULL, NULL);
	while (st == VIP_STATE_CONNECTED && waited < hold_ms) {
		sleep_ms(20);
		waited += 20;
		VipQueryVi(vi, &st, NULL, NULL, NULL);
	}
	printf("state=%s\n", state_name(st));
}

static int usage(void)
{
	fprintf(stderr, "usage: see the comment at the top of vipl_connect.c\n");
	return 2;
}

int main(int argc, char **argv)
{
	VIP_NIC_HANDLE nic;
	VIP_NIC_ATTRIBUTES na;
	VIP_PROTECTION_HANDLE ptag;
	VIP_VI_ATTRIBUTES va, remote;
	VIP_VI_HANDLE vi;
	VIP_RETURN r;
	VIP_UINT8 host[4];
	_Alignas(8) unsigned char lbuf[VIPL_KDAT_NET_ADDRESS_SIZE], rbuf[VIPL_KDAT_NET_ADDRESS_SIZE];

	if (argc < 3)
		return usage();
	r = VipOpenNic(argv[2], &nic);
	if (r != VIP_SUCCESS) {
		printf("open=%s\n", vipl_kdat_return_name(r));
		return r;
	}
	VipQueryNic(nic, &na);
	VipCreatePtag(nic, &ptag);
	memset(&va, 0, sizeof(va));
	va.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
	va.MaxTransferSize = 65536;
	va.QoS = 7;
	va.Ptag = ptag;
	va.EnableRdmaWrite = VIP_TRUE;
	memset(&remote, 0, sizeof(remote));

	if (strcmp(argv[1], "server") == 0 && argc >= 6) {
		VIP_CONN_HANDLE conn;
		VIP_NET_ADDRESS *from = (VIP_NET_ADDRESS *)rbuf;
		long hold = argc > 6 ? atol(argv[6]) : 0;

		r = VipConnectWait(nic, make_addr(lbuf, na.LocalNicAddress, argv[3]),
				   strtoul(argv[4], NULL, 0), from, &remote, &conn);
		printf("wait=%s\n", vipl_kdat_return_name(r));
		if (r != VIP_SUCCESS)
			return r;
		printf("remote_disc=%.*s\n", from->DiscriminatorLen,
		       (const char *)from->HostAddress + from->HostAddressLen);
		printf("remote_host=%u.%u.%u.%u\n", from->HostAddress[0], from->HostAddress[1],
		       from->HostAddress[2], from->HostAddress[3]);
		print_attrs("remote", &remote);
		fflush(stdout);
		if (strcmp(argv[5], "reject") == 0) {
			r = VipConnectReject(conn);
			printf("result=%s\n", vipl_kdat_return_name(r));
			return r;
		}
		va.ReliabilityLevel = remote.ReliabilityLevel;
		VipCreateVi(nic, &va, NULL, NULL, &vi);
		r = VipConnectAccept(conn, vi);
		printf("result=%s\n", vipl_kdat_return_name(r));
		fflush(stdout);
		if (r == VIP_SUCCESS)
			watch(vi, hold);
		return r;
	}
	if (strcmp(argv[1], "client") == 0 && argc >= 7) {
		long hold = argc > 8 ? atol(argv[8]) : 0;

		if (inet_pton(AF_INET, argv[3], host) != 1)
			return usage();
		if (argc > 7)
			va.ReliabilityLevel = (VIP_RELIABILITY_LEVEL)strtoul(argv[7], NULL, 0);
		r = VipCreateVi(nic, &va, NULL, NULL, &vi);
		if (r != VIP_SUCCESS) {
			printf("create=%s\n", vipl_kdat_return_name(r));
			return r;
		}
		r = VipConnectRequest(vi, make_addr(lbuf, na.LocalNicAddress, argv[5]),
				      make_addr(rbuf, host, argv[4]), strtoul(argv[6], NULL, 0),
				      &remote);
		printf("result=%s\n", vipl_kdat_return_name(r));
		if (r == VIP_SUCCESS)
			print_attrs("remote", &remote);
		fflush(stdout);
		if (r == VIP_SUCCESS && hold > 0)
			watch(vi, hold);
		return r; /* exits without VipDisconnect: the peer sees the connection fail */
	}
	if (strcmp(argv[1], "peer") == 0 && argc >= 7) {
		long hold = argc > 7 ? atol(argv[7]) : 0;

		if (inet_pton(AF_INET, argv[3], host) != 1)
			return usage();
		VipCreateVi(nic, &va, NULL, NULL, &vi);
		r = VipConnectPeerRequest(vi, make_addr(lbuf, na.LocalNicAddress, argv[4]),
					  make_addr(rbuf, host, argv[5]), strtoul(argv[6], NULL, 0));
		if (r == VIP_SUCCESS)
			r = VipConnectPeerWait(vi, &remote);
		printf("result=%s\n", vipl_kdat_return_name(r));
		if (r == VIP_SUCCESS)
			print_attrs("remote", &remote);
		fflush(stdout);
		if (r == VIP_SUCCESS && hold > 0)
			watch(vi, hold);
		return r;
	}
	return usage();
}
