/*-------------------------------------------------------------------------
 *
 * slots.c
 *	  Shared-memory slot counters: how many event slots each spindle has
 *	  handed out, so that no spindle ever holds more than its capacity.
 *
 * Every insert reserves its slots here (an atomic fetch-and-add) before it
 * places the tuples, while holding a lock on the spindle's relation; the
 * value it gets is the number k of its first event within the spindle
 * (its virtual slot is the spindle's vbase + k, see slotmap.c), so no two
 * events of a spindle ever get the same k, and a spindle whose counter
 * reached its capacity (its number of virtual slots) never receives
 * another event.  The entry of a spindle is built on first use from what
 * is on disk: one more than the highest k that a tuple of the spindle or
 * its slot map records.  An index can only hold the TID of an event whose
 * map entry was written, and a map entry is only cleared once no index
 * holds its TID, so a rebuilt counter never hands out a k that an index
 * may still know.  A reservation that never placed its tuple is lost.
 *
 * A spindle is also full as soon as a later spindle has events, so a
 * spindle is never reopened after a restart.
 *
 * Slots skipped: an insert that keeps a supplied event number (the queue
 * layer's spindle.keep_msg_ids) reserves from a given k at or past the
 * counter (spindle_slots_take_at), and fills the spindles before the one
 * it lands in (spindle_slots_fill).  The slots it passes over are handed
 * out and never placed, like those of an insert that failed: a consumer
 * finds them below the count, with no map entry and no reservation in
 * flight, and passes them as gone; a counter rebuilt from disk starts past
 * the highest k placed, so none is handed out again.  counters.c counts
 * them purged at once (spindle_counters_skipped), as it counts the slots
 * of an aborted insert, so the views count no event for them.  After a
 * restart, a spindle whose last slots were skipped is full because the
 * spindle after it has pages (count_from_disk): the inserter gives each
 * spindle after the first one it fills a page before it fills any
 * (kept_ids.c, fill_before), and the spindle its kept event lands in, if
 * new, is created by a helper and committed on its own, so the page stays
 * even if the insert rolls back.
 *
 * A full spindle needs no counter.  Spindles fill in order (an insert moves
 * on to a spindle only once every spindle before it is full), and a full
 * spindle stays full, so a spindle is *known full* when its fill time is in
 * the directory (spindle_catalog.filled_at) or its number lies below its
 * table's *full mark*: one more than the number of the newest spindle seen
 * full, kept per table in a second shared hash.  Annexes (compaction) fill
 * on their own, out of that order: the mark neither covers nor is raised
 * by one, and its count from disk never looks at the spindle after it.
 * The mark is raised when an insert fills a spindle or a count finds one
 * full, only for a spindle and a table that no rollback can take away
 * without a DROP (neither created nor given new storage by the current
 * transaction) and never in recovery;
 * it is cleared when the spindle that raised it is dropped (every dropped
 * spindle goes through spindle_slots_forget, also when its table is
 * dropped or truncated), so a table whose OID is reused never inherits a
 * mark.  Known-full spindles are answered without an entry and are never
 * counted again, so the counters hold the open and ready spindles, plus
 * full ones until their fill time is in the directory: an entry is the
 * only record of when its spindle filled until maintenance writes it down.
 *
 * The hash table has a fixed size (spindle.max_open_spindles), but no
 * spindle needs its entry for long: every queue has an open spindle, and a
 * server with more queues than entries must go round them.  An entry may
 * be evicted, to be rebuilt from disk when needed again, when the count
 * from disk would give back exactly its value (evictable()): no
 * reservation in flight (its k is not on disk yet), and its highest slot
 * handed out placed and mapped.  The entry keeps, besides the slots it
 * handed out (used), one past the highest slot placed and mapped
 * (placed: raised by spindle_slots_placed before the reservation stops
 * being in flight, built equal to used).  A reservation that never placed
 * its tuples (its insert failed in between) leaves placed below used:
 * rebuilt from disk, the counter would hand out those slots again, though
 * a consumer may already have passed them as gone (the head's count said
 * they were handed out, the map was empty, no reservation was in flight),
 * and the new events there would never be delivered.  Such an entry stays
 * until the next insert into its spindle places slots past the lost ones
 * (then placed reaches used again), or until the worker buries them: it
 * lists the entries with lost slots (spindle_slots_list_lost), writes
 * tombstones into their map entries (tombstones.c, which says why that
 * never hides an event) and raises placed (spindle_slots_buried); a count
 * from disk then sees them.  The same holds for a full spindle.  So an
 * entry is pinned only by an insert in progress, or by a failed insert
 * that was its spindle's last until the worker's next round; "out of
 * spindle slot counters" (53400) means that many of those.  Eviction is
 * a sweep with a second chance (an entry used since the last sweep
 * stays, unless the sweep would free less than an eighth of the table),
 * so that a busy open spindle keeps its counter while idle ones give
 * theirs up, and one sweep makes room for many builds.  Entries of
 * spindles created by a transaction that rolls back are removed at its
 * end, those of a dropped database (and its full marks) when DROP
 * DATABASE ends.  The full marks have as many
 * entries; when they are all taken an eighth of them goes: a mark only
 * spares counting (no entry is evicted on its word), so a table that lost
 * its mark finds its full spindles full again by counting and raises it
 * anew.
 *
 * A capacity change (ALTER TABLE SET (events_per_spindle), which gives the
 * new capacity to the spindles with no events yet) tells us each spindle
 * it changed (spindle_slots_capacity_changed): its counter is forgotten at
 * once, and again when the changing (sub)transaction ends, whether it
 * commits, prepares or rolls back, so that no counter built against the
 * capacity of this transaction outlives it; the next user rebuilds it from
 * disk with the capacity then committed.  Until then no full mark is
 * raised for such a spindle: it may be full only at a capacity that a
 * rollback takes away.  The change holds ShareRowExclusiveLock on the
 * table (core's ALTER TABLE even takes AccessExclusiveLock), so no other
 * session inserts meanwhile (one that does not lock the table may still
 * build a counter, with the committed capacity, to read it); an insert
 * therefore knows the capacity that holds for it, and corrects a counter
 * built with another one before it takes a slot (spindle_slots_take).
 *
 * How full a spindle is, and how many slots it used, is answered here and
 * only here, by one function per kind of caller.  They agree on what
 * "full" means (a counter marked full, a fill time in the directory, a
 * number below the full mark, or, counted from disk, a used capacity or a
 * later spindle with pages); they differ in what they may cost and change:
 *   spindle_slots_full    builds the spindle's counter if it has none (one
 *                         count of its pages): the insert path and the
 *                         callers that act on the answer (maintenance,
 *                         TTL, consumers).  A spindle gone counts as full;
 *                         filled_at is never earlier than the truth.
 *   spindle_slots_used    slots used and whether full, counting the pages
 *                         when no counter knows, but building no counter:
 *                         counters are few (spindle.max_open_spindles), so
 *                         a reader (a consumer finding the queue's head)
 *                         does not take one it would not keep.
 *   spindle_slots_view    shared memory only, no page read (the views, and
 *                         counters.c before it counts the pages itself).
 *   spindle_slots_count_disk   always from the pages (counters.c's builds,
 *                         which read every page anyway).
 *   spindle_slots_peek    the counter alone, capped at its capacity; false
 *                         without one, even for a known-full spindle (the
 *                         planner's estimate, verify, a consumer's head:
 *                         they must not open spindles, and treat "no
 *                         counter" apart).
 *   spindle_slots_full_below  the table's full mark itself.
 * Each of them that counts pages to decide whether a spindle is full does
 * so through count_from_disk.
 *
 * Locks: SlotsLock (shared for lookups and counter updates, exclusive for
 * insert/delete of entries and for raising a full mark) protects both hash
 * tables; no LWLock is held while an entry is built from disk.  Counters
 * and flags are atomics.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/bufmgr.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "storage/spindle_storage.h"


typedef struct SlotKey
{
	Oid			dbid;
	Oid			segment;
} SlotKey;

typedef struct SlotEntry
{
	SlotKey		key;
	int64		spindle_no;
	Oid			facade;			/* its table */
	int64		vbase;			/* its first virtual slot (slotmap.c) */
	int64		capacity;		/* its number of virtual slots */
	pg_atomic_uint64 used;		/* slots handed out (may pass capacity) */
	pg_atomic_uint64 placed;	/* what a count from disk would find */
	pg_atomic_uint32 inflight;	/* reservations not yet placed and mapped */
	pg_atomic_uint32 full;
	pg_atomic_uint32 recent;	/* used since the last eviction sweep */
	pg_atomic_uint64 filled_at; /* TimestampTz when it became full */
} SlotEntry;

/* A table's full mark: every spindle numbered below full_below is full. */
typedef struct FullMark
{
	SlotKey		key;			/* the database and the table (facade) */
	int64		full_below;
	Oid			raiser;			/* the spindle that raised it */
} FullMark;

typedef struct SlotShared
{
	LWLock	   *lock;
	uint64		removals;		/* entries of full spindles removed so far */
	pg_atomic_uint64 losses;	/* moments of possible loss (note_if_lost) */
} SlotShared;

static SlotShared *slot_shared = NULL;
static HTAB *slot_hash = NULL;
static HTAB *mark_hash = NULL;

/* what ensure_entry() found */
typedef enum SlotState
{
	SLOTS_GONE,					/* the spindle no longer exists */
	SLOTS_FULL,					/* known full: no entry needed */
	SLOTS_COUNTER				/* it has an entry */
} SlotState;

/* entries this transaction built for spindles it created (see header) */
static List *new_entries = NIL;
static bool callbacks_registered = false;

/*
 * The spindles whose capacity this transaction changed, with the
 * subtransaction that did it (see header); in TopMemoryContext.
 */
typedef struct CapacityChange
{
	Oid			segment;
	SubTransactionId subid;
} CapacityChange;

static List *capacity_changes = NIL;

/*
 * The reservation this backend made and has not placed yet (at most one:
 * an insert places its tuples before it reserves again).  If the insert
 * fails in between, (sub)transaction abort gives the in-flight count back,
 * so the entry can be evicted again; the slots stay used.
 */
static Oid	unplaced_segment = InvalidOid;
static int64 unplaced_spindle_no = 0;
static int64 unplaced_end = 0;	/* one past its last slot */

static bool evictable(SlotEntry *e);
static bool has_lost_slots(SlotEntry *e);

/*
 * Count a moment at which entry e may have come to hold lost slots (see
 * spindle_slots_list_lost): its in-flight count just dropped, and what it
 * placed is below what it handed out.  The caller holds SlotsLock.
 */
static inline void
note_if_lost(SlotEntry *e)
{
	if (has_lost_slots(e))
		pg_atomic_fetch_add_u64(&slot_shared->losses, 1);
}

static void
release_unplaced(void)
{
	SlotKey		key;
	SlotEntry  *e;

	if (!OidIsValid(unplaced_segment) || slot_hash == NULL)
		return;
	key.dbid = MyDatabaseId;
	key.segment = unplaced_segment;
	LWLockAcquire(slot_shared->lock, LW_SHARED);
	e = hash_search(slot_hash, &key, HASH_FIND, NULL);
	if (e != NULL && e->spindle_no == unplaced_spindle_no &&
		pg_atomic_read_u32(&e->inflight) > 0)
	{
		pg_atomic_fetch_sub_u32(&e->inflight, 1);
		/* after the decrement: see spindle_slots_list_lost */
		pg_atomic_fetch_add_u64(&slot_shared->losses, 1);
	}
	LWLockRelease(slot_shared->lock);
	unplaced_segment = InvalidOid;
}

static void register_callbacks(void);

/* Did this transaction change the capacity of this spindle (header)? */
static bool
capacity_uncommitted(Oid segment)
{
	ListCell   *lc;

	foreach(lc, capacity_changes)
		if (((CapacityChange *) lfirst(lc))->segment == segment)
			return true;
	return false;
}

int			spindle_max_spindles = 4096;

static Size
slots_shmem_size(void)
{
	return add_size(add_size(MAXALIGN(sizeof(SlotShared)),
							 hash_estimate_size(spindle_max_spindles,
												sizeof(SlotEntry))),
					hash_estimate_size(spindle_max_spindles, sizeof(FullMark)));
}

/* Called from the shmem_request_hook. */
void
spindle_slots_shmem_request(void)
{
	RequestAddinShmemSpace(slots_shmem_size());
	RequestNamedLWLockTranche("spindle_slots", 1);
}

/* Called from the shmem_startup_hook (also after a crash restart). */
void
spindle_slots_shmem_startup(void)
{
	bool		found;
	HASHCTL		info;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	slot_shared = ShmemInitStruct("spindle slots", sizeof(SlotShared), &found);
	if (!found)
	{
		LWLockPadded *locks = GetNamedLWLockTranche("spindle_slots");

		slot_shared->lock = &locks[0].lock;
		slot_shared->removals = 0;
		pg_atomic_init_u64(&slot_shared->losses, 0);
	}
	info.keysize = sizeof(SlotKey);
	info.entrysize = sizeof(SlotEntry);
	slot_hash = ShmemInitHash("spindle slot counters",
							  spindle_max_spindles, spindle_max_spindles,
							  &info, HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
	info.keysize = sizeof(SlotKey);
	info.entrysize = sizeof(FullMark);
	mark_hash = ShmemInitHash("spindle full marks",
							  spindle_max_spindles, spindle_max_spindles,
							  &info, HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Find the entry of a spindle.  The caller holds SlotsLock (either mode)
 * and must not use the entry after releasing it: an entry may be removed
 * and its memory reused as soon as nobody holds the lock.
 */
static SlotEntry *
lookup(Oid segment)
{
	SlotKey		key;

	key.dbid = MyDatabaseId;
	key.segment = segment;
	return hash_search(slot_hash, &key, HASH_FIND, NULL);
}

/* The full mark of a facade, 0 if none.  The caller holds SlotsLock. */
static int64
full_below_locked(Oid facade)
{
	SlotKey		key;
	FullMark   *m;

	key.dbid = MyDatabaseId;
	key.segment = facade;
	m = hash_search(mark_hash, &key, HASH_FIND, NULL);
	return m != NULL ? m->full_below : 0;
}

/*
 * Is spindle sp of the facade known full, from the directory or the full
 * mark?  The caller holds SlotsLock.
 */
static bool
known_full_locked(Oid facade, const SpindleEntry *sp)
{
	/* the full mark covers event spindles, which fill in order: no annex */
	return sp->filled_at != 0 ||
		(!spindle_is_annex(sp) && sp->spindle_no < full_below_locked(facade));
}

/*
 * Spindles numbered below the returned number are full (0: none known).
 * For the planner's estimate.
 */
int64
spindle_slots_full_below(Oid facade)
{
	int64		full_below;

	LWLockAcquire(slot_shared->lock, LW_SHARED);
	full_below = full_below_locked(facade);
	LWLockRelease(slot_shared->lock);
	return full_below;
}

/*
 * Remove an eighth of the full marks to make room for another table's.  A
 * mark only saves counting: no counter is evicted on its word (evictable),
 * so a table that loses its mark counts its full spindles from disk again,
 * finds them full and raises it anew.  The caller holds SlotsLock
 * exclusively.
 */
static void
evict_marks(void)
{
	HASH_SEQ_STATUS status;
	FullMark   *m;
	int			target = Max(spindle_max_spindles / 8, 1);
	int			evicted = 0;

	hash_seq_init(&status, mark_hash);
	while ((m = hash_seq_search(&status)) != NULL)
	{
		hash_search(mark_hash, &m->key, HASH_REMOVE, NULL);
		if (++evicted >= target)
		{
			hash_seq_term(&status);
			break;
		}
	}
}

/*
 * Record that spindle sp (open as seg) is full: raise its table's full
 * mark to cover it.  Not for a spindle or table that a rollback can take
 * away without a drop (spindle_slots_forget clears the mark when its
 * raiser is dropped; a rollback would leave it behind for a later table
 * with the same OID, or, for TRUNCATE, for spindles that come back), nor
 * in recovery (a standby sees no drop), nor for a spindle whose capacity
 * this transaction changed (full at a capacity a rollback can take away),
 * nor for an annex (it fills on its own, out of the order of the mark).
 * Returns whether the mark covers it.  Takes SlotsLock; no other LWLock
 * may be held.
 */
static bool
raise_full_mark(Relation facade, Relation seg, const SpindleEntry *sp)
{
	SlotKey		key;
	FullMark   *m;
	bool		found;
	bool		covered;

	if (spindle_is_annex(sp) || RecoveryInProgress() ||
		facade->rd_createSubid != InvalidSubTransactionId ||
		facade->rd_firstRelfilenodeSubid != InvalidSubTransactionId ||
		seg->rd_createSubid != InvalidSubTransactionId ||
		capacity_uncommitted(sp->segment))
		return false;
	key.dbid = MyDatabaseId;
	key.segment = RelationGetRelid(facade);
	LWLockAcquire(slot_shared->lock, LW_EXCLUSIVE);
	m = hash_search(mark_hash, &key, HASH_ENTER_NULL, &found);
	if (m == NULL)
	{
		evict_marks();
		m = hash_search(mark_hash, &key, HASH_ENTER_NULL, &found);
	}
	if (m != NULL && (!found || m->full_below <= sp->spindle_no))
	{
		m->full_below = sp->spindle_no + 1;
		m->raiser = sp->segment;
	}
	covered = m != NULL;
	LWLockRelease(slot_shared->lock);
	return covered;
}

/*
 * The fill time of spindle sp is recorded (spindle_catalog.filled_at): drop
 * its entry, which is not needed any more, if it may go (evictable: no
 * reservation in flight, and none lost past what the disk records).  The
 * record alone is not enough: a backend whose directory predates it, with
 * the table's full mark evicted, would count the spindle from disk, and a
 * lost last slot would be handed out again, at a k a consumer has passed
 * as gone (review r2, finding 1).  Such an entry stays until the worker
 * buries its lost slots (tombstones.c) or the spindle is dropped.
 * Maintenance may call it once it has recorded the time;
 * spindle_slots_full and spindle_slots_used call it when the directory
 * has the time.
 */
void
spindle_slots_recorded(const SpindleEntry *sp)
{
	SlotEntry  *e;
	bool		drop;

	LWLockAcquire(slot_shared->lock, LW_SHARED);
	e = lookup(sp->segment);
	drop = e != NULL && e->spindle_no == sp->spindle_no &&
		pg_atomic_read_u32(&e->full) && evictable(e);
	LWLockRelease(slot_shared->lock);
	if (!drop)
		return;
	LWLockAcquire(slot_shared->lock, LW_EXCLUSIVE);
	e = lookup(sp->segment);
	if (e != NULL && e->spindle_no == sp->spindle_no &&
		pg_atomic_read_u32(&e->full) && evictable(e))
	{
		hash_search(slot_hash, &e->key, HASH_REMOVE, NULL);
		slot_shared->removals++;
	}
	LWLockRelease(slot_shared->lock);
}

/*
 * Slots a spindle has used: one more than the highest k on disk, counting
 * tuples (the hidden column) and slot map entries.  Reads every page; no
 * LWLock held.
 */
static int64
count_slots(Relation facade, Relation seg, const SpindleEntry *sp)
{
	BlockNumber nblocks = RelationGetNumberOfBlocks(seg);
	BlockNumber blk;
	int64		maxk = spindle_slotmap_last_used(facade, sp->vbase, sp->vcount);

	for (blk = 0; blk < nblocks; blk++)
	{
		Buffer		buf = ReadBuffer(seg, blk);
		Page		page;
		OffsetNumber off,
					maxoff;

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		maxoff = PageIsNew(page) ? 0 : PageGetMaxOffsetNumber(page);
		for (off = FirstOffsetNumber; off <= maxoff; off++)
		{
			ItemId		itemid = PageGetItemId(page, off);

			if (ItemIdIsNormal(itemid))
				maxk = Max(maxk,
						   spindle_event_k((HeapTupleHeader) PageGetItem(page, itemid),
										   ItemIdGetLength(itemid)));
		}
		UnlockReleaseBuffer(buf);
		CHECK_FOR_INTERRUPTS();
	}
	return maxk + 1;
}

/*
 * Slots spindle sp (open as seg) used, counted from disk (count_slots), and
 * whether that makes it full: its capacity is used, or the spindle after it
 * (next_segrel, or NULL) has pages -- an insert moves on to a spindle only
 * once every spindle before it is full.  No LWLock held; raises no mark.
 */
static int64
count_from_disk(Relation facade, Relation seg, const SpindleEntry *sp,
				Relation next_segrel, bool *is_full)
{
	int64		used = count_slots(facade, seg, sp);

	*is_full = used >= spindle_effective_capacity(sp) ||
		(next_segrel != NULL && RelationGetNumberOfBlocks(next_segrel) > 0);
	elog(DEBUG1, "spindle: counted the slots of spindle %lld of \"%s\" from disk: %lld used%s",
		 (long long) sp->spindle_no, RelationGetRelationName(facade),
		 (long long) used, *is_full ? ", full" : "");
	return used;
}

/* Forget entries built for spindles of a transaction that rolled back. */
static void
forget_new_entries(void)
{
	ListCell   *lc;

	foreach(lc, new_entries)
		spindle_slots_forget(lfirst_oid(lc));
}

/*
 * The (sub)transaction subid ends (InvalidSubTransactionId: the top-level
 * one, with all of its subtransactions): forget the counters of the
 * spindles whose capacity it changed (header).  Nothing of theirs is in
 * flight: the change holds the table against other inserters, and this
 * backend placed its reservations or gave them back (release_unplaced).
 */
static void
forget_capacity_changes(SubTransactionId subid)
{
	List	   *keep = NIL;
	List	   *forget = NIL;
	ListCell   *lc;
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	foreach(lc, capacity_changes)
	{
		CapacityChange *c = lfirst(lc);

		if (subid == InvalidSubTransactionId || c->subid == subid)
		{
			forget = lappend_oid(forget, c->segment);
			pfree(c);
		}
		else
			keep = lappend(keep, c);
	}
	list_free(capacity_changes);
	capacity_changes = keep;
	MemoryContextSwitchTo(old);
	/* no longer listed: nothing stops a full mark now */
	foreach(lc, forget)
		spindle_slots_forget(lfirst_oid(lc));
	list_free(forget);
}

static void
slots_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		release_unplaced();
	if (capacity_changes != NIL &&
		(event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		 event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		 event == XACT_EVENT_PREPARE))
		forget_capacity_changes(InvalidSubTransactionId);
	if (new_entries == NIL)
		return;
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		forget_new_entries();
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PREPARE)
	{
		list_free(new_entries);
		new_entries = NIL;
	}
}

static void
slots_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;

	/* rebuilt from disk when needed again, with nothing in flight */
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		release_unplaced();
		forget_new_entries();
		forget_capacity_changes(mySubid);
	}
	/* a committed subtransaction's changes are its parent's */
	if (event == SUBXACT_EVENT_COMMIT_SUB)
		foreach(lc, capacity_changes)
		{
			CapacityChange *c = lfirst(lc);

			if (c->subid == mySubid)
				c->subid = parentSubid;
		}
}

static void
register_callbacks(void)
{
	if (!callbacks_registered)
	{
		RegisterXactCallback(slots_xact_callback, NULL);
		RegisterSubXactCallback(slots_subxact_callback, NULL);
		callbacks_registered = true;
	}
}

/* Mark an entry full; true if it was not yet. */
static bool
mark_full(SlotEntry *e)
{
	if (pg_atomic_exchange_u32(&e->full, 1) != 0)
		return false;
	pg_atomic_write_u64(&e->filled_at, (uint64) GetCurrentTimestamp());
	return true;
}

/*
 * Can this entry go, to be rebuilt from disk when needed again?  Only if
 * the count from disk gives back exactly what it says (see the header):
 * no reservation in flight (its k is not on disk yet) and the highest slot
 * handed out placed and mapped (placed reaches used, capped at the
 * capacity), so that no slot taken by a reservation that never placed its
 * event lies past what the disk records; a consumer may have passed such
 * a slot as gone, and a rebuilt counter would hand it out again.  An
 * entry whose last reservation was lost, full or not, stays until the
 * worker buries the lost slots (tombstones.c).  The caller holds SlotsLock
 * exclusively, so no reservation starts or ends meanwhile.
 */
static bool
evictable(SlotEntry *e)
{
	uint64		used = pg_atomic_read_u64(&e->used);

	if (pg_atomic_read_u32(&e->inflight) != 0)
		return false;
	return pg_atomic_read_u64(&e->placed) >= Min(used, (uint64) e->capacity);
}

/*
 * Remove entries to make room: a sweep with a second chance over the whole
 * table.  Evictable entries of full spindles go (they are needed only if
 * a consumer or maintenance asks again); those of open spindles go if not
 * used since the last sweep, whose recent bits this sweep clears; if that
 * frees less than an eighth of the table, evictable entries used recently
 * go too, up to an eighth, so that a sweep frees room for many builds and
 * its cost is shared by them.  The caller holds SlotsLock exclusively.
 * Returns how many it removed.
 */
static int
evict_entries(void)
{
	HASH_SEQ_STATUS status;
	SlotEntry  *e;
	int			evicted = 0;
	int			target = Max(spindle_max_spindles / 8, 1);

	hash_seq_init(&status, slot_hash);
	while ((e = hash_seq_search(&status)) != NULL)
	{
		bool		recent = pg_atomic_read_u32(&e->recent) != 0;

		if (recent)
			pg_atomic_write_u32(&e->recent, 0);
		if ((pg_atomic_read_u32(&e->full) || !recent) && evictable(e))
		{
			hash_search(slot_hash, &e->key, HASH_REMOVE, NULL);
			evicted++;
		}
	}
	if (evicted < target)
	{
		hash_seq_init(&status, slot_hash);
		while ((e = hash_seq_search(&status)) != NULL)
		{
			if (!evictable(e))
				continue;
			hash_search(slot_hash, &e->key, HASH_REMOVE, NULL);
			if (++evicted >= target)
			{
				hash_seq_term(&status);
				break;
			}
		}
	}
	if (evicted > 0)
		slot_shared->removals++;
	return evicted;
}

/*
 * Make sure spindle i of dir has an entry, building it from the spindle's
 * pages if needed, unless it is known full: SLOTS_FULL if it is (from the
 * directory or the full mark, or found so by the count), SLOTS_GONE if the
 * spindle no longer exists.  Opens the spindle (and the next one) with
 * AccessShareLock, outside any LWLock: two backends may count at once, the
 * first to enter its entry wins, and no slot can be handed out before an
 * entry exists.  A count is stale if the winner's entry came and went
 * while it was taken (it filled, then was evicted or dropped once its fill
 * time was recorded): then its spindle is full and the count is taken
 * again, so that a slot is never handed out twice.  A spindle found full
 * gets no entry if the full mark can cover it.
 */
static SlotState
ensure_entry(Relation facade, SpindleDirectory *dir, int i)
{
	SpindleEntry sp = *spindle_dir_entry(dir, i);

	/* an annex fills on its own: the spindle after it says nothing */
	Oid			next = (!spindle_is_annex(&sp) && i + 1 < dir->nspindles) ?
		dir->spindles[i + 1].segment : InvalidOid;
	SlotEntry  *e;
	Relation	seg;
	Relation	nextseg = NULL;
	bool		present;
	bool		known_full;
	SlotKey		key;
	bool		found;
	int64		used;
	bool		full;
	int			evicted = -1;
	uint64		removals;

retry:
	LWLockAcquire(slot_shared->lock, LW_SHARED);
	removals = slot_shared->removals;
	e = lookup(sp.segment);
	present = e != NULL && e->spindle_no == sp.spindle_no;
	if (present && !pg_atomic_read_u32(&e->recent))
		pg_atomic_write_u32(&e->recent, 1);
	known_full = known_full_locked(RelationGetRelid(facade), &sp);
	LWLockRelease(slot_shared->lock);
	if (present)
		return SLOTS_COUNTER;
	if (known_full)
		return SLOTS_FULL;

	seg = try_relation_open(sp.segment, AccessShareLock);
	if (seg == NULL)
		return SLOTS_GONE;		/* dropped meanwhile */
	if (OidIsValid(next))
		nextseg = try_relation_open(next, AccessShareLock);
	used = count_from_disk(facade, seg, &sp, nextseg, &full);
	if (full && raise_full_mark(facade, seg, &sp))
	{
		/* known full from now on: no counter needed */
		if (nextseg != NULL)
			relation_close(nextseg, AccessShareLock);
		relation_close(seg, AccessShareLock);
		return SLOTS_FULL;
	}

	/*
	 * No slot used on disk: the spindle never held an event, so its purge
	 * counters start at zero (counters.c), before anyone can take a slot.
	 */
	if (used == 0)
		spindle_counters_created(RelationGetRelid(facade), &sp);

	key.dbid = MyDatabaseId;
	key.segment = sp.segment;
	LWLockAcquire(slot_shared->lock, LW_EXCLUSIVE);
	e = hash_search(slot_hash, &key, HASH_FIND, NULL);
	if (e != NULL && e->spindle_no != sp.spindle_no)
	{
		/* a stale entry of a relation whose OID was reused */
		hash_search(slot_hash, &key, HASH_REMOVE, NULL);
		e = NULL;
	}
	if (e == NULL && slot_shared->removals != removals)
	{
		/* an entry may have come and gone since the count: count again */
		LWLockRelease(slot_shared->lock);
		if (nextseg != NULL)
			relation_close(nextseg, AccessShareLock);
		relation_close(seg, AccessShareLock);
		goto retry;
	}
	if (e == NULL)
	{
		e = hash_search(slot_hash, &key, HASH_ENTER_NULL, &found);
		if (e == NULL)
		{
			evicted = evict_entries();
			e = hash_search(slot_hash, &key, HASH_ENTER_NULL, &found);
		}
		if (e == NULL)
		{
			LWLockRelease(slot_shared->lock);
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("out of spindle slot counters"),
					 errdetail("Every one of the %d counters (spindle.max_open_spindles) belongs to a spindle with an insert in progress, or whose last insert failed before placing its events and was not yet seen by the spindle worker.",
							   spindle_max_spindles),
					 errhint("Increase spindle.max_open_spindles, or retry once the spindle worker has run (spindle.naptime).")));
		}
		e->spindle_no = sp.spindle_no;
		e->facade = RelationGetRelid(facade);
		e->vbase = sp.vbase;
		e->capacity = spindle_effective_capacity(&sp);
		pg_atomic_init_u64(&e->used, (uint64) used);
		pg_atomic_init_u64(&e->placed, (uint64) used);
		pg_atomic_init_u32(&e->inflight, 0);
		pg_atomic_init_u32(&e->full, 0);
		pg_atomic_init_u32(&e->recent, 1);
		pg_atomic_init_u64(&e->filled_at, 0);
		if (full)
			(void) mark_full(e);
		if (seg->rd_createSubid != InvalidSubTransactionId)
		{
			MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

			register_callbacks();
			new_entries = lappend_oid(new_entries, sp.segment);
			MemoryContextSwitchTo(old);
		}
	}
	LWLockRelease(slot_shared->lock);
	if (evicted >= 0)
		elog(DEBUG1, "spindle: evicted %d slot counters",
			 evicted);

	if (nextseg != NULL)
		relation_close(nextseg, AccessShareLock);
	relation_close(seg, AccessShareLock);
	return SLOTS_COUNTER;
}

/*
 * The counter of spindle sp was built with another capacity than the one
 * its inserter sees: by a session that read the directory before a
 * capacity change committed, or while it was not yet committed.  An
 * inserter holds a lock that conflicts with the change, so its capacity is
 * the one that holds: give it to the counter (marking it full if it used
 * that much).  Takes SlotsLock exclusively.
 */
static void
correct_capacity(const SpindleEntry *sp)
{
	SlotEntry  *e;

	LWLockAcquire(slot_shared->lock, LW_EXCLUSIVE);
	e = lookup(sp->segment);
	if (e != NULL && e->spindle_no == sp->spindle_no &&
		!pg_atomic_read_u32(&e->full))
	{
		e->capacity = spindle_effective_capacity(sp);
		if (pg_atomic_read_u64(&e->used) >= (uint64) e->capacity)
			(void) mark_full(e);
		note_if_lost(e);
	}
	LWLockRelease(slot_shared->lock);
}

/*
 * Move counter e's used to at + nwanted if it has not passed at yet: the
 * slots between are skipped, never placed (see "Slots skipped" in the
 * header); *skipped says how many.  Returns false, changing nothing, if
 * the counter is past at.
 * The caller holds SlotsLock (shared is enough: used is atomic).
 */
static bool
advance_to(SlotEntry *e, int64 at, int nwanted, int64 *skipped)
{
	uint64		n = pg_atomic_read_u64(&e->used);

	while (n <= (uint64) at)
	{
		if (pg_atomic_compare_exchange_u64(&e->used, &n,
										   (uint64) at + nwanted))
		{
			*skipped = at - (int64) n;
			return true;
		}
	}
	*skipped = 0;
	return false;
}

/*
 * Reserve up to nwanted slots in spindle i of dir (spindle_dir_entry: an
 * index past dir->nspindles is an annex's): returns how many it got
 * (0 when the spindle is full or gone) and sets *first to the k of the
 * first one.  The caller must hold a lock on the spindle's relation from
 * before this call until its tuples are placed and their slot map entries
 * written, so that the spindle cannot be dropped in between.
 */
int
spindle_slots_take(Relation facade, SpindleDirectory *dir, int i, int nwanted,
				   int64 *first)
{
	return spindle_slots_take_at(facade, dir, i, -1, nwanted, first);
}

/*
 * spindle_slots_take, at a given k: with at >= 0, reserve up to nwanted
 * slots from k = at, skipping the slots between the counter and at; 0 if
 * the counter has passed at already (or the spindle is full or gone).
 * With at < 0, from the counter (spindle_slots_take).  Same locking.
 */
int
spindle_slots_take_at(Relation facade, SpindleDirectory *dir, int i,
					  int64 at, int nwanted, int64 *first)
{
	SpindleEntry *sp = spindle_dir_entry(dir, i);
	int64		skipped = 0;

	for (;;)
	{
		SlotEntry  *e;
		int			got;
		uint64		n;
		bool		filled = false;

		if (ensure_entry(facade, dir, i) != SLOTS_COUNTER)
			return 0;			/* full or gone */
		LWLockAcquire(slot_shared->lock, LW_SHARED);
		e = lookup(sp->segment);
		if (e == NULL || e->spindle_no != sp->spindle_no)
		{
			/* evicted between the two steps: look again */
			LWLockRelease(slot_shared->lock);
			continue;
		}
		if (pg_atomic_read_u32(&e->full))
		{
			LWLockRelease(slot_shared->lock);
			return 0;
		}
		if (e->capacity != spindle_effective_capacity(sp))
		{
			/* built with another capacity than ours: correct it */
			LWLockRelease(slot_shared->lock);
			correct_capacity(sp);
			continue;
		}
		if (!pg_atomic_read_u32(&e->recent))
			pg_atomic_write_u32(&e->recent, 1);
		pg_atomic_fetch_add_u32(&e->inflight, 1);
		if (at < 0)
			n = pg_atomic_fetch_add_u64(&e->used, nwanted);
		else if (at < e->capacity && advance_to(e, at, nwanted, &skipped))
			n = (uint64) at;
		else
		{
			/* passed already, or past the capacity: nothing taken */
			pg_atomic_fetch_sub_u32(&e->inflight, 1);
			LWLockRelease(slot_shared->lock);
			return 0;
		}
		if (n >= (uint64) e->capacity)
			got = 0;
		else
			got = (int) Min((uint64) nwanted, (uint64) e->capacity - n);
		if (n + nwanted >= (uint64) e->capacity)
			filled = mark_full(e);
		if (got == 0)
		{
			pg_atomic_fetch_sub_u32(&e->inflight, 1);
			note_if_lost(e);
		}
		LWLockRelease(slot_shared->lock);
		if (got > 0)
		{
			register_callbacks();
			unplaced_segment = sp->segment;
			unplaced_spindle_no = sp->spindle_no;
			unplaced_end = (int64) n + got;
		}
		if (filled)
		{
			/* the caller holds the spindle locked */
			Relation	seg = relation_open(sp->segment, NoLock);

			(void) raise_full_mark(facade, seg, sp);
			relation_close(seg, NoLock);
		}
		if (skipped > 0)
			spindle_counters_skipped(sp->segment, skipped);
		*first = (int64) n;
		return got;
	}
}

/*
 * Fill spindle i of dir without placing anything: its counter moves to its
 * capacity, so the slots it had not handed out are skipped, and it is
 * full.  An insert that keeps a supplied event number past this spindle
 * does this first, as spindles fill in order (kept_ids.c, fill_before).
 * seg is the spindle's relation, which the caller holds locked.  Returns
 * false if the spindle is gone.
 */
bool
spindle_slots_fill(Relation facade, SpindleDirectory *dir, int i,
				   Relation seg)
{
	SpindleEntry *sp = &dir->spindles[i];
	SlotState	st;
	int64		skipped = 0;

	for (;;)
	{
		SlotEntry  *e;
		bool		filled;

		st = ensure_entry(facade, dir, i);
		if (st != SLOTS_COUNTER)
			return st == SLOTS_FULL;
		LWLockAcquire(slot_shared->lock, LW_SHARED);
		e = lookup(sp->segment);
		if (e == NULL || e->spindle_no != sp->spindle_no)
		{
			/* evicted between the two steps: look again */
			LWLockRelease(slot_shared->lock);
			continue;
		}
		if (e->capacity > 0 && advance_to(e, e->capacity - 1, 1, &skipped))
			skipped++;			/* the last slot too */
		filled = mark_full(e);
		LWLockRelease(slot_shared->lock);
		if (filled)
			(void) raise_full_mark(facade, seg, sp);
		if (skipped > 0)
			spindle_counters_skipped(sp->segment, skipped);
		return true;
	}
}

/*
 * Is spindle i of dir full?  Builds its counter if it has none and is not
 * known full (counting its pages once); *filled_at is when it became full,
 * if known (never earlier than the truth: the directory's, its counter's,
 * else the moment it is found full).  A spindle that no longer exists
 * counts as full (it was dropped full).
 */
bool
spindle_slots_full(Relation facade, SpindleDirectory *dir, int i,
				   TimestampTz *filled_at)
{
	SpindleEntry *sp = &dir->spindles[i];

	*filled_at = 0;
	if (sp->filled_at != 0)
	{
		/* recorded: its counter, if it still has one, is not needed */
		spindle_slots_recorded(sp);
		*filled_at = sp->filled_at;
		return true;
	}
	for (;;)
	{
		SlotEntry  *e;
		bool		full;

		switch (ensure_entry(facade, dir, i))
		{
			case SLOTS_GONE:
				return true;
			case SLOTS_FULL:
				*filled_at = GetCurrentTimestamp();
				return true;
			case SLOTS_COUNTER:
				break;
		}
		LWLockAcquire(slot_shared->lock, LW_SHARED);
		e = lookup(sp->segment);
		if (e == NULL || e->spindle_no != sp->spindle_no)
		{
			LWLockRelease(slot_shared->lock);
			continue;
		}
		full = pg_atomic_read_u32(&e->full) != 0;
		*filled_at = (TimestampTz) pg_atomic_read_u64(&e->filled_at);
		LWLockRelease(slot_shared->lock);
		return full;
	}
}

/*
 * Slots used by a spindle and whether it is full, without building an
 * entry (for a reader: see the file header).  next_segrel is the following
 * spindle or NULL.  A known-full spindle without a counter used its whole
 * capacity.
 */
int64
spindle_slots_used(Relation facade, Relation segrel, SpindleEntry *sp,
				   bool *is_full, TimestampTz *filled_at, Relation next_segrel)
{
	SlotEntry  *e;
	int64		used = 0;
	bool		present;
	bool		known_full;

	*filled_at = 0;
	LWLockAcquire(slot_shared->lock, LW_SHARED);
	e = lookup(RelationGetRelid(segrel));
	present = e != NULL && e->spindle_no == sp->spindle_no;
	if (present)
	{
		used = (int64) pg_atomic_read_u64(&e->used);
		*is_full = pg_atomic_read_u32(&e->full) != 0;
		*filled_at = (TimestampTz) pg_atomic_read_u64(&e->filled_at);
	}
	known_full = known_full_locked(RelationGetRelid(facade), sp);
	LWLockRelease(slot_shared->lock);
	if (present)
	{
		if (*is_full && sp->filled_at != 0)
			spindle_slots_recorded(sp);
		/* reservations may pass the capacity; slots never do */
		if (used > spindle_effective_capacity(sp))
			used = spindle_effective_capacity(sp);
		/* the counter may be ahead of what is on disk: show what is there */
		if (!*is_full)
			used = Min(used, count_slots(facade, segrel, sp));
		return used;
	}
	if (known_full)
	{
		*is_full = true;
		return spindle_effective_capacity(sp);
	}
	used = count_from_disk(facade, segrel, sp, next_segrel, is_full);
	if (*is_full)
		(void) raise_full_mark(facade, segrel, sp);
	return used;
}

/*
 * Whether slots of the spindle were handed out and not yet placed and
 * mapped: false if it has no counter (a spindle known full takes no
 * reservation).  A consumer reading a slot map entry that is still empty
 * asks this first: no reservation in flight before means none after, for
 * a full spindle.
 */
bool
spindle_slots_inflight(Oid segment, int64 spindle_no)
{
	SlotEntry  *e;
	bool		inflight;

	LWLockAcquire(slot_shared->lock, LW_SHARED);
	e = lookup(segment);
	inflight = e != NULL && e->spindle_no == spindle_no &&
		pg_atomic_read_u32(&e->inflight) > 0;
	LWLockRelease(slot_shared->lock);
	return inflight;
}

/*
 * The slots spindle spindle_no (relation segment) has handed out, if it
 * has a counter: for the planner's estimate, which must not open spindles.
 */
bool
spindle_slots_peek(Oid segment, int64 spindle_no, int64 *used)
{
	SlotEntry  *e;
	bool		present;

	LWLockAcquire(slot_shared->lock, LW_SHARED);
	e = lookup(segment);
	present = e != NULL && e->spindle_no == spindle_no;
	if (present)
		*used = Min((int64) pg_atomic_read_u64(&e->used), e->capacity);
	LWLockRelease(slot_shared->lock);
	return present;
}

/*
 * The reservation made by spindle_slots_take() on spindle sp is placed and
 * its slot map entries written (call only when it got slots).
 */
void
spindle_slots_placed(SpindleEntry *sp)
{
	SlotEntry  *e;

	LWLockAcquire(slot_shared->lock, LW_SHARED);
	e = lookup(sp->segment);
	/* never evicted meanwhile: it had a reservation in flight */
	if (e != NULL && e->spindle_no == sp->spindle_no &&
		pg_atomic_read_u32(&e->inflight) > 0)
	{
		uint64		placed = pg_atomic_read_u64(&e->placed);

		/* on disk now: raise placed to its end, before inflight drops */
		while (placed < (uint64) unplaced_end &&
			   !pg_atomic_compare_exchange_u64(&e->placed, &placed,
											   (uint64) unplaced_end))
			;
		pg_atomic_fetch_sub_u32(&e->inflight, 1);
		/* an earlier reservation may have been lost below this one */
		note_if_lost(e);
	}
	LWLockRelease(slot_shared->lock);
	unplaced_segment = InvalidOid;
}

/* Has any slot of this spindle been handed out (maybe not yet on disk)? */
bool
spindle_slots_reserved(Relation segrel)
{
	SlotEntry  *e;
	bool		reserved;

	LWLockAcquire(slot_shared->lock, LW_SHARED);
	e = lookup(RelationGetRelid(segrel));
	reserved = e != NULL && pg_atomic_read_u64(&e->used) > 0;
	LWLockRelease(slot_shared->lock);
	return reserved;
}

/*
 * Forget a spindle's counter (dropped, or capacity changed while empty, or
 * created by a transaction that rolled back), and its table's full mark if
 * this spindle raised it.
 */
void
spindle_slots_forget(Oid segment)
{
	SlotKey		key;
	HASH_SEQ_STATUS status;
	FullMark   *m;

	if (slot_hash == NULL)
		return;
	spindle_counters_forget(segment);
	key.dbid = MyDatabaseId;
	key.segment = segment;
	LWLockAcquire(slot_shared->lock, LW_EXCLUSIVE);
	hash_search(slot_hash, &key, HASH_REMOVE, NULL);
	/* a full mark must not outlive the spindle that raised it (header) */
	hash_seq_init(&status, mark_hash);
	while ((m = hash_seq_search(&status)) != NULL)
		if (m->key.dbid == MyDatabaseId && m->raiser == segment)
			hash_search(mark_hash, &m->key, HASH_REMOVE, NULL);
	LWLockRelease(slot_shared->lock);
}

/*
 * This transaction changes the capacity of spindle segment, which has no
 * events: forget its counter now and when the (sub)transaction ends, and
 * raise no full mark for it until then (see header).
 */
void
spindle_slots_capacity_changed(Oid segment)
{
	CapacityChange *c;
	MemoryContext old;

	spindle_slots_forget(segment);
	if (slot_hash == NULL)
		return;
	register_callbacks();
	old = MemoryContextSwitchTo(TopMemoryContext);
	c = palloc(sizeof(CapacityChange));
	c->segment = segment;
	c->subid = GetCurrentSubTransactionId();
	capacity_changes = lappend(capacity_changes, c);
	MemoryContextSwitchTo(old);
}

/*
 * Forget every counter and full mark of a database (DROP DATABASE and the
 * other commands that need it to themselves: nobody is connected to it, so
 * nothing is in flight; a counter of a database that survives is rebuilt
 * from disk).
 */
void
spindle_slots_forget_database(Oid dboid)
{
	HASH_SEQ_STATUS status;
	SlotEntry  *e;
	FullMark   *m;

	if (slot_hash == NULL)
		return;
	spindle_counters_forget_database(dboid);
	LWLockAcquire(slot_shared->lock, LW_EXCLUSIVE);
	hash_seq_init(&status, slot_hash);
	while ((e = hash_seq_search(&status)) != NULL)
		if (e->key.dbid == dboid)
			hash_search(slot_hash, &e->key, HASH_REMOVE, NULL);
	hash_seq_init(&status, mark_hash);
	while ((m = hash_seq_search(&status)) != NULL)
		if (m->key.dbid == dboid)
			hash_search(mark_hash, &m->key, HASH_REMOVE, NULL);
	LWLockRelease(slot_shared->lock);
}

/*
 * For the views, from shared memory only (no lock, no page read): the
 * slots spindle sp of the facade has handed out (capped at its capacity),
 * whether it is full and since when.  False if no slot counter knows and
 * it is not known full.
 */
bool
spindle_slots_view(Oid facade, const SpindleEntry *sp, int64 *used,
				   bool *is_full, TimestampTz *filled_at)
{
	SlotEntry  *e;
	bool		present;
	bool		known_full;

	*used = 0;
	*is_full = false;
	*filled_at = sp->filled_at;
	if (slot_hash == NULL)
		return false;
	LWLockAcquire(slot_shared->lock, LW_SHARED);
	e = lookup(sp->segment);
	present = e != NULL && e->spindle_no == sp->spindle_no;
	if (present)
	{
		*used = Min((int64) pg_atomic_read_u64(&e->used),
					spindle_effective_capacity(sp));
		*is_full = pg_atomic_read_u32(&e->full) != 0;
		if (*is_full && *filled_at == 0)
			*filled_at = (TimestampTz) pg_atomic_read_u64(&e->filled_at);
	}
	known_full = known_full_locked(facade, sp);
	LWLockRelease(slot_shared->lock);
	if (known_full)
	{
		*is_full = true;
		if (!present)
			*used = spindle_effective_capacity(sp);
	}
	return present || known_full;
}

/*
 * The slots spindle sp (open as seg) has handed out, counted from disk,
 * and whether it is full (next_segrel: the spindle after it, or NULL).
 * Reads every page.  For counters.c's builds.
 */
int64
spindle_slots_count_disk(Relation facade, Relation seg, const SpindleEntry *sp,
						 Relation next_segrel, bool *is_full)
{
	int64		used = count_from_disk(facade, seg, sp, next_segrel, is_full);

	if (*is_full)
	{
		/* known full from now on: never counted again */
		(void) raise_full_mark(facade, seg, sp);
		/* a full spindle handed out its whole capacity */
		used = spindle_effective_capacity(sp);
	}
	return used;
}

/* Has entry e lost slots that may be buried?  The caller holds SlotsLock. */
static bool
has_lost_slots(SlotEntry *e)
{
	uint64		used = pg_atomic_read_u64(&e->used);

	return pg_atomic_read_u32(&e->inflight) == 0 &&
		pg_atomic_read_u64(&e->placed) < Min(used, (uint64) e->capacity);
}

/*
 * The spindles of this database whose counters lost slots (no reservation
 * in flight, placed below used), at most max of them, into out[]: for the
 * worker, which buries them (tombstones.c).  A pass over the hash under a
 * shared SlotsLock, with no page read; what it lists is checked again
 * under the exclusive lock (spindle_slots_lost_range).
 *
 * *seen is the caller's memory of the server's count of moments at which
 * an entry may have come to hold lost slots: an entry has lost slots
 * (has_lost_slots) only from a moment its in-flight count drops (a
 * reservation given back unplaced, release_unplaced, or one placed above
 * an earlier lost one, or one that got no slot; note_if_lost), or its
 * capacity is corrected, and used only grows under a reservation in
 * flight.  While the count has not moved since a pass that found
 * nothing, there is nothing to find and the pass is skipped, so a round
 * costs one atomic read when no insert failed.  The count is read before
 * the pass and raised after the in-flight count drops, so a loss that
 * the pass could not see moves it; *seen is set only when the pass found
 * nothing (what it found may not all be buried, and is looked for
 * again).
 */
int
spindle_slots_list_lost(SpindleLostSlots *out, int max, uint64 *seen)
{
	HASH_SEQ_STATUS status;
	SlotEntry  *e;
	int			n = 0;
	uint64		losses;

	if (slot_hash == NULL || max <= 0)
		return 0;
	losses = pg_atomic_read_u64(&slot_shared->losses);
	if (losses == *seen)
		return 0;
	LWLockAcquire(slot_shared->lock, LW_SHARED);
	hash_seq_init(&status, slot_hash);
	while ((e = hash_seq_search(&status)) != NULL)
	{
		if (e->key.dbid != MyDatabaseId || !has_lost_slots(e))
			continue;
		out[n].facade = e->facade;
		out[n].segment = e->key.segment;
		out[n].spindle_no = e->spindle_no;
		out[n].vbase = e->vbase;
		if (++n >= max)
		{
			hash_seq_term(&status);
			break;
		}
	}
	LWLockRelease(slot_shared->lock);
	if (n == 0)
		*seen = losses;
	return n;
}

/*
 * The lost slots [*from, *to) of spindle l (k, not virtual slots), if its
 * counter still has some: false if not, or if the counter is gone or now
 * belongs to something else.  Taken under an exclusive SlotsLock, so that
 * no reservation is between raising inflight and taking its slots (both
 * happen under the shared lock): with inflight at zero, every reservation
 * below used has ended, placed or given back, and one that ended without
 * raising placed past a slot never placed its event there (tombstones.c).
 */
bool
spindle_slots_lost_range(const SpindleLostSlots *l, int64 *from, int64 *to)
{
	SlotEntry  *e;
	bool		lost = false;

	LWLockAcquire(slot_shared->lock, LW_EXCLUSIVE);
	e = lookup(l->segment);
	if (e != NULL && e->spindle_no == l->spindle_no &&
		e->facade == l->facade && e->vbase == l->vbase && has_lost_slots(e))
	{
		*from = (int64) pg_atomic_read_u64(&e->placed);
		*to = Min((int64) pg_atomic_read_u64(&e->used), e->capacity);
		lost = true;
	}
	LWLockRelease(slot_shared->lock);
	return lost;
}

/*
 * The lost slots of spindle l below `to` are buried (their tombstones are
 * in the slot map): a count from disk sees them now, so raise placed to
 * `to`, which makes the counter evictable again if nothing else was lost
 * meanwhile.  Takes SlotsLock shared (placed only grows, by CAS).
 */
void
spindle_slots_buried(const SpindleLostSlots *l, int64 to)
{
	SlotEntry  *e;

	LWLockAcquire(slot_shared->lock, LW_SHARED);
	e = lookup(l->segment);
	if (e != NULL && e->spindle_no == l->spindle_no)
	{
		uint64		placed = pg_atomic_read_u64(&e->placed);

		while (placed < (uint64) to &&
			   !pg_atomic_compare_exchange_u64(&e->placed, &placed,
											   (uint64) to))
			;
	}
	LWLockRelease(slot_shared->lock);
}
