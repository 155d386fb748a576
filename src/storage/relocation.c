/*-------------------------------------------------------------------------
 *
 * relocation.c
 *	  Relocation entries of a queue (compaction of sparse spindles,
 *	  docs/design.md "Compaction of sparse spindles", sections 3, 4 and 6):
 *	  tree 3 of the queue's consumer relation (SPINDLE_TREE_RELOC) says
 *	  which copies of events were moved, and by whom; tree 4
 *	  (SPINDLE_TREE_RELOC_IDS) maps a moved event's msg_id to its oldest
 *	  copy.  Both are trees of consumer_tree.c.  Readers: the hiding rule
 *	  (table/hidden.c) and consumers following moves (queue/queue.c, through
 *	  spindle_reloc_follow and the probes at the end of this file); the
 *	  mover (the test-only spindle._relocate) in
 *	  table/relocate.c; the freeze is called by VACUUM of the consumer
 *	  relation (consumer_rel.c), beside the consume log's.
 *
 * A copy is named by (spindle_no, k), k its slot in its spindle or annex,
 * and keyed spindle_no << SPINDLE_RELOC_K_BITS | k (spindle_reloc_key).
 * That cannot overflow: k < SPINDLE_MAX_CAPACITY (131072 x 291, below
 * 2^26) and spindle_no, numbered from 1 per table, is refused above
 * SPINDLE_RELOC_MAX_SPINDLE_NO (2^37 - 1: more spindles than a table makes
 * in centuries at one a millisecond), so the key is a positive int64.
 *
 * Field mapping of the 32-byte SpindleRun, tree 3 (kind RELOCATED):
 *
 *	first		the key of the copy hidden (the source)
 *	len			1
 *	due			the key of the new copy (the target)
 *	awaited		the mover's xid (FrozenTransactionId once frozen)
 *	read_count	the mover's CommandId
 *	flags		SpindleRelocation.flags
 *
 * tree 4 (kind OLDEST_COPY): first the msg_id, len 1, due the key of the
 * event's oldest copy that may still exist.
 *
 * Locks.  Readers hold the consumer relation AccessShareLock and read as
 * any reader of the tree, one buffer lock at a time.  Writers hold the
 * relation RowExclusiveLock and the trees' writer locks (LockPage of block
 * numbers 3 and 4, ExclusiveLock, consumer_tree.c's writer lock): the one
 * relocator of a table takes both and keeps them to the end of its
 * transaction (spindle_reloc_lock), so relocators of one queue take
 * turns; VACUUM's freeze takes tree 3's for its pass if free (it does not
 * wait for a relocator: spindle_reloc_freeze).  Nothing here takes
 * an event page's lock; the mover may hold one (share) around
 * spindle_reloc_add, as the consume log's writers do.
 *
 * Invariants: one entry per copy (an entry of an aborted xid may be
 * replaced); an entry's xid is normal and resolvable in clog (VACUUM keeps
 * the consumer relation's relfrozenxid at or below it:
 * spindle_reloc_freeze), or FrozenTransactionId (committed for everyone).
 * Entries of aborted xids hide nothing and may go at any time.  Entries
 * whose source still exists are never removed otherwise; once it is
 * dropped, relocation_forget.c removes them (and moves tree 4 on).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/transam.h"
#include "access/xact.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/procarray.h"
#include "utils/rel.h"

#include "storage/spindle_storage.h"

StaticAssertDecl(SPINDLE_MAX_CAPACITY <= (INT64CONST(1) << SPINDLE_RELOC_K_BITS),
				 "a slot number fits in the low bits of a relocation key");

/* Can copy (spindle_no, k) be named by a key? */
static bool
key_ok(int64 spindle_no, int64 k)
{
	return spindle_no >= 1 && spindle_no <= SPINDLE_RELOC_MAX_SPINDLE_NO &&
		k >= 0 && k < SPINDLE_MAX_CAPACITY;
}

/*
 * The key of copy (spindle_no, k); errors out (nothing written) if it is
 * out of the range keys can name.  Readers ask key_ok first: no entry
 * names such a copy.
 */
int64
spindle_reloc_key(int64 spindle_no, int64 k)
{
	if (!key_ok(spindle_no, k))
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("copy (%lld, %lld) cannot be named by a relocation entry",
						(long long) spindle_no, (long long) k)));
	return (spindle_no << SPINDLE_RELOC_K_BITS) | k;
}

void
spindle_reloc_key_split(int64 key, int64 *spindle_no, int64 *k)
{
	*spindle_no = key >> SPINDLE_RELOC_K_BITS;
	*k = key & ((INT64CONST(1) << SPINDLE_RELOC_K_BITS) - 1);
}

/* Open tree sub of crel (writer: the caller holds its lock). */
static void
reloc_tree(Relation crel, uint32 sub, bool writer, SpindleTree *t)
{
	spindle_tree_init(t, crel, sub, writer);
}

static bool
entry_from_run(const SpindleRun *r, SpindleRelocation *e)
{
	if (r->kind != SPINDLE_RUN_RELOCATED)
		return false;
	spindle_reloc_key_split(r->first, &e->source_no, &e->source_k);
	spindle_reloc_key_split((int64) r->due, &e->target_no, &e->target_k);
	e->xid = (TransactionId) r->awaited;
	e->cid = (CommandId) r->read_count;
	e->flags = r->flags;
	return true;
}

void
spindle_reloc_to_run(const SpindleRelocation *e, SpindleRun *r)
{
	memset(r, 0, sizeof(*r));
	r->first = spindle_reloc_key(e->source_no, e->source_k);
	r->len = 1;
	r->due = (TimestampTz) spindle_reloc_key(e->target_no, e->target_k);
	r->awaited = (uint32) e->xid;
	r->read_count = (int32) e->cid;
	r->kind = SPINDLE_RUN_RELOCATED;
	r->flags = e->flags;
}

/*
 * Which of the consume log and tree 3 exist, in one look at the metapage
 * (share lock for a moment): what a reader of a queue table asks once.
 */
void
spindle_crel_trees_present(Relation crel, bool *log, bool *reloc)
{
	int64		floor;

	spindle_crel_meta_look(crel, log, reloc, &floor);
}

/* Was any copy of this queue ever moved (does tree 3 exist)? */
bool
spindle_reloc_exists(Relation crel)
{
	bool		log,
				reloc;

	spindle_crel_trees_present(crel, &log, &reloc);
	return reloc;
}

/*
 * Become the queue's relocator: the writer locks of trees 3 and 4, to the
 * end of the transaction.  The caller holds crel RowExclusiveLock and no
 * buffer lock.
 */
void
spindle_reloc_lock(Relation crel)
{
	LockPage(crel, SPINDLE_TREE_RELOC, ExclusiveLock);
	LockPage(crel, SPINDLE_TREE_RELOC_IDS, ExclusiveLock);
}

/* ---- the worker's relocator and the counts of moved copies ---- */

/*
 * spindle_reloc_lock without waiting: false (holding neither lock) if
 * another relocator, or VACUUM's freeze, holds one of them.  The worker's
 * relocator gives up its round then rather than queue.
 */
bool
spindle_reloc_lock_conditional(Relation crel)
{
	if (!ConditionalLockPage(crel, SPINDLE_TREE_RELOC, ExclusiveLock))
		return false;
	if (!ConditionalLockPage(crel, SPINDLE_TREE_RELOC_IDS, ExclusiveLock))
	{
		UnlockPage(crel, SPINDLE_TREE_RELOC, ExclusiveLock);
		return false;
	}
	return true;
}

/*
 * What entry e (NULL: none) makes of the copy it hides for the drop rule
 * and the counts, against oldest_xmin, as spindle_consume_log_state says
 * of a consume log entry: SPINDLE_ENTRY_NONE (aborted: the page decides),
 * _DEAD (committed before the horizon, or frozen: the copy is dead to
 * everyone, its xid a standby conflict horizon as a deleter's), _RECENT
 * (committed, a snapshot may still see the old copy), _RUNNING.
 */
int
spindle_reloc_state(const SpindleRelocation *e, TransactionId oldest_xmin)
{
	if (e == NULL)
		return SPINDLE_ENTRY_NONE;
	if (e->xid == FrozenTransactionId)
		return SPINDLE_ENTRY_DEAD;
	if (!TransactionIdIsNormal(e->xid))
		return SPINDLE_ENTRY_NONE;
	if (TransactionIdIsCurrentTransactionId(e->xid) ||
		TransactionIdIsInProgress(e->xid))
		return SPINDLE_ENTRY_RUNNING;
	if (!TransactionIdDidCommit(e->xid))
		return SPINDLE_ENTRY_NONE;
	return TransactionIdPrecedes(e->xid, oldest_xmin) ?
		SPINDLE_ENTRY_DEAD : SPINDLE_ENTRY_RECENT;
}

/* The entry of e[0..n) (sorted by source_k, as read) hiding copy k, or NULL. */
const SpindleRelocation *
spindle_reloc_find(const SpindleRelocation *e, int n, int64 k)
{
	int			lo = 0;
	int			hi = n;

	while (lo < hi)
	{
		int			mid = lo + (hi - lo) / 2;

		if (e[mid].source_k < k)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && e[lo].source_k == k ? &e[lo] : NULL;
}

/*
 * The entries hiding copies of spindle or annex spindle_no of queue table
 * facade_relid (every k), read for a count: NULL (*n = 0) if the table is
 * no queue table or its consumer relation has no tree 3.  Opens the
 * consumer relation AccessShareLock for the read.
 */
SpindleRelocation *
spindle_reloc_read_for(Oid facade_relid, int64 spindle_no, int *n)
{
	Oid			croid = spindle_consumer_rel_oid(facade_relid);
	Relation	crel;
	SpindleRelocation *e = NULL;

	*n = 0;
	if (!OidIsValid(croid) ||
		(crel = try_relation_open(croid, AccessShareLock)) == NULL)
		return NULL;
	if (spindle_reloc_exists(crel))
		e = spindle_reloc_read(crel, spindle_no, 0, SPINDLE_MAX_CAPACITY, n);
	relation_close(crel, AccessShareLock);
	return e;
}

/* The entry hiding copy (spindle_no, k), into *e; false if none. */
bool
spindle_reloc_probe(Relation crel, int64 spindle_no, int64 k,
					SpindleRelocation *e)
{
	SpindleTree t;
	SpindleRun	r;

	if (!key_ok(spindle_no, k))
		return false;
	reloc_tree(crel, SPINDLE_TREE_RELOC, false, &t);
	if (!spindle_tree_lookup(&t, spindle_reloc_key(spindle_no, k), &r))
		return false;
	return entry_from_run(&r, e);
}

/* Append the entry of run r, if it is one, to *out (*n used, *nalloc). */
static void
append_entry(SpindleRelocation **out, int *n, int *nalloc, const SpindleRun *r)
{
	if (*n >= *nalloc)
	{
		*nalloc = *nalloc ? *nalloc * 2 : 16;
		*out = *out ? repalloc(*out, *nalloc * sizeof(SpindleRelocation)) :
			palloc(*nalloc * sizeof(SpindleRelocation));
	}
	if (entry_from_run(r, &(*out)[*n]))
		(*n)++;
}

/*
 * Is copy k of spindle spindle_no moved by a live mover (an entry whose
 * xid did not abort: committed, frozen, in progress or this transaction)?
 */
bool
spindle_reloc_moved(Relation crel, int64 spindle_no, int64 k)
{
	SpindleRelocation e;

	return spindle_reloc_probe(crel, spindle_no, k, &e) &&
		!spindle_reloc_aborted(&e);
}

/*
 * The entries hiding copies lo_k <= k < hi_k of spindle spindle_no, in k
 * order, as a palloc'd array (*n of them; NULL if none).  One descent of
 * the tree per entry plus one (a spindle without entries costs one probe).
 */
SpindleRelocation *
spindle_reloc_read(Relation crel, int64 spindle_no, int64 lo_k, int64 hi_k,
				   int *n)
{
	SpindleTree t;
	SpindleRun	r;
	SpindleRelocation *out = NULL;
	int			nalloc = 0;
	int64		x;
	int64		hi;

	*n = 0;
	lo_k = Max(lo_k, 0);
	hi_k = Min(hi_k, SPINDLE_MAX_CAPACITY);
	if (lo_k >= hi_k || !key_ok(spindle_no, lo_k))
		return NULL;
	x = spindle_reloc_key(spindle_no, lo_k);
	hi = spindle_reloc_key(spindle_no, hi_k - 1) + 1;
	reloc_tree(crel, SPINDLE_TREE_RELOC, false, &t);
	while (x < hi && spindle_tree_next(&t, x, &r) && r.first < hi)
	{
		x = spindle_run_end(&r);
		append_entry(&out, n, &nalloc, &r);
	}
	return out;
}

/*
 * Write entry e (creating tree 3 on the first one).  The caller holds the
 * relocator's locks (spindle_reloc_lock) and has checked that no entry of
 * a live xid hides e's source (one of an aborted xid is replaced).
 * WAL-logged by the tree (STRAGGLE, splits).
 */
void
spindle_reloc_add(Relation crel, const SpindleRelocation *e)
{
	SpindleTree t;
	SpindleRun	r;

	spindle_reloc_to_run(e, &r);
	reloc_tree(crel, SPINDLE_TREE_RELOC, true, &t);
	spindle_tree_upsert(&t, &r);
}

/*
 * Record (spindle_no, k) as msg_id's oldest copy in tree 4, unless the
 * tree has one for it already (a later move keeps the first source).  The
 * caller holds the relocator's locks.
 */
void
spindle_reloc_note_oldest(Relation crel, int64 msg_id, int64 spindle_no,
						  int64 k)
{
	SpindleTree t;
	SpindleRun	r;

	reloc_tree(crel, SPINDLE_TREE_RELOC_IDS, true, &t);
	if (msg_id == PG_INT64_MAX || spindle_tree_lookup(&t, msg_id, &r))
		return;
	memset(&r, 0, sizeof(r));
	r.first = msg_id;
	r.len = 1;
	r.due = (TimestampTz) spindle_reloc_key(spindle_no, k);
	r.kind = SPINDLE_RUN_OLDEST_COPY;
	spindle_tree_upsert(&t, &r);
}

/* msg_id's oldest copy as tree 4 has it; false if none. */
bool
spindle_reloc_oldest(Relation crel, int64 msg_id, int64 *spindle_no,
					 int64 *k)
{
	SpindleTree t;
	SpindleRun	r;

	reloc_tree(crel, SPINDLE_TREE_RELOC_IDS, false, &t);
	if (!spindle_tree_lookup(&t, msg_id, &r) ||
		r.kind != SPINDLE_RUN_OLDEST_COPY)
		return false;
	spindle_reloc_key_split((int64) r.due, spindle_no, k);
	return true;
}

/*
 * Was a msg_id in [lo, hi) ever moved: does tree 4 hold one (a move that
 * aborted counts too)?  One descent; false if there is no tree 4.  The
 * caller knows crel has its metapage (spindle_reloc_exists said so).
 */
bool
spindle_reloc_ids_moved(Relation crel, int64 lo, int64 hi)
{
	SpindleTree t;
	SpindleRun	r;

	reloc_tree(crel, SPINDLE_TREE_RELOC_IDS, false, &t);
	return spindle_tree_next(&t, lo, &r) && r.first < hi;
}

/* Did e's mover abort (or never commit before a crash)? */
bool
spindle_reloc_aborted(const SpindleRelocation *e)
{
	return TransactionIdIsNormal(e->xid) &&
		!TransactionIdIsCurrentTransactionId(e->xid) &&
		!TransactionIdIsInProgress(e->xid) &&
		!TransactionIdDidCommit(e->xid);
}

/* Every entry of tree 3, in key order (*n of them; NULL if none). */
SpindleRelocation *
spindle_reloc_read_all(Relation crel, int *n)
{
	SpindleTree t;
	SpindleRun	r;
	SpindleRelocation *out = NULL;
	int			nalloc = 0;
	int64		x = PG_INT64_MIN;

	*n = 0;
	reloc_tree(crel, SPINDLE_TREE_RELOC, false, &t);
	while (spindle_tree_next(&t, x, &r))
	{
		x = spindle_run_end(&r);
		append_entry(&out, n, &nalloc, &r);
	}
	return out;
}

/* Remove entry e (tree 3's writer lock held). */
static void
remove_entry(Relation crel, const SpindleRelocation *e)
{
	SpindleTree t;
	int64		key = spindle_reloc_key(e->source_no, e->source_k);
	int32		rc;

	reloc_tree(crel, SPINDLE_TREE_RELOC, true, &t);
	(void) spindle_tree_cut(&t, key, key + 1, &rc);
}

/*
 * Freeze entry e in place: its xid becomes FrozenTransactionId (tree 3's
 * writer lock held).
 */
static void
freeze_entry(Relation crel, const SpindleRelocation *e)
{
	SpindleTree t;
	SpindleRelocation f = *e;
	SpindleRun	r;

	f.xid = FrozenTransactionId;
	spindle_reloc_to_run(&f, &r);
	reloc_tree(crel, SPINDLE_TREE_RELOC, true, &t);
	if (!spindle_tree_replace_exact(&t, &r))
		elog(ERROR, "relocation entry of copy (%lld, %lld) changed under VACUUM",
			 (long long) e->source_no, (long long) e->source_k);
}

/*
 * Remove the entries of aborted movers (they hide nothing and nothing
 * chains through them).  Takes tree 3's writer lock for the pass (waits
 * for a relocator's transaction).  Returns how many went.
 */
int
spindle_reloc_remove_aborted(Relation crel)
{
	SpindleRelocation *e;
	int			n;
	int			removed = 0;

	if (!spindle_reloc_exists(crel))
		return 0;
	LockPage(crel, SPINDLE_TREE_RELOC, ExclusiveLock);
	e = spindle_reloc_read_all(crel, &n);
	for (int i = 0; i < n; i++)
		if (spindle_reloc_aborted(&e[i]))
		{
			remove_entry(crel, &e[i]);
			removed++;
		}
	if (e != NULL)
		pfree(e);
	UnlockPage(crel, SPINDLE_TREE_RELOC, ExclusiveLock);
	return removed;
}

/* The oldest normal xid among e[0..n), or InvalidTransactionId. */
static TransactionId
oldest_xid(const SpindleRelocation *e, int n)
{
	TransactionId oldest = InvalidTransactionId;

	for (int i = 0; i < n; i++)
		if (TransactionIdIsNormal(e[i].xid) &&
			(!TransactionIdIsValid(oldest) ||
			 TransactionIdPrecedes(e[i].xid, oldest)))
			oldest = e[i].xid;
	return oldest;
}

/*
 * VACUUM of a consumer relation: entries' xids must stay resolvable in
 * clog while the entries exist.  Entries committed before freeze_limit
 * become FROZEN in place, after the standby conflict of the newest of
 * them is written (the consume log's hook: a standby snapshot that does
 * not see the mover committed must not lose the old copy); aborted ones
 * go.  Returns the oldest xid an entry still holds (InvalidTransactionId
 * if none), below which relfrozenxid must not move.  Takes tree 3's
 * writer lock for the pass without waiting (no entry that qualifies can
 * appear meanwhile: a mover's xid follows freeze_limit); while a
 * relocator holds it, nothing is changed and the oldest xid of the
 * entries read is returned (a running mover's entries have xids no older
 * than the vacuum's OldestXmin).  Reads the whole tree.
 */
TransactionId
spindle_reloc_freeze(Relation crel, TransactionId freeze_limit)
{
	SpindleRelocation *e;
	int			n;
	TransactionId oldest = InvalidTransactionId;
	TransactionId latest = InvalidTransactionId;
	Oid			queue;

	if (!spindle_reloc_exists(crel))
		return InvalidTransactionId;
	if (!ConditionalLockPage(crel, SPINDLE_TREE_RELOC, ExclusiveLock))
	{
		e = spindle_reloc_read_all(crel, &n);
		oldest = oldest_xid(e, n);
		if (e != NULL)
			pfree(e);
		return oldest;
	}
	e = spindle_reloc_read_all(crel, &n);
	for (int i = 0; i < n; i++)
		if (TransactionIdIsNormal(e[i].xid) &&
			TransactionIdPrecedes(e[i].xid, freeze_limit) &&
			TransactionIdDidCommit(e[i].xid) &&
			(!TransactionIdIsValid(latest) ||
			 TransactionIdFollows(e[i].xid, latest)))
			latest = e[i].xid;
	queue = spindle_consumer_rel_queue(crel);
	if (TransactionIdIsValid(latest) && OidIsValid(queue) &&
		spindle_consume_log_freeze_conflict_hook != NULL &&
		!spindle_consume_log_freeze_conflict_hook(queue, latest))
		latest = InvalidTransactionId;	/* freeze nothing this time */
	for (int i = 0; i < n; i++)
	{
		TransactionId xid = e[i].xid;

		if (!TransactionIdIsNormal(xid))
			continue;
		if (spindle_reloc_aborted(&e[i]))
		{
			remove_entry(crel, &e[i]);
			continue;
		}
		if (TransactionIdIsValid(latest) &&
			TransactionIdPrecedesOrEquals(xid, latest) &&
			TransactionIdDidCommit(xid))
		{
			freeze_entry(crel, &e[i]);
			continue;
		}
		if (!TransactionIdIsValid(oldest) || TransactionIdPrecedes(xid, oldest))
			oldest = xid;
	}
	if (e != NULL)
		pfree(e);
	UnlockPage(crel, SPINDLE_TREE_RELOC, ExclusiveLock);
	return oldest;
}

/* ----------------------------------------------------------------
 * Consumers following moves (design, section 4 "Consumers"; "Step 3 as
 * built").  Readers only: the consumer relation AccessShareLock, no
 * writer lock; an event page may be locked by the caller (tree buffer
 * locks are taken under event page locks, never the other way round).
 * ----------------------------------------------------------------
 */

/*
 * Which of the consume log and tree 3 exist, and the log's floor, in one
 * look at the metapage: what a consumer reads under each event page's lock
 * (queue_consumed.c), after the log's entries over that page.
 */
void
spindle_crel_meta_look(Relation crel, bool *log, bool *reloc, int64 *floor)
{
	Buffer		buf;
	SpindleCrelMeta *meta;

	*log = *reloc = false;
	*floor = PG_INT64_MIN;
	if (RelationGetNumberOfBlocks(crel) == 0)
		return;
	buf = spindle_crel_meta_lock(crel, BUFFER_LOCK_SHARE);
	meta = SpindleCrelGetMeta(BufferGetPage(buf));
	*log = meta->trees[SPINDLE_TREE_CONSUME_LOG] != InvalidBlockNumber;
	*reloc = meta->trees[SPINDLE_TREE_RELOC] != InvalidBlockNumber;
	*floor = meta->consumed_floor;
	UnlockReleaseBuffer(buf);
}

/*
 * What entry e means to a consumer, which acts now, with no snapshot:
 * SPINDLE_MOVE_DONE if its mover committed (or froze, or is the current
 * transaction: its own move is seen by its own consumer), so the copy is
 * gone and the event is at e's target; SPINDLE_MOVE_RUNNING (*xid) while
 * another transaction's move is in progress; SPINDLE_MOVE_NONE if the
 * mover aborted (the entry hides nothing).  As heap's tests: in progress
 * before committed.
 */
int
spindle_reloc_consumer_state(const SpindleRelocation *e, TransactionId *xid)
{
	*xid = e->xid;
	if (!TransactionIdIsNormal(e->xid))
		return e->xid == FrozenTransactionId ? SPINDLE_MOVE_DONE :
			SPINDLE_MOVE_NONE;
	if (TransactionIdIsCurrentTransactionId(e->xid))
		return SPINDLE_MOVE_DONE;
	if (TransactionIdIsInProgress(e->xid))
		return SPINDLE_MOVE_RUNNING;
	return TransactionIdDidCommit(e->xid) ? SPINDLE_MOVE_DONE :
		SPINDLE_MOVE_NONE;
}

/*
 * A chain of moves is at most as long as tree 3 has entries; one that
 * comes back to a copy it passed is corrupt.  Bounded here so that a
 * corrupt tree makes an error, not an endless loop.
 */
#define RELOC_MAX_LINKS		1024

/*
 * Follow the relocation entries from copy (*spindle_no, *k) while their
 * movers are done (spindle_reloc_consumer_state): on return, the copy the
 * event is at for a consumer now.  Returns SPINDLE_MOVE_NONE if that copy
 * is not hidden (no entry, or an aborted one), SPINDLE_MOVE_RUNNING with
 * *xid if a running move hides it (the event is pending on that xid),
 * or SPINDLE_MOVE_DONE if some link was followed and the copy reached is
 * not hidden (so the caller knows the event moved).  One descent of tree
 * 3 per link.  The caller holds crel AccessShareLock.
 */
int
spindle_reloc_follow(Relation crel, int64 *spindle_no, int64 *k,
					 TransactionId *xid)
{
	bool		moved = false;

	*xid = InvalidTransactionId;
	for (int links = 0;; links++)
	{
		SpindleRelocation e;

		if (!spindle_reloc_probe(crel, *spindle_no, *k, &e))
			break;
		switch (spindle_reloc_consumer_state(&e, xid))
		{
			case SPINDLE_MOVE_RUNNING:
				return SPINDLE_MOVE_RUNNING;
			case SPINDLE_MOVE_NONE:
				*xid = InvalidTransactionId;
				return moved ? SPINDLE_MOVE_DONE : SPINDLE_MOVE_NONE;
			default:
				break;
		}
		if (links >= RELOC_MAX_LINKS ||
			(e.target_no == *spindle_no && e.target_k == *k))
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("relocation entries of copy (%lld, %lld) of \"%s\" form a cycle",
							(long long) e.source_no, (long long) e.source_k,
							RelationGetRelationName(crel))));
		*spindle_no = e.target_no;
		*k = e.target_k;
		moved = true;
		spindle_test_pause("reloc_follow");
	}
	*xid = InvalidTransactionId;
	return moved ? SPINDLE_MOVE_DONE : SPINDLE_MOVE_NONE;
}
