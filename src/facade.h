/*-------------------------------------------------------------------------
 *
 * facade.h
 *	  The "spindle" table access method (facade_am.c, facade_scan.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_FACADE_H
#define SPINDLE_FACADE_H

#include "access/tableam.h"
#include "directory.h"

extern const TableAmRoutine *spindle_facade_routine(void);
extern const TableAmRoutine *spindle_heap_methods(void);
extern void spindle_scan_routines(TableAmRoutine *r);
extern void spindle_slot_set_identity(TupleTableSlot *slot, Relation facade,
									  ItemPointer vtid);
typedef enum TidResolution
{
	TID_IN_SPINDLE,				/* found: *sp and *ptid are set */
	TID_DEAD,					/* chunk unmapped: nothing can be there */
	TID_UNKNOWN					/* a spindle this backend cannot see */
} TidResolution;

extern TidResolution spindle_resolve_tid(Relation facade, ItemPointer vtid,
										 SpindleEntry *sp, ItemPointer ptid);
extern TidResolution spindle_resolve_vslot(Relation facade,
										   SpindleDirectory *dir, int64 vslot,
										   SpindleEntry **sp, ItemPointer ptid);
extern void spindle_tuple_vtid(SpindleEntry *sp, HeapTuple tuple,
							   ItemPointer vtid);
extern Relation spindle_open_segment(Relation facade, SpindleEntry *sp,
									 LOCKMODE lockmode);
extern IndexFetchTableData *spindle_fetch_begin(Relation rel);
extern void spindle_fetch_end(IndexFetchTableData *scan);
extern bool spindle_fetch_event(Relation rel, IndexFetchTableData *scan,
								ItemPointer tid, Snapshot snapshot,
								TupleTableSlot *slot, bool *call_again,
								bool *all_dead);

#endif							/* SPINDLE_FACADE_H */
