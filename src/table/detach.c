/*-------------------------------------------------------------------------
 *
 * detach.c
 *	  DROP TABLE, TRUNCATE, DROP SCHEMA ... CASCADE and DROP OWNED of spindle
 *	  tables whatever their number of spindles: spindles beyond what one
 *	  transaction may drop are detached from their table, and maintenance
 *	  drops them after the commit.
 *
 * Dropping a spindle takes five locks that stay to the end of the
 * transaction: AccessExclusiveLock on its relation, its TOAST table and its
 * TOAST index, and on its row type and array type.  A hot standby replays
 * the three relation locks and holds them until it replays the commit, so
 * releasing them early on the primary would still fill the standby's lock
 * table, and its startup process fails for good when it runs out.  So a
 * transaction drops at most spindle_drops_per_transaction() spindles
 * (spindle_drops_fit), counted table by table: a table whose spindles fit
 * in what is left has them dropped as before, under their locks.
 *
 * The spindles of any other table are *detached* instead: their rows in
 * spindle.spindle_catalog move to relation 0 (spindle_no = -segment) and
 * their pg_depend link to the table goes, so that core drops the table
 * alone.  That writes catalog rows and takes no lock on any spindle.  It is
 * sound because the table is held in ACCESS EXCLUSIVE mode first, which
 * every path to a spindle through its table (readers, writers, the views,
 * the worker, drop_spindles()) takes a lock against, and after the commit
 * no path reaches them: the table is gone, or it was truncated with its
 * indexes and slot map, and its directory no longer lists them.  Paths
 * that reach a spindle directly (VACUUM and ANALYZE of it, autovacuum, a
 * superuser's query of pg_spindle) keep working on an intact relation.  A
 * ROLLBACK, ROLLBACK TO SAVEPOINT, error or crash undoes the detaching,
 * and the spindles never changed.
 *
 * A detached spindle is dropped by the worker (and by drop_spindles()
 * without argument, for a superuser), a bounded number per transaction,
 * each only once its AccessExclusiveLock is had without waiting: a catalog
 * DROP, so its files go at commit and standbys replay it.  No standby
 * query needs cancelling for it: the DROP or TRUNCATE that detached it
 * took the table's AccessExclusiveLock, which a standby replays too, and
 * no later query reaches it.  DROP EXTENSION spindle drops the remaining
 * ones itself (they depend on access method spindle_segment).
 *
 * The DROP statements reach this before core runs them (the utility hook
 * calls spindle_prepare_drop): the tables they would drop are locked as
 * core would lock them, after the same ownership checks (never queueing
 * for a table the caller may not drop), and emptied of their spindles; the
 * hook checks afterwards that each of them is gone.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/twophase.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/partition.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/pg_depend.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_namespace.h"
#include "commands/defrem.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/parsenodes.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "table/spindle_table.h"


/* Locks a spindle's drop holds until the transaction ends. */
#define LOCKS_PER_DROP 5

/* spindles dropped with their tables in this transaction so far */
static int	drops_taken = 0;

/* this transaction detached spindles: wake the worker when it commits */
static bool detached_here = false;

static void
detach_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT && detached_here)
		spindle_wake_worker();
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PARALLEL_ABORT)
	{
		drops_taken = 0;
		detached_here = false;
	}
}

static void
register_callback(void)
{
	static bool registered = false;

	if (!registered)
	{
		RegisterXactCallback(detach_xact_callback, NULL);
		registered = true;
	}
}

/*
 * May this transaction drop nspindles more spindles (with their tables)?
 * If so they are counted.  A subtransaction that rolls back does not give
 * its share back: the count only errs on the safe side.
 */
bool
spindle_drops_fit(int nspindles)
{
	register_callback();
	if (nspindles <= 0)
		return true;
	if (drops_taken + nspindles > spindle_drops_per_transaction())
		return false;
	drops_taken += nspindles;
	return true;
}

/*
 * Cut the dependency of each spindle in segments on the facade, so that
 * dropping the facade no longer drops (and locks) them.  The caller holds
 * AccessExclusiveLock on the facade and moves their catalog rows to
 * relation 0 in the same transaction.
 */
void
spindle_detach_segments(Oid facade, List *segments)
{
	ListCell   *lc;

	register_callback();
	foreach(lc, segments)
		(void) deleteDependencyRecordsForSpecific(RelationRelationId,
												  lfirst_oid(lc),
												  DEPENDENCY_AUTO,
												  RelationRelationId,
												  facade);
	if (segments != NIL)
		detached_here = true;
}

/* ----------------------------------------------------------------
 * SPI on spindle's catalog, as the bootstrap superuser (catalog_spi.c):
 * every name and operator schema-qualified, the latest snapshot.
 * ----------------------------------------------------------------
 */

/* Does spindle's catalog exist (not during DROP EXTENSION)? */
static bool
catalog_present(void)
{
	Oid			nsp = get_namespace_oid(SPINDLE_SCHEMA, true);

	return OidIsValid(nsp) &&
		OidIsValid(get_relname_relid("spindle_catalog", nsp));
}

/* ----------------------------------------------------------------
 * The tables a DROP statement drops
 * ----------------------------------------------------------------
 */
static bool
is_facade(Oid relid)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			am = spindle_facade_am_oid();
	bool		result = false;

	if (HeapTupleIsValid(tup))
	{
		Form_pg_class form = (Form_pg_class) GETSTRUCT(tup);

		result = OidIsValid(am) && form->relkind == RELKIND_RELATION &&
			form->relam == am;
		ReleaseSysCache(tup);
	}
	return result;
}

/*
 * Lock relid in ACCESS EXCLUSIVE mode, a partition's parent first (as
 * core's DROP TABLE, heap_drop_with_catalog and every query lock them).
 */
static void
lock_relation(Oid relid)
{
	if (get_rel_relispartition(relid))
	{
		Oid			parent = get_partition_parent(relid, true);

		if (OidIsValid(parent))
			LockRelationOid(parent, AccessExclusiveLock);
	}
	LockRelationOid(relid, AccessExclusiveLock);
}

/*
 * Add the spindle tables among relid (locked) and, with descend, its
 * inheritors to *facades, locking the inheritors as core's cascade would.
 */
static void
collect_tree(Oid relid, bool descend, List **facades)
{
	List	   *tree;
	ListCell   *lc;

	tree = descend ? find_all_inheritors(relid, AccessExclusiveLock, NULL) :
		list_make1_oid(relid);
	foreach(lc, tree)
		if (is_facade(lfirst_oid(lc)))
			*facades = list_append_unique_oid(*facades, lfirst_oid(lc));
}

/*
 * Whether relid is worth locking ahead of core: a spindle table, or a table
 * with inheritors that may be; *descend says whether the DROP reaches its
 * inheritors (always its partitions; other children with CASCADE).
 */
static bool
drop_candidate(Oid relid, DropBehavior behavior, Oid *nsp, bool *descend)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Form_pg_class form;
	Oid			am = spindle_facade_am_oid();
	bool		result;

	if (!HeapTupleIsValid(tup))
		return false;
	form = (Form_pg_class) GETSTRUCT(tup);
	*nsp = form->relnamespace;
	*descend = form->relhassubclass &&
		(behavior == DROP_CASCADE ||
		 form->relkind == RELKIND_PARTITIONED_TABLE);
	result = (form->relkind == RELKIND_RELATION && form->relam == am) ||
		((form->relkind == RELKIND_RELATION ||
		  form->relkind == RELKIND_PARTITIONED_TABLE) && *descend);
	ReleaseSysCache(tup);
	return result;
}

/* DROP TABLE a, b, ...: the tables named, and what core drops with them. */
static List *
drop_table_targets(DropStmt *stmt)
{
	List	   *facades = NIL;
	ListCell   *lc;

	foreach(lc, stmt->objects)
	{
		RangeVar   *rv = makeRangeVarFromNameList((List *) lfirst(lc));
		Oid			relid = RangeVarGetRelid(rv, NoLock, true);
		Oid			nsp;
		bool		descend;

		if (!OidIsValid(relid) ||
			!drop_candidate(relid, stmt->behavior, &nsp, &descend))
			continue;
		/* core's own check before it locks: never queue for it otherwise */
		if (!pg_class_ownercheck(relid, GetUserId()) &&
			!pg_namespace_ownercheck(nsp, GetUserId()))
			continue;
		lock_relation(relid);
		/* renamed or replaced meanwhile: core finds what the name means */
		if (RangeVarGetRelid(rv, NoLock, true) != relid ||
			!drop_candidate(relid, stmt->behavior, &nsp, &descend))
			continue;
		collect_tree(relid, descend, &facades);
	}
	return facades;
}

/*
 * Spindle tables, and tables with inheritors, whose pg_class column attnum
 * (relnamespace or relowner) equals value.
 */
static List *
relations_with(AttrNumber attnum, Oid value)
{
	Relation	pgclass = table_open(RelationRelationId, AccessShareLock);
	ScanKeyData key;
	TableScanDesc scan;
	HeapTuple	tup;
	Oid			am = spindle_facade_am_oid();
	List	   *result = NIL;

	ScanKeyInit(&key, attnum, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(value));
	scan = table_beginscan_catalog(pgclass, 1, &key);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_class form = (Form_pg_class) GETSTRUCT(tup);

		if ((form->relkind == RELKIND_RELATION && form->relam == am) ||
			((form->relkind == RELKIND_RELATION ||
			  form->relkind == RELKIND_PARTITIONED_TABLE) &&
			 form->relhassubclass))
			result = lappend_oid(result, form->oid);
	}
	table_endscan(scan);
	table_close(pgclass, AccessShareLock);
	return result;
}

/* Is pg_class column attnum (relnamespace or relowner) of relid value? */
static bool
still_with(Oid relid, AttrNumber attnum, Oid value)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	bool		result = false;

	if (HeapTupleIsValid(tup))
	{
		Form_pg_class form = (Form_pg_class) GETSTRUCT(tup);

		result = (attnum == Anum_pg_class_relnamespace ?
				  form->relnamespace : form->relowner) == value;
		ReleaseSysCache(tup);
	}
	return result;
}

/*
 * Lock each relation of relations_with(attnum, value) and collect the
 * spindle tables among them and among the inheritors the DROP reaches.
 */
static void
lock_candidates(AttrNumber attnum, Oid value, DropBehavior behavior,
				List **facades)
{
	ListCell   *lc;

	foreach(lc, relations_with(attnum, value))
	{
		Oid			relid = lfirst_oid(lc);
		Oid			nsp;
		bool		descend;

		if (!drop_candidate(relid, behavior, &nsp, &descend))
			continue;
		lock_relation(relid);
		/* as it is now that it is locked: moved or given away, core skips it */
		if (still_with(relid, attnum, value) &&
			drop_candidate(relid, behavior, &nsp, &descend))
			collect_tree(relid, descend, facades);
	}
}

/* DROP SCHEMA a, b, ... CASCADE: every spindle table in them. */
static List *
drop_schema_targets(DropStmt *stmt)
{
	List	   *facades = NIL;
	ListCell   *lc;

	/* without CASCADE, a schema holding a table is not dropped */
	if (stmt->behavior != DROP_CASCADE)
		return NIL;
	foreach(lc, stmt->objects)
	{
		char	   *name = strVal(lfirst(lc));
		Oid			nsp = get_namespace_oid(name, true);

		if (!OidIsValid(nsp) || !pg_namespace_ownercheck(nsp, GetUserId()))
			continue;
		/* as core locks it, before the objects in it */
		LockDatabaseObject(NamespaceRelationId, nsp, 0, AccessExclusiveLock);
		if (get_namespace_oid(name, true) != nsp)
			continue;
		lock_candidates(Anum_pg_class_relnamespace, nsp, stmt->behavior,
						&facades);
	}
	return facades;
}

/* DROP OWNED BY a, b, ...: every spindle table they own here. */
static List *
drop_owned_targets(DropOwnedStmt *stmt)
{
	List	   *roles = NIL;
	List	   *facades = NIL;
	ListCell   *lc;

	foreach(lc, stmt->roles)
	{
		Oid			role = get_rolespec_oid(lfirst(lc), true);

		/* what core refuses, it refuses before any lock */
		if (!OidIsValid(role) || role == BOOTSTRAP_SUPERUSERID ||
			!has_privs_of_role(GetUserId(), role))
			return NIL;
		roles = lappend_oid(roles, role);
	}
	foreach(lc, roles)
		lock_candidates(Anum_pg_class_relowner, lfirst_oid(lc),
						stmt->behavior, &facades);
	return facades;
}

/*
 * DROP EXTENSION spindle: drop the detached spindles first (they depend on
 * access method spindle_segment, and RESTRICT would refuse), in this
 * transaction; with CASCADE core then drops every spindle of every table
 * in one transaction as well.  Refuse before any lock is queued what the
 * lock table cannot hold.
 */
static void
prepare_drop_extension(DropStmt *stmt)
{
	Oid			ext = get_extension_oid("spindle", true);
	bool		ours = false;
	ListCell   *lc;
	SpindleSpi	spi;
	int64		detached = 0,
				all = 0,
				needed,
				room;
	bool		isnull;

	foreach(lc, stmt->objects)
		if (strcmp(strVal(lfirst(lc)), "spindle") == 0)
			ours = true;
	if (!ours || !OidIsValid(ext) ||
		!pg_extension_ownercheck(ext, GetUserId()) || !catalog_present())
		return;

	spindle_spi_begin(&spi);
	spindle_spi_exec("SELECT pg_catalog.count(*) FILTER (WHERE relation OPERATOR(pg_catalog.=) 0::pg_catalog.oid),"
					 "       pg_catalog.count(*)"
					 "  FROM spindle.spindle_catalog WHERE dropped_at IS NULL",
					 0, NULL, NULL, NULL, true);
	detached = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
										   SPI_tuptable->tupdesc, 1, &isnull));
	all = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
									  SPI_tuptable->tupdesc, 2, &isnull));
	spindle_spi_end(&spi);

	needed = LOCKS_PER_DROP * (stmt->behavior == DROP_CASCADE ? all : detached);
	room = (int64) max_locks_per_xact * (MaxBackends + max_prepared_xacts);
	if (needed > room)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("DROP EXTENSION spindle would take %lld locks, more than the lock table holds (%lld)",
						(long long) needed, (long long) room),
				 errdetail("This database has %lld spindles (%lld of them of dropped or truncated tables); dropping each takes %d locks until the transaction ends.",
						   (long long) all, (long long) detached, LOCKS_PER_DROP),
				 errhint("Drop the spindle tables first and let the spindle worker, or spindle.drop_spindles() run by a superuser, drop their spindles; or set max_locks_per_transaction to at least %lld.",
						 (long long) ((needed + needed / 4) / (MaxBackends + max_prepared_xacts) + 1))));
	if (detached > 0)
	{
		int64		freed = 0;

		(void) spindle_drop_detached((int) Min(detached, PG_INT32_MAX), true,
									 &freed);
	}
}

/*
 * Before core runs a DROP statement: empty every spindle table it will drop
 * of its spindles (spindle_drop_all_spindles drops them, or detaches them
 * when they do not fit in this transaction), after locking them as core
 * would.  Returns the tables so emptied, which must be gone once the
 * statement has run (spindle_check_dropped).
 */
List *
spindle_prepare_drop(Node *parsetree)
{
	List	   *facades = NIL;
	ListCell   *lc;

	if (!OidIsValid(spindle_facade_am_oid()))
		return NIL;				/* no spindle table in this database */
	/* core refuses it (read-only transaction, standby) before any lock */
	if (XactReadOnly)
		return NIL;

	if (IsA(parsetree, DropStmt))
	{
		DropStmt   *stmt = (DropStmt *) parsetree;

		if (stmt->removeType == OBJECT_TABLE)
			facades = drop_table_targets(stmt);
		else if (stmt->removeType == OBJECT_SCHEMA)
			facades = drop_schema_targets(stmt);
		else if (stmt->removeType == OBJECT_EXTENSION)
			prepare_drop_extension(stmt);
	}
	else if (IsA(parsetree, DropOwnedStmt))
		facades = drop_owned_targets((DropOwnedStmt *) parsetree);

	if (facades == NIL || !catalog_present())
		return NIL;
	foreach(lc, facades)
	{
		Relation	rel = relation_open(lfirst_oid(lc), NoLock);

		if (spindle_is_facade(rel))
			spindle_drop_all_spindles(rel);
		relation_close(rel, NoLock);
	}
	return facades;
}

/*
 * After the DROP statement: every table spindle_prepare_drop emptied must
 * be gone, or its indexes would still hold TIDs of spindles it no longer
 * lists.  (Only a table renamed while the DROP waited for its lock, the
 * name then naming another one, could survive.)
 */
void
spindle_check_dropped(List *facades)
{
	ListCell   *lc;

	foreach(lc, facades)
		if (SearchSysCacheExists1(RELOID, ObjectIdGetDatum(lfirst_oid(lc))))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("spindle table \"%s\" was emptied for a DROP that did not drop it",
							get_rel_name(lfirst_oid(lc))),
					 errdetail("The table was renamed or replaced while the DROP waited for its lock."),
					 errhint("Run the command again.")));
}

/* ----------------------------------------------------------------
 * Dropping detached spindles
 * ----------------------------------------------------------------
 */

/* Does the relation still depend on a table (it is not detached)? */
static bool
depends_on_a_table(Oid segment)
{
	Relation	depend = table_open(DependRelationId, AccessShareLock);
	ScanKeyData key[2];
	SysScanDesc scan;
	HeapTuple	tup;
	bool		result = false;

	ScanKeyInit(&key[0], Anum_pg_depend_classid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(RelationRelationId));
	ScanKeyInit(&key[1], Anum_pg_depend_objid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(segment));
	scan = systable_beginscan(depend, DependDependerIndexId, true, NULL, 2, key);
	while (!result && HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		Form_pg_depend dep = (Form_pg_depend) GETSTRUCT(tup);

		result = dep->refclassid == RelationRelationId &&
			dep->deptype == DEPENDENCY_AUTO;
	}
	systable_endscan(scan);
	table_close(depend, AccessShareLock);
	return result;
}

/* Forget the catalog row of a detached spindle. */
static void
forget_detached(Oid segment)
{
	SpindleSpi	spi;
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(-(int64) segment)};

	spindle_spi_begin(&spi);
	spindle_spi_exec("DELETE FROM spindle.spindle_catalog"
					 " WHERE relation OPERATOR(pg_catalog.=) 0::pg_catalog.oid"
					 "   AND spindle_no OPERATOR(pg_catalog.=) $1",
					 1, types, values, NULL, false);
	spindle_spi_end(&spi);
}

/* Drop one detached spindle; the caller holds its AccessExclusiveLock. */
static void
drop_one(Oid segment)
{
	ObjectAddress addr;

	ObjectAddressSet(addr, RelationRelationId, segment);
	performDeletion(&addr, DROP_RESTRICT,
					PERFORM_DELETION_INTERNAL | PERFORM_DELETION_QUIETLY);
	forget_detached(segment);
}

/*
 * Drop up to max_drops detached spindles in the current transaction;
 * returns how many and adds their sizes to *bytes_freed.  Without wait, a
 * spindle somebody holds a lock on is left for later, and one that cannot
 * be dropped (an object of a superuser's depends on it) is reported with
 * a WARNING and left alone, each drop being a subtransaction.  With wait
 * (DROP EXTENSION), locks are waited for and errors are the caller's.
 */
int
spindle_drop_detached(int max_drops, bool wait, int64 *bytes_freed)
{
	Oid			nsp = get_namespace_oid(SPINDLE_STORAGE_SCHEMA, true);
	Oid			am = get_am_oid("spindle_segment", true);
	SpindleSpi	spi;
	Oid			types[1] = {INT4OID};
	Datum		values[1];
	List	   *segments = NIL;
	ListCell   *lc;
	uint64		i;
	int			ndropped = 0;

	if (max_drops <= 0 || !OidIsValid(nsp) || !OidIsValid(am) ||
		!catalog_present())
		return 0;

	values[0] = Int32GetDatum(max_drops);
	spindle_spi_begin(&spi);
	spindle_spi_exec("SELECT segment FROM spindle.spindle_catalog"
					 " WHERE relation OPERATOR(pg_catalog.=) 0::pg_catalog.oid"
					 " ORDER BY spindle_no DESC LIMIT $1",
					 1, types, values, NULL, true);
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Oid			segment = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
															 SPI_tuptable->tupdesc,
															 1, &isnull));
		MemoryContext old = MemoryContextSwitchTo(spi.outer);

		segments = lappend_oid(segments, segment);
		MemoryContextSwitchTo(old);
	}
	spindle_spi_end(&spi);

	foreach(lc, segments)
	{
		Oid			segment = lfirst_oid(lc);
		HeapTuple	tup;
		bool		detached;
		int64		bytes;

		if (wait)
			LockRelationOid(segment, AccessExclusiveLock);
		else if (!ConditionalLockRelationOid(segment, AccessExclusiveLock))
			continue;			/* in use (VACUUM of it, say): next time */

		tup = SearchSysCache1(RELOID, ObjectIdGetDatum(segment));
		if (!HeapTupleIsValid(tup))
		{
			/* gone already (a superuser dropped it): only the row is left */
			UnlockRelationOid(segment, AccessExclusiveLock);
			forget_detached(segment);
			continue;
		}
		detached = ((Form_pg_class) GETSTRUCT(tup))->relnamespace == nsp &&
			((Form_pg_class) GETSTRUCT(tup))->relam == am &&
			((Form_pg_class) GETSTRUCT(tup))->relkind == RELKIND_RELATION;
		ReleaseSysCache(tup);
		if (!detached || depends_on_a_table(segment))
		{
			UnlockRelationOid(segment, AccessExclusiveLock);
			ereport(WARNING,
					(errmsg("relation %u is listed as a detached spindle but is not one; left alone",
							segment)));
			continue;
		}

		bytes = DatumGetInt64(DirectFunctionCall1(pg_total_relation_size,
												  ObjectIdGetDatum(segment)));
		if (wait)
			drop_one(segment);
		else
		{
			MemoryContext cxt = CurrentMemoryContext;
			ResourceOwner owner = CurrentResourceOwner;
			volatile bool ok = true;

			BeginInternalSubTransaction(NULL);
			MemoryContextSwitchTo(cxt);
			PG_TRY();
			{
				drop_one(segment);
				ReleaseCurrentSubTransaction();
			}
			PG_CATCH();
			{
				ErrorData  *edata;

				MemoryContextSwitchTo(cxt);
				edata = CopyErrorData();
				FlushErrorState();
				RollbackAndReleaseCurrentSubTransaction();
				ereport(WARNING,
						(errmsg("could not drop detached spindle %u: %s",
								segment, edata->message)));
				FreeErrorData(edata);
				ok = false;
			}
			PG_END_TRY();
			MemoryContextSwitchTo(cxt);
			CurrentResourceOwner = owner;
			if (!ok)
				continue;
		}
		ndropped++;
		*bytes_freed += bytes;
	}
	return ndropped;
}

/*
 * The worker's step: drop detached spindles, a bounded number per
 * transaction, until none is left (at most 32 transactions a round).
 * Errors are logged; the next round tries again.
 */
void
spindle_worker_drop_detached(int64 *dropped, int64 *freed)
{
	MemoryContext cxt = CurrentMemoryContext;
	int			round;

	for (round = 0; round < 32; round++)
	{
		int			budget = spindle_drops_per_transaction();
		volatile int n = 0;
		volatile int64 bytes = 0;

		PG_TRY();
		{
			int64		b = 0;

			SetCurrentStatementStartTimestamp();
			StartTransactionCommand();
			PushActiveSnapshot(GetTransactionSnapshot());
			n = spindle_drop_detached(budget, false, &b);
			bytes = b;
			PopActiveSnapshot();
			CommitTransactionCommand();
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			edata = spindle_catch_and_abort(cxt);
			ereport(LOG,
					(errmsg("spindle worker: dropping detached spindles failed: %s",
							edata->message)));
			FreeErrorData(edata);
			return;
		}
		PG_END_TRY();
		MemoryContextSwitchTo(cxt);
		*dropped += n;
		*freed += bytes;
		if (n < budget)
			break;
	}
}
