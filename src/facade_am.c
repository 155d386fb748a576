/*-------------------------------------------------------------------------
 *
 * facade_am.c
 *	  The "spindle" table access method: row operations and storage.
 *
 * A spindle table stores nothing itself but its chunk map (chunkmap.c).
 * Each operation finds the spindle an event lives in, or the open spindle
 * for a new event, and hands the work to heapam on that spindle's relation,
 * translating TIDs between the spindle's physical ones and the facade's
 * virtual ones on the way in and out.  Scans are in facade_scan.c.
 *
 * Locks: the executor holds the usual lock on the facade.  Each spindle is
 * opened with the same strength (RowExclusiveLock to write, AccessShareLock
 * or RowShareLock to read) and kept locked until the transaction ends; a
 * spindle is only dropped by someone who obtained AccessExclusiveLock on it
 * without waiting, so a spindle in use is never dropped.
 *
 * UPDATE purges the old version (heap_delete with changingPart, which marks
 * it "moved") and appends the new one to the open spindle.  A concurrent
 * UPDATE, DELETE or SELECT FOR UPDATE meeting the old version therefore
 * fails with SQLSTATE 40001, exactly as for a row moved to another
 * partition: there is no update chain to follow across relations.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/heaptoast.h"
#include "access/multixact.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xloginsert.h"
#include "catalog/catalog.h"
#include "catalog/pg_am_d.h"
#include "catalog/storage.h"
#include "catalog/storage_xlog.h"
#include "miscadmin.h"
#include "access/relation.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/predicate.h"
#include "storage/smgr.h"
#include "utils/inval.h"
#include "utils/syscache.h"

#include "spindle.h"

static TableAmRoutine facade_methods;
static const TableAmRoutine *heap_methods;

/* the BulkInsertState whose pinned buffer belongs to this spindle */
static BulkInsertState last_bistate = NULL;
static Oid	last_bistate_segment = InvalidOid;

/* the last spindle for which this backend woke the worker */
static Oid	last_nudged_segment = InvalidOid;

/*
 * Give a slot that holds a tuple of a spindle the identity of the facade:
 * its virtual TID and the facade's OID, in the slot and in the heap tuple
 * it may carry.  A tuple the slot does not own (a scan's current tuple) is
 * not modified: its header is copied into the slot first.
 */
void
spindle_slot_set_identity(TupleTableSlot *slot, Relation facade,
						  ItemPointer vtid)
{
	slot->tts_tid = *vtid;
	slot->tts_tableOid = RelationGetRelid(facade);
	if (TTS_IS_BUFFERTUPLE(slot) || TTS_IS_HEAPTUPLE(slot))
	{
		HeapTupleTableSlot *hslot = (HeapTupleTableSlot *) slot;

		if (hslot->tuple != NULL && !TTS_EMPTY(slot))
		{
			if (hslot->tuple != &hslot->tupdata && !TTS_SHOULDFREE(slot))
			{
				hslot->tupdata = *hslot->tuple;
				hslot->tuple = &hslot->tupdata;
			}
			hslot->tuple->t_self = *vtid;
			hslot->tuple->t_tableOid = RelationGetRelid(facade);
		}
	}
}

/*
 * Find the spindle and physical TID of a virtual TID.  Returns
 * TID_IN_SPINDLE with *sp (a copy, valid after the directory is released)
 * and *ptid set; TID_DEAD when its chunk is unmapped (its spindle was
 * dropped and no index can still hold it); TID_UNKNOWN when the chunk
 * belongs to a spindle this backend cannot see.  An unknown spindle is
 * not necessarily gone: a producer that had to create spindles in its own
 * transaction has placed events in one that nobody else sees until it
 * commits, and their index entries must stay.
 */
TidResolution
spindle_resolve_tid(Relation facade, ItemPointer vtid, SpindleEntry *sp,
					ItemPointer ptid)
{
	uint32		tag;
	SpindleDirectory *dir;
	SpindleEntry *found;

	if (!ItemPointerIsValid(vtid) ||
		!spindle_tid_to_physical(facade, vtid, &tag, ptid))
		return TID_DEAD;
	dir = spindle_directory_acquire(facade);
	found = spindle_find_by_tag(dir, tag);
	if (found == NULL)
	{
		/* maybe a spindle created since the directory was read */
		spindle_directory_release(dir);
		AcceptInvalidationMessages();
		dir = spindle_directory_acquire(facade);
		found = spindle_find_by_tag(dir, tag);
	}
	if (found != NULL)
	{
		*sp = *found;
		sp->vchunk = NULL;
	}
	spindle_directory_release(dir);
	return found != NULL ? TID_IN_SPINDLE : TID_UNKNOWN;
}

/*
 * Make sure new spindles exist for `need` more events.  If nobody else can
 * see the facade yet, or we hold a lock a helper would wait for, create
 * them here; otherwise ask a helper process to create them in its own
 * committed transaction (so that producers never wait for each other's
 * DDL), falling back to creating them here if no helper can run.
 */
static void
obtain_spindles(Relation facade, int64 need, int64 capacity)
{
	int			count;
	int			attempt;

	if (capacity <= 0)
		count = 1;
	else
		count = (int) Min((need + capacity - 1) / capacity, 64);
	count += 1;					/* and one ready ahead */

	if (!spindle_created_here(facade) &&
		!CheckRelationLockedByMe(facade, ShareUpdateExclusiveLock, true))
	{
		/* max_worker_processes may be busy for a moment: try a few times */
		for (attempt = 0; attempt < 5; attempt++)
		{
			if (spindle_request_spindles(facade, count))
			{
				AcceptInvalidationMessages();
				return;
			}
			pg_usleep(20000L);
			CHECK_FOR_INTERRUPTS();
		}
	}

	/*
	 * Create them in our own transaction.  Other producers needing a new
	 * spindle now wait for our commit; readers cannot see these spindles
	 * until then, and treat their index entries as alive meanwhile.
	 */
	spindle_create_spindles(facade, count, true);
	AcceptInvalidationMessages();
}

/*
 * Place nslots tuples in the open spindle(s), in order, and give each slot
 * its virtual TID.  The workhorse of every kind of insert.
 */
static void
place_tuples(Relation facade, TupleTableSlot **slots, int nslots,
			 CommandId cid, int options, BulkInsertState bistate,
			 bool speculative, uint32 specToken)
{
	SpindleDirectory *dir;
	int			done = 0;
	int			retries = 0;

	CheckForSerializableConflictIn(facade, NULL, InvalidBlockNumber);
	dir = spindle_directory_acquire(facade);
	while (done < nslots)
	{

		Relation	seg = NULL;
		SpindleEntry *sp = NULL;
		int			got = 0;
		int			i;
		int			k;

		/*
		 * A directory's starting point comes from this backend's past
		 * inserts; trust it only if the spindle before it is full (then all
		 * before it are: spindles fill in order).
		 */
		if (!dir->hint_checked)
		{
			TimestampTz filled_at;

			if (dir->open_hint > 0 &&
				!spindle_slots_full(dir, dir->open_hint - 1, &filled_at))
				dir->open_hint = 0;
			dir->hint_checked = true;
		}

		for (i = dir->open_hint; i < dir->nspindles; i++)
		{
			seg = try_relation_open(dir->spindles[i].segment, RowExclusiveLock);
			if (seg == NULL)
				continue;
			got = spindle_slots_take(dir, i, nslots - done);
			if (got > 0)
				break;
			relation_close(seg, NoLock);
			seg = NULL;
		}
		if (seg == NULL)
		{
			int64		capacity = dir->events_per_spindle;

			if (++retries > 20)
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("could not find room for new events in spindle table \"%s\"",
								RelationGetRelationName(facade))));
			spindle_directory_release(dir);
			if (retries > 1)
				obtain_spindles(facade, nslots - done, capacity);
			else
				AcceptInvalidationMessages();
			dir = spindle_directory_acquire(facade);
			continue;
		}
		sp = &dir->spindles[i];
		if (i != dir->open_hint)
		{
			dir->open_hint = i;
			spindle_directory_note_open(dir, sp->spindle_no);
		}
		if (i == dir->nspindles - 1 && sp->segment != last_nudged_segment)
		{
			/* the ready spindle is in use: have the worker make the next */
			spindle_worker_nudge();
			last_nudged_segment = sp->segment;
		}

		if (bistate != NULL &&
			(bistate != last_bistate || last_bistate_segment != sp->segment))
		{
			/* its pinned buffer's block number means nothing here */
			ReleaseBulkInsertStatePin(bistate);
			last_bistate = bistate;
			last_bistate_segment = sp->segment;
		}

		if (speculative)
		{
			Assert(got == 1);
			heap_methods->tuple_insert_speculative(seg, slots[done], cid,
												   options,
												   bistate, specToken);
		}
		else if (got == 1)
			heap_methods->tuple_insert(seg, slots[done], cid,
									   options, bistate);
		else
			heap_methods->multi_insert(seg, &slots[done], got, cid,
									   options, bistate);

		for (k = done; k < done + got; k++)
		{
			ItemPointerData vtid;

			spindle_tid_to_virtual(facade, dir, sp, &slots[k]->tts_tid, &vtid);
			spindle_slot_set_identity(slots[k], facade, &vtid);
		}
		relation_close(seg, NoLock);
		done += got;
	}
	spindle_directory_release(dir);
}

static void
facade_tuple_insert(Relation rel, TupleTableSlot *slot, CommandId cid,
					int options, BulkInsertState bistate)
{
	place_tuples(rel, &slot, 1, cid, options, bistate, false, 0);
}

static void
facade_multi_insert(Relation rel, TupleTableSlot **slots, int nslots,
					CommandId cid, int options, BulkInsertState bistate)
{
	place_tuples(rel, slots, nslots, cid, options, bistate, false, 0);
}

static void
facade_tuple_insert_speculative(Relation rel, TupleTableSlot *slot,
								CommandId cid, int options,
								BulkInsertState bistate, uint32 specToken)
{
	place_tuples(rel, &slot, 1, cid, options, bistate, true, specToken);
}

static void
facade_tuple_complete_speculative(Relation rel, TupleTableSlot *slot,
								  uint32 specToken, bool succeeded)
{
	SpindleEntry sp;
	ItemPointerData vtid = slot->tts_tid;
	ItemPointerData ptid;
	Relation	seg;

	if (spindle_resolve_tid(rel, &vtid, &sp, &ptid) != TID_IN_SPINDLE)
		elog(ERROR, "spindle of speculative tuple (%u,%u) not found",
			 ItemPointerGetBlockNumber(&vtid), ItemPointerGetOffsetNumber(&vtid));
	seg = relation_open(sp.segment, RowExclusiveLock);
	slot->tts_tid = ptid;
	heap_methods->tuple_complete_speculative(seg, slot, specToken, succeeded);
	slot->tts_tid = vtid;
	relation_close(seg, NoLock);
}

/* Put a failure's ctid back into virtual terms (it is the target or a marker). */
static void
fix_failure_tid(TM_FailureData *tmfd, ItemPointer ptid, ItemPointer vtid)
{
	if (ItemPointerEquals(&tmfd->ctid, ptid))
		tmfd->ctid = *vtid;
}

static TM_Result
facade_tuple_delete(Relation rel, ItemPointer tid, CommandId cid,
					Snapshot snapshot, Snapshot crosscheck, bool wait,
					TM_FailureData *tmfd, bool changingPart)
{
	SpindleEntry sp;
	ItemPointerData ptid;
	Relation	seg;
	TM_Result	result;

	if (spindle_resolve_tid(rel, tid, &sp, &ptid) != TID_IN_SPINDLE ||
		(seg = try_relation_open(sp.segment, RowExclusiveLock)) == NULL)
		elog(ERROR, "event (%u,%u) of spindle table \"%s\" not found",
			 ItemPointerGetBlockNumber(tid), ItemPointerGetOffsetNumber(tid),
			 RelationGetRelationName(rel));
	result = heap_methods->tuple_delete(seg, &ptid, cid, snapshot, crosscheck,
										wait, tmfd, changingPart);
	if (result != TM_Ok)
		fix_failure_tid(tmfd, &ptid, tid);
	relation_close(seg, NoLock);
	return result;
}

static TM_Result
facade_tuple_update(Relation rel, ItemPointer otid, TupleTableSlot *slot,
					CommandId cid, Snapshot snapshot, Snapshot crosscheck,
					bool wait, TM_FailureData *tmfd,
					LockTupleMode *lockmode, bool *update_indexes)
{
	TM_Result	result;

	/* purge the old version, marking it moved: nothing follows it */
	result = facade_tuple_delete(rel, otid, cid, snapshot, crosscheck, wait,
								 tmfd, true);
	*lockmode = LockTupleExclusive;
	if (result != TM_Ok)
		return result;
	place_tuples(rel, &slot, 1, cid, 0, NULL, false, 0);
	*update_indexes = true;
	return TM_Ok;
}

static TM_Result
facade_tuple_lock(Relation rel, ItemPointer tid, Snapshot snapshot,
				  TupleTableSlot *slot, CommandId cid, LockTupleMode mode,
				  LockWaitPolicy wait_policy, uint8 flags,
				  TM_FailureData *tmfd)
{
	SpindleEntry sp;
	ItemPointerData ptid;
	ItemPointerData vtid = *tid;
	Relation	seg;
	TM_Result	result;

	if (spindle_resolve_tid(rel, tid, &sp, &ptid) != TID_IN_SPINDLE ||
		(seg = try_relation_open(sp.segment, RowShareLock)) == NULL)
		elog(ERROR, "event (%u,%u) of spindle table \"%s\" not found",
			 ItemPointerGetBlockNumber(tid), ItemPointerGetOffsetNumber(tid),
			 RelationGetRelationName(rel));
	result = heap_methods->tuple_lock(seg, &ptid, snapshot, slot, cid, mode,
									  wait_policy, flags, tmfd);
	/* heap never moves to another version here: there are no chains */
	*tid = vtid;
	fix_failure_tid(tmfd, &ptid, &vtid);
	if (!TTS_EMPTY(slot))
		spindle_slot_set_identity(slot, rel, &vtid);
	relation_close(seg, NoLock);
	return result;
}

static bool
facade_tuple_fetch_row_version(Relation rel, ItemPointer tid,
							   Snapshot snapshot, TupleTableSlot *slot)
{
	SpindleEntry sp;
	ItemPointerData ptid;
	ItemPointerData vtid = *tid;
	Relation	seg;
	bool		found;

	if (spindle_resolve_tid(rel, tid, &sp, &ptid) != TID_IN_SPINDLE ||
		(seg = try_relation_open(sp.segment, AccessShareLock)) == NULL)
		return false;
	if (ItemPointerGetBlockNumber(&ptid) >= RelationGetNumberOfBlocks(seg))
		found = false;
	else
		found = heap_methods->tuple_fetch_row_version(seg, &ptid, snapshot, slot);
	if (found)
		spindle_slot_set_identity(slot, rel, &vtid);
	relation_close(seg, NoLock);
	return found;
}

static bool
facade_tuple_tid_valid(TableScanDesc scan, ItemPointer tid)
{
	return ItemPointerIsValid(tid) &&
		ItemPointerGetBlockNumber(tid) < SPINDLE_VIRTUAL_BLOCKS &&
		ItemPointerGetOffsetNumber(tid) <= MaxHeapTuplesPerPage;
}

static void
facade_tuple_get_latest_tid(TableScanDesc scan, ItemPointer tid)
{
	/* versions never chain inside a spindle: the TID is the latest */
}

static bool
facade_tuple_satisfies_snapshot(Relation rel, TupleTableSlot *slot,
								Snapshot snapshot)
{
	return heap_methods->tuple_satisfies_snapshot(rel, slot, snapshot);
}

/* ----------------------------------------------------------------
 * Index fetches
 * ----------------------------------------------------------------
 */
typedef struct FacadeIndexFetch
{
	IndexFetchTableData base;
	int64		spindle_no;		/* spindle of hfetch, or 0 */
	Relation	seg;
	IndexFetchTableData *hfetch;
} FacadeIndexFetch;

static IndexFetchTableData *
facade_index_fetch_begin(Relation rel)
{
	FacadeIndexFetch *f = palloc0(sizeof(FacadeIndexFetch));

	f->base.rel = rel;
	return &f->base;
}

static void
facade_index_fetch_close_spindle(FacadeIndexFetch *f)
{
	if (f->hfetch != NULL)
	{
		heap_methods->index_fetch_end(f->hfetch);
		relation_close(f->seg, NoLock);
	}
	f->hfetch = NULL;
	f->seg = NULL;
	f->spindle_no = 0;
}

static void
facade_index_fetch_reset(IndexFetchTableData *scan)
{
	FacadeIndexFetch *f = (FacadeIndexFetch *) scan;

	if (f->hfetch != NULL)
		heap_methods->index_fetch_reset(f->hfetch);
}

static void
facade_index_fetch_end(IndexFetchTableData *scan)
{
	FacadeIndexFetch *f = (FacadeIndexFetch *) scan;

	facade_index_fetch_close_spindle(f);
	pfree(f);
}

static bool
facade_index_fetch_tuple(IndexFetchTableData *scan, ItemPointer tid,
						 Snapshot snapshot, TupleTableSlot *slot,
						 bool *call_again, bool *all_dead)
{
	FacadeIndexFetch *f = (FacadeIndexFetch *) scan;
	Relation	rel = f->base.rel;
	SpindleEntry sp;
	ItemPointerData ptid;
	ItemPointerData vtid = *tid;
	bool		found;

	*call_again = false;
	if (all_dead)
		*all_dead = false;
	switch (spindle_resolve_tid(rel, tid, &sp, &ptid))
	{
		case TID_DEAD:
			/* its spindle was dropped: dead to everyone */
			if (all_dead)
				*all_dead = true;
			return false;
		case TID_UNKNOWN:
			/* in a spindle we cannot see: not visible to us, maybe alive */
			return false;
		case TID_IN_SPINDLE:
			break;
	}
	if (f->spindle_no != sp.spindle_no)
	{
		facade_index_fetch_close_spindle(f);
		f->seg = try_relation_open(sp.segment, AccessShareLock);
		if (f->seg == NULL)
			return false;		/* dropped since: its index entries go later */
		f->hfetch = heap_methods->index_fetch_begin(f->seg);
		f->spindle_no = sp.spindle_no;
	}
	if (ItemPointerGetBlockNumber(&ptid) >= RelationGetNumberOfBlocks(f->seg))
		return false;
	found = heap_methods->index_fetch_tuple(f->hfetch, &ptid, snapshot, slot,
											call_again, all_dead);
	if (found)
		spindle_slot_set_identity(slot, rel, &vtid);
	return found;
}

/*
 * Which index entries may go: hand each spindle's share of the TIDs to
 * heapam, which also computes the conflict horizon for standbys.  TIDs in
 * unmapped chunks are deletable; TIDs of spindles we cannot see are not.
 */
static TransactionId
facade_index_delete_tuples(Relation rel, TM_IndexDeleteOp *delstate)
{
	TransactionId result = InvalidTransactionId;
	int			n = delstate->ndeltids;
	int64	   *spindle_of = palloc(sizeof(int64) * n);
	Oid		   *segment_of = palloc(sizeof(Oid) * n);
	ItemPointerData *ptids = palloc(sizeof(ItemPointerData) * n);
	bool	   *done = palloc0(sizeof(bool) * n);
	int			i;

	for (i = 0; i < n; i++)
	{
		SpindleEntry sp;
		TM_IndexDelete *d = &delstate->deltids[i];

		switch (spindle_resolve_tid(rel, &d->tid, &sp, &ptids[i]))
		{
			case TID_DEAD:
				delstate->status[d->id].knowndeletable = true;
				done[i] = true;
				continue;
			case TID_UNKNOWN:
				/* maybe an uncommitted spindle: leave the entry alone */
				done[i] = true;
				continue;
			case TID_IN_SPINDLE:
				break;
		}
		spindle_of[i] = sp.spindle_no;
		segment_of[i] = sp.segment;
	}

	for (i = 0; i < n; i++)
	{
		TM_IndexDeleteOp sub;
		Relation	seg;
		int			j,
					m = 0;
		TransactionId xid;

		if (done[i])
			continue;
		sub = *delstate;
		sub.deltids = palloc(sizeof(TM_IndexDelete) * n);
		sub.status = palloc(sizeof(TM_IndexStatus) * n);
		for (j = i; j < n; j++)
		{
			if (done[j] || spindle_of[j] != spindle_of[i])
				continue;
			sub.deltids[m].tid = ptids[j];
			sub.deltids[m].id = m;
			sub.status[m] = delstate->status[delstate->deltids[j].id];
			sub.status[m].idxoffnum = j;	/* remember where it came from */
			m++;
			done[j] = true;
		}
		sub.ndeltids = m;
		seg = try_relation_open(segment_of[i], AccessShareLock);
		if (seg == NULL)
			continue;			/* dropped since: cleanup removes them */
		/* heap_index_delete_tuples may reorder and shorten sub.deltids */
		xid = heap_methods->index_delete_tuples(seg, &sub);
		for (j = 0; j < sub.ndeltids; j++)
		{
			TM_IndexStatus *st = &sub.status[sub.deltids[j].id];
			int			orig = st->idxoffnum;

			delstate->status[delstate->deltids[orig].id].knowndeletable =
				st->knowndeletable;
		}
		relation_close(seg, NoLock);
		if (TransactionIdIsValid(xid) &&
			(!TransactionIdIsValid(result) || TransactionIdFollows(xid, result)))
			result = xid;
	}
	return result;
}

/* ----------------------------------------------------------------
 * Storage of the facade itself: the chunk map
 * ----------------------------------------------------------------
 */
static void
facade_relation_set_new_filenode(Relation rel, const RelFileNode *newrnode,
								 char persistence, TransactionId *freezeXid,
								 MultiXactId *minmulti)
{
	SMgrRelation srel;

	/* the facade holds no tuples: no xid horizon of its own */
	*freezeXid = InvalidTransactionId;
	*minmulti = InvalidMultiXactId;

	srel = RelationCreateStorage(*newrnode, persistence, true);
	spindle_chunkmap_init_fork(rel, srel, MAIN_FORKNUM,
							   persistence == RELPERSISTENCE_PERMANENT &&
							   XLogIsNeeded());
	if (persistence == RELPERSISTENCE_UNLOGGED)
	{
		smgrcreate(srel, INIT_FORKNUM, false);
		log_smgrcreate(newrnode, INIT_FORKNUM);
		spindle_chunkmap_init_fork(rel, srel, INIT_FORKNUM, true);
	}
	smgrclose(srel);

	/* TRUNCATE of an existing table: its spindles go too */
	if (SearchSysCacheExists1(RELOID, ObjectIdGetDatum(RelationGetRelid(rel))))
		spindle_drop_all_spindles(rel);
}

static void
facade_relation_nontransactional_truncate(Relation rel)
{
	RelationTruncate(rel, 0);
	spindle_chunkmap_init_fork(rel, RelationGetSmgr(rel), MAIN_FORKNUM,
							   RelationNeedsWAL(rel));
	if (rel->rd_rel->relpersistence == RELPERSISTENCE_UNLOGGED)
	{
		smgrtruncate(RelationGetSmgr(rel), (ForkNumber[]) {INIT_FORKNUM},
					 1, (BlockNumber[]) {0});
		spindle_chunkmap_init_fork(rel, RelationGetSmgr(rel), INIT_FORKNUM, true);
	}
	spindle_drop_all_spindles(rel);
}

static void
facade_relation_copy_data(Relation rel, const RelFileNode *newrnode)
{
	SMgrRelation dstrel;

	FlushRelationBuffers(rel);
	dstrel = RelationCreateStorage(*newrnode, rel->rd_rel->relpersistence, true);
	RelationCopyStorage(RelationGetSmgr(rel), dstrel, MAIN_FORKNUM,
						rel->rd_rel->relpersistence);
	if (rel->rd_rel->relpersistence == RELPERSISTENCE_UNLOGGED)
	{
		smgrcreate(dstrel, INIT_FORKNUM, false);
		log_smgrcreate(newrnode, INIT_FORKNUM);
		RelationCopyStorage(RelationGetSmgr(rel), dstrel, INIT_FORKNUM,
							RELPERSISTENCE_PERMANENT);
	}
	RelationDropStorage(rel);
	smgrclose(dstrel);
}

/*
 * VACUUM FULL and CLUSTER: the spindles stay as they are (they are already
 * compact); the new storage of the facade gets a copy of the chunk map so
 * that every TID keeps its meaning, and the indexes are rebuilt from the
 * same spindles afterwards.
 */
static void
facade_relation_copy_for_cluster(Relation OldTable, Relation NewTable,
								 Relation OldIndex, bool use_sort,
								 TransactionId OldestXmin,
								 TransactionId *xid_cutoff,
								 MultiXactId *multi_cutoff,
								 double *num_tuples, double *tups_vacuumed,
								 double *tups_recently_dead)
{
	spindle_chunkmap_copy(OldTable, NewTable);
	*num_tuples = 0;
	*tups_vacuumed = 0;
	*tups_recently_dead = 0;
	*xid_cutoff = InvalidTransactionId;
	*multi_cutoff = InvalidMultiXactId;
}

/*
 * VACUUM of a spindle table: remove the index entries of spindles whose
 * drop has committed and free their TID space, and let each spindle's own
 * vacuum (segment_am.c) do what it may.  The caller holds
 * ShareUpdateExclusiveLock on the facade.
 */
static void
facade_relation_vacuum(Relation rel, struct VacuumParams *params,
					   BufferAccessStrategy bstrategy)
{
	spindle_cleanup_dropped(rel);
	spindle_vacuum_spindles(rel, params, bstrategy);
}

/*
 * Size of the main fork as the facade's block numbers see it: the mapped
 * chunks, numbered densely (ANALYZE samples these blocks; facade_scan.c
 * maps them back).  Other forks are empty.
 */
static uint64
facade_relation_size(Relation rel, ForkNumber forkNumber)
{
	uint32		entries[SPINDLE_NCHUNKS];

	if (forkNumber != MAIN_FORKNUM && forkNumber != InvalidForkNumber)
		return 0;
	return (uint64) spindle_chunkmap_mapped(rel, entries) *
		SPINDLE_CHUNK_BLOCKS * BLCKSZ;
}

static bool
facade_relation_needs_toast_table(Relation rel)
{
	/* each spindle has its own TOAST table */
	return false;
}

static Oid
facade_relation_toast_am(Relation rel)
{
	return HEAP_TABLE_AM_OID;
}

/* Size estimate for the planner: the sum of the spindles' estimates. */
static void
facade_relation_estimate_size(Relation rel, int32 *attr_widths,
							  BlockNumber *pages, double *tuples,
							  double *allvisfrac)
{
	SpindleDirectory *dir = spindle_directory_acquire(rel);
	int			i;

	*pages = 0;
	*tuples = 0;
	*allvisfrac = 0;
	for (i = 0; i < dir->nspindles; i++)
	{
		Relation	seg = try_relation_open(dir->spindles[i].segment,
											AccessShareLock);
		BlockNumber p;
		double		t,
					a;

		if (seg == NULL)
			continue;
		heap_methods->relation_estimate_size(seg, attr_widths, &p, &t, &a);
		*pages += p;
		*tuples += t;
		relation_close(seg, NoLock);
	}
	spindle_directory_release(dir);
}

static const TupleTableSlotOps *
facade_slot_callbacks(Relation relation)
{
	return &TTSOpsBufferHeapTuple;
}

const TableAmRoutine *
spindle_facade_routine(void)
{
	if (heap_methods == NULL)
	{
		heap_methods = GetHeapamTableAmRoutine();
		facade_methods = *heap_methods;

		facade_methods.slot_callbacks = facade_slot_callbacks;
		spindle_scan_routines(&facade_methods);

		facade_methods.index_fetch_begin = facade_index_fetch_begin;
		facade_methods.index_fetch_reset = facade_index_fetch_reset;
		facade_methods.index_fetch_end = facade_index_fetch_end;
		facade_methods.index_fetch_tuple = facade_index_fetch_tuple;

		facade_methods.tuple_fetch_row_version = facade_tuple_fetch_row_version;
		facade_methods.tuple_tid_valid = facade_tuple_tid_valid;
		facade_methods.tuple_get_latest_tid = facade_tuple_get_latest_tid;
		facade_methods.tuple_satisfies_snapshot = facade_tuple_satisfies_snapshot;
		facade_methods.index_delete_tuples = facade_index_delete_tuples;

		facade_methods.tuple_insert = facade_tuple_insert;
		facade_methods.tuple_insert_speculative = facade_tuple_insert_speculative;
		facade_methods.tuple_complete_speculative = facade_tuple_complete_speculative;
		facade_methods.multi_insert = facade_multi_insert;
		facade_methods.tuple_delete = facade_tuple_delete;
		facade_methods.tuple_update = facade_tuple_update;
		facade_methods.tuple_lock = facade_tuple_lock;
		facade_methods.finish_bulk_insert = NULL;

		facade_methods.relation_set_new_filenode = facade_relation_set_new_filenode;
		facade_methods.relation_nontransactional_truncate = facade_relation_nontransactional_truncate;
		facade_methods.relation_copy_data = facade_relation_copy_data;
		facade_methods.relation_copy_for_cluster = facade_relation_copy_for_cluster;
		facade_methods.relation_vacuum = facade_relation_vacuum;

		facade_methods.relation_size = facade_relation_size;
		facade_methods.relation_needs_toast_table = facade_relation_needs_toast_table;
		facade_methods.relation_toast_am = facade_relation_toast_am;
		facade_methods.relation_estimate_size = facade_relation_estimate_size;
	}
	return &facade_methods;
}

const TableAmRoutine *
spindle_heap_methods(void)
{
	(void) spindle_facade_routine();
	return heap_methods;
}
