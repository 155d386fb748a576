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

import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

PAYLOAD = ('{"type":"order","customer":12345,"items":[1,2,3],'
           '"note":"some payload text for a realistic size","ts":"2026-11-30T11:00:00Z"}')
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
    "held_secs": env("HELD_SECS", 480, 12),
    "held_start": env("HELD_START", 120, 3),
    "held_hold": env("HELD_HOLD", 120, 4),
    "head_backlogs": env("HEAD_BACKLOGS", ["0", "100000", "1000000"], ["0", "1000", "10000"]),
    "head_txns": env("HEAD_TXNS", 10000, 300),
    "cache_secs": env("CACHE_SECS", 10, 2),
    "events_per_spindle_steady": env("STEADY_EVENTS_PER_SPINDLE", 1000, 1000),
    "partman_interval": env("PARTMAN_INTERVAL", 10000, 10000),
    "partman_premake": env("PARTMAN_PREMAKE", 30, 30),
    "partman_every": env("PARTMAN_EVERY", 1.0, 1.0),
    "partman_retention": env("PARTMAN_RETENTION", 50000, 50000),
    "pgq_tick_every": env("PGQ_TICK_EVERY", 1.0, 1.0),
    "pgq_maint_every": env("PGQ_MAINT_EVERY", 30, 5),
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
    ("log_autovacuum_min_duration", "-1"),
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

    def pgbench_cmd(self, script, clients, db, secs=None, txns=None, rate=None, progress=None):
        cmd = [self.bin("pgbench"), "-n", "-M", "prepared", "-c", str(clients), "-j", str(clients),
               "-f", script] + self.conn_args(db)[:6]
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

    def lsn(self, db="bench"):
        return self.q1("SELECT pg_current_wal_insert_lsn()", db)

    def wal_bytes(self, a, b, db="bench"):
        return self.num("SELECT pg_wal_lsn_diff('%s', '%s')" % (b, a), db)


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


class HeapLike(System):
    table = "hq"
    using = ""
    pk = True

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

    def size(self):
        return self.num("SELECT pg_total_relation_size('st') + coalesce((SELECT size_bytes "
                        "FROM spindle.tables WHERE relation = 'st'::regclass), 0)")

    def vacuums(self):
        return self.num("SELECT coalesce(sum(autovacuum_count + vacuum_count), 0) "
                        "FROM pg_stat_user_tables WHERE relid = 'st'::regclass "
                        "OR schemaname = 'pg_spindle'")

    def spindles(self):
        return self.num("SELECT count(*) FROM spindle.spindles")


class Spindle(System):
    name = "spindle"
    table = "spindle_q.q"

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

    def size(self):
        return self.num("SELECT pg_total_relation_size('spindle_q.q') + coalesce((SELECT size_bytes "
                        "FROM spindle.tables WHERE relation = 'spindle_q.q'::regclass), 0)")

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

    def setup(self, steady=False):
        self.seq = "pq_id_seq"
        self.sql("DROP TABLE IF EXISTS pq CASCADE; "
                 "DELETE FROM partman.part_config WHERE parent_table = 'public.pq'; "
                 "DROP TABLE IF EXISTS partman.template_public_pq; "
                 "CREATE TABLE pq %s PARTITION BY RANGE (id);" % COLS)
        self.sql("SELECT partman.create_parent('public.pq', 'id', 'native', '%d', p_premake => %d, "
                 "p_jobmon => false);" % (CONF["partman_interval"], CONF["partman_premake"]))
        if steady:
            self.sql("UPDATE partman.part_config SET retention = '%d', retention_keep_table = false "
                     "WHERE parent_table = 'public.pq'" % CONF["partman_retention"])

    def maintain(self):
        self.sql("SELECT partman.run_maintenance('public.pq', p_jobmon => false)")

    def fill(self, n):
        done = 0
        step = CONF["partman_interval"]
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


class PgQ(System):
    name = "pgq"

    def setup(self, steady=False):
        self.sql("SELECT pgq.drop_queue('q', true) FROM pgq.queue WHERE queue_name = 'q';")
        self.sql("SELECT pgq.create_queue('q'); SELECT pgq.register_consumer('q', 'c');")

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

    def setup(self, steady=False):
        self.sql("DROP TABLE IF EXISTS ceiling; CREATE TABLE ceiling (id int);")

    def enqueue_sql(self, n):
        return "INSERT INTO ceiling VALUES (1);\n"


def make_db(c, db):
    c.psql("DROP DATABASE IF EXISTS %s WITH (FORCE)" % db, "postgres")
    c.psql("CREATE DATABASE %s" % db, "postgres")
    c.psql("CREATE EXTENSION spindle; CREATE EXTENSION pgq; CREATE SCHEMA partman; "
           "CREATE EXTENSION pg_partman SCHEMA partman;", db)


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
            for name, batch in runs:
                key = "%s|%d|%d" % (name, clients, batch)
                e = res.setdefault(key, {"rate": [], "wal": [], "lat": []})
                try:
                    enqueue_once(c, name, clients, batch, e)
                except Exception as ex:
                    e.setdefault("errors", []).append(str(ex)[:1000])
                    log("enqueue %s FAILED: %s" % (key, str(ex).splitlines()[0]))
                    continue
                log("enqueue round %d %-12s clients %d batch %3d: %8.0f events/s, %5.0f B/event"
                    % (rnd + 1, name, clients, batch, e["rate"][-1], e["wal"][-1] or 0))


def enqueue_once(c, name, clients, batch, e):
    s = Ceiling(c) if name == "ceiling" else SYSTEMS[name](c)
    # the checkpoint comes before the queue is made: the runs write no full
    # page images of pages they made themselves
    c.psql("CHECKPOINT")
    s.setup()
    script = c.script(s.enqueue_sql(batch))
    bg = helpers_for(s)
    try:
        l0 = c.lsn()
        r = c.pgbench(script, clients, secs=CONF["secs"])
        l1 = c.lsn()
    finally:
        for b in bg:
            b.stop()
    events = r["xacts"] * batch
    e["rate"].append(r["tps"] * batch)
    e["wal"].append(c.wal_bytes(l0, l1) / events if events else None)
    e["lat"].append(r["lat_ms"])
    if name == "partman":
        e.setdefault("in_default", []).append(s.in_default())


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
        l0 = c.lsn()
        r = c.pgbench(script, clients, txns=txns)
        l1 = c.lsn()
        b1 = s.backlog()
    finally:
        for b in bg:
            b.stop()
    consumed = b0 - b1
    rate = consumed * r["tps"] / r["xacts"] if r["xacts"] else 0
    return {"rate": rate, "wal": c.wal_bytes(l0, l1) / consumed if consumed else None,
            "lat": r["lat_ms"], "consumed": consumed, "expected": r["xacts"] * batch,
            "backlog_left": b1}


def w_dequeue(c, R):
    res = R.setdefault("dequeue", {})
    systems = ["spindle", "spindle_ra", "spindle_sql", "heap", "pgq", "partman"]
    for rnd in range(CONF["rounds"]):
        for clients in map(int, CONF["dequeue_clients"]):
            for batch in map(int, CONF["dequeue_batches"]):
                for name in systems:
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
        return
    e["rate"].append(d["rate"])
    e["wal"].append(d["wal"])
    e["lat"].append(d["lat"])
    # events handed out short of batch x transactions (ran dry)
    e["short"].append(d["expected"] - d["consumed"])
    log("dequeue round %d %-12s consumers %d batch %3d: %8.0f events/s, %6.1f B/event"
        % (rnd + 1, name, clients, batch, d["rate"], d["wal"] or 0))


CATALOGS = ["pg_class", "pg_attribute", "pg_type", "pg_depend"]


def steady_run(c, names, secs, hold=None):
    """Steady state: for each system, 2 producers at STEADY_RATE events/s in
    all (one event per transaction) and 2 consumers (10 events per call, at
    most 1.5x the produce rate; PgQ: one consumer, one batch per tick), in a
    database of its own.  Samples every SAMPLE s.  hold = (start, length): a
    REPEATABLE READ transaction held open in each database meanwhile."""
    rate = CONF["steady_rate"]
    runs = {}
    for name in names:
        db = "steady_" + name
        make_db(c, db)
        s = SYSTEMS[name](c, db)
        s.setup(steady=True)
        runs[name] = {"sys": s, "db": db, "samples": []}
    procs, bgs = [], []
    t0 = time.time()
    for name, run in runs.items():
        s, db = run["sys"], run["db"]
        prod = c.script(s.enqueue_sql(1))
        cons = c.script(s.dequeue_sql(10))
        run["stat0"] = [s.counters(), s.vacuums()]
        procs.append(subprocess.Popen(c.pgbench_cmd(prod, 2, db, secs=secs, rate=rate),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        if name == "pgq":
            cmd = c.pgbench_cmd(cons, 1, db, secs=secs, rate=10)
        else:
            cmd = c.pgbench_cmd(cons, 2, db, secs=secs, rate=max(1, rate * 3 // 20))
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        bgs += helpers_for(s)
    hold_procs = []

    def start_hold():
        for run in runs.values():
            p = subprocess.Popen([c.bin("psql"), "-X", "-q"] + c.conn_args(run["db"]),
                                 stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, text=True)
            p.stdin.write("BEGIN ISOLATION LEVEL REPEATABLE READ;\nSELECT 1;\nSELECT pg_sleep(%f);\n"
                          "COMMIT;\n" % hold[1])
            p.stdin.close()
            hold_procs.append(p)

    nsample = 0
    held = False
    while True:
        now = time.time() - t0
        if hold and not held and now >= hold[0]:
            start_hold()
            held = True
        for name, run in runs.items():
            s = run["sys"]
            try:
                p, cons = s.counters()
                cat = c.psql("SELECT " + ", ".join("pg_total_relation_size('%s')" % k for k in CATALOGS),
                             run["db"]).split("|")
                smp = {"t": round(time.time() - t0, 2), "produced": p, "consumed": cons,
                       "size": s.size(), "vacuums": s.vacuums(),
                       "catalog": sum(float(x) for x in cat),
                       "catalogs": dict(zip(CATALOGS, (float(x) for x in cat)))}
                if hasattr(s, "spindles"):
                    smp["spindles"] = s.spindles()
                run["samples"].append(smp)
            except Exception as e:
                run.setdefault("errors", []).append(str(e)[:300])
        nsample += 1
        if time.time() - t0 >= secs + 0.5:
            break
        nxt = t0 + nsample * CONF["sample"]
        time.sleep(max(0.0, nxt - time.time()))
    outs = []
    for p in procs:
        o, e = p.communicate()
        outs.append(parse_pgbench(o))
    for p in hold_procs:
        p.wait()
    for b in bgs:
        b.stop()
    result = {}
    for i, (name, run) in enumerate(runs.items()):
        s = run["sys"]
        p0, c0 = run["stat0"][0]
        samples = run["samples"]
        for smp in samples:
            smp["produced"] -= p0
            smp["consumed"] -= c0
        result[name] = {"samples": samples, "vacuums": s.vacuums() - run["stat0"][1],
                        "errors": run.get("errors", []),
                        "producer_tps": outs[2 * i]["tps"], "consumer_tps": outs[2 * i + 1]["tps"]}
        if name == "spindle" or name == "spindle_ra" or name == "spindle_sql":
            result[name]["worker"] = c.psql("SELECT concat_ws(' ', spindles_dropped, bytes_freed) "
                                            "FROM spindle.worker WHERE database = current_database()",
                                            run["db"])
        if name == "partman":
            result[name]["in_default"] = s.in_default()
    for name, run in runs.items():
        c.psql("DROP DATABASE IF EXISTS %s WITH (FORCE)" % run["db"], "postgres")
    return result


def steady_all(c, R, key, hold=None, secs=None):
    res = R.setdefault(key, {})
    names = CONF["steady_systems"]
    if CONF["steady_parallel"]:
        log("%s: %s side by side for %d s" % (key, ",".join(names), secs))
        res.update(steady_run(c, names, secs, hold))
    else:
        for n in names:
            log("%s: %s for %d s" % (key, n, secs))
            res.update(steady_run(c, [n], secs, hold))


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
            s.fill(txns * (CONF["rounds"] * len(HEAD_KINDS) + 1))
            for kind, _, _ in HEAD_KINDS:
                res["%s|%d" % (kind, k)] = {"lat": [], "spindles": s.spindles()}
        c.psql("CHECKPOINT")
        scripts = {kind: c.script(cls(c).dequeue_sql(1)) for kind, cls, _ in HEAD_KINDS}
        for rnd in range(CONF["rounds"]):
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


def w_cache(c, R):
    """A consumer right behind a producer: 1 producer (one event per
    transaction) and 1 consumer (dequeue of 10) at full speed, cache on (the
    default) and off (spindle.cache_size = 0, after a restart)."""
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
    for mode in ("on", "off"):
        if mode == "off":
            c.psql("ALTER SYSTEM SET spindle.cache_size = 0", "postgres")
            c.restart()
            R["memory"]["cache_off"] = shmem(c)
        for rnd in range(CONF["rounds"]):
            s = Spindle(c)
            s.setup()
            s.fill(1000)
            prod = c.script(s.enqueue_sql(1))
            cons = c.script(s.dequeue_sql(10))
            st0 = c.psql("SELECT concat_ws(' ', hits, misses) FROM spindle.cache_stats "
                         "WHERE relation = 'spindle_q.q'::regclass", "bench", check=False)
            p0, c0 = s.counters()
            pp = subprocess.Popen(c.pgbench_cmd(prod, 1, "bench", secs=CONF["cache_secs"]),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            r = c.pgbench(cons, 1, secs=CONF["cache_secs"])
            po = parse_pgbench(pp.communicate()[0])
            p1, c1 = s.counters()
            st1 = c.psql("SELECT concat_ws(' ', hits, misses) FROM spindle.cache_stats "
                         "WHERE relation = 'spindle_q.q'::regclass", "bench", check=False)
            e = res.setdefault(mode, {"consumed": [], "produced": [], "lat": [], "stats": []})
            e["consumed"].append((c1 - c0) / CONF["cache_secs"])
            e["produced"].append(po["tps"])
            e["lat"].append(r["lat_ms"])
            e["stats"].append([st0, st1])
            log("cache %s round %d: consumed %.0f events/s (producer %.0f), dequeue %.3f ms"
                % (mode, rnd + 1, e["consumed"][-1], po["tps"], r["lat_ms"] or 0))
    c.psql("ALTER SYSTEM RESET spindle.cache_size", "postgres")
    c.restart()


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
