/*-------------------------------------------------------------------------
 *
 * slotmap.c
 *	  Virtual slots of a spindle table: the TIDs it hands out, and the slot
 *	  map that turns them into the physical TIDs of its spindles.
 *
 * Why virtual TIDs.  A TID bitmap accepts at most MaxHeapTuplesPerPage
 * offsets per block, so a TID is a virtual slot v = block * 291 + offset
 * - 1, block from 0 to MaxBlockNumber: SPINDLE_VSLOTS, about 1.25 * 10^12
 * distinct TIDs per table.  PostgreSQL 15 would read the facade's own
 * files at those block numbers in two places, and md.c raises an error
 * for a block past a missing 1 GB segment ("previous segment is only N
 * blocks"): bitmap heap scans PrefetchBuffer() the blocks of their bitmap
 * (facade_scan.c turns that off for facades: spindle_bitmap_no_prefetch),
 * and ANALYZE prefetches the blocks it samples, below relation_size
 * (facade_am.c keeps that below RELSEG_SIZE blocks: each sampled block
 * stands for a stretch of virtual blocks).  Nothing else does (index-only
 * and bitmap scans ask the visibility map, which a facade never has: "not
 * all visible").
 *
 * How they are used.  Each spindle owns a contiguous range of virtual
 * slots, [vbase, vbase + vcount), given to it when it is created; vcount is
 * its capacity.  The k-th event appended to a spindle (k counted by the
 * slot counters, slots.c) is virtual slot vbase + k, whatever page heap put
 * it on, so TIDs are dense: the limit is counted in events (1.25 * 10^12
 * undropped events per table), never in spindles or pages, and does not
 * depend on events_per_spindle.  Each event carries k in a hidden column
 * (layout.c), which gives the physical-to-virtual direction for free.
 *
 * The slot map gives the other direction.  Block 0 of the facade's main
 * fork is a metapage; the other blocks hold map pages, one ItemPointerData
 * per virtual slot, 1 360 slots to a page (virtual map page vp = vslot /
 * 1360): the physical TID of its event in its spindle, a tombstone, or
 * zeroes.  Which block holds vp's page a directory says (mapdir.c: a radix
 * tree rooted in the metapage, a per-backend cache checked by each page's
 * tag), so pages are placed independently of the slots they cover: a vp
 * without a page reads as all empty, a page is made on its first write, and
 * the pages of ranges retired go back wherever they lie
 * (spindle_slotmap_truncate: freed, the pages at the end moved down into
 * the holes, the free tail truncated, under a conditional
 * AccessExclusiveLock).
 * A tombstone (spindle_is_tombstone) marks a slot whose reservation never
 * placed its event (tombstones.c): used, but no event.  An entry is
 * written after heap has placed the tuple and before the inserting
 * statement can insert index entries, so an index never holds a TID whose
 * entry is missing.  Entries of a range are zeroed only after every index
 * entry pointing into the range has been removed and before the range can
 * be given to another spindle (maintenance.c), so a TID never comes to mean
 * a different event while any index still holds it.  pd_lower of a map
 * page covers every non-zero entry; entries past it are zero.
 *
 * The metapage also lists the ranges of spindles whose creating
 * (sub)transaction is not yet known to have committed ("pending"): range
 * allocation is transactional (a catalog row), so a creation that rolls
 * back would otherwise free a range whose TIDs its own inserts may have put
 * into the table's indexes.  A pending range whose creator aborted is
 * cleaned like the range of a dropped spindle, then forgotten.
 *
 * Setting entries -- once per insert, the hot path -- is WAL-logged with a
 * record of the spindle resource manager: a single event's entry in the
 * same record as its tuple (XLOG_SPINDLE_INSERT, eventinsert.c, which uses
 * the spindle_slotmap_pin/put_index helpers here), others (and
 * tombstones) with XLOG_SPINDLE_MAP_SET (the map page, the first entry's
 * index and the new entries, 56 bytes for one event), written only where
 * RelationNeedsWAL says so (not for unlogged tables, nor under wal_level
 * = minimal for a table created in the same transaction, which is synced
 * at commit).
 * The directory's changes are generic WAL records (mapdir.c); shrinking
 * the fork is XLOG_SMGR_TRUNCATE.  Everything else here (clearing, the
 * metapage, copies) is rare and uses generic WAL: it computes a delta of
 * the whole page, which cost a quarter of an enqueue's time when every set
 * went that way.  Locks: map pages and the metapage are changed under an
 * exclusive buffer lock and read under a share lock; making a page takes
 * the metapage's lock and the relation extension lock (mapdir.c); giving
 * pages back takes AccessExclusiveLock on the facade, without waiting.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/generic_xlog.h"
#include "access/xact.h"
#include "access/xloginsert.h"
#include "access/xlogreader.h"
#include "access/xlogutils.h"
#include "catalog/storage.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/procarray.h"
#include "storage/smgr.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "storage/spindle_storage.h"


#define SPINDLE_META_MAGIC		0x53504E32	/* "SPN2" */
#define SPINDLE_META_VERSION	5	/* 5: the map's directory (mapdir.c) */

typedef struct SpindleMetaPageData
{
	uint32		magic;
	uint32		version;
	uint32		npending;
	uint32		unused;
	SpindleMapRoot map;			/* where the map's directory starts */
	int64		next_spindle_no;	/* never handed out twice, even on abort */
	int64		next_event_no;	/* likewise: the next range of event numbers */
	SpindlePending pending[SPINDLE_MAX_PENDING];
} SpindleMetaPageData;

#define MetaGet(page) ((SpindleMetaPageData *) PageGetContents(page))

#define MAP_CONTENTS_OFFSET		SPINDLE_MAP_CONTENTS_OFFSET
#define MAP_ENTRIES_PER_PAGE	SPINDLE_MAP_ENTRIES_PER_PAGE
#define MAP_VP(vslot)			((uint32) ((vslot) / MAP_ENTRIES_PER_PAGE))
#define MAP_INDEX(vslot)		((int) ((vslot) % MAP_ENTRIES_PER_PAGE))
#define MapEntries(page)		((ItemPointerData *) ((char *) (page) + MAP_CONTENTS_OFFSET))

StaticAssertDecl(MAXALIGN(SizeOfPageHeaderData) + sizeof(SpindleMetaPageData) <= BLCKSZ,
				 "metapage must fit in one page");
StaticAssertDecl((SPINDLE_VSLOTS - 1) / MAP_ENTRIES_PER_PAGE < PG_UINT32_MAX,
				 "virtual map page numbers must fit in 32 bits");

/*
 * Blocks in the facade's main fork.  Not RelationGetNumberOfBlocks(): for a
 * table AM that asks the AM, which answers in virtual blocks.
 */
static inline BlockNumber
fork_nblocks(Relation facade)
{
	return smgrnblocks(RelationGetSmgr(facade), MAIN_FORKNUM);
}

/*
 * The facade's main fork was truncated in place (TRUNCATE's
 * nontransactional path): forget its size.  RelationTruncate already did,
 * through smgrtruncate; kept so that callers need not know it.
 */
void
spindle_slotmap_forget_size(Relation facade)
{
	RelationGetSmgr(facade)->smgr_cached_nblocks[MAIN_FORKNUM] =
		InvalidBlockNumber;
}

/* Number of entries in use on a map page (entries past it are zero). */
int
spindle_map_used(Page page)
{
	if (PageIsNew(page))
		return 0;
	return (((PageHeader) page)->pd_lower - MAP_CONTENTS_OFFSET) /
		sizeof(ItemPointerData);
}

#define map_used(page)	spindle_map_used(page)

static inline void
map_set_used(Page page, int n)
{
	((PageHeader) page)->pd_lower = MAP_CONTENTS_OFFSET +
		n * sizeof(ItemPointerData);
}

/*
 * Write an empty metapage as block 0 of the given fork (CREATE, TRUNCATE,
 * the init fork of an unlogged table), whose spindles and events will be
 * numbered from *next.  WAL-logs it when asked.
 */
void
spindle_slotmap_init_fork(SMgrRelation srel, ForkNumber fork, bool wal,
						  const SpindleNumbers *next)
{
	PGAlignedBlock buf;
	Page		page = (Page) buf.data;
	SpindleMetaPageData *meta;

	PageInit(page, BLCKSZ, 0);
	meta = MetaGet(page);
	memset(meta, 0, sizeof(SpindleMetaPageData));
	meta->magic = SPINDLE_META_MAGIC;
	meta->version = SPINDLE_META_VERSION;
	meta->next_spindle_no = next->spindle_no;
	meta->next_event_no = next->event_no;
	((PageHeader) page)->pd_lower =
		((char *) meta + sizeof(SpindleMetaPageData)) - (char *) page;

	PageSetChecksumInplace(page, 0);
	smgrextend(srel, fork, 0, (char *) page, true);
	if (wal)
		log_newpage(&srel->smgr_rnode.node, fork, 0, page, true);
	smgrimmedsync(srel, fork);
}

/* Read and lock the metapage, checking that it is one. */
Buffer
spindle_meta_read(Relation facade, int mode)
{
	Buffer		buf = ReadBuffer(facade, 0);
	SpindleMetaPageData *meta;

	LockBuffer(buf, mode);
	meta = MetaGet(BufferGetPage(buf));
	if (meta->magic != SPINDLE_META_MAGIC ||
		meta->version != SPINDLE_META_VERSION)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("spindle table \"%s\" has an invalid metapage",
						RelationGetRelationName(facade))));
	return buf;
}

#define read_meta(facade, mode)	spindle_meta_read(facade, mode)

/* Where the map's directory starts, in the metapage `page`. */
SpindleMapRoot *
spindle_meta_map_root(Page page)
{
	return &MetaGet(page)->map;
}

/*
 * Make block blk of a copy's new fork exist (spindle_slotmap_copy, under
 * AccessExclusiveLock): extend the fork straight to it, leaving a hole of
 * zero pages (free pages) in between.  Takes the relation extension lock.
 * Where the facade needs WAL, the extension is logged first, as a full
 * image of that zero page: replay (crash recovery, a standby) extends the
 * fork the same way, and no later record of the page can be replayed
 * before it and wiped by it.
 */
static void
map_extend_to(Relation facade, BlockNumber blk)
{
	LockRelationForExtension(facade, ExclusiveLock);
	if (fork_nblocks(facade) <= blk)
	{
		PGAlignedBlock zero;

		memset(zero.data, 0, BLCKSZ);
		if (RelationNeedsWAL(facade))
			log_newpage(&facade->rd_node, MAIN_FORKNUM, blk, zero.data, true);
		smgrextend(RelationGetSmgr(facade), MAIN_FORKNUM, blk, zero.data,
				   false);
	}
	UnlockRelationForExtension(facade, ExclusiveLock);
}

/* The map page of vslot, locked in mode; see spindle_mapdir_buffer. */
static inline Buffer
map_buffer(Relation facade, int64 vslot, int mode, bool create)
{
	return spindle_mapdir_buffer(facade, MAP_VP(vslot), mode, create);
}

/*
 * The physical TID of virtual slot vslot into *ptid; false if the slot has
 * no event (never used, reserved but not written, buried as lost -- a
 * tombstone -- or cleared).
 */
bool
spindle_slotmap_get(Relation facade, int64 vslot, ItemPointer ptid)
{
	Buffer		buf;
	Page		page;
	int			idx = MAP_INDEX(vslot);
	bool		found = false;

	Assert(vslot >= 0 && vslot < SPINDLE_VSLOTS);
	buf = map_buffer(facade, vslot, BUFFER_LOCK_SHARE, false);
	if (!BufferIsValid(buf))
		return false;
	page = BufferGetPage(buf);
	if (idx < map_used(page))
	{
		*ptid = MapEntries(page)[idx];
		found = ItemPointerIsValid(ptid) && !spindle_is_tombstone(ptid);
	}
	UnlockReleaseBuffer(buf);
	return found;
}

/*
 * The entries of n consecutive slots from first into ptids[] (invalid TIDs
 * for empty slots, tombstones as they are: spindle_is_tombstone); reads
 * each map page once.
 */
void
spindle_slotmap_get_range(Relation facade, int64 first, int n,
						  ItemPointer ptids)
{
	int			done = 0;

	while (done < n)
	{
		int64		v = first + done;
		int			idx = MAP_INDEX(v);
		int			chunk = Min(n - done, (int) MAP_ENTRIES_PER_PAGE - idx);
		Buffer		buf = map_buffer(facade, v, BUFFER_LOCK_SHARE, false);
		int			i;

		if (!BufferIsValid(buf))
		{
			/* no page: every entry it would hold is empty */
			for (i = 0; i < chunk; i++)
				ItemPointerSetInvalid(&ptids[done + i]);
			done += chunk;
			continue;
		}
		for (i = 0; i < chunk; i++)
		{
			Page		page = BufferGetPage(buf);

			if (idx + i < map_used(page))
				ptids[done + i] = MapEntries(page)[idx + i];
			else
				ItemPointerSetInvalid(&ptids[done + i]);
		}
		UnlockReleaseBuffer(buf);
		done += chunk;
	}
}

/*
 * Main data of XLOG_SPINDLE_MAP_SET.  Block 0 is the map page (a standard
 * page: the hole past pd_lower is zero); its block data is the nentries
 * new entries from index first (left out with a full-page image).
 */
typedef struct xl_spindle_map_set
{
	uint16		first;			/* index of the first entry in the page */
	uint16		nentries;
} xl_spindle_map_set;

#define SizeOfSpindleMapSet	(offsetof(xl_spindle_map_set, nentries) + sizeof(uint16))

/* Put entries [idx, idx + n) into map page `page`; redo does the same. */
static void
map_put(Page page, int idx, int n, const ItemPointerData *entries)
{
	if (PageIsNew(page))		/* only in redo, before the page's image */
		spindle_mapdir_init_page(page, SPINDLE_MAP_PAGE, 0, 0);
	memcpy(&MapEntries(page)[idx], entries, n * sizeof(ItemPointerData));
	if (map_used(page) < idx + n)
		map_set_used(page, idx + n);
}

/*
 * Put entries [idx, idx + n) into the map page in buf (exclusively locked)
 * and WAL-log them as one XLOG_SPINDLE_MAP_SET record.
 */
static void
map_write_locked(Relation facade, Buffer buf, int idx, int n,
				 const ItemPointerData *entries)
{
	Page		page = BufferGetPage(buf);

	START_CRIT_SECTION();
	map_put(page, idx, n, entries);
	MarkBufferDirty(buf);
	if (RelationNeedsWAL(facade))
	{
		xl_spindle_map_set xlrec;
		XLogRecPtr	recptr;

		xlrec.first = (uint16) idx;
		xlrec.nentries = (uint16) n;
		XLogBeginInsert();
		XLogRegisterData((char *) &xlrec, SizeOfSpindleMapSet);
		XLogRegisterBuffer(0, buf, REGBUF_STANDARD);
		XLogRegisterBufData(0, (char *) entries, n * sizeof(ItemPointerData));
		recptr = XLogInsert(SPINDLE_RMGR_ID, XLOG_SPINDLE_MAP_SET);
		PageSetLSN(page, recptr);
	}
	END_CRIT_SECTION();
}

/*
 * Record the physical TIDs of n consecutive slots from first: one WAL
 * record per map page touched.
 */
void
spindle_slotmap_set(Relation facade, int64 first, int n, ItemPointer ptids)
{
	int			done = 0;

	while (done < n)
	{
		int64		v = first + done;
		int			idx = MAP_INDEX(v);
		int			chunk = Min(n - done, (int) MAP_ENTRIES_PER_PAGE - idx);
		Buffer		buf = map_buffer(facade, v, BUFFER_LOCK_EXCLUSIVE, true);

		map_write_locked(facade, buf, idx, chunk, &ptids[done]);
		UnlockReleaseBuffer(buf);
		done += chunk;
	}
}

/*
 * Write a tombstone into every empty entry of the n slots from first (lost
 * slots: tombstones.c says when this may be called); an entry already set
 * (an aborted insert's, which placed its tuple and failed later) stays.
 * The same XLOG_SPINDLE_MAP_SET record as spindle_slotmap_set carries the
 * page's entries over the stretch, tombstones and kept ones alike, so redo
 * needs nothing new.  Returns the number of tombstones written.
 */
int64
spindle_slotmap_bury(Relation facade, int64 first, int64 n)
{
	ItemPointerData *entries = palloc(sizeof(ItemPointerData) *
									  MAP_ENTRIES_PER_PAGE);
	int64		done = 0;
	int64		buried = 0;

	while (done < n)
	{
		int64		v = first + done;
		int			idx = MAP_INDEX(v);
		int			chunk = (int) Min(n - done, (int64) MAP_ENTRIES_PER_PAGE - idx);
		Buffer		buf = map_buffer(facade, v, BUFFER_LOCK_EXCLUSIVE, true);
		Page		page = BufferGetPage(buf);
		int			used = map_used(page);
		int			fresh = 0;
		int			i;

		for (i = 0; i < chunk; i++)
		{
			ItemPointer cur = &MapEntries(page)[idx + i];

			if (idx + i < used && ItemPointerIsValid(cur))
				entries[i] = *cur;
			else
			{
				spindle_set_tombstone(&entries[i]);
				fresh++;
			}
		}
		if (fresh > 0)
			map_write_locked(facade, buf, idx, chunk, entries);
		UnlockReleaseBuffer(buf);
		buried += fresh;
		done += chunk;
	}
	pfree(entries);
	return buried;
}

/* Redo of XLOG_SPINDLE_MAP_SET (called by the resource manager). */
void
spindle_slotmap_redo_set(XLogReaderState *record)
{
	xl_spindle_map_set *xlrec = (xl_spindle_map_set *) XLogRecGetData(record);
	Buffer		buf;

	if (XLogReadBufferForRedo(record, 0, &buf) == BLK_NEEDS_REDO)
	{
		Page		page = BufferGetPage(buf);
		Size		len;
		char	   *data = XLogRecGetBlockData(record, 0, &len);

		if (data == NULL ||
			len != xlrec->nentries * sizeof(ItemPointerData) ||
			xlrec->first + xlrec->nentries > MAP_ENTRIES_PER_PAGE)
			elog(PANIC, "spindle: malformed slot map record");
		map_put(page, xlrec->first, xlrec->nentries,
				(ItemPointerData *) data);
		PageSetLSN(page, record->EndRecPtr);
		MarkBufferDirty(buf);
	}
	if (BufferIsValid(buf))
		UnlockReleaseBuffer(buf);
}

/*
 * "entries 12..13" (the indexes within the map page), and how many of them
 * are tombstones, if any: "entries 12..13, tombstones: 2".  A record that
 * carries the page's full image instead of the entries names none.
 */
void
spindle_slotmap_desc_set(StringInfo buf, XLogReaderState *record)
{
	xl_spindle_map_set *xlrec = (xl_spindle_map_set *) XLogRecGetData(record);
	Size		len = 0;
	char	   *data = XLogRecGetBlockData(record, 0, &len);
	int			tombs = 0;
	int			i;

	appendStringInfo(buf, "entries %u..%u", xlrec->first,
					 xlrec->first + xlrec->nentries - 1);
	for (i = 0; data != NULL && (i + 1) * sizeof(ItemPointerData) <= len; i++)
	{
		ItemPointerData e;

		memcpy(&e, data + i * sizeof(ItemPointerData), sizeof(e));
		if (spindle_is_tombstone(&e))
			tombs++;
	}
	if (tombs > 0)
		appendStringInfo(buf, ", tombstones: %d", tombs);
}

/*
 * For the insert record (eventinsert.c), which sets one entry in the same
 * record as the heap insert: the map page of vslot, pinned (created if
 * needed) but not locked; the caller locks it exclusively after its heap
 * page (heap page, then map page: nobody locks them in the other order).
 * Its tag was checked under a lock here, and it stays vslot's page while
 * the caller holds its lock on the facade (mapdir.c, the cache rule).
 */
Buffer
spindle_slotmap_pin(Relation facade, int64 vslot)
{
	Buffer		buf;

	Assert(vslot >= 0 && vslot < SPINDLE_VSLOTS);
	buf = map_buffer(facade, vslot, BUFFER_LOCK_SHARE, true);
	LockBuffer(buf, BUFFER_LOCK_UNLOCK);
	return buf;
}

/* The index of vslot's entry within its map page. */
int
spindle_slotmap_index(int64 vslot)
{
	return MAP_INDEX(vslot);
}

/* Put entry idx of a map page (exclusively locked, or in redo). */
void
spindle_slotmap_put_index(Page page, int idx, ItemPointer ptid)
{
	Assert(idx >= 0 && idx < (int) MAP_ENTRIES_PER_PAGE);
	map_put(page, idx, 1, ptid);
}

/*
 * Zero the entries of n slots from first (a range that no index refers to
 * any more, about to be given back).
 */
void
spindle_slotmap_clear(Relation facade, int64 first, int64 n)
{
	int64		done = 0;

	while (done < n)
	{
		int64		v = first + done;
		int			idx = MAP_INDEX(v);
		int			chunk = (int) Min(n - done, (int64) MAP_ENTRIES_PER_PAGE - idx);
		Buffer		buf = map_buffer(facade, v, BUFFER_LOCK_EXCLUSIVE, false);
		Page		page;
		int			used;

		if (!BufferIsValid(buf))
		{
			done += chunk;		/* no page: nothing to clear */
			continue;
		}
		page = BufferGetPage(buf);
		used = map_used(page);
		if (idx < used)
		{
			GenericXLogState *state = GenericXLogStart(facade);
			int			end = Min(idx + chunk, used);

			page = GenericXLogRegisterBuffer(state, buf, 0);
			memset(&MapEntries(page)[idx], 0,
				   (end - idx) * sizeof(ItemPointerData));
			/* keep pd_lower tight so that the hole stays out of the WAL */
			while (used > 0 && !ItemPointerIsValid(&MapEntries(page)[used - 1]))
				used--;
			map_set_used(page, used);
			GenericXLogFinish(state);
		}
		UnlockReleaseBuffer(buf);
		done += chunk;
	}
}

/*
 * The index (relative to first) of the last non-empty slot among n slots
 * from first, or -1 if all are empty.  A tombstone is not empty: the slot
 * was handed out, and a counter rebuilt from disk must not hand it out
 * again.  Reads map pages from the end, skipping the runs of virtual map
 * pages the directory has no page for.
 */
int64
spindle_slotmap_last_used(Relation facade, int64 first, int64 n)
{
	int64		last = first + n - 1;

	while (last >= first)
	{
		uint32		vp = MAP_VP(last);
		int64		page_first = (int64) vp * MAP_ENTRIES_PER_PAGE;
		uint32		unmapped_from = 0;
		Buffer		buf;
		Page		page;
		int			i;

		CHECK_FOR_INTERRUPTS();
		if (spindle_mapdir_lookup(facade, vp, &unmapped_from) ==
			InvalidBlockNumber)
		{
			/* no page for this vp nor those down to unmapped_from */
			last = (int64) unmapped_from * MAP_ENTRIES_PER_PAGE - 1;
			continue;
		}
		buf = map_buffer(facade, last, BUFFER_LOCK_SHARE, false);
		if (!BufferIsValid(buf))
		{
			last = page_first - 1;	/* freed since: not under our lock */
			continue;
		}
		page = BufferGetPage(buf);
		for (i = Min(MAP_INDEX(last), map_used(page) - 1);
			 i >= 0 && page_first + i >= first; i--)
		{
			if (ItemPointerIsValid(&MapEntries(page)[i]))
			{
				UnlockReleaseBuffer(buf);
				return page_first + i - first;
			}
		}
		UnlockReleaseBuffer(buf);
		last = page_first - 1;
	}
	return -1;
}

/*
 * Give back the map pages that hold no entry, wherever they lie in the
 * facade's main fork (spindle_mapdir_compact: under a conditional
 * AccessExclusiveLock, then the fork's free tail truncated): after a large
 * backlog has drained and its ranges are retired (their entries zeroed,
 * spindle_slotmap_clear), the fork would otherwise keep the size of the
 * largest backlog the table ever had.  Returns the number of pages given
 * back.  look_all: ranges were retired since the last call (else only an
 * idle last block is looked for).  The caller holds at least
 * AccessShareLock on the facade and no pin on its pages, in a transaction
 * that may take an xid.
 */
BlockNumber
spindle_slotmap_truncate(Relation facade, bool look_all)
{
	return spindle_mapdir_compact(facade, look_all);
}

/*
 * Copy the main fork (metapage and map) of one facade into another
 * facade's new storage: VACUUM FULL and CLUSTER give the facade new storage
 * but keep its spindles, so every TID must keep its meaning.  Every page
 * goes to the same block number (the directory names blocks); free pages
 * are not copied, a hole reads as free.  The caller holds
 * AccessExclusiveLock on both.
 */
void
spindle_slotmap_copy(Relation from, Relation to)
{
	BlockNumber nblocks = fork_nblocks(from);
	BlockNumber blk;

	for (blk = 0; blk < nblocks; blk++)
	{
		Buffer		src = ReadBuffer(from, blk);
		Buffer		dst;
		GenericXLogState *state;

		CHECK_FOR_INTERRUPTS();
		LockBuffer(src, BUFFER_LOCK_SHARE);
		if (blk > 0 && spindle_mapdir_block_free(BufferGetPage(src)))
		{
			UnlockReleaseBuffer(src);
			continue;
		}
		if (blk >= fork_nblocks(to))
			map_extend_to(to, blk);
		dst = ReadBuffer(to, blk);
		LockBuffer(dst, BUFFER_LOCK_EXCLUSIVE);
		state = GenericXLogStart(to);
		memcpy(GenericXLogRegisterBuffer(state, dst, GENERIC_XLOG_FULL_IMAGE),
			   BufferGetPage(src), BLCKSZ);
		GenericXLogFinish(state);
		UnlockReleaseBuffer(dst);
		UnlockReleaseBuffer(src);
	}
}

/* ----------------------------------------------------------------
 * Pending ranges (see the header comment)
 * ----------------------------------------------------------------
 */

/* Copy the pending ranges into out[] (SPINDLE_MAX_PENDING); returns how many. */
int
spindle_pending_read(Relation facade, SpindlePending *out)
{
	Buffer		buf = read_meta(facade, BUFFER_LOCK_SHARE);
	SpindleMetaPageData *meta = MetaGet(BufferGetPage(buf));
	int			n = Min(meta->npending, SPINDLE_MAX_PENDING);

	memcpy(out, meta->pending, sizeof(SpindlePending) * n);
	UnlockReleaseBuffer(buf);
	return n;
}

/*
 * Might the creator of a pending range still commit?  (Ours, or running.)
 * An xid more than 2^31 behind the next one is long finished.
 */
bool
spindle_pending_in_progress(const SpindlePending *p)
{
	FullTransactionId next = ReadNextFullTransactionId();
	TransactionId xid = XidFromFullTransactionId(p->fxid);

	if (U64FromFullTransactionId(next) - U64FromFullTransactionId(p->fxid) >
		((uint64) 1 << 31))
		return false;
	if (TransactionIdIsCurrentTransactionId(xid))
		return true;
	return TransactionIdIsInProgress(xid);
}

/* Is p the next spindle, right after, of the last pending entry's creator? */
static bool
merges_with_last(SpindleMetaPageData *meta, const SpindlePending *p)
{
	SpindlePending *last;

	if (meta->npending == 0)
		return false;
	last = &meta->pending[meta->npending - 1];
	return FullTransactionIdEquals(last->fxid, p->fxid) &&
		last->vbase + last->vcount == p->vbase &&
		last->spindle_no + last->nspindles == p->spindle_no;
}

/*
 * Record a pending range.  The caller holds the table's creation lock, so
 * no other allocation runs at the same time.  The ranges of consecutive
 * spindles made by one (sub)transaction, which share their fate, are kept
 * as one entry, so a transaction may create any number of them.
 */
void
spindle_pending_add(Relation facade, const SpindlePending *p)
{
	Buffer		buf = read_meta(facade, BUFFER_LOCK_EXCLUSIVE);
	SpindleMetaPageData *meta = MetaGet(BufferGetPage(buf));
	GenericXLogState *state;

	if (meta->npending >= SPINDLE_MAX_PENDING && !merges_with_last(meta, p))
	{
		UnlockReleaseBuffer(buf);
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("spindle table \"%s\" has too many spindle creations awaiting cleanup",
						RelationGetRelationName(facade)),
				 errdetail("The TID ranges of %d spindles whose creation rolled back are still referenced by indexes.",
						   SPINDLE_MAX_PENDING),
				 errhint("Run VACUUM on the table or spindle.drop_spindles().")));
	}
	state = GenericXLogStart(facade);
	meta = MetaGet(GenericXLogRegisterBuffer(state, buf, 0));
	if (merges_with_last(meta, p))
	{
		/* the next spindle of the same (sub)transaction, right after */
		meta->pending[meta->npending - 1].vcount += p->vcount;
		meta->pending[meta->npending - 1].nspindles += p->nspindles;
	}
	else
		meta->pending[meta->npending++] = *p;
	GenericXLogFinish(state);
	UnlockReleaseBuffer(buf);
}

/*
 * The number of the next spindle of the facade: numbers increase per table
 * and are never handed out twice, even when the creation rolls back (the
 * counter is not transactional).  `floor` is one more than the highest
 * number the catalog knows (an unlogged table's metapage is reset by a
 * crash, its catalog is not).  The caller holds the creation lock.
 */
int64
spindle_next_spindle_no(Relation facade, int64 floor)
{
	Buffer		buf = read_meta(facade, BUFFER_LOCK_EXCLUSIVE);
	SpindleMetaPageData *meta = MetaGet(BufferGetPage(buf));
	GenericXLogState *state;
	int64		next = Max(Max(meta->next_spindle_no, floor), 1);
	int			i;

	for (i = 0; i < (int) meta->npending; i++)
		next = Max(next, meta->pending[i].spindle_no + meta->pending[i].nspindles);
	state = GenericXLogStart(facade);
	meta = MetaGet(GenericXLogRegisterBuffer(state, buf, 0));
	meta->next_spindle_no = next + 1;
	GenericXLogFinish(state);
	UnlockReleaseBuffer(buf);
	return next;
}

/*
 * The numbers the next spindle of the facade and its first event would
 * get, without taking them (TRUNCATE carries them over to the new storage:
 * numbers keep increasing).
 */
void
spindle_peek_numbers(Relation facade, SpindleNumbers *next)
{
	Buffer		buf = read_meta(facade, BUFFER_LOCK_SHARE);
	SpindleMetaPageData *meta = MetaGet(BufferGetPage(buf));
	int			i;

	next->spindle_no = Max(meta->next_spindle_no, 1);
	next->event_no = Max(meta->next_event_no, 1);
	for (i = 0; i < (int) meta->npending; i++)
		next->spindle_no = Max(next->spindle_no,
							   meta->pending[i].spindle_no +
							   meta->pending[i].nspindles);
	UnlockReleaseBuffer(buf);
}

/* The number the next spindle of the facade would get, without taking it. */
int64
spindle_peek_spindle_no(Relation facade)
{
	SpindleNumbers next;

	spindle_peek_numbers(facade, &next);
	return next.spindle_no;
}

/*
 * Take the event numbers of a new spindle of `count` slots: the first is
 * returned, at least floor, and no number is ever handed out twice for the
 * table, even when the creation rolls back or the table is truncated (the
 * counter is not transactional and TRUNCATE carries it over).  A queue's
 * msg_ids are these numbers, so its events are numbered 1, 2, 3, ...  The
 * caller holds the creation lock.
 */
int64
spindle_take_event_nos(Relation facade, int64 floor, int64 count)
{
	Buffer		buf = read_meta(facade, BUFFER_LOCK_EXCLUSIVE);
	SpindleMetaPageData *meta = MetaGet(BufferGetPage(buf));
	GenericXLogState *state;
	int64		first = Max(Max(meta->next_event_no, floor), 1);

	Assert(count > 0);
	if (first > PG_INT64_MAX - count)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("spindle table \"%s\" has numbered all the events it can",
						RelationGetRelationName(facade))));
	state = GenericXLogStart(facade);
	meta = MetaGet(GenericXLogRegisterBuffer(state, buf, 0));
	meta->next_event_no = first + count;
	GenericXLogFinish(state);
	UnlockReleaseBuffer(buf);
	return first;
}

/* Forget the pending ranges of the given spindles. */
void
spindle_pending_remove(Relation facade, const int64 *spindle_nos, int n)
{
	Buffer		buf;
	SpindleMetaPageData *meta;
	GenericXLogState *state;
	int			i,
				j,
				kept = 0;

	if (n == 0)
		return;
	buf = read_meta(facade, BUFFER_LOCK_EXCLUSIVE);
	state = GenericXLogStart(facade);
	meta = MetaGet(GenericXLogRegisterBuffer(state, buf, 0));
	for (i = 0; i < (int) meta->npending; i++)
	{
		bool		drop = false;

		for (j = 0; j < n && !drop; j++)
			drop = meta->pending[i].spindle_no == spindle_nos[j];
		if (!drop)
			meta->pending[kept++] = meta->pending[i];
	}
	if (kept == (int) meta->npending)
		GenericXLogAbort(state);
	else
	{
		memset(&meta->pending[kept], 0,
			   sizeof(SpindlePending) * (meta->npending - kept));
		meta->npending = kept;
		GenericXLogFinish(state);
	}
	UnlockReleaseBuffer(buf);
}
