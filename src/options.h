/*-------------------------------------------------------------------------
 *
 * options.h
 *	  Table options and DDL hooks of spindle tables (options.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_OPTIONS_H
#define SPINDLE_OPTIONS_H

#include "datatype/timestamp.h"
#include "storage/lockdefs.h"
#include "utils/rel.h"

extern void spindle_options_init(void);
extern bool spindle_parse_capacity(const char *value, int64 *result);
extern int64 spindle_rel_capacity_option(Oid relid, bool *found);
extern bool spindle_rel_ttl_option(Oid relid, Interval *result);
extern bool spindle_is_facade(Relation rel);
extern Relation spindle_open_facade(Oid relid, LOCKMODE lockmode);
extern Oid	spindle_segment_am_oid(void);
extern Oid	spindle_facade_am_oid(void);

#endif							/* SPINDLE_OPTIONS_H */
