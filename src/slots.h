/*-------------------------------------------------------------------------
 *
 * slots.h
 *	  Shared-memory slot counters of spindles (slots.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_SLOTS_H
#define SPINDLE_SLOTS_H

#include "directory.h"

extern int	spindle_max_spindles;
extern void spindle_slots_shmem_request(void);
extern void spindle_slots_shmem_startup(void);
extern int	spindle_slots_take(Relation facade, SpindleDirectory *dir, int i,
							   int nwanted, int64 *first);
extern int64 spindle_slots_used(Relation facade, Relation segrel,
								SpindleEntry *sp, bool *is_full,
								TimestampTz *filled_at, Relation next_segrel);
extern void spindle_slots_placed(SpindleEntry *sp);
extern void spindle_slots_recorded(const SpindleEntry *sp);
extern bool spindle_slots_reserved(Relation segrel);
extern bool spindle_slots_full(Relation facade, SpindleDirectory *dir, int i,
							   TimestampTz *filled_at);
extern bool spindle_slots_inflight(Oid segment, int64 spindle_no);
extern bool spindle_slots_peek(Oid segment, int64 spindle_no, int64 *used);
extern int64 spindle_slots_full_below(Oid facade);
extern void spindle_slots_forget(Oid segment);
extern bool spindle_slots_view(Oid facade, const SpindleEntry *sp, int64 *used,
							   bool *is_full, TimestampTz *filled_at);
extern int64 spindle_slots_count_disk(Relation facade, Relation seg,
									  const SpindleEntry *sp,
									  Relation next_segrel, bool *is_full);
extern void spindle_slots_forget_database(Oid dboid);

#endif							/* SPINDLE_SLOTS_H */
