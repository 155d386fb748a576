/*-------------------------------------------------------------------------
 *
 * consumer_xlog.c
 *	  WAL records of a queue's consumer relation, the "spindle" resource
 *	  manager's part for it (rangepurge.c dispatches): redo, description,
 *	  identification and masking for wal_consistency_checking of the
 *	  records written by consumer_page.c (FREE, REUSE) and consumer_tree.c
 *	  (STRAGGLE, SPLIT, INSERT_UPPER, NEWROOT); their layouts are in
 *	  spindle_storage.h (docs/design.md, "Consumer state that scales with
 *	  what stays", sections 4 and 14).
 *
 * Records.  STRAGGLE: one leaf, a list of delete/insert/replace ops by
 * position, applied in order by the primary and by redo alike
 * (spindle_straggle_apply).  SPLIT: the left page, then the new right
 * page (initialised from the record's items), the left flagged
 * INCOMPLETE_SPLIT.  INSERT_UPPER: the child (flag cleared), then the
 * parent (the downlink).  NEWROOT: the old root (flag cleared), the new
 * root and the tree meta block; or, for a new tree, its empty root leaf,
 * its tree meta block and the metapage (which names it as the tree, or as
 * the tree being built beside it).  FREE: the page, then the metapage
 * (which may name another tree, or none, as the tree or the one being
 * built: spindle_crel_meta_freed).  REUSE: the metapage; on a standby it first cancels the
 * queries whose snapshots may still see the page's free xid.
 *
 * Locks: redo takes a record's blocks in the order they are registered,
 * which follows the writers' order (consumer_tree.c): left before right,
 * child before parent, tree pages before the tree meta block, any page
 * before the metapage.
 *
 * Invariants: redo changes pages only, idempotently by page LSN, and
 * builds no shared state.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/bufmask.h"
#include "access/transam.h"
#include "access/xlog.h"
#include "access/xlogreader.h"
#include "access/xlogutils.h"
#include "storage/bufmgr.h"
#include "storage/standby.h"

#include "storage/spindle_storage.h"

/* STRAGGLE: the ops applied to the leaf, as the primary applied them. */
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
		spindle_straggle_apply(page, ops, len, xlrec->nops);
		PageSetLSN(page, record->EndRecPtr);
		MarkBufferDirty(buf);
	}
	if (BufferIsValid(buf))
		UnlockReleaseBuffer(buf);
}

/*
 * SPLIT: the left page keeps its first nleft items and is flagged; the
 * right page is made anew from the record.
 */
static void
redo_split(XLogReaderState *record)
{
	xl_spindle_split *xlrec = (xl_spindle_split *) XLogRecGetData(record);
	Size		isz = spindle_tree_item_size(xlrec->level);
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

		if (spindle_cpage_nitems(lpage, isz) < xlrec->nleft)
			elog(PANIC, "spindle: SPLIT of a page with too few items");
		spindle_cpage_set_nitems(lpage, xlrec->nleft, isz);
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
	spindle_cpage_set_nitems(rpage, (int) (len / isz), isz);
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

/* INSERT_UPPER: the child's flag cleared, the downlink into the parent. */
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
		int			n = spindle_cpage_nitems(page, sizeof(SpindleDownlink));

		if (xlrec->pos > n)
			elog(PANIC, "spindle: INSERT_UPPER at %u of %d", xlrec->pos, n);
		memmove(&spindle_inner_items(page)[xlrec->pos + 1],
				&spindle_inner_items(page)[xlrec->pos],
				(n - xlrec->pos) * sizeof(SpindleDownlink));
		spindle_inner_items(page)[xlrec->pos] = xlrec->item;
		spindle_cpage_set_nitems(page, n + 1, sizeof(SpindleDownlink));
		PageSetLSN(page, record->EndRecPtr);
		MarkBufferDirty(pbuf);
	}
	if (BufferIsValid(pbuf))
		UnlockReleaseBuffer(pbuf);
	if (BufferIsValid(cbuf))
		UnlockReleaseBuffer(cbuf);
}

/*
 * NEWROOT: a new tree (root leaf, tree meta block, named in the
 * metapage), or a root split (old root's flag cleared, new root, tree
 * meta block pointing to it).
 */
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
		SpindleTreeMetaGet(page)->root = blk0;
		SpindleTreeMetaGet(page)->level = 0;
		spindle_cpage_set_nitems(page, 1, sizeof(SpindleTreeMeta));
		PageSetLSN(page, record->EndRecPtr);
		MarkBufferDirty(b1);
		if (!XLogRecHasBlockRef(record, 2))
			b2 = InvalidBuffer; /* detached, before the metapage named it */
		else if (XLogReadBufferForRedo(record, 2, &b2) == BLK_NEEDS_REDO)
		{
			uint32		sub = SPINDLE_TREE_TAG_SUB(xlrec->sub);

			page = BufferGetPage(b2);
			if (xlrec->flags & XLNR_DETACHED)
				spindle_crel_meta_set_aside(page, sub, blk1);
			else
				SpindleCrelGetMeta(page)->trees[sub] = blk1;
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
		spindle_cpage_set_nitems(page, (int) (len / sizeof(SpindleDownlink)),
						sizeof(SpindleDownlink));
		PageSetLSN(page, record->EndRecPtr);
		MarkBufferDirty(b1);
		if (XLogReadBufferForRedo(record, 2, &b2) == BLK_NEEDS_REDO)
		{
			page = BufferGetPage(b2);
			SpindleTreeMetaGet(page)->root = blk1;
			SpindleTreeMetaGet(page)->level = xlrec->level;
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

/* FREE: the page made a free page at the list's head in the metapage. */
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

		spindle_crel_meta_freed(mpage, BufferGetBlockNumber(buf), xlrec);
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
 * page leaves the free list: the head moves on, or the page before it
 * (block 1) points past it.
 */
static void
redo_reuse(XLogReaderState *record)
{
	xl_spindle_reuse xlrec_buf;
	xl_spindle_reuse *xlrec = &xlrec_buf;
	Buffer		mbuf;

	/*
	 * A record written before the free list's look-ahead (turn 4, session
	 * 10) has no prev: it always took the head.
	 */
	memset(&xlrec_buf, 0, sizeof(xlrec_buf));
	xlrec_buf.prev = InvalidBlockNumber;
	memcpy(&xlrec_buf, XLogRecGetData(record),
		   Min(XLogRecGetDataLen(record), sizeof(xlrec_buf)));

	if (InHotStandby)
		ResolveRecoveryConflictWithSnapshotFullXid(xlrec->horizon, xlrec->node);
	if (XLogReadBufferForRedo(record, 0, &mbuf) == BLK_NEEDS_REDO)
	{
		Page		mpage = BufferGetPage(mbuf);
		SpindleCrelMeta *meta = SpindleCrelGetMeta(mpage);

		if (xlrec->prev == InvalidBlockNumber)
			meta->free_head = xlrec->next;
		meta->nfree--;
		PageSetLSN(mpage, record->EndRecPtr);
		MarkBufferDirty(mbuf);
	}
	if (XLogRecHasBlockRef(record, 1))
	{
		Buffer		pbuf;

		if (XLogReadBufferForRedo(record, 1, &pbuf) == BLK_NEEDS_REDO)
		{
			Page		ppage = BufferGetPage(pbuf);

			SpindleCpageGetOpaque(ppage)->right = xlrec->next;
			PageSetLSN(ppage, record->EndRecPtr);
			MarkBufferDirty(pbuf);
		}
		if (BufferIsValid(pbuf))
			UnlockReleaseBuffer(pbuf);
	}
	if (BufferIsValid(mbuf))
		UnlockReleaseBuffer(mbuf);
}

/* Redo of a consumer relation record (rangepurge.c dispatches). */
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

/* rm_desc of a consumer relation record: its main data. */
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
								 (x->flags & XLNR_DETACHED) ? "new detached tree" :
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
								 (x->flags & XLFR_SWAP_TREE) ? ", tree swapped" :
								 (x->flags & XLFR_DROP_TREE) ? ", tree dropped" :
								 (x->flags & XLFR_DROP_ASIDE) ?
								 ", a tree being built given back" : "");
				if (x->flags & XLFR_SWAP_TREE)
					appendStringInfo(buf, ", tree %u now at block %u",
									 x->sub, x->replacement);
				break;
			}
		case XLOG_SPINDLE_REUSE:
			{
				xl_spindle_reuse xbuf;
				xl_spindle_reuse *x = &xbuf;

				xbuf.prev = InvalidBlockNumber;
				memcpy(&xbuf, data, Min(XLogRecGetDataLen(record),
										sizeof(xbuf)));

				appendStringInfo(buf, "rel %u/%u/%u, block %u, horizon %u:%u, next %u, prev %u",
								 x->node.spcNode, x->node.dbNode, x->node.relNode,
								 x->block,
								 EpochFromFullTransactionId(x->horizon),
								 XidFromFullTransactionId(x->horizon),
								 x->next, x->prev);
				break;
			}
	}
}

/* rm_identify: the name of a consumer relation record, or NULL. */
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
