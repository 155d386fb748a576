/*-------------------------------------------------------------------------
 *
 * spindle.h
 *	  Settings and names shared by every file of the spindle extension.
 *
 * A spindle table (the "facade") is a relation whose table access method is
 * "spindle".  Its events live in spindles: internal relations of access
 * method "spindle_segment" (heap, minus slot reclamation) in schema
 * pg_spindle, one per spindle, listed in spindle.spindle_catalog.  Each
 * file's interface is in its own header: options.h, directory.h, slots.h,
 * slotmap.h, layout.h, facade.h, segment.h, maintenance.h, ttl.h,
 * worker.h, publication.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_H
#define SPINDLE_H


/* GUCs (spindle.c) */
extern int	spindle_events_per_spindle;
extern bool spindle_preloaded;

/* Name of the schema holding the spindles themselves. */
#define SPINDLE_STORAGE_SCHEMA "pg_spindle"
#define SPINDLE_SCHEMA "spindle"

/* spindle.c */
extern void spindle_check_preloaded(void);

#endif							/* SPINDLE_H */
