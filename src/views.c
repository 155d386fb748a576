/*-------------------------------------------------------------------------
 *
 * views.c
 *	  Set-returning functions behind the monitoring views spindle.spindles
 *	  and spindle.tables.
 *
 * Counting events and purged events reads every page of every spindle
 * (purges are tuple deletions whose commit status must be checked), so the
 * views cost a scan of the tables they show.
 *
 * A caller sees only the spindle tables it has SELECT privilege on; the
 * privilege is checked before the table is opened, so a table the caller
 * may not read is never locked, and the caller never waits for it.  The
 * tables shown are opened with AccessShareLock, their spindles likewise.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xlog.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "directory.h"
#include "slots.h"
#include "facade.h"
#include "maintenance.h"
#include "options.h"


PG_FUNCTION_INFO_V1(spindle_spindle_info);
PG_FUNCTION_INFO_V1(spindle_table_options);

#define SPINDLE_INFO_COLS 9

/* Emit the rows of one spindle table into the tuplestore. */
static void
emit_table(Relation facade, ReturnSetInfo *rsinfo)
{
	SpindleDirectory *dir = spindle_directory_acquire(facade);
	int			n = dir->nspindles;
	int64	   *events = palloc0(sizeof(int64) * Max(n, 1));
	int64	   *purged = palloc0(sizeof(int64) * Max(n, 1));
	int64	   *bytes = palloc0(sizeof(int64) * Max(n, 1));
	bool	   *full = palloc0(sizeof(bool) * Max(n, 1));
	bool	   *exists = palloc0(sizeof(bool) * Max(n, 1));
	TimestampTz *filled = palloc0(sizeof(TimestampTz) * Max(n, 1));
	bool		any_events = false;
	bool		open_given = false;
	int			i;

	for (i = 0; i < n; i++)
	{
		SpindleEntry *sp = &dir->spindles[i];
		Relation	seg = spindle_open_segment(facade, sp, AccessShareLock);
		Relation	next = NULL;
		SpindleCounts counts;
		int64		used;

		if (seg == NULL)
			continue;
		exists[i] = true;
		if (i + 1 < n)
			next = try_relation_open(dir->spindles[i + 1].segment,
									 AccessShareLock);
		used = spindle_slots_used(facade, seg, sp, &full[i], &filled[i], next);
		if (next != NULL)
			relation_close(next, AccessShareLock);
		spindle_count_segment(seg, &counts);
		events[i] = counts.events;
		purged[i] = counts.purged;
		/* slots handed out but not yet on disk count as events too */
		events[i] = Max(events[i], used);

		/*
		 * ...and as purged ones when no inserter can place them any more:
		 * an insert that died between taking its slots and writing its
		 * tuples (a crash, a disk-full error) leaves slots with no tuple,
		 * aborted inserts by definition.  Inserters hold RowExclusiveLock
		 * on the spindle from taking their slots to their transaction's
		 * end, so if ShareLock can be had at once, none is running: count
		 * again under it (one that ended during the first count may have
		 * written its tuples behind it).  Only spindles with such slots
		 * pay for it, and never wait; not on a standby, where nobody
		 * inserts and ShareLock is not allowed.
		 */
		if (used > counts.events && !RecoveryInProgress() &&
			ConditionalLockRelationOid(sp->segment, ShareLock))
		{
			spindle_count_segment(seg, &counts);
			events[i] = Max(counts.events, used);
			purged[i] = counts.purged + Max(used - counts.events, 0);
			UnlockRelationOid(sp->segment, ShareLock);
		}
		bytes[i] = DatumGetInt64(DirectFunctionCall1(pg_total_relation_size,
													 ObjectIdGetDatum(sp->segment)));
		relation_close(seg, AccessShareLock);
		if (events[i] > 0)
			any_events = true;
	}

	for (i = 0; i < n; i++)
	{
		SpindleEntry *sp = &dir->spindles[i];
		Datum		values[SPINDLE_INFO_COLS];
		bool		nulls[SPINDLE_INFO_COLS] = {0};
		const char *state;

		if (!exists[i])
			continue;
		if (full[i])
			state = "full";
		else if (events[i] > 0)
			state = "open";
		else if (!any_events && !open_given)
			state = "open";		/* an empty table's first spindle */
		else
			state = "ready";
		if (strcmp(state, "open") == 0)
			open_given = true;

		values[0] = ObjectIdGetDatum(RelationGetRelid(facade));
		values[1] = Int64GetDatum(sp->spindle_no);
		values[2] = CStringGetTextDatum(state);
		/* what it may hold (0: a single spindle, unbounded) */
		values[3] = Int64GetDatum(sp->capacity > 0 ?
								  spindle_effective_capacity(sp) : 0);
		values[4] = Int64GetDatum(events[i]);
		values[5] = Int64GetDatum(purged[i]);
		values[6] = Int64GetDatum(bytes[i]);
		values[7] = TimestampTzGetDatum(sp->created_at);
		if (sp->filled_at != 0)
			values[8] = TimestampTzGetDatum(sp->filled_at);
		else if (full[i] && filled[i] != 0)
			values[8] = TimestampTzGetDatum(filled[i]);
		else
			nulls[8] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	spindle_directory_release(dir);
}

/*
 * spindle._spindle_info(): one row per existing spindle of every spindle
 * table of this database that the caller may read.
 */
Datum
spindle_spindle_info(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	List	   *tables;
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);
	tables = spindle_catalog_tables();
	foreach(lc, tables)
	{
		Oid			relid = lfirst_oid(lc);
		bool		is_missing = false;
		Relation	rel;

		/* rights first, then the lock: never wait for a table not shown */
		if (pg_class_aclcheck_ext(relid, GetUserId(), ACL_SELECT,
								  &is_missing) != ACLCHECK_OK)
			continue;
		/*
		 * Never wait behind a lock another session holds on the table
		 * (ACCESS EXCLUSIVE: DDL, or TRUNCATE in progress): such a table is
		 * left out of this read of the view.
		 */
		if (!ConditionalLockRelationOid(relid, AccessShareLock))
			continue;
		rel = try_relation_open(relid, NoLock);
		if (rel == NULL)
		{
			UnlockRelationOid(relid, AccessShareLock);
			continue;
		}
		if (spindle_is_facade(rel))
			emit_table(rel, rsinfo);
		relation_close(rel, AccessShareLock);
	}
	return (Datum) 0;
}

/*
 * spindle._table_options(rel): the table's events_per_spindle and
 * time_to_live.
 */
Datum
spindle_table_options(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	TupleDesc	tupdesc;
	Datum		values[2];
	bool		nulls[2] = {0};
	bool		found;
	Interval	ttl;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	values[0] = Int64GetDatum(spindle_rel_capacity_option(relid, &found));
	if (!found)
		nulls[0] = true;
	if (spindle_rel_ttl_option(relid, &ttl))
	{
		Interval   *p = palloc(sizeof(Interval));

		*p = ttl;
		values[1] = IntervalPGetDatum(p);
	}
	else
		nulls[1] = true;
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
