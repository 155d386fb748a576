/*-------------------------------------------------------------------------
 *
 * queue_limits.c
 *	  Length limits of queues: create_queue's max_depth and overflow, as
 *	  enqueue and enqueue_batch apply them.
 *
 * What is counted.  The depth a limit compares with max_depth is the
 * queue's deliverable and delayed events plus the events inserted by
 * transactions still running (an open producer's events take room as soon
 * as they are placed, so two producers cannot both take the last place).
 * Leased events are not counted, and neither are events a running
 * transaction is consuming (claims: a dequeue or ack, the drops of another
 * producer): if that transaction rolls back they count again, and the
 * queue may then exceed max_depth by them.
 *
 * How, in O(1) per enqueue.  Producers of one queue that has a max_depth
 * serialise on a lock of the queue (a heavyweight lock, tag below) from
 * the check to the end of their INSERT; it is released when the call
 * returns, so producers in open transactions do not wait for each other.
 * Shared memory keeps, per queue, an upper bound of the events not purged
 * (leased ones too): the count of the last recount plus every event
 * admitted since.  Purges, rolled-back inserts and leases only lower the
 * true figure, so while bound + n <= max_depth the enqueue is admitted
 * without counting anything.  A second bound leaves out the leases the
 * recount found (live_bound), and holds until the earliest of them can
 * end (until; a recount learns it in the walk it makes anyway): before
 * then a lease ends only when handed back (a failed statement's, or
 * set_visibility), which calls spindle_queue_limit_leases_back, and that
 * forces a recount as a plain insert does.  So however many events are
 * leased, an enqueue below max_depth by the events not leased counts
 * nothing (review f2: it recounted at each call once the leases alone
 * passed max_depth, walking every parked lease).  Otherwise it recounts: the storage layer's
 * counters of each spindle (shared memory, O(spindles)), the queue's
 * parked leases (a walk of the parked runs) and the claims of its
 * consumer state, through spindle_queue_count_hook (views.c computes
 * the same figures for spindle.queues).  A lost bound (server start or
 * crash, a full hash, the queue's drop or TRUNCATE committed) is only a
 * recount: nothing of it is on disk.  So an enqueue below the limit costs a
 * lock and a hash lookup, and one at the limit a recount of
 * O(spindles + parked lease runs), never a scan of the queue: only a
 * spindle whose counter cannot be built right now (a writer or a prepared
 * transaction holds it) has its pages read, so that the count is always
 * made, and exact (views.c, queue_count_for_limit).
 *
 * The policies, at the limit, for a batch of n (n > max_depth is refused
 * with 54000 whatever the policy):
 *  - reject: ERROR 54000 naming the queue; nothing changed.
 *  - drop_oldest: the (depth + n - max_depth) oldest deliverable events are
 *    dequeued in the producer's transaction (a rollback of the producer
 *    brings them back), as the queue's owner, so that a producer with only
 *    INSERT rights can apply the owner's policy.
 *  - dead_letter: the same events are moved to the dead-letter queue by
 *    one INSERT as the owner, in the producer's transaction.
 * Code run as the owner is run as PostgreSQL's maintenance commands run a
 * table owner's code (run_as_owner): SECURITY_RESTRICTED_OPERATION and
 * search_path = pg_catalog, pg_temp, so the owner's triggers and rules on
 * the dead-letter queue must qualify the names they use, and a producer
 * cannot have its own functions or temporary objects run as the owner.
 * If fewer events can be taken (the rest are leased, delayed, claimed by
 * consumers or the producer's own uncommitted ones), the enqueue fails
 * with 54000 and changes nothing.
 *
 * Plain INSERT and COPY into a queue's table are not limited: they take no
 * lock here.  They bump a counter of the queue's bucket (one atomic add per
 * batch of rows stored, from the msg_id hook; an enqueue's own INSERT does
 * not), and a bound is trusted only while its bucket's counter is what it
 * was at the recount, so the next enqueue after them recounts.
 *
 * Locks: the limit lock of the queue (ExclusiveLock on an advisory tag
 * (database, queue table OID, 0, SPINDLE_LIMIT_LOCK_FIELD4), shown in
 * pg_locks as an advisory lock), taken after the queue table's
 * RowExclusiveLock and held to the end of the call, or of the
 * (sub)transaction on error; consumers and DDL never take it.  While it is
 * held, the policies' dequeue and INSERT take their own locks (on the
 * queue's table, already held, and on the dead-letter queue's): a
 * heavyweight lock, so that the deadlock detector sees any cycle through
 * it.  LimitsLock (an LWLock) only around hash operations, never across
 * I/O; the count takes the counters' and the consumer state's LWLocks
 * after it is released.
 *
 * Invariant: for every queue with an entry whose bucket counter still
 * equals the entry's gen, bound >= the queue's events not purged, and,
 * before until, live_bound >= those of them not under a lease.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_class.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "queue/spindle_queue.h"

/* field4 of the advisory lock tag of a queue's limit (core uses 1 and 2) */
#define SPINDLE_LIMIT_LOCK_FIELD4	0x5351

const char *const spindle_overflow_names[] = {
	"reject", "drop_oldest", "dead_letter"
};

spindle_queue_count_fn spindle_queue_count_hook = NULL;

typedef struct LimitKey
{
	Oid			dbid;
	Oid			relid;
} LimitKey;

typedef struct LimitEntry
{
	LimitKey	key;
	int64		bound;			/* >= the queue's events not purged ... */
	int64		live_bound;		/* >= those not under a lease, before until */
	TimestampTz until;			/* when the first lease counted can end */
	uint64		gen;			/* ... while its plain_gen bucket is this */
} LimitEntry;

/*
 * Plain INSERT and COPY into queue tables, counted per bucket of (database,
 * table): a bound is trusted only while its bucket has not moved.
 */
#define LIMIT_GEN_BUCKETS 256

static LWLock *limits_lock = NULL;
static HTAB *limits_hash = NULL;
static pg_atomic_uint64 *plain_gen = NULL;

/* entries: four per queue state, as many queues may have limits */
static long
limits_entries(void)
{
	return (long) spindle_max_queues * 4;
}

/* The policy called name: false if there is none. */
bool
spindle_overflow_parse(const char *name, SpindleOverflow *o)
{
	int			i;

	for (i = 0; i < lengthof(spindle_overflow_names); i++)
		if (strcmp(name, spindle_overflow_names[i]) == 0)
		{
			*o = (SpindleOverflow) i;
			return true;
		}
	return false;
}

Size
spindle_limits_shmem_size(void)
{
	return add_size(hash_estimate_size(limits_entries(), sizeof(LimitEntry)),
					sizeof(pg_atomic_uint64) * LIMIT_GEN_BUCKETS);
}

/* Called from the shmem_request_hook. */
void
spindle_limits_shmem_request(void)
{
	RequestAddinShmemSpace(spindle_limits_shmem_size());
	RequestNamedLWLockTranche("spindle_limits", 1);
}

/* Called from the shmem_startup_hook, with AddinShmemInitLock held. */
void
spindle_limits_shmem_startup(void)
{
	HASHCTL		ctl;
	bool		found;
	int			i;

	ctl.keysize = sizeof(LimitKey);
	ctl.entrysize = sizeof(LimitEntry);
	limits_hash = ShmemInitHash("spindle limits", limits_entries(),
								limits_entries(), &ctl,
								HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
	limits_lock = &(GetNamedLWLockTranche("spindle_limits"))[0].lock;
	plain_gen = ShmemInitStruct("spindle limit generations",
								sizeof(pg_atomic_uint64) * LIMIT_GEN_BUCKETS,
								&found);
	if (!found)
		for (i = 0; i < LIMIT_GEN_BUCKETS; i++)
			pg_atomic_init_u64(&plain_gen[i], 0);
}

/* The plain-insert counter of queue table relid of this database. */
static pg_atomic_uint64 *
gen_of(Oid relid)
{
	return &plain_gen[hash_combine(murmurhash32(MyDatabaseId),
								   murmurhash32(relid)) % LIMIT_GEN_BUCKETS];
}

/*
 * Events were stored into queue table relid by a statement other than an
 * enqueue's own INSERT (plain INSERT, COPY, UPDATE, a trigger's INSERT):
 * the bound of the queue's limit no longer covers them (one atomic add).
 */
void
spindle_queue_limit_plain_insert(Oid relid)
{
	if (plain_gen != NULL)
		pg_atomic_fetch_add_u64(gen_of(relid), 1);
}

/*
 * Leases of queue table relid ended before their time (handed back by a
 * failed statement, or moved to an earlier end by set_visibility): the
 * live_bound of its limit no longer holds, and the next enqueue counts
 * (one atomic add).  Call once the change is seen by a count.
 */
void
spindle_queue_limit_leases_back(Oid relid)
{
	if (plain_gen != NULL)
		pg_atomic_fetch_add_u64(gen_of(relid), 1);
}

/*
 * Admit n events into queue relid by its bounds alone: true, and both
 * bounds raised by n, if they are kept for generation gen_now and the one
 * that holds now (live_bound before until, bound after) + n fits
 * max_depth.  The caller holds the queue's limit lock: only its holder
 * writes an entry's fields, so LimitsLock is taken shared (an exclusive
 * holder, who adds or removes entries, waits for it).
 */
static bool
bound_admit(Oid relid, int n, int64 max_depth, uint64 gen_now)
{
	LimitKey	key = {MyDatabaseId, relid};
	LimitEntry *e;
	bool		admitted = false;

	LWLockAcquire(limits_lock, LW_SHARED);
	e = hash_search(limits_hash, &key, HASH_FIND, NULL);
	if (e != NULL && e->gen == gen_now &&
		(e->bound + n <= max_depth ||
		 (e->live_bound + n <= max_depth &&
		  GetCurrentTimestamp() < e->until)))
	{
		e->bound += n;
		e->live_bound += n;
		admitted = true;
	}
	LWLockRelease(limits_lock);
	return admitted;
}

/*
 * Keep the bounds of queue relid for generation gen (not kept when the
 * hash is full): bound, and live_bound until until.  The caller holds the
 * queue's limit lock.
 */
static void
bound_set(Oid relid, int64 bound, int64 live_bound, TimestampTz until,
		  uint64 gen)
{
	LimitKey	key = {MyDatabaseId, relid};
	LimitEntry *e;

	LWLockAcquire(limits_lock, LW_EXCLUSIVE);
	e = hash_search(limits_hash, &key, HASH_ENTER_NULL, NULL);
	if (e != NULL)
	{
		e->bound = bound;
		e->live_bound = live_bound;
		e->until = until;
		e->gen = gen;
	}
	LWLockRelease(limits_lock);
}

/* Queue relid of this database is gone or truncated: forget its bound. */
void
spindle_queue_limit_forget(Oid relid)
{
	LimitKey	key = {MyDatabaseId, relid};

	if (limits_hash == NULL)
		return;
	LWLockAcquire(limits_lock, LW_EXCLUSIVE);
	(void) hash_search(limits_hash, &key, HASH_REMOVE, NULL);
	LWLockRelease(limits_lock);
}

/* Database dbid was dropped: forget the bounds of its queues. */
void
spindle_queue_limits_forget_database(Oid dbid)
{
	HASH_SEQ_STATUS seq;
	LimitEntry *e;

	if (limits_hash == NULL)
		return;
	LWLockAcquire(limits_lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, limits_hash);
	while ((e = hash_seq_search(&seq)) != NULL)
		if (e->key.dbid == dbid)
			(void) hash_search(limits_hash, &e->key, HASH_REMOVE, NULL);
	LWLockRelease(limits_lock);
}

static void
limit_locktag(LOCKTAG *tag, Oid relid)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, relid, 0,
						 SPINDLE_LIMIT_LOCK_FIELD4);
}

/*
 * ERROR 54000: queue q, at depth events, has no room for n more.  why says
 * why the overflow policy could not make it (NULL: reject).
 */
static void
report_full(const SpindleQueue *q, int64 depth, int n, const char *why)
{
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("queue \"%s\" is full", q->name),
			 why == NULL ?
			 errdetail("It holds " INT64_FORMAT " deliverable or delayed events, its max_depth is " INT64_FORMAT ", and the call enqueues %d.",
					   depth, q->max_depth, n) :
			 errdetail("It holds " INT64_FORMAT " deliverable or delayed events, its max_depth is " INT64_FORMAT ", the call enqueues %d, and %s.",
					   depth, q->max_depth, n, why),
			 q->overflow == SPINDLE_OVERFLOW_REJECT ?
			 errhint("Consume events of queue \"%s\" first, or create it with a larger max_depth or overflow 'drop_oldest'.",
					 q->name) :
			 errhint("Consume events of queue \"%s\" first: its overflow policy takes only deliverable events, not delayed or leased ones, those being consumed, or those of the producer's own transaction.",
					 q->name)));
}

/*
 * Run make_room's statement sql (args: queue name, need) as owner, as
 * PostgreSQL's maintenance commands run code as a table's owner:
 * SECURITY_RESTRICTED_OPERATION, and a search_path of pg_catalog, pg_temp
 * in a GUC nest level of its own, so that neither a function a producer
 * created under a name the owner's triggers or rules call unqualified nor
 * a temporary object of the producer runs with the owner's rights.  The
 * user, security context and GUCs are restored on the way out, on error
 * too.  Returns SPI_processed.
 */
static int64
run_as_owner(const SpindleQueue *q, Oid owner, const char *sql,
			 Datum *values)
{
	Oid			types[2] = {TEXTOID, INT4OID};
	Oid			save_user;
	int			save_sec;
	int			save_nestlevel;
	int			rc;
	int64		taken;

	GetUserIdAndSecContext(&save_user, &save_sec);
	SetUserIdAndSecContext(owner, save_sec | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	save_nestlevel = NewGUCNestLevel();
	PG_TRY();
	{
		(void) set_config_option("search_path", "pg_catalog, pg_temp",
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
								 true, 0, false);
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		rc = SPI_execute_with_args(sql, 2, types, values, NULL, false, 0);
		if (rc != (q->overflow == SPINDLE_OVERFLOW_DEAD_LETTER ?
				   SPI_OK_INSERT : SPI_OK_SELECT))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("could not make room in queue \"%s\": %s", q->name,
							SPI_result_code_string(rc)),
					 errhint("Drop the INSTEAD rule of the dead-letter queue's table.")));
		taken = (int64) SPI_processed;
		SPI_finish();
	}
	PG_CATCH();
	{
		/* the (sub)transaction's abort ends SPI; put the user back now */
		AtEOXact_GUC(false, save_nestlevel);
		SetUserIdAndSecContext(save_user, save_sec);
		PG_RE_THROW();
	}
	PG_END_TRY();
	AtEOXact_GUC(true, save_nestlevel);
	SetUserIdAndSecContext(save_user, save_sec);
	return taken;
}

/*
 * Take the need oldest deliverable events of q off the queue in the
 * current transaction, as the queue's owner (run_as_owner): dequeued
 * (drop_oldest), or moved to the dead-letter queue (dead_letter).  Returns
 * how many it took.  Runs with the limit lock held; the dequeue takes its
 * own locks.  Every name in the statements is schema-qualified; the
 * owner's triggers and rules on the dead-letter queue run with the
 * restricted search_path.
 */
static int64
make_room(const SpindleQueue *q, int64 need)
{
	Oid			owner;
	HeapTuple	tup;
	char	   *sql;
	Datum		values[2];
	int64		taken;

	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(q->relid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for relation %u", q->relid);
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);

	if (q->overflow == SPINDLE_OVERFLOW_DEAD_LETTER)
		sql = psprintf("INSERT INTO %s.%s (payload)"
					   " SELECT m.payload FROM spindle.dequeue($1, $2) m"
					   " ORDER BY m.msg_id",
					   quote_identifier(SPINDLE_QUEUE_SCHEMA),
					   quote_identifier(q->dead_letter_queue));
	else
		sql = pstrdup("SELECT m.msg_id FROM spindle.dequeue($1, $2) m");
	values[0] = CStringGetTextDatum(q->name);
	values[1] = Int32GetDatum((int32) need);

	taken = run_as_owner(q, owner, sql, values);

	if (q->overflow == SPINDLE_OVERFLOW_DEAD_LETTER && taken > 0)
	{
		QueueState *qs = spindle_queue_state(q->relid);

		/* spindle.queues.dead_lettered_total, as for max_reads moves */
		if (qs != NULL && qs->relid == q->relid && qs->dbid == MyDatabaseId)
			pg_atomic_fetch_add_u64(&qs->dead_lettered, (uint64) taken);
	}
	return taken;
}

/*
 * Before n events are enqueued into q (which has a max_depth): wait for
 * the queue's limit lock, and admit them if the queue has room, after
 * applying its overflow policy if it is full; ERROR 54000 if there is no
 * room and the policy cannot make it.  The caller inserts the events and
 * then calls spindle_queue_limit_release; an error releases the lock with
 * the (sub)transaction.
 */
void
spindle_queue_limit_admit(const SpindleQueue *q, int n)
{
	LOCKTAG		tag;
	uint64		gen_now;
	int64		counted;
	int64		unpurged;
	int64		leased;
	TimestampTz leases_until;

	if (n > q->max_depth)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a batch of %d events does not fit in queue \"%s\"",
						n, q->name),
				 errdetail("Its max_depth is " INT64_FORMAT ".", q->max_depth),
				 errhint("Enqueue at most max_depth events per call.")));

	/* the INSERT's lock first, then ours: nobody takes them the other way */
	LockRelationOid(q->relid, RowExclusiveLock);
	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(q->relid)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("queue \"%s\" was dropped while enqueue waited for it",
						q->name),
				 errhint("Enqueue again: a queue created again under the name takes the events.")));
	limit_locktag(&tag, q->relid);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);

	/* read before counting: a plain insert meanwhile forces a recount */
	gen_now = pg_atomic_read_u64(gen_of(q->relid));
	if (bound_admit(q->relid, n, q->max_depth, gen_now))
		return;
	/* the admin layer's count never fails (views.c) */
	if (spindle_queue_count_hook == NULL ||
		!spindle_queue_count_hook(q->relid, &counted, &unpurged, &leased,
								  &leases_until))
		elog(ERROR, "could not count the events of queue \"%s\"", q->name);
	if (counted + n > q->max_depth)
	{
		int64		need = counted + n - q->max_depth;

		if (q->overflow == SPINDLE_OVERFLOW_REJECT)
			report_full(q, counted, n, NULL);
		if (make_room(q, need) < need)
			report_full(q, counted, n,
						q->overflow == SPINDLE_OVERFLOW_DROP_OLDEST ?
						"too few deliverable events could be dropped" :
						"too few deliverable events could be moved to the dead-letter queue");
	}
	bound_set(q->relid, unpurged + n, unpurged - leased + n, leases_until,
			  gen_now);
}

/* The events admitted by spindle_queue_limit_admit are placed. */
void
spindle_queue_limit_release(const SpindleQueue *q)
{
	LOCKTAG		tag;

	limit_locktag(&tag, q->relid);
	LockRelease(&tag, ExclusiveLock, false);
}
