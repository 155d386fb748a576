/*-------------------------------------------------------------------------
 *
 * spindle_storage.h
 *	  The storage layer's interface: a spindle relation and what lives in
 *	  it (the segment AM, the event layout, slot counters, the slot map,
 *	  purge counters, range purges and the resource manager, touched and
 *	  settled spindles, SPI on spindle's catalog tables).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_STORAGE_H
#define SPINDLE_STORAGE_H

#include "access/htup.h"
#include "access/htup_details.h"
#include "access/rmgr.h"
#include "access/tableam.h"
#include "access/transam.h"
#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "executor/tuptable.h"
#include "lib/stringinfo.h"
#include "storage/bufmgr.h"
#include "storage/itemptr.h"
#include "storage/off.h"
#include "storage/smgr.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/rel.h"

/* ---- spindles: what a spindle is, and a table's list of them ---- */

/* Schemas: the extension's, and the one that holds the spindles. */
#define SPINDLE_STORAGE_SCHEMA "pg_spindle"
#define SPINDLE_SCHEMA "spindle"

/* One spindle as the backend-local directory cache knows it. */
typedef struct SpindleEntry
{
	int64		spindle_no;		/* increasing per table */
	Oid			segment;		/* relation holding the events */
	int64		capacity;		/* as configured; 0 = unbounded */
	int64		vbase;			/* its virtual slots (slotmap.c) ... */
	int64		vcount;			/* ... and how many */
	int64		first_no;		/* its events are numbered first_no + k */
	TimestampTz created_at;
	TimestampTz filled_at;		/* 0 if not recorded */
	int32		generation;		/* 0: an event spindle; 1.. an annex */
} SpindleEntry;

/*
 * Annexes (design.md, "Compaction", section 2): spindles of kind 'annex',
 * of generation 1 to SPINDLE_ANNEX_GENERATIONS, that hold copies of events
 * that stay.  They have no event numbers (first_no is 0 in the entry,
 * NULL in the catalog): nothing numbered by first_no + k applies to them,
 * and they are never in SpindleDirectory.spindles, which fill in order.
 */
#define SPINDLE_ANNEX_GENERATIONS 3

static inline bool
spindle_is_annex(const SpindleEntry *sp)
{
	return sp->generation > 0;
}

/* A spindle's relation and its place in the directory (directory.c). */
typedef struct SpindleSegRef
{
	Oid			segment;
	int			index;			/* into SpindleDirectory.spindles */
} SpindleSegRef;

/* Spindles whose catalog rows a directory re-reads before its next use */
#define SPINDLE_DIR_MAX_RECHECK 256

/*
 * The directory of one facade, cached per backend (directory.c).  Callers
 * pin it (spindle_directory_acquire) and release it; a pinned directory
 * stays valid, though maybe stale, whatever invalidations arrive.
 */
typedef struct SpindleDirectory
{
	Oid			facade;
	MemoryContext cxt;			/* holds this struct and its arrays */
	int			pins;
	int			nspindles;
	SpindleEntry *spindles;		/* ordered by spindle_no; no annex */
	int			nannexes;
	SpindleEntry *annexes;		/* the annexes, ordered by spindle_no */
	int		   *byvbase;		/* indexes into spindles, ordered by vbase */
	int64		events_per_spindle; /* table option, for new spindles */
	int			open_hint;		/* no spindle before this one has room */
	bool		hint_checked;	/* open_hint verified against the counters */
	double		est_events;		/* planner's estimate (facade_am.c) ... */
	TimestampTz est_at;			/* ... and when it was computed, or 0 */
	int			est_full;		/* leading spindles known full ... */
	double		est_full_events;	/* ... and their events (facade_am.c) */
	bool		partial;		/* only the newest spindles: for inserts */

	/* the rest is private to directory.c: how it is kept up to date */
	int			nalloc;			/* room in spindles[] */
	int			annex_alloc;	/* room in annexes[] */
	SpindleSegRef *byseg;		/* one per spindle, ordered by segment */
	int64		max_spindle_no; /* highest number among the rows read */
	int64		event_end;		/* one past the highest event number of a
								 * row read: 0 if none */
	TransactionId class_xmin;	/* of the facade's pg_class row, when read */
	bool		stale;			/* an invalidation arrived since */
	bool		needs_full;		/* ... that only a full read answers */
	bool		has_own;		/* may hold this transaction's own rows */
	bool		parallel_read;	/* read with a parallel query's snapshot */
	bool		updating;		/* being brought up to date right now */
	int			nrecheck;
	int64		recheck[SPINDLE_DIR_MAX_RECHECK];	/* spindle numbers */
} SpindleDirectory;

/*
 * What readers walk (scans, index builds, ANALYZE, drops, verify): the
 * spindles, then the annexes, as one sequence of spindle_dir_nall(dir)
 * entries.  Code that relies on spindles filling in order uses
 * dir->spindles alone.
 */
static inline int
spindle_dir_nall(const SpindleDirectory *dir)
{
	return dir->nspindles + dir->nannexes;
}

static inline SpindleEntry *
spindle_dir_entry(SpindleDirectory *dir, int i)
{
	return i < dir->nspindles ? &dir->spindles[i] :
		&dir->annexes[i - dir->nspindles];
}

/*
 * The events a spindle may hold: its capacity, within its range of TIDs
 * (ALTER TABLE SET (events_per_spindle) may lower or raise the capacity of
 * a spindle that is still empty, never its range).
 */
static inline int64
spindle_effective_capacity(const SpindleEntry *sp)
{
	return sp->capacity > 0 ? Min(sp->capacity, sp->vcount) : sp->vcount;
}

/* A spindle's number and range of virtual slots. */
typedef struct SpindleRange
{
	int64		spindle_no;
	int64		vbase;
	int64		vcount;
} SpindleRange;

/* ---- segment_am.c: the spindle_segment access method ---- */

extern const TableAmRoutine *spindle_segment_routine(void);
extern void spindle_segment_ensure_page(Relation seg);
extern double spindle_segment_index_build(Relation seg, Relation index_rel,
										  struct IndexInfo *index_info,
										  bool anyvisible,
										  BlockNumber start_blockno,
										  BlockNumber numblocks,
										  IndexBuildCallback callback,
										  void *callback_state);
extern void spindle_segment_vacuum(Relation seg, struct VacuumParams *params,
								   BufferAccessStrategy bstrategy);

/* ---- layout.c: the hidden columns of every event ---- */

/* Number of hidden columns at the end of every spindle table. */
#define SPINDLE_HIDDEN_COLUMNS 2

extern void spindle_add_hidden_columns(Oid relid);
extern void spindle_check_layout(Relation facade);
extern HeapTuple spindle_form_event(Relation facade, TupleTableSlot *slot,
									int32 k, uint32 appended);
extern uint32 spindle_time_now(void);
extern uint32 spindle_time_floor(TimestampTz ts);

/*
 * The hidden columns are the last two attributes, int4 each and never
 * null, so they are the last 8 bytes of the tuple's data: k (the event's
 * number within its spindle) then its append time (seconds since the
 * PostgreSQL epoch, rounded up).
 */
static inline int32
spindle_event_k(HeapTupleHeader tup, uint32 len)
{
	int32		k;

	memcpy(&k, (char *) tup + len - 2 * sizeof(int32), sizeof(int32));
	return k;
}

static inline uint32
spindle_event_time(HeapTupleHeader tup, uint32 len)
{
	uint32		t;

	memcpy(&t, (char *) tup + len - sizeof(uint32), sizeof(uint32));
	return t;
}

/* ---- slotmap.c: virtual slots and the slot map ---- */

/*
 * The virtual slot space of one spindle table.  Slot v is the TID
 * (v / SPINDLE_SLOTS_PER_VBLOCK, v % SPINDLE_SLOTS_PER_VBLOCK + 1): every
 * offset within what a TID bitmap accepts, every block number a valid one
 * (0 .. MaxBlockNumber; InvalidBlockNumber, which also marks a tuple moved
 * to another partition, is never used).  Core never reads the facade's
 * files at those block numbers (slotmap.c says why, and how).
 */
#define SPINDLE_SLOTS_PER_VBLOCK	MaxHeapTuplesPerPage
#define SPINDLE_VBLOCKS				(((int64) MaxBlockNumber) + 1)
#define SPINDLE_VSLOTS				(SPINDLE_VBLOCKS * SPINDLE_SLOTS_PER_VBLOCK)

/*
 * The most events one spindle holds (events_per_spindle, and the range a
 * spindle of capacity 0 takes): its k must fit in the int4 hidden column.
 * The value of the old whole-table limit (131072 x 291), so that options
 * keep their range.
 */
#define SPINDLE_MAX_CAPACITY		((int64) 131072 * SPINDLE_SLOTS_PER_VBLOCK)

/* A range of virtual slots allocated to a spindle not yet known committed. */
typedef struct SpindlePending
{
	int64		spindle_no;		/* the first of nspindles consecutive ones */
	FullTransactionId fxid;		/* (sub)transaction that created them */
	int64		vbase;			/* their ranges, one after the other */
	int64		vcount;
	int32		nspindles;
} SpindlePending;

#define SPINDLE_MAX_PENDING 200

static inline void
spindle_vslot_to_tid(int64 vslot, ItemPointer tid)
{
	ItemPointerSet(tid, (BlockNumber) (vslot / SPINDLE_SLOTS_PER_VBLOCK),
				   (OffsetNumber) (vslot % SPINDLE_SLOTS_PER_VBLOCK + 1));
}

/* The virtual slot of a TID, or -1 if it cannot be one. */
static inline int64
spindle_tid_to_vslot(ItemPointer tid)
{
	BlockNumber blk;
	OffsetNumber off;

	if (!ItemPointerIsValid(tid))
		return -1;
	blk = ItemPointerGetBlockNumberNoCheck(tid);
	off = ItemPointerGetOffsetNumberNoCheck(tid);
	if (blk >= SPINDLE_VBLOCKS || off < 1 || off > SPINDLE_SLOTS_PER_VBLOCK)
		return -1;
	return (int64) blk * SPINDLE_SLOTS_PER_VBLOCK + (off - 1);
}

/* The numbers a facade's next spindle and event get (slotmap.c). */
typedef struct SpindleNumbers
{
	int64		spindle_no;
	int64		event_no;
} SpindleNumbers;

/*
 * A tombstone: the slot map entry of a slot whose reservation never placed
 * its event (tombstones.c).  It counts as a used slot (a count from disk
 * sees it) and as no event (spindle_slotmap_get says "none").  No real TID
 * has this offset (MaxHeapTuplesPerPage is far below it) nor this block.
 */
#define SPINDLE_TOMBSTONE_POSID		((OffsetNumber) 0xFFFF)

static inline void
spindle_set_tombstone(ItemPointer p)
{
	ItemPointerSet(p, InvalidBlockNumber, SPINDLE_TOMBSTONE_POSID);
}

static inline bool
spindle_is_tombstone(ItemPointer p)
{
	return ItemPointerGetOffsetNumberNoCheck(p) == SPINDLE_TOMBSTONE_POSID &&
		ItemPointerGetBlockNumberNoCheck(p) == InvalidBlockNumber;
}

/*
 * Slot map pages (slotmap.c) and the directory that places them (mapdir.c):
 * every page of the facade's main fork but the metapage ends with a tag.
 */
typedef struct SpindleMapTag
{
	uint32		key;			/* map page: its vp; directory: first vp */
	uint16		kind;			/* SPINDLE_MAP_* */
	uint16		level;			/* 0 for a map page */
} SpindleMapTag;

#define SPINDLE_MAP_FREE	0
#define SPINDLE_MAP_PAGE	1
#define SPINDLE_MAP_DIR		2

#define SPINDLE_MAP_CONTENTS_OFFSET	MAXALIGN(SizeOfPageHeaderData)
#define SPINDLE_MAP_ENTRIES_PER_PAGE \
	((BLCKSZ - SPINDLE_MAP_CONTENTS_OFFSET - MAXALIGN(sizeof(SpindleMapTag))) \
	 / sizeof(ItemPointerData))

/* In the metapage: the directory's root block (0: none) and height. */
typedef struct SpindleMapRoot
{
	uint32		root;
	uint32		height;
} SpindleMapRoot;

extern Buffer spindle_meta_read(Relation facade, int mode);
extern SpindleMapRoot *spindle_meta_map_root(Page metapage);
extern int	spindle_map_used(Page page);

/* local_cache.c: bounded per-backend hash tables */
extern HTAB *spindle_local_cache(HTAB **cache, const char *name,
								 Size keysize, Size entrysize, long max);

extern void spindle_mapdir_init_page(Page page, uint16 kind, uint16 level,
									 uint32 key);
extern BlockNumber spindle_mapdir_lookup(Relation facade, uint32 vp,
										 uint32 *unmapped_from);
extern Buffer spindle_mapdir_buffer(Relation facade, uint32 vp, int mode,
									bool create);
extern BlockNumber spindle_mapdir_compact(Relation facade, bool look_all);
extern bool spindle_mapdir_block_free(Page page);
typedef void (*spindle_mapdir_report) (void *arg, const char *msg);
extern void spindle_mapdir_check(Relation facade,
								 spindle_mapdir_report report, void *arg);
extern void spindle_mapdir_test_orphan(Relation facade, int64 vslot);
extern void spindle_mapdir_define_gucs(void);

extern void spindle_slotmap_init_fork(SMgrRelation srel, ForkNumber fork,
									  bool wal, const SpindleNumbers *next);
extern bool spindle_slotmap_get(Relation facade, int64 vslot, ItemPointer ptid);
extern void spindle_slotmap_get_range(Relation facade, int64 first, int n,
									  ItemPointer ptids);
extern void spindle_slotmap_set(Relation facade, int64 first, int n,
								ItemPointer ptids);
extern void spindle_slotmap_clear(Relation facade, int64 first, int64 n);
extern int64 spindle_slotmap_bury(Relation facade, int64 first, int64 n);

/* the resource manager's part (rangepurge.c dispatches) */
struct XLogReaderState;
extern void spindle_slotmap_redo_set(struct XLogReaderState *record);
extern void spindle_slotmap_desc_set(StringInfo buf,
									 struct XLogReaderState *record);
extern int64 spindle_slotmap_last_used(Relation facade, int64 first, int64 n);
extern void spindle_slotmap_copy(Relation from, Relation to);
extern void spindle_slotmap_forget_size(Relation facade);
extern BlockNumber spindle_slotmap_truncate(Relation facade, bool look_all);
extern Buffer spindle_slotmap_pin(Relation facade, int64 vslot);
extern int	spindle_slotmap_index(int64 vslot);
extern void spindle_slotmap_put_index(Page page, int idx, ItemPointer ptid);

extern int	spindle_pending_read(Relation facade, SpindlePending *out);
extern bool spindle_pending_in_progress(const SpindlePending *p);
extern int64 spindle_next_spindle_no(Relation facade, int64 floor);
extern int64 spindle_peek_spindle_no(Relation facade);
extern void spindle_peek_numbers(Relation facade, SpindleNumbers *next);
extern int64 spindle_take_event_nos(Relation facade, int64 floor,
									int64 count);

/*
 * How far past the counter of the storage (or table) it replaces a
 * TRUNCATE's new storage (or a dropped queue name's next table) numbers
 * its events: should the TRUNCATE or drop roll back, the old one goes on
 * below every number the new one gave, unless it gives this many first.
 */
#define SPINDLE_EVENT_NOS_RESERVED	(((int64) 1) << 32)
extern void spindle_pending_add(Relation facade, const SpindlePending *p);
extern void spindle_pending_remove(Relation facade, const int64 *spindle_nos,
								   int n);

/* ---- slots.c: shared-memory slot counters ---- */

extern int	spindle_max_spindles;
extern void spindle_slots_shmem_request(void);
extern void spindle_slots_shmem_startup(void);
extern int	spindle_slots_take(Relation facade, SpindleDirectory *dir, int i,
							   int nwanted, int64 *first);
extern int	spindle_slots_take_at(Relation facade, SpindleDirectory *dir, int i,
								  int64 at, int nwanted, int64 *first);
extern bool spindle_slots_fill(Relation facade, SpindleDirectory *dir, int i,
							   Relation seg);
extern int64 spindle_slots_used(Relation facade, Relation segrel,
								SpindleEntry *sp, bool *is_full,
								TimestampTz *filled_at, Relation next_segrel);
extern void spindle_slots_placed(SpindleEntry *sp);
extern void spindle_slots_recorded(const SpindleEntry *sp);
extern bool spindle_slots_reserved(Relation segrel);
extern bool spindle_slots_full(Relation facade, SpindleDirectory *dir, int i,
							   TimestampTz *filled_at);
extern bool spindle_slots_inflight(Oid segment, int64 spindle_no);
extern bool spindle_slots_peek(Oid segment, int64 spindle_no, int64 *used);
extern int64 spindle_slots_full_below(Oid facade);
extern void spindle_slots_forget(Oid segment);
extern void spindle_slots_capacity_changed(Oid segment);
extern bool spindle_slots_view(Oid facade, const SpindleEntry *sp, int64 *used,
							   bool *is_full, TimestampTz *filled_at);
extern int64 spindle_slots_count_disk(Relation facade, Relation seg,
									  const SpindleEntry *sp,
									  Relation next_segrel, bool *is_full);
extern void spindle_slots_forget_database(Oid dboid);

/* a spindle whose counter has lost slots to bury (slots.c, tombstones.c) */
typedef struct SpindleLostSlots
{
	Oid			facade;
	Oid			segment;
	int64		spindle_no;
	int64		vbase;
} SpindleLostSlots;

extern int	spindle_slots_list_lost(SpindleLostSlots *out, int max,
									uint64 *seen);
extern bool spindle_slots_lost_range(const SpindleLostSlots *l, int64 *from,
									 int64 *to);
extern void spindle_slots_buried(const SpindleLostSlots *l, int64 to);

/* ---- tombstones.c: lost slots written into the slot map ---- */

extern int64 spindle_bury_lost_slots(const SpindleLostSlots *l);

/* ---- counters.c: per-spindle purge counters ---- */

extern int	spindle_max_counted_spindles;

/* What the views learn about one spindle from shared memory. */
typedef struct SpindleCountersInfo
{
	int64		appended;		/* slots handed out (-1: unknown) */
	bool		full;			/* known full */
	TimestampTz filled_at;		/* when it became full, if known, else 0 */
	int64		purged;			/* committed purges + aborted inserts */
	TransactionId latest_purger;	/* newest committed purger, if known */
	bool		stale;			/* a finished prepared transaction wrote */
	bool		inexact;		/* a transaction's work could not be added */
	bool		in_recovery;	/* built from disk during recovery */
	TimestampTz built_at;		/* 0 if made empty, not built */
	XLogRecPtr	built_lsn;		/* in recovery: WAL replayed when built */
} SpindleCountersInfo;

extern Size spindle_counters_shmem_size(void);
extern void spindle_counters_shmem_request(void);
extern void spindle_counters_shmem_startup(void);

extern void spindle_counters_inserted(Oid facade, Oid segment, int n);
extern void spindle_counters_copied(Oid segment, int n);
extern void spindle_counters_deleted(Oid segment, int n);
extern void spindle_counters_skipped(Oid segment, int64 n);
extern void spindle_counters_insert_killed(Oid segment);
extern void spindle_counters_created(Oid facade, const SpindleEntry *sp);
extern bool spindle_counters_get(Oid facade, const SpindleEntry *sp,
								 SpindleCountersInfo *info);
extern bool spindle_counters_build(Oid facade, const SpindleEntry *sp,
								   const SpindleEntry *next);
extern int64 spindle_counters_count_now(Oid facade, const SpindleEntry *sp);
extern int64 spindle_counters_table_inserts(Oid facade);
extern void spindle_counters_forget(Oid segment);
extern void spindle_counters_forget_database(Oid dboid);

/* ---- rangepurge.c: range purges and the resource manager ---- */

/*
 * The "spindle" custom resource manager (registered, redone and described
 * in rangepurge.c).  RM_EXPERIMENTAL_ID is for development; a released
 * version must reserve an ID (docs/design.md, "Range purges (WAL)").
 */
#define SPINDLE_RMGR_ID			RM_EXPERIMENTAL_ID

/* its record types (the high four bits of xl_info) */
#define XLOG_SPINDLE_PURGE		0x10	/* rangepurge.c */
#define XLOG_SPINDLE_MAP_SET	0x20	/* slotmap.c */
/* consumer_page.c, consumer_tree.c; redo in consumer_xlog.c (design sec. 4) */
#define XLOG_SPINDLE_STRAGGLE	0x30	/* run upserts and removals on a leaf */
#define XLOG_SPINDLE_SPLIT		0x40	/* left + new right, left flagged */
#define XLOG_SPINDLE_INSERT_UPPER 0x50	/* parent's downlink, flag cleared */
#define XLOG_SPINDLE_NEWROOT	0x60	/* new root (or new tree), tree meta */
#define XLOG_SPINDLE_FREE		0x70	/* a page onto the free list */
#define XLOG_SPINDLE_REUSE		0x80	/* a free page taken: conflict horizon */
/* eventinsert.c: one event and its map entry; _INIT as XLOG_HEAP_INIT_PAGE */
#define XLOG_SPINDLE_INSERT		0x90
#define XLOG_SPINDLE_INSERT_INIT 0xA0

/* ---- eventinsert.c: one event and its slot map entry, one record ---- */
extern bool spindle_insert_event(Relation facade, Relation seg, HeapTuple tup,
								 CommandId cid, int options,
								 struct BulkInsertStateData *bistate,
								 int64 vslot);
extern void spindle_insert_redo(struct XLogReaderState *record);
extern void spindle_insert_desc(StringInfo buf, struct XLogReaderState *record);

extern void spindle_rangepurge_register(void);	/* from _PG_init, only while process_shared_preload_libraries_in_progress */

/*
 * Purge the tuples at offsets[0..n) of the page in buf (a buffer of spindle relation seg, pinned and
 * EXCLUSIVE-locked by the caller) by the current transaction: as heap_delete would, one WAL record.
 * The caller has checked under that lock that each tuple is visible (inserted by a committed
 * transaction) and not deleted (xmax invalid, aborted, or lock-only); assert/elog(ERROR) otherwise
 * before the critical section. Calls GetCurrentTransactionId(). Does not touch TOAST (the spindle's
 * TOAST goes with the spindle when it is dropped).
 */
extern void spindle_purge_on_page(Relation seg, Buffer buf, const OffsetNumber *offsets, int n, CommandId cid);

/* ---- consumer_*.c: the consumer relation of a queue ---- */

/*
 * A queue's consumer relation pg_spindle.c<queue table oid> (access method
 * spindle_meta; docs/design.md, "Consumer state that scales with what
 * stays", sections 3 and 4).  Every page has a standard header, its items
 * between the header and pd_lower, pd_upper = pd_special, and a special
 * space saying what structure the page belongs to.
 */
#define SPINDLE_CREL_METAPAGE	0
#define SPINDLE_CREL_MAGIC		0x5350434D	/* "SPCM" */
#define SPINDLE_CREL_VERSION	1
#define SPINDLE_CPAGE_MAGIC		0xC0DE

/* page kinds (SpindleCpageOpaque.kind) */
#define SPINDLE_CPAGE_META		1	/* block 0 */
#define SPINDLE_CPAGE_FREE		2	/* on the free list */
#define SPINDLE_CPAGE_TREEMETA	3	/* a straggler tree's meta block */
#define SPINDLE_CPAGE_LEAF		4	/* a straggler tree's leaf */
#define SPINDLE_CPAGE_INNER		5	/* a straggler tree's inner page */

/* page flags */
#define SPINDLE_CPAGE_INCOMPLETE_SPLIT	0x0001	/* right half has no downlink */

/*
 * Special space of every page: its kind and subscription; for tree pages
 * the level, right-link and high key (Lehman and Yao: every key of the
 * page is below high_key; the rightmost page of a level has right =
 * InvalidBlockNumber and no high key); for a free page the next free page
 * (in right) and the full xid at which it was freed.
 */
typedef struct SpindleCpageOpaque
{
	FullTransactionId freed_xid;	/* when freed (FREE pages), else 0 */
	int64		high_key;		/* tree pages with a right sibling */
	BlockNumber right;			/* right sibling, or next free page */
	uint32		sub;			/* subscription number */
	uint16		kind;			/* SPINDLE_CPAGE_* */
	uint16		flags;
	uint16		level;			/* tree pages: 0 = leaf */
	uint16		magic;			/* SPINDLE_CPAGE_MAGIC */
} SpindleCpageOpaque;

#define SpindleCpageGetOpaque(page) \
	((SpindleCpageOpaque *) PageGetSpecialPointer(page))

/* trees the metapage can name (subscription numbers 0 .. this - 1) */
#define SPINDLE_CREL_MAX_TREES	64

/* Contents of the metapage, after its header. */
typedef struct SpindleCrelMeta
{
	uint32		magic;			/* SPINDLE_CREL_MAGIC */
	uint32		version;		/* SPINDLE_CREL_VERSION */
	BlockNumber free_head;		/* most recently freed page, or Invalid */
	uint32		nfree;			/* pages on the free list */
	int64		assigned_max;	/* counters: kept by TRUNCATE */
	int64		consumed_floor;
	BlockNumber trees[SPINDLE_CREL_MAX_TREES];	/* tree meta block per
												 * subscription, or Invalid */

	/*
	 * The meta block of a tree set aside beside tree i, whose pages are to
	 * be given back if the writer that set it is gone: one being built
	 * (spindle_tree_detached) until it is swapped in, then the old one
	 * until its pages are freed (spindle_tree_swap, spindle_tree_drop); or
	 * 0 (block 0 is this page).  A metapage written before this field lies
	 * past its pd_lower there, zeroes: read and set only through
	 * spindle_crel_meta_aside and spindle_crel_meta_set_aside.
	 */
	BlockNumber aside[SPINDLE_CREL_MAX_TREES];
} SpindleCrelMeta;

#define SpindleCrelGetMeta(page) \
	((SpindleCrelMeta *) PageGetContents(page))

/* The meta block of the tree set aside beside tree sub, or 0. */
static inline BlockNumber
spindle_crel_meta_aside(Page mpage, uint32 sub)
{
	SpindleCrelMeta *meta = SpindleCrelGetMeta(mpage);

	if (((PageHeader) mpage)->pd_lower <
		(char *) &meta->aside[SPINDLE_CREL_MAX_TREES] - (char *) mpage)
		return 0;				/* a metapage from before the field */
	return meta->aside[sub];
}

/*
 * Name blk (0: none) as the tree set aside beside tree sub, pd_lower moved
 * past the field first on a metapage from before it (its bytes there are
 * zeroes), so that full-page images keep it.
 */
static inline void
spindle_crel_meta_set_aside(Page mpage, uint32 sub, BlockNumber blk)
{
	SpindleCrelMeta *meta = SpindleCrelGetMeta(mpage);
	LocationIndex end = (LocationIndex) ((char *) (meta + 1) - (char *) mpage);

	if (((PageHeader) mpage)->pd_lower < end)
		((PageHeader) mpage)->pd_lower = end;
	meta->aside[sub] = blk;
}

/* Initialise page (BLCKSZ bytes) as an empty page of a kind. */
static inline void
spindle_crel_init_page(Page page, uint16 kind, uint32 sub, uint16 level)
{
	SpindleCpageOpaque *op;

	PageInit(page, BLCKSZ, sizeof(SpindleCpageOpaque));
	op = SpindleCpageGetOpaque(page);
	memset(op, 0, sizeof(SpindleCpageOpaque));
	op->kind = kind;
	op->sub = sub;
	op->level = level;
	op->right = InvalidBlockNumber;
	op->magic = SPINDLE_CPAGE_MAGIC;
}

/* Is page a consumer-relation page of this kind and subscription? */
static inline bool
spindle_crel_page_is(Page page, uint16 kind, uint32 sub)
{
	SpindleCpageOpaque *op;

	if (PageIsNew(page) ||
		PageGetSpecialSize(page) != MAXALIGN(sizeof(SpindleCpageOpaque)))
		return false;
	op = SpindleCpageGetOpaque(page);
	return op->magic == SPINDLE_CPAGE_MAGIC && op->kind == kind &&
		op->sub == sub;
}

/* Number of items of isz bytes between a page's header and pd_lower. */
static inline int
spindle_cpage_nitems(Page page, Size isz)
{
	return (int) ((((PageHeader) page)->pd_lower -
				   (PageGetContents(page) - (char *) page)) / isz);
}

static inline void
spindle_cpage_set_nitems(Page page, int n, Size isz)
{
	((PageHeader) page)->pd_lower =
		(PageGetContents(page) - (char *) page) + n * isz;
}

/*
 * A run of the straggler tree (a leaf item, 32 bytes): ids [first, first +
 * len) of one subscription in one state.  Runs of a tree never overlap.
 */
typedef struct SpindleRun
{
	int64		first;			/* the key */
	TimestampTz due;			/* DELAYED, LEASED, PENDING: when */
	uint32		len;			/* ids in the run, > 0 */
	int32		read_count;		/* deliveries, saturating */
	uint32		awaited;		/* PENDING: the xid; GROUPED: the group;
								 * DELAYED (queue_parked.c): microseconds
								 * its first event is due before due */
	uint16		kind;			/* SPINDLE_RUN_* */
	uint16		flags;
} SpindleRun;

#define SPINDLE_RUN_READY		1
#define SPINDLE_RUN_DELAYED		2
#define SPINDLE_RUN_LEASED		3
#define SPINDLE_RUN_PENDING		4
#define SPINDLE_RUN_GROUPED		5
#define SPINDLE_RUN_CONSUMED	6

/*
 * Trees of the consumer relation by number: 0 and 1 are queue_parked.c's
 * (parked runs, their due index), 2 the consume log (consume_log.c), 3
 * and 4 the relocation entries and the oldest copies (relocation.c).
 */
#define SPINDLE_TREE_CONSUME_LOG	2

/*
 * An entry of the consume log: (sub)transaction fxid consumed the ids
 * [first, first + len) in command cid (consume_log.c gives the mapping
 * onto a SpindleRun).
 */
typedef struct SpindleConsumed
{
	int64		first;
	int64		len;
	FullTransactionId fxid;
	CommandId	cid;
} SpindleConsumed;

/* consumer_rel.c: the access method, the metapage, creation, TRUNCATE */
extern const TableAmRoutine *spindle_meta_routine(void);
extern void spindle_crel_init_metapage(Page page, int64 assigned_max,
									   int64 consumed_floor);
extern SpindleCrelMeta *spindle_crel_check_meta(Relation crel, Buffer buf);
extern Oid	spindle_consumer_rel_oid(Oid queue_relid);
extern Oid	spindle_consumer_rel_queue(Relation crel);
extern Oid	spindle_consumer_rel_create(Relation queue);
extern void spindle_consumer_rel_truncate(Oid queue_relid);

/*
 * consumer_page.c: the metapage locked, allocating and freeing pages, and
 * the WAL record of a change to pages, which every writer of the relation
 * builds in its critical section: begun with its main data, its blocks
 * registered in block-id order, then inserted.
 */
typedef struct SpindleCrelWal
{
	bool		needs_wal;		/* false: an unlogged relation, fake LSNs */
	int			nbufs;
	Buffer		bufs[3];		/* the record's blocks */
} SpindleCrelWal;

extern void spindle_crel_wal_begin(SpindleCrelWal *w, Relation crel,
								   void *xlrec, Size len);
extern void spindle_crel_wal_block(SpindleCrelWal *w, Buffer buf, uint8 flags,
								   char *data, uint32 len);
extern XLogRecPtr spindle_crel_wal_insert(SpindleCrelWal *w, uint8 info);
extern Buffer spindle_crel_meta_lock(Relation crel, int mode);
extern bool spindle_crel_room_for(Relation crel, int n);
extern void spindle_crel_check_free_list(Relation crel,
										 spindle_mapdir_report report,
										 void *arg);
extern Buffer spindle_crel_alloc_page(Relation crel);
extern bool spindle_crel_reserve_pages(Relation crel, int n);
/* pages of room a reservation leaves on the file system beyond its own */
#define SPINDLE_CREL_ROOM_MARGIN	32
extern void spindle_crel_free_page(Relation crel, Buffer buf, uint32 sub,
								   bool drop_tree);
extern void spindle_crel_set_trees(Relation crel, uint32 sub,
								   BlockNumber tree, BlockNumber aside);
extern void spindle_crel_free_aside_meta(Relation crel, Buffer buf,
											uint32 sub);

/* consumer_tree.c: the straggler tree of a subscription */

/* An inner page's item: the child holding keys from key on. */
typedef struct SpindleDownlink
{
	int64		key;
	BlockNumber child;
	uint32		pad;
} SpindleDownlink;

/* Contents of a tree meta block. */
typedef struct SpindleTreeMeta
{
	BlockNumber root;
	uint32		level;			/* of the root; 0: the root is a leaf */
} SpindleTreeMeta;

#define SpindleTreeMetaGet(page)	((SpindleTreeMeta *) PageGetContents(page))

/*
 * The tag a tree's pages carry in SpindleCpageOpaque.sub: the tree's
 * number (the metapage's trees[] index, the writer lock's block number) in
 * its low 8 bits, and above them a generation, 0 for a tree made in
 * place.  A tree rebuilt beside the one in use (spindle_tree_detached) gets
 * the next generation, so a reader still walking the old tree's pages
 * after the swap (spindle_tree_swap) finds any of them reused by the new
 * tree not its own, and starts again from the metapage.
 */
#define SPINDLE_TREE_TAG_SUB(tag)	((uint32) (tag) & 0xFF)
#define SPINDLE_TREE_TAG_NEXT(tag) \
	((((((uint32) (tag) >> 8) + 1) & 0xFFFFFF) << 8) | SPINDLE_TREE_TAG_SUB(tag))

/* One tree being read or written. */
typedef struct SpindleTree
{
	Relation	crel;
	uint32		sub;			/* the tree's number */
	uint32		tag;			/* its pages' tag (set by spindle_tree_root) */
	bool		writer;			/* holds the tree's writer lock */
	bool		detached;		/* a tree the metapage does not name yet:
								 * meta_blk is fixed */
	BlockNumber meta_blk;		/* tree meta block */
} SpindleTree;

static inline Size
spindle_tree_item_size(int level)
{
	return level == 0 ? sizeof(SpindleRun) : sizeof(SpindleDownlink);
}

static inline SpindleRun *
spindle_leaf_items(Page page)
{
	return (SpindleRun *) PageGetContents(page);
}

static inline SpindleDownlink *
spindle_inner_items(Page page)
{
	return (SpindleDownlink *) PageGetContents(page);
}

static inline int64
spindle_run_end(const SpindleRun *r)
{
	return r->first + (int64) r->len;
}

/* Is page a page of tree t at level? */
static inline bool
spindle_tree_page_ok(SpindleTree *t, Page page, int level)
{
	return spindle_crel_page_is(page,
								level == 0 ? SPINDLE_CPAGE_LEAF : SPINDLE_CPAGE_INNER,
								t->tag) &&
		SpindleCpageGetOpaque(page)->level == level;
}

extern void spindle_tree_init(SpindleTree *t, Relation crel, uint32 sub,
							  bool writer);
extern BlockNumber spindle_tree_meta_block(Relation crel, uint32 sub);
extern void spindle_tree_detached(SpindleTree *t, const SpindleTree *old);
extern void spindle_tree_swap(SpindleTree *old, SpindleTree *newt);
extern void spindle_tree_reclaim(SpindleTree *t);
extern bool spindle_tree_root(SpindleTree *t, BlockNumber *root, int *level);
extern Buffer spindle_tree_descend(SpindleTree *t, int64 key, int level,
								   int mode, int64 *low);
extern Buffer spindle_tree_find_le(SpindleTree *t, int64 x, int mode,
								   int *idx);
extern int	spindle_leaf_search_ge(Page page, int64 x);
extern void spindle_tree_upsert(SpindleTree *t, const SpindleRun *run);
extern bool spindle_tree_upsert_in_leaf(SpindleTree *t, const SpindleRun *run);
extern bool spindle_tree_replace_exact(SpindleTree *t, const SpindleRun *run);
extern int64 spindle_tree_cut(SpindleTree *t, int64 a, int64 b, int32 *maxrc);
extern bool spindle_tree_lookup(SpindleTree *t, int64 x, SpindleRun *run);
extern bool spindle_tree_next(SpindleTree *t, int64 x, SpindleRun *run);

/* a visitor of runs in key order: false ends the scan */
typedef bool (*SpindleRunVisitor) (const SpindleRun *run, void *arg);
extern void spindle_tree_scan(SpindleTree *t, int64 lo, int64 hi,
							  SpindleRunVisitor visit, void *arg);
extern int64 spindle_tree_chain_end(SpindleTree *t, int64 end, int max);
extern SpindleRun *spindle_tree_read_range(SpindleTree *t, int64 lo, int64 hi,
										   int max, int *n);
extern int	spindle_tree_pop(SpindleTree *t, int64 from, int64 limit, int max,
							 SpindleRun *out, int64 *next, bool remove);
extern int64 spindle_tree_count(SpindleTree *t, uint16 kind,
								TimestampTz after, TimestampTz *first_due);
extern int	spindle_tree_drop(SpindleTree *t);
extern int	spindle_tree_npages(SpindleTree *t);
extern SpindleRun *spindle_tree_read_all(SpindleTree *t, int *n);
extern bool spindle_tree_is_sparse(int npages, int64 nruns);
extern int64 spindle_tree_pages_needed(int64 nruns);
extern void spindle_tree_stats(SpindleTree *t, int *npages, int64 *nruns);
extern void spindle_tree_rebuild(SpindleTree *old, const SpindleRun *runs,
								 int n);
extern void spindle_straggle_apply(Page page, const char *ops, Size len,
								   int nops);

/*
 * consumer_xlog.c: redo, description, identification and masking of the
 * records of consumer_page.c and consumer_tree.c, whose layouts (main
 * data) follow; the resource manager's part (rangepurge.c dispatches)
 */

/*
 * STRAGGLE: block 0 the leaf; its block data the ops, each an
 * xl_spindle_straggle_op (followed by a run for an insert or a replace).
 */
typedef struct xl_spindle_straggle
{
	uint16		nops;
} xl_spindle_straggle;

typedef struct xl_spindle_straggle_op
{
	uint8		type;			/* XLSOP_* */
	uint8		pad;
	uint16		pos;			/* item position, as the page is then */
} xl_spindle_straggle_op;

#define XLSOP_DELETE	1
#define XLSOP_INSERT	2		/* followed by a SpindleRun */
#define XLSOP_REPLACE	3		/* followed by a SpindleRun */

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
	SpindleDownlink item;
	uint16		pos;
} xl_spindle_insert_upper;

/*
 * NEWROOT.  A root split: block 0 the old root (flag cleared), block 1 the
 * new root (WILL_INIT; block data its two downlinks), block 2 the tree
 * meta block.  A new tree (XLNR_CREATE): block 0 the empty root leaf,
 * block 1 the tree meta block (both WILL_INIT), block 2 the metapage,
 * which names block 1 as tree `sub`, or, XLNR_DETACHED, as the tree set
 * aside beside it, being built (a record written before turn 4, session
 * 13 has no block 2 then).
 */
typedef struct xl_spindle_newroot
{
	uint32		sub;
	uint16		level;			/* of the new root */
	uint16		flags;
} xl_spindle_newroot;

#define XLNR_CREATE		0x0001
#define XLNR_DETACHED	0x0002	/* with CREATE: a tree built beside tree
								 * `sub`, named in the metapage's aside[] */

/* FREE: block 0 the page (WILL_INIT), block 1 the metapage */
typedef struct xl_spindle_free
{
	FullTransactionId freed_xid;
	BlockNumber next;			/* the free list's old head */
	uint32		sub;
	uint16		flags;			/* XLFR_DROP_TREE: forget tree `sub` */
	BlockNumber replacement;	/* XLFR_SWAP_TREE: tree `sub`'s new meta
								 * block */
} xl_spindle_free;

#define XLFR_DROP_TREE	0x0001
#define XLFR_SWAP_TREE	0x0002	/* with DROP_TREE: the metapage names
								 * `replacement` instead (records from
								 * before turn 4, session 13) */
#define XLFR_DROP_ASIDE	0x0004	/* the meta block of the tree set aside
								 * beside tree `sub`, its last page: the
								 * metapage names none */

/* consumer_page.c: the metapage's side of a FREE record (also for redo) */
extern void spindle_crel_meta_freed(Page mpage, BlockNumber blk,
									const xl_spindle_free *xlrec);

/* REUSE: block 0 the metapage (the list's head moves to next) */
typedef struct xl_spindle_reuse
{
	RelFileNode node;
	FullTransactionId horizon;	/* the page's freed_xid */
	BlockNumber block;
	BlockNumber next;			/* the page after it on the free list */
	BlockNumber prev;			/* the page before it (block 1 of the
								 * record), or InvalidBlockNumber: it was
								 * the head */
} xl_spindle_reuse;

extern void spindle_crel_redo(struct XLogReaderState *record);
extern void spindle_crel_desc(StringInfo buf, struct XLogReaderState *record);
extern const char *spindle_crel_identify(uint8 info);
extern bool spindle_crel_mask(char *pagedata, BlockNumber blkno);

/* consume_log.c: tree 2, the consume log (readers; the writers' entries) */
extern bool spindle_consume_log_exists(Relation crel);
extern bool spindle_consume_log_probe(Relation crel, int64 id,
									  SpindleConsumed *e);
extern SpindleConsumed *spindle_consume_log_read(Relation crel, int64 lo,
												 int64 hi, int *n);
extern void spindle_consume_log_lock(Relation crel);
extern void spindle_consume_log_unlock(Relation crel);
extern void spindle_consume_log_lock_consumer(Relation crel);
extern void spindle_consume_log_unlock_consumer(Relation crel);
extern void spindle_consume_log_shmem_request(void);
extern void spindle_consume_log_shmem_startup(void);
extern void spindle_consume_log_add(Relation crel, int64 id,
									FullTransactionId fxid, CommandId cid);
extern int64 spindle_consume_log_floor(Relation crel);
extern void spindle_consume_log_raise_floor(Relation crel, int64 floor);
extern SpindleConsumed *spindle_consume_log_over(Oid facade, int64 lo,
												 int64 hi, int *n,
												 int64 *floor);
extern const SpindleConsumed *spindle_consume_log_find(const SpindleConsumed *e,
													   int n, int64 id);
#define SPINDLE_ENTRY_NONE		0
#define SPINDLE_ENTRY_DEAD		1
#define SPINDLE_ENTRY_RECENT	2
#define SPINDLE_ENTRY_RUNNING	3
extern int	spindle_consume_log_state(const SpindleConsumed *e,
									  TransactionId oldest_xmin);
typedef void (*SpindleFoldConflictFn) (void *arg, TransactionId latest);
extern int64 spindle_consume_log_settle(Oid facade, int64 below, int max,
										SpindleFoldConflictFn conflict,
										void *arg);
extern TransactionId spindle_consume_log_freeze(Relation crel,
												TransactionId freeze_limit);

/*
 * The standby conflict of VACUUM's freeze of the consume log: called with
 * the queue table's oid and the newest xid the freeze is about to make
 * FROZEN, before any entry is; false if it could not write it (the freeze
 * then freezes nothing this time).  Registered at start-up by the layer
 * that can reach the queue table's pages (table/maintenance.c); unset,
 * the freeze writes no conflict.
 */
typedef bool (*SpindleFreezeConflictFn) (Oid queue_relid, TransactionId latest);
extern PGDLLIMPORT SpindleFreezeConflictFn spindle_consume_log_freeze_conflict_hook;
extern void spindle_consume_log_add_run(Relation crel, int64 first,
										int64 len, FullTransactionId fxid,
										CommandId cid);

/*
 * relocation.c: trees 3 and 4 of a queue's consumer relation (compaction,
 * docs/design.md "Compaction of sparse spindles", sections 3, 4 and 6).
 * Tree 3 holds one relocation entry per moved copy, keyed by the copy it
 * hides; tree 4 maps a msg_id to its oldest copy.  A copy (spindle_no, k)
 * is keyed spindle_no << SPINDLE_RELOC_K_BITS | k: k < SPINDLE_MAX_CAPACITY
 * < 2^26, and spindle_no is checked to be below 2^37 (spindle_reloc_key),
 * so the key is a positive int64.
 */
#define SPINDLE_TREE_RELOC		3
#define SPINDLE_TREE_RELOC_IDS	4
#define SPINDLE_RUN_RELOCATED	7	/* tree 3 */
#define SPINDLE_RUN_OLDEST_COPY 8	/* tree 4 */
#define SPINDLE_RELOC_K_BITS	26
#define SPINDLE_RELOC_MAX_SPINDLE_NO \
	((INT64CONST(1) << (63 - SPINDLE_RELOC_K_BITS)) - 1)

/* A relocation entry: copy (source_no, source_k) moved to (target_no, target_k) */
typedef struct SpindleRelocation
{
	int64		source_no;
	int64		source_k;
	int64		target_no;
	int64		target_k;
	TransactionId xid;			/* the mover; FrozenTransactionId: frozen */
	CommandId	cid;			/* the mover's command */
	uint16		flags;			/* none defined yet */
} SpindleRelocation;

extern int64 spindle_reloc_key(int64 spindle_no, int64 k);
extern void spindle_reloc_key_split(int64 key, int64 *spindle_no, int64 *k);
extern void spindle_reloc_to_run(const SpindleRelocation *e, SpindleRun *r);
extern SpindleRelocation *spindle_reloc_read_all(Relation crel, int *n);
extern void spindle_crel_trees_present(Relation crel, bool *log, bool *reloc);
extern bool spindle_reloc_exists(Relation crel);
extern bool spindle_reloc_moved(Relation crel, int64 spindle_no, int64 k);
extern void spindle_reloc_lock(Relation crel);
extern bool spindle_reloc_lock_conditional(Relation crel);
extern int	spindle_reloc_state(const SpindleRelocation *e,
								TransactionId oldest_xmin);
extern const SpindleRelocation *spindle_reloc_find(const SpindleRelocation *e,
													int n, int64 k);
extern SpindleRelocation *spindle_reloc_read_for(Oid facade_relid,
												 int64 spindle_no, int *n);
extern bool spindle_reloc_probe(Relation crel, int64 spindle_no, int64 k,
								SpindleRelocation *e);
extern SpindleRelocation *spindle_reloc_read(Relation crel, int64 spindle_no,
											 int64 lo_k, int64 hi_k, int *n);
extern void spindle_reloc_add(Relation crel, const SpindleRelocation *e);
extern void spindle_reloc_note_oldest(Relation crel, int64 msg_id,
									  int64 spindle_no, int64 k);
extern bool spindle_reloc_oldest(Relation crel, int64 msg_id,
								 int64 *spindle_no, int64 *k);
extern bool spindle_reloc_ids_moved(Relation crel, int64 lo, int64 hi);
extern bool spindle_reloc_aborted(const SpindleRelocation *e);
extern int	spindle_reloc_remove_aborted(Relation crel);
extern TransactionId spindle_reloc_freeze(Relation crel,
										  TransactionId freeze_limit);

/*
 * relocation_forget.c: the entries of copies whose spindle or annex was
 * dropped (design, section 6, "Removal").  exists says whether spindle
 * or annex spindle_no of the queue table is still there.
 */
typedef bool (*SpindleCopyExists) (int64 spindle_no, void *arg);

typedef struct SpindleForgetStats
{
	int			heads_moved;	/* tree 4 entries now naming a later copy */
	int			heads_gone;		/* tree 4 entries of events gone */
	int			entries_gone;	/* tree 3 entries of dropped copies */
	int			entries_shortened;	/* tree 3 entries now skipping one */
	int			entries_kept;	/* left in tree 3 */
	int			heads_kept;		/* left in tree 4 */
	bool		rebuilt;		/* the trees were rebuilt and swapped in */
	bool		dropped;		/* both trees were empty and freed */
} SpindleForgetStats;

extern bool spindle_reloc_forget(Relation crel, SpindleCopyExists exists,
								 void *arg, SpindleForgetStats *stats);

/* relocation.c, consumers following moves (design, "Step 3 as built") */
#define SPINDLE_MOVE_NONE		0	/* not hidden: the event is here */
#define SPINDLE_MOVE_RUNNING	1	/* a running move hides it */
#define SPINDLE_MOVE_DONE		2	/* moved: followed to the copy returned */
extern void spindle_crel_meta_look(Relation crel, bool *log, bool *reloc,
								   int64 *floor);
extern int	spindle_reloc_consumer_state(const SpindleRelocation *e,
										 TransactionId *xid);
extern int	spindle_reloc_follow(Relation crel, int64 *spindle_no, int64 *k,
								 TransactionId *xid);

/* consumer_test.c: the test-only spindle._run_*() functions and GUCs */
extern int	spindle_test_tree_fanout;	/* GUC, test only: items a page takes */
extern void spindle_test_pause(const char *point);
extern void spindle_test_pause_tree(uint32 sub);
extern bool spindle_test_split_crash;	/* GUC, test only: PANIC after SPLIT */
extern bool spindle_test_load_crash;	/* GUC, test only: PANIC in a bulk
										 * load, after its leaves */
extern void spindle_crel_define_gucs(void);

/* ---- touched.c: touched and settled spindles ---- */

/*
 * A run of settled spindles: every spindle of the table numbered from
 * first to last that still exists is settled (touched.c).
 */
typedef struct SettledRun
{
	int64		first;
	int64		last;
} SettledRun;

/* One maintenance pass over a table's spindles (touched.c). */
typedef struct SettledPass
{
	Oid			facade;
	uint64		generation;
	SettledRun *old;			/* the runs before the pass ... */
	int			nold;
	int			pos;			/* ... and how far the pass got in them */
	int64		last_no;		/* the last spindle the pass looked at */
	SettledRun *runs;			/* the runs the pass builds */
	int			nnew;
	int			max;
	int			last_index;		/* directory index of the last one added */
} SettledPass;

extern Size spindle_touched_shmem_size(void);
extern void spindle_touched_shmem_startup(void);
extern void spindle_note_touched(Oid facade, int64 spindle_no);
extern void spindle_touched_sync(void);
extern void spindle_settled_begin(SettledPass *pass, Oid facade,
								  TransactionId table_version);
extern int	spindle_settled_run(SettledPass *pass, const SpindleDirectory *dir,
								int i);
extern void spindle_settled_add(SettledPass *pass, const SpindleDirectory *dir,
								int i);
extern void spindle_settled_end(SettledPass *pass);

/* ---- catalog_spi.c: SPI on spindle's own catalog tables ---- */

typedef struct SpindleSpi
{
	Oid			saved_userid;
	int			saved_sec_context;
	int			guc_nestlevel;
	MemoryContext outer;		/* results that outlive SPI_finish go here */
} SpindleSpi;

extern void spindle_spi_begin(SpindleSpi *ctx);
extern void spindle_spi_end(SpindleSpi *ctx);
extern uint64 spindle_spi_exec(const char *sql, int nargs, Oid *types,
							   Datum *values, const char *nulls, bool read_only);

#endif							/* SPINDLE_STORAGE_H */
