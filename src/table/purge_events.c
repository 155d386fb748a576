/*-------------------------------------------------------------------------
 *
 * purge_events.c
 *	  spindle._purge_events(): the test-only SQL function that purges
 *	  events of a spindle table by their virtual TIDs through range purges
 *	  (spindle_purge_on_page, storage layer).
 *
 * Locks: RowExclusiveLock on the table, RowExclusiveLock on each spindle
 * it purges in (through spindle_open_segment), and an exclusive content
 * lock on each page while it checks and purges the events there.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/multixact.h"
#include "access/relation.h"
#include "access/xact.h"
#include "catalog/pg_type_d.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/bufpage.h"
#include "storage/predicate.h"
#include "utils/array.h"
#include "utils/rel.h"

#include "table/spindle_table.h"

PG_FUNCTION_INFO_V1(spindle_purge_events);

/* ----------------------------------------------------------------
 * spindle._purge_events(rel regclass, tids tid[]) RETURNS int
 *
 * Test-only (superuser): purges the events with the given TIDs (the
 * virtual TIDs SELECT ctid returns) by the current transaction, one
 * spindle_purge_on_page() call per spindle page, and returns how many it
 * purged.  An event is skipped when heap_delete() could not delete it at
 * once: already deleted (by us or a committed transaction), inserted by a
 * transaction still running or aborted, deleted or locked by a running
 * transaction (heap would wait; a purge never does), or gone.
 * ----------------------------------------------------------------
 */

typedef struct PurgeTarget
{
	SpindleEntry sp;			/* the event's spindle */
	int32		k;				/* its slot in the spindle */
	ItemPointerData ptid;		/* its physical TID there */
} PurgeTarget;

static int
target_cmp(const void *a, const void *b)
{
	const PurgeTarget *x = a;
	const PurgeTarget *y = b;

	if (x->sp.spindle_no != y->sp.spindle_no)
		return x->sp.spindle_no < y->sp.spindle_no ? -1 : 1;
	return ItemPointerCompare((ItemPointer) &x->ptid, (ItemPointer) &y->ptid);
}

/* Is the tuple at off of the locked page the event k, purgeable now? */
static bool
purgeable(Relation seg, Buffer buf, OffsetNumber off, int32 k, CommandId cid)
{
	Page		page = BufferGetPage(buf);
	ItemId		lp;
	HeapTupleData tp;
	TM_Result	res;

	if (PageIsNew(page) || off < FirstOffsetNumber ||
		off > PageGetMaxOffsetNumber(page))
		return false;
	lp = PageGetItemId(page, off);
	if (!ItemIdIsNormal(lp))
		return false;
	tp.t_tableOid = RelationGetRelid(seg);
	tp.t_data = (HeapTupleHeader) PageGetItem(page, lp);
	tp.t_len = ItemIdGetLength(lp);
	ItemPointerSet(&tp.t_self, BufferGetBlockNumber(buf), off);
	if (spindle_event_k(tp.t_data, tp.t_len) != k)
		return false;
	res = HeapTupleSatisfiesUpdate(&tp, cid, buf);
	if (res == TM_Ok)
		return true;
	/* our own (sub)transaction's lock: heap_delete() overwrites it */
	return res == TM_BeingModified &&
		!(tp.t_data->t_infomask & HEAP_XMAX_IS_MULTI) &&
		HEAP_XMAX_IS_LOCKED_ONLY(tp.t_data->t_infomask) &&
		TransactionIdEquals(HeapTupleHeaderGetRawXmax(tp.t_data),
							GetCurrentTransactionId());
}

Datum
spindle_purge_events(PG_FUNCTION_ARGS)
{
	Oid			relid;
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	int			nelems;
	PurgeTarget *targets;
	int			ntargets = 0;
	Relation	facade;
	CommandId	cid;
	int			purged = 0;
	int			i;

	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be superuser to call spindle._purge_events()")));
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("relation and TIDs must not be NULL")));
	PreventCommandIfReadOnly("spindle._purge_events()");
	relid = PG_GETARG_OID(0);
	arr = PG_GETARG_ARRAYTYPE_P(1);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("TIDs must be a one-dimensional array")));
	facade = spindle_open_facade(relid, RowExclusiveLock);

	deconstruct_array(arr, TIDOID, sizeof(ItemPointerData), false,
					  TYPALIGN_SHORT, &elems, &nulls, &nelems);
	targets = palloc(Max(nelems, 1) * sizeof(PurgeTarget));
	for (i = 0; i < nelems; i++)
	{
		ItemPointer vtid = (ItemPointer) DatumGetPointer(elems[i]);
		PurgeTarget *t = &targets[ntargets];

		if (nulls[i])
			continue;
		if (spindle_resolve_tid(facade, vtid, &t->sp, &t->ptid) != TID_IN_SPINDLE)
			continue;
		t->k = (int32) (spindle_tid_to_vslot(vtid) - t->sp.vbase);
		ntargets++;
	}
	qsort(targets, ntargets, sizeof(PurgeTarget), target_cmp);

	cid = GetCurrentCommandId(true);
	i = 0;
	while (i < ntargets)
	{
		int64		spindle_no = targets[i].sp.spindle_no;
		Relation	seg = spindle_open_segment(facade, &targets[i].sp,
											   RowExclusiveLock);
		BlockNumber nblocks = seg ? RelationGetNumberOfBlocks(seg) : 0;
		int			purged_here = 0;

		while (i < ntargets && targets[i].sp.spindle_no == spindle_no)
		{
			BlockNumber blkno = ItemPointerGetBlockNumber(&targets[i].ptid);
			OffsetNumber offsets[MaxHeapTuplesPerPage];
			int			n = 0;
			Buffer		buf;

			if (seg == NULL || blkno >= nblocks)
			{
				i++;
				continue;
			}
			buf = ReadBuffer(seg, blkno);
			LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
			for (; i < ntargets && targets[i].sp.spindle_no == spindle_no &&
				 ItemPointerGetBlockNumber(&targets[i].ptid) == blkno; i++)
			{
				OffsetNumber off = ItemPointerGetOffsetNumber(&targets[i].ptid);

				/* the same TID twice */
				if (n > 0 && offsets[n - 1] == off)
					continue;
				if (n < MaxHeapTuplesPerPage &&
					purgeable(seg, buf, off, targets[i].k, cid))
					offsets[n++] = off;
			}
			spindle_purge_on_page(seg, buf, offsets, n, cid);
			UnlockReleaseBuffer(buf);
			purged_here += n;
		}
		if (seg != NULL)
			relation_close(seg, NoLock);
		if (purged_here > 0)
			spindle_note_touched(RelationGetRelid(facade), spindle_no);
		purged += purged_here;
	}

	relation_close(facade, NoLock);
	PG_RETURN_INT32(purged);
}
