/*-------------------------------------------------------------------------
 *
 * kept_ids.c
 *	  Inserts that keep the event numbers they supply: the queue layer's
 *	  spindle.keep_msg_ids, so that a restore keeps every event's msg_id.
 *
 * place_tuples (facade_am.c) asks the layers above, through the kept_no
 * hook, for the number each inserted row supplies, and hands runs of
 * consecutive numbers here.  A number past every number the table handed
 * out is kept:
 *   - in the spindle whose range holds it, at k = number - first_no, if
 *     that spindle is the open one or after it and its slot counter has not
 *     passed k (spindle_slots_take_at skips the slots between); the
 *     spindles from the open one to it are filled first (fill_before), as
 *     spindles fill in order;
 *   - below ready spindles that were never given an event and were
 *     numbered past a jump (the worker made them from the queue name's
 *     floor, which a restore loads before the events): those are moved
 *     down to number from it (spindle_catalog_renumber_tail), then as
 *     above;
 *   - past every spindle and the table's counter: in a new spindle
 *     numbered from it (obtain_spindle_at), then as above.
 * Anything else (at or below a number handed out, in a full spindle, in a
 * gap below spindles that have events) is numbered as usual by the caller.
 *
 * Locks: those of an insert (RowExclusiveLock on the facade and on each
 * spindle written or filled); moving spindles down takes
 * ShareRowExclusiveLock on the facade, so that no insert is under way,
 * and a spindle made in this transaction (where a producer would make
 * it so) the creation lock, both to the end of the transaction; giving a
 * spindle its first page takes its relation extension lock.
 *
 * Invariants kept: spindles still fill in order, and first_no still grows
 * with spindle_no (the directory's binary search); no slot that a
 * consumer may have passed as gone is handed out again, after a restart
 * too: each spindle after the first one filled has a page before any is
 * filled (a rebuilt counter finds a spindle full when the next has
 * pages), and a new spindle is committed by a helper; numbers kept are
 * refused to anyone but the table's owner (42501) and must lie a capacity
 * below INT64_MAX (22003).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/relation.h"
#include "access/tableam.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/inval.h"
#include "utils/rel.h"

#include "table/spindle_table.h"


/*
 * Make sure a spindle numbered from first_no exists, for an insert that
 * keeps that number (spindle_place_kept), as obtain_spindles does: by a helper
 * process in its own committed transaction where it can (see
 * spindle_request_spindle_at for why that matters here), else in ours.
 */
static void
obtain_spindle_at(Relation facade, int64 first_no, BulkInsertState bistate)
{
	/* never wait for anything while pinning a spindle page (VACUUM waits) */
	if (bistate != NULL)
		ReleaseBulkInsertStatePin(bistate);
	if (!spindle_created_here(facade) &&
		!CheckRelationLockedByMe(facade, AccessExclusiveLock, false) &&
		!spindle_creation_locked_by_me(RelationGetRelid(facade)) &&
		spindle_request_spindle_at(facade, first_no))
	{
		SpindleDirectory *dir;
		bool		made;

		AcceptInvalidationMessages();
		dir = spindle_directory_acquire_tail(facade);
		made = spindle_find_by_event(dir, first_no) != NULL;
		spindle_directory_release(dir);
		if (made)
			return;
	}
	spindle_create_spindle_at(facade, first_no);
	AcceptInvalidationMessages();
}

/* Only the table's owner or a superuser may keep numbers (see header). */
static void
check_keep_allowed(Relation facade)
{
	if (!pg_class_ownercheck(RelationGetRelid(facade), GetUserId()))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to keep the supplied msg_ids of table \"%s\"",
						RelationGetRelationName(facade)),
				 errdetail("Only the table's owner or a superuser may keep them."),
				 errhint("Reset spindle.keep_msg_ids to have new msg_ids given.")));
}

/*
 * An insert keeping a number in spindle j of dir (seg, locked) fills the
 * spindles from the open one to j - 1 first: spindles fill in order.  In
 * memory that is their slot counters (spindle_slots_fill); on disk, after
 * a restart, a spindle is full when the one after it has pages.  So each
 * spindle after the first one filled, j included, first gets a page if it
 * has none (spindle_segment_ensure_page, WAL-logged): before any consumer
 * can pass the skipped slots and commit, the disk says what the counters
 * say.
 */
static void
fill_before(Relation facade, SpindleDirectory *dir, int j, Relation seg)
{
	int			i;

	for (i = dir->open_hint + 1; i < j; i++)
	{
		Relation	s = spindle_open_segment(facade, &dir->spindles[i],
											 RowExclusiveLock);

		if (s == NULL)
			continue;
		spindle_segment_ensure_page(s);
		relation_close(s, RowExclusiveLock);
	}
	spindle_segment_ensure_page(seg);
	for (i = dir->open_hint; i < j; i++)
	{
		Relation	s = spindle_open_segment(facade, &dir->spindles[i],
											 RowExclusiveLock);

		if (s == NULL)
			continue;
		(void) spindle_slots_fill(facade, dir, i, s);
		relation_close(s, RowExclusiveLock);
	}
}

/*
 * Could the spindles of dir numbered above event_no be moved down to
 * number from it (spindle_catalog_renumber_tail)?  Only if none was given
 * an event yet, and event_no lies past the range of the spindle before
 * them.  A look without locks: the callee looks again under its lock.
 */
static bool
tail_renumberable(SpindleDirectory *dir, int64 event_no)
{
	int			t = dir->nspindles;
	int			i;

	while (t > 0 && dir->spindles[t - 1].first_no > event_no)
		t--;
	if (t == 0 || t == dir->nspindles ||
		dir->spindles[t - 1].first_no + dir->spindles[t - 1].vcount > event_no)
		return false;
	for (i = t; i < dir->nspindles; i++)
		if (spindle_segment_is_empty(dir->spindles[i].segment) != 1)
			return false;
	return true;
}

/*
 * Place the n events of slots[], supplied with the numbers event_no ..
 * event_no + n - 1, at those numbers (see above).  Returns how many it
 * placed from slots[0] (fewer than n where a spindle ends), or 0 when
 * slots[0]'s number cannot be kept: at or below a number handed out, or
 * in no spindle's range and below the table's next number (then the
 * caller numbers it as usual).  A number below ready spindles numbered
 * past a jump (the worker made them from the queue name's floor, which a
 * restore loads before the events) moves them down to it first.  *dirp
 * is the pinned tail directory, which this may replace.  Locks as
 * place_tuples; moving spindles takes ShareRowExclusiveLock on the table,
 * creating one its creation lock (if not by the helper), both to the end
 * of the transaction.
 */
int
spindle_place_kept(Relation facade, SpindleDirectory **dirp,
				   TupleTableSlot **slots, int n, int64 event_no,
				   CommandId cid, int options, BulkInsertState bistate,
				   bool speculative, uint32 specToken)
{
	bool		created = false;	/* spindles made or moved for it */
	bool		refreshed = false;	/* directory read again */

	for (;;)
	{
		SpindleDirectory *dir = *dirp;
		SpindleEntry *target;
		SpindleNumbers next;
		int64		capacity = dir->events_per_spindle > 0 ?
			Min(dir->events_per_spindle, SPINDLE_VSLOTS) : SPINDLE_VSLOTS;

		if (event_no >= PG_INT64_MAX - capacity)
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("msg_id %lld is out of range for table \"%s\"",
							(long long) event_no,
							RelationGetRelationName(facade)),
					 errdetail("A kept msg_id must lie below %lld.",
							   (long long) (PG_INT64_MAX - capacity))));
		spindle_check_open_hint(facade, dir);
		target = spindle_find_by_event(dir, event_no);
		if (target != NULL)
		{
			int			j = (int) (target - dir->spindles);
			int			got;
			int64		k0;
			Relation	seg;

			if (j < dir->open_hint)
				return 0;		/* in a full spindle */
			check_keep_allowed(facade);
			seg = spindle_open_segment(facade, target, RowExclusiveLock);
			if (seg == NULL)
				return 0;
			if (j > dir->open_hint)
				fill_before(facade, dir, j, seg);
			got = spindle_slots_take_at(facade, dir, j,
										event_no - target->first_no, n, &k0);
			if (got == 0)
			{
				relation_close(seg, RowExclusiveLock);
				return 0;		/* its counter passed the number */
			}
			spindle_place_in(facade, dir, j, seg, slots, got, k0, cid,
							 options, bistate, speculative, specToken);
			return got;
		}

		if (created)
			return 0;
		if (dir->nspindles > 0 &&
			event_no < dir->spindles[dir->nspindles - 1].first_no)
		{
			/* below ready spindles numbered past a jump? */
			if (!tail_renumberable(dir, event_no))
				return 0;
			check_keep_allowed(facade);
			spindle_directory_release(dir);
			if (bistate != NULL)
				ReleaseBulkInsertStatePin(bistate);
			/* no insert under way: they stay empty (see the callee) */
			LockRelationOid(RelationGetRelid(facade), ShareRowExclusiveLock);
			(void) spindle_catalog_renumber_tail(facade, event_no);
			created = true;		/* one change of the spindles per call */
			AcceptInvalidationMessages();
			*dirp = spindle_directory_acquire_tail(facade);
			continue;
		}

		/* past every spindle: past the table's counter too? */
		spindle_peek_numbers(facade, &next);
		if (event_no < next.event_no && !refreshed)
		{
			/* spindles made since the directory was read: read it again */
			spindle_directory_release(dir);
			AcceptInvalidationMessages();
			*dirp = spindle_directory_acquire_tail(facade);
			refreshed = true;
			continue;
		}
		if (event_no < next.event_no)
			return 0;
		check_keep_allowed(facade);
		spindle_directory_release(dir);
		obtain_spindle_at(facade, event_no, bistate);
		created = true;
		*dirp = spindle_directory_acquire_tail(facade);
	}
}
