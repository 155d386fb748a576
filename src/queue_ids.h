/*-------------------------------------------------------------------------
 *
 * queue_ids.h
 *	  A queue event's msg_id is its position: (spindle_no << 26) | k, k its
 *	  slot in its spindle (2^26 > 38 141 952, the largest spindle).  Ids of
 *	  one table therefore increase in the order slots are handed out, and
 *	  resolve to their event without an index (queue.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_QUEUE_IDS_H
#define SPINDLE_QUEUE_IDS_H

#define SPINDLE_MSGID_SHIFT 26
#define SPINDLE_MSGID_KMASK ((INT64CONST(1) << SPINDLE_MSGID_SHIFT) - 1)

static inline int64
spindle_msgid_make(int64 spindle_no, int64 k)
{
	return (spindle_no << SPINDLE_MSGID_SHIFT) | k;
}

static inline int64
spindle_msgid_spindle(int64 msg_id)
{
	return msg_id >> SPINDLE_MSGID_SHIFT;
}

static inline int64
spindle_msgid_k(int64 msg_id)
{
	return msg_id & SPINDLE_MSGID_KMASK;
}

#endif							/* SPINDLE_QUEUE_IDS_H */
