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
 * threshold is above 0, the queue's state is loaded and valid (never
 * after a restart before a consumer call rebuilt it: CRIT-5), S is full
 * (an event spindle with a recorded fill time: never the open, a ready or
 * a pending one; an annex whose slots are all handed out), and its live
 * events by the committed counters (appended minus purged, counters.c: no
 * page read) are more than none and at most the threshold of its
 * capacity.  Annexes of generation g go to g + 1 (the last generation
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
 * (spindle_relocator_begin).  When nothing qualifies it costs a look at
 * the counters of each full spindle (a shared LWLock each) and no page.
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

#include "queue/spindle_queue.h"

PG_FUNCTION_INFO_V1(spindle_compact_sql);

/* GUC spindle.compaction_threshold: 0 turns compaction off */
double		spindle_compaction_threshold = 0.25;

/* spindles whose counters one pass builds from disk, at most */
#define COMPACT_BUILDS_PER_PASS 4

/* Is the queue's state loaded and valid (its head found)? */
static bool
state_valid(Oid relid)
{
	QueueState *qs = spindle_queue_state(relid);
	bool		valid;

	if (qs == NULL)
		return false;
	LWLockAcquire(spindle_queue_lock(qs), LW_SHARED);
	valid = qs->relid == relid && qs->dbid == MyDatabaseId && qs->valid;
	LWLockRelease(spindle_queue_lock(qs));
	return valid;
}

/*
 * Is entry i of dir (a spindle or an annex) full, with live events but at
 * most threshold of its capacity, by its committed counters?  A counter
 * missing is built from disk while *builds lasts (then one less).
 */
static bool
is_candidate(Oid relid, SpindleDirectory *dir, int i, double threshold,
			 int *builds)
{
	SpindleEntry *sp = spindle_dir_entry(dir, i);
	SpindleCountersInfo info;
	int64		appended;
	int64		live;

	if (sp->capacity == 0)
		return false;			/* a single spindle, never dropped */
	if (!spindle_is_annex(sp) && sp->filled_at == 0)
		return false;			/* open, ready, pending or not known full */
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
	return live > 0 && (double) live <= threshold * (double) sp->capacity;
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
 * Empty candidate sp into annexes, up to *budget events: false (nothing
 * moved) if a live copy is not parked.  Forgets its events in the event
 * cache first.
 */
static bool
compact_one(SpindleRelocator *r, SpindleEntry *sp, int64 *budget,
			SpindleCompactStats *st)
{
	int			n;
	SpindleLiveCopy *copies = spindle_relocate_scan(r, sp,
												SPINDLE_QUEUE_ATT_MSG_ID, &n);
	SpindleMoveStats ms = {0};
	int64	   *ids;
	int			todo;

	if (n == 0 || !all_parked(r->facade, copies, n))
	{
		if (copies != NULL)
			pfree(copies);
		return false;
	}
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
	*budget -= todo;
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
 * adding what it did to *st.  Returns true if it stopped at max_events
 * (more may be left for another pass).  Gives up, doing nothing, when
 * compaction is off, the table is no queue table, its state is not
 * valid, or a lock is not free.
 */
bool
spindle_compact_table(Oid relid, int64 max_events, SpindleCompactStats *st)
{
	double		threshold = spindle_compaction_threshold;
	SpindleRelocator r;
	SpindleDirectory *dir;
	Relation	facade;
	int			builds = COMPACT_BUILDS_PER_PASS;
	int			ncand = 0;
	int		   *cand;
	int64		budget = max_events;

	if (threshold <= 0 || max_events <= 0 || RecoveryInProgress() ||
		!OidIsValid(spindle_consumer_rel_oid(relid)) || !state_valid(relid))
		return false;
	/* the cheap look first, under the caller's lock on the table */
	facade = try_table_open(relid, AccessShareLock);
	if (facade == NULL)
		return false;
	if (!spindle_is_facade(facade))
	{
		table_close(facade, AccessShareLock);
		return false;
	}
	dir = spindle_directory_acquire(facade);
	cand = palloc(sizeof(int) * Max(spindle_dir_nall(dir), 1));
	for (int i = 0; i < spindle_dir_nall(dir); i++)
		if (is_candidate(relid, dir, i, threshold, &builds))
			cand[ncand++] = i;
	if (ncand > 0 && spindle_relocator_begin(relid, &r))
	{
		for (int c = 0; c < ncand && budget > 0; c++)
		{
			SpindleEntry sp = *spindle_dir_entry(dir, cand[c]);

			CHECK_FOR_INTERRUPTS();
			if (compact_one(&r, &sp, &budget, st))
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
 * SPINDLE_COMPACT_EVENTS_PER_PASS events), as the worker makes it;
 * superusers only (a test stand-in for the worker).
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
	(void) spindle_compact_table(relid, SPINDLE_COMPACT_EVENTS_PER_PASS, &st);
	values[0] = Int64GetDatum(st.moved);
	values[1] = Int64GetDatum(st.skipped);
	values[2] = Int64GetDatum(st.spindles);
	values[3] = Int64GetDatum(st.emptied);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(td),
													  values, nulls)));
}
