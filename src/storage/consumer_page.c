/*-------------------------------------------------------------------------
 *
 * consumer_page.c
 *	  Pages of a queue's consumer relation (consumer_rel.c): the metapage
 *	  under a buffer lock, allocation of a page from the free list with
 *	  deferred reuse, freeing, and the building of the WAL record of a
 *	  change to pages that every writer of the relation uses
 *	  (docs/design.md, "Consumer state that scales with what stays",
 *	  sections 3, 4, 14).  The straggler tree that uses these pages is in
 *	  consumer_tree.c; the redo of the FREE and REUSE records written here
 *	  is in consumer_xlog.c.
 *
 * Pages.  Block 0 is the metapage (free list head, counters, the tree
 * meta block of each subscription).  A freed page goes on the free list
 * (FREE record) stamped with the next full xid at that moment; it is
 * taken again only once GlobalVisCheckRemovableFullXid says no snapshot
 * can still see that xid (nbtree's rule for deleted pages): a reader that
 * read a pointer to it before the free still holds a snapshot that old.
 * Taking it writes a REUSE record carrying that xid as the conflict
 * horizon, on which a standby cancels the queries that could still read
 * the page.  The list is LIFO; an allocation takes the first page no
 * snapshot sees among its first FREE_LOOKAHEAD (the pages freed last lie
 * on top), and with none the relation is extended.  A writer
 * that must not fail for want of disk space (a consumer recording in the
 * consume log) makes sure of its pages first (spindle_crel_reserve_pages):
 * new pages put on the list's head stamped with the oldest normal xid,
 * reusable at once, or nothing when the file system has no room for them.
 * Which trees the metapage names, in use or set aside (being built, or
 * being given back), changes in FREE records and, for a swap or a drop, in
 * a GenericXLog delta of the metapage (spindle_crel_set_trees).
 *
 * Locks.  The callers are a tree's writers (consumer_tree.c), serialised
 * per tree by its writer lock; the free list is shared by every tree of
 * the relation and is kept consistent by the metapage's exclusive buffer
 * lock alone.  Any page is locked before the metapage, and the metapage
 * before a free page it names; the relation extension lock is taken with
 * no metapage lock held.  A caller may hold tree page locks (the
 * reservation: none).
 *
 * Invariants: a page on the free list is referenced by no tree; it is
 * handed out again only once no snapshot can still see its free xid.
 * Every change to a page is logged by one record before its buffer lock
 * is let go; each change to the free list sets the metapage's LSN (a fake
 * LSN for an unlogged relation), which the reservation hints rely on.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/statvfs.h>

#include "access/generic_xlog.h"
#include "access/transam.h"
#include "access/xlog.h"
#include "access/xloginsert.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "common/relpath.h"
#include "storage/lmgr.h"
#include "utils/hsearch.h"
#include "utils/snapmgr.h"

#include "storage/spindle_storage.h"

/* ----------------------------------------------------------------
 * The record of a change to pages
 * ----------------------------------------------------------------
 */

/*
 * Begin a record of changes to crel's pages, in the writer's critical
 * section once the pages are changed and marked dirty: xlrec is its main
 * data.  Nothing is logged for an unlogged crel.
 */
void
spindle_crel_wal_begin(SpindleCrelWal *w, Relation crel, void *xlrec,
					   Size len)
{
	w->needs_wal = RelationNeedsWAL(crel);
	w->nbufs = 0;
	if (w->needs_wal)
	{
		XLogBeginInsert();
		XLogRegisterData((char *) xlrec, len);
	}
}

/*
 * Register the page in buf (exclusively locked) as the record's next block
 * (block ids 0, 1, ... in the order of the calls), REGBUF_STANDARD plus
 * flags; data, unless NULL, is that block's data.
 */
void
spindle_crel_wal_block(SpindleCrelWal *w, Buffer buf, uint8 flags,
					   char *data, uint32 len)
{
	if (w->nbufs >= lengthof(w->bufs))
		elog(PANIC, "spindle: too many blocks in a consumer relation record");
	if (w->needs_wal)
	{
		XLogRegisterBuffer((uint8) w->nbufs, buf, REGBUF_STANDARD | flags);
		if (data != NULL)
			XLogRegisterBufData((uint8) w->nbufs, data, len);
	}
	w->bufs[w->nbufs++] = buf;
}

/*
 * Insert the record as the spindle resource manager's info (a fake LSN
 * for an unlogged relation) and set every registered page's LSN to it.
 * Returns that LSN.
 */
XLogRecPtr
spindle_crel_wal_insert(SpindleCrelWal *w, uint8 info)
{
	XLogRecPtr	recptr;
	int			i;

	if (w->needs_wal)
		recptr = XLogInsert(SPINDLE_RMGR_ID, info);
	else
		recptr = GetFakeLSNForUnloggedRel();
	for (i = 0; i < w->nbufs; i++)
		PageSetLSN(BufferGetPage(w->bufs[i]), recptr);
	return recptr;
}

/* ----------------------------------------------------------------
 * The metapage, the free list
 * ----------------------------------------------------------------
 */

/*
 * The metapage in a buffer locked in mode, checked (ERROR if it is not
 * a valid one).
 */
Buffer
spindle_crel_meta_lock(Relation crel, int mode)
{
	Buffer		buf = ReadBuffer(crel, SPINDLE_CREL_METAPAGE);

	LockBuffer(buf, mode);
	(void) spindle_crel_check_meta(crel, buf);
	return buf;
}

/*
 * How far down the free list an allocation looks for a page no snapshot
 * can still see.  The list is LIFO, so the pages freed last (a tree
 * rebuilt and swapped in frees all the old tree's at once) lie on top,
 * still visible to the snapshots of their moment, over older pages that
 * no snapshot sees any more; taking only the head, every allocation made
 * before the horizon passes the newest free extended the relation, which
 * then grew by a few pages per rebuild for as long as a queue was
 * consumed (turn 4, session 10).
 */
#define FREE_LOOKAHEAD	64

/*
 * The first of the free list's first FREE_LOOKAHEAD pages that no
 * snapshot can still see (GlobalVisCheckRemovableFullXid, nbtree's rule
 * for deleted pages), or InvalidBlockNumber; *prev is the page before it
 * (InvalidBlockNumber: it is the head), *next the one after it, *stamp
 * its free xid.  The caller holds the metapage's lock, which the list
 * changes under; each page is share-locked for its look only.
 */
static BlockNumber
find_reusable(Relation crel, BlockNumber head, BlockNumber *prev,
			  BlockNumber *next, FullTransactionId *stamp)
{
	BlockNumber before = InvalidBlockNumber;
	BlockNumber blk = head;

	for (int i = 0; i < FREE_LOOKAHEAD && blk != InvalidBlockNumber; i++)
	{
		Buffer		fbuf = ReadBuffer(crel, blk);
		Page		fpage;
		SpindleCpageOpaque *fop;
		bool		ok;

		LockBuffer(fbuf, BUFFER_LOCK_SHARE);
		fpage = BufferGetPage(fbuf);
		if (!spindle_crel_page_is(fpage, SPINDLE_CPAGE_FREE, 0))
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("consumer relation \"%s\": block %u on the free list is not a free page",
							RelationGetRelationName(crel), blk)));
		fop = SpindleCpageGetOpaque(fpage);
		ok = GlobalVisCheckRemovableFullXid(NULL, fop->freed_xid);
		*next = fop->right;
		*stamp = fop->freed_xid;
		UnlockReleaseBuffer(fbuf);
		if (ok)
		{
			*prev = before;
			return blk;
		}
		before = blk;
		blk = *next;
	}
	return InvalidBlockNumber;
}

/*
 * A page for a new tree page, exclusively locked, to be initialised by the
 * caller's record (registered REGBUF_WILL_INIT): a page of the free list
 * no snapshot can still see, among its first FREE_LOOKAHEAD (find_reusable),
 * taken off the list by a REUSE record (of the metapage, and of the page
 * before it when it is not the head), else a new block.  Takes and
 * releases the metapage lock, and the lock of the page before; the caller
 * may hold tree page locks.
 */
Buffer
spindle_crel_alloc_page(Relation crel)
{
	Buffer		mbuf = spindle_crel_meta_lock(crel, BUFFER_LOCK_EXCLUSIVE);
	SpindleCrelMeta *meta = SpindleCrelGetMeta(BufferGetPage(mbuf));
	BlockNumber prev = InvalidBlockNumber;
	BlockNumber next = InvalidBlockNumber;
	FullTransactionId stamp = InvalidFullTransactionId;
	BlockNumber blk = find_reusable(crel, meta->free_head, &prev, &next,
									&stamp);
	Buffer		buf;

	if (blk != InvalidBlockNumber)
	{
		Buffer		fbuf = ReadBuffer(crel, blk);
		Buffer		pbuf = InvalidBuffer;
		xl_spindle_reuse xlrec;
		SpindleCrelWal w;

		LockBuffer(fbuf, BUFFER_LOCK_EXCLUSIVE);
		if (prev != InvalidBlockNumber)
		{
			pbuf = ReadBuffer(crel, prev);
			LockBuffer(pbuf, BUFFER_LOCK_EXCLUSIVE);
		}
		xlrec.node = crel->rd_node;
		xlrec.horizon = stamp;
		xlrec.block = blk;
		xlrec.next = next;
		xlrec.prev = prev;

		START_CRIT_SECTION();
		if (BufferIsValid(pbuf))
		{
			SpindleCpageGetOpaque(BufferGetPage(pbuf))->right = next;
			MarkBufferDirty(pbuf);
		}
		else
			meta->free_head = next;
		meta->nfree--;
		MarkBufferDirty(mbuf);
		spindle_crel_wal_begin(&w, crel, &xlrec, sizeof(xlrec));
		spindle_crel_wal_block(&w, mbuf, 0, NULL, 0);
		if (BufferIsValid(pbuf))
			spindle_crel_wal_block(&w, pbuf, 0, NULL, 0);
		(void) spindle_crel_wal_insert(&w, XLOG_SPINDLE_REUSE);
		END_CRIT_SECTION();
		if (BufferIsValid(pbuf))
			UnlockReleaseBuffer(pbuf);
		UnlockReleaseBuffer(mbuf);
		return fbuf;
	}
	UnlockReleaseBuffer(mbuf);

	LockRelationForExtension(crel, ExclusiveLock);
	buf = ReadBuffer(crel, P_NEW);
	UnlockRelationForExtension(crel, ExclusiveLock);
	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	return buf;
}

static void free_page_stamped(Relation crel, Buffer buf, uint32 sub,
							  uint16 flags, BlockNumber replacement,
							  FullTransactionId stamp);

/*
 * Put the page in buf (exclusively locked by the caller, referenced by
 * nothing any more) on the free list, stamped with the next full xid;
 * with drop_tree, tree sub is forgotten in the metapage too.  Takes and
 * releases the metapage lock.
 */
void
spindle_crel_free_page(Relation crel, Buffer buf, uint32 sub, bool drop_tree)
{
	free_page_stamped(crel, buf, sub, drop_tree ? XLFR_DROP_TREE : 0,
					  InvalidBlockNumber, ReadNextFullTransactionId());
}

/*
 * Name tree (or InvalidBlockNumber: none) as tree sub's meta block in the
 * metapage and aside (or 0) as the tree set aside beside it, in one
 * record (GenericXLog, a delta of the metapage): a swap names the tree
 * built beside it and sets the old one aside, a drop names none and sets
 * it aside, and the old tree's pages are then given back
 * (consumer_tree.c, retire_tree).  Takes and releases the metapage lock.
 */
void
spindle_crel_set_trees(Relation crel, uint32 sub, BlockNumber tree,
					   BlockNumber aside)
{
	Buffer		buf = spindle_crel_meta_lock(crel, BUFFER_LOCK_EXCLUSIVE);
	GenericXLogState *state = GenericXLogStart(crel);
	Page		page = GenericXLogRegisterBuffer(state, buf, 0);

	SpindleCrelGetMeta(page)->trees[sub] = tree;
	spindle_crel_meta_set_aside(page, sub, aside);
	GenericXLogFinish(state);
	UnlockReleaseBuffer(buf);
}

/*
 * Free the meta block in buf (exclusively locked by the caller) of the
 * tree set aside beside tree sub, its other pages given back already, and
 * name none set aside in the metapage, in one record (consumer_tree.c).
 */
void
spindle_crel_free_aside_meta(Relation crel, Buffer buf, uint32 sub)
{
	free_page_stamped(crel, buf, sub, XLFR_DROP_ASIDE, InvalidBlockNumber,
					  ReadNextFullTransactionId());
}

/*
 * What this backend last found on a consumer relation's free list: the
 * number of its first pages that no snapshot could still see, as of the
 * metapage's LSN then.  Every change to the list changes the metapage under
 * a record that sets its LSN (a fake LSN for an unlogged relation), so
 * while the LSN is unchanged the same pages are on top, and they are all
 * still reusable if the newest of their free xids still is (checked again:
 * the horizon may move back, by a standby's feedback: review rv8), so the
 * list's pages need not be read again: a consumer going round many queues
 * read three of them per call (turn 4, session 12).  Keyed by relfilenode,
 * so a TRUNCATE's new file starts afresh; at most RESERVE_HINTS_MAX entries
 * (then forgotten all at once: under 1 MB; local_cache.c).
 */
typedef struct ReserveHint
{
	RelFileNode node;			/* hash key */
	XLogRecPtr	lsn;			/* the metapage's LSN at the look */
	int			have;			/* reusable pages found on top */
	FullTransactionId newest;	/* the newest free xid among them */
} ReserveHint;

#define RESERVE_HINTS_MAX	16384

static HTAB *reserve_hints = NULL;

/* The hint for node, made (with lsn invalid) if absent. */
static ReserveHint *
reserve_hint(RelFileNode node)
{
	HTAB	   *hints = spindle_local_cache(&reserve_hints,
											"spindle reservation hints",
											sizeof(RelFileNode),
											sizeof(ReserveHint),
											RESERVE_HINTS_MAX);
	bool		found;
	ReserveHint *h = hash_search(hints, &node, HASH_ENTER, &found);

	if (!found)
	{
		h->lsn = InvalidXLogRecPtr;
		h->have = 0;
		h->newest = InvalidFullTransactionId;
	}
	return h;
}

/*
 * How many pages (up to n) an allocation can take at once: those among
 * the free list's first FREE_LOOKAHEAD that no snapshot can still see
 * (spindle_crel_alloc_page takes them wherever they are in that window).
 * Takes the metapage's share lock, then each page's, one at a time; reads
 * no free page when this backend's last look (ReserveHint) is still true.
 */
static int
reusable_on_top(Relation crel, int n)
{
	Buffer		mbuf = spindle_crel_meta_lock(crel, BUFFER_LOCK_SHARE);
	Page		mpage = BufferGetPage(mbuf);
	BlockNumber blk = SpindleCrelGetMeta(mpage)->free_head;
	ReserveHint *hint = reserve_hint(crel->rd_node);
	FullTransactionId newest;
	int			have = 0;

	if (hint->lsn == PageGetLSN(mpage) && hint->have >= n &&
		GlobalVisCheckRemovableFullXid(NULL, hint->newest))
	{
		UnlockReleaseBuffer(mbuf);
		return hint->have;
	}
	newest = FullTransactionIdFromEpochAndXid(0, FirstNormalTransactionId);
	for (int i = 0; i < FREE_LOOKAHEAD && have < n &&
		 blk != InvalidBlockNumber; i++)
	{
		Buffer		fbuf = ReadBuffer(crel, blk);
		Page		fpage;
		FullTransactionId stamp;

		LockBuffer(fbuf, BUFFER_LOCK_SHARE);
		fpage = BufferGetPage(fbuf);
		stamp = SpindleCpageGetOpaque(fpage)->freed_xid;
		if (spindle_crel_page_is(fpage, SPINDLE_CPAGE_FREE, 0) &&
			GlobalVisCheckRemovableFullXid(NULL, stamp))
		{
			have++;
			if (FullTransactionIdFollows(stamp, newest))
				newest = stamp;
		}
		blk = SpindleCpageGetOpaque(fpage)->right;
		UnlockReleaseBuffer(fbuf);
	}
	hint->lsn = PageGetLSN(mpage);
	hint->have = have;
	hint->newest = newest;
	UnlockReleaseBuffer(mbuf);
	return have;
}

/*
 * Check the free list of crel (verify()): every page on it is a free page
 * of the relation, none is on it twice, and it holds the metapage's count
 * of them.  Read under the metapage's share lock, which the list changes
 * under, each page share-locked for its look only.  Each problem goes to
 * report.
 */
void
spindle_crel_check_free_list(Relation crel, spindle_mapdir_report report,
							 void *arg)
{
	BlockNumber nblocks;
	Buffer		mbuf;
	SpindleCrelMeta *meta;
	bool	   *seen;
	BlockNumber blk;
	uint32		n = 0;

	if (RelationGetNumberOfBlocks(crel) == 0)
		return;
	mbuf = spindle_crel_meta_lock(crel, BUFFER_LOCK_SHARE);
	meta = SpindleCrelGetMeta(BufferGetPage(mbuf));
	/*
	 * The length after the lock: a reservation extends the relation, then
	 * puts the new page on the list under the metapage's exclusive lock
	 * (review rv4: read before, it reported a page outside the relation).
	 */
	nblocks = RelationGetNumberOfBlocks(crel);
	seen = palloc0(sizeof(bool) * nblocks);
	for (blk = meta->free_head; blk != InvalidBlockNumber;)
	{
		Buffer		fbuf;
		Page		fpage;

		if (blk == 0 || blk >= nblocks)
		{
			report(arg, psprintf("consumer relation: free list names block %u, outside the relation's %u blocks",
								 blk, nblocks));
			break;
		}
		if (seen[blk])
		{
			report(arg, psprintf("consumer relation: block %u is on the free list twice",
								 blk));
			break;
		}
		seen[blk] = true;
		n++;
		fbuf = ReadBuffer(crel, blk);
		LockBuffer(fbuf, BUFFER_LOCK_SHARE);
		fpage = BufferGetPage(fbuf);
		if (!spindle_crel_page_is(fpage, SPINDLE_CPAGE_FREE, 0))
		{
			report(arg, psprintf("consumer relation: block %u on the free list is not a free page",
								 blk));
			UnlockReleaseBuffer(fbuf);
			break;
		}
		blk = SpindleCpageGetOpaque(fpage)->right;
		UnlockReleaseBuffer(fbuf);
	}
	if (blk == InvalidBlockNumber && n != meta->nfree)
		report(arg, psprintf("consumer relation: %u pages on the free list, the metapage counts %u",
							 n, meta->nfree));
	UnlockReleaseBuffer(mbuf);
	pfree(seen);
}

/* Has the file system holding crel room for n more pages, and a margin? */
bool
spindle_crel_room_for(Relation crel, int n)
{
	char	   *path = relpathbackend(crel->rd_node, InvalidBackendId,
									  MAIN_FORKNUM);
	struct statvfs st;
	bool		room;

	if (statvfs(path, &st) != 0)
		room = true;			/* cannot tell: the extension will say */
	else
		room = (uint64) st.f_bavail * st.f_frsize >=
			(uint64) (n + SPINDLE_CREL_ROOM_MARGIN) * BLCKSZ;
	pfree(path);
	return room;
}

/*
 * Make sure the next n page allocations of crel need not extend it: the
 * free list's first n pages can be taken at once, or the relation is
 * extended now and the new pages put on the list's head, stamped with the
 * oldest normal xid (no snapshot ever saw them: taken at once, with no
 * standby conflict).  False, with nothing done, when the file system
 * holding crel has no room for them beyond a margin (statvfs): a consumer
 * then purges by xmax for the call, which needs no new page
 * (queue_consumed.c).  No buffer lock may be held.  Another writer of the
 * relation (the parked trees) may still take the pages first, and space
 * may go between the look and the extension: an error then, as before.
 */
bool
spindle_crel_reserve_pages(Relation crel, int n)
{
	int			have = reusable_on_top(crel, n);

	if (have >= n)
		return true;
	if (!spindle_crel_room_for(crel, n - have))
		return false;
	for (; have < n; have++)
	{
		Buffer		buf;

		LockRelationForExtension(crel, ExclusiveLock);
		buf = ReadBuffer(crel, P_NEW);
		UnlockRelationForExtension(crel, ExclusiveLock);
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		free_page_stamped(crel, buf, 0, 0, InvalidBlockNumber,
						  FullTransactionIdFromEpochAndXid(0, FirstNormalTransactionId));
		UnlockReleaseBuffer(buf);
	}
	return true;
}

/*
 * The metapage's side of a FREE record (the primary's and redo's): blk
 * heads the free list, and the flags' tree changes are made.
 */
void
spindle_crel_meta_freed(Page mpage, BlockNumber blk,
						const xl_spindle_free *xlrec)
{
	SpindleCrelMeta *meta = SpindleCrelGetMeta(mpage);

	meta->free_head = blk;
	meta->nfree++;
	if (xlrec->flags & XLFR_SWAP_TREE)
		meta->trees[xlrec->sub] = xlrec->replacement;	/* old WAL only */
	else if (xlrec->flags & XLFR_DROP_TREE)
		meta->trees[xlrec->sub] = InvalidBlockNumber;
	if (xlrec->flags & XLFR_DROP_ASIDE)
		spindle_crel_meta_set_aside(mpage, xlrec->sub, 0);
}

/*
 * spindle_crel_free_page with the page stamped stamp and the metapage
 * changed as flags (XLFR_*) say (see above).
 */
static void
free_page_stamped(Relation crel, Buffer buf, uint32 sub, uint16 flags,
				  BlockNumber replacement, FullTransactionId stamp)
{
	Buffer		mbuf = spindle_crel_meta_lock(crel, BUFFER_LOCK_EXCLUSIVE);
	Page		mpage = BufferGetPage(mbuf);
	SpindleCrelMeta *meta = SpindleCrelGetMeta(mpage);
	Page		page = BufferGetPage(buf);
	SpindleCpageOpaque *op;
	xl_spindle_free xlrec;
	SpindleCrelWal w;

	xlrec.freed_xid = stamp;
	xlrec.next = meta->free_head;
	xlrec.sub = sub;
	xlrec.flags = flags;
	xlrec.replacement = replacement;

	START_CRIT_SECTION();
	spindle_crel_init_page(page, SPINDLE_CPAGE_FREE, 0, 0);
	op = SpindleCpageGetOpaque(page);
	op->freed_xid = xlrec.freed_xid;
	op->right = xlrec.next;
	spindle_crel_meta_freed(mpage, BufferGetBlockNumber(buf), &xlrec);
	MarkBufferDirty(buf);
	MarkBufferDirty(mbuf);
	spindle_crel_wal_begin(&w, crel, &xlrec, sizeof(xlrec));
	spindle_crel_wal_block(&w, buf, REGBUF_WILL_INIT, NULL, 0);
	spindle_crel_wal_block(&w, mbuf, 0, NULL, 0);
	(void) spindle_crel_wal_insert(&w, XLOG_SPINDLE_FREE);
	END_CRIT_SECTION();
	UnlockReleaseBuffer(mbuf);
}
