/*-------------------------------------------------------------------------
 *
 * layout.h
 *	  The hidden columns of spindle tables (layout.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_LAYOUT_H
#define SPINDLE_LAYOUT_H

#include "access/htup.h"
#include "datatype/timestamp.h"
#include "executor/tuptable.h"
#include "utils/rel.h"

/* Number of hidden columns at the end of every spindle table. */
#define SPINDLE_HIDDEN_COLUMNS 2

extern void spindle_add_hidden_columns(Oid relid);
extern void spindle_check_layout(Relation facade);
extern void spindle_check_spindles_match(Oid relid);
extern HeapTuple spindle_form_event(Relation facade, TupleTableSlot *slot,
									int32 k, uint32 appended);
extern uint32 spindle_time_now(void);
extern uint32 spindle_time_floor(TimestampTz ts);

/*
 * The hidden columns are the last two attributes, int4 each and never
 * null, so they are the last 8 bytes of the tuple's data: k (the event's
 * number within its spindle) then its append time (seconds since the
 * PostgreSQL epoch, rounded up).
 */
static inline int32
spindle_event_k(HeapTupleHeader tup, uint32 len)
{
	int32		k;

	memcpy(&k, (char *) tup + len - 2 * sizeof(int32), sizeof(int32));
	return k;
}

static inline uint32
spindle_event_time(HeapTupleHeader tup, uint32 len)
{
	uint32		t;

	memcpy(&t, (char *) tup + len - sizeof(uint32), sizeof(uint32));
	return t;
}

#endif							/* SPINDLE_LAYOUT_H */
