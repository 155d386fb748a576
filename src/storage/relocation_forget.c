/*-------------------------------------------------------------------------
 *
 * relocation_forget.c
 *	  Forgetting the relocation entries of dropped copies (compaction,
 *	  docs/design.md "Compaction of sparse spindles", section 6,
 *	  "Removal" and "Space of the trees"): once the spindle or annex
 *	  holding a moved-away copy is dropped, nothing reads that copy again,
 *	  so its entry in tree 3 goes; tree 4, which names each moved event's
 *	  oldest copy, then names the oldest copy still there, or loses the
 *	  event if its last copy went with a drop (it was consumed); an entry
 *	  whose target was dropped after being moved on is made to name where
 *	  the event went.  Trees 3 and 4 delete no page alone, so when they
 *	  hold more than twice the pages their entries need they are rebuilt
 *	  beside themselves and swapped in (consumer_tree.c); when nothing is
 *	  left they are freed.  Called by maintenance when it retires dropped
 *	  spindles (table/maintenance.c, spindle_cleanup_dropped), which knows
 *	  what is still there.
 *
 * Locks.  The caller holds the consumer relation RowExclusiveLock (and
 * the queue table's maintenance lock).  The trees' writer locks (those
 * of the relocator, relocation.c) are taken without waiting and let go
 * at the end: while they are held no move is in progress, so every
 * entry's mover has committed or aborted.  Readers take no lock: they
 * may meet the trees between two of the changes made here, which are
 * ordered so that a reader never loses an event: tree 4 is made to name
 * the later copy before the entries leading there from a dropped copy
 * go, and an entry is shortened before the entry it skips goes; a reader
 * that reaches a dropped copy looks at tree 4 again (queue.c, resolve).
 *
 * Invariants kept: every event that is not consumed and whose oldest copy
 * was dropped has a tree 4 entry naming a copy that is still there, from
 * which the committed entries lead to its current copy; an entry is kept
 * while the copy it hides is there.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "storage/lmgr.h"
#include "utils/rel.h"

#include "storage/spindle_storage.h"

/* A chain of moves longer than this is corrupt (relocation.c's bound). */
#define FORGET_MAX_LINKS	1024

/* Every run of tree sub of crel, in key order (*n of them). */
static SpindleRun *
read_runs(Relation crel, uint32 sub, int *n)
{
	SpindleTree t;

	spindle_tree_init(&t, crel, sub, false);
	return spindle_tree_read_all(&t, n);
}

/* The entry of e[0..n) (in key order) hiding copy (no, k), or NULL. */
static const SpindleRelocation *
entry_of(const SpindleRelocation *e, int n, int64 no, int64 k)
{
	int			lo = 0;
	int			hi = n;

	while (lo < hi)
	{
		int			mid = lo + (hi - lo) / 2;

		if (e[mid].source_no < no ||
			(e[mid].source_no == no && e[mid].source_k < k))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && e[lo].source_no == no && e[lo].source_k == k ?
		&e[lo] : NULL;
}

/* Did e's mover commit (or was it frozen)?  No mover is running here. */
static bool
moved_for_good(const SpindleRelocation *e)
{
	return e->xid == FrozenTransactionId ||
		(TransactionIdIsNormal(e->xid) && TransactionIdDidCommit(e->xid));
}

/*
 * From copy (*no, *k), follow the committed entries of e while the copy's
 * spindle or annex is gone: true with the first copy that is still
 * there, false if the chain ends at a copy that went with a drop (a
 * container drops only when every copy in it is dead to everyone, so
 * that event is consumed).
 */
static bool
follow_gone(const SpindleRelocation *e, int n, SpindleCopyExists exists,
			void *arg, int64 *no, int64 *k)
{
	for (int links = 0; links <= FORGET_MAX_LINKS; links++)
	{
		const SpindleRelocation *x;

		if (exists(*no, arg))
			return true;
		x = entry_of(e, n, *no, *k);
		if (x == NULL || !moved_for_good(x))
			return false;
		*no = x->target_no;
		*k = x->target_k;
	}
	ereport(ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("relocation entries from copy (%lld, %lld) form a cycle",
					(long long) *no, (long long) *k)));
	return false;				/* keep the compiler quiet */
}

/* What the pass decided, before anything is written. */
typedef struct ForgetPlan
{
	SpindleRelocation *e;		/* tree 3, in key order */
	int			ne;
	bool	   *e_gone;			/* per entry: remove it */
	bool	   *e_short;		/* per entry: its target was changed */
	SpindleRun *o;				/* tree 4, in msg_id order */
	int			no;
	bool	   *o_gone;			/* per run: remove it */
	bool	   *o_moved;		/* per run: its copy was changed */
} ForgetPlan;

/* Decide what goes and what changes (reads only). */
static void
plan_forget(ForgetPlan *p, SpindleCopyExists exists, void *arg,
			SpindleForgetStats *st)
{
	p->e_gone = palloc0(sizeof(bool) * Max(p->ne, 1));
	p->e_short = palloc0(sizeof(bool) * Max(p->ne, 1));
	p->o_gone = palloc0(sizeof(bool) * Max(p->no, 1));
	p->o_moved = palloc0(sizeof(bool) * Max(p->no, 1));
	for (int i = 0; i < p->no; i++)
	{
		int64		cno,
					ck;

		spindle_reloc_key_split((int64) p->o[i].due, &cno, &ck);
		if (exists(cno, arg))
			continue;
		if (follow_gone(p->e, p->ne, exists, arg, &cno, &ck))
		{
			p->o[i].due = (TimestampTz) spindle_reloc_key(cno, ck);
			p->o_moved[i] = true;
			st->heads_moved++;
		}
		else
		{
			p->o_gone[i] = true;
			st->heads_gone++;
		}
	}
	for (int j = 0; j < p->ne; j++)
	{
		SpindleRelocation *x = &p->e[j];
		int64		cno = x->target_no,
					ck = x->target_k;

		if (spindle_reloc_aborted(x) || !exists(x->source_no, arg))
		{
			p->e_gone[j] = true;
			st->entries_gone++;
		}
		else if (!exists(cno, arg) &&
				 follow_gone(p->e, p->ne, exists, arg, &cno, &ck))
		{
			p->e_short[j] = true;
			st->entries_shortened++;
		}
	}
	/* the targets last: follow_gone above reads the entries unchanged */
	for (int j = 0; j < p->ne; j++)
		if (p->e_short[j])
		{
			int64		cno = p->e[j].target_no,
						ck = p->e[j].target_k;

			(void) follow_gone(p->e, p->ne, exists, arg, &cno, &ck);
			p->e[j].target_no = cno;
			p->e[j].target_k = ck;
		}
	st->entries_kept = p->ne - st->entries_gone;
	st->heads_kept = p->no - st->heads_gone;
}

/* Remove the one run keyed key from tree t (writer). */
static void
cut_one(SpindleTree *t, int64 key)
{
	int32		rc;

	(void) spindle_tree_cut(t, key, key + 1, &rc);
}

/*
 * Rewrite run r of tree t where it is, in one record: a reader finds the
 * old run or the new one, never neither (an upsert may cut the run and
 * insert it again in two).  The writer lock held since the trees were
 * read keeps the run there.
 */
static void
replace_run(SpindleTree *t, const SpindleRun *r)
{
	if (!spindle_tree_replace_exact(t, r))
		elog(ERROR, "spindle: run " INT64_FORMAT " of consumer tree %u changed under its writer",
			 r->first, t->sub);
}

/*
 * Apply the plan in place, in the order readers need: tree 4's new
 * copies, the shortened entries, then what goes.  Each change is one
 * record that a reader sees whole.
 */
static void
apply_in_place(Relation crel, ForgetPlan *p)
{
	SpindleTree t3,
				t4;

	spindle_tree_init(&t3, crel, SPINDLE_TREE_RELOC, true);
	spindle_tree_init(&t4, crel, SPINDLE_TREE_RELOC_IDS, true);
	for (int i = 0; i < p->no; i++)
		if (p->o_moved[i])
			replace_run(&t4, &p->o[i]);
	for (int j = 0; j < p->ne; j++)
		if (p->e_short[j])
		{
			SpindleRun	r;

			spindle_reloc_to_run(&p->e[j], &r);
			replace_run(&t3, &r);
		}
	for (int j = 0; j < p->ne; j++)
		if (p->e_gone[j])
			cut_one(&t3, spindle_reloc_key(p->e[j].source_no,
										   p->e[j].source_k));
	for (int i = 0; i < p->no; i++)
		if (p->o_gone[i])
			cut_one(&t4, p->o[i].first);
}

/*
 * Build trees 3 and 4 afresh from what the plan keeps, beside the ones in
 * use, and swap them in: tree 4 first (a reader between the two swaps
 * finds the new copies through the old tree 3, which still holds every
 * entry it needs).
 */
static void
rebuild(Relation crel, ForgetPlan *p)
{
	SpindleTree old;
	SpindleRun *keep = palloc(sizeof(SpindleRun) * (Max(p->no, p->ne) + 1));
	int			n = 0;

	spindle_tree_init(&old, crel, SPINDLE_TREE_RELOC_IDS, true);
	if (spindle_tree_npages(&old) > 0)	/* also reads its tag */
	{
		for (int i = 0; i < p->no; i++)
			if (!p->o_gone[i])
				keep[n++] = p->o[i];
		spindle_tree_rebuild(&old, keep, n);
	}
	spindle_tree_init(&old, crel, SPINDLE_TREE_RELOC, true);
	if (spindle_tree_npages(&old) > 0)
	{
		n = 0;
		for (int j = 0; j < p->ne; j++)
			if (!p->e_gone[j])
				spindle_reloc_to_run(&p->e[j], &keep[n++]);
		spindle_tree_rebuild(&old, keep, n);
	}
	pfree(keep);
}

/* Free both trees (nothing is left in them): tree 4 first. */
static void
drop_both(Relation crel)
{
	SpindleTree t;

	spindle_tree_init(&t, crel, SPINDLE_TREE_RELOC_IDS, true);
	(void) spindle_tree_drop(&t);
	spindle_tree_init(&t, crel, SPINDLE_TREE_RELOC, true);
	(void) spindle_tree_drop(&t);
}

/*
 * Do trees 3 and 4 hold more than twice the pages their entries need, and
 * has their file system room for new ones?  (Without room, the pages a
 * bulk load allocated before it failed would be lost: review rv10, F3.)
 */
static bool
worth_rebuilding(Relation crel, const SpindleForgetStats *st)
{
	SpindleTree t;
	int			pages;
	int64		kept = st->entries_kept + st->heads_kept;

	spindle_tree_init(&t, crel, SPINDLE_TREE_RELOC, true);
	pages = spindle_tree_npages(&t);
	spindle_tree_init(&t, crel, SPINDLE_TREE_RELOC_IDS, true);
	pages += spindle_tree_npages(&t);
	return spindle_tree_is_sparse(pages, kept) &&
		spindle_crel_room_for(crel, (int) (2 * spindle_tree_pages_needed(kept)));
}

/*
 * Forget what the drops made useless (see the header).  Returns false,
 * changing nothing, if a relocator (or VACUUM's freeze) holds the trees'
 * writer locks: the next pass does it.  *stats says what was done.  Reads
 * both trees whole; writes one small record per change, or, when the
 * trees are mostly empty pages, rebuilds them (their entries once each).
 */
bool
spindle_reloc_forget(Relation crel, SpindleCopyExists exists, void *arg,
					 SpindleForgetStats *stats)
{
	ForgetPlan	p;

	memset(stats, 0, sizeof(*stats));
	if (!spindle_reloc_exists(crel))
		return true;
	if (!spindle_reloc_lock_conditional(crel))
		return false;
	memset(&p, 0, sizeof(p));
	p.e = spindle_reloc_read_all(crel, &p.ne);
	p.o = read_runs(crel, SPINDLE_TREE_RELOC_IDS, &p.no);
	plan_forget(&p, exists, arg, stats);
	if (stats->entries_kept == 0 && stats->heads_kept == 0)
	{
		drop_both(crel);
		stats->dropped = true;
	}
	else if (stats->heads_moved + stats->heads_gone +
			 stats->entries_gone + stats->entries_shortened > 0)
	{
		if (worth_rebuilding(crel, stats))
		{
			rebuild(crel, &p);
			stats->rebuilt = true;
		}
		else
			apply_in_place(crel, &p);
	}
	UnlockPage(crel, SPINDLE_TREE_RELOC_IDS, ExclusiveLock);
	UnlockPage(crel, SPINDLE_TREE_RELOC, ExclusiveLock);
	return true;
}
