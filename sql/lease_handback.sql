--
-- Leases that a failed statement hands back (undo_leases), and those it
-- must not: review r1, finding 7.
--
SELECT spindle.create_queue('lhb') IS NOT NULL AS created;
SELECT count(*) FROM spindle.enqueue_batch('lhb',
    ARRAY['{"n":1}','{"n":2}','{"n":3}']::jsonb[]);

-- One query string of two statements: the first's row reaches the client,
-- then the second fails.  They share a start time, but the lease of the
-- first is the client's: it is not handed back.
SELECT payload, read_count FROM spindle.read('lhb', 1, '1 hour') \; SELECT 1 / 0;
-- so a second read gets the two others, and event 1 stays leased
SELECT payload, read_count FROM spindle.read('lhb', 3, '1 hour') ORDER BY msg_id;
SELECT leased FROM spindle.queues WHERE queue_name = 'lhb';

-- A statement that fails over the rows of its own read() hands them back
-- at once, the read still counted.
SELECT count(*) FROM spindle.enqueue('lhb', '{"n":4}');
SELECT payload, 1 / (read_count - read_count) FROM spindle.read('lhb', 1, '1 hour');
SELECT payload, read_count FROM spindle.read('lhb', 3, '1 hour');

-- The same in one string whose second statement fails over its own read:
-- only that read's lease comes back.
SELECT count(*) FROM spindle.enqueue_batch('lhb', ARRAY['{"n":5}','{"n":6}']::jsonb[]);
SELECT payload FROM spindle.read('lhb', 1, '1 hour') \; SELECT payload, 1 / (read_count - read_count) FROM spindle.read('lhb', 1, '1 hour');
SELECT payload, read_count FROM spindle.read('lhb', 3, '1 hour');

-- A PL/pgSQL FOR loop over read() closes its cursor before the statement
-- fails: the leases still belong to the failing statement (review r2,
-- finding 3), and come back at once.
SELECT count(*) FROM spindle.enqueue_batch('lhb', ARRAY['{"n":7}','{"n":8}']::jsonb[]);
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT * FROM spindle.read('lhb', 2, '1 hour') LOOP
  END LOOP;
  RAISE EXCEPTION 'fails after the loop';
END $$;
SELECT payload, read_count FROM spindle.read('lhb', 3, '1 hour') ORDER BY msg_id;

-- and such a statement that succeeds, followed by a failing one in the
-- same string, keeps its lease
SELECT count(*) FROM spindle.enqueue('lhb', '{"n":9}');
DO $$ DECLARE r record; BEGIN FOR r IN SELECT * FROM spindle.read('lhb', 1, '1 hour') LOOP RAISE NOTICE 'got %', r.payload; END LOOP; END $$ \; SELECT 1 / 0;
SELECT payload, read_count FROM spindle.read('lhb', 3, '1 hour');

SELECT spindle.drop_queue('lhb');
