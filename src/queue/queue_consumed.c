/*-------------------------------------------------------------------------
 *
 * queue_consumed.c
 *	  Consumers and the consume log: what examine() (queue.c) learns from
 *	  the log about the events it looks at, and the entries dequeue, ack
 *	  and the dead-letter move write instead of purging event pages on a
 *	  queue that has a log, which spindle.consume_log starts (docs/design.md,
 *	  "Consume log (built)").
 *
 * A consumer view covers the candidates of one examine() call.  Before any
 * event page is locked it reads the log's entries over the candidates'
 * ids -- one range read per cluster of nearby ids, so a call at the head
 * costs one tree descent whatever it takes, and nothing when the queue
 * has no log (one metapage look) -- and resolves each entry's xid once:
 *
 *	committed (or FROZEN), or	the event is consumed for good: gone
 *	  below the log's floor
 *	running, or this backend's	pending on that xid, as an event a running
 *								transaction deletes
 *	aborted						nothing: the event is examined as if the
 *								entry were not there (after a crash, the
 *								events of an unfinished dequeue come back)
 *
 * Writers then record, under the exclusive lock of each event page that
 * examine() holds while it classifies the page's events (the lock protocol
 * with DML of hidden.c: the event has no xmax, checked under that lock,
 * and its entry is in the tree before the lock is let go), one entry per
 * run of consecutive ids, in the consuming (sub)transaction and command.
 * Entries of one call merge into one (same xid and command id).
 *
 * Whether a consumer writes entries is the queue's: once the queue has a
 * log (tree 2 of its consumer relation), every consumer of it does,
 * whatever its setting; the setting only decides whether a consumer starts
 * a log on a queue that has none (spindle_consumed_begin).
 *
 * Locks.  The consumer relation: AccessShareLock to read,
 * RowExclusiveLock to write, to the end of the transaction.  The consume
 * log's writer lock (spindle_consume_log_lock) for the whole examine()
 * call of every queue with a consumer relation, in share mode by a
 * consumer of a queue without a log that will not start one (it writes no
 * entry; creating the log needs the lock in exclusive mode), in exclusive
 * mode otherwise: taken before any buffer lock and before the look for
 * the log, it orders writers of entries (an
 * ack of an event nobody claimed has no claim to keep it apart from a
 * dequeue at the head), keeps the log from being created between a
 * consumer's look and its purge by xmax, and keeps a reader from reading
 * the log between another's check and its entry.  Tree buffer locks (consumer_tree.c) are taken while an event
 * page is locked, never the other way round.
 *
 * Invariants: an entry is written only for an event the writer found
 * deliverable under its page's lock, with no live entry on it; an event
 * is consumed by at most one live entry or xmax.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/transam.h"
#include "access/xact.h"
#include "storage/predicate.h"
#include "storage/procarray.h"
#include "utils/guc.h"

#include "queue/spindle_queue.h"

/* spindle.consume_log: consumers start a queue's log (see above) */
bool		spindle_consume_log = false;

/* candidates closer than this share one range read of the log */
#define CLUSTER_GAP		1024

void
spindle_queue_consumed_init(void)
{
	DefineCustomBoolVariable("spindle.consume_log",
							 "Consumers record what they take in the queue's consume log instead of purging event pages.",
							 "On, a consumer starts the log of a queue that has none; off, it purges by xmax while the queue has none. Once a queue has a log, every consumer of it writes entries whatever this setting.",
							 &spindle_consume_log,
							 false,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);
}

static int
cmp_int64(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return x < y ? -1 : (x > y ? 1 : 0);
}

/* Append entries e[0..n) to v's list. */
static void
view_append(SpindleConsumeView *v, SpindleConsumed *e, int n)
{
	if (n == 0)
		return;
	if (v->nentries + n > v->room)
	{
		v->room = Max(v->room * 2, v->nentries + n);
		v->entries = v->entries ?
			repalloc(v->entries, sizeof(SpindleConsumed) * v->room) :
			palloc(sizeof(SpindleConsumed) * v->room);
		v->verdicts = v->verdicts ?
			repalloc(v->verdicts, sizeof(int) * v->room) :
			palloc(sizeof(int) * v->room);
	}
	memcpy(v->entries + v->nentries, e, sizeof(SpindleConsumed) * n);
	v->nentries += n;
}

/* What entry e says about its events (SPINDLE_LOG_*), *xid if pending. */
static int
entry_verdict(const SpindleConsumed *e, TransactionId *xid)
{
	TransactionId x = XidFromFullTransactionId(e->fxid);

	*xid = x;
	if (x == FrozenTransactionId)
		return SPINDLE_LOG_GONE;
	if (!TransactionIdIsNormal(x))
		return SPINDLE_LOG_NONE;
	if (TransactionIdIsCurrentTransactionId(x) || TransactionIdIsInProgress(x))
		return SPINDLE_LOG_PENDING;
	return TransactionIdDidCommit(x) ? SPINDLE_LOG_GONE : SPINDLE_LOG_NONE;
}

/*
 * Set v up for an examine() of the events ids[0..n) of facade (sorted or
 * not; n may be 0): write entries if the caller consumes (dequeue, ack, a
 * move) and the queue has a log or spindle.consume_log is on (which
 * starts one).  Takes the writer lock before it looks for the log, then
 * reads the entries.  No buffer lock may be held.
 *
 * Whether the queue has a log is the queue's, not the session's: only a
 * writer, under the writer lock, creates the log (its first entry, also
 * the first after a TRUNCATE), so a consumer that found none under that
 * lock purges by xmax with no entry appearing before it is done, and one
 * that found it writes entries whatever its setting (review finding 5: an
 * event acked once by an entry and once by xmax).
 */
void
spindle_consumed_begin(SpindleConsumeView *v, Relation facade,
					   const int64 *ids, int n, bool write)
{
	Oid			croid;
	int64	   *sorted;
	int			i;

	memset(v, 0, sizeof(*v));
	v->floor = PG_INT64_MIN;
	if (n == 0)
		return;
	croid = spindle_consumer_rel_oid(RelationGetRelid(facade));
	if (!OidIsValid(croid))
		return;
	v->crel = try_relation_open(croid, write ? RowExclusiveLock :
								AccessShareLock);
	if (v->crel == NULL)
		return;
	if (!(write && spindle_consume_log))
	{
		/*
		 * It will not start a log: the lock in share mode keeps one from
		 * being created while it purges by xmax, and lets the queue's
		 * consumers examine side by side.  A queue that has a log is
		 * examined under the lock in exclusive mode, as by any writer.
		 */
		spindle_consume_log_lock_shared(v->crel);
		if (!spindle_consume_log_exists(v->crel))
		{
			v->locked = v->shared = true;
			return;
		}
		spindle_consume_log_unlock_shared(v->crel);
	}
	spindle_consume_log_lock(v->crel);
	v->locked = true;
	if (!spindle_consume_log_exists(v->crel))
	{
		v->write = write && spindle_consume_log;
		return;
	}
	v->write = write;
	sorted = palloc(sizeof(int64) * n);
	memcpy(sorted, ids, sizeof(int64) * n);
	qsort(sorted, n, sizeof(int64), cmp_int64);
	for (i = 0; i < n;)
	{
		int			j = i;
		int			got;
		SpindleConsumed *e;

		while (j + 1 < n && sorted[j + 1] - sorted[j] < CLUSTER_GAP)
			j++;
		e = spindle_consume_log_read(v->crel, sorted[i], sorted[j] + 1, &got);
		view_append(v, e, got);
		if (e != NULL)
			pfree(e);
		i = j + 1;
	}
	pfree(sorted);
	/* after the entries: see spindle_consume_log_floor */
	v->floor = spindle_consume_log_floor(v->crel);
	/* one clog look per xid: an entry's neighbours mostly share it */
	for (i = 0; i < v->nentries; i++)
	{
		if (i > 0 && FullTransactionIdEquals(v->entries[i].fxid,
											 v->entries[i - 1].fxid))
			v->verdicts[i] = v->verdicts[i - 1];
		else
		{
			TransactionId xid;

			v->verdicts[i] = entry_verdict(&v->entries[i], &xid);
		}
	}
}

/*
 * What the log says about event id: SPINDLE_LOG_NONE, _GONE (consumed
 * by a committed entry) or _PENDING (*xid: a running or this backend's
 * (sub)transaction consumes it).  Binary search over v's entries, which
 * are in id order and do not overlap.
 */
int
spindle_consumed_verdict(SpindleConsumeView *v, int64 id, TransactionId *xid)
{
	int			lo = 0,
				hi = v->nentries;

	if (v->crel != NULL && id < v->floor)
		return SPINDLE_LOG_GONE;	/* folded into the floor */
	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;
		SpindleConsumed *e = &v->entries[mid];

		if (id < e->first)
			hi = mid;
		else if (id >= e->first + e->len)
			lo = mid + 1;
		else
		{
			*xid = XidFromFullTransactionId(e->fxid);
			return v->verdicts[mid];
		}
	}
	return SPINDLE_LOG_NONE;
}

/*
 * Record that the current (sub)transaction, in command cid, consumes the
 * events ids[0..n) (any order) at ptids[] of seg, whose pages the caller
 * holds locked exclusively (each found deliverable there): one entry per
 * run of consecutive ids.  As heap_delete, a SERIALIZABLE reader of an
 * event meets the consumer.
 */
void
spindle_consumed_write(SpindleConsumeView *v, Relation seg, int64 *ids,
					   ItemPointer ptids, int n, CommandId cid)
{
	FullTransactionId fxid;
	int			i;

	Assert(v->write && v->locked);
	if (n == 0)
		return;
	fxid = GetCurrentFullTransactionId();
	for (i = 0; i < n; i++)
		CheckForSerializableConflictIn(seg, &ptids[i],
									   ItemPointerGetBlockNumber(&ptids[i]));
	qsort(ids, n, sizeof(int64), cmp_int64);
	for (i = 0; i < n;)
	{
		int			j = i;

		while (j + 1 < n && ids[j + 1] == ids[j] + 1)
			j++;
		spindle_consume_log_add_run(v->crel, ids[i], ids[j] - ids[i] + 1,
									fxid, cid);
		i = j + 1;
	}
	/* counted as purged when the transaction commits, as a purge is */
	spindle_counters_deleted(RelationGetRelid(seg), n);
}

/* Let go of v: the writer lock now, the relation lock at the end. */
void
spindle_consumed_end(SpindleConsumeView *v)
{
	if (v->crel != NULL)
	{
		if (v->shared)
			spindle_consume_log_unlock_shared(v->crel);
		else if (v->locked)
			spindle_consume_log_unlock(v->crel);
		relation_close(v->crel, NoLock);
	}
	if (v->entries != NULL)
		pfree(v->entries);
	if (v->verdicts != NULL)
		pfree(v->verdicts);
	memset(v, 0, sizeof(*v));
}
