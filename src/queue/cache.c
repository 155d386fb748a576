/*-------------------------------------------------------------------------
 *
 * cache.c
 *	  The event cache: the most recently enqueued events of queue tables,
 *	  in shared memory sized at server start, so that consumers close
 *	  behind producers find where an event is (and its payload) without the
 *	  slot map, and deliver it without copying and deforming its tuple.
 *
 * Layout.  spindle.cache_tables table slots, each with spindle.cache_size
 * entries of a fixed size: an event's msg_id, its spindle's relation, its
 * physical TID, the inserting xid, enqueued_at, and its payload when the
 * payload (as the producer formed it, before TOAST) is at most
 * spindle.cache_payload_size bytes.  A larger payload, or one that is
 * already out of line, is not copied: its entry holds the location only and
 * the consumer reads the payload from the page.  So memory is fixed at
 * start: cache_tables x cache_size x entry size (the view
 * spindle.cache_stats reports it), whatever the payloads.  Entries are
 * direct-mapped: msg_id m goes to entry m mod cache_size.  msg_ids are
 * event numbers, consecutive within a spindle and from one spindle to the
 * next, so a table's events fill consecutive entries like a ring, and a
 * newer event overwrites the one cache_size events older (an eviction if
 * no consumer took it first).
 *
 * A queue table takes a slot at its first enqueue while one is free, or
 * the slot least recently used if that one was idle for a minute; else it
 * is not cached.  A slot is freed when its table is dropped or truncated
 * (spindle_cache_reset) or its database dropped
 * (spindle_cache_forget_database), and is cleared when it is taken again.
 *
 * What the cache promises is only "msg_id m was placed at (segment, ptid)
 * by xmin with this payload": an event's payload, enqueued_at and place
 * never change once it is stored (an UPDATE makes a new event with a new
 * msg_id, and an event's slot is never reused).  Compaction moves an
 * event to an annex copy, which is never cached: a consumer resolves the
 * msg_id through the relocation entries first and uses a cached place
 * only if resolution ended at that copy, forgetting the entry otherwise
 * (queue.c, locate and cache_done).  It never decides whether
 * an event is deliverable: the consumer still examines the tuple on its
 * page under the buffer lock (xmin committed, no xmax, no lock, due), as
 * without the cache, and checks that the tuple there is event k of that
 * spindle inserted by xmin; the directory must still hold the spindle with
 * that relation.  So a producer that aborts, a DELETE, purge_expired, a
 * claim, a lease, a dropped spindle or a rolled-back TRUNCATE can at worst
 * leave an entry that is ignored: results are the same with the cache on
 * and off (spindle.cache_size = 0).
 *
 * Only tables that consumers can open are cached: queue tables (the
 * queue layer's hook calls spindle_cache_put for those alone) with a timestamptz enqueued_at and a jsonb
 * payload as columns 2 and 4.
 *
 * Locks: the assignment lock (tranche "spindle_cache", exclusive) to take
 * or free a table slot; each slot's own LWLock (tranche
 * "spindle_cache_table"), shared to look entries up, exclusive to add or
 * forget them or to clear the slot.  The assignment lock is taken before a
 * slot's lock, never after; nothing else is locked while either is held,
 * and no buffer lock is held when one is acquired.  Counters are atomics,
 * added once per call (a batch), not per event.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type_d.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "queue/spindle_queue.h"

PG_FUNCTION_INFO_V1(spindle_cache_stats);

int			spindle_cache_size = 10000;
int			spindle_cache_tables = 4;
int			spindle_cache_payload_size = 256;

/* a table slot unused this long may be taken by another table */
#define CACHE_STEAL_AFTER_USECS (60 * USECS_PER_SEC)

typedef struct CacheEntry
{
	int64		msg_id;			/* 0: empty (msg_ids start at 1) */
	TimestampTz enqueued_at;
	TransactionId xmin;
	Oid			segment;
	ItemPointerData ptid;
	int32		len;			/* payload bytes, -1: not cached */
	char		payload[FLEXIBLE_ARRAY_MEMBER];
} CacheEntry;

typedef struct CacheTable
{
	Oid			dbid;			/* both invalid: free */
	Oid			relid;
	int			entries;		/* occupied entries, under the slot lock */
	pg_atomic_uint64 last_used; /* a timestamp */
	pg_atomic_uint64 hits;
	pg_atomic_uint64 misses;
	pg_atomic_uint64 evictions;
} CacheTable;

typedef struct CacheShared
{
	LWLock	   *assign_lock;
	LWLockPadded *table_locks;
	CacheTable	tables[FLEXIBLE_ARRAY_MEMBER];
} CacheShared;

static CacheShared *cshared = NULL;
static char *centries = NULL;	/* tables x size entries */

static Size
entry_size(void)
{
	return MAXALIGN(offsetof(CacheEntry, payload) + spindle_cache_payload_size);
}

static Size
table_bytes(void)
{
	return mul_size(spindle_cache_size, entry_size());
}

static bool
cache_enabled(void)
{
	return cshared != NULL && spindle_cache_size > 0;
}

void
spindle_cache_define_gucs(void)
{
	DefineCustomIntVariable("spindle.cache_size",
							"Events the event cache holds for each queue table.",
							"0 turns the cache off.",
							&spindle_cache_size,
							10000, 0, 1000 * 1000,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("spindle.cache_tables",
							"Number of queue tables the event cache holds at once.",
							NULL,
							&spindle_cache_tables,
							4, 1, 1024,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("spindle.cache_payload_size",
							"Largest payload the event cache copies.",
							"Events with larger payloads are cached by location only; their payload is read from the table.",
							&spindle_cache_payload_size,
							256, 0, 8192,
							PGC_POSTMASTER, GUC_UNIT_BYTE,
							NULL, NULL, NULL);
}

Size
spindle_cache_shmem_size(void)
{
	Size		size;

	if (spindle_cache_size <= 0)
		return 0;
	size = MAXALIGN(add_size(offsetof(CacheShared, tables),
							 mul_size(spindle_cache_tables, sizeof(CacheTable))));
	size = add_size(size, mul_size(spindle_cache_tables, table_bytes()));
	return size;
}

void
spindle_cache_shmem_request(void)
{
	if (spindle_cache_size <= 0)
		return;
	RequestAddinShmemSpace(spindle_cache_shmem_size());
	RequestNamedLWLockTranche("spindle_cache", 1);
	RequestNamedLWLockTranche("spindle_cache_table", spindle_cache_tables);
}

/* Called from the shmem_startup_hook, with AddinShmemInitLock held. */
void
spindle_cache_shmem_startup(void)
{
	bool		found;
	int			i;

	if (spindle_cache_size <= 0)
		return;
	cshared = ShmemInitStruct("spindle event cache", spindle_cache_shmem_size(),
							  &found);
	centries = (char *) cshared +
		MAXALIGN(offsetof(CacheShared, tables) +
				 spindle_cache_tables * sizeof(CacheTable));
	if (found)
		return;
	cshared->assign_lock = &(GetNamedLWLockTranche("spindle_cache"))[0].lock;
	cshared->table_locks = GetNamedLWLockTranche("spindle_cache_table");
	for (i = 0; i < spindle_cache_tables; i++)
	{
		CacheTable *t = &cshared->tables[i];

		t->dbid = InvalidOid;
		t->relid = InvalidOid;
		t->entries = 0;
		pg_atomic_init_u64(&t->last_used, 0);
		pg_atomic_init_u64(&t->hits, 0);
		pg_atomic_init_u64(&t->misses, 0);
		pg_atomic_init_u64(&t->evictions, 0);
	}
	/* every entry empty */
	memset(centries, 0, mul_size(spindle_cache_tables, table_bytes()));
}

static inline LWLock *
table_lock(int slot)
{
	return &cshared->table_locks[slot].lock;
}

/* The entry of the event msg_id. */
static inline CacheEntry *
entry_at(int slot, int64 msg_id)
{
	uint64		idx = (uint64) msg_id % (uint64) spindle_cache_size;

	return (CacheEntry *) (centries + slot * table_bytes() + idx * entry_size());
}

/*
 * The slot of table relid of this database, or -1.  Read without a lock:
 * every use checks again under the slot's lock.
 */
int
spindle_cache_find(Oid relid)
{
	int			i;

	if (!cache_enabled())
		return -1;
	for (i = 0; i < spindle_cache_tables; i++)
	{
		CacheTable *t = &cshared->tables[i];

		if (t->relid == relid && t->dbid == MyDatabaseId)
			return i;
	}
	return -1;
}

static inline bool
slot_is(int slot, Oid relid)
{
	CacheTable *t = &cshared->tables[slot];

	return t->relid == relid && t->dbid == MyDatabaseId;
}

/* Take a slot for relid: a free one, else one idle for a minute; or -1. */
static int
take_slot(Oid relid)
{
	TimestampTz now = GetCurrentTimestamp();
	int			slot = -1;
	uint64		oldest = PG_UINT64_MAX;
	int			i;

	LWLockAcquire(cshared->assign_lock, LW_EXCLUSIVE);
	for (i = 0; i < spindle_cache_tables; i++)
	{
		CacheTable *t = &cshared->tables[i];
		uint64		used = pg_atomic_read_u64(&t->last_used);

		if (t->relid == relid && t->dbid == MyDatabaseId)
		{
			LWLockRelease(cshared->assign_lock);
			return i;			/* taken meanwhile */
		}
		if (!OidIsValid(t->relid))
		{
			if (slot < 0 || OidIsValid(cshared->tables[slot].relid))
				slot = i;
			oldest = 0;
		}
		else if (used < oldest &&
				 (int64) used + CACHE_STEAL_AFTER_USECS < now)
		{
			slot = i;
			oldest = used;
		}
	}
	if (slot >= 0)
	{
		CacheTable *t = &cshared->tables[slot];

		LWLockAcquire(table_lock(slot), LW_EXCLUSIVE);
		memset(centries + slot * table_bytes(), 0, table_bytes());
		t->dbid = MyDatabaseId;
		t->relid = relid;
		t->entries = 0;
		pg_atomic_write_u64(&t->last_used, (uint64) now);
		pg_atomic_write_u64(&t->hits, 0);
		pg_atomic_write_u64(&t->misses, 0);
		pg_atomic_write_u64(&t->evictions, 0);
		LWLockRelease(table_lock(slot));
	}
	LWLockRelease(cshared->assign_lock);
	return slot;
}

/*
 * Record n events just stored into queue table facade: msg_ids
 * msg_id0 .. msg_id0 + n - 1 at ptids[] of segment, formed as tuples[]
 * (before TOAST), inserted by the current (sub)transaction.
 */
void
spindle_cache_put(Relation facade, Oid segment, int64 msg_id0, int n,
				  ItemPointer ptids, HeapTuple *tuples)
{
	Oid			relid = RelationGetRelid(facade);
	TupleDesc	td = RelationGetDescr(facade);
	TransactionId xmin;
	int			slot;
	int			evicted = 0;
	int			j;

	/* the caller passes queue tables only (queue_api.c, queue_placed) */
	if (!cache_enabled() || n <= 0)
		return;
	/* only a table that consumers can open (queue.c's open_queue) */
	if (td->natts < SPINDLE_QUEUE_ATT_PAYLOAD ||
		TupleDescAttr(td, SPINDLE_QUEUE_ATT_ENQUEUED_AT - 1)->atttypid != TIMESTAMPTZOID ||
		TupleDescAttr(td, SPINDLE_QUEUE_ATT_PAYLOAD - 1)->atttypid != JSONBOID)
		return;
	slot = spindle_cache_find(relid);
	if (slot < 0 && (slot = take_slot(relid)) < 0)
		return;
	xmin = GetCurrentTransactionId();

	LWLockAcquire(table_lock(slot), LW_EXCLUSIVE);
	if (!slot_is(slot, relid))
	{
		LWLockRelease(table_lock(slot));
		return;					/* reset meanwhile */
	}
	for (j = 0; j < n; j++)
	{
		int64		msg_id = msg_id0 + j;
		CacheEntry *e = entry_at(slot, msg_id);
		bool		isnull;
		Datum		d;

		if (e->msg_id == 0)
			cshared->tables[slot].entries++;
		else if (e->msg_id != msg_id)
			evicted++;
		e->msg_id = msg_id;
		e->segment = segment;
		e->ptid = ptids[j];
		e->xmin = xmin;
		d = heap_getattr(tuples[j], SPINDLE_QUEUE_ATT_ENQUEUED_AT, td, &isnull);
		e->enqueued_at = isnull ? DT_NOBEGIN : DatumGetTimestampTz(d);
		d = heap_getattr(tuples[j], SPINDLE_QUEUE_ATT_PAYLOAD, td, &isnull);
		e->len = -1;
		if (!isnull && !VARATT_IS_EXTERNAL(DatumGetPointer(d)) &&
			!VARATT_IS_COMPRESSED(DatumGetPointer(d)) &&
			VARSIZE_ANY(DatumGetPointer(d)) <= (Size) spindle_cache_payload_size)
		{
			e->len = (int32) VARSIZE_ANY(DatumGetPointer(d));
			memcpy(e->payload, DatumGetPointer(d), e->len);
		}
	}
	LWLockRelease(table_lock(slot));
	pg_atomic_write_u64(&cshared->tables[slot].last_used,
						(uint64) GetCurrentTimestamp());
	if (evicted > 0)
		pg_atomic_fetch_add_u64(&cshared->tables[slot].evictions, evicted);
}

/*
 * Look up n msg_ids of table relid in slot; fills out[] (payloads
 * palloc'd in the current context) and counts hits and misses.
 */
void
spindle_cache_lookup(int slot, Oid relid, const int64 *msg_ids, int n,
					 SpindleCachedEvent *out)
{
	CacheTable *t;
	int			hits = 0;
	int			j;

	for (j = 0; j < n; j++)
		out[j].found = false;
	if (slot < 0 || !cache_enabled() || n <= 0)
		return;
	t = &cshared->tables[slot];
	LWLockAcquire(table_lock(slot), LW_SHARED);
	if (!slot_is(slot, relid))
	{
		LWLockRelease(table_lock(slot));
		return;
	}
	for (j = 0; j < n; j++)
	{
		CacheEntry *e = entry_at(slot, msg_ids[j]);

		if (e->msg_id != msg_ids[j])
			continue;
		out[j].found = true;
		out[j].segment = e->segment;
		out[j].ptid = e->ptid;
		out[j].xmin = e->xmin;
		out[j].enqueued_at = e->enqueued_at;
		out[j].payload = NULL;
		if (e->len >= 0)
		{
			out[j].payload = palloc(e->len);
			memcpy(out[j].payload, e->payload, e->len);
		}
		hits++;
	}
	LWLockRelease(table_lock(slot));
	pg_atomic_write_u64(&t->last_used, (uint64) GetCurrentTimestamp());
	if (hits > 0)
		pg_atomic_fetch_add_u64(&t->hits, hits);
	if (n - hits > 0)
		pg_atomic_fetch_add_u64(&t->misses, n - hits);
}

/* Forget n msg_ids of table relid in slot: consumed, or found gone. */
void
spindle_cache_forget(int slot, Oid relid, const int64 *msg_ids, int n)
{
	int			j;

	if (slot < 0 || !cache_enabled() || n <= 0)
		return;
	LWLockAcquire(table_lock(slot), LW_EXCLUSIVE);
	if (slot_is(slot, relid))
	{
		for (j = 0; j < n; j++)
		{
			CacheEntry *e = entry_at(slot, msg_ids[j]);

			if (e->msg_id == msg_ids[j])
			{
				e->msg_id = 0;
				cshared->tables[slot].entries--;
			}
		}
	}
	LWLockRelease(table_lock(slot));
}

/*
 * Free the table slots of database dbid holding relid, or holding any
 * table with relid InvalidOid.  Takes the assignment lock, then each
 * slot's lock.
 */
static void
free_slots(Oid dbid, Oid relid)
{
	int			i;

	if (!cache_enabled())
		return;
	LWLockAcquire(cshared->assign_lock, LW_EXCLUSIVE);
	for (i = 0; i < spindle_cache_tables; i++)
	{
		CacheTable *t = &cshared->tables[i];

		if (t->dbid != dbid || !OidIsValid(t->relid) ||
			(OidIsValid(relid) && t->relid != relid))
			continue;
		LWLockAcquire(table_lock(i), LW_EXCLUSIVE);
		t->relid = InvalidOid;
		t->dbid = InvalidOid;
		t->entries = 0;
		LWLockRelease(table_lock(i));
	}
	LWLockRelease(cshared->assign_lock);
}

/*
 * Table relid of this database is dropped or truncated (maybe by a
 * transaction that rolls back, which costs only misses): free its slot.
 */
void
spindle_cache_reset(Oid relid)
{
	if (OidIsValid(relid))
		free_slots(MyDatabaseId, relid);
}

/*
 * Database dboid was dropped (nobody is connected to it): free its slots.
 * A database created later with the same OID, from a template that holds
 * a queue, has that queue's relation OID, msg_ids and spindle OIDs, but
 * not the dropped database's pages.
 */
void
spindle_cache_forget_database(Oid dboid)
{
	free_slots(dboid, InvalidOid);
}

/*
 * spindle._cache_stats() RETURNS TABLE (relid oid, capacity bigint,
 *     entries bigint, hits bigint, misses bigint, evictions bigint,
 *     memory_bytes bigint)
 *
 * The table slots of this database whose table the caller may SELECT
 * from (checked by OID, no table lock: anyone may call this function, as
 * the view spindle.cache_stats does).
 */
Datum
spindle_cache_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	if (!cache_enabled())
		return (Datum) 0;
	for (i = 0; i < spindle_cache_tables; i++)
	{
		CacheTable *t = &cshared->tables[i];
		Datum		values[7];
		bool		nulls[7] = {false};
		Oid			relid;
		int			entries;
		bool		is_missing = false;

		LWLockAcquire(table_lock(i), LW_SHARED);
		relid = t->relid;
		entries = t->entries;
		if (t->dbid != MyDatabaseId)
			relid = InvalidOid;
		LWLockRelease(table_lock(i));
		if (!OidIsValid(relid))
			continue;
		if (pg_class_aclcheck_ext(relid, GetUserId(), ACL_SELECT,
								  &is_missing) != ACLCHECK_OK || is_missing)
			continue;
		values[0] = ObjectIdGetDatum(relid);
		values[1] = Int64GetDatum(spindle_cache_size);
		values[2] = Int64GetDatum(entries);
		values[3] = Int64GetDatum((int64) pg_atomic_read_u64(&t->hits));
		values[4] = Int64GetDatum((int64) pg_atomic_read_u64(&t->misses));
		values[5] = Int64GetDatum((int64) pg_atomic_read_u64(&t->evictions));
		values[6] = Int64GetDatum((int64) table_bytes());
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
