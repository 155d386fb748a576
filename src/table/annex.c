/*-------------------------------------------------------------------------
 *
 * annex.c
 *	  Annexes of a spindle table (docs/design.md, "Compaction of sparse
 *	  spindles", section 2): placing a copy of an event in an annex, and
 *	  the test-only SQL functions that stand in for the relocator until it
 *	  exists: spindle._create_annex(rel, generation) and
 *	  spindle._annex_insert(rel, generation, row).
 *
 * An annex is a spindle of kind 'annex' (spindle.spindle_catalog), made
 * like a ready spindle by spindle_create_annex (spindle_create.c), with
 * its own range of virtual slots and slot counter and no event numbers.
 * The directory keeps annexes apart (directory.c), so producers never
 * place an event in one and no consumer's head walks one; readers (scans,
 * fetches, ANALYZE, drops, verify, the views' sizes) see their rows.  A
 * copy goes in as any insert does: a slot of the annex's counter, heap's
 * insert into the annex's relation (TOAST by heap's toaster), its slot
 * map entry, then one entry per index of the table.  Nothing of the
 * layers above runs for it: no id is assigned (a queue table's copy keeps
 * the msg_id it was given), no event is cached, no consumer is woken.
 *
 * Locks: the table RowExclusiveLock, as DML (an index build's ShareLock
 * keeps it out), and the annex written RowExclusiveLock, both to the end
 * of the transaction, so that the annex cannot be dropped between the
 * reservation of its slot and the commit.  An annex is made by the
 * spindle creator (maintenance.c) in a transaction of its own, which takes
 * the table's creation lock (spindle_create.c); the caller takes it only
 * when the creator cannot do the work (spindle_obtain_annex).  Superusers
 * only.
 *
 * Invariants: a copy takes a slot of the annex's own counter, never one
 * of an event spindle; an annex is never in SpindleDirectory.spindles.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/inval.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/typcache.h"

#include "table/spindle_table.h"

PG_FUNCTION_INFO_V1(spindle_create_annex_sql);
PG_FUNCTION_INFO_V1(spindle_annex_insert_sql);

/*
 * The checks the test functions spindle.fname (_create_annex,
 * _annex_insert, _relocate) make; returns the table, RowExclusiveLock.
 */
Relation
spindle_annex_open_for_test(Oid relid, int generation, const char *fname)
{
	Relation	facade;

	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("only superusers may call spindle.%s", fname)));
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot call spindle.%s during recovery", fname)));
	if (generation < 1 || generation > SPINDLE_ANNEX_GENERATIONS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("annex generation %d is out of range", generation),
				 errhint("Generations run from 1 to %d.",
						 SPINDLE_ANNEX_GENERATIONS)));
	PreventCommandIfReadOnly(psprintf("spindle.%s()", fname));
	facade = try_table_open(relid, RowExclusiveLock);
	if (facade == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	if (!spindle_is_facade(facade))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("relation \"%s\" is not a spindle table",
						RelationGetRelationName(facade))));
	return facade;
}

/* The number of the newest annex of the generation, or 0. */
static int64
newest_annex(Relation facade, int generation)
{
	SpindleDirectory *dir = spindle_directory_acquire(facade);
	int64		result = 0;

	for (int j = 0; j < dir->nannexes; j++)
		if (dir->annexes[j].generation == generation)
			result = dir->annexes[j].spindle_no;
	spindle_directory_release(dir);
	return result;
}

/*
 * Make a new annex of the generation for the facade and return its
 * number.  As a ready spindle is made (obtain_spindles, facade_am.c): by
 * the spindle creator in a committed transaction of its own, or in the
 * current transaction when nobody else can see the table yet, when this
 * transaction holds a lock the creator would wait for, or when the
 * creator could not make it.  The caller holds at least AccessShareLock
 * on the facade.
 */
int64
spindle_obtain_annex(Relation facade, int generation)
{
	int64		before;
	int64		made;
	bool		found;

	/* a table of one unbounded spindle takes none: let it say so here */
	if ((spindle_rel_capacity_option(RelationGetRelid(facade), &found) != 0 ||
		 (!found && spindle_events_per_spindle != 0)) &&
		!spindle_created_here(facade) &&
		!CheckRelationLockedByMe(facade, AccessExclusiveLock, false) &&
		!spindle_creation_locked_by_me(RelationGetRelid(facade)))
	{
		before = newest_annex(facade, generation);
		if (spindle_request_annex(facade, generation))
		{
			AcceptInvalidationMessages();
			made = newest_annex(facade, generation);
			if (made > before)
				return made;
		}
	}
	made = spindle_create_annex(facade, generation);
	AcceptInvalidationMessages();
	return made;
}

/*
 * spindle._create_annex(rel regclass, generation int) RETURNS bigint: make
 * an annex of that generation for the table (spindle_obtain_annex);
 * returns its spindle number.
 */
Datum
spindle_create_annex_sql(PG_FUNCTION_ARGS)
{
	Relation	facade = spindle_annex_open_for_test(PG_GETARG_OID(0), PG_GETARG_INT32(1),
										"_create_annex");
	int64		spindle_no = spindle_obtain_annex(facade, PG_GETARG_INT32(1));

	table_close(facade, NoLock);
	PG_RETURN_INT64(spindle_no);
}

/*
 * Reserve one slot in the newest annex of the generation that has room:
 * returns the index of that annex for spindle_dir_entry (>= nspindles),
 * its relation open with RowExclusiveLock in *seg and the slot's k in *k;
 * -1 if no annex of the generation has room, or, when must, errors out.
 */
static int
reserve_annex_slot(Relation facade, SpindleDirectory *dir, int generation,
				   bool must, Relation *seg, int64 *k)
{
	for (int j = dir->nannexes - 1; j >= 0; j--)
	{
		SpindleEntry *sp = &dir->annexes[j];

		if (sp->generation != generation)
			continue;
		*seg = spindle_open_segment(facade, sp, RowExclusiveLock);
		if (*seg == NULL)
			continue;
		if (spindle_slots_take(facade, dir, dir->nspindles + j, 1, k) == 1)
			return dir->nspindles + j;
		relation_close(*seg, RowExclusiveLock);
	}
	if (!must)
		return -1;
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("spindle table \"%s\" has no annex of generation %d with room",
					RelationGetRelationName(facade), generation),
			 errhint("Create one with spindle._create_annex().")));
	return -1;					/* keep the compiler quiet */
}

/*
 * Insert one entry per index of the facade for the copy in slot, whose
 * tts_tid is its virtual TID, as an INSERT's executor does (unique
 * checks included).
 */
static void
insert_index_entries(Relation facade, TupleTableSlot *slot)
{
	EState	   *estate = CreateExecutorState();
	ResultRelInfo *rri = makeNode(ResultRelInfo);

	InitResultRelInfo(rri, facade, 1, NULL, 0);
	ExecOpenIndices(rri, false);
	if (rri->ri_NumIndices > 0)
		(void) ExecInsertIndexTuples(rri, slot, estate, false, false, NULL,
									 NIL);
	ExecCloseIndices(rri);
	FreeExecutorState(estate);
}

/*
 * Reserve one slot for a copy in the newest annex of the generation with
 * room (errors out if none): *as holds the pinned directory, the annex
 * (open RowExclusiveLock) and the slot, for spindle_annex_fill.  The
 * relocator writes its entry between the two (design, section 3: the
 * entry names the reserved slot and precedes the copy, so that the
 * copy's unique checks already find the old copy hidden).  With make,
 * an annex of the generation is made when none has room
 * (spindle_obtain_annex: by the spindle creator in a transaction of its
 * own when it can), so a slot is taken in an existing annex before a new
 * one is asked for; without, the call errors out then.  The caller holds
 * RowExclusiveLock on the facade.
 */
void
spindle_annex_reserve(Relation facade, int generation, bool make,
					  SpindleAnnexSlot *as)
{
	as->dir = spindle_directory_acquire(facade);
	as->index = reserve_annex_slot(facade, as->dir, generation, !make,
								   &as->seg, &as->k);
	if (as->index < 0)
	{
		spindle_directory_release(as->dir);
		(void) spindle_obtain_annex(facade, generation);
		as->dir = spindle_directory_acquire(facade);
		as->index = reserve_annex_slot(facade, as->dir, generation, true,
									   &as->seg, &as->k);
	}
	as->spindle_no = spindle_dir_entry(as->dir, as->index)->spindle_no;

	/*
	 * Counted from the reservation on: purged if this (sub)transaction
	 * aborts (counters.c), also when it errors out before the copy is
	 * placed (a move refused because its event changed meanwhile), so
	 * that no handed-out slot stays counted live with nothing in it; a
	 * copy, not an enqueue: not in the table's insert total.
	 */
	spindle_counters_copied(spindle_dir_entry(as->dir, as->index)->segment, 1);
}

/*
 * Place a copy of the row in slot (of the facade's descriptor) in the
 * annex slot as reserved, with append time appended (0: now); returns its
 * virtual TID in *vtid and releases what as holds (the annex stays locked
 * to the end of the transaction).
 */
void
spindle_annex_fill(Relation facade, SpindleAnnexSlot *as,
				   TupleTableSlot *slot, uint32 appended, ItemPointer vtid)
{
	SpindleEntry *sp = spindle_dir_entry(as->dir, as->index);
	HeapTuple	tuple;

	/* counted at the reservation (spindle_annex_reserve) */
	tuple = spindle_form_event(facade, slot, (int32) as->k,
							   appended != 0 ? appended : spindle_time_now());
	tuple->t_tableOid = RelationGetRelid(as->seg);
	heap_insert(as->seg, tuple, GetCurrentCommandId(true), 0, NULL);
	spindle_slotmap_set(facade, sp->vbase + as->k, 1, &tuple->t_self);
	spindle_slots_placed(sp);
	spindle_vslot_to_tid(sp->vbase + as->k, vtid);
	heap_freetuple(tuple);
	/* kept to the end of the transaction: the annex stays */
	relation_close(as->seg, NoLock);
	spindle_directory_release(as->dir);
	as->seg = NULL;
	as->dir = NULL;

	spindle_slot_set_identity(slot, facade, vtid);
	insert_index_entries(facade, slot);
}

/*
 * Place a copy of the row in slot (of the facade's descriptor) in an
 * annex of the given generation; returns its virtual TID in *vtid.  The
 * caller holds RowExclusiveLock on the facade.
 */
void
spindle_annex_place(Relation facade, int generation, TupleTableSlot *slot,
					ItemPointer vtid)
{
	SpindleAnnexSlot as;

	spindle_annex_reserve(facade, generation, false, &as);
	spindle_annex_fill(facade, &as, slot, 0, vtid);
}

/*
 * spindle._annex_insert(rel regclass, generation int, row anyelement)
 * RETURNS tid: insert a copy of row (of the table's row type) into the
 * table's newest annex of that generation with room; returns the copy's
 * TID.
 */
Datum
spindle_annex_insert_sql(PG_FUNCTION_ARGS)
{
	int			generation = PG_GETARG_INT32(1);
	Relation	facade = spindle_annex_open_for_test(PG_GETARG_OID(0), generation,
										"_annex_insert");
	Oid			argtype = get_fn_expr_argtype(fcinfo->flinfo, 2);
	HeapTupleHeader row;
	HeapTupleData tmp;
	TupleTableSlot *slot;
	ItemPointer vtid = palloc(sizeof(ItemPointerData));

	if (argtype != facade->rd_rel->reltype)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("row must be of the row type of \"%s\"",
						RelationGetRelationName(facade))));
	row = PG_GETARG_HEAPTUPLEHEADER(2);
	tmp.t_len = HeapTupleHeaderGetDatumLength(row);
	ItemPointerSetInvalid(&tmp.t_self);
	tmp.t_tableOid = InvalidOid;
	tmp.t_data = row;
	slot = MakeSingleTupleTableSlot(RelationGetDescr(facade),
									&TTSOpsHeapTuple);
	ExecStoreHeapTuple(&tmp, slot, false);
	slot_getallattrs(slot);
	ExecMaterializeSlot(slot);
	spindle_annex_place(facade, generation, slot, vtid);
	ExecDropSingleTupleTableSlot(slot);
	table_close(facade, NoLock);
	PG_RETURN_POINTER(vtid);
}
