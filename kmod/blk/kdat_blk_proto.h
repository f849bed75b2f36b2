/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The wire format of kdat_blk (the initiator) and kdat_blkt (the target):
 * one RC connection per hardware queue, made on a raw-private-data IA
 * (KDAT_IA_PDATA_RAW), so that the connect and accept carry these structs
 * as they are.  Commands and responses go by send/receive; data moves by
 * RDMA, the target reading the initiator's registered pages for a write and
 * writing them for a read, then answering with a send that ends the
 * registration (send with invalidate), as NVMe over RDMA does.  A small
 * write travels in the command's own send instead (KBLK_CMD_INLINE, when the
 * target's accept offers KBLK_F_INLINE_WRITE): no registration, no RDMA read
 * and no invalidate, one round trip less, as NVMe over RDMA's in-capsule
 * data does.  Everything is little-endian.
 */
#ifndef KDAT_BLK_PROTO_H
#define KDAT_BLK_PROTO_H

#include <linux/types.h>

#define KBLK_MAGIC		0x4b424c4b	/* "KBLK" */
#define KBLK_VERSION		2
#define KBLK_MAX_QUEUE_DEPTH	128
#define KBLK_MAX_QUEUES		16
/* the most one command moves: 32 pages, one RDMA read or write with one SGE a page */
#define KBLK_MAX_IO_PAGES	32
#define KBLK_MAX_IO_BYTES	(KBLK_MAX_IO_PAGES * 4096)

/*
 * The connect's private data: which queue of which controller of which host
 * this connection is, and how deep.  A host's controllers each have their
 * own queues at the target: the target takes (host id, controller id, queue
 * id) from the same address for the same queue, and a connect of a queue it
 * has as a reconnect that ends the old connection.  The host id is what the
 * host says it is (as NVMe's host NQN); it proves nothing by itself.
 */
struct kblk_connect {
	__le32 magic;
	__le16 version;
	__le16 qid;
	__le16 queue_depth;
	__le16 nr_queues;
	__le32 reserved;	/* 0 */
	__le64 ctrl_id;		/* the controller's, kept across its reconnects */
	u8 hostid[16];		/* the host's UUID */
};

/* within what a RoCE REQ carries for rdma_cm (56 bytes), with no padding */
static_assert(sizeof(struct kblk_connect) == 40);

/* the accept's: what the exported device is */
struct kblk_accept {
	__le32 magic;
	__le16 version;
	__le16 flags;		/* KBLK_F_* */
	__le64 capacity;	/* in 512-byte sectors */
	__le32 logical_block_size;
	__le32 max_io_bytes;
	__le32 discard_granularity;	/* bytes; 0 with no KBLK_F_DISCARD */
	__le32 inline_write_bytes;	/* the most KBLK_CMD_INLINE data; 0 with no KBLK_F_INLINE_WRITE */
};

#define KBLK_F_DISCARD		(1u << 0)	/* discard and write-zeroes pass through */
#define KBLK_F_WRITE_CACHE	(1u << 1)	/* the device has a volatile cache: flushes matter */
#define KBLK_F_INLINE_WRITE	(1u << 2)	/* a small write's data may follow its command */

/*
 * What a target offers for in-capsule write data: one page behind each
 * command receive (nvmet-rdma's default inline_data_size is a page too).
 */
#define KBLK_INLINE_WRITE_BYTES	4096
/* the DMA segments an initiator puts such data in, besides the command's */
#define KBLK_INLINE_MAX_SEGS	4

/* a reject's private data: why (a target refusing a connect) */
struct kblk_reject {
	__le32 magic;
	__le32 reason;		/* KBLK_REJ_* */
};

enum {
	KBLK_REJ_VERSION = 1,	/* not a kdat_blk connect, or another version */
	KBLK_REJ_DEPTH,		/* queue depth 0 or above the target's */
	KBLK_REJ_RESOURCES,	/* the target could not allocate the queue, or has its most */
	KBLK_REJ_QUEUE,		/* nr_queues 0 or above KBLK_MAX_QUEUES, or qid not below it */
};

/* A reject's reason in words, for the initiator's message to the administrator. */
static inline const char *kblk_reject_reason(u32 reason)
{
	switch (reason) {
	case KBLK_REJ_VERSION:
		return "it speaks another protocol version";
	case KBLK_REJ_DEPTH:
		return "queue_depth is 0 or above the target's";
	case KBLK_REJ_RESOURCES:
		return "it has no room for another queue";
	case KBLK_REJ_QUEUE:
		return "nr_queues or the queue id is out of range";
	default:
		return "a reason this initiator does not know";
	}
}

enum kblk_opcode {
	KBLK_OP_READ = 1,
	KBLK_OP_WRITE,
	KBLK_OP_FLUSH,
	KBLK_OP_DISCARD,
};

/* a command: one block request */
struct kblk_cmd {
	__le16 tag;		/* the initiator's, echoed in the response */
	__u8 opcode;		/* enum kblk_opcode */
	__u8 flags;		/* KBLK_CMD_FUA */
	__le32 length;		/* bytes */
	__le64 sector;
	__le64 addr;		/* READ/WRITE: the initiator's registered pages (0 if inline) */
	__le32 rkey;
	__le32 reserved;
};

#define KBLK_CMD_FUA		(1u << 0)
#define KBLK_CMD_INLINE		(1u << 1)	/* WRITE: the data follows in this send */

/* a response */
struct kblk_rsp {
	__le16 tag;
	__le16 reserved;
	__le32 status;		/* 0, or a negative errno of the target's device */
};

#endif /* KDAT_BLK_PROTO_H */
