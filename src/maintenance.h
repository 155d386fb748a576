/*-------------------------------------------------------------------------
 *
 * maintenance.h
 *	  Dropping spindles, cleanup of their TIDs, the spindle creator (maintenance.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_MAINTENANCE_H
#define SPINDLE_MAINTENANCE_H

#include "storage/buf.h"
#include "utils/rel.h"

struct VacuumParams;

/* What spindle_count_segment() finds in a spindle. */
typedef struct SpindleCounts
{
	int64		events;			/* line pointers ever used */
	int64		purged;			/* deleted (committed) or aborted inserts */
	int64		dead;			/* purged and seen by no snapshot */
	int64		live;			/* committed and not deleted */
	int64		busy;			/* inserter or deleter still running */
	int64		inserting;		/* of busy: inserter still running */
	TransactionId latest_removed;	/* standby conflict horizon of dead */
} SpindleCounts;

extern int	spindle_drops_per_transaction(void);
extern int	spindle_drop_droppable(Relation facade, int max_drops);
extern bool spindle_drop_held_back;
extern int	spindle_drop_droppable_stats(Relation facade, int64 *bytes_freed,
										 bool use_cache, int max_drops);
extern void spindle_ensure_ready(Relation facade);
extern void spindle_cleanup_dropped(Relation facade, bool force);
extern void spindle_vacuum_spindles(Relation facade, struct VacuumParams *params,
									BufferAccessStrategy bstrategy);
extern bool spindle_request_spindles(Relation facade, int count);
extern void spindle_count_segment(Relation segrel, SpindleCounts *counts);

#endif							/* SPINDLE_MAINTENANCE_H */
