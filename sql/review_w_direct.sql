--
-- review_w_direct: enqueue's direct placement (queue_insert.c) refuses and
-- fails exactly where the INSERT it stands for would (a hostile review of
-- the path that bypasses the executor):
--
--  - without USAGE on schema spindle_q an INSERT into spindle_q.<name> is
--    refused (42501), and so is enqueue, placed directly or not;
--  - the msg_id default is evaluated by an INSERT (the access method then
--    overwrites its value): one that fails (22012, 42704) makes enqueue
--    fail as the INSERT does;
--  - with those mended, events are placed directly again (a read-only
--    transaction's refusal has no CONTEXT line: no SQL statement ran).
--
\set VERBOSITY default
SET client_min_messages = warning;

SELECT spindle.create_queue('rw_q') IS NOT NULL AS created;
CREATE ROLE regress_rw_producer;
GRANT INSERT ON spindle_q.rw_q TO regress_rw_producer;

-- ===================== USAGE on schema spindle_q =========================
REVOKE USAGE ON SCHEMA spindle_q FROM PUBLIC;
SET ROLE regress_rw_producer;
INSERT INTO spindle_q.rw_q (payload) VALUES ('{"via": "insert"}');
\echo :SQLSTATE
SELECT spindle.enqueue('rw_q', '{"via": "enqueue"}') IS NOT NULL AS enqueued;
\echo :SQLSTATE
SELECT count(*) FROM spindle.enqueue_batch('rw_q', ARRAY['{"via": "batch"}']::jsonb[]);
\echo :SQLSTATE
RESET ROLE;
GRANT USAGE ON SCHEMA spindle_q TO PUBLIC;
SET ROLE regress_rw_producer;
SELECT spindle.enqueue('rw_q', '{"via": "enqueue"}') IS NOT NULL AS enqueued;
RESET ROLE;
SELECT payload FROM spindle_q.rw_q ORDER BY msg_id;

-- ===================== the msg_id default is evaluated ===================
\set VERBOSITY terse
ALTER TABLE spindle_q.rw_q ALTER COLUMN msg_id SET DEFAULT (1 / 0);
INSERT INTO spindle_q.rw_q (payload) VALUES ('{"via": "insert"}');
\echo :SQLSTATE
SELECT spindle.enqueue('rw_q', '{"n": 1}') IS NOT NULL AS enqueued;
\echo :SQLSTATE
SELECT count(*) FROM spindle.enqueue_batch('rw_q', ARRAY['{"n": 2}', '{"n": 3}']::jsonb[]);
\echo :SQLSTATE
-- stable, so evaluated for each row: fails while the setting is missing
ALTER TABLE spindle_q.rw_q ALTER COLUMN msg_id
  SET DEFAULT pg_catalog.current_setting('regress_rw.id')::pg_catalog.int8;
SELECT spindle.enqueue('rw_q', '{"n": 4}') IS NOT NULL AS enqueued;
\echo :SQLSTATE
SET regress_rw.id = '7';
SELECT spindle.enqueue('rw_q', '{"n": 5}') IS NOT NULL AS enqueued;
RESET regress_rw.id;
ALTER TABLE spindle_q.rw_q ALTER COLUMN msg_id SET DEFAULT 0;
\set VERBOSITY default
SELECT payload FROM spindle_q.rw_q ORDER BY msg_id;

-- ===================== the direct path is open again =====================
BEGIN READ ONLY;
SELECT spindle.enqueue('rw_q', '{}');
\echo :SQLSTATE
ROLLBACK;

SELECT * FROM spindle.verify('spindle_q.rw_q');
SELECT spindle.drop_queue('rw_q');
DROP ROLE regress_rw_producer;
