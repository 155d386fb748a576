/*-------------------------------------------------------------------------
 *
 * hidden.c
 *	  Events hidden by the consume log: the one rule every reader of a
 *	  queue table applies after heap's own test on the event's header
 *	  (docs/design.md, "Consumer state that scales with what stays",
 *	  sections 4 and 9, "Consume log (built)").
 *
 * An event with msg_id m (= first_no + k in its spindle) that heap finds
 * visible is hidden iff an entry of the consume log (consume_log.c)
 * covers m whose xid, for the reader, counts as a committed deletion:
 *
 *	MVCC snapshot X		the current transaction with cid < X->curcid, or
 *						not in X (XidInMVCCSnapshot) and committed
 *	SnapshotDirty		committed or own; running: visible, X->xmax set
 *						to the entry's xid (the caller waits, as for a
 *						deleter in progress)
 *	SnapshotSelf		committed or own (also ANALYZE, index builds)
 *	SnapshotAny, others	nothing hidden
 *
 * Aborted entries hide nothing; frozen ones (xid FrozenTransactionId,
 * written by VACUUM for entries committed before its freeze limit) and
 * ids below the log's floor (settle folded their entries into it) hide
 * from every snapshot that hides anything.  The floor is read after the
 * entries (when a spindle is entered, or after a probe found none).
 * Only queue tables (those with a consumer relation) have a consume log;
 * whether a facade has one is kept in a backend-local hash, emptied by
 * any relcache invalidation, so other spindle tables pay one hash probe
 * per scan or fetch.
 *
 * Coherence.  Nothing is cached beyond one reader.  An MVCC scan decides,
 * when it begins (its snapshot taken), whether the log exists at all (one
 * metapage look), and when it enters a spindle reads the entries of the
 * spindle's id range once, after its snapshot, into a sorted array of
 * hidden id ranges: an entry the snapshot sees as committed was written
 * before that commit, hence before the snapshot and the read; entries
 * written later belong to xids the snapshot cannot see as committed, or
 * to its own transaction with a command id at or above its curcid.  Index
 * builds (SnapshotAny, ShareLock on the table: no writer runs) read the
 * ranges the same way with SnapshotSelf's rule.  Other readers probe the
 * tree for each event.
 *
 * Lock protocol with DML (spindle_hidden_dml_check).  A writer of entries
 * holds a share lock of the event's page while it checks that the event
 * has no xmax (HeapTupleSatisfiesUpdate is TM_Ok) and writes its entry.
 * DELETE, UPDATE and row locks check the log before heap's call and again
 * after it returned TM_Ok.  Heap sets its xmax under the page's exclusive
 * lock: either the writer saw that xmax and consumed nothing, or its entry
 * was in the tree before heap's call ended, and the second check finds it
 * and waits for its xid; if that commits, the call says TM_Deleted (the
 * xmax heap wrote stays on an event the entry hides from everyone).  So no
 * event is both consumed by a committed entry and deleted by a committed
 * DELETE.
 *
 * Relocation entries (tree 3, storage/relocation.c; design "Compaction of
 * sparse spindles", section 4).  A copy (spindle_no, k) of an event, in
 * an event spindle or an annex, is hidden iff tree 3 has an entry for it
 * whose mover (xid, cid), for the reader, counts as a committed deletion:
 * the same rule as above, applied to the entry's xid and command id.  The
 * new copy's xmin and cmin are the mover's, so every snapshot sees
 * exactly one copy.  MVCC scans read, when they enter a spindle or annex,
 * the slots its entries hide (one range read of tree 3, after the
 * snapshot); fetches and other snapshots probe for the one copy.  A
 * queue table whose metapage names no tree 3 pays nothing more: the flag
 * is read in the metapage look made for the consume log
 * (spindle_crel_trees_present).  DML on a hidden copy is refused with
 * 40001 (spindle_hidden_dml_check); following the move is a later step.
 *
 * Locks taken here: the consumer relation AccessShareLock, to the end of
 * the transaction; buffer locks of the consumer relation one at a time
 * (consumer_tree.c), never while an event page is locked by the reader.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/transam.h"
#include "access/xact.h"
#include "storage/lmgr.h"
#include "storage/procarray.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "table/spindle_table.h"

/* ----------------------------------------------------------------
 * Which facades are queue tables
 * ----------------------------------------------------------------
 */
typedef struct CrelCacheEntry
{
	Oid			facade;			/* key */
	Oid			croid;			/* its consumer relation, or InvalidOid */
} CrelCacheEntry;

static HTAB *crel_cache = NULL;

/*
 * Any relcache invalidation empties the cache: creations and drops too.
 * Called from directory.c's relcache callback (PostgreSQL has room for
 * only ten such callbacks in all, for every loaded library).
 */
void
spindle_hidden_invalidate(Oid relid)
{
	HASH_SEQ_STATUS st;
	CrelCacheEntry *e;

	if (crel_cache == NULL)
		return;
	hash_seq_init(&st, crel_cache);
	while ((e = hash_seq_search(&st)) != NULL)
		(void) hash_search(crel_cache, &e->facade, HASH_REMOVE, NULL);
}

/* The consumer relation of facade, or InvalidOid: not a queue table. */
static Oid
hidden_crel_oid(Relation facade)
{
	Oid			relid = RelationGetRelid(facade);
	CrelCacheEntry *e;
	bool		found;

	if (crel_cache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(CrelCacheEntry);
		ctl.hcxt = TopMemoryContext;
		crel_cache = hash_create("spindle consume log relations", 64, &ctl,
								 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	e = hash_search(crel_cache, &relid, HASH_FIND, NULL);
	if (e != NULL)
		return e->croid;
	{
		Oid			croid = spindle_consumer_rel_oid(relid);

		e = hash_search(crel_cache, &relid, HASH_ENTER, &found);
		e->croid = croid;
		return croid;
	}
}

/* ----------------------------------------------------------------
 * The rule for one entry
 * ----------------------------------------------------------------
 */

/*
 * What entry e means for snapshot: SPINDLE_HIDE_NO (visible),
 * SPINDLE_HIDE_YES (hidden) or SPINDLE_HIDE_RUNNING (SnapshotDirty: an
 * xid in progress consumes it; visible, the caller waits).
 */
static SpindleHideVerdict
entry_verdict(const SpindleConsumed *e, Snapshot snapshot)
{
	TransactionId xid = XidFromFullTransactionId(e->fxid);

	/* frozen (VACUUM): committed before every snapshot */
	if (xid == FrozenTransactionId)
		return SPINDLE_HIDE_YES;
	if (!TransactionIdIsNormal(xid))
		return SPINDLE_HIDE_NO;
	switch (snapshot->snapshot_type)
	{
		case SNAPSHOT_MVCC:
			if (TransactionIdIsCurrentTransactionId(xid))
				return e->cid < snapshot->curcid ?
					SPINDLE_HIDE_YES : SPINDLE_HIDE_NO;
			if (XidInMVCCSnapshot(xid, snapshot))
				return SPINDLE_HIDE_NO;
			return TransactionIdDidCommit(xid) ?
				SPINDLE_HIDE_YES : SPINDLE_HIDE_NO;
		case SNAPSHOT_DIRTY:
		case SNAPSHOT_SELF:
			if (TransactionIdIsCurrentTransactionId(xid))
				return SPINDLE_HIDE_YES;
			if (TransactionIdIsInProgress(xid))
				return snapshot->snapshot_type == SNAPSHOT_DIRTY ?
					SPINDLE_HIDE_RUNNING : SPINDLE_HIDE_NO;
			return TransactionIdDidCommit(xid) ?
				SPINDLE_HIDE_YES : SPINDLE_HIDE_NO;
		default:
			return SPINDLE_HIDE_NO;
	}
}

/* Does snapshot's type hide anything at all? */
static bool
snapshot_hides(Snapshot snapshot)
{
	return snapshot != NULL &&
		(snapshot->snapshot_type == SNAPSHOT_MVCC ||
		 snapshot->snapshot_type == SNAPSHOT_DIRTY ||
		 snapshot->snapshot_type == SNAPSHOT_SELF);
}

/* ----------------------------------------------------------------
 * Readers
 * ----------------------------------------------------------------
 */

/*
 * Prepare h for a reader of facade with snapshot (scan or fetch state).
 * by_spindle: read each spindle's entries once when the reader enters it
 * (MVCC scans; index builds, whose writers are locked out); else probe
 * per event (single fetches, Dirty and Self scans).  The consumer
 * relation is opened AccessShareLock.
 */
void
spindle_hide_begin(SpindleHide *h, Relation facade, Snapshot snapshot,
				   bool by_spindle)
{
	Oid			croid;

	memset(h, 0, sizeof(*h));
	h->floor = PG_INT64_MIN;
	h->snapshot = snapshot;
	h->cxt = CurrentMemoryContext;
	if (!snapshot_hides(snapshot))
		return;
	croid = hidden_crel_oid(facade);
	if (!OidIsValid(croid))
		return;
	h->crel = try_relation_open(croid, AccessShareLock);
	if (h->crel == NULL)
		return;
	h->by_spindle = by_spindle;
	h->log = h->reloc = true;
	/*
	 * No log, no relocation entries yet: nothing an MVCC snapshot taken
	 * before now can miss (one look at the metapage for both).  Other
	 * snapshots read the trees for each event.
	 */
	if (IsMVCCSnapshot(snapshot))
	{
		spindle_crel_trees_present(h->crel, &h->log, &h->reloc);
		if (!h->log && !h->reloc)
			spindle_hide_end(h);
	}
}

void
spindle_hide_end(SpindleHide *h)
{
	if (h->crel != NULL)
		relation_close(h->crel, NoLock);
	h->crel = NULL;
	if (h->ranges != NULL)
		pfree(h->ranges);
	h->ranges = NULL;
	h->nranges = 0;
	if (h->moved != NULL)
		pfree(h->moved);
	h->moved = NULL;
	h->nmoved = 0;
	h->spindle_no = 0;
}

/*
 * The verdict on the previous entry's xid, for runs of entries of one
 * transaction (the clog and snapshot tests made once per xid; the current
 * transaction's entries still differ by command id).
 */
typedef struct VerdictCache
{
	TransactionId xid;
	bool		own;
	SpindleHideVerdict verdict; /* when !own */
} VerdictCache;

static SpindleHideVerdict
verdict_cached(const SpindleConsumed *e, Snapshot snapshot, VerdictCache *vc)
{
	TransactionId xid = XidFromFullTransactionId(e->fxid);

	if (!TransactionIdIsValid(vc->xid) || xid != vc->xid)
	{
		vc->xid = xid;
		vc->own = TransactionIdIsNormal(xid) &&
			TransactionIdIsCurrentTransactionId(xid);
		if (!vc->own)
			vc->verdict = entry_verdict(e, snapshot);
	}
	return vc->own ? entry_verdict(e, snapshot) : vc->verdict;
}

/* A relocation entry as the rule for one entry reads it. */
static SpindleHideVerdict
reloc_verdict(const SpindleRelocation *r, Snapshot snapshot)
{
	SpindleConsumed e;

	e.first = 0;
	e.len = 1;
	e.fxid = FullTransactionIdFromEpochAndXid(0, r->xid);
	e.cid = r->cid;
	return entry_verdict(&e, snapshot);
}

/*
 * Read the slots of spindle (or annex) sp that relocation entries hide
 * from snap into h->moved: one range read of tree 3, after the snapshot
 * (see "Coherence").  In h->cxt.
 */
static void
moved_enter(SpindleHide *h, SpindleEntry *sp, Snapshot snap)
{
	SpindleRelocation *e;
	int			n;

	if (h->moved != NULL)
		pfree(h->moved);
	h->moved = NULL;
	h->nmoved = 0;
	e = spindle_reloc_read(h->crel, sp->spindle_no, 0, sp->vcount, &n);
	if (n == 0)
		return;
	h->moved = palloc(sizeof(int64) * n);
	for (int i = 0; i < n; i++)
		if (reloc_verdict(&e[i], snap) == SPINDLE_HIDE_YES)
			h->moved[h->nmoved++] = e[i].source_k;
	pfree(e);
}

/* Is slot k in h->moved (sorted)? */
static bool
in_moved(SpindleHide *h, int64 k)
{
	int			lo = 0,
				hi = h->nmoved;

	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;

		if (h->moved[mid] == k)
			return true;
		if (h->moved[mid] < k)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

/*
 * Does a relocation entry hide copy k of sp from h's snapshot (h->reloc,
 * not by_spindle)?  One probe of tree 3.  With SnapshotDirty, a move in
 * progress leaves it visible and sets the snapshot's xmax to its xid.
 */
static bool
moved_probe(SpindleHide *h, SpindleEntry *sp, int64 k)
{
	SpindleRelocation r;

	if (!spindle_reloc_probe(h->crel, sp->spindle_no, k, &r))
		return false;
	switch (reloc_verdict(&r, h->snapshot))
	{
		case SPINDLE_HIDE_YES:
			return true;
		case SPINDLE_HIDE_RUNNING:
			h->snapshot->xmax = r.xid;
			return false;
		default:
			return false;
	}
}

/* Read the hidden ranges and moved slots of spindle sp (h->by_spindle). */
static void
hide_enter(SpindleHide *h, SpindleEntry *sp)
{
	MemoryContext old = MemoryContextSwitchTo(h->cxt);
	SpindleConsumed *e;
	int			n;
	int			i;
	SnapshotData self;
	Snapshot	snap = h->snapshot;
	VerdictCache vc = {InvalidTransactionId};

	if (h->ranges != NULL)
		pfree(h->ranges);
	h->ranges = NULL;
	h->nranges = 0;
	h->hint = 0;
	h->floor = PG_INT64_MIN;
	if (!IsMVCCSnapshot(snap))
	{
		/* index builds: committed or own, as SnapshotSelf */
		self.snapshot_type = SNAPSHOT_SELF;
		snap = &self;
	}
	h->spindle_no = sp->spindle_no;
	if (h->reloc)
		moved_enter(h, sp, snap);
	/* an annex's copies have no event numbers: the log hides none */
	if (!h->log || spindle_is_annex(sp))
	{
		MemoryContextSwitchTo(old);
		return;
	}
	e = spindle_consume_log_read(h->crel, sp->first_no,
								 sp->first_no + sp->vcount, &n);
	if (n > 0)
		h->ranges = palloc(sizeof(int64) * 2 * n);
	for (i = 0; i < n; i++)
		if (verdict_cached(&e[i], snap, &vc) == SPINDLE_HIDE_YES)
		{
			h->ranges[2 * h->nranges] = e[i].first;
			h->ranges[2 * h->nranges + 1] = e[i].first + e[i].len;
			h->nranges++;
		}
	if (e != NULL)
		pfree(e);
	/* after the entries: see spindle_consume_log_floor */
	h->floor = spindle_consume_log_floor(h->crel);
	MemoryContextSwitchTo(old);
}

/*
 * Is id in one of h's hidden ranges?  A scan meets a spindle's events
 * mostly in increasing id order, so the search starts at the range the
 * last one ended at and moves right (amortised O(1) per event); an id
 * below it is found by binary search.
 */
static bool
in_ranges(SpindleHide *h, int64 id)
{
	int			lo = 0,
				hi = h->nranges;
	int			i = h->hint;

	if (h->nranges == 0)
		return false;
	if (i == 0 || id >= h->ranges[2 * i - 1])
	{
		while (i < h->nranges && id >= h->ranges[2 * i + 1])
			i++;
		h->hint = i;
		return i < h->nranges && id >= h->ranges[2 * i];
	}
	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;

		if (id < h->ranges[2 * mid])
			hi = mid;
		else if (id >= h->ranges[2 * mid + 1])
			lo = mid + 1;
		else
		{
			h->hint = mid;
			return true;
		}
	}
	h->hint = lo;
	return false;
}

/*
 * Is event k of spindle sp, which heap's test found visible to h's
 * snapshot, hidden from it?  With SnapshotDirty, an entry in progress
 * leaves it visible and sets the snapshot's xmax to its xid.
 */
bool
spindle_hide_event(SpindleHide *h, SpindleEntry *sp, int64 k)
{
	int64		id = sp->first_no + k;
	SpindleConsumed e;

	if (h->crel == NULL)
		return false;
	if (h->by_spindle)
	{
		if (h->spindle_no != sp->spindle_no)
			hide_enter(h, sp);
		if (h->nmoved > 0 && in_moved(h, k))
			return true;
		/* an annex's copies have no event numbers: the log hides none */
		if (!h->log || spindle_is_annex(sp))
			return false;
		return id < h->floor || in_ranges(h, id);
	}
	if (h->reloc && moved_probe(h, sp, k))
		return true;
	if (!h->log || spindle_is_annex(sp))
		return false;
	if (!spindle_consume_log_probe(h->crel, id, &e))
		return id < spindle_consume_log_floor(h->crel);
	switch (entry_verdict(&e, h->snapshot))
	{
		case SPINDLE_HIDE_YES:
			return true;
		case SPINDLE_HIDE_RUNNING:
			h->snapshot->xmax = XidFromFullTransactionId(e.fxid);
			return false;
		default:
			return false;
	}
}

/* One event, one probe: for single fetches. */
bool
spindle_event_hidden(Relation facade, SpindleEntry *sp, int64 k,
					 Snapshot snapshot)
{
	SpindleHide h;
	bool		hidden;

	spindle_hide_begin(&h, facade, snapshot, false);
	hidden = spindle_hide_event(&h, sp, k);
	spindle_hide_end(&h);
	return hidden;
}

/* ----------------------------------------------------------------
 * DELETE, UPDATE and row locks
 * ----------------------------------------------------------------
 */

static void reloc_refuse(Relation facade, Relation crel, SpindleEntry *sp,
						 int64 k);

/* Is facade a queue table, whose DML must check the consume log? */
bool
spindle_hidden_applies(Relation facade)
{
	return OidIsValid(hidden_crel_oid(facade));
}

/*
 * May DML of the calling transaction act on event k of spindle sp (at
 * virtual TID vtid of facade)?  TM_Ok if no live entry consumes it (none,
 * or aborted).  An entry of the current transaction: TM_SelfModified; a
 * committed one: TM_Deleted, as a committed DELETE would be met (tmfd's
 * xmax its xid).  One in progress: waited for and looked at again under
 * LockWaitBlock; TM_WouldBlock under LockWaitSkip; 55P03 under
 * LockWaitError.  Called before heap's call and again after it returned
 * TM_Ok (see the lock protocol above).  First, and also for an annex's
 * copy (consumed false: the log holds none of its ids), a copy moved by
 * compaction is refused (reloc_refuse).  One look at the metapage for a
 * queue table with neither a log nor a moved copy.  No buffer lock held.
 */
TM_Result
spindle_hidden_dml_check(Relation facade, SpindleEntry *sp, int64 k,
						 ItemPointer vtid, LockWaitPolicy policy,
						 TM_FailureData *tmfd, bool consumed)
{
	Oid			croid = hidden_crel_oid(facade);
	Relation	crel;
	TM_Result	result = TM_Ok;
	bool		log;
	bool		reloc;

	if (!OidIsValid(croid) ||
		(crel = try_relation_open(croid, AccessShareLock)) == NULL)
		return TM_Ok;
	/* one look at the metapage says which trees there are to probe */
	spindle_crel_trees_present(crel, &log, &reloc);
	if (reloc)
		reloc_refuse(facade, crel, sp, k);
	if (!consumed || !log)
	{
		/* no log: no entry, no floor (only settle raises it) */
		relation_close(crel, NoLock);
		return TM_Ok;
	}
	for (;;)
	{
		SpindleConsumed e;
		TransactionId xid;

		if (!spindle_consume_log_probe(crel, sp->first_no + k, &e))
		{
			/* below the floor: consumed before every snapshot */
			if (sp->first_no + k < spindle_consume_log_floor(crel))
			{
				tmfd->ctid = *vtid;
				tmfd->xmax = FrozenTransactionId;
				tmfd->cmax = InvalidCommandId;
				result = TM_Deleted;
			}
			break;
		}
		xid = XidFromFullTransactionId(e.fxid);
		if (xid == FrozenTransactionId)
		{
			tmfd->ctid = *vtid;
			tmfd->xmax = xid;
			tmfd->cmax = InvalidCommandId;
			result = TM_Deleted;
			break;
		}
		if (!TransactionIdIsNormal(xid))
			break;
		tmfd->ctid = *vtid;
		tmfd->xmax = xid;
		tmfd->cmax = InvalidCommandId;
		if (TransactionIdIsCurrentTransactionId(xid))
		{
			tmfd->cmax = e.cid;
			result = TM_SelfModified;
			break;
		}
		if (TransactionIdIsInProgress(xid))
		{
			if (policy == LockWaitSkip)
			{
				result = TM_WouldBlock;
				break;
			}
			if (policy == LockWaitError)
				ereport(ERROR,
						(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
						 errmsg("could not obtain lock on row in relation \"%s\"",
								RelationGetRelationName(facade)),
						 errdetail("A transaction in progress consumes the event.")));
			XactLockTableWait(xid, facade, vtid, XLTW_Delete);
			continue;
		}
		if (TransactionIdDidCommit(xid))
			result = TM_Deleted;
		break;
	}
	relation_close(crel, NoLock);
	return result;
}

/*
 * DML (DELETE, UPDATE, row locks) on copy k of sp (a spindle or an
 * annex) of facade: refused with 40001 if a relocation entry of a live
 * mover (committed, frozen, in progress, or this transaction) hides it.
 * Following the move to the new copy (TM_Updated, EvalPlanQual: design,
 * section 4, "Plain DML") is not built yet; until then the statement
 * fails rather than act on a copy that may be hidden.  Called before
 * heap's call and again after it returned TM_Ok (an entry written in
 * between), from spindle_hidden_dml_check, which has the consumer
 * relation crel open and has seen that it has a tree 3.  No buffer lock
 * held.
 */
static void
reloc_refuse(Relation facade, Relation crel, SpindleEntry *sp, int64 k)
{
	if (spindle_reloc_moved(crel, sp->spindle_no, k))
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not serialize access due to concurrent relocation"),
				 errdetail("A row of spindle table \"%s\" was moved to an annex by compaction.",
						   RelationGetRelationName(facade)),
				 errhint("Retry the transaction.")));
}
