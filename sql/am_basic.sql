--
-- am_basic: the spindle table access method stores and returns rows as heap
-- does.  events_per_spindle = 10 makes the rows span several spindles.
-- Rows in state 'ready' (created ahead of need by the worker) are never
-- asserted on.
--
\set VERBOSITY default

CREATE TABLE ab (id int, body text) USING spindle WITH (events_per_spindle = 10);
SELECT a.amname FROM pg_class c JOIN pg_am a ON a.oid = c.relam
 WHERE c.oid = 'ab'::regclass;

-- an empty table has exactly one spindle in use: the open one, empty
SELECT count(*) FROM ab;
SELECT spindle_no, state, capacity, events, purged_events
  FROM spindle.spindles WHERE relation = 'ab'::regclass AND state <> 'ready'
 ORDER BY spindle_no;

-- single-row inserts (3 rows)
INSERT INTO ab VALUES (1, 'one');
INSERT INTO ab VALUES (2, 'two');
INSERT INTO ab VALUES (3, NULL) RETURNING id, body;

-- a multi-row insert (5 rows)
INSERT INTO ab VALUES (4, 'four'), (5, 'five'), (6, 'six'), (7, 'seven'), (8, 'eight');

-- COPY (12 rows), crossing two spindle boundaries
COPY ab (id, body) FROM STDIN;
9	nine
10	ten
11	eleven
12	twelve
13	thirteen
14	fourteen
15	fifteen
16	sixteen
17	seventeen
18	eighteen
19	nineteen
20	\N
\.

-- INSERT ... SELECT (23 rows)
INSERT INTO ab SELECT g, 'row ' || g FROM generate_series(21, 43) g;

-- 43 rows: four full spindles of 10 and an open one holding 3
SELECT count(*), count(body), sum(id), min(id), max(id), count(DISTINCT id) FROM ab;
SELECT spindle_no, state, capacity, events, purged_events
  FROM spindle.spindles WHERE relation = 'ab'::regclass AND state <> 'ready'
 ORDER BY spindle_no;
-- no spindle ever holds more than its capacity
SELECT count(*) AS over_capacity FROM spindle.spindles
 WHERE relation = 'ab'::regclass AND events > capacity;
SELECT events_per_spindle, time_to_live, events, purged_events, size_bytes > 0 AS has_size
  FROM spindle.tables WHERE relation = 'ab'::regclass;

-- WHERE clauses
SELECT id, body FROM ab WHERE id BETWEEN 8 AND 12 ORDER BY id;
SELECT id FROM ab WHERE body IS NULL ORDER BY id;
SELECT id, body FROM ab WHERE body LIKE '%teen' ORDER BY id;
SELECT count(*) FROM ab WHERE id % 2 = 0;

-- joins with a heap table, whichever join method is used
CREATE TABLE ab_heap (id int, label text);
INSERT INTO ab_heap SELECT g, 'label ' || g FROM generate_series(5, 45, 5) g;
SELECT a.id, a.body, h.label FROM ab a JOIN ab_heap h USING (id) ORDER BY a.id;
SET enable_hashjoin = off;
SET enable_mergejoin = off;
SELECT count(*), sum(a.id) FROM ab a JOIN ab_heap h USING (id);
SET enable_nestloop = off;
SET enable_mergejoin = on;
SELECT count(*), sum(a.id) FROM ab a JOIN ab_heap h USING (id);
RESET enable_hashjoin;
RESET enable_mergejoin;
RESET enable_nestloop;
SELECT h.id, a.id FROM ab_heap h LEFT JOIN ab a USING (id) WHERE a.id IS NULL ORDER BY h.id;
-- self join
SELECT count(*) FROM ab a JOIN ab b ON b.id = a.id + 1;

-- aggregates and a prepared statement
SELECT sum(length(body)), string_agg(body, ',' ORDER BY id) FILTER (WHERE id <= 5) FROM ab;
PREPARE ab_get(int) AS SELECT id, body FROM ab WHERE id = $1;
EXECUTE ab_get(17);
EXECUTE ab_get(42);
EXECUTE ab_get(99);
DEALLOCATE ab_get;

-- a parallel sequential scan returns the same rows as a serial one
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;
SELECT count(*), sum(id), count(DISTINCT id) FROM ab;
SELECT count(*) FROM ab WHERE body LIKE 'row%';
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size;
RESET max_parallel_workers_per_gather;

-- cursors: forward, backward, scroll, with hold
BEGIN;
DECLARE c SCROLL CURSOR FOR SELECT id, body FROM ab;
FETCH 7 FROM c;
FETCH BACKWARD 3 FROM c;
FETCH FORWARD 2 FROM c;
FETCH ABSOLUTE 25 FROM c;
FETCH PRIOR FROM c;
FETCH LAST FROM c;
FETCH BACKWARD 2 FROM c;
FETCH FIRST FROM c;
MOVE FORWARD 30 IN c;
FETCH 2 FROM c;
FETCH RELATIVE -21 FROM c;
MOVE LAST IN c;
FETCH NEXT FROM c;
FETCH BACKWARD 1 FROM c;
CLOSE c;
-- a cursor reading backwards from the end returns every row once
DECLARE c2 SCROLL CURSOR FOR SELECT id FROM ab;
MOVE LAST IN c2;
MOVE NEXT IN c2;
CREATE TEMP TABLE ab_backward AS SELECT 0 AS id WHERE false;
DO $$
DECLARE
  cur refcursor := 'c2';
  r record;
  n int := 0;
  s bigint := 0;
BEGIN
  LOOP
    FETCH PRIOR FROM cur INTO r;
    EXIT WHEN NOT FOUND;
    n := n + 1;
    s := s + r.id;
    INSERT INTO ab_backward VALUES (r.id);
  END LOOP;
  RAISE NOTICE 'backward scan returned % rows, id sum %', n, s;
END
$$;
SELECT count(*), count(DISTINCT id) FROM ab_backward;
CLOSE c2;
COMMIT;

BEGIN;
DECLARE h CURSOR WITH HOLD FOR SELECT id FROM ab WHERE id > 38 ORDER BY id;
COMMIT;
FETCH ALL FROM h;
CLOSE h;

-- ctid is readable and identifies one row each
SELECT count(ctid) = count(*) AS all_have_ctid,
       count(DISTINCT ctid) = count(*) AS ctids_distinct
  FROM ab;
-- TID scans
SELECT id, body FROM ab WHERE ctid = (SELECT ctid FROM ab WHERE id = 25);
SELECT id, body FROM ab WHERE ctid = (SELECT ctid FROM ab WHERE id = 1);
SELECT id, body FROM ab WHERE ctid = (SELECT ctid FROM ab WHERE id = 43);
SELECT id FROM ab
 WHERE ctid = ANY (ARRAY(SELECT ctid FROM ab WHERE id IN (2, 12, 22, 32, 42)))
 ORDER BY id;
-- every row can be fetched again by its ctid
SELECT count(*) FROM ab a WHERE (SELECT b.id FROM ab b WHERE b.ctid = a.ctid) = a.id;
-- a TID that does not exist returns nothing
SELECT id FROM ab WHERE ctid = '(999999,1)';
SELECT id FROM ab WHERE ctid = '(0,0)';

-- COPY TO
CREATE TABLE ab_small (a int, b text, c jsonb) USING spindle WITH (events_per_spindle = 2);
INSERT INTO ab_small VALUES (1, 'x', '{"k": 1}'), (2, NULL, '[1, 2]'), (3, 'z', NULL);
COPY ab_small TO STDOUT;
COPY (SELECT a, b FROM ab_small WHERE a > 1 ORDER BY a) TO STDOUT WITH (FORMAT csv);

-- wide and varied data types
CREATE TABLE ab_types (i int, b bigint, n numeric, t text, ts timestamptz,
                       arr int[], j jsonb, u uuid, f float8, bo boolean)
  USING spindle WITH (events_per_spindle = 3);
INSERT INTO ab_types VALUES
  (1, 9223372036854775807, 12345.678, 'hello', '2024-01-02 03:04:05+00',
   '{1,2,3}', '{"a": [1, {"b": null}]}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 1.5, true),
  (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
  (3, -1, -0.5, repeat('x', 3000), '1999-12-31 23:59:59+00',
   '{}', '{}', '00000000-0000-0000-0000-000000000000', 'NaN', false),
  (4, 0, 0, '', 'infinity', '{NULL}', 'null', NULL, '-Infinity', NULL);
SELECT i, b, n, length(t) AS tlen, ts AT TIME ZONE 'UTC' AS ts_utc, arr, j, u, f, bo
  FROM ab_types ORDER BY i NULLS LAST;

-- ANALYZE collects statistics from every spindle
ANALYZE ab;
SELECT reltuples FROM pg_class WHERE oid = 'ab'::regclass;
SELECT attname, null_frac, n_distinct FROM pg_stats
 WHERE schemaname = 'public' AND tablename = 'ab' ORDER BY attname;

-- creating through CREATE TABLE AS
CREATE TABLE ab_ctas USING spindle AS SELECT id, body FROM ab WHERE id <= 12;
SELECT a.amname FROM pg_class c JOIN pg_am a ON a.oid = c.relam
 WHERE c.oid = 'ab_ctas'::regclass;
SELECT count(*), sum(id) FROM ab_ctas;
SELECT events, purged_events FROM spindle.tables WHERE relation = 'ab_ctas'::regclass;

-- everything is still there
SELECT count(*), sum(id) FROM ab;
SELECT sum(events) - sum(purged_events) AS live_events
  FROM spindle.spindles WHERE relation = 'ab'::regclass;

-- spindle.verify(): every spindle table left here is healthy
SELECT c.oid::regclass AS rel, v FROM pg_catalog.pg_class c, spindle.verify(c.oid) v
 WHERE c.relam = (SELECT oid FROM pg_catalog.pg_am WHERE amname = 'spindle')
 ORDER BY 1, 2;
DROP TABLE ab, ab_heap, ab_small, ab_types, ab_ctas;
SELECT count(*) FROM spindle.tables
 WHERE relation::text IN ('ab', 'ab_heap', 'ab_small', 'ab_types', 'ab_ctas');
