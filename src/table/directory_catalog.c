/*-------------------------------------------------------------------------
 *
 * directory_catalog.c
 *	  Reading and writing spindle's catalog tables: spindle.spindle_catalog
 *	  (one row per spindle) and spindle.table_catalog (per-table counters).
 *
 * The persistent directory is the table spindle.spindle_catalog (one row per
 * spindle, dropped_at set once dropped until its index entries are gone)
 * plus spindle.table_catalog (per-table counters).  Both are written
 * through SPI as the bootstrap superuser with a fixed search_path.  What
 * runs on every creation and every directory read -- the directory itself,
 * the ranges taken, the spindle numbers, the pending checks -- reads them
 * by index (genam) instead, with no parse, plan or executor start, and
 * only the rows it needs: this file opens the catalog and its indexes and
 * decodes its rows for the backend cache (directory.c) and for creation
 * (spindle_create.c).  Every read uses the latest snapshot: a REPEATABLE
 * READ transaction must still find spindles created after its snapshot
 * was taken.
 * Rows with relation 0 are spindles detached from a dropped or truncated
 * table, waiting for maintenance to drop them (detach.c); no table's
 * directory lists them.
 *
 * Locks: the catalog tables and their indexes are read under
 * AccessShareLock, kept to the end of the transaction; the writes take
 * what their SQL statements take (row locks on the rows they change).
 * spindle_drop_all_spindles expects AccessExclusiveLock on the facade,
 * spindle_catalog_set_capacity_of_empty ShareRowExclusiveLock (at least).
 *
 * Invariants kept here: a live spindle's row changes only in filled_at
 * and capacity, and in first_no while no event of the table was numbered
 * (spindle_catalog_renumber_empty), and every such change invalidates the spindle's relation
 * (so that cached directories re-read the row: directory.c); a dropped
 * spindle's row stays, with dropped_at set, until maintenance has removed
 * the index entries pointing into its range (so the range stays taken);
 * table_catalog.retire_slots counts the slots of those rows.  This file
 * also tracks whether the transaction changed the catalog otherwise than
 * by creating spindles (spindle_xact_wrote_catalog): directories read
 * after a rollback to a savepoint of such a transaction are read in full.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "catalog/pg_index.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "table/spindle_table.h"


/*
 * this transaction changed the catalog otherwise than by creating spindles
 * (see refresh_directory in directory.c); set by spi_run unless a creation
 * is writing
 */
static bool catalog_written = false;
static bool writing_creation = false;

/* At transaction end: the flags above start afresh. */
static void
catalog_xact_callback(XactEvent event, void *arg)
{
	if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT &&
		event != XACT_EVENT_PARALLEL_COMMIT &&
		event != XACT_EVENT_PARALLEL_ABORT && event != XACT_EVENT_PREPARE)
		return;
	catalog_written = false;
	writing_creation = false;
}

/* Called once per backend, by spindle_directory_init. */
void
spindle_catalog_init(void)
{
	RegisterXactCallback(catalog_xact_callback, NULL);
}

/*
 * Has this transaction changed the catalog otherwise than by creating
 * spindles (dropping, forgetting, marking, registering tables...)?
 */
bool
spindle_xact_wrote_catalog(void)
{
	return catalog_written;
}

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
#define Anum_sc_first_no	10
#define Anum_sc_kind		11
#define Anum_sc_generation	12
#define Natts_sc			12

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
	{"dropped_at", TIMESTAMPTZOID},
	{"first_no", INT8OID},
	{"kind", TEXTOID},
	{"generation", INT4OID}
};

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
void
spindle_catalog_open(SpindleCatalogRels *cr)
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

/* Close what spindle_catalog_open opened; its locks stay to the end. */
void
spindle_catalog_close(SpindleCatalogRels *cr)
{
	if (cr->byvbase != NULL)
		index_close(cr->byvbase, NoLock);
	index_close(cr->bynumber, NoLock);
	table_close(cr->heap, NoLock);
}

/* The snapshot the catalog is read with (see spi_run), registered. */
Snapshot
spindle_catalog_snapshot(void)
{
	return RegisterSnapshot(IsInParallelMode() ? GetActiveSnapshot() :
							GetLatestSnapshot());
}

/* A catalog row as a directory entry; *dropped if dropped_at is set. */
void
spindle_catalog_decode_row(TupleDesc td, HeapTuple tup, SpindleEntry *sp,
						   bool *dropped)
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
	/* an annex has no event numbers (NULL); its generation says it is one */
	if (!n[Anum_sc_first_no - 1])
		sp->first_no = DatumGetInt64(v[Anum_sc_first_no - 1]);
	sp->generation = DatumGetInt32(v[Anum_sc_generation - 1]);
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
SysScanDesc
spindle_catalog_scan_rows(SpindleCatalogRels *cr, Oid facade, int64 lo,
						  int64 hi, Snapshot snap, ScanKeyData *keys)
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
catalog_has_rows(SpindleCatalogRels *cr, Oid facade, int64 lo, int64 hi,
				 Snapshot snap)
{
	ScanKeyData keys[3];
	SysScanDesc scan;
	bool		found;

	scan = spindle_catalog_scan_rows(cr, facade, lo, hi, snap, keys);
	found = systable_getnext_ordered(scan, ForwardScanDirection) != NULL;
	systable_endscan_ordered(scan);
	return found;
}

/*
 * The highest spindle number in the facade's catalog rows, or 0; and in
 * *event_end one past the event numbers of the highest event spindle (not
 * an annex: it has none), or 0.
 */
int64
spindle_catalog_max_spindle_no(SpindleCatalogRels *cr, Oid facade,
							   Snapshot snap, int64 *event_end)
{
	ScanKeyData keys[3];
	SysScanDesc scan;
	HeapTuple	tup;
	int64		result = 0;

	*event_end = 0;
	scan = spindle_catalog_scan_rows(cr, facade, PG_INT64_MIN, PG_INT64_MAX,
									 snap, keys);
	while ((tup = systable_getnext_ordered(scan, BackwardScanDirection)) != NULL)
	{
		SpindleEntry sp;
		bool		dropped;

		spindle_catalog_decode_row(RelationGetDescr(cr->heap), tup, &sp,
								   &dropped);
		if (result == 0)
			result = sp.spindle_no;
		if (!spindle_is_annex(&sp))
		{
			*event_end = sp.first_no + sp.vcount;
			break;
		}
	}
	systable_endscan_ordered(scan);
	return result;
}

/* ----------------------------------------------------------------
 * Catalog changes, and the reads of spindle.table_catalog
 * ----------------------------------------------------------------
 */

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
	snap = spindle_catalog_snapshot();
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

/*
 * Record a spindle just created (spindle_create.c): its catalog row, with
 * its relation and its range of virtual slots [vbase, vbase + vcount).  A
 * row a directory read by what changed may take in, so the write does not
 * mark the transaction as one whose directories are read in full.  An
 * annex (sp->generation > 0) is recorded as of kind 'annex', without
 * first_no.  The caller holds the creation lock.
 */
void
spindle_catalog_add_spindle(Oid facade, const SpindleEntry *sp)
{
	Oid			types[8] = {OIDOID, INT8OID, OIDOID, INT8OID, INT8OID, INT8OID,
	INT8OID, INT4OID};
	Datum		values[8];

	values[0] = ObjectIdGetDatum(facade);
	values[1] = Int64GetDatum(sp->spindle_no);
	values[2] = ObjectIdGetDatum(sp->segment);
	values[3] = Int64GetDatum(sp->capacity);
	values[4] = Int64GetDatum(sp->vbase);
	values[5] = Int64GetDatum(sp->vcount);
	values[6] = Int64GetDatum(sp->first_no);
	values[7] = Int32GetDatum(sp->generation);
	writing_creation = true;
	if (spindle_is_annex(sp))
		catalog_write("INSERT INTO spindle.spindle_catalog"
					  " (relation, spindle_no, segment, capacity, vbase, vcount,"
					  " kind, generation)"
					  " VALUES ($1, $2, $3, $4, $5, $6, 'annex', $8)",
					  8, types, values);
	else
		catalog_write("INSERT INTO spindle.spindle_catalog"
					  " (relation, spindle_no, segment, capacity, vbase, vcount,"
					  " first_no) VALUES ($1, $2, $3, $4, $5, $6, $7)",
					  7, types, values);
	writing_creation = false;
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
 * Dropped spindles of the facade: whose drop committed (rows not written
 * by this transaction), or, here, whose drop this transaction made (it
 * may still roll back).  Returns how many; *out is a palloc'd array of
 * their numbers and ranges.
 */
static int
catalog_dropped(Oid facade, bool here, SpindleRange **out)
{
	SpindleSpi	spi;
	Oid			types[1] = {OIDOID};
	Datum		values[1];
	SpindleRange *result;
	uint64		i;
	int			n;

	values[0] = ObjectIdGetDatum(facade);
	spindle_spi_begin(&spi);
	spi_run(here ?
			"SELECT spindle_no, vbase, vcount FROM spindle.spindle_catalog"
			" WHERE relation OPERATOR(pg_catalog.=) $1"
			"   AND dropped_at IS NOT NULL"
			"   AND spindle._xid_is_current(xmin)" :
			"SELECT spindle_no, vbase, vcount FROM spindle.spindle_catalog"
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
 * Dropped spindles of the facade whose drop committed (rows not written by
 * this transaction): their index entries may now be removed.
 */
int
spindle_catalog_dropped(Oid facade, SpindleRange **out)
{
	return catalog_dropped(facade, false, out);
}

/*
 * Spindles of the facade this transaction dropped (not committed yet: a
 * forget pass must take them for still there).
 */
int
spindle_catalog_dropped_here(Oid facade, SpindleRange **out)
{
	return catalog_dropped(facade, true, out);
}

/*
 * Does the catalog (latest snapshot) have a row for any of the n spindles
 * numbered from spindle_no?  (The spindles of one pending entry share the
 * fate of their subtransaction: one row is proof that it committed.)
 */
bool
spindle_catalog_has_spindle(Oid facade, int64 spindle_no, int n)
{
	SpindleCatalogRels cr;
	Snapshot	snap;
	bool		found;

	spindle_catalog_open(&cr);
	snap = spindle_catalog_snapshot();
	found = catalog_has_rows(&cr, facade, spindle_no,
							 spindle_no + Max(n, 1) - 1, snap);
	UnregisterSnapshot(snap);
	spindle_catalog_close(&cr);
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
 * ShareRowExclusiveLock on the facade, so no insert is under way or can
 * start before the change commits or rolls back; storage forgets the
 * spindles' slot counters now and at the end of the (sub)transaction.
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
		if (spindle_segment_is_empty(dir->spindles[i].segment) != 1)
			continue;
		values[1] = Int64GetDatum(dir->spindles[i].spindle_no);
		catalog_write("UPDATE spindle.spindle_catalog SET capacity = $3"
					  " WHERE relation OPERATOR(pg_catalog.=) $1"
					  "   AND spindle_no OPERATOR(pg_catalog.=) $2",
					  3, types, values);
		/* its counter must not outlive the change if it rolls back */
		spindle_slots_capacity_changed(dir->spindles[i].segment);
		/* cached directories re-read its row */
		CacheInvalidateRelcacheByRelid(dir->spindles[i].segment);
	}
	spindle_directory_release(dir);
	CacheInvalidateRelcacheByRelid(RelationGetRelid(facade));
}

/*
 * Number the events of spindles from..nspindles-1 of dir (the facade's,
 * acquired by the caller, released here) from next on, in order: their
 * catalog rows' first_no, and an invalidation of each spindle and of the
 * facade, so that cached directories read them again.
 */
static void
write_first_nos(Relation facade, SpindleDirectory *dir, int from, int64 next)
{
	Oid			types[3] = {OIDOID, INT8OID, INT8OID};
	Datum		values[3];

	values[0] = ObjectIdGetDatum(RelationGetRelid(facade));
	for (int i = from; i < dir->nspindles; i++)
	{
		values[1] = Int64GetDatum(dir->spindles[i].spindle_no);
		values[2] = Int64GetDatum(next);
		catalog_write("UPDATE spindle.spindle_catalog SET first_no = $3"
					  " WHERE relation OPERATOR(pg_catalog.=) $1"
					  "   AND spindle_no OPERATOR(pg_catalog.=) $2",
					  3, types, values);
		next += dir->spindles[i].vcount;
		CacheInvalidateRelcacheByRelid(dir->spindles[i].segment);
	}
	spindle_directory_release(dir);
	CacheInvalidateRelcacheByRelid(RelationGetRelid(facade));
}

/*
 * Move the spindles of the facade numbered above first_no, if none of
 * them was given an event yet (ready spindles), down to number their
 * events from first_no on, in order, for an insert that keeps first_no
 * (kept_ids.c).  They were numbered past a jump in the
 * numbers (a queue name's floor, loaded by the restore that now loads its
 * events with their ids): the numbers in the jump were never given to an
 * event of the table.  first_no must lie at or past the range of every
 * other spindle, and the new ranges stay below the table's counter, which
 * does not move.  Returns whether it did.  The caller holds
 * ShareRowExclusiveLock on the facade: no insert is under way or can
 * start until this transaction ends.
 */
bool
spindle_catalog_renumber_tail(Relation facade, int64 first_no)
{
	SpindleDirectory *dir = spindle_directory_acquire_current(facade);
	int64		next = first_no;
	int			t = dir->nspindles;
	int			i;

	while (t > 0 && dir->spindles[t - 1].first_no > first_no)
		t--;
	for (i = t; i < dir->nspindles; i++)
		if (spindle_segment_is_empty(dir->spindles[i].segment) != 1)
			break;
	if (t == dir->nspindles || i < dir->nspindles ||
		(t > 0 && dir->spindles[t - 1].first_no +
		 dir->spindles[t - 1].vcount > first_no))
	{
		spindle_directory_release(dir);
		return false;
	}
	write_first_nos(facade, dir, t, next);
	CommandCounterIncrement();
	return true;
}

/*
 * Number the events of the facade from at least floor, if none of its
 * spindles was given an event yet: a restore made the table (and its first
 * spindles, numbered from 1) before the floor of its queue name, loaded
 * later, said where its numbers must start.  Returns whether it did.  The
 * counter is raised first (it never goes back, so a rollback of the
 * catalog rows leaves only a gap); then each spindle's first_no, in order.
 * The caller holds ShareRowExclusiveLock on the facade: no insert is
 * under way or can start until this transaction ends.
 */
bool
spindle_catalog_renumber_empty(Relation facade, int64 floor)
{
	SpindleDirectory *dir = spindle_directory_acquire_current(facade);
	int64		total = 0;
	int64		next;
	int			i;

	for (i = 0; i < dir->nspindles; i++)
	{
		if (spindle_segment_is_empty(dir->spindles[i].segment) != 1)
			break;
		total += dir->spindles[i].vcount;
	}
	if (dir->nspindles == 0 || i < dir->nspindles ||
		dir->spindles[0].first_no >= floor)
	{
		spindle_directory_release(dir);
		return false;
	}
	next = spindle_take_event_nos(facade, floor, total);
	write_first_nos(facade, dir, 0, next);
	return true;
}

