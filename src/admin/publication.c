/*-------------------------------------------------------------------------
 *
 * publication.c
 *	  Keep spindle tables and their spindles out of logical replication
 *	  publications.
 *
 * Logical decoding attributes every change of a spindle table to the
 * spindle relation that holds the event (pg_spindle.s<oid>_<n>, access
 * method spindle_segment), not to the table, and pgoutput has no way to map
 * it back: a FOR TABLE publication copies the rows once (the initial sync
 * reads the table) and then never sends a change, and FOR ALL TABLES
 * publishes the internal relations themselves, which no subscriber has.
 * So spindle refuses, with SQLSTATE 0A000 and a hint:
 *
 *	- CREATE/ALTER PUBLICATION (FOR TABLE, ADD TABLE, SET TABLE) whose
 *	  publication then holds a spindle table or a pg_spindle relation,
 *	  directly or as a partition of a published partitioned table;
 *	- FOR TABLES IN SCHEMA (also ADD/SET) of pg_spindle or of a schema that
 *	  holds a spindle table;
 *	- FOR ALL TABLES in a database with a spindle table or a pg_spindle
 *	  relation;
 *	- and the other way round, creating a spindle table (CREATE TABLE,
 *	  CREATE TABLE AS, SELECT INTO, default_table_access_method) in a
 *	  database with a FOR ALL TABLES publication or in a schema published
 *	  FOR TABLES IN SCHEMA; and CREATE TABLE ... PARTITION OF, ALTER TABLE
 *	  ... ATTACH PARTITION and ALTER TABLE ... SET SCHEMA that leave a
 *	  spindle table (the table or one of its partitions) published.
 *
 * Which hooks, and why.  Read in PostgreSQL 15.15 (publicationcmds.c,
 * pg_publication.c): CreatePublication fires one object-access event,
 * OAT_POST_CREATE on pg_publication, after it has added the tables and
 * schemas and without a CommandCounterIncrement; PublicationAddTables and
 * PublicationAddSchemas fire OAT_POST_CREATE on pg_publication_rel and
 * pg_publication_namespace only when called from ALTER PUBLICATION (their
 * stmt argument is NULL for CREATE PUBLICATION ... FOR TABLE), and
 * publication_add_relation / publication_add_schema fire none; FOR ALL
 * TABLES writes no pg_publication_rel row at all.  No single object-access
 * event covers every path, and each fires before the command's catalog
 * rows are visible.  So publication DDL goes through a ProcessUtility hook
 * on CreatePublicationStmt and AlterPublicationStmt (also reached from
 * PL/pgSQL EXECUTE, extension scripts and pg_restore): it takes the lock,
 * lets core run, then checks the publication as core left it (all of it,
 * partitions of published partitioned tables included, so every syntax is
 * covered; ALTER ... DROP and SET (options) are not checked, so that a
 * publication made before this check existed can still be mended).
 * Spindle tables are caught where every one is made: OAT_POST_CREATE on
 * pg_class (heap_create_with_catalog fires it for each relation and tells
 * internal ones apart: the transient tables of VACUUM FULL and CLUSTER are
 * skipped); a partition's parent is not known yet at that point, so
 * PARTITION OF, ATTACH PARTITION and SET SCHEMA are checked in the
 * ProcessUtility hook after core has run them.
 *
 * Locks: race-freedom comes from a lock on the (per-database) catalog
 * pg_publication, taken before checking and held to the end of the
 * transaction, and catalog reads with a fresh catalog snapshot taken after
 * it.  Publication DDL takes ShareRowExclusiveLock; making or moving a
 * spindle table takes RowExclusiveLock.  The two conflict, so one of two
 * concurrent transactions waits for the other to end and then sees what it
 * committed; RowExclusiveLock does not conflict with itself, so spindle
 * tables are still created concurrently, and core's publication DDL (which
 * takes RowExclusiveLock on pg_publication itself) queues behind a spindle
 * table being created, as any publication DDL does behind another.
 * Nothing else takes either mode on pg_publication; decoding and the
 * relcache read it with AccessShareLock.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/skey.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/objectaccess.h"
#include "catalog/partition.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_publication.h"
#include "catalog/pg_publication_namespace.h"
#include "commands/defrem.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/lmgr.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "admin/spindle_admin.h"


static ProcessUtility_hook_type prev_ProcessUtility = NULL;
static object_access_hook_type prev_object_access = NULL;

#define LOCK_FOR_PUBLICATION	ShareRowExclusiveLock
#define LOCK_FOR_SPINDLE_TABLE	RowExclusiveLock

/* The OIDs that tell spindle's relations apart; invalid without the extension. */
typedef struct SpindleOids
{
	Oid			facade_am;		/* access method "spindle" */
	Oid			segment_am;		/* access method "spindle_segment" */
	Oid			storage_nsp;	/* schema pg_spindle */
} SpindleOids;

typedef enum SpindleRelKind
{
	REL_OTHER,
	REL_SPINDLE_TABLE,			/* a facade: relkind 'r', relam spindle */
	REL_SPINDLE_INTERNAL		/* a spindle, or anything else in pg_spindle */
} SpindleRelKind;

static bool
get_spindle_oids(SpindleOids *oids)
{
	oids->facade_am = get_am_oid("spindle", true);
	oids->segment_am = get_am_oid("spindle_segment", true);
	oids->storage_nsp = get_namespace_oid(SPINDLE_STORAGE_SCHEMA, true);
	return OidIsValid(oids->facade_am) || OidIsValid(oids->segment_am) ||
		OidIsValid(oids->storage_nsp);
}

static SpindleRelKind
classify(const SpindleOids *oids, Form_pg_class form)
{
	if (form->relkind != RELKIND_RELATION &&
		form->relkind != RELKIND_PARTITIONED_TABLE)
		return REL_OTHER;
	if (OidIsValid(oids->facade_am) && form->relam == oids->facade_am &&
		form->relkind == RELKIND_RELATION)
		return REL_SPINDLE_TABLE;
	if ((OidIsValid(oids->segment_am) && form->relam == oids->segment_am) ||
		(OidIsValid(oids->storage_nsp) &&
		 form->relnamespace == oids->storage_nsp))
		return REL_SPINDLE_INTERNAL;
	return REL_OTHER;
}

/*
 * Take the lock on pg_publication, then make sure the next catalog read
 * takes a new snapshot, which sees whatever the holders we waited for
 * committed.
 */
static void
lock_publications(LOCKMODE mode)
{
	LockRelationOid(PublicationRelationId, mode);
	InvalidateCatalogSnapshot();
}

/* ----------------------------------------------------------------
 * Catalog reads (with the catalog snapshot)
 * ----------------------------------------------------------------
 */

/*
 * A spindle table, else an internal spindle relation, in schema nsp (any
 * schema if InvalidOid); *name gets its qualified name.  REL_OTHER if none.
 */
static SpindleRelKind
find_spindle_relation(const SpindleOids *oids, Oid nsp, char **name)
{
	Relation	pgclass;
	SysScanDesc scan;
	ScanKeyData key[1];
	HeapTuple	tup;
	SpindleRelKind result = REL_OTHER;

	if (OidIsValid(nsp))
		ScanKeyInit(&key[0], Anum_pg_class_relnamespace,
					BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(nsp));
	pgclass = table_open(RelationRelationId, AccessShareLock);
	scan = systable_beginscan(pgclass, InvalidOid, false, NULL,
							  OidIsValid(nsp) ? 1 : 0, key);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		Form_pg_class form = (Form_pg_class) GETSTRUCT(tup);
		SpindleRelKind kind = classify(oids, form);

		if (kind == REL_OTHER || (kind == REL_SPINDLE_INTERNAL &&
								  result == REL_SPINDLE_INTERNAL))
			continue;
		result = kind;
		*name = quote_qualified_identifier(get_namespace_name(form->relnamespace),
										   NameStr(form->relname));
		if (kind == REL_SPINDLE_TABLE)
			break;
	}
	systable_endscan(scan);
	table_close(pgclass, AccessShareLock);
	return result;
}

/* Name of a FOR ALL TABLES publication, or NULL if there is none. */
static char *
all_tables_publication(void)
{
	Relation	pubrel;
	SysScanDesc scan;
	HeapTuple	tup;
	char	   *result = NULL;

	pubrel = table_open(PublicationRelationId, AccessShareLock);
	scan = systable_beginscan(pubrel, InvalidOid, false, NULL, 0, NULL);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		Form_pg_publication form = (Form_pg_publication) GETSTRUCT(tup);

		if (form->puballtables)
		{
			result = pstrdup(NameStr(form->pubname));
			break;
		}
	}
	systable_endscan(scan);
	table_close(pubrel, AccessShareLock);
	return result;
}

/* Name of a publication of schema nsp (FOR TABLES IN SCHEMA), or NULL. */
static char *
schema_publication(Oid nsp)
{
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key[1];
	HeapTuple	tup;
	char	   *result = NULL;

	ScanKeyInit(&key[0], Anum_pg_publication_namespace_pnnspid,
				BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(nsp));
	rel = table_open(PublicationNamespaceRelationId, AccessShareLock);
	scan = systable_beginscan(rel, PublicationNamespacePnnspidPnpubidIndexId,
							  true, NULL, 1, key);
	if (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		Oid			pubid = ((Form_pg_publication_namespace) GETSTRUCT(tup))->pnpubid;

		result = get_publication_name(pubid, true);
		if (result == NULL)
			result = psprintf("%u", pubid);
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return result;
}

/* ----------------------------------------------------------------
 * Publication DDL
 * ----------------------------------------------------------------
 */
#define HINT_PUBLISH_ORDINARY \
	"Leave spindle tables out of publications: publish the ordinary tables with FOR TABLE, or FOR TABLES IN SCHEMA of schemas without spindle tables."
#define DETAIL_NO_DECODING \
	"Logical decoding attributes the changes of a spindle table to its internal spindle relations, which pgoutput cannot map back to the table."

/* ERROR if publication pubname (as the current command left it) holds a spindle relation. */
static void
check_publication(const char *pubname)
{
	SpindleOids oids;
	Oid			pubid;
	HeapTuple	tup;
	bool		alltables;
	ListCell   *lc;

	/* see what the command did, and what others committed before our lock */
	CommandCounterIncrement();
	InvalidateCatalogSnapshot();
	if (!get_spindle_oids(&oids))
		return;
	pubid = get_publication_oid(pubname, true);
	if (!OidIsValid(pubid))
		return;
	tup = SearchSysCache1(PUBLICATIONOID, ObjectIdGetDatum(pubid));
	if (!HeapTupleIsValid(tup))
		return;
	alltables = ((Form_pg_publication) GETSTRUCT(tup))->puballtables;
	ReleaseSysCache(tup);

	if (alltables)
	{
		char	   *name = NULL;
		SpindleRelKind kind = find_spindle_relation(&oids, InvalidOid, &name);

		if (kind != REL_OTHER)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot create a FOR ALL TABLES publication in a database with spindle tables"),
					 kind == REL_SPINDLE_TABLE ?
					 errdetail("It would publish spindle table %s. " DETAIL_NO_DECODING, name) :
					 errdetail("It would publish internal spindle relation %s, which no subscriber has.", name),
					 errhint(HINT_PUBLISH_ORDINARY)));
		return;
	}

	foreach(lc, GetPublicationRelations(pubid, PUBLICATION_PART_ALL))
	{
		Oid			relid = lfirst_oid(lc);
		Form_pg_class form;
		SpindleRelKind kind;
		char	   *name;
		Oid			form_nsp;

		tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
		if (!HeapTupleIsValid(tup))
			continue;
		form = (Form_pg_class) GETSTRUCT(tup);
		kind = classify(&oids, form);
		name = pstrdup(NameStr(form->relname));
		form_nsp = form->relnamespace;
		ReleaseSysCache(tup);
		if (kind == REL_SPINDLE_TABLE)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot publish spindle table \"%s\"", name),
					 errdetail(DETAIL_NO_DECODING),
					 errhint(HINT_PUBLISH_ORDINARY)));
		if (kind == REL_SPINDLE_INTERNAL)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot publish internal spindle relation \"%s.%s\"",
							get_namespace_name(form_nsp), name),
					 errdetail("Relations in schema \"%s\" hold the events of spindle tables; no subscriber has them.",
							   SPINDLE_STORAGE_SCHEMA),
					 errhint(HINT_PUBLISH_ORDINARY)));
	}

	foreach(lc, GetPublicationSchemas(pubid))
	{
		Oid			nsp = lfirst_oid(lc);
		char	   *name = NULL;

		if (nsp == oids.storage_nsp)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot publish schema \"%s\"", SPINDLE_STORAGE_SCHEMA),
					 errdetail("It holds the internal relations of spindle tables, which no subscriber has."),
					 errhint(HINT_PUBLISH_ORDINARY)));
		if (find_spindle_relation(&oids, nsp, &name) != REL_OTHER)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot publish schema \"%s\", which holds spindle table %s",
							get_namespace_name(nsp), name),
					 errdetail(DETAIL_NO_DECODING),
					 errhint("Publish the ordinary tables of the schema with FOR TABLE, or move its spindle tables to a schema that is not published.")));
		/* partitions of its partitioned tables are published too, wherever they are */
		{
			ListCell   *lc2;

			foreach(lc2, GetSchemaPublicationRelations(nsp, PUBLICATION_PART_ALL))
			{
				HeapTuple	reltup = SearchSysCache1(RELOID,
													 ObjectIdGetDatum(lfirst_oid(lc2)));
				SpindleRelKind kind;
				char	   *relname;

				if (!HeapTupleIsValid(reltup))
					continue;
				kind = classify(&oids, (Form_pg_class) GETSTRUCT(reltup));
				relname = pstrdup(NameStr(((Form_pg_class) GETSTRUCT(reltup))->relname));
				ReleaseSysCache(reltup);
				if (kind != REL_OTHER)
					ereport(ERROR,
							(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
							 errmsg("cannot publish schema \"%s\", whose partitioned tables have spindle partition \"%s\"",
									get_namespace_name(nsp), relname),
							 errdetail(DETAIL_NO_DECODING),
							 errhint(HINT_PUBLISH_ORDINARY)));
			}
		}
	}
}

/* ----------------------------------------------------------------
 * Spindle tables made or moved
 * ----------------------------------------------------------------
 */

/*
 * ERROR if spindle table relname, being created in schema nsp, would be
 * published (FOR ALL TABLES, or FOR TABLES IN SCHEMA of nsp).
 */
static void
check_spindle_table(const char *relname, Oid nsp)
{
	char	   *pubname;

	lock_publications(LOCK_FOR_SPINDLE_TABLE);
	if ((pubname = all_tables_publication()) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot create spindle table \"%s\" in a database with a FOR ALL TABLES publication",
						relname),
				 errdetail("Publication \"%s\" would publish it. " DETAIL_NO_DECODING,
						   pubname),
				 errhint("Create spindle tables in a database without FOR ALL TABLES publications, or replace the publication by one that lists its tables (FOR TABLE).")));
	if ((pubname = schema_publication(nsp)) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot create spindle table \"%s\" in schema \"%s\"",
						relname, get_namespace_name(nsp)),
				 errdetail("Publication \"%s\" publishes the tables of the schema (FOR TABLES IN SCHEMA). " DETAIL_NO_DECODING,
						   pubname),
				 errhint("Use a schema that no publication publishes FOR TABLES IN SCHEMA.")));
}

/* Is relid a spindle table?  (Its pg_class row must be visible.) */
static bool
relid_is_spindle_table(Oid relid)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	bool		result = false;

	if (HeapTupleIsValid(tup))
	{
		Form_pg_class form = (Form_pg_class) GETSTRUCT(tup);
		Oid			am = get_am_oid("spindle", true);

		result = OidIsValid(am) && form->relam == am &&
			form->relkind == RELKIND_RELATION;
		ReleaseSysCache(tup);
	}
	return result;
}

/*
 * Name of a publication that publishes relid: itself, its schema, one of
 * its ancestors or their schemas, or FOR ALL TABLES (as the relcache's
 * RelationBuildPublicationDesc counts them).  NULL if none.
 */
static char *
publication_of(Oid relid)
{
	List	   *puboids = GetRelationPublications(relid);
	char	   *name;

	puboids = list_concat_unique_oid(puboids,
									 GetSchemaPublications(get_rel_namespace(relid)));
	if (get_rel_relispartition(relid))
	{
		ListCell   *lc;

		foreach(lc, get_partition_ancestors(relid))
		{
			Oid			ancestor = lfirst_oid(lc);

			puboids = list_concat_unique_oid(puboids,
											 GetRelationPublications(ancestor));
			puboids = list_concat_unique_oid(puboids,
											 GetSchemaPublications(get_rel_namespace(ancestor)));
		}
	}
	puboids = list_concat_unique_oid(puboids, GetAllTablesPublications());
	if (puboids == NIL)
		return NULL;
	name = get_publication_name(linitial_oid(puboids), true);
	return name ? name : psprintf("%u", linitial_oid(puboids));
}

/*
 * After CREATE TABLE ... PARTITION OF, ALTER TABLE ... ATTACH PARTITION or
 * ALTER TABLE ... SET SCHEMA of relid: ERROR if relid or one of its
 * partitions is a spindle table that a publication now publishes.
 */
static void
check_moved_relation(Oid relid)
{
	List	   *spindle_tables = NIL;
	ListCell   *lc;

	/* the command's own changes; its relations are locked by it */
	CommandCounterIncrement();
	if (!OidIsValid(get_am_oid("spindle", true)))
		return;
	foreach(lc, find_all_inheritors(relid, NoLock, NULL))
		if (relid_is_spindle_table(lfirst_oid(lc)))
			spindle_tables = lappend_oid(spindle_tables, lfirst_oid(lc));
	if (spindle_tables == NIL)
		return;

	lock_publications(LOCK_FOR_SPINDLE_TABLE);
	foreach(lc, spindle_tables)
	{
		Oid			child = lfirst_oid(lc);
		char	   *pubname = publication_of(child);

		if (pubname != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("spindle table \"%s\" would be published by publication \"%s\"",
							get_rel_name(child), pubname),
					 errdetail(DETAIL_NO_DECODING),
					 errhint("Keep spindle tables out of schemas published FOR TABLES IN SCHEMA and out of published partitioned tables.")));
	}
}

/* ----------------------------------------------------------------
 * The hooks
 * ----------------------------------------------------------------
 */
static void
spindle_publication_ProcessUtility(PlannedStmt *pstmt, const char *queryString,
								   bool readOnlyTree,
								   ProcessUtilityContext context,
								   ParamListInfo params,
								   QueryEnvironment *queryEnv,
								   DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;
	char	   *check_pub = NULL;
	List	   *moved_rvs = NIL;	/* RangeVars of relations moved or attached */
	Oid			moved_relid = InvalidOid;
	ListCell   *lc;

	switch (nodeTag(parsetree))
	{
		case T_CreatePublicationStmt:
			check_pub = pstrdup(((CreatePublicationStmt *) parsetree)->pubname);
			break;
		case T_AlterPublicationStmt:
			{
				AlterPublicationStmt *stmt = (AlterPublicationStmt *) parsetree;

				if (stmt->options == NIL && stmt->action != AP_DropObjects)
					check_pub = pstrdup(stmt->pubname);
				break;
			}
		case T_CreateStmt:
			{
				CreateStmt *stmt = (CreateStmt *) parsetree;

				if (stmt->partbound != NULL)
					moved_rvs = lappend(moved_rvs, copyObject(stmt->relation));
				break;
			}
		case T_AlterTableStmt:
			{
				AlterTableStmt *stmt = (AlterTableStmt *) parsetree;

				foreach(lc, stmt->cmds)
				{
					AlterTableCmd *cmd = lfirst_node(AlterTableCmd, lc);

					if (cmd->subtype == AT_AttachPartition)
						moved_rvs = lappend(moved_rvs,
											copyObject(((PartitionCmd *) cmd->def)->name));
				}
				break;
			}
		case T_AlterObjectSchemaStmt:
			{
				AlterObjectSchemaStmt *stmt = (AlterObjectSchemaStmt *) parsetree;

				/* its name changes: resolve it now */
				if (stmt->objectType == OBJECT_TABLE && stmt->relation != NULL)
					moved_relid = RangeVarGetRelid(stmt->relation, NoLock, true);
				break;
			}
		default:
			break;
	}
	if (prev_ProcessUtility)
		prev_ProcessUtility(pstmt, queryString, readOnlyTree, context, params,
							queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);

	/*
	 * Lock only now, after core took the locks of the tables it names: a
	 * transaction creating a spindle table while holding one of them must
	 * not wait for us while we wait for it.  Both sides lock before they
	 * check and keep the lock to commit, so one of them sees the other.
	 */
	if (check_pub != NULL)
	{
		lock_publications(LOCK_FOR_PUBLICATION);
		check_publication(check_pub);
	}
	foreach(lc, moved_rvs)
	{
		Oid			relid = RangeVarGetRelid(lfirst_node(RangeVar, lc), NoLock, true);

		if (OidIsValid(relid))
			check_moved_relation(relid);
	}
	if (OidIsValid(moved_relid))
		check_moved_relation(moved_relid);
}

static void
spindle_publication_object_access(ObjectAccessType access, Oid classId,
								  Oid objectId, int subId, void *arg)
{
	Relation	rel;
	char	   *relname = NULL;
	Oid			nsp = InvalidOid;

	if (prev_object_access)
		prev_object_access(access, classId, objectId, subId, arg);

	if (access != OAT_POST_CREATE || classId != RelationRelationId ||
		subId != 0)
		return;
	/* the transient tables of VACUUM FULL, CLUSTER and table rewrites */
	if (arg != NULL && ((ObjectAccessPostCreate *) arg)->is_internal)
		return;

	/* its pg_class row may not be visible yet; its relcache entry is */
	rel = RelationIdGetRelation(objectId);
	if (rel == NULL)
		return;
	if (rel->rd_rel->relkind == RELKIND_RELATION &&
		OidIsValid(rel->rd_rel->relam) &&
		rel->rd_rel->relam == get_am_oid("spindle", true))
	{
		relname = pstrdup(RelationGetRelationName(rel));
		nsp = RelationGetNamespace(rel);
	}
	RelationClose(rel);
	if (relname != NULL)
		check_spindle_table(relname, nsp);
}

/* Install the hooks; called from _PG_init. */
void
spindle_publication_init(void)
{
	prev_ProcessUtility = ProcessUtility_hook;
	ProcessUtility_hook = spindle_publication_ProcessUtility;
	prev_object_access = object_access_hook;
	object_access_hook = spindle_publication_object_access;
}
