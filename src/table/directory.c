/*-------------------------------------------------------------------------
 *
 * directory.c
 *	  The spindle directory: which spindles a table has, cached per backend,
 *	  and the catalog work that creates and retires them.
 *
 * The persistent directory is the table spindle.spindle_catalog (one row per
 * spindle, dropped_at set once dropped until its index entries are gone)
 * plus spindle.table_catalog (per-table counters).  Both are written
 * through SPI as the bootstrap superuser with a fixed search_path.  What
 * runs on every creation and every directory read -- the directory itself,
 * the ranges taken, the spindle numbers, the pending checks -- reads them
 * by index (genam) instead, with no parse, plan or executor start, and
 * only the rows it needs.  Every read uses the latest snapshot: a
 * REPEATABLE READ transaction must still find spindles created after its
 * snapshot was taken.
 * Rows with relation 0 are spindles detached from a dropped or truncated
 * table, waiting for maintenance to drop them (detach.c); no table's
 * directory lists them.
 *
 * The backend-local cache (SpindleDirectory) is kept up to date by
 * relcache invalidations.  Creating spindles invalidates the facade;
 * dropping one drops its relation, which invalidates that relation; any
 * other change to a live spindle's row (filled_at, capacity) invalidates
 * the spindle's relation too.  An invalidation only marks the cached
 * directory stale; the next acquire brings it up to date by reading what
 * changed (see "Keeping a directory up to date" below), or reads it all
 * again where that cannot be trusted.  A directory in use is pinned: an
 * invalidation arriving while a caller holds it (any lock acquisition may
 * deliver one) never changes or frees it under the caller; a stale copy
 * still pinned is kept in a graveyard until its last release.
 *
 * Locks: spindle creation is serialised per table by the creation lock
 * (spindle_lock_creation), held to the end of the creating transaction;
 * the catalog tables are read under AccessShareLock.
 *
 * Invariants kept here: two spindles of a table never get overlapping
 * ranges of virtual slots, and a range is given again only once it is in
 * no catalog row and no pending entry (that is, once cleanup has removed
 * its index entries and forgotten it); spindle numbers only increase; a
 * directory is never older than the last invalidation its backend
 * processed, and never holds two spindles with overlapping ranges.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/relscan.h"
#include "access/reloptions.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/visibilitymap.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/heap.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_index.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "catalog/toasting.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "table/spindle_table.h"


/* One cached directory per facade. */
typedef struct DirCacheEntry
{
	Oid			facade;			/* hash key */
	SpindleDirectory *current;	/* NULL or the newest directory */
	int64		open_spindle_no;	/* where this backend last inserted */
} DirCacheEntry;

static HTAB *dir_cache = NULL;

/* this transaction created spindles (and holds a creation lock) */
static bool created_spindles = false;

/*
 * this transaction changed the catalog otherwise than by creating spindles
 * (see refresh_directory); set by spi_run unless a creation is writing
 */
static bool catalog_written = false;
static bool writing_creation = false;

static List *dir_graveyard = NIL;	/* stale, still pinned directories */

/* relcache invalidations this backend has processed, of any relation */
static uint64 dir_invalidations = 0;

/* ----------------------------------------------------------------
 * SPI as the bootstrap superuser
 *
 * Every name and operator in these statements is schema-qualified, so the
 * caller's search_path cannot redirect them (they run as superuser).
 * ----------------------------------------------------------------
 */

/*
 * Run the statements below as the bootstrap superuser, with a search_path
 * of pg_catalog only: the caller's search_path must not be able to put a
 * function or operator of its own under a name they use (every name is
 * schema-qualified too), and SECURITY_RESTRICTED_OPERATION keeps them from
 * changing anything but what they say.
 */
/*
 * Run one statement; returns SPI_processed.  It reads with the latest
 * snapshot, so that a REPEATABLE READ transaction still finds spindles
 * created after its snapshot -- except in a parallel operation, which
 * cannot take snapshots and only reads: the query's snapshot sees every
 * spindle holding an event it can see (a spindle is committed before any
 * event is inserted into it by another transaction).  A statement that
 * writes, but for the rows a creation adds, marks the transaction as one
 * whose directories are read in full (see refresh_directory).
 */
static uint64
spi_run(const char *sql, int nargs, Oid *types, Datum *values,
		const char *nulls, bool read_only)
{
	SPIPlanPtr	plan;
	int			rc;
	Snapshot	snapshot;

	plan = SPI_prepare(sql, nargs, types);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s", sql,
			 SPI_result_code_string(SPI_result));
	if (!read_only)
	{
		if (!writing_creation)
			catalog_written = true;
		CommandCounterIncrement();
	}
	snapshot = IsInParallelMode() ? GetActiveSnapshot() : GetLatestSnapshot();
	rc = SPI_execute_snapshot(plan, values, nulls, snapshot,
							  InvalidSnapshot, read_only, false, 0);
	if (rc < 0)
		elog(ERROR, "SPI failed for \"%s\": %s", sql,
			 SPI_result_code_string(rc));
	return SPI_processed;
}

/* Run one catalog-changing statement in its own SPI connection. */
static void
catalog_write(const char *sql, int nargs, Oid *types, Datum *values)
{
	SpindleSpi	spi;

	spindle_spi_begin(&spi);
	spi_run(sql, nargs, types, values, NULL, false);
	spindle_spi_end(&spi);
}

/* ----------------------------------------------------------------
 * Catalog reads without SPI
 *
 * spindle.spindle_catalog is read by index scans (genam) under a
 * registered copy of the latest snapshot, as spi_run would read it.  The
 * catalog is the extension's own: no privilege or row security applies to
 * these reads, and its columns are checked against the install script's
 * on every open.
 * ----------------------------------------------------------------
 */
#define Anum_sc_relation	1
#define Anum_sc_spindle_no	2
#define Anum_sc_segment		3
#define Anum_sc_capacity	4
#define Anum_sc_vbase		5
#define Anum_sc_vcount		6
#define Anum_sc_created_at	7
#define Anum_sc_filled_at	8
#define Anum_sc_dropped_at	9
#define Natts_sc			9

/* spindle.table_catalog */
#define Anum_tc_retire_slots	4

static const struct
{
	const char *name;
	Oid			type;
}			sc_columns[Natts_sc] =
{
	{"relation", OIDOID},
	{"spindle_no", INT8OID},
	{"segment", OIDOID},
	{"capacity", INT8OID},
	{"vbase", INT8OID},
	{"vcount", INT8OID},
	{"created_at", TIMESTAMPTZOID},
	{"filled_at", TIMESTAMPTZOID},
	{"dropped_at", TIMESTAMPTZOID}
};

typedef struct CatalogRels
{
	Relation	heap;			/* spindle.spindle_catalog */
	Relation	bynumber;		/* its (relation, spindle_no) index */
	Relation	byvbase;		/* its (relation, vbase) index, or NULL */
	bool		byvbase_vcount; /* ... which has vcount as third column */
} CatalogRels;

/* A table of schema spindle, with AccessShareLock (kept to the end). */
static Relation
open_own_table(const char *name)
{
	Oid			nsp = get_namespace_oid(SPINDLE_SCHEMA, true);
	Oid			relid = OidIsValid(nsp) ? get_relname_relid(name, nsp) : InvalidOid;

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"%s.%s\" does not exist", SPINDLE_SCHEMA, name),
				 errhint("Reinstall the spindle extension.")));
	return table_open(relid, AccessShareLock);
}

/*
 * The valid btree index of heap whose leading key columns are col1 and
 * col2 (if valid), opened with AccessShareLock; NULL if it has none.
 */
static Relation
open_index_on(Relation heap, AttrNumber col1, AttrNumber col2)
{
	List	   *indexes = RelationGetIndexList(heap);
	ListCell   *lc;
	Relation	result = NULL;

	foreach(lc, indexes)
	{
		Relation	idx = index_open(lfirst_oid(lc), AccessShareLock);
		Form_pg_index form = idx->rd_index;

		if (idx->rd_rel->relam == BTREE_AM_OID && form->indisvalid &&
			form->indnkeyatts >= (AttributeNumberIsValid(col2) ? 2 : 1) &&
			form->indkey.values[0] == col1 &&
			(!AttributeNumberIsValid(col2) || form->indkey.values[1] == col2) &&
			heap_attisnull(idx->rd_indextuple, Anum_pg_index_indpred, NULL))
		{
			result = idx;
			break;
		}
		index_close(idx, AccessShareLock);
	}
	list_free(indexes);
	return result;
}

/* Open spindle.spindle_catalog and its indexes for reading. */
static void
catalog_open(CatalogRels *cr)
{
	TupleDesc	td;
	bool		ok;
	int			i;

	cr->heap = open_own_table("spindle_catalog");
	td = RelationGetDescr(cr->heap);
	ok = td->natts == Natts_sc;
	for (i = 0; ok && i < Natts_sc; i++)
	{
		Form_pg_attribute att = TupleDescAttr(td, i);

		ok = !att->attisdropped && att->atttypid == sc_columns[i].type &&
			strcmp(NameStr(att->attname), sc_columns[i].name) == 0;
	}
	cr->bynumber = ok ? open_index_on(cr->heap, Anum_sc_relation,
									  Anum_sc_spindle_no) : NULL;
	if (cr->bynumber == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("spindle.spindle_catalog is not as this version of spindle made it"),
				 errhint("Reinstall the spindle extension.")));
	/* made by the install script; a database from before it has none */
	cr->byvbase = open_index_on(cr->heap, Anum_sc_relation, Anum_sc_vbase);
	cr->byvbase_vcount = cr->byvbase != NULL &&
		cr->byvbase->rd_index->indnatts >= 3 &&
		cr->byvbase->rd_index->indkey.values[2] == Anum_sc_vcount;
}

static void
catalog_close(CatalogRels *cr)
{
	if (cr->byvbase != NULL)
		index_close(cr->byvbase, NoLock);
	index_close(cr->bynumber, NoLock);
	table_close(cr->heap, NoLock);
}

/* The snapshot the catalog is read with (see spi_run), registered. */
static Snapshot
read_snapshot(void)
{
	return RegisterSnapshot(IsInParallelMode() ? GetActiveSnapshot() :
							GetLatestSnapshot());
}

/* A catalog row as a directory entry; *dropped if dropped_at is set. */
static void
decode_row(TupleDesc td, HeapTuple tup, SpindleEntry *sp, bool *dropped)
{
	Datum		v[Natts_sc];
	bool		n[Natts_sc];

	heap_deform_tuple(tup, td, v, n);
	memset(sp, 0, sizeof(SpindleEntry));
	sp->spindle_no = DatumGetInt64(v[Anum_sc_spindle_no - 1]);
	sp->segment = DatumGetObjectId(v[Anum_sc_segment - 1]);
	sp->capacity = DatumGetInt64(v[Anum_sc_capacity - 1]);
	sp->vbase = DatumGetInt64(v[Anum_sc_vbase - 1]);
	sp->vcount = DatumGetInt64(v[Anum_sc_vcount - 1]);
	if (!n[Anum_sc_created_at - 1])
		sp->created_at = DatumGetTimestampTz(v[Anum_sc_created_at - 1]);
	if (!n[Anum_sc_filled_at - 1])
		sp->filled_at = DatumGetTimestampTz(v[Anum_sc_filled_at - 1]);
	*dropped = !n[Anum_sc_dropped_at - 1];
}

/*
 * Begin an index scan of the facade's rows numbered from lo to hi, in the
 * order of their numbers (either way).  keys[] must have room for three.
 */
static SysScanDesc
begin_rows_scan(CatalogRels *cr, Oid facade, int64 lo, int64 hi,
				Snapshot snap, ScanKeyData *keys)
{
	int			nkeys = 0;

	ScanKeyInit(&keys[nkeys++], Anum_sc_relation, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(facade));
	if (lo == hi)
		ScanKeyInit(&keys[nkeys++], Anum_sc_spindle_no, BTEqualStrategyNumber,
					F_INT8EQ, Int64GetDatum(lo));
	else
	{
		if (lo > PG_INT64_MIN)
			ScanKeyInit(&keys[nkeys++], Anum_sc_spindle_no,
						BTGreaterEqualStrategyNumber, F_INT8GE,
						Int64GetDatum(lo));
		if (hi < PG_INT64_MAX)
			ScanKeyInit(&keys[nkeys++], Anum_sc_spindle_no,
						BTLessEqualStrategyNumber, F_INT8LE,
						Int64GetDatum(hi));
	}
	return systable_beginscan_ordered(cr->heap, cr->bynumber, snap,
									  nkeys, keys);
}

/* Has the facade a catalog row numbered from lo to hi? */
static bool
catalog_has_rows(CatalogRels *cr, Oid facade, int64 lo, int64 hi,
				 Snapshot snap)
{
	ScanKeyData keys[3];
	SysScanDesc scan = begin_rows_scan(cr, facade, lo, hi, snap, keys);
	bool		found;

	found = systable_getnext_ordered(scan, ForwardScanDirection) != NULL;
	systable_endscan_ordered(scan);
	return found;
}

/* The highest spindle number in the facade's catalog rows, or 0. */
static int64
catalog_max_spindle_no(CatalogRels *cr, Oid facade, Snapshot snap)
{
	ScanKeyData keys[3];
	SysScanDesc scan = begin_rows_scan(cr, facade, PG_INT64_MIN, PG_INT64_MAX,
									   snap, keys);
	HeapTuple	tup = systable_getnext_ordered(scan, BackwardScanDirection);
	int64		result = 0;

	if (tup != NULL)
	{
		SpindleEntry sp;
		bool		dropped;

		decode_row(RelationGetDescr(cr->heap), tup, &sp, &dropped);
		result = sp.spindle_no;
	}
	systable_endscan_ordered(scan);
	return result;
}

/* The xmin of the facade's pg_class row: it changes with new storage. */
static TransactionId
facade_class_xmin(Oid relid)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	TransactionId xmin;

	if (!HeapTupleIsValid(tup))
		return InvalidTransactionId;
	xmin = HeapTupleHeaderGetRawXmin(tup->t_data);
	ReleaseSysCache(tup);
	return xmin;
}

/* ----------------------------------------------------------------
 * The backend-local cache
 *
 * Keeping a directory up to date.  A directory D read with snapshot S
 * holds every live spindle whose row S sees, and remembers the highest
 * spindle number among all the rows S saw (dropped ones too).  Three
 * kinds of change reach it:
 *
 * - New spindles.  They are created under the table's creation lock,
 *   which each creator holds until its transaction has ended, and their
 *   numbers only increase; so creators commit in the order of their
 *   numbers, and a snapshot that sees a row numbered n sees every
 *   committed row numbered below n.  Reading the rows numbered above D's
 *   highest therefore finds every spindle created since D was read.  (A
 *   creation that rolled back leaves no row; its number is never given
 *   again.)  The creator invalidates the facade when it commits.
 * - Dropped spindles.  A drop drops the spindle's relation, and core sends
 *   a relcache invalidation of it at commit; the callback finds that
 *   relation among D's spindles (D.byseg) and queues the spindle's number
 *   for a re-read of its row, which finds it dropped (or gone).  Changes
 *   to a live spindle's row (filled_at, capacity) invalidate the spindle's
 *   relation likewise, so the same re-read picks them up.
 * - Everything else is read in full again: new storage for the facade
 *   (TRUNCATE, VACUUM FULL, CLUSTER) and ALTER TABLE change the xmin of
 *   its pg_class row, which D remembers (a table dropped and another made
 *   with its OID has another row too); so does a transaction that changed
 *   the catalog otherwise than by creating spindles and then rolled back
 *   a subtransaction (its drops and cleanups may bring rows back that D no
 *   longer holds; dir_subxact_callback), a table created in this
 *   transaction, parallel
 *   mode, more invalidated spindles than D can queue, and a reset of the
 *   whole cache (InvalidOid).  A transaction's own creations need no full
 *   read: a rollback to a savepoint undoes the creation of their
 *   relations, which invalidates them here, and the re-read finds their
 *   rows gone; a directory that may hold rows of the transaction is freed
 *   if the transaction does not commit.
 *
 * Order: refresh_directory takes every lock it needs, then processes the
 * invalidations that have arrived, then takes the snapshot; a
 * transaction's invalidations are sent after it became visible, so every
 * change this backend was told of is visible to that snapshot.  The
 * snapshot may see more (a commit whose invalidations have not arrived
 * yet): then D may keep a spindle dropped meanwhile until its
 * invalidation arrives, exactly as a directory read in full would be
 * stale until then.  That is harmless unless the dropped spindle's range
 * has since been given to a new spindle that D now holds too: every
 * update checks that no two of D's ranges overlap, and reads in full if
 * they do.  Any invalidation processed during the refresh (none should:
 * nothing there takes a lock) leaves D for a full read next time.
 * ----------------------------------------------------------------
 */

static void
free_directory(SpindleDirectory *dir)
{
	MemoryContextDelete(dir->cxt);
}

/*
 * Keep a stale directory that is still pinned until it is released.  The
 * list lives as long as the cache: invalidations arrive in any memory
 * context, some of which are reset before the transaction ends.
 */
static void
bury_directory(SpindleDirectory *dir)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	dir_graveyard = lappend(dir_graveyard, dir);
	MemoryContextSwitchTo(old);
}

/* Queue for a re-read the rows of dir's spindles held in relation relid. */
static void
note_segment_invalidation(SpindleDirectory *dir, Oid relid)
{
	int			lo = 0,
				hi = dir->nspindles;

	/* the first entry whose segment is relid or more */
	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;

		if (dir->byseg[mid].segment < relid)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < dir->nspindles && dir->byseg[lo].segment == relid; lo++)
	{
		if (dir->nrecheck < SPINDLE_DIR_MAX_RECHECK)
			dir->recheck[dir->nrecheck++] =
				dir->spindles[dir->byseg[lo].index].spindle_no;
		else
			dir->needs_full = true;
		dir->stale = true;
	}
}

/*
 * Relcache callback: mark the cached directories that relid (InvalidOid:
 * every relation) concerns stale.  Nothing is freed or changed but the
 * marks: a pinned directory stays as its holders see it.
 */
static void
dir_invalidate(Datum arg, Oid relid)
{
	HASH_SEQ_STATUS status;
	DirCacheEntry *e;

	dir_invalidations++;
	if (dir_cache == NULL)
		return;
	hash_seq_init(&status, dir_cache);
	while ((e = hash_seq_search(&status)) != NULL)
	{
		SpindleDirectory *dir = e->current;

		if (dir == NULL)
			continue;
		if (!OidIsValid(relid) || dir->updating)
		{
			dir->stale = true;
			dir->needs_full = true;
		}
		else if (relid == e->facade)
			dir->stale = true;
		else
			note_segment_invalidation(dir, relid);
	}
}

/* At transaction end every pin is gone: free stale directories. */
static void
dir_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;
	HASH_SEQ_STATUS status;
	DirCacheEntry *e;
	bool		aborted;

	/*
	 * A prepared transaction would keep the creation lock until COMMIT
	 * PREPARED, and every producer that needs a new spindle of the table
	 * would wait for it: refuse, as PostgreSQL refuses to prepare after
	 * LISTEN or NOTIFY.
	 */
	if (event == XACT_EVENT_PRE_PREPARE && created_spindles)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot PREPARE a transaction that has created spindles"),
				 errhint("Create the table, or insert its first events, outside the prepared transaction.")));

	if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT &&
		event != XACT_EVENT_PARALLEL_COMMIT &&
		event != XACT_EVENT_PARALLEL_ABORT && event != XACT_EVENT_PREPARE)
		return;
	created_spindles = false;
	catalog_written = false;
	writing_creation = false;
	/* a prepared transaction may still roll back */
	aborted = event != XACT_EVENT_COMMIT && event != XACT_EVENT_PARALLEL_COMMIT;

	if (dir_graveyard != NIL)
	{
		List	   *old = dir_graveyard;

		dir_graveyard = NIL;
		foreach(lc, old)
			free_directory((SpindleDirectory *) lfirst(lc));
		list_free(old);
	}
	if (dir_cache == NULL)
		return;
	hash_seq_init(&status, dir_cache);
	while ((e = hash_seq_search(&status)) != NULL)
	{
		SpindleDirectory *dir = e->current;

		if (dir == NULL)
			continue;
		dir->pins = 0;

		/*
		 * One that may hold rows of this transaction is wrong if it did
		 * not commit; one whose update failed half-way is wrong anyway.
		 */
		if (dir->updating || (aborted && dir->has_own))
		{
			free_directory(dir);
			e->current = NULL;
		}
		else
			dir->has_own = false;
	}
}

/*
 * A subtransaction that rolls back may bring back catalog rows that this
 * transaction dropped or forgot, and that a directory read since no longer
 * holds: read those directories in full next time.  (A rollback of the
 * whole transaction frees them: dir_xact_callback.)
 */
static void
dir_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					 SubTransactionId parentSubid, void *arg)
{
	HASH_SEQ_STATUS status;
	DirCacheEntry *e;

	if (event != SUBXACT_EVENT_ABORT_SUB || !catalog_written ||
		dir_cache == NULL)
		return;
	hash_seq_init(&status, dir_cache);
	while ((e = hash_seq_search(&status)) != NULL)
	{
		if (e->current != NULL && e->current->has_own)
		{
			e->current->stale = true;
			e->current->needs_full = true;
		}
	}
}

void
spindle_directory_init(void)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(DirCacheEntry);
	ctl.hcxt = TopMemoryContext;
	dir_cache = hash_create("spindle directories", 64, &ctl,
							HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	CacheRegisterRelcacheCallback(dir_invalidate, (Datum) 0);
	RegisterXactCallback(dir_xact_callback, NULL);
	RegisterSubXactCallback(dir_subxact_callback, NULL);
}

/* qsort comparators */
static int
cmp_index_vbase(const void *a, const void *b, void *arg)
{
	const SpindleEntry *sp = (const SpindleEntry *) arg;
	int64		va = sp[*(const int *) a].vbase;
	int64		vb = sp[*(const int *) b].vbase;

	return (va > vb) - (va < vb);
}

static int
cmp_segref(const void *a, const void *b)
{
	const SpindleSegRef *x = (const SpindleSegRef *) a;
	const SpindleSegRef *y = (const SpindleSegRef *) b;

	if (x->segment != y->segment)
		return x->segment < y->segment ? -1 : 1;
	return (x->index > y->index) - (x->index < y->index);
}

/*
 * A new directory with room for nalloc spindles, in a memory context of
 * its own under the current one (so that an error while it is filled
 * frees it); install_directory moves it under TopMemoryContext.
 */
static SpindleDirectory *
new_directory(Oid facade, int nalloc)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext,
											  "spindle directory",
											  ALLOCSET_SMALL_SIZES);
	SpindleDirectory *dir = MemoryContextAllocZero(cxt, sizeof(SpindleDirectory));

	dir->cxt = cxt;
	dir->facade = facade;
	dir->nalloc = Max(nalloc, 8);
	dir->spindles = MemoryContextAlloc(cxt, sizeof(SpindleEntry) * dir->nalloc);
	dir->byvbase = MemoryContextAlloc(cxt, sizeof(int) * dir->nalloc);
	dir->byseg = MemoryContextAlloc(cxt, sizeof(SpindleSegRef) * dir->nalloc);
	return dir;
}

/* Make room for n spindles in dir->spindles (the other arrays are rebuilt). */
static void
reserve_spindles(SpindleDirectory *dir, int n)
{
	if (n <= dir->nalloc)
		return;
	dir->nalloc = Max(n, dir->nalloc * 2);
	dir->spindles = repalloc(dir->spindles, sizeof(SpindleEntry) * dir->nalloc);
	dir->byvbase = repalloc(dir->byvbase, sizeof(int) * dir->nalloc);
	dir->byseg = repalloc(dir->byseg, sizeof(SpindleSegRef) * dir->nalloc);
}

/* A copy of dir (which its holders keep using), unpinned. */
static SpindleDirectory *
copy_directory(SpindleDirectory *dir)
{
	SpindleDirectory *copy = new_directory(dir->facade, dir->nalloc);
	MemoryContext cxt = copy->cxt;
	SpindleEntry *spindles = copy->spindles;
	int		   *byvbase = copy->byvbase;
	SpindleSegRef *byseg = copy->byseg;

	memcpy(copy, dir, sizeof(SpindleDirectory));
	copy->cxt = cxt;
	copy->spindles = spindles;
	copy->byvbase = byvbase;
	copy->byseg = byseg;
	copy->pins = 0;
	copy->nrecheck = 0;
	memcpy(spindles, dir->spindles, sizeof(SpindleEntry) * dir->nspindles);
	memcpy(byvbase, dir->byvbase, sizeof(int) * dir->nspindles);
	memcpy(byseg, dir->byseg, sizeof(SpindleSegRef) * dir->nspindles);
	return copy;
}

/* Does any range of dir overlap the next one in vbase order? */
static bool
directory_overlaps(SpindleDirectory *dir)
{
	int			i;

	for (i = 1; i < dir->nspindles; i++)
	{
		SpindleEntry *prev = &dir->spindles[dir->byvbase[i - 1]];
		SpindleEntry *cur = &dir->spindles[dir->byvbase[i]];

		if (prev->vbase + prev->vcount > cur->vbase)
			return true;
	}
	return false;
}

/* Build the orderings of dir's spindles by range and by relation. */
static void
sort_directory(SpindleDirectory *dir)
{
	int			i;

	for (i = 0; i < dir->nspindles; i++)
	{
		dir->byvbase[i] = i;
		dir->byseg[i].segment = dir->spindles[i].segment;
		dir->byseg[i].index = i;
	}
	qsort_arg(dir->byvbase, dir->nspindles, sizeof(int), cmp_index_vbase,
			  dir->spindles);
	qsort(dir->byseg, dir->nspindles, sizeof(SpindleSegRef), cmp_segref);
}

/*
 * Read a facade's directory from the catalog: every live spindle, or, if
 * tail_only, only the newest ones, from the last row back to the first
 * that is known full (its fill time recorded, or numbered below its
 * table's full mark: slots.c) or dropped.  Spindles fill in order, so every
 * spindle below such a row is full, and an insert never needs them (see
 * place_tuples): a producer's session then reads a few rows instead of the
 * whole directory.  Such a directory is marked partial: lookups by number
 * or TID must use a complete one (spindle_directory_acquire reads one in
 * full when it finds a partial one).  Normally the worker has recorded
 * every fill time but the last; if nobody has, the tail is the whole
 * directory, read backwards.
 */
static SpindleDirectory *
read_directory(Relation facade, CatalogRels *cr, Snapshot snap,
			   bool tail_only)
{
	SpindleDirectory *dir = new_directory(RelationGetRelid(facade),
										  tail_only ? 8 : 64);
	TupleDesc	td = RelationGetDescr(cr->heap);
	int64		full_below = tail_only ? spindle_slots_full_below(dir->facade) : 0;
	ScanDirection direction = tail_only ? BackwardScanDirection :
		ForwardScanDirection;
	ScanKeyData keys[3];
	SysScanDesc scan;
	HeapTuple	tup;
	int			n = 0;
	int			i;

	scan = begin_rows_scan(cr, dir->facade, PG_INT64_MIN, PG_INT64_MAX,
						   snap, keys);
	while ((tup = systable_getnext_ordered(scan, direction)) != NULL)
	{
		SpindleEntry sp;
		bool		dropped;

		decode_row(td, tup, &sp, &dropped);
		dir->max_spindle_no = Max(dir->max_spindle_no, sp.spindle_no);
		if (dropped && tail_only)
			break;
		if (dropped)
			continue;
		reserve_spindles(dir, n + 1);
		dir->spindles[n++] = sp;
		if (tail_only && (sp.filled_at != 0 || sp.spindle_no < full_below))
			break;
	}
	systable_endscan_ordered(scan);

	/* the tail was read newest first: put it in the order of numbers */
	for (i = 0; tail_only && i < n / 2; i++)
	{
		SpindleEntry tmp = dir->spindles[i];

		dir->spindles[i] = dir->spindles[n - 1 - i];
		dir->spindles[n - 1 - i] = tmp;
	}
	dir->nspindles = n;
	dir->partial = tail_only && tup != NULL;
	sort_directory(dir);
	return dir;
}

/*
 * Apply the changes read_changes found: remove the spindles marked in
 * removed[] (may be NULL), append the nadded ones (numbered above all of
 * dir's), and rebuild the orderings.  Returns false if two ranges now
 * overlap; dir is then unusable.
 */
static bool
apply_changes(SpindleDirectory *dir, const bool *removed,
			  const SpindleEntry *added, int nadded)
{
	int			nold = dir->nspindles;
	int		   *newpos = palloc(sizeof(int) * Max(nold, 1));
	int		   *addv = palloc(sizeof(int) * Max(nadded, 1));
	SpindleSegRef *adds = palloc(sizeof(SpindleSegRef) * Max(nadded, 1));
	int		   *byvbase;
	SpindleSegRef *byseg;
	int			nkept = 0;
	int			ntotal;
	int			i,
				j,
				k;

	/* the spindles that stay, in place and in order, then the new ones */
	for (i = 0; i < nold; i++)
	{
		if (removed != NULL && removed[i])
		{
			newpos[i] = -1;
			continue;
		}
		newpos[i] = nkept;
		if (nkept != i)
			dir->spindles[nkept] = dir->spindles[i];
		nkept++;
	}
	ntotal = nkept + nadded;
	reserve_spindles(dir, ntotal);
	if (nadded > 0)
		memcpy(&dir->spindles[nkept], added, sizeof(SpindleEntry) * nadded);
	for (i = 0; i < nadded; i++)
	{
		addv[i] = nkept + i;
		adds[i].segment = added[i].segment;
		adds[i].index = nkept + i;
	}
	qsort_arg(addv, nadded, sizeof(int), cmp_index_vbase, dir->spindles);
	qsort(adds, nadded, sizeof(SpindleSegRef), cmp_segref);

	/* each ordering: the old one without the removed, merged with the new */
	byvbase = MemoryContextAlloc(dir->cxt, sizeof(int) * dir->nalloc);
	for (i = 0, j = 0, k = 0; i < nold || j < nadded;)
	{
		int			old = -1;

		while (i < nold && (old = newpos[dir->byvbase[i]]) < 0)
			i++;
		if (i < nold &&
			(j >= nadded ||
			 dir->spindles[old].vbase <= dir->spindles[addv[j]].vbase))
		{
			byvbase[k++] = old;
			i++;
		}
		else if (j < nadded)
			byvbase[k++] = addv[j++];
	}
	Assert(k == ntotal);

	byseg = MemoryContextAlloc(dir->cxt, sizeof(SpindleSegRef) * dir->nalloc);
	for (i = 0, j = 0, k = 0; i < nold || j < nadded;)
	{
		SpindleSegRef ref = {InvalidOid, -1};

		while (i < nold && newpos[dir->byseg[i].index] < 0)
			i++;
		if (i < nold)
		{
			ref.segment = dir->byseg[i].segment;
			ref.index = newpos[dir->byseg[i].index];
		}
		if (i < nold && (j >= nadded || cmp_segref(&ref, &adds[j]) <= 0))
		{
			byseg[k++] = ref;
			i++;
		}
		else if (j < nadded)
			byseg[k++] = adds[j++];
	}
	Assert(k == ntotal);

	pfree(dir->byvbase);
	pfree(dir->byseg);
	dir->byvbase = byvbase;
	dir->byseg = byseg;
	dir->nspindles = ntotal;
	pfree(newpos);
	pfree(addv);
	pfree(adds);
	return !directory_overlaps(dir);
}

/*
 * Bring dir up to date with what changed since it was read (see "Keeping a
 * directory up to date"): the rows numbered above any it has seen, and the
 * rows of the spindles in recheck[].  Sets *changed if its spindles did.
 * Returns false if the result cannot be trusted: read it in full then
 * (dir is unusable).
 */
static bool
read_changes(SpindleDirectory *dir, CatalogRels *cr, Snapshot snap,
			 const int64 *recheck, int nrecheck, bool *changed)
{
	TupleDesc	td = RelationGetDescr(cr->heap);
	ScanKeyData keys[3];
	SysScanDesc scan;
	HeapTuple	tup;
	SpindleEntry *added = NULL;
	int			nadded = 0,
				addroom = 0;
	bool	   *removed = NULL;
	int64		maxno = dir->max_spindle_no;
	int			i;
	bool		ok;

	*changed = false;
	scan = begin_rows_scan(cr, dir->facade, dir->max_spindle_no + 1,
						   PG_INT64_MAX, snap, keys);
	while ((tup = systable_getnext_ordered(scan, ForwardScanDirection)) != NULL)
	{
		SpindleEntry sp;
		bool		dropped;

		decode_row(td, tup, &sp, &dropped);
		maxno = Max(maxno, sp.spindle_no);
		if (dropped)
			continue;
		if (nadded == addroom)
		{
			addroom = Max(8, addroom * 2);
			added = added == NULL ? palloc(sizeof(SpindleEntry) * addroom) :
				repalloc(added, sizeof(SpindleEntry) * addroom);
		}
		added[nadded++] = sp;
	}
	systable_endscan_ordered(scan);

	for (i = 0; i < nrecheck; i++)
	{
		SpindleEntry *sp = spindle_find_spindle(dir, recheck[i]);
		SpindleEntry row;
		bool		dropped = true;
		int			idx;

		if (sp == NULL)
			continue;
		idx = (int) (sp - dir->spindles);
		if (removed != NULL && removed[idx])
			continue;
		scan = begin_rows_scan(cr, dir->facade, recheck[i], recheck[i],
							   snap, keys);
		tup = systable_getnext_ordered(scan, ForwardScanDirection);
		if (tup != NULL)
			decode_row(td, tup, &row, &dropped);
		systable_endscan_ordered(scan);
		if (dropped)
		{
			if (removed == NULL)
				removed = palloc0(sizeof(bool) * dir->nspindles);
			removed[idx] = true;
			*changed = true;
			continue;
		}
		/* a spindle's relation and range never change while it exists */
		if (row.segment != sp->segment || row.vbase != sp->vbase ||
			row.vcount != sp->vcount)
			return false;
		sp->capacity = row.capacity;
		sp->filled_at = row.filled_at;
	}
	dir->max_spindle_no = maxno;
	if (nadded == 0 && removed == NULL)
		return true;
	*changed = true;
	ok = apply_changes(dir, removed, added, nadded);
	if (added != NULL)
		pfree(added);
	if (removed != NULL)
		pfree(removed);
	return ok;
}

/* Where this backend's next insert starts looking (see place_tuples). */
static void
set_open_hint(SpindleDirectory *dir, int64 open_spindle_no)
{
	int			lo = 0,
				hi = dir->nspindles;

	if (open_spindle_no == 0)
		lo = dir->nspindles - 1;	/* no history: start at the newest */
	else
	{
		/*
		 * Spindles before the one this backend last inserted into are full
		 * for good: start the next insert there, not at the oldest spindle.
		 */
		while (lo < hi)
		{
			int			mid = (lo + hi) / 2;

			if (dir->spindles[mid].spindle_no < open_spindle_no)
				lo = mid + 1;
			else
				hi = mid;
		}
	}
	dir->open_hint = Max(Min(lo, dir->nspindles - 1), 0);
	dir->hint_checked = false;
	dir->est_at = 0;
}

/*
 * Free the unpinned stale directories of tables that no longer exist (no
 * invalidation says a table was dropped rather than changed).
 */
static void
sweep_dropped_tables(Oid keep)
{
	static LocalTransactionId swept_in = InvalidLocalTransactionId;
	HASH_SEQ_STATUS status;
	DirCacheEntry *e;
	Oid			gone[16];
	int			ngone = 0;
	int			i;

	/* once per transaction is enough */
	if (MyProc->lxid == swept_in)
		return;
	swept_in = MyProc->lxid;
	hash_seq_init(&status, dir_cache);
	while ((e = hash_seq_search(&status)) != NULL)
	{
		if (ngone < lengthof(gone) && e->facade != keep &&
			(e->current == NULL ||
			 (e->current->stale && e->current->pins == 0)) &&
			!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(e->facade)))
			gone[ngone++] = e->facade;
	}
	for (i = 0; i < ngone; i++)
	{
		e = hash_search(dir_cache, &gone[i], HASH_FIND, NULL);
		if (e != NULL && e->current != NULL)
			free_directory(e->current);
		(void) hash_search(dir_cache, &gone[i], HASH_REMOVE, NULL);
	}
}

/*
 * Make e's directory current: update it (or, if pinned, a copy of it)
 * with what changed, or read it in full (see "Keeping a directory up to
 * date").  Returns the new current directory.
 */
static SpindleDirectory *
refresh_directory(Relation facade, DirCacheEntry *e, bool complete)
{
	Oid			relid = RelationGetRelid(facade);
	CatalogRels cr;
	SpindleDirectory *old;
	SpindleDirectory *dir = NULL;
	TransactionId class_xmin;
	int64		events_per_spindle;
	int64	   *recheck = NULL;
	int			nrecheck = 0;
	uint64		invalidations;
	bool		full;
	bool		changed = true;
	bool		found;
	Snapshot	snap;

	/* checked here, once per relcache version, for every reader and writer */
	spindle_check_layout(facade);
	events_per_spindle = spindle_rel_capacity_option(relid, &found);
	if (!found)
		events_per_spindle = spindle_events_per_spindle;

	/* every lock first, then the invalidations, then the snapshot */
	catalog_open(&cr);
	AcceptInvalidationMessages();
	class_xmin = facade_class_xmin(relid);
	sweep_dropped_tables(relid);
	invalidations = dir_invalidations;

	old = e->current;
	full = old == NULL || old->needs_full ||
		old->parallel_read || !TransactionIdIsValid(class_xmin) ||
		old->class_xmin != class_xmin ||
		(complete && old->partial) ||
		spindle_created_here(facade) || IsInParallelMode();
	if (old != NULL)
	{
		if (!full && old->nrecheck > 0)
		{
			nrecheck = old->nrecheck;
			recheck = palloc(sizeof(int64) * nrecheck);
			memcpy(recheck, old->recheck, sizeof(int64) * nrecheck);
		}
		/* until this is done, an error leaves it for a full read */
		old->nrecheck = 0;
		old->stale = true;
		old->needs_full = true;
	}

	snap = read_snapshot();
	if (!full)
	{
		dir = old->pins > 0 ? copy_directory(old) : old;
		dir->updating = true;
		if (!read_changes(dir, &cr, snap, recheck, nrecheck, &changed))
		{
			if (dir != old)
				free_directory(dir);
			dir = NULL;
		}
	}
	if (dir == NULL)
	{
		/* a producer needs only the newest spindles (read_directory) */
		dir = read_directory(facade, &cr, snap,
							 !complete && !spindle_created_here(facade) &&
							 !IsInParallelMode());
		changed = true;
	}
	UnregisterSnapshot(snap);
	catalog_close(&cr);
	if (recheck != NULL)
		pfree(recheck);

	/*
	 * The directory was read with the latest snapshot; the catalog snapshot
	 * (syscache and relcache lookups) may be older, taken before a creator
	 * it lists committed and not renewed since, its invalidation not sent
	 * yet, or kept by a REPEATABLE READ transaction: opening that spindle
	 * would find no relation, and its events would be taken for gone.  A
	 * catalog snapshot taken from now on sees every spindle listed.
	 */
	if (!IsInParallelMode())
		InvalidateCatalogSnapshot();

	dir->updating = false;
	/* nothing above should have processed an invalidation; if one did: */
	dir->stale = dir->needs_full = dir_invalidations != invalidations;
	dir->class_xmin = class_xmin;
	dir->has_own = catalog_written || created_spindles;
	dir->parallel_read = IsInParallelMode();
	dir->events_per_spindle = events_per_spindle;
	if (changed)
		set_open_hint(dir, e->open_spindle_no);

	if (dir != old)
	{
		MemoryContextSetParent(dir->cxt, TopMemoryContext);
		if (old != NULL)
		{
			if (old->pins > 0)
				bury_directory(old);
			else
				free_directory(old);
		}
		e->current = dir;
	}
	return dir;
}

/*
 * Return the directory of a facade, pinned: the caller must call
 * spindle_directory_release() when done (an error releases it too, at
 * transaction end).
 *
 * It first processes the invalidations that have arrived, so it never
 * returns a directory older than an invalidation sent before the call.
 * Waiting for the next lock acquisition to do that is not enough: a
 * statement of a transaction that already holds its locks (a cached plan
 * opens nothing new) would resolve TIDs with a directory that still holds
 * spindles dropped since, whose ranges may have been given to new
 * spindles; an index fetch would then report a new event's entry dead and
 * the index would kill it.  A drop's invalidations are sent before its
 * locks are released, so before cleanup can forget the range and before
 * anyone can give it again; when nothing has arrived this costs one
 * unlocked test.
 */
static SpindleDirectory *
acquire_directory(Relation facade, bool complete)
{
	DirCacheEntry *e;
	bool		found;
	Oid			relid = RelationGetRelid(facade);
	SpindleDirectory *dir;

	spindle_check_preloaded();
	AcceptInvalidationMessages();
	e = hash_search(dir_cache, &relid, HASH_ENTER, &found);
	if (!found)
	{
		e->current = NULL;
		e->open_spindle_no = 0;
	}
	dir = e->current;
	if (dir == NULL || dir->stale || (complete && dir->partial) ||
		(dir->parallel_read && !IsInParallelMode()))
		dir = refresh_directory(facade, e, complete);
	dir->pins++;
	return dir;
}

SpindleDirectory *
spindle_directory_acquire(Relation facade)
{
	return acquire_directory(facade, true);
}

/*
 * The same for an insert, which needs only the newest spindles: the
 * directory returned may be partial (see read_directory), holding the
 * spindles from one that is known full, or the first, to the newest.
 */
SpindleDirectory *
spindle_directory_acquire_tail(Relation facade)
{
	return acquire_directory(facade, false);
}

/*
 * The same, knowing every committed spindle numbered up to spindle_no: for
 * a caller that holds the number of a spindle someone else has seen (a
 * queue position another consumer claimed or leased, a msg_id given to
 * ack).  A spindle the directory does not list is gone if a higher number
 * was read (creation is serialised, so spindles commit in the order of
 * their numbers); a higher one may have committed since the directory was
 * read with its invalidation not arrived yet (it is sent after the commit
 * shows in snapshots), so then the catalog is read again for what changed.
 */
SpindleDirectory *
spindle_directory_acquire_upto(Relation facade, int64 spindle_no)
{
	SpindleDirectory *dir = acquire_directory(facade, true);

	if (spindle_no <= dir->max_spindle_no)
		return dir;
	spindle_directory_release(dir);
	spindle_directory_forget(RelationGetRelid(facade));
	return acquire_directory(facade, true);
}

/*
 * The same, knowing every spindle whose creation committed before the call:
 * for a reader whose snapshot (or whose decision that something is gone)
 * must cover every committed spindle.  A creator shows in snapshots before
 * it sends its invalidation, and cleanup may forget its pending range in
 * between, so neither the cached directory nor the pending ranges say
 * whether a spindle committed meanwhile; the slot map's next spindle number
 * does: it was taken before the creation committed.  Numbers taken by
 * creations that are running or rolled back cost a read of what changed
 * (one index probe) until the next creation commits.
 */
SpindleDirectory *
spindle_directory_acquire_current(Relation facade)
{
	/* every spindle committed by now has a number below the next one */
	return spindle_directory_acquire_upto(facade,
										  spindle_peek_spindle_no(facade) - 1);
}

/*
 * Have the next acquire of a facade's directory read the catalog for what
 * changed, when an invalidation may not have arrived yet (see
 * spindle_resolve_tid): it finds every spindle committed by then.
 */
void
spindle_directory_forget(Oid facade)
{
	DirCacheEntry *e = hash_search(dir_cache, &facade, HASH_FIND, NULL);

	if (e != NULL && e->current != NULL)
		e->current->stale = true;
}

/* Remember the spindle this backend inserted into last (see above). */
void
spindle_directory_note_open(SpindleDirectory *dir, int64 spindle_no)
{
	DirCacheEntry *e = hash_search(dir_cache, &dir->facade, HASH_FIND, NULL);

	if (e != NULL)
		e->open_spindle_no = spindle_no;
}

void
spindle_directory_release(SpindleDirectory *dir)
{
	Assert(dir->pins > 0);
	dir->pins--;
	if (dir->pins == 0 && list_member_ptr(dir_graveyard, dir))
	{
		dir_graveyard = list_delete_ptr(dir_graveyard, dir);
		free_directory(dir);
	}
}

/* The entry with this spindle number, or NULL. */
SpindleEntry *
spindle_find_spindle(SpindleDirectory *dir, int64 spindle_no)
{
	int			lo = 0,
				hi = dir->nspindles - 1;

	while (lo <= hi)
	{
		int			mid = (lo + hi) / 2;

		if (dir->spindles[mid].spindle_no == spindle_no)
			return &dir->spindles[mid];
		if (dir->spindles[mid].spindle_no < spindle_no)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return NULL;
}

/* The spindle whose range of virtual slots holds vslot, or NULL. */
SpindleEntry *
spindle_find_by_vslot(SpindleDirectory *dir, int64 vslot)
{
	int			lo = 0,
				hi = dir->nspindles - 1;
	SpindleEntry *best = NULL;

	/* the last spindle whose range starts at or before vslot */
	while (lo <= hi)
	{
		int			mid = (lo + hi) / 2;
		SpindleEntry *sp = &dir->spindles[dir->byvbase[mid]];

		if (sp->vbase <= vslot)
		{
			best = sp;
			lo = mid + 1;
		}
		else
			hi = mid - 1;
	}
	if (best != NULL && vslot < best->vbase + best->vcount)
		return best;
	return NULL;
}

/* ----------------------------------------------------------------
 * Catalog changes
 * ----------------------------------------------------------------
 */

/*
 * Was this facade created or given new storage in the current transaction?
 * Then no other backend can see it or its spindles yet.
 */
bool
spindle_created_here(Relation facade)
{
	return facade->rd_createSubid != InvalidSubTransactionId ||
		facade->rd_firstRelfilenodeSubid != InvalidSubTransactionId;
}

/*
 * Read the facade's row of spindle.table_catalog by index (latest
 * snapshot): whether it has one, and its retire_slots if asked (0 when
 * there is no row).
 */
static bool
read_table_row(Oid facade, int64 *retire_slots)
{
	Relation	heap;
	Relation	idx;
	ScanKeyData key;
	SysScanDesc scan;
	Snapshot	snap;
	HeapTuple	tup;
	bool		found;

	heap = open_own_table("table_catalog");
	idx = open_index_on(heap, 1, InvalidAttrNumber);
	if (idx == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("spindle.table_catalog is not as this version of spindle made it"),
				 errhint("Reinstall the spindle extension.")));
	snap = read_snapshot();
	ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(facade));
	scan = systable_beginscan_ordered(heap, idx, snap, 1, &key);
	tup = systable_getnext_ordered(scan, ForwardScanDirection);
	found = tup != NULL;
	if (found && retire_slots != NULL)
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_tc_retire_slots,
									 RelationGetDescr(heap), &isnull);

		if (!isnull)
			*retire_slots = DatumGetInt64(d);
	}
	systable_endscan_ordered(scan);
	UnregisterSnapshot(snap);
	index_close(idx, NoLock);
	table_close(heap, NoLock);
	return found;
}

/* Make sure spindle.table_catalog has a row for the facade. */
void
spindle_register_table(Oid facade)
{
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(facade)};

	/* a plain read first: the row exists but for a table's first spindle */
	if (!read_table_row(facade, NULL))
	{
		/* not a row of the directory */
		writing_creation = true;
		catalog_write("INSERT INTO spindle.table_catalog (relation) VALUES ($1)"
					  " ON CONFLICT (relation) DO NOTHING",
					  1, types, values);
		writing_creation = false;
	}
}

/* OIDs of every registered spindle table of this database. */
List *
spindle_catalog_tables(void)
{
	SpindleSpi	spi;
	List	   *result = NIL;
	uint64		i;

	spindle_spi_begin(&spi);
	spi_run("SELECT relation FROM spindle.table_catalog ORDER BY relation",
			0, NULL, NULL, NULL, true);
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Oid			relid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
														   SPI_tuptable->tupdesc,
														   1, &isnull));
		MemoryContext old = MemoryContextSwitchTo(spi.outer);

		result = lappend_oid(result, relid);
		MemoryContextSwitchTo(old);
	}
	spindle_spi_end(&spi);
	return result;
}

/*
 * Forget every catalog row of a facade (it is being dropped).  When the
 * whole extension is being dropped, its catalog may already be gone.
 */
void
spindle_forget_table(Oid facade)
{
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(facade)};
	Oid			nsp = get_namespace_oid(SPINDLE_SCHEMA, true);

	if (!OidIsValid(nsp) ||
		!OidIsValid(get_relname_relid("spindle_catalog", nsp)) ||
		!OidIsValid(get_relname_relid("table_catalog", nsp)))
		return;
	catalog_write("DELETE FROM spindle.spindle_catalog"
				  " WHERE relation OPERATOR(pg_catalog.=) $1",
				  1, types, values);
	catalog_write("DELETE FROM spindle.table_catalog"
				  " WHERE relation OPERATOR(pg_catalog.=) $1",
				  1, types, values);
	spindle_directory_forget(facade);
}

/* The OID of schema pg_spindle, which the install script creates. */
static Oid
storage_namespace(void)
{
	Oid			nsp = get_namespace_oid(SPINDLE_STORAGE_SCHEMA, true);

	if (!OidIsValid(nsp))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_SCHEMA),
				 errmsg("schema \"%s\" does not exist", SPINDLE_STORAGE_SCHEMA),
				 errhint("Reinstall the spindle extension.")));
	return nsp;
}

/*
 * The per-table lock that serialises spindle creation (and so range
 * allocation, see slotmap.c).  It is not the facade's own lock: creating a
 * spindle must not wait behind VACUUM, ANALYZE or a user's SHARE UPDATE
 * EXCLUSIVE lock on the table, all of which let producers run.  Held until
 * the end of the creating transaction.
 */
#define SPINDLE_CREATE_LOCK_SUBID 0x5350

void
spindle_lock_creation(Oid facade)
{
	LockDatabaseObject(RelationRelationId, facade, SPINDLE_CREATE_LOCK_SUBID,
					   ExclusiveLock);
}

bool
spindle_creation_locked_by_me(Oid facade)
{
	LOCKTAG		tag;

	SET_LOCKTAG_OBJECT(tag, MyDatabaseId, RelationRelationId, facade,
					   SPINDLE_CREATE_LOCK_SUBID);
	return LockHeldByMe(&tag, ExclusiveLock);
}

/* ----------------------------------------------------------------
 * Spindle creation
 *
 * Range allocation.  Under the creation lock, and with a snapshot taken
 * after it, the ranges taken are exactly those of the facade's catalog
 * rows plus its pending ranges (slotmap.c): every earlier creator has
 * ended, so its rows are visible if it committed and its pending entry
 * stays if it did not (rows of a rolled-back creation are dead, and its
 * pending entry covers its range until cleanup has removed the index
 * entries pointing into it).  What else writes ranges, and why it is
 * safe: cleanup deletes the rows of dropped spindles and the pending
 * entries of ended creators only after their index entries are gone, and
 * a deletion not yet committed still shows its row (the range is taken a
 * little longer); a drop only sets dropped_at, the row and its range stay;
 * TRUNCATE needs ACCESS EXCLUSIVE on the table, and creators hold at least
 * ACCESS SHARE.  The ranges are read once per creating call, by index
 * (the (relation, vbase) index gives them in order), and the call's
 * spindles are placed among them in memory.
 * ----------------------------------------------------------------
 */

typedef struct VRange
{
	int64		vbase;
	int64		vcount;
} VRange;

static int
cmp_vrange(const void *a, const void *b)
{
	int64		va = ((const VRange *) a)->vbase;
	int64		vb = ((const VRange *) b)->vbase;

	return (va > vb) - (va < vb);
}

/* Ranges ordered by vbase, and where first fit stopped (take_range). */
typedef struct RangeSet
{
	VRange	   *r;
	int			n;
	int			room;
	int64		taken;			/* slots in them */
	int64		cursor_capacity;	/* take_range resumes for this one ... */
	int			cursor;			/* ... at this range ... */
	int64		cursor_pos;		/* ... and this slot */
} RangeSet;

/* Add a range, at position `at` (-1: at the end; order is the caller's). */
static void
rangeset_insert(RangeSet *rs, int at, int64 vbase, int64 vcount)
{
	if (rs->n == rs->room)
	{
		rs->room = Max(64, rs->room * 2);
		rs->r = rs->r == NULL ? palloc(sizeof(VRange) * rs->room) :
			repalloc(rs->r, sizeof(VRange) * rs->room);
	}
	if (at < 0)
		at = rs->n;
	if (at < rs->n)
		memmove(&rs->r[at + 1], &rs->r[at], sizeof(VRange) * (rs->n - at));
	rs->r[at].vbase = vbase;
	rs->r[at].vcount = vcount;
	rs->n++;
	rs->taken += vcount;
}

/* Add a range where it belongs in vbase order. */
static void
rangeset_add_sorted(RangeSet *rs, int64 vbase, int64 vcount)
{
	int			lo = 0,
				hi = rs->n;

	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;

		if (rs->r[mid].vbase <= vbase)
			lo = mid + 1;
		else
			hi = mid;
	}
	rangeset_insert(rs, lo, vbase, vcount);
}

/*
 * A walk over the facade's catalog ranges in vbase order (either way), as
 * an index-only scan of the (relation, vbase) INCLUDE (vcount) index reads
 * them: an entry whose heap page the visibility map marks all-visible is
 * taken as it is, any other only if the heap has a version of its row
 * that the snapshot sees.  So the heap is visited only on pages that
 * changed since the catalog was last vacuumed.  Rows dropped or not: only
 * cleanup gives a range back.
 */
typedef struct RangeWalk
{
	CatalogRels *cr;
	IndexScanDesc scan;
	ScanDirection dir;
	TupleTableSlot *slot;
	Buffer		vmbuf;
	int			nread;			/* ranges returned so far */
} RangeWalk;

/* Start a walk; with below >= 0, only over ranges starting below it. */
static void
walk_begin(RangeWalk *w, CatalogRels *cr, Oid facade, Snapshot snap,
		   ScanDirection dir, int64 below)
{
	ScanKeyData keys[2];
	int			nkeys = 1;

	Assert(cr->byvbase_vcount);
	w->cr = cr;
	w->dir = dir;
	w->slot = table_slot_create(cr->heap, NULL);
	w->vmbuf = InvalidBuffer;
	w->nread = 0;
	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(facade));
	if (below >= 0)
		ScanKeyInit(&keys[nkeys++], 2, BTLessStrategyNumber, F_INT8LT,
					Int64GetDatum(below));
	w->scan = index_beginscan(cr->heap, cr->byvbase, snap, nkeys, 0);
	w->scan->xs_want_itup = true;
	index_rescan(w->scan, keys, nkeys, NULL, 0);
}

static bool
walk_next(RangeWalk *w, int64 *vbase, int64 *vcount)
{
	ItemPointer tid;

	while ((tid = index_getnext_tid(w->scan, w->dir)) != NULL)
	{
		bool		isnull;

		if (!VM_ALL_VISIBLE(w->cr->heap, ItemPointerGetBlockNumber(tid),
							&w->vmbuf))
		{
			if (!index_fetch_heap(w->scan, w->slot))
				continue;		/* no version of it is visible */
			ExecClearTuple(w->slot);
		}
		*vbase = DatumGetInt64(index_getattr(w->scan->xs_itup, 2,
											 w->scan->xs_itupdesc, &isnull));
		*vcount = DatumGetInt64(index_getattr(w->scan->xs_itup, 3,
											  w->scan->xs_itupdesc, &isnull));
		w->nread++;
		return true;
	}
	return false;
}

static void
walk_end(RangeWalk *w)
{
	if (BufferIsValid(w->vmbuf))
		ReleaseBuffer(w->vmbuf);
	index_endscan(w->scan);
	ExecDropSingleTupleTableSlot(w->slot);
}

/*
 * First fit in memory: find room for `capacity` events (0: as many as the
 * largest gap holds) among the gaps of rs, lowest slots first, and take
 * it.  Calls with the same capacity resume where the last one stopped: no
 * gap before it holds that many.
 */
static bool
take_range(RangeSet *rs, int64 capacity, int64 *vbase, int64 *vcount)
{
	int			i = 0;
	int			at = -1;
	int64		pos = 0;
	int64		best_base = -1,
				best_len = 0;

	if (capacity > 0 && capacity == rs->cursor_capacity)
	{
		i = rs->cursor;
		pos = rs->cursor_pos;
	}
	for (; i <= rs->n; i++)
	{
		int64		next = (i < rs->n) ? rs->r[i].vbase : SPINDLE_VSLOTS;
		int64		gap = next - pos;

		if (gap > 0)
		{
			if (capacity > 0 && gap >= capacity)
			{
				best_base = pos;
				best_len = capacity;
				at = i;
				break;
			}
			if (capacity == 0 && gap > best_len)
			{
				best_base = pos;
				best_len = gap;
				at = i;
			}
		}
		if (i < rs->n)
			pos = Max(pos, rs->r[i].vbase + rs->r[i].vcount);
	}
	if (best_base < 0)
		return false;
	rangeset_insert(rs, at, best_base, best_len);
	rs->cursor_capacity = capacity;
	rs->cursor = at + 1;
	rs->cursor_pos = best_base + best_len;
	*vbase = best_base;
	*vcount = best_len;
	return true;
}

/*
 * Range allocation for one creating call (see "Range allocation" above).
 * The policy is first fit, lowest slots first, so that the slot map stays
 * compact, at a cost that does not grow with the number of spindles:
 *
 * 1. walk the ranges from slot 0, but over at most ALLOC_WALK of them: a
 *    table with fewer ranges, or whose lowest gap is among the first ones
 *    (a queue whose oldest spindles were retired), gets exactly first fit;
 * 2. else take the slots right after the range given last (the newest
 *    spindle's), if free: one probe of the index for the range below
 *    their end (ranges never overlap, so that one is the only one that
 *    could reach into them) and a look at the pending ranges;
 * 3. else, and for every ALLOC_FULL_EVERY-th spindle number (so that a
 *    gap deeper than step 1 looks is never missed for long), read every
 *    range and place this call's spindles among them in memory.
 *
 * So between two full reads at most ALLOC_FULL_EVERY spindles go right
 * after the last one instead of into a deeper gap; every other placement
 * is the one first fit would choose.  Pending ranges and the ranges given
 * by this call so far (which the snapshot does not see) are kept in
 * `extra`.
 */
#define ALLOC_WALK			64
#define ALLOC_FULL_EVERY	64

typedef struct Allocator
{
	Relation	facade;
	CatalogRels *cr;
	Snapshot	snap;
	RangeSet	extra;			/* pending, and this call's */
	bool		full;			/* all ranges are in `all` */
	RangeSet	all;
	int64		rover;			/* end of the range given last */
} Allocator;

static void
allocator_begin(Allocator *a, Relation facade, CatalogRels *cr,
				Snapshot snap)
{
	SpindlePending pending[SPINDLE_MAX_PENDING];
	int			npending = spindle_pending_read(facade, pending);
	int64		newest_no = 0;
	ScanKeyData keys[3];
	SysScanDesc scan;
	HeapTuple	tup;
	int			i;

	memset(a, 0, sizeof(Allocator));
	a->facade = facade;
	a->cr = cr;
	a->snap = snap;
	a->extra.cursor_capacity = -1;
	a->all.cursor_capacity = -1;

	/* the range given last: the newest row's, or a newer pending one's */
	scan = begin_rows_scan(cr, RelationGetRelid(facade), PG_INT64_MIN,
						   PG_INT64_MAX, snap, keys);
	tup = systable_getnext_ordered(scan, BackwardScanDirection);
	if (tup != NULL)
	{
		SpindleEntry sp;
		bool		dropped;

		decode_row(RelationGetDescr(cr->heap), tup, &sp, &dropped);
		newest_no = sp.spindle_no;
		a->rover = sp.vbase + sp.vcount;
	}
	systable_endscan_ordered(scan);
	for (i = 0; i < npending; i++)
	{
		rangeset_add_sorted(&a->extra, pending[i].vbase, pending[i].vcount);
		if (pending[i].spindle_no + pending[i].nspindles - 1 > newest_no)
		{
			newest_no = pending[i].spindle_no + pending[i].nspindles - 1;
			a->rover = (int64) pending[i].vbase + pending[i].vcount;
		}
	}
}

/* Read every range: the catalog's, merged with `extra`. */
static void
allocator_read_all(Allocator *a)
{
	Oid			relid = RelationGetRelid(a->facade);
	RangeSet   *rs = &a->all;
	int			i,
				j;
	VRange	   *catalog;
	int			ncatalog;

	if (a->cr->byvbase_vcount)
	{
		RangeWalk	w;
		int64		vbase,
					vcount;

		walk_begin(&w, a->cr, relid, a->snap, ForwardScanDirection, -1);
		while (walk_next(&w, &vbase, &vcount))
			rangeset_insert(rs, -1, vbase, vcount);
		walk_end(&w);
	}
	else
	{
		/* a database without the index the install script makes */
		TupleDesc	td = RelationGetDescr(a->cr->heap);
		ScanKeyData keys[3];
		SysScanDesc scan;
		HeapTuple	tup;

		scan = begin_rows_scan(a->cr, relid, PG_INT64_MIN, PG_INT64_MAX,
							   a->snap, keys);
		while ((tup = systable_getnext_ordered(scan, ForwardScanDirection)) != NULL)
		{
			SpindleEntry sp;
			bool		dropped;

			decode_row(td, tup, &sp, &dropped);
			rangeset_insert(rs, -1, sp.vbase, sp.vcount);
		}
		systable_endscan_ordered(scan);
		if (rs->n > 1)
			qsort(rs->r, rs->n, sizeof(VRange), cmp_vrange);
	}

	/* merge `extra` in */
	catalog = rs->r;
	ncatalog = rs->n;
	memset(rs, 0, sizeof(RangeSet));
	rs->cursor_capacity = -1;
	for (i = 0, j = 0; i < ncatalog || j < a->extra.n;)
	{
		if (j >= a->extra.n ||
			(i < ncatalog && catalog[i].vbase <= a->extra.r[j].vbase))
		{
			rangeset_insert(rs, -1, catalog[i].vbase, catalog[i].vcount);
			i++;
		}
		else
		{
			rangeset_insert(rs, -1, a->extra.r[j].vbase, a->extra.r[j].vcount);
			j++;
		}
	}
	if (catalog != NULL)
		pfree(catalog);
	a->full = true;
}

/*
 * Step 1: first fit over the lowest ranges.  Returns true with *vbase set
 * if it found room; false with *exhausted set if it saw every range and
 * there is no room at all.
 */
static bool
allocator_low_walk(Allocator *a, int64 capacity, int64 *vbase,
				   bool *exhausted)
{
	RangeWalk	w;
	int64		pos = 0;
	int64		cb = 0,
				cc = 0;
	bool		have = false;
	bool		more = true;
	bool		found = false;
	int			j = 0;

	*exhausted = false;
	walk_begin(&w, a->cr, RelationGetRelid(a->facade), a->snap,
			   ForwardScanDirection, -1);
	for (;;)
	{
		int64		nb,
					nc;

		if (!have && more && w.nread < ALLOC_WALK)
		{
			have = walk_next(&w, &cb, &cc);
			more = have;
		}
		if (!have && more)
			break;				/* walked as far as step 1 goes */
		/* the next range in vbase order, the catalog's or an extra one */
		if (have && (j >= a->extra.n || cb <= a->extra.r[j].vbase))
		{
			nb = cb;
			nc = cc;
			have = false;
		}
		else if (j < a->extra.n)
		{
			nb = a->extra.r[j].vbase;
			nc = a->extra.r[j].vcount;
			j++;
		}
		else
		{
			/* past every range */
			if (SPINDLE_VSLOTS - pos >= capacity)
			{
				*vbase = pos;
				found = true;
			}
			else
				*exhausted = true;
			break;
		}
		if (nb - pos >= capacity)
		{
			*vbase = pos;
			found = true;
			break;
		}
		pos = Max(pos, nb + nc);
	}
	walk_end(&w);
	return found;
}

/* Step 2: are the `capacity` slots from a->rover free? */
static bool
allocator_rover_fits(Allocator *a, int64 capacity)
{
	int64		lo = a->rover;
	int64		hi = a->rover + capacity;
	RangeWalk	w;
	int64		vbase,
				vcount;
	bool		fits = hi <= SPINDLE_VSLOTS;
	int			i;

	for (i = 0; fits && i < a->extra.n; i++)
		if (a->extra.r[i].vbase < hi &&
			a->extra.r[i].vbase + a->extra.r[i].vcount > lo)
			fits = false;
	if (!fits)
		return false;
	/* the range starting last below hi is the only one that could reach in */
	walk_begin(&w, a->cr, RelationGetRelid(a->facade), a->snap,
			   BackwardScanDirection, hi);
	if (walk_next(&w, &vbase, &vcount) && vbase + vcount > lo)
		fits = false;
	walk_end(&w);
	return fits;
}

/* Give spindle number spindle_no a range of `capacity` slots (see above). */
static bool
allocator_take(Allocator *a, int64 capacity, int64 spindle_no,
			   int64 *vbase, int64 *vcount)
{
	bool		found = false;
	bool		exhausted = false;

	if (!a->full &&
		(capacity == 0 || !a->cr->byvbase_vcount ||
		 spindle_no % ALLOC_FULL_EVERY == 0))
		allocator_read_all(a);
	if (!a->full)
	{
		found = allocator_low_walk(a, capacity, vbase, &exhausted);
		if (!found && !exhausted && allocator_rover_fits(a, capacity))
		{
			*vbase = a->rover;
			found = true;
		}
		if (found)
		{
			*vcount = capacity;
			rangeset_add_sorted(&a->extra, *vbase, *vcount);
			a->rover = *vbase + *vcount;
			return true;
		}
		allocator_read_all(a);
	}
	if (!take_range(&a->all, capacity, vbase, vcount))
		return false;
	a->rover = *vbase + *vcount;
	return true;
}

static void
allocator_end(Allocator *a)
{
	if (a->extra.r != NULL)
		pfree(a->extra.r);
	if (a->all.r != NULL)
		pfree(a->all.r);
}

/*
 * Forget the pending ranges whose creation committed: the catalog has them.
 * (Those of rolled-back creations stay until cleanup removed their index
 * entries.)  The caller holds the creation lock, so every creator that
 * finished before has its catalog rows visible to the latest snapshot.
 */
static void
forget_committed_pending(Relation facade)
{
	SpindlePending pending[SPINDLE_MAX_PENDING];
	int			n = spindle_pending_read(facade, pending);
	int64	   *done = palloc(sizeof(int64) * Max(n, 1));
	int			ndone = 0;
	int			i;

	for (i = 0; i < n; i++)
		if (!spindle_pending_in_progress(&pending[i]) &&
			spindle_catalog_has_spindle(RelationGetRelid(facade),
										pending[i].spindle_no,
										pending[i].nspindles))
			done[ndone++] = pending[i].spindle_no;
	spindle_pending_remove(facade, done, ndone);
	pfree(done);
}

/* Release every lock this backend holds on the object with this tag. */
static void
release_all_modes(LOCKTAG *tag)
{
	LOCKMODE	mode;

	for (mode = AccessShareLock; mode <= AccessExclusiveLock; mode++)
		while (LockHeldByMe(tag, mode))
			LockRelease(tag, mode, false);
}

/*
 * Give up the locks that creating spindle relation `segment` took: on it,
 * its TOAST table and TOAST index, and its row type (about five per
 * spindle).  Nobody else can see a relation before its creator commits, so
 * core takes them only "because it doesn't hurt" (heap.c); a transaction
 * that creates many spindles (CREATE TABLE AS, a COPY into a table created
 * in the same transaction, as pg_restore --single-transaction does) would
 * otherwise fill the shared lock table with them.  Once it commits, the
 * rules for spindles apply: nobody needs a lock on one but while using it.
 */
static void
release_creation_locks(Oid segment)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(segment));
	Oid			toast = InvalidOid;
	Oid			rowtype = InvalidOid;
	LOCKTAG		tag;

	if (HeapTupleIsValid(tup))
	{
		toast = ((Form_pg_class) GETSTRUCT(tup))->reltoastrelid;
		rowtype = ((Form_pg_class) GETSTRUCT(tup))->reltype;
		ReleaseSysCache(tup);
	}
	if (OidIsValid(toast))
	{
		Relation	trel = relation_open(toast, NoLock);
		List	   *indexes = RelationGetIndexList(trel);
		ListCell   *lc;

		relation_close(trel, NoLock);
		foreach(lc, indexes)
		{
			SET_LOCKTAG_RELATION(tag, MyDatabaseId, lfirst_oid(lc));
			release_all_modes(&tag);
		}
		list_free(indexes);
		SET_LOCKTAG_RELATION(tag, MyDatabaseId, toast);
		release_all_modes(&tag);
	}
	if (OidIsValid(rowtype))
	{
		SET_LOCKTAG_OBJECT(tag, MyDatabaseId, TypeRelationId, rowtype, 0);
		release_all_modes(&tag);
	}
	SET_LOCKTAG_RELATION(tag, MyDatabaseId, segment);
	release_all_modes(&tag);
}

/*
 * Create the relation of one spindle (and its TOAST table) and record it,
 * with its range of virtual slots [vbase, vbase + vcount) recorded as
 * pending first.  The caller holds the creation lock and AccessShareLock
 * (at least) on the facade.
 *
 * Spindles belong to the bootstrap superuser, whoever owns the table: an
 * owner change of the table, REASSIGN OWNED or DROP OWNED BY its old owner
 * must not touch them (they go with the table through their dependency).
 * Nobody but a superuser can read them directly.
 */
static void
create_one_spindle(Relation facade, int64 spindle_no, int64 capacity,
				   int64 vbase, int64 vcount)
{
	char		relname[NAMEDATALEN];
	TupleDesc	tupdesc;
	Datum		reloptions;
	Oid			segment;
	ObjectAddress segaddr,
				facaddr;
	static char *validnsps[] = HEAP_RELOPT_NAMESPACES;
	Oid			types[6] = {OIDOID, INT8OID, OIDOID, INT8OID, INT8OID, INT8OID};
	Datum		values[6];
	SpindlePending p;

	/*
	 * Record the range as pending, unless the table itself was created by
	 * this very subtransaction: if that rolls back, the table and its
	 * indexes go with it.  (Not so for new storage: SET TABLESPACE keeps
	 * the indexes; see options.c.)
	 */
	if (facade->rd_createSubid != GetCurrentSubTransactionId())
	{
		p.spindle_no = spindle_no;
		p.fxid = GetCurrentFullTransactionId();
		p.vbase = (uint32) vbase;
		p.vcount = (uint32) vcount;
		p.nspindles = 1;
		spindle_pending_add(facade, &p);
	}

	snprintf(relname, sizeof(relname), "s%u_%lld",
			 RelationGetRelid(facade), (long long) spindle_no);
	tupdesc = CreateTupleDescCopy(RelationGetDescr(facade));

	/* autovacuum has nothing to do in a spindle; its TOAST table is heap */
	reloptions = transformRelOptions((Datum) 0,
									 list_make1(makeDefElem("autovacuum_enabled",
															(Node *) makeString("false"), -1)),
									 NULL, validnsps, false, false);
	(void) heap_reloptions(RELKIND_RELATION, reloptions, true);

	segment = heap_create_with_catalog(relname,
									   storage_namespace(),
									   facade->rd_rel->reltablespace,
									   InvalidOid, InvalidOid, InvalidOid,
									   BOOTSTRAP_SUPERUSERID,
									   spindle_segment_am_oid(),
									   tupdesc, NIL,
									   RELKIND_RELATION,
									   facade->rd_rel->relpersistence,
									   false, false, ONCOMMIT_NOOP,
									   reloptions,
									   false, true, true,
									   InvalidOid, NULL);
	CommandCounterIncrement();
	NewRelationCreateToastTable(segment, (Datum) 0);

	/* dropped with the facade, droppable on its own */
	ObjectAddressSet(segaddr, RelationRelationId, segment);
	ObjectAddressSet(facaddr, RelationRelationId, RelationGetRelid(facade));
	recordDependencyOn(&segaddr, &facaddr, DEPENDENCY_AUTO);
	/* never a member of whatever extension is being created right now */
	if (creating_extension)
		deleteDependencyRecordsForClass(RelationRelationId, segment,
										ExtensionRelationId,
										DEPENDENCY_EXTENSION);

	values[0] = ObjectIdGetDatum(RelationGetRelid(facade));
	values[1] = Int64GetDatum(spindle_no);
	values[2] = ObjectIdGetDatum(segment);
	values[3] = Int64GetDatum(capacity);
	values[4] = Int64GetDatum(vbase);
	values[5] = Int64GetDatum(vcount);
	/* a row that a directory read by what changed may take in */
	writing_creation = true;
	catalog_write("INSERT INTO spindle.spindle_catalog"
				  " (relation, spindle_no, segment, capacity, vbase, vcount)"
				  " VALUES ($1, $2, $3, $4, $5, $6)",
				  6, types, values);
	writing_creation = false;
	release_creation_locks(segment);
}

/*
 * Has this spindle never been given an event?  1 if so, 0 if it has events
 * (or slots handed out for them), -1 if it no longer exists.
 */
static int
segment_is_empty(Oid segment)
{
	Relation	seg;
	bool		empty;

	/*
	 * Never wait: the creation lock is held, and a dropper holding this
	 * spindle may be waiting for it.  A spindle someone holds that strongly
	 * counts as not empty.
	 */
	if (!ConditionalLockRelationOid(segment, AccessShareLock))
		return 0;
	seg = try_relation_open(segment, NoLock);
	if (seg == NULL)
	{
		UnlockRelationOid(segment, AccessShareLock);
		return -1;
	}
	empty = RelationGetNumberOfBlocks(seg) == 0 && !spindle_slots_reserved(seg);
	relation_close(seg, AccessShareLock);
	return empty ? 1 : 0;
}

/*
 * How many spindles at the end of the facade have no event yet: its
 * catalog rows from the highest number down, to the first spindle that
 * has one (or until `enough` are found).  Costs what the ready spindles
 * count, not what the table holds.
 */
static int
count_ready_spindles(CatalogRels *cr, Oid facade, Snapshot snap, int enough)
{
	TupleDesc	td = RelationGetDescr(cr->heap);
	ScanKeyData keys[3];
	SysScanDesc scan;
	HeapTuple	tup;
	int			empty = 0;

	scan = begin_rows_scan(cr, facade, PG_INT64_MIN, PG_INT64_MAX, snap, keys);
	while (empty < enough &&
		   (tup = systable_getnext_ordered(scan, BackwardScanDirection)) != NULL)
	{
		SpindleEntry sp;
		bool		dropped;
		int			e;

		decode_row(td, tup, &sp, &dropped);
		if (dropped)
			continue;
		e = segment_is_empty(sp.segment);
		if (e < 0)
			continue;
		if (e == 0)
			break;
		empty++;
	}
	systable_endscan_ordered(scan);
	return empty;
}

/*
 * Create spindles for the facade in the current transaction.  With
 * ready_only, create only as many as are needed for `count` empty spindles
 * to follow the last one that has events; otherwise create `count` new
 * ones.  Takes the table's creation lock (serialising creators, never
 * blocking DML, VACUUM or ANALYZE) and sends a relcache invalidation.
 * The caller holds at least AccessShareLock on the facade.  Returns how
 * many spindles were created.  What it reads costs the same whatever the
 * number of spindles, but for the ranges taken: one index scan of them
 * per call, for all the spindles it makes.
 */
int
spindle_create_spindles(Relation facade, int count, bool ready_only)
{
	Oid			relid = RelationGetRelid(facade);
	CatalogRels cr;
	Snapshot	snap;
	Allocator	alloc;
	int64		capacity;
	int64		floor;
	int			ncreate = count;
	int			i;
	bool		found;

	spindle_check_layout(facade);
	/* before the creation lock: this may wait for a row lock (lock order) */
	spindle_register_table(relid);
	spindle_lock_creation(relid);

	/* taken after the lock: every creator before us has ended */
	catalog_open(&cr);
	snap = read_snapshot();
	if (ready_only)
		ncreate = count - count_ready_spindles(&cr, relid, snap, count);
	if (ncreate <= 0)
	{
		UnregisterSnapshot(snap);
		catalog_close(&cr);
		return 0;
	}

	capacity = spindle_rel_capacity_option(relid, &found);
	if (!found)
		capacity = spindle_events_per_spindle;

	forget_committed_pending(facade);
	created_spindles = true;
	floor = catalog_max_spindle_no(&cr, relid, snap) + 1;
	/* a floor of the layers above (a queue name's high-water mark) */
	if (spindle_table_hooks.spindle_floor)
		floor = Max(floor, spindle_table_hooks.spindle_floor(facade));
	allocator_begin(&alloc, facade, &cr, snap);
	for (i = 0; i < ncreate; i++)
	{
		int64		spindle_no = spindle_next_spindle_no(facade, floor);
		int64		vbase,
					vcount;

		if (!allocator_take(&alloc, capacity, spindle_no, &vbase, &vcount))
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("spindle table \"%s\" has no room for another spindle of %lld events",
							RelationGetRelationName(facade), (long long) capacity),
					 errdetail("A spindle table holds at most %lld events in spindles that are not yet dropped; %lld are taken.",
							   (long long) SPINDLE_VSLOTS, (long long) alloc.all.taken),
					 errhint("Consume or purge events so that full spindles can be dropped, or use a smaller events_per_spindle.")));
		create_one_spindle(facade, spindle_no, capacity, vbase, vcount);
	}
	allocator_end(&alloc);
	UnregisterSnapshot(snap);
	catalog_close(&cr);

	CacheInvalidateRelcacheByRelid(relid);
	CommandCounterIncrement();
	return ncreate;
}

/*
 * Drop every spindle of the facade and forget them: TRUNCATE, and DROP
 * TABLE (or another DROP reaching the table) before core drops the table.
 * The caller holds AccessExclusiveLock on the facade, and its indexes and
 * slot map go too (truncated or dropped), so no TID of an old spindle
 * survives in them.
 *
 * Each spindle dropped here holds five locks until the transaction ends
 * (see detach.c).  If the table's spindles do not fit in what this
 * transaction may still drop, none is dropped: they are detached (their
 * rows move to relation 0, their dependency on the table goes) for the
 * worker to drop after the commit, and no lock is taken on them.  Either
 * way the table has no spindle and no catalog row left when this returns.
 */
void
spindle_drop_all_spindles(Relation facade)
{
	SpindleSpi	spi;
	Oid			types[1] = {OIDOID};
	Datum		values[1];
	List	   *segments = NIL;
	ListCell   *lc;
	uint64		i;
	bool		drop;

	values[0] = ObjectIdGetDatum(RelationGetRelid(facade));
	spindle_spi_begin(&spi);
	spi_run("SELECT segment FROM spindle.spindle_catalog"
			" WHERE relation OPERATOR(pg_catalog.=) $1 AND dropped_at IS NULL",
			1, types, values, NULL, true);
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		MemoryContext old = MemoryContextSwitchTo(spi.outer);

		segments = lappend_oid(segments,
							   DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
															  SPI_tuptable->tupdesc,
															  1, &isnull)));
		MemoryContextSwitchTo(old);
	}
	drop = spindle_drops_fit(list_length(segments));
	if (!drop)
		spi_run("UPDATE spindle.spindle_catalog"
				"   SET relation = 0::pg_catalog.oid,"
				"       spindle_no = OPERATOR(pg_catalog.-) segment::pg_catalog.int8"
				" WHERE relation OPERATOR(pg_catalog.=) $1 AND dropped_at IS NULL",
				1, types, values, NULL, false);
	/* and the dropped ones whose index entries were still to be removed */
	spi_run("DELETE FROM spindle.spindle_catalog WHERE relation OPERATOR(pg_catalog.=) $1",
			1, types, values, NULL, false);
	spi_run("UPDATE spindle.table_catalog SET retire_slots = 0"
			" WHERE relation OPERATOR(pg_catalog.=) $1",
			1, types, values, NULL, false);
	spindle_spi_end(&spi);

	if (drop)
	{
		foreach(lc, segments)
		{
			ObjectAddress addr;

			ObjectAddressSet(addr, RelationRelationId, lfirst_oid(lc));
			performDeletion(&addr, DROP_RESTRICT,
							PERFORM_DELETION_INTERNAL | PERFORM_DELETION_QUIETLY);
		}
	}
	else
		spindle_detach_segments(RelationGetRelid(facade), segments);
	CacheInvalidateRelcacheByRelid(RelationGetRelid(facade));
	CommandCounterIncrement();
}

/*
 * Record that a spindle was dropped (its segment relation is gone) and
 * count it in the table's statistics.  The row stays, with dropped_at set,
 * until maintenance has removed the index entries pointing into it.
 */
void
spindle_catalog_mark_dropped(Oid facade, const SpindleEntry *sp,
							 int64 bytes_freed)
{
	Oid			types[4] = {OIDOID, INT8OID, INT8OID, INT8OID};
	Datum		values[4];

	values[0] = ObjectIdGetDatum(facade);
	values[1] = Int64GetDatum(sp->spindle_no);
	values[2] = Int64GetDatum(bytes_freed);
	values[3] = Int64GetDatum(sp->vcount);
	catalog_write("UPDATE spindle.spindle_catalog SET dropped_at = pg_catalog.now(),"
				  "       filled_at = coalesce(filled_at, pg_catalog.now())"
				  " WHERE relation OPERATOR(pg_catalog.=) $1"
				  "   AND spindle_no OPERATOR(pg_catalog.=) $2",
				  2, types, values);
	catalog_write("UPDATE spindle.table_catalog"
				  "   SET spindles_dropped = spindles_dropped OPERATOR(pg_catalog.+) 1,"
				  "       bytes_freed = bytes_freed OPERATOR(pg_catalog.+) $3,"
				  "       retire_slots = retire_slots OPERATOR(pg_catalog.+) $4"
				  " WHERE relation OPERATOR(pg_catalog.=) $1",
				  4, types, values);
}

/*
 * The virtual slots of the facade's dropped spindles whose index entries
 * are still to be removed (spindle.table_catalog.retire_slots, kept by
 * spindle_catalog_mark_dropped and spindle_catalog_forget_dropped): what
 * maintenance weighs against the cost of a pass over every index before
 * retiring them (spindle_cleanup_dropped).  One index probe; 0 if the
 * table has no row.  A figure only: no decision that matters for
 * correctness rests on it.
 */
int64
spindle_catalog_retire_slots(Oid facade)
{
	int64		result = 0;

	(void) read_table_row(facade, &result);
	return result;
}

/*
 * Dropped spindles of the facade whose drop committed (rows not written by
 * this transaction): their index entries may now be removed.  Returns how
 * many; *out is a palloc'd array of their numbers and ranges.
 */
int
spindle_catalog_dropped(Oid facade, SpindleRange **out)
{
	SpindleSpi	spi;
	Oid			types[1] = {OIDOID};
	Datum		values[1];
	SpindleRange *result;
	uint64		i;
	int			n;

	values[0] = ObjectIdGetDatum(facade);
	spindle_spi_begin(&spi);
	spi_run("SELECT spindle_no, vbase, vcount FROM spindle.spindle_catalog"
			" WHERE relation OPERATOR(pg_catalog.=) $1"
			"   AND dropped_at IS NOT NULL"
			"   AND NOT spindle._xid_is_current(xmin)",
			1, types, values, NULL, true);
	result = MemoryContextAlloc(spi.outer,
								sizeof(SpindleRange) * Max(SPI_processed, 1));
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	td = SPI_tuptable->tupdesc;

		result[i].spindle_no = DatumGetInt64(SPI_getbinval(tup, td, 1, &isnull));
		result[i].vbase = DatumGetInt64(SPI_getbinval(tup, td, 2, &isnull));
		result[i].vcount = DatumGetInt64(SPI_getbinval(tup, td, 3, &isnull));
	}
	n = (int) SPI_processed;
	spindle_spi_end(&spi);
	*out = result;
	return n;
}

/*
 * Does the catalog (latest snapshot) have a row for any of the n spindles
 * numbered from spindle_no?  (The spindles of one pending entry share the
 * fate of their subtransaction: one row is proof that it committed.)
 */
bool
spindle_catalog_has_spindle(Oid facade, int64 spindle_no, int n)
{
	CatalogRels cr;
	Snapshot	snap;
	bool		found;

	catalog_open(&cr);
	snap = read_snapshot();
	found = catalog_has_rows(&cr, facade, spindle_no,
							 spindle_no + Max(n, 1) - 1, snap);
	UnregisterSnapshot(snap);
	catalog_close(&cr);
	return found;
}

/*
 * Forget dropped spindles once no index entry points into them, and take
 * their slots off the table's retire_slots.
 */
void
spindle_catalog_forget_dropped(Oid facade, const SpindleRange *ranges, int n)
{
	SpindleSpi	spi;
	Oid			types[2] = {OIDOID, INT8OID};
	Datum		values[2];
	int64		slots = 0;
	int			i;

	if (n == 0)
		return;
	values[0] = ObjectIdGetDatum(facade);
	spindle_spi_begin(&spi);
	for (i = 0; i < n; i++)
	{
		values[1] = Int64GetDatum(ranges[i].spindle_no);
		spi_run("DELETE FROM spindle.spindle_catalog"
				" WHERE relation OPERATOR(pg_catalog.=) $1"
				"   AND spindle_no OPERATOR(pg_catalog.=) $2"
				"   AND dropped_at IS NOT NULL",
				2, types, values, NULL, false);
		slots += ranges[i].vcount;
	}
	values[1] = Int64GetDatum(slots);
	spi_run("UPDATE spindle.table_catalog"
			"   SET retire_slots = CASE WHEN retire_slots OPERATOR(pg_catalog.>) $2"
			"                      THEN retire_slots OPERATOR(pg_catalog.-) $2 ELSE 0 END"
			" WHERE relation OPERATOR(pg_catalog.=) $1",
			2, types, values, NULL, false);
	spindle_spi_end(&spi);
}

/*
 * Record when a spindle became full, if not yet recorded.  Like every
 * change to a live spindle's row, it invalidates the spindle's relation,
 * so that cached directories re-read the row (see "Keeping a directory up
 * to date").
 */
void
spindle_catalog_set_filled(Oid facade, int64 spindle_no, TimestampTz when)
{
	SpindleSpi	spi;
	Oid			types[3] = {OIDOID, INT8OID, TIMESTAMPTZOID};
	Datum		values[3];
	Oid			segment = InvalidOid;

	values[0] = ObjectIdGetDatum(facade);
	values[1] = Int64GetDatum(spindle_no);
	values[2] = TimestampTzGetDatum(when);
	spindle_spi_begin(&spi);
	if (spi_run("UPDATE spindle.spindle_catalog SET filled_at = $3"
				" WHERE relation OPERATOR(pg_catalog.=) $1"
				"   AND spindle_no OPERATOR(pg_catalog.=) $2 AND filled_at IS NULL"
				" RETURNING segment",
				3, types, values, NULL, false) > 0)
	{
		bool		isnull;

		segment = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0],
												 SPI_tuptable->tupdesc,
												 1, &isnull));
	}
	spindle_spi_end(&spi);
	if (OidIsValid(segment) &&
		SearchSysCacheExists1(RELOID, ObjectIdGetDatum(segment)))
		CacheInvalidateRelcacheByRelid(segment);
}

/*
 * ALTER TABLE SET (events_per_spindle): give the new capacity to every
 * spindle of the facade that has no events yet, within the range of TIDs
 * it already owns (a spindle's range never changes while it exists:
 * moving it inside a transaction that may roll back could leave two
 * spindles claiming the same TIDs).  So an empty spindle takes a smaller
 * capacity at once, and a larger one only up to its range; spindles made
 * afterwards get the new capacity in full.  The caller holds
 * AccessExclusiveLock on the facade, so no insert is under way.
 */
void
spindle_catalog_set_capacity_of_empty(Relation facade, int64 capacity)
{
	SpindleDirectory *dir;
	Oid			types[3] = {OIDOID, INT8OID, INT8OID};
	Datum		values[3];
	int			i;

	dir = spindle_directory_acquire(facade);
	values[0] = ObjectIdGetDatum(RelationGetRelid(facade));
	values[2] = Int64GetDatum(capacity);
	for (i = 0; i < dir->nspindles; i++)
	{
		if (segment_is_empty(dir->spindles[i].segment) != 1)
			continue;
		values[1] = Int64GetDatum(dir->spindles[i].spindle_no);
		catalog_write("UPDATE spindle.spindle_catalog SET capacity = $3"
					  " WHERE relation OPERATOR(pg_catalog.=) $1"
					  "   AND spindle_no OPERATOR(pg_catalog.=) $2",
					  3, types, values);
		spindle_slots_forget(dir->spindles[i].segment);
		/* cached directories re-read its row */
		CacheInvalidateRelcacheByRelid(dir->spindles[i].segment);
	}
	spindle_directory_release(dir);
	CacheInvalidateRelcacheByRelid(RelationGetRelid(facade));
}
