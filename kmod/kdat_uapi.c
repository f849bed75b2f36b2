// SPDX-License-Identifier: GPL-2.0
/* Conversions between the kernel's types and include/kdat/uapi/kdat.h's. */
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/string.h>
#include "kdat_base.h"

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

/* Socket address of an IA with a port, for SP records. */
void kdat_ss_with_port(struct sockaddr_storage *ss, const struct sockaddr_storage *src,
			      u16 port)
{
	*ss = *src;
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons(port);
	else if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
}


/* The ABI's form of an event: handles instead of objects. */
void kdat_event_to_user(struct kdat_event *out, struct kdat_event_ud *ud,
			const struct kdat_event_info *in)
{
	*ud = in->ud;
	memset(out, 0, sizeof(*out));
	out->number = in->number;
	out->evd = kdat_obj_event_handle(in->evd);
	out->ep = kdat_obj_event_handle(in->ep);
	out->sp = kdat_obj_event_handle(in->sp);
	out->cr = kdat_obj_event_handle(in->cr);
	out->dto_status = in->dto_status;
	out->cookie = in->cookie;
	out->transfered_length = in->transfered_length;
	out->private_data_size = min_t(u32, in->private_data_size, KDAT_PRIVATE_DATA_MAX);
	memcpy(out->private_data, in->private_data, out->private_data_size);
}


void kdat_sockaddr_copy(union kdat_sockaddr *dst, const struct sockaddr *src)
{
	memset(dst, 0, sizeof(*dst));
	if (src->sa_family == AF_INET)
		dst->in = *(const struct sockaddr_in *)src;
	else if (src->sa_family == AF_INET6)
		dst->in6 = *(const struct sockaddr_in6 *)src;
}

void kdat_sockaddr_set_port(union kdat_sockaddr *a, u16 port)
{
	if (a->sa.sa_family == AF_INET)
		a->in.sin_port = htons(port);
	else if (a->sa.sa_family == AF_INET6)
		a->in6.sin6_port = htons(port);
}

/* An address vector as userspace takes it (a user QP's RTR, a UD peer's AH). */
void kdat_uqp_ah_out(struct kdat_uqp_ah *out, const struct rdma_ah_attr *ah)
{
	memset(out, 0, sizeof(*out));
	out->dlid = rdma_ah_get_dlid(ah);
	out->sl = rdma_ah_get_sl(ah);
	out->src_path_bits = rdma_ah_get_path_bits(ah);
	out->static_rate = rdma_ah_get_static_rate(ah);
	out->port_num = rdma_ah_get_port_num(ah);
	if (rdma_ah_get_ah_flags(ah) & IB_AH_GRH) {
		const struct ib_global_route *grh = rdma_ah_read_grh(ah);

		out->is_global = 1;
		memcpy(out->dgid, grh->dgid.raw, sizeof(out->dgid));
		out->flow_label = grh->flow_label;
		out->sgid_index = grh->sgid_index;
		out->hop_limit = grh->hop_limit;
		out->traffic_class = grh->traffic_class;
	}
}
