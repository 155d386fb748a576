/*-------------------------------------------------------------------------
 *
 * counters.c
 *	  Maintained counters of each spindle's purged events, so that the
 *	  monitoring views (views.c) cost O(spindles) and read no spindle page.
 *
 * What is counted.  A spindle's events appended are the slots it handed
 * out: slots.c counts them for the spindles that have a slot counter, and
 * a known-full spindle handed out its whole capacity.  Its purged events
 * are the slots whose event was deleted by a committed transaction (DELETE,
 * UPDATE's old version, a TTL purge, a range purge by dequeue or ack) or
 * consumed by a committed entry of the queue's consume log or moved to an
 * annex by a committed relocation (compaction: the relocator counts its
 * moves as purges of the source, relocation.c's entries for a build), or
 * whose insert aborted (ROLLBACK, ROLLBACK TO SAVEPOINT, an error, a
 * speculative insert that lost, a reservation never placed) or that an
 * insert keeping supplied numbers skipped (slots.c): exactly what
 * maintenance.c's spindle_count_segment() calls purged, plus the slots
 * whose event never reached the page.  So a full spindle is fully purged
 * when purged = appended.
 *
 * How.  Each backend keeps pending deltas per (spindle, subtransaction):
 * events it inserted and events it purged, with no shared-memory access on
 * the hot path (insert, delete, range purge).  At commit the purges are
 * added to the spindle's shared counter (one atomic add per spindle and
 * transaction) and the newest xid of the transaction is kept as the
 * spindle's latest purger (for drop_blocked_by); at abort the inserts are
 * added instead, the purges dropped; at ROLLBACK TO SAVEPOINT the same for
 * the subtransaction's deltas, which at RELEASE go to the parent.  The
 * deltas are applied in the XactCallback, after the commit (or abort) is
 * recorded and before the transaction's locks are released.  Copies the
 * relocator places in an annex (spindle_counters_copied) are kept apart
 * from inserts: purged at abort like them, but a committed copy is no
 * enqueue, so it does not count in the table's insert total
 * (spindle.queues.enqueued_total).
 *
 * PREPARE TRANSACTION: the deltas cannot follow the transaction to COMMIT
 * PREPARED (an extension cannot add to the two-phase state file), so the
 * spindles it wrote are marked *stale*.  A stale counter stays exact while
 * the transaction is prepared (its work is not committed), and is rebuilt
 * from disk by the first view that finds the prepared transaction gone.
 * A prepared transaction that let the lock of a spindle go (it wrote in
 * more spindles than a writer keeps locked) does not stop a build: a count
 * that saw work of a prepared transaction still running stays stale, and
 * is counted again by each view until that transaction has ended (COMMIT
 * or ROLLBACK PREPARED runs in a backend that has no deltas of it).
 *
 * Entries are made (1) empty, when a spindle's slot counter is first built
 * and finds no slot used on disk (slots.c: the spindle never held an
 * event), before any insert can take a slot of it; (2) from disk, lazily,
 * by a view that finds none (after a restart, after an eviction, after a
 * prepared transaction): built under a ShareLock on the spindle taken
 * without waiting.  A writer keeps its spindle lock to its end for the
 * first spindles it writes in (facade_am.c, close_written_spindle), and
 * applies its deltas before that lock goes, so while such a writer has
 * work in the spindle no build runs.  A writer that let the lock go (a
 * statement over more spindles than that, a TTL purge) cannot tell
 * whether a build running meanwhile saw its end: at its end it marks the
 * entry *inexact* instead of adding to it.  A build first marks the entry
 * as building, counts, and keeps its count only if nobody marked it
 * inexact meanwhile; so a count kept is exact, and an inexact entry is
 * counted again by the next view.  If the lock is not free, or the count
 * was thrown away, the view shows the spindle's counts as NULL this time.
 * In recovery (hot standby) the lock
 * is AccessShareLock and the count is what replay had reached when it
 * was made (the replay position is kept with it); views count such a
 * spindle again whenever more WAL was replayed since, unless it is full
 * and fully purged (it cannot change any more), and every entry made in
 * recovery is counted again after promotion.
 *
 * For a figure that cannot wait for a build (the limit of a queue),
 * spindle_counters_count_now counts a spindle's pages under AccessShareLock
 * without making or changing its entry.
 *
 * Shared memory: a fixed-size hash of spindle.max_counted_spindles entries
 * keyed by (database, spindle relation).  When it is full, the least
 * recently used eighth is evicted (rebuilt from disk when needed again).
 *
 * Locks: CountersLock (shared for lookups and counter updates, exclusive
 * to enter or remove entries, or to mark them); never held together with
 * slots.c's lock.  Building takes AccessShareLock on the table and
 * ShareLock on the spindle, both conditionally, and holds no LWLock during
 * the I/O.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/subtrans.h"
#include "access/transam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlogrecovery.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/bufmgr.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "storage/lwlock.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "storage/spindle_storage.h"

int			spindle_max_counted_spindles = 16384;

typedef struct CounterKey
{
	Oid			dbid;
	Oid			segment;
} CounterKey;

typedef struct CounterEntry
{
	CounterKey	key;
	Oid			facade;
	int64		spindle_no;
	int64		appended;		/* from disk, for a spindle with no slot
								 * counter that is not known full; -1 */
	bool		built_full;		/* the build found it full */
	bool		stale;			/* a prepared transaction wrote here */
	bool		inexact;		/* a transaction's work was not applied */
	bool		building;		/* counted from disk right now ... */
	uint32		build_gen;		/* ... by the build of this number */
	bool		in_recovery;	/* built during recovery */
	TimestampTz built_at;		/* 0: made empty */
	XLogRecPtr	built_lsn;		/* in recovery: WAL replayed when built */
	pg_atomic_uint64 purged;
	pg_atomic_uint32 latest_purger; /* TransactionId */
	pg_atomic_uint64 last_used; /* tick, for eviction */
} CounterEntry;

typedef struct CountersShared
{
	LWLock	   *lock;
	pg_atomic_uint64 tick;
	uint32		build_gen;		/* numbers builds (under lock) */
} CountersShared;

static CountersShared *cshared = NULL;
static HTAB *chash = NULL;

/* A backend's pending deltas of one spindle and subtransaction. */
typedef struct Pending
{
	Oid			segment;
	Oid			facade;			/* InvalidOid if not known */
	SubTransactionId subid;
	int64		inserted;		/* producers' events (the table's total) */
	int64		copied;			/* the relocator's copies (not enqueues) */
	int64		purged;
	bool		unlocked;		/* apply_pending found the spindle unlocked */
} Pending;

static Pending *pending = NULL;
static int	npending = 0;
static int	maxpending = 0;
static bool callbacks_registered = false;

Size
spindle_counters_shmem_size(void)
{
	return add_size(MAXALIGN(sizeof(CountersShared)),
					hash_estimate_size(spindle_max_counted_spindles,
									   sizeof(CounterEntry)));
}

void
spindle_counters_shmem_request(void)
{
	RequestAddinShmemSpace(spindle_counters_shmem_size());
	RequestNamedLWLockTranche("spindle_counters", 1);
}

/* Called from the shmem_startup_hook (also after a crash restart). */
void
spindle_counters_shmem_startup(void)
{
	bool		found;
	HASHCTL		info;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	cshared = ShmemInitStruct("spindle counters", sizeof(CountersShared),
							  &found);
	if (!found)
	{
		cshared->lock = &(GetNamedLWLockTranche("spindle_counters"))[0].lock;
		pg_atomic_init_u64(&cshared->tick, 0);
	}
	info.keysize = sizeof(CounterKey);
	info.entrysize = sizeof(CounterEntry);
	chash = ShmemInitHash("spindle purge counters",
						  spindle_max_counted_spindles,
						  spindle_max_counted_spindles,
						  &info, HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
	LWLockRelease(AddinShmemInitLock);
}

/* The entry of a spindle; the caller holds the lock (either mode). */
static CounterEntry *
lookup(Oid segment)
{
	CounterKey	key;

	key.dbid = MyDatabaseId;
	key.segment = segment;
	return hash_search(chash, &key, HASH_FIND, NULL);
}

static void
touch(CounterEntry *e)
{
	pg_atomic_write_u64(&e->last_used,
						pg_atomic_add_fetch_u64(&cshared->tick, 1));
}

/*
 * Remove the least recently used eighth of the entries (at least one).
 * The caller holds the lock exclusively.
 */
static void
evict_some(void)
{
	HASH_SEQ_STATUS status;
	CounterEntry *e;
	uint64		now = pg_atomic_read_u64(&cshared->tick);
	uint64		oldest = PG_UINT64_MAX;
	uint64		cutoff;
	int			evicted = 0;

	hash_seq_init(&status, chash);
	while ((e = hash_seq_search(&status)) != NULL)
		oldest = Min(oldest, pg_atomic_read_u64(&e->last_used));
	cutoff = oldest + (now - oldest) / 8;
	hash_seq_init(&status, chash);
	while ((e = hash_seq_search(&status)) != NULL)
		if (pg_atomic_read_u64(&e->last_used) <= cutoff)
		{
			hash_search(chash, &e->key, HASH_REMOVE, NULL);
			evicted++;
		}
	elog(DEBUG1, "spindle: evicted %d purge counters", evicted);
}

/*
 * Enter (or reset) the entry of spindle sp of facade.  The caller holds
 * the lock exclusively.  Returns NULL only if there is no room at all.
 */
static CounterEntry *
enter(Oid facade, const SpindleEntry *sp, bool *existed)
{
	CounterKey	key;
	CounterEntry *e;
	bool		found;

	key.dbid = MyDatabaseId;
	key.segment = sp->segment;
	e = hash_search(chash, &key, HASH_ENTER_NULL, &found);
	if (e == NULL)
	{
		evict_some();
		e = hash_search(chash, &key, HASH_ENTER_NULL, &found);
		if (e == NULL)
			return NULL;
	}
	if (found && (e->facade != facade || e->spindle_no != sp->spindle_no))
		found = false;			/* a relation OID reused */
	*existed = found;
	if (!found)
	{
		e->facade = facade;
		e->spindle_no = sp->spindle_no;
		e->appended = -1;
		e->built_full = false;
		e->stale = false;
		e->inexact = false;
		e->building = false;
		e->build_gen = 0;
		e->in_recovery = false;
		e->built_at = 0;
		e->built_lsn = InvalidXLogRecPtr;
		pg_atomic_init_u64(&e->purged, 0);
		pg_atomic_init_u32(&e->latest_purger, InvalidTransactionId);
		pg_atomic_init_u64(&e->last_used, 0);
	}
	touch(e);
	return e;
}

/*
 * Spindle sp of facade never held an event (its slot counter is being
 * built from a disk that has none): its counters start at zero.  Called by
 * slots.c before the slot counter exists, so before any insert into it.
 */
void
spindle_counters_created(Oid facade, const SpindleEntry *sp)
{
	bool		existed;
	CounterEntry *e;

	if (chash == NULL || RecoveryInProgress())
		return;
	LWLockAcquire(cshared->lock, LW_EXCLUSIVE);
	e = enter(facade, sp, &existed);
	if (e != NULL && existed && e->in_recovery)
	{
		/* built before a promotion: start again from what we know */
		e->appended = -1;
		e->built_full = false;
		e->stale = false;
		e->in_recovery = false;
		e->built_at = 0;
		pg_atomic_write_u64(&e->purged, 0);
		pg_atomic_write_u32(&e->latest_purger, InvalidTransactionId);
	}
	LWLockRelease(cshared->lock);
}

/* ---------- pending deltas of this backend ---------- */

static void counters_xact_callback(XactEvent event, void *arg);
static void counters_subxact_callback(SubXactEvent event,
									  SubTransactionId mySubid,
									  SubTransactionId parentSubid, void *arg);

static Pending *
pending_for(Oid segment)
{
	SubTransactionId subid = GetCurrentSubTransactionId();
	int			i;

	/* the last few records of this subtransaction */
	for (i = npending - 1; i >= 0 && i >= npending - 8; i--)
	{
		if (pending[i].subid != subid)
			break;
		if (pending[i].segment == segment)
			return &pending[i];
	}
	if (!callbacks_registered)
	{
		RegisterXactCallback(counters_xact_callback, NULL);
		RegisterSubXactCallback(counters_subxact_callback, NULL);
		callbacks_registered = true;
	}
	if (npending == maxpending)
	{
		int			newmax = Max(16, maxpending * 2);

		if (pending == NULL)
			pending = MemoryContextAlloc(TopMemoryContext,
										 sizeof(Pending) * newmax);
		else
			pending = repalloc(pending, sizeof(Pending) * newmax);
		maxpending = newmax;
	}
	pending[npending].segment = segment;
	pending[npending].facade = InvalidOid;
	pending[npending].subid = subid;
	pending[npending].inserted = 0;
	pending[npending].copied = 0;
	pending[npending].purged = 0;
	pending[npending].unlocked = false;
	return &pending[npending++];
}

/* The current (sub)transaction appended n events to this spindle. */
void
spindle_counters_inserted(Oid facade, Oid segment, int n)
{
	Pending    *p = pending_for(segment);

	p->facade = facade;
	p->inserted += n;
}

/*
 * The current (sub)transaction placed n copies of events moved by the
 * relocator into this annex (annex.c): slots handed out, purged if it
 * aborts, like inserts; but no event was enqueued, so at commit they do
 * not count in the table's insert total (spindle.queues.enqueued_total).
 */
void
spindle_counters_copied(Oid segment, int n)
{
	pending_for(segment)->copied += n;
}

/* The current (sub)transaction purged n events of this spindle. */
void
spindle_counters_deleted(Oid segment, int n)
{
	pending_for(segment)->purged += n;
}

/*
 * A speculative insert of the current (sub)transaction was killed (ON
 * CONFLICT found a conflict): its event is purged now, whatever becomes of
 * the transaction.
 */
void
spindle_counters_insert_killed(Oid segment)
{
	Pending    *p = pending_for(segment);
	CounterEntry *e;

	if (p->inserted > 0)
		p->inserted--;
	if (chash == NULL)
		return;
	LWLockAcquire(cshared->lock, LW_SHARED);
	e = lookup(segment);
	if (e != NULL)
		pg_atomic_fetch_add_u64(&e->purged, 1);
	LWLockRelease(cshared->lock);
}

/*
 * n slots of this spindle were skipped (slots.c: an insert that keeps
 * supplied event numbers passed over them): handed out, and never to hold
 * an event, so purged now, whatever becomes of the transaction.  Only an
 * entry that exists is changed: a build counts them from disk (slots used,
 * events present).  The caller holds the spindle locked, as for an insert,
 * so no build runs meanwhile.
 */
void
spindle_counters_skipped(Oid segment, int64 n)
{
	CounterEntry *e;

	if (chash == NULL || n <= 0)
		return;
	LWLockAcquire(cshared->lock, LW_SHARED);
	e = lookup(segment);
	if (e != NULL)
		pg_atomic_fetch_add_u64(&e->purged, (uint64) n);
	LWLockRelease(cshared->lock);
}

/* The newest xid of the committing transaction (itself or a child). */
static TransactionId
newest_own_xid(void)
{
	TransactionId xid = GetTopTransactionIdIfAny();
	TransactionId *children;
	int			n = xactGetCommittedChildren(&children);
	int			i;

	for (i = 0; i < n; i++)
		if (!TransactionIdIsValid(xid) ||
			TransactionIdFollows(children[i], xid))
			xid = children[i];
	return xid;
}

/*
 * Add n committed inserts to the total of table facade (an entry keyed by
 * the table's OID, which no spindle shares, with spindle_no -1).  Never
 * errors; without room the inserts go uncounted.
 */
static void
add_table_inserts(Oid facade, int64 n)
{
	CounterEntry *e;
	SpindleEntry sp;
	bool		existed;

	LWLockAcquire(cshared->lock, LW_SHARED);
	e = lookup(facade);
	if (e != NULL && e->facade == facade && e->spindle_no == -1)
	{
		pg_atomic_fetch_add_u64(&e->purged, (uint64) n);
		LWLockRelease(cshared->lock);
		return;
	}
	LWLockRelease(cshared->lock);
	memset(&sp, 0, sizeof(sp));
	sp.segment = facade;
	sp.spindle_no = -1;
	LWLockAcquire(cshared->lock, LW_EXCLUSIVE);
	e = enter(facade, &sp, &existed);
	if (e != NULL)
		pg_atomic_fetch_add_u64(&e->purged, (uint64) n);
	LWLockRelease(cshared->lock);
}

/*
 * Committed inserts into table facade since the server started (or since
 * its total was evicted).
 */
int64
spindle_counters_table_inserts(Oid facade)
{
	CounterEntry *e;
	int64		n = 0;

	if (chash == NULL)
		return 0;
	LWLockAcquire(cshared->lock, LW_SHARED);
	e = lookup(facade);
	if (e != NULL && e->facade == facade && e->spindle_no == -1)
	{
		touch(e);
		n = (int64) pg_atomic_read_u64(&e->purged);
	}
	LWLockRelease(cshared->lock);
	return n;
}

/*
 * Does this backend hold spindle `segment` in a mode that a build's
 * ShareLock waits for?  Writers keep such a lock to their end for the
 * first spindles they write in (facade_am.c, close_written_spindle), and
 * the callbacks here run before a transaction's locks are released.
 */
static bool
holds_write_lock(Oid segment)
{
	LOCKTAG		tag;

	SET_LOCKTAG_RELATION(tag, MyDatabaseId, segment);
	return LockHeldByMe(&tag, RowExclusiveLock) ||
		LockHeldByMe(&tag, ShareUpdateExclusiveLock) ||
		LockHeldByMe(&tag, ShareRowExclusiveLock) ||
		LockHeldByMe(&tag, ExclusiveLock) ||
		LockHeldByMe(&tag, AccessExclusiveLock);
}

/*
 * Apply records [from, npending): purges if commit, inserts otherwise
 * (their events are aborted).  A spindle this backend no longer holds
 * locked may be being counted from disk by a view right now, which may or
 * may not see this transaction's end: its entry is marked inexact instead
 * (a build running meanwhile discards its count, and views count it again
 * later).  Never errors.
 */
static void
apply_pending(int from, bool commit)
{
	TransactionId xid = InvalidTransactionId;
	bool		any = false;
	bool		unlocked = false;
	int			i;

	if (chash == NULL)
		return;
	for (i = from; i < npending && !any; i++)
		any = (commit ? pending[i].purged :
			   pending[i].inserted + pending[i].copied) > 0;
	if (any && commit)
		xid = newest_own_xid();
	/* a producer's commit: no purge to add, only its table's total */
	if (any)
		LWLockAcquire(cshared->lock, LW_SHARED);
	for (i = from; any && i < npending; i++)
	{
		Pending    *p = &pending[i];
		int64		n = commit ? p->purged : p->inserted + p->copied;
		CounterEntry *e;

		if (n <= 0)
			continue;
		e = lookup(p->segment);
		/* no entry: a build from disk will see this transaction's end */
		if (e == NULL)
			continue;
		if (!holds_write_lock(p->segment))
		{
			p->unlocked = true;
			unlocked = true;
			continue;
		}
		pg_atomic_fetch_add_u64(&e->purged, (uint64) n);
		if (commit && TransactionIdIsValid(xid))
		{
			uint32		old = pg_atomic_read_u32(&e->latest_purger);

			while (!TransactionIdIsValid(old) ||
				   TransactionIdFollows(xid, old))
				if (pg_atomic_compare_exchange_u32(&e->latest_purger, &old,
												   xid))
					break;
		}
	}
	if (any)
		LWLockRelease(cshared->lock);
	if (unlocked)
	{
		LWLockAcquire(cshared->lock, LW_EXCLUSIVE);
		for (i = from; i < npending; i++)
		{
			CounterEntry *e;

			if (!pending[i].unlocked)
				continue;
			e = lookup(pending[i].segment);
			if (e != NULL)
				e->inexact = true;
		}
		LWLockRelease(cshared->lock);
	}

	/* committed inserts: the table's total since server start */
	if (commit)
		for (i = from; i < npending; i++)
			if (pending[i].inserted > 0 && OidIsValid(pending[i].facade))
				add_table_inserts(pending[i].facade, pending[i].inserted);
}

/* A prepared transaction wrote in these spindles: their counters go stale. */
static void
mark_stale(void)
{
	int			i;

	if (chash == NULL)
		return;
	LWLockAcquire(cshared->lock, LW_EXCLUSIVE);
	for (i = 0; i < npending; i++)
	{
		CounterEntry *e;

		if (pending[i].inserted <= 0 && pending[i].copied <= 0 &&
			pending[i].purged <= 0)
			continue;
		e = lookup(pending[i].segment);
		if (e != NULL)
			e->stale = true;
	}
	LWLockRelease(cshared->lock);
}

static void
counters_xact_callback(XactEvent event, void *arg)
{
	if (npending == 0)
		return;
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			apply_pending(0, true);
			npending = 0;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			apply_pending(0, false);
			npending = 0;
			break;
		case XACT_EVENT_PREPARE:
			mark_stale();
			npending = 0;
			break;
		default:
			break;
	}
}

static void
counters_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						  SubTransactionId parentSubid, void *arg)
{
	int			from = npending;

	/* records of a subtransaction (and its ended children) are last */
	while (from > 0 && pending[from - 1].subid == mySubid)
		from--;
	if (from == npending)
		return;
	if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		int			i;

		for (i = from; i < npending; i++)
			pending[i].subid = parentSubid;
	}
	else if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		apply_pending(from, false);
		npending = from;
	}
}

/* ---------- reading and building ---------- */

/*
 * What shared memory knows of spindle sp of facade: false if it has no
 * (usable) entry.  info->appended is -1 if neither the slot counters nor
 * the entry know it.
 */
bool
spindle_counters_get(Oid facade, const SpindleEntry *sp,
					 SpindleCountersInfo *info)
{
	CounterEntry *e;
	bool		found;
	int64		used;
	bool		full;
	TimestampTz filled_at;

	memset(info, 0, sizeof(*info));
	info->appended = -1;
	if (chash == NULL)
		return false;
	if (spindle_slots_view(facade, sp, &used, &full, &filled_at))
	{
		info->appended = used;
		info->full = full;
		info->filled_at = filled_at;
	}
	LWLockAcquire(cshared->lock, LW_SHARED);
	e = lookup(sp->segment);
	found = e != NULL && e->facade == facade &&
		e->spindle_no == sp->spindle_no && !e->building;
	if (found)
	{
		touch(e);
		info->purged = (int64) pg_atomic_read_u64(&e->purged);
		info->latest_purger = pg_atomic_read_u32(&e->latest_purger);
		info->stale = e->stale;
		info->inexact = e->inexact;
		info->in_recovery = e->in_recovery;
		info->built_at = e->built_at;
		info->built_lsn = e->built_lsn;
		if (info->appended < 0 && e->appended >= 0)
		{
			info->appended = e->appended;
			info->full = e->built_full;
		}
	}
	LWLockRelease(cshared->lock);
	return found;
}

/*
 * Is xid, seen running by a build, the work of a prepared transaction (or
 * of one that ended since)?  No backend runs it.  Such work ends by COMMIT
 * or ROLLBACK PREPARED in a backend with no pending deltas for it, so a
 * count that saw it running must not be kept as exact (see the build).
 */
static bool
xid_is_prepared(TransactionId xid)
{
	TransactionId top;

	if (!TransactionIdIsNormal(xid) || TransactionIdIsCurrentTransactionId(xid))
		return false;
	top = TransactionIdPrecedes(xid, TransactionXmin) ? xid :
		SubTransGetTopmostTransaction(xid);
	return BackendXidGetPid(top) == 0;
}

/*
 * An event live on its page: what the consume log's entries log[0..nlog)
 * and its floor say of msg_id id.  Below the floor, or consumed by a
 * committed entry, it is purged (and its
 * xid may be the newest "deleter" some snapshot still sees); by a running
 * one it is not purged yet.  True if unpurged.
 */
static bool
live_unpurged(const SpindleConsumed *log, int nlog, int64 floor, int64 id,
			  TransactionId oldest_xmin, TransactionId *latest,
			  bool *prepared_work)
{
	const SpindleConsumed *e = nlog > 0 ?
		spindle_consume_log_find(log, nlog, id) : NULL;
	TransactionId x;

	if (id < floor)
		return false;			/* folded into the floor */
	switch (spindle_consume_log_state(e, oldest_xmin))
	{
		case SPINDLE_ENTRY_DEAD:
			return false;
		case SPINDLE_ENTRY_RECENT:
			x = XidFromFullTransactionId(e->fxid);
			if (!TransactionIdIsValid(*latest) ||
				TransactionIdFollows(x, *latest))
				*latest = x;
			return false;
		case SPINDLE_ENTRY_RUNNING:
			x = XidFromFullTransactionId(e->fxid);
			if (!*prepared_work)
				*prepared_work = xid_is_prepared(x);
			return true;
		default:
			return true;
	}
}

/*
 * A copy k live on its page: what the relocation entries moved[0..nmoved)
 * say of it.  Hidden by a committed entry, it counts as purged by the
 * mover (design, "Compaction", section 5: as a purge), whose xid may be
 * the newest "deleter" a snapshot still sees: 0.  By a running mover, it
 * is not purged yet: 1.  No entry (or an aborted one's): -1, the consume
 * log and the page decide.
 */
static int
moved_unpurged(const SpindleRelocation *moved, int nmoved, int64 k,
			   TransactionId oldest_xmin, TransactionId *latest,
			   bool *prepared_work)
{
	const SpindleRelocation *e = nmoved > 0 ?
		spindle_reloc_find(moved, nmoved, k) : NULL;

	switch (spindle_reloc_state(e, oldest_xmin))
	{
		case SPINDLE_ENTRY_DEAD:
			return 0;
		case SPINDLE_ENTRY_RECENT:
			if (!TransactionIdIsValid(*latest) ||
				TransactionIdFollows(e->xid, *latest))
				*latest = e->xid;
			return 0;
		case SPINDLE_ENTRY_RUNNING:
			if (!*prepared_work)
				*prepared_work = xid_is_prepared(e->xid);
			return 1;
		default:
			return -1;
	}
}

/*
 * Count spindle sp (seg) of facade from disk: events not purged (live and
 * not consumed by a committed entry of the consume log, or whose inserter,
 * deleter or consumer is running) and the newest deleter or consumer of
 * an event some snapshot may still see.
 */
static void
count_unpurged(Oid facade, const SpindleEntry *sp, Relation seg,
			   int64 *unpurged, TransactionId *latest, bool *prepared_work)
{
	BlockNumber nblocks = RelationGetNumberOfBlocks(seg);
	BlockNumber blk;
	TransactionId oldest_xmin = GetOldestNonRemovableTransactionId(seg);
	BufferAccessStrategy strategy = GetAccessStrategy(BAS_BULKREAD);
	TransactionId checked_xid = InvalidTransactionId;
	int			nlog = 0;
	int64		floor = PG_INT64_MIN;

	/* an annex has no event numbers: the consume log covers none of it */
	SpindleConsumed *log = spindle_is_annex(sp) ? NULL :
		spindle_consume_log_over(facade, sp->first_no,
								 sp->first_no + sp->vcount, &nlog, &floor);

	/* the copies compaction moved away: purged by their movers */
	int			nmoved;
	SpindleRelocation *moved = spindle_reloc_read_for(facade, sp->spindle_no,
													  &nmoved);

	*unpurged = 0;
	*latest = InvalidTransactionId;
	*prepared_work = false;
	for (blk = 0; blk < nblocks; blk++)
	{
		Buffer		buf;
		Page		page;
		OffsetNumber off,
					maxoff;

		CHECK_FOR_INTERRUPTS();
		buf = ReadBufferExtended(seg, MAIN_FORKNUM, blk, RBM_NORMAL, strategy);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		maxoff = PageIsNew(page) ? 0 : PageGetMaxOffsetNumber(page);
		for (off = FirstOffsetNumber; off <= maxoff; off++)
		{
			ItemId		itemid = PageGetItemId(page, off);
			HeapTupleData tuple;
			HTSV_Result vis;

			if (!ItemIdIsNormal(itemid))
				continue;
			tuple.t_data = (HeapTupleHeader) PageGetItem(page, itemid);
			tuple.t_len = ItemIdGetLength(itemid);
			tuple.t_tableOid = RelationGetRelid(seg);
			ItemPointerSet(&tuple.t_self, blk, off);
			vis = HeapTupleSatisfiesVacuum(&tuple, oldest_xmin, buf);
			switch (vis)
			{
				case HEAPTUPLE_RECENTLY_DEAD:
					{
						TransactionId x = HeapTupleHeaderGetUpdateXid(tuple.t_data);

						if (TransactionIdIsNormal(x) &&
							(!TransactionIdIsValid(*latest) ||
							 TransactionIdFollows(x, *latest)))
							*latest = x;
					}
					break;
				case HEAPTUPLE_DEAD:
					break;
				case HEAPTUPLE_LIVE:
					{
						int32		k = spindle_event_k(tuple.t_data,
														tuple.t_len);
						int			moved_state;

						moved_state = moved_unpurged(moved, nmoved, k,
													 oldest_xmin, latest,
													 prepared_work);
						if (moved_state > 0 ||
							(moved_state < 0 &&
							 live_unpurged(log, nlog, floor, sp->first_no + k,
										   oldest_xmin, latest,
										   prepared_work)))
							(*unpurged)++;
					}
					break;
				case HEAPTUPLE_INSERT_IN_PROGRESS:
				case HEAPTUPLE_DELETE_IN_PROGRESS:
					{
						TransactionId x = (vis == HEAPTUPLE_INSERT_IN_PROGRESS) ?
							HeapTupleHeaderGetXmin(tuple.t_data) :
							HeapTupleHeaderGetUpdateXid(tuple.t_data);

						(*unpurged)++;
						/* one look at the proc array per running xid */
						if (!*prepared_work && x != checked_xid)
						{
							checked_xid = x;
							*prepared_work = xid_is_prepared(x);
						}
					}
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
 * Build the counters of spindle sp of facade (next: the spindle after it,
 * or NULL) from disk, without waiting for any lock: false if a lock was
 * not free or the spindle is gone (see the header for why the count is
 * exact).  Reads the spindle's pages, and its slot map entries if no slot
 * counter knows how many slots it handed out.
 */
bool
spindle_counters_build(Oid facade, const SpindleEntry *sp,
					   const SpindleEntry *next)
{
	bool		recovery = RecoveryInProgress();
	LOCKMODE	mode = recovery ? AccessShareLock : ShareLock;
	Relation	frel = NULL;
	Relation	seg = NULL;
	Relation	nextseg = NULL;
	bool		locked_next = false;
	int64		appended;
	bool		full;
	TimestampTz filled_at;
	int64		unpurged;
	int64		total;
	TransactionId latest;
	CounterEntry *e;
	bool		existed;
	bool		ok = false;
	bool		prepared_work = false;
	uint32		mygen = 0;
	XLogRecPtr	replayed = recovery ? GetXLogReplayRecPtr(NULL) : InvalidXLogRecPtr;

	if (chash == NULL)
		return false;
	if (!ConditionalLockRelationOid(facade, AccessShareLock))
		return false;
	if (!ConditionalLockRelationOid(sp->segment, mode))
	{
		UnlockRelationOid(facade, AccessShareLock);
		return false;
	}
	frel = try_relation_open(facade, NoLock);
	seg = try_relation_open(sp->segment, NoLock);
	if (frel == NULL || seg == NULL)
		goto done;

	/*
	 * First say that a build runs: a transaction that ends meanwhile
	 * without the spindle's lock marks the entry inexact (apply_pending),
	 * and this count is then thrown away.
	 */
	LWLockAcquire(cshared->lock, LW_EXCLUSIVE);
	e = enter(facade, sp, &existed);
	if (e != NULL)
	{
		e->building = true;
		e->inexact = false;
		e->build_gen = mygen = ++cshared->build_gen;
	}
	LWLockRelease(cshared->lock);
	if (e == NULL)
		goto done;

	if (!spindle_slots_view(facade, sp, &appended, &full, &filled_at))
	{
		if (next != NULL &&
			ConditionalLockRelationOid(next->segment, AccessShareLock))
		{
			locked_next = true;
			nextseg = try_relation_open(next->segment, NoLock);
		}
		appended = spindle_slots_count_disk(frel, seg, sp, nextseg, &full);
	}
	else
		appended = -1;			/* the slot counters know it */
	count_unpurged(facade, sp, seg, &unpurged, &latest, &prepared_work);
	total = appended;
	if (total < 0)
	{
		int64		used;
		TimestampTz fa;
		bool		f;

		/* the slot counters know it (and no insert can run now) */
		if (spindle_slots_view(facade, sp, &used, &f, &fa))
			total = used;
		else
			total = unpurged;
	}

	LWLockAcquire(cshared->lock, LW_EXCLUSIVE);
	e = lookup(sp->segment);
	if (e != NULL && e->building && e->build_gen == mygen && e->inexact)
	{
		/* a transaction ended meanwhile that this count may have missed */
		e->building = false;
	}
	else if (e != NULL && e->building && e->build_gen == mygen)
	{
		e->building = false;
		e->appended = appended;
		e->built_full = appended >= 0 ? full : false;
		/*
		 * A prepared transaction's work: count again once it ended.  (In
		 * recovery a count is made again whenever more WAL was replayed,
		 * which its end is.)
		 */
		e->stale = prepared_work && !recovery;
		e->in_recovery = recovery;
		e->built_at = GetCurrentTimestamp();
		e->built_lsn = recovery ? replayed : InvalidXLogRecPtr;
		pg_atomic_write_u64(&e->purged, (uint64) Max(total - unpurged, 0));
		pg_atomic_write_u32(&e->latest_purger, latest);
		ok = true;
	}
	LWLockRelease(cshared->lock);
	elog(DEBUG1, "spindle: counted the purged events of spindle %lld of \"%s\" from disk",
		 (long long) sp->spindle_no, RelationGetRelationName(frel));

done:
	if (nextseg != NULL)
		relation_close(nextseg, NoLock);
	if (locked_next)
		UnlockRelationOid(next->segment, AccessShareLock);
	if (seg != NULL)
		relation_close(seg, NoLock);
	if (frel != NULL)
		relation_close(frel, NoLock);
	UnlockRelationOid(sp->segment, mode);
	UnlockRelationOid(facade, AccessShareLock);
	return ok;
}

/*
 * Events of spindle sp of facade not purged (live, or whose inserter or
 * deleter is running), counted from its pages now, making or changing no
 * entry: for the limit of a queue (views.c), which needs a figure at once
 * when spindle_counters_build cannot count the spindle (a writer that
 * keeps it locked to its end, a prepared transaction after a restart).
 * It waits for AccessShareLock on the spindle, which only a drop or a
 * detach of the spindle conflicts with (maintenance takes it without
 * waiting, only for a spindle all dead, and holds nothing we could hold),
 * and holds it only during the scan.  Writers may run meanwhile: their
 * events not yet on the pages are not counted, their ends may or may not
 * be; the caller (the queue's limit lock holder) excludes every enqueue
 * into the queue meanwhile, so what it may miss is a plain INSERT's, as
 * for any count.  0 if the spindle is gone.  Reads every page.
 */
int64
spindle_counters_count_now(Oid facade, const SpindleEntry *sp)
{
	Relation	seg;
	int64		unpurged;
	TransactionId latest;
	bool		prepared_work;

	seg = try_relation_open(sp->segment, AccessShareLock);
	if (seg == NULL)
		return 0;
	count_unpurged(facade, sp, seg, &unpurged, &latest, &prepared_work);
	relation_close(seg, AccessShareLock);
	elog(DEBUG1, "spindle: counted the events of spindle %lld of relation %u from disk without a counter: %lld not purged",
		 (long long) sp->spindle_no, facade, (long long) unpurged);
	return unpurged;
}

/* A spindle is dropped (or its creation rolled back): forget its entry. */
void
spindle_counters_forget(Oid segment)
{
	CounterKey	key;

	if (chash == NULL)
		return;
	key.dbid = MyDatabaseId;
	key.segment = segment;
	LWLockAcquire(cshared->lock, LW_EXCLUSIVE);
	hash_search(chash, &key, HASH_REMOVE, NULL);
	LWLockRelease(cshared->lock);
}

/* Forget every entry of a database (see spindle_slots_forget_database). */
void
spindle_counters_forget_database(Oid dboid)
{
	HASH_SEQ_STATUS status;
	CounterEntry *e;

	if (chash == NULL)
		return;
	LWLockAcquire(cshared->lock, LW_EXCLUSIVE);
	hash_seq_init(&status, chash);
	while ((e = hash_seq_search(&status)) != NULL)
		if (e->key.dbid == dboid)
			hash_search(chash, &e->key, HASH_REMOVE, NULL);
	LWLockRelease(cshared->lock);
}
