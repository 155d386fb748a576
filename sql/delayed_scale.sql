-- Delayed events do not bound a queue: any number of them, with distinct
-- due times, leaves the queue's other events deliverable (review finding
-- 1A: 300 reminders with distinct dues made every dequeue and read of the
-- queue fail with 53400 until they came due).  The contract
-- (docs/queues.md): a delayed event is never delivered before its
-- visible_at; ack purges an event, leased or not, and returns true unless
-- it was already purged or being purged; spindle.queues counts in
-- "delayed" the events a consumer found not yet due (docs/monitoring.md).
SET client_min_messages = warning;
\set VERBOSITY terse

-- 1. 10 000 events due in 1 h + g s (each its own due second), then five
-- ordinary events: dequeue returns exactly the five
SELECT spindle.create_queue('ds_big');
SELECT count(spindle.enqueue('ds_big', jsonb_build_object('later', g),
                             make_interval(hours => 1, secs => g)))
  FROM generate_series(1, 10000) g;
SELECT count(*) FROM spindle.enqueue_batch('ds_big',
  ARRAY(SELECT jsonb_build_object('now', g) FROM generate_series(1, 5) g));
SELECT count(DISTINCT visible_at) AS distinct_dues
  FROM spindle_q.ds_big WHERE payload ? 'later';
BEGIN;
SELECT payload FROM spindle.dequeue('ds_big', 10) ORDER BY msg_id;
COMMIT;
-- nothing else is due
SELECT count(*) FROM spindle.dequeue('ds_big', 10);
SELECT count(*) FROM spindle.read('ds_big', 10, '1 min');
-- the consumer met all 10 000 and knows them delayed; none deliverable
SELECT depth, leased, delayed FROM spindle.queues WHERE queue_name = 'ds_big';
SELECT count(*) AS left_in_table FROM spindle_q.ds_big;

-- 2. the same with read(): the five ordinary events are leased
SELECT spindle.create_queue('ds_big_r');
SELECT count(spindle.enqueue('ds_big_r', jsonb_build_object('later', g),
                             make_interval(hours => 1, secs => g)))
  FROM generate_series(1, 10000) g;
SELECT count(*) FROM spindle.enqueue_batch('ds_big_r',
  ARRAY(SELECT jsonb_build_object('now', g) FROM generate_series(1, 5) g));
CREATE TABLE ds_leased (msg_id bigint, read_count int, payload jsonb);
INSERT INTO ds_leased
  SELECT msg_id, read_count, payload FROM spindle.read('ds_big_r', 10, '1 hour');
SELECT read_count, payload FROM ds_leased ORDER BY msg_id;
SELECT depth, leased, delayed FROM spindle.queues WHERE queue_name = 'ds_big_r';
SELECT count(*) FILTER (WHERE spindle.ack('ds_big_r', msg_id)) AS acked FROM ds_leased;
SELECT count(*) FROM spindle.read('ds_big_r', 10, '1 min');
SELECT count(*) AS left_in_table FROM spindle_q.ds_big_r;

-- 3. the review's reminders: 300 events due in 1 h + 2g s, then five
-- ordinary ones; dequeue and read both deliver
SELECT spindle.create_queue('ds_rem');
SELECT count(spindle.enqueue('ds_rem', jsonb_build_object('remind', g),
                             make_interval(hours => 1, secs => 2 * g)))
  FROM generate_series(1, 300) g;
SELECT count(*) FROM spindle.enqueue_batch('ds_rem',
  ARRAY(SELECT jsonb_build_object('work', g) FROM generate_series(1, 5) g));
SELECT payload FROM spindle.dequeue('ds_rem', 1);
SELECT payload FROM spindle.dequeue('ds_rem', 1000) ORDER BY msg_id;
SELECT count(*) FROM spindle.enqueue_batch('ds_rem',
  ARRAY(SELECT jsonb_build_object('work', g) FROM generate_series(6, 10) g));
SELECT read_count, payload FROM spindle.read('ds_rem', 10, '30 s') ORDER BY msg_id;
SELECT depth, leased, delayed FROM spindle.queues WHERE queue_name = 'ds_rem';
SELECT count(*) FILTER (WHERE payload ? 'remind') AS reminders,
       count(*) FILTER (WHERE payload ? 'work') AS work
  FROM spindle_q.ds_rem;

-- 4. ack of a delayed event (one in the middle of the 10 000 of ds_big):
-- true, the event is gone, and a second ack is false
SELECT msg_id AS ds_mid FROM spindle_q.ds_big WHERE payload = '{"later": 5000}' \gset
SELECT spindle.ack('ds_big', :ds_mid) AS acked;
SELECT count(*) FROM spindle_q.ds_big WHERE msg_id = :ds_mid;
SELECT spindle.ack('ds_big', :ds_mid) AS acked_again;
SELECT depth, leased, delayed FROM spindle.queues WHERE queue_name = 'ds_big';
SELECT count(*) FROM spindle.dequeue('ds_big', 10);
SELECT count(*) AS left_in_table FROM spindle_q.ds_big;
SELECT * FROM spindle.verify('spindle_q.ds_big');
SELECT * FROM spindle.verify('spindle_q.ds_big_r');
SELECT * FROM spindle.verify('spindle_q.ds_rem');

-- 5. 500 events with short distinct delays, neighbours a second apart
-- (odd g due in 0.2 .. 0.3 s, even g in 1.4 .. 1.5 s, so that no two
-- adjacent events fall in the same second), five of the late ones
-- acknowledged before they are due; consumers poll while they come due.
-- Each of the other 495 is delivered exactly once, none before its
-- visible_at (clock_timestamp() taken as each returned row is stored,
-- after the call decided to deliver it), and the acknowledged ones never.
SELECT spindle.create_queue('ds_short');
SELECT count(spindle.enqueue('ds_short', jsonb_build_object('s', g),
         make_interval(secs => CASE WHEN g % 2 = 1 THEN 0.2 + g * 0.0002
                                    ELSE 1.5 - g * 0.0002 END)))
  FROM generate_series(1, 500) g;
CREATE TABLE ds_due AS SELECT msg_id, visible_at, (payload->>'s')::int AS s
  FROM spindle_q.ds_short;
SELECT count(DISTINCT visible_at) AS distinct_dues FROM ds_due;
SELECT count(*) FILTER (WHERE spindle.ack('ds_short', msg_id)) AS acked
  FROM ds_due WHERE s IN (100, 200, 300, 400, 500);
CREATE TABLE ds_got (msg_id bigint, got_at timestamptz);
DO $$
DECLARE
	t0 timestamptz := clock_timestamp();
BEGIN
	WHILE (SELECT count(*) FROM ds_got) < 495
		AND clock_timestamp() < t0 + interval '8 s'
	LOOP
		INSERT INTO ds_got
			SELECT msg_id, clock_timestamp() FROM spindle.dequeue('ds_short', 100);
		COMMIT;
		PERFORM pg_sleep(0.05);
	END LOOP;
END $$;
SELECT count(*) AS delivered, count(DISTINCT msg_id) AS distinct_delivered
  FROM ds_got;
SELECT count(*) AS early FROM ds_got g JOIN ds_due d USING (msg_id)
  WHERE g.got_at < d.visible_at;
SELECT count(*) AS acked_but_delivered FROM ds_got g JOIN ds_due d USING (msg_id)
  WHERE d.s IN (100, 200, 300, 400, 500);
SELECT count(*) AS not_enqueued FROM ds_got g LEFT JOIN ds_due d USING (msg_id)
  WHERE d.msg_id IS NULL;
SELECT count(*) FROM spindle.dequeue('ds_short', 1000);
SELECT count(*) AS left_in_table FROM spindle_q.ds_short;
SELECT * FROM spindle.verify('spindle_q.ds_short');

-- 6. a delayed event is never delivered early: due in 5 s, neither
-- dequeue nor read returns it now, and it stays in the queue
SELECT spindle.create_queue('ds_early');
SELECT spindle.enqueue('ds_early', '{"due": "5 s"}', '5 s') > 0 AS enqueued;
SELECT count(*) FROM spindle.dequeue('ds_early', 10);
SELECT count(*) FROM spindle.read('ds_early', 10, '1 min');
SELECT count(*) FROM spindle.dequeue('ds_early', 10, wait => '0.5 s');
SELECT count(*) AS left_in_table FROM spindle_q.ds_early;

DROP TABLE ds_leased, ds_due, ds_got;
SELECT spindle.drop_queue(q) FROM unnest(ARRAY['ds_big', 'ds_big_r', 'ds_rem',
  'ds_short', 'ds_early']) q;
