/*-------------------------------------------------------------------------
 *
 * segment_am.c
 *	  The "spindle_segment" table access method: storage of one spindle.
 *
 * A spindle is a heap relation in every respect but one: no VACUUM may
 * ever reclaim one of its slots.  Heap VACUUM on a relation without
 * indexes turns dead line pointers into unused ones in a single pass, and
 * the next insert reuses them, so an index entry of the facade could come
 * to mean another event.  Giving spindles an access method of their own
 * makes every VACUUM of them -- manual, autovacuum, anti-wraparound --
 * come here instead of to heap_vacuum_rel.  All else is heapam's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/tableam.h"
#include "catalog/pg_am_d.h"
#include "commands/vacuum.h"
#include "fmgr.h"

#include "spindle.h"

static TableAmRoutine segment_methods;
static bool segment_methods_ready = false;

/*
 * VACUUM of one spindle.  It must never prune line pointers to unused nor
 * truncate pages; dead events go away only with the whole spindle.
 */
void
spindle_segment_vacuum(Relation seg, struct VacuumParams *params,
					   BufferAccessStrategy bstrategy)
{
	/* nothing to reclaim: slots are freed only by dropping the spindle */
}

/*
 * Index builds: heapam's build scan is what we want for each spindle, but
 * it reads with heap_getnext(), which refuses any relation whose routine
 * is not heapam's own.  For the duration of that one call the spindle's
 * relcache entry carries heapam's routine; the callbacks are the same
 * functions either way, except VACUUM, which a build never calls.
 */
double
spindle_segment_index_build(Relation seg, Relation index_rel,
							struct IndexInfo *index_info, bool anyvisible,
							BlockNumber start_blockno, BlockNumber numblocks,
							IndexBuildCallback callback, void *callback_state)
{
	const TableAmRoutine *own = seg->rd_tableam;
	double		result = 0;

	seg->rd_tableam = GetHeapamTableAmRoutine();
	PG_TRY();
	{
		result = seg->rd_tableam->index_build_range_scan(seg, index_rel,
														 index_info, false,
														 anyvisible, false,
														 start_blockno,
														 numblocks,
														 callback,
														 callback_state,
														 NULL);
	}
	PG_FINALLY();
	{
		seg->rd_tableam = own;
	}
	PG_END_TRY();
	return result;
}

/* A spindle's TOAST table is plain heap. */
static Oid
segment_relation_toast_am(Relation rel)
{
	return HEAP_TABLE_AM_OID;
}

static void
segment_relation_vacuum(Relation rel, struct VacuumParams *params,
						BufferAccessStrategy bstrategy)
{
	spindle_segment_vacuum(rel, params, bstrategy);
}

const TableAmRoutine *
spindle_segment_routine(void)
{
	if (!segment_methods_ready)
	{
		segment_methods = *GetHeapamTableAmRoutine();
		segment_methods.relation_vacuum = segment_relation_vacuum;
		segment_methods.relation_toast_am = segment_relation_toast_am;
		segment_methods_ready = true;
	}
	return &segment_methods;
}
