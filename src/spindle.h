/*-------------------------------------------------------------------------
 *
 * spindle.h
 *	  Declarations shared by the files of the spindle extension.
 *
 * A spindle table (the "facade") is a relation whose table access method is
 * "spindle".  Its events live in spindles: internal relations of access
 * method "spindle_segment" (heap, minus slot reclamation) in schema
 * pg_spindle, one per spindle, listed in spindle.spindle_catalog.  The
 * facade's own main fork holds one metapage, the chunk map, which gives
 * every page of every spindle a virtual block number below 2^17 so that
 * TIDs handed to indexes stay inside the facade's first 1 GB segment (see
 * chunkmap.c for why).
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

/* GUCs (spindle.c) */
extern int	spindle_events_per_spindle;
extern bool spindle_preloaded;

/* Name of the schema holding the spindles themselves. */
#define SPINDLE_STORAGE_SCHEMA "pg_spindle"
#define SPINDLE_SCHEMA "spindle"

/*
 * Chunk map geometry (chunkmap.c).  The virtual block space of a facade is
 * SPINDLE_VIRTUAL_BLOCKS blocks (one md segment), cut into chunks of
 * SPINDLE_CHUNK_BLOCKS blocks; each chunk maps to one chunk of one spindle.
 */
#define SPINDLE_CHUNK_BITS		7
#define SPINDLE_CHUNK_BLOCKS	(1 << SPINDLE_CHUNK_BITS)	/* 1 MB */
#define SPINDLE_NCHUNKS			1024
#define SPINDLE_VIRTUAL_BLOCKS	(SPINDLE_NCHUNKS * SPINDLE_CHUNK_BLOCKS)
/* a spindle may use at most this many blocks (one md segment) */
#define SPINDLE_MAX_SEGMENT_BLOCKS (SPINDLE_NCHUNKS * SPINDLE_CHUNK_BLOCKS)

/* One spindle as the backend-local directory cache knows it. */
typedef struct SpindleEntry
{
	int64		spindle_no;		/* increasing per table, from 1 */
	Oid			segment;		/* relation holding the events */
	int64		capacity;		/* 0 = unbounded */
	TimestampTz created_at;
	TimestampTz filled_at;		/* 0 if not recorded */
	/* P->V translation cache: virtual chunk of each physical chunk, or -1 */
	int16	   *vchunk;			/* SPINDLE_NCHUNKS entries, lazily made */
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
	int64		events_per_spindle; /* table option, for new spindles */
	int			open_hint;		/* no spindle before this one has room */
	bool		hint_checked;	/* open_hint verified against the counters */
} SpindleDirectory;

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
extern SpindleEntry *spindle_find_by_tag(SpindleDirectory *dir, uint32 tag);
extern int16 *spindle_vchunk_cache(SpindleDirectory *dir, SpindleEntry *sp);
extern bool spindle_created_here(Relation facade);
extern int	spindle_create_spindles(Relation facade, int count, bool ready_only);
extern void spindle_register_table(Oid facade);
extern void spindle_forget_table(Oid facade);
extern void spindle_drop_all_spindles(Relation facade);
extern void spindle_catalog_mark_dropped(Oid facade, int64 spindle_no,
										 int64 bytes_freed);
extern int64 *spindle_catalog_dropped(Oid facade, int *n);
extern void spindle_catalog_forget_dropped(Oid facade, int64 *spindle_nos, int n);
extern void spindle_catalog_set_filled(Oid facade, int64 spindle_no,
									   TimestampTz when);
extern void spindle_catalog_set_capacity_of_empty(Relation facade, int64 capacity);
extern List *spindle_catalog_tables(void);

/* chunkmap.c */
extern void spindle_chunkmap_init_fork(Relation facade, SMgrRelation srel,
									   ForkNumber fork, bool wal);
extern void spindle_tid_to_virtual(Relation facade, SpindleDirectory *dir,
								   SpindleEntry *sp, ItemPointer ptid,
								   ItemPointer vtid);
extern bool spindle_tid_to_physical(Relation facade, ItemPointer vtid,
									uint32 *tag, ItemPointer ptid);
extern uint32 spindle_tag(int64 spindle_no);
extern uint32 spindle_entry_tag(uint32 entry);
extern uint32 spindle_entry_pchunk(uint32 entry);
extern int	spindle_chunkmap_mapped(Relation facade, uint32 *entries);
extern void spindle_chunkmap_free_spindles(Relation facade, int64 *spindle_nos,
										   int n);
extern void spindle_chunkmap_copy(Relation from, Relation to);

/* slots.c: shared-memory slot counters */
extern int	spindle_max_spindles;
extern void spindle_slots_shmem_request(void);
extern void spindle_slots_shmem_startup(void);
extern int	spindle_slots_take(SpindleDirectory *dir, int i, int nwanted);
extern int64 spindle_slots_used(Relation segrel, SpindleEntry *sp,
								bool *is_full, TimestampTz *filled_at,
								Relation next_segrel);
extern bool spindle_slots_reserved(Relation segrel);
extern bool spindle_slots_full(SpindleDirectory *dir, int i,
							   TimestampTz *filled_at);
extern void spindle_slots_forget(Oid segment);

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
extern Size spindle_ttl_shmem_size(void);
extern void spindle_ttl_shmem_startup(void);
extern void spindle_ttl_sample(void);
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
