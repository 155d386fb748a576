/*-------------------------------------------------------------------------
 *
 * spindle_test_hooks.c
 *	  A test-only module: holds a committing transaction in the window
 *	  between the moment its commit shows in other sessions' snapshots and
 *	  the moment its invalidation messages are sent.
 *
 * PostgreSQL ends a transaction in the proc array (its effects are
 * visible) before it calls the commit callbacks and sends its shared
 * invalidations (CommitTransaction in xact.c).  A session whose caches
 * have not received those invalidations yet, while another has read the
 * catalog afresh, is a race the tests need to produce at will:
 *
 *		LOAD 'spindle_test_hooks';
 *		CREATE FUNCTION pg_temp.delay_commit(int) RETURNS void
 *		  AS 'spindle_test_hooks', 'spindle_test_delay_commit' LANGUAGE C;
 *		BEGIN; SELECT pg_temp.delay_commit(3000); ...; COMMIT;
 *
 * makes that COMMIT sleep 3 s in its commit callback.
 *
 * spindle_test_crash_pre_commit() makes the current transaction's COMMIT
 * flush the WAL it wrote and kill its backend (SIGKILL: the postmaster
 * restarts the server and recovery runs) at PRE_COMMIT, after the
 * PRE_COMMIT callbacks registered after this one -- spindle's, if spindle
 * is first used in the session after this call -- and before the commit
 * record: the window of writes made just before a commit.
 *
 * It is built and installed by scripts/test.sh only, never by `make
 * install`.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>
#include <unistd.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "fmgr.h"
#include "miscadmin.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(spindle_test_delay_commit);
PG_FUNCTION_INFO_V1(spindle_test_crash_pre_commit);

static int	delay_ms = 0;
static bool registered = false;

static void
delay_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT && delay_ms > 0)
		pg_usleep((long) delay_ms * 1000L);
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE)
		delay_ms = 0;
}

/*
 * spindle_test_delay_commit(ms int) RETURNS void: the commit of the
 * current transaction sleeps ms milliseconds once it is visible, before
 * its invalidations are sent and its locks released.
 */
Datum
spindle_test_delay_commit(PG_FUNCTION_ARGS)
{
	if (!registered)
	{
		RegisterXactCallback(delay_callback, NULL);
		registered = true;
	}
	delay_ms = Max(PG_GETARG_INT32(0), 0);
	PG_RETURN_VOID();
}

static bool crash_armed = false;
static bool crash_registered = false;

static void
crash_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_PRE_COMMIT && crash_armed)
	{
		XLogFlush(XactLastRecEnd);
		kill(MyProcPid, SIGKILL);
		for (;;)
			pg_usleep(1000000L);
	}
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PREPARE)
		crash_armed = false;
}

/*
 * spindle_test_crash_pre_commit() RETURNS void: the current transaction's
 * COMMIT kills the server's backend at PRE_COMMIT (see the header).
 */
Datum
spindle_test_crash_pre_commit(PG_FUNCTION_ARGS)
{
	if (!crash_registered)
	{
		RegisterXactCallback(crash_callback, NULL);
		crash_registered = true;
	}
	crash_armed = true;
	PG_RETURN_VOID();
}

