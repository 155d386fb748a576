/*-------------------------------------------------------------------------
 *
 * consume_log.c
 *	  The consume log of a queue: which msg_ids a transaction consumed,
 *	  kept outside the event pages, in tree 2 of the queue's consumer
 *	  relation (SPINDLE_TREE_CONSUME_LOG; consumer_tree.c; docs/design.md,
 *	  "Consumer state that scales with what stays", "Consume log: reader
 *	  side (built)").
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
 * any reader of the tree, one buffer lock at a time.  The writer holds the
 * relation RowExclusiveLock and the tree's writer lock (LockPage of block
 * number SPINDLE_TREE_CONSUME_LOG, ExclusiveLock: spindle_consume_log_
 * lock) for its whole call; it may hold a share lock of the event's page
 * while it writes (the lock protocol with DML, see hidden.c).
 *
 * Invariants: entries never overlap (the tree's); an entry only merges
 * with the one before it when their xid and command id are equal, so an
 * entry's (xid, cid) holds for every id it covers.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"

#include "storage/spindle_storage.h"

/* Open tree 2 of crel for reading (writer: the caller holds its lock). */
static void
log_tree(Relation crel, bool writer, SpindleTree *t)
{
	t->crel = crel;
	t->sub = SPINDLE_TREE_CONSUME_LOG;
	t->writer = writer;
	t->meta_blk = InvalidBlockNumber;
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

/*
 * The entries that cover an id of [lo, hi), in id order, as a palloc'd
 * array (*n of them; NULL if none).  One range read of the tree: a leaf at
 * a time, crossing splits by right-links (spindle_tree_next).
 */
SpindleConsumed *
spindle_consume_log_read(Relation crel, int64 lo, int64 hi, int *n)
{
	SpindleTree t;
	SpindleRun	r;
	SpindleConsumed *out = NULL;
	int			nalloc = 0;
	int64		x = lo;

	*n = 0;
	log_tree(crel, false, &t);
	while (x < hi && spindle_tree_next(&t, x, &r) && r.first < hi)
	{
		if (*n >= nalloc)
		{
			nalloc = nalloc ? nalloc * 2 : 16;
			out = out ? repalloc(out, nalloc * sizeof(SpindleConsumed)) :
				palloc(nalloc * sizeof(SpindleConsumed));
		}
		if (entry_from_run(&r, &out[*n]))
			(*n)++;
		x = spindle_run_end(&r);
	}
	return out;
}

/* Take and let go of the consume log's writer lock (see above). */
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

/*
 * Record that (fxid, cid) consumed msg_id id.  The caller holds the
 * writer lock and has checked that no live entry covers id (an aborted
 * one is replaced).  Merged into the entry ending at id when that has the
 * same xid and command id.  WAL-logged by the tree (STRAGGLE and splits).
 */
void
spindle_consume_log_add(Relation crel, int64 id, FullTransactionId fxid,
						CommandId cid)
{
	SpindleTree t;
	SpindleRun	r;
	SpindleConsumed prev;

	log_tree(crel, true, &t);
	memset(&r, 0, sizeof(r));
	r.first = id;
	r.len = 1;
	r.kind = SPINDLE_RUN_CONSUMED;
	r.due = (TimestampTz) U64FromFullTransactionId(fxid);
	r.awaited = (uint32) cid;
	if (id > PG_INT64_MIN &&
		spindle_consume_log_probe(crel, id - 1, &prev) &&
		prev.first + prev.len == id && prev.len < PG_UINT32_MAX &&
		FullTransactionIdEquals(prev.fxid, fxid) && prev.cid == cid)
	{
		r.first = prev.first;
		r.len = (uint32) prev.len + 1;
	}
	spindle_tree_upsert(&t, &r);
}
