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
 *     spindles from the open one to it get a page first (pages_before)
 *     and are marked full once the kept slot is taken (fill_before), as
 *     spindles fill in order;
 *   - below ready spindles that were never given an event and were
 *     numbered past a jump (the worker made them from the queue name's
 *     floor, which a restore loads before the events): those are moved
 *     down to number from it (spindle_catalog_renumber_tail), and every
 *     head of the table's consumers that may have passed it goes back to
 *     it (the numbers_lowered hook), then as above;
 *   - past every spindle and the table's counter: in a new spindle
 *     numbered from it (obtain_spindle_at), then as above.
 * Anything else (at or below a number handed out, in a full spindle, in a
 * gap below spindles that have events) is numbered as usual by the caller.
 *
 * Locks: those of an insert (RowExclusiveLock on the facade and on each
 * spindle written or filled).  Every case but a number in the open
 * spindle first takes ShareRowExclusiveLock on the facade to the end of
 * the transaction (serialise): no producer, consumer or creation of a
 * spindle by the worker is under way or starts, so that the directory
 * and the counter agree (a creator takes its numbers before its spindle
 * is in the directory), no producer sent on to a new spindle takes the
 * kept slot first, the spindles moved down stay empty, and no consumer
 * moves a head past them from the directory of before the move.  Two
 * sessions keeping numbers in one table at once can deadlock upgrading
 * to it (one fails, 40P01): a restore loads each table in one session.
 * A spindle made in this transaction (where a producer would make it so)
 * takes the creation lock to the end of the transaction; giving a
 * spindle its first page takes its relation extension lock.  A number
 * in the open spindle takes no lock more: a producer beside it goes on
 * (and could, in a narrow window, pass it first: then it is numbered as
 * usual).
 *
 * Invariants kept: spindles still fill in order, and first_no still grows
 * with spindle_no (the directory's binary search); no slot that a
 * consumer may have passed as gone is handed out again, after a restart
 * too: each spindle after the first one filled has a page before any is
 * filled (a rebuilt counter finds a spindle full when the next has
 * pages), and a new spindle is committed by a helper; no number is kept
 * below a head a consumer state passed (heads are lowered with the move,
 * under the lock above); numbers kept are refused to anyone but the
 * table's owner or a superuser, in a session of one (42501), and must
 * leave two spindles' worth of numbers below INT64_MAX / 2 (22003), for
 * ordinary inserts and a TRUNCATE.
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
 * The bound below which kept numbers (and the spindles they make) must
 * end, for spindles of capacity: a spindle's worth of numbers must remain
 * after them for ordinary inserts (spindle_take_event_nos) and a TRUNCATE
 * (which numbers its new storage SPINDLE_EVENT_NOS_RESERVED past the
 * table's counter, and refuses counters past half the range).
 */
static int64
kept_limit(int64 capacity)
{
	return PG_INT64_MAX / 2 - 2 * capacity;
}

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

/*
 * Only the table's owner or a superuser may keep numbers (see header):
 * both the current user and the session user must be (or be members of)
 * one.  The session user too: a SECURITY DEFINER function of the owner,
 * called by someone else with spindle.keep_msg_ids on, must not keep the
 * numbers its caller supplies (the GUC is the caller's to set).
 */
static bool
keep_allowed(Relation facade)
{
	Oid			relid = RelationGetRelid(facade);

	return pg_class_ownercheck(relid, GetUserId()) &&
		pg_class_ownercheck(relid, GetSessionUserId());
}

static void
check_keep_allowed(Relation facade)
{
	if (!keep_allowed(facade))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to keep the supplied msg_ids of table \"%s\"",
						RelationGetRelationName(facade)),
				 errdetail("Only the table's owner or a superuser may keep them, in a session of the owner or of a superuser."),
				 errhint("Reset spindle.keep_msg_ids to have new msg_ids given.")));
}

/*
 * An insert keeping a number in spindle j of dir (seg, locked) fills the
 * spindles from the open one to j - 1: spindles fill in order.  In memory
 * that is their slot counters (fill_before); on disk, after a restart, a
 * spindle is full when the one after it has pages.  So first each
 * spindle after the open one, j included, gets a page if it has none
 * (spindle_segment_ensure_page, WAL-logged; this function): before any
 * consumer can pass the skipped slots and commit, the disk says what the
 * counters will say.
 */
static void
pages_before(Relation facade, SpindleDirectory *dir, int j, Relation seg)
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
}

/*
 * Then, once the kept slots of spindle j are taken (so that no producer,
 * sent on to j by the spindles filled here, takes them first), mark the
 * spindles from the open one to j - 1 full.
 */
static void
fill_before(Relation facade, SpindleDirectory *dir, int j)
{
	int			i;

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
 * them (with none left, dropped, what it gave is not known).  A first
 * look: the callee looks again.
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
 * Keep every other writer of the facade's spindles out until the end of
 * the transaction: ShareRowExclusiveLock on the facade, which producers
 * (RowExclusiveLock), consumers (likewise) and the worker making ready
 * spindles (ShareUpdateExclusiveLock, taken conditionally) conflict with;
 * waiting for it waits for those under way, a creation by the worker
 * included.  Returns true if it had to take the lock: *dirp is read
 * again then (after the invalidations of whatever committed meanwhile).
 * Only for those who may keep numbers: anyone else decides unserialised,
 * and is refused (42501) or numbered as usual.
 */
static bool
serialise(Relation facade, SpindleDirectory **dirp, BulkInsertState bistate)
{
	/* not for those refused (no lock for them to hold, see the header) */
	if (CheckRelationLockedByMe(facade, ShareRowExclusiveLock, true) ||
		!keep_allowed(facade))
		return false;
	spindle_directory_release(*dirp);
	/* never wait for a lock while pinning a spindle page (VACUUM waits) */
	if (bistate != NULL)
		ReleaseBulkInsertStatePin(bistate);
	LockRelationOid(RelationGetRelid(facade), ShareRowExclusiveLock);
	AcceptInvalidationMessages();
	*dirp = spindle_directory_acquire_tail(facade);
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
 * place_tuples; except for a number in the open spindle, it first takes
 * ShareRowExclusiveLock on the table to the end of the transaction
 * (serialise, only for those who may keep numbers), so that no producer
 * takes the slot before it and no spindle is made or given an event
 * meanwhile; creating a spindle in this transaction (if not by the
 * helper) takes the creation lock.
 */
int
spindle_place_kept(Relation facade, SpindleDirectory **dirp,
				   TupleTableSlot **slots, int n, int64 event_no,
				   CommandId cid, int options, BulkInsertState bistate,
				   bool speculative, uint32 specToken)
{
	int			changes = 0;	/* spindles made or moved for it */
	bool		moved;

	for (;;)
	{
		SpindleDirectory *dir = *dirp;
		SpindleEntry *target;
		SpindleNumbers next;
		int64		capacity = dir->events_per_spindle > 0 ?
			Min(dir->events_per_spindle, SPINDLE_VSLOTS) : SPINDLE_VSLOTS;
		int64		limit = kept_limit(capacity);

		if (event_no > limit - n)
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("msg_id %lld is out of range for table \"%s\"",
							(long long) (event_no + n - 1),
							RelationGetRelationName(facade)),
					 errdetail("A kept msg_id must lie below %lld, so that ordinary inserts and TRUNCATE still find numbers after it.",
							   (long long) limit)));
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
			if (j > dir->open_hint && serialise(facade, dirp, bistate))
				continue;
			seg = spindle_open_segment(facade, target, RowExclusiveLock);
			if (seg == NULL)
				return 0;
			if (j > dir->open_hint)
				pages_before(facade, dir, j, seg);
			got = spindle_slots_take_at(facade, dir, j,
										event_no - target->first_no, n, &k0);
			if (got == 0)
			{
				relation_close(seg, RowExclusiveLock);
				return 0;		/* its counter passed the number */
			}
			if (j > dir->open_hint)
				fill_before(facade, dir, j);
			spindle_place_in(facade, dir, j, seg, slots, got, k0, cid,
							 options, bistate, speculative, specToken);
			return got;
		}

		if (changes > 2)
			return 0;			/* cannot happen while serialised */
		if (dir->nspindles > 0 &&
			event_no < dir->spindles[dir->nspindles - 1].first_no)
		{
			/*
			 * below ready spindles numbered past a jump?  Asked with no
			 * insert, creation or consumer under way: they stay empty
			 * (see the callee), and no consumer moves a head past them
			 * from the directory of before the move
			 */
			if (serialise(facade, dirp, bistate))
				continue;
			if (!tail_renumberable(dir, event_no))
				return 0;
			check_keep_allowed(facade);
			spindle_directory_release(dir);
			moved = spindle_catalog_renumber_tail(facade, event_no);
			if (moved && spindle_table_hooks.numbers_lowered)
				spindle_table_hooks.numbers_lowered(facade, event_no);
			AcceptInvalidationMessages();
			*dirp = spindle_directory_acquire_tail(facade);
			if (!moved)
				return 0;		/* no longer movable */
			changes++;
			continue;
		}

		/*
		 * past every spindle: past the table's counter too?  Asked with no
		 * creation under way, whose number would be taken (the counter)
		 * before its spindle is in the directory
		 */
		if (serialise(facade, dirp, bistate))
			continue;
		spindle_peek_numbers(facade, &next);
		if (event_no < next.event_no)
			return 0;
		check_keep_allowed(facade);
		spindle_directory_release(dir);
		obtain_spindle_at(facade, event_no, bistate);
		changes++;
		*dirp = spindle_directory_acquire_tail(facade);
	}
}
