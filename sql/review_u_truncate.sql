-- review U: a TRUNCATE of a queue table resets its consumers' state when
-- it commits, as a drop does: the leases and items of the events it took
-- name nothing any more.  Before the fix spindle.queues went on counting
-- them as leased until their visibility timeouts ran out (holding the
-- lease budget); a TRUNCATE that rolls back leaves the leases as they were.
SET client_min_messages = warning;
SELECT spindle.create_queue('utq');
SELECT count(*) FROM generate_series(1, 3) i,
  LATERAL spindle.enqueue('utq', jsonb_build_object('i', i));
SELECT count(*) FROM spindle.read('utq', 2, '1 hour');
-- rolled back, and inside a savepoint rolled back to: the leases stay
BEGIN;
TRUNCATE spindle_q.utq;
ROLLBACK;
BEGIN;
SAVEPOINT s;
TRUNCATE spindle_q.utq;
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT depth, leased FROM spindle.queues WHERE queue_name = 'utq';
SELECT payload FROM spindle.read('utq', 10, '1 hour');
-- committed: nothing is left leased
TRUNCATE spindle_q.utq;
SELECT depth, leased FROM spindle.queues WHERE queue_name = 'utq';
SELECT count(*) FROM spindle.enqueue('utq', '{"after": 1}');
SELECT payload, read_count FROM spindle.read('utq', 10, '1 hour');
SELECT depth, leased FROM spindle.queues WHERE queue_name = 'utq';
SELECT spindle.drop_queue('utq');
