/*-------------------------------------------------------------------------
 *
 * queue_ids.h
 *	  msg_id of a queue event: its position, encoded in a bigint.
 *
 * msg_id = (spindle_no << 26) | k, where k is the event's slot number in
 * its spindle (0-based; the hidden "k" column, layout.c).  2^26 =
 * 67 108 864 is more than the largest spindle (SPINDLE_VSLOTS, 38 141 952
 * events), so k always fits, and spindle_no keeps 37 bits.  A msg_id thus
 * resolves in O(1): spindle_no -> directory entry (spindle_find_spindle)
 * -> vslot = vbase + k -> slot map -> physical TID.  Ids increase for a
 * single producer (spindle numbers increase per table, k within a spindle);
 * concurrent producers get ids in the order they reserve slots.
 *
 * The access method writes it into column 1 of every event of a queue
 * table as the event is stored (store_events in facade_am.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_QUEUE_IDS_H
#define SPINDLE_QUEUE_IDS_H

#define SPINDLE_MSGID_K_BITS	26
#define SPINDLE_MSGID_K_MASK	((((int64) 1) << SPINDLE_MSGID_K_BITS) - 1)

/* The msg_id of event k of spindle spindle_no. */
static inline int64
spindle_msgid_make(int64 spindle_no, int64 k)
{
	return (int64) (((uint64) spindle_no << SPINDLE_MSGID_K_BITS) |
					((uint64) k & SPINDLE_MSGID_K_MASK));
}

/* The spindle number a msg_id names. */
static inline int64
spindle_msgid_spindle(int64 msg_id)
{
	return (int64) ((uint64) msg_id >> SPINDLE_MSGID_K_BITS);
}

/* The slot number within its spindle a msg_id names. */
static inline int64
spindle_msgid_k(int64 msg_id)
{
	return msg_id & SPINDLE_MSGID_K_MASK;
}

#endif							/* SPINDLE_QUEUE_IDS_H */
