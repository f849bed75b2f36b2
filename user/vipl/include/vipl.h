/*
 * vipl.h: the VI Provider Library (VIPL 1.0) connection API, on kdat.
 *
 * Link with -lvipl-kdat (pkg-config vipl-kdat).  What is provided: NIC open/close/query,
 * protection tags, VI create/destroy/query, the client/server connection model
 * (VipConnectWait, VipConnectAccept, VipConnectReject, VipConnectRequest, VipDisconnect) and
 * the peer model (VipConnectPeerRequest, VipConnectPeerDone, VipConnectPeerWait).  There is no
 * data path (memory registration, descriptors, completion queues): kdat has none for userspace.
 *
 * How VIPL maps onto kdat (see README.md, "VIPL"):
 *   NIC                 a kdat IA (VipOpenNic takes a netdev name or an IP literal)
 *   VI                  a kdat EP with its own connection EVD
 *   host address        the IA's IPv4 (4 bytes) or IPv6 (16 bytes) address, network order
 *   discriminator       0..VIPL_KDAT_MAX_DISCRIMINATOR_LEN bytes; it selects the connection
 *                       qualifier vipl_kdat_conn_qual() and travels whole in the connect
 *                       private data, where the server matches it exactly
 *   VipConnectWait      listens (a PSP) on the discriminator's connection qualifier while it
 *                       waits; a request nobody waits for is refused (VIP_NO_MATCH)
 *
 * All calls are thread-safe.  Handles are opaque tokens, never reused: a stale or made-up
 * handle gives VIP_INVALID_PARAMETER, never a crash.
 */
#ifndef VIPL_KDAT_VIPL_H
#define VIPL_KDAT_VIPL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VIP_ENTRY_POINT __attribute__((visibility("default")))

typedef uint8_t VIP_UINT8;
typedef uint16_t VIP_UINT16;
typedef uint32_t VIP_UINT32;
typedef uint64_t VIP_UINT64;
typedef unsigned long VIP_ULONG;
typedef char VIP_CHAR;
typedef void *VIP_PVOID;
typedef VIP_UINT32 VIP_BOOLEAN;

#define VIP_TRUE 1
#define VIP_FALSE 0

/* A timeout (milliseconds) that never expires. */
#define VIP_INFINITE ((VIP_ULONG)0xFFFFFFFFUL)

typedef VIP_PVOID VIP_NIC_HANDLE;
typedef VIP_PVOID VIP_VI_HANDLE;
typedef VIP_PVOID VIP_CQ_HANDLE;
typedef VIP_PVOID VIP_PROTECTION_HANDLE;
typedef VIP_PVOID VIP_CONN_HANDLE;

typedef enum {
  VIP_SUCCESS = 0,
  VIP_NOT_DONE,
  VIP_INVALID_PARAMETER,
  VIP_ERROR_RESOURCE,
  VIP_TIMEOUT,
  VIP_REJECT,
  VIP_INVALID_RELIABILITY_LEVEL,
  VIP_INVALID_MTU,
  VIP_INVALID_QOS,
  VIP_INVALID_PTAG,
  VIP_INVALID_RDMAREAD,
  VIP_DESCRIPTOR_ERROR,
  VIP_INVALID_STATE,
  VIP_ERROR_NAMESERVICE,
  VIP_NO_MATCH,
  VIP_NOT_REACHABLE,
  VIP_ERROR_NOT_SUPPORTED,
} VIP_RETURN;

typedef enum {
  VIP_STATE_IDLE = 0,
  VIP_STATE_CONNECTED,
  VIP_STATE_CONNECT_PENDING,
  VIP_STATE_ERROR,
} VIP_VI_STATE;

/* Reliability levels (bits, also for VIP_NIC_ATTRIBUTES.ReliabilityLevelSupport). */
typedef VIP_UINT32 VIP_RELIABILITY_LEVEL;
#define VIP_SERVICE_UNRELIABLE 0x01
#define VIP_SERVICE_RELIABLE_DELIVERY 0x02
#define VIP_SERVICE_RELIABLE_RECEPTION 0x04

/* Quality of service: opaque in VIPL 1.0; carried to the peer, not enforced. */
typedef VIP_UINT32 VIP_QOS;

typedef struct {
  VIP_RELIABILITY_LEVEL ReliabilityLevel;
  VIP_UINT32 MaxTransferSize;
  VIP_QOS QoS;
  VIP_PROTECTION_HANDLE Ptag; /* remote attributes: NULL (a ptag means nothing remotely) */
  VIP_BOOLEAN EnableRdmaWrite;
  VIP_BOOLEAN EnableRdmaRead;
} VIP_VI_ATTRIBUTES;

/*
 * A network address: HostAddressLen bytes of host address followed by DiscriminatorLen bytes
 * of discriminator, both in HostAddress[].  Output addresses need room for
 * VIPL_KDAT_NET_ADDRESS_SIZE bytes.
 */
typedef struct {
  VIP_UINT16 HostAddressLen;
  VIP_UINT16 DiscriminatorLen;
  VIP_UINT8 HostAddress[1];
} VIP_NET_ADDRESS;

#define VIPL_KDAT_MAX_HOST_ADDRESS_LEN 16
#define VIPL_KDAT_MAX_DISCRIMINATOR_LEN 16
#define VIPL_KDAT_NET_ADDRESS_SIZE \
  (2 * sizeof(VIP_UINT16) + VIPL_KDAT_MAX_HOST_ADDRESS_LEN + VIPL_KDAT_MAX_DISCRIMINATOR_LEN)

typedef struct {
  VIP_CHAR Name[64]; /* the RDMA device */
  VIP_ULONG HardwareVersion;
  VIP_ULONG ProviderVersion;
  VIP_UINT16 NicAddressLen;
  const VIP_UINT8 *LocalNicAddress; /* valid while the NIC is open */
  VIP_BOOLEAN ThreadSafe;
  VIP_UINT16 MaxDiscriminatorLen;
  VIP_ULONG MaxRegisterBytes;
  VIP_ULONG MaxRegisterRegions;
  VIP_ULONG MaxRegisterBlockBytes;
  VIP_ULONG MaxVI;
  VIP_ULONG MaxDescriptorsPerQueue;
  VIP_ULONG MaxSegmentsPerDesc;
  VIP_ULONG MaxCQ;
  VIP_ULONG MaxCQEntries;
  VIP_ULONG MaxTransferSize;
  VIP_ULONG NativeMTU;
  VIP_ULONG MaxPtags;
  VIP_RELIABILITY_LEVEL ReliabilityLevelSupport;
  VIP_RELIABILITY_LEVEL RDMAReadSupport;
} VIP_NIC_ATTRIBUTES;

/* ---- NIC and protection tags ---- */
VIP_ENTRY_POINT VIP_RETURN VipOpenNic(const VIP_CHAR *DeviceName, VIP_NIC_HANDLE *NicHandle);
VIP_ENTRY_POINT VIP_RETURN VipCloseNic(VIP_NIC_HANDLE NicHandle);
VIP_ENTRY_POINT VIP_RETURN VipQueryNic(VIP_NIC_HANDLE NicHandle, VIP_NIC_ATTRIBUTES *Attributes);
VIP_ENTRY_POINT VIP_RETURN VipCreatePtag(VIP_NIC_HANDLE NicHandle,
                                         VIP_PROTECTION_HANDLE *ProtectionTag);
VIP_ENTRY_POINT VIP_RETURN VipDestroyPtag(VIP_NIC_HANDLE NicHandle,
                                          VIP_PROTECTION_HANDLE ProtectionTag);

/* ---- VIs (completion queues are not provided: SendCQHandle/RecvCQHandle must be NULL) ---- */
VIP_ENTRY_POINT VIP_RETURN VipCreateVi(VIP_NIC_HANDLE NicHandle, VIP_VI_ATTRIBUTES *ViAttribs,
                                       VIP_CQ_HANDLE SendCQHandle, VIP_CQ_HANDLE RecvCQHandle,
                                       VIP_VI_HANDLE *ViHandle);
VIP_ENTRY_POINT VIP_RETURN VipDestroyVi(VIP_VI_HANDLE ViHandle);
VIP_ENTRY_POINT VIP_RETURN VipQueryVi(VIP_VI_HANDLE ViHandle, VIP_VI_STATE *State,
                                      VIP_VI_ATTRIBUTES *Attributes, VIP_BOOLEAN *ViSendQEmpty,
                                      VIP_BOOLEAN *ViRecvQEmpty);

/* ---- client/server connections; Timeout in milliseconds, VIP_INFINITE, never 0 ---- */
VIP_ENTRY_POINT VIP_RETURN VipConnectWait(VIP_NIC_HANDLE NicHandle, VIP_NET_ADDRESS *LocalAddr,
                                          VIP_ULONG Timeout, VIP_NET_ADDRESS *RemoteAddr,
                                          VIP_VI_ATTRIBUTES *RemoteViAttribs,
                                          VIP_CONN_HANDLE *ConnHandle);
VIP_ENTRY_POINT VIP_RETURN VipConnectAccept(VIP_CONN_HANDLE ConnHandle, VIP_VI_HANDLE ViHandle);
VIP_ENTRY_POINT VIP_RETURN VipConnectReject(VIP_CONN_HANDLE ConnHandle);
VIP_ENTRY_POINT VIP_RETURN VipConnectRequest(VIP_VI_HANDLE ViHandle, VIP_NET_ADDRESS *LocalAddr,
                                             VIP_NET_ADDRESS *RemoteAddr, VIP_ULONG Timeout,
                                             VIP_VI_ATTRIBUTES *RemoteViAttribs);
VIP_ENTRY_POINT VIP_RETURN VipDisconnect(VIP_VI_HANDLE ViHandle);

/* ---- peer-to-peer connections ---- */
VIP_ENTRY_POINT VIP_RETURN VipConnectPeerRequest(VIP_VI_HANDLE ViHandle,
                                                 VIP_NET_ADDRESS *LocalAddr,
                                                 VIP_NET_ADDRESS *RemoteAddr, VIP_ULONG Timeout);
VIP_ENTRY_POINT VIP_RETURN VipConnectPeerDone(VIP_VI_HANDLE ViHandle,
                                              VIP_VI_ATTRIBUTES *RemoteViAttribs);
VIP_ENTRY_POINT VIP_RETURN VipConnectPeerWait(VIP_VI_HANDLE ViHandle,
                                              VIP_VI_ATTRIBUTES *RemoteViAttribs);

/* ---- kdat extensions ---- */
/* The connection qualifier (port) a discriminator is listened for on; 0 if it is invalid. */
VIP_ENTRY_POINT VIP_UINT16 vipl_kdat_conn_qual(const VIP_UINT8 *Discriminator,
                                               VIP_UINT16 DiscriminatorLen);
/* "VIP_SUCCESS", "VIP_NO_MATCH", ...; "VIP_?" for anything else. */
VIP_ENTRY_POINT const char *vipl_kdat_return_name(VIP_RETURN Status);

#ifdef __cplusplus
}
#endif

#endif /* VIPL_KDAT_VIPL_H */
