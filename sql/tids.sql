--
-- tids: the TIDs a spindle table hands out are dense virtual slots.  A TID
-- never comes to mean another event (invariant 3), whatever rolls back;
-- the limit is counted in events, not in spindles; the hidden columns that
-- carry each event's slot and append time never leak out.
--
\set VERBOSITY default

-- 1. A spindle creation rolled back with its savepoint: its range of TIDs
-- stays taken until cleanup has removed the index entries pointing into
-- it, so the next spindle never takes them over.
BEGIN;
CREATE TABLE rq (id int PRIMARY KEY, v text) USING spindle
    WITH (events_per_spindle = 2);
SAVEPOINT a;
INSERT INTO rq VALUES (1, 'x'), (2, 'x'), (3, 'aborted'), (4, 'aborted');
ROLLBACK TO a;
INSERT INTO rq VALUES (11, 'new'), (12, 'new');
COMMIT;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT * FROM rq WHERE id = 3;
SELECT * FROM rq WHERE id IN (1, 2, 3, 4, 11, 12) ORDER BY id;
RESET enable_bitmapscan;
SET enable_indexscan = off;
SELECT * FROM rq WHERE id IN (1, 2, 3, 4, 11, 12) ORDER BY id;
RESET enable_indexscan;
RESET enable_seqscan;
-- the key is free again: no stale index entry claims it
INSERT INTO rq VALUES (3, 'y');
SELECT * FROM rq ORDER BY id;
-- cleanup gives the rolled-back ranges back; the TIDs reused afterwards
-- still mean exactly one event each
VACUUM rq;
INSERT INTO rq SELECT g, 'after' FROM generate_series(20, 29) g;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT id, v FROM rq WHERE id BETWEEN 1 AND 30 ORDER BY id;
RESET enable_bitmapscan;
RESET enable_seqscan;
SELECT count(*) = count(DISTINCT ctid) AS tids_distinct FROM rq;

-- the same through a whole transaction that created spindles itself (it
-- holds ACCESS EXCLUSIVE, so no helper can create them) and rolled back
CREATE TABLE rx (id int PRIMARY KEY) USING spindle WITH (events_per_spindle = 3);
BEGIN;
LOCK TABLE rx IN ACCESS EXCLUSIVE MODE;
INSERT INTO rx SELECT generate_series(1, 10);
ROLLBACK;
INSERT INTO rx SELECT generate_series(101, 110);
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT count(*) FROM rx WHERE id <= 10;
SELECT count(*) FROM rx WHERE id > 100;
RESET enable_bitmapscan;
SET enable_indexscan = off;
SELECT count(*) FROM rx WHERE id <= 10;
SELECT count(*) FROM rx WHERE id > 100;
RESET enable_indexscan;
RESET enable_seqscan;
INSERT INTO rx SELECT generate_series(1, 10);
SELECT count(*), count(DISTINCT id) FROM rx;

-- 2. ctid is the same whichever way the row is found
CREATE TABLE rc (id int PRIMARY KEY, v text) USING spindle
    WITH (events_per_spindle = 4);
INSERT INTO rc SELECT g, 'v' || g FROM generate_series(1, 30) g;
CREATE TEMP TABLE rc_seq AS SELECT id, ctid::text AS t FROM rc;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT count(*) AS ctid_differs FROM rc JOIN rc_seq s USING (id)
 WHERE rc.ctid::text <> s.t;
RESET enable_bitmapscan;
SET enable_indexscan = off;
SELECT count(*) AS ctid_differs FROM rc JOIN rc_seq s USING (id)
 WHERE rc.ctid::text <> s.t;
RESET enable_indexscan;
RESET enable_seqscan;
-- and a TID scan finds the row by it
SELECT id, v FROM rc WHERE ctid = (SELECT t::tid FROM rc_seq WHERE id = 17);

-- 3. the hidden columns never leak: not into SELECT *, a copy of the rows,
-- nor into a column added later to that copy
SELECT attname FROM pg_attribute
 WHERE attrelid = 'rc'::regclass AND attnum > 0 AND NOT attisdropped
 ORDER BY attnum;
CREATE TABLE rc_copy AS SELECT * FROM rc;
INSERT INTO rc_copy SELECT * FROM rc WHERE id <= 5;
ALTER TABLE rc_copy ADD COLUMN extra int;
SELECT count(*) AS rows, count(extra) AS non_null_extra FROM rc_copy;
CREATE TABLE rc_heap (id int, v text, extra int);
INSERT INTO rc_heap SELECT * FROM rc;
SELECT count(*), count(extra) FROM rc_heap;
SELECT (r).* FROM (SELECT rc AS r FROM rc WHERE id = 3) s;
-- a spindle table made by CREATE TABLE AS has them too, and works
CREATE TABLE rc_ctas USING spindle WITH (events_per_spindle = 7)
    AS SELECT id, v FROM rc;
SELECT count(*), count(DISTINCT ctid), min(id), max(id) FROM rc_ctas;
SELECT count(*) AS hidden FROM pg_attribute
 WHERE attrelid = 'rc_ctas'::regclass AND attisdropped;
-- a user column may not take their names
CREATE TABLE rc_bad ("........spindle.slot........" int) USING spindle;
\echo :SQLSTATE

-- 4. more than the 1 024 spindles and 102 400 events the old chunk map
-- allowed (events_per_spindle = 100): the limit is in events now
CREATE TABLE rbig (id int PRIMARY KEY) USING spindle WITH (events_per_spindle = 100);
INSERT INTO rbig SELECT generate_series(1, 103000);
SELECT count(*), count(DISTINCT ctid) FROM rbig;
SELECT count(*) > 1024 AS more_than_1024_spindles FROM spindle.spindles
 WHERE relation = 'rbig'::regclass;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT id FROM rbig WHERE id IN (1, 51234, 102400, 102401, 103000) ORDER BY id;
RESET enable_bitmapscan;
SET enable_indexscan = off;
SELECT id FROM rbig WHERE id IN (1, 51234, 102400, 102401, 103000) ORDER BY id;
RESET enable_indexscan;
RESET enable_seqscan;
-- a plan or a scan takes a few spindle locks, not one per spindle
BEGIN;
EXPLAIN (COSTS OFF) SELECT * FROM rbig WHERE id = 7;
SELECT count(*) FROM rbig WHERE id % 1000 = 0;
SELECT count(*) < 20 AS few_locks FROM pg_locks WHERE pid = pg_backend_pid();
COMMIT;
-- the planner's estimate comes from the counters, not from opening spindles
ANALYZE rbig;
SELECT reltuples BETWEEN 90000 AND 115000 AS reltuples_ok FROM pg_class
 WHERE oid = 'rbig'::regclass;
CREATE FUNCTION rbig_estimate() RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE
    plan json;
BEGIN
    EXECUTE 'EXPLAIN (FORMAT JSON) SELECT * FROM rbig' INTO plan;
    RETURN (plan -> 0 -> 'Plan' ->> 'Plan Rows')::float8;
END $$;
SELECT rbig_estimate() BETWEEN 51500 AND 206000 AS estimate_within_2x;

-- 5. the largest capacity is the whole TID space, and is refused above it
CREATE TABLE rmax (id int) USING spindle WITH (events_per_spindle = 38141952);
SELECT capacity FROM spindle.spindles WHERE relation = 'rmax'::regclass;
CREATE TABLE rover (id int) USING spindle WITH (events_per_spindle = 38141953);
\echo :SQLSTATE

-- 6. parallel scans return every row exactly once
SET max_parallel_workers_per_gather = 2;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
EXPLAIN (COSTS OFF) SELECT count(*) FROM rbig;
SELECT count(*), count(DISTINCT id), sum(id) FROM rbig;
RESET max_parallel_workers_per_gather;
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size;

-- spindle.verify(): every spindle table left here is healthy
SELECT c.oid::regclass AS rel, v FROM pg_catalog.pg_class c, spindle.verify(c.oid) v
 WHERE c.relam = (SELECT oid FROM pg_catalog.pg_am WHERE amname = 'spindle')
 ORDER BY 1, 2;
DROP TABLE rq, rx, rc, rc_copy, rc_heap, rc_ctas, rbig, rmax;
DROP FUNCTION rbig_estimate();
