/*-------------------------------------------------------------------------
 *
 * queue.h
 *	  Consuming queues: dequeue, read, ack, set_visibility, wait (queue.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_QUEUE_H
#define SPINDLE_QUEUE_H

#include "utils/rel.h"

extern void spindle_queue_note_insert(Relation rel);

#endif							/* SPINDLE_QUEUE_H */
