/*-------------------------------------------------------------------------
 *
 * spindle_create.c
 *	  Creating spindles: the creation lock, the ranges of virtual slots
 *	  given to new spindles, their relations and catalog rows, and the
 *	  pending ranges of creations not yet known to have committed.
 *
 * A spindle is a heap-like relation of schema pg_spindle, owned by the
 * bootstrap superuser, depending on its table (the facade) and listed in
 * spindle.spindle_catalog with a range of virtual slots (the TIDs its
 * events take in the facade's indexes, see slotmap.c).  Creation records
 * the range as pending in the slot map first, so that the range stays
 * taken if the creation rolls back, until cleanup has removed the index
 * entries that may point into it.
 *
 * Locks: spindle creation is serialised per table by the creation lock
 * (spindle_lock_creation), held to the end of the creating transaction
 * (so a transaction that created spindles cannot be prepared); the
 * catalog tables are read under AccessShareLock.  The caller of
 * spindle_create_spindles holds at least AccessShareLock on the facade.
 * The locks that creating a relation takes on it, its TOAST table and its
 * row type are given up at once (release_creation_locks).  Whether a
 * spindle is empty is asked without waiting for any lock.
 *
 * Invariants kept here: two spindles of a table never get overlapping
 * ranges of virtual slots, and a range is given again only once it is in
 * no catalog row and no pending entry (that is, once cleanup has removed
 * its index entries and forgotten it); spindle numbers only increase, so
 * that creators commit in the order of their numbers (the backend cache
 * relies on it: directory.c).  Annexes (spindle_create_annex) take their
 * numbers and ranges the same way, and no event numbers.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/reloptions.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/visibilitymap.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/heap.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "catalog/toasting.h"
#include "commands/extension.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "table/spindle_table.h"


/*
 * GUC spindle.test_vslot_base, for tests only: the allocator treats the
 * slots below it as taken, so new ranges start at or after it.
 */
int			spindle_test_vslot_base = 0;

static int	create_spindles(Relation facade, int count, bool ready_only,
							int64 first_no);

/* this transaction created spindles (and holds a creation lock) */
static bool created_spindles = false;

/*
 * A prepared transaction would keep the creation lock until COMMIT
 * PREPARED, and every producer that needs a new spindle of the table
 * would wait for it: refuse, as PostgreSQL refuses to prepare after
 * LISTEN or NOTIFY.  At transaction end, forget that spindles were made.
 */
static void
creation_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_PRE_PREPARE && created_spindles)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot PREPARE a transaction that has created spindles"),
				 errhint("Create the table, or insert its first events, outside the prepared transaction.")));

	if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT &&
		event != XACT_EVENT_PARALLEL_COMMIT &&
		event != XACT_EVENT_PARALLEL_ABORT && event != XACT_EVENT_PREPARE)
		return;
	created_spindles = false;
}

/* Called once per backend, by spindle_directory_init. */
void
spindle_creation_init(void)
{
	RegisterXactCallback(creation_xact_callback, NULL);
}

/* Has this transaction created spindles (of any table)? */
bool
spindle_xact_created_spindles(void)
{
	return created_spindles;
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

/* ----------------------------------------------------------------
 * Spindle creation
 *
 * Range allocation.  Under the creation lock, and with a snapshot taken
 * after it, the ranges taken are exactly those of the facade's catalog
 * rows plus its pending ranges (slotmap.c): every earlier creator has
 * ended, so its rows are visible if it committed and its pending entry
 * stays if it did not (rows of a rolled-back creation are dead, and its
 * pending entry covers its range until cleanup has removed the index
 * entries pointing into it).  What else writes ranges, and why it is
 * safe: cleanup deletes the rows of dropped spindles and the pending
 * entries of ended creators only after their index entries are gone, and
 * a deletion not yet committed still shows its row (the range is taken a
 * little longer); a drop only sets dropped_at, the row and its range stay;
 * TRUNCATE needs ACCESS EXCLUSIVE on the table, and creators hold at least
 * ACCESS SHARE.  The ranges are read once per creating call, by index
 * (the (relation, vbase) index gives them in order), and the call's
 * spindles are placed among them in memory.
 * ----------------------------------------------------------------
 */

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

/* Ranges ordered by vbase, and where first fit stopped (take_range). */
typedef struct RangeSet
{
	VRange	   *r;
	int			n;
	int			room;
	int64		taken;			/* slots in them */
	int64		cursor_capacity;	/* take_range resumes for this one ... */
	int			cursor;			/* ... at this range ... */
	int64		cursor_pos;		/* ... and this slot */
} RangeSet;

/* Add a range, at position `at` (-1: at the end; order is the caller's). */
static void
rangeset_insert(RangeSet *rs, int at, int64 vbase, int64 vcount)
{
	if (rs->n == rs->room)
	{
		rs->room = Max(64, rs->room * 2);
		rs->r = rs->r == NULL ? palloc(sizeof(VRange) * rs->room) :
			repalloc(rs->r, sizeof(VRange) * rs->room);
	}
	if (at < 0)
		at = rs->n;
	if (at < rs->n)
		memmove(&rs->r[at + 1], &rs->r[at], sizeof(VRange) * (rs->n - at));
	rs->r[at].vbase = vbase;
	rs->r[at].vcount = vcount;
	rs->n++;
	rs->taken += vcount;
}

/* Add a range where it belongs in vbase order. */
static void
rangeset_add_sorted(RangeSet *rs, int64 vbase, int64 vcount)
{
	int			lo = 0,
				hi = rs->n;

	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;

		if (rs->r[mid].vbase <= vbase)
			lo = mid + 1;
		else
			hi = mid;
	}
	rangeset_insert(rs, lo, vbase, vcount);
}

/*
 * A walk over the facade's catalog ranges in vbase order (either way), as
 * an index-only scan of the (relation, vbase) INCLUDE (vcount) index reads
 * them: an entry whose heap page the visibility map marks all-visible is
 * taken as it is, any other only if the heap has a version of its row
 * that the snapshot sees.  So the heap is visited only on pages that
 * changed since the catalog was last vacuumed.  Rows dropped or not: only
 * cleanup gives a range back.
 */
typedef struct RangeWalk
{
	SpindleCatalogRels *cr;
	IndexScanDesc scan;
	ScanDirection dir;
	TupleTableSlot *slot;
	Buffer		vmbuf;
	int			nread;			/* ranges returned so far */
} RangeWalk;

/* Start a walk; with below >= 0, only over ranges starting below it. */
static void
walk_begin(RangeWalk *w, SpindleCatalogRels *cr, Oid facade, Snapshot snap,
		   ScanDirection dir, int64 below)
{
	ScanKeyData keys[2];
	int			nkeys = 1;

	Assert(cr->byvbase_vcount);
	w->cr = cr;
	w->dir = dir;
	w->slot = table_slot_create(cr->heap, NULL);
	w->vmbuf = InvalidBuffer;
	w->nread = 0;
	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(facade));
	if (below >= 0)
		ScanKeyInit(&keys[nkeys++], 2, BTLessStrategyNumber, F_INT8LT,
					Int64GetDatum(below));
	w->scan = index_beginscan(cr->heap, cr->byvbase, snap, nkeys, 0);
	w->scan->xs_want_itup = true;
	index_rescan(w->scan, keys, nkeys, NULL, 0);
}

static bool
walk_next(RangeWalk *w, int64 *vbase, int64 *vcount)
{
	ItemPointer tid;

	while ((tid = index_getnext_tid(w->scan, w->dir)) != NULL)
	{
		bool		isnull;

		if (!VM_ALL_VISIBLE(w->cr->heap, ItemPointerGetBlockNumber(tid),
							&w->vmbuf))
		{
			if (!index_fetch_heap(w->scan, w->slot))
				continue;		/* no version of it is visible */
			ExecClearTuple(w->slot);
		}
		*vbase = DatumGetInt64(index_getattr(w->scan->xs_itup, 2,
											 w->scan->xs_itupdesc, &isnull));
		*vcount = DatumGetInt64(index_getattr(w->scan->xs_itup, 3,
											  w->scan->xs_itupdesc, &isnull));
		w->nread++;
		return true;
	}
	return false;
}

static void
walk_end(RangeWalk *w)
{
	if (BufferIsValid(w->vmbuf))
		ReleaseBuffer(w->vmbuf);
	index_endscan(w->scan);
	ExecDropSingleTupleTableSlot(w->slot);
}

/*
 * First fit in memory: find room for `capacity` events (0: as many as the
 * largest gap holds, up to SPINDLE_MAX_CAPACITY: the lowest gap that holds
 * that many, else the largest) among the gaps of rs, lowest slots first,
 * and take it.  Calls with the same capacity resume where the last one stopped: no
 * gap before it holds that many.
 */
static bool
take_range(RangeSet *rs, int64 capacity, int64 *vbase, int64 *vcount)
{
	int			i = 0;
	int			at = -1;
	int64		pos = 0;
	int64		best_base = -1,
				best_len = 0;

	if (capacity > 0 && capacity == rs->cursor_capacity)
	{
		i = rs->cursor;
		pos = rs->cursor_pos;
	}
	for (; i <= rs->n; i++)
	{
		int64		next = (i < rs->n) ? rs->r[i].vbase : SPINDLE_VSLOTS;
		int64		gap = next - pos;

		if (gap > 0)
		{
			if (capacity > 0 && gap >= capacity)
			{
				best_base = pos;
				best_len = capacity;
				at = i;
				break;
			}
			if (capacity == 0 && gap > best_len)
			{
				best_base = pos;
				best_len = Min(gap, SPINDLE_MAX_CAPACITY);
				at = i;
				if (best_len == SPINDLE_MAX_CAPACITY)
					break;
			}
		}
		if (i < rs->n)
			pos = Max(pos, rs->r[i].vbase + rs->r[i].vcount);
	}
	if (best_base < 0)
		return false;
	rangeset_insert(rs, at, best_base, best_len);
	rs->cursor_capacity = capacity;
	rs->cursor = at + 1;
	rs->cursor_pos = best_base + best_len;
	*vbase = best_base;
	*vcount = best_len;
	return true;
}

/*
 * Range allocation for one creating call (see "Range allocation" above).
 * The policy is first fit, lowest slots first, so that the slot map stays
 * compact, at a cost that does not grow with the number of spindles:
 *
 * 1. walk the ranges from slot 0, but over at most ALLOC_WALK of them: a
 *    table with fewer ranges, or whose lowest gap is among the first ones
 *    (a queue whose oldest spindles were retired), gets exactly first fit;
 * 2. else take the slots right after the range given last (the newest
 *    spindle's), if free: one probe of the index for the range below
 *    their end (ranges never overlap, so that one is the only one that
 *    could reach into them) and a look at the pending ranges;
 * 3. else, and for every ALLOC_FULL_EVERY-th spindle number (so that a
 *    gap deeper than step 1 looks is never missed for long), read every
 *    range and place this call's spindles among them in memory.
 *
 * So between two full reads at most ALLOC_FULL_EVERY spindles go right
 * after the last one instead of into a deeper gap; every other placement
 * is the one first fit would choose.  Pending ranges and the ranges given
 * by this call so far (which the snapshot does not see) are kept in
 * `extra`.
 */
#define ALLOC_WALK			64
#define ALLOC_FULL_EVERY	64

typedef struct Allocator
{
	Relation	facade;
	SpindleCatalogRels *cr;
	Snapshot	snap;
	RangeSet	extra;			/* pending, and this call's */
	bool		full;			/* all ranges are in `all` */
	RangeSet	all;
	int64		rover;			/* end of the range given last */
} Allocator;

static void
allocator_begin(Allocator *a, Relation facade, SpindleCatalogRels *cr,
				Snapshot snap)
{
	SpindlePending pending[SPINDLE_MAX_PENDING];
	int			npending = spindle_pending_read(facade, pending);
	int64		newest_no = 0;
	ScanKeyData keys[3];
	SysScanDesc scan;
	HeapTuple	tup;
	int			i;

	memset(a, 0, sizeof(Allocator));
	a->facade = facade;
	a->cr = cr;
	a->snap = snap;
	a->extra.cursor_capacity = -1;
	a->all.cursor_capacity = -1;

	/* the range given last: the newest row's, or a newer pending one's */
	scan = spindle_catalog_scan_rows(cr, RelationGetRelid(facade),
									 PG_INT64_MIN, PG_INT64_MAX, snap, keys);
	tup = systable_getnext_ordered(scan, BackwardScanDirection);
	if (tup != NULL)
	{
		SpindleEntry sp;
		bool		dropped;

		spindle_catalog_decode_row(RelationGetDescr(cr->heap), tup, &sp,
								   &dropped);
		newest_no = sp.spindle_no;
		a->rover = sp.vbase + sp.vcount;
	}
	systable_endscan_ordered(scan);
	for (i = 0; i < npending; i++)
	{
		rangeset_add_sorted(&a->extra, pending[i].vbase, pending[i].vcount);
		if (pending[i].spindle_no + pending[i].nspindles - 1 > newest_no)
		{
			newest_no = pending[i].spindle_no + pending[i].nspindles - 1;
			a->rover = pending[i].vbase + pending[i].vcount;
		}
	}
	/* tests only: the slots below spindle.test_vslot_base count as taken */
	if (spindle_test_vslot_base > 0)
	{
		rangeset_add_sorted(&a->extra, 0, spindle_test_vslot_base);
		a->rover = Max(a->rover, (int64) spindle_test_vslot_base);
	}
}

/* Read every range: the catalog's, merged with `extra`. */
static void
allocator_read_all(Allocator *a)
{
	Oid			relid = RelationGetRelid(a->facade);
	RangeSet   *rs = &a->all;
	int			i,
				j;
	VRange	   *catalog;
	int			ncatalog;

	if (a->cr->byvbase_vcount)
	{
		RangeWalk	w;
		int64		vbase,
					vcount;

		walk_begin(&w, a->cr, relid, a->snap, ForwardScanDirection, -1);
		while (walk_next(&w, &vbase, &vcount))
			rangeset_insert(rs, -1, vbase, vcount);
		walk_end(&w);
	}
	else
	{
		/* a database without the index the install script makes */
		TupleDesc	td = RelationGetDescr(a->cr->heap);
		ScanKeyData keys[3];
		SysScanDesc scan;
		HeapTuple	tup;

		scan = spindle_catalog_scan_rows(a->cr, relid, PG_INT64_MIN,
										 PG_INT64_MAX, a->snap, keys);
		while ((tup = systable_getnext_ordered(scan, ForwardScanDirection)) != NULL)
		{
			SpindleEntry sp;
			bool		dropped;

			spindle_catalog_decode_row(td, tup, &sp, &dropped);
			rangeset_insert(rs, -1, sp.vbase, sp.vcount);
		}
		systable_endscan_ordered(scan);
		if (rs->n > 1)
			qsort(rs->r, rs->n, sizeof(VRange), cmp_vrange);
	}

	/* merge `extra` in */
	catalog = rs->r;
	ncatalog = rs->n;
	memset(rs, 0, sizeof(RangeSet));
	rs->cursor_capacity = -1;
	for (i = 0, j = 0; i < ncatalog || j < a->extra.n;)
	{
		if (j >= a->extra.n ||
			(i < ncatalog && catalog[i].vbase <= a->extra.r[j].vbase))
		{
			rangeset_insert(rs, -1, catalog[i].vbase, catalog[i].vcount);
			i++;
		}
		else
		{
			rangeset_insert(rs, -1, a->extra.r[j].vbase, a->extra.r[j].vcount);
			j++;
		}
	}
	if (catalog != NULL)
		pfree(catalog);
	a->full = true;
}

/*
 * Step 1: first fit over the lowest ranges.  Returns true with *vbase set
 * if it found room; false with *exhausted set if it saw every range and
 * there is no room at all.
 */
static bool
allocator_low_walk(Allocator *a, int64 capacity, int64 *vbase,
				   bool *exhausted)
{
	RangeWalk	w;
	int64		pos = 0;
	int64		cb = 0,
				cc = 0;
	bool		have = false;
	bool		more = true;
	bool		found = false;
	int			j = 0;

	*exhausted = false;
	walk_begin(&w, a->cr, RelationGetRelid(a->facade), a->snap,
			   ForwardScanDirection, -1);
	for (;;)
	{
		int64		nb,
					nc;

		if (!have && more && w.nread < ALLOC_WALK)
		{
			have = walk_next(&w, &cb, &cc);
			more = have;
		}
		if (!have && more)
			break;				/* walked as far as step 1 goes */
		/* the next range in vbase order, the catalog's or an extra one */
		if (have && (j >= a->extra.n || cb <= a->extra.r[j].vbase))
		{
			nb = cb;
			nc = cc;
			have = false;
		}
		else if (j < a->extra.n)
		{
			nb = a->extra.r[j].vbase;
			nc = a->extra.r[j].vcount;
			j++;
		}
		else
		{
			/* past every range */
			if (SPINDLE_VSLOTS - pos >= capacity)
			{
				*vbase = pos;
				found = true;
			}
			else
				*exhausted = true;
			break;
		}
		if (nb - pos >= capacity)
		{
			*vbase = pos;
			found = true;
			break;
		}
		pos = Max(pos, nb + nc);
	}
	walk_end(&w);
	return found;
}

/* Step 2: are the `capacity` slots from a->rover free? */
static bool
allocator_rover_fits(Allocator *a, int64 capacity)
{
	int64		lo = a->rover;
	int64		hi = a->rover + capacity;
	RangeWalk	w;
	int64		vbase,
				vcount;
	bool		fits = hi <= SPINDLE_VSLOTS;
	int			i;

	for (i = 0; fits && i < a->extra.n; i++)
		if (a->extra.r[i].vbase < hi &&
			a->extra.r[i].vbase + a->extra.r[i].vcount > lo)
			fits = false;
	if (!fits)
		return false;
	/* the range starting last below hi is the only one that could reach in */
	walk_begin(&w, a->cr, RelationGetRelid(a->facade), a->snap,
			   BackwardScanDirection, hi);
	if (walk_next(&w, &vbase, &vcount) && vbase + vcount > lo)
		fits = false;
	walk_end(&w);
	return fits;
}

/* Give spindle number spindle_no a range of `capacity` slots (see above). */
static bool
allocator_take(Allocator *a, int64 capacity, int64 spindle_no,
			   int64 *vbase, int64 *vcount)
{
	bool		found = false;
	bool		exhausted = false;

	if (!a->full &&
		(capacity == 0 || !a->cr->byvbase_vcount ||
		 spindle_no % ALLOC_FULL_EVERY == 0))
		allocator_read_all(a);
	if (!a->full)
	{
		found = allocator_low_walk(a, capacity, vbase, &exhausted);
		if (!found && !exhausted && allocator_rover_fits(a, capacity))
		{
			*vbase = a->rover;
			found = true;
		}
		if (found)
		{
			*vcount = capacity;
			rangeset_add_sorted(&a->extra, *vbase, *vcount);
			a->rover = *vbase + *vcount;
			return true;
		}
		allocator_read_all(a);
	}
	if (!take_range(&a->all, capacity, vbase, vcount))
		return false;
	a->rover = *vbase + *vcount;
	return true;
}

static void
allocator_end(Allocator *a)
{
	if (a->extra.r != NULL)
		pfree(a->extra.r);
	if (a->all.r != NULL)
		pfree(a->all.r);
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

/* Release every lock this backend holds on the object with this tag. */
static void
release_all_modes(LOCKTAG *tag)
{
	LOCKMODE	mode;

	for (mode = AccessShareLock; mode <= AccessExclusiveLock; mode++)
		while (LockHeldByMe(tag, mode))
			LockRelease(tag, mode, false);
}

/*
 * Give up the locks that creating spindle relation `segment` took: on it,
 * its TOAST table and TOAST index, and its row type (about five per
 * spindle).  Nobody else can see a relation before its creator commits, so
 * core takes them only "because it doesn't hurt" (heap.c); a transaction
 * that creates many spindles (CREATE TABLE AS, a COPY into a table created
 * in the same transaction, as pg_restore --single-transaction does) would
 * otherwise fill the shared lock table with them.  Once it commits, the
 * rules for spindles apply: nobody needs a lock on one but while using it.
 */
static void
release_creation_locks(Oid segment)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(segment));
	Oid			toast = InvalidOid;
	Oid			rowtype = InvalidOid;
	LOCKTAG		tag;

	if (HeapTupleIsValid(tup))
	{
		toast = ((Form_pg_class) GETSTRUCT(tup))->reltoastrelid;
		rowtype = ((Form_pg_class) GETSTRUCT(tup))->reltype;
		ReleaseSysCache(tup);
	}
	if (OidIsValid(toast))
	{
		Relation	trel = relation_open(toast, NoLock);
		List	   *indexes = RelationGetIndexList(trel);
		ListCell   *lc;

		relation_close(trel, NoLock);
		foreach(lc, indexes)
		{
			SET_LOCKTAG_RELATION(tag, MyDatabaseId, lfirst_oid(lc));
			release_all_modes(&tag);
		}
		list_free(indexes);
		SET_LOCKTAG_RELATION(tag, MyDatabaseId, toast);
		release_all_modes(&tag);
	}
	if (OidIsValid(rowtype))
	{
		SET_LOCKTAG_OBJECT(tag, MyDatabaseId, TypeRelationId, rowtype, 0);
		release_all_modes(&tag);
	}
	SET_LOCKTAG_RELATION(tag, MyDatabaseId, segment);
	release_all_modes(&tag);
}

/*
 * Create the relation of one spindle (and its TOAST table) and record it,
 * with its range of virtual slots [vbase, vbase + vcount) recorded as
 * pending first.  sp has its number, capacity, range and event numbers;
 * its segment is filled in here.  The caller holds the creation lock and AccessShareLock
 * (at least) on the facade.
 *
 * Spindles belong to the bootstrap superuser, whoever owns the table: an
 * owner change of the table, REASSIGN OWNED or DROP OWNED BY its old owner
 * must not touch them (they go with the table through their dependency).
 * Nobody but a superuser can read them directly.
 */
static void
create_one_spindle(Relation facade, SpindleEntry *sp)
{
	int64		spindle_no = sp->spindle_no;
	char		relname[NAMEDATALEN];
	TupleDesc	tupdesc;
	Datum		reloptions;
	Oid			segment;
	ObjectAddress segaddr,
				facaddr;
	static char *validnsps[] = HEAP_RELOPT_NAMESPACES;
	SpindlePending p;

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
		p.vbase = sp->vbase;
		p.vcount = sp->vcount;
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

	sp->segment = segment;
	spindle_catalog_add_spindle(RelationGetRelid(facade), sp);
	release_creation_locks(segment);
}

/*
 * Has this spindle never been given an event?  1 if so, 0 if it has events
 * (or slots handed out for them), -1 if it no longer exists.
 */
int
spindle_segment_is_empty(Oid segment)
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
 * How many spindles at the end of the facade have no event yet: its
 * catalog rows from the highest number down, to the first spindle that
 * has one (or until `enough` are found).  Costs what the ready spindles
 * count, not what the table holds.
 */
static int
count_ready_spindles(SpindleCatalogRels *cr, Oid facade, Snapshot snap, int enough)
{
	TupleDesc	td = RelationGetDescr(cr->heap);
	ScanKeyData keys[3];
	SysScanDesc scan;
	HeapTuple	tup;
	int			empty = 0;

	scan = spindle_catalog_scan_rows(cr, facade, PG_INT64_MIN, PG_INT64_MAX,
									 snap, keys);
	while (empty < enough &&
		   (tup = systable_getnext_ordered(scan, BackwardScanDirection)) != NULL)
	{
		SpindleEntry sp;
		bool		dropped;
		int			e;

		spindle_catalog_decode_row(td, tup, &sp, &dropped);
		/* an empty annex is no ready spindle: producers never use one */
		if (dropped || spindle_is_annex(&sp))
			continue;
		e = spindle_segment_is_empty(sp.segment);
		if (e < 0)
			continue;
		if (e == 0)
			break;
		empty++;
	}
	systable_endscan_ordered(scan);
	return empty;
}

/*
 * Create spindles for the facade in the current transaction.  With
 * ready_only, create only as many as are needed for `count` empty spindles
 * to follow the last one that has events; otherwise create `count` new
 * ones.  Takes the table's creation lock (serialising creators, never
 * blocking DML, VACUUM or ANALYZE) and sends a relcache invalidation.
 * The caller holds at least AccessShareLock on the facade.  Returns how
 * many spindles were created.  What it reads costs the same whatever the
 * number of spindles, but for the ranges taken: one index scan of them
 * per call, for all the spindles it makes.
 */
int
spindle_create_spindles(Relation facade, int count, bool ready_only)
{
	return create_spindles(facade, count, ready_only, 0);
}

/*
 * Create one spindle whose first event number is first_no, for an insert
 * that keeps a supplied number (spindle_place_kept).  Its number comes
 * after every spindle's, so first_no must lie past every event number the
 * table has handed out: the spindle takes the table's next event number
 * if that is higher (the caller then finds first_no in no spindle).  The
 * floor of the layers above (event_floor) does not apply: the caller
 * asked for this number.  Same locking as spindle_create_spindles.
 */
void
spindle_create_spindle_at(Relation facade, int64 first_no)
{
	Assert(first_no > 0);
	(void) create_spindles(facade, 1, false, first_no);
}

/*
 * Create an annex of the given generation (1..SPINDLE_ANNEX_GENERATIONS)
 * for the facade in the current transaction, as a ready spindle is made:
 * under the creation lock, with a range of virtual slots of its own at the
 * table's capacity, a spindle number after every other, and no event
 * numbers (design.md, "Compaction", section 2).  Producers never place
 * events in it (the directory keeps it apart).  The caller holds at least
 * AccessShareLock on the facade.  Returns its spindle number.
 */
int64
spindle_create_annex(Relation facade, int generation)
{
	Oid			relid = RelationGetRelid(facade);
	SpindleCatalogRels cr;
	Snapshot	snap;
	Allocator	alloc;
	SpindleEntry sp;
	int64		event_end;
	int64		floor;
	bool		found;

	Assert(generation >= 1 && generation <= SPINDLE_ANNEX_GENERATIONS);
	spindle_check_layout(facade);
	spindle_register_table(relid);
	spindle_lock_creation(relid);
	spindle_catalog_open(&cr);
	snap = spindle_catalog_snapshot();

	memset(&sp, 0, sizeof(sp));
	sp.generation = generation;
	sp.capacity = spindle_rel_capacity_option(relid, &found);
	if (!found)
		sp.capacity = spindle_events_per_spindle;
	if (sp.capacity == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("spindle table \"%s\" has a single unbounded spindle and takes no annex",
						RelationGetRelationName(facade))));
	forget_committed_pending(facade);
	created_spindles = true;
	floor = spindle_catalog_max_spindle_no(&cr, relid, snap, &event_end) + 1;
	allocator_begin(&alloc, facade, &cr, snap);
	sp.spindle_no = spindle_next_spindle_no(facade, floor);
	if (!allocator_take(&alloc, sp.capacity, sp.spindle_no, &sp.vbase,
						&sp.vcount))
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("spindle table \"%s\" has no room for an annex of %lld events",
						RelationGetRelationName(facade), (long long) sp.capacity),
				 errdetail("A spindle table holds at most %lld events in spindles that are not yet dropped; %lld are taken.",
						   (long long) SPINDLE_VSLOTS, (long long) alloc.all.taken),
				 errhint("Consume or purge events so that full spindles can be dropped.")));
	create_one_spindle(facade, &sp);
	allocator_end(&alloc);
	UnregisterSnapshot(snap);
	spindle_catalog_close(&cr);
	CacheInvalidateRelcacheByRelid(relid);
	CommandCounterIncrement();
	return sp.spindle_no;
}

/*
 * The work of spindle_create_spindles and spindle_create_spindle_at: with
 * first_no > 0, the first spindle made numbers its events from there (or
 * from the table's next number, if higher), without the event_floor hook.
 */
static int
create_spindles(Relation facade, int count, bool ready_only, int64 first_no)
{
	Oid			relid = RelationGetRelid(facade);
	SpindleCatalogRels cr;
	Snapshot	snap;
	Allocator	alloc;
	int64		capacity;
	int64		floor;
	int64		event_floor;
	int			ncreate = count;
	int			i;
	bool		found;

	spindle_check_layout(facade);
	/* before the creation lock: this may wait for a row lock (lock order) */
	spindle_register_table(relid);
	spindle_lock_creation(relid);

	/* taken after the lock: every creator before us has ended */
	spindle_catalog_open(&cr);
	snap = spindle_catalog_snapshot();
	if (ready_only)
		ncreate = count - count_ready_spindles(&cr, relid, snap, count);
	if (ncreate <= 0)
	{
		UnregisterSnapshot(snap);
		spindle_catalog_close(&cr);
		return 0;
	}

	capacity = spindle_rel_capacity_option(relid, &found);
	if (!found)
		capacity = spindle_events_per_spindle;

	forget_committed_pending(facade);
	created_spindles = true;
	floor = spindle_catalog_max_spindle_no(&cr, relid, snap, &event_floor) + 1;
	/* a floor of the layers above (a queue name's high-water mark) */
	if (first_no > 0)
		event_floor = Max(event_floor, first_no);
	else if (spindle_table_hooks.event_floor)
		event_floor = Max(event_floor, spindle_table_hooks.event_floor(facade));
	allocator_begin(&alloc, facade, &cr, snap);
	for (i = 0; i < ncreate; i++)
	{
		SpindleEntry sp;

		memset(&sp, 0, sizeof(sp));
		sp.spindle_no = spindle_next_spindle_no(facade, floor);
		sp.capacity = capacity;
		if (!allocator_take(&alloc, capacity, sp.spindle_no, &sp.vbase,
							&sp.vcount))
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("spindle table \"%s\" has no room for another spindle of %lld events",
							RelationGetRelationName(facade), (long long) capacity),
					 errdetail("A spindle table holds at most %lld events in spindles that are not yet dropped; %lld are taken.",
							   (long long) SPINDLE_VSLOTS, (long long) alloc.all.taken),
					 errhint("Consume or purge events so that full spindles can be dropped, or use a smaller events_per_spindle.")));
		/* after the slots: an unbounded spindle's count is its range's */
		sp.first_no = spindle_take_event_nos(facade, event_floor, sp.vcount);
		create_one_spindle(facade, &sp);
	}
	allocator_end(&alloc);
	UnregisterSnapshot(snap);
	spindle_catalog_close(&cr);
	if (spindle_table_hooks.events_numbered)
	{
		SpindleNumbers next;

		spindle_peek_numbers(facade, &next);
		spindle_table_hooks.events_numbered(facade, next.event_no);
	}

	CacheInvalidateRelcacheByRelid(relid);
	CommandCounterIncrement();
	return ncreate;
}
