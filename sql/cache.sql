--
-- cache: the event cache (src/queue/cache.c) and spindle.cache_stats.
--
--  - the view's columns and types;
--  - an enqueue puts the event into the cache, a dequeue, read or ack that
--    finds it there counts a hit, one that does not a miss; a consumed
--    event leaves the cache (entries), a rolled-back dequeue costs a miss;
--  - whatever the cache holds, consumers get exactly what is on disk: a
--    deleted, purged, aborted or large event is handled as without it
--    (test/t/030_cache.pl runs a whole scenario with the cache on and off
--    and compares);
--  - only tables the caller may SELECT from are shown.
--
SHOW spindle.cache_size;
SHOW spindle.cache_tables;
SHOW spindle.cache_payload_size;

SELECT attname, format_type(atttypid, atttypmod) AS type
  FROM pg_attribute
 WHERE attrelid = 'spindle.cache_stats'::regclass AND attnum > 0
 ORDER BY attnum;

SELECT spindle.create_queue('cc');
CREATE VIEW cc_stats AS
  SELECT capacity, entries, hits, misses, evictions, hit_ratio,
         memory_bytes > 0 AS has_memory
    FROM spindle.cache_stats WHERE relation = 'spindle_q.cc'::regclass;
-- no enqueue yet: no cache slot
SELECT * FROM cc_stats;

SELECT count(*) FROM spindle.enqueue_batch('cc',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 10) g));
SELECT * FROM cc_stats;
-- memory at the defaults: 10 000 entries of 296 bytes
SELECT memory_bytes FROM spindle.cache_stats WHERE relation = 'spindle_q.cc'::regclass;

-- hits: right behind the producer
SELECT payload->>'n' AS n, read_count FROM spindle.dequeue('cc', 3);
SELECT entries, hits, misses, hit_ratio FROM cc_stats;

-- a rolled-back dequeue: its events left the cache, they come back as misses
BEGIN;
SELECT payload->>'n' AS n FROM spindle.dequeue('cc', 2);
ROLLBACK;
SELECT payload->>'n' AS n, enqueued_at IS NOT NULL AS has_time FROM spindle.dequeue('cc', 2);
SELECT entries, hits, misses FROM cc_stats;

-- read keeps the event cached (its lease may end); ack then hits too
SELECT payload->>'n' AS n, read_count FROM spindle.read('cc', 1, '1 hour');
SELECT entries, hits, misses FROM cc_stats;
SELECT spindle.ack('cc', (SELECT min(msg_id) FROM spindle_q.cc));
SELECT entries, hits, misses FROM cc_stats;

-- a plain DELETE of a cached event: never delivered, and found gone
DELETE FROM spindle_q.cc WHERE payload->>'n' = '7';
-- an aborted producer: cached, never delivered
BEGIN;
SELECT spindle.enqueue('cc', '{"n": "aborted"}') > 0 AS enqueued;
ROLLBACK;
SELECT spindle.enqueue('cc', '{"n": 11}') > 0 AS enqueued;
SELECT payload->>'n' AS n FROM spindle.dequeue('cc', 10);
SELECT entries, hits, misses FROM cc_stats;

-- payloads above spindle.cache_payload_size are cached by location only
-- (read from the page), out-of-line ones too; both come back whole
SELECT spindle.enqueue('cc', jsonb_build_object('big', repeat('x', 1000))) > 0 AS enqueued;
SELECT spindle.enqueue('cc', jsonb_build_object('huge', (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 40000) g))) > 0 AS enqueued;
SELECT length(payload->>'big') AS big, length(payload->>'huge') AS huge, read_count
  FROM spindle.dequeue('cc', 2);
SELECT entries, hits, misses FROM cc_stats;

-- a spindle table in spindle_q that gets msg_ids but has not the columns
-- of a queue is not cached (consumers cannot open it)
CREATE TABLE spindle_q.notq (msg_id bigint, x int) USING spindle;
INSERT INTO spindle_q.notq (x) VALUES (1), (2);
SELECT count(*) AS rows, min(msg_id) > 0 AS has_ids FROM spindle_q.notq;
SELECT capacity, entries FROM spindle.cache_stats WHERE relation = 'spindle_q.notq'::regclass;
DROP TABLE spindle_q.notq;

-- a table the caller may not read is not shown
CREATE ROLE regress_cache_nobody;
SET ROLE regress_cache_nobody;
SELECT count(*) FROM spindle.cache_stats WHERE relation = 'spindle_q.cc'::regclass;
RESET ROLE;
DROP ROLE regress_cache_nobody;

-- TRUNCATE and DROP free the table's slot
TRUNCATE spindle_q.cc;
SELECT * FROM cc_stats;
SELECT spindle.enqueue('cc', '{"n": 12}') > 0 AS enqueued;
SELECT entries FROM cc_stats;
DROP VIEW cc_stats;
SELECT spindle.drop_queue('cc');
SELECT count(*) FROM spindle._cache_stats() s
  WHERE NOT EXISTS (SELECT FROM pg_class c WHERE c.oid = s.relid);
