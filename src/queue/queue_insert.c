/*-------------------------------------------------------------------------
 *
 * queue_insert.c
 *	  Direct placement of enqueued events: enqueue and enqueue_batch hand
 *	  their rows to the table access method in one multi-insert, without
 *	  the executor, when an INSERT into the queue's table would do nothing
 *	  but place them.
 *
 * An INSERT run through SPI (queue_api.c) starts an executor, evaluates
 * unnest() and calls the access method once per row: a batch of 100
 * events costs 100 slot reservations, 100 heap insert records and 100 slot
 * map records.  Handed over at once, as COPY does, it costs one
 * reservation, one heap multi-insert record and one map record per page
 * (place_tuples in facade_am.c does that for every multi-insert).
 *
 * The executor's other work for an INSERT must then be nothing.  So this
 * path is taken only when the queue's table has no triggers (foreign keys
 * are triggers), no rules, no row-level security enabled, no index, no
 * CHECK constraint, no generated column, is not a partition, and has
 * exactly the four columns create_queue gave it (and the hidden ones
 * every spindle table has, layout.c), with the types it gave
 * them, a default of msg_id (which the access method overwrites) that
 * the planner folds into a constant (evaluating it raises what the
 * INSERT's planning would), and a default of enqueued_at that is a
 * constant or now().  Anything a user added to the table
 * sends enqueue back through SPI, where all of it applies as to any
 * INSERT.  The checks read the relcache entry under the table's lock: a
 * concurrent ALTER that adds a trigger waits for our lock, and the next
 * enqueue sees it.
 *
 * What the executor would check besides is checked here the way it does:
 * a read-only transaction (hot standby included) refuses with 25006, and
 * parallel mode with 25000.  Privileges were checked by the caller
 * (spindle_queue_check_rights: INSERT on the table, or on payload and
 * visible_at, which is all the SPI INSERT needs too) before the lock; they
 * are checked again under it, with USAGE on schema spindle_q that the
 * INSERT's name needs, as the executor checks them once it holds the
 * table, and a security module's ExecutorCheckPerms_hook sends enqueue
 * through SPI: a REVOKE committed while enqueue waited refuses it.
 *
 * Locks: RowExclusiveLock on the queue's table, as an INSERT takes, to the
 * end of the transaction; the access method takes the rest.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_type_d.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "nodes/primnodes.h"
#include "optimizer/optimizer.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/timestamp.h"

#include "queue/spindle_queue.h"

/* the most events handed to the access method in one call */
#define DIRECT_CHUNK 1000

/*
 * Is adbin, the default of a column of type typid, a constant of that
 * type (*value, *is_now false) or a call of now() (*is_now true)?
 */
static bool
simple_default(const char *adbin, Oid typid, Datum *value, bool *is_now)
{
	Node	   *expr = stringToNode(adbin);

	if (IsA(expr, Const))
	{
		Const	   *c = (Const *) expr;

		if (c->consttype != typid || c->constisnull)
			return false;
		*value = c->constvalue;
		*is_now = false;
		return true;
	}
	if (IsA(expr, FuncExpr))
	{
		FuncExpr   *f = (FuncExpr *) expr;

		*is_now = true;
		return f->funcid == F_NOW && f->args == NIL &&
			typid == TIMESTAMPTZOID;
	}
	return false;
}

/*
 * Would the INSERT let the current user place events in rel, now that the
 * lock on rel is held?  The caller checked before it waited for the lock
 * (spindle_queue_check_rights), but the executor checks again once the
 * table is locked, so a REVOKE committed meanwhile refuses it; and the
 * INSERT names the table as spindle_q.<name>, which needs USAGE on the
 * schema.  A security module's ExecutorCheckPerms_hook (sepgsql, pgaudit)
 * must see the INSERT too.  When any of this says no, SPI's INSERT raises
 * the executor's error.
 */
static bool
insert_rights_ok(Relation rel)
{
	Oid			user = GetUserId();

	if (ExecutorCheckPerms_hook != NULL)
		return false;
	if (pg_namespace_aclcheck(RelationGetNamespace(rel), user,
							  ACL_USAGE) != ACLCHECK_OK)
		return false;
	return spindle_queue_has_right(RelationGetRelid(rel), user, ACL_INSERT);
}

/*
 * Can events go into rel, the table of a queue, without the executor
 * (see the header)?  If so, sets the value of enqueued_at for this
 * transaction.  The caller holds a lock on rel.
 */
static bool
direct_insert_ok(Relation rel, Datum *enqueued_at)
{
	TupleDesc	td = RelationGetDescr(rel);
	TupleConstr *constr = td->constr;
	bool		have[2] = {false, false};
	int			i;

	/*
	 * relhastriggers, relhasrules and relhasindex stay set after the last
	 * trigger, rule or index is dropped (until VACUUM): what the relcache
	 * built from the catalogs says.
	 */
	if (rel->rd_tableam != spindle_facade_routine() ||
		rel->rd_rel->relkind != RELKIND_RELATION ||
		rel->rd_rel->relispartition ||
		rel->trigdesc != NULL || rel->rd_rules != NULL ||
		rel->rd_rel->relrowsecurity ||
		td->natts != 4 + SPINDLE_HIDDEN_COLUMNS || constr == NULL ||
		constr->num_check > 0 || constr->has_generated_stored ||
		!spindle_relation_is_queue(rel))
		return false;
	if (rel->rd_rel->relhasindex)
	{
		List	   *indexes = RelationGetIndexList(rel);

		if (indexes != NIL)
		{
			list_free(indexes);
			return false;
		}
	}
	for (i = 0; i < 4; i++)
	{
		Form_pg_attribute att = TupleDescAttr(td, i);
		static const Oid types[4] = {INT8OID, TIMESTAMPTZOID,
		TIMESTAMPTZOID, JSONBOID};

		if (att->attisdropped || att->atttypid != types[i] ||
			att->attgenerated != '\0')
			return false;
	}

	/* the defaults the rows take: msg_id's and enqueued_at's */
	for (i = 0; i < constr->num_defval; i++)
	{
		AttrDefault *d = &constr->defval[i];
		Datum		value;
		bool		is_now;

		if (d->adnum == SPINDLE_QUEUE_ATT_MSG_ID)
		{
			Node	   *expr;

			/*
			 * Overwritten, but the INSERT evaluates it first: only a
			 * default the planner folds into a constant that is not null
			 * (create_queue's int8(0)) is evaluated for nothing.  Folding
			 * raises what the INSERT's planning would (1 / 0); anything
			 * left to evaluate per row (nextval, a stable function that
			 * may fail) or a null (a not-null violation) goes through SPI.
			 */
			expr = eval_const_expressions(NULL, stringToNode(d->adbin));
			if (!IsA(expr, Const) || ((Const *) expr)->constisnull)
				return false;
			have[0] = true;
			continue;
		}
		if (d->adnum != SPINDLE_QUEUE_ATT_ENQUEUED_AT)
			continue;
		if (!simple_default(d->adbin,
							TupleDescAttr(td, d->adnum - 1)->atttypid,
							&value, &is_now))
			return false;
		*enqueued_at = is_now ?
			TimestampTzGetDatum(GetCurrentTransactionStartTimestamp()) :
			value;
		have[1] = true;
	}
	return have[0] && have[1];
}

/*
 * Place n events with payloads[] (jsonb datums) into queue q, visible after
 * now() + delay, without the executor.  Returns false, having done nothing
 * but lock the table, if the table needs the executor (see the header);
 * otherwise true, with the msg_ids of the events, in order, in *ids
 * (allocated in the caller's memory context).  Returns false with *gone
 * set if q's table was dropped since the caller looked q up (while we
 * waited for its lock, say): the name may mean another table now.  The
 * caller has checked the privileges and the arguments.
 */
bool
spindle_queue_insert_direct(const SpindleQueue *q, Datum *payloads, int n,
							Datum delay, int64 **ids, bool *gone)
{
	Relation	rel;
	Datum		enqueued_at = (Datum) 0;
	Datum		visible_at;
	TupleDesc	desc;
	TupleTableSlot **slots;
	SpindleIdCapture cap;
	CommandId	cid;
	int			nslots = Min(n, DIRECT_CHUNK);
	int			done;
	int			i;

	*gone = false;
	rel = try_table_open(q->relid, RowExclusiveLock);
	if (rel == NULL)
	{
		*gone = true;			/* the caller looks the name up again */
		return false;
	}
	if (!insert_rights_ok(rel) || !direct_insert_ok(rel, &enqueued_at))
	{
		table_close(rel, NoLock);
		return false;
	}

	/* what ExecCheckXactReadOnly checks of an INSERT */
	PreventCommandIfReadOnly("INSERT");
	PreventCommandIfParallelMode("INSERT");

	visible_at = DirectFunctionCall2(timestamptz_pl_interval,
									 TimestampTzGetDatum(GetCurrentTransactionStartTimestamp()),
									 delay);
	/* an unpinned copy of the descriptor: pinning it per slot costs more */
	desc = CreateTupleDescCopy(RelationGetDescr(rel));
	slots = palloc(sizeof(TupleTableSlot *) * nslots);
	for (i = 0; i < nslots; i++)
		slots[i] = MakeSingleTupleTableSlot(desc, &TTSOpsVirtual);

	/* a command id of its own, as the SPI INSERT would have */
	CommandCounterIncrement();
	cid = GetCurrentCommandId(true);
	spindle_queue_capture_push(&cap, q->relid, cid);
	PG_TRY();
	{
		for (done = 0; done < n; done += nslots)
		{
			int			chunk = Min(nslots, n - done);

			for (i = 0; i < chunk; i++)
			{
				TupleTableSlot *slot = slots[i];

				ExecClearTuple(slot);
				slot->tts_values[SPINDLE_QUEUE_ATT_MSG_ID - 1] = Int64GetDatum(0);
				slot->tts_values[SPINDLE_QUEUE_ATT_ENQUEUED_AT - 1] = enqueued_at;
				slot->tts_values[SPINDLE_QUEUE_ATT_VISIBLE_AT - 1] = visible_at;
				slot->tts_values[SPINDLE_QUEUE_ATT_PAYLOAD - 1] = payloads[done + i];
				memset(slot->tts_isnull, 0, sizeof(bool) * 4);
				/* the hidden columns: spindle_form_event fills them */
				memset(slot->tts_values + 4, 0,
					   sizeof(Datum) * SPINDLE_HIDDEN_COLUMNS);
				memset(slot->tts_isnull + 4, true,
					   sizeof(bool) * SPINDLE_HIDDEN_COLUMNS);
				ExecStoreVirtualTuple(slot);
			}
			if (chunk == 1)
				table_tuple_insert(rel, slots[0], cid, 0, NULL);
			else
				table_multi_insert(rel, slots, chunk, cid, 0, NULL);
		}
	}
	PG_FINALLY();
	{
		spindle_queue_capture_pop(&cap);
	}
	PG_END_TRY();
	if (cap.nids != n)
		elog(ERROR, "enqueue into queue \"%s\" placed %d events but numbered %d",
			 q->name, n, cap.nids);

	for (i = 0; i < nslots; i++)
		ExecDropSingleTupleTableSlot(slots[i]);
	pfree(slots);
	FreeTupleDesc(desc);
	table_close(rel, NoLock);
	*ids = cap.ids;
	return true;
}
