/*-------------------------------------------------------------------------
 *
 * spindle_table.h
 *	  The table layer's interface: the "spindle" table access method over
 *	  the spindles (the facade), its directory of spindles, their creation,
 *	  drops and detaching, maintenance, TTL and table options.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_TABLE_H
#define SPINDLE_TABLE_H

#include "access/tableam.h"
#include "datatype/timestamp.h"
#include "nodes/lockoptions.h"
#include "nodes/nodes.h"
#include "nodes/parsenodes.h"
#include "nodes/pg_list.h"
#include "storage/buf.h"
#include "storage/lockdefs.h"
#include "utils/rel.h"

#include "storage/spindle_storage.h"

/* ---- directory.c: the backend-local directory of a table's spindles ---- */

extern void spindle_directory_init(void);
extern SpindleDirectory *spindle_directory_acquire(Relation facade);
extern SpindleDirectory *spindle_directory_acquire_tail(Relation facade);
extern SpindleDirectory *spindle_directory_acquire_upto(Relation facade,
														 int64 spindle_no);
extern SpindleDirectory *spindle_directory_acquire_upto_event(Relation facade,
															   int64 event_no);
extern SpindleDirectory *spindle_directory_acquire_current(Relation facade);
extern void spindle_directory_release(SpindleDirectory *dir);
extern void spindle_directory_forget(Oid facade);
extern void spindle_directory_note_open(SpindleDirectory *dir, int64 spindle_no);
extern SpindleEntry *spindle_find_spindle(SpindleDirectory *dir, int64 spindle_no);
extern SpindleEntry *spindle_find_copy(SpindleDirectory *dir, int64 spindle_no);
extern SpindleEntry *spindle_find_by_vslot(SpindleDirectory *dir, int64 vslot);
extern SpindleEntry *spindle_find_by_event(SpindleDirectory *dir,
										   int64 event_no);
extern int	spindle_find_from_event(SpindleDirectory *dir, int64 event_no);
extern bool spindle_created_here(Relation facade);

/* ---- directory_catalog.c: spindle.spindle_catalog, spindle.table_catalog ---- */

struct ScanKeyData;
struct SysScanDescData;

/* spindle.spindle_catalog and its indexes, open for reading */
typedef struct SpindleCatalogRels
{
	Relation	heap;			/* spindle.spindle_catalog */
	Relation	bynumber;		/* its (relation, spindle_no) index */
	Relation	byvbase;		/* its (relation, vbase) index, or NULL */
	bool		byvbase_vcount; /* ... which has vcount as third column */
} SpindleCatalogRels;

extern void spindle_catalog_init(void);
extern bool spindle_xact_wrote_catalog(void);
extern void spindle_catalog_open(SpindleCatalogRels *cr);
extern void spindle_catalog_close(SpindleCatalogRels *cr);
extern Snapshot spindle_catalog_snapshot(void);
extern void spindle_catalog_decode_row(TupleDesc td, HeapTuple tup,
									   SpindleEntry *sp, bool *dropped);
extern struct SysScanDescData *spindle_catalog_scan_rows(SpindleCatalogRels *cr,
														  Oid facade,
														  int64 lo, int64 hi,
														  Snapshot snap,
														  struct ScanKeyData *keys);
extern int64 spindle_catalog_max_spindle_no(SpindleCatalogRels *cr, Oid facade,
											Snapshot snap, int64 *event_end);
extern void spindle_catalog_add_spindle(Oid facade, const SpindleEntry *sp);
extern bool spindle_catalog_renumber_empty(Relation facade, int64 floor);
extern bool spindle_catalog_renumber_tail(Relation facade, int64 first_no);
extern void spindle_register_table(Oid facade);
extern void spindle_forget_table(Oid facade);
extern List *spindle_catalog_tables(void);
extern void spindle_drop_all_spindles(Relation facade);
extern void spindle_catalog_mark_dropped(Oid facade, const SpindleEntry *sp,
										 int64 bytes_freed);
extern int64 spindle_catalog_retire_slots(Oid facade);
extern int	spindle_catalog_dropped(Oid facade, SpindleRange **out);
extern int	spindle_catalog_dropped_here(Oid facade, SpindleRange **out);
extern bool spindle_catalog_has_spindle(Oid facade, int64 spindle_no, int n);
extern void spindle_catalog_forget_dropped(Oid facade, const SpindleRange *ranges,
										   int n);
extern void spindle_catalog_set_filled(Oid facade, int64 spindle_no,
									   TimestampTz when);
extern void spindle_catalog_set_capacity_of_empty(Relation facade, int64 capacity);

/* ---- spindle_create.c: creating spindles ---- */

extern void spindle_creation_init(void);
extern bool spindle_xact_created_spindles(void);
extern void spindle_lock_creation(Oid facade);
extern bool spindle_creation_locked_by_me(Oid facade);
extern int	spindle_create_spindles(Relation facade, int count, bool ready_only);
extern void spindle_create_spindle_at(Relation facade, int64 first_no);
extern int64 spindle_create_annex(Relation facade, int generation);

/* ---- facade_am.c / kept_ids.c: inserts that keep supplied numbers ---- */

extern void spindle_check_open_hint(Relation facade, SpindleDirectory *dir);
extern void spindle_place_in(Relation facade, SpindleDirectory *dir, int i,
							 Relation seg, TupleTableSlot **slots, int got,
							 int64 k0, CommandId cid, int options,
							 struct BulkInsertStateData *bistate,
							 bool speculative, uint32 specToken);
extern int	spindle_place_kept(Relation facade, SpindleDirectory **dirp,
							   TupleTableSlot **slots, int n, int64 event_no,
							   CommandId cid, int options,
							   struct BulkInsertStateData *bistate,
							   bool speculative, uint32 specToken);
extern int	spindle_segment_is_empty(Oid segment);
extern int	spindle_test_vslot_base;	/* GUC, tests only */

/* ---- annex.c: copies of events placed in annexes ---- */

extern int64 spindle_obtain_annex(Relation facade, int generation);
extern void spindle_annex_place(Relation facade, int generation,
								TupleTableSlot *slot, ItemPointer vtid);

extern Relation spindle_annex_open_for_test(Oid relid, int generation,
												const char *fname);
/* an annex slot reserved for a copy (spindle_annex_reserve) */
typedef struct SpindleAnnexSlot
{
	SpindleDirectory *dir;		/* pinned */
	int			index;			/* the annex, for spindle_dir_entry */
	Relation	seg;			/* the annex, RowExclusiveLock */
	int64		spindle_no;		/* the annex's number */
	int64		k;				/* the slot */
} SpindleAnnexSlot;

extern void spindle_annex_reserve(Relation facade, int generation,
								  bool make, SpindleAnnexSlot *as);
extern void spindle_annex_fill(Relation facade, SpindleAnnexSlot *as,
							   TupleTableSlot *slot, uint32 appended,
							   ItemPointer vtid);

/* ---- relocate.c: moving events into annexes (compaction) ---- */

/* events one subtransaction of the relocator moves, at most */
#define SPINDLE_RELOCATE_BATCH 256

/* what a copy's header says (spindle_copy_state: no hint bit set) */
typedef enum SpindleCopyState
{
	COPY_DEAD,					/* insert aborted, or deleter committed */
	COPY_BUSY,					/* inserter, deleter or locker running */
	COPY_LIVE
} SpindleCopyState;

/* the worker's relocator of one queue table (spindle_relocator_begin) */
typedef struct SpindleRelocator
{
	Relation	facade;			/* RowExclusiveLock */
	Relation	crel;			/* its consumer relation, RowExclusiveLock */
} SpindleRelocator;

/* a copy left in a spindle or annex (spindle_relocate_scan) */
typedef struct SpindleLiveCopy
{
	int64		k;				/* its slot */
	int64		msg_id;			/* its event */
	bool		busy;			/* a running transaction has it */
} SpindleLiveCopy;

/* what the relocator did */
typedef struct SpindleMoveStats
{
	int64		moved;			/* copies placed in annexes */
	int64		not_moved;		/* gone or changed before their move */
	int64		failed;			/* skipped: their copy failed */
} SpindleMoveStats;

extern SpindleCopyState spindle_copy_state(HeapTupleHeader t);
extern bool spindle_relocate_event(Relation facade, Relation crel,
								   SpindleEntry *sp, int64 k, int64 msg_id,
								   int generation, bool strict,
								   ItemPointer vtid);
extern bool spindle_relocator_begin(Oid relid, SpindleRelocator *r);
extern void spindle_relocator_end(SpindleRelocator *r);
extern int	spindle_relocate_target_generation(const SpindleEntry *sp);
extern SpindleLiveCopy *spindle_relocate_scan(SpindleRelocator *r,
											  SpindleEntry *sp,
											  AttrNumber id_att, int *n);
extern void spindle_relocate_batch(SpindleRelocator *r, SpindleEntry *sp,
								   const SpindleLiveCopy *copies, int n,
								   SpindleMoveStats *st);

/* ---- facade_am.c, facade_scan.c: the spindle table AM ---- */

extern const TableAmRoutine *spindle_facade_routine(void);
extern bool spindle_truncate_untouched(Oid relid, int64 *first_no);
extern const TableAmRoutine *spindle_heap_methods(void);
extern void spindle_scan_routines(TableAmRoutine *r);
extern void spindle_bitmap_no_prefetch(void);
extern BlockNumber spindle_analyze_nblocks(SpindleDirectory *dir);
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

/* ---- options.c: table options ---- */

extern int	spindle_events_per_spindle;	/* GUC: capacity of new tables */
extern bool spindle_preloaded;	/* set by _PG_init when preloaded */
extern void spindle_check_preloaded(void);
extern void spindle_options_init(void);
extern void spindle_check_spindles_match(Oid relid);
extern bool spindle_parse_capacity(const char *value, int64 *result);
extern int64 spindle_rel_capacity_option(Oid relid, bool *found);
extern bool spindle_rel_ttl_option(Oid relid, Interval *result);
extern bool spindle_is_facade(Relation rel);
extern Relation spindle_open_facade(Oid relid, LOCKMODE lockmode);
extern bool spindle_relid_is_facade(Oid relid);
extern Oid	spindle_segment_am_oid(void);
extern Oid	spindle_facade_am_oid(void);

/*
 * What the utility hook (admin/utility.c) asks of spindle tables around
 * the statements it runs: spindle_prepare_* and spindle_check_* before
 * core runs one (they refuse what a spindle table cannot take and take
 * spindle's options out of it), the others after, in the same transaction.
 */
extern void spindle_refuse_spindle_ddl(Node *parsetree);
extern bool spindle_prepare_create(CreateStmt *stmt, List **options);
extern bool spindle_prepare_create_as(CreateTableAsStmt *stmt, List **options);

/*
 * The state of a CREATE of a spindle table while core runs it: whether one
 * is running, the new table's OID once the object access hook saw it, its
 * spindle options.  A CREATE nested in another (an event trigger's, one
 * run by a function that CREATE TABLE ... AS calls) has its own: the
 * utility hook keeps the outer one in a local and gives it back when the
 * inner one ends, failed or not.
 */
typedef struct SpindleCreateState
{
	bool		active;
	Oid			relid;
	List	   *options;		/* DefElems, values as strings */
} SpindleCreateState;

extern void spindle_create_begin(List *options, SpindleCreateState *outer);
extern void spindle_create_end(const SpindleCreateState *outer,
							   SpindleCreateState *mine);
extern void spindle_create_finish(SpindleCreateState *mine);
extern List *spindle_prepare_alter_other(AlterTableStmt *stmt, Oid relid);
extern bool spindle_alter_sets_options(AlterTableStmt *stmt);
extern List *spindle_prepare_alter(AlterTableStmt *stmt, Oid relid,
								   bool isTopLevel, List **saved,
								   bool *hidden);
extern bool spindle_alter_sets_storage_params(AlterTableStmt *stmt);
extern void spindle_alter_finish(Oid relid, List *opts, List *saved);
extern void spindle_check_altered(Oid relid);
extern void spindle_check_attached(List *attached, const char *parent);
extern void spindle_check_create_index(IndexStmt *stmt);
extern void spindle_check_reindex(ReindexStmt *stmt);
extern void spindle_check_alter_matview(AlterTableStmt *stmt);
extern List *spindle_truncate_targets(TruncateStmt *stmt);
extern void spindle_truncated(List *relids);
extern void spindle_refuse_drop_of_spindles(DropStmt *stmt);
/* objects a utility statement creates must not depend on a spindle */
extern int	spindle_new_objects_begin(void);
extern void spindle_new_objects_check(int from);
extern void spindle_new_objects_end(int from);

/* ---- maintenance.c: dropping spindles ---- */

struct VacuumParams;

/* What spindle_count_segment() finds in a spindle. */
typedef struct SpindleCounts
{
	int64		events;			/* line pointers ever used */
	int64		purged;			/* deleted (committed) or aborted inserts */
	int64		dead;			/* purged and seen by no snapshot */
	int64		live;			/* committed and not deleted */
	int64		busy;			/* inserter or deleter still running */
	int64		inserting;		/* of busy: inserter still running */
	TransactionId latest_removed;	/* standby conflict horizon of dead */
} SpindleCounts;

extern int	spindle_drops_per_transaction(void);
extern int	spindle_drop_droppable(Relation facade, int max_drops);
extern bool spindle_drop_held_back;
extern int	spindle_drop_droppable_stats(Relation facade, int64 *bytes_freed,
										 bool use_cache, int max_drops);
extern void spindle_ensure_ready(Relation facade);
extern void spindle_cleanup_dropped(Relation facade, bool force);
extern bool spindle_retire_dropped(Relation facade);
extern void spindle_vacuum_spindles(Relation facade, struct VacuumParams *params,
									BufferAccessStrategy bstrategy);
extern bool spindle_request_spindles(Relation facade, int count);
extern bool spindle_request_spindle_at(Relation facade, int64 first_no);
extern bool spindle_request_annex(Relation facade, int generation);
extern ErrorData *spindle_catch_and_abort(MemoryContext cxt);
extern void spindle_log_consumed_conflict(Relation facade,
										  TransactionId latest);
extern bool spindle_log_frozen_conflict(Oid queue_relid,
										TransactionId latest);
extern void spindle_count_cache_forget(Oid segment);
extern void spindle_count_segment(Relation facade, const SpindleEntry *sp,
								  Relation segrel, SpindleCounts *counts);

/* ---- detach.c: detached spindles ---- */

extern bool spindle_drops_fit(int nspindles);
extern void spindle_detach_segments(Oid facade, List *segments);
extern List *spindle_prepare_drop(Node *parsetree);
extern void spindle_check_dropped(List *facades);
extern int	spindle_drop_detached(int max_drops, bool wait, int64 *bytes_freed);
extern void spindle_worker_drop_detached(int64 *dropped, int64 *freed);

/* ---- ttl.c: time-to-live purge ---- */

extern int64 spindle_purge_older_than(Relation facade, TimestampTz cutoff);
extern Oid	spindle_referencing_table(Relation rel);
extern bool spindle_ttl_cutoff(const Interval *ttl, TimestampTz now,
							   TimestampTz *cutoff);

/* ---- disk_alarm.c: producers refused while free space is low ---- */

extern int	spindle_disk_free_limit;	/* GUC, in MB; 0 = off */
/* > 0 while consumers' own writes (dead-letter moves) run: not refused */
extern int	spindle_disk_alarm_exempt;
extern void spindle_disk_alarm_shmem_request(void);
extern void spindle_disk_alarm_shmem_startup(void);
extern void spindle_disk_alarm_check(Relation rel);
extern bool spindle_disk_alarm_low(Relation rel);
extern void spindle_disk_alarm_measure(void);

/* ---- hidden.c: events hidden by the consume log ---- */

typedef enum SpindleHideVerdict
{
	SPINDLE_HIDE_NO,			/* visible */
	SPINDLE_HIDE_YES,			/* hidden */
	SPINDLE_HIDE_RUNNING		/* SnapshotDirty: being consumed */
} SpindleHideVerdict;

/* What one reader (scan or fetch state) needs to apply the rule. */
typedef struct SpindleHide
{
	Relation	crel;			/* consumer relation; NULL: nothing hidden */
	Snapshot	snapshot;
	bool		by_spindle;		/* read each spindle's entries once */
	int64		spindle_no;		/* spindle whose ranges are read, or 0 */
	int			nranges;
	int64	   *ranges;			/* hidden [start, end) msg_ids, sorted */
	int			hint;			/* where the last search ended */
	int64		floor;			/* the log's floor when ranges were read */
	MemoryContext cxt;			/* where ranges live */
	bool		log;			/* the consume log is read */
	bool		reloc;			/* relocation entries (tree 3) are read */
	int			nmoved;
	int64	   *moved;			/* by_spindle: slots (k) of spindle_no
								 * hidden by relocation entries, sorted */
} SpindleHide;

extern void spindle_hide_begin(SpindleHide *h, Relation facade,
							   Snapshot snapshot, bool by_spindle);
extern bool spindle_hide_event(SpindleHide *h, SpindleEntry *sp, int64 k);
extern void spindle_hide_end(SpindleHide *h);
extern bool spindle_event_hidden(Relation facade, SpindleEntry *sp, int64 k,
								 Snapshot snapshot);
extern bool spindle_hidden_applies(Relation facade);
extern void spindle_hidden_invalidate(Oid relid);
extern TM_Result spindle_hidden_dml_check(Relation facade, SpindleEntry *sp,
										  int64 k, ItemPointer vtid,
										  LockWaitPolicy policy,
										  TM_FailureData *tmfd,
										  bool consumed);

/* ---- hooks: what the table layer tells the layers above ---- */

/*
 * The table layer never calls up into the queue or admin layers.  Where
 * they must learn of something that happens here, they register a hook at
 * start-up (_PG_init); a hook left NULL is skipped.  Each is called in the
 * backend that did the work, inside its transaction.
 */
typedef struct SpindleTableHooks
{
	/*
	 * events numbered event_no .. event_no + n - 1 are about to be formed:
	 * give them ids (the queue layer's msg_id is the event number)
	 */
	void		(*assign_ids) (Relation facade, TupleTableSlot **slots, int n,
							   int64 event_no, CommandId cid);
	/*
	 * the event number the inserter of slot supplied to be kept, or 0 to
	 * number it as usual (the queue layer: a msg_id, with
	 * spindle.keep_msg_ids on); kept if past every number handed out
	 */
	int64		(*kept_no) (Relation facade, TupleTableSlot *slot);
	/* events numbered event_no.. were placed at ptids of segment (cache) */
	void		(*placed) (Relation facade, Oid segment, int64 event_no,
						   int n, ItemPointer ptids, HeapTuple *tuples);
	/* an insert statement's events are all placed (wake consumers) */
	void		(*inserted) (Relation facade);
	/*
	 * the table was truncated: in this transaction (TRUNCATE), or not
	 * transactionally (a table created or truncated in this transaction)
	 */
	void		(*truncated) (Relation facade, bool transactional);
	/* work for the maintenance worker: a ready spindle was taken, ... */
	void		(*wake_worker) (void);
	/*
	 * the lowest event number a new spindle of the table may take, or 0
	 * (the queue layer: msg_ids are never given twice under one queue name)
	 */
	int64		(*event_floor) (Relation facade);
	/* spindles were created: the table's events are numbered below next */
	void		(*events_numbered) (Relation facade, int64 next);
	/*
	 * spindles that were never given an event were moved down to number
	 * from first_no, in this transaction, which holds ShareRowExclusiveLock
	 * on the facade (kept_ids.c): whatever passed numbers at or past
	 * first_no as holding no event must look at them again (the queue
	 * layer: its consumers' heads)
	 */
	void		(*numbers_lowered) (Relation facade, int64 first_no);
	/*
	 * TTL: a timestamptz column (attribute number) that must also be at or
	 * before the cutoff for an event to be purged, or 0 for none (the
	 * queue layer: visible_at, so that a delayed event lives ttl from its
	 * due time)
	 */
	AttrNumber	(*ttl_not_before) (Relation facade);
	/*
	 * TTL: the event numbers in [lo, hi) that must not be purged now, as
	 * *n sorted, disjoint [start, end) pairs in a palloc'd array (the
	 * queue layer: events under a lease that has not ended)
	 */
	int64	   *(*ttl_held) (Relation facade, int64 lo, int64 hi, int *n);
} SpindleTableHooks;

extern PGDLLIMPORT SpindleTableHooks spindle_table_hooks;

static inline void
spindle_wake_worker(void)
{
	if (spindle_table_hooks.wake_worker)
		spindle_table_hooks.wake_worker();
}

#endif							/* SPINDLE_TABLE_H */
