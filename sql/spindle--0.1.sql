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
    PRIMARY KEY (relation, spindle_no)
);
-- the ranges taken, in order, for the allocation of a new spindle's range
CREATE INDEX spindle_catalog_vbase ON spindle.spindle_catalog (relation, vbase)
    INCLUDE (vcount);
CREATE TABLE spindle.table_catalog (
    relation          oid PRIMARY KEY,
    spindles_dropped  bigint NOT NULL DEFAULT 0,
    bytes_freed       bigint NOT NULL DEFAULT 0
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
    OUT filled_at timestamptz)
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
           coalesce(s.events, 0) AS events,
           coalesce(s.purged_events, 0) AS purged_events,
           coalesce(s.size_bytes, 0) AS size_bytes,
           c.spindles_dropped,
           c.bytes_freed
      FROM spindle.table_catalog c
      CROSS JOIN LATERAL spindle._table_options(c.relation::regclass) o
      LEFT JOIN (SELECT i.relation, count(*) AS spindles,
                        sum(i.events)::bigint AS events,
                        sum(i.purged_events)::bigint AS purged_events,
                        sum(i.size_bytes)::bigint AS size_bytes
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
    OUT bytes_freed bigint, OUT last_error text)
    RETURNS SETOF record
    AS 'MODULE_PATHNAME', 'spindle_worker_info' LANGUAGE C STRICT VOLATILE;
-- The worker's state (its last error may name any table of its database)
-- is for superusers and the roles they grant it to.
REVOKE EXECUTE ON FUNCTION spindle._worker_info() FROM PUBLIC;

CREATE VIEW spindle.worker AS
    SELECT w.pid, d.datname AS database, w.state, w.last_run,
           w.spindles_dropped, w.bytes_freed, w.last_error
      FROM spindle._worker_info() w
      JOIN pg_catalog.pg_database d ON d.oid = w.database;
