/*-------------------------------------------------------------------------
 *
 * layout.c
 *	  The hidden columns of spindle tables: each event's number within its
 *	  spindle and its append time.
 *
 * Every spindle table ends with two dropped int4 attributes, added when it
 * is created (spindle_add_hidden_columns, from the object access hook).
 * Spindles copy the table's tuple descriptor, so every event stored in a
 * spindle carries, in those two attributes:
 *   - k, its number within its spindle (virtual slot = spindle's vbase + k,
 *     see slotmap.c): the physical-to-virtual TID translation of scans;
 *   - its append time, in seconds since the PostgreSQL epoch rounded up,
 *     so that a TTL purge never purges an event younger than the TTL and
 *     purges every event older than the TTL plus one second, whatever
 *     happened on its page since (ttl.c).
 * That costs 8 bytes per event.
 *
 * Why dropped attributes: nothing above the access method ever sees them.
 * SELECT *, COPY, pg_dump, \d and the row type ignore dropped columns, and
 * the planner never hands a spindle table's stored tuples to another table
 * unchanged: a relation with dropped columns never gets a "physical" scan
 * target list, so INSERT ... SELECT and CREATE TABLE AS project into a
 * fresh tuple of the target's own shape.  Their values are only ever read
 * here, at fixed offsets from the end of the tuple
 * (spindle_event_k, spindle_event_time in spindle_storage.h).
 *
 * The names below are what pg_attribute shows; a user column may not
 * carry them.  pg_upgrade (binary-upgrade mode) recreates dropped columns
 * itself, so they are not added then.
 *
 * Locks: adding the hidden columns runs inside CREATE TABLE, under its
 * AccessExclusiveLock on the new table; forming an event takes none.
 *
 * Invariants: every spindle table ends with exactly the two hidden
 * columns (spindle_check_layout refuses one that does not), and every
 * event's k is the slot it was reserved (slots.c), so that the pair
 * (spindle, k) names one event for as long as the spindle exists.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/relation.h"
#include "access/reloptions.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/heap.h"
#include "catalog/indexing.h"
#include "catalog/pg_attribute.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type_d.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "utils/inval.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "storage/spindle_storage.h"


static const char *const hidden_names[SPINDLE_HIDDEN_COLUMNS] = {
	"........spindle.slot........",
	"........spindle.time........"
};

/* Does this descriptor end with spindle's hidden columns? */
static bool
has_hidden_columns(TupleDesc td)
{
	int			i;

	if (td->natts < SPINDLE_HIDDEN_COLUMNS)
		return false;
	for (i = 0; i < SPINDLE_HIDDEN_COLUMNS; i++)
	{
		Form_pg_attribute att =
			TupleDescAttr(td, td->natts - SPINDLE_HIDDEN_COLUMNS + i);

		if (!att->attisdropped || att->attlen != sizeof(int32) ||
			strcmp(NameStr(att->attname), hidden_names[i]) != 0)
			return false;
	}
	return true;
}

/*
 * Append the hidden columns to a spindle table that has just been created
 * (its pg_class and pg_attribute rows exist).  Does nothing if they are
 * there already (VACUUM FULL's transient copy of a table has them).
 */
void
spindle_add_hidden_columns(Oid relid)
{
	Relation	rel;
	Relation	pg_attribute;
	Relation	pg_class;
	CatalogIndexState indstate;
	TupleDesc	hidden;
	HeapTuple	classtup;
	Form_pg_class classform;
	int			natts;
	int			i;
	Datum		attoptions[SPINDLE_HIDDEN_COLUMNS] = {0};

	if (IsBinaryUpgrade)
		return;

	/* make the new rows visible before changing them */
	CommandCounterIncrement();
	rel = RelationIdGetRelation(relid);
	if (!RelationIsValid(rel))
		elog(ERROR, "could not open new spindle table %u", relid);
	natts = RelationGetDescr(rel)->natts;
	if (has_hidden_columns(RelationGetDescr(rel)))
	{
		RelationClose(rel);
		return;
	}
	for (i = 0; i < natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), i);

		if (strcmp(NameStr(att->attname), hidden_names[0]) == 0 ||
			strcmp(NameStr(att->attname), hidden_names[1]) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_RESERVED_NAME),
					 errmsg("column name \"%s\" is reserved by spindle",
							NameStr(att->attname))));
	}
	RelationClose(rel);
	if (natts + SPINDLE_HIDDEN_COLUMNS > MaxHeapAttributeNumber)
		ereport(ERROR,
				(errcode(ERRCODE_TOO_MANY_COLUMNS),
				 errmsg("spindle tables can have at most %d columns",
						MaxHeapAttributeNumber - SPINDLE_HIDDEN_COLUMNS)));

	hidden = CreateTemplateTupleDesc(SPINDLE_HIDDEN_COLUMNS);
	for (i = 0; i < SPINDLE_HIDDEN_COLUMNS; i++)
	{
		Form_pg_attribute att = TupleDescAttr(hidden, i);

		TupleDescInitEntry(hidden, i + 1, hidden_names[i], INT4OID, -1, 0);
		/* what DROP COLUMN leaves behind (RemoveAttributeById) */
		att->attnum = natts + 1 + i;
		att->attisdropped = true;
		att->atttypid = InvalidOid;
		att->attnotnull = false;
		att->attstattarget = 0;
		att->attcollation = InvalidOid;
	}
#ifdef ATTRIBUTE_VERSION_ATTOPTION
	{
		/* releases that version attributes want them in attnum order */
		Datum		version =
			transformRelOptions((Datum) 0,
								list_make1(makeDefElem(ATTRIBUTE_VERSION_ATTOPTION,
													   (Node *) makeString(psprintf(UINT64_FORMAT,
																					(uint64) GetNextAttributeVersion())),
													   -1)),
								NULL, NULL, false, false);

		for (i = 0; i < SPINDLE_HIDDEN_COLUMNS; i++)
			attoptions[i] = version;
	}
#endif
	pg_attribute = table_open(AttributeRelationId, RowExclusiveLock);
	indstate = CatalogOpenIndexes(pg_attribute);
	InsertPgAttributeTuples(pg_attribute, hidden, relid, attoptions, indstate);
	CatalogCloseIndexes(indstate);
	table_close(pg_attribute, RowExclusiveLock);

	pg_class = table_open(RelationRelationId, RowExclusiveLock);
	classtup = SearchSysCacheCopy1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(classtup))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	classform = (Form_pg_class) GETSTRUCT(classtup);
	classform->relnatts = natts + SPINDLE_HIDDEN_COLUMNS;
	CatalogTupleUpdate(pg_class, &classtup->t_self, classtup);
	heap_freetuple(classtup);
	table_close(pg_class, RowExclusiveLock);

	CacheInvalidateRelcacheByRelid(relid);
	CommandCounterIncrement();
}

/* Error out unless a spindle table has its hidden columns. */
void
spindle_check_layout(Relation facade)
{
	if (!has_hidden_columns(RelationGetDescr(facade)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("spindle table \"%s\" has no hidden columns",
						RelationGetRelationName(facade)),
				 errdetail("It was created by an older version of spindle or restored in binary-upgrade mode without them."),
				 errhint("Create a new spindle table and copy the events with INSERT ... SELECT.")));
}

/*
 * Form the tuple to store for the event in slot: the slot's columns (its
 * descriptor may be the table's, or that of a query with the same user
 * columns, as CREATE TABLE AS passes), then k and the append time.
 */
HeapTuple
spindle_form_event(Relation facade, TupleTableSlot *slot, int32 k,
				   uint32 appended)
{
	TupleDesc	td = RelationGetDescr(facade);
	int			nuser = td->natts - SPINDLE_HIDDEN_COLUMNS;
	int			nslot;
	Datum	   *values = palloc(sizeof(Datum) * td->natts);
	bool	   *isnull = palloc(sizeof(bool) * td->natts);
	HeapTuple	tuple;
	int			i;

	slot_getallattrs(slot);
	nslot = Min(slot->tts_nvalid, nuser);
	for (i = 0; i < nuser; i++)
	{
		if (i < nslot)
		{
			values[i] = slot->tts_values[i];
			isnull[i] = slot->tts_isnull[i];
		}
		else
		{
			values[i] = (Datum) 0;
			isnull[i] = true;
		}
	}
	values[nuser] = Int32GetDatum(k);
	isnull[nuser] = false;
	values[nuser + 1] = UInt32GetDatum(appended);
	isnull[nuser + 1] = false;
	tuple = heap_form_tuple(td, values, isnull);
	pfree(values);
	pfree(isnull);
	return tuple;
}

/* Now, in whole seconds since the PostgreSQL epoch, rounded up. */
uint32
spindle_time_now(void)
{
	TimestampTz now = GetCurrentTimestamp();

	return (uint32) ((now + USECS_PER_SEC - 1) / USECS_PER_SEC);
}

/* A timestamp in whole seconds since the PostgreSQL epoch, rounded down. */
uint32
spindle_time_floor(TimestampTz ts)
{
	if (ts <= 0)
		return 0;
	return (uint32) Min(ts / USECS_PER_SEC, (TimestampTz) PG_UINT32_MAX);
}
