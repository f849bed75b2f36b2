// SPDX-License-Identifier: GPL-2.0
/*
 * Private data on the wire.  By default kdat puts a 4-byte header in front of a
 * consumer's private data on the IB CM, whose fields have a fixed size and no
 * length, so that a kdat peer gets exactly the bytes sent.  An IA opened with
 * KDAT_IA_PDATA_RAW speaks the fields as they are (the wire formats of plain
 * rdma_cm peers), and never reads a header into them.
 */
#include <rdma/ib_cm.h>
#include "kdat_base.h"

/* What a consumer of ia may put in a field of this size. */
u32 kdat_pdata_max(const struct kdat_ia *ia, u32 field)
{
	return ia->pdata_raw ? field : field - KDAT_PDATA_HDR;
}

/* Builds the wire form of private data in buf; returns its length. */
u8 kdat_pdata_wrap(const struct kdat_ia *ia, u8 *buf, const void *pdata, u32 len)
{
	u32 hdr = ia->pdata_raw ? 0 : KDAT_PDATA_HDR;

	if (!ia->pdata_raw) {
		buf[0] = KDAT_PDATA_MAGIC;
		buf[1] = KDAT_PDATA_VERSION;
		buf[2] = len;
		buf[3] = 0;
	}
	if (len)
		memcpy(buf + hdr, pdata, len);
	return hdr + len;
}

/*
 * The consumer's bytes from a received private data field.  A raw IA takes
 * the field whole; so does a framed one when the field has no kdat header
 * (a peer that is not kdat).
 */
u32 kdat_pdata_unwrap(const struct kdat_ia *ia, const u8 *raw, u32 raw_len, const u8 **data)
{
	*data = raw;
	if (!raw || !raw_len)
		return 0;
	if (!ia->pdata_raw && raw_len >= KDAT_PDATA_HDR && raw[0] == KDAT_PDATA_MAGIC &&
	    raw[1] == KDAT_PDATA_VERSION && raw[2] <= raw_len - KDAT_PDATA_HDR) {
		*data = raw + KDAT_PDATA_HDR;
		return raw[2];
	}
	return min_t(u32, raw_len, KDAT_PRIVATE_DATA_MAX);
}

/*
 * A UD request's private data: a framed IA's header says so and carries the
 * requester's QPN, which a SIDR request has no field for (the reply does).
 */
u8 kdat_pdata_wrap_ud(const struct kdat_ia *ia, u8 *buf, u32 qpn, const void *pdata, u32 len)
{
	__be32 wire_qpn = cpu_to_be32(qpn);

	if (ia->pdata_raw)
		return kdat_pdata_wrap(ia, buf, pdata, len);
	kdat_pdata_wrap(ia, buf, NULL, 0);
	buf[2] = len;
	buf[3] |= KDAT_PDATA_F_UD_QPN;
	memcpy(buf + KDAT_PDATA_HDR, &wire_qpn, KDAT_PDATA_UD_QPN);
	if (len)
		memcpy(buf + KDAT_PDATA_HDR + KDAT_PDATA_UD_QPN, pdata, len);
	return KDAT_PDATA_HDR + KDAT_PDATA_UD_QPN + len;
}

/* The consumer's bytes of a UD request and the requester's QPN (0: it did not say). */
u32 kdat_pdata_unwrap_ud(const struct kdat_ia *ia, const u8 *raw, u32 raw_len,
			 const u8 **data, u32 *qpn)
{
	const u32 hdr = KDAT_PDATA_HDR + KDAT_PDATA_UD_QPN;
	__be32 wire_qpn;

	*qpn = 0;
	if (!ia->pdata_raw && raw && raw_len >= hdr && raw[0] == KDAT_PDATA_MAGIC &&
	    raw[1] == KDAT_PDATA_VERSION && (raw[3] & KDAT_PDATA_F_UD_QPN) &&
	    raw[2] <= raw_len - hdr) {
		memcpy(&wire_qpn, raw + KDAT_PDATA_HDR, sizeof(wire_qpn));
		*qpn = be32_to_cpu(wire_qpn) & 0xffffff;
		*data = raw + hdr;
		return raw[2];
	}
	return kdat_pdata_unwrap(ia, raw, raw_len, data);
}

/*
 * A REJ that the peer's provider sent on its own (backlog full, listener
 * gone), not its consumer: a framed kdat peer marks its header
 * (KDAT_PDATA_F_PROVIDER); a raw one, like any IB CM, rejects for lack of
 * resources (IB_CM_REJ_NO_RESOURCES), which has no consumer data.
 */
bool kdat_pdata_provider_reject(const struct kdat_ia *ia, const u8 *raw, u32 raw_len,
				int status)
{
	if (status == IB_CM_REJ_NO_RESOURCES)
		return true;
	return !ia->pdata_raw && raw && raw_len >= KDAT_PDATA_HDR &&
	       raw[0] == KDAT_PDATA_MAGIC && raw[1] == KDAT_PDATA_VERSION &&
	       (raw[3] & KDAT_PDATA_F_PROVIDER);
}
