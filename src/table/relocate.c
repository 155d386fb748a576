/*-------------------------------------------------------------------------
 *
 * relocate.c
 *	  Moving events of a queue table into annexes (compaction of sparse
 *	  spindles, docs/design.md "Compaction of sparse spindles", section 3):
 *	  the one move of a copy both movers share (spindle_relocate_event),
 *	  the worker's relocator (spindle_relocator_begin, spindle_relocate_scan,
 *	  spindle_relocate_batch; which spindles it empties is the queue
 *	  layer's choice, queue/queue_compact.c) and the test-only
 *	  spindle._relocate(rel, msg_id, generation).
 *
 * A move of copy k of spindle or annex S, in the current (sub)transaction,
 * whose xid is the entry's:
 *
 *	1. before anything is taken: the copy must be live (no hint bit read
 *	   is written: copy_state), not moved already (no entry of a live
 *	   mover in tree 3) and, in an event spindle, not consumed (no consume
 *	   log entry of a live consumer); an annex slot is then reserved
 *	   (spindle_annex_reserve);
 *	2. under a share lock of the copy's page (and nothing else): the same
 *	   checks of the page and tree 3 again; the tuple is copied and the
 *	   relocation entry (S, k) -> (A, k') is written (relocation.c);
 *	3. with no buffer lock held: the copy goes into the annex with the same
 *	   columns (msg_id, visible_at, enqueued_at included) and the same
 *	   hidden append time, by heap's insert (TOAST values re-fetched and
 *	   written by heap's toaster), its slot map entry and one entry per
 *	   index (annex.c); the entry being in tree 3 already, a unique index's
 *	   check finds the old copy hidden by this transaction; then tree 4
 *	   gets the event's oldest copy if it has none.  The move counts as a
 *	   purge of S (counters.c, applied at commit) and unsettles S for the
 *	   drop rule (touched.c), which then finds the old copy dead once the
 *	   mover committed before the horizon (maintenance.c).
 *
 * The old copy is never written: no xmax, no hint bit, so no page of S is
 * dirtied or imaged (design, section 3, step 3).  Consumers (dequeue,
 * read, ack, set_visibility, dead-letter moves: queue/queue.c) follow the
 * move: they resolve a msg_id through trees 4 and 3 to the copy it is at
 * and purge that copy, an annex's by xmax (docs/design.md, "Step 3 as
 * built").  A consumer takes an event under its page's exclusive lock and
 * writes its consume log entry before letting it go; the move checks the
 * log again under the page's share lock (check_and_mark), so one of the
 * two finds the other's mark.
 *
 * The worker's relocator (section 3, "Serialisation" and "Batches"): one
 * per table, with the table RowExclusiveLock, its consumer relation
 * RowExclusiveLock and the trees' writer locks, all taken without waiting
 * (a round is given up rather than queue behind DDL or another relocator)
 * and kept to the end of the transaction.  A batch of moves runs in a
 * subtransaction as the table's owner under SECURITY_RESTRICTED_OPERATION,
 * with a new GUC nest level and search_path = pg_catalog, pg_temp
 * (REINDEX's model since CVE-2022-1552): no trigger, rule or RI check
 * runs, and an index expression runs with the owner's rights.  A batch
 * that fails (an index expression that errors, a full disk) is rolled
 * back and its events are moved again one per subtransaction, so that
 * only the one whose copy fails is skipped.  A query cancel (statement
 * timeout: the worker arms one around its pass), a lock timeout, a
 * shutdown or an error above ERROR is not skipped: the subtransaction is
 * rolled back and the error propagates, ending the pass (stops_the_pass).  Each moved source spindle is
 * held RowExclusiveLock to the end of the transaction (so that its purge
 * counter takes the moves at commit, counters.c).
 *
 * Locks of spindle._relocate: the same, waited for; superusers only.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/multixact.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "storage/procarray.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "table/spindle_table.h"

PG_FUNCTION_INFO_V1(spindle_relocate_sql);

/* ----------------------------------------------------------------
 * A copy's state, without hint bits
 * ----------------------------------------------------------------
 */

/*
 * What a copy's header says, read without setting a hint bit (the page is
 * only share-locked and must not be dirtied): COPY_DEAD (its insert
 * aborted, or a committed deleter), COPY_BUSY (an inserter, deleter or
 * locker runs), COPY_LIVE (committed, not deleted: a committed lock-only
 * xmax or an aborted deleter does not count, design MED-9).  As heap's
 * tests: in progress before committed.
 */
SpindleCopyState
spindle_copy_state(HeapTupleHeader t)
{
	TransactionId xid;

	if (!HeapTupleHeaderXminCommitted(t))
	{
		if (HeapTupleHeaderXminInvalid(t))
			return COPY_DEAD;
		xid = HeapTupleHeaderGetRawXmin(t);
		if (TransactionIdIsCurrentTransactionId(xid) ||
			TransactionIdIsInProgress(xid))
			return COPY_BUSY;
		if (!TransactionIdDidCommit(xid))
			return COPY_DEAD;
	}
	if (t->t_infomask & HEAP_XMAX_INVALID)
		return COPY_LIVE;
	xid = HeapTupleHeaderGetRawXmax(t);
	if (HEAP_XMAX_IS_LOCKED_ONLY(t->t_infomask))
	{
		if (t->t_infomask & HEAP_XMAX_IS_MULTI)
			return MultiXactIdIsRunning(xid, true) ? COPY_BUSY : COPY_LIVE;
		return (TransactionIdIsCurrentTransactionId(xid) ||
				TransactionIdIsInProgress(xid)) ? COPY_BUSY : COPY_LIVE;
	}
	if (t->t_infomask & HEAP_XMAX_IS_MULTI)
	{
		if (MultiXactIdIsRunning(xid, false))
			return COPY_BUSY;
		xid = HeapTupleGetUpdateXid(t);
	}
	if (t->t_infomask & HEAP_XMAX_COMMITTED)
		return COPY_DEAD;
	if (!TransactionIdIsValid(xid))
		return COPY_LIVE;
	if (TransactionIdIsCurrentTransactionId(xid) ||
		TransactionIdIsInProgress(xid))
		return COPY_BUSY;
	return TransactionIdDidCommit(xid) ? COPY_DEAD : COPY_LIVE;
}

/* ----------------------------------------------------------------
 * One move
 * ----------------------------------------------------------------
 */

/* Refuse the move of msg_id: why, as errdetail. */
static void
refuse(Relation facade, int64 msg_id, const char *why)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("event %lld of queue table \"%s\" cannot be moved",
					(long long) msg_id, RelationGetRelationName(facade)),
			 errdetail_internal("%s", why)));
}

/*
 * Is event id consumed by the consume log of crel (an entry of a
 * committed, running or this transaction, or below the floor)?  Read
 * without waiting, under the event page's share lock: a consumer writes
 * its entry under that page's exclusive lock, so it is either here or
 * finds this move's entry (queue.c, examine).
 */
static bool
consumed_in_log(Relation crel, int64 id)
{
	SpindleConsumed e;

	if (!spindle_consume_log_exists(crel))
		return false;
	if (spindle_consume_log_probe(crel, id, &e))
		return spindle_consume_log_state(&e, InvalidTransactionId) !=
			SPINDLE_ENTRY_NONE;
	return id < spindle_consume_log_floor(crel);
}

/*
 * Step 2: under a share lock of the copy's page, check that copy k of sp
 * (at physical TID ptid of seg) is live and not moved, copy its tuple into
 * *copy and write the entry naming the reserved slot as.  Returns why not
 * (nothing written), or NULL.  With as NULL, only the check: made before
 * the annex slot is reserved, so that a refused move takes none (review of
 * step 2, finding 2: refused moves filled an annex).
 */
static const char *
check_and_mark(Relation crel, Relation seg, const SpindleEntry *sp, int64 k,
			   ItemPointer ptid, SpindleAnnexSlot *as, HeapTuple *copy)
{
	Buffer		buf = ReadBuffer(seg, ItemPointerGetBlockNumber(ptid));
	Page		page;
	ItemId		itemid;
	HeapTupleData tuple;
	SpindleRelocation e;
	const char *why = NULL;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	itemid = PageGetItemId(page, ItemPointerGetOffsetNumber(ptid));
	if (ItemPointerGetOffsetNumber(ptid) > PageGetMaxOffsetNumber(page) ||
		!ItemIdIsNormal(itemid))
		why = "The event is gone.";
	else
	{
		tuple.t_data = (HeapTupleHeader) PageGetItem(page, itemid);
		tuple.t_len = ItemIdGetLength(itemid);
		tuple.t_self = *ptid;
		tuple.t_tableOid = RelationGetRelid(seg);
		if (spindle_event_k(tuple.t_data, tuple.t_len) != (int32) k)
			why = "The event is gone.";
		else if (spindle_copy_state(tuple.t_data) != COPY_LIVE)
			why = "The event is deleted, locked or not committed.";
		else if (spindle_reloc_moved(crel, sp->spindle_no, k))
			why = "The event was moved already.";
		else if (!spindle_is_annex(sp) &&
				 consumed_in_log(crel, sp->first_no + k))
			why = "The event is consumed.";
	}
	if (why != NULL || as == NULL)
	{
		UnlockReleaseBuffer(buf);
		return why;
	}
	*copy = heap_copytuple(&tuple);
	e.source_no = sp->spindle_no;
	e.source_k = k;
	e.target_no = as->spindle_no;
	e.target_k = as->k;
	e.xid = GetCurrentTransactionId();
	e.cid = GetCurrentCommandId(true);
	e.flags = 0;
	spindle_reloc_add(crel, &e);
	UnlockReleaseBuffer(buf);
	return NULL;
}

/*
 * Step 1's checks for copy k of sp (virtual TID vtid): why it may not be
 * moved, or NULL.  The caller has it open as seg, physical TID ptid.
 */
static const char *
precheck(Relation facade, Relation crel, Relation seg, SpindleEntry *sp,
		 int64 k, ItemPointer vtid, ItemPointer ptid, bool strict)
{
	TM_FailureData tmfd;

	if (spindle_reloc_moved(crel, sp->spindle_no, k))
		return "The event was moved already.";

	/*
	 * Consumed (committed, ours, or in progress: 55P03 when strict)?
	 * Annexes have no log.
	 */
	if (spindle_hidden_dml_check(facade, sp, k, vtid,
								 strict ? LockWaitError : LockWaitSkip, &tmfd,
								 !spindle_is_annex(sp)) != TM_Ok)
		return "The event is consumed.";
	return check_and_mark(crel, seg, sp, k, ptid, NULL, NULL);
}

/*
 * Move copy k of spindle or annex sp of queue table facade (msg_id, its
 * event) into the newest annex of the generation with room, making one
 * if none has room (spindle_annex_reserve); the new copy's virtual TID
 * goes to *vtid.  Returns false, with nothing done, if the copy is not to
 * be moved (gone, not live, consumed, moved already) -- or, when strict,
 * errors out saying why.  Errors out if the copy changed between the
 * checks and the reservation.  The caller holds the relocator's locks
 * (the facade RowExclusiveLock, crel RowExclusiveLock and the trees'
 * writer locks) and no buffer lock; sp stays open RowExclusiveLock.
 */
bool
spindle_relocate_event(Relation facade, Relation crel, SpindleEntry *sp,
					   int64 k, int64 msg_id, int generation, bool strict,
					   ItemPointer vtid)
{
	SpindleEntry spr;
	ItemPointerData old_vtid;
	ItemPointerData ptid;
	SpindleAnnexSlot as;
	Relation	seg;
	HeapTuple	copy;
	TupleTableSlot *slot;
	const char *why;

	spindle_vslot_to_tid(sp->vbase + k, &old_vtid);
	if (spindle_resolve_tid(facade, &old_vtid, &spr, &ptid) != TID_IN_SPINDLE ||
		spr.spindle_no != sp->spindle_no ||
		(seg = spindle_open_segment(facade, &spr, RowExclusiveLock)) == NULL)
	{
		if (strict)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("queue table \"%s\" has no event %lld",
							RelationGetRelationName(facade),
							(long long) msg_id)));
		return false;
	}
	why = precheck(facade, crel, seg, sp, k, &old_vtid, &ptid, strict);
	if (why != NULL)
	{
		relation_close(seg, NoLock);
		if (strict)
			refuse(facade, msg_id, why);
		return false;
	}
	spindle_annex_reserve(facade, generation, !strict, &as);
	why = check_and_mark(crel, seg, sp, k, &ptid, &as, &copy);
	if (why != NULL)
		refuse(facade, msg_id, why);	/* changed meanwhile: the slot aborts */

	slot = MakeSingleTupleTableSlot(RelationGetDescr(facade),
									&TTSOpsHeapTuple);
	ExecStoreHeapTuple(copy, slot, false);
	slot_getallattrs(slot);
	ExecMaterializeSlot(slot);
	spindle_annex_fill(facade, &as, slot,
					   spindle_event_time(copy->t_data, copy->t_len), vtid);
	ExecDropSingleTupleTableSlot(slot);
	heap_freetuple(copy);
	spindle_reloc_note_oldest(crel, msg_id, sp->spindle_no, k);
	/* a purge of the source for the counters (at commit) and the drop */
	spindle_counters_deleted(sp->segment, 1);
	spindle_note_touched(RelationGetRelid(facade), sp->spindle_no);
	spindle_count_cache_forget(sp->segment);
	/* kept to the end of the transaction: the counters apply at commit */
	relation_close(seg, NoLock);
	return true;
}

/* ----------------------------------------------------------------
 * The worker's relocator
 * ----------------------------------------------------------------
 */

/*
 * Become the relocator of queue table relid, taking every lock without
 * waiting: the table RowExclusiveLock, its consumer relation
 * RowExclusiveLock and the trees' writer locks, all to the end of the
 * transaction.  False, holding what it took until then (to the end of
 * the transaction), if one is not free or the table is no queue table.
 */
bool
spindle_relocator_begin(Oid relid, SpindleRelocator *r)
{
	Oid			croid;

	memset(r, 0, sizeof(*r));
	if (!ConditionalLockRelationOid(relid, RowExclusiveLock))
		return false;
	r->facade = try_table_open(relid, NoLock);
	if (r->facade == NULL)
		return false;
	croid = spindle_is_facade(r->facade) ?
		spindle_consumer_rel_oid(relid) : InvalidOid;
	if (!OidIsValid(croid) ||
		!ConditionalLockRelationOid(croid, RowExclusiveLock) ||
		(r->crel = try_relation_open(croid, NoLock)) == NULL)
	{
		table_close(r->facade, NoLock);
		r->facade = NULL;
		return false;
	}
	if (!spindle_reloc_lock_conditional(r->crel))
	{
		spindle_relocator_end(r);
		return false;
	}
	return true;
}

/* Close what spindle_relocator_begin opened (locks kept to the end). */
void
spindle_relocator_end(SpindleRelocator *r)
{
	if (r->crel != NULL)
		relation_close(r->crel, NoLock);
	if (r->facade != NULL)
		table_close(r->facade, NoLock);
	r->crel = NULL;
	r->facade = NULL;
}

/* The generation an annex copy of a copy in sp goes to. */
int
spindle_relocate_target_generation(const SpindleEntry *sp)
{
	return Min(sp->generation + 1, SPINDLE_ANNEX_GENERATIONS);
}

/* Append copy (k, id, busy) to *out (*n used, *nalloc). */
static void
add_copy(SpindleLiveCopy **out, int *n, int *nalloc, int64 k, int64 id,
		 bool busy)
{
	if (*n >= *nalloc)
	{
		*nalloc = *nalloc ? *nalloc * 2 : 64;
		*out = *out ? repalloc(*out, *nalloc * sizeof(SpindleLiveCopy)) :
			palloc(*nalloc * sizeof(SpindleLiveCopy));
	}
	(*out)[*n].k = k;
	(*out)[*n].msg_id = id;
	(*out)[*n].busy = busy;
	(*n)++;
}

/*
 * Is copy k (event id) of sp, live on its page, still there for the
 * relocator: not moved by a live mover (moved[0..nmoved)) nor consumed by
 * a committed consume log entry (log[0..nlog), floor)?  *busy if a running
 * mover or consumer has it.
 */
static bool
copy_remains(const SpindleRelocation *moved, int nmoved,
			 const SpindleConsumed *log, int nlog, int64 floor,
			 int64 k, int64 id, bool *busy)
{
	const SpindleRelocation *e = nmoved > 0 ?
		spindle_reloc_find(moved, nmoved, k) : NULL;
	int			st = spindle_reloc_state(e, InvalidTransactionId);

	*busy = false;
	if (st == SPINDLE_ENTRY_RUNNING)
		*busy = true;
	if (st != SPINDLE_ENTRY_NONE)
		return st == SPINDLE_ENTRY_RUNNING;
	if (id < floor)
		return false;
	st = spindle_consume_log_state(nlog > 0 ?
								   spindle_consume_log_find(log, nlog, id) :
								   NULL, InvalidTransactionId);
	if (st == SPINDLE_ENTRY_RUNNING)
		*busy = true;
	return st == SPINDLE_ENTRY_NONE || st == SPINDLE_ENTRY_RUNNING;
}

/*
 * The copies of spindle or annex sp of queue table facade that are live
 * and not moved nor consumed, in slot order, as a palloc'd array (*n of
 * them): their slot k, their event's id (column id_att, an int8) and
 * whether a transaction running has them (busy: not movable now).  Reads
 * every page of sp with a share lock at a time and no hint bit set
 * (spindle_copy_state), and the entries of tree 3 and of the consume log
 * over sp once.  The caller holds the relocator's locks; sp is opened
 * AccessShareLock here for the read.  NULL if sp is gone.
 */
SpindleLiveCopy *
spindle_relocate_scan(SpindleRelocator *r, SpindleEntry *sp,
					  AttrNumber id_att, int *n)
{
	Relation	seg = spindle_open_segment(r->facade, sp, AccessShareLock);
	TupleDesc	td = RelationGetDescr(r->facade);
	SpindleLiveCopy *out = NULL;
	int			nalloc = 0;
	int			nmoved = 0;
	int			nlog = 0;
	int64		floor = PG_INT64_MIN;
	SpindleRelocation *moved;
	SpindleConsumed *log = NULL;
	BlockNumber nblocks;

	*n = 0;
	if (seg == NULL)
		return NULL;
	moved = spindle_reloc_read(r->crel, sp->spindle_no, 0,
							   SPINDLE_MAX_CAPACITY, &nmoved);
	if (!spindle_is_annex(sp))
		log = spindle_consume_log_over(RelationGetRelid(r->facade),
									   sp->first_no, sp->first_no + sp->vcount,
									   &nlog, &floor);
	nblocks = RelationGetNumberOfBlocks(seg);
	for (BlockNumber blk = 0; blk < nblocks; blk++)
	{
		Buffer		buf = ReadBuffer(seg, blk);
		Page		page;

		CHECK_FOR_INTERRUPTS();
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		for (OffsetNumber off = FirstOffsetNumber;
			 !PageIsNew(page) && off <= PageGetMaxOffsetNumber(page); off++)
		{
			ItemId		itemid = PageGetItemId(page, off);
			HeapTupleData tup;
			SpindleCopyState cs;
			bool		isnull;
			bool		busy;
			int64		k;
			int64		id;

			if (!ItemIdIsNormal(itemid))
				continue;
			tup.t_data = (HeapTupleHeader) PageGetItem(page, itemid);
			tup.t_len = ItemIdGetLength(itemid);
			tup.t_tableOid = RelationGetRelid(seg);
			ItemPointerSet(&tup.t_self, blk, off);
			if ((cs = spindle_copy_state(tup.t_data)) == COPY_DEAD)
				continue;
			k = spindle_event_k(tup.t_data, tup.t_len);
			id = DatumGetInt64(heap_getattr(&tup, id_att, td, &isnull));
			if (isnull)
				continue;		/* no event of a queue: not moved */
			if (copy_remains(moved, nmoved, log, nlog, floor, k, id, &busy))
				add_copy(&out, n, &nalloc, k, id, busy || cs == COPY_BUSY);
		}
		UnlockReleaseBuffer(buf);
	}
	relation_close(seg, AccessShareLock);
	if (moved != NULL)
		pfree(moved);
	if (log != NULL)
		pfree(log);
	return out;
}

/*
 * Is the error caught in a batch one that must end the whole pass rather
 * than skip the batch's events: a query cancel (statement_timeout, the
 * worker's own bound on its compaction step, pg_cancel_backend), a lock
 * timeout, a shutdown, anything above ERROR, or any error while the
 * process exits?  Swallowing those would let one event whose index
 * expression sleeps or waits hold the relocator's locks, and the worker,
 * for as long as every other event of the batch takes to fail the same
 * way (review rv1, F1).
 */
static bool
stops_the_pass(const ErrorData *edata)
{
	return edata->elevel > ERROR || proc_exit_inprogress ||
		edata->sqlerrcode == ERRCODE_QUERY_CANCELED ||
		edata->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE ||
		edata->sqlerrcode == ERRCODE_ADMIN_SHUTDOWN;
}

/*
 * Move copies[0..n) of sp in one subtransaction, as the table's owner
 * under SECURITY_RESTRICTED_OPERATION, a new GUC nest level and a safe
 * search_path.  True if it committed (moved and not-moved counts added
 * to *st); false if it failed (rolled back: nothing of it stays, the
 * error logged).  An error that stops the pass (stops_the_pass) is
 * re-thrown once the subtransaction is rolled back.
 */
static bool
move_in_subxact(SpindleRelocator *r, SpindleEntry *sp,
				const SpindleLiveCopy *copies, int n, int generation,
				SpindleMoveStats *st)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	Oid			save_userid;
	int			save_sec_context;
	int			moved = 0;
	bool		ok = true;

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		int			nest;
		ItemPointerData vtid;

		SetUserIdAndSecContext(r->facade->rd_rel->relowner,
							   save_sec_context | SECURITY_RESTRICTED_OPERATION);
		nest = NewGUCNestLevel();
		(void) set_config_option("search_path", "pg_catalog, pg_temp",
								 PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
		for (int i = 0; i < n; i++)
		{
			CHECK_FOR_INTERRUPTS();
			if (spindle_relocate_event(r->facade, r->crel, sp, copies[i].k,
									   copies[i].msg_id, generation, false,
									   &vtid))
				moved++;
		}
		AtEOXact_GUC(false, nest);
		SetUserIdAndSecContext(save_userid, save_sec_context);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		/* the abort puts back the user, the security context and GUCs */
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		/* a cancel, a timeout or a shutdown ends the pass, not the batch */
		if (stops_the_pass(edata))
			ReThrowError(edata);
		ereport(LOG,
				(errmsg("spindle relocator: moving %d event%s of spindle %lld of \"%s\" failed: %s",
						n, n == 1 ? "" : "s", (long long) sp->spindle_no,
						RelationGetRelationName(r->facade), edata->message)));
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();
	if (ok)
	{
		st->moved += moved;
		st->not_moved += n - moved;
	}
	return ok;
}

/*
 * Move copies[0..n) (at most SPINDLE_RELOCATE_BATCH, none busy) of sp
 * into annexes of generation spindle_relocate_target_generation(sp): one
 * subtransaction for the batch; if it fails, one per copy, and a copy
 * whose move fails again is skipped (st->failed) while the rest go on.
 * A cancel, a lock timeout or a shutdown is not skipped: it rolls back
 * the subtransaction and propagates (stops_the_pass); what committed in
 * earlier subtransactions of the batch is the caller's transaction's.
 * The caller holds the relocator's locks (spindle_relocator_begin) and an
 * active snapshot (index expressions may need one).
 */
void
spindle_relocate_batch(SpindleRelocator *r, SpindleEntry *sp,
					   const SpindleLiveCopy *copies, int n,
					   SpindleMoveStats *st)
{
	int			generation = spindle_relocate_target_generation(sp);

	Assert(n <= SPINDLE_RELOCATE_BATCH);
	if (n <= 0 || move_in_subxact(r, sp, copies, n, generation, st))
		return;
	for (int i = 0; i < n; i++)
		if (!move_in_subxact(r, sp, &copies[i], 1, generation, st))
			st->failed++;
}

/* ----------------------------------------------------------------
 * spindle._relocate
 * ----------------------------------------------------------------
 */

/* The queue table relid, checked, RowExclusiveLock; its consumer relation */
static Relation
open_queue_for_move(Oid relid, int generation, Relation *crel)
{
	Relation	facade;
	Oid			croid;

	facade = spindle_annex_open_for_test(relid, generation, "_relocate");
	croid = spindle_is_facade(facade) ?
		spindle_consumer_rel_oid(relid) : InvalidOid;
	if (!OidIsValid(croid))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("relation \"%s\" is not a queue table",
						RelationGetRelationName(facade)),
				 errhint("Only events of queue tables are moved.")));
	*crel = relation_open(croid, RowExclusiveLock);
	return facade;
}

/*
 * The event spindle holding msg_id, into *sp, and its slot k; errors out
 * if no spindle of the table numbers it.
 */
static int64
event_spindle(Relation facade, int64 msg_id, SpindleEntry *sp)
{
	SpindleDirectory *dir = spindle_directory_acquire(facade);
	SpindleEntry *found = spindle_find_by_event(dir, msg_id);

	if (found == NULL || msg_id - found->first_no >= found->vcount)
	{
		spindle_directory_release(dir);
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("queue table \"%s\" has no event %lld",
						RelationGetRelationName(facade), (long long) msg_id)));
	}
	*sp = *found;
	spindle_directory_release(dir);
	return msg_id - sp->first_no;
}

/*
 * spindle._relocate(rel regclass, msg_id bigint, generation int) RETURNS
 * tid: move live event msg_id of the queue table into its newest annex of
 * that generation with room (none is made: 54000 if none has room), in
 * the caller's transaction; returns the new copy's TID.  No subtransaction,
 * no change of user: a test of one move.
 */
Datum
spindle_relocate_sql(PG_FUNCTION_ARGS)
{
	int			generation = PG_GETARG_INT32(2);
	int64		msg_id = PG_GETARG_INT64(1);
	Relation	crel;
	Relation	facade = open_queue_for_move(PG_GETARG_OID(0), generation,
											 &crel);
	ItemPointer vtid = palloc(sizeof(ItemPointerData));
	SpindleEntry sp;
	int64		k;

	spindle_reloc_lock(crel);
	k = event_spindle(facade, msg_id, &sp);
	(void) spindle_relocate_event(facade, crel, &sp, k, msg_id, generation,
								  true, vtid);
	relation_close(crel, NoLock);
	table_close(facade, NoLock);
	PG_RETURN_POINTER(vtid);
}
