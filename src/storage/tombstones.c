/*-------------------------------------------------------------------------
 *
 * tombstones.c
 *	  Lost slots written into the slot map as tombstones, so that the slot
 *	  counter that lost them can be evicted again.
 *
 * A reservation (slots.c) takes slots [n, n + got) of a spindle, then its
 * insert places the tuples and writes their slot map entries, then raises
 * the counter's `placed` and ends the reservation.  If the insert fails in
 * between ("row is too big" after the slot was taken, a full disk, a
 * serialization failure), the slots are lost: handed out, never placed.
 * Rebuilt from disk, the counter would hand them out again, though a
 * consumer may have passed them as gone already, so such a counter was
 * not evictable, and enough of them (spindle.max_open_spindles, any table
 * owner can make them on purpose) made every insert of the server fail
 * with "out of spindle slot counters" (review r2, finding 2).
 *
 * The spindle worker therefore, once a round, lists the counters of its
 * database with lost slots (spindle_slots_list_lost: no reservation in
 * flight, placed below used) and buries each: a tombstone goes into every
 * still-empty map entry of [placed, used) (spindle_slotmap_bury, WAL-logged
 * as an ordinary XLOG_SPINDLE_MAP_SET: crash recovery and standbys replay
 * it like any entry), then placed is raised to used.  A count from disk
 * now sees those slots as used (spindle_slotmap_last_used counts
 * tombstones), so it gives the counter's value back and the counter can
 * go (evictable), that of a full spindle too; every reader of the map
 * takes a tombstone for no event (spindle_slotmap_get), and the queue
 * layer's head walk passes it as gone, as it would an empty entry with no
 * reservation in flight.
 *
 * Why a tombstone never hides an event.  The range [from, to) is read
 * under an exclusive SlotsLock with the counter's inflight at zero
 * (spindle_slots_lost_range).  A reservation raises inflight and takes its
 * slots (the fetch-and-add on used) under the shared lock, so under the
 * exclusive one none is half-way: every reservation with a slot below `to`
 * has ended.  One that ended by placing its tuples raised placed past its
 * slots first, so every slot in [from, to) belongs to a reservation that
 * ended without placing: its transaction (or subtransaction) aborted, and
 * release_unplaced gave the in-flight count back.  Nothing will ever write
 * those entries again (later reservations take slots at or above used,
 * and a counter rebuilt from disk, with the tombstones or without, starts
 * above them), and an entry that such an insert did write before failing
 * (its tuple is dead) is kept as it is.  While it writes, the burier holds
 * RowExclusiveLock on the table and on the spindle, as an inserter does,
 * taken only if they can be had at once: nothing that forgets the counter
 * or moves the spindle's range (DROP, TRUNCATE, a capacity change, VACUUM
 * FULL's copy, the map's truncation) runs meanwhile, and the counter found
 * after locking is checked to be the listed one, so the tombstones land in
 * the spindle's own range.  No LWLock is held across the map writes.
 *
 * A crash before the tombstones are flushed loses nothing new: every
 * counter is rebuilt from disk after a crash anyway.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xlog.h"
#include "storage/lmgr.h"
#include "utils/rel.h"

#include "storage/spindle_storage.h"


/*
 * Open relation relid under a RowExclusiveLock taken only if it can be at
 * once; NULL if it cannot, or the relation is gone.
 */
static Relation
open_without_waiting(Oid relid)
{
	Relation	rel;

	if (!ConditionalLockRelationOid(relid, RowExclusiveLock))
		return NULL;
	rel = try_relation_open(relid, NoLock);
	if (rel == NULL)
		UnlockRelationOid(relid, RowExclusiveLock);
	return rel;
}

/*
 * Bury the lost slots of spindle l (listed by spindle_slots_list_lost):
 * returns how many tombstones it wrote, 0 if the table or spindle is
 * busy, gone, or has nothing lost any more.  Call in a transaction, with
 * no LWLock held; the relation locks are kept to its end.  Never in
 * recovery.
 */
int64
spindle_bury_lost_slots(const SpindleLostSlots *l)
{
	Relation	facade;
	Relation	seg;
	int64		from;
	int64		to;
	int64		buried = 0;

	if (RecoveryInProgress())
		return 0;
	facade = open_without_waiting(l->facade);
	if (facade == NULL)
		return 0;
	seg = open_without_waiting(l->segment);
	if (seg == NULL)
	{
		relation_close(facade, NoLock);
		return 0;
	}
	/* the counter found under our locks is the listed one (header) */
	if (spindle_slots_lost_range(l, &from, &to))
	{
		buried = spindle_slotmap_bury(facade, l->vbase + from, to - from);
		spindle_slots_buried(l, to);
		elog(DEBUG1, "spindle: buried %lld lost slots (%lld..%lld) of spindle %lld of \"%s\"",
			 (long long) buried, (long long) from, (long long) (to - 1),
			 (long long) l->spindle_no, RelationGetRelationName(facade));
	}
	relation_close(seg, NoLock);
	relation_close(facade, NoLock);
	return buried;
}
