-- review U: a table may not inherit from a spindle itself (CREATE TABLE
-- ... INHERITS, ALTER TABLE ... INHERIT): the child would depend on the
-- spindle, and every drop of it -- spindle.drop_spindles(), the worker,
-- DROP TABLE and TRUNCATE of its spindle table -- then failed for good
-- ("cannot drop table pg_spindle.s..._1 because other objects depend on
-- it").  Before the fix both were accepted.
SET client_min_messages = warning;
CREATE TABLE ru_t (id int) USING spindle WITH (events_per_spindle = 4);
INSERT INTO ru_t SELECT g FROM generate_series(1, 10) g;
CREATE FUNCTION pg_temp.try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE sql;
  RETURN 'accepted';
EXCEPTION WHEN others THEN
  RETURN SQLSTATE;
END$$;
CREATE TEMP TABLE ru_sp AS
SELECT format('pg_spindle.%I', c.relname) AS sp FROM pg_class c
 WHERE c.oid = (SELECT segment FROM spindle.spindle_catalog
                 WHERE relation = 'ru_t'::regclass AND spindle_no = 1);
SELECT pg_temp.try(format('CREATE TABLE ru_child () INHERITS (%s)', sp)) FROM ru_sp;
CREATE TABLE ru_child2 (id int);
SELECT pg_temp.try(format('ALTER TABLE ru_child2 INHERIT %s', sp)) FROM ru_sp;
-- the spindle table's own children are fine
CREATE TABLE ru_child3 () INHERITS (ru_t);
DROP TABLE ru_child3;
-- and the spindles go as before
DELETE FROM ru_t WHERE id <= 4;
SELECT spindle.drop_spindles('ru_t');
TRUNCATE ru_t;
DROP TABLE ru_t;
DROP TABLE ru_child2;
SELECT count(*) FROM pg_class WHERE relname IN ('ru_child');
