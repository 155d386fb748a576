/*-------------------------------------------------------------------------
 *
 * facade_am.c
 *	  The "spindle" table access method: row operations and storage.
 *
 * A spindle table stores nothing itself but its slot map (slotmap.c).
 * Each operation finds the spindle an event lives in, or the open spindle
 * for a new event, and hands the work to heapam on that spindle's relation,
 * translating TIDs between the spindle's physical ones and the facade's
 * virtual ones on the way in and out: virtual to physical through the slot
 * map, physical to virtual through the event's hidden k (layout.c).  Scans
 * are in facade_scan.c.
 *
 * Locks: the executor holds the usual lock on the facade.  Each spindle is
 * opened with the same strength (RowExclusiveLock to write, AccessShareLock
 * or RowShareLock to read).  A spindle is only dropped by someone who
 * obtained AccessExclusiveLock on it without waiting, and only once every
 * event in it is dead to every snapshot, so anything a transaction can
 * still see, or has written, keeps its spindle; the lock need only cover
 * the time this backend holds pins on the spindle's pages.  So reads and
 * row locks release their spindle's lock when they return, index fetches
 * when they move to another spindle, and writers keep theirs to the end of
 * the transaction only for the first few spindles they write in
 * (close_written_spindle): a spindle a running transaction wrote in is
 * busy, hence never dropped, lock or not.  A plan, a scan or a DELETE over
 * the whole table holds a few spindle locks, not one per spindle, so the
 * shared lock table bounds no table's number of spindles.
 *
 * UPDATE purges the old version (heap_delete with changingPart, which marks
 * it "moved") and appends the new one to the open spindle.  There is no
 * update chain to follow across relations, so a concurrent UPDATE, DELETE
 * or row lock (SELECT FOR UPDATE/SHARE, FOR KEY SHARE, foreign key checks)
 * meeting the old version fails with SQLSTATE 40001 (facade_tuple_lock
 * says why).  Within the transaction that made them, the versions are
 * chained in memory instead (see "Versions this transaction's UPDATEs
 * wrote" below), so that WHERE CURRENT OF reaches the newest one, as heap's
 * update chain does.
 *
 * Backend-local state: the transaction's chain of versions (a hash table
 * in TopTransactionContext, emptied at the end of each transaction and of
 * the subtransactions that abort), the spindles whose write lock the
 * transaction keeps, the BulkInsertState's spindle.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/heapam.h"
#include "access/heaptoast.h"
#include "access/multixact.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xloginsert.h"
#include "catalog/catalog.h"
#include "catalog/pg_am_d.h"
#include "catalog/storage.h"
#include "catalog/storage_xlog.h"
#include "miscadmin.h"
#include "access/relation.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "storage/predicate.h"
#include "storage/smgr.h"
#include "optimizer/plancat.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "table/spindle_table.h"


static TableAmRoutine facade_methods;
static const TableAmRoutine *heap_methods;

/* the BulkInsertState whose pinned buffer belongs to this spindle */
static BulkInsertState last_bistate = NULL;
static Oid	last_bistate_segment = InvalidOid;

/* the last spindle for which this backend woke the worker */
static Oid	last_nudged_segment = InvalidOid;

/*
 * The spindles whose write lock this transaction keeps to its end (see
 * close_written_spindle), and the transaction they belong to.
 */
#define SPINDLE_KEPT_WRITE_LOCKS 16
static Oid	kept_segments[SPINDLE_KEPT_WRITE_LOCKS];
static int	nkept_segments = 0;
static LocalTransactionId kept_lxid = InvalidLocalTransactionId;

/*
 * Tables this transaction's TRUNCATE gave new storage that went on from
 * where the old one was (it never gave a number to an event:
 * truncate_unused_from), with the first number of the old one's first
 * spindle, for spindle_truncated to number the new open spindle alike.
 */
#define SPINDLE_UNTOUCHED_TRUNCATES 8
static Oid	untouched_relids[SPINDLE_UNTOUCHED_TRUNCATES];
static int64 untouched_first_nos[SPINDLE_UNTOUCHED_TRUNCATES];
static int	nuntouched = 0;
static LocalTransactionId untouched_lxid = InvalidLocalTransactionId;

/* ----------------------------------------------------------------
 * Versions this transaction's UPDATEs wrote
 *
 * heap finds the newest version of a row by following t_ctid from the old
 * one (table_tuple_get_latest_tid, used by WHERE CURRENT OF).  A spindle
 * table's UPDATE writes its new version into another relation and marks
 * the old one "moved", which links to nothing.  So each UPDATE of this
 * transaction remembers here the virtual TID it replaced and the one it
 * wrote, with the subtransaction that did it; the entries of a
 * subtransaction that aborts go (its versions are dead again, the ones it
 * replaced alive), and all go at the end of the transaction.  Versions
 * other transactions wrote cannot be followed, as on heap for a row moved
 * to another partition.  A virtual TID keeps its meaning to the end of the
 * transaction: a spindle the transaction wrote in is never dropped before
 * it ends, and TRUNCATE, which drops them all, forgets the table's entries.
 * The table takes at most work_mem (at UPDATE_ENTRY_BYTES a row); past
 * that, updates are no longer remembered, and following one of them
 * raises an error rather than silently finding no row.
 * ----------------------------------------------------------------
 */
typedef struct UpdatedKey
{
	Oid			relid;			/* the spindle table */
	ItemPointerData old;		/* virtual TID of the version replaced */
} UpdatedKey;

typedef struct UpdatedVersion
{
	UpdatedKey	key;
	ItemPointerData newer;		/* virtual TID of the version written */
	SubTransactionId subid;		/* the subtransaction that wrote it */
} UpdatedVersion;

#define UPDATE_ENTRY_BYTES 64

static HTAB *updated_versions = NULL;	/* in TopTransactionContext */
static bool updated_overflowed = false; /* an update was not remembered */
static bool updated_callbacks = false;

static void
updated_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			/* its memory goes with TopTransactionContext */
			updated_versions = NULL;
			updated_overflowed = false;
			break;
		default:
			break;
	}
}

/* A subtransaction aborts: forget what it and its children updated. */
static void
updated_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						 SubTransactionId parentSubid, void *arg)
{
	HASH_SEQ_STATUS status;
	UpdatedVersion *e;

	if (event != SUBXACT_EVENT_ABORT_SUB || updated_versions == NULL)
		return;
	/* subtransactions begun after it are its children, all ended now */
	hash_seq_init(&status, updated_versions);
	while ((e = hash_seq_search(&status)) != NULL)
		if (e->subid >= mySubid)
			(void) hash_search(updated_versions, &e->key, HASH_REMOVE, NULL);
}

static void
updated_key(UpdatedKey *key, Relation rel, ItemPointer tid)
{
	memset(key, 0, sizeof(UpdatedKey));
	key->relid = RelationGetRelid(rel);
	key->old = *tid;
}

/* The UPDATE of the current subtransaction replaced old by newer. */
static void
remember_update(Relation rel, ItemPointer old, ItemPointer newer)
{
	UpdatedKey	key;
	UpdatedVersion *e;

	if (!updated_callbacks)
	{
		RegisterXactCallback(updated_xact_callback, NULL);
		RegisterSubXactCallback(updated_subxact_callback, NULL);
		updated_callbacks = true;
	}
	if (updated_versions == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(UpdatedKey);
		ctl.entrysize = sizeof(UpdatedVersion);
		ctl.hcxt = TopTransactionContext;
		updated_versions = hash_create("spindle updated versions", 256, &ctl,
									   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	if (hash_get_num_entries(updated_versions) >=
		(long) work_mem * 1024L / UPDATE_ENTRY_BYTES)
	{
		updated_overflowed = true;
		return;
	}
	updated_key(&key, rel, old);
	e = hash_search(updated_versions, &key, HASH_ENTER, NULL);
	e->newer = *newer;
	e->subid = GetCurrentSubTransactionId();
}

/* TRUNCATE: the table's virtual TIDs may be given to new events. */
static void
forget_updates(Relation rel)
{
	HASH_SEQ_STATUS status;
	UpdatedVersion *e;

	if (updated_versions == NULL)
		return;
	hash_seq_init(&status, updated_versions);
	while ((e = hash_seq_search(&status)) != NULL)
		if (e->key.relid == RelationGetRelid(rel))
			(void) hash_search(updated_versions, &e->key, HASH_REMOVE, NULL);
}

/*
 * Close a spindle that a row operation wrote in (inserted, deleted,
 * finished a speculative insert).  The first SPINDLE_KEPT_WRITE_LOCKS
 * spindles a transaction writes in keep their lock to its end, as heap
 * tables do: a writer's lock tells anyone who takes the spindle's lock
 * without waiting that no transaction has unfinished work in it (the
 * purge counters, counters.c, build an exact count from disk that way).
 * Beyond that the lock goes now, so that a statement reaching every
 * spindle of a table holds a bounded number of locks (see the header);
 * the counters of spindles whose lock went are counted from disk again
 * after the transaction (counters.c, "inexact").
 */
static void
close_written_spindle(Relation seg, LOCKMODE lockmode)
{
	Oid			relid = RelationGetRelid(seg);
	int			i;

	if (kept_lxid != MyProc->lxid)
	{
		kept_lxid = MyProc->lxid;
		nkept_segments = 0;
	}
	for (i = 0; i < nkept_segments; i++)
	{
		if (kept_segments[i] == relid)
		{
			relation_close(seg, NoLock);
			return;
		}
	}
	if (nkept_segments < SPINDLE_KEPT_WRITE_LOCKS)
	{
		kept_segments[nkept_segments++] = relid;
		relation_close(seg, NoLock);
		return;
	}
	relation_close(seg, lockmode);
}

/*
 * Give a slot that holds a tuple of a spindle the identity of the facade:
 * its virtual TID and the facade's OID, in the slot and in the heap tuple
 * it may carry.  A tuple the slot does not own (a scan's current tuple) is
 * not modified: its header is copied into the slot first.
 */
void
spindle_slot_set_identity(TupleTableSlot *slot, Relation facade,
						  ItemPointer vtid)
{
	slot->tts_tid = *vtid;
	slot->tts_tableOid = RelationGetRelid(facade);
	if (TTS_IS_BUFFERTUPLE(slot) || TTS_IS_HEAPTUPLE(slot))
	{
		HeapTupleTableSlot *hslot = (HeapTupleTableSlot *) slot;

		if (hslot->tuple != NULL && !TTS_EMPTY(slot))
		{
			if (hslot->tuple != &hslot->tupdata && !TTS_SHOULDFREE(slot))
			{
				hslot->tupdata = *hslot->tuple;
				hslot->tuple = &hslot->tupdata;
			}
			hslot->tuple->t_self = *vtid;
			hslot->tuple->t_tableOid = RelationGetRelid(facade);
		}
	}
}

/*
 * Open the relation of spindle sp with the given lock; NULL if it was
 * dropped.  Checks that the relation is the one the directory meant (its
 * OID could have been reused since a stale directory was read).
 */
Relation
spindle_open_segment(Relation facade, SpindleEntry *sp, LOCKMODE lockmode)
{
	Relation	seg = try_relation_open(sp->segment, lockmode);
	char		name[NAMEDATALEN];

	if (seg == NULL)
		return NULL;
	snprintf(name, sizeof(name), "s%u_%lld", RelationGetRelid(facade),
			 (long long) sp->spindle_no);
	if (strcmp(RelationGetRelationName(seg), name) != 0)
	{
		relation_close(seg, lockmode);
		return NULL;
	}
	return seg;
}

/* The virtual TID of a tuple of spindle sp (from its hidden k). */
void
spindle_tuple_vtid(SpindleEntry *sp, HeapTuple tuple, ItemPointer vtid)
{
	int32		k = spindle_event_k(tuple->t_data, tuple->t_len);

	if (k < 0 || k >= sp->vcount)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("event (%u,%u) of spindle %lld has an invalid slot number %d",
						ItemPointerGetBlockNumber(&tuple->t_self),
						ItemPointerGetOffsetNumber(&tuple->t_self),
						(long long) sp->spindle_no, k)));
	spindle_vslot_to_tid(sp->vbase + k, vtid);
}

typedef enum VslotPending
{
	NOT_PENDING,				/* in no pending range */
	PENDING_RUNNING,			/* its creator may still commit */
	PENDING_ENDED				/* its creator ended: committed or not */
} VslotPending;

/* Is vslot in a pending range (see slotmap.c), and is its creator running? */
static VslotPending
vslot_pending(Relation facade, int64 vslot)
{
	SpindlePending pending[SPINDLE_MAX_PENDING];
	int			n = spindle_pending_read(facade, pending);
	int			i;

	for (i = 0; i < n; i++)
		if (vslot >= pending[i].vbase &&
			vslot < (int64) pending[i].vbase + pending[i].vcount)
			return spindle_pending_in_progress(&pending[i]) ?
				PENDING_RUNNING : PENDING_ENDED;
	return NOT_PENDING;
}

/*
 * Find the spindle and physical TID of virtual slot vslot with a pinned
 * directory: TID_IN_SPINDLE with *sp and *ptid set; TID_DEAD if nothing
 * can be there (the slot is empty, or its spindle is not in the
 * directory); never TID_UNKNOWN (see spindle_resolve_tid).
 */
TidResolution
spindle_resolve_vslot(Relation facade, SpindleDirectory *dir, int64 vslot,
					  SpindleEntry **sp, ItemPointer ptid)
{
	*sp = spindle_find_by_vslot(dir, vslot);
	if (*sp == NULL || !spindle_slotmap_get(facade, vslot, ptid))
		return TID_DEAD;
	return TID_IN_SPINDLE;
}

/*
 * Find the spindle and physical TID of a virtual TID.  Returns
 * TID_IN_SPINDLE with *sp (a copy) and *ptid set; TID_DEAD when nothing
 * can be there (its spindle was dropped, or never had that event);
 * TID_UNKNOWN when it is in the range of a spindle whose creating
 * transaction has not ended and that this backend cannot see: a producer
 * that had to create spindles in its own transaction has placed events
 * there that nobody else sees until it commits, and their index entries
 * must stay.
 */
TidResolution
spindle_resolve_tid(Relation facade, ItemPointer vtid, SpindleEntry *sp,
					ItemPointer ptid)
{
	int64		vslot = spindle_tid_to_vslot(vtid);
	SpindleDirectory *dir;
	SpindleEntry *found;

	VslotPending pending = NOT_PENDING;

	if (vslot < 0)
		return TID_DEAD;
	dir = spindle_directory_acquire(facade);
	found = spindle_find_by_vslot(dir, vslot);
	if (found == NULL)
	{
		/*
		 * Maybe a spindle created since the directory was read.  Look at
		 * the pending ranges first, then at the catalog: a creator that was
		 * running when we looked and commits now is found in the catalog.
		 * One that has just ended may not have sent its invalidation yet,
		 * and cleanup may have forgotten its pending range already (it
		 * forgets those of ended creators the catalog has): whether a
		 * spindle committed that the directory lacks, the next spindle
		 * number says (spindle_directory_acquire_current), not the pending
		 * ranges.  Saying TID_DEAD for it would have the index kill the
		 * entry of a live event.
		 */
		spindle_directory_release(dir);
		pending = vslot_pending(facade, vslot);
		if (pending == PENDING_ENDED)
			spindle_directory_forget(RelationGetRelid(facade));
		else
			AcceptInvalidationMessages();
		dir = spindle_directory_acquire_current(facade);
		found = spindle_find_by_vslot(dir, vslot);
	}
	if (found != NULL)
		*sp = *found;
	spindle_directory_release(dir);
	if (found == NULL)
		return pending == PENDING_RUNNING ? TID_UNKNOWN : TID_DEAD;
	if (!spindle_slotmap_get(facade, vslot, ptid))
		return TID_DEAD;
	return TID_IN_SPINDLE;
}

/*
 * Make sure new spindles exist for `need` more events.  Normally a helper
 * process creates them in its own committed transaction, so that producers
 * never wait for each other's DDL.  They are created here instead when
 * nobody else can see the facade yet, when this transaction holds a lock
 * the helper would wait for (ACCESS EXCLUSIVE on the table, or the
 * table's creation lock), or when the helper could not make them.
 */
static void
obtain_spindles(Relation facade, int64 need, int64 capacity,
				BulkInsertState bistate)
{
	int			count;
	int64		before;
	SpindleDirectory *dir;

	if (capacity <= 0)
		count = 1;
	else
		count = (int) Min((need + capacity - 1) / capacity, 64);
	count += 1;					/* and one ready ahead */

	/* never wait for anything while pinning a spindle page (VACUUM waits) */
	if (bistate != NULL)
		ReleaseBulkInsertStatePin(bistate);

	if (!spindle_created_here(facade) &&
		!CheckRelationLockedByMe(facade, AccessExclusiveLock, false) &&
		!spindle_creation_locked_by_me(RelationGetRelid(facade)))
	{
		dir = spindle_directory_acquire_tail(facade);
		before = dir->nspindles > 0 ?
			dir->spindles[dir->nspindles - 1].spindle_no : 0;
		spindle_directory_release(dir);
		if (spindle_request_spindles(facade, count))
		{
			bool		made;

			AcceptInvalidationMessages();
			dir = spindle_directory_acquire_tail(facade);
			made = dir->nspindles > 0 &&
				dir->spindles[dir->nspindles - 1].spindle_no > before;
			spindle_directory_release(dir);
			if (made)
				return;
		}
	}

	/*
	 * Create them in our own transaction.  Other producers needing a new
	 * spindle now wait for our commit; readers cannot see these spindles
	 * until then, and treat their index entries as alive meanwhile.
	 */
	spindle_create_spindles(facade, count, true);
	AcceptInvalidationMessages();
}

/* The hooks of the layers above (spindle_table.h); set by _PG_init. */
SpindleTableHooks spindle_table_hooks;

/*
 * Tell the layers above that n events were placed at ptids (queue tables:
 * the event cache keeps them for consumers).
 */
static inline void
events_placed(Relation facade, Relation seg, SpindleEntry *sp, int64 k0,
			  int n, ItemPointer ptids, HeapTuple *tuples)
{
	if (spindle_table_hooks.placed)
		spindle_table_hooks.placed(facade, RelationGetRelid(seg),
								   sp->first_no + k0, n, ptids, tuples);
}

/*
 * Store `n` events of spindle sp, numbered k0.., from slots[]: form each
 * tuple with its hidden columns (k and the append time, taken here), let
 * heap place them, record them in the slot map, and give each slot its
 * virtual TID.  A single event goes in with its map entry in one WAL
 * record (spindle_insert_event) unless that does not apply.  In a queue
 * table, column 1 of each slot first gets the event's msg_id, its event
 * number first_no + k.
 */
static void
store_events(Relation facade, Relation seg, SpindleEntry *sp,
			 TupleTableSlot **slots, int n, int64 k0,
			 CommandId cid, int options, BulkInsertState bistate,
			 bool speculative, uint32 specToken)
{
	ItemPointerData *ptids = palloc(sizeof(ItemPointerData) * n);
	/* stamped now, with the spindle open: never before its creation */
	uint32		now = spindle_time_now();
	bool		mapped = false;
	int			j;

	/* a queue table's events get their msg_id (queue layer) */
	if (spindle_table_hooks.assign_ids)
		spindle_table_hooks.assign_ids(facade, slots, n, sp->first_no + k0,
									   cid);

	if (n == 1)
	{
		HeapTuple	tuple = spindle_form_event(facade, slots[0], (int32) k0, now);

		tuple->t_tableOid = RelationGetRelid(seg);
		if (speculative)
		{
			HeapTupleHeaderSetSpeculativeToken(tuple->t_data, specToken);
			options |= HEAP_INSERT_SPECULATIVE;
		}
		/* the event and its map entry in one record, where it applies */
		if (!speculative &&
			spindle_insert_event(facade, seg, tuple, cid, options, bistate,
								 sp->vbase + k0))
			mapped = true;
		else
			heap_insert(seg, tuple, cid, options, bistate);
		ptids[0] = tuple->t_self;
		events_placed(facade, seg, sp, k0, 1, ptids, &tuple);
		heap_freetuple(tuple);
	}
	else
	{
		TupleTableSlot **hslots = palloc(sizeof(TupleTableSlot *) * n);
		HeapTuple  *tuples = palloc(sizeof(HeapTuple) * n);

		/* unpinned: pinning the relation's descriptor per slot costs */
		TupleDesc	desc = CreateTupleDescCopy(RelationGetDescr(facade));

		Assert(!speculative);
		for (j = 0; j < n; j++)
		{
			HeapTuple	tuple = spindle_form_event(facade, slots[j],
												   (int32) (k0 + j), now);

			hslots[j] = MakeSingleTupleTableSlot(desc, &TTSOpsHeapTuple);
			ExecStoreHeapTuple(tuple, hslots[j], true);
		}
		heap_multi_insert(seg, hslots, n, cid, options, bistate);
		for (j = 0; j < n; j++)
		{
			ptids[j] = hslots[j]->tts_tid;
			tuples[j] = ((HeapTupleTableSlot *) hslots[j])->tuple;
		}
		events_placed(facade, seg, sp, k0, n, ptids, tuples);
		for (j = 0; j < n; j++)
			ExecDropSingleTupleTableSlot(hslots[j]);
		FreeTupleDesc(desc);
		pfree(hslots);
		pfree(tuples);
	}

	if (!mapped)
		spindle_slotmap_set(facade, sp->vbase + k0, n, ptids);
	for (j = 0; j < n; j++)
	{
		ItemPointerData vtid;

		spindle_vslot_to_tid(sp->vbase + k0 + j, &vtid);
		spindle_slot_set_identity(slots[j], facade, &vtid);
	}
	pfree(ptids);
}

/*
 * Move the directory's starting point for inserts back while the spindle
 * before it is not full.  It comes from this backend's past inserts, else
 * it is the newest spindle; spindles fill in order, so all before a full
 * one are full too, and a backend never walks the spindles that are full,
 * nor locks them.
 */
void
spindle_check_open_hint(Relation facade, SpindleDirectory *dir)
{
	TimestampTz filled_at;

	if (dir->hint_checked)
		return;
	while (dir->open_hint > 0 &&
		   !spindle_slots_full(facade, dir, dir->open_hint - 1, &filled_at))
		dir->open_hint--;
	dir->hint_checked = true;
}

/*
 * Store the `got` events of slots[] whose slots k0.. spindle i of dir gave
 * this insert (seg, its relation, locked), then let the spindle go.
 */
void
spindle_place_in(Relation facade, SpindleDirectory *dir, int i, Relation seg,
				 TupleTableSlot **slots, int got, int64 k0, CommandId cid,
				 int options, BulkInsertState bistate, bool speculative,
				 uint32 specToken)
{
	SpindleEntry *sp = &dir->spindles[i];

	/* purged if this (sub)transaction aborts (counters.c) */
	spindle_counters_inserted(RelationGetRelid(facade), sp->segment, got);
	if (i != dir->open_hint)
	{
		dir->open_hint = i;
		spindle_directory_note_open(dir, sp->spindle_no);
	}
	if (i == dir->nspindles - 1 && sp->segment != last_nudged_segment)
	{
		/* the ready spindle is in use: have the worker make the next */
		spindle_wake_worker();
		last_nudged_segment = sp->segment;
	}

	if (bistate != NULL &&
		(bistate != last_bistate || last_bistate_segment != sp->segment))
	{
		/* its pinned buffer's block number means nothing here */
		ReleaseBulkInsertStatePin(bistate);
		last_bistate = bistate;
		last_bistate_segment = sp->segment;
	}

	store_events(facade, seg, sp, slots, got, k0, cid,
				 options, bistate, speculative, specToken);
	spindle_slots_placed(sp);
	close_written_spindle(seg, RowExclusiveLock);
}

/*
 * Place nslots tuples in the open spindle(s), in order, and give each slot
 * its virtual TID.  The workhorse of every kind of insert.  With keep, an
 * event whose inserter supplied a number to keep (the kept_no hook) is
 * placed at it if it can be (kept_ids.c).
 */
static void
place_tuples(Relation facade, TupleTableSlot **slots, int nslots,
			 CommandId cid, int options, BulkInsertState bistate,
			 bool speculative, uint32 specToken, bool keep)
{
	SpindleDirectory *dir;
	int			done = 0;
	int			retries = 0;

	/*
	 * A table rewrite (ALTER TABLE ... TYPE and the like, even when it
	 * reached this table in a way the utility hook could not see) copies
	 * the rows into a transient table and would lose the spindles: refuse.
	 * (VACUUM FULL and CLUSTER copy no rows: copy_for_cluster below.)
	 */
	if (OidIsValid(facade->rd_rel->relrewrite))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("spindle table \"%s\" cannot be rewritten",
						get_rel_name(facade->rd_rel->relrewrite)),
				 errdetail("Changing the columns of a spindle table would rewrite it into new storage."),
				 errhint("Create a new spindle table and copy the events with INSERT ... SELECT.")));
	CheckForSerializableConflictIn(facade, NULL, InvalidBlockNumber);
	keep = keep && spindle_table_hooks.kept_no != NULL;
	dir = spindle_directory_acquire_tail(facade);
	while (done < nslots)
	{
		Relation	seg = NULL;
		int			want = nslots - done;
		int			got = 0;
		int64		k0 = 0;
		int			i;

		if (keep)
		{
			int64		no = spindle_table_hooks.kept_no(facade, slots[done]);

			if (no > 0)
			{
				int			m = 1;

				/* a run of consecutive numbers goes in at once */
				while (done + m < nslots && no < PG_INT64_MAX - m &&
					   spindle_table_hooks.kept_no(facade,
												   slots[done + m]) == no + m)
					m++;
				got = spindle_place_kept(facade, &dir, &slots[done], m, no,
										 cid, options, bistate, speculative,
										 specToken);
				if (got > 0)
				{
					done += got;
					continue;
				}
				want = 1;		/* numbered as usual: this one alone */
			}
			else
			{
				/* numbered as usual: up to the next number to keep */
				want = 1;
				while (done + want < nslots &&
					   spindle_table_hooks.kept_no(facade,
												   slots[done + want]) == 0)
					want++;
			}
		}

		spindle_check_open_hint(facade, dir);
		for (i = dir->open_hint; i < dir->nspindles; i++)
		{
			seg = spindle_open_segment(facade, &dir->spindles[i],
									   RowExclusiveLock);
			if (seg == NULL)
				continue;
			got = spindle_slots_take(facade, dir, i, want, &k0);
			if (got > 0)
				break;
			/* full: nothing of ours is in it, no need to keep it locked */
			relation_close(seg, RowExclusiveLock);
			seg = NULL;
		}
		if (seg == NULL)
		{
			int64		capacity = dir->events_per_spindle;

			if (++retries > 20)
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("could not find room for new events in spindle table \"%s\"",
								RelationGetRelationName(facade))));
			spindle_directory_release(dir);
			if (retries > 1)
				obtain_spindles(facade, want, capacity, bistate);
			else
				AcceptInvalidationMessages();
			dir = spindle_directory_acquire_tail(facade);
			continue;
		}
		spindle_place_in(facade, dir, i, seg, &slots[done], got, k0, cid,
						 options, bistate, speculative, specToken);
		done += got;
	}
	spindle_directory_release(dir);
	/* consumers waiting on a queue are woken when this commits */
	if (spindle_table_hooks.inserted)
		spindle_table_hooks.inserted(facade);
}

static void
facade_tuple_insert(Relation rel, TupleTableSlot *slot, CommandId cid,
					int options, BulkInsertState bistate)
{
	spindle_disk_alarm_check(rel);
	place_tuples(rel, &slot, 1, cid, options, bistate, false, 0, true);
}

static void
facade_multi_insert(Relation rel, TupleTableSlot **slots, int nslots,
					CommandId cid, int options, BulkInsertState bistate)
{
	spindle_disk_alarm_check(rel);
	place_tuples(rel, slots, nslots, cid, options, bistate, false, 0, true);
}

static void
facade_tuple_insert_speculative(Relation rel, TupleTableSlot *slot,
								CommandId cid, int options,
								BulkInsertState bistate, uint32 specToken)
{
	spindle_disk_alarm_check(rel);
	place_tuples(rel, &slot, 1, cid, options, bistate, true, specToken,
				 true);
}

static void
facade_tuple_complete_speculative(Relation rel, TupleTableSlot *slot,
								  uint32 specToken, bool succeeded)
{
	SpindleEntry sp;
	ItemPointerData vtid = slot->tts_tid;
	ItemPointerData ptid;
	Relation	seg;

	if (spindle_resolve_tid(rel, &vtid, &sp, &ptid) != TID_IN_SPINDLE ||
		(seg = spindle_open_segment(rel, &sp, RowExclusiveLock)) == NULL)
		elog(ERROR, "spindle of speculative tuple (%u,%u) not found",
			 ItemPointerGetBlockNumber(&vtid), ItemPointerGetOffsetNumber(&vtid));
	if (succeeded)
		heap_finish_speculative(seg, &ptid);
	else
	{
		heap_abort_speculative(seg, &ptid);
		/* its event is dead now, whatever becomes of the transaction */
		spindle_counters_insert_killed(sp.segment);
	}
	close_written_spindle(seg, RowExclusiveLock);
}

/* Put a failure's ctid back into virtual terms (it is the target or a marker). */
static void
fix_failure_tid(TM_FailureData *tmfd, ItemPointer ptid, ItemPointer vtid)
{
	if (ItemPointerEquals(&tmfd->ctid, ptid))
		tmfd->ctid = *vtid;
}

/*
 * The consume log's check for DML of event k of sp (hidden.c), for a
 * queue table (queue: spindle_hidden_applies, asked once per call);
 * LockWaitSkip: an entry in progress is TM_BeingModified, as heap says of
 * a deleter in progress.
 */
static TM_Result
consumed_check(bool queue, Relation rel, SpindleEntry *sp, int64 k,
			   ItemPointer vtid, LockWaitPolicy policy, TM_FailureData *tmfd)
{
	TM_Result	result;

	if (!queue)
		return TM_Ok;
	/* moved copies refused; an annex's copies have no ids: no log check */
	result = spindle_hidden_dml_check(rel, sp, k, vtid, policy, tmfd,
									  !spindle_is_annex(sp));
	return result == TM_WouldBlock ? TM_BeingModified : result;
}

static TM_Result
facade_tuple_delete(Relation rel, ItemPointer tid, CommandId cid,
					Snapshot snapshot, Snapshot crosscheck, bool wait,
					TM_FailureData *tmfd, bool changingPart)
{
	SpindleEntry sp;
	ItemPointerData ptid;
	Relation	seg;
	TM_Result	result;
	int64		k;
	bool		queue;

	if (spindle_resolve_tid(rel, tid, &sp, &ptid) != TID_IN_SPINDLE ||
		(seg = spindle_open_segment(rel, &sp, RowExclusiveLock)) == NULL)
		elog(ERROR, "event (%u,%u) of spindle table \"%s\" not found",
			 ItemPointerGetBlockNumber(tid), ItemPointerGetOffsetNumber(tid),
			 RelationGetRelationName(rel));
	k = spindle_tid_to_vslot(tid) - sp.vbase;
	queue = spindle_hidden_applies(rel);
	/* consumed or moved already, or being so? (hidden.c, lock protocol) */
	result = consumed_check(queue, rel, &sp, k, tid,
							wait ? LockWaitBlock : LockWaitSkip, tmfd);
	if (result == TM_Ok)
		result = heap_methods->tuple_delete(seg, &ptid, cid, snapshot,
											crosscheck, wait, tmfd,
											changingPart);
	else
		ptid = *tid;
	/* an entry written while heap deleted: wait for it, then look again */
	if (result == TM_Ok)
	{
		result = consumed_check(queue, rel, &sp, k, tid,
								wait ? LockWaitBlock : LockWaitSkip, tmfd);
		if (result != TM_Ok)
			ptid = *tid;
	}
	if (result == TM_Ok)
	{
		spindle_note_touched(RelationGetRelid(rel), sp.spindle_no);
		/* spindle.spindles.purged_events, at commit (counters.c) */
		spindle_counters_deleted(sp.segment, 1);
	}
	else
		fix_failure_tid(tmfd, &ptid, tid);
	close_written_spindle(seg, RowExclusiveLock);
	return result;
}

static TM_Result
facade_tuple_update(Relation rel, ItemPointer otid, TupleTableSlot *slot,
					CommandId cid, Snapshot snapshot, Snapshot crosscheck,
					bool wait, TM_FailureData *tmfd,
					LockTupleMode *lockmode, bool *update_indexes)
{
	TM_Result	result;

	spindle_disk_alarm_check(rel);
	/* purge the old version, marking it moved: nothing follows it */
	result = facade_tuple_delete(rel, otid, cid, snapshot, crosscheck, wait,
								 tmfd, true);
	*lockmode = LockTupleExclusive;
	if (result != TM_Ok)
		return result;
	place_tuples(rel, &slot, 1, cid, 0, NULL, false, 0, false);
	/* the chain heap would have in t_ctid, for WHERE CURRENT OF */
	remember_update(rel, otid, &slot->tts_tid);
	*update_indexes = true;
	return TM_Ok;
}

/*
 * Lock the row at virtual TID tid.  heap locks it in its spindle.  A row
 * that a concurrent transaction updated has no newer version heap could
 * follow (its UPDATE wrote one into another relation): where the caller
 * asks for the newest version (TUPLE_LOCK_FLAG_FIND_LAST_VERSION: READ
 * COMMITTED row locks, foreign key checks, UPDATE and DELETE rechecks),
 * heap would say the row "was already moved to another partition", which
 * misleads on a table that is not partitioned; raise our own 40001 that
 * says what happened instead.  Without that flag the caller handles
 * TM_Updated itself (REPEATABLE READ: "could not serialize access";
 * INSERT ... ON CONFLICT: it starts again).
 */
static TM_Result
facade_tuple_lock(Relation rel, ItemPointer tid, Snapshot snapshot,
				  TupleTableSlot *slot, CommandId cid, LockTupleMode mode,
				  LockWaitPolicy wait_policy, uint8 flags,
				  TM_FailureData *tmfd)
{
	SpindleEntry sp;
	ItemPointerData ptid;
	ItemPointerData vtid = *tid;
	Relation	seg;
	TM_Result	result;
	int64		k;
	bool		queue;

	if (spindle_resolve_tid(rel, tid, &sp, &ptid) != TID_IN_SPINDLE ||
		(seg = spindle_open_segment(rel, &sp, RowShareLock)) == NULL)
		elog(ERROR, "event (%u,%u) of spindle table \"%s\" not found",
			 ItemPointerGetBlockNumber(tid), ItemPointerGetOffsetNumber(tid),
			 RelationGetRelationName(rel));
	k = spindle_tid_to_vslot(&vtid) - sp.vbase;
	queue = spindle_hidden_applies(rel);
	/* consumed or moved already, or being so? (hidden.c, lock protocol) */
	result = queue ?
		spindle_hidden_dml_check(rel, &sp, k, &vtid, wait_policy, tmfd,
								 !spindle_is_annex(&sp)) : TM_Ok;
	/* there is no later version in a spindle to find: see above */
	if (result == TM_Ok)
		result = heap_methods->tuple_lock(seg, &ptid, snapshot, slot, cid,
										  mode, wait_policy,
										  flags & ~TUPLE_LOCK_FLAG_FIND_LAST_VERSION,
										  tmfd);
	else
		ptid = vtid;
	/* an entry written while heap locked: wait for it, then look again */
	if (result == TM_Ok && queue)
	{
		result = spindle_hidden_dml_check(rel, &sp, k, &vtid, wait_policy,
										  tmfd, !spindle_is_annex(&sp));
		if (result != TM_Ok)
		{
			ExecClearTuple(slot);
			ptid = vtid;
		}
	}
	if (result == TM_Updated &&
		(flags & TUPLE_LOCK_FLAG_FIND_LAST_VERSION) &&
		ItemPointerIndicatesMovedPartitions(&tmfd->ctid))
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not serialize access to a row of spindle table \"%s\" due to concurrent update",
						RelationGetRelationName(rel)),
				 errdetail("An UPDATE of a spindle table writes the new version of the row elsewhere, as a DELETE and an INSERT would, so row locks (FOR KEY SHARE and foreign key checks included), UPDATE and DELETE of the row conflict with it as with a DELETE."),
				 errhint("Retry the transaction.")));
	*tid = vtid;
	fix_failure_tid(tmfd, &ptid, &vtid);
	if (!TTS_EMPTY(slot))
		spindle_slot_set_identity(slot, rel, &vtid);
	relation_close(seg, RowShareLock);
	return result;
}

static bool
facade_tuple_fetch_row_version(Relation rel, ItemPointer tid,
							   Snapshot snapshot, TupleTableSlot *slot)
{
	SpindleEntry sp;
	ItemPointerData ptid;
	ItemPointerData vtid = *tid;
	Relation	seg;
	bool		found;

	if (spindle_resolve_tid(rel, tid, &sp, &ptid) != TID_IN_SPINDLE ||
		(seg = spindle_open_segment(rel, &sp, AccessShareLock)) == NULL)
		return false;
	if (ItemPointerGetBlockNumber(&ptid) >= RelationGetNumberOfBlocks(seg))
		found = false;
	else
		found = heap_methods->tuple_fetch_row_version(seg, &ptid, snapshot, slot);
	if (found &&
		spindle_event_hidden(rel, &sp, spindle_tid_to_vslot(&vtid) - sp.vbase,
							 snapshot))
	{
		ExecClearTuple(slot);
		found = false;
	}
	if (found)
		spindle_slot_set_identity(slot, rel, &vtid);
	relation_close(seg, AccessShareLock);
	return found;
}

static bool
facade_tuple_tid_valid(TableScanDesc scan, ItemPointer tid)
{
	return spindle_tid_to_vslot(tid) >= 0;
}

/*
 * Did an UPDATE of this transaction replace the version at virtual TID
 * tid (it is deleted by this transaction and marked moved)?  The caller
 * holds a lock on rel.
 */
static bool
updated_by_this_transaction(Relation rel, ItemPointer tid,
							TupleTableSlot *slot)
{
	HeapTupleHeader t;

	if (!facade_tuple_fetch_row_version(rel, tid, SnapshotAny, slot))
		return false;
	t = ((HeapTupleTableSlot *) slot)->tuple->t_data;
	return HeapTupleHeaderIndicatesMovedPartitions(t) &&
		!(t->t_infomask & HEAP_XMAX_INVALID) &&
		TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetUpdateXid(t));
}

/*
 * The newest version of the row at virtual TID *tid that the scan's
 * snapshot sees, as heap_get_latest_tid finds it by following t_ctid:
 * follow the versions this transaction's UPDATEs wrote (see above) and
 * leave in *tid the last one visible, else *tid unchanged.  Called for
 * WHERE CURRENT OF (TidNext) and currtid2().
 */
static void
facade_tuple_get_latest_tid(TableScanDesc scan, ItemPointer tid)
{
	Relation	rel = scan->rs_rd;
	TupleTableSlot *slot;
	ItemPointerData ctid = *tid;
	bool		visible = false;
	long		left;

	/* nothing updated in this transaction: no version follows another */
	if (updated_versions == NULL && !updated_overflowed)
		return;
	slot = MakeSingleTupleTableSlot(RelationGetDescr(rel),
									&TTSOpsBufferHeapTuple);
	left = updated_versions ? hash_get_num_entries(updated_versions) : 0;
	for (;;)
	{
		UpdatedKey	key;
		UpdatedVersion *e;

		visible = facade_tuple_fetch_row_version(rel, &ctid,
												 scan->rs_snapshot, slot);
		if (visible)
			*tid = ctid;
		if (updated_versions == NULL || left-- <= 0)
			break;
		updated_key(&key, rel, &ctid);
		e = hash_search(updated_versions, &key, HASH_FIND, NULL);
		if (e == NULL)
			break;
		ctid = e->newer;
	}
	if (!visible && updated_overflowed &&
		updated_by_this_transaction(rel, &ctid, slot))
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("cannot find the newest version of a row of spindle table \"%s\" that this transaction updated",
						RelationGetRelationName(rel)),
				 errdetail("This transaction updated more rows of spindle tables than work_mem (%d kB) lets it remember.",
						   work_mem),
				 errhint("Raise work_mem before the transaction's updates, or update fewer rows in one transaction.")));
	ExecDropSingleTupleTableSlot(slot);
}

/*
 * Heap's test on the slot's event, then the consume log's (hidden.c):
 * ON CONFLICT's visibility check, RI checks.
 */
static bool
facade_tuple_satisfies_snapshot(Relation rel, TupleTableSlot *slot,
								Snapshot snapshot)
{
	SpindleEntry sp;
	ItemPointerData ptid;

	if (!heap_methods->tuple_satisfies_snapshot(rel, slot, snapshot))
		return false;
	if (spindle_resolve_tid(rel, &slot->tts_tid, &sp, &ptid) != TID_IN_SPINDLE)
		return true;
	return !spindle_event_hidden(rel, &sp,
								 spindle_tid_to_vslot(&slot->tts_tid) -
								 sp.vbase, snapshot);
}

/* ----------------------------------------------------------------
 * Index fetches
 * ----------------------------------------------------------------
 */
typedef struct FacadeIndexFetch
{
	IndexFetchTableData base;
	int64		spindle_no;		/* spindle of hfetch, or 0 */
	SpindleEntry sp;
	Relation	seg;
	BlockNumber nblocks;		/* of seg, as last seen */
	IndexFetchTableData *hfetch;
	/* the consume log, for the snapshot and command id of the last call */
	SpindleHide hide;
	bool		hide_ready;
	CommandId	hide_curcid;
} FacadeIndexFetch;

static IndexFetchTableData *
facade_index_fetch_begin(Relation rel)
{
	FacadeIndexFetch *f = palloc0(sizeof(FacadeIndexFetch));

	f->base.rel = rel;
	return &f->base;
}

/* Stop reading the current spindle: unpin its pages, then unlock it. */
static void
facade_index_fetch_close_spindle(FacadeIndexFetch *f)
{
	if (f->hfetch != NULL)
	{
		heap_methods->index_fetch_end(f->hfetch);
		relation_close(f->seg, AccessShareLock);
	}
	f->hfetch = NULL;
	f->seg = NULL;
	f->spindle_no = 0;
}

static void
facade_index_fetch_reset(IndexFetchTableData *scan)
{
	FacadeIndexFetch *f = (FacadeIndexFetch *) scan;

	if (f->hfetch != NULL)
		heap_methods->index_fetch_reset(f->hfetch);
}

static void
facade_index_fetch_end(IndexFetchTableData *scan)
{
	FacadeIndexFetch *f = (FacadeIndexFetch *) scan;

	facade_index_fetch_close_spindle(f);
	spindle_hide_end(&f->hide);
	pfree(f);
}

/*
 * Check that a fetched tuple is the event of the virtual slot asked for:
 * a slot map entry may only point at its own event (see slotmap.c).
 */
static void
check_event(TupleTableSlot *slot, SpindleEntry *sp, ItemPointer vtid)
{
	HeapTuple	tuple = ExecFetchSlotHeapTuple(slot, false, NULL);
	ItemPointerData found;

	spindle_tuple_vtid(sp, tuple, &found);
	if (!ItemPointerEquals(&found, vtid))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("slot map of spindle %lld points at event (%u,%u) for (%u,%u)",
						(long long) sp->spindle_no,
						ItemPointerGetBlockNumber(&found),
						ItemPointerGetOffsetNumber(&found),
						ItemPointerGetBlockNumber(vtid),
						ItemPointerGetOffsetNumber(vtid))));
}

/*
 * Does the consume log hide event k of sp from snapshot?  The fetch state
 * keeps what it learnt (the log does not exist) for as long as the
 * caller's snapshot and command id stay the same: see hidden.c,
 * "Coherence".  Each event is one probe of the tree.
 */
static bool
fetch_hidden(FacadeIndexFetch *f, SpindleEntry *sp, int64 k,
			 Snapshot snapshot)
{
	if (!f->hide_ready || f->hide.snapshot != snapshot ||
		f->hide_curcid != snapshot->curcid)
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(GetMemoryChunkContext(f));

		spindle_hide_end(&f->hide);
		spindle_hide_begin(&f->hide, f->base.rel, snapshot, false);
		MemoryContextSwitchTo(oldcxt);
		f->hide_ready = true;
		f->hide_curcid = snapshot->curcid;
	}
	return spindle_hide_event(&f->hide, sp, k);
}

/*
 * Fetch the event of virtual TID tid as an index scan does, through the
 * spindle fetch state f (opening the spindle if it is not the current
 * one).  Also serves bitmap scans (facade_scan.c).
 */
bool
spindle_fetch_event(Relation rel, IndexFetchTableData *scan,
					ItemPointer tid, Snapshot snapshot, TupleTableSlot *slot,
					bool *call_again, bool *all_dead)
{
	FacadeIndexFetch *f = (FacadeIndexFetch *) scan;
	SpindleEntry sp;
	ItemPointerData ptid;
	ItemPointerData vtid = *tid;
	bool		found;

	*call_again = false;
	if (all_dead)
		*all_dead = false;
	switch (spindle_resolve_tid(rel, tid, &sp, &ptid))
	{
		case TID_DEAD:
			/* its spindle was dropped, or never held it: dead to everyone */
			if (all_dead)
				*all_dead = true;
			return false;
		case TID_UNKNOWN:
			/* in a spindle we cannot see: not visible to us, maybe alive */
			return false;
		case TID_IN_SPINDLE:
			break;
	}
	if (f->spindle_no != sp.spindle_no)
	{
		/* the slot may pin a page of the spindle we are leaving */
		MemoryContext oldcxt;

		ExecClearTuple(slot);
		facade_index_fetch_close_spindle(f);
		f->seg = spindle_open_segment(rel, &sp, AccessShareLock);
		if (f->seg == NULL)
		{
			/* dropped since: all its events were dead to everyone */
			if (all_dead)
				*all_dead = true;
			return false;
		}
		/* it lives as long as f, whatever context the caller resets */
		oldcxt = MemoryContextSwitchTo(GetMemoryChunkContext(f));
		f->hfetch = heap_methods->index_fetch_begin(f->seg);
		MemoryContextSwitchTo(oldcxt);
		f->spindle_no = sp.spindle_no;
		f->sp = sp;
		f->nblocks = RelationGetNumberOfBlocks(f->seg);
	}
	if (ItemPointerGetBlockNumber(&ptid) >= f->nblocks)
	{
		f->nblocks = RelationGetNumberOfBlocks(f->seg);
		if (ItemPointerGetBlockNumber(&ptid) >= f->nblocks)
			return false;
	}
	found = heap_methods->index_fetch_tuple(f->hfetch, &ptid, snapshot, slot,
											call_again, all_dead);

	/*
	 * Heap asks to be called again for a non-MVCC snapshot, to follow a HOT
	 * chain; a spindle has none (an UPDATE is a delete and an insert), and
	 * the call again would start from the root with first_call set (ptid is
	 * ours, made anew from the virtual TID) and return the same tuple: an
	 * exclusion constraint's check found its own tuple twice and refused
	 * every insert.
	 */
	*call_again = false;
	if (found)
	{
		check_event(slot, &sp, &vtid);
		if (fetch_hidden(f, &sp, spindle_tid_to_vslot(&vtid) - sp.vbase,
						 snapshot))
		{
			/* consumed: not visible, but not dead to everyone either */
			ExecClearTuple(slot);
			*call_again = false;
			return false;
		}
		spindle_slot_set_identity(slot, rel, &vtid);
	}
	return found;
}

static bool
facade_index_fetch_tuple(IndexFetchTableData *scan, ItemPointer tid,
						 Snapshot snapshot, TupleTableSlot *slot,
						 bool *call_again, bool *all_dead)
{
	return spindle_fetch_event(scan->rel, scan, tid, snapshot, slot,
							   call_again, all_dead);
}

IndexFetchTableData *
spindle_fetch_begin(Relation rel)
{
	return facade_index_fetch_begin(rel);
}

void
spindle_fetch_end(IndexFetchTableData *scan)
{
	facade_index_fetch_end(scan);
}

/*
 * Which index entries may go: hand each spindle's share of the TIDs to
 * heapam, which also computes the conflict horizon for standbys.  TIDs
 * nothing can be at are deletable; TIDs of spindles we cannot see are not.
 */
static TransactionId
facade_index_delete_tuples(Relation rel, TM_IndexDeleteOp *delstate)
{
	TransactionId result = InvalidTransactionId;
	int			n = delstate->ndeltids;
	SpindleEntry *sps = palloc(sizeof(SpindleEntry) * n);
	ItemPointerData *ptids = palloc(sizeof(ItemPointerData) * n);
	bool	   *done = palloc0(sizeof(bool) * n);
	int			i;

	for (i = 0; i < n; i++)
	{
		TM_IndexDelete *d = &delstate->deltids[i];

		switch (spindle_resolve_tid(rel, &d->tid, &sps[i], &ptids[i]))
		{
			case TID_DEAD:
				delstate->status[d->id].knowndeletable = true;
				done[i] = true;
				continue;
			case TID_UNKNOWN:
				/* maybe an uncommitted spindle: leave the entry alone */
				done[i] = true;
				continue;
			case TID_IN_SPINDLE:
				break;
		}
	}

	for (i = 0; i < n; i++)
	{
		TM_IndexDeleteOp sub;
		Relation	seg;
		int			j,
					m = 0;
		TransactionId xid;

		if (done[i])
			continue;
		sub = *delstate;
		sub.deltids = palloc(sizeof(TM_IndexDelete) * n);
		sub.status = palloc(sizeof(TM_IndexStatus) * n);
		for (j = i; j < n; j++)
		{
			if (done[j] || sps[j].spindle_no != sps[i].spindle_no)
				continue;
			sub.deltids[m].tid = ptids[j];
			sub.deltids[m].id = m;
			sub.status[m] = delstate->status[delstate->deltids[j].id];
			sub.status[m].idxoffnum = j;	/* remember where it came from */
			m++;
			done[j] = true;
		}
		sub.ndeltids = m;
		seg = spindle_open_segment(rel, &sps[i], AccessShareLock);
		if (seg == NULL)
			continue;			/* dropped since: cleanup removes them */
		/* heap_index_delete_tuples may reorder and shorten sub.deltids */
		xid = heap_methods->index_delete_tuples(seg, &sub);
		for (j = 0; j < sub.ndeltids; j++)
		{
			TM_IndexStatus *st = &sub.status[sub.deltids[j].id];
			int			orig = st->idxoffnum;

			delstate->status[delstate->deltids[orig].id].knowndeletable =
				st->knowndeletable;
		}
		relation_close(seg, AccessShareLock);
		if (TransactionIdIsValid(xid) &&
			(!TransactionIdIsValid(result) || TransactionIdFollows(xid, result)))
			result = xid;
	}
	return result;
}

/* ----------------------------------------------------------------
 * Storage of the facade itself: the slot map
 * ----------------------------------------------------------------
 */
/*
 * For a TRUNCATE of rel: the lowest number above every number its storage
 * (and any before it) handed out to an event, if its storage never handed
 * one out, else 0.  Never handed one out: every spindle it has is empty
 * (spindle_segment_is_empty: no page, no slot reserved); the first one's
 * first_no then lies above every number given (spindles fill in order, so
 * the spindles that held events, dropped since, came before it), and with
 * no spindle the table's counter does.  A restore in parallel sends a
 * TRUNCATE before loading each table it made (and the worker has given
 * it ready spindles): no number needs to be skipped then, and the ids it
 * loads with spindle.keep_msg_ids must not fall below a jump.  The caller
 * holds AccessExclusiveLock on rel.
 */
static int64
truncate_unused_from(Relation rel, const SpindleNumbers *next_no)
{
	SpindleDirectory *dir = spindle_directory_acquire_current(rel);
	int64		from = next_no->event_no;
	int			i;

	for (i = 0; i < dir->nspindles; i++)
		if (spindle_segment_is_empty(dir->spindles[i].segment) != 1)
			break;
	if (i < dir->nspindles)
		from = 0;
	else if (dir->nspindles > 0)
		from = dir->spindles[0].first_no;
	spindle_directory_release(dir);
	if (from > 0)
	{
		if (untouched_lxid != MyProc->lxid)
		{
			untouched_lxid = MyProc->lxid;
			nuntouched = 0;
		}
		if (nuntouched < SPINDLE_UNTOUCHED_TRUNCATES)
		{
			untouched_relids[nuntouched] = RelationGetRelid(rel);
			untouched_first_nos[nuntouched++] = from;
		}
	}
	return from;
}

/*
 * Did this transaction's TRUNCATE of relid replace storage that never gave
 * a number to an event (truncate_unused_from)?  Then *first_no is the
 * first number of its first spindle, or its counter: the open spindle the
 * TRUNCATE gives the table back (spindle_truncated) is numbered from
 * there, as the old one was, not from a floor of the layers above loaded
 * since (a parallel restore's floor, before the events it loads keeping
 * their ids).  Forgets relid.
 */
bool
spindle_truncate_untouched(Oid relid, int64 *first_no)
{
	int			i;

	if (untouched_lxid != MyProc->lxid)
		return false;
	for (i = 0; i < nuntouched; i++)
		if (untouched_relids[i] == relid)
		{
			*first_no = untouched_first_nos[i];
			untouched_relids[i] = InvalidOid;
			return true;
		}
	return false;
}

static void
facade_relation_set_new_filenode(Relation rel, const RelFileNode *newrnode,
								 char persistence, TransactionId *freezeXid,
								 MultiXactId *minmulti)
{
	SMgrRelation srel;
	bool		truncating;
	SpindleNumbers next_no = {1, 1};

	/* the facade holds no tuples: no xid horizon of its own */
	*freezeXid = InvalidTransactionId;
	*minmulti = InvalidMultiXactId;

	/*
	 * TRUNCATE of an existing table: spindle and event numbers go on
	 * increasing.  The new storage numbers its events from
	 * SPINDLE_EVENT_NOS_RESERVED past the old one's counter: if the
	 * TRUNCATE rolls back (also to a savepoint, with more TRUNCATEs nested
	 * in it), the old storage is the table's again and goes on below every
	 * number the new one gave.  Unless the old storage never gave a
	 * number to an event: then the new one numbers from above every
	 * number given (truncate_unused_from).  Should the TRUNCATE roll back,
	 * the numbers the new storage gave, all in this transaction, which no
	 * consumer of the table may be (queue.c), were never seen by anyone.
	 */
	truncating = SearchSysCacheExists1(RELOID,
									   ObjectIdGetDatum(RelationGetRelid(rel)));
	if (truncating)
	{
		int64		unused_from;

		spindle_peek_numbers(rel, &next_no);
		unused_from = truncate_unused_from(rel, &next_no);
		if (unused_from > 0)
			next_no.event_no = unused_from;
		else if (next_no.event_no > PG_INT64_MAX / 2)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("spindle table \"%s\" has numbered all the events it can",
							RelationGetRelationName(rel))));
		else
			next_no.event_no += SPINDLE_EVENT_NOS_RESERVED;
	}

	srel = RelationCreateStorage(*newrnode, persistence, true);
	spindle_slotmap_init_fork(srel, MAIN_FORKNUM,
							  persistence == RELPERSISTENCE_PERMANENT &&
							  XLogIsNeeded(), &next_no);
	if (persistence == RELPERSISTENCE_UNLOGGED)
	{
		smgrcreate(srel, INIT_FORKNUM, false);
		log_smgrcreate(newrnode, INIT_FORKNUM);
		spindle_slotmap_init_fork(srel, INIT_FORKNUM, true, &next_no);
	}
	smgrclose(srel);

	/* TRUNCATE: its spindles go too, its cached events, its consumers' state */
	if (truncating)
	{
		forget_updates(rel);
		spindle_drop_all_spindles(rel);
		if (spindle_table_hooks.truncated)
			spindle_table_hooks.truncated(rel, true);
	}
}

static void
facade_relation_nontransactional_truncate(Relation rel)
{
	SpindleNumbers next_no;

	spindle_peek_numbers(rel, &next_no);
	if (spindle_table_hooks.truncated)
		spindle_table_hooks.truncated(rel, false);
	RelationTruncate(rel, 0);
	spindle_slotmap_forget_size(rel);
	spindle_slotmap_init_fork(RelationGetSmgr(rel), MAIN_FORKNUM,
							  RelationNeedsWAL(rel), &next_no);
	if (rel->rd_rel->relpersistence == RELPERSISTENCE_UNLOGGED)
	{
		smgrtruncate(RelationGetSmgr(rel), (ForkNumber[]) {INIT_FORKNUM},
					 1, (BlockNumber[]) {0});
		spindle_slotmap_init_fork(RelationGetSmgr(rel), INIT_FORKNUM, true,
								  &next_no);
	}
	forget_updates(rel);
	spindle_drop_all_spindles(rel);
}

static void
facade_relation_copy_data(Relation rel, const RelFileNode *newrnode)
{
	SMgrRelation dstrel;

	FlushRelationBuffers(rel);
	dstrel = RelationCreateStorage(*newrnode, rel->rd_rel->relpersistence, true);
	RelationCopyStorage(RelationGetSmgr(rel), dstrel, MAIN_FORKNUM,
						rel->rd_rel->relpersistence);
	if (rel->rd_rel->relpersistence == RELPERSISTENCE_UNLOGGED)
	{
		smgrcreate(dstrel, INIT_FORKNUM, false);
		log_smgrcreate(newrnode, INIT_FORKNUM);
		RelationCopyStorage(RelationGetSmgr(rel), dstrel, INIT_FORKNUM,
							RELPERSISTENCE_PERMANENT);
	}
	RelationDropStorage(rel);
	smgrclose(dstrel);
}

/*
 * VACUUM FULL and CLUSTER: the spindles stay as they are (they are already
 * compact); the new storage of the facade gets a copy of the slot map so
 * that every TID keeps its meaning, and the indexes are rebuilt from the
 * same spindles afterwards.
 */
static void
facade_relation_copy_for_cluster(Relation OldTable, Relation NewTable,
								 Relation OldIndex, bool use_sort,
								 TransactionId OldestXmin,
								 TransactionId *xid_cutoff,
								 MultiXactId *multi_cutoff,
								 double *num_tuples, double *tups_vacuumed,
								 double *tups_recently_dead)
{
	spindle_slotmap_copy(OldTable, NewTable);
	*num_tuples = 0;
	*tups_vacuumed = 0;
	*tups_recently_dead = 0;
	*xid_cutoff = InvalidTransactionId;
	*multi_cutoff = InvalidMultiXactId;
}

/*
 * VACUUM of a spindle table: remove the index entries of spindles whose
 * drop has committed (and of rolled-back creations) and give their TID
 * ranges back, however few they are, and let each spindle's own vacuum (segment_am.c) do what it
 * may.  The caller holds ShareUpdateExclusiveLock on the facade.
 */
static void
facade_relation_vacuum(Relation rel, struct VacuumParams *params,
					   BufferAccessStrategy bstrategy)
{
	spindle_cleanup_dropped(rel, true);
	spindle_vacuum_spindles(rel, params, bstrategy);
}

/*
 * Size of the main fork as ANALYZE sees it: the blocks it samples, which
 * are not the TIDs' virtual blocks (facade_scan.c: spindle_analyze_nblocks;
 * always below RELSEG_SIZE, so that ANALYZE's prefetching stays in the
 * first segment).  Nothing else in core asks a facade for its size (BRIN's
 * block-range builds are refused).  Other forks are empty.  No spindle is
 * opened.
 */
static uint64
facade_relation_size(Relation rel, ForkNumber forkNumber)
{
	SpindleDirectory *dir;
	BlockNumber nblocks;

	if (forkNumber != MAIN_FORKNUM && forkNumber != InvalidForkNumber)
		return 0;
	dir = spindle_directory_acquire(rel);
	nblocks = spindle_analyze_nblocks(dir);
	spindle_directory_release(dir);
	return (uint64) nblocks * BLCKSZ;
}

static bool
facade_relation_needs_toast_table(Relation rel)
{
	/* each spindle has its own TOAST table */
	return false;
}

static Oid
facade_relation_toast_am(Relation rel)
{
	return HEAP_TABLE_AM_OID;
}

/*
 * The events the spindles of dir have handed out, purged ones included,
 * for the planner.  Spindles fill in order, so the spindles known full are
 * the first ones: those below the table's full mark (slots.c), or before
 * the newest one whose fill time the directory has, or before this
 * backend's checked insert hint.  Each holds its capacity; the count of
 * them and the sum of their capacities grow with the directory's
 * knowledge (dir->est_full), so each call adds only what it newly knows.
 * The others (the open and ready spindles, unless the table's full mark
 * is unknown, as after a restart) are asked for their counter; a spindle
 * without one counts as full unless it is the last.
 */
static double
estimate_events(Relation rel, SpindleDirectory *dir)
{
	int			n = dir->nspindles;
	int			known = dir->est_full;
	int64		full_below = spindle_slots_full_below(RelationGetRelid(rel));
	double		events;
	int			i;

	if (dir->hint_checked)
		known = Max(known, dir->open_hint);
	if (full_below > 0 && known < n &&
		dir->spindles[known].spindle_no < full_below)
	{
		/* the first spindle at or above the mark (ordered by number) */
		int			lo = known + 1,
					hi = n;

		while (lo < hi)
		{
			int			mid = lo + (hi - lo) / 2;

			if (dir->spindles[mid].spindle_no < full_below)
				lo = mid + 1;
			else
				hi = mid;
		}
		known = lo;
	}
	for (i = n - 1; i >= known; i--)
		if (dir->spindles[i].filled_at != 0)
		{
			known = i + 1;
			break;
		}
	for (i = dir->est_full; i < known; i++)
		dir->est_full_events += spindle_effective_capacity(&dir->spindles[i]);
	dir->est_full = known;

	events = dir->est_full_events;
	for (i = known; i < n; i++)
	{
		SpindleEntry *sp = &dir->spindles[i];
		int64		used;

		if (!spindle_slots_peek(sp->segment, sp->spindle_no, &used))
			used = (i < n - 1) ? spindle_effective_capacity(sp) : 0;
		events += used;
	}
	/* annexes (few): the copies they handed out, or their capacity */
	for (i = 0; i < dir->nannexes; i++)
	{
		SpindleEntry *sp = &dir->annexes[i];
		int64		used;

		if (!spindle_slots_peek(sp->segment, sp->spindle_no, &used))
			used = spindle_effective_capacity(sp);
		events += used;
	}
	return events;
}

/*
 * Size estimate for the planner, without opening a spindle: the events the
 * spindles have handed out (estimate_events), computed at most once a
 * second by each backend.  Purged events that are not yet dropped count
 * too: the estimate is an upper bound.  Pages from the tuple width.
 */
static void
facade_relation_estimate_size(Relation rel, int32 *attr_widths,
							  BlockNumber *pages, double *tuples,
							  double *allvisfrac)
{
	SpindleDirectory *dir = spindle_directory_acquire(rel);
	TimestampTz now = GetCurrentTimestamp();
	double		events;
	int32		width;

	/* computed at most once a second per backend */
	if (dir->est_at != 0 && !TimestampDifferenceExceeds(dir->est_at, now, 1000))
		events = dir->est_events;
	else
	{
		events = estimate_events(rel, dir);
		dir->est_events = events;
		dir->est_at = now;
	}
	spindle_directory_release(dir);

	width = get_rel_data_width(rel, attr_widths);
	*tuples = events;
	*pages = (BlockNumber) Min(ceil(events * (width + 32) / (BLCKSZ * 0.9)),
							   (double) MaxBlockNumber);
	*allvisfrac = 0;
}

static const TupleTableSlotOps *
facade_slot_callbacks(Relation relation)
{
	return &TTSOpsBufferHeapTuple;
}

const TableAmRoutine *
spindle_facade_routine(void)
{
	if (heap_methods == NULL)
	{
		heap_methods = GetHeapamTableAmRoutine();
		facade_methods = *heap_methods;

		facade_methods.slot_callbacks = facade_slot_callbacks;
		spindle_scan_routines(&facade_methods);

		facade_methods.index_fetch_begin = facade_index_fetch_begin;
		facade_methods.index_fetch_reset = facade_index_fetch_reset;
		facade_methods.index_fetch_end = facade_index_fetch_end;
		facade_methods.index_fetch_tuple = facade_index_fetch_tuple;

		facade_methods.tuple_fetch_row_version = facade_tuple_fetch_row_version;
		facade_methods.tuple_tid_valid = facade_tuple_tid_valid;
		facade_methods.tuple_get_latest_tid = facade_tuple_get_latest_tid;
		facade_methods.tuple_satisfies_snapshot = facade_tuple_satisfies_snapshot;
		facade_methods.index_delete_tuples = facade_index_delete_tuples;

		facade_methods.tuple_insert = facade_tuple_insert;
		facade_methods.tuple_insert_speculative = facade_tuple_insert_speculative;
		facade_methods.tuple_complete_speculative = facade_tuple_complete_speculative;
		facade_methods.multi_insert = facade_multi_insert;
		facade_methods.tuple_delete = facade_tuple_delete;
		facade_methods.tuple_update = facade_tuple_update;
		facade_methods.tuple_lock = facade_tuple_lock;
		facade_methods.finish_bulk_insert = NULL;

		facade_methods.relation_set_new_filenode = facade_relation_set_new_filenode;
		facade_methods.relation_nontransactional_truncate = facade_relation_nontransactional_truncate;
		facade_methods.relation_copy_data = facade_relation_copy_data;
		facade_methods.relation_copy_for_cluster = facade_relation_copy_for_cluster;
		facade_methods.relation_vacuum = facade_relation_vacuum;

		facade_methods.relation_size = facade_relation_size;
		facade_methods.relation_needs_toast_table = facade_relation_needs_toast_table;
		facade_methods.relation_toast_am = facade_relation_toast_am;
		facade_methods.relation_estimate_size = facade_relation_estimate_size;
	}
	return &facade_methods;
}

const TableAmRoutine *
spindle_heap_methods(void)
{
	(void) spindle_facade_routine();
	return heap_methods;
}
