-- Review of the table AM core, second round.  Each part failed before its
-- fix.
SET client_min_messages = warning;

-- a. A table created WITH (events_per_spindle = 0) has one spindle owning
-- every TID.  Changing it to another capacity is refused, as 0 on a table
-- with spindles is: before, an empty table's spindle took the new capacity
-- and kept owning every TID (after 5 events every insert failed with "no
-- room for another spindle"), and a non-empty table's ALTER was accepted
-- and changed nothing.
CREATE TABLE cr2_zero (id int) USING spindle WITH (events_per_spindle = 0);
ALTER TABLE cr2_zero SET (events_per_spindle = 5);
SET spindle.events_per_spindle = 5;
ALTER TABLE cr2_zero RESET (events_per_spindle);
RESET spindle.events_per_spindle;
-- 0 again changes nothing and is let through
ALTER TABLE cr2_zero SET (events_per_spindle = 0);
INSERT INTO cr2_zero SELECT generate_series(1, 7);
ALTER TABLE cr2_zero SET (events_per_spindle = 5);
SELECT count(*) FROM cr2_zero;
SELECT reloptions FROM pg_class WHERE oid = 'cr2_zero'::regclass;
SELECT spindle_no, capacity FROM spindle.spindle_catalog
 WHERE relation = 'cr2_zero'::regclass ORDER BY spindle_no;
DROP TABLE cr2_zero;

-- b. A spindle CREATE nested in another one (a function called by CREATE
-- TABLE ... AS, an event trigger) leaves the outer CREATE's options and
-- first spindle alone.  Before, the inner CREATE took over the one pending
-- state: the outer table kept no options and got no spindle.
CREATE FUNCTION cr2_mk_side() RETURNS int LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE 'CREATE TABLE IF NOT EXISTS cr2_side (x int) USING spindle WITH (events_per_spindle = 7)';
  RETURN 1;
END $$;
CREATE TABLE cr2_ctas USING spindle WITH (events_per_spindle = 10)
  AS SELECT g AS id, cr2_mk_side() AS s FROM generate_series(1, 3) g;
SELECT relname, reloptions,
       (SELECT string_agg(capacity::text, ',' ORDER BY spindle_no)
          FROM spindle.spindle_catalog s WHERE s.relation = c.oid) AS capacities
  FROM pg_class c WHERE relname IN ('cr2_ctas', 'cr2_side') ORDER BY relname;
SELECT count(*) FROM cr2_ctas;
CREATE FUNCTION cr2_log() RETURNS event_trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('cr2.in', true) = 'on' THEN RETURN; END IF;
  PERFORM set_config('cr2.in', 'on', true);
  EXECUTE 'CREATE TABLE IF NOT EXISTS cr2_log (x int) USING spindle WITH (events_per_spindle = 3)';
  PERFORM set_config('cr2.in', 'off', true);
END $$;
CREATE EVENT TRIGGER cr2_et ON ddl_command_end WHEN TAG IN ('CREATE TABLE')
  EXECUTE FUNCTION cr2_log();
CREATE TABLE cr2_outer (id int) USING spindle
  WITH (events_per_spindle = 1000, time_to_live = '1 hour');
DROP EVENT TRIGGER cr2_et;
SELECT relname, reloptions,
       (SELECT string_agg(capacity::text, ',' ORDER BY spindle_no)
          FROM spindle.spindle_catalog s WHERE s.relation = c.oid) AS capacities
  FROM pg_class c WHERE relname IN ('cr2_outer', 'cr2_log') ORDER BY relname;
-- the outer table has spindles: 0 is refused
INSERT INTO cr2_outer SELECT generate_series(1, 12);
ALTER TABLE cr2_outer SET (events_per_spindle = 0);
-- a nested CREATE that fails leaves the outer one's state alone too
CREATE FUNCTION cr2_mk_bad() RETURNS int LANGUAGE plpgsql AS $$
BEGIN
  BEGIN
    EXECUTE 'CREATE TABLE cr2_side (x int) USING spindle';
  EXCEPTION WHEN duplicate_table THEN NULL;
  END;
  RETURN 1;
END $$;
CREATE TABLE cr2_ctas2 USING spindle WITH (events_per_spindle = 11)
  AS SELECT cr2_mk_bad() AS s;
SELECT relname, reloptions,
       (SELECT string_agg(capacity::text, ',' ORDER BY spindle_no)
          FROM spindle.spindle_catalog s WHERE s.relation = c.oid) AS capacities
  FROM pg_class c WHERE relname = 'cr2_ctas2';
DROP TABLE cr2_ctas, cr2_ctas2, cr2_side, cr2_outer, cr2_log;
DROP FUNCTION cr2_mk_side(), cr2_log(), cr2_mk_bad();

-- c. Core's storage parameters, set or reset alone, work on a spindle
-- table and keep spindle's options.  Before, core re-validated the stored
-- spindle options and failed: unrecognized parameter "events_per_spindle".
CREATE TABLE cr2_params (id int) USING spindle WITH (events_per_spindle = 100);
ALTER TABLE cr2_params SET (autovacuum_analyze_scale_factor = 0.01);
ALTER TABLE cr2_params SET (autovacuum_enabled = false, toast.autovacuum_enabled = false);
SELECT reloptions FROM pg_class WHERE oid = 'cr2_params'::regclass;
ALTER TABLE cr2_params RESET (autovacuum_enabled);
ALTER TABLE cr2_params RESET (fillfactor);
SELECT reloptions FROM pg_class WHERE oid = 'cr2_params'::regclass;
-- core's own validation still applies
ALTER TABLE cr2_params SET (autovacuum_enabled = maybe);
ALTER TABLE cr2_params SET (no_such_parameter = 1);
SELECT reloptions FROM pg_class WHERE oid = 'cr2_params'::regclass;
-- and a rolled-back one leaves the options as they were
BEGIN;
ALTER TABLE cr2_params RESET (autovacuum_analyze_scale_factor);
ROLLBACK;
SELECT reloptions FROM pg_class WHERE oid = 'cr2_params'::regclass;
INSERT INTO cr2_params SELECT generate_series(1, 150);
SELECT spindle_no, capacity FROM spindle.spindle_catalog
 WHERE relation = 'cr2_params'::regclass ORDER BY spindle_no;
DROP TABLE cr2_params;

-- d. REINDEX TABLE CONCURRENTLY reaches partitions, never inheritance
-- children: a heap parent with a spindle child is reindexed.  Before, it
-- was refused because of the child.
CREATE TABLE cr2_hp (id int PRIMARY KEY, v text);
CREATE TABLE cr2_sc (id int PRIMARY KEY, v text) USING spindle;
ALTER TABLE cr2_sc INHERIT cr2_hp;
REINDEX TABLE CONCURRENTLY cr2_hp;
-- the spindle child itself is still refused, as is a partitioned table
-- with a spindle partition
REINDEX TABLE CONCURRENTLY cr2_sc;
CREATE TABLE cr2_pt (id int PRIMARY KEY) PARTITION BY RANGE (id);
CREATE TABLE cr2_pt1 PARTITION OF cr2_pt FOR VALUES FROM (0) TO (10) USING spindle;
REINDEX TABLE CONCURRENTLY cr2_pt;
DROP TABLE cr2_hp, cr2_sc, cr2_pt;

-- e. With default_table_access_method = spindle, a temporary table made
-- without USING is a heap table (spindle tables cannot be temporary); an
-- explicit USING spindle is still refused.  Before, every CREATE TEMP
-- TABLE was refused, also REFRESH MATERIALIZED VIEW CONCURRENTLY's own.
CREATE TABLE cr2_h (id int PRIMARY KEY, v int);
INSERT INTO cr2_h SELECT g, g FROM generate_series(1, 10) g;
CREATE MATERIALIZED VIEW cr2_mv AS SELECT * FROM cr2_h;
CREATE UNIQUE INDEX ON cr2_mv (id);
SET default_table_access_method = spindle;
UPDATE cr2_h SET v = 0 WHERE id = 1;
REFRESH MATERIALIZED VIEW CONCURRENTLY cr2_mv;
SELECT v FROM cr2_mv WHERE id = 1;
CREATE TEMP TABLE cr2_t1 (id int);
CREATE TEMP TABLE cr2_t2 AS SELECT 1 AS id;
SELECT 1 AS id INTO TEMP cr2_t3;
CREATE TABLE pg_temp.cr2_t4 (id int);
SELECT c.relname, a.amname FROM pg_class c JOIN pg_am a ON a.oid = c.relam
 WHERE c.relname IN ('cr2_t1', 'cr2_t2', 'cr2_t3', 'cr2_t4') ORDER BY 1;
CREATE TEMP TABLE cr2_t5 (id int) USING spindle;
CREATE TEMP TABLE cr2_t6 USING spindle AS SELECT 1 AS id;
-- a permanent table made under the default is a spindle table
CREATE TABLE cr2_p (id int);
SELECT a.amname FROM pg_class c JOIN pg_am a ON a.oid = c.relam
 WHERE c.relname = 'cr2_p';
RESET default_table_access_method;
DROP TABLE cr2_t1, cr2_t2, cr2_t3, cr2_t4, cr2_p;
DROP MATERIALIZED VIEW cr2_mv;
DROP TABLE cr2_h;
