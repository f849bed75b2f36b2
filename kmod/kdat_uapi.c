// SPDX-License-Identifier: GPL-2.0
/* Conversions between the kernel's types and include/uapi/kdat.h's. */
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/string.h>
#include "kdat_priv.h"

void kdat_addr_out(struct kdat_addr *out, const struct sockaddr *sa)
{
	memset(out, 0, sizeof(*out));
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;

		out->family = KDAT_AF_INET;
		out->port = ntohs(sin->sin_port);
		memcpy(out->addr, &sin->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;

		out->family = KDAT_AF_INET6;
		out->port = ntohs(sin6->sin6_port);
		out->scope_id = sin6->sin6_scope_id;
		memcpy(out->addr, &sin6->sin6_addr, 16);
	}
}

int kdat_addr_in(struct sockaddr_storage *ss, const struct kdat_addr *in)
{
	memset(ss, 0, sizeof(*ss));
	if (in->family == KDAT_AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)ss;

		if (in->scope_id || memchr_inv(in->addr + 4, 0, 12))
			return -EINVAL;
		sin->sin_family = AF_INET;
		memcpy(&sin->sin_addr, in->addr, 4);
		return 0;
	}
	if (in->family == KDAT_AF_INET6) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_scope_id = in->scope_id;
		memcpy(&sin6->sin6_addr, in->addr, 16);
		return 0;
	}
	return -EINVAL;
}
