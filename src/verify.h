/*-------------------------------------------------------------------------
 *
 * verify.h
 *	  spindle.verify(): check the invariants of one spindle table
 *	  (verify.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_VERIFY_H
#define SPINDLE_VERIFY_H

#include "fmgr.h"

extern Datum spindle_verify(PG_FUNCTION_ARGS);
extern Datum spindle_verify_corrupt(PG_FUNCTION_ARGS);

#endif							/* SPINDLE_VERIFY_H */
