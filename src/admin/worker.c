/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The spindle background workers: one launcher, one worker per database
 *	  that has the extension.
 *
 * The launcher (a static worker, connected to no database) wakes every
 * spindle.naptime, takes a WAL-position sample for the TTL purge, measures
 * free disk space for the disk alarm (spindle_disk_alarm_measure, in
 * table/disk_alarm.c; also with spindle.enable_worker off), and starts a
 * worker for every database that allows connections, has none,
 * and is not known to lack the extension.  A worker finding no spindle
 * extension in its database says so and exits; the launcher remembers that
 * in its own memory (not in shared memory, so any number of databases can
 * lack the extension) and looks again after NO_EXTENSION_RECHECK_MS, or at
 * once when CREATE EXTENSION spindle commits there (worker_xact_callback
 * queues the database in WorkerShared.wake).  With more databases than
 * spindle.max_workers, workers take turns: the launcher asks the worker
 * that started longest ago to yield after its round, and starts the
 * waiting database that was served longest ago (never served first).
 *
 * Shared slots: a database has one only while it is being served or
 * probed (a worker was started for it and not yet reaped), while a command
 * has it paused, or while it is known to have the extension (so that
 * spindle.worker lists it between turns).  The launcher frees the others.
 * When every slot is taken, the launcher, or spindle_worker_pause, reuses
 * a slot whose database has no worker and is not paused (its counters are
 * kept in the launcher's memory and put back when it gets a slot again).
 *
 * A worker, every naptime (and when a backend wakes it, see
 * spindle_worker_nudge), for each spindle table, each step in its own
 * transaction: purges events older than the table's time_to_live, then
 * retires the index entries of dropped spindles, drops every droppable
 * spindle, records fill times, and makes sure a ready spindle follows the
 * open one; then it buries the slots that failed inserts lost, so that
 * their slot counters can be evicted (storage's tombstones.c).  An error
 * in one table is logged with the table's name, shown in spindle.worker,
 * and the worker goes on with the next table; that table is then left
 * alone for a while, longer after each failure.  It takes no lock it
 * would wait for (lock_timeout bounds the rest), bounds each compaction
 * pass with a statement timeout it arms itself (COMPACT_TIMEOUT_MS, see
 * step_compact), holds no lock between rounds, and gets out of the way of DROP DATABASE and of the other
 * commands that need a database to themselves (see spindle_worker_pause).
 *
 * Locks: WorkerLock (wshared->lock) protects the shared slots and the wake
 * queue.  Only the launcher sets or clears a slot's "launched" flag, and
 * handles[i] != NULL implies slots[i].launched; a slot with a launched
 * worker or a pause is never reused for another database.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "commands/extension.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "admin/spindle_admin.h"


PG_FUNCTION_INFO_V1(spindle_worker_info);

int			spindle_naptime = 1000;
bool		spindle_enable_worker = true;
int			spindle_max_workers = 4;

#define NO_EXTENSION_RECHECK_MS 30000

/* CREATE EXTENSION commits the launcher has not looked at yet */
#define WAKE_MAX 32

typedef struct WorkerSlot
{
	Oid			dboid;			/* InvalidOid = free slot */
	pid_t		pid;			/* 0 when no worker runs */
	int			pgprocno;
	bool		launched;		/* a worker was started, not yet reaped */
	bool		fresh;			/* made by a pause: counters not restored */
	bool		paused;			/* a command needs the database alone */
	bool		yield;			/* give the slot to a waiting database */
	bool		served;			/* the extension was found: listed */
	bool		no_extension;	/* the worker found no extension */
	TimestampTz last_run;
	int64		spindles_dropped;
	int64		bytes_freed;
	SpindleCompactStats compacted;	/* what its relocator did */
	char		state[16];
	char		last_error[256];
} WorkerSlot;

typedef struct WorkerShared
{
	LWLock	   *lock;
	int			launcher_pgprocno;	/* -1 when none */
	int			nwake;			/* databases in wake[] */
	bool		wake_all;		/* wake[] overflowed: look at every one */
	Oid			wake[WAKE_MAX];
	WorkerSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} WorkerShared;

static WorkerShared *wshared = NULL;
static int	my_slot = -1;

/*
 * Steps of tables whose maintenance failed: skipped until retry_at, the
 * wait doubling with each failure in a row (naptime, 2x, 4x ... up to 5
 * min).  Each step of each table has its own, so that the success of
 * another step (a drop after a failed TTL purge) neither resets it nor is
 * held back by it.
 */
typedef struct BackoffKey
{
	Oid			relid;
	int			step;			/* STEP_* */
} BackoffKey;

typedef struct Backoff
{
	BackoffKey	key;			/* hash key */
	int			failures;
	TimestampTz retry_at;
} Backoff;

#define STEP_PURGE	0
#define STEP_DROP	1
#define STEP_READY	2
#define STEP_RETIRE	3
#define STEP_SETTLE	4
#define STEP_COMPACT 5

static HTAB *backoff = NULL;

#define MAX_BACKOFF_MS (5 * 60 * 1000)

#define NSLOTS (spindle_max_workers * 4)

Size
spindle_worker_shmem_size(void)
{
	return add_size(offsetof(WorkerShared, slots),
					mul_size(sizeof(WorkerSlot), NSLOTS));
}

void
spindle_worker_shmem_startup(void)
{
	bool		found;

	wshared = ShmemInitStruct("spindle workers", spindle_worker_shmem_size(),
							  &found);
	if (!found)
	{
		memset(wshared, 0, spindle_worker_shmem_size());
		wshared->lock = &(GetNamedLWLockTranche("spindle_worker"))[0].lock;
		wshared->launcher_pgprocno = -1;
	}
}

static WorkerSlot *
find_slot(Oid dboid)
{
	int			i;

	for (i = 0; i < NSLOTS; i++)
		if (wshared->slots[i].dboid == dboid)
			return &wshared->slots[i];
	return NULL;
}

/*
 * A slot for dboid, which has none: a free one, else one whose database
 * has no worker and is not paused (the launcher keeps its counters).
 * NULL if every slot has a worker or a pause.  Caller holds the lock
 * exclusively.
 */
static WorkerSlot *
take_slot(Oid dboid)
{
	WorkerSlot *slot = NULL;
	int			i;

	for (i = 0; i < NSLOTS && slot == NULL; i++)
		if (!OidIsValid(wshared->slots[i].dboid))
			slot = &wshared->slots[i];
	for (i = 0; i < NSLOTS && slot == NULL; i++)
		if (!wshared->slots[i].launched && !wshared->slots[i].paused)
			slot = &wshared->slots[i];
	if (slot == NULL)
		return NULL;
	memset(slot, 0, sizeof(WorkerSlot));
	slot->dboid = dboid;
	slot->fresh = true;
	strlcpy(slot->state, "starting", sizeof(slot->state));
	return slot;
}

/* ----------------------------------------------------------------
 * Getting out of the way
 * ----------------------------------------------------------------
 */

/* the database whose worker this backend paused, if any */
static Oid	paused_by_me = InvalidOid;
static bool unpause_registered = false;

static void
unpause_at_exit(int code, Datum arg)
{
	if (OidIsValid(paused_by_me))
		spindle_worker_resume(paused_by_me);
}

/*
 * Stop the worker of a database and keep it stopped until
 * spindle_worker_resume: DROP DATABASE, CREATE DATABASE from it as a
 * template, RENAME and SET TABLESPACE refuse to run while any other
 * session is connected to it, and core only terminates autovacuum.  Waits
 * up to 10 s for the worker to exit.
 */
void
spindle_worker_pause(Oid dboid)
{
	WorkerSlot *slot;
	int			waited;

	if (wshared == NULL || !OidIsValid(dboid))
		return;
	/* a backend that dies in the command (FATAL) must not leave it paused */
	if (!unpause_registered)
	{
		before_shmem_exit(unpause_at_exit, (Datum) 0);
		unpause_registered = true;
	}
	paused_by_me = dboid;
	LWLockAcquire(wshared->lock, LW_EXCLUSIVE);
	slot = find_slot(dboid);
	if (slot == NULL)
		slot = take_slot(dboid);
	if (slot != NULL)
	{
		slot->paused = true;
		if (slot->pid != 0)
			SetLatch(&ProcGlobal->allProcs[slot->pgprocno].procLatch);
	}
	LWLockRelease(wshared->lock);
	if (slot == NULL)
		return;
	for (waited = 0; waited < 1000; waited++)
	{
		bool		gone;

		LWLockAcquire(wshared->lock, LW_SHARED);
		gone = slot->dboid != dboid || slot->pid == 0;
		LWLockRelease(wshared->lock);
		if (gone)
			return;
		CHECK_FOR_INTERRUPTS();
		pg_usleep(10000L);
	}
}

void
spindle_worker_resume(Oid dboid)
{
	WorkerSlot *slot;

	if (wshared == NULL || !OidIsValid(dboid))
		return;
	paused_by_me = InvalidOid;
	LWLockAcquire(wshared->lock, LW_EXCLUSIVE);
	slot = find_slot(dboid);
	if (slot != NULL)
		slot->paused = false;
	LWLockRelease(wshared->lock);
}

/*
 * CREATE EXTENSION spindle: once it commits, this database is to be served
 * at once, not after the launcher's next look for the extension.  The
 * commit callback only takes an LWLock, queues the database for the
 * launcher and sets its latch, which cannot fail.
 */
static bool wake_at_commit = false;

static void
worker_xact_callback(XactEvent event, void *arg)
{
	int			i;

	if (!wake_at_commit)
		return;
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		wake_at_commit = false;
	if (event != XACT_EVENT_COMMIT)
		return;
	wake_at_commit = false;
	if (wshared == NULL)
		return;
	LWLockAcquire(wshared->lock, LW_EXCLUSIVE);
	for (i = 0; i < wshared->nwake; i++)
		if (wshared->wake[i] == MyDatabaseId)
			break;
	if (i == wshared->nwake)
	{
		if (wshared->nwake < WAKE_MAX)
			wshared->wake[wshared->nwake++] = MyDatabaseId;
		else
			wshared->wake_all = true;
	}
	if (wshared->launcher_pgprocno >= 0)
		SetLatch(&ProcGlobal->allProcs[wshared->launcher_pgprocno].procLatch);
	LWLockRelease(wshared->lock);
}

void
spindle_worker_extension_created(void)
{
	static bool registered = false;

	if (!registered)
	{
		RegisterXactCallback(worker_xact_callback, NULL);
		registered = true;
	}
	wake_at_commit = true;
}

/*
 * Wake the worker of this database: a producer used the ready spindle, a
 * dequeue may have finished a full one (queue.c), or a transaction that
 * detached spindles committed.  Only takes WorkerLock shared and sets a
 * latch, so it may run in a commit callback.
 */
void
spindle_worker_nudge(void)
{
	WorkerSlot *slot;

	if (wshared == NULL)
		return;
	LWLockAcquire(wshared->lock, LW_SHARED);
	slot = find_slot(MyDatabaseId);
	if (slot != NULL && slot->pid != 0)
		SetLatch(&ProcGlobal->allProcs[slot->pgprocno].procLatch);
	LWLockRelease(wshared->lock);
}

/* ----------------------------------------------------------------
 * The per-database worker
 * ----------------------------------------------------------------
 */
static void
worker_detach(int code, Datum arg)
{
	LWLockAcquire(wshared->lock, LW_EXCLUSIVE);
	if (my_slot >= 0 && wshared->slots[my_slot].pid == MyProcPid)
	{
		wshared->slots[my_slot].pid = 0;
		strlcpy(wshared->slots[my_slot].state, "stopped",
				sizeof(wshared->slots[my_slot].state));
	}
	LWLockRelease(wshared->lock);
}

static void
set_state(const char *state)
{
	LWLockAcquire(wshared->lock, LW_EXCLUSIVE);
	strlcpy(wshared->slots[my_slot].state, state,
			sizeof(wshared->slots[my_slot].state));
	LWLockRelease(wshared->lock);
}

/*
 * Run one step for one table in its own transaction; on error, log it
 * with the table's name, remember it, and carry on.
 */
typedef void (*TableStep) (Relation rel, int64 *dropped, int64 *freed);

static void
step_purge(Relation rel, int64 *dropped, int64 *freed)
{
	Interval	ttl;

	TimestampTz cutoff;

	/* a ttl older than any event purges nothing (and must not fail) */
	if (spindle_rel_ttl_option(RelationGetRelid(rel), &ttl) &&
		spindle_ttl_cutoff(&ttl, GetCurrentTimestamp(), &cutoff))
		(void) spindle_purge_older_than(rel, cutoff);
}

static void
step_drop(Relation rel, int64 *dropped, int64 *freed)
{
	*dropped += spindle_drop_droppable_stats(rel, freed, true,
											 spindle_drops_per_transaction());
}

/*
 * In a transaction of its own, after the drops committed: retire their
 * ranges and give back the slot map's empty tail (spindle_retire_dropped).
 */
static void
step_retire(Relation rel, int64 *dropped, int64 *freed)
{
	(void) spindle_retire_dropped(rel);
}

/*
 * In a transaction of its own, after the drops: settle the queue's consume
 * log -- the entries over dropped spindles and those of aborted
 * transactions go (consume_log.c), a bounded number looked at per round.
 */
#define SETTLE_ENTRIES_PER_ROUND 1024

/* settle's standby conflict, on one of the table's spindle pages */
static void
settle_conflict(void *arg, TransactionId latest)
{
	spindle_log_consumed_conflict((Relation) arg, latest);
}

/*
 * Settle rel's consume log (see above), and give back the leaves its
 * parked trees no longer need (spindle_park_compact); the ids removed
 * from the log.
 */
static int64
settle(Relation rel)
{
	SpindleDirectory *dir = spindle_directory_acquire_current(rel);
	int64		below = PG_INT64_MIN;
	int64		removed = 0;

	/* the lowest event number still in a spindle */
	for (int i = 0; i < dir->nspindles; i++)
		if (i == 0 || dir->spindles[i].first_no < below)
			below = dir->spindles[i].first_no;
	spindle_directory_release(dir);
	if (below != PG_INT64_MIN)
		removed = spindle_consume_log_settle(RelationGetRelid(rel), below,
											 SETTLE_ENTRIES_PER_ROUND,
											 settle_conflict, rel);
	/* after the log: an error here costs the log nothing (rv11, L2) */
	(void) spindle_park_compact(RelationGetRelid(rel));
	return removed;
}

static void
step_settle(Relation rel, int64 *dropped, int64 *freed)
{
	(void) settle(rel);
}

/*
 * spindle._settle(rel regclass) RETURNS bigint: the worker's settle step
 * on one queue table in the caller's transaction, the ids removed from
 * its consume log; superusers only (a test stand-in for the worker, which
 * pg_regress and isolation tests run without).
 */
PG_FUNCTION_INFO_V1(spindle_settle_sql);
Datum
spindle_settle_sql(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	Relation	rel;
	int64		removed;

	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("only superusers may call spindle._settle")));
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot call spindle._settle during recovery")));
	PreventCommandIfReadOnly("spindle._settle()");
	rel = relation_open(relid, AccessShareLock);
	if (!spindle_is_facade(rel))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a spindle table",
						RelationGetRelationName(rel))));
	removed = settle(rel);
	relation_close(rel, NoLock);
	PG_RETURN_INT64(removed);
}

/*
 * Compaction (queue_compact.c): one relocator pass of at most one batch,
 * in a transaction of its own, which commits after the batch (design,
 * "Compaction", section 3 "Batches"); the round calls it again while it
 * fills its batch, up to COMPACT_EVENTS_PER_ROUND events per table and
 * for COMPACT_TIMEOUT_MS.  Nothing when spindle.compaction_threshold is
 * 0, and no page read when no spindle qualifies (or every one that does
 * is remembered by the pass's back-off memory).
 *
 * Each pass is bounded in time: the worker arms STATEMENT_TIMEOUT itself
 * (a background worker never arms it from the GUC) for
 * COMPACT_TIMEOUT_MS, so that an index expression of the table's owner
 * that sleeps or waits cannot hold the worker, and the relocator's locks
 * (which TRUNCATE and DDL wait for), for longer: the cancel rolls the
 * pass back, the spindle is remembered (queue_compact.c) and the step
 * backs off like any failed step.  2 s, not a multiple of the naptime
 * (which may be minutes): a batch of SPINDLE_RELOCATE_BATCH moves takes
 * milliseconds with ordinary indexes, and what waits behind the worker's
 * locks waits at most that long.
 */
#define COMPACT_EVENTS_PER_ROUND 1024
#define COMPACT_TIMEOUT_MS 2000

static SpindleCompactStats round_compacted;

/*
 * Disarm the compaction pass's statement timeout.  If it fired but its
 * cancel was not acted on yet (the pass ended first), the cancel is
 * dropped: it must not hit the next step, or the worker's main loop.
 */
static void
disarm_compact_timeout(void)
{
	disable_timeout(STATEMENT_TIMEOUT, true);
	if (get_timeout_indicator(STATEMENT_TIMEOUT, true))
		QueryCancelPending = false;
}

static void
step_compact(Relation rel, int64 *dropped, int64 *freed)
{
	SpindleCompactStats st = {0};
	bool		more = false;

	enable_timeout_after(STATEMENT_TIMEOUT, COMPACT_TIMEOUT_MS);
	PG_TRY();
	{
		more = spindle_compact_table(RelationGetRelid(rel),
									 SPINDLE_RELOCATE_BATCH, true, &st);
	}
	PG_FINALLY();
	{
		disarm_compact_timeout();
	}
	PG_END_TRY();
	if (more)
		*dropped = -1;			/* a full batch: say "more" to the round */
	round_compacted.moved += st.moved;
	round_compacted.skipped += st.skipped;
	round_compacted.spindles += st.spindles;
	round_compacted.emptied += st.emptied;
}

/*
 * In a transaction of its own: a drop holds its spindles' ACCESS EXCLUSIVE
 * locks to commit, and a creator holding the creation lock may be waiting
 * for one of them.
 */
static void
step_ready(Relation rel, int64 *dropped, int64 *freed)
{
	spindle_ensure_ready(rel);
}

static void
note_failure(Oid relid, int stepno)
{
	BackoffKey	key;
	bool		found;
	Backoff    *b;
	int64		wait_ms;

	memset(&key, 0, sizeof(key));
	key.relid = relid;
	key.step = stepno;
	b = hash_search(backoff, &key, HASH_ENTER, &found);
	b->failures = found ? b->failures + 1 : 1;
	wait_ms = Min((int64) spindle_naptime << Min(b->failures, 20),
				  (int64) MAX_BACKOFF_MS);
	b->retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), wait_ms);
}

static void
note_success(Oid relid, int stepno)
{
	BackoffKey	key;

	memset(&key, 0, sizeof(key));
	key.relid = relid;
	key.step = stepno;
	hash_search(backoff, &key, HASH_REMOVE, NULL);
}

static bool
backing_off(Oid relid, int stepno)
{
	BackoffKey	key;
	Backoff    *b;

	memset(&key, 0, sizeof(key));
	key.relid = relid;
	key.step = stepno;
	b = hash_search(backoff, &key, HASH_FIND, NULL);
	return b != NULL && GetCurrentTimestamp() < b->retry_at;
}

/* Returns false if the step failed, or waits after failures. */
static bool
run_step(Oid relid, int stepno, TableStep step, int64 *dropped, int64 *freed)
{
	MemoryContext cxt = CurrentMemoryContext;
	char		relname[NAMEDATALEN * 2 + 2];

	if (backing_off(relid, stepno))
		return false;
	snprintf(relname, sizeof(relname), "with OID %u", relid);

	PG_TRY();
	{
		Relation	rel;

		char	   *name;

		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());
		/* the name first: locking the table may be what fails */
		name = get_rel_name(relid);
		if (name != NULL)
			snprintf(relname, sizeof(relname), "%s.%s",
					 get_namespace_name(get_rel_namespace(relid)), name);
		rel = try_relation_open(relid, AccessShareLock);
		if (rel != NULL)
		{
			if (spindle_is_facade(rel))
				step(rel, dropped, freed);
			relation_close(rel, NoLock);
		}
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		edata = spindle_catch_and_abort(cxt);
		ereport(LOG,
				(errmsg("spindle worker: maintenance of table %s failed: %s",
						relname, edata->message)));
		LWLockAcquire(wshared->lock, LW_EXCLUSIVE);
		snprintf(wshared->slots[my_slot].last_error,
				 sizeof(wshared->slots[my_slot].last_error),
				 "%s: %s", relname, edata->message);
		LWLockRelease(wshared->lock);
		FreeErrorData(edata);
		note_failure(relid, stepno);
		return false;
	}
	PG_END_TRY();
	note_success(relid, stepno);
	return true;
}

/* Spindles whose lost slots one round buries, at most. */
#define LOST_PER_ROUND 256

/* the server's count of lost reservations at the last look that found none */
static uint64 losses_seen = 0;

/*
 * Bury the lost slots of this database's slot counters (storage's
 * tombstones.c), each spindle in a transaction of its own, so that those
 * counters can be evicted again.  A table or spindle that is locked is
 * left for the next round; an error is logged and the rest go on.  When
 * no insert failed since the last look that found nothing, this is one
 * atomic read (spindle_slots_list_lost).
 */
static void
bury_lost_slots(void)
{
	MemoryContext cxt = CurrentMemoryContext;
	SpindleLostSlots *lost = palloc(sizeof(SpindleLostSlots) * LOST_PER_ROUND);
	int			n = spindle_slots_list_lost(lost, LOST_PER_ROUND,
												&losses_seen);
	int			i;

	for (i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		PG_TRY();
		{
			SetCurrentStatementStartTimestamp();
			StartTransactionCommand();
			(void) spindle_bury_lost_slots(&lost[i]);
			CommitTransactionCommand();
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			edata = spindle_catch_and_abort(cxt);
			ereport(LOG,
					(errmsg("spindle worker: burying the lost slots of spindle %lld of table with OID %u failed: %s",
							(long long) lost[i].spindle_no, lost[i].facade,
							edata->message)));
			FreeErrorData(edata);
		}
		PG_END_TRY();
		MemoryContextSwitchTo(cxt);
	}
	pfree(lost);
}

/* One round over every spindle table of the database. */
static void
worker_round(MemoryContext roundcxt)
{
	List	   *tables = NIL;
	List	   *with_ttl = NIL;
	ListCell   *lc;
	bool		have_extension;
	int64		dropped = 0;
	int64		freed = 0;

	set_state("running");
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	have_extension = OidIsValid(get_extension_oid("spindle", true));
	if (have_extension)
	{
		MemoryContext old;
		List	   *found = spindle_catalog_tables();

		old = MemoryContextSwitchTo(roundcxt);
		tables = list_copy(found);
		foreach(lc, tables)
		{
			Interval	ttl;

			if (spindle_rel_ttl_option(lfirst_oid(lc), &ttl))
				with_ttl = lappend_oid(with_ttl, lfirst_oid(lc));
		}
		MemoryContextSwitchTo(old);
	}
	PopActiveSnapshot();
	CommitTransactionCommand();

	/* the launcher learns which it is when it reaps this worker */
	LWLockAcquire(wshared->lock, LW_EXCLUSIVE);
	wshared->slots[my_slot].no_extension = !have_extension;
	wshared->slots[my_slot].served = have_extension;
	LWLockRelease(wshared->lock);
	if (!have_extension)
		proc_exit(0);

	foreach(lc, tables)
	{
		Oid			relid = lfirst_oid(lc);
		int64		table_before;
		TimestampTz compact_start;

		CHECK_FOR_INTERRUPTS();
		if (list_member_oid(with_ttl, relid))
			(void) run_step(relid, STEP_PURGE, step_purge, &dropped, &freed);
		/* a transaction drops a bounded number: go on while it hits it */
		table_before = dropped;
		for (int n = 0; n < 32; n++)
		{
			int64		before = dropped;

			if (!run_step(relid, STEP_DROP, step_drop, &dropped, &freed) ||
				dropped - before < spindle_drops_per_transaction())
				break;
		}
		/* what went is retired now, not a round later */
		if (dropped > table_before)
			(void) run_step(relid, STEP_RETIRE, step_retire, &dropped, &freed);
		(void) run_step(relid, STEP_READY, step_ready, &dropped, &freed);
		(void) run_step(relid, STEP_SETTLE, step_settle, &dropped, &freed);
		/* compaction, a batch per transaction, bounded per round */
		compact_start = GetCurrentTimestamp();
		for (int n = 0; spindle_compaction_threshold > 0 &&
			 n < COMPACT_EVENTS_PER_ROUND / SPINDLE_RELOCATE_BATCH &&
			 !TimestampDifferenceExceeds(compact_start, GetCurrentTimestamp(),
										 COMPACT_TIMEOUT_MS); n++)
		{
			int64		more = 0;

			if (!run_step(relid, STEP_COMPACT, step_compact, &more, &freed) ||
				more >= 0)
				break;
		}
	}
	/* the spindles DROP TABLE and TRUNCATE detached from their tables */
	spindle_worker_drop_detached(&dropped, &freed);
	/* the counters that failed inserts pinned */
	bury_lost_slots();
	pgstat_report_stat(true);

	LWLockAcquire(wshared->lock, LW_EXCLUSIVE);
	wshared->slots[my_slot].last_run = GetCurrentTimestamp();
	wshared->slots[my_slot].spindles_dropped += dropped;
	wshared->slots[my_slot].bytes_freed += freed;
	wshared->slots[my_slot].compacted.moved += round_compacted.moved;
	wshared->slots[my_slot].compacted.skipped += round_compacted.skipped;
	wshared->slots[my_slot].compacted.spindles += round_compacted.spindles;
	wshared->slots[my_slot].compacted.emptied += round_compacted.emptied;
	memset(&round_compacted, 0, sizeof(round_compacted));
	strlcpy(wshared->slots[my_slot].state, "idle",
			sizeof(wshared->slots[my_slot].state));
	LWLockRelease(wshared->lock);
}

PGDLLEXPORT void spindle_worker_main(Datum main_arg);

/*
 * After a wake-up (spindle_worker_nudge), up to QUICK_ROUNDS_PER_WAKE rounds
 * come QUICK_ROUND_MS apart while a full spindle is held back (see
 * spindle_drop_held_back), so that a drop the waker's own locks or a purge
 * committing within about half a second kept from happening does not wait
 * a naptime.  At most that many quick rounds per naptime, however often
 * backends wake the worker: a hold that lasts (an old snapshot, a long
 * transaction) costs at most QUICK_ROUNDS_PER_WAKE extra rounds a naptime.
 */
#define QUICK_ROUNDS_PER_WAKE	10
#define QUICK_ROUND_MS			50
static int	quick_rounds = 0;	/* left after the last wake-up */
static TimestampTz window_start = 0;	/* quick rounds since then ... */
static int	window_quick = 0;	/* ... at most QUICK_ROUNDS_PER_WAKE */

void
spindle_worker_main(Datum main_arg)
{
	Oid			dboid;
	MemoryContext roundcxt;

	my_slot = DatumGetInt32(main_arg);
	memcpy(&dboid, MyBgworkerEntry->bgw_extra, sizeof(Oid));

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	LWLockAcquire(wshared->lock, LW_EXCLUSIVE);
	if (wshared->slots[my_slot].dboid != dboid ||
		wshared->slots[my_slot].paused)
	{
		LWLockRelease(wshared->lock);
		proc_exit(0);
	}
	wshared->slots[my_slot].pid = MyProcPid;
	wshared->slots[my_slot].pgprocno = MyProc->pgprocno;
	wshared->slots[my_slot].yield = false;
	LWLockRelease(wshared->lock);
	before_shmem_exit(worker_detach, (Datum) 0);

	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	pgstat_report_appname("spindle worker");
	/* never sit in a lock queue: a DDL waiting behind us would block all */
	SetConfigOption("lock_timeout", "1s", PGC_SUSET, PGC_S_OVERRIDE);

	roundcxt = AllocSetContextCreate(TopMemoryContext, "spindle worker round",
									 ALLOCSET_DEFAULT_SIZES);
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(BackoffKey);
		ctl.entrysize = sizeof(Backoff);
		backoff = hash_create("spindle worker backoff", 64, &ctl,
							  HASH_ELEM | HASH_BLOBS);
	}
	for (;;)
	{
		bool		stop;
		int			wait_ms = spindle_naptime;
		int			rc;

		LWLockAcquire(wshared->lock, LW_SHARED);
		stop = wshared->slots[my_slot].paused || !spindle_enable_worker;
		LWLockRelease(wshared->lock);
		if (stop)
			break;

		MemoryContextReset(roundcxt);
		spindle_drop_held_back = false;
		worker_round(roundcxt);

		LWLockAcquire(wshared->lock, LW_SHARED);
		stop = wshared->slots[my_slot].yield;
		LWLockRelease(wshared->lock);
		if (stop)
			break;

		/*
		 * After a wake-up, a spindle held back only for a moment (the
		 * waker's locks, a purge committing just after it) is looked at
		 * again soon, a few times, then at the naptime as before.
		 */
		if (TimestampDifferenceExceeds(window_start, GetCurrentTimestamp(),
									   spindle_naptime))
		{
			window_start = GetCurrentTimestamp();
			window_quick = 0;
		}
		if (spindle_drop_held_back && quick_rounds > 0 &&
			window_quick < QUICK_ROUNDS_PER_WAKE)
		{
			quick_rounds--;
			window_quick++;
			wait_ms = Min(spindle_naptime, QUICK_ROUND_MS);
		}
		else
			quick_rounds = 0;
		rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					   wait_ms, PG_WAIT_EXTENSION);
		if (rc & WL_LATCH_SET)
			quick_rounds = QUICK_ROUNDS_PER_WAKE;
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
	}
	proc_exit(0);
}

/* ----------------------------------------------------------------
 * The launcher
 * ----------------------------------------------------------------
 */
/*
 * What the launcher knows of each connectable database, in its own memory:
 * whether the extension was missing at the last look, when its worker
 * last started, and the counters of its slot, kept for when it has none.
 */
typedef struct LauncherDb
{
	Oid			dboid;			/* hash key */
	uint64		seen_round;		/* in pg_database at that launcher round */
	bool		no_extension;	/* missing at the last look */
	TimestampTz retry_after;	/* look again then, if no_extension */
	TimestampTz last_start;		/* 0 = never started */
	uint64		started_round;	/* round of the last start */
	uint64		woken_round;	/* round of the last CREATE EXTENSION wake */
	bool		has_copy;		/* the fields below are set */
	bool		served;
	TimestampTz last_run;
	int64		spindles_dropped;
	int64		bytes_freed;
	SpindleCompactStats compacted;
	char		state[16];
	char		last_error[256];
} LauncherDb;

static HTAB *launcher_dbs = NULL;
static uint64 launcher_round = 0;

static List *
connectable_databases(void)
{
	List	   *result = NIL;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;
	MemoryContext outer = CurrentMemoryContext;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	(void) GetTransactionSnapshot();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while (HeapTupleIsValid(tup = heap_getnext(scan, ForwardScanDirection)))
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tup);
		MemoryContext old;

		if (!db->datallowconn)
			continue;
		old = MemoryContextSwitchTo(outer);
		result = lappend_oid(result, db->oid);
		MemoryContextSwitchTo(old);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
	return result;
}

static bool
start_worker(int slotno, Oid dboid, BackgroundWorkerHandle **handle)
{
	BackgroundWorker bgw;

	memset(&bgw, 0, sizeof(bgw));
	bgw.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw.bgw_start_time = BgWorkerStart_RecoveryFinished;
	bgw.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(bgw.bgw_library_name, BGW_MAXLEN, "spindle");
	snprintf(bgw.bgw_function_name, BGW_MAXLEN, "spindle_worker_main");
	snprintf(bgw.bgw_name, BGW_MAXLEN, "spindle worker for database %u", dboid);
	snprintf(bgw.bgw_type, BGW_MAXLEN, "spindle worker");
	bgw.bgw_main_arg = Int32GetDatum(slotno);
	memcpy(bgw.bgw_extra, &dboid, sizeof(Oid));
	bgw.bgw_notify_pid = MyProcPid;
	return RegisterDynamicBackgroundWorker(&bgw, handle);
}

/* Keep a copy of a slot's counters (its worker has stopped). */
static void
copy_from_slot(LauncherDb *db, WorkerSlot *slot)
{
	db->has_copy = true;
	db->served = slot->served;
	db->last_run = slot->last_run;
	db->spindles_dropped = slot->spindles_dropped;
	db->bytes_freed = slot->bytes_freed;
	db->compacted = slot->compacted;
	memcpy(db->state, slot->state, sizeof(db->state));
	memcpy(db->last_error, slot->last_error, sizeof(db->last_error));
}

/* Put the copy back into a slot that is new for this database. */
static void
copy_to_slot(LauncherDb *db, WorkerSlot *slot)
{
	slot->fresh = false;
	if (!db->has_copy)
		return;
	slot->served = db->served;
	slot->last_run = db->last_run;
	slot->spindles_dropped = db->spindles_dropped;
	slot->bytes_freed = db->bytes_freed;
	slot->compacted = db->compacted;
	memcpy(slot->last_error, db->last_error, sizeof(slot->last_error));
}

static LauncherDb *
launcher_db(Oid dboid)
{
	bool		found;
	LauncherDb *db = hash_search(launcher_dbs, &dboid, HASH_ENTER, &found);

	if (!found)
	{
		memset(db, 0, sizeof(LauncherDb));
		db->dboid = dboid;
	}
	return db;
}

/* Order of service among waiting databases: longest without a worker first. */
static int
cmp_last_start(const void *a, const void *b)
{
	LauncherDb *da = *(LauncherDb *const *) a;
	LauncherDb *db = *(LauncherDb *const *) b;

	if (da->last_start != db->last_start)
		return da->last_start < db->last_start ? -1 : 1;
	return 0;
}

/*
 * Reap stopped workers (remembering what each found), take in the
 * CREATE EXTENSION wake-ups, and free the slots nobody needs.  Caller holds
 * the lock exclusively.
 */
static void
reap_workers(BackgroundWorkerHandle **handles, List *dbs, TimestampTz now)
{
	int			i;

	for (i = 0; i < wshared->nwake; i++)
	{
		LauncherDb *db = hash_search(launcher_dbs, &wshared->wake[i],
									 HASH_FIND, NULL);

		if (db != NULL)
		{
			db->no_extension = false;
			db->woken_round = launcher_round;
		}
	}
	wshared->nwake = 0;
	if (wshared->wake_all)
	{
		HASH_SEQ_STATUS seq;
		LauncherDb *db;

		hash_seq_init(&seq, launcher_dbs);
		while ((db = hash_seq_search(&seq)) != NULL)
		{
			db->no_extension = false;
			db->woken_round = launcher_round;
		}
		wshared->wake_all = false;
	}

	for (i = 0; i < NSLOTS; i++)
	{
		WorkerSlot *slot = &wshared->slots[i];

		if (slot->launched)
		{
			pid_t		pid;
			bool		stopped;

			/* no handle: started by an earlier launcher that failed */
			if (handles[i] != NULL)
				stopped = GetBackgroundWorkerPid(handles[i], &pid) == BGWH_STOPPED;
			else
				stopped = slot->pid == 0;
			if (stopped)
			{
				LauncherDb *db = launcher_db(slot->dboid);

				if (handles[i] != NULL)
					pfree(handles[i]);
				handles[i] = NULL;
				slot->launched = false;
				slot->pid = 0;
				slot->yield = false;
				copy_from_slot(db, slot);
				/* a verdict from before a CREATE EXTENSION wake-up is stale */
				if (slot->no_extension && db->woken_round <= db->started_round)
				{
					db->no_extension = true;
					db->retry_after =
						TimestampTzPlusMilliseconds(now, NO_EXTENSION_RECHECK_MS);
				}
				slot->no_extension = false;
			}
		}
		if (OidIsValid(slot->dboid) && !slot->launched && !slot->paused &&
			(!slot->served || !list_member_oid(dbs, slot->dboid)))
			slot->dboid = InvalidOid;
	}
}

/*
 * Start workers for databases that need one, within spindle.max_workers,
 * and ask one to yield if others wait.  Caller holds the lock exclusively.
 */
static void
start_workers(BackgroundWorkerHandle **handles, List *dbs, TimestampTz now)
{
	LauncherDb **waiting = palloc(sizeof(LauncherDb *) * Max(list_length(dbs), 1));
	int			nwaiting = 0;
	int			running = 0;
	bool		starved = false;
	ListCell   *lc;
	int			i;

	for (i = 0; i < NSLOTS; i++)
		if (wshared->slots[i].launched)
			running++;

	foreach(lc, dbs)
	{
		LauncherDb *db = launcher_db(lfirst_oid(lc));
		WorkerSlot *slot = find_slot(db->dboid);

		if (slot != NULL && (slot->launched || slot->paused))
			continue;
		if (db->no_extension && now < db->retry_after)
			continue;
		waiting[nwaiting++] = db;
	}
	qsort(waiting, nwaiting, sizeof(LauncherDb *), cmp_last_start);

	for (i = 0; i < nwaiting; i++)
	{
		LauncherDb *db = waiting[i];
		WorkerSlot *slot;
		int			slotno;

		if (running >= spindle_max_workers)
		{
			starved = true;
			break;
		}
		slot = find_slot(db->dboid);
		if (slot == NULL)
		{
			slot = take_slot(db->dboid);
			if (slot == NULL)
			{
				starved = true;
				break;
			}
		}
		if (slot->fresh)
			copy_to_slot(db, slot);
		slotno = slot - wshared->slots;
		slot->no_extension = false;
		slot->yield = false;
		strlcpy(slot->state, "starting", sizeof(slot->state));
		if (!start_worker(slotno, db->dboid, &handles[slotno]))
		{
			/* max_worker_processes is busy: try again next round */
			handles[slotno] = NULL;
			break;
		}
		slot->launched = true;
		db->last_start = now;
		db->started_round = launcher_round;
		running++;
	}
	pfree(waiting);

	/*
	 * More databases than workers: ask the served worker that started
	 * longest ago to yield after its round, one at a time.  Not while a
	 * worker is still looking for the extension: such a probe ends by
	 * itself and frees its place for the next waiting database.
	 */
	if (starved)
	{
		WorkerSlot *oldest = NULL;
		TimestampTz oldest_start = 0;

		for (i = 0; i < NSLOTS; i++)
		{
			WorkerSlot *slot = &wshared->slots[i];
			LauncherDb *db;

			if (!slot->launched)
				continue;
			if (slot->yield || !slot->served)
			{
				oldest = NULL;
				break;
			}
			db = launcher_db(slot->dboid);
			if (oldest == NULL || db->last_start < oldest_start)
			{
				oldest = slot;
				oldest_start = db->last_start;
			}
		}
		if (oldest != NULL)
			oldest->yield = true;
	}
}

/* Forget databases that are gone. */
static void
forget_dropped_databases(void)
{
	HASH_SEQ_STATUS seq;
	LauncherDb *db;

	hash_seq_init(&seq, launcher_dbs);
	while ((db = hash_seq_search(&seq)) != NULL)
		if (db->seen_round != launcher_round)
			hash_search(launcher_dbs, &db->dboid, HASH_REMOVE, NULL);
}

/* Called every naptime, and whenever a worker starts or stops. */
static void
launch_workers(BackgroundWorkerHandle **handles)
{
	List	   *dbs = connectable_databases();
	TimestampTz now = GetCurrentTimestamp();
	ListCell   *lc;

	launcher_round++;
	foreach(lc, dbs)
		launcher_db(lfirst_oid(lc))->seen_round = launcher_round;

	LWLockAcquire(wshared->lock, LW_EXCLUSIVE);
	reap_workers(handles, dbs, now);
	if (spindle_enable_worker)
		start_workers(handles, dbs, now);
	LWLockRelease(wshared->lock);

	forget_dropped_databases();
	list_free(dbs);
}

PGDLLEXPORT void spindle_launcher_main(Datum main_arg);

void
spindle_launcher_main(Datum main_arg)
{
	BackgroundWorkerHandle **handles;
	HASHCTL		ctl;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("spindle launcher");

	handles = MemoryContextAllocZero(TopMemoryContext,
									 sizeof(BackgroundWorkerHandle *) * NSLOTS);
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(LauncherDb);
	launcher_dbs = hash_create("spindle launcher databases", 64, &ctl,
							   HASH_ELEM | HASH_BLOBS);
	LWLockAcquire(wshared->lock, LW_EXCLUSIVE);
	wshared->launcher_pgprocno = MyProc->pgprocno;
	LWLockRelease(wshared->lock);

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		/* free space for the disk alarm (table/disk_alarm.c) */
		spindle_disk_alarm_measure();
		launch_workers(handles);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 spindle_naptime, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/* Register the launcher; called from _PG_init while preloading. */
void
spindle_worker_register(void)
{
	BackgroundWorker bgw;

	memset(&bgw, 0, sizeof(bgw));
	bgw.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw.bgw_start_time = BgWorkerStart_RecoveryFinished;
	bgw.bgw_restart_time = 5;
	snprintf(bgw.bgw_library_name, BGW_MAXLEN, "spindle");
	snprintf(bgw.bgw_function_name, BGW_MAXLEN, "spindle_launcher_main");
	snprintf(bgw.bgw_name, BGW_MAXLEN, "spindle launcher");
	snprintf(bgw.bgw_type, BGW_MAXLEN, "spindle launcher");
	RegisterBackgroundWorker(&bgw);
}

/*
 * spindle._worker_info(): one row per database that has a slot and where a
 * worker found the extension (served now, waiting its turn, or paused).
 */
Datum
spindle_worker_info(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	if (wshared == NULL)
		return (Datum) 0;
	LWLockAcquire(wshared->lock, LW_SHARED);
	for (i = 0; i < NSLOTS; i++)
	{
		WorkerSlot *slot = &wshared->slots[i];
		Datum		values[10];
		bool		nulls[10] = {0};

		if (!OidIsValid(slot->dboid) || !slot->served)
			continue;
		if (slot->pid != 0)
			values[0] = Int32GetDatum(slot->pid);
		else
			nulls[0] = true;
		values[1] = ObjectIdGetDatum(slot->dboid);
		values[2] = CStringGetTextDatum(slot->paused ? "paused" : slot->state);
		if (slot->last_run != 0)
			values[3] = TimestampTzGetDatum(slot->last_run);
		else
			nulls[3] = true;
		values[4] = Int64GetDatum(slot->spindles_dropped);
		values[5] = Int64GetDatum(slot->bytes_freed);
		if (slot->last_error[0] != '\0')
			values[6] = CStringGetTextDatum(slot->last_error);
		else
			nulls[6] = true;
		values[7] = Int64GetDatum(slot->compacted.moved);
		values[8] = Int64GetDatum(slot->compacted.emptied);
		values[9] = Int64GetDatum(slot->compacted.skipped);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(wshared->lock);
	return (Datum) 0;
}
