/*-------------------------------------------------------------------------
 *
 * queue_state.c
 *	  Shared memory of the queue API: one QueueState per queue in use and a
 *	  pool of items (claims, leases, pending and returned events) that the
 *	  states share.
 *
 * A queue's state says where its head is -- the first position (msg_id)
 * no consumer has examined yet -- and lists, as items, the events behind
 * the head that are not purged for good: claimed by a running dequeue,
 * leased by read(), waiting for another transaction, or returned
 * (to be examined again).  Delayed events behind the head are parked on
 * disk (queue_parked.c).  Everything else behind the head is purged by a
 * committed transaction or was never an event (an aborted insert, a slot
 * never used).  All of it can be rebuilt from disk: a state that is reset
 * (after a restart, a TRUNCATE, a DROP, or when its table goes away) starts
 * again at the table's oldest spindle, or at the consume log's floor when
 * that is higher (everything below it is consumed for everyone: queue.c,
 * first_position), and examines every event from there, which yields the
 * same items; what is parked on disk (delayed events, leases and read
 * counts: queue_parked.c) is taken back from there.
 *
 * The pool has spindle.max_leases items for leases plus
 * SPINDLE_ITEMS_PER_QUEUE for each of spindle.max_queues states; a state's
 * nleases counts its LEASED items and its claims to_lease (a read() that
 * has not returned yet: see queue.c), which become leases.
 *
 * Which queues have a state.  spindle.max_queues states are held at once,
 * whatever the number of queues: a consumer call pins the state of its
 * queue (spindle_queue_state_pin), taking a free slot or, when none is
 * free, evicting the state of another queue that nobody needs: no pin, no
 * sleeping consumer, no lease, no read count and no claim of a read or an
 * ack (what those say lives only here; everything else a state holds is
 * rebuilt from disk, as after a restart: see evictable()).  Eviction is a
 * clock sweep with a second chance (a pin sets the state's usage bit, the
 * sweep clears it), so a queue in use keeps its state and one idle since
 * the hand last passed gives it up; it writes nothing.  Only when every
 * state is needed so does a call fail (53400).  An evicted state with at
 * most SAVED_RANGES items leaves its head and their ranges behind (a
 * small ring of saved heads, SAVED_HEADS_PER_STATE per state): below the
 * head, only those ranges are not consumed or gone for good, so its next
 * consumer starts at the head with the ranges to examine again (RETURNED)
 * instead of examining the queue's whole history again.  A backend's pins are released when
 * its call ends, and by its (sub)transaction's abort and its exit, so an
 * error never leaves one behind.
 *
 * Locks: QueuesLock (exclusive) to take, evict or free a state slot,
 * shared to look one up and pin it; each state has its own LWLock (tranche
 * "spindle_queue"), exclusive for every read or change of its head and
 * items.  The evictor holds QueuesLock exclusively and takes a state's
 * lock only conditionally.  The pool's free list has a spinlock, taken
 * with a state lock held.  No LWLock is ever held while a buffer lock is
 * acquired; a state lock may be taken while a buffer lock is held
 * (queue.c).
 *
 * Invariants: a pinned state keeps its queue (no eviction; a reset by
 * TRUNCATE or DROP needs the table's AccessExclusiveLock, which no
 * consumer holding the table lets happen, and a long poll that gave the
 * table lock up re-checks after waking); a state with a lease, a read
 * count, or a claim of a read or an ack is never evicted.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lock.h"
#include "storage/shmem.h"
#include "storage/spin.h"

#include "queue/spindle_queue.h"

/* ... of which pending and returned runs leave this many to claims */
#define SPINDLE_ITEMS_FOR_CLAIMS 32

int			spindle_max_queues = 256;
int			spindle_max_leases = 10000;

/*
 * What an evicted state left: its head, and the ranges of its items, all
 * else below the head being settled (consumed, or gone for good).
 */
#define SAVED_RANGES 4

typedef struct SavedHead
{
	Oid			dbid;			/* invalid: unused */
	Oid			relid;
	int64		head;
	int			nranges;
	int64		ranges[SAVED_RANGES][2];	/* [start, end) to examine again */
} SavedHead;

#define SAVED_HEADS_PER_STATE 4

typedef struct QueueShared
{
	LWLock	   *lock;			/* QueuesLock */
	LWLockPadded *state_locks;	/* one per state */
	int			clock_hand;		/* next state the eviction sweep looks at */
	int			saved_hand;		/* next saved head to overwrite */
	SavedHead  *saved;			/* SAVED_HEADS_PER_STATE x max_queues */
	pg_atomic_uint64 evictions; /* states evicted since start */
	slock_t		pool_mutex;
	dlist_head	free_items;
	int			nfree;
	int			nitems;			/* the pool's size */
	QueueState	states[FLEXIBLE_ARRAY_MEMBER];
} QueueShared;

static QueueShared *qshared = NULL;
static QueueItem *qitems = NULL;

static void free_all_items(QueueState *qs);
static void free_state(QueueState *qs);

static int
nsaved(void)
{
	return spindle_max_queues * SAVED_HEADS_PER_STATE;
}

static int
pool_size(void)
{
	return spindle_max_leases + spindle_max_queues * SPINDLE_ITEMS_PER_QUEUE;
}

Size
spindle_queue_shmem_size(void)
{
	Size		size;

	size = add_size(offsetof(QueueShared, states),
					mul_size(spindle_max_queues, sizeof(QueueState)));
	size = add_size(size, mul_size(pool_size(), sizeof(QueueItem)));
	size = add_size(size, mul_size(nsaved(), sizeof(SavedHead)));
	/* the items start MAXALIGNed (spindle_queue_shmem_startup) */
	size = add_size(size, MAXIMUM_ALIGNOF);
	return size;
}

/* Called from the shmem_request_hook. */
void
spindle_queue_shmem_request(void)
{
	RequestAddinShmemSpace(spindle_queue_shmem_size());
	RequestNamedLWLockTranche("spindle_queues", 1);
	RequestNamedLWLockTranche("spindle_queue", spindle_max_queues);
}

/* Called from the shmem_startup_hook, with AddinShmemInitLock held. */
void
spindle_queue_shmem_startup(void)
{
	bool		found;
	int			i;

	qshared = ShmemInitStruct("spindle queues", spindle_queue_shmem_size(),
							  &found);
	qitems = (QueueItem *) ((char *) qshared +
							MAXALIGN(offsetof(QueueShared, states) +
									 spindle_max_queues * sizeof(QueueState)));
	if (found)
		return;
	qshared->lock = &(GetNamedLWLockTranche("spindle_queues"))[0].lock;
	qshared->state_locks = GetNamedLWLockTranche("spindle_queue");
	qshared->clock_hand = 0;
	qshared->saved_hand = 0;
	qshared->saved = (SavedHead *) (qitems + pool_size());
	memset(qshared->saved, 0, sizeof(SavedHead) * nsaved());
	pg_atomic_init_u64(&qshared->evictions, 0);
	SpinLockInit(&qshared->pool_mutex);
	dlist_init(&qshared->free_items);
	qshared->nitems = pool_size();
	qshared->nfree = qshared->nitems;
	for (i = 0; i < qshared->nitems; i++)
	{
		memset(&qitems[i], 0, sizeof(QueueItem));
		qitems[i].index = i;
		dlist_push_tail(&qshared->free_items, &qitems[i].node);
	}
	for (i = 0; i < spindle_max_queues; i++)
	{
		QueueState *qs = &qshared->states[i];

		memset(qs, 0, sizeof(QueueState));
		qs->slot = i;
		dlist_init(&qs->items);
		ConditionVariableInit(&qs->cv);
		pg_atomic_init_u64(&qs->enqueued, 0);
		pg_atomic_init_u64(&qs->dequeued, 0);
		pg_atomic_init_u64(&qs->dead_lettered, 0);
		pg_atomic_init_u32(&qs->waiting, 0);
		pg_atomic_init_u32(&qs->pins, 0);
	}
}

static void
check_shmem(void)
{
	if (qshared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("spindle must be loaded via shared_preload_libraries"),
				 errhint("Add spindle to shared_preload_libraries in postgresql.conf and restart the server.")));
}

static QueueState *
find_state(Oid relid)
{
	int			i;

	for (i = 0; i < spindle_max_queues; i++)
	{
		QueueState *qs = &qshared->states[i];

		if (qs->relid == relid && qs->dbid == MyDatabaseId)
			return qs;
	}
	return NULL;
}

/*
 * The state of the queue table relid in this database, or NULL.  Nothing
 * keeps it: a caller that did not pin it takes spindle_queue_lock(qs) and
 * checks that the state still belongs to relid.
 */
QueueState *
spindle_queue_state(Oid relid)
{
	QueueState *qs;

	check_shmem();
	LWLockAcquire(qshared->lock, LW_SHARED);
	qs = find_state(relid);
	LWLockRelease(qshared->lock);
	return qs;
}

/*
 * The saved heads: what evicted states without items left (see the
 * header comment).  The caller holds QueuesLock exclusively.
 */
static SavedHead *
find_saved(Oid dbid, Oid relid)
{
	int			i;

	for (i = 0; i < nsaved(); i++)
		if (qshared->saved[i].relid == relid && qshared->saved[i].dbid == dbid)
			return &qshared->saved[i];
	return NULL;
}

/*
 * Remember the head of qs (locked, about to be evicted) and the ranges of
 * its items, if it has few enough.
 */
static void
save_head(QueueState *qs)
{
	SavedHead  *e;
	dlist_iter	iter;
	int			n = 0;

	if (!qs->valid || qs->nitems > SAVED_RANGES)
		return;
	if ((e = find_saved(qs->dbid, qs->relid)) == NULL)
	{
		e = &qshared->saved[qshared->saved_hand];
		qshared->saved_hand = (qshared->saved_hand + 1) % nsaved();
	}
	e->dbid = qs->dbid;
	e->relid = qs->relid;
	e->head = qs->head;
	dlist_foreach(iter, &qs->items)
	{
		QueueItem  *item = dlist_container(QueueItem, node, iter.cur);

		e->ranges[n][0] = item->start;
		e->ranges[n][1] = item->end;
		n++;
	}
	e->nranges = n;
}

/* A new state qs (locked) takes up where its queue's last one left off. */
static void
take_saved_head(QueueState *qs)
{
	SavedHead  *e = find_saved(qs->dbid, qs->relid);
	int			i;

	if (e == NULL)
		return;
	e->dbid = InvalidOid;
	e->relid = InvalidOid;
	for (i = 0; i < e->nranges; i++)
		if (spindle_qitem_alloc(qs, QITEM_RETURNED, e->ranges[i][0],
								e->ranges[i][1]) == NULL)
		{
			/* no room: examine the whole queue again */
			free_all_items(qs);
			return;
		}
	qs->head = e->head;
	qs->valid = true;
}

/* Forget the saved heads of relid (or of every table) of database dbid. */
static void
forget_saved(Oid dbid, Oid relid)
{
	int			i;

	for (i = 0; i < nsaved(); i++)
		if (qshared->saved[i].dbid == dbid &&
			(!OidIsValid(relid) || qshared->saved[i].relid == relid))
		{
			qshared->saved[i].dbid = InvalidOid;
			qshared->saved[i].relid = InvalidOid;
		}
}

/* Make qs (whose slot QueuesLock keeps) the state of relid, empty. */
static void
take_slot(QueueState *qs, Oid relid)
{
	LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
	qs->dbid = MyDatabaseId;
	qs->relid = relid;
	qs->valid = false;
	qs->head = 0;
	qs->nitems = 0;
	qs->nleases = 0;
	qs->used = true;
	qs->park_known = false;
	dlist_init(&qs->items);
	pg_atomic_write_u64(&qs->enqueued, 0);
	pg_atomic_write_u64(&qs->dequeued, 0);
	pg_atomic_write_u64(&qs->dead_lettered, 0);
	take_saved_head(qs);
	/* waiting is left alone: sleepers take themselves off */
	LWLockRelease(spindle_queue_lock(qs));
}

/*
 * Whether the state of qs could be rebuilt from disk as it is: nobody
 * pins it or sleeps on it, and it holds nothing that lives only here: no
 * read count, no claim of a read() that leases (leases themselves are
 * parked on disk).  The claims of a dequeue can go: their events
 * carry the claimer's xmax, which a rebuilt state finds (pending on it,
 * then gone or deliverable), and the claimer's end finds its items
 * replaced (their generation).  The caller holds QueuesLock exclusively
 * (no new pin) and qs's lock.
 */
static bool
evictable(QueueState *qs)
{
	dlist_iter	iter;

	if (pg_atomic_read_u32(&qs->pins) > 0 ||
		pg_atomic_read_u32(&qs->waiting) > 0 || qs->nleases > 0)
		return false;
	/* without claims to lease, at most SPINDLE_ITEMS_PER_QUEUE items */
	dlist_foreach(iter, &qs->items)
	{
		QueueItem  *item = dlist_container(QueueItem, node, iter.cur);

		if (item->read_count > 0)
			return false;
		if (item->kind == QITEM_CLAIM && item->to_lease)
			return false;
	}
	return true;
}

/*
 * A free state slot, evicting the state of another queue if none is free
 * (clock sweep, second chance); NULL if every state is needed.  The caller
 * holds QueuesLock exclusively.  Looks at each slot at most twice.
 */
static QueueState *
free_or_evict(void)
{
	int			i;

	for (i = 0; i < spindle_max_queues; i++)
		if (!OidIsValid(qshared->states[i].relid))
			return &qshared->states[i];
	for (i = 0; i < 2 * spindle_max_queues; i++)
	{
		QueueState *qs = &qshared->states[qshared->clock_hand];
		bool		gone = false;

		qshared->clock_hand = (qshared->clock_hand + 1) % spindle_max_queues;
		if (pg_atomic_read_u32(&qs->pins) > 0)
			continue;
		if (qs->used)
		{
			qs->used = false;	/* a second chance */
			continue;
		}
		if (!LWLockConditionalAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE))
			continue;
		if (evictable(qs))
		{
			save_head(qs);
			free_state(qs);
			gone = true;
		}
		LWLockRelease(spindle_queue_lock(qs));
		if (gone)
		{
			pg_atomic_fetch_add_u64(&qshared->evictions, 1);
			return qs;
		}
	}
	return NULL;
}

/* ----------------------------------------------------------------
 * Pins of this backend
 * ----------------------------------------------------------------
 */

typedef struct StatePin
{
	int			slot;
	int			nestlevel;		/* GetCurrentTransactionNestLevel() */
} StatePin;

#define MAX_PINS 16				/* nested consumer calls (triggers) */
static StatePin my_pins[MAX_PINS];
static int	my_npins = 0;
static bool pin_callbacks = false;

static void
release_pin(int i)
{
	pg_atomic_fetch_sub_u32(&qshared->states[my_pins[i].slot].pins, 1);
	my_pins[i] = my_pins[--my_npins];
}

/* Release the pins taken at nesting level nestlevel or deeper. */
static void
release_pins_from(int nestlevel)
{
	int			i = my_npins;

	while (i-- > 0)
		if (my_pins[i].nestlevel >= nestlevel)
			release_pin(i);
}

static void
pins_xact_callback(XactEvent event, void *arg)
{
	/* a call ends with its pin released; an error leaves it to us */
	if (my_npins > 0)
		release_pins_from(0);
}

static void
pins_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					  SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB && my_npins > 0)
		release_pins_from(GetCurrentTransactionNestLevel());
}

static void
pins_exit_callback(int code, Datum arg)
{
	if (qshared != NULL && my_npins > 0)
		release_pins_from(0);
}

/*
 * Pin the state of queue table relid in this database, taking a free slot
 * or evicting an unneeded state if it has none (53400 if every state is
 * needed).  A pinned state keeps its queue until
 * spindle_queue_state_unpin, or until this (sub)transaction aborts.
 */
QueueState *
spindle_queue_state_pin(Oid relid)
{
	QueueState *qs;

	check_shmem();
	if (!pin_callbacks)
	{
		RegisterXactCallback(pins_xact_callback, NULL);
		RegisterSubXactCallback(pins_subxact_callback, NULL);
		before_shmem_exit(pins_exit_callback, (Datum) 0);
		pin_callbacks = true;
	}
	if (my_npins >= MAX_PINS)
		ereport(ERROR,
				(errcode(ERRCODE_STATEMENT_TOO_COMPLEX),
				 errmsg("too many nested consumer calls")));
	LWLockAcquire(qshared->lock, LW_SHARED);
	qs = find_state(relid);
	if (qs != NULL)
		pg_atomic_fetch_add_u32(&qs->pins, 1);
	LWLockRelease(qshared->lock);
	if (qs == NULL)
	{
		LWLockAcquire(qshared->lock, LW_EXCLUSIVE);
		qs = find_state(relid);
		if (qs == NULL && (qs = free_or_evict()) != NULL)
			take_slot(qs, relid);
		if (qs != NULL)
			pg_atomic_fetch_add_u32(&qs->pins, 1);
		LWLockRelease(qshared->lock);
	}
	if (qs == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("too many queues in use"),
				 errdetail("Shared memory holds the state of %d queues, and each of them has a call running, waiting consumers, or events returned with their read counts.",
						   spindle_max_queues),
				 errhint("Let consumers of other queues finish, or raise spindle.max_queues and restart the server.")));
	qs->used = true;
	my_pins[my_npins].slot = qs->slot;
	my_pins[my_npins].nestlevel = GetCurrentTransactionNestLevel();
	my_npins++;
	return qs;
}

/* Release a pin spindle_queue_state_pin took. */
void
spindle_queue_state_unpin(QueueState *qs)
{
	int			i = my_npins;

	while (i-- > 0)
		if (my_pins[i].slot == qs->slot)
		{
			release_pin(i);
			return;
		}
	elog(ERROR, "queue state %d is not pinned", qs->slot);
}

/* States evicted since the server started (spindle.queue_states view). */
uint64
spindle_queue_evictions(void)
{
	return qshared == NULL ? 0 : pg_atomic_read_u64(&qshared->evictions);
}

QueueState *
spindle_queue_state_at(int slot)
{
	return &qshared->states[slot];
}

LWLock *
spindle_queue_lock(QueueState *qs)
{
	return &qshared->state_locks[qs->slot].lock;
}

/* Free every item of qs; the caller holds its lock. */
static void
free_all_items(QueueState *qs)
{
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &qs->items)
	{
		QueueItem  *item = dlist_container(QueueItem, node, iter.cur);

		spindle_qitem_free(qs, item);
	}
}

/*
 * Free the slot of qs (locked, QueuesLock held exclusively): its items go
 * back to the pool and it belongs to no queue.  Its next queue's first
 * consumer rebuilds the state (take_slot).
 */
static void
free_state(QueueState *qs)
{
	free_all_items(qs);
	qs->valid = false;
	qs->park_known = false;
	qs->dbid = InvalidOid;
	qs->relid = InvalidOid;
}

/*
 * Forget the state of queue table relid of this database (its table was
 * truncated or dropped, maybe by a transaction that will roll back): the
 * next consumer rebuilds it from disk.  Waiters are woken to look again.
 */
void
spindle_queue_state_reset(Oid relid)
{
	QueueState *qs;

	if (qshared == NULL)
		return;
	spindle_queue_limit_forget(relid);
	LWLockAcquire(qshared->lock, LW_EXCLUSIVE);
	forget_saved(MyDatabaseId, relid);
	qs = find_state(relid);
	if (qs != NULL)
	{
		LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
		free_state(qs);
		LWLockRelease(spindle_queue_lock(qs));
		ConditionVariableBroadcast(&qs->cv);
	}
	LWLockRelease(qshared->lock);
}

/*
 * Spindles of queue table relid that held no event were moved down to
 * number from first_no (kept_ids.c, through queue_numbers_lowered): a
 * head past first_no, loaded or saved, goes back to it, and a saved head
 * keeps only what lies below it.  Nothing at or past first_no was ever an
 * event, so the positions given up are only examined again.  The caller
 * holds the table in ShareRowExclusiveLock (no consumer can move the head
 * up again from a directory of before the move until it commits).  Takes
 * QueuesLock and the state's lock.
 */
void
spindle_queue_state_lower(Oid relid, int64 first_no)
{
	SavedHead  *e;
	QueueState *qs;

	if (qshared == NULL)
		return;
	LWLockAcquire(qshared->lock, LW_EXCLUSIVE);
	e = find_saved(MyDatabaseId, relid);
	if (e != NULL && e->head > first_no)
	{
		int			i;
		int			n = 0;

		for (i = 0; i < e->nranges; i++)
			if (e->ranges[i][0] < first_no)
			{
				e->ranges[n][0] = e->ranges[i][0];
				e->ranges[n][1] = Min(e->ranges[i][1], first_no);
				n++;
			}
		e->nranges = n;
		e->head = first_no;
	}
	qs = find_state(relid);
	if (qs != NULL)
	{
		LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
		if (qs->valid && qs->head > first_no)
			qs->head = first_no;
		LWLockRelease(spindle_queue_lock(qs));
	}
	LWLockRelease(qshared->lock);
}

/* Free the states of a database that was dropped. */
void
spindle_queue_forget_database(Oid dbid)
{
	int			i;

	if (qshared == NULL)
		return;
	spindle_queue_limits_forget_database(dbid);
	LWLockAcquire(qshared->lock, LW_EXCLUSIVE);
	forget_saved(dbid, InvalidOid);
	for (i = 0; i < spindle_max_queues; i++)
	{
		QueueState *qs = &qshared->states[i];

		if (qs->dbid != dbid || !OidIsValid(qs->relid))
			continue;
		LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
		free_state(qs);
		LWLockRelease(spindle_queue_lock(qs));
	}
	LWLockRelease(qshared->lock);
}

/*
 * Take an item from the pool for qs (whose lock the caller holds) and
 * append it to its list; NULL if the pool or, for a lease, the lease
 * budget is exhausted.
 */
QueueItem *
spindle_qitem_alloc(QueueState *qs, QueueItemKind kind, int64 start, int64 end)
{
	if (kind == QITEM_LEASED && !spindle_qitem_lease_room())
		return NULL;
	return spindle_qitem_alloc_split(qs, kind, start, end);
}

/*
 * The same for a piece split off an item of the same kind (an ack or
 * set_visibility of one event of a lease): a lease split in two leases no
 * more events, so it needs no room under spindle.max_leases; a lease
 * then being acknowledged never fails for want of lease room.
 */
QueueItem *
spindle_qitem_alloc_split(QueueState *qs, QueueItemKind kind, int64 start,
						  int64 end)
{
	QueueItem  *item = NULL;

	/* leases are counted in nleases, the rest against the queue's budget */
	if (kind != QITEM_LEASED &&
		qs->nitems - qs->nleases >=
		(kind == QITEM_CLAIM ? SPINDLE_ITEMS_PER_QUEUE :
		 SPINDLE_ITEMS_PER_QUEUE - SPINDLE_ITEMS_FOR_CLAIMS))
		return NULL;			/* the last ones are kept for claims */

	SpinLockAcquire(&qshared->pool_mutex);
	if (!dlist_is_empty(&qshared->free_items))
	{
		item = dlist_container(QueueItem, node,
							   dlist_pop_head_node(&qshared->free_items));
		qshared->nfree--;
	}
	SpinLockRelease(&qshared->pool_mutex);
	if (item == NULL)
		return NULL;

	item->generation++;
	item->kind = kind;
	item->start = start;
	item->end = end;
	item->xid = InvalidTransactionId;
	item->owner = -1;
	item->owner_lxid = InvalidLocalTransactionId;
	item->mixed = false;
	item->parked = false;
	item->to_lease = false;
	item->read_count = 0;
	dlist_push_tail(&qs->items, &item->node);
	qs->nitems++;
	if (kind == QITEM_LEASED)
		qs->nleases++;
	return item;
}

/*
 * Whether one more lease fits in spindle.max_leases (all queues together);
 * the caller holds a state lock, the count may be a little stale.
 */
bool
spindle_qitem_lease_room(void)
{
	int			leases = 0;
	int			i;

	for (i = 0; i < spindle_max_queues; i++)
		leases += qshared->states[i].nleases;
	return leases < spindle_max_leases;
}

/*
 * Whether an item of qs holds an id of [start, end).  Takes the state's
 * lock shared.
 */
bool
spindle_qitems_overlap(QueueState *qs, int64 start, int64 end)
{
	dlist_iter	iter;
	bool		found = false;

	LWLockAcquire(spindle_queue_lock(qs), LW_SHARED);
	dlist_foreach(iter, &qs->items)
	{
		QueueItem  *item = dlist_container(QueueItem, node, iter.cur);

		if (item->start < end && item->end > start)
		{
			found = true;
			break;
		}
	}
	LWLockRelease(spindle_queue_lock(qs));
	return found;
}

/* Give an item of qs (whose lock the caller holds) back to the pool. */
void
spindle_qitem_free(QueueState *qs, QueueItem *item)
{
	Assert(item->kind != QITEM_FREE);
	dlist_delete(&item->node);
	qs->nitems--;
	if (item->kind == QITEM_LEASED ||
		(item->kind == QITEM_CLAIM && item->to_lease))
		qs->nleases--;
	item->to_lease = false;
	item->kind = QITEM_FREE;
	item->generation++;
	SpinLockAcquire(&qshared->pool_mutex);
	dlist_push_head(&qshared->free_items, &item->node);
	qshared->nfree++;
	SpinLockRelease(&qshared->pool_mutex);
}

QueueItem *
spindle_qitem_at(int index)
{
	return &qitems[index];
}

int
spindle_qitems_free_count(void)
{
	int			n;

	SpinLockAcquire(&qshared->pool_mutex);
	n = qshared->nfree;
	SpinLockRelease(&qshared->pool_mutex);
	return n;
}
