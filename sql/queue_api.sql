--
-- queue_api: the producer and administrator side of the queue API.
--
--  - schema spindle_q (USAGE for everyone, CREATE for its owner), the
--    registry spindle.queue_catalog (dumped, no rights for users), type
--    spindle.message, and the signatures of create_queue, drop_queue,
--    enqueue and enqueue_batch;
--  - create_queue makes spindle_q.<name> as the caller (who needs CREATE on
--    spindle_q) with its options, and its registry row; every bad argument
--    gets its SQLSTATE and creates nothing;
--  - msg_id = (spindle_no << 26) | k, from the access method, for enqueue,
--    enqueue_batch (in array order), plain INSERT (a given value is
--    ignored) and COPY; RETURNING and AFTER triggers see it;
--  - delay is stored in visible_at;
--  - enqueue checks, in order: name (42602), existence (42P01), INSERT
--    privilege (42501 naming the queue), NULL payload (22004), NULL (22004)
--    or negative (22023) delay, payload size (54000); a failed call
--    changes nothing;
--  - it runs as the caller: row-level security and triggers apply;
--  - drop_queue needs the owner, refuses a dead-letter queue in use, and
--    any drop of the table removes the registry row.
--
\set VERBOSITY default

CREATE ROLE regress_q_admin;		-- may create queues
CREATE ROLE regress_q_producer;		-- INSERT on some queues
CREATE ROLE regress_q_nobody;		-- nothing
CREATE ROLE regress_q_admin2;		-- may create queues, owns none of them

-- ===================== the objects =======================================
SELECT has_schema_privilege('regress_q_nobody', 'spindle_q', 'USAGE') AS usage,
       has_schema_privilege('regress_q_nobody', 'spindle_q', 'CREATE') AS create;
SELECT has_table_privilege('regress_q_nobody', 'spindle.queue_catalog', 'SELECT') AS registry_readable;
SELECT 'spindle.queue_catalog'::regclass = ANY (extconfig) AS registry_dumped
  FROM pg_extension WHERE extname = 'spindle';
SELECT attname, format_type(atttypid, atttypmod)
  FROM pg_attribute WHERE attrelid = 'spindle.message'::regclass AND attnum > 0
 ORDER BY attnum;
SELECT p.oid::regprocedure AS function, pg_get_function_arguments(p.oid) AS arguments,
       pg_get_function_result(p.oid) AS result, p.proisstrict, p.prosecdef
  FROM pg_proc p
 WHERE p.pronamespace = 'spindle'::regnamespace
   AND p.proname IN ('create_queue', 'drop_queue', 'enqueue', 'enqueue_batch')
 ORDER BY p.proname;

GRANT CREATE ON SCHEMA spindle_q TO regress_q_admin, regress_q_admin2;

-- trigger functions for later
CREATE FUNCTION q_before() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE NOTICE 'before: msg_id %', NEW.msg_id;
  NEW.payload := NEW.payload || '{"touched": true}';
  RETURN NEW;
END $$;
CREATE FUNCTION q_after() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE NOTICE 'after: msg_id %, payload %', NEW.msg_id, NEW.payload;
  RETURN NULL;
END $$;
CREATE FUNCTION q_echo() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT NEW.payload ? 'echo' THEN
    PERFORM spindle.enqueue(TG_TABLE_NAME, NEW.payload || '{"echo": true}');
  END IF;
  RETURN NEW;
END $$;

-- ===================== create_queue ======================================
SET ROLE regress_q_admin;
SELECT spindle.create_queue('orders', events_per_spindle => 4, time_to_live => '1 day');
SELECT spindle.create_queue('orders_dlq');
SELECT spindle.create_queue('jobs', 3, '90 minutes', max_reads => 5,
                            dead_letter_queue => 'orders_dlq');
-- a queue that purges what was read too often (no dead-letter queue)
SELECT spindle.create_queue('retries', max_reads => 2);
-- the longest name
SELECT spindle.create_queue(repeat('q', 48));
RESET ROLE;

-- the tables: owned by the creator, spindle tables with their options
SELECT c.relname, pg_get_userbyid(c.relowner) AS owner, a.amname, c.reloptions
  FROM pg_class c JOIN pg_am a ON a.oid = c.relam
 WHERE c.relnamespace = 'spindle_q'::regnamespace ORDER BY c.relname;
SELECT attnum, attname, format_type(atttypid, atttypmod), attnotnull,
       pg_get_expr(d.adbin, d.adrelid) AS "default"
  FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE a.attrelid = 'spindle_q.orders'::regclass AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attnum;
SELECT relation, events_per_spindle, time_to_live FROM spindle.tables
 WHERE relation::text LIKE 'spindle_q.%' ORDER BY relation::text;
-- the registry
SELECT queue_name, relation, max_reads, dead_letter_queue,
       created_at <= now() AS created_before_now
  FROM spindle.queue_catalog ORDER BY queue_name;

-- bad arguments: each its SQLSTATE, nothing created
CREATE TEMP TABLE counts AS
  SELECT (SELECT count(*) FROM spindle.queue_catalog) AS registry,
         (SELECT count(*) FROM pg_class WHERE relnamespace = 'spindle_q'::regnamespace) AS tables;
SET ROLE regress_q_admin;
SELECT spindle.create_queue(NULL);
\echo :SQLSTATE
SELECT spindle.create_queue('');
\echo :SQLSTATE
SELECT spindle.create_queue('Orders');
\echo :SQLSTATE
SELECT spindle.create_queue('1orders');
\echo :SQLSTATE
SELECT spindle.create_queue('or-ders');
\echo :SQLSTATE
SELECT spindle.create_queue('orders x');
\echo :SQLSTATE
SELECT spindle.create_queue('x"; DROP TABLE spindle_q.orders; --');
\echo :SQLSTATE
SELECT spindle.create_queue(repeat('q', 49));
\echo :SQLSTATE
SELECT spindle.create_queue('bad', events_per_spindle => -1);
\echo :SQLSTATE
SELECT spindle.create_queue('bad', events_per_spindle => 38141953);
\echo :SQLSTATE
SELECT spindle.create_queue('bad', time_to_live => '-1 hour');
\echo :SQLSTATE
SELECT spindle.create_queue('bad', time_to_live => '0');
\echo :SQLSTATE
SELECT spindle.create_queue('bad', max_reads => 0);
\echo :SQLSTATE
SELECT spindle.create_queue('bad', max_reads => -3);
\echo :SQLSTATE
SELECT spindle.create_queue('bad', max_reads => 1, dead_letter_queue => 'nope');
\echo :SQLSTATE
SELECT spindle.create_queue('bad', max_reads => 1, dead_letter_queue => 'No-Pe');
\echo :SQLSTATE
SELECT spindle.create_queue('bad', max_reads => 1, dead_letter_queue => 'bad');
\echo :SQLSTATE
SELECT spindle.create_queue('bad', dead_letter_queue => 'orders_dlq');
\echo :SQLSTATE
SELECT spindle.create_queue('orders');
\echo :SQLSTATE
SELECT spindle.create_queue('orders', events_per_spindle => 9);
\echo :SQLSTATE
RESET ROLE;
-- a table of spindle_q that is no queue
CREATE TABLE spindle_q.not_a_queue (id int);
SET ROLE regress_q_admin;
SELECT spindle.create_queue('not_a_queue');
\echo :SQLSTATE
RESET ROLE;
DROP TABLE spindle_q.not_a_queue;
-- without CREATE on spindle_q: refused, with a hint
SET ROLE regress_q_nobody;
SELECT spindle.create_queue('mine');
\echo :SQLSTATE
RESET ROLE;
-- a dead-letter queue the creator may not insert into
SET ROLE regress_q_admin2;
SELECT spindle.create_queue('sneaky', max_reads => 1, dead_letter_queue => 'orders_dlq');
\echo :SQLSTATE
RESET ROLE;
SELECT (SELECT count(*) FROM spindle.queue_catalog) = registry AS registry_unchanged,
       (SELECT count(*) FROM pg_class WHERE relnamespace = 'spindle_q'::regnamespace) = tables
         AS tables_unchanged
  FROM counts;
-- not in a read-only transaction
BEGIN READ ONLY;
SELECT spindle.create_queue('ro');
\echo :SQLSTATE
ROLLBACK;
BEGIN READ ONLY;
SELECT spindle.drop_queue('orders');
\echo :SQLSTATE
ROLLBACK;
BEGIN READ ONLY;
SELECT spindle.enqueue('orders', '{}');
\echo :SQLSTATE
ROLLBACK;
-- a rolled-back create_queue leaves nothing
BEGIN;
SELECT spindle.create_queue('ephemeral');
ROLLBACK;
SELECT count(*) FROM spindle.queue_catalog WHERE queue_name = 'ephemeral';
SELECT to_regclass('spindle_q.ephemeral');
-- the registry is not for users
SET ROLE regress_q_admin;
INSERT INTO spindle.queue_catalog (queue_name, relation) VALUES ('forged', 'spindle_q.orders');
\echo :SQLSTATE
RESET ROLE;

-- ===================== enqueue and msg_ids ===============================
SET ROLE regress_q_admin;
-- ten events into a new queue of spindles of 4: msg_ids 1, 2, 3, ...
-- across spindles
CREATE TEMP TABLE ids (n int, msg_id bigint);
INSERT INTO ids SELECT g, spindle.enqueue('orders', jsonb_build_object('n', g))
  FROM generate_series(1, 10) g;
SELECT n, msg_id FROM ids ORDER BY n;
-- consistent with spindle.spindles: each spindle holds the ids numbered in
-- it, first_no + k with k running 0..3
RESET ROLE;
SELECT s.spindle_no, s.events, count(i.msg_id) AS ids,
       min(i.msg_id - c.first_no) AS min_k, max(i.msg_id - c.first_no) AS max_k
  FROM spindle.spindles s
  JOIN spindle.spindle_catalog c
    ON c.relation = s.relation AND c.spindle_no = s.spindle_no
  LEFT JOIN ids i ON i.msg_id >= c.first_no AND i.msg_id < c.first_no + c.vcount
 WHERE s.relation = 'spindle_q.orders'::regclass AND s.events > 0
 GROUP BY s.spindle_no, s.events ORDER BY s.spindle_no;
SET ROLE regress_q_admin;
-- the stored events carry the same ids, in order
SELECT i.n, o.payload->>'n' AS payload_n
  FROM spindle_q.orders o JOIN ids i USING (msg_id) ORDER BY o.msg_id;
-- and each id's k is the slot of the event's TID in its spindle
RESET ROLE;
SELECT count(*) AS events,
       count(*) FILTER (WHERE ((o.ctid::text::point)[0] * 291 + (o.ctid::text::point)[1] - 1)
                              - c.vbase = o.msg_id - c.first_no) AS tid_matches_k
  FROM spindle_q.orders o
  JOIN spindle.spindle_catalog c
    ON c.relation = 'spindle_q.orders'::regclass
   AND o.msg_id >= c.first_no AND o.msg_id < c.first_no + c.vcount;
SET ROLE regress_q_admin;

-- delay: visible_at = now() + delay, enqueued_at = now()
BEGIN;
SELECT spindle.enqueue('orders', '{"delayed": true}', '1 hour') AS delayed_id \gset
SELECT visible_at - enqueued_at AS delay, enqueued_at = now() AS enqueued_now
  FROM spindle_q.orders WHERE msg_id = :delayed_id;
SELECT spindle.enqueue('orders', '{"delayed": false}') AS now_id \gset
SELECT visible_at - enqueued_at AS delay FROM spindle_q.orders WHERE msg_id = :now_id;
COMMIT;

-- plain INSERT gets a msg_id too; a given one is ignored
INSERT INTO spindle_q.orders (payload) VALUES ('{"plain": 1}')
  RETURNING msg_id - :now_id AS after_last;
INSERT INTO spindle_q.orders (msg_id, payload) VALUES (12345, '{"plain": 2}'), (12345, '{"plain": 3}')
  RETURNING msg_id <> 12345 AS assigned, payload;
SELECT count(DISTINCT msg_id) = count(*) AS unique_ids FROM spindle_q.orders;
-- index entries get the msg_id too (a queue needs no index; one may add it)
CREATE INDEX orders_msg_id ON spindle_q.orders (msg_id);
SELECT spindle.enqueue('orders', '{"indexed": 1}') AS idx_id \gset
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT payload FROM spindle_q.orders WHERE msg_id = :idx_id;
SELECT payload FROM spindle_q.orders WHERE msg_id = :idx_id;
SELECT count(*) FROM spindle_q.orders WHERE msg_id = 12345;
RESET enable_seqscan;
RESET enable_bitmapscan;
DROP INDEX spindle_q.orders_msg_id;
-- an UPDATE appends a new version: a new position, so a new msg_id
UPDATE spindle_q.orders SET payload = payload || '{"updated": true}' WHERE msg_id = :now_id
  RETURNING msg_id > :now_id AS moved, payload;

-- AFTER triggers see it (and BEFORE triggers see the default, 0)
CREATE TRIGGER q_before BEFORE INSERT ON spindle_q.jobs FOR EACH ROW EXECUTE FUNCTION q_before();
CREATE TRIGGER q_after AFTER INSERT ON spindle_q.jobs FOR EACH ROW EXECUTE FUNCTION q_after();
SELECT spindle.enqueue('jobs', '{"job": 1}') AS msg_id;
SELECT * FROM spindle.enqueue_batch('jobs', ARRAY['{"job": 2}', '{"job": 3}']::jsonb[]) msg_id;
INSERT INTO spindle_q.jobs (payload) VALUES ('{"job": 4}') RETURNING msg_id;
SELECT msg_id, payload FROM spindle_q.jobs ORDER BY msg_id;
DROP TRIGGER q_before ON spindle_q.jobs;
DROP TRIGGER q_after ON spindle_q.jobs;

-- a trigger that enqueues into the same queue: each call returns its own id
CREATE TRIGGER q_echo BEFORE INSERT ON spindle_q.retries FOR EACH ROW EXECUTE FUNCTION q_echo();
SELECT spindle.enqueue('retries', '{"r": 1}') AS r1 \gset
SELECT payload FROM spindle_q.retries WHERE msg_id = :r1;
SELECT msg_id, payload FROM spindle_q.retries ORDER BY msg_id;
DROP TRIGGER q_echo ON spindle_q.retries;

-- COPY (multi-insert) numbers its events too
COPY spindle_q.orders_dlq (payload) FROM stdin;
{"copied": 1}
{"copied": 2}
{"copied": 3}
{"copied": 4}
{"copied": 5}
\.
SELECT msg_id, payload FROM spindle_q.orders_dlq ORDER BY msg_id;

-- ===================== enqueue_batch =====================================
SELECT b.ord, b.id > lag(b.id) OVER (ORDER BY b.ord) AS increasing
  FROM spindle.enqueue_batch('orders_dlq',
         ARRAY(SELECT jsonb_build_object('b', g) FROM generate_series(1, 7) g)) WITH ORDINALITY b (id, ord)
 ORDER BY b.ord;
-- stored in array order
SELECT string_agg(payload->>'b', ',' ORDER BY msg_id) FROM spindle_q.orders_dlq WHERE payload ? 'b';
-- an empty batch enqueues nothing
SELECT count(*) FROM spindle.enqueue_batch('orders_dlq', '{}'::jsonb[]);
-- a delayed batch
BEGIN;
SELECT count(*) FROM spindle.enqueue_batch('orders_dlq', ARRAY['{"late": 1}', '{"late": 2}']::jsonb[], '2 days');
SELECT DISTINCT visible_at - enqueued_at AS delay FROM spindle_q.orders_dlq WHERE payload ? 'late';
COMMIT;
-- a batch in a queue of small spindles crosses spindles in order
CREATE TEMP TABLE batch_ids AS
  SELECT msg_id FROM spindle.enqueue_batch('jobs',
    ARRAY(SELECT jsonb_build_object('j', g) FROM generate_series(1, 5) g)) msg_id;
SELECT string_agg(msg_id::text, ' ' ORDER BY msg_id) FROM batch_ids;
RESET ROLE;
SELECT string_agg(c.spindle_no || ':' || (b.msg_id - c.first_no), ' ' ORDER BY b.msg_id)
  FROM batch_ids b JOIN spindle.spindle_catalog c
    ON c.relation = 'spindle_q.jobs'::regclass
   AND b.msg_id >= c.first_no AND b.msg_id < c.first_no + c.vcount;

-- ===================== bad input to enqueue ==============================
CREATE TEMP TABLE before_counts AS
  SELECT (SELECT count(*) FROM spindle_q.orders) AS orders,
         (SELECT count(*) FROM spindle_q.orders_dlq) AS dlq;
SET ROLE regress_q_admin;
SELECT spindle.enqueue(NULL, '{}');
\echo :SQLSTATE
SELECT spindle.enqueue('Orders', '{}');
\echo :SQLSTATE
SELECT spindle.enqueue('orders; DROP TABLE x', '{}');
\echo :SQLSTATE
SELECT spindle.enqueue('nope', '{}');
\echo :SQLSTATE
SELECT spindle.enqueue('orders', NULL);
\echo :SQLSTATE
SELECT spindle.enqueue('orders', '{}', NULL);
\echo :SQLSTATE
SELECT spindle.enqueue('orders', '{}', '-1 second');
\echo :SQLSTATE
SELECT spindle.enqueue('orders', '{}', '1 day -25 hours');
\echo :SQLSTATE
-- the order of the checks: name, existence, then NULLs
SELECT spindle.enqueue(NULL, NULL, NULL);
\echo :SQLSTATE
SELECT spindle.enqueue('nope', NULL, NULL);
\echo :SQLSTATE
SELECT spindle.enqueue('orders', NULL, NULL);
\echo :SQLSTATE
SELECT spindle.enqueue_batch(NULL, NULL);
\echo :SQLSTATE
SELECT spindle.enqueue_batch('nope', NULL);
\echo :SQLSTATE
SELECT spindle.enqueue_batch('orders', NULL);
\echo :SQLSTATE
SELECT spindle.enqueue_batch('orders', ARRAY['{}', NULL, '{}']::jsonb[]);
\echo :SQLSTATE
SELECT spindle.enqueue_batch('orders', ARRAY[['{}'], ['{}']]::jsonb[]);
\echo :SQLSTATE
SELECT spindle.enqueue_batch('orders', ARRAY['{}']::jsonb[], NULL);
\echo :SQLSTATE
SELECT spindle.enqueue_batch('orders', ARRAY['{}']::jsonb[], '-1 minute');
\echo :SQLSTATE
-- payload size: only a superuser may change the limit
SET spindle.max_payload_size = '1kB';
\echo :SQLSTATE
RESET ROLE;
SHOW spindle.max_payload_size;
SET spindle.max_payload_size = '1kB';
SET ROLE regress_q_admin;
SELECT spindle.enqueue('orders', jsonb_build_object('big', repeat('x', 1020)));
\echo :SQLSTATE
SELECT spindle.enqueue_batch('orders_dlq', ARRAY['{}'::jsonb, '{}', jsonb_build_object('big', repeat('x', 2000))]);
\echo :SQLSTATE
-- compressed values count with their full size
CREATE TEMP TABLE big AS SELECT jsonb_build_object('big', repeat('y', 100000)) AS p;
SELECT pg_column_size(p) < 10000 AS compressed FROM big;
SELECT spindle.enqueue('orders', p) FROM big;
\echo :SQLSTATE
-- just under the limit is fine
SELECT spindle.enqueue('orders', jsonb_build_object('ok', repeat('x', 900))) > 0 AS ok;
RESET ROLE;
RESET spindle.max_payload_size;
SELECT (SELECT count(*) FROM spindle_q.orders) - orders AS orders_added,
       (SELECT count(*) FROM spindle_q.orders_dlq) - dlq AS dlq_added
  FROM before_counts;

-- ===================== privileges ========================================
-- no INSERT: 42501 naming the queue, before anything else is looked at
SET ROLE regress_q_nobody;
SELECT spindle.enqueue('orders', '{}');
\echo :SQLSTATE
SELECT spindle.enqueue('orders', NULL);
\echo :SQLSTATE
SELECT spindle.enqueue_batch('orders', ARRAY['{}']::jsonb[]);
\echo :SQLSTATE
INSERT INTO spindle_q.orders (payload) VALUES ('{}');
\echo :SQLSTATE
RESET ROLE;
-- INSERT only (no SELECT): enqueue works and returns the msg_id
SET ROLE regress_q_admin;
GRANT INSERT ON spindle_q.orders TO regress_q_producer;
GRANT INSERT (payload, visible_at) ON spindle_q.orders_dlq TO regress_q_producer;
RESET ROLE;
SET ROLE regress_q_producer;
SELECT spindle.enqueue('orders', '{"from": "producer"}') > 0 AS enqueued;
SELECT count(*) FROM spindle.enqueue_batch('orders', ARRAY['{"from": "producer"}', '{"from": "producer"}']::jsonb[]);
-- column privileges on what enqueue writes are enough
SELECT spindle.enqueue('orders_dlq', '{"from": "producer"}') > 0 AS enqueued;
SELECT * FROM spindle_q.orders LIMIT 1;
\echo :SQLSTATE
SELECT spindle.enqueue('jobs', '{}');
\echo :SQLSTATE
RESET ROLE;
SELECT count(*) FROM spindle_q.orders WHERE payload->>'from' = 'producer';
-- row-level security applies to enqueue as to INSERT
SET ROLE regress_q_admin;
ALTER TABLE spindle_q.orders ENABLE ROW LEVEL SECURITY;
CREATE POLICY no_secrets ON spindle_q.orders FOR INSERT TO regress_q_producer
  WITH CHECK (NOT payload ? 'secret');
CREATE POLICY admin_all ON spindle_q.orders TO regress_q_admin USING (true);
RESET ROLE;
SET ROLE regress_q_producer;
SELECT spindle.enqueue('orders', '{"secret": 1}');
\echo :SQLSTATE
SELECT spindle.enqueue('orders', '{"public": 1}') > 0 AS enqueued;
RESET ROLE;
SET ROLE regress_q_admin;
ALTER TABLE spindle_q.orders DISABLE ROW LEVEL SECURITY;
RESET ROLE;

-- ===================== a queue's table keeps its names ===================
SET ROLE regress_q_admin;
ALTER TABLE spindle_q.orders RENAME TO orders2;
\echo :SQLSTATE
ALTER TABLE spindle_q.orders RENAME COLUMN payload TO body;
\echo :SQLSTATE
ALTER TABLE spindle_q.orders RENAME COLUMN msg_id TO id;
\echo :SQLSTATE
RESET ROLE;
ALTER TABLE spindle_q.orders SET SCHEMA public;
\echo :SQLSTATE
-- other changes are fine
SET ROLE regress_q_admin;
ALTER TABLE spindle_q.orders ALTER COLUMN visible_at SET DEFAULT now() + '1 minute';
ALTER TABLE spindle_q.orders ALTER COLUMN visible_at SET DEFAULT now();
ALTER TABLE spindle_q.orders SET (time_to_live = '2 days');
RESET ROLE;
SELECT reloptions FROM pg_class WHERE oid = 'spindle_q.orders'::regclass;
-- and a table of spindle_q that is no queue may be renamed
CREATE TABLE spindle_q.scratch (id int);
ALTER TABLE spindle_q.scratch RENAME TO scratch2;
DROP TABLE spindle_q.scratch2;

-- ===================== drop_queue ========================================
-- not the owner
SET ROLE regress_q_admin2;
SELECT spindle.drop_queue('orders');
\echo :SQLSTATE
SELECT spindle.drop_queue('orders', true);
\echo :SQLSTATE
RESET ROLE;
SET ROLE regress_q_admin;
-- a dead-letter queue in use
SELECT spindle.drop_queue('orders_dlq');
\echo :SQLSTATE
-- missing
SELECT spindle.drop_queue('nope');
\echo :SQLSTATE
SELECT spindle.drop_queue('nope', if_exists => true);
SELECT spindle.drop_queue('No-Pe', true);
\echo :SQLSTATE
SELECT spindle.drop_queue(NULL, true);
\echo :SQLSTATE
-- the owner
SELECT spindle.drop_queue(repeat('q', 48));
SELECT spindle.drop_queue('jobs');
SELECT spindle.drop_queue('orders_dlq');
RESET ROLE;
SELECT queue_name FROM spindle.queue_catalog ORDER BY queue_name;
SET ROLE regress_q_admin;
SELECT count(*) FROM pg_class WHERE relnamespace = 'spindle_q'::regnamespace AND relname IN ('jobs', 'orders_dlq');
-- enqueue into a dropped queue
SELECT spindle.enqueue('jobs', '{}');
\echo :SQLSTATE
-- a queue of the same name again is a new, empty queue
SELECT spindle.create_queue('jobs');
SELECT spindle.enqueue('jobs', '{"again": 1}') > 9 AS above_old_ids;
SELECT count(*) FROM spindle_q.jobs;
RESET ROLE;

-- ===================== other ways to drop ================================
-- DROP TABLE removes the registry row
SET ROLE regress_q_admin;
DROP TABLE spindle_q.retries;
RESET ROLE;
SELECT queue_name FROM spindle.queue_catalog ORDER BY queue_name;
-- a rolled-back DROP TABLE keeps it
BEGIN;
DROP TABLE spindle_q.jobs;
SELECT count(*) FROM spindle.queue_catalog WHERE queue_name = 'jobs';
ROLLBACK;
SELECT count(*) FROM spindle.queue_catalog WHERE queue_name = 'jobs';
SET ROLE regress_q_admin;
SELECT spindle.enqueue('jobs', '{"after rollback": 1}') > 0 AS ok;
-- DROP TABLE of a dead-letter queue in use is refused at commit
SELECT spindle.create_queue('dl');
SELECT spindle.create_queue('uses_dl', max_reads => 3, dead_letter_queue => 'dl');
DROP TABLE spindle_q.dl;
\echo :SQLSTATE
RESET ROLE;
SELECT queue_name, dead_letter_queue FROM spindle.queue_catalog WHERE queue_name IN ('dl', 'uses_dl') ORDER BY 1;
-- both in one statement (either order) is fine
SET ROLE regress_q_admin;
-- spindle.verify(): every spindle table left here is healthy
SELECT c.oid::regclass AS rel, v FROM pg_catalog.pg_class c, spindle.verify(c.oid) v
 WHERE c.relam = (SELECT oid FROM pg_catalog.pg_am WHERE amname = 'spindle')
 ORDER BY 1, 2;
DROP TABLE spindle_q.uses_dl, spindle_q.dl;
SELECT spindle.create_queue('dl');
SELECT spindle.create_queue('uses_dl', max_reads => 3, dead_letter_queue => 'dl');
DROP TABLE spindle_q.dl, spindle_q.uses_dl;
RESET ROLE;
SELECT count(*) FROM spindle.queue_catalog WHERE queue_name IN ('dl', 'uses_dl');
-- the schema goes only with the extension
DROP SCHEMA spindle_q CASCADE;
\echo :SQLSTATE
-- DROP OWNED drops the role's queues and their rows
DROP OWNED BY regress_q_admin;
SELECT count(*) FROM spindle.queue_catalog;
SELECT count(*) FROM pg_class WHERE relnamespace = 'spindle_q'::regnamespace;

DROP FUNCTION q_before(), q_after(), q_echo();
DROP OWNED BY regress_q_producer, regress_q_nobody, regress_q_admin2;
DROP ROLE regress_q_admin, regress_q_producer, regress_q_nobody, regress_q_admin2;
