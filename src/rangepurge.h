/*-------------------------------------------------------------------------
 *
 * rangepurge.h
 *	  Purging many events of one spindle page with one WAL record: the
 *	  "spindle" custom resource manager (rangepurge.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_RANGEPURGE_H
#define SPINDLE_RANGEPURGE_H

#include "storage/bufmgr.h"
#include "storage/off.h"
#include "utils/rel.h"

#include "access/rmgr.h"

/*
 * The "spindle" custom resource manager (registered, redone and described
 * in rangepurge.c).  RM_EXPERIMENTAL_ID is for development; a released
 * version must reserve an ID (docs/design.md, "Range purges (WAL)").
 */
#define SPINDLE_RMGR_ID			RM_EXPERIMENTAL_ID

/* its record types (the high four bits of xl_info) */
#define XLOG_SPINDLE_PURGE		0x10	/* rangepurge.c */
#define XLOG_SPINDLE_MAP_SET	0x20	/* slotmap.c */

extern void spindle_rangepurge_register(void);	/* from _PG_init, only while process_shared_preload_libraries_in_progress */

/*
 * Purge the tuples at offsets[0..n) of the page in buf (a buffer of spindle relation seg, pinned and
 * EXCLUSIVE-locked by the caller) by the current transaction: as heap_delete would, one WAL record.
 * The caller has checked under that lock that each tuple is visible (inserted by a committed
 * transaction) and not deleted (xmax invalid, aborted, or lock-only); assert/elog(ERROR) otherwise
 * before the critical section. Calls GetCurrentTransactionId(). Does not touch TOAST (the spindle's
 * TOAST goes with the spindle when it is dropped).
 */
extern void spindle_purge_on_page(Relation seg, Buffer buf, const OffsetNumber *offsets, int n, CommandId cid);

#endif							/* SPINDLE_RANGEPURGE_H */
