/*-------------------------------------------------------------------------
 *
 * ttl.c
 *	  Time-to-live purge: spindle.purge_expired() and the worker's TTL step.
 *
 * Every event carries its append time, in whole seconds rounded up, in a
 * hidden column (layout.c).  An event is purged when that time is at or
 * before the cutoff (now - ttl) rounded down to a second.  So an event is
 * never purged before it is `ttl` old, and every event appended more than
 * `ttl` + 1 s ago is purged, whatever happened on its page or spindle since
 * (later appends, deletes, locks) and however slowly its spindle fills.
 * The worker applies a table's time_to_live every naptime, so there it is
 * `ttl` + 1 s + one naptime at most.
 *
 * Cost: an event's append time is never before its spindle's creation, so
 * spindles created after the cutoff are not read; a full spindle whose
 * shared-memory fill time is at or before the cutoff is purged whole, and
 * remembered by this backend as done until it is dropped.  Each round of
 * the worker therefore reads the one or two spindles the cutoff falls in.
 *
 * Annexes (compaction, docs/design.md "Compaction of sparse spindles",
 * section 5).  A copy moved into an annex keeps its event's append time,
 * visible_at and msg_id, so it is purged as the event would have been
 * where it was.  An annex holds old copies beside new ones: every annex
 * is read whole at each purge, after the event spindles, with no shortcut
 * and nothing remembered (annexes are few and small: compaction fills
 * them with what stays of sparse spindles).  A table without annexes
 * reads nothing more.  An annex's copies have no event numbers: a lease
 * is held by the msg_id in the copy (column 1 of a queue table; the held
 * items over every msg_id are read once per purge), and the consume log
 * covers none (table/hidden.c).  On a queue table whose consumer relation
 * has a tree 3, a copy of a spindle or annex that a relocation entry of a
 * live mover hides (committed: the event lives on in its newer copy,
 * purged there; running, this transaction's included: left for the next
 * round) is not purged: the entries over the spindle are read once, in
 * the metapage look made for the consume log.  An entry written between
 * that read and TTL's heap_delete was written under the page's share lock
 * before it (the mover found no xmax), so the range read after the page's
 * deletes finds it and the copy is counted by its mover, not by TTL;
 * should that mover abort, the copy stays deleted by TTL and counted by
 * nobody, as with the consume log below.  A purge of an annex copy sets
 * its xmax and counts in the annex's counters; the drop rule
 * (maintenance.c) then drops the annex once every copy is dead.
 *
 * Purging deletes each expired event (heap_delete on its spindle, one WAL
 * record per event), skipping events other transactions hold locked or
 * have deleted: those are left for the next round.
 *
 * The layers above may ask for more (the ttl_not_before hook): on a queue
 * table an event must also have been due (visible_at) at or before the
 * cutoff, so a delayed event lives `ttl` from its due time, not from its
 * append; a spindle holding one is then not purged whole (nor remembered
 * as done) until it is.  They may also hold events back for now (the
 * ttl_held hook): a queue's leased events are purged when their lease
 * ends, not while a consumer works on them.
 *
 * TTL purges by xmax also with spindle.consume_log on.  On a queue table
 * it skips events its consume log (read once per spindle, after the held
 * items) says a consumer took -- committed or below the floor: gone;
 * running: left for the next round --, and does not count as its own an
 * event a consumer's entry took just before TTL's heap_delete (one look
 * at the consumer relation's metapage and one range read of each tree
 * per page it deleted on).  Should that consumer abort, the event stays
 * deleted by TTL and counted by nobody (the counters are then short of it
 * until rebuilt from disk).
 *
 * A table that a foreign key references is refused (ERROR, as TRUNCATE):
 * a purge fires no triggers, so it would not check those keys.
 *
 * Locks: the table in RowExclusiveLock mode, as DELETE (purge_expired
 * holds it already; the worker's step takes it only if it can at once,
 * else it purges at its next round); a queue table's consumer relation
 * AccessShareLock, to the end of the transaction.  Each spindle or annex is
 * locked in RowExclusiveLock mode while it is purged, and that lock (with
 * those heap_delete takes on the spindle's TOAST table and TOAST index)
 * is released when the spindle is done, not at commit: one purge covers
 * every spindle of the table in one transaction, and a lock per spindle
 * would fill the shared lock table ("out of shared memory", for every
 * session) once the table has more spindles than it holds.  Releasing is
 * safe because a spindle is dropped only by someone who holds its ACCESS
 * EXCLUSIVE lock and finds every event dead to everyone: the events this
 * transaction deleted are not dead until it commits and the horizon
 * passes, so the spindle stays while this transaction may still need it,
 * and this transaction touches it no more (no pin is kept).  A lock the
 * transaction held on the spindle before (an earlier DELETE) stays held.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/trigger.h"

#include "access/heapam.h"
#include "access/relation.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/genam.h"
#include "access/table.h"
#include "catalog/pg_constraint.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/procarray.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "table/spindle_table.h"


PG_FUNCTION_INFO_V1(spindle_purge_expired);

/*
 * Full spindles this backend purged completely, with the cutoff it used:
 * nothing in them is left to purge by any later cutoff.  An entry names
 * its spindle by relation OID, table, number and creation time (an OID
 * can come back after wraparound, a table's OID with it), and is forgotten
 * once its spindle is dropped, so that a long-lived backend (the worker)
 * keeps as many entries as there are purged spindles not yet dropped.
 */
typedef struct PurgedSpindle
{
	Oid			segment;		/* hash key */
	Oid			facade;
	int64		spindle_no;
	TimestampTz created_at;
	SubTransactionId subid;		/* in purged_now: the purging subxact */
} PurgedSpindle;

static HTAB *purged_spindles = NULL;

/*
 * Spindles this transaction purged completely, each with the subtransaction
 * that purged it: remembered if that one and the transaction commit.
 */
static List *purged_now = NIL;
static bool xact_callback_registered = false;

static bool
known_purged(Oid facade, SpindleEntry *sp)
{
	PurgedSpindle *p;

	if (purged_spindles == NULL)
		return false;
	p = hash_search(purged_spindles, &sp->segment, HASH_FIND, NULL);
	return p != NULL && p->facade == facade &&
		p->spindle_no == sp->spindle_no && p->created_at == sp->created_at;
}

static void
remember_purged(PurgedSpindle *from)
{
	PurgedSpindle *p;
	bool		found;

	if (purged_spindles == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(PurgedSpindle);
		ctl.hcxt = TopMemoryContext;
		purged_spindles = hash_create("spindle purged spindles", 64, &ctl,
									  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	p = hash_search(purged_spindles, &from->segment, HASH_ENTER, &found);
	*p = *from;
}

/*
 * Forget the spindles of the table that are gone: those numbered below its
 * oldest live one (spindles are dropped oldest first, and TRUNCATE's new
 * ones are numbered above the old), and those of any table whose relation
 * no longer exists (a dropped table).
 */
static void
forget_dropped(Oid facade, SpindleDirectory *dir)
{
	HASH_SEQ_STATUS status;
	PurgedSpindle *p;
	int64		oldest = dir->nspindles > 0 ? dir->spindles[0].spindle_no : PG_INT64_MAX;

	if (purged_spindles == NULL || hash_get_num_entries(purged_spindles) == 0)
		return;
	hash_seq_init(&status, purged_spindles);
	while ((p = hash_seq_search(&status)) != NULL)
	{
		if ((p->facade == facade && p->spindle_no < oldest) ||
			!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(p->segment)))
			hash_search(purged_spindles, &p->segment, HASH_REMOVE, NULL);
	}
}

/*
 * A purge rolled back with its subtransaction (ROLLBACK TO SAVEPOINT, an
 * exception block) is forgotten: its events are there again.  One that
 * commits into its parent becomes the parent's.
 */
static void
ttl_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					 SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;

	if (purged_now == NIL)
		return;
	if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		foreach(lc, purged_now)
		{
			PurgedSpindle *p = (PurgedSpindle *) lfirst(lc);

			if (p->subid == mySubid)
				p->subid = parentSubid;
		}
	}
	else if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		foreach(lc, purged_now)
		{
			PurgedSpindle *p = (PurgedSpindle *) lfirst(lc);

			if (p->subid == mySubid)
			{
				purged_now = foreach_delete_current(purged_now, lc);
				pfree(p);
			}
		}
	}
}

static void
ttl_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (purged_now == NIL)
		return;
	if (event == XACT_EVENT_COMMIT)
		foreach(lc, purged_now)
		{
			PurgedSpindle *p = (PurgedSpindle *) lfirst(lc);

			remember_purged(p);
		}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PARALLEL_ABORT)
	{
		list_free_deep(purged_now);
		purged_now = NIL;
	}
}

/* Remember, if this transaction commits, that sp is purged completely. */
static void
purged_at_commit(Oid facade, SpindleEntry *sp)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	PurgedSpindle *p = palloc(sizeof(PurgedSpindle));

	if (!xact_callback_registered)
	{
		RegisterXactCallback(ttl_xact_callback, NULL);
		RegisterSubXactCallback(ttl_subxact_callback, NULL);
		xact_callback_registered = true;
	}
	p->segment = sp->segment;
	p->facade = facade;
	p->spindle_no = sp->spindle_no;
	p->created_at = sp->created_at;
	p->subid = GetCurrentSubTransactionId();
	purged_now = lappend(purged_now, p);
	MemoryContextSwitchTo(old);
}

/*
 * The column holding a queue table's msg_id (the queue layer's
 * SPINDLE_QUEUE_ATT_MSG_ID): an annex's copies have no event numbers, so
 * the msg_id a lease is held by is read from the copy.
 */
#define TTL_ATT_MSG_ID	1

/*
 * What a purge also asks of an event besides its append time: that
 * column due_att (of the facade's descriptor desc; 0: none) be at or
 * before due_cutoff (see the ttl_not_before hook).
 */
typedef struct TtlDue
{
	TupleDesc	desc;
	AttrNumber	due_att;
	TimestampTz due_cutoff;
	/* the queue's consumer relation (AccessShareLock), or NULL */
	Relation	crel;
	/* per spindle or annex */
	SpindleEntry *sp;
	bool		annex;			/* ids from TTL_ATT_MSG_ID, no consume log */
	int64		first_no;		/* an event spindle's event k is first_no + k */
	int64	   *held;			/* sorted [start, end) pairs (ttl_held hook) */
	int			nheld;
	SpindleConsumed *log;		/* the consume log over the spindle */
	int			nlog;
	int64		log_floor;		/* PG_INT64_MIN: none */
	SpindleRelocation *moved;	/* entries hiding its copies (tree 3) */
	int			nmoved;
	/* the held items over every msg_id, read once for all annexes */
	bool		annex_held_read;
	int64	   *annex_held;
	int			annex_nheld;
} TtlDue;

/*
 * What the consume log says of event number no: SPINDLE_ENTRY_NONE (no
 * live entry: TTL decides), _RUNNING, or consumed for good (_DEAD).  A
 * consumed event is no TTL's to purge: its consumer counted it.
 */
static int
ttl_log_state(const SpindleConsumed *log, int nlog, int64 floor, int64 no)
{
	int			st;

	if (no < floor)
		return SPINDLE_ENTRY_DEAD;
	if (nlog == 0)
		return SPINDLE_ENTRY_NONE;
	st = spindle_consume_log_state(spindle_consume_log_find(log, nlog, no),
								   InvalidTransactionId);
	return st == SPINDLE_ENTRY_RECENT ? SPINDLE_ENTRY_DEAD : st;
}

/*
 * What tree 3 says of copy k: SPINDLE_ENTRY_NONE (no entry, or its mover
 * aborted: TTL decides), _RUNNING (a mover in progress, this transaction
 * included), or moved (_DEAD or _RECENT: the event lives on in its newer
 * copy, which TTL purges where it is).
 */
static int
ttl_moved_state(const SpindleRelocation *moved, int nmoved, int64 k)
{
	if (nmoved == 0)
		return SPINDLE_ENTRY_NONE;
	return spindle_reloc_state(spindle_reloc_find(moved, nmoved, k),
							   InvalidTransactionId);
}

/*
 * After TTL deleted copies ks[0..n) of due->sp (event numbers ids[0..n)
 * for an event spindle) of a queue table: how many a mover's or a
 * consumer's entry took first (written under the page's lock before TTL's
 * heap_delete, which then found no xmax).  Those stay deleted (hidden
 * either way) but are counted by their mover or consumer, not by TTL.
 * One look at the metapage, one range read of each tree there is.
 */
static int
ttl_taken_meanwhile(const TtlDue *due, const int64 *ks, const int64 *ids,
					int n)
{
	int64		klo = ks[0],
				khi = ks[0],
				lo = ids[0],
				hi = ids[0];
	bool		has_log,
				has_reloc;
	SpindleRelocation *moved = NULL;
	SpindleConsumed *log = NULL;
	int			nmoved = 0;
	int			nlog = 0;
	int64		floor = PG_INT64_MIN;
	int			taken = 0;

	for (int i = 1; i < n; i++)
	{
		klo = Min(klo, ks[i]);
		khi = Max(khi, ks[i]);
		lo = Min(lo, ids[i]);
		hi = Max(hi, ids[i]);
	}
	spindle_crel_trees_present(due->crel, &has_log, &has_reloc);
	if (has_reloc)
		moved = spindle_reloc_read(due->crel, due->sp->spindle_no, klo,
								   khi + 1, &nmoved);
	if (has_log && !due->annex)
	{
		log = spindle_consume_log_read(due->crel, lo, hi + 1, &nlog);
		floor = spindle_consume_log_floor(due->crel);
	}
	for (int i = 0; i < n; i++)
		if (ttl_moved_state(moved, nmoved, ks[i]) != SPINDLE_ENTRY_NONE ||
			(!due->annex &&
			 ttl_log_state(log, nlog, floor, ids[i]) != SPINDLE_ENTRY_NONE))
			taken++;
	if (moved != NULL)
		pfree(moved);
	if (log != NULL)
		pfree(log);
	return taken;
}

/* Is event number no in one of due's held ranges? */
static bool
ttl_is_held(const TtlDue *due, int64 no)
{
	int			lo = 0,
				hi = due->nheld - 1;

	while (lo <= hi)
	{
		int			mid = (lo + hi) / 2;

		if (no < due->held[2 * mid])
			hi = mid - 1;
		else if (no >= due->held[2 * mid + 1])
			lo = mid + 1;
		else
			return true;
	}
	return false;
}

/*
 * Does *due keep copy tuple (slot k) of due->sp from this purge?  Clears
 * *complete if it may be purged later: not due long enough, leased, or
 * taken by a mover or a consumer still running.  *id is set to its event
 * number (for a consumer's entry taken meanwhile; an annex's copy: its
 * msg_id if a lease needed it, else 0).
 */
static bool
ttl_keeps(const TtlDue *due, HeapTuple tuple, int64 k, int64 *id,
		  bool *complete)
{
	*id = due->annex ? 0 : due->first_no + k;
	if (due->due_att != 0)
	{
		bool		isnull;
		Datum		d = heap_getattr(tuple, due->due_att, due->desc, &isnull);

		/* a delayed event lives ttl from its due time */
		if (!isnull && DatumGetTimestampTz(d) > due->due_cutoff)
		{
			*complete = false;
			return true;
		}
	}
	/* moved by compaction: purged, if expired, from its newer copy */
	switch (ttl_moved_state(due->moved, due->nmoved, k))
	{
		case SPINDLE_ENTRY_NONE:
			break;
		case SPINDLE_ENTRY_RUNNING:
			*complete = false;	/* moved if that commits */
			return true;
		default:
			return true;
	}
	if (due->nheld > 0 && due->annex)
	{
		bool		isnull;
		Datum		d = heap_getattr(tuple, TTL_ATT_MSG_ID, due->desc, &isnull);

		if (!isnull)
			*id = DatumGetInt64(d);
	}
	if (due->nheld > 0 && ttl_is_held(due, *id))
	{
		*complete = false;		/* leased: purged when the lease ends */
		return true;
	}
	if (due->annex)
		return false;			/* the consume log covers no copy */
	switch (ttl_log_state(due->log, due->nlog, due->log_floor, *id))
	{
		case SPINDLE_ENTRY_DEAD:
			return true;		/* consumed */
		case SPINDLE_ENTRY_RUNNING:
			*complete = false;	/* consumed if that commits */
			return true;
		default:
			return false;
	}
}

/*
 * Delete the events of one page of due->sp that our snapshot sees and
 * whose append time is at or before cutoff (all of them when cutoff is
 * the maximum), and that *due lets go (ttl_keeps); count them.  *complete
 * is cleared when an expired event could not be deleted (another
 * transaction holds it), cannot be seen yet (its insert is still in
 * progress, or committed after our snapshot) or is kept for now.
 */
static int64
purge_page(Relation seg, BlockNumber blk, Snapshot snapshot, CommandId cid,
		   TransactionId horizon, uint32 cutoff, const TtlDue *due,
		   bool *complete)
{
	OffsetNumber offsets[MaxHeapTuplesPerPage];
	int64		ids[MaxHeapTuplesPerPage];
	int64		ks[MaxHeapTuplesPerPage];
	int			ndeleted = 0;
	int			n = 0;
	int			i;
	int64		purged = 0;
	Buffer		buf;
	Page		page;
	OffsetNumber off,
				maxoff;

	buf = ReadBuffer(seg, blk);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	maxoff = PageIsNew(page) ? 0 : PageGetMaxOffsetNumber(page);
	for (off = FirstOffsetNumber; off <= maxoff; off++)
	{
		ItemId		itemid = PageGetItemId(page, off);
		HeapTupleData tuple;
		int64		k;
		int64		id;

		if (!ItemIdIsNormal(itemid))
			continue;
		tuple.t_data = (HeapTupleHeader) PageGetItem(page, itemid);
		tuple.t_len = ItemIdGetLength(itemid);
		tuple.t_tableOid = RelationGetRelid(seg);
		ItemPointerSet(&tuple.t_self, blk, off);
		if (spindle_event_time(tuple.t_data, tuple.t_len) > cutoff)
			continue;
		k = spindle_event_k(tuple.t_data, tuple.t_len);
		if (ttl_keeps(due, &tuple, k, &id, complete))
			continue;
		if (HeapTupleSatisfiesVisibility(&tuple, snapshot, buf))
		{
			ids[n] = id;
			ks[n] = k;
			offsets[n++] = off;
		}
		else
		{
			HTSV_Result state = HeapTupleSatisfiesVacuum(&tuple, horizon, buf);

			/* not ours to see yet (an insert in progress): not done */
			if (state != HEAPTUPLE_DEAD && state != HEAPTUPLE_RECENTLY_DEAD)
				*complete = false;
		}
	}
	UnlockReleaseBuffer(buf);

	for (i = 0; i < n; i++)
	{
		ItemPointerData tid;
		TM_FailureData tmfd;

		ItemPointerSet(&tid, blk, offsets[i]);
		/* a consumer holding it locked keeps it: never wait for it */
		if (heap_delete(seg, &tid, cid, InvalidSnapshot, false, &tmfd,
						false) == TM_Ok)
		{
			ids[ndeleted] = ids[i];
			ks[ndeleted++] = ks[i];
		}
		else
			*complete = false;
	}
	purged = ndeleted;
	if (ndeleted > 0 && due->crel != NULL)
		purged -= ttl_taken_meanwhile(due, ks, ids, ndeleted);
	return purged;
}

/*
 * Release what a spindle's purge took under its own resource owner: its
 * locks (only the counts taken under it: a lock this transaction held
 * before keeps being held) and, with a warning, anything else left.
 */
static void
release_spindle_owner(ResourceOwner owner)
{
	ResourceOwnerRelease(owner, RESOURCE_RELEASE_BEFORE_LOCKS, true, false);
	/* not a commit: a commit would hand the locks to the parent owner */
	ResourceOwnerRelease(owner, RESOURCE_RELEASE_LOCKS, false, false);
	ResourceOwnerRelease(owner, RESOURCE_RELEASE_AFTER_LOCKS, true, false);
	ResourceOwnerDelete(owner);
}

/*
 * The table that a foreign key referencing rel lives in (rel itself for a
 * self-reference), or InvalidOid if none.  The foreign keys referencing a
 * table give it internal RI triggers (RI_TRIGGER_PK), which its relcache
 * entry already holds, so this costs a look at the table's triggers.
 * Self-references count: purging some events would leave the references
 * of others dangling.
 */
Oid
spindle_referencing_table(Relation rel)
{
	TriggerDesc *td = rel->trigdesc;
	int			i;

	if (td == NULL)
		return InvalidOid;
	for (i = 0; i < td->numtriggers; i++)
	{
		Trigger    *t = &td->triggers[i];

		if (t->tgisinternal && RI_FKey_trigger_type(t->tgfoid) == RI_TRIGGER_PK)
			return OidIsValid(t->tgconstrrelid) ? t->tgconstrrelid :
				RelationGetRelid(rel);
	}
	return InvalidOid;
}

/*
 * A purge deletes events without firing triggers, so it would skip the
 * checks of the foreign keys that reference the table and leave their rows
 * orphaned: refuse, as TRUNCATE refuses.  The caller holds the table in
 * RowExclusiveLock mode, which keeps out ADD FOREIGN KEY (SHARE ROW
 * EXCLUSIVE on the referenced table) until it ends.
 */
static void
refuse_if_referenced(Relation facade)
{
	Oid			referencing = spindle_referencing_table(facade);

	if (OidIsValid(referencing))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot purge expired events of \"%s\": a foreign key constraint references it",
						RelationGetRelationName(facade)),
				 errdetail("Table \"%s\" references \"%s\", and a purge does not check foreign keys.",
						   get_rel_name(referencing),
						   RelationGetRelationName(facade)),
				 errhint("Delete expired events with DELETE, or drop the foreign key constraint.")));
}

/*
 * Read what *due needs for spindle or annex sp of the facade: the held
 * items over its events (for an annex, whose copies' msg_ids may be any,
 * over every msg_id, read once per purge), then, on a queue table, in one
 * look at the consumer relation's metapage, the consume log over its
 * events (not for an annex: the log covers no copy) and the entries of
 * tree 3 hiding its copies.  The log after the held items: a claim ends
 * in an entry.
 */
static void
ttl_enter(Relation facade, SpindleEntry *sp, TtlDue *due)
{
	bool		has_log;
	bool		has_reloc;

	due->sp = sp;
	due->annex = spindle_is_annex(sp);
	due->first_no = due->annex ? 0 : sp->first_no;
	due->held = NULL;
	due->nheld = 0;
	due->log = NULL;
	due->nlog = 0;
	due->log_floor = PG_INT64_MIN;
	due->moved = NULL;
	due->nmoved = 0;
	if (due->annex)
	{
		if (!due->annex_held_read && spindle_table_hooks.ttl_held)
			due->annex_held = spindle_table_hooks.ttl_held(facade, PG_INT64_MIN,
														   PG_INT64_MAX,
														   &due->annex_nheld);
		due->annex_held_read = true;
		due->held = due->annex_held;
		due->nheld = due->annex_nheld;
	}
	else if (spindle_table_hooks.ttl_held)
		due->held = spindle_table_hooks.ttl_held(facade, sp->first_no,
												 sp->first_no + spindle_effective_capacity(sp),
												 &due->nheld);
	if (due->crel == NULL)
		return;
	spindle_crel_trees_present(due->crel, &has_log, &has_reloc);
	if (has_log && !due->annex)
	{
		due->log = spindle_consume_log_read(due->crel, sp->first_no,
											sp->first_no + sp->vcount,
											&due->nlog);
		due->log_floor = spindle_consume_log_floor(due->crel);
	}
	if (has_reloc)
		due->moved = spindle_reloc_read(due->crel, sp->spindle_no, 0,
										SPINDLE_MAX_CAPACITY, &due->nmoved);
}

/* Free what ttl_enter read for one spindle. */
static void
ttl_leave(TtlDue *due)
{
	if (due->held != NULL && due->held != due->annex_held)
		pfree(due->held);
	if (due->log != NULL)
		pfree(due->log);
	if (due->moved != NULL)
		pfree(due->moved);
	due->held = NULL;
	due->log = NULL;
	due->moved = NULL;
}

/*
 * Purge spindle or annex i of dir: its events appended at or before the
 * cutoff (cutoff_s its second), or every event when it is a full event
 * spindle filled at or before the cutoff (*whole).  Returns how many were
 * purged, or -1 if it is gone; *complete is cleared as purge_page says.
 * The spindle's locks belong to a resource owner of its own and are
 * released when it is done (header comment).
 */
static int64
purge_one(Relation facade, SpindleDirectory *dir, int i, TtlDue *due,
		  Snapshot snapshot, CommandId cid, TimestampTz cutoff,
		  uint32 cutoff_s, bool *whole, bool *complete)
{
	SpindleEntry *sp = spindle_dir_entry(dir, i);
	Relation	seg;
	int64		here = 0;
	ResourceOwner saved_owner = CurrentResourceOwner;
	ResourceOwner spindle_owner;

	*whole = false;
	*complete = true;
	spindle_owner = ResourceOwnerCreate(saved_owner, "spindle TTL purge");
	CurrentResourceOwner = spindle_owner;
	PG_TRY();
	{
		seg = spindle_open_segment(facade, sp, RowExclusiveLock);
		if (seg != NULL)
		{
			TimestampTz filled_at;
			BlockNumber nblocks;
			TransactionId horizon;

			/* an annex holds old copies beside new ones: read it all */
			if (!spindle_is_annex(sp))
				*whole = spindle_slots_full(facade, dir, i, &filled_at) &&
					filled_at != 0 && filled_at <= cutoff;
			ttl_enter(facade, sp, due);
			nblocks = RelationGetNumberOfBlocks(seg);
			/* once per spindle: computing it scans the proc array */
			horizon = GetOldestNonRemovableTransactionId(seg);
			for (BlockNumber blk = 0; blk < nblocks; blk++)
			{
				int64		n;

				CHECK_FOR_INTERRUPTS();
				n = purge_page(seg, blk, snapshot, cid, horizon,
							   *whole ? PG_UINT32_MAX : cutoff_s,
							   due, complete);
				/* counted at commit (counters.c) */
				if (n > 0)
					spindle_counters_deleted(sp->segment, (int) n);
				here += n;
			}
			ttl_leave(due);
			relation_close(seg, NoLock);
		}
	}
	PG_CATCH();
	{
		/* the abort releases spindle_owner with its parent */
		CurrentResourceOwner = saved_owner;
		PG_RE_THROW();
	}
	PG_END_TRY();
	CurrentResourceOwner = saved_owner;
	release_spindle_owner(spindle_owner);
	if (seg == NULL)
		return -1;
	if (here > 0)
		spindle_note_touched(RelationGetRelid(facade), sp->spindle_no);
	return here;
}

/*
 * Purge every event of the facade appended at or before `cutoff` (see the
 * header comment); returns how many events were purged.  Deletes happen in
 * the current transaction.  Event spindles first, oldest first, up to the
 * first created after the cutoff; then every annex.
 */
int64
spindle_purge_older_than(Relation facade, TimestampTz cutoff)
{
	SpindleDirectory *dir;
	Snapshot	snapshot = GetTransactionSnapshot();
	CommandId	cid = GetCurrentCommandId(true);
	uint32		cutoff_s = spindle_time_floor(cutoff);
	int64		purged = 0;
	int			i;
	TtlDue		due;
	Oid			croid;

	/*
	 * DELETE's lock.  purge_expired() holds it; the worker's step holds
	 * AccessShareLock and never waits: while someone keeps writes out
	 * (CREATE INDEX, LOCK TABLE ... SHARE) it purges at its next round.
	 */
	if (!CheckRelationLockedByMe(facade, RowExclusiveLock, true) &&
		!ConditionalLockRelationOid(RelationGetRelid(facade), RowExclusiveLock))
		return 0;
	refuse_if_referenced(facade);
	memset(&due, 0, sizeof(due));
	due.desc = RelationGetDescr(facade);
	due.due_att = spindle_table_hooks.ttl_not_before ?
		spindle_table_hooks.ttl_not_before(facade) : 0;
	due.due_cutoff = cutoff;
	/* a queue table's consumer relation: its consume log and tree 3 */
	if (spindle_hidden_applies(facade) &&
		OidIsValid(croid = spindle_consumer_rel_oid(RelationGetRelid(facade))))
		due.crel = try_relation_open(croid, AccessShareLock);

	dir = spindle_directory_acquire(facade);
	forget_dropped(RelationGetRelid(facade), dir);
	for (i = 0; i < dir->nspindles; i++)
	{
		SpindleEntry *sp = &dir->spindles[i];
		bool		whole;
		bool		complete;
		int64		here;

		/* events of a spindle are never older than the spindle */
		if (sp->created_at > cutoff)
			break;
		if (known_purged(RelationGetRelid(facade), sp))
			continue;
		here = purge_one(facade, dir, i, &due, snapshot, cid, cutoff,
						 cutoff_s, &whole, &complete);
		if (here < 0)
			continue;
		purged += here;
		if (whole && complete)
			purged_at_commit(RelationGetRelid(facade), sp);
	}
	/* an annex's copies keep their append times: no shortcut, no memory */
	for (i = dir->nspindles; i < spindle_dir_nall(dir); i++)
	{
		bool		whole;
		bool		complete;
		int64		here;

		here = purge_one(facade, dir, i, &due, snapshot, cid, cutoff,
						 cutoff_s, &whole, &complete);
		if (here > 0)
			purged += here;
	}
	spindle_directory_release(dir);
	if (due.annex_held != NULL)
		pfree(due.annex_held);
	if (due.crel != NULL)
		relation_close(due.crel, NoLock);
	CommandCounterIncrement();
	return purged;
}

/*
 * The cutoff now - ttl into *cutoff; false if it lies before 2000-01-01,
 * the earliest append time an event can carry (layout.c), so that no
 * event is that old.  A ttl near the largest interval (178 000 000 years,
 * which the time_to_live option accepts) would make the subtraction fail
 * with "timestamp out of range"; it is answered here without it.  The
 * test is loose (interval_cmp counts a month as 30 days): any ttl it lets
 * through is below about 55 years plus a year, far from an overflow.
 */
bool
spindle_ttl_cutoff(const Interval *ttl, TimestampTz now, TimestampTz *cutoff)
{
	Interval	limit;

	memset(&limit, 0, sizeof(limit));
	limit.time = 2 * Max(now, 0) + USECS_PER_DAY * 366;
	if (DatumGetInt32(DirectFunctionCall2(interval_cmp,
										  IntervalPGetDatum(ttl),
										  IntervalPGetDatum(&limit))) > 0)
		return false;
	*cutoff = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
													  TimestampTzGetDatum(now),
													  IntervalPGetDatum(ttl)));
	return true;
}

/*
 * spindle.purge_expired(rel regclass, ttl interval DEFAULT NULL)
 *	  RETURNS bigint
 *
 * Needs the table's owner (or a member of the owning role), checked before
 * the table is locked, so that a role without the right never queues a
 * lock behind the table's users.  A TTL purge is retention maintenance:
 * like TRUNCATE it fires no row triggers and is not filtered by row-level
 * security.  So an owner whom row-level security applies to (FORCE ROW
 * LEVEL SECURITY, no BYPASSRLS) is refused rather than allowed to purge
 * events its policies hide from it.  Locks the table in RowExclusiveLock
 * mode, as DELETE does.
 */
Datum
spindle_purge_expired(PG_FUNCTION_ARGS)
{
	Oid			relid;
	Relation	rel;
	Interval	ttl;
	TimestampTz cutoff;
	int64		purged;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("relation must not be NULL")));
	PreventCommandIfReadOnly("spindle.purge_expired()");
	relid = PG_GETARG_OID(0);
	/* rights before the lock; an unknown OID is an error here already */
	if (!pg_class_ownercheck(relid, GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_TABLE, get_rel_name(relid));
	if (check_enable_rls(relid, InvalidOid, false) == RLS_ENABLED)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("cannot purge expired events of \"%s\": row-level security applies to the current user",
						get_rel_name(relid)),
				 errdetail("A purge is not filtered by row-level security policies."),
				 errhint("Run it as a role that bypasses row-level security, or use ALTER TABLE ... NO FORCE ROW LEVEL SECURITY.")));
	rel = spindle_open_facade(relid, RowExclusiveLock);

	if (!PG_ARGISNULL(1))
		ttl = *PG_GETARG_INTERVAL_P(1);
	else if (!spindle_rel_ttl_option(relid, &ttl))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("spindle table \"%s\" has no time_to_live",
						RelationGetRelationName(rel)),
				 errhint("Pass a ttl, or set one with ALTER TABLE %s SET (time_to_live = '1 hour').",
						 RelationGetRelationName(rel))));
	{
		Interval	zero;

		memset(&zero, 0, sizeof(zero));
		if (DatumGetInt32(DirectFunctionCall2(interval_cmp,
											  IntervalPGetDatum(&ttl),
											  IntervalPGetDatum(&zero))) < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ttl must not be negative")));
	}
	if (spindle_ttl_cutoff(&ttl, GetCurrentTimestamp(), &cutoff))
		purged = spindle_purge_older_than(rel, cutoff);
	else
		purged = 0;				/* no event is that old */
	relation_close(rel, NoLock);
	PG_RETURN_INT64(purged);
}
