--
-- queue_insert: enqueue and enqueue_batch place events without the
-- executor when the queue's table has nothing an INSERT would do besides
-- (queue_insert.c), and through SPI otherwise.  Both give the same rows:
--
--  - msg_ids in array order, across spindles and across the chunks of
--    1 000 events the direct path hands over at once;
--  - enqueued_at = now(), visible_at = now() + delay, the payloads as given;
--  - whatever a user adds to the table applies as to any INSERT: a CHECK
--    constraint, a column default that is not a constant (evaluated per
--    row), a constant one, a dropped one (not-null violation), an index
--    (its entries), a statement trigger with its transition table,
--    row-level security; a trigger, rule or index dropped again leaves
--    the direct path open (relhastriggers and friends stay set);
--  - a read-only transaction refuses (25006), and a rolled-back savepoint
--    leaves nothing; a prepared transaction's events arrive at COMMIT
--    PREPARED; spindle.verify() finds nothing wrong.
--
\set VERBOSITY default
SET client_min_messages = warning;

SELECT spindle.create_queue('qi', 4) IS NOT NULL AS created;

-- ===================== the same rows as an INSERT ========================
BEGIN;
CREATE TEMP TABLE qi_ids AS
SELECT msg_id, row_number() OVER () AS n
  FROM spindle.enqueue_batch('qi',
         (SELECT array_agg(jsonb_build_object('n', g) ORDER BY g)
            FROM generate_series(1, 10) g), '5 minutes') msg_id;
-- ids ascend with the array, across three spindles of 4
SELECT count(*) AS ids, count(DISTINCT msg_id) AS distinct_ids,
       bool_and(msg_id > coalesce(prev, 0)) AS ascending,
       max(msg_id) - min(msg_id) + 1 AS span
  FROM (SELECT msg_id, lag(msg_id) OVER (ORDER BY n) AS prev FROM qi_ids) s;
SELECT count(DISTINCT c.spindle_no) AS spindles
  FROM qi_ids i JOIN spindle.spindle_catalog c
    ON c.relation = 'spindle_q.qi'::regclass
   AND i.msg_id >= c.first_no AND i.msg_id < c.first_no + c.vcount;
-- each row as the INSERT would have made it
SELECT i.n, (q.payload->>'n')::int AS payload_n,
       q.enqueued_at = now() AS enqueued_now,
       q.visible_at = now() + '5 minutes' AS visible_later
  FROM qi_ids i JOIN spindle_q.qi q USING (msg_id) ORDER BY i.n;
COMMIT;

-- more than one chunk (1 000) in one call: 2 500 ids, in order, each once
CREATE TEMP TABLE qi_big AS
SELECT msg_id, row_number() OVER () AS n
  FROM spindle.enqueue_batch('qi',
         (SELECT array_agg(jsonb_build_object('n', g) ORDER BY g)
            FROM generate_series(1, 2500) g)) msg_id;
SELECT count(*) AS ids, count(DISTINCT msg_id) AS distinct_ids,
       bool_and((q.payload->>'n')::int = b.n) AS payload_in_order
  FROM qi_big b JOIN spindle_q.qi q USING (msg_id);
SELECT bool_and(msg_id > prev) AS ascending
  FROM (SELECT msg_id, lag(msg_id) OVER (ORDER BY n) AS prev FROM qi_big) s
 WHERE prev IS NOT NULL;
-- dequeue gets them in that order
SELECT count(*) AS dequeued FROM spindle.dequeue('qi', 10);
SELECT (payload->>'n')::int AS n FROM spindle.dequeue('qi', 3);
-- the rest waits: 2 487, and the 10 delayed ones
SELECT count(*) AS waiting FROM spindle_q.qi;

-- one event: enqueue returns its msg_id, and the row is there
BEGIN;
SELECT spindle.enqueue('qi', '{"one": 1}', '1 hour') AS one_id \gset
SELECT payload, enqueued_at = now() AS enqueued_now,
       visible_at = now() + '1 hour' AS visible_later
  FROM spindle_q.qi WHERE msg_id = :one_id;
COMMIT;

-- ===================== transactions ======================================
-- (no CONTEXT line in the errors here: the events were placed directly)
SELECT count(*) AS before FROM spindle_q.qi \gset
BEGIN READ ONLY;
SELECT count(*) FROM spindle.enqueue_batch('qi', ARRAY['{"n": 1}']::jsonb[]);
\echo :SQLSTATE
ROLLBACK;
BEGIN;
SAVEPOINT s;
SELECT count(*) FROM spindle.enqueue_batch('qi',
         (SELECT array_agg(jsonb_build_object('n', g)) FROM generate_series(1, 50) g));
ROLLBACK TO SAVEPOINT s;
SELECT spindle.enqueue('qi', '{"n": "kept"}') > 0 AS kept;
COMMIT;
SELECT count(*) - :before AS added FROM spindle_q.qi;

BEGIN;
SELECT count(*) FROM spindle.enqueue_batch('qi', ARRAY['{"n": "p1"}', '{"n": "p2"}']::jsonb[]);
PREPARE TRANSACTION 'qi_prepared';
SELECT count(*) AS invisible_while_prepared FROM spindle_q.qi WHERE payload->>'n' IN ('p1', 'p2');
COMMIT PREPARED 'qi_prepared';
SELECT count(*) AS visible_after FROM spindle_q.qi WHERE payload->>'n' IN ('p1', 'p2');

-- ===================== what a user adds to the table applies =============
-- (terse: the failing rows' DETAIL carries their timestamps)
\set VERBOSITY terse
-- a CHECK constraint
ALTER TABLE spindle_q.qi ADD CONSTRAINT qi_has_n CHECK (payload ? 'n' OR payload ? 'one');
SELECT count(*) FROM spindle.enqueue_batch('qi', ARRAY['{"n": 1}', '{"x": 1}']::jsonb[]);
\echo :SQLSTATE
SELECT spindle.enqueue('qi', '{"x": 1}');
\echo :SQLSTATE
SELECT count(*) AS batch_ok FROM spindle.enqueue_batch('qi', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[]);
ALTER TABLE spindle_q.qi DROP CONSTRAINT qi_has_n;

-- a column default that is not a constant: evaluated for each row
CREATE SEQUENCE qi_seq;
ALTER TABLE spindle_q.qi ALTER COLUMN msg_id SET DEFAULT nextval('qi_seq');
SELECT count(*) FROM spindle.enqueue_batch('qi', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[]);
SELECT last_value AS defaults_evaluated FROM qi_seq;
ALTER TABLE spindle_q.qi ALTER COLUMN msg_id SET DEFAULT 0;

-- enqueued_at with a constant default takes it; with none, not-null fails
ALTER TABLE spindle_q.qi ALTER COLUMN enqueued_at SET DEFAULT '2000-01-01 00:00:00+00';
SELECT spindle.enqueue('qi', '{"n": "old"}') AS old_id \gset
SELECT enqueued_at = '2000-01-01 00:00:00+00' AS constant_default FROM spindle_q.qi WHERE msg_id = :old_id;
ALTER TABLE spindle_q.qi ALTER COLUMN enqueued_at DROP DEFAULT;
SELECT spindle.enqueue('qi', '{"n": 1}');
\echo :SQLSTATE
ALTER TABLE spindle_q.qi ALTER COLUMN enqueued_at SET DEFAULT now();
\set VERBOSITY default

-- an index gets an entry for every event of a batch
CREATE INDEX qi_payload ON spindle_q.qi ((payload->>'tag'));
CREATE TEMP TABLE qi_tagged AS
SELECT msg_id FROM spindle.enqueue_batch('qi',
         (SELECT array_agg(jsonb_build_object('tag', 'indexed', 'n', g))
            FROM generate_series(1, 30) g)) msg_id;
SET enable_seqscan = off;
SELECT count(*) AS found_by_index FROM spindle_q.qi WHERE payload->>'tag' = 'indexed';
RESET enable_seqscan;
DROP INDEX spindle_q.qi_payload;

-- a statement trigger runs once per call, and sees every row
CREATE FUNCTION qi_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE WARNING 'statement trigger: % new rows', (SELECT count(*) FROM new_rows);
  RETURN NULL;
END$$;
CREATE TRIGGER qi_count AFTER INSERT ON spindle_q.qi REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION qi_count();
SELECT count(*) FROM spindle.enqueue_batch('qi', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[]);
DROP TRIGGER qi_count ON spindle_q.qi;

-- row-level security, for a role it applies to
CREATE ROLE regress_qi_producer;
GRANT INSERT ON spindle_q.qi TO regress_qi_producer;
ALTER TABLE spindle_q.qi ENABLE ROW LEVEL SECURITY;
CREATE POLICY qi_no_secret ON spindle_q.qi FOR INSERT WITH CHECK (NOT payload ? 'secret');
SET ROLE regress_qi_producer;
SELECT count(*) FROM spindle.enqueue_batch('qi', ARRAY['{"n": 1}', '{"secret": 1}']::jsonb[]);
\echo :SQLSTATE
SELECT count(*) AS allowed FROM spindle.enqueue_batch('qi', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[]);
RESET ROLE;
ALTER TABLE spindle_q.qi DISABLE ROW LEVEL SECURITY;
DROP POLICY qi_no_secret ON spindle_q.qi;

-- a rule applies too
CREATE TABLE qi_log (payload jsonb);
CREATE RULE qi_also_log AS ON INSERT TO spindle_q.qi DO ALSO INSERT INTO qi_log VALUES (NEW.payload);
SELECT count(*) FROM spindle.enqueue_batch('qi', ARRAY['{"n": "ruled"}']::jsonb[]);
SELECT payload FROM qi_log;
DROP RULE qi_also_log ON spindle_q.qi;
DROP TABLE qi_log;

-- with the trigger, index, rule and policy gone, events are placed
-- directly again (no CONTEXT line)
BEGIN READ ONLY;
SELECT spindle.enqueue('qi', '{}');
\echo :SQLSTATE
ROLLBACK;

-- everything is where the slot map says
SELECT * FROM spindle.verify('spindle_q.qi');
SELECT spindle.drop_queue('qi');
DROP SEQUENCE qi_seq;
DROP FUNCTION qi_count();
DROP ROLE regress_qi_producer;
