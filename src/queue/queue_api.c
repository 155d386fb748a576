/*-------------------------------------------------------------------------
 *
 * queue_api.c
 *	  The SQL functions of producers and administrators of queues:
 *	  spindle.create_queue, drop_queue, enqueue and enqueue_batch.
 *
 * create_queue makes the table spindle_q.<name> through SPI as the
 * calling role (who needs CREATE on schema spindle_q and becomes the
 * owner; the utility hook of options.c takes WITH (events_per_spindle,
 * time_to_live)), then its registry row (queue_catalog.c).  drop_queue
 * needs the owner and runs DROP TABLE as the caller; the object access
 * hook removes the registry row.  Any CREATE of a queue table (this one,
 * a restore's) gives it a consumer relation (spindle_queue_table_created,
 * called by the utility hook; storage/consumer_rel.c), which every drop
 * of the table takes along and a TRUNCATE renews (queue_truncated).
 *
 * create_queue also takes the queue's length limit (max_depth, overflow),
 * checked here and stored in the registry row; enqueue and enqueue_batch
 * of a queue that has one call queue_limits.c before and after their
 * INSERT.
 *
 * enqueue and enqueue_batch place their events without the executor when
 * the queue's table has nothing an INSERT must do besides (queue_insert.c).
 * Otherwise they run INSERT INTO spindle_q.<name> (payload,
 * visible_at) VALUES ($1, now() + $2) through SPI as the calling user, so
 * the table's privileges, row-level security policies and triggers apply
 * as to any INSERT; they are not SECURITY DEFINER and switch no user.  The
 * statement has no RETURNING (that would need SELECT privilege, and
 * enqueue needs only INSERT): the msg_ids the access method assigns are
 * collected by command id (SpindleIdCapture, queue_catalog.c).  The plans
 * are prepared once per backend and queue table (SPI_keepplan), keyed by
 * the table's OID; a relcache invalidation of the table marks them stale,
 * and stale plans of tables that are gone (or renamed) are freed when no
 * enqueue is running in this backend.  The plan cache revalidates plans
 * itself when the table changes.
 *
 * Every check comes before any lock on the queue's table: the name (42602),
 * existence (42P01), privileges (42501), then the arguments (22004 for
 * NULL, 22023 for a negative delay, 54000 for a payload over
 * spindle.max_payload_size).  A failed call changes nothing.  A queue
 * dropped while enqueue waited for its table's lock is looked up again by
 * name, as the INSERT would find it: a queue made again under that name
 * gets the events (its existence and rights checked again), none means
 * 42P01.
 *
 * A dead-letter queue must be owned by the creator (the move runs its
 * triggers as the reader of the queue: they are then the queue owner's
 * code) and its chain of dead-letter queues must not lead back to the new
 * queue.  An INSTEAD rule for INSERT on a queue's table makes enqueue fail
 * with 0A000: its INSERT would store nothing there to number.
 *
 * Locks: create_queue takes AccessShareLock on the dead-letter queue's
 * table (so it cannot be dropped before this transaction ends); the
 * statements run through SPI take what they always take.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/relation.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "rewrite/prs2lock.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "queue/spindle_queue.h"


PG_FUNCTION_INFO_V1(spindle_create_queue);
PG_FUNCTION_INFO_V1(spindle_drop_queue);
PG_FUNCTION_INFO_V1(spindle_enqueue);
PG_FUNCTION_INFO_V1(spindle_enqueue_batch);

/* The INSERT plans of one queue table. */
typedef struct EnqueuePlans
{
	Oid			relid;			/* hash key */
	char		name[NAMEDATALEN];	/* the table name the plans use */
	bool		stale;			/* a relcache invalidation came since */
	SPIPlanPtr	one;			/* enqueue: $1 jsonb, $2 interval */
	SPIPlanPtr	batch;			/* enqueue_batch: $1 jsonb[], $2 interval */
} EnqueuePlans;

static HTAB *plan_cache = NULL;
static bool plans_stale = false;	/* some entry is stale */
static int	enqueue_depth = 0;	/* enqueues running in this backend */

/* ----------------------------------------------------------------
 * Plans
 * ----------------------------------------------------------------
 */

static void
plan_relcache_callback(Datum arg, Oid relid)
{
	HASH_SEQ_STATUS status;
	EnqueuePlans *e;

	if (plan_cache == NULL)
		return;
	hash_seq_init(&status, plan_cache);
	while ((e = hash_seq_search(&status)) != NULL)
		if (!OidIsValid(relid) || e->relid == relid)
		{
			e->stale = true;
			plans_stale = true;
		}
}

/*
 * Free the plans of tables that are gone or no longer have the name they
 * were prepared with.  Only when no enqueue runs: a trigger's enqueue must
 * not free the plan its caller is executing.
 */
static void
sweep_stale_plans(void)
{
	HASH_SEQ_STATUS status;
	EnqueuePlans *e;
	Oid			nsp = spindle_queue_namespace(true);

	if (!plans_stale || enqueue_depth > 0)
		return;
	plans_stale = false;
	hash_seq_init(&status, plan_cache);
	while ((e = hash_seq_search(&status)) != NULL)
	{
		char	   *relname;

		if (!e->stale)
			continue;
		relname = get_rel_name(e->relid);
		if (relname != NULL && strcmp(relname, e->name) == 0 &&
			get_rel_namespace(e->relid) == nsp)
		{
			e->stale = false;
			continue;
		}
		if (e->one != NULL)
			SPI_freeplan(e->one);
		if (e->batch != NULL)
			SPI_freeplan(e->batch);
		hash_search(plan_cache, &e->relid, HASH_REMOVE, NULL);
	}
}

/* The plan (batch or not) for queue q, prepared if need be.  In SPI. */
static SPIPlanPtr
get_plan(const SpindleQueue *q, bool batch)
{
	EnqueuePlans *e;
	bool		found;
	SPIPlanPtr *slot;
	StringInfoData sql;
	Oid			types[2];

	e = hash_search(plan_cache, &q->relid, HASH_ENTER, &found);
	if (!found)
	{
		strlcpy(e->name, q->name, NAMEDATALEN);
		e->stale = false;
		e->one = NULL;
		e->batch = NULL;
	}
	slot = batch ? &e->batch : &e->one;
	if (*slot != NULL)
		return *slot;

	/* every name qualified: the caller's search_path applies */
	initStringInfo(&sql);
	appendStringInfo(&sql, "INSERT INTO %s.%s (payload, visible_at) ",
					 quote_identifier(SPINDLE_QUEUE_SCHEMA),
					 quote_identifier(e->name));
	if (batch)
		appendStringInfoString(&sql,
							   "SELECT p.payload, pg_catalog.now() OPERATOR(pg_catalog.+) $2"
							   "  FROM pg_catalog.unnest($1) WITH ORDINALITY AS p (payload, n)"
							   " ORDER BY p.n");
	else
		appendStringInfoString(&sql,
							   "VALUES ($1, pg_catalog.now() OPERATOR(pg_catalog.+) $2)");
	types[0] = batch ? JSONBARRAYOID : JSONBOID;
	types[1] = INTERVALOID;
	*slot = SPI_prepare(sql.data, 2, types);
	if (*slot == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s", sql.data,
			 SPI_result_code_string(SPI_result));
	if (SPI_keepplan(*slot) != 0)
		elog(ERROR, "SPI_keepplan failed");
	pfree(sql.data);
	return *slot;
}

/*
 * ERROR 0A000 if the table of queue q has an INSTEAD rule for INSERT (the
 * caller holds, or is about to take, RowExclusiveLock on it): the INSERT
 * of enqueue would then store nothing in the queue, or store the events
 * elsewhere, and there would be no msg_id to return.  DO ALSO rules run
 * beside the INSERT, which stores the events as usual.
 */
static void
refuse_instead_rules(const SpindleQueue *q)
{
	Relation	rel = try_relation_open(q->relid, RowExclusiveLock);
	int			i;

	if (rel == NULL)
		return;					/* gone: the INSERT says so */
	for (i = 0; rel->rd_rules != NULL && i < rel->rd_rules->numLocks; i++)
	{
		RewriteRule *rule = rel->rd_rules->rules[i];

		if (rule->event == CMD_INSERT && rule->isInstead)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot enqueue into queue \"%s\": its table has an INSTEAD rule for INSERT",
							q->name),
					 errdetail("The rule replaces the INSERT, which would not store the events in the queue, so enqueue would have no msg_id to return."),
					 errhint("Drop the rule, or use a BEFORE INSERT trigger instead.")));
	}
	relation_close(rel, NoLock);
}

/*
 * Insert into queue q, as the calling user: one payload, or (batch) the
 * elements of a jsonb[] in order, visible after now() + delay.  Returns the
 * msg_ids of the events inserted, in order, and their number in *nids
 * (fewer than asked if a BEFORE trigger skipped some).  Allocated in the
 * caller's memory context.
 */
static int64 *
insert_events(const SpindleQueue *q, bool batch, Datum payload,
			  Datum *elems, int nelems, Datum delay, int *nids)
{
	SpindleIdCapture cap;
	SPIPlanPtr	plan;
	Datum		values[2];
	int			rc = 0;
	MemoryContext callercxt = CurrentMemoryContext;
	int64	   *ids;
	SpindleQueue fresh;
	bool		gone;
	int			tries = 0;

	/* without the executor when the table allows (queue_insert.c) */
	while (spindle_queue_insert_direct(q, batch ? elems : &payload,
									   batch ? nelems : 1, delay, &ids,
									   &gone) ||
		   gone)
	{
		if (!gone)
		{
			*nids = batch ? nelems : 1;
			return ids;
		}

		/*
		 * The table was dropped while we waited for its lock: the INSERT
		 * would find what the name means now, a queue made again under
		 * it (its OID is what the msg_ids are collected by) or nothing
		 * (42P01).  Its rights are checked as for the first.
		 */
		if (++tries > 10)
			break;				/* dropped again and again: SPI says */
		(void) spindle_queue_lookup(q->name, &fresh, false);
		spindle_queue_check_rights(&fresh, ACL_INSERT);
		q = &fresh;
	}

	refuse_instead_rules(q);
	sweep_stale_plans();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	plan = get_plan(q, batch);
	values[0] = payload;
	values[1] = delay;

	/*
	 * The INSERT runs with the command id current after this increment
	 * (SPI's own increment before it then has nothing to do); statements
	 * its triggers run get later ones.
	 */
	CommandCounterIncrement();
	spindle_queue_capture_push(&cap, q->relid, GetCurrentCommandId(false));
	cap.cxt = callercxt;		/* the ids outlive SPI_finish */
	enqueue_depth++;
	PG_TRY();
	{
		rc = SPI_execute_plan(plan, values, NULL, false, 0);
	}
	PG_FINALLY();
	{
		enqueue_depth--;
		spindle_queue_capture_pop(&cap);
	}
	PG_END_TRY();
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "SPI_execute_plan failed for queue \"%s\": %s", q->name,
			 SPI_result_code_string(rc));
	if (cap.nids != (int) SPI_processed)
		elog(ERROR, "enqueue into queue \"%s\" inserted %d events but numbered %d",
			 q->name, (int) SPI_processed, cap.nids);
	SPI_finish();
	*nids = cap.nids;
	return cap.ids;
}

/* ERROR unless delay (argument argno) is a non-negative interval. */
static Datum
delay_arg(FunctionCallInfo fcinfo, int argno)
{
	Interval	zero;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("delay must not be NULL"),
				 errhint("Use '0' for an event deliverable at once.")));
	memset(&zero, 0, sizeof(zero));
	if (DatumGetBool(DirectFunctionCall2(interval_lt, PG_GETARG_DATUM(argno),
										 IntervalPGetDatum(&zero))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("delay must not be negative: %s",
						DatumGetCString(DirectFunctionCall1(interval_out,
															PG_GETARG_DATUM(argno))))));
	return PG_GETARG_DATUM(argno);
}

/* ----------------------------------------------------------------
 * enqueue(queue_name text, payload jsonb, delay interval DEFAULT '0')
 *	   RETURNS bigint
 * ----------------------------------------------------------------
 */
Datum
spindle_enqueue(PG_FUNCTION_ARGS)
{
	SpindleQueue q;
	Datum		delay;
	int64	   *ids;
	int			nids;

	spindle_queue_open_arg(fcinfo, 0, ACL_INSERT, &q);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("payload must not be NULL"),
				 errhint("Enqueue 'null'::jsonb for a JSON null.")));
	delay = delay_arg(fcinfo, 2);
	spindle_queue_check_payload_size(&q, PG_GETARG_DATUM(1), 0);

	if (q.max_depth > 0)
		spindle_queue_limit_admit(&q, 1);
	ids = insert_events(&q, false, PG_GETARG_DATUM(1), NULL, 0, delay, &nids);
	if (q.max_depth > 0)
		spindle_queue_limit_release(&q);
	if (nids == 0)
		PG_RETURN_NULL();		/* a BEFORE trigger skipped it */
	PG_RETURN_INT64(ids[0]);
}

/* ----------------------------------------------------------------
 * enqueue_batch(queue_name text, payloads jsonb[], delay interval
 *				 DEFAULT '0') RETURNS SETOF bigint
 * ----------------------------------------------------------------
 */
Datum
spindle_enqueue_batch(PG_FUNCTION_ARGS)
{
	SpindleQueue q;
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	int			nelems;
	Datum		delay;
	int64	   *ids;
	int			nids;
	int			i;
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	spindle_queue_open_arg(fcinfo, 0, ACL_INSERT, &q);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("payloads must not be NULL")));
	arr = PG_GETARG_ARRAYTYPE_P(1);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("payloads must be a one-dimensional array")));
	deconstruct_array(arr, JSONBOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, &nelems);
	for (i = 0; i < nelems; i++)
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("payload %d of the batch is NULL", i + 1),
					 errhint("Enqueue 'null'::jsonb for a JSON null.")));
	delay = delay_arg(fcinfo, 2);
	for (i = 0; i < nelems; i++)
		spindle_queue_check_payload_size(&q, elems[i], i + 1);

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	if (nelems == 0)
		return (Datum) 0;
	if (q.max_depth > 0)
		spindle_queue_limit_admit(&q, nelems);
	ids = insert_events(&q, true, PointerGetDatum(arr), elems, nelems, delay,
						 &nids);
	if (q.max_depth > 0)
		spindle_queue_limit_release(&q);
	for (i = 0; i < nids; i++)
	{
		Datum		value = Int64GetDatum(ids[i]);
		bool		isnull = false;

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &value,
							 &isnull);
	}
	return (Datum) 0;
}

/*
 * The dead-letter queue dq of a new queue name must be owned by the role
 * creating it (who will own the new queue): the move to a dead-letter
 * queue runs as the reader of the queue, and so runs the dead-letter
 * queue's triggers, defaults and policies; with one owner they are the
 * queue owner's own code, as triggers on the queue's table would be, and
 * no one can pin another role's queue as their dead-letter queue (which
 * its owner then could not drop).  ERROR 42501 otherwise.
 */
static void
check_dead_letter_owner(const char *name, const SpindleQueue *dq)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(dq->relid));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("queue \"%s\" does not exist", dq->name)));
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	if (owner != GetUserId())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("dead-letter queue \"%s\" of queue \"%s\" must be owned by the queue's owner",
						dq->name, name),
				 errdetail("Queue \"%s\" is owned by role %s; the new queue would be owned by role %s.",
						   dq->name,
						   quote_identifier(GetUserNameFromId(owner, false)),
						   quote_identifier(GetUserNameFromId(GetUserId(), false))),
				 errhint("Create the queue as the dead-letter queue's owner, or use a dead-letter queue of your own.")));
}

/*
 * ERROR 22023 if making dq the dead-letter queue of a new queue name would
 * close a cycle: dq's chain of dead-letter queues leads back to name
 * (possible when a queue named name was dropped in this transaction and
 * another queue still names it).  Events would then move round forever.
 * Registry rows never change once written, and create_queue holds the
 * registry lock, so checking here keeps every chain free of cycles.
 */
static void
check_dead_letter_cycle(const char *name, const SpindleQueue *dq)
{
	SpindleQueue cur = *dq;
	int			steps = 0;

	while (cur.dead_letter_queue[0] != '\0')
	{
		if (strcmp(cur.dead_letter_queue, name) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("dead-letter queue \"%s\" of queue \"%s\" would make a cycle",
							dq->name, name),
					 errdetail("Queue \"%s\" moves its dead letters to queue \"%s\".",
							   cur.name, name),
					 errhint("Drop queue \"%s\" first, or choose another dead-letter queue.",
							 cur.name)));
		/* a chain longer than the registry can hold loops elsewhere */
		if (++steps > 100000 ||
			!spindle_queue_lookup(cur.dead_letter_queue, &cur, true))
			break;
	}
}

/*
 * The length limit arguments of create_queue (5: max_depth bigint, 6:
 * overflow text): ERROR 22023 for a max_depth that is not positive, an
 * overflow that is NULL or not one of the three policies, or an overflow
 * other than 'reject' without max_depth (it could never apply).
 */
static void
overflow_args(FunctionCallInfo fcinfo, const char *name, int64 *max_depth,
			  SpindleOverflow *overflow)
{
	char	   *ov;

	*max_depth = 0;
	if (!PG_ARGISNULL(5))
	{
		*max_depth = PG_GETARG_INT64(5);
		if (*max_depth <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid max_depth for queue \"%s\": " INT64_FORMAT,
							name, *max_depth),
					 errdetail("max_depth must be positive, or NULL for no limit.")));
	}
	if (PG_ARGISNULL(6))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("overflow of queue \"%s\" must not be NULL", name),
				 errhint("Use 'reject', 'drop_oldest' or 'dead_letter'.")));
	ov = text_to_cstring(PG_GETARG_TEXT_PP(6));
	if (!spindle_overflow_parse(ov, overflow))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid overflow for queue \"%s\": \"%s\"", name, ov),
				 errhint("Use 'reject', 'drop_oldest' or 'dead_letter'.")));
	if (*overflow != SPINDLE_OVERFLOW_REJECT && *max_depth == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("overflow '%s' of queue \"%s\" needs max_depth", ov,
						name),
				 errhint("Set max_depth, the depth at which the policy applies.")));
}

/* ----------------------------------------------------------------
 * create_queue(queue_name text, events_per_spindle int DEFAULT NULL,
 *				time_to_live interval DEFAULT NULL, max_reads int DEFAULT
 *				NULL, dead_letter_queue text DEFAULT NULL, max_depth bigint
 *				DEFAULT NULL, overflow text DEFAULT 'reject') RETURNS regclass
 * ----------------------------------------------------------------
 */
Datum
spindle_create_queue(PG_FUNCTION_ARGS)
{
	char	   *name = spindle_queue_name_arg(fcinfo, 0);
	char	   *dlq = NULL;
	SpindleQueue q;
	SpindleQueue dq;
	Oid			nsp;
	StringInfoData sql;
	const char *sep = " WITH (";
	int			rc;
	int64		max_depth = 0;
	SpindleOverflow overflow;

	/* the arguments */
	if (!PG_ARGISNULL(1) &&
		(PG_GETARG_INT32(1) < 0 || PG_GETARG_INT32(1) > SPINDLE_MAX_CAPACITY))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid events_per_spindle for queue \"%s\": %d",
						name, PG_GETARG_INT32(1)),
				 errdetail("Valid values are integers between 0 and %lld, the most events one spindle holds.",
						   (long long) SPINDLE_MAX_CAPACITY)));
	if (!PG_ARGISNULL(2))
	{
		Interval	zero;

		memset(&zero, 0, sizeof(zero));
		if (!DatumGetBool(DirectFunctionCall2(interval_gt, PG_GETARG_DATUM(2),
											  IntervalPGetDatum(&zero))))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid time_to_live for queue \"%s\": %s", name,
							DatumGetCString(DirectFunctionCall1(interval_out,
																PG_GETARG_DATUM(2)))),
					 errdetail("Valid values are positive intervals, such as '1 hour'.")));
	}
	if (!PG_ARGISNULL(3) && PG_GETARG_INT32(3) <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid max_reads for queue \"%s\": %d",
						name, PG_GETARG_INT32(3)),
				 errdetail("max_reads must be positive, or NULL for no limit.")));
	if (!PG_ARGISNULL(4))
	{
		dlq = text_to_cstring(PG_GETARG_TEXT_PP(4));
		spindle_queue_check_name(dlq, "dead-letter queue name");
		if (strcmp(dlq, name) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("queue \"%s\" cannot be its own dead-letter queue",
							name)));
	}
	overflow_args(fcinfo, name, &max_depth, &overflow);
	if (dlq != NULL && PG_ARGISNULL(3) &&
		overflow != SPINDLE_OVERFLOW_DEAD_LETTER)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("dead_letter_queue of queue \"%s\" needs max_reads or overflow 'dead_letter'",
						name),
				 errdetail("Events move to the dead-letter queue when they have been read more than max_reads times, or when the queue is full with overflow 'dead_letter'.")));
	if (dlq == NULL && overflow == SPINDLE_OVERFLOW_DEAD_LETTER)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("overflow 'dead_letter' of queue \"%s\" needs a dead_letter_queue",
						name),
				 errhint("Name the queue that takes the oldest events in dead_letter_queue, or use overflow 'drop_oldest'.")));

	/* the right to create it, then whether it exists */
	PreventCommandIfReadOnly("create_queue()");
	nsp = spindle_queue_namespace(false);
	if (pg_namespace_aclcheck(nsp, GetUserId(), ACL_CREATE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to create queue \"%s\"", name),
				 errdetail("Creating a queue needs CREATE privilege on schema %s.",
						   SPINDLE_QUEUE_SCHEMA),
				 errhint("A superuser can grant it: GRANT CREATE ON SCHEMA %s TO %s.",
						 SPINDLE_QUEUE_SCHEMA,
						 quote_identifier(GetUserNameFromId(GetUserId(), false)))));
	spindle_queue_lock_registry();
	if (spindle_queue_lookup(name, &q, true))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_TABLE),
				 errmsg("queue \"%s\" already exists", name)));
	if (OidIsValid(get_relname_relid(name, nsp)))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_TABLE),
				 errmsg("relation \"%s.%s\" already exists",
						SPINDLE_QUEUE_SCHEMA, name),
				 errdetail("It is not a queue.")));

	/*
	 * The dead-letter queue: the creator must be allowed to put events into
	 * it; locked so that it cannot be dropped before we commit (a drop that
	 * commits first makes us not find it after the lock).
	 */
	if (dlq != NULL)
	{
		(void) spindle_queue_lookup(dlq, &dq, false);
		spindle_queue_check_rights(&dq, ACL_INSERT);
		LockRelationOid(dq.relid, AccessShareLock);
		if (!spindle_queue_lookup(dlq, &dq, true))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_TABLE),
					 errmsg("queue \"%s\" does not exist", dlq)));
		check_dead_letter_owner(name, &dq);
		check_dead_letter_cycle(name, &dq);
	}

	/* the table, as the calling role */
	initStringInfo(&sql);
	appendStringInfo(&sql,
					 "CREATE TABLE %s.%s ("
					 "msg_id pg_catalog.int8 NOT NULL DEFAULT 0, "
					 "enqueued_at pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.now(), "
					 "visible_at pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.now(), "
					 "payload pg_catalog.jsonb NOT NULL) USING spindle",
					 quote_identifier(SPINDLE_QUEUE_SCHEMA),
					 quote_identifier(name));
	if (!PG_ARGISNULL(1))
	{
		appendStringInfo(&sql, "%sevents_per_spindle = %d", sep,
						 PG_GETARG_INT32(1));
		sep = ", ";
	}
	if (!PG_ARGISNULL(2))
	{
		struct pg_itm itm;
		char		buf[MAXDATELEN + 1];

		/* written in one style, so that it means the same in any */
		interval2itm(*PG_GETARG_INTERVAL_P(2), &itm);
		EncodeInterval(&itm, INTSTYLE_POSTGRES, buf);
		appendStringInfo(&sql, "%stime_to_live = %s", sep,
						 quote_literal_cstr(buf));
		sep = ", ";
	}
	if (strcmp(sep, ", ") == 0)
		appendStringInfoChar(&sql, ')');

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	rc = SPI_execute(sql.data, false, 0);
	if (rc != SPI_OK_UTILITY)
		elog(ERROR, "SPI_execute failed for \"%s\": %s", sql.data,
			 SPI_result_code_string(rc));
	SPI_finish();
	CommandCounterIncrement();

	/* and its registry row */
	memset(&q, 0, sizeof(q));
	strlcpy(q.name, name, NAMEDATALEN);
	q.relid = get_relname_relid(name, nsp);
	if (!OidIsValid(q.relid))
		elog(ERROR, "queue table %s.%s not found after its creation",
			 SPINDLE_QUEUE_SCHEMA, name);
	q.max_reads = PG_ARGISNULL(3) ? 0 : PG_GETARG_INT32(3);
	if (dlq != NULL)
		strlcpy(q.dead_letter_queue, dlq, NAMEDATALEN);
	q.max_depth = max_depth;
	q.overflow = overflow;
	spindle_queue_register(&q);

	PG_RETURN_OID(q.relid);
}

/* ----------------------------------------------------------------
 * drop_queue(queue_name text, if_exists boolean DEFAULT false)
 *	   RETURNS boolean
 * ----------------------------------------------------------------
 */
Datum
spindle_drop_queue(PG_FUNCTION_ARGS)
{
	char	   *name = spindle_queue_name_arg(fcinfo, 0);
	bool		if_exists;
	SpindleQueue q;
	char		user[NAMEDATALEN];
	char	   *sql;
	int			rc;

	/* NULL is neither answer: it must not drop the queue */
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("if_exists must not be NULL")));
	if_exists = PG_GETARG_BOOL(1);
	if (!spindle_queue_lookup(name, &q, if_exists))
	{
		ereport(NOTICE,
				(errmsg("queue \"%s\" does not exist, skipping", name)));
		PG_RETURN_BOOL(false);
	}
	PreventCommandIfReadOnly("drop_queue()");
	if (!pg_class_ownercheck(q.relid, GetUserId()))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of queue \"%s\" to drop it", name)));
	if (spindle_queue_dead_letter_user(name, user))
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("cannot drop queue \"%s\" because queue \"%s\" uses it as its dead-letter queue",
						name, user),
				 errhint("Drop queue \"%s\" first.", user)));

	sql = psprintf("DROP TABLE %s.%s", quote_identifier(SPINDLE_QUEUE_SCHEMA),
				   quote_identifier(name));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	rc = SPI_execute(sql, false, 0);
	if (rc != SPI_OK_UTILITY)
		elog(ERROR, "SPI_execute failed for \"%s\": %s", sql,
			 SPI_result_code_string(rc));
	SPI_finish();
	PG_RETURN_BOOL(true);
}

/* Called from _PG_init: the plan cache. */
void
spindle_queue_api_init(void)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(EnqueuePlans);
	ctl.hcxt = TopMemoryContext;
	plan_cache = hash_create("spindle enqueue plans", 64, &ctl,
							 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	CacheRegisterRelcacheCallback(plan_relcache_callback, (Datum) 0);
}

/*
 * TRUNCATE of a queue table: its cached events go, and with a
 * transactional truncate its consumer state.
 */
static void
queue_truncated(Relation rel, bool transactional)
{
	spindle_cache_reset(RelationGetRelid(rel));
	if (transactional)
		spindle_queue_note_truncate(rel);
	/* a new relfilenode for its consumer relation, counters kept */
	spindle_consumer_rel_truncate(RelationGetRelid(rel));
}

/*
 * Spindles of a queue table that held no event were moved down to number
 * from first_no, in this transaction, which holds the table in
 * ShareRowExclusiveLock (kept_ids.c): a consumer that polled meanwhile may
 * have moved the queue's head past first_no, to where they were numbered
 * before, and would never deliver them.  So every head of the queue, the
 * loaded one and the saved one, goes back to first_no.  Nothing at or past
 * first_no was an event: lowering a head only examines nothing again.
 */
static void
queue_numbers_lowered(Relation facade, int64 first_no)
{
	Oid			relid = RelationGetRelid(facade);

	if (!spindle_relation_is_queue(facade))
		return;
	spindle_queue_state_lower(relid, first_no);
}

/*
 * A spindle table was just created by this transaction (the utility hook
 * calls this after every CREATE TABLE [AS] of one, whoever runs it:
 * create_queue, a restore, a user): if it is a queue table, give it its
 * consumer relation, which depends on it INTERNALly and so goes with
 * every drop of it.  The creating statement holds the table
 * AccessExclusive.
 */
void
spindle_queue_table_created(Oid relid)
{
	Relation	rel = try_relation_open(relid, AccessExclusiveLock);

	if (rel == NULL)
		return;
	if (spindle_is_facade(rel) && spindle_relation_is_queue(rel))
		(void) spindle_consumer_rel_create(rel);
	relation_close(rel, NoLock);
}

/* Events placed in a spindle table: the cache keeps those of queues. */
static void
queue_placed(Relation facade, Oid segment, int64 event_no, int n,
			 ItemPointer ptids, HeapTuple *tuples)
{
	if (spindle_relation_is_queue(facade))
		spindle_cache_put(facade, segment, event_no, n, ptids, tuples);
}

/*
 * Register the queue layer's hooks into the table layer (from _PG_init):
 * msg_ids for the events of queue tables, the event cache, waking
 * consumers at commit, and resetting a truncated queue.
 */
void
spindle_queue_register_hooks(void)
{
	spindle_table_hooks.assign_ids = spindle_queue_assign_ids;
	spindle_table_hooks.kept_no = spindle_queue_kept_no;
	spindle_table_hooks.placed = queue_placed;
	spindle_table_hooks.inserted = spindle_queue_note_insert;
	spindle_table_hooks.truncated = queue_truncated;
	spindle_table_hooks.event_floor = spindle_queue_event_floor;
	spindle_table_hooks.events_numbered = spindle_queue_events_numbered;
	spindle_table_hooks.numbers_lowered = queue_numbers_lowered;
	spindle_table_hooks.ttl_not_before = spindle_queue_ttl_not_before;
	spindle_table_hooks.ttl_held = spindle_queue_ttl_held;
}
