/*-------------------------------------------------------------------------
 *
 * options.c
 *	  Table options of spindle tables, the DDL that spindle tables refuse,
 *	  and the object access hook.
 *
 * PostgreSQL 15 has no table-AM hook for reloptions: core validates
 * WITH (...) against heap's list and rejects events_per_spindle.  So the
 * utility hook (admin/utility.c) has this file take spindle's options out
 * of CREATE TABLE / CREATE TABLE AS / ALTER TABLE SET|RESET and validate
 * them (spindle_prepare_create, spindle_prepare_alter, ...), lets core run
 * the rest, and then has it write them into pg_class.reloptions
 * (spindle_create_finish, spindle_alter_finish).  Relcache parsing ignores
 * names it does not know, and pg_dump prints pg_class.reloptions as
 * WITH (...), so a dump restores the options (through this same path: a
 * dump says SET default_table_access_method = spindle, never USING, which
 * is why am_is_spindle also looks at that setting).  The utility hook
 * decides which statements concern spindle tables and what runs around
 * them; this file decides what such a statement may do to a spindle
 * table, and keeps the state that the object access hook shares with it
 * (the CREATE of a spindle table pending; the objects a statement made).
 *
 * A table's capacity is fixed at creation: the option, else the value of
 * spindle.events_per_spindle at that moment, is always written.
 *
 * Spindle tables can be inheritance children and partitions (CREATE TABLE
 * ... PARTITION OF, ATTACH PARTITION); their options are handled as for
 * any spindle table.  What a spindle table refuses cannot reach it through
 * a parent either: an ALTER TABLE that recurses from an inheritance parent,
 * a partitioned table or (ALTER TYPE ... CASCADE) a composite type into a
 * spindle table and changes its columns is refused, naming the spindle
 * table, and so is a BRIN index that a partitioned parent would give it.
 * No object may depend on a spindle itself or on its row type (a view,
 * a function body or signature, a column, ...: see "Objects depending on
 * a spindle"): such a dependency made every drop of the spindle fail.
 * TRUNCATE gives every spindle table it empties (named, inherited, or
 * reached by CASCADE) a new open spindle (spindle_truncated).  Also
 * refused: REINDEX CONCURRENTLY reaching a spindle table's index
 * (spindle_check_reindex: core would fail only after building and
 * committing copies of the indexes), a materialized view made or turned
 * into a spindle table, and events_per_spindle changed to or from 0 for
 * an existing table (refuse_capacity_zero).  A temporary table is refused
 * as a spindle table if USING spindle says so, and made in heap if spindle
 * comes from default_table_access_method (temp_table_not_spindle).
 * Core's storage parameters work as on heap: spindle's stored options are
 * hidden from core's validation whenever an ALTER sets or resets any.
 *
 * The object access hook, installed by spindle_options_init at _PG_init,
 * gives every new spindle table its hidden columns, refuses a column
 * added to one, learns the OID of the pending CREATE's table, lists the
 * objects a utility statement creates, and forgets a dropped spindle
 * table's or spindle's shared state (directory, counters, slots).
 *
 * Locks.  spindle_prepare_alter expects the caller to own the spindle
 * table and to hold ShareRowExclusiveLock on it if the statement sets
 * spindle's options, ShareUpdateExclusiveLock if it sets or resets only
 * core's storage parameters (admin/utility.c takes it); spindle_create_finish
 * takes the new table in ACCESS EXCLUSIVE mode.  Everything else here
 * reads the catalogs without locking the relations it looks at and leaves
 * the locks to core (the check of the dependencies a statement recorded
 * reads pg_depend with AccessShareLock after core ran it; writing
 * reloptions takes pg_class in RowExclusiveLock); checks that must see
 * the locked state (BRIN indexes of a new or attached partition, the
 * spindles of an altered or truncated table) run after core has run the
 * statement, in the same transaction.
 *
 * Invariants.  A spindle table made by CREATE TABLE [AS] has
 * events_per_spindle in its reloptions from the end of that statement on,
 * and the spindle options written for a table are validated ones (an
 * ALTER TABLE writes them back whether it changed them or not, hidden
 * from core only while core runs it).  pending.relid is valid only between
 * the creation of the pending CREATE's table and spindle_create_end; while
 * it is, stored_option reads that table's options from pending.options.
 * A CREATE nested in another (an event trigger's, one a function called by
 * CREATE TABLE ... AS runs) has a state of its own and leaves the outer
 * one as it found it, whether it succeeds or fails.
 * new_objects lists only objects of statements still running
 * (utility_depth > 0), and is empty when none is.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "access/reloptions.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/catalog.h"
#include "catalog/dependency.h"
#include "catalog/heap.h"
#include "catalog/index.h"
#include "catalog/indexing.h"
#include "catalog/objectaccess.h"
#include "catalog/partition.h"
#include "catalog/pg_am.h"
#include "catalog/pg_attrdef.h"
#include "catalog/pg_class.h"
#include "catalog/pg_depend.h"
#include "catalog/pg_index.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_publication_rel.h"
#include "catalog/pg_rewrite.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "parser/parse_type.h"
#include "storage/lmgr.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "table/spindle_table.h"

/* GUC spindle.events_per_spindle (defined in _PG_init): new tables' capacity */
int			spindle_events_per_spindle = 50000;
/* set by _PG_init when loaded through shared_preload_libraries */
bool		spindle_preloaded = false;


#define OPT_CAPACITY "events_per_spindle"
#define OPT_TTL "time_to_live"

static object_access_hook_type prev_object_access = NULL;

/*
 * Objects created or altered while utility statements run (see "Objects
 * depending on a spindle" below): utility_depth counts the statements
 * running (nested ones included), new_objects lists what the object
 * access hook saw meanwhile, in new_objects_cxt (a child of
 * TopMemoryContext: statements such as CREATE INDEX CONCURRENTLY or a
 * procedure's COMMIT end transactions while they run).
 */
typedef struct NewObject
{
	Oid			classId;
	Oid			objectId;
	int32		subId;
} NewObject;

static int	utility_depth = 0;
static List *new_objects = NIL;
static MemoryContext new_objects_cxt = NULL;

/*
 * The spindle CREATE running now, the innermost one if CREATEs nest (the
 * outer ones' states are kept by the utility hook, see
 * spindle_create_begin).
 */
static SpindleCreateState pending = {false, InvalidOid, NIL};

/* ----------------------------------------------------------------
 * Access method OIDs
 * ----------------------------------------------------------------
 */
Oid
spindle_facade_am_oid(void)
{
	return get_am_oid("spindle", true);
}

Oid
spindle_segment_am_oid(void)
{
	return get_am_oid("spindle_segment", false);
}

bool
spindle_is_facade(Relation rel)
{
	return rel->rd_rel->relkind == RELKIND_RELATION &&
		rel->rd_tableam == spindle_facade_routine();
}

/*
 * Open a relation that a SQL function was given as a spindle table, with
 * the given lock; ERROR if it does not exist or is no spindle table.
 */
Relation
spindle_open_facade(Oid relid, LOCKMODE lockmode)
{
	Relation	rel = try_relation_open(relid, lockmode);

	if (rel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	if (!spindle_is_facade(rel))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("relation \"%s\" is not a spindle table",
						RelationGetRelationName(rel))));
	return rel;
}

/*
 * Is relid a spindle table?  Reads its pg_class row (syscache) without
 * locking it; false if the extension is not installed in this database.
 */
bool
spindle_relid_is_facade(Oid relid)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	bool		result = false;

	if (HeapTupleIsValid(tup))
	{
		Form_pg_class form = (Form_pg_class) GETSTRUCT(tup);
		Oid			am = spindle_facade_am_oid();

		result = OidIsValid(am) && form->relam == am &&
			form->relkind == RELKIND_RELATION;
		ReleaseSysCache(tup);
	}
	return result;
}

/* ----------------------------------------------------------------
 * Parsing and validation
 * ----------------------------------------------------------------
 */

/* Parse an events_per_spindle value; false if it is not one. */
bool
spindle_parse_capacity(const char *value, int64 *result)
{
	char	   *end;
	long		v;

	if (value == NULL || *value == '\0')
		return false;
	errno = 0;
	v = strtol(value, &end, 10);
	if (errno != 0 || *end != '\0' || v < 0 || v > SPINDLE_MAX_CAPACITY)
		return false;
	*result = v;
	return true;
}

/* Parse a time_to_live value into *result; false if it is not one. */
static bool
parse_ttl(const char *value, Interval *result)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	Interval   *iv = NULL;
	Interval	zero;

	if (value == NULL)
		return false;
	PG_TRY();
	{
		iv = DatumGetIntervalP(DirectFunctionCall3(interval_in,
												   CStringGetDatum(value),
												   ObjectIdGetDatum(InvalidOid),
												   Int32GetDatum(-1)));
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(oldcxt);
		FlushErrorState();
		iv = NULL;
	}
	PG_END_TRY();
	if (iv == NULL)
		return false;
	memset(&zero, 0, sizeof(zero));
	if (DatumGetInt32(DirectFunctionCall2(interval_cmp, IntervalPGetDatum(iv),
										  IntervalPGetDatum(&zero))) <= 0)
		return false;
	*result = *iv;
	return true;
}

static bool
is_spindle_option(DefElem *def)
{
	return def->defnamespace == NULL &&
		(strcmp(def->defname, OPT_CAPACITY) == 0 ||
		 strcmp(def->defname, OPT_TTL) == 0);
}

/*
 * Validate one spindle option (ERROR naming it if bad) and return it as a
 * DefElem whose value is the normalized string.
 */
static DefElem *
check_option(DefElem *def, bool is_reset)
{
	char	   *value;

	if (is_reset)
		return makeDefElem(pstrdup(def->defname), NULL, def->location);
	value = def->arg ? defGetString(def) : NULL;
	if (strcmp(def->defname, OPT_CAPACITY) == 0)
	{
		int64		cap;

		if (!spindle_parse_capacity(value, &cap))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid value for option \"%s\": \"%s\"",
							OPT_CAPACITY, value ? value : ""),
					 errdetail("Valid values are integers between 0 and %lld, the most events one spindle holds.",
							   (long long) SPINDLE_MAX_CAPACITY)));
		value = psprintf(INT64_FORMAT, cap);
	}
	else
	{
		Interval	ttl;

		if (!parse_ttl(value, &ttl))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid value for option \"%s\": \"%s\"",
							OPT_TTL, value ? value : ""),
					 errdetail("Valid values are positive intervals, such as '1 hour'.")));
		/* kept as written: its meaning does not depend on IntervalStyle */
	}
	return makeDefElem(pstrdup(def->defname), (Node *) makeString(value),
					   def->location);
}

/* Split options into spindle's (validated) and the rest (left for core). */
static List *
extract_options(List **options, bool is_reset)
{
	List	   *ours = NIL;
	List	   *rest = NIL;
	ListCell   *lc;

	foreach(lc, *options)
	{
		DefElem    *def = lfirst_node(DefElem, lc);

		if (is_spindle_option(def))
			ours = lappend(ours, check_option(def, is_reset));
		else
			rest = lappend(rest, def);
	}
	*options = rest;
	return ours;
}

/* ----------------------------------------------------------------
 * Reading and writing pg_class.reloptions
 * ----------------------------------------------------------------
 */

/* The text[] reloptions of a relation as a list of DefElems. */
static List *
stored_options(Oid relid)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	List	   *result = NIL;

	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = SysCacheGetAttr(RELOID, tup, Anum_pg_class_reloptions,
										&isnull);

		if (!isnull)
			result = untransformRelOptions(d);
		ReleaseSysCache(tup);
	}
	return result;
}

/* Value of a named option stored for relid, or NULL. */
static char *
stored_option(Oid relid, const char *name)
{
	ListCell   *lc;

	if (relid == pending.relid && OidIsValid(relid))
	{
		foreach(lc, pending.options)
		{
			DefElem    *def = lfirst_node(DefElem, lc);

			if (strcmp(def->defname, name) == 0 && def->arg)
				return defGetString(def);
		}
	}
	foreach(lc, stored_options(relid))
	{
		DefElem    *def = lfirst_node(DefElem, lc);

		if (strcmp(def->defname, name) == 0 && def->arg)
			return defGetString(def);
	}
	return NULL;
}

/* events_per_spindle of a spindle table; *found false if never set. */
int64
spindle_rel_capacity_option(Oid relid, bool *found)
{
	char	   *value = stored_option(relid, OPT_CAPACITY);
	int64		cap = 0;

	*found = value != NULL && spindle_parse_capacity(value, &cap);
	return cap;
}

/* time_to_live of a spindle table into *result; false if not set. */
bool
spindle_rel_ttl_option(Oid relid, Interval *result)
{
	char	   *value = stored_option(relid, OPT_TTL);

	return value != NULL && parse_ttl(value, result);
}

/* spindle's options among those stored for relid */
static List *
stored_spindle_options(Oid relid)
{
	List	   *result = NIL;
	ListCell   *lc;

	foreach(lc, stored_options(relid))
		if (is_spindle_option(lfirst_node(DefElem, lc)))
			result = lappend(result, lfirst(lc));
	return result;
}

/* opts with every option named in changes replaced (or removed: RESET) */
static List *
apply_changes(List *opts, List *changes)
{
	List	   *result = NIL;
	ListCell   *lc;

	foreach(lc, opts)
	{
		DefElem    *def = lfirst_node(DefElem, lc);
		bool		changed = false;
		ListCell   *lc2;

		foreach(lc2, changes)
			if (strcmp(lfirst_node(DefElem, lc2)->defname, def->defname) == 0)
				changed = true;
		if (!changed)
			result = lappend(result, def);
	}
	foreach(lc, changes)
		if (lfirst_node(DefElem, lc)->arg != NULL)
			result = lappend(result, lfirst(lc));
	return result;
}

/*
 * Write pg_class.reloptions of relid: the stored options that are not
 * spindle's, plus `ours`.
 */
static void
write_options(Oid relid, List *ours)
{
	Relation	pgclass = table_open(RelationRelationId, RowExclusiveLock);
	HeapTuple	tup = SearchSysCacheCopy1(RELOID, ObjectIdGetDatum(relid));
	List	   *merged = NIL;
	ListCell   *lc;
	Datum		newopts;
	Datum		values[Natts_pg_class] = {0};
	bool		nulls[Natts_pg_class] = {0};
	bool		replace[Natts_pg_class] = {0};
	HeapTuple	newtup;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for relation %u", relid);

	foreach(lc, stored_options(relid))
		if (!is_spindle_option(lfirst_node(DefElem, lc)))
			merged = lappend(merged, lfirst(lc));
	merged = list_concat(merged, ours);

	newopts = transformRelOptions((Datum) 0, merged, NULL, NULL, false, false);
	if (newopts != (Datum) 0)
		values[Anum_pg_class_reloptions - 1] = newopts;
	else
		nulls[Anum_pg_class_reloptions - 1] = true;
	replace[Anum_pg_class_reloptions - 1] = true;
	newtup = heap_modify_tuple(tup, RelationGetDescr(pgclass), values, nulls,
							   replace);
	CatalogTupleUpdate(pgclass, &newtup->t_self, newtup);
	heap_freetuple(newtup);
	heap_freetuple(tup);
	table_close(pgclass, RowExclusiveLock);
	CacheInvalidateRelcacheByRelid(relid);
	CommandCounterIncrement();
}

static DefElem *
capacity_from_guc(void)
{
	return makeDefElem(OPT_CAPACITY,
					   (Node *) makeString(psprintf("%d", spindle_events_per_spindle)),
					   -1);
}

/* ----------------------------------------------------------------
 * ALTER TABLE and what it must not do to a spindle table
 * ----------------------------------------------------------------
 */

/* Does access method am (NULL: the default one) make spindle tables? */
static bool
am_is_spindle(const char *am)
{
	if (am == NULL)
		am = default_table_access_method;
	return am != NULL && strcmp(am, "spindle") == 0;
}

static void
refuse_alter(Relation rel)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("spindle table \"%s\" does not support this ALTER TABLE command",
					RelationGetRelationName(rel)),
			 errdetail("Changing the columns, the access method or the persistence of a spindle table would rewrite it."),
			 errhint("Create a new spindle table and copy the events with INSERT ... SELECT.")));
}

/*
 * Does this ALTER TABLE (or ALTER TYPE) subcommand change the columns of
 * the tables it recurses into?  A spindle table keeps its events in
 * relations of their own, with the columns they were created with.
 */
static bool
alter_cmd_changes_columns(AlterTableCmd *cmd)
{
	switch (cmd->subtype)
	{
		case AT_AddColumn:
		case AT_AddColumnRecurse:
		case AT_DropColumn:
		case AT_DropColumnRecurse:
		case AT_AlterColumnType:
			return true;
		default:
			return false;
	}
}

/*
 * The first spindle table among relid and every table inheriting from it,
 * directly or not (partitions included), or InvalidOid.  Reads pg_inherits
 * and locks nothing: the caller only decides whether to refuse.
 */
static Oid
facade_among_inheritors(Oid relid)
{
	List	   *rels = find_all_inheritors(relid, NoLock, NULL);
	ListCell   *lc;

	foreach(lc, rels)
		if (spindle_relid_is_facade(lfirst_oid(lc)))
			return lfirst_oid(lc);
	return InvalidOid;
}

/* The spindle tables among relid and its inheritors (see above). */
static List *
facades_among_inheritors(Oid relid)
{
	List	   *result = NIL;
	ListCell   *lc;

	foreach(lc, find_all_inheritors(relid, NoLock, NULL))
		if (spindle_relid_is_facade(lfirst_oid(lc)))
			result = lappend_oid(result, lfirst_oid(lc));
	return result;
}

/*
 * The first spindle table that ALTER TYPE ... CASCADE of a composite type
 * would reach: a table of that type (CREATE TABLE ... OF) or one that
 * inherits from such a table.  Scans pg_class as core does to find typed
 * tables; locks nothing.
 */
static Oid
facade_of_type(Oid typid)
{
	Relation	pgclass = table_open(RelationRelationId, AccessShareLock);
	ScanKeyData key;
	TableScanDesc scan;
	HeapTuple	tup;
	Oid			result = InvalidOid;

	ScanKeyInit(&key, Anum_pg_class_reloftype, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(typid));
	scan = table_beginscan_catalog(pgclass, 1, &key);
	while (!OidIsValid(result) &&
		   (tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
		result = facade_among_inheritors(((Form_pg_class) GETSTRUCT(tup))->oid);
	table_endscan(scan);
	table_close(pgclass, AccessShareLock);
	return result;
}

static void
refuse_alter_reaching(Oid facade, const char *named, bool through_type)
{
	char	   *name = get_rel_name(facade);

	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("spindle table \"%s\" does not support this ALTER TABLE command",
					name ? name : "?"),
			 through_type ?
			 errdetail("The command would change the columns of spindle table \"%s\", a table of type \"%s\", which would rewrite it.",
					   name ? name : "?", named) :
			 errdetail("The command would recurse from \"%s\" into spindle table \"%s\" (an inheritance child or a partition of it) and change its columns, which would rewrite it.",
					   named, name ? name : "?"),
			 errhint("Create a new spindle table and copy the events with INSERT ... SELECT.")));
}

/*
 * An ALTER TABLE / ALTER FOREIGN TABLE / ALTER TYPE of a relation that is
 * not itself a spindle table: refuse it if it recurses into a spindle
 * table and would change that table's columns.  Without ONLY, ALTER TABLE
 * reaches every table inheriting from the named one (every partition of a
 * partitioned table); ALTER TYPE ... CASCADE reaches the tables of that
 * type and their inheritors.  ONLY never reaches a child: core refuses
 * ADD COLUMN and ALTER COLUMN TYPE with ONLY on a parent that has
 * children, and DROP COLUMN ONLY leaves the children's columns alone.
 */
static void
refuse_alter_through_parent(AlterTableStmt *stmt, Oid relid)
{
	ListCell   *lc;

	foreach(lc, stmt->cmds)
	{
		AlterTableCmd *cmd = lfirst_node(AlterTableCmd, lc);
		Oid			facade = InvalidOid;

		if (!alter_cmd_changes_columns(cmd))
			continue;
		if (stmt->objtype == OBJECT_TYPE)
		{
			Oid			typid;

			if (cmd->behavior != DROP_CASCADE ||
				get_rel_relkind(relid) != RELKIND_COMPOSITE_TYPE)
				continue;		/* core refuses to touch typed tables */
			typid = get_rel_type_id(relid);
			if (OidIsValid(typid))
				facade = facade_of_type(typid);
			if (OidIsValid(facade))
				refuse_alter_reaching(facade, stmt->relation->relname, true);
		}
		else if (stmt->relation->inh)
		{
			facade = facade_among_inheritors(relid);
			if (OidIsValid(facade))
				refuse_alter_reaching(facade, stmt->relation->relname, false);
		}
	}
}

/*
 * Refuse to change events_per_spindle to or from 0 on an existing spindle
 * table (by SET, or by RESET with spindle.events_per_spindle at the other
 * value): 0 means one single spindle owning every TID of the table, made
 * when the table is created (or emptied by TRUNCATE) and never dropped.
 *
 * A table that already has spindles of a capacity N cannot get one: the
 * next spindle would take the largest free range and the one made ahead
 * of it would find none, so every insert failed with "no room for another
 * spindle of 0 events".  A table created with 0 cannot get N either: its
 * spindle keeps owning every TID (ranges never move), so once N events
 * filled it every insert failed with "no room for another spindle of N
 * events" (and a non-empty one kept capacity 0 while the option said N).
 * Setting the capacity a table already has changes nothing and is let
 * through.  A table without a stored capacity (there is none only while
 * it is being created) is left alone.  ours holds the validated options
 * of one SET/RESET.
 */
static void
refuse_capacity_zero(Relation rel, List *ours)
{
	ListCell   *lc;

	foreach(lc, ours)
	{
		DefElem    *def = lfirst_node(DefElem, lc);
		int64		cap;
		int64		stored;
		bool		found;

		if (strcmp(def->defname, OPT_CAPACITY) != 0)
			continue;
		if (def->arg == NULL)
			cap = spindle_events_per_spindle;	/* RESET: the GUC's value */
		else if (!spindle_parse_capacity(defGetString(def), &cap))
			continue;			/* check_option has refused it */
		stored = spindle_rel_capacity_option(RelationGetRelid(rel), &found);
		if (!found || (cap == 0) == (stored == 0))
			continue;
		if (cap == 0)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot change events_per_spindle of spindle table \"%s\" to 0",
							RelationGetRelationName(rel)),
					 errdetail("events_per_spindle = 0 means one single spindle that holds every event of the table; it is made when the table is created, and cannot replace the spindles of an existing table."),
					 errhint("Create a new spindle table WITH (events_per_spindle = 0) and copy the events with INSERT ... SELECT.")));
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot change events_per_spindle of spindle table \"%s\" from 0",
						RelationGetRelationName(rel)),
				 errdetail("The table was created with events_per_spindle = 0: its single spindle holds every event of the table and keeps every TID, so no spindle of another capacity can be made beside it."),
				 errhint("Create a new spindle table WITH (events_per_spindle = %lld) and copy the events with INSERT ... SELECT.",
						 (long long) cap)));
	}
}

/*
 * ALTER TABLE on a spindle table: refuse what would rewrite it, take
 * spindle's options out of SET/RESET.  Returns the options to apply
 * afterwards (NIL if none), with *changed telling whether there are some.
 */
static List *
prepare_alter(AlterTableStmt *stmt, Relation rel, bool *changed,
			  bool isTopLevel)
{
	List	   *ours = NIL;
	ListCell   *lc;

	foreach(lc, stmt->cmds)
	{
		AlterTableCmd *cmd = lfirst_node(AlterTableCmd, lc);

		switch (cmd->subtype)
		{
			case AT_AddColumn:
			case AT_AddColumnRecurse:
			case AT_DropColumn:
			case AT_DropColumnRecurse:
			case AT_AlterColumnType:
			case AT_SetAccessMethod:
			case AT_SetLogged:
			case AT_SetUnLogged:
				refuse_alter(rel);
				break;
			case AT_SetTableSpace:

				/*
				 * It gives the table (its slot map) new storage but keeps
				 * its indexes: were events added later in the same
				 * transaction and it rolled back, the old slot map would
				 * know nothing of TIDs that the indexes hold.
				 */
				PreventInTransactionBlock(isTopLevel,
										  "ALTER TABLE ... SET TABLESPACE of a spindle table");
				break;
			case AT_SetRelOptions:
			case AT_ResetRelOptions:
				{
					List	   *defs = (List *) cmd->def;
					List	   *mine = extract_options(&defs,
													   cmd->subtype == AT_ResetRelOptions);

					cmd->def = (Node *) defs;
					refuse_capacity_zero(rel, mine);
					if (mine != NIL)
					{
						*changed = true;
						ours = list_concat(ours, mine);
					}
				}
				break;
			default:
				break;
		}
	}
	return ours;
}

/* ----------------------------------------------------------------
 * BRIN indexes
 *
 * BRIN summarises physical block ranges, which spindles do not keep.  A
 * CREATE INDEX naming a spindle table is refused below; a partitioned
 * table gives its indexes to every partition, so a BRIN index must not
 * reach a spindle partition that way either.
 * ----------------------------------------------------------------
 */

/* Has relid a BRIN index?  Reads pg_index without locking relid. */
static bool
rel_has_brin_index(Oid relid)
{
	Relation	pgindex = table_open(IndexRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	bool		found = false;

	ScanKeyInit(&key, Anum_pg_index_indrelid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(relid));
	scan = systable_beginscan(pgindex, IndexIndrelidIndexId, true, NULL, 1, &key);
	while (!found && (tup = systable_getnext(scan)) != NULL)
	{
		Oid			indexrelid = ((Form_pg_index) GETSTRUCT(tup))->indexrelid;
		HeapTuple	ctup = SearchSysCache1(RELOID, ObjectIdGetDatum(indexrelid));

		if (HeapTupleIsValid(ctup))
		{
			found = ((Form_pg_class) GETSTRUCT(ctup))->relam == BRIN_AM_OID;
			ReleaseSysCache(ctup);
		}
	}
	systable_endscan(scan);
	table_close(pgindex, AccessShareLock);
	return found;
}

/* Refuse a BRIN index on spindle table `name` (given by `parent`, if set). */
static void
refuse_brin(const char *name, const char *parent)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("access method \"brin\" is not supported on spindle tables"),
			 parent ?
			 errdetail("Spindle table \"%s\" would get a BRIN index from partitioned table \"%s\"; BRIN summarises physical block ranges, which spindles do not keep.",
					   name, parent) :
			 errdetail("BRIN summarises physical block ranges, which spindles do not keep."),
			 parent ?
			 errhint("Drop the BRIN index of \"%s\", or keep spindle tables out of it.",
					 parent) : 0));
}

/* ----------------------------------------------------------------
 * REINDEX CONCURRENTLY
 *
 * Core builds and commits a copy of each index first and only then fails
 * (a spindle table's index cannot be validated concurrently), leaving a
 * ready but invalid <index>_ccnew behind each time, which every later
 * insert maintains.  So it is refused before anything is built, whenever
 * it would reach an index of a spindle table.
 * ----------------------------------------------------------------
 */

/* Has relid an index?  Reads pg_index without locking relid. */
static bool
rel_has_index(Oid relid)
{
	Relation	pgindex = table_open(IndexRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	bool		found;

	ScanKeyInit(&key, Anum_pg_index_indrelid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(relid));
	scan = systable_beginscan(pgindex, IndexIndrelidIndexId, true, NULL, 1, &key);
	found = HeapTupleIsValid(systable_getnext(scan));
	systable_endscan(scan);
	table_close(pgindex, AccessShareLock);
	return found;
}

/*
 * The first spindle table with an index in namespace nspid (InvalidOid:
 * in the whole database), or InvalidOid.  Scans pg_class; locks nothing.
 */
static Oid
facade_with_index_in(Oid nspid)
{
	Relation	pgclass = table_open(RelationRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	Oid			result = InvalidOid;
	Oid			am = spindle_facade_am_oid();

	ScanKeyInit(&key, Anum_pg_class_relnamespace, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(nspid));
	scan = systable_beginscan(pgclass, InvalidOid, false, NULL,
							  OidIsValid(nspid) ? 1 : 0, &key);
	while (!OidIsValid(result) && (tup = systable_getnext(scan)) != NULL)
	{
		Form_pg_class c = (Form_pg_class) GETSTRUCT(tup);

		if (c->relkind == RELKIND_RELATION && c->relam == am &&
			rel_has_index(c->oid))
			result = c->oid;
	}
	systable_endscan(scan);
	table_close(pgclass, AccessShareLock);
	return result;
}

/*
 * The first spindle table with an index that REINDEX stmt reaches, or
 * InvalidOid: the table of the index (or of the partitions of a
 * partitioned index), the table and its partitions (not its inheritance
 * children, which REINDEX TABLE leaves alone), every table of the
 * schema or of the current database.  Names core would refuse are left to
 * core.  Locks nothing.
 */
static Oid
reindex_reaches_facade(ReindexStmt *stmt)
{
	Oid			relid;
	ListCell   *lc;

	switch (stmt->kind)
	{
		case REINDEX_OBJECT_INDEX:
			relid = RangeVarGetRelid(stmt->relation, NoLock, true);
			if (!OidIsValid(relid))
				return InvalidOid;
			foreach(lc, find_all_inheritors(relid, NoLock, NULL))
			{
				Oid			table = IndexGetRelation(lfirst_oid(lc), true);

				if (OidIsValid(table) && spindle_relid_is_facade(table))
					return table;
			}
			return InvalidOid;
		case REINDEX_OBJECT_TABLE:
			relid = RangeVarGetRelid(stmt->relation, NoLock, true);
			if (!OidIsValid(relid))
				return InvalidOid;
			/* partitions only: never the inheritance children */
			if (get_rel_relkind(relid) != RELKIND_PARTITIONED_TABLE)
				return spindle_relid_is_facade(relid) && rel_has_index(relid) ?
					relid : InvalidOid;
			foreach(lc, facades_among_inheritors(relid))
				if (rel_has_index(lfirst_oid(lc)))
					return lfirst_oid(lc);
			return InvalidOid;
		case REINDEX_OBJECT_SCHEMA:
			relid = get_namespace_oid(stmt->name, true);
			return OidIsValid(relid) ? facade_with_index_in(relid) : InvalidOid;
		case REINDEX_OBJECT_DATABASE:
			if (stmt->name != NULL &&
				strcmp(stmt->name, get_database_name(MyDatabaseId)) != 0)
				return InvalidOid;
			return facade_with_index_in(InvalidOid);
		default:
			return InvalidOid;	/* SYSTEM: catalogs only */
	}
}

/*
 * REINDEX: refuse CONCURRENTLY when it would reach an index of a spindle
 * table.  Reads the catalogs without locking.
 */
void
spindle_check_reindex(ReindexStmt *stmt)
{
	bool		concurrently = false;
	ListCell   *lc;
	Oid			facade;

	/* the option as ExecReindex reads it */
	foreach(lc, stmt->params)
	{
		DefElem    *opt = lfirst_node(DefElem, lc);

		if (strcmp(opt->defname, "concurrently") == 0)
			concurrently = defGetBoolean(opt);
	}
	if (!concurrently || !OidIsValid(spindle_facade_am_oid()))
		return;
	facade = reindex_reaches_facade(stmt);
	if (!OidIsValid(facade))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("REINDEX CONCURRENTLY is not supported on spindle tables"),
			 errdetail("It would reindex the indexes of spindle table \"%s\".",
					   get_rel_name(facade)),
			 (stmt->kind == REINDEX_OBJECT_SCHEMA ||
			  stmt->kind == REINDEX_OBJECT_DATABASE) ?
			 errhint("Use REINDEX without CONCURRENTLY for spindle tables, and REINDEX TABLE CONCURRENTLY for the other tables.") :
			 errhint("Use REINDEX without CONCURRENTLY.")));
}

/*
 * The name of relid if it is a spindle (a relation of access method
 * spindle_segment, pg_spindle.s<table>_<n>) that the current role owns (a
 * superuser owns everything); NULL otherwise.  Statements naming a spindle
 * itself are refused to such roles; others hear core's own error.
 */
static char *
owned_spindle_name(Oid relid)
{
	HeapTuple	tup;
	Oid			segam;
	char	   *name = NULL;

	if (!OidIsValid(relid) || !OidIsValid(spindle_facade_am_oid()))
		return NULL;			/* the extension is not installed here */
	segam = get_am_oid("spindle_segment", true);
	if (!OidIsValid(segam))
		return NULL;
	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tup))
		return NULL;
	if (((Form_pg_class) GETSTRUCT(tup))->relam == segam &&
		pg_class_ownercheck(relid, GetUserId()))
		name = pstrdup(NameStr(((Form_pg_class) GETSTRUCT(tup))->relname));
	ReleaseSysCache(tup);
	return name;
}

/*
 * TRUNCATE naming a spindle itself would empty it behind its table's slot
 * map, as refused DML would change it (segment_am.c, refuse_direct_dml).
 * A spindle table's own TRUNCATE drops its spindles without such a
 * statement.
 */
static void
refuse_truncate_of_spindle(Oid relid)
{
	char	   *name = owned_spindle_name(relid);

	if (name != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("cannot truncate spindle \"%s\" directly", name),
				 errdetail("A spindle holds the events of a spindle table and is changed only through it."),
				 errhint("Truncate its spindle table, or delete the events through it.")));
}

/*
 * DROP TABLE naming a spindle itself would take its events from its table
 * behind the directory's back.  A spindle table's DROP and the worker drop
 * spindles by dependency or performDeletion, never by name.
 */
void
spindle_refuse_drop_of_spindles(DropStmt *stmt)
{
	ListCell   *lc;

	if (stmt->removeType != OBJECT_TABLE)
		return;
	foreach(lc, stmt->objects)
	{
		RangeVar   *rv = makeRangeVarFromNameList((List *) lfirst(lc));
		char	   *name = owned_spindle_name(RangeVarGetRelid(rv, NoLock, true));

		if (name != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_WRONG_OBJECT_TYPE),
					 errmsg("cannot drop spindle \"%s\" directly", name),
					 errdetail("A spindle holds the events of a spindle table and is dropped only through it."),
					 errhint("Delete or purge its events through its spindle table; spindle.drop_spindles() and the worker drop it then.")));
	}
}

/* The refusal of other DDL naming spindle relid itself (what: the command). */
static void
refuse_ddl_of_spindle_oid(Oid relid, const char *what)
{
	char	   *name = owned_spindle_name(relid);

	if (name != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("cannot run %s on spindle \"%s\" directly", what, name),
				 errdetail("A spindle holds the events of a spindle table: its columns, storage, indexes, triggers, rules, policies and privileges follow its table, and a change made to it alone would not be seen through the table."),
				 errhint("Run the command on its spindle table.")));
}

/* The same for a spindle named by rv. */
static void
refuse_ddl_of_spindle(const RangeVar *rv, const char *what)
{
	if (rv != NULL)
		refuse_ddl_of_spindle_oid(RangeVarGetRelid(rv, NoLock, true), what);
}

/* ----------------------------------------------------------------
 * Objects depending on a spindle
 *
 * A spindle is dropped whole (by spindle.drop_spindles(), the worker, or
 * TRUNCATE or DROP of its table) once its events are gone, and the drop
 * fails with 2BP01 while any other object depends on it: the spindle
 * then stays, its table grows without bound, and the worker retries it
 * for ever.  Naming a spindle in a view, a materialized view, a rule, a
 * policy, a trigger's WHEN, an index or a column's default, check or
 * generation expression, or an SQL-standard function body records such a
 * dependency, and so does any use of its row type (or that type's array
 * type) as the type of a column, a composite attribute, a domain, a range,
 * a cast or a function's argument or result.  All of them are refused
 * with 42809.
 *
 * How: the object access hook lists every object created or altered
 * (OAT_POST_CREATE, OAT_POST_ALTER) while a utility statement runs, and
 * when the statement is done, the dependencies those objects recorded are
 * read from pg_depend by dependent (the pg_depend_depender_index, one
 * index scan per object); one whose referenced object is a spindle or the
 * row type or array type of one fails the statement, which rolls back
 * all of it.  A new index is checked at once instead (CREATE INDEX
 * CONCURRENTLY commits it before the statement ends).  Chosen over
 * checking parse trees (post_parse_analyze, or per statement type)
 * because it sees exactly what makes the drop fail, whatever the path:
 * each statement type stores its expressions differently, and types are
 * named outside any range table.  It costs
 * nothing for statements that create no object, and one index scan per
 * created object for the others; plain SELECT and EXPLAIN of a spindle,
 * and function bodies kept as strings, record nothing and stay allowed.
 * A spindle's own objects (its row type and array type, its TOAST table)
 * depend on it internally and are not refused; a publication's entry
 * for a spindle is left to publication.c, which refuses it (0A000) after
 * core ran the statement, with a hint of its own.  Objects made by C code
 * outside any utility statement are not seen; spindle's own creation of
 * spindles is the only such code that names a spindle.  The other way
 * round, a spindle made to depend on another object (a partition of a
 * table, a member of an extension) is refused by name in
 * spindle_refuse_spindle_ddl.
 * ----------------------------------------------------------------
 */

/* The segment access method's OID, InvalidOid if not installed here. */
static Oid
segment_am_if_installed(void)
{
	if (!OidIsValid(spindle_facade_am_oid()))
		return InvalidOid;
	return get_am_oid("spindle_segment", true);
}

/* relid if it is a spindle (of access method segam), else InvalidOid */
static Oid
spindle_relid(Oid relid, Oid segam)
{
	HeapTuple	tup;
	Oid			result = InvalidOid;

	if (!OidIsValid(relid) || !OidIsValid(segam))
		return InvalidOid;
	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (HeapTupleIsValid(tup))
	{
		if (((Form_pg_class) GETSTRUCT(tup))->relam == segam)
			result = relid;
		ReleaseSysCache(tup);
	}
	return result;
}

/*
 * The spindle whose row type typid is, or the element type of typid if it
 * is an array type; InvalidOid if none.
 */
static Oid
spindle_of_type(Oid typid)
{
	Oid			segam = segment_am_if_installed();
	HeapTuple	tup;
	Oid			relid = InvalidOid;

	if (!OidIsValid(typid) || !OidIsValid(segam))
		return InvalidOid;
	tup = SearchSysCache1(TYPEOID, ObjectIdGetDatum(typid));
	if (!HeapTupleIsValid(tup))
		return InvalidOid;
	relid = ((Form_pg_type) GETSTRUCT(tup))->typrelid;
	if (!OidIsValid(relid) && IsTrueArrayType((Form_pg_type) GETSTRUCT(tup)))
		relid = get_typ_typrelid(((Form_pg_type) GETSTRUCT(tup))->typelem);
	ReleaseSysCache(tup);
	return spindle_relid(relid, segam);
}

/* The spindle table a spindle belongs to (its AUTO dependency), or NULL. */
static char *
facade_name_of_spindle(Oid spindle)
{
	Relation	depRel = table_open(DependRelationId, AccessShareLock);
	ScanKeyData key[2];
	SysScanDesc scan;
	HeapTuple	tup;
	char	   *result = NULL;

	ScanKeyInit(&key[0], Anum_pg_depend_classid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(RelationRelationId));
	ScanKeyInit(&key[1], Anum_pg_depend_objid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(spindle));
	scan = systable_beginscan(depRel, DependDependerIndexId, true, NULL,
							  2, key);
	while (result == NULL && (tup = systable_getnext(scan)) != NULL)
	{
		Form_pg_depend dep = (Form_pg_depend) GETSTRUCT(tup);

		if (dep->refclassid == RelationRelationId &&
			dep->deptype == DEPENDENCY_AUTO && spindle_relid_is_facade(dep->refobjid))
			result = get_rel_name(dep->refobjid);
	}
	systable_endscan(scan);
	table_close(depRel, AccessShareLock);
	return result;
}

/*
 * How to name the dependent object in the error: a view rather than its
 * _RETURN rule, else as core describes it.
 */
static char *
describe_dependent(const ObjectAddress *object)
{
	if (object->classId == RewriteRelationId)
	{
		Relation	rewrite = table_open(RewriteRelationId, AccessShareLock);
		ScanKeyData key;
		SysScanDesc scan;
		HeapTuple	tup;
		Oid			view = InvalidOid;

		ScanKeyInit(&key, Anum_pg_rewrite_oid, BTEqualStrategyNumber,
					F_OIDEQ, ObjectIdGetDatum(object->objectId));
		scan = systable_beginscan(rewrite, RewriteOidIndexId, true, NULL,
								  1, &key);
		tup = systable_getnext(scan);
		if (HeapTupleIsValid(tup) &&
			((Form_pg_rewrite) GETSTRUCT(tup))->ev_type == '0' + CMD_SELECT)
			view = ((Form_pg_rewrite) GETSTRUCT(tup))->ev_class;
		systable_endscan(scan);
		table_close(rewrite, AccessShareLock);
		if (OidIsValid(view))
		{
			ObjectAddress addr;

			ObjectAddressSet(addr, RelationRelationId, view);
			return getObjectDescription(&addr, true);
		}
	}
	return getObjectDescription(object, true);
}

static void
refuse_dependency_on_spindle(const ObjectAddress *dependent, Oid spindle)
{
	char	   *desc = describe_dependent(dependent);
	char	   *name = get_rel_name(spindle);
	char	   *facade = facade_name_of_spindle(spindle);

	ereport(ERROR,
			(errcode(ERRCODE_WRONG_OBJECT_TYPE),
			 errmsg("cannot make %s depend on spindle \"%s\"",
					desc ? desc : "an object", name ? name : "?"),
			 errdetail("A spindle is dropped once its events are purged; an object depending on it or on its row type would make every drop of it fail, and its spindle table would grow without bound."),
			 facade ?
			 errhint("Name the spindle table \"%s\" instead.", facade) :
			 errhint("Name its spindle table instead.")));
}

/*
 * Refuse a dependency that object (classId, objectId), any of its columns
 * included, records on a spindle or its row type.  snapshot: NULL for the
 * catalog snapshot, SnapshotSelf to see what the current command wrote.
 */
static void
refuse_dependencies_of(Relation depRel, Oid classId, Oid objectId,
					   Snapshot snapshot, Oid segam)
{
	ScanKeyData key[2];
	SysScanDesc scan;
	HeapTuple	tup;

	ScanKeyInit(&key[0], Anum_pg_depend_classid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(classId));
	ScanKeyInit(&key[1], Anum_pg_depend_objid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(objectId));
	scan = systable_beginscan(depRel, DependDependerIndexId, true, snapshot,
							  2, key);
	while ((tup = systable_getnext(scan)) != NULL)
	{
		Form_pg_depend dep = (Form_pg_depend) GETSTRUCT(tup);
		Oid			spindle = InvalidOid;

		/* a spindle's row type and TOAST table are its own */
		if (dep->deptype == DEPENDENCY_INTERNAL)
			continue;
		/* publication.c refuses publishing a spindle, with its own hint */
		if (dep->classid == PublicationRelRelationId)
			continue;
		if (dep->refclassid == RelationRelationId)
			spindle = spindle_relid(dep->refobjid, segam);
		else if (dep->refclassid == TypeRelationId)
			spindle = spindle_of_type(dep->refobjid);
		if (OidIsValid(spindle))
		{
			ObjectAddress dependent;

			dependent.classId = dep->classid;
			dependent.objectId = dep->objid;
			dependent.objectSubId = dep->objsubid;
			/* to describe what the current command made */
			CommandCounterIncrement();
			refuse_dependency_on_spindle(&dependent, spindle);
		}
	}
	systable_endscan(scan);
}

/*
 * The dependencies that the objects listed from position `from` of
 * new_objects on have recorded: refuse one on a spindle or its row type.
 */
static void
refuse_new_dependencies_on_spindles(int from)
{
	Relation	depRel;
	Oid			segam;
	int			i;

	if (list_length(new_objects) <= from || !IsTransactionState())
		return;
	segam = segment_am_if_installed();
	if (!OidIsValid(segam))
		return;
	/* see what the statement wrote last */
	CommandCounterIncrement();
	depRel = table_open(DependRelationId, AccessShareLock);
	for (i = from; i < list_length(new_objects); i++)
	{
		NewObject  *obj = (NewObject *) list_nth(new_objects, i);
		Oid			objectId = obj->objectId;

		/* StoreAttrDefault tells the column, not the pg_attrdef row */
		if (obj->classId == AttrDefaultRelationId)
			objectId = GetAttrDefaultOid(objectId, (AttrNumber) obj->subId);
		if (OidIsValid(objectId))
			refuse_dependencies_of(depRel, obj->classId, objectId, NULL, segam);
	}
	table_close(depRel, AccessShareLock);
}

/*
 * A new index, checked at once: CREATE INDEX CONCURRENTLY commits its
 * catalog entries before it builds the index, long before the statement
 * ends.  index_create records the dependencies before it calls the hook.
 */
static void
refuse_new_index_on_spindle(Oid relid)
{
	Relation	rel = RelationIdGetRelation(relid);
	bool		is_index = false;
	Oid			segam;

	if (rel != NULL)
	{
		is_index = rel->rd_rel->relkind == RELKIND_INDEX;
		RelationClose(rel);
	}
	if (!is_index)
		return;
	segam = segment_am_if_installed();
	if (OidIsValid(segam))
	{
		Relation	depRel = table_open(DependRelationId, AccessShareLock);

		refuse_dependencies_of(depRel, RelationRelationId, relid,
							   SnapshotSelf, segam);
		table_close(depRel, AccessShareLock);
	}
}

/* Remember an object created or altered by the running utility statement. */
static void
note_new_object(Oid classId, Oid objectId, int subId)
{
	MemoryContext oldcxt;
	NewObject  *obj;

	if (new_objects != NIL)
	{
		NewObject  *last = (NewObject *) llast(new_objects);

		/* ALTER TABLE reports a table once per subcommand */
		if (last->classId == classId && last->objectId == objectId &&
			last->subId == subId)
			return;
	}
	if (new_objects_cxt == NULL)
		new_objects_cxt = AllocSetContextCreate(TopMemoryContext,
												"spindle new objects",
												ALLOCSET_SMALL_SIZES);
	oldcxt = MemoryContextSwitchTo(new_objects_cxt);
	obj = palloc(sizeof(NewObject));
	obj->classId = classId;
	obj->objectId = objectId;
	obj->subId = subId;
	new_objects = lappend(new_objects, obj);
	MemoryContextSwitchTo(oldcxt);
}

/* Forget the objects a finished utility statement listed. */
static void
forget_new_objects(int from)
{
	if (utility_depth == 0)
	{
		new_objects = NIL;
		if (new_objects_cxt != NULL)
			MemoryContextReset(new_objects_cxt);
	}
	else if (list_length(new_objects) > from)
		new_objects = list_truncate(new_objects, from);
}

/*
 * Refuse a statement that names a spindle itself (before core runs it):
 * ALTER, RENAME, SET SCHEMA, CREATE INDEX / TRIGGER / RULE / POLICY,
 * GRANT, ATTACH PARTITION and ALTER EXTENSION ... ADD (of a spindle or its
 * row type) naming a spindle itself (REVOKE, COMMENT and LOCK change
 * nothing a reader of the table relies on and stay allowed).  A
 * superuser's ALTER TABLE of a spindle was accepted and left it at odds
 * with its table (spindle.verify() reported it); GRANT on one let a role
 * read events its table's privileges deny; a partition's or an extension
 * member's drop alone fails or reads its events through another table.
 */
void
spindle_refuse_spindle_ddl(Node *parsetree)
{
	ListCell   *lc;

	switch (nodeTag(parsetree))
	{
		case T_AlterTableStmt:
			if (((AlterTableStmt *) parsetree)->objtype == OBJECT_TABLE)
				refuse_ddl_of_spindle(((AlterTableStmt *) parsetree)->relation,
									  "ALTER TABLE");
			/* a spindle as a parent: see T_CreateStmt */
			foreach(lc, ((AlterTableStmt *) parsetree)->cmds)
			{
				AlterTableCmd *cmd = lfirst_node(AlterTableCmd, lc);

				if (cmd->subtype == AT_AddInherit && cmd->def != NULL &&
					IsA(cmd->def, RangeVar))
					refuse_ddl_of_spindle((RangeVar *) cmd->def,
										  "ALTER TABLE ... INHERIT");
				/* a partition's events would be read through its parent */
				if (cmd->subtype == AT_AttachPartition && cmd->def != NULL)
					refuse_ddl_of_spindle(((PartitionCmd *) cmd->def)->name,
										  "ALTER TABLE ... ATTACH PARTITION");
			}
			break;
		case T_AlterExtensionContentsStmt:
			{
				/*
				 * An extension's member is dropped only with it: core
				 * refuses to drop the spindle (or its row type) alone.
				 */
				AlterExtensionContentsStmt *stmt =
				(AlterExtensionContentsStmt *) parsetree;

				if (stmt->action <= 0)
					break;
				if (stmt->objtype == OBJECT_TABLE)
				{
					List	   *names = (List *) stmt->object;

					refuse_ddl_of_spindle(makeRangeVarFromNameList(names),
										  "ALTER EXTENSION ... ADD");
				}
				else if (stmt->objtype == OBJECT_TYPE)
				{
					TypeName   *tn = (TypeName *) stmt->object;
					Oid			typid = LookupTypeNameOid(NULL, tn, true);

					refuse_ddl_of_spindle_oid(spindle_of_type(typid),
											  "ALTER EXTENSION ... ADD");
				}
				break;
			}
		case T_CreateForeignTableStmt:
		case T_CreateStmt:

			/*
			 * A child would depend on the spindle: its drop (by the worker,
			 * DROP or TRUNCATE of its table) then fails for good.
			 */
			foreach(lc, ((CreateStmt *) parsetree)->inhRelations)
				refuse_ddl_of_spindle(lfirst_node(RangeVar, lc),
									  "CREATE TABLE ... INHERITS");
			break;
		case T_RenameStmt:
			refuse_ddl_of_spindle(((RenameStmt *) parsetree)->relation,
								  "ALTER ... RENAME");
			break;
		case T_AlterObjectSchemaStmt:
			refuse_ddl_of_spindle(((AlterObjectSchemaStmt *) parsetree)->relation,
								  "ALTER ... SET SCHEMA");
			break;
		case T_IndexStmt:
			refuse_ddl_of_spindle(((IndexStmt *) parsetree)->relation,
								  "CREATE INDEX");
			break;
		case T_CreateTrigStmt:
			refuse_ddl_of_spindle(((CreateTrigStmt *) parsetree)->relation,
								  "CREATE TRIGGER");
			break;
		case T_RuleStmt:
			refuse_ddl_of_spindle(((RuleStmt *) parsetree)->relation,
								  "CREATE RULE");
			break;
		case T_CreatePolicyStmt:
			refuse_ddl_of_spindle(((CreatePolicyStmt *) parsetree)->table,
								  "CREATE POLICY");
			break;
		case T_GrantStmt:
			{
				GrantStmt  *stmt = (GrantStmt *) parsetree;

				if (!stmt->is_grant || stmt->objtype != OBJECT_TABLE)
					break;
				if (stmt->targtype == ACL_TARGET_OBJECT)
					foreach(lc, stmt->objects)
						refuse_ddl_of_spindle(lfirst_node(RangeVar, lc), "GRANT");
				else if (stmt->targtype == ACL_TARGET_ALL_IN_SCHEMA)
					foreach(lc, stmt->objects)
						if (strcmp(strVal(lfirst(lc)), "pg_spindle") == 0)
							ereport(ERROR,
									(errcode(ERRCODE_WRONG_OBJECT_TYPE),
									 errmsg("cannot run GRANT on every spindle at once"),
									 errdetail("Schema pg_spindle holds the spindles of every spindle table; their privileges follow their tables."),
									 errhint("Grant the privileges on the spindle tables.")));
				break;
			}
		default:
			break;
	}
}

/*
 * The spindle tables a TRUNCATE may empty, found as ExecuteTruncate finds
 * what it truncates: the named tables, every table inheriting from one
 * named without ONLY (partitions included), and with CASCADE every table
 * referencing one of those through a foreign key, transitively.  Reads the
 * catalogs without locking; after the statement, only those core locked
 * were truncated.
 */
List *
spindle_truncate_targets(TruncateStmt *stmt)
{
	List	   *relids = NIL;
	List	   *result = NIL;
	ListCell   *lc;

	foreach(lc, stmt->relations)
	{
		RangeVar   *rv = lfirst_node(RangeVar, lc);
		Oid			relid = RangeVarGetRelid(rv, NoLock, true);

		if (!OidIsValid(relid))
			continue;
		if (rv->inh)
			relids = list_concat_unique_oid(relids,
											find_all_inheritors(relid, NoLock, NULL));
		else
			relids = list_append_unique_oid(relids, relid);
	}
	if (stmt->behavior == DROP_CASCADE)
	{
		for (;;)
		{
			/* only relations not in relids yet: this ends */
			List	   *more = heap_truncate_find_FKs(relids);

			if (more == NIL)
				break;
			relids = list_concat(relids, more);
		}
	}
	foreach(lc, relids)
	{
		Oid			relid = lfirst_oid(lc);

		refuse_truncate_of_spindle(relid);
		if (spindle_relid_is_facade(relid))
			result = lappend_oid(result, relid);
	}
	return result;
}

/*
 * Would a table created as rv be temporary?  TEMP says so, and so does a
 * name in pg_temp, or a search_path whose first entry is pg_temp: core
 * makes those temporary after us (RangeVarAdjustRelationPersistence).
 */
static bool
creates_temp_table(const RangeVar *rv)
{
	if (rv->relpersistence == RELPERSISTENCE_TEMP)
		return true;
	return isAnyTempNamespace(RangeVarGetCreationNamespace(rv));
}

/* ----------------------------------------------------------------
 * What the utility hook asks of spindle tables
 *
 * The utility hook (admin/utility.c) tells which statements concern
 * spindle tables and runs them; the functions below decide what such a
 * statement may do to a spindle table and what its options become, before
 * core runs it (spindle_prepare_*, spindle_check_*) and after
 * (spindle_*_finish, spindle_check_altered, spindle_check_attached,
 * spindle_truncated).
 * ----------------------------------------------------------------
 */

/*
 * A temporary table would be a spindle table: refused if the statement
 * says USING spindle (*am not NULL).  One made under
 * default_table_access_method = spindle (no USING) is made in heap
 * instead: *am is set to "heap" in the statement (the hook's own copy of
 * it), as if it said USING heap.  Spindle tables cannot be temporary, and
 * core makes temporary tables of its own (REFRESH MATERIALIZED VIEW
 * CONCURRENTLY's diff table) under whatever default the session has.
 */
static void
temp_table_not_spindle(char **am)
{
	if (*am != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("temporary spindle tables are not supported"),
				 errhint("Leave out USING spindle: a temporary table made under default_table_access_method = spindle is a heap table.")));
	*am = pstrdup("heap");
}

/*
 * Does CREATE TABLE stmt make a spindle table?  If so, refuse what a
 * spindle table cannot be (a partition of a table with a BRIN index; a
 * temporary table, made in heap instead if USING was not given, see
 * temp_table_not_spindle), take spindle's options out of stmt->options
 * and return true with them, validated, in *options.  Reads the catalogs
 * without locking.
 */
bool
spindle_prepare_create(CreateStmt *stmt, List **options)
{
	/* a partitioned table has no access method of its own */
	if (stmt->partspec != NULL || !am_is_spindle(stmt->accessMethod) ||
		spindle_facade_am_oid() == InvalidOid)
		return false;
	if (creates_temp_table(stmt->relation))
	{
		temp_table_not_spindle(&stmt->accessMethod);
		return false;
	}
	/* a partition gets its parent's indexes */
	if (stmt->partbound != NULL && stmt->inhRelations != NIL)
	{
		RangeVar   *parent = linitial_node(RangeVar, stmt->inhRelations);
		Oid			parentid = RangeVarGetRelid(parent, NoLock, true);

		if (OidIsValid(parentid) && rel_has_brin_index(parentid))
			refuse_brin(stmt->relation->relname, parent->relname);
	}
	*options = extract_options(&stmt->options, false);
	return true;
}

/* The same for CREATE TABLE AS (never a materialized view: refused). */
bool
spindle_prepare_create_as(CreateTableAsStmt *stmt, List **options)
{
	if (!am_is_spindle(stmt->into->accessMethod) ||
		spindle_facade_am_oid() == InvalidOid)
		return false;
	if (stmt->objtype == OBJECT_MATVIEW)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("materialized views cannot use access method \"spindle\"")));
	if (creates_temp_table(stmt->into->rel))
	{
		temp_table_not_spindle(&stmt->into->accessMethod);
		return false;
	}
	*options = extract_options(&stmt->into->options, false);
	return true;
}

/*
 * ALTER MATERIALIZED VIEW: SET ACCESS METHOD spindle is refused as CREATE
 * MATERIALIZED VIEW ... USING spindle is.  The rewrite would make a
 * relation of kind 'm' with spindle's routine and none of a spindle
 * table's hidden columns, that could be neither read nor refreshed.
 */
void
spindle_check_alter_matview(AlterTableStmt *stmt)
{
	ListCell   *lc;

	foreach(lc, stmt->cmds)
	{
		AlterTableCmd *cmd = lfirst_node(AlterTableCmd, lc);

		if (cmd->subtype == AT_SetAccessMethod && am_is_spindle(cmd->name))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("materialized views cannot use access method \"spindle\""),
					 errhint("Keep the materialized view in heap, or make a spindle table of its query with CREATE TABLE ... USING spindle AS.")));
	}
}

/*
 * A CREATE of a spindle table is about to run with these options: the
 * object access hook learns the new table's OID meanwhile, and its
 * options are those until spindle_create_finish writes them.  Statements
 * run as its subcommands (its indexes) leave this state alone.  The state
 * of a CREATE this one is nested in is saved in *outer, for
 * spindle_create_end to restore.
 */
void
spindle_create_begin(List *options, SpindleCreateState *outer)
{
	*outer = pending;
	pending.active = true;
	pending.relid = InvalidOid;
	pending.options = options;
}

/*
 * The CREATE ran, or failed: the next relation made is not its table.
 * Its state goes to *mine (for spindle_create_finish) and the state of the
 * CREATE it was nested in, if any, is restored from *outer.  Called in
 * PG_FINALLY: it must not fail.
 */
void
spindle_create_end(const SpindleCreateState *outer, SpindleCreateState *mine)
{
	*mine = pending;
	mine->active = false;
	pending = *outer;
}

/*
 * After a CREATE of a spindle table ran (mine is its state, from
 * spindle_create_end): its capacity is fixed now (its option, else the
 * GUC's current value), its options are written, and its first spindle,
 * open, is made.  Takes the new table in ACCESS EXCLUSIVE mode (it is the
 * caller's own, not yet visible to others).
 */
void
spindle_create_finish(SpindleCreateState *mine)
{
	Oid			relid = mine->relid;
	List	   *options = mine->options;
	bool		found = false;
	Relation	rel;
	ListCell   *lc;

	mine->relid = InvalidOid;
	mine->options = NIL;
	if (!OidIsValid(relid))
		return;
	/* the capacity is fixed now: the option, else the GUC */
	foreach(lc, options)
		if (strcmp(lfirst_node(DefElem, lc)->defname, OPT_CAPACITY) == 0)
			found = true;
	if (!found)
		options = lappend(options, capacity_from_guc());
	write_options(relid, options);
	rel = relation_open(relid, AccessExclusiveLock);
	/* a BRIN index a parent created since the check above */
	if (rel_has_brin_index(relid))
		refuse_brin(RelationGetRelationName(rel),
					get_rel_name(get_partition_parent(relid, true)));
	/* an empty table's first spindle is open */
	(void) spindle_create_spindles(rel, 1, true);
	relation_close(rel, NoLock);
}

/*
 * ALTER TABLE / ALTER FOREIGN TABLE / ALTER TYPE of relid, a relation
 * that is not itself a spindle table: refuse what would reach a spindle
 * table through it (refuse_alter_through_parent), turning a table into a
 * spindle table, and attaching a spindle partition to a table with a
 * BRIN index.  Returns the spindle tables an ATTACH PARTITION attaches,
 * for spindle_check_attached once it ran.  Locks nothing.
 */
List *
spindle_prepare_alter_other(AlterTableStmt *stmt, Oid relid)
{
	List	   *attached = NIL;
	ListCell   *lc;

	refuse_alter_through_parent(stmt, relid);
	if (stmt->objtype != OBJECT_TABLE)
		return NIL;
	foreach(lc, stmt->cmds)
	{
		AlterTableCmd *cmd = lfirst_node(AlterTableCmd, lc);

		/* never turn an existing table into a spindle table */
		if (cmd->subtype == AT_SetAccessMethod && am_is_spindle(cmd->name))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot change the access method of table \"%s\" to spindle",
							stmt->relation->relname),
					 errhint("Create a spindle table and copy the rows with INSERT ... SELECT.")));
		/* a partitioned table's BRIN indexes reach its partitions */
		if (cmd->subtype == AT_AttachPartition)
		{
			PartitionCmd *pc = (PartitionCmd *) cmd->def;
			Oid			child = RangeVarGetRelid(pc->name, NoLock, true);
			Oid			facade = OidIsValid(child) ?
			facade_among_inheritors(child) : InvalidOid;

			if (OidIsValid(facade) && rel_has_brin_index(relid))
				refuse_brin(get_rel_name(facade), stmt->relation->relname);
			if (OidIsValid(facade))
				attached = list_concat(attached,
									   facades_among_inheritors(child));
		}
	}
	return attached;
}

/* Does this ALTER TABLE set or reset one of spindle's options? */
bool
spindle_alter_sets_options(AlterTableStmt *stmt)
{
	ListCell   *lc;

	foreach(lc, stmt->cmds)
	{
		AlterTableCmd *cmd = lfirst_node(AlterTableCmd, lc);
		ListCell   *lc2;

		if (cmd->subtype != AT_SetRelOptions && cmd->subtype != AT_ResetRelOptions)
			continue;
		foreach(lc2, (List *) cmd->def)
			if (is_spindle_option(lfirst_node(DefElem, lc2)))
				return true;
	}
	return false;
}

/*
 * Does this ALTER TABLE set or reset any storage parameter (spindle's or
 * core's)?  Then core re-validates the table's stored options, and
 * spindle's must be hidden from it while it runs.
 */
bool
spindle_alter_sets_storage_params(AlterTableStmt *stmt)
{
	ListCell   *lc;

	foreach(lc, stmt->cmds)
	{
		AlterTableCmd *cmd = lfirst_node(AlterTableCmd, lc);

		if (cmd->subtype == AT_SetRelOptions ||
			cmd->subtype == AT_ResetRelOptions)
			return true;
	}
	return false;
}

/*
 * ALTER TABLE of spindle table relid, which the caller owns and holds in
 * the mode the statement needs (ShareRowExclusiveLock if it sets spindle's
 * options, ShareUpdateExclusiveLock if it sets or resets only core's
 * storage parameters): refuse what would rewrite it and take spindle's
 * options out of SET/RESET.  Returns those options (NIL if none).  If the
 * statement sets or resets any storage parameter, *saved holds the spindle
 * options stored for the table, hidden from core (which validates the
 * stored options against heap's list, and would refuse ours as
 * unrecognized) until spindle_alter_finish writes them back, changed by
 * what the statement gave, and *hidden is true.
 */
List *
spindle_prepare_alter(AlterTableStmt *stmt, Oid relid, bool isTopLevel,
					  List **saved, bool *hidden)
{
	Relation	rel = relation_open(relid, NoLock);
	bool		changed = false;
	List	   *opts;

	opts = prepare_alter(stmt, rel, &changed, isTopLevel);
	relation_close(rel, NoLock);
	*saved = NIL;
	*hidden = spindle_alter_sets_storage_params(stmt);
	if (!*hidden)
		return NIL;
	*saved = stored_spindle_options(relid);
	write_options(relid, NIL);
	return opts;
}

/*
 * After the ALTER TABLE of spindle_prepare_alter ran: write the options
 * saved there with opts applied (RESET of the capacity gives the GUC's
 * current value) and, if the capacity changed, give it to the table's
 * empty spindles.  Core holds the table's lock.
 */
void
spindle_alter_finish(Oid relid, List *opts, List *saved)
{
	List	   *changes = NIL;
	ListCell   *lc;
	bool		capacity_changed = false;

	foreach(lc, opts)
	{
		DefElem    *def = lfirst_node(DefElem, lc);

		if (strcmp(def->defname, OPT_CAPACITY) == 0)
		{
			/* RESET gives the table the GUC's current value */
			if (def->arg == NULL)
				def = capacity_from_guc();
			capacity_changed = true;
		}
		changes = lappend(changes, def);
	}
	write_options(relid, apply_changes(saved, changes));
	if (capacity_changed)
	{
		bool		found;
		int64		cap = spindle_rel_capacity_option(relid, &found);
		Relation	rel = relation_open(relid, NoLock);

		spindle_catalog_set_capacity_of_empty(rel, cap);
		relation_close(rel, NoLock);
	}
}

/*
 * After an ALTER of relid ran: whatever the checks before saw, the spindle
 * tables it reached (relid and its inheritors), now that it holds their
 * locks (a partition created while it waited was not there to check),
 * must still match their spindles.
 */
void
spindle_check_altered(Oid relid)
{
	ListCell   *lc;

	foreach(lc, facades_among_inheritors(relid))
		spindle_check_spindles_match(lfirst_oid(lc));
}

/*
 * After an ATTACH PARTITION ran: the spindle tables core attached to
 * `parent` now hold the lock it took; check again that no BRIN index
 * reached them (one may have been made on the parent after the check of
 * spindle_prepare_alter_other).
 */
void
spindle_check_attached(List *attached, const char *parent)
{
	ListCell   *lc;

	foreach(lc, attached)
		if (CheckRelationOidLockedByMe(lfirst_oid(lc), ShareLock, true) &&
			rel_has_brin_index(lfirst_oid(lc)))
			refuse_brin(get_rel_name(lfirst_oid(lc)), parent);
}

/*
 * CREATE INDEX: refuse a BRIN index on a spindle table, or one that a
 * partitioned table would give a spindle partition, and CREATE INDEX
 * CONCURRENTLY of a spindle table.  Reads the catalogs without locking.
 */
void
spindle_check_create_index(IndexStmt *stmt)
{
	Oid			relid = RangeVarGetRelid(stmt->relation, NoLock, true);
	bool		brin = stmt->accessMethod &&
	strcmp(stmt->accessMethod, "brin") == 0;

	/* a partitioned table's index is made on every partition */
	if (OidIsValid(relid) && brin && stmt->relation->inh &&
		get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE)
	{
		Oid			facade = facade_among_inheritors(relid);

		if (OidIsValid(facade))
			refuse_brin(get_rel_name(facade), stmt->relation->relname);
	}
	if (OidIsValid(relid) && spindle_relid_is_facade(relid))
	{
		if (brin)
			refuse_brin(stmt->relation->relname, NULL);
		if (stmt->concurrent)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("CREATE INDEX CONCURRENTLY is not supported on spindle tables"),
					 errhint("Use CREATE INDEX without CONCURRENTLY.")));
	}
}

/*
 * After a TRUNCATE ran: every spindle table of relids (from
 * spindle_truncate_targets) that it emptied, which core holds in ACCESS
 * EXCLUSIVE mode now, gets its open spindle back (numbered as the old
 * storage's first was, if that never gave a number to an event:
 * spindle_truncate_untouched).
 */
void
spindle_truncated(List *relids)
{
	ListCell   *lc;

	foreach(lc, relids)
	{
		Oid			relid = lfirst_oid(lc);
		Relation	rel;

		if (!CheckRelationOidLockedByMe(relid, AccessExclusiveLock, false))
			continue;			/* not truncated after all */
		rel = relation_open(relid, NoLock);
		if (spindle_is_facade(rel))
		{
			int64		first_no;

			if (spindle_truncate_untouched(relid, &first_no))
				spindle_create_spindle_at(rel, first_no);
			else
				(void) spindle_create_spindles(rel, 1, true);
		}
		relation_close(rel, NoLock);
	}
}

/*
 * A utility statement starts: list the objects it creates or alters (see
 * "Objects depending on a spindle").  Returns the position from which
 * they are listed, for spindle_new_objects_check and _end.
 */
int
spindle_new_objects_begin(void)
{
	int			from = list_length(new_objects);

	utility_depth++;
	return from;
}

/*
 * The statement ran: refuse a dependency that the objects it listed
 * recorded on a spindle or its row type.  Statements it ran (a
 * procedure's, a DO block's, CREATE SCHEMA's subcommands) checked their
 * own objects when they ended.
 */
void
spindle_new_objects_check(int from)
{
	refuse_new_dependencies_on_spindles(from);
}

/* The statement is done, or failed: forget what it listed. */
void
spindle_new_objects_end(int from)
{
	utility_depth--;
	forget_new_objects(from);
}

/* ----------------------------------------------------------------
 * The object access hook
 * ----------------------------------------------------------------
 */
static void
spindle_object_access(ObjectAccessType access, Oid classId, Oid objectId,
					  int subId, void *arg)
{
	if (prev_object_access)
		prev_object_access(access, classId, objectId, subId, arg);

	/* checked when the statement ends: see spindle_new_objects_check */
	if (utility_depth > 0 &&
		(access == OAT_POST_CREATE || access == OAT_POST_ALTER))
	{
		note_new_object(classId, objectId, subId);
		if (access == OAT_POST_CREATE && classId == RelationRelationId &&
			subId == 0)
			refuse_new_index_on_spindle(objectId);
	}

	if (classId != RelationRelationId)
		return;

	/*
	 * A column added to a spindle table, by whatever path (through a
	 * parent the utility hook could not see coming): it would follow the
	 * hidden columns, and spindles keep their own descriptor.
	 */
	if (subId != 0)
	{
		if (access == OAT_POST_CREATE && !IsBinaryUpgrade &&
			spindle_relid_is_facade(objectId))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot add a column to spindle table \"%s\"",
							get_rel_name(objectId)),
					 errhint("Create a new spindle table and copy the events with INSERT ... SELECT.")));
		return;
	}

	if (access == OAT_POST_CREATE)
	{
		Relation	rel = RelationIdGetRelation(objectId);
		bool		facade = false;

		if (rel != NULL)
		{
			facade = rel->rd_rel->relkind == RELKIND_RELATION &&
				OidIsValid(rel->rd_rel->relam) &&
				rel->rd_rel->relam == spindle_facade_am_oid();
			RelationClose(rel);
		}
		/* every spindle table, however it is made, gets its hidden columns */
		if (facade)
			spindle_add_hidden_columns(objectId);
	}
	if (access == OAT_POST_CREATE && pending.active &&
		!OidIsValid(pending.relid))
	{
		/*
		 * The spindle table of the pending CREATE: not a sequence of one of
		 * its serial columns, made before it, nor an index, made after it.
		 * Its relcache entry exists already; its pg_class row may not yet be
		 * visible to catalog lookups.
		 */
		Relation	rel = RelationIdGetRelation(objectId);

		if (rel != NULL)
		{
			if (rel->rd_rel->relkind == RELKIND_RELATION &&
				rel->rd_rel->relam == spindle_facade_am_oid())
				pending.relid = objectId;
			RelationClose(rel);
		}
	}
	else if (access == OAT_DROP)
	{
		HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(objectId));
		Oid			relam = InvalidOid;

		if (!HeapTupleIsValid(tup))
			return;
		relam = ((Form_pg_class) GETSTRUCT(tup))->relam;
		ReleaseSysCache(tup);
		if (!OidIsValid(relam))
			return;
		if (relam == spindle_facade_am_oid())
		{
			spindle_forget_table(objectId);
			/* its insert total (counters.c); OIDs are reused */
			spindle_counters_forget(objectId);
		}
		else if (relam == get_am_oid("spindle_segment", true))
			spindle_slots_forget(objectId);
	}
}

/* Install the object access hook (at _PG_init). */
void
spindle_options_init(void)
{
	prev_object_access = object_access_hook;
	object_access_hook = spindle_object_access;
}

/* Error out unless the library was loaded at server start. */
void
spindle_check_preloaded(void)
{
	if (!spindle_preloaded)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("spindle must be loaded via shared_preload_libraries"),
				 errhint("Add spindle to shared_preload_libraries in postgresql.conf and restart the server.")));
}

/*
 * ERROR unless every column of spindle table relid still has the type its
 * spindles store (their descriptors were copied from the table's when
 * they were made): a change that reached the table in a way the utility
 * hook could not see coming is rolled back rather than left to corrupt it.
 * The caller holds a lock on the table.
 */
void
spindle_check_spindles_match(Oid relid)
{
	Relation	facade = relation_open(relid, NoLock);
	TupleDesc	td = RelationGetDescr(facade);
	SpindleDirectory *dir = spindle_directory_acquire(facade);
	int			i;

	spindle_check_layout(facade);
	if (dir->nspindles > 0)
	{
		Relation	seg = try_relation_open(dir->spindles[dir->nspindles - 1].segment,
											AccessShareLock);

		if (seg != NULL)
		{
			TupleDesc	sd = RelationGetDescr(seg);
			bool		same = sd->natts == td->natts;

			for (i = 0; same && i < td->natts; i++)
			{
				Form_pg_attribute a = TupleDescAttr(td, i);
				Form_pg_attribute b = TupleDescAttr(sd, i);

				same = a->attisdropped == b->attisdropped &&
					(a->attisdropped || a->atttypid == b->atttypid) &&
					a->attlen == b->attlen && a->attalign == b->attalign &&
					a->attbyval == b->attbyval;
			}
			relation_close(seg, AccessShareLock);
			if (!same)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("spindle table \"%s\" does not support this ALTER TABLE command",
								RelationGetRelationName(facade)),
						 errdetail("Changing the columns of a spindle table would rewrite it."),
						 errhint("Create a new spindle table and copy the events with INSERT ... SELECT.")));
		}
	}
	spindle_directory_release(dir);
	relation_close(facade, NoLock);
}
