/*-------------------------------------------------------------------------
 *
 * catalog_spi.h
 *	  SPI on spindle's own catalog tables as the bootstrap superuser
 *	  (catalog_spi.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_CATALOG_SPI_H
#define SPINDLE_CATALOG_SPI_H

#include "utils/memutils.h"

typedef struct SpindleSpi
{
	Oid			saved_userid;
	int			saved_sec_context;
	int			guc_nestlevel;
	MemoryContext outer;		/* results that outlive SPI_finish go here */
} SpindleSpi;

extern void spindle_spi_begin(SpindleSpi *ctx);
extern void spindle_spi_end(SpindleSpi *ctx);
extern uint64 spindle_spi_exec(const char *sql, int nargs, Oid *types,
							   Datum *values, const char *nulls, bool read_only);

#endif							/* SPINDLE_CATALOG_SPI_H */
