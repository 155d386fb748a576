/*-------------------------------------------------------------------------
 *
 * consumer_tree.c
 *	  The straggler tree of a queue's consumer relation (consumer_rel.c):
 *	  a B+-tree of runs keyed by first msg_id per subscription, one per
 *	  subscription, on the relation's pages (consumer_page.c): search,
 *	  run upsert and removal, splits, finishing an incomplete split, new
 *	  roots (docs/design.md, "Consumer state that scales with what
 *	  stays", sections 3, 4, 14).  Its WAL records are described and
 *	  redone in consumer_xlog.c; the test-only SQL functions that drive
 *	  it, spindle._run_*(), are in consumer_test.c.
 *
 * The tree (Lehman and Yao, as nbtree): every page has a right-link and,
 * unless rightmost on its level, a high key above all its keys; inner
 * pages hold (key, child) downlinks, the first one standing for minus
 * infinity; leaves hold SpindleRun items (32 bytes), sorted by first id
 * and never overlapping.  A tree meta block holds root and level.  A full
 * page is split (SPLIT: the left page keeps the lower half, the new right
 * page gets the rest, the left is flagged INCOMPLETE_SPLIT), then the
 * downlink of the right half goes into the parent (INSERT_UPPER, which
 * clears the flag) or, for the root, into a new root (NEWROOT).  A crash
 * in between leaves a flagged page that the next writer landing on it
 * finishes first; readers cross it by its right-link as any split.  The
 * tree never deletes a page alone; spindle_tree_drop() frees a whole tree
 * (FREE per page: queue_parked.c when its trees are empty, and the test
 * function spindle._run_drop()), and a tree can be rebuilt beside itself
 * and swapped in (spindle_tree_detached, spindle_tree_swap: the relocation
 * entries, relocation.c): its pages carry a tag, the tree's number plus a
 * generation, so a reader finds a page freed and reused by the rebuilt
 * tree not its own.  The metapage names a tree set aside beside the one in
 * use, being built until its swap or given back after a swap or a drop,
 * so what a crash or an error leaves of one is given back before that
 * number's next tree is made (reclaim_aside).
 * spindle_tree_lookup/next/pop/count read or remove runs in key order
 * (queue_parked.c).
 *
 * Locks.  Writers of one tree are serialised by a heavyweight lock
 * (LockPage on the consumer relation with the subscription number as
 * block number, ExclusiveLock, to the end of the operation), so a run
 * upsert that touches several leaves is never interleaved with another
 * one of the same tree.  Readers take no heavyweight lock but the
 * relation's, and hold one buffer lock at a time: a page whose kind,
 * subscription or level is not what they expected (freed and reused
 * meanwhile) makes them start again from the metapage.  Writers take
 * buffer locks left before right, child before parent, tree pages before
 * the tree meta block, any page before the metapage, and the metapage
 * before a free page it names; redo takes a record's blocks in the order
 * they are registered, which follows the same order.  No buffer lock is
 * held while waiting for a heavyweight lock.
 *
 * Invariants: runs of a tree never overlap; every key of a page is at or
 * above its low bound (its left neighbour's high key) and below its high
 * key; every page but the right half of a flagged page has exactly one
 * downlink, whose key is the page's low bound.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/xlog.h"
#include "access/xloginsert.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"

#include "storage/spindle_storage.h"

StaticAssertDecl(sizeof(SpindleRun) == 32, "a run is 32 bytes");
StaticAssertDecl(offsetof(SpindleRun, first) == 0 &&
				 offsetof(SpindleDownlink, key) == 0,
				 "a tree page's items start with their int64 key");

/* ----------------------------------------------------------------
 * Page helpers
 * ----------------------------------------------------------------
 */

/* How many items a tree page of that level takes (test GUC caps it). */
static int
page_capacity(Size isz)
{
	int			cap = (int) ((BLCKSZ - MAXALIGN(sizeof(SpindleCpageOpaque)) -
							  MAXALIGN(SizeOfPageHeaderData)) / isz);

	if (spindle_test_tree_fanout > 0 && spindle_test_tree_fanout < cap)
		cap = spindle_test_tree_fanout;
	return cap;
}

/*
 * Index of the last item from index `first` on whose key (its leading
 * int64) is <= key, or first - 1; the items are isz bytes each.
 */
static int
page_search_le(Page page, Size isz, int first, int64 key)
{
	char	   *items = PageGetContents(page);
	int			lo = first,
				hi = spindle_cpage_nitems(page, isz);

	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;

		if (*(int64 *) (items + mid * isz) <= key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo - 1;
}

/* Index of the last run whose first is <= x, or -1. */
static int
leaf_search_le(Page page, int64 x)
{
	return page_search_le(page, sizeof(SpindleRun), 0, x);
}

/* Index of the first run whose first is >= x (nitems if none). */
int
spindle_leaf_search_ge(Page page, int64 x)
{
	if (x == PG_INT64_MIN)
		return 0;				/* x - 1 would wrap around */
	return leaf_search_le(page, x - 1) + 1;
}

/* The downlink to follow for key: the last whose key is <= key (item 0 is
 * minus infinity). */
static int
inner_search(Page page, int64 key)
{
	return page_search_le(page, sizeof(SpindleDownlink), 1, key);
}

/* ----------------------------------------------------------------
 * Finding pages
 * ----------------------------------------------------------------
 */

/*
 * Set t up to read (or, writer: the caller holds its writer lock, write)
 * tree sub of crel, as the metapage names it.
 */
void
spindle_tree_init(SpindleTree *t, Relation crel, uint32 sub, bool writer)
{
	t->crel = crel;
	t->sub = sub;
	t->tag = sub;
	t->writer = writer;
	t->detached = false;
	t->meta_blk = InvalidBlockNumber;
}

/* The tree meta block of subscription sub, or InvalidBlockNumber. */
BlockNumber
spindle_tree_meta_block(Relation crel, uint32 sub)
{
	Buffer		mbuf = spindle_crel_meta_lock(crel, BUFFER_LOCK_SHARE);
	BlockNumber blk = SpindleCrelGetMeta(BufferGetPage(mbuf))->trees[sub];

	UnlockReleaseBuffer(mbuf);
	return blk;
}

/*
 * Root and level of tree t, read from its meta block (looked up again in
 * the metapage); false if the tree does not exist (any more).  A meta
 * block freed between the two reads (a swap, spindle_tree_swap, or a
 * drop) sends it back to the metapage, which then names the new tree or
 * none.
 */
bool
spindle_tree_root(SpindleTree *t, BlockNumber *root, int *level)
{
	Buffer		buf;
	Page		page;
	SpindleCpageOpaque *op;

	for (int tries = 0;; tries++)
	{
		BlockNumber named = t->meta_blk;

		if (!t->detached)
			named = spindle_tree_meta_block(t->crel, t->sub);
		if (named == InvalidBlockNumber)
			return false;
		if (tries > 0 && named == t->meta_blk)
			return false;		/* named, and still not a tree meta block */
		t->meta_blk = named;
		if (tries == 0)
			spindle_test_pause_tree(t->sub);
		buf = ReadBuffer(t->crel, t->meta_blk);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		op = SpindleCpageGetOpaque(page);
		if (spindle_crel_page_is(page, SPINDLE_CPAGE_TREEMETA, op->sub) &&
			SPINDLE_TREE_TAG_SUB(op->sub) == t->sub)
			break;
		UnlockReleaseBuffer(buf);

		/*
		 * Freed since the metapage named it: a swap or a drop names the
		 * new tree (or none) in the metapage before it frees the old
		 * meta block (retire_tree), so the metapage read again names
		 * another block, or none.
		 */
		if (t->detached)
			return false;
	}
	t->tag = op->sub;
	*root = SpindleTreeMetaGet(page)->root;
	*level = (int) SpindleTreeMetaGet(page)->level;
	UnlockReleaseBuffer(buf);
	return true;
}

static void tree_finish_split(SpindleTree *t, BlockNumber blk, int level);
static BlockNumber *tree_pages(SpindleTree *t, bool partial, int *n);
static void free_pages(SpindleTree *t, BlockNumber *blocks, int n,
					   const char *pause);

typedef void (*TreePageVisitor) (void *arg, BlockNumber blk, Page page,
								 int level);

/*
 * Visit the pages of tree t level by level from the root down, each level
 * from its leftmost page along the right-links (leaves_only: the leaves
 * alone, reached down the leftmost downlinks), each under a share lock
 * held for the visit only.  False if there is no tree.  The caller keeps
 * what must not move still (a reader's walk sees a split as it is).  A
 * page that is not of the tree is an error, or, partial (a tree given back
 * in part, reclaim_aside), the end of its level, and of the walk if it
 * is the level's first.
 */
static bool
walk_tree(SpindleTree *t, bool leaves_only, bool partial,
		  TreePageVisitor visit, void *arg)
{
	BlockNumber leftmost;
	int			level;

	if (!spindle_tree_root(t, &leftmost, &level))
		return false;
	for (; level >= 0 && leftmost != InvalidBlockNumber; level--)
	{
		BlockNumber first = leftmost;
		BlockNumber blk = first;

		leftmost = InvalidBlockNumber;
		while (blk != InvalidBlockNumber)
		{
			Buffer		buf = ReadBuffer(t->crel, blk);
			Page		page;

			CHECK_FOR_INTERRUPTS();
			LockBuffer(buf, BUFFER_LOCK_SHARE);
			page = BufferGetPage(buf);
			if (!spindle_tree_page_ok(t, page, level))
			{
				if (!partial)
					elog(ERROR, "spindle: block %u is not a page of consumer tree %u",
						 blk, t->sub);
				UnlockReleaseBuffer(buf);
				break;
			}
			if (blk == first && level > 0)
				leftmost = spindle_inner_items(page)[0].child;
			if (level == 0 || !leaves_only)
				visit(arg, blk, page, level);
			blk = (level > 0 && leaves_only) ? InvalidBlockNumber :
				SpindleCpageGetOpaque(page)->right;
			UnlockReleaseBuffer(buf);
		}
	}
	return true;
}

/* The blocks tree_pages collects (a walk_tree visitor's). */
typedef struct BlockArray
{
	BlockNumber *blocks;
	int			n;
	int			nalloc;
} BlockArray;

static void
collect_block(void *arg, BlockNumber blk, Page page, int level)
{
	BlockArray *a = (BlockArray *) arg;

	if (a->n >= a->nalloc)
	{
		a->nalloc = a->nalloc ? a->nalloc * 2 : 64;
		a->blocks = a->blocks ?
			repalloc(a->blocks, a->nalloc * sizeof(BlockNumber)) :
			palloc(a->nalloc * sizeof(BlockNumber));
	}
	a->blocks[a->n++] = blk;
}

/*
 * The page of tree t at `level` whose key range holds key, locked in mode
 * (pages above it are share-locked on the way), its low bound in *low;
 * InvalidBuffer if the tree does not exist.  One buffer lock at a time:
 * a page split meanwhile is crossed by its right-link; a page that is no
 * longer a page of this tree at this level makes the descent start again.
 * A writer finishes an incomplete split it lands on, then starts again.
 */
Buffer
spindle_tree_descend(SpindleTree *t, int64 key, int level, int mode,
					 int64 *low)
{
	int			restarts = 0;

restart:
	{
		BlockNumber blk;
		int			curlevel;
		int64		lo = PG_INT64_MIN;

		if (!spindle_tree_root(t, &blk, &curlevel))
			return InvalidBuffer;
		if (level > curlevel)
			elog(ERROR, "spindle: tree level %d asked above the root's %d",
				 level, curlevel);
		for (;;)
		{
			Buffer		buf = ReadBuffer(t->crel, blk);
			Page		page;
			SpindleCpageOpaque *op;
			SpindleDownlink *dl;
			int			idx;

			LockBuffer(buf, curlevel == level ? mode : BUFFER_LOCK_SHARE);
			page = BufferGetPage(buf);
			op = SpindleCpageGetOpaque(page);
			if (!spindle_tree_page_ok(t, page, curlevel))
			{
				UnlockReleaseBuffer(buf);
				if (++restarts > 1000)
					elog(ERROR, "spindle: consumer tree of subscription %u keeps changing under a reader",
						 t->sub);
				goto restart;
			}
			if (t->writer && (op->flags & SPINDLE_CPAGE_INCOMPLETE_SPLIT))
			{
				UnlockReleaseBuffer(buf);
				tree_finish_split(t, blk, curlevel);
				goto restart;
			}
			if (op->right != InvalidBlockNumber && key >= op->high_key)
			{
				lo = op->high_key;
				blk = op->right;
				UnlockReleaseBuffer(buf);
				continue;
			}
			if (curlevel == level)
			{
				*low = lo;
				return buf;
			}
			idx = inner_search(page, key);
			dl = &spindle_inner_items(page)[idx];
			if (idx > 0)
				lo = dl->key;
			blk = dl->child;
			curlevel--;
			UnlockReleaseBuffer(buf);
		}
	}
}

/*
 * The leaf holding the run with the largest first <= x, locked in mode,
 * that run's index in *idx; InvalidBuffer if there is none.  Leaves left
 * empty by removals are passed by descending again below their low bound.
 */
Buffer
spindle_tree_find_le(SpindleTree *t, int64 x, int mode, int *idx)
{
	int64		key = x;

	for (;;)
	{
		int64		low;
		Buffer		buf = spindle_tree_descend(t, key, 0, mode, &low);

		if (!BufferIsValid(buf))
			return InvalidBuffer;
		*idx = leaf_search_le(BufferGetPage(buf), x);
		if (*idx >= 0)
			return buf;
		UnlockReleaseBuffer(buf);
		if (low == PG_INT64_MIN)
			return InvalidBuffer;
		key = low - 1;
	}
}

/* ----------------------------------------------------------------
 * Writing: leaves (STRAGGLE)
 * ----------------------------------------------------------------
 */

static void
straggle_add(StringInfo ops, int *nops, uint8 type, int pos,
			 const SpindleRun *run)
{
	xl_spindle_straggle_op op;

	op.type = type;
	op.pad = 0;
	op.pos = (uint16) pos;
	appendBinaryStringInfo(ops, (char *) &op, sizeof(op));
	if (run)
		appendBinaryStringInfo(ops, (char *) run, sizeof(SpindleRun));
	(*nops)++;
}

/*
 * Apply ops to a leaf, in order, each position as the page is at that
 * op; the primary and redo both come here.  A malformed list is a PANIC
 * (it runs in a critical section).
 */
void
spindle_straggle_apply(Page page, const char *ops, Size len, int nops)
{
	Size		off = 0;
	int			cap = (int) ((((PageHeader) page)->pd_special -
							  (PageGetContents(page) - (char *) page)) /
							 sizeof(SpindleRun));
	int			i;

	for (i = 0; i < nops; i++)
	{
		xl_spindle_straggle_op op;
		SpindleRun *items = spindle_leaf_items(page);
		int			n = spindle_cpage_nitems(page, sizeof(SpindleRun));

		if (off + sizeof(op) > len)
			elog(PANIC, "spindle: malformed STRAGGLE record");
		memcpy(&op, ops + off, sizeof(op));
		off += sizeof(op);
		if (op.type != XLSOP_DELETE && off + sizeof(SpindleRun) > len)
			elog(PANIC, "spindle: malformed STRAGGLE record");
		switch (op.type)
		{
			case XLSOP_DELETE:
				if (op.pos >= n)
					elog(PANIC, "spindle: STRAGGLE delete at %u of %d", op.pos, n);
				memmove(&items[op.pos], &items[op.pos + 1],
						(n - op.pos - 1) * sizeof(SpindleRun));
				spindle_cpage_set_nitems(page, n - 1, sizeof(SpindleRun));
				break;
			case XLSOP_INSERT:
				if (op.pos > n || n >= cap)
					elog(PANIC, "spindle: STRAGGLE insert at %u of %d", op.pos, n);
				memmove(&items[op.pos + 1], &items[op.pos],
						(n - op.pos) * sizeof(SpindleRun));
				memcpy(&items[op.pos], ops + off, sizeof(SpindleRun));
				off += sizeof(SpindleRun);
				spindle_cpage_set_nitems(page, n + 1, sizeof(SpindleRun));
				break;
			case XLSOP_REPLACE:
				if (op.pos >= n)
					elog(PANIC, "spindle: STRAGGLE replace at %u of %d", op.pos, n);
				memcpy(&items[op.pos], ops + off, sizeof(SpindleRun));
				off += sizeof(SpindleRun);
				break;
			default:
				elog(PANIC, "spindle: STRAGGLE op %u", op.type);
		}
	}
}

/* Apply and log ops on the leaf in buf (exclusively locked). */
static void
straggle_log(SpindleTree *t, Buffer buf, StringInfo ops, int nops)
{
	Page		page = BufferGetPage(buf);
	xl_spindle_straggle xlrec;
	SpindleCrelWal w;

	if (nops == 0)
		return;
	xlrec.nops = (uint16) nops;
	START_CRIT_SECTION();
	spindle_straggle_apply(page, ops->data, ops->len, nops);
	MarkBufferDirty(buf);
	spindle_crel_wal_begin(&w, t->crel, &xlrec, sizeof(xlrec));
	spindle_crel_wal_block(&w, buf, 0, ops->data, ops->len);
	(void) spindle_crel_wal_insert(&w, XLOG_SPINDLE_STRAGGLE);
	END_CRIT_SECTION();
}

/* ----------------------------------------------------------------
 * Writing: splits
 * ----------------------------------------------------------------
 */

/*
 * Split the full tree page in lbuf (exclusively locked) for an insertion
 * of key: a new right page takes the upper items (all but a tenth when
 * appending at the end of the rightmost page, else half), the left page
 * is flagged INCOMPLETE_SPLIT.  One SPLIT record.  Releases lbuf; the
 * caller then finishes the split (tree_finish_split).
 */
static void
tree_split(SpindleTree *t, Buffer lbuf, int64 key)
{
	Page		lpage = BufferGetPage(lbuf);
	SpindleCpageOpaque *lop = SpindleCpageGetOpaque(lpage);
	int			level = lop->level;
	Size		isz = spindle_tree_item_size(level);
	int			n = spindle_cpage_nitems(lpage, isz);
	char	   *litems = PageGetContents(lpage);
	int64		lastkey = *(int64 *) (litems + (n - 1) * isz);
	int			mid;
	Buffer		rbuf;
	Page		rpage;
	SpindleCpageOpaque *rop;
	xl_spindle_split xlrec;
	SpindleCrelWal w;
	XLogRecPtr	recptr;

	if (lop->right == InvalidBlockNumber && key > lastkey)
		mid = n - Max(1, n / 10);
	else
		mid = n / 2;
	mid = Max(1, Min(mid, n - 1));

	rbuf = spindle_crel_alloc_page(t->crel);
	rpage = BufferGetPage(rbuf);

	xlrec.sep = *(int64 *) (litems + mid * isz);
	xlrec.right_high_key = lop->high_key;
	xlrec.right_right = lop->right;
	xlrec.sub = t->tag;
	xlrec.level = (uint16) level;
	xlrec.nleft = (uint16) mid;

	START_CRIT_SECTION();
	spindle_crel_init_page(rpage, level == 0 ? SPINDLE_CPAGE_LEAF :
						   SPINDLE_CPAGE_INNER, t->tag, level);
	rop = SpindleCpageGetOpaque(rpage);
	memcpy(PageGetContents(rpage), litems + mid * isz, (n - mid) * isz);
	spindle_cpage_set_nitems(rpage, n - mid, isz);
	rop->right = lop->right;
	rop->high_key = lop->high_key;
	spindle_cpage_set_nitems(lpage, mid, isz);
	lop->right = BufferGetBlockNumber(rbuf);
	lop->high_key = xlrec.sep;
	lop->flags |= SPINDLE_CPAGE_INCOMPLETE_SPLIT;
	MarkBufferDirty(lbuf);
	MarkBufferDirty(rbuf);
	spindle_crel_wal_begin(&w, t->crel, &xlrec, sizeof(xlrec));
	spindle_crel_wal_block(&w, lbuf, 0, NULL, 0);
	spindle_crel_wal_block(&w, rbuf, REGBUF_WILL_INIT, PageGetContents(rpage),
						   (n - mid) * isz);
	recptr = spindle_crel_wal_insert(&w, XLOG_SPINDLE_SPLIT);
	END_CRIT_SECTION();

	if (spindle_test_split_crash)
	{
		XLogFlush(recptr);
		elog(PANIC, "spindle.test_split_crash: stopping between SPLIT and INSERT_UPPER");
	}
	UnlockReleaseBuffer(rbuf);
	UnlockReleaseBuffer(lbuf);
}

/*
 * The root (in lbuf, exclusively locked, flagged) was split: a new root
 * one level up with downlinks to it and to its right half; the tree meta
 * block names it.  One NEWROOT record.  Releases lbuf.
 */
static void
tree_new_root(SpindleTree *t, Buffer lbuf, int level, int64 sep,
			  BlockNumber rblk)
{
	Page		lpage = BufferGetPage(lbuf);
	Buffer		nbuf = spindle_crel_alloc_page(t->crel);
	Page		npage = BufferGetPage(nbuf);
	Buffer		mbuf = ReadBuffer(t->crel, t->meta_blk);
	Page		mpage;
	SpindleDownlink dl[2];
	xl_spindle_newroot xlrec;
	SpindleCrelWal w;

	LockBuffer(mbuf, BUFFER_LOCK_EXCLUSIVE);
	mpage = BufferGetPage(mbuf);
	if (!spindle_crel_page_is(mpage, SPINDLE_CPAGE_TREEMETA, t->tag))
		elog(ERROR, "spindle: tree meta block %u of subscription %u is not one",
			 t->meta_blk, t->sub);
	memset(dl, 0, sizeof(dl));
	dl[0].key = PG_INT64_MIN;
	dl[0].child = BufferGetBlockNumber(lbuf);
	dl[1].key = sep;
	dl[1].child = rblk;
	xlrec.sub = t->tag;
	xlrec.level = (uint16) (level + 1);
	xlrec.flags = 0;

	START_CRIT_SECTION();
	spindle_crel_init_page(npage, SPINDLE_CPAGE_INNER, t->tag, level + 1);
	memcpy(PageGetContents(npage), dl, sizeof(dl));
	spindle_cpage_set_nitems(npage, 2, sizeof(SpindleDownlink));
	SpindleCpageGetOpaque(lpage)->flags &= ~SPINDLE_CPAGE_INCOMPLETE_SPLIT;
	SpindleTreeMetaGet(mpage)->root = BufferGetBlockNumber(nbuf);
	SpindleTreeMetaGet(mpage)->level = level + 1;
	MarkBufferDirty(lbuf);
	MarkBufferDirty(nbuf);
	MarkBufferDirty(mbuf);
	spindle_crel_wal_begin(&w, t->crel, &xlrec, sizeof(xlrec));
	spindle_crel_wal_block(&w, lbuf, 0, NULL, 0);
	spindle_crel_wal_block(&w, nbuf, REGBUF_WILL_INIT, (char *) dl,
						   sizeof(dl));
	spindle_crel_wal_block(&w, mbuf, 0, NULL, 0);
	(void) spindle_crel_wal_insert(&w, XLOG_SPINDLE_NEWROOT);
	END_CRIT_SECTION();
	UnlockReleaseBuffer(mbuf);
	UnlockReleaseBuffer(nbuf);
	UnlockReleaseBuffer(lbuf);
}

/*
 * Finish the split of page blk at level if it is flagged: its right
 * half's downlink goes into the parent (INSERT_UPPER, the flag cleared in
 * the same record), or into a new root.  A full parent is split first,
 * its own split finished, and the whole is tried again.  The caller is a
 * writer holding no buffer lock; the child stays locked while the parent
 * is found (child before parent).
 */
static void
tree_finish_split(SpindleTree *t, BlockNumber blk, int level)
{
	for (;;)
	{
		BlockNumber root;
		int			rootlevel;
		Buffer		lbuf;
		Page		lpage;
		SpindleCpageOpaque *lop;
		int64		sep;
		BlockNumber rblk;
		int64		plow;
		Buffer		pbuf;
		Page		ppage;
		int			n;
		int			pos;
		xl_spindle_insert_upper xlrec;
		SpindleCrelWal w;

		if (!spindle_tree_root(t, &root, &rootlevel))
			return;
		lbuf = ReadBuffer(t->crel, blk);
		LockBuffer(lbuf, BUFFER_LOCK_EXCLUSIVE);
		lpage = BufferGetPage(lbuf);
		lop = SpindleCpageGetOpaque(lpage);
		if (!spindle_tree_page_ok(t, lpage, level) ||
			!(lop->flags & SPINDLE_CPAGE_INCOMPLETE_SPLIT))
		{
			UnlockReleaseBuffer(lbuf);
			return;
		}
		sep = lop->high_key;
		rblk = lop->right;
		if (level == rootlevel)
		{
			tree_new_root(t, lbuf, level, sep, rblk);
			return;
		}
		pbuf = spindle_tree_descend(t, sep, level + 1, BUFFER_LOCK_EXCLUSIVE,
									&plow);
		if (!BufferIsValid(pbuf))
			elog(ERROR, "spindle: consumer tree of subscription %u vanished under its writer",
				 t->sub);
		ppage = BufferGetPage(pbuf);
		n = spindle_cpage_nitems(ppage, sizeof(SpindleDownlink));
		pos = inner_search(ppage, sep) + 1;
		if (spindle_inner_items(ppage)[pos - 1].child != blk)
			ereport(ERROR,
					(errcode(ERRCODE_INDEX_CORRUPTED),
					 errmsg("consumer relation \"%s\": no downlink to block %u in its parent %u",
							RelationGetRelationName(t->crel), blk,
							BufferGetBlockNumber(pbuf))));
		if (n >= page_capacity(sizeof(SpindleDownlink)))
		{
			BlockNumber pblk = BufferGetBlockNumber(pbuf);

			UnlockReleaseBuffer(lbuf);
			tree_split(t, pbuf, sep);
			tree_finish_split(t, pblk, level + 1);
			continue;
		}

		memset(&xlrec, 0, sizeof(xlrec));
		xlrec.item.key = sep;
		xlrec.item.child = rblk;
		xlrec.pos = (uint16) pos;
		START_CRIT_SECTION();
		memmove(&spindle_inner_items(ppage)[pos + 1],
				&spindle_inner_items(ppage)[pos],
				(n - pos) * sizeof(SpindleDownlink));
		spindle_inner_items(ppage)[pos] = xlrec.item;
		spindle_cpage_set_nitems(ppage, n + 1, sizeof(SpindleDownlink));
		lop->flags &= ~SPINDLE_CPAGE_INCOMPLETE_SPLIT;
		MarkBufferDirty(lbuf);
		MarkBufferDirty(pbuf);
		spindle_crel_wal_begin(&w, t->crel, &xlrec, sizeof(xlrec));
		spindle_crel_wal_block(&w, lbuf, 0, NULL, 0);
		spindle_crel_wal_block(&w, pbuf, 0, NULL, 0);
		(void) spindle_crel_wal_insert(&w, XLOG_SPINDLE_INSERT_UPPER);
		END_CRIT_SECTION();
		UnlockReleaseBuffer(pbuf);
		UnlockReleaseBuffer(lbuf);
		return;
	}
}

static void reclaim_aside(const SpindleTree *old);

/*
 * Make tree t (none yet): an empty root leaf and a tree meta block, named
 * in the metapage; or, t->detached, named there as the tree set aside
 * beside tree t->sub, being built, its pages tagged t->tag
 * (spindle_tree_detached).  What an earlier crash left set aside beside
 * it is given back first (reclaim_aside).  One NEWROOT record
 * (XLNR_CREATE).
 */
static void
tree_create(SpindleTree *t)
{
	Buffer		lbuf;
	Buffer		tbuf;
	Buffer		mbuf;
	Page		lpage;
	Page		tpage;
	BlockNumber tblk;
	xl_spindle_newroot xlrec;
	SpindleCrelWal w;

	Assert(t->writer);
	reclaim_aside(t);
	lbuf = spindle_crel_alloc_page(t->crel);
	tbuf = spindle_crel_alloc_page(t->crel);
	lpage = BufferGetPage(lbuf);
	tpage = BufferGetPage(tbuf);
	tblk = BufferGetBlockNumber(tbuf);
	if (!t->detached)
		t->tag = t->sub;
	mbuf = spindle_crel_meta_lock(t->crel, BUFFER_LOCK_EXCLUSIVE);
	xlrec.sub = t->tag;
	xlrec.level = 0;
	xlrec.flags = XLNR_CREATE | (t->detached ? XLNR_DETACHED : 0);
	START_CRIT_SECTION();
	spindle_crel_init_page(lpage, SPINDLE_CPAGE_LEAF, t->tag, 0);
	spindle_crel_init_page(tpage, SPINDLE_CPAGE_TREEMETA, t->tag, 0);
	SpindleTreeMetaGet(tpage)->root = BufferGetBlockNumber(lbuf);
	SpindleTreeMetaGet(tpage)->level = 0;
	spindle_cpage_set_nitems(tpage, 1, sizeof(SpindleTreeMeta));
	if (t->detached)
		spindle_crel_meta_set_aside(BufferGetPage(mbuf), t->sub, tblk);
	else
		SpindleCrelGetMeta(BufferGetPage(mbuf))->trees[t->sub] = tblk;
	MarkBufferDirty(mbuf);
	MarkBufferDirty(lbuf);
	MarkBufferDirty(tbuf);
	spindle_crel_wal_begin(&w, t->crel, &xlrec, sizeof(xlrec));
	spindle_crel_wal_block(&w, lbuf, REGBUF_WILL_INIT, NULL, 0);
	spindle_crel_wal_block(&w, tbuf, REGBUF_WILL_INIT, NULL, 0);
	spindle_crel_wal_block(&w, mbuf, 0, NULL, 0);
	(void) spindle_crel_wal_insert(&w, XLOG_SPINDLE_NEWROOT);
	END_CRIT_SECTION();
	t->meta_blk = tblk;
	UnlockReleaseBuffer(mbuf);
	UnlockReleaseBuffer(tbuf);
	UnlockReleaseBuffer(lbuf);
}

/*
 * Free the meta block of tree t, set aside (its other pages given back),
 * and clear the metapage's name for it, in one record.
 */
static void
free_aside_meta(SpindleTree *t)
{
	Buffer		buf = ReadBuffer(t->crel, t->meta_blk);

	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	spindle_crel_free_aside_meta(t->crel, buf, t->sub);
	UnlockReleaseBuffer(buf);
}

/*
 * Put the tree whose meta block is tree (InvalidBlockNumber: none) in
 * old's place in the metapage and set old aside in the same record, then
 * give old's pages back (free_pages' order), its meta block last with the
 * name cleared (free_aside_meta).  A crash in the middle leaves the rest
 * named aside, for the next build or drop (reclaim_aside).  Readers that
 * take no lock and are still on old's pages find them freed, or reused
 * and not of old's generation, and start again from the metapage.  The
 * caller holds old's writer lock.  Returns the pages given back, the meta
 * block counted; 0 if there is no tree old.
 */
static int
retire_tree(SpindleTree *old, BlockNumber tree)
{
	BlockNumber *blocks;
	int			nblocks;

	Assert(old->writer);
	blocks = tree_pages(old, false, &nblocks);
	if (blocks == NULL)
		return 0;
	spindle_crel_set_trees(old->crel, old->sub, tree, old->meta_blk);
	free_pages(old, blocks, nblocks, "tree_retire_half");
	free_aside_meta(old);
	return nblocks + 1;
}

/*
 * Give back what is left of the tree set aside beside tree old->sub, if
 * the metapage names one: a build that a crash or an error stopped before
 * its swap (spindle_tree_detached), or an old tree whose pages were being
 * given back (retire_tree).  Its pages (free_pages' order), then its meta
 * block, with the metapage's name for it cleared in the same record.  A
 * crash in the middle leaves the rest to a partial walk from the meta
 * block, for the next call.  Every tree of that number is made after this
 * (tree_create), so no page of the set-aside tree's tag lies outside it:
 * its pages given back and taken again carry another tag, and end the
 * walk.  The caller holds old's writer lock.
 */
static void
reclaim_aside(const SpindleTree *old)
{
	Buffer		mbuf = spindle_crel_meta_lock(old->crel, BUFFER_LOCK_SHARE);
	Page		mpage = BufferGetPage(mbuf);
	BlockNumber blk = spindle_crel_meta_aside(mpage, old->sub);
	BlockNumber live = SpindleCrelGetMeta(mpage)->trees[old->sub];
	SpindleTree lost;
	BlockNumber *blocks;
	int			nblocks;

	UnlockReleaseBuffer(mbuf);
	if (blk == 0)
		return;
	spindle_tree_init(&lost, old->crel, old->sub, true);
	lost.detached = true;
	lost.meta_blk = blk;
	if (blk == live || blk >= RelationGetNumberOfBlocks(old->crel) ||
		(blocks = tree_pages(&lost, true, &nblocks)) == NULL)
	{
		/* nothing to give back: forget the name, once (review rv9, F1) */
		ereport(WARNING,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("consumer relation \"%s\" names block %u as a tree set aside beside tree %u, which it is not",
						RelationGetRelationName(old->crel), blk, old->sub),
				 errdetail("The name is cleared; the pages of such a tree, if any, stay unused.")));
		spindle_crel_set_trees(old->crel, old->sub, live, 0);
		return;
	}
	free_pages(&lost, blocks, nblocks, "tree_reclaim_half");
	free_aside_meta(&lost);
	ereport(DEBUG1,
			(errmsg_internal("spindle: gave back %d pages of a tree left aside beside tree %u of \"%s\"",
							 nblocks + 1, old->sub,
							 RelationGetRelationName(old->crel))));
}

/*
 * Give back what a crash or an error left set aside beside tree t (whose
 * writer lock the caller holds), without waiting for the next tree of
 * that number to be made: settle's, each round (consume_log.c).
 */
void
spindle_tree_reclaim(SpindleTree *t)
{
	Assert(t->writer);
	reclaim_aside(t);
}

/*
 * Make an empty tree beside old (a writer: its writer lock held), which
 * the metapage names as the tree set aside beside it: the same number, the
 * next generation of tag.  Runs go in with the usual calls on newt;
 * spindle_tree_swap then puts it in old's place.  What a crash or an error
 * left set aside is given back first (tree_create, reclaim_aside): the
 * writer lock keeps any other build out, so it can only be a leftover.
 */
void
spindle_tree_detached(SpindleTree *newt, const SpindleTree *old)
{
	Assert(old->writer);
	spindle_tree_init(newt, old->crel, old->sub, true);
	newt->detached = true;
	newt->tag = SPINDLE_TREE_TAG_NEXT(old->tag);
	tree_create(newt);
}

/*
 * Put the detached tree newt in the place of tree old (same number, its
 * writer lock held): one record names newt in the metapage and sets old
 * aside; then old's pages are freed, one FREE each (retire_tree; deferred
 * reuse: a reader still on them finds them as they were, freed, or reused
 * and not of its tree's tag, and starts again from the metapage).  Tree
 * old must exist.
 */
void
spindle_tree_swap(SpindleTree *old, SpindleTree *newt)
{
	Assert(old->writer && newt->detached && newt->sub == old->sub);
	if (retire_tree(old, newt->meta_blk) == 0)
		elog(ERROR, "spindle: no tree %u to swap a rebuilt one in for",
			 old->sub);
	newt->detached = false;
}

static int	load_fill(int level);

/*
 * Is a tree of npages pages (spindle_tree_npages) holding nruns runs
 * worth rebuilding?  Its keys only grow or its runs go out of the middle,
 * and no page is deleted alone, so the leaves emptied stay: rebuild when
 * it holds more than twice the pages a bulk load of its runs makes, plus
 * 8, which a tree just loaded does not reach again at once (review rv10,
 * F1: counted in leaves alone, a tree loaded at a test fanout of 4, whose
 * upper pages take 2 items, was sparse at once and rebuilt again at every
 * settle).
 */
bool
spindle_tree_is_sparse(int npages, int64 nruns)
{
	return npages > 2 * spindle_tree_pages_needed(nruns) + 8;
}

/*
 * The pages a bulk load of nruns runs makes (tree_bulk_load: leaves and
 * upper pages filled as load_fill says), its meta block counted.
 */
int64
spindle_tree_pages_needed(int64 nruns)
{
	int64		level_pages = Max(1, (nruns + load_fill(0) - 1) / load_fill(0));
	int64		total = 1 + level_pages;

	while (level_pages > 1)
	{
		level_pages = (level_pages + load_fill(1) - 1) / load_fill(1);
		total += level_pages;
	}
	return total;
}

/*
 * Log the whole page in buf (exclusively locked, changed in the caller's
 * critical section) as one full-page record (log_newpage_buffer, the hole
 * between pd_lower and pd_upper left out), or give it a fake LSN for an
 * unlogged relation.
 */
static void
log_whole_page(SpindleTree *t, Buffer buf)
{
	if (RelationNeedsWAL(t->crel))
		(void) log_newpage_buffer(buf, true);
	else
		PageSetLSN(BufferGetPage(buf), GetFakeLSNForUnloggedRel());
}

/*
 * Items a bulk load puts in a page of level: as nbtree's build (nbtsort.c),
 * leaves 90 % full and upper pages 70 %, so that the first keys added
 * among the loaded ones do not split every page at once.
 */
static int
load_fill(int level)
{
	int			cap = page_capacity(spindle_tree_item_size(level));

	/* upper pages rounded up: 3 of 4 at a test fanout of 4, not 2 */
	return level == 0 ? Max(1, cap * 9 / 10) : Max(2, (cap * 7 + 9) / 10);
}

/*
 * One level of a bulk load (tree_bulk_load): the nitems items (of that
 * level's size, in key order) put into pages left to right (load_fill
 * each), the first
 * into first (exclusively locked) if valid, the others into pages
 * allocated one ahead, so that each page is written once, its right-link
 * and high key set, under one full-page record.  Each page's block and low
 * bound (the leftmost's PG_INT64_MIN) go into blks and lows; returns the
 * pages made.  Only the page being written and the next one are locked.
 */
static int
bulk_level(SpindleTree *t, int level, const char *items, int nitems,
		   Buffer first, BlockNumber *blks, int64 *lows)
{
	Size		isz = spindle_tree_item_size(level);
	int			cap = load_fill(level);
	int			npages = (nitems + cap - 1) / cap;
	Buffer		cur = BufferIsValid(first) ? first :
		spindle_crel_alloc_page(t->crel);

	for (int p = 0; p < npages; p++)
	{
		int			from = p * cap;
		int			cnt = Min(cap, nitems - from);
		Buffer		next = p + 1 < npages ?
			spindle_crel_alloc_page(t->crel) : InvalidBuffer;
		Page		page = BufferGetPage(cur);
		SpindleCpageOpaque *op;

		blks[p] = BufferGetBlockNumber(cur);
		lows[p] = p == 0 ? PG_INT64_MIN : *(const int64 *) (items + from * isz);
		START_CRIT_SECTION();
		spindle_crel_init_page(page, level == 0 ? SPINDLE_CPAGE_LEAF :
							   SPINDLE_CPAGE_INNER, t->tag, level);
		memcpy(PageGetContents(page), items + from * isz, cnt * isz);
		spindle_cpage_set_nitems(page, cnt, isz);
		op = SpindleCpageGetOpaque(page);
		if (BufferIsValid(next))
		{
			op->right = BufferGetBlockNumber(next);
			op->high_key = *(const int64 *) (items + (from + cnt) * isz);
		}
		MarkBufferDirty(cur);
		log_whole_page(t, cur);
		END_CRIT_SECTION();
		UnlockReleaseBuffer(cur);
		cur = next;
	}
	return npages;
}

/* Name blk as the root of tree t, at level, in its meta block. */
static void
set_root(SpindleTree *t, BlockNumber blk, int level)
{
	Buffer		buf = ReadBuffer(t->crel, t->meta_blk);
	Page		page;

	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	page = BufferGetPage(buf);
	START_CRIT_SECTION();
	SpindleTreeMetaGet(page)->root = blk;
	SpindleTreeMetaGet(page)->level = level;
	MarkBufferDirty(buf);
	log_whole_page(t, buf);
	END_CRIT_SECTION();
	UnlockReleaseBuffer(buf);
}

/*
 * Fill tree t, detached and just made (an empty root leaf), with
 * runs[0..n) (in key order, none overlapping): leaves filled as load_fill
 * says, the first in the root leaf, then each level above from the pages
 * of the one below,
 * the tree meta block naming each level's first page as the root once the
 * level is written.  A page a record, about 33 bytes of WAL a run, where
 * an upsert a run wrote one record each (about 89 bytes, and the splits).
 * Nothing reaches t's pages before its swap; what a crash leaves is found
 * by reclaim_aside from the meta block, but for the pages of a level not
 * finished above the leaves (at the real fanout, a page or two) and one
 * allocated and not yet written.
 */
static void
tree_bulk_load(SpindleTree *t, const SpindleRun *runs, int n)
{
	BlockNumber root;
	int			level = 0;
	int			npages;
	BlockNumber *blks;
	int64	   *lows;
	Buffer		buf;

	for (int i = 1; i < n; i++)
		if (runs[i].first < spindle_run_end(&runs[i - 1]))
			elog(ERROR, "spindle: runs to load into consumer tree %u are out of order at " INT64_FORMAT,
				 t->sub, runs[i].first);
	if (n == 0 || !spindle_tree_root(t, &root, &level) || level != 0)
		return;
	/* the leaves are the widest level */
	npages = (n + load_fill(0) - 1) / load_fill(0);
	blks = palloc(sizeof(BlockNumber) * npages);
	lows = palloc(sizeof(int64) * npages);
	buf = ReadBuffer(t->crel, root);
	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	npages = bulk_level(t, 0, (const char *) runs, n, buf, blks, lows);
	if (spindle_test_load_crash)
	{
		XLogFlush(GetXLogInsertRecPtr());
		elog(PANIC, "spindle.test_load_crash: stopping after the leaves of a bulk load");
	}
	while (npages > 1)
	{
		SpindleDownlink *dl = palloc0(sizeof(SpindleDownlink) * npages);

		for (int p = 0; p < npages; p++)
		{
			dl[p].key = lows[p];
			dl[p].child = blks[p];
		}
		level++;
		npages = bulk_level(t, level, (const char *) dl, npages,
							InvalidBuffer, blks, lows);
		pfree(dl);
		set_root(t, blks[0], level);
	}
	pfree(blks);
	pfree(lows);
}

/*
 * Build tree old again beside itself from runs[0..n) (in key order, as
 * spindle_tree_read_all gives them, or a subset) and put the new one in
 * its place: spindle_tree_detached, the runs loaded in bulk
 * (tree_bulk_load), spindle_tree_swap.  The caller holds old's writer
 * lock; old must exist.  The caller also keeps every other writer out
 * while it runs: a change made to old meanwhile would be lost with it.
 */
void
spindle_tree_rebuild(SpindleTree *old, const SpindleRun *runs, int n)
{
	SpindleTree newt;

	spindle_tree_detached(&newt, old);
	tree_bulk_load(&newt, runs, n);
	spindle_tree_swap(old, &newt);
}

/* ----------------------------------------------------------------
 * Writing: runs
 * ----------------------------------------------------------------
 */

/*
 * Insert run into tree t where no run holds any of its ids (the caller
 * cut them out): one STRAGGLE record, after splitting a full leaf.
 */
static void
tree_insert(SpindleTree *t, const SpindleRun *run)
{
	for (;;)
	{
		int64		low;
		Buffer		buf = spindle_tree_descend(t, run->first, 0,
												BUFFER_LOCK_EXCLUSIVE, &low);
		Page		page;
		SpindleRun *items;
		int			n;
		int			pos;
		StringInfoData ops;
		int			nops = 0;

		if (!BufferIsValid(buf))
		{
			tree_create(t);
			continue;
		}
		page = BufferGetPage(buf);
		items = spindle_leaf_items(page);
		n = spindle_cpage_nitems(page, sizeof(SpindleRun));
		pos = spindle_leaf_search_ge(page, run->first);
		if ((pos < n && items[pos].first < spindle_run_end(run)) ||
			(pos > 0 && spindle_run_end(&items[pos - 1]) > run->first))
			elog(ERROR, "spindle: run at %lld would overlap another",
				 (long long) run->first);
		if (n >= page_capacity(sizeof(SpindleRun)))
		{
			BlockNumber blk = BufferGetBlockNumber(buf);

			tree_split(t, buf, run->first);
			tree_finish_split(t, blk, 0);
			continue;
		}
		initStringInfo(&ops);
		straggle_add(&ops, &nops, XLSOP_INSERT, pos, run);
		straggle_log(t, buf, &ops, nops);
		UnlockReleaseBuffer(buf);
		pfree(ops.data);
		return;
	}
}

/*
 * The run before a: trim the one with first < a that reaches into [a, b),
 * keeping what lies at or after b as a run of its own.  Returns the ids
 * removed; *done when that run reached b (nothing else can overlap).
 */
static int64
tree_cut_before(SpindleTree *t, int64 a, int64 b, int32 *maxrc, bool *done)
{
	int			idx;
	Buffer		buf;
	Page		page;
	SpindleCpageOpaque *op;
	SpindleRun	run;
	SpindleRun	head;
	SpindleRun	tail;
	bool		tail_later = false;
	StringInfoData ops;
	int			nops = 0;
	int64		removed;

	*done = false;
	if (a == PG_INT64_MIN)
		return 0;
	buf = spindle_tree_find_le(t, a - 1, BUFFER_LOCK_EXCLUSIVE, &idx);
	if (!BufferIsValid(buf))
		return 0;
	page = BufferGetPage(buf);
	op = SpindleCpageGetOpaque(page);
	run = spindle_leaf_items(page)[idx];
	if (spindle_run_end(&run) <= a)
	{
		UnlockReleaseBuffer(buf);
		return 0;
	}
	*maxrc = Max(*maxrc, run.read_count);
	removed = Min(spindle_run_end(&run), b) - a;
	head = run;
	head.len = (uint32) (a - run.first);
	initStringInfo(&ops);
	straggle_add(&ops, &nops, XLSOP_REPLACE, idx, &head);
	if (spindle_run_end(&run) > b)
	{
		tail = run;
		tail.first = b;
		tail.len = (uint32) (spindle_run_end(&run) - b);
		if ((op->right == InvalidBlockNumber || b < op->high_key) &&
			spindle_cpage_nitems(page, sizeof(SpindleRun)) <
			page_capacity(sizeof(SpindleRun)))
			straggle_add(&ops, &nops, XLSOP_INSERT, idx + 1, &tail);
		else
			tail_later = true;
	}
	straggle_log(t, buf, &ops, nops);
	UnlockReleaseBuffer(buf);
	pfree(ops.data);
	if (tail_later)
		tree_insert(t, &tail);
	*done = spindle_run_end(&run) >= b;
	return removed;
}

/*
 * Remove every id of [a, b) from tree t: runs inside go, runs across a
 * bound are cut.  One STRAGGLE record per leaf touched (plus an insert
 * when a cut-off tail belongs to another leaf).  The largest read_count
 * met goes into *maxrc.  Returns the number of ids removed.
 */
int64
spindle_tree_cut(SpindleTree *t, int64 a, int64 b, int32 *maxrc)
{
	int64		removed;
	bool		done;
	int64		key = a;

	removed = tree_cut_before(t, a, b, maxrc, &done);
	while (!done)
	{
		int64		low;
		Buffer		buf = spindle_tree_descend(t, key, 0,
												BUFFER_LOCK_EXCLUSIVE, &low);
		Page		page;
		SpindleCpageOpaque *op;
		SpindleRun *items;
		int			i0;
		int			i1;
		int			i;
		bool		tail_later = false;
		SpindleRun	tail;
		StringInfoData ops;
		int			nops = 0;

		if (!BufferIsValid(buf))
			break;
		page = BufferGetPage(buf);
		op = SpindleCpageGetOpaque(page);
		items = spindle_leaf_items(page);
		i0 = spindle_leaf_search_ge(page, a);
		i1 = spindle_leaf_search_ge(page, b);
		initStringInfo(&ops);
		for (i = i1 - 1; i >= i0; i--)
		{
			*maxrc = Max(*maxrc, items[i].read_count);
			if (spindle_run_end(&items[i]) > b)
			{
				tail = items[i];
				tail.first = b;
				tail.len = (uint32) (spindle_run_end(&items[i]) - b);
				removed += b - items[i].first;
				if (op->right == InvalidBlockNumber || b < op->high_key)
					straggle_add(&ops, &nops, XLSOP_REPLACE, i, &tail);
				else
				{
					straggle_add(&ops, &nops, XLSOP_DELETE, i, NULL);
					tail_later = true;
				}
			}
			else
			{
				removed += items[i].len;
				straggle_add(&ops, &nops, XLSOP_DELETE, i, NULL);
			}
		}
		straggle_log(t, buf, &ops, nops);
		done = op->right == InvalidBlockNumber || op->high_key >= b ||
			tail_later;
		key = op->high_key;
		UnlockReleaseBuffer(buf);
		pfree(ops.data);
		if (tail_later)
			tree_insert(t, &tail);
	}
	return removed;
}

/*
 * Upsert run into one leaf with one STRAGGLE record, when everything it
 * touches is there: the leaf holding its first id also holds the run
 * before it (or no run can be before it), every run it overlaps, and room
 * for what it adds.  Splits a full leaf and tries again.  Returns false
 * (having written nothing) when the upsert spans leaves.
 */
static bool
tree_upsert_one_leaf(SpindleTree *t, const SpindleRun *run)
{
	int64		a = run->first;
	int64		b = spindle_run_end(run);

	for (;;)
	{
		int64		low;
		Buffer		buf = spindle_tree_descend(t, a, 0,
												BUFFER_LOCK_EXCLUSIVE, &low);
		Page		page;
		SpindleCpageOpaque *op;
		SpindleRun *items;
		SpindleRun	r = *run;
		SpindleRun	head;
		SpindleRun	tail;
		int			n;
		int			p;
		int			i0;
		int			i1;
		int			i;
		int			added = 1;
		bool		pred_cut = false;
		bool		pred_tail = false;
		StringInfoData ops;
		int			nops = 0;

		if (!BufferIsValid(buf))
		{
			tree_create(t);
			continue;
		}
		page = BufferGetPage(buf);
		op = SpindleCpageGetOpaque(page);
		items = spindle_leaf_items(page);
		n = spindle_cpage_nitems(page, sizeof(SpindleRun));
		p = a == PG_INT64_MIN ? -1 : leaf_search_le(page, a - 1);
		i0 = p + 1;
		i1 = spindle_leaf_search_ge(page, b);
		/*
		 * A run before a may live in a leaf to the left; runs before b, or a
		 * tail cut off at b, may belong to the next one.
		 */
		if ((p < 0 && low != PG_INT64_MIN) ||
			(op->right != InvalidBlockNumber && b >= op->high_key))
		{
			UnlockReleaseBuffer(buf);
			return false;
		}
		if (p >= 0 && spindle_run_end(&items[p]) > a)
		{
			pred_cut = true;
			r.read_count = Max(r.read_count, items[p].read_count);
			head = items[p];
			head.len = (uint32) (a - head.first);
			if (spindle_run_end(&items[p]) > b)
			{
				pred_tail = true;
				tail = items[p];
				tail.first = b;
				tail.len = (uint32) (spindle_run_end(&items[p]) - b);
				added++;
			}
		}
		for (i = i0; i < i1; i++)
		{
			r.read_count = Max(r.read_count, items[i].read_count);
			if (spindle_run_end(&items[i]) <= b)
				added--;
		}
		if (n + added > page_capacity(sizeof(SpindleRun)))
		{
			BlockNumber blk = BufferGetBlockNumber(buf);

			tree_split(t, buf, a);
			tree_finish_split(t, blk, 0);
			continue;
		}

		/* from the highest position down, so that each stays valid */
		initStringInfo(&ops);
		for (i = i1 - 1; i >= i0; i--)
		{
			if (spindle_run_end(&items[i]) > b)
			{
				SpindleRun	cut = items[i];

				cut.first = b;
				cut.len = (uint32) (spindle_run_end(&items[i]) - b);
				straggle_add(&ops, &nops, XLSOP_REPLACE, i, &cut);
			}
			else
				straggle_add(&ops, &nops, XLSOP_DELETE, i, NULL);
		}
		straggle_add(&ops, &nops, XLSOP_INSERT, i0, &r);
		if (pred_tail)
			straggle_add(&ops, &nops, XLSOP_INSERT, i0 + 1, &tail);
		if (pred_cut)
			straggle_add(&ops, &nops, XLSOP_REPLACE, p, &head);
		straggle_log(t, buf, &ops, nops);
		UnlockReleaseBuffer(buf);
		pfree(ops.data);
		return true;
	}
}

/*
 * Replace the run of tree t that has exactly run's ids [first, first + len)
 * by run, in place, with one STRAGGLE record (a change of its other
 * fields: the consume log's freeze).  False, with nothing written, if no
 * run has exactly those ids.  Unlike an upsert it never cuts and inserts
 * again, so no reader finds the ids in no run meanwhile.
 */
bool
spindle_tree_replace_exact(SpindleTree *t, const SpindleRun *run)
{
	int64		low;
	Buffer		buf = spindle_tree_descend(t, run->first, 0,
										   BUFFER_LOCK_EXCLUSIVE, &low);
	Page		page;
	SpindleRun *items;
	int			n;
	int			i;
	StringInfoData ops;
	int			nops = 0;

	if (!BufferIsValid(buf))
		return false;
	page = BufferGetPage(buf);
	items = spindle_leaf_items(page);
	n = spindle_cpage_nitems(page, sizeof(SpindleRun));
	i = spindle_leaf_search_ge(page, run->first);
	if (i >= n || items[i].first != run->first || items[i].len != run->len)
	{
		UnlockReleaseBuffer(buf);
		return false;
	}
	initStringInfo(&ops);
	straggle_add(&ops, &nops, XLSOP_REPLACE, i, run);
	straggle_log(t, buf, &ops, nops);
	UnlockReleaseBuffer(buf);
	pfree(ops.data);
	return true;
}

/*
 * Upsert run into tree t only if it can be done within one leaf, in one
 * STRAGGLE record (see spindle_tree_upsert); false, with nothing changed,
 * if it would span leaves.
 */
bool
spindle_tree_upsert_in_leaf(SpindleTree *t, const SpindleRun *run)
{
	return tree_upsert_one_leaf(t, run);
}

/*
 * Upsert run into tree t: whatever the tree holds for its ids is replaced
 * (runs cut around it), its read_count the largest of it and theirs.  One
 * STRAGGLE record when it stays within a leaf; across leaves, the cut
 * (a record per leaf) and then the insert, which a crash may separate
 * (docs/design.md, section 4, "Step 2 as built").
 */
void
spindle_tree_upsert(SpindleTree *t, const SpindleRun *run)
{
	SpindleRun	r = *run;

	if (tree_upsert_one_leaf(t, run))
		return;
	(void) spindle_tree_cut(t, run->first, spindle_run_end(run),
							&r.read_count);
	tree_insert(t, &r);
}

/* ----------------------------------------------------------------
 * Reading and removing runs in key order; dropping a whole tree
 * ----------------------------------------------------------------
 */

/*
 * The run of tree t that holds id x, copied into *run; false if none.  A
 * reader: one buffer lock at a time, no heavyweight lock.
 */
bool
spindle_tree_lookup(SpindleTree *t, int64 x, SpindleRun *run)
{
	int			idx;
	Buffer		buf = spindle_tree_find_le(t, x, BUFFER_LOCK_SHARE, &idx);

	if (!BufferIsValid(buf))
		return false;
	*run = spindle_leaf_items(BufferGetPage(buf))[idx];
	UnlockReleaseBuffer(buf);
	return spindle_run_end(run) > x;
}

/*
 * Call visit for each run of tree t whose first lies in [x, hi), in key
 * order, until it returns false or the runs end: a reader's walk of the
 * leaves from x's, one buffer lock at a time, crossing them by their
 * right-links up to the one whose high key reaches hi (items only move
 * right in a split, so none already in the tree is missed; a page that
 * left the tree makes the walk descend again from the last run visited).
 * visit runs with the leaf's buffer locked (share): it must not read the
 * tree or do I/O.
 */
static void
scan_from(SpindleTree *t, int64 x, int64 hi, SpindleRunVisitor visit,
		  void *arg)
{
	int64		low;
	Buffer		buf = spindle_tree_descend(t, x, 0, BUFFER_LOCK_SHARE, &low);

	while (BufferIsValid(buf))
	{
		Page		page = BufferGetPage(buf);
		int			n = spindle_cpage_nitems(page, sizeof(SpindleRun));
		SpindleRun *items = spindle_leaf_items(page);
		SpindleCpageOpaque *op = SpindleCpageGetOpaque(page);
		BlockNumber right = op->right;
		bool		more = right != InvalidBlockNumber && op->high_key < hi;

		for (int i = spindle_leaf_search_ge(page, x); i < n; i++)
		{
			if (items[i].first >= hi || !visit(&items[i], arg))
			{
				more = false;
				break;
			}
			x = spindle_run_end(&items[i]);
		}
		UnlockReleaseBuffer(buf);
		if (!more)
			return;
		CHECK_FOR_INTERRUPTS();
		buf = ReadBuffer(t->crel, right);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		if (!spindle_tree_page_ok(t, BufferGetPage(buf), 0))
		{
			/* freed meanwhile: look again from the top */
			UnlockReleaseBuffer(buf);
			buf = spindle_tree_descend(t, x, 0, BUFFER_LOCK_SHARE, &low);
		}
	}
}

/*
 * Call visit for the run of tree t that holds lo, if one begins before
 * it, then for each run whose first lies in [lo, hi), in key order, until
 * it returns false (scan_from, whose rules visit follows).  A reader: the
 * runs may change as soon as they are visited.
 */
void
spindle_tree_scan(SpindleTree *t, int64 lo, int64 hi,
				  SpindleRunVisitor visit, void *arg)
{
	SpindleRun	holder;
	int64		from = lo;

	if (lo >= hi)
		return;
	if (spindle_tree_lookup(t, lo, &holder))
	{
		if (!visit(&holder, arg))
			return;
		from = spindle_run_end(&holder);
	}
	if (from < hi)
		scan_from(t, from, hi, visit, arg);
}

/* The first run a scan meets (a spindle_tree_scan visitor's). */
static bool
take_first(const SpindleRun *run, void *arg)
{
	*(SpindleRun *) arg = *run;
	return false;
}

/*
 * The run of tree t that holds x or, if none does, the first one after x,
 * copied into *run; false if there is none (spindle_tree_scan).
 */
bool
spindle_tree_next(SpindleTree *t, int64 x, SpindleRun *run)
{
	run->len = 0;
	spindle_tree_scan(t, x, PG_INT64_MAX, take_first, run);
	return run->len > 0;
}

/* The chain spindle_tree_chain_end follows (a scan_from visitor's). */
typedef struct RunChain
{
	int64		end;
	int			left;			/* runs it may still follow */
} RunChain;

static bool
follow_chain(const SpindleRun *run, void *arg)
{
	RunChain   *c = (RunChain *) arg;

	if (run->first != c->end || c->left <= 0)
		return false;
	c->end = spindle_run_end(run);
	return --c->left > 0;
}

/*
 * The end of the chain of runs of tree t that starts at end: the runs
 * each beginning where the one before ends (runs never overlap), at most
 * max of them (scan_from).  Returns end itself if no run begins there.  A
 * reader: what it returns may change as soon as it is returned, so the
 * caller must know by other means that the runs it skips cannot go
 * meanwhile.
 */
int64
spindle_tree_chain_end(SpindleTree *t, int64 end, int max)
{
	RunChain	c = {end, max};

	scan_from(t, end, PG_INT64_MAX, follow_chain, &c);
	return c.end;
}

/* A growing array of runs, in key order (may pass MaxAllocSize) */
typedef struct RunArray
{
	SpindleRun *runs;
	int			n;
	int			nalloc;
} RunArray;

/* Append runs[0..k) to a. */
static void
run_array_append(RunArray *a, const SpindleRun *runs, int k)
{
	if (a->n + k > a->nalloc)
	{
		a->nalloc = Max(a->nalloc * 2, a->n + k + 64);
		a->runs = a->runs ?
			repalloc_huge(a->runs, (Size) a->nalloc * sizeof(SpindleRun)) :
			palloc_extended((Size) a->nalloc * sizeof(SpindleRun),
							MCXT_ALLOC_HUGE);
	}
	memcpy(a->runs + a->n, runs, k * sizeof(SpindleRun));
	a->n += k;
}

/* The runs spindle_tree_read_range collects (a scan_from visitor's). */
typedef struct RunRange
{
	RunArray	a;
	int			max;
	int64		hi;
} RunRange;

static bool
collect_range(const SpindleRun *run, void *arg)
{
	RunRange   *r = (RunRange *) arg;

	if (run->first >= r->hi || r->a.n >= r->max)
		return false;
	run_array_append(&r->a, run, 1);
	return true;
}

/*
 * The runs of tree t that reach into [lo, hi), at most max of them, in key
 * order, as a palloc'd array (NULL if none; *n how many): one
 * spindle_tree_scan.  A reader: the runs may change as soon as they are
 * returned.
 */
SpindleRun *
spindle_tree_read_range(SpindleTree *t, int64 lo, int64 hi, int max, int *n)
{
	RunRange	r = {{NULL, 0, 0}, max, hi};

	if (max > 0)
		spindle_tree_scan(t, lo, hi, collect_range, &r);
	*n = r.a.n;
	return r.a.runs;
}

/*
 * Copy into out up to max runs of tree t, whose writer lock the caller
 * holds, whose first lies in [from, limit), in key order, and remove them
 * if remove; returns how many.  *next gets the smallest first the tree
 * then holds at or after from past those (PG_INT64_MAX: none).  One
 * STRAGGLE record per leaf it removes from; leaves are crossed by their
 * right-links, one buffer lock at a time (no writer changes the tree
 * meanwhile, readers may).  Pages left empty stay in the tree (see
 * spindle_tree_drop).
 */
int
spindle_tree_pop(SpindleTree *t, int64 from, int64 limit, int max,
				 SpindleRun *out, int64 *next, bool remove)
{
	int			got = 0;
	int64		low;
	Buffer		buf;

	Assert(t->writer);
	*next = PG_INT64_MAX;
	buf = spindle_tree_descend(t, from, 0,
							   remove ? BUFFER_LOCK_EXCLUSIVE : BUFFER_LOCK_SHARE,
							   &low);
	while (BufferIsValid(buf))
	{
		Page		page = BufferGetPage(buf);
		SpindleRun *items = spindle_leaf_items(page);
		int			n = spindle_cpage_nitems(page, sizeof(SpindleRun));
		int			i0 = spindle_leaf_search_ge(page, from);
		int			i = i0;
		BlockNumber right = SpindleCpageGetOpaque(page)->right;

		while (i < n && got < max && items[i].first < limit)
			out[got++] = items[i++];
		if (i < n)
			*next = items[i].first;
		if (i > i0 && remove)
		{
			StringInfoData ops;
			int			nops = 0;
			int			k;

			/* from the highest position down, so that each stays valid */
			initStringInfo(&ops);
			for (k = i - 1; k >= i0; k--)
				straggle_add(&ops, &nops, XLSOP_DELETE, k, NULL);
			straggle_log(t, buf, &ops, nops);
			pfree(ops.data);
		}
		UnlockReleaseBuffer(buf);
		if (i < n || right == InvalidBlockNumber)
			break;
		buf = ReadBuffer(t->crel, right);
		LockBuffer(buf, remove ? BUFFER_LOCK_EXCLUSIVE : BUFFER_LOCK_SHARE);
		if (!spindle_tree_page_ok(t, BufferGetPage(buf), 0))
			elog(ERROR, "spindle: block %u is not a leaf of consumer tree %u",
				 right, t->sub);
	}
	return got;
}

/*
 * The number of ids in runs of kind (0: any) due after `after` in tree t,
 * walking its leaves left to right as a reader, from the end of the last
 * run counted (a page that left the tree, freed by a rebuild, makes it
 * descend again from there): a run added or cut meanwhile may or may not
 * be counted, so the answer is for monitoring only.  *first_due (if not
 * NULL): the earliest due of the runs counted (DT_NOEND: none).
 */
int64
spindle_tree_count(SpindleTree *t, uint16 kind, TimestampTz after,
				   TimestampTz *first_due)
{
	int64		low;
	int64		total = 0;
	int64		x = PG_INT64_MIN;	/* runs starting below x are counted */
	TimestampTz first = DT_NOEND;
	Buffer		buf = spindle_tree_descend(t, x, 0, BUFFER_LOCK_SHARE, &low);

	while (BufferIsValid(buf))
	{
		Page		page = BufferGetPage(buf);
		SpindleRun *items = spindle_leaf_items(page);
		int			n = spindle_cpage_nitems(page, sizeof(SpindleRun));
		BlockNumber right = SpindleCpageGetOpaque(page)->right;
		int			i;

		for (i = spindle_leaf_search_ge(page, x); i < n; i++)
		{
			if ((kind == 0 || items[i].kind == kind) && items[i].due > after)
			{
				total += items[i].len;
				first = Min(first, items[i].due);
			}
			x = spindle_run_end(&items[i]);
		}
		UnlockReleaseBuffer(buf);
		if (right == InvalidBlockNumber)
			break;
		CHECK_FOR_INTERRUPTS();
		buf = ReadBuffer(t->crel, right);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		if (!spindle_tree_page_ok(t, BufferGetPage(buf), 0))
		{
			/*
			 * Freed under us: the tree was rebuilt (go on in the new one
			 * from where we were: review rv11, F2) or dropped (none).
			 */
			UnlockReleaseBuffer(buf);
			buf = spindle_tree_descend(t, x, 0, BUFFER_LOCK_SHARE, &low);
		}
	}
	if (first_due != NULL)
		*first_due = first;
	return total;
}

/*
 * Free every page of tree t, whose writer lock the caller holds: the
 * metapage names no tree t and sets it aside (readers that start again
 * then find no tree), then its pages are freed, one FREE record each
 * (deferred reuse, consumer_page.c), its meta block last (retire_tree).
 * What an earlier crash left set aside goes first.  Returns the pages
 * freed; 0 if there is no tree.
 */
int
spindle_tree_drop(SpindleTree *t)
{
	Assert(t->writer);
	reclaim_aside(t);
	return retire_tree(t, InvalidBlockNumber);
}

/* What spindle_tree_stats counts, page by page (a walk_tree visitor). */
typedef struct TreeStats
{
	int			npages;
	int64		nruns;
} TreeStats;

static void
count_page(void *arg, BlockNumber blk, Page page, int level)
{
	TreeStats  *st = (TreeStats *) arg;

	st->npages++;
	if (level == 0)
		st->nruns += spindle_cpage_nitems(page, sizeof(SpindleRun));
}

/*
 * The pages of tree t, its meta block included (0: no tree), and the runs
 * its leaves hold, in one walk (walk_tree), no array kept.  A reader's
 * walk: a writer may split a page meanwhile (the counts are then a page
 * or a few runs off), but nothing may free the tree's pages (the caller
 * holds what keeps the tree's rebuilders and droppers out).
 */
void
spindle_tree_stats(SpindleTree *t, int *npages, int64 *nruns)
{
	TreeStats	st = {0, 0};

	if (walk_tree(t, false, false, count_page, &st))
		st.npages++;			/* the meta block */
	*npages = st.npages;
	*nruns = st.nruns;
}

/* The runs spindle_tree_read_all collects (a walk_tree visitor's). */
static void
collect_runs(void *arg, BlockNumber blk, Page page, int level)
{
	run_array_append((RunArray *) arg, spindle_leaf_items(page),
					 spindle_cpage_nitems(page, sizeof(SpindleRun)));
}

/*
 * Every run of tree t in key order, as a palloc'd array (*n of them;
 * NULL if none): its leaves from the leftmost along the right-links
 * (walk_tree).  The caller holds the tree's writer lock (or keeps its
 * writers out otherwise): the runs are then still.
 */
SpindleRun *
spindle_tree_read_all(SpindleTree *t, int *n)
{
	RunArray	a = {NULL, 0, 0};

	(void) walk_tree(t, true, false, collect_runs, &a);
	*n = a.n;
	return a.runs;
}

/* How many pages tree t has, its meta block included (0: no tree). */
int
spindle_tree_npages(SpindleTree *t)
{
	int			npages;
	int64		nruns;

	spindle_tree_stats(t, &npages, &nruns);
	return npages;
}

/*
 * Every page of tree t but its meta block, level by level from the root
 * down, each level left to right (the writer lock keeps them still), as a
 * palloc'd array (*n of them); NULL if there is no tree.  t->meta_blk is
 * left naming its meta block.  partial: as walk_tree's.
 */
static BlockNumber *
tree_pages(SpindleTree *t, bool partial, int *n)
{
	BlockArray	a = {NULL, 0, 0};

	*n = 0;
	if (!walk_tree(t, false, partial, collect_block, &a))
		return NULL;
	*n = a.n;
	return a.blocks != NULL ? a.blocks : palloc(sizeof(BlockNumber));
}

/*
 * Free blocks[0..n) of tree t (one FREE record each), as tree_pages lists
 * them, from the last: the leaves right to left, then each level above,
 * the root last, so that what a crash leaves of them is still found by a
 * partial walk (each level a prefix of its pages).  Frees the array.
 * Halfway, the test-only pause point pause (spindle.test_pause).
 */
static void
free_pages(SpindleTree *t, BlockNumber *blocks, int n, const char *pause)
{
	for (int i = n - 1; i >= 0; i--)
	{
		Buffer		buf;

		if (i == n / 2)
			spindle_test_pause(pause);
		buf = ReadBuffer(t->crel, blocks[i]);

		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		spindle_crel_free_page(t->crel, buf, t->sub, false);
		UnlockReleaseBuffer(buf);
	}
	pfree(blocks);
}
