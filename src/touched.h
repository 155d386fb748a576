/*-------------------------------------------------------------------------
 *
 * touched.h
 *	  Spindles touched by deletes, and each backend's settled spindles
 *	  (touched.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_TOUCHED_H
#define SPINDLE_TOUCHED_H

#include "directory.h"

/*
 * A run of settled spindles: every spindle of the table numbered from
 * first to last that still exists is settled (touched.c).
 */
typedef struct SettledRun
{
	int64		first;
	int64		last;
} SettledRun;

/* One maintenance pass over a table's spindles (touched.c). */
typedef struct SettledPass
{
	Oid			facade;
	uint64		generation;
	SettledRun *old;			/* the runs before the pass ... */
	int			nold;
	int			pos;			/* ... and how far the pass got in them */
	int64		last_no;		/* the last spindle the pass looked at */
	SettledRun *runs;			/* the runs the pass builds */
	int			nnew;
	int			max;
	int			last_index;		/* directory index of the last one added */
} SettledPass;

extern Size spindle_touched_shmem_size(void);
extern void spindle_touched_shmem_startup(void);
extern void spindle_note_touched(Oid facade, int64 spindle_no);
extern void spindle_touched_sync(void);
extern void spindle_settled_begin(SettledPass *pass, Oid facade,
								  TransactionId table_version);
extern int	spindle_settled_run(SettledPass *pass, const SpindleDirectory *dir,
								int i);
extern void spindle_settled_add(SettledPass *pass, const SpindleDirectory *dir,
								int i);
extern void spindle_settled_end(SettledPass *pass);

#endif							/* SPINDLE_TOUCHED_H */
