-- A DROP of a queue table that rolls back leaves its consumers' state as
-- it was: leases stay leased (not delivered again before their time),
-- read counts go on.  Found by hostile review T: the state was reset when
-- the drop happened, so a rolled-back drop cost every lease and read count.
SET client_min_messages = warning;
SELECT spindle.create_queue('dq');
SELECT count(*) FROM spindle.enqueue_batch('dq', ARRAY['{"i": 1}', '{"i": 2}', '{"i": 3}']::jsonb[]);
-- lease the first event for an hour
SELECT payload, read_count FROM spindle.read('dq', 1, '1 hour');

-- DROP TABLE, rolled back
BEGIN;
DROP TABLE spindle_q.dq;
ROLLBACK;
-- drop_queue, rolled back
BEGIN;
SELECT spindle.drop_queue('dq');
ROLLBACK;
-- inside a savepoint rolled back to, in a transaction that commits
BEGIN;
SAVEPOINT s;
DROP TABLE spindle_q.dq;
ROLLBACK TO SAVEPOINT s;
COMMIT;
-- DROP SCHEMA ... CASCADE would take the registry too: DROP OWNED is the
-- other way a queue goes with its owner; rolled back as well
CREATE ROLE dq_owner;
GRANT CREATE ON SCHEMA spindle_q TO dq_owner;
SET ROLE dq_owner;
SELECT spindle.create_queue('dq_owned');
SELECT count(*) FROM spindle.enqueue('dq_owned', '{"o": 1}');
SELECT payload, read_count FROM spindle.read('dq_owned', 1, '1 hour');
RESET ROLE;
BEGIN;
DROP OWNED BY dq_owner;
ROLLBACK;

-- the lease held through all of it: the next read skips the leased event
SELECT payload, read_count FROM spindle.read('dq', 10, '1 hour');
SELECT payload, read_count FROM spindle.read('dq_owned', 10, '1 hour');
-- and read counts go on once a lease ends
SELECT spindle.set_visibility('dq', msg_id, '0') FROM spindle_q.dq WHERE payload->>'i' = '1';
SELECT payload, read_count FROM spindle.read('dq', 10, '1 hour');

-- a drop that commits does reset it: a new queue of the same name starts empty
SELECT spindle.drop_queue('dq');
SELECT spindle.create_queue('dq');
SELECT count(*) FROM spindle.read('dq', 10, '1 hour');
SELECT count(*) FROM spindle.dequeue('dq', 10);
SELECT spindle.drop_queue('dq');
DROP OWNED BY dq_owner;
DROP ROLE dq_owner;
