/*-------------------------------------------------------------------------
 *
 * hidden_test.c
 *	  Test only: spindle._consume_log_write(queue, first, len), a writer of
 *	  consume log entries (consume_log.c) for the current transaction, so
 *	  that the readers' rule (hidden.c) can be tested apart from dequeue and
 *	  ack, which write entries themselves with spindle.consume_log on
 *	  (queue_consumed.c; docs/design.md, "Consume log (built)").
 *
 * Locks.  Superusers only.  The queue table RowExclusiveLock (as DML: an
 * index build's ShareLock keeps it out), each spindle it touches
 * RowExclusiveLock, the consumer relation RowExclusiveLock, all to the end
 * of the transaction; the consume log's lock (exclusive) for the call.  Then,
 * for each event, the share lock of its page while it checks that the
 * event is visible and has no xmax (HeapTupleSatisfiesUpdate is TM_Ok, or
 * the xmax is this transaction's row lock) and that no live entry covers
 * it, checks for a SERIALIZABLE conflict as heap_delete does, and writes
 * the entry: the lock protocol with DML that hidden.c describes.
 * Heavyweight locks are all taken before any buffer lock.
 *
 * Invariants: an event is consumed by at most one live entry; an entry is
 * written only for an event no DELETE or row lock is on.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/predicate.h"
#include "storage/procarray.h"
#include "utils/lsyscache.h"

#include "table/spindle_table.h"

PG_FUNCTION_INFO_V1(spindle_consume_log_write);

/*
 * Check event id (k of spindle sp, at physical ptid of seg) under its
 * page's share lock and write its entry; errors leave nothing written.
 */
static void
consume_one(Relation facade, Relation crel, Relation seg, SpindleEntry *sp,
			int64 id, ItemPointer ptid, FullTransactionId fxid, CommandId cid)
{
	Buffer		buf = ReadBuffer(seg, ItemPointerGetBlockNumber(ptid));
	Page		page;
	ItemId		itemid;
	HeapTupleData tuple;
	TM_Result	r = TM_Invisible;
	SpindleConsumed e;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	if (ItemPointerGetOffsetNumber(ptid) <= PageGetMaxOffsetNumber(page))
	{
		itemid = PageGetItemId(page, ItemPointerGetOffsetNumber(ptid));
		if (ItemIdIsNormal(itemid))
		{
			tuple.t_data = (HeapTupleHeader) PageGetItem(page, itemid);
			tuple.t_len = ItemIdGetLength(itemid);
			tuple.t_tableOid = RelationGetRelid(seg);
			tuple.t_self = *ptid;
			if (spindle_event_k(tuple.t_data, tuple.t_len) == id - sp->first_no)
				r = HeapTupleSatisfiesUpdate(&tuple, cid, buf);
			/* our own row lock (FOR UPDATE, then consume) is no obstacle */
			if (r == TM_BeingModified &&
				!(tuple.t_data->t_infomask & HEAP_XMAX_IS_MULTI) &&
				HEAP_XMAX_IS_LOCKED_ONLY(tuple.t_data->t_infomask) &&
				TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetRawXmax(tuple.t_data)))
				r = TM_Ok;
		}
	}
	if (r == TM_Ok && id < spindle_consume_log_floor(crel))
		r = TM_BeingModified;	/* consumed for good */
	if (r == TM_Ok && spindle_consume_log_probe(crel, id, &e))
	{
		TransactionId xid = XidFromFullTransactionId(e.fxid);

		if (TransactionIdIsCurrentTransactionId(xid) ||
			TransactionIdIsInProgress(xid) || TransactionIdDidCommit(xid))
			r = TM_BeingModified;
	}
	if (r != TM_Ok)
	{
		UnlockReleaseBuffer(buf);
		ereport(ERROR,
				(errcode(r == TM_BeingModified ? ERRCODE_LOCK_NOT_AVAILABLE :
						 ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("event %lld of \"%s\" cannot be consumed",
						(long long) id, RelationGetRelationName(facade)),
				 errdetail(r == TM_BeingModified ?
						   "It is locked, being deleted or consumed, or consumed already." :
						   "It is not visible or was deleted.")));
	}
	/* as heap_delete: a SERIALIZABLE reader of the event meets us */
	CheckForSerializableConflictIn(seg, ptid, ItemPointerGetBlockNumber(ptid));
	spindle_consume_log_add(crel, id, fxid, cid);
	UnlockReleaseBuffer(buf);
}

/*
 * spindle._consume_log_write(queue regclass, first bigint, len bigint):
 * the current transaction consumes events first .. first + len - 1 of
 * queue in the current command; returns len.  Assigns an xid.
 */
Datum
spindle_consume_log_write(PG_FUNCTION_ARGS)
{
	Oid			queue = PG_GETARG_OID(0);
	int64		first = PG_GETARG_INT64(1);
	int64		len = PG_GETARG_INT64(2);
	Relation	facade;
	Relation	crel;
	Oid			croid;
	SpindleDirectory *dir;
	FullTransactionId fxid;
	CommandId	cid;

	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("only superusers may call spindle._consume_log_write")));
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot consume events during recovery")));
	if (len < 0 || len > 1000000 || first < 1 || first > PG_INT64_MAX - len)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid range of events: first %lld, len %lld",
						(long long) first, (long long) len)));
	facade = table_open(queue, RowExclusiveLock);
	croid = spindle_is_facade(facade) ? spindle_consumer_rel_oid(queue) :
		InvalidOid;
	if (!OidIsValid(croid))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("relation \"%s\" is not a queue table",
						RelationGetRelationName(facade))));
	crel = relation_open(croid, RowExclusiveLock);
	fxid = GetCurrentFullTransactionId();
	cid = GetCurrentCommandId(true);
	dir = spindle_directory_acquire_current(facade);
	spindle_consume_log_lock(crel);
	for (int64 id = first; id < first + len; id++)
	{
		SpindleEntry *sp = spindle_find_by_event(dir, id);
		ItemPointerData ptid;
		Relation	seg = NULL;

		if (sp == NULL || id - sp->first_no >= sp->vcount ||
			!spindle_slotmap_get(facade, sp->vbase + (id - sp->first_no),
								 &ptid) ||
			(seg = spindle_open_segment(facade, sp, RowExclusiveLock)) == NULL ||
			ItemPointerGetBlockNumber(&ptid) >= RelationGetNumberOfBlocks(seg))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("event %lld of \"%s\" does not exist",
							(long long) id, RelationGetRelationName(facade))));
		consume_one(facade, crel, seg, sp, id, &ptid, fxid, cid);
		relation_close(seg, NoLock);
	}
	spindle_consume_log_unlock(crel);
	spindle_directory_release(dir);
	relation_close(crel, NoLock);
	table_close(facade, NoLock);
	PG_RETURN_INT64(len);
}
