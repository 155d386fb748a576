/*-------------------------------------------------------------------------
 *
 * spindle_queue.h
 *	  The queue layer's interface: the registry of queues, msg_ids,
 *	  producers, the consumer state and the event cache.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_QUEUE_LAYER_H
#define SPINDLE_QUEUE_LAYER_H

#include "fmgr.h"
#include "access/htup.h"
#include "datatype/timestamp.h"
#include "executor/tuptable.h"
#include "lib/ilist.h"
#include "storage/condition_variable.h"
#include "storage/itemptr.h"
#include "storage/lwlock.h"
#include "utils/acl.h"
#include "utils/rel.h"

#include "table/spindle_table.h"

/* ---- queue_catalog.c: the queue registry ---- */

/* Schema of the queue tables: queue "orders" is table spindle_q.orders. */
#define SPINDLE_QUEUE_SCHEMA "spindle_q"

/* Longest queue name (^[a-z_][a-z0-9_]{0,47}$). */
#define SPINDLE_QUEUE_NAME_MAX 48

/* Columns of a queue table, in this order (attribute numbers). */
#define SPINDLE_QUEUE_ATT_MSG_ID		1
#define SPINDLE_QUEUE_ATT_ENQUEUED_AT	2
#define SPINDLE_QUEUE_ATT_VISIBLE_AT	3
#define SPINDLE_QUEUE_ATT_PAYLOAD		4

/* What an enqueue does at a queue's max_depth (queue_limits.c). */
typedef enum SpindleOverflow
{
	SPINDLE_OVERFLOW_REJECT = 0,	/* fail with 54000 */
	SPINDLE_OVERFLOW_DROP_OLDEST,	/* purge the oldest deliverable events */
	SPINDLE_OVERFLOW_DEAD_LETTER	/* move them to the dead-letter queue */
} SpindleOverflow;

/* One queue as its registry row says (spindle.queue_catalog). */
typedef struct SpindleQueue
{
	char		name[NAMEDATALEN];
	Oid			relid;			/* spindle_q.<name> */
	int32		max_reads;		/* 0: no limit */
	char		dead_letter_queue[NAMEDATALEN]; /* "": none */
	int64		max_depth;		/* 0: no limit */
	SpindleOverflow overflow;
} SpindleQueue;

/* GUC spindle.max_payload_size (bytes) */
extern int	spindle_max_payload_size;

extern void spindle_queue_catalog_init(void);

/* names, lookups, rights */
extern void spindle_queue_check_name(const char *name, const char *what);
extern char *spindle_queue_name_arg(FunctionCallInfo fcinfo, int argno);
extern Oid	spindle_queue_namespace(bool missing_ok);
extern bool spindle_queue_lookup(const char *name, SpindleQueue *q,
								 bool missing_ok);
extern bool spindle_queue_has_right(Oid relid, Oid user, AclMode mode);
extern void spindle_queue_check_rights(const SpindleQueue *q, AclMode modes);
extern void spindle_queue_open_arg(FunctionCallInfo fcinfo, int argno,
								   AclMode modes, SpindleQueue *q);
extern void spindle_queue_check_payload_size(const SpindleQueue *q,
											 Datum payload, int position);

/* the registry (written as the bootstrap superuser) */
extern void spindle_queue_lock_registry(void);
extern void spindle_queue_register(const SpindleQueue *q);
extern bool spindle_queue_dead_letter_user(const char *name, char *user);

/* msg_id assignment and capture (store_events in facade_am.c) */
extern void spindle_queue_register_hooks(void);
extern void spindle_queue_wake_database(void);
extern int64 spindle_queue_event_floor(Relation facade);
extern void spindle_queue_events_numbered(Relation facade, int64 next);
extern bool spindle_keep_msg_ids;
extern int64 spindle_queue_kept_no(Relation facade, TupleTableSlot *slot);
extern AttrNumber spindle_queue_ttl_not_before(Relation facade);
extern bool spindle_relation_is_queue(Relation rel);
extern void spindle_queue_note_truncate(Relation rel);
extern void spindle_queue_assign_ids(Relation facade, TupleTableSlot **slots,
									 int n, int64 msg_id0, CommandId cid);

/* Collects the msg_ids one INSERT statement assigns (queue_api.c). */
typedef struct SpindleIdCapture
{
	Oid			relid;			/* the queue table */
	CommandId	cid;			/* the command id of the INSERT */
	MemoryContext cxt;			/* ids are allocated here */
	int64	   *ids;
	int			nids;
	int			maxids;
	struct SpindleIdCapture *outer; /* the capture this one is nested in */
} SpindleIdCapture;

extern void spindle_queue_capture_push(SpindleIdCapture *cap, Oid relid,
									   CommandId cid);
extern void spindle_queue_capture_pop(SpindleIdCapture *cap);

/* ---- queue_state.c: consumer state in shared memory ---- */

/*
 * What an item says of the events [start, end) of one spindle, all behind
 * the head (delayed events are parked on disk instead: queue_parked.c).  Any item may be turned into QITEM_RETURNED at any time: its
 * events are then examined again on disk, which is always correct.
 */
typedef enum QueueItemKind
{
	QITEM_FREE = 0,
	QITEM_CLAIM,				/* purged by a running (sub)transaction */
	QITEM_RETURNED,				/* to be examined again: deliverable first */
	QITEM_PENDING,				/* an insert, delete or lock by xid runs */
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
	bool		parked;			/* RETURNED, or a CLAIM made of one: a run
								 * that stays parked on disk until settled
								 * (queue_parked.c) */
	bool		to_lease;		/* CLAIM: a lease its read() grants when it
								 * returns (counted in nleases) */
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
	pg_atomic_uint32 pins;		/* calls using it: not evicted */
	/* parked delayed runs (queue_parked.c), changed under its writer lock */
	bool		park_known;		/* park_due and park_from are set */
	TimestampTz park_due;		/* earliest due of one (DT_NOEND: none) */
	int64		park_from;		/* due keys below it are all taken */
	int64		park_end;		/* no parked run reaches past this id */
	bool		used;			/* pinned since the sweep last passed */
} QueueState;

/* items each queue may use besides the claims of reads in progress */
#define SPINDLE_ITEMS_PER_QUEUE 256

extern int	spindle_max_queues;
extern int	spindle_max_leases;

extern Size spindle_queue_shmem_size(void);
extern void spindle_queue_shmem_request(void);
extern void spindle_queue_shmem_startup(void);

extern QueueState *spindle_queue_state(Oid relid);
extern QueueState *spindle_queue_state_pin(Oid relid);
extern void spindle_queue_state_unpin(QueueState *qs);
extern uint64 spindle_queue_evictions(void);
extern QueueState *spindle_queue_state_at(int slot);
extern LWLock *spindle_queue_lock(QueueState *qs);
extern void spindle_queue_state_reset(Oid relid);
extern void spindle_queue_state_lower(Oid relid, int64 first_no);
extern void spindle_queue_forget_database(Oid dbid);

extern QueueItem *spindle_qitem_alloc(QueueState *qs, QueueItemKind kind,
									  int64 start, int64 end);
extern QueueItem *spindle_qitem_alloc_split(QueueState *qs, QueueItemKind kind,
											int64 start, int64 end);
extern bool spindle_qitem_lease_room(void);
extern void spindle_qitem_free(QueueState *qs, QueueItem *item);
extern QueueItem *spindle_qitem_at(int index);
extern bool spindle_qitems_overlap(QueueState *qs, int64 start, int64 end);
extern int	spindle_qitems_free_count(void);

/* ---- queue_parked.c: delayed, leased, pending events parked on disk ---- */

/* A run of events [start, end) parked until due: delayed, or leased. */
typedef struct ParkedRun
{
	int64		start;
	int64		end;
	TimestampTz due;
	int32		read_count;
	uint16		kind;			/* SPINDLE_RUN_DELAYED, _LEASED or _PENDING */
	TransactionId xid;			/* PENDING: the transaction it waits for */
} ParkedRun;

extern void spindle_park_runs(Relation facade, QueueState *qs,
							  const ParkedRun *runs, int n);
extern void spindle_park_spilled(Relation facade, QueueState *qs,
								 const ParkedRun *runs, int n);
extern int	spindle_park_take_due(Relation facade, QueueState *qs,
								  TimestampTz now, int64 want, int64 head,
								  ParkedRun *out, int max, bool *held);
extern bool spindle_park_find(Relation facade, int64 msg_id, ParkedRun *run);
extern bool spindle_park_moved(Relation facade, int64 lo, int64 hi);
extern int	spindle_park_compact(Oid relid);
extern bool spindle_park_take_one(Relation facade, QueueState *qs,
								  int64 msg_id, ParkedRun *was);
extern void spindle_park_forget(Oid relid, const int64 *ranges, int n);
extern bool spindle_park_relet(Relation facade, QueueState *qs, int64 msg_id,
							   TimestampTz due);
extern bool spindle_park_hand_back(Oid relid, const ParkedRun *runs, int n,
								   bool nowait);
extern TimestampTz spindle_park_next_due(Relation facade, QueueState *qs);
extern int64 spindle_park_next(Relation facade, QueueState *qs, int64 x,
							   bool chain, int64 *end);
extern int64 *spindle_park_ranges(Relation facade, QueueState *qs, int64 lo,
								  int64 hi, int max, int *n);
extern int64 spindle_park_count(Oid relid, uint16 kind, TimestampTz after,
								 TimestampTz *first_due);
extern int64 *spindle_park_leased(Oid relid, int64 lo, int64 hi,
								  TimestampTz after, int *n);

/* ---- cache.c: the event cache ---- */

/* GUCs (server start) */
extern int	spindle_cache_size;
extern int	spindle_cache_tables;
extern int	spindle_cache_payload_size;

/* What a lookup found for one msg_id. */
typedef struct SpindleCachedEvent
{
	bool		found;
	Oid			segment;		/* the spindle's relation */
	ItemPointerData ptid;		/* where its tuple is */
	TransactionId xmin;			/* the inserting (sub)transaction */
	TimestampTz enqueued_at;
	struct varlena *payload;	/* a palloc'd copy, or NULL: read the page */
} SpindleCachedEvent;

extern void spindle_cache_define_gucs(void);
extern Size spindle_cache_shmem_size(void);
extern void spindle_cache_shmem_request(void);
extern void spindle_cache_shmem_startup(void);

/* producers (store_events in facade_am.c) */
extern void spindle_cache_put(Relation facade, Oid segment, int64 msg_id0,
							  int n, ItemPointer ptids, HeapTuple *tuples);

/* consumers (queue.c) */
extern int	spindle_cache_find(Oid relid);
extern void spindle_cache_lookup(int slot, Oid relid, const int64 *msg_ids,
								 int n, SpindleCachedEvent *out);
extern void spindle_cache_forget(int slot, Oid relid, const int64 *msg_ids,
								 int n);

/* the table is dropped or truncated */
extern void spindle_cache_reset(Oid relid);
extern void spindle_cache_forget_database(Oid dboid);

/* ---- queue_insert.c: direct placement of enqueued events ---- */

extern bool spindle_queue_insert_direct(const SpindleQueue *q,
										Datum *payloads, int n, Datum delay,
										int64 **ids, bool *gone);

/* ---- queue_limits.c: max_depth and overflow ---- */

extern const char *const spindle_overflow_names[];
extern bool spindle_overflow_parse(const char *name, SpindleOverflow *o);
extern Size spindle_limits_shmem_size(void);
extern void spindle_limits_shmem_request(void);
extern void spindle_limits_shmem_startup(void);
extern void spindle_queue_limit_admit(const SpindleQueue *q, int n);
extern void spindle_queue_limit_release(const SpindleQueue *q);
extern void spindle_queue_limit_forget(Oid relid);
extern void spindle_queue_limits_forget_database(Oid dbid);
extern void spindle_queue_limit_plain_insert(Oid relid);
extern void spindle_queue_limit_leases_back(Oid relid);

/*
 * What the depth of a queue is by the counters: deliverable plus delayed
 * plus in-flight events (*counted) and every unpurged one, leased too
 * (*unpurged); *leased, the leases not ended, which all last at least
 * until *leases_until (the earliest end among them; DT_NOEND: none).  The
 * admin layer's views compute it (views.c) and register it at start-up;
 * it counts a spindle from disk when its counter cannot be had, so it
 * returns true (false would be an internal error).
 */
typedef bool (*spindle_queue_count_fn) (Oid relid, int64 *counted,
										int64 *unpurged, int64 *leased,
										TimestampTz *leases_until);
extern PGDLLIMPORT spindle_queue_count_fn spindle_queue_count_hook;

/* ---- queue_consumed.c: consumers and the consume log ---- */

extern PGDLLIMPORT bool spindle_consume_log;	/* spindle.consume_log */

#define SPINDLE_LOG_NONE	0	/* no live entry: the event decides */
#define SPINDLE_LOG_GONE	1	/* consumed by a committed entry */
#define SPINDLE_LOG_PENDING 2	/* consumed by a running transaction */

/* What one examine() knows of the log (queue_consumed.c). */
typedef struct SpindleConsumeView
{
	Relation	crel;			/* NULL: the log plays no part */
	bool		write;			/* entries are written, not xmax */
	bool		locked;			/* the log's lock is held ... */
	bool		exclusive;		/* ... in exclusive mode: starting the log */
	bool		has_log;		/* the queue has a log: read page by page */
	bool		reloc;			/* the queue has a tree 3 (moved events):
								 * known at begin, or from a page's look */
	SpindleConsumed *entries;	/* over the current page's candidates */
	int		   *verdicts;		/* SPINDLE_LOG_* of each entry */
	int64		floor;			/* the log's floor: ids below are gone */
	int			nentries;
	int			room;
} SpindleConsumeView;

extern void spindle_queue_consumed_init(void);
extern void spindle_consumed_begin(SpindleConsumeView *v, Relation facade,
								   int n, bool write);
extern void spindle_consumed_page(SpindleConsumeView *v, const int64 *ids,
								  int n);
extern int	spindle_consumed_verdict(SpindleConsumeView *v, int64 id,
									 TransactionId *xid);
extern void spindle_consumed_write(SpindleConsumeView *v, Relation seg,
								   int64 *ids, ItemPointer ptids, int n,
								   CommandId cid);
extern void spindle_consumed_end(SpindleConsumeView *v);
extern int64 spindle_consumed_floor(Relation facade);
extern int64 spindle_consumed_skip(Relation facade, int64 from, int64 to,
								   const int64 *parked, int nparked);

/* ids one look of a head over settled events covers, at most */
#define SPINDLE_SKIP_LOOK_IDS	16384

/* ---- queue.c: consuming ---- */

extern void spindle_queue_note_insert(Relation rel);
extern int64 *spindle_queue_ttl_held(Relation facade, int64 lo, int64 hi,
									 int *n);

/* ---- queue_compact.c: compaction of sparse spindles ---- */

/* GUC spindle.compaction_threshold (0: off) */
extern double spindle_compaction_threshold;

/* events one pass of spindle._compact() moves, at most */
#define SPINDLE_COMPACT_EVENTS_PER_PASS 1000

/* what relocator passes did */
typedef struct SpindleCompactStats
{
	int64		moved;			/* events moved into annexes */
	int64		skipped;		/* events whose copy failed */
	int64		spindles;		/* spindles and annexes moved out of */
	int64		emptied;		/* ... of which every live event moved */
} SpindleCompactStats;

extern bool spindle_compact_table(Oid relid, int64 max_events,
								  bool backoff, SpindleCompactStats *st);

/* ---- queue_api.c: create, drop, enqueue ---- */

extern void spindle_queue_api_init(void);
extern void spindle_queue_table_created(Oid relid);

#endif							/* SPINDLE_QUEUE_LAYER_H */
