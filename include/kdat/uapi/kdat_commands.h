/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note OR BSD-2-Clause */
/*
 * The ioctls of /dev/kdat as a list (included by <kdat/uapi/kdat.h>).
 */
#ifndef _UAPI_KDAT_COMMANDS_H
#define _UAPI_KDAT_COMMANDS_H

/*
 * The command list, in one place: the kernel dispatches from it, and the test
 * harness and the fuzzer read it.  Expand it with three macros:
 *   CMD(NAME, name, first)  KDAT_IOC_NAME takes struct kdat_name; the struct
 *           ended at field 'first' when the command was added, the shortest
 *           struct the kernel accepts.
 *   HANDLE(name, field, type, use, subtype)  a handle of type IA, EVD, EP, PSP,
 *           RSP or CR, REQUIRED or OPTIONAL (0 means none), that the kernel
 *           resolves in the caller's file, in list order, before the command
 *           runs; one that names no live object of its type makes status
 *           DAT_INVALID_HANDLE with KDAT_DAT_<subtype>, and nothing is done.
 *   ZERO(name, field)  a reserved input that must be zero (EINVAL).
 */
#define KDAT_COMMANDS(CMD, HANDLE, ZERO)					\
	CMD(VERSION, version, reserved)						\
	ZERO(version, reserved)							\
	CMD(IA_OPEN, ia_open, flags)						\
	CMD(IA_CLOSE, ia_close, flags)						\
	HANDLE(ia_close, ia, IA, REQUIRED, INVALID_HANDLE_IA)			\
	CMD(IA_QUERY, ia_query, supported_qos)					\
	ZERO(ia_query, reserved)						\
	HANDLE(ia_query, ia, IA, REQUIRED, INVALID_HANDLE_IA)			\
	CMD(IA_COUNTERS, ia_counters, value)					\
	CMD(DEV_COUNTERS, dev_counters, value)					\
	ZERO(dev_counters, reserved)						\
	CMD(EVD_CREATE, evd_create, evd)					\
	HANDLE(evd_create, ia, IA, REQUIRED, INVALID_HANDLE_IA)			\
	CMD(EVD_FREE, evd_free, reserved)					\
	ZERO(evd_free, reserved)						\
	HANDLE(evd_free, evd, EVD, REQUIRED, NO_SUBTYPE)			\
	CMD(EVD_WAIT, evd_wait, event)						\
	HANDLE(evd_wait, evd, EVD, REQUIRED, NO_SUBTYPE)			\
	CMD(EVD_DEQUEUE, evd_dequeue, event)					\
	HANDLE(evd_dequeue, evd, EVD, REQUIRED, NO_SUBTYPE)			\
	CMD(EVD_RING, evd_ring, map_size)					\
	HANDLE(evd_ring, evd, EVD, REQUIRED, NO_SUBTYPE)			\
	CMD(EVD_RING_WAIT, evd_ring_wait, available)				\
	HANDLE(evd_ring_wait, evd, EVD, REQUIRED, NO_SUBTYPE)			\
	CMD(EP_CREATE, ep_create, reserved)					\
	ZERO(ep_create, reserved)						\
	ZERO(ep_create, attr.reserved)						\
	HANDLE(ep_create, ia, IA, REQUIRED, INVALID_HANDLE_IA)			\
	HANDLE(ep_create, connect_evd, EVD, REQUIRED, INVALID_HANDLE_EVD_CONN)	\
	HANDLE(ep_create, request_evd, EVD, OPTIONAL, INVALID_HANDLE_EVD_REQUEST) \
	HANDLE(ep_create, recv_evd, EVD, OPTIONAL, INVALID_HANDLE_EVD_RECV)	\
	CMD(EP_FREE, ep_free, reserved)						\
	ZERO(ep_free, reserved)							\
	HANDLE(ep_free, ep, EP, REQUIRED, INVALID_HANDLE_EP)			\
	CMD(EP_QUERY, ep_query, transitions)					\
	HANDLE(ep_query, ep, EP, REQUIRED, INVALID_HANDLE_EP)			\
	CMD(EP_MODIFY, ep_modify, attr)						\
	ZERO(ep_modify, attr.reserved)						\
	HANDLE(ep_modify, ep, EP, REQUIRED, INVALID_HANDLE_EP)			\
	CMD(EP_RESET, ep_reset, qp_num)						\
	HANDLE(ep_reset, ep, EP, REQUIRED, INVALID_HANDLE_EP)			\
	CMD(EP_CONNECT, ep_connect, private_data)				\
	ZERO(ep_connect, reserved)						\
	HANDLE(ep_connect, ep, EP, REQUIRED, INVALID_HANDLE_EP)			\
	CMD(EP_DUP_CONNECT, ep_dup_connect, private_data)			\
	ZERO(ep_dup_connect, reserved)						\
	HANDLE(ep_dup_connect, ep, EP, REQUIRED, INVALID_HANDLE_EP)		\
	HANDLE(ep_dup_connect, dup_ep, EP, REQUIRED, INVALID_HANDLE2)		\
	CMD(EP_DISCONNECT, ep_disconnect, flags)				\
	HANDLE(ep_disconnect, ep, EP, REQUIRED, INVALID_HANDLE_EP)		\
	CMD(PSP_CREATE, psp_create, psp)					\
	HANDLE(psp_create, ia, IA, REQUIRED, INVALID_HANDLE_IA)			\
	HANDLE(psp_create, evd, EVD, REQUIRED, INVALID_HANDLE_EVD_CR)		\
	CMD(PSP_FREE, psp_free, reserved)					\
	ZERO(psp_free, reserved)						\
	HANDLE(psp_free, psp, PSP, REQUIRED, INVALID_HANDLE_PSP)		\
	CMD(PSP_QUERY, psp_query, flags)					\
	HANDLE(psp_query, psp, PSP, REQUIRED, INVALID_HANDLE_PSP)		\
	CMD(RSP_CREATE, rsp_create, rsp)					\
	HANDLE(rsp_create, ia, IA, REQUIRED, INVALID_HANDLE_IA)			\
	HANDLE(rsp_create, ep, EP, REQUIRED, INVALID_HANDLE_EP)			\
	HANDLE(rsp_create, evd, EVD, REQUIRED, INVALID_HANDLE_EVD_CR)		\
	CMD(RSP_FREE, rsp_free, reserved)					\
	ZERO(rsp_free, reserved)						\
	HANDLE(rsp_free, rsp, RSP, REQUIRED, INVALID_HANDLE_RSP)		\
	CMD(CR_QUERY, cr_query, reserved)					\
	ZERO(cr_query, reserved)						\
	HANDLE(cr_query, cr, CR, REQUIRED, INVALID_HANDLE_CR)			\
	CMD(CR_ACCEPT, cr_accept, private_data)					\
	ZERO(cr_accept, reserved)						\
	HANDLE(cr_accept, cr, CR, REQUIRED, INVALID_HANDLE_CR)			\
	HANDLE(cr_accept, ep, EP, OPTIONAL, INVALID_HANDLE_EP)			\
	CMD(CR_REJECT, cr_reject, private_data)					\
	HANDLE(cr_reject, cr, CR, REQUIRED, INVALID_HANDLE_CR)			\
	CMD(TABLE_LIST, table_list, tables)					\
	CMD(TABLE_ATTACH, table_attach, id)					\
	CMD(TABLE_WAIT, table_wait, changes)					\
	ZERO(table_wait, reserved)						\
	CMD(UQP_CREATE, uqp_create, ep)						\
	ZERO(uqp_create, attr.reserved)						\
	ZERO(uqp_create, reserved)						\
	HANDLE(uqp_create, ia, IA, REQUIRED, INVALID_HANDLE_IA)			\
	HANDLE(uqp_create, connect_evd, EVD, REQUIRED, INVALID_HANDLE_EVD_CONN)	\
	CMD(UQP_ATTR, uqp_attr, ah_attr)					\
	ZERO(uqp_attr, reserved)						\
	ZERO(uqp_attr, reserved2)						\
	HANDLE(uqp_attr, ep, EP, REQUIRED, INVALID_HANDLE_EP)			\
	HANDLE(uqp_attr, cr, CR, OPTIONAL, INVALID_HANDLE_CR)			\
	CMD(UQP_ESTABLISH, uqp_establish, flags)				\
	HANDLE(uqp_establish, ep, EP, REQUIRED, INVALID_HANDLE_EP)

#endif /* _UAPI_KDAT_COMMANDS_H */
