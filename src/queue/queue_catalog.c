/*-------------------------------------------------------------------------
 *
 * queue_catalog.c
 *	  The queue registry: queue names, lookups with privilege checks, the
 *	  registry rows, the msg_id that the access method gives every event of
 *	  a queue table and its floor per queue name, and what a queue's table
 *	  may not have (DELETE triggers and rules).
 *
 * A queue "orders" is the spindle table spindle_q.orders (columns msg_id,
 * enqueued_at, visible_at, payload; queue_api.c creates it as the calling
 * role) plus one row of spindle.queue_catalog (queue_name, relation
 * regclass, max_reads, dead_letter_queue, created_at, max_depth,
 * overflow).  The registry is an
 * extension configuration table, so pg_dump dumps its rows; its relation
 * column is a regclass, which pg_dump writes as the table's name and a
 * restore reads back as the new table's OID (a restore creates the tables
 * before it loads any rows).  Rows are written only here, through SPI as
 * the bootstrap superuser with search_path pg_catalog (users have no rights
 * on the table): by create_queue, and by the object access hook, which
 * deletes the row of a queue table however it is dropped (drop_queue,
 * DROP TABLE, DROP OWNED, DROP EXTENSION ... CASCADE).  A transaction that
 * dropped a queue which another queue still names as its dead-letter queue
 * is refused at commit (drop_queue refuses at once, with the same error),
 * and so is one that left a queue and its dead-letter queue with
 * different owners (ALTER ... OWNER TO of one of them; create_queue
 * refuses at once).  The hook also refuses a DELETE trigger or rule on a
 * queue's table, which consumers would bypass, and records the msg_id
 * floor of a dropped queue table (spindle.queue_msg_id_floor, see "The
 * msg_id floor of a queue name" below).  After COMMIT PREPARED and
 * ROLLBACK PREPARED the utility hook (admin/utility.c) wakes the consumers
 * of the database (spindle_queue_wake_database).
 *
 * msg_id.  Every spindle table in schema spindle_q whose first column is
 * msg_id bigint gets msg_id = its event number (first_no + k: 1, 2, 3, ...
 * for a new queue) in each event, whatever the statement (enqueue, INSERT, COPY, INSERT ... SELECT,
 * UPDATE), set in the executor's slot before the tuple is formed, so
 * RETURNING, AFTER triggers and indexes see it.  This depends on the
 * table's schema and columns, not on its registry row, so a restore gives
 * the restored events new msg_ids (in the order it loads them) whether it
 * loads the registry before or after the queue tables; with the GUC
 * spindle.keep_msg_ids on, a supplied msg_id above every id the queue gave
 * is kept instead (the kept_no hook hands it to the table layer, which
 * places the event there: kept_ids.c).  Whether a relation
 * is a queue table is cached per backend and forgotten at a relcache
 * invalidation of the relation (every change of its pg_class row or
 * columns sends one).  The msg_ids one INSERT statement of enqueue()
 * assigns are also collected (SpindleIdCapture), because enqueue needs
 * only INSERT privilege and so cannot use RETURNING.
 *
 * Locks: none of its own.  The registry is read with the latest snapshot
 * (a REPEATABLE READ transaction finds queues created after its snapshot,
 * as it finds their tables); lookups take no lock on the queue table, so
 * name, existence and privileges are checked before any lock on it.  The
 * floor of a name is read under the table's spindle creation lock (the
 * table layer's) and upserted by the dropping transaction, which holds
 * the table's AccessExclusiveLock; checking a new trigger or rule reads
 * pg_trigger or pg_rewrite in AccessShareLock mode.
 *
 * Invariants: a registry row exists only for an existing table
 * spindle_q.<queue_name> (registered in the transaction that created it,
 * deleted in the one that drops it); a dead_letter_queue names a
 * registered queue other than the row's own, with the same owner, and no
 * chain of dead-letter queues is a cycle (queue_api.c); every msg_id a
 * table of a queue name ever gave lies below the spindles of any later
 * table of that name; a queue's table has no DELETE trigger or rule.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/detoast.h"
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_attribute.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/pg_rewrite.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type_d.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "queue/spindle_queue.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"



int			spindle_max_payload_size = 64 * 1024 * 1024;

/*
 * One registry row as this backend last read it, removed by an
 * invalidation of its table.  queue_names maps the table back to the name,
 * so that an invalidation finds its entry without a walk of the cache:
 * with many queues, every invalidation would otherwise cost a walk of all
 * the queues this backend ever used.
 */
typedef struct QueueCacheEntry
{
	char		name[NAMEDATALEN];	/* hash key */
	bool		valid;
	SpindleQueue q;
} QueueCacheEntry;

typedef struct QueueNameEntry
{
	Oid			relid;			/* hash key */
	char		name[NAMEDATALEN];
} QueueNameEntry;

/* Whether a relation is a queue table (see spindle_relation_is_queue). */
typedef struct IsQueueEntry
{
	Oid			relid;			/* hash key */
	bool		is_queue;
} IsQueueEntry;

static HTAB *queue_cache = NULL;
static HTAB *queue_names = NULL;
static HTAB *is_queue_cache = NULL;
static SpindleIdCapture *capture_top = NULL;

/* this transaction deleted registry rows: check dead-letter queues */
static bool registry_rows_deleted = false;

/* this transaction changed the owner of a table of spindle_q */
static bool queue_owner_changed = false;

/*
 * Queue tables this transaction dropped or truncated: their consumers'
 * shared state (leases, read counts, the head) is reset when the drop or
 * TRUNCATE commits, not when it happens, so that one that rolls back (or a
 * savepoint rolled back to) leaves them as they were.  In
 * TopTransactionContext.
 */
typedef struct DroppedQueue
{
	Oid			relid;
	SubTransactionId subid;
} DroppedQueue;

static List *dropped_queues = NIL;

static void reset_dropped_queues(void);

static object_access_hook_type prev_object_access = NULL;

/* ----------------------------------------------------------------
 * SPI as the bootstrap superuser (as in directory.c)
 *
 * Every name and operator in these statements is schema-qualified and the
 * search_path is pg_catalog only, so nothing of the caller's can stand in
 * for them; SECURITY_RESTRICTED_OPERATION keeps them from changing anything
 * but what they say.
 * ----------------------------------------------------------------
 */

/* Does table spindle.<name> exist (not during DROP EXTENSION's end)? */
static bool
catalog_table_exists(const char *name)
{
	Oid			nsp = get_namespace_oid(SPINDLE_SCHEMA, true);

	return OidIsValid(nsp) && OidIsValid(get_relname_relid(name, nsp));
}

/* Does spindle.queue_catalog exist? */
static bool
registry_exists(void)
{
	return catalog_table_exists("queue_catalog");
}

/* ----------------------------------------------------------------
 * Names
 * ----------------------------------------------------------------
 */

/*
 * ERROR (42602) unless name matches ^[a-z_][a-z0-9_]{0,47}$.  what says
 * which argument it is ("queue name", "dead-letter queue name").
 */
void
spindle_queue_check_name(const char *name, const char *what)
{
	int			len = 0;
	const char *p;
	bool		ok = true;

	if (name == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("%s must not be NULL", what)));
	for (p = name; *p != '\0'; p++, len++)
	{
		char		c = *p;

		if (!((c >= 'a' && c <= 'z') || c == '_' ||
			  (len > 0 && c >= '0' && c <= '9')))
			ok = false;
	}
	if (len == 0 || len > SPINDLE_QUEUE_NAME_MAX)
		ok = false;
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("invalid %s \"%s\"", what, name),
				 errdetail("A queue name has 1 to %d characters: lower-case letters, digits and underscores, not starting with a digit.",
						   SPINDLE_QUEUE_NAME_MAX)));
}

/* The queue name of argument argno (text, maybe NULL), checked. */
char *
spindle_queue_name_arg(FunctionCallInfo fcinfo, int argno)
{
	char	   *name = NULL;

	if (!PG_ARGISNULL(argno))
		name = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	spindle_queue_check_name(name, "queue name");
	return name;
}

/* OID of schema spindle_q. */
Oid
spindle_queue_namespace(bool missing_ok)
{
	Oid			nsp = get_namespace_oid(SPINDLE_QUEUE_SCHEMA, true);

	if (!OidIsValid(nsp) && !missing_ok)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_SCHEMA),
				 errmsg("schema \"%s\" does not exist", SPINDLE_QUEUE_SCHEMA),
				 errhint("Reinstall the spindle extension.")));
	return nsp;
}

/* ----------------------------------------------------------------
 * Lookups
 * ----------------------------------------------------------------
 */

/* Read the registry row of name into *q; false if there is none. */
static bool
read_registry(const char *name, SpindleQueue *q)
{
	SpindleSpi	spi;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	bool		found = false;

	values[0] = CStringGetTextDatum(name);
	spindle_spi_begin(&spi);
	if (spindle_spi_exec("SELECT relation, max_reads, dead_letter_queue,"
						 "       max_depth, overflow"
						 "  FROM spindle.queue_catalog"
						 " WHERE queue_name OPERATOR(pg_catalog.=) $1",
						 1, types, values, NULL, true) > 0)
	{
		HeapTuple	tup = SPI_tuptable->vals[0];
		TupleDesc	td = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		d;

		memset(q, 0, sizeof(SpindleQueue));
		strlcpy(q->name, name, NAMEDATALEN);
		q->relid = DatumGetObjectId(SPI_getbinval(tup, td, 1, &isnull));
		d = SPI_getbinval(tup, td, 2, &isnull);
		q->max_reads = isnull ? 0 : DatumGetInt32(d);
		d = SPI_getbinval(tup, td, 3, &isnull);
		if (!isnull)
			text_to_cstring_buffer(DatumGetTextPP(d), q->dead_letter_queue,
								   NAMEDATALEN);
		d = SPI_getbinval(tup, td, 4, &isnull);
		q->max_depth = isnull ? 0 : DatumGetInt64(d);
		d = SPI_getbinval(tup, td, 5, &isnull);
		if (isnull ||
			!spindle_overflow_parse(TextDatumGetCString(d), &q->overflow))
			q->overflow = SPINDLE_OVERFLOW_REJECT;	/* the CHECK allows no other */
		found = true;
	}
	spindle_spi_end(&spi);
	return found;
}

/*
 * Find queue name (a valid name) in the registry: true with *q filled in;
 * if there is none, false when missing_ok, else ERROR 42P01.  Takes no lock
 * on the queue's table.
 */
bool
spindle_queue_lookup(const char *name, SpindleQueue *q, bool missing_ok)
{
	QueueCacheEntry *e;
	QueueNameEntry *n;
	SpindleQueue found;
	bool		exists;

	/* a queue dropped by a committed transaction must not be found */
	AcceptInvalidationMessages();
	e = hash_search(queue_cache, name, HASH_FIND, NULL);
	if (e != NULL && e->valid)
	{
		*q = e->q;
		return true;
	}

	exists = read_registry(name, &found) &&
		SearchSysCacheExists1(RELOID, ObjectIdGetDatum(found.relid));
	if (!exists)
	{
		/* never cache a queue's absence: another backend may create it */
		hash_search(queue_cache, name, HASH_REMOVE, NULL);
		if (missing_ok)
			return false;
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("queue \"%s\" does not exist", name)));
	}
	/* reading may have processed invalidations: enter only now */
	e = hash_search(queue_cache, name, HASH_ENTER, NULL);
	e->q = found;
	e->valid = true;
	n = hash_search(queue_names, &found.relid, HASH_ENTER, &exists);
	if (exists && strcmp(n->name, name) != 0)
	{
		/* the table had another name: that entry is stale */
		hash_search(queue_cache, n->name, HASH_REMOVE, NULL);
	}
	strlcpy(n->name, name, NAMEDATALEN);
	*q = found;
	return true;
}

/*
 * spindle_queue_has_right, setting *missing (and returning false) instead
 * of failing if the table is gone: a queue found by name with the latest
 * snapshot can be dropped before its table's pg_class row is read.
 */
static bool
has_right(Oid relid, Oid user, AclMode mode, bool *missing)
{
	if (pg_class_aclcheck_ext(relid, user, mode, missing) == ACLCHECK_OK)
		return true;
	if (*missing || mode != ACL_INSERT)
		return false;
	return pg_attribute_aclcheck_ext(relid, SPINDLE_QUEUE_ATT_PAYLOAD, user,
									 ACL_INSERT, missing) == ACLCHECK_OK &&
		pg_attribute_aclcheck_ext(relid, SPINDLE_QUEUE_ATT_VISIBLE_AT, user,
								  ACL_INSERT, missing) == ACLCHECK_OK;
}

/*
 * Does user hold right mode (one bit) on queue table relid?  INSERT may
 * also be held on the two columns an enqueue writes, payload and
 * visible_at, which is all its INSERT needs.
 */
bool
spindle_queue_has_right(Oid relid, Oid user, AclMode mode)
{
	bool		missing = false;

	return has_right(relid, user, mode, &missing);
}

/*
 * ERROR 42501 naming the queue unless the current user has each privilege
 * of modes (ACL_INSERT, ACL_SELECT, ACL_DELETE, ...) on the queue's table.
 * INSERT may also be held on the columns enqueue writes (payload and
 * visible_at) instead of the whole table, as for the INSERT it runs.
 */
void
spindle_queue_check_rights(const SpindleQueue *q, AclMode modes)
{
	Oid			user = GetUserId();
	AclMode		missing = 0;
	AclMode		m;

	for (m = 1; m != 0 && m <= modes; m <<= 1)
	{
		bool		gone = false;

		if ((modes & m) == 0)
			continue;
		if (!has_right(q->relid, user, m, &gone))
			missing |= m;
		if (gone)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_TABLE),
					 errmsg("queue \"%s\" does not exist", q->name),
					 errdetail("It was dropped while it was being opened.")));
	}
	if (missing != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for queue \"%s\"", q->name),
				 errdetail("The queue's table %s.%s needs %s privilege.",
						   SPINDLE_QUEUE_SCHEMA, q->name,
						   (missing & ACL_INSERT) ? "INSERT" :
						   (missing & ACL_SELECT) ? "SELECT" :
						   (missing & ACL_DELETE) ? "DELETE" : "another"),
				 errhint("The queue's owner can GRANT it: GRANT %s ON %s.%s TO %s.",
						 (missing & ACL_INSERT) ? "INSERT" :
						 (missing & ACL_SELECT) ? "SELECT" :
						 (missing & ACL_DELETE) ? "DELETE" : "...",
						 SPINDLE_QUEUE_SCHEMA, q->name,
						 quote_identifier(GetUserNameFromId(user, false)))));
}

/*
 * The queue named by argument argno, for a function needing modes on it:
 * checks, in this order, that the name is valid (42602), that the queue
 * exists (42P01) and the privileges (42501), before any lock on its table.
 */
void
spindle_queue_open_arg(FunctionCallInfo fcinfo, int argno, AclMode modes,
					   SpindleQueue *q)
{
	char	   *name = spindle_queue_name_arg(fcinfo, argno);

	(void) spindle_queue_lookup(name, q, false);
	spindle_queue_check_rights(q, modes);
}

/*
 * ERROR 54000 if a payload (a jsonb datum, maybe toasted or compressed:
 * its full size counts) is larger than spindle.max_payload_size.
 * position is its 1-based place in a batch, or 0.
 */
void
spindle_queue_check_payload_size(const SpindleQueue *q, Datum payload,
								 int position)
{
	Size		size = toast_raw_datum_size(payload);

	if (size > (Size) spindle_max_payload_size)
	{
		if (position > 0)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("payload %d for queue \"%s\" is too large: %zu bytes",
							position, q->name, size),
					 errdetail("spindle.max_payload_size is %d bytes.",
							   spindle_max_payload_size)));
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("payload for queue \"%s\" is too large: %zu bytes",
						q->name, size),
				 errdetail("spindle.max_payload_size is %d bytes.",
						   spindle_max_payload_size)));
	}
}

/* ----------------------------------------------------------------
 * The registry rows
 * ----------------------------------------------------------------
 */

/* Record a queue whose table was just created (create_queue). */
void
spindle_queue_register(const SpindleQueue *q)
{
	SpindleSpi	spi;
	Oid			types[6] = {TEXTOID, REGCLASSOID, INT4OID, TEXTOID, INT8OID,
	TEXTOID};
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};

	values[0] = CStringGetTextDatum(q->name);
	values[1] = ObjectIdGetDatum(q->relid);
	values[2] = Int32GetDatum(q->max_reads);
	if (q->max_reads <= 0)
		nulls[2] = 'n';
	values[3] = CStringGetTextDatum(q->dead_letter_queue);
	if (q->dead_letter_queue[0] == '\0')
		nulls[3] = 'n';
	values[4] = Int64GetDatum(q->max_depth);
	if (q->max_depth <= 0)
		nulls[4] = 'n';
	values[5] = CStringGetTextDatum(spindle_overflow_names[q->overflow]);
	spindle_spi_begin(&spi);
	spindle_spi_exec("INSERT INTO spindle.queue_catalog"
					 " (queue_name, relation, max_reads, dead_letter_queue,"
					 "  max_depth, overflow)"
					 " VALUES ($1, $2, $3, $4, $5, $6)",
					 6, types, values, nulls, false);
	spindle_spi_end(&spi);
	/* forget anything cached about the relation (is it a queue?) */
	CacheInvalidateRelcacheByRelid(q->relid);
}

/*
 * Does a queue other than name itself use it as its dead-letter queue?
 * If so, its name goes to user (NAMEDATALEN bytes).
 */
bool
spindle_queue_dead_letter_user(const char *name, char *user)
{
	SpindleSpi	spi;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	bool		found = false;

	values[0] = CStringGetTextDatum(name);
	spindle_spi_begin(&spi);
	if (spindle_spi_exec("SELECT queue_name FROM spindle.queue_catalog"
						 " WHERE dead_letter_queue OPERATOR(pg_catalog.=) $1"
						 "   AND queue_name OPERATOR(pg_catalog.<>) $1"
						 " ORDER BY queue_name LIMIT 1",
						 1, types, values, NULL, true) > 0)
	{
		char	   *u = SPI_getvalue(SPI_tuptable->vals[0],
									 SPI_tuptable->tupdesc, 1);

		strlcpy(user, u, NAMEDATALEN);
		found = true;
	}
	spindle_spi_end(&spi);
	return found;
}

/*
 * Serialise create_queue (until the end of the transaction), so that of two
 * creations of one name the second sees the first and fails with 42P07.
 */
void
spindle_queue_lock_registry(void)
{
	Oid			nsp = get_namespace_oid(SPINDLE_SCHEMA, false);
	Oid			relid = get_relname_relid("queue_catalog", nsp);

	if (!OidIsValid(relid))
		elog(ERROR, "spindle.queue_catalog does not exist");
	LockRelationOid(relid, ShareRowExclusiveLock);
}

/* The queue whose table is relid, into name (NAMEDATALEN); false if none. */
static bool
queue_of_relation(Oid relid, char *name)
{
	SpindleSpi	spi;
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(relid)};
	bool		found = false;

	if (!registry_exists())
		return false;
	spindle_spi_begin(&spi);
	if (spindle_spi_exec("SELECT queue_name FROM spindle.queue_catalog"
						 " WHERE relation OPERATOR(pg_catalog.=) $1",
						 1, types, values, NULL, true) > 0)
	{
		strlcpy(name, SPI_getvalue(SPI_tuptable->vals[0],
								   SPI_tuptable->tupdesc, 1), NAMEDATALEN);
		found = true;
	}
	spindle_spi_end(&spi);
	return found;
}

/* A relation in schema spindle_q is being dropped: delete its row. */
static void
forget_queue_relation(Oid relid)
{
	SpindleSpi	spi;
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(relid)};

	if (!registry_exists())
		return;
	spindle_spi_begin(&spi);
	if (spindle_spi_exec("DELETE FROM spindle.queue_catalog"
						 " WHERE relation OPERATOR(pg_catalog.=) $1",
						 1, types, values, NULL, false) > 0)
		registry_rows_deleted = true;
	spindle_spi_end(&spi);
}

/*
 * Run query sql on the registry (as spindle_spi_exec does) and return the
 * first row's two columns, a queue and its dead-letter queue, in *user and
 * *dlq; false if it finds none.  For the commit-time checks below.
 */
static bool
first_dead_letter_pair(const char *sql, char **user, char **dlq)
{
	SpindleSpi	spi;
	bool		found;

	spindle_spi_begin(&spi);
	found = spindle_spi_exec(sql, 0, NULL, NULL, NULL, true) > 0;
	if (found)
	{
		MemoryContext old = MemoryContextSwitchTo(spi.outer);

		*user = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
		*dlq = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
		MemoryContextSwitchTo(old);
	}
	spindle_spi_end(&spi);
	return found;
}

/*
 * Before a transaction that deleted registry rows commits: refuse if a
 * queue is left whose dead-letter queue is gone.  (Checked here rather than
 * when the row goes, so that DROP EXTENSION or DROP OWNED may drop a queue
 * and its dead-letter queue in any order.)
 */
static void
check_dead_letter_queues(void)
{
	char	   *user;
	char	   *dlq;

	if (!registry_exists())
		return;
	if (first_dead_letter_pair("SELECT q.queue_name, q.dead_letter_queue"
							   "  FROM spindle.queue_catalog q"
							   " WHERE q.dead_letter_queue IS NOT NULL"
							   "   AND NOT EXISTS (SELECT FROM spindle.queue_catalog d"
							   "   WHERE d.queue_name OPERATOR(pg_catalog.=) q.dead_letter_queue)"
							   " ORDER BY q.queue_name LIMIT 1",
							   &user, &dlq))
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("cannot drop queue \"%s\" because queue \"%s\" uses it as its dead-letter queue",
						dlq, user),
				 errhint("Drop queue \"%s\" first.", user)));
}

/*
 * Before a transaction that changed the owner of a queue's table commits:
 * refuse if a queue and its dead-letter queue are left with different
 * owners (create_queue makes them one; see queue_api.c).  REASSIGN OWNED,
 * or ALTER ... OWNER TO of both tables in one transaction, keeps them so.
 */
static void
check_dead_letter_owners(void)
{
	char	   *user;
	char	   *dlq;

	if (!registry_exists())
		return;
	if (first_dead_letter_pair("SELECT q.queue_name, q.dead_letter_queue"
							   "  FROM spindle.queue_catalog q"
							   "  JOIN spindle.queue_catalog d"
							   "    ON d.queue_name OPERATOR(pg_catalog.=) q.dead_letter_queue"
							   "  JOIN pg_catalog.pg_class qc"
							   "    ON qc.oid OPERATOR(pg_catalog.=) q.relation::pg_catalog.oid"
							   "  JOIN pg_catalog.pg_class dc"
							   "    ON dc.oid OPERATOR(pg_catalog.=) d.relation::pg_catalog.oid"
							   " WHERE qc.relowner OPERATOR(pg_catalog.<>) dc.relowner"
							   " ORDER BY q.queue_name LIMIT 1",
							   &user, &dlq))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("queue \"%s\" and its dead-letter queue \"%s\" must have the same owner",
						user, dlq),
				 errdetail("The move to a dead-letter queue runs the dead-letter queue's triggers as the reader of the queue."),
				 errhint("Change the owner of both tables in one transaction.")));
}

/* Remember relid for a reset of its consumers' state at commit. */
static void
note_reset_at_commit(Oid relid)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	DroppedQueue *d = palloc(sizeof(DroppedQueue));

	d->relid = relid;
	d->subid = GetCurrentSubTransactionId();
	dropped_queues = lappend(dropped_queues, d);
	MemoryContextSwitchTo(old);
}

/*
 * A TRUNCATE of rel (a spindle table) dropped its spindles: if it is a
 * queue table, its consumers' items and leases name events that are gone
 * once it commits (spindle.queues counted them as leased for as long as
 * their visibility timeouts ran, and they held the lease budget).  Called
 * by the access method.
 */
void
spindle_queue_note_truncate(Relation rel)
{
	if (spindle_relation_is_queue(rel))
		note_reset_at_commit(RelationGetRelid(rel));
}

/* Reset the consumers' state of the queue tables this transaction dropped. */
static void
reset_dropped_queues(void)
{
	ListCell   *lc;

	foreach(lc, dropped_queues)
		spindle_queue_state_reset(((DroppedQueue *) lfirst(lc))->relid);
}

/* A rolled-back savepoint undoes its drops; a released one hands them up. */
static void
queue_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;

	foreach(lc, dropped_queues)
	{
		DroppedQueue *d = lfirst(lc);

		if (d->subid != mySubid)
			continue;
		if (event == SUBXACT_EVENT_COMMIT_SUB)
			d->subid = parentSubid;
		else if (event == SUBXACT_EVENT_ABORT_SUB)
			dropped_queues = foreach_delete_current(dropped_queues, lc);
	}
}

static void
queue_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
		case XACT_EVENT_PRE_PREPARE:
			if (registry_rows_deleted)
				check_dead_letter_queues();
			if (queue_owner_changed)
				check_dead_letter_owners();
			registry_rows_deleted = false;
			queue_owner_changed = false;
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_PARALLEL_COMMIT:

			/*
			 * A prepared drop commits in another backend, which knows
			 * nothing of it: reset now (a rollback then costs the leases,
			 * as a restart does).
			 */
			reset_dropped_queues();
			/* FALLTHROUGH */
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			dropped_queues = NIL;
			registry_rows_deleted = false;
			queue_owner_changed = false;
			/* an error may have left captures behind (their frames are gone) */
			capture_top = NULL;
			break;
		default:
			break;
	}
}

/* ----------------------------------------------------------------
 * Queue tables and their msg_ids
 * ----------------------------------------------------------------
 */

/*
 * Is rel (a spindle table) a queue table: in schema spindle_q, with column
 * 1 msg_id bigint?  Cached per backend until a relcache invalidation of
 * the relation.
 */
bool
spindle_relation_is_queue(Relation rel)
{
	Oid			relid = RelationGetRelid(rel);
	IsQueueEntry *e;
	TupleDesc	td;
	Form_pg_attribute att;
	Oid			nsp;
	bool		result;

	e = hash_search(is_queue_cache, &relid, HASH_FIND, NULL);
	if (e != NULL)
		return e->is_queue;

	td = RelationGetDescr(rel);
	nsp = spindle_queue_namespace(true);
	result = false;
	if (OidIsValid(nsp) && rel->rd_rel->relnamespace == nsp &&
		rel->rd_rel->relkind == RELKIND_RELATION && td->natts >= 1)
	{
		att = TupleDescAttr(td, SPINDLE_QUEUE_ATT_MSG_ID - 1);
		result = !att->attisdropped && att->atttypid == INT8OID &&
			strcmp(NameStr(att->attname), "msg_id") == 0;
	}
	/* looking up the schema may have processed invalidations: enter now */
	e = hash_search(is_queue_cache, &relid, HASH_ENTER, NULL);
	e->is_queue = result;
	return result;
}

/*
 * Put msg_id into column 1 of slot, so that the tuple formed from it, and
 * whatever reads the slot afterwards (RETURNING, AFTER triggers, index
 * entries), have it.
 */
static void
set_msg_id(TupleTableSlot *slot, int64 msg_id)
{
	const int	att = SPINDLE_QUEUE_ATT_MSG_ID - 1;

	slot_getallattrs(slot);
	if (TTS_IS_VIRTUAL(slot) ||
		(TTS_IS_BUFFERTUPLE(slot) &&
		 ((BufferHeapTupleTableSlot *) slot)->base.tuple == NULL))
	{
		/* the values are the tuple */
		slot->tts_values[att] = Int64GetDatum(msg_id);
		slot->tts_isnull[att] = false;
	}
	else if ((TTS_IS_HEAPTUPLE(slot) || TTS_IS_BUFFERTUPLE(slot)) &&
			 TTS_SHOULDFREE(slot) && !slot->tts_isnull[att] &&
			 ((HeapTupleTableSlot *) slot)->tuple != NULL &&
			 HeapTupleHeaderGetNatts(((HeapTupleTableSlot *) slot)->tuple->t_data) > att)
	{
		/*
		 * A tuple of the slot's own (a copy made for the insert): column 1,
		 * a bigint that is not null, is the first thing in its data.
		 */
		HeapTupleHeader t = ((HeapTupleTableSlot *) slot)->tuple->t_data;
		int64		v = msg_id;

		memcpy((char *) t + t->t_hoff, &v, sizeof(int64));
		slot->tts_values[att] = Int64GetDatum(msg_id);
	}
	else
	{
		/* a tuple it does not own, or another kind of slot: replace it */
		int			natts = slot->tts_tupleDescriptor->natts;
		Datum	   *values = palloc(sizeof(Datum) * natts);
		bool	   *isnull = palloc(sizeof(bool) * natts);
		MemoryContext old;
		HeapTuple	tuple;

		memcpy(values, slot->tts_values, sizeof(Datum) * natts);
		memcpy(isnull, slot->tts_isnull, sizeof(bool) * natts);
		values[att] = Int64GetDatum(msg_id);
		isnull[att] = false;
		old = MemoryContextSwitchTo(slot->tts_mcxt);
		tuple = heap_form_tuple(slot->tts_tupleDescriptor, values, isnull);
		MemoryContextSwitchTo(old);
		ExecForceStoreHeapTuple(tuple, slot, true);
		slot_getallattrs(slot);
		pfree(values);
		pfree(isnull);
	}
}

/*
 * GUC spindle.keep_msg_ids: an insert into a queue table keeps the msg_ids
 * it supplies, where they lie past every id the table gave (a restore:
 * PGOPTIONS='-c spindle.keep_msg_ids=on' pg_restore ...).  The table
 * layer places them (kept_ids.c) and allows it only to the
 * table's owner or a superuser (42501 otherwise).
 */
bool		spindle_keep_msg_ids = false;

/*
 * The table layer's kept_no hook: the msg_id an insert into a queue table
 * supplied in slot, to be kept, or 0 (keep_msg_ids off, not a queue table,
 * NULL, or not above 0: a new id is given as usual).
 */
int64
spindle_queue_kept_no(Relation facade, TupleTableSlot *slot)
{
	Datum		d;
	bool		isnull;

	if (!spindle_keep_msg_ids || !spindle_relation_is_queue(facade))
		return 0;
	d = slot_getattr(slot, SPINDLE_QUEUE_ATT_MSG_ID, &isnull);
	if (isnull || DatumGetInt64(d) <= 0)
		return 0;
	return DatumGetInt64(d);
}

/*
 * Called for every batch of events stored in a spindle (store_events):
 * events numbered msg_id0 .. msg_id0 + n - 1, from slots[], inserted by
 * command cid.  If facade is a queue table, give each its msg_id and hand
 * them to the enqueue() that is collecting this statement's ids.
 */
void
spindle_queue_assign_ids(Relation facade, TupleTableSlot **slots, int n,
						 int64 msg_id0, CommandId cid)
{
	int			j;
	SpindleIdCapture *cap = capture_top;

	if (!spindle_relation_is_queue(facade))
		return;
	for (j = 0; j < n; j++)
		set_msg_id(slots[j], msg_id0 + j);

	/*
	 * Only the enqueue's own INSERT: a statement a trigger runs on the way
	 * has a command id of its own, even into the same queue.
	 */
	if (cap == NULL || cap->relid != RelationGetRelid(facade) ||
		cap->cid != cid)
	{
		/* not counted by a length limit (queue_limits.c) */
		spindle_queue_limit_plain_insert(RelationGetRelid(facade));
	}
	else
	{
		if (cap->nids + n > cap->maxids)
		{
			int			newmax = Max(cap->maxids * 2, cap->nids + n);

			if (cap->ids == NULL)
				cap->ids = MemoryContextAlloc(cap->cxt, sizeof(int64) * newmax);
			else
				cap->ids = repalloc(cap->ids, sizeof(int64) * newmax);
			cap->maxids = newmax;
		}
		for (j = 0; j < n; j++)
			cap->ids[cap->nids++] = msg_id0 + j;
	}
}

/*
 * Start collecting the msg_ids that command cid stores into relid.  The
 * caller pops it in a PG_FINALLY (cap lives on its stack).
 */
void
spindle_queue_capture_push(SpindleIdCapture *cap, Oid relid, CommandId cid)
{
	cap->relid = relid;
	cap->cid = cid;
	cap->cxt = CurrentMemoryContext;
	cap->ids = NULL;
	cap->nids = 0;
	cap->maxids = 0;
	cap->outer = capture_top;
	capture_top = cap;
}

void
spindle_queue_capture_pop(SpindleIdCapture *cap)
{
	Assert(capture_top == cap);
	capture_top = cap->outer;
}

/* ----------------------------------------------------------------
 * The msg_id floor of a queue name
 *
 * A msg_id is an event number, and every table numbers its events from 1:
 * without more, a queue dropped and created again (by drop_queue or DROP
 * TABLE, then create_queue) would give the ids of the old one again, and a
 * late ack of an old id would act on a new event.  So when a queue table
 * is dropped, the number its next spindle's first event would have had
 * (never handed out, even by a rolled-back creation: slotmap.c) goes to
 * spindle.queue_msg_id_floor under its name, and the events of any later
 * table of that name are numbered from there (the table layer asks through
 * the event_floor hook).  The old ids then all lie below the new table's
 * first event: an ack of one finds nothing and returns false.  TRUNCATE
 * needs nothing: the table's own counter goes on.  The row is
 * transactional with the drop, outlives the queue and is dumped.
 * ----------------------------------------------------------------
 */

/*
 * The table layer's event_floor hook: the lowest event number a new
 * spindle of facade may take, 0 if it is not a queue table or its name has
 * no floor.  Called under the table's creation lock.
 */
int64
spindle_queue_event_floor(Relation facade)
{
	SpindleSpi	spi;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	int64		floor = 0;

	if (!spindle_relation_is_queue(facade) ||
		!catalog_table_exists("queue_msg_id_floor"))
		return 0;
	values[0] = CStringGetTextDatum(RelationGetRelationName(facade));
	spindle_spi_begin(&spi);
	if (spindle_spi_exec("SELECT max(msg_id_floor) FROM spindle.queue_msg_id_floor"
						 " WHERE queue_name OPERATOR(pg_catalog.=) $1",
						 1, types, values, NULL, true) > 0)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0],
									  SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull)
			floor = DatumGetInt64(d);
	}
	spindle_spi_end(&spi);
	return floor;
}

/* raise_floor is writing: the merge trigger leaves the table alone */
static bool raising_floor = false;

/* Raise the floor of queue name to at least floor (GREATEST). */
static void
raise_floor(const char *name, int64 floor)
{
	SpindleSpi	spi;
	Oid			types[2] = {TEXTOID, INT8OID};
	Datum		values[2];

	values[0] = CStringGetTextDatum(name);
	values[1] = Int64GetDatum(floor);
	spindle_spi_begin(&spi);
	raising_floor = true;
	PG_TRY();
	{
		spindle_spi_exec("WITH u AS (UPDATE spindle.queue_msg_id_floor"
						 " SET msg_id_floor = GREATEST(msg_id_floor, $2)"
						 " WHERE queue_name OPERATOR(pg_catalog.=) $1"
						 " RETURNING 1)"
						 " INSERT INTO spindle.queue_msg_id_floor"
						 " (queue_name, msg_id_floor) SELECT $1, $2"
						 " WHERE NOT EXISTS (SELECT FROM u)",
						 2, types, values, NULL, false);
	}
	PG_FINALLY();
	{
		raising_floor = false;
	}
	PG_END_TRY();
	spindle_spi_end(&spi);
}

/*
 * The table layer's events_numbered hook: spindles of facade were just
 * created, and its events will be numbered below next.  For a queue
 * table, raise its name's floor there, so that pg_dump carries it: a
 * restore numbers the restored events above every id the dumped queue
 * gave (see spindle_msg_id_floor_merge).
 */
void
spindle_queue_events_numbered(Relation facade, int64 next)
{
	if (!spindle_relation_is_queue(facade) ||
		strncmp(RelationGetRelationName(facade), "pg_temp_", 8) == 0 ||
		!catalog_table_exists("queue_msg_id_floor"))
		return;
	raise_floor(RelationGetRelationName(facade), next);
}

/*
 * A floor loaded from outside (a restore's COPY, a superuser's INSERT)
 * for queue name: if the queue's table exists and none of its events was
 * numbered yet, number them from the floor (not with keep_msg_ids on: a
 * restore keeping its ids keeps those below the floor too).  A restore
 * makes the table, and its first spindles numbered from 1, before it
 * loads the floors.
 * Waits for the table's ShareRowExclusiveLock (a session holding the
 * table makes the load wait, as a TRUNCATE would).  Returns the number the
 * table's next spindle would start at, or 0 if there is no such table: the
 * floor row must say at least that, or a dump of the restored database
 * would carry a floor below the ids it gives.
 */
static int64
apply_loaded_floor(const char *name, int64 floor)
{
	Oid			nsp = spindle_queue_namespace(true);
	Oid			relid;
	Relation	rel;
	int64		next = 0;

	if (!OidIsValid(nsp) ||
		!OidIsValid(relid = get_relname_relid(name, nsp)))
		return 0;
	LockRelationOid(relid, ShareRowExclusiveLock);
	rel = try_relation_open(relid, NoLock);
	if (rel == NULL)
		return 0;
	if (spindle_is_facade(rel) && spindle_relation_is_queue(rel))
	{
		SpindleNumbers numbers;

		if (!spindle_keep_msg_ids)
			(void) spindle_catalog_renumber_empty(rel, floor);
		spindle_peek_numbers(rel, &numbers);
		next = numbers.event_no;
	}
	relation_close(rel, NoLock);
	return next;
}

/*
 * spindle._msg_id_floor_merge(): BEFORE INSERT trigger on
 * spindle.queue_msg_id_floor.  A row for a name that has one raises it
 * (GREATEST) instead of adding a second, so a restore that loads the
 * floors after its CREATE TABLEs wrote some merges them; a floor loaded
 * from outside also renumbers the named queue if it has no event yet.
 * (With triggers disabled the rows just add up: a name's floor is the
 * greatest of its rows.)
 */
PG_FUNCTION_INFO_V1(spindle_msg_id_floor_merge);
Datum
spindle_msg_id_floor_merge(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	HeapTuple	tup;
	bool		isnull[2];
	Datum		values[2];
	Oid			types[2] = {TEXTOID, INT8OID};
	char	   *name;
	uint64		merged = 0;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_BEFORE(td->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(td->tg_event) ||
		!TRIGGER_FIRED_BY_INSERT(td->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("spindle._msg_id_floor_merge() must be a BEFORE INSERT row trigger")));
	tup = td->tg_trigtuple;
	desc = RelationGetDescr(td->tg_relation);
	values[0] = heap_getattr(tup, 1, desc, &isnull[0]);
	values[1] = heap_getattr(tup, 2, desc, &isnull[1]);
	if (isnull[0] || isnull[1])
		return PointerGetDatum(tup);	/* the constraints say no */
	name = TextDatumGetCString(values[0]);
	if (!raising_floor)
	{
		SpindleSpi	spi;
		int64		next = apply_loaded_floor(name, DatumGetInt64(values[1]));
		int			col = 2;
		bool		replace = false;

		if (next > DatumGetInt64(values[1]))
		{
			values[1] = Int64GetDatum(next);
			tup = heap_modify_tuple_by_cols(tup, desc, 1, &col, &values[1],
											&replace);
		}
		spindle_spi_begin(&spi);
		merged = spindle_spi_exec("UPDATE spindle.queue_msg_id_floor"
								  " SET msg_id_floor = GREATEST(msg_id_floor, $2)"
								  " WHERE queue_name OPERATOR(pg_catalog.=) $1",
								  2, types, values, NULL, false);
		spindle_spi_end(&spi);
	}
	return merged > 0 ? PointerGetDatum(NULL) : PointerGetDatum(tup);
}

/*
 * Queue table relid is being dropped (its AccessExclusiveLock is held):
 * raise its name's floor to the number its next event would have had.
 * VACUUM FULL and CLUSTER drop a transient copy (pg_temp_<oid>), which
 * names no queue.
 */
static void
record_msg_id_floor(Oid relid)
{
	Relation	rel;
	int64		next;
	SpindleNumbers numbers;
	char		name[NAMEDATALEN];

	if (!catalog_table_exists("queue_msg_id_floor"))
		return;
	rel = try_relation_open(relid, NoLock);
	if (rel == NULL)
		return;
	if (!spindle_is_facade(rel) || !spindle_relation_is_queue(rel) ||
		strncmp(RelationGetRelationName(rel), "pg_temp_", 8) == 0)
	{
		relation_close(rel, NoLock);
		return;
	}

	/*
	 * A later table of the name numbers from SPINDLE_EVENT_NOS_RESERVED
	 * past this one's counter: should this drop roll back, the table goes
	 * on below every number such a table gave.
	 */
	spindle_peek_numbers(rel, &numbers);
	next = numbers.event_no > PG_INT64_MAX - SPINDLE_EVENT_NOS_RESERVED ?
		PG_INT64_MAX : numbers.event_no + SPINDLE_EVENT_NOS_RESERVED;
	strlcpy(name, RelationGetRelationName(rel), NAMEDATALEN);
	relation_close(rel, NoLock);
	raise_floor(name, next);
}

/*
 * The table layer's ttl_not_before hook: on a queue table an event's time
 * to live counts from its visible_at, so a delayed event is never purged
 * before it was due for time_to_live (the append time is checked too).
 */
AttrNumber
spindle_queue_ttl_not_before(Relation facade)
{
	TupleDesc	td = RelationGetDescr(facade);
	Form_pg_attribute att;

	if (!spindle_relation_is_queue(facade) ||
		td->natts < SPINDLE_QUEUE_ATT_VISIBLE_AT)
		return 0;
	att = TupleDescAttr(td, SPINDLE_QUEUE_ATT_VISIBLE_AT - 1);
	if (att->attisdropped || att->atttypid != TIMESTAMPTZOID)
		return 0;
	return SPINDLE_QUEUE_ATT_VISIBLE_AT;
}

/* ----------------------------------------------------------------
 * Invalidation and hooks
 * ----------------------------------------------------------------
 */

/* Relcache callback: forget what was cached about relid (or everything). */
static void
queue_relcache_callback(Datum arg, Oid relid)
{
	HASH_SEQ_STATUS status;
	QueueCacheEntry *q;

	if (is_queue_cache != NULL)
	{
		if (OidIsValid(relid))
			hash_search(is_queue_cache, &relid, HASH_REMOVE, NULL);
		else
		{
			IsQueueEntry *e;

			hash_seq_init(&status, is_queue_cache);
			while ((e = hash_seq_search(&status)) != NULL)
				hash_search(is_queue_cache, &e->relid, HASH_REMOVE, NULL);
		}
	}
	if (queue_cache != NULL && OidIsValid(relid))
	{
		QueueNameEntry *n = hash_search(queue_names, &relid, HASH_FIND, NULL);

		if (n != NULL)
		{
			hash_search(queue_cache, n->name, HASH_REMOVE, NULL);
			hash_search(queue_names, &relid, HASH_REMOVE, NULL);
		}
	}
	else if (queue_cache != NULL)
	{
		QueueNameEntry *n;

		hash_seq_init(&status, queue_cache);
		while ((q = hash_seq_search(&status)) != NULL)
			hash_search(queue_cache, q->name, HASH_REMOVE, NULL);
		hash_seq_init(&status, queue_names);
		while ((n = hash_seq_search(&status)) != NULL)
			hash_search(queue_names, &n->relid, HASH_REMOVE, NULL);
	}
}

/*
 * The version of a pg_class (attnum 0) or pg_attribute row that the
 * current command has just written (SnapshotSelf), copied; NULL if none.
 */
static HeapTuple
new_catalog_row(Oid relid, int attnum)
{
	Relation	catalog;
	SysScanDesc scan;
	ScanKeyData key[2];
	HeapTuple	tup;
	HeapTuple	result = NULL;

	if (attnum == 0)
	{
		catalog = table_open(RelationRelationId, AccessShareLock);
		ScanKeyInit(&key[0], Anum_pg_class_oid, BTEqualStrategyNumber,
					F_OIDEQ, ObjectIdGetDatum(relid));
		scan = systable_beginscan(catalog, ClassOidIndexId, true,
								  SnapshotSelf, 1, key);
	}
	else
	{
		catalog = table_open(AttributeRelationId, AccessShareLock);
		ScanKeyInit(&key[0], Anum_pg_attribute_attrelid, BTEqualStrategyNumber,
					F_OIDEQ, ObjectIdGetDatum(relid));
		ScanKeyInit(&key[1], Anum_pg_attribute_attnum, BTEqualStrategyNumber,
					F_INT2EQ, Int16GetDatum((int16) attnum));
		scan = systable_beginscan(catalog, AttributeRelidNumIndexId, true,
								  SnapshotSelf, 2, key);
	}
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
		result = heap_copytuple(tup);
	systable_endscan(scan);
	table_close(catalog, AccessShareLock);
	return result;
}

/*
 * A table of schema spindle_q (or one of its first four columns) was just
 * altered: refuse if that renamed or moved a queue's table, or renamed one
 * of its columns.  A queue's table is spindle_q.<queue name>, and enqueue,
 * the consumers and the msg_id assignment find it and its columns by name.
 * The system cache still shows the row as it was before this command.
 */
static void
check_queue_alter(Oid relid, int subId, Oid oldnsp)
{
	HeapTuple	newtup;
	char		queue[NAMEDATALEN];
	bool		renamed = false;

	newtup = new_catalog_row(relid, subId);
	if (newtup == NULL)
		return;
	if (subId == 0)
	{
		Form_pg_class form = (Form_pg_class) GETSTRUCT(newtup);
		char	   *oldname = get_rel_name(relid);
		HeapTuple	oldtup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));

		renamed = form->relnamespace != oldnsp ||
			(oldname != NULL && strcmp(NameStr(form->relname), oldname) != 0);
		/* a queue and its dead-letter queue keep one owner: see above */
		if (HeapTupleIsValid(oldtup))
		{
			if (((Form_pg_class) GETSTRUCT(oldtup))->relowner != form->relowner)
				queue_owner_changed = true;
			ReleaseSysCache(oldtup);
		}
	}
	else
	{
		Form_pg_attribute form = (Form_pg_attribute) GETSTRUCT(newtup);
		char	   *oldname = get_attname(relid, (AttrNumber) subId, true);

		renamed = oldname != NULL &&
			strcmp(NameStr(form->attname), oldname) != 0;
	}
	heap_freetuple(newtup);
	if (!renamed || !queue_of_relation(relid, queue))
		return;
	if (subId == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot rename or move the table of queue \"%s\"", queue),
				 errdetail("The table of a queue is %s.<queue name>.",
						   SPINDLE_QUEUE_SCHEMA),
				 errhint("Create a new queue and copy the events with INSERT ... SELECT.")));
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("cannot rename column \"%s\" of queue \"%s\"",
					get_attname(relid, (AttrNumber) subId, false), queue)));
}

/*
 * A trigger (classId TriggerRelationId) or rule (RewriteRelationId) was
 * just created or replaced: refuse one that fires on DELETE on a queue's
 * table, and a DO INSTEAD rule for INSERT (it would swallow enqueues and
 * moves to the table as a dead-letter queue).  dequeue, ack, the dead-letter move and time_to_live purge
 * events by position, firing no trigger and applying no rule, so a
 * BEFORE DELETE guard or an audit trigger would silently not see them
 * (the checks of the foreign keys referencing the table, internal
 * triggers, are refused when consuming instead: queue.c).  The catalog
 * row is read as the current command has just written it.
 */
static void
check_queue_delete_action(Oid classId, Oid objectId)
{
	Relation	catalog;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tup;
	Oid			relid = InvalidOid;
	bool		on_delete = false;
	bool		instead_insert = false;
	const char *what = NULL;
	char		queue[NAMEDATALEN];

	catalog = table_open(classId, AccessShareLock);
	ScanKeyInit(&key, classId == TriggerRelationId ? Anum_pg_trigger_oid :
				Anum_pg_rewrite_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(objectId));
	scan = systable_beginscan(catalog, classId == TriggerRelationId ?
							  TriggerOidIndexId : RewriteOidIndexId,
							  true, SnapshotSelf, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup) && classId == TriggerRelationId)
	{
		Form_pg_trigger t = (Form_pg_trigger) GETSTRUCT(tup);

		relid = t->tgrelid;
		on_delete = !t->tgisinternal && TRIGGER_FOR_DELETE(t->tgtype);
		what = "trigger";
	}
	else if (HeapTupleIsValid(tup))
	{
		Form_pg_rewrite r = (Form_pg_rewrite) GETSTRUCT(tup);

		relid = r->ev_class;
		on_delete = r->ev_type == '0' + (int) CMD_DELETE;
		instead_insert = r->ev_type == '0' + (int) CMD_INSERT && r->is_instead;
		what = "rule";
	}
	systable_endscan(scan);
	table_close(catalog, AccessShareLock);
	if ((!on_delete && !instead_insert) ||
		get_rel_namespace(relid) != spindle_queue_namespace(true) ||
		!queue_of_relation(relid, queue))
		return;
	if (instead_insert)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot create an INSTEAD rule for INSERT on the table of queue \"%s\"",
						queue),
				 errdetail("enqueue and the moves of other queues' events to it as their dead-letter queue insert into the table; a rule that rewrites the INSERT would lose them."),
				 errhint("Use a DO ALSO rule or a trigger.")));
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("cannot create a DELETE %s on the table of queue \"%s\"",
					what, queue),
			 errdetail("dequeue, ack, the move to a dead-letter queue and time_to_live purge events without firing DELETE triggers or applying DELETE rules."),
			 errhint("Record consumed events in the consumer's transaction instead: dequeue and read return them.")));
}

/*
 * The object access hook: when a table of schema spindle_q is dropped, by
 * whatever command, its registry row goes too; a queue's table and its
 * columns keep their names.
 */
static void
queue_object_access(ObjectAccessType access, Oid classId, Oid objectId,
					int subId, void *arg)
{
	HeapTuple	tup;
	Oid			nsp;
	char		relkind;

	if (prev_object_access)
		prev_object_access(access, classId, objectId, subId, arg);
	if ((classId == TriggerRelationId || classId == RewriteRelationId) &&
		(access == OAT_POST_CREATE || access == OAT_POST_ALTER))
	{
		check_queue_delete_action(classId, objectId);
		return;
	}
	if (classId != RelationRelationId ||
		(access != OAT_DROP && access != OAT_POST_ALTER))
		return;
	if (access == OAT_DROP && subId != 0)
		return;
	if (access == OAT_POST_ALTER && subId > SPINDLE_QUEUE_ATT_PAYLOAD)
		return;
	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(objectId));
	if (!HeapTupleIsValid(tup))
		return;
	nsp = ((Form_pg_class) GETSTRUCT(tup))->relnamespace;
	relkind = ((Form_pg_class) GETSTRUCT(tup))->relkind;
	ReleaseSysCache(tup);
	if (relkind != RELKIND_RELATION ||
		nsp != spindle_queue_namespace(true))
		return;
	if (access == OAT_DROP)
	{
		record_msg_id_floor(objectId);
		note_reset_at_commit(objectId);
		forget_queue_relation(objectId);
		/* its cached events go now (a rollback costs misses) */
		spindle_cache_reset(objectId);
	}
	else
		check_queue_alter(objectId, subId, nsp);
}

/*
 * Wake the consumers waiting on every queue of this database: after
 * COMMIT PREPARED or ROLLBACK PREPARED, which end a transaction another
 * backend ran, whose enqueues (or deletes rolled back) make events
 * deliverable.  That backend's commit-time wake-up never comes (queue.c
 * wakes at COMMIT only), and nothing recorded which queues it touched.
 * Unlocked
 * reads of the states' database: a state taken or freed meanwhile gets a
 * wake-up for nothing, which costs its waiters one look.
 */
void
spindle_queue_wake_database(void)
{
	int			i;

	if (!spindle_preloaded)
		return;
	for (i = 0; i < spindle_max_queues; i++)
	{
		QueueState *qs = spindle_queue_state_at(i);

		if (qs->dbid == MyDatabaseId && OidIsValid(qs->relid))
			ConditionVariableBroadcast(&qs->cv);
	}
}


/* Called from _PG_init: the GUC, the caches and the hooks. */
void
spindle_queue_catalog_init(void)
{
	HASHCTL		ctl;

	DefineCustomIntVariable("spindle.max_payload_size",
							"Largest payload enqueue and enqueue_batch accept.",
							"The size of the jsonb value, uncompressed.",
							&spindle_max_payload_size,
							64 * 1024 * 1024, 1, INT_MAX,
							PGC_SUSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("spindle.keep_msg_ids",
							 "Inserts into queue tables keep the msg_ids they supply.",
							 "Only ids above every id the queue gave are kept (others get new ids), and only for the table's owner or a superuser, in a session of one (others get an error). For restores: PGOPTIONS='-c spindle.keep_msg_ids=on' pg_restore.",
							 &spindle_keep_msg_ids,
							 false,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);

	ctl.keysize = NAMEDATALEN;
	ctl.entrysize = sizeof(QueueCacheEntry);
	ctl.hcxt = TopMemoryContext;
	queue_cache = hash_create("spindle queues", 64, &ctl,
							  HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(QueueNameEntry);
	ctl.hcxt = TopMemoryContext;
	queue_names = hash_create("spindle queue names", 64, &ctl,
							  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(IsQueueEntry);
	ctl.hcxt = TopMemoryContext;
	is_queue_cache = hash_create("spindle queue tables", 64, &ctl,
								 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	CacheRegisterRelcacheCallback(queue_relcache_callback, (Datum) 0);
	RegisterXactCallback(queue_xact_callback, NULL);
	RegisterSubXactCallback(queue_subxact_callback, NULL);

	prev_object_access = object_access_hook;
	object_access_hook = queue_object_access;
}
