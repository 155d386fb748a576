/*-------------------------------------------------------------------------
 *
 * relocate.c
 *	  Moving one event of a queue table into an annex (compaction of sparse
 *	  spindles, docs/design.md "Compaction of sparse spindles", section 3,
 *	  steps 1 to 3), through the test-only stand-in for the relocator:
 *	  spindle._relocate(rel, msg_id, generation).  The worker's relocator
 *	  (batches, choosing spindles) is not built yet.
 *
 * A move, in the caller's transaction (its xid is the entry's):
 *
 *	1. an annex slot is reserved (spindle_annex_reserve);
 *	2. under a share lock of the event's page (and nothing else): the
 *	   event must be live (HeapTupleSatisfiesUpdate says TM_Ok: no deleter
 *	   or locker running, none committed but a lock-only one), not moved
 *	   already (no entry of a live mover in tree 3) and not consumed (no
 *	   consume log entry of a live consumer, checked just before the lock);
 *	   its tuple is copied and the relocation entry (S, k) -> (A, k') is
 *	   written (relocation.c);
 *	3. with no buffer lock held: the copy goes into the annex with the same
 *	   columns (msg_id, visible_at, enqueued_at included) and the same
 *	   hidden append time, by heap's insert (TOAST values re-fetched and
 *	   written by heap's toaster), its slot map entry and one entry per
 *	   index (annex.c); the entry being in tree 3 already, a unique index's
 *	   check finds the old copy hidden by this transaction; then tree 4
 *	   gets the event's oldest copy if it has none.
 *
 * The old copy is not written.  Consumers (dequeue, read, ack,
 * set_visibility, dead-letter moves: queue/queue.c) follow the move: they
 * resolve a msg_id through trees 4 and 3 to the copy it is at and purge
 * that copy, an annex's by xmax (docs/design.md, "Step 3 as built").  The
 * function stays a test-only stand-in for the worker's relocator: it
 * moves only an event spindle's copy (no chain of moves), checks the
 * consume log before, not under, the event page's lock, and does not
 * check that tree 0 parks the event.
 *
 * Locks: the queue table RowExclusiveLock and the annex RowExclusiveLock
 * (annex.c), the consumer relation RowExclusiveLock and the relocator's
 * locks on it (trees 3 and 4, spindle_reloc_lock), all to the end of the
 * transaction: one relocator per queue at a time.  The event's spindle
 * AccessShareLock; its page share-locked for step 2 only.  Superusers
 * only.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/builtins.h"

#include "table/spindle_table.h"

PG_FUNCTION_INFO_V1(spindle_relocate_sql);

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
 * Step 2: under a share lock of the event's page, check that copy k of sp
 * (at physical TID ptid of seg) is live and not moved, copy its tuple into
 * *copy and write the entry naming the reserved slot as.  Errors out
 * (nothing written) otherwise.  With as NULL, only the check: made before
 * the annex slot is reserved, so that a refused move takes none (review of
 * step 2, finding 2: refused moves filled an annex).
 */
static void
check_and_mark(Relation facade, Relation crel, Relation seg,
			   SpindleEntry *sp, int64 k, ItemPointer ptid,
			   SpindleAnnexSlot *as, int64 msg_id, HeapTuple *copy)
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
		if (HeapTupleSatisfiesUpdate(&tuple, GetCurrentCommandId(false),
									 buf) != TM_Ok)
			why = "The event is deleted, locked or not committed.";
		else if (spindle_reloc_moved(crel, sp->spindle_no, k))
			why = "The event was moved already.";
	}
	if (why != NULL)
	{
		UnlockReleaseBuffer(buf);
		refuse(facade, msg_id, why);
	}
	if (as == NULL)
	{
		UnlockReleaseBuffer(buf);
		return;
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
}

/*
 * Move event msg_id of queue table facade into its newest annex of the
 * generation with room; returns the new copy's virtual TID in *vtid.
 */
static void
relocate_event(Relation facade, Relation crel, int64 msg_id, int generation,
			   ItemPointer vtid)
{
	SpindleEntry sp;
	SpindleEntry spr;
	ItemPointerData old_vtid;
	ItemPointerData ptid;
	TM_FailureData tmfd;
	SpindleAnnexSlot as;
	Relation	seg;
	HeapTuple	copy;
	TupleTableSlot *slot;
	int64		k = event_spindle(facade, msg_id, &sp);

	spindle_vslot_to_tid(sp.vbase + k, &old_vtid);
	if (spindle_resolve_tid(facade, &old_vtid, &spr, &ptid) != TID_IN_SPINDLE ||
		(seg = spindle_open_segment(facade, &spr, AccessShareLock)) == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("queue table \"%s\" has no event %lld",
						RelationGetRelationName(facade), (long long) msg_id)));
	/* moved already? (checked again under the page lock) */
	if (spindle_reloc_moved(crel, sp.spindle_no, k))
		refuse(facade, msg_id, "The event was moved already.");
	/* consumed (committed, ours, or in progress: 55P03)? */
	if (spindle_hidden_dml_check(facade, &sp, k, &old_vtid, LockWaitError,
								 &tmfd, true) != TM_Ok)
		refuse(facade, msg_id, "The event is consumed.");
	/* live and not moved, before a slot is taken; again after */
	check_and_mark(facade, crel, seg, &sp, k, &ptid, NULL, msg_id, NULL);
	spindle_annex_reserve(facade, generation, &as);
	check_and_mark(facade, crel, seg, &sp, k, &ptid, &as, msg_id, &copy);

	slot = MakeSingleTupleTableSlot(RelationGetDescr(facade),
									&TTSOpsHeapTuple);
	ExecStoreHeapTuple(copy, slot, false);
	slot_getallattrs(slot);
	ExecMaterializeSlot(slot);
	spindle_annex_fill(facade, &as, slot,
					   spindle_event_time(copy->t_data, copy->t_len), vtid);
	ExecDropSingleTupleTableSlot(slot);
	heap_freetuple(copy);
	spindle_reloc_note_oldest(crel, msg_id, sp.spindle_no, k);
	relation_close(seg, AccessShareLock);
}

/*
 * spindle._relocate(rel regclass, msg_id bigint, generation int) RETURNS
 * tid: move live event msg_id of the queue table into its newest annex of
 * that generation with room, in the caller's transaction; returns the new
 * copy's TID.
 */
Datum
spindle_relocate_sql(PG_FUNCTION_ARGS)
{
	int			generation = PG_GETARG_INT32(2);
	Relation	crel;
	Relation	facade = open_queue_for_move(PG_GETARG_OID(0), generation,
											 &crel);
	ItemPointer vtid = palloc(sizeof(ItemPointerData));

	spindle_reloc_lock(crel);
	relocate_event(facade, crel, PG_GETARG_INT64(1), generation, vtid);
	relation_close(crel, NoLock);
	table_close(facade, NoLock);
	PG_RETURN_POINTER(vtid);
}
