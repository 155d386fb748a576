--
-- options: events_per_spindle and time_to_live, the GUC default, the
-- errors for bad values, ALTER TABLE SET, reloptions, and the
-- default_table_access_method route that pg_dump output takes.
--
\set VERBOSITY default

-- the GUC and its default
SHOW spindle.events_per_spindle;

-- a table created without the option takes the GUC's value, stored as an option
CREATE TABLE o_default (a int) USING spindle;
SELECT reloptions FROM pg_class WHERE oid = 'o_default'::regclass;
SELECT events_per_spindle, time_to_live FROM spindle.tables
 WHERE relation = 'o_default'::regclass;
SELECT state, capacity, events FROM spindle.spindles
 WHERE relation = 'o_default'::regclass AND state <> 'ready';

-- the GUC's value at creation is what counts; changing it later does not
-- change the table
SET spindle.events_per_spindle = 7;
SHOW spindle.events_per_spindle;
CREATE TABLE o_guc (a int) USING spindle;
RESET spindle.events_per_spindle;
SHOW spindle.events_per_spindle;
SELECT reloptions FROM pg_class WHERE oid = 'o_guc'::regclass;
INSERT INTO o_guc SELECT generate_series(1, 8);
SELECT spindle_no, state, capacity, events FROM spindle.spindles
 WHERE relation = 'o_guc'::regclass AND state <> 'ready' ORDER BY spindle_no;
SELECT events_per_spindle FROM spindle.tables WHERE relation = 'o_guc'::regclass;

-- bad GUC values are refused
SET spindle.events_per_spindle = -1;
\echo :SQLSTATE
SET spindle.events_per_spindle = 'abc';
\echo :SQLSTATE
SHOW spindle.events_per_spindle;
-- 0 is allowed
SET spindle.events_per_spindle = 0;
CREATE TABLE o_guc_zero (a int) USING spindle;
RESET spindle.events_per_spindle;
SELECT reloptions FROM pg_class WHERE oid = 'o_guc_zero'::regclass;

-- explicit options, including a quoted value as pg_dump writes it
CREATE TABLE o_explicit (a int) USING spindle WITH (events_per_spindle = 25);
SELECT reloptions FROM pg_class WHERE oid = 'o_explicit'::regclass;
CREATE TABLE o_quoted (a int) USING spindle WITH (events_per_spindle = '12');
SELECT reloptions FROM pg_class WHERE oid = 'o_quoted'::regclass;
SELECT events_per_spindle FROM spindle.tables WHERE relation = 'o_quoted'::regclass;
CREATE TABLE o_max (a int) USING spindle WITH (events_per_spindle = 38141952);
-- more than a spindle table can hold at all
CREATE TABLE o_over (a int) USING spindle WITH (events_per_spindle = 38141953);
\echo :SQLSTATE
SELECT events_per_spindle FROM spindle.tables WHERE relation = 'o_max'::regclass;

-- capacity 0: a single spindle, never full
CREATE TABLE o_zero (a int) USING spindle WITH (events_per_spindle = 0);
SELECT reloptions FROM pg_class WHERE oid = 'o_zero'::regclass;
INSERT INTO o_zero SELECT generate_series(1, 100);
SELECT state, capacity, events FROM spindle.spindles
 WHERE relation = 'o_zero'::regclass AND state <> 'ready';
SELECT count(*) FROM o_zero;

-- time_to_live
CREATE TABLE o_ttl (a int) USING spindle
  WITH (events_per_spindle = 5, time_to_live = '1 hour');
SELECT reloptions FROM pg_class WHERE oid = 'o_ttl'::regclass;
SELECT events_per_spindle, time_to_live FROM spindle.tables
 WHERE relation = 'o_ttl'::regclass;
ALTER TABLE o_ttl SET (time_to_live = '2 days');
SELECT time_to_live FROM spindle.tables WHERE relation = 'o_ttl'::regclass;

-- bad values: the table is not created
CREATE TABLE o_bad (a int) USING spindle WITH (events_per_spindle = -1);
\echo :SQLSTATE
CREATE TABLE o_bad (a int) USING spindle WITH (events_per_spindle = 'abc');
\echo :SQLSTATE
CREATE TABLE o_bad (a int) USING spindle WITH (events_per_spindle = 1.5);
\echo :SQLSTATE
CREATE TABLE o_bad (a int) USING spindle WITH (events_per_spindle = 2147483648);
\echo :SQLSTATE
CREATE TABLE o_bad (a int) USING spindle WITH (events_per_spindle = '');
\echo :SQLSTATE
CREATE TABLE o_bad (a int) USING spindle WITH (time_to_live = 'abc');
\echo :SQLSTATE
CREATE TABLE o_bad (a int) USING spindle WITH (time_to_live = '-1 hour');
\echo :SQLSTATE
CREATE TABLE o_bad (a int) USING spindle WITH (time_to_live = '0');
\echo :SQLSTATE
CREATE TABLE o_bad (a int) USING spindle WITH (no_such_option = 1);
\echo :SQLSTATE
SELECT to_regclass('o_bad') AS o_bad;
SELECT count(*) FROM spindle.tables WHERE relation::text = 'o_bad';

-- the options belong to spindle tables only
CREATE TABLE o_heap (a int) WITH (events_per_spindle = 5);
\echo :SQLSTATE
CREATE TABLE o_heap (a int) WITH (time_to_live = '1 hour');
\echo :SQLSTATE
CREATE TABLE o_heap (a int);
ALTER TABLE o_heap SET (events_per_spindle = 5);
\echo :SQLSTATE
SELECT reloptions FROM pg_class WHERE oid = 'o_heap'::regclass;

-- ALTER TABLE SET applies to spindles that have no events yet
CREATE TABLE o_alter (a int) USING spindle WITH (events_per_spindle = 3);
INSERT INTO o_alter VALUES (1), (2);
ALTER TABLE o_alter SET (events_per_spindle = 5);
SELECT reloptions FROM pg_class WHERE oid = 'o_alter'::regclass;
SELECT events_per_spindle FROM spindle.tables WHERE relation = 'o_alter'::regclass;
INSERT INTO o_alter SELECT generate_series(3, 10);
-- the first spindle keeps capacity 3; the next ones take 5
SELECT spindle_no, state, capacity, events FROM spindle.spindles
 WHERE relation = 'o_alter'::regclass AND state <> 'ready' ORDER BY spindle_no;
-- spindles created ahead of need take the new capacity too
SELECT count(*) AS ready_with_old_capacity FROM spindle.spindles
 WHERE relation = 'o_alter'::regclass AND state = 'ready' AND capacity <> 5;
SELECT count(*), sum(a) FROM o_alter;

-- bad values in ALTER TABLE change nothing
ALTER TABLE o_alter SET (events_per_spindle = -1);
\echo :SQLSTATE
ALTER TABLE o_alter SET (events_per_spindle = 'abc');
\echo :SQLSTATE
ALTER TABLE o_alter SET (events_per_spindle = 1.5);
\echo :SQLSTATE
ALTER TABLE o_alter SET (time_to_live = 'abc');
\echo :SQLSTATE
ALTER TABLE o_alter SET (time_to_live = '-5 minutes');
\echo :SQLSTATE
SELECT reloptions FROM pg_class WHERE oid = 'o_alter'::regclass;
SELECT events_per_spindle, time_to_live FROM spindle.tables
 WHERE relation = 'o_alter'::regclass;

-- ALTER TABLE SET rolled back changes nothing
BEGIN;
ALTER TABLE o_alter SET (events_per_spindle = 9);
ROLLBACK;
SELECT reloptions FROM pg_class WHERE oid = 'o_alter'::regclass;
SELECT events_per_spindle FROM spindle.tables WHERE relation = 'o_alter'::regclass;

-- the default_table_access_method route (what pg_dump output uses)
SET default_table_access_method = spindle;
CREATE TABLE o_dam (a int) WITH (events_per_spindle = '4');
CREATE TABLE o_dam_guc (a int);
RESET default_table_access_method;
SELECT c.relname, a.amname, c.reloptions FROM pg_class c JOIN pg_am a ON a.oid = c.relam
 WHERE c.relname IN ('o_dam', 'o_dam_guc') ORDER BY c.relname;
INSERT INTO o_dam SELECT generate_series(1, 5);
SELECT spindle_no, state, capacity, events FROM spindle.spindles
 WHERE relation = 'o_dam'::regclass AND state <> 'ready' ORDER BY spindle_no;
SELECT relation, events_per_spindle FROM spindle.tables
 WHERE relation IN ('o_dam'::regclass, 'o_dam_guc'::regclass) ORDER BY relation::text;

-- \d+ shows the access method and the options
\set HIDE_TABLEAM off
\d+ o_dam
\set HIDE_TABLEAM on

-- serial columns and a primary key make a sequence before the table and an
-- index after it: the options still belong to the table
CREATE TABLE o_serial (id bigserial PRIMARY KEY, b text) USING spindle
  WITH (events_per_spindle = 4, time_to_live = '2 hours');
SELECT c.relname, c.reloptions FROM pg_class c
 WHERE c.relname IN ('o_serial', 'o_serial_id_seq', 'o_serial_pkey')
 ORDER BY c.relname;
INSERT INTO o_serial (b) SELECT 'x' FROM generate_series(1, 9);
SELECT spindle_no, state, capacity, events FROM spindle.spindles
 WHERE relation = 'o_serial'::regclass AND state <> 'ready' ORDER BY spindle_no;

-- spindle.verify(): every spindle table left here is healthy
SELECT c.oid::regclass AS rel, v FROM pg_catalog.pg_class c, spindle.verify(c.oid) v
 WHERE c.relam = (SELECT oid FROM pg_catalog.pg_am WHERE amname = 'spindle')
 ORDER BY 1, 2;
DROP TABLE o_default, o_guc, o_guc_zero, o_explicit, o_quoted, o_max, o_zero,
  o_ttl, o_heap, o_alter, o_dam, o_dam_guc, o_serial;
