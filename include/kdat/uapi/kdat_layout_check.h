/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note OR BSD-2-Clause */
/*
 * Compile-time checks of the shared-memory layouts in kdat.h, included by
 * both sides (kdat.ko in C, libkdat in C++) so that neither can drift from
 * the sizes and offsets the other maps.  Not part of the ABI itself.
 */
#ifndef _UAPI_KDAT_LAYOUT_CHECK_H
#define _UAPI_KDAT_LAYOUT_CHECK_H

#include "kdat.h"

#ifdef __cplusplus
#include <cstddef>
#define KDAT_LAYOUT_ASSERT(cond, msg) static_assert(cond, msg)
#else
#ifdef __KERNEL__
#include <linux/stddef.h>
#else
#include <stddef.h>
#endif
#define KDAT_LAYOUT_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

KDAT_LAYOUT_ASSERT(sizeof(struct kdat_record) == KDAT_TABLE_RECORD_SIZE, "record size");
KDAT_LAYOUT_ASSERT(offsetof(struct kdat_record, seq) == 0, "record seq first");
KDAT_LAYOUT_ASSERT(offsetof(struct kdat_record, handle) == 4, "record handle");
KDAT_LAYOUT_ASSERT(offsetof(struct kdat_record, state) == 12, "record state");
KDAT_LAYOUT_ASSERT(offsetof(struct kdat_record, created_ns) == 48, "record times 8-aligned");
KDAT_LAYOUT_ASSERT(offsetof(struct kdat_record, local_addr) == 72, "record addresses");
KDAT_LAYOUT_ASSERT(sizeof(struct kdat_table_header) <= KDAT_TABLE_HEADER_SIZE, "table header");
KDAT_LAYOUT_ASSERT(KDAT_TABLE_HEADER_SIZE % KDAT_TABLE_RECORD_SIZE == 0, "records aligned");
KDAT_LAYOUT_ASSERT(offsetof(struct kdat_ring_header, tail) == 64, "head, tail on own lines");
KDAT_LAYOUT_ASSERT(sizeof(struct kdat_ring_header) <= KDAT_RING_ENTRIES_OFFSET, "ring header");
KDAT_LAYOUT_ASSERT(sizeof(struct kdat_event) % 8 == 0, "ring entries stay 8-aligned");
KDAT_LAYOUT_ASSERT((KDAT_RING_MAX_ENTRIES & (KDAT_RING_MAX_ENTRIES - 1)) == 0,
		   "ring entries a power of two");

#undef KDAT_LAYOUT_ASSERT

#endif /* _UAPI_KDAT_LAYOUT_CHECK_H */
