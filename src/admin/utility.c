/*-------------------------------------------------------------------------
 *
 * utility.c
 *	  spindle's ProcessUtility hook: every utility statement passes here,
 *	  and those that concern spindle tables or the spindle worker are
 *	  handled by one function each (or per family of statements).
 *
 * The hook decides which statements concern spindle and what runs
 * around them; what a statement may do to a spindle table, and what the
 * table's options become, the table layer decides (table/options.c,
 * spindle_prepare_*, spindle_check_* before core runs the statement, the
 * others after it, in the same transaction):
 *
 *	CREATE TABLE [AS]	spindle's options taken out, the new table's
 *						capacity fixed and its first spindle made; a
 *						queue table gets its consumer relation
 *	ALTER TABLE			spindle's options taken out and written back;
 *						what would rewrite a spindle table refused, also
 *						through a parent or a composite type
 *	ALTER MATERIALIZED VIEW	SET ACCESS METHOD spindle refused
 *	CREATE INDEX		BRIN and CONCURRENTLY refused on spindle tables
 *	REINDEX				CONCURRENTLY refused if it reaches a spindle
 *						table's index (before core builds anything)
 *	TRUNCATE			emptied spindle tables get an open spindle back
 *	DROP, DROP OWNED	spindle tables emptied of their spindles first
 *						(table/detach.c), checked gone afterwards
 *	ALTER TABLE ALL IN TABLESPACE	refused in a transaction block
 *	DROP / CREATE / ALTER DATABASE	the spindle worker connected to the
 *						database leaves while the statement runs
 *
 * Every statement, whatever it is, first has what names a spindle itself
 * refused (spindle_refuse_spindle_ddl), and runs with the objects it
 * creates listed and checked for dependencies on a spindle when it ends
 * (run_utility; "Objects depending on a spindle" in table/options.c).
 *
 * Locks and rights.  ALTER TABLE of a spindle table checks that the
 * caller owns it before taking any lock (so a role that may not alter the
 * table never queues behind, and in front of, its producers), then takes
 * ShareRowExclusiveLock on it if it sets spindle's options (capacities of
 * empty spindles change), else ShareUpdateExclusiveLock if it sets or
 * resets core's storage parameters (spindle's stored options are hidden
 * from core's validation meanwhile, in pg_class: two such ALTERs must not
 * interleave).  The DROP statements lock the spindle tables
 * they drop (ACCESS EXCLUSIVE, after core's ownership checks, as core
 * would: table/detach.c).  Everything else here locks nothing and leaves
 * the locks to core; the checks that must see the locked state run after
 * core ran the statement.  The worker is paused only for a role the
 * database statement itself would let through.
 *
 * Invariants.  A DROP DATABASE that succeeded leaves no slot, consumer
 * state or cached event of that database in shared memory (a database
 * made later with its OID must not find them).  The hook's state lives on
 * the C stack of one call: a statement nested in another (a procedure's,
 * CREATE SCHEMA's subcommands) runs through the hook again on its own.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "tcop/utility.h"
#include "utils/acl.h"

#include "admin/spindle_admin.h"

static ProcessUtility_hook_type prev_ProcessUtility = NULL;

/* The arguments of a ProcessUtility call, passed on as they came. */
typedef struct UtilityCall
{
	PlannedStmt *pstmt;
	const char *queryString;
	ProcessUtilityContext context;
	ParamListInfo params;
	QueryEnvironment *queryEnv;
	DestReceiver *dest;
	QueryCompletion *qc;
} UtilityCall;

/*
 * Run the statement (the previous hook, else core), listing the objects it
 * creates or alters, and refuse one that depends on a spindle when it is
 * done (see "Objects depending on a spindle" in table/options.c).
 * Statements it runs (a procedure's, a DO block's, CREATE SCHEMA's
 * subcommands) check their own objects when they end.
 */
static void
run_utility(UtilityCall *call)
{
	int			from = spindle_new_objects_begin();

	PG_TRY();
	{
		if (prev_ProcessUtility)
			prev_ProcessUtility(call->pstmt, call->queryString, false,
								call->context, call->params, call->queryEnv,
								call->dest, call->qc);
		else
			standard_ProcessUtility(call->pstmt, call->queryString, false,
									call->context, call->params,
									call->queryEnv, call->dest, call->qc);
		spindle_new_objects_check(from);
	}
	PG_FINALLY();
	{
		spindle_new_objects_end(from);
	}
	PG_END_TRY();
}

/*
 * Run a CREATE of a spindle table, whose spindle options are `options`:
 * the table layer remembers them while core runs it (the object access
 * hook learns the new table's OID), then writes them and makes the
 * table's first spindle.  A CREATE nested in this one (an event trigger's,
 * or one run by a function that CREATE TABLE ... AS calls) passes here on
 * its own: the state of the outer CREATE waits in `outer` and is given
 * back when the inner one ends, also when it fails.
 */
static void
run_creating(UtilityCall *call, List *options)
{
	SpindleCreateState outer;
	SpindleCreateState mine;
	Oid			relid;

	spindle_create_begin(options, &outer);
	PG_TRY();
	{
		run_utility(call);
	}
	PG_FINALLY();
	{
		spindle_create_end(&outer, &mine);
	}
	PG_END_TRY();
	relid = mine.relid;
	spindle_create_finish(&mine);
	/* a queue table (create_queue, a restore, ...) gets its consumer relation */
	if (OidIsValid(relid))
		spindle_queue_table_created(relid);
}

/* CREATE TABLE (CREATE FOREIGN TABLE has a node of its own: never ours) */
static void
utility_create_table(UtilityCall *call, CreateStmt *stmt)
{
	List	   *options = NIL;

	if (spindle_prepare_create(stmt, &options))
		run_creating(call, options);
	else
		run_utility(call);
}

/* CREATE TABLE AS, SELECT INTO, CREATE MATERIALIZED VIEW */
static void
utility_create_table_as(UtilityCall *call, CreateTableAsStmt *stmt)
{
	List	   *options = NIL;

	if (spindle_prepare_create_as(stmt, &options))
		run_creating(call, options);
	else
		run_utility(call);
}

/*
 * ALTER TABLE, ALTER FOREIGN TABLE, ALTER TYPE (and the other ALTERs that
 * share its parse node, passed through).  Of a spindle table: only its
 * owner may alter it, checked before asking for any lock, so that a role
 * without the right never waits for (and makes every producer wait
 * behind) a transaction that holds the table; ShareRowExclusiveLock keeps
 * inserts out while capacities of empty spindles change, and
 * ShareUpdateExclusiveLock (the lock core takes for it) keeps another
 * ALTER out while spindle's stored options are hidden from core's
 * validation of storage parameters (other ALTERs take core's own locks).
 * Of another relation: refused if it would reach a spindle table.  After
 * core ran it (and holds the locks), the spindle tables it reached are
 * checked again.
 */
static void
utility_alter_table(UtilityCall *call, AlterTableStmt *stmt)
{
	Oid			relid = InvalidOid;
	Oid			altered_relid = InvalidOid;
	Oid			options_relid = InvalidOid;
	List	   *options = NIL;
	List	   *saved = NIL;
	List	   *attached = NIL;

	/* a materialized view never becomes a spindle table */
	if (stmt->objtype == OBJECT_MATVIEW)
		spindle_check_alter_matview(stmt);
	if (stmt->objtype == OBJECT_TABLE ||
		stmt->objtype == OBJECT_FOREIGN_TABLE ||
		stmt->objtype == OBJECT_TYPE)
		relid = RangeVarGetRelid(stmt->relation, NoLock, true);
	if (OidIsValid(relid) && stmt->objtype != OBJECT_TYPE)
		altered_relid = relid;
	if (OidIsValid(relid) &&
		(stmt->objtype != OBJECT_TABLE || !spindle_relid_is_facade(relid)))
		attached = spindle_prepare_alter_other(stmt, relid);
	else if (OidIsValid(relid))
	{
		if (!pg_class_ownercheck(relid, GetUserId()))
			aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_TABLE,
						   stmt->relation->relname);
		if (spindle_alter_sets_options(stmt))
			LockRelationOid(relid, ShareRowExclusiveLock);
		else if (spindle_alter_sets_storage_params(stmt))
			LockRelationOid(relid, ShareUpdateExclusiveLock);
		/* dropped meanwhile: core reports it */
		if (spindle_relid_is_facade(relid))
		{
			bool		hidden;

			options = spindle_prepare_alter(stmt, relid,
											call->context == PROCESS_UTILITY_TOPLEVEL,
											&saved, &hidden);
			if (hidden)
				options_relid = relid;
		}
	}

	run_utility(call);

	if (OidIsValid(altered_relid))
		spindle_check_altered(altered_relid);
	if (OidIsValid(options_relid))
		spindle_alter_finish(options_relid, options, saved);
	if (attached != NIL)
		spindle_check_attached(attached, stmt->relation->relname);
}

/* CREATE INDEX: no BRIN index and no CONCURRENTLY on a spindle table. */
static void
utility_create_index(UtilityCall *call, IndexStmt *stmt)
{
	spindle_check_create_index(stmt);
	run_utility(call);
}

/*
 * REINDEX: CONCURRENTLY is refused before core builds anything if it
 * would reach an index of a spindle table (core would build and commit a
 * copy of each index and fail only when validating it, leaving the copies
 * behind).
 */
static void
utility_reindex(UtilityCall *call, ReindexStmt *stmt)
{
	spindle_check_reindex(stmt);
	run_utility(call);
}

/*
 * TRUNCATE: every spindle table it empties (named, inherited, or reached
 * by CASCADE) gets a new open spindle, once core holds it.
 */
static void
utility_truncate(UtilityCall *call, TruncateStmt *stmt)
{
	List	   *truncated = spindle_truncate_targets(stmt);

	run_utility(call);
	if (truncated != NIL)
		spindle_truncated(truncated);
}

/*
 * DROP (TABLE, SCHEMA ... CASCADE, ...) and DROP OWNED: the spindle
 * tables it drops lose their spindles first, without a lock per spindle
 * when they are many (table/detach.c), so that core drops each table
 * alone; afterwards they must be gone with it.
 */
static void
utility_drop(UtilityCall *call, Node *parsetree)
{
	List	   *emptied;

	if (IsA(parsetree, DropStmt))
		spindle_refuse_drop_of_spindles((DropStmt *) parsetree);
	emptied = spindle_prepare_drop(parsetree);
	run_utility(call);
	if (emptied != NIL)
		spindle_check_dropped(emptied);
}

/*
 * ALTER TABLE ALL IN TABLESPACE ... SET TABLESPACE may move spindle
 * tables: refused in a transaction block, as ALTER TABLE ... SET
 * TABLESPACE of one is (table/options.c, prepare_alter).
 */
static void
utility_move_all(UtilityCall *call, AlterTableMoveAllStmt *stmt)
{
	if (stmt->objtype == OBJECT_TABLE && OidIsValid(spindle_facade_am_oid()))
		PreventInTransactionBlock(call->context == PROCESS_UTILITY_TOPLEVEL,
								  "ALTER TABLE ALL IN TABLESPACE ... SET TABLESPACE with spindle tables");
	run_utility(call);
}

/*
 * The database a command needs to itself (no other session connected):
 * DROP DATABASE, CREATE DATABASE from a template, ALTER DATABASE RENAME
 * and SET TABLESPACE; InvalidOid for any other command.  The spindle
 * worker connected to it must leave first.
 */
static Oid
database_needing_exclusivity(Node *parsetree)
{
	const char *dbname = NULL;
	ListCell   *lc;

	switch (nodeTag(parsetree))
	{
		case T_DropdbStmt:
			dbname = ((DropdbStmt *) parsetree)->dbname;
			break;
		case T_CreatedbStmt:
			dbname = "template1";
			foreach(lc, ((CreatedbStmt *) parsetree)->options)
			{
				DefElem    *def = lfirst_node(DefElem, lc);

				if (strcmp(def->defname, "template") == 0 && def->arg)
					dbname = defGetString(def);
			}
			break;
		case T_RenameStmt:
			if (((RenameStmt *) parsetree)->renameType == OBJECT_DATABASE)
				dbname = ((RenameStmt *) parsetree)->subname;
			break;
		case T_AlterDatabaseStmt:
			foreach(lc, ((AlterDatabaseStmt *) parsetree)->options)
				if (strcmp(lfirst_node(DefElem, lc)->defname, "tablespace") == 0)
					dbname = ((AlterDatabaseStmt *) parsetree)->dbname;
			break;
		default:
			break;
	}
	return dbname ? get_database_oid(dbname, true) : InvalidOid;
}

/*
 * DROP DATABASE, CREATE DATABASE, ALTER DATABASE and RENAME (of a
 * database, or anything else: passed through).  While a statement that
 * needs a database to itself runs, the spindle worker connected to it is
 * paused (only for a role the command itself would let through: another
 * must not make the worker leave).  A dropped database's slots, consumer
 * state and cached events are forgotten: a database made later with its
 * OID (CREATE DATABASE ... OID, or after an OID wraparound) from a
 * template holding a queue has that queue's relation OID and msg_ids, and
 * must not find them.
 */
static void
utility_database(UtilityCall *call, Node *parsetree)
{
	Oid			dboid = database_needing_exclusivity(parsetree);

	if (OidIsValid(dboid) && !superuser() &&
		!pg_database_ownercheck(dboid, GetUserId()) &&
		!(IsA(parsetree, CreatedbStmt) && have_createdb_privilege()))
		dboid = InvalidOid;
	if (!OidIsValid(dboid))
	{
		run_utility(call);
		return;
	}

	spindle_worker_pause(dboid);
	PG_TRY();
	{
		run_utility(call);
	}
	PG_FINALLY();
	{
		spindle_worker_resume(dboid);
	}
	PG_END_TRY();
	/* the database is gone, and nobody was connected to it */
	if (IsA(parsetree, DropdbStmt))
	{
		spindle_slots_forget_database(dboid);
		spindle_queue_forget_database(dboid);
		spindle_cache_forget_database(dboid);
	}
}

/*
 * COMMIT PREPARED and ROLLBACK PREPARED end a transaction another backend
 * ran: once done, wake the consumers of the database's queues, whose
 * enqueues (or rolled-back deletes) may have made events deliverable.
 */
static void
utility_transaction(UtilityCall *call, TransactionStmt *stmt)
{
	bool		wake = stmt->kind == TRANS_STMT_COMMIT_PREPARED ||
		stmt->kind == TRANS_STMT_ROLLBACK_PREPARED;

	run_utility(call);
	if (wake)
		spindle_queue_wake_database();
}

/*
 * The hook: refuse what names a spindle itself, then hand the statement
 * to the function for its kind; any other statement just runs.
 */
static void
spindle_ProcessUtility(PlannedStmt *pstmt, const char *queryString,
					   bool readOnlyTree, ProcessUtilityContext context,
					   ParamListInfo params, QueryEnvironment *queryEnv,
					   DestReceiver *dest, QueryCompletion *qc)
{
	UtilityCall call;
	Node	   *parsetree;

	if (readOnlyTree)
		pstmt = copyObject(pstmt);
	call.pstmt = pstmt;
	call.queryString = queryString;
	call.context = context;
	call.params = params;
	call.queryEnv = queryEnv;
	call.dest = dest;
	call.qc = qc;
	parsetree = pstmt->utilityStmt;
	spindle_refuse_spindle_ddl(parsetree);

	switch (nodeTag(parsetree))
	{
		case T_CreateStmt:
			utility_create_table(&call, (CreateStmt *) parsetree);
			break;
		case T_CreateTableAsStmt:
			utility_create_table_as(&call, (CreateTableAsStmt *) parsetree);
			break;
		case T_AlterTableStmt:
			utility_alter_table(&call, (AlterTableStmt *) parsetree);
			break;
		case T_IndexStmt:
			utility_create_index(&call, (IndexStmt *) parsetree);
			break;
		case T_ReindexStmt:
			utility_reindex(&call, (ReindexStmt *) parsetree);
			break;
		case T_TruncateStmt:
			utility_truncate(&call, (TruncateStmt *) parsetree);
			break;
		case T_DropStmt:
		case T_DropOwnedStmt:
			utility_drop(&call, parsetree);
			break;
		case T_AlterTableMoveAllStmt:
			utility_move_all(&call, (AlterTableMoveAllStmt *) parsetree);
			break;
		case T_DropdbStmt:
		case T_CreatedbStmt:
		case T_AlterDatabaseStmt:
		case T_RenameStmt:
			utility_database(&call, parsetree);
			break;
		case T_TransactionStmt:
			utility_transaction(&call, (TransactionStmt *) parsetree);
			break;
		default:
			run_utility(&call);
			break;
	}
}

/* Install the ProcessUtility hook (at _PG_init), after the previous one. */
void
spindle_utility_init(void)
{
	prev_ProcessUtility = ProcessUtility_hook;
	ProcessUtility_hook = spindle_ProcessUtility;
}
