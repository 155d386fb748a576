/*-------------------------------------------------------------------------
 *
 * slots.c
 *	  Shared-memory slot counters: how many event slots each spindle has
 *	  handed out, so that no spindle ever holds more than its capacity.
 *
 * Every insert reserves its slot here (an atomic fetch-and-add) before it
 * places the tuple, while holding a lock on the spindle's relation; so the
 * counter is never below the number of tuples in the spindle, and a spindle
 * whose counter reached its capacity never receives another event.  The
 * entry of a spindle is built on first use from its pages: line pointers
 * are never reused in a spindle (no VACUUM reclaims them), so their number
 * is the number of slots ever used.  After a crash the counters are rebuilt
 * the same way; a reservation that never placed its tuple is simply lost.
 *
 * A spindle is also full as soon as a later spindle has events, so a
 * spindle is never reopened after a restart.
 *
 * Locks: SlotsLock (shared for lookups, exclusive for insert/delete of
 * entries) protects the hash table; SlotsInitLock serialises the building
 * of entries.  Counters and flags in an entry are atomics.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/bufmgr.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "spindle.h"

typedef struct SlotKey
{
	Oid			dbid;
	Oid			segment;
} SlotKey;

typedef struct SlotEntry
{
	SlotKey		key;
	int64		spindle_no;
	int64		capacity;		/* 0 = unbounded */
	pg_atomic_uint64 used;		/* slots handed out (may pass capacity) */
	pg_atomic_uint32 full;
	pg_atomic_uint64 filled_at; /* TimestampTz when it became full */
} SlotEntry;

typedef struct SlotShared
{
	LWLock	   *lock;
	LWLock	   *initlock;
} SlotShared;

static SlotShared *slot_shared = NULL;
static HTAB *slot_hash = NULL;

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
	RequestNamedLWLockTranche("spindle_slots", 2);
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
		slot_shared->initlock = &locks[1].lock;
	}
	info.keysize = sizeof(SlotKey);
	info.entrysize = sizeof(SlotEntry);
	slot_hash = ShmemInitHash("spindle slot counters",
							  spindle_max_spindles, spindle_max_spindles,
							  &info, HASH_ELEM | HASH_BLOBS);
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

/* Number of line pointers ever used in a spindle (= slots used). */
static int64
count_slots(Relation seg)
{
	BlockNumber nblocks = RelationGetNumberOfBlocks(seg);
	BlockNumber blk;
	int64		n = 0;

	for (blk = 0; blk < nblocks; blk++)
	{
		Buffer		buf = ReadBuffer(seg, blk);

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		if (!PageIsNew(BufferGetPage(buf)))
			n += PageGetMaxOffsetNumber(BufferGetPage(buf));
		UnlockReleaseBuffer(buf);
		CHECK_FOR_INTERRUPTS();
	}
	return n;
}

static void
mark_full(SlotEntry *e)
{
	if (pg_atomic_exchange_u32(&e->full, 1) == 0)
		pg_atomic_write_u64(&e->filled_at, (uint64) GetCurrentTimestamp());
}

/*
 * Remove entries of full spindles to make room (a full spindle's entry is
 * rebuilt as full from its pages if it is needed again).  The caller holds
 * SlotsLock exclusively.
 */
static void
evict_full_entries(void)
{
	HASH_SEQ_STATUS status;
	SlotEntry  *e;

	hash_seq_init(&status, slot_hash);
	while ((e = hash_seq_search(&status)) != NULL)
		if (pg_atomic_read_u32(&e->full))
			hash_search(slot_hash, &e->key, HASH_REMOVE, NULL);
}

/*
 * Make sure spindle i of dir has an entry, building it from the spindle's
 * pages if needed; false if the spindle no longer exists.  Opens the
 * spindle (and the next one) with AccessShareLock, outside any LWLock.
 */
static bool
ensure_entry(SpindleDirectory *dir, int i)
{
	SpindleEntry sp = dir->spindles[i];
	Oid			next = (i + 1 < dir->nspindles) ? dir->spindles[i + 1].segment : InvalidOid;
	SlotEntry  *e;
	Relation	seg;
	Relation	nextseg = NULL;
	bool		present;
	SlotKey		key;
	bool		found;

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

	LWLockAcquire(slot_shared->initlock, LW_EXCLUSIVE);
	LWLockAcquire(slot_shared->lock, LW_SHARED);
	e = lookup(sp.segment);
	present = e != NULL && e->spindle_no == sp.spindle_no;
	LWLockRelease(slot_shared->lock);
	if (!present)
	{
		/* only one builder at a time (initlock): counting does I/O */
		int64		used = count_slots(seg);
		bool		full = (sp.capacity > 0 && used >= sp.capacity) ||
			(nextseg != NULL && RelationGetNumberOfBlocks(nextseg) > 0);

		key.dbid = MyDatabaseId;
		key.segment = sp.segment;
		LWLockAcquire(slot_shared->lock, LW_EXCLUSIVE);
		e = hash_search(slot_hash, &key, HASH_ENTER_NULL, &found);
		if (e == NULL)
		{
			evict_full_entries();
			e = hash_search(slot_hash, &key, HASH_ENTER_NULL, &found);
		}
		if (e == NULL)
		{
			LWLockRelease(slot_shared->lock);
			LWLockRelease(slot_shared->initlock);
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of spindle slot counters"),
					 errhint("Increase spindle.max_open_spindles.")));
		}
		e->spindle_no = sp.spindle_no;
		e->capacity = sp.capacity;
		pg_atomic_init_u64(&e->used, (uint64) used);
		pg_atomic_init_u32(&e->full, 0);
		pg_atomic_init_u64(&e->filled_at, 0);
		if (full)
			mark_full(e);
		LWLockRelease(slot_shared->lock);
	}
	LWLockRelease(slot_shared->initlock);

	if (nextseg != NULL)
		relation_close(nextseg, AccessShareLock);
	relation_close(seg, AccessShareLock);
	return true;
}

/*
 * Reserve up to nwanted slots in spindle i of dir.  Returns how many it got
 * (0 when the spindle is full or gone).  The caller must hold a lock on the
 * spindle's relation from before this call until its tuples are placed, so
 * that the spindle cannot be dropped in between.
 */
int
spindle_slots_take(SpindleDirectory *dir, int i, int nwanted)
{
	SpindleEntry *sp = &dir->spindles[i];
	int			got = 0;

	for (;;)
	{
		SlotEntry  *e;

		if (!ensure_entry(dir, i))
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
			got = 0;
		else if (e->capacity == 0)
		{
			pg_atomic_fetch_add_u64(&e->used, nwanted);
			got = nwanted;
		}
		else
		{
			uint64		n = pg_atomic_fetch_add_u64(&e->used, nwanted);

			if (n >= (uint64) e->capacity)
				got = 0;
			else
				got = (int) Min((uint64) nwanted, (uint64) e->capacity - n);
			if (n + nwanted >= (uint64) e->capacity)
				mark_full(e);
		}
		LWLockRelease(slot_shared->lock);
		return got;
	}
}

/*
 * Is spindle i of dir full?  Builds its counter if it has none (counting
 * its pages once); *filled_at is when it became full, if known.  False
 * for a spindle that no longer exists.
 */
bool
spindle_slots_full(SpindleDirectory *dir, int i, TimestampTz *filled_at)
{
	SpindleEntry *sp = &dir->spindles[i];

	*filled_at = 0;
	for (;;)
	{
		SlotEntry  *e;
		bool		full;

		if (!ensure_entry(dir, i))
			return false;
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
spindle_slots_used(Relation segrel, SpindleEntry *sp, bool *is_full,
				   TimestampTz *filled_at, Relation next_segrel)
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
		if (sp->capacity > 0 && used > sp->capacity)
			used = sp->capacity;
		/* the counter may be ahead of what is on disk: show what is there */
		if (!*is_full)
			used = Min(used, count_slots(segrel));
		return used;
	}
	used = count_slots(segrel);
	*is_full = (sp->capacity > 0 && used >= sp->capacity) ||
		(next_segrel != NULL && RelationGetNumberOfBlocks(next_segrel) > 0);
	return used;
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
