--
-- annex: annexes of a spindle table (docs/design.md, "Compaction of sparse
-- spindles", section 2), through the test-only stand-ins for the
-- relocator, spindle._create_annex and spindle._annex_insert.  An annex
-- is a spindle of kind 'annex' kept apart from the event spindles:
-- producers never place an event in it, no consumer's head walks it, and
-- every reader sees its rows (every scan method, TID scans, count(*),
-- ANALYZE, verify(), the views); the usual drop rule, TRUNCATE and DROP
-- TABLE remove it.
--
\set VERBOSITY terse
SET client_min_messages = warning;
-- exact drops: the worker is off (test/spindle.conf)
SHOW spindle.enable_worker;

CREATE TABLE ax (id int, v text) USING spindle WITH (events_per_spindle = 4);
CREATE INDEX ax_id ON ax (id);
CREATE VIEW ax_spindles AS
  SELECT s.spindle_no, s.state, c.kind, c.generation, c.first_no IS NULL AS no_numbers,
         s.capacity, s.events, s.purged_events
    FROM spindle.spindles s
    JOIN spindle.spindle_catalog c
      ON c.relation = s.relation AND c.spindle_no = s.spindle_no
   WHERE s.relation = 'ax'::regclass AND (s.state <> 'ready' OR c.kind = 'annex');
-- rows as each scan method returns them
CREATE FUNCTION ax_rows(method text, OUT scan text, OUT rows_seen text)
LANGUAGE plpgsql AS $$
DECLARE
  q text;
  plan json;
BEGIN
  PERFORM set_config('enable_seqscan', (method = 'seq')::text, true);
  PERFORM set_config('enable_indexscan', (method IN ('index', 'indexonly'))::text, true);
  PERFORM set_config('enable_bitmapscan', (method = 'bitmap')::text, true);
  PERFORM set_config('enable_indexonlyscan', (method = 'indexonly')::text, true);
  IF method = 'indexonly' THEN
    q := 'SELECT string_agg(id::text, '','' ORDER BY id) FROM ax WHERE id > 0';
  ELSE
    q := 'SELECT string_agg(id::text || '':'' || v, '','' ORDER BY id) FROM ax WHERE id > 0';
  END IF;
  EXECUTE 'EXPLAIN (COSTS OFF, FORMAT JSON) ' || q INTO plan;
  SELECT string_agg(m[1], '+') INTO scan
    FROM regexp_matches(plan::text, '"Node Type": "([A-Za-z ]*Scan)"', 'g') m;
  EXECUTE q INTO rows_seen;
  rows_seen := coalesce(rows_seen, '');
END
$$;

INSERT INTO ax SELECT g, 'e' || g FROM generate_series(1, 6) g;

-- ===================== bad input: clear errors, nothing made =============
CREATE ROLE ax_user;
GRANT ALL ON ax TO ax_user;
SET ROLE ax_user;
SELECT spindle._create_annex('ax', 1);
SELECT spindle._annex_insert('ax', 1, ROW(100, 'x')::ax);
RESET ROLE;
SELECT spindle._create_annex('ax', 0);
SELECT spindle._create_annex('ax', 4);
CREATE TABLE ax_heap (id int, v text);
SELECT spindle._create_annex('ax_heap', 1);
-- no annex yet
SELECT spindle._annex_insert('ax', 1, ROW(100, 'x')::ax);
-- a row of another type
SELECT spindle._annex_insert('ax', 1, ROW(100, 'x')::ax_heap);
SELECT count(*) AS annexes FROM spindle.spindle_catalog
 WHERE relation = 'ax'::regclass AND kind = 'annex';
-- a table of one unbounded spindle takes none
CREATE TABLE ax_one (id int) USING spindle WITH (events_per_spindle = 0);
SELECT spindle._create_annex('ax_one', 1);

-- ===================== an annex, kept apart ==============================
-- made by the spindle creator in a committed transaction of its own, as
-- a ready spindle is: it stays whatever the caller's transaction does
BEGIN;
SELECT spindle._create_annex('ax', 1) AS annex_no \gset
ROLLBACK;
SELECT * FROM ax_spindles ORDER BY spindle_no;
-- ... or in the caller's, when nobody else can see the table yet
BEGIN;
CREATE TABLE ax_new (id int) USING spindle WITH (events_per_spindle = 4);
SELECT spindle._create_annex('ax_new', 2) > 0 AS made;
SELECT kind, generation FROM spindle.spindle_catalog
 WHERE relation = 'ax_new'::regclass AND kind = 'annex';
ROLLBACK;
-- the catalog's rule: an annex has no event numbers, an event spindle has
UPDATE spindle.spindle_catalog SET first_no = 1 WHERE spindle_no = :annex_no
   AND relation = 'ax'::regclass;
UPDATE spindle.spindle_catalog SET generation = 4 WHERE spindle_no = :annex_no
   AND relation = 'ax'::regclass;
-- producers fill the event spindles and make new ones, never the annex
INSERT INTO ax SELECT g, 'e' || g FROM generate_series(7, 16) g;
INSERT INTO ax VALUES (17, 'e17');
INSERT INTO ax SELECT g, 'e' || g FROM generate_series(18, 20) g;
SELECT * FROM ax_spindles ORDER BY spindle_no;

-- ===================== copies in the annex: every reader sees them =======
SELECT spindle._annex_insert('ax', 1, ROW(101, 'a101')::ax) AS tid1 \gset
SELECT spindle._annex_insert('ax', 1, jsonb_populate_record(a, '{"v": "copy3"}'))
  FROM ax a WHERE id = 3;
SELECT * FROM ax_spindles ORDER BY spindle_no;
SELECT m, r.* FROM unnest(ARRAY['seq', 'index', 'bitmap', 'indexonly']) m, ax_rows(m) r;
SELECT count(*) FROM ax;
-- a TID scan
SELECT id, v FROM ax WHERE ctid = :'tid1';
SELECT ctid = :'tid1' AS same_tid FROM ax WHERE id = 101;
-- a parallel scan
SET max_parallel_workers_per_gather = 2;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET enable_indexscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT count(*), sum(id) FROM ax;
SELECT count(*), sum(id) FROM ax;
RESET enable_indexscan;
RESET enable_bitmapscan;
RESET max_parallel_workers_per_gather;
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size;
ANALYZE ax;
SELECT reltuples FROM pg_class WHERE oid = 'ax'::regclass;
-- an index built now indexes the copies too
CREATE INDEX ax_v ON ax (v);
SET enable_seqscan = off;
SELECT id FROM ax WHERE v = 'a101';
RESET enable_seqscan;
SELECT * FROM spindle.verify('ax');
SELECT spindles, events FROM spindle.tables WHERE relation = 'ax'::regclass;
-- VACUUM (each spindle's own, the annex's too) and VACUUM FULL keep it
VACUUM ax;
VACUUM FULL ax;
SELECT id, v FROM ax WHERE id > 100 OR v = 'copy3' ORDER BY id;
SET enable_seqscan = off;
SELECT id, v FROM ax WHERE id = 101;
RESET enable_seqscan;
SELECT * FROM spindle.verify('ax');

-- ===================== the usual drop rule ===============================
-- live copies: the annex stays
SELECT spindle.drop_spindles('ax');
SELECT count(*) AS annexes FROM ax_spindles WHERE kind = 'annex';
-- a copy can be updated (its new version goes to the open spindle) and
-- deleted like any row
UPDATE ax SET v = 'moved' WHERE id = 101;
DELETE FROM ax WHERE v = 'copy3';
SELECT id, v FROM ax WHERE id IN (3, 101) ORDER BY id, v;
SELECT * FROM ax_spindles WHERE kind = 'annex';
SELECT spindle.drop_spindles('ax') > 0 AS dropped;
SELECT count(*) AS annexes FROM ax_spindles WHERE kind = 'annex';
SELECT m, r.* FROM unnest(ARRAY['seq', 'index', 'bitmap']) m, ax_rows(m) r;
SELECT * FROM spindle.verify('ax');

-- ===================== TRUNCATE and DROP TABLE take annexes too ==========
SELECT spindle._create_annex('ax', 2) AS annex2 \gset
SELECT spindle._annex_insert('ax', 2, ROW(201, 'a201')::ax);
SELECT segment AS annex2_seg FROM spindle.spindle_catalog
 WHERE relation = 'ax'::regclass AND spindle_no = :annex2 \gset
TRUNCATE ax;
SELECT count(*) FROM ax;
SELECT count(*) AS catalog_rows FROM spindle.spindle_catalog
 WHERE relation = 'ax'::regclass AND kind = 'annex';
SELECT count(*) AS relation_left FROM pg_class WHERE oid = :annex2_seg;
SELECT spindle._create_annex('ax', 3) AS annex3 \gset
SELECT spindle._annex_insert('ax', 3, ROW(301, 'a301')::ax);
SELECT id, v FROM ax;
SELECT segment AS annex3_seg FROM spindle.spindle_catalog
 WHERE relation = 'ax'::regclass AND spindle_no = :annex3 \gset
DROP TABLE ax CASCADE;
SELECT count(*) AS relation_left FROM pg_class WHERE oid = :annex3_seg;
SELECT count(*) AS catalog_rows FROM spindle.spindle_catalog c
 WHERE NOT EXISTS (SELECT FROM pg_class WHERE oid = c.relation) AND c.relation <> 0;

-- ===================== a queue: consumers never see an annex =============
SELECT spindle.create_queue('axq', 4);
CREATE INDEX axq_msg_id ON spindle_q.axq (msg_id);
SELECT count(*) FROM (SELECT spindle.enqueue('axq', jsonb_build_object('n', g))
  FROM generate_series(1, 5) g) e;
SELECT spindle._create_annex('spindle_q.axq', 1) > 0 AS made;
-- a copy of event 2 under an id never handed out
SELECT spindle._annex_insert('spindle_q.axq', 1,
         jsonb_populate_record(q, '{"msg_id": 1000002}'))
  FROM spindle_q.axq q WHERE msg_id = 2 \gset
SELECT count(*) FROM (SELECT spindle.enqueue('axq', jsonb_build_object('n', g))
  FROM generate_series(6, 10) g) e;
-- plain SQL sees the copy, by any scan
SELECT msg_id, payload FROM spindle_q.axq WHERE msg_id > 1000000;
SET enable_seqscan = off;
SELECT msg_id, payload FROM spindle_q.axq WHERE msg_id = 1000002;
RESET enable_seqscan;
-- consumers do not (until relocation exists): the head never walks it
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS dequeued
  FROM spindle.dequeue('axq', 20);
SELECT count(*) AS read_more FROM spindle.read('axq', 20, '1 min');
SELECT count(*) AS dequeued_more FROM spindle.dequeue('axq', 20);
SELECT msg_id FROM spindle_q.axq;
SELECT * FROM spindle.verify('spindle_q.axq');
SELECT spindle.drop_queue('axq');

-- ===================== the consume log hides no copy ====================
-- a copy has no event number: no entry of the log, nor its floor, covers it
SET spindle.consume_log = on;
SELECT spindle.create_queue('axl', 4);
CREATE INDEX axl_msg_id ON spindle_q.axl (msg_id);
SELECT count(*) FROM (SELECT spindle.enqueue('axl', jsonb_build_object('n', g))
  FROM generate_series(1, 6) g) e;
SELECT spindle._create_annex('spindle_q.axl', 1) > 0 AS made;
-- (copies at k = 0, 1, 2 of the annex: ids 0..2 would be consumed ones)
SELECT count(spindle._annex_insert('spindle_q.axl', 1,
         jsonb_populate_record(q, jsonb_build_object('msg_id', 2000000 + msg_id))))
  FROM spindle_q.axl q WHERE msg_id <= 3;
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS dequeued
  FROM spindle.dequeue('axl', 3);
SELECT msg_id FROM spindle_q.axl ORDER BY msg_id;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT msg_id FROM spindle_q.axl WHERE msg_id > 2000000;
SELECT msg_id FROM spindle_q.axl WHERE msg_id > 2000000 ORDER BY msg_id;
RESET enable_bitmapscan;
SET enable_indexscan = off;
EXPLAIN (COSTS OFF) SELECT msg_id FROM spindle_q.axl WHERE msg_id > 2000000;
SELECT msg_id FROM spindle_q.axl WHERE msg_id > 2000000 ORDER BY msg_id;
RESET enable_indexscan;
RESET enable_seqscan;
SELECT count(*) FROM spindle_q.axl;
SELECT spindle.drop_spindles('spindle_q.axl');
SELECT count(*) AS annexes FROM spindle.spindle_catalog
 WHERE relation = 'spindle_q.axl'::regclass AND kind = 'annex';
SELECT * FROM spindle.verify('spindle_q.axl');
SELECT spindle.drop_queue('axl');
RESET spindle.consume_log;

DROP TABLE ax_heap, ax_one;
DROP ROLE ax_user;

-- the planner's row estimate counts the annexes' copies (it counted the
-- event spindles only: 10 rows for a table of 10 events and 200 copies)
CREATE TABLE ax_est (id int, v text) USING spindle WITH (events_per_spindle = 400);
INSERT INTO ax_est SELECT g, 'e' FROM generate_series(1, 10) g;
SELECT spindle._create_annex('ax_est', 1) > 0 AS made;
SELECT count(spindle._annex_insert('ax_est', 1, ROW(1000 + g, 'c')::ax_est))
  FROM generate_series(1, 200) g;
SELECT count(*) FROM ax_est;
CREATE FUNCTION pg_temp.est_rows(q text) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE plan json;
BEGIN
  EXECUTE 'EXPLAIN (FORMAT JSON) ' || q INTO plan;
  RETURN (plan->0->'Plan'->>'Plan Rows')::float8;
END $$;
SELECT pg_temp.est_rows('SELECT * FROM ax_est') >= 210 AS estimate_counts_copies;
DROP TABLE ax_est;
