/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The connection manager kdat drives, as a table of operations: every
 * rdma_cm call of the connection layer goes through an IA's ops.  The real backend
 * (kdat_cm_rdma, the default) calls rdma_cm; a KUnit build may install a
 * fake on an IA (kdat_test_ia_set_cm_ops) to inject rdma_cm events in exact
 * orders.  The IA's device, PD, CQs and QPs stay real either way.
 *
 * The contract kdat relies on, which a fake must keep:
 *   - an id's event handler runs with the id's handler mutex held, and a
 *     non-zero return makes the CM destroy the id after the upcall;
 *   - destroy_id waits for a running handler (it takes the handler mutex),
 *     so it is never called with ctx->lock held nor from the id's handler,
 *     and no event is delivered to an id once destroy_id has begun;
 *   - accept and connect_locked are called with the handler mutex held
 *     (from the id's handler, or between lock_handler and unlock_handler);
 *   - a request's child id is created by the CM with the listener's handler
 *     and context, and the CONNECT_REQUEST event is delivered to the child.
 */
#ifndef KDAT_CM_H
#define KDAT_CM_H

#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>
#include <kdat/kdat.h>

struct kdat_ia;

struct kdat_cm_ops {
	/*
	 * An id in net: RC in RDMA_PS_TCP, UD (SIDR) in RDMA_PS_UDP.
	 * kern_name: the kernel consumer that rdma_cm's resource tracking
	 * names (kept, not copied: it must outlive the id), or NULL for an
	 * open file's id, made in its caller's context (the tracking names the
	 * process).
	 */
	struct rdma_cm_id *(*create_id)(struct net *net, rdma_cm_event_handler handler,
					void *context, const char *kern_name,
					enum rdma_ucm_port_space ps);
	void (*destroy_id)(struct rdma_cm_id *id);
	int (*bind_addr)(struct rdma_cm_id *id, struct sockaddr *addr);
	int (*listen)(struct rdma_cm_id *id, int backlog);
	int (*resolve_addr)(struct rdma_cm_id *id, struct sockaddr *src,
			    const struct sockaddr *dst, unsigned long timeout_ms);
	int (*resolve_route)(struct rdma_cm_id *id, unsigned long timeout_ms);
	/* From the id's handler (ROUTE_RESOLVED): rdma_connect_locked(). */
	int (*connect_locked)(struct rdma_cm_id *id, struct rdma_conn_param *param);
	/* Passive accept, or (param NULL) the active side's RTU. */
	int (*accept)(struct rdma_cm_id *id, struct rdma_conn_param *param);
	int (*reject)(struct rdma_cm_id *id, const void *pdata, u8 len, u8 reason);
	int (*disconnect)(struct rdma_cm_id *id);
	void (*lock_handler)(struct rdma_cm_id *id);
	void (*unlock_handler)(struct rdma_cm_id *id);
	/* A REJECTED event's consumer private data, or NULL if not a consumer reject. */
	const void *(*consumer_reject_data)(struct rdma_cm_id *id,
					    struct rdma_cm_event *ev, u8 *len);
	/*
	 * Moves qp to state (INIT, RTR or RTS) with the connection's attributes
	 * from id; ird/ord are the negotiated RDMA read depths.
	 */
	int (*modify_qp)(struct rdma_cm_id *id, struct ib_qp *qp,
			 enum ib_qp_state state, u32 ird, u32 ord);
	/*
	 * The attributes for attr->qp_state (rdma_init_qp_attr), for a QP kdat
	 * does not own (a user QP).  Optional: without it, user QPs are refused.
	 */
	int (*init_qp_attr)(struct rdma_cm_id *id, struct ib_qp_attr *attr, int *mask);
};

/* The real backend: the kernel's rdma_cm. */
extern const struct kdat_cm_ops kdat_cm_rdma;

#if IS_ENABLED(CONFIG_KUNIT)
/* KUnit only: replace an IA's CM before it has any EP or service point. */
int kdat_test_ia_set_cm_ops(struct kdat_ia *ia, const struct kdat_cm_ops *ops);
/* KUnit only: /dev/kdat's EP_CONNECT of a UD EP (kdat_ud.c) */
kdat_ret_t kdat_test_ud_connect(struct kdat_ep *ep, const struct sockaddr *remote, u64 conn_qual,
				u32 timeout_us, const void *pdata, s32 pdata_size);
/* KUnit only: what kdat's ib_client does for this IA when its device goes. */
void kdat_test_ia_device_removed(struct kdat_ia *ia);
/* KUnit only: hold (or release) the IA owner's lock, or an EP's, as a long call would */
void kdat_test_ia_hold_owner(struct kdat_ia *ia, bool hold);
void kdat_test_ep_hold(struct kdat_ep *ep, bool hold);
/* KUnit only: wait for everything queued on kdat's workqueue (a graceful close, say) */
void kdat_test_flush_work(void);
/*
 * KUnit only (lockdep): does the calling task hold a lock that id's handlers
 * take: the IA owner's, or the lock of the EP id belongs to?
 */
bool kdat_test_cm_call_locked(struct kdat_ia *ia, struct rdma_cm_id *id);
/*
 * KUnit only: an EP for a user QP numbered qpn, as KDAT_IOC_UQP_CREATE makes
 * one for a process, and KDAT_IOC_UQP_ESTABLISH on it (kdat_uqp.c).
 */
kdat_ret_t kdat_test_uqp_create(struct kdat_ia *ia, struct kdat_evd *conn,
				const struct kdat_ep_attr *attr, u32 qpn, u32 flags,
				struct kdat_ep **out);
kdat_ret_t kdat_test_uqp_establish(struct kdat_ep *ep, u32 flags);
#endif

#endif /* KDAT_CM_H */
