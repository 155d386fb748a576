/*-------------------------------------------------------------------------
 *
 * worker.h
 *	  The spindle background workers (worker.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_WORKER_H
#define SPINDLE_WORKER_H


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

#endif							/* SPINDLE_WORKER_H */
