/*-------------------------------------------------------------------------
 *
 * directory.c
 *	  The spindle directory: which spindles a table has, cached per backend
 *	  (SpindleDirectory), and kept up to date by relcache invalidations.
 *
 * The persistent directory is the table spindle.spindle_catalog, read and
 * written by directory_catalog.c; spindles are created by
 * spindle_create.c.  This file holds the backend-local cache of what the
 * catalog says: one directory per facade, read by index with the latest
 * snapshot (a REPEATABLE READ transaction must still find spindles
 * created after its snapshot was taken).  Rows with relation 0 are
 * spindles detached from a dropped or truncated table (detach.c); no
 * table's directory lists them.
 *
 * The backend-local cache (SpindleDirectory) is kept up to date by
 * relcache invalidations.  Creating spindles invalidates the facade;
 * dropping one drops its relation, which invalidates that relation; any
 * other change to a live spindle's row (filled_at, capacity) invalidates
 * the spindle's relation too.  An invalidation only marks the cached
 * directory stale; the next acquire brings it up to date by reading what
 * changed (see "Keeping a directory up to date" below), or reads it all
 * again where that cannot be trusted.  A directory in use is pinned: an
 * invalidation arriving while a caller holds it (any lock acquisition may
 * deliver one) never changes or frees it under the caller; a stale copy
 * still pinned is kept in a graveyard until its last release.
 *
 * The cache is bounded and never walked whole on the hot path, so that a
 * backend going round many tables (100 000 queues) pays the same per call
 * as one using a few: it keeps at most DIR_CACHE_MAX directories beyond
 * those the current transaction acquired (least recently acquired go
 * first, and are read again when needed); an invalidation finds the
 * directory of a spindle relation through a map from spindle to table
 * (seg_owner); transaction end looks only at the directories the
 * transaction acquired.
 *
 * Locks: reading the catalog for a directory takes AccessShareLock on the
 * catalog tables and their indexes (directory_catalog.c), kept to the end
 * of the transaction; every lock is taken before the invalidations that
 * have arrived are processed, and the snapshot only after them (see
 * "Order" below).  The cache itself is backend-local and takes no lock.
 *
 * Annexes (spindles of kind 'annex': design.md, "Compaction", section 2)
 * are kept apart, in dir->annexes, never in dir->spindles: everything that
 * relies on spindles filling in order walks dir->spindles alone, and only
 * readers (spindle_dir_entry, spindle_find_by_vslot) meet annexes.  A
 * change to an annex's row has its directory read in full.
 *
 * Invariants kept here: a directory is never older than the last
 * invalidation its backend processed, and never holds two spindles with
 * overlapping ranges; a directory that may hold rows of the current
 * transaction is freed if the transaction does not commit; a pinned
 * directory is never changed or freed.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/xact.h"
#include "lib/ilist.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "table/spindle_table.h"


/* One cached directory per facade. */
typedef struct DirCacheEntry
{
	Oid			facade;			/* hash key */
	SpindleDirectory *current;	/* NULL or the newest directory */
	int64		open_spindle_no;	/* where this backend last inserted */
	dlist_node	lru;			/* in dir_lru, most recently acquired first */
	bool		in_xact;		/* acquired by the current transaction */
} DirCacheEntry;

static HTAB *dir_cache = NULL;

/*
 * The cache holds at most DIR_CACHE_MAX directories beyond those the
 * current transaction acquired: a backend that goes round many tables
 * reads the directories it no longer holds again (one index probe of the
 * catalog), as core reads a relation's catalog rows again after its
 * relcache entry went.  So the memory of the cache and every walk of it
 * (invalidations, sweep_dropped_tables) stay bounded whatever the number
 * of tables.
 */
#define DIR_CACHE_MAX	1024

static dlist_head dir_lru = DLIST_STATIC_INIT(dir_lru);

/* facades whose entries the current transaction acquired (in_xact) */
static List *dir_xact_facades = NIL;

/* dir_invalidations when sweep_dropped_tables last looked */
static uint64 dir_swept_invalidations = 0;

/*
 * Which facade's cached directory holds each spindle relation, so that an
 * invalidation of a spindle finds its directory without a walk of the
 * cache.  A mapping is entered for every spindle a directory gets (a full
 * read, or the spindles added by an update) and removed when a directory
 * loses the spindle or leaves the cache; one left over (a directory freed
 * at transaction end, an update that failed) only costs a lookup that
 * finds nothing to mark.
 */
typedef struct SegOwner
{
	Oid			segment;		/* hash key */
	Oid			facade;
} SegOwner;

static HTAB *seg_owner = NULL;

static void
seg_owner_add(Oid facade, const SpindleEntry *spindles, int n)
{
	int			i;

	for (i = 0; i < n; i++)
	{
		SegOwner   *o = hash_search(seg_owner, &spindles[i].segment,
									HASH_ENTER, NULL);

		o->facade = facade;
	}
}

static void
seg_owner_remove(Oid facade, Oid segment)
{
	SegOwner   *o = hash_search(seg_owner, &segment, HASH_FIND, NULL);

	if (o != NULL && o->facade == facade)
		hash_search(seg_owner, &segment, HASH_REMOVE, NULL);
}

/* dir leaves the cache (or is replaced by a full read): forget its spindles */
static void
seg_owner_forget(SpindleDirectory *dir)
{
	int			i;

	for (i = 0; i < dir->nspindles; i++)
		seg_owner_remove(dir->facade, dir->spindles[i].segment);
	for (i = 0; i < dir->nannexes; i++)
		seg_owner_remove(dir->facade, dir->annexes[i].segment);
}

static List *dir_graveyard = NIL;	/* stale, still pinned directories */

/* relcache invalidations this backend has processed, of any relation */
static uint64 dir_invalidations = 0;

/* The xmin of the facade's pg_class row: it changes with new storage. */
static TransactionId
facade_class_xmin(Oid relid)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	TransactionId xmin;

	if (!HeapTupleIsValid(tup))
		return InvalidTransactionId;
	xmin = HeapTupleHeaderGetRawXmin(tup->t_data);
	ReleaseSysCache(tup);
	return xmin;
}

/* ----------------------------------------------------------------
 * The backend-local cache
 *
 * Keeping a directory up to date.  A directory D read with snapshot S
 * holds every live spindle whose row S sees, and remembers the highest
 * spindle number among all the rows S saw (dropped ones too).  Three
 * kinds of change reach it:
 *
 * - New spindles.  They are created under the table's creation lock,
 *   which each creator holds until its transaction has ended, and their
 *   numbers only increase; so creators commit in the order of their
 *   numbers, and a snapshot that sees a row numbered n sees every
 *   committed row numbered below n.  Reading the rows numbered above D's
 *   highest therefore finds every spindle created since D was read.  (A
 *   creation that rolled back leaves no row; its number is never given
 *   again.)  The creator invalidates the facade when it commits.
 * - Dropped spindles.  A drop drops the spindle's relation, and core sends
 *   a relcache invalidation of it at commit; the callback finds that
 *   relation among D's spindles (D.byseg) and queues the spindle's number
 *   for a re-read of its row, which finds it dropped (or gone).  Changes
 *   to a live spindle's row (filled_at, capacity) invalidate the spindle's
 *   relation likewise, so the same re-read picks them up.
 * - Everything else is read in full again: new storage for the facade
 *   (TRUNCATE, VACUUM FULL, CLUSTER) and ALTER TABLE change the xmin of
 *   its pg_class row, which D remembers (a table dropped and another made
 *   with its OID has another row too); so does a transaction that changed
 *   the catalog otherwise than by creating spindles and then rolled back
 *   a subtransaction (its drops and cleanups may bring rows back that D no
 *   longer holds; dir_subxact_callback), a table created in this
 *   transaction, parallel
 *   mode, more invalidated spindles than D can queue, and a reset of the
 *   whole cache (InvalidOid).  A transaction's own creations need no full
 *   read: a rollback to a savepoint undoes the creation of their
 *   relations, which invalidates them here, and the re-read finds their
 *   rows gone; a directory that may hold rows of the transaction is freed
 *   if the transaction does not commit.
 *
 * Order: refresh_directory takes every lock it needs, then processes the
 * invalidations that have arrived, then takes the snapshot; a
 * transaction's invalidations are sent after it became visible, so every
 * change this backend was told of is visible to that snapshot.  The
 * snapshot may see more (a commit whose invalidations have not arrived
 * yet): then D may keep a spindle dropped meanwhile until its
 * invalidation arrives, exactly as a directory read in full would be
 * stale until then.  That is harmless unless the dropped spindle's range
 * has since been given to a new spindle that D now holds too: every
 * update checks that no two of D's ranges overlap, and reads in full if
 * they do.  Any invalidation processed during the refresh (none should:
 * nothing there takes a lock) leaves D for a full read next time.
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

/* Queue for a re-read the rows of dir's spindles held in relation relid. */
static void
note_segment_invalidation(SpindleDirectory *dir, Oid relid)
{
	int			lo = 0,
				hi = dir->nspindles;

	/* the first entry whose segment is relid or more */
	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;

		if (dir->byseg[mid].segment < relid)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < dir->nspindles && dir->byseg[lo].segment == relid; lo++)
	{
		if (dir->nrecheck < SPINDLE_DIR_MAX_RECHECK)
			dir->recheck[dir->nrecheck++] =
				dir->spindles[dir->byseg[lo].index].spindle_no;
		else
			dir->needs_full = true;
		dir->stale = true;
	}
	/* an annex (few, and rarely changed): read the directory in full */
	for (lo = 0; lo < dir->nannexes; lo++)
		if (dir->annexes[lo].segment == relid)
			dir->stale = dir->needs_full = true;
}

/*
 * Relcache callback: mark the cached directories that relid (InvalidOid:
 * every relation) concerns stale.  Nothing is freed or changed but the
 * marks: a pinned directory stays as its holders see it.
 */
static void
dir_invalidate(Datum arg, Oid relid)
{
	HASH_SEQ_STATUS status;
	DirCacheEntry *e;
	SegOwner   *o;
	ListCell   *lc;

	dir_invalidations++;
	/* the consume log's cache of consumer relations (hidden.c) */
	spindle_hidden_invalidate(relid);
	if (dir_cache == NULL)
		return;
	if (!OidIsValid(relid))
	{
		hash_seq_init(&status, dir_cache);
		while ((e = hash_seq_search(&status)) != NULL)
		{
			if (e->current != NULL)
			{
				e->current->stale = true;
				e->current->needs_full = true;
			}
		}
		return;
	}
	/* a directory being updated (only this transaction's can be) */
	foreach(lc, dir_xact_facades)
	{
		Oid			facade = lfirst_oid(lc);

		e = hash_search(dir_cache, &facade, HASH_FIND, NULL);
		if (e != NULL && e->current != NULL && e->current->updating)
		{
			e->current->stale = true;
			e->current->needs_full = true;
		}
	}
	/* the facade itself */
	e = hash_search(dir_cache, &relid, HASH_FIND, NULL);
	if (e != NULL && e->current != NULL)
		e->current->stale = true;
	/* one of its spindles */
	o = hash_search(seg_owner, &relid, HASH_FIND, NULL);
	if (o != NULL)
	{
		e = hash_search(dir_cache, &o->facade, HASH_FIND, NULL);
		if (e != NULL && e->current != NULL)
			note_segment_invalidation(e->current, relid);
	}
}

/*
 * At transaction end every pin is gone: free stale directories.  Only the
 * entries this transaction acquired can hold a pin, an update or rows of
 * their own (all three are set by acquire_directory), so only they are
 * looked at.
 */
static void
dir_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;
	bool		aborted;
	List	   *facades;

	if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT &&
		event != XACT_EVENT_PARALLEL_COMMIT &&
		event != XACT_EVENT_PARALLEL_ABORT && event != XACT_EVENT_PREPARE)
		return;
	/* a prepared transaction may still roll back */
	aborted = event != XACT_EVENT_COMMIT && event != XACT_EVENT_PARALLEL_COMMIT;

	if (dir_graveyard != NIL)
	{
		List	   *old = dir_graveyard;

		dir_graveyard = NIL;
		foreach(lc, old)
			free_directory((SpindleDirectory *) lfirst(lc));
		list_free(old);
	}
	facades = dir_xact_facades;
	dir_xact_facades = NIL;
	if (dir_cache == NULL)
	{
		list_free(facades);
		return;
	}
	foreach(lc, facades)
	{
		Oid			facade = lfirst_oid(lc);
		DirCacheEntry *e = hash_search(dir_cache, &facade, HASH_FIND, NULL);
		SpindleDirectory *dir;

		if (e == NULL)
			continue;
		e->in_xact = false;
		dir = e->current;
		if (dir == NULL)
			continue;
		dir->pins = 0;

		/*
		 * One that may hold rows of this transaction is wrong if it did
		 * not commit; one whose update failed half-way is wrong anyway.
		 */
		if (dir->updating || (aborted && dir->has_own))
		{
			seg_owner_forget(dir);
			free_directory(dir);
			e->current = NULL;
		}
		else
			dir->has_own = false;
	}
	list_free(facades);
}

/*
 * A subtransaction that rolls back may bring back catalog rows that this
 * transaction dropped or forgot, and that a directory read since no longer
 * holds: read those directories in full next time.  (A rollback of the
 * whole transaction frees them: dir_xact_callback.)
 */
static void
dir_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					 SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;

	if (event != SUBXACT_EVENT_ABORT_SUB || !spindle_xact_wrote_catalog() ||
		dir_cache == NULL)
		return;
	/* has_own is set only by this transaction's acquires */
	foreach(lc, dir_xact_facades)
	{
		Oid			facade = lfirst_oid(lc);
		DirCacheEntry *e = hash_search(dir_cache, &facade, HASH_FIND, NULL);

		if (e != NULL && e->current != NULL && e->current->has_own)
		{
			e->current->stale = true;
			e->current->needs_full = true;
		}
	}
}

/*
 * Called once per backend (_PG_init): the cache, its callbacks, and those
 * of the catalog access and of creation (their per-transaction flags).
 */
void
spindle_directory_init(void)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(DirCacheEntry);
	ctl.hcxt = TopMemoryContext;
	dir_cache = hash_create("spindle directories", 64, &ctl,
							HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(SegOwner);
	ctl.hcxt = TopMemoryContext;
	seg_owner = hash_create("spindle directory owners", 256, &ctl,
							HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	CacheRegisterRelcacheCallback(dir_invalidate, (Datum) 0);
	RegisterXactCallback(dir_xact_callback, NULL);
	RegisterSubXactCallback(dir_subxact_callback, NULL);
	spindle_catalog_init();
	spindle_creation_init();
}

/* qsort comparators */
static int
cmp_index_vbase(const void *a, const void *b, void *arg)
{
	const SpindleEntry *sp = (const SpindleEntry *) arg;
	int64		va = sp[*(const int *) a].vbase;
	int64		vb = sp[*(const int *) b].vbase;

	return (va > vb) - (va < vb);
}

static int
cmp_segref(const void *a, const void *b)
{
	const SpindleSegRef *x = (const SpindleSegRef *) a;
	const SpindleSegRef *y = (const SpindleSegRef *) b;

	if (x->segment != y->segment)
		return x->segment < y->segment ? -1 : 1;
	return (x->index > y->index) - (x->index < y->index);
}

/*
 * A new directory with room for nalloc spindles, in a memory context of
 * its own under the current one (so that an error while it is filled
 * frees it); install_directory moves it under TopMemoryContext.
 */
static SpindleDirectory *
new_directory(Oid facade, int nalloc)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext,
											  "spindle directory",
											  ALLOCSET_SMALL_SIZES);
	SpindleDirectory *dir = MemoryContextAllocZero(cxt, sizeof(SpindleDirectory));

	dir->cxt = cxt;
	dir->facade = facade;
	dir->nalloc = Max(nalloc, 8);
	dir->spindles = MemoryContextAlloc(cxt, sizeof(SpindleEntry) * dir->nalloc);
	dir->byvbase = MemoryContextAlloc(cxt, sizeof(int) * dir->nalloc);
	dir->byseg = MemoryContextAlloc(cxt, sizeof(SpindleSegRef) * dir->nalloc);
	dir->annex_alloc = 2;
	dir->annexes = MemoryContextAlloc(cxt,
									  sizeof(SpindleEntry) * dir->annex_alloc);
	return dir;
}

/*
 * Append an annex (numbered above dir's annexes) to dir->annexes, and map
 * its relation to the facade.  Annexes are never in dir->spindles.
 */
static void
add_annex(SpindleDirectory *dir, const SpindleEntry *sp)
{
	Assert(spindle_is_annex(sp));
	if (dir->nannexes == dir->annex_alloc)
	{
		dir->annex_alloc *= 2;
		dir->annexes = repalloc(dir->annexes,
								sizeof(SpindleEntry) * dir->annex_alloc);
	}
	dir->annexes[dir->nannexes++] = *sp;
	seg_owner_add(dir->facade, sp, 1);
}

/* Make room for n spindles in dir->spindles (the other arrays are rebuilt). */
static void
reserve_spindles(SpindleDirectory *dir, int n)
{
	if (n <= dir->nalloc)
		return;
	dir->nalloc = Max(n, dir->nalloc * 2);
	dir->spindles = repalloc(dir->spindles, sizeof(SpindleEntry) * dir->nalloc);
	dir->byvbase = repalloc(dir->byvbase, sizeof(int) * dir->nalloc);
	dir->byseg = repalloc(dir->byseg, sizeof(SpindleSegRef) * dir->nalloc);
}

/* A copy of dir (which its holders keep using), unpinned. */
static SpindleDirectory *
copy_directory(SpindleDirectory *dir)
{
	SpindleDirectory *copy = new_directory(dir->facade, dir->nalloc);
	MemoryContext cxt = copy->cxt;
	SpindleEntry *spindles = copy->spindles;
	int		   *byvbase = copy->byvbase;
	SpindleSegRef *byseg = copy->byseg;
	SpindleEntry *annexes = MemoryContextAlloc(cxt, sizeof(SpindleEntry) *
											   dir->annex_alloc);

	memcpy(copy, dir, sizeof(SpindleDirectory));
	copy->cxt = cxt;
	copy->spindles = spindles;
	copy->byvbase = byvbase;
	copy->byseg = byseg;
	copy->annexes = annexes;
	memcpy(annexes, dir->annexes, sizeof(SpindleEntry) * dir->nannexes);
	copy->pins = 0;
	copy->nrecheck = 0;
	memcpy(spindles, dir->spindles, sizeof(SpindleEntry) * dir->nspindles);
	memcpy(byvbase, dir->byvbase, sizeof(int) * dir->nspindles);
	memcpy(byseg, dir->byseg, sizeof(SpindleSegRef) * dir->nspindles);
	return copy;
}

/* Does any range of dir overlap the next one in vbase order? */
static bool
directory_overlaps(SpindleDirectory *dir)
{
	int			i;

	for (i = 1; i < dir->nspindles; i++)
	{
		SpindleEntry *prev = &dir->spindles[dir->byvbase[i - 1]];
		SpindleEntry *cur = &dir->spindles[dir->byvbase[i]];

		if (prev->vbase + prev->vcount > cur->vbase)
			return true;
	}
	return false;
}

/* Build the orderings of dir's spindles by range and by relation. */
static void
sort_directory(SpindleDirectory *dir)
{
	int			i;

	for (i = 0; i < dir->nspindles; i++)
	{
		dir->byvbase[i] = i;
		dir->byseg[i].segment = dir->spindles[i].segment;
		dir->byseg[i].index = i;
	}
	qsort_arg(dir->byvbase, dir->nspindles, sizeof(int), cmp_index_vbase,
			  dir->spindles);
	qsort(dir->byseg, dir->nspindles, sizeof(SpindleSegRef), cmp_segref);
}

/*
 * Read a facade's directory from the catalog: every live spindle, or, if
 * tail_only, only the newest ones, from the last row back to the first
 * that is known full (its fill time recorded, or numbered below its
 * table's full mark: slots.c) or dropped.  Spindles fill in order, so every
 * spindle below such a row is full, and an insert never needs them (see
 * place_tuples): a producer's session then reads a few rows instead of the
 * whole directory.  Such a directory is marked partial: lookups by number
 * or TID must use a complete one (spindle_directory_acquire reads one in
 * full when it finds a partial one).  Normally the worker has recorded
 * every fill time but the last; if nobody has, the tail is the whole
 * directory, read backwards.
 */
static SpindleDirectory *
read_directory(Relation facade, SpindleCatalogRels *cr, Snapshot snap,
			   bool tail_only)
{
	SpindleDirectory *dir = new_directory(RelationGetRelid(facade),
										  tail_only ? 8 : 64);
	TupleDesc	td = RelationGetDescr(cr->heap);
	int64		full_below = tail_only ? spindle_slots_full_below(dir->facade) : 0;
	ScanDirection direction = tail_only ? BackwardScanDirection :
		ForwardScanDirection;
	ScanKeyData keys[3];
	SysScanDesc scan;
	HeapTuple	tup;
	int			n = 0;
	int			i;

	scan = spindle_catalog_scan_rows(cr, dir->facade, PG_INT64_MIN,
									 PG_INT64_MAX, snap, keys);
	while ((tup = systable_getnext_ordered(scan, direction)) != NULL)
	{
		SpindleEntry sp;
		bool		dropped;

		spindle_catalog_decode_row(td, tup, &sp, &dropped);
		dir->max_spindle_no = Max(dir->max_spindle_no, sp.spindle_no);
		if (spindle_is_annex(&sp))
		{
			/* kept apart; says nothing of the event spindles around it */
			if (!dropped)
				add_annex(dir, &sp);
			continue;
		}
		dir->event_end = Max(dir->event_end, sp.first_no + sp.vcount);
		if (dropped && tail_only)
			break;
		if (dropped)
			continue;
		reserve_spindles(dir, n + 1);
		dir->spindles[n++] = sp;
		if (tail_only && (sp.filled_at != 0 || sp.spindle_no < full_below))
			break;
	}
	systable_endscan_ordered(scan);

	/* the tail was read newest first: put it in the order of numbers */
	for (i = 0; tail_only && i < n / 2; i++)
	{
		SpindleEntry tmp = dir->spindles[i];

		dir->spindles[i] = dir->spindles[n - 1 - i];
		dir->spindles[n - 1 - i] = tmp;
	}
	/* the tail's annexes too were read newest first */
	for (i = 0; tail_only && i < dir->nannexes / 2; i++)
	{
		SpindleEntry tmp = dir->annexes[i];

		dir->annexes[i] = dir->annexes[dir->nannexes - 1 - i];
		dir->annexes[dir->nannexes - 1 - i] = tmp;
	}
	dir->nspindles = n;
	dir->partial = tail_only && tup != NULL;
	sort_directory(dir);
	seg_owner_add(dir->facade, dir->spindles, n);
	return dir;
}

/*
 * Apply the changes read_changes found: remove the spindles marked in
 * removed[] (may be NULL), append the nadded ones (numbered above all of
 * dir's), and rebuild the orderings.  Returns false if two ranges now
 * overlap; dir is then unusable.
 */
static bool
apply_changes(SpindleDirectory *dir, const bool *removed,
			  const SpindleEntry *added, int nadded)
{
	int			nold = dir->nspindles;
	int		   *newpos = palloc(sizeof(int) * Max(nold, 1));
	int		   *addv = palloc(sizeof(int) * Max(nadded, 1));
	SpindleSegRef *adds = palloc(sizeof(SpindleSegRef) * Max(nadded, 1));
	int		   *byvbase;
	SpindleSegRef *byseg;
	int			nkept = 0;
	int			ntotal;
	int			i,
				j,
				k;

	/* the spindles that stay, in place and in order, then the new ones */
	for (i = 0; i < nold; i++)
	{
		if (removed != NULL && removed[i])
		{
			newpos[i] = -1;
			seg_owner_remove(dir->facade, dir->spindles[i].segment);
			continue;
		}
		newpos[i] = nkept;
		if (nkept != i)
			dir->spindles[nkept] = dir->spindles[i];
		nkept++;
	}
	ntotal = nkept + nadded;
	reserve_spindles(dir, ntotal);
	if (nadded > 0)
		memcpy(&dir->spindles[nkept], added, sizeof(SpindleEntry) * nadded);
	seg_owner_add(dir->facade, added, nadded);
	for (i = 0; i < nadded; i++)
	{
		addv[i] = nkept + i;
		adds[i].segment = added[i].segment;
		adds[i].index = nkept + i;
	}
	qsort_arg(addv, nadded, sizeof(int), cmp_index_vbase, dir->spindles);
	qsort(adds, nadded, sizeof(SpindleSegRef), cmp_segref);

	/* each ordering: the old one without the removed, merged with the new */
	byvbase = MemoryContextAlloc(dir->cxt, sizeof(int) * dir->nalloc);
	for (i = 0, j = 0, k = 0; i < nold || j < nadded;)
	{
		int			old = -1;

		while (i < nold && (old = newpos[dir->byvbase[i]]) < 0)
			i++;
		if (i < nold &&
			(j >= nadded ||
			 dir->spindles[old].vbase <= dir->spindles[addv[j]].vbase))
		{
			byvbase[k++] = old;
			i++;
		}
		else if (j < nadded)
			byvbase[k++] = addv[j++];
	}
	Assert(k == ntotal);

	byseg = MemoryContextAlloc(dir->cxt, sizeof(SpindleSegRef) * dir->nalloc);
	for (i = 0, j = 0, k = 0; i < nold || j < nadded;)
	{
		SpindleSegRef ref = {InvalidOid, -1};

		while (i < nold && newpos[dir->byseg[i].index] < 0)
			i++;
		if (i < nold)
		{
			ref.segment = dir->byseg[i].segment;
			ref.index = newpos[dir->byseg[i].index];
		}
		if (i < nold && (j >= nadded || cmp_segref(&ref, &adds[j]) <= 0))
		{
			byseg[k++] = ref;
			i++;
		}
		else if (j < nadded)
			byseg[k++] = adds[j++];
	}
	Assert(k == ntotal);

	pfree(dir->byvbase);
	pfree(dir->byseg);
	dir->byvbase = byvbase;
	dir->byseg = byseg;
	dir->nspindles = ntotal;
	pfree(newpos);
	pfree(addv);
	pfree(adds);
	return !directory_overlaps(dir);
}

/*
 * Bring dir up to date with what changed since it was read (see "Keeping a
 * directory up to date"): the rows numbered above any it has seen, and the
 * rows of the spindles in recheck[].  Sets *changed if its spindles did.
 * Returns false if the result cannot be trusted: read it in full then
 * (dir is unusable).
 */
static bool
read_changes(SpindleDirectory *dir, SpindleCatalogRels *cr, Snapshot snap,
			 const int64 *recheck, int nrecheck, bool *changed)
{
	TupleDesc	td = RelationGetDescr(cr->heap);
	ScanKeyData keys[3];
	SysScanDesc scan;
	HeapTuple	tup;
	SpindleEntry *added = NULL;
	int			nadded = 0,
				addroom = 0;
	bool	   *removed = NULL;
	int64		maxno = dir->max_spindle_no;
	int64		event_end = dir->event_end;
	int			i;
	bool		ok;

	*changed = false;
	scan = spindle_catalog_scan_rows(cr, dir->facade,
									 dir->max_spindle_no + 1, PG_INT64_MAX,
									 snap, keys);
	while ((tup = systable_getnext_ordered(scan, ForwardScanDirection)) != NULL)
	{
		SpindleEntry sp;
		bool		dropped;

		spindle_catalog_decode_row(td, tup, &sp, &dropped);
		maxno = Max(maxno, sp.spindle_no);
		if (spindle_is_annex(&sp))
		{
			/* numbered above dir's annexes too: appended in order */
			if (!dropped)
			{
				add_annex(dir, &sp);
				*changed = true;
			}
			continue;
		}
		event_end = Max(event_end, sp.first_no + sp.vcount);
		if (dropped)
			continue;
		if (nadded == addroom)
		{
			addroom = Max(8, addroom * 2);
			added = added == NULL ? palloc(sizeof(SpindleEntry) * addroom) :
				repalloc(added, sizeof(SpindleEntry) * addroom);
		}
		added[nadded++] = sp;
	}
	systable_endscan_ordered(scan);

	for (i = 0; i < nrecheck; i++)
	{
		SpindleEntry *sp = spindle_find_spindle(dir, recheck[i]);
		SpindleEntry row;
		bool		dropped = true;
		int			idx;

		if (sp == NULL)
			continue;
		idx = (int) (sp - dir->spindles);
		if (removed != NULL && removed[idx])
			continue;
		scan = spindle_catalog_scan_rows(cr, dir->facade, recheck[i],
										 recheck[i], snap, keys);
		tup = systable_getnext_ordered(scan, ForwardScanDirection);
		if (tup != NULL)
			spindle_catalog_decode_row(td, tup, &row, &dropped);
		systable_endscan_ordered(scan);
		if (dropped)
		{
			if (removed == NULL)
				removed = palloc0(sizeof(bool) * dir->nspindles);
			removed[idx] = true;
			*changed = true;
			continue;
		}
		/* a spindle's relation and range never change while it exists */
		if (row.segment != sp->segment || row.vbase != sp->vbase ||
			row.vcount != sp->vcount || row.first_no != sp->first_no)
			return false;
		sp->capacity = row.capacity;
		sp->filled_at = row.filled_at;
	}
	dir->max_spindle_no = maxno;
	dir->event_end = event_end;
	if (nadded == 0 && removed == NULL)
		return true;			/* (annexes added need no reordering) */
	*changed = true;
	ok = apply_changes(dir, removed, added, nadded);
	if (added != NULL)
		pfree(added);
	if (removed != NULL)
		pfree(removed);
	return ok;
}

/* Where this backend's next insert starts looking (see place_tuples). */
static void
set_open_hint(SpindleDirectory *dir, int64 open_spindle_no)
{
	int			lo = 0,
				hi = dir->nspindles;

	if (open_spindle_no == 0)
		lo = dir->nspindles - 1;	/* no history: start at the newest */
	else
	{
		/*
		 * Spindles before the one this backend last inserted into are full
		 * for good: start the next insert there, not at the oldest spindle.
		 */
		while (lo < hi)
		{
			int			mid = (lo + hi) / 2;

			if (dir->spindles[mid].spindle_no < open_spindle_no)
				lo = mid + 1;
			else
				hi = mid;
		}
	}
	dir->open_hint = Max(Min(lo, dir->nspindles - 1), 0);
	dir->hint_checked = false;
	dir->est_at = 0;
}

/*
 * Free the unpinned stale directories of tables that no longer exist (no
 * invalidation says a table was dropped rather than changed).
 */
static void
sweep_dropped_tables(Oid keep)
{
	static LocalTransactionId swept_in = InvalidLocalTransactionId;
	HASH_SEQ_STATUS status;
	DirCacheEntry *e;
	Oid			gone[16];
	int			ngone = 0;
	int			i;

	/*
	 * Once per transaction is enough, and only if an invalidation came
	 * since the last sweep: a directory becomes stale only by one.
	 */
	if (MyProc->lxid == swept_in ||
		dir_invalidations == dir_swept_invalidations)
		return;
	swept_in = MyProc->lxid;
	dir_swept_invalidations = dir_invalidations;
	hash_seq_init(&status, dir_cache);
	while ((e = hash_seq_search(&status)) != NULL)
	{
		if (ngone < lengthof(gone) && e->facade != keep &&
			(e->current == NULL ||
			 (e->current->stale && e->current->pins == 0)) &&
			!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(e->facade)))
			gone[ngone++] = e->facade;
	}
	for (i = 0; i < ngone; i++)
	{
		e = hash_search(dir_cache, &gone[i], HASH_FIND, NULL);
		if (e == NULL)
			continue;
		if (e->current != NULL)
		{
			seg_owner_forget(e->current);
			free_directory(e->current);
		}
		dlist_delete(&e->lru);
		(void) hash_search(dir_cache, &gone[i], HASH_REMOVE, NULL);
	}
}

/*
 * Keep the cache within DIR_CACHE_MAX entries: drop the least recently
 * acquired ones that the current transaction has not acquired (those
 * alone may be pinned, updating or hold rows of their own).
 */
static void
evict_directories(void)
{
	long		excess = hash_get_num_entries(dir_cache) - DIR_CACHE_MAX;
	dlist_node *cur = dir_lru.head.prev;

	/* from the least recently acquired */
	while (excess > 0 && cur != &dir_lru.head)
	{
		DirCacheEntry *e = dlist_container(DirCacheEntry, lru, cur);

		cur = cur->prev;
		if (e->in_xact)
			continue;
		Assert(e->current == NULL || e->current->pins == 0);
		if (e->current != NULL)
		{
			seg_owner_forget(e->current);
			free_directory(e->current);
		}
		dlist_delete(&e->lru);
		(void) hash_search(dir_cache, &e->facade, HASH_REMOVE, NULL);
		excess--;
	}
}

/*
 * Make e's directory current: update it (or, if pinned, a copy of it)
 * with what changed, or read it in full (see "Keeping a directory up to
 * date").  Returns the new current directory.
 */
static SpindleDirectory *
refresh_directory(Relation facade, DirCacheEntry *e, bool complete)
{
	Oid			relid = RelationGetRelid(facade);
	SpindleCatalogRels cr;
	SpindleDirectory *old;
	SpindleDirectory *dir = NULL;
	TransactionId class_xmin;
	int64		events_per_spindle;
	int64	   *recheck = NULL;
	int			nrecheck = 0;
	uint64		invalidations;
	bool		full;
	bool		changed = true;
	bool		found;
	Snapshot	snap;

	/* checked here, once per relcache version, for every reader and writer */
	spindle_check_layout(facade);
	events_per_spindle = spindle_rel_capacity_option(relid, &found);
	if (!found)
		events_per_spindle = spindle_events_per_spindle;

	/* every lock first, then the invalidations, then the snapshot */
	spindle_catalog_open(&cr);
	AcceptInvalidationMessages();
	class_xmin = facade_class_xmin(relid);
	sweep_dropped_tables(relid);
	invalidations = dir_invalidations;

	old = e->current;
	full = old == NULL || old->needs_full ||
		old->parallel_read || !TransactionIdIsValid(class_xmin) ||
		old->class_xmin != class_xmin ||
		(complete && old->partial) ||
		spindle_created_here(facade) || IsInParallelMode();
	if (old != NULL)
	{
		if (!full && old->nrecheck > 0)
		{
			nrecheck = old->nrecheck;
			recheck = palloc(sizeof(int64) * nrecheck);
			memcpy(recheck, old->recheck, sizeof(int64) * nrecheck);
		}
		/* until this is done, an error leaves it for a full read */
		old->nrecheck = 0;
		old->stale = true;
		old->needs_full = true;
	}

	snap = spindle_catalog_snapshot();
	if (!full)
	{
		dir = old->pins > 0 ? copy_directory(old) : old;
		dir->updating = true;
		if (!read_changes(dir, &cr, snap, recheck, nrecheck, &changed))
		{
			if (dir != old)
				free_directory(dir);
			dir = NULL;
		}
	}
	if (dir == NULL)
	{
		/* what it holds now is read again: forget it first */
		if (old != NULL)
			seg_owner_forget(old);
		/* a producer needs only the newest spindles (read_directory) */
		dir = read_directory(facade, &cr, snap,
							 !complete && !spindle_created_here(facade) &&
							 !IsInParallelMode());
		changed = true;
	}
	UnregisterSnapshot(snap);
	spindle_catalog_close(&cr);
	if (recheck != NULL)
		pfree(recheck);

	/*
	 * The directory was read with the latest snapshot; the catalog snapshot
	 * (syscache and relcache lookups) may be older, taken before a creator
	 * it lists committed and not renewed since, its invalidation not sent
	 * yet, or kept by a REPEATABLE READ transaction: opening that spindle
	 * would find no relation, and its events would be taken for gone.  A
	 * catalog snapshot taken from now on sees every spindle listed.
	 */
	if (!IsInParallelMode())
		InvalidateCatalogSnapshot();

	dir->updating = false;
	/* nothing above should have processed an invalidation; if one did: */
	dir->stale = dir->needs_full = dir_invalidations != invalidations;
	dir->class_xmin = class_xmin;
	dir->has_own = spindle_xact_wrote_catalog() ||
		spindle_xact_created_spindles();
	dir->parallel_read = IsInParallelMode();
	dir->events_per_spindle = events_per_spindle;
	if (changed)
		set_open_hint(dir, e->open_spindle_no);

	if (dir != old)
	{
		MemoryContextSetParent(dir->cxt, TopMemoryContext);
		if (old != NULL)
		{
			if (old->pins > 0)
				bury_directory(old);
			else
				free_directory(old);
		}
		e->current = dir;
	}
	return dir;
}

/*
 * Return the directory of a facade, pinned: the caller must call
 * spindle_directory_release() when done (an error releases it too, at
 * transaction end).
 *
 * It first processes the invalidations that have arrived, so it never
 * returns a directory older than an invalidation sent before the call.
 * Waiting for the next lock acquisition to do that is not enough: a
 * statement of a transaction that already holds its locks (a cached plan
 * opens nothing new) would resolve TIDs with a directory that still holds
 * spindles dropped since, whose ranges may have been given to new
 * spindles; an index fetch would then report a new event's entry dead and
 * the index would kill it.  A drop's invalidations are sent before its
 * locks are released, so before cleanup can forget the range and before
 * anyone can give it again; when nothing has arrived this costs one
 * unlocked test.
 */
static SpindleDirectory *
acquire_directory(Relation facade, bool complete)
{
	DirCacheEntry *e;
	bool		found;
	Oid			relid = RelationGetRelid(facade);
	SpindleDirectory *dir;

	spindle_check_preloaded();
	AcceptInvalidationMessages();
	e = hash_search(dir_cache, &relid, HASH_ENTER, &found);
	if (!found)
	{
		e->current = NULL;
		e->open_spindle_no = 0;
		e->in_xact = false;
		dlist_push_head(&dir_lru, &e->lru);
	}
	else if (dlist_head_node(&dir_lru) != &e->lru)
		dlist_move_head(&dir_lru, &e->lru);
	if (!e->in_xact)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		dir_xact_facades = lappend_oid(dir_xact_facades, relid);
		MemoryContextSwitchTo(old);
		e->in_xact = true;
	}
	if (!found && hash_get_num_entries(dir_cache) > DIR_CACHE_MAX)
		evict_directories();
	dir = e->current;
	if (dir == NULL || dir->stale || (complete && dir->partial) ||
		(dir->parallel_read && !IsInParallelMode()))
		dir = refresh_directory(facade, e, complete);
	dir->pins++;
	return dir;
}

/* The complete directory of a facade, pinned (see acquire_directory). */
SpindleDirectory *
spindle_directory_acquire(Relation facade)
{
	return acquire_directory(facade, true);
}

/*
 * The same for an insert, which needs only the newest spindles: the
 * directory returned may be partial (see read_directory), holding the
 * spindles from one that is known full, or the first, to the newest.
 */
SpindleDirectory *
spindle_directory_acquire_tail(Relation facade)
{
	return acquire_directory(facade, false);
}

/*
 * The same, knowing every committed spindle numbered up to spindle_no: for
 * a caller that holds the number of a spindle someone else has seen (a
 * queue position another consumer claimed or leased, a msg_id given to
 * ack).  A spindle the directory does not list is gone if a higher number
 * was read (creation is serialised, so spindles commit in the order of
 * their numbers); a higher one may have committed since the directory was
 * read with its invalidation not arrived yet (it is sent after the commit
 * shows in snapshots), so then the catalog is read again for what changed.
 */
SpindleDirectory *
spindle_directory_acquire_upto(Relation facade, int64 spindle_no)
{
	SpindleDirectory *dir = acquire_directory(facade, true);

	if (spindle_no <= dir->max_spindle_no)
		return dir;
	spindle_directory_release(dir);
	spindle_directory_forget(RelationGetRelid(facade));
	return acquire_directory(facade, true);
}

/*
 * The same, knowing every committed spindle whose events are numbered below
 * event_no + 1: for a caller holding an event number (a queue's msg_id)
 * that someone else was given.  Event numbers increase with spindle
 * numbers, so a spindle holding event_no that the directory does not list
 * is gone if a higher event number was read.
 */
SpindleDirectory *
spindle_directory_acquire_upto_event(Relation facade, int64 event_no)
{
	SpindleDirectory *dir = acquire_directory(facade, true);

	if (event_no < dir->event_end)
		return dir;
	spindle_directory_release(dir);
	spindle_directory_forget(RelationGetRelid(facade));
	return acquire_directory(facade, true);
}

/*
 * The same, knowing every spindle whose creation committed before the call:
 * for a reader whose snapshot (or whose decision that something is gone)
 * must cover every committed spindle.  A creator shows in snapshots before
 * it sends its invalidation, and cleanup may forget its pending range in
 * between, so neither the cached directory nor the pending ranges say
 * whether a spindle committed meanwhile; the slot map's next spindle number
 * does: it was taken before the creation committed.  Numbers taken by
 * creations that are running or rolled back cost a read of what changed
 * (one index probe) until the next creation commits.
 */
SpindleDirectory *
spindle_directory_acquire_current(Relation facade)
{
	/* every spindle committed by now has a number below the next one */
	return spindle_directory_acquire_upto(facade,
										  spindle_peek_spindle_no(facade) - 1);
}

/*
 * Have the next acquire of a facade's directory read the catalog for what
 * changed, when an invalidation may not have arrived yet (see
 * spindle_resolve_tid): it finds every spindle committed by then.
 */
void
spindle_directory_forget(Oid facade)
{
	DirCacheEntry *e = hash_search(dir_cache, &facade, HASH_FIND, NULL);

	if (e != NULL && e->current != NULL)
		e->current->stale = true;
}

/* Remember the spindle this backend inserted into last (see above). */
void
spindle_directory_note_open(SpindleDirectory *dir, int64 spindle_no)
{
	DirCacheEntry *e = hash_search(dir_cache, &dir->facade, HASH_FIND, NULL);

	if (e != NULL)
		e->open_spindle_no = spindle_no;
}

/* Unpin a directory; free it if it was stale and this was its last pin. */
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

/*
 * The event spindle or annex with this number, or NULL: where a copy that
 * a relocation entry names lies.
 */
SpindleEntry *
spindle_find_copy(SpindleDirectory *dir, int64 spindle_no)
{
	SpindleEntry *sp = spindle_find_spindle(dir, spindle_no);

	for (int j = 0; sp == NULL && j < dir->nannexes; j++)
		if (dir->annexes[j].spindle_no == spindle_no)
			sp = &dir->annexes[j];
	return sp;
}

/* The event spindle (never an annex) with this number, or NULL. */
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

/*
 * The spindle whose event numbers include event_no, or NULL.  Numbers grow
 * with spindle numbers, so the directory is ordered by them too.
 */
SpindleEntry *
spindle_find_by_event(SpindleDirectory *dir, int64 event_no)
{
	int			lo = 0,
				hi = dir->nspindles - 1;

	while (lo <= hi)
	{
		int			mid = (lo + hi) / 2;
		SpindleEntry *sp = &dir->spindles[mid];

		if (event_no < sp->first_no)
			hi = mid - 1;
		else if (event_no >= sp->first_no + spindle_effective_capacity(sp))
			lo = mid + 1;
		else
			return sp;
	}
	return NULL;
}

/*
 * The first spindle whose events are numbered at or after event_no (the
 * one holding it, or the next), as an index into dir->spindles, or
 * dir->nspindles if none.
 */
int
spindle_find_from_event(SpindleDirectory *dir, int64 event_no)
{
	int			lo = 0,
				hi = dir->nspindles;

	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;
		SpindleEntry *sp = &dir->spindles[mid];

		if (sp->first_no + spindle_effective_capacity(sp) <= event_no)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * The spindle or annex whose range of virtual slots holds vslot, or NULL
 * (readers' lookup: TIDs of annex copies resolve like any other).
 */
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
	/* else maybe an annex's: they are few */
	for (lo = 0; lo < dir->nannexes; lo++)
	{
		SpindleEntry *sp = &dir->annexes[lo];

		if (vslot >= sp->vbase && vslot < sp->vbase + sp->vcount)
			return sp;
	}
	return NULL;
}

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
