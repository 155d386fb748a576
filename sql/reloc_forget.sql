-- reloc_forget: the relocation entries of copies whose spindle or annex
-- was dropped are forgotten when maintenance retires the drops (here
-- VACUUM of the queue table; docs/design.md, "Compaction of sparse
-- spindles", section 6, "Removal" and "Space of the trees").  Tree 3
-- loses the entries of dropped copies; tree 4 then names each moved
-- event's oldest copy still there, or loses the event if its last copy
-- went with a drop (consumed); consumers still find every moved event
-- by msg_id (ack, set_visibility, then dequeue) and plain SQL sees each
-- once.  When the trees hold more than twice the pages their entries
-- need, they are rebuilt beside themselves and swapped in; when nothing
-- is left in them, they are freed.
SET client_min_messages = warning;
\set VERBOSITY terse
-- tree pages of 4 items, so that a few entries make many pages
SET spindle.test_tree_fanout = 4;
CREATE FUNCTION rf_trees(q regclass, OUT entries bigint, OUT heads bigint,
                         OUT pages3 int, OUT pages4 int)
LANGUAGE sql AS $$
  SELECT (SELECT count(*) FROM spindle._run_scan(q, 3, -1, 9223372036854775807)),
         (SELECT count(*) FROM spindle._run_scan(q, 4, -1, 9223372036854775807)),
         (SELECT pages FROM spindle._run_verify(q, 3)),
         (SELECT pages FROM spindle._run_verify(q, 4)) $$;
-- what tree 4 names: how many copies in event spindles, in annexes
CREATE FUNCTION rf_heads_in(q regclass) RETURNS text LANGUAGE sql AS $$
  SELECT string_agg(k || ' ' || n, ', ' ORDER BY k)
    FROM (SELECT coalesce(c.kind, 'dropped') AS k, count(*) AS n
            FROM spindle._run_scan(q, 4, -1, 9223372036854775807) r
            LEFT JOIN spindle.spindle_catalog c
              ON c.relation = q AND c.dropped_at IS NULL
             AND c.spindle_no = ((extract(epoch FROM r.due - '2000-01-01 00:00:00+00')
                                  * 1000000)::bigint >> 26)
           GROUP BY 1) s $$;
-- spindles of ten events, one transaction each: the first event leased a
-- day, the delay_at-th delayed a day, the rest consumed; then 5 more
CREATE PROCEDURE rf_fill(q text, nspindles int, delay_at int)
LANGUAGE plpgsql AS $$
BEGIN
  FOR s IN 0 .. nspindles - 1 LOOP
    PERFORM spindle.enqueue(q, jsonb_build_object('n', s * 10 + g),
              CASE WHEN g = delay_at THEN interval '1 day' ELSE interval '0' END)
       FROM generate_series(1, 10) g;
    COMMIT;
    PERFORM spindle.read(q, 1, '1 day');
    PERFORM spindle.dequeue(q, 10);
    COMMIT;
  END LOOP;
  PERFORM spindle.enqueue(q, jsonb_build_object('n', nspindles * 10 + g))
     FROM generate_series(1, 5) g;
END $$;
CREATE FUNCTION rf_rows(q regclass) RETURNS text LANGUAGE plpgsql AS $$
DECLARE r text;
BEGIN
  EXECUTE format('SELECT string_agg(payload->>''n'', '' '' ORDER BY msg_id) FROM %s', q)
     INTO r;
  RETURN r;
END $$;

-- ===================== A: heads move on, entries go ======================
SELECT spindle.create_queue('rf', 10);
CALL rf_fill('rf', 6, 7);
SELECT spindle.drop_spindles('spindle_q.rf');
SELECT moved, spindles, emptied FROM spindle._compact('spindle_q.rf');
SELECT spindle.drop_spindles('spindle_q.rf') > 0 AS dropped;
SELECT entries, heads FROM rf_trees('spindle_q.rf');
SELECT rf_heads_in('spindle_q.rf');
-- the retirement forgets: the entries' copies are gone with their
-- spindles, and tree 4 names the copies in the annex
VACUUM spindle_q.rf;
SELECT entries, heads FROM rf_trees('spindle_q.rf');
SELECT rf_heads_in('spindle_q.rf');
-- plain SQL: each live event once, by every scan
SELECT rf_rows('spindle_q.rf');
SET enable_seqscan = off;
CREATE INDEX rf_msg_id ON spindle_q.rf (msg_id);
SELECT string_agg(payload->>'n', ' ' ORDER BY msg_id) FROM spindle_q.rf
 WHERE msg_id > 0;
RESET enable_seqscan;
-- consumers find the moved events by msg_id through tree 4: the lease of
-- event 1 is acknowledged, that of 11 handed back and dequeued
SELECT spindle.ack('rf', msg_id) AS acked FROM spindle_q.rf
 WHERE payload->>'n' = '1';
SELECT spindle.set_visibility('rf', msg_id, '0 s') AS handed_back
  FROM spindle_q.rf WHERE payload->>'n' = '11';
SELECT string_agg(payload->>'n', ' ' ORDER BY msg_id) AS dequeued
  FROM spindle.dequeue('rf', 100);
SELECT rf_rows('spindle_q.rf');
SELECT * FROM spindle.verify('spindle_q.rf');

-- ===================== B: dead heads go; the trees are rebuilt ===========
SELECT spindle.create_queue('rg', 10);
-- 40 spindles keep one lease each; the moves fill four annexes of ten
CALL rf_fill('rg', 40, 0);
SELECT spindle.drop_spindles('spindle_q.rg');
SELECT moved, spindles, emptied FROM spindle._compact('spindle_q.rg');
SELECT spindle.drop_spindles('spindle_q.rg') > 0 AS dropped;
SELECT kind, count(*) FROM spindle.spindle_catalog
 WHERE relation = 'spindle_q.rg'::regclass AND dropped_at IS NULL
 GROUP BY kind ORDER BY kind;
SELECT * FROM rf_trees('spindle_q.rg');
-- the leases of the first 30 are acknowledged: three annexes drop
SELECT count(*) FILTER (WHERE a) AS acked
  FROM (SELECT spindle.ack('rg', msg_id) AS a FROM spindle_q.rg
         WHERE (payload->>'n')::int <= 300) s;
SELECT spindle.drop_spindles('spindle_q.rg') > 0 AS dropped;
SELECT kind, count(*) FROM spindle.spindle_catalog
 WHERE relation = 'spindle_q.rg'::regclass AND dropped_at IS NULL
 GROUP BY kind ORDER BY kind;
VACUUM spindle_q.rg;
-- tree 3 is empty; tree 4 keeps the ten ids whose copy is in the fourth
-- annex; the trees, mostly empty pages, were rebuilt to what that needs
SELECT * FROM rf_trees('spindle_q.rg');
SELECT rf_heads_in('spindle_q.rg');
SELECT rf_rows('spindle_q.rg');
SELECT * FROM spindle.verify('spindle_q.rg');
-- the moved events are still found by msg_id: handed back, dequeued
SELECT count(*) FILTER (WHERE v) AS handed_back
  FROM (SELECT spindle.set_visibility('rg', msg_id, '0 s') AS v
          FROM spindle_q.rg WHERE payload->>'n' IN ('301', '391')) s;
SELECT string_agg(payload->>'n', ' ' ORDER BY msg_id) AS dequeued
  FROM spindle.dequeue('rg', 100);
-- new moves after the swap go into the rebuilt trees
CALL rf_fill('rg', 1, 0);
SELECT count(*) AS taken FROM spindle.dequeue('rg', 100);
SELECT spindle.drop_spindles('spindle_q.rg');
SELECT moved FROM spindle._compact('spindle_q.rg');
SELECT entries, heads FROM rf_trees('spindle_q.rg');
SELECT rf_rows('spindle_q.rg');
SELECT * FROM spindle.verify('spindle_q.rg');

-- ===================== C: every moved event consumed: the trees go ========
SELECT spindle.create_queue('rh', 10);
CALL rf_fill('rh', 20, 0);
SELECT spindle.drop_spindles('spindle_q.rh');
SELECT moved FROM spindle._compact('spindle_q.rh');
SELECT spindle.drop_spindles('spindle_q.rh') > 0 AS dropped;
SELECT count(*) FILTER (WHERE a) AS acked
  FROM (SELECT spindle.ack('rh', msg_id) AS a FROM spindle_q.rh
         WHERE (payload->>'n')::int <= 200) s;
SELECT spindle.drop_spindles('spindle_q.rh') > 0 AS dropped;
SELECT kind, count(*) FROM spindle.spindle_catalog
 WHERE relation = 'spindle_q.rh'::regclass AND dropped_at IS NULL
 GROUP BY kind ORDER BY kind;
VACUUM spindle_q.rh;
SELECT * FROM rf_trees('spindle_q.rh');
SELECT rf_rows('spindle_q.rh');
SELECT * FROM spindle.verify('spindle_q.rh');

-- ===================== D: drops of the same transaction roll back ==========
-- (review rv of the forget pass, F1) a second drop_spindles() in the
-- transaction that dropped the spindles must not forget their entries:
-- after a ROLLBACK the spindles and their old copies are back, and the
-- entries must still hide those copies
SELECT spindle.create_queue('ri', 10);
SELECT count(spindle.enqueue('ri', jsonb_build_object('n', -g)))
  FROM generate_series(1, 10) g;
SELECT count(*) FROM spindle.dequeue('ri', 10);
CALL rf_fill('ri', 20, 0);
SELECT spindle.drop_spindles('spindle_q.ri') AS first_dropped;
SELECT moved FROM spindle._compact('spindle_q.ri');
BEGIN;
SELECT spindle.drop_spindles('spindle_q.ri') >= 20 AS dropped_here;
SELECT spindle.drop_spindles('spindle_q.ri') AS again;
SELECT entries, heads FROM rf_trees('spindle_q.ri');
ROLLBACK;
SELECT entries, heads FROM rf_trees('spindle_q.ri');
SELECT count(*) AS rows_seen, count(DISTINCT msg_id) AS ids
  FROM spindle_q.ri WHERE (payload->>'n')::int BETWEEN 1 AND 200;
SELECT count(*) FILTER (WHERE v) AS handed_back
  FROM (SELECT spindle.set_visibility('ri', msg_id, '0 s') AS v
          FROM spindle_q.ri WHERE (payload->>'n')::int BETWEEN 1 AND 200) s;
SELECT count(*) AS dequeued, count(DISTINCT msg_id) AS ids
  FROM spindle.dequeue('ri', 100) WHERE (payload->>'n')::int BETWEEN 1 AND 200;
SELECT count(*) AS rows_left FROM spindle_q.ri;
SELECT * FROM spindle.verify('spindle_q.ri');

SELECT spindle.drop_queue('rf');
SELECT spindle.drop_queue('rg');
SELECT spindle.drop_queue('rh');
SELECT spindle.drop_queue('ri');
DROP FUNCTION rf_trees(regclass);
DROP FUNCTION rf_heads_in(regclass);
DROP PROCEDURE rf_fill(text, int, int);
DROP FUNCTION rf_rows(regclass);
