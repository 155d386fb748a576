/*-------------------------------------------------------------------------
 *
 * segment.h
 *	  The "spindle_segment" table access method (segment_am.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_SEGMENT_H
#define SPINDLE_SEGMENT_H

#include "access/tableam.h"

extern const TableAmRoutine *spindle_segment_routine(void);
extern double spindle_segment_index_build(Relation seg, Relation index_rel,
										  struct IndexInfo *index_info,
										  bool anyvisible,
										  BlockNumber start_blockno,
										  BlockNumber numblocks,
										  IndexBuildCallback callback,
										  void *callback_state);
extern void spindle_segment_vacuum(Relation seg, struct VacuumParams *params,
								   BufferAccessStrategy bstrategy);

#endif							/* SPINDLE_SEGMENT_H */
