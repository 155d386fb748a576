-- review U: no object may depend on a spindle (pg_spindle.s<oid>_<n>)
-- itself, nor on its row type.  A view, materialized view or SQL function
-- body naming a spindle recorded a dependency on it, and every drop of
-- the spindle -- spindle.drop_spindles(), the worker, DROP TABLE and
-- TRUNCATE of its spindle table -- then failed for good ("cannot drop
-- table pg_spindle.s..._1 because other objects depend on it"), so the
-- queue grew without bound.  So did every other object recording such a
-- dependency: a rule, a policy, a trigger's WHEN, an index expression, a
-- column default, check or generation expression, a column, domain,
-- composite attribute, range, cast or function signature of the
-- spindle's row type.  Before the fix each statement refused below was
-- accepted; now each is refused with 42809 and nothing of it is left.
SET client_min_messages = warning;
CREATE TABLE ruv_t (id int) USING spindle WITH (events_per_spindle = 4);
INSERT INTO ruv_t SELECT g FROM generate_series(1, 10) g;
CREATE FUNCTION pg_temp.try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE sql;
  RETURN 'accepted';
EXCEPTION WHEN others THEN
  RETURN SQLSTATE;
END$$;
-- the error as a user sees it, with the spindle's OID masked
CREATE FUNCTION pg_temp.try_msg(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  m text;
  d text;
  h text;
BEGIN
  EXECUTE sql;
  RETURN 'accepted';
EXCEPTION WHEN others THEN
  GET STACKED DIAGNOSTICS m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL,
                          h = PG_EXCEPTION_HINT;
  RETURN regexp_replace(SQLSTATE || ': ' || m || E'\nDETAIL: ' || d ||
                        E'\nHINT: ' || h, 's[0-9]+_1', 's<oid>_1', 'g');
END$$;
-- the same, but an accepted statement is rolled back too, so that each
-- case below is tried on its own, whatever the others did before the fix
CREATE FUNCTION pg_temp.try_rb(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE sql;
  RAISE EXCEPTION 'ruv: accepted';
EXCEPTION WHEN others THEN
  IF SQLERRM = 'ruv: accepted' THEN
    RETURN 'accepted';
  END IF;
  RETURN SQLSTATE;
END$$;
CREATE TEMP TABLE ruv_sp AS
SELECT format('pg_spindle.%I', c.relname) AS sp FROM pg_class c
 WHERE c.oid = (SELECT segment FROM spindle.spindle_catalog
                 WHERE relation = 'ruv_t'::regclass AND spindle_no = 1);
CREATE TABLE ruv_other (a int, b text);
CREATE VIEW ruv_harmless AS SELECT 1 AS x;
CREATE RULE ruv_r2 AS ON UPDATE TO ruv_other DO ALSO NOTHING;
CREATE POLICY ruv_pol2 ON ruv_other USING (true);
CREATE FUNCTION ruv_f4() RETURNS bigint LANGUAGE sql BEGIN ATOMIC SELECT 1; END;
CREATE DOMAIN ruv_domx AS int;
CREATE TYPE ruv_ct2 AS (x int);
CREATE FUNCTION ruv_tf() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';
CREATE FOREIGN DATA WRAPPER ruv_w;
CREATE SERVER ruv_srv FOREIGN DATA WRAPPER ruv_w;
CREATE TABLE ruv_pt (id int) PARTITION BY RANGE (id);
SELECT pg_temp.try_msg(format('CREATE VIEW ruv_vm AS SELECT id FROM %s', sp)) FROM ruv_sp;
SELECT pg_temp.try_msg(format('CREATE TABLE ruv_dm (c %s)', sp)) FROM ruv_sp;
-- these are kept when accepted (before the fix they then kept the
-- spindle from being dropped, see the end)
SELECT pg_temp.try(format('CREATE VIEW ruv_v AS SELECT id FROM %s', sp)) FROM ruv_sp;
SELECT pg_temp.try(format('CREATE MATERIALIZED VIEW ruv_m AS SELECT id FROM %s', sp)) FROM ruv_sp;
SELECT pg_temp.try(format('CREATE FUNCTION ruv_f() RETURNS bigint LANGUAGE sql BEGIN ATOMIC SELECT count(*) FROM %s; END', sp)) FROM ruv_sp;
SELECT pg_temp.try(format('CREATE OR REPLACE VIEW ruv_harmless AS SELECT 1 AS x, (SELECT count(*) FROM %s) AS n', sp)) FROM ruv_sp;
SELECT pg_temp.try(format('CREATE RULE ruv_r AS ON INSERT TO ruv_other DO ALSO SELECT count(*) FROM %s', sp)) FROM ruv_sp;
SELECT pg_temp.try(format('ALTER TABLE ruv_other ADD COLUMN c %s', sp)) FROM ruv_sp;
SELECT relname FROM pg_class WHERE relname IN ('ruv_v', 'ruv_m', 'ruv_vm', 'ruv_dm');
SELECT count(*) FROM pg_proc WHERE proname = 'ruv_f';
SELECT pg_get_viewdef('ruv_harmless');
SELECT count(*) FROM pg_rewrite WHERE rulename = 'ruv_r';
SELECT attname FROM pg_attribute
 WHERE attrelid = 'ruv_other'::regclass AND attnum > 0 ORDER BY attnum;
-- a spindle made a partition or an extension's member
SELECT stmt, pg_temp.try_rb(format(stmt, sp)) FROM ruv_sp, (VALUES
  ('ALTER TABLE ruv_pt ATTACH PARTITION %s FOR VALUES FROM (0) TO (100)'),
  ('ALTER EXTENSION spindle ADD TABLE %s'),
  ('ALTER EXTENSION spindle ADD TYPE %s')
) v(stmt);
-- views and materialized views, however they name it
SELECT stmt, pg_temp.try_rb(format(stmt, sp)) FROM ruv_sp, (VALUES
  ('CREATE VIEW ruv_v1 AS SELECT id FROM %s'),
  ('CREATE VIEW ruv_v2 AS SELECT * FROM (SELECT id FROM %s) s'),
  ('CREATE VIEW ruv_v3 AS WITH c AS (SELECT id FROM %s) SELECT * FROM c'),
  ('CREATE VIEW ruv_v4 AS SELECT 1 AS x WHERE EXISTS (SELECT FROM %s)'),
  ('CREATE VIEW ruv_v5 AS SELECT (SELECT max(id) FROM %s) AS m'),
  ('CREATE VIEW ruv_v6 AS SELECT NULL::%s AS r'),
  ('CREATE MATERIALIZED VIEW ruv_m1 AS SELECT id FROM %s'),
  ('CREATE MATERIALIZED VIEW ruv_m2 AS SELECT id FROM %s WITH NO DATA'),
  ('CREATE SCHEMA ruv_sch CREATE VIEW ruv_sv AS SELECT id FROM %s')
) v(stmt);
-- SQL-standard function bodies and signatures
SELECT stmt, pg_temp.try_rb(format(stmt, sp)) FROM ruv_sp, (VALUES
  ('CREATE FUNCTION ruv_f0() RETURNS bigint LANGUAGE sql BEGIN ATOMIC SELECT count(*) FROM %s; END'),
  ('CREATE PROCEDURE ruv_p() LANGUAGE sql BEGIN ATOMIC SELECT count(*) FROM %s; END'),
  ('CREATE OR REPLACE FUNCTION ruv_f4() RETURNS bigint LANGUAGE sql BEGIN ATOMIC SELECT count(*) FROM %s; END'),
  ('CREATE FUNCTION ruv_f1(x %s) RETURNS int LANGUAGE sql AS ''SELECT 1'''),
  ('CREATE FUNCTION ruv_f2() RETURNS SETOF %s LANGUAGE plpgsql AS ''BEGIN RETURN; END'''),
  ('CREATE CAST (%s AS text) WITH INOUT')
) v(stmt);
-- rules, policies, triggers and indexes of another table
SELECT stmt, pg_temp.try_rb(format(stmt, sp)) FROM ruv_sp, (VALUES
  ('CREATE OR REPLACE RULE ruv_r2 AS ON UPDATE TO ruv_other DO ALSO SELECT count(*) FROM %s'),
  ('CREATE POLICY ruv_pol ON ruv_other USING (EXISTS (SELECT FROM %s))'),
  ('ALTER POLICY ruv_pol2 ON ruv_other USING (EXISTS (SELECT FROM %s))'),
  ('CREATE TRIGGER ruv_trg BEFORE INSERT ON ruv_other FOR EACH ROW WHEN ((NULL::%s) IS NULL) EXECUTE FUNCTION ruv_tf()'),
  ('CREATE INDEX ruv_i ON ruv_other (((ROW(a)::%s).id))'),
  ('CREATE STATISTICS ruv_st ON id, (id + 1) FROM %s')
) v(stmt);
-- the row type in columns, expressions and types
SELECT stmt, pg_temp.try_rb(format(stmt, sp)) FROM ruv_sp, (VALUES
  ('CREATE TABLE ruv_d1 (c %s)'),
  ('CREATE TABLE ruv_d2 (c %s[])'),
  ('CREATE TABLE ruv_d3 (a int DEFAULT (NULL::%s).id)'),
  ('CREATE TABLE ruv_d4 (a int CHECK ((NULL::%s) IS NULL))'),
  ('CREATE TABLE ruv_d5 (a int, g int GENERATED ALWAYS AS ((ROW(a)::%s).id) STORED)'),
  ('CREATE FOREIGN TABLE ruv_ft () INHERITS (%s) SERVER ruv_srv'),
  ('ALTER TABLE ruv_other ALTER COLUMN a SET DEFAULT (NULL::%s).id'),
  ('ALTER TABLE ruv_other ALTER COLUMN b TYPE %s USING NULL'),
  ('ALTER TABLE ruv_other ADD CHECK ((NULL::%s) IS NULL)'),
  ('ALTER TABLE ruv_other ADD COLUMN g int GENERATED ALWAYS AS ((ROW(a)::%s).id) STORED'),
  ('CREATE DOMAIN ruv_dom1 AS %s'),
  ('CREATE DOMAIN ruv_dom2 AS int CHECK ((NULL::%s) IS NULL)'),
  ('ALTER DOMAIN ruv_domx SET DEFAULT (NULL::%s).id'),
  ('ALTER DOMAIN ruv_domx ADD CHECK ((NULL::%s) IS NULL)'),
  ('CREATE TYPE ruv_ct AS (x %s)'),
  ('ALTER TYPE ruv_ct2 ADD ATTRIBUTE y %s'),
  ('CREATE TYPE ruv_rg AS RANGE (subtype = %s)')
) v(stmt);
-- CREATE INDEX CONCURRENTLY commits the new index before it builds it:
-- refused before that (it cannot run in a function, hence \gexec, not
-- echoed: the spindle's name varies)
\set VERBOSITY sqlstate
\set ECHO none
SELECT format('CREATE INDEX CONCURRENTLY ruv_ci ON ruv_other (((ROW(a)::%s).id))', sp)
  FROM ruv_sp \gexec
\set ECHO all
\set VERBOSITY default
SELECT count(*) FROM pg_class WHERE relname = 'ruv_ci';
-- no dependency on the spindle or its row type, no membership in an extension
SELECT count(*) FROM spindle.spindle_catalog s
  JOIN pg_class c ON c.oid = s.segment
  JOIN pg_type t ON t.oid = c.reltype
  JOIN pg_depend d ON
       (d.deptype <> 'i' AND
        ((d.refclassid = 'pg_class'::regclass AND d.refobjid = s.segment) OR
         (d.refclassid = 'pg_type'::regclass AND d.refobjid IN (t.oid, t.typarray)))) OR
       (d.deptype = 'e' AND
        ((d.classid = 'pg_class'::regclass AND d.objid = s.segment) OR
         (d.classid = 'pg_type'::regclass AND d.objid IN (t.oid, t.typarray))))
 WHERE s.relation = 'ruv_t'::regclass;
-- still allowed: reading a spindle, function bodies as strings (no
-- dependency recorded), copies of its rows, views of the spindle table
SELECT stmt, pg_temp.try(format(stmt, sp)) FROM ruv_sp, (VALUES
  ('SELECT count(*) FROM %s'),
  ('EXPLAIN (COSTS OFF) SELECT * FROM %s'),
  ('CREATE FUNCTION ruv_s() RETURNS bigint LANGUAGE sql AS ''SELECT count(*) FROM %s'''),
  ('CREATE FUNCTION ruv_s2() RETURNS bigint LANGUAGE plpgsql AS ''DECLARE r %s%%ROWTYPE; BEGIN RETURN 1; END'''),
  ('CREATE TABLE ruv_copy AS SELECT * FROM %s'),
  ('CREATE TABLE ruv_like (LIKE %s)'),
  ('CREATE VIEW ruv_tv AS SELECT id FROM ruv_t WHERE %L IS NOT NULL'),
  ('COMMENT ON TABLE %s IS NULL')
) v(stmt);
DROP FUNCTION ruv_s(), ruv_s2();
DROP TABLE ruv_copy, ruv_like;
DELETE FROM ruv_t WHERE id <= 4;
SELECT pg_temp.try($$SELECT spindle.drop_spindles('ruv_t')$$);
SELECT count(*) FROM spindle.spindle_catalog s, ruv_sp
 WHERE s.relation = 'ruv_t'::regclass AND s.segment = to_regclass(ruv_sp.sp);
SELECT pg_temp.try('TRUNCATE ruv_t');
DROP VIEW ruv_tv;
SELECT pg_temp.try('DROP TABLE ruv_t');
DROP TABLE ruv_other, ruv_pt;
DROP VIEW ruv_harmless;
DROP FUNCTION ruv_f4(), ruv_tf();
DROP DOMAIN ruv_domx;
DROP TYPE ruv_ct2;
DROP SERVER ruv_srv;
DROP FOREIGN DATA WRAPPER ruv_w;
