/*-------------------------------------------------------------------------
 *
 * rangepurge.c
 *	  Purging many events of one spindle page with one WAL record: the
 *	  "spindle" custom resource manager, spindle_purge_on_page() and the
 *	  test-only SQL function spindle._purge_events().
 *
 * A purge is heap's delete: each tuple gets xmax = the purging
 * (sub)transaction's xid and the header heap_delete() would leave (see
 * purge_tuple_header), so MVCC, HeapTupleSatisfiesVacuum, pruning,
 * freezing and the drop rule treat a purged event exactly as a deleted
 * one; only the WAL differs.  heap_delete() writes one XLOG_HEAP_DELETE
 * record (56 bytes) per tuple; spindle_purge_on_page() writes one
 * XLOG_SPINDLE_PURGE record per page: the block reference (REGBUF_STANDARD,
 * so a full-page image replaces it after a checkpoint), the xmax, the
 * infomask bits and the list of offsets (2 bytes each).
 *
 * Locks: the caller holds a lock on the spindle (RowExclusiveLock, as for
 * DELETE) and the page's buffer pinned and exclusively locked from its
 * visibility checks until we return, so nobody changes those tuples in
 * between.  If the page is all-visible, the visibility map page is pinned
 * here, under that lock (heap_delete() pins it before locking; the map
 * page of an all-visible page exists, so that is at worst one read, or an
 * extension of the map after pg_truncate_visibility_map(), whose lock no
 * one holds while waiting for a heap page).  As in heap_delete(),
 * PD_ALL_VISIBLE and the map bits are cleared inside the critical section
 * that changes the tuples, and the record says so, so redo clears the map
 * bits again even when the heap page needs no redo: the map page is not
 * WAL-logged on its own and may reach disk before or after the heap page.
 *
 * Invariants: a record is written only while the resource manager is
 * registered (the library was preloaded), because a server that replays it
 * without the library stops with "resource manager with ID 128 not
 * registered".  Every tuple purged was updatable by the current
 * transaction (HeapTupleSatisfiesUpdate said so under the buffer lock)
 * without a wait and without a MultiXact; anything else is refused with an
 * ERROR before the critical section.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/heapam_xlog.h"
#include "access/htup_details.h"
#include "access/multixact.h"
#include "access/relation.h"
#include "access/rmgr.h"
#include "access/visibilitymap.h"
#include "access/xact.h"
#include "access/xlog_internal.h"
#include "access/xloginsert.h"
#include "access/xlogreader.h"
#include "access/xlogutils.h"
#include "access/bufmask.h"
#include "catalog/pg_type_d.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/buf_internals.h"
#include "storage/bufmgr.h"
#include "storage/bufpage.h"
#include "storage/predicate.h"
#include "tcop/utility.h"
#include "utils/array.h"
#include "utils/rel.h"

#include "storage/spindle_storage.h"



#define SPINDLE_RMGR_NAME		"spindle"

/* xl_spindle_purge.flags */
#define XLSP_ALL_VISIBLE_CLEARED	0x01	/* PD_ALL_VISIBLE and the VM bits
											 * were cleared */

/*
 * Main data of XLOG_SPINDLE_PURGE.  Block 0 is the heap page; its block
 * data is the array of ntuples offsets, ascending (left out with a
 * full-page image, which already holds the result).  There is no command
 * id: as for heap's delete record, cmax only matters to the purging
 * transaction itself, which never reads the page on a standby or after a
 * crash, so redo stores FirstCommandId.
 */
typedef struct xl_spindle_purge
{
	TransactionId xmax;			/* the purging (sub)transaction */
	uint16		ntuples;		/* number of offsets in the block data */
	uint8		flags;			/* XLSP_* */
	uint8		infobits_set;	/* XLHL_* bits, as in xl_heap_delete */
} xl_spindle_purge;

#define SizeOfSpindlePurge	(offsetof(xl_spindle_purge, infobits_set) + sizeof(uint8))

static bool rangepurge_registered = false;

static void spindle_rmgr_redo(XLogReaderState *record);
static void spindle_rmgr_desc(StringInfo buf, XLogReaderState *record);
static const char *spindle_rmgr_identify(uint8 info);
static void spindle_rmgr_mask(char *pagedata, BlockNumber blkno);

static RmgrData spindle_rmgr = {
	.rm_name = SPINDLE_RMGR_NAME,
	.rm_redo = spindle_rmgr_redo,
	.rm_desc = spindle_rmgr_desc,
	.rm_identify = spindle_rmgr_identify,
	.rm_startup = NULL,			/* redo keeps no state between records */
	.rm_cleanup = NULL,
	.rm_mask = spindle_rmgr_mask,	/* wal_consistency_checking */
	.rm_decode = NULL			/* spindles are never published */
};

/*
 * Register the resource manager; from _PG_init, only while
 * process_shared_preload_libraries_in_progress (RegisterCustomRmgr
 * refuses otherwise).
 */
void
spindle_rangepurge_register(void)
{
	RegisterCustomRmgr(SPINDLE_RMGR_ID, &spindle_rmgr);
	rangepurge_registered = true;
}

/*
 * The infomask bits of a tuple header after the purge, from the XLHL_*
 * bits of the record (the same encoding as heap's delete record).
 */
static void
apply_infobits(HeapTupleHeader htup, uint8 infobits)
{
	htup->t_infomask &= ~(HEAP_XMAX_BITS | HEAP_MOVED);
	htup->t_infomask2 &= ~HEAP_KEYS_UPDATED;
	if (infobits & XLHL_XMAX_IS_MULTI)
		htup->t_infomask |= HEAP_XMAX_IS_MULTI;
	if (infobits & XLHL_XMAX_LOCK_ONLY)
		htup->t_infomask |= HEAP_XMAX_LOCK_ONLY;
	if (infobits & XLHL_XMAX_EXCL_LOCK)
		htup->t_infomask |= HEAP_XMAX_EXCL_LOCK;
	if (infobits & XLHL_XMAX_KEYSHR_LOCK)
		htup->t_infomask |= HEAP_XMAX_KEYSHR_LOCK;
	if (infobits & XLHL_KEYS_UPDATED)
		htup->t_infomask2 |= HEAP_KEYS_UPDATED;
}

/*
 * What heap_delete() leaves in the header of a tuple whose xmax was
 * invalid, aborted, lock-only with no locker running, or lock-only by the
 * deleting (sub)transaction itself: compute_new_xmax_infomask() gives
 * xmax = xid, no xmax infomask bit and HEAP_KEYS_UPDATED (a delete is a
 * LockTupleExclusive update) in every one of those cases.  cid is already
 * adjusted by HeapTupleHeaderAdjustCmax.
 */
static void
purge_tuple_header(HeapTupleHeader htup, ItemPointer self,
				   TransactionId xid, CommandId cid, bool iscombo)
{
	apply_infobits(htup, XLHL_KEYS_UPDATED);
	HeapTupleHeaderClearHotUpdated(htup);
	HeapTupleHeaderSetXmax(htup, xid);
	HeapTupleHeaderSetCmax(htup, cid, iscombo);
	/* no forward link: it is not updated, and not moved to a partition */
	htup->t_ctid = *self;
}

static int
offset_cmp(const void *a, const void *b)
{
	OffsetNumber x = *(const OffsetNumber *) a;
	OffsetNumber y = *(const OffsetNumber *) b;

	return (x > y) - (x < y);
}

/*
 * See rangepurge.h.  Every check that can fail runs before the critical
 * section, with the caller's buffer lock held throughout.
 */
void
spindle_purge_on_page(Relation seg, Buffer buf, const OffsetNumber *offsets,
					  int n, CommandId cid)
{
	TransactionId xid;
	BlockNumber blkno = BufferGetBlockNumber(buf);
	Page		page = BufferGetPage(buf);
	OffsetNumber maxoff;
	OffsetNumber *sorted;
	CommandId  *cids;
	bool	   *combo;
	Buffer		vmbuffer = InvalidBuffer;
	bool		all_visible_cleared = false;
	int			i;

	if (n <= 0)
		return;
	if (n > MaxHeapTuplesPerPage)
		elog(ERROR, "cannot purge %d tuples of one page", n);
	if (!rangepurge_registered)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("spindle must be loaded via shared_preload_libraries to purge events"),
				 errhint("Add spindle to shared_preload_libraries in postgresql.conf and restart the server.")));
	/* as heap_delete: a combo CID cannot be shared with parallel workers */
	if (IsInParallelMode())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("cannot delete tuples during a parallel operation")));
#ifdef USE_ASSERT_CHECKING
	if (!BufferIsLocal(buf))
		Assert(LWLockHeldByMeInMode(BufferDescriptorGetContentLock(GetBufferDescriptor(buf - 1)),
									LW_EXCLUSIVE));
#endif

	xid = GetCurrentTransactionId();
	maxoff = PageIsNew(page) ? InvalidOffsetNumber : PageGetMaxOffsetNumber(page);

	sorted = palloc(n * sizeof(OffsetNumber));
	memcpy(sorted, offsets, n * sizeof(OffsetNumber));
	qsort(sorted, n, sizeof(OffsetNumber), offset_cmp);
	cids = palloc(n * sizeof(CommandId));
	combo = palloc(n * sizeof(bool));

	for (i = 0; i < n; i++)
	{
		OffsetNumber off = sorted[i];
		ItemId		lp;
		HeapTupleData tp;
		TM_Result	res;

		if (off < FirstOffsetNumber || off > maxoff)
			elog(ERROR, "offset %u is out of range on block %u of \"%s\"",
				 off, blkno, RelationGetRelationName(seg));
		if (i > 0 && off == sorted[i - 1])
			elog(ERROR, "offset %u is given twice for block %u of \"%s\"",
				 off, blkno, RelationGetRelationName(seg));
		lp = PageGetItemId(page, off);
		if (!ItemIdIsNormal(lp))
			elog(ERROR, "line pointer (%u,%u) of \"%s\" is not a tuple",
				 blkno, off, RelationGetRelationName(seg));
		tp.t_tableOid = RelationGetRelid(seg);
		tp.t_data = (HeapTupleHeader) PageGetItem(page, lp);
		tp.t_len = ItemIdGetLength(lp);
		ItemPointerSet(&tp.t_self, blkno, off);

		/*
		 * heap_delete()'s own test.  TM_Ok: xmin committed (or ours, from
		 * an earlier command) and xmax invalid, aborted or a finished
		 * locker's.  A lock taken by this very (sub)transaction is also
		 * overwritten by heap_delete() without a MultiXact.  Anything else
		 * (deleted, in progress, locked by someone else or by our parent)
		 * heap would refuse, wait for or turn into a MultiXact.
		 */
		res = HeapTupleSatisfiesUpdate(&tp, cid, buf);
		if (res == TM_BeingModified &&
			!(tp.t_data->t_infomask & HEAP_XMAX_IS_MULTI) &&
			HEAP_XMAX_IS_LOCKED_ONLY(tp.t_data->t_infomask) &&
			TransactionIdEquals(HeapTupleHeaderGetRawXmax(tp.t_data), xid))
			res = TM_Ok;
		if (res != TM_Ok)
			elog(ERROR, "tuple (%u,%u) of \"%s\" cannot be purged: it is not visible, deleted, or locked by another transaction (%d)",
				 blkno, off, RelationGetRelationName(seg), (int) res);

		/* as heap_delete, before any change */
		CheckForSerializableConflictIn(seg, &tp.t_self, blkno);
		cids[i] = cid;
		HeapTupleHeaderAdjustCmax(tp.t_data, &cids[i], &combo[i]);
	}

	/*
	 * heap_delete() does this for every delete: another backend may put our
	 * xid into a MultiXact as soon as it sees it in xmax.
	 */
	MultiXactIdSetOldestMember();

	if (PageIsAllVisible(page))
		visibilitymap_pin(seg, blkno, &vmbuffer);

	START_CRIT_SECTION();

	PageSetPrunable(page, xid);
	if (PageIsAllVisible(page))
	{
		all_visible_cleared = true;
		PageClearAllVisible(page);
		visibilitymap_clear(seg, blkno, vmbuffer, VISIBILITYMAP_VALID_BITS);
	}

	for (i = 0; i < n; i++)
	{
		ItemPointerData self;

		ItemPointerSet(&self, blkno, sorted[i]);
		purge_tuple_header((HeapTupleHeader) PageGetItem(page, PageGetItemId(page, sorted[i])),
						   &self, xid, cids[i], combo[i]);
	}

	MarkBufferDirty(buf);

	if (RelationNeedsWAL(seg))
	{
		xl_spindle_purge xlrec;
		XLogRecPtr	recptr;

		xlrec.xmax = xid;
		xlrec.ntuples = (uint16) n;
		xlrec.flags = all_visible_cleared ? XLSP_ALL_VISIBLE_CLEARED : 0;
		xlrec.infobits_set = XLHL_KEYS_UPDATED;

		XLogBeginInsert();
		XLogRegisterData((char *) &xlrec, SizeOfSpindlePurge);
		XLogRegisterBuffer(0, buf, REGBUF_STANDARD);
		XLogRegisterBufData(0, (char *) sorted, n * sizeof(OffsetNumber));
		recptr = XLogInsert(SPINDLE_RMGR_ID, XLOG_SPINDLE_PURGE);
		PageSetLSN(page, recptr);
	}

	END_CRIT_SECTION();

	if (BufferIsValid(vmbuffer))
		ReleaseBuffer(vmbuffer);
	/* the spindle's delete counter: the worker's count cache watches it */
	for (i = 0; i < n; i++)
		pgstat_count_heap_delete(seg);
	/* spindle.spindles.purged_events, at commit (counters.c) */
	spindle_counters_deleted(RelationGetRelid(seg), n);

	pfree(sorted);
	pfree(cids);
	pfree(combo);
}

/* ----------------------------------------------------------------
 * The resource manager
 * ----------------------------------------------------------------
 */

static void
spindle_redo_purge(XLogReaderState *record)
{
	XLogRecPtr	lsn = record->EndRecPtr;
	xl_spindle_purge *xlrec = (xl_spindle_purge *) XLogRecGetData(record);
	RelFileNode rnode;
	BlockNumber blkno;
	Buffer		buffer;

	XLogRecGetBlockTag(record, 0, &rnode, NULL, &blkno);

	/*
	 * The map bits must go even if the heap page needs no redo: the map page
	 * is not logged, and may be older on disk than the heap page.
	 */
	if (xlrec->flags & XLSP_ALL_VISIBLE_CLEARED)
	{
		Relation	reln = CreateFakeRelcacheEntry(rnode);
		Buffer		vmbuffer = InvalidBuffer;

		visibilitymap_pin(reln, blkno, &vmbuffer);
		visibilitymap_clear(reln, blkno, vmbuffer, VISIBILITYMAP_VALID_BITS);
		ReleaseBuffer(vmbuffer);
		FreeFakeRelcacheEntry(reln);
	}

	if (XLogReadBufferForRedo(record, 0, &buffer) == BLK_NEEDS_REDO)
	{
		Page		page = BufferGetPage(buffer);
		OffsetNumber maxoff = PageGetMaxOffsetNumber(page);
		Size		len;
		OffsetNumber *offsets = (OffsetNumber *) XLogRecGetBlockData(record, 0, &len);
		int			i;

		if (offsets == NULL || len != xlrec->ntuples * sizeof(OffsetNumber))
			elog(PANIC, "spindle purge record has %zu bytes of offsets for %u tuples",
				 offsets ? len : 0, xlrec->ntuples);
		for (i = 0; i < xlrec->ntuples; i++)
		{
			ItemId		lp;
			HeapTupleHeader htup;

			if (offsets[i] < FirstOffsetNumber || offsets[i] > maxoff)
				elog(PANIC, "spindle purge: invalid offset %u", offsets[i]);
			lp = PageGetItemId(page, offsets[i]);
			if (!ItemIdIsNormal(lp))
				elog(PANIC, "spindle purge: invalid lp %u", offsets[i]);
			htup = (HeapTupleHeader) PageGetItem(page, lp);

			/* what heap_xlog_delete() does with the same fields */
			apply_infobits(htup, xlrec->infobits_set);
			HeapTupleHeaderClearHotUpdated(htup);
			HeapTupleHeaderSetXmax(htup, xlrec->xmax);
			HeapTupleHeaderSetCmax(htup, FirstCommandId, false);
			ItemPointerSet(&htup->t_ctid, blkno, offsets[i]);
		}
		PageSetPrunable(page, xlrec->xmax);
		if (xlrec->flags & XLSP_ALL_VISIBLE_CLEARED)
			PageClearAllVisible(page);
		PageSetLSN(page, lsn);
		MarkBufferDirty(buffer);
	}
	if (BufferIsValid(buffer))
		UnlockReleaseBuffer(buffer);
}

static void
spindle_rmgr_redo(XLogReaderState *record)
{
	uint8		info = XLogRecGetInfo(record) & ~XLR_INFO_MASK;

	switch (info)
	{
		case XLOG_SPINDLE_PURGE:
			spindle_redo_purge(record);
			break;
		case XLOG_SPINDLE_MAP_SET:
			spindle_slotmap_redo_set(record);
			break;
		case XLOG_SPINDLE_STRAGGLE:
		case XLOG_SPINDLE_SPLIT:
		case XLOG_SPINDLE_INSERT_UPPER:
		case XLOG_SPINDLE_NEWROOT:
		case XLOG_SPINDLE_FREE:
		case XLOG_SPINDLE_REUSE:
			spindle_crel_redo(record);
			break;
		case XLOG_SPINDLE_INSERT:
		case XLOG_SPINDLE_INSERT_INIT:
			spindle_insert_redo(record);
			break;
		default:
			elog(PANIC, "spindle_rmgr_redo: unknown op code %u", info);
	}
}

/* "xmax 745, 50 tuples: 1-25,27-51" (offsets only without a page image) */
static void
spindle_rmgr_desc(StringInfo buf, XLogReaderState *record)
{
	uint8		info = XLogRecGetInfo(record) & ~XLR_INFO_MASK;

	if (info == XLOG_SPINDLE_MAP_SET)
		spindle_slotmap_desc_set(buf, record);
	else if (info == XLOG_SPINDLE_INSERT || info == XLOG_SPINDLE_INSERT_INIT)
		spindle_insert_desc(buf, record);
	else if (spindle_crel_identify(info) != NULL)
		spindle_crel_desc(buf, record);
	else if (info == XLOG_SPINDLE_PURGE)
	{
		xl_spindle_purge *xlrec = (xl_spindle_purge *) XLogRecGetData(record);
		Size		len = 0;
		OffsetNumber *offsets = NULL;
		int			noffsets;
		int			i;

		appendStringInfo(buf, "xmax %u, %u tuples", xlrec->xmax, xlrec->ntuples);
		if (xlrec->flags & XLSP_ALL_VISIBLE_CLEARED)
			appendStringInfoString(buf, ", all-visible cleared");
		if (XLogRecHasBlockRef(record, 0))
			offsets = (OffsetNumber *) XLogRecGetBlockData(record, 0, &len);
		if (offsets == NULL)
			return;
		noffsets = (int) (len / sizeof(OffsetNumber));
		appendStringInfoChar(buf, ':');
		for (i = 0; i < noffsets; i++)
		{
			int			j = i;

			while (j + 1 < noffsets &&
				   offsets[j + 1] == offsets[j] + 1)
				j++;
			appendStringInfo(buf, "%s%u", i > 0 ? "," : " ", offsets[i]);
			if (j > i)
				appendStringInfo(buf, "-%u", offsets[j]);
			i = j;
		}
	}
}

static const char *
spindle_rmgr_identify(uint8 info)
{
	switch (info & ~XLR_INFO_MASK)
	{
		case XLOG_SPINDLE_PURGE:
			return "PURGE";
		case XLOG_SPINDLE_MAP_SET:
			return "MAP_SET";
		case XLOG_SPINDLE_INSERT:
			return "INSERT";
		case XLOG_SPINDLE_INSERT_INIT:
			return "INSERT+INIT";
		default:
			return spindle_crel_identify(info);
	}
}

/*
 * Mask a page for wal_consistency_checking: a consumer relation's page as
 * consumer_xlog.c says, a spindle's heap page (purge records) as heap
 * does, a slot map page (map records) as a page of no tuples.  Map pages
 * are made with an 8-byte special space (their tag, mapdir.c) and never
 * get a tuple, so pd_upper stays at pd_special; a heap page with pd_upper
 * there has no tuple storage either, and heap_mask would only mask what
 * this masks (map entries must not be read as line pointers: they are
 * not).
 */
static void
spindle_rmgr_mask(char *pagedata, BlockNumber blkno)
{
	PageHeader	phdr = (PageHeader) pagedata;

	/* a page of a consumer relation (consumer_xlog.c) */
	if (spindle_crel_mask(pagedata, blkno))
		return;
	if (PageIsNew(pagedata) || phdr->pd_upper < phdr->pd_special)
	{
		heap_mask(pagedata, blkno);
		return;
	}
	mask_page_lsn_and_checksum(pagedata);
	mask_page_hint_bits(pagedata);
	mask_unused_space(pagedata);
}
