-- Leases are not bounded by a server-wide pool: a queue holds any number
-- of leases (they are kept on disk, in the queue's consumer relation), so
-- read() of 50 000 events, or 20 queues holding 5 000 single-event leases
-- each at once, succeed with spindle.max_leases at its default (10 000);
-- spindle.queues.leased counts them.  Before, leases came from one
-- shared-memory pool of spindle.max_leases, and these reads failed with
-- 53400 (or returned fewer events than were waiting).
-- Also the contract of ack and set_visibility on leases (docs/queues.md):
-- ack of a leased event returns true and purges it; a rolled-back ack
-- leaves the lease as it was (not delivered again before the visibility
-- timeout ends, then delivered with read_count 2); ack of an expired lease
-- not yet taken again returns true; set_visibility moves a lease's end and
-- returns false for an event not leased.
-- Output shows counts, read_counts and payloads, never msg_ids.
SET client_min_messages = warning;
\set VERBOSITY terse

-- 1a. one read of 50 000 contiguous events
SELECT spindle.create_queue('ls_big', events_per_spindle => 200000);
SELECT count(*) FROM spindle.enqueue_batch('ls_big',
  ARRAY(SELECT jsonb_build_object('g', g) FROM generate_series(1, 50000) g));
SELECT count(*) AS leased_now, min(read_count), max(read_count)
  FROM spindle.read('ls_big', 50000, '1 hour');
SELECT depth, leased FROM spindle.queues WHERE queue_name = 'ls_big';
-- nothing left to read or dequeue while they are leased
SELECT count(*) FROM spindle.read('ls_big', 10, '1 hour');
SELECT count(*) FROM spindle.dequeue('ls_big', 10);

-- 1b. reads of 50 000 events with gaps between them (every other event
-- of 100 000 deleted): 50 000 leases that cannot share a run.  One read()
-- leases at most spindle.max_leases (10 000) separate runs, the runs it
-- holds while it runs; the next call goes on, and nothing caps the leases
-- a queue holds.
SELECT spindle.create_queue('ls_gaps', events_per_spindle => 200000);
SELECT count(*) FROM spindle.enqueue_batch('ls_gaps',
  ARRAY(SELECT jsonb_build_object('g', g) FROM generate_series(1, 100000) g));
DELETE FROM spindle_q.ls_gaps WHERE (payload->>'g')::int % 2 = 0;
CREATE TEMP TABLE ls_gaps_got (g int);
DO $$ DECLARE n int; BEGIN
  LOOP
    INSERT INTO ls_gaps_got
      SELECT (payload->>'g')::int FROM spindle.read('ls_gaps', 50000, '1 hour');
    GET DIAGNOSTICS n = ROW_COUNT;
    EXIT WHEN n = 0;
  END LOOP;
END $$;
SELECT count(*) AS leased_now, count(DISTINCT g), min(g), max(g) FROM ls_gaps_got;
SELECT depth, leased FROM spindle.queues WHERE queue_name = 'ls_gaps';
SELECT count(*) FROM spindle.read('ls_gaps', 10, '1 hour');

-- 1c. 20 queues, each with 5 000 leases of one event (5 000 reads of one
-- event, each lease ending 1 ms after the one before), all at once
DO $$
BEGIN
  FOR q IN 1 .. 20 LOOP
    PERFORM spindle.create_queue('ls_m' || q, events_per_spindle => 10000);
    PERFORM count(*) FROM spindle.enqueue_batch('ls_m' || q,
      ARRAY(SELECT jsonb_build_object('g', g) FROM generate_series(1, 5005) g));
  END LOOP;
END $$;
CREATE TABLE ls_many (q int, msg_id bigint, read_count int);
DO $$
BEGIN
  FOR q IN 1 .. 20 LOOP
    FOR i IN 1 .. 5000 LOOP
      INSERT INTO ls_many SELECT q, msg_id, read_count
        FROM spindle.read('ls_m' || q, 1, make_interval(hours => 1, secs => i / 1000.0));
    END LOOP;
  END LOOP;
END $$;
SELECT count(*) AS leases, count(DISTINCT (q, msg_id)) AS distinct_events,
       count(DISTINCT q) AS queues, max(read_count)
  FROM ls_many;
SELECT count(*) AS queues, min(leased), max(leased), sum(leased),
       min(depth), max(depth)
  FROM spindle.queues WHERE queue_name LIKE 'ls\_m%';
-- the five events of each queue not leased are still there to read
SELECT count(*) FROM spindle.read('ls_m1', 100, '1 hour');
SELECT count(*) FROM spindle.read('ls_m20', 100, '1 hour');

-- all of them can be acknowledged
SELECT count(*) AS acked FROM spindle.ack('ls_big', ARRAY(SELECT msg_id FROM spindle_q.ls_big));
SELECT count(*) AS acked FROM spindle.ack('ls_gaps', ARRAY(SELECT msg_id FROM spindle_q.ls_gaps));
SELECT sum((SELECT count(*) FROM spindle.ack('ls_m' || q,
           ARRAY(SELECT msg_id FROM ls_many m WHERE m.q = s.q)))) AS acked
  FROM generate_series(1, 20) s(q);
SELECT count(*) AS left_in_big FROM spindle_q.ls_big;
SELECT count(*) AS left_in_gaps FROM spindle_q.ls_gaps;
SELECT count(*) AS left_in_m1 FROM spindle_q.ls_m1;
DROP TABLE ls_many;
SELECT spindle.drop_queue('ls_big');
SELECT spindle.drop_queue('ls_gaps');
SELECT count(spindle.drop_queue('ls_m' || q)) FROM generate_series(1, 20) q;

-- 4. ack of leased events
SELECT spindle.create_queue('ls_ack');
SELECT count(*) FROM spindle.enqueue_batch('ls_ack',
  ARRAY['{"e": "a"}', '{"e": "b"}', '{"e": "c"}']::jsonb[]);
CREATE TABLE ls_r (msg_id bigint, read_count int, payload jsonb);
INSERT INTO ls_r SELECT msg_id, read_count, payload FROM spindle.read('ls_ack', 1, '1 hour');
SELECT read_count, payload FROM ls_r;
-- ack of a leased event: true, and the event is gone
SELECT spindle.ack('ls_ack', (SELECT msg_id FROM ls_r WHERE payload->>'e' = 'a')) AS acked;
SELECT count(*) AS a_left FROM spindle_q.ls_ack WHERE payload->>'e' = 'a';
SELECT spindle.ack('ls_ack', (SELECT msg_id FROM ls_r WHERE payload->>'e' = 'a')) AS acked_again;

-- a rolled-back ack leaves the lease: b is not delivered again before
-- its visibility timeout (2 s) ends, then it is, with read_count 2
INSERT INTO ls_r SELECT msg_id, read_count, payload FROM spindle.read('ls_ack', 1, '2 s');
SELECT read_count, payload FROM ls_r WHERE payload->>'e' = 'b';
BEGIN;
SELECT spindle.ack('ls_ack', (SELECT msg_id FROM ls_r WHERE payload->>'e' = 'b')) AS acked_in_xact;
ROLLBACK;
SELECT count(*) AS b_left FROM spindle_q.ls_ack WHERE payload->>'e' = 'b';
-- c is the only one deliverable now
SELECT read_count, payload FROM spindle.read('ls_ack', 10, '1 hour');
SELECT pg_sleep(2.5);
SELECT read_count, payload FROM spindle.read('ls_ack', 10, '1 s');

-- ack of an expired lease not yet taken again: true
SELECT pg_sleep(1.5);
SELECT spindle.ack('ls_ack', (SELECT msg_id FROM ls_r WHERE payload->>'e' = 'b')) AS acked_expired;
SELECT count(*) AS b_left FROM spindle_q.ls_ack WHERE payload->>'e' = 'b';
SELECT payload FROM spindle_q.ls_ack;
SELECT spindle.drop_queue('ls_ack');

-- 5. set_visibility
SELECT spindle.create_queue('ls_vis');
SELECT count(*) FROM spindle.enqueue_batch('ls_vis',
  ARRAY['{"e": "x"}', '{"e": "y"}']::jsonb[]);
TRUNCATE ls_r;
INSERT INTO ls_r SELECT msg_id, read_count, payload FROM spindle.read('ls_vis', 1, '1 s');
SELECT read_count, payload FROM ls_r;
-- y was never read: not leased
SELECT spindle.set_visibility('ls_vis',
  (SELECT msg_id FROM spindle_q.ls_vis WHERE payload->>'e' = 'y'), '1 hour') AS y_not_leased;
-- x's lease now ends in 3 s instead of 1 s
SELECT spindle.set_visibility('ls_vis', (SELECT msg_id FROM ls_r), '3 s') AS x_moved;
-- after the old end, before the new one: x is not delivered (y is)
SELECT pg_sleep(1.5);
SELECT read_count, payload FROM spindle.read('ls_vis', 10, '1 hour');
-- after the new end: x is delivered again, read_count 2
SELECT pg_sleep(2);
SELECT read_count, payload FROM spindle.read('ls_vis', 10, '1 hour');
-- an acknowledged event is not leased
SELECT spindle.ack('ls_vis', (SELECT msg_id FROM ls_r)) AS x_acked;
SELECT spindle.set_visibility('ls_vis', (SELECT msg_id FROM ls_r), '1 s') AS x_gone;
DROP TABLE ls_r;
SELECT spindle.drop_queue('ls_vis');
