/*-------------------------------------------------------------------------
 *
 * eventinsert.c
 *	  One event into a spindle and its slot map entry, in one WAL record of
 *	  spindle's own (XLOG_SPINDLE_INSERT).
 *
 * Why.  A single-event insert (spindle.enqueue, one per transaction) wrote
 * heap's INSERT record (203 bytes for the benchmark's 118-byte payload),
 * then XLOG_SPINDLE_MAP_SET for the event's slot map entry (56 bytes), then
 * the commit (34): 304 bytes with alignment.  Here the event and its entry
 * are one record of at most heap's INSERT size: the map entry costs the
 * slot number and, usually, the facade's relfilenode number (8 bytes),
 * which the tuple header fields derivable at redo pay for.
 *
 * What the heap page gets is exactly what heap_insert() gives it
 * (PostgreSQL 15, heap_insert and heap_prepare_insert): the same tuple
 * header fields, RelationGetBufferForTuple and RelationPutHeapTuple for the
 * placement, all-visible cleared with its visibility-map bits, the page
 * re-initialised when the tuple is its first; redo mirrors heap_xlog_insert
 * (xmin from the record, cmin FirstCommandId, t_ctid the tuple itself, FSM
 * update when the page is under 20% free).  What it does not handle it
 * leaves to heap_insert() and the separate map record (spindle_insert_event
 * returns false): TOAST, speculative and frozen inserts, relations not
 * WAL-logged, wal_level = logical (heap's record carries the tuple for
 * decoding; this resource manager has no rm_decode), tuples whose header
 * is not the one heap_form_tuple makes.
 *
 * The map page.  It is registered as block 1 (with its full-page image)
 * when it needs one: its first change after a checkpoint's redo pointer, as
 * for any registered page.  Otherwise the record names it by the facade's
 * relfilenode number (same tablespace and database as the spindle; else it
 * is registered too), its block and the entry's index, and redo reads it
 * by that name.  This is
 * safe because every map page's first change after a redo pointer carries
 * its image, in this record or in an XLOG_FPI record written right after it
 * under the same buffer lock (when a checkpoint began between the check and
 * the insertion: XLogInsert only rechecks the pages registered, and leaves
 * its own copy of the redo pointer of the insertion for
 * GetFullPageWriteInfo to read).  So crash recovery never applies an entry
 * to a torn page without restoring its image next (redo reads the page with
 * RBM_ZERO_ON_ERROR for that case), and replay from any checkpoint
 * restores the page's image before applying an entry that names it (which
 * also keeps pg_rewind right: docs/design.md, "Inserts (WAL)").
 * wal_consistency_checking compares the heap page, and the map page when
 * it is registered.
 *
 * Locks: the caller holds RowExclusiveLock on the spindle and the facade.
 * The map page is pinned (the fork extended if needed) before the heap
 * page is locked, and locked exclusively after it; no code locks a heap
 * page while holding a map page's lock.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/heapam_xlog.h"
#include "access/heaptoast.h"
#include "access/hio.h"
#include "access/parallel.h"
#include "access/visibilitymap.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "access/xloginsert.h"
#include "access/xlogreader.h"
#include "access/xlogutils.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "storage/freespace.h"
#include "storage/predicate.h"
#include "utils/rel.h"

#include "storage/spindle_storage.h"

/*
 * Block 0's data (block 0 is the heap page; registered with
 * REGBUF_KEEP_DATA, so the data is there with a page image too):
 *
 *	uint32	the entry's index in its map page (11 bits) | the map page's
 *			block's low 18 bits << 11 (0 with XLSI_MAP_REGISTERED) | flags
 *	uint32	block >> 18				(with XLSI_WIDE_BLOCK: a block past 2^18)
 *	Oid		the facade's relNode	(without XLSI_MAP_REGISTERED)
 *	uint16	offnum
 *	uint16	t_infomask2
 *	uint16	t_infomask
 *	the tuple from t_bits (with HEAP_HASNULL: bitmap, padding, data) or
 *	from t_hoff (without: t_hoff is SizeofHeapTupleHeader MAXALIGNed, the
 *	byte before it zero)
 *
 * No main data.  XLOG_SPINDLE_INSERT_INIT instead of XLOG_SPINDLE_INSERT
 * as XLOG_HEAP_INIT_PAGE in heap's.
 */
#define XLSI_INDEX_BITS			11
#define XLSI_INDEX_MASK			0x7FF
#define XLSI_BLOCK_BITS			18
#define XLSI_BLOCK_MASK			0x3FFFF
#define XLSI_ALL_VISIBLE_CLEARED 0x80000000
#define XLSI_MAP_REGISTERED		0x40000000	/* block 1 is the map page */
#define XLSI_WIDE_BLOCK			0x20000000	/* the block's high bits follow */

StaticAssertDecl(SPINDLE_MAP_ENTRIES_PER_PAGE <= XLSI_INDEX_MASK + 1,
				 "a map page's entry index must fit in 11 bits");

#define SizeOfInsertHeader(head) \
	(sizeof(uint32) + (((head) & XLSI_WIDE_BLOCK) ? sizeof(uint32) : 0) + \
	 (((head) & XLSI_MAP_REGISTERED) ? 0 : sizeof(Oid)) + 3 * sizeof(uint16))

/* t_hoff of a tuple without nulls, as heap_form_tuple makes it */
#define HOFF_NO_NULLS			MAXALIGN(SizeofHeapTupleHeader)

/*
 * Can this tuple go through the record?  (Else heap_insert does it.)
 */
static bool
insert_record_applies(Relation facade, Relation seg, HeapTuple tup,
					  int options)
{
	HeapTupleHeader th = tup->t_data;
	int			i;

	if ((options & (HEAP_INSERT_SPECULATIVE | HEAP_INSERT_FROZEN)) != 0 ||
		!RelationNeedsWAL(seg) || !RelationNeedsWAL(facade) ||
		XLogLogicalInfoActive() || IsParallelWorker() ||
		seg->rd_rel->relkind != RELKIND_RELATION ||
		HeapTupleHasExternal(tup) || tup->t_len > TOAST_TUPLE_THRESHOLD)
		return false;
	if (HeapTupleHasNulls(tup))
	{
		/* logged from t_bits, as heap does; redo derives t_hoff */
		return th->t_hoff ==
			MAXALIGN(SizeofHeapTupleHeader +
					 BITMAPLEN(HeapTupleHeaderGetNatts(th)));
	}
	if (th->t_hoff != HOFF_NO_NULLS)
		return false;
	for (i = SizeofHeapTupleHeader; i < HOFF_NO_NULLS; i++)
		if (((char *) th)[i] != 0)
			return false;
	return true;
}

/*
 * Where the logged tuple bytes start: t_bits with nulls, else t_hoff.
 */
static inline uint32
logged_from(uint16 infomask)
{
	return (infomask & HEAP_HASNULL) ? SizeofHeapTupleHeader : HOFF_NO_NULLS;
}

/*
 * The critical section of spindle_insert_event: place the tuple on the
 * locked heap page, set the map entry on the locked map page, log both.
 */
static void
insert_and_log(Relation facade, Relation seg, Buffer buffer, Buffer vmbuffer,
			   Buffer mapbuf, HeapTuple tup, int64 vslot)
{
	Page		page = BufferGetPage(buffer);
	Page		mappage = BufferGetPage(mapbuf);
	XLogRecPtr	map_lsn = PageGetLSN(mappage);
	bool		register_map;
	uint32		head;
	BlockNumber mapblk = BufferGetBlockNumber(mapbuf);
	uint32		high = 0;
	uint16		hdr[3];
	uint8		info = XLOG_SPINDLE_INSERT;
	int			bufflags = REGBUF_STANDARD | REGBUF_KEEP_DATA;
	uint32		from = logged_from(tup->t_data->t_infomask);
	Oid			relnode = facade->rd_node.relNode;
	XLogRecPtr	recptr;
	XLogRecPtr	redo;
	bool		page_writes;

	/* named by relNode only when tablespace and database are the spindle's */
	register_map = XLogCheckBufferNeedsBackup(mapbuf) ||
		facade->rd_node.spcNode != seg->rd_node.spcNode ||
		facade->rd_node.dbNode != seg->rd_node.dbNode;

	START_CRIT_SECTION();

	RelationPutHeapTuple(seg, buffer, tup, false);
	head = (uint32) spindle_slotmap_index(vslot);
	if (!register_map)
	{
		head |= (mapblk & XLSI_BLOCK_MASK) << XLSI_INDEX_BITS;
		high = mapblk >> XLSI_BLOCK_BITS;
		if (high != 0)
			head |= XLSI_WIDE_BLOCK;
	}
	if (PageIsAllVisible(page))
	{
		head |= XLSI_ALL_VISIBLE_CLEARED;
		PageClearAllVisible(page);
		visibilitymap_clear(seg, ItemPointerGetBlockNumber(&tup->t_self),
							vmbuffer, VISIBILITYMAP_VALID_BITS);
	}
	MarkBufferDirty(buffer);
	spindle_slotmap_put_index(mappage, spindle_slotmap_index(vslot),
							  &tup->t_self);
	MarkBufferDirty(mapbuf);

	if (ItemPointerGetOffsetNumber(&tup->t_self) == FirstOffsetNumber &&
		PageGetMaxOffsetNumber(page) == FirstOffsetNumber)
	{
		info = XLOG_SPINDLE_INSERT_INIT;
		bufflags |= REGBUF_WILL_INIT;
	}
	if (register_map)
		head |= XLSI_MAP_REGISTERED;
	hdr[0] = ItemPointerGetOffsetNumber(&tup->t_self);
	hdr[1] = tup->t_data->t_infomask2;
	hdr[2] = tup->t_data->t_infomask;

	XLogBeginInsert();
	XLogRegisterBuffer(0, buffer, bufflags);
	XLogRegisterBufData(0, (char *) &head, sizeof(uint32));
	if (high != 0)
		XLogRegisterBufData(0, (char *) &high, sizeof(uint32));
	if (!register_map)
		XLogRegisterBufData(0, (char *) &relnode, sizeof(Oid));
	XLogRegisterBufData(0, (char *) hdr, sizeof(hdr));
	XLogRegisterBufData(0, (char *) tup->t_data + from, tup->t_len - from);
	if (register_map)
		XLogRegisterBuffer(1, mapbuf, REGBUF_STANDARD);
	XLogSetRecordFlags(XLOG_INCLUDE_ORIGIN);
	recptr = XLogInsert(SPINDLE_RMGR_ID, info);
	PageSetLSN(page, recptr);
	PageSetLSN(mappage, recptr);

	/*
	 * The redo pointer our record went in after (XLogInsertRecord updated
	 * our copy under its insertion lock): if the map page needed an image
	 * after all, write it now, before anyone can change or write the page.
	 */
	GetFullPageWriteInfo(&redo, &page_writes);
	if (!register_map && page_writes && map_lsn <= redo)
		log_newpage_buffer(mapbuf, true);

	END_CRIT_SECTION();
}

/*
 * Insert tup (a formed event, not toasted) into spindle seg as heap_insert
 * would, and set the slot map entry of vslot in facade to its TID, with
 * one WAL record.  Returns false, having done nothing, when the record
 * does not apply (see insert_record_applies): the caller then uses
 * heap_insert and spindle_slotmap_set.  On return tup->t_self is the TID.
 * The caller holds RowExclusiveLock on seg and facade.
 */
bool
spindle_insert_event(Relation facade, Relation seg, HeapTuple tup,
					 CommandId cid, int options, BulkInsertState bistate,
					 int64 vslot)
{
	TransactionId xid;
	Buffer		mapbuf;
	Buffer		buffer;
	Buffer		vmbuffer = InvalidBuffer;

	if (!insert_record_applies(facade, seg, tup, options))
		return false;

	/* heap_prepare_insert */
	xid = GetCurrentTransactionId();
	tup->t_data->t_infomask &= ~(HEAP_XACT_MASK);
	tup->t_data->t_infomask2 &= ~(HEAP2_XACT_MASK);
	tup->t_data->t_infomask |= HEAP_XMAX_INVALID;
	HeapTupleHeaderSetXmin(tup->t_data, xid);
	HeapTupleHeaderSetCmin(tup->t_data, cid);
	HeapTupleHeaderSetXmax(tup->t_data, 0);
	tup->t_tableOid = RelationGetRelid(seg);

	mapbuf = spindle_slotmap_pin(facade, vslot);
	buffer = RelationGetBufferForTuple(seg, tup->t_len, InvalidBuffer,
									   options, bistate, &vmbuffer, NULL);
	CheckForSerializableConflictIn(seg, NULL, InvalidBlockNumber);
	LockBuffer(mapbuf, BUFFER_LOCK_EXCLUSIVE);

	insert_and_log(facade, seg, buffer, vmbuffer, mapbuf, tup, vslot);

	UnlockReleaseBuffer(buffer);
	UnlockReleaseBuffer(mapbuf);
	if (vmbuffer != InvalidBuffer)
		ReleaseBuffer(vmbuffer);
	/* a spindle is never a catalog: no CacheInvalidateHeapTuple */
	pgstat_count_heap_insert(seg, 1);
	return true;
}

/* The parsed head of a record's block 0 data. */
typedef struct InsertHead
{
	uint32		head;
	int			mapidx;			/* the entry's index in its map page */
	BlockNumber mapblk;			/* the map page, when not registered */
	Oid			relnode;
	uint16		offnum;
	uint16		infomask2;
	uint16		infomask;
	char	   *tuple;			/* the logged tuple bytes */
	Size		tuplen;
} InsertHead;

static bool
parse_head(XLogReaderState *record, InsertHead *h)
{
	Size		len;
	char	   *data = XLogRecGetBlockData(record, 0, &len);
	Size		need;

	if (data == NULL || len < sizeof(uint32))
		return false;
	memcpy(&h->head, data, sizeof(uint32));
	need = SizeOfInsertHeader(h->head);
	if (len < need)
		return false;
	data += sizeof(uint32);
	h->mapidx = (int) (h->head & XLSI_INDEX_MASK);
	h->mapblk = (h->head >> XLSI_INDEX_BITS) & XLSI_BLOCK_MASK;
	if (h->head & XLSI_WIDE_BLOCK)
	{
		uint32		high;

		memcpy(&high, data, sizeof(uint32));
		h->mapblk |= high << XLSI_BLOCK_BITS;
		data += sizeof(uint32);
	}
	if (h->mapidx >= (int) SPINDLE_MAP_ENTRIES_PER_PAGE)
		return false;
	h->relnode = InvalidOid;
	if (!(h->head & XLSI_MAP_REGISTERED))
	{
		memcpy(&h->relnode, data, sizeof(Oid));
		data += sizeof(Oid);
	}
	memcpy(&h->offnum, data, sizeof(uint16));
	memcpy(&h->infomask2, data + sizeof(uint16), sizeof(uint16));
	memcpy(&h->infomask, data + 2 * sizeof(uint16), sizeof(uint16));
	h->tuple = data + 3 * sizeof(uint16);
	h->tuplen = len - need;
	return true;
}

/* heap_xlog_insert's page change: add the tuple at its offset. */
static Size
redo_heap_tuple(XLogReaderState *record, Page page, const InsertHead *h,
				ItemPointer tid)
{
	union
	{
		HeapTupleHeaderData hdr;
		char		data[MaxHeapTupleSize];
	}			tbuf;
	HeapTupleHeader htup = &tbuf.hdr;
	uint32		from = logged_from(h->infomask);
	uint32		newlen = from + h->tuplen;

	if (PageGetMaxOffsetNumber(page) + 1 < h->offnum)
		elog(PANIC, "invalid max offset number");
	if (newlen > MaxHeapTupleSize)
		elog(PANIC, "spindle: malformed insert record");
	MemSet((char *) htup, 0, from);
	memcpy((char *) htup + from, h->tuple, h->tuplen);
	htup->t_infomask2 = h->infomask2;
	htup->t_infomask = h->infomask;
	htup->t_hoff = (h->infomask & HEAP_HASNULL) ?
		MAXALIGN(SizeofHeapTupleHeader +
				 BITMAPLEN(HeapTupleHeaderGetNatts(htup))) : HOFF_NO_NULLS;
	HeapTupleHeaderSetXmin(htup, XLogRecGetXid(record));
	HeapTupleHeaderSetCmin(htup, FirstCommandId);
	htup->t_ctid = *tid;
	if (PageAddItem(page, (Item) htup, newlen, h->offnum, true, true) ==
		InvalidOffsetNumber)
		elog(PANIC, "failed to add tuple");
	return PageGetHeapFreeSpace(page);
}

/* The map half of the redo: the slot's entry becomes tid. */
static void
redo_map_entry(XLogReaderState *record, const InsertHead *h,
			   const RelFileNode *heapnode, ItemPointer tid)
{
	XLogRecPtr	lsn = record->EndRecPtr;
	Buffer		buf;

	if (h->head & XLSI_MAP_REGISTERED)
	{
		if (XLogReadBufferForRedo(record, 1, &buf) == BLK_NEEDS_REDO)
		{
			spindle_slotmap_put_index(BufferGetPage(buf), h->mapidx, tid);
			PageSetLSN(BufferGetPage(buf), lsn);
			MarkBufferDirty(buf);
		}
	}
	else
	{
		RelFileNode facade = *heapnode;

		/*
		 * Not registered: this page got its image earlier after the redo
		 * pointer, or gets it in the next record (a torn page, zeroed here
		 * if its checksum fails, is restored then); see the header.
		 */
		facade.relNode = h->relnode;
		buf = XLogReadBufferExtended(facade, MAIN_FORKNUM,
									 h->mapblk,
									 RBM_ZERO_ON_ERROR, InvalidBuffer);
		if (!BufferIsValid(buf))
			return;
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		if (PageGetLSN(BufferGetPage(buf)) < lsn)
		{
			spindle_slotmap_put_index(BufferGetPage(buf), h->mapidx, tid);
			PageSetLSN(BufferGetPage(buf), lsn);
			MarkBufferDirty(buf);
		}
	}
	if (BufferIsValid(buf))
		UnlockReleaseBuffer(buf);
}

/* Redo of XLOG_SPINDLE_INSERT (called by the resource manager). */
void
spindle_insert_redo(XLogReaderState *record)
{
	InsertHead	h;
	RelFileNode target_node;
	BlockNumber blkno;
	ItemPointerData tid;
	Buffer		buffer;
	XLogRedoAction action;
	Size		freespace = 0;

	if (!parse_head(record, &h))
		elog(PANIC, "spindle: malformed insert record");
	XLogRecGetBlockTag(record, 0, &target_node, NULL, &blkno);
	ItemPointerSet(&tid, blkno, h.offnum);

	/* the visibility map may need fixing even if the page is up to date */
	if (h.head & XLSI_ALL_VISIBLE_CLEARED)
	{
		Relation	reln = CreateFakeRelcacheEntry(target_node);
		Buffer		vmbuffer = InvalidBuffer;

		visibilitymap_pin(reln, blkno, &vmbuffer);
		visibilitymap_clear(reln, blkno, vmbuffer, VISIBILITYMAP_VALID_BITS);
		ReleaseBuffer(vmbuffer);
		FreeFakeRelcacheEntry(reln);
	}

	if ((XLogRecGetInfo(record) & ~XLR_INFO_MASK) == XLOG_SPINDLE_INSERT_INIT)
	{
		buffer = XLogInitBufferForRedo(record, 0);
		PageInit(BufferGetPage(buffer), BufferGetPageSize(buffer), 0);
		action = BLK_NEEDS_REDO;
	}
	else
		action = XLogReadBufferForRedo(record, 0, &buffer);
	if (action == BLK_NEEDS_REDO)
	{
		Page		page = BufferGetPage(buffer);

		freespace = redo_heap_tuple(record, page, &h, &tid);
		PageSetLSN(page, record->EndRecPtr);
		if (h.head & XLSI_ALL_VISIBLE_CLEARED)
			PageClearAllVisible(page);
		MarkBufferDirty(buffer);
	}
	if (BufferIsValid(buffer))
		UnlockReleaseBuffer(buffer);

	/* as heap: the FSM learns of pages running low on space */
	if (action == BLK_NEEDS_REDO && freespace < BLCKSZ / 5)
		XLogRecordPageWithFreeSpace(target_node, blkno, freespace);

	redo_map_entry(record, &h, &target_node, &tid);
}

/*
 * "at (0,13), map entry 12 of block 1 of relfilenode 16384" (or ", map
 * page registered"; ", all-visible cleared")
 */
void
spindle_insert_desc(StringInfo buf, XLogReaderState *record)
{
	InsertHead	h;
	BlockNumber blkno;

	if (!XLogRecHasBlockRef(record, 0) || !parse_head(record, &h))
	{
		appendStringInfoString(buf, "malformed");
		return;
	}
	XLogRecGetBlockTag(record, 0, NULL, NULL, &blkno);
	appendStringInfo(buf, "at (%u,%u), map entry %d", blkno, h.offnum,
					 h.mapidx);
	if (h.head & XLSI_MAP_REGISTERED)
		appendStringInfoString(buf, ", map page registered");
	else
		appendStringInfo(buf, " of block %u of relfilenode %u", h.mapblk,
						 h.relnode);
	if (h.head & XLSI_ALL_VISIBLE_CLEARED)
		appendStringInfoString(buf, ", all-visible cleared");
}
