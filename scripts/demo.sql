-- spindle demo: run by scripts/demo.sh on a throwaway cluster that has
-- shared_preload_libraries = 'spindle' and spindle.enable_worker = off, so
-- that the spindles are dropped at step 7 and not at a random moment (the
-- worker is turned on at step 16).

\set QUIET on
\pset footer off
\pset null '(null)'
\set QUIET off

\echo
\echo '== 1. Install the extension (it needs shared_preload_libraries = ''spindle'').'
CREATE EXTENSION spindle;

\echo
\echo '== 2. Create a spindle table whose spindles hold at most 1000 events each.'
CREATE TABLE events (id bigint, body jsonb) USING spindle
    WITH (events_per_spindle = 1000);

\echo
\echo '== 3. Append 3500 events: they fill spindles 1000 at a time.'
INSERT INTO events (id, body)
SELECT g, jsonb_build_object('n', g, 'kind', 'demo')
FROM generate_series(1, 3500) AS g;

\echo
\echo '== 4. The spindles: three full ones and an open one (a spindle with no events yet is listed as ready).'
SELECT spindle_no, state, capacity, events, purged_events, size_bytes
FROM spindle.spindles WHERE relation = 'events'::regclass ORDER BY 1;

\echo
\echo '== 5. Consume the first 2000 events: DELETE only flags them purged, nothing is rewritten.'
DELETE FROM events WHERE id <= 2000;

\echo
\echo '== 6. The first two spindles are now full and entirely purged, so they can be dropped.'
SELECT spindle_no, state, capacity, events, purged_events, size_bytes
FROM spindle.spindles WHERE relation = 'events'::regclass ORDER BY 1;

\echo
\echo '== 7. Drop every droppable spindle now and return how many were dropped (the background worker, off until step 16, does the same every spindle.naptime).'
SELECT spindle.drop_spindles('events');

\echo
\echo '== 8. Only the spindles holding live events remain; no VACUUM was needed.'
SELECT spindle_no, state, capacity, events, purged_events, size_bytes
FROM spindle.spindles WHERE relation = 'events'::regclass ORDER BY 1;

\echo
\echo '== 9. Per-table totals, including the spindles dropped and the bytes freed.'
SELECT * FROM spindle.tables;

\echo
\echo '== 10. The 1500 events that were not deleted are all still there.'
SELECT count(*) AS events, min(id), max(id) FROM events;

\echo
\echo '== 11. A queue: a spindle table with an API. Events read more than twice go to a dead-letter queue.'
SELECT spindle.create_queue('orders_dead');
SELECT spindle.create_queue('orders', events_per_spindle => 4,
                            max_reads => 2, dead_letter_queue => 'orders_dead');
SELECT spindle.enqueue_batch('orders',
       ARRAY(SELECT jsonb_build_object('order', g) FROM generate_series(1, 10) g)) AS msg_id;

\echo
\echo '== 12. A transactional dequeue: rolled back, its events come back first; committed, they are gone.'
BEGIN;
SELECT msg_id, payload FROM spindle.dequeue('orders', 3);
ROLLBACK;
BEGIN;
SELECT msg_id, payload FROM spindle.dequeue('orders', 3);
COMMIT;

\echo
\echo '== 13. read leases events for a while (at least once); ack removes one, set_visibility hands one back for a retry.'
SELECT msg_id, read_count, payload FROM spindle.read('orders', 2, '30 seconds');
SELECT spindle.ack('orders', (SELECT min(msg_id) FROM spindle_q.orders)) AS acked;
SELECT spindle.set_visibility('orders', (SELECT min(msg_id) FROM spindle_q.orders), '0') AS retry_now;
SELECT msg_id, read_count, payload FROM spindle.read('orders', 1, '0 seconds');

\echo
\echo '== 14. A third read of that event moves it to the dead-letter queue, and read delivers the next event instead.'
SELECT msg_id, read_count, payload FROM spindle.read('orders', 1, '30 seconds');
SELECT msg_id, payload FROM spindle_q.orders_dead;

\echo
\echo '== 15. Consume the rest; the queue''s full, purged spindles drop.'
SELECT count(*) AS dequeued FROM spindle.dequeue('orders', 100);
SELECT spindle.drop_spindles('spindle_q.orders') AS dropped;
SELECT spindle_no, state, capacity, events, purged_events
FROM spindle.spindles WHERE relation = 'spindle_q.orders'::regclass ORDER BY 1;

\echo
\echo '== 16. Give the table a time to live of 1 second and turn the background worker on: it purges expired events and drops the spindles they filled, by itself.'
ALTER TABLE events SET (time_to_live = '1 second');
ALTER SYSTEM SET spindle.enable_worker = on;
SELECT pg_reload_conf();
DO $$
BEGIN
  -- wait (at most 30 s) until the worker has dropped the full spindle 3;
  -- COMMIT ends this session's snapshot, which would otherwise keep the
  -- purged events visible to it, and so keep their spindle
  FOR i IN 1..300 LOOP
    EXIT WHEN NOT EXISTS (SELECT 1 FROM spindle.spindles
                           WHERE relation = 'events'::regclass AND state = 'full');
    COMMIT;
    PERFORM pg_sleep(0.1);
  END LOOP;
END
$$;
SELECT spindle_no, state, capacity, events, purged_events, size_bytes
FROM spindle.spindles WHERE relation = 'events'::regclass ORDER BY 1;
SELECT count(*) AS events_left FROM events;
SELECT database, state, spindles_dropped, bytes_freed, last_error FROM spindle.worker;
