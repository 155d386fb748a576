#!/usr/bin/python3
"""bench/harness.py: the spindle benchmark harness (issue 9).

Run by bench/run.sh (`make bench`, `make bench-short`), which makes the
work directory and, as root, runs this as user postgres.  In one run on one
throwaway cluster (initdb in WORKDIR/data, unix socket only, the same
settings for every system, synchronous_commit = on, fsync = on) it compares

  spindle      spindle queue API: enqueue / enqueue_batch, dequeue
  spindle_ra   spindle queue API: read + ack (two transactions per batch)
  spindle_sql  a plain spindle table, INSERT and the SKIP LOCKED DELETE
  heap         a heap table, the classic DELETE ... WHERE id = (SELECT ...
               FOR UPDATE SKIP LOCKED LIMIT n) RETURNING queue
  bare_heap    (enqueue only) the same heap table without its primary key
  pgq          PgQ: insert_event, ticker, next_batch / get_batch_events /
               finish_batch
  partman      a heap queue partitioned by id, old partitions dropped by
               pg_partman (run_maintenance every PARTMAN_EVERY seconds)

with pgbench, and writes WORKDIR/results.json, then WORKDIR/report/
benchmarks.md with its PNG plots (gnuplot).  Only the Python standard
library, psql, pgbench and gnuplot are used.  Every setting comes from the
environment (BENCH_*), see CONF below; BENCH_SHORT=1 is the CI mode.

Usage: harness.py WORKDIR            run everything, then the report
       harness.py --report WORKDIR   the report again from results.json
"""

import glob
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

# issue 9's "~120-byte jsonb payload": 118 bytes as stored jsonb (93 as text;
# the 125-character document of earlier runs was 186 bytes as jsonb)
PAYLOAD = '{"type":"order","customer":12345,"note":"some payload text here","ts":"2026-11-30T11:00:00Z"}'

SHORT = os.environ.get("BENCH_SHORT", "") not in ("", "0")


def env(name, full, short):
    v = os.environ.get("BENCH_" + name)
    if v is not None and v != "":
        return type(full)(v) if not isinstance(full, list) else v.split(",")
    return short if SHORT else full


CONF = {
    "rounds": env("ROUNDS", 3, 1),
    "secs": env("SECS", 10, 1),                   # enqueue / dequeue runs
    "backlog": env("BACKLOG", 200000, 20000),
    "enqueue_clients": env("ENQUEUE_CLIENTS", ["1", "4"], ["1", "4"]),
    "enqueue_batches": env("ENQUEUE_BATCHES", ["1", "100"], ["1", "100"]),
    "dequeue_clients": env("DEQUEUE_CLIENTS", ["1", "4"], ["4"]),
    "dequeue_batches": env("DEQUEUE_BATCHES", ["1", "10", "100"], ["1", "100"]),
    "steady_secs": env("STEADY_SECS", 600, 10),
    "steady_rate": env("STEADY_RATE", 1000, 200),
    "sample": env("SAMPLE", 10, 1),
    "held_secs": env("HELD_SECS", 360, 12),
    "held_start": env("HELD_START", 120, 3),
    "held_hold": env("HELD_HOLD", 120, 4),
    "head_backlogs": env("HEAD_BACKLOGS", ["0", "100000", "1000000"], ["0", "1000", "10000"]),
    "head_txns": env("HEAD_TXNS", 10000, 300),
    # one measurement of 10 000 calls swings by +-20 % on this shared disk,
    # more than K ever moved it: 6 rounds (each K first twice) for the median
    "head_rounds": env("HEAD_ROUNDS", 6, 1),
    "cache_secs": env("CACHE_SECS", 20, 4),
    "cache_rate": env("CACHE_RATE", 2000, 500),    # events/s the cache's producer makes
    "events_per_spindle_steady": env("STEADY_EVENTS_PER_SPINDLE", 1000, 1000),
    "partman_interval": env("PARTMAN_INTERVAL", 10000, 10000),
    "partman_bulk_interval": env("PARTMAN_BULK_INTERVAL", 1000000, 1000000),
    "partman_premake": env("PARTMAN_PREMAKE", 30, 30),
    "partman_every": env("PARTMAN_EVERY", 1.0, 1.0),
    "partman_retention": env("PARTMAN_RETENTION", 50000, 50000),
    "pgq_tick_every": env("PGQ_TICK_EVERY", 1.0, 1.0),
    "pgq_maint_every": env("PGQ_MAINT_EVERY", 30, 5),
    "pgq_rotation": env("PGQ_ROTATION", "1 min", "5 s"),
    # steady/held systems run one after the other (full) or side by side,
    # each in a database of its own (short: proves the harness, not speed)
    "steady_parallel": env("STEADY_PARALLEL", 0, 1),
    "steady_systems": env("STEADY_SYSTEMS",
                          ["spindle", "spindle_ra", "spindle_sql", "heap", "pgq", "partman"],
                          ["spindle", "spindle_ra", "spindle_sql", "heap", "pgq", "partman"]),
    "shared_buffers": env("SHARED_BUFFERS", "1GB", "128MB"),
    "port": env("PORT", 5514, 5514),
}

SERVER_SETTINGS = [
    ("shared_preload_libraries", "'spindle'"),
    ("listen_addresses", "''"),
    ("max_connections", "100"),
    ("shared_buffers", "'%s'" % CONF["shared_buffers"]),
    ("synchronous_commit", "on"),
    ("fsync", "on"),
    ("full_page_writes", "on"),
    ("wal_level", "replica"),
    ("max_wal_size", "'8GB'"),
    ("checkpoint_timeout", "'30min'"),
    ("max_locks_per_transaction", "256"),
    ("logging_collector", "off"),
    ("log_min_messages", "warning"),
    # every autovacuum is logged: the harness counts them per run and table
    ("log_autovacuum_min_duration", "0"),
]

LABEL = {
    "spindle": "spindle dequeue",
    "spindle_ra": "spindle read+ack",
    "spindle_sql": "spindle table, SKIP LOCKED",
    "heap": "heap SKIP LOCKED",
    "bare_heap": "bare heap INSERT",
    "pgq": "PgQ",
    "partman": "partitioned heap (pg_partman)",
    "ceiling": "commit ceiling",
}
ENQ_LABEL = dict(LABEL, spindle="spindle enqueue", spindle_sql="spindle table, INSERT",
                 heap="heap queue INSERT")

COLS = "(id bigserial PRIMARY KEY, enqueued_at timestamptz NOT NULL DEFAULT now(), " \
       "prio int NOT NULL DEFAULT 0, payload jsonb NOT NULL)"


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


def median(xs):
    return statistics.median(xs) if xs else None


# --------------------------------------------------------------------------
# the cluster


class Cluster:
    def __init__(self, work):
        self.work = work
        self.bindir = os.environ["BENCH_PGBIN"]
        self.data = os.path.join(work, "data")
        self.sock = os.path.join(work, "sock")
        self.port = CONF["port"]
        self.logfile = os.path.join(work, "server.log")
        self.sqldir = os.path.join(work, "sql")
        os.makedirs(self.sqldir, exist_ok=True)
        os.makedirs(self.sock, exist_ok=True)
        self.nscript = 0

    def bin(self, name):
        return os.path.join(self.bindir, name)

    def initdb(self):
        subprocess.run([self.bin("initdb"), "-D", self.data, "-A", "trust", "-U", "postgres",
                        "--no-sync"], check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write("\n# spindle bench harness\n")
            for k, v in SERVER_SETTINGS:
                f.write("%s = %s\n" % (k, v))
            f.write("port = %d\nunix_socket_directories = '%s'\n" % (self.port, self.sock))

    def start(self):
        subprocess.run([self.bin("pg_ctl"), "-D", self.data, "-l", self.logfile, "-w", "-t", "120",
                        "start"], check=True, stdout=subprocess.DEVNULL)

    def stop(self):
        subprocess.run([self.bin("pg_ctl"), "-D", self.data, "-m", "fast", "-w", "stop"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def restart(self):
        subprocess.run([self.bin("pg_ctl"), "-D", self.data, "-l", self.logfile, "-m", "fast",
                        "-w", "-t", "120", "restart"], check=True, stdout=subprocess.DEVNULL)

    def conn_args(self, db):
        return ["-h", self.sock, "-p", str(self.port), "-U", "postgres", "-d", db]

    def psql(self, sql, db="bench", check=True):
        r = subprocess.run([self.bin("psql"), "-X", "-At", "-q", "-v", "ON_ERROR_STOP=1"]
                           + self.conn_args(db), input=sql, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError("psql failed (%s): %s\n%s" % (db, r.stderr.strip(), sql[:2000]))
        return r.stdout.strip()

    def q1(self, sql, db="bench"):
        out = self.psql(sql, db)
        return out.splitlines()[-1] if out else ""

    def num(self, sql, db="bench"):
        v = self.q1(sql, db)
        return float(v) if v not in ("", None) else 0.0

    def script(self, text):
        self.nscript += 1
        path = os.path.join(self.sqldir, "s%03d.sql" % self.nscript)
        with open(path, "w") as f:
            f.write(text)
        return path

    def pgbench_cmd(self, script, clients, db, secs=None, txns=None, rate=None, progress=None,
                    log_prefix=None):
        cmd = [self.bin("pgbench"), "-n", "-M", "prepared", "-c", str(clients), "-j", str(clients),
               "-f", script] + self.conn_args(db)[:6]
        if log_prefix is not None:
            cmd += ["-l", "--log-prefix=%s" % log_prefix]
        if secs is not None:
            cmd += ["-T", str(max(1, int(round(secs))))]
        if txns is not None:
            cmd += ["-t", str(int(txns))]
        if rate is not None:
            cmd += ["-R", str(rate)]
        if progress is not None:
            cmd += ["-P", str(progress)]
        return cmd + [db]

    def pgbench(self, script, clients, db="bench", options=None, **kw):
        """Runs pgbench; options, if given, is the PGOPTIONS of its sessions."""
        env = dict(os.environ, PGOPTIONS=options) if options else None
        r = subprocess.run(self.pgbench_cmd(script, clients, db, **kw), capture_output=True, text=True,
                           env=env)
        if r.returncode != 0:
            raise RuntimeError("pgbench failed: %s\n%s" % (r.stderr[-2000:], r.stdout[-2000:]))
        return parse_pgbench(r.stdout)

    def log_offset(self):
        """Where the server log ends now (autovacuums() reads from there)."""
        return os.path.getsize(self.logfile) if os.path.exists(self.logfile) else 0

    def autovacuums(self, since):
        """The tables autovacuum vacuumed since log offset `since`, as a list
        of "database.schema.table" (log_autovacuum_min_duration = 0 logs each
        one; a table's pg_stat counters would vanish with a dropped partition)."""
        with open(self.logfile, errors="replace") as f:
            f.seek(since)
            return re.findall(r'automatic vacuum of table "([^"]+)"', f.read())

    def vacuum_bookkeeping(self, db="bench"):
        """VACUUMs the catalogs and the extensions' bookkeeping tables, which
        each run's setup and teardown churn: autovacuum would otherwise come
        to them during the next measured run (it did, in a third of them)."""
        self.psql("VACUUM pg_catalog.pg_class, pg_catalog.pg_attribute, pg_catalog.pg_type, "
                  "pg_catalog.pg_depend, pg_catalog.pg_attrdef, pg_catalog.pg_constraint, "
                  "pg_catalog.pg_index, pg_catalog.pg_inherits, pg_catalog.pg_statistic, "
                  "pg_catalog.pg_sequence, pg_catalog.pg_shdepend, pg_catalog.pg_init_privs, "
                  "spindle.spindle_catalog, spindle.table_catalog, pgq.tick, pgq.subscription",
                  db)

    def wait_autovacuum_idle(self, limit=120):
        """Waits until no autovacuum worker runs (at most `limit` s), so that a
        measured run does not share the machine and the WAL with the vacuum of
        what an earlier run left.  Returns the seconds waited."""
        t = time.time()
        while time.time() - t < limit:
            if self.num("SELECT count(*) FROM pg_stat_activity "
                        "WHERE backend_type = 'autovacuum worker'", "postgres") == 0:
                break
            time.sleep(1)
        return round(time.time() - t, 1)

    def lsn(self, db="bench"):
        return self.q1("SELECT pg_current_wal_insert_lsn()", db)

    def wal_bytes(self, a, b, db="bench"):
        return self.num("SELECT pg_wal_lsn_diff('%s', '%s')" % (b, a), db)

    def wal_records(self, a, b, events, db="bench"):
        """The WAL from a to b by record type (pg_walinspect), per event:
        {"rmgr/type": [records, record bytes, page image bytes]}, or None
        without pg_walinspect.  Reads up to what is flushed (pgbench's
        commits flushed the run's WAL)."""
        try:
            rows = self.psql(
                "SELECT \"resource_manager/record_type\", count, record_size, fpi_size "
                "FROM pg_get_wal_stats('%s', least('%s'::pg_lsn, pg_current_wal_flush_lsn()), true) "
                "WHERE count > 0" % (a, b), db)
        except Exception as ex:
            log("WAL records not measured: %s" % str(ex).splitlines()[0])
            return None
        out = {}
        for line in rows.splitlines():
            kind, n, rec, fpi = line.split("|")
            out[kind] = [int(n) / events, int(rec) / events, int(fpi) / events]
        return out


def parse_pgbench(out):
    res = {}
    m = re.search(r"number of transactions actually processed: (\d+)", out)
    res["xacts"] = int(m.group(1)) if m else 0
    m = re.search(r"latency average = ([\d.]+) ms", out)
    res["lat_ms"] = float(m.group(1)) if m else None
    m = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
    res["tps"] = float(m.group(1)) if m else 0.0
    return res


# --------------------------------------------------------------------------
# the systems: how each creates its queue, enqueues, dequeues, and what it owns


def sq(s):
    return s.replace("'", "''")


class System:
    name = None
    seq = None

    def __init__(self, c, db="bench"):
        self.c, self.db = c, db

    def sql(self, text):
        return self.c.psql(text, self.db)

    def num(self, text):
        return self.c.num(text, self.db)

    # produced / consumed totals (normalized by the caller), size in bytes
    def produced(self):
        return self.num("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM %s" % self.seq)

    def backlog(self):
        return self.num("SELECT count(*) FROM %s" % self.table)

    def counters(self):
        p = self.produced()
        return p, p - self.backlog()

    def teardown(self):
        """Drops what setup() made: a run leaves nothing for autovacuum to
        work on while the next one is measured."""
        self.sql("DROP TABLE IF EXISTS %s" % self.table)

    # what the queue owns, as "schema.table" patterns: its own storage, and
    # the bookkeeping tables the system keeps beside it
    owns_queue = None
    owns_bookkeeping = None

    def owner_of(self, rel):
        """"queue", "bookkeeping" or "other" for an autovacuumed schema.table."""
        if self.owns_queue and re.match(self.owns_queue, rel):
            return "queue"
        if self.owns_bookkeeping and re.match(self.owns_bookkeeping, rel):
            return "bookkeeping"
        return "other"


class HeapLike(System):
    table = "hq"
    using = ""
    pk = True

    @property
    def owns_queue(self):
        return r"public\.%s$" % self.table

    def setup(self, steady=False):
        cols = COLS if self.pk else COLS.replace(" PRIMARY KEY", "")
        self.sql("DROP TABLE IF EXISTS %s; CREATE TABLE %s %s %s;" % (self.table, self.table, cols,
                                                                       self.using))
        self.seq = "%s_id_seq" % self.table

    def enqueue_sql(self, n):
        if n == 1:
            return "INSERT INTO %s (prio, payload) VALUES (0, '%s');\n" % (self.table, PAYLOAD)
        return ("INSERT INTO %s (prio, payload) SELECT 0, '%s' FROM generate_series(1, %d);\n"
                % (self.table, PAYLOAD, n))

    def dequeue_sql(self, n):
        t = self.table
        if n == 1:
            return ("DELETE FROM %s WHERE id = (SELECT id FROM %s ORDER BY id LIMIT 1 "
                    "FOR UPDATE SKIP LOCKED) RETURNING id, enqueued_at, prio, payload;\n" % (t, t))
        return ("DELETE FROM %s WHERE id = ANY (ARRAY(SELECT id FROM %s ORDER BY id LIMIT %d "
                "FOR UPDATE SKIP LOCKED)) RETURNING id, enqueued_at, prio, payload;\n" % (t, t, n))

    def fill(self, n):
        done = 0
        while done < n:
            k = min(50000, n - done)
            self.sql("INSERT INTO %s (prio, payload) SELECT 0, '%s' FROM generate_series(1, %d)"
                     % (self.table, PAYLOAD, k))
            done += k
        self.sql("VACUUM ANALYZE %s" % self.table)

    def size(self):
        return self.num("SELECT pg_total_relation_size('%s')" % self.table)

    def vacuums(self):
        return self.num("SELECT coalesce(sum(autovacuum_count + vacuum_count), 0) "
                        "FROM pg_stat_user_tables WHERE relid = '%s'::regclass" % self.table)


class Heap(HeapLike):
    name = "heap"


class BareHeap(HeapLike):
    name = "bare_heap"
    table = "hb"
    pk = False


class SpindleSQL(HeapLike):
    name = "spindle_sql"
    table = "st"

    def setup(self, steady=False):
        eps = CONF["events_per_spindle_steady"] if steady else None
        self.using = "USING spindle" + (" WITH (events_per_spindle = %d)" % eps if eps else "")
        HeapLike.setup(self)

    owns_queue = r"public\.st$|pg_spindle\."
    owns_bookkeeping = r"spindle\."

    def queue_size(self):
        return self.num("SELECT pg_total_relation_size('st') + coalesce((SELECT size_bytes "
                        "FROM spindle.tables WHERE relation = 'st'::regclass), 0)")

    def size(self):
        return self.queue_size() + self.num("SELECT " + SPINDLE_BOOKKEEPING)

    def vacuums(self):
        return self.num("SELECT coalesce(sum(autovacuum_count + vacuum_count), 0) "
                        "FROM pg_stat_user_tables WHERE relid = 'st'::regclass "
                        "OR schemaname = 'pg_spindle'")

    def spindles(self):
        return self.num("SELECT count(*) FROM spindle.spindles")


# spindle's per-database directory: a row per spindle, updated as the
# spindle fills, settles and is dropped; ordinary heap tables
SPINDLE_BOOKKEEPING = ("pg_total_relation_size('spindle.spindle_catalog') + "
                       "pg_total_relation_size('spindle.table_catalog')")


class Spindle(System):
    name = "spindle"
    table = "spindle_q.q"
    owns_queue = r"spindle_q\.q$|pg_spindle\."
    owns_bookkeeping = r"spindle\."

    def teardown(self):
        self.sql("SELECT spindle.drop_queue('q', if_exists => true)")

    def setup(self, steady=False):
        eps = CONF["events_per_spindle_steady"] if steady else None
        self.sql("SELECT spindle.drop_queue('q', if_exists => true);")
        if eps:
            self.sql("SELECT spindle.create_queue('q', events_per_spindle => %d);" % eps)
        else:
            self.sql("SELECT spindle.create_queue('q');")

    def enqueue_sql(self, n):
        if n == 1:
            return "SELECT spindle.enqueue('q', '%s');\n" % PAYLOAD
        return ("SELECT count(*) FROM spindle.enqueue_batch('q', array_fill('%s'::jsonb, "
                "ARRAY[%d]));\n" % (PAYLOAD, n))

    def dequeue_sql(self, n):
        return "SELECT msg_id, enqueued_at, payload FROM spindle.dequeue('q', %d);\n" % n

    def fill(self, n):
        done = 0
        while done < n:
            k = min(10000, n - done)
            self.sql("SELECT count(*) FROM spindle.enqueue_batch('q', array_fill('%s'::jsonb, "
                     "ARRAY[%d]))" % (PAYLOAD, k))
            done += k
        self.sql("ANALYZE spindle_q.q")

    def produced(self):
        # appended events of the existing spindles + those of the dropped
        # ones (full: events_per_spindle each)
        return self.num("SELECT events + spindles_dropped * events_per_spindle FROM spindle.tables "
                        "WHERE relation = 'spindle_q.q'::regclass")

    def queue_size(self):
        """The facade, its indexes and TOAST, and every spindle."""
        return self.num("SELECT pg_total_relation_size('spindle_q.q') + coalesce((SELECT size_bytes "
                        "FROM spindle.tables WHERE relation = 'spindle_q.q'::regclass), 0)")

    def size(self):
        """queue_size() and spindle's bookkeeping tables (the only queue of
        its database: they are all its own)."""
        return self.queue_size() + self.num("SELECT " + SPINDLE_BOOKKEEPING)

    def map_size(self):
        """The facade's main fork: its metapage and slot map."""
        return self.num("SELECT pg_relation_size('spindle_q.q')")

    def vacuums(self):
        return self.num("SELECT coalesce(sum(autovacuum_count + vacuum_count), 0) "
                        "FROM pg_stat_user_tables WHERE relid = 'spindle_q.q'::regclass "
                        "OR schemaname = 'pg_spindle'")

    def spindles(self):
        return self.num("SELECT count(*) FROM spindle.spindles")


class SpindleRA(Spindle):
    name = "spindle_ra"

    def dequeue_sql(self, n):
        return ("SELECT coalesce(array_agg(msg_id), '{}') AS ids, coalesce(json_agg(payload), '[]') "
                "AS payloads FROM spindle.read('q', %d, '60 s') \\gset\n"
                "SELECT count(*) FROM spindle.ack('q', CAST(:ids AS bigint[]));\n" % n)


class Partman(HeapLike):
    name = "partman"
    table = "pq"
    owns_queue = r"public\.pq(_.*)?$"
    owns_bookkeeping = r"partman\."

    def setup(self, steady=False):
        self.seq = "pq_id_seq"
        self.teardown()
        self.sql("CREATE TABLE pq %s PARTITION BY RANGE (id);" % COLS)
        # the steady runs drop old partitions as they are consumed; the
        # enqueue and dequeue runs make millions of events in seconds, which
        # partitions of 10 000 premade 30 ahead cannot hold (they went to the
        # default partition): those get partitions of partman_bulk_interval
        self.interval = CONF["partman_interval"] if steady else CONF["partman_bulk_interval"]
        self.sql("SELECT partman.create_parent('public.pq', 'id', 'native', '%d', p_premake => %d, "
                 "p_jobmon => false);" % (self.interval, CONF["partman_premake"]))
        if steady:
            self.sql("UPDATE partman.part_config SET retention = '%d', retention_keep_table = false "
                     "WHERE parent_table = 'public.pq'" % CONF["partman_retention"])

    def maintain(self):
        self.sql("SELECT partman.run_maintenance('public.pq', p_jobmon => false)")

    def fill(self, n):
        done = 0
        step = self.interval
        while done < n:
            k = min(step, n - done)
            self.sql("INSERT INTO pq (prio, payload) SELECT 0, '%s' FROM generate_series(1, %d)"
                     % (PAYLOAD, k))
            self.maintain()
            done += k
        self.sql("VACUUM ANALYZE pq")

    def parts(self):
        return ("(SELECT inhrelid FROM pg_inherits WHERE inhparent = 'pq'::regclass "
                "UNION ALL SELECT 'pq'::regclass)")

    def size(self):
        return self.num("SELECT sum(pg_total_relation_size(r)) FROM %s p(r)" % self.parts())

    def vacuums(self):
        return self.num("SELECT coalesce(sum(autovacuum_count + vacuum_count), 0) "
                        "FROM pg_stat_user_tables WHERE relid IN %s" % self.parts())

    def in_default(self):
        return self.num("SELECT count(*) FROM pq_default")

    def teardown(self):
        self.sql("DROP TABLE IF EXISTS pq CASCADE; "
                 "DELETE FROM partman.part_config WHERE parent_table = 'public.pq'; "
                 "DROP TABLE IF EXISTS partman.template_public_pq;")


class PgQ(System):
    name = "pgq"
    owns_queue = r"pgq\."

    def setup(self, steady=False):
        self.teardown()
        self.sql("SELECT pgq.create_queue('q'); SELECT pgq.register_consumer('q', 'c');")
        if steady:
            # PgQ truncates an event table once rotation has moved past it:
            # at its default period of 2 hours it would never do so in a
            # steady run, so it runs with the period a busy queue is given
            self.sql("SELECT pgq.set_queue_config('q', 'rotation_period', '%s')"
                     % CONF["pgq_rotation"])

    def teardown(self):
        self.sql("SELECT pgq.drop_queue('q', true) FROM pgq.queue WHERE queue_name = 'q';")

    def enqueue_sql(self, n):
        if n == 1:
            return "SELECT pgq.insert_event('q', 'ev', '%s');\n" % PAYLOAD
        return ("SELECT count(pgq.insert_event('q', 'ev', '%s')) FROM generate_series(1, %d);\n"
                % (PAYLOAD, n))

    def dequeue_sql(self, n):
        # one batch per transaction; its size is set by the ticks
        return ("BEGIN;\n"
                "SELECT coalesce(pgq.next_batch('q', 'c'), 0) AS bid \\gset\n"
                "\\if :bid > 0\n"
                "SELECT ev_id, ev_time, ev_data FROM pgq.get_batch_events(:bid);\n"
                "SELECT pgq.finish_batch(:bid);\n"
                "\\endif\n"
                "COMMIT;\n")

    def fill(self, n, per_batch):
        # one tick after every per_batch events: batches of exactly per_batch.
        # The fill is not measured: its commits do not wait for the disk.
        self.sql("SELECT pgq.set_queue_config('q', 'ticker_max_count', '%d')" % per_batch)
        self.sql("SET synchronous_commit = off;\n"
                 "DO $$ BEGIN FOR i IN 1..%d LOOP "
                 "PERFORM pgq.insert_event('q', 'ev', '%s') FROM generate_series(1, %d); COMMIT; "
                 "PERFORM pgq.ticker('q'); COMMIT; END LOOP; END $$;"
                 % (n // per_batch, PAYLOAD, per_batch))
        self.sql("SELECT pgq.set_queue_config('q', 'ticker_max_count', '500')")

    def tick(self):
        self.sql("SELECT pgq.ticker()")

    def maint(self):
        self.sql("DO $$ DECLARE r record; BEGIN "
                 "FOR r IN SELECT * FROM pgq.maint_operations() LOOP "
                 "IF r.func_arg IS NULL THEN EXECUTE 'SELECT ' || r.func_name || '()'; "
                 "ELSE EXECUTE 'SELECT ' || r.func_name || '($1)' USING r.func_arg; END IF; "
                 "END LOOP; END $$")

    def counters(self):
        row = self.sql("SELECT pgq.seq_getval(queue_event_seq), "
                       "(SELECT t.tick_event_seq FROM pgq.subscription s JOIN pgq.tick t "
                       "ON t.tick_queue = s.sub_queue AND t.tick_id = s.sub_last_tick "
                       "WHERE s.sub_queue = q.queue_id) FROM pgq.queue q WHERE queue_name = 'q'")
        a, b = row.split("|")
        return float(a or 0), float(b or 0)

    def backlog(self):
        p, c = self.counters()
        return p - c

    def size(self):
        return self.num("SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
                        "JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE n.nspname = 'pgq' AND c.relkind = 'r'")

    def vacuums(self):
        return self.num("SELECT coalesce(sum(autovacuum_count + vacuum_count), 0) "
                        "FROM pg_stat_user_tables WHERE schemaname = 'pgq'")


SYSTEMS = {k.name: k for k in (Spindle, SpindleRA, SpindleSQL, Heap, BareHeap, PgQ, Partman)}


class Ceiling(System):
    name = "ceiling"
    table = "ceiling"

    def setup(self, steady=False):
        self.sql("DROP TABLE IF EXISTS ceiling; CREATE TABLE ceiling (id int);")

    def enqueue_sql(self, n):
        return "INSERT INTO ceiling VALUES (1);\n"


def make_db(c, db):
    c.psql("DROP DATABASE IF EXISTS %s WITH (FORCE)" % db, "postgres")
    c.psql("CREATE DATABASE %s" % db, "postgres")
    c.psql("CREATE EXTENSION spindle; CREATE EXTENSION pgq; CREATE SCHEMA partman; "
           "CREATE EXTENSION pg_partman SCHEMA partman;", db)
    try:
        # the WAL of a run by record type (c.wal_records), where contrib has it
        c.psql("CREATE EXTENSION pg_walinspect", db)
    except Exception as ex:
        log("no pg_walinspect in %s: %s" % (db, str(ex).splitlines()[0]))


class Background:
    """A function called every `every` seconds in a thread until stop()."""

    def __init__(self, fn, every):
        self.fn, self.every = fn, every
        self.ev = threading.Event()
        self.errors = []
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def loop(self):
        while not self.ev.wait(self.every):
            try:
                self.fn()
            except Exception as e:   # keep going; reported
                self.errors.append(str(e)[:300])

    def stop(self):
        self.ev.set()
        self.t.join()


def helpers_for(sysobj):
    """The maintenance each system needs while it runs (what a deployment runs)."""
    if isinstance(sysobj, Partman):
        return [Background(sysobj.maintain, CONF["partman_every"])]
    if isinstance(sysobj, PgQ):
        return [Background(sysobj.tick, CONF["pgq_tick_every"]),
                Background(sysobj.maint, CONF["pgq_maint_every"])]
    return []


# --------------------------------------------------------------------------
# workloads


def w_enqueue(c, R):
    systems = ["spindle", "spindle_sql", "heap", "bare_heap", "pgq", "partman"]
    res = R.setdefault("enqueue", {})
    for rnd in range(CONF["rounds"]):
        for clients in map(int, CONF["enqueue_clients"]):
            # the commit ceiling: a one-row INSERT per transaction
            runs = [("ceiling", 1)] + [(s, int(b)) for b in CONF["enqueue_batches"] for s in systems]
            # each round starts from another system: none always runs right
            # after the same one
            runs = runs[rnd % len(runs):] + runs[:rnd % len(runs)]
            for name, batch in runs:
                enqueue_record(c, res, rnd, name, clients, batch)


def enqueue_record(c, res, rnd, name, clients, batch):
    """One enqueue run into res["name|clients|batch"]; a failure is recorded
    there and what the run made is dropped."""
    key = "%s|%d|%d" % (name, clients, batch)
    e = res.setdefault(key, {"rate": [], "wal": [], "lat": []})
    try:
        enqueue_once(c, name, clients, batch, e)
    except Exception as ex:
        e.setdefault("errors", []).append(str(ex)[:1000])
        log("enqueue %s FAILED: %s" % (key, str(ex).splitlines()[0]))
        teardown_quietly(c, name)
        return
    log("enqueue round %d %-12s clients %d batch %3d: %8.0f events/s, %5.0f B/event"
        % (rnd + 1, name, clients, batch, e["rate"][-1], e["wal"][-1] or 0))


def enqueue_once(c, name, clients, batch, e):
    s = Ceiling(c) if name == "ceiling" else SYSTEMS[name](c)
    # the checkpoint comes before the queue is made: the runs write no full
    # page images of pages they made themselves
    c.psql("CHECKPOINT")
    s.setup()
    script = c.script(s.enqueue_sql(batch))
    c.vacuum_bookkeeping()
    e.setdefault("waited_for_autovacuum", []).append(c.wait_autovacuum_idle())
    bg = helpers_for(s)
    try:
        off = c.log_offset()
        l0 = c.lsn()
        r = c.pgbench(script, clients, secs=CONF["secs"])
        l1 = c.lsn()
        e.setdefault("autovacuums", []).append(c.autovacuums(off))
    finally:
        for b in bg:
            b.stop()
        e.setdefault("helper_errors", []).extend(x for b in bg for x in b.errors)
    events = r["xacts"] * batch
    e["rate"].append(r["tps"] * batch)
    e["wal"].append(c.wal_bytes(l0, l1) / events if events else None)
    if clients == 1 and events:
        e.setdefault("records", []).append(c.wal_records(l0, l1, events))
    e["lat"].append(r["lat_ms"])
    if name == "partman":
        e.setdefault("in_default", []).append(s.in_default())
    s.teardown()


def teardown_quietly(c, name):
    """After a failed run: drops what it made if it can, so that the next
    runs are not measured beside it."""
    try:
        (Ceiling(c) if name == "ceiling" else SYSTEMS[name](c)).teardown()
    except Exception as ex:
        log("teardown of %s failed too: %s" % (name, str(ex).splitlines()[0]))


def dequeue_once(c, name, clients, batch):
    s = SYSTEMS[name](c)
    # the checkpoint comes before the fill: the consumers write no full
    # page images of the pages the fill made (as in a queue whose events
    # were written since the last checkpoint)
    c.psql("CHECKPOINT")
    s.setup()
    if name == "pgq":
        s.fill(CONF["backlog"], batch)
    else:
        s.fill(CONF["backlog"])
    script = c.script(s.dequeue_sql(batch))
    bg = helpers_for(s) if name == "partman" else []   # PgQ: the fill made the ticks
    try:
        # warm-up gives the rate; the measured run is then a fixed number of
        # transactions that leaves >= 20% of the backlog: never runs dry.  The
        # warm-up is a fixed share of the backlog too: a timed one drained
        # the whole backlog of a system faster than backlog / warmup events/s
        # (spindle's dequeue(100): > 100 000 events/s), leaving nothing to
        # measure (its rate came out 0)
        w = c.pgbench(script, clients,
                      txns=max(1, int(CONF["backlog"] * 0.05 / batch / clients)))
        left = s.backlog()
        target = min(0.8 * left, max(w["tps"] * batch * CONF["secs"], 1))
        txns = max(1, int(target / batch / clients))
        b0 = left
        c.vacuum_bookkeeping()
        waited = c.wait_autovacuum_idle()
        off = c.log_offset()
        l0 = c.lsn()
        r = c.pgbench(script, clients, txns=txns)
        l1 = c.lsn()
        b1 = s.backlog()
        av = c.autovacuums(off)
    finally:
        for b in bg:
            b.stop()
    consumed = b0 - b1
    rate = consumed * r["tps"] / r["xacts"] if r["xacts"] else 0
    d = {"rate": rate, "wal": c.wal_bytes(l0, l1) / consumed if consumed else None,
         "lat": r["lat_ms"], "consumed": consumed, "expected": r["xacts"] * batch,
         "backlog_left": b1, "secs": r["xacts"] / r["tps"] if r["tps"] else None,
         "waited_for_autovacuum": waited, "autovacuums": av,
         "helper_errors": [x for b in bg for x in b.errors]}
    s.teardown()
    return d


def w_dequeue(c, R):
    res = R.setdefault("dequeue", {})
    systems = ["spindle", "spindle_ra", "spindle_sql", "heap", "pgq", "partman"]
    for rnd in range(CONF["rounds"]):
        for clients in map(int, CONF["dequeue_clients"]):
            for batch in map(int, CONF["dequeue_batches"]):
                # the commit ceiling again, among these runs: the dequeue
                # targets are read against it
                if batch == 1:
                    enqueue_record(c, res, rnd, "ceiling", clients, 1)
                for name in systems[rnd % len(systems):] + systems[:rnd % len(systems)]:
                    # PgQ consumers are subscriptions that each get every
                    # event: only one consumer, batches of 10 and more
                    if name == "pgq" and (clients != 1 or batch < 10):
                        continue
                    dequeue_record(c, res, rnd, name, clients, batch)
    # PgQ with one consumer: also at the batch sizes it was not run with
    if "1" not in CONF["dequeue_clients"]:
        for rnd in range(CONF["rounds"]):
            for batch in [b for b in map(int, CONF["dequeue_batches"]) if b >= 10]:
                dequeue_record(c, res, rnd, "pgq", 1, batch)


def dequeue_record(c, res, rnd, name, clients, batch):
    key = "%s|%d|%d" % (name, clients, batch)
    e = res.setdefault(key, {"rate": [], "wal": [], "lat": [], "short": []})
    try:
        d = dequeue_once(c, name, clients, batch)
    except Exception as ex:
        e.setdefault("errors", []).append(str(ex)[:1000])
        log("dequeue %s FAILED: %s" % (key, str(ex).splitlines()[0]))
        teardown_quietly(c, name)
        return
    e["rate"].append(d["rate"])
    e["wal"].append(d["wal"])
    e["lat"].append(d["lat"])
    for k in ("secs", "waited_for_autovacuum", "autovacuums", "helper_errors"):
        e.setdefault(k, []).append(d[k])
    # events handed out short of batch x transactions (ran dry)
    e["short"].append(d["expected"] - d["consumed"])
    log("dequeue round %d %-12s consumers %d batch %3d: %8.0f events/s, %6.1f B/event"
        % (rnd + 1, name, clients, batch, d["rate"], d["wal"] or 0))


CATALOGS = ["pg_class", "pg_attribute", "pg_type", "pg_depend"]


def steady_run(c, names, secs, hold=None):
    """Steady state: for each system, 2 producers at STEADY_RATE events/s in
    all (one event per transaction) and 2 consumers (10 events per call, at
    most 1.5x the produce rate; PgQ: one consumer, one batch per tick), in a
    database of its own.  Samples every SAMPLE s, and every second from just
    before the end of a hold to a minute after it; no sample after the
    pgbench runs end.  hold = (start, length): a REPEATABLE READ transaction
    held open in each database meanwhile.  The consumers log each call
    (pgbench -l): call_windows() turns that into their dequeue rate per
    second of their own busy time, before, during and after the hold."""
    rate = CONF["steady_rate"]
    runs = {}
    for name in names:
        db = "steady_" + name
        make_db(c, db)
        s = SYSTEMS[name](c, db)
        s.setup(steady=True)
        runs[name] = {"sys": s, "db": db, "samples": [], "errors": [],
                      "log": os.path.join(c.sqldir, "calls_%s" % name)}
    procs, bgs = [], []
    off = c.log_offset()
    t0 = time.time()
    for name, run in runs.items():
        s, db = run["sys"], run["db"]
        prod = c.script(s.enqueue_sql(1))
        cons = c.script(s.dequeue_sql(10))
        run["stat0"] = [s.counters(), s.vacuums()]
        run["procs"] = [subprocess.Popen(c.pgbench_cmd(prod, 2, db, secs=secs, rate=rate),
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
        crate = 10 if name == "pgq" else max(1, rate * 3 // 20)
        run["procs"].append(subprocess.Popen(
            c.pgbench_cmd(cons, 1 if name == "pgq" else 2, db, secs=secs, rate=crate,
                          log_prefix=run["log"]),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        procs += run["procs"]
        run["helpers"] = helpers_for(s)
        bgs += run["helpers"]
    hold_procs = []
    hold_end = hold[0] + hold[1] if hold else None

    def start_hold():
        for run in runs.values():
            p = subprocess.Popen([c.bin("psql"), "-X", "-q"] + c.conn_args(run["db"]),
                                 stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, text=True)
            p.stdin.write("BEGIN ISOLATION LEVEL REPEATABLE READ;\nSELECT 1;\nSELECT pg_sleep(%f);\n"
                          "COMMIT;\n" % hold[1])
            p.stdin.close()
            hold_procs.append(p)

    held = checked = False
    nxt = 0.0
    while True:
        now = time.time() - t0
        if hold and not held and now >= hold[0]:
            start_hold()
            held = True
        for name, run in runs.items():
            try:
                run["samples"].append(sample(c, run["sys"], run["db"], t0))
            except Exception as e:
                run["errors"].append("sampling: " + str(e)[:300])
        if held and not checked and now >= hold[0] + 2:
            checked = True
            for run in runs.values():
                # the held snapshot is there: a session of this database
                # with an xmin, sleeping
                run["hold_seen"] = c.num(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND backend_xmin IS NOT NULL AND query LIKE '%pg_sleep%'", run["db"]) > 0
        fine = hold_end is not None and hold_end - 2 <= now <= hold_end + 60
        nxt += 1.0 if fine else CONF["sample"]
        if nxt > secs - 0.5:
            if now >= secs - 1.0:
                break
            nxt = secs - 0.5    # the last sample, while pgbench still runs
        time.sleep(max(0.0, t0 + nxt - time.time()))
    for run in runs.values():
        run["outs"] = [p.communicate() for p in run["procs"]]
    for p in hold_procs:
        p.wait()
    for b in bgs:
        b.stop()
    avs = c.autovacuums(off)
    result = {}
    for name, run in runs.items():
        result[name] = steady_result(c, name, run, secs, rate, hold, t0, avs)
    for name, run in runs.items():
        c.psql("DROP DATABASE IF EXISTS %s WITH (FORCE)" % run["db"], "postgres")
    return result


def sample(c, s, db, t0):
    """One sample of a steady run: counters, size, VACUUM counts, catalogs."""
    p, cons = s.counters()
    cat = c.psql("SELECT " + ", ".join("pg_total_relation_size('%s')" % k for k in CATALOGS),
                 db).split("|")
    smp = {"t": round(time.time() - t0, 2), "produced": p, "consumed": cons,
           "size": s.size(), "vacuums": s.vacuums(),
           "catalog": sum(float(x) for x in cat),
           "catalogs": dict(zip(CATALOGS, (float(x) for x in cat)))}
    if hasattr(s, "queue_size"):
        smp["queue_size"] = s.queue_size()
    if hasattr(s, "spindles"):
        smp["spindles"] = s.spindles()
    if hasattr(s, "map_size"):
        smp["map_size"] = s.map_size()
    return smp


def steady_result(c, name, run, secs, rate, hold, t0, avs):
    """What a steady run of one system measured: its samples (counters made
    relative to the start), the pgbench figures and exit codes, the
    autovacuums of what it owns (from the server log), its consumers' rate
    per busy second in each window."""
    s = run["sys"]
    p0, c0 = run["stat0"][0]
    samples = run["samples"]
    for smp in samples:
        smp["produced"] -= p0
        smp["consumed"] -= c0
    outs = []
    for what, p, (o, e) in zip(("producer", "consumer"), run["procs"], run["outs"]):
        outs.append(parse_pgbench(o))
        if p.returncode != 0:
            run["errors"].append("%s pgbench exited %s: %s" % (what, p.returncode, e[-300:]))
    if outs[0]["tps"] < 0.9 * rate:
        run["errors"].append("the producers ran at %.0f events/s, below 90%% of %d"
                             % (outs[0]["tps"], rate))
    run["errors"] += ["%s: %s" % (getattr(b.fn, "__name__", "helper"), x)
                      for b in run["helpers"] for x in b.errors[:5]]
    own = {"queue": 0, "bookkeeping": 0, "other": 0}
    tables = {}
    for full in avs:
        db, _, rel = full.partition(".")
        if db != run["db"]:
            continue
        kind = s.owner_of(rel)
        own[kind] += 1
        tables[rel] = tables.get(rel, 0) + 1
    res = {"samples": samples, "vacuums": own["queue"], "autovacuums": own,
           "autovacuumed_tables": tables, "vacuums_stat": s.vacuums() - run["stat0"][1],
           "errors": run["errors"], "producer_tps": outs[0]["tps"], "consumer_tps": outs[1]["tps"],
           "windows": call_windows(run["log"], samples, t0, secs, hold)}
    if "hold_seen" in run:
        res["hold_seen"] = run["hold_seen"]
    if name in ("spindle", "spindle_ra", "spindle_sql"):
        res["worker"] = c.psql("SELECT concat_ws(' ', spindles_dropped, bytes_freed) "
                               "FROM spindle.worker WHERE database = current_database()", run["db"])
    if name == "partman":
        res["in_default"] = s.in_default()
    return res


def call_windows(prefix, samples, t0, secs, hold):
    """The consumers' calls, from pgbench's per-call logs (prefix.*): for
    each window (before / during / after the hold, or one window for a run
    without a hold; the first 10 s, or a quarter of the time before the
    hold if shorter, are left out as warm-up), the number of
    calls, the events consumed (from the samples nearest to the window's
    ends), and the consumers' busy time, the sum of each call's latency less
    its schedule lag (the wait pgbench -R adds)."""
    warm = min(10.0, (hold[0] if hold else secs) / 4.0)
    if hold:
        wins = {"before": (warm, hold[0]), "during": (hold[0], hold[0] + hold[1]),
                "after": (hold[0] + hold[1], secs)}
    else:
        wins = {"all": (warm, secs)}
    out = {k: {"calls": 0, "busy_s": 0.0, "from": a, "to": b} for k, (a, b) in wins.items()}
    for path in glob.glob(prefix + ".*"):
        with open(path) as f:
            for line in f:
                x = line.split()
                if len(x) < 6:
                    continue
                t = int(x[4]) + int(x[5]) / 1e6 - t0
                busy = (int(x[2]) - (int(x[6]) if len(x) > 6 else 0)) / 1e6
                for k, (a, b) in wins.items():
                    if a <= t < b:
                        out[k]["calls"] += 1
                        out[k]["busy_s"] += busy
    for k, (a, b) in wins.items():
        def at(t):
            return min(samples, key=lambda smp: abs(smp["t"] - t))["consumed"] if samples else 0
        out[k]["events"] = at(b) - at(a)
    return out


def steady_all(c, R, key, hold=None, secs=None):
    res = R.setdefault(key, {})
    names = CONF["steady_systems"]
    if CONF["steady_parallel"]:
        log("%s: %s side by side for %d s" % (key, ",".join(names), secs))
        res.update(steady_run(c, names, secs, hold))
    else:
        for n in names:
            log("%s: %s for %d s" % (key, n, secs))
            try:
                res.update(steady_run(c, [n], secs, hold))
            except Exception as e:    # the other systems still run
                R.setdefault("failures", {})["%s/%s" % (key, n)] = str(e)[:2000]
                log("%s: %s FAILED: %s" % (key, n, e))


def w_steady(c, R):
    steady_all(c, R, "steady", secs=CONF["steady_secs"])


def w_held(c, R):
    R["held_window"] = [CONF["held_start"], CONF["held_hold"]]
    steady_all(c, R, "held", hold=(CONF["held_start"], CONF["held_hold"]), secs=CONF["held_secs"])


def set_worker(c, on):
    c.psql("ALTER SYSTEM SET spindle.enable_worker = %s; " % ("on" if on else "off"), "postgres")
    c.psql("SELECT pg_reload_conf()", "postgres")
    time.sleep(1)


HEAD_KINDS = [("dequeue", Spindle, None),
              ("read+ack", SpindleRA, None),
              # the same call without waiting for its commit's WAL flush: what
              # is left is the cost of finding the head, which K could change
              ("dequeue, no flush", Spindle, "-c synchronous_commit=off")]


def w_head(c, R):
    """Dequeue latency with K consumed-but-not-dropped events ahead of the
    head: the worker is off, so their spindles stay.  Each K has a database
    of its own, built first; the measured runs then take the Ks in turn,
    starting from a different K each round, so that a drift of the shared
    disk's flush time over the workload lands on every K alike."""
    res = R.setdefault("head", {})
    ks = list(map(int, CONF["head_backlogs"]))
    txns = CONF["head_txns"]
    set_worker(c, False)
    try:
        for k in ks:
            db = "head_%d" % k
            make_db(c, db)
            s = Spindle(c, db)
            s.setup()
            done = 0
            while done < k:
                n = min(10000, k - done)
                s.sql("SELECT count(*) FROM spindle.enqueue_batch('q', array_fill('%s'::jsonb, "
                      "ARRAY[%d]))" % (PAYLOAD, n))
                s.sql("SELECT count(*) FROM spindle.dequeue('q', %d)" % n)
                done += n
            s.fill(txns * (CONF["head_rounds"] * len(HEAD_KINDS) + 1))
            for kind, _, _ in HEAD_KINDS:
                res["%s|%d" % (kind, k)] = {"lat": [], "spindles": s.spindles()}
        c.psql("CHECKPOINT")
        scripts = {kind: c.script(cls(c).dequeue_sql(1)) for kind, cls, _ in HEAD_KINDS}
        for rnd in range(CONF["head_rounds"]):
            for k in ks[rnd % len(ks):] + ks[:rnd % len(ks)]:
                for kind, _, opts in HEAD_KINDS:
                    r = c.pgbench(scripts[kind], 1, "head_%d" % k, txns=txns, options=opts)
                    res["%s|%d" % (kind, k)]["lat"].append(r["lat_ms"])
        for kind, _, _ in HEAD_KINDS:
            for k in ks:
                e = res["%s|%d" % (kind, k)]
                log("head cost %-17s %8d consumed ahead (%d spindles): %.3f ms"
                    % (kind, k, e["spindles"], median(e["lat"])))
        for k in ks:
            c.psql("DROP DATABASE head_%d WITH (FORCE)" % k, "postgres")
    finally:
        set_worker(c, True)


def cache_guc(c):
    return c.q1("SELECT setting FROM pg_settings WHERE name = 'spindle.cache_size'", "postgres")


def shmem(c):
    rows = c.psql("SELECT name, size, allocated_size FROM pg_shmem_allocations "
                  "WHERE name ILIKE '%spindle%' ORDER BY name", "postgres")
    return [r.split("|") for r in rows.splitlines() if r]


def backend_cpu(c, appname, db):
    """CPU seconds (user, system) the backend of application_name appname
    has used so far, from /proc (the harness and the server share the
    machine), or None when there is no such backend."""
    pid = c.q1("SELECT pid FROM pg_stat_activity WHERE application_name = '%s' "
               "ORDER BY backend_start DESC LIMIT 1" % appname, db)
    if not pid:
        return None
    with open("/proc/%s/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tck, int(fields[12]) / tck


def w_cache(c, R):
    """A consumer right behind a producer, cache on (the default) and off
    (spindle.cache_size = 0, after a restart).  The producer makes one event
    per transaction at a fixed rate below what one client can do, the
    consumer calls dequeue(q, 10) at a fixed rate with room to spare, so the
    two modes do the same work: what differs is what a call costs.  The
    measure is the consumer backend's user CPU time (from /proc) against the
    events it consumed in the same window: events per user CPU second.  The
    system time is recorded apart: on this machine it is mostly the kernel's
    work in the commit's WAL write and fdatasync, which the cache cannot
    change and which made the sum of the two equal in both modes."""
    res = R.setdefault("cache", {})
    R["memory"] = {"default": shmem(c),
                   "settings": [r.split("|") for r in c.psql(
                       "SELECT name, setting, coalesce(unit, '') FROM pg_settings "
                       "WHERE name LIKE 'spindle.%' ORDER BY name", "postgres").splitlines()]}
    default = cache_guc(c)
    if default == "":
        res["built"] = False
        log("cache: not built (no spindle.cache_size in this build)")
        return
    res["built"] = True
    res["default_size"] = default
    res["producer_rate"] = CONF["cache_rate"]
    for mode in ("on", "off"):
        if mode == "off":
            c.psql("ALTER SYSTEM SET spindle.cache_size = 0", "postgres")
            c.restart()
            R["memory"]["cache_off"] = shmem(c)
        for rnd in range(CONF["rounds"]):
            e = res.setdefault(mode, {"consumed": [], "produced": [], "lat": [], "stats": [],
                                      "cpu_s": [], "backlog": []})
            cache_round(c, e)
            log("cache %s round %d: %.0f events per consumer user CPU second (%.0f events in %.2f s), "
                "dequeue %.3f ms" % (mode, rnd + 1, e["consumed"][-1] / e["cpu_s"][-1]
                                     if e["cpu_s"][-1] else 0, e["consumed"][-1], e["cpu_s"][-1],
                                     e["lat"][-1] or 0))
    c.psql("ALTER SYSTEM RESET spindle.cache_size", "postgres")
    c.restart()


def cache_round(c, e):
    """One round of w_cache: appends to e the events consumed and the
    consumer's CPU seconds between 2 s after the start and 1 s before the
    end, the producer's rate, the dequeue latency and the cache's counters."""
    secs, rate = CONF["cache_secs"], CONF["cache_rate"]
    s = Spindle(c)
    s.setup()
    prod = c.script(s.enqueue_sql(1))
    cons = c.script(s.dequeue_sql(10))
    st = "SELECT concat_ws(' ', hits, misses) FROM spindle.cache_stats " \
         "WHERE relation = 'spindle_q.q'::regclass"
    st0 = c.psql(st, "bench", check=False)
    pp = subprocess.Popen(c.pgbench_cmd(prod, 1, "bench", secs=secs, rate=rate),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cp = subprocess.Popen(c.pgbench_cmd(cons, 1, "bench", secs=secs, rate=max(1, rate * 3 // 20)),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ, PGAPPNAME="spindle_bench_consumer"))
    time.sleep(2)
    w0, cpu0, (_, c0) = time.time(), backend_cpu(c, "spindle_bench_consumer", "bench"), s.counters()
    time.sleep(max(1, secs - 3))
    w1, cpu1, (_, c1) = time.time(), backend_cpu(c, "spindle_bench_consumer", "bench"), s.counters()
    po, pe = pp.communicate()
    co, ce = cp.communicate()
    for what, p, err in (("producer", pp, pe), ("consumer", cp, ce)):
        if p.returncode != 0:
            raise RuntimeError("cache: %s pgbench failed: %s" % (what, err[-500:]))
    st1 = c.psql(st, "bench", check=False)
    e["consumed"].append(c1 - c0)
    e.setdefault("secs", []).append(round(w1 - w0, 2))
    both = cpu0 is not None and cpu1 is not None
    e["cpu_s"].append(cpu1[0] - cpu0[0] if both else None)
    e.setdefault("sys_s", []).append(cpu1[1] - cpu0[1] if both else None)
    e["produced"].append(parse_pgbench(po)["tps"])
    e["lat"].append(parse_pgbench(co)["lat_ms"])
    e["backlog"].append(s.backlog())
    e["stats"].append([st0, st1])
    s.teardown()


def machine(c):
    def sh(cmd):
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    return {
        "nproc": sh("nproc"),
        "cpu": sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-").strip(),
        "ram": sh("awk '/MemTotal/ {printf \"%.1f GiB\", $2 / 1048576}' /proc/meminfo"),
        "kernel": sh("uname -sr"),
        "pg": c.q1("SELECT version()", "postgres"),
        "loadavg": sh("cat /proc/loadavg"),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "spindle_commit": os.environ.get("BENCH_COMMIT", ""),
        "pgq": c.q1("SELECT default_version FROM pg_available_extensions WHERE name = 'pgq'", "postgres"),
        "partman": c.q1("SELECT default_version FROM pg_available_extensions WHERE name = 'pg_partman'",
                        "postgres"),
    }


WORKLOADS = [("enqueue", w_enqueue), ("dequeue", w_dequeue), ("steady", w_steady),
             ("held", w_held), ("head", w_head), ("cache", w_cache)]


def overrides():
    """The BENCH_* parameters this run was given (the report names them)."""
    return {k: v for k, v in os.environ.items() if k.startswith("BENCH_") and k not in (
        "BENCH_PGBIN", "BENCH_COMMIT", "BENCH_COMMAND", "BENCH_OUT", "BENCH_KEEP", "BENCH_PYTHON",
        "BENCH_SHORT", "BENCH_PORT")}


def run_all(work):
    c = Cluster(work)
    R = {"conf": CONF, "short": SHORT, "settings": SERVER_SETTINGS, "timings": {},
         "command": os.environ.get("BENCH_COMMAND", "make bench"),
         "overrides": overrides()}
    c.initdb()
    c.start()
    try:
        make_db(c, "bench")
        R["machine"] = machine(c)
        R["payload_bytes"] = {"text": len(PAYLOAD.encode()),
                              "jsonb": int(c.num("SELECT pg_column_size('%s'::jsonb)" % PAYLOAD))}
        only = os.environ.get("BENCH_ONLY", "")
        for name, fn in WORKLOADS:
            if only and name not in only.split(","):
                continue
            t = time.time()
            log("== %s" % name)
            try:
                fn(c, R)
            except Exception as e:
                R.setdefault("failures", {})[name] = str(e)[:2000]
                log("%s FAILED: %s" % (name, e))
            R["timings"][name] = round(time.time() - t)
            R.setdefault("load", {})[name] = open("/proc/loadavg").read().split()[0]
            with open(os.path.join(work, "results.json"), "w") as f:
                json.dump(R, f, indent=1)
        R["machine"]["loadavg_end"] = subprocess.run(["cat", "/proc/loadavg"], capture_output=True,
                                                     text=True).stdout.strip()
    finally:
        c.stop()
    with open(os.path.join(work, "results.json"), "w") as f:
        json.dump(R, f, indent=1)
    return R


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--report":
        work = sys.argv[2]
        with open(os.path.join(work, "results.json")) as f:
            R = json.load(f)
    elif len(sys.argv) == 2:
        work = sys.argv[1]
        R = run_all(work)
    else:
        sys.exit(__doc__)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import report
    report.write(R, os.path.join(work, "report"))
    if R.get("failures"):
        print("bench: workloads failed: %s" % ", ".join(R["failures"]), file=sys.stderr)
        sys.exit(1)
