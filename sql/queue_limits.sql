-- Length limits (issue 19): create_queue(..., max_depth, overflow).  At
-- max_depth deliverable plus delayed events (leased ones are not counted)
-- enqueue and enqueue_batch fail with 54000 ('reject'), drop the oldest
-- deliverable events ('drop_oldest') or move them to the dead-letter queue
-- ('dead_letter'), in the producer's transaction.
SET client_min_messages = warning;
\set VERBOSITY default

-- ---- bad input: a clear error (22023), nothing created ----
SELECT spindle.create_queue('lim_bad', max_depth => 0);
\echo :SQLSTATE
SELECT spindle.create_queue('lim_bad', max_depth => -5);
\echo :SQLSTATE
SELECT spindle.create_queue('lim_bad', max_depth => 3, overflow => 'drop_newest');
\echo :SQLSTATE
SELECT spindle.create_queue('lim_bad', max_depth => 3, overflow => NULL);
\echo :SQLSTATE
SELECT spindle.create_queue('lim_bad', overflow => 'drop_oldest');
\echo :SQLSTATE
SELECT spindle.create_queue('lim_bad', max_depth => 3, overflow => 'dead_letter');
\echo :SQLSTATE
SELECT spindle.create_queue('lim_bad', max_depth => 3, overflow => 'dead_letter',
                            dead_letter_queue => 'no_such_queue');
\echo :SQLSTATE
SELECT count(*) AS registered FROM spindle.queue_catalog WHERE queue_name = 'lim_bad';
SELECT to_regclass('spindle_q.lim_bad') AS lim_bad_table;
-- the registry refuses what create_queue refuses, whoever writes it
\set VERBOSITY terse
INSERT INTO spindle.queue_catalog (queue_name, relation, max_depth)
  VALUES ('lim_bad', 'spindle.queue_catalog', 0);
\echo :SQLSTATE
INSERT INTO spindle.queue_catalog (queue_name, relation, overflow)
  VALUES ('lim_bad', 'spindle.queue_catalog', 'dead_letter');
\echo :SQLSTATE
\set VERBOSITY default

-- ---- reject ----
SELECT spindle.create_queue('lim_r', max_depth => 3) IS NOT NULL AS created;
SELECT count(*) FROM spindle.enqueue_batch('lim_r', ARRAY['1', '2', '3']::jsonb[]);
SELECT spindle.enqueue('lim_r', '4');
\echo :SQLSTATE
SELECT spindle.enqueue_batch('lim_r', ARRAY['4', '5']::jsonb[]);
\echo :SQLSTATE
-- nothing changed
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.lim_r;
-- one consumed: room for one, and only one
SELECT payload FROM spindle.dequeue('lim_r', 1);
SELECT spindle.enqueue('lim_r', '4') IS NOT NULL AS admitted;
SELECT spindle.enqueue('lim_r', '5');
\echo :SQLSTATE
-- a batch larger than max_depth never fits
SELECT count(*) FROM spindle.dequeue('lim_r', 10);
SELECT spindle.enqueue_batch('lim_r', ARRAY['"a"', '"b"', '"c"', '"d"']::jsonb[]);
\echo :SQLSTATE
SELECT count(*) AS events FROM spindle_q.lim_r;
-- rolled-back producers give their room back
BEGIN;
SELECT count(*) FROM spindle.enqueue_batch('lim_r', ARRAY['"a"', '"b"', '"c"']::jsonb[]);
ROLLBACK;
SELECT count(*) FROM spindle.enqueue_batch('lim_r', ARRAY['"a"', '"b"', '"c"']::jsonb[]);
SELECT count(*) FROM spindle.dequeue('lim_r', 10);
-- an error caught by a savepoint leaves the transaction usable
BEGIN;
SELECT count(*) FROM spindle.enqueue_batch('lim_r', ARRAY['"a"', '"b"', '"c"']::jsonb[]);
SAVEPOINT s;
SELECT spindle.enqueue('lim_r', 'null');
ROLLBACK TO SAVEPOINT s;
SELECT count(*) AS events FROM spindle_q.lim_r;
COMMIT;
SELECT count(*) FROM spindle.dequeue('lim_r', 10);
-- plain INSERT is not limited (docs/queues.md), but it is counted
INSERT INTO spindle_q.lim_r (payload) SELECT to_jsonb(g) FROM generate_series(1, 4) g;
SELECT count(*) AS events FROM spindle_q.lim_r;
SELECT spindle.enqueue('lim_r', '5');
\echo :SQLSTATE
SELECT count(*) FROM spindle.dequeue('lim_r', 10);
-- ... also when the queue was far from full at the last enqueue
SELECT spindle.enqueue('lim_r', '1') IS NOT NULL AS admitted;
COPY spindle_q.lim_r (payload) FROM stdin;
2
3
\.
SELECT spindle.enqueue('lim_r', '4');
\echo :SQLSTATE
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle.dequeue('lim_r', 10);

-- ---- a delayed event is counted, a leased one is not ----
SELECT spindle.create_queue('lim_dl', max_depth => 2) IS NOT NULL AS created;
SELECT spindle.enqueue('lim_dl', '"later"', delay => '1 hour') IS NOT NULL AS delayed;
SELECT spindle.enqueue('lim_dl', '"now"') IS NOT NULL AS admitted;
SELECT spindle.enqueue('lim_dl', '"third"');
\echo :SQLSTATE
SELECT payload FROM spindle.read('lim_dl', 1, '1 hour');
SELECT spindle.enqueue('lim_dl', '"third"') IS NOT NULL AS admitted_past_lease;
SELECT spindle.enqueue('lim_dl', '"fourth"');
\echo :SQLSTATE
SELECT depth, leased, delayed, max_depth, overflow
  FROM spindle.queues WHERE queue_name = 'lim_dl';
-- a lease handed back counts again (and may take the queue past max_depth)
SELECT spindle.set_visibility('lim_dl', msg_id, '0')
  FROM spindle_q.lim_dl WHERE payload = '"now"';
SELECT spindle.enqueue('lim_dl', '"fourth"');
\echo :SQLSTATE
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle.dequeue('lim_dl', 2);
SELECT spindle.enqueue('lim_dl', '"fourth"') IS NOT NULL AS admitted;
SELECT spindle.enqueue('lim_dl', '"fifth"');
\echo :SQLSTATE

-- ---- drop_oldest ----
SELECT spindle.create_queue('lim_d', max_depth => 3, overflow => 'drop_oldest')
  IS NOT NULL AS created;
SELECT count(*) FROM spindle.enqueue_batch('lim_d', ARRAY['1', '2', '3']::jsonb[]);
SELECT spindle.enqueue('lim_d', '4') IS NOT NULL AS admitted;
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.lim_d;
SELECT count(*) FROM spindle.enqueue_batch('lim_d', ARRAY['5', '6']::jsonb[]);
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.lim_d;
-- a rolled-back producer's drop is undone
BEGIN;
SELECT spindle.enqueue('lim_d', '7') IS NOT NULL AS admitted;
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.lim_d;
ROLLBACK;
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.lim_d;
-- ROLLBACK TO SAVEPOINT after each step
BEGIN;
SAVEPOINT a;
SELECT spindle.enqueue('lim_d', '7') IS NOT NULL AS admitted;
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.lim_d;
ROLLBACK TO SAVEPOINT a;
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.lim_d;
SAVEPOINT b;
SELECT count(*) FROM spindle.enqueue_batch('lim_d', ARRAY['7', '8']::jsonb[]);
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.lim_d;
ROLLBACK TO SAVEPOINT b;
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.lim_d;
SAVEPOINT c;
SELECT spindle.enqueue('lim_d', '7') IS NOT NULL AS admitted;
RELEASE SAVEPOINT c;
SAVEPOINT d;
-- its own uncommitted events cannot be dropped: the oldest committed go
SELECT spindle.enqueue('lim_d', '8') IS NOT NULL AS admitted;
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.lim_d;
ROLLBACK TO SAVEPOINT d;
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.lim_d;
COMMIT;
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.lim_d;
-- consumers get what was not dropped, in order, once
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle.dequeue('lim_d', 10);
-- nothing deliverable to drop (delayed, or the producer's own): 54000
SELECT count(*) FROM spindle.enqueue_batch('lim_d', ARRAY['1', '2', '3']::jsonb[],
                                           delay => '1 hour');
SELECT spindle.enqueue('lim_d', '4');
\echo :SQLSTATE
SELECT count(*) AS events FROM spindle_q.lim_d;
TRUNCATE spindle_q.lim_d;
BEGIN;
SELECT count(*) FROM spindle.enqueue_batch('lim_d', ARRAY['1', '2', '3']::jsonb[]);
SELECT spindle.enqueue('lim_d', '4');
\echo :SQLSTATE
ROLLBACK;
-- a producer with only INSERT applies the owner's policy
CREATE ROLE regress_lim_producer;
GRANT INSERT ON spindle_q.lim_d TO regress_lim_producer;
SELECT count(*) FROM spindle.enqueue_batch('lim_d', ARRAY['1', '2', '3']::jsonb[]);
SET ROLE regress_lim_producer;
SELECT spindle.enqueue('lim_d', '4') IS NOT NULL AS admitted;
SELECT count(*) FROM spindle.dequeue('lim_d', 1);
\echo :SQLSTATE
RESET ROLE;
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.lim_d;

-- ---- dead_letter ----
SELECT spindle.create_queue('lim_dead') IS NOT NULL AS created;
SELECT spindle.create_queue('lim_x', max_depth => 2, overflow => 'dead_letter',
                            dead_letter_queue => 'lim_dead') IS NOT NULL AS created;
SELECT count(*) FROM spindle.enqueue_batch('lim_x', ARRAY['1', '2', '3', '4']::jsonb[]);
\echo :SQLSTATE
SELECT count(*) FROM spindle.enqueue_batch('lim_x', ARRAY['1', '2']::jsonb[]);
SELECT spindle.enqueue('lim_x', '3') IS NOT NULL AS admitted;
SELECT count(*) FROM spindle.enqueue_batch('lim_x', ARRAY['4', '5']::jsonb[]);
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.lim_x;
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.lim_dead;
BEGIN;
SELECT spindle.enqueue('lim_x', '6') IS NOT NULL AS admitted;
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.lim_dead;
ROLLBACK;
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.lim_x;
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.lim_dead;
-- ... and so does ROLLBACK TO SAVEPOINT, after which a move is made again
BEGIN;
SAVEPOINT s;
SELECT spindle.enqueue('lim_x', '6') IS NOT NULL AS admitted;
ROLLBACK TO SAVEPOINT s;
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.lim_x;
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.lim_dead;
SELECT spindle.enqueue('lim_x', '7') IS NOT NULL AS admitted;
COMMIT;
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.lim_x;
SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.lim_dead;
SELECT queue_name, depth, dead_lettered_total, max_depth, overflow
  FROM spindle.queues WHERE queue_name IN ('lim_x', 'lim_dead') ORDER BY 1;
-- dead_letter_queue without max_reads is allowed with overflow 'dead_letter'
SELECT max_reads, dead_letter_queue, max_depth, overflow
  FROM spindle.queue_catalog WHERE queue_name = 'lim_x';

-- ---- the view, and drop_queue ----
SELECT queue_name, max_depth, overflow FROM spindle.queues
 WHERE queue_name LIKE 'lim%' ORDER BY 1;
SELECT spindle.drop_queue('lim_dead');
\echo :SQLSTATE
SELECT spindle.drop_queue('lim_x');
SELECT spindle.drop_queue('lim_dead');
SELECT spindle.drop_queue('lim_d');
SELECT spindle.drop_queue('lim_dl');
-- a queue made again under a name starts with the new limit
SELECT spindle.drop_queue('lim_r');
SELECT spindle.create_queue('lim_r', max_depth => 1) IS NOT NULL AS created;
SELECT spindle.enqueue('lim_r', '1') IS NOT NULL AS admitted;
SELECT spindle.enqueue('lim_r', '2');
\echo :SQLSTATE
SELECT spindle.drop_queue('lim_r');
SELECT count(*) AS registered FROM spindle.queue_catalog WHERE queue_name LIKE 'lim%';
SELECT count(*) AS views FROM spindle.queues WHERE queue_name LIKE 'lim%';
DROP ROLE regress_lim_producer;
