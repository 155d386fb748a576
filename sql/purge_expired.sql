--
-- spindle.purge_expired(rel, ttl): deletes, in the caller's transaction,
-- the events of rel appended more than ttl ago and returns how many.  It
-- never purges an event younger than ttl; it may purge one later than
-- exactly ttl.
--
-- The worker is off here (test/spindle.conf).  Each event carries its
-- append time in whole seconds, rounded up: an event is never purged
-- before it is ttl old, and every event appended more than ttl + 1 s ago
-- is purged.  The counts below rely on nothing else: after the sleep of
-- 2.1 s, the old events are more than 1 s + 1 s old.
--
CREATE FUNCTION pe_sqlstate(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;

-- Old events: appended before the first sample below.
CREATE TABLE pe_old (id int, body text) USING spindle
    WITH (events_per_spindle = 1000);
CREATE INDEX pe_old_id ON pe_old (id);
INSERT INTO pe_old SELECT g, 'old ' || g FROM generate_series(1, 100) g;
-- spindle 1 fills now; spindle 2 gets its events after the sleep
CREATE TABLE pe_mixed (id int) USING spindle WITH (events_per_spindle = 10);
INSERT INTO pe_mixed SELECT generate_series(1, 10);
-- unlogged: dated like any other table
CREATE UNLOGGED TABLE pe_unlogged (id int) USING spindle
    WITH (events_per_spindle = 10);
INSERT INTO pe_unlogged SELECT generate_series(1, 15);
-- purged inside a transaction that rolls back
CREATE TABLE pe_tx (id int) USING spindle WITH (events_per_spindle = 1000);
INSERT INTO pe_tx SELECT generate_series(1, 20);
-- ttl from the table option
CREATE TABLE pe_opt (id int) USING spindle WITH (time_to_live = '1s');
INSERT INTO pe_opt SELECT generate_series(1, 30);
CREATE TABLE pe_opt_hour (id int) USING spindle WITH (time_to_live = '1 hour');
INSERT INTO pe_opt_hour SELECT generate_series(1, 40);
-- ttl 0
CREATE TABLE pe_zero (id int) USING spindle;
INSERT INTO pe_zero SELECT generate_series(1, 5);
-- young events: appended after the sleep
CREATE TABLE pe_new (id int, body text) USING spindle
    WITH (events_per_spindle = 1000);
-- old and young events on the same page: each keeps its own age
CREATE TABLE pe_page (id int) USING spindle WITH (events_per_spindle = 1000);
INSERT INTO pe_page SELECT generate_series(1, 120);
-- a table with no events
CREATE TABLE pe_empty (id int) USING spindle;
-- read every table once (hint bits), before the sample
SELECT (SELECT count(*) FROM pe_old) AS old, (SELECT count(*) FROM pe_mixed) AS mixed,
       (SELECT count(*) FROM pe_unlogged) AS unlogged, (SELECT count(*) FROM pe_tx) AS tx,
       (SELECT count(*) FROM pe_opt) AS opt, (SELECT count(*) FROM pe_opt_hour) AS opt_hour,
       (SELECT count(*) FROM pe_zero) AS zero;
SELECT relation, events_per_spindle, time_to_live FROM spindle.tables
 WHERE relation::text LIKE 'pe\_%' ORDER BY relation::text;

-- Nothing here is an hour old: nothing is purged.
SELECT spindle.purge_expired('pe_old', '1 hour');
SELECT spindle.purge_expired('pe_mixed', '1 hour');
SELECT spindle.purge_expired('pe_unlogged', '1 hour');
SELECT spindle.purge_expired('pe_opt_hour');
SELECT spindle.purge_expired('pe_opt_hour', NULL);
SELECT spindle.purge_expired('pe_empty', '1 hour');
SELECT spindle.purge_expired('pe_empty', '0s');
SELECT count(*) FROM pe_old;

SELECT pg_sleep(2.1);

-- ttl 0: everything appended more than a second ago goes.
SELECT spindle.purge_expired('pe_zero', '0s');
SELECT count(*) FROM pe_zero;

-- Young events: appended now, far younger than 1 s.
INSERT INTO pe_new SELECT g, 'new ' || g FROM generate_series(1, 50) g;
-- 30 young events on the page of 120 old ones: the old ones go, all of them
INSERT INTO pe_page SELECT generate_series(121, 150);
SELECT sum(pg_relation_size(segment)) / 8192 AS pages FROM spindle.spindle_catalog
 WHERE relation = 'pe_page'::regclass;
SELECT spindle.purge_expired('pe_page', '1s');
SELECT min(id), max(id), count(*) FROM pe_page;
INSERT INTO pe_mixed SELECT generate_series(11, 15);
SELECT spindle.purge_expired('pe_new', '1s');
-- the old events are about 2.1 s old: younger than 10 s
SELECT spindle.purge_expired('pe_old', '10 s');
SELECT count(*) FROM pe_old;

-- Older than 1 s: all of them, and only them.
SELECT spindle.purge_expired('pe_old', '1s');
SELECT count(*) FROM pe_old;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT count(*) FROM pe_old WHERE id > 0;
RESET enable_seqscan;
RESET enable_bitmapscan;
-- spindle 1 (filled before the sleep) goes; spindle 2 is younger than 1 s
SELECT spindle.purge_expired('pe_mixed', '1s');
SELECT string_agg(id::text, ',' ORDER BY id) FROM pe_mixed;
SELECT spindle_no, state, events, purged_events FROM spindle.spindles
 WHERE relation = 'pe_mixed'::regclass AND state <> 'ready' ORDER BY spindle_no;
-- the purged full spindle is droppable now
SELECT spindle.drop_spindles('pe_mixed');
SELECT spindle_no, state, events, purged_events FROM spindle.spindles
 WHERE relation = 'pe_mixed'::regclass AND state <> 'ready' ORDER BY spindle_no;
-- unlogged: every event is older than 2 s, in both of its spindles
SELECT spindle.purge_expired('pe_unlogged', '1s') BETWEEN 10 AND 15 AS purged_full_spindle;
SELECT count(*) FROM pe_unlogged WHERE id <= 10;
SELECT count(*) <= 5 FROM pe_unlogged;
SELECT count(*) FROM spindle.spindles
 WHERE relation = 'pe_unlogged'::regclass AND spindle_no = 1 AND purged_events = 10;
SELECT count(*) FROM pe_new;
SELECT spindle.purge_expired('pe_new', '1 hour');
SELECT count(*) FROM pe_new;

-- The table's time_to_live when ttl is NULL; an explicit ttl wins.
SELECT spindle.purge_expired('pe_opt');
SELECT count(*) FROM pe_opt;
SELECT spindle.purge_expired('pe_opt_hour');
SELECT spindle.purge_expired('pe_opt_hour', '1s');
SELECT count(*) FROM pe_opt_hour;
ALTER TABLE pe_new SET (time_to_live = '1 day');
SELECT spindle.purge_expired('pe_new');
SELECT count(*) FROM pe_new;

-- In the caller's transaction: a rollback brings the events back, and
-- uncommitted purges are not counted as purged.
BEGIN;
SELECT spindle.purge_expired('pe_tx', '1s');
SELECT count(*) FROM pe_tx;
SELECT events, purged_events FROM spindle.spindles
 WHERE relation = 'pe_tx'::regclass AND state <> 'ready';
ROLLBACK;
SELECT count(*) FROM pe_tx;
SELECT events, purged_events FROM spindle.spindles
 WHERE relation = 'pe_tx'::regclass AND state <> 'ready';
SELECT spindle.purge_expired('pe_tx', '1 hour');
SELECT count(*) FROM pe_tx;

-- Errors
-- no ttl and no time_to_live
SELECT spindle.purge_expired('pe_empty');
SELECT spindle.purge_expired('pe_empty', NULL);
SELECT pe_sqlstate($$SELECT spindle.purge_expired('pe_empty')$$);
ALTER TABLE pe_opt RESET (time_to_live);
SELECT spindle.purge_expired('pe_opt');
-- negative ttl
SELECT spindle.purge_expired('pe_old', '-1 second');
SELECT spindle.purge_expired('pe_old', '1 day -25 hours');
SELECT spindle.purge_expired('pe_opt_hour', '-1 day');
SELECT pe_sqlstate($$SELECT spindle.purge_expired('pe_old', '-1 second')$$);
-- not a spindle table
CREATE TABLE pe_heap (id int);
INSERT INTO pe_heap VALUES (1);
SELECT spindle.purge_expired('pe_heap', '1 hour');
SELECT spindle.purge_expired('pe_heap');
SELECT spindle.purge_expired('pe_old_id', '1 hour');
SELECT spindle.purge_expired('spindle.spindles', '1 hour');
SELECT pe_sqlstate($$SELECT spindle.purge_expired('pe_heap', '1 hour')$$);
SELECT count(*) FROM pe_heap;
-- an error changes nothing
SELECT count(*) FROM pe_tx;
SELECT count(*) FROM pe_new;

-- spindle.verify(): every spindle table left here is healthy
SELECT c.oid::regclass AS rel, v FROM pg_catalog.pg_class c, spindle.verify(c.oid) v
 WHERE c.relam = (SELECT oid FROM pg_catalog.pg_am WHERE amname = 'spindle')
 ORDER BY 1, 2;
DROP TABLE pe_page, pe_old, pe_mixed, pe_unlogged, pe_tx, pe_opt, pe_opt_hour, pe_zero,
    pe_new, pe_empty, pe_heap;
DROP FUNCTION pe_sqlstate(text);
