-- compaction: the worker's relocator, run by the test-only
-- spindle._compact(rel) (docs/design.md, "Compaction of sparse spindles",
-- "Step 4 as built").  Full spindles of a queue table whose live events
-- are few (spindle.compaction_threshold of their capacity) and all parked
-- on disk have those events moved into an annex; the spindles are then
-- dropped by the usual rule.  Plain SQL sees the same events before and
-- after; a spindle with a live event not parked stays; threshold 0 does
-- nothing; only superusers call the function; an index expression that
-- fails for one event skips that event only; no trigger fires.
SET client_min_messages = warning;
\set VERBOSITY terse
SELECT spindle.create_queue('cq', 10);
-- spindle 1: ids 1..10, 3 and 7 delayed a day; spindle 2: 11..20, 13 and
-- 17 delayed; spindle 3: 21..30, none delayed; spindle 4: 31..35
SELECT count(spindle.enqueue('cq', jsonb_build_object('n', g),
         CASE WHEN g % 10 IN (3, 7) AND g <= 20 THEN interval '1 day'
              ELSE interval '0' END))
  FROM generate_series(1, 35) g;
-- the consumer takes the 16 due events of spindles 1 and 2 and parks the
-- four delayed ones on disk (tree 0); spindle 3 is not reached
SELECT count(*) FROM spindle.dequeue('cq', 16);
-- msg_ids are shown from 1 on: the first is what the sequence gave
SELECT min(msg_id) - 2 AS first FROM spindle_q.cq \gset
-- spindle 3 loses all but 23 and 27 to plain DELETE: live, never parked
DELETE FROM spindle_q.cq
 WHERE (payload->>'n')::int BETWEEN 21 AND 30
   AND (payload->>'n')::int NOT IN (23, 27);
-- an index whose expression fails for event 7 once cq_fail names it
CREATE TABLE cq_fail (n int);
CREATE FUNCTION cq_check(p jsonb) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM public.cq_fail WHERE n = (p->>'n')::int) THEN
    RAISE EXCEPTION 'cq_check refuses %', p->>'n';
  END IF;
  RETURN (p->>'n')::int;
END
$$;
CREATE INDEX cq_check_idx ON spindle_q.cq (cq_check(payload));
CREATE INDEX cq_msg_id ON spindle_q.cq (msg_id);
-- a trigger that would refuse any insert or update (queue tables take no
-- DELETE trigger)
CREATE FUNCTION cq_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'trigger fired on %', TG_OP;
END
$$;
CREATE TRIGGER cq_refuse BEFORE INSERT OR UPDATE ON spindle_q.cq
  FOR EACH ROW EXECUTE FUNCTION cq_refuse();
CREATE TRIGGER cq_refuse_stmt BEFORE INSERT OR UPDATE ON spindle_q.cq
  FOR EACH STATEMENT EXECUTE FUNCTION cq_refuse();
-- fill times recorded (nothing drops: every spindle has live events)
SELECT spindle.drop_spindles('spindle_q.cq');
SELECT string_agg((msg_id - :first + 1) || '=' || (payload->>'n'), ' ' ORDER BY msg_id) AS before
  FROM spindle_q.cq \gset
SELECT :'before' AS rows_seen;
CREATE TEMP TABLE cq_before AS SELECT * FROM spindle_q.cq;
SELECT spindle_no, state, capacity, events, purged_events, generation
  FROM spindle.spindles WHERE relation = 'spindle_q.cq'::regclass
 ORDER BY spindle_no;

-- ===================== threshold 0 (compaction off): nothing ============
SHOW spindle.compaction_threshold;
ALTER SYSTEM SET spindle.compaction_threshold = 0;
SELECT pg_reload_conf();
SELECT pg_sleep(0.2);
SHOW spindle.compaction_threshold;
SELECT * FROM spindle._compact('spindle_q.cq');
SELECT count(*) AS annexes FROM spindle.spindle_catalog
 WHERE relation = 'spindle_q.cq'::regclass AND kind = 'annex';

-- ===================== only superusers ===================================
-- (not even the table's owner; the moves run as the owner, who may read
-- cq_fail for the index expression)
CREATE ROLE cq_user;
GRANT USAGE ON SCHEMA spindle TO cq_user;
GRANT SELECT ON cq_fail TO cq_user;
ALTER TABLE spindle_q.cq OWNER TO cq_user;
SET ROLE cq_user;
SELECT * FROM spindle._compact('spindle_q.cq');
RESET ROLE;

-- ===================== a pass at a quarter ===============================
ALTER SYSTEM SET spindle.compaction_threshold = 0.25;
SELECT pg_reload_conf();
SELECT pg_sleep(0.2);
SHOW spindle.compaction_threshold;
INSERT INTO cq_fail VALUES (7);
-- spindles 1 and 2 (2 live of 10, parked) are candidates, spindle 3 (2
-- live, not parked) is not; event 7's copy fails (its index expression
-- raises as the table's owner) and is skipped alone; no trigger fires
SELECT * FROM spindle._compact('spindle_q.cq');
-- moved copies are counted purged by the mover
SELECT spindle_no, state, capacity, events, purged_events, generation
  FROM spindle.spindles WHERE relation = 'spindle_q.cq'::regclass
 ORDER BY spindle_no;
-- plain SQL sees the same events, each once, by every scan
SELECT string_agg((msg_id - :first + 1) || '=' || (payload->>'n'), ' ' ORDER BY msg_id) = :'before'
    AS same_rows
  FROM spindle_q.cq;
SET enable_seqscan = off;
SELECT string_agg(payload->>'n', ' ' ORDER BY msg_id) AS by_index
  FROM spindle_q.cq WHERE msg_id BETWEEN :first AND :first + 40;
RESET enable_seqscan;
-- the moved events' columns are unchanged (enqueued_at, visible_at)
SELECT count(*) AS same_columns FROM spindle_q.cq q JOIN cq_before b USING (msg_id)
 WHERE (q.enqueued_at, q.visible_at, q.payload) = (b.enqueued_at, b.visible_at, b.payload);
SELECT * FROM spindle.verify('spindle_q.cq');
-- spindle 2 drops by the usual rule; spindle 1 keeps event 7, spindle 3
-- its two live events
SELECT spindle.drop_spindles('spindle_q.cq');
SELECT spindle_no, state, events, purged_events, generation
  FROM spindle.spindles WHERE relation = 'spindle_q.cq'::regclass
 ORDER BY spindle_no;
SELECT string_agg((msg_id - :first + 1) || '=' || (payload->>'n'), ' ' ORDER BY msg_id) = :'before'
    AS same_rows
  FROM spindle_q.cq;
-- a second pass: event 7 still fails; nothing else qualifies
SELECT * FROM spindle._compact('spindle_q.cq');
-- once the index expression works again, spindle 1 is emptied and goes
DELETE FROM cq_fail;
SELECT * FROM spindle._compact('spindle_q.cq');
SELECT spindle.drop_spindles('spindle_q.cq');
SELECT spindle_no, state, events, purged_events, generation
  FROM spindle.spindles WHERE relation = 'spindle_q.cq'::regclass
 ORDER BY spindle_no;
SELECT string_agg((msg_id - :first + 1) || '=' || (payload->>'n'), ' ' ORDER BY msg_id) = :'before'
    AS same_rows
  FROM spindle_q.cq;
SELECT * FROM spindle.verify('spindle_q.cq');
-- the worker's view says what its relocator did (no worker runs here)
SELECT events_moved, spindles_emptied, events_skipped FROM spindle.worker
 WHERE false;

-- ===================== review rv1 =====================================
-- F3: at most 0.5 (bytes copied at most the bytes freed)
ALTER SYSTEM SET spindle.compaction_threshold = 1;
ALTER SYSTEM SET spindle.compaction_threshold = 0.51;
ALTER SYSTEM SET spindle.compaction_threshold = 0.5;
ALTER SYSTEM SET spindle.compaction_threshold = 0.25;
SHOW spindle.compaction_threshold;
-- a second queue: spindle 1 (ids 1..10) keeps 3 and 7, delayed, parked
SELECT spindle.create_queue('cr', 10);
SELECT count(spindle.enqueue('cr', jsonb_build_object('n', g),
         CASE WHEN g IN (3, 7) THEN interval '1 day' ELSE interval '0' END))
  FROM generate_series(1, 20) g;
SELECT count(*) FROM spindle.dequeue('cr', 8);
SELECT spindle.drop_spindles('spindle_q.cr');
SELECT enqueued_total AS enq_before FROM spindle.queues
 WHERE queue_name = 'cr' \gset
-- F5: nothing moves while the disk alarm is on for the table (the
-- launcher's measurement is below a limit of 1000 TB)
ALTER SYSTEM SET spindle.disk_free_limit = '1000TB';
SELECT pg_reload_conf();
SELECT pg_sleep(0.2);
DO $$
BEGIN
  FOR i IN 1..300 LOOP
    EXIT WHEN EXISTS (SELECT 1 FROM spindle.disk_alarm() WHERE measured_at IS NOT NULL);
    PERFORM pg_sleep(0.1);
  END LOOP;
END
$$;
SELECT * FROM spindle._compact('spindle_q.cr');
SELECT count(*) AS annexes FROM spindle.spindle_catalog
 WHERE relation = 'spindle_q.cr'::regclass AND kind = 'annex';
ALTER SYSTEM RESET spindle.disk_free_limit;
SELECT pg_reload_conf();
SELECT pg_sleep(0.2);
-- F1: the caller's statement_timeout cancels a pass (an index expression
-- sleeps when it runs as the relocator does): an error, nothing moved
CREATE FUNCTION cr_sleepy(p jsonb) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF current_setting('search_path') = 'pg_catalog, pg_temp' THEN
    PERFORM pg_sleep(0.5);
  END IF;
  RETURN 1;
END
$$;
CREATE INDEX cr_sleepy_idx ON spindle_q.cr (cr_sleepy(payload));
SET statement_timeout = '100ms';
SELECT * FROM spindle._compact('spindle_q.cr');
RESET statement_timeout;
-- (whether the annex was made before the cancel depends on timing: it
-- holds no live copy either way)
SELECT spindle_no, state, events, purged_events, generation
  FROM spindle.spindles WHERE relation = 'spindle_q.cr'::regclass
   AND state <> 'annex'
 ORDER BY spindle_no;
SELECT count(*) AS live_copies_in_annexes
  FROM spindle.spindles WHERE relation = 'spindle_q.cr'::regclass
   AND state = 'annex' AND events > purged_events;
DROP INDEX spindle_q.cr_sleepy_idx;
-- F4: the pass moves both; moved copies are no enqueues
SELECT moved, skipped, spindles, emptied FROM spindle._compact('spindle_q.cr');
SELECT enqueued_total - :enq_before AS enqueued_by_the_pass FROM spindle.queues
 WHERE queue_name = 'cr';
SELECT count(*), string_agg(payload->>'n', ',' ORDER BY msg_id) FROM spindle_q.cr;
SELECT * FROM spindle.verify('spindle_q.cr');
SELECT spindle.drop_queue('cr');
DROP FUNCTION cr_sleepy(jsonb);

-- back to the default
ALTER SYSTEM RESET spindle.compaction_threshold;
SELECT pg_reload_conf();
SELECT pg_sleep(0.2);
SHOW spindle.compaction_threshold;
ALTER TABLE spindle_q.cq OWNER TO CURRENT_USER;
SELECT spindle.drop_queue('cq');
DROP FUNCTION cq_refuse();
DROP FUNCTION cq_check(jsonb);
DROP TABLE cq_fail;
DROP OWNED BY cq_user;
DROP ROLE cq_user;
