/*-------------------------------------------------------------------------
 *
 * disk_alarm.c
 *	  The disk alarm: producers into spindle tables are refused while free
 *	  space on the file system of pg_wal, or of the tablespace of the
 *	  spindle table being written, is below spindle.disk_free_limit.
 *
 * A queue that fills its disk takes PostgreSQL down with it (a full pg_wal
 * is a PANIC), or at best fails its producers one by one with "could not
 * extend file" after they have used the last byte that VACUUM, the spindle
 * worker and every other session also need.  So, like RabbitMQ's
 * disk_free_limit, inserts into spindle tables (INSERT, COPY, UPDATE's new
 * version, enqueue: every entry of the facade AM that adds a tuple calls
 * spindle_disk_alarm_check) fail at once with SQLSTATE 53100 while free
 * space is below the limit, and consumers, acknowledgements, DELETE, the
 * worker and the drops that give the space back go on.  The worker's
 * compaction, which writes annex copies, asks spindle_disk_alarm_low (no
 * error) and moves nothing while the alarm is on (queue_compact.c).
 *
 * No insert asks the kernel.  The spindle launcher (admin/worker.c) calls
 * spindle_disk_alarm_measure every time it wakes (every spindle.naptime,
 * and whenever it is woken): it runs statvfs() on pg_wal, on base/ (the
 * default tablespace) and on each entry of pg_tblspc/, and publishes in
 * shared memory, for each, one 64-bit word: the tablespace's OID (0 for
 * pg_wal) in the high half, the free space in MB (f_bavail * f_frsize, as
 * an unprivileged user sees it) in the low half.  An insert reads those
 * words with pg_atomic_read_u64, no lock, and compares them with its own
 * spindle.disk_free_limit; "low" is free < limit.  Since one word holds
 * both the tablespace and its measurement, a reader never pairs one
 * tablespace with another's free space.  The common case is one atomic
 * read: the launcher also publishes the lowest free space of all, and an
 * insert stops there when that is not below the limit.
 *
 * Staleness: an insert sees a measurement at most one launcher round old
 * (spindle.naptime plus the time of the round).  So producers may write
 * for up to a naptime past the limit (the limit is a margin, not a quota),
 * and are let in again up to a naptime after space came back.  A reload
 * that lowers the limit (or sets 0, which turns the alarm off) takes
 * effect in each backend as soon as it reads its configuration; one that
 * raises it compares the same measurements with the new limit at once.
 * Before the launcher's first round (or without spindle in
 * shared_preload_libraries), nothing is known and nothing is refused.
 *
 * Bounded shared memory: one slot for pg_wal, one for base/, and
 * DISK_ALARM_MAX_TABLESPACES for the tablespaces of pg_tblspc/.  With more
 * tablespaces than that, the launcher still measures them all and keeps
 * those with the least free space (the ones that can be low); the others
 * are not watched, so inserts into them are never refused, and the
 * launcher logs a WARNING naming how many are left out whenever that
 * number changes.  A file system the launcher cannot measure (statvfs
 * fails) counts as unknown, hence allowed, with a WARNING.  A tablespace
 * keeps its slot for as long as it is watched, so only a change in the set
 * of watched tablespaces makes a reader scanning the slots miss one (and
 * let that one insert in).
 *
 * Locks: the words and the lowest free space are atomics, written only by
 * the launcher.  DiskAlarmLock (a named LWLock) protects the rest of each
 * slot (path, exact free bytes, when measured), which only the launcher
 * writes and only error messages and spindle.disk_alarm() read.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include "access/xlog_internal.h"
#include "catalog/pg_tablespace_d.h"
#include "commands/tablespace.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/fd.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "table/spindle_table.h"


PG_FUNCTION_INFO_V1(spindle_disk_alarm);

/* GUC spindle.disk_free_limit, in MB; 0 turns the alarm off */
int			spindle_disk_free_limit = 1024;

/*
 * Above 0 while a consumer writes as part of consuming (the queue layer's
 * dead-letter moves): consumers go on under the alarm, and their moves
 * are what they already took from the disk.  Backend-local; the caller
 * restores it on error.
 */
int			spindle_disk_alarm_exempt = 0;

#define DISK_ALARM_MAX_TABLESPACES 32
#define WAL_SLOT	0
#define BASE_SLOT	1
#define FIRST_TS_SLOT 2
#define DISK_ALARM_SLOTS (FIRST_TS_SLOT + DISK_ALARM_MAX_TABLESPACES)

/* free MB of a file system nobody measured (never below any limit) */
#define FREE_UNKNOWN PG_UINT32_MAX

#define MAKE_WORD(spc, free_mb) (((uint64) (spc) << 32) | (uint64) (free_mb))
#define WORD_SPC(w)		((Oid) ((w) >> 32))
#define WORD_FREE(w)	((uint32) ((w) & PG_UINT32_MAX))

/* What the launcher measured of one file system (under DiskAlarmLock). */
typedef struct DiskAlarmInfo
{
	bool		used;			/* the slot watches a file system */
	bool		measured;		/* statvfs succeeded */
	bool		low;			/* below the launcher's limit then */
	Oid			spcoid;			/* InvalidOid for pg_wal */
	uint64		free_bytes;
	TimestampTz measured_at;
	char		path[MAXPGPATH];	/* the directory checked, as shown */
} DiskAlarmInfo;

typedef struct DiskAlarmShared
{
	LWLock	   *lock;
	pg_atomic_uint32 lowest_free_mb;	/* of every watched file system */
	pg_atomic_uint64 words[DISK_ALARM_SLOTS];	/* MAKE_WORD(spc, free MB) */
	int			unwatched;		/* tablespaces left out (launcher only) */
	DiskAlarmInfo info[DISK_ALARM_SLOTS];
} DiskAlarmShared;

static DiskAlarmShared *dshared = NULL;

/* one measurement, in the launcher's memory */
typedef struct Measure
{
	Oid			spcoid;
	bool		measured;
	int			err;			/* errno of a failed statvfs() */
	uint64		free_bytes;
	char		path[MAXPGPATH];
} Measure;

static MemoryContext measure_cxt = NULL;


/* bytes as pg_size_pretty() shows them, palloc'd */
static char *
pretty(uint64 bytes)
{
	return text_to_cstring(DatumGetTextPP(DirectFunctionCall1(pg_size_pretty,
															  Int64GetDatum((int64) Min(bytes, (uint64) PG_INT64_MAX)))));
}


/* ----------------------------------------------------------------
 * Shared memory
 * ----------------------------------------------------------------
 */

void
spindle_disk_alarm_shmem_request(void)
{
	RequestAddinShmemSpace(sizeof(DiskAlarmShared));
	RequestNamedLWLockTranche("spindle_disk_alarm", 1);
}

/* Caller holds AddinShmemInitLock. */
void
spindle_disk_alarm_shmem_startup(void)
{
	bool		found;
	int			i;

	dshared = ShmemInitStruct("spindle disk alarm", sizeof(DiskAlarmShared),
							&found);
	if (found)
		return;
	memset(dshared, 0, sizeof(DiskAlarmShared));
	dshared->lock = &(GetNamedLWLockTranche("spindle_disk_alarm"))[0].lock;
	pg_atomic_init_u32(&dshared->lowest_free_mb, FREE_UNKNOWN);
	for (i = 0; i < DISK_ALARM_SLOTS; i++)
		pg_atomic_init_u64(&dshared->words[i], MAKE_WORD(InvalidOid, FREE_UNKNOWN));
}

/* ----------------------------------------------------------------
 * The insert path
 * ----------------------------------------------------------------
 */

/*
 * Refuse an insert into rel: the file system of slot i is low.  Takes
 * DiskAlarmLock shared for a moment to copy the slot's path.
 */
static void
refuse(Relation rel, int i, Oid spcoid, uint32 free_mb)
{
	char		path[MAXPGPATH];
	uint64		free_bytes = (uint64) free_mb * 1024 * 1024;

	LWLockAcquire(dshared->lock, LW_SHARED);
	if (dshared->info[i].used && dshared->info[i].spcoid == spcoid)
	{
		strlcpy(path, dshared->info[i].path, sizeof(path));
		free_bytes = dshared->info[i].free_bytes;
	}
	else if (i == WAL_SLOT)
		strlcpy(path, XLOGDIR, sizeof(path));
	else
		snprintf(path, sizeof(path), "pg_tblspc/%u", spcoid);
	LWLockRelease(dshared->lock);

	ereport(ERROR,
			(errcode(ERRCODE_DISK_FULL),
			 errmsg("free space on the file system of \"%s\" (%s) is below spindle.disk_free_limit (%s)",
					path, pretty(free_bytes),
					pretty((uint64) spindle_disk_free_limit * 1024 * 1024)),
			 errdetail("Writes into spindle table \"%s\" are refused until there is more free space; consumers and the spindle worker go on.",
					   RelationGetRelationName(rel)),
			 errhint("Free space on the file system of \"%s\" (consume and acknowledge events: the spindle worker drops consumed spindles), or lower spindle.disk_free_limit and reload the configuration (0 turns the disk alarm off).",
					 path)));
}

/*
 * The slot of the first file system of rel's writes (pg_wal's, or the one
 * of rel's tablespace) whose last measurement is below
 * spindle.disk_free_limit, its word in *word; -1 if none is (or the alarm
 * is off or knows nothing).  No lock: one atomic read when nothing is low.
 */
static int
low_slot(Relation rel, uint64 *word)
{
	uint32		limit;
	Oid			spcoid;
	int			i;

	if (spindle_disk_free_limit <= 0 || dshared == NULL)
		return -1;
	limit = (uint32) spindle_disk_free_limit;
	if (pg_atomic_read_u32(&dshared->lowest_free_mb) >= limit)
		return -1;
	spcoid = OidIsValid(rel->rd_rel->reltablespace) ?
		rel->rd_rel->reltablespace : MyDatabaseTableSpace;
	for (i = 0; i < DISK_ALARM_SLOTS; i++)
	{
		uint64		w = pg_atomic_read_u64(&dshared->words[i]);

		if (i != WAL_SLOT && WORD_SPC(w) != spcoid)
			continue;
		if (WORD_FREE(w) < limit)
		{
			*word = w;
			return i;
		}
	}
	return -1;
}

/*
 * Called by every entry of the facade AM that adds a tuple to rel: fail
 * with SQLSTATE 53100 if the last measurement of pg_wal's file system, or
 * of the one of rel's tablespace, is below spindle.disk_free_limit.  No
 * lock: one atomic read when nothing is low, at most DISK_ALARM_SLOTS
 * otherwise.
 */
void
spindle_disk_alarm_check(Relation rel)
{
	uint64		w;
	int			i;

	if (spindle_disk_alarm_exempt > 0)
		return;
	if ((i = low_slot(rel, &w)) >= 0)
		refuse(rel, i, WORD_SPC(w), WORD_FREE(w));
}

/*
 * Is the alarm on for writes into rel (pg_wal's file system or the one of
 * rel's tablespace is below the limit), whatever spindle_disk_alarm_exempt
 * says?  Never errors: for the writers that are not producers and choose
 * to wait instead (the relocator adds annex copies and annexes:
 * queue_compact.c).  Same cost as spindle_disk_alarm_check.
 */
bool
spindle_disk_alarm_low(Relation rel)
{
	uint64		w;

	return low_slot(rel, &w) >= 0;
}

/* ----------------------------------------------------------------
 * The measurement (the launcher)
 * ----------------------------------------------------------------
 */

/*
 * statvfs() of path (relative to the data directory) into m, shown as
 * the target of the symbolic link path if it is one, else as
 * DataDir/path.
 */
static void
measure_one(Measure *m, Oid spcoid, const char *path)
{
	struct statvfs st;
	char		target[MAXPGPATH];
	ssize_t		len;

	m->spcoid = spcoid;
	len = readlink(path, target, sizeof(target) - 1);
	if (len > 0)
	{
		target[len] = '\0';
		strlcpy(m->path, target, sizeof(m->path));
	}
	else
		snprintf(m->path, sizeof(m->path), "%s/%s", DataDir, path);
	if (statvfs(path, &st) != 0)
	{
		m->err = errno;
		m->measured = false;
		m->free_bytes = 0;
		return;
	}
	m->measured = true;
	m->free_bytes = (uint64) st.f_bavail * (uint64) st.f_frsize;
}

static int
cmp_free(const void *a, const void *b)
{
	const Measure *ma = (const Measure *) a;
	const Measure *mb = (const Measure *) b;

	if (ma->free_bytes != mb->free_bytes)
		return ma->free_bytes < mb->free_bytes ? -1 : 1;
	return ma->spcoid < mb->spcoid ? -1 : ma->spcoid > mb->spcoid ? 1 : 0;
}

/*
 * Measure every entry of pg_tblspc/; returns them (palloc'd, in the
 * current memory context), the ones with least free space first when
 * there are more than DISK_ALARM_MAX_TABLESPACES.
 */
static Measure *
measure_tablespaces(int *count)
{
	DIR		   *dir;
	struct dirent *de;
	int			n = 0;
	int			size = 16;
	Measure    *ms = palloc(sizeof(Measure) * size);

	dir = AllocateDir("pg_tblspc");
	while ((de = ReadDirExtended(dir, "pg_tblspc", LOG)) != NULL)
	{
		char		path[MAXPGPATH];
		char	   *end;
		unsigned long oid = strtoul(de->d_name, &end, 10);

		if (*end != '\0' || oid == 0 || oid > PG_UINT32_MAX)
			continue;
		if (n == size)
		{
			size *= 2;
			ms = repalloc(ms, sizeof(Measure) * size);
		}
		snprintf(path, sizeof(path), "pg_tblspc/%s", de->d_name);
		measure_one(&ms[n], (Oid) oid, path);
		/* unknown: the last to be watched */
		if (!ms[n].measured)
			ms[n].free_bytes = PG_UINT64_MAX;
		n++;
	}
	FreeDir(dir);
	if (n > DISK_ALARM_MAX_TABLESPACES)
		qsort(ms, n, sizeof(Measure), cmp_free);
	*count = n;
	return ms;
}

/* The free space of m in MB as published (FREE_UNKNOWN if unmeasured). */
static uint32
free_mb_of(const Measure *m)
{
	uint64		mb;

	if (!m->measured)
		return FREE_UNKNOWN;
	mb = m->free_bytes / (1024 * 1024);
	return mb >= FREE_UNKNOWN ? FREE_UNKNOWN - 1 : (uint32) mb;
}

/*
 * Write measurement m into slot i (info under DiskAlarmLock, which the
 * caller holds exclusively, then the word), logging when the file system
 * became low, came back, or could not be measured.
 */
static void
publish(int i, const Measure *m, TimestampTz now)
{
	DiskAlarmInfo *info = &dshared->info[i];
	bool		same = info->used && info->spcoid == m->spcoid;
	bool		was_low = same && info->low;
	bool		was_measured = !same || info->measured;
	bool		low = m->measured && spindle_disk_free_limit > 0 &&
		free_mb_of(m) < (uint32) spindle_disk_free_limit;

	if (low && !was_low)
		ereport(WARNING,
				(errcode(ERRCODE_DISK_FULL),
				 errmsg("spindle disk alarm: free space on the file system of \"%s\" (%s) is below spindle.disk_free_limit (%s): inserts into spindle tables there are refused",
						m->path, pretty(m->free_bytes),
						pretty((uint64) spindle_disk_free_limit * 1024 * 1024))));
	else if (was_low && !low)
		ereport(LOG,
				(errmsg("spindle disk alarm: free space on the file system of \"%s\" is back above spindle.disk_free_limit: inserts are accepted again",
						m->path)));
	if (!m->measured && was_measured)
	{
		errno = m->err;
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("spindle disk alarm: could not get the free space of \"%s\", which is not watched: %m",
						m->path)));
	}

	info->used = true;
	info->measured = m->measured;
	info->low = low;
	info->spcoid = m->spcoid;
	info->free_bytes = m->free_bytes;
	info->measured_at = now;
	strlcpy(info->path, m->path, sizeof(info->path));
	pg_atomic_write_u64(&dshared->words[i], MAKE_WORD(m->spcoid, free_mb_of(m)));
}

/*
 * Place the watched tablespaces ms[0..n-1] in the tablespace slots: a
 * tablespace already in a slot keeps it, the slots of those no longer
 * watched are emptied first, newcomers take empty slots.  Caller holds
 * DiskAlarmLock exclusively.
 */
static void
publish_tablespaces(Measure *ms, int n, TimestampTz now)
{
	int			slot_of[DISK_ALARM_MAX_TABLESPACES];
	int			i,
				j;

	for (j = 0; j < n; j++)
		slot_of[j] = -1;
	for (i = FIRST_TS_SLOT; i < DISK_ALARM_SLOTS; i++)
	{
		DiskAlarmInfo *info = &dshared->info[i];

		if (!info->used)
			continue;
		for (j = 0; j < n; j++)
			if (ms[j].spcoid == info->spcoid)
				break;
		if (j < n)
			slot_of[j] = i;
		else
		{
			info->used = false;
			pg_atomic_write_u64(&dshared->words[i],
								MAKE_WORD(InvalidOid, FREE_UNKNOWN));
		}
	}
	for (j = 0; j < n; j++)
	{
		if (slot_of[j] < 0)
		{
			for (i = FIRST_TS_SLOT; i < DISK_ALARM_SLOTS; i++)
				if (!dshared->info[i].used)
					break;
			Assert(i < DISK_ALARM_SLOTS);
			dshared->info[i].used = false;	/* a newcomer: nothing to compare */
			slot_of[j] = i;
		}
		publish(slot_of[j], &ms[j], now);
	}
}

/*
 * One round of measurements: statvfs() of pg_wal, base/ and each
 * tablespace, published in shared memory.  Called by the spindle launcher
 * every time it wakes, outside any transaction; takes DiskAlarmLock
 * exclusively while it publishes (no statvfs() under it).
 */
void
spindle_disk_alarm_measure(void)
{
	MemoryContext old;
	Measure		wal;
	Measure		base;
	Measure    *ms;
	int			n;
	int			watched;
	uint32		lowest;
	TimestampTz now = GetCurrentTimestamp();
	int			j;

	if (dshared == NULL)
		return;
	if (measure_cxt == NULL)
		measure_cxt = AllocSetContextCreate(TopMemoryContext,
											"spindle disk alarm",
											ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(measure_cxt);

	measure_one(&wal, InvalidOid, XLOGDIR);
	measure_one(&base, DEFAULTTABLESPACE_OID, "base");
	ms = measure_tablespaces(&n);
	watched = Min(n, DISK_ALARM_MAX_TABLESPACES);

	lowest = Min(free_mb_of(&wal), free_mb_of(&base));
	for (j = 0; j < watched; j++)
		lowest = Min(lowest, free_mb_of(&ms[j]));

	LWLockAcquire(dshared->lock, LW_EXCLUSIVE);
	publish(WAL_SLOT, &wal, now);
	publish(BASE_SLOT, &base, now);
	publish_tablespaces(ms, watched, now);
	if (n - watched != dshared->unwatched)
	{
		if (n > watched)
			ereport(WARNING,
					(errmsg("spindle disk alarm: %d tablespaces, only the %d with least free space are watched",
							n, DISK_ALARM_MAX_TABLESPACES),
					 errdetail("Inserts into spindle tables of the %d others are never refused.",
							   n - watched)));
		dshared->unwatched = n - watched;
	}
	LWLockRelease(dshared->lock);
	/* after the slots: a reader seeing it sees no older slot than this */
	pg_atomic_write_u32(&dshared->lowest_free_mb, lowest);

	MemoryContextSwitchTo(old);
	MemoryContextReset(measure_cxt);
}

/* ----------------------------------------------------------------
 * spindle.disk_alarm()
 * ----------------------------------------------------------------
 */

/*
 * spindle.disk_alarm(): one row per watched file system: pg_wal or the
 * tablespace's name, the directory checked, its free bytes at the last
 * measurement (NULL if it could not be measured), this session's
 * spindle.disk_free_limit in bytes, whether inserts there are refused
 * (low), and when it was measured.  Nothing before the launcher's first
 * round.
 */
Datum
spindle_disk_alarm(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	DiskAlarmInfo *copy;
	int64		limit = (int64) spindle_disk_free_limit * 1024 * 1024;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	if (dshared == NULL)
		return (Datum) 0;
	copy = palloc(sizeof(dshared->info));
	LWLockAcquire(dshared->lock, LW_SHARED);
	memcpy(copy, dshared->info, sizeof(dshared->info));
	LWLockRelease(dshared->lock);

	for (i = 0; i < DISK_ALARM_SLOTS; i++)
	{
		DiskAlarmInfo *info = &copy[i];
		Datum		values[6];
		bool		nulls[6] = {0};
		char	   *name;

		if (!info->used)
			continue;
		if (i == WAL_SLOT)
			name = "pg_wal";
		else if ((name = get_tablespace_name(info->spcoid)) == NULL)
			continue;			/* dropped since */
		values[0] = CStringGetTextDatum(name);
		values[1] = CStringGetTextDatum(info->path);
		if (info->measured)
			values[2] = Int64GetDatum((int64) Min(info->free_bytes, (uint64) PG_INT64_MAX));
		else
			nulls[2] = true;
		values[3] = Int64GetDatum(limit);
		values[4] = BoolGetDatum(limit > 0 && info->measured &&
								 info->free_bytes / (1024 * 1024) <
								 (uint64) spindle_disk_free_limit);
		values[5] = TimestampTzGetDatum(info->measured_at);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
