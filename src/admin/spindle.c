/*-------------------------------------------------------------------------
 *
 * spindle.c
 *	  Module entry point of the spindle extension: GUCs, hooks, shared
 *	  memory requests, the access method handlers and small SQL helpers.
 *
 * _PG_init is where the layers are bound together (docs/design.md,
 * "Layers"): it defines the GUCs whose variables live in the layer that
 * uses them, requests and initialises the shared memory of each layer,
 * registers the resource manager and the worker when preloaded, and fills
 * spindle_table_hooks, through which the table layer tells the queue layer
 * (msg_ids, the event cache, waking consumers, truncates) and the worker
 * (work to do) what happened, without calling up into them.
 *
 * Locks: the shared memory of every layer is initialised in one
 * shmem_startup hook under AddinShmemInitLock, as core requires for
 * ShmemInitStruct; nothing here takes a lock afterwards.
 *
 * Invariants: the library works only when loaded by
 * shared_preload_libraries (spindle_preloaded); every SQL entry point
 * that needs shared memory or the resource manager checks it first
 * (spindle_check_preloaded), and CREATE EXTENSION fails without it, with
 * a hint naming the setting.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_namespace.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/guc.h"

#include "admin/spindle_admin.h"


PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(spindle_handler);
PG_FUNCTION_INFO_V1(spindle_segment_handler);
PG_FUNCTION_INFO_V1(spindle_meta_handler);
PG_FUNCTION_INFO_V1(spindle_require_preload);
PG_FUNCTION_INFO_V1(spindle_create_storage_schema);
PG_FUNCTION_INFO_V1(spindle_xid_is_current);

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

void		_PG_init(void);

static void
spindle_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	spindle_slots_shmem_request();
	spindle_counters_shmem_request();
	spindle_consume_log_shmem_request();
	RequestAddinShmemSpace(spindle_worker_shmem_size());
	RequestAddinShmemSpace(spindle_touched_shmem_size());
	spindle_queue_shmem_request();
	spindle_limits_shmem_request();
	spindle_cache_shmem_request();
	spindle_disk_alarm_shmem_request();
	RequestNamedLWLockTranche("spindle_worker", 1);
}

static void
spindle_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	spindle_slots_shmem_startup();
	spindle_counters_shmem_startup();
	spindle_consume_log_shmem_startup();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	spindle_worker_shmem_startup();
	spindle_touched_shmem_startup();
	spindle_queue_shmem_startup();
	spindle_limits_shmem_startup();
	spindle_cache_shmem_startup();
	spindle_disk_alarm_shmem_startup();
	LWLockRelease(AddinShmemInitLock);
}

void
_PG_init(void)
{
	DefineCustomIntVariable("spindle.events_per_spindle",
							"Capacity of the spindles of tables created without events_per_spindle.",
							"0 means spindles that are never dropped, each as large as a spindle gets (38141952 events).",
							&spindle_events_per_spindle,
							50000, 0, (int) SPINDLE_MAX_CAPACITY,
							PGC_USERSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("spindle.test_vslot_base",
							"For tests only: new spindles get TID ranges that start at or after this virtual slot.",
							"Lets a test place a table's TIDs far out (block numbers past 131072) without inserting that many events. The slot map then has a hole below them (a sparse file). 0, the default, is the normal lowest-first placement.",
							&spindle_test_vslot_base,
							0, 0, INT_MAX,
							PGC_SUSET, GUC_NOT_IN_SAMPLE,
							NULL, NULL, NULL);

	DefineCustomIntVariable("spindle.naptime",
							"Time the spindle worker sleeps between rounds.",
							NULL,
							&spindle_naptime,
							1000, 10, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomRealVariable("spindle.compaction_threshold",
							 "Live fraction of a full spindle of a queue table at or below which the worker moves its live events into an annex.",
							 "Only spindles whose live events are all parked (delayed, leased or due again) are compacted; the spindle is then dropped by the usual rule. 0 turns compaction off; at most 0.5, so that the bytes copied are at most the bytes freed.",
							 &spindle_compaction_threshold,
							 0.25, 0.0, 0.5,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);
	DefineCustomBoolVariable("spindle.enable_worker",
							 "Runs the spindle background workers.",
							 "Without them, spindles are dropped only by spindle.drop_spindles() and time_to_live is applied only by spindle.purge_expired().",
							 &spindle_enable_worker,
							 true,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("spindle.disk_free_limit",
							"Free space below which inserts into spindle tables are refused.",
							"While free space on the file system of pg_wal, or of a spindle table's tablespace, is below it, inserts and enqueues fail with SQLSTATE 53100 (the spindle launcher measures it every spindle.naptime). 0 turns the check off.",
							&spindle_disk_free_limit,
							1024, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MB,
							NULL, NULL, NULL);

	if (process_shared_preload_libraries_in_progress)
	{
		DefineCustomIntVariable("spindle.max_workers",
								"Maximum number of databases served by spindle workers at once.",
								"Each takes one of max_worker_processes; with more databases, workers take turns.",
								&spindle_max_workers,
								4, 1, 64,
								PGC_POSTMASTER, 0,
								NULL, NULL, NULL);
		DefineCustomIntVariable("spindle.max_open_spindles",
								"Number of spindles whose slot counters shared memory holds at once.",
								"Each spindle table needs one for its open spindle and one for each ready one.",
								&spindle_max_spindles,
								4096, 64, 1024 * 1024,
								PGC_POSTMASTER, 0,
								NULL, NULL, NULL);
		DefineCustomIntVariable("spindle.max_counted_spindles",
								"Number of spindles whose purge counters shared memory holds (for the monitoring views).",
								"About 100 bytes each; a spindle without one is counted from disk once when a view needs it.",
								&spindle_max_counted_spindles,
								16384, 64, 16 * 1024 * 1024,
								PGC_POSTMASTER, 0,
								NULL, NULL, NULL);
		DefineCustomIntVariable("spindle.max_queues",
								"Number of queues whose consumer state shared memory holds at once.",
								"A queue takes one while it is consumed; the state of an idle queue without leases is evicted when another queue needs the room.",
								&spindle_max_queues,
								256, 1, 10000,
								PGC_POSTMASTER, 0,
								NULL, NULL, NULL);
		DefineCustomIntVariable("spindle.max_leases",
								"Number of leases (events read and not yet acknowledged or expired) shared memory holds.",
								"A lease covers one event, or a run of consecutive events read together.",
								&spindle_max_leases,
								10000, 16, 10 * 1000 * 1000,
								PGC_POSTMASTER, 0,
								NULL, NULL, NULL);
		spindle_cache_define_gucs();
		prev_shmem_request_hook = shmem_request_hook;
		shmem_request_hook = spindle_shmem_request;
		prev_shmem_startup_hook = shmem_startup_hook;
		shmem_startup_hook = spindle_shmem_startup;
		spindle_preloaded = true;
		spindle_worker_register();
		spindle_rangepurge_register();
	}
	spindle_crel_define_gucs();
	spindle_mapdir_define_gucs();
	/* before the prefix is reserved: it defines spindle.max_payload_size */
	spindle_queue_catalog_init();
	spindle_queue_consumed_init();
	spindle_queue_api_init();
	MarkGUCPrefixReserved("spindle");

	/* what the table layer tells the layers above */
	spindle_queue_register_hooks();
	spindle_table_hooks.wake_worker = spindle_worker_nudge;
	/* the standby conflict of VACUUM's freeze of a consume log */
	spindle_consume_log_freeze_conflict_hook = spindle_log_frozen_conflict;
	/* and what the queue layer asks the views (queue_limits.c) */
	spindle_views_register_hooks();

	spindle_bitmap_no_prefetch();
	spindle_utility_init();
	spindle_options_init();
	spindle_directory_init();
	spindle_publication_init();
}

Datum
spindle_require_preload(PG_FUNCTION_ARGS)
{
	spindle_check_preloaded();
	/* and have the worker serve this database at once */
	spindle_worker_extension_created();
	PG_RETURN_VOID();
}

Datum
spindle_handler(PG_FUNCTION_ARGS)
{
	PG_RETURN_POINTER(spindle_facade_routine());
}

Datum
spindle_segment_handler(PG_FUNCTION_ARGS)
{
	PG_RETURN_POINTER(spindle_segment_routine());
}

/* The handler of access method spindle_meta (queues' consumer relations) */
Datum
spindle_meta_handler(PG_FUNCTION_ARGS)
{
	PG_RETURN_POINTER(spindle_meta_routine());
}

/*
 * Create schema pg_spindle (from the install script) and make sure it is
 * not a member of the extension: pg_dump dumps the tables of a member
 * schema, and skips those of a pg_* schema that is not one.
 */
Datum
spindle_create_storage_schema(PG_FUNCTION_ARGS)
{
	Oid			nsp = get_namespace_oid(SPINDLE_STORAGE_SCHEMA, true);

	if (!OidIsValid(nsp))
	{
		nsp = NamespaceCreate(SPINDLE_STORAGE_SCHEMA, BOOTSTRAP_SUPERUSERID,
							  false);
		CommandCounterIncrement();
	}
	deleteDependencyRecordsForClass(NamespaceRelationId, nsp,
									ExtensionRelationId, DEPENDENCY_EXTENSION);
	PG_RETURN_VOID();
}

/* Was this xid assigned to the current transaction (or a subtransaction)? */
Datum
spindle_xid_is_current(PG_FUNCTION_ARGS)
{
	TransactionId xid = DatumGetTransactionId(PG_GETARG_DATUM(0));

	PG_RETURN_BOOL(TransactionIdIsCurrentTransactionId(xid));
}
