-- spindle.verify() checks a queue's consume log itself (docs/design.md,
-- "Consume log (built)"): no entry over msg_ids the queue did not hand
-- out (it would hide an event not yet enqueued), none of a transaction
-- that did not commit below the log's floor, every xid FROZEN or normal
-- and not older than the consumer relation's relfrozenxid; a healthy
-- log, frozen or not, passes.  The corruptions are
-- spindle._verify_corrupt's ('log_entry', 'log_floor') and the tree's
-- test writer spindle._run_upsert.
SET spindle.consume_log = on;
SELECT spindle.create_queue('clv', 4);
SELECT count(*) FROM (SELECT spindle.enqueue('clv', jsonb_build_object('n', g))
  FROM generate_series(1, 10) g) e;
SELECT min(msg_id) - 1 AS b FROM spindle_q.clv \gset
SELECT string_agg((msg_id - :b)::text, ' ' ORDER BY msg_id) AS got
  FROM spindle.dequeue('clv', 3);
SELECT count(*) AS problems FROM spindle.verify('spindle_q.clv');
SELECT format('VACUUM (FREEZE) pg_spindle.c%s', 'spindle_q.clv'::regclass::oid) AS vac \gset
:vac;
SELECT count(*) AS problems_after_freeze FROM spindle.verify('spindle_q.clv');

-- an entry over ids 11 and 12, which the third spindle (9 .. 12) has not
-- handed out yet, and one past every id the table handed out
SELECT spindle._verify_corrupt('spindle_q.clv', 'log_entry', :b + 11, 2);
SELECT spindle._verify_corrupt('spindle_q.clv', 'log_entry', :b + 20, 5);
-- nothing to write over
SELECT spindle._verify_corrupt('spindle_q.clv', 'log_entry', :b + 30, 0);
-- an entry whose xid (3) is older than relfrozenxid, one with xid 1
SELECT spindle._run_upsert('spindle_q.clv', 2, :b + 5, 1, 6,
                           timestamptz '2000-01-01 00:00:00.000003+00');
SELECT spindle._run_upsert('spindle_q.clv', 2, :b + 6, 1, 6,
                           timestamptz '2000-01-01 00:00:00.000001+00');
-- an entry of a transaction that rolled back (tree records stay), and
-- the floor raised over it and the first entry: the committed entry below
-- the floor is harmless (a crash between settle's raise of the floor and
-- its cut leaves that), the rolled-back one is not
BEGIN;
SELECT spindle._verify_corrupt('spindle_q.clv', 'log_entry', :b + 4, 1);
ROLLBACK;
SELECT spindle._verify_corrupt('spindle_q.clv', 'log_floor', :b + 5, 0);
SELECT :b AS b;
SELECT regexp_replace(v, '(xid|relfrozenxid) \d+', '\1 X', 'g') AS problem
  FROM spindle.verify('spindle_q.clv') v ORDER BY 1;
SELECT spindle.drop_queue('clv');
