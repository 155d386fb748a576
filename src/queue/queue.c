/*-------------------------------------------------------------------------
 *
 * queue.c
 *	  Consuming queues: spindle.dequeue(), read(), ack(), set_visibility(),
 *	  their claims and leases, and waiting for events (long poll).
 *
 * A consumer takes positions (msg_ids) from its queue's shared state
 * (queue_state.c): first the items behind the head that are deliverable
 * again (returned, due, expired, no longer waited for), then the next
 * positions at the head, which it moves on.  They become its claim: an
 * item of kind CLAIM owned by it, which no other consumer takes, so
 * consumers never wait for each other and take no row locks.  It then
 * examines each claimed event on disk under an exclusive lock of its page:
 *
 *	- deliverable (inserted by a committed transaction -- in REPEATABLE
 *	  READ or SERIALIZABLE, one the caller's snapshot sees --, not
 *	  deleted, not locked, due): dequeue purges it -- xmax = the caller's
 *	  transaction, one WAL record per page (rangepurge.c), or with
 *	  spindle.consume_log on an entry of the queue's consume log per run
 *	  of ids (queue_consumed.c), the page untouched -- and returns it;
 *	  read() leases it instead: its claim, marked to_lease, becomes a
 *	  lease parked on disk (queue_parked.c) when the read() returns, so
 *	  that a read() that fails first leases nothing (the abort returns the
 *	  claim like any other), and a statement that fails after it hands
 *	  the lease back (undo_leases, saved on disk by save_handed_back);
 *	  an event read max_reads times is purged by either and moved to the
 *	  dead-letter queue;
 *	- inserted, deleted, locked or consumed (a consume log entry) by a
 *	  running transaction: PENDING on it;
 *	- not due: DELAYED until its visible_at;
 *	- purged or consumed by a committed transaction, aborted, or never an
 *	  event: gone.
 *
 * and records what it found in place of its claim.  Where its events are
 * comes from the event cache (cache.c) when it has them, else from the
 * directory and the slot map; the examination on the page is the same
 * either way, so the cache changes no outcome.
 *
 * Moved events (compaction: docs/design.md, "Compaction of sparse
 * spindles", section 4 "Consumers", "Step 3 as built").  On a queue whose
 * consumer relation has a tree 3, locate() first resolves each msg_id to
 * the copy it is at now: its event spindle's copy, or tree 4's oldest
 * copy if that spindle is gone, then tree 3's links while their movers
 * committed (a running move: PENDING on the mover); a cached place counts
 * only if it is that copy's.  examine() probes tree 3 for each copy again
 * under its page's exclusive lock -- the mover writes its entry under a
 * share lock of the page -- and what it finds moved meanwhile, or in a
 * spindle dropped since the directory was read, is located again
 * (locate_examine, a bounded number of passes).  A copy in an annex is
 * consumed by xmax, never by a consume log entry.  An ack waits for a
 * running move of its event.  Whatever goes wrong on
 * the way (an error, a full item pool), the unrecorded rest of a claim
 * becomes RETURNED, which only means "examine again": examining is always
 * right, since the events themselves say what they are.  So every event
 * behind the head is either purged for good or covered by an item, and no
 * event is lost or delivered twice: a delivered event is purged by the
 * claimer's (sub)transaction, whose end decides -- commit frees the claim
 * (xact callback), abort or rollback to a savepoint returns it ahead of
 * newer events, and so does the death of the backend (the abort runs) or a
 * crash (the state is rebuilt from disk, where the purge was undone).
 *
 * Locks: the consume log's lock for each examination of a queue with a
 * consumer relation, taken before any buffer lock, in a mode the queue's
 * consumers share (see queue_consumed.c); the consumer relation
 * AccessShareLock to read trees 3 and 4 (buffer locks of those trees are
 * taken under an event page's lock, never the other way round); the queue table in RowExclusiveLock (dequeue,
 * read, ack) or AccessShareLock (set_visibility); each spindle touched in
 * RowExclusiveLock, kept to the end of the transaction.  A long poll
 * releases, before it sleeps (it holds no claim then and purged nothing),
 * every lock the call took -- the table's and those its attempts took
 * under a resource owner of their own, spindles included -- and takes
 * the table again, with the rights checked again, when it wakes; locks
 * the transaction held before the call stay.  A state's LWLock never
 * while a buffer lock is acquired, and a buffer lock taken before a state
 * lock (see queue_state.c).  PREPARE TRANSACTION of a transaction holding
 * claims is refused: nothing would end the claim.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/multixact.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "common/int.h"
#include "common/int128.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "portability/instr_time.h"
#include "storage/bufmgr.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "tcop/pquery.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/portal.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/rls.h"
#include "utils/timestamp.h"

#include "queue/spindle_queue.h"

PG_FUNCTION_INFO_V1(spindle_dequeue);
PG_FUNCTION_INFO_V1(spindle_read);
PG_FUNCTION_INFO_V1(spindle_ack);
PG_FUNCTION_INFO_V1(spindle_ack_many);
PG_FUNCTION_INFO_V1(spindle_set_visibility);

/* the columns of a queue table */
#define QCOL_MSG_ID		SPINDLE_QUEUE_ATT_MSG_ID
#define QCOL_ENQUEUED	SPINDLE_QUEUE_ATT_ENQUEUED_AT
#define QCOL_VISIBLE	SPINDLE_QUEUE_ATT_VISIBLE_AT
#define QCOL_PAYLOAD	SPINDLE_QUEUE_ATT_PAYLOAD

/* t + us, saturating: the largest intervals mean "for good" */
static inline TimestampTz
plus_usecs(TimestampTz t, int64 us)
{
	TimestampTz result;

	if (pg_add_s64_overflow(t, us, &result))
		return PG_INT64_MAX;
	return result;
}


/* What examining a claimed event found. */
typedef enum EvOutcome
{
	EV_DELIVER,
	EV_GONE,
	EV_PENDING,
	EV_PARKED,					/* pending, parked on disk (park_outcome) */
	EV_DELAYED,
	EV_RETRY,
	EV_UNSEEN					/* committed after the caller's snapshot */
} EvOutcome;

/* One claimed position. */
typedef struct Candidate
{
	int64		msg_id;
	int			source;			/* index into the claim's sources */
	int32		read_count;
	bool		dead;			/* read more than max_reads: to be moved */
	EvOutcome	outcome;
	TransactionId xid;			/* PENDING on it */
	TimestampTz due;			/* DELAYED until then */
	bool		located;
	Oid			segment;
	int64		spindle_no;
	int64		k;				/* its slot in that spindle */
	ItemPointerData ptid;
	bool		annex;			/* that copy is in an annex (moved) */
	bool		mover;			/* EV_PENDING on a running move */
	bool		relocate;		/* examine found it moved meanwhile */
	int			origin;			/* locate_examine: its place in the caller's array */
	bool		stale_cache;	/* the cache's place for it is an old copy */
	HeapTuple	tuple;			/* delivered: a copy (NULL: from the cache) */
	bool		cached;			/* the event cache knew where it is */
	TransactionId cached_xmin;	/* ... who inserted it */
	bool		from_cache;		/* delivered: payload and enqueued_at ... */
	TimestampTz enqueued_at;	/* ... are these */
	struct varlena *payload;
} Candidate;

/* An item taken as (part of) a claim, with the positions it covers. */
typedef struct Source
{
	QueueItem  *item;
	uint32		generation;
	int64		start;
	int64		end;
	int32		read_count;
	QueueItemKind was;			/* what the item was */
	bool		parked;			/* its run stays parked until settled */
} Source;

/* This backend's claims, for the transaction callbacks. */
typedef struct ClaimRef
{
	dlist_node	node;
	int			slot;			/* queue state */
	int			index;			/* item */
	uint32		generation;
	SubTransactionId subid;
	uint64		lease_call;		/* the read() call that made it, or 0 */
	bool		purge;			/* it purged events (dequeue, ack, a move to
								 * the dead-letter queue): PREPARE refused */
	Oid			relid;			/* the queue table */
	int64		spilled;		/* > 0: no item any more, but this many
								 * purged events parked on disk
								 * (spill_claims), counted at commit */
} ClaimRef;

static dlist_head my_claims = DLIST_STATIC_INIT(my_claims);	/* ClaimRefs */

/*
 * The read() call running in this backend (0: none), so that its claims
 * to be leased are granted by it and no other (a read() may run inside
 * another one, in a trigger on a dead-letter queue); see grant_leases.
 */
static uint64 lease_call_seq = 0;
static uint64 current_lease_call = 0;

/*
 * Portals run by dequeue in a subtransaction newer than the portal (a
 * cursor fetched inside a savepoint): if that subtransaction rolls back,
 * the rows the portal still holds were returned by purges it undid, and
 * the portal must hand out no more of them (see note_portal).
 */
typedef struct DequeuePortal
{
	char	   *name;
	SubTransactionId create_subid;	/* the portal's */
	SubTransactionId subid;		/* where dequeue ran (re-parented) */
} DequeuePortal;

static List *portal_runs = NIL; /* DequeuePortals, in TopTransactionContext */

/*
 * Leases granted by the read() calls of the current statement: should the
 * statement fail after read() returned (a cancel while its rows are sent
 * or counted, an error later in the same statement), nobody got them, and
 * the abort hands them back (undo_leases).  A later statement's failure,
 * or a ROLLBACK, leaves them: leases do not depend on the transaction.
 */
typedef struct GrantedLease
{
	Oid			relid;			/* the queue table */
	int			slot;			/* its state, when granted */
	int64		start;			/* the leased ids [start, end) */
	int64		end;
	int32		read_count;		/* as granted */
	TimestampTz due;			/* the lease's end, as granted */
	SubTransactionId subid;		/* where read() ran (re-parented) */
	TimestampTz stmt_start;		/* the statement it ran in */
	uint64		portal_seq;		/* its portal (GrantPortal), 0: none */
} GrantedLease;

static List *granted_leases = NIL;	/* GrantedLeases, TopTransactionContext */

/*
 * The portal a read() granted leases in.  The statements of one simple
 * query string share their start time, so a failure of a later statement
 * of the string would hand back the leases of an earlier one whose rows
 * the client has (review r1, finding 7: delivered twice).  So a callback
 * of the portal's memory context, deleted when the portal is dropped,
 * takes the portal's leases off granted_leases: at the end of a statement
 * that succeeded, the rows are the client's; after an abort, the failed
 * portal is dropped by the cleanup that follows undo_leases.
 */
typedef struct GrantPortal
{
	MemoryContextCallback cb;
	uint64		seq;
} GrantPortal;

static MemoryContext grant_portal_ctx = NULL;	/* that of the last grant */
static uint64 grant_portal_seq = 0;

/*
 * Leases undo_leases handed back, still parked LEASED on disk until their
 * end: the abort that hands them back cannot write (no relation can be
 * opened there), so the first safe point of this backend makes them READY
 * and due now on disk (save_handed_back): its next commit (PRE_COMMIT,
 * the transaction's own if a subtransaction failed), its next consumer
 * call, or its exit.  Until then the item the hand-back made in shared
 * memory delivers them (and keeps the state from eviction: it has a read
 * count); only a crash in between loses the hand-back, and the events
 * come back when the lease would have ended.  In TopMemoryContext: the
 * hand-backs of this backend not saved yet.
 */
typedef struct HandedBack
{
	Oid			relid;			/* the queue table */
	ParkedRun	run;			/* the ids, read count and end as granted */
} HandedBack;

static HandedBack *handed_back = NULL;
static int	nhanded_back = 0;
static int	handed_back_room = 0;
static bool handed_back_exit_registered = false;

/*
 * The claim this backend's last ack or dequeue made, so that the next one
 * of the following events joins it instead of taking an item of its own
 * (see join_last_claim).
 */
static struct
{
	int			slot;
	int			index;
	uint32		generation;
	SubTransactionId subid;
	LocalTransactionId lxid;
} last_claim = {-1, -1, 0, InvalidSubTransactionId, InvalidLocalTransactionId};
static List *enqueued_to = NIL; /* queue table OIDs, in TopTransactionContext */

/*
 * This transaction's dequeue may have finished a full spindle (see
 * take_claims): once it commits, that spindle may be all purged, so wake
 * the worker to drop it now rather than a naptime later (at 1 000 events
 * per second and events_per_spindle = 1000 a naptime is a spindle's worth
 * of events).  A wake-up that finds nothing to drop costs one round.
 */
static bool nudge_at_commit = false;
static bool callbacks_registered = false;

/*
 * This transaction acknowledged an event that no item covered (ahead of
 * the head): purged with no claim, so holds_claims() cannot see it, but
 * PREPARE is refused after an ack all the same (docs/queues.md).
 */
static bool acked_unclaimed = false;

/*
 * Events this transaction acknowledged while a lease parked on disk held
 * them: purged with no claim (the lease stays parked, so an ack that rolls
 * back leaves it leased, and one that is still running when the lease
 * ends finds the event pending on its xmax), then cut from the parked
 * runs just before the transaction commits (cut_acked_leases), so that
 * spindle.queues and set_visibility no longer see them.
 */
typedef struct AckedLease
{
	Oid			relid;			/* the queue table */
	int64		msg_id;
	SubTransactionId subid;		/* where acknowledged (re-parented) */
	bool		unclaimed;		/* purged with no claim: counted at commit */
} AckedLease;

static List *acked_leases = NIL;	/* AckedLeases, TopTransactionContext */
static bool acked_leases_cut = false;	/* cut by PRE_COMMIT */

static void no_room_for_item(void);
static void join_last_ack(QueueState *qs, QueueItem *item, uint32 generation);
static QueueItem *join_last_claim(QueueState *qs, QueueItem *item);
static void fail_portals(SubTransactionId subid);
static void undo_leases(SubTransactionId subid);
static void save_handed_back(void);
static int	return_parked(QueueState *qs, ParkedRun *runs, int n);
static void queue_xact_callback(XactEvent event, void *arg);
static void cut_acked_leases(void);
static void count_acked_leases(void);
static void forget_acked_leases(SubTransactionId subid);
static void queue_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
								   SubTransactionId parentSubid, void *arg);

static void
register_callbacks(void)
{
	if (callbacks_registered)
		return;
	RegisterXactCallback(queue_xact_callback, NULL);
	RegisterSubXactCallback(queue_subxact_callback, NULL);
	callbacks_registered = true;
}

/*
 * An insert into a queue table: wake its consumers when the transaction
 * commits.  Called by the access method for every insert.
 */
void
spindle_queue_note_insert(Relation rel)
{
	MemoryContext old;
	Oid			relid = RelationGetRelid(rel);

	if (!spindle_relation_is_queue(rel) || list_member_oid(enqueued_to, relid))
		return;
	register_callbacks();
	old = MemoryContextSwitchTo(TopTransactionContext);
	enqueued_to = lappend_oid(enqueued_to, relid);
	MemoryContextSwitchTo(old);
}

/* ---------- transaction callbacks ---------- */

/*
 * End this backend's claims: freed at commit (their events are purged for
 * good), returned otherwise (their events are examined again); with
 * subid valid, only those of that subtransaction.  Never errors.
 */
static void
end_claims(bool commit, SubTransactionId subid)
{
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &my_claims)
	{
		ClaimRef   *ref = dlist_container(ClaimRef, node, iter.cur);
		QueueState *qs;
		QueueItem  *item;
		bool		wake = !commit;

		if (subid != InvalidSubTransactionId && ref->subid != subid)
			continue;
		if (ref->spilled > 0)
		{
			/* its events wait on disk for our xid: counted if it commits */
			if (commit && (qs = spindle_queue_state(ref->relid)) != NULL)
				pg_atomic_fetch_add_u64(&qs->dequeued, (uint64) ref->spilled);
			dlist_delete(&ref->node);
			pfree(ref);
			continue;
		}
		qs = spindle_queue_state_at(ref->slot);
		item = spindle_qitem_at(ref->index);
		LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
		if (item->generation == ref->generation &&
			item->kind == QITEM_CLAIM && item->owner == MyProc->pgprocno)
		{
			if (item->to_lease)
			{
				/*
				 * A lease its read() failed before granting: nobody got
				 * these events, so their read count stays; examine again.
				 */
				qs->nleases--;
				item->to_lease = false;
				item->kind = QITEM_RETURNED;
				wake = true;
			}
			else if (commit && item->mixed)
			{
				/* some of its events were not ours: examine them again */
				item->kind = QITEM_RETURNED;
			}
			else if (commit)
			{
				pg_atomic_fetch_add_u64(&qs->dequeued,
										(uint64) (item->end - item->start));
				spindle_qitem_free(qs, item);
				item = NULL;
			}
			else
				item->kind = QITEM_RETURNED;	/* examined again */
			if (item != NULL)
			{
				item->owner = -1;
				item->owner_lxid = InvalidLocalTransactionId;
				item->xid = InvalidTransactionId;
				item->mixed = false;
			}
		}
		LWLockRelease(spindle_queue_lock(qs));
		if (wake)
			ConditionVariableBroadcast(&qs->cv);
		dlist_delete(&ref->node);
		pfree(ref);
	}
}

static void
wake_enqueued(void)
{
	ListCell   *lc;

	foreach(lc, enqueued_to)
	{
		QueueState *qs = spindle_queue_state(lfirst_oid(lc));

		if (qs != NULL)
			ConditionVariableBroadcast(&qs->cv);
	}
}

/* Whether this backend holds a claim (some refs may be of former claims). */
static bool
holds_claims(void)
{
	dlist_iter	iter;

	dlist_foreach(iter, &my_claims)
	{
		ClaimRef   *ref = dlist_container(ClaimRef, node, iter.cur);
		QueueState *qs = spindle_queue_state_at(ref->slot);
		QueueItem  *item = spindle_qitem_at(ref->index);
		bool		held;

		/* an evicted state no longer shows it */
		if (ref->purge)
			return true;
		LWLockAcquire(spindle_queue_lock(qs), LW_SHARED);
		held = item->generation == ref->generation &&
			item->kind == QITEM_CLAIM && item->owner == MyProc->pgprocno;
		LWLockRelease(spindle_queue_lock(qs));
		if (held)
			return true;
	}
	return false;
}

/*
 * Remember that this transaction purged msg_id while a parked run holds it
 * (an ack of a lease, or a dequeue or ack of an event taken back from a
 * run that stays parked until settled): cut at commit.  unclaimed: purged
 * with no claim, so counted as dequeued at commit here.
 */
static void
note_acked_lease(Oid relid, int64 msg_id, bool unclaimed)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	AckedLease *a = palloc(sizeof(AckedLease));

	a->relid = relid;
	a->msg_id = msg_id;
	a->subid = GetCurrentSubTransactionId();
	a->unclaimed = unclaimed;
	acked_leases = lappend(acked_leases, a);
	MemoryContextSwitchTo(old);
}

/* Subtransaction subid rolls back: its acks of parked leases did not happen. */
static void
forget_acked_leases(SubTransactionId subid)
{
	ListCell   *lc;

	foreach(lc, acked_leases)
	{
		AckedLease *a = lfirst(lc);

		if (a->subid == subid)
			acked_leases = foreach_delete_current(acked_leases, lc);
	}
}

static int
cmp_acked(const ListCell *a, const ListCell *b)
{
	const AckedLease *x = lfirst(a);
	const AckedLease *y = lfirst(b);

	if (x->relid != y->relid)
		return x->relid < y->relid ? -1 : 1;
	return x->msg_id < y->msg_id ? -1 : x->msg_id > y->msg_id ? 1 : 0;
}

/*
 * The transaction commits (PRE_COMMIT, it can still fail): cut the ids
 * it acknowledged out of their parked leases, per queue, consecutive ids
 * as one range.  Should the commit fail after this, the events are not
 * purged and no lease holds them any more: the abort hands them back as
 * items to examine again (return_acked_leases).
 */
static void
cut_acked_leases(void)
{
	ListCell   *lc;
	int64	   *ranges;
	int			n = 0;
	Oid			relid = InvalidOid;

	if (acked_leases == NIL)
		return;
	list_sort(acked_leases, cmp_acked);
	ranges = palloc(sizeof(int64) * 2 * list_length(acked_leases));
	foreach(lc, acked_leases)
	{
		AckedLease *a = lfirst(lc);

		if (a->relid != relid && n > 0)
		{
			spindle_park_forget(relid, ranges, n);
			n = 0;
		}
		relid = a->relid;
		if (n > 0 && ranges[2 * n - 1] >= a->msg_id)
			ranges[2 * n - 1] = Max(ranges[2 * n - 1], a->msg_id + 1);
		else
		{
			ranges[2 * n] = a->msg_id;
			ranges[2 * n + 1] = a->msg_id + 1;
			n++;
		}
	}
	if (n > 0)
		spindle_park_forget(relid, ranges, n);
	pfree(ranges);
	acked_leases_cut = true;
}

/*
 * The transaction committed: its acks of parked leases count in
 * spindle.queues.dequeued_total as the acks of claims do (end_claims).
 * A state not loaded any more keeps no count.
 */
static void
count_acked_leases(void)
{
	ListCell   *lc;

	foreach(lc, acked_leases)
	{
		AckedLease *a = lfirst(lc);
		QueueState *qs;

		if (a->unclaimed && (qs = spindle_queue_state(a->relid)) != NULL)
			pg_atomic_fetch_add_u64(&qs->dequeued, 1);
	}
}

/*
 * The transaction aborts after cut_acked_leases (a commit that failed):
 * the events it acknowledged are examined again, their leases being gone.
 * Never errors; a state evicted meanwhile, or a full pool, leaves them to
 * the next rebuild of the state from disk.
 */
static void
return_acked_leases(void)
{
	ListCell   *lc;

	if (acked_leases_cut)
		foreach(lc, acked_leases)
		{
			AckedLease *a = lfirst(lc);
			QueueState *qs = spindle_queue_state(a->relid);
			ParkedRun	run;

			if (qs == NULL)
				continue;
			run.start = a->msg_id;
			run.end = a->msg_id + 1;
			run.read_count = 0;
			run.due = 0;
			run.kind = SPINDLE_RUN_LEASED;
			run.xid = InvalidTransactionId;
			LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
			if (qs->relid == a->relid && qs->dbid == MyDatabaseId && qs->valid)
				(void) return_parked(qs, &run, 1);
			LWLockRelease(spindle_queue_lock(qs));
		}
	acked_leases = NIL;
	acked_leases_cut = false;
}

static void
queue_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			cut_acked_leases();
			save_handed_back();
			break;
		case XACT_EVENT_PRE_PREPARE:
			if (acked_unclaimed || holds_claims())
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that dequeued or acknowledged queue events")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			end_claims(true, InvalidSubTransactionId);
			count_acked_leases();
			acked_leases = NIL;
			acked_leases_cut = false;
			wake_enqueued();
			enqueued_to = NIL;
			acked_unclaimed = false;
			portal_runs = NIL;
			granted_leases = NIL;
			if (nudge_at_commit)
				spindle_wake_worker();
			nudge_at_commit = false;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			end_claims(false, InvalidSubTransactionId);
			undo_leases(InvalidSubTransactionId);
			return_acked_leases();
			enqueued_to = NIL;
			portal_runs = NIL;
			granted_leases = NIL;
			nudge_at_commit = false;
			acked_unclaimed = false;
			break;
		case XACT_EVENT_PREPARE:
			acked_leases = NIL;
			acked_leases_cut = false;
			enqueued_to = NIL;
			portal_runs = NIL;
			granted_leases = NIL;
			nudge_at_commit = false;
			acked_unclaimed = false;
			break;
		default:
			break;
	}
}

static void
queue_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;

	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		end_claims(false, mySubid);
		fail_portals(mySubid);
		undo_leases(mySubid);
		forget_acked_leases(mySubid);
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		dlist_iter	iter;

		dlist_foreach(iter, &my_claims)
		{
			ClaimRef   *ref = dlist_container(ClaimRef, node, iter.cur);

			if (ref->subid == mySubid)
				ref->subid = parentSubid;
		}
		foreach(lc, portal_runs)
		{
			DequeuePortal *run = lfirst(lc);

			if (run->subid == mySubid)
				run->subid = parentSubid;
		}
		foreach(lc, granted_leases)
		{
			GrantedLease *g = lfirst(lc);

			if (g->subid == mySubid)
				g->subid = parentSubid;
		}
		foreach(lc, acked_leases)
		{
			AckedLease *a = lfirst(lc);

			if (a->subid == mySubid)
				a->subid = parentSubid;
		}
	}
}

/*
 * The (sub)transaction subid (Invalid: the transaction) aborts: if that
 * happens in the statement that ran read(), hand back the leases read()
 * granted in it at once, as items to examine again (which win over the
 * parked leases: queue_parked.c, P3), but for ids an item holds (an ack
 * in the same statement), and note them to be saved on disk at the next
 * safe point (HandedBack): the parked lease stays until then.  The read
 * still counts: the statement may have failed on the event itself (a
 * poison message its own query processes), which must still reach the
 * dead-letter queue after max_reads deliveries.  Never errors.
 */
static void
undo_leases(SubTransactionId subid)
{
	ListCell   *lc;
	TimestampTz stmt_start = GetCurrentStatementStartTimestamp();

	foreach(lc, granted_leases)
	{
		GrantedLease *g = lfirst(lc);
		QueueState *qs;
		ParkedRun	run;

		if ((subid != InvalidSubTransactionId && g->subid != subid) ||
			g->stmt_start != stmt_start || g->slot < 0)
			continue;
		qs = spindle_queue_state_at(g->slot);
		run.start = g->start;
		run.end = g->end;
		run.read_count = g->read_count;
		run.due = 0;
		run.kind = SPINDLE_RUN_LEASED;
		run.xid = InvalidTransactionId;
		LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
		/* the state may have been evicted since read() returned */
		if (qs->relid == g->relid && qs->dbid == MyDatabaseId && qs->valid)
			(void) return_parked(qs, &run, 1);
		LWLockRelease(spindle_queue_lock(qs));
		ConditionVariableBroadcast(&qs->cv);
		/* they count against max_depth again (queue_limits.c) */
		spindle_queue_limit_leases_back(g->relid);
		g->slot = -1;
		/* saved on disk at the next safe point (note_granted made room) */
		if (nhanded_back < handed_back_room)
		{
			HandedBack *hb = &handed_back[nhanded_back++];

			hb->relid = g->relid;
			hb->run = run;
			hb->run.due = g->due;
		}
	}
}

/*
 * Save the hand-backs of this backend on disk (see HandedBack): each
 * lease still parked as granted becomes READY and due now, flushed (rare:
 * a statement failed after its read()).  Runs at a commit, at the start
 * of a consumer call and at the backend's exit, each time on behalf of
 * statements that are over, so it neither waits for a lock nor fails for
 * one (review r1, findings 2 and 3: a TRUNCATE of the queue under way
 * made an unrelated commit fail, and a backend's exit wait forever with
 * interrupts held): the hand-backs of a queue whose consumer relation is
 * busy stay in the list for the next safe point.  Taken off the list
 * first, so that another error fails one commit, not every one (they then
 * come back when their lease would have ended).  In a valid transaction,
 * holding no LWLock or buffer lock.
 */
static void
save_handed_back(void)
{
	HandedBack *hb;
	ParkedRun  *runs;
	int			n = nhanded_back;
	int			i;
	int			j;
	bool		saved = false;

	if (n == 0 || !IsTransactionState())
		return;
	hb = palloc(sizeof(HandedBack) * n);
	memcpy(hb, handed_back, sizeof(HandedBack) * n);
	nhanded_back = 0;
	runs = palloc(sizeof(ParkedRun) * n);
	for (i = 0; i < n; i = j)
	{
		int			m = 0;

		for (j = i; j < n && hb[j].relid == hb[i].relid; j++)
			runs[m++] = hb[j].run;
		if (spindle_park_hand_back(hb[i].relid, runs, m, true))
			saved = true;
		else
		{
			/* busy: back on the list (it had room for them) */
			memcpy(&handed_back[nhanded_back], &hb[i],
				   sizeof(HandedBack) * (j - i));
			nhanded_back += j - i;
		}
	}
	/* durable now: the transaction that saves them may write nothing else */
	if (saved)
		XLogFlush(XactLastRecEnd);
	pfree(runs);
	pfree(hb);
}

/*
 * At backend exit (a client that disconnects after its statement failed,
 * a fast shutdown, a backend terminated in a statement after its read()
 * returned): save the hand-backs in a transaction of their own.  The
 * transaction under way, if any, is aborted first (as ShutdownPostgres,
 * which runs after this, would), so that what its abort hands back is
 * saved too.  save_handed_back waits for no lock, so the exit cannot hang
 * with interrupts held; what it cannot save now comes back when its lease
 * would have ended.
 */
static void
save_handed_back_at_exit(int code, Datum arg)
{
	if (!OidIsValid(MyDatabaseId))
		return;
	HOLD_INTERRUPTS();
	AbortOutOfAnyTransaction();
	if (nhanded_back > 0)
	{
		StartTransactionCommand();
		save_handed_back();
		CommitTransactionCommand();
	}
	RESUME_INTERRUPTS();
}

static uint64 grant_portal_register(MemoryContext ctx);

/*
 * The portal of GrantPortal arg is dropped.  If no statement is running
 * (the portal of a top-level statement that ended, in either protocol),
 * its leases are given out: off the list.  If one is (an SPI cursor of a
 * function, a PL/pgSQL FOR loop over read(), closed while the statement
 * that called the function goes on: review r2, finding 3), its leases
 * belong to that statement's portal from now on, which undo_leases still
 * hands back should the statement fail.
 */
static void
grant_portal_ended(void *arg)
{
	uint64		seq = ((GrantPortal *) arg)->seq;
	uint64		to = 0;
	ListCell   *lc;

	if (seq == grant_portal_seq)
		grant_portal_ctx = NULL;
	if (granted_leases == NIL)
		return;
	if (ActivePortal != NULL && ActivePortal->portalContext != NULL)
		to = grant_portal_register(ActivePortal->portalContext);
	foreach(lc, granted_leases)
	{
		GrantedLease *g = lfirst(lc);

		if (g->portal_seq != seq)
			continue;
		if (to != 0)
			g->portal_seq = to;
		else
		{
			granted_leases = foreach_delete_current(granted_leases, lc);
			pfree(g);
		}
	}
}

/*
 * The GrantPortal number of the portal whose memory context is ctx,
 * registering its callback the first time.
 */
static uint64
grant_portal_register(MemoryContext ctx)
{
	GrantPortal *gp;

	if (ctx == grant_portal_ctx)
		return grant_portal_seq;
	gp = MemoryContextAlloc(ctx, sizeof(GrantPortal));
	gp->seq = ++grant_portal_seq;
	gp->cb.func = grant_portal_ended;
	gp->cb.arg = gp;
	MemoryContextRegisterResetCallback(ctx, &gp->cb);
	grant_portal_ctx = ctx;
	return gp->seq;
}

/* The GrantPortal number of the running portal (0 if none). */
static uint64
grant_portal(void)
{
	return PortalContext != NULL ? grant_portal_register(PortalContext) : 0;
}

/*
 * Remember a lease read() granted (a run parked on disk for state qs),
 * for undo_leases.  No lock held.
 */
static void
note_granted(QueueState *qs, const ParkedRun *run)
{
	MemoryContext old;
	GrantedLease *g;
	TimestampTz stmt_start = GetCurrentStatementStartTimestamp();

	/* those of earlier statements can no longer be undone */
	if (granted_leases != NIL &&
		((GrantedLease *) linitial(granted_leases))->stmt_start != stmt_start)
	{
		list_free_deep(granted_leases);
		granted_leases = NIL;
	}
	old = MemoryContextSwitchTo(TopTransactionContext);
	g = palloc(sizeof(GrantedLease));
	g->relid = qs->relid;
	g->slot = qs->slot;
	g->start = run->start;
	g->end = run->end;
	g->read_count = run->read_count;
	g->due = run->due;
	g->subid = GetCurrentSubTransactionId();
	g->stmt_start = stmt_start;
	g->portal_seq = grant_portal();
	granted_leases = lappend(granted_leases, g);
	MemoryContextSwitchTo(old);
	/* room for undo_leases to note each of them, which must not allocate */
	if (handed_back_room < nhanded_back + list_length(granted_leases))
	{
		int			room = Max(16, 2 * (nhanded_back +
										list_length(granted_leases)));

		handed_back = handed_back == NULL ?
			MemoryContextAlloc(TopMemoryContext, sizeof(HandedBack) * room) :
			repalloc(handed_back, sizeof(HandedBack) * room);
		handed_back_room = room;
	}
	if (!handed_back_exit_registered)
	{
		before_shmem_exit(save_handed_back_at_exit, (Datum) 0);
		handed_back_exit_registered = true;
	}
}

/*
 * Remember that dequeue runs in the active portal, if that portal was
 * created in an older subtransaction than the current one (a cursor
 * declared before a SAVEPOINT and fetched after it): should the current
 * subtransaction roll back, its purges are undone and the events handed
 * out again, so the rows the portal materialized must not be fetched any
 * more (fail_portals).  A portal created in the current subtransaction
 * fails with it anyway.
 */
static void
note_portal(void)
{
	MemoryContext old;
	DequeuePortal *run;

	if (ActivePortal == NULL || ActivePortal->name == NULL ||
		ActivePortal->createSubid == GetCurrentSubTransactionId())
		return;
	if (portal_runs != NIL)
	{
		/* a loop of calls in one portal and subtransaction: once */
		run = llast(portal_runs);
		if (run->subid == GetCurrentSubTransactionId() &&
			run->create_subid == ActivePortal->createSubid &&
			strcmp(run->name, ActivePortal->name) == 0)
			return;
	}
	register_callbacks();
	old = MemoryContextSwitchTo(TopTransactionContext);
	run = palloc(sizeof(DequeuePortal));
	run->name = pstrdup(ActivePortal->name);
	run->create_subid = ActivePortal->createSubid;
	run->subid = GetCurrentSubTransactionId();
	portal_runs = lappend(portal_runs, run);
	MemoryContextSwitchTo(old);
}

/*
 * Subtransaction subid rolls back: fail the portals in which dequeue ran
 * in it and which are still there to be fetched from (READY), so that a
 * FETCH from them errors instead of returning events that are no longer
 * purged.  A portal still running (the statement of a PL/pgSQL function
 * whose EXCEPTION block caught the error) is left alone: its rows are
 * not materialized past the error.  Never errors.
 */
static void
fail_portals(SubTransactionId subid)
{
	ListCell   *lc;

	foreach(lc, portal_runs)
	{
		DequeuePortal *run = lfirst(lc);
		Portal		portal;

		if (run->subid != subid)
			continue;
		portal = GetPortalByName(run->name);
		if (PortalIsValid(portal) && portal->createSubid == run->create_subid &&
			portal->status == PORTAL_READY)
			MarkPortalFailed(portal);
		run->subid = InvalidSubTransactionId;
	}
}

/*
 * Make item (of qs, locked) a claim of this backend's (sub)transaction and
 * remember it for the transaction callbacks.  Should the remembering fail
 * (out of memory), the claim still ends: consumers take a claim whose
 * owner's transaction is over as one to examine again (item_ready).
 */
static ClaimRef *
remember_claim(QueueState *qs, QueueItem *item)
{
	ClaimRef   *ref;

	item->owner = MyProc->pgprocno;
	item->owner_lxid = MyProc->lxid;
	register_callbacks();
	ref = MemoryContextAlloc(TopMemoryContext, sizeof(ClaimRef));
	ref->slot = qs->slot;
	ref->index = item->index;
	ref->generation = item->generation;
	ref->subid = GetCurrentSubTransactionId();
	ref->lease_call = current_lease_call;
	ref->purge = false;
	ref->relid = qs->relid;
	ref->spilled = 0;
	dlist_push_tail(&my_claims, &ref->node);
	return ref;
}

/*
 * Whether item, of this backend's claim ref, holds events that our open
 * (sub)transaction purged and nothing else: what spill_claims may park.
 * Not a claim of events a parked run still holds until what consumes them
 * commits (item->parked: an ended lease, a run taken back, a delayed event
 * compaction moved, reached only through tree 0): a PENDING run parked
 * over it would replace that run, and once taken after a rollback leave
 * the event in shared memory only, lost at a crash or an eviction (review
 * rv7, finding 1).  The caller holds the queue's lock.
 */
static bool
spillable(const ClaimRef *ref, const QueueItem *item)
{
	return ref->purge && ref->spilled == 0 && ref->lease_call == 0 &&
		item->generation == ref->generation && item->kind == QITEM_CLAIM &&
		item->owner == MyProc->pgprocno && !item->to_lease && !item->mixed &&
		!item->parked && TransactionIdIsValid(item->xid);
}

/*
 * Fold spilled claim ref into an older one of the same queue and
 * subtransaction, if any, so that a transaction that spills again and
 * again keeps one reference per queue, not one per claim.
 */
static void
merge_spilled(ClaimRef *ref)
{
	dlist_iter	iter;

	dlist_foreach(iter, &my_claims)
	{
		ClaimRef   *other = dlist_container(ClaimRef, node, iter.cur);

		if (other == ref)
			return;
		if (other->spilled > 0 && other->relid == ref->relid &&
			other->subid == ref->subid)
		{
			other->spilled += ref->spilled;
			dlist_delete(&ref->node);
			pfree(ref);
			return;
		}
	}
}

/*
 * Move this backend's claims of qs that purged events (dequeue, ack) out
 * of the queue's items: each becomes a run parked on disk, PENDING on the
 * (sub)transaction that purged its events (queue_parked.c), and its item
 * is freed.  A queue has SPINDLE_ITEMS_PER_QUEUE items, and a claim holds
 * one until its transaction ends, so consumers that each took events one
 * call at a time in open transactions ran the queue out of items: two of
 * them, 128 dequeue(q, 1) calls each, and every consumer of the queue
 * failed with 53400 until one of them ended.  A parked PENDING run keeps
 * what the claim kept: others find its events pending on our xid (the log
 * entry or the xmax says so too) and look at the run again a second later
 * while we run; once we commit it is found consumed, and if we (or the
 * subtransaction) roll back, its events are delivered again, up to a
 * second late (the claim would have handed them back at once).  Parked
 * first, durably, then the items go: a crash in between leaves both, and
 * the item wins while it lasts (queue_parked.c, P3).  Returns how many
 * items it freed.  qs pinned; takes the queue's lock, none may be held.
 */
static int
spill_claims(Relation facade, QueueState *qs)
{
	dlist_mutable_iter iter;
	TimestampTz due = GetCurrentTimestamp() + USECS_PER_SEC;
	ParkedRun  *runs = NULL;
	ClaimRef  **refs = NULL;
	int			n = 0;
	int			nalloc = 0;
	int			freed = 0;

	LWLockAcquire(spindle_queue_lock(qs), LW_SHARED);
	dlist_foreach_modify(iter, &my_claims)
	{
		ClaimRef   *ref = dlist_container(ClaimRef, node, iter.cur);
		QueueItem  *item = spindle_qitem_at(ref->index);

		if (ref->slot != qs->slot || !spillable(ref, item))
			continue;
		if (n == nalloc)
		{
			nalloc = Max(16, nalloc * 2);
			runs = runs ? repalloc(runs, sizeof(ParkedRun) * nalloc) :
				palloc(sizeof(ParkedRun) * nalloc);
			refs = refs ? repalloc(refs, sizeof(ClaimRef *) * nalloc) :
				palloc(sizeof(ClaimRef *) * nalloc);
		}
		runs[n].start = item->start;
		runs[n].end = item->end;
		runs[n].due = due;
		runs[n].read_count = item->read_count;
		runs[n].kind = SPINDLE_RUN_PENDING;
		runs[n].xid = item->xid;
		refs[n++] = ref;
	}
	LWLockRelease(spindle_queue_lock(qs));
	if (n == 0)
		return 0;
	spindle_park_spilled(facade, qs, runs, n);
	LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
	for (int i = 0; i < n; i++)
	{
		QueueItem  *item = spindle_qitem_at(refs[i]->index);

		/* only this backend changes its claims: still as parked */
		if (!spillable(refs[i], item) || item->start != runs[i].start ||
			item->end != runs[i].end)
		{
			refs[i] = NULL;
			continue;
		}
		refs[i]->spilled = item->end - item->start;
		spindle_qitem_free(qs, item);
		freed++;
	}
	LWLockRelease(spindle_queue_lock(qs));
	for (int i = 0; i < n; i++)
		if (refs[i] != NULL)
			merge_spilled(refs[i]);
	pfree(runs);
	pfree(refs);
	return freed;
}

/*
 * Spill this backend's claims of qs (spill_claims) once more than half of
 * the queue's items are in use, so that the consumers holding claims in
 * open transactions leave room for one another before any runs out.
 * Reads the count without the lock (a hint).
 */
static void
spill_if_crowded(Relation facade, QueueState *qs)
{
	if (qs->nitems - qs->nleases > SPINDLE_ITEMS_PER_QUEUE / 2 &&
		!dlist_is_empty(&my_claims))
		(void) spill_claims(facade, qs);
}

/*
 * Claim item (of qs, as of generation) purged events: PREPARE is refused
 * for this transaction while its subtransaction lives, even once the
 * queue's state was evicted and the item reused (holds_claims).  Looks
 * from the newest claim back: the one sought is among the last few.
 */
static void
mark_purge(QueueState *qs, QueueItem *item, uint32 generation)
{
	dlist_iter	iter;

	dlist_reverse_foreach(iter, &my_claims)
	{
		ClaimRef   *ref = dlist_container(ClaimRef, node, iter.cur);

		if (ref->slot == qs->slot && ref->index == item->index &&
			ref->generation == generation)
		{
			ref->purge = true;
			return;
		}
	}
}

/* ---------- opening a queue ---------- */

/* ERROR 42501 if row-level security applies to the caller on the queue. */
static void
check_consumer_rls(const SpindleQueue *q)
{
	/* consumers see every event: a policy must not hide some of them */
	if (check_enable_rls(q->relid, InvalidOid, false) == RLS_ENABLED)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("cannot consume queue \"%s\": row-level security applies to the current user",
						q->name),
				 errdetail("dequeue, read, ack and set_visibility are not filtered by row-level security policies."),
				 errhint("Consume as a role that bypasses row-level security (the owner, unless FORCE ROW LEVEL SECURITY is set), or disable row-level security on the queue's table.")));
}

/*
 * Open queue table name with the rights a consumer needs (SELECT and
 * DELETE on it, no row-level security), checked before the table is
 * locked (no one without them waits for its lock) and again once it is
 * (a REVOKE or ENABLE ROW LEVEL SECURITY committed while we waited for
 * the lock applies: taking the lock processed its invalidations).
 */
static Relation
open_queue(FunctionCallInfo fcinfo, LOCKMODE lockmode, SpindleQueue *q)
{
	Relation	rel;
	TupleDesc	td;

	spindle_queue_open_arg(fcinfo, 0, ACL_SELECT | ACL_DELETE, q);
	check_consumer_rls(q);
	rel = try_table_open(q->relid, lockmode);
	if (rel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("queue \"%s\" does not exist", q->name),
				 errdetail("It was dropped while the consumer waited.")));
	spindle_queue_check_rights(q, ACL_SELECT | ACL_DELETE);
	check_consumer_rls(q);
	/* purges by position check no foreign key (the lock keeps new ones out) */
	if (OidIsValid(spindle_referencing_table(rel)))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot consume queue \"%s\": a foreign key constraint references its table",
						q->name),
				 errdetail("Table \"%s\" references the queue's table, and dequeue and ack do not check foreign keys.",
						   get_rel_name(spindle_referencing_table(rel))),
				 errhint("Drop the foreign key constraint, or delete the events with DELETE.")));
	/*
	 * The shared state must only ever know committed spindles.  Not only
	 * rd_newRelfilenodeSubid: PostgreSQL forgets it when a second TRUNCATE
	 * in a savepoint rolls back, while rd_firstRelfilenodeSubid still
	 * says the table got new storage in this transaction.
	 */
	if (rel->rd_createSubid != InvalidSubTransactionId ||
		rel->rd_newRelfilenodeSubid != InvalidSubTransactionId ||
		rel->rd_firstRelfilenodeSubid != InvalidSubTransactionId)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot consume queue \"%s\" in the transaction that created or truncated it",
						q->name),
				 errhint("Commit the CREATE or TRUNCATE first.")));
	td = RelationGetDescr(rel);
	if (td->natts < QCOL_PAYLOAD ||
		TupleDescAttr(td, QCOL_MSG_ID - 1)->atttypid != INT8OID ||
		TupleDescAttr(td, QCOL_ENQUEUED - 1)->atttypid != TIMESTAMPTZOID ||
		TupleDescAttr(td, QCOL_VISIBLE - 1)->atttypid != TIMESTAMPTZOID ||
		TupleDescAttr(td, QCOL_PAYLOAD - 1)->atttypid != JSONBOID)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("table of queue \"%s\" does not have the columns of a queue",
						q->name)));
	return rel;
}

static int
get_max_events(FunctionCallInfo fcinfo, int argno)
{
	int			n;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("max_events must not be NULL")));
	n = PG_GETARG_INT32(argno);
	if (n <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_events must be positive, not %d", n)));
	return n;
}

/* A non-negative interval argument, in microseconds. */
static int64
get_interval_usecs(FunctionCallInfo fcinfo, int argno, const char *what)
{
	Interval   *iv;
	int64		us;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be NULL", what)));
	iv = PG_GETARG_INTERVAL_P(argno);
	/*
	 * In 128 bits, as interval_cmp does: the largest intervals pass 2^63
	 * microseconds and would wrap around (to a negative or a short time).
	 * What does not fit means "for good".
	 */
	{
		INT128		total = int64_to_int128(iv->time);

		int128_add_int64_mul_int64(&total, iv->day, USECS_PER_DAY);
		int128_add_int64_mul_int64(&total, iv->month, 30 * USECS_PER_DAY);
		if (int128_compare(total, int64_to_int128(0)) < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s must not be negative", what)));
		if (int128_compare(total, int64_to_int128(PG_INT64_MAX)) > 0)
			us = PG_INT64_MAX;
		else
			us = int128_to_int64(total);
	}
	return us;
}

/* ---------- taking claims ---------- */

/* Whether an item's events may be delivered now. */
static bool
item_ready(QueueItem *item, TimestampTz now)
{
	switch ((QueueItemKind) item->kind)
	{
		case QITEM_RETURNED:
			return true;
		case QITEM_PENDING:
			return !TransactionIdIsValid(item->xid) ||
				!TransactionIdIsInProgress(item->xid);
		case QITEM_CLAIM:
			/* a claim whose owner's transaction ended without ending it */
			return item->owner >= 0 &&
				ProcGlobal->allProcs[item->owner].lxid != item->owner_lxid;
		default:
			return false;
	}
}

/*
 * Make [start, start + n) of item (of qs, locked) a claim of this backend
 * and add it to sources; returns false if the pool has no item for it.
 */
static bool
claim_from_item(QueueState *qs, QueueItem *item, int64 n, Source *src)
{
	QueueItem  *claim = item;

	if (item->end - item->start > n)
	{
		claim = spindle_qitem_alloc(qs, QITEM_CLAIM, item->start,
									item->start + n);
		if (claim == NULL)
			return false;
		item->start += n;
	}
	src->was = (QueueItemKind) item->kind;
	src->read_count = item->read_count;
	src->parked = item->parked;
	if (claim == item)
	{
		if (item->kind == QITEM_LEASED ||
			(item->kind == QITEM_CLAIM && item->to_lease))
			qs->nleases--;
		item->kind = QITEM_CLAIM;
		item->to_lease = false;
		item->mixed = false;
	}
	claim->read_count = src->read_count;
	claim->xid = InvalidTransactionId;
	remember_claim(qs, claim);
	src->item = claim;
	src->generation = claim->generation;
	src->start = claim->start;
	src->end = claim->end;
	return true;
}

/* Where the head's spindle ends for now (see take_claims). */
typedef struct HeadSpindle
{
	int64		spindle_no;		/* 0: none */
	int64		first_no;		/* the msg_id of its slot 0 */
	int64		capacity;		/* its slots */
	int64		used;			/* slots handed out */
	bool		full;			/* receives no more events */
} HeadSpindle;

/*
 * Look up how far the spindle holding position head, or the first one
 * after it, goes: its slots used and whether it is full.  No state lock
 * held (may read the disk).
 */
static void
head_spindle(Relation facade, SpindleDirectory *dir, int64 head,
			 HeadSpindle *hs)
{
	int			i;

	hs->spindle_no = 0;
	for (i = spindle_find_from_event(dir, head); i < dir->nspindles; i++)
	{
		SpindleEntry *sp = &dir->spindles[i];
		TimestampTz filled_at;

		hs->spindle_no = sp->spindle_no;
		hs->first_no = sp->first_no;
		hs->capacity = spindle_effective_capacity(sp);

		/*
		 * Full first, then how many slots: a spindle found full hands out
		 * no more, so all its slots are taken (a slot that never got its
		 * event is found gone); one not found full may fill meanwhile,
		 * and then its events past the count wait for the next call.
		 */
		hs->full = spindle_slots_full(facade, dir, i, &filled_at);
		if (hs->full)
			hs->used = spindle_effective_capacity(sp);
		else if (!spindle_slots_peek(sp->segment, sp->spindle_no, &hs->used))
		{
			Relation	seg = spindle_open_segment(facade, sp, AccessShareLock);
			bool		full;

			if (seg == NULL)
			{
				hs->spindle_no = 0;
				continue;
			}
			hs->used = spindle_slots_used(facade, seg, sp, &full, &filled_at,
										  NULL);
			relation_close(seg, AccessShareLock);
		}
		return;
	}
}

/*
 * Whether every position of the spindle holding msg_id was handed out (qs
 * locked): the head is past its last one.  A msg_id of no spindle (gone)
 * counts as handed out once the head passed it.
 */
static bool
handed_out(QueueState *qs, SpindleDirectory *dir, int64 msg_id)
{
	SpindleEntry *sp = spindle_find_by_event(dir, msg_id);

	if (sp == NULL)
		return msg_id < qs->head;
	return qs->head >= sp->first_no + spindle_effective_capacity(sp);
}

/*
 * Where a state rebuilt from disk starts: the oldest spindle's first id, or
 * the consume log's floor if higher (every event below it is consumed for
 * everyone: spindle_consumed_floor), so that a state evicted with no saved
 * head left does not examine the queue's consumed history again.  Reads
 * the floor only when qs looks invalid (an unlocked peek; the caller
 * checks again under the state's lock), since it reads a page: called
 * with no buffer lock or LWLock held.
 */
static int64
first_position(Relation facade, QueueState *qs, SpindleDirectory *dir)
{
	int64		start = dir->nspindles > 0 ? dir->spindles[0].first_no : 1;

	if (!qs->valid)
		start = Max(start, spindle_consumed_floor(facade));
	return start;
}

/* parked runs one call takes when they come due */
#define PARK_TAKE_MAX	64

/*
 * Make parked runs taken due (runs, n) items of qs (locked) to examine
 * again (RETURNED), skipping the ids an item already holds (it decides
 * for them: queue_parked.c, P3) and those at or past the head (a state
 * rebuilt from disk examines them from the head).  Returns how many runs
 * found no room in the pool, moved to the front of runs with what is left
 * of them, for the caller to park again.
 */
static int
return_parked(QueueState *qs, ParkedRun *runs, int n)
{
	int			nleft = 0;
	int			r;

	for (r = 0; r < n; r++)
	{
		ParkedRun	run = runs[r];
		int64		a = run.start;
		int64		b = Min(run.end, qs->head);

		while (a < b)
		{
			int64		cut = b;
			int64		skip_to = a;
			dlist_iter	iter;
			QueueItem  *item;

			dlist_foreach(iter, &qs->items)
			{
				item = dlist_container(QueueItem, node, iter.cur);
				if (item->end <= a || item->start >= b)
					continue;
				if (item->start <= a)
					skip_to = Max(skip_to, item->end);
				else
					cut = Min(cut, item->start);
			}
			if (skip_to > a)
			{
				a = skip_to;
				continue;
			}
			item = spindle_qitem_alloc(qs, QITEM_RETURNED, a, cut);
			if (item == NULL)
			{
				runs[nleft] = run;
				runs[nleft].start = a;
				runs[nleft].end = b;
				nleft++;
				break;
			}
			item->read_count = run.read_count;
			item->parked = run.kind == SPINDLE_RUN_READY ||
				run.kind == SPINDLE_RUN_LEASED;
			a = cut;
		}
	}
	return nleft;
}

static int
cmp_item_start(const void *a, const void *b)
{
	int64		x = (*(QueueItem *const *) a)->start;
	int64		y = (*(QueueItem *const *) b)->start;

	return (x > y) - (x < y);
}

/*
 * The items of qs ready to be taken now, in msg_id order, as a palloc'd
 * array (*ready, NULL if none); returns how many.  The list is in the
 * order items were made, which is not msg_id order: a claim keeps its own
 * item for its last run and puts earlier runs in new items, so taking
 * them in list order handed out one producer's later events before its
 * earlier ones (the fault test 096).  The caller holds the queue's lock.
 */
static int
ready_items(QueueState *qs, TimestampTz now, QueueItem ***ready)
{
	dlist_iter	iter;
	int			n = 0;
	int			cap = 0;

	*ready = NULL;
	dlist_foreach(iter, &qs->items)
	{
		QueueItem  *item = dlist_container(QueueItem, node, iter.cur);

		if (!item_ready(item, now))
			continue;
		if (n == cap)
		{
			cap = cap ? cap * 2 : 16;
			*ready = *ready ? repalloc(*ready, sizeof(QueueItem *) * cap) :
				palloc(sizeof(QueueItem *) * cap);
		}
		(*ready)[n++] = item;
	}
	if (n > 1)
		qsort(*ready, n, sizeof(QueueItem *), cmp_item_start);
	return n;
}

/*
 * Move qs's head from head over the events at and after from, below to
 * (the head spindle's slots handed out), that are parked (they come back
 * when due, as for a head that meets a parked run) or that the consume log
 * says committed consumers took (a gap, such as a lease or a delayed
 * event, keeps settle from folding them into the floor), instead of
 * claiming and examining them one attempt at a time: after a restart a
 * dequeue(q, 1) walked 1 000 000 consumed events at about 25 us each
 * (review rv3 of turn 4, session 10), and a state rebuilt among 2 000
 * delayed events, each followed by 9 consumed ones, read 476 112 buffers
 * (TAP 092).  One walk of tree 0's leaves and one range read of the log
 * per look (spindle_park_ranges, spindle_consumed_skip), over at most
 * to - from ids.  Returns where the look found the first id neither
 * covers (from if none: nothing moved); the head is moved there only if it
 * did not move meanwhile (the caller looks at the head again either way).
 * Takes the queue's lock; none may be held.
 */
static int64
skip_settled(Relation facade, QueueState *qs, int64 head, int64 from,
			 int64 to)
{
	int64		skip_to;
	int64	   *parked;
	int			nparked;

	CHECK_FOR_INTERRUPTS();
	to = Min(to, from + SPINDLE_SKIP_LOOK_IDS);
	parked = spindle_park_ranges(facade, qs, from, to, SPINDLE_SKIP_LOOK_IDS,
								 &nparked);
	skip_to = spindle_consumed_skip(facade, from, to, parked, nparked);
	if (parked != NULL)
		pfree(parked);
	if (skip_to <= from)
		return from;
	LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
	if (qs->head == head)
		qs->head = skip_to;
	LWLockRelease(spindle_queue_lock(qs));
	return skip_to;
}

/* ids a look covers at first, doubled while looks cover them all */
#define LOOK_WINDOW_MIN		64

/* Whether, and from where, take_claims looks before claiming at the head */
typedef struct HeadLook
{
	bool		on;				/* skip_settled before claiming */
	int64		vain_at;		/* a look found nothing settled there */
	int64		window;			/* ids the next look covers, at most */
} HeadLook;

/*
 * Take up to want positions as this backend's claim: deliverable items
 * first (in msg_id order), then from the head.  Fills sources and returns
 * how many positions they hold.  Sets *ends_spindle if the claim may
 * finish a full spindle: it takes that spindle's last positions at the
 * head, moves the head past it, or takes a whole pending run of a spindle
 * all handed out.
 * Delayed, returned and leased runs do not count: they can be due one
 * call after another and would wake the worker at each.  With look->on
 * (the caller's last attempts found only consumed events, as the first
 * ones of a state rebuilt from disk do over what settle did not fold yet),
 * the head first moves over what is parked or consumed (skip_settled);
 * when neither covers the head, look->on is cleared and look->vain_at set
 * to where it stood.  Without it no look is made: a consumer at the head
 * pays nothing.
 */
static int
take_claims(QueueState *qs, Relation facade, SpindleDirectory *dir, int want,
			Source *sources, int *nsources, int max_sources, TimestampTz now,
			HeadLook *look, bool *pool_full, bool *ends_spindle)
{
	int			got = 0;
	QueueItem **ready = NULL;
	int			nready;
	ParkedRun	due_runs[PARK_TAKE_MAX];
	int			ndue;
	int64		head;
	int64		start;
	bool		held;
	bool		jumped;			/* the head just moved over a parked run */

	*nsources = 0;
	*pool_full = false;
	*ends_spindle = false;
	start = first_position(facade, qs, dir);
	LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
	if (!qs->valid)
	{
		/* rebuilt from disk: start at the oldest unconsumed position */
		qs->head = start;
		qs->valid = true;
	}
	head = qs->head;
	LWLockRelease(spindle_queue_lock(qs));
	/* parked runs come due (behind the head): examined again, first */
	ndue = spindle_park_take_due(facade, qs, now, want, head, due_runs,
								 PARK_TAKE_MAX, &held);
	LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
	if (ndue > 0)
		ndue = return_parked(qs, due_runs, ndue);
	nready = ready_items(qs, now, &ready);
	for (int r = 0; r < nready; r++)
	{
		QueueItem  *item = ready[r];
		int64		n;
		bool		finishes;

		if (got >= want || *nsources >= max_sources)
			break;
		n = Min(item->end - item->start, want - got);
		/* a pending run at a full spindle's end (not delayed or leased ones) */
		finishes = item->kind == QITEM_PENDING &&
			n == item->end - item->start &&
			handed_out(qs, dir, item->end - 1);
		if (!claim_from_item(qs, item, n, &sources[*nsources]))
		{
			/* no item for a split: items taken whole need none */
			*pool_full = true;
			continue;
		}
		if (finishes)
			*ends_spindle = true;
		(*nsources)++;
		got += n;
	}
	if (ready != NULL)
		pfree(ready);
	LWLockRelease(spindle_queue_lock(qs));
	if (ndue > 0)
	{
		int			i;

		/* no room for them in the pool: parked again, due in a second */
		for (i = 0; i < ndue; i++)
			due_runs[i].due = now + USECS_PER_SEC;
		spindle_park_runs(facade, qs, due_runs, ndue);
	}

	/* then from the head, one spindle at a time */
	jumped = false;
	while (got < want && *nsources < max_sources && !*pool_full)
	{
		HeadSpindle hs;
		int64		head = qs->head;	/* a hint; checked under the lock */
		int64		k;
		int64		n;
		QueueItem  *claim;
		int64		park_start;
		int64		park_end = 0;

		head_spindle(facade, dir, head, &hs);
		if (hs.spindle_no == 0)
			break;				/* no spindle at or after the head */
		if (look->on)
		{
			int64		from = Max(head, hs.first_no);
			int64		to = Min(hs.first_no + hs.used, from + look->window);
			int64		skip_to = skip_settled(facade, qs, head, from, to);

			if (skip_to > from)
			{
				/*
				 * A look that covered its whole window covers twice as many
				 * ids next time; one that stopped short goes back to the
				 * smallest: settled and unsettled ids that alternate (leases
				 * between deleted events) would otherwise make each look
				 * read 16 384 ids' runs to move over one (3x slower than the
				 * walk at 300 000 leases).
				 */
				look->window = skip_to >= to ?
					Min(look->window * 2, SPINDLE_SKIP_LOOK_IDS) :
					LOOK_WINDOW_MIN;
				/* over a full spindle's last events: the worker drops it */
				if (hs.full && qs->head >= hs.first_no + hs.used)
					*ends_spindle = true;
				if (held)
					break;		/* due ones first: the next attempt */
				continue;
			}
			look->on = false;	/* nothing settled at the head */
			look->vain_at = Max(head, hs.first_no);
		}
		/* after a parked run, others may follow it (a leaf walk) */
		park_start = spindle_park_next(facade, qs, Max(head, hs.first_no),
									   jumped, &park_end);
		LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
		if (qs->head != head)
		{
			LWLockRelease(spindle_queue_lock(qs));
			continue;			/* moved meanwhile: look again */
		}
		if (head < hs.first_no)
			head = qs->head = hs.first_no;
		if (park_start <= head)
		{
			/* parked (a rebuilt state): they come back when due */
			qs->head = Max(head, park_end);
			LWLockRelease(spindle_queue_lock(qs));
			jumped = true;
			if (held)
				break;			/* due ones first: the next attempt */
			continue;
		}
		k = head - hs.first_no;
		if (k >= hs.used)
		{
			bool		more = hs.full;

			/* a full spindle is done: go on at the next one */
			if (more)
			{
				qs->head = hs.first_no + hs.capacity;
				*ends_spindle = true;
			}
			LWLockRelease(spindle_queue_lock(qs));
			if (more)
				continue;
			break;				/* the open spindle's events are all taken */
		}
		n = Min(Min(hs.used - k, want - got), park_start - head);
		claim = spindle_qitem_alloc(qs, QITEM_CLAIM, head, head + n);
		if (claim == NULL)
		{
			LWLockRelease(spindle_queue_lock(qs));
			*pool_full = true;
			break;
		}
		remember_claim(qs, claim);
		jumped = false;
		qs->head = head + n;
		if (hs.full && k + n >= hs.used)
			*ends_spindle = true;	/* the full spindle's last positions */
		LWLockRelease(spindle_queue_lock(qs));
		sources[*nsources].item = claim;
		sources[*nsources].generation = claim->generation;
		sources[*nsources].start = head;
		sources[*nsources].end = head + n;
		sources[*nsources].read_count = 0;
		sources[*nsources].was = QITEM_FREE;
		sources[*nsources].parked = false;
		(*nsources)++;
		got += n;
	}
	return got;
}

/* ---------- examining events ---------- */

/*
 * A member of running MultiXact multi that is still running, or Invalid:
 * what an event locked by it waits for (when that one ends, the event is
 * examined again and waits for the next, if any).  The caller holds the
 * event's buffer lock, as heapam does when it looks at members.
 */
static TransactionId
running_member(MultiXactId multi)
{
	MultiXactMember *members;
	int			n;
	int			i;
	TransactionId xid = InvalidTransactionId;

	n = GetMultiXactIdMembers(multi, &members, false, true);
	for (i = 0; i < n; i++)
		if (TransactionIdIsCurrentTransactionId(members[i].xid) ||
			TransactionIdIsInProgress(members[i].xid))
		{
			xid = members[i].xid;
			break;
		}
	if (n > 0)
		pfree(members);
	return xid;
}

/*
 * What the consume log says of one event (queue_consumed.c), and whether
 * its page's hint bits are to be left alone: with spindle.consume_log on,
 * a consumer that would be the first to dirty a page since the last
 * checkpoint does not set them, as with wal_log_hints or checksums that
 * would write the page's image -- the cost the log saves.
 */
typedef struct LogVerdict
{
	int			verdict;		/* SPINDLE_LOG_* */
	TransactionId xid;			/* SPINDLE_LOG_PENDING: on it */
	bool		nohint;
} LogVerdict;

/*
 * The inserter's part of classify, without hint bits, for an event with no
 * xmax: EV_DELIVER if it committed, EV_PENDING (*xid) if it runs, else
 * EV_GONE.  As heap's tests: in progress before committed.
 */
static EvOutcome
inserter_outcome(HeapTupleHeader t, TransactionId *xid)
{
	TransactionId xmin;

	if (HeapTupleHeaderXminCommitted(t))
		return EV_DELIVER;		/* frozen too */
	if (HeapTupleHeaderXminInvalid(t))
		return EV_GONE;
	xmin = HeapTupleHeaderGetRawXmin(t);
	if (TransactionIdIsCurrentTransactionId(xmin) ||
		TransactionIdIsInProgress(xmin))
	{
		*xid = xmin;
		return EV_PENDING;
	}
	return TransactionIdDidCommit(xmin) ? EV_DELIVER : EV_GONE;
}

/*
 * What the event at ptid of seg (buffer buf, locked) is for a consumer at
 * time now; sets *xid for EV_PENDING and *due for EV_DELAYED.  With
 * snapshot (transaction-snapshot isolation), an event its inserter
 * committed after the snapshot was taken is EV_UNSEEN: left for others.
 * An event live on its page that a committed entry of the consume log
 * covers is EV_GONE; a running one's, EV_PENDING on it (log).
 */
static EvOutcome
classify(Relation seg, Buffer buf, ItemPointer ptid, int64 k, TupleDesc td,
		 TimestampTz now, Snapshot snapshot, const LogVerdict *log,
		 TransactionId *xid, TimestampTz *due)
{
	Page		page = BufferGetPage(buf);
	OffsetNumber off = ItemPointerGetOffsetNumber(ptid);
	ItemId		lp;
	HeapTupleData tup;
	TransactionId dead_after;
	bool		isnull;
	Datum		d;

	if (off > PageGetMaxOffsetNumber(page))
		return EV_GONE;
	lp = PageGetItemId(page, off);
	if (!ItemIdIsNormal(lp))
		return EV_GONE;
	tup.t_data = (HeapTupleHeader) PageGetItem(page, lp);
	tup.t_len = ItemIdGetLength(lp);
	tup.t_tableOid = RelationGetRelid(seg);
	tup.t_self = *ptid;
	if (spindle_event_k(tup.t_data, tup.t_len) != (int32) k)
		return EV_GONE;			/* not the event the map promised */

	if (log->nohint && (tup.t_data->t_infomask & HEAP_XMAX_INVALID))
	{
		EvOutcome	o = inserter_outcome(tup.t_data, xid);

		if (o != EV_DELIVER)
			return o;
	}
	else
		switch (HeapTupleSatisfiesVacuumHorizon(&tup, buf, &dead_after))
		{
			case HEAPTUPLE_DEAD:
			case HEAPTUPLE_RECENTLY_DEAD:
				return EV_GONE;
			case HEAPTUPLE_INSERT_IN_PROGRESS:
				*xid = HeapTupleHeaderGetRawXmin(tup.t_data);
				return EV_PENDING;
			case HEAPTUPLE_DELETE_IN_PROGRESS:
				*xid = HeapTupleHeaderGetUpdateXid(tup.t_data);
				return EV_PENDING;
			case HEAPTUPLE_LIVE:
				break;
		}
	/* live on its page: the consume log may have taken it */
	if (log->verdict == SPINDLE_LOG_GONE)
		return EV_GONE;
	if (log->verdict == SPINDLE_LOG_PENDING)
	{
		*xid = log->xid;
		return EV_PENDING;
	}
	/* live: a row lock held by a running transaction keeps it for now */
	if (!(tup.t_data->t_infomask & HEAP_XMAX_INVALID))
	{
		TransactionId xmax = HeapTupleHeaderGetRawXmax(tup.t_data);

		if (tup.t_data->t_infomask & HEAP_XMAX_IS_MULTI)
		{
			if (MultiXactIdIsRunning(xmax, true))
			{
				/*
				 * Pending on a running member, so that the next attempt
				 * does not take it again at once (an invalid xid is
				 * ready at once, and would keep dequeue(q, 1) on it).
				 */
				*xid = running_member(xmax);
				return EV_PENDING;
			}
		}
		else if (TransactionIdIsCurrentTransactionId(xmax) ||
				 TransactionIdIsInProgress(xmax))
		{
			*xid = xmax;
			return EV_PENDING;
		}
	}
	d = heap_getattr(&tup, QCOL_VISIBLE, td, &isnull);
	if (!isnull && DatumGetTimestampTz(d) > now)
	{
		*due = DatumGetTimestampTz(d);
		return EV_DELAYED;
	}
	if (snapshot != NULL && !HeapTupleSatisfiesVisibility(&tup, snapshot, buf))
		return EV_UNSEEN;
	return EV_DELIVER;
}

static int
cmp_candidate_location(const void *a, const void *b)
{
	const Candidate *x = a;
	const Candidate *y = b;

	if (x->located != y->located)
		return x->located ? -1 : 1;
	if (x->segment != y->segment)
		return x->segment < y->segment ? -1 : 1;
	return ItemPointerCompare((ItemPointer) &x->ptid, (ItemPointer) &y->ptid);
}

static int
cmp_candidate_source(const void *a, const void *b)
{
	const Candidate *x = a;
	const Candidate *y = b;

	if (x->source != y->source)
		return x->source < y->source ? -1 : 1;
	if (x->msg_id != y->msg_id)
		return x->msg_id < y->msg_id ? -1 : 1;
	return 0;
}

static int
cmp_candidate_msgid(const void *a, const void *b)
{
	const Candidate *x = a;
	const Candidate *y = b;

	if (x->msg_id != y->msg_id)
		return x->msg_id < y->msg_id ? -1 : 1;
	return 0;
}

/*
 * Ask the event cache (cache.c) where the candidates' events are; those it
 * knows need no slot map lookup, and, if it has their payloads, no copy
 * of their tuples.  Whether they are deliverable is still examined on
 * their pages.
 */
static void
cache_fill(Relation facade, SpindleDirectory *dir, int slot, Candidate *c,
		   int n)
{
	int64	   *ids;
	int		   *which;
	SpindleCachedEvent *ev;
	int			i;
	int			m = 0;

	for (i = 0; i < n; i++)
	{
		c[i].cached = false;
		c[i].from_cache = false;
		c[i].stale_cache = false;
	}
	if (slot < 0 || n == 0)
		return;
	ids = palloc(sizeof(int64) * n);
	which = palloc(sizeof(int) * n);
	ev = palloc(sizeof(SpindleCachedEvent) * n);
	for (i = 0; i < n; i++)
	{
		if (spindle_find_by_event(dir, c[i].msg_id) == NULL)
			continue;			/* gone: locate says so */
		ids[m] = c[i].msg_id;
		which[m] = i;
		m++;
	}
	spindle_cache_lookup(slot, RelationGetRelid(facade), ids, m, ev);
	for (i = 0; i < m; i++)
	{
		Candidate  *ci = &c[which[i]];

		if (!ev[i].found)
			continue;
		ci->cached = true;
		ci->segment = ev[i].segment;
		ci->ptid = ev[i].ptid;
		ci->cached_xmin = ev[i].xmin;
		ci->enqueued_at = ev[i].enqueued_at;
		ci->payload = ev[i].payload;
	}
	pfree(ids);
	pfree(which);
	pfree(ev);
}

/*
 * Forget the cached events a consumer is done with: purged by this
 * transaction (dequeue, ack), or found gone; and those found moved to an
 * annex (stale_cache: the cache holds the old copy's place, which locate
 * no longer uses).  (A purge that rolls back costs a miss when the event
 * is taken again.)
 */
static void
cache_done(Relation facade, int slot, Candidate *c, int n, bool purge)
{
	int64	   *ids;
	int			nids = 0;
	int			i;

	if (slot < 0 || n == 0)
		return;
	ids = palloc(sizeof(int64) * n);
	for (i = 0; i < n; i++)
		if (c[i].stale_cache ||
			(c[i].cached &&
			 (c[i].outcome == EV_GONE ||
			  ((purge || c[i].dead) && c[i].outcome == EV_DELIVER))))
			ids[nids++] = c[i].msg_id;
	spindle_cache_forget(slot, RelationGetRelid(facade), ids, nids);
	pfree(ids);
}

/* What one consumer call knows of its queue's moved events (tree 3). */
typedef struct Moves
{
	Relation	crel;			/* the consumer relation, or NULL */
	bool		reloc;			/* it has a tree 3: resolve, probe */
	bool		ids_moved;		/* tree 4 holds an id being located */
} Moves;

/*
 * Open the queue's consumer relation (AccessShareLock, to the end of the
 * transaction) and look once at its metapage for tree 3.
 */
static void
moves_open(Relation facade, Moves *m)
{
	Oid			croid = spindle_consumer_rel_oid(RelationGetRelid(facade));
	bool		log;

	m->crel = NULL;
	m->reloc = false;
	m->ids_moved = false;
	if (OidIsValid(croid) &&
		(m->crel = try_relation_open(croid, AccessShareLock)) != NULL)
		spindle_crel_trees_present(m->crel, &log, &m->reloc);
}

static void
moves_close(Moves *m)
{
	if (m->crel != NULL)
		relation_close(m->crel, NoLock);
	m->crel = NULL;
}

/*
 * The spindle or annex numbered spindle_no, which a relocation entry or
 * tree 4 names: from *dirp, or, for an annex made after *dirp was read
 * (its invalidation may not have arrived), from a directory read again,
 * which replaces *dirp (released).  NULL: dropped.
 */
static SpindleEntry *
copy_spindle(Relation facade, SpindleDirectory **dirp, int64 spindle_no)
{
	SpindleEntry *sp = spindle_find_copy(*dirp, spindle_no);
	SpindleDirectory *dir;

	if (sp != NULL)
		return sp;
	dir = spindle_directory_acquire_upto(facade, spindle_no);
	spindle_directory_release(*dirp);
	*dirp = dir;
	return spindle_find_copy(dir, spindle_no);
}

/*
 * Has a forget pass (relocation_forget.c) taken out the entry that hid
 * copy (no, k) of msg_id, its spindle dropped since the caller's directory
 * was read?  Then tree 4 names a later copy of msg_id.  Looked at only
 * when tree 4 holds an id of the ids being located (m->ids_moved).
 */
static bool
forgotten(Moves *m, int64 msg_id, int64 no, int64 k)
{
	int64		ono,
				ok;

	return m->ids_moved &&
		spindle_reloc_oldest(m->crel, msg_id, &ono, &ok) &&
		(ono != no || ok != k);
}

/*
 * Where msg_id's event is for a consumer now, on a queue with a tree 3
 * (design, section 4 "Consumers"): from its copy in the event spindle sp
 * (slot *k), or, sp NULL (that spindle dropped), tree 4's oldest copy,
 * follow the relocation entries whose movers are done.  Returns the
 * spindle or annex of the copy reached (*k its slot there), NULL if none
 * (the event is gone, or *xid is set: a running move hides the copy).
 * A forget pass (relocation_forget.c) may change the entries meanwhile:
 * it names the later copy (in tree 4, or in a shortened entry) before it
 * takes out the entries leading there.  So a walk that reaches a copy
 * whose spindle is gone is made again, from tree 4 if it now names
 * another copy; and an unhidden copy that tree 4 says was moved (the
 * entry hiding it forgotten after its spindle's drop, which this
 * directory predates) is left for tree 4's.
 */
static SpindleEntry *
resolve(Relation facade, SpindleDirectory **dirp, Moves *m, int64 msg_id,
		SpindleEntry *sp, int64 *k, TransactionId *xid)
{
	int64		k0 = *k;

	for (int attempt = 0; attempt < 4; attempt++)
	{
		int64		no;
		int64		start_no;
		int64		start_k;
		SpindleEntry *at;

		*xid = InvalidTransactionId;
		*k = k0;
		if (sp != NULL)
			no = sp->spindle_no;
		else if (!spindle_reloc_oldest(m->crel, msg_id, &no, k))
			return NULL;
		start_no = no;
		start_k = *k;
		switch (spindle_reloc_follow(m->crel, &no, k, xid))
		{
			case SPINDLE_MOVE_RUNNING:
				return NULL;
			case SPINDLE_MOVE_NONE:
				if (sp == NULL)
					break;
				if (!forgotten(m, msg_id, no, *k))
					return sp;
				sp = NULL;
				continue;
		}
		at = copy_spindle(facade, dirp, no);
		if (at != NULL || !m->ids_moved)
			return at;
		/* gone: walk again, from tree 4 if it names another copy now */
		if (forgotten(m, msg_id, start_no, start_k))
			sp = NULL;
	}
	return NULL;
}

/*
 * Find where each candidate's event is: its spindle (or annex) and
 * physical TID.  On a queue with a tree 3 (m->reloc) each msg_id is first
 * resolved to the copy it is at now (resolve): a running move makes it
 * EV_PENDING on the mover, and a cached place is used only if it is that
 * copy's (the cache knows the copy a producer placed: once moved, that
 * one is stale and forgotten, cache_done).  Candidates whose spindle is
 * gone, or whose slot never got an event, are EV_GONE; a slot not placed
 * yet is EV_RETRY.  May replace *dirp with a newer directory (an annex
 * made since it was read).
 */
static void
locate(Relation facade, SpindleDirectory **dirp, Moves *m, Candidate *c,
	   int n)
{
	int			i;

	if (m->reloc && n > 0)
	{
		int64		lo = c[0].msg_id;
		int64		hi = c[0].msg_id;

		for (i = 1; i < n; i++)
		{
			lo = Min(lo, c[i].msg_id);
			hi = Max(hi, c[i].msg_id);
		}
		m->ids_moved = hi < PG_INT64_MAX &&
			spindle_reloc_ids_moved(m->crel, lo, hi + 1);
	}
	for (i = 0; i < n; i++)
	{
		SpindleEntry *sp = spindle_find_by_event(*dirp, c[i].msg_id);
		bool		inflight;
		int64		k = sp != NULL ? c[i].msg_id - sp->first_no : 0;

		c[i].located = c[i].annex = c[i].mover = c[i].relocate = false;
		c[i].outcome = EV_GONE;
		if (m->reloc)
		{
			sp = resolve(facade, dirp, m, c[i].msg_id, sp, &k, &c[i].xid);
			if (TransactionIdIsValid(c[i].xid))
			{
				c[i].outcome = EV_PENDING;
				c[i].mover = true;
			}
		}
		if (sp == NULL)
			continue;
		c[i].k = k;
		c[i].annex = spindle_is_annex(sp);
		if (c[i].cached)
		{
			/* placed, and where: the cache says, if the copy is that one */
			if (c[i].segment == sp->segment)
			{
				c[i].located = true;
				c[i].spindle_no = sp->spindle_no;
				continue;
			}
			c[i].cached = false;
			c[i].payload = NULL;
			c[i].stale_cache = c[i].annex;
		}
		/* asked before the map: see spindle_slots_inflight */
		inflight = spindle_slots_inflight(sp->segment, sp->spindle_no);
		if (!spindle_slotmap_get(facade, sp->vbase + k, &c[i].ptid))
		{
			/*
			 * Reserved, not placed: soon, if a reservation is in flight;
			 * never, otherwise.  The slot was handed out before this call
			 * looked (it is below the head's count), and a producer
			 * counts its reservation in flight before it takes slots and
			 * until it placed and mapped them or ended (slots.c), so none
			 * in flight now means the slot's producer is done: an error
			 * (a full disk, say) cut its batch short, and the slot stays
			 * empty for good (review finding 8).  (An annex copy is
			 * mapped before its move commits.)
			 */
			if (inflight)
				c[i].outcome = EV_RETRY;
			continue;
		}
		c[i].located = true;
		c[i].segment = sp->segment;
		c[i].spindle_no = sp->spindle_no;
	}
}

/*
 * Under the exclusive lock of its page, is candidate c's copy moved by an
 * entry of tree 3 written since locate() resolved it?  The mover writes
 * its entry under a share lock of the same page, so either it saw this
 * consumer's purge (xmax) and moved nothing, or its entry is there now:
 * done, c is to be located again (relocate: EV_RETRY); running, EV_PENDING
 * on the mover.  True if so.
 */
static bool
moved_under_lock(Moves *m, Candidate *c)
{
	SpindleRelocation e;
	TransactionId xid;

	if (!spindle_reloc_probe(m->crel, c->spindle_no, c->k, &e))
		return false;
	switch (spindle_reloc_consumer_state(&e, &xid))
	{
		case SPINDLE_MOVE_RUNNING:
			c->outcome = EV_PENDING;
			c->xid = xid;
			c->mover = true;
			return true;
		case SPINDLE_MOVE_DONE:
			c->outcome = EV_RETRY;
			c->relocate = true;
			return true;
	}
	return false;
}

/*
 * Examine located candidates page by page under an exclusive page lock,
 * with what the consume log says of them (read under that lock:
 * queue_consumed.c); with purge, consume the deliverable ones -- an entry
 * of the log per run of ids on a queue that has a log (or starts one),
 * else xmax, one WAL record per page --, or
 * with dead_only only those marked dead, and keep a copy of each
 * deliverable one.  A copy in an annex (a moved event) is consumed by
 * xmax whatever the log: the log is keyed by event numbers, which an
 * annex has none of, and its floor may cover a moved event's id once its
 * spindle is dropped (design, "Step 3 as built").  On a queue with a tree
 * 3, each copy is probed for a move under its page's lock
 * (moved_under_lock); a spindle dropped under a directory older than the
 * drop (not fresh: read before this call's locate) sends its candidates
 * to be located again through tree 4 (relocate).  snapshot: see
 * classify.  Candidates must be sorted by location.
 */
static void
examine(Relation facade, SpindleDirectory *dir, Moves *m, Candidate *c,
		int n, TimestampTz now, Snapshot snapshot, bool purge, bool dead_only,
		bool fresh)
{
	TupleDesc	td = RelationGetDescr(facade);
	CommandId	cid = purge ? GetCurrentCommandId(true) : InvalidCommandId;
	int			i = 0;
	SpindleConsumeView v;
	int64	   *ids = palloc(sizeof(int64) * Max(n, 1));
	int			nids = 0;

	for (i = 0; i < n && c[i].located; i++)
		if (!c[i].annex)
			ids[nids++] = c[i].msg_id;
	spindle_consumed_begin(&v, facade, nids, purge);
	v.reloc |= m->reloc;
	i = 0;
	while (i < n && c[i].located)
	{
		SpindleEntry *sp = spindle_find_copy(dir, c[i].spindle_no);
		Relation	seg = sp != NULL ?
			spindle_open_segment(facade, sp, RowExclusiveLock) : NULL;
		BlockNumber blk = ItemPointerGetBlockNumber(&c[i].ptid);
		bool		annex = c[i].annex;
		Buffer		buf;
		OffsetNumber offsets[MaxHeapTuplesPerPage];
		ItemPointerData ptids[MaxHeapTuplesPerPage];
		int			noff = 0;
		int			j;
		int			first = i;
		LogVerdict	log;

		if (seg == NULL)
		{
			/*
			 * Dropped: gone, unless it was moved before (tree 4 knows), or
			 * unless this directory is older than the drop.
			 */
			bool		again = !fresh && m->crel != NULL &&
				(m->reloc || spindle_reloc_exists(m->crel));

			for (; i < n && c[i].located && c[i].segment == c[first].segment; i++)
			{
				c[i].outcome = again ? EV_RETRY : EV_GONE;
				c[i].relocate = again;
			}
			continue;
		}
		buf = ReadBuffer(seg, blk);
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		log.nohint = !annex && v.write && XLogHintBitIsNeeded() &&
			PageGetLSN(BufferGetPage(buf)) <= GetRedoRecPtr();
		/* what the log says of this page's events, read under its lock */
		for (j = i, noff = 0; j < n && c[j].located &&
			 c[j].segment == c[first].segment &&
			 ItemPointerGetBlockNumber(&c[j].ptid) == blk; j++)
			if (!annex)
				ids[noff++] = c[j].msg_id;
		spindle_consumed_page(&v, ids, noff);
		noff = 0;
		for (; i < n && c[i].located && c[i].segment == c[first].segment &&
			 ItemPointerGetBlockNumber(&c[i].ptid) == blk; i++)
		{
			if (v.reloc && moved_under_lock(m, &c[i]))
				continue;
			log.verdict = annex ? SPINDLE_LOG_NONE :
				spindle_consumed_verdict(&v, c[i].msg_id, &log.xid);
			c[i].outcome = classify(seg, buf, &c[i].ptid,
									c[i].k, td, now, snapshot, &log,
									&c[i].xid, &c[i].due);
			if (c[i].outcome == EV_DELIVER && purge &&
				(!dead_only || c[i].dead))
			{
				ids[noff] = c[i].msg_id;
				ptids[noff] = c[i].ptid;
				offsets[noff++] = ItemPointerGetOffsetNumber(&c[i].ptid);
			}
		}
		/* consumed: an entry of the log, or xmax on the events */
		if (noff > 0 && v.write && !annex)
			spindle_consumed_write(&v, seg, ids, ptids, noff, cid);
		else if (noff > 0)
			spindle_purge_on_page(seg, buf, offsets, noff, cid);
		for (j = first; j < i; j++)
		{
			if (c[j].outcome == EV_DELIVER)
			{
				Page		page = BufferGetPage(buf);
				ItemId		lp = PageGetItemId(page,
											   ItemPointerGetOffsetNumber(&c[j].ptid));
				HeapTupleData tup;

				/*
				 * The page said it is deliverable; the cache's copy of its
				 * payload is that tuple's if the tuple is the one it saw
				 * stored (classify checked its k, this its xmin).
				 */
				if (c[j].cached && c[j].payload != NULL &&
					TransactionIdEquals(c[j].cached_xmin,
										HeapTupleHeaderGetRawXmin((HeapTupleHeader) PageGetItem(page, lp))))
				{
					c[j].from_cache = true;
					c[j].tuple = NULL;
					continue;
				}
				tup.t_data = (HeapTupleHeader) PageGetItem(page, lp);
				tup.t_len = ItemIdGetLength(lp);
				tup.t_tableOid = RelationGetRelid(seg);
				tup.t_self = c[j].ptid;
				c[j].tuple = heap_copytuple(&tup);
			}
		}
		UnlockReleaseBuffer(buf);
		if (noff > 0)
			spindle_note_touched(RelationGetRelid(facade), c[first].spindle_no);
		relation_close(seg, NoLock);
	}
	spindle_consumed_end(&v);
	pfree(ids);
}

/* Passes over the candidates found moved meanwhile, in one call */
#define RELOCATE_PASSES		4

/*
 * Locate and examine c[0..n) (see locate and examine; the caller asked the
 * cache, cache_fill).  Those examine found moved since locate() resolved
 * them, or in a spindle dropped since *dirp was read, are located again,
 * with a directory read again (which replaces *dirp), and examined again:
 * each pass follows at least one more committed link or drop, so a few
 * passes settle all but a chain a mover keeps extending; what is left
 * stays EV_RETRY, examined again by the next attempt.  Leaves c sorted by
 * location but for those.
 */
static void
locate_examine(Relation facade, SpindleDirectory **dirp, Candidate *c, int n,
			   TimestampTz now, Snapshot snapshot, bool purge, bool dead_only)
{
	Moves		m;
	Candidate  *again = NULL;

	moves_open(facade, &m);
	spindle_test_pause("consume_locate");
	locate(facade, dirp, &m, c, n);
	qsort(c, n, sizeof(Candidate), cmp_candidate_location);
	spindle_test_pause("consume_examine");
	examine(facade, *dirp, &m, c, n, now, snapshot, purge, dead_only, false);
	for (int pass = 0; pass < RELOCATE_PASSES; pass++)
	{
		int			na = 0;

		for (int i = 0; i < n; i++)
			if (c[i].relocate)
			{
				if (again == NULL)
					again = palloc(sizeof(Candidate) * n);
				again[na] = c[i];
				again[na++].origin = i;
			}
		if (na == 0)
			break;
		/* an entry or a drop was met: read tree 3 and the catalog again */
		m.reloc = true;
		spindle_directory_release(*dirp);
		spindle_directory_forget(RelationGetRelid(facade));
		*dirp = spindle_directory_acquire(facade);
		locate(facade, dirp, &m, again, na);
		qsort(again, na, sizeof(Candidate), cmp_candidate_location);
		examine(facade, *dirp, &m, again, na, now, snapshot, purge,
				dead_only, true);
		/* back in place (again was sorted by location) */
		for (int x = 0; x < na; x++)
			c[again[x].origin] = again[x];
	}
	if (again != NULL)
		pfree(again);
	moves_close(&m);
}

/* ---------- recording what was found ---------- */

/*
 * The item kind an outcome leaves behind the head (FREE: nothing).  A
 * delivered event is this backend's claim: purged by its transaction
 * (dequeue, or a move to the dead-letter queue), or (read) to become a
 * lease when the read() returns (to_lease).
 */
static QueueItemKind
outcome_kind(const Candidate *c)
{
	switch (c->outcome)
	{
		case EV_DELIVER:
			return QITEM_CLAIM;
		case EV_PENDING:
			return QITEM_PENDING;
		case EV_RETRY:
		case EV_UNSEEN:
			return QITEM_RETURNED;
		case EV_GONE:
		case EV_DELAYED:		/* parked on disk: park_outcome() */
		case EV_PARKED:
			return QITEM_FREE;
	}
	return QITEM_RETURNED;
}

/* Whether two consecutive candidates can share an item. */
static bool
same_run(const Candidate *a, const Candidate *b, bool lease)
{
	if (a->msg_id + 1 != b->msg_id || a->outcome != b->outcome)
		return false;
	switch (a->outcome)
	{
		case EV_PENDING:
			return TransactionIdEquals(a->xid, b->xid);
		case EV_DELAYED:
			/* never early; late by at most a second */
			return Abs(a->due - b->due) < USECS_PER_SEC;
		case EV_DELIVER:
			return a->dead == b->dead &&
				(!lease || a->read_count == b->read_count);
		default:
			return true;
	}
}

/*
 * Join the run [first, last] of kind (PENDING) to an item of qs (locked)
 * other than self that ends just before it and says the same (the same
 * read count; the same awaited xid, a valid one): a run of events of one
 * open producer passed one dequeue at a time then takes one item, not one
 * per call.  Runs of different read counts stay apart, or an event never
 * delivered would inherit the count of one read before it (and be
 * dead-lettered unread).
 */
static bool
extend_item(QueueState *qs, QueueItem *self, QueueItemKind kind,
			const Candidate *first, const Candidate *last)
{
	dlist_iter	iter;

	dlist_foreach(iter, &qs->items)
	{
		QueueItem  *item = dlist_container(QueueItem, node, iter.cur);

		if (item == self || item->kind != kind || item->end != first->msg_id ||
			item->read_count != first->read_count)
			continue;
		if (!TransactionIdIsValid(first->xid) ||
			!TransactionIdEquals(item->xid, first->xid))
			continue;
		item->end = last->msg_id + 1;
		return true;
	}
	return false;
}

/*
 * The rest of source s from candidate i on has no item of its own (the
 * pool is out of items or leases): the claim's item keeps it.  If this
 * backend purged some of it (dequeue, moves to the dead-letter queue), it
 * stays our claim, marked mixed: the purged events are ours to deliver,
 * the others are examined again when the claim ends, whatever the end.
 * Otherwise (read) it becomes RETURNED and none of it is delivered.
 * Returns the candidate after the source.
 */
static int
keep_rest(QueueItem *item, Candidate *c, int n, int i, int s, bool lease,
		  TransactionId xid)
{
	bool		purged = false;
	int			k;

	item->start = c[i].msg_id;
	for (k = i; k < n && c[k].source == s; k++)
		if (c[k].outcome == EV_DELIVER && (!lease || c[k].dead))
			purged = true;
	if (purged)
	{
		item->xid = xid;
		item->mixed = true;
		item->to_lease = false;
	}
	else
	{
		item->kind = QITEM_RETURNED;
		item->owner = -1;
	}
	for (k = i; k < n && c[k].source == s; k++)
		if (c[k].outcome == EV_DELIVER && !(!lease || c[k].dead))
			c[k].outcome = EV_RETRY;
	return k;
}

/*
 * Cut from the parked runs the candidates found gone whose source was a
 * run that stays parked until settled (READY, or a lease handed back):
 * purged, aborted or never used, they need no retry; those this call
 * purges (dequeue, a move to the dead-letter queue) are cut when its
 * transaction commits (AckedLease).  Candidates sorted by source, then
 * msg_id.
 */
static void
forget_gone(Relation facade, const Source *sources, const Candidate *c,
			int n, bool purge)
{
	int64	   *ranges = NULL;
	int			nranges = 0;
	int			i;

	for (i = 0; i < n; i++)
	{
		if (!sources[c[i].source].parked)
			continue;
		/* purged by this transaction: cut when it commits */
		if (c[i].outcome == EV_DELIVER && (purge || c[i].dead))
			note_acked_lease(RelationGetRelid(facade), c[i].msg_id, false);
		if (c[i].outcome != EV_GONE)
			continue;
		if (ranges == NULL)
			ranges = palloc(sizeof(int64) * 2 * n);
		if (nranges > 0 && ranges[2 * nranges - 1] == c[i].msg_id)
			ranges[2 * nranges - 1]++;
		else
		{
			ranges[2 * nranges] = c[i].msg_id;
			ranges[2 * nranges + 1] = c[i].msg_id + 1;
			nranges++;
		}
	}
	if (nranges > 0)
	{
		spindle_park_forget(RelationGetRelid(facade), ranges, nranges);
		pfree(ranges);
	}
}

/*
 * Pending runs a state keeps in shared memory before it parks the rest on
 * disk: a queue's 256 items would otherwise be used up by a few hundred
 * open producer transactions (review finding 1).
 */
#define PENDING_IN_MEMORY	(SPINDLE_ITEMS_PER_QUEUE / 2)

/*
 * Park on disk the runs of candidates (sorted by source, then msg_id) whose
 * outcome is `outcome`, one run per stretch of consecutive ids of a source:
 *
 * EV_DELAYED: runs of events due within a second of the run's first,
 * parked until the latest (never early, late by at most a second).
 *
 * EV_PENDING: only with many items in use already, runs pending on one
 * running transaction, looked at again a second later
 * (queue_parked.c); their candidates become EV_PARKED, which record()
 * treats as settled.  Below the threshold they stay items, examined again
 * at each call as soon as their transaction ends.
 *
 * Done before record() lets the claims of them go, so that an error
 * meanwhile leaves them claimed, hence examined again (the run left in the
 * tree then yields to the item: queue_parked.c, P3).
 */
static void
park_outcome(Relation facade, QueueState *qs, Candidate *c, int n,
			 EvOutcome outcome)
{
	bool		delayed = (outcome == EV_DELAYED);
	TimestampTz pending_due = GetCurrentTimestamp() + USECS_PER_SEC;
	ParkedRun  *runs = NULL;
	int			nruns = 0;
	int			i = 0;

	Assert(outcome == EV_DELAYED || outcome == EV_PENDING);
	if (!delayed && qs->nitems - qs->nleases < PENDING_IN_MEMORY)	/* a hint */
		return;
	while (i < n)
	{
		int			j = i;
		int			k;
		ParkedRun  *r;

		if (c[i].outcome != outcome ||
			(!delayed && !TransactionIdIsValid(c[i].xid)))
		{
			i++;
			continue;
		}
		while (j + 1 < n && c[j + 1].source == c[i].source &&
			   c[j + 1].outcome == outcome &&
			   c[j + 1].msg_id == c[j].msg_id + 1 &&
			   (delayed ? Abs(c[j + 1].due - c[i].due) < USECS_PER_SEC :
				TransactionIdEquals(c[j + 1].xid, c[i].xid)))
			j++;
		if (runs == NULL)
			runs = palloc(sizeof(ParkedRun) * n);
		r = &runs[nruns++];
		r->start = c[i].msg_id;
		r->end = c[j].msg_id + 1;
		r->due = delayed ? c[i].due : pending_due;
		r->read_count = c[i].read_count;
		r->kind = delayed ? SPINDLE_RUN_DELAYED : SPINDLE_RUN_PENDING;
		r->xid = delayed ? InvalidTransactionId : c[i].xid;
		for (k = i; k <= j; k++)
		{
			r->read_count = Max(r->read_count, c[k].read_count);
			if (delayed)
				r->due = Max(r->due, c[k].due);
			else
				c[k].outcome = EV_PARKED;
		}
		i = j + 1;
	}
	if (nruns > 0)
	{
		spindle_park_runs(facade, qs, runs, nruns);
		pfree(runs);
	}
}

/*
 * Replace each source's claim by what its candidates turned out to be.
 * Candidates are sorted by source, then msg_id; delivered ones become this
 * backend's claims: purged by xid (dequeue, and read's moves to the
 * dead-letter queue), or, for read's others, claims to_lease, which
 * grant_leases makes leases when the read() returns (and which an abort
 * hands back unread, so that a read() that fails leases nothing); gone
 * ones become nothing.  Where the pool has no item left, see keep_rest,
 * and *pool_full is set.
 */
static void
record(QueueState *qs, Source *sources, int nsources, Candidate *c, int n,
	   bool lease, TransactionId xid, bool *pool_full)
{
	int			i = 0;
	int			s;

	LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
	for (s = 0; s < nsources; s++)
	{
		Source	   *src = &sources[s];
		QueueItem  *item = src->item;

		if (item->generation != src->generation ||
			item->kind != QITEM_CLAIM || item->owner != MyProc->pgprocno)
		{
			/*
			 * Reset meanwhile (cannot happen while we hold the table
			 * locked, but a rebuild would be right too): what we purged
			 * is still ours to deliver, and a rebuild finds the rest.
			 */
			while (i < n && c[i].source == s)
			{
				if (lease && !c[i].dead && c[i].outcome == EV_DELIVER)
					c[i].outcome = EV_RETRY;
				i++;
			}
			continue;
		}
		while (i < n && c[i].source == s)
		{
			int			j = i;
			bool		last;
			bool		leasing;
			QueueItemKind kind;
			QueueItem  *run;

			while (j + 1 < n && c[j + 1].source == s &&
				   same_run(&c[j], &c[j + 1], lease))
				j++;
			last = !(j + 1 < n && c[j + 1].source == s);
			kind = outcome_kind(&c[i]);
			leasing = lease && kind == QITEM_CLAIM && !c[i].dead;
			if (kind == QITEM_FREE)
			{
				if (last)
					spindle_qitem_free(qs, item);
				else
					item->start = c[j + 1].msg_id;
				i = j + 1;
				continue;
			}
			if (kind == QITEM_PENDING &&
				extend_item(qs, item, kind, &c[i], &c[j]))
			{
				/* joined to the run just before it */
				if (last)
					spindle_qitem_free(qs, item);
				else
					item->start = c[j + 1].msg_id;
				i = j + 1;
				continue;
			}
			if (last && (!leasing || spindle_qitem_lease_room()))
			{
				/* the last run takes the claim's own item */
				run = item;
				item->start = c[i].msg_id;
				if (leasing)
					qs->nleases++;
			}
			else if (last)
				run = NULL;		/* no lease left: examined again */
			else
				/* a lease to be is counted as a lease from now on */
				run = spindle_qitem_alloc(qs, leasing ? QITEM_LEASED : kind,
										  c[i].msg_id, c[j].msg_id + 1);
			if (run == NULL)
			{
				/* a read() that can lease nothing says so (53400) */
				*pool_full = true;
				i = keep_rest(item, c, n, i, s, lease, xid);
				if (item->kind == QITEM_CLAIM && item->mixed)
					mark_purge(qs, item, item->generation);
				break;
			}
			run->kind = kind;
			run->to_lease = leasing;
			run->end = c[j].msg_id + 1;
			run->read_count = c[i].read_count;
			run->xid = kind == QITEM_PENDING ? c[i].xid :
				kind == QITEM_CLAIM && !leasing ? xid : InvalidTransactionId;
			run->owner = kind == QITEM_CLAIM ? MyProc->pgprocno : -1;
			run->mixed = false;
			/* a claim of a run that stays parked until it settles */
			if (kind == QITEM_CLAIM)
				run->parked = src->parked;
			if (kind == QITEM_CLAIM && run != item)
				remember_claim(qs, run);
			if (!last)
				item->start = c[j + 1].msg_id;
			if (kind == QITEM_CLAIM && !leasing)
			{
				/* a purge; it joins the claim just before it */
				mark_purge(qs, run, run->generation);
				(void) join_last_claim(qs, run);
			}
			i = j + 1;
		}
	}
	LWLockRelease(spindle_queue_lock(qs));
}

/*
 * The read() call lease_call of queue table facade (state qs, pinned)
 * returns: its claims to_lease become leases until due, each event's read
 * count one more (saturating), parked on disk (queue_parked.c), and this
 * backend forgets them (leases do not depend on the transaction).  Until
 * now no other consumer could take them, so no read() returns an event
 * twice, and an error or a cancel before this point leased nothing.  The
 * leases are written before the claims go.  With max_reads (flush), where
 * the count decides a dead letter, they are flushed before read()
 * returns, so that a crash while the event is processed still counts its
 * delivery; otherwise they reach the disk as an asynchronous commit does
 * (the WAL writer, or the next flush), and a crash may forget the last
 * reads: their events come back sooner, with the read count they had.
 */
static void
grant_leases(Relation facade, QueueState *qs, bool flush, uint64 lease_call,
			 TimestampTz due)
{
	dlist_mutable_iter iter;
	ParkedRun  *runs = NULL;
	int			nruns = 0;
	int			nalloc = 0;
	int			i;

	dlist_foreach_modify(iter, &my_claims)
	{
		ClaimRef   *ref = dlist_container(ClaimRef, node, iter.cur);
		QueueItem  *item = spindle_qitem_at(ref->index);

		if (ref->lease_call != lease_call)
			continue;
		Assert(spindle_queue_state_at(ref->slot) == qs);
		LWLockAcquire(spindle_queue_lock(qs), LW_SHARED);
		if (item->generation == ref->generation &&
			item->kind == QITEM_CLAIM && item->owner == MyProc->pgprocno &&
			item->to_lease)
		{
			if (nruns == nalloc)
			{
				nalloc = Max(8, nalloc * 2);
				runs = runs == NULL ? palloc(sizeof(ParkedRun) * nalloc) :
					repalloc(runs, sizeof(ParkedRun) * nalloc);
			}
			runs[nruns].start = item->start;
			runs[nruns].end = item->end;
			runs[nruns].due = due;
			runs[nruns].read_count = item->read_count < PG_INT32_MAX ?
				item->read_count + 1 : PG_INT32_MAX;
			runs[nruns].kind = SPINDLE_RUN_LEASED;
			runs[nruns].xid = InvalidTransactionId;
			nruns++;
		}
		LWLockRelease(spindle_queue_lock(qs));
	}
	if (nruns == 0)
		return;
	spindle_park_runs(facade, qs, runs, nruns);
	if (flush)
		XLogFlush(XactLastRecEnd);
	dlist_foreach_modify(iter, &my_claims)
	{
		ClaimRef   *ref = dlist_container(ClaimRef, node, iter.cur);
		QueueItem  *item = spindle_qitem_at(ref->index);

		if (ref->lease_call != lease_call)
			continue;
		LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
		if (item->generation == ref->generation &&
			item->kind == QITEM_CLAIM && item->owner == MyProc->pgprocno &&
			item->to_lease)
		{
			spindle_qitem_free(qs, item);
			LWLockRelease(spindle_queue_lock(qs));
			dlist_delete(&ref->node);
			pfree(ref);
			continue;
		}
		LWLockRelease(spindle_queue_lock(qs));
	}
	for (i = 0; i < nruns; i++)
		note_granted(qs, &runs[i]);
	pfree(runs);
}

/* ---------- the consuming functions ---------- */

typedef struct ConsumeResult
{
	Candidate  *c;
	int			n;
	int			nalloc;			/* room in c[] (consume's result only) */
} ConsumeResult;

/*
 * consume()'s result starts with room for this many events and grows as
 * they are delivered: max_events bounds the call, it is no allocation
 * (2147483647 of them would not fit in palloc's 1 GB).
 */
#define CONSUME_INITIAL_ROOM	256

/*
 * One attempt claims at most this many positions: its candidates are
 * allocated for all it claims (a whole spindle at the head may hold
 * millions), and claims held while examining keep others waiting.
 */
#define CONSUME_ATTEMPT_MAX		1024

/*
 * A consumer's call (dequeue or read) and what it has open: the queue's
 * table, locked, and its shared state.  consume() may close and re-open
 * them while it sleeps (see consume_sleep), so they are kept here.
 */
typedef struct Consumer
{
	FunctionCallInfo fcinfo;	/* the call: the queue name is argument 0 */
	SpindleQueue q;
	Relation	rel;			/* the queue's table (RowExclusiveLock) */
	QueueState *qs;
	bool		purge;			/* dequeue; else read */
	Snapshot	snapshot;		/* transaction snapshot isolation, or NULL */
	int			gone_in_a_row;	/* attempts in a row that found only
								 * consumed events: at 2, skip_settled */
	HeadLook	look;			/* where the last look found nothing
								 * settled (the next one only once the head
								 * passed it), and its window */
} Consumer;

/*
 * One attempt to take up to want events of the queue: dequeue (purge) or
 * read (claims to be leased, see record).  Returns the candidates; those
 * with outcome EV_DELIVER were delivered (those marked dead are for the
 * dead-letter queue, purged for read too).  Assigns no transaction id
 * unless it purges something (an empty poll writes nothing).
 */
static ConsumeResult
consume_once(Consumer *cs, int want, TimestampTz ready_at, bool *pool_full)
{
	ConsumeResult res = {NULL, 0, 0};
	Relation	facade = cs->rel;
	QueueState *qs = cs->qs;
	SpindleDirectory *dir;
	Source	   *sources;
	int			nsources;
	int			max_sources = 64;
	int			got;
	int			s;
	int			cache_slot;
	int64		newest = 0;
	bool		ends_spindle;
	bool		any_dead = false;
	TimestampTz now;

	AcceptInvalidationMessages();
	/* qs->head read unlocked: a hint */
	cs->look.on = cs->gone_in_a_row >= 2 && qs->head > cs->look.vain_at;

	/*
	 * Every committed spindle: a consumer woken by a producer's COMMIT runs
	 * before that COMMIT sends its invalidations, and would otherwise find
	 * no spindle at the head and sleep until its wait ends.
	 */
	dir = spindle_directory_acquire_current(facade);
	sources = palloc(sizeof(Source) * max_sources);
	got = take_claims(qs, facade, dir, want, sources, &nsources, max_sources,
					  ready_at, &cs->look, pool_full, &ends_spindle);

	/*
	 * The time events are judged due against, read after the claims: a
	 * producer takes its slot (so before the claim) after its transaction
	 * began, so an event enqueued with no delay is never taken for
	 * delayed, parked, and delivered after its producer's later events
	 * (read before the claims, it was: the fault test 096's order check).
	 */
	now = GetCurrentTimestamp();
	if (ends_spindle && cs->purge)
	{
		register_callbacks();	/* got may be 0: no claim registered them */
		nudge_at_commit = true;
	}
	if (got == 0)
	{
		spindle_directory_release(dir);
		return res;
	}
	for (s = 0; s < nsources; s++)
		newest = Max(newest, sources[s].end - 1);
	if (newest >= dir->event_end)
	{
		/*
		 * Items of spindles this directory does not know yet: another
		 * consumer saw them, so they are committed; read what changed, or
		 * locate() would take their events for gone and leave them behind
		 * the head for good.
		 */
		spindle_directory_release(dir);
		dir = spindle_directory_acquire_upto_event(facade, newest);
	}
	res.c = palloc0(sizeof(Candidate) * got);
	for (s = 0; s < nsources; s++)
	{
		int64		p;

		for (p = sources[s].start; p < sources[s].end; p++)
		{
			Candidate  *c = &res.c[res.n++];

			c->msg_id = p;
			c->source = s;
			c->read_count = sources[s].read_count;
			c->dead = cs->q.max_reads > 0 && c->read_count >= cs->q.max_reads;
			any_dead |= c->dead;
		}
	}
	cache_slot = spindle_cache_find(RelationGetRelid(facade));
	cache_fill(facade, dir, cache_slot, res.c, res.n);
	/* read purges the events it moves to the dead-letter queue */
	locate_examine(facade, &dir, res.c, res.n, now, cs->snapshot,
				   cs->purge || any_dead, !cs->purge);
	qsort(res.c, res.n, sizeof(Candidate), cmp_candidate_source);
	park_outcome(facade, qs, res.c, res.n, EV_DELAYED);
	park_outcome(facade, qs, res.c, res.n, EV_PENDING);
	forget_gone(facade, sources, res.c, res.n, cs->purge);
	/* what was purged assigned the transaction id */
	record(qs, sources, nsources, res.c, res.n, !cs->purge,
		   GetCurrentTransactionIdIfAny(), pool_full);
	spindle_directory_release(dir);
	cache_done(facade, cache_slot, res.c, res.n, cs->purge);
	return res;
}


/*
 * The wall-clock time consumers must next look again at qs: its earliest
 * due item or parked run (DT_NOEND: none).
 */
static TimestampTz
next_due(Relation facade, QueueState *qs)
{
	dlist_iter	iter;
	TimestampTz due = spindle_park_next_due(facade, qs);

	LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
	dlist_foreach(iter, &qs->items)
	{
		QueueItem  *item = dlist_container(QueueItem, node, iter.cur);

		if (item->kind == QITEM_PENDING || item->kind == QITEM_RETURNED)
		{
			/* a transaction's end may not wake us: look every second */
			TimestampTz soon = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000);

			if (soon < due)
				due = soon;
		}
	}
	LWLockRelease(spindle_queue_lock(qs));
	return due;
}

/*
 * A memory context for one attempt of consume_now, under cxt (the call's):
 * what consume_once allocates -- claims' sources, candidates, the log's
 * entries, the copies of delivered events -- lives there, and is let go
 * with the attempt when it delivered nothing.  Until turn 4, session 10,
 * every attempt's memory stayed until the call ended: a dequeue walking
 * over a long run of consumed events (a lease keeping the log from
 * folding them, after a restart) kept about 4 KB per event, and one over
 * 16 800 000 of them was killed by the kernel (review rv3).
 */
static MemoryContext
attempt_context(MemoryContext cxt)
{
	return AllocSetContextCreate(cxt, "spindle consume attempt",
								 ALLOCSET_SMALL_SIZES);
}

/*
 * Take up to want events without sleeping: attempt after attempt while
 * each finds events to look at and makes progress (delivers some, or moves
 * the head); events it finds pending or delayed stay behind.  Appends the
 * delivered ones to *out.
 */
static void
consume_now(Consumer *cs, int want, ConsumeResult *out, bool *pool_full)
{
	/* items are ready if due before this call */
	TimestampTz ready_at = GetCurrentTimestamp();
	QueueState *qs = cs->qs;
	int			fruitless = 0;
	MemoryContext cxt = CurrentMemoryContext;
	MemoryContext attempt = attempt_context(cxt);

	spill_if_crowded(cs->rel, qs);
	while (out->n < want)
	{
		int64		head_before = qs->head;
		int			nitems_before = qs->nitems;
		ConsumeResult res;
		int			delivered = 0;
		int			gone = 0;
		bool		settled = false;
		int			i;

		CHECK_FOR_INTERRUPTS();
		MemoryContextSwitchTo(attempt);
		res = consume_once(cs, Min(want - out->n, CONSUME_ATTEMPT_MAX),
						   ready_at, pool_full);
		MemoryContextSwitchTo(cxt);
		for (i = 0; i < res.n; i++)
			if (res.c[i].outcome == EV_DELIVER)
			{
				/* out->n < want: consume_once took at most want - out->n */
				if (out->n >= out->nalloc)
				{
					out->nalloc = (int) Min((int64) want,
											(int64) out->nalloc * 2);
					out->c = repalloc(out->c,
									  sizeof(Candidate) * out->nalloc);
				}
				out->c[out->n++] = res.c[i];
				delivered++;
			}
			else if (res.c[i].outcome != EV_RETRY &&
					 res.c[i].outcome != EV_UNSEEN)
			{
				settled = true;
				gone += res.c[i].outcome == EV_GONE;
			}
		/*
		 * A walk over consumed events: from the second such attempt in a
		 * row, the next ones skip them (one alone is a deleted event
		 * before a live one, which a look would not help).
		 */
		if (delivered == 0 && gone == res.n && gone > 0)
			cs->gone_in_a_row++;
		else
			cs->gone_in_a_row = 0;
		/*
		 * The delivered events' tuples and payloads stay in the attempt's
		 * context until the call ends; an attempt that delivered nothing
		 * leaves nothing anyone reads, and its memory goes at once (a walk
		 * over a long run of consumed events makes an attempt per claim).
		 */
		if (res.c != NULL)
			pfree(res.c);		/* copied out by value above */
		if (delivered > 0)
			attempt = attempt_context(cxt);
		else
			MemoryContextReset(attempt);
		/*
		 * An attempt that delivered nothing may still have made progress:
		 * it moved the head, or settled what it took -- found the events
		 * of an item to examine again gone (acknowledged meanwhile) and
		 * freed it, or found them pending on a running transaction (a row
		 * lock, say) or delayed, which the next attempt does not take
		 * again; the events past them are then for the next attempt, not
		 * for the next call (which would return nothing while events
		 * wait).  Only events found not placed yet (EV_RETRY) or not in
		 * the caller's snapshot (EV_UNSEEN) are taken again at once: an
		 * attempt that found nothing else ends the call.  A bounded
		 * number of attempts in a row that only settled items ends it
		 * too, so that items others keep changing cannot keep it here.
		 */
		/* no item left for a claim: our own claims go to disk, once more */
		if (*pool_full && spill_claims(cs->rel, qs) > 0)
		{
			*pool_full = false;
			continue;
		}
		/* an attempt that only moved the head (past parked runs) goes on */
		if (*pool_full || (res.n == 0 && qs->head == head_before))
			break;
		if (delivered > 0 || qs->head != head_before)
			fruitless = 0;
		else if (!(settled || qs->nitems != nitems_before) || ++fruitless > 16)
			break;
	}
}

/*
 * Open the consumer's queue (see open_queue) and its state.  A queue with
 * a dead-letter queue needs INSERT on it: checked here, before anything is
 * claimed or leased, so that a consumer without it gets a clear error
 * every time rather than a lease of events it never receives.
 */
static void
consumer_open(Consumer *cs)
{
	cs->rel = open_queue(cs->fcinfo, RowExclusiveLock, &cs->q);
	if (cs->q.max_reads > 0 && cs->q.dead_letter_queue[0] != '\0')
	{
		SpindleQueue dlq;

		if (!spindle_queue_lookup(cs->q.dead_letter_queue, &dlq, true))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_TABLE),
					 errmsg("dead-letter queue \"%s\" of queue \"%s\" does not exist",
							cs->q.dead_letter_queue, cs->q.name)));
		if (!spindle_queue_has_right(dlq.relid, GetUserId(), ACL_INSERT))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied for dead-letter queue \"%s\" of queue \"%s\"",
							dlq.name, cs->q.name),
					 errdetail("Consumers of queue \"%s\" move the events read more than max_reads (%d) times into its dead-letter queue, which needs INSERT privilege on table %s.%s.",
							   cs->q.name, cs->q.max_reads,
							   SPINDLE_QUEUE_SCHEMA, dlq.name),
					 errhint("The dead-letter queue's owner can GRANT it: GRANT INSERT ON %s.%s TO %s.",
							 SPINDLE_QUEUE_SCHEMA, dlq.name,
							 quote_identifier(GetUserNameFromId(GetUserId(), false)))));
	}
	/* a long poll opens the queue again after each sleep: maybe another */
	if (cs->qs != NULL)
		spindle_queue_state_unpin(cs->qs);
	cs->qs = NULL;
	cs->qs = spindle_queue_state_pin(RelationGetRelid(cs->rel));
}

/*
 * Sleep on the queue's condition variable (prepared) for up to sleep_us,
 * holding no lock on its table meanwhile: a waiter must not make DDL on
 * the queue wait (ALTER, TRUNCATE, drop_queue), nor the producers queued
 * behind that DDL, whose enqueues are what would wake it (the locks its
 * attempts took, on spindles among others, are gone already: see
 * consume_attempt).  Nothing this call purged or claimed is held (it
 * delivered nothing yet).  Re-opens
 * the queue afterwards, with all its checks: it may have been altered,
 * truncated, dropped (42P01) or re-created, or the rights revoked.
 * A lock the transaction held before the call stays held.
 */
static void
consume_sleep(Consumer *cs, int64 sleep_us)
{
	QueueState *qs = cs->qs;

	table_close(cs->rel, RowExclusiveLock);
	cs->rel = NULL;
	/* spindle.queues.waiting_consumers */
	pg_atomic_fetch_add_u32(&qs->waiting, 1);
	PG_TRY();
	{
		(void) ConditionVariableTimedSleep(&qs->cv,
										   Max(1, Min(sleep_us / 1000 + 1,
													  INT_MAX)),
										   PG_WAIT_EXTENSION);
	}
	PG_FINALLY();
	{
		pg_atomic_fetch_sub_u32(&qs->waiting, 1);
	}
	PG_END_TRY();
	CHECK_FOR_INTERRUPTS();
	consumer_open(cs);
}

/*
 * The end of a long poll's attempt, whose locks (and nothing else: what
 * else it took it let go of) its own resource owner holds, a child of
 * parent: with keep, the locks go to parent, as if taken under it (the
 * call returns what the attempt delivered); else they are released,
 * before a sleep.  Only the counts taken under owner go: a lock the
 * transaction held before the call stays held.
 */
static void
attempt_end(ResourceOwner owner, ResourceOwner parent, bool keep)
{
	CurrentResourceOwner = parent;
	ResourceOwnerRelease(owner, RESOURCE_RELEASE_BEFORE_LOCKS, true, false);
	/* a commit hands the locks to the parent owner, an abort drops them */
	ResourceOwnerRelease(owner, RESOURCE_RELEASE_LOCKS, keep, false);
	ResourceOwnerRelease(owner, RESOURCE_RELEASE_AFTER_LOCKS, true, false);
	ResourceOwnerDelete(owner);
}

/*
 * One attempt of consume (see there), and, if it delivered nothing, the
 * time to sleep before the next one (0: none; -1: the wait is over).  A
 * long poll (wait_us > 0) makes the attempt under a resource owner of its
 * own, so that the locks it takes -- the spindles examined, which
 * examine() keeps (a dequeue purges in them), the extension's catalogs
 * read for the directory -- can all be let go before it sleeps: a waiter
 * must hold nothing that DDL on the queue waits for (review finding F6:
 * the spindle of a delayed event kept TRUNCATE and drop_queue, and the
 * producers behind them, waiting for the whole wait).  It delivered
 * nothing then, so it purged nothing: no lock it lets go covers a change
 * of its transaction.  An error leaves the owner to the (sub)transaction's
 * abort, which releases its children.
 */
static int64
consume_attempt(Consumer *cs, int want, int64 wait_us, instr_time start,
				ConsumeResult *res)
{
	ResourceOwner parent = CurrentResourceOwner;
	ResourceOwner owner = NULL;
	bool		pool_full = false;
	int64		sleep_us = -1;

	if (wait_us > 0)
	{
		owner = ResourceOwnerCreate(parent, "spindle long poll attempt");
		CurrentResourceOwner = owner;
	}
	PG_TRY();
	{
		consume_now(cs, want, res, &pool_full);
		if (res->n == 0 && pool_full)
			no_room_for_item();
		if (res->n == 0 && wait_us > 0)
		{
			instr_time	elapsed;
			TimestampTz due;

			INSTR_TIME_SET_CURRENT(elapsed);
			INSTR_TIME_SUBTRACT(elapsed, start);
			if ((int64) INSTR_TIME_GET_MICROSEC(elapsed) < wait_us)
			{
				sleep_us = wait_us - (int64) INSTR_TIME_GET_MICROSEC(elapsed);
				due = next_due(cs->rel, cs->qs);
				if (due != DT_NOEND)
					sleep_us = Max(0, Min(sleep_us,
										  due - GetCurrentTimestamp()));
			}
		}
	}
	PG_CATCH();
	{
		CurrentResourceOwner = parent;
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (owner != NULL)
		attempt_end(owner, parent, res->n > 0);
	return res->n > 0 ? -1 : sleep_us;
}

/*
 * Take up to want events, waiting up to wait_us for the first one: the
 * condition variable is registered before each attempt, so an enqueue that
 * commits between the attempt and the sleep still wakes it.  The wait is
 * measured on the monotonic clock (a step of the wall clock neither
 * stretches nor cuts it); due times of items are wall-clock times.  While
 * it sleeps the call holds no lock it took on the queue's relations (see
 * consume_attempt and consume_sleep).
 */
static ConsumeResult
consume(Consumer *cs, int want, int64 wait_us)
{
	instr_time	start;
	ConsumeResult res;

	INSTR_TIME_SET_CURRENT(start);
	res.nalloc = Min(want, CONSUME_INITIAL_ROOM);
	res.c = palloc0(sizeof(Candidate) * res.nalloc);
	res.n = 0;
	for (;;)
	{
		int64		sleep_us;

		if (wait_us > 0)
			ConditionVariablePrepareToSleep(&cs->qs->cv);
		sleep_us = consume_attempt(cs, want, wait_us, start, &res);
		if (sleep_us < 0)
			break;
		if (sleep_us > 0)
			consume_sleep(cs, sleep_us);
		CHECK_FOR_INTERRUPTS();
	}
	if (wait_us > 0)
		ConditionVariableCancelSleep();
	return res;
}

/* Emit the delivered candidates, in msg_id order, as spindle.message rows. */
static void
emit_messages(FunctionCallInfo fcinfo, Relation facade, ConsumeResult *res)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TupleDesc	td = RelationGetDescr(facade);
	Datum	   *values = palloc(sizeof(Datum) * td->natts);
	bool	   *nulls = palloc(sizeof(bool) * td->natts);
	bool		read = fcinfo->flinfo->fn_addr == spindle_read;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	qsort(res->c, res->n, sizeof(Candidate), cmp_candidate_msgid);
	for (i = 0; i < res->n; i++)
	{
		Candidate  *c = &res->c[i];
		Datum		out[4];
		bool		outnull[4] = {false, false, false, false};

		if (c->outcome != EV_DELIVER)
			continue;
		/* read: this read counts (as grant_leases counts it) */
		out[2] = Int32GetDatum(c->read_count +
							   (read && c->read_count < PG_INT32_MAX ? 1 : 0));
		if (c->from_cache)
		{
			out[0] = Int64GetDatum(c->msg_id);
			out[1] = TimestampTzGetDatum(c->enqueued_at);
			out[3] = PointerGetDatum(PG_DETOAST_DATUM(PointerGetDatum(c->payload)));
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnull);
			continue;
		}
		if (c->tuple == NULL)
			continue;
		heap_deform_tuple(c->tuple, td, values, nulls);
		out[0] = Int64GetDatum(c->msg_id);
		out[1] = values[QCOL_ENQUEUED - 1];
		outnull[1] = nulls[QCOL_ENQUEUED - 1];
		if (nulls[QCOL_PAYLOAD - 1])
			outnull[3] = true;
		else
			out[3] = PointerGetDatum(PG_DETOAST_DATUM_COPY(values[QCOL_PAYLOAD - 1]));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnull);
	}
}

/*
 * Connect SPI and prepare the INSERT of one payload into cs's dead-letter
 * queue (as the caller: its INSERT right was checked in consumer_open).
 */
static SPIPlanPtr
prepare_dead_letter_move(Consumer *cs)
{
	Oid			argtypes[1] = {JSONBOID};
	char	   *sql = psprintf("INSERT INTO %s.%s (payload) VALUES ($1)",
							   quote_identifier(SPINDLE_QUEUE_SCHEMA),
							   quote_identifier(cs->q.dead_letter_queue));
	SPIPlanPtr	plan;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	plan = SPI_prepare(sql, 1, argtypes);
	if (plan == NULL)
		elog(ERROR, "could not prepare the move to the dead-letter queue: %s",
			 SPI_result_code_string(SPI_result));
	return plan;
}

/*
 * Insert the payload of dead event c into the dead-letter queue.  A rule
 * on that queue's table that turns the INSERT into something else (DO
 * INSTEAD) would lose the event: refuse with a clear error instead.
 */
static void
move_one_dead_letter(Consumer *cs, SPIPlanPtr plan, Candidate *c,
					 TupleDesc td, Datum *values, bool *nulls)
{
	Datum		args[1];
	int			rc;

	if (c->from_cache)
		args[0] = PointerGetDatum(c->payload);
	else
	{
		heap_deform_tuple(c->tuple, td, values, nulls);
		args[0] = values[QCOL_PAYLOAD - 1];
	}
	rc = SPI_execute_plan(plan, args, NULL, false, 0);
	if (rc != SPI_OK_INSERT || SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("could not move an event of queue \"%s\" to its dead-letter queue \"%s\"",
						cs->q.name, cs->q.dead_letter_queue),
				 errdetail("The INSERT into the dead-letter queue's table did not insert one row (a rule rewrites it)."),
				 errhint("Drop the INSTEAD rule of table %s.%s.",
						 SPINDLE_QUEUE_SCHEMA, cs->q.dead_letter_queue)));
}

/*
 * Events read max_reads times or more (marked dead; purged by this
 * transaction) go to the queue's dead-letter queue instead of being
 * delivered: enqueued there, in the caller's transaction, so both or
 * neither happen.  Without a dead-letter queue they are only purged.  The
 * caller's INSERT on the dead-letter queue was checked (consumer_open).
 * Leaves the others in res.
 */
static void
move_dead_letters(Consumer *cs, ConsumeResult *res)
{
	TupleDesc	td = RelationGetDescr(cs->rel);
	Datum	   *values = palloc(sizeof(Datum) * td->natts);
	bool	   *nulls = palloc(sizeof(bool) * td->natts);
	SPIPlanPtr	plan = NULL;
	int			kept = 0;
	int			i;

	/* consumers go on under the disk alarm, their dead-letter moves too */
	spindle_disk_alarm_exempt++;
	PG_TRY();
	{
		for (i = 0; i < res->n; i++)
		{
			Candidate  *c = &res->c[i];

			if (!c->dead)
			{
				res->c[kept++] = *c;
				continue;
			}
			/* spindle.queues.dead_lettered_total (counted when moved) */
			pg_atomic_fetch_add_u64(&cs->qs->dead_lettered, 1);
			if (cs->q.dead_letter_queue[0] != '\0')
			{
				if (plan == NULL)
					plan = prepare_dead_letter_move(cs);
				move_one_dead_letter(cs, plan, c, td, values, nulls);
			}
		}
	}
	PG_FINALLY();
	{
		spindle_disk_alarm_exempt--;
	}
	PG_END_TRY();
	if (plan != NULL)
		SPI_finish();
	res->n = kept;
}

/*
 * Take up to want events (see consume), moving those read more than
 * max_reads times to the dead-letter queue; what moves makes room for
 * others, taken without waiting.
 */
static ConsumeResult
consume_live(Consumer *cs, int want, int64 wait_us)
{
	ConsumeResult res = consume(cs, want, wait_us);

	while (cs->q.max_reads > 0)
	{
		int			got = res.n;
		ConsumeResult more;
		int			i;

		move_dead_letters(cs, &res);
		if (res.n == got || res.n >= want)
			break;
		more = consume(cs, want - res.n, 0);
		if (more.n == 0)
			break;
		res.c = repalloc(res.c, sizeof(Candidate) * (res.n + more.n));
		for (i = 0; i < more.n; i++)
			res.c[res.n++] = more.c[i];
	}
	return res;
}

/*
 * Set up a consumer for fcinfo's call.  In REPEATABLE READ and
 * SERIALIZABLE, consumers take only events their transaction's snapshot
 * sees (an event committed later is left for others): the snapshot is
 * what the rest of the transaction sees, the producer's other writes
 * included.
 */
static void
consumer_init(Consumer *cs, FunctionCallInfo fcinfo, bool purge)
{
	save_handed_back();
	memset(cs, 0, sizeof(*cs));
	cs->fcinfo = fcinfo;
	cs->purge = purge;
	cs->look.vain_at = PG_INT64_MIN;
	cs->look.window = LOOK_WINDOW_MIN;
	cs->snapshot = IsolationUsesXactSnapshot() ? GetTransactionSnapshot() : NULL;
	consumer_open(cs);
}

/*
 * spindle.dequeue(queue_name text, max_events int DEFAULT 1,
 *                 wait interval DEFAULT '0') RETURNS SETOF spindle.message
 *
 * Takes and purges up to max_events events; they are gone for good when
 * the caller's transaction commits and come back if it rolls back.
 */
Datum
spindle_dequeue(PG_FUNCTION_ARGS)
{
	int			want;
	int64		wait_us;
	Consumer	cs;
	ConsumeResult res;

	want = get_max_events(fcinfo, 1);
	wait_us = get_interval_usecs(fcinfo, 2, "wait");
	PreventCommandIfReadOnly("spindle.dequeue()");
	consumer_init(&cs, fcinfo, true);
	note_portal();
	res = consume_live(&cs, want, wait_us);
	emit_messages(fcinfo, cs.rel, &res);
	spindle_queue_state_unpin(cs.qs);
	table_close(cs.rel, NoLock);
	return (Datum) 0;
}

/*
 * spindle.read(queue_name text, max_events int, visibility_timeout interval,
 *              wait interval DEFAULT '0') RETURNS SETOF spindle.message
 *
 * Leases up to max_events events: hidden from other consumers for
 * visibility_timeout, whatever becomes of the caller's transaction, then
 * delivered again (read_count + 1) until acknowledged.  All or nothing:
 * the leases are granted when the call returns its rows; an error or a
 * cancel before that leases nothing (the events are claims of this call
 * until then, which the abort hands back).
 */
Datum
spindle_read(PG_FUNCTION_ARGS)
{
	int			want;
	int64		vt_us;
	int64		wait_us;
	Consumer	cs;
	uint64		outer_call = current_lease_call;
	uint64		call;

	want = get_max_events(fcinfo, 1);
	vt_us = get_interval_usecs(fcinfo, 2, "visibility_timeout");
	wait_us = get_interval_usecs(fcinfo, 3, "wait");
	PreventCommandIfReadOnly("spindle.read()");
	consumer_init(&cs, fcinfo, false);
	call = ++lease_call_seq;
	current_lease_call = call;
	PG_TRY();
	{
		ConsumeResult res = consume_live(&cs, want, wait_us);

		emit_messages(fcinfo, cs.rel, &res);
	}
	PG_FINALLY();
	{
		current_lease_call = outer_call;
	}
	PG_END_TRY();
	grant_leases(cs.rel, cs.qs, cs.q.max_reads > 0, call,
				 plus_usecs(GetCurrentTimestamp(), vt_us));
	spindle_queue_state_unpin(cs.qs);
	table_close(cs.rel, NoLock);
	return (Datum) 0;
}

/* ---------- one event by msg_id: ack, set_visibility ---------- */

/* The item of qs (locked) that holds msg_id, or NULL. */
static QueueItem *
find_item(QueueState *qs, int64 msg_id)
{
	dlist_iter	iter;

	dlist_foreach(iter, &qs->items)
	{
		QueueItem  *item = dlist_container(QueueItem, node, iter.cur);

		if (msg_id >= item->start && msg_id < item->end)
			return item;
	}
	return NULL;
}

static QueueItem *
copy_item(QueueState *qs, QueueItem *from, int64 start, int64 end)
{
	/* a lease split in two leases no more events: no lease room needed */
	QueueItem  *to = spindle_qitem_alloc_split(qs, (QueueItemKind) from->kind,
											   start, end);

	if (to != NULL)
	{
		to->xid = from->xid;
		to->owner = from->owner;
		to->read_count = from->read_count;
	}
	return to;
}

/*
 * Make msg_id an item of its own, split off item (of qs, locked); returns
 * it, or NULL (nothing changed) if the pool has no item for the split.
 */
static QueueItem *
carve(QueueState *qs, QueueItem *item, int64 msg_id)
{
	QueueItem  *before = NULL;
	QueueItem  *after = NULL;

	if (msg_id > item->start &&
		(before = copy_item(qs, item, item->start, msg_id)) == NULL)
		return NULL;
	if (msg_id + 1 < item->end &&
		(after = copy_item(qs, item, msg_id + 1, item->end)) == NULL)
	{
		if (before != NULL)
			spindle_qitem_free(qs, before);
		return NULL;
	}
	item->start = msg_id;
	item->end = msg_id + 1;
	return item;
}

static void
no_room_for_item(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("no room in shared memory for more leases or claims of queue events"),
			 errdetail("spindle.max_leases (%d) bounds the runs of events that read() calls still running are leasing, all queues together; each queue also has %d items for its claims, its pending runs and runs to examine again.",
					   spindle_max_leases, SPINDLE_ITEMS_PER_QUEUE),
			 errhint("End long transactions that dequeued or acknowledged many separate events, or raise spindle.max_leases and restart the server.")));
}

/*
 * Item (a claim of qs, whose lock the caller holds) was just made good by
 * an ack or a dequeue.  Join it to the claim this backend's previous ack
 * or dequeue made, if the two are adjacent (either way round), in the same
 * subtransaction and with the same read count (what an abort hands back
 * with them): acks of a batch read, in
 * ascending or descending order, and the dequeues of one transaction
 * taking an event at a time, then hold one item, not one per call, and
 * four consumers acknowledging a hundred events each no longer run out of
 * the queue's items.  Claims of a read() (to_lease) never join.  Returns
 * the item now holding item's events.
 */
static QueueItem *
join_last_claim(QueueState *qs, QueueItem *item)
{
	SubTransactionId subid = GetCurrentSubTransactionId();

	Assert(item->kind == QITEM_CLAIM);
	if (last_claim.slot == qs->slot && last_claim.lxid == MyProc->lxid &&
		last_claim.subid == subid && !item->to_lease)
	{
		QueueItem  *prev = spindle_qitem_at(last_claim.index);

		if (prev != item && prev->generation == last_claim.generation &&
			prev->kind == QITEM_CLAIM &&
			(prev->end == item->start || item->end == prev->start) &&
			!prev->to_lease &&
			prev->owner == item->owner && prev->xid == item->xid &&
			prev->read_count == item->read_count &&
			prev->mixed == item->mixed && prev->parked == item->parked)
		{
			/* item's ClaimRef goes stale with its generation */
			prev->start = Min(prev->start, item->start);
			prev->end = Max(prev->end, item->end);
			spindle_qitem_free(qs, item);
			item = prev;
		}
	}
	last_claim.slot = qs->slot;
	last_claim.index = item->index;
	last_claim.generation = item->generation;
	last_claim.subid = subid;
	last_claim.lxid = MyProc->lxid;
	return item;
}

/*
 * Item (of qs, generation as the caller made it) is the one-event claim an
 * ack just made good: join it to the previous one (join_last_claim).
 * Takes the queue's lock.
 */
static void
join_last_ack(QueueState *qs, QueueItem *item, uint32 generation)
{
	LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
	if (item->generation == generation && item->kind == QITEM_CLAIM)
		(void) join_last_claim(qs, item);
	LWLockRelease(spindle_queue_lock(qs));
}

/*
 * msg_id is behind the head of qs and in no item: if a parked delayed run
 * holds it, take it out of that run and return an item of qs (RETURNED)
 * for it, with the state lock held (an ack that does not happen examines
 * it again); an item made meanwhile is returned instead.  NULL, lock not
 * held, otherwise, *leased set if a parked lease holds it: the ack purges
 * it with no claim, the lease staying parked (see AckedLease).
 */
static QueueItem *
item_of_parked(Relation facade, QueueState *qs, int64 msg_id, bool *leased)
{
	ParkedRun	parked;
	QueueItem  *item;
	bool		taken;

	*leased = false;
	if (!spindle_park_find(facade, msg_id, &parked))
		parked.kind = 0;
	/*
	 * A delayed event compaction moved stays parked until its ack commits,
	 * as a lease does: its copy in an annex is reached only through tree 0
	 * once its spindle is gone, so an ack that rolls back must leave it
	 * there (queue_parked.c, take_batch).
	 */
	if (parked.kind == SPINDLE_RUN_DELAYED &&
		spindle_park_moved(facade, msg_id, msg_id + 1))
		parked.kind = SPINDLE_RUN_READY;
	/* an ended lease not leased again (READY) is still acknowledged */
	*leased = parked.kind == SPINDLE_RUN_LEASED ||
		parked.kind == SPINDLE_RUN_READY;
	/* delayed, or pending on a transaction that may have ended */
	taken = (parked.kind == SPINDLE_RUN_DELAYED ||
			 parked.kind == SPINDLE_RUN_PENDING) &&
		spindle_park_take_one(facade, qs, msg_id, &parked);
	LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
	item = find_item(qs, msg_id);
	if (item != NULL)
	{
		*leased = false;
		return item;			/* an item wins over a parked run */
	}
	if (!taken)
	{
		LWLockRelease(spindle_queue_lock(qs));
		return NULL;
	}
	item = spindle_qitem_alloc(qs, QITEM_RETURNED, msg_id, msg_id + 1);
	if (item == NULL)
	{
		LWLockRelease(spindle_queue_lock(qs));
		spindle_park_runs(facade, qs, &parked, 1);	/* put it back */
		no_room_for_item();
	}
	item->read_count = parked.read_count;
	return item;
}

/* One id of an ack: what its claim found (ack_claim), what became of it */
typedef struct AckClaim
{
	int64		msg_id;
	QueueItem  *item;			/* its claim, if it needed one */
	uint32		generation;		/* the item's, when claimed */
	bool		leased;			/* a parked lease holds it (no claim) */
	bool		from_parked;	/* the claimed item came from a parked run */
	bool		examine;		/* the event itself decides */
	bool		purged;
} AckClaim;

/*
 * First step of an ack of a->msg_id (dir knows its spindle): claim it in
 * qs unless it is behind the head and neither in an item nor parked
 * (purged for good), or claimed by a transaction; set a->examine if the
 * event itself is to decide.  A parked lease and an event at or past the
 * head take no claim.  Takes the state's lock.
 */
static void
ack_claim(Relation facade, QueueState *qs, SpindleDirectory *dir,
		  AckClaim *a)
{
	QueueItem  *item;
	int64		msg_id = a->msg_id;
	int64		start;

	a->item = NULL;
	a->leased = a->from_parked = a->examine = a->purged = false;
	if (msg_id < 0)
		return;
	spill_if_crowded(facade, qs);
	start = first_position(facade, qs, dir);
	LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
	if (!qs->valid)
	{
		qs->head = start;
		qs->valid = true;
	}
	item = find_item(qs, msg_id);
	if (item == NULL && msg_id < qs->head)
	{
		/* behind the head and in no item: parked, or purged for good */
		LWLockRelease(spindle_queue_lock(qs));
		item = item_of_parked(facade, qs, msg_id, &a->leased);
		if (item == NULL && !a->leased)
			return;
		if (item == NULL)
			LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
	}
	if (item != NULL)
	{
		if (item->kind == QITEM_CLAIM)
		{
			LWLockRelease(spindle_queue_lock(qs));
			return;				/* being consumed by a transaction */
		}
		a->from_parked = item->parked;
		if ((item = carve(qs, item, msg_id)) == NULL)
		{
			LWLockRelease(spindle_queue_lock(qs));
			/* our own purged claims go to disk, and we look again */
			if (spill_claims(facade, qs) > 0)
			{
				ack_claim(facade, qs, dir, a);
				return;
			}
			no_room_for_item();
		}
		item->kind = QITEM_CLAIM;
		item->parked = a->from_parked;
		item->owner = MyProc->pgprocno;
		item->xid = GetCurrentTransactionId();
		a->generation = item->generation;
		a->item = item;
		remember_claim(qs, item);
	}
	LWLockRelease(spindle_queue_lock(qs));
	a->examine = true;
}

/* Times an ack waits for a move of the event it acknowledges */
#define ACK_MOVE_WAITS		3

/*
 * Examine the events of the claims a[0..n) that are to be examined, in
 * one pass over their pages (examine() sorts nothing: they are sorted by
 * location here), purging the deliverable ones; sets a[i].purged.  An
 * event a running move hides (compaction) is waited for -- a move is a
 * short transaction, and the ack is for the event wherever it goes -- and
 * examined again where the move left it, up to ACK_MOVE_WAITS times; then
 * it is not purged (false, as for an event another transaction purges).
 * May replace *dirp (see locate_examine).
 */
static void
ack_examine(Relation facade, SpindleDirectory **dirp, AckClaim *a, int n)
{
	Candidate  *c = palloc0(sizeof(Candidate) * Max(n, 1));
	bool	   *wait = palloc0(sizeof(bool) * Max(n, 1));
	int			cache_slot = spindle_cache_find(RelationGetRelid(facade));

	for (int round = 0; round <= ACK_MOVE_WAITS; round++)
	{
		int			m = 0;

		for (int i = 0; i < n; i++)
			if (a[i].examine && (round == 0 || wait[i]))
			{
				memset(&c[m], 0, sizeof(Candidate));
				c[m].msg_id = a[i].msg_id;
				c[m].source = i;
				m++;
			}
		if (m == 0)
			break;
		cache_fill(facade, *dirp, cache_slot, c, m);
		locate_examine(facade, dirp, c, m, DT_NOEND - 1, NULL, true, false);
		for (int i = 0; i < m; i++)
		{
			a[c[i].source].purged = c[i].located && c[i].outcome == EV_DELIVER;
			wait[c[i].source] = c[i].outcome == EV_PENDING && c[i].mover;
		}
		cache_done(facade, cache_slot, c, m, true);
		if (round == ACK_MOVE_WAITS)
			break;
		/* no lock of a page or of the log is held here */
		for (int i = 0; i < m; i++)
			if (c[i].outcome == EV_PENDING && c[i].mover)
				XactLockTableWait(c[i].xid, NULL, NULL, XLTW_None);
	}
	pfree(wait);
	pfree(c);
}

/*
 * Last step of an ack: record what became of a's claim (purged, or left
 * to be examined again) and of a parked lease it purged.  Takes the
 * state's lock.
 */
static void
ack_done(Relation facade, QueueState *qs, AckClaim *a)
{
	QueueItem  *item = a->item;

	if (item != NULL && a->purged)
	{
		mark_purge(qs, item, a->generation);
		join_last_ack(qs, item, a->generation);
		if (a->from_parked)
			note_acked_lease(RelationGetRelid(facade), a->msg_id, false);
	}
	if (item == NULL && a->purged)
	{
		register_callbacks();
		acked_unclaimed = true;
		if (a->leased)
			note_acked_lease(RelationGetRelid(facade), a->msg_id, true);
	}
	if (item != NULL && !a->purged)
	{
		/* not ours to purge: leave it as it was, examined again */
		LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
		if (item->generation == a->generation && item->kind == QITEM_CLAIM)
		{
			item->kind = QITEM_RETURNED;
			item->owner = -1;
			item->xid = InvalidTransactionId;
		}
		LWLockRelease(spindle_queue_lock(qs));
	}
}

static int
cmp_ack_msgid(const void *a, const void *b)
{
	int64		x = (*(AckClaim *const *) a)->msg_id;
	int64		y = (*(AckClaim *const *) b)->msg_id;

	return x < y ? -1 : x > y ? 1 : 0;
}

/*
 * Purge the events a[0..n) of the queue in the caller's transaction where
 * each is an event no one has purged or claimed; sets a[i].purged.  An id
 * given twice is purged once (its later copies say false).  The claims
 * are made first, then the events whose claim needed no item (parked
 * leases, events at the head) are examined together, one pass over their
 * pages: one look at the consume log per page and one entry (or purge
 * record) per page for a batch of leases, not per id.  An id whose claim
 * took an item is examined at once, so that a large ack never holds more
 * of the queue's items than one at a time (review q1).
 */
static void
ack_ids(Relation facade, QueueState *qs, AckClaim *a, int n)
{
	AckClaim  **sorted = palloc(sizeof(AckClaim *) * Max(n, 1));
	SpindleDirectory *dir;
	int64		newest = -1;
	int			i;

	for (i = 0; i < n; i++)
	{
		sorted[i] = &a[i];
		newest = Max(newest, a[i].msg_id);
	}
	qsort(sorted, n, sizeof(AckClaim *), cmp_ack_msgid);
	/* read before the state lock: it may read the catalog */
	dir = spindle_directory_acquire_upto_event(facade, Max(newest, 0));
	for (i = 0; i < n; i++)
	{
		AckClaim   *x = sorted[i];

		if (i > 0 && sorted[i - 1]->msg_id == x->msg_id)
		{
			x->examine = x->purged = false;
			x->item = NULL;
			continue;			/* a copy: the first one decides */
		}
		ack_claim(facade, qs, dir, x);
		if (x->examine && x->item != NULL)
		{
			ack_examine(facade, &dir, x, 1);
			x->examine = false;
			ack_done(facade, qs, x);
		}
		else
			x->item = NULL;
	}
	ack_examine(facade, &dir, a, n);
	spindle_directory_release(dir);
	for (i = 0; i < n; i++)
		if (a[i].examine)
			ack_done(facade, qs, &a[i]);
	pfree(sorted);
}

static int64
get_msg_id(FunctionCallInfo fcinfo, int argno)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("msg_id must not be NULL")));
	return PG_GETARG_INT64(argno);
}

/*
 * spindle.ack(queue_name text, msg_id bigint) RETURNS boolean
 *
 * Purges the event in the caller's transaction; false if it is already
 * purged (acknowledged, dequeued) or being purged by another transaction.
 */
Datum
spindle_ack(PG_FUNCTION_ARGS)
{
	SpindleQueue q;
	int64		msg_id = get_msg_id(fcinfo, 1);
	Relation	rel;
	QueueState *qs;
	AckClaim	a;

	PreventCommandIfReadOnly("spindle.ack()");
	rel = open_queue(fcinfo, RowExclusiveLock, &q);
	qs = spindle_queue_state_pin(RelationGetRelid(rel));
	a.msg_id = msg_id;
	ack_ids(rel, qs, &a, 1);
	spindle_queue_state_unpin(qs);
	table_close(rel, NoLock);
	PG_RETURN_BOOL(a.purged);
}

/*
 * spindle.ack(queue_name text, msg_ids bigint[]) RETURNS SETOF bigint
 *
 * Acknowledges each id; returns those it purged.
 */
Datum
spindle_ack_many(PG_FUNCTION_ARGS)
{
	SpindleQueue q;
	ArrayType  *arr;
	Datum	   *ids;
	bool	   *nulls;
	int			n;
	int			i;
	Relation	rel;
	QueueState *qs;
	AckClaim   *acks;
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("msg_ids must not be NULL")));
	arr = PG_GETARG_ARRAYTYPE_P(1);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("msg_ids must be a one-dimensional array")));
	deconstruct_array(arr, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
					  &ids, &nulls, &n);
	for (i = 0; i < n; i++)
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("msg_ids must not contain NULL (element %d)", i + 1)));
	PreventCommandIfReadOnly("spindle.ack()");
	rel = open_queue(fcinfo, RowExclusiveLock, &q);
	qs = spindle_queue_state_pin(RelationGetRelid(rel));
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	acks = palloc(sizeof(AckClaim) * Max(n, 1));
	for (i = 0; i < n; i++)
		acks[i].msg_id = DatumGetInt64(ids[i]);
	ack_ids(rel, qs, acks, n);
	for (i = 0; i < n; i++)
	{
		Datum		out = ids[i];
		bool		outnull = false;

		if (acks[i].purged)
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
								 &out, &outnull);
	}
	pfree(acks);
	spindle_queue_state_unpin(qs);
	table_close(rel, NoLock);
	return (Datum) 0;
}

/*
 * spindle.set_visibility(queue_name text, msg_id bigint,
 *                        visibility_timeout interval) RETURNS boolean
 *
 * Moves a lease's end to now + visibility_timeout ('0' hands the event
 * back at once); false if msg_id is not leased.  Takes effect at once,
 * whatever becomes of the caller's transaction.
 */
Datum
spindle_set_visibility(PG_FUNCTION_ARGS)
{
	SpindleQueue q;
	int64		msg_id = get_msg_id(fcinfo, 1);
	int64		vt_us = get_interval_usecs(fcinfo, 2, "visibility_timeout");
	Relation	rel;
	QueueState *qs;
	QueueItem  *item;
	bool		found = false;

	PreventCommandIfReadOnly("spindle.set_visibility()");
	rel = open_queue(fcinfo, AccessShareLock, &q);
	qs = spindle_queue_state_pin(RelationGetRelid(rel));
	/* leases are parked on disk; an item (an ack's claim) means none */
	LWLockAcquire(spindle_queue_lock(qs), LW_SHARED);
	item = find_item(qs, msg_id);
	LWLockRelease(spindle_queue_lock(qs));
	if (item == NULL)
		found = spindle_park_relet(rel, qs, msg_id,
								   plus_usecs(GetCurrentTimestamp(), vt_us));
	/* waiters may sleep until the lease's old end: let them look again */
	if (found)
	{
		ConditionVariableBroadcast(&qs->cv);
		/* it may end before the limit's bound expects (queue_limits.c) */
		spindle_queue_limit_leases_back(RelationGetRelid(rel));
	}
	spindle_queue_state_unpin(qs);
	table_close(rel, NoLock);
	PG_RETURN_BOOL(found);
}

/* ---------- what TTL must leave alone ---------- */

static int
cmp_range_start(const void *a, const void *b)
{
	int64		x = ((const int64 *) a)[0];
	int64		y = ((const int64 *) b)[0];

	return x < y ? -1 : x > y ? 1 : 0;
}

/*
 * The table layer's ttl_held hook: the msg_ids in [lo, hi) of queue table
 * facade that are leased and whose lease has not ended (or are being
 * leased by a read() in progress), as *n sorted, disjoint [start, end)
 * pairs; NULL if none.  A leased event is purged by TTL when its lease
 * ends, not while a consumer works on it.  Leases are read from the
 * parked runs on disk (queue_parked.c), claims to be leased from the
 * state if loaded (taking its lock shared); no buffer lock is held.
 */
int64 *
spindle_queue_ttl_held(Relation facade, int64 lo, int64 hi, int *n)
{
	QueueState *qs;
	TimestampTz now = GetCurrentTimestamp();
	int64	   *ranges;
	int			nalloc;
	dlist_iter	iter;
	int			i;
	int			m;

	*n = 0;
	if (!spindle_relation_is_queue(facade))
		return NULL;
	ranges = spindle_park_leased(RelationGetRelid(facade), lo, hi, now, n);
	nalloc = *n;
	/* and what read() calls in progress are leasing */
	if ((qs = spindle_queue_state(RelationGetRelid(facade))) != NULL)
	{
		LWLockAcquire(spindle_queue_lock(qs), LW_SHARED);
		if (qs->relid == RelationGetRelid(facade) &&
			qs->dbid == MyDatabaseId && qs->nleases > 0)
			dlist_foreach(iter, &qs->items)
			{
				QueueItem  *item = dlist_container(QueueItem, node, iter.cur);

				if (!(item->kind == QITEM_CLAIM && item->to_lease) ||
					item->end <= lo || item->start >= hi)
					continue;
				if (*n == nalloc)
				{
					nalloc = Max(8, nalloc * 2);
					ranges = ranges == NULL ?
						palloc(sizeof(int64) * 2 * nalloc) :
						repalloc(ranges, sizeof(int64) * 2 * nalloc);
				}
				ranges[2 * *n] = item->start;
				ranges[2 * *n + 1] = item->end;
				(*n)++;
			}
		LWLockRelease(spindle_queue_lock(qs));
	}
	if (*n <= 1)
		return ranges;
	/* sorted, then overlaps joined: disjoint pairs */
	qsort(ranges, *n, sizeof(int64) * 2, cmp_range_start);
	for (i = 1, m = 0; i < *n; i++)
	{
		if (ranges[2 * i] <= ranges[2 * m + 1])
			ranges[2 * m + 1] = Max(ranges[2 * m + 1], ranges[2 * i + 1]);
		else
		{
			m++;
			ranges[2 * m] = ranges[2 * i];
			ranges[2 * m + 1] = ranges[2 * i + 1];
		}
	}
	*n = m + 1;
	return ranges;
}
