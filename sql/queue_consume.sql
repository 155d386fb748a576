--
-- queue_consume: dequeue, read, ack, set_visibility.
--
--  - dequeue purges what it returns in the caller's transaction: gone at
--    commit, back first (in order) after ROLLBACK or ROLLBACK TO SAVEPOINT.
--  - read leases: hidden from read and dequeue until the lease ends, then
--    delivered again with read_count + 1; set_visibility moves the end
--    ('0' hands it back now); ack purges.  Leases never write a tuple.
--  - errors: SQLSTATEs of the brief, and nothing changes.
--
\set VERBOSITY default
SHOW spindle.enable_worker;

SELECT spindle.create_queue('cq', events_per_spindle => 5);
SELECT count(*) FROM spindle.enqueue_batch('cq',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 12) g));

-- ids are positions: increasing, and as many as events
CREATE TEMP TABLE ids AS
  SELECT msg_id, (payload->>'n')::int AS n FROM spindle_q.cq ORDER BY msg_id;
SELECT count(*) = 12 AND count(DISTINCT msg_id) = 12 AS ids_distinct,
       bool_and(n = rn) AS ids_in_order
  FROM (SELECT msg_id, n, row_number() OVER (ORDER BY msg_id) AS rn FROM ids) s;

-- dequeue: the oldest first, read_count 0
SELECT payload->>'n' AS n, read_count FROM spindle.dequeue('cq', 3);
SELECT count(*) AS left_after_3 FROM spindle_q.cq;

-- rolled back: the same events come back, ahead of newer ones
BEGIN;
SELECT payload->>'n' AS n FROM spindle.dequeue('cq', 2);
ROLLBACK;
BEGIN;
SAVEPOINT s;
SELECT payload->>'n' AS n FROM spindle.dequeue('cq', 2);
ROLLBACK TO SAVEPOINT s;
SELECT payload->>'n' AS n FROM spindle.dequeue('cq', 3);
COMMIT;
SELECT string_agg(payload->>'n', ',' ORDER BY msg_id) AS left FROM spindle_q.cq;

-- a released savepoint keeps its dequeue
BEGIN;
SAVEPOINT s;
SELECT payload->>'n' AS n FROM spindle.dequeue('cq', 1);
RELEASE SAVEPOINT s;
COMMIT;

-- an error inside a PL/pgSQL block returns what the block dequeued
DO $$
BEGIN
  BEGIN
    PERFORM spindle.dequeue('cq', 2);
    RAISE EXCEPTION 'oops';
  EXCEPTION WHEN raise_exception THEN
    NULL;
  END;
END
$$;
SELECT string_agg(payload->>'n', ',' ORDER BY msg_id) AS left FROM spindle_q.cq;

-- read leases: read_count 1, hidden from the next read and from dequeue
SELECT payload->>'n' AS n, read_count FROM spindle.read('cq', 2, '1 hour');
SELECT payload->>'n' AS n, read_count FROM spindle.read('cq', 1, '1 hour');
SELECT payload->>'n' AS n FROM spindle.dequeue('cq', 1);
-- the lease ends now: delivered again, read_count 2
SELECT spindle.set_visibility('cq', (SELECT msg_id FROM ids WHERE n = 8), '0');
SELECT payload->>'n' AS n, read_count FROM spindle.read('cq', 1, '1 hour');
-- set_visibility of an event that is not leased
SELECT spindle.set_visibility('cq', (SELECT msg_id FROM ids WHERE n = 12), '1 minute') AS not_leased;
-- ack: true once, then false
SELECT spindle.ack('cq', (SELECT msg_id FROM ids WHERE n = 8)) AS acked;
SELECT spindle.ack('cq', (SELECT msg_id FROM ids WHERE n = 8)) AS acked_again;
SELECT spindle.ack('cq', (SELECT msg_id FROM ids WHERE n = 1)) AS acked_dequeued;
SELECT spindle.ack('cq', -1) AS acked_nothing;
-- ack of an array returns the ids it purged
SELECT s.n FROM spindle.ack('cq', ARRAY(SELECT msg_id FROM ids WHERE n IN (1, 9, 10))) a
  JOIN ids s ON s.msg_id = a ORDER BY s.n;
-- an ack that rolls back leaves the lease as it was
SELECT payload->>'n' AS n, read_count FROM spindle.read('cq', 1, '1 hour');
BEGIN;
SELECT spindle.ack('cq', (SELECT msg_id FROM ids WHERE n = 12)) AS acked_in_xact;
ROLLBACK;
SELECT count(*) AS still_leased FROM spindle.read('cq', 5, '1 hour');
SELECT string_agg(payload->>'n', ',' ORDER BY msg_id) AS left FROM spindle_q.cq;

-- the books: purged events count, full purged spindles drop
SELECT spindle_no, state, events, purged_events FROM spindle.spindles
 WHERE relation = 'spindle_q.cq'::regclass ORDER BY spindle_no;
SELECT spindle.drop_spindles('spindle_q.cq') AS dropped;

-- delays: not delivered before they are due
SELECT spindle.enqueue('cq', '{"n": "later"}', '1 hour') > 0 AS enqueued;
SELECT count(*) AS delivered FROM spindle.dequeue('cq', 10);
SELECT count(*) AS stored FROM spindle_q.cq WHERE payload->>'n' = 'later';

-- 1 000 reads with leases of a 10-event queue change nothing on disk
SELECT spindle.create_queue('leases');
SELECT count(*) FROM spindle.enqueue_batch('leases',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 10) g));
CREATE TEMP VIEW leases_disk AS
  SELECT string_agg(format('%s:%s:%s:%s', spindle_no, pg_relation_size(segment),
                           events, purged_events), ',' ORDER BY spindle_no) AS disk
    FROM spindle.spindles s JOIN spindle.spindle_catalog c USING (relation, spindle_no)
   WHERE relation = 'spindle_q.leases'::regclass;
CREATE TEMP TABLE before AS SELECT disk FROM leases_disk;
DO $$
DECLARE m record;
BEGIN
  FOR i IN 1..1000 LOOP
    FOR m IN SELECT * FROM spindle.read('leases', 1, '0') LOOP
      NULL;
    END LOOP;
  END LOOP;
END
$$;
SELECT (SELECT disk FROM before) = (SELECT disk FROM leases_disk) AS unchanged;
SELECT max(read_count) > 90 AS read_many_times FROM spindle.read('leases', 10, '1 hour');

-- PREPARE of a transaction that dequeued is refused
SELECT spindle.enqueue('leases', '{"n": "prepared"}') > 0 AS enqueued;
BEGIN;
SELECT payload->>'n' AS n FROM spindle.dequeue('leases', 1);
PREPARE TRANSACTION 'q';
SELECT count(*) AS still_there FROM spindle_q.leases;

-- bad input: clear errors, nothing changes
\set VERBOSITY sqlstate
SELECT * FROM spindle.dequeue(NULL);
SELECT * FROM spindle.dequeue('No-Such');
SELECT * FROM spindle.dequeue('nosuch');
SELECT * FROM spindle.dequeue('cq', 0);
SELECT * FROM spindle.dequeue('cq', -1);
SELECT * FROM spindle.dequeue('cq', NULL);
SELECT * FROM spindle.dequeue('cq', 1, NULL);
SELECT * FROM spindle.dequeue('cq', 1, '-1 s');
SELECT * FROM spindle.read('cq', 1, NULL);
SELECT * FROM spindle.read('cq', 1, '-1 s');
SELECT * FROM spindle.read('cq', 1, '1 s', '-1 s');
SELECT spindle.ack('cq', NULL::bigint);
SELECT spindle.ack('cq', ARRAY[1, NULL]::bigint[]);
SELECT spindle.set_visibility('cq', 1, NULL);
SELECT spindle.set_visibility('cq', 1, '-1 s');
\set VERBOSITY default
SELECT count(*) AS unchanged FROM spindle_q.cq;

-- privileges: SELECT and DELETE on the queue's table
CREATE ROLE regress_q_reader;
CREATE ROLE regress_q_consumer;
GRANT SELECT ON spindle_q.cq TO regress_q_reader, regress_q_consumer;
GRANT DELETE ON spindle_q.cq TO regress_q_consumer;
SET ROLE regress_q_reader;
\set VERBOSITY sqlstate
SELECT * FROM spindle.dequeue('cq');
SELECT * FROM spindle.read('cq', 1, '1 s');
SELECT spindle.ack('cq', 1);
SELECT spindle.set_visibility('cq', 1, '0');
\set VERBOSITY default
SELECT * FROM spindle.dequeue('cq');
SET ROLE regress_q_consumer;
SELECT count(*) >= 0 AS consumer_may FROM spindle.dequeue('cq', 1);
RESET ROLE;

-- review findings: one read() never returns an event twice; read and
-- set_visibility are refused in read-only transactions; a queue created
-- or truncated in the transaction cannot be consumed in it; consumers
-- are refused when row-level security would filter the queue
SELECT spindle.create_queue('once');
SELECT spindle.enqueue('once', '{"n": 1}') > 0 AS enqueued;
SELECT payload->>'n' AS n, read_count FROM spindle.read('once', 5, '0');
BEGIN READ ONLY;
SELECT * FROM spindle.read('once', 1, '1 s');
ROLLBACK;
BEGIN READ ONLY;
SELECT spindle.set_visibility('once', 1, '0');
ROLLBACK;
BEGIN;
TRUNCATE spindle_q.once;
SELECT * FROM spindle.dequeue('once', 10);
ROLLBACK;
BEGIN;
SELECT spindle.create_queue('young');
SELECT * FROM spindle.dequeue('young');
ROLLBACK;
SELECT count(*) AS after_rollbacks FROM spindle.dequeue('once', 10);
CREATE ROLE regress_q_rls;
GRANT SELECT, DELETE ON spindle_q.once TO regress_q_rls;
ALTER TABLE spindle_q.once ENABLE ROW LEVEL SECURITY;
CREATE POLICY none_for_you ON spindle_q.once USING (false);
SET ROLE regress_q_rls;
SELECT * FROM spindle.dequeue('once');
RESET ROLE;
SELECT spindle.drop_queue('once');
DROP ROLE regress_q_rls;

-- spindle.verify(): every spindle table left here is healthy
SELECT c.oid::regclass AS rel, v FROM pg_catalog.pg_class c, spindle.verify(c.oid) v
 WHERE c.relam = (SELECT oid FROM pg_catalog.pg_am WHERE amname = 'spindle')
 ORDER BY 1, 2;
SELECT spindle.drop_queue('cq');
SELECT spindle.drop_queue('leases');
DROP ROLE regress_q_reader, regress_q_consumer;
