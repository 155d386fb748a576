/*-------------------------------------------------------------------------
 *
 * facade_scan.c
 *	  Scans of a spindle table: sequential (spindle after spindle, oldest
 *	  first, then the annexes), parallel (whole spindles and annexes handed
 *	  out to participants), bitmap, ANALYZE sampling and index builds.  Each
 *	  delegates to heapam on one spindle at a time and gives every tuple its
 *	  virtual TID, computed from the event's hidden k (layout.c).
 *
 * A scan pins the table's directory for its lifetime, so the list of
 * spindles it walks is the one that existed when it began; spindles that
 * were dropped since are skipped, and spindles created since hold nothing
 * its snapshot can see (an event is inserted only into a spindle whose
 * creation committed first, or was made by the inserting transaction).
 *
 * Bitmap heap scans are core's (nodeBitmapHeapscan.c) over this AM's
 * bitmap callbacks, but core would PrefetchBuffer() the facade's own file
 * at the TIDs' block numbers, which md.c refuses for a block past a
 * missing 1 GB segment; an ExecutorStart hook turns that prefetching off
 * for every bitmap heap scan of a facade, and a get_relation_info hook
 * keeps bitmap scans of facades out of the subqueries an EvalPlanQual
 * recheck may start again outside ExecutorStart
 * (spindle_bitmap_no_prefetch).
 * ANALYZE samples blocks in a numbering of its own (analyze_next_block).
 *
 * Locks: a serial scan holds AccessShareLock on the spindle it reads and
 * releases it when it moves on (its slot no longer pins that spindle's
 * pages then); bitmap and ANALYZE scans fetch event by event through
 * facade_am.c's fetch state, which does the same.  So a scan holds a few
 * spindle locks whatever the number of spindles.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/relscan.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "common/pg_prng.h"
#include "executor/executor.h"
#include "nodes/execnodes.h"
#include "nodes/nodeFuncs.h"
#include "nodes/pathnodes.h"
#include "nodes/tidbitmap.h"
#include "optimizer/plancat.h"
#include "port/atomics.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/predicate.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "table/spindle_table.h"


typedef struct FacadeScanDescData
{
	TableScanDescData base;
	SpindleDirectory *dir;		/* pinned */
	uint32		heap_flags;		/* flags for the per-spindle heap scans */

	/* serial and parallel scans: position in spindles, then annexes */
	int			cur;			/* -1 before the first, spindle_dir_nall
								 * after the last (spindle_dir_entry) */
	Relation	curseg;
	TableScanDesc curscan;
	SpindleEntry *cursp;

	/* bitmap and ANALYZE scans: the virtual slots of the current block */
	IndexFetchTableData *fetch;
	int64		vfirst;			/* first virtual slot of the block (ANALYZE:
								 * first sample slot) */
	int			nv;
	int			pos;
	OffsetNumber *offsets;		/* NULL: every offset of the block */

	/* ANALYZE: its numbering of the slots (see analyze_next_block) ... */
	int64	   *astart;			/* per spindle: its first sample slot */
	int64		atotal;			/* sample slots in all */
	int64		astretch;		/* sample blocks per analyzed block */
	double		aweight;		/* rows each sampled row stands for */
	/* ... and the spindle being sampled */
	SpindleEntry *asp;
	Relation	aseg;
	BlockNumber anblocks;		/* its size, as last seen */
	BufferAccessStrategy astrategy;
	HeapTupleData atuple;		/* the sampled tuple the slot points to */

	/* serial and parallel scans: events the consume log hides (hidden.c) */
	SpindleHide hide;
} FacadeScanDescData;

typedef FacadeScanDescData *FacadeScanDesc;

/* Parallel scans: participants claim whole spindles in increasing order. */
typedef struct FacadeParallelScanData
{
	ParallelTableScanDescData base;
	pg_atomic_uint64 last_claimed;	/* highest spindle_no claimed */
} FacadeParallelScanData;

/*
 * Stop reading the current spindle.  With unlock, also give up its lock:
 * only when the caller knows no slot pins one of its pages any more.
 */
static void
close_current(FacadeScanDesc s, bool unlock)
{
	if (s->curscan != NULL)
	{
		table_endscan(s->curscan);
		relation_close(s->curseg, unlock ? AccessShareLock : NoLock);
	}
	s->curscan = NULL;
	s->curseg = NULL;
	s->cursp = NULL;
}

/*
 * Start a heap scan of spindle i of the directory; false if it is gone.
 *
 * Called from getnextslot and friends, which callers may run in a memory
 * context they reset for every tuple (ALTER TABLE's constraint validation
 * and rewrite, foreign key validation): the spindle's scan must live as
 * long as the facade's scan, in the context that holds it.
 */
static bool
open_spindle(FacadeScanDesc s, int i)
{
	Relation	seg;
	MemoryContext oldcxt;

	seg = spindle_open_segment(s->base.rs_rd, spindle_dir_entry(s->dir, i),
							   AccessShareLock);
	if (seg == NULL)
		return false;
	s->curseg = seg;
	s->cursp = spindle_dir_entry(s->dir, i);
	oldcxt = MemoryContextSwitchTo(GetMemoryChunkContext(s));
	s->curscan = spindle_heap_methods()->scan_begin(seg, s->base.rs_snapshot,
													s->base.rs_nkeys,
													s->base.rs_key, NULL,
													s->heap_flags);
	MemoryContextSwitchTo(oldcxt);
	return true;
}

static TableScanDesc
facade_scan_begin(Relation rel, Snapshot snapshot, int nkeys,
				  struct ScanKeyData *key, ParallelTableScanDesc pscan,
				  uint32 flags)
{
	FacadeScanDesc s;

	if (flags & SO_TYPE_SAMPLESCAN)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("TABLESAMPLE is not supported on spindle tables")));

	s = palloc0(sizeof(FacadeScanDescData));
	s->base.rs_rd = rel;
	s->base.rs_snapshot = snapshot;
	s->base.rs_nkeys = nkeys;
	s->base.rs_key = key;
	s->base.rs_flags = flags;
	s->base.rs_parallel = pscan;
	/*
	 * Every spindle committed before the scan: its snapshot may show a
	 * creator that has not sent its invalidations yet, whose events in the
	 * spindles it created must show as its others do.
	 */
	s->dir = spindle_directory_acquire_current(rel);
	/* we own the snapshot; spindles are read in order, never synchronised */
	s->heap_flags = flags & ~(SO_TEMP_SNAPSHOT | SO_ALLOW_SYNC);
	s->cur = -1;

	if (snapshot && IsMVCCSnapshot(snapshot) && (flags & SO_TYPE_SEQSCAN))
		PredicateLockRelation(rel, snapshot);
	/*
	 * After the snapshot was taken: see hidden.c, "Coherence" (MVCC scans
	 * read each spindle's entries once, others probe per event).
	 */
	if (flags & SO_TYPE_SEQSCAN)
		spindle_hide_begin(&s->hide, rel, snapshot,
						   snapshot != NULL && IsMVCCSnapshot(snapshot));
	if (flags & SO_TYPE_BITMAPSCAN)
	{
		s->fetch = spindle_fetch_begin(rel);
		s->offsets = palloc(sizeof(OffsetNumber) * MaxHeapTuplesPerPage);
	}
	return &s->base;
}

static void
facade_scan_end(TableScanDesc sscan)
{
	FacadeScanDesc s = (FacadeScanDesc) sscan;

	close_current(s, false);
	spindle_hide_end(&s->hide);
	if (s->fetch != NULL)
		spindle_fetch_end(s->fetch);
	if (s->aseg != NULL)
		relation_close(s->aseg, NoLock);
	if (s->astart != NULL)
		pfree(s->astart);
	spindle_directory_release(s->dir);
	if (s->base.rs_flags & SO_TEMP_SNAPSHOT)
		UnregisterSnapshot(s->base.rs_snapshot);
	pfree(s);
}

static void
facade_scan_rescan(TableScanDesc sscan, struct ScanKeyData *key,
				   bool set_params, bool allow_strat, bool allow_sync,
				   bool allow_pagemode)
{
	FacadeScanDesc s = (FacadeScanDesc) sscan;

	if (set_params)
	{
		if (allow_pagemode)
			s->heap_flags |= SO_ALLOW_PAGEMODE;
		else
			s->heap_flags &= ~SO_ALLOW_PAGEMODE;
		if (allow_strat)
			s->heap_flags |= SO_ALLOW_STRAT;
		else
			s->heap_flags &= ~SO_ALLOW_STRAT;
	}
	if (key != NULL && s->base.rs_nkeys > 0)
		memcpy(s->base.rs_key, key, s->base.rs_nkeys * sizeof(ScanKeyData));
	/* the executor's slot may still hold a tuple of the current spindle */
	close_current(s, false);
	s->cur = -1;
	s->hide.spindle_no = 0;		/* read the entries again */
}

/* Give the slot's tuple (of the current spindle) its virtual identity. */
static void
identify(FacadeScanDesc s, SpindleEntry *sp, TupleTableSlot *slot)
{
	ItemPointerData vtid;

	spindle_tuple_vtid(sp, ExecFetchSlotHeapTuple(slot, false, NULL), &vtid);
	spindle_slot_set_identity(slot, s->base.rs_rd, &vtid);
}

/*
 * Does the consume log or a relocation entry hide the slot's tuple (of
 * the current spindle or annex, visible to heap's test) from the scan?
 */
static bool
hidden_in_scan(FacadeScanDesc s, TupleTableSlot *slot)
{
	HeapTuple	tuple;

	if (s->hide.crel == NULL)
		return false;
	tuple = ExecFetchSlotHeapTuple(slot, false, NULL);
	return spindle_hide_event(&s->hide, s->cursp,
							  spindle_event_k(tuple->t_data, tuple->t_len));
}

/*
 * The entry (spindle_dir_entry) of dir numbered lowest above last, or -1.
 * Spindles and annexes are each ordered by number.
 */
static int
next_numbered_above(SpindleDirectory *dir, uint64 last)
{
	int			lo = 0,
				hi = dir->nspindles;
	int			best = -1;

	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;

		if ((uint64) dir->spindles[mid].spindle_no <= last)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < dir->nspindles)
		best = lo;
	for (int j = 0; j < dir->nannexes; j++)
	{
		SpindleEntry *an = &dir->annexes[j];

		if ((uint64) an->spindle_no > last)
		{
			if (best < 0 || an->spindle_no < dir->spindles[best].spindle_no)
				best = dir->nspindles + j;
			break;
		}
	}
	return best;
}

/*
 * The next spindle of a parallel scan: claim, in increasing spindle_no
 * order, the first spindle or annex of our directory above everything
 * claimed so far.  A spindle missing from some participant's directory
 * was created after the scan's snapshot and holds nothing it can see.
 */
static bool
parallel_next_spindle(FacadeScanDesc s)
{
	FacadeParallelScanData *ps = (FacadeParallelScanData *) s->base.rs_parallel;

	close_current(s, true);
	for (;;)
	{
		uint64		last = pg_atomic_read_u64(&ps->last_claimed);
		int			i = next_numbered_above(s->dir, last);

		if (i < 0)
		{
			s->cur = spindle_dir_nall(s->dir);
			return false;
		}
		if (pg_atomic_compare_exchange_u64(&ps->last_claimed, &last,
										   (uint64) spindle_dir_entry(s->dir, i)->spindle_no))
		{
			s->cur = i;
			if (open_spindle(s, i))
				return true;
		}
	}
}

static bool
facade_scan_getnextslot(TableScanDesc sscan, ScanDirection direction,
						TupleTableSlot *slot)
{
	FacadeScanDesc s = (FacadeScanDesc) sscan;

	for (;;)
	{
		if (s->curscan != NULL)
		{
			if (heap_getnextslot(s->curscan,
								 s->base.rs_parallel ? ForwardScanDirection : direction,
								 slot))
			{
				if (hidden_in_scan(s, slot))
					continue;
				identify(s, s->cursp, slot);
				return true;
			}
			/* the slot is empty now: the spindle may be let go */
			close_current(s, true);
		}
		if (s->base.rs_parallel != NULL)
		{
			if (!parallel_next_spindle(s))
			{
				ExecClearTuple(slot);
				return false;
			}
			continue;
		}
		/* move to the next spindle in the scan's direction */
		if (ScanDirectionIsBackward(direction))
		{
			if (s->cur <= 0)
			{
				s->cur = -1;
				ExecClearTuple(slot);
				return false;
			}
			s->cur--;
		}
		else
		{
			if (s->cur >= spindle_dir_nall(s->dir) - 1)
			{
				s->cur = spindle_dir_nall(s->dir);
				ExecClearTuple(slot);
				return false;
			}
			s->cur++;
		}
		(void) open_spindle(s, s->cur);
	}
}

/* ----------------------------------------------------------------
 * Parallel scans
 * ----------------------------------------------------------------
 */
static Size
facade_parallelscan_estimate(Relation rel)
{
	return sizeof(FacadeParallelScanData);
}

static Size
facade_parallelscan_initialize(Relation rel, ParallelTableScanDesc pscan)
{
	FacadeParallelScanData *ps = (FacadeParallelScanData *) pscan;

	ps->base.phs_relid = RelationGetRelid(rel);
	ps->base.phs_syncscan = false;
	pg_atomic_init_u64(&ps->last_claimed, 0);
	return sizeof(FacadeParallelScanData);
}

static void
facade_parallelscan_reinitialize(Relation rel, ParallelTableScanDesc pscan)
{
	FacadeParallelScanData *ps = (FacadeParallelScanData *) pscan;

	pg_atomic_write_u64(&ps->last_claimed, 0);
}

/* ----------------------------------------------------------------
 * Bitmap scans: each TID of the block is fetched as an index scan would
 * ----------------------------------------------------------------
 */
static bool
facade_scan_bitmap_next_block(TableScanDesc sscan, TBMIterateResult *tbmres)
{
	FacadeScanDesc s = (FacadeScanDesc) sscan;

	if ((int64) tbmres->blockno >= SPINDLE_VBLOCKS)
		return false;
	s->vfirst = (int64) tbmres->blockno * SPINDLE_SLOTS_PER_VBLOCK;
	s->pos = 0;
	if (tbmres->ntuples >= 0)
	{
		s->nv = tbmres->ntuples;
		memcpy(s->offsets, tbmres->offsets, sizeof(OffsetNumber) * s->nv);
	}
	else
	{
		/* lossy: every slot of the block */
		int			i;

		s->nv = SPINDLE_SLOTS_PER_VBLOCK;
		for (i = 0; i < s->nv; i++)
			s->offsets[i] = i + 1;
	}
	return s->nv > 0;
}

static bool
facade_scan_bitmap_next_tuple(TableScanDesc sscan, TBMIterateResult *tbmres,
							  TupleTableSlot *slot)
{
	FacadeScanDesc s = (FacadeScanDesc) sscan;

	while (s->pos < s->nv)
	{
		OffsetNumber off = s->offsets[s->pos++];
		ItemPointerData vtid;
		bool		call_again;

		if (off < 1 || off > SPINDLE_SLOTS_PER_VBLOCK)
			continue;
		spindle_vslot_to_tid(s->vfirst + off - 1, &vtid);
		if (spindle_fetch_event(s->base.rs_rd, s->fetch, &vtid,
								s->base.rs_snapshot, slot, &call_again, NULL))
			return true;
	}
	return false;
}

/* ----------------------------------------------------------------
 * Bitmap heap scans: no prefetching of facade blocks
 *
 * Core's bitmap heap scan calls PrefetchBuffer(facade, block) for blocks
 * of its bitmap ahead of the one it reads (effective_io_concurrency > 0),
 * and md.c raises "could not open file ... previous segment is only N
 * blocks" for a block past a 1 GB segment the facade's main fork (the
 * slot map) does not have: while the map is under 1 GB, any TID at block
 * 131072 or past.  Those blocks are virtual: there is nothing to prefetch
 * in the facade.  So once core has set up a plan's nodes, every bitmap
 * heap scan of a facade gets prefetch_maximum = 0, which is what
 * effective_io_concurrency = 0 gives it: no prefetch iterator, serial or
 * parallel (the hook runs in parallel workers too, which set up their own
 * nodes through ExecutorStart).  The spindle pages are not prefetched
 * either, as an index scan does not.
 *
 * Core sets up one kind of node without ExecutorStart: an EvalPlanQual
 * recheck (a row that a concurrent transaction updated, under UPDATE,
 * DELETE, MERGE or SELECT FOR UPDATE/SHARE) starts the statement's
 * SubPlans again in an EState of its own and may run them.  So the
 * planner gives no bitmap heap scan of a facade to a subquery level of
 * such a statement (get_relation_info hook: its indexes are marked as
 * giving no bitmaps there): an index or sequential scan does the same
 * work without prefetching.  The statement's own
 * level keeps its bitmap scans: a recheck never runs them again (it
 * substitutes the rows of every relation of that level).
 * ----------------------------------------------------------------
 */
static ExecutorStart_hook_type prev_executor_start = NULL;
static get_relation_info_hook_type prev_get_relation_info = NULL;

/* Turn prefetching off in every bitmap heap scan of a facade under ps. */
static bool
no_prefetch_walker(PlanState *ps, void *context)
{
	if (ps == NULL)
		return false;
	if (IsA(ps, BitmapHeapScanState))
	{
		BitmapHeapScanState *bhs = (BitmapHeapScanState *) ps;

		if (bhs->ss.ss_currentRelation != NULL &&
			spindle_is_facade(bhs->ss.ss_currentRelation))
			bhs->prefetch_maximum = 0;
	}
	return planstate_tree_walker(ps, no_prefetch_walker, context);
}

/*
 * ExecutorStart hook: core's (or the previous hook's) set-up, then no
 * prefetching in the bitmap heap scans of facades.  Nothing has run yet:
 * the prefetch iterators are made at the first tuple (and a parallel
 * scan's shared state when its Gather starts).
 */
static void
spindle_executor_start(QueryDesc *queryDesc, int eflags)
{
	EState	   *estate;
	ListCell   *lc;

	if (prev_executor_start)
		prev_executor_start(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);

	/* the plan's tree, and every subplan's, used or not */
	estate = queryDesc->estate;
	(void) no_prefetch_walker(queryDesc->planstate, NULL);
	foreach(lc, estate->es_subplanstates)
		(void) no_prefetch_walker((PlanState *) lfirst(lc), NULL);
}

/*
 * Could an EvalPlanQual recheck run the plans of this query level again?
 * Those of a subquery level of a statement that modifies rows or locks
 * them (at this level or one above it).
 */
static bool
level_may_be_rechecked(PlannerInfo *root)
{
	PlannerInfo *r;

	if (root->parent_root == NULL)
		return false;
	for (r = root; r != NULL; r = r->parent_root)
		if (r->parse->commandType != CMD_SELECT ||
			r->parse->rowMarks != NIL || r->parse->hasModifyingCTE)
			return true;
	return false;
}

/*
 * get_relation_info hook: in a query level that a recheck may run again,
 * the indexes of a facade give no bitmaps, so the planner makes no bitmap
 * heap scan of it there (see above).
 */
static void
spindle_get_relation_info(PlannerInfo *root, Oid relid, bool inhparent,
						  RelOptInfo *rel)
{
	if (prev_get_relation_info)
		prev_get_relation_info(root, relid, inhparent, rel);

	if (rel->indexlist != NIL && level_may_be_rechecked(root))
	{
		Relation	r = RelationIdGetRelation(relid);

		if (RelationIsValid(r))
		{
			if (spindle_is_facade(r))
			{
				ListCell   *lc;

				foreach(lc, rel->indexlist)
					((IndexOptInfo *) lfirst(lc))->amhasgetbitmap = false;
			}
			RelationClose(r);
		}
	}
}

/* From _PG_init. */
void
spindle_bitmap_no_prefetch(void)
{
	prev_executor_start = ExecutorStart_hook;
	ExecutorStart_hook = spindle_executor_start;
	prev_get_relation_info = get_relation_info_hook;
	get_relation_info_hook = spindle_get_relation_info;
}

/* ----------------------------------------------------------------
 * ANALYZE: sample blocks of its own
 *
 * ANALYZE samples block numbers below RelationGetNumberOfBlocks(facade)
 * and PrefetchBuffer()s them (maintenance_io_concurrency > 0), which md.c
 * refuses past a missing 1 GB segment (see above).  So its blocks are not
 * the TIDs' virtual blocks: the slots of the directory's spindles, one
 * range after the other (gaps between ranges left out), are cut into
 * sample blocks of 291, and when there are more of those than RELSEG_SIZE,
 * each block ANALYZE asks for stands for `stretch` consecutive ones, of
 * which one, chosen at random, is read and its rows weighted by stretch:
 * the row counts ANALYZE derives stay unbiased, and every block number it
 * prefetches lies in the first segment, which always exists.
 * ----------------------------------------------------------------
 */

/*
 * The slots ANALYZE samples: per spindle of dir, annexes included (in the
 * order of spindle_dir_entry), the first sample slot into start[] (if not
 * NULL), the total as result.
 */
static int64
analyze_slots(SpindleDirectory *dir, int64 *start)
{
	int64		total = 0;
	int			i;

	for (i = 0; i < spindle_dir_nall(dir); i++)
	{
		if (start != NULL)
			start[i] = total;
		total += spindle_effective_capacity(spindle_dir_entry(dir, i));
	}
	return total;
}

/* How many sample blocks each block ANALYZE asks for stands for. */
static int64
analyze_stretch(int64 total)
{
	int64		blocks = (total + SPINDLE_SLOTS_PER_VBLOCK - 1) /
		SPINDLE_SLOTS_PER_VBLOCK;

	return Max((blocks + RELSEG_SIZE - 1) / RELSEG_SIZE, 1);
}

/*
 * The number of blocks ANALYZE samples (the facade's relation_size, in
 * blocks): at most RELSEG_SIZE, so every block number is in segment 0.
 */
BlockNumber
spindle_analyze_nblocks(SpindleDirectory *dir)
{
	int64		total = analyze_slots(dir, NULL);
	int64		blocks = (total + SPINDLE_SLOTS_PER_VBLOCK - 1) /
		SPINDLE_SLOTS_PER_VBLOCK;
	int64		stretch = analyze_stretch(total);

	return (BlockNumber) ((blocks + stretch - 1) / stretch);
}

/* The virtual slot of sample slot c (< s->atotal). */
static int64
analyze_vslot(FacadeScanDesc s, int64 c, SpindleEntry **sp)
{
	int			lo = 0,
				hi = spindle_dir_nall(s->dir) - 1;

	/* the last spindle whose first sample slot is <= c */
	while (lo < hi)
	{
		int			mid = (lo + hi + 1) / 2;

		if (s->astart[mid] <= c)
			lo = mid;
		else
			hi = mid - 1;
	}
	*sp = spindle_dir_entry(s->dir, lo);
	return (*sp)->vbase + (c - s->astart[lo]);
}

static bool
facade_scan_analyze_next_block(TableScanDesc sscan, BlockNumber blockno,
							   BufferAccessStrategy bstrategy)
{
	FacadeScanDesc s = (FacadeScanDesc) sscan;
	int64		block;

	if (s->astart == NULL)
	{
		s->astart = palloc(sizeof(int64) * Max(spindle_dir_nall(s->dir), 1));
		s->atotal = analyze_slots(s->dir, s->astart);
		s->astretch = analyze_stretch(s->atotal);
	}
	block = (int64) blockno * s->astretch;
	if (s->astretch > 1)
		block += (int64) pg_prng_uint64_range(&pg_global_prng_state, 0,
											  s->astretch - 1);
	s->vfirst = block * SPINDLE_SLOTS_PER_VBLOCK;	/* a sample slot here */
	if (s->vfirst >= s->atotal)
		return false;
	s->nv = (int) Min(SPINDLE_SLOTS_PER_VBLOCK, s->atotal - s->vfirst);
	s->pos = 0;
	s->aweight = (double) s->astretch;
	s->astrategy = bstrategy;
	return true;
}

/* Open the spindle of sp for sampling, if it is not the one open. */
static bool
analyze_open(FacadeScanDesc s, SpindleEntry *sp, TupleTableSlot *slot)
{
	if (s->asp == sp)
		return s->aseg != NULL;
	ExecClearTuple(slot);
	if (s->aseg != NULL)
		relation_close(s->aseg, AccessShareLock);
	s->asp = sp;
	s->aseg = spindle_open_segment(s->base.rs_rd, sp, AccessShareLock);
	if (s->aseg != NULL)
		s->anblocks = RelationGetNumberOfBlocks(s->aseg);
	return s->aseg != NULL;
}

static bool
facade_scan_analyze_next_tuple(TableScanDesc sscan, TransactionId OldestXmin,
							   double *liverows, double *deadrows,
							   TupleTableSlot *slot)
{
	FacadeScanDesc s = (FacadeScanDesc) sscan;
	Relation	rel = s->base.rs_rd;

	while (s->pos < s->nv)
	{
		SpindleEntry *sp;
		int64		v = analyze_vslot(s, s->vfirst + s->pos++, &sp);
		ItemPointerData ptid;
		Buffer		buf;
		Page		page;
		OffsetNumber off;
		ItemId		itemid;
		HeapTuple	tuple = &s->atuple;
		bool		sample = false;

		if (spindle_resolve_vslot(rel, s->dir, v, &sp, &ptid) != TID_IN_SPINDLE ||
			!analyze_open(s, sp, slot) ||
			(ItemPointerGetBlockNumber(&ptid) >= s->anblocks &&
			 ItemPointerGetBlockNumber(&ptid) >=
			 (s->anblocks = RelationGetNumberOfBlocks(s->aseg))))
			continue;
		buf = ReadBufferExtended(s->aseg, MAIN_FORKNUM,
								 ItemPointerGetBlockNumber(&ptid), RBM_NORMAL,
								 s->astrategy);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		off = ItemPointerGetOffsetNumber(&ptid);
		if (PageIsNew(page) || off > PageGetMaxOffsetNumber(page))
		{
			UnlockReleaseBuffer(buf);
			continue;
		}
		itemid = PageGetItemId(page, off);
		if (!ItemIdIsNormal(itemid))
		{
			/* pruned: dead, as heap counts it */
			if (ItemIdIsDead(itemid))
				*deadrows += s->aweight;
			UnlockReleaseBuffer(buf);
			continue;
		}
		tuple->t_data = (HeapTupleHeader) PageGetItem(page, itemid);
		tuple->t_len = ItemIdGetLength(itemid);
		tuple->t_tableOid = RelationGetRelid(s->aseg);
		tuple->t_self = ptid;
		switch (HeapTupleSatisfiesVacuum(tuple, OldestXmin, buf))
		{
			case HEAPTUPLE_LIVE:
				sample = true;
				*liverows += s->aweight;
				break;
			case HEAPTUPLE_DEAD:
			case HEAPTUPLE_RECENTLY_DEAD:
				*deadrows += s->aweight;
				break;
			case HEAPTUPLE_INSERT_IN_PROGRESS:
				if (TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetXmin(tuple->t_data)))
				{
					sample = true;
					*liverows += s->aweight;
				}
				break;
			case HEAPTUPLE_DELETE_IN_PROGRESS:
				if (TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetUpdateXid(tuple->t_data)))
					*deadrows += s->aweight;
				else
				{
					sample = true;
					*liverows += s->aweight;
				}
				break;
		}
		if (sample)
			ExecStoreBufferHeapTuple(tuple, slot, buf);
		LockBuffer(buf, BUFFER_LOCK_UNLOCK);
		ReleaseBuffer(buf);
		/*
		 * consumed or moved by a committed entry (or ours): a dead row
		 * (hidden.c)
		 */
		if (sample &&
			spindle_event_hidden(rel, sp, v - sp->vbase, SnapshotSelf))
		{
			ExecClearTuple(slot);
			*liverows -= s->aweight;
			*deadrows += s->aweight;
			continue;
		}
		if (sample)
		{
			identify(s, sp, slot);
			return true;
		}
	}
	return false;
}

/* ----------------------------------------------------------------
 * Index builds
 * ----------------------------------------------------------------
 */
typedef struct BuildState
{
	Relation	facade;
	Relation	seg;
	SpindleEntry *sp;
	IndexBuildCallback callback;
	void	   *callback_state;
	SpindleHide hide;			/* consumed events: not alive (hidden.c) */
} BuildState;

/* Heap gives the physical TID; the event's hidden k gives the virtual one. */
static void
build_callback(Relation index, ItemPointer tid, Datum *values, bool *isnull,
			   bool tupleIsAlive, void *state)
{
	BuildState *bs = (BuildState *) state;
	ItemPointerData vtid;
	Buffer		buf = ReadBuffer(bs->seg, ItemPointerGetBlockNumber(tid));
	Page		page;
	ItemId		itemid;
	HeapTupleData tuple;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	itemid = PageGetItemId(page, ItemPointerGetOffsetNumber(tid));
	if (!ItemIdIsNormal(itemid))
		elog(ERROR, "index build met a pruned event at (%u,%u) of spindle %lld",
			 ItemPointerGetBlockNumber(tid), ItemPointerGetOffsetNumber(tid),
			 (long long) bs->sp->spindle_no);
	tuple.t_data = (HeapTupleHeader) PageGetItem(page, itemid);
	tuple.t_len = ItemIdGetLength(itemid);
	tuple.t_self = *tid;
	spindle_tuple_vtid(bs->sp, &tuple, &vtid);
	UnlockReleaseBuffer(buf);

	/*
	 * An event a committed entry consumed is indexed (an older snapshot
	 * may still fetch it) but left out of unique checks, as heap does with
	 * a RECENTLY_DEAD tuple.  The build's ShareLock keeps writers of
	 * entries out, so none is in progress.
	 */
	if (tupleIsAlive &&
		spindle_hide_event(&bs->hide, bs->sp,
						   spindle_tid_to_vslot(&vtid) - bs->sp->vbase))
		tupleIsAlive = false;
	bs->callback(index, &vtid, values, isnull, tupleIsAlive,
				 bs->callback_state);
}

/* Feed one spindle to the build. */
static double
build_spindle(BuildState *bs, Relation seg, SpindleEntry *sp,
			  Relation index_rel, IndexInfo *index_info, bool anyvisible)
{
	bs->seg = seg;
	bs->sp = sp;
	return spindle_segment_index_build(seg, index_rel, index_info, anyvisible,
									   0, InvalidBlockNumber,
									   build_callback, bs);
}

/*
 * Feed every tuple of every spindle to the index build callback, with its
 * virtual TID.  Serial builds walk the spindles; a participant of a
 * parallel build takes whole spindles from the shared parallel scan.  The
 * caller holds ShareLock (or stronger) on the facade; spindles are locked
 * the same way so that heapam's build sees what it expects.
 */
static double
facade_index_build_range_scan(Relation table_rel, Relation index_rel,
							  IndexInfo *index_info, bool allow_sync,
							  bool anyvisible, bool progress,
							  BlockNumber start_blockno, BlockNumber numblocks,
							  IndexBuildCallback callback,
							  void *callback_state, TableScanDesc scan)
{
	BuildState bs;
	SpindleDirectory *dir;
	double		reltuples = 0;

	if (start_blockno != 0 || numblocks != InvalidBlockNumber)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("block-range index builds are not supported on spindle tables")));

	bs.facade = table_rel;
	bs.callback = callback;
	bs.callback_state = callback_state;
	spindle_hide_begin(&bs.hide, table_rel, SnapshotSelf, true);

	if (scan != NULL && scan->rs_parallel == NULL)
	{
		/*
		 * A caller's own serial scan (amcheck's heapallindexed): the
		 * spindles are walked below, with heapam's choice of snapshot; the
		 * scan is ended as heapam ends the scan it is given.
		 */
		table_endscan(scan);
		scan = NULL;
	}
	if (scan != NULL)
	{
		FacadeScanDesc s = (FacadeScanDesc) scan;

		while (parallel_next_spindle(s))
		{
			/* the build reads the spindle itself */
			table_endscan(s->curscan);
			s->curscan = NULL;
			reltuples += build_spindle(&bs, s->curseg, s->cursp, index_rel,
									   index_info, anyvisible);
			relation_close(s->curseg, NoLock);
			s->curseg = NULL;
			s->cursp = NULL;
		}
		table_endscan(scan);
		spindle_hide_end(&bs.hide);
		return reltuples;
	}

	dir = spindle_directory_acquire(table_rel);
	/* the annexes too */
	for (int i = 0; i < spindle_dir_nall(dir); i++)
	{
		SpindleEntry *sp = spindle_dir_entry(dir, i);
		Relation	seg = spindle_open_segment(table_rel, sp, ShareLock);

		if (seg == NULL)
			continue;
		reltuples += build_spindle(&bs, seg, sp, index_rel,
								   index_info, anyvisible);
		/* the facade's ShareLock keeps writers out; one spindle at a time */
		relation_close(seg, ShareLock);
	}
	spindle_directory_release(dir);
	spindle_hide_end(&bs.hide);
	return reltuples;
}

static void
facade_index_validate_scan(Relation table_rel, Relation index_rel,
						   IndexInfo *index_info, Snapshot snapshot,
						   ValidateIndexState *state)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("CREATE INDEX CONCURRENTLY is not supported on spindle tables")));
}

static bool
facade_scan_sample_next_block(TableScanDesc scan, SampleScanState *scanstate)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("TABLESAMPLE is not supported on spindle tables")));
	return false;
}

static bool
facade_scan_sample_next_tuple(TableScanDesc scan, SampleScanState *scanstate,
							  TupleTableSlot *slot)
{
	return facade_scan_sample_next_block(scan, scanstate);
}

/* Install the scan callbacks into the facade's routine. */
void
spindle_scan_routines(TableAmRoutine *r)
{
	r->scan_begin = facade_scan_begin;
	r->scan_end = facade_scan_end;
	r->scan_rescan = facade_scan_rescan;
	r->scan_getnextslot = facade_scan_getnextslot;
	r->scan_set_tidrange = NULL;
	r->scan_getnextslot_tidrange = NULL;
	r->parallelscan_estimate = facade_parallelscan_estimate;
	r->parallelscan_initialize = facade_parallelscan_initialize;
	r->parallelscan_reinitialize = facade_parallelscan_reinitialize;
	r->scan_bitmap_next_block = facade_scan_bitmap_next_block;
	r->scan_bitmap_next_tuple = facade_scan_bitmap_next_tuple;
	r->scan_analyze_next_block = facade_scan_analyze_next_block;
	r->scan_analyze_next_tuple = facade_scan_analyze_next_tuple;
	r->index_build_range_scan = facade_index_build_range_scan;
	r->index_validate_scan = facade_index_validate_scan;
	r->scan_sample_next_block = facade_scan_sample_next_block;
	r->scan_sample_next_tuple = facade_scan_sample_next_tuple;
}
