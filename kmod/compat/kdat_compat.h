/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kdat's kernel compatibility layer.
 *
 * kdat's kernel code is written against the current kernel API.  This header supplies the
 * parts of it that an older supported kernel lacks, each on a feature probe's word
 * (kdat_config.h, written per kernel at build time by kmod/compat/probe), never on a version
 * number: distribution kernels backport interfaces.  Each block names the upstream release
 * that brought the interface; when every supported kernel has it, the block goes.
 */
#ifndef KDAT_COMPAT_H
#define KDAT_COMPAT_H

#include "kdat_config.h"

#include <linux/blk-mq.h>
#include <linux/blkdev.h>
#include <linux/fs.h>
#include <linux/hrtimer.h>
#include <linux/mm.h>

/* 6.3: vm_flags is read-only; changed through these (which also take the vma's locks) */
#ifndef KDAT_HAVE_VM_FLAGS_SET
static inline void vm_flags_set(struct vm_area_struct *vma, vm_flags_t flags)
{
	vma->vm_flags |= flags;
}

static inline void vm_flags_clear(struct vm_area_struct *vma, vm_flags_t flags)
{
	vma->vm_flags &= ~flags;
}
#endif

/* 6.13: a timer is set up with its function in one call (hrtimer_init is gone in 6.15) */
#ifndef KDAT_HAVE_HRTIMER_SETUP
static inline void hrtimer_setup(struct hrtimer *timer,
				 enum hrtimer_restart (*function)(struct hrtimer *),
				 clockid_t clock_id, enum hrtimer_mode mode)
{
	hrtimer_init(timer, clock_id, mode);
	timer->function = function;
}
#endif

/*
 * 6.9: a block device is opened as a file (blkdev_get_by_path/blkdev_put are gone in 6.9);
 * fput() releases it.  Before, filp_open() gives the same: O_EXCL claims the device for the
 * file, as a holder does.
 */
#ifndef KDAT_HAVE_BDEV_FILE_OPEN_BY_PATH
#ifndef BLK_OPEN_READ
#define BLK_OPEN_READ	FMODE_READ
#define BLK_OPEN_WRITE	FMODE_WRITE
#endif
static inline struct file *bdev_file_open_by_path(const char *path, unsigned int mode,
						  void *holder, const void *hops)
{
	int flags = O_LARGEFILE | (holder ? O_EXCL : 0);
	struct file *file;

	if (mode & BLK_OPEN_WRITE)
		flags |= (mode & BLK_OPEN_READ) ? O_RDWR : O_WRONLY;
	file = filp_open(path, flags, 0);
	if (!IS_ERR(file) && !S_ISBLK(file_inode(file)->i_mode)) {
		fput(file);
		return ERR_PTR(-ENOTBLK);
	}
	return file;
}

static inline struct block_device *file_bdev(struct file *file)
{
	return I_BDEV(file->f_mapping->host);
}
#endif

/*
 * 6.9: a disk's limits are given at its allocation (the blk_queue_* setters are gone in
 * 6.11).  Before, they are set right after it, before the disk is added: the same effect.
 */
#ifndef KDAT_HAVE_BLK_MQ_ALLOC_DISK_LIMITS
static inline struct gendisk *kdat_compat_set_limits(struct gendisk *disk,
						     const struct queue_limits *lim)
{
	struct request_queue *q;

	if (IS_ERR(disk) || !lim)
		return disk;
	q = disk->queue;
	if (lim->logical_block_size)
		blk_queue_logical_block_size(q, lim->logical_block_size);
	if (lim->physical_block_size)
		blk_queue_physical_block_size(q, lim->physical_block_size);
	if (lim->max_hw_sectors)
		blk_queue_max_hw_sectors(q, lim->max_hw_sectors);
	if (lim->max_segments)
		blk_queue_max_segments(q, lim->max_segments);
	if (lim->virt_boundary_mask)
		blk_queue_virt_boundary(q, lim->virt_boundary_mask);
	if (lim->max_hw_discard_sectors)
		blk_queue_max_discard_sectors(q, lim->max_hw_discard_sectors);
	if (lim->discard_granularity)
		q->limits.discard_granularity = lim->discard_granularity;
	return disk;
}

#undef blk_mq_alloc_disk
#define blk_mq_alloc_disk(set, lim, queuedata)					\
({										\
	static struct lock_class_key __kdat_key;				\
										\
	kdat_compat_set_limits(__blk_mq_alloc_disk(set, queuedata, &__kdat_key), lim); \
})
#endif

/*
 * 6.11: a volatile write cache and FUA are features of the limits
 * (BLK_FEAT_WRITE_CACHE, BLK_FEAT_FUA).  struct queue_limits of an older
 * kernel has no room for them, so kdat's drivers pass the features beside the
 * limits here; an older kernel gets them as the queue's write-cache flags.
 */
#ifdef KDAT_HAVE_BLK_FEAT_WRITE_CACHE
static inline struct gendisk *kdat_alloc_disk(struct blk_mq_tag_set *set,
					      struct queue_limits *lim,
					      unsigned int features, void *queuedata)
{
	lim->features |= (__force blk_features_t)features;
	return blk_mq_alloc_disk(set, lim, queuedata);
}
#else
#define BLK_FEAT_WRITE_CACHE	(1u << 0)
#define BLK_FEAT_FUA		(1u << 1)
static inline struct gendisk *kdat_alloc_disk_features(struct gendisk *disk,
						       unsigned int features)
{
	if (!IS_ERR(disk))
		blk_queue_write_cache(disk->queue, features & BLK_FEAT_WRITE_CACHE,
				      features & BLK_FEAT_FUA);
	return disk;
}
#define kdat_alloc_disk(set, lim, features, queuedata)				\
	kdat_alloc_disk_features(blk_mq_alloc_disk(set, lim, queuedata), features)
#endif

/* 6.14: every blk-mq queue merges; before, a tag set asks for it */
#ifdef KDAT_HAVE_BLK_MQ_F_SHOULD_MERGE
static inline int kdat_compat_alloc_tag_set(struct blk_mq_tag_set *set)
{
	set->flags |= BLK_MQ_F_SHOULD_MERGE;
	return blk_mq_alloc_tag_set(set);
}
#define blk_mq_alloc_tag_set(set) kdat_compat_alloc_tag_set(set)
#endif

/* 6.15: the request alone says which queue it maps for */
#ifndef KDAT_HAVE_BLK_RQ_MAP_SG_NO_QUEUE
#define blk_rq_map_sg(rq, sglist) blk_rq_map_sg((rq)->q, rq, sglist)
#endif

#endif /* KDAT_COMPAT_H */
