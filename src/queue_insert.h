/*-------------------------------------------------------------------------
 *
 * queue_insert.h
 *	  Direct placement of enqueued events, without the executor
 *	  (queue_insert.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_QUEUE_INSERT_H
#define SPINDLE_QUEUE_INSERT_H

#include "queue_catalog.h"

extern bool spindle_queue_insert_direct(const SpindleQueue *q,
										Datum *payloads, int n, Datum delay,
										int64 **ids, bool *gone);

#endif							/* SPINDLE_QUEUE_INSERT_H */
