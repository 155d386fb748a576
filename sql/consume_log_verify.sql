-- spindle.verify() checks a queue's consume log itself (docs/design.md,
-- "Consume log (built)"): no entry over msg_ids the queue did not hand
-- out (it would hide an event not yet enqueued), none below the log's
-- floor, every xid FROZEN or normal and not older than the consumer
-- relation's relfrozenxid; a healthy log, frozen or not, passes.  The
-- corruptions are spindle._verify_corrupt's ('log_entry', 'log_floor')
-- and the tree's test writer spindle._run_upsert.
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
-- handed out yet, and one past the last spindle
SELECT spindle._verify_corrupt('spindle_q.clv', 'log_entry', :b + 11, 2);
SELECT spindle._verify_corrupt('spindle_q.clv', 'log_entry', :b + 20, 5);
-- nothing to write over
SELECT spindle._verify_corrupt('spindle_q.clv', 'log_entry', :b + 30, 0);
-- an entry whose xid (3) is older than relfrozenxid, one with xid 1
SELECT spindle._run_upsert('spindle_q.clv', 2, :b + 5, 1, 6,
                           timestamptz '2000-01-01 00:00:00.000003+00');
SELECT spindle._run_upsert('spindle_q.clv', 2, :b + 6, 1, 6,
                           timestamptz '2000-01-01 00:00:00.000001+00');
-- the floor raised over the first entry, which stays
SELECT spindle._verify_corrupt('spindle_q.clv', 'log_floor', :b + 3, 0);
SELECT :b AS b;
SELECT regexp_replace(v, '(xid|relfrozenxid) \d+', '\1 X', 'g') AS problem
  FROM spindle.verify('spindle_q.clv') v ORDER BY 1;
SELECT spindle.drop_queue('clv');
