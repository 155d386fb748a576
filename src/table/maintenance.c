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
 * TOAST table), so its WAL and its replay on standbys are core's.  A DROP
 * carries no snapshot-conflict horizon, though, and a hot standby without
 * hot_standby_feedback may still run snapshots that see the spindle's
 * deleted events: the dropping transaction first writes one heap freeze
 * record with no tuple on a page of the spindle, whose redo cancels (or,
 * with max_standby_streaming_delay = -1, waits for) those snapshots as
 * heap's prune and freeze records do (see spindle_log_drop_conflict).
 * That record comes before the transaction's first ACCESS EXCLUSIVE lock:
 * such a lock is WAL-logged when it is taken and held by the standby's
 * startup process until the commit, so a startup process waiting for a
 * snapshot while holding it would wait forever for a query that waits for
 * the lock.  The horizon logged is that of the count made under ACCESS
 * SHARE lock; each spindle is counted again under its ACCESS EXCLUSIVE
 * lock, taken without waiting, and dropped only if it is still all dead
 * with a horizon the record covers (drop_if_dead).  The
 * index entries pointing into a dropped spindle are harmless (the fetch
 * finds no spindle and reports them dead, so btree kills them), but its
 * virtual TIDs may only be reused once no index holds them: after the drop
 * has committed, spindle_cleanup_dropped() bulk-deletes them from every
 * index of the table, zeroes their slot map entries and gives the range
 * back; it does the same for the ranges of spindle creations that rolled
 * back.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/heapam_xlog.h"
#include "access/htup_details.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "access/xloginsert.h"
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
#include "storage/lock.h"
#include "storage/procarray.h"
#include "tcop/utility.h"
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

#include "table/spindle_table.h"


PG_FUNCTION_INFO_V1(spindle_drop_spindles);

/*
 * Count an event live on its page, msg_id id, into *c with what the
 * consume log (entries log[0..nlog), floor) says of it: below the floor,
 * or consumed by an entry
 * committed before the horizon, it is purged and dead (its xid a standby
 * conflict horizon, as a deleter's); committed after it, purged; by a
 * running one, busy; else live.
 */
static void
count_live(SpindleCounts *c, const SpindleConsumed *log, int nlog,
		   int64 floor, int64 id, TransactionId oldest_xmin)
{
	const SpindleConsumed *e = nlog > 0 ?
		spindle_consume_log_find(log, nlog, id) : NULL;

	if (id < floor)
	{
		/* folded into the floor: consumed before every snapshot */
		c->purged++;
		c->dead++;
		return;
	}
	switch (spindle_consume_log_state(e, oldest_xmin))
	{
		case SPINDLE_ENTRY_DEAD:
			{
				TransactionId xid = XidFromFullTransactionId(e->fxid);

				c->purged++;
				c->dead++;
				if (TransactionIdIsNormal(xid) &&
					(!TransactionIdIsValid(c->latest_removed) ||
					 TransactionIdFollows(xid, c->latest_removed)))
					c->latest_removed = xid;
			}
			break;
		case SPINDLE_ENTRY_RECENT:
			c->purged++;
			break;
		case SPINDLE_ENTRY_RUNNING:
			c->busy++;
			break;
		default:
			c->live++;
			break;
	}
}

/*
 * Count copy k, live on its page, into *c if a relocation entry of
 * moved[0..nmoved) hides it (compaction moved it to an annex): committed
 * before the horizon (or frozen), it is purged and dead, the entry's xid
 * a standby conflict horizon as a deleter's; committed after it, purged;
 * by a running mover, busy.  False (nothing counted) if no entry hides it
 * (none, or its mover aborted): the consume log and the page decide.
 */
static bool
count_moved(SpindleCounts *c, const SpindleRelocation *moved, int nmoved,
			int64 k, TransactionId oldest_xmin)
{
	const SpindleRelocation *e = nmoved > 0 ?
		spindle_reloc_find(moved, nmoved, k) : NULL;

	switch (spindle_reloc_state(e, oldest_xmin))
	{
		case SPINDLE_ENTRY_DEAD:
			c->purged++;
			c->dead++;
			if (TransactionIdIsNormal(e->xid) &&
				(!TransactionIdIsValid(c->latest_removed) ||
				 TransactionIdFollows(e->xid, c->latest_removed)))
				c->latest_removed = e->xid;
			return true;
		case SPINDLE_ENTRY_RECENT:
			c->purged++;
			return true;
		case SPINDLE_ENTRY_RUNNING:
			c->busy++;
			return true;
		default:
			return false;
	}
}

/*
 * Count a spindle's slots into *c: events = line pointers ever used;
 * purged = those whose event is deleted by a committed transaction or
 * whose insert aborted, and copies a committed relocation entry hides
 * (compaction moved them: count_moved); dead = purged ones no snapshot
 * can still see; live = events inserted by a committed transaction and
 * not deleted (or deleted by one that aborted) nor consumed by a
 * committed entry of the queue's consume log nor moved; busy = events
 * whose inserter, deleter, consumer or mover is still running.  Reads every page under a share lock; the caller holds a
 * lock on the relation.
 *
 * latest_removed is set to the latest xid whose removal a hot standby
 * snapshot could still need if the events dead to all were removed now
 * (InvalidTransactionId if none): heap's own measure
 * (HeapTupleHeaderAdvanceLatestRemovedXid) over the tuples that are DEAD
 * -- in practice the latest committed deleter, since an aborted insert
 * was never seen by anyone -- and over the relocation entries that hide
 * copies dead to all (their movers' xids: a standby snapshot older than
 * a move still reads the old copy).  Line pointers no longer normal were pruned,
 * and pruning wrote its own conflict horizon.  The spindle's TOAST
 * tuples are deleted by the transactions that delete their events, so
 * the events' xids cover them too.
 */
void
spindle_count_segment(Relation facade, const SpindleEntry *sp,
					  Relation segrel, SpindleCounts *c)
{
	BlockNumber nblocks = RelationGetNumberOfBlocks(segrel);
	BlockNumber blk;
	SpindleConsumed *log;
	int			nlog;
	int64		floor;
	SpindleRelocation *moved;
	int			nmoved;

	/*
	 * Computed afresh, as VACUUM does: GlobalVisTestFor()'s horizons are
	 * only refreshed with this backend's snapshots, which PostgreSQL reuses
	 * while no transaction with an xid ends, so they can stay behind a
	 * snapshot that is long gone.
	 */
	TransactionId oldest_xmin = GetOldestNonRemovableTransactionId(segrel);
	BufferAccessStrategy strategy = GetAccessStrategy(BAS_BULKREAD);

	memset(c, 0, sizeof(SpindleCounts));
	c->latest_removed = InvalidTransactionId;
	/* read after the horizon: an entry it finds dead stays dead */
	if (spindle_is_annex(sp))
	{
		/* no event numbers: the consume log covers none of its copies */
		log = NULL;
		nlog = 0;
		floor = PG_INT64_MIN;
	}
	else
		log = spindle_consume_log_over(RelationGetRelid(facade), sp->first_no,
									   sp->first_no + sp->vcount,
									   &nlog, &floor);
	/* the copies compaction moved away (also read after the horizon) */
	moved = spindle_reloc_read_for(RelationGetRelid(facade), sp->spindle_no,
								   &nmoved);
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
		c->events += maxoff;
		for (off = FirstOffsetNumber; off <= maxoff; off++)
		{
			ItemId		itemid = PageGetItemId(page, off);
			HeapTupleData tuple;

			if (!ItemIdIsNormal(itemid))
			{
				/* pruned: dead to everyone */
				c->purged++;
				c->dead++;
				continue;
			}
			tuple.t_data = (HeapTupleHeader) PageGetItem(page, itemid);
			tuple.t_len = ItemIdGetLength(itemid);
			tuple.t_tableOid = RelationGetRelid(segrel);
			ItemPointerSet(&tuple.t_self, blk, off);
			switch (HeapTupleSatisfiesVacuum(&tuple, oldest_xmin, buf))
			{
				case HEAPTUPLE_DEAD:
					c->purged++;
					c->dead++;
					HeapTupleHeaderAdvanceLatestRemovedXid(tuple.t_data,
														   &c->latest_removed);
					break;
				case HEAPTUPLE_RECENTLY_DEAD:
					c->purged++;
					break;
				case HEAPTUPLE_LIVE:
					{
						int32		k = spindle_event_k(tuple.t_data,
														tuple.t_len);

						if (!count_moved(c, moved, nmoved, k, oldest_xmin))
							count_live(c, log, nlog, floor, sp->first_no + k,
									   oldest_xmin);
					}
					break;
				case HEAPTUPLE_INSERT_IN_PROGRESS:
					c->inserting++;
					c->busy++;
					break;
				case HEAPTUPLE_DELETE_IN_PROGRESS:
					c->busy++;
					break;
			}
		}
		UnlockReleaseBuffer(buf);
	}
	FreeAccessStrategy(strategy);
	if (log != NULL)
		pfree(log);
	if (moved != NULL)
		pfree(moved);
}

/*
 * The worker looks at its tables every naptime.  Spindles with a live
 * event are passed over as settled (touched.c) until a delete is noted in
 * them; the others, whose events are all purged or whose transactions are
 * still running, are looked at every round.  For those whose events are
 * all purged and that wait for the xmin horizon, it remembers the last
 * count and counts again only when something may have changed: the
 * spindle's delete counter in the statistics moved, or purged events were
 * waiting for the xmin horizon and it advanced, or a minute passed.  A
 * count that found a live event or a running transaction is never reused:
 * the statistics are flushed lazily, so they may not show the delete that
 * unsettled the spindle yet.  The standby-conflict xid is remembered with
 * the count: once every event is dead to all, no event can be deleted any
 * more, so it cannot grow.  An annex (collect_droppable_annexes) has no
 * settled runs: a count that found a live copy and no running transaction
 * is reused while its delete counter stays and for at most a minute (a
 * delete the statistics do not show yet delays its drop, never more).
 */
typedef struct CountCacheEntry
{
	Oid			segment;
	PgStat_Counter deleted;
	TransactionId horizon;
	TimestampTz counted_at;
	SpindleCounts counts;
} CountCacheEntry;

static HTAB *count_cache = NULL;

static void
count_cached(Relation facade, const SpindleEntry *sp, Relation seg,
			 SpindleCounts *c)
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
		e->counts.busy == 0 &&
		((e->counts.live == 0 &&
		  (e->counts.purged == e->counts.dead || e->horizon == horizon)) ||
		 (e->counts.live > 0 && spindle_is_annex(sp))) &&
		!TimestampDifferenceExceeds(e->counted_at, now, 60000))
	{
		*c = e->counts;
		return;
	}
	spindle_count_segment(facade, sp, seg, c);
	e->deleted = deleted;
	e->horizon = horizon;
	e->counted_at = now;
	e->counts = *c;
}

/*
 * Forget the count this backend keeps of a spindle or annex: compaction
 * moved copies out of it (relocate.c), which no delete counter shows.
 */
void
spindle_count_cache_forget(Oid segment)
{
	if (count_cache != NULL)
		(void) hash_search(count_cache, &segment, HASH_REMOVE, NULL);
}

/*
 * Make hot standbys cancel the snapshots that could still see an event of
 * a spindle about to be dropped: latest_removed is the xid computed by
 * spindle_count_segment.  The caller holds at least AccessShareLock on the
 * spindle and has not yet taken any ACCESS EXCLUSIVE lock in its
 * transaction (see cover_drop_conflict).
 *
 * Heap's DELETE + VACUUM is safe on a standby because prune and freeze
 * redo call ResolveRecoveryConflictWithSnapshot before removing anything;
 * a DROP has no such horizon (its files go with the commit record), so
 * without this a standby snapshot that still saw the deleted events would
 * silently find the spindle gone.  The record is core's, so standbys need
 * no extension code to replay it: XLOG_HEAP2_FREEZE_PAGE with cutoff
 * latest_removed + 1 and no tuple, on one page of the spindle.  Its redo
 * (heap_xlog_freeze_page) resolves the conflict with cutoff - 1 =
 * latest_removed in the spindle's database (the page only says which
 * database), then only sets the page LSN; it is written before the DROP,
 * so it replays before the files go.  It is
 * built here as log_heap_freeze() builds it, because log_heap_freeze()
 * asserts that it has tuples to freeze.  Other records were set aside: a
 * prune record's redo repacks the page under a cleanup lock, a visibility
 * record would set all-visible bits that are not true, btree's reuse-page
 * record would be another access method's record about a heap relation,
 * and a custom resource manager would stop replay on a standby without the
 * library preloaded.  Written only where a standby can run queries on the
 * spindle (wal_level replica or above, a WAL-logged spindle); the page is
 * otherwise unchanged.
 */
static bool log_conflict_on(Relation seg, TransactionId latest_removed);

static void
spindle_log_drop_conflict(Relation seg, TransactionId latest_removed)
{
	if (!TransactionIdIsValid(latest_removed) ||
		!RelationNeedsWAL(seg) || !XLogStandbyInfoActive())
		return;
	/* a tuple was counted, so some page is initialised: cannot fail */
	if (!log_conflict_on(seg, latest_removed))
		elog(ERROR, "spindle \"%s\" has no initialised page",
			 RelationGetRelationName(seg));
}

/*
 * The record of spindle_log_drop_conflict on the first initialised page
 * of seg; false if it has none.  The caller has checked that standbys
 * need it.
 */
static bool
log_conflict_on(Relation seg, TransactionId latest_removed)
{
	BlockNumber nblocks;
	BlockNumber blk;

	nblocks = RelationGetNumberOfBlocks(seg);
	for (blk = 0; blk < nblocks; blk++)
	{
		Buffer		buf = ReadBuffer(seg, blk);
		Page		page;
		xl_heap_freeze_page xlrec;
		XLogRecPtr	recptr;

		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		page = BufferGetPage(buf);
		if (PageIsNew(page))
		{
			/* an LSN on an all-zero page would make it fail verification */
			UnlockReleaseBuffer(buf);
			continue;
		}

		xlrec.cutoff_xid = latest_removed;
		TransactionIdAdvance(xlrec.cutoff_xid);
		xlrec.ntuples = 0;

		START_CRIT_SECTION();
		MarkBufferDirty(buf);
		XLogBeginInsert();
		XLogRegisterData((char *) &xlrec, SizeOfHeapFreezePage);
		XLogRegisterBuffer(0, buf, REGBUF_STANDARD);
		recptr = XLogInsert(RM_HEAP2_ID, XLOG_HEAP2_FREEZE_PAGE);
		PageSetLSN(page, recptr);
		END_CRIT_SECTION();

		UnlockReleaseBuffer(buf);
		return true;
	}
	return false;
}

static bool log_consumed_conflict(Relation facade, TransactionId latest);

/*
 * Make hot standbys cancel the snapshots that could still see events the
 * consume log's settle is about to fold into its floor (consume_log.c,
 * fold_into_floor): latest is the newest xid folded.  The drop's record
 * (spindle_log_drop_conflict), on the first initialised page of one of
 * the table's spindles, written before the floor is raised.  Takes
 * AccessShareLock on the spindles it opens.
 */
void
spindle_log_consumed_conflict(Relation facade, TransactionId latest)
{
	if (!log_consumed_conflict(facade, latest))
		elog(ERROR, "queue table \"%s\" has no spindle page to log a conflict on",
			 RelationGetRelationName(facade));
}

/*
 * The record of spindle_log_consumed_conflict; false if no spindle of
 * the table has an initialised page (nothing a standby reads then), or
 * none is needed (true).
 */
static bool
log_consumed_conflict(Relation facade, TransactionId latest)
{
	SpindleDirectory *dir;
	bool		logged = false;

	if (!TransactionIdIsNormal(latest) || !XLogStandbyInfoActive() ||
		!RelationNeedsWAL(facade))
		return true;
	dir = spindle_directory_acquire_current(facade);
	for (int i = 0; i < dir->nspindles && !logged; i++)
	{
		Relation	seg = spindle_open_segment(facade, &dir->spindles[i],
											   AccessShareLock);

		if (seg == NULL)
			continue;
		logged = log_conflict_on(seg, latest);
		relation_close(seg, NoLock);
	}
	spindle_directory_release(dir);
	return logged;
}

/*
 * The consume log's freeze (VACUUM of the consumer relation, storage
 * layer: spindle_consume_log_freeze_conflict_hook) is about to make
 * entries up to xid latest FROZEN: the same standby conflict as settle's
 * fold (review of the writer side, finding 4).  Takes the queue table's
 * AccessShareLock without waiting (VACUUM holds its consumer relation,
 * which a TRUNCATE of the table takes after the table): false if it is
 * not free or the table is gone, and the freeze then freezes nothing.  A
 * table without a spindle page needs no conflict.
 */
bool
spindle_log_frozen_conflict(Oid queue_relid, TransactionId latest)
{
	Relation	facade;

	if (!TransactionIdIsNormal(latest) || !XLogStandbyInfoActive())
		return true;
	if (!ConditionalLockRelationOid(queue_relid, AccessShareLock))
		return false;
	facade = try_relation_open(queue_relid, NoLock);
	if (facade == NULL)
	{
		UnlockRelationOid(queue_relid, AccessShareLock);
		return false;
	}
	(void) log_consumed_conflict(facade, latest);
	relation_close(facade, NoLock);
	return true;
}

/*
 * How many spindles one transaction drops at most.  Each drop holds about
 * five locks to commit (the spindle, its TOAST table and index, its row
 * types), so a transaction dropping thousands of spindles would exhaust
 * the shared lock table and fail every time it is retried.  A quarter of
 * the lock table's room is taken at most; the worker goes on in further
 * transactions, and drop_spindles() returns how many it dropped.
 */
int
spindle_drops_per_transaction(void)
{
	return Max(8, max_locks_per_xact * MaxBackends / 20);
}

/*
 * Spindles whose fill time this transaction wrote to spindle_catalog
 * (spindle_known_full).  Their slot counters, the only other record of
 * that time, may go (spindle_slots_recorded) only once the write is
 * committed: before, another backend's view finds the time in neither
 * place, and a rollback would lose it for good.  Kept in
 * TopTransactionContext; each entry carries the subtransaction that wrote
 * it, so that ROLLBACK TO SAVEPOINT forgets it.
 */
typedef struct RecordedFill
{
	SpindleEntry sp;
	SubTransactionId subid;
} RecordedFill;

static List *recorded_fills = NIL;
static bool recorded_fills_callbacks = false;

static void
recorded_fills_xact(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (recorded_fills == NIL)
		return;
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT)
	{
		/* takes an LWLock, raises nothing: safe after the commit */
		foreach(lc, recorded_fills)
			spindle_slots_recorded(&((RecordedFill *) lfirst(lc))->sp);
		recorded_fills = NIL;
	}
	else if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
			 event == XACT_EVENT_PREPARE)
	{
		/* prepared: the counters stay until the directory has the time */
		recorded_fills = NIL;
	}
}

static void
recorded_fills_subxact(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;

	foreach(lc, recorded_fills)
	{
		RecordedFill *r = (RecordedFill *) lfirst(lc);

		if (r->subid != mySubid)
			continue;
		if (event == SUBXACT_EVENT_COMMIT_SUB)
			r->subid = parentSubid;
		else if (event == SUBXACT_EVENT_ABORT_SUB)
			recorded_fills = foreach_delete_current(recorded_fills, lc);
	}
}

/* Drop sp's slot counter when this transaction commits (see above). */
static void
forget_counter_at_commit(const SpindleEntry *sp)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	RecordedFill *r = palloc(sizeof(RecordedFill));

	if (!recorded_fills_callbacks)
	{
		RegisterXactCallback(recorded_fills_xact, NULL);
		RegisterSubXactCallback(recorded_fills_subxact, NULL);
		recorded_fills_callbacks = true;
	}
	r->sp = *sp;
	r->subid = GetCurrentSubTransactionId();
	recorded_fills = lappend(recorded_fills, r);
	MemoryContextSwitchTo(old);
}

/*
 * Whether spindle i of the directory is full (spindles fill in order: none
 * after the first one that is not is full).  A fill time the catalog has
 * answers at once; else the slot counters decide, and a fill time they
 * know is recorded in the catalog and in this backend's directory.
 */
static bool
spindle_known_full(Relation facade, SpindleDirectory *dir, int i)
{
	SpindleEntry *sp = &dir->spindles[i];
	TimestampTz filled_at;

	if (sp->filled_at != 0)
		return true;
	if (!spindle_slots_full(facade, dir, i, &filled_at))
		return false;
	if (filled_at != 0)
	{
		spindle_catalog_set_filled(RelationGetRelid(facade), sp->spindle_no,
								   filled_at);
		sp->filled_at = filled_at;
		/* recorded: its counter is no longer needed once that commits */
		forget_counter_at_commit(sp);
	}
	return true;
}

/*
 * The standby-conflict horizon this transaction has logged
 * (spindle_log_drop_conflict) before taking any ACCESS EXCLUSIVE lock,
 * and the local transaction it belongs to.
 */
static LocalTransactionId conflict_lxid = InvalidLocalTransactionId;
static TransactionId conflict_logged = InvalidTransactionId;

/*
 * Whether the WAL of this transaction resolves, on hot standbys, the
 * snapshot conflicts of dropping a spindle of seg's kind whose events are
 * dead up to horizon, before any ACCESS EXCLUSIVE lock the transaction
 * holds: writes the record if it must and still may (log_if_needed).
 *
 * The order matters on a standby with max_standby_streaming_delay = -1.
 * Every ACCESS EXCLUSIVE lock on a relation is WAL-logged when it is taken
 * (XACT_FLAGS_ACQUIREDACCESSEXCLUSIVELOCK) and the startup process holds it
 * until it replays the commit.  Were a conflict record replayed after it,
 * the startup process would wait for a query whose snapshot may still see
 * the events while holding the lock, and the query, reading the table,
 * would wait for the lock: nobody detects that.  Replayed first, the
 * record waits for the query (as heap's prune does), which can still open
 * every spindle and finish.  So once the transaction holds such a lock, a
 * horizon newer than the one it logged is not covered and the spindle is
 * left for a later transaction.  Several drops of one transaction share
 * one record: the redo only needs the horizon and the database.
 */
static bool
cover_drop_conflict(Relation seg, TransactionId horizon, bool log_if_needed)
{
	if (!TransactionIdIsValid(horizon) ||
		!RelationNeedsWAL(seg) || !XLogStandbyInfoActive())
		return true;
	if (conflict_lxid != MyProc->lxid)
	{
		conflict_lxid = MyProc->lxid;
		conflict_logged = InvalidTransactionId;
	}
	if (TransactionIdIsValid(conflict_logged) &&
		!TransactionIdFollows(horizon, conflict_logged))
		return true;
	if (!log_if_needed ||
		(MyXactFlags & XACT_FLAGS_ACQUIREDACCESSEXCLUSIVELOCK) != 0)
		return false;
	spindle_log_drop_conflict(seg, horizon);
	conflict_logged = horizon;
	return true;
}

/*
 * Whether another backend holds a lock on the spindle, so that our
 * AccessExclusiveLock would not be granted now.  Only a hint (a lock may
 * come or go right after): it saves a conflict record for a spindle that
 * cannot be dropped this round.
 */
static bool
spindle_locked_by_others(Oid segment)
{
	LOCKTAG		tag;
	int			n;

	SET_LOCKTAG_RELATION(tag, MyDatabaseId, segment);
	pfree(GetLockConflicts(&tag, AccessExclusiveLock, &n));
	return n > 0;
}

/*
 * Drop spindle sp if every event in it is still dead to all and the
 * standby-conflict record this transaction wrote before its first ACCESS
 * EXCLUSIVE lock covers them (cover_drop_conflict).  Takes the spindle's
 * AccessExclusiveLock without waiting and counts it again under it: an
 * insert that took the last slot before the first count may have placed
 * its event since (it held the spindle until then), and counts may be
 * cached.  Should that event be dead to all by now, its deleter may be
 * newer than the horizon logged: the spindle is then unlocked and left
 * for the next round, which logs the newer horizon first.  That is rare: a
 * full spindle whose events are all dead gets no new purges (a dead event
 * cannot be deleted again), so only such a late insert, committed and
 * then purged in between, can move its horizon.  seg is open with
 * AccessShareLock and is closed here.  Returns the bytes freed, or -1 if
 * it was not dropped.
 */
static int64
drop_if_dead(Relation facade, SpindleEntry *sp, Relation seg)
{
	SpindleCounts c;
	int64		bytes;
	ObjectAddress addr;

	if (!ConditionalLockRelationOid(sp->segment, AccessExclusiveLock))
	{
		relation_close(seg, AccessShareLock);
		return -1;
	}
	spindle_count_segment(facade, sp, seg, &c);
	if (c.dead < c.events ||
		!cover_drop_conflict(seg, c.latest_removed, false))
	{
		UnlockRelationOid(sp->segment, AccessExclusiveLock);
		relation_close(seg, AccessShareLock);
		return -1;
	}
	/* nobody else holds it now; nothing can come back to life */
	bytes = DatumGetInt64(DirectFunctionCall1(pg_total_relation_size,
											  ObjectIdGetDatum(sp->segment)));
	relation_close(seg, NoLock);

	ObjectAddressSet(addr, RelationRelationId, sp->segment);
	performDeletion(&addr, DROP_RESTRICT,
					PERFORM_DELETION_INTERNAL | PERFORM_DELETION_QUIETLY);
	spindle_catalog_mark_dropped(RelationGetRelid(facade), sp, bytes);
	return bytes;
}

/*
 * A full spindle without live events or inserts in progress could not be
 * dropped yet: a purge still running or seen by a snapshot, or a lock
 * somebody holds.  The worker clears it before each round and then looks
 * again soon (worker.c, quick rounds).
 */
bool		spindle_drop_held_back = false;

/* A spindle found all dead under AccessShareLock, still open with it. */
typedef struct DropCandidate
{
	int			index;			/* in the directory (spindle_dir_entry) */
	Relation	seg;
	TransactionId horizon;		/* latest_removed of that count */
} DropCandidate;

/*
 * May annex j of dir, found without a copy (no line pointer), go?  Only
 * if no copy can come to it: all its slots are handed out, or a newer
 * annex of its generation takes the next copies first (annex.c reserves
 * in the newest with room).  The newest with room is kept, as a ready
 * spindle is, for the next move.  A slot reserved and not yet placed
 * holds the annex RowExclusiveLock to the end of its transaction, which
 * drop_if_dead's lock and recount see; spindle_slots_inflight says so
 * already, without a lock.  Shared memory only: no page read.
 */
static bool
empty_annex_unused(SpindleDirectory *dir, int j)
{
	SpindleEntry *sp = &dir->annexes[j];
	int64		used;

	if (spindle_slots_inflight(sp->segment, sp->spindle_no))
		return false;
	for (int l = j + 1; l < dir->nannexes; l++)
		if (dir->annexes[l].generation == sp->generation)
			return true;
	return spindle_slots_peek(sp->segment, sp->spindle_no, &used) &&
		used >= spindle_effective_capacity(sp);
}

/*
 * The annexes of dir whose copies are all dead, added to *cands as
 * collect_droppable adds spindles, up to max_drops in all.  An annex
 * fills on its own, so it goes when all its copies are dead whether full
 * or not: the next copy then takes a new annex.  One never given a copy
 * (spindle._create_annex, a failed move) goes once no copy can come to
 * it (empty_annex_unused).  The worker's counts are cached
 * (count_cached): an annex is not read every round.
 */
static void
collect_droppable_annexes(Relation facade, SpindleDirectory *dir,
						  bool use_cache, int max_drops, List **cands,
						  TransactionId *horizon)
{
	for (int j = 0; j < dir->nannexes && list_length(*cands) < max_drops; j++)
	{
		SpindleEntry *sp = &dir->annexes[j];
		Relation	seg = spindle_open_segment(facade, sp, AccessShareLock);
		SpindleCounts c;
		DropCandidate *cand;

		if (seg == NULL)
			continue;
		if (use_cache)
			count_cached(facade, sp, seg, &c);
		else
			spindle_count_segment(facade, sp, seg, &c);
		if ((c.events == 0 && !empty_annex_unused(dir, j)) ||
			c.dead < c.events || spindle_locked_by_others(sp->segment))
		{
			if (c.events > 0 && c.live == 0 && c.inserting == 0)
				spindle_drop_held_back = true;	/* not yet dead, or locked */
			relation_close(seg, AccessShareLock);
			continue;
		}
		cand = palloc(sizeof(DropCandidate));
		cand->index = dir->nspindles + j;
		cand->seg = seg;
		cand->horizon = c.latest_removed;
		if (TransactionIdIsValid(c.latest_removed) &&
			(!TransactionIdIsValid(*horizon) ||
			 TransactionIdFollows(c.latest_removed, *horizon)))
			*horizon = c.latest_removed;
		*cands = lappend(*cands, cand);
	}
}

/*
 * The counting pass of plan_drops: count the full spindles of dir under
 * AccessShareLock (use_cache: see count_cached) and return the ones whose events are all dead and that nobody else holds, up to
 * max_drops, still open; *horizon is the newest of their conflict
 * horizons.  Records fill times and settled spindles on the way, and sets
 * spindle_drop_held_back as spindle_drop_droppable_stats says.
 */
static List *
collect_droppable(Relation facade, SpindleDirectory *dir, SettledPass *pass,
				  bool use_cache, int max_drops, TransactionId *horizon)
{
	List	   *cands = NIL;
	int			i;

	*horizon = InvalidTransactionId;
	for (i = 0; i < dir->nspindles && list_length(cands) < max_drops; i++)
	{
		SpindleEntry *sp = &dir->spindles[i];
		Relation	seg;
		SpindleCounts c;
		DropCandidate *cand;
		int			run;

		if (sp->capacity == 0)
			continue;			/* a single spindle, never dropped */
		if ((run = spindle_settled_run(pass, dir, i)) > 0)
		{
			i += run - 1;		/* settled, and so are the next run - 1 */
			continue;
		}
		seg = spindle_open_segment(facade, sp, AccessShareLock);
		if (seg == NULL)
			continue;
		if (!spindle_known_full(facade, dir, i))
		{
			relation_close(seg, AccessShareLock);
			break;
		}
		if (use_cache)
			count_cached(facade, sp, seg, &c);
		else
			spindle_count_segment(facade, sp, seg, &c);
		if (c.dead < c.events || spindle_locked_by_others(sp->segment))
		{
			/* only a delete can make it droppable now: pass it over */
			if (c.live > 0 && c.busy == 0)
				spindle_settled_add(pass, dir, i);
			else if (c.live == 0 && c.inserting == 0)
				spindle_drop_held_back = true;	/* not yet dead, or locked */
			relation_close(seg, AccessShareLock);
			continue;
		}
		cand = palloc(sizeof(DropCandidate));
		cand->index = i;
		cand->seg = seg;
		cand->horizon = c.latest_removed;
		if (TransactionIdIsValid(c.latest_removed) &&
			(!TransactionIdIsValid(*horizon) ||
			 TransactionIdFollows(c.latest_removed, *horizon)))
			*horizon = c.latest_removed;
		cands = lappend(cands, cand);
	}
	collect_droppable_annexes(facade, dir, use_cache, max_drops, &cands,
							  horizon);
	return cands;
}

/*
 * The spindles of one table a transaction is about to drop: those the
 * first pass found all dead (collect_droppable), still open, and the
 * table's directory, held until they are dropped (execute_drops).
 */
typedef struct DropPlan
{
	Relation	facade;
	SpindleDirectory *dir;
	List	   *cands;			/* of DropCandidate */
} DropPlan;

/*
 * First half of dropping a facade's droppable spindles (up to max_drops):
 * takes the table's maintenance lock (ShareUpdateExclusiveLock) without
 * waiting, retires the index entries of spindles dropped before, and
 * counts the full spindles under AccessShareLock.  Returns NULL if
 * another maintenance run holds the table; else the plan, and *horizon is
 * advanced to the newest conflict horizon of its candidates.  Takes no
 * ACCESS EXCLUSIVE lock.
 *
 * Full spindles this backend found settled (touched.c) since the last
 * delete noted in them are passed over without being opened, so a call
 * costs the spindles that deletes touched, not all of them.
 */
static DropPlan *
plan_drops(Relation facade, bool use_cache, int max_drops,
		   TransactionId *horizon)
{
	DropPlan   *plan;
	SettledPass pass;
	TransactionId h;

	if (!ConditionalLockRelationOid(RelationGetRelid(facade),
									ShareUpdateExclusiveLock))
		return NULL;

	/* first retire the index entries of spindles dropped before */
	spindle_cleanup_dropped(facade, false);

	/* then learn which spindles deletes touched since the last call */
	spindle_touched_sync();

	plan = palloc0(sizeof(DropPlan));
	plan->facade = facade;
	plan->dir = spindle_directory_acquire(facade);
	/* the directory remembers its table's pg_class xmin: see touched.c */
	spindle_settled_begin(&pass, RelationGetRelid(facade),
						  plan->dir->class_xmin);
	plan->cands = collect_droppable(facade, plan->dir, &pass, use_cache,
									max_drops, &h);
	spindle_settled_end(&pass);
	if (TransactionIdIsValid(h) &&
		(!TransactionIdIsValid(*horizon) || TransactionIdFollows(h, *horizon)))
		*horizon = h;
	return plan;
}

/*
 * Make this transaction's WAL resolve the standby conflicts up to horizon
 * (the newest of plans' candidates) before any drop's ACCESS EXCLUSIVE
 * lock: one record, on the page of a candidate with a horizon of its own
 * (cover_drop_conflict), which counted a tuple, so has a page: an annex
 * never given a copy has none.  No candidate has one: nothing to log.
 */
static void
log_planned_conflict(List *plans, TransactionId horizon)
{
	ListCell   *lc;
	ListCell   *lc2;

	foreach(lc, plans)
	{
		DropPlan   *plan = (DropPlan *) lfirst(lc);

		foreach(lc2, plan->cands)
		{
			DropCandidate *cand = (DropCandidate *) lfirst(lc2);

			if (!TransactionIdIsValid(cand->horizon))
				continue;
			(void) cover_drop_conflict(cand->seg, horizon, true);
			return;
		}
	}
}

/*
 * Second half: lock, recount and drop each candidate of plan
 * (drop_if_dead), then release the directory; plan is freed.  Returns how
 * many went and adds the bytes they held to *bytes_freed.  Sets
 * spindle_drop_held_back for each candidate that could not go.
 */
static int
execute_drops(DropPlan *plan, int64 *bytes_freed)
{
	ListCell   *lc;
	int			ndropped = 0;

	foreach(lc, plan->cands)
	{
		DropCandidate *cand = (DropCandidate *) lfirst(lc);
		SpindleEntry *sp = spindle_dir_entry(plan->dir, cand->index);
		int64		bytes = -1;

		/* not covered: this transaction holds an ACCESS EXCLUSIVE lock */
		if (!cover_drop_conflict(cand->seg, cand->horizon, false))
			relation_close(cand->seg, AccessShareLock);
		else
			bytes = drop_if_dead(plan->facade, sp, cand->seg);
		if (bytes < 0)
		{
			/* locked, not all dead, or not covered */
			spindle_drop_held_back = true;
			continue;
		}
		*bytes_freed += bytes;
		ndropped++;
	}
	list_free_deep(plan->cands);
	spindle_directory_release(plan->dir);
	if (ndropped > 0)
	{
		CacheInvalidateRelcacheByRelid(RelationGetRelid(plan->facade));
		CommandCounterIncrement();
	}
	pfree(plan);
	return ndropped;
}

/*
 * Drop every droppable spindle of a facade (up to max_drops); returns how
 * many and adds the bytes they held to *bytes_freed.  Skips the table if
 * another maintenance run holds it, and any spindle somebody has locked.
 * Sets spindle_drop_held_back (never clears it) when a full spindle
 * without live events or inserts in progress could not go yet.
 * Also records the fill time of full spindles.  Called with at least
 * AccessShareLock on the facade; use_cache is for the worker (see
 * count_cached).
 *
 * Two passes: plan_drops counts the spindles under AccessShareLock; then,
 * before any spindle's ACCESS EXCLUSIVE lock is taken, one standby-conflict
 * record covers the newest horizon of the spindles found all dead
 * (cover_drop_conflict); execute_drops locks, recounts and drops each.
 */
int
spindle_drop_droppable_stats(Relation facade, int64 *bytes_freed,
							 bool use_cache, int max_drops)
{
	TransactionId horizon = InvalidTransactionId;
	DropPlan   *plan = plan_drops(facade, use_cache, max_drops, &horizon);

	if (plan == NULL)
		return 0;
	log_planned_conflict(list_make1(plan), horizon);
	return execute_drops(plan, bytes_freed);
}

int
spindle_drop_droppable(Relation facade, int max_drops)
{
	int64		freed = 0;

	return spindle_drop_droppable_stats(facade, &freed, false, max_drops);
}

/*
 * Retire what the drops of this table committed so far, if it is due
 * (spindle_cleanup_dropped), and give back the slot map's empty tail, in
 * the caller's transaction; the worker runs it right after a round's drops
 * have committed, so that a drained backlog's space comes back in the same
 * round rather than the next.  Takes the table's maintenance lock
 * (ShareUpdateExclusiveLock) only if nobody holds it; returns false if it
 * could not.
 */
bool
spindle_retire_dropped(Relation facade)
{
	if (!ConditionalLockRelationOid(RelationGetRelid(facade),
									ShareUpdateExclusiveLock))
		return false;
	spindle_cleanup_dropped(facade, false);
	return true;
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

/* Ranges being retired, sorted by vbase, for the bulk-delete callback. */
typedef struct RetiredRanges
{
	int			n;
	SpindleRange *ranges;
} RetiredRanges;

static int
cmp_range_vbase(const void *a, const void *b)
{
	int64		va = ((const SpindleRange *) a)->vbase;
	int64		vb = ((const SpindleRange *) b)->vbase;

	return (va > vb) - (va < vb);
}

/* Bulk-delete callback: is this TID in a range being retired? */
static bool
tid_in_retired_range(ItemPointer itemptr, void *state)
{
	RetiredRanges *r = (RetiredRanges *) state;
	int64		v = spindle_tid_to_vslot(itemptr);
	int			lo = 0,
				hi = r->n - 1;

	if (v < 0)
		return false;
	while (lo <= hi)
	{
		int			mid = (lo + hi) / 2;
		SpindleRange *rg = &r->ranges[mid];

		if (v < rg->vbase)
			hi = mid - 1;
		else if (v >= rg->vbase + rg->vcount)
			lo = mid + 1;
		else
			return true;
	}
	return false;
}

/* Remove from every index of the facade the entries in the given ranges. */
static void
bulk_delete_ranges(Relation facade, RetiredRanges *r)
{
	Relation   *indexes;
	int			nindexes;
	BufferAccessStrategy strategy = GetAccessStrategy(BAS_VACUUM);
	int			j;

	qsort(r->ranges, r->n, sizeof(SpindleRange), cmp_range_vbase);
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
		stats = index_bulk_delete(&ivinfo, NULL, tid_in_retired_range, r);
		stats = index_vacuum_cleanup(&ivinfo, stats);
		if (stats)
			pfree(stats);
	}
	vac_close_indexes(nindexes, indexes, NoLock);
	FreeAccessStrategy(strategy);
}

/*
 * Are the dropped spindles whose index entries are still to be removed
 * worth a pass over every index now?  A pass costs the size of the indexes
 * whatever it removes, as heap's index vacuum does, so it waits (as
 * autovacuum waits for a share of dead tuples) until the slots to retire
 * are a tenth of those of the table's live spindles: each dropped slot
 * then costs a bounded share of a pass, however many spindles the table
 * has.  It does not wait once half of the table's virtual slots are taken
 * (the ranges are needed back), nor when nothing is live.
 */
static bool
retire_due(Relation facade)
{
	int64		pending = spindle_catalog_retire_slots(RelationGetRelid(facade));
	int64		live = 0;
	SpindleDirectory *dir;
	int			i;

	if (pending <= 0)
		return false;
	dir = spindle_directory_acquire(facade);
	for (i = 0; i < dir->nspindles; i++)
		live += dir->spindles[i].vcount;
	spindle_directory_release(dir);
	return pending * 10 >= live || (pending + live) * 2 >= SPINDLE_VSLOTS;
}

/* A forget pass's look at what is still there (copy_exists). */
typedef struct CopyLookup
{
	Relation	facade;
	SpindleDirectory *dir;
	SpindleRange *mine;			/* dropped by this transaction */
	int			nmine;
} CopyLookup;

/*
 * Is spindle or annex spindle_no of the facade still there?  One this
 * transaction dropped counts as there: the drop may still roll back (or a
 * crash undo it), and the pass's changes to the trees would not.  One made
 * after the directory was read (a relocator's new annex) is looked for in
 * a directory read again: numbers are handed out in order, so a number
 * above all those read may be new, one below them that is not listed is
 * gone.
 */
static bool
copy_exists(int64 spindle_no, void *arg)
{
	CopyLookup *l = (CopyLookup *) arg;
	SpindleDirectory *dir;

	if (spindle_find_copy(l->dir, spindle_no) != NULL)
		return true;
	/* a drop of this transaction may roll back: still there, for a pass */
	for (int i = 0; i < l->nmine; i++)
		if (l->mine[i].spindle_no == spindle_no)
			return true;
	if (spindle_no <= l->dir->max_spindle_no)
		return false;
	dir = spindle_directory_acquire_upto(l->facade, spindle_no);
	spindle_directory_release(l->dir);
	l->dir = dir;
	return spindle_find_copy(dir, spindle_no) != NULL;
}

/*
 * Forget the relocation entries of the copies the drops took, on a queue
 * table that has them (relocation_forget.c).  Never waits for a
 * relocator: one that holds the trees leaves it to the next pass.
 */
static void
forget_moves(Relation facade)
{
	Oid			croid = spindle_consumer_rel_oid(RelationGetRelid(facade));
	Relation	crel;
	CopyLookup	l;
	SpindleForgetStats st;

	if (!OidIsValid(croid) ||
		(crel = try_relation_open(croid, RowExclusiveLock)) == NULL)
		return;
	l.facade = facade;
	l.nmine = spindle_catalog_dropped_here(RelationGetRelid(facade), &l.mine);
	l.dir = spindle_directory_acquire(facade);
	(void) spindle_reloc_forget(crel, copy_exists, &l, &st);
	spindle_directory_release(l.dir);
	relation_close(crel, RowExclusiveLock);
	if (st.entries_gone + st.heads_gone + st.heads_moved > 0)
		elog(DEBUG1, "spindle: \"%s\": forgot %d relocation entries and %d moved ids, %d ids now at a later copy%s",
			 RelationGetRelationName(facade), st.entries_gone,
			 st.heads_gone, st.heads_moved,
			 st.rebuilt ? ", trees rebuilt" : st.dropped ? ", trees freed" : "");
}

/*
 * Give back the TID ranges nobody can use any more: those of spindles whose
 * drop has committed, and those of spindle creations that rolled back
 * (pending ranges whose creator ended without a catalog row).  Their index
 * entries are removed first, in one pass over each index however many
 * ranges are retired, then their slot map entries are zeroed, then the
 * ranges are forgotten, so a TID never comes to mean another event while
 * an index holds it.  Pending ranges of committed creations are forgotten
 * too (the catalog has them).  Dropped spindles wait for retire_due()
 * unless force (VACUUM) or a rolled-back creation needs a pass anyway.
 * Then the relocation entries of copies the drops took are forgotten
 * (forget_moves).  Last, the empty slot map pages at the end of the facade's main fork are
 * given back (spindle_slotmap_truncate: a conditional ACCESS EXCLUSIVE
 * lock, released at once).
 * The caller holds ShareUpdateExclusiveLock on the facade (which also
 * keeps VACUUM of the facade from bulk-deleting the same indexes at once).
 */
void
spindle_cleanup_dropped(Relation facade, bool force)
{
	Oid			relid = RelationGetRelid(facade);
	SpindleRange *dropped = NULL;
	int			ndropped = 0;
	SpindlePending pending[SPINDLE_MAX_PENDING];
	int			npending = spindle_pending_read(facade, pending);
	int64	   *finished = palloc(sizeof(int64) * Max(npending, 1));
	int			nfinished = 0;
	SpindleRange *rolled_back = palloc(sizeof(SpindleRange) * Max(npending, 1));
	int			nrolled_back = 0;
	RetiredRanges r;
	int			i;

	for (i = 0; i < npending; i++)
	{
		/* in progress first: then the catalog read sees a commit */
		if (spindle_pending_in_progress(&pending[i]))
			continue;
		finished[nfinished++] = pending[i].spindle_no;
		if (!spindle_catalog_has_spindle(relid, pending[i].spindle_no,
										 pending[i].nspindles))
		{
			/* rolled back: its inserts may have left index entries */
			rolled_back[nrolled_back].spindle_no = pending[i].spindle_no;
			rolled_back[nrolled_back].vbase = pending[i].vbase;
			rolled_back[nrolled_back].vcount = pending[i].vcount;
			nrolled_back++;
		}
	}
	if (force || nrolled_back > 0 || retire_due(facade))
		ndropped = spindle_catalog_dropped(relid, &dropped);

	r.ranges = palloc(sizeof(SpindleRange) * (ndropped + nrolled_back + 1));
	r.n = 0;
	for (i = 0; i < ndropped; i++)
		r.ranges[r.n++] = dropped[i];
	for (i = 0; i < nrolled_back; i++)
		r.ranges[r.n++] = rolled_back[i];

	if (r.n > 0)
	{
		bulk_delete_ranges(facade, &r);
		for (i = 0; i < r.n; i++)
			spindle_slotmap_clear(facade, r.ranges[i].vbase, r.ranges[i].vcount);
	}
	spindle_catalog_forget_dropped(relid, dropped, ndropped);
	spindle_pending_remove(facade, finished, nfinished);
	if (ndropped > 0 || force)
		forget_moves(facade);
	/*
	 * The map pages now empty go back: a look over the whole map only when
	 * ranges were retired now (or VACUUM asks), else at an idle tail only
	 */
	(void) spindle_slotmap_truncate(facade, force || r.n > 0);
	pfree(r.ranges);
	pfree(finished);
	pfree(rolled_back);
}

/*
 * Run each spindle's own (slot-preserving) vacuum, annexes included; see
 * segment_am.c.  The caller holds ShareUpdateExclusiveLock on the facade.
 */
void
spindle_vacuum_spindles(Relation facade, struct VacuumParams *params,
						BufferAccessStrategy bstrategy)
{
	SpindleDirectory *dir = spindle_directory_acquire(facade);
	int			i;

	for (i = 0; i < spindle_dir_nall(dir); i++)
	{
		Relation	seg = spindle_open_segment(facade, spindle_dir_entry(dir, i),
											   ShareUpdateExclusiveLock);

		if (seg == NULL)
			continue;
		spindle_segment_vacuum(seg, params, bstrategy);
		/* one spindle's lock at a time, however many the table has */
		relation_close(seg, ShareUpdateExclusiveLock);
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

	PreventCommandIfReadOnly("spindle.drop_spindles()");

	if (!PG_ARGISNULL(0))
	{
		Oid			relid = PG_GETARG_OID(0);
		Relation	rel;

		/* rights before the lock; an unknown OID is an error here already */
		if (!pg_class_ownercheck(relid, GetUserId()))
			aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_TABLE,
						   get_rel_name(relid));
		/* it never waits: a table someone holds exclusively is skipped */
		if (ConditionalLockRelationOid(relid, AccessShareLock))
		{
			rel = spindle_open_facade(relid, NoLock);
			total = spindle_drop_droppable(rel, spindle_drops_per_transaction());
			relation_close(rel, NoLock);
		}
	}
	else
	{
		List	   *tables = spindle_catalog_tables();
		List	   *plans = NIL;
		List	   *rels = NIL;
		ListCell   *lc;
		int			planned = 0;
		TransactionId horizon = InvalidTransactionId;
		int64		freed = 0;

		/*
		 * Every table is counted before any spindle is locked, so that one
		 * conflict record, written before the first ACCESS EXCLUSIVE lock,
		 * covers them all (cover_drop_conflict).
		 */
		foreach(lc, tables)
		{
			Oid			relid = lfirst_oid(lc);
			Relation	rel;
			DropPlan   *plan;

			if (!pg_class_ownercheck(relid, GetUserId()) ||
				!ConditionalLockRelationOid(relid, AccessShareLock))
				continue;
			rel = try_relation_open(relid, NoLock);
			if (rel == NULL)
			{
				UnlockRelationOid(relid, AccessShareLock);
				continue;
			}
			rels = lappend(rels, rel);
			/* the bound is per transaction, across all tables */
			if (!spindle_is_facade(rel) ||
				planned >= spindle_drops_per_transaction())
				continue;
			plan = plan_drops(rel, false,
							  spindle_drops_per_transaction() - planned,
							  &horizon);
			if (plan == NULL)
				continue;
			planned += list_length(plan->cands);
			plans = lappend(plans, plan);
		}
		log_planned_conflict(plans, horizon);
		foreach(lc, plans)
			total += execute_drops((DropPlan *) lfirst(lc), &freed);
		foreach(lc, rels)
			relation_close((Relation) lfirst(lc), NoLock);

		/*
		 * A superuser's call also drops (within the same bound, not counted:
		 * they belong to no table any more) what DROP TABLE and TRUNCATE
		 * detached, which the worker drops otherwise.
		 */
		if (superuser())
			(void) spindle_drop_detached(spindle_drops_per_transaction() - total,
										 false, &freed);
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
	int64		first_no;		/* > 0: one spindle numbered from there */
	int			annex_generation;	/* > 0: one annex of that generation */
	int			test_vslot_base;	/* the requester's, for tests */
} CreatorArgs;

static bool request_creation(Relation facade, int count, int64 first_no,
							 int annex_generation);

/*
 * Ask a helper process to create `count` ready spindles for the facade in
 * its own transaction, and wait until it has finished.  Returns false if
 * no helper could be started (max_worker_processes reached).
 */
bool
spindle_request_spindles(Relation facade, int count)
{
	return request_creation(facade, count, 0, 0);
}

/*
 * The same for one spindle whose events are numbered from first_no
 * (spindle_create_spindle_at), for an insert that keeps a supplied number:
 * committed on its own, the spindle stays, and so does what the insert
 * writes into its pages even if the insert rolls back, which is what
 * tells a slot counter rebuilt after a restart that the spindles before
 * it, whose last slots the insert skipped, are full (slots.c).
 */
bool
spindle_request_spindle_at(Relation facade, int64 first_no)
{
	return request_creation(facade, 1, first_no, 0);
}

/*
 * The same for one annex of the given generation (spindle_create_annex):
 * made ahead like a ready spindle, committed on its own, so that whoever
 * places copies in it never holds the creation lock.
 */
bool
spindle_request_annex(Relation facade, int generation)
{
	return request_creation(facade, 1, 0, generation);
}

static bool
request_creation(Relation facade, int count, int64 first_no,
				 int annex_generation)
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
	args.first_no = first_no;
	args.annex_generation = annex_generation;
	args.test_vslot_base = spindle_test_vslot_base;
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
	/* the spindles are the requester's: placed as its session says */
	spindle_test_vslot_base = args.test_vslot_base;
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "creating spindles");

	/*
	 * Never queue behind a lock: a producer waiting for us may hold the
	 * lock that the waiter ahead of us waits for.  If the table cannot be
	 * had at once, the producer creates the spindles itself.
	 */
	if (ConditionalLockRelationOid(args.facade, AccessShareLock))
	{
		rel = try_relation_open(args.facade, NoLock);
		if (rel != NULL)
		{
			if (spindle_is_facade(rel) && args.annex_generation > 0)
				(void) spindle_create_annex(rel, args.annex_generation);
			else if (spindle_is_facade(rel) && args.first_no > 0)
				spindle_create_spindle_at(rel, args.first_no);
			else if (spindle_is_facade(rel))
				(void) spindle_create_spindles(rel, args.count, true);
			relation_close(rel, NoLock);
		}
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	proc_exit(0);
}

/*
 * In a PG_CATCH block of a maintenance step that runs in a transaction of
 * its own (the worker's): the error being handled, copied into cxt (the
 * caller's context before PG_TRY), the error state flushed and the
 * transaction aborted.  The caller logs the copy and frees it.
 */
ErrorData *
spindle_catch_and_abort(MemoryContext cxt)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(cxt);
	edata = CopyErrorData();
	FlushErrorState();
	AbortCurrentTransaction();
	return edata;
}

