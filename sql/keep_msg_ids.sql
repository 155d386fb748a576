-- spindle.keep_msg_ids: an insert into a queue table keeps the msg_ids it
-- supplies when they lie past every id the queue gave (a restore keeps
-- its events' ids): into the open spindle at k = id - first_no, skipping
-- the slots between, else into a new spindle numbered from the id.  Ids
-- at or below one the queue gave, and 0, get new ids; only the table's
-- owner or a superuser may keep ids.
SET client_min_messages = warning;
\set VERBOSITY terse

SELECT spindle.create_queue('kq', 4);
-- off (the default): a supplied id is replaced
INSERT INTO spindle_q.kq (msg_id, payload) VALUES (100, '{"n": "off"}')
  RETURNING msg_id;

SET spindle.keep_msg_ids = on;
-- kept in the open spindle (first_no 1) at k = 2: slot 1 skipped
INSERT INTO spindle_q.kq (msg_id, payload) VALUES (3, '{"n": "gap"}')
  RETURNING msg_id;
-- at or below an id the queue gave: a new id
INSERT INTO spindle_q.kq (msg_id, payload) VALUES (2, '{"n": "low"}')
  RETURNING msg_id;
-- a run past the first spindle: kept (in the ready spindle if the worker
-- made one already, numbered from 5, else in a new one numbered from 6)
INSERT INTO spindle_q.kq (msg_id, payload)
  VALUES (6, '{"n": "run1"}'), (7, '{"n": "run2"}') RETURNING msg_id;
-- beyond every spindle: a new spindle numbered from 1000; the spindles
-- before it are full
INSERT INTO spindle_q.kq (msg_id, payload) VALUES (1000, '{"n": "jump"}')
  RETURNING msg_id;
-- 0 gets a new id, after the kept one
INSERT INTO spindle_q.kq (msg_id, payload) VALUES (0, '{"n": "zero"}')
  RETURNING msg_id;
-- COPY (what pg_restore runs): kept, a low id renumbered in between
COPY spindle_q.kq (msg_id, payload) FROM stdin;
2000	{"n": "copy1"}
2001	{"n": "copy2"}
5	{"n": "copy-low"}
2003	{"n": "copy3"}
2010	{"n": "copy4"}
\.
SELECT msg_id, payload->>'n' AS n FROM spindle_q.kq ORDER BY msg_id;
-- spindles numbered from the kept ids, and first_no still grows with
-- spindle_no
SELECT first_no FROM spindle.spindle_catalog
 WHERE relation = 'spindle_q.kq'::regclass AND first_no IN (1000, 2000)
 ORDER BY spindle_no;
SELECT bool_and(first_no >= prev_end) AS increasing
  FROM (SELECT first_no, lag(first_no + vcount, 1, 0::bigint)
                 OVER (ORDER BY spindle_no) AS prev_end
          FROM spindle.spindle_catalog
         WHERE relation = 'spindle_q.kq'::regclass) s;
-- plain SQL by msg_id finds them
SELECT payload->>'n' AS n FROM spindle_q.kq WHERE msg_id = 1000;
SELECT payload->>'n' AS n FROM spindle_q.kq WHERE msg_id IN (6, 2003) ORDER BY 1;
SELECT count(*) FROM spindle_q.kq WHERE msg_id = 2;
SELECT * FROM spindle.verify('spindle_q.kq');
-- the views count the events, not the skipped slots
SELECT depth, leased, delayed FROM spindle.queues WHERE queue_name = 'kq';
SELECT sum(events - purged_events) AS live_events
  FROM spindle.spindles WHERE relation = 'spindle_q.kq'::regclass;

-- ids too near the top of bigint fail (22003), changing nothing
\set VERBOSITY sqlstate
INSERT INTO spindle_q.kq (msg_id, payload)
  VALUES (9223372036854775806, '{"n": "top"}');
\set VERBOSITY terse
SELECT count(*) FROM spindle_q.kq;

-- someone else than the owner: refused (42501), nothing changed
CREATE ROLE keep_other;
GRANT USAGE ON SCHEMA spindle TO keep_other;
GRANT INSERT, SELECT ON spindle_q.kq TO keep_other;
SET ROLE keep_other;
\set VERBOSITY default
INSERT INTO spindle_q.kq (msg_id, payload) VALUES (5000, '{"n": "other"}');
\set VERBOSITY sqlstate
COPY spindle_q.kq (msg_id, payload) FROM stdin;
5000	{"n": "other"}
\.
\set VERBOSITY terse
-- ids it would not keep are renumbered for anyone
INSERT INTO spindle_q.kq (msg_id, payload) VALUES (7, '{"n": "other-low"}')
  RETURNING msg_id > 2010 AS renumbered;
RESET ROLE;
-- nor through a SECURITY DEFINER function of the owner, in the session
-- of someone else (who set spindle.keep_msg_ids)
CREATE FUNCTION keep_put(id bigint) RETURNS bigint
  LANGUAGE sql SECURITY DEFINER
  AS $$ INSERT INTO spindle_q.kq (msg_id, payload)
        VALUES (id, '{"n": "definer"}') RETURNING msg_id $$;
GRANT EXECUTE ON FUNCTION keep_put(bigint) TO keep_other;
SET SESSION AUTHORIZATION keep_other;
SET spindle.keep_msg_ids = on;
\set VERBOSITY sqlstate
SELECT keep_put(5000);
\set VERBOSITY terse
RESET SESSION AUTHORIZATION;
DROP FUNCTION keep_put(bigint);
SET spindle.keep_msg_ids = on;
SELECT count(*) FROM spindle_q.kq WHERE msg_id = 5000;

-- the consumers deliver by the kept ids, in order, gaps passed over
SELECT msg_id, payload->>'n' AS n FROM spindle.read('kq', 3, '1 hour');
SELECT spindle.ack('kq', 3);
SELECT spindle.ack('kq', 1);
SELECT spindle.ack('kq', 2);                     -- never given: false
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) FROM spindle.dequeue('kq', 20);
SELECT spindle.ack('kq', 4);
SELECT * FROM spindle.verify('spindle_q.kq');
-- the spindles filled by skipping, consumed, are dropped as any other
SELECT spindle.drop_spindles('spindle_q.kq') > 0 AS dropped;
SELECT * FROM spindle.verify('spindle_q.kq');

-- keep_msg_ids off again: supplied ids are replaced
RESET spindle.keep_msg_ids;
INSERT INTO spindle_q.kq (msg_id, payload) VALUES (90000, '{"n": "reset"}')
  RETURNING msg_id < 90000 AS renumbered;

-- an id that would leave less than a spindle's worth of ids after it
-- for ordinary inserts (and a TRUNCATE) is refused: the queue goes on
SELECT spindle.create_queue('km', 4);
SET spindle.keep_msg_ids = on;
\set VERBOSITY default
INSERT INTO spindle_q.km (msg_id, payload)
  VALUES (9223372036854775802, '{"n": "top"}');
INSERT INTO spindle_q.km (msg_id, payload)
  VALUES (4611686018427387900, '{"n": "half"}');
\set VERBOSITY terse
RESET spindle.keep_msg_ids;
SELECT count(spindle.enqueue('km', '{}')) FROM generate_series(1, 6);
SELECT * FROM spindle.verify('spindle_q.km');
SELECT spindle.drop_queue('km');

-- a TRUNCATE of a queue that never gave an id (pg_restore -j sends one
-- before each COPY of a table it made) does not make the ids jump: the
-- ids loaded after it are kept; one of a queue that gave ids still jumps
SELECT spindle.create_queue('kt', 4);
BEGIN;
TRUNCATE TABLE ONLY spindle_q.kt;
SET LOCAL spindle.keep_msg_ids = on;
COPY spindle_q.kt (msg_id, payload) FROM stdin;
3	{"n": "t3"}
9	{"n": "t9"}
\.
COMMIT;
SELECT string_agg(msg_id::text, ',' ORDER BY msg_id) FROM spindle_q.kt;
SELECT string_agg(msg_id::text, ',' ORDER BY msg_id) FROM spindle.dequeue('kt', 10);
TRUNCATE spindle_q.kt;
SELECT spindle.enqueue('kt', '{}') > 4294967296 AS jumped;
SELECT * FROM spindle.verify('spindle_q.kt');
SELECT spindle.drop_queue('kt');

-- a drop + create never gives a kept id again
SET spindle.keep_msg_ids = on;
INSERT INTO spindle_q.kq (msg_id, payload) VALUES (70000, '{"n": "last"}')
  RETURNING msg_id;
SELECT spindle.drop_queue('kq');
SELECT spindle.create_queue('kq', 4);
RESET spindle.keep_msg_ids;
SELECT spindle.enqueue('kq', '{"n": "new"}') > 70000 AS above_kept;
SELECT spindle.drop_queue('kq');
REVOKE ALL ON SCHEMA spindle FROM keep_other;
DROP ROLE keep_other;
