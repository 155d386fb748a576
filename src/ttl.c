/*-------------------------------------------------------------------------
 *
 * ttl.c
 *	  Time-to-live purge: spindle.purge_expired() and the worker's TTL step.
 *
 * Every event carries its append time, in whole seconds rounded up, in a
 * hidden column (layout.c).  An event is purged when that time is at or
 * before the cutoff (now - ttl) rounded down to a second.  So an event is
 * never purged before it is `ttl` old, and every event appended more than
 * `ttl` + 1 s ago is purged, whatever happened on its page or spindle since
 * (later appends, deletes, locks) and however slowly its spindle fills.
 * The worker applies a table's time_to_live every naptime, so there it is
 * `ttl` + 1 s + one naptime at most.
 *
 * Cost: an event's append time is never before its spindle's creation, so
 * spindles created after the cutoff are not read; a full spindle whose
 * shared-memory fill time is at or before the cutoff is purged whole, and
 * remembered by this backend as done until it is dropped.  Each round of
 * the worker therefore reads the one or two spindles the cutoff falls in.
 *
 * Purging deletes each expired event (heap_delete on its spindle, one WAL
 * record per event), skipping events other transactions hold locked or
 * have deleted: those are left for the next round.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/relation.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/procarray.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "layout.h"
#include "directory.h"
#include "counters.h"
#include "slots.h"
#include "touched.h"
#include "facade.h"
#include "options.h"
#include "ttl.h"


PG_FUNCTION_INFO_V1(spindle_purge_expired);

/*
 * Full spindles this backend purged completely, with the cutoff it used:
 * nothing in them is left to purge by any later cutoff.
 */
typedef struct PurgedSpindle
{
	Oid			segment;		/* hash key */
	int64		spindle_no;
} PurgedSpindle;

static HTAB *purged_spindles = NULL;

/* spindles this transaction purged completely: remembered if it commits */
static List *purged_now = NIL;
static bool xact_callback_registered = false;

static bool
known_purged(SpindleEntry *sp)
{
	PurgedSpindle *p;

	if (purged_spindles == NULL)
		return false;
	p = hash_search(purged_spindles, &sp->segment, HASH_FIND, NULL);
	return p != NULL && p->spindle_no == sp->spindle_no;
}

static void
remember_purged(Oid segment, int64 spindle_no)
{
	PurgedSpindle *p;
	bool		found;

	if (purged_spindles == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(PurgedSpindle);
		ctl.hcxt = TopMemoryContext;
		purged_spindles = hash_create("spindle purged spindles", 64, &ctl,
									  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	p = hash_search(purged_spindles, &segment, HASH_ENTER, &found);
	p->spindle_no = spindle_no;
}

static void
ttl_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (purged_now == NIL)
		return;
	if (event == XACT_EVENT_COMMIT)
		foreach(lc, purged_now)
		{
			PurgedSpindle *p = (PurgedSpindle *) lfirst(lc);

			remember_purged(p->segment, p->spindle_no);
		}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PARALLEL_ABORT)
	{
		list_free_deep(purged_now);
		purged_now = NIL;
	}
}

/* Remember, if this transaction commits, that sp is purged completely. */
static void
purged_at_commit(SpindleEntry *sp)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	PurgedSpindle *p = palloc(sizeof(PurgedSpindle));

	if (!xact_callback_registered)
	{
		RegisterXactCallback(ttl_xact_callback, NULL);
		xact_callback_registered = true;
	}
	p->segment = sp->segment;
	p->spindle_no = sp->spindle_no;
	purged_now = lappend(purged_now, p);
	MemoryContextSwitchTo(old);
}

/*
 * Delete the events of one page that our snapshot sees and whose append
 * time is at or before cutoff (all of them when cutoff is the maximum);
 * count them.  *complete is cleared when an expired event could not be
 * deleted (another transaction holds it) or cannot be seen yet (its
 * insert is still in progress, or committed after our snapshot).
 */
static int64
purge_page(Relation seg, BlockNumber blk, Snapshot snapshot, CommandId cid,
		   TransactionId horizon, uint32 cutoff, bool *complete)
{
	OffsetNumber offsets[MaxHeapTuplesPerPage];
	int			n = 0;
	int			i;
	int64		purged = 0;
	Buffer		buf;
	Page		page;
	OffsetNumber off,
				maxoff;

	buf = ReadBuffer(seg, blk);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	maxoff = PageIsNew(page) ? 0 : PageGetMaxOffsetNumber(page);
	for (off = FirstOffsetNumber; off <= maxoff; off++)
	{
		ItemId		itemid = PageGetItemId(page, off);
		HeapTupleData tuple;

		if (!ItemIdIsNormal(itemid))
			continue;
		tuple.t_data = (HeapTupleHeader) PageGetItem(page, itemid);
		tuple.t_len = ItemIdGetLength(itemid);
		tuple.t_tableOid = RelationGetRelid(seg);
		ItemPointerSet(&tuple.t_self, blk, off);
		if (spindle_event_time(tuple.t_data, tuple.t_len) > cutoff)
			continue;
		if (HeapTupleSatisfiesVisibility(&tuple, snapshot, buf))
			offsets[n++] = off;
		else
		{
			HTSV_Result state = HeapTupleSatisfiesVacuum(&tuple, horizon, buf);

			/* not ours to see yet (an insert in progress): not done */
			if (state != HEAPTUPLE_DEAD && state != HEAPTUPLE_RECENTLY_DEAD)
				*complete = false;
		}
	}
	UnlockReleaseBuffer(buf);

	for (i = 0; i < n; i++)
	{
		ItemPointerData tid;
		TM_FailureData tmfd;

		ItemPointerSet(&tid, blk, offsets[i]);
		/* a consumer holding it locked keeps it: never wait for it */
		if (heap_delete(seg, &tid, cid, InvalidSnapshot, false, &tmfd,
						false) == TM_Ok)
			purged++;
		else
			*complete = false;
	}
	return purged;
}

/*
 * Purge every event of the facade appended at or before `cutoff` (see the
 * header comment); returns how many events were purged.  Deletes happen in
 * the current transaction.
 */
int64
spindle_purge_older_than(Relation facade, TimestampTz cutoff)
{
	SpindleDirectory *dir;
	Snapshot	snapshot = GetTransactionSnapshot();
	CommandId	cid = GetCurrentCommandId(true);
	uint32		cutoff_s = spindle_time_floor(cutoff);
	int64		purged = 0;
	int			i;

	dir = spindle_directory_acquire(facade);
	for (i = 0; i < dir->nspindles; i++)
	{
		SpindleEntry *sp = &dir->spindles[i];
		Relation	seg;
		TimestampTz filled_at;
		bool		full;
		bool		whole;
		bool		complete = true;
		int64		here = 0;
		BlockNumber nblocks,
					blk;
		TransactionId horizon;

		/* events of a spindle are never older than the spindle */
		if (sp->created_at > cutoff)
			break;
		if (known_purged(sp))
			continue;
		seg = spindle_open_segment(facade, sp, RowExclusiveLock);
		if (seg == NULL)
			continue;
		full = spindle_slots_full(facade, dir, i, &filled_at);
		whole = full && filled_at != 0 && filled_at <= cutoff;

		nblocks = RelationGetNumberOfBlocks(seg);
		/* once per spindle: computing it scans the proc array */
		horizon = GetOldestNonRemovableTransactionId(seg);
		for (blk = 0; blk < nblocks; blk++)
		{
			int64		n;

			CHECK_FOR_INTERRUPTS();
			n = purge_page(seg, blk, snapshot, cid, horizon,
						   whole ? PG_UINT32_MAX : cutoff_s, &complete);

			/* counted at commit (counters.c) */
			if (n > 0)
				spindle_counters_deleted(sp->segment, (int) n);
			here += n;
		}
		relation_close(seg, NoLock);
		if (here > 0)
			spindle_note_touched(RelationGetRelid(facade), sp->spindle_no);
		purged += here;
		if (whole && complete)
			purged_at_commit(sp);
	}
	spindle_directory_release(dir);
	CommandCounterIncrement();
	return purged;
}

/*
 * spindle.purge_expired(rel regclass, ttl interval DEFAULT NULL)
 *	  RETURNS bigint
 *
 * Needs the table's owner (or a member of the owning role), checked before
 * the table is locked, so that a role without the right never queues a
 * lock behind the table's users.  A TTL purge is retention maintenance:
 * like TRUNCATE it fires no row triggers and is not filtered by row-level
 * security.  So an owner whom row-level security applies to (FORCE ROW
 * LEVEL SECURITY, no BYPASSRLS) is refused rather than allowed to purge
 * events its policies hide from it.  Locks the table in RowExclusiveLock
 * mode, as DELETE does.
 */
Datum
spindle_purge_expired(PG_FUNCTION_ARGS)
{
	Oid			relid;
	Relation	rel;
	Interval	ttl;
	TimestampTz cutoff;
	int64		purged;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("relation must not be NULL")));
	PreventCommandIfReadOnly("spindle.purge_expired()");
	relid = PG_GETARG_OID(0);
	/* rights before the lock; an unknown OID is an error here already */
	if (!pg_class_ownercheck(relid, GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_TABLE, get_rel_name(relid));
	if (check_enable_rls(relid, InvalidOid, false) == RLS_ENABLED)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("cannot purge expired events of \"%s\": row-level security applies to the current user",
						get_rel_name(relid)),
				 errdetail("A purge is not filtered by row-level security policies."),
				 errhint("Run it as a role that bypasses row-level security, or use ALTER TABLE ... NO FORCE ROW LEVEL SECURITY.")));
	rel = spindle_open_facade(relid, RowExclusiveLock);

	if (!PG_ARGISNULL(1))
		ttl = *PG_GETARG_INTERVAL_P(1);
	else if (!spindle_rel_ttl_option(relid, &ttl))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("spindle table \"%s\" has no time_to_live",
						RelationGetRelationName(rel)),
				 errhint("Pass a ttl, or set one with ALTER TABLE %s SET (time_to_live = '1 hour').",
						 RelationGetRelationName(rel))));
	{
		Interval	zero;

		memset(&zero, 0, sizeof(zero));
		if (DatumGetInt32(DirectFunctionCall2(interval_cmp,
											  IntervalPGetDatum(&ttl),
											  IntervalPGetDatum(&zero))) < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ttl must not be negative")));
	}
	cutoff = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
													 TimestampTzGetDatum(GetCurrentTimestamp()),
													 IntervalPGetDatum(&ttl)));
	purged = spindle_purge_older_than(rel, cutoff);
	relation_close(rel, NoLock);
	PG_RETURN_INT64(purged);
}
