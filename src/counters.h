/*-------------------------------------------------------------------------
 *
 * counters.h
 *	  Maintained per-spindle purge counters for the monitoring views
 *	  (counters.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_COUNTERS_H
#define SPINDLE_COUNTERS_H

#include "access/xlogdefs.h"
#include "directory.h"

extern int	spindle_max_counted_spindles;

/* What the views learn about one spindle from shared memory. */
typedef struct SpindleCountersInfo
{
	int64		appended;		/* slots handed out (-1: unknown) */
	bool		full;			/* known full */
	TimestampTz filled_at;		/* when it became full, if known, else 0 */
	int64		purged;			/* committed purges + aborted inserts */
	TransactionId latest_purger;	/* newest committed purger, if known */
	bool		stale;			/* a finished prepared transaction wrote */
	bool		inexact;		/* a transaction's work could not be added */
	bool		in_recovery;	/* built from disk during recovery */
	TimestampTz built_at;		/* 0 if made empty, not built */
	XLogRecPtr	built_lsn;		/* in recovery: WAL replayed when built */
} SpindleCountersInfo;

extern Size spindle_counters_shmem_size(void);
extern void spindle_counters_shmem_request(void);
extern void spindle_counters_shmem_startup(void);

extern void spindle_counters_inserted(Oid facade, Oid segment, int n);
extern void spindle_counters_deleted(Oid segment, int n);
extern void spindle_counters_insert_killed(Oid segment);
extern void spindle_counters_created(Oid facade, const SpindleEntry *sp);
extern bool spindle_counters_get(Oid facade, const SpindleEntry *sp,
								 SpindleCountersInfo *info);
extern bool spindle_counters_build(Oid facade, const SpindleEntry *sp,
								   const SpindleEntry *next);
extern int64 spindle_counters_table_inserts(Oid facade);
extern void spindle_counters_forget(Oid segment);
extern void spindle_counters_forget_database(Oid dboid);

#endif							/* SPINDLE_COUNTERS_H */
