/*-------------------------------------------------------------------------
 *
 * cache.h
 *	  The event cache: recently enqueued events of queue tables, in shared
 *	  memory, for consumers close behind producers (cache.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_CACHE_H
#define SPINDLE_CACHE_H

#include "access/htup.h"
#include "datatype/timestamp.h"
#include "storage/itemptr.h"
#include "utils/rel.h"

/* GUCs (server start) */
extern int	spindle_cache_size;
extern int	spindle_cache_tables;
extern int	spindle_cache_payload_size;

/* What a lookup found for one msg_id. */
typedef struct SpindleCachedEvent
{
	bool		found;
	Oid			segment;		/* the spindle's relation */
	ItemPointerData ptid;		/* where its tuple is */
	TransactionId xmin;			/* the inserting (sub)transaction */
	TimestampTz enqueued_at;
	struct varlena *payload;	/* a palloc'd copy, or NULL: read the page */
} SpindleCachedEvent;

extern void spindle_cache_define_gucs(void);
extern Size spindle_cache_shmem_size(void);
extern void spindle_cache_shmem_request(void);
extern void spindle_cache_shmem_startup(void);

/* producers (store_events in facade_am.c) */
/*
 * Where event k of spindle spindle_no, of capacity capacity (effective:
 * spindle_effective_capacity), goes in its table's ring of entries.
 */
static inline uint64
spindle_cache_ring_pos(int64 spindle_no, int64 capacity, int64 k)
{
	return (uint64) spindle_no * (uint64) capacity + (uint64) k;
}

extern void spindle_cache_put(Relation facade, Oid segment, int64 spindle_no,
							  int64 capacity, int64 k0, int n,
							  ItemPointer ptids, HeapTuple *tuples);

/* consumers (queue.c) */
extern int	spindle_cache_find(Oid relid);
extern void spindle_cache_lookup(int slot, Oid relid, const int64 *msg_ids,
								 const uint64 *pos, int n,
								 SpindleCachedEvent *out);
extern void spindle_cache_forget(int slot, Oid relid, const int64 *msg_ids,
								 const uint64 *pos, int n);

/* the table is dropped or truncated */
extern void spindle_cache_reset(Oid relid);
extern void spindle_cache_forget_database(Oid dboid);

#endif							/* SPINDLE_CACHE_H */
