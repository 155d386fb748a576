/*-------------------------------------------------------------------------
 *
 * ttl.h
 *	  Time-to-live purge (ttl.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_TTL_H
#define SPINDLE_TTL_H

#include "datatype/timestamp.h"
#include "utils/rel.h"

extern int64 spindle_purge_older_than(Relation facade, TimestampTz cutoff);
extern Oid	spindle_referencing_table(Relation rel);
extern bool spindle_ttl_cutoff(const Interval *ttl, TimestampTz now,
							   TimestampTz *cutoff);

#endif							/* SPINDLE_TTL_H */
