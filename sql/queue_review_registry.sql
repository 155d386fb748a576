-- Findings of the queue review (issue 18) on the registry / producer / TTL /
-- dead-letter side, each as its contract says it must behave:
--   4: msg_ids are never given twice under one queue name (drop_queue or
--      DROP TABLE, then create_queue; TRUNCATE), so a stale ack purges
--      nothing of the new queue;
--   5: on a queue table time_to_live counts from visible_at: a delayed
--      event is not purged before it was due for the ttl;
--  26: an INSTEAD rule for INSERT on a queue's table cannot be created
--      (enqueue failed with XX000 through one);
--  15: a DELETE trigger or rule on a queue's table is refused (consumers
--      purge without them);
--  27: PREPARE TRANSACTION is refused after any ack that purged (0A000);
--  16: a queue's dead-letter queue has the queue's owner;
--  24: no cycle of dead-letter queues, even through DROP TABLE +
--      create_queue in one transaction.
SET client_min_messages = warning;

-- Run one statement in a subtransaction: 'ok: <first value>' or
-- '<SQLSTATE>: <message>'.
CREATE FUNCTION rr_try(stmt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    res text;
BEGIN
    EXECUTE stmt INTO res;
    RETURN 'ok: ' || coalesce(res, 'NULL');
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- The same for a statement that returns nothing: 'ok' or the error.
CREATE FUNCTION rr_ddl(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- ---- 4: msg_ids after drop_queue + create_queue ----
SELECT spindle.create_queue('rr_jobs') IS NOT NULL AS created;
SELECT spindle.enqueue('rr_jobs', '{"job": "old"}') AS old_id \gset
SELECT count(*) AS leased FROM spindle.read('rr_jobs', 1, '10 min');
SELECT spindle.drop_queue('rr_jobs');
SELECT spindle.create_queue('rr_jobs') IS NOT NULL AS created;
SELECT spindle.enqueue('rr_jobs', '{"job": "new"}') AS new_id \gset
SELECT :new_id > :old_id AS new_id_is_new;
-- the worker's late ack of the old job: nothing of the new queue goes
SELECT spindle.ack('rr_jobs', :old_id) AS stale_ack;
SELECT * FROM spindle.ack('rr_jobs', ARRAY[:old_id]::bigint[]);
SELECT payload FROM spindle_q.rr_jobs;
-- the floor outlives the queue; it is a dumped configuration table
SELECT queue_name, msg_id_floor > 1 AS raised FROM spindle.queue_msg_id_floor
 WHERE queue_name LIKE 'rr\_%';
SELECT c.relname FROM pg_extension e, unnest(e.extconfig) x(oid)
  JOIN pg_class c ON c.oid = x.oid
 WHERE e.extname = 'spindle' ORDER BY 1;

-- DROP TABLE + create_queue in one transaction
BEGIN;
DROP TABLE spindle_q.rr_jobs;
SELECT spindle.create_queue('rr_jobs') IS NOT NULL AS created;
COMMIT;
SELECT spindle.enqueue('rr_jobs', '{"job": "newer"}') AS newer_id \gset
SELECT :newer_id > :new_id AS newer_id_is_new;
SELECT spindle.ack('rr_jobs', :old_id) AS stale_ack_1,
       spindle.ack('rr_jobs', :new_id) AS stale_ack_2;
SELECT payload FROM spindle_q.rr_jobs;

-- a drop that rolls back keeps the queue and its numbering
BEGIN;
SELECT spindle.drop_queue('rr_jobs');
ROLLBACK;
SELECT spindle.enqueue('rr_jobs', '{"job": "after rollback"}') > :newer_id AS increasing;

-- TRUNCATE, also of a queue created in the same transaction
TRUNCATE spindle_q.rr_jobs;
SELECT spindle.enqueue('rr_jobs', '{"job": "after truncate"}') AS trunc_id \gset
SELECT :trunc_id > :newer_id AS trunc_id_is_new;
SELECT spindle.ack('rr_jobs', :newer_id) AS stale_ack_3;
BEGIN;
SELECT spindle.drop_queue('rr_jobs');
SELECT spindle.create_queue('rr_jobs') IS NOT NULL AS created;
SELECT spindle.enqueue('rr_jobs', '{"job": "in the new table"}') > :trunc_id AS increasing;
TRUNCATE spindle_q.rr_jobs;
SELECT spindle.enqueue('rr_jobs', '{"job": "truncated in it"}') AS last_id \gset
COMMIT;
SELECT :last_id > :trunc_id AS last_id_is_new;
SELECT spindle.ack('rr_jobs', :trunc_id) AS stale_ack_4;
-- an id never handed out (ahead of every event) is not acknowledged
SELECT spindle.ack('rr_jobs', :last_id + 1000) AS never_handed_out;
SELECT payload FROM spindle_q.rr_jobs;
SELECT spindle.ack('rr_jobs', :last_id) AS real_ack;
SELECT spindle.drop_queue('rr_jobs');

-- ---- 5: time_to_live of delayed events ----
SELECT spindle.create_queue('rr_ttl', time_to_live => '1 second') IS NOT NULL AS created;
SELECT spindle.enqueue('rr_ttl', '{"due": "in an hour"}', delay => '1 hour') > 0 AS enq;
SELECT spindle.enqueue('rr_ttl', '{"due": "now"}') > 0 AS enq;
SELECT spindle.enqueue('rr_ttl', '{"due": "in a second"}', delay => '1 second') > 0 AS enq;
SELECT pg_sleep(3);
-- the due-now and due-in-a-second events are a ttl past their due time
SELECT spindle.purge_expired('spindle_q.rr_ttl') AS purged;
SELECT payload FROM spindle_q.rr_ttl;
-- however short the ttl, the delayed event stays until it is due
SELECT spindle.purge_expired('spindle_q.rr_ttl', '0') AS purged;
SELECT payload FROM spindle_q.rr_ttl;
-- a plain spindle table keeps counting from the append
CREATE TABLE rr_plain (visible_at timestamptz, payload jsonb) USING spindle;
INSERT INTO rr_plain VALUES (now() + '1 hour', '{}');
SELECT pg_sleep(2);
SELECT spindle.purge_expired('rr_plain', '0') AS purged_plain;
DROP TABLE rr_plain;
SELECT spindle.drop_queue('rr_ttl');

-- ---- 26: INSTEAD rules for INSERT: refused when created, so enqueue
-- never meets one (and says 0A000 if it did) ----
SELECT spindle.create_queue('rr_rule') IS NOT NULL AS created;
CREATE TABLE rr_other (payload jsonb);
CREATE RULE r AS ON INSERT TO spindle_q.rr_rule
    DO INSTEAD INSERT INTO rr_other VALUES (NEW.payload);
SELECT rr_try($$SELECT spindle.enqueue('rr_rule', '{"x": 1}')$$);
SELECT rr_try($$SELECT count(*) FROM spindle.enqueue_batch('rr_rule', ARRAY['{"x": 2}', '{"x": 3}']::jsonb[])$$);
CREATE OR REPLACE RULE r AS ON INSERT TO spindle_q.rr_rule DO INSTEAD NOTHING;
SELECT rr_try($$SELECT spindle.enqueue('rr_rule', '{"x": 4}')$$);
CREATE OR REPLACE RULE r AS ON INSERT TO spindle_q.rr_rule
    WHERE NEW.payload ? 'skip' DO INSTEAD NOTHING;
SELECT rr_try($$SELECT spindle.enqueue('rr_rule', '{"x": 5}')$$);
-- a DO ALSO rule runs beside the INSERT, which stores the event
CREATE OR REPLACE RULE r AS ON INSERT TO spindle_q.rr_rule
    DO ALSO INSERT INTO rr_other VALUES (NEW.payload);
SELECT spindle.enqueue('rr_rule', '{"x": 6}') > 0 AS enq;
SELECT (SELECT count(*) FROM rr_other) AS other, (SELECT count(*) FROM spindle_q.rr_rule) AS queued;
DROP RULE r ON spindle_q.rr_rule;
SELECT spindle.enqueue('rr_rule', '{"x": 7}') > 0 AS enq;
DROP TABLE rr_other;
SELECT spindle.drop_queue('rr_rule');

-- ---- 15: DELETE triggers and rules ----
SELECT spindle.create_queue('rr_tg') IS NOT NULL AS created;
CREATE FUNCTION rr_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RETURN OLD; END $$;
SELECT rr_ddl($$CREATE TRIGGER g BEFORE DELETE ON spindle_q.rr_tg
    FOR EACH ROW EXECUTE FUNCTION rr_guard()$$);
SELECT rr_ddl($$CREATE TRIGGER g AFTER INSERT OR DELETE ON spindle_q.rr_tg
    FOR EACH STATEMENT EXECUTE FUNCTION rr_guard()$$);
SELECT rr_ddl($$CREATE RULE d AS ON DELETE TO spindle_q.rr_tg DO INSTEAD NOTHING$$);
-- other triggers and rules are fine, and cannot be made DELETE ones
CREATE TRIGGER g BEFORE INSERT ON spindle_q.rr_tg FOR EACH ROW EXECUTE FUNCTION rr_guard();
SELECT rr_ddl($$CREATE OR REPLACE TRIGGER g BEFORE DELETE ON spindle_q.rr_tg
    FOR EACH ROW EXECUTE FUNCTION rr_guard()$$);
CREATE RULE u AS ON UPDATE TO spindle_q.rr_tg DO INSTEAD NOTHING;
SELECT rr_ddl($$CREATE OR REPLACE RULE u AS ON DELETE TO spindle_q.rr_tg DO INSTEAD NOTHING$$);
SELECT tgname FROM pg_trigger WHERE tgrelid = 'spindle_q.rr_tg'::regclass AND NOT tgisinternal;
-- a table outside spindle_q may have them
CREATE TABLE rr_heap (a int);
CREATE TRIGGER g BEFORE DELETE ON rr_heap FOR EACH ROW EXECUTE FUNCTION rr_guard();
DROP TABLE rr_heap;
-- the foreign keys referencing a queue (internal DELETE triggers) are
-- still made; consuming is what refuses them (queue_fk)
CREATE UNIQUE INDEX rr_tg_id ON spindle_q.rr_tg (msg_id);
CREATE TABLE rr_ref (id bigint REFERENCES spindle_q.rr_tg (msg_id));
SELECT rr_try($$SELECT spindle.enqueue('rr_tg', '{}')$$) LIKE 'ok: %' AS enq;
DROP TABLE rr_ref;
SELECT spindle.drop_queue('rr_tg');
DROP FUNCTION rr_guard();

-- ---- 27: PREPARE after an ack of an event ahead of the head ----
SELECT spindle.create_queue('rr_prep') IS NOT NULL AS created;
SELECT max(id) AS last_prep FROM spindle.enqueue_batch('rr_prep',
    ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[]) id \gset
BEGIN;
SELECT spindle.ack('rr_prep', :last_prep) AS acked;
PREPARE TRANSACTION 'rr_prep';
SELECT count(*) AS still_there FROM spindle_q.rr_prep;
-- a transaction that acknowledged nothing may be prepared
BEGIN;
SELECT spindle.ack('rr_prep', :last_prep + 1) AS acked;
PREPARE TRANSACTION 'rr_prep';
ROLLBACK PREPARED 'rr_prep';
SELECT spindle.drop_queue('rr_prep');

-- ---- 16 and 24: dead-letter queues ----
CREATE ROLE regress_rr_a;
CREATE ROLE regress_rr_b;
GRANT CREATE ON SCHEMA spindle_q TO regress_rr_a, regress_rr_b;
SET ROLE regress_rr_b;
SELECT spindle.create_queue('rr_d') IS NOT NULL AS created;
GRANT INSERT ON spindle_q.rr_d TO PUBLIC;
SET ROLE regress_rr_a;
-- another role's queue cannot be the dead-letter queue (nor pinned)
SELECT rr_try($$SELECT spindle.create_queue('rr_q', max_reads => 1, dead_letter_queue => 'rr_d')$$);
RESET ROLE;
-- not even by a superuser: the reader would run regress_rr_b's code
SELECT rr_try($$SELECT spindle.create_queue('rr_q', max_reads => 1, dead_letter_queue => 'rr_d')$$);
SET ROLE regress_rr_b;
SELECT spindle.drop_queue('rr_d');
SELECT spindle.create_queue('rr_d') IS NOT NULL AS created;
SELECT spindle.create_queue('rr_q', max_reads => 1, dead_letter_queue => 'rr_d') IS NOT NULL AS created;
RESET ROLE;
-- changing the owner of one of them alone is refused at commit
ALTER TABLE spindle_q.rr_d OWNER TO regress_rr_a;
BEGIN;
ALTER TABLE spindle_q.rr_q OWNER TO regress_rr_a;
ALTER TABLE spindle_q.rr_d OWNER TO regress_rr_a;
COMMIT;
SELECT c.relname, c.relowner::regrole FROM pg_class c
 WHERE c.oid IN ('spindle_q.rr_q'::regclass, 'spindle_q.rr_d'::regclass) ORDER BY 1;
REASSIGN OWNED BY regress_rr_a TO regress_rr_b;
SET ROLE regress_rr_b;
-- 24: a cycle through DROP TABLE + create_queue in one transaction
SELECT rr_try($$SELECT spindle.drop_queue('rr_d')$$);
BEGIN;
DROP TABLE spindle_q.rr_d;
SELECT rr_try($$SELECT spindle.create_queue('rr_d', max_reads => 1, dead_letter_queue => 'rr_q')$$);
ROLLBACK;
-- and a longer one: rr_q -> rr_d -> rr_e, then rr_e -> rr_q
SELECT spindle.create_queue('rr_e') IS NOT NULL AS created;
BEGIN;
DROP TABLE spindle_q.rr_d;
SELECT spindle.create_queue('rr_d', max_reads => 1, dead_letter_queue => 'rr_e') IS NOT NULL AS created;
COMMIT;
BEGIN;
DROP TABLE spindle_q.rr_e;
SELECT rr_try($$SELECT spindle.create_queue('rr_e', max_reads => 1, dead_letter_queue => 'rr_q')$$);
ROLLBACK;
RESET ROLE;
SELECT queue_name, dead_letter_queue FROM spindle.queue_catalog
 WHERE queue_name LIKE 'rr\_%' ORDER BY 1;
SET ROLE regress_rr_b;
SELECT spindle.drop_queue('rr_q');
SELECT spindle.drop_queue('rr_d');
SELECT spindle.drop_queue('rr_e');
RESET ROLE;
REVOKE CREATE ON SCHEMA spindle_q FROM regress_rr_a, regress_rr_b;
DROP ROLE regress_rr_a;
DROP ROLE regress_rr_b;
DROP FUNCTION rr_try(text);
DROP FUNCTION rr_ddl(text);
