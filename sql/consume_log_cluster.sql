-- VACUUM FULL and CLUSTER of a queue table with a consume log (issue 18,
-- item 9; docs/design.md, "Consume log (built)").  The facade's
-- relation_copy_for_cluster copies no event: the spindles stay as they
-- are, only the slot map is copied (every TID and msg_id keeps its
-- meaning, the consume log and its consumer relation are untouched), and
-- the indexes are rebuilt from the same spindles by index builds, which
-- apply the log (a consumed event is indexed as dead: a unique index over
-- a consumed duplicate builds).  So the consumed events stay hidden to
-- plain SQL and to consumers, whatever the scan, and verify() is clean.
SET spindle.consume_log = on;
SELECT spindle.create_queue('clc', 4);
SELECT count(*) FROM (SELECT spindle.enqueue('clc', jsonb_build_object('n', g))
  FROM generate_series(1, 10) g) e;
SELECT min(msg_id) - 1 AS b FROM spindle_q.clc \gset
SELECT string_agg((msg_id - :b)::text, ' ' ORDER BY msg_id) AS got
  FROM spindle.dequeue('clc', 3);
BEGIN;
SELECT string_agg((msg_id - :b)::text, ' ' ORDER BY msg_id) AS rolled_back
  FROM spindle.dequeue('clc', 2);
ROLLBACK;
SELECT spindle.ack('clc', :b + 5) AS acked;
-- a consumed event's duplicate: the unique index builds beside it
SELECT count(*) FROM (SELECT spindle.enqueue('clc', jsonb_build_object('n', 2))) e;
CREATE UNIQUE INDEX clc_n ON spindle_q.clc ((payload->>'n'));
SELECT string_agg((first - :b) || '+' || len, ' ' ORDER BY first) AS entries
  FROM spindle._run_scan('spindle_q.clc', 2, 0, 1000000000);

VACUUM FULL spindle_q.clc;
SELECT string_agg((msg_id - :b)::text, ' ' ORDER BY msg_id) AS seen FROM spindle_q.clc;
SET enable_seqscan = off;
SELECT string_agg((msg_id - :b)::text, ' ' ORDER BY msg_id) AS by_index
  FROM spindle_q.clc WHERE payload->>'n' IN ('1', '2', '4', '5');
SELECT count(*) AS by_msg_id FROM spindle_q.clc WHERE msg_id = :b + 2;
RESET enable_seqscan;
SELECT string_agg((first - :b) || '+' || len, ' ' ORDER BY first) AS entries
  FROM spindle._run_scan('spindle_q.clc', 2, 0, 1000000000);
SELECT * FROM spindle.verify('spindle_q.clc');

CLUSTER spindle_q.clc USING clc_n;
SELECT string_agg((msg_id - :b)::text, ' ' ORDER BY msg_id) AS seen FROM spindle_q.clc;
SELECT * FROM spindle.verify('spindle_q.clc');
-- consumers go on from the events left, none twice
SELECT string_agg((msg_id - :b)::text, ' ' ORDER BY msg_id) AS got
  FROM spindle.dequeue('clc', 20);
SELECT count(*) AS left FROM spindle_q.clc;
SELECT spindle.drop_queue('clc');
