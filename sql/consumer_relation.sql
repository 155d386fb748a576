--
-- consumer_relation: every queue table has a consumer relation
-- pg_spindle.c<queue table oid> (access method spindle_meta) that depends
-- on it INTERNALly, goes with every drop of it, gets a new relfilenode
-- (counters kept) when the queue is truncated, holds no rows, refuses DML
-- and never makes VACUUM, ANALYZE or VACUUM FREEZE fail
-- (docs/design.md, "Consumer state ...", section 3).
--
SET client_min_messages = warning;
CREATE FUNCTION crel(q regclass) RETURNS regclass LANGUAGE sql AS
$$ SELECT c.oid::regclass FROM pg_class c
   WHERE c.relnamespace = 'pg_spindle'::regnamespace
     AND c.relname = 'c' || q::oid $$;
CREATE VIEW crels AS
  SELECT d.refobjid::regclass AS queue_table, d.deptype, a.amname,
         c.relkind, c.relpersistence,
         c.relfrozenxid <> '0'::xid AS relfrozenxid_valid,
         c.relminmxid = '0'::xid AS relminmxid_invalid,
         c.relowner = 10 AS owned_by_bootstrap
    FROM pg_class c
    JOIN pg_am a ON a.oid = c.relam
    LEFT JOIN pg_depend d ON d.classid = 'pg_class'::regclass
         AND d.objid = c.oid AND d.refclassid = 'pg_class'::regclass
   WHERE c.relnamespace = 'pg_spindle'::regnamespace
     AND a.amname = 'spindle_meta'
     AND (d.refobjid IS NULL
          OR d.refobjid::regclass::text LIKE 'spindle\_q.cr\_%');

-- made by create_queue, and by any CREATE TABLE of a queue table
SELECT spindle.create_queue('cr_a');
SELECT spindle.create_queue('cr_b');
CREATE TABLE spindle_q.cr_plain (
    msg_id bigint NOT NULL DEFAULT 0,
    enqueued_at timestamptz NOT NULL DEFAULT now(),
    visible_at timestamptz NOT NULL DEFAULT now(),
    payload jsonb NOT NULL) USING spindle;
CREATE UNLOGGED TABLE spindle_q.cr_unlogged (
    msg_id bigint NOT NULL DEFAULT 0,
    enqueued_at timestamptz NOT NULL DEFAULT now(),
    visible_at timestamptz NOT NULL DEFAULT now(),
    payload jsonb NOT NULL) USING spindle;
-- not a queue table: none
CREATE TABLE public.cr_other (a int) USING spindle;
CREATE TABLE spindle_q.cr_heap (msg_id bigint) USING heap;
SELECT * FROM crels ORDER BY queue_table::text;
-- one metapage; the unlogged one's init fork holds it too
SELECT pg_relation_size(crel('spindle_q.cr_a')) AS main,
       pg_relation_size(crel('spindle_q.cr_unlogged'), 'init') AS init;

-- no rows, no DML, no index, no drop of its own
\set VERBOSITY sqlstate
SELECT crel('spindle_q.cr_a') AS c_a \gset
SELECT count(*) FROM :c_a;
SELECT * FROM :c_a;
INSERT INTO :c_a DEFAULT VALUES;
COPY :c_a FROM stdin;

\.
-- (UPDATE and DELETE find no row to change)
DELETE FROM :c_a;
DROP TABLE :c_a;
\set VERBOSITY default

-- VACUUM, ANALYZE, VACUUM FREEZE of the whole database succeed;
-- relfrozenxid stays valid and moves forward
SELECT relfrozenxid AS f0 FROM pg_class WHERE oid = :'c_a'::regclass \gset
SELECT txid_current() IS NOT NULL AS burn;
SELECT txid_current() IS NOT NULL AS burn;
SELECT txid_current() IS NOT NULL AS burn;
VACUUM;
ANALYZE;
VACUUM FREEZE;
VACUUM (ANALYZE) :c_a;
SELECT relfrozenxid <> '0'::xid AS valid,
       age(relfrozenxid) < age(:'f0'::xid) AS advanced,
       relminmxid = '0'::xid AS minmxid_invalid,
       reltuples <= 0 AS no_tuples
  FROM pg_class WHERE oid = :'c_a'::regclass;
-- VACUUM FULL keeps its pages
VACUUM FULL :c_a;
SELECT pg_relation_size(:'c_a'::regclass) AS after_full;

-- TRUNCATE of the queue: a new relfilenode, rolled back with it
SELECT relfilenode AS fn0 FROM pg_class WHERE oid = :'c_a'::regclass \gset
BEGIN;
TRUNCATE spindle_q.cr_a;
SELECT relfilenode <> :fn0 AS renewed, pg_relation_size(oid) AS size
  FROM pg_class WHERE oid = :'c_a'::regclass;
ROLLBACK;
SELECT relfilenode = :fn0 AS kept FROM pg_class WHERE oid = :'c_a'::regclass;
TRUNCATE spindle_q.cr_a;
SELECT relfilenode <> :fn0 AS renewed, pg_relation_size(oid) AS size
  FROM pg_class WHERE oid = :'c_a'::regclass;
-- also one created and truncated in one transaction
BEGIN;
SELECT spindle.create_queue('cr_new');
TRUNCATE spindle_q.cr_new;
SELECT pg_relation_size(crel('spindle_q.cr_new')) AS size;
COMMIT;

-- every drop path removes it
SELECT spindle.drop_queue('cr_a');
DROP TABLE spindle_q.cr_plain;
BEGIN;
DROP TABLE spindle_q.cr_b;
SELECT count(*) FROM crels WHERE queue_table IS NULL;
ROLLBACK;
SELECT * FROM crels ORDER BY queue_table::text;
CREATE ROLE cr_owner;
ALTER TABLE spindle_q.cr_unlogged OWNER TO cr_owner;
DROP OWNED BY cr_owner;
DROP ROLE cr_owner;
SELECT spindle.drop_queue('cr_b');
SELECT spindle.drop_queue('cr_new');
SELECT * FROM crels;
DROP TABLE public.cr_other, spindle_q.cr_heap;

-- DROP EXTENSION (which takes schema spindle_q), DROP DATABASE
SELECT current_database() AS regdb \gset
CREATE DATABASE cr_db;
\c cr_db
SET client_min_messages = warning;
CREATE EXTENSION spindle;
SELECT spindle.create_queue('x');
SELECT count(*) FROM pg_class WHERE relnamespace = 'pg_spindle'::regnamespace
   AND relam = (SELECT oid FROM pg_am WHERE amname = 'spindle_meta');
DROP EXTENSION spindle CASCADE;
CREATE EXTENSION spindle;
SELECT spindle.create_queue('y');
DROP EXTENSION spindle CASCADE;
SELECT count(*) FROM pg_class WHERE relnamespace = 'pg_spindle'::regnamespace;
CREATE EXTENSION spindle;
SELECT spindle.create_queue('z');
\c :regdb
DROP DATABASE cr_db;
DROP VIEW crels;
DROP FUNCTION crel(regclass);
