/*-------------------------------------------------------------------------
 *
 * segment_am.c
 *	  The "spindle_segment" table access method: storage of one spindle.
 *
 * A spindle is a heap relation in every respect but one: no VACUUM may
 * ever reclaim one of its slots.  Heap VACUUM on a relation without
 * indexes turns dead line pointers into unused ones in a single pass, and
 * the next insert reuses them, so an index entry of the facade could come
 * to mean another event.  Giving spindles an access method of their own
 * makes every VACUUM of them -- manual, autovacuum, anti-wraparound --
 * come here instead of to heap_vacuum_rel.  Direct DML on a spindle and
 * rewrites of one are refused (see refuse_direct_dml); all else is
 * heapam's.
 *
 * Locks: the caller's (VACUUM's ShareUpdateExclusiveLock on the spindle,
 * or what core takes for the refused commands; the relation extension lock
 * to give a filled spindle its first page); VACUUM of a spindle freezes
 * its tuples page by page under the buffer's exclusive lock, as heap's
 * freeze does, and never prunes or truncates.
 *
 * Invariants: a line pointer of a spindle, once used, is never made
 * unused while the spindle exists (its events' virtual TIDs may still be
 * in the facade's indexes), and old events are frozen before wraparound
 * without reclaiming their slots (docs/design.md, "VACUUM and
 * wraparound").
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/tableam.h"
#include "catalog/pg_am_d.h"
#include "access/heapam_xlog.h"
#include "access/multixact.h"
#include "commands/vacuum.h"
#include "miscadmin.h"
#include "access/xloginsert.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "fmgr.h"

#include "storage/spindle_storage.h"


static TableAmRoutine segment_methods;
static bool segment_methods_ready = false;

/*
 * Give spindle seg a first page, empty, if it has none: an insert keeping
 * a supplied event number fills the spindles before the one it lands in
 * (kept_ids.c, fill_before), and their slot counters, which know it, do
 * not outlive a restart; a counter rebuilt from disk finds a spindle full
 * when the spindle after it has pages (count_from_disk in slots.c).  The
 * page says so for the spindle before seg, WAL-logged before that one's
 * last slots are skipped.  The caller holds the spindle locked; takes its
 * relation extension lock.
 */
void
spindle_segment_ensure_page(Relation seg)
{
	if (RelationGetNumberOfBlocks(seg) > 0)
		return;
	LockRelationForExtension(seg, ExclusiveLock);
	if (RelationGetNumberOfBlocks(seg) == 0)
	{
		Buffer		buf = ReadBufferExtended(seg, MAIN_FORKNUM, P_NEW,
											 RBM_ZERO_AND_LOCK, NULL);

		START_CRIT_SECTION();
		PageInit(BufferGetPage(buf), BufferGetPageSize(buf), 0);
		MarkBufferDirty(buf);
		if (RelationNeedsWAL(seg))
			log_newpage_buffer(buf, true);
		END_CRIT_SECTION();
		UnlockReleaseBuffer(buf);
	}
	UnlockRelationForExtension(seg, ExclusiveLock);
}

/*
 * VACUUM of one spindle: make it safe across transaction ID wraparound
 * without giving back a single slot.
 *
 * Each page is pruned (heap_page_prune): dead events lose their storage and
 * their line pointer becomes LP_DEAD -- never LP_UNUSED, since no event in
 * a spindle is heap-only -- so no xid is left on them.  The remaining
 * tuples are frozen as lazy VACUUM freezes them (heap_prepare_freeze_tuple,
 * log_heap_freeze), and pg_class.relfrozenxid/relminmxid advance, which
 * satisfies anti-wraparound autovacuum.  Pages are never truncated, line
 * pointers never reclaimed: a spindle only shrinks by being dropped.
 *
 * The caller holds ShareUpdateExclusiveLock on the spindle.  Every page is
 * visited (a spindle is at most 1 GB), so the new horizons are exact.
 */
void
spindle_segment_vacuum(Relation seg, struct VacuumParams *params,
					   BufferAccessStrategy bstrategy)
{
	TransactionId oldest_xmin;
	MultiXactId oldest_mxact;
	TransactionId freeze_limit;
	MultiXactId multi_cutoff;
	TransactionId new_frozenxid;
	MultiXactId new_minmulti;
	GlobalVisState *vistest;
	BlockNumber nblocks;
	BlockNumber blk;
	double		live = 0;

	(void) vacuum_set_xid_limits(seg,
								 params->freeze_min_age,
								 params->freeze_table_age,
								 params->multixact_freeze_min_age,
								 params->multixact_freeze_table_age,
								 &oldest_xmin, &oldest_mxact,
								 &freeze_limit, &multi_cutoff);
	vistest = GlobalVisTestFor(seg);
	new_frozenxid = oldest_xmin;
	new_minmulti = oldest_mxact;
	nblocks = RelationGetNumberOfBlocks(seg);

	for (blk = 0; blk < nblocks; blk++)
	{
		Buffer		buf;
		Page		page;
		OffsetNumber off,
					maxoff;
		int			nnewlpdead;
		int			nfrozen = 0;
		xl_heap_freeze_tuple frozen[MaxHeapTuplesPerPage];

		vacuum_delay_point();
		buf = ReadBufferExtended(seg, MAIN_FORKNUM, blk, RBM_NORMAL, bstrategy);
		LockBufferForCleanup(buf);
		page = BufferGetPage(buf);
		if (PageIsNew(page) || PageIsEmpty(page))
		{
			UnlockReleaseBuffer(buf);
			continue;
		}

		(void) heap_page_prune(seg, buf, oldest_xmin, vistest,
							   InvalidTransactionId, 0, &nnewlpdead, NULL);

		maxoff = PageGetMaxOffsetNumber(page);
		for (off = FirstOffsetNumber; off <= maxoff; off++)
		{
			ItemId		itemid = PageGetItemId(page, off);
			HeapTupleHeader htup;
			bool		totally_frozen;

			if (!ItemIdIsNormal(itemid))
				continue;
			htup = (HeapTupleHeader) PageGetItem(page, itemid);
			live++;
			if (heap_prepare_freeze_tuple(htup,
										  seg->rd_rel->relfrozenxid,
										  seg->rd_rel->relminmxid,
										  freeze_limit, multi_cutoff,
										  &frozen[nfrozen], &totally_frozen,
										  &new_frozenxid, &new_minmulti))
				frozen[nfrozen++].offset = off;
		}

		if (nfrozen > 0)
		{
			int			i;

			START_CRIT_SECTION();
			MarkBufferDirty(buf);
			for (i = 0; i < nfrozen; i++)
			{
				ItemId		itemid = PageGetItemId(page, frozen[i].offset);

				heap_execute_freeze_tuple((HeapTupleHeader) PageGetItem(page, itemid),
										  &frozen[i]);
			}
			if (RelationNeedsWAL(seg))
			{
				XLogRecPtr	recptr = log_heap_freeze(seg, buf, freeze_limit,
													 frozen, nfrozen);

				PageSetLSN(page, recptr);
			}
			END_CRIT_SECTION();
		}
		UnlockReleaseBuffer(buf);
	}

	vac_update_relstats(seg, nblocks, live, 0, false,
						new_frozenxid, new_minmulti, NULL, NULL, false);
}

/*
 * Index builds: heapam's build scan is what we want for each spindle, but
 * it reads with heap_getnext(), which refuses any relation whose routine
 * is not heapam's own.  For the duration of that one call the spindle's
 * relcache entry carries heapam's routine; the callbacks are the same
 * functions either way, except VACUUM, which a build never calls.
 */
double
spindle_segment_index_build(Relation seg, Relation index_rel,
							struct IndexInfo *index_info, bool anyvisible,
							BlockNumber start_blockno, BlockNumber numblocks,
							IndexBuildCallback callback, void *callback_state)
{
	const TableAmRoutine *own = seg->rd_tableam;
	double		result = 0;

	seg->rd_tableam = GetHeapamTableAmRoutine();
	PG_TRY();
	{
		result = seg->rd_tableam->index_build_range_scan(seg, index_rel,
														 index_info, false,
														 anyvisible, false,
														 start_blockno,
														 numblocks,
														 callback,
														 callback_state,
														 NULL);
	}
	PG_FINALLY();
	{
		seg->rd_tableam = own;
	}
	PG_END_TRY();
	return result;
}

/* A spindle's TOAST table is plain heap. */
static Oid
segment_relation_toast_am(Relation rel)
{
	return HEAP_TABLE_AM_OID;
}

static void
segment_relation_vacuum(Relation rel, struct VacuumParams *params,
						BufferAccessStrategy bstrategy)
{
	spindle_segment_vacuum(rel, params, bstrategy);
}

/*
 * A rewrite (VACUUM FULL or CLUSTER reaching a spindle itself, as a
 * database-wide VACUUM FULL does) would move its events to new TIDs that
 * the table's slot map does not know: every read would then fail.  The
 * table's own VACUUM FULL never rewrites its spindles.
 */
static void
segment_relation_copy_for_cluster(Relation OldTable, Relation NewTable,
								  Relation OldIndex, bool use_sort,
								  TransactionId OldestXmin,
								  TransactionId *xid_cutoff,
								  MultiXactId *multi_cutoff,
								  double *num_tuples,
								  double *tups_vacuumed,
								  double *tups_recently_dead)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("spindle \"%s\" cannot be rewritten",
					RelationGetRelationName(OldTable)),
			 errdetail("A spindle's events must keep their place: its table maps them by position."),
			 errhint("Run VACUUM FULL or CLUSTER on tables by name; a spindle table's own VACUUM FULL does not rewrite its spindles.")));
}

/*
 * DML on a spindle itself (INSERT, COPY FROM, UPDATE, DELETE, SELECT ...
 * FOR UPDATE naming pg_spindle.s<table>_<n>) is refused, whoever asks: a
 * row written there carries no slot number and no slot map entry, breaks
 * the capacity and makes every read of its table fail, and a row changed
 * or locked there escapes the table's bookkeeping.  The facade reaches its
 * spindles through heapam's functions directly (facade_am.c), never through
 * these callbacks, so only such statements come here.  (Spindles belong
 * to the bootstrap superuser, so this matters to superusers and to
 * members of pg_write_all_data.)
 */
static void
refuse_direct_dml(Relation rel)
{
	Oid			facade;
	long long	spindle_no;
	char	   *table = NULL;

	/* name the table and the spindle, as the user knows them */
	if (sscanf(RelationGetRelationName(rel), "s%u_%lld", &facade,
			   &spindle_no) == 2)
	{
		char	   *nsp = get_namespace_name(get_rel_namespace(facade));
		char	   *name = get_rel_name(facade);

		if (nsp != NULL && name != NULL)
			table = quote_qualified_identifier(nsp, name);
	}
	if (table != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("cannot change spindle %lld of table %s directly",
						spindle_no, table),
				 errdetail("A spindle holds the events of a spindle table and is changed only through it."),
				 errhint("Insert, update, delete or lock the events through their spindle table.")));
	ereport(ERROR,
			(errcode(ERRCODE_WRONG_OBJECT_TYPE),
			 errmsg("cannot change spindle \"%s\" directly",
					RelationGetRelationName(rel)),
			 errdetail("A spindle holds the events of a spindle table and is changed only through it."),
			 errhint("Insert, update, delete or lock the events through their spindle table.")));
}

static void
segment_tuple_insert(Relation rel, TupleTableSlot *slot, CommandId cid,
					 int options, struct BulkInsertStateData *bistate)
{
	refuse_direct_dml(rel);
}

static void
segment_tuple_insert_speculative(Relation rel, TupleTableSlot *slot,
								 CommandId cid, int options,
								 struct BulkInsertStateData *bistate,
								 uint32 specToken)
{
	refuse_direct_dml(rel);
}

static void
segment_multi_insert(Relation rel, TupleTableSlot **slots, int nslots,
					 CommandId cid, int options,
					 struct BulkInsertStateData *bistate)
{
	refuse_direct_dml(rel);
}

static TM_Result
segment_tuple_delete(Relation rel, ItemPointer tid, CommandId cid,
					 Snapshot snapshot, Snapshot crosscheck, bool wait,
					 TM_FailureData *tmfd, bool changingPart)
{
	refuse_direct_dml(rel);
	return TM_Invisible;		/* keep the compiler quiet */
}

static TM_Result
segment_tuple_update(Relation rel, ItemPointer otid, TupleTableSlot *slot,
					 CommandId cid, Snapshot snapshot, Snapshot crosscheck,
					 bool wait, TM_FailureData *tmfd, LockTupleMode *lockmode,
					 bool *update_indexes)
{
	refuse_direct_dml(rel);
	return TM_Invisible;
}

static TM_Result
segment_tuple_lock(Relation rel, ItemPointer tid, Snapshot snapshot,
				   TupleTableSlot *slot, CommandId cid, LockTupleMode mode,
				   LockWaitPolicy wait_policy, uint8 flags,
				   TM_FailureData *tmfd)
{
	refuse_direct_dml(rel);
	return TM_Invisible;
}

const TableAmRoutine *
spindle_segment_routine(void)
{
	if (!segment_methods_ready)
	{
		segment_methods = *GetHeapamTableAmRoutine();
		segment_methods.relation_vacuum = segment_relation_vacuum;
		segment_methods.relation_toast_am = segment_relation_toast_am;
		segment_methods.relation_copy_for_cluster = segment_relation_copy_for_cluster;
		segment_methods.tuple_insert = segment_tuple_insert;
		segment_methods.tuple_insert_speculative = segment_tuple_insert_speculative;
		segment_methods.multi_insert = segment_multi_insert;
		segment_methods.tuple_delete = segment_tuple_delete;
		segment_methods.tuple_update = segment_tuple_update;
		segment_methods.tuple_lock = segment_tuple_lock;
		segment_methods_ready = true;
	}
	return &segment_methods;
}
