-- consume_log: events a consume log entry (tree 2 of the queue's consumer
-- relation; docs/design.md, "Consume log (built)") consumed
-- are hidden from every reader of the queue table, under MVCC: sequential,
-- index, index-only, bitmap and TID scans, count(*), ANALYZE, unique
-- index builds, DML.  Entries are written by the test-only
-- spindle._consume_log_write() in the current transaction and command.
SET client_min_messages = warning;
\set VERBOSITY terse
SELECT spindle.create_queue('cl', 4);
SELECT count(*) FROM (SELECT spindle.enqueue('cl', jsonb_build_object('n', g))
  FROM generate_series(1, 10) g) e;
CREATE INDEX cl_msg_id ON spindle_q.cl (msg_id);
SELECT ctid AS tid3 FROM spindle_q.cl WHERE msg_id = 3 \gset
CREATE TABLE plain (a int) USING spindle;
INSERT INTO plain SELECT g FROM generate_series(1, 5) g;

-- ===================== bad calls =====================================
CREATE ROLE cl_user;
GRANT USAGE ON SCHEMA spindle TO cl_user;
SET ROLE cl_user;
SELECT spindle._consume_log_write('spindle_q.cl', 1);
RESET ROLE;
SELECT spindle._consume_log_write('plain', 1);
SELECT spindle._consume_log_write('spindle_q.cl', 11);
SELECT spindle._consume_log_write('spindle_q.cl', 0);
-- nothing was written: no tree 2 yet
SELECT count(*) FROM spindle._run_scan('spindle_q.cl', 2, 0, 100);

-- ===================== committed entries hide from every reader ======
BEGIN;
SELECT spindle._consume_log_write('spindle_q.cl', 2, 3);
COMMIT;
-- one entry: xid and command id of the writer, kind 6 (CONSUMED)
SELECT first, len, kind, read_count FROM spindle._run_scan('spindle_q.cl', 2, 0, 100);
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS seq FROM spindle_q.cl;
SELECT count(*) FROM spindle_q.cl;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT * FROM spindle_q.cl WHERE msg_id BETWEEN 1 AND 6;
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS idx
  FROM spindle_q.cl WHERE msg_id BETWEEN 1 AND 6;
EXPLAIN (COSTS OFF) SELECT msg_id FROM spindle_q.cl WHERE msg_id BETWEEN 1 AND 6;
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS idx_only
  FROM (SELECT msg_id FROM spindle_q.cl WHERE msg_id BETWEEN 1 AND 6) s;
SET enable_indexscan = off;
SET enable_indexonlyscan = off;
SET enable_bitmapscan = on;
EXPLAIN (COSTS OFF) SELECT * FROM spindle_q.cl WHERE msg_id BETWEEN 1 AND 6;
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS bitmap
  FROM spindle_q.cl WHERE msg_id BETWEEN 1 AND 6;
RESET enable_seqscan;
RESET enable_bitmapscan;
RESET enable_indexscan;
RESET enable_indexonlyscan;
-- parallel workers apply the rule too, own transaction's entries included
SET force_parallel_mode = on;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
EXPLAIN (COSTS OFF) SELECT count(*) FROM spindle_q.cl;
SELECT count(*) AS parallel FROM spindle_q.cl;
BEGIN;
SELECT spindle._consume_log_write('spindle_q.cl', 5);
SELECT count(*) AS parallel_own FROM spindle_q.cl;
ROLLBACK;
RESET force_parallel_mode;
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size;
-- TID scan of a consumed event
SELECT count(*) AS tid_scan FROM spindle_q.cl WHERE ctid = :'tid3';
-- DML does not meet it
DELETE FROM spindle_q.cl WHERE msg_id = 3;
UPDATE spindle_q.cl SET payload = '{}' WHERE ctid = :'tid3';
SELECT msg_id FROM spindle_q.cl WHERE msg_id = 3 FOR UPDATE;
-- nor does a second consumer
SELECT spindle._consume_log_write('spindle_q.cl', 3);
-- ANALYZE counts them dead
ANALYZE spindle_q.cl;
SELECT reltuples FROM pg_class WHERE oid = 'spindle_q.cl'::regclass;
-- a unique index build leaves them out of its checks
BEGIN;
SELECT spindle._consume_log_write('spindle_q.cl', 6);
COMMIT;
UPDATE spindle_q.cl SET payload = '{"n": 6}' WHERE msg_id = 7;
CREATE UNIQUE INDEX cl_payload ON spindle_q.cl (payload);
REINDEX INDEX spindle_q.cl_payload;
-- and a new event with a consumed one's key is no conflict
INSERT INTO spindle_q.cl (payload) VALUES ('{"n": 2}');
DROP INDEX spindle_q.cl_payload;
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS seq FROM spindle_q.cl;

-- ===================== own transaction: from the next command on =====
BEGIN;
-- the same command still sees the event, the next one does not
SELECT spindle._consume_log_write('spindle_q.cl', 1) AS w,
       (SELECT count(*) FROM spindle_q.cl WHERE msg_id = 1) AS same_command;
SELECT count(*) AS next_command FROM spindle_q.cl WHERE msg_id = 1;
SET LOCAL enable_seqscan = off;
SELECT count(*) AS next_command_idx FROM spindle_q.cl WHERE msg_id = 1;
ROLLBACK;
-- rolled back: visible again, and may be consumed again
SELECT count(*) AS after_rollback FROM spindle_q.cl WHERE msg_id = 1;
-- ROLLBACK TO SAVEPOINT un-hides what the subtransaction consumed
BEGIN;
SAVEPOINT a;
SELECT spindle._consume_log_write('spindle_q.cl', 8);
SELECT count(*) AS in_subxact FROM spindle_q.cl WHERE msg_id = 8;
ROLLBACK TO SAVEPOINT a;
SELECT count(*) AS after_rollback_to FROM spindle_q.cl WHERE msg_id = 8;
SELECT spindle._consume_log_write('spindle_q.cl', 9);
COMMIT;
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS seq FROM spindle_q.cl;
-- adjacent ids of one command merge (2 3 4 above); of two commands they do
-- not; the aborted subtransaction's entry for 8 stays and hides nothing
BEGIN;
SELECT spindle._consume_log_write('spindle_q.cl', 10);
SELECT spindle._consume_log_write('spindle_q.cl', 11);
SELECT spindle._consume_log_write('spindle_q.cl', 1, 1);
COMMIT;
SELECT first, len FROM spindle._run_scan('spindle_q.cl', 2, 0, 100);
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS seq FROM spindle_q.cl;
SELECT count(*) FROM spindle_q.cl;

-- consumed by the command that deletes it: nothing left to delete
BEGIN;
DELETE FROM spindle_q.cl
 WHERE msg_id = 12 AND spindle._consume_log_write('spindle_q.cl', msg_id) = 1
 RETURNING msg_id;
SELECT count(*) AS after_delete FROM spindle_q.cl WHERE msg_id = 12;
ROLLBACK;

-- a row this transaction locked, it may consume
BEGIN;
SELECT msg_id FROM spindle_q.cl WHERE msg_id = 12 FOR UPDATE;
SELECT spindle._consume_log_write('spindle_q.cl', 12);
SELECT count(*) AS locked_then_consumed FROM spindle_q.cl WHERE msg_id = 12;
ROLLBACK;

-- ===================== many entries over many leaves ==================
-- scans read each spindle's entries by one walk over the tree's leaves
SET spindle.test_tree_fanout = 4;
SELECT spindle.create_queue('cl2', 16);
SELECT count(*) FROM (SELECT spindle.enqueue('cl2', jsonb_build_object('n', g))
  FROM generate_series(1, 200) g) e;
SELECT min(msg_id) - 1 AS b FROM spindle_q.cl2 \gset
DO $$
DECLARE b bigint := (SELECT min(msg_id) - 1 FROM spindle_q.cl2);
BEGIN
  FOR i IN 1..100 LOOP
    -- odd ids: no two entries are adjacent, none merges
    PERFORM spindle._consume_log_write('spindle_q.cl2', b + 2 * i - 1);
  END LOOP;
END $$;
SELECT height > 1 AS several_levels, runs, problems FROM spindle._run_verify('spindle_q.cl2', 2);
SELECT count(*), bool_and((msg_id - :b) % 2 = 0) AS only_even FROM spindle_q.cl2;
CREATE INDEX cl2_msg_id ON spindle_q.cl2 (msg_id);
SET enable_seqscan = off;
SELECT count(*) AS idx FROM spindle_q.cl2 WHERE msg_id BETWEEN :b + 50 AND :b + 149;
RESET enable_seqscan;
RESET spindle.test_tree_fanout;
SELECT spindle.drop_queue('cl2');

-- ===================== no merge across leaves =========================
-- an id joins the entry before it only within that entry's leaf: across
-- leaves the upsert is a cut then an insert, and between the two the ids
-- already consumed would be in no entry (a DELETE would not wait)
SET spindle.test_tree_fanout = 4;
SELECT spindle.create_queue('cl3', 16);
SELECT count(*) FROM (SELECT spindle.enqueue('cl3', jsonb_build_object('n', g))
  FROM generate_series(1, 100) g) e;
SELECT min(msg_id) - 1 AS b FROM spindle_q.cl3 \gset
SELECT spindle._consume_log_write('spindle_q.cl3', :b + 10 * g) FROM generate_series(2, 8) g;
SELECT spindle._consume_log_write('spindle_q.cl3', :b + 41, 9);
SELECT first - :b AS first, len FROM spindle._run_scan('spindle_q.cl3', 2, :b + 40, :b + 51)
  WHERE first BETWEEN :b + 41 AND :b + 49 ORDER BY first;
SELECT problems FROM spindle._run_verify('spindle_q.cl3', 2);
SELECT count(*) AS left_of_41_to_49 FROM spindle_q.cl3 WHERE msg_id BETWEEN :b + 41 AND :b + 49;
RESET spindle.test_tree_fanout;
SELECT spindle.drop_queue('cl3');

-- ===================== other spindle tables are unaffected ===========
SELECT count(*) FROM plain;
DROP TABLE plain;
REVOKE USAGE ON SCHEMA spindle FROM cl_user;
DROP ROLE cl_user;
SELECT spindle.drop_queue('cl');
