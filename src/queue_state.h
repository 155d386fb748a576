/*-------------------------------------------------------------------------
 *
 * queue_state.h
 *	  Shared-memory state of queues: head, claims, leases and the other
 *	  events consumers must come back to (queue_state.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_QUEUE_STATE_H
#define SPINDLE_QUEUE_STATE_H

#include "datatype/timestamp.h"
#include "lib/ilist.h"
#include "storage/condition_variable.h"
#include "storage/lwlock.h"
#include "utils/rel.h"

/*
 * What an item says of the events [start, end) of one spindle, all behind
 * the head.  Any item may be turned into QITEM_RETURNED at any time: its
 * events are then examined again on disk, which is always correct.
 */
typedef enum QueueItemKind
{
	QITEM_FREE = 0,
	QITEM_CLAIM,				/* purged by a running (sub)transaction */
	QITEM_RETURNED,				/* to be examined again: deliverable first */
	QITEM_PENDING,				/* an insert, delete or lock by xid runs */
	QITEM_DELAYED,				/* not deliverable before due */
	QITEM_LEASED				/* read: hidden until due */
} QueueItemKind;

typedef struct QueueItem
{
	dlist_node	node;			/* in its queue's list, or the free list */
	int32		index;			/* in the pool */
	uint32		generation;		/* bumped at each reuse */
	uint8		kind;
	int64		start;			/* msg_ids [start, end) */
	int64		end;
	TransactionId xid;			/* CLAIM: the claimer; PENDING: awaited */
	int			owner;			/* CLAIM: pgprocno of the claimer ... */
	LocalTransactionId owner_lxid;	/* ... and its transaction */
	bool		mixed;			/* CLAIM: holds events it did not purge */
	uint8		restore_kind;	/* CLAIM by ack: what it was, for an abort */
	TimestampTz due;			/* DELAYED, LEASED */
	int32		read_count;		/* reads so far of these events */
} QueueItem;

typedef struct QueueState
{
	Oid			dbid;			/* both invalid: slot free */
	Oid			relid;
	int			slot;			/* index of this state and of its lock */
	bool		valid;			/* head found (else rebuilt from disk) */
	int64		head;			/* first msg_id never examined */
	int			nitems;
	int			nleases;
	dlist_head	items;
	ConditionVariable cv;		/* enqueues and returned events wake it */
	pg_atomic_uint64 enqueued;
	pg_atomic_uint64 dequeued;
	/* for spindle.queues (views.c) */
	pg_atomic_uint64 dead_lettered;	/* events moved to the dead-letter queue */
	pg_atomic_uint32 waiting;	/* consumers sleeping on cv */
} QueueState;

extern int	spindle_max_queues;
extern int	spindle_max_leases;

extern Size spindle_queue_shmem_size(void);
extern void spindle_queue_shmem_request(void);
extern void spindle_queue_shmem_startup(void);

extern QueueState *spindle_queue_state(Oid relid, bool create);
extern QueueState *spindle_queue_state_at(int slot);
extern LWLock *spindle_queue_lock(QueueState *qs);
extern void spindle_queue_state_reset(Oid relid);
extern void spindle_queue_forget_database(Oid dbid);

extern QueueItem *spindle_qitem_alloc(QueueState *qs, QueueItemKind kind,
									  int64 start, int64 end);
extern bool spindle_qitem_lease_room(void);
extern void spindle_qitem_free(QueueState *qs, QueueItem *item);
extern QueueItem *spindle_qitem_at(int index);
extern int	spindle_qitems_free_count(void);

#endif							/* SPINDLE_QUEUE_STATE_H */
