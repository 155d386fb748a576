-- consume_log_dequeue: with spindle.consume_log on, dequeue, ack and the
-- dead-letter move record what they take in the queue's consume log (tree
-- 2 of its consumer relation: one entry per run of ids, kind 6) instead of
-- setting xmax on the events (docs/design.md, "Consume log (built)").
-- Plain SQL shows exactly the events not consumed; an aborted consumer
-- hides nothing; counts, depth and the drop rule see consumed events as
-- purged.
SET client_min_messages = warning;
\set VERBOSITY terse
SET spindle.consume_log = on;
SELECT spindle.create_queue('cld', 4);
SELECT count(*) FROM (SELECT spindle.enqueue('cld', jsonb_build_object('n', g))
  FROM generate_series(1, 10) g) e;

-- ===================== dequeue: one entry, events stay on their pages =====
BEGIN;
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS got
  FROM spindle.dequeue('cld', 6);
-- the same transaction no longer sees them
SELECT count(*) FROM spindle_q.cld;
COMMIT;
-- one entry for the six ids (across two spindles), nothing set on the pages
SELECT first, len, kind FROM spindle._run_scan('spindle_q.cld', 2, 0, 100);
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS left FROM spindle_q.cld;
SELECT count(*) FROM spindle._run_scan('spindle_q.cld', 2, 7, 100);
-- nothing is delivered twice
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS next
  FROM spindle.dequeue('cld', 1);

-- ===================== an aborted dequeue hides nothing ===================
BEGIN;
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS got
  FROM spindle.dequeue('cld', 2);
ROLLBACK;
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS left FROM spindle_q.cld;
-- its entry is replaced by the next consumer's
BEGIN;
SAVEPOINT s;
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS got
  FROM spindle.dequeue('cld', 1);
ROLLBACK TO SAVEPOINT s;
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS again
  FROM spindle.dequeue('cld', 1);
COMMIT;
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS left FROM spindle_q.cld;

-- ===================== DELETE of a consumed event finds nothing ===========
DELETE FROM spindle_q.cld WHERE msg_id = 1;
SELECT count(*) FROM spindle_q.cld;

-- ===================== read, then ack: the ack writes the entry ===========
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS leased
  FROM spindle.read('cld', 2, '1 hour');
SELECT spindle.ack('cld', 8);
SELECT spindle.ack('cld', 8);
-- consumed already: nothing to ack
SELECT spindle.ack('cld', 9);
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS left FROM spindle_q.cld;
SELECT first, len FROM spindle._run_scan('spindle_q.cld', 2, 8, 9);

-- ===================== purged counts, depth, the drop rule ================
SELECT spindle_no, state, events, purged_events FROM spindle.spindles
 WHERE relation = 'spindle_q.cld'::regclass ORDER BY spindle_no;
SELECT depth, leased FROM spindle.queues WHERE queue_name = 'cld';
-- the two full spindles whose events are all consumed go
SELECT spindle.drop_spindles('spindle_q.cld') AS dropped;
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS left FROM spindle_q.cld;
SELECT * FROM spindle.verify('spindle_q.cld');

-- ===================== the dead-letter move writes an entry ===============
SELECT spindle.create_queue('cld_dl', max_reads => 1);
SELECT spindle.enqueue('cld_dl', '{}') AS dl_id \gset
SELECT count(*) FROM spindle.read('cld_dl', 1, '0 s');
SELECT count(*) FROM spindle.read('cld_dl', 1, '0 s');
SELECT count(*) FROM spindle_q.cld_dl;
SELECT len, kind FROM spindle._run_scan('spindle_q.cld_dl', 2, 0, 100);
SELECT depth, dead_lettered_total FROM spindle.queues WHERE queue_name = 'cld_dl';

-- ===================== off: the log is the queue's, not the session's =====
-- a queue that has a log gets entries whatever the setting (review of the
-- writer side, finding 5: isolation consume_log_mixed): a fifth entry
SET spindle.consume_log = off;
SELECT count(*) FROM (SELECT spindle.enqueue('cld', jsonb_build_object('n', g))
  FROM generate_series(11, 12) g) e;
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS got
  FROM spindle.dequeue('cld', 1);
SELECT count(*) FROM spindle._run_scan('spindle_q.cld', 2, 0, 100);
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) AS left FROM spindle_q.cld;
-- a queue without one is consumed by xmax, and gets no log
SELECT spindle.create_queue('cld_x');
SELECT count(*) FROM (SELECT spindle.enqueue('cld_x', jsonb_build_object('n', g))
  FROM generate_series(1, 3) g) e;
SELECT count(*) AS got FROM spindle.dequeue('cld_x', 2);
SELECT count(*) AS entries FROM spindle._run_scan('spindle_q.cld_x', 2, 0, 100);
SELECT count(*) AS left FROM spindle_q.cld_x;
SELECT spindle.drop_queue('cld_x');
SELECT spindle.drop_queue('cld_dl');
SELECT spindle.drop_queue('cld');

-- ===================== VACUUM: committed entries frozen, aborted ones go ==
-- (an entry's xid must stay in clog while it exists: FROZEN is committed
-- for everyone; relfrozenxid stays at or below the entries left)
SET spindle.consume_log = on;
SELECT spindle.create_queue('clf');
SELECT count(*) FROM (SELECT spindle.enqueue('clf', jsonb_build_object('n', g))
  FROM generate_series(1, 6) g) e;
SELECT min(msg_id) - 1 AS b FROM spindle_q.clf \gset
SELECT string_agg((msg_id - :b)::text, ' ' ORDER BY msg_id) AS got
  FROM spindle.dequeue('clf', 2);
BEGIN;
SELECT string_agg((msg_id - :b)::text, ' ' ORDER BY msg_id) AS rolled_back
  FROM spindle.dequeue('clf', 2);
ROLLBACK;
SELECT first - :b AS first, len,
       due = timestamptz '2000-01-01 00:00:00.000002+00' AS frozen
  FROM spindle._run_scan('spindle_q.clf', 2, 0, 1000000);
SELECT format('VACUUM (FREEZE) pg_spindle.c%s', 'spindle_q.clf'::regclass::oid) AS vac \gset
:vac;
SELECT first - :b AS first, len,
       due = timestamptz '2000-01-01 00:00:00.000002+00' AS frozen
  FROM spindle._run_scan('spindle_q.clf', 2, 0, 1000000);
SELECT string_agg((msg_id - :b)::text, ' ' ORDER BY msg_id) AS left FROM spindle_q.clf;
DELETE FROM spindle_q.clf WHERE msg_id = :b + 1;
BEGIN;
SELECT string_agg((msg_id - :b)::text, ' ' ORDER BY msg_id) AS got
  FROM spindle.dequeue('clf', 2);
SELECT pg_current_xact_id()::text AS entry_xid \gset
COMMIT;
-- a VACUUM that does not freeze it keeps relfrozenxid at the entry's xid
SELECT pg_current_xact_id() IS NOT NULL AS burnt;
SELECT pg_current_xact_id() IS NOT NULL AS burnt;
SET vacuum_freeze_min_age = 1000;
SELECT format('VACUUM pg_spindle.c%s', 'spindle_q.clf'::regclass::oid) AS vac \gset
:vac;
RESET vacuum_freeze_min_age;
SELECT c.relfrozenxid::text = :'entry_xid' AS held_at_entry
  FROM pg_class c
 WHERE c.oid = ('pg_spindle.c' || 'spindle_q.clf'::regclass::oid)::regclass;
-- VACUUM FULL copies the relation and gives the copy relfrozenxid at its
-- freeze limit: it freezes the entries committed before that limit first
-- (review of the writer side, finding 3: the entry kept its xid, and
-- relfrozenxid passed it)
SET vacuum_freeze_min_age = 0;
SELECT format('VACUUM FULL pg_spindle.c%s', 'spindle_q.clf'::regclass::oid) AS vac \gset
:vac;
RESET vacuum_freeze_min_age;
SELECT first - :b AS first, len,
       due = timestamptz '2000-01-01 00:00:00.000002+00' AS frozen_by_full
  FROM spindle._run_scan('spindle_q.clf', 2, 0, 1000000);
SELECT first - :b AS first, len,
       due = timestamptz '2000-01-01 00:00:00.000002+00' AS frozen
  FROM spindle._run_scan('spindle_q.clf', 2, 0, 1000000);
SELECT string_agg((msg_id - :b)::text, ' ' ORDER BY msg_id) AS got
  FROM spindle.dequeue('clf', 10);
SELECT spindle.drop_queue('clf');

-- ===================== TTL purges only what no consumer took ==============
SET spindle.consume_log = on;
SELECT spindle.create_queue('clt', 4);
SELECT count(*) FROM (SELECT spindle.enqueue('clt', jsonb_build_object('n', g))
  FROM generate_series(1, 4) g) e;
SELECT count(*) AS got FROM spindle.dequeue('clt', 2);
SELECT pg_sleep(2.2);
SELECT spindle.purge_expired('spindle_q.clt', '1 second') AS purged;
SELECT count(*) FROM spindle_q.clt;
SELECT events, purged_events FROM spindle.spindles
 WHERE relation = 'spindle_q.clt'::regclass AND events > 0;
SELECT spindle.drop_queue('clt');
