-- Review of the table AM core (issue 20).  Each part failed before its fix.
SET client_min_messages = warning;

-- 1. WHERE CURRENT OF after an UPDATE ... WHERE CURRENT OF in the same
-- transaction reaches the version that UPDATE wrote, as heap's update
-- chain does.  (An UPDATE is a delete + an insert into the open spindle:
-- before the fix the second statement found the old, deleted version and
-- said DELETE 0 / UPDATE 0.)
CREATE TABLE cr_cur (a int, b text) USING spindle WITH (events_per_spindle = 3);
INSERT INTO cr_cur (a) SELECT generate_series(1, 6);
BEGIN;
DECLARE c CURSOR FOR SELECT a FROM cr_cur;
FETCH 1 FROM c;
UPDATE cr_cur SET b = 'upd' WHERE CURRENT OF c;
DELETE FROM cr_cur WHERE CURRENT OF c;
COMMIT;
SELECT a, b FROM cr_cur ORDER BY a;
-- UPDATE after UPDATE, three times, then DELETE RETURNING the last version
BEGIN;
DECLARE c CURSOR FOR SELECT a FROM cr_cur;
FETCH 1 FROM c;
UPDATE cr_cur SET b = 'one' WHERE CURRENT OF c;
UPDATE cr_cur SET b = b || ' two' WHERE CURRENT OF c;
UPDATE cr_cur SET b = b || ' three' WHERE CURRENT OF c RETURNING a, b;
FETCH 1 FROM c;
UPDATE cr_cur SET b = 'next' WHERE CURRENT OF c;
UPDATE cr_cur SET b = b || ' again' WHERE CURRENT OF c;
COMMIT;
SELECT a, b FROM cr_cur ORDER BY a;
-- an UPDATE rolled back to a savepoint: the cursor's row is the old one again
BEGIN;
DECLARE c CURSOR FOR SELECT a FROM cr_cur WHERE a = 4;
FETCH 1 FROM c;
UPDATE cr_cur SET b = 'kept' WHERE CURRENT OF c;
SAVEPOINT s;
UPDATE cr_cur SET b = 'rolled back' WHERE CURRENT OF c;
ROLLBACK TO SAVEPOINT s;
UPDATE cr_cur SET b = b || ' and followed' WHERE CURRENT OF c;
SAVEPOINT s2;
UPDATE cr_cur SET b = b || ', in a released savepoint' WHERE CURRENT OF c;
RELEASE SAVEPOINT s2;
UPDATE cr_cur SET b = b || ', then updated' WHERE CURRENT OF c;
COMMIT;
SELECT a, b FROM cr_cur ORDER BY a;
-- an UPDATE not through the cursor, after the cursor read the row; a
-- FOR UPDATE cursor; a row the transaction deleted is gone (DELETE 0)
BEGIN;
DECLARE c CURSOR FOR SELECT a FROM cr_cur WHERE a = 5;
FETCH 1 FROM c;
UPDATE cr_cur SET b = 'by key' WHERE a = 5;
UPDATE cr_cur SET b = b || ', by cursor' WHERE CURRENT OF c;
DECLARE f CURSOR FOR SELECT a FROM cr_cur WHERE a = 6 FOR UPDATE;
FETCH 1 FROM f;
UPDATE cr_cur SET b = 'locked' WHERE CURRENT OF f;
DELETE FROM cr_cur WHERE CURRENT OF f;
DECLARE d CURSOR FOR SELECT a FROM cr_cur WHERE a = 3;
FETCH 1 FROM d;
DELETE FROM cr_cur WHERE a = 3;
UPDATE cr_cur SET b = 'deleted' WHERE CURRENT OF d;
COMMIT;
SELECT a, b FROM cr_cur ORDER BY a;
-- the transaction's updates are forgotten at its end
BEGIN;
DECLARE c CURSOR FOR SELECT a FROM cr_cur WHERE a = 2;
FETCH 1 FROM c;
UPDATE cr_cur SET b = 'rolled back' WHERE CURRENT OF c;
ROLLBACK;
BEGIN;
DECLARE c CURSOR FOR SELECT a FROM cr_cur WHERE a = 2;
FETCH 1 FROM c;
DELETE FROM cr_cur WHERE CURRENT OF c;
COMMIT;
SELECT a, b FROM cr_cur ORDER BY a;
DROP TABLE cr_cur;
-- the chain takes at most work_mem (64 bytes a row): an update past that
-- is not followed, and WHERE CURRENT OF says so rather than finding no row
CREATE TABLE cr_many (a int, b text) USING spindle WITH (events_per_spindle = 1000);
INSERT INTO cr_many SELECT generate_series(1, 3000);
BEGIN;
SET LOCAL work_mem = '64kB';
DECLARE early CURSOR FOR SELECT a FROM cr_many WHERE a = 5;
FETCH 1 FROM early;
DECLARE late CURSOR FOR SELECT a FROM cr_many WHERE a = 2500;
FETCH 1 FROM late;
UPDATE cr_many SET b = 'all';
UPDATE cr_many SET b = b || ', early' WHERE CURRENT OF early RETURNING a, b;
UPDATE cr_many SET b = b || ', late' WHERE CURRENT OF late;
ROLLBACK;
DROP TABLE cr_many;

-- 2. events_per_spindle = 0 (one single spindle that is never dropped) is
-- refused on an existing table: before the fix the ALTER was accepted and
-- every later insert failed with 54000 "no room for another spindle of 0
-- events" on a table holding 150 events.
CREATE TABLE cr_cap (id int) USING spindle WITH (events_per_spindle = 100);
INSERT INTO cr_cap SELECT generate_series(1, 150);
ALTER TABLE cr_cap SET (events_per_spindle = 0);
SET spindle.events_per_spindle = 0;
ALTER TABLE cr_cap RESET (events_per_spindle);
RESET spindle.events_per_spindle;
INSERT INTO cr_cap SELECT generate_series(1, 200);
INSERT INTO cr_cap VALUES (1);
SELECT count(*) FROM cr_cap;
SELECT capacity, count(*) FROM spindle.spindle_catalog
 WHERE relation = 'cr_cap'::regclass GROUP BY capacity;
-- other capacities still change as before
ALTER TABLE cr_cap SET (events_per_spindle = 50);
INSERT INTO cr_cap SELECT generate_series(1, 200);
SELECT count(*) FROM cr_cap;
-- even an empty table that has its open spindle
TRUNCATE cr_cap;
ALTER TABLE cr_cap SET (events_per_spindle = 0);
-- a table made with 0 keeps it; setting 0 again changes nothing
CREATE TABLE cr_cap0 (id int) USING spindle WITH (events_per_spindle = 0);
INSERT INTO cr_cap0 SELECT generate_series(1, 300);
ALTER TABLE cr_cap0 SET (events_per_spindle = 0);
INSERT INTO cr_cap0 SELECT generate_series(1, 300);
SELECT count(*) FROM cr_cap0;
SELECT capacity, count(*) FROM spindle.spindle_catalog
 WHERE relation = 'cr_cap0'::regclass GROUP BY capacity;
DROP TABLE cr_cap, cr_cap0;

-- 4. REINDEX CONCURRENTLY is refused before anything is built (before the
-- fix it failed at validation and left a ready but invalid _ccnew index
-- per try); plain REINDEX works.
CREATE TABLE cr_rcc (id int PRIMARY KEY, v int) USING spindle WITH (events_per_spindle = 5);
INSERT INTO cr_rcc SELECT g, g FROM generate_series(1, 20) g;
REINDEX TABLE CONCURRENTLY cr_rcc;
REINDEX (VERBOSE false, CONCURRENTLY) INDEX cr_rcc_pkey;
REINDEX (CONCURRENTLY false) TABLE cr_rcc;
REINDEX INDEX cr_rcc_pkey;
-- through a partitioned table or index
CREATE TABLE cr_rp (id int, v int) PARTITION BY RANGE (id);
CREATE TABLE cr_rp1 PARTITION OF cr_rp FOR VALUES FROM (0) TO (100);
CREATE TABLE cr_rp2 PARTITION OF cr_rp FOR VALUES FROM (100) TO (200) USING spindle;
CREATE INDEX cr_rp_id ON cr_rp (id);
INSERT INTO cr_rp SELECT g, g FROM generate_series(1, 150) g;
REINDEX TABLE CONCURRENTLY cr_rp;
REINDEX INDEX CONCURRENTLY cr_rp_id;
REINDEX TABLE CONCURRENTLY cr_rp1;
-- a schema holding a spindle table with an index
CREATE SCHEMA cr_s;
CREATE TABLE cr_s.h (id int PRIMARY KEY);
CREATE TABLE cr_s.t (id int) USING spindle;
REINDEX SCHEMA CONCURRENTLY cr_s;
CREATE INDEX ON cr_s.t (id);
REINDEX SCHEMA CONCURRENTLY cr_s;
SELECT current_database() AS dbname \gset
\set VERBOSITY terse
REINDEX DATABASE CONCURRENTLY :"dbname";
\set VERBOSITY default
SELECT c.relname FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
 WHERE c.relname LIKE '%ccnew%' OR NOT i.indisvalid;
SELECT count(*) FROM cr_rcc WHERE id = 7;
DROP TABLE cr_rcc, cr_rp;
DROP SCHEMA cr_s CASCADE;

-- 5. ALTER MATERIALIZED VIEW ... SET ACCESS METHOD spindle is refused, as
-- CREATE MATERIALIZED VIEW ... USING spindle is (before the fix it made a
-- matview that could no longer be read nor refreshed).
CREATE MATERIALIZED VIEW cr_mv AS SELECT 1 AS a WITH NO DATA;
ALTER MATERIALIZED VIEW cr_mv SET ACCESS METHOD spindle;
ALTER TABLE cr_mv SET ACCESS METHOD spindle;
REFRESH MATERIALIZED VIEW cr_mv;
SELECT * FROM cr_mv;
ALTER MATERIALIZED VIEW cr_mv SET ACCESS METHOD heap;
SELECT a.amname, c.relkind FROM pg_class c JOIN pg_am a ON a.oid = c.relam
 WHERE c.relname = 'cr_mv';
DROP MATERIALIZED VIEW cr_mv;
-- a table changes to spindle or from it neither
CREATE TABLE cr_h (a int);
INSERT INTO cr_h VALUES (1);
ALTER TABLE cr_h SET ACCESS METHOD spindle;
CREATE TABLE cr_t (a int) USING spindle;
INSERT INTO cr_t VALUES (2);
ALTER TABLE cr_t SET ACCESS METHOD heap;
ALTER TABLE cr_t SET ACCESS METHOD spindle;
SELECT c.relname, a.amname FROM pg_class c JOIN pg_am a ON a.oid = c.relam
 WHERE c.relname IN ('cr_h', 'cr_t') ORDER BY 1;
SELECT * FROM cr_h UNION ALL SELECT * FROM cr_t;
DROP TABLE cr_h, cr_t;
