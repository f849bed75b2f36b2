// SPDX-License-Identifier: GPL-2.0
/*
 * kdat's private data framing: the 4-byte header in front of a consumer's private data
 * on the IB CM, which carries fixed-size fields and no length.
 */
#include "kdat_base.h"

/* Builds the wire form of private data in buf; returns its length. */
u8 kdat_pdata_wrap(u8 *buf, const void *pdata, u32 len)
{
	buf[0] = KDAT_PDATA_MAGIC;
	buf[1] = KDAT_PDATA_VERSION;
	buf[2] = len;
	buf[3] = 0;
	if (len)
		memcpy(buf + KDAT_PDATA_HDR, pdata, len);
	return KDAT_PDATA_HDR + len;
}

/*
 * The consumer's bytes from a received private data field.  A field without
 * kdat's header (a peer that is not kdat) is taken whole.
 */
u32 kdat_pdata_unwrap(const u8 *raw, u32 raw_len, const u8 **data)
{
	*data = raw;
	if (!raw || !raw_len)
		return 0;
	if (raw_len >= KDAT_PDATA_HDR && raw[0] == KDAT_PDATA_MAGIC &&
	    raw[1] == KDAT_PDATA_VERSION && raw[2] <= raw_len - KDAT_PDATA_HDR) {
		*data = raw + KDAT_PDATA_HDR;
		return raw[2];
	}
	return min_t(u32, raw_len, KDAT_PRIVATE_DATA_MAX);
}

/* A REJ that kdat's provider side sent on its own (KDAT_PDATA_F_PROVIDER). */
bool kdat_pdata_provider_reject(const u8 *raw, u32 raw_len)
{
	return raw && raw_len >= KDAT_PDATA_HDR && raw[0] == KDAT_PDATA_MAGIC &&
	       raw[1] == KDAT_PDATA_VERSION && (raw[3] & KDAT_PDATA_F_PROVIDER);
}
