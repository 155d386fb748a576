/*-------------------------------------------------------------------------
 *
 * touched.c
 *	  Which full spindles can have become droppable: a shared ring of the
 *	  spindles that deletes touched, and each backend's set of "settled"
 *	  spindles, so that dropping need not look at every full spindle.
 *
 * A full spindle receives no more events, so whether it is droppable
 * changes only through its tuples' transactions: a delete (DELETE, UPDATE,
 * a TTL purge), the end of a transaction that inserted or deleted in it,
 * or the removal horizon passing its deleters.  When maintenance counts a
 * full spindle (maintenance.c) and finds a tuple that is live -- inserted
 * by a committed transaction and not deleted, or deleted only by a
 * transaction that aborted -- and no tuple whose inserter or deleter is
 * still running, only a later delete can make the spindle droppable.  The
 * backend then records the spindle as *settled* and stops looking at it.
 *
 * Every delete of an event records its table and spindle number in a
 * shared ring (after the tuple is changed, so a count that began before
 * the note was read sees the delete), once per spindle and subtransaction
 * in a row.  Before each
 * maintenance pass a backend reads the notes written since its last pass
 * and unsettles the spindles they name.  A spindle noted once by a
 * subtransaction stays unsettled while that subtransaction's delete is in
 * progress, so its later deletes in the same spindle need no note of their
 * own; a new subtransaction notes again.
 *
 * When a backend cannot be sure it read every note (it fell more than the
 * ring's size behind, or met a note still being written twice in a row),
 * it forgets all its settled spindles, and its next pass looks at every
 * full spindle again, as it does the first time.  Settled state is only
 * ever an optimisation: forgetting it costs time, never a wrong drop (a
 * drop always recounts under AccessExclusiveLock).
 *
 * A backend keeps, per table, its settled spindles as runs of spindle
 * numbers (first..last: every spindle so numbered that still exists is
 * settled), so a maintenance pass over a table whose full spindles are all
 * settled costs one binary search of the directory per run, not a look at
 * each spindle; a delete splits the run it falls in.  New spindles never
 * fall in a run (spindle numbers only increase), and the runs are kept
 * with the xmin of the table's pg_class row, so that a table given new
 * storage (TRUNCATE) or a new table with the same OID starts with none.
 * A spindle whose fill time no slot counter knew stays without one in the
 * directory once settled (only the fill times maintenance learns are
 * recorded).
 *
 * Locks: none.  Notes are written with an atomic fetch-and-add of the
 * ring position; each note carries its position, written last, so a reader
 * can tell a complete note from one being written or overwritten.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "storage/spindle_storage.h"

/* notes kept; a reader further behind than this starts over */
#define TOUCHED_RING_SIZE 8192

typedef struct TouchedNote
{
	pg_atomic_uint64 pos;		/* ring position + 1 once complete, else 0 */
	Oid			dbid;
	Oid			facade;
	int64		spindle_no;
} TouchedNote;

typedef struct TouchedShared
{
	pg_atomic_uint64 next;		/* position of the next note */
	TouchedNote notes[TOUCHED_RING_SIZE];
} TouchedShared;

static TouchedShared *touched = NULL;

/* the last note this backend wrote */
static LocalTransactionId noted_lxid = InvalidLocalTransactionId;
static SubTransactionId noted_subid = InvalidSubTransactionId;
static Oid	noted_facade = InvalidOid;
static int64 noted_spindle_no = 0;

/* reader state of this backend */
static uint64 read_pos = 0;
static bool read_started = false;
static uint64 stalled_at = PG_UINT64_MAX;

/* The settled spindles of one table: runs in spindle_no order. */
typedef struct SettledTable
{
	Oid			facade;			/* hash key */
	TransactionId version;		/* of the table's pg_class row */
	int			n;
	SettledRun *runs;			/* in TopMemoryContext, or NULL */
} SettledTable;

static HTAB *settled_tables = NULL;
static uint64 settled_generation = 0;	/* bumped by forget_settled() */

Size
spindle_touched_shmem_size(void)
{
	return sizeof(TouchedShared);
}

/* Called from the shmem_startup_hook, with AddinShmemInitLock held. */
void
spindle_touched_shmem_startup(void)
{
	bool		found;

	touched = ShmemInitStruct("spindle touched spindles",
							  sizeof(TouchedShared), &found);
	if (!found)
	{
		int			i;

		pg_atomic_init_u64(&touched->next, 0);
		for (i = 0; i < TOUCHED_RING_SIZE; i++)
		{
			pg_atomic_init_u64(&touched->notes[i].pos, 0);
			touched->notes[i].dbid = InvalidOid;
			touched->notes[i].facade = InvalidOid;
			touched->notes[i].spindle_no = 0;
		}
	}
}

/*
 * Record that the current (sub)transaction deleted an event of spindle
 * spindle_no of the facade.  Call it after the tuple was changed.
 */
void
spindle_note_touched(Oid facade, int64 spindle_no)
{
	LocalTransactionId lxid = MyProc->lxid;
	SubTransactionId subid = GetCurrentSubTransactionId();
	uint64		pos;
	TouchedNote *note;

	if (touched == NULL)
		return;
	if (lxid == noted_lxid && subid == noted_subid &&
		facade == noted_facade && spindle_no == noted_spindle_no)
		return;

	pos = pg_atomic_fetch_add_u64(&touched->next, 1);
	note = &touched->notes[pos % TOUCHED_RING_SIZE];
	pg_atomic_write_u64(&note->pos, 0);
	pg_write_barrier();
	note->dbid = MyDatabaseId;
	note->facade = facade;
	note->spindle_no = spindle_no;
	pg_write_barrier();
	pg_atomic_write_u64(&note->pos, pos + 1);

	noted_lxid = lxid;
	noted_subid = subid;
	noted_facade = facade;
	noted_spindle_no = spindle_no;
}

/* Forget every settled spindle of every table. */
static void
forget_settled(void)
{
	HASH_SEQ_STATUS status;
	SettledTable *t;

	settled_generation++;
	if (settled_tables == NULL)
		return;
	hash_seq_init(&status, settled_tables);
	while ((t = hash_seq_search(&status)) != NULL)
	{
		if (t->runs)
			pfree(t->runs);
		t->runs = NULL;
		t->n = 0;
	}
}

static SettledTable *
settled_table(Oid facade, bool create)
{
	SettledTable *t;
	bool		found;

	if (settled_tables == NULL)
	{
		HASHCTL		ctl;

		if (!create)
			return NULL;
		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(SettledTable);
		ctl.hcxt = TopMemoryContext;
		settled_tables = hash_create("spindle settled spindles", 16, &ctl,
									 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	t = hash_search(settled_tables, &facade, create ? HASH_ENTER : HASH_FIND,
					&found);
	if (create && !found)
	{
		t->n = 0;
		t->runs = NULL;
		t->version = InvalidTransactionId;
	}
	return t;
}

/* A delete was noted in spindle_no of facade: it is no longer settled. */
static void
unsettle(Oid facade, int64 spindle_no)
{
	SettledTable *t = settled_table(facade, false);
	SettledRun *r;
	int			lo = 0,
				hi;

	if (t == NULL)
		return;
	hi = t->n - 1;
	while (lo <= hi)
	{
		int			mid = lo + (hi - lo) / 2;

		if (t->runs[mid].last < spindle_no)
			lo = mid + 1;
		else if (t->runs[mid].first > spindle_no)
			hi = mid - 1;
		else
		{
			lo = mid;
			break;
		}
	}
	if (lo >= t->n || t->runs[lo].first > spindle_no ||
		t->runs[lo].last < spindle_no)
		return;
	r = &t->runs[lo];
	if (r->first == r->last)
	{
		memmove(r, r + 1, sizeof(SettledRun) * (t->n - lo - 1));
		t->n--;
	}
	else if (r->first == spindle_no)
		r->first++;
	else if (r->last == spindle_no)
		r->last--;
	else
	{
		/* split it in two around spindle_no */
		t->runs = repalloc(t->runs, sizeof(SettledRun) * (t->n + 1));
		r = &t->runs[lo];
		memmove(r + 1, r, sizeof(SettledRun) * (t->n - lo));
		t->n++;
		r[0].last = spindle_no - 1;
		r[1].first = spindle_no + 1;
	}
}

/*
 * Read the notes written since this backend's last call and unsettle the
 * spindles they name.  Called before a maintenance pass.
 */
void
spindle_touched_sync(void)
{
	uint64		next;

	if (touched == NULL)
	{
		forget_settled();
		return;
	}
	next = pg_atomic_read_u64(&touched->next);
	if (!read_started || next - read_pos > TOUCHED_RING_SIZE)
	{
		/* first pass, or notes were lost: every spindle is unsettled */
		forget_settled();
		read_pos = next;
		read_started = true;
		stalled_at = PG_UINT64_MAX;
		return;
	}
	while (read_pos < next)
	{
		TouchedNote *note = &touched->notes[read_pos % TOUCHED_RING_SIZE];
		uint64		before = pg_atomic_read_u64(&note->pos);
		Oid			dbid;
		Oid			facade;
		int64		spindle_no;

		pg_read_barrier();
		dbid = note->dbid;
		facade = note->facade;
		spindle_no = note->spindle_no;
		pg_read_barrier();
		if (before == read_pos + 1 &&
			pg_atomic_read_u64(&note->pos) == read_pos + 1)
		{
			if (dbid == MyDatabaseId)
				unsettle(facade, spindle_no);
			read_pos++;
			continue;
		}
		if (before < read_pos + 1 && stalled_at != read_pos)
		{
			/* still being written: read it next time */
			stalled_at = read_pos;
			return;
		}
		/* overwritten, or stuck since the last call: start over */
		forget_settled();
		read_pos = next;
		stalled_at = PG_UINT64_MAX;
		return;
	}
	stalled_at = PG_UINT64_MAX;
}

/*
 * A maintenance pass over the spindles of one table, in spindle_no order:
 * spindle_settled_run() says how many spindles from a directory index on
 * were settled (and records them as settled after this pass: a whole run
 * costs one binary search), spindle_settled_add() records one the caller
 * found settled, and spindle_settled_end() keeps the result.  The runs are
 * built in the caller's memory context, so an error during the pass leaves
 * the old ones.  table_version is the xmin of the table's pg_class row: a
 * table that got new storage, or another table with the same OID, starts
 * with nothing settled.
 */
void
spindle_settled_begin(SettledPass *pass, Oid facade,
					  TransactionId table_version)
{
	SettledTable *t = settled_table(facade, true);

	if (t->version != table_version)
	{
		if (t->runs)
			pfree(t->runs);
		t->runs = NULL;
		t->n = 0;
		t->version = table_version;
	}
	pass->facade = facade;
	pass->generation = settled_generation;
	pass->old = t->runs;
	pass->nold = t->n;
	pass->pos = 0;
	pass->last_no = -1;
	pass->max = t->n + 16;
	pass->runs = palloc(sizeof(SettledRun) * pass->max);
	pass->nnew = 0;
	pass->last_index = -2;
}

/* Record dir's spindles i..j (consecutive in the directory) as settled. */
static void
add_settled(SettledPass *pass, const SpindleDirectory *dir, int i, int j)
{
	if (pass->nnew > 0 && pass->last_index == i - 1)
		pass->runs[pass->nnew - 1].last = dir->spindles[j].spindle_no;
	else
	{
		if (pass->nnew == pass->max)
		{
			pass->max *= 2;
			pass->runs = repalloc(pass->runs, sizeof(SettledRun) * pass->max);
		}
		pass->runs[pass->nnew].first = dir->spindles[i].spindle_no;
		pass->runs[pass->nnew].last = dir->spindles[j].spindle_no;
		pass->nnew++;
	}
	pass->last_index = j;
	pass->last_no = dir->spindles[j].spindle_no;
}

/*
 * How many spindles of dir, from index i on, were settled before the pass:
 * those the old run holding dir->spindles[i] covers.  They are recorded as
 * settled again.  0 if dir->spindles[i] is not settled.
 */
int
spindle_settled_run(SettledPass *pass, const SpindleDirectory *dir, int i)
{
	int64		no = dir->spindles[i].spindle_no;
	int64		last;
	int			lo,
				hi;

	pass->last_no = no;
	while (pass->pos < pass->nold && pass->old[pass->pos].last < no)
		pass->pos++;
	if (pass->pos >= pass->nold || pass->old[pass->pos].first > no)
		return 0;
	/* the last spindle of the directory the run covers */
	last = pass->old[pass->pos].last;
	lo = i;
	hi = dir->nspindles - 1;
	while (lo < hi)
	{
		int			mid = lo + (hi - lo + 1) / 2;

		if (dir->spindles[mid].spindle_no <= last)
			lo = mid;
		else
			hi = mid - 1;
	}
	add_settled(pass, dir, i, lo);
	return lo - i + 1;
}

void
spindle_settled_add(SettledPass *pass, const SpindleDirectory *dir, int i)
{
	Assert(pass->last_no <= dir->spindles[i].spindle_no);
	add_settled(pass, dir, i, i);
}

void
spindle_settled_end(SettledPass *pass)
{
	SettledTable *t = settled_table(pass->facade, true);
	SettledRun *runs;
	int			n = pass->nnew;
	int			i;

	if (pass->generation != settled_generation)
	{
		/* notes were lost meanwhile: what this pass found may be stale */
		pfree(pass->runs);
		pass->runs = NULL;
		return;
	}
	Assert(t->runs == pass->old);
	runs = MemoryContextAlloc(TopMemoryContext,
							  sizeof(SettledRun) * (pass->nnew + pass->nold - pass->pos + 1));
	memcpy(runs, pass->runs, sizeof(SettledRun) * pass->nnew);
	/* spindles after the last one the pass looked at keep their state */
	for (i = pass->pos; i < pass->nold; i++)
	{
		if (pass->old[i].last <= pass->last_no)
			continue;
		runs[n].first = Max(pass->old[i].first, pass->last_no + 1);
		runs[n].last = pass->old[i].last;
		n++;
	}
	if (pass->old != NULL)
		pfree(pass->old);
	t->runs = runs;
	t->n = n;
	pfree(pass->runs);
	pass->runs = NULL;
}
