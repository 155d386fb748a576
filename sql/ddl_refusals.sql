--
-- ddl_refusals: commands a spindle table refuses with SQLSTATE 0A000, and
-- the ones it accepts: VACUUM, ANALYZE, VACUUM FULL and CLUSTER (which keep
-- every event and spindle), TRUNCATE, DROP TABLE, UNLOGGED tables.
--
\set VERBOSITY default

-- This test asserts exact drop counts and spindle lists: the background
-- worker, which drops spindles at moments of its own choosing, must be off
-- (test/spindle.conf turns it off for pg_regress).
SHOW spindle.enable_worker;

CREATE TABLE r (id int, v text) USING spindle WITH (events_per_spindle = 4);
CREATE INDEX r_id ON r (id);
INSERT INTO r SELECT g, 'v' || g FROM generate_series(1, 10) g;
DELETE FROM r WHERE id IN (2, 3);
UPDATE r SET v = 'updated' WHERE id = 4;
CREATE VIEW r_spindles AS
  SELECT spindle_no, state, capacity, events, purged_events
    FROM spindle.spindles WHERE relation = 'r'::regclass AND state <> 'ready';
SELECT * FROM r_spindles ORDER BY spindle_no;
SELECT id, v FROM r ORDER BY id;

-- index access methods that cannot work
CREATE INDEX r_brin ON r USING brin (id);
\echo :SQLSTATE
CREATE INDEX CONCURRENTLY r_conc ON r (id);
\echo :SQLSTATE
SELECT indexrelid::regclass FROM pg_index WHERE indrelid = 'r'::regclass ORDER BY 1;

-- table-rewriting and storage-changing ALTER TABLE commands
ALTER TABLE r ADD COLUMN w int;
\echo :SQLSTATE
ALTER TABLE r ADD COLUMN w int DEFAULT 5;
\echo :SQLSTATE
ALTER TABLE r DROP COLUMN v;
\echo :SQLSTATE
ALTER TABLE r ALTER COLUMN id TYPE bigint;
\echo :SQLSTATE
ALTER TABLE r ALTER COLUMN v TYPE varchar(20);
\echo :SQLSTATE
ALTER TABLE r SET ACCESS METHOD heap;
\echo :SQLSTATE
ALTER TABLE r SET LOGGED;
\echo :SQLSTATE
ALTER TABLE r SET UNLOGGED;
\echo :SQLSTATE
-- a refused command among accepted ones refuses the whole statement
ALTER TABLE r ALTER COLUMN v SET DEFAULT 'x', ADD COLUMN w int;
\echo :SQLSTATE
-- nothing changed
SELECT attname, format_type(atttypid, atttypmod), atthasdef FROM pg_attribute
 WHERE attrelid = 'r'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum;
SELECT a.amname, c.relpersistence FROM pg_class c JOIN pg_am a ON a.oid = c.relam
 WHERE c.oid = 'r'::regclass;

-- TABLESAMPLE
SELECT count(*) FROM r TABLESAMPLE SYSTEM (50);
\echo :SQLSTATE
SELECT count(*) FROM r TABLESAMPLE BERNOULLI (50) REPEATABLE (1);
\echo :SQLSTATE

-- after all the refusals, the table is as it was
SELECT * FROM r_spindles ORDER BY spindle_no;
SELECT id, v FROM r ORDER BY id;

-- VACUUM, VACUUM FREEZE and ANALYZE work and change nothing
VACUUM r;
VACUUM (FREEZE, VERBOSE false) r;
ANALYZE r;
VACUUM ANALYZE r;
SELECT reltuples FROM pg_class WHERE oid = 'r'::regclass;
SELECT * FROM r_spindles ORDER BY spindle_no;
SELECT id, v FROM r ORDER BY id;

-- VACUUM FULL and CLUSTER keep every event and every spindle
CREATE TEMP TABLE r_before AS
  SELECT spindle_no, state, capacity, events, purged_events FROM r_spindles;
VACUUM FULL r;
SELECT count(*) AS changed_spindles FROM (
  (SELECT * FROM r_before EXCEPT SELECT * FROM r_spindles)
  UNION ALL
  (SELECT * FROM r_spindles EXCEPT SELECT * FROM r_before)) x;
SELECT id, v FROM r ORDER BY id;
CLUSTER r USING r_id;
SELECT count(*) AS changed_spindles FROM (
  (SELECT * FROM r_before EXCEPT SELECT * FROM r_spindles)
  UNION ALL
  (SELECT * FROM r_spindles EXCEPT SELECT * FROM r_before)) x;
SELECT id, v FROM r ORDER BY id;
CLUSTER r;
VACUUM FULL ANALYZE r;
SELECT count(*) AS changed_spindles FROM (
  (SELECT * FROM r_before EXCEPT SELECT * FROM r_spindles)
  UNION ALL
  (SELECT * FROM r_spindles EXCEPT SELECT * FROM r_before)) x;
-- the indexes still agree with the table
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT id, v FROM r WHERE id > 0 ORDER BY id;
RESET enable_bitmapscan;
RESET enable_seqscan;
-- and inserts go on in the open spindle
INSERT INTO r VALUES (11, 'after vacuum full');
SELECT * FROM r_spindles ORDER BY spindle_no;

-- TRUNCATE rolled back keeps everything
BEGIN;
TRUNCATE r;
SELECT count(*) FROM r;
ROLLBACK;
SELECT count(*), sum(id) FROM r;
SELECT * FROM r_spindles ORDER BY spindle_no;

-- TRUNCATE empties the table and removes every spindle
CREATE TEMP TABLE r_segments AS
  SELECT segment FROM spindle.spindle_catalog WHERE relation = 'r'::regclass;
SELECT count(*) > 0 AS had_segments FROM r_segments;
TRUNCATE r;
SELECT count(*) FROM r;
SELECT count(*) AS old_segments_left FROM pg_class
 WHERE oid IN (SELECT segment FROM r_segments);
SELECT coalesce(sum(events), 0) AS events, coalesce(sum(purged_events), 0) AS purged
  FROM spindle.spindles WHERE relation = 'r'::regclass;
SELECT events, purged_events FROM spindle.tables WHERE relation = 'r'::regclass;
-- a new first spindle takes the next events
INSERT INTO r SELECT g, 'again' || g FROM generate_series(1, 5) g;
SELECT state, capacity, events, purged_events FROM r_spindles ORDER BY spindle_no;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT id, v FROM r WHERE id > 0 ORDER BY id;
RESET enable_bitmapscan;
RESET enable_seqscan;
SELECT id, v FROM r ORDER BY id;

-- DROP TABLE rolled back keeps everything
BEGIN;
DROP TABLE r CASCADE;
ROLLBACK;
SELECT count(*) FROM r;
-- DROP TABLE removes every spindle
SELECT 'r'::regclass::oid AS r_oid \gset
TRUNCATE r_segments;
INSERT INTO r_segments SELECT segment FROM spindle.spindle_catalog WHERE relation = :r_oid;
DROP TABLE r CASCADE;
SELECT count(*) FROM spindle.spindles WHERE relation::oid = :r_oid;
SELECT count(*) FROM spindle.spindle_catalog WHERE relation = :r_oid;
SELECT count(*) FROM spindle.tables WHERE relation::oid = :r_oid;
SELECT count(*) AS old_segments_left FROM pg_class
 WHERE oid IN (SELECT segment FROM r_segments);
SELECT count(*) AS spindle_relations_left FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'pg_spindle'
   AND c.oid NOT IN (SELECT segment FROM spindle.spindle_catalog)
   AND c.relkind = 'r';

-- UNLOGGED spindle tables work
CREATE UNLOGGED TABLE ru (id int, v text) USING spindle WITH (events_per_spindle = 3);
SELECT relpersistence FROM pg_class WHERE oid = 'ru'::regclass;
CREATE INDEX ru_id ON ru (id);
INSERT INTO ru SELECT g, 'u' || g FROM generate_series(1, 7) g;
DELETE FROM ru WHERE id <= 3;
UPDATE ru SET v = 'changed' WHERE id = 7;
SELECT id, v FROM ru ORDER BY id;
SELECT spindle_no, state, capacity, events, purged_events FROM spindle.spindles
 WHERE relation = 'ru'::regclass AND state <> 'ready' ORDER BY spindle_no;
SELECT spindle.drop_spindles('ru') >= 0 AS ran;
SELECT spindle_no, state, capacity, events, purged_events FROM spindle.spindles
 WHERE relation = 'ru'::regclass AND state <> 'ready' ORDER BY spindle_no;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT id, v FROM ru WHERE id > 0 ORDER BY id;
RESET enable_bitmapscan;
RESET enable_seqscan;
ALTER TABLE ru SET LOGGED;
\echo :SQLSTATE
TRUNCATE ru;
SELECT count(*) FROM ru;
DROP TABLE ru;

DROP TABLE r_before, r_segments;

-- VACUUM FULL or CLUSTER reaching a spindle itself (as a database-wide
-- VACUUM FULL does) is refused: it would move events the table maps by
-- position.  The table keeps every event.
CREATE TABLE rv (id int) USING spindle WITH (events_per_spindle = 4);
INSERT INTO rv SELECT generate_series(1, 6);
\set VERBOSITY sqlstate
\set ECHO none
SELECT format('VACUUM FULL %s', segment::regclass) FROM spindle.spindle_catalog
 WHERE relation = 'rv'::regclass ORDER BY spindle_no LIMIT 1 \gexec
\set ECHO all
\set VERBOSITY default
SELECT count(*), sum(id) FROM rv;
-- spindle.verify(): every spindle table left here is healthy
SELECT c.oid::regclass AS rel, v FROM pg_catalog.pg_class c, spindle.verify(c.oid) v
 WHERE c.relam = (SELECT oid FROM pg_catalog.pg_am WHERE amname = 'spindle')
 ORDER BY 1, 2;
DROP TABLE rv;
