/*-------------------------------------------------------------------------
 *
 * queue_catalog.h
 *	  The queue registry, queue names, lookups with privilege checks, and
 *	  the msg_id assignment of queue tables (queue_catalog.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_QUEUE_CATALOG_H
#define SPINDLE_QUEUE_CATALOG_H

#include "executor/tuptable.h"
#include "fmgr.h"
#include "utils/acl.h"
#include "utils/rel.h"

/* Schema of the queue tables: queue "orders" is table spindle_q.orders. */
#define SPINDLE_QUEUE_SCHEMA "spindle_q"

/* Longest queue name (^[a-z_][a-z0-9_]{0,47}$). */
#define SPINDLE_QUEUE_NAME_MAX 48

/* Columns of a queue table, in this order (attribute numbers). */
#define SPINDLE_QUEUE_ATT_MSG_ID		1
#define SPINDLE_QUEUE_ATT_ENQUEUED_AT	2
#define SPINDLE_QUEUE_ATT_VISIBLE_AT	3
#define SPINDLE_QUEUE_ATT_PAYLOAD		4

/* One queue as its registry row says (spindle.queue_catalog). */
typedef struct SpindleQueue
{
	char		name[NAMEDATALEN];
	Oid			relid;			/* spindle_q.<name> */
	int32		max_reads;		/* 0: no limit */
	char		dead_letter_queue[NAMEDATALEN]; /* "": none */
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
extern bool spindle_relation_is_queue(Relation rel);
extern void spindle_queue_note_truncate(Relation rel);
extern void spindle_queue_assign_ids(Relation facade, TupleTableSlot **slots,
									 int n, int64 spindle_no, int64 k0,
									 CommandId cid);

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

#endif							/* SPINDLE_QUEUE_CATALOG_H */
