-- relocation: events of a queue table moved into an annex by the test-only
-- spindle._relocate (docs/design.md, "Compaction of sparse spindles",
-- sections 3 and 4; relocation entries in tree 3 of the queue's consumer
-- relation, oldest copies in tree 4).  Plain SQL sees each event exactly
-- once, before and after the move's commit, from the mover's transaction:
-- count(*), sequential, index, index-only, bitmap and TID scans, ANALYZE.
-- A rolled back move hides nothing; a moved event is not moved again; DML
-- on a moved copy is refused (40001); bad input is refused.
SET client_min_messages = warning;
\set VERBOSITY terse
SELECT spindle.create_queue('rq', 4);
SELECT count(*) FROM (SELECT spindle.enqueue('rq', jsonb_build_object('n', g))
  FROM generate_series(1, 10) g) e;
CREATE INDEX rq_msg_id ON spindle_q.rq (msg_id);
CREATE TABLE rq_plain (a int) USING spindle WITH (events_per_spindle = 4);
INSERT INTO rq_plain VALUES (1);
-- rows as each scan method returns them, and the plan's scan node
CREATE FUNCTION rq_rows(method text, OUT scan text, OUT rows_seen text)
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
    q := 'SELECT string_agg(msg_id::text, '' '' ORDER BY msg_id) FROM spindle_q.rq WHERE msg_id BETWEEN 1 AND 10';
  ELSE
    q := 'SELECT string_agg(msg_id::text || ''='' || (payload->>''n''), '' '' ORDER BY msg_id) FROM spindle_q.rq WHERE msg_id BETWEEN 1 AND 10';
  END IF;
  EXECUTE 'EXPLAIN (COSTS OFF, FORMAT JSON) ' || q INTO plan;
  SELECT string_agg(m[1], '+') INTO scan
    FROM regexp_matches(plan::text, '"Node Type": "([A-Za-z ]*Scan)"', 'g') m;
  EXECUTE q INTO rows_seen;
  rows_seen := coalesce(rows_seen, '');
END
$$;
CREATE VIEW rq_all AS
  SELECT m.method, r.scan, r.rows_seen
    FROM unnest(ARRAY['seq', 'index', 'indexonly', 'bitmap']) m(method),
         LATERAL rq_rows(m.method) r;
SELECT ctid AS old2 FROM spindle_q.rq WHERE msg_id = 2 \gset
SELECT ctid AS old5 FROM spindle_q.rq WHERE msg_id = 5 \gset
SELECT ctid AS old9 FROM spindle_q.rq WHERE msg_id = 9 \gset
SELECT enqueued_at AS enq5, visible_at AS vis5 FROM spindle_q.rq WHERE msg_id = 5 \gset

-- ===================== bad input: clear errors, nothing changed ==========
CREATE ROLE rq_user;
GRANT USAGE ON SCHEMA spindle TO rq_user;
SET ROLE rq_user;
SELECT spindle._relocate('spindle_q.rq', 2, 1);
RESET ROLE;
SELECT spindle._relocate('rq_plain', 1, 1);
SELECT spindle._relocate('spindle_q.rq', 2, 0);
SELECT spindle._relocate('spindle_q.rq', 2, 4);
SELECT spindle._relocate('spindle_q.rq', 11, 1);
SELECT spindle._relocate('spindle_q.rq', 0, 1);
-- no annex of that generation yet
SELECT spindle._relocate('spindle_q.rq', 2, 1);
-- nothing was written: no tree 3 nor tree 4
SELECT count(*) FROM spindle._run_scan('spindle_q.rq', 3, 0, 9223372036854775806);
SELECT count(*) FROM spindle._run_scan('spindle_q.rq', 4, 0, 100);
SELECT count(*) FROM spindle_q.rq;
SELECT spindle._create_annex('spindle_q.rq', 1) > 0 AS annex;

-- ===================== a rolled back move hides nothing ==================
BEGIN;
SELECT spindle._relocate('spindle_q.rq', 2, 1) AS new2 \gset
SELECT count(*) AS own_count FROM spindle_q.rq;
SELECT msg_id, payload->>'n' AS n, ctid = :'new2' AS is_new
  FROM spindle_q.rq WHERE msg_id = 2;
ROLLBACK;
SELECT count(*) FROM spindle_q.rq;
SELECT * FROM rq_all;
SELECT msg_id, ctid = :'old2' AS is_old FROM spindle_q.rq WHERE ctid = :'old2';
SELECT count(*) AS dead_copy FROM spindle_q.rq WHERE ctid = :'new2';
-- the aborted entry is in tree 3 and hides nothing (kind 7, RELOCATED)
SELECT count(*) AS aborted_entries, min(kind) AS kind
  FROM spindle._run_scan('spindle_q.rq', 3, 0, 9223372036854775806);

-- ===================== three moves, seen once before and after commit ====
BEGIN;
SELECT spindle._relocate('spindle_q.rq', 2, 1) AS new2 \gset
SELECT spindle._relocate('spindle_q.rq', 5, 1) AS new5 \gset
SELECT spindle._relocate('spindle_q.rq', 9, 1) AS new9 \gset
-- the mover's own transaction sees the new copies only
SELECT count(*) AS own_count FROM spindle_q.rq;
SELECT * FROM rq_all;
SELECT count(*) AS own_old_tids FROM spindle_q.rq
 WHERE ctid IN (:'old2', :'old5', :'old9');
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS own_new_tids
  FROM spindle_q.rq WHERE ctid IN (:'new2', :'new5', :'new9');
-- a moved event is not moved again
SAVEPOINT s;
SELECT spindle._relocate('spindle_q.rq', 5, 1);
ROLLBACK TO s;
COMMIT;
SELECT count(*) FROM spindle_q.rq;
SELECT * FROM rq_all;
-- parallel workers apply the rule too
SET force_parallel_mode = on;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SELECT count(*) AS parallel, count(DISTINCT msg_id) AS ids FROM spindle_q.rq;
RESET force_parallel_mode;
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size;
-- TID scans: the old copies are hidden, the new ones seen
SELECT count(*) AS old_tids FROM spindle_q.rq
 WHERE ctid IN (:'old2', :'old5', :'old9');
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS new_tids
  FROM spindle_q.rq WHERE ctid IN (:'new2', :'new5', :'new9');
-- the copy keeps its columns and its append time
SELECT enqueued_at = :'enq5' AS same_enqueued_at, visible_at = :'vis5' AS same_visible_at,
       payload->>'n' AS n
  FROM spindle_q.rq WHERE msg_id = 5;
-- the new copies live in the annex
SELECT c.kind, count(*) FROM spindle_q.rq r
  JOIN spindle.spindle_catalog c
    ON c.relation = 'spindle_q.rq'::regclass
   AND c.spindle_no = (SELECT spindle_no FROM spindle.spindles s
                        WHERE s.relation = c.relation AND s.spindle_no = c.spindle_no)
 WHERE r.msg_id IN (2, 5, 9) AND r.ctid IN (:'new2', :'new5', :'new9')
   AND c.kind = 'annex'
 GROUP BY c.kind;
-- moved again after the commit: refused
SELECT spindle._relocate('spindle_q.rq', 9, 1);
-- tree 3: three entries (the aborted one was replaced); tree 4: the oldest
-- copy of 2, 5, 9
SELECT count(*) AS entries FROM spindle._run_scan('spindle_q.rq', 3, 0, 9223372036854775806);
SELECT string_agg(first::text, ' ' ORDER BY first) AS oldest_copies
  FROM spindle._run_scan('spindle_q.rq', 4, 0, 100);
-- ANALYZE counts 10 live rows, the hidden copies dead
ANALYZE spindle_q.rq;
SELECT reltuples FROM pg_class WHERE oid = 'spindle_q.rq'::regclass;
-- a unique index built now indexes one live copy per msg_id
CREATE UNIQUE INDEX rq_msg_id_u ON spindle_q.rq (msg_id);

-- ===================== DML on a moved copy is refused ====================
SELECT spindle._create_annex('spindle_q.rq', 1) > 0 AS second_annex;
-- (with a unique index: the copy's unique check finds the old copy hidden
-- by the entry written before it)
SELECT spindle._relocate('spindle_q.rq', 8, 1) IS NOT NULL AS moved_under_unique;
SELECT count(*), count(DISTINCT msg_id) FROM spindle_q.rq;
-- foreign key checks find (and lock) the new copies; deleting a moved
-- event's new copy is checked against the referencing rows
CREATE TABLE rq_ref (m bigint REFERENCES spindle_q.rq (msg_id));
INSERT INTO rq_ref VALUES (2), (8);
SELECT count(*) AS refs FROM rq_ref;
DELETE FROM spindle_q.rq WHERE msg_id = 8;
DROP TABLE rq_ref;
DROP INDEX spindle_q.rq_msg_id_u;
-- a cursor positioned on the old copy: WHERE CURRENT OF reads it with the
-- statement's snapshot, which the move hides it from: nothing is changed
BEGIN;
DECLARE c CURSOR FOR SELECT msg_id FROM spindle_q.rq WHERE msg_id = 6;
SELECT spindle._relocate('spindle_q.rq', 6, 1) IS NOT NULL AS moved;
FETCH c;
UPDATE spindle_q.rq SET payload = '{}' WHERE CURRENT OF c;
DELETE FROM spindle_q.rq WHERE CURRENT OF c;
SELECT msg_id, payload->>'n' AS n FROM spindle_q.rq WHERE msg_id = 6;
-- the new copy takes DML as any row
DELETE FROM spindle_q.rq WHERE msg_id = 6;
SELECT count(*) FROM spindle_q.rq;
ROLLBACK;
SELECT count(*) FROM spindle_q.rq;
SELECT spindle._create_annex('spindle_q.rq', 1) > 0 AS third_annex;
-- a statement whose snapshot still sees the old copy (the move runs in
-- the same command, from an InitPlan) is refused when it reaches it
-- (following the move to the new copy is a later step)
SET enable_indexscan = off;
SET enable_bitmapscan = off;
WITH m AS MATERIALIZED (SELECT spindle._relocate('spindle_q.rq', 7, 1))
DELETE FROM spindle_q.rq WHERE msg_id = 7 AND (SELECT count(*) FROM m) = 1;
WITH m AS MATERIALIZED (SELECT spindle._relocate('spindle_q.rq', 7, 1))
UPDATE spindle_q.rq SET payload = '{}'
 WHERE msg_id = 7 AND (SELECT count(*) FROM m) = 1;
WITH m AS MATERIALIZED (SELECT spindle._relocate('spindle_q.rq', 7, 1))
SELECT msg_id FROM spindle_q.rq
 WHERE msg_id = 7 AND (SELECT count(*) FROM m) = 1 FOR UPDATE;
RESET enable_indexscan;
RESET enable_bitmapscan;
SELECT msg_id, payload->>'n' AS n FROM spindle_q.rq WHERE msg_id = 7;

-- ===================== VACUUM of the consumer relation ===================
-- tree 3 now: 2, 5, 8 and 9 moved (committed), 6 and 7 (aborted)
SELECT count(*) AS entries, count(*) FILTER (WHERE awaited = 2) AS frozen
  FROM spindle._run_scan('spindle_q.rq', 3, 0, 9223372036854775806);
SELECT format('VACUUM pg_spindle.c%s', 'spindle_q.rq'::regclass::oid) AS vac \gset
SELECT format('VACUUM (FREEZE) pg_spindle.c%s', 'spindle_q.rq'::regclass::oid) AS vac_freeze \gset
-- a VACUUM that freezes nothing removes the aborted entries and keeps
-- relfrozenxid at the oldest entry's xid (clog must keep it)
SET vacuum_freeze_min_age = 1000;
:vac;
RESET vacuum_freeze_min_age;
SELECT count(*) AS entries, count(*) FILTER (WHERE awaited = 2) AS frozen
  FROM spindle._run_scan('spindle_q.rq', 3, 0, 9223372036854775806);
SELECT c.relfrozenxid::text = (SELECT min(awaited)::text
                                 FROM spindle._run_scan('spindle_q.rq', 3, 0, 9223372036854775806))
       AS held_at_entry
  FROM pg_class c
 WHERE c.oid = ('pg_spindle.c' || 'spindle_q.rq'::regclass::oid)::regclass;
-- VACUUM (FREEZE): the entries' xids become FROZEN (2), relfrozenxid moves
-- on, and what they hide stays hidden
:vac_freeze;
SELECT count(*) AS entries, count(*) FILTER (WHERE awaited = 2) AS frozen
  FROM spindle._run_scan('spindle_q.rq', 3, 0, 9223372036854775806);
SELECT c.relfrozenxid::text::bigint > 2 AS moved_on
  FROM pg_class c
 WHERE c.oid = ('pg_spindle.c' || 'spindle_q.rq'::regclass::oid)::regclass;
SELECT count(*) FROM spindle_q.rq;
SELECT * FROM rq_all;
SELECT count(*) AS old_tids FROM spindle_q.rq
 WHERE ctid IN (:'old2', :'old5', :'old9');
SELECT payload->>'n' AS n FROM spindle_q.rq WHERE msg_id = 8;
-- and a moved event whose entry is frozen is not moved again
SELECT spindle._relocate('spindle_q.rq', 5, 1);
-- VACUUM of the queue table itself, VACUUM FULL (the spindles stay, the
-- indexes are rebuilt, the hidden copies not alive), verify()
VACUUM spindle_q.rq;
SELECT count(*) FROM spindle_q.rq;
VACUUM FULL spindle_q.rq;
SELECT * FROM rq_all;
SELECT * FROM spindle.verify('spindle_q.rq');

-- a refused move takes no annex slot (four refusals filled an annex of
-- four); read-only transactions and relations that do not exist refused
SELECT spindle.create_queue('rlk', 4);
SELECT count(spindle.enqueue('rlk', jsonb_build_object('n', g)))
  FROM generate_series(1, 10) g;
SELECT spindle._create_annex('spindle_q.rlk', 1) > 0 AS annex;
DELETE FROM spindle_q.rlk WHERE msg_id = 3;
SELECT spindle._relocate('spindle_q.rlk', 3, 1);
SELECT spindle._relocate('spindle_q.rlk', 3, 1);
SELECT spindle._relocate('spindle_q.rlk', 3, 1);
SELECT spindle._relocate('spindle_q.rlk', 3, 1);
SELECT spindle._relocate('spindle_q.rlk', 4, 1) IS NOT NULL AS moved;
SELECT count(*), count(DISTINCT msg_id) FROM spindle_q.rlk;
BEGIN READ ONLY;
SELECT spindle._relocate('spindle_q.rlk', 5, 1);
ROLLBACK;
SELECT spindle._relocate(0, 1, 1);
SELECT spindle._create_annex(0, 1);
SELECT * FROM spindle.verify('spindle_q.rlk');
SELECT spindle.drop_queue('rlk');
