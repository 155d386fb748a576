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
 * the page.  With no reusable page the relation is extended.  The list is
 * LIFO; a head not yet reusable makes the allocation extend.  A writer
 * that must not fail for want of disk space (a consumer recording in the
 * consume log) makes sure of its pages first (spindle_crel_reserve_pages):
 * new pages put on the list's head stamped with the oldest normal xid,
 * reusable at once, or nothing when the file system has no room for them.
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
 * Every change to a page is logged by one record that sets the page's LSN
 * (a fake LSN for an unlogged relation) before its buffer lock is let go.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/statvfs.h>

#include "access/transam.h"
#include "access/xlog.h"
#include "access/xloginsert.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "common/relpath.h"
#include "storage/lmgr.h"
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
 * A page for a new tree page, exclusively locked, to be initialised by the
 * caller's record (registered REGBUF_WILL_INIT): the free list's head if
 * no snapshot can still see it (REUSE record), else a new block.  Takes
 * and releases the metapage lock; the caller may hold tree page locks.
 */
Buffer
spindle_crel_alloc_page(Relation crel)
{
	Buffer		mbuf = spindle_crel_meta_lock(crel, BUFFER_LOCK_EXCLUSIVE);
	SpindleCrelMeta *meta = SpindleCrelGetMeta(BufferGetPage(mbuf));
	Buffer		buf;

	if (meta->free_head != InvalidBlockNumber)
	{
		BlockNumber blk = meta->free_head;
		Buffer		fbuf = ReadBuffer(crel, blk);
		Page		fpage;
		SpindleCpageOpaque *fop;

		LockBuffer(fbuf, BUFFER_LOCK_EXCLUSIVE);
		fpage = BufferGetPage(fbuf);
		if (!spindle_crel_page_is(fpage, SPINDLE_CPAGE_FREE, 0))
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("consumer relation \"%s\": block %u on the free list is not a free page",
							RelationGetRelationName(crel), blk)));
		fop = SpindleCpageGetOpaque(fpage);
		if (GlobalVisCheckRemovableFullXid(NULL, fop->freed_xid))
		{
			xl_spindle_reuse xlrec;
			SpindleCrelWal w;

			xlrec.node = crel->rd_node;
			xlrec.horizon = fop->freed_xid;
			xlrec.block = blk;
			xlrec.next = fop->right;

			START_CRIT_SECTION();
			meta->free_head = fop->right;
			meta->nfree--;
			MarkBufferDirty(mbuf);
			spindle_crel_wal_begin(&w, crel, &xlrec, sizeof(xlrec));
			spindle_crel_wal_block(&w, mbuf, 0, NULL, 0);
			(void) spindle_crel_wal_insert(&w, XLOG_SPINDLE_REUSE);
			END_CRIT_SECTION();
			UnlockReleaseBuffer(mbuf);
			return fbuf;
		}
		UnlockReleaseBuffer(fbuf);
	}
	UnlockReleaseBuffer(mbuf);

	LockRelationForExtension(crel, ExclusiveLock);
	buf = ReadBuffer(crel, P_NEW);
	UnlockRelationForExtension(crel, ExclusiveLock);
	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	return buf;
}

static void free_page_stamped(Relation crel, Buffer buf, uint32 sub,
							  bool drop_tree, BlockNumber replacement,
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
	free_page_stamped(crel, buf, sub, drop_tree, InvalidBlockNumber,
					  ReadNextFullTransactionId());
}

/*
 * Free the meta block in buf of tree sub (exclusively locked by the
 * caller) and name replacement, the meta block of a tree built beside it,
 * as tree sub in the metapage, in one record: readers then find the new
 * tree, and one still on the old tree's pages finds them as they were
 * until they are reused, which deferred reuse puts off past its snapshot.
 */
void
spindle_crel_swap_tree_meta(Relation crel, Buffer buf, uint32 sub,
							BlockNumber replacement)
{
	Assert(replacement != InvalidBlockNumber);
	free_page_stamped(crel, buf, sub, true, replacement,
					  ReadNextFullTransactionId());
}

/*
 * How many of the free list's first pages (up to n) can be taken at once:
 * counted from its head to the first one some snapshot may still see.
 * Takes the metapage's share lock, then each page's, one at a time.
 */
static int
reusable_on_top(Relation crel, int n)
{
	Buffer		mbuf = spindle_crel_meta_lock(crel, BUFFER_LOCK_SHARE);
	BlockNumber blk = SpindleCrelGetMeta(BufferGetPage(mbuf))->free_head;
	int			have = 0;

	while (have < n && blk != InvalidBlockNumber)
	{
		Buffer		fbuf = ReadBuffer(crel, blk);
		Page		fpage;
		bool		ok;

		LockBuffer(fbuf, BUFFER_LOCK_SHARE);
		fpage = BufferGetPage(fbuf);
		ok = spindle_crel_page_is(fpage, SPINDLE_CPAGE_FREE, 0) &&
			GlobalVisCheckRemovableFullXid(NULL,
										   SpindleCpageGetOpaque(fpage)->freed_xid);
		blk = SpindleCpageGetOpaque(fpage)->right;
		UnlockReleaseBuffer(fbuf);
		if (!ok)
			break;
		have++;
	}
	UnlockReleaseBuffer(mbuf);
	return have;
}

/* Has the file system holding crel room for n more pages, and a margin? */
static bool
room_for(Relation crel, int n)
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
	if (!room_for(crel, n - have))
		return false;
	for (; have < n; have++)
	{
		Buffer		buf;

		LockRelationForExtension(crel, ExclusiveLock);
		buf = ReadBuffer(crel, P_NEW);
		UnlockRelationForExtension(crel, ExclusiveLock);
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		free_page_stamped(crel, buf, 0, false, InvalidBlockNumber,
						  FullTransactionIdFromEpochAndXid(0, FirstNormalTransactionId));
		UnlockReleaseBuffer(buf);
	}
	return true;
}

/* spindle_crel_free_page with the page stamped stamp (see above). */
static void
free_page_stamped(Relation crel, Buffer buf, uint32 sub, bool drop_tree,
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
	xlrec.flags = drop_tree ? XLFR_DROP_TREE : 0;
	xlrec.replacement = replacement;
	if (drop_tree && replacement != InvalidBlockNumber)
		xlrec.flags |= XLFR_SWAP_TREE;

	START_CRIT_SECTION();
	spindle_crel_init_page(page, SPINDLE_CPAGE_FREE, 0, 0);
	op = SpindleCpageGetOpaque(page);
	op->freed_xid = xlrec.freed_xid;
	op->right = xlrec.next;
	meta->free_head = BufferGetBlockNumber(buf);
	meta->nfree++;
	if (drop_tree)
		meta->trees[sub] = replacement;
	MarkBufferDirty(buf);
	MarkBufferDirty(mbuf);
	spindle_crel_wal_begin(&w, crel, &xlrec, sizeof(xlrec));
	spindle_crel_wal_block(&w, buf, REGBUF_WILL_INIT, NULL, 0);
	spindle_crel_wal_block(&w, mbuf, 0, NULL, 0);
	(void) spindle_crel_wal_insert(&w, XLOG_SPINDLE_FREE);
	END_CRIT_SECTION();
	UnlockReleaseBuffer(mbuf);
}
