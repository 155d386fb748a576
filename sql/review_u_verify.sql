-- review U: spindle._verify_corrupt('queue_item') takes a range of
-- msg_ids [vslot, vslot + arg): an empty or reversed one (arg <= 0), a
-- negative start or an end past the int8 range is refused (22023).  Before
-- the fix arg = -5 added an item that ended before it started: the queue's
-- depth in spindle.queues counted events that do not exist.
SET client_min_messages = warning;
SELECT spindle.create_queue('uvq');
SELECT count(*) FROM generate_series(1, 3) i,
  LATERAL spindle.enqueue('uvq', jsonb_build_object('i', i));
SELECT count(*) FROM spindle.read('uvq', 1, '0');
\set VERBOSITY terse
SELECT spindle._verify_corrupt('spindle_q.uvq', 'queue_item', min(msg_id) + 100, -5) FROM spindle_q.uvq;
SELECT spindle._verify_corrupt('spindle_q.uvq', 'queue_item', min(msg_id) + 100, 0) FROM spindle_q.uvq;
SELECT spindle._verify_corrupt('spindle_q.uvq', 'queue_item', -10, 5);
SELECT spindle._verify_corrupt('spindle_q.uvq', 'queue_item', 9223372036854775800, 100);
\set VERBOSITY default
SELECT depth FROM spindle.queues WHERE queue_name = 'uvq';
SELECT count(*) FROM spindle.verify('spindle_q.uvq');
SELECT count(*) FROM spindle.dequeue('uvq', 10);
SELECT spindle.drop_queue('uvq');
