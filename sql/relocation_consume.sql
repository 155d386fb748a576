-- relocation_consume: consumers follow events moved into an annex by the
-- test-only spindle._relocate (docs/design.md, "Compaction of sparse
-- spindles", section 4 "Consumers", "Step 3 as built").  Delayed and
-- leased events are moved; then they come due and are dequeued from the
-- annex, acked there, their leases changed by set_visibility, moved to the
-- dead-letter queue after max_reads, acked and dequeued after their source
-- spindle was dropped (through tree 4); a rolled back move leaves its
-- event to be consumed from its source.  Plain SQL shows exactly the
-- events not consumed after each step, and every event is consumed once.
-- Run with spindle.consume_log on (the default: a queue with a log, whose
-- consumers purge annex copies by xmax all the same) and off.
SET client_min_messages = warning;
\set VERBOSITY terse
-- what each consumer call took: (queue, msg_id, how)
CREATE TABLE rc_taken (q text, msg_id bigint, how text);
-- a source spindle dropped at once: the drop rule counts a copy hidden by
-- a committed move as dead only once the move is older than every
-- snapshot (the horizon), so the test purges the hidden copies by xmax
-- itself (the drop rule: pg_regress compaction, TAP 093)
CREATE FUNCTION rc_purge_old(rel regclass, tids tid[]) RETURNS int
LANGUAGE sql AS $$ SELECT spindle._purge_events(rel, tids) $$;

-- ===================== rc_on: setup ========================================
SELECT spindle.create_queue('rc_on_dlq');
SELECT spindle.create_queue('rc_on', 4, max_reads => 2, dead_letter_queue => 'rc_on_dlq');
-- spindle 1: ids 1..4 (1 delayed), spindle 2: 5..8 (5 delayed),
-- spindle 3: 9..12 (9 delayed)
SELECT spindle.enqueue('rc_on', '{"n": 1}', delay => '3 seconds');
SELECT spindle.enqueue('rc_on', jsonb_build_object('n', g)) FROM generate_series(2, 4) g;
-- leases of 2 and 3; 4 dequeued
SELECT msg_id, read_count FROM spindle.read('rc_on', 2, '1 hour');
INSERT INTO rc_taken SELECT 'rc_on', msg_id, 'dequeue' FROM spindle.dequeue('rc_on', 1);
SELECT spindle.enqueue('rc_on', '{"n": 5}', delay => '3 seconds');
SELECT spindle.enqueue('rc_on', jsonb_build_object('n', g)) FROM generate_series(6, 8) g;
-- leases of 6 and 7 (8 stays ready)
SELECT msg_id, read_count FROM spindle.read('rc_on', 1, '1 hour');
SELECT msg_id, read_count FROM spindle.read('rc_on', 1, '1 hour');
SELECT spindle.enqueue('rc_on', '{"n": 9}', delay => '3 seconds');
SELECT spindle.enqueue('rc_on', jsonb_build_object('n', g)) FROM generate_series(10, 12) g;
CREATE TEMP TABLE rc_on_old AS SELECT msg_id, ctid AS old_tid FROM spindle_q.rc_on;
-- the queue has a consume log, or not
SELECT count(*) > 0 AS has_log FROM spindle._run_scan('spindle_q.rc_on', 2, 0, 100);

-- ===================== rc_on: moves ========================================
-- two annexes of 4 slots: 7 moves and a rolled back one
SELECT spindle._create_annex('spindle_q.rc_on', 1) > 0 AS annex;
SELECT spindle._create_annex('spindle_q.rc_on', 1) > 0 AS annex;
BEGIN;
SELECT count(*) AS moved FROM (SELECT spindle._relocate('spindle_q.rc_on', i, 1)
  FROM unnest(ARRAY[1, 2, 3, 5, 6, 7, 9]) i) m;
COMMIT;
-- a rolled back move: 8 stays where it is
BEGIN;
SELECT spindle._relocate('spindle_q.rc_on', 8, 1) IS NOT NULL AS moving_8;
ROLLBACK;
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS moved_copies
  FROM spindle_q.rc_on r WHERE NOT EXISTS
  (SELECT 1 FROM rc_on_old o WHERE o.old_tid = r.ctid);
SELECT count(*) FROM spindle_q.rc_on;

-- ===================== rc_on: ack of a moved lease =========================
SELECT spindle.ack('rc_on', 2) AS ack_2;
SELECT spindle.ack('rc_on', 2) AS ack_2_again;
INSERT INTO rc_taken VALUES ('rc_on', 2, 'ack');
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS left_ FROM spindle_q.rc_on;

-- ===================== rc_on: set_visibility of a moved lease ==============
SELECT spindle.set_visibility('rc_on', 3, '0');
-- 3 comes back from the annex (read once before), 8 from its source (the
-- move was rolled back); 1, 5 and 9 are not due, 6 and 7 leased
INSERT INTO rc_taken SELECT 'rc_on', msg_id, 'dequeue' FROM spindle.dequeue('rc_on', 2)
  RETURNING msg_id;
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS left_ FROM spindle_q.rc_on;

-- ===================== rc_on: dead letter of a moved event =================
SELECT spindle.set_visibility('rc_on', 6, '0');
SELECT msg_id, read_count, payload FROM spindle.read('rc_on', 1, '1 hour');
SELECT spindle.set_visibility('rc_on', 6, '0');
-- read twice: moved to the dead-letter queue, not delivered; the next
-- ready event (10) is delivered instead
INSERT INTO rc_taken SELECT 'rc_on', msg_id, 'dequeue' FROM spindle.dequeue('rc_on', 1)
  RETURNING msg_id;
INSERT INTO rc_taken VALUES ('rc_on', 6, 'dead');
SELECT payload FROM spindle_q.rc_on_dlq;
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS left_ FROM spindle_q.rc_on;

-- ===================== rc_on: source spindles dropped ======================
-- spindles 1 and 2 hold only consumed events and copies hidden by
-- committed moves; purged, those let them drop
SELECT rc_purge_old('spindle_q.rc_on', array_agg(old_tid)) AS purged_old
  FROM rc_on_old WHERE msg_id IN (1, 2, 3, 5, 6, 7);
SELECT spindle.drop_spindles('spindle_q.rc_on') AS dropped;
SELECT count(*) AS old_spindles_left FROM spindle.spindle_catalog
 WHERE relation = 'spindle_q.rc_on'::regclass AND kind = 'events'
   AND first_no < 9 AND dropped_at IS NULL;
-- 7's source is gone: tree 4 finds its oldest copy, tree 3 the annex's
SELECT spindle.ack('rc_on', ARRAY[7, 2, 4]) AS acked;
INSERT INTO rc_taken VALUES ('rc_on', 7, 'ack');
SELECT spindle.ack('rc_on', 7) AS ack_7_again;
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS left_ FROM spindle_q.rc_on;

-- ===================== rc_on: delayed events come due ======================
SELECT pg_sleep(greatest(0, extract(epoch FROM max(visible_at) - clock_timestamp())) + 0.1)
  FROM spindle_q.rc_on;
-- 1 and 5 (sources dropped) and 9 (source kept) from the annex, then 11, 12
WITH d AS (SELECT * FROM spindle.dequeue('rc_on', 10))
INSERT INTO rc_taken SELECT 'rc_on', msg_id, 'dequeue' FROM d
  RETURNING msg_id, (SELECT payload->>'n' FROM d WHERE d.msg_id = rc_taken.msg_id) AS n;
SELECT count(*) AS more FROM spindle.dequeue('rc_on', 10);
SELECT count(*) AS left_ FROM spindle_q.rc_on;
SELECT * FROM spindle.verify('spindle_q.rc_on');
-- each event consumed once
SELECT count(*) AS consumed, count(DISTINCT msg_id) AS distinct_ids,
       min(msg_id), max(msg_id)
  FROM rc_taken WHERE q = 'rc_on';

-- ===================== the same with spindle.consume_log off ============
SET spindle.consume_log = off;

-- ===================== rc_off: setup ========================================
SELECT spindle.create_queue('rc_off_dlq');
SELECT spindle.create_queue('rc_off', 4, max_reads => 2, dead_letter_queue => 'rc_off_dlq');
-- spindle 1: ids 1..4 (1 delayed), spindle 2: 5..8 (5 delayed),
-- spindle 3: 9..12 (9 delayed)
SELECT spindle.enqueue('rc_off', '{"n": 1}', delay => '3 seconds');
SELECT spindle.enqueue('rc_off', jsonb_build_object('n', g)) FROM generate_series(2, 4) g;
-- leases of 2 and 3; 4 dequeued
SELECT msg_id, read_count FROM spindle.read('rc_off', 2, '1 hour');
INSERT INTO rc_taken SELECT 'rc_off', msg_id, 'dequeue' FROM spindle.dequeue('rc_off', 1);
SELECT spindle.enqueue('rc_off', '{"n": 5}', delay => '3 seconds');
SELECT spindle.enqueue('rc_off', jsonb_build_object('n', g)) FROM generate_series(6, 8) g;
-- leases of 6 and 7 (8 stays ready)
SELECT msg_id, read_count FROM spindle.read('rc_off', 1, '1 hour');
SELECT msg_id, read_count FROM spindle.read('rc_off', 1, '1 hour');
SELECT spindle.enqueue('rc_off', '{"n": 9}', delay => '3 seconds');
SELECT spindle.enqueue('rc_off', jsonb_build_object('n', g)) FROM generate_series(10, 12) g;
CREATE TEMP TABLE rc_off_old AS SELECT msg_id, ctid AS old_tid FROM spindle_q.rc_off;
-- the queue has a consume log, or not
SELECT count(*) > 0 AS has_log FROM spindle._run_scan('spindle_q.rc_off', 2, 0, 100);

-- ===================== rc_off: moves ========================================
-- two annexes of 4 slots: 7 moves and a rolled back one
SELECT spindle._create_annex('spindle_q.rc_off', 1) > 0 AS annex;
SELECT spindle._create_annex('spindle_q.rc_off', 1) > 0 AS annex;
BEGIN;
SELECT count(*) AS moved FROM (SELECT spindle._relocate('spindle_q.rc_off', i, 1)
  FROM unnest(ARRAY[1, 2, 3, 5, 6, 7, 9]) i) m;
COMMIT;
-- a rolled back move: 8 stays where it is
BEGIN;
SELECT spindle._relocate('spindle_q.rc_off', 8, 1) IS NOT NULL AS moving_8;
ROLLBACK;
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS moved_copies
  FROM spindle_q.rc_off r WHERE NOT EXISTS
  (SELECT 1 FROM rc_off_old o WHERE o.old_tid = r.ctid);
SELECT count(*) FROM spindle_q.rc_off;

-- ===================== rc_off: ack of a moved lease =========================
SELECT spindle.ack('rc_off', 2) AS ack_2;
SELECT spindle.ack('rc_off', 2) AS ack_2_again;
INSERT INTO rc_taken VALUES ('rc_off', 2, 'ack');
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS left_ FROM spindle_q.rc_off;

-- ===================== rc_off: set_visibility of a moved lease ==============
SELECT spindle.set_visibility('rc_off', 3, '0');
-- 3 comes back from the annex (read once before), 8 from its source (the
-- move was rolled back); 1, 5 and 9 are not due, 6 and 7 leased
INSERT INTO rc_taken SELECT 'rc_off', msg_id, 'dequeue' FROM spindle.dequeue('rc_off', 2)
  RETURNING msg_id;
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS left_ FROM spindle_q.rc_off;

-- ===================== rc_off: dead letter of a moved event =================
SELECT spindle.set_visibility('rc_off', 6, '0');
SELECT msg_id, read_count, payload FROM spindle.read('rc_off', 1, '1 hour');
SELECT spindle.set_visibility('rc_off', 6, '0');
-- read twice: moved to the dead-letter queue, not delivered; the next
-- ready event (10) is delivered instead
INSERT INTO rc_taken SELECT 'rc_off', msg_id, 'dequeue' FROM spindle.dequeue('rc_off', 1)
  RETURNING msg_id;
INSERT INTO rc_taken VALUES ('rc_off', 6, 'dead');
SELECT payload FROM spindle_q.rc_off_dlq;
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS left_ FROM spindle_q.rc_off;

-- ===================== rc_off: source spindles dropped ======================
-- spindles 1 and 2 hold only consumed events and copies hidden by
-- committed moves; purged, those let them drop
SELECT rc_purge_old('spindle_q.rc_off', array_agg(old_tid)) AS purged_old
  FROM rc_off_old WHERE msg_id IN (1, 2, 3, 5, 6, 7);
SELECT spindle.drop_spindles('spindle_q.rc_off') AS dropped;
SELECT count(*) AS old_spindles_left FROM spindle.spindle_catalog
 WHERE relation = 'spindle_q.rc_off'::regclass AND kind = 'events'
   AND first_no < 9 AND dropped_at IS NULL;
-- 7's source is gone: tree 4 finds its oldest copy, tree 3 the annex's
SELECT spindle.ack('rc_off', ARRAY[7, 2, 4]) AS acked;
INSERT INTO rc_taken VALUES ('rc_off', 7, 'ack');
SELECT spindle.ack('rc_off', 7) AS ack_7_again;
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS left_ FROM spindle_q.rc_off;

-- ===================== rc_off: delayed events come due ======================
SELECT pg_sleep(greatest(0, extract(epoch FROM max(visible_at) - clock_timestamp())) + 0.1)
  FROM spindle_q.rc_off;
-- 1 and 5 (sources dropped) and 9 (source kept) from the annex, then 11, 12
WITH d AS (SELECT * FROM spindle.dequeue('rc_off', 10))
INSERT INTO rc_taken SELECT 'rc_off', msg_id, 'dequeue' FROM d
  RETURNING msg_id, (SELECT payload->>'n' FROM d WHERE d.msg_id = rc_taken.msg_id) AS n;
SELECT count(*) AS more FROM spindle.dequeue('rc_off', 10);
SELECT count(*) AS left_ FROM spindle_q.rc_off;
SELECT * FROM spindle.verify('spindle_q.rc_off');
-- each event consumed once
SELECT count(*) AS consumed, count(DISTINCT msg_id) AS distinct_ids,
       min(msg_id), max(msg_id)
  FROM rc_taken WHERE q = 'rc_off';
RESET spindle.consume_log;

DROP TABLE rc_taken;
DROP FUNCTION rc_purge_old(regclass, tid[]);
SELECT spindle.drop_queue(q) FROM unnest(ARRAY['rc_on', 'rc_on_dlq', 'rc_off', 'rc_off_dlq']) q;
