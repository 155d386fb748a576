/*-------------------------------------------------------------------------
 *
 * verify.c
 *	  spindle.verify(rel): check every invariant of one spindle table, in
 *	  the spirit of contrib/amcheck, and return one text row per problem
 *	  (none when the table is healthy).
 *
 * What it checks (each message starts with the name of the check, then
 * the spindle and slot concerned):
 *
 *	directory	every live row of spindle.spindle_catalog names an existing
 *				relation of schema pg_spindle with access method
 *				spindle_segment and the spindle's name; every pg_spindle
 *				relation of the table (by name or by its dependency on the
 *				table) has a live row; each row's capacity and range are
 *				sane; this backend's cached directory agrees with the rows.
 *	ranges		the virtual slot ranges of the rows (live ones and dropped
 *				ones not yet forgotten) do not overlap.
 *	capacity	no event carries a slot number at or past its spindle's
 *				capacity, and no spindle holds more events than that.
 *	slot reuse	no two events of a spindle carry the same slot number k.
 *	slot map	every event's map entry points back at it, and every map
 *				entry of a spindle's range points at a line pointer of the
 *				spindle that holds its event (or was pruned: LP_DEAD); the
 *				map's directory names each of its pages once, with the tag
 *				the page carries, and no other (spindle_mapdir_check).
 *	append order no spindle after one that is not full has events (ready
 *				spindles have none); without a slot counter, a spindle
 *				with events after it is full (see still_unfilled).
 *				Annexes fill on their own and are left out of this
 *				check; every other check covers them.
 *	index		every entry of every index of the table is a virtual TID in
 *				the range of a live spindle whose map entry is set, of a
 *				dropped spindle not yet retired, or of a pending range (a
 *				creation not yet known committed); never in a range that
 *				nobody owns (a dropped spindle's retired range).
 *	queue		for a queue with consumer state in shared memory: every item
 *				(claim, lease, delayed, pending, returned) lies behind the
 *				head, within one spindle, and items do not overlap.
 *	consume log	for a queue with a consume log (tree 2 of its consumer
 *				relation): entries do not overlap; each covers only msg_ids
 *				the queue handed out (below the table's next event
 *				number, and in a live spindle's range below its slot
 *				count), none of a transaction that did not
 *				commit below the log's floor (committed ones there wait
 *				for the next settle: entry_committed); each
 *				xid is FROZEN or a normal xid not older than the consumer
 *				relation's relfrozenxid (clog keeps its status).
 *	free list	for a queue with a consumer relation: every page on its
 *				free list is a free page inside the relation, none is on
 *				it twice, and it holds the metapage's count (read under
 *				the metapage's share lock).
 *
 * Locks: AccessShareLock on the table, each spindle (one at a time) and
 * each index, so it runs beside producers, consumers and the worker.  Pages
 * are read under share buffer locks, one at a time; the consumer state
 * under its LWLock in shared mode, copied out at once.  The consume log
 * and its floor are read under the log's lock in exclusive mode (consumers
 * of the queue wait for the read; settle, which raises the floor and then
 * cuts the entries below it, skips the round), the spindles' slot counts
 * after it (an entry's ids were handed out before it was written).
 *
 * What it cannot see under concurrent changes, and how it stays quiet
 * about them: the directory rows are read with the latest snapshot after
 * the backend's own directory, so a spindle created or dropped meanwhile
 * is either seen or skipped (a spindle whose relation went away between
 * the read and the open is passed over).  An event whose inserting
 * transaction is still running may not have its map entry yet: it is not
 * reported.  A map entry without an event seen by the page walk is checked
 * again against the page it names (the event may have been placed after
 * the walk passed).  Index entries in no known range are checked again
 * against a fresh read of the rows and of the pending ranges before they
 * are reported.  The queue's state is a snapshot of one moment; claims of
 * running consumers are reported only if they break the head's rule.
 * Indexes whose access method allows no whole-index scan and is not hash
 * are not walked (a NOTICE says so), nor pages of a bitmap made lossy by
 * work_mem.
 *
 * Cost: one pass over every page of every spindle, one slot map read per
 * event and per index entry, and one walk of every index: as much as a
 * sequential scan plus an index scan of everything.
 *
 * spindle._verify_corrupt() breaks a table on purpose for the tests of
 * verify (superuser only, revoked from PUBLIC).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/amapi.h"
#include "access/genam.h"
#include "access/hash.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/transam.h"
#include "access/xact.h"
#include "access/xloginsert.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/tidbitmap.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/procarray.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "admin/spindle_admin.h"

PG_FUNCTION_INFO_V1(spindle_verify);
PG_FUNCTION_INFO_V1(spindle_verify_corrupt);

/* Stop listing problems after this many (a last row says so). */
#define VERIFY_MAX_REPORTS	10000

/* One row of spindle.spindle_catalog for the table. */
typedef struct VRow
{
	int64		spindle_no;
	Oid			segment;
	int64		capacity;
	int64		vbase;
	int64		vcount;
	bool		filled;			/* filled_at is set */
	bool		dropped;		/* dropped_at is set */
	bool		annex;			/* of kind 'annex': fills on its own */
	/* found by the spindle walk */
	bool		exists;
	bool		walked;			/* its events were read */
	bool		has_events;
	int64		used;			/* slots used on disk: highest k + 1 */
} VRow;

/* A range of slots somebody owns, for the index check. */
typedef struct VRange
{
	int64		vbase;
	int64		vcount;
	int			row;			/* into rows[], or -1 for a pending range */
} VRange;

typedef struct VerifyState
{
	ReturnSetInfo *rsinfo;
	Relation	facade;
	int			nreports;
	int			nrows;
	VRow	   *rows;			/* ordered by spindle_no */
	int			nranges;
	VRange	   *ranges;			/* the rows' ranges, ordered by vbase */
	int			npending;
	VRange	   *pending;		/* the metapage's pending ranges */
	int			nsuspects;		/* index entries in no known range */
	int			maxsuspects;
	ItemPointerData *suspects;
	Oid		   *suspect_index;
	bool	   *suspect_mapped;	/* else in no range */
	bool		holding;		/* keep reports in held, not yet out */
	List	   *held;
} VerifyState;

static void vreport(VerifyState *vs, const char *fmt,...) pg_attribute_printf(2, 3);

static void
put_report(VerifyState *vs, char *msg)
{
	Datum		value;
	bool		isnull = false;

	vs->nreports++;
	if (vs->nreports > VERIFY_MAX_REPORTS + 1)
		return;
	if (vs->nreports == VERIFY_MAX_REPORTS + 1)
		msg = psprintf("more than %d problems: the rest are not shown",
					   VERIFY_MAX_REPORTS);
	value = CStringGetTextDatum(msg);
	tuplestore_putvalues(vs->rsinfo->setResult, vs->rsinfo->setDesc,
						 &value, &isnull);
}

/* Report a problem, or hold it back while vs->holding (see verify). */
static void
vreport(VerifyState *vs, const char *fmt,...)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (;;)
	{
		va_list		args;
		int			needed;

		va_start(args, fmt);
		needed = appendStringInfoVA(&buf, fmt, args);
		va_end(args);
		if (needed == 0)
			break;
		enlargeStringInfo(&buf, needed);
	}
	if (vs->holding)
		vs->held = lappend(vs->held, buf.data);
	else
	{
		put_report(vs, buf.data);
		pfree(buf.data);
	}
}

/* Report what was held back, and stop holding. */
static void
flush_held(VerifyState *vs)
{
	ListCell   *lc;

	vs->holding = false;
	foreach(lc, vs->held)
		put_report(vs, (char *) lfirst(lc));
	list_free_deep(vs->held);
	vs->held = NIL;
}

static inline int64
row_capacity(const VRow *r)
{
	return r->capacity > 0 ? Min(r->capacity, r->vcount) : r->vcount;
}

/* ----------------------------------------------------------------
 * Reading the catalog
 * ----------------------------------------------------------------
 */

/* The table's rows of spindle.spindle_catalog, with the latest snapshot. */
static int
read_rows(Oid facade, VRow **out)
{
	SpindleSpi ctx;
	Oid			types[1] = {OIDOID};
	Datum		values[1];
	uint64		n;
	uint64		i;
	VRow	   *rows;

	values[0] = ObjectIdGetDatum(facade);
	spindle_spi_begin(&ctx);
	n = spindle_spi_exec("SELECT spindle_no, segment, capacity, vbase, vcount,"
						 " filled_at IS NOT NULL, dropped_at IS NOT NULL,"
						 " kind = 'annex'"
						 " FROM spindle.spindle_catalog WHERE relation = $1"
						 " ORDER BY spindle_no",
						 1, types, values, NULL, true);
	rows = MemoryContextAllocZero(ctx.outer, sizeof(VRow) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;

		rows[i].spindle_no = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
		rows[i].segment = DatumGetObjectId(SPI_getbinval(tup, desc, 2, &isnull));
		rows[i].capacity = DatumGetInt64(SPI_getbinval(tup, desc, 3, &isnull));
		rows[i].vbase = DatumGetInt64(SPI_getbinval(tup, desc, 4, &isnull));
		rows[i].vcount = DatumGetInt64(SPI_getbinval(tup, desc, 5, &isnull));
		rows[i].filled = DatumGetBool(SPI_getbinval(tup, desc, 6, &isnull));
		rows[i].dropped = DatumGetBool(SPI_getbinval(tup, desc, 7, &isnull));
		rows[i].annex = DatumGetBool(SPI_getbinval(tup, desc, 8, &isnull));
	}
	spindle_spi_end(&ctx);
	*out = rows;
	return (int) n;
}

/*
 * The relations of schema pg_spindle that belong to the table (named
 * s<oid>_<n>, or depending on it, but not its consumer relation c<oid>)
 * and that no detached row (relation = 0) claims.  Their OIDs into *oids, names into *names.
 */
static int
read_storage(Oid facade, Oid **oids, char ***names)
{
	SpindleSpi ctx;
	Oid			types[2] = {OIDOID, TEXTOID};
	Datum		values[2];
	char		pattern[NAMEDATALEN];
	uint64		n;
	uint64		i;

	snprintf(pattern, sizeof(pattern), "s%u\\_%%", facade);
	values[0] = ObjectIdGetDatum(facade);
	values[1] = CStringGetTextDatum(pattern);
	spindle_spi_begin(&ctx);
	n = spindle_spi_exec("SELECT c.oid, c.relname::pg_catalog.text"
						 " FROM pg_catalog.pg_class c"
						 " JOIN pg_catalog.pg_namespace s ON s.oid = c.relnamespace"
						 " WHERE s.nspname OPERATOR(pg_catalog.=) 'pg_spindle'"
						 " AND c.relkind OPERATOR(pg_catalog.=) 'r'"
						 " AND c.relam OPERATOR(pg_catalog.<>) (SELECT a.oid FROM pg_catalog.pg_am a"
						 "       WHERE a.amname OPERATOR(pg_catalog.=) 'spindle_meta')"
						 " AND (c.relname::pg_catalog.text OPERATOR(pg_catalog.~~) $2"
						 "      OR EXISTS (SELECT FROM pg_catalog.pg_depend d"
						 "       WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass"
						 "       AND d.objid OPERATOR(pg_catalog.=) c.oid"
						 "       AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass"
						 "       AND d.refobjid OPERATOR(pg_catalog.=) $1))"
						 " AND NOT EXISTS (SELECT FROM spindle.spindle_catalog x"
						 "       WHERE x.relation OPERATOR(pg_catalog.=) 0::pg_catalog.oid"
						 "       AND x.segment OPERATOR(pg_catalog.=) c.oid)"
						 " ORDER BY c.oid",
						 2, types, values, NULL, true);
	*oids = MemoryContextAlloc(ctx.outer, sizeof(Oid) * Max(n, 1));
	*names = MemoryContextAlloc(ctx.outer, sizeof(char *) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		bool		isnull;

		(*oids)[i] = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
													SPI_tuptable->tupdesc,
													1, &isnull));
		(*names)[i] = MemoryContextStrdup(ctx.outer,
										  SPI_getvalue(SPI_tuptable->vals[i],
													   SPI_tuptable->tupdesc, 2));
	}
	spindle_spi_end(&ctx);
	return (int) n;
}

static int
cmp_range(const void *a, const void *b)
{
	const VRange *ra = a;
	const VRange *rb = b;

	if (ra->vbase != rb->vbase)
		return ra->vbase < rb->vbase ? -1 : 1;
	if (ra->vcount != rb->vcount)
		return ra->vcount < rb->vcount ? -1 : 1;
	return ra->row - rb->row;
}

/*
 * Build vs->ranges from rows[] and vs->pending from the pending ranges of
 * the metapage whose creator is running or did not commit (a committed
 * creator's spindles have rows: its entry only waits to be forgotten).
 */
static void
build_ranges(VerifyState *vs, VRow *rows, int nrows)
{
	SpindlePending pending[SPINDLE_MAX_PENDING];
	int			npending = spindle_pending_read(vs->facade, pending);
	int			i;

	vs->ranges = palloc(sizeof(VRange) * (nrows + 1));
	vs->pending = palloc(sizeof(VRange) * (npending + 1));
	vs->nranges = 0;
	vs->npending = 0;
	for (i = 0; i < nrows; i++)
	{
		VRange	   *r = &vs->ranges[vs->nranges++];

		r->vbase = rows[i].vbase;
		r->vcount = rows[i].vcount;
		r->row = i;
	}
	for (i = 0; i < npending; i++)
	{
		VRange	   *r;
		TransactionId xid = XidFromFullTransactionId(pending[i].fxid);

		/* a committed creator's spindles have rows (or had them) */
		if (!spindle_pending_in_progress(&pending[i]) &&
			TransactionIdIsNormal(xid) &&
			!TransactionIdPrecedes(xid, ShmemVariableCache->oldestClogXid) &&
			TransactionIdDidCommit(xid))
			continue;
		r = &vs->pending[vs->npending++];

		r->vbase = pending[i].vbase;
		r->vcount = pending[i].vcount;
		r->row = -1;
	}
	qsort(vs->ranges, vs->nranges, sizeof(VRange), cmp_range);
}

/*
 * The range holding vslot, preferring a row's to a pending one; NULL if
 * none.  Ranges of rows never overlap on a healthy table, so the row range
 * that holds vslot starts last at or below it; pending ranges (at most
 * SPINDLE_MAX_PENDING) may cover rows (a committed creation not yet
 * forgotten) and are looked at one by one.
 */
static VRange *
find_range(VerifyState *vs, int64 vslot)
{
	int			lo = 0;
	int			hi = vs->nranges;
	int			i;

	/* the first range starting after vslot */
	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;

		if (vs->ranges[mid].vbase <= vslot)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (i = lo - 1; i >= 0; i--)
	{
		VRange	   *r = &vs->ranges[i];

		if (vslot < r->vbase + r->vcount)
			return r;
		break;
	}
	for (i = 0; i < vs->npending; i++)
	{
		VRange	   *r = &vs->pending[i];

		if (vslot >= r->vbase && vslot < r->vbase + r->vcount)
			return r;
	}
	return NULL;
}

/* ----------------------------------------------------------------
 * The directory and the storage
 * ----------------------------------------------------------------
 */

static void
check_directory(VerifyState *vs, SpindleDirectory *dir)
{
	Oid			nsp = get_namespace_oid("pg_spindle", true);
	Oid			segam = spindle_segment_am_oid();
	Oid			facade = RelationGetRelid(vs->facade);
	Oid		   *oids;
	char	  **names;
	int			nstorage;
	int			i;
	int			j;

	/*
	 * The relations first, then the rows: a relation seen committed has its
	 * row in the later read (they commit together), or a dropped one.
	 */
	nstorage = read_storage(facade, &oids, &names);
	vs->nrows = read_rows(facade, &vs->rows);
	build_ranges(vs, vs->rows, vs->nrows);

	for (i = 0; i < vs->nrows; i++)
	{
		VRow	   *r = &vs->rows[i];
		HeapTuple	tup;

		if (r->capacity < 0)
			vreport(vs, "directory: spindle %lld: capacity %lld is negative",
					(long long) r->spindle_no, (long long) r->capacity);
		if (r->vbase < 0 || r->vcount <= 0 ||
			r->vbase + r->vcount > SPINDLE_VSLOTS)
			vreport(vs, "ranges: spindle %lld: slot range [%lld, %lld) is not within [0, %lld)",
					(long long) r->spindle_no, (long long) r->vbase,
					(long long) (r->vbase + r->vcount),
					(long long) SPINDLE_VSLOTS);
		if (r->dropped)
			continue;
		tup = SearchSysCache1(RELOID, ObjectIdGetDatum(r->segment));
		if (!HeapTupleIsValid(tup))
		{
			vreport(vs, "directory: spindle %lld: its relation %u does not exist",
					(long long) r->spindle_no, r->segment);
			continue;
		}
		else
		{
			Form_pg_class form = (Form_pg_class) GETSTRUCT(tup);
			char		name[NAMEDATALEN];

			snprintf(name, sizeof(name), "s%u_%lld", facade,
					 (long long) r->spindle_no);
			if (form->relnamespace != nsp || form->relam != segam ||
				form->relkind != RELKIND_RELATION ||
				strcmp(NameStr(form->relname), name) != 0)
				vreport(vs, "directory: spindle %lld: its relation %u (\"%s\") is not pg_spindle.%s with access method spindle_segment",
						(long long) r->spindle_no, r->segment,
						NameStr(form->relname), name);
			else
				r->exists = true;
			ReleaseSysCache(tup);
		}
	}

	/* every pg_spindle relation of the table has a row */
	for (j = 0; j < nstorage; j++)
	{
		bool		found = false;

		for (i = 0; i < vs->nrows && !found; i++)
			found = vs->rows[i].segment == oids[j];
		/* dropped and forgotten since it was seen? */
		if (!found && SearchSysCacheExists1(RELOID, ObjectIdGetDatum(oids[j])))
			vreport(vs, "directory: relation pg_spindle.%s (%u) of this table has no directory row",
					names[j], oids[j]);
	}

	/* the backend's cached directory says what the rows say */
	for (j = 0; j < spindle_dir_nall(dir); j++)
	{
		SpindleEntry *sp = spindle_dir_entry(dir, j);

		for (i = 0; i < vs->nrows; i++)
		{
			VRow	   *r = &vs->rows[i];

			if (r->spindle_no != sp->spindle_no || r->dropped)
				continue;
			if (r->annex != spindle_is_annex(sp))
				vreport(vs, "directory: spindle %lld: this backend's directory holds it as %s, its row says %s",
						(long long) sp->spindle_no,
						spindle_is_annex(sp) ? "an annex" : "an event spindle",
						r->annex ? "an annex" : "an event spindle");
			if (r->segment != sp->segment || r->vbase != sp->vbase ||
				r->vcount != sp->vcount)
				vreport(vs, "directory: spindle %lld: this backend's directory has relation %u and slots [%lld, %lld), its row relation %u and slots [%lld, %lld)",
						(long long) sp->spindle_no, sp->segment,
						(long long) sp->vbase,
						(long long) (sp->vbase + sp->vcount),
						r->segment, (long long) r->vbase,
						(long long) (r->vbase + r->vcount));
		}
	}
}

/* No two rows' ranges overlap (vs->ranges is sorted by vbase). */
static void
check_overlaps(VerifyState *vs)
{
	int			i;
	int			last = -1;		/* the row range reaching furthest so far */

	for (i = 0; i < vs->nranges; i++)
	{
		VRange	   *r = &vs->ranges[i];

		if (last >= 0 &&
			r->vbase < vs->ranges[last].vbase + vs->ranges[last].vcount)
		{
			VRow	   *a = &vs->rows[vs->ranges[last].row];
			VRow	   *b = &vs->rows[r->row];

			vreport(vs, "ranges: spindle %lld, slots [%lld, %lld) overlap those of spindle %lld, [%lld, %lld)",
					(long long) b->spindle_no, (long long) b->vbase,
					(long long) (b->vbase + b->vcount),
					(long long) a->spindle_no, (long long) a->vbase,
					(long long) (a->vbase + a->vcount));
		}
		if (last < 0 || r->vbase + r->vcount >
			vs->ranges[last].vbase + vs->ranges[last].vcount)
			last = i;
	}
}

/* ----------------------------------------------------------------
 * One spindle: its events and its slot map
 * ----------------------------------------------------------------
 */

typedef struct VEvent
{
	OffsetNumber off;
	bool		layout_ok;
	int32		k;
	TransactionId xmin;
	bool		xmin_committed; /* hinted committed or frozen */
	bool		xmin_invalid;	/* hinted aborted */
} VEvent;

/* Does the tuple carry its two hidden columns, not null? */
static bool
tuple_has_k(Relation seg, HeapTupleHeader tup)
{
	int			natts = RelationGetDescr(seg)->natts;

	if (HeapTupleHeaderGetNatts(tup) != natts)
		return false;
	if ((tup->t_infomask & HEAP_HASNULL) != 0 &&
		(att_isnull(natts - 1, tup->t_bits) ||
		 att_isnull(natts - 2, tup->t_bits)))
		return false;
	return true;
}

static inline bool
insert_running(TransactionId xmin)
{
	return TransactionIdIsNormal(xmin) &&
		!TransactionIdIsCurrentTransactionId(xmin) &&
		TransactionIdIsInProgress(xmin);
}

/*
 * Did the event's inserting transaction abort (or end in a crash)?  Its
 * hint bits say so when set; otherwise its xmin is not frozen, so no older
 * than the spindle's relfrozenxid, and the commit log still knows it.
 */
static bool
inserter_aborted(const VEvent *ev)
{
	if (ev->xmin_committed)
		return false;
	if (ev->xmin_invalid)
		return true;
	return TransactionIdIsNormal(ev->xmin) &&
		!TransactionIdIsCurrentTransactionId(ev->xmin) &&
		!TransactionIdIsInProgress(ev->xmin) &&
		!TransactionIdDidCommit(ev->xmin);
}

/*
 * What the map entry of slot k of r says, checked against the page it
 * names: NULL if it names the event of slot k (or a pruned line pointer),
 * else a description of what it names.
 */
static char *
check_map_target(Relation seg, int64 k, ItemPointer ptid)
{
	BlockNumber blk = ItemPointerGetBlockNumber(ptid);
	OffsetNumber off = ItemPointerGetOffsetNumber(ptid);
	Buffer		buf;
	Page		page;
	ItemId		lp;
	char	   *problem = NULL;

	if (blk >= RelationGetNumberOfBlocks(seg))
		return psprintf("(%u,%u), past the spindle's last page", blk, off);
	buf = ReadBuffer(seg, blk);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	if (PageIsNew(page) || off < FirstOffsetNumber ||
		off > PageGetMaxOffsetNumber(page))
		problem = psprintf("(%u,%u), which is no line pointer of the spindle",
						   blk, off);
	else
	{
		lp = PageGetItemId(page, off);
		if (!ItemIdIsUsed(lp))
			problem = psprintf("(%u,%u), an unused line pointer", blk, off);
		else if (ItemIdIsNormal(lp))
		{
			HeapTupleHeader tup = (HeapTupleHeader) PageGetItem(page, lp);

			if (!tuple_has_k(seg, tup))
				problem = psprintf("(%u,%u), an event without a slot number",
								   blk, off);
			else if (spindle_event_k(tup, ItemIdGetLength(lp)) != k)
				problem = psprintf("(%u,%u), the event of slot %d", blk, off,
								   spindle_event_k(tup, ItemIdGetLength(lp)));
		}
		/* LP_DEAD: its event was purged and pruned, fine */
	}
	UnlockReleaseBuffer(buf);
	return problem;
}

static void
check_spindle(VerifyState *vs, VRow *r, Relation seg)
{
	Relation	facade = vs->facade;
	int64		cap = row_capacity(r);
	int64		vcount = Max(r->vcount, 0);
	uint8	   *seen = palloc0(vcount / 8 + 1);
	BufferAccessStrategy strategy = GetAccessStrategy(BAS_BULKREAD);
	BlockNumber nblocks = RelationGetNumberOfBlocks(seg);
	BlockNumber blk;
	VEvent	   *events = palloc(sizeof(VEvent) * MaxHeapTuplesPerPage);
	int64		nslots = 0;
	int64		maxk = -1;
	int64		last;

	for (blk = 0; blk < nblocks; blk++)
	{
		Buffer		buf;
		Page		page;
		OffsetNumber off;
		OffsetNumber maxoff;
		int			nevents = 0;
		int			i;

		CHECK_FOR_INTERRUPTS();
		buf = ReadBufferExtended(seg, MAIN_FORKNUM, blk, RBM_NORMAL, strategy);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		maxoff = PageIsNew(page) ? InvalidOffsetNumber : PageGetMaxOffsetNumber(page);
		for (off = FirstOffsetNumber; off <= maxoff; off++)
		{
			ItemId		lp = PageGetItemId(page, off);
			HeapTupleHeader tup;
			VEvent	   *ev;

			if (ItemIdIsDead(lp))
			{
				nslots++;		/* a purged, pruned event */
				continue;
			}
			if (!ItemIdIsNormal(lp))
				continue;
			tup = (HeapTupleHeader) PageGetItem(page, lp);
			ev = &events[nevents++];
			ev->off = off;
			ev->layout_ok = tuple_has_k(seg, tup);
			ev->k = ev->layout_ok ? spindle_event_k(tup, ItemIdGetLength(lp)) : -1;
			ev->xmin = HeapTupleHeaderGetRawXmin(tup);
			ev->xmin_committed = HeapTupleHeaderXminCommitted(tup);
			ev->xmin_invalid = HeapTupleHeaderXminInvalid(tup) &&
				!HeapTupleHeaderXminFrozen(tup);
			nslots++;
		}
		UnlockReleaseBuffer(buf);

		/* the map is read with no spindle page locked */
		for (i = 0; i < nevents; i++)
		{
			VEvent	   *ev = &events[i];
			ItemPointerData self;
			ItemPointerData m;

			ItemPointerSet(&self, blk, ev->off);
			if (!ev->layout_ok)
			{
				vreport(vs, "slot map: spindle %lld: event (%u,%u) has no slot number (its hidden columns are missing or null)",
						(long long) r->spindle_no, blk, ev->off);
				continue;
			}
			if (ev->k < 0 || ev->k >= vcount)
			{
				vreport(vs, "capacity: spindle %lld, slot %d: event (%u,%u) has a slot number outside the spindle's %lld slots",
						(long long) r->spindle_no, ev->k, blk, ev->off,
						(long long) vcount);
				continue;
			}
			maxk = Max(maxk, ev->k);
			if (ev->k >= cap)
				vreport(vs, "capacity: spindle %lld, slot %d: event (%u,%u) lies beyond the spindle's capacity of %lld",
						(long long) r->spindle_no, ev->k, blk, ev->off,
						(long long) cap);
			if (seen[ev->k / 8] & (1 << (ev->k % 8)))
				vreport(vs, "slot reuse: spindle %lld, slot %d: event (%u,%u) has the slot number of an earlier event",
						(long long) r->spindle_no, ev->k, blk, ev->off);
			seen[ev->k / 8] |= (1 << (ev->k % 8));
			if (!spindle_slotmap_get(facade, r->vbase + ev->k, &m))
			{
				/*
				 * A running insert writes the entry after placing the tuple;
				 * one that failed or was cut off by a crash in between left
				 * an event of an aborted transaction, which is no event.
				 */
				if (!insert_running(ev->xmin) && !inserter_aborted(ev))
					vreport(vs, "slot map: spindle %lld, slot %d: the map entry of event (%u,%u) is empty",
							(long long) r->spindle_no, ev->k, blk, ev->off);
			}
			else if (!ItemPointerEquals(&m, &self))
				vreport(vs, "slot map: spindle %lld, slot %d: the map entry of event (%u,%u) points at (%u,%u)",
						(long long) r->spindle_no, ev->k, blk, ev->off,
						ItemPointerGetBlockNumber(&m),
						ItemPointerGetOffsetNumber(&m));
		}
	}
	FreeAccessStrategy(strategy);

	if (nslots > cap)
		vreport(vs, "capacity: spindle %lld holds %lld events, more than its capacity of %lld",
				(long long) r->spindle_no, (long long) nslots, (long long) cap);

	/* every map entry of the range points at its own event */
	last = vcount > 0 ? spindle_slotmap_last_used(facade, r->vbase, vcount) : -1;
	if (last >= 0)
	{
		ItemPointerData *chunk = palloc(sizeof(ItemPointerData) * 1024);
		int64		start;

		for (start = 0; start <= last; start += 1024)
		{
			int			n = (int) Min(1024, last + 1 - start);
			int			i;

			CHECK_FOR_INTERRUPTS();
			spindle_slotmap_get_range(facade, r->vbase + start, n, chunk);
			for (i = 0; i < n; i++)
			{
				int64		k = start + i;
				char	   *problem;

				if (!ItemPointerIsValid(&chunk[i]) ||
					(seen[k / 8] & (1 << (k % 8))))
					continue;
				/* a lost slot, buried: used, no event (tombstones.c) */
				if (spindle_is_tombstone(&chunk[i]))
				{
					if (k >= cap)
						vreport(vs, "capacity: spindle %lld, slot %lld: the slot has a tombstone but lies beyond the spindle's capacity of %lld",
								(long long) r->spindle_no, (long long) k,
								(long long) cap);
					continue;
				}
				if (k >= cap)
					vreport(vs, "capacity: spindle %lld, slot %lld: the slot has a map entry but lies beyond the spindle's capacity of %lld",
							(long long) r->spindle_no, (long long) k,
							(long long) cap);
				problem = check_map_target(seg, k, &chunk[i]);
				if (problem != NULL)
					vreport(vs, "slot map: spindle %lld, slot %lld: the map entry points at %s",
							(long long) r->spindle_no, (long long) k, problem);
			}
		}
		pfree(chunk);
	}
	r->used = Max(maxk + 1, last + 1);
	r->has_events = nslots > 0 || last >= 0;
	pfree(seen);
	pfree(events);
}

/*
 * Is the spindle of row r still not full, looked at afresh?  Its walk may
 * be older than the later spindle's: an insert may have filled it and
 * moved on since, and the worker may have recorded its fill time and let
 * its counter go.  Called only when a later spindle has events: then a
 * spindle with no slot counter is full (slots.c: a spindle is full as soon
 * as a later one has events; its counter would be rebuilt so).  Its last
 * slots were handed out and never placed: skipped by an insert that kept
 * supplied ids (spindle.keep_msg_ids) or lost by a failed insert, and the
 * counter that knew went with a restart.  Only a live counter short of
 * the capacity says that inserts passed the spindle over with room left.
 */
static bool
still_unfilled(VerifyState *vs, VRow *r)
{
	VRow	   *fresh;
	int			n = read_rows(RelationGetRelid(vs->facade), &fresh);
	int64		counter;
	int64		last;
	int			i;
	bool		unfilled = false;

	for (i = 0; i < n; i++)
	{
		if (fresh[i].spindle_no != r->spindle_no)
			continue;
		unfilled = !fresh[i].filled && !fresh[i].dropped;
		break;
	}
	if (unfilled &&
		(!spindle_slots_peek(r->segment, r->spindle_no, &counter) ||
		 counter >= row_capacity(r)))
		unfilled = false;
	if (unfilled)
	{
		last = spindle_slotmap_last_used(vs->facade, r->vbase, r->vcount);
		if (Max(last + 1, r->used) >= row_capacity(r))
			unfilled = false;
		else
			r->used = Max(last + 1, r->used);
	}
	pfree(fresh);
	return unfilled;
}

/* No spindle after one that is not full has events (annexes aside). */
static void
check_order(VerifyState *vs)
{
	int			unfilled = -1;
	int			i;

	for (i = 0; i < vs->nrows; i++)
	{
		VRow	   *r = &vs->rows[i];
		int64		counter;

		if (r->dropped || !r->walked || r->annex)
			continue;
		if (unfilled >= 0 && r->has_events)
		{
			VRow	   *u = &vs->rows[unfilled];

			if (still_unfilled(vs, u))
				vreport(vs, "append order: spindle %lld is not full (%lld of %lld slots used) but spindle %lld after it has events",
						(long long) u->spindle_no, (long long) u->used,
						(long long) row_capacity(u), (long long) r->spindle_no);
			unfilled = -1;
		}
		if (unfilled < 0 && !r->filled && r->used < row_capacity(r) &&
			!(spindle_slots_peek(r->segment, r->spindle_no, &counter) &&
			  counter >= row_capacity(r)))
			unfilled = i;
	}
}

/* ----------------------------------------------------------------
 * Indexes
 * ----------------------------------------------------------------
 */

/* Keep an index entry to check again at the end (recheck_suspects). */
static void
add_suspect(VerifyState *vs, Relation index, ItemPointer tid, bool mapped)
{
	if (vs->nsuspects >= VERIFY_MAX_REPORTS)
		return;
	if (vs->nsuspects >= vs->maxsuspects)
	{
		vs->maxsuspects = Max(64, vs->maxsuspects * 2);
		if (vs->suspects == NULL)
		{
			vs->suspects = palloc(sizeof(ItemPointerData) * vs->maxsuspects);
			vs->suspect_index = palloc(sizeof(Oid) * vs->maxsuspects);
			vs->suspect_mapped = palloc(sizeof(bool) * vs->maxsuspects);
		}
		else
		{
			vs->suspects = repalloc(vs->suspects,
									sizeof(ItemPointerData) * vs->maxsuspects);
			vs->suspect_index = repalloc(vs->suspect_index,
										 sizeof(Oid) * vs->maxsuspects);
			vs->suspect_mapped = repalloc(vs->suspect_mapped,
										  sizeof(bool) * vs->maxsuspects);
		}
	}
	vs->suspects[vs->nsuspects] = *tid;
	vs->suspect_index[vs->nsuspects] = RelationGetRelid(index);
	vs->suspect_mapped[vs->nsuspects] = mapped;
	vs->nsuspects++;
}

/*
 * Check one index entry's TID.  Entries in no known range, and entries of
 * a live spindle whose map entry is empty, are kept to be checked again:
 * the spindle may have been created, or dropped and retired, meanwhile.
 */
static void
check_index_tid(VerifyState *vs, Relation index, ItemPointer tid)
{
	int64		vslot = spindle_tid_to_vslot(tid);
	VRange	   *range;
	VRow	   *r;
	int64		k;
	ItemPointerData m;

	if (vslot < 0)
	{
		vreport(vs, "index: index \"%s\" has an entry (%u,%u), which is no slot of a spindle table",
				RelationGetRelationName(index),
				ItemPointerGetBlockNumberNoCheck(tid),
				ItemPointerGetOffsetNumberNoCheck(tid));
		return;
	}
	range = find_range(vs, vslot);
	if (range == NULL)
	{
		add_suspect(vs, index, tid, false);
		return;
	}
	if (range->row < 0)
		return;					/* a pending range: its creator may commit */
	r = &vs->rows[range->row];
	if (r->dropped)
		return;					/* not retired yet: the fetch finds it dead */
	k = vslot - r->vbase;
	if (k >= row_capacity(r))
		vreport(vs, "index: index \"%s\" has an entry (%u,%u) for slot %lld of spindle %lld, beyond its capacity of %lld",
				RelationGetRelationName(index),
				ItemPointerGetBlockNumber(tid), ItemPointerGetOffsetNumber(tid),
				(long long) k, (long long) r->spindle_no,
				(long long) row_capacity(r));
	else if (!spindle_slotmap_get(vs->facade, vslot, &m))
		add_suspect(vs, index, tid, true);
}

/* Walk every entry of one index. */
static void
check_index(VerifyState *vs, Relation index)
{
	IndexAmRoutine *am = index->rd_indam;

	if (am->amgettuple != NULL && am->amoptionalkey)
	{
		IndexScanDesc scan = index_beginscan(vs->facade, index, SnapshotAny, 0, 0);
		ItemPointer tid;

		index_rescan(scan, NULL, 0, NULL, 0);
		while ((tid = index_getnext_tid(scan, ForwardScanDirection)) != NULL)
		{
			CHECK_FOR_INTERRUPTS();
			check_index_tid(vs, index, tid);
		}
		index_endscan(scan);
	}
	else if (am->amgetbitmap != NULL && am->amoptionalkey)
	{
		TIDBitmap  *tbm = tbm_create(work_mem * 1024L, NULL);
		IndexScanDesc scan = index_beginscan_bitmap(index, SnapshotAny, 0);
		TBMIterator *it;
		TBMIterateResult *res;
		int64		lossy = 0;

		index_rescan(scan, NULL, 0, NULL, 0);
		(void) index_getbitmap(scan, tbm);
		index_endscan(scan);
		it = tbm_begin_iterate(tbm);
		while ((res = tbm_iterate(it)) != NULL)
		{
			int			i;

			CHECK_FOR_INTERRUPTS();
			if (res->ntuples < 0)
			{
				lossy++;
				continue;
			}
			for (i = 0; i < res->ntuples; i++)
			{
				ItemPointerData tid;

				ItemPointerSet(&tid, res->blockno, res->offsets[i]);
				check_index_tid(vs, index, &tid);
			}
		}
		tbm_end_iterate(it);
		tbm_free(tbm);
		if (lossy > 0)
			ereport(NOTICE,
					(errmsg("%lld blocks of the entries of index \"%s\" were not checked: the bitmap went lossy",
							(long long) lossy, RelationGetRelationName(index)),
					 errhint("Raise work_mem.")));
	}
	else if (index->rd_rel->relam == HASH_AM_OID)
	{
		BlockNumber nblocks = RelationGetNumberOfBlocks(index);
		BlockNumber blk;

		/* bucket and overflow pages hold the entries */
		for (blk = 1; blk < nblocks; blk++)
		{
			Buffer		buf;
			Page		page;

			CHECK_FOR_INTERRUPTS();
			buf = ReadBuffer(index, blk);
			LockBuffer(buf, BUFFER_LOCK_SHARE);
			page = BufferGetPage(buf);
			if (!PageIsNew(page) &&
				PageGetSpecialSize(page) == MAXALIGN(sizeof(HashPageOpaqueData)) &&
				(HashPageGetOpaque(page)->hasho_flag & (LH_BUCKET_PAGE | LH_OVERFLOW_PAGE)) != 0)
			{
				OffsetNumber maxoff = PageGetMaxOffsetNumber(page);
				OffsetNumber off;
				int			n = 0;
				ItemPointerData *tids = palloc(sizeof(ItemPointerData) * Max(maxoff, 1));
				int			i;

				for (off = FirstOffsetNumber; off <= maxoff; off++)
				{
					ItemId		lp = PageGetItemId(page, off);

					if (ItemIdIsNormal(lp))
						tids[n++] = ((IndexTuple) PageGetItem(page, lp))->t_tid;
				}
				UnlockReleaseBuffer(buf);
				for (i = 0; i < n; i++)
					check_index_tid(vs, index, &tids[i]);
				pfree(tids);
			}
			else
				UnlockReleaseBuffer(buf);
		}
	}
	else
		ereport(NOTICE,
				(errmsg("the entries of index \"%s\" were not checked: its access method allows no scan of the whole index",
						RelationGetRelationName(index))));
}

/*
 * The index entries kept by check_index_tid, checked again against fresh
 * rows: a retired range has lost its index entries before its map entries
 * and its row, and a spindle created since the rows were read has its row
 * now, so what is still wrong was wrong before this check began.
 */
static void
recheck_suspects(VerifyState *vs)
{
	int			i;

	if (vs->nsuspects == 0)
		return;
	vs->nrows = read_rows(RelationGetRelid(vs->facade), &vs->rows);
	build_ranges(vs, vs->rows, vs->nrows);
	for (i = 0; i < vs->nsuspects; i++)
	{
		ItemPointer tid = &vs->suspects[i];
		int64		vslot = spindle_tid_to_vslot(tid);
		VRange	   *range = find_range(vs, vslot);
		char	   *name = get_rel_name(vs->suspect_index[i]);
		ItemPointerData m;

		if (range == NULL && !vs->suspect_mapped[i])
			vreport(vs, "index: index \"%s\" has an entry (%u,%u) for slot %lld, in no spindle's range (a dropped spindle's range was retired, or no spindle ever had it)",
					name ? name : "?",
					ItemPointerGetBlockNumber(tid),
					ItemPointerGetOffsetNumber(tid), (long long) vslot);
		else if (range != NULL && range->row >= 0 && vs->suspect_mapped[i] &&
				 !vs->rows[range->row].dropped &&
				 !spindle_slotmap_get(vs->facade, vslot, &m))
			vreport(vs, "index: index \"%s\" has an entry (%u,%u) for slot %lld of spindle %lld, whose map entry is empty",
					name ? name : "?",
					ItemPointerGetBlockNumber(tid),
					ItemPointerGetOffsetNumber(tid),
					(long long) (vslot - vs->rows[range->row].vbase),
					(long long) vs->rows[range->row].spindle_no);
	}
}

/* ----------------------------------------------------------------
 * Queue state
 * ----------------------------------------------------------------
 */

typedef struct VItem
{
	uint8		kind;
	int64		start;
	int64		end;
} VItem;

static const char *
item_kind_name(uint8 kind)
{
	switch (kind)
	{
		case QITEM_CLAIM:
			return "claim";
		case QITEM_RETURNED:
			return "returned";
		case QITEM_PENDING:
			return "pending";
		case QITEM_LEASED:
			return "lease";
	}
	return "invalid";
}

static int
cmp_item(const void *a, const void *b)
{
	const VItem *ia = a;
	const VItem *ib = b;

	if (ia->start != ib->start)
		return ia->start < ib->start ? -1 : 1;
	return 0;
}

static void
check_queue(VerifyState *vs)
{
	QueueState *qs = spindle_queue_state(RelationGetRelid(vs->facade));
	LWLock	   *lock;
	VItem	   *items;
	int			nitems = 0;
	int			nalloc;
	int			declared;
	bool		valid;
	int64		head;
	dlist_iter	iter;
	int			i;

	if (qs == NULL)
		return;
	lock = spindle_queue_lock(qs);
	LWLockAcquire(lock, LW_SHARED);
	if (qs->relid != RelationGetRelid(vs->facade) || qs->dbid != MyDatabaseId)
	{
		LWLockRelease(lock);
		return;					/* reused meanwhile */
	}
	valid = qs->valid;
	head = qs->head;
	declared = qs->nitems;
	nalloc = Max(declared, 0) + 16;
	items = palloc(sizeof(VItem) * nalloc);
	dlist_foreach(iter, &qs->items)
	{
		QueueItem  *item = dlist_container(QueueItem, node, iter.cur);

		if (nitems >= nalloc)
		{
			nitems++;
			continue;			/* only counted */
		}
		items[nitems].kind = item->kind;
		items[nitems].start = item->start;
		items[nitems].end = item->end;
		nitems++;
	}
	LWLockRelease(lock);

	if (nitems != declared)
		vreport(vs, "queue: the consumer state counts %d items but lists %d",
				declared, nitems);
	nitems = Min(nitems, nalloc);
	if (!valid)
		return;					/* rebuilt from disk at the next consumer */
	for (i = 0; i < nitems; i++)
	{
		VItem	   *it = &items[i];

		if (it->kind == QITEM_FREE || it->kind > QITEM_LEASED)
			vreport(vs, "queue: msg_id %lld: an item of kind %d is in the queue's list",
					(long long) it->start, it->kind);
		if (it->start >= it->end)
			vreport(vs, "queue: msg_id %lld: %s item [%lld, %lld) is empty",
					(long long) it->start, item_kind_name(it->kind),
					(long long) it->start, (long long) it->end);
		if (it->end > head)
			vreport(vs, "queue: msg_id %lld: %s item [%lld, %lld) is not behind the head %lld",
					(long long) it->start, item_kind_name(it->kind),
					(long long) it->start, (long long) it->end,
					(long long) head);
	}
	qsort(items, nitems, sizeof(VItem), cmp_item);
	for (i = 1; i < nitems; i++)
	{
		if (items[i].start < items[i - 1].end)
			vreport(vs, "queue: msg_id %lld: %s item [%lld, %lld) overlaps %s item [%lld, %lld)",
					(long long) items[i].start,
					item_kind_name(items[i].kind),
					(long long) items[i].start, (long long) items[i].end,
					item_kind_name(items[i - 1].kind),
					(long long) items[i - 1].start,
					(long long) items[i - 1].end);
	}
	pfree(items);
}

/* A problem of the slot map's directory (spindle_mapdir_check). */
/* ---------- the consume log (and the consumer relation's free list) ---------- */

static void report_map(void *arg, const char *msg);

/*
 * How many msg_ids spindle sp handed out: its slot counter, or one past
 * its last used map slot, or past its last event seen on disk (row r, if
 * walked), whichever is highest.
 */
static int64
handed_out(VerifyState *vs, const SpindleEntry *sp)
{
	int64		n = spindle_slotmap_last_used(vs->facade, sp->vbase,
											  sp->vcount) + 1;
	int64		counter;

	if (spindle_slots_peek(sp->segment, sp->spindle_no, &counter))
		n = Max(n, counter);
	for (int i = 0; i < vs->nrows; i++)
		if (vs->rows[i].spindle_no == sp->spindle_no && vs->rows[i].walked)
			n = Max(n, vs->rows[i].used);
	return n;
}

/*
 * Check that entry e covers only msg_ids the queue handed out (see the
 * header); handed[] caches handed_out() per spindle of dir, -1 if not
 * computed yet.
 */
static void
check_entry_ids(VerifyState *vs, SpindleDirectory *dir, int64 *handed,
				const SpindleConsumed *e, int64 next_no)
{
	int64		end = e->first + e->len;

	for (int i = 0; i < dir->nspindles; i++)
	{
		SpindleEntry *sp = &dir->spindles[i];
		int64		spend = sp->first_no + sp->vcount;

		if (end <= sp->first_no || e->first >= spend)
			continue;
		if (handed[i] < 0)
			handed[i] = handed_out(vs, sp);
		if (Min(end, spend) > sp->first_no + handed[i])
			vreport(vs, "consume log: entry [%lld, %lld) covers msg_ids spindle %lld has not handed out (it handed out [%lld, %lld))",
					(long long) e->first, (long long) end,
					(long long) sp->spindle_no, (long long) sp->first_no,
					(long long) (sp->first_no + handed[i]));
	}
	/*
	 * Past every number the table gave out (its counter): not the last
	 * spindle's end, since the newest spindles may be dropped, consumed,
	 * while older ones are still kept (compaction moves their stragglers
	 * later), and their entries wait for settle.
	 */
	if (end > next_no)
		vreport(vs, "consume log: entry [%lld, %lld) covers msg_ids past the table's next event number %lld",
				(long long) e->first, (long long) end, (long long) next_no);
}

/* Check entry e's xid (see the header); frozenxid: the relation's. */
static void
check_entry_xid(VerifyState *vs, const SpindleConsumed *e,
				TransactionId frozenxid)
{
	TransactionId xid = XidFromFullTransactionId(e->fxid);

	if (xid == FrozenTransactionId)
		return;
	if (!TransactionIdIsNormal(xid))
		vreport(vs, "consume log: entry [%lld, %lld) has xid %u, neither FROZEN nor a normal xid",
				(long long) e->first, (long long) (e->first + e->len), xid);
	else if (TransactionIdIsNormal(frozenxid) &&
			 TransactionIdPrecedes(xid, frozenxid))
		vreport(vs, "consume log: entry [%lld, %lld) has xid %u, older than the consumer relation's relfrozenxid %u",
				(long long) e->first, (long long) (e->first + e->len), xid,
				frozenxid);
}

/*
 * Whether entry e's transaction committed (or is FROZEN): what the fold
 * into the floor requires.  Such an entry below the floor is harmless (the
 * floor hides what it hides) and reachable: the fold raises the floor and
 * then cuts the entries below it in separate records, and a crash or an
 * error between the two leaves them until the next settle cuts them.  An
 * xid that check_entry_xid reports is not looked up.
 */
static bool
entry_committed(const SpindleConsumed *e, TransactionId frozenxid)
{
	TransactionId xid = XidFromFullTransactionId(e->fxid);

	if (xid == FrozenTransactionId)
		return true;
	if (!TransactionIdIsNormal(xid) ||
		(TransactionIdIsNormal(frozenxid) &&
		 TransactionIdPrecedes(xid, frozenxid)))
		return false;
	return TransactionIdDidCommit(xid);
}

/*
 * The queue's consumer relation: its free list (spindle_crel_check_free_list),
 * then its consume log, if it has one (see the header): read with its
 * floor under the log's lock in exclusive mode, then each entry checked.
 */
static void
check_consume_log(VerifyState *vs)
{
	Oid			croid = spindle_consumer_rel_oid(RelationGetRelid(vs->facade));
	Relation	crel;
	SpindleConsumed *e;
	int			n;
	int64		floor;
	SpindleDirectory *dir;
	int64	   *handed;
	SpindleNumbers next;

	if (!OidIsValid(croid) ||
		(crel = try_relation_open(croid, AccessShareLock)) == NULL)
		return;
	spindle_crel_check_free_list(crel, report_map, vs);
	if (!spindle_consume_log_exists(crel))
	{
		relation_close(crel, AccessShareLock);
		return;
	}
	spindle_consume_log_lock(crel);
	floor = spindle_consume_log_floor(crel);
	e = spindle_consume_log_read(crel, PG_INT64_MIN, PG_INT64_MAX, &n);
	spindle_consume_log_unlock(crel);
	/* after the entries: a counter read later is not below any of them */
	spindle_peek_numbers(vs->facade, &next);
	dir = spindle_directory_acquire(vs->facade);
	handed = palloc(sizeof(int64) * Max(dir->nspindles, 1));
	for (int i = 0; i < dir->nspindles; i++)
		handed[i] = -1;
	for (int i = 0; i < n; i++)
	{
		if (e[i].len <= 0)
			vreport(vs, "consume log: entry at %lld is empty",
					(long long) e[i].first);
		if (i > 0 && e[i].first < e[i - 1].first + e[i - 1].len)
			vreport(vs, "consume log: entry [%lld, %lld) overlaps the entry before it, [%lld, %lld)",
					(long long) e[i].first,
					(long long) (e[i].first + e[i].len),
					(long long) e[i - 1].first,
					(long long) (e[i - 1].first + e[i - 1].len));
		if (e[i].first < floor &&
			!entry_committed(&e[i], crel->rd_rel->relfrozenxid))
			vreport(vs, "consume log: entry [%lld, %lld) of a transaction that did not commit lies below the log's floor %lld",
					(long long) e[i].first,
					(long long) (e[i].first + e[i].len), (long long) floor);
		check_entry_ids(vs, dir, handed, &e[i], next.event_no);
		check_entry_xid(vs, &e[i], crel->rd_rel->relfrozenxid);
	}
	spindle_directory_release(dir);
	pfree(handed);
	if (e != NULL)
		pfree(e);
	relation_close(crel, AccessShareLock);
}

static void
report_map(void *arg, const char *msg)
{
	vreport((VerifyState *) arg, "%s", msg);
}

/* ----------------------------------------------------------------
 * spindle.verify(rel regclass) RETURNS SETOF text
 * ----------------------------------------------------------------
 */
Datum
spindle_verify(PG_FUNCTION_ARGS)
{
	VerifyState vs = {0};
	Oid			relid;
	bool		is_missing = false;
	AclResult	aclresult;
	SpindleDirectory *dir;
	List	   *indexes;
	ListCell   *lc;
	int			i;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("relation must not be NULL")));
	relid = PG_GETARG_OID(0);

	/* rights first, then the lock: never queue behind a table one may not read */
	aclresult = pg_class_aclcheck_ext(relid, GetUserId(), ACL_SELECT,
									  &is_missing);
	if (is_missing)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	if (aclresult != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for table %s", get_rel_name(relid)),
				 errdetail("spindle.verify() needs SELECT on the table.")));

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	vs.rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	vs.facade = spindle_open_facade(relid, AccessShareLock);

	/*
	 * The backend's directory first: the rows read after it are newer.  A
	 * spindle created or dropped while the directory is checked can make
	 * the relations and the rows disagree for a moment: a disagreement is
	 * reported only if it is still there after two more tries.
	 */
	dir = spindle_directory_acquire(vs.facade);
	for (i = 0;; i++)
	{
		vs.holding = true;
		check_directory(&vs, dir);
		if (vs.held == NIL || i == 2)
			break;
		list_free_deep(vs.held);
		vs.held = NIL;
	}
	flush_held(&vs);
	spindle_directory_release(dir);
	check_overlaps(&vs);
	spindle_mapdir_check(vs.facade, report_map, &vs);

	for (i = 0; i < vs.nrows; i++)
	{
		VRow	   *r = &vs.rows[i];
		Relation	seg;

		/* a range outside the slot space was reported: nothing to look up */
		if (r->dropped || !r->exists || r->vcount <= 0 || r->vbase < 0 ||
			r->vbase + r->vcount > SPINDLE_VSLOTS)
			continue;
		seg = try_relation_open(r->segment, AccessShareLock);
		if (seg == NULL)
		{
			r->exists = false;	/* dropped since the rows were read */
			continue;
		}
		check_spindle(&vs, r, seg);
		r->walked = true;
		relation_close(seg, AccessShareLock);
	}
	check_order(&vs);

	indexes = RelationGetIndexList(vs.facade);
	foreach(lc, indexes)
	{
		Relation	index = index_open(lfirst_oid(lc), AccessShareLock);

		check_index(&vs, index);
		index_close(index, NoLock);
	}
	recheck_suspects(&vs);

	check_queue(&vs);
	check_consume_log(&vs);

	/* the table's and its indexes' locks stay to the end, as a scan's */
	relation_close(vs.facade, NoLock);
	return (Datum) 0;
}

/* _verify_corrupt's 'log_entry' and 'log_floor' (see below) */
static void
corrupt_log(Relation facade, const char *what, int64 first, int64 len)
{
	Oid			croid = spindle_consumer_rel_oid(RelationGetRelid(facade));
	Relation	crel;

	if (!OidIsValid(croid))
		elog(ERROR, "the table has no consumer relation");
	crel = relation_open(croid, RowExclusiveLock);
	spindle_consume_log_lock(crel);
	if (what[4] == 'e')
		spindle_consume_log_add_run(crel, first, len,
									GetCurrentFullTransactionId(),
									GetCurrentCommandId(true));
	else
		spindle_consume_log_raise_floor(crel, first);
	spindle_consume_log_unlock(crel);
	relation_close(crel, NoLock);
}

/* ----------------------------------------------------------------
 * spindle._verify_corrupt(rel, what, vslot, arg): break a table on
 * purpose, for the tests of verify.  Superuser only.
 *	 'map_clear'	empty the map entry of vslot
 *	 'map_set'		set it to the TID (arg >> 16, arg & 0xffff)
 *	 'set_k'		give the event that vslot's map entry names slot number arg
 *	 'index_entry'	add an entry for vslot to every index, all keys NULL, or
 *					with arg as the first key (an int4) if arg is not 0
 *	 'queue_item'	add a returned item [vslot, vslot + arg) of msg_ids to the
 *					queue's consumer state
 *	 'log_entry'	write a consume log entry [vslot, vslot + arg) of msg_ids
 *					in the current transaction, unchecked
 *	 'log_floor'	raise the consume log's floor to msg_id vslot, leaving
 *					the entries below it
 * ----------------------------------------------------------------
 */
Datum
spindle_verify_corrupt(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	char	   *what = text_to_cstring(PG_GETARG_TEXT_PP(1));
	int64		vslot = PG_GETARG_INT64(2);
	int64		arg = PG_GETARG_INT64(3);
	Relation	facade;
	bool		ids = strcmp(what, "queue_item") == 0 ||
		strcmp(what, "log_entry") == 0 || strcmp(what, "log_floor") == 0;

	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("only superusers may corrupt spindle tables")));
	if ((vslot < 0 || vslot >= SPINDLE_VSLOTS) && !ids)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("slot %lld is out of range", (long long) vslot)));
	if ((strcmp(what, "queue_item") == 0 || strcmp(what, "log_entry") == 0) &&
		(vslot < 0 || arg <= 0 || arg > PG_INT64_MAX - vslot))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s [%lld, %lld + %lld) is not a range of msg_ids",
						what[0] == 'q' ? "queue item" : "log entry",
						(long long) vslot, (long long) vslot, (long long) arg)));
	facade = spindle_open_facade(relid, RowExclusiveLock);

	if (strcmp(what, "map_clear") == 0 || strcmp(what, "map_set") == 0)
	{
		ItemPointerData tid;

		if (what[4] == 'c')
			ItemPointerSetInvalid(&tid);
		else
			ItemPointerSet(&tid, (BlockNumber) (arg >> 16),
						   (OffsetNumber) (arg & 0xffff));
		spindle_slotmap_set(facade, vslot, 1, &tid);
	}
	else if (strcmp(what, "set_k") == 0)
	{
		SpindleDirectory *dir = spindle_directory_acquire(facade);
		SpindleEntry *sp = spindle_find_by_vslot(dir, vslot);
		ItemPointerData ptid;
		Relation	seg;
		Buffer		buf;
		Page		page;
		ItemId		lp;
		int32		k = (int32) arg;

		if (sp == NULL || !spindle_slotmap_get(facade, vslot, &ptid))
			elog(ERROR, "slot %lld has no event", (long long) vslot);
		seg = relation_open(sp->segment, RowExclusiveLock);
		spindle_directory_release(dir);
		if (ItemPointerGetBlockNumber(&ptid) >= RelationGetNumberOfBlocks(seg))
			elog(ERROR, "slot %lld maps past the end of its spindle",
				 (long long) vslot);
		buf = ReadBuffer(seg, ItemPointerGetBlockNumber(&ptid));
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		page = BufferGetPage(buf);
		/* the map may be corrupt already (map_set): look before writing */
		if (ItemPointerGetOffsetNumber(&ptid) < FirstOffsetNumber ||
			ItemPointerGetOffsetNumber(&ptid) > PageGetMaxOffsetNumber(page))
			elog(ERROR, "slot %lld maps to no line pointer", (long long) vslot);
		lp = PageGetItemId(page, ItemPointerGetOffsetNumber(&ptid));
		if (!ItemIdIsNormal(lp) ||
			ItemIdGetLength(lp) < SizeofHeapTupleHeader + 2 * sizeof(int32))
			elog(ERROR, "slot %lld has no event", (long long) vslot);
		START_CRIT_SECTION();
		memcpy((char *) PageGetItem(page, lp) + ItemIdGetLength(lp) -
			   2 * sizeof(int32), &k, sizeof(int32));
		MarkBufferDirty(buf);
		if (RelationNeedsWAL(seg))
			log_newpage_buffer(buf, true);
		END_CRIT_SECTION();
		UnlockReleaseBuffer(buf);
		relation_close(seg, NoLock);
	}
	else if (strcmp(what, "index_entry") == 0)
	{
		List	   *indexes = RelationGetIndexList(facade);
		ListCell   *lc;
		ItemPointerData tid;

		spindle_vslot_to_tid(vslot, &tid);
		foreach(lc, indexes)
		{
			Relation	index = index_open(lfirst_oid(lc), RowExclusiveLock);
			IndexInfo  *info = BuildIndexInfo(index);
			Datum		values[INDEX_MAX_KEYS] = {0};
			bool		isnull[INDEX_MAX_KEYS];
			int			j;

			for (j = 0; j < INDEX_MAX_KEYS; j++)
				isnull[j] = true;
			if (arg != 0)
			{
				/* hash indexes store no NULLs: give the first key arg */
				values[0] = Int32GetDatum((int32) arg);
				isnull[0] = false;
			}
			(void) index_insert(index, values, isnull, &tid, facade,
								UNIQUE_CHECK_NO, false, info);
			index_close(index, NoLock);
		}
	}
	else if (strcmp(what, "queue_item") == 0)
	{
		QueueState *qs = spindle_queue_state(relid);
		QueueItem  *item;

		if (qs == NULL)
			elog(ERROR, "the queue has no consumer state");
		LWLockAcquire(spindle_queue_lock(qs), LW_EXCLUSIVE);
		item = spindle_qitem_alloc(qs, QITEM_RETURNED, vslot, vslot + arg);
		LWLockRelease(spindle_queue_lock(qs));
		if (item == NULL)
			elog(ERROR, "no free item");
	}
	else if (strcmp(what, "log_entry") == 0 || strcmp(what, "log_floor") == 0)
		corrupt_log(facade, what, vslot, arg);
	else if (strcmp(what, "map_orphan") == 0)
	{
		/* a map page of vslot's vp that the directory does not name */
		spindle_mapdir_test_orphan(facade, vslot);
	}
	else
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown corruption \"%s\"", what)));
	relation_close(facade, NoLock);
	PG_RETURN_VOID();
}
