/*-------------------------------------------------------------------------
 *
 * ttl.c
 *	  Time-to-live purge: spindle.purge_expired().
 *
 * What "appended at" means.  Spindle keeps no timestamp per event (that
 * would be a write per event).  Instead it bounds, from above, the time at
 * which each event was appended:
 *   - every event of a full spindle was appended no later than the
 *     spindle's filled_at (the moment its last slot was handed out);
 *   - every event on a page was appended no later than the WAL record that
 *     last changed the page (its page LSN).  A shared ring of samples
 *     (time T, WAL insert position P), taken by the worker every naptime
 *     and at each checkpoint known at start, turns an LSN L into a time:
 *     the earliest sample with P >= L was taken after the event was
 *     appended.
 * An event is purged once that bound is older than the TTL.  So an event
 * is never purged before it is `ttl` old; it may be purged later than
 * that, by up to one naptime, or longer when a later change to its page
 * (another event appended, deleted or locked there) moves the page LSN.
 * Unlogged tables have no page LSNs: they are purged a spindle at a time,
 * once the spindle is full and its filled_at is older than the TTL.
 *
 * Purging deletes each expired event (heap_delete on its spindle, one WAL
 * record per event), skipping events other transactions hold locked.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/relation.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_control.h"
#include "common/controldata_utils.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "spindle.h"

PG_FUNCTION_INFO_V1(spindle_purge_expired);

#define LSN_SAMPLES 1024

typedef struct LsnSample
{
	TimestampTz time;
	XLogRecPtr	lsn;
} LsnSample;

typedef struct LsnRing
{
	LWLock	   *lock;
	int			n;				/* samples in use, oldest first */
	LsnSample	samples[LSN_SAMPLES];
} LsnRing;

static LsnRing *ring = NULL;

Size
spindle_ttl_shmem_size(void)
{
	return MAXALIGN(sizeof(LsnRing));
}

void
spindle_ttl_shmem_startup(void)
{
	bool		found;

	ring = ShmemInitStruct("spindle lsn samples", sizeof(LsnRing), &found);
	if (!found)
	{
		ring->lock = &(GetNamedLWLockTranche("spindle_ttl"))[0].lock;
		ring->n = 0;
	}
}

/*
 * Record that the WAL insert position was `lsn` at time `when` or later.
 * When the ring is full, every other sample of its older half goes, so the
 * ring covers a long past with decreasing precision.
 */
static void
add_sample(TimestampTz when, XLogRecPtr lsn)
{
	LWLockAcquire(ring->lock, LW_EXCLUSIVE);
	if (ring->n > 0 && ring->samples[ring->n - 1].lsn >= lsn)
	{
		LWLockRelease(ring->lock);
		return;					/* nothing new since the last sample */
	}
	if (ring->n == LSN_SAMPLES)
	{
		int			half = LSN_SAMPLES / 2;
		int			i,
					j = 0;

		for (i = 0; i < half; i += 2)
			ring->samples[j++] = ring->samples[i];
		for (i = half; i < LSN_SAMPLES; i++)
			ring->samples[j++] = ring->samples[i];
		ring->n = j;
	}
	ring->samples[ring->n].time = when;
	ring->samples[ring->n].lsn = lsn;
	ring->n++;
	LWLockRelease(ring->lock);
}

/* Take a sample now (the worker calls this every naptime). */
void
spindle_ttl_sample(void)
{
	if (ring == NULL || RecoveryInProgress())
		return;
	/* the insert position is read before the time: T is after P */
	{
		XLogRecPtr	lsn = GetXLogInsertRecPtr();

		add_sample(GetCurrentTimestamp(), lsn);
	}
}

/*
 * Seed the ring with the last checkpoint, which survives restarts: every
 * page LSN up to its redo pointer was written before its start time.
 */
static void
seed_from_checkpoint(void)
{
	bool		crc_ok;
	ControlFileData *cf;

	LWLockAcquire(ring->lock, LW_SHARED);
	if (ring->n > 0)
	{
		LWLockRelease(ring->lock);
		return;
	}
	LWLockRelease(ring->lock);

	LWLockAcquire(ControlFileLock, LW_SHARED);
	cf = get_controlfile(DataDir, &crc_ok);
	LWLockRelease(ControlFileLock);
	if (crc_ok)
		add_sample(time_t_to_timestamptz(cf->checkPointCopy.time),
				   cf->checkPointCopy.redo);
	pfree(cf);
}

/*
 * The earliest time known to be after the WAL position lsn, or 0 if none
 * is known yet.
 */
static TimestampTz
time_after_lsn(XLogRecPtr lsn)
{
	TimestampTz result = 0;
	int			lo,
				hi;

	LWLockAcquire(ring->lock, LW_SHARED);
	lo = 0;
	hi = ring->n - 1;
	while (lo <= hi)
	{
		int			mid = (lo + hi) / 2;

		if (ring->samples[mid].lsn >= lsn)
		{
			result = ring->samples[mid].time;
			hi = mid - 1;
		}
		else
			lo = mid + 1;
	}
	LWLockRelease(ring->lock);
	return result;
}

/* Delete the events of one page that our snapshot sees; count them. */
static int64
purge_page(Relation seg, BlockNumber blk, Snapshot snapshot, CommandId cid)
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
		if (HeapTupleSatisfiesVisibility(&tuple, snapshot, buf))
			offsets[n++] = off;
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
	}
	return purged;
}

/*
 * Purge every event of the facade appended more than `ttl` ago (see the
 * header comment); returns how many events were purged.  Deletes happen in
 * the current transaction.
 */
int64
spindle_purge_older_than(Relation facade, TimestampTz cutoff)
{
	SpindleDirectory *dir;
	Snapshot	snapshot = GetTransactionSnapshot();
	CommandId	cid = GetCurrentCommandId(true);
	int64		purged = 0;
	int			i;

	seed_from_checkpoint();
	spindle_ttl_sample();
	dir = spindle_directory_acquire(facade);
	for (i = 0; i < dir->nspindles; i++)
	{
		SpindleEntry *sp = &dir->spindles[i];
		Relation	seg = try_relation_open(sp->segment, RowExclusiveLock);
		Relation	next = NULL;
		TimestampTz filled_at = sp->filled_at;
		bool		full;
		TimestampTz shm_filled;
		BlockNumber nblocks,
					blk;
		bool		whole;

		if (seg == NULL)
			continue;
		if (i + 1 < dir->nspindles)
			next = try_relation_open(dir->spindles[i + 1].segment,
									 AccessShareLock);
		(void) spindle_slots_used(seg, sp, &full, &shm_filled, next);
		if (next != NULL)
			relation_close(next, AccessShareLock);
		if (filled_at == 0 && full)
			filled_at = shm_filled;
		whole = full && filled_at != 0 && filled_at <= cutoff;

		nblocks = RelationGetNumberOfBlocks(seg);
		for (blk = 0; blk < nblocks; blk++)
		{
			bool		expired = whole;

			CHECK_FOR_INTERRUPTS();
			if (!expired && RelationNeedsWAL(seg))
			{
				Buffer		buf = ReadBuffer(seg, blk);
				XLogRecPtr	lsn;
				TimestampTz after;

				LockBuffer(buf, BUFFER_LOCK_SHARE);
				lsn = PageGetLSN(BufferGetPage(buf));
				UnlockReleaseBuffer(buf);
				after = time_after_lsn(lsn);
				expired = after != 0 && after <= cutoff;
			}
			if (expired)
				purged += purge_page(seg, blk, snapshot, cid);
		}
		relation_close(seg, NoLock);
		/* spindles are filled in order: a later one is no older */
		if (!whole && !full)
			break;
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
