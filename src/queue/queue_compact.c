/*-------------------------------------------------------------------------
 *
 * queue_compact.c
 *	  Compaction of sparse spindles: which spindles of a queue table the
 *	  worker's relocator empties into annexes, and the test-only
 *	  spindle._compact(rel) that runs one pass (docs/design.md "Compaction
 *	  of sparse spindles", sections 1 and 3).  The moves themselves are the
 *	  table layer's (table/relocate.c).
 *
 * A spindle S of a queue table is a candidate when spindle.compaction_
 * threshold is above 0 (it is at most 0.5: bytes copied at most bytes
 * freed), the queue's state is loaded and valid (never after a restart
 * before a consumer call rebuilt it: CRIT-5), the disk alarm is not on
 * for the table (the relocator writes annexes; it waits like producers),
 * S is full (an event spindle with a recorded fill time: never the open,
 * a ready or a pending one; an annex whose slots are all handed out), and
 * its live events by the committed counters (appended minus purged,
 * counters.c: no page read) are more than none and at most the threshold
 * of its capacity, with at least one purged (else a move frees nothing).
 * Annexes of generation g go to g + 1 (the last generation
 * into itself) by the same rule.  A candidate is then read
 * (spindle_relocate_scan: no hint bit set, no page dirtied) and emptied
 * only if every live copy is parked on disk in tree 0 as DELAYED, LEASED
 * or READY (queue_parked.c): those are the events that stay, and the
 * ones in shared-memory items only (claims, pending) are soon consumed
 * or examined again, so S waits for a later round.  Its events are first
 * forgotten by the event cache, then moved in batches
 * (spindle_relocate_batch).
 *
 * A pass moves at most max_events events and gives up at once if another
 * relocator, DDL or VACUUM's freeze holds a lock it needs
 * (spindle_relocator_begin).  A cancel, a timeout or a shutdown in a
 * move ends the pass with its error (relocate.c).
 *
 * The back-off memory (the worker's passes only; backend-local, at most
 * COMPACT_BACKOFF_MAX spindles): a candidate read and found with no
 * movable copy or one not parked is remembered with its purged count and
 * skipped until that count changes (or COMPACT_BACKOFF_MS passed); one
 * whose move failed, or whose pass an error stopped, is skipped for
 * COMPACT_BACKOFF_MS.  So when nothing qualifies, or only spindles looked
 * at already, a pass costs a look at the counters of each full spindle (a
 * shared LWLock each) and no page; and one poisoned event costs one
 * failure per COMPACT_BACKOFF_MS, not one per round.  spindle._compact
 * neither reads nor fills it.
 *
 * Not compacted: plain spindle tables (design, section 8).
 *
 * Locks: the relocator's (relocate.c), to the end of the caller's
 * transaction; the queue state's LWLock for a moment; tree 0 as a reader.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "queue/spindle_queue.h"

PG_FUNCTION_INFO_V1(spindle_compact_sql);

/* GUC spindle.compaction_threshold: 0 turns compaction off */
double		spindle_compaction_threshold = 0.25;

/* spindles whose counters one pass builds from disk, at most */
#define COMPACT_BUILDS_PER_PASS 4

/* ----------------------------------------------------------------
 * The back-off memory (review rv1, F1 and F2)
 * ----------------------------------------------------------------
 */

/* how long a spindle is left alone, at most */
#define COMPACT_BACKOFF_MS (60 * 1000)
/* spindles remembered, at most (backend-local) */
#define COMPACT_BACKOFF_MAX 1024

typedef struct CompactBackoffKey
{
	Oid			relid;
	int64		spindle_no;
} CompactBackoffKey;

typedef struct CompactBackoff
{
	CompactBackoffKey key;		/* hash key */
	int64		purged;			/* the counters' purged count then */
	bool		failed;			/* a move failed or the pass was stopped */
	TimestampTz until;
} CompactBackoff;

static HTAB *compact_backoff = NULL;

/*
 * Is spindle_no of relid to be left alone by this pass: remembered less
 * than COMPACT_BACKOFF_MS ago, and, unless a move of it failed, with the
 * same purged count (purged is the count now)?  An entry that ran out is
 * forgotten.
 */
static bool
backed_off(Oid relid, int64 spindle_no, int64 purged)
{
	CompactBackoffKey key;
	CompactBackoff *e;

	if (compact_backoff == NULL)
		return false;
	memset(&key, 0, sizeof(key));
	key.relid = relid;
	key.spindle_no = spindle_no;
	e = hash_search(compact_backoff, &key, HASH_FIND, NULL);
	if (e == NULL)
		return false;
	if (GetCurrentTimestamp() < e->until && (e->failed || e->purged == purged))
		return true;
	(void) hash_search(compact_backoff, &key, HASH_REMOVE, NULL);
	return false;
}

/* Forget the entries that ran out (the memory is full). */
static void
sweep_backoff(void)
{
	TimestampTz now = GetCurrentTimestamp();
	HASH_SEQ_STATUS seq;
	CompactBackoff *e;

	hash_seq_init(&seq, compact_backoff);
	while ((e = hash_seq_search(&seq)) != NULL)
		if (e->until <= now)
			(void) hash_search(compact_backoff, &e->key, HASH_REMOVE, NULL);
}

/*
 * Remember spindle_no of relid (purged events by its counters): leave it
 * alone for COMPACT_BACKOFF_MS, or, if not failed, until its purged count
 * changes.  With the memory full of live entries, nothing is remembered
 * (the worker's per-table back-off still bounds the cost).
 */
static void
remember(Oid relid, int64 spindle_no, int64 purged, bool failed)
{
	CompactBackoffKey key;
	CompactBackoff *e;

	if (compact_backoff == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(CompactBackoffKey);
		ctl.entrysize = sizeof(CompactBackoff);
		ctl.hcxt = TopMemoryContext;
		compact_backoff = hash_create("spindle compaction back-off", 64, &ctl,
									  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	if (hash_get_num_entries(compact_backoff) >= COMPACT_BACKOFF_MAX)
		sweep_backoff();
	memset(&key, 0, sizeof(key));
	key.relid = relid;
	key.spindle_no = spindle_no;
	e = hash_search(compact_backoff, &key, HASH_FIND, NULL);
	if (e == NULL)
	{
		if (hash_get_num_entries(compact_backoff) >= COMPACT_BACKOFF_MAX)
			return;
		e = hash_search(compact_backoff, &key, HASH_ENTER, NULL);
	}
	e->purged = purged;
	e->failed = failed;
	e->until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										   COMPACT_BACKOFF_MS);
}

/* Forget spindle_no of relid (its moves went through). */
static void
forget(Oid relid, int64 spindle_no)
{
	CompactBackoffKey key;

	if (compact_backoff == NULL)
		return;
	memset(&key, 0, sizeof(key));
	key.relid = relid;
	key.spindle_no = spindle_no;
	(void) hash_search(compact_backoff, &key, HASH_REMOVE, NULL);
}

/* A candidate of a pass: its directory index and purged count. */
typedef struct Candidate
{
	int			index;
	int64		purged;
} Candidate;

/* Is the queue's state loaded and valid (its head found)? */
static bool
state_valid(Oid relid, int64 *head)
{
	QueueState *qs = spindle_queue_state(relid);
	bool		valid;

	if (qs == NULL)
		return false;
	LWLockAcquire(spindle_queue_lock(qs), LW_SHARED);
	valid = qs->relid == relid && qs->dbid == MyDatabaseId && qs->valid;
	*head = qs->head;
	LWLockRelease(spindle_queue_lock(qs));
	return valid;
}

/*
 * Is entry i of dir (a spindle or an annex) full, with live events but at
 * most threshold of its capacity and at least one purged event, by its
 * committed counters?  An event spindle must also lie wholly behind the
 * queue's head: one the head is still in is being consumed, its live
 * events are not stragglers yet (and reading it every round, as its
 * purged count moves, would cost the consumers).  Its purged count goes
 * to *purged.  A counter missing is built from disk while *builds lasts
 * (then one less).
 */
static bool
is_candidate(Oid relid, SpindleDirectory *dir, int i, double threshold,
			 int64 head, int *builds, int64 *purged)
{
	SpindleEntry *sp = spindle_dir_entry(dir, i);
	SpindleCountersInfo info;
	int64		appended;
	int64		live;

	if (sp->capacity == 0)
		return false;			/* a single spindle, never dropped */
	if (!spindle_is_annex(sp) &&
		(sp->filled_at == 0 ||
		 sp->first_no + spindle_effective_capacity(sp) > head))
		return false;			/* not known full, or the head is in it */
	if (!spindle_counters_get(relid, sp, &info))
	{
		if (*builds <= 0)
			return false;
		(*builds)--;
		if (!spindle_counters_build(relid, sp, NULL) ||
			!spindle_counters_get(relid, sp, &info))
			return false;
	}
	if (info.stale || info.inexact)
		return false;
	appended = info.appended >= 0 ? info.appended : sp->capacity;
	if (spindle_is_annex(sp) && appended < sp->capacity && !info.full)
		return false;			/* an open annex */
	live = appended - info.purged;
	*purged = info.purged;
	/* nothing purged, nothing freed: the same events moved round after round */
	return live > 0 && info.purged > 0 &&
		(double) live <= threshold * (double) sp->capacity;
}

/*
 * Are copies[0..n) all parked on disk in tree 0 as DELAYED, LEASED or
 * READY runs (and none busy)?  One lookup per run met.
 */
static bool
all_parked(Relation facade, const SpindleLiveCopy *copies, int n)
{
	ParkedRun	run;
	bool		have = false;

	for (int i = 0; i < n; i++)
	{
		int64		id = copies[i].msg_id;

		if (copies[i].busy)
			return false;
		if (have && id >= run.start && id < run.end)
			continue;
		if (!spindle_park_find(facade, id, &run))
			return false;
		have = true;
		if (run.kind != SPINDLE_RUN_DELAYED &&
			run.kind != SPINDLE_RUN_LEASED &&
			run.kind != SPINDLE_RUN_READY)
			return false;
	}
	return true;
}

/*
 * Park again, READY and due now, those of copies[0..n) no parked run
 * holds any more: a consumer took their run while they were being moved
 * (all_parked looked before the moves).  Once its spindle is gone, a
 * moved event is reached only through tree 0, so it must stay parked
 * until it is consumed (queue_parked.c, take_batch): otherwise a taker
 * that rolled back would leave it in shared memory only, and a restart or
 * an eviction would lose it.  A run parked for an event consumed
 * meanwhile is found gone and cut; one an item still holds waits for it
 * (P3).  Pins the queue's state; no LWLock or buffer lock held.
 */
static void
keep_parked(Relation facade, const SpindleLiveCopy *copies, int n)
{
	ParkedRun  *runs = palloc(sizeof(ParkedRun) * Max(n, 1));
	TimestampTz now = GetCurrentTimestamp();
	QueueState *qs;
	int			m = 0;

	for (int i = 0; i < n; i++)
	{
		ParkedRun	run;

		if (spindle_park_find(facade, copies[i].msg_id, &run))
			continue;
		runs[m].start = copies[i].msg_id;
		runs[m].end = copies[i].msg_id + 1;
		runs[m].due = now;
		runs[m].read_count = 0;
		runs[m].kind = SPINDLE_RUN_READY;
		runs[m].xid = InvalidTransactionId;
		m++;
	}
	if (m > 0)
	{
		qs = spindle_queue_state_pin(RelationGetRelid(facade));
		spindle_park_runs(facade, qs, runs, m);
		spindle_queue_state_unpin(qs);
	}
	pfree(runs);
}

/*
 * Empty candidate sp (purged events by its counters) into annexes, up to
 * *budget events: false (nothing moved) if a live copy is not parked.
 * Forgets its events in the event cache first.  With backoff, a spindle
 * found with no movable copy or one not parked is remembered until its
 * purged count changes (so that it is not read again every round), and
 * one whose moves fail, or are stopped by an error (a cancel, a timeout)
 * that propagates from here, is remembered for COMPACT_BACKOFF_MS.
 */
static bool
compact_one(SpindleRelocator *r, SpindleEntry *sp, int64 purged,
			bool backoff, int64 *budget, SpindleCompactStats *st)
{
	Oid			relid = RelationGetRelid(r->facade);
	int			n;
	SpindleLiveCopy *copies = spindle_relocate_scan(r, sp,
												SPINDLE_QUEUE_ATT_MSG_ID, &n);
	SpindleMoveStats ms = {0};
	int64	   *ids;
	int			todo;

	if (n == 0 || !all_parked(r->facade, copies, n))
	{
		if (backoff)
			remember(relid, sp->spindle_no, purged, false);
		if (copies != NULL)
			pfree(copies);
		return false;
	}
	/* failed unless the moves below get through (an error propagates) */
	if (backoff)
		remember(relid, sp->spindle_no, purged, true);
	todo = (int) Min((int64) n, *budget);
	ids = palloc(sizeof(int64) * todo);
	for (int i = 0; i < todo; i++)
		ids[i] = copies[i].msg_id;
	spindle_cache_forget(spindle_cache_find(RelationGetRelid(r->facade)),
						 RelationGetRelid(r->facade), ids, todo);
	pfree(ids);
	for (int i = 0; i < todo; i += SPINDLE_RELOCATE_BATCH)
		spindle_relocate_batch(r, sp, &copies[i],
							   Min(todo - i, SPINDLE_RELOCATE_BATCH), &ms);
	keep_parked(r->facade, copies, todo);
	*budget -= todo;
	if (backoff && ms.failed == 0)
		forget(relid, sp->spindle_no);
	st->moved += ms.moved;
	st->skipped += ms.failed;
	if (todo == n && ms.moved + ms.not_moved == n && ms.failed == 0)
		st->emptied++;
	pfree(copies);
	return true;
}

/*
 * One relocator pass over queue table relid, in the caller's transaction
 * (which must have an active snapshot): moves the live events of its
 * candidate spindles and annexes (see the header), at most max_events,
 * adding what it did to *st.  With backoff (the worker), spindles this
 * backend remembers are skipped and what the pass finds is remembered.
 * Returns true if it stopped at max_events (more may be left for another
 * pass).  Gives up, doing nothing, when compaction is off, the table is
 * no queue table, its state is not valid, the disk alarm is on for it, or
 * a lock is not free.  A cancel, a timeout or a shutdown in a move
 * propagates (relocate.c).
 */
bool
spindle_compact_table(Oid relid, int64 max_events, bool backoff,
					  SpindleCompactStats *st)
{
	double		threshold = spindle_compaction_threshold;
	SpindleRelocator r;
	SpindleDirectory *dir;
	Relation	facade;
	int			builds = COMPACT_BUILDS_PER_PASS;
	int			ncand = 0;
	Candidate  *cand;
	int64		budget = max_events;
	int64		head;

	if (threshold <= 0 || max_events <= 0 || RecoveryInProgress() ||
		!OidIsValid(spindle_consumer_rel_oid(relid)) ||
		!state_valid(relid, &head))
		return false;
	/* the cheap look first, under the caller's lock on the table */
	facade = try_table_open(relid, AccessShareLock);
	if (facade == NULL)
		return false;
	/* annex copies and annexes wait while producers are refused */
	if (!spindle_is_facade(facade) || spindle_disk_alarm_low(facade))
	{
		table_close(facade, AccessShareLock);
		return false;
	}
	dir = spindle_directory_acquire(facade);
	cand = palloc(sizeof(Candidate) * Max(spindle_dir_nall(dir), 1));
	for (int i = 0; i < spindle_dir_nall(dir); i++)
	{
		int64		purged;

		if (is_candidate(relid, dir, i, threshold, head, &builds, &purged) &&
			!(backoff && backed_off(relid, spindle_dir_entry(dir, i)->spindle_no,
									purged)))
		{
			cand[ncand].index = i;
			cand[ncand++].purged = purged;
		}
	}
	if (ncand > 0 && spindle_relocator_begin(relid, &r))
	{
		for (int c = 0; c < ncand && budget > 0; c++)
		{
			SpindleEntry sp = *spindle_dir_entry(dir, cand[c].index);

			CHECK_FOR_INTERRUPTS();
			if (compact_one(&r, &sp, cand[c].purged, backoff, &budget, st))
				st->spindles++;
		}
		spindle_relocator_end(&r);
	}
	spindle_directory_release(dir);
	pfree(cand);
	table_close(facade, NoLock);
	return budget <= 0;
}

/*
 * spindle._compact(rel regclass, OUT moved bigint, OUT skipped bigint,
 * OUT spindles bigint, OUT emptied bigint): one relocator pass over the
 * queue table in the caller's transaction (at most
 * SPINDLE_COMPACT_EVENTS_PER_PASS events), as the worker makes it but
 * without the back-off memory; superusers only (a test stand-in for the
 * worker).  The caller's statement_timeout and cancel end it with an
 * error.
 */
Datum
spindle_compact_sql(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	SpindleCompactStats st = {0};
	TupleDesc	td;
	Datum		values[4];
	bool		nulls[4] = {0};

	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("only superusers may call spindle._compact")));
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot call spindle._compact during recovery")));
	PreventCommandIfReadOnly("spindle._compact()");
	if (get_call_result_type(fcinfo, NULL, &td) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	(void) spindle_compact_table(relid, SPINDLE_COMPACT_EVENTS_PER_PASS, false,
								 &st);
	values[0] = Int64GetDatum(st.moved);
	values[1] = Int64GetDatum(st.skipped);
	values[2] = Int64GetDatum(st.spindles);
	values[3] = Int64GetDatum(st.emptied);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(td),
													  values, nulls)));
}
