--
-- drop_spindles: a spindle is dropped when it is full and every event in it
-- is purged by a committed transaction; the open spindle never is; a table
-- with capacity 0 never loses its spindle.  After a drop, every scan method
-- returns the rows of the other spindles and no deleted event.
--
\set VERBOSITY default

-- This test asserts exact drop counts and spindle lists: the background
-- worker, which drops spindles at moments of its own choosing, must be off
-- (test/spindle.conf turns it off for pg_regress).
SHOW spindle.enable_worker;

CREATE TABLE ds (id int, v text) USING spindle WITH (events_per_spindle = 5);
CREATE INDEX ds_id ON ds (id);
CREATE VIEW ds_spindles AS
  SELECT spindle_no, state, capacity, events, purged_events
    FROM spindle.spindles WHERE relation = 'ds'::regclass AND state <> 'ready';
-- rows as each scan method returns them
CREATE FUNCTION ds_rows(method text, OUT scan text, OUT rows_seen text)
LANGUAGE plpgsql AS $$
DECLARE
  q text;
  plan json;
BEGIN
  PERFORM set_config('enable_seqscan', (method = 'seq')::text, true);
  -- (enable_indexscan = off would also disable index-only scans)
  PERFORM set_config('enable_indexscan', (method IN ('index', 'indexonly'))::text, true);
  PERFORM set_config('enable_bitmapscan', (method = 'bitmap')::text, true);
  PERFORM set_config('enable_indexonlyscan', (method = 'indexonly')::text, true);
  IF method = 'indexonly' THEN
    q := 'SELECT string_agg(id::text, '','' ORDER BY id) FROM ds WHERE id > 0';
  ELSE
    q := 'SELECT string_agg(id::text || '':'' || v, '','' ORDER BY id) FROM ds WHERE id > 0';
  END IF;
  -- EXECUTE: planned again under the settings above
  EXECUTE 'EXPLAIN (COSTS OFF, FORMAT JSON) ' || q INTO plan;
  SELECT string_agg(m[1], '+') INTO scan
    FROM regexp_matches(plan::text, '"Node Type": "([A-Za-z ]*Scan)"', 'g') m;
  EXECUTE q INTO rows_seen;
  rows_seen := coalesce(rows_seen, '');
END
$$;

INSERT INTO ds SELECT g, 'v' || g FROM generate_series(1, 23) g;
SELECT * FROM ds_spindles ORDER BY spindle_no;

-- nothing purged: nothing to drop
SELECT spindle.drop_spindles('ds');
SELECT * FROM ds_spindles ORDER BY spindle_no;

-- spindle 1 fully purged, spindle 2 keeps one live event (10), the open
-- spindle 5 fully purged
DELETE FROM ds WHERE id <= 9;
DELETE FROM ds WHERE id >= 21;
SELECT * FROM ds_spindles ORDER BY spindle_no;
SELECT spindle.drop_spindles('ds');
-- spindle 1 is gone; 2 (one live event) and the open spindle 5 are kept
SELECT * FROM ds_spindles ORDER BY spindle_no;
SELECT spindles_dropped, bytes_freed > 0 AS freed_bytes
  FROM spindle.tables WHERE relation = 'ds'::regclass;
-- a second call finds nothing more
SELECT spindle.drop_spindles('ds');

-- all scan methods return the remaining rows, and no deleted event
SELECT m, r.* FROM unnest(ARRAY['seq', 'index', 'bitmap', 'indexonly']) m, ds_rows(m) r;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT id, v FROM ds WHERE id < 12 ORDER BY id;
SELECT id, v FROM ds WHERE id = 3;
RESET enable_bitmapscan;
SET enable_indexscan = off;
SELECT id, v FROM ds WHERE id < 12 ORDER BY id;
RESET enable_indexscan;
RESET enable_seqscan;

-- the last live event of spindle 2 goes: spindle 2 is dropped
DELETE FROM ds WHERE id = 10;
SELECT spindle.drop_spindles('ds');
SELECT * FROM ds_spindles ORDER BY spindle_no;

-- the open spindle fills up with rolled-back inserts: full, all purged, dropped
BEGIN;
INSERT INTO ds VALUES (24, 'rolled back'), (25, 'rolled back');
ROLLBACK;
SELECT * FROM ds_spindles ORDER BY spindle_no;
SELECT spindle.drop_spindles('ds');
SELECT * FROM ds_spindles ORDER BY spindle_no;
SELECT spindles_dropped FROM spindle.tables WHERE relation = 'ds'::regclass;

-- an uncommitted delete does not make a spindle droppable
BEGIN;
DELETE FROM ds WHERE id BETWEEN 11 AND 15;
SELECT spindle.drop_spindles('ds');
ROLLBACK;
SELECT * FROM ds_spindles ORDER BY spindle_no;
SELECT m, r.* FROM unnest(ARRAY['seq', 'index', 'bitmap', 'indexonly']) m, ds_rows(m) r;

-- new events never take the slots of a dropped spindle: index entries of
-- dropped events must not find the new ones
INSERT INTO ds SELECT g, 'new' || g FROM generate_series(101, 115) g;
SELECT count(*) AS rows, count(DISTINCT ctid) AS distinct_tids FROM ds;
SELECT m, r.* FROM unnest(ARRAY['seq', 'index', 'bitmap', 'indexonly']) m, ds_rows(m) r;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT id, v FROM ds WHERE id <= 10;
SELECT id, v FROM ds WHERE id IN (1, 5, 9, 10, 21, 23, 101, 115) ORDER BY id;
RESET enable_bitmapscan;
RESET enable_seqscan;

-- VACUUM and REINDEX after drops change no result
VACUUM ds;
REINDEX TABLE ds;
SELECT m, r.* FROM unnest(ARRAY['seq', 'index', 'bitmap', 'indexonly']) m, ds_rows(m) r;
SELECT count(*) AS over_capacity FROM spindle.spindles
 WHERE relation = 'ds'::regclass AND events > capacity;

-- the books balance: live events are the rows
SELECT (SELECT sum(events) - sum(purged_events) FROM spindle.spindles
         WHERE relation = 'ds'::regclass) AS live_events,
       (SELECT count(*) FROM ds) AS rows;

-- capacity 0: one spindle, never full, never dropped
CREATE TABLE ds_zero (id int) USING spindle WITH (events_per_spindle = 0);
INSERT INTO ds_zero SELECT generate_series(1, 20);
DELETE FROM ds_zero;
SELECT spindle.drop_spindles('ds_zero');
SELECT state, capacity, events, purged_events FROM spindle.spindles
 WHERE relation = 'ds_zero'::regclass AND state <> 'ready';
INSERT INTO ds_zero VALUES (21);
SELECT id FROM ds_zero;
SELECT state, capacity, events, purged_events FROM spindle.spindles
 WHERE relation = 'ds_zero'::regclass AND state <> 'ready';

-- without an argument (or NULL): every spindle table of the database
CREATE TABLE ds_a (id int) USING spindle WITH (events_per_spindle = 2);
CREATE TABLE ds_b (id int) USING spindle WITH (events_per_spindle = 3);
INSERT INTO ds_a SELECT generate_series(1, 5);
INSERT INTO ds_b SELECT generate_series(1, 7);
DELETE FROM ds_a WHERE id <= 4;
DELETE FROM ds_b WHERE id <= 3;
SELECT spindle.drop_spindles();
SELECT relation, spindle_no, state, events, purged_events FROM spindle.spindles
 WHERE relation IN ('ds_a'::regclass, 'ds_b'::regclass) AND state <> 'ready'
 ORDER BY relation::text, spindle_no;
DELETE FROM ds_b WHERE id <= 6;
SELECT spindle.drop_spindles(NULL);
SELECT relation, spindle_no, state, events, purged_events FROM spindle.spindles
 WHERE relation IN ('ds_a'::regclass, 'ds_b'::regclass) AND state <> 'ready'
 ORDER BY relation::text, spindle_no;
SELECT relation, spindles_dropped FROM spindle.tables
 WHERE relation IN ('ds_a'::regclass, 'ds_b'::regclass) ORDER BY relation::text;
SELECT * FROM ds_a;
SELECT * FROM ds_b;

-- not a spindle table
CREATE TABLE ds_heap (id int);
SELECT spindle.drop_spindles('ds_heap');
\echo :SQLSTATE
SELECT spindle.drop_spindles('ds_spindles');
\echo :SQLSTATE

DROP VIEW ds_spindles;
DROP FUNCTION ds_rows(text);
DROP TABLE ds, ds_zero, ds_a, ds_b, ds_heap;

-- the worker on (test/spindle.conf has it off for the other tests)
ALTER SYSTEM SET spindle.enable_worker = on;
SELECT pg_reload_conf();

-- the background worker drops a droppable spindle by itself; first wait (up
-- to 60 s) until a worker serves this database
DO $$
BEGIN
  FOR i IN 1..600 LOOP
    PERFORM pg_stat_clear_snapshot();
    EXIT WHEN EXISTS (SELECT 1 FROM pg_stat_activity
                       WHERE backend_type = 'spindle worker'
                         AND datname = current_database());
    PERFORM pg_sleep(0.1);
  END LOOP;
END
$$;
SELECT count(*) AS workers_serving_this_database FROM pg_stat_activity
 WHERE backend_type = 'spindle worker' AND datname = current_database();
CREATE TABLE ds_w (id int) USING spindle WITH (events_per_spindle = 3);
INSERT INTO ds_w SELECT generate_series(1, 7);
CREATE TEMP TABLE ds_w_segment AS
  SELECT segment FROM spindle.spindle_catalog
   WHERE relation = 'ds_w'::regclass AND spindle_no = 1;
DELETE FROM ds_w WHERE id <= 3;
-- (the worker notices deletes through the statistics: flush ours now)
SELECT pg_stat_force_next_flush();
DO $$
BEGIN
  FOR i IN 1..300 LOOP
    EXIT WHEN NOT EXISTS (SELECT 1 FROM pg_class
                           WHERE oid = (SELECT segment FROM ds_w_segment));
    COMMIT;
    PERFORM pg_sleep(0.1);
  END LOOP;
END
$$;
SELECT NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = (SELECT segment FROM ds_w_segment))
       AS dropped_by_worker;
SELECT spindle_no, state, events, purged_events FROM spindle.spindles
 WHERE relation = 'ds_w'::regclass AND state <> 'ready' ORDER BY spindle_no;
SELECT spindles_dropped FROM spindle.tables WHERE relation = 'ds_w'::regclass;
SELECT string_agg(id::text, ',' ORDER BY id) FROM ds_w;
-- spindle.verify(): every spindle table left here is healthy
SELECT c.oid::regclass AS rel, v FROM pg_catalog.pg_class c, spindle.verify(c.oid) v
 WHERE c.relam = (SELECT oid FROM pg_catalog.pg_am WHERE amname = 'spindle')
 ORDER BY 1, 2;
DROP TABLE ds_w, ds_w_segment;
-- back to the configured state, and wait until the worker has left, so
-- that it cannot act in the tests that follow
ALTER SYSTEM RESET spindle.enable_worker;
SELECT pg_reload_conf();
DO $$
BEGIN
  FOR i IN 1..300 LOOP
    PERFORM pg_stat_clear_snapshot();
    EXIT WHEN NOT EXISTS (SELECT 1 FROM pg_stat_activity
                           WHERE backend_type = 'spindle worker');
    PERFORM pg_sleep(0.1);
  END LOOP;
END
$$;
SELECT count(*) AS workers_left FROM pg_stat_activity
 WHERE backend_type = 'spindle worker';
