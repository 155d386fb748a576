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
 * The hash table has a fixed size (spindle.max_open_spindles).  Entries of
 * full spindles are evicted when it is full; entries of spindles created by
 * a transaction that rolls back are removed at its end, those of a dropped
 * database when DROP DATABASE ends.
 *
 * Locks: SlotsLock (shared for lookups and counter updates, exclusive for
 * insert/delete of entries) protects the hash table; no LWLock is held
 * while an entry is built from disk.  Counters and flags are atomics.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xact.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/bufmgr.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "layout.h"
#include "slotmap.h"
#include "directory.h"
#include "slots.h"


typedef struct SlotKey
{
	Oid			dbid;
	Oid			segment;
} SlotKey;

typedef struct SlotEntry
{
	SlotKey		key;
	int64		spindle_no;
	int64		capacity;		/* its number of virtual slots */
	pg_atomic_uint64 used;		/* slots handed out (may pass capacity) */
	pg_atomic_uint32 inflight;	/* reservations not yet placed and mapped */
	pg_atomic_uint32 full;
	pg_atomic_uint64 filled_at; /* TimestampTz when it became full */
} SlotEntry;

typedef struct SlotShared
{
	LWLock	   *lock;
} SlotShared;

static SlotShared *slot_shared = NULL;
static HTAB *slot_hash = NULL;

/* entries this transaction built for spindles it created (see header) */
static List *new_entries = NIL;
static bool callbacks_registered = false;

/*
 * The reservation this backend made and has not placed yet (at most one:
 * an insert places its tuples before it reserves again).  If the insert
 * fails in between, (sub)transaction abort gives the in-flight count back,
 * so the entry can be evicted again; the slots stay used.
 */
static Oid	unplaced_segment = InvalidOid;
static int64 unplaced_spindle_no = 0;

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
		pg_atomic_fetch_sub_u32(&e->inflight, 1);
	LWLockRelease(slot_shared->lock);
	unplaced_segment = InvalidOid;
}

static void register_callbacks(void);

int			spindle_max_spindles = 4096;

static Size
slots_shmem_size(void)
{
	return add_size(MAXALIGN(sizeof(SlotShared)),
					hash_estimate_size(spindle_max_spindles, sizeof(SlotEntry)));
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
	}
	info.keysize = sizeof(SlotKey);
	info.entrysize = sizeof(SlotEntry);
	slot_hash = ShmemInitHash("spindle slot counters",
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

/*
 * Slots a spindle has used: one more than the highest k on disk, counting
 * tuples (the hidden column) and slot map entries.  Reads every page; no
 * LWLock held.
 */
static int64
count_slots(Relation facade, Relation seg, SpindleEntry *sp)
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

/* Forget entries built for spindles of a transaction that rolled back. */
static void
forget_new_entries(void)
{
	ListCell   *lc;

	foreach(lc, new_entries)
		spindle_slots_forget(lfirst_oid(lc));
}

static void
slots_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		release_unplaced();
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
	/* rebuilt from disk when needed again, with nothing in flight */
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		release_unplaced();
		forget_new_entries();
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

static void
mark_full(SlotEntry *e)
{
	if (pg_atomic_exchange_u32(&e->full, 1) == 0)
		pg_atomic_write_u64(&e->filled_at, (uint64) GetCurrentTimestamp());
}

/*
 * Remove entries of full spindles to make room (a full spindle's entry is
 * rebuilt from disk if it is needed again), but never one with a
 * reservation still in flight: its k is not on disk yet, and a rebuilt
 * counter would hand it out again.  (A reservation whose insert fails
 * before placing its tuple is given back when its transaction aborts.)
 * The caller holds SlotsLock exclusively.
 */
static void
evict_full_entries(void)
{
	HASH_SEQ_STATUS status;
	SlotEntry  *e;

	hash_seq_init(&status, slot_hash);
	while ((e = hash_seq_search(&status)) != NULL)
		if (pg_atomic_read_u32(&e->full) &&
			pg_atomic_read_u32(&e->inflight) == 0)
			hash_search(slot_hash, &e->key, HASH_REMOVE, NULL);
}

/*
 * Make sure spindle i of dir has an entry, building it from the spindle's
 * pages if needed; false if the spindle no longer exists.  Opens the
 * spindle (and the next one) with AccessShareLock, outside any LWLock: two
 * backends may count at once, the first to enter its entry wins, and no
 * slot can be handed out before an entry exists.
 */
static bool
ensure_entry(Relation facade, SpindleDirectory *dir, int i)
{
	SpindleEntry sp = dir->spindles[i];
	Oid			next = (i + 1 < dir->nspindles) ? dir->spindles[i + 1].segment : InvalidOid;
	SlotEntry  *e;
	Relation	seg;
	Relation	nextseg = NULL;
	bool		present;
	SlotKey		key;
	bool		found;
	int64		used;
	bool		full;

	LWLockAcquire(slot_shared->lock, LW_SHARED);
	e = lookup(sp.segment);
	present = e != NULL && e->spindle_no == sp.spindle_no;
	LWLockRelease(slot_shared->lock);
	if (present)
		return true;

	seg = try_relation_open(sp.segment, AccessShareLock);
	if (seg == NULL)
		return false;			/* dropped meanwhile */
	if (OidIsValid(next))
		nextseg = try_relation_open(next, AccessShareLock);
	used = count_slots(facade, seg, &sp);
	full = used >= spindle_effective_capacity(&sp) ||
		(nextseg != NULL && RelationGetNumberOfBlocks(nextseg) > 0);

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
	if (e == NULL)
	{
		e = hash_search(slot_hash, &key, HASH_ENTER_NULL, &found);
		if (e == NULL)
		{
			evict_full_entries();
			e = hash_search(slot_hash, &key, HASH_ENTER_NULL, &found);
		}
		if (e == NULL)
		{
			LWLockRelease(slot_shared->lock);
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of spindle slot counters"),
					 errdetail("Every one of the %d counters belongs to a spindle that is not full.",
							   spindle_max_spindles),
					 errhint("Increase spindle.max_open_spindles.")));
		}
		e->spindle_no = sp.spindle_no;
		e->capacity = spindle_effective_capacity(&sp);
		pg_atomic_init_u64(&e->used, (uint64) used);
		pg_atomic_init_u32(&e->inflight, 0);
		pg_atomic_init_u32(&e->full, 0);
		pg_atomic_init_u64(&e->filled_at, 0);
		if (full)
			mark_full(e);
		if (seg->rd_createSubid != InvalidSubTransactionId)
		{
			MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

			register_callbacks();
			new_entries = lappend_oid(new_entries, sp.segment);
			MemoryContextSwitchTo(old);
		}
	}
	LWLockRelease(slot_shared->lock);

	if (nextseg != NULL)
		relation_close(nextseg, AccessShareLock);
	relation_close(seg, AccessShareLock);
	return true;
}

/*
 * Reserve up to nwanted slots in spindle i of dir: returns how many it got
 * (0 when the spindle is full or gone) and sets *first to the k of the
 * first one.  The caller must hold a lock on the spindle's relation from
 * before this call until its tuples are placed and their slot map entries
 * written, so that the spindle cannot be dropped in between.
 */
int
spindle_slots_take(Relation facade, SpindleDirectory *dir, int i, int nwanted,
				   int64 *first)
{
	SpindleEntry *sp = &dir->spindles[i];

	for (;;)
	{
		SlotEntry  *e;
		int			got;
		uint64		n;

		if (!ensure_entry(facade, dir, i))
			return 0;
		LWLockAcquire(slot_shared->lock, LW_SHARED);
		e = lookup(sp->segment);
		if (e == NULL || e->spindle_no != sp->spindle_no)
		{
			/* evicted between the two steps: build it again */
			LWLockRelease(slot_shared->lock);
			continue;
		}
		if (pg_atomic_read_u32(&e->full))
		{
			LWLockRelease(slot_shared->lock);
			return 0;
		}
		pg_atomic_fetch_add_u32(&e->inflight, 1);
		n = pg_atomic_fetch_add_u64(&e->used, nwanted);
		if (n >= (uint64) e->capacity)
			got = 0;
		else
			got = (int) Min((uint64) nwanted, (uint64) e->capacity - n);
		if (n + nwanted >= (uint64) e->capacity)
			mark_full(e);
		if (got == 0)
			pg_atomic_fetch_sub_u32(&e->inflight, 1);
		LWLockRelease(slot_shared->lock);
		if (got > 0)
		{
			register_callbacks();
			unplaced_segment = sp->segment;
			unplaced_spindle_no = sp->spindle_no;
		}
		*first = (int64) n;
		return got;
	}
}

/*
 * Is spindle i of dir full?  Builds its counter if it has none (counting
 * its pages once); *filled_at is when it became full, if known (never
 * earlier than the truth: after a restart, the moment it was found full).
 * A spindle that no longer exists counts as full (it was dropped full).
 */
bool
spindle_slots_full(Relation facade, SpindleDirectory *dir, int i,
				   TimestampTz *filled_at)
{
	SpindleEntry *sp = &dir->spindles[i];

	*filled_at = 0;
	for (;;)
	{
		SlotEntry  *e;
		bool		full;

		if (!ensure_entry(facade, dir, i))
			return true;
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
 * entry (for the views).  next_segrel is the following spindle or NULL.
 */
int64
spindle_slots_used(Relation facade, Relation segrel, SpindleEntry *sp,
				   bool *is_full, TimestampTz *filled_at, Relation next_segrel)
{
	SlotEntry  *e;
	int64		used = 0;
	bool		present;

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
	LWLockRelease(slot_shared->lock);
	if (present)
	{
		/* reservations may pass the capacity; slots never do */
		if (used > spindle_effective_capacity(sp))
			used = spindle_effective_capacity(sp);
		/* the counter may be ahead of what is on disk: show what is there */
		if (!*is_full)
			used = Min(used, count_slots(facade, segrel, sp));
		return used;
	}
	used = count_slots(facade, segrel, sp);
	*is_full = used >= spindle_effective_capacity(sp) ||
		(next_segrel != NULL && RelationGetNumberOfBlocks(next_segrel) > 0);
	return used;
}

/*
 * The slots a spindle has handed out, if shared memory knows: for the
 * planner's estimate, which must not open spindles.
 */
bool
spindle_slots_peek(Oid segment, int64 *used)
{
	SlotEntry  *e;
	bool		present;

	LWLockAcquire(slot_shared->lock, LW_SHARED);
	e = lookup(segment);
	present = e != NULL;
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
		pg_atomic_fetch_sub_u32(&e->inflight, 1);
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

/* Forget a spindle's counter (dropped, or capacity changed while empty). */
void
spindle_slots_forget(Oid segment)
{
	SlotKey		key;

	if (slot_hash == NULL)
		return;
	key.dbid = MyDatabaseId;
	key.segment = segment;
	LWLockAcquire(slot_shared->lock, LW_EXCLUSIVE);
	hash_search(slot_hash, &key, HASH_REMOVE, NULL);
	LWLockRelease(slot_shared->lock);
}

/*
 * Forget every counter of a database (DROP DATABASE and the other commands
 * that need it to themselves: nobody is connected to it, so nothing is in
 * flight; a counter of a database that survives is rebuilt from disk).
 */
void
spindle_slots_forget_database(Oid dboid)
{
	HASH_SEQ_STATUS status;
	SlotEntry  *e;

	if (slot_hash == NULL)
		return;
	LWLockAcquire(slot_shared->lock, LW_EXCLUSIVE);
	hash_seq_init(&status, slot_hash);
	while ((e = hash_seq_search(&status)) != NULL)
		if (e->key.dbid == dboid)
			hash_search(slot_hash, &e->key, HASH_REMOVE, NULL);
	LWLockRelease(slot_shared->lock);
}
