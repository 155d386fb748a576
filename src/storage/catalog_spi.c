/*-------------------------------------------------------------------------
 *
 * catalog_spi.c
 *	  Connect SPI to run statements on spindle's own catalog tables
 *	  (spindle.spindle_catalog, table_catalog, queue_catalog) as the
 *	  bootstrap superuser, with a search_path of pg_catalog only.
 *
 * The caller's search_path must not be able to put a function or operator
 * of its own under a name the statements use (every name is
 * schema-qualified too), and SECURITY_RESTRICTED_OPERATION keeps them from
 * changing anything but what they say.
 *
 * Locks: none of its own; the statements take the locks of the catalog
 * tables they read or write.
 *
 * Invariants: spindle_spi_begin and spindle_spi_end pair up (also on the
 * error path, where the transaction's abort restores user and GUCs), and
 * results that outlive SPI_finish are copied into the caller's context.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_authid.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "access/xact.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"

#include "storage/spindle_storage.h"

void
spindle_spi_begin(SpindleSpi *ctx)
{
	ctx->outer = CurrentMemoryContext;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	GetUserIdAndSecContext(&ctx->saved_userid, &ctx->saved_sec_context);
	SetUserIdAndSecContext(BOOTSTRAP_SUPERUSERID,
						   ctx->saved_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	ctx->guc_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);
}

void
spindle_spi_end(SpindleSpi *ctx)
{
	AtEOXact_GUC(true, ctx->guc_nestlevel);
	SetUserIdAndSecContext(ctx->saved_userid, ctx->saved_sec_context);
	SPI_finish();
}

/*
 * Run one statement with the latest snapshot (a REPEATABLE READ
 * transaction must still see the catalog as it is now); a statement that
 * writes first sees the transaction's earlier changes.  Returns
 * SPI_processed.  Call between spindle_spi_begin and spindle_spi_end.
 */
uint64
spindle_spi_exec(const char *sql, int nargs, Oid *types, Datum *values,
				 const char *nulls, bool read_only)
{
	SPIPlanPtr	plan;
	int			rc;

	plan = SPI_prepare(sql, nargs, types);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s", sql,
			 SPI_result_code_string(SPI_result));
	if (!read_only)
		CommandCounterIncrement();
	rc = SPI_execute_snapshot(plan, values, nulls, GetLatestSnapshot(),
							  InvalidSnapshot, read_only, false, 0);
	if (rc < 0)
		elog(ERROR, "SPI failed for \"%s\": %s", sql,
			 SPI_result_code_string(rc));
	return SPI_processed;
}
