/*-------------------------------------------------------------------------
 *
 * views.c
 *	  Set-returning functions behind the monitoring views spindle.spindles,
 *	  spindle.tables and spindle.queues.
 *
 * Cost: O(number of spindles).  The spindles of a table come from its
 * catalog rows (spindle.spindle_catalog, read with the latest snapshot);
 * events appended and purged from shared memory (slots.c's slot counters
 * and counters.c's purge counters); sizes from the file system (stat() of
 * the relation's files, as pg_relation_size does, found through the
 * syscache); queue figures from the consumer state (queue_state.c).  No
 * spindle page is read, except once to build the counters of a spindle
 * shared memory does not know (after a restart or an eviction, see
 * counters.c), and on a hot standby, where a spindle is counted again
 * from disk whenever WAL was replayed since its last count (unless it is
 * full and fully purged).
 *
 * Locks: none on a spindle table nor on its spindles, so no view waits
 * behind a lock another session holds.  A caller sees only the spindle
 * tables it has SELECT privilege on (checked by OID in the syscache); a
 * table or spindle dropped concurrently disappears from the output.  The
 * counter builds take their locks conditionally (counters.c).
 *
 * The count behind a queue's max_depth (queue_count_for_limit, the queue
 * layer's spindle_queue_count_hook, called by enqueue at the limit with
 * the queue's table locked): the same unpurged, leased and claimed figures
 * as spindle.queues, the spindles taken from the table's cached directory
 * and without their sizes, so it reads no catalog and stats no file.  It
 * never fails: a spindle whose counter cannot be built now (its lock is
 * held by a writer, or by a prepared transaction after a restart) is
 * counted from its pages under AccessShareLock (counters.c,
 * spindle_counters_count_now), the one place where this file may wait
 * for a lock (a drop or detach of that spindle).
 *
 * drop_blocked_by: a full spindle whose every event is purged waits for
 * the removal horizon to pass its newest purger (counters.c keeps its
 * xid).  What holds the horizon is found as VACUUM's horizon is made: a
 * backend of this database (or a walsender, for hot-standby feedback)
 * whose xmin or xid is at or before that xid, a replication slot's xmin,
 * or a prepared transaction's xid; the oldest one is named.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>
#include <unistd.h>

#include "access/htup_details.h"
#include "access/relation.h"
#include "access/transam.h"
#include "access/xlog.h"
#include "access/xlogrecovery.h"
#include "catalog/pg_class.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_tablespace_d.h"
#include "common/relpath.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "admin/spindle_admin.h"


PG_FUNCTION_INFO_V1(spindle_spindle_info);
PG_FUNCTION_INFO_V1(spindle_table_options);
PG_FUNCTION_INFO_V1(spindle_queue_info);

#define SPINDLE_INFO_COLS 11
#define QUEUE_INFO_COLS 12


/* One spindle_catalog row. */
typedef struct CatRow
{
	Oid			relation;
	SpindleEntry sp;
} CatRow;

/* What the views show of one spindle. */
typedef struct Figures
{
	bool		exists;
	bool		known;			/* events and purged are known */
	int64		events;
	int64		purged;
	bool		full;
	TimestampTz filled_at;
	TransactionId latest_purger;
	int64		size;			/* bytes, as pg_total_relation_size */
} Figures;

/* Something that holds back the removal horizon. */
typedef struct Holder
{
	TransactionId xmin;
	char	   *label;
	int			rank;
} Holder;

typedef struct Holders
{
	bool		loaded;
	int			n;
	Holder	   *items;
} Holders;

/*
 * The live spindles of every spindle table (or of one, if relid is valid),
 * ordered by table and number, with the latest snapshot.
 */
static CatRow *
load_catalog(Oid relid, int *nrows)
{
	SpindleSpi	spi;
	CatRow	   *rows;
	uint64		i;
	uint64		n;
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(relid)};

	spindle_spi_begin(&spi);
	n = spindle_spi_exec("SELECT relation, spindle_no, segment, capacity, vbase, vcount,"
						 " created_at, filled_at, first_no, generation"
						 " FROM spindle.spindle_catalog"
						 " WHERE dropped_at IS NULL AND relation OPERATOR(pg_catalog.<>) 0"
						 " AND ($1 OPERATOR(pg_catalog.=) 0 OR relation OPERATOR(pg_catalog.=) $1)"
						 " ORDER BY relation, spindle_no",
						 1, types, values, NULL, true);
	rows = MemoryContextAllocZero(spi.outer, sizeof(CatRow) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	td = SPI_tuptable->tupdesc;
		bool		isnull;
		CatRow	   *r = &rows[i];

		r->relation = DatumGetObjectId(SPI_getbinval(tup, td, 1, &isnull));
		r->sp.spindle_no = DatumGetInt64(SPI_getbinval(tup, td, 2, &isnull));
		r->sp.segment = DatumGetObjectId(SPI_getbinval(tup, td, 3, &isnull));
		r->sp.capacity = DatumGetInt64(SPI_getbinval(tup, td, 4, &isnull));
		r->sp.vbase = DatumGetInt64(SPI_getbinval(tup, td, 5, &isnull));
		r->sp.vcount = DatumGetInt64(SPI_getbinval(tup, td, 6, &isnull));
		r->sp.created_at = DatumGetTimestampTz(SPI_getbinval(tup, td, 7, &isnull));
		r->sp.filled_at = DatumGetTimestampTz(SPI_getbinval(tup, td, 8, &isnull));
		if (isnull)
			r->sp.filled_at = 0;
		/* counts from disk map events to msg_ids (the consume log) */
		r->sp.first_no = DatumGetInt64(SPI_getbinval(tup, td, 9, &isnull));
		if (isnull)
			r->sp.first_no = 0; /* an annex: no event numbers */
		r->sp.generation = DatumGetInt32(SPI_getbinval(tup, td, 10, &isnull));
	}
	spindle_spi_end(&spi);
	*nrows = (int) n;
	return rows;
}

/* May the caller read this table?  False also if it is gone. */
static bool
may_read(Oid relid)
{
	bool		is_missing = false;

	return pg_class_aclcheck_ext(relid, GetUserId(), ACL_SELECT,
								 &is_missing) == ACLCHECK_OK && !is_missing;
}

/* Bytes of one fork of a relation's files, by stat(), no lock. */
static int64
fork_size(RelFileNode *rnode, BackendId backend, ForkNumber forknum)
{
	int64		total = 0;
	char	   *path = relpathbackend(*rnode, backend, forknum);
	int			segno;

	for (segno = 0;; segno++)
	{
		struct stat st;
		char		pathname[MAXPGPATH + 16];

		if (segno == 0)
			snprintf(pathname, sizeof(pathname), "%s", path);
		else
			snprintf(pathname, sizeof(pathname), "%s.%d", path, segno);
		if (stat(pathname, &st) < 0)
			break;				/* no more segments, or dropped meanwhile */
		total += st.st_size;
	}
	pfree(path);
	return total;
}

/*
 * Bytes of all forks of a relation (0 if it is gone), no lock; *main_size
 * (if not NULL) gets its main fork's.
 */
static int64
rel_files_size(Oid relid, Oid *toastrelid, int64 *main_size)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Form_pg_class cls;
	RelFileNode rnode;
	BackendId	backend;
	int64		total = 0;
	ForkNumber	fork;

	if (toastrelid)
		*toastrelid = InvalidOid;
	if (main_size)
		*main_size = 0;
	if (!HeapTupleIsValid(tup))
		return 0;
	cls = (Form_pg_class) GETSTRUCT(tup);
	rnode.spcNode = OidIsValid(cls->reltablespace) ? cls->reltablespace :
		MyDatabaseTableSpace;
	rnode.dbNode = rnode.spcNode == GLOBALTABLESPACE_OID ? InvalidOid :
		MyDatabaseId;
	rnode.relNode = cls->relfilenode;
	backend = cls->relpersistence == RELPERSISTENCE_TEMP ? MyBackendId :
		InvalidBackendId;
	if (toastrelid)
		*toastrelid = cls->reltoastrelid;
	ReleaseSysCache(tup);
	if (!OidIsValid(rnode.relNode))
		return 0;				/* mapped: not a spindle */
	for (fork = 0; fork <= MAX_FORKNUM; fork++)
	{
		int64		n = fork_size(&rnode, backend, fork);

		if (fork == MAIN_FORKNUM && main_size)
			*main_size = n;
		total += n;
	}
	return total;
}

/*
 * A spindle's size: its relation, its TOAST table and the TOAST table's
 * index, as pg_total_relation_size counts them, without opening anything
 * (the TOAST index is found by name, pg_toast.<TOAST table>_index, as
 * create_toast_table names it, through the syscache).
 */
static int64
spindle_size(Oid segment, int64 *main_size)
{
	Oid			toast;
	int64		total = rel_files_size(segment, &toast, main_size);

	if (OidIsValid(toast))
	{
		char	   *toastname = get_rel_name(toast);

		total += rel_files_size(toast, NULL, NULL);
		if (toastname != NULL)
		{
			char	   *indexname = psprintf("%s_index", toastname);
			Oid			index = get_relname_relid(indexname,
												  PG_TOAST_NAMESPACE);

			if (OidIsValid(index))
				total += rel_files_size(index, NULL, NULL);
			pfree(indexname);
			pfree(toastname);
		}
	}
	return total;
}

/*
 * Fill in the fill times spindle_catalog records now for the spindles of
 * relation rows[start..end) whose figures figs[] say full with none, read
 * with the latest snapshot in one statement.  The view read the catalog
 * before the worker's record of such a time committed; the worker lets the
 * slot counter that knew the time go only once that record commits
 * (maintenance.c), so by the time the view finds the counter gone, this
 * read sees the record (review turn 3, q30: "full" with a NULL filled_at
 * in a few runs in 30 under load).  Nothing is read if no such spindle.
 */
static void
recorded_filled_times(CatRow *rows, int start, int end, Figures *figs)
{
	SpindleSpi	spi;
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(rows[start].relation)};
	uint64		n;
	int			i = start;

	while (i < end && !(figs[i - start].full && figs[i - start].filled_at == 0))
		i++;
	if (i == end)
		return;
	spindle_spi_begin(&spi);
	n = spindle_spi_exec("SELECT spindle_no, filled_at FROM spindle.spindle_catalog"
						 " WHERE relation OPERATOR(pg_catalog.=) $1"
						 " AND filled_at IS NOT NULL ORDER BY spindle_no",
						 1, types, values, NULL, true);
	i = start;
	for (uint64 k = 0; k < n; k++)
	{
		HeapTuple	tup = SPI_tuptable->vals[k];
		TupleDesc	td = SPI_tuptable->tupdesc;
		bool		isnull;
		int64		no = DatumGetInt64(SPI_getbinval(tup, td, 1, &isnull));
		TimestampTz at = DatumGetTimestampTz(SPI_getbinval(tup, td, 2, &isnull));

		/* both in spindle_no order */
		while (i < end && rows[i].sp.spindle_no < no)
			i++;
		if (i < end && rows[i].sp.spindle_no == no &&
			figs[i - start].full && figs[i - start].filled_at == 0)
			figs[i - start].filled_at = at;
	}
	spindle_spi_end(&spi);
}

/*
 * The figures of spindle rows[i] (of table facade; rows[i + 1] is the next
 * spindle if it belongs to the same table).  Builds the counters from disk
 * if shared memory does not know them (counters.c); if that cannot be done
 * now without waiting, events and purged are unknown this time.  The size
 * (a stat() of each of its files) only if sizes.
 */
static void
spindle_figures_ext(CatRow *rows, int nrows, int i, bool sizes, Figures *f)
{
	CatRow	   *r = &rows[i];
	const SpindleEntry *next = NULL;
	SpindleCountersInfo ci;
	bool		have;
	bool		recovery = RecoveryInProgress();
	bool		usable;
	int64		main_size;

	/* the event spindle after it (an annex fills on its own: none) */
	for (int j = i + 1; !spindle_is_annex(&r->sp) && j < nrows &&
		 rows[j].relation == r->relation; j++)
	{
		if (!spindle_is_annex(&rows[j].sp))
		{
			next = &rows[j].sp;
			break;
		}
	}
	memset(f, 0, sizeof(*f));
	f->exists = SearchSysCacheExists1(RELOID, ObjectIdGetDatum(r->sp.segment));
	if (!f->exists)
		return;					/* dropped meanwhile */
	have = spindle_counters_get(r->relation, &r->sp, &ci);
	usable = have && ci.appended >= 0 && ci.in_recovery == recovery;
	/* stat() of its files only for the views, or to tell it never held one */
	main_size = -1;
	if (sizes)
		f->size = spindle_size(r->sp.segment, &main_size);
	if (!usable && ci.appended < 0 && r->sp.filled_at == 0 && main_size < 0)
		(void) spindle_size(r->sp.segment, &main_size);
	if (!usable && ci.appended < 0 && r->sp.filled_at == 0 && main_size == 0)
	{
		/*
		 * No slot counter and no page: no event was ever placed in it, and
		 * none reserved since the server started (a reservation makes a
		 * slot counter).  A ready spindle, typically.
		 */
		f->known = true;
		return;
	}
	if (!usable || ci.stale || ci.inexact ||
		(recovery && ci.built_lsn != GetXLogReplayRecPtr(NULL) &&
		 !(ci.full && ci.appended >= 0 && ci.purged >= ci.appended)))
	{
		if (spindle_counters_build(r->relation, &r->sp, next))
		{
			have = spindle_counters_get(r->relation, &r->sp, &ci);
			usable = have && ci.appended >= 0 && ci.in_recovery == recovery;
		}
		else if (ci.inexact)
			usable = false;		/* unknown until it can be counted */
	}
	f->full = ci.full || r->sp.filled_at != 0;
	f->filled_at = r->sp.filled_at != 0 ? r->sp.filled_at :
		(ci.full ? ci.filled_at : 0);
	if (!usable)
		return;
	f->known = true;
	f->events = ci.appended;
	/* an in-flight reservation may make purged pass what is shown */
	f->purged = Min(ci.purged, ci.appended);
	f->latest_purger = ci.latest_purger;
}

/* spindle_figures_ext with the spindle's size (the views) */
static void
spindle_figures(CatRow *rows, int nrows, int i, Figures *f)
{
	spindle_figures_ext(rows, nrows, i, true, f);
}

/*
 * Add one holder.  rank breaks ties between holders of the same xmin: a
 * snapshot's xmin is often a prepared transaction's or a slot's, which is
 * then the cause (prepared 0, slot 1, walsender 2, backend 3).
 */
static void
add_holder(Holders *h, TransactionId xmin, char *label, int rank)
{
	if (!TransactionIdIsNormal(xmin))
		return;
	h->items = h->items == NULL ? palloc(sizeof(Holder) * 8) :
		repalloc(h->items, sizeof(Holder) * (h->n + 8));
	h->items[h->n].xmin = xmin;
	h->items[h->n].label = label;
	h->items[h->n].rank = rank;
	h->n++;
}

/* What may hold back the removal horizon of this database right now. */
static void
load_holders(Holders *h)
{
	SpindleSpi	spi;
	uint64		n;
	uint64		i;
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(MyDatabaseId)};
	MemoryContext outer = CurrentMemoryContext;

	h->loaded = true;
	spindle_spi_begin(&spi);
	n = spindle_spi_exec("SELECT pid, backend_xid, backend_xmin,"
						 " backend_type OPERATOR(pg_catalog.=) 'walsender',"
						 " pg_catalog.round(pg_catalog.date_part('epoch', pg_catalog.now() OPERATOR(pg_catalog.-) xact_start))::pg_catalog.int8::pg_catalog.text"
						 " FROM pg_catalog.pg_stat_activity"
						 " WHERE (datid OPERATOR(pg_catalog.=) $1"
						 "        OR backend_type OPERATOR(pg_catalog.=) 'walsender')"
						 " AND (backend_xid IS NOT NULL OR backend_xmin IS NOT NULL)",
						 1, types, values, NULL, true);
	for (i = 0; i < n; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	td = SPI_tuptable->tupdesc;
		bool		isnull;
		int			pid = DatumGetInt32(SPI_getbinval(tup, td, 1, &isnull));
		TransactionId xid = InvalidTransactionId;
		TransactionId xmin = InvalidTransactionId;
		bool		walsender;
		char	   *age;
		MemoryContext old;
		char	   *label;
		Datum		d;

		d = SPI_getbinval(tup, td, 2, &isnull);
		if (!isnull)
			xid = DatumGetTransactionId(d);
		d = SPI_getbinval(tup, td, 3, &isnull);
		if (!isnull)
			xmin = DatumGetTransactionId(d);
		if (!TransactionIdIsValid(xmin) ||
			(TransactionIdIsValid(xid) && TransactionIdPrecedes(xid, xmin)))
			xmin = xid;
		walsender = DatumGetBool(SPI_getbinval(tup, td, 4, &isnull));
		age = SPI_getvalue(tup, td, 5);
		old = MemoryContextSwitchTo(outer);
		if (walsender)
			label = psprintf("hot standby feedback: walsender pid %d, xmin %u",
							 pid, xmin);
		else
			label = psprintf("backend pid %d: snapshot xmin %u, transaction open %s s",
							 pid, xmin, age ? age : "?");
		add_holder(h, xmin, label, walsender ? 2 : 3);
		MemoryContextSwitchTo(old);
	}
	n = spindle_spi_exec("SELECT slot_name::pg_catalog.text, xmin FROM pg_catalog.pg_replication_slots"
						 " WHERE xmin IS NOT NULL",
						 0, NULL, NULL, NULL, true);
	for (i = 0; i < n; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	td = SPI_tuptable->tupdesc;
		bool		isnull;
		char	   *name = SPI_getvalue(tup, td, 1);
		TransactionId xmin = DatumGetTransactionId(SPI_getbinval(tup, td, 2, &isnull));
		MemoryContext old = MemoryContextSwitchTo(outer);

		add_holder(h, xmin, psprintf("replication slot \"%s\": xmin %u",
									 name, xmin), 1);
		MemoryContextSwitchTo(old);
	}
	n = spindle_spi_exec("SELECT gid, transaction FROM pg_catalog.pg_prepared_xacts"
						 " WHERE database OPERATOR(pg_catalog.=) pg_catalog.current_database()",
						 0, NULL, NULL, NULL, true);
	for (i = 0; i < n; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	td = SPI_tuptable->tupdesc;
		bool		isnull;
		char	   *gid = SPI_getvalue(tup, td, 1);
		TransactionId xid = DatumGetTransactionId(SPI_getbinval(tup, td, 2, &isnull));
		MemoryContext old = MemoryContextSwitchTo(outer);

		add_holder(h, xid, psprintf("prepared transaction \"%s\": xid %u",
									gid, xid), 0);
		MemoryContextSwitchTo(old);
	}
	spindle_spi_end(&spi);
}

/*
 * What keeps a full, fully purged spindle whose newest purger is xid from
 * being dropped: the oldest holder at or before xid, or NULL.
 */
static char *
blocked_by(Holders *h, TransactionId xid)
{
	Holder	   *best = NULL;
	int			i;

	if (!TransactionIdIsNormal(xid))
		return NULL;
	if (!h->loaded)
		load_holders(h);
	for (i = 0; i < h->n; i++)
		if (TransactionIdPrecedesOrEquals(h->items[i].xmin, xid) &&
			(best == NULL ||
			 TransactionIdPrecedes(h->items[i].xmin, best->xmin) ||
			 (h->items[i].xmin == best->xmin &&
			  h->items[i].rank < best->rank)))
			best = &h->items[i];
	return best ? best->label : NULL;
}

/*
 * spindle._spindle_info(): one row per existing spindle of every spindle
 * table of this database that the caller may read.
 */
Datum
spindle_spindle_info(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			nrows;
	CatRow	   *rows;
	Holders		holders = {0};
	int			start;

	InitMaterializedSRF(fcinfo, 0);
	rows = load_catalog(InvalidOid, &nrows);
	for (start = 0; start < nrows;)
	{
		Oid			relid = rows[start].relation;
		int			end = start;
		Figures    *figs;
		bool		any_events = false;
		bool		open_given = false;
		int			i;

		while (end < nrows && rows[end].relation == relid)
			end++;
		/* rights first, by OID: never a lock, never a wait */
		if (!may_read(relid))
		{
			start = end;
			continue;
		}
		figs = palloc0(sizeof(Figures) * (end - start));
		for (i = start; i < end; i++)
		{
			Figures    *f = &figs[i - start];

			spindle_figures(rows, nrows, i, f);
			if (f->exists && !spindle_is_annex(&rows[i].sp) &&
				(f->full || (f->known && f->events > 0)))
				any_events = true;
		}
		recorded_filled_times(rows, start, end, figs);
		for (i = start; i < end; i++)
		{
			Figures    *f = &figs[i - start];
			SpindleEntry *sp = &rows[i].sp;
			Datum		values[SPINDLE_INFO_COLS];
			bool		nulls[SPINDLE_INFO_COLS] = {0};
			const char *state;
			char	   *blocker = NULL;

			if (!f->exists)
				continue;
			if (spindle_is_annex(sp))
				state = "annex";	/* never the open one: kept apart */
			else if (f->full)
				state = "full";
			else if (f->known && f->events > 0)
				state = "open";
			else if (!any_events && !open_given)
				state = "open";	/* an empty table's first spindle */
			else if (!f->known && !open_given)
				state = "open";	/* not counted now: say what is likely */
			else
				state = "ready";
			if (strcmp(state, "open") == 0)
				open_given = true;

			values[0] = ObjectIdGetDatum(relid);
			values[1] = Int64GetDatum(sp->spindle_no);
			values[2] = CStringGetTextDatum(state);
			/* what it may hold (0: a single spindle, unbounded) */
			values[3] = Int64GetDatum(sp->capacity > 0 ?
									  spindle_effective_capacity(sp) : 0);
			if (f->known)
			{
				values[4] = Int64GetDatum(f->events);
				values[5] = Int64GetDatum(f->purged);
			}
			else
				nulls[4] = nulls[5] = true;
			values[6] = Int64GetDatum(f->size);
			values[7] = TimestampTzGetDatum(sp->created_at);
			if (f->filled_at != 0)
				values[8] = TimestampTzGetDatum(f->filled_at);
			else
				nulls[8] = true;
			if (f->full && f->known && f->events > 0 &&
				f->purged >= f->events)
				blocker = blocked_by(&holders, f->latest_purger);
			if (blocker != NULL)
				values[9] = CStringGetTextDatum(blocker);
			else
				nulls[9] = true;
			/* 0: an event spindle; 1..: an annex of that generation */
			values[10] = Int32GetDatum(sp->generation);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
								 values, nulls);
		}
		pfree(figs);
		start = end;
	}
	return (Datum) 0;
}

/* RETURNED items of a queue the view looks at for leases handed back */
#define MAX_RETURNED_LOOKED_AT 64

/*
 * How many ids of [start, end) of queue table relid are under a parked
 * lease that has not ended by now: an item to examine again over them
 * (a lease handed back by a failed statement) means they are not leased.
 */
static int64
leased_within(Oid relid, int64 start, int64 end, TimestampTz now)
{
	int			n;
	int64	   *ranges = spindle_park_leased(relid, start, end, now, &n);
	int64		total = 0;
	int			i;

	for (i = 0; i < n; i++)
		total += ranges[2 * i + 1] - ranges[2 * i];
	if (ranges != NULL)
		pfree(ranges);
	return total;
}

/* What the consumer state and the parked runs of a queue say of it. */
typedef struct QueueFigs
{
	int64		leased;			/* parked leases not ended nor handed back */
	TimestampTz leases_until;	/* the earliest end of a parked lease */
	int64		delayed;		/* parked delayed events */
	int64		claimed;		/* in CLAIM items: being consumed */
	int64		pending;		/* PENDING items and parked pending runs */
	QueueState *qs;				/* its state, or NULL */
} QueueFigs;

/*
 * Fill *f for queue table relid: the parked runs (a walk of the consumer
 * relation's tree 0 per kind; only the leases unless all) and the items
 * of its consumer state (under the state's LWLock, shared; no buffer is
 * read under it).
 */
static void
queue_shared_figures(Oid relid, TimestampTz now, bool all, QueueFigs *f)
{
	int64		returned[MAX_RETURNED_LOOKED_AT][2];
	int			nreturned = 0;
	int			i;
	QueueState *qs;

	memset(f, 0, sizeof(*f));
	/* delayed and leased events are parked on disk (queue_parked.c) */
	f->leased = spindle_park_count(relid, SPINDLE_RUN_LEASED, now,
								   &f->leases_until);
	if (all)
	{
		f->delayed = spindle_park_count(relid, SPINDLE_RUN_DELAYED,
										DT_NOBEGIN, NULL);
		/* pending on open producers, parked when too many */
		f->pending = spindle_park_count(relid, SPINDLE_RUN_PENDING,
										DT_NOBEGIN, NULL);
	}
	qs = f->qs = spindle_queue_state(relid);
	if (qs != NULL)
	{
		dlist_iter	iter;

		LWLockAcquire(spindle_queue_lock(qs), LW_SHARED);
		if (qs->relid == relid && qs->dbid == MyDatabaseId)
			dlist_foreach(iter, &qs->items)
			{
				QueueItem  *item = dlist_container(QueueItem, node, iter.cur);
				int64		n = item->end - item->start;

				switch ((QueueItemKind) item->kind)
				{
					case QITEM_RETURNED:
						/* maybe a lease handed back early (undo_leases) */
						if (nreturned < MAX_RETURNED_LOOKED_AT)
						{
							returned[nreturned][0] = item->start;
							returned[nreturned][1] = item->end;
							nreturned++;
						}
						break;
					case QITEM_CLAIM:
						f->claimed += n;
						break;
					case QITEM_PENDING:
						f->pending += n;
						break;
					default:
						break;
				}
			}
		LWLockRelease(spindle_queue_lock(qs));
	}
	for (i = 0; i < nreturned; i++)
		f->leased -= leased_within(relid, returned[i][0], returned[i][1], now);
	f->leased = Max(f->leased, 0);
}

/*
 * Events of queue table relid not purged (appended - purged over its
 * spindles, from the counters; in-flight inserts included), and the
 * enqueued_at of its oldest spindle with some (0: none).  False if a
 * spindle's counter is not known right now -- unless count_now, where such
 * a spindle is counted from its pages instead (spindle_counters_count_now:
 * the limit of a queue must have a figure, and an exact one, see
 * queue_count_for_limit), so the answer is always true.
 */
static bool
rows_unpurged(CatRow *rows, int nrows, bool count_now, int64 *unpurged,
			  TimestampTz *oldest)
{
	bool		known = true;
	int			i;

	*unpurged = 0;
	*oldest = 0;
	for (i = 0; i < nrows; i++)
	{
		Figures		f;

		spindle_figures_ext(rows, nrows, i, false, &f);
		if (!f.exists)
			continue;
		if (!f.known && count_now)
		{
			f.known = true;
			f.purged = 0;
			f.events = spindle_counters_count_now(rows[i].relation,
												  &rows[i].sp);
		}
		if (!f.known)
		{
			known = false;
			continue;
		}
		if (f.events > f.purged)
		{
			*unpurged += f.events - f.purged;
			if (*oldest == 0)
				*oldest = rows[i].sp.created_at;
		}
	}
	return known;
}

/* rows_unpurged of queue table relid, its spindles read from the catalog */
static bool
queue_unpurged(Oid relid, int64 *unpurged, TimestampTz *oldest)
{
	int			nrows;
	CatRow	   *rows = load_catalog(relid, &nrows);
	bool		known = rows_unpurged(rows, nrows, false, unpurged, oldest);

	pfree(rows);
	return known;
}

/*
 * spindle_queue_count_hook (queue_limits.c): what counts against the
 * max_depth of queue table relid, its deliverable, delayed and in-flight
 * events (*counted: not purged, minus leased and being consumed), and all
 * its events not purged (*unpurged), the leases not ended (*leased) and
 * the earliest end of a parked lease (*leases_until: the leases counted,
 * and those handed back, last at least until then).  O(spindles + parked
 * runs), plus a
 * read of the pages of each spindle whose counter cannot be built now (a
 * writer or a prepared transaction holds it): an enqueue must not fail
 * for want of a count, and an upper bound (its slots, its capacity) would
 * make drop_oldest drop more than it must.  Always true.
 */
static bool
queue_count_for_limit(Oid relid, int64 *counted, int64 *unpurged,
					  int64 *leased, TimestampTz *leases_until)
{
	TimestampTz oldest;
	QueueFigs	sh;
	Relation	rel;
	SpindleDirectory *dir;
	CatRow	   *rows;
	int			i;
	bool		known;

	/* the caller holds the table's lock; its spindles from the directory */
	rel = relation_open(relid, AccessShareLock);
	dir = spindle_directory_acquire(rel);
	/* the annexes' copies too, as spindle.queues counts them */
	rows = palloc(sizeof(CatRow) * Max(spindle_dir_nall(dir), 1));
	for (i = 0; i < spindle_dir_nall(dir); i++)
	{
		rows[i].relation = relid;
		rows[i].sp = *spindle_dir_entry(dir, i);
	}
	known = rows_unpurged(rows, spindle_dir_nall(dir), true, unpurged,
						  &oldest);
	spindle_directory_release(dir);
	relation_close(rel, AccessShareLock);
	pfree(rows);
	if (!known)
		return false;
	queue_shared_figures(relid, GetCurrentTimestamp(), false, &sh);
	*counted = Max(*unpurged - sh.leased - sh.claimed, 0);
	*leased = Min(sh.leased, *unpurged);
	*leases_until = sh.leases_until;
	return true;
}

/* Called from _PG_init: the queue layer counts depths through us. */
void
spindle_views_register_hooks(void)
{
	spindle_queue_count_hook = queue_count_for_limit;
}

/*
 * spindle._queue_info(): one row per queue of spindle.queue_catalog whose
 * table the caller may read.
 */
Datum
spindle_queue_info(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SpindleSpi	spi;
	uint64		nq;
	uint64		q;
	char	  **names;
	Oid		   *relids;
	int64	   *max_depths;
	char	  **overflows;
	TimestampTz now = GetCurrentTimestamp();

	InitMaterializedSRF(fcinfo, 0);
	spindle_spi_begin(&spi);
	nq = spindle_spi_exec("SELECT queue_name, relation::pg_catalog.oid,"
						  " max_depth, overflow"
						  " FROM spindle.queue_catalog ORDER BY queue_name",
						  0, NULL, NULL, NULL, true);
	names = MemoryContextAlloc(spi.outer, sizeof(char *) * Max(nq, 1));
	relids = MemoryContextAlloc(spi.outer, sizeof(Oid) * Max(nq, 1));
	max_depths = MemoryContextAlloc(spi.outer, sizeof(int64) * Max(nq, 1));
	overflows = MemoryContextAlloc(spi.outer, sizeof(char *) * Max(nq, 1));
	for (q = 0; q < nq; q++)
	{
		bool		isnull;
		HeapTuple	tup = SPI_tuptable->vals[q];
		TupleDesc	td = SPI_tuptable->tupdesc;
		Datum		d;

		names[q] = MemoryContextStrdup(spi.outer, SPI_getvalue(tup, td, 1));
		relids[q] = DatumGetObjectId(SPI_getbinval(tup, td, 2, &isnull));
		d = SPI_getbinval(tup, td, 3, &isnull);
		max_depths[q] = isnull ? 0 : DatumGetInt64(d);
		overflows[q] = MemoryContextStrdup(spi.outer, SPI_getvalue(tup, td, 4));
	}
	spindle_spi_end(&spi);

	for (q = 0; q < nq; q++)
	{
		Datum		values[QUEUE_INFO_COLS];
		bool		nulls[QUEUE_INFO_COLS] = {0};
		int64		unpurged;
		TimestampTz oldest;
		bool		known;
		QueueFigs sh;
		QueueState *qs;

		if (!may_read(relids[q]))
			continue;
		known = queue_unpurged(relids[q], &unpurged, &oldest);
		queue_shared_figures(relids[q], now, true, &sh);
		qs = sh.qs;
		values[0] = CStringGetTextDatum(names[q]);
		values[1] = ObjectIdGetDatum(relids[q]);
		if (known)
			values[2] = Int64GetDatum(Max(unpurged - sh.leased - sh.delayed -
										  sh.claimed - sh.pending, 0));
		else
			nulls[2] = true;
		values[3] = Int64GetDatum(sh.leased);
		values[4] = Int64GetDatum(sh.delayed);
		if (oldest != 0)
		{
			Interval   *age = DatumGetIntervalP(DirectFunctionCall2(timestamp_mi,
																	TimestampTzGetDatum(now),
																	TimestampTzGetDatum(oldest)));

			values[5] = IntervalPGetDatum(age);
		}
		else
			nulls[5] = true;
		values[6] = Int64GetDatum(spindle_counters_table_inserts(relids[q]));
		values[7] = Int64GetDatum(qs ? (int64) pg_atomic_read_u64(&qs->dequeued) : 0);
		values[8] = Int64GetDatum(qs ? (int64) pg_atomic_read_u64(&qs->dead_lettered) : 0);
		values[9] = Int32GetDatum(qs ? (int32) pg_atomic_read_u32(&qs->waiting) : 0);
		if (max_depths[q] > 0)
			values[10] = Int64GetDatum(max_depths[q]);
		else
			nulls[10] = true;
		values[11] = CStringGetTextDatum(overflows[q]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
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
