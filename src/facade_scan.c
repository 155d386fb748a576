/*-------------------------------------------------------------------------
 *
 * facade_scan.c
 *	  Scans of a spindle table: sequential (spindle after spindle, oldest
 *	  first), parallel (by virtual block), bitmap, ANALYZE sampling and
 *	  index builds.  Each delegates to heapam on one spindle at a time and
 *	  gives every tuple its virtual TID.
 *
 * A scan pins the table's directory for its lifetime, so the list of
 * spindles it walks is the one that existed when it began; spindles that
 * were dropped since are skipped (try_relation_open), and spindles created
 * since hold nothing its snapshot can see.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/relscan.h"
#include "access/tableam.h"
#include "catalog/index.h"
#include "nodes/tidbitmap.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/snapmgr.h"
#include "storage/predicate.h"
#include "storage/spin.h"
#include "utils/inval.h"
#include "utils/memutils.h"

#include "spindle.h"

typedef struct FacadeScanDescData
{
	TableScanDescData base;
	SpindleDirectory *dir;		/* pinned */
	uint32		heap_flags;		/* flags for the per-spindle heap scans */

	/* serial scans: position in dir->spindles */
	int			cur;			/* -1 before the first, nspindles after last */
	Relation	curseg;
	TableScanDesc curscan;
	SpindleEntry *cursp;

	/* parallel scans */
	ParallelBlockTableScanWorkerData pwork;
	bool		pstarted;

	/* bitmap scans */
	TBMIterateResult *bmres;	/* copy of the current TBM page, physical */

	/* ANALYZE: mapped virtual chunks, in order */
	int			nmapped;
	uint32	   *mapped;
} FacadeScanDescData;

typedef FacadeScanDescData *FacadeScanDesc;

static void
close_current(FacadeScanDesc s)
{
	if (s->curscan != NULL)
	{
		table_endscan(s->curscan);
		relation_close(s->curseg, NoLock);
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

	close_current(s);
	seg = try_relation_open(s->dir->spindles[i].segment, AccessShareLock);
	if (seg == NULL)
		return false;
	s->curseg = seg;
	s->cursp = &s->dir->spindles[i];
	oldcxt = MemoryContextSwitchTo(GetMemoryChunkContext(s));
	s->curscan = spindle_heap_methods()->scan_begin(seg, s->base.rs_snapshot,
													s->base.rs_nkeys,
													s->base.rs_key, NULL,
													s->heap_flags);
	MemoryContextSwitchTo(oldcxt);
	return true;
}

/* Same, but by spindle tag (bitmap, parallel and ANALYZE scans). */
static bool
open_spindle_by_tag(FacadeScanDesc s, uint32 tag)
{
	int			i;

	if (s->cursp != NULL && spindle_tag(s->cursp->spindle_no) == tag)
		return true;
	for (i = 0; i < s->dir->nspindles; i++)
		if (spindle_tag(s->dir->spindles[i].spindle_no) == tag)
			return open_spindle(s, i);
	close_current(s);
	return false;
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
	s->dir = spindle_directory_acquire(rel);
	/* we own the snapshot; spindles are read in order, never synchronised */
	s->heap_flags = flags & ~(SO_TEMP_SNAPSHOT | SO_ALLOW_SYNC);
	s->cur = -1;

	if (snapshot && IsMVCCSnapshot(snapshot) && (flags & SO_TYPE_SEQSCAN))
		PredicateLockRelation(rel, snapshot);

	if (flags & SO_TYPE_ANALYZE)
	{
		uint32		entries[SPINDLE_NCHUNKS];
		int			i;

		spindle_chunkmap_mapped(rel, entries);
		s->mapped = palloc(sizeof(uint32) * SPINDLE_NCHUNKS);
		for (i = 0; i < SPINDLE_NCHUNKS; i++)
			if (entries[i] != 0)
				s->mapped[s->nmapped++] = entries[i];
	}
	if (flags & SO_TYPE_BITMAPSCAN)
		s->bmres = palloc0(offsetof(TBMIterateResult, offsets) +
						   sizeof(OffsetNumber) * MaxHeapTuplesPerPage);
	return &s->base;
}

static void
facade_scan_end(TableScanDesc sscan)
{
	FacadeScanDesc s = (FacadeScanDesc) sscan;

	close_current(s);
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
	close_current(s);
	s->cur = -1;
	s->pstarted = false;
}

/* Give the slot's tuple its virtual identity. */
static void
identify(FacadeScanDesc s, TupleTableSlot *slot)
{
	ItemPointerData vtid;

	spindle_tid_to_virtual(s->base.rs_rd, s->dir, s->cursp, &slot->tts_tid,
						   &vtid);
	spindle_slot_set_identity(slot, s->base.rs_rd, &vtid);
}

/*
 * The next block of a parallel scan, as (spindle, physical block) with the
 * spindle's heap scan limited to that block.  False at the end.
 */
static bool
parallel_next_block(FacadeScanDesc s)
{
	ParallelBlockTableScanDesc pbscan =
		(ParallelBlockTableScanDesc) s->base.rs_parallel;
	Relation	rel = s->base.rs_rd;

	if (!s->pstarted)
	{
		table_block_parallelscan_startblock_init(rel, &s->pwork, pbscan);
		s->pstarted = true;
	}
	for (;;)
	{
		BlockNumber vblock = table_block_parallelscan_nextpage(rel, &s->pwork,
															   pbscan);
		ItemPointerData vtid,
					ptid;
		uint32		tag;

		if (vblock == InvalidBlockNumber)
			return false;
		ItemPointerSet(&vtid, vblock, FirstOffsetNumber);
		if (!spindle_tid_to_physical(rel, &vtid, &tag, &ptid))
			continue;
		if (!open_spindle_by_tag(s, tag))
			continue;
		if (ItemPointerGetBlockNumber(&ptid) >=
			RelationGetNumberOfBlocks(s->curseg))
			continue;
		heap_rescan(s->curscan, NULL, false, false, false, false);
		heap_setscanlimits(s->curscan, ItemPointerGetBlockNumber(&ptid), 1);
		return true;
	}
}

static bool
facade_scan_getnextslot(TableScanDesc sscan, ScanDirection direction,
						TupleTableSlot *slot)
{
	FacadeScanDesc s = (FacadeScanDesc) sscan;

	if (s->base.rs_parallel != NULL)
	{
		for (;;)
		{
			if (s->curscan != NULL && s->pstarted &&
				heap_getnextslot(s->curscan, ForwardScanDirection, slot))
			{
				identify(s, slot);
				return true;
			}
			if (!parallel_next_block(s))
			{
				ExecClearTuple(slot);
				return false;
			}
		}
	}

	for (;;)
	{
		if (s->curscan != NULL)
		{
			if (heap_getnextslot(s->curscan, direction, slot))
			{
				identify(s, slot);
				return true;
			}
			close_current(s);
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
			if (s->cur >= s->dir->nspindles - 1)
			{
				s->cur = s->dir->nspindles;
				ExecClearTuple(slot);
				return false;
			}
			s->cur++;
		}
		(void) open_spindle(s, s->cur);
	}
}

/* ----------------------------------------------------------------
 * Parallel scans: the whole virtual block space, handed out by core
 * ----------------------------------------------------------------
 */
static Size
facade_parallelscan_estimate(Relation rel)
{
	return sizeof(ParallelBlockTableScanDescData);
}

static Size
facade_parallelscan_initialize(Relation rel, ParallelTableScanDesc pscan)
{
	ParallelBlockTableScanDesc bpscan = (ParallelBlockTableScanDesc) pscan;

	bpscan->base.phs_relid = RelationGetRelid(rel);
	bpscan->phs_nblocks = SPINDLE_VIRTUAL_BLOCKS;
	bpscan->base.phs_syncscan = false;
	SpinLockInit(&bpscan->phs_mutex);
	bpscan->phs_startblock = InvalidBlockNumber;
	pg_atomic_init_u64(&bpscan->phs_nallocated, 0);
	return sizeof(ParallelBlockTableScanDescData);
}

/* ----------------------------------------------------------------
 * Bitmap scans
 * ----------------------------------------------------------------
 */
static bool
facade_scan_bitmap_next_block(TableScanDesc sscan, TBMIterateResult *tbmres)
{
	FacadeScanDesc s = (FacadeScanDesc) sscan;
	ItemPointerData vtid,
				ptid;
	uint32		tag;

	ItemPointerSet(&vtid, tbmres->blockno, FirstOffsetNumber);
	if (!spindle_tid_to_physical(s->base.rs_rd, &vtid, &tag, &ptid) ||
		!open_spindle_by_tag(s, tag))
		return false;

	s->bmres->blockno = ItemPointerGetBlockNumber(&ptid);
	s->bmres->ntuples = tbmres->ntuples;
	s->bmres->recheck = tbmres->recheck;
	if (tbmres->ntuples > 0)
		memcpy(s->bmres->offsets, tbmres->offsets,
			   sizeof(OffsetNumber) * tbmres->ntuples);
	return spindle_heap_methods()->scan_bitmap_next_block(s->curscan, s->bmres);
}

static bool
facade_scan_bitmap_next_tuple(TableScanDesc sscan, TBMIterateResult *tbmres,
							  TupleTableSlot *slot)
{
	FacadeScanDesc s = (FacadeScanDesc) sscan;

	if (s->curscan == NULL ||
		!spindle_heap_methods()->scan_bitmap_next_tuple(s->curscan, s->bmres,
														slot))
		return false;
	identify(s, slot);
	return true;
}

/* ----------------------------------------------------------------
 * ANALYZE: block i is block i % CHUNK of the (i / CHUNK)-th mapped chunk
 * ----------------------------------------------------------------
 */
static bool
facade_scan_analyze_next_block(TableScanDesc sscan, BlockNumber blockno,
							   BufferAccessStrategy bstrategy)
{
	FacadeScanDesc s = (FacadeScanDesc) sscan;
	uint32		rank = blockno / SPINDLE_CHUNK_BLOCKS;
	uint32		entry;
	BlockNumber pblock;

	if (rank >= (uint32) s->nmapped)
		return false;
	entry = s->mapped[rank];
	if (!open_spindle_by_tag(s, spindle_entry_tag(entry)))
		return false;
	pblock = spindle_entry_pchunk(entry) * SPINDLE_CHUNK_BLOCKS +
		blockno % SPINDLE_CHUNK_BLOCKS;
	if (pblock >= RelationGetNumberOfBlocks(s->curseg))
		return false;
	return spindle_heap_methods()->scan_analyze_next_block(s->curscan, pblock,
														   bstrategy);
}

static bool
facade_scan_analyze_next_tuple(TableScanDesc sscan, TransactionId OldestXmin,
							   double *liverows, double *deadrows,
							   TupleTableSlot *slot)
{
	FacadeScanDesc s = (FacadeScanDesc) sscan;

	if (s->curscan == NULL ||
		!spindle_heap_methods()->scan_analyze_next_tuple(s->curscan, OldestXmin,
														 liverows, deadrows,
														 slot))
		return false;
	identify(s, slot);
	return true;
}

/* ----------------------------------------------------------------
 * Index builds
 * ----------------------------------------------------------------
 */
typedef struct BuildState
{
	Relation	facade;
	SpindleDirectory *dir;
	SpindleEntry *sp;
	IndexBuildCallback callback;
	void	   *callback_state;
} BuildState;

static void
build_callback(Relation index, ItemPointer tid, Datum *values, bool *isnull,
			   bool tupleIsAlive, void *state)
{
	BuildState *bs = (BuildState *) state;
	ItemPointerData vtid;

	spindle_tid_to_virtual(bs->facade, bs->dir, bs->sp, tid, &vtid);
	bs->callback(index, &vtid, values, isnull, tupleIsAlive,
				 bs->callback_state);
}

/*
 * Feed every tuple of every spindle to the index build callback, with its
 * virtual TID.  Serial builds walk the spindles; a participant of a
 * parallel build takes virtual blocks from the shared parallel scan.  The
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
	double		reltuples = 0;

	if (start_blockno != 0 || numblocks != InvalidBlockNumber)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("block-range index builds are not supported on spindle tables")));

	bs.facade = table_rel;
	bs.callback = callback;
	bs.callback_state = callback_state;

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

		bs.dir = s->dir;
		while (parallel_next_block(s))
		{
			bs.sp = s->cursp;
			reltuples += spindle_segment_index_build(s->curseg, index_rel,
													 index_info, anyvisible,
													 ((HeapScanDesc) s->curscan)->rs_startblock,
													 1, build_callback, &bs);
		}
		table_endscan(scan);
		return reltuples;
	}

	bs.dir = spindle_directory_acquire(table_rel);
	for (int i = 0; i < bs.dir->nspindles; i++)
	{
		Relation	seg = try_relation_open(bs.dir->spindles[i].segment,
											ShareLock);

		if (seg == NULL)
			continue;
		bs.sp = &bs.dir->spindles[i];
		reltuples += spindle_segment_index_build(seg, index_rel, index_info,
												 anyvisible, 0,
												 InvalidBlockNumber,
												 build_callback, &bs);
		relation_close(seg, NoLock);
	}
	spindle_directory_release(bs.dir);
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
	r->parallelscan_reinitialize = table_block_parallelscan_reinitialize;
	r->scan_bitmap_next_block = facade_scan_bitmap_next_block;
	r->scan_bitmap_next_tuple = facade_scan_bitmap_next_tuple;
	r->scan_analyze_next_block = facade_scan_analyze_next_block;
	r->scan_analyze_next_tuple = facade_scan_analyze_next_tuple;
	r->index_build_range_scan = facade_index_build_range_scan;
	r->index_validate_scan = facade_index_validate_scan;
	r->scan_sample_next_block = facade_scan_sample_next_block;
	r->scan_sample_next_tuple = facade_scan_sample_next_tuple;
}
