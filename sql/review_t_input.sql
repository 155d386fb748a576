-- Hostile review T: a large max_events is a bound, not an allocation:
-- read() and dequeue() with max_events up to 2147483647 return what the
-- queue holds (they failed with XX000 "invalid memory alloc request size"
-- and allocated 104 bytes per max_event up front).
SET client_min_messages = warning;
SELECT spindle.create_queue('rtq');
SELECT count(*) FROM spindle.read('rtq', 2147483647, '1 s');
SELECT count(*) FROM spindle.dequeue('rtq', 2147483647);
SELECT count(*) FROM spindle.enqueue_batch('rtq',
    ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 600) g));
SELECT count(*) FROM spindle.read('rtq', 2147483647, '1 hour');
SELECT count(*) FROM spindle.read('rtq', 100000000, '1 hour');
SELECT spindle.set_visibility('rtq', min(msg_id), '0') FROM spindle_q.rtq;
SELECT count(*) FROM spindle.dequeue('rtq', 2147483647);
SELECT count(*) FROM spindle.enqueue_batch('rtq',
    ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 300) g));
SELECT count(*), min((payload->>'i')::int), max((payload->>'i')::int)
  FROM spindle.dequeue('rtq', 2147483647);
SELECT count(*) FROM spindle.dequeue('rtq', 2147483647);
SELECT spindle.drop_queue('rtq');
