/*-------------------------------------------------------------------------
 *
 * queue_parked.c
 *	  Consumer state parked on disk: the runs of events a consumer found
 *	  not due yet (DELAYED), the leases read() grants (LEASED), runs pending
 *	  on open producers beyond what a state keeps in memory (PENDING), and
 *	  runs taken back to be examined again (READY) live in the queue's
 *	  consumer relation (pg_spindle.c<oid>, storage/consumer_rel.c), not in
 *	  shared memory, so that a queue holds any number of them, at a flat
 *	  cost per call, and leases and read counts outlive a crash.
 *
 * Two trees of the consumer relation (storage/consumer_tree.c) hold them:
 *
 *	tree 0 (PARK_TREE_RUNS)	the parked runs, keyed by first msg_id: kind,
 *							due, read_count, and for PENDING the awaited
 *							xid (DELAYED: how much earlier than due the
 *							run's first event is due).  The truth.
 *	tree 1 (PARK_TREE_DUE)	references, keyed by due time: the due in
 *							microseconds shifted left by DUE_KEY_SHIFT, plus
 *							a probe that keeps keys unique (a reference is
 *							a run of one key); the referenced run's first
 *							msg_id is in the item's `due` field.
 *
 * A consumer call parks runs (spindle_park_runs: a reference into tree 1,
 * then an upsert into tree 0) and keeps nothing of them in shared memory.
 * A call that finds the queue's earliest due time passed takes the
 * references below now, in due order (spindle_park_take_due), and looks
 * each run up: a DELAYED or PENDING run (its producer ended) is cut; a
 * LEASED or READY one stays parked as READY for PARK_RETRY, so that its
 * read count outlives a crash before it is leased again (which replaces
 * it) or found gone or purged (which cuts it, spindle_park_forget); a
 * PENDING run whose producer still runs is parked again a second later
 * (a consumer's spilled run, later and later: pending_wait).
 * The runs taken go back to queue.c, which makes them items to examine
 * again (RETURNED).  A reference is only a hint: one whose run is gone,
 * or was parked again with another due, is dropped when taken.  A state
 * loaded afresh makes the READY runs an earlier state took due at once
 * (ready_now): no item holds them any more.  Leases a
 * failed statement handed back (items in shared memory at once) are made
 * READY and due now on disk by their backend's next safe point
 * (spindle_park_hand_back), if still parked as that lease.
 *
 * The state (QueueState, queue_state.c) caches, for the waits and the
 * fast path of every call, the earliest due of a reference (park_due),
 * the key below which every reference is taken (park_from, where the next
 * search starts, so that leaves emptied by earlier takes are not walked
 * again) and the end of the last parked run (park_end).  A state loaded
 * afresh learns them from the trees.
 *
 * Crash and rebuild.  Every change is WAL-logged by the tree; a crash
 * loses only the shared memory.  A state rebuilt from disk skips, at its
 * head, the ids parked runs hold, and takes those runs when due once its
 * head has passed them.
 *
 * Locks.  Every change to either tree, and every change to the state's
 * park_due and park_from, is made under the writer lock of tree 0
 * (LockPage on the consumer relation, block PARK_TREE_RUNS,
 * ExclusiveLock), which serves both trees; it is taken with no LWLock or
 * buffer lock held, and the state's LWLock is taken inside it, briefly,
 * for the cache and to look at its items.  The consumer relation is
 * opened RowExclusiveLock after the queue table (the order of TRUNCATE
 * and DROP) and its lock is let go at the end of each operation, so that
 * a long poll holds no lock on it.  Readers (lookups, the view's counts)
 * take no heavyweight lock but the relation's.
 *
 * Invariants: (P1) every run of tree 0 has a reference in tree 1: a
 * reference is written before its run and removed after it, and a cut or
 * replacement of part of a run gives the run's tail a reference first
 * (ref_tail), so a crash leaves at most a reference to nothing; that is
 * what lets a rebuilt head skip parked runs.  (P2) Every reference below
 * the state's park_from is taken: each operation lowers it to the
 * references it added (park_close).  (P3) A run whose ids a shared-memory
 * item holds is not taken while it does (postponed a second): the item
 * decides, so a run parked by a call that has not let its claims go yet,
 * or a lease handed back, never makes an event delivered twice or lost.
 * An ack of a parked lease purges the event and leaves the lease parked
 * until its transaction commits, which cuts it and its reference: an ack
 * that rolls back leaves it leased, and a lease that ends while the ack
 * runs finds the event pending on the ack's xmax.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/procarray.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "queue/spindle_queue.h"

/* the trees of a queue's consumer relation that hold its parked runs */
#define PARK_TREE_RUNS	0
#define PARK_TREE_DUE	1

/*
 * A due time becomes a key of tree 1 shifted left by this many bits: the
 * low bits are probes that keep the keys of equal due times apart.  Due
 * times are clamped to [0, 2^53) microseconds (the year 2285), so that
 * keys and their probes fit in an int64.
 */
#define DUE_KEY_SHIFT	9
#define DUE_MAX			((INT64CONST(1) << 53) - 1)

/* The first key of tree 1 for due. */
static inline int64
due_key(TimestampTz due)
{
	return Min(Max(due, 0), DUE_MAX) << DUE_KEY_SHIFT;
}

/* The due time a key of tree 1 stands for (never earlier than its run's). */
static inline TimestampTz
key_due(int64 key)
{
	return key >> DUE_KEY_SHIFT;
}

/*
 * The consumer relation of queue table relid (InvalidOid: none), looked
 * up by name once and remembered for the last few tables: every consumer
 * call opens it.  A remembered OID is checked against the relation's name
 * when opened (crel_check), so a table dropped and its OID reused later
 * is looked up again.
 */
#define CREL_CACHE	8

static struct
{
	Oid			relid;
	Oid			croid;
}			crel_cache[CREL_CACHE];
static int	crel_cache_next = 0;

static Oid
crel_oid(Oid relid)
{
	int			i;
	Oid			croid;

	for (i = 0; i < CREL_CACHE; i++)
		if (crel_cache[i].relid == relid && OidIsValid(relid))
			return crel_cache[i].croid;
	croid = spindle_consumer_rel_oid(relid);
	if (OidIsValid(croid))
	{
		crel_cache[crel_cache_next].relid = relid;
		crel_cache[crel_cache_next].croid = croid;
		crel_cache_next = (crel_cache_next + 1) % CREL_CACHE;
	}
	return croid;
}

/*
 * Open the consumer relation croid of queue table relid in lockmode, or
 * NULL if it is gone; one whose name is not c<relid> (the remembered OID
 * went to another relation) is forgotten, and the lookup done again.
 */
static Relation
crel_open(Oid relid, Oid croid, LOCKMODE lockmode)
{
	Relation	crel = try_relation_open(croid, lockmode);
	char		name[NAMEDATALEN];
	int			i;

	snprintf(name, sizeof(name), "c%u", relid);
	if (crel != NULL && strcmp(RelationGetRelationName(crel), name) == 0)
		return crel;
	if (crel != NULL)
		relation_close(crel, lockmode);
	for (i = 0; i < CREL_CACHE; i++)
		if (crel_cache[i].relid == relid)
			crel_cache[i].relid = InvalidOid;
	croid = spindle_consumer_rel_oid(relid);
	return OidIsValid(croid) ? try_relation_open(croid, lockmode) : NULL;
}

/*
 * How long a run taken back to be examined stays parked before it is
 * taken again if nothing settled it (a consumer that died; after a
 * restart or a crash, a state loaded afresh takes it at once: ready_now).
 */
#define PARK_RETRY		(30 * USECS_PER_SEC)

/*
 * A PENDING run that a consumer spilled (spindle_park_spilled) carries
 * these in its flags: the mark, and how many times it was parked again
 * while its transaction ran.  Its transaction's commit consumes its
 * events for good, so nobody needs it back soon; only a rollback would
 * deliver them again.  It is looked at again after 1, 2, 4, then every 8
 * seconds, instead of every second (review rv7: each consumer call
 * parked every spilled run that came due again, 238 bytes of WAL a run
 * a second, 2.4 MB/s for 9 945 runs, while the spilling transaction
 * stayed open).  A producer's PENDING run keeps looking every second:
 * its commit delivers its events.
 */
#define PARK_SPILLED			0x0001
#define PARK_BACKOFF_SHIFT		8
#define PARK_BACKOFF_MASK		0x0F00
#define PARK_BACKOFF_MAX		3	/* 2^3 = 8 seconds */

static void park_runs(Relation facade, QueueState *qs,
					  const ParkedRun *runs, int n, uint16 flags);

/* The parked trees of facade's consumer relation, opened and locked. */
typedef struct Park
{
	Relation	crel;
	SpindleTree runs;
	SpindleTree due;
	QueueState *qs;				/* the queue's state, or NULL */
	int64		min_added;		/* lowest reference key added or kept (P2) */
	int			moves;			/* tree 4: -1 not looked at, 0 none, 1 there */
} Park;

/*
 * Open the consumer relation of queue table relid (RowExclusiveLock), take
 * the writer lock of its parked trees and set p up for state qs (pinned,
 * or NULL).  False if the table has no consumer relation (any more), or,
 * with nowait, if either lock is not free at once (a TRUNCATE or DROP
 * under way, another writer).  No LWLock or buffer lock may be held.
 */
static bool
park_try_open(Oid relid, QueueState *qs, Park *p, bool nowait)
{
	Oid			croid = crel_oid(relid);
	Relation	crel;

	if (!OidIsValid(croid))
		return false;
	/* with nowait, hold the lock first: crel_open then takes a second count */
	if (nowait && !ConditionalLockRelationOid(croid, RowExclusiveLock))
		return false;
	crel = crel_open(relid, croid, RowExclusiveLock);
	if (nowait)
		UnlockRelationOid(croid, RowExclusiveLock);
	if (crel == NULL)
		return false;
	if (!nowait)
		LockPage(crel, PARK_TREE_RUNS, ExclusiveLock);
	else if (!ConditionalLockPage(crel, PARK_TREE_RUNS, ExclusiveLock))
	{
		relation_close(crel, RowExclusiveLock);
		return false;
	}
	p->crel = crel;
	spindle_tree_init(&p->runs, crel, PARK_TREE_RUNS, true);
	spindle_tree_init(&p->due, crel, PARK_TREE_DUE, true);
	p->qs = qs;
	p->min_added = PG_INT64_MAX;
	p->moves = -1;
	return true;
}

/* park_try_open for queue table facade, which must have its relation. */
static void
park_open(Relation facade, QueueState *qs, Park *p)
{
	if (!OidIsValid(crel_oid(RelationGetRelid(facade))))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("queue table \"%s\" has no consumer relation",
						RelationGetRelationName(facade)),
				 errhint("Queue tables are made by spindle.create_queue(), which makes their consumer relation in schema %s.",
						 SPINDLE_STORAGE_SCHEMA)));
	if (!park_try_open(RelationGetRelid(facade), qs, p, false))
		elog(ERROR, "spindle: the consumer relation of queue table \"%s\" went away",
			 RelationGetRelationName(facade));
}

/*
 * Lower the state's earliest due and search start to the references this
 * operation added (P2: every reference below park_from is taken), then
 * let go of the writer lock and of the relation's lock.
 */
static void
park_close(Park *p)
{
	QueueState *qs = p->qs;

	if (qs != NULL && p->min_added != PG_INT64_MAX)
	{
		LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
		if (qs->park_known)
		{
			qs->park_from = Min(qs->park_from, p->min_added);
			qs->park_due = Min(qs->park_due, key_due(p->min_added));
		}
		LWLockRelease(spindle_queue_lock(qs));
	}
	UnlockPage(p->crel, PARK_TREE_RUNS, ExclusiveLock);
	relation_close(p->crel, RowExclusiveLock);
}

/*
 * How many references of tree 1 a state loaded afresh looks at for READY
 * runs to make due at once (ready_now): a bound on what loading a state
 * costs when many delayed runs are due within PARK_RETRY.
 */
#define READY_LOOK_MAX	4096

static void add_reference(Park *p, int64 first, TimestampTz due, uint16 kind);

/*
 * A state loaded afresh (writer lock held): the READY runs due within
 * PARK_RETRY, which a state before it took back and made items of, are
 * due now.  No item holds them any more -- a restart or a crash leaves
 * none, and a state is never evicted while an item with a read count
 * exists (a READY run's have one) -- so nobody examines them until they
 * are taken again: without this, up to PARK_RETRY after a crash.  Each
 * becomes due just before now, the time of the take that follows, with a
 * reference of its own (the old one is dropped when taken: its run's due
 * no longer matches); at most READY_LOOK_MAX references are looked at (by
 * their kind, with no lookup but the READY ones').
 */
static void
ready_now(Park *p, TimestampTz now)
{
	SpindleRun	refs[64];
	int64		from = due_key(now);
	int64		limit = due_key(now + PARK_RETRY + USECS_PER_SEC);
	int			looked = 0;

	while (looked < READY_LOOK_MAX)
	{
		int64		next;
		int			n = spindle_tree_pop(&p->due, from, limit, lengthof(refs),
										 refs, &next, false);
		int			i;

		if (n == 0)
			break;
		for (i = 0; i < n; i++)
		{
			SpindleRun	run;

			if (refs[i].kind != SPINDLE_RUN_READY ||
				!spindle_tree_lookup(&p->runs, refs[i].due, &run) ||
				run.first != refs[i].due || run.kind != SPINDLE_RUN_READY ||
				run.due < now)
				continue;
			run.due = now - 1;
			add_reference(p, run.first, run.due, run.kind);
			spindle_tree_upsert(&p->runs, &run);
		}
		looked += n;
		from = refs[n - 1].first + 1;
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * Make the state's cache of tree 1 known (qs pinned, writer lock held):
 * the earliest reference is found from the lowest key on, once the READY
 * runs left by an earlier state are made due (ready_now).
 */
static void
park_learn(QueueState *qs, Park *p, TimestampTz now)
{
	bool		known;
	int64		next;
	SpindleRun	last;
	int64		end = PG_INT64_MIN;

	LWLockAcquire(spindle_queue_lock(qs), LW_SHARED);
	known = qs->park_known;
	LWLockRelease(spindle_queue_lock(qs));
	if (known)
		return;
	ready_now(p, now);
	(void) spindle_tree_pop(&p->due, PG_INT64_MIN, PG_INT64_MIN, 0, NULL,
							&next, false);
	/* the last run: the largest first at or below the largest id */
	memset(&last, 0, sizeof(last));
	(void) spindle_tree_lookup(&p->runs, PG_INT64_MAX - 1, &last);
	if (last.len > 0)
		end = spindle_run_end(&last);
	LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
	qs->park_known = true;
	qs->park_end = end;
	qs->park_due = next == PG_INT64_MAX ? DT_NOEND : key_due(next);
	qs->park_from = next == PG_INT64_MAX ? PG_INT64_MIN : next;
	LWLockRelease(spindle_queue_lock(qs));
}

/*
 * Give the run starting at first a reference in tree 1 at the first free
 * key at or above key: of that key's microsecond (one descent finds the
 * highest key used in it), or of the next one if all of its probes are
 * used (a reference late by a microsecond, never early).
 */
static void
add_reference_at(Park *p, int64 first, int64 key, uint16 kind)
{
	SpindleRun	ref;
	SpindleRun	last;

	for (;;)
	{
		int64		top = key | ((INT64CONST(1) << DUE_KEY_SHIFT) - 1);
		int			idx;
		Buffer		buf = spindle_tree_find_le(&p->due, top,
											   BUFFER_LOCK_SHARE, &idx);

		if (!BufferIsValid(buf))
			break;
		last = spindle_leaf_items(BufferGetPage(buf))[idx];
		UnlockReleaseBuffer(buf);
		if (last.first < key)
			break;				/* the probes of this microsecond are free */
		key = last.first + 1;
		if (key <= top)
			break;
	}
	memset(&ref, 0, sizeof(ref));
	ref.first = key;
	ref.len = 1;
	ref.kind = kind;			/* the run's, for pg_waldump and verify */
	ref.due = first;			/* a reference's due field: its run */
	spindle_tree_upsert(&p->due, &ref);
	p->min_added = Min(p->min_added, key);
}

/* Give the run starting at first, due then, a reference in tree 1. */
static void
add_reference(Park *p, int64 first, TimestampTz due, uint16 kind)
{
	add_reference_at(p, first, due_key(due), kind);
}

/*
 * Remove the reference of the run starting at first, due then (writer
 * lock held), if it is found among the first keys of that due: a run cut
 * whole leaves no reference to wait for its due time in tree 1, so the
 * relation's space follows the parked runs.  A reference not found (a
 * probe far from its due's first key) is dropped when taken, as before.
 */
#define DROP_REF_LOOKS	16
#define DROP_REF_AFTER	(60 * USECS_PER_SEC)

static void
drop_reference(Park *p, int64 first, TimestampTz due)
{
	SpindleRun	refs[DROP_REF_LOOKS];
	int64		next;
	int64		key = due_key(due);
	int			n;
	int			i;

	n = spindle_tree_pop(&p->due, key, PG_INT64_MAX, DROP_REF_LOOKS, refs,
						 &next, false);
	for (i = 0; i < n; i++)
		if (refs[i].due == first)
		{
			int32		maxrc = 0;

			(void) spindle_tree_cut(&p->due, refs[i].first,
									refs[i].first + 1, &maxrc);
			return;
		}
}

/*
 * Ids [.., b) of tree 0 are about to be cut or replaced: a run that holds
 * b and starts before it would keep a tail starting at b with no
 * reference (the one it has names its first id), so give that tail one
 * first (P1).  Writer lock held.
 */
static void
ref_tail(Park *p, int64 b)
{
	SpindleRun	r;

	if (spindle_tree_lookup(&p->runs, b, &r) && r.first < b)
		add_reference(p, b, r.due, r.kind);
}

/*
 * Park one run (writer lock held).  A delayed one is joined to the parked
 * delayed run that ends just before it when both have the same read count and the joined run's
 * due times stay within a second (its `awaited` field keeps how much
 * earlier than its due its earliest event is due), so that events passed
 * one dequeue at a time make one run, not one each.  A run whose due
 * grows gets a new reference (the old one is dropped when taken).
 */
static void
park_one(Park *p, const ParkedRun *pr, uint16 flags)
{
	SpindleRun	run;
	SpindleRun	prev;
	TimestampTz earliest = pr->due;

	memset(&run, 0, sizeof(run));
	run.first = pr->start;
	run.len = (uint32) (pr->end - pr->start);
	run.kind = pr->kind;
	run.due = pr->due;
	run.read_count = pr->read_count;
	if (pr->kind == SPINDLE_RUN_PENDING)
	{
		/* joined to the run of the same transaction just before it */
		run.awaited = pr->xid;
		run.flags = flags;
		if (pr->start > PG_INT64_MIN &&
			spindle_tree_lookup(&p->runs, pr->start - 1, &prev) &&
			spindle_run_end(&prev) == pr->start &&
			prev.kind == SPINDLE_RUN_PENDING && prev.awaited == pr->xid &&
			(prev.flags & PARK_SPILLED) == (flags & PARK_SPILLED) &&
			prev.read_count == pr->read_count &&
			(uint64) prev.len + run.len <= PG_UINT32_MAX)
		{
			run.first = prev.first;
			run.len += prev.len;
			run.due = Max(prev.due, pr->due);
			ref_tail(p, spindle_run_end(&run));
			if (run.due > prev.due)
				add_reference(p, run.first, run.due, run.kind);
			spindle_tree_upsert(&p->runs, &run);
			return;
		}
	}
	else if (pr->kind == SPINDLE_RUN_DELAYED && pr->start > PG_INT64_MIN &&
		spindle_tree_lookup(&p->runs, pr->start - 1, &prev) &&
		spindle_run_end(&prev) == pr->start &&
		prev.kind == SPINDLE_RUN_DELAYED &&
		prev.read_count == pr->read_count &&
		(uint64) prev.len + run.len <= PG_UINT32_MAX)
	{
		TimestampTz prev_earliest = prev.due - (int64) prev.awaited;

		earliest = Min(earliest, prev_earliest);
		if (Max(prev.due, pr->due) - earliest < USECS_PER_SEC)
		{
			run.first = prev.first;
			run.len += prev.len;
			run.due = Max(prev.due, pr->due);
			run.awaited = (uint32) (run.due - earliest);
			/* references first: a crash leaves no run without one */
			ref_tail(p, spindle_run_end(&run));
			if (run.due > prev.due)
				add_reference(p, run.first, run.due, run.kind);
			spindle_tree_upsert(&p->runs, &run);
			return;
		}
		earliest = pr->due;
	}
	ref_tail(p, spindle_run_end(&run));
	add_reference(p, run.first, run.due, run.kind);
	spindle_tree_upsert(&p->runs, &run);
}

/*
 * Park runs of delayed or leased events of queue table facade (whose
 * state qs the caller pins, holding no LWLock or buffer lock): each
 * replaces what tree 0 holds for its ids (keeping the larger read count)
 * and gets a reference.  Lowers the state's earliest due (and where the
 * next search starts) if it is known.
 */
void
spindle_park_runs(Relation facade, QueueState *qs, const ParkedRun *runs,
				  int n)
{
	park_runs(facade, qs, runs, n, 0);
}

/*
 * spindle_park_runs for the PENDING runs of a consumer's own spilled
 * claims (queue.c, spill_claims): marked so, they back off while their
 * transaction runs (PARK_SPILLED).
 */
void
spindle_park_spilled(Relation facade, QueueState *qs, const ParkedRun *runs,
					 int n)
{
	park_runs(facade, qs, runs, n, PARK_SPILLED);
}

/* spindle_park_runs, with flags for the PENDING runs (park_one) */
static void
park_runs(Relation facade, QueueState *qs, const ParkedRun *runs, int n,
		  uint16 flags)
{
	Park		p;
	TimestampTz earliest = DT_NOEND;
	int64		last_end = PG_INT64_MIN;
	int			i;

	if (n == 0)
		return;
	park_open(facade, qs, &p);
	for (i = 0; i < n; i++)
	{
		Assert(runs[i].end > runs[i].start &&
			   runs[i].end - runs[i].start <= PG_UINT32_MAX);
		park_one(&p, &runs[i], flags);
		earliest = Min(earliest, runs[i].due);
		last_end = Max(last_end, runs[i].end);
	}
	LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
	if (qs->park_known)
		qs->park_end = Max(qs->park_end, last_end);
	LWLockRelease(spindle_queue_lock(qs));
	park_close(&p);
}

/*
 * Whether a call at now must take parked runs of qs: the cache says the
 * earliest is due, or is not known yet.  No lock but the state's.
 */
static bool
park_due_now(QueueState *qs, TimestampTz now)
{
	bool		due;

	LWLockAcquire(spindle_queue_lock(qs), LW_SHARED);
	due = !qs->park_known || qs->park_due < now;
	LWLockRelease(spindle_queue_lock(qs));
	return due;
}

/*
 * How long a PENDING run whose transaction still runs stays parked before
 * it is looked at again: a second, or, for a consumer's spilled run, twice
 * as long as the time before up to 2^PARK_BACKOFF_MAX seconds, counted in
 * its flags (PARK_SPILLED).
 */
static TimestampTz
pending_wait(SpindleRun *run)
{
	int			step;

	if (!(run->flags & PARK_SPILLED))
		return USECS_PER_SEC;
	step = (run->flags & PARK_BACKOFF_MASK) >> PARK_BACKOFF_SHIFT;
	if (step < PARK_BACKOFF_MAX)
		step++;
	run->flags = (run->flags & ~PARK_BACKOFF_MASK) |
		(uint16) (step << PARK_BACKOFF_SHIFT);
	return (TimestampTz) USECS_PER_SEC << step;
}

/*
 * Remove the references refs[0..n) (sorted, just read from tree 1 under
 * the writer lock) but those marked kept: one pop per stretch between
 * kept ones, so a batch without a kept reference is one pop, as before.
 */
static void
remove_references(Park *p, SpindleRun *refs, const bool *kept, int n)
{
	int			i = 0;

	while (i < n)
	{
		int			j;
		int64		ignored;

		if (kept[i])
		{
			i++;
			continue;
		}
		for (j = i; j < n && !kept[j]; j++)
			;
		(void) spindle_tree_pop(&p->due, refs[i].first,
								refs[j - 1].first + 1, j - i, refs + i,
								&ignored, true);
		i = j;
	}
}

/*
 * Was an id of [lo, hi) moved by compaction (tree 4 holds one)?  Whether
 * the queue has a tree 4 at all is looked at once per p.
 */
static bool
park_moved(Park *p, int64 lo, int64 hi)
{
	if (p->moves < 0)
		p->moves = spindle_reloc_exists(p->crel) ? 1 : 0;
	return p->moves > 0 && spindle_reloc_ids_moved(p->crel, lo, hi);
}

/*
 * Take one batch of references below limit (writer lock held), from
 * *from on, at most max: the runs they name that are due before now and
 * behind head are cut from tree 0 and copied into out[*got...].  A run
 * past head (a rebuilt head has not reached it) keeps its reference,
 * which the state's search start and earliest due are lowered to (through
 * p->min_added, as for a reference added), and *held is set.
 * *from and *next move past the references taken.  Returns how many
 * references it looked at.
 */
static int
take_batch(Park *p, QueueState *qs, int64 *from, int64 limit,
		   TimestampTz now, int64 head, int max, ParkedRun *out, int *got,
		   int64 *next, bool *held)
{
	SpindleRun *refs = palloc(sizeof(SpindleRun) * max);
	bool	   *kept = palloc0(sizeof(bool) * max);
	int			nrefs;
	int			i;

	/* runs are cut before their references go: a crash leaves no run
	 * without one (P1) */
	nrefs = spindle_tree_pop(&p->due, *from, limit, max, refs, next, false);
	for (i = 0; i < nrefs; i++)
	{
		SpindleRun	run;
		int32		maxrc = 0;

		/* a reference's run may be gone, or parked again until later */
		if (!spindle_tree_lookup(&p->runs, refs[i].due, &run) ||
			run.first != refs[i].due || run.due >= now ||
			(run.kind != SPINDLE_RUN_DELAYED && run.kind != SPINDLE_RUN_LEASED &&
			 run.kind != SPINDLE_RUN_PENDING && run.kind != SPINDLE_RUN_READY))
			continue;
		if (spindle_qitems_overlap(qs, run.first, spindle_run_end(&run)))
		{
			/*
			 * An item holds some of its ids (P3): a call that parked it and
			 * has not let its claim go yet, or ids handed back.  Looked at
			 * again in a second, when the item has decided.
			 */
			run.due = now + USECS_PER_SEC;
			add_reference(p, run.first, run.due, run.kind);
			spindle_tree_upsert(&p->runs, &run);
			continue;
		}
		if (run.kind == SPINDLE_RUN_PENDING &&
			TransactionIdIsInProgress((TransactionId) run.awaited))
		{
			/* its transaction still runs: look again later */
			run.due = now + pending_wait(&run);
			add_reference(p, run.first, run.due, run.kind);
			spindle_tree_upsert(&p->runs, &run);
			continue;
		}
		if (spindle_run_end(&run) > head)
		{
			/*
			 * A rebuilt head has not passed it yet (it skips parked runs):
			 * taken once it has, with its read count, maybe by this very
			 * call, so it keeps its reference where it is.  (Giving it a
			 * new one past the batch, as before, moved such references up
			 * a probe at a time, attempt after attempt, until they passed
			 * limit and this call no longer saw them due: TAP 035.)
			 */
			kept[i] = true;
			p->min_added = Min(p->min_added, refs[i].first);
			*held = true;
			continue;
		}
		if (run.kind == SPINDLE_RUN_LEASED || run.kind == SPINDLE_RUN_READY ||
			(run.kind == SPINDLE_RUN_DELAYED &&
			 park_moved(p, run.first, spindle_run_end(&run))))
		{
			/*
			 * A lease ended (or a run taken before and not settled): it
			 * stays parked, READY until PARK_RETRY from now, so that its
			 * read count outlives a crash before the event is leased
			 * again (which replaces the run) or found gone (which cuts
			 * it: spindle_park_forget).  So does a delayed event that
			 * compaction moved: once its spindle is dropped, its copy in
			 * an annex is reached only through tree 0 (no head walks an
			 * annex), so a taker that rolls back, or a state lost with
			 * the server, must find it here again.
			 */
			run.kind = SPINDLE_RUN_READY;
			run.due = now + PARK_RETRY;
			add_reference(p, run.first, run.due, run.kind);
			spindle_tree_upsert(&p->runs, &run);
		}
		else
			(void) spindle_tree_cut(&p->runs, run.first, spindle_run_end(&run),
									&maxrc);
		out[*got].start = run.first;
		out[*got].end = spindle_run_end(&run);
		out[*got].due = run.due;
		out[*got].read_count = run.read_count;
		out[*got].kind = run.kind;
		out[*got].xid = run.kind == SPINDLE_RUN_PENDING ?
			(TransactionId) run.awaited : InvalidTransactionId;
		(*got)++;
	}
	if (nrefs > 0)
		*from = refs[nrefs - 1].first + 1;
	remove_references(p, refs, kept, nrefs);
	pfree(kept);
	pfree(refs);
	return nrefs;
}

/*
 * Both trees hold nothing any more (writer lock held, no reference left):
 * free their pages if they grew past a page, so that the consumer
 * relation's space follows what is parked (leaves emptied by takes are
 * never freed one by one: consumer_tree.c).
 */
static void
drop_if_empty(Park *p)
{
	BlockNumber root;
	int			level;

	if (!spindle_tree_root(&p->due, &root, &level) || level == 0)
		return;
	if (spindle_tree_count(&p->runs, 0, DT_NOBEGIN, NULL) > 0)
		return;
	(void) spindle_tree_drop(&p->due);
	(void) spindle_tree_drop(&p->runs);
}

/*
 * The most runs a compaction copies into one rebuilt parked tree: the
 * consumers that park or take wait for it, the walks, the bulk load and
 * the old tree's pages freed one record each (200 000 runs from 2 277
 * pages: 0.11 s and 6.5 MB of WAL in all, measured).  A tree holding more
 * keeps its emptied leaves until fewer are left (review rv11, F3: at
 * 65 536, a queue with 70 000 long reminders kept tree 1's growth beside
 * a lasting lease; review rv12: at 1 048 576 a rebuild could hold the
 * lock for seconds).
 */
#define PARK_COMPACT_MAX_RUNS	262144

/* How long the worker lets a parked tree that did not grow go unlooked at */
#define PARK_COMPACT_LOOK_EVERY	(60 * USECS_PER_SEC)

/*
 * What this backend (the worker) last saw of a consumer relation at a
 * look (spindle_park_compact): its size and when.  Keyed by relfilenode,
 * so a TRUNCATE's new file starts afresh; bounded (local_cache.c).
 */
typedef struct CompactLook
{
	RelFileNode node;			/* hash key */
	BlockNumber nblocks;
	TimestampTz at;
} CompactLook;

#define COMPACT_LOOKS_MAX	16384

static HTAB *compact_looks = NULL;

/*
 * Is it time to look at crel's parked trees?  When the relation grew
 * since the last look (leaves emptied and not given back make it grow),
 * or PARK_COMPACT_LOOK_EVERY passed (runs taken without new ones left
 * emptied leaves); the first time too.  Notes this look.
 */
static bool
compact_look_due(Relation crel, TimestampTz now)
{
	HTAB	   *h = spindle_local_cache(&compact_looks, "spindle parked tree looks",
										sizeof(RelFileNode), sizeof(CompactLook),
										COMPACT_LOOKS_MAX);
	BlockNumber nblocks = RelationGetNumberOfBlocks(crel);
	bool		found;
	CompactLook *look = hash_search(h, &crel->rd_node, HASH_ENTER, &found);

	if (found && nblocks <= look->nblocks &&
		now - look->at < PARK_COMPACT_LOOK_EVERY)
		return false;
	look->nblocks = nblocks;
	look->at = now;
	return true;
}

/*
 * Rebuild parked tree t (the trees' writer lock held) if it holds more
 * than twice the pages its runs need and at most PARK_COMPACT_MAX_RUNS
 * runs, with room on its file system for the new tree.  True if rebuilt.
 */
static bool
compact_tree(SpindleTree *t)
{
	int			npages;
	int64		nruns;
	int			n;
	SpindleRun *runs;

	spindle_tree_stats(t, &npages, &nruns);
	if (npages == 0 || !spindle_tree_is_sparse(npages, nruns) ||
		nruns > PARK_COMPACT_MAX_RUNS ||
		!spindle_crel_room_for(t->crel,
							   (int) (2 * spindle_tree_pages_needed(nruns))))
		return false;
	runs = spindle_tree_read_all(t, &n);
	spindle_tree_rebuild(t, runs, n);
	if (runs)
		pfree(runs);
	return true;
}

/*
 * Give back the leaves that takes emptied in the parked trees of queue
 * table relid (the worker's settle, each round).  Runs leave both trees
 * only by takes and cuts, and no tree frees a page alone, so while
 * anything stays parked (a lease that lasts, a reminder) their emptied
 * leaves stayed: tree 1's keys (due times) only grow, and a queue read and
 * acked beside one lasting lease grew by some 24 pages each 30 000 events,
 * for good (turn 4, session 13).  When a tree holds more than twice the
 * pages its runs need, it is built again beside itself and swapped in
 * (compact_tree: spindle_tree_rebuild, a bulk load), under the trees'
 * writer lock taken without waiting; consumers that park or take wait for
 * it, readers that take no lock find the old pages or start again from
 * the metapage.  Looked at only when compact_look_due says so; what a
 * crash left set aside by an earlier rebuild is given back first, each
 * time (a tree just rebuilt may not be sparse again for long).  Returns
 * how many trees it rebuilt.
 */
int
spindle_park_compact(Oid relid)
{
	Park		p;
	int			rebuilt = 0;

	if (!park_try_open(relid, NULL, &p, true))
		return 0;
	/* what a crash left of an earlier rebuild (review rv11, F1) */
	spindle_tree_reclaim(&p.runs);
	spindle_tree_reclaim(&p.due);
	if (compact_look_due(p.crel, GetCurrentTimestamp()))
	{
		rebuilt += compact_tree(&p.runs) ? 1 : 0;
		rebuilt += compact_tree(&p.due) ? 1 : 0;
	}
	if (rebuilt > 0)
		ereport(DEBUG1,
				(errmsg_internal("spindle: %d parked trees of \"%s\" rebuilt",
								 rebuilt, RelationGetRelationName(p.crel))));
	park_close(&p);
	return rebuilt;
}

/*
 * Take parked runs of queue table facade due before now and behind head,
 * earliest first, about want ids and at most max runs: each is cut from
 * tree 0 and copied into out.  Returns how many; 0 only if none is due
 * (references to runs gone or parked again are dropped on the way) or
 * *held_out is set: due runs lie past head, to be taken once it has
 * passed them.  The caller (pinning qs, holding no LWLock or buffer lock)
 * owns the runs taken: it must make them items, or park them again.
 */
int
spindle_park_take_due(Relation facade, QueueState *qs, TimestampTz now,
					  int64 want, int64 head, ParkedRun *out, int max,
					  bool *held_out)
{
	Park		p;
	int64		next;
	int64		from;
	int64		limit = due_key(now);
	int			got = 0;
	bool		held = false;

	*held_out = false;
	if (!park_due_now(qs, now) || max <= 0)
		return 0;
	park_open(facade, qs, &p);
	park_learn(qs, &p, now);
	LWLockAcquire(spindle_queue_lock(qs), LW_SHARED);
	from = qs->park_from;
	LWLockRelease(spindle_queue_lock(qs));
	/* until something is taken (references to nothing are dropped) */
	while (take_batch(&p, qs, &from, limit, now, head,
					  (int) Min(want, max - got), out, &got, &next,
					  &held) > 0 &&
		   got == 0 && !held && next < limit)
		CHECK_FOR_INTERRUPTS();
	LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
	qs->park_from = next != PG_INT64_MAX ? next : limit;
	qs->park_due = next != PG_INT64_MAX ? key_due(next) : DT_NOEND;
	LWLockRelease(spindle_queue_lock(qs));
	/* park_close lowers both to what this call parked again */
	if (next == PG_INT64_MAX && p.min_added == PG_INT64_MAX)
		drop_if_empty(&p);
	park_close(&p);
	*held_out = held;
	return got;
}

/*
 * Was an id of [lo, hi) of queue table facade moved by compaction (tree 4
 * of its consumer relation holds one)?  Such an id's parked run must stay
 * parked until what consumes it commits (see take_batch).  No LWLock or
 * buffer lock may be held.
 */
bool
spindle_park_moved(Relation facade, int64 lo, int64 hi)
{
	Oid			croid = crel_oid(RelationGetRelid(facade));
	Relation	crel;
	bool		moved;

	if (!OidIsValid(croid) ||
		(crel = try_relation_open(croid, AccessShareLock)) == NULL)
		return false;
	moved = spindle_reloc_exists(crel) &&
		spindle_reloc_ids_moved(crel, lo, hi);
	relation_close(crel, AccessShareLock);
	return moved;
}

/*
 * Take the one id msg_id out of the parked run holding it, for an ack
 * (qs pinned, no LWLock or buffer lock held): a delayed run, or a run
 * pending on a transaction that has ended (a consumer's spilled claim
 * after its rollback, an open producer's events after its commit: the ack
 * examines the event then, instead of finding it parked and acknowledging
 * nothing until a consumer took the run, review rv7, finding 2).  The
 * rest of the run after it gets a reference of its own.  Returns false if
 * no such run holds it; else *was says what it was (its due, read count,
 * kind and awaited xid).
 */
bool
spindle_park_take_one(Relation facade, QueueState *qs, int64 msg_id,
					  ParkedRun *was)
{
	Park		p;
	SpindleRun	run;
	int32		maxrc = 0;
	bool		found;

	park_open(facade, qs, &p);
	found = spindle_tree_lookup(&p.runs, msg_id, &run) &&
		(run.kind == SPINDLE_RUN_DELAYED ||
		 (run.kind == SPINDLE_RUN_PENDING &&
		  !TransactionIdIsInProgress((TransactionId) run.awaited)));
	if (found)
	{
		/* the tail's reference first: a crash leaves no run without one */
		ref_tail(&p, msg_id + 1);
		(void) spindle_tree_cut(&p.runs, msg_id, msg_id + 1, &maxrc);
		was->start = msg_id;
		was->end = msg_id + 1;
		was->due = run.due;
		was->read_count = run.read_count;
		was->kind = run.kind;
		was->xid = run.kind == SPINDLE_RUN_PENDING ?
			(TransactionId) run.awaited : InvalidTransactionId;
	}
	park_close(&p);
	return found;
}

/*
 * Cut the ids of queue table relid in ranges (n sorted [start, end)
 * pairs) out of their parked runs: acknowledged leases, as their
 * transaction commits.  Opens the consumer relation by the table's OID.
 */
void
spindle_park_forget(Oid relid, const int64 *ranges, int n)
{
	Park		p;
	int			i;
	TimestampTz now = GetCurrentTimestamp();

	/* a state not loaded learns the references afresh */
	if (!park_try_open(relid, spindle_queue_state(relid), &p, false))
		return;
	for (i = 0; i < n; i++)
	{
		int64		a = ranges[2 * i];
		int64		b = ranges[2 * i + 1];
		int64		x = a;
		SpindleRun	r;
		int32		maxrc = 0;

		/* the rest of a run after the range keeps a reference (P1) */
		ref_tail(&p, b);
		/*
		 * Runs whose first id goes lose their reference with it, unless
		 * it comes up within DROP_REF_AFTER anyway (then it is dropped
		 * when taken, which costs less than a record now).
		 */
		while (x < b && spindle_tree_next(&p.runs, x, &r) && r.first < b)
		{
			if (r.first >= a && r.due > now + DROP_REF_AFTER)
				drop_reference(&p, r.first, r.due);
			x = spindle_run_end(&r);
		}
		(void) spindle_tree_cut(&p.runs, a, b, &maxrc);
	}
	park_close(&p);
}

/*
 * Make the leases in runs (n of them, each as read() granted it: its ids,
 * the lease's end in due) that a failed statement handed back READY and
 * due now on disk, keeping their read counts, so that a state rebuilt
 * from disk (a restart, a crash) delivers them at once instead of when
 * the lease would have ended.  Only what is still that lease is changed:
 * ids parked LEASED with that very end (a lease granted since by another
 * read() has another end, one that ended was taken READY already, one
 * acknowledged or purged is gone).  While the item the hand-back made
 * holds the ids, P3 keeps the READY run from being taken: the item
 * decides.  Opens the consumer relation by the table's OID; nothing to do
 * if it is gone.  With nowait (a commit or a backend's exit: someone
 * else's business must not wait or fail for this), returns false, having
 * done nothing, if a lock it needs is not free at once.  A valid
 * transaction, no LWLock or buffer lock held.
 */
bool
spindle_park_hand_back(Oid relid, const ParkedRun *runs, int n, bool nowait)
{
	Park		p;
	TimestampTz now = GetCurrentTimestamp();
	int			i;

	if (n == 0)
		return true;
	/* a state not loaded learns the references afresh */
	if (!park_try_open(relid, spindle_queue_state(relid), &p, nowait))
		return !nowait || !OidIsValid(spindle_consumer_rel_oid(relid));
	for (i = 0; i < n; i++)
	{
		int64		x = runs[i].start;
		SpindleRun	r;

		while (x < runs[i].end && spindle_tree_next(&p.runs, x, &r) &&
			   r.first < runs[i].end)
		{
			int64		a = Max(r.first, runs[i].start);
			int64		b = Min(spindle_run_end(&r), runs[i].end);

			if (r.kind == SPINDLE_RUN_LEASED && r.due == runs[i].due)
			{
				SpindleRun	ready = r;

				/* references first: a crash leaves no run without one */
				ref_tail(&p, b);
				add_reference(&p, a, now, SPINDLE_RUN_READY);
				ready.first = a;
				ready.len = (uint32) (b - a);
				ready.kind = SPINDLE_RUN_READY;
				ready.due = now;
				spindle_tree_upsert(&p.runs, &ready);
			}
			x = b;
			CHECK_FOR_INTERRUPTS();
		}
	}
	park_close(&p);
	/* leases ended early: the bound of a length limit must count them */
	spindle_queue_limit_leases_back(relid);
	return true;
}

/*
 * Open tree 0 of facade's consumer relation as a reader (AccessShareLock,
 * let go by reader_close); false if the queue has no consumer relation.
 */
static bool
reader_open(Oid relid, SpindleTree *t)
{
	Oid			croid = crel_oid(relid);

	if (!OidIsValid(croid))
		return false;
	t->crel = crel_open(relid, croid, AccessShareLock);
	if (t->crel == NULL)
		return false;
	spindle_tree_init(t, t->crel, PARK_TREE_RUNS, false);
	return true;
}

static void
reader_close(SpindleTree *t)
{
	relation_close(t->crel, AccessShareLock);
}

/*
 * The parked run holding msg_id (a reader's look: it may change as soon
 * as it is returned), copied into *run; false if none.
 */
bool
spindle_park_find(Relation facade, int64 msg_id, ParkedRun *run)
{
	SpindleTree t;
	SpindleRun	r;
	bool		found;

	if (!reader_open(RelationGetRelid(facade), &t))
		return false;
	found = spindle_tree_lookup(&t, msg_id, &r);
	reader_close(&t);
	if (!found)
		return false;
	run->start = r.first;
	run->end = spindle_run_end(&r);
	run->due = r.due;
	run->read_count = r.read_count;
	run->kind = r.kind;
	run->xid = r.kind == SPINDLE_RUN_PENDING ?
		(TransactionId) r.awaited : InvalidTransactionId;
	return true;
}

/*
 * Move the end of msg_id's lease to due (set_visibility): the id becomes
 * a run of its own, the rest of its run keeps its end under references of
 * its own.  Returns false, changing nothing, if no lease holds msg_id.
 * qs pinned, no LWLock or buffer lock held.
 */
bool
spindle_park_relet(Relation facade, QueueState *qs, int64 msg_id,
				   TimestampTz due)
{
	Park		p;
	SpindleRun	run;
	bool		found;

	park_open(facade, qs, &p);
	found = spindle_tree_lookup(&p.runs, msg_id, &run) &&
		run.kind == SPINDLE_RUN_LEASED;
	if (found)
	{
		SpindleRun	one = run;

		/* references first: a crash leaves no run without one */
		ref_tail(&p, msg_id + 1);
		add_reference(&p, msg_id, due, run.kind);
		one.first = msg_id;
		one.len = 1;
		one.due = due;
		spindle_tree_upsert(&p.runs, &one);
	}
	park_close(&p);
	return found;
}

/*
 * The ids of queue table relid in [lo, hi) that leases not ended by `after`
 * hold, as *n sorted, disjoint [start, end) pairs (NULL if none): what TTL
 * must leave alone.  Reads tree 0 as a reader.
 */
int64 *
spindle_park_leased(Oid relid, int64 lo, int64 hi, TimestampTz after, int *n)
{
	SpindleTree t;
	SpindleRun	r;
	int64	   *ranges = NULL;
	int			nalloc = 0;
	int64		x = lo;

	*n = 0;
	if (!reader_open(relid, &t))
		return NULL;
	while (x < hi && spindle_tree_next(&t, x, &r) && r.first < hi)
	{
		if (r.kind == SPINDLE_RUN_LEASED && r.due > after)
		{
			if (*n == nalloc)
			{
				nalloc = Max(8, nalloc * 2);
				ranges = ranges == NULL ? palloc(sizeof(int64) * 2 * nalloc) :
					repalloc(ranges, sizeof(int64) * 2 * nalloc);
			}
			ranges[2 * *n] = Max(r.first, lo);
			ranges[2 * *n + 1] = Min(spindle_run_end(&r), hi);
			(*n)++;
		}
		x = spindle_run_end(&r);
		CHECK_FOR_INTERRUPTS();
	}
	reader_close(&t);
	return ranges;
}

/*
 * The earliest due time of a parked run of facade's queue (DT_NOEND:
 * none), from the state's cache, learnt from tree 1 if the state was
 * loaded afresh.  qs pinned, no LWLock or buffer lock held.
 */
TimestampTz
spindle_park_next_due(Relation facade, QueueState *qs)
{
	TimestampTz due;
	bool		known;

	LWLockAcquire(spindle_queue_lock(qs), LW_SHARED);
	known = qs->park_known;
	due = qs->park_due;
	LWLockRelease(spindle_queue_lock(qs));
	if (!known)
	{
		Park		p;

		park_open(facade, qs, &p);
		park_learn(qs, &p, GetCurrentTimestamp());
		park_close(&p);
		LWLockAcquire(spindle_queue_lock(qs), LW_SHARED);
		due = qs->park_due;
		LWLockRelease(spindle_queue_lock(qs));
	}
	return due;
}

/*
 * The end of the last parked run of facade's queue, learnt from tree 1 if
 * the state was loaded afresh: no parked run reaches past it.  qs pinned,
 * no LWLock held.
 */
static int64
known_park_end(Relation facade, QueueState *qs)
{
	bool		known;
	int64		park_end;

	LWLockAcquire(spindle_queue_lock(qs), LW_SHARED);
	known = qs->park_known;
	park_end = qs->park_end;
	LWLockRelease(spindle_queue_lock(qs));
	if (!known)
	{
		(void) spindle_park_next_due(facade, qs);	/* learns park_end */
		LWLockAcquire(spindle_queue_lock(qs), LW_SHARED);
		park_end = qs->park_end;
		LWLockRelease(spindle_queue_lock(qs));
	}
	return park_end;
}

/* runs one look of spindle_park_next follows past the first, at most */
#define PARK_CHAIN_MAX	65536

/*
 * Where the first parked run of facade's queue that reaches past x starts
 * (PG_INT64_MAX: none), its end in *end: the head of a state rebuilt from
 * disk skips parked runs (they come back when due).  When that run holds
 * x and chain is set (the caller's head has just moved over a parked run,
 * so others may follow: the walk costs a descent more), *end is the end of
 * the chain of runs parked one after the other from it
 * (spindle_tree_chain_end, a walk of tree 0's leaves): a head rebuilt
 * among 100 000 delayed events enqueued one after the other used to move
 * over them one tree descent each, 120 ms again at every rebuild of an
 * evicted state.  Safe to skip for a head at x that has not moved: runs at
 * or past a state's head are never taken (spindle_park_take_due holds them
 * back until the head has passed them), only parked again or cut by an
 * ack.  Without I/O when no parked run reaches past x, as for any head in
 * steady state (runs are parked behind it).  qs pinned, no LWLock or
 * buffer lock held; reads tree 0 as a reader.
 */
int64
spindle_park_next(Relation facade, QueueState *qs, int64 x, bool chain,
				  int64 *end)
{
	int64		park_end;
	SpindleTree t;
	SpindleRun	run;
	bool		found;

	park_end = known_park_end(facade, qs);
	if (x >= park_end || !reader_open(RelationGetRelid(facade), &t))
		return PG_INT64_MAX;
	found = spindle_tree_next(&t, x, &run);
	if (found)
	{
		*end = spindle_run_end(&run);
		if (chain && run.first <= x)
			*end = spindle_tree_chain_end(&t, *end, PARK_CHAIN_MAX);
	}
	reader_close(&t);
	return found ? run.first : PG_INT64_MAX;
}

/*
 * The parked runs of facade's queue that reach into [lo, hi), at most max
 * of them, as *n sorted, disjoint [start, end) pairs (NULL if none), read
 * by one walk of tree 0's leaves (spindle_tree_read_range): what a head
 * rebuilt among parked runs moves over (queue.c, skip_settled; the same
 * safety as spindle_park_next's).  Without I/O when no parked run reaches
 * past lo.  qs pinned, no LWLock or buffer lock held.
 */
int64 *
spindle_park_ranges(Relation facade, QueueState *qs, int64 lo, int64 hi,
					int max, int *n)
{
	int64		park_end;
	SpindleTree t;
	SpindleRun *runs;
	int64	   *ranges = NULL;

	*n = 0;
	park_end = known_park_end(facade, qs);
	if (lo >= park_end || !reader_open(RelationGetRelid(facade), &t))
		return NULL;
	runs = spindle_tree_read_range(&t, lo, hi, max, n);
	reader_close(&t);
	if (*n > 0)
	{
		ranges = palloc(sizeof(int64) * 2 * *n);
		for (int i = 0; i < *n; i++)
		{
			ranges[2 * i] = runs[i].first;
			ranges[2 * i + 1] = spindle_run_end(&runs[i]);
		}
		pfree(runs);
	}
	return ranges;
}

/*
 * How many events of queue table relid are parked as kind with a due time
 * after `after` (DT_NOBEGIN: any), for the spindle.queues view and the
 * count of a queue's limit: a walk of tree 0's leaves as a reader.  0 if
 * it has none.  *first_due (if not NULL): the earliest due of those runs
 * (DT_NOEND: none).
 */
int64
spindle_park_count(Oid relid, uint16 kind, TimestampTz after,
				   TimestampTz *first_due)
{
	SpindleTree t;
	int64		n;

	if (first_due != NULL)
		*first_due = DT_NOEND;
	if (!reader_open(relid, &t))
		return 0;
	n = spindle_tree_count(&t, kind, after, first_due);
	reader_close(&t);
	return n;
}
