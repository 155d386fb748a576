/*-------------------------------------------------------------------------
 *
 * consumer_test.c
 *	  Test-only SQL functions spindle._run_*() that drive the straggler
 *	  tree of a queue's consumer relation (consumer_tree.c) -- upsert,
 *	  remove, lookup, scan, verify, drop --, the test-only GUCs
 *	  spindle.test_tree_fanout, spindle.test_split_crash and
 *	  spindle.test_load_crash that the tree
 *	  reads (docs/design.md, "Consumer state that scales with what stays",
 *	  section 4, "Step 2 as built"), and spindle.test_pause, a named point
 *	  where a call waits while a test holds an advisory lock
 *	  (spindle_test_pause).
 *
 * spindle._run_drop() frees a whole tree (FREE per page, consumer_page.c):
 * the tree never deletes a page alone, so this is what exercises deferred
 * reuse in step 2.
 *
 * Locks.  Every function is for superusers only and holds the queue table
 * AccessShareLock.  Writers (upsert, remove, drop) are refused during
 * recovery, hold the consumer relation RowExclusiveLock and take the
 * tree's writer lock (LockPage with the subscription number as block
 * number, ExclusiveLock) until they return; readers (lookup, scan) hold
 * the relation AccessShareLock and read as any reader of the tree, one
 * buffer lock at a time.  Verify takes the writer lock in ShareLock on a
 * primary, so that no writer changes the tree while it walks it; on a
 * standby it reads as any reader.  Drop walks the tree under the writer
 * lock, then names no tree in the metapage first, so that readers
 * restarting find none (spindle_tree_drop).
 *
 * Invariants: none of their own; verify lists in its result, rather than
 * raising an error, where the tree breaks the invariants consumer_tree.c
 * keeps.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xlog.h"
#include "catalog/pg_type_d.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "storage/spindle_storage.h"

PG_FUNCTION_INFO_V1(spindle_run_upsert);
PG_FUNCTION_INFO_V1(spindle_run_remove);
PG_FUNCTION_INFO_V1(spindle_run_lookup);
PG_FUNCTION_INFO_V1(spindle_run_scan);
PG_FUNCTION_INFO_V1(spindle_run_verify);
PG_FUNCTION_INFO_V1(spindle_run_drop);

int			spindle_test_tree_fanout = 0;
bool		spindle_test_split_crash = false;
bool		spindle_test_load_crash = false;
static char *spindle_test_pause_at = NULL;

/* ----------------------------------------------------------------
 * The test-only GUCs; opening a tree
 * ----------------------------------------------------------------
 */

/* Define the test-only GUCs (from _PG_init). */
void
spindle_crel_define_gucs(void)
{
	DefineCustomIntVariable("spindle.test_tree_fanout",
							"Test only: items a consumer tree page takes before it is split.",
							"0 means as many as fit.",
							&spindle_test_tree_fanout,
							0, 0, 1000,
							PGC_SUSET, GUC_NOT_IN_SAMPLE,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("spindle.test_split_crash",
							 "Test only: PANIC after a consumer tree page's SPLIT record, before INSERT_UPPER.",
							 NULL,
							 &spindle_test_split_crash,
							 false,
							 PGC_SUSET, GUC_NOT_IN_SAMPLE,
							 NULL, NULL, NULL);
	DefineCustomBoolVariable("spindle.test_load_crash",
							 "Test only: PANIC in the bulk load of a consumer tree being rebuilt, once its leaves are written.",
							 NULL,
							 &spindle_test_load_crash,
							 false,
							 PGC_SUSET, GUC_NOT_IN_SAMPLE,
							 NULL, NULL, NULL);
	DefineCustomStringVariable("spindle.test_pause",
							   "Test only: a named point where calls wait while pg_advisory_lock(4242, 1) is held.",
							   "Empty: no pause.  Points: consume_locate (a consumer holding its directory, before it finds its events), consume_examine (between finding its events and examining their pages), reloc_follow (a consumer between two links of a chain of moves), tree_root_N (a reader of consumer tree N between the metapage and the tree's meta block), tree_retire_half and tree_reclaim_half (a writer halfway through giving back the pages of a tree swapped out or dropped, or of one a crash left set aside).",
							   &spindle_test_pause_at,
							   "",
							   PGC_SUSET, GUC_NOT_IN_SAMPLE,
							   NULL, NULL, NULL);
}

/*
 * If spindle.test_pause names point, wait until no session holds the
 * advisory lock (4242, 1) (pg_advisory_lock(int, int)'s tag, which takes
 * it in ExclusiveLock mode; this takes it in ShareLock mode and lets go
 * at once), so that an isolation test can stop a call at a named point.
 * The caller holds no buffer lock and no LWLock: the wait is a
 * heavyweight lock wait, which the isolation tester sees.
 */
void
spindle_test_pause(const char *point)
{
	LOCKTAG		tag;

	if (spindle_test_pause_at == NULL || spindle_test_pause_at[0] == '\0' ||
		strcmp(spindle_test_pause_at, point) != 0)
		return;
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 4242, 1, 2);
	(void) LockAcquire(&tag, ShareLock, false, false);
	LockRelease(&tag, ShareLock, false);
}

/*
 * spindle_test_pause at point tree_root_<sub>: a reader of tree sub
 * between reading the metapage's pointer to the tree and reading the tree
 * meta block it names (consumer_tree.c, spindle_tree_root).  Unlike the
 * other points, a reader may get here holding an event page's buffer lock
 * (tree 3 is probed under it): whatever needs that page (VACUUM of the
 * spindle) waits as long as the pause.  For isolation tests that know it.
 */
void
spindle_test_pause_tree(uint32 sub)
{
	char		point[32];

	if (spindle_test_pause_at == NULL || spindle_test_pause_at[0] == '\0')
		return;
	snprintf(point, sizeof(point), "tree_root_%u", sub);
	spindle_test_pause(point);
}

/*
 * Open tree `sub` of queue table queue's consumer relation for a test
 * function: superusers only; writers refused during recovery and take the
 * tree's writer lock.  The queue table is held AccessShare, the consumer
 * relation in lockmode.
 */
static void
test_open(Oid queue, int32 sub, bool writer, SpindleTree *t)
{
	Oid			croid;

	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("only superusers may call spindle's consumer tree test functions")));
	if (writer && RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot change a consumer tree during recovery")));
	if (sub < 0 || sub >= SPINDLE_CREL_MAX_TREES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("subscription number must be between 0 and %d",
						SPINDLE_CREL_MAX_TREES - 1)));
	LockRelationOid(queue, AccessShareLock);
	croid = spindle_consumer_rel_oid(queue);
	if (!OidIsValid(croid))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("relation \"%s\" has no consumer relation",
						get_rel_name(queue)),
				 errhint("Only queue tables have one.")));
	spindle_tree_init(t, relation_open(croid, writer ? RowExclusiveLock :
										AccessShareLock),
					  (uint32) sub, writer);
	if (writer)
		LockPage(t->crel, t->sub, ExclusiveLock);
}

/*
 * Let go of the tree's writer lock, if taken; the relation stays locked
 * to the end of the transaction.
 */
static void
test_close(SpindleTree *t)
{
	if (t->writer)
		UnlockPage(t->crel, t->sub, ExclusiveLock);
	relation_close(t->crel, NoLock);
}

/*
 * spindle._run_upsert(queue, sub, first, len, kind, due, read_count,
 * awaited, count, stride): upsert `count` runs of len ids, the i-th at
 * first + i * stride.  Returns count.
 */
Datum
spindle_run_upsert(PG_FUNCTION_ARGS)
{
	SpindleTree t;
	SpindleRun	run;
	int64		first;
	int64		len;
	int32		count;
	int64		stride;
	int32		i;

	for (i = 0; i < 10; i++)
		if (i != 5 && PG_ARGISNULL(i))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("only due may be null")));
	first = PG_GETARG_INT64(2);
	len = PG_GETARG_INT64(3);
	count = PG_GETARG_INT32(8);
	stride = PG_GETARG_INT64(9);
	if (len <= 0 || len > PG_UINT32_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a run holds 1 to %u ids", PG_UINT32_MAX)));
	if (PG_GETARG_INT32(4) < SPINDLE_RUN_READY ||
		PG_GETARG_INT32(4) > SPINDLE_RUN_CONSUMED)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("run kind must be between %d and %d",
						SPINDLE_RUN_READY, SPINDLE_RUN_CONSUMED)));
	memset(&run, 0, sizeof(run));
	run.len = (uint32) len;
	run.kind = (uint16) PG_GETARG_INT32(4);
	run.due = PG_ARGISNULL(5) ? 0 : PG_GETARG_TIMESTAMPTZ(5);
	run.read_count = PG_GETARG_INT32(6);
	run.awaited = (uint32) PG_GETARG_INT64(7);
	test_open(PG_GETARG_OID(0), PG_GETARG_INT32(1), true, &t);
	for (i = 0; i < count; i++)
	{
		run.first = first + i * stride;
		if (run.first > PG_INT64_MAX - len)
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("run ends past the largest msg_id")));
		spindle_tree_upsert(&t, &run);
		CHECK_FOR_INTERRUPTS();
	}
	test_close(&t);
	PG_RETURN_INT64(count);
}

/* spindle._run_remove(queue, sub, first, len): ids removed. */
Datum
spindle_run_remove(PG_FUNCTION_ARGS)
{
	SpindleTree t;
	int64		first = PG_GETARG_INT64(2);
	int64		len = PG_GETARG_INT64(3);
	int32		maxrc = 0;
	int64		removed = 0;

	if (len <= 0 || first > PG_INT64_MAX - len)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid range of ids")));
	test_open(PG_GETARG_OID(0), PG_GETARG_INT32(1), true, &t);
	if (spindle_tree_meta_block(t.crel, t.sub) != InvalidBlockNumber)
		removed = spindle_tree_cut(&t, first, first + len, &maxrc);
	test_close(&t);
	PG_RETURN_INT64(removed);
}

/* The result row of a run (first, len, kind, due, read_count, awaited). */
static HeapTuple
run_tuple(TupleDesc td, const SpindleRun *r)
{
	Datum		values[6];
	bool		nulls[6] = {false, false, false, false, false, false};

	values[0] = Int64GetDatum(r->first);
	values[1] = Int64GetDatum((int64) r->len);
	values[2] = Int32GetDatum(r->kind);
	values[3] = TimestampTzGetDatum(r->due);
	nulls[3] = r->due == 0;
	values[4] = Int32GetDatum(r->read_count);
	values[5] = Int64GetDatum((int64) r->awaited);
	return heap_form_tuple(td, values, nulls);
}

/* spindle._run_lookup(queue, sub, id): the run holding id, or NULL. */
Datum
spindle_run_lookup(PG_FUNCTION_ARGS)
{
	SpindleTree t;
	TupleDesc	td;
	Buffer		buf;
	int			idx;
	SpindleRun	run;
	bool		found = false;
	int64		id = PG_GETARG_INT64(2);

	if (get_call_result_type(fcinfo, NULL, &td) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	test_open(PG_GETARG_OID(0), PG_GETARG_INT32(1), false, &t);
	buf = spindle_tree_find_le(&t, id, BUFFER_LOCK_SHARE, &idx);
	if (BufferIsValid(buf))
	{
		run = spindle_leaf_items(BufferGetPage(buf))[idx];
		UnlockReleaseBuffer(buf);
		found = id < spindle_run_end(&run);
	}
	test_close(&t);
	if (!found)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(HeapTupleGetDatum(run_tuple(BlessTupleDesc(td), &run)));
}

/*
 * spindle._run_scan(queue, sub, lo, hi): the runs holding ids of [lo, hi),
 * in order.  After one descent, leaves are walked by their right-links,
 * one buffer lock at a time (a concurrent split only moves runs already
 * read to a page to the left of the next one).
 */
Datum
spindle_run_scan(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SpindleTree t;
	int64		lo = PG_GETARG_INT64(2);
	int64		hi = PG_GETARG_INT64(3);
	Buffer		buf;
	int			idx;
	int64		low;

	InitMaterializedSRF(fcinfo, 0);
	test_open(PG_GETARG_OID(0), PG_GETARG_INT32(1), false, &t);
	if (lo > PG_INT64_MIN && lo < hi)
	{
		buf = spindle_tree_find_le(&t, lo - 1, BUFFER_LOCK_SHARE, &idx);
		if (BufferIsValid(buf))
		{
			SpindleRun	run = spindle_leaf_items(BufferGetPage(buf))[idx];

			UnlockReleaseBuffer(buf);
			if (spindle_run_end(&run) > lo)
				tuplestore_puttuple(rsinfo->setResult,
									run_tuple(rsinfo->setDesc, &run));
		}
	}
	buf = InvalidBuffer;
	if (lo < hi)
		buf = spindle_tree_descend(&t, lo, 0, BUFFER_LOCK_SHARE, &low);
	while (BufferIsValid(buf))
	{
		Page		page = BufferGetPage(buf);
		SpindleCpageOpaque *op = SpindleCpageGetOpaque(page);
		SpindleRun *items = spindle_leaf_items(page);
		int			n = spindle_cpage_nitems(page, sizeof(SpindleRun));
		int			i;
		BlockNumber next = InvalidBlockNumber;

		for (i = spindle_leaf_search_ge(page, lo);
			 i < n && items[i].first < hi; i++)
			tuplestore_puttuple(rsinfo->setResult,
								run_tuple(rsinfo->setDesc, &items[i]));
		if (op->right != InvalidBlockNumber && op->high_key < hi)
		{
			next = op->right;
			lo = op->high_key;
		}
		UnlockReleaseBuffer(buf);
		buf = InvalidBuffer;
		if (next != InvalidBlockNumber)
		{
			buf = ReadBuffer(t.crel, next);
			LockBuffer(buf, BUFFER_LOCK_SHARE);
			if (!spindle_tree_page_ok(&t, BufferGetPage(buf), 0))
				elog(ERROR, "spindle: consumer tree changed under a scan");
		}
	}
	test_close(&t);
	return (Datum) 0;
}

/* ----------------------------------------------------------------
 * Test-only: verify and drop a tree
 * ----------------------------------------------------------------
 */

/* A page of one level as verify saw it. */
typedef struct VPage
{
	BlockNumber blk;
	int64		low;
	int64		high;			/* PG_INT64_MAX if rightmost */
	bool		incomplete;
} VPage;

typedef struct Verify
{
	SpindleTree *t;
	List	   *problems;		/* of text Datums */
	BlockNumber nblocks;
	int			pages;
	int64		runs;
	int64		ids;
	int			incomplete;
	int64		prev_end;		/* leaves: end of the last run seen */
} Verify;

static void vproblem(Verify *v, const char *fmt,...) pg_attribute_printf(2, 3);

static void
vproblem(Verify *v, const char *fmt,...)
{
	StringInfoData s;

	initStringInfo(&s);
	for (;;)
	{
		va_list		args;
		int			needed;

		va_start(args, fmt);
		needed = appendStringInfoVA(&s, fmt, args);
		va_end(args);
		if (needed == 0)
			break;
		enlargeStringInfo(&s, needed);
	}
	v->problems = lappend(v->problems, (void *) CStringGetTextDatum(s.data));
}

/*
 * Check the items of one tree page (share-locked) whose key range is
 * [low, high); inner pages' downlinks are appended to *dls.
 */
static void
verify_items(Verify *v, Page page, BlockNumber blk, int level, int64 low,
			 int64 high, SpindleDownlink **dls, int *ndl, int *maxdl)
{
	Size		isz = spindle_tree_item_size(level);
	int			n = spindle_cpage_nitems(page, isz);
	int			i;

	for (i = 0; i < n; i++)
	{
		int64		key = *(int64 *) (PageGetContents(page) + i * isz);

		if (i > 0 && key <= *(int64 *) (PageGetContents(page) + (i - 1) * isz))
			vproblem(v, "block %u: keys out of order at item %d", blk, i);
		if (key < low || key >= high)
			vproblem(v, "block %u: key " INT64_FORMAT " outside its range [" INT64_FORMAT ", " INT64_FORMAT ")",
					 blk, key, low, high);
		if (level == 0)
		{
			SpindleRun *r = &spindle_leaf_items(page)[i];

			if (r->len == 0 || r->kind < SPINDLE_RUN_READY ||
				r->kind > SPINDLE_RUN_CONSUMED)
				vproblem(v, "block %u: run " INT64_FORMAT " has length %u, kind %u",
						 blk, r->first, r->len, r->kind);
			if (r->first < v->prev_end)
				vproblem(v, "block %u: run " INT64_FORMAT " overlaps the run before it (which ends at " INT64_FORMAT ")",
						 blk, r->first, v->prev_end);
			v->prev_end = spindle_run_end(r);
			v->runs++;
			v->ids += r->len;
		}
		else
		{
			if (i == 0 && key != low)
				vproblem(v, "block %u: first downlink key " INT64_FORMAT " is not the page's low bound " INT64_FORMAT,
						 blk, key, low);
			if (*ndl >= *maxdl)
			{
				*maxdl *= 2;
				*dls = repalloc(*dls, *maxdl * sizeof(SpindleDownlink));
			}
			(*dls)[(*ndl)++] = spindle_inner_items(page)[i];
		}
	}
	if (level > 0 && n == 0)
		vproblem(v, "block %u: inner page without downlinks", blk);
}

/*
 * Walk level `level` of the tree from its leftmost page by right-links:
 * its pages into *pages, its downlinks (inner levels) into *dls.
 * Returns the number of pages.
 */
static int
verify_level(Verify *v, BlockNumber leftmost, int level, VPage **pages,
			 SpindleDownlink **dls, int *ndl)
{
	int			npages = 0;
	int			maxpages = 16;
	int			maxdl = 64;
	BlockNumber blk = leftmost;
	int64		low = PG_INT64_MIN;

	*pages = palloc(maxpages * sizeof(VPage));
	*dls = palloc(maxdl * sizeof(SpindleDownlink));
	*ndl = 0;
	v->prev_end = PG_INT64_MIN;
	while (blk != InvalidBlockNumber)
	{
		Buffer		buf;
		Page		page;
		SpindleCpageOpaque *op;
		VPage	   *vp;

		if (blk >= v->nblocks || npages >= (int) v->nblocks)
		{
			vproblem(v, "level %d: right-link to block %u leads out of the relation or into a cycle",
					 level, blk);
			break;
		}
		buf = ReadBuffer(v->t->crel, blk);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		op = SpindleCpageGetOpaque(page);
		if (!spindle_tree_page_ok(v->t, page, level))
		{
			vproblem(v, "block %u is not a page of this tree at level %d",
					 blk, level);
			UnlockReleaseBuffer(buf);
			break;
		}
		if (npages >= maxpages)
		{
			maxpages *= 2;
			*pages = repalloc(*pages, maxpages * sizeof(VPage));
		}
		vp = &(*pages)[npages++];
		vp->blk = blk;
		vp->low = low;
		vp->high = op->right == InvalidBlockNumber ? PG_INT64_MAX : op->high_key;
		vp->incomplete = (op->flags & SPINDLE_CPAGE_INCOMPLETE_SPLIT) != 0;
		if (vp->incomplete)
			v->incomplete++;
		if (op->right != InvalidBlockNumber && op->high_key <= low)
			vproblem(v, "block %u: high key " INT64_FORMAT " not above its low bound",
					 blk, op->high_key);
		verify_items(v, page, blk, level, low, vp->high, dls, ndl, &maxdl);
		v->pages++;
		low = vp->high;
		blk = op->right;
		UnlockReleaseBuffer(buf);
	}
	return npages;
}

/*
 * The downlinks of one level (in order) must name the pages of the level
 * below (in order), each with that page's low bound as key; only the
 * right half of an incomplete split may lack one.
 */
static void
verify_downlinks(Verify *v, int level, SpindleDownlink *dls, int ndl,
				 VPage *pages, int npages)
{
	int			j = 0;
	int			k;

	for (k = 0; k < npages; k++)
	{
		if (j < ndl && dls[j].child == pages[k].blk)
		{
			if (dls[j].key != pages[k].low && !(j == 0 && k == 0))
				vproblem(v, "level %d: downlink key " INT64_FORMAT " of block %u is not its low bound " INT64_FORMAT,
						 level + 1, dls[j].key, pages[k].blk, pages[k].low);
			j++;
		}
		else if (k > 0 && pages[k - 1].incomplete)
			continue;
		else
			vproblem(v, "level %d: block %u has no downlink in its parent level",
					 level, pages[k].blk);
	}
	if (j < ndl)
		vproblem(v, "level %d: downlink to block %u is out of order or leads to no page of the level below",
				 level + 1, dls[j].child);
}

/*
 * spindle._run_verify(queue, sub): height, pages, runs, ids, incomplete
 * splits and the problems found (keys in order, no overlapping runs, keys
 * within low bound and high key, right-links, parent downlinks).  On a
 * primary it takes the tree's writer lock in share mode, so no writer
 * changes the tree meanwhile; on a standby it reads as any reader.
 */
Datum
spindle_run_verify(PG_FUNCTION_ARGS)
{
	SpindleTree t;
	Verify		v;
	TupleDesc	td;
	BlockNumber root;
	int			rootlevel = -1;
	Datum		values[6];
	bool		nulls[6] = {false, false, false, false, false, false};
	bool		locked = false;

	if (get_call_result_type(fcinfo, NULL, &td) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	test_open(PG_GETARG_OID(0), PG_GETARG_INT32(1), false, &t);
	if (!RecoveryInProgress())
	{
		LockPage(t.crel, t.sub, ShareLock);
		locked = true;
	}
	memset(&v, 0, sizeof(v));
	v.t = &t;
	v.nblocks = RelationGetNumberOfBlocks(t.crel);
	if (spindle_tree_root(&t, &root, &rootlevel))
	{
		BlockNumber leftmost = root;
		VPage	   *upper = NULL;
		int			nupper = 0;
		SpindleDownlink *updl = NULL;
		int			nupdl = 0;
		int			level;

		for (level = rootlevel; level >= 0; level--)
		{
			VPage	   *pages;
			SpindleDownlink *dls;
			int			ndl;
			int			npages = verify_level(&v, leftmost, level, &pages,
											  &dls, &ndl);

			if (level == rootlevel &&
				!(npages == 1 || (npages == 2 && pages[0].incomplete)))
				vproblem(&v, "root level %d has %d pages", level, npages);
			if (upper != NULL)
				verify_downlinks(&v, level, updl, nupdl, pages, npages);
			if (level > 0)
			{
				if (ndl == 0)
					break;
				leftmost = dls[0].child;
			}
			upper = pages;
			nupper = npages;
			updl = dls;
			nupdl = ndl;
		}
		(void) nupper;
	}
	if (locked)
		UnlockPage(t.crel, t.sub, ShareLock);
	test_close(&t);

	values[0] = Int32GetDatum(rootlevel + 1);
	values[1] = Int32GetDatum(v.pages);
	values[2] = Int64GetDatum(v.runs);
	values[3] = Int64GetDatum(v.ids);
	values[4] = Int32GetDatum(v.incomplete);
	if (v.problems == NIL)
		values[5] = PointerGetDatum(construct_empty_array(TEXTOID));
	else
	{
		int			n = list_length(v.problems);
		Datum	   *elems = palloc(n * sizeof(Datum));
		int			i = 0;
		ListCell   *lc;

		foreach(lc, v.problems)
			elems[i++] = PointerGetDatum(lfirst(lc));
		values[5] = PointerGetDatum(construct_array(elems, n, TEXTOID, -1,
													false, TYPALIGN_INT));
	}
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(td),
													  values, nulls)));
}

/*
 * spindle._run_drop(queue, sub): free every page of the tree (its meta
 * block first, so that readers restarting find no tree); returns the
 * pages freed.  They are reused once no snapshot can see their free xid.
 */
Datum
spindle_run_drop(PG_FUNCTION_ARGS)
{
	SpindleTree t;
	int			freed;

	test_open(PG_GETARG_OID(0), PG_GETARG_INT32(1), true, &t);
	freed = spindle_tree_drop(&t);
	test_close(&t);
	PG_RETURN_INT32(freed);
}
