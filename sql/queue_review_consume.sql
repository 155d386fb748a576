--
-- Defects of the consume path found by review (issue 18), one block each.
--
SET client_min_messages = warning;
-- found on the path where consumers purge by xmax, and kept on it
-- (spindle.consume_log off: these queues get no consume log; the default,
-- on, is covered by queue_consume and the consume_log tests)
SET spindle.consume_log = off;

-- Findings 3 and 28: read() leases nothing if it fails.  A consumer
-- without INSERT on the dead-letter queue is refused up front, naming it,
-- before anything is leased (even when nothing is due to move).
SELECT spindle.create_queue('rc3_dead');
SELECT spindle.create_queue('rc3', max_reads => 1, dead_letter_queue => 'rc3_dead');
CREATE ROLE rc3_w;
GRANT SELECT, DELETE ON spindle_q.rc3 TO rc3_w;
SELECT spindle.enqueue('rc3', '{"poison": true}') > 0 AS enqueued;
SET ROLE rc3_w;
SELECT read_count, payload FROM spindle.read('rc3', 1, '0');
SELECT payload FROM spindle.dequeue('rc3', 1);
RESET ROLE;
SELECT leased, depth FROM spindle.queues WHERE queue_name = 'rc3';
-- with INSERT on the dead-letter queue the consumer may read
GRANT INSERT ON spindle_q.rc3_dead TO rc3_w;
SET ROLE rc3_w;
SELECT read_count, payload FROM spindle.read('rc3', 1, '1 hour');
RESET ROLE;

-- An error or a cancel after read() examined its batch (here: in the
-- move of a poison event to the dead-letter queue) leaves nothing leased,
-- moves no read count and dead-letters nothing.
SELECT spindle.create_queue('rc28_dead');
SELECT spindle.create_queue('rc28', max_reads => 1, dead_letter_queue => 'rc28_dead');
SELECT spindle.enqueue('rc28', '{"poison": true}') > 0 AS enqueued;
-- the poison event is read once (read_count 1 = max_reads)
SELECT read_count, payload FROM spindle.read('rc28', 1, '0');
SELECT count(*) FROM spindle.enqueue_batch('rc28', ARRAY['{"ok":1}','{"ok":2}','{"ok":3}']::jsonb[]);
CREATE FUNCTION rc28_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'rc28_dead refuses'; END $$;
CREATE TRIGGER refuse BEFORE INSERT ON spindle_q.rc28_dead
  FOR EACH ROW EXECUTE FUNCTION rc28_refuse();
SELECT read_count, payload FROM spindle.read('rc28', 4, '1 hour');
SELECT leased FROM spindle.queues WHERE queue_name = 'rc28';
DROP TRIGGER refuse ON spindle_q.rc28_dead;
CREATE FUNCTION rc28_slow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(10); RETURN NEW; END $$;
CREATE TRIGGER slow BEFORE INSERT ON spindle_q.rc28_dead
  FOR EACH ROW EXECUTE FUNCTION rc28_slow();
SET statement_timeout = '300ms';
SELECT read_count, payload FROM spindle.read('rc28', 4, '1 hour');
RESET statement_timeout;
SELECT leased FROM spindle.queues WHERE queue_name = 'rc28';
DROP TRIGGER slow ON spindle_q.rc28_dead;
-- the healthy events are delivered (their first read), the poison moved
SELECT read_count, payload FROM spindle.read('rc28', 4, '1 hour') ORDER BY msg_id;
SELECT payload FROM spindle_q.rc28_dead ORDER BY msg_id;
SELECT leased FROM spindle.queues WHERE queue_name = 'rc28';
-- a statement that fails after read() returned (here: on its rows) keeps
-- no lease: the events are handed back at once, their reads counted (the
-- statement saw them, and may have failed on them)
SELECT spindle.create_queue('rc28b');
SELECT count(*) FROM spindle.enqueue_batch('rc28b', ARRAY['{"n":1}','{"n":2}']::jsonb[]);
SELECT r.payload, 1 / (r.read_count - 1) FROM spindle.read('rc28b', 2, '1 hour') r;
SELECT leased FROM spindle.queues WHERE queue_name = 'rc28b';
-- but a later statement's failure, or a rollback, leaves the leases
BEGIN;
SELECT read_count, payload FROM spindle.read('rc28b', 1, '1 hour');
SELECT 1 / 0;
ROLLBACK;
BEGIN;
SELECT read_count, payload FROM spindle.read('rc28b', 1, '1 hour');
ROLLBACK;
SELECT leased FROM spindle.queues WHERE queue_name = 'rc28b';

-- Finding 10: one read() never returns the same event twice, also when a
-- move to the dead-letter queue makes it take more.
SELECT spindle.create_queue('rc10_dead');
SELECT spindle.create_queue('rc10', max_reads => 3, dead_letter_queue => 'rc10_dead');
SELECT spindle.enqueue('rc10', '{"n": 1}') > 0 AS enqueued;
SELECT read_count FROM spindle.read('rc10', 1, '0');
SELECT read_count FROM spindle.read('rc10', 1, '0');
SELECT read_count FROM spindle.read('rc10', 1, '0');
SELECT spindle.enqueue('rc10', '{"n": 2}') > 0 AS enqueued;
SELECT read_count, payload FROM spindle.read('rc10', 2, '0');
SELECT payload FROM spindle_q.rc10_dead;

-- Finding 11: a run pending on a transaction does not join an item of
-- another read count (n2, never delivered, would inherit n1's count and be
-- dead-lettered unread).  A prepared DELETE holds both rows.
SELECT spindle.create_queue('rc11_dead');
SELECT spindle.create_queue('rc11', max_reads => 1, dead_letter_queue => 'rc11_dead');
SELECT spindle.enqueue('rc11', '{"n": 1}') > 0 AS enqueued;
SELECT spindle.enqueue('rc11', '{"n": 2}') > 0 AS enqueued;
SELECT read_count, payload FROM spindle.read('rc11', 1, '0');
BEGIN;
DELETE FROM spindle_q.rc11;
PREPARE TRANSACTION 'rc11_delete';
SELECT read_count, payload FROM spindle.read('rc11', 2, '1 min');
ROLLBACK PREPARED 'rc11_delete';
SELECT read_count, payload FROM spindle.read('rc11', 2, '1 min');
SELECT payload FROM spindle_q.rc11_dead ORDER BY msg_id;

-- Finding 22: dequeue honours max_reads: an event read max_reads times
-- goes to the dead-letter queue instead of being delivered again.
SELECT spindle.create_queue('rc22_dead');
SELECT spindle.create_queue('rc22', max_reads => 1, dead_letter_queue => 'rc22_dead');
SELECT count(*) FROM spindle.enqueue_batch('rc22', ARRAY['{"n":1}','{"n":2}']::jsonb[]);
SELECT read_count, payload FROM spindle.read('rc22', 1, '0');
SELECT read_count, payload FROM spindle.dequeue('rc22', 2);
SELECT payload FROM spindle_q.rc22_dead;
SELECT count(*) FROM spindle_q.rc22;
-- without a dead-letter queue it is dropped
SELECT spindle.create_queue('rc22b', max_reads => 1);
SELECT spindle.enqueue('rc22b', '{"n": 1}') > 0 AS enqueued;
SELECT read_count FROM spindle.read('rc22b', 1, '0');
SELECT count(*) FROM spindle.dequeue('rc22b', 1);
SELECT count(*) FROM spindle_q.rc22b;

-- Finding 18: a dequeue that purges nothing assigns no transaction id
-- (an empty poll writes no commit record).
SELECT spindle.create_queue('rc18');
BEGIN;
SELECT count(*) FROM spindle.dequeue('rc18', 10);
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid;
COMMIT;
SELECT spindle.enqueue('rc18', '{}', delay => '1 hour') > 0 AS enqueued;
BEGIN;
SELECT count(*) FROM spindle.dequeue('rc18', 10);
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid;
COMMIT;
SELECT spindle.enqueue('rc18', '{"now": 1}') > 0 AS enqueued;
BEGIN;
SELECT payload FROM spindle.dequeue('rc18', 10);
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid;
COMMIT;

-- Finding 20: a cursor over dequeue fetched in a savepoint that rolls back
-- hands out no more of its rows (their purges were undone).
SELECT spindle.create_queue('rc20');
SELECT count(*) FROM spindle.enqueue_batch('rc20', ARRAY['{"n":1}','{"n":2}','{"n":3}']::jsonb[]);
BEGIN;
DECLARE c CURSOR FOR SELECT payload FROM spindle.dequeue('rc20', 3);
SAVEPOINT s;
FETCH 1 FROM c;
ROLLBACK TO SAVEPOINT s;
FETCH ALL FROM c;
ROLLBACK;
-- released savepoint: the cursor goes on
BEGIN;
DECLARE c CURSOR FOR SELECT payload FROM spindle.dequeue('rc20', 3);
SAVEPOINT s;
FETCH 1 FROM c;
RELEASE SAVEPOINT s;
FETCH ALL FROM c;
COMMIT;
SELECT count(*) FROM spindle.dequeue('rc20', 3);
-- a PL/pgSQL block that catches an error still works
SELECT count(*) FROM spindle.enqueue_batch('rc20', ARRAY['{"n":4}','{"n":5}']::jsonb[]);
DO $$
DECLARE r record;
BEGIN
  BEGIN
    PERFORM spindle.dequeue('rc20', 1);
    RAISE EXCEPTION 'undo';
  EXCEPTION WHEN raise_exception THEN NULL;
  END;
  FOR r IN SELECT payload FROM spindle.dequeue('rc20', 2) LOOP
    RAISE WARNING 'got %', r.payload;
  END LOOP;
END $$;

-- Finding 9: an event locked by a MultiXact (two FOR SHARE lockers, here
-- prepared) does not keep dequeue(q, 1) from the events behind it.
SELECT spindle.create_queue('rc9');
SELECT count(*) FROM spindle.enqueue_batch('rc9', ARRAY['{"i":1}','{"i":2}','{"i":3}']::jsonb[]);
BEGIN;
SELECT 1 AS locked FROM spindle_q.rc9 WHERE payload->>'i' = '1' FOR SHARE;
PREPARE TRANSACTION 'rc9_a';
BEGIN;
SELECT 1 AS locked FROM spindle_q.rc9 WHERE payload->>'i' = '1' FOR SHARE;
PREPARE TRANSACTION 'rc9_b';
SELECT payload FROM spindle.dequeue('rc9', 1);
SELECT payload FROM spindle.read('rc9', 1, '1 min');
SELECT payload FROM spindle.dequeue('rc9', 1);
COMMIT PREPARED 'rc9_a';
SELECT payload FROM spindle.dequeue('rc9', 1);
COMMIT PREPARED 'rc9_b';
SELECT payload FROM spindle.dequeue('rc9', 1);

-- A poison event that the reading statement itself fails on: the failed
-- statement hands its lease back at once, but the read still counts, so
-- the event reaches the dead-letter queue after max_reads deliveries
-- (a second review of these fixes found the count handed back too).
SELECT spindle.create_queue('pz_dead');
SELECT spindle.create_queue('pz', max_reads => 2, dead_letter_queue => 'pz_dead');
SELECT spindle.enqueue('pz', '{"poison": true}') > 0 AS enqueued;
CREATE FUNCTION pz_process(p jsonb) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
	IF p ? 'poison' THEN
		RAISE EXCEPTION 'cannot process %', p;
	END IF;
	RETURN 1;
END $$;
SELECT pz_process(payload) FROM spindle.read('pz', 1, '1 hour');
SELECT pz_process(payload) FROM spindle.read('pz', 1, '1 hour');
SELECT count(*) AS delivered FROM spindle.read('pz', 1, '1 hour');
SELECT payload AS dead_lettered FROM spindle_q.pz_dead;

-- A rule that rewrites the INSERT into a queue's table (the dead-letter
-- queue's here) would lose the events moved there: it cannot be created,
-- and the move goes on.
SELECT spindle.create_queue('pr_dead');
SELECT spindle.create_queue('pr', max_reads => 1, dead_letter_queue => 'pr_dead');
SELECT spindle.enqueue('pr', '{"poison": 2}') > 0 AS enqueued;
SELECT count(*) FROM spindle.read('pr', 1, '0');
CREATE RULE pr_dead_nothing AS ON INSERT TO spindle_q.pr_dead DO INSTEAD NOTHING;
SELECT count(*) FROM spindle.read('pr', 1, '1 hour');
SELECT payload AS dead_lettered FROM spindle_q.pr_dead;

-- cleanup
DROP OWNED BY rc3_w;
DROP ROLE rc3_w;
