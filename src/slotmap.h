/*-------------------------------------------------------------------------
 *
 * slotmap.h
 *	  Virtual slots of a spindle table and the slot map (slotmap.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_SLOTMAP_H
#define SPINDLE_SLOTMAP_H

#include "access/htup_details.h"
#include "access/transam.h"
#include "lib/stringinfo.h"
#include "storage/itemptr.h"
#include "storage/smgr.h"
#include "utils/rel.h"

/*
 * The virtual slot space of one spindle table.  Slot v is the TID
 * (v / SPINDLE_SLOTS_PER_VBLOCK, v % SPINDLE_SLOTS_PER_VBLOCK + 1): every
 * block number stays below RELSEG_SIZE (see slotmap.c for why) and every
 * offset within what a TID bitmap accepts.
 */
#define SPINDLE_SLOTS_PER_VBLOCK	MaxHeapTuplesPerPage
#define SPINDLE_VBLOCKS				((int64) RELSEG_SIZE)
#define SPINDLE_VSLOTS				(SPINDLE_VBLOCKS * SPINDLE_SLOTS_PER_VBLOCK)

/* A range of virtual slots allocated to a spindle not yet known committed. */
typedef struct SpindlePending
{
	int64		spindle_no;		/* the first of nspindles consecutive ones */
	FullTransactionId fxid;		/* (sub)transaction that created them */
	uint32		vbase;			/* their ranges, one after the other */
	uint32		vcount;
	int32		nspindles;
} SpindlePending;

#define SPINDLE_MAX_PENDING 200

static inline void
spindle_vslot_to_tid(int64 vslot, ItemPointer tid)
{
	ItemPointerSet(tid, (BlockNumber) (vslot / SPINDLE_SLOTS_PER_VBLOCK),
				   (OffsetNumber) (vslot % SPINDLE_SLOTS_PER_VBLOCK + 1));
}

/* The virtual slot of a TID, or -1 if it cannot be one. */
static inline int64
spindle_tid_to_vslot(ItemPointer tid)
{
	BlockNumber blk;
	OffsetNumber off;

	if (!ItemPointerIsValid(tid))
		return -1;
	blk = ItemPointerGetBlockNumberNoCheck(tid);
	off = ItemPointerGetOffsetNumberNoCheck(tid);
	if (blk >= SPINDLE_VBLOCKS || off < 1 || off > SPINDLE_SLOTS_PER_VBLOCK)
		return -1;
	return (int64) blk * SPINDLE_SLOTS_PER_VBLOCK + (off - 1);
}

extern void spindle_slotmap_init_fork(SMgrRelation srel, ForkNumber fork,
									  bool wal, int64 next_spindle_no);
extern bool spindle_slotmap_get(Relation facade, int64 vslot, ItemPointer ptid);
extern void spindle_slotmap_get_range(Relation facade, int64 first, int n,
									  ItemPointer ptids);
extern void spindle_slotmap_set(Relation facade, int64 first, int n,
								ItemPointer ptids);
extern void spindle_slotmap_clear(Relation facade, int64 first, int64 n);

/* the resource manager's part (rangepurge.c dispatches) */
struct XLogReaderState;
extern void spindle_slotmap_redo_set(struct XLogReaderState *record);
extern void spindle_slotmap_desc_set(StringInfo buf,
									 struct XLogReaderState *record);
extern int64 spindle_slotmap_last_used(Relation facade, int64 first, int64 n);
extern void spindle_slotmap_copy(Relation from, Relation to);
extern void spindle_slotmap_forget_size(Relation facade);

extern int	spindle_pending_read(Relation facade, SpindlePending *out);
extern bool spindle_pending_in_progress(const SpindlePending *p);
extern int64 spindle_next_spindle_no(Relation facade, int64 floor);
extern int64 spindle_peek_spindle_no(Relation facade);
extern void spindle_pending_add(Relation facade, const SpindlePending *p);
extern void spindle_pending_remove(Relation facade, const int64 *spindle_nos,
								   int n);

#endif							/* SPINDLE_SLOTMAP_H */
