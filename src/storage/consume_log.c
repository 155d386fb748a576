/*-------------------------------------------------------------------------
 *
 * consume_log.c
 *	  The consume log of a queue: which msg_ids a transaction consumed,
 *	  kept outside the event pages, in tree 2 of the queue's consumer
 *	  relation (SPINDLE_TREE_CONSUME_LOG; consumer_tree.c; docs/design.md,
 *	  "Consumer state that scales with what stays", "Consume log
 *	  (built)").  Writers: consumers with spindle.consume_log on
 *	  (queue_consumed.c) and the test-only hidden_test.c; settle (the
 *	  worker) and freeze (VACUUM of the consumer relation) are here.
 *
 * An entry is a run of the tree, kind SPINDLE_RUN_CONSUMED, for the ids
 * [first, first + len) that one (sub)transaction consumed in one command.
 * Field mapping of the 32-byte SpindleRun:
 *
 *	first		the first msg_id (the key)
 *	len			how many ids
 *	due			the writer's FullTransactionId, as an int64 (the 64-bit
 *				field; no entry of this tree has a due time)
 *	awaited		the writer's CommandId
 *	kind		SPINDLE_RUN_CONSUMED
 *	read_count, flags	0
 *
 * Locks.  Readers hold the consumer relation AccessShareLock and read as
 * any reader of the tree, one buffer lock at a time.  Writers hold the
 * relation RowExclusiveLock and the log's lock (LockPage of block number
 * SPINDLE_TREE_CONSUME_LOG, see spindle_consume_log_lock): consumers in
 * RowExclusiveLock mode, side by side; settle (without waiting) and
 * VACUUM's freeze in ShareUpdateExclusiveLock mode; the creator of the
 * log, verify() and the test writers in ExclusiveLock mode.  Each change
 * of the tree is made under one LWLock of the tranche
 * "spindle_consume_log", chosen by the relation (log_write_lock), taken
 * with no tree buffer locked and held for that change only; a consumer
 * holds its event page's lock (exclusive) around it, which is the lock
 * protocol with DML (hidden.c) and keeps two consumers of one event
 * apart (each reads the entries over the page again under that lock,
 * queue_consumed.c).  Nothing under the LWLock waits for an event page.
 * Settle's and the freeze's reads are made without it; a change that
 * depends on what they read (an aborted entry removed, a committed one
 * frozen) checks the entry again under it.  Before the freeze, its
 * standby conflict hook takes the queue table's AccessShareLock without
 * waiting.  The floor is the metapage's consumed_floor, read under its
 * share lock, raised under its exclusive lock (GenericXLog).
 *
 * Invariants: entries never overlap (the tree's); an entry only merges
 * with the one before it when their xid and command id are equal, so an
 * entry's (xid, cid) holds for every id it covers.  An entry's xid is
 * normal and resolvable in clog (VACUUM keeps the consumer relation's
 * relfrozenxid at or below it: spindle_consume_log_freeze), or
 * FrozenTransactionId (committed for everyone).  Every id below the
 * floor is consumed for everyone; the floor only rises, and only over ids
 * whose events are gone or whose entries committed before the horizon.
 * Settle (the worker) removes entries below the oldest spindle, folds
 * committed ones into the floor and removes those of aborted xids; when
 * the leaves its cuts emptied make the tree more than twice the size its
 * entries need, it rebuilds the tree beside itself and swaps it in, with
 * the log's lock taken in ExclusiveLock mode too, without waiting
 * (rebuild_if_sparse).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/generic_xlog.h"
#include "access/relation.h"
#include "access/transam.h"
#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/lwlock.h"
#include "storage/procarray.h"
#include "utils/rel.h"

#include "storage/spindle_storage.h"

/* Open tree 2 of crel for reading (writer: the caller holds its lock). */
static void
log_tree(Relation crel, bool writer, SpindleTree *t)
{
	spindle_tree_init(t, crel, SPINDLE_TREE_CONSUME_LOG, writer);
}

/* An entry from a run of the tree; false if the run is of another kind. */
static bool
entry_from_run(const SpindleRun *r, SpindleConsumed *e)
{
	if (r->kind != SPINDLE_RUN_CONSUMED)
		return false;
	e->first = r->first;
	e->len = r->len;
	e->fxid = FullTransactionIdFromU64((uint64) r->due);
	e->cid = (CommandId) r->awaited;
	return true;
}

/*
 * Does the queue's consume log exist at all?  One look at the metapage:
 * false means no transaction ever wrote an entry into this relfilenode.
 */
bool
spindle_consume_log_exists(Relation crel)
{
	return spindle_tree_meta_block(crel, SPINDLE_TREE_CONSUME_LOG) !=
		InvalidBlockNumber;
}

/*
 * The consume log's floor (the metapage's consumed_floor): every id below
 * it is consumed for everyone (settle folded committed entries into it).
 * Readers read it after the entries they read, so that an entry settle
 * removed after raising the floor is seen either way.  A share lock of
 * the metapage, for a moment.
 */
int64
spindle_consume_log_floor(Relation crel)
{
	Buffer		buf;
	int64		floor;

	if (RelationGetNumberOfBlocks(crel) == 0)
		return PG_INT64_MIN;
	buf = spindle_crel_meta_lock(crel, BUFFER_LOCK_SHARE);
	floor = SpindleCrelGetMeta(BufferGetPage(buf))->consumed_floor;
	UnlockReleaseBuffer(buf);
	return floor;
}

/*
 * Raise the floor to floor (GenericXLog, a delta of the metapage).
 * Settle's, after the entries below are folded; outside it, only the test
 * corruption of verify (spindle._verify_corrupt 'log_floor').
 */
void
spindle_consume_log_raise_floor(Relation crel, int64 floor)
{
	Buffer		buf = spindle_crel_meta_lock(crel, BUFFER_LOCK_EXCLUSIVE);
	GenericXLogState *state;
	Page		page;
	SpindleCrelMeta *meta = SpindleCrelGetMeta(BufferGetPage(buf));

	if (meta->consumed_floor >= floor)
	{
		UnlockReleaseBuffer(buf);
		return;
	}
	state = GenericXLogStart(crel);
	page = GenericXLogRegisterBuffer(state, buf, 0);
	SpindleCrelGetMeta(page)->consumed_floor = floor;
	GenericXLogFinish(state);
	UnlockReleaseBuffer(buf);
}

/* The entry covering msg_id id, into *e; false if none. */
bool
spindle_consume_log_probe(Relation crel, int64 id, SpindleConsumed *e)
{
	SpindleTree t;
	SpindleRun	r;

	log_tree(crel, false, &t);
	if (!spindle_tree_lookup(&t, id, &r))
		return false;
	return entry_from_run(&r, e);
}

/* The entries spindle_consume_log_read collects (a tree scan's visitor). */
typedef struct EntryArray
{
	SpindleConsumed *e;
	int			n;
	int			nalloc;
} EntryArray;

static bool
collect_entry(const SpindleRun *run, void *arg)
{
	EntryArray *a = (EntryArray *) arg;

	if (run->kind != SPINDLE_RUN_CONSUMED)
		return true;
	if (a->n >= a->nalloc)
	{
		a->nalloc = a->nalloc ? a->nalloc * 2 : 16;
		a->e = a->e ? repalloc(a->e, a->nalloc * sizeof(SpindleConsumed)) :
			palloc(a->nalloc * sizeof(SpindleConsumed));
	}
	(void) entry_from_run(run, &a->e[a->n++]);
	return true;
}

/*
 * The entries that cover an id of [lo, hi), in id order, as a palloc'd
 * array (*n of them; NULL if none): one range read of the tree
 * (spindle_tree_scan: the entry holding lo, if one starts before it, then
 * the leaves from lo's on, one buffer lock at a time).
 */
SpindleConsumed *
spindle_consume_log_read(Relation crel, int64 lo, int64 hi, int *n)
{
	SpindleTree t;
	EntryArray	a = {NULL, 0, 0};

	log_tree(crel, false, &t);
	spindle_tree_scan(&t, lo, hi, collect_entry, &a);
	*n = a.n;
	return a.e;
}

/*
 * The log's heavyweight lock (LockPage of block SPINDLE_TREE_CONSUME_LOG
 * on the consumer relation), in the mode of each kind of holder:
 *
 *	RowExclusiveLock	a consumer's examine(), log or not: consumers do not
 *						wait for one another
 *	ShareUpdateExclusiveLock	settle and freeze: not beside each other
 *	ExclusiveLock		whoever creates the log (a consumer's first entry),
 *						verify() and the test writers: alone
 *
 * A consumer that found no log under it purges by xmax with no log
 * appearing before it is done (review finding 5); one that found a log
 * writes entries.  The lock does not order writers of entries: each tree
 * change is made under the log's write lock (log_write_lock), and the
 * consumers' classification reads the entries again under each event
 * page's lock (queue_consumed.c).
 */
void
spindle_consume_log_lock(Relation crel)
{
	LockPage(crel, SPINDLE_TREE_CONSUME_LOG, ExclusiveLock);
}

void
spindle_consume_log_unlock(Relation crel)
{
	UnlockPage(crel, SPINDLE_TREE_CONSUME_LOG, ExclusiveLock);
}

void
spindle_consume_log_lock_consumer(Relation crel)
{
	LockPage(crel, SPINDLE_TREE_CONSUME_LOG, RowExclusiveLock);
}

void
spindle_consume_log_unlock_consumer(Relation crel)
{
	UnlockPage(crel, SPINDLE_TREE_CONSUME_LOG, RowExclusiveLock);
}

/* ----------------------------------------------------------------
 * The write lock: one tree change at a time
 * ----------------------------------------------------------------
 */

/*
 * Writers of a log's tree (consumer_tree.c needs one at a time) take one
 * of SPINDLE_LOG_LOCKS LWLocks, chosen by the consumer relation, for
 * each change, and nothing longer: a consumer takes it with its event
 * page locked and lets it go before the page, so consumers of one queue
 * wait for one another only while an entry goes in.  No buffer lock but
 * event pages' (and none of the tree's) is held when it is taken; under
 * it only the tree's own buffers are locked (and its relation extended),
 * never an event page, so no cycle forms.  Queues that share a lock only
 * take turns.  Read-decide-change steps (an aborted entry removed, an
 * entry frozen) check the entry again under it.
 */
#define SPINDLE_LOG_LOCKS	128

static LWLockPadded *log_locks = NULL;

void
spindle_consume_log_shmem_request(void)
{
	RequestNamedLWLockTranche("spindle_consume_log", SPINDLE_LOG_LOCKS);
}

/* Called from the shmem_startup_hook. */
void
spindle_consume_log_shmem_startup(void)
{
	log_locks = GetNamedLWLockTranche("spindle_consume_log");
}

static LWLock *
log_write_lock(Relation crel)
{
	uint32		h = hash_bytes_uint32((uint32) RelationGetRelid(crel)) ^
		(uint32) MyDatabaseId;

	Assert(log_locks != NULL);
	return &log_locks[h % SPINDLE_LOG_LOCKS].lock;
}

/*
 * Record that (fxid, cid) consumed the ids [first, first + len): one
 * entry, merged into the entry ending at first when that has the same xid
 * and command id and the merged entry stays within its leaf (a dequeue's
 * pages, written one after the other, make one entry, or one per leaf).
 * The caller holds the log's lock and the lock of the events' page, under
 * which it has checked that no live entry covers any of the ids (aborted
 * ones are replaced); the change is made under the write lock.  One
 * STRAGGLE record while the entry stays within a leaf.
 */
void
spindle_consume_log_add_run(Relation crel, int64 first, int64 len,
							FullTransactionId fxid, CommandId cid)
{
	SpindleTree t;
	SpindleRun	r;
	SpindleConsumed prev;

	Assert(len > 0 && len <= PG_UINT32_MAX);
	log_tree(crel, true, &t);
	LWLockAcquire(log_write_lock(crel), LW_EXCLUSIVE);
	memset(&r, 0, sizeof(r));
	r.first = first;
	r.len = (uint32) len;
	r.kind = SPINDLE_RUN_CONSUMED;
	r.due = (TimestampTz) U64FromFullTransactionId(fxid);
	r.awaited = (uint32) cid;
	if (first > PG_INT64_MIN &&
		spindle_consume_log_probe(crel, first - 1, &prev) &&
		prev.first + prev.len == first &&
		prev.len + len <= PG_UINT32_MAX &&
		FullTransactionIdEquals(prev.fxid, fxid) && prev.cid == cid)
	{
		SpindleRun	merged = r;

		/*
		 * Within the leaf only, as in spindle_consume_log_add: across leaves
		 * the upsert is a cut and then an insert, and a DELETE could take
		 * one of the ids between the two (review of the writer side,
		 * finding 2).
		 */
		merged.first = prev.first;
		merged.len = (uint32) (prev.len + len);
		if (spindle_tree_upsert_in_leaf(&t, &merged))
		{
			LWLockRelease(log_write_lock(crel));
			return;
		}
	}
	spindle_tree_upsert(&t, &r);
	LWLockRelease(log_write_lock(crel));
}

/* Record that (fxid, cid) consumed msg_id id: add_run of one id. */
void
spindle_consume_log_add(Relation crel, int64 id, FullTransactionId fxid,
						CommandId cid)
{
	spindle_consume_log_add_run(crel, id, 1, fxid, cid);
}

/*
 * The entries of queue table facade's consume log over the ids [lo, hi),
 * in id order, for counts that read a spindle's pages (the drop rule,
 * counter builds): NULL (*n = 0) if the table is no queue table or has
 * no log; *floor the log's floor, read after them (PG_INT64_MIN: none).
 * Opens the consumer relation AccessShareLock, kept to the end of the
 * transaction.
 */
SpindleConsumed *
spindle_consume_log_over(Oid facade, int64 lo, int64 hi, int *n,
						 int64 *floor)
{
	Oid			croid = spindle_consumer_rel_oid(facade);
	Relation	crel;
	SpindleConsumed *e = NULL;

	*n = 0;
	*floor = PG_INT64_MIN;
	if (!OidIsValid(croid) ||
		(crel = try_relation_open(croid, AccessShareLock)) == NULL)
		return NULL;
	if (spindle_consume_log_exists(crel))
	{
		e = spindle_consume_log_read(crel, lo, hi, n);
		*floor = spindle_consume_log_floor(crel);
	}
	relation_close(crel, NoLock);
	return e;
}

/* The entry of e[0..n) (in id order) covering id, or NULL. */
const SpindleConsumed *
spindle_consume_log_find(const SpindleConsumed *e, int n, int64 id)
{
	int			lo = 0,
				hi = n;

	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;

		if (id < e[mid].first)
			hi = mid;
		else if (id >= e[mid].first + e[mid].len)
			lo = mid + 1;
		else
			return &e[mid];
	}
	return NULL;
}

/*
 * What entry e (or none: NULL) means for a count against horizon
 * oldest_xmin: SPINDLE_ENTRY_NONE (no live entry: the page decides),
 * _DEAD (committed before the horizon, or frozen: consumed for everyone),
 * _RECENT (committed, some snapshot may still see the event), _RUNNING.
 */
int
spindle_consume_log_state(const SpindleConsumed *e, TransactionId oldest_xmin)
{
	TransactionId xid;

	if (e == NULL)
		return SPINDLE_ENTRY_NONE;
	xid = XidFromFullTransactionId(e->fxid);
	if (xid == FrozenTransactionId)
		return SPINDLE_ENTRY_DEAD;
	if (!TransactionIdIsNormal(xid))
		return SPINDLE_ENTRY_NONE;
	if (TransactionIdIsCurrentTransactionId(xid) ||
		TransactionIdIsInProgress(xid))
		return SPINDLE_ENTRY_RUNNING;
	if (!TransactionIdDidCommit(xid))
		return SPINDLE_ENTRY_NONE;
	return TransactionIdPrecedes(xid, oldest_xmin) ?
		SPINDLE_ENTRY_DEAD : SPINDLE_ENTRY_RECENT;
}

/* ----------------------------------------------------------------
 * Settle and freeze
 * ----------------------------------------------------------------
 */

/* where the last settle of a queue in this backend stopped */
#define SETTLE_CURSORS 16
typedef struct SettleCursor
{
	Oid			facade;
	int64		next;			/* where the look for aborted entries goes on */
	bool		look_at_pages;	/* ids were cut since the tree's size was
								 * last looked at */
} SettleCursor;
static SettleCursor settle_cursor[SETTLE_CURSORS];

/*
 * This backend's cursor for a queue (a slot taken over when all are used:
 * a cursor lost only restarts the look from the start).
 */
static SettleCursor *
cursor_of(Oid facade)
{
	int			i;
	int			free_slot = -1;

	for (i = 0; i < SETTLE_CURSORS; i++)
	{
		if (settle_cursor[i].facade == facade)
			return &settle_cursor[i];
		if (free_slot < 0 && !OidIsValid(settle_cursor[i].facade))
			free_slot = i;
	}
	i = free_slot >= 0 ? free_slot : (int) (facade % SETTLE_CURSORS);
	settle_cursor[i].facade = facade;
	settle_cursor[i].next = PG_INT64_MIN;
	settle_cursor[i].look_at_pages = true;	/* once: a read, no lock */
	return &settle_cursor[i];
}

/* Did the entry's transaction abort (or never commit before a crash)? */
static bool
entry_aborted(const SpindleConsumed *e)
{
	TransactionId xid = XidFromFullTransactionId(e->fxid);

	return TransactionIdIsNormal(xid) &&
		!TransactionIdIsCurrentTransactionId(xid) &&
		!TransactionIdIsInProgress(xid) && !TransactionIdDidCommit(xid);
}

/*
 * The most ids one hold of the write lock cuts: about 64 leaves of
 * one-id entries.  A cut of everything below a drained backlog's last
 * spindle (600 000 entries, review rv3) held it 2.6 s in one piece, and
 * every consumer writing an entry waited that long.
 */
#define CUT_IDS_PER_HOLD	16384

/*
 * Cut the entries of [lo, hi), no consumer writing there (ids of dropped
 * spindles, or below the floor): in pieces of at most CUT_IDS_PER_HOLD
 * ids, each under the write lock, let go between them; the gaps between
 * entries are skipped.  Returns the ids removed.
 */
static int64
cut_locked(Relation crel, SpindleTree *t, int64 lo, int64 hi)
{
	int64		removed = 0;
	int64		x = lo;
	SpindleRun	r;
	int32		rc;

	while (x < hi && spindle_tree_next(t, x, &r) && r.first < hi)
	{
		int64		from = Max(x, r.first);
		int64		to = (hi - from > CUT_IDS_PER_HOLD) ?
			from + CUT_IDS_PER_HOLD : hi;

		CHECK_FOR_INTERRUPTS();
		LWLockAcquire(log_write_lock(crel), LW_EXCLUSIVE);
		removed += spindle_tree_cut(t, from, to, &rc);
		LWLockRelease(log_write_lock(crel));
		x = to;
	}
	return removed;
}

/*
 * Remove entry e, read earlier without the write lock, if it is still in
 * the tree as read (a consumer may have written over an aborted entry
 * since: its own entry must stay).  The ids removed.
 */
static int64
cut_if_unchanged(Relation crel, SpindleTree *t, const SpindleConsumed *e)
{
	SpindleRun	r;
	SpindleConsumed now;
	int64		removed = 0;
	int32		rc;

	LWLockAcquire(log_write_lock(crel), LW_EXCLUSIVE);
	if (spindle_tree_lookup(t, e->first, &r) && entry_from_run(&r, &now) &&
		now.first == e->first && now.len == e->len &&
		FullTransactionIdEquals(now.fxid, e->fxid) && now.cid == e->cid)
		removed = spindle_tree_cut(t, e->first, e->first + e->len, &rc);
	LWLockRelease(log_write_lock(crel));
	return removed;
}

/*
 * Fold into the floor the entries contiguous from it (or from below, the
 * first id of the oldest spindle, if higher) whose xid is frozen or
 * committed before the horizon: consumed for every snapshot.  Up to max
 * entries.  conflict (if not NULL) is called first with the newest xid
 * folded, so that hot standbys cancel the snapshots that might not see it
 * committed (a core record, as a drop's); then the floor is raised, then
 * the entries below it are removed (readers read entries, then the
 * floor).  The caller holds the log's lock in ShareUpdateExclusiveLock
 * mode.  The entries folded are committed, so no consumer writes over
 * them, and none writes below the floor or below `below`: they are read
 * without the write lock, and only the cuts take it (the conflict
 * record, which locks a spindle page, is written outside it).  Returns
 * the ids removed.
 */
static int64
fold_into_floor(Relation crel, SpindleTree *t, int64 below, int max,
				SpindleFoldConflictFn conflict, void *arg)
{
	TransactionId horizon = GetOldestNonRemovableTransactionId(crel);
	int64		floor = spindle_consume_log_floor(crel);
	int64		f = Max(floor, below);
	int64		start = f;
	SpindleRun	r;
	SpindleConsumed e;
	TransactionId latest = InvalidTransactionId;
	SpindleTree rt;				/* reads: no write lock, no split finished */

	log_tree(crel, false, &rt);
	for (int i = 0; i < max; i++)
	{
		TransactionId xid;

		if (!spindle_tree_next(&rt, f, &r) || r.first > f ||
			!entry_from_run(&r, &e))
			break;
		xid = XidFromFullTransactionId(e.fxid);
		if (xid != FrozenTransactionId &&
			!(TransactionIdIsNormal(xid) &&
			  TransactionIdPrecedes(xid, horizon) &&
			  TransactionIdDidCommit(xid)))
			break;
		if (TransactionIdIsNormal(xid) &&
			(!TransactionIdIsValid(latest) ||
			 TransactionIdFollows(xid, latest)))
			latest = xid;
		f = e.first + e.len;
	}
	if (f <= start)
	{
		/*
		 * Nothing to fold; but a crash or an error between an earlier
		 * fold's raise and its cut left entries below the floor: cut them
		 * (the floor hides them already, so no conflict is needed).
		 */
		if (spindle_tree_next(&rt, PG_INT64_MIN, &r) && r.first < floor)
			return cut_locked(crel, t, r.first, floor);
		return 0;
	}
	/* standby snapshots that may not see latest committed go first */
	if (conflict != NULL)
		conflict(arg, latest);
	spindle_consume_log_raise_floor(crel, f);
	if (!spindle_tree_next(&rt, PG_INT64_MIN, &r) || r.first >= f)
		return 0;
	return cut_locked(crel, t, r.first, f);
}

/*
 * The most entries settle copies into a rebuilt log.  The rebuild holds
 * the log's lock in ExclusiveLock mode, so the queue's consumers wait for
 * it: about 1.6 s and 90 MB of WAL for a million entries when the
 * rebuild wrote a record per entry (review rv3, F4; a page per record
 * since turn 4, session 13: about 33 B an entry), some 50 ms for this
 * many.  A log holding more keeps its emptied
 * leaves until fewer are left (a gap that stops the fold ends, or its
 * spindles drop).
 */
#define REBUILD_MAX_ENTRIES		65536

/*
 * Give back the leaves settle's cuts emptied.  The log's keys (msg_ids)
 * only grow and the cuts take its oldest entries, so without this every
 * leaf it ever filled would stay (about one per spindle drained): when
 * the tree holds more than twice the pages its entries need, it is built
 * again beside itself and swapped in (spindle_tree_rebuild).  Its size is
 * read first beside the consumers (spindle_tree_stats: settle's lock
 * keeps every other rebuilder and freer out, and consumers only add
 * pages); only a sparse tree of at most REBUILD_MAX_ENTRIES entries, with
 * room on its file system for the new tree, is rebuilt, under the log's
 * lock in ExclusiveLock mode, taken without waiting (the caller holds it
 * in ShareUpdateExclusiveLock mode): no consumer examines meanwhile (each
 * holds it in RowExclusiveLock mode for its whole examination), so no
 * entry is written to the old tree after it was read, and one that comes
 * waits for the rebuild.  Readers that take no lock (plain SQL, hidden.c)
 * find the old pages as they were, or reused and not of the tree's
 * generation, and start again from the metapage; the floor does not
 * move.  False if it should be looked at again next round (the lock was
 * not free, or no room); true otherwise.
 */
static bool
rebuild_if_sparse(Relation crel, SpindleTree *t)
{
	int			npages;
	int64		nruns;
	int			n;
	SpindleRun *runs;

	spindle_tree_stats(t, &npages, &nruns);
	if (npages == 0 || !spindle_tree_is_sparse(npages, nruns))
		return true;
	if (nruns > REBUILD_MAX_ENTRIES)
	{
		ereport(DEBUG1,
				(errmsg_internal("spindle: consume log of \"%s\" not rebuilt: " INT64_FORMAT " entries in %d pages",
								 RelationGetRelationName(crel), nruns, npages)));
		return true;
	}
	if (!spindle_crel_room_for(crel,
							   (int) (2 * spindle_tree_pages_needed(nruns))))
		return false;
	if (!ConditionalLockPage(crel, SPINDLE_TREE_CONSUME_LOG, ExclusiveLock))
		return false;
	runs = spindle_tree_read_all(t, &n);
	if (n <= REBUILD_MAX_ENTRIES && spindle_tree_is_sparse(npages, n))
	{
		spindle_tree_rebuild(t, runs, n);
		ereport(DEBUG1,
				(errmsg_internal("spindle: consume log of \"%s\" rebuilt: %d entries, %d pages before",
								 RelationGetRelationName(crel), n, npages)));
	}
	if (runs)
		pfree(runs);
	UnlockPage(crel, SPINDLE_TREE_CONSUME_LOG, ExclusiveLock);
	return true;
}

/*
 * Settle the consume log of queue table facade (the worker, each round):
 * remove what no reader needs any more.  (1) Every id below `below`, the
 * first msg_id of the table's oldest spindle: those events went with
 * their spindles, which were dropped only when every event was dead to
 * everyone.  (2) Entries of aborted transactions, looking at up to max
 * entries from where this backend's last call stopped.  (3) Once ids
 * were cut, the pages the tree no longer needs (rebuild_if_sparse).
 * First, what a crash left of a rebuild (spindle_tree_reclaim: settle's
 * lock keeps any other rebuild out).  Takes the log's
 * lock in ShareUpdateExclusiveLock mode without waiting (consumers do not
 * stop it; another settle or a freeze does: nothing this round) and the
 * consumer relation RowExclusiveLock.  Returns the ids removed.
 */
int64
spindle_consume_log_settle(Oid facade, int64 below, int max,
						   SpindleFoldConflictFn conflict, void *arg)
{
	Oid			croid = spindle_consumer_rel_oid(facade);
	Relation	crel;
	SpindleTree t;
	SpindleTree rt;
	SpindleRun	r;
	SpindleConsumed e;
	int64		removed = 0;
	SettleCursor *cursor;

	if (!OidIsValid(croid) ||
		(crel = try_relation_open(croid, RowExclusiveLock)) == NULL)
		return 0;
	if (!spindle_consume_log_exists(crel) ||
		!ConditionalLockPage(crel, SPINDLE_TREE_CONSUME_LOG,
							 ShareUpdateExclusiveLock))
	{
		relation_close(crel, NoLock);
		return 0;
	}
	log_tree(crel, true, &t);
	log_tree(crel, false, &rt);
	spindle_tree_reclaim(&t);
	if (spindle_tree_next(&rt, PG_INT64_MIN, &r) && r.first < below)
		removed += cut_locked(crel, &t, r.first, below);
	removed += fold_into_floor(crel, &t, below, max, conflict, arg);
	cursor = cursor_of(facade);
	for (int i = 0; i < max; i++)
	{
		if (!spindle_tree_next(&rt, Max(cursor->next, below), &r))
		{
			cursor->next = PG_INT64_MIN;
			break;
		}
		cursor->next = spindle_run_end(&r);
		if (entry_from_run(&r, &e) && entry_aborted(&e))
			removed += cut_if_unchanged(crel, &t, &e);
	}
	if (removed > 0)
		cursor->look_at_pages = true;
	if (cursor->look_at_pages && rebuild_if_sparse(crel, &t))
		cursor->look_at_pages = false;
	UnlockPage(crel, SPINDLE_TREE_CONSUME_LOG, ShareUpdateExclusiveLock);
	relation_close(crel, NoLock);
	return removed;
}

/* the freeze's standby conflict (table/maintenance.c registers it) */
SpindleFreezeConflictFn spindle_consume_log_freeze_conflict_hook = NULL;

/*
 * The newest xid among entries e[0..n) that the freeze with freeze_limit
 * makes FROZEN (committed before it), InvalidTransactionId if none.
 */
static TransactionId
newest_to_freeze(const SpindleConsumed *e, int n, TransactionId freeze_limit)
{
	TransactionId latest = InvalidTransactionId;

	for (int i = 0; i < n; i++)
	{
		TransactionId xid = XidFromFullTransactionId(e[i].fxid);

		if (TransactionIdIsNormal(xid) &&
			TransactionIdPrecedes(xid, freeze_limit) &&
			(!TransactionIdIsValid(latest) ||
			 TransactionIdFollows(xid, latest)) &&
			TransactionIdDidCommit(xid))
			latest = xid;
	}
	return latest;
}

/*
 * Write the standby conflict of a freeze up to latest, through the hook:
 * a standby snapshot that might not see latest committed must not see
 * its entries' events vanish when they become FROZEN (review of the
 * writer side, finding 4).  Returns whether the freeze may go on.
 */
static bool
freeze_conflict(Relation crel, TransactionId latest)
{
	Oid			queue;

	if (!TransactionIdIsValid(latest) ||
		spindle_consume_log_freeze_conflict_hook == NULL)
		return true;
	queue = spindle_consumer_rel_queue(crel);
	if (!OidIsValid(queue))
		return true;
	return spindle_consume_log_freeze_conflict_hook(queue, latest);
}

/*
 * VACUUM of a consumer relation: the entries' xids must stay resolvable
 * in clog while the entries exist.  Entries committed before
 * freeze_limit (which precedes every snapshot's xmin) become FROZEN
 * (xid FrozenTransactionId: committed for everyone), after the standby
 * conflict of the newest of them is written (freeze_conflict, before the
 * log's lock: it opens the queue table); aborted ones go.  No entry
 * that qualifies can appear meanwhile (a writer's xid follows
 * freeze_limit), and those frozen are at most latest.  Returns the oldest
 * xid an entry still holds (InvalidTransactionId if none), below which
 * relfrozenxid must not move.  Takes the log's lock in
 * ShareUpdateExclusiveLock mode (consumers go on beside it; each change
 * under the write lock) and reads the whole log: VACUUM's cost is the
 * log's size.
 */
TransactionId
spindle_consume_log_freeze(Relation crel, TransactionId freeze_limit)
{
	SpindleTree t;
	SpindleConsumed *e;
	int			n;
	TransactionId oldest = InvalidTransactionId;
	TransactionId latest;

	if (!spindle_consume_log_exists(crel))
		return InvalidTransactionId;
	e = spindle_consume_log_read(crel, PG_INT64_MIN, PG_INT64_MAX, &n);
	latest = newest_to_freeze(e, n, freeze_limit);
	if (e != NULL)
		pfree(e);
	if (!freeze_conflict(crel, latest))
		latest = InvalidTransactionId;	/* freeze nothing this time */
	LockPage(crel, SPINDLE_TREE_CONSUME_LOG, ShareUpdateExclusiveLock);
	log_tree(crel, true, &t);
	e = spindle_consume_log_read(crel, PG_INT64_MIN, PG_INT64_MAX, &n);
	for (int i = 0; i < n; i++)
	{
		TransactionId xid = XidFromFullTransactionId(e[i].fxid);

		if (!TransactionIdIsNormal(xid))
			continue;
		/*
		 * An aborted entry goes, if still as read.  A consumer may have
		 * written over part of it meanwhile (consumers run beside the
		 * freeze and replace aborted entries): what is left of it keeps
		 * its xid, which must then hold relfrozenxid back like any other
		 * (hostile review of the narrowed lock, finding 1: verify() saw
		 * the remainder older than relfrozenxid).
		 */
		if (entry_aborted(&e[i]) && cut_if_unchanged(crel, &t, &e[i]) > 0)
			continue;
		if (TransactionIdIsValid(latest) &&
			TransactionIdPrecedesOrEquals(xid, latest) &&
			TransactionIdDidCommit(xid))
		{
			SpindleRun	r;
			bool		found;

			memset(&r, 0, sizeof(r));
			r.first = e[i].first;
			r.len = (uint32) e[i].len;
			r.kind = SPINDLE_RUN_CONSUMED;
			r.due = (TimestampTz) U64FromFullTransactionId(
				FullTransactionIdFromEpochAndXid(0, FrozenTransactionId));
			/*
			 * In place: never cut and inserted again (review, finding 1).
			 * Consumers write only over ids no live entry covers, so a
			 * committed entry stays as read.
			 */
			LWLockAcquire(log_write_lock(crel), LW_EXCLUSIVE);
			found = spindle_tree_replace_exact(&t, &r);
			LWLockRelease(log_write_lock(crel));
			if (found)
				continue;
			/* not found as read (cannot happen: see above) */
			elog(ERROR, "consume log entry at %lld changed under VACUUM",
				 (long long) r.first);
		}
		if (!TransactionIdIsValid(oldest) || TransactionIdPrecedes(xid, oldest))
			oldest = xid;
	}
	if (e != NULL)
		pfree(e);
	UnlockPage(crel, SPINDLE_TREE_CONSUME_LOG, ShareUpdateExclusiveLock);
	return oldest;
}
