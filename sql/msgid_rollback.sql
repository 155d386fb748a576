-- msg_ids taken by a TRUNCATE that rolls back (to a savepoint, or at top
-- level) are never handed out again (review of 16b6cac).
-- Review of 16b6cac: msg_ids are event numbers, "never handed out twice for
-- the table, even when the creation rolls back or the table is truncated".
-- A TRUNCATE that rolls back (here to a savepoint) gives the old storage,
-- whose metapage counter never saw the numbers the truncating transaction
-- took: the next spindle takes them again.
SET client_min_messages = warning;
\set VERBOSITY terse
SELECT spindle.create_queue('rr', 4);
SELECT count(spindle.enqueue('rr', '{"before": 1}')) FROM generate_series(1, 3);
BEGIN;
SAVEPOINT s;
TRUNCATE spindle_q.rr;
SELECT spindle.enqueue('rr', '{"in_truncate": 1}') AS id_a \gset
ROLLBACK TO s;
SELECT count(spindle.enqueue('rr', '{"after": 1}')) FROM generate_series(1, 8);
-- the id enqueue returned inside the rolled-back TRUNCATE names no event now
SELECT count(*) AS events_with_id_a FROM spindle_q.rr WHERE msg_id = :id_a;
COMMIT;
-- and the same after a top-level ROLLBACK of a TRUNCATE
BEGIN;
TRUNCATE spindle_q.rr;
SELECT spindle.enqueue('rr', '{"in_truncate": 2}') AS id_b \gset
ROLLBACK;
SELECT count(spindle.enqueue('rr', '{"after": 2}')) FROM generate_series(1, 8);
SELECT count(*) AS events_with_id_b FROM spindle_q.rr WHERE msg_id = :id_b;
SELECT spindle.drop_queue('rr');
-- a drop + create of the queue in a savepoint that rolls back
SELECT spindle.create_queue('rd', 4);
SELECT count(spindle.enqueue('rd', '{"before": 3}')) FROM generate_series(1, 3);
BEGIN;
SAVEPOINT s;
SELECT spindle.drop_queue('rd');
SELECT spindle.create_queue('rd', 4);
SELECT spindle.enqueue('rd', '{"in_new": 1}') AS id_c \gset
ROLLBACK TO s;
SELECT count(spindle.enqueue('rd', '{"after": 3}')) FROM generate_series(1, 8);
SELECT count(*) AS events_with_id_c FROM spindle_q.rd WHERE msg_id = :id_c;
COMMIT;
SELECT spindle.drop_queue('rd');
-- a second TRUNCATE in a savepoint that rolls back, then the whole
-- transaction (from a second review)
SELECT spindle.create_queue('nt', 4);
SELECT count(spindle.enqueue('nt', '{"before": 1}')) FROM generate_series(1, 3);
BEGIN;
TRUNCATE spindle_q.nt;
SAVEPOINT s;
TRUNCATE spindle_q.nt;
ROLLBACK TO s;
CREATE TEMP TABLE given AS
  SELECT spindle.enqueue('nt', '{"in_truncate": 1}') AS id FROM generate_series(1, 40);
SELECT array_agg(id)::text AS given_ids FROM given \gset
ROLLBACK;
SELECT count(spindle.enqueue('nt', '{"after": 1}')) FROM generate_series(1, 80);
-- no event now bears an id enqueue returned in the rolled-back transaction
SELECT count(*) AS events_with_a_given_id
  FROM spindle_q.nt WHERE msg_id = ANY (:'given_ids'::bigint[]);
SELECT spindle.drop_queue('nt');
