/* spindle--0.1.sql: objects of the spindle extension (schema "spindle") */

\echo Use "CREATE EXTENSION spindle" to load this file. \quit

-- Refuse to install unless the library was preloaded: the access method
-- needs shared memory that can only be reserved at server start.
CREATE FUNCTION spindle._require_preload() RETURNS void
    AS 'MODULE_PATHNAME', 'spindle_require_preload' LANGUAGE C STRICT;
SELECT spindle._require_preload();
DROP FUNCTION spindle._require_preload();

-- Table access methods: "spindle" is the one users name; "spindle_segment"
-- is heap with a vacuum that never reclaims a slot, used for the spindles
-- themselves (relations in schema pg_spindle).
CREATE FUNCTION spindle.spindle_handler(internal) RETURNS table_am_handler
    AS 'MODULE_PATHNAME', 'spindle_handler' LANGUAGE C STRICT;
CREATE FUNCTION spindle.segment_handler(internal) RETURNS table_am_handler
    AS 'MODULE_PATHNAME', 'spindle_segment_handler' LANGUAGE C STRICT;
CREATE ACCESS METHOD spindle TYPE TABLE HANDLER spindle.spindle_handler;
COMMENT ON ACCESS METHOD spindle IS 'append-only spindle queue tables';
CREATE ACCESS METHOD spindle_segment TYPE TABLE HANDLER spindle.segment_handler;
COMMENT ON ACCESS METHOD spindle_segment IS 'internal: storage of one spindle';
-- "spindle_meta" is the access method of a queue's consumer relation
-- pg_spindle.c<queue table oid>: no tuples, pages written by the queue
-- calls; it exists so that VACUUM, ANALYZE and autovacuum reach it.
CREATE FUNCTION spindle.meta_handler(internal) RETURNS table_am_handler
    AS 'MODULE_PATHNAME', 'spindle_meta_handler' LANGUAGE C STRICT;
CREATE ACCESS METHOD spindle_meta TYPE TABLE HANDLER spindle.meta_handler;
COMMENT ON ACCESS METHOD spindle_meta IS 'internal: consumer state of one queue';

-- Schema pg_spindle holds the spindles.  pg_dump skips pg_* schemas, so
-- the spindles are never dumped (a restore fills new ones); the schema is
-- deliberately not a member of the extension, else its tables would be.
CREATE FUNCTION spindle._create_storage_schema() RETURNS void
    AS 'MODULE_PATHNAME', 'spindle_create_storage_schema' LANGUAGE C STRICT;
SELECT spindle._create_storage_schema();
DROP FUNCTION spindle._create_storage_schema();

CREATE FUNCTION spindle._xid_is_current(xid) RETURNS boolean
    AS 'MODULE_PATHNAME', 'spindle_xid_is_current' LANGUAGE C STRICT VOLATILE;

-- The spindle directory: one row per existing spindle.  Written only by the
-- extension's C code; never dumped (a restore builds new spindles).
CREATE TABLE spindle.spindle_catalog (
    relation    oid NOT NULL,         -- the spindle table (pg_class oid)
    spindle_no  bigint NOT NULL,      -- increasing per table
    segment     oid NOT NULL,         -- the heap-like relation holding it
    capacity    bigint NOT NULL,      -- as configured; 0 = unbounded
    vbase       bigint NOT NULL,      -- its range of virtual slots (TIDs)
    vcount      bigint NOT NULL,      -- = the events it may hold
    created_at  timestamptz NOT NULL DEFAULT now(),
    filled_at   timestamptz,
    dropped_at  timestamptz,          -- set when dropped, until its index
                                      -- entries are gone
    first_no    bigint,               -- its events are numbered first_no + k;
                                      -- NULL for an annex (no event numbers)
    -- 'events': filled in order by producers; 'annex': a place apart for
    -- events that stay (compaction), of generation 1..3
    kind        text NOT NULL DEFAULT 'events',
    generation  integer NOT NULL DEFAULT 0,
    PRIMARY KEY (relation, spindle_no),
    CHECK ((kind = 'events' AND generation = 0 AND first_no IS NOT NULL) OR
           (kind = 'annex' AND generation BETWEEN 1 AND 3 AND first_no IS NULL))
);
-- dropped spindles waiting for cleanup: every maintenance pass looks them up
CREATE INDEX spindle_catalog_dropped ON spindle.spindle_catalog (relation)
    WHERE dropped_at IS NOT NULL;
-- the ranges taken, in order, for the allocation of a new spindle's range
CREATE INDEX spindle_catalog_vbase ON spindle.spindle_catalog (relation, vbase)
    INCLUDE (vcount);
CREATE TABLE spindle.table_catalog (
    relation          oid PRIMARY KEY,
    spindles_dropped  bigint NOT NULL DEFAULT 0,
    bytes_freed       bigint NOT NULL DEFAULT 0,
    -- virtual slots of dropped spindles whose index entries are still to
    -- be removed (maintenance retires them in batches)
    retire_slots      bigint NOT NULL DEFAULT 0
);
REVOKE ALL ON spindle.spindle_catalog, spindle.table_catalog FROM PUBLIC;

CREATE FUNCTION spindle.drop_spindles(rel regclass DEFAULT NULL)
    RETURNS integer
    AS 'MODULE_PATHNAME', 'spindle_drop_spindles' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION spindle.drop_spindles(regclass) IS
    'drop every full, fully purged spindle no snapshot can still see (of rel, or of every spindle table the caller owns); needs the table''s owner';

CREATE FUNCTION spindle._spindle_info(
    OUT relation regclass, OUT spindle_no bigint, OUT state text,
    OUT capacity bigint, OUT events bigint, OUT purged_events bigint,
    OUT size_bytes bigint, OUT created_at timestamptz,
    OUT filled_at timestamptz, OUT drop_blocked_by text,
    OUT generation int)
    RETURNS SETOF record
    AS 'MODULE_PATHNAME', 'spindle_spindle_info' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION spindle._spindle_info() IS
    'internal: the rows of spindle.spindles, for the spindle tables the caller may SELECT from';

CREATE FUNCTION spindle._table_options(rel regclass,
    OUT events_per_spindle bigint, OUT time_to_live interval)
    AS 'MODULE_PATHNAME', 'spindle_table_options' LANGUAGE C STRICT STABLE;

CREATE VIEW spindle.spindles WITH (security_barrier) AS
    SELECT * FROM spindle._spindle_info();

-- security_barrier: a caller's own functions in a WHERE clause must not see
-- rows of tables the caller may not read before the privilege filter does
CREATE VIEW spindle.tables WITH (security_barrier) AS
    SELECT c.relation::regclass AS relation,
           o.events_per_spindle,
           o.time_to_live,
           coalesce(s.spindles, 0) AS spindles,
           CASE WHEN s.relation IS NULL THEN 0 ELSE s.events END AS events,
           CASE WHEN s.relation IS NULL THEN 0 ELSE s.purged_events END AS purged_events,
           coalesce(s.size_bytes, 0) AS size_bytes,
           c.spindles_dropped,
           c.bytes_freed,
           s.drop_blocked_by
      FROM spindle.table_catalog c
      CROSS JOIN LATERAL spindle._table_options(c.relation::regclass) o
      LEFT JOIN (SELECT i.relation, count(*) AS spindles,
                        -- NULL while a spindle cannot be counted
                        CASE WHEN count(i.events) = count(*)
                             THEN sum(i.events)::bigint END AS events,
                        CASE WHEN count(i.purged_events) = count(*)
                             THEN sum(i.purged_events)::bigint END AS purged_events,
                        sum(i.size_bytes)::bigint AS size_bytes,
                        -- the oldest spindle's blocker
                        (array_agg(i.drop_blocked_by ORDER BY i.spindle_no)
                           FILTER (WHERE i.drop_blocked_by IS NOT NULL))[1]
                          AS drop_blocked_by
                   FROM spindle._spindle_info() i GROUP BY i.relation) s
             ON s.relation = c.relation::regclass
     -- only the tables the caller may read (NULL for a table just dropped)
     WHERE pg_catalog.has_table_privilege(c.relation, 'SELECT');

-- Anyone may look: each role sees the spindle tables it may SELECT from
-- (the filter is in spindle._spindle_info() and in spindle.tables).
COMMENT ON VIEW spindle.spindles IS
    'one row per existing spindle of the spindle tables the caller may SELECT from';
COMMENT ON VIEW spindle.tables IS
    'one row per spindle table the caller may SELECT from';
GRANT USAGE ON SCHEMA spindle TO PUBLIC;
GRANT SELECT ON spindle.spindles, spindle.tables TO PUBLIC;

CREATE FUNCTION spindle.purge_expired(rel regclass, ttl interval DEFAULT NULL)
    RETURNS bigint
    AS 'MODULE_PATHNAME', 'spindle_purge_expired' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION spindle.purge_expired(regclass, interval) IS
    'purge every event appended more than ttl (default: the table''s time_to_live) ago; needs the table''s owner; retention maintenance like TRUNCATE: fires no row triggers, is not filtered by row-level security, and is refused to an owner subject to FORCE ROW LEVEL SECURITY';

CREATE FUNCTION spindle._worker_info(
    OUT pid integer, OUT database oid, OUT state text,
    OUT last_run timestamptz, OUT spindles_dropped bigint,
    OUT bytes_freed bigint, OUT last_error text, OUT events_moved bigint,
    OUT spindles_emptied bigint, OUT events_skipped bigint)
    RETURNS SETOF record
    AS 'MODULE_PATHNAME', 'spindle_worker_info' LANGUAGE C STRICT VOLATILE;
-- The worker's state (its last error may name any table of its database)
-- is for superusers and the roles they grant it to.
REVOKE EXECUTE ON FUNCTION spindle._worker_info() FROM PUBLIC;

CREATE VIEW spindle.worker AS
    SELECT w.pid, d.datname AS database, w.state, w.last_run,
           w.spindles_dropped, w.bytes_freed, w.last_error,
           w.events_moved, w.spindles_emptied, w.events_skipped
      FROM spindle._worker_info() w
      JOIN pg_catalog.pg_database d ON d.oid = w.database;

-- The disk alarm (spindle.disk_free_limit): what the spindle launcher last
-- measured of each file system it watches, pg_wal and each tablespace.
-- "low" compares free_bytes with this session's limit: inserts into the
-- spindle tables there fail with SQLSTATE 53100.  The paths name the data
-- directory: for superusers, pg_monitor and the roles they grant it to.
CREATE FUNCTION spindle.disk_alarm(
    OUT name text, OUT path text, OUT free_bytes bigint,
    OUT limit_bytes bigint, OUT low boolean, OUT measured_at timestamptz)
    RETURNS SETOF record
    AS 'MODULE_PATHNAME', 'spindle_disk_alarm' LANGUAGE C STRICT VOLATILE;
REVOKE EXECUTE ON FUNCTION spindle.disk_alarm() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION spindle.disk_alarm() TO pg_monitor;

-- Test-only until the queue API calls spindle_purge_on_page() itself: purge
-- the events with these TIDs (as SELECT ctid returns them) with one WAL
-- record per spindle page (src/storage/rangepurge.c); returns how many it purged.
CREATE FUNCTION spindle._purge_events(rel regclass, tids tid[])
    RETURNS integer
    AS 'MODULE_PATHNAME', 'spindle_purge_events' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION spindle._purge_events(regclass, tid[]) IS
    'internal, for tests: purge the events with these TIDs by the current transaction, one WAL record per spindle page; superuser only';
REVOKE ALL ON FUNCTION spindle._purge_events(regclass, tid[]) FROM PUBLIC;

-- Test only (superusers; docs/design.md, consumer state, step 2): drive the
-- straggler tree of subscription `sub` in a queue's consumer relation.
-- Runs are non-transactional page changes, as the consumer state's are.
CREATE FUNCTION spindle._run_upsert(queue regclass, sub int, first bigint,
    len bigint, kind int DEFAULT 1, due timestamptz DEFAULT NULL,
    read_count int DEFAULT 0, awaited bigint DEFAULT 0,
    count int DEFAULT 1, stride bigint DEFAULT 0)
    RETURNS bigint
    AS 'MODULE_PATHNAME', 'spindle_run_upsert' LANGUAGE C VOLATILE;
CREATE FUNCTION spindle._run_remove(queue regclass, sub int, first bigint,
    len bigint) RETURNS bigint
    AS 'MODULE_PATHNAME', 'spindle_run_remove' LANGUAGE C STRICT VOLATILE;
CREATE FUNCTION spindle._run_lookup(queue regclass, sub int, id bigint,
    OUT first bigint, OUT len bigint, OUT kind int, OUT due timestamptz,
    OUT read_count int, OUT awaited bigint)
    RETURNS record
    AS 'MODULE_PATHNAME', 'spindle_run_lookup' LANGUAGE C STRICT VOLATILE;
CREATE FUNCTION spindle._run_scan(queue regclass, sub int, lo bigint,
    hi bigint)
    RETURNS TABLE (first bigint, len bigint, kind int, due timestamptz,
                   read_count int, awaited bigint)
    AS 'MODULE_PATHNAME', 'spindle_run_scan' LANGUAGE C STRICT VOLATILE;
CREATE FUNCTION spindle._run_verify(queue regclass, sub int,
    OUT height int, OUT pages int, OUT runs bigint, OUT ids bigint,
    OUT incomplete_splits int, OUT problems text[])
    RETURNS record
    AS 'MODULE_PATHNAME', 'spindle_run_verify' LANGUAGE C STRICT VOLATILE;
CREATE FUNCTION spindle._run_drop(queue regclass, sub int) RETURNS int
    AS 'MODULE_PATHNAME', 'spindle_run_drop' LANGUAGE C STRICT VOLATILE;
-- Test only (superusers; docs/design.md, "Consume log
-- (built)"): the current transaction consumes events first .. first+len-1
-- of a queue table by consume log entries, in the current command.
CREATE FUNCTION spindle._consume_log_write(queue regclass, first bigint,
    len bigint DEFAULT 1) RETURNS bigint
    AS 'MODULE_PATHNAME', 'spindle_consume_log_write' LANGUAGE C STRICT VOLATILE;
REVOKE ALL ON FUNCTION spindle._consume_log_write(regclass, bigint, bigint) FROM PUBLIC;
-- Test only (superusers; docs/design.md, "Compaction", section 2): stand-ins
-- for the relocator.  Make an annex of a generation (1..3) for a table, in
-- the current transaction; place a copy of a row of the table's row type in
-- its newest annex of that generation with room (heap insert, slot map,
-- index entries; no constraint or trigger runs, no id is assigned).
CREATE FUNCTION spindle._create_annex(rel regclass, generation int)
    RETURNS bigint
    AS 'MODULE_PATHNAME', 'spindle_create_annex_sql' LANGUAGE C STRICT VOLATILE;
CREATE FUNCTION spindle._annex_insert(rel regclass, generation int,
    "row" anyelement) RETURNS tid
    AS 'MODULE_PATHNAME', 'spindle_annex_insert_sql' LANGUAGE C STRICT VOLATILE;
REVOKE ALL ON FUNCTION spindle._create_annex(regclass, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION spindle._annex_insert(regclass, int, anyelement) FROM PUBLIC;
-- Test only (superusers; docs/design.md, "Compaction", section 3): move one
-- live event of a queue table into its newest annex of a generation with
-- room, in the current transaction (relocation entry in tree 3 of the
-- consumer relation, copy with the same columns and append time, index
-- entries); returns the copy's TID.  Consumers do not follow moves yet
-- (they deliver the old copy): never on a queue being consumed.
CREATE FUNCTION spindle._relocate(rel regclass, msg_id bigint, generation int)
    RETURNS tid
    AS 'MODULE_PATHNAME', 'spindle_relocate_sql' LANGUAGE C STRICT VOLATILE;
REVOKE ALL ON FUNCTION spindle._relocate(regclass, bigint, int) FROM PUBLIC;
-- Test only (superusers; docs/design.md, "Compaction", "Step 4 as built"):
-- one pass of the worker's relocator over a queue table, in the current
-- transaction: the live events of its full spindles (and annexes) at or
-- below spindle.compaction_threshold, all parked, moved into annexes.
CREATE FUNCTION spindle._compact(rel regclass, OUT moved bigint,
    OUT skipped bigint, OUT spindles bigint, OUT emptied bigint)
    AS 'MODULE_PATHNAME', 'spindle_compact_sql' LANGUAGE C STRICT VOLATILE;
REVOKE ALL ON FUNCTION spindle._compact(regclass) FROM PUBLIC;
-- Test only (superusers): the worker's settle step on one queue table, in
-- the current transaction (its consume log's entries over dropped
-- spindles and of aborted transactions removed, committed ones folded
-- into the floor, the tree rebuilt when mostly empty pages); the ids
-- removed.  pg_regress and isolation tests run without the worker.
CREATE FUNCTION spindle._settle(rel regclass) RETURNS bigint
    AS 'MODULE_PATHNAME', 'spindle_settle_sql' LANGUAGE C STRICT VOLATILE;
REVOKE ALL ON FUNCTION spindle._settle(regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION spindle._run_upsert(regclass, int, bigint, bigint, int,
    timestamptz, int, bigint, int, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION spindle._run_remove(regclass, int, bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION spindle._run_lookup(regclass, int, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION spindle._run_scan(regclass, int, bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION spindle._run_verify(regclass, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION spindle._run_drop(regclass, int) FROM PUBLIC;

-- ===================== Queues =====================
-- A queue "orders" is the spindle table spindle_q.orders (owned by the role
-- that created it, with the privileges its owner grants) plus one row of
-- spindle.queue_catalog.  Everyone may use the schema; only its owner may
-- create in it: create_queue needs CREATE on it
-- (GRANT CREATE ON SCHEMA spindle_q TO role).
CREATE SCHEMA spindle_q;
COMMENT ON SCHEMA spindle_q IS 'the tables of the queues (spindle.create_queue)';
GRANT USAGE ON SCHEMA spindle_q TO PUBLIC;

-- The registry: written only by the extension's C code (create_queue, and
-- the drop of a queue's table however it happens).  Dumped by pg_dump;
-- relation is a regclass, which a dump writes as the table's name and a
-- restore reads back as the restored table's OID.  max_depth and overflow
-- are the queue's length limit, applied by enqueue (src/queue/queue_limits.c).
CREATE TABLE spindle.queue_catalog (
    queue_name        text PRIMARY KEY,
    relation          regclass NOT NULL UNIQUE,   -- spindle_q.<queue_name>
    max_reads         integer CHECK (max_reads > 0),  -- NULL: no limit
    dead_letter_queue text CHECK (dead_letter_queue <> queue_name),
    created_at        timestamptz NOT NULL DEFAULT now(),
    max_depth         bigint CHECK (max_depth > 0),   -- NULL: no limit
    overflow          text NOT NULL DEFAULT 'reject'
        CHECK (overflow IN ('reject', 'drop_oldest', 'dead_letter')),
    CONSTRAINT queue_catalog_overflow_dead_letter
        CHECK (overflow <> 'dead_letter' OR dead_letter_queue IS NOT NULL)
);
SELECT pg_catalog.pg_extension_config_dump('spindle.queue_catalog', '');
REVOKE ALL ON spindle.queue_catalog FROM PUBLIC;

-- msg_ids are never given twice under one queue name: when a queue's table
-- is dropped (drop_queue, DROP TABLE, ...), the msg_id its next event
-- would have had is kept here, and a later table of that name numbers its
-- events (msg_ids) from there on.  The row outlives the queue and
-- is dumped, so a restore keeps it.  Written only by the extension's C code.
-- A name may have several rows (a data-only restore with --disable-triggers
-- adds the dumped ones beside those its CREATE TABLEs wrote): its floor is
-- their greatest.
CREATE TABLE spindle.queue_msg_id_floor (
    queue_name      text NOT NULL,
    msg_id_floor    bigint NOT NULL CHECK (msg_id_floor > 0)
);
CREATE INDEX queue_msg_id_floor_name ON spindle.queue_msg_id_floor (queue_name);
SELECT pg_catalog.pg_extension_config_dump('spindle.queue_msg_id_floor', '');
-- a row for a name that has one raises it: a restore loads the floors
-- after its CREATE TABLEs wrote theirs (and renumbers a queue not yet used)
CREATE FUNCTION spindle._msg_id_floor_merge() RETURNS trigger
    AS 'MODULE_PATHNAME', 'spindle_msg_id_floor_merge' LANGUAGE C;
CREATE TRIGGER merge_floor BEFORE INSERT ON spindle.queue_msg_id_floor
    FOR EACH ROW EXECUTE FUNCTION spindle._msg_id_floor_merge();
REVOKE ALL ON spindle.queue_msg_id_floor FROM PUBLIC;

-- What consumers receive.
CREATE TYPE spindle.message AS (
    msg_id      bigint,
    enqueued_at timestamptz,
    read_count  integer,
    payload     jsonb
);

CREATE FUNCTION spindle.create_queue(queue_name text,
    events_per_spindle integer DEFAULT NULL,
    time_to_live interval DEFAULT NULL,
    max_reads integer DEFAULT NULL,
    dead_letter_queue text DEFAULT NULL,
    max_depth bigint DEFAULT NULL,
    overflow text DEFAULT 'reject')
    RETURNS regclass
    AS 'MODULE_PATHNAME', 'spindle_create_queue' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION spindle.create_queue(text, integer, interval, integer, text, bigint, text) IS
    'create queue spindle_q.<queue_name>, owned by the caller; needs CREATE on schema spindle_q; at max_depth deliverable plus delayed events an enqueue fails (overflow ''reject''), or first drops the oldest deliverable event (''drop_oldest'') or moves it to dead_letter_queue (''dead_letter'')';

CREATE FUNCTION spindle.drop_queue(queue_name text,
    if_exists boolean DEFAULT false)
    RETURNS boolean
    AS 'MODULE_PATHNAME', 'spindle_drop_queue' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION spindle.drop_queue(text, boolean) IS
    'drop a queue and its events; needs its owner; false only for a missing queue with if_exists';

CREATE FUNCTION spindle.enqueue(queue_name text, payload jsonb,
    delay interval DEFAULT '0')
    RETURNS bigint
    AS 'MODULE_PATHNAME', 'spindle_enqueue' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION spindle.enqueue(text, jsonb, interval) IS
    'append one event, deliverable from now() + delay; returns its msg_id; needs INSERT on the queue';

CREATE FUNCTION spindle.enqueue_batch(queue_name text, payloads jsonb[],
    delay interval DEFAULT '0')
    RETURNS SETOF bigint
    AS 'MODULE_PATHNAME', 'spindle_enqueue_batch' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION spindle.enqueue_batch(text, jsonb[], interval) IS
    'append the payloads in array order in one statement; returns their msg_ids in that order; needs INSERT on the queue';

-- Consumers (src/queue/queue.c).  dequeue, read, ack and set_visibility need
-- SELECT and DELETE on the queue's table; none is SECURITY DEFINER.
CREATE FUNCTION spindle.dequeue(queue_name text, max_events integer DEFAULT 1,
    wait interval DEFAULT '0')
    RETURNS SETOF spindle.message
    AS 'MODULE_PATHNAME', 'spindle_dequeue' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION spindle.dequeue(text, integer, interval) IS
    'take up to max_events events, purged when the transaction commits, back if it rolls back; waits up to wait for the first';

CREATE FUNCTION spindle.read(queue_name text, max_events integer,
    visibility_timeout interval, wait interval DEFAULT '0')
    RETURNS SETOF spindle.message
    AS 'MODULE_PATHNAME', 'spindle_read' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION spindle.read(text, integer, interval, interval) IS
    'lease up to max_events events for visibility_timeout (delivered again after, read_count + 1, until acknowledged)';

CREATE FUNCTION spindle.ack(queue_name text, msg_id bigint)
    RETURNS boolean
    AS 'MODULE_PATHNAME', 'spindle_ack' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION spindle.ack(text, bigint) IS
    'purge an event in this transaction; false if it is already purged or being purged';

CREATE FUNCTION spindle.ack(queue_name text, msg_ids bigint[])
    RETURNS SETOF bigint
    AS 'MODULE_PATHNAME', 'spindle_ack_many' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION spindle.ack(text, bigint[]) IS
    'acknowledge each id; returns those it purged';

CREATE FUNCTION spindle.set_visibility(queue_name text, msg_id bigint,
    visibility_timeout interval)
    RETURNS boolean
    AS 'MODULE_PATHNAME', 'spindle_set_visibility' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION spindle.set_visibility(text, bigint, interval) IS
    'end a lease at now + visibility_timeout (''0'': hand the event back now); false if not leased';

-- ===================== verify (src/admin/verify.c) =====================
-- spindle.verify(rel): one row per broken invariant of a spindle table,
-- none when it is healthy; needs SELECT on the table, takes ACCESS SHARE.
CREATE FUNCTION spindle.verify(rel regclass)
    RETURNS SETOF text
    AS 'MODULE_PATHNAME', 'spindle_verify' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION spindle.verify(regclass) IS
    'check every invariant of a spindle table (directory, slot map and its directory, capacity, slot reuse, append order, index entries, queue state); one row per problem, none when healthy; needs SELECT on the table';

-- Test-only: break a spindle table on purpose so that the tests can see
-- verify() find it (superuser only).
CREATE FUNCTION spindle._verify_corrupt(rel regclass, what text,
    vslot bigint, arg bigint DEFAULT 0)
    RETURNS void
    AS 'MODULE_PATHNAME', 'spindle_verify_corrupt' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION spindle._verify_corrupt(regclass, text, bigint, bigint) IS
    'internal, for tests: corrupt a spindle table (map_clear, map_set, map_orphan, set_k, index_entry, queue_item, log_entry, log_floor); superuser only';
REVOKE ALL ON FUNCTION spindle._verify_corrupt(regclass, text, bigint, bigint) FROM PUBLIC;
-- ===================== Monitoring: spindle.queues =====================
-- One row per queue whose table the caller may SELECT from; figures from
-- shared memory (counters and consumer state), no lock on the queue's table.
CREATE FUNCTION spindle._queue_info(
    OUT queue_name text, OUT relation regclass, OUT depth bigint,
    OUT leased bigint, OUT delayed bigint, OUT oldest_event_age interval,
    OUT enqueued_total bigint, OUT dequeued_total bigint,
    OUT dead_lettered_total bigint, OUT waiting_consumers integer,
    OUT max_depth bigint, OUT overflow text)
    RETURNS SETOF record
    AS 'MODULE_PATHNAME', 'spindle_queue_info' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION spindle._queue_info() IS
    'internal: the rows of spindle.queues, for the queues whose table the caller may SELECT from';
CREATE VIEW spindle.queues WITH (security_barrier) AS
    SELECT * FROM spindle._queue_info();
COMMENT ON VIEW spindle.queues IS
    'one row per queue whose table the caller may SELECT from: depth, leases, delays, totals since server start, length limit';
GRANT SELECT ON spindle.queues TO PUBLIC;

-- ===================== The event cache (src/queue/cache.c) =====================
-- Shared memory of spindle.cache_tables x spindle.cache_size events, sized
-- at server start.  One row per spindle table the caller may SELECT from,
-- checked by OID (no lock on the table); a table that holds no cache slot
-- shows capacity 0.
CREATE FUNCTION spindle._cache_stats(
    OUT relid oid, OUT capacity bigint, OUT entries bigint, OUT hits bigint,
    OUT misses bigint, OUT evictions bigint, OUT memory_bytes bigint)
    RETURNS SETOF record
    AS 'MODULE_PATHNAME', 'spindle_cache_stats' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION spindle._cache_stats() IS
    'internal: the event cache''s table slots of this database';

CREATE VIEW spindle.cache_stats WITH (security_barrier) AS
    SELECT c.relation::regclass AS relation,
           coalesce(s.capacity, 0) AS capacity,
           coalesce(s.entries, 0) AS entries,
           coalesce(s.hits, 0) AS hits,
           coalesce(s.misses, 0) AS misses,
           coalesce(s.evictions, 0) AS evictions,
           CASE WHEN s.hits + s.misses > 0
                THEN s.hits::float8 / (s.hits + s.misses) END AS hit_ratio,
           coalesce(s.memory_bytes, 0) AS memory_bytes
      FROM spindle.table_catalog c
      LEFT JOIN spindle._cache_stats() s ON s.relid = c.relation::oid
     WHERE pg_catalog.has_table_privilege(c.relation::oid, 'SELECT');
COMMENT ON VIEW spindle.cache_stats IS
    'the event cache: one row per spindle table the caller may SELECT from';
GRANT SELECT ON spindle.cache_stats TO PUBLIC;
