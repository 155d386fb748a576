-- TTL over annexes (docs/design.md, "Compaction of sparse spindles",
-- section 5 and "Step 4 as built").  A copy moved into an annex keeps its
-- event's append time, visible_at and msg_id, so spindle.purge_expired()
-- purges it as it would have purged the event where it was: from the
-- annex, once expired; never through a copy a relocation entry hides (an
-- event moved twice is purged once, from its live copy); a delayed copy
-- not before it was due for ttl.  Its purge counts in the annex, which then
-- drops by the usual rule.  An annex never given a copy is dropped once a
-- newer annex of its generation is there to take the next copy.
SET client_min_messages = warning;
\set VERBOSITY terse
SELECT spindle.create_queue('tta', 4);
CREATE INDEX tta_msg_id ON spindle_q.tta (msg_id);
-- spindle 1: b (due in 3 s), c (due in a day), x, a1; spindle 2: a2
SELECT count(spindle.enqueue('tta', jsonb_build_object('n', n), d))
  FROM (VALUES ('b', interval '3 s'), ('c', interval '1 day'), ('x', interval '0'),
               ('a1', interval '0'), ('a2', interval '0')) v(n, d);
SELECT msg_id AS b FROM spindle_q.tta WHERE payload->>'n' = 'b' \gset
SELECT msg_id AS c FROM spindle_q.tta WHERE payload->>'n' = 'c' \gset
SELECT msg_id AS a1 FROM spindle_q.tta WHERE payload->>'n' = 'a1' \gset
SELECT msg_id AS a2 FROM spindle_q.tta WHERE payload->>'n' = 'a2' \gset
-- the consumer parks b and c (delayed) on disk and takes x
SELECT payload->>'n' AS dequeued FROM spindle.dequeue('tta', 1);
-- b, c, a1 and a2 moved into an annex of generation 1, which they fill
SELECT spindle._create_annex('spindle_q.tta', 1) > 0 AS annex;
SELECT count(spindle._relocate('spindle_q.tta', m, 1)) AS moved
  FROM unnest(ARRAY[:b, :c, :a1, :a2]::bigint[]) m;
SELECT string_agg(payload->>'n', ' ' ORDER BY msg_id) AS rows_seen
  FROM spindle_q.tta;

-- a plain spindle table: two annexes made, the newer given a copy
CREATE TABLE tte (id int) USING spindle WITH (events_per_spindle = 4);
INSERT INTO tte VALUES (1);
SELECT spindle._create_annex('tte', 1) AS older \gset
SELECT spindle._create_annex('tte', 1) AS newer \gset
SELECT spindle._annex_insert('tte', 1, ROW(2)::tte) IS NOT NULL AS placed;

-- every event is more than 1 s old (ttl 0 purges what is, rounded up to
-- the second, appended before now)
SELECT pg_sleep(1.1);

-- ===================== expired copies are purged from the annex =========
-- a1 and a2, from their annex copies, not through the hidden old ones;
-- b and c are not due yet
SELECT spindle.purge_expired('spindle_q.tta', '0') AS purged;
SELECT string_agg(payload->>'n', ' ' ORDER BY msg_id) AS rows_seen
  FROM spindle_q.tta;
SET enable_seqscan = off;
SELECT string_agg(payload->>'n', ' ' ORDER BY msg_id) AS by_index
  FROM spindle_q.tta WHERE msg_id BETWEEN :b AND :a2;
RESET enable_seqscan;
-- the purge counts in the annex
SELECT generation, events, purged_events FROM spindle.spindles
 WHERE relation = 'spindle_q.tta'::regclass AND state = 'annex';
SELECT * FROM spindle.verify('spindle_q.tta');

-- ===================== moved again, purged once ==========================
-- the annex, full with two live copies parked, is compacted: b and c move
-- on to generation 2
ALTER SYSTEM SET spindle.compaction_threshold = 0.5;
SELECT pg_reload_conf();
SELECT pg_sleep(0.2);
SELECT moved, skipped, emptied FROM spindle._compact('spindle_q.tta');
SELECT string_agg(payload->>'n', ' ' ORDER BY msg_id) AS rows_seen
  FROM spindle_q.tta;
ALTER SYSTEM RESET spindle.compaction_threshold;
SELECT pg_reload_conf();
-- once b is due: purged once, from its copy in generation 2 (its copies in
-- spindle 1 and in the annex of generation 1 are hidden); c, delayed a
-- day, stays though its append time is long past
SELECT pg_sleep(greatest(extract(epoch FROM visible_at - clock_timestamp()), 0) + 0.1)
  FROM spindle_q.tta WHERE msg_id = :b;
SELECT spindle.purge_expired('spindle_q.tta', '0') AS purged;
SELECT spindle.purge_expired('spindle_q.tta', '0') AS purged_again;
SELECT string_agg(payload->>'n', ' ' ORDER BY msg_id) AS rows_seen
  FROM spindle_q.tta;
SELECT msg_id = :c AS c_kept, visible_at > now() + interval '23 hours' AS delayed
  FROM spindle_q.tta;
SELECT generation, events, purged_events FROM spindle.spindles
 WHERE relation = 'spindle_q.tta'::regclass AND state = 'annex'
 ORDER BY generation;

-- ===================== the annex drops ==================================
-- spindle 1 and the annex of generation 1 (every copy purged or hidden);
-- the annex of generation 2 keeps c
SELECT spindle.drop_spindles('spindle_q.tta') AS dropped;
SELECT generation, events, purged_events FROM spindle.spindles
 WHERE relation = 'spindle_q.tta'::regclass AND state = 'annex'
 ORDER BY generation;
SELECT count(*) AS event_spindles_left FROM spindle.spindles
 WHERE relation = 'spindle_q.tta'::regclass AND state <> 'annex'
   AND spindle_no = 1;
SELECT * FROM spindle.verify('spindle_q.tta');
SELECT spindle.drop_queue('tta');

-- ===================== a plain table; an annex never given a copy ======
-- the copy is purged from its annex like any row
SELECT spindle.purge_expired('tte', '0') AS purged;
SELECT count(*) FROM tte;
-- the older annex, never given a copy, goes (the newer takes the next
-- copies); the newer, all its copies dead, too
SELECT spindle.drop_spindles('tte') AS dropped;
SELECT count(*) AS annexes_left FROM spindle.spindle_catalog
 WHERE relation = 'tte'::regclass AND kind = 'annex' AND dropped_at IS NULL;
-- an empty annex that is its generation's newest stays for the next copy
SELECT spindle._create_annex('tte', 1) > 0 AS made;
SELECT spindle.drop_spindles('tte') AS dropped;
SELECT count(*) AS annexes_left FROM spindle.spindle_catalog
 WHERE relation = 'tte'::regclass AND kind = 'annex' AND dropped_at IS NULL;
SELECT spindle._annex_insert('tte', 1, ROW(3)::tte) IS NOT NULL AS placed;
SELECT * FROM spindle.verify('tte');
DROP TABLE tte;
