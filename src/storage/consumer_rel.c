/*-------------------------------------------------------------------------
 *
 * consumer_rel.c
 *	  The consumer relation of a queue, pg_spindle.c<queue table oid>: the
 *	  "spindle_meta" table access method, its metapage, its creation with
 *	  the queue table, and its renewal by TRUNCATE (docs/design.md,
 *	  "Consumer state that scales with what stays", section 3).
 *
 * The relation holds no tuples.  Its pages (consumer_page.c; the
 * straggler tree, consumer_tree.c; redo, consumer_xlog.c) hold the
 * consumers' state of the queue, written through the "spindle" resource
 * manager; the access method exists so that everything core does to every
 * relation of a database -- VACUUM, autovacuum, ANALYZE, VACUUM FREEZE,
 * VACUUM FULL, CLUSTER's copy, SET TABLESPACE -- reaches it and succeeds:
 * scans return no rows, ANALYZE samples no block, INSERT, UPDATE, DELETE,
 * COPY and index builds are refused (0A000).  relation_set_new_filenode
 * gives a valid relfrozenxid (RecentXmin, as heap) and an invalid
 * relminmxid (the relation never holds a MultiXact), and writes the
 * metapage (also into the init fork of an unlogged one, which a crash
 * reset copies into the main fork).  VACUUM has nothing to settle yet
 * (step 2 of the design): it only updates the relation's statistics and
 * moves relfrozenxid to its OldestXmin, so VACUUM and anti-wraparound
 * autovacuum never fail on it and datfrozenxid advances.
 *
 * The relation is made by spindle_consumer_rel_create, which the queue
 * layer calls after any CREATE of a queue table (create_queue, a restore,
 * a plain CREATE TABLE in spindle_q), owned by the bootstrap superuser,
 * with an INTERNAL dependency on the queue table: every drop of the table
 * (DROP TABLE, drop_queue, DROP SCHEMA ... CASCADE, DROP OWNED, DROP
 * EXTENSION ... CASCADE) drops it, and it cannot be dropped alone.  Schema
 * pg_spindle is not an extension member and pg_dump skips pg_* schemas, so
 * it is never dumped; a restore makes a new one with the restored table.
 * TRUNCATE of the queue table gives it a new relfilenode whose metapage
 * keeps only the counters (spindle_consumer_rel_truncate).
 *
 * Locks: creation runs with the new queue table held AccessExclusive by
 * its CREATE; TRUNCATE takes the consumer relation AccessExclusive while
 * its queue table is held so; the metapage is read under a share buffer
 * lock (writers: consumer_page.c, consumer_tree.c).
 *
 * Invariants: block 0 of the main fork (and of the init fork of an
 * unlogged relation) is always a valid metapage; assigned_max and
 * consumed_floor never go back, also across TRUNCATE and VACUUM FULL.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/multixact.h"
#include "access/relation.h"
#include "access/relscan.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xloginsert.h"
#include "catalog/dependency.h"
#include "catalog/heap.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_extension.h"
#include "catalog/storage.h"
#include "catalog/storage_xlog.h"
#include "commands/defrem.h"
#include "commands/extension.h"
#include "commands/progress.h"
#include "commands/tablecmds.h"
#include "commands/vacuum.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/smgr.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "storage/spindle_storage.h"


static TableAmRoutine meta_methods;
static bool meta_methods_ready = false;

/* ----------------------------------------------------------------
 * The metapage
 * ----------------------------------------------------------------
 */

/*
 * Initialise a metapage image in page: no free page, no tree, the given
 * counters.
 */
void
spindle_crel_init_metapage(Page page, int64 assigned_max, int64 consumed_floor)
{
	SpindleCrelMeta *meta;
	int			i;

	spindle_crel_init_page(page, SPINDLE_CPAGE_META, 0, 0);
	meta = SpindleCrelGetMeta(page);
	memset(meta, 0, sizeof(SpindleCrelMeta));
	meta->magic = SPINDLE_CREL_MAGIC;
	meta->version = SPINDLE_CREL_VERSION;
	meta->free_head = InvalidBlockNumber;
	meta->assigned_max = assigned_max;
	meta->consumed_floor = consumed_floor;
	for (i = 0; i < SPINDLE_CREL_MAX_TREES; i++)
		meta->trees[i] = InvalidBlockNumber;
	((PageHeader) page)->pd_lower =
		((char *) meta + sizeof(SpindleCrelMeta)) - (char *) page;
}

/* Write a fresh metapage as block 0 of a fork that is empty. */
static void
write_metapage(SMgrRelation srel, ForkNumber fork, bool wal,
			   int64 assigned_max, int64 consumed_floor)
{
	PGAlignedBlock buf;
	Page		page = (Page) buf.data;

	spindle_crel_init_metapage(page, assigned_max, consumed_floor);
	PageSetChecksumInplace(page, 0);
	smgrextend(srel, fork, 0, (char *) page, true);
	if (wal)
		log_newpage(&srel->smgr_rnode.node, fork, 0, page, true);
	smgrimmedsync(srel, fork);
}

/*
 * Check that the page in buf (locked by the caller) is a metapage of this
 * version; ERROR (data corrupted) otherwise.
 */
SpindleCrelMeta *
spindle_crel_check_meta(Relation crel, Buffer buf)
{
	Page		page = BufferGetPage(buf);
	SpindleCrelMeta *meta = SpindleCrelGetMeta(page);

	if (PageIsNew(page) ||
		!spindle_crel_page_is(page, SPINDLE_CPAGE_META, 0) ||
		meta->magic != SPINDLE_CREL_MAGIC ||
		meta->version != SPINDLE_CREL_VERSION)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("consumer relation \"%s\" has an invalid metapage",
						RelationGetRelationName(crel))));
	return meta;
}

/* The counters of the relation's metapage (read under a share lock). */
static void
read_counters(Relation crel, int64 *assigned_max, int64 *consumed_floor)
{
	Buffer		buf;
	SpindleCrelMeta *meta;

	*assigned_max = 0;
	*consumed_floor = 0;
	if (RelationGetNumberOfBlocks(crel) == 0)
		return;
	buf = ReadBuffer(crel, SPINDLE_CREL_METAPAGE);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	meta = spindle_crel_check_meta(crel, buf);
	*assigned_max = meta->assigned_max;
	*consumed_floor = meta->consumed_floor;
	UnlockReleaseBuffer(buf);
}

/* ----------------------------------------------------------------
 * The access method: no tuples
 * ----------------------------------------------------------------
 */

static void
refuse_dml(Relation rel)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("cannot change consumer relation \"%s\" with SQL",
					RelationGetRelationName(rel)),
			 errdetail("It holds the consumer state of a queue, written by spindle's queue calls only.")));
}

static const TupleTableSlotOps *
meta_slot_callbacks(Relation rel)
{
	return &TTSOpsVirtual;
}

static TableScanDesc
meta_scan_begin(Relation rel, Snapshot snapshot, int nkeys,
				struct ScanKeyData *key, ParallelTableScanDesc pscan,
				uint32 flags)
{
	TableScanDesc scan = palloc0(sizeof(TableScanDescData));

	scan->rs_rd = rel;
	scan->rs_snapshot = snapshot;
	scan->rs_nkeys = nkeys;
	scan->rs_flags = flags;
	scan->rs_parallel = pscan;
	return scan;
}

static void
meta_scan_end(TableScanDesc scan)
{
	pfree(scan);
}

static void
meta_scan_rescan(TableScanDesc scan, struct ScanKeyData *key,
				 bool set_params, bool allow_strat, bool allow_sync,
				 bool allow_pagemode)
{
}

/* Every scan (seq, TID range, bitmap, sample, analyze) finds nothing. */
static bool
meta_scan_getnextslot(TableScanDesc scan, ScanDirection direction,
					  TupleTableSlot *slot)
{
	ExecClearTuple(slot);
	return false;
}

static void
meta_scan_set_tidrange(TableScanDesc scan, ItemPointer mintid,
					   ItemPointer maxtid)
{
}

static IndexFetchTableData *
meta_index_fetch_begin(Relation rel)
{
	IndexFetchTableData *scan = palloc0(sizeof(IndexFetchTableData));

	scan->rel = rel;
	return scan;
}

static void
meta_index_fetch_reset(IndexFetchTableData *scan)
{
}

static void
meta_index_fetch_end(IndexFetchTableData *scan)
{
	pfree(scan);
}

static bool
meta_index_fetch_tuple(struct IndexFetchTableData *scan, ItemPointer tid,
					   Snapshot snapshot, TupleTableSlot *slot,
					   bool *call_again, bool *all_dead)
{
	*call_again = false;
	if (all_dead)
		*all_dead = false;
	return false;
}

static bool
meta_tuple_fetch_row_version(Relation rel, ItemPointer tid,
							 Snapshot snapshot, TupleTableSlot *slot)
{
	return false;
}

static bool
meta_tuple_tid_valid(TableScanDesc scan, ItemPointer tid)
{
	return false;
}

static void
meta_tuple_get_latest_tid(TableScanDesc scan, ItemPointer tid)
{
}

static bool
meta_tuple_satisfies_snapshot(Relation rel, TupleTableSlot *slot,
							  Snapshot snapshot)
{
	return false;
}

static TransactionId
meta_index_delete_tuples(Relation rel, TM_IndexDeleteOp *delstate)
{
	return InvalidTransactionId;
}

static void
meta_tuple_insert(Relation rel, TupleTableSlot *slot, CommandId cid,
				  int options, struct BulkInsertStateData *bistate)
{
	refuse_dml(rel);
}

static void
meta_tuple_insert_speculative(Relation rel, TupleTableSlot *slot,
							  CommandId cid, int options,
							  struct BulkInsertStateData *bistate,
							  uint32 specToken)
{
	refuse_dml(rel);
}

static void
meta_tuple_complete_speculative(Relation rel, TupleTableSlot *slot,
								uint32 specToken, bool succeeded)
{
	refuse_dml(rel);
}

static void
meta_multi_insert(Relation rel, TupleTableSlot **slots, int nslots,
				  CommandId cid, int options,
				  struct BulkInsertStateData *bistate)
{
	refuse_dml(rel);
}

static TM_Result
meta_tuple_delete(Relation rel, ItemPointer tid, CommandId cid,
				  Snapshot snapshot, Snapshot crosscheck, bool wait,
				  TM_FailureData *tmfd, bool changingPart)
{
	refuse_dml(rel);
	return TM_Invisible;		/* not reached */
}

static TM_Result
meta_tuple_update(Relation rel, ItemPointer otid, TupleTableSlot *slot,
				  CommandId cid, Snapshot snapshot, Snapshot crosscheck,
				  bool wait, TM_FailureData *tmfd, LockTupleMode *lockmode,
				  bool *update_indexes)
{
	refuse_dml(rel);
	return TM_Invisible;		/* not reached */
}

static TM_Result
meta_tuple_lock(Relation rel, ItemPointer tid, Snapshot snapshot,
				TupleTableSlot *slot, CommandId cid, LockTupleMode mode,
				LockWaitPolicy wait_policy, uint8 flags,
				TM_FailureData *tmfd)
{
	refuse_dml(rel);
	return TM_Invisible;		/* not reached */
}

static void
meta_finish_bulk_insert(Relation rel, int options)
{
}

/* ----------------------------------------------------------------
 * The access method: storage
 * ----------------------------------------------------------------
 */

/*
 * New storage: for a new relation (CREATE, CLUSTER's transient copy) a
 * fresh metapage; for TRUNCATE of an existing one, a metapage keeping the
 * old one's counters.  relfrozenxid is RecentXmin, as heap's: no xid
 * older than that can be written into the new storage.
 */
static void
meta_relation_set_new_filenode(Relation rel, const RelFileNode *newrnode,
							   char persistence, TransactionId *freezeXid,
							   MultiXactId *minmulti)
{
	SMgrRelation srel;
	int64		assigned_max = 0;
	int64		consumed_floor = 0;

	*freezeXid = RecentXmin;
	*minmulti = InvalidMultiXactId;

	if (SearchSysCacheExists1(RELOID, ObjectIdGetDatum(RelationGetRelid(rel))))
		read_counters(rel, &assigned_max, &consumed_floor);

	srel = RelationCreateStorage(*newrnode, persistence, true);
	write_metapage(srel, MAIN_FORKNUM,
				   persistence == RELPERSISTENCE_PERMANENT && XLogIsNeeded(),
				   assigned_max, consumed_floor);
	if (persistence == RELPERSISTENCE_UNLOGGED)
	{
		smgrcreate(srel, INIT_FORKNUM, false);
		log_smgrcreate(newrnode, INIT_FORKNUM);
		write_metapage(srel, INIT_FORKNUM, true, 0, 0);
	}
	smgrclose(srel);
}

/* TRUNCATE of a relation made in this transaction: the counters stay. */
static void
meta_relation_nontransactional_truncate(Relation rel)
{
	int64		assigned_max;
	int64		consumed_floor;

	read_counters(rel, &assigned_max, &consumed_floor);
	RelationTruncate(rel, 0);
	write_metapage(RelationGetSmgr(rel), MAIN_FORKNUM, RelationNeedsWAL(rel),
				   assigned_max, consumed_floor);
}

/*
 * ALTER TABLE SET TABLESPACE (of the relation itself, by a superuser):
 * copy every fork, page by page, as heap does.
 */
static void
meta_relation_copy_data(Relation rel, const RelFileNode *newrnode)
{
	SMgrRelation dstrel;
	ForkNumber	fork;

	FlushRelationBuffers(rel);
	dstrel = RelationCreateStorage(*newrnode, rel->rd_rel->relpersistence,
								   true);
	RelationCopyStorage(RelationGetSmgr(rel), dstrel, MAIN_FORKNUM,
						rel->rd_rel->relpersistence);
	for (fork = MAIN_FORKNUM + 1; fork <= MAX_FORKNUM; fork++)
	{
		if (!smgrexists(RelationGetSmgr(rel), fork))
			continue;
		smgrcreate(dstrel, fork, false);
		if (RelationIsPermanent(rel) ||
			(rel->rd_rel->relpersistence == RELPERSISTENCE_UNLOGGED &&
			 fork == INIT_FORKNUM))
			log_smgrcreate(newrnode, fork);
		RelationCopyStorage(RelationGetSmgr(rel), dstrel, fork,
							rel->rd_rel->relpersistence);
	}
	RelationDropStorage(rel);
	smgrclose(dstrel);
}

/*
 * VACUUM FULL and CLUSTER (a database-wide VACUUM FULL reaches the
 * relation): the pages are copied as they are into the new storage, which
 * core made in this transaction with a fresh metapage that the copy
 * replaces.  No tuple is counted.
 */
static void
meta_relation_copy_for_cluster(Relation OldTable, Relation NewTable,
							   Relation OldIndex, bool use_sort,
							   TransactionId OldestXmin,
							   TransactionId *xid_cutoff,
							   MultiXactId *multi_cutoff,
							   double *num_tuples, double *tups_vacuumed,
							   double *tups_recently_dead)
{
	TransactionId oldest_entry;

	/*
	 * The copy gets relfrozenxid *xid_cutoff: freeze the consume log's
	 * entries committed before it first, and keep it at or below the
	 * oldest xid an entry still holds (review of the writer side, finding
	 * 3: VACUUM FULL let clog go under an entry).
	 */
	oldest_entry = spindle_consume_log_freeze(OldTable, *xid_cutoff);
	if (TransactionIdIsNormal(oldest_entry) &&
		TransactionIdPrecedes(oldest_entry, *xid_cutoff))
		*xid_cutoff = oldest_entry;
	/* the relocation entries' too (relocation.c) */
	oldest_entry = spindle_reloc_freeze(OldTable, *xid_cutoff);
	if (TransactionIdIsNormal(oldest_entry) &&
		TransactionIdPrecedes(oldest_entry, *xid_cutoff))
		*xid_cutoff = oldest_entry;
	FlushRelationBuffers(OldTable);
	RelationTruncate(NewTable, 0);
	RelationCopyStorage(RelationGetSmgr(OldTable), RelationGetSmgr(NewTable),
						MAIN_FORKNUM, NewTable->rd_rel->relpersistence);
	*multi_cutoff = InvalidMultiXactId;
	*num_tuples = 0;
	*tups_vacuumed = 0;
	*tups_recently_dead = 0;
}

/*
 * VACUUM (manual, autovacuum, anti-wraparound) of a consumer relation.
 * The consume log's entries and the relocation entries are frozen
 * (committed before the freeze limit) or removed (aborted), and
 * relfrozenxid moves to the vacuum's OldestXmin or to the oldest xid an
 * entry still holds, if older (consume_log.c, relocation.c).  The caller
 * holds ShareUpdateExclusiveLock.
 */
static void
meta_relation_vacuum(Relation rel, struct VacuumParams *params,
					 BufferAccessStrategy bstrategy)
{
	TransactionId oldest_xmin;
	MultiXactId oldest_mxact;
	TransactionId freeze_limit;
	MultiXactId multi_cutoff;
	TransactionId oldest_entry;
	BlockNumber nblocks = RelationGetNumberOfBlocks(rel);

	(void) vacuum_set_xid_limits(rel,
								 params->freeze_min_age,
								 params->freeze_table_age,
								 params->multixact_freeze_min_age,
								 params->multixact_freeze_table_age,
								 &oldest_xmin, &oldest_mxact,
								 &freeze_limit, &multi_cutoff);
	/* the consume log's entries keep their xids' clog */
	oldest_entry = spindle_consume_log_freeze(rel, freeze_limit);
	if (TransactionIdIsNormal(oldest_entry) &&
		TransactionIdPrecedes(oldest_entry, oldest_xmin))
		oldest_xmin = oldest_entry;
	/* and the relocation entries theirs (relocation.c) */
	oldest_entry = spindle_reloc_freeze(rel, freeze_limit);
	if (TransactionIdIsNormal(oldest_entry) &&
		TransactionIdPrecedes(oldest_entry, oldest_xmin))
		oldest_xmin = oldest_entry;
	vac_update_relstats(rel, nblocks, 0, 0, false, oldest_xmin,
						InvalidMultiXactId, NULL, NULL, false);
	pgstat_report_vacuum(RelationGetRelid(rel), rel->rd_rel->relisshared,
						 0, 0);
}

/* ANALYZE: no block holds a tuple (the metapage and tree pages). */
static bool
meta_scan_analyze_next_block(TableScanDesc scan, BlockNumber blockno,
							 BufferAccessStrategy bstrategy)
{
	return false;
}

static bool
meta_scan_analyze_next_tuple(TableScanDesc scan, TransactionId OldestXmin,
							 double *liverows, double *deadrows,
							 TupleTableSlot *slot)
{
	return false;
}

static double
meta_index_build_range_scan(Relation table_rel, Relation index_rel,
							struct IndexInfo *index_info, bool allow_sync,
							bool anyvisible, bool progress,
							BlockNumber start_blockno, BlockNumber numblocks,
							IndexBuildCallback callback, void *callback_state,
							TableScanDesc scan)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("cannot create an index on consumer relation \"%s\"",
					RelationGetRelationName(table_rel))));
	return 0;					/* not reached */
}

static void
meta_index_validate_scan(Relation table_rel, Relation index_rel,
						 struct IndexInfo *index_info, Snapshot snapshot,
						 struct ValidateIndexState *state)
{
	meta_index_build_range_scan(table_rel, index_rel, index_info, false,
								false, false, 0, 0, NULL, NULL, NULL);
}

static bool
meta_relation_needs_toast_table(Relation rel)
{
	return false;
}

static Oid
meta_relation_toast_am(Relation rel)
{
	return HEAP_TABLE_AM_OID;
}

static void
meta_relation_estimate_size(Relation rel, int32 *attr_widths,
							BlockNumber *pages, double *tuples,
							double *allvisfrac)
{
	*pages = RelationGetNumberOfBlocks(rel);
	*tuples = 0;
	*allvisfrac = 0;
}

static bool
meta_scan_bitmap_next_block(TableScanDesc scan,
							struct TBMIterateResult *tbmres)
{
	return false;
}

static bool
meta_scan_bitmap_next_tuple(TableScanDesc scan,
							struct TBMIterateResult *tbmres,
							TupleTableSlot *slot)
{
	return false;
}

static bool
meta_scan_sample_next_block(TableScanDesc scan,
							struct SampleScanState *scanstate)
{
	return false;
}

static bool
meta_scan_sample_next_tuple(TableScanDesc scan,
							struct SampleScanState *scanstate,
							TupleTableSlot *slot)
{
	return false;
}

/* The routine of the spindle_meta access method (its handler's result). */
const TableAmRoutine *
spindle_meta_routine(void)
{
	TableAmRoutine *r = &meta_methods;

	if (meta_methods_ready)
		return r;
	memset(r, 0, sizeof(TableAmRoutine));
	r->type = T_TableAmRoutine;
	r->slot_callbacks = meta_slot_callbacks;
	r->scan_begin = meta_scan_begin;
	r->scan_end = meta_scan_end;
	r->scan_rescan = meta_scan_rescan;
	r->scan_getnextslot = meta_scan_getnextslot;
	r->scan_set_tidrange = meta_scan_set_tidrange;
	r->scan_getnextslot_tidrange = meta_scan_getnextslot;
	r->parallelscan_estimate = table_block_parallelscan_estimate;
	r->parallelscan_initialize = table_block_parallelscan_initialize;
	r->parallelscan_reinitialize = table_block_parallelscan_reinitialize;
	r->index_fetch_begin = meta_index_fetch_begin;
	r->index_fetch_reset = meta_index_fetch_reset;
	r->index_fetch_end = meta_index_fetch_end;
	r->index_fetch_tuple = meta_index_fetch_tuple;
	r->tuple_fetch_row_version = meta_tuple_fetch_row_version;
	r->tuple_tid_valid = meta_tuple_tid_valid;
	r->tuple_get_latest_tid = meta_tuple_get_latest_tid;
	r->tuple_satisfies_snapshot = meta_tuple_satisfies_snapshot;
	r->index_delete_tuples = meta_index_delete_tuples;
	r->tuple_insert = meta_tuple_insert;
	r->tuple_insert_speculative = meta_tuple_insert_speculative;
	r->tuple_complete_speculative = meta_tuple_complete_speculative;
	r->multi_insert = meta_multi_insert;
	r->tuple_delete = meta_tuple_delete;
	r->tuple_update = meta_tuple_update;
	r->tuple_lock = meta_tuple_lock;
	r->finish_bulk_insert = meta_finish_bulk_insert;
	r->relation_set_new_filenode = meta_relation_set_new_filenode;
	r->relation_nontransactional_truncate = meta_relation_nontransactional_truncate;
	r->relation_copy_data = meta_relation_copy_data;
	r->relation_copy_for_cluster = meta_relation_copy_for_cluster;
	r->relation_vacuum = meta_relation_vacuum;
	r->scan_analyze_next_block = meta_scan_analyze_next_block;
	r->scan_analyze_next_tuple = meta_scan_analyze_next_tuple;
	r->index_build_range_scan = meta_index_build_range_scan;
	r->index_validate_scan = meta_index_validate_scan;
	r->relation_size = table_block_relation_size;
	r->relation_needs_toast_table = meta_relation_needs_toast_table;
	r->relation_toast_am = meta_relation_toast_am;
	r->relation_fetch_toast_slice = NULL;
	r->relation_estimate_size = meta_relation_estimate_size;
	r->scan_bitmap_next_block = meta_scan_bitmap_next_block;
	r->scan_bitmap_next_tuple = meta_scan_bitmap_next_tuple;
	r->scan_sample_next_block = meta_scan_sample_next_block;
	r->scan_sample_next_tuple = meta_scan_sample_next_tuple;
	meta_methods_ready = true;
	return r;
}

/* ----------------------------------------------------------------
 * Creation, lookup, TRUNCATE
 * ----------------------------------------------------------------
 */

/* OID of access method spindle_meta, or InvalidOid before the extension */
static Oid
meta_am_oid(void)
{
	return get_table_am_oid("spindle_meta", true);
}

/* The name of the consumer relation of queue table relid: c<relid>. */
static void
crel_name(Oid queue_relid, char *name)
{
	snprintf(name, NAMEDATALEN, "c%u", queue_relid);
}

/*
 * The consumer relation of queue table queue_relid, or InvalidOid if it
 * has none.
 */
Oid
spindle_consumer_rel_oid(Oid queue_relid)
{
	char		name[NAMEDATALEN];
	Oid			nsp = get_namespace_oid(SPINDLE_STORAGE_SCHEMA, true);

	if (!OidIsValid(nsp))
		return InvalidOid;
	crel_name(queue_relid, name);
	return get_relname_relid(name, nsp);
}

/*
 * The queue table whose consumer relation crel is (its name says it), or
 * InvalidOid if crel's name is not one of a consumer relation.
 */
Oid
spindle_consumer_rel_queue(Relation crel)
{
	Oid			queue;
	char		name[NAMEDATALEN];

	if (sscanf(RelationGetRelationName(crel), "c%u", &queue) != 1)
		return InvalidOid;
	crel_name(queue, name);
	if (strcmp(name, RelationGetRelationName(crel)) != 0)
		return InvalidOid;
	return queue;
}

/*
 * Make the consumer relation of the queue table `queue` (just created by
 * this transaction, held AccessExclusive): pg_spindle.c<oid>, no columns,
 * access method spindle_meta, the table's persistence and tablespace,
 * owned by the bootstrap superuser, INTERNAL dependency on the table, no
 * member of an extension being created.  Does nothing if it exists.
 */
Oid
spindle_consumer_rel_create(Relation queue)
{
	char		name[NAMEDATALEN];
	Oid			nsp = get_namespace_oid(SPINDLE_STORAGE_SCHEMA, false);
	Oid			am = meta_am_oid();
	Oid			crel;
	ObjectAddress craddr,
				qaddr;

	if (!OidIsValid(am))
		return InvalidOid;
	crel_name(RelationGetRelid(queue), name);
	crel = get_relname_relid(name, nsp);
	if (OidIsValid(crel))
		return crel;
	crel = heap_create_with_catalog(name, nsp,
									queue->rd_rel->reltablespace,
									InvalidOid, InvalidOid, InvalidOid,
									BOOTSTRAP_SUPERUSERID, am,
									CreateTemplateTupleDesc(0), NIL,
									RELKIND_RELATION,
									queue->rd_rel->relpersistence,
									false, false, ONCOMMIT_NOOP,
									(Datum) 0, false, true, true,
									InvalidOid, NULL);
	ObjectAddressSet(craddr, RelationRelationId, crel);
	ObjectAddressSet(qaddr, RelationRelationId, RelationGetRelid(queue));
	recordDependencyOn(&craddr, &qaddr, DEPENDENCY_INTERNAL);
	if (creating_extension)
		deleteDependencyRecordsForClass(RelationRelationId, crel,
										ExtensionRelationId,
										DEPENDENCY_EXTENSION);
	CommandCounterIncrement();
	return crel;
}

/*
 * TRUNCATE of queue table queue_relid (held AccessExclusive by this
 * transaction): its consumer relation gets a new relfilenode whose
 * metapage keeps only the counters.  Rolled back with the TRUNCATE.
 */
void
spindle_consumer_rel_truncate(Oid queue_relid)
{
	Oid			croid = spindle_consumer_rel_oid(queue_relid);
	Relation	crel;

	if (!OidIsValid(croid))
		return;
	crel = relation_open(croid, AccessExclusiveLock);
	CheckTableNotInUse(crel, "TRUNCATE");
	RelationSetNewRelfilenode(crel, crel->rd_rel->relpersistence);
	relation_close(crel, NoLock);
}
