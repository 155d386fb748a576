/*-------------------------------------------------------------------------
 *
 * maintenance.c
 *	  Dropping spindles, removing the index entries of dropped spindles,
 *	  and creating spindles on behalf of producers (a helper process).
 *
 * A spindle is droppable when it is full and every slot in it is dead to
 * everyone: its inserter aborted, or its deleter committed and no running
 * snapshot of this database (nor a replication slot, nor a standby with
 * hot_standby_feedback) predates that deleter -- heap's own rule for
 * removing a tuple (HeapTupleSatisfiesVacuum against
 * GetOldestNonRemovableTransactionId, as VACUUM decides).
 * Dropping never waits: a spindle anyone holds a lock on is skipped.
 *
 * The drop itself is a catalog DROP of the spindle's relation (with its
 * TOAST table), so its WAL and its replay on standbys are core's.  The
 * index entries pointing into a dropped spindle are harmless (the fetch
 * finds no spindle and reports them dead, so btree kills them), but its
 * virtual TIDs may only be reused once no index holds them: after the drop
 * has committed, spindle_cleanup_dropped() bulk-deletes them from every
 * index of the table and frees the chunks.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "commands/vacuum.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/bufmgr.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "storage/procarray.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "spindle.h"

PG_FUNCTION_INFO_V1(spindle_drop_spindles);

/*
 * Count a spindle's slots: events = line pointers ever used; purged = those
 * whose event is deleted by a committed transaction or whose insert
 * aborted; dead_to_all = purged ones no snapshot can still see.  Reads
 * every page under a share lock; the caller holds a lock on the relation.
 */
void
spindle_count_segment(Relation segrel, int64 *events, int64 *purged,
					  int64 *dead_to_all)
{
	BlockNumber nblocks = RelationGetNumberOfBlocks(segrel);
	BlockNumber blk;

	/*
	 * Computed afresh, as VACUUM does: GlobalVisTestFor()'s horizons are
	 * only refreshed with this backend's snapshots, which PostgreSQL reuses
	 * while no transaction with an xid ends, so they can stay behind a
	 * snapshot that is long gone.
	 */
	TransactionId oldest_xmin = GetOldestNonRemovableTransactionId(segrel);
	BufferAccessStrategy strategy = GetAccessStrategy(BAS_BULKREAD);

	*events = *purged = *dead_to_all = 0;
	for (blk = 0; blk < nblocks; blk++)
	{
		Buffer		buf;
		Page		page;
		OffsetNumber off,
					maxoff;

		CHECK_FOR_INTERRUPTS();
		buf = ReadBufferExtended(segrel, MAIN_FORKNUM, blk, RBM_NORMAL, strategy);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		if (PageIsNew(page))
		{
			UnlockReleaseBuffer(buf);
			continue;
		}
		maxoff = PageGetMaxOffsetNumber(page);
		*events += maxoff;
		for (off = FirstOffsetNumber; off <= maxoff; off++)
		{
			ItemId		itemid = PageGetItemId(page, off);
			HeapTupleData tuple;

			if (!ItemIdIsNormal(itemid))
			{
				/* pruned: dead to everyone */
				(*purged)++;
				(*dead_to_all)++;
				continue;
			}
			tuple.t_data = (HeapTupleHeader) PageGetItem(page, itemid);
			tuple.t_len = ItemIdGetLength(itemid);
			tuple.t_tableOid = RelationGetRelid(segrel);
			ItemPointerSet(&tuple.t_self, blk, off);
			switch (HeapTupleSatisfiesVacuum(&tuple, oldest_xmin, buf))
			{
				case HEAPTUPLE_DEAD:
					(*purged)++;
					(*dead_to_all)++;
					break;
				case HEAPTUPLE_RECENTLY_DEAD:
					(*purged)++;
					break;
				default:
					break;
			}
		}
		UnlockReleaseBuffer(buf);
	}
	FreeAccessStrategy(strategy);
}

/*
 * The worker looks at its tables every naptime; recounting every full
 * spindle each time would cost a scan of all of them.  It remembers each
 * spindle's last count and counts again only when something may have
 * changed: the spindle's delete counter in the statistics moved, or purged
 * events were waiting for the xmin horizon and it advanced, or a minute
 * passed (statistics are flushed lazily).
 */
typedef struct CountCacheEntry
{
	Oid			segment;
	PgStat_Counter deleted;
	TransactionId horizon;
	TimestampTz counted_at;
	int64		events;
	int64		purged;
	int64		dead;
} CountCacheEntry;

static HTAB *count_cache = NULL;

static void
count_cached(Relation seg, int64 *events, int64 *purged, int64 *dead)
{
	PgStat_StatTabEntry *st = pgstat_fetch_stat_tabentry(RelationGetRelid(seg));
	PgStat_Counter deleted = st ? st->tuples_deleted : -1;
	TransactionId horizon = GetOldestNonRemovableTransactionId(seg);
	TimestampTz now = GetCurrentTimestamp();
	CountCacheEntry *e;
	Oid			relid = RelationGetRelid(seg);
	bool		found;

	if (count_cache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(CountCacheEntry);
		ctl.hcxt = TopMemoryContext;
		count_cache = hash_create("spindle counts", 256, &ctl,
								  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	e = hash_search(count_cache, &relid, HASH_ENTER, &found);
	if (found && deleted >= 0 && e->deleted == deleted &&
		(e->purged == e->dead || e->horizon == horizon) &&
		!TimestampDifferenceExceeds(e->counted_at, now, 60000))
	{
		*events = e->events;
		*purged = e->purged;
		*dead = e->dead;
		return;
	}
	spindle_count_segment(seg, events, purged, dead);
	e->deleted = deleted;
	e->horizon = horizon;
	e->counted_at = now;
	e->events = *events;
	e->purged = *purged;
	e->dead = *dead;
}

/*
 * Drop every droppable spindle of a facade; returns how many and adds the
 * bytes they held to *bytes_freed.  Skips the table if another maintenance
 * run holds it, and any spindle somebody has locked.  Also records the
 * fill time of full spindles.  Called with at least AccessShareLock on the
 * facade; use_cache is for the worker (see count_cached).
 */
int
spindle_drop_droppable_stats(Relation facade, int64 *bytes_freed,
							 bool use_cache)
{
	SpindleDirectory *dir;
	int			ndropped = 0;
	int			i;

	if (!ConditionalLockRelationOid(RelationGetRelid(facade),
									ShareUpdateExclusiveLock))
		return 0;

	/* first retire the index entries of spindles dropped before */
	spindle_cleanup_dropped(facade);

	dir = spindle_directory_acquire(facade);
	for (i = 0; i < dir->nspindles; i++)
	{
		SpindleEntry *sp = &dir->spindles[i];
		Relation	seg;
		TimestampTz filled_at;
		int64		events,
					purged,
					dead;
		int64		bytes;
		ObjectAddress addr;

		if (sp->capacity == 0)
			continue;			/* a single spindle, never dropped */
		seg = try_relation_open(sp->segment, AccessShareLock);
		if (seg == NULL)
			continue;
		/* spindles fill in order: none after the first unfilled one is full */
		if (!spindle_slots_full(dir, i, &filled_at))
		{
			relation_close(seg, AccessShareLock);
			break;
		}
		if (sp->filled_at == 0 && filled_at != 0)
			spindle_catalog_set_filled(RelationGetRelid(facade),
									   sp->spindle_no, filled_at);
		if (use_cache)
			count_cached(seg, &events, &purged, &dead);
		else
			spindle_count_segment(seg, &events, &purged, &dead);
		if (dead < events ||
			!ConditionalLockRelationOid(sp->segment, AccessExclusiveLock))
		{
			relation_close(seg, AccessShareLock);
			continue;
		}
		/* nobody else holds it now; nothing can come back to life */
		bytes = DatumGetInt64(DirectFunctionCall1(pg_total_relation_size,
												  ObjectIdGetDatum(sp->segment)));
		relation_close(seg, NoLock);

		ObjectAddressSet(addr, RelationRelationId, sp->segment);
		performDeletion(&addr, DROP_RESTRICT,
						PERFORM_DELETION_INTERNAL | PERFORM_DELETION_QUIETLY);
		spindle_catalog_mark_dropped(RelationGetRelid(facade), sp->spindle_no,
									 bytes);
		*bytes_freed += bytes;
		ndropped++;
	}
	spindle_directory_release(dir);
	if (ndropped > 0)
	{
		CacheInvalidateRelcacheByRelid(RelationGetRelid(facade));
		CommandCounterIncrement();
	}
	return ndropped;
}

int
spindle_drop_droppable(Relation facade)
{
	int64		freed = 0;

	return spindle_drop_droppable_stats(facade, &freed, false);
}

/*
 * Make sure an empty spindle follows the open one, so that producers find
 * it ready; never waits for the table's maintenance lock.
 */
void
spindle_ensure_ready(Relation facade)
{
	bool		found;

	if (spindle_rel_capacity_option(RelationGetRelid(facade), &found) == 0 &&
		found)
		return;					/* one single spindle, made at CREATE */
	if (!ConditionalLockRelationOid(RelationGetRelid(facade),
									ShareUpdateExclusiveLock))
		return;
	(void) spindle_create_spindles(facade, 1, true);
}

/* Bulk-delete callback: is this TID in a chunk being retired? */
static bool
tid_in_dead_chunk(ItemPointer itemptr, void *state)
{
	bool	   *dead = (bool *) state;
	BlockNumber blk = ItemPointerGetBlockNumber(itemptr);

	return blk < SPINDLE_VIRTUAL_BLOCKS && dead[blk >> SPINDLE_CHUNK_BITS];
}

/*
 * Remove from every index of the facade the entries that point into
 * spindles whose drop has committed, then free their chunks and forget
 * them.  One pass over each index however many spindles are retired.  The
 * caller holds ShareUpdateExclusiveLock on the facade (which also keeps
 * VACUUM of the facade from bulk-deleting the same indexes at once).
 */
void
spindle_cleanup_dropped(Relation facade)
{
	int			n;
	int64	   *nos = spindle_catalog_dropped(RelationGetRelid(facade), &n);
	uint32		entries[SPINDLE_NCHUNKS];
	bool		dead[SPINDLE_NCHUNKS];
	bool		any = false;
	int			c,
				j;

	if (n == 0)
		return;
	spindle_chunkmap_mapped(facade, entries);
	for (c = 0; c < SPINDLE_NCHUNKS; c++)
	{
		dead[c] = false;
		if (entries[c] == 0)
			continue;
		for (j = 0; j < n; j++)
			if (spindle_entry_tag(entries[c]) == spindle_tag(nos[j]))
			{
				dead[c] = true;
				any = true;
				break;
			}
	}

	if (any)
	{
		Relation   *indexes;
		int			nindexes;
		BufferAccessStrategy strategy = GetAccessStrategy(BAS_VACUUM);

		vac_open_indexes(facade, RowExclusiveLock, &nindexes, &indexes);
		for (j = 0; j < nindexes; j++)
		{
			IndexVacuumInfo ivinfo;
			IndexBulkDeleteResult *stats;

			ivinfo.index = indexes[j];
			ivinfo.analyze_only = false;
			ivinfo.report_progress = false;
			ivinfo.estimated_count = true;
			ivinfo.message_level = DEBUG2;
			ivinfo.num_heap_tuples = Max(facade->rd_rel->reltuples, 0);
			ivinfo.strategy = strategy;
			stats = index_bulk_delete(&ivinfo, NULL, tid_in_dead_chunk, dead);
			stats = index_vacuum_cleanup(&ivinfo, stats);
			if (stats)
				pfree(stats);
		}
		vac_close_indexes(nindexes, indexes, NoLock);
		FreeAccessStrategy(strategy);
	}
	spindle_chunkmap_free_spindles(facade, nos, n);
	spindle_catalog_forget_dropped(RelationGetRelid(facade), nos, n);
}

/*
 * Run each spindle's own (slot-preserving) vacuum; see segment_am.c.  The
 * caller holds ShareUpdateExclusiveLock on the facade.
 */
void
spindle_vacuum_spindles(Relation facade, struct VacuumParams *params,
						BufferAccessStrategy bstrategy)
{
	SpindleDirectory *dir = spindle_directory_acquire(facade);
	int			i;

	for (i = 0; i < dir->nspindles; i++)
	{
		Relation	seg = try_relation_open(dir->spindles[i].segment,
											ShareUpdateExclusiveLock);

		if (seg == NULL)
			continue;
		spindle_segment_vacuum(seg, params, bstrategy);
		relation_close(seg, NoLock);
	}
	spindle_directory_release(dir);
}

/*
 * spindle.drop_spindles(rel regclass DEFAULT NULL) RETURNS integer
 *
 * Drop the droppable spindles of rel, or of every spindle table of this
 * database the caller owns.  Never waits for a spindle.  Ownership is
 * checked before the table is locked (AccessShareLock), so that a role
 * without the right never queues a lock behind the table's users.
 */
Datum
spindle_drop_spindles(PG_FUNCTION_ARGS)
{
	int			total = 0;

	if (!PG_ARGISNULL(0))
	{
		Oid			relid = PG_GETARG_OID(0);
		Relation	rel;

		/* rights before the lock; an unknown OID is an error here already */
		if (!pg_class_ownercheck(relid, GetUserId()))
			aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_TABLE,
						   get_rel_name(relid));
		rel = spindle_open_facade(relid, AccessShareLock);
		total = spindle_drop_droppable(rel);
		relation_close(rel, NoLock);
	}
	else
	{
		List	   *tables = spindle_catalog_tables();
		ListCell   *lc;

		foreach(lc, tables)
		{
			Oid			relid = lfirst_oid(lc);
			Relation	rel;

			if (!pg_class_ownercheck(relid, GetUserId()))
				continue;
			rel = try_relation_open(relid, AccessShareLock);
			if (rel == NULL)
				continue;
			if (spindle_is_facade(rel))
				total += spindle_drop_droppable(rel);
			relation_close(rel, NoLock);
		}
	}
	PG_RETURN_INT32(total);
}

/* ----------------------------------------------------------------
 * The spindle creator: a short-lived helper process
 * ----------------------------------------------------------------
 */
typedef struct CreatorArgs
{
	Oid			facade;
	int			count;
} CreatorArgs;

/*
 * Ask a helper process to create `count` ready spindles for the facade in
 * its own transaction, and wait until it has finished.  Returns false if
 * no helper could be started (max_worker_processes reached).
 */
bool
spindle_request_spindles(Relation facade, int count)
{
	BackgroundWorker bgw;
	BackgroundWorkerHandle *handle;
	CreatorArgs args;

	memset(&bgw, 0, sizeof(bgw));
	bgw.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw.bgw_start_time = BgWorkerStart_RecoveryFinished;
	bgw.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(bgw.bgw_library_name, BGW_MAXLEN, "spindle");
	snprintf(bgw.bgw_function_name, BGW_MAXLEN, "spindle_creator_main");
	snprintf(bgw.bgw_name, BGW_MAXLEN, "spindle creator");
	snprintf(bgw.bgw_type, BGW_MAXLEN, "spindle creator");
	bgw.bgw_main_arg = ObjectIdGetDatum(MyDatabaseId);
	bgw.bgw_notify_pid = MyProcPid;
	args.facade = RelationGetRelid(facade);
	args.count = count;
	memcpy(bgw.bgw_extra, &args, sizeof(args));

	if (!RegisterDynamicBackgroundWorker(&bgw, &handle))
		return false;
	(void) WaitForBackgroundWorkerShutdown(handle);
	pfree(handle);
	return true;
}

PGDLLEXPORT void spindle_creator_main(Datum main_arg);

void
spindle_creator_main(Datum main_arg)
{
	CreatorArgs args;
	Relation	rel;

	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof(args));
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(DatumGetObjectId(main_arg),
											  InvalidOid, 0);
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	/* never hang behind a lock a producer holds: it would wait for us */
	SetConfigOption("lock_timeout", "10s", PGC_SUSET, PGC_S_OVERRIDE);
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "creating spindles");

	rel = try_relation_open(args.facade, AccessShareLock);
	if (rel != NULL)
	{
		if (spindle_is_facade(rel))
			(void) spindle_create_spindles(rel, args.count, true);
		relation_close(rel, NoLock);
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	proc_exit(0);
}
