-- privileges_queue: what a role may do with a queue is what the queue
-- table's GRANTs allow, through the queue functions, plain SQL, the views
-- and the spindle relations underneath alike.
--   enqueue, enqueue_batch: INSERT (or INSERT on payload and visible_at)
--   dequeue, read, ack, set_visibility: SELECT and DELETE
--   drop_queue, purge_expired, drop_spindles(rel): the owner
--   spindle.verify: SELECT
-- The spindle relations (pg_spindle.*) and their TOAST tables belong to the
-- bootstrap superuser; nobody else may read them, and nobody may change
-- them directly (not even a superuser).
-- (warnings name spindles by OID: "no privileges were granted for ...")
SET client_min_messages = error;

CREATE FUNCTION pq_try(stmt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    res text;
BEGIN
    EXECUTE stmt INTO res;
    RETURN 'ok: ' || coalesce(res, 'NULL');
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

CREATE ROLE regress_pq_owner;
CREATE ROLE regress_pq_nobody;
CREATE ROLE regress_pq_producer;		-- INSERT
CREATE ROLE regress_pq_colproducer;	-- INSERT (payload, visible_at)
CREATE ROLE regress_pq_reader;		-- SELECT
CREATE ROLE regress_pq_deleter;		-- DELETE
CREATE ROLE regress_pq_consumer;		-- SELECT, DELETE
CREATE ROLE regress_pq_writeall IN ROLE pg_write_all_data;
CREATE ROLE regress_pq_readall IN ROLE pg_read_all_data;
GRANT CREATE ON SCHEMA spindle_q TO regress_pq_owner;

SET ROLE regress_pq_owner;
SELECT spindle.create_queue('pq', events_per_spindle => 4);
-- payloads large enough to live in the spindle's TOAST table
SELECT count(*) FROM spindle.enqueue_batch('pq',
    ARRAY(SELECT jsonb_build_object('i', g, 'pad',
                   (SELECT string_agg(md5((g * 1000 + i)::text), '')
                      FROM generate_series(1, 400) i))
            FROM generate_series(1, 6) g));
GRANT INSERT ON spindle_q.pq TO regress_pq_producer;
GRANT INSERT (payload, visible_at) ON spindle_q.pq TO regress_pq_colproducer;
GRANT SELECT ON spindle_q.pq TO regress_pq_reader;
GRANT DELETE ON spindle_q.pq TO regress_pq_deleter;
GRANT SELECT, DELETE ON spindle_q.pq TO regress_pq_consumer;
RESET ROLE;

SELECT 'pg_spindle.' || relname AS pq_seg FROM pg_class
 WHERE oid = (SELECT min(segment) FROM spindle.spindle_catalog
               WHERE relation = 'spindle_q.pq'::regclass) \gset
SELECT reltoastrelid::regclass AS pq_toast FROM pg_class
 WHERE oid = :'pq_seg'::regclass \gset
SELECT count(*) > 0 AS toasted FROM :pq_toast;
-- the spindles' owner and ACL: the bootstrap superuser's, nobody else's
SELECT DISTINCT relowner = 10 AS bootstrap_owned, relacl
  FROM pg_class c
 WHERE c.oid IN (SELECT segment FROM spindle.spindle_catalog
                  WHERE relation = 'spindle_q.pq'::regclass)
    OR c.oid IN (SELECT reltoastrelid FROM pg_class
                  WHERE oid IN (SELECT segment FROM spindle.spindle_catalog
                                 WHERE relation = 'spindle_q.pq'::regclass));
SELECT nspacl FROM pg_namespace WHERE nspname = 'pg_spindle';

CREATE TABLE pq_calls (id serial, stmt text);
INSERT INTO pq_calls (stmt) VALUES
    ('SELECT spindle.enqueue(''pq'', ''{"x": 1}'') > 0'),
    ('SELECT count(*) FROM spindle.enqueue_batch(''pq'', ARRAY[''{"x": 2}'']::jsonb[])'),
    ('SELECT count(*) FROM spindle.dequeue(''pq'', 1)'),
    ('SELECT count(*) FROM spindle.read(''pq'', 1, ''1 ms'')'),
    ('SELECT spindle.ack(''pq'', (SELECT min(msg_id) FROM spindle_q.pq))'),
    ('SELECT spindle.ack(''pq'', 1)'),
    ('SELECT count(*) FROM spindle.ack(''pq'', ARRAY[1]::bigint[])'),
    ('SELECT spindle.set_visibility(''pq'', 1, ''0'')'),
    ('SELECT spindle.drop_queue(''pq'')'),
    ('SELECT spindle.purge_expired(''spindle_q.pq'', ''1 year'')'),
    ('SELECT spindle.drop_spindles(''spindle_q.pq'')'),
    ('SELECT count(*) FROM spindle.verify(''spindle_q.pq'')'),
    ('SELECT count(*) FROM spindle_q.pq'),
    ('WITH i AS (INSERT INTO spindle_q.pq (payload) VALUES (''{"x": 3}'') RETURNING 1) SELECT count(*) FROM i'),
    ('SELECT count(*) > 0 FROM spindle.spindles WHERE relation = ''spindle_q.pq''::regclass'),
    ('SELECT count(*) > 0 FROM spindle.tables WHERE relation = ''spindle_q.pq''::regclass'),
    ('SELECT count(*) > 0 FROM spindle._spindle_info() WHERE relation = ''spindle_q.pq''::regclass'),
    ('SELECT count(*) > 0 FROM spindle.queue_catalog'),
    ('SELECT count(*) > 0 FROM spindle.spindle_catalog'),
    ('SELECT count(*) > 0 FROM spindle.table_catalog'),
    ('SELECT count(*) >= 0 FROM spindle.worker'),
    -- the spindle relation and its TOAST table, by name
    (format('SELECT count(*) > 0 FROM %s', :'pq_seg')),
    (format('SELECT count(*) > 0 FROM %s', :'pq_toast')),
    (format('WITH i AS (INSERT INTO %s (msg_id, payload) VALUES (1, ''{}'') RETURNING 1) SELECT count(*) FROM i', :'pq_seg')),
    (format('WITH u AS (UPDATE %s SET payload = ''{}'' RETURNING 1) SELECT count(*) FROM u', :'pq_seg')),
    (format('WITH d AS (DELETE FROM %s RETURNING 1) SELECT count(*) FROM d', :'pq_seg')),
    (format('SELECT count(*) FROM (SELECT 1 FROM %s FOR UPDATE) l', :'pq_seg')),
    (format('WITH i AS (INSERT INTO %s (chunk_id, chunk_seq, chunk_data) VALUES (1, 1, ''x'') RETURNING 1) SELECT count(*) FROM i', :'pq_toast')),
    (format('WITH d AS (DELETE FROM %s RETURNING 1) SELECT count(*) FROM d', :'pq_toast'));

-- DDL-like statements cannot run through EXECUTE ... INTO: plain ones
CREATE FUNCTION pq_try_cmd(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
CREATE TABLE pq_cmds (id serial, stmt text);
INSERT INTO pq_cmds (stmt) VALUES
    (format('TRUNCATE %s', :'pq_seg')),
    (format('TRUNCATE %s', :'pq_toast')),
    (format('ALTER TABLE %s OWNER TO regress_pq_nobody', :'pq_seg')),
    (format('GRANT SELECT ON %s TO regress_pq_nobody', :'pq_seg')),
    (format('DROP TABLE %s', :'pq_seg')),
    ('TRUNCATE spindle_q.pq'),
    ('LOCK TABLE spindle_q.pq IN ACCESS EXCLUSIVE MODE');

-- what each role gets: SQLSTATE (42501: insufficient_privilege) or ok
CREATE TABLE pq_results (who text, id int, result text);
CREATE FUNCTION pq_run(who text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    c record;
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', who);
    FOR c IN SELECT * FROM pq_calls ORDER BY id LOOP
        INSERT INTO pq_results VALUES (who, c.id, pq_try(c.stmt));
    END LOOP;
    FOR c IN SELECT * FROM pq_cmds ORDER BY id LOOP
        INSERT INTO pq_results VALUES (who, 100 + c.id, pq_try_cmd(c.stmt));
    END LOOP;
    RESET ROLE;
END $$;
GRANT INSERT ON pq_results TO PUBLIC;
GRANT SELECT ON pq_calls, pq_cmds TO PUBLIC;

-- each role in a transaction of its own, in this order (what one may do
-- is seen by the next ones)
BEGIN; SELECT pq_run('regress_pq_nobody'); COMMIT;
BEGIN; SELECT pq_run('regress_pq_producer'); COMMIT;
BEGIN; SELECT pq_run('regress_pq_colproducer'); COMMIT;
BEGIN; SELECT pq_run('regress_pq_reader'); COMMIT;
BEGIN; SELECT pq_run('regress_pq_deleter'); COMMIT;
BEGIN; SELECT pq_run('regress_pq_consumer'); COMMIT;
BEGIN; SELECT pq_run('regress_pq_writeall'); COMMIT;
BEGIN; SELECT pq_run('regress_pq_readall'); COMMIT;

SELECT r.id,
       regexp_replace(regexp_replace(coalesce(c.stmt, m.stmt), 's[0-9]+_', 's#_', 'g'), 'pg_toast_[0-9]+', 'pg_toast_#', 'g') AS stmt,
       string_agg(substr(r.who, 12) || ' ' ||
                  regexp_replace(regexp_replace(r.result, 's[0-9]+_', 's#_', 'g'), 'pg_toast_[0-9]+', 'pg_toast_#', 'g'),
                  E'\n' ORDER BY r.who) AS results
  FROM pq_results r
  LEFT JOIN pq_calls c ON c.id = r.id
  LEFT JOIN pq_cmds m ON m.id = r.id - 100
 GROUP BY r.id, c.stmt, m.stmt ORDER BY r.id;

-- a GRANT by a non-owner granted nothing
SELECT relacl FROM pg_class WHERE oid = :'pq_seg'::regclass;

-- COPY and VACUUM FULL cannot run in PL/pgSQL: as each role in turn
\set VERBOSITY terse
SET ROLE regress_pq_nobody;
COPY :pq_seg TO STDOUT;
COPY :pq_toast TO STDOUT;
COPY :pq_seg (payload) FROM STDIN;
{}
\.
VACUUM FULL :pq_seg;
SET ROLE regress_pq_reader;
COPY :pq_seg TO STDOUT;
COPY :pq_toast TO STDOUT;
SET ROLE regress_pq_writeall;
COPY :pq_seg (msg_id, enqueued_at, visible_at, payload) FROM STDIN;
1	2020-01-01	2020-01-01	{}
\.
VACUUM FULL :pq_seg;
SET ROLE regress_pq_readall;
COPY (SELECT count(*) > 0 FROM :pq_seg) TO STDOUT;
RESET ROLE;
\set VERBOSITY default

-- nobody can change the spindle directly, not even a superuser
SELECT pq_try(format('WITH i AS (INSERT INTO %s (msg_id, payload) VALUES (1, ''{}'') RETURNING 1) SELECT count(*) FROM i', :'pq_seg'));
SELECT pq_try(format('WITH d AS (DELETE FROM %s RETURNING 1) SELECT count(*) FROM d', :'pq_seg'));
SELECT pq_try(format('WITH u AS (UPDATE %s SET payload = ''{}'' RETURNING 1) SELECT count(*) FROM u', :'pq_seg'));
SELECT pq_try(format('SELECT count(*) FROM (SELECT 1 FROM %s FOR SHARE) l', :'pq_seg'));
\set VERBOSITY terse
COPY :pq_seg (msg_id, enqueued_at, visible_at, payload) FROM STDIN;
1	2020-01-01	2020-01-01	{}
\.
\set VERBOSITY default
-- and the queue is healthy
SELECT * FROM spindle.verify('spindle_q.pq');

-- GRANT and REVOKE work as on heap: REVOKE takes effect at once
SET ROLE regress_pq_owner;
REVOKE INSERT ON spindle_q.pq FROM regress_pq_producer;
GRANT SELECT, DELETE ON spindle_q.pq TO regress_pq_producer;
RESET ROLE;
SET ROLE regress_pq_producer;
SELECT pq_try('SELECT spindle.enqueue(''pq'', ''{}'') > 0');
SELECT pq_try('SELECT count(*) FROM spindle.read(''pq'', 1, ''1 ms'')');
RESET ROLE;
SET ROLE regress_pq_owner;
GRANT INSERT ON spindle_q.pq TO PUBLIC;
RESET ROLE;
SET ROLE regress_pq_nobody;
SELECT pq_try('SELECT spindle.enqueue(''pq'', ''{}'') > 0');
SELECT pq_try('SELECT count(*) FROM spindle.dequeue(''pq'')');
RESET ROLE;
-- a dead-letter move needs INSERT on the dead-letter queue: checked before
-- anything is taken, also by a read that has nothing to move
SET ROLE regress_pq_owner;
SELECT spindle.create_queue('pq_dead');
SELECT spindle.create_queue('pq_once', max_reads => 1, dead_letter_queue => 'pq_dead');
SELECT spindle.enqueue('pq_once', '{"once": 1}') > 0;
GRANT SELECT, DELETE ON spindle_q.pq_once TO regress_pq_consumer;
RESET ROLE;
SET ROLE regress_pq_consumer;
SELECT count(*) FROM spindle.read('pq_once', 1, '0');
SELECT pq_try('SELECT count(*) FROM spindle.read(''pq_once'', 1, ''0'')');
RESET ROLE;
SELECT count(*) FROM spindle_q.pq_once;
SELECT count(*) FROM spindle_q.pq_dead;

-- no function of the extension is SECURITY DEFINER; none is in SQL or
-- PL/pgSQL (whose body a caller's search_path could redirect); the
-- internal ones are not for PUBLIC
SELECT p.oid::regprocedure, p.prosecdef, l.lanname
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
 WHERE p.oid IN (SELECT objid FROM pg_depend
                  WHERE refclassid = 'pg_extension'::regclass
                    AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'spindle')
                    AND classid = 'pg_proc'::regclass)
   AND (p.prosecdef OR l.lanname NOT IN ('c', 'internal'))
 ORDER BY 1;
SELECT p.oid::regprocedure
  FROM pg_proc p
 WHERE p.pronamespace = 'spindle'::regnamespace
   AND NOT has_function_privilege('public', p.oid, 'EXECUTE')
 ORDER BY 1;

-- The overflow policies run as the queue's owner (a producer with INSERT
-- alone may apply them), as PostgreSQL's maintenance commands run code as
-- a table's owner: restricted, with search_path = pg_catalog, pg_temp.  A
-- producer's function named as one the owner's dead-letter trigger calls
-- unqualified must not run as the owner: the trigger finds no function
-- (42883) and the enqueue changes nothing; qualified, it works.
CREATE SCHEMA pq_own AUTHORIZATION regress_pq_owner;
CREATE SCHEMA pq_prod AUTHORIZATION regress_pq_producer;
SET ROLE regress_pq_owner;
GRANT USAGE ON SCHEMA pq_own TO PUBLIC;
CREATE TABLE pq_own.secret (s text);
INSERT INTO pq_own.secret VALUES ('the owner''s secret');
CREATE TABLE pq_own.notes (who text, note text);
CREATE FUNCTION pq_own.note(t text) RETURNS void LANGUAGE sql
    AS 'INSERT INTO pq_own.notes SELECT current_user, t';
CREATE FUNCTION pq_own.dl_trigger() RETURNS trigger LANGUAGE plpgsql
    AS $$ BEGIN PERFORM note('dead-lettered'); RETURN NEW; END $$;
SELECT spindle.create_queue('pq_dl');
CREATE TRIGGER pq_dl_note BEFORE INSERT ON spindle_q.pq_dl
    FOR EACH ROW EXECUTE FUNCTION pq_own.dl_trigger();
SELECT spindle.create_queue('pq_full', max_depth => 1,
    overflow => 'dead_letter', dead_letter_queue => 'pq_dl');
GRANT INSERT ON spindle_q.pq_full TO regress_pq_producer;
SELECT spindle.enqueue('pq_full', '1') > 0 AS enqueued;
SET ROLE regress_pq_producer;
SELECT pq_try('SELECT s FROM pq_own.secret');
GRANT USAGE ON SCHEMA pq_prod TO PUBLIC;
CREATE TABLE pq_prod.loot (who text, s text);
GRANT INSERT ON pq_prod.loot TO PUBLIC;
CREATE FUNCTION pq_prod.note(t text) RETURNS void LANGUAGE sql
    AS 'INSERT INTO pq_prod.loot SELECT current_user, s FROM pq_own.secret';
SET search_path = pq_prod, pq_own, public;
SELECT pq_try('SELECT spindle.enqueue(''pq_full'', ''2'')');
SELECT pq_try('SELECT spindle.enqueue_batch(''pq_full'', ''{3}'')::text');
RESET search_path;
SELECT * FROM pq_prod.loot;
RESET ROLE;
SELECT payload FROM spindle_q.pq_full ORDER BY msg_id;
SELECT count(*) FROM spindle_q.pq_dl;
SET ROLE regress_pq_owner;
CREATE OR REPLACE FUNCTION pq_own.dl_trigger() RETURNS trigger
    LANGUAGE plpgsql
    AS $$ BEGIN PERFORM pq_own.note('dead-lettered'); RETURN NEW; END $$;
SET ROLE regress_pq_producer;
SET search_path = pq_prod, pq_own, public;
SELECT pq_try('SELECT (spindle.enqueue(''pq_full'', ''2'') > 0)::text');
RESET search_path;
SELECT * FROM pq_prod.loot;
RESET ROLE;
SELECT payload FROM spindle_q.pq_full ORDER BY msg_id;
SELECT payload FROM spindle_q.pq_dl ORDER BY msg_id;
SELECT * FROM pq_own.notes;
SELECT spindle.drop_queue('pq_full');
SELECT spindle.drop_queue('pq_dl');
DROP SCHEMA pq_own, pq_prod CASCADE;

SELECT spindle.drop_queue('pq_once');
SELECT spindle.drop_queue('pq_dead');
SELECT spindle.drop_queue('pq');
DROP FUNCTION pq_run(text), pq_try(text), pq_try_cmd(text);
DROP TABLE pq_calls, pq_cmds, pq_results;
REVOKE CREATE ON SCHEMA spindle_q FROM regress_pq_owner;
DROP ROLE regress_pq_owner, regress_pq_nobody, regress_pq_producer,
    regress_pq_colproducer, regress_pq_reader, regress_pq_deleter,
    regress_pq_consumer, regress_pq_writeall, regress_pq_readall;
