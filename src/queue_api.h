/*-------------------------------------------------------------------------
 *
 * queue_api.h
 *	  The producer and administrator functions of queues (queue_api.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_QUEUE_API_H
#define SPINDLE_QUEUE_API_H

extern void spindle_queue_api_init(void);

#endif							/* SPINDLE_QUEUE_API_H */
