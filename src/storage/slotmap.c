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
 * fork is a metapage; blocks 1.. hold one ItemPointerData per virtual slot:
 * the physical TID of its event in its spindle, a tombstone, or zeroes.
 * A tombstone (spindle_is_tombstone) marks a slot whose reservation never
 * placed its event (tombstones.c): used, but no event.  An entry is
 * written after heap has placed the tuple and before the inserting
 * statement can insert index entries, so an index never holds a TID whose
 * entry is missing.  Entries of a range are zeroed only after every index
 * entry pointing into the range has been removed and before the range can
 * be given to another spindle (maintenance.c), so a TID never comes to mean
 * a different event while any index still holds it.  pd_lower of a map
 * page covers every non-zero entry; entries past it are zero.  An all-zero
 * page is an empty map page, so the fork is extended straight to the map
 * page a write needs (a hole in the file, read as zeroes), never page by
 * page: the map of a range costs its own pages, wherever it lies, plus the
 * fork's apparent size up to it (allocation is lowest first, so the holes
 * stay small; spindle.test_vslot_base makes big ones on purpose).  A map
 * page past the end of the fork reads as all zeroes too, so the empty
 * pages at the end of the fork are given back after a backlog drains
 * (spindle_slotmap_truncate, under a conditional AccessExclusiveLock).
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
 * the spindle_slotmap_pin/put_entry helpers here), others (and
 * tombstones) with XLOG_SPINDLE_MAP_SET (the map page, the first entry's
 * index and the new entries, 56 bytes for one event), written only where
 * RelationNeedsWAL says so (not for unlogged tables, nor under wal_level
 * = minimal for a table created in the same transaction, which is synced
 * at commit).
 * Shrinking the fork is XLOG_SMGR_TRUNCATE.  Everything else here
 * (new map pages, clearing, the metapage, copies) is rare and uses generic
 * WAL: it computes a delta of the whole page, which cost a quarter of an
 * enqueue's time when every set went that way.  Locks: map pages and the
 * metapage are changed under an exclusive buffer lock and read under a
 * share lock; extending the fork takes the relation extension lock;
 * shrinking it takes AccessExclusiveLock on the facade, without waiting.
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
#define SPINDLE_META_VERSION	4	/* 4: 64-bit pending ranges, event numbers */

typedef struct SpindleMetaPageData
{
	uint32		magic;
	uint32		version;
	uint32		npending;
	uint32		unused;
	int64		next_spindle_no;	/* never handed out twice, even on abort */
	int64		next_event_no;	/* likewise: the next range of event numbers */
	SpindlePending pending[SPINDLE_MAX_PENDING];
} SpindleMetaPageData;

#define MetaGet(page) ((SpindleMetaPageData *) PageGetContents(page))

#define MAP_CONTENTS_OFFSET		MAXALIGN(SizeOfPageHeaderData)
#define MAP_ENTRIES_PER_PAGE \
	((BLCKSZ - MAP_CONTENTS_OFFSET) / sizeof(ItemPointerData))
#define MAP_BLOCK(vslot)		((BlockNumber) (1 + (vslot) / MAP_ENTRIES_PER_PAGE))
#define MAP_INDEX(vslot)		((int) ((vslot) % MAP_ENTRIES_PER_PAGE))
#define MapEntries(page)		((ItemPointerData *) ((char *) (page) + MAP_CONTENTS_OFFSET))

StaticAssertDecl(MAXALIGN(SizeOfPageHeaderData) + sizeof(SpindleMetaPageData) <= BLCKSZ,
				 "metapage must fit in one page");
StaticAssertDecl(1 + ((SPINDLE_VSLOTS - 1) / MAP_ENTRIES_PER_PAGE) < MaxBlockNumber,
				 "slot map must fit in a fork");

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
 * Does map block blk exist?  The size last seen is kept in the SMgrRelation
 * (smgr_cached_nblocks, which smgrnblocks, smgrextend and smgrtruncate keep
 * up to date in this backend), and the file is asked only for blocks past
 * it: a map lookup costs no system call.  The fork also shrinks
 * (spindle_slotmap_truncate): smgrtruncate sends a shared invalidation
 * that closes every other backend's SMgrRelation of the facade, so the
 * size they cached goes with it, and they process it when they lock the
 * facade, which they cannot do before the truncation is over (it holds
 * AccessExclusiveLock).
 */
static bool
map_block_exists(Relation facade, BlockNumber blk)
{
	SMgrRelation srel = RelationGetSmgr(facade);
	BlockNumber known = srel->smgr_cached_nblocks[MAIN_FORKNUM];

	if (known != InvalidBlockNumber && blk < known)
		return true;
	return blk < fork_nblocks(facade);
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
static inline int
map_used(Page page)
{
	if (PageIsNew(page))
		return 0;
	return (((PageHeader) page)->pd_lower - MAP_CONTENTS_OFFSET) /
		sizeof(ItemPointerData);
}

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
static Buffer
read_meta(Relation facade, int mode)
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

/*
 * Make map block blk exist: extend the fork straight to it, leaving a hole
 * (zero pages, which are empty map pages) in between.  Takes the relation
 * extension lock.
 *
 * The new page stays all zero: map_put initialises it under the buffer
 * lock of its first writer, so no one can wipe entries another backend
 * wrote (a writer that sees the block, map_block_exists, takes no
 * extension lock).  Where the facade needs WAL, the extension is logged
 * first, as a full image of that zero page: replay (crash recovery, a
 * standby) extends the fork the same way -- PostgreSQL's redo writes the
 * pages up to it, so there the hole costs real zero pages -- and no
 * later record of the page can be replayed before it and wiped by it.
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

/*
 * The buffer of map block blk, pinned but not locked; InvalidBuffer if the
 * block does not exist and extend is false.  With extend, the fork is
 * first extended to blk (map_extend_to).
 */
static Buffer
map_pin(Relation facade, BlockNumber blk, bool extend)
{
	if (!map_block_exists(facade, blk))
	{
		if (!extend)
			return InvalidBuffer;
		map_extend_to(facade, blk);
	}
	return ReadBuffer(facade, blk);
}

/* map_pin, then the buffer locked in the given mode. */
static Buffer
map_buffer(Relation facade, BlockNumber blk, int mode, bool extend)
{
	Buffer		buf = map_pin(facade, blk, extend);

	if (BufferIsValid(buf))
		LockBuffer(buf, mode);
	return buf;
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
	buf = map_buffer(facade, MAP_BLOCK(vslot), BUFFER_LOCK_SHARE, false);
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
		Buffer		buf = map_buffer(facade, MAP_BLOCK(v), BUFFER_LOCK_SHARE,
									 false);
		int			i;

		if (!BufferIsValid(buf))
		{
			for (i = done; i < n; i++)
				ItemPointerSetInvalid(&ptids[i]);
			return;
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
	if (PageIsNew(page))
		PageInit(page, BLCKSZ, 0);
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
		Buffer		buf = map_buffer(facade, MAP_BLOCK(v),
									 BUFFER_LOCK_EXCLUSIVE, true);

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
		Buffer		buf = map_buffer(facade, MAP_BLOCK(v),
									 BUFFER_LOCK_EXCLUSIVE, true);
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
 * record as the heap insert: the map page of vslot, pinned (extended if
 * needed) but not locked; the caller locks it exclusively after its heap
 * page (heap page, then map page: nobody locks them in the other order).
 */
Buffer
spindle_slotmap_pin(Relation facade, int64 vslot)
{
	Assert(vslot >= 0 && vslot < SPINDLE_VSLOTS);
	return map_pin(facade, MAP_BLOCK(vslot), true);
}

/* The map block that holds vslot's entry. */
BlockNumber
spindle_slotmap_block(int64 vslot)
{
	return MAP_BLOCK(vslot);
}

/* Put vslot's entry into its map page (exclusively locked, or in redo). */
void
spindle_slotmap_put_entry(Page page, int64 vslot, ItemPointer ptid)
{
	map_put(page, MAP_INDEX(vslot), 1, ptid);
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
		Buffer		buf = map_buffer(facade, MAP_BLOCK(v),
									 BUFFER_LOCK_EXCLUSIVE, false);
		Page		page;
		int			used;

		if (!BufferIsValid(buf))
			return;				/* nothing was ever written further on */
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
 * again.  Reads map pages from the end.
 */
int64
spindle_slotmap_last_used(Relation facade, int64 first, int64 n)
{
	BlockNumber nblocks = fork_nblocks(facade);
	int64		last = first + n - 1;

	while (last >= first)
	{
		BlockNumber blk = MAP_BLOCK(last);
		int64		page_first = (int64) (blk - 1) * MAP_ENTRIES_PER_PAGE;
		Buffer		buf;
		Page		page;
		int			i;

		CHECK_FOR_INTERRUPTS();
		if (blk >= nblocks)
		{
			/* not there: nothing from page_first on was ever written */
			last = page_first - 1;
			continue;
		}
		buf = map_buffer(facade, blk, BUFFER_LOCK_SHARE, false);
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

/* Does map block blk hold no entry?  (Share-locks it for the look.) */
static bool
map_page_empty(Relation facade, BlockNumber blk)
{
	Buffer		buf = ReadBuffer(facade, blk);
	bool		empty;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	empty = map_used(BufferGetPage(buf)) == 0;
	UnlockReleaseBuffer(buf);
	return empty;
}

/* Map pages checked between two looks for lock waiters while trimming. */
#define TRIM_CHECK_EVERY	32

/*
 * Give back the map pages at the end of the facade's main fork that hold
 * no entry: after a large backlog has drained and its ranges are retired
 * (their entries zeroed, spindle_slotmap_clear), the fork would otherwise
 * keep the size of the largest backlog the table ever had.  Returns the
 * number of pages given back.
 *
 * As VACUUM truncates a heap: the fork is truncated under
 * AccessExclusiveLock on the facade, taken only if it can be at once (we
 * never wait for a producer or reader), the check given up as soon as
 * anybody queues behind it, and released as soon as the truncation is
 * done (who comes meanwhile waits milliseconds, as behind VACUUM's).  RelationTruncate WAL-logs it
 * (XLOG_SMGR_TRUNCATE, replayed by every standby and by crash recovery)
 * and drops the pages' buffers.  Under the lock no writer can set an
 * entry (writers hold RowExclusiveLock), so a page seen empty stays
 * empty; a page past the end reads as empty, and the next writer of a
 * slot it covered extends the fork again (map_buffer).  Only pages with
 * no entry go, so what any slot resolves to is unchanged, whatever
 * spindle owns it.  Other backends forget the size they cached when they
 * next lock the facade (see map_block_exists); a standby's startup
 * process holds the same lock (logged with the transaction's xid) until
 * the transaction's commit or abort is replayed.
 *
 * The caller holds at least AccessShareLock on the facade and no pin on
 * its pages, in a transaction that may take an xid.  Block 0 (the
 * metapage) always stays.
 */
BlockNumber
spindle_slotmap_truncate(Relation facade)
{
	BlockNumber nblocks = fork_nblocks(facade);
	BlockNumber keep;

	/* cheap look first, without the lock: is the last map page empty? */
	if (nblocks <= 1 || !map_page_empty(facade, nblocks - 1))
		return 0;
	if (!ConditionalLockRelation(facade, AccessExclusiveLock))
		return 0;

	nblocks = fork_nblocks(facade);
	keep = nblocks;
	while (keep > 1)
	{
		CHECK_FOR_INTERRUPTS();
		if ((nblocks - keep) % TRIM_CHECK_EVERY == TRIM_CHECK_EVERY - 1 &&
			LockHasWaitersRelation(facade, AccessExclusiveLock))
			break;				/* somebody waits: give back what we saw */
		if (!map_page_empty(facade, keep - 1))
			break;
		keep--;
	}
	if (keep < nblocks)
	{
		RelationTruncate(facade, keep);
		ereport(DEBUG1,
				(errmsg_internal("spindle table \"%s\": slot map truncated from %u to %u pages",
								 RelationGetRelationName(facade),
								 nblocks, keep)));
	}
	UnlockRelation(facade, AccessExclusiveLock);
	return nblocks - keep;
}

/*
 * Copy the main fork (metapage and map) of one facade into another
 * facade's new storage: VACUUM FULL and CLUSTER give the facade new storage
 * but keep its spindles, so every TID must keep its meaning.  All-zero map
 * pages (empty ones, holes) are not copied: a missing block is an empty
 * page.  The caller holds AccessExclusiveLock on both.
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
		if (blk > 0 && map_used(BufferGetPage(src)) == 0)
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
