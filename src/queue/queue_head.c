/*-------------------------------------------------------------------------
 *
 * queue_head.c
 *	  A queue's head kept on disk, in its consumer relation's metapage
 *	  (storage/consumer_head.c): loaded when a queue's shared state is
 *	  loaded afresh (after an eviction whose saved head is gone, a restart
 *	  or a crash), written when a state is evicted and by the worker for
 *	  the states whose head moved.
 *
 * The safety rule.  A head H with ranges R is written only from a snapshot
 * of the state taken under its lock (spindle_queue_snapshot_items), so
 * below H every id outside R and not parked in tree 0 was, at that moment,
 * consumed by a committed transaction or never an event (what the state
 * itself keeps: queue_state.c).  The snapshot is taken after the facts it
 * relies on reached the WAL: a claim leaves the state at its transaction's
 * commit (XACT_EVENT_COMMIT, after the commit record), a delayed run is
 * parked before its item goes, and the snapshot's record is inserted later
 * still, so whatever recovery keeps of the head, it keeps those too.
 * Running dequeues' claims, pending runs of open producers and runs to
 * examine again are items, so they are in R or at or past H.  Two things
 * could still put an event below H after a crash: a slot of the queue's
 * open spindles handed out but not on disk (a reservation in flight or one
 * a failed insert lost), which a counter rebuilt from disk hands out
 * again; so H is lowered to the first such slot (spindle_slots_durable).
 * And a snapshot is never replaced by an older one (its seq, the WAL
 * insert position when taken): an older one stays true (settled ids stay
 * settled; examining a range again is always right) but examines more.
 *
 * An acknowledgement cuts the acknowledged ids out of their parked runs
 * just before its commit record (queue.c, cut_acked_leases): a crash in
 * between leaves events that are neither consumed nor parked, below a head
 * written earlier.  So the acknowledging transaction first takes the
 * queue's head guard (an advisory lock tag of spindle's own, in ShareLock
 * until its end) and lowers the head on disk below those ids
 * (spindle_queue_head_guard), and a head is written only under the guard
 * in ExclusiveLock, taken conditionally: never while an acknowledgement is
 * between its cut and the end of its commit, and never from a snapshot
 * older than the lowering (seq).
 *
 * TRUNCATE gives the consumer relation a new relfilenode with no head, a
 * DROP drops it; a write holds the consumer relation in RowExclusiveLock,
 * which TRUNCATE and DROP conflict with, and takes its snapshot under that
 * lock, so it writes into the storage the snapshot is of (a state reset by
 * TRUNCATE or DROP has no snapshot to give: its saved heads are forgotten
 * too).  A TRUNCATE that rolls back brings back the old relfilenode and
 * the head written for it.
 *
 * Locks: the consumer relation (AccessShareLock to read;
 * RowExclusiveLock, taken conditionally, to write), the head guard
 * (ExclusiveLock, conditionally, to write; ShareLock by acknowledging
 * transactions until their end) and the queue table
 * (AccessShareLock, conditionally, for its directory); the state's LWLock
 * and QueuesLock briefly, never across I/O.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/rel.h"

#include "queue/spindle_queue.h"

/* field4 of the advisory lock tag of a queue's head guard (core: 1 and 2) */
#define SPINDLE_HEAD_GUARD_FIELD4	0x5348

static void
head_guard_tag(LOCKTAG *tag, Oid relid)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, relid, 0,
						 SPINDLE_HEAD_GUARD_FIELD4);
}

/*
 * The consumer relation of queue table relid, locked in lockmode (only if
 * free at once with nowait), or NULL.
 */
static Relation
head_crel_open(Oid relid, LOCKMODE lockmode, bool nowait)
{
	Oid			croid = spindle_consumer_rel_oid(relid);
	Relation	crel;
	char		name[NAMEDATALEN];

	if (!OidIsValid(croid))
		return NULL;
	if (nowait)
	{
		if (!ConditionalLockRelationOid(croid, lockmode))
			return NULL;
	}
	else
		LockRelationOid(croid, lockmode);
	crel = try_relation_open(croid, NoLock);
	snprintf(name, sizeof(name), "c%u", relid);
	if (crel == NULL || strcmp(RelationGetRelationName(crel), name) != 0)
	{
		if (crel != NULL)
			relation_close(crel, NoLock);
		UnlockRelationOid(croid, lockmode);
		return NULL;
	}
	return crel;
}

/* tree 0 probes a load makes at most (beyond, ranges are kept as they are) */
#define LOAD_PROBES 256

/*
 * Take the runs parked in tree 0 out of h's ranges, as the walk of a state
 * rebuilt from disk skips them: they come back by their references when
 * due, with their read counts, and a range to examine again must not win
 * over a lease granted after the snapshot (an item always wins over a
 * parked run).  A range split past SPINDLE_CREL_HEAD_RANGES lowers the
 * head to where it stops.  qs pinned, no LWLock held.
 */
static void
skip_parked(Relation facade, QueueState *qs, SpindleCrelHead *h)
{
	int64		out[SPINDLE_CREL_HEAD_RANGES][2];
	int			n = 0;
	int			probes = 0;
	int			i;

	for (i = 0; i < h->nranges; i++)
	{
		int64		a = h->ranges[i][0];
		int64		b = h->ranges[i][1];

		while (a < b)
		{
			int64		start = b;
			int64		end = b;

			if (probes++ < LOAD_PROBES)
				start = spindle_park_next(facade, qs, a, &end);
			if (start > a)
			{
				if (n == SPINDLE_CREL_HEAD_RANGES)
				{
					h->head = a;	/* examined from here on */
					goto done;
				}
				out[n][0] = a;
				out[n][1] = Min(start, b);
				n++;
			}
			if (start >= b)
				break;
			a = Max(a, end);
		}
	}
done:
	memcpy(h->ranges, out, sizeof(int64) * 2 * n);
	h->nranges = n;
}

/*
 * Make qs (pinned, the state of facade's queue) valid if it is not: at
 * the head its consumer relation keeps, with that head's ranges to examine
 * again, or at first_position (the oldest spindle's first id) if it keeps
 * none.  Reads the metapage with no LWLock held.
 */
void
spindle_queue_state_load(Relation facade, QueueState *qs,
						 int64 first_position)
{
	SpindleCrelHead h;
	bool		found = false;
	Relation	crel;

	if (qs->valid)
		return;					/* a hint: checked again under the lock */
	crel = head_crel_open(RelationGetRelid(facade), AccessShareLock, false);
	if (crel != NULL)
	{
		found = spindle_crel_head_read(crel, &h);
		relation_close(crel, AccessShareLock);
	}
	if (found && h.nranges > 0)
		skip_parked(facade, qs, &h);
	spindle_queue_state_apply(qs, found ? &h : NULL, first_position);
}

/*
 * Lower h's head to the first slot of facade's spindles that a crash could
 * hand out again (see the header), dropping the ranges at or past it.
 */
static void
cap_at_durable(Relation facade, SpindleCrelHead *h)
{
	SpindleDirectory *dir = spindle_directory_acquire(facade);
	int			i;
	int			n = 0;

	for (i = 0; i < dir->nspindles; i++)
	{
		SpindleEntry *sp = &dir->spindles[i];
		int64		placed;

		if (sp->first_no >= h->head)
			break;
		if (spindle_slots_durable(sp->segment, sp->spindle_no, &placed))
		{
			h->head = Min(h->head, sp->first_no + placed);
			break;
		}
	}
	spindle_directory_release(dir);
	for (i = 0; i < h->nranges; i++)
		if (h->ranges[i][0] < h->head)
		{
			h->ranges[n][0] = h->ranges[i][0];
			h->ranges[n][1] = Min(h->ranges[i][1], h->head);
			n++;
		}
	h->nranges = n;
}

/*
 * Write the head of queue table relid of this database to its consumer
 * relation: its saved head if its state was evicted and that is not
 * written yet, else a snapshot of its loaded state.  Does nothing if a
 * lock it needs is not free at once.  Runs in a transaction; holds no
 * LWLock across I/O.
 */
void
spindle_queue_head_persist(Oid relid)
{
	Relation	crel;
	Relation	facade;
	SpindleCrelHead h;
	bool		saved;
	int64		head = 0;

	LOCKTAG		guard;

	if (RecoveryInProgress())
		return;					/* a standby writes nothing */
	head_guard_tag(&guard, relid);
	if (LockAcquire(&guard, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return;					/* an acknowledgement is committing */
	crel = head_crel_open(relid, RowExclusiveLock, true);
	if (crel == NULL)
	{
		LockRelease(&guard, ExclusiveLock, false);
		return;
	}
	if (!ConditionalLockRelationOid(relid, AccessShareLock))
	{
		relation_close(crel, RowExclusiveLock);
		LockRelease(&guard, ExclusiveLock, false);
		return;
	}
	facade = try_relation_open(relid, NoLock);
	if (facade != NULL && !spindle_is_facade(facade))
	{
		relation_close(facade, NoLock);
		facade = NULL;
	}
	if (facade != NULL)
	{
		/* under the consumer relation's lock: no TRUNCATE or DROP now */
		saved = spindle_queue_saved_copy(relid, &h);
		if (saved || spindle_queue_state_snapshot(relid, &h, &head))
		{
			cap_at_durable(facade, &h);
			if (h.head > 0)
				(void) spindle_crel_head_write(crel, &h);
			if (saved)
				spindle_queue_saved_written(relid, h.seq);
			else
				spindle_queue_state_written(relid, head);
		}
		relation_close(facade, NoLock);
	}
	UnlockRelationOid(relid, AccessShareLock);
	relation_close(crel, RowExclusiveLock);
	LockRelease(&guard, ExclusiveLock, false);
}

/*
 * An acknowledging transaction of queue table relid is about to cut ids
 * from lowest on out of their parked runs (see the header): take the
 * head guard in ShareLock until the transaction ends (waiting for a head
 * being written) and lower the head on disk to lowest if it is above.
 * Runs at PRE_COMMIT, holding no LWLock or buffer lock; also for spindles
 * moved down below the head (queue_numbers_lowered), mid-transaction.
 */
void
spindle_queue_head_guard(Oid relid, int64 lowest)
{
	LOCKTAG		guard;
	Relation	crel;

	head_guard_tag(&guard, relid);
	(void) LockAcquire(&guard, ShareLock, false, false);
	crel = head_crel_open(relid, RowExclusiveLock, false);
	if (crel == NULL)
		return;
	(void) spindle_crel_head_lower(crel, lowest);
	relation_close(crel, RowExclusiveLock);
}

/*
 * Write the heads of up to max queues of this database that moved since
 * they were last written (the worker, each round; in a transaction).
 * Returns how many it looked at.
 */
int
spindle_queue_persist_heads(int max)
{
	Oid		   *relids = palloc(sizeof(Oid) * max);
	int			n = spindle_queue_heads_to_write(relids, max);
	int			i;

	for (i = 0; i < n; i++)
		spindle_queue_head_persist(relids[i]);
	pfree(relids);
	return n;
}
