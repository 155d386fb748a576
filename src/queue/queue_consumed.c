/*-------------------------------------------------------------------------
 *
 * queue_consumed.c
 *	  Consumers and the consume log: what examine() (queue.c) learns from
 *	  the log about the events it looks at, and the entries dequeue, ack
 *	  and the dead-letter move write instead of purging event pages on a
 *	  queue that has a log, which spindle.consume_log starts (docs/design.md,
 *	  "Consume log (built)").
 *
 * A consumer view covers the candidates of one examine() call.  Under each
 * event page's lock it reads the log's entries over that page's candidates
 * -- one range read, nothing when the queue has no log (one metapage look
 * per call) -- and resolves each entry's xid once:
 *
 *	committed (or FROZEN), or	the event is consumed for good: gone
 *	  below the log's floor
 *	running, or this backend's	pending on that xid, as an event a running
 *								transaction deletes
 *	aborted						nothing: the event is examined as if the
 *								entry were not there (after a crash, the
 *								events of an unfinished dequeue come back)
 *
 * Writers then record, under the same page lock (the lock protocol with
 * DML of hidden.c: the event has no xmax, checked under that lock, and its
 * entry is in the tree before the lock is let go), one entry per run of
 * consecutive ids, in the consuming (sub)transaction and command.  Entries
 * of one call merge into one (same xid and command id).
 *
 * Whether a consumer writes entries is the queue's: once the queue has a
 * log (tree 2 of its consumer relation), every consumer of it does,
 * whatever its setting; the setting (on by default) only decides whether
 * a consumer starts a log on a queue that has none (spindle_consumed_begin).
 *
 * Locks.  The consumer relation: AccessShareLock to read,
 * RowExclusiveLock to write, to the end of the transaction.  The consume
 * log's lock (consume_log.c) for the whole examine() call of every queue
 * with a consumer relation, taken before any buffer lock and before the
 * look for the log: in RowExclusiveLock mode, which consumers share, or in
 * ExclusiveLock mode by the consumer that starts the log, so that no log
 * appears while another purges by xmax.  Two consumers of one event are
 * kept apart by its page's lock: each reads the entries again under it
 * and writes its own before letting it go (an ack of an event nobody
 * claimed has no claim to keep it apart from a dequeue at the head), and
 * the tree change itself is made under the log's write lock (an LWLock,
 * consume_log.c), never waited for with a tree buffer locked.  Tree buffer
 * locks are taken while an event page is locked, never the other way
 * round.
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
bool		spindle_consume_log = true;


void
spindle_queue_consumed_init(void)
{
	DefineCustomBoolVariable("spindle.consume_log",
							 "Consumers record what they take in the queue's consume log instead of purging event pages.",
							 "On, a consumer starts the log of a queue that has none; off, it purges by xmax while the queue has none. Once a queue has a log, every consumer of it writes entries whatever this setting.",
							 &spindle_consume_log,
							 true,
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
 * Pages the entries of one examination may need: a leaf split, its
 * parent's, a new root (its entries merge into one run per leaf); and two
 * more to make the log.
 */
#define LOG_PAGES_SPLIT		3
#define LOG_PAGES_CREATE	2

/*
 * Can this examination write its entries without extending the consumer
 * relation on a full disk?  A consumer that records in the log needs room
 * there when the log is made or a leaf splits, where a purge by xmax
 * changes event pages in place; so pages for it are made sure of first
 * (spindle_crel_reserve_pages), and when the file system has no room for
 * them the call purges by xmax instead (consumers go on on a full disk:
 * TAP 038).  Safe on a queue that has a log: every examination reads a
 * page's entries and its events' xmax under the page's lock, so a purge by
 * xmax and an entry never both take one event.
 */
static bool
room_for_entries(SpindleConsumeView *v)
{
	return spindle_crel_reserve_pages(v->crel, LOG_PAGES_SPLIT +
									  (v->has_log ? 0 : LOG_PAGES_CREATE));
}

/*
 * Set v up for an examine() of n located candidates of facade: write
 * entries if the caller consumes (dequeue, ack, a move) and the queue has
 * a log or spindle.consume_log is on (which starts one).  Takes the log's
 * lock before it looks for the log (consume_log.c): in RowExclusiveLock
 * mode, so the queue's consumers examine side by side, or, to start the
 * log, in ExclusiveLock mode.  The entries are read page by page, under
 * each event page's lock (spindle_consumed_page).  No buffer lock may be
 * held.
 *
 * Whether the queue has a log is the queue's, not the session's: only a
 * holder of the lock in exclusive mode creates the log (its first entry,
 * also the first after a TRUNCATE), so a consumer that found none purges
 * by xmax with no entry appearing before it is done, and one that found
 * it writes entries whatever its setting (review finding 5: an event
 * acked once by an entry and once by xmax).
 */
void
spindle_consumed_begin(SpindleConsumeView *v, Relation facade, int n,
					   bool write)
{
	Oid			croid;

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
	spindle_consume_log_lock_consumer(v->crel);
	v->locked = true;
	/* one look says whether there is a log, and a tree 3 (queue.c) */
	spindle_crel_trees_present(v->crel, &v->has_log, &v->reloc);
	if (v->has_log)
	{
		v->has_log = true;
		v->write = write && room_for_entries(v);
		return;
	}
	if (!(write && spindle_consume_log))
		return;					/* purges by xmax: no log can appear */
	/* it starts the log, alone: no consumer is purging by xmax meanwhile */
	spindle_consume_log_unlock_consumer(v->crel);
	spindle_consume_log_lock(v->crel);
	v->exclusive = true;
	v->has_log = spindle_consume_log_exists(v->crel);
	v->write = room_for_entries(v);
}

/*
 * Read what the log says of the candidates ids[0..n) of one event page,
 * which the caller holds locked (exclusively): every writer of an entry
 * for an event of that page holds its lock while it checks and writes, so
 * what is read here stays true until the page is let go.  One range read
 * of the log over the ids, then the floor (see spindle_consume_log_floor),
 * then one clog look per xid.  Nothing of the log on a queue without one,
 * nor for an annex's page (n = 0: its copies are consumed by xmax only).
 * Until v->reloc is known true, the same look (or one of its own) also
 * says whether tree 3 exists now: a mover writes its entry, the first one
 * creating the tree, under a share lock of the event's page, so a tree 3
 * not there under this page's lock holds no entry for its events.
 */
void
spindle_consumed_page(SpindleConsumeView *v, const int64 *ids, int n)
{
	int64		lo = PG_INT64_MAX;
	int64		hi = PG_INT64_MIN;
	int			got;
	SpindleConsumed *e;
	int			i;

	bool		log;
	bool		reloc;

	v->nentries = 0;
	v->floor = PG_INT64_MIN;
	if (v->crel == NULL)
		return;
	/* a log this examination started on an earlier page */
	if (n == 0 || (!v->has_log &&
				   !(v->exclusive &&
					 (v->has_log = spindle_consume_log_exists(v->crel)))))
	{
		/* no entry to read; a move of this page's events may still be */
		if (!v->reloc)
			v->reloc = spindle_reloc_exists(v->crel);
		return;
	}
	for (i = 0; i < n; i++)
	{
		lo = Min(lo, ids[i]);
		hi = Max(hi, ids[i]);
	}
	e = spindle_consume_log_read(v->crel, lo, hi + 1, &got);
	view_append(v, e, got);
	if (e != NULL)
		pfree(e);
	/* after the entries (see spindle_consume_log_floor); tree 3 too */
	spindle_crel_meta_look(v->crel, &log, &reloc, &v->floor);
	v->reloc |= reloc;
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

/* Let go of v: the log's lock now, the relation lock at the end. */
void
spindle_consumed_end(SpindleConsumeView *v)
{
	if (v->crel != NULL)
	{
		if (v->exclusive)
			spindle_consume_log_unlock(v->crel);
		else if (v->locked)
			spindle_consume_log_unlock_consumer(v->crel);
		relation_close(v->crel, NoLock);
	}
	if (v->entries != NULL)
		pfree(v->entries);
	if (v->verdicts != NULL)
		pfree(v->verdicts);
	memset(v, 0, sizeof(*v));
}

/*
 * The first id at or after from, and below to, that is neither in one of
 * the parked ranges parked[0..2 * nparked) (sorted, disjoint [start, end)
 * pairs) nor consumed for good by the consume log of facade: from itself
 * if none of them covers from.  One range read of the log over at most
 * SPINDLE_SKIP_LOOK_IDS ids, then its floor (after the entries, see
 * spindle_consume_log_floor), and one clog look per xid, as
 * spindle_consumed_page does; an entry of a running, aborted or this
 * backend's transaction, or an id neither covers, ends the run.  A
 * committed entry stays committed, so every id it covers is an event that
 * no consumer delivers again, and a parked run comes back when due: the
 * caller (queue.c, skip_settled) may move a head over them without
 * claiming and examining them one attempt at a time.  Takes the log's
 * lock in consumers' mode (no rebuild swaps the tree under the read) and
 * opens the consumer relation AccessShareLock, kept to the end of the
 * transaction.  No buffer lock or LWLock may be held.
 */
int64
spindle_consumed_skip(Relation facade, int64 from, int64 to,
					  const int64 *parked, int nparked)
{
	Oid			croid = spindle_consumer_rel_oid(RelationGetRelid(facade));
	Relation	crel;
	SpindleConsumed *e = NULL;
	int			n = 0;
	int64		pos = from;
	int64		floor = PG_INT64_MIN;
	FullTransactionId gone = InvalidFullTransactionId;
	int			i = 0;
	int			j = 0;

	to = Min(to, from + SPINDLE_SKIP_LOOK_IDS);
	if (from >= to || !OidIsValid(croid))
		return from;
	crel = try_relation_open(croid, AccessShareLock);
	if (crel == NULL)
		return from;
	spindle_consume_log_lock_consumer(crel);
	if (spindle_consume_log_exists(crel))
	{
		e = spindle_consume_log_read(crel, from, to, &n);
		floor = spindle_consume_log_floor(crel);
	}
	spindle_consume_log_unlock_consumer(crel);
	relation_close(crel, NoLock);
	pos = Max(pos, floor);
	while (pos < to)
	{
		TransactionId xid;

		while (j < nparked && parked[2 * j + 1] <= pos)
			j++;
		while (i < n && e[i].first + e[i].len <= pos)
			i++;
		if (j < nparked && parked[2 * j] <= pos)
		{
			pos = parked[2 * j + 1];	/* parked: back when due */
			continue;
		}
		if (i == n || e[i].first > pos)
			break;				/* an id neither covers */
		/* one clog look per xid: neighbours mostly share it */
		if (!(FullTransactionIdIsValid(gone) &&
			  FullTransactionIdEquals(e[i].fxid, gone)))
		{
			if (entry_verdict(&e[i], &xid) != SPINDLE_LOG_GONE)
				break;
			gone = e[i].fxid;
		}
		pos = e[i].first + e[i].len;
	}
	if (e != NULL)
		pfree(e);
	return Min(pos, to);
}

/*
 * Where a consumer state rebuilt from disk may start examining: the
 * consume log's floor, below which every event is consumed for every
 * snapshot (consume_log.c), or PG_INT64_MIN for a queue with no consumer
 * relation.  No event of an event spindle below the floor is ever
 * delivered again, parked or pending (a parked or claimed event has no
 * committed entry, and the floor only rises over contiguous committed
 * ones, or to the first id of the oldest event spindle), so a state whose
 * saved head is gone need not walk the consumed history below it.  A
 * moved event's id may lie below it once its spindle is gone: its copy in
 * an annex is reached through its parked run, which stays in tree 0 until
 * it is consumed (queue_parked.c, take_batch), never by the head.  Reads the
 * metapage (AccessShareLock on the consumer relation); the floor only
 * rises, so no lock of the log is needed.  No buffer lock or LWLock may be
 * held.
 */
int64
spindle_consumed_floor(Relation facade)
{
	Oid			croid = spindle_consumer_rel_oid(RelationGetRelid(facade));
	Relation	crel;
	int64		floor;

	if (!OidIsValid(croid))
		return PG_INT64_MIN;
	crel = try_relation_open(croid, AccessShareLock);
	if (crel == NULL)
		return PG_INT64_MIN;
	floor = spindle_consume_log_floor(crel);
	relation_close(crel, AccessShareLock);
	return floor;
}
