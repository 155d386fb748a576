/*-------------------------------------------------------------------------
 *
 * consumer_tree.c
 *	  Pages of a queue's consumer relation (consumer_rel.c): allocation
 *	  from the free list with deferred reuse, freeing, and the straggler
 *	  tree, a B+-tree of runs keyed by first msg_id per subscription, with
 *	  its WAL records, redo, description and masking, and the test-only
 *	  SQL functions spindle._run_*() that drive it (docs/design.md,
 *	  "Consumer state that scales with what stays", sections 3, 4, 14).
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
 * LIFO; a head not yet reusable makes the allocation extend.
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
 * tree never deletes a page alone; spindle._run_drop() frees a whole tree
 * (FREE per page), which is what exercises deferred reuse in step 2.
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
 * downlink, whose key is the page's low bound; a page on the free list is
 * referenced by no tree; redo changes pages only, idempotently by page LSN.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/relation.h"
#include "access/transam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "access/xloginsert.h"
#include "access/xlogreader.h"
#include "access/xlogutils.h"
#include "access/bufmask.h"
#include "catalog/pg_type_d.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/standby.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "storage/spindle_storage.h"

PG_FUNCTION_INFO_V1(spindle_run_upsert);
PG_FUNCTION_INFO_V1(spindle_run_remove);
PG_FUNCTION_INFO_V1(spindle_run_lookup);
PG_FUNCTION_INFO_V1(spindle_run_scan);
PG_FUNCTION_INFO_V1(spindle_run_verify);
PG_FUNCTION_INFO_V1(spindle_run_drop);

int			spindle_test_tree_fanout = 0;
bool		spindle_test_split_crash = false;

StaticAssertDecl(sizeof(SpindleRun) == 32, "a run is 32 bytes");

/* An inner page's item: the child holding keys from key on. */
typedef struct TreeDownlink
{
	int64		key;
	BlockNumber child;
	uint32		pad;
} TreeDownlink;

/* Contents of a tree meta block. */
typedef struct TreeMetaData
{
	BlockNumber root;
	uint32		level;			/* of the root; 0: the root is a leaf */
} TreeMetaData;

#define TreeMetaGet(page)	((TreeMetaData *) PageGetContents(page))

/* ---- WAL records (main data) ---- */

/* STRAGGLE: block 0 the leaf; its block data the ops (StraggleOp [+ run]) */
typedef struct xl_spindle_straggle
{
	uint16		nops;
} xl_spindle_straggle;

typedef struct StraggleOp
{
	uint8		type;			/* SOP_* */
	uint8		pad;
	uint16		pos;			/* item position, as the page is then */
} StraggleOp;

#define SOP_DELETE	1
#define SOP_INSERT	2			/* followed by a SpindleRun */
#define SOP_REPLACE 3			/* followed by a SpindleRun */

/*
 * SPLIT: block 0 the left page (keeps nleft items), block 1 the new right
 * page (WILL_INIT; block data its items).
 */
typedef struct xl_spindle_split
{
	int64		sep;			/* the left's new high key */
	int64		right_high_key; /* the right's (the left's old one) */
	BlockNumber right_right;	/* the right's right-link */
	uint32		sub;
	uint16		level;
	uint16		nleft;
} xl_spindle_split;

/* INSERT_UPPER: block 0 the child (flag cleared), block 1 the parent */
typedef struct xl_spindle_insert_upper
{
	TreeDownlink item;
	uint16		pos;
} xl_spindle_insert_upper;

/*
 * NEWROOT.  A root split: block 0 the old root (flag cleared), block 1 the
 * new root (WILL_INIT; block data its two downlinks), block 2 the tree
 * meta block.  A new tree (XLNR_CREATE): block 0 the empty root leaf,
 * block 1 the tree meta block (both WILL_INIT), block 2 the metapage.
 */
typedef struct xl_spindle_newroot
{
	uint32		sub;
	uint16		level;			/* of the new root */
	uint16		flags;
} xl_spindle_newroot;

#define XLNR_CREATE		0x0001

/* FREE: block 0 the page (WILL_INIT), block 1 the metapage */
typedef struct xl_spindle_free
{
	FullTransactionId freed_xid;
	BlockNumber next;			/* the free list's old head */
	uint32		sub;
	uint16		flags;			/* XLFR_DROP_TREE: forget tree `sub` */
} xl_spindle_free;

#define XLFR_DROP_TREE	0x0001

/* REUSE: block 0 the metapage (the list's head moves to next) */
typedef struct xl_spindle_reuse
{
	RelFileNode node;
	FullTransactionId horizon;	/* the page's freed_xid */
	BlockNumber block;
	BlockNumber next;
} xl_spindle_reuse;

/* One tree being read or written. */
typedef struct Tree
{
	Relation	crel;
	uint32		sub;
	bool		writer;			/* holds the tree's writer lock */
	BlockNumber meta_blk;		/* tree meta block */
} Tree;

/* ----------------------------------------------------------------
 * Page helpers
 * ----------------------------------------------------------------
 */

static inline Size
item_size(int level)
{
	return level == 0 ? sizeof(SpindleRun) : sizeof(TreeDownlink);
}

static inline int
page_nitems(Page page, Size isz)
{
	return (int) ((((PageHeader) page)->pd_lower -
				   (PageGetContents(page) - (char *) page)) / isz);
}

static inline void
page_set_nitems(Page page, int n, Size isz)
{
	((PageHeader) page)->pd_lower =
		(PageGetContents(page) - (char *) page) + n * isz;
}

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

static inline SpindleRun *
leaf_items(Page page)
{
	return (SpindleRun *) PageGetContents(page);
}

static inline TreeDownlink *
inner_items(Page page)
{
	return (TreeDownlink *) PageGetContents(page);
}

/* Is page a page of tree t at level? */
static bool
tree_page_ok(Tree *t, Page page, int level)
{
	return spindle_crel_page_is(page,
								level == 0 ? SPINDLE_CPAGE_LEAF : SPINDLE_CPAGE_INNER,
								t->sub) &&
		SpindleCpageGetOpaque(page)->level == level;
}

/* Index of the last run whose first is <= x, or -1. */
static int
leaf_search_le(Page page, int64 x)
{
	SpindleRun *items = leaf_items(page);
	int			lo = 0,
				hi = page_nitems(page, sizeof(SpindleRun));

	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;

		if (items[mid].first <= x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo - 1;
}

/* Index of the first run whose first is >= x (nitems if none). */
static int
leaf_search_ge(Page page, int64 x)
{
	return leaf_search_le(page, x - 1) + 1;
}

/* The downlink to follow for key: the last whose key is <= key (item 0 is
 * minus infinity). */
static int
inner_search(Page page, int64 key)
{
	TreeDownlink *items = inner_items(page);
	int			lo = 1,
				hi = page_nitems(page, sizeof(TreeDownlink));

	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;

		if (items[mid].key <= key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo - 1;
}

static inline int64
run_end(const SpindleRun *r)
{
	return r->first + (int64) r->len;
}

/* WAL for a change of rel's pages, or a fake LSN for an unlogged rel. */
static inline bool
crel_needs_wal(Relation crel)
{
	return RelationNeedsWAL(crel);
}

/* ----------------------------------------------------------------
 * The metapage, the free list
 * ----------------------------------------------------------------
 */

static Buffer
meta_lock(Relation crel, int mode)
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
static Buffer
crel_alloc_page(Relation crel)
{
	Buffer		mbuf = meta_lock(crel, BUFFER_LOCK_EXCLUSIVE);
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
			XLogRecPtr	recptr;
			xl_spindle_reuse xlrec;

			xlrec.node = crel->rd_node;
			xlrec.horizon = fop->freed_xid;
			xlrec.block = blk;
			xlrec.next = fop->right;

			START_CRIT_SECTION();
			meta->free_head = fop->right;
			meta->nfree--;
			MarkBufferDirty(mbuf);
			if (crel_needs_wal(crel))
			{
				XLogBeginInsert();
				XLogRegisterData((char *) &xlrec, sizeof(xlrec));
				XLogRegisterBuffer(0, mbuf, REGBUF_STANDARD);
				recptr = XLogInsert(SPINDLE_RMGR_ID, XLOG_SPINDLE_REUSE);
			}
			else
				recptr = GetFakeLSNForUnloggedRel();
			PageSetLSN(BufferGetPage(mbuf), recptr);
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

/*
 * Put the page in buf (exclusively locked by the caller, referenced by
 * nothing any more) on the free list, stamped with the next full xid;
 * with drop_tree, tree t->sub is forgotten in the metapage too.
 */
static void
crel_free_page(Tree *t, Buffer buf, bool drop_tree)
{
	Buffer		mbuf = meta_lock(t->crel, BUFFER_LOCK_EXCLUSIVE);
	Page		mpage = BufferGetPage(mbuf);
	SpindleCrelMeta *meta = SpindleCrelGetMeta(mpage);
	Page		page = BufferGetPage(buf);
	SpindleCpageOpaque *op;
	xl_spindle_free xlrec;
	XLogRecPtr	recptr;

	xlrec.freed_xid = ReadNextFullTransactionId();
	xlrec.next = meta->free_head;
	xlrec.sub = t->sub;
	xlrec.flags = drop_tree ? XLFR_DROP_TREE : 0;

	START_CRIT_SECTION();
	spindle_crel_init_page(page, SPINDLE_CPAGE_FREE, 0, 0);
	op = SpindleCpageGetOpaque(page);
	op->freed_xid = xlrec.freed_xid;
	op->right = xlrec.next;
	meta->free_head = BufferGetBlockNumber(buf);
	meta->nfree++;
	if (drop_tree)
		meta->trees[t->sub] = InvalidBlockNumber;
	MarkBufferDirty(buf);
	MarkBufferDirty(mbuf);
	if (crel_needs_wal(t->crel))
	{
		XLogBeginInsert();
		XLogRegisterData((char *) &xlrec, sizeof(xlrec));
		XLogRegisterBuffer(0, buf, REGBUF_WILL_INIT | REGBUF_STANDARD);
		XLogRegisterBuffer(1, mbuf, REGBUF_STANDARD);
		recptr = XLogInsert(SPINDLE_RMGR_ID, XLOG_SPINDLE_FREE);
	}
	else
		recptr = GetFakeLSNForUnloggedRel();
	PageSetLSN(page, recptr);
	PageSetLSN(mpage, recptr);
	END_CRIT_SECTION();
	UnlockReleaseBuffer(mbuf);
}

/* ----------------------------------------------------------------
 * Finding pages
 * ----------------------------------------------------------------
 */

/* The tree meta block of subscription sub, or InvalidBlockNumber. */
static BlockNumber
tree_meta_block(Relation crel, uint32 sub)
{
	Buffer		mbuf = meta_lock(crel, BUFFER_LOCK_SHARE);
	BlockNumber blk = SpindleCrelGetMeta(BufferGetPage(mbuf))->trees[sub];

	UnlockReleaseBuffer(mbuf);
	return blk;
}

/*
 * Root and level of tree t, read from its meta block (looked up again in
 * the metapage); false if the tree does not exist (any more).
 */
static bool
tree_root(Tree *t, BlockNumber *root, int *level)
{
	Buffer		buf;
	Page		page;

	t->meta_blk = tree_meta_block(t->crel, t->sub);
	if (t->meta_blk == InvalidBlockNumber)
		return false;
	buf = ReadBuffer(t->crel, t->meta_blk);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	if (!spindle_crel_page_is(page, SPINDLE_CPAGE_TREEMETA, t->sub))
	{
		UnlockReleaseBuffer(buf);
		return false;
	}
	*root = TreeMetaGet(page)->root;
	*level = (int) TreeMetaGet(page)->level;
	UnlockReleaseBuffer(buf);
	return true;
}

static void tree_finish_split(Tree *t, BlockNumber blk, int level);

/*
 * The page of tree t at `level` whose key range holds key, locked in mode
 * (pages above it are share-locked on the way), its low bound in *low;
 * InvalidBuffer if the tree does not exist.  One buffer lock at a time:
 * a page split meanwhile is crossed by its right-link; a page that is no
 * longer a page of this tree at this level makes the descent start again.
 * A writer finishes an incomplete split it lands on, then starts again.
 */
static Buffer
tree_descend(Tree *t, int64 key, int level, int mode, int64 *low)
{
	int			restarts = 0;

restart:
	{
		BlockNumber blk;
		int			curlevel;
		int64		lo = PG_INT64_MIN;

		if (!tree_root(t, &blk, &curlevel))
			return InvalidBuffer;
		if (level > curlevel)
			elog(ERROR, "spindle: tree level %d asked above the root's %d",
				 level, curlevel);
		for (;;)
		{
			Buffer		buf = ReadBuffer(t->crel, blk);
			Page		page;
			SpindleCpageOpaque *op;
			TreeDownlink *dl;
			int			idx;

			LockBuffer(buf, curlevel == level ? mode : BUFFER_LOCK_SHARE);
			page = BufferGetPage(buf);
			op = SpindleCpageGetOpaque(page);
			if (!tree_page_ok(t, page, curlevel))
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
			dl = &inner_items(page)[idx];
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
static Buffer
tree_find_le(Tree *t, int64 x, int mode, int *idx)
{
	int64		key = x;

	for (;;)
	{
		int64		low;
		Buffer		buf = tree_descend(t, key, 0, mode, &low);

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
	StraggleOp op;

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
static void
straggle_apply(Page page, const char *ops, Size len, int nops)
{
	Size		off = 0;
	int			cap = (int) ((((PageHeader) page)->pd_special -
							  (PageGetContents(page) - (char *) page)) /
							 sizeof(SpindleRun));
	int			i;

	for (i = 0; i < nops; i++)
	{
		StraggleOp op;
		SpindleRun *items = leaf_items(page);
		int			n = page_nitems(page, sizeof(SpindleRun));

		if (off + sizeof(op) > len)
			elog(PANIC, "spindle: malformed STRAGGLE record");
		memcpy(&op, ops + off, sizeof(op));
		off += sizeof(op);
		if (op.type != SOP_DELETE && off + sizeof(SpindleRun) > len)
			elog(PANIC, "spindle: malformed STRAGGLE record");
		switch (op.type)
		{
			case SOP_DELETE:
				if (op.pos >= n)
					elog(PANIC, "spindle: STRAGGLE delete at %u of %d", op.pos, n);
				memmove(&items[op.pos], &items[op.pos + 1],
						(n - op.pos - 1) * sizeof(SpindleRun));
				page_set_nitems(page, n - 1, sizeof(SpindleRun));
				break;
			case SOP_INSERT:
				if (op.pos > n || n >= cap)
					elog(PANIC, "spindle: STRAGGLE insert at %u of %d", op.pos, n);
				memmove(&items[op.pos + 1], &items[op.pos],
						(n - op.pos) * sizeof(SpindleRun));
				memcpy(&items[op.pos], ops + off, sizeof(SpindleRun));
				off += sizeof(SpindleRun);
				page_set_nitems(page, n + 1, sizeof(SpindleRun));
				break;
			case SOP_REPLACE:
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
straggle_log(Tree *t, Buffer buf, StringInfo ops, int nops)
{
	Page		page = BufferGetPage(buf);
	xl_spindle_straggle xlrec;
	XLogRecPtr	recptr;

	if (nops == 0)
		return;
	xlrec.nops = (uint16) nops;
	START_CRIT_SECTION();
	straggle_apply(page, ops->data, ops->len, nops);
	MarkBufferDirty(buf);
	if (crel_needs_wal(t->crel))
	{
		XLogBeginInsert();
		XLogRegisterData((char *) &xlrec, sizeof(xlrec));
		XLogRegisterBuffer(0, buf, REGBUF_STANDARD);
		XLogRegisterBufData(0, ops->data, ops->len);
		recptr = XLogInsert(SPINDLE_RMGR_ID, XLOG_SPINDLE_STRAGGLE);
	}
	else
		recptr = GetFakeLSNForUnloggedRel();
	PageSetLSN(page, recptr);
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
tree_split(Tree *t, Buffer lbuf, int64 key)
{
	Page		lpage = BufferGetPage(lbuf);
	SpindleCpageOpaque *lop = SpindleCpageGetOpaque(lpage);
	int			level = lop->level;
	Size		isz = item_size(level);
	int			n = page_nitems(lpage, isz);
	char	   *litems = PageGetContents(lpage);
	int64		lastkey = *(int64 *) (litems + (n - 1) * isz);
	int			mid;
	Buffer		rbuf;
	Page		rpage;
	SpindleCpageOpaque *rop;
	xl_spindle_split xlrec;
	XLogRecPtr	recptr;

	if (lop->right == InvalidBlockNumber && key > lastkey)
		mid = n - Max(1, n / 10);
	else
		mid = n / 2;
	mid = Max(1, Min(mid, n - 1));

	rbuf = crel_alloc_page(t->crel);
	rpage = BufferGetPage(rbuf);

	xlrec.sep = *(int64 *) (litems + mid * isz);
	xlrec.right_high_key = lop->high_key;
	xlrec.right_right = lop->right;
	xlrec.sub = t->sub;
	xlrec.level = (uint16) level;
	xlrec.nleft = (uint16) mid;

	START_CRIT_SECTION();
	spindle_crel_init_page(rpage, level == 0 ? SPINDLE_CPAGE_LEAF :
						   SPINDLE_CPAGE_INNER, t->sub, level);
	rop = SpindleCpageGetOpaque(rpage);
	memcpy(PageGetContents(rpage), litems + mid * isz, (n - mid) * isz);
	page_set_nitems(rpage, n - mid, isz);
	rop->right = lop->right;
	rop->high_key = lop->high_key;
	page_set_nitems(lpage, mid, isz);
	lop->right = BufferGetBlockNumber(rbuf);
	lop->high_key = xlrec.sep;
	lop->flags |= SPINDLE_CPAGE_INCOMPLETE_SPLIT;
	MarkBufferDirty(lbuf);
	MarkBufferDirty(rbuf);
	if (crel_needs_wal(t->crel))
	{
		XLogBeginInsert();
		XLogRegisterData((char *) &xlrec, sizeof(xlrec));
		XLogRegisterBuffer(0, lbuf, REGBUF_STANDARD);
		XLogRegisterBuffer(1, rbuf, REGBUF_WILL_INIT | REGBUF_STANDARD);
		XLogRegisterBufData(1, PageGetContents(rpage), (n - mid) * isz);
		recptr = XLogInsert(SPINDLE_RMGR_ID, XLOG_SPINDLE_SPLIT);
	}
	else
		recptr = GetFakeLSNForUnloggedRel();
	PageSetLSN(lpage, recptr);
	PageSetLSN(rpage, recptr);
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
tree_new_root(Tree *t, Buffer lbuf, int level, int64 sep, BlockNumber rblk)
{
	Page		lpage = BufferGetPage(lbuf);
	Buffer		nbuf = crel_alloc_page(t->crel);
	Page		npage = BufferGetPage(nbuf);
	Buffer		mbuf = ReadBuffer(t->crel, t->meta_blk);
	Page		mpage;
	TreeDownlink dl[2];
	xl_spindle_newroot xlrec;
	XLogRecPtr	recptr;

	LockBuffer(mbuf, BUFFER_LOCK_EXCLUSIVE);
	mpage = BufferGetPage(mbuf);
	if (!spindle_crel_page_is(mpage, SPINDLE_CPAGE_TREEMETA, t->sub))
		elog(ERROR, "spindle: tree meta block %u of subscription %u is not one",
			 t->meta_blk, t->sub);
	memset(dl, 0, sizeof(dl));
	dl[0].key = PG_INT64_MIN;
	dl[0].child = BufferGetBlockNumber(lbuf);
	dl[1].key = sep;
	dl[1].child = rblk;
	xlrec.sub = t->sub;
	xlrec.level = (uint16) (level + 1);
	xlrec.flags = 0;

	START_CRIT_SECTION();
	spindle_crel_init_page(npage, SPINDLE_CPAGE_INNER, t->sub, level + 1);
	memcpy(PageGetContents(npage), dl, sizeof(dl));
	page_set_nitems(npage, 2, sizeof(TreeDownlink));
	SpindleCpageGetOpaque(lpage)->flags &= ~SPINDLE_CPAGE_INCOMPLETE_SPLIT;
	TreeMetaGet(mpage)->root = BufferGetBlockNumber(nbuf);
	TreeMetaGet(mpage)->level = level + 1;
	MarkBufferDirty(lbuf);
	MarkBufferDirty(nbuf);
	MarkBufferDirty(mbuf);
	if (crel_needs_wal(t->crel))
	{
		XLogBeginInsert();
		XLogRegisterData((char *) &xlrec, sizeof(xlrec));
		XLogRegisterBuffer(0, lbuf, REGBUF_STANDARD);
		XLogRegisterBuffer(1, nbuf, REGBUF_WILL_INIT | REGBUF_STANDARD);
		XLogRegisterBufData(1, (char *) dl, sizeof(dl));
		XLogRegisterBuffer(2, mbuf, REGBUF_STANDARD);
		recptr = XLogInsert(SPINDLE_RMGR_ID, XLOG_SPINDLE_NEWROOT);
	}
	else
		recptr = GetFakeLSNForUnloggedRel();
	PageSetLSN(lpage, recptr);
	PageSetLSN(npage, recptr);
	PageSetLSN(mpage, recptr);
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
tree_finish_split(Tree *t, BlockNumber blk, int level)
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
		XLogRecPtr	recptr;

		if (!tree_root(t, &root, &rootlevel))
			return;
		lbuf = ReadBuffer(t->crel, blk);
		LockBuffer(lbuf, BUFFER_LOCK_EXCLUSIVE);
		lpage = BufferGetPage(lbuf);
		lop = SpindleCpageGetOpaque(lpage);
		if (!tree_page_ok(t, lpage, level) ||
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
		pbuf = tree_descend(t, sep, level + 1, BUFFER_LOCK_EXCLUSIVE, &plow);
		if (!BufferIsValid(pbuf))
			elog(ERROR, "spindle: consumer tree of subscription %u vanished under its writer",
				 t->sub);
		ppage = BufferGetPage(pbuf);
		n = page_nitems(ppage, sizeof(TreeDownlink));
		pos = inner_search(ppage, sep) + 1;
		if (inner_items(ppage)[pos - 1].child != blk)
			ereport(ERROR,
					(errcode(ERRCODE_INDEX_CORRUPTED),
					 errmsg("consumer relation \"%s\": no downlink to block %u in its parent %u",
							RelationGetRelationName(t->crel), blk,
							BufferGetBlockNumber(pbuf))));
		if (n >= page_capacity(sizeof(TreeDownlink)))
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
		memmove(&inner_items(ppage)[pos + 1], &inner_items(ppage)[pos],
				(n - pos) * sizeof(TreeDownlink));
		inner_items(ppage)[pos] = xlrec.item;
		page_set_nitems(ppage, n + 1, sizeof(TreeDownlink));
		lop->flags &= ~SPINDLE_CPAGE_INCOMPLETE_SPLIT;
		MarkBufferDirty(lbuf);
		MarkBufferDirty(pbuf);
		if (crel_needs_wal(t->crel))
		{
			XLogBeginInsert();
			XLogRegisterData((char *) &xlrec, sizeof(xlrec));
			XLogRegisterBuffer(0, lbuf, REGBUF_STANDARD);
			XLogRegisterBuffer(1, pbuf, REGBUF_STANDARD);
			recptr = XLogInsert(SPINDLE_RMGR_ID, XLOG_SPINDLE_INSERT_UPPER);
		}
		else
			recptr = GetFakeLSNForUnloggedRel();
		PageSetLSN(lpage, recptr);
		PageSetLSN(ppage, recptr);
		END_CRIT_SECTION();
		UnlockReleaseBuffer(pbuf);
		UnlockReleaseBuffer(lbuf);
		return;
	}
}

/*
 * Make tree t (none yet): an empty root leaf and a tree meta block, named
 * in the metapage.  One NEWROOT record (XLNR_CREATE).
 */
static void
tree_create(Tree *t)
{
	Buffer		lbuf = crel_alloc_page(t->crel);
	Buffer		tbuf = crel_alloc_page(t->crel);
	Buffer		mbuf = meta_lock(t->crel, BUFFER_LOCK_EXCLUSIVE);
	Page		lpage = BufferGetPage(lbuf);
	Page		tpage = BufferGetPage(tbuf);
	Page		mpage = BufferGetPage(mbuf);
	xl_spindle_newroot xlrec;
	XLogRecPtr	recptr;

	xlrec.sub = t->sub;
	xlrec.level = 0;
	xlrec.flags = XLNR_CREATE;
	START_CRIT_SECTION();
	spindle_crel_init_page(lpage, SPINDLE_CPAGE_LEAF, t->sub, 0);
	spindle_crel_init_page(tpage, SPINDLE_CPAGE_TREEMETA, t->sub, 0);
	TreeMetaGet(tpage)->root = BufferGetBlockNumber(lbuf);
	TreeMetaGet(tpage)->level = 0;
	page_set_nitems(tpage, 1, sizeof(TreeMetaData));
	SpindleCrelGetMeta(mpage)->trees[t->sub] = BufferGetBlockNumber(tbuf);
	MarkBufferDirty(lbuf);
	MarkBufferDirty(tbuf);
	MarkBufferDirty(mbuf);
	if (crel_needs_wal(t->crel))
	{
		XLogBeginInsert();
		XLogRegisterData((char *) &xlrec, sizeof(xlrec));
		XLogRegisterBuffer(0, lbuf, REGBUF_WILL_INIT | REGBUF_STANDARD);
		XLogRegisterBuffer(1, tbuf, REGBUF_WILL_INIT | REGBUF_STANDARD);
		XLogRegisterBuffer(2, mbuf, REGBUF_STANDARD);
		recptr = XLogInsert(SPINDLE_RMGR_ID, XLOG_SPINDLE_NEWROOT);
	}
	else
		recptr = GetFakeLSNForUnloggedRel();
	PageSetLSN(lpage, recptr);
	PageSetLSN(tpage, recptr);
	PageSetLSN(mpage, recptr);
	END_CRIT_SECTION();
	t->meta_blk = BufferGetBlockNumber(tbuf);
	UnlockReleaseBuffer(mbuf);
	UnlockReleaseBuffer(tbuf);
	UnlockReleaseBuffer(lbuf);
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
tree_insert(Tree *t, const SpindleRun *run)
{
	for (;;)
	{
		int64		low;
		Buffer		buf = tree_descend(t, run->first, 0, BUFFER_LOCK_EXCLUSIVE, &low);
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
		items = leaf_items(page);
		n = page_nitems(page, sizeof(SpindleRun));
		pos = leaf_search_ge(page, run->first);
		if ((pos < n && items[pos].first < run_end(run)) ||
			(pos > 0 && run_end(&items[pos - 1]) > run->first))
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
		straggle_add(&ops, &nops, SOP_INSERT, pos, run);
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
tree_cut_before(Tree *t, int64 a, int64 b, int32 *maxrc, bool *done)
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
	buf = tree_find_le(t, a - 1, BUFFER_LOCK_EXCLUSIVE, &idx);
	if (!BufferIsValid(buf))
		return 0;
	page = BufferGetPage(buf);
	op = SpindleCpageGetOpaque(page);
	run = leaf_items(page)[idx];
	if (run_end(&run) <= a)
	{
		UnlockReleaseBuffer(buf);
		return 0;
	}
	*maxrc = Max(*maxrc, run.read_count);
	removed = Min(run_end(&run), b) - a;
	head = run;
	head.len = (uint32) (a - run.first);
	initStringInfo(&ops);
	straggle_add(&ops, &nops, SOP_REPLACE, idx, &head);
	if (run_end(&run) > b)
	{
		tail = run;
		tail.first = b;
		tail.len = (uint32) (run_end(&run) - b);
		if ((op->right == InvalidBlockNumber || b < op->high_key) &&
			page_nitems(page, sizeof(SpindleRun)) < page_capacity(sizeof(SpindleRun)))
			straggle_add(&ops, &nops, SOP_INSERT, idx + 1, &tail);
		else
			tail_later = true;
	}
	straggle_log(t, buf, &ops, nops);
	UnlockReleaseBuffer(buf);
	pfree(ops.data);
	if (tail_later)
		tree_insert(t, &tail);
	*done = run_end(&run) >= b;
	return removed;
}

/*
 * Remove every id of [a, b) from tree t: runs inside go, runs across a
 * bound are cut.  One STRAGGLE record per leaf touched (plus an insert
 * when a cut-off tail belongs to another leaf).  The largest read_count
 * met goes into *maxrc.  Returns the number of ids removed.
 */
static int64
tree_cut(Tree *t, int64 a, int64 b, int32 *maxrc)
{
	int64		removed;
	bool		done;
	int64		key = a;

	removed = tree_cut_before(t, a, b, maxrc, &done);
	while (!done)
	{
		int64		low;
		Buffer		buf = tree_descend(t, key, 0, BUFFER_LOCK_EXCLUSIVE, &low);
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
		items = leaf_items(page);
		i0 = leaf_search_ge(page, a);
		i1 = leaf_search_ge(page, b);
		initStringInfo(&ops);
		for (i = i1 - 1; i >= i0; i--)
		{
			*maxrc = Max(*maxrc, items[i].read_count);
			if (run_end(&items[i]) > b)
			{
				tail = items[i];
				tail.first = b;
				tail.len = (uint32) (run_end(&items[i]) - b);
				removed += b - items[i].first;
				if (op->right == InvalidBlockNumber || b < op->high_key)
					straggle_add(&ops, &nops, SOP_REPLACE, i, &tail);
				else
				{
					straggle_add(&ops, &nops, SOP_DELETE, i, NULL);
					tail_later = true;
				}
			}
			else
			{
				removed += items[i].len;
				straggle_add(&ops, &nops, SOP_DELETE, i, NULL);
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
tree_upsert_one_leaf(Tree *t, const SpindleRun *run)
{
	int64		a = run->first;
	int64		b = run_end(run);

	for (;;)
	{
		int64		low;
		Buffer		buf = tree_descend(t, a, 0, BUFFER_LOCK_EXCLUSIVE, &low);
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
		items = leaf_items(page);
		n = page_nitems(page, sizeof(SpindleRun));
		p = a == PG_INT64_MIN ? -1 : leaf_search_le(page, a - 1);
		i0 = p + 1;
		i1 = leaf_search_ge(page, b);
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
		if (p >= 0 && run_end(&items[p]) > a)
		{
			pred_cut = true;
			r.read_count = Max(r.read_count, items[p].read_count);
			head = items[p];
			head.len = (uint32) (a - head.first);
			if (run_end(&items[p]) > b)
			{
				pred_tail = true;
				tail = items[p];
				tail.first = b;
				tail.len = (uint32) (run_end(&items[p]) - b);
				added++;
			}
		}
		for (i = i0; i < i1; i++)
		{
			r.read_count = Max(r.read_count, items[i].read_count);
			if (run_end(&items[i]) <= b)
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
			if (run_end(&items[i]) > b)
			{
				SpindleRun	cut = items[i];

				cut.first = b;
				cut.len = (uint32) (run_end(&items[i]) - b);
				straggle_add(&ops, &nops, SOP_REPLACE, i, &cut);
			}
			else
				straggle_add(&ops, &nops, SOP_DELETE, i, NULL);
		}
		straggle_add(&ops, &nops, SOP_INSERT, i0, &r);
		if (pred_tail)
			straggle_add(&ops, &nops, SOP_INSERT, i0 + 1, &tail);
		if (pred_cut)
			straggle_add(&ops, &nops, SOP_REPLACE, p, &head);
		straggle_log(t, buf, &ops, nops);
		UnlockReleaseBuffer(buf);
		pfree(ops.data);
		return true;
	}
}

/*
 * Upsert run into tree t: whatever the tree holds for its ids is replaced
 * (runs cut around it), its read_count the largest of it and theirs.  One
 * STRAGGLE record when it stays within a leaf; across leaves, the cut
 * (a record per leaf) and then the insert, which a crash may separate
 * (docs/design.md, section 4, "Step 2 as built").
 */
static void
tree_upsert(Tree *t, const SpindleRun *run)
{
	SpindleRun	r = *run;

	if (tree_upsert_one_leaf(t, run))
		return;
	(void) tree_cut(t, run->first, run_end(run), &r.read_count);
	tree_insert(t, &r);
}

/* ----------------------------------------------------------------
 * Redo, description, masking
 * ----------------------------------------------------------------
 */

static void
redo_straggle(XLogReaderState *record)
{
	xl_spindle_straggle *xlrec = (xl_spindle_straggle *) XLogRecGetData(record);
	Buffer		buf;

	if (XLogReadBufferForRedo(record, 0, &buf) == BLK_NEEDS_REDO)
	{
		Page		page = BufferGetPage(buf);
		Size		len;
		char	   *ops = XLogRecGetBlockData(record, 0, &len);

		if (ops == NULL)
			elog(PANIC, "spindle: STRAGGLE record without ops");
		straggle_apply(page, ops, len, xlrec->nops);
		PageSetLSN(page, record->EndRecPtr);
		MarkBufferDirty(buf);
	}
	if (BufferIsValid(buf))
		UnlockReleaseBuffer(buf);
}

static void
redo_split(XLogReaderState *record)
{
	xl_spindle_split *xlrec = (xl_spindle_split *) XLogRecGetData(record);
	Size		isz = item_size(xlrec->level);
	BlockNumber rblk;
	Buffer		lbuf;
	Buffer		rbuf;
	Page		rpage;
	SpindleCpageOpaque *rop;
	Size		len;
	char	   *items;

	XLogRecGetBlockTag(record, 1, NULL, NULL, &rblk);
	if (XLogReadBufferForRedo(record, 0, &lbuf) == BLK_NEEDS_REDO)
	{
		Page		lpage = BufferGetPage(lbuf);
		SpindleCpageOpaque *lop = SpindleCpageGetOpaque(lpage);

		if (page_nitems(lpage, isz) < xlrec->nleft)
			elog(PANIC, "spindle: SPLIT of a page with too few items");
		page_set_nitems(lpage, xlrec->nleft, isz);
		lop->right = rblk;
		lop->high_key = xlrec->sep;
		lop->flags |= SPINDLE_CPAGE_INCOMPLETE_SPLIT;
		PageSetLSN(lpage, record->EndRecPtr);
		MarkBufferDirty(lbuf);
	}

	/* the right page is made anew from the record */
	rbuf = XLogInitBufferForRedo(record, 1);
	rpage = BufferGetPage(rbuf);
	items = XLogRecGetBlockData(record, 1, &len);
	spindle_crel_init_page(rpage, xlrec->level == 0 ? SPINDLE_CPAGE_LEAF :
						   SPINDLE_CPAGE_INNER, xlrec->sub, xlrec->level);
	rop = SpindleCpageGetOpaque(rpage);
	memcpy(PageGetContents(rpage), items, len);
	page_set_nitems(rpage, (int) (len / isz), isz);
	rop->right = xlrec->right_right;
	rop->high_key = xlrec->right_high_key;
	PageSetLSN(rpage, record->EndRecPtr);
	MarkBufferDirty(rbuf);

	UnlockReleaseBuffer(rbuf);
	if (BufferIsValid(lbuf))
		UnlockReleaseBuffer(lbuf);
}

/* Clear the incomplete-split flag of block block_id of the record. */
static Buffer
redo_clear_flag(XLogReaderState *record, uint8 block_id)
{
	Buffer		buf;

	if (XLogReadBufferForRedo(record, block_id, &buf) == BLK_NEEDS_REDO)
	{
		Page		page = BufferGetPage(buf);

		SpindleCpageGetOpaque(page)->flags &= ~SPINDLE_CPAGE_INCOMPLETE_SPLIT;
		PageSetLSN(page, record->EndRecPtr);
		MarkBufferDirty(buf);
	}
	return buf;
}

static void
redo_insert_upper(XLogReaderState *record)
{
	xl_spindle_insert_upper *xlrec =
	(xl_spindle_insert_upper *) XLogRecGetData(record);
	Buffer		cbuf = redo_clear_flag(record, 0);
	Buffer		pbuf;

	if (XLogReadBufferForRedo(record, 1, &pbuf) == BLK_NEEDS_REDO)
	{
		Page		page = BufferGetPage(pbuf);
		int			n = page_nitems(page, sizeof(TreeDownlink));

		if (xlrec->pos > n)
			elog(PANIC, "spindle: INSERT_UPPER at %u of %d", xlrec->pos, n);
		memmove(&inner_items(page)[xlrec->pos + 1], &inner_items(page)[xlrec->pos],
				(n - xlrec->pos) * sizeof(TreeDownlink));
		inner_items(page)[xlrec->pos] = xlrec->item;
		page_set_nitems(page, n + 1, sizeof(TreeDownlink));
		PageSetLSN(page, record->EndRecPtr);
		MarkBufferDirty(pbuf);
	}
	if (BufferIsValid(pbuf))
		UnlockReleaseBuffer(pbuf);
	if (BufferIsValid(cbuf))
		UnlockReleaseBuffer(cbuf);
}

static void
redo_newroot(XLogReaderState *record)
{
	xl_spindle_newroot *xlrec = (xl_spindle_newroot *) XLogRecGetData(record);
	Buffer		b0;
	Buffer		b1;
	Buffer		b2;
	Page		page;
	BlockNumber blk0;
	BlockNumber blk1;

	XLogRecGetBlockTag(record, 0, NULL, NULL, &blk0);
	XLogRecGetBlockTag(record, 1, NULL, NULL, &blk1);
	if (xlrec->flags & XLNR_CREATE)
	{
		b0 = XLogInitBufferForRedo(record, 0);
		page = BufferGetPage(b0);
		spindle_crel_init_page(page, SPINDLE_CPAGE_LEAF, xlrec->sub, 0);
		PageSetLSN(page, record->EndRecPtr);
		MarkBufferDirty(b0);
		b1 = XLogInitBufferForRedo(record, 1);
		page = BufferGetPage(b1);
		spindle_crel_init_page(page, SPINDLE_CPAGE_TREEMETA, xlrec->sub, 0);
		TreeMetaGet(page)->root = blk0;
		TreeMetaGet(page)->level = 0;
		page_set_nitems(page, 1, sizeof(TreeMetaData));
		PageSetLSN(page, record->EndRecPtr);
		MarkBufferDirty(b1);
		if (XLogReadBufferForRedo(record, 2, &b2) == BLK_NEEDS_REDO)
		{
			page = BufferGetPage(b2);
			SpindleCrelGetMeta(page)->trees[xlrec->sub] = blk1;
			PageSetLSN(page, record->EndRecPtr);
			MarkBufferDirty(b2);
		}
	}
	else
	{
		Size		len;
		char	   *items;

		b0 = redo_clear_flag(record, 0);
		b1 = XLogInitBufferForRedo(record, 1);
		page = BufferGetPage(b1);
		items = XLogRecGetBlockData(record, 1, &len);
		spindle_crel_init_page(page, SPINDLE_CPAGE_INNER, xlrec->sub,
							   xlrec->level);
		memcpy(PageGetContents(page), items, len);
		page_set_nitems(page, (int) (len / sizeof(TreeDownlink)),
						sizeof(TreeDownlink));
		PageSetLSN(page, record->EndRecPtr);
		MarkBufferDirty(b1);
		if (XLogReadBufferForRedo(record, 2, &b2) == BLK_NEEDS_REDO)
		{
			page = BufferGetPage(b2);
			TreeMetaGet(page)->root = blk1;
			TreeMetaGet(page)->level = xlrec->level;
			PageSetLSN(page, record->EndRecPtr);
			MarkBufferDirty(b2);
		}
	}
	if (BufferIsValid(b2))
		UnlockReleaseBuffer(b2);
	UnlockReleaseBuffer(b1);
	if (BufferIsValid(b0))
		UnlockReleaseBuffer(b0);
}

static void
redo_free(XLogReaderState *record)
{
	xl_spindle_free *xlrec = (xl_spindle_free *) XLogRecGetData(record);
	Buffer		buf = XLogInitBufferForRedo(record, 0);
	Page		page = BufferGetPage(buf);
	SpindleCpageOpaque *op;
	Buffer		mbuf;

	spindle_crel_init_page(page, SPINDLE_CPAGE_FREE, 0, 0);
	op = SpindleCpageGetOpaque(page);
	op->freed_xid = xlrec->freed_xid;
	op->right = xlrec->next;
	PageSetLSN(page, record->EndRecPtr);
	MarkBufferDirty(buf);
	if (XLogReadBufferForRedo(record, 1, &mbuf) == BLK_NEEDS_REDO)
	{
		Page		mpage = BufferGetPage(mbuf);
		SpindleCrelMeta *meta = SpindleCrelGetMeta(mpage);

		meta->free_head = BufferGetBlockNumber(buf);
		meta->nfree++;
		if (xlrec->flags & XLFR_DROP_TREE)
			meta->trees[xlrec->sub] = InvalidBlockNumber;
		PageSetLSN(mpage, record->EndRecPtr);
		MarkBufferDirty(mbuf);
	}
	if (BufferIsValid(mbuf))
		UnlockReleaseBuffer(mbuf);
	UnlockReleaseBuffer(buf);
}

/*
 * REUSE: standby queries whose snapshots may still see the page's free
 * xid are cancelled (as for nbtree's XLOG_BTREE_REUSE_PAGE), then the
 * free list's head moves on.
 */
static void
redo_reuse(XLogReaderState *record)
{
	xl_spindle_reuse *xlrec = (xl_spindle_reuse *) XLogRecGetData(record);
	Buffer		mbuf;

	if (InHotStandby)
		ResolveRecoveryConflictWithSnapshotFullXid(xlrec->horizon, xlrec->node);
	if (XLogReadBufferForRedo(record, 0, &mbuf) == BLK_NEEDS_REDO)
	{
		Page		mpage = BufferGetPage(mbuf);
		SpindleCrelMeta *meta = SpindleCrelGetMeta(mpage);

		meta->free_head = xlrec->next;
		meta->nfree--;
		PageSetLSN(mpage, record->EndRecPtr);
		MarkBufferDirty(mbuf);
	}
	if (BufferIsValid(mbuf))
		UnlockReleaseBuffer(mbuf);
}

void
spindle_crel_redo(XLogReaderState *record)
{
	uint8		info = XLogRecGetInfo(record) & ~XLR_INFO_MASK;

	switch (info)
	{
		case XLOG_SPINDLE_STRAGGLE:
			redo_straggle(record);
			break;
		case XLOG_SPINDLE_SPLIT:
			redo_split(record);
			break;
		case XLOG_SPINDLE_INSERT_UPPER:
			redo_insert_upper(record);
			break;
		case XLOG_SPINDLE_NEWROOT:
			redo_newroot(record);
			break;
		case XLOG_SPINDLE_FREE:
			redo_free(record);
			break;
		case XLOG_SPINDLE_REUSE:
			redo_reuse(record);
			break;
		default:
			elog(PANIC, "spindle_crel_redo: unknown op code %u", info);
	}
}

void
spindle_crel_desc(StringInfo buf, XLogReaderState *record)
{
	uint8		info = XLogRecGetInfo(record) & ~XLR_INFO_MASK;
	char	   *data = XLogRecGetData(record);

	switch (info)
	{
		case XLOG_SPINDLE_STRAGGLE:
			appendStringInfo(buf, "ops %u",
							 ((xl_spindle_straggle *) data)->nops);
			break;
		case XLOG_SPINDLE_SPLIT:
			{
				xl_spindle_split *x = (xl_spindle_split *) data;

				appendStringInfo(buf, "sub %u, level %u, left keeps %u, sep " INT64_FORMAT,
								 x->sub, x->level, x->nleft, x->sep);
				break;
			}
		case XLOG_SPINDLE_INSERT_UPPER:
			{
				xl_spindle_insert_upper *x = (xl_spindle_insert_upper *) data;

				appendStringInfo(buf, "pos %u, key " INT64_FORMAT " -> block %u",
								 x->pos, x->item.key, x->item.child);
				break;
			}
		case XLOG_SPINDLE_NEWROOT:
			{
				xl_spindle_newroot *x = (xl_spindle_newroot *) data;

				appendStringInfo(buf, "%s, sub %u, level %u",
								 (x->flags & XLNR_CREATE) ? "new tree" : "root split",
								 x->sub, x->level);
				break;
			}
		case XLOG_SPINDLE_FREE:
			{
				xl_spindle_free *x = (xl_spindle_free *) data;

				appendStringInfo(buf, "freed xid %u:%u, next %u%s",
								 EpochFromFullTransactionId(x->freed_xid),
								 XidFromFullTransactionId(x->freed_xid),
								 x->next,
								 (x->flags & XLFR_DROP_TREE) ? ", tree dropped" : "");
				break;
			}
		case XLOG_SPINDLE_REUSE:
			{
				xl_spindle_reuse *x = (xl_spindle_reuse *) data;

				appendStringInfo(buf, "rel %u/%u/%u, block %u, horizon %u:%u, next %u",
								 x->node.spcNode, x->node.dbNode, x->node.relNode,
								 x->block,
								 EpochFromFullTransactionId(x->horizon),
								 XidFromFullTransactionId(x->horizon),
								 x->next);
				break;
			}
	}
}

const char *
spindle_crel_identify(uint8 info)
{
	switch (info & ~XLR_INFO_MASK)
	{
		case XLOG_SPINDLE_STRAGGLE:
			return "STRAGGLE";
		case XLOG_SPINDLE_SPLIT:
			return "SPLIT";
		case XLOG_SPINDLE_INSERT_UPPER:
			return "INSERT_UPPER";
		case XLOG_SPINDLE_NEWROOT:
			return "NEWROOT";
		case XLOG_SPINDLE_FREE:
			return "FREE";
		case XLOG_SPINDLE_REUSE:
			return "REUSE";
		default:
			return NULL;
	}
}

/*
 * wal_consistency_checking: a consumer relation's page (our special space)
 * differs between primary and redo only in LSN, checksum and the unused
 * space between pd_lower and pd_upper (items moved by deletions leave
 * bytes there).  False if the page is not one of ours.
 */
bool
spindle_crel_mask(char *pagedata, BlockNumber blkno)
{
	Page		page = (Page) pagedata;

	if (PageIsNew(page) ||
		PageGetSpecialSize(page) != MAXALIGN(sizeof(SpindleCpageOpaque)) ||
		SpindleCpageGetOpaque(page)->magic != SPINDLE_CPAGE_MAGIC)
		return false;
	mask_page_lsn_and_checksum(pagedata);
	mask_page_hint_bits(pagedata);
	mask_unused_space(pagedata);
	return true;
}

/* ----------------------------------------------------------------
 * Test-only SQL functions: spindle._run_*()
 * ----------------------------------------------------------------
 */

/* Define the test-only GUCs (from _PG_init). */
void
spindle_crel_define_gucs(void)
{
	DefineCustomIntVariable("spindle.test_tree_fanout",
							"Test only: items a consumer tree page takes before it is split.",
							"0 means as many as fit.",
							&spindle_test_tree_fanout,
							0, 0, 1000,
							PGC_SUSET, GUC_NOT_IN_SAMPLE,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("spindle.test_split_crash",
							 "Test only: PANIC after a consumer tree page's SPLIT record, before INSERT_UPPER.",
							 NULL,
							 &spindle_test_split_crash,
							 false,
							 PGC_SUSET, GUC_NOT_IN_SAMPLE,
							 NULL, NULL, NULL);
}

/*
 * Open tree `sub` of queue table queue's consumer relation for a test
 * function: superusers only; writers refused during recovery and take the
 * tree's writer lock.  The queue table is held AccessShare, the consumer
 * relation in lockmode.
 */
static void
test_open(Oid queue, int32 sub, bool writer, Tree *t)
{
	Oid			croid;

	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("only superusers may call spindle's consumer tree test functions")));
	if (writer && RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot change a consumer tree during recovery")));
	if (sub < 0 || sub >= SPINDLE_CREL_MAX_TREES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("subscription number must be between 0 and %d",
						SPINDLE_CREL_MAX_TREES - 1)));
	LockRelationOid(queue, AccessShareLock);
	croid = spindle_consumer_rel_oid(queue);
	if (!OidIsValid(croid))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("relation \"%s\" has no consumer relation",
						get_rel_name(queue)),
				 errhint("Only queue tables have one.")));
	t->crel = relation_open(croid, writer ? RowExclusiveLock : AccessShareLock);
	t->sub = (uint32) sub;
	t->writer = writer;
	t->meta_blk = InvalidBlockNumber;
	if (writer)
		LockPage(t->crel, t->sub, ExclusiveLock);
}

static void
test_close(Tree *t)
{
	if (t->writer)
		UnlockPage(t->crel, t->sub, ExclusiveLock);
	relation_close(t->crel, NoLock);
}

/*
 * spindle._run_upsert(queue, sub, first, len, kind, due, read_count,
 * awaited, count, stride): upsert `count` runs of len ids, the i-th at
 * first + i * stride.  Returns count.
 */
Datum
spindle_run_upsert(PG_FUNCTION_ARGS)
{
	Tree		t;
	SpindleRun	run;
	int64		first;
	int64		len;
	int32		count;
	int64		stride;
	int32		i;

	for (i = 0; i < 10; i++)
		if (i != 5 && PG_ARGISNULL(i))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("only due may be null")));
	first = PG_GETARG_INT64(2);
	len = PG_GETARG_INT64(3);
	count = PG_GETARG_INT32(8);
	stride = PG_GETARG_INT64(9);
	if (len <= 0 || len > PG_UINT32_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a run holds 1 to %u ids", PG_UINT32_MAX)));
	if (PG_GETARG_INT32(4) < SPINDLE_RUN_READY ||
		PG_GETARG_INT32(4) > SPINDLE_RUN_CONSUMED)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("run kind must be between %d and %d",
						SPINDLE_RUN_READY, SPINDLE_RUN_CONSUMED)));
	memset(&run, 0, sizeof(run));
	run.len = (uint32) len;
	run.kind = (uint16) PG_GETARG_INT32(4);
	run.due = PG_ARGISNULL(5) ? 0 : PG_GETARG_TIMESTAMPTZ(5);
	run.read_count = PG_GETARG_INT32(6);
	run.awaited = (uint32) PG_GETARG_INT64(7);
	test_open(PG_GETARG_OID(0), PG_GETARG_INT32(1), true, &t);
	for (i = 0; i < count; i++)
	{
		run.first = first + i * stride;
		if (run.first > PG_INT64_MAX - len)
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("run ends past the largest msg_id")));
		tree_upsert(&t, &run);
		CHECK_FOR_INTERRUPTS();
	}
	test_close(&t);
	PG_RETURN_INT64(count);
}

/* spindle._run_remove(queue, sub, first, len): ids removed. */
Datum
spindle_run_remove(PG_FUNCTION_ARGS)
{
	Tree		t;
	int64		first = PG_GETARG_INT64(2);
	int64		len = PG_GETARG_INT64(3);
	int32		maxrc = 0;
	int64		removed = 0;

	if (len <= 0 || first > PG_INT64_MAX - len)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid range of ids")));
	test_open(PG_GETARG_OID(0), PG_GETARG_INT32(1), true, &t);
	if (tree_meta_block(t.crel, t.sub) != InvalidBlockNumber)
		removed = tree_cut(&t, first, first + len, &maxrc);
	test_close(&t);
	PG_RETURN_INT64(removed);
}

/* The result row of a run (first, len, kind, due, read_count, awaited). */
static HeapTuple
run_tuple(TupleDesc td, const SpindleRun *r)
{
	Datum		values[6];
	bool		nulls[6] = {false, false, false, false, false, false};

	values[0] = Int64GetDatum(r->first);
	values[1] = Int64GetDatum((int64) r->len);
	values[2] = Int32GetDatum(r->kind);
	values[3] = TimestampTzGetDatum(r->due);
	nulls[3] = r->due == 0;
	values[4] = Int32GetDatum(r->read_count);
	values[5] = Int64GetDatum((int64) r->awaited);
	return heap_form_tuple(td, values, nulls);
}

/* spindle._run_lookup(queue, sub, id): the run holding id, or NULL. */
Datum
spindle_run_lookup(PG_FUNCTION_ARGS)
{
	Tree		t;
	TupleDesc	td;
	Buffer		buf;
	int			idx;
	SpindleRun	run;
	bool		found = false;
	int64		id = PG_GETARG_INT64(2);

	if (get_call_result_type(fcinfo, NULL, &td) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	test_open(PG_GETARG_OID(0), PG_GETARG_INT32(1), false, &t);
	buf = tree_find_le(&t, id, BUFFER_LOCK_SHARE, &idx);
	if (BufferIsValid(buf))
	{
		run = leaf_items(BufferGetPage(buf))[idx];
		UnlockReleaseBuffer(buf);
		found = id < run_end(&run);
	}
	test_close(&t);
	if (!found)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(HeapTupleGetDatum(run_tuple(BlessTupleDesc(td), &run)));
}

/*
 * spindle._run_scan(queue, sub, lo, hi): the runs holding ids of [lo, hi),
 * in order.  After one descent, leaves are walked by their right-links,
 * one buffer lock at a time (a concurrent split only moves runs already
 * read to a page to the left of the next one).
 */
Datum
spindle_run_scan(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Tree		t;
	int64		lo = PG_GETARG_INT64(2);
	int64		hi = PG_GETARG_INT64(3);
	Buffer		buf;
	int			idx;
	int64		low;

	InitMaterializedSRF(fcinfo, 0);
	test_open(PG_GETARG_OID(0), PG_GETARG_INT32(1), false, &t);
	if (lo > PG_INT64_MIN && lo < hi)
	{
		buf = tree_find_le(&t, lo - 1, BUFFER_LOCK_SHARE, &idx);
		if (BufferIsValid(buf))
		{
			SpindleRun	run = leaf_items(BufferGetPage(buf))[idx];

			UnlockReleaseBuffer(buf);
			if (run_end(&run) > lo)
				tuplestore_puttuple(rsinfo->setResult,
									run_tuple(rsinfo->setDesc, &run));
		}
	}
	buf = lo < hi ? tree_descend(&t, lo, 0, BUFFER_LOCK_SHARE, &low) : InvalidBuffer;
	while (BufferIsValid(buf))
	{
		Page		page = BufferGetPage(buf);
		SpindleCpageOpaque *op = SpindleCpageGetOpaque(page);
		SpindleRun *items = leaf_items(page);
		int			n = page_nitems(page, sizeof(SpindleRun));
		int			i;
		BlockNumber next = InvalidBlockNumber;

		for (i = leaf_search_ge(page, lo); i < n && items[i].first < hi; i++)
			tuplestore_puttuple(rsinfo->setResult,
								run_tuple(rsinfo->setDesc, &items[i]));
		if (op->right != InvalidBlockNumber && op->high_key < hi)
		{
			next = op->right;
			lo = op->high_key;
		}
		UnlockReleaseBuffer(buf);
		buf = InvalidBuffer;
		if (next != InvalidBlockNumber)
		{
			buf = ReadBuffer(t.crel, next);
			LockBuffer(buf, BUFFER_LOCK_SHARE);
			if (!tree_page_ok(&t, BufferGetPage(buf), 0))
				elog(ERROR, "spindle: consumer tree changed under a scan");
		}
	}
	test_close(&t);
	return (Datum) 0;
}

/* ----------------------------------------------------------------
 * Test-only: verify and drop a tree
 * ----------------------------------------------------------------
 */

/* A page of one level as verify saw it. */
typedef struct VPage
{
	BlockNumber blk;
	int64		low;
	int64		high;			/* PG_INT64_MAX if rightmost */
	bool		incomplete;
} VPage;

typedef struct Verify
{
	Tree	   *t;
	List	   *problems;		/* of text Datums */
	BlockNumber nblocks;
	int			pages;
	int64		runs;
	int64		ids;
	int			incomplete;
	int64		prev_end;		/* leaves: end of the last run seen */
} Verify;

static void vproblem(Verify *v, const char *fmt,...) pg_attribute_printf(2, 3);

static void
vproblem(Verify *v, const char *fmt,...)
{
	StringInfoData s;

	initStringInfo(&s);
	for (;;)
	{
		va_list		args;
		int			needed;

		va_start(args, fmt);
		needed = appendStringInfoVA(&s, fmt, args);
		va_end(args);
		if (needed == 0)
			break;
		enlargeStringInfo(&s, needed);
	}
	v->problems = lappend(v->problems, (void *) CStringGetTextDatum(s.data));
}

/*
 * Check the items of one tree page (share-locked) whose key range is
 * [low, high); inner pages' downlinks are appended to *dls.
 */
static void
verify_items(Verify *v, Page page, BlockNumber blk, int level, int64 low,
			 int64 high, TreeDownlink **dls, int *ndl, int *maxdl)
{
	Size		isz = item_size(level);
	int			n = page_nitems(page, isz);
	int			i;

	for (i = 0; i < n; i++)
	{
		int64		key = *(int64 *) (PageGetContents(page) + i * isz);

		if (i > 0 && key <= *(int64 *) (PageGetContents(page) + (i - 1) * isz))
			vproblem(v, "block %u: keys out of order at item %d", blk, i);
		if (key < low || key >= high)
			vproblem(v, "block %u: key " INT64_FORMAT " outside its range [" INT64_FORMAT ", " INT64_FORMAT ")",
					 blk, key, low, high);
		if (level == 0)
		{
			SpindleRun *r = &leaf_items(page)[i];

			if (r->len == 0 || r->kind < SPINDLE_RUN_READY ||
				r->kind > SPINDLE_RUN_CONSUMED)
				vproblem(v, "block %u: run " INT64_FORMAT " has length %u, kind %u",
						 blk, r->first, r->len, r->kind);
			if (r->first < v->prev_end)
				vproblem(v, "block %u: run " INT64_FORMAT " overlaps the run before it (which ends at " INT64_FORMAT ")",
						 blk, r->first, v->prev_end);
			v->prev_end = run_end(r);
			v->runs++;
			v->ids += r->len;
		}
		else
		{
			if (i == 0 && key != low)
				vproblem(v, "block %u: first downlink key " INT64_FORMAT " is not the page's low bound " INT64_FORMAT,
						 blk, key, low);
			if (*ndl >= *maxdl)
			{
				*maxdl *= 2;
				*dls = repalloc(*dls, *maxdl * sizeof(TreeDownlink));
			}
			(*dls)[(*ndl)++] = inner_items(page)[i];
		}
	}
	if (level > 0 && n == 0)
		vproblem(v, "block %u: inner page without downlinks", blk);
}

/*
 * Walk level `level` of the tree from its leftmost page by right-links:
 * its pages into *pages, its downlinks (inner levels) into *dls.
 * Returns the number of pages.
 */
static int
verify_level(Verify *v, BlockNumber leftmost, int level, VPage **pages,
			 TreeDownlink **dls, int *ndl)
{
	int			npages = 0;
	int			maxpages = 16;
	int			maxdl = 64;
	BlockNumber blk = leftmost;
	int64		low = PG_INT64_MIN;

	*pages = palloc(maxpages * sizeof(VPage));
	*dls = palloc(maxdl * sizeof(TreeDownlink));
	*ndl = 0;
	v->prev_end = PG_INT64_MIN;
	while (blk != InvalidBlockNumber)
	{
		Buffer		buf;
		Page		page;
		SpindleCpageOpaque *op;
		VPage	   *vp;

		if (blk >= v->nblocks || npages >= (int) v->nblocks)
		{
			vproblem(v, "level %d: right-link to block %u leads out of the relation or into a cycle",
					 level, blk);
			break;
		}
		buf = ReadBuffer(v->t->crel, blk);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		op = SpindleCpageGetOpaque(page);
		if (!tree_page_ok(v->t, page, level))
		{
			vproblem(v, "block %u is not a page of this tree at level %d",
					 blk, level);
			UnlockReleaseBuffer(buf);
			break;
		}
		if (npages >= maxpages)
		{
			maxpages *= 2;
			*pages = repalloc(*pages, maxpages * sizeof(VPage));
		}
		vp = &(*pages)[npages++];
		vp->blk = blk;
		vp->low = low;
		vp->high = op->right == InvalidBlockNumber ? PG_INT64_MAX : op->high_key;
		vp->incomplete = (op->flags & SPINDLE_CPAGE_INCOMPLETE_SPLIT) != 0;
		if (vp->incomplete)
			v->incomplete++;
		if (op->right != InvalidBlockNumber && op->high_key <= low)
			vproblem(v, "block %u: high key " INT64_FORMAT " not above its low bound",
					 blk, op->high_key);
		verify_items(v, page, blk, level, low, vp->high, dls, ndl, &maxdl);
		v->pages++;
		low = vp->high;
		blk = op->right;
		UnlockReleaseBuffer(buf);
	}
	return npages;
}

/*
 * The downlinks of one level (in order) must name the pages of the level
 * below (in order), each with that page's low bound as key; only the
 * right half of an incomplete split may lack one.
 */
static void
verify_downlinks(Verify *v, int level, TreeDownlink *dls, int ndl,
				 VPage *pages, int npages)
{
	int			j = 0;
	int			k;

	for (k = 0; k < npages; k++)
	{
		if (j < ndl && dls[j].child == pages[k].blk)
		{
			if (dls[j].key != pages[k].low && !(j == 0 && k == 0))
				vproblem(v, "level %d: downlink key " INT64_FORMAT " of block %u is not its low bound " INT64_FORMAT,
						 level + 1, dls[j].key, pages[k].blk, pages[k].low);
			j++;
		}
		else if (k > 0 && pages[k - 1].incomplete)
			continue;
		else
			vproblem(v, "level %d: block %u has no downlink in its parent level",
					 level, pages[k].blk);
	}
	if (j < ndl)
		vproblem(v, "level %d: downlink to block %u is out of order or leads to no page of the level below",
				 level + 1, dls[j].child);
}

/*
 * spindle._run_verify(queue, sub): height, pages, runs, ids, incomplete
 * splits and the problems found (keys in order, no overlapping runs, keys
 * within low bound and high key, right-links, parent downlinks).  On a
 * primary it takes the tree's writer lock in share mode, so no writer
 * changes the tree meanwhile; on a standby it reads as any reader.
 */
Datum
spindle_run_verify(PG_FUNCTION_ARGS)
{
	Tree		t;
	Verify		v;
	TupleDesc	td;
	BlockNumber root;
	int			rootlevel = -1;
	Datum		values[6];
	bool		nulls[6] = {false, false, false, false, false, false};
	bool		locked = false;

	if (get_call_result_type(fcinfo, NULL, &td) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	test_open(PG_GETARG_OID(0), PG_GETARG_INT32(1), false, &t);
	if (!RecoveryInProgress())
	{
		LockPage(t.crel, t.sub, ShareLock);
		locked = true;
	}
	memset(&v, 0, sizeof(v));
	v.t = &t;
	v.nblocks = RelationGetNumberOfBlocks(t.crel);
	if (tree_root(&t, &root, &rootlevel))
	{
		BlockNumber leftmost = root;
		VPage	   *upper = NULL;
		int			nupper = 0;
		TreeDownlink *updl = NULL;
		int			nupdl = 0;
		int			level;

		for (level = rootlevel; level >= 0; level--)
		{
			VPage	   *pages;
			TreeDownlink *dls;
			int			ndl;
			int			npages = verify_level(&v, leftmost, level, &pages,
											  &dls, &ndl);

			if (level == rootlevel &&
				!(npages == 1 || (npages == 2 && pages[0].incomplete)))
				vproblem(&v, "root level %d has %d pages", level, npages);
			if (upper != NULL)
				verify_downlinks(&v, level, updl, nupdl, pages, npages);
			if (level > 0)
			{
				if (ndl == 0)
					break;
				leftmost = dls[0].child;
			}
			upper = pages;
			nupper = npages;
			updl = dls;
			nupdl = ndl;
		}
		(void) nupper;
	}
	if (locked)
		UnlockPage(t.crel, t.sub, ShareLock);
	test_close(&t);

	values[0] = Int32GetDatum(rootlevel + 1);
	values[1] = Int32GetDatum(v.pages);
	values[2] = Int64GetDatum(v.runs);
	values[3] = Int64GetDatum(v.ids);
	values[4] = Int32GetDatum(v.incomplete);
	if (v.problems == NIL)
		values[5] = PointerGetDatum(construct_empty_array(TEXTOID));
	else
	{
		int			n = list_length(v.problems);
		Datum	   *elems = palloc(n * sizeof(Datum));
		int			i = 0;
		ListCell   *lc;

		foreach(lc, v.problems)
			elems[i++] = PointerGetDatum(lfirst(lc));
		values[5] = PointerGetDatum(construct_array(elems, n, TEXTOID, -1,
													false, TYPALIGN_INT));
	}
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(td),
													  values, nulls)));
}

/*
 * spindle._run_drop(queue, sub): free every page of the tree (its meta
 * block first, so that readers restarting find no tree); returns the
 * pages freed.  They are reused once no snapshot can see their free xid.
 */
Datum
spindle_run_drop(PG_FUNCTION_ARGS)
{
	Tree		t;
	BlockNumber root;
	int			rootlevel;
	BlockNumber *blocks;
	int			nblocks = 0;
	int			maxblocks = 64;
	BlockNumber leftmost;
	int			level;
	int			i;
	Buffer		buf;

	test_open(PG_GETARG_OID(0), PG_GETARG_INT32(1), true, &t);
	if (!tree_root(&t, &root, &rootlevel))
	{
		test_close(&t);
		PG_RETURN_INT32(0);
	}
	/* every page, level by level (the writer lock keeps them still) */
	blocks = palloc(maxblocks * sizeof(BlockNumber));
	leftmost = root;
	for (level = rootlevel; level >= 0; level--)
	{
		BlockNumber blk = leftmost;

		while (blk != InvalidBlockNumber)
		{
			Page		page;

			buf = ReadBuffer(t.crel, blk);
			LockBuffer(buf, BUFFER_LOCK_SHARE);
			page = BufferGetPage(buf);
			if (!tree_page_ok(&t, page, level))
				elog(ERROR, "spindle: block %u is not a page of the tree", blk);
			if (blk == leftmost && level > 0)
				leftmost = inner_items(page)[0].child;
			if (nblocks >= maxblocks)
			{
				maxblocks *= 2;
				blocks = repalloc(blocks, maxblocks * sizeof(BlockNumber));
			}
			blocks[nblocks++] = blk;
			blk = SpindleCpageGetOpaque(page)->right;
			UnlockReleaseBuffer(buf);
		}
	}
	buf = ReadBuffer(t.crel, t.meta_blk);
	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	crel_free_page(&t, buf, true);
	UnlockReleaseBuffer(buf);
	for (i = 0; i < nblocks; i++)
	{
		buf = ReadBuffer(t.crel, blocks[i]);
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		crel_free_page(&t, buf, false);
		UnlockReleaseBuffer(buf);
	}
	test_close(&t);
	PG_RETURN_INT32(nblocks + 1);
}
