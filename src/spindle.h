/*-------------------------------------------------------------------------
 *
 * spindle.h
 *	  Declarations shared by the files of the spindle extension.
 *
 * A spindle table (the "facade") is a relation whose table access method is
 * "spindle".  Its events live in spindles: internal relations of access
 * method "spindle_segment" (heap, minus slot reclamation) in schema
 * pg_spindle, one per spindle, listed in spindle.spindle_catalog.  The
 * facade's own main fork holds the slot map, which gives every event of
 * every spindle a virtual TID with a block number below 2^17 so that
 * TIDs handed to indexes stay inside the facade's first 1 GB segment (see
 * slotmap.c for why).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_H
#define SPINDLE_H

#include "access/tableam.h"
#include "storage/itemptr.h"
#include "datatype/timestamp.h"
#include "storage/smgr.h"
#include "utils/rel.h"
#include "access/htup.h"

/* GUCs (spindle.c) */
extern int	spindle_events_per_spindle;
extern bool spindle_preloaded;

/* Name of the schema holding the spindles themselves. */
#define SPINDLE_STORAGE_SCHEMA "pg_spindle"
#define SPINDLE_SCHEMA "spindle"

/* One spindle as the backend-local directory cache knows it. */
typedef struct SpindleEntry
{
	int64		spindle_no;		/* increasing per table */
	Oid			segment;		/* relation holding the events */
	int64		capacity;		/* as configured; 0 = unbounded */
	int64		vbase;			/* its virtual slots (slotmap.c) ... */
	int64		vcount;			/* ... and how many: what it may hold */
	TimestampTz created_at;
	TimestampTz filled_at;		/* 0 if not recorded */
} SpindleEntry;

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
	SpindleEntry *spindles;		/* ordered by spindle_no */
	int		   *byvbase;		/* indexes into spindles, ordered by vbase */
	int64		events_per_spindle; /* table option, for new spindles */
	int			open_hint;		/* no spindle before this one has room */
	bool		hint_checked;	/* open_hint verified against the counters */
} SpindleDirectory;

/* A spindle's number and range of virtual slots. */
typedef struct SpindleRange
{
	int64		spindle_no;
	int64		vbase;
	int64		vcount;
} SpindleRange;

/* spindle.c */
extern void spindle_check_preloaded(void);

/* options.c */
extern void spindle_options_init(void);
extern bool spindle_parse_capacity(const char *value, int64 *result);
extern int64 spindle_rel_capacity_option(Oid relid, bool *found);
extern bool spindle_rel_ttl_option(Oid relid, Interval *result);
extern bool spindle_is_facade(Relation rel);
extern Relation spindle_open_facade(Oid relid, LOCKMODE lockmode);
extern Oid	spindle_segment_am_oid(void);
extern Oid	spindle_facade_am_oid(void);

/* directory.c */
extern void spindle_directory_init(void);
extern SpindleDirectory *spindle_directory_acquire(Relation facade);
extern void spindle_directory_release(SpindleDirectory *dir);
extern void spindle_directory_note_open(SpindleDirectory *dir, int64 spindle_no);
extern SpindleEntry *spindle_find_spindle(SpindleDirectory *dir, int64 spindle_no);
extern SpindleEntry *spindle_find_by_vslot(SpindleDirectory *dir, int64 vslot);
extern void spindle_lock_creation(Oid facade);
extern bool spindle_creation_locked_by_me(Oid facade);
extern bool spindle_created_here(Relation facade);
extern int	spindle_create_spindles(Relation facade, int count, bool ready_only);
extern void spindle_register_table(Oid facade);
extern void spindle_forget_table(Oid facade);
extern void spindle_drop_all_spindles(Relation facade);
extern void spindle_catalog_mark_dropped(Oid facade, int64 spindle_no,
										 int64 bytes_freed);
extern int	spindle_catalog_dropped(Oid facade, SpindleRange **out);
extern bool spindle_catalog_has_spindle(Oid facade, int64 spindle_no);
extern void spindle_catalog_forget_dropped(Oid facade, int64 *spindle_nos, int n);
extern void spindle_catalog_set_filled(Oid facade, int64 spindle_no,
									   TimestampTz when);
extern void spindle_catalog_set_capacity_of_empty(Relation facade, int64 capacity);
extern List *spindle_catalog_tables(void);

/* slots.c: shared-memory slot counters */
extern int	spindle_max_spindles;
extern void spindle_slots_shmem_request(void);
extern void spindle_slots_shmem_startup(void);
extern int	spindle_slots_take(Relation facade, SpindleDirectory *dir, int i,
							   int nwanted, int64 *first);
extern int64 spindle_slots_used(Relation facade, Relation segrel,
								SpindleEntry *sp, bool *is_full,
								TimestampTz *filled_at, Relation next_segrel);
extern bool spindle_slots_reserved(Relation segrel);
extern bool spindle_slots_full(Relation facade, SpindleDirectory *dir, int i,
							   TimestampTz *filled_at);
extern bool spindle_slots_peek(Oid segment, int64 *used);
extern void spindle_slots_forget(Oid segment);
extern void spindle_slots_forget_database(Oid dboid);

/* facade_am.c / facade_scan.c */
extern const TableAmRoutine *spindle_facade_routine(void);
extern const TableAmRoutine *spindle_heap_methods(void);
extern void spindle_scan_routines(TableAmRoutine *r);
extern void spindle_slot_set_identity(TupleTableSlot *slot, Relation facade,
									  ItemPointer vtid);
typedef enum TidResolution
{
	TID_IN_SPINDLE,				/* found: *sp and *ptid are set */
	TID_DEAD,					/* chunk unmapped: nothing can be there */
	TID_UNKNOWN					/* a spindle this backend cannot see */
} TidResolution;

extern TidResolution spindle_resolve_tid(Relation facade, ItemPointer vtid,
										 SpindleEntry *sp, ItemPointer ptid);
extern TidResolution spindle_resolve_vslot(Relation facade,
										   SpindleDirectory *dir, int64 vslot,
										   SpindleEntry **sp, ItemPointer ptid);
extern void spindle_tuple_vtid(SpindleEntry *sp, HeapTuple tuple,
							   ItemPointer vtid);
extern Relation spindle_open_segment(Relation facade, SpindleEntry *sp,
									 LOCKMODE lockmode);
extern IndexFetchTableData *spindle_fetch_begin(Relation rel);
extern void spindle_fetch_end(IndexFetchTableData *scan);
extern bool spindle_fetch_event(Relation rel, IndexFetchTableData *scan,
								ItemPointer tid, Snapshot snapshot,
								TupleTableSlot *slot, bool *call_again,
								bool *all_dead);

/* segment_am.c */
extern const TableAmRoutine *spindle_segment_routine(void);
extern double spindle_segment_index_build(Relation seg, Relation index_rel,
										  struct IndexInfo *index_info,
										  bool anyvisible,
										  BlockNumber start_blockno,
										  BlockNumber numblocks,
										  IndexBuildCallback callback,
										  void *callback_state);
extern void spindle_segment_vacuum(Relation seg, struct VacuumParams *params,
								   BufferAccessStrategy bstrategy);

/* maintenance.c */
extern int	spindle_drop_droppable(Relation facade);
extern int	spindle_drop_droppable_stats(Relation facade, int64 *bytes_freed,
										 bool use_cache);
extern void spindle_ensure_ready(Relation facade);
extern void spindle_cleanup_dropped(Relation facade);
extern void spindle_vacuum_spindles(Relation facade, struct VacuumParams *params,
									BufferAccessStrategy bstrategy);
extern bool spindle_request_spindles(Relation facade, int count);
extern void spindle_count_segment(Relation segrel, int64 *events,
								  int64 *purged, int64 *dead_to_all,
								  TransactionId *latest_removed);

/* ttl.c */
extern int64 spindle_purge_older_than(Relation facade, TimestampTz cutoff);

/* worker.c */
extern int	spindle_naptime;
extern bool spindle_enable_worker;
extern int	spindle_max_workers;
extern Size spindle_worker_shmem_size(void);
extern void spindle_worker_shmem_startup(void);
extern void spindle_worker_register(void);
extern void spindle_worker_pause(Oid dboid);
extern void spindle_worker_resume(Oid dboid);
extern void spindle_worker_nudge(void);
extern void spindle_worker_extension_created(void);

#endif							/* SPINDLE_H */
