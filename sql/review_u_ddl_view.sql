-- review U (NOT FIXED, not in REGRESS): a view, materialized view or SQL
-- function body naming a spindle itself records a dependency on it, and
-- every drop of the spindle -- spindle.drop_spindles(), the worker, DROP
-- TABLE and TRUNCATE of its spindle table -- then fails ("cannot drop
-- table pg_spindle.s..._1 because other objects depend on it").  The
-- expected output is what the contract asks: the CREATE refused (42809)
-- and the drops going through.
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
CREATE TEMP TABLE ruv_sp AS
SELECT format('pg_spindle.%I', c.relname) AS sp FROM pg_class c
 WHERE c.oid = (SELECT segment FROM spindle.spindle_catalog
                 WHERE relation = 'ruv_t'::regclass AND spindle_no = 1);
SELECT pg_temp.try(format('CREATE VIEW ruv_v AS SELECT id FROM %s', sp)) FROM ruv_sp;
SELECT pg_temp.try(format('CREATE MATERIALIZED VIEW ruv_m AS SELECT id FROM %s', sp)) FROM ruv_sp;
SELECT pg_temp.try(format('CREATE FUNCTION ruv_f() RETURNS bigint LANGUAGE sql BEGIN ATOMIC SELECT count(*) FROM %s; END', sp)) FROM ruv_sp;
DELETE FROM ruv_t WHERE id <= 4;
SELECT pg_temp.try($$SELECT spindle.drop_spindles('ruv_t')$$);
SELECT pg_temp.try('TRUNCATE ruv_t');
SELECT pg_temp.try('DROP TABLE ruv_t');
