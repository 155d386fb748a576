-- What one queue's consumer state holds does not grow with the calls of a
-- transaction: one transaction taking events one call at a time (review
-- finding 1, third trigger: 257 dequeues in one transaction ran out of the
-- queue's 256 items), with savepoints rolled back in between.
SET client_min_messages = warning;
\set VERBOSITY terse
SELECT spindle.create_queue('cap1', 100);
SELECT count(*) FROM spindle.enqueue_batch('cap1',
  ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 1000) g));

-- 600 calls of dequeue(q, 1) in one transaction
BEGIN;
SELECT count(*), min((payload->>'n')::int), max((payload->>'n')::int)
  FROM generate_series(1, 600) g, LATERAL spindle.dequeue('cap1', g - g + 1);
COMMIT;
SELECT count(*), min((payload->>'n')::int) FROM spindle_q.cap1;

-- savepoints: what a rolled-back savepoint took comes back first
BEGIN;
SELECT count(*) FROM generate_series(1, 100) g, LATERAL spindle.dequeue('cap1', g - g + 1);
SAVEPOINT s;
SELECT count(*) FROM generate_series(1, 100) g, LATERAL spindle.dequeue('cap1', g - g + 1);
ROLLBACK TO SAVEPOINT s;
SELECT min((payload->>'n')::int), max((payload->>'n')::int)
  FROM generate_series(1, 150) g, LATERAL spindle.dequeue('cap1', g - g + 1);
COMMIT;
SELECT count(*), min((payload->>'n')::int) FROM spindle_q.cap1;

-- a transaction that rolls back gives back everything it took
BEGIN;
SELECT count(*) FROM generate_series(1, 150) g, LATERAL spindle.dequeue('cap1', g - g + 1);
ROLLBACK;
SELECT count(*) FROM spindle_q.cap1;
SELECT count(*) FROM spindle.dequeue('cap1', 1000);
SELECT count(*) FROM spindle_q.cap1;
SELECT * FROM spindle.verify('spindle_q.cap1');

-- 400 events read together, acknowledged one by one in descending order
-- in one transaction (review finding 1, second trigger), then a dequeue
-- in the same transaction still finds room for its claim
SELECT count(*) FROM spindle.enqueue_batch('cap1',
  ARRAY(SELECT jsonb_build_object('r', g) FROM generate_series(1, 400) g));
CREATE TEMP TABLE got AS SELECT msg_id FROM spindle.read('cap1', 400, '1 hour');
SELECT count(*) FROM got;
SELECT spindle.enqueue('cap1', '{"new": 1}') > 0 AS enqueued;
BEGIN;
SELECT count(*) FILTER (WHERE spindle.ack('cap1', msg_id)) AS acked
  FROM (SELECT msg_id FROM got ORDER BY msg_id DESC) g;
SELECT payload FROM spindle.dequeue('cap1', 1);
COMMIT;
SELECT count(*) FROM spindle_q.cap1;
SELECT * FROM spindle.verify('spindle_q.cap1');
SELECT spindle.drop_queue('cap1');
