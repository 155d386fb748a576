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

typedef struct SettledSpindle
{
	int64		spindle_no;
	TimestampTz created_at;		/* 0: unsettled since */
} SettledSpindle;

/* One maintenance pass over a table's spindles (touched.c). */
typedef struct SettledPass
{
	Oid			facade;
	uint64		generation;
	SettledSpindle *old;		/* the list before the pass ... */
	int			nold;
	int			pos;			/* ... and how far the pass got in it */
	int64		last_no;		/* the last spindle the pass looked at */
	SettledSpindle *items;		/* the list the pass builds */
	int			nnew;
	int			max;
} SettledPass;

extern Size spindle_touched_shmem_size(void);
extern void spindle_touched_shmem_startup(void);
extern void spindle_note_touched(Oid facade, int64 spindle_no);
extern void spindle_touched_sync(void);
extern void spindle_settled_begin(SettledPass *pass, Oid facade,
								  int max_spindles);
extern bool spindle_settled_check(SettledPass *pass, const SpindleEntry *sp);
extern void spindle_settled_add(SettledPass *pass, const SpindleEntry *sp);
extern void spindle_settled_end(SettledPass *pass);

#endif							/* SPINDLE_TOUCHED_H */
