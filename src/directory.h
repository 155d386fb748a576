/*-------------------------------------------------------------------------
 *
 * directory.h
 *	  Which spindles a table has, and the catalog work on them (directory.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_DIRECTORY_H
#define SPINDLE_DIRECTORY_H

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"
#include "utils/rel.h"

/* One spindle as the backend-local directory cache knows it. */
typedef struct SpindleEntry
{
	int64		spindle_no;		/* increasing per table */
	Oid			segment;		/* relation holding the events */
	int64		capacity;		/* as configured; 0 = unbounded */
	int64		vbase;			/* its virtual slots (slotmap.c) ... */
	int64		vcount;			/* ... and how many */
	TimestampTz created_at;
	TimestampTz filled_at;		/* 0 if not recorded */
} SpindleEntry;

/* A spindle's relation and its place in the directory (directory.c). */
typedef struct SpindleSegRef
{
	Oid			segment;
	int			index;			/* into SpindleDirectory.spindles */
} SpindleSegRef;

/* Spindles whose catalog rows a directory re-reads before its next use */
#define SPINDLE_DIR_MAX_RECHECK 256

/*
 * The directory of one facade, cached per backend (directory.c).  Callers
 * pin it (spindle_directory_acquire) and release it; a pinned directory
 * stays valid, though maybe stale, whatever invalidations arrive.
 */
typedef struct SpindleDirectory
{
	Oid			facade;
	MemoryContext cxt;			/* holds this struct and its arrays */
	int			pins;
	int			nspindles;
	SpindleEntry *spindles;		/* ordered by spindle_no */
	int		   *byvbase;		/* indexes into spindles, ordered by vbase */
	int64		events_per_spindle; /* table option, for new spindles */
	int			open_hint;		/* no spindle before this one has room */
	bool		hint_checked;	/* open_hint verified against the counters */
	double		est_events;		/* planner's estimate (facade_am.c) ... */
	TimestampTz est_at;			/* ... and when it was computed, or 0 */
	int			est_full;		/* leading spindles known full ... */
	double		est_full_events;	/* ... and their events (facade_am.c) */
	bool		partial;		/* only the newest spindles: for inserts */

	/* the rest is private to directory.c: how it is kept up to date */
	int			nalloc;			/* room in spindles[] */
	SpindleSegRef *byseg;		/* one per spindle, ordered by segment */
	int64		max_spindle_no; /* highest number among the rows read */
	TransactionId class_xmin;	/* of the facade's pg_class row, when read */
	bool		stale;			/* an invalidation arrived since */
	bool		needs_full;		/* ... that only a full read answers */
	bool		has_own;		/* may hold this transaction's own rows */
	bool		parallel_read;	/* read with a parallel query's snapshot */
	bool		updating;		/* being brought up to date right now */
	int			nrecheck;
	int64		recheck[SPINDLE_DIR_MAX_RECHECK];	/* spindle numbers */
} SpindleDirectory;

/*
 * The events a spindle may hold: its capacity, within its range of TIDs
 * (ALTER TABLE SET (events_per_spindle) may lower or raise the capacity of
 * a spindle that is still empty, never its range).
 */
static inline int64
spindle_effective_capacity(const SpindleEntry *sp)
{
	return sp->capacity > 0 ? Min(sp->capacity, sp->vcount) : sp->vcount;
}

/* A spindle's number and range of virtual slots. */
typedef struct SpindleRange
{
	int64		spindle_no;
	int64		vbase;
	int64		vcount;
} SpindleRange;

extern void spindle_directory_init(void);
extern SpindleDirectory *spindle_directory_acquire(Relation facade);
extern SpindleDirectory *spindle_directory_acquire_tail(Relation facade);
extern SpindleDirectory *spindle_directory_acquire_upto(Relation facade,
														 int64 spindle_no);
extern SpindleDirectory *spindle_directory_acquire_current(Relation facade);
extern void spindle_directory_release(SpindleDirectory *dir);
extern void spindle_directory_forget(Oid facade);
extern void spindle_directory_note_open(SpindleDirectory *dir, int64 spindle_no);
extern SpindleEntry *spindle_find_spindle(SpindleDirectory *dir, int64 spindle_no);
extern SpindleEntry *spindle_find_by_vslot(SpindleDirectory *dir, int64 vslot);
extern void spindle_lock_creation(Oid facade);
extern bool spindle_creation_locked_by_me(Oid facade);
extern bool spindle_created_here(Relation facade);
extern int	spindle_create_spindles(Relation facade, int count, bool ready_only);
extern void spindle_register_table(Oid facade);
extern void spindle_forget_table(Oid facade);
extern void spindle_drop_all_spindles(Relation facade);
extern void spindle_catalog_mark_dropped(Oid facade, const SpindleEntry *sp,
										 int64 bytes_freed);
extern int64 spindle_catalog_retire_slots(Oid facade);
extern int	spindle_catalog_dropped(Oid facade, SpindleRange **out);
extern bool spindle_catalog_has_spindle(Oid facade, int64 spindle_no, int n);
extern void spindle_catalog_forget_dropped(Oid facade, const SpindleRange *ranges,
										   int n);
extern void spindle_catalog_set_filled(Oid facade, int64 spindle_no,
									   TimestampTz when);
extern void spindle_catalog_set_capacity_of_empty(Relation facade, int64 capacity);
extern List *spindle_catalog_tables(void);

#endif							/* SPINDLE_DIRECTORY_H */
