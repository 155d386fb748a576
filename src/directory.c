/*-------------------------------------------------------------------------
 *
 * directory.c
 *	  The spindle directory: which spindles a table has, cached per backend,
 *	  and the catalog work that creates and retires them.
 *
 * The persistent directory is the table spindle.spindle_catalog (one row per
 * spindle, dropped_at set once dropped until its index entries are gone)
 * plus spindle.table_catalog (per-table counters).  Both are read and
 * written through SPI as the bootstrap superuser with a fixed search_path,
 * always with the latest snapshot: a REPEATABLE READ transaction must still
 * find spindles created after its snapshot was taken.
 *
 * The backend-local cache (SpindleDirectory) is rebuilt after a relcache
 * invalidation of the facade; creating or dropping a spindle sends one.  A
 * directory in use is pinned, so an invalidation arriving while a caller
 * holds it (any lock acquisition may deliver one) never frees it under the
 * caller; unpinned stale copies are freed at once or at transaction end.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/reloptions.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/heap.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_namespace.h"
#include "catalog/toasting.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "spindle.h"

/* One cached directory per facade. */
typedef struct DirCacheEntry
{
	Oid			facade;			/* hash key */
	SpindleDirectory *current;	/* NULL or the valid directory */
	int64		open_spindle_no;	/* where this backend last inserted */
} DirCacheEntry;

static HTAB *dir_cache = NULL;
static List *dir_graveyard = NIL;	/* stale, still pinned directories */

/* ----------------------------------------------------------------
 * SPI as the bootstrap superuser
 *
 * Every name and operator in these statements is schema-qualified, so the
 * caller's search_path cannot redirect them (they run as superuser).
 * ----------------------------------------------------------------
 */
typedef struct SpiContext
{
	Oid			saved_userid;
	int			saved_sec_context;
	MemoryContext outer;		/* results that outlive SPI_finish go here */
} SpiContext;

static void
spi_begin(SpiContext *ctx)
{
	ctx->outer = CurrentMemoryContext;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	GetUserIdAndSecContext(&ctx->saved_userid, &ctx->saved_sec_context);
	SetUserIdAndSecContext(BOOTSTRAP_SUPERUSERID,
						   ctx->saved_sec_context | SECURITY_LOCAL_USERID_CHANGE);
}

static void
spi_end(SpiContext *ctx)
{
	SetUserIdAndSecContext(ctx->saved_userid, ctx->saved_sec_context);
	SPI_finish();
}

/*
 * Run one statement; returns SPI_processed.  It reads with the latest
 * snapshot, so that a REPEATABLE READ transaction still finds spindles
 * created after its snapshot -- except in a parallel operation, which
 * cannot take snapshots and only reads: the query's snapshot sees every
 * spindle holding an event it can see (a spindle is committed before any
 * event is inserted into it by another transaction).
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
		CommandCounterIncrement();
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
	SpiContext	spi;

	spi_begin(&spi);
	spi_run(sql, nargs, types, values, NULL, false);
	spi_end(&spi);
}

/* ----------------------------------------------------------------
 * The backend-local cache
 * ----------------------------------------------------------------
 */

static void
free_directory(SpindleDirectory *dir)
{
	MemoryContextDelete(dir->cxt);
}

/* Relcache callback: mark the cached directory of relid (or all) stale. */
static void
dir_invalidate(Datum arg, Oid relid)
{
	HASH_SEQ_STATUS status;
	DirCacheEntry *e;

	if (dir_cache == NULL)
		return;
	hash_seq_init(&status, dir_cache);
	while ((e = hash_seq_search(&status)) != NULL)
	{
		if (OidIsValid(relid) && e->facade != relid)
			continue;
		if (e->current != NULL)
		{
			if (e->current->pins > 0)
				dir_graveyard = lappend(dir_graveyard, e->current);
			else
				free_directory(e->current);
			e->current = NULL;
		}
	}
}

/* At transaction end every pin is gone: free stale directories. */
static void
dir_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;
	HASH_SEQ_STATUS status;
	DirCacheEntry *e;

	if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT &&
		event != XACT_EVENT_PARALLEL_COMMIT &&
		event != XACT_EVENT_PARALLEL_ABORT && event != XACT_EVENT_PREPARE)
		return;
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
		if (e->current != NULL)
		{
			e->current->pins = 0;
			/* a directory read inside an aborted transaction may be wrong */
			if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
			{
				free_directory(e->current);
				e->current = NULL;
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
}

/* Read the directory of a facade from the catalog. */
static SpindleDirectory *
load_directory(Relation facade)
{
	MemoryContext cxt;
	MemoryContext oldcxt;
	SpindleDirectory *dir;
	SpiContext spi;
	Oid			types[1] = {OIDOID};
	Datum		values[1];
	uint64		i;
	bool		found;

	cxt = AllocSetContextCreate(TopMemoryContext, "spindle directory",
								ALLOCSET_SMALL_SIZES);
	dir = MemoryContextAllocZero(cxt, sizeof(SpindleDirectory));
	dir->cxt = cxt;
	dir->facade = RelationGetRelid(facade);
	dir->events_per_spindle = spindle_rel_capacity_option(dir->facade, &found);
	if (!found)
		dir->events_per_spindle = spindle_events_per_spindle;

	values[0] = ObjectIdGetDatum(dir->facade);
	spi_begin(&spi);
	spi_run("SELECT spindle_no, segment, capacity, created_at, filled_at"
			"  FROM spindle.spindle_catalog"
			" WHERE relation OPERATOR(pg_catalog.=) $1 AND dropped_at IS NULL"
			" ORDER BY spindle_no",
			1, types, values, NULL, true);
	oldcxt = MemoryContextSwitchTo(cxt);
	dir->nspindles = (int) SPI_processed;
	dir->spindles = palloc0(sizeof(SpindleEntry) * Max(dir->nspindles, 1));
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	td = SPI_tuptable->tupdesc;
		SpindleEntry *sp = &dir->spindles[i];
		bool		isnull;

		sp->spindle_no = DatumGetInt64(SPI_getbinval(tup, td, 1, &isnull));
		sp->segment = DatumGetObjectId(SPI_getbinval(tup, td, 2, &isnull));
		sp->capacity = DatumGetInt64(SPI_getbinval(tup, td, 3, &isnull));
		sp->created_at = DatumGetTimestampTz(SPI_getbinval(tup, td, 4, &isnull));
		sp->filled_at = DatumGetTimestampTz(SPI_getbinval(tup, td, 5, &isnull));
		if (isnull)
			sp->filled_at = 0;
		sp->vchunk = NULL;
	}
	MemoryContextSwitchTo(oldcxt);
	spi_end(&spi);
	return dir;
}

/*
 * Return the directory of a facade, pinned: the caller must call
 * spindle_directory_release() when done (an error releases it too, at
 * transaction end).  Never returns a directory older than the last
 * invalidation this backend processed.
 */
SpindleDirectory *
spindle_directory_acquire(Relation facade)
{
	DirCacheEntry *e;
	bool		found;
	Oid			relid = RelationGetRelid(facade);

	spindle_check_preloaded();
	e = hash_search(dir_cache, &relid, HASH_ENTER, &found);
	if (!found)
	{
		e->current = NULL;
		e->open_spindle_no = 0;
	}
	if (e->current == NULL)
	{
		SpindleDirectory *dir = load_directory(facade);
		int			i;

		/* loading may have processed invalidations; re-find the entry */
		e = hash_search(dir_cache, &relid, HASH_ENTER, &found);
		if (found && e->current != NULL)
		{
			if (e->current->pins > 0)
				dir_graveyard = lappend(dir_graveyard, e->current);
			else
				free_directory(e->current);
		}
		/*
		 * Spindles before the one this backend last inserted into are full
		 * for good: start the next insert there, not at the oldest spindle.
		 */
		for (i = 0; i < dir->nspindles; i++)
			if (dir->spindles[i].spindle_no >= e->open_spindle_no)
				break;
		dir->open_hint = Min(i, Max(dir->nspindles - 1, 0));
		e->current = dir;
	}
	e->current->pins++;
	return e->current;
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

/* The entry whose tag (see chunkmap.c) is this one, or NULL. */
SpindleEntry *
spindle_find_by_tag(SpindleDirectory *dir, uint32 tag)
{
	int			i;

	for (i = dir->nspindles - 1; i >= 0; i--)
		if (spindle_tag(dir->spindles[i].spindle_no) == tag)
			return &dir->spindles[i];
	return NULL;
}

/* The P->V cache of an entry, allocated on first use. */
int16 *
spindle_vchunk_cache(SpindleDirectory *dir, SpindleEntry *sp)
{
	if (sp->vchunk == NULL)
	{
		sp->vchunk = MemoryContextAlloc(dir->cxt,
										sizeof(int16) * SPINDLE_NCHUNKS);
		memset(sp->vchunk, 0xFF, sizeof(int16) * SPINDLE_NCHUNKS);
	}
	return sp->vchunk;
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

/* Make sure spindle.table_catalog has a row for the facade. */
void
spindle_register_table(Oid facade)
{
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(facade)};

	catalog_write("INSERT INTO spindle.table_catalog (relation) VALUES ($1)"
				  " ON CONFLICT (relation) DO NOTHING",
				  1, types, values);
}

/* OIDs of every registered spindle table of this database. */
List *
spindle_catalog_tables(void)
{
	SpiContext	spi;
	List	   *result = NIL;
	uint64		i;

	spi_begin(&spi);
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
	spi_end(&spi);
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
 * Create the relation of one spindle (and its TOAST table) and record it.
 * The caller holds ShareUpdateExclusiveLock on the facade.
 */
static void
create_one_spindle(Relation facade, int64 spindle_no, int64 capacity)
{
	char		relname[NAMEDATALEN];
	TupleDesc	tupdesc;
	Datum		reloptions;
	Oid			segment;
	ObjectAddress segaddr,
				facaddr;
	static char *validnsps[] = HEAP_RELOPT_NAMESPACES;
	Oid			types[4] = {OIDOID, INT8OID, OIDOID, INT8OID};
	Datum		values[4];

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
									   facade->rd_rel->relowner,
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
	catalog_write("INSERT INTO spindle.spindle_catalog"
				  " (relation, spindle_no, segment, capacity)"
				  " VALUES ($1, $2, $3, $4)",
				  4, types, values);
}

/*
 * Has this spindle never been given an event?  1 if so, 0 if it has events
 * (or slots handed out for them), -1 if it no longer exists.
 */
static int
segment_is_empty(Oid segment)
{
	Relation	seg = try_relation_open(segment, AccessShareLock);
	bool		empty;

	if (seg == NULL)
		return -1;
	empty = RelationGetNumberOfBlocks(seg) == 0 && !spindle_slots_reserved(seg);
	relation_close(seg, AccessShareLock);
	return empty ? 1 : 0;
}

/*
 * Create spindles for the facade in the current transaction.  With
 * ready_only, create only as many as are needed for `count` empty spindles
 * to follow the last one that has events; otherwise create `count` new
 * ones.  Takes ShareUpdateExclusiveLock on the facade (serialising
 * creators, never blocking DML) and sends a relcache invalidation.
 * Returns how many spindles were created.
 */
int
spindle_create_spindles(Relation facade, int count, bool ready_only)
{
	SpiContext	spi;
	Oid			types[2] = {OIDOID, INT8OID};
	Datum		values[2];
	int64		next_no;
	int64		capacity;
	int			ncreate = count;
	int			i;
	bool		isnull;
	bool		found;

	LockRelationOid(RelationGetRelid(facade), ShareUpdateExclusiveLock);
	spindle_register_table(RelationGetRelid(facade));

	if (ready_only)
	{
		SpindleDirectory *dir;
		int			empty = 0;

		AcceptInvalidationMessages();
		dir = spindle_directory_acquire(facade);
		for (i = dir->nspindles - 1; i >= 0; i--)
		{
			int			e = segment_is_empty(dir->spindles[i].segment);

			if (e < 0)
				continue;
			if (e == 0)
				break;
			empty++;
		}
		spindle_directory_release(dir);
		ncreate = count - empty;
	}
	if (ncreate <= 0)
		return 0;

	capacity = spindle_rel_capacity_option(RelationGetRelid(facade), &found);
	if (!found)
		capacity = spindle_events_per_spindle;

	values[0] = ObjectIdGetDatum(RelationGetRelid(facade));
	values[1] = Int64GetDatum(ncreate);
	spi_begin(&spi);
	spi_run("UPDATE spindle.table_catalog"
			"   SET next_spindle_no = next_spindle_no OPERATOR(pg_catalog.+) $2"
			" WHERE relation OPERATOR(pg_catalog.=) $1"
			" RETURNING next_spindle_no OPERATOR(pg_catalog.-) $2",
			2, types, values, NULL, false);
	if (SPI_processed != 1)
		elog(ERROR, "spindle table %u is not registered",
			 RelationGetRelid(facade));
	next_no = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
										  SPI_tuptable->tupdesc, 1, &isnull));
	spi_end(&spi);

	for (i = 0; i < ncreate; i++)
		create_one_spindle(facade, next_no + i, capacity);

	CacheInvalidateRelcacheByRelid(RelationGetRelid(facade));
	CommandCounterIncrement();
	return ncreate;
}

/*
 * Drop every spindle of the facade and forget them (TRUNCATE).  The caller
 * holds AccessExclusiveLock on the facade.
 */
void
spindle_drop_all_spindles(Relation facade)
{
	SpiContext	spi;
	Oid			types[1] = {OIDOID};
	Datum		values[1];
	List	   *segments = NIL;
	ListCell   *lc;
	uint64		i;

	values[0] = ObjectIdGetDatum(RelationGetRelid(facade));
	spi_begin(&spi);
	spi_run("DELETE FROM spindle.spindle_catalog WHERE relation OPERATOR(pg_catalog.=) $1"
			" RETURNING segment, dropped_at IS NULL",
			1, types, values, NULL, false);
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		bool		live = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[i],
													  SPI_tuptable->tupdesc,
													  2, &isnull));

		if (live)
		{
			MemoryContext old = MemoryContextSwitchTo(spi.outer);

			segments = lappend_oid(segments,
								   DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
																  SPI_tuptable->tupdesc,
																  1, &isnull)));
			MemoryContextSwitchTo(old);
		}
	}
	spi_end(&spi);

	foreach(lc, segments)
	{
		ObjectAddress addr;

		ObjectAddressSet(addr, RelationRelationId, lfirst_oid(lc));
		performDeletion(&addr, DROP_RESTRICT,
						PERFORM_DELETION_INTERNAL | PERFORM_DELETION_QUIETLY);
	}
	CacheInvalidateRelcacheByRelid(RelationGetRelid(facade));
	CommandCounterIncrement();
}

/*
 * Record that a spindle was dropped (its segment relation is gone) and
 * count it in the table's statistics.  The row stays, with dropped_at set,
 * until maintenance has removed the index entries pointing into it.
 */
void
spindle_catalog_mark_dropped(Oid facade, int64 spindle_no, int64 bytes_freed)
{
	Oid			types[3] = {OIDOID, INT8OID, INT8OID};
	Datum		values[3];

	values[0] = ObjectIdGetDatum(facade);
	values[1] = Int64GetDatum(spindle_no);
	values[2] = Int64GetDatum(bytes_freed);
	catalog_write("UPDATE spindle.spindle_catalog SET dropped_at = pg_catalog.now(),"
				  "       filled_at = coalesce(filled_at, pg_catalog.now())"
				  " WHERE relation OPERATOR(pg_catalog.=) $1"
				  "   AND spindle_no OPERATOR(pg_catalog.=) $2",
				  2, types, values);
	catalog_write("UPDATE spindle.table_catalog"
				  "   SET spindles_dropped = spindles_dropped OPERATOR(pg_catalog.+) 1,"
				  "       bytes_freed = bytes_freed OPERATOR(pg_catalog.+) $3"
				  " WHERE relation OPERATOR(pg_catalog.=) $1",
				  3, types, values);
}

/*
 * Dropped spindles of the facade whose drop committed (rows not written by
 * this transaction): their index entries may now be removed.  Returns the
 * spindle numbers in a palloc'd array.
 */
int64 *
spindle_catalog_dropped(Oid facade, int *n)
{
	SpiContext	spi;
	Oid			types[1] = {OIDOID};
	Datum		values[1];
	int64	   *result;
	uint64		i;

	values[0] = ObjectIdGetDatum(facade);
	spi_begin(&spi);
	spi_run("SELECT spindle_no FROM spindle.spindle_catalog"
			" WHERE relation OPERATOR(pg_catalog.=) $1"
			"   AND dropped_at IS NOT NULL"
			"   AND NOT spindle._xid_is_current(xmin)",
			1, types, values, NULL, true);
	result = MemoryContextAlloc(spi.outer,
								sizeof(int64) * Max(SPI_processed, 1));
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		result[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
												SPI_tuptable->tupdesc,
												1, &isnull));
	}
	*n = (int) SPI_processed;
	spi_end(&spi);
	return result;
}

/* Forget dropped spindles once no index entry points into them. */
void
spindle_catalog_forget_dropped(Oid facade, int64 *spindle_nos, int n)
{
	SpiContext	spi;
	Oid			types[2] = {OIDOID, INT8OID};
	Datum		values[2];
	int			i;

	values[0] = ObjectIdGetDatum(facade);
	spi_begin(&spi);
	for (i = 0; i < n; i++)
	{
		values[1] = Int64GetDatum(spindle_nos[i]);
		spi_run("DELETE FROM spindle.spindle_catalog"
				" WHERE relation OPERATOR(pg_catalog.=) $1"
				"   AND spindle_no OPERATOR(pg_catalog.=) $2"
				"   AND dropped_at IS NOT NULL",
				2, types, values, NULL, false);
	}
	spi_end(&spi);
}

/* Record when a spindle became full, if not yet recorded. */
void
spindle_catalog_set_filled(Oid facade, int64 spindle_no, TimestampTz when)
{
	Oid			types[3] = {OIDOID, INT8OID, TIMESTAMPTZOID};
	Datum		values[3];

	values[0] = ObjectIdGetDatum(facade);
	values[1] = Int64GetDatum(spindle_no);
	values[2] = TimestampTzGetDatum(when);
	catalog_write("UPDATE spindle.spindle_catalog SET filled_at = $3"
				  " WHERE relation OPERATOR(pg_catalog.=) $1"
				  "   AND spindle_no OPERATOR(pg_catalog.=) $2 AND filled_at IS NULL",
				  3, types, values);
}

/*
 * ALTER TABLE SET (events_per_spindle): give the new capacity to every
 * spindle of the facade that has no events yet.  The caller holds
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
	}
	spindle_directory_release(dir);
	CacheInvalidateRelcacheByRelid(RelationGetRelid(facade));
}
