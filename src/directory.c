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
 * find spindles created after its snapshot was taken.  Rows with relation
 * 0 are spindles detached from a dropped or truncated table, waiting for
 * maintenance to drop them (detach.c); no table's directory lists them.
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
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "layout.h"
#include "slotmap.h"
#include "directory.h"
#include "slots.h"
#include "options.h"
#include "detach.h"
#include "spindle.h"


/* One cached directory per facade. */
typedef struct DirCacheEntry
{
	Oid			facade;			/* hash key */
	SpindleDirectory *current;	/* NULL or the valid directory */
	int64		open_spindle_no;	/* where this backend last inserted */
} DirCacheEntry;

static HTAB *dir_cache = NULL;

/* this transaction created spindles (and holds a creation lock) */
static bool created_spindles = false;
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
	int			guc_nestlevel;
	MemoryContext outer;		/* results that outlive SPI_finish go here */
} SpiContext;

/*
 * Run the statements below as the bootstrap superuser, with a search_path
 * of pg_catalog only: the caller's search_path must not be able to put a
 * function or operator of its own under a name they use (every name is
 * schema-qualified too), and SECURITY_RESTRICTED_OPERATION keeps them from
 * changing anything but what they say.
 */
static void
spi_begin(SpiContext *ctx)
{
	ctx->outer = CurrentMemoryContext;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	GetUserIdAndSecContext(&ctx->saved_userid, &ctx->saved_sec_context);
	SetUserIdAndSecContext(BOOTSTRAP_SUPERUSERID,
						   ctx->saved_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	ctx->guc_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);
}

static void
spi_end(SpiContext *ctx)
{
	AtEOXact_GUC(true, ctx->guc_nestlevel);
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
				bury_directory(e->current);
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
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PARALLEL_ABORT || event == XACT_EVENT_PREPARE)
		created_spindles = false;

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

/* qsort comparator: directory indexes by vbase (see load_directory) */
static SpindleDirectory *sort_dir;

static int
cmp_vbase(const void *a, const void *b)
{
	int64		va = sort_dir->spindles[*(const int *) a].vbase;
	int64		vb = sort_dir->spindles[*(const int *) b].vbase;

	return (va > vb) - (va < vb);
}

/* Read the directory of a facade from the catalog. */
static SpindleDirectory *
load_directory(Relation facade)
{
	MemoryContext cxt;
	MemoryContext oldcxt;
	SpindleDirectory *dir;
	SpiContext	spi;
	Oid			types[1] = {OIDOID};
	Datum		values[1];
	uint64		i;
	bool		found;

	/* checked here, once per relcache version, for every reader and writer */
	spindle_check_layout(facade);

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
	spi_run("SELECT spindle_no, segment, capacity, created_at, filled_at,"
			"       vbase, vcount"
			"  FROM spindle.spindle_catalog"
			" WHERE relation OPERATOR(pg_catalog.=) $1 AND dropped_at IS NULL"
			" ORDER BY spindle_no",
			1, types, values, NULL, true);
	oldcxt = MemoryContextSwitchTo(cxt);
	dir->nspindles = (int) SPI_processed;
	dir->spindles = palloc0(sizeof(SpindleEntry) * Max(dir->nspindles, 1));
	dir->byvbase = palloc0(sizeof(int) * Max(dir->nspindles, 1));
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
		sp->vbase = DatumGetInt64(SPI_getbinval(tup, td, 6, &isnull));
		sp->vcount = DatumGetInt64(SPI_getbinval(tup, td, 7, &isnull));
		dir->byvbase[i] = (int) i;
	}
	sort_dir = dir;
	qsort(dir->byvbase, dir->nspindles, sizeof(int), cmp_vbase);
	sort_dir = NULL;
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
				bury_directory(e->current);
			else
				free_directory(e->current);
		}
		/*
		 * Spindles before the one this backend last inserted into are full
		 * for good: start the next insert there, not at the oldest spindle.
		 */
		if (e->open_spindle_no == 0)
			i = dir->nspindles - 1;	/* no history: start at the newest */
		else
			for (i = 0; i < dir->nspindles; i++)
				if (dir->spindles[i].spindle_no >= e->open_spindle_no)
					break;
		dir->open_hint = Max(Min(i, dir->nspindles - 1), 0);
		e->current = dir;
	}
	e->current->pins++;
	return e->current;
}

/*
 * Drop this backend's copy of a facade's directory, so that the next
 * acquire reads the catalog again (when an invalidation may not have
 * arrived yet, see spindle_resolve_tid).
 */
void
spindle_directory_forget(Oid facade)
{
	DirCacheEntry *e = hash_search(dir_cache, &facade, HASH_FIND, NULL);

	if (e != NULL && e->current != NULL)
	{
		if (e->current->pins > 0)
			bury_directory(e->current);
		else
			free_directory(e->current);
		e->current = NULL;
	}
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

/* Make sure spindle.table_catalog has a row for the facade. */
void
spindle_register_table(Oid facade)
{
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(facade)};

	SpiContext	spi;
	bool		known;

	/* a plain read first: the row exists but for a table's first spindle */
	spi_begin(&spi);
	known = spi_run("SELECT 1 FROM spindle.table_catalog"
					" WHERE relation OPERATOR(pg_catalog.=) $1",
					1, types, values, NULL, true) > 0;
	spi_end(&spi);
	if (!known)
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

/*
 * The next spindle number of the facade (see spindle_next_spindle_no): the
 * catalog's highest, dropped spindles included, bounds it from below.
 */
static int64
next_spindle_no(Relation facade)
{
	SpiContext	spi;
	Oid			types[1] = {OIDOID};
	Datum		values[1];
	int64		floor = 1;
	bool		isnull;
	Datum		d;

	values[0] = ObjectIdGetDatum(RelationGetRelid(facade));
	spi_begin(&spi);
	spi_run("SELECT pg_catalog.max(spindle_no) FROM spindle.spindle_catalog"
			" WHERE relation OPERATOR(pg_catalog.=) $1",
			1, types, values, NULL, true);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (!isnull)
		floor = DatumGetInt64(d) + 1;
	spi_end(&spi);
	return spindle_next_spindle_no(facade, floor);
}

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

/*
 * Find room for a spindle of `capacity` events (0: as many as the largest
 * free range holds) among the virtual slots of the facade: every range in
 * the catalog (live spindles, and dropped ones whose index entries are not
 * yet removed) and every pending range is taken.  First fit, lowest slots
 * first, so that the slot map stays compact.  The caller holds the
 * creation lock.
 */
static void
allocate_range(Relation facade, int64 capacity, int64 *vbase, int64 *vcount)
{
	SpiContext	spi;
	Oid			types[1] = {OIDOID};
	Datum		values[1];
	SpindlePending pending[SPINDLE_MAX_PENDING];
	int			npending = spindle_pending_read(facade, pending);
	VRange	   *ranges;
	int			n = 0;
	int			i;
	int64		pos = 0;
	int64		best_base = -1,
				best_len = 0;
	int64		taken = 0;

	values[0] = ObjectIdGetDatum(RelationGetRelid(facade));
	spi_begin(&spi);
	spi_run("SELECT vbase, vcount FROM spindle.spindle_catalog"
			" WHERE relation OPERATOR(pg_catalog.=) $1",
			1, types, values, NULL, true);
	ranges = MemoryContextAlloc(spi.outer,
								sizeof(VRange) * (SPI_processed + npending + 1));
	for (i = 0; i < (int) SPI_processed; i++)
	{
		bool		isnull;

		ranges[n].vbase = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
													  SPI_tuptable->tupdesc,
													  1, &isnull));
		ranges[n].vcount = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
													   SPI_tuptable->tupdesc,
													   2, &isnull));
		n++;
	}
	spi_end(&spi);
	for (i = 0; i < npending; i++)
	{
		ranges[n].vbase = pending[i].vbase;
		ranges[n].vcount = pending[i].vcount;
		n++;
	}
	qsort(ranges, n, sizeof(VRange), cmp_vrange);

	/* walk the gaps */
	for (i = 0; i <= n; i++)
	{
		int64		next = (i < n) ? ranges[i].vbase : SPINDLE_VSLOTS;
		int64		gap = next - pos;

		if (gap > 0)
		{
			if (capacity > 0 && gap >= capacity)
			{
				best_base = pos;
				best_len = capacity;
				break;
			}
			if (capacity == 0 && gap > best_len)
			{
				best_base = pos;
				best_len = gap;
			}
		}
		if (i < n)
		{
			taken += ranges[i].vcount;
			pos = Max(pos, ranges[i].vbase + ranges[i].vcount);
		}
	}
	pfree(ranges);
	if (best_base < 0)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("spindle table \"%s\" has no room for another spindle of %lld events",
						RelationGetRelationName(facade), (long long) capacity),
				 errdetail("A spindle table holds at most %lld events in spindles that are not yet dropped; %lld are taken.",
						   (long long) SPINDLE_VSLOTS, (long long) taken),
				 errhint("Consume or purge events so that full spindles can be dropped, or use a smaller events_per_spindle.")));
	*vbase = best_base;
	*vcount = best_len;
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

/*
 * Create the relation of one spindle (and its TOAST table) and record it,
 * with its range of virtual slots recorded as pending first.  The caller
 * holds the creation lock and AccessShareLock (at least) on the facade.
 *
 * Spindles belong to the bootstrap superuser, whoever owns the table: an
 * owner change of the table, REASSIGN OWNED or DROP OWNED BY its old owner
 * must not touch them (they go with the table through their dependency).
 * Nobody but a superuser can read them directly.
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
	Oid			types[6] = {OIDOID, INT8OID, OIDOID, INT8OID, INT8OID, INT8OID};
	Datum		values[6];
	SpindlePending p;
	int64		vbase,
				vcount;

	allocate_range(facade, capacity, &vbase, &vcount);

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
	catalog_write("INSERT INTO spindle.spindle_catalog"
				  " (relation, spindle_no, segment, capacity, vbase, vcount)"
				  " VALUES ($1, $2, $3, $4, $5, $6)",
				  6, types, values);
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
 * Create spindles for the facade in the current transaction.  With
 * ready_only, create only as many as are needed for `count` empty spindles
 * to follow the last one that has events; otherwise create `count` new
 * ones.  Takes the table's creation lock (serialising creators, never
 * blocking DML, VACUUM or ANALYZE) and sends a relcache invalidation.
 * The caller holds at least AccessShareLock on the facade.  Returns how
 * many spindles were created.
 */
int
spindle_create_spindles(Relation facade, int count, bool ready_only)
{
	int64		capacity;
	int			ncreate = count;
	int			i;
	bool		found;

	spindle_check_layout(facade);
	/* before the creation lock: this may wait for a row lock (lock order) */
	spindle_register_table(RelationGetRelid(facade));
	spindle_lock_creation(RelationGetRelid(facade));

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

	forget_committed_pending(facade);
	created_spindles = true;
	for (i = 0; i < ncreate; i++)
		create_one_spindle(facade, next_spindle_no(facade), capacity);

	CacheInvalidateRelcacheByRelid(RelationGetRelid(facade));
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
	SpiContext	spi;
	Oid			types[1] = {OIDOID};
	Datum		values[1];
	List	   *segments = NIL;
	ListCell   *lc;
	uint64		i;
	bool		drop;

	values[0] = ObjectIdGetDatum(RelationGetRelid(facade));
	spi_begin(&spi);
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
	spi_end(&spi);

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
 * this transaction): their index entries may now be removed.  Returns how
 * many; *out is a palloc'd array of their numbers and ranges.
 */
int
spindle_catalog_dropped(Oid facade, SpindleRange **out)
{
	SpiContext	spi;
	Oid			types[1] = {OIDOID};
	Datum		values[1];
	SpindleRange *result;
	uint64		i;
	int			n;

	values[0] = ObjectIdGetDatum(facade);
	spi_begin(&spi);
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
	spi_end(&spi);
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
	SpiContext	spi;
	Oid			types[3] = {OIDOID, INT8OID, INT8OID};
	Datum		values[3];
	bool		found;

	values[0] = ObjectIdGetDatum(facade);
	values[1] = Int64GetDatum(spindle_no);
	values[2] = Int64GetDatum(spindle_no + Max(n, 1) - 1);
	spi_begin(&spi);
	found = spi_run("SELECT 1 FROM spindle.spindle_catalog"
					" WHERE relation OPERATOR(pg_catalog.=) $1"
					"   AND spindle_no OPERATOR(pg_catalog.>=) $2"
					"   AND spindle_no OPERATOR(pg_catalog.<=) $3",
					3, types, values, NULL, true) > 0;
	spi_end(&spi);
	return found;
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
	}
	spindle_directory_release(dir);
	CacheInvalidateRelcacheByRelid(RelationGetRelid(facade));
}
