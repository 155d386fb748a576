-- msg_ids are event numbers: 1, 2, 3, ... for a new queue, dense across
-- spindles, never given twice for a table (rolled-back creations, TRUNCATE)
-- nor for a queue name (drop + create); an id the queue never handed out
-- resolves to nothing.
SET client_min_messages = warning;
\set VERBOSITY terse

-- ===================== a new queue counts from 1 =========================
SELECT spindle.create_queue('mq', 4);
SELECT spindle.enqueue('mq', jsonb_build_object('n', g)) FROM generate_series(1, 3) g;
SELECT * FROM spindle.enqueue_batch('mq',
  ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(4, 10) g)) msg_id;
-- each spindle's events are first_no + k, the ranges follow one another
SELECT spindle_no, first_no, vcount,
       first_no - lag(first_no + vcount) OVER (ORDER BY spindle_no) AS gap
  FROM spindle.spindle_catalog WHERE relation = 'spindle_q.mq'::regclass
 ORDER BY spindle_no;
-- consumed across spindle boundaries in order
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) FROM spindle.dequeue('mq', 6);

-- ===================== acks of ids the queue never gave ==================
SELECT m.msg_id FROM spindle.read('mq', 1, '1 hour') m;
SELECT spindle.ack('mq', 1000);                  -- never handed out
SELECT spindle.ack('mq', 9223372036854775806);   -- far out
SELECT spindle.set_visibility('mq', 1000, '0');
SELECT spindle.ack('mq', 3);                     -- consumed already
SELECT spindle.ack('mq', 7);                     -- the lease: true
SELECT spindle.ack('mq', 7);                     -- and only once
SELECT msg_id FROM spindle_q.mq ORDER BY msg_id;

-- ===================== a rolled-back creation leaves a gap ===============
BEGIN;
SELECT count(*) FROM spindle.enqueue_batch('mq',
  ARRAY(SELECT jsonb_build_object('r', g) FROM generate_series(1, 12) g));
SELECT max(msg_id) AS rolled_back_max FROM spindle_q.mq \gset
ROLLBACK;
SELECT spindle.enqueue('mq', '{"after": "rollback"}') > :rolled_back_max AS above_rolled_back;
-- no two spindles of the table ever shared a number
SELECT count(*) = count(DISTINCT first_no) AS distinct_ranges,
       bool_and(first_no >= prev_end) AS increasing
  FROM (SELECT first_no, coalesce(lag(first_no + vcount) OVER (ORDER BY spindle_no), 1) AS prev_end
          FROM spindle.spindle_catalog WHERE relation = 'spindle_q.mq'::regclass) s;

-- ===================== TRUNCATE never gives an id again ==================
SELECT max(msg_id) AS before_truncate FROM spindle_q.mq \gset
TRUNCATE spindle_q.mq;
SELECT spindle.enqueue('mq', '{"after": "truncate"}') AS after_truncate \gset
SELECT :after_truncate > :before_truncate AS above_truncated;
-- an id from before the TRUNCATE acks nothing
SELECT spindle.ack('mq', :before_truncate);
SELECT count(*) FROM spindle_q.mq;

-- ===================== drop + create: ids go on ==========================
SELECT spindle.enqueue('mq', '{"old": 1}') AS old_id \gset
SELECT spindle.drop_queue('mq');
SELECT spindle.create_queue('mq', 4);
SELECT spindle.enqueue('mq', '{"new": 1}') AS new_id \gset
SELECT :new_id > :old_id AS new_above_old;
-- a late ack of the old queue's id touches nothing of the new queue
SELECT spindle.ack('mq', :old_id);
SELECT payload FROM spindle_q.mq;
SELECT msg_id_floor > :old_id AS floor_above_old
  FROM spindle.queue_msg_id_floor WHERE queue_name = 'mq';

-- ===================== UPDATE and supplied ids ===========================
UPDATE spindle_q.mq SET payload = '{"new": 2}' WHERE msg_id = :new_id
  RETURNING msg_id > :new_id AS new_id_for_new_version;
-- a supplied id is replaced: a dead-letter queue's rows go back with new ids
SELECT spindle.create_queue('mq_dlq', 4);
INSERT INTO spindle_q.mq_dlq (payload) VALUES ('{"dead": 1}'), ('{"dead": 2}');
SELECT max(msg_id) AS mq_max FROM spindle_q.mq \gset
INSERT INTO spindle_q.mq SELECT * FROM spindle_q.mq_dlq;
SELECT payload, msg_id > :mq_max AS renumbered FROM spindle_q.mq
 WHERE payload ? 'dead' ORDER BY msg_id;
SELECT count(*) = count(DISTINCT msg_id) AS unique_ids FROM spindle_q.mq;

-- ===================== a changed capacity: every id resolves ==============
ALTER TABLE spindle_q.mq SET (events_per_spindle = 7);
SELECT count(*) FROM spindle.enqueue_batch('mq',
  ARRAY(SELECT jsonb_build_object('c', g) FROM generate_series(1, 20) g));
-- every id resolves: each row's id lies in its own spindle's range
SELECT count(*) AS events,
       count(*) FILTER (WHERE ((o.ctid::text::point)[0] * 291 + (o.ctid::text::point)[1] - 1)
                              - c.vbase = o.msg_id - c.first_no) AS id_matches_slot
  FROM spindle_q.mq o
  JOIN spindle.spindle_catalog c
    ON c.relation = 'spindle_q.mq'::regclass
   AND o.msg_id >= c.first_no AND o.msg_id < c.first_no + c.vcount;
SELECT count(*) FROM spindle.dequeue('mq', 100);
SELECT count(*) FROM spindle_q.mq;

-- ===================== plain spindle tables number their events too =======
CREATE TABLE mt (v int) USING spindle WITH (events_per_spindle = 5);
INSERT INTO mt SELECT g FROM generate_series(1, 12) g;
SELECT spindle_no, first_no, vcount FROM spindle.spindle_catalog
 WHERE relation = 'mt'::regclass ORDER BY spindle_no;
DROP TABLE mt;

SELECT spindle.drop_queue('mq');
SELECT spindle.drop_queue('mq_dlq');
