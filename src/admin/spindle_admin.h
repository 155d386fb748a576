/*-------------------------------------------------------------------------
 *
 * spindle_admin.h
 *	  The admin layer's interface: what binds spindle into PostgreSQL
 *	  (_PG_init, GUCs, the utility hook, the worker, views, verify,
 *	  publications).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_ADMIN_H
#define SPINDLE_ADMIN_H

#include "fmgr.h"

#include "queue/spindle_queue.h"

/* ---- worker.c: the background workers ---- */

extern int	spindle_naptime;
extern bool spindle_enable_worker;
extern int	spindle_max_workers;
extern Size spindle_worker_shmem_size(void);
extern void spindle_worker_shmem_startup(void);
extern void spindle_worker_register(void);
extern void spindle_worker_pause(Oid dboid);
extern void spindle_worker_resume(Oid dboid);
extern void spindle_worker_nudge(void);
extern void spindle_worker_extension_created(void);

/* ---- utility.c: the ProcessUtility hook ---- */

extern void spindle_utility_init(void);

/* ---- verify.c: spindle.verify() ---- */

extern Datum spindle_verify(PG_FUNCTION_ARGS);
extern Datum spindle_verify_corrupt(PG_FUNCTION_ARGS);

/* ---- publication.c: publications ---- */

extern void spindle_publication_init(void);

/* views.c */
extern void spindle_views_register_hooks(void);

#endif							/* SPINDLE_ADMIN_H */
