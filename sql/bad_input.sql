-- Bad input to every function and view of the extension (sql/spindle--0.1.sql):
-- NULLs, negative and huge numbers, relations of the wrong kind, names that
-- need quoting.  Each call must fail with a clear error and a proper
-- SQLSTATE (never XX000, never a crash) or do nothing harmful, and the
-- tables must be as they were.
SET client_min_messages = warning;

-- Run one statement in a subtransaction: 'ok: <first value>' or
-- '<SQLSTATE>: <message>'.
CREATE FUNCTION bi_try(stmt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    res text;
BEGIN
    EXECUTE stmt INTO res;
    RETURN 'ok: ' || coalesce(res, 'NULL');
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- relations of every kind
CREATE TABLE bi_t (id int, body text) USING spindle WITH (events_per_spindle = 5);
CREATE INDEX bi_t_id ON bi_t (id);
INSERT INTO bi_t SELECT g, 'e' || g FROM generate_series(1, 12) g;
CREATE TABLE bi_heap (a int);
INSERT INTO bi_heap VALUES (1);
CREATE VIEW bi_view AS SELECT 1 AS a;
CREATE SEQUENCE bi_seq;
CREATE TABLE bi_part (a int) PARTITION BY RANGE (a);
CREATE MATERIALIZED VIEW bi_mv AS SELECT 1 AS a;
CREATE TYPE bi_comp AS (a int);
CREATE FOREIGN DATA WRAPPER bi_fdw;
CREATE SERVER bi_srv FOREIGN DATA WRAPPER bi_fdw;
CREATE FOREIGN TABLE bi_foreign (a int) SERVER bi_srv;
SELECT spindle.create_queue('bq', events_per_spindle => 4);
SELECT count(*) FROM spindle.enqueue_batch('bq',
    ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 9) g));
CREATE TABLE spindle_q.notaqueue (msg_id bigint, payload jsonb);
-- a spindle relation, a TOAST table, an index of a spindle table
SELECT 'pg_spindle.' || relname AS bi_segment FROM pg_class
 WHERE oid = (SELECT min(segment) FROM spindle.spindle_catalog
               WHERE relation = 'bi_t'::regclass) \gset
SELECT reltoastrelid::regclass AS bi_toast FROM pg_class
 WHERE oid = :'bi_segment'::regclass \gset

-- what must not change
CREATE TABLE bi_before AS
    SELECT 'bi_t' AS t, id::text AS k, body AS v FROM bi_t
    UNION ALL SELECT 'bq', msg_id::text, payload::text FROM spindle_q.bq
    UNION ALL SELECT 'heap', a::text, NULL FROM bi_heap
    UNION ALL SELECT 'catalog', spindle_no::text || '/' || relation::regclass::text,
                     coalesce(filled_at::text, '') || coalesce(dropped_at::text, '')
                FROM spindle.spindle_catalog
    UNION ALL SELECT 'queues', queue_name, relation::text || max_reads::text FROM spindle.queue_catalog
    UNION ALL SELECT 'spindle_q', relname, NULL FROM pg_class
               WHERE relnamespace = 'spindle_q'::regnamespace;

CREATE TABLE bi_calls (id serial, stmt text);
-- regclass arguments: relations of every wrong kind
INSERT INTO bi_calls (stmt)
SELECT format(f, r) FROM
  unnest(ARRAY[
    'SELECT spindle.drop_spindles(%s)',
    'SELECT spindle.purge_expired(%s, ''1 s'')',
    'SELECT spindle.purge_expired(%s)',
    'SELECT (spindle._table_options(%s)).events_per_spindle',
    'SELECT spindle._purge_events(%s, ARRAY[''(0,1)'']::tid[])',
    'SELECT count(*) FROM spindle.verify(%s)']) WITH ORDINALITY AS fs(f, fi),
  unnest(ARRAY[
    '''bi_heap''', '''bi_view''', '''bi_seq''', '''bi_part''', '''bi_mv''',
    '''bi_comp''', '''bi_foreign''', '''bi_t_id''', '''spindle_q.notaqueue''',
    quote_literal(:'bi_segment'), quote_literal(:'bi_toast'),
    '0', '4294967295::oid', '''pg_class''']) WITH ORDINALITY AS rs(r, ri)
ORDER BY fi, ri;
-- NULLs and numbers out of range
INSERT INTO bi_calls (stmt) VALUES
    ('SELECT spindle.purge_expired(''bi_t'', NULL)'),
    ('SELECT spindle.purge_expired(NULL, ''1 s'')'),
    ('SELECT spindle.purge_expired(''bi_t'', ''-1 s'')'),
    ('SELECT spindle.purge_expired(''bi_t'', ''-178000000 years'')'),
    ('SELECT spindle.purge_expired(''bi_t'', ''178000000 years'')'),
    ('SELECT spindle.purge_expired(''bi_t'', ''-2147483648 months -2147483648 days'')'),
    ('SELECT (spindle._table_options(NULL)).events_per_spindle'),
    ('SELECT spindle._purge_events(''bi_t'', NULL)'),
    ('SELECT spindle._purge_events(NULL, ARRAY[''(0,1)'']::tid[])'),
    ('SELECT spindle._purge_events(''bi_t'', ARRAY[NULL]::tid[])'),
    ('SELECT spindle._purge_events(''bi_t'', ''{}'')'),
    ('SELECT spindle._purge_events(''bi_t'', ARRAY[''(0,0)'', ''(4294967295,65535)'', ''(131072,1)'', ''(0,292)'']::tid[])'),
    ('SELECT spindle._purge_events(''bi_t'', ARRAY[[''(0,1)'']]::tid[])'),
    ('SELECT spindle._xid_is_current(NULL)'),
    ('SELECT spindle._xid_is_current(''0'')'),
    ('SELECT spindle._xid_is_current(''4294967295'')'),
    ('SELECT spindle.spindle_handler(NULL)'),
    ('SELECT spindle.segment_handler(NULL)'),
    ('SELECT count(*) FROM spindle.verify(NULL)'),
    ('SELECT spindle._verify_corrupt(''bi_t'', ''nonsense'', 0)'),
    ('SELECT spindle._verify_corrupt(''bi_t'', ''map_clear'', -1)'),
    ('SELECT spindle._verify_corrupt(''bi_t'', ''map_clear'', 9223372036854775807)'),
    ('SELECT spindle._verify_corrupt(''bi_heap'', ''map_clear'', 0)'),
    -- create_queue
    ('SELECT spindle.create_queue(NULL)'),
    ('SELECT spindle.create_queue('''')'),
    ('SELECT spindle.create_queue(''Weird Name'')'),
    ('SELECT spindle.create_queue(''"bq"'')'),
    ('SELECT spindle.create_queue(''bq''''; DROP TABLE bi_heap; --'')'),
    ('SELECT spindle.create_queue(''x; DROP TABLE bi_heap'')'),
    ('SELECT spindle.create_queue(''BQ'')'),
    ('SELECT spindle.create_queue(''1bq'')'),
    ('SELECT spindle.create_queue(E''bq\n'')'),
    ('SELECT spindle.create_queue(''bé'')'),
    ('SELECT spindle.create_queue(repeat(''a'', 49))'),
    ('SELECT spindle.create_queue(repeat(''a'', 100000))'),
    ('SELECT spindle.create_queue(''bq'')'),
    ('SELECT spindle.create_queue(''notaqueue'')'),
    ('SELECT spindle.create_queue(''bq_new'', events_per_spindle => -1)'),
    ('SELECT spindle.create_queue(''bq_new'', events_per_spindle => 38141953)'),
    ('SELECT spindle.create_queue(''bq_new'', events_per_spindle => 2147483647)'),
    ('SELECT spindle.create_queue(''bq_new'', events_per_spindle => -2147483648)'),
    ('SELECT spindle.create_queue(''bq_new'', time_to_live => ''-1 s'')'),
    ('SELECT spindle.create_queue(''bq_new'', time_to_live => ''0'')'),
    ('SELECT spindle.create_queue(''bq_new'', time_to_live => ''1 month -40 days'')'),
    ('SELECT spindle.create_queue(''bq_new'', max_reads => 0)'),
    ('SELECT spindle.create_queue(''bq_new'', max_reads => -1)'),
    ('SELECT spindle.create_queue(''bq_new'', dead_letter_queue => ''bq'')'),
    ('SELECT spindle.create_queue(''bq_new'', max_reads => 1, dead_letter_queue => ''bq_new'')'),
    ('SELECT spindle.create_queue(''bq_new'', max_reads => 1, dead_letter_queue => ''missing'')'),
    ('SELECT spindle.create_queue(''bq_new'', max_reads => 1, dead_letter_queue => ''Bad Name'')'),
    ('SELECT spindle.create_queue(''bq_new'', max_reads => 1, dead_letter_queue => '''')'),
    ('SELECT spindle.create_queue(''bq_new'', max_reads => 1, dead_letter_queue => ''notaqueue'')'),
    -- drop_queue
    ('SELECT spindle.drop_queue(NULL)'),
    ('SELECT spindle.drop_queue(''bq'', NULL)'),
    ('SELECT spindle.drop_queue(''Weird Name'')'),
    ('SELECT spindle.drop_queue(''bq''''; DROP TABLE bi_heap; --'')'),
    ('SELECT spindle.drop_queue(''missing'')'),
    ('SELECT spindle.drop_queue(''notaqueue'')'),
    ('SELECT spindle.drop_queue(''notaqueue'', true)'),
    -- enqueue
    ('SELECT spindle.enqueue(NULL, ''{}'')'),
    ('SELECT spindle.enqueue(''Weird Name'', ''{}'')'),
    ('SELECT spindle.enqueue(''bq''''; DROP TABLE bi_heap; --'', ''{}'')'),
    ('SELECT spindle.enqueue(''missing'', ''{}'')'),
    ('SELECT spindle.enqueue(''notaqueue'', ''{}'')'),
    ('SELECT spindle.enqueue(''bq'', NULL)'),
    ('SELECT spindle.enqueue(''bq'', ''{}'', NULL)'),
    ('SELECT spindle.enqueue(''bq'', ''{}'', ''-1 s'')'),
    ('SELECT spindle.enqueue(''bq'', ''{}'', ''1 month -40 days'')'),
    ('SELECT spindle.enqueue(''bq'', ''{}'', ''178000000 years'')'),
    ('SELECT spindle.enqueue(''bq'', ''{}'', ''2147483647 months 2147483647 days 9223372036854775807 microseconds'')'),
    -- enqueue_batch
    ('SELECT count(*) FROM spindle.enqueue_batch(NULL, ARRAY[''{}'']::jsonb[])'),
    ('SELECT count(*) FROM spindle.enqueue_batch(''Weird Name'', ARRAY[''{}'']::jsonb[])'),
    ('SELECT count(*) FROM spindle.enqueue_batch(''bq'', NULL)'),
    ('SELECT count(*) FROM spindle.enqueue_batch(''bq'', ARRAY[''{}'', NULL]::jsonb[])'),
    ('SELECT count(*) FROM spindle.enqueue_batch(''bq'', ARRAY[[''{}''], [''{}'']]::jsonb[])'),
    ('SELECT count(*) FROM spindle.enqueue_batch(''bq'', ARRAY[''{}'']::jsonb[], NULL)'),
    ('SELECT count(*) FROM spindle.enqueue_batch(''bq'', ARRAY[''{}'']::jsonb[], ''-1 s'')'),
    ('SELECT count(*) FROM spindle.enqueue_batch(''bq'', ARRAY[''{}'']::jsonb[], ''178000000 years'')'),
    -- dequeue
    ('SELECT count(*) FROM spindle.dequeue(NULL)'),
    ('SELECT count(*) FROM spindle.dequeue(''Weird Name'')'),
    ('SELECT count(*) FROM spindle.dequeue(''bq''''; DROP TABLE bi_heap; --'')'),
    ('SELECT count(*) FROM spindle.dequeue(''missing'')'),
    ('SELECT count(*) FROM spindle.dequeue(''notaqueue'')'),
    ('SELECT count(*) FROM spindle.dequeue(''bq'', NULL)'),
    ('SELECT count(*) FROM spindle.dequeue(''bq'', 0)'),
    ('SELECT count(*) FROM spindle.dequeue(''bq'', -1)'),
    ('SELECT count(*) FROM spindle.dequeue(''bq'', -2147483648)'),
    ('SELECT count(*) FROM spindle.dequeue(''bq'', 1, NULL)'),
    ('SELECT count(*) FROM spindle.dequeue(''bq'', 1, ''-1 s'')'),
    ('SELECT count(*) FROM spindle.dequeue(''bq'', 1, ''1 month -40 days'')'),
    -- read
    ('SELECT count(*) FROM spindle.read(NULL, 1, ''1 s'')'),
    ('SELECT count(*) FROM spindle.read(''Weird Name'', 1, ''1 s'')'),
    ('SELECT count(*) FROM spindle.read(''missing'', 1, ''1 s'')'),
    ('SELECT count(*) FROM spindle.read(''bq'', NULL, ''1 s'')'),
    ('SELECT count(*) FROM spindle.read(''bq'', 0, ''1 s'')'),
    ('SELECT count(*) FROM spindle.read(''bq'', -5, ''1 s'')'),
    ('SELECT count(*) FROM spindle.read(''bq'', 1, NULL)'),
    ('SELECT count(*) FROM spindle.read(''bq'', 1, ''-1 s'')'),
    ('SELECT count(*) FROM spindle.read(''bq'', 1, ''1 month -40 days'')'),
    ('SELECT count(*) FROM spindle.read(''bq'', 1, ''1 s'', NULL)'),
    ('SELECT count(*) FROM spindle.read(''bq'', 1, ''1 s'', ''-1 s'')'),
    -- ack
    ('SELECT spindle.ack(NULL, 1::bigint)'),
    ('SELECT spindle.ack(''Weird Name'', 1::bigint)'),
    ('SELECT spindle.ack(''missing'', 1::bigint)'),
    ('SELECT spindle.ack(''bq'', NULL::bigint)'),
    ('SELECT spindle.ack(''bq'', 0::bigint)'),
    ('SELECT spindle.ack(''bq'', -1::bigint)'),
    ('SELECT spindle.ack(''bq'', ''-9223372036854775808''::bigint)'),
    ('SELECT spindle.ack(''bq'', 9223372036854775807::bigint)'),
    ('SELECT spindle.ack(''bq'', 67108863)'),
    ('SELECT spindle.ack(''bq'', 1000000::bigint << 26)'),
    ('SELECT count(*) FROM spindle.ack(NULL, ARRAY[1]::bigint[])'),
    ('SELECT count(*) FROM spindle.ack(''bq'', NULL::bigint[])'),
    ('SELECT count(*) FROM spindle.ack(''bq'', ARRAY[NULL]::bigint[])'),
    ('SELECT count(*) FROM spindle.ack(''bq'', ''{}''::bigint[])'),
    ('SELECT count(*) FROM spindle.ack(''bq'', ARRAY[[1],[2]]::bigint[])'),
    ('SELECT count(*) FROM spindle.ack(''bq'', ARRAY[[(SELECT min(msg_id) FROM spindle_q.bq)]])'),
    ('SELECT count(*) FROM spindle.ack(''bq'', ARRAY[-1, 0, 9223372036854775807]::bigint[])'),
    -- set_visibility
    ('SELECT spindle.set_visibility(NULL, 1, ''1 s'')'),
    ('SELECT spindle.set_visibility(''Weird Name'', 1, ''1 s'')'),
    ('SELECT spindle.set_visibility(''missing'', 1, ''1 s'')'),
    ('SELECT spindle.set_visibility(''bq'', NULL, ''1 s'')'),
    ('SELECT spindle.set_visibility(''bq'', 1, NULL)'),
    ('SELECT spindle.set_visibility(''bq'', 1, ''-1 s'')'),
    ('SELECT spindle.set_visibility(''bq'', -1, ''1 s'')'),
    ('SELECT spindle.set_visibility(''bq'', 9223372036854775807, ''1 s'')'),
    ('SELECT spindle.set_visibility(''bq'', 1, ''178000000 years'')'),
    -- the views and their functions
    ('SELECT count(*) FROM spindle.spindles WHERE relation = 0::oid::regclass'),
    ('SELECT count(*) FROM spindle.tables WHERE relation = ''bi_heap''::regclass'),
    ('SELECT count(*) > 0 FROM spindle._spindle_info()'),
    ('SELECT count(*) >= 0 FROM spindle.worker'),
    ('SELECT count(*) >= 0 FROM spindle._worker_info()');

-- the largest interval is a valid time to live; no event is that old, so
-- nothing is purged (a purge used to fail with 22008, and the worker with
-- it at every round for such a table)
INSERT INTO bi_calls (stmt) VALUES
    ('SELECT spindle.purge_expired(''bi_t'', ''2147483647 months 2147483647 days 9223372036854775807 microseconds'')'),
    ('SELECT spindle.purge_expired(''bi_t'', ''100 years'')'),
    ('SELECT spindle.purge_expired(''bi_t'', ''1 day'')');

CREATE TABLE bi_results AS SELECT id, stmt, bi_try(stmt) AS result FROM bi_calls;
SELECT id, regexp_replace(regexp_replace(stmt, 's[0-9]+_', 's#_'), 'pg_toast_[0-9]+', 'pg_toast_#') AS stmt,
       regexp_replace(regexp_replace(result, 's[0-9]+_', 's#_'), 'pg_toast_[0-9]+', 'pg_toast_#') AS result
  FROM bi_results ORDER BY id;

-- no internal error anywhere
SELECT count(*) AS internal_errors FROM bi_results WHERE result LIKE 'XX%';
SELECT count(*) AS calls FROM bi_results;

-- and nothing changed
CREATE TABLE bi_after AS
    SELECT 'bi_t' AS t, id::text AS k, body AS v FROM bi_t
    UNION ALL SELECT 'bq', msg_id::text, payload::text FROM spindle_q.bq
    UNION ALL SELECT 'heap', a::text, NULL FROM bi_heap
    UNION ALL SELECT 'catalog', spindle_no::text || '/' || relation::regclass::text,
                     coalesce(filled_at::text, '') || coalesce(dropped_at::text, '')
                FROM spindle.spindle_catalog
    UNION ALL SELECT 'queues', queue_name, relation::text || max_reads::text FROM spindle.queue_catalog
    UNION ALL SELECT 'spindle_q', relname, NULL FROM pg_class
               WHERE relnamespace = 'spindle_q'::regnamespace;
(SELECT 'gone' AS what, * FROM bi_before EXCEPT ALL SELECT 'gone', * FROM bi_after)
UNION ALL
(SELECT 'new', * FROM bi_after EXCEPT ALL SELECT 'new', * FROM bi_before)
ORDER BY 1, 2, 3;
-- no event was leased, claimed or purged by a bad call: all 9 come out,
-- each read for the first time
SELECT count(*), min(read_count), max(read_count)
  FROM spindle.read('bq', 100, '1 hour');
SELECT count(*) FROM spindle.verify('bi_t');
SELECT count(*) FROM spindle.verify('spindle_q.bq');

SELECT spindle.drop_queue('bq');

-- Extreme but valid input: the largest intervals.
-- A queue whose time to live is the largest interval: nothing is that old,
-- purging it purges nothing (this failed with 22008 before, and the worker
-- failed on such a table at every round).
SELECT spindle.create_queue('bq_ttl', time_to_live => '178000000 years');
SELECT spindle.enqueue('bq_ttl', '{}') > 0 AS enqueued;
SELECT spindle.purge_expired('spindle_q.bq_ttl');
SELECT count(*) FROM spindle_q.bq_ttl;
SELECT spindle.drop_queue('bq_ttl');
-- an array with another lower bound is still one-dimensional
SELECT spindle.create_queue('bw');
SELECT count(*) FROM spindle.enqueue_batch('bw', '[5:6]={"{\"a\": 1}","{\"b\": 2}"}'::jsonb[]);
-- a lease of the largest interval hides its event for good; the other
-- event is still delivered
SELECT payload FROM spindle.read('bw', 1, '178000000 years');
SELECT payload FROM spindle.read('bw', 5, '1 hour');
SELECT bi_try($$SELECT spindle.set_visibility('bw', (SELECT min(msg_id) FROM spindle_q.bw),
    '2147483647 months 2147483647 days 9223372036854775807 microseconds')$$);
SELECT count(*) FROM spindle.read('bw', 5, '1 hour');
-- 7116799 months (593 066 years) in microseconds passes 2^64: it must not
-- wrap around to a negative timeout (or a short one)
SELECT count(*) FROM spindle.enqueue_batch('bw', ARRAY['{"c": 3}', '{"d": 4}']::jsonb[]);
SELECT bi_try($$SELECT payload FROM spindle.read('bw', 1, '7116799 months')$$);
SELECT bi_try($$SELECT payload FROM spindle.read('bw', 1, '7116800 months')$$);
SELECT count(*) FROM spindle.read('bw', 5, '1 hour');
-- the longest wait waits (until statement_timeout here)
SELECT spindle.drop_queue('bw');
SELECT spindle.create_queue('bw');
SET statement_timeout = '300ms';
SELECT count(*) FROM spindle.dequeue('bw', 1, '178000000 years');
SELECT count(*) FROM spindle.read('bw', 1, '1 s', '2147483647 months 2147483647 days 9223372036854775807 microseconds');
SELECT count(*) FROM spindle.dequeue('bw', 1, '7116799 months');
SELECT count(*) FROM spindle.dequeue('bw', 1, '30 days');
RESET statement_timeout;
SELECT spindle.drop_queue('bw');
DROP TABLE spindle_q.notaqueue;
DROP TABLE bi_t, bi_heap, bi_part, bi_before, bi_after, bi_calls, bi_results;
DROP VIEW bi_view;
DROP MATERIALIZED VIEW bi_mv;
DROP SEQUENCE bi_seq;
DROP TYPE bi_comp;
DROP FOREIGN TABLE bi_foreign;
DROP SERVER bi_srv;
DROP FOREIGN DATA WRAPPER bi_fdw;
DROP FUNCTION bi_try(text);
