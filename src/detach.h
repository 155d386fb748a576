/*-------------------------------------------------------------------------
 *
 * detach.h
 *	  DROP TABLE, TRUNCATE and other DROPs of spindle tables with more
 *	  spindles than one transaction may drop: detached spindles, dropped
 *	  by maintenance after the commit (detach.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_DETACH_H
#define SPINDLE_DETACH_H

#include "nodes/nodes.h"
#include "nodes/pg_list.h"

extern bool spindle_drops_fit(int nspindles);
extern void spindle_detach_segments(Oid facade, List *segments);
extern List *spindle_prepare_drop(Node *parsetree);
extern void spindle_check_dropped(List *facades);
extern int	spindle_drop_detached(int max_drops, bool wait, int64 *bytes_freed);
extern void spindle_worker_drop_detached(int64 *dropped, int64 *freed);

#endif							/* SPINDLE_DETACH_H */
