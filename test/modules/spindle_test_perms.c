/*-------------------------------------------------------------------------
 *
 * spindle_test_perms.c
 *	  A test-only module: an ExecutorCheckPerms_hook, as a security module
 *	  (sepgsql) or an audit module (pgaudit) installs, that refuses INSERT
 *	  into the tables named by spindle_test_perms.deny_insert.
 *
 *		LOAD 'spindle_test_perms';
 *		SET spindle_test_perms.deny_insert = 'orders';
 *
 * then any statement inserting into a table named orders (in any schema)
 * fails with SQLSTATE 42501.  enqueue() must be refused too: it stands
 * for an INSERT (queue_insert.c).  Built and installed by scripts/test.sh
 * only, never by `make install`.  Takes no locks.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/executor.h"
#include "fmgr.h"
#include "nodes/parsenodes.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

static ExecutorCheckPerms_hook_type prev_check_perms = NULL;
static char *deny_insert = NULL;

static bool
check_perms(List *rangeTable, bool ereport_on_violation)
{
	ListCell   *lc;

	if (prev_check_perms != NULL &&
		!prev_check_perms(rangeTable, ereport_on_violation))
		return false;
	if (deny_insert == NULL || deny_insert[0] == '\0')
		return true;
	foreach(lc, rangeTable)
	{
		RangeTblEntry *rte = lfirst_node(RangeTblEntry, lc);
		char	   *name;

		if (rte->rtekind != RTE_RELATION ||
			(rte->requiredPerms & ACL_INSERT) == 0)
			continue;
		name = get_rel_name(rte->relid);
		if (name == NULL || strcmp(name, deny_insert) != 0)
			continue;
		if (ereport_on_violation)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("spindle_test_perms: INSERT into \"%s\" denied",
							name)));
		return false;
	}
	return true;
}

void
_PG_init(void)
{
	DefineCustomStringVariable("spindle_test_perms.deny_insert",
							   "Name of the tables INSERT into is denied.",
							   NULL, &deny_insert, "", PGC_SUSET, 0,
							   NULL, NULL, NULL);
	MarkGUCPrefixReserved("spindle_test_perms");
	prev_check_perms = ExecutorCheckPerms_hook;
	ExecutorCheckPerms_hook = check_perms;
}
