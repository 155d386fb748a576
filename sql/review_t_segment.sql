-- Hostile review T: a spindle (pg_spindle.s<table>_<n>) is changed only
-- through its table; TRUNCATE naming a spindle itself, even by a
-- superuser, must be refused like INSERT/UPDATE/DELETE on it (42809),
-- since it empties the spindle behind the slot map's back.
SET client_min_messages = warning;
CREATE TABLE rt (id int, body text) USING spindle WITH (events_per_spindle = 4);
CREATE INDEX rt_id ON rt (id);
INSERT INTO rt SELECT g, 'x' || g FROM generate_series(1, 10) g;

CREATE FUNCTION rt_try(cmd text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE seg text;
BEGIN
    SELECT format('pg_spindle.%I', c.relname) INTO seg
      FROM spindle.spindle_catalog s JOIN pg_class c ON c.oid = s.segment
     WHERE s.relation = 'rt'::regclass AND s.spindle_no = 1;
    EXECUTE format(cmd, seg);
    RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, 's[0-9]+_', 's#_', 'g');
END $$;

SELECT rt_try('TRUNCATE %s');
SELECT rt_try('TRUNCATE ONLY %s');
SELECT rt_try('TRUNCATE %s CASCADE');
SELECT rt_try('TRUNCATE rt, %s');
-- the table's own TRUNCATE still works, and nothing was lost before it
SELECT count(*) FROM rt;
SELECT id FROM rt WHERE id = 3;
SELECT * FROM spindle.verify('rt');
TRUNCATE rt;
INSERT INTO rt VALUES (1, 'again');
SELECT * FROM spindle.verify('rt');
SELECT count(*) FROM rt;
DROP TABLE rt;
DROP FUNCTION rt_try(text);

-- DROP TABLE naming a spindle itself lost its events silently (the table
-- counted 6 of 10, verify: "its relation ... does not exist"): refused
-- too; the table's DROP and the worker drop spindles without naming them.
CREATE TABLE rd (id int) USING spindle WITH (events_per_spindle = 4);
INSERT INTO rd SELECT g FROM generate_series(1, 10) g;
CREATE FUNCTION rd_try(cmd text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE seg text;
BEGIN
    SELECT format('pg_spindle.%I', c.relname) INTO seg
      FROM spindle.spindle_catalog s JOIN pg_class c ON c.oid = s.segment
     WHERE s.relation = 'rd'::regclass AND s.spindle_no = 1;
    EXECUTE format(cmd, seg);
    RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, 's[0-9]+_', 's#_', 'g');
END $$;
SELECT rd_try('DROP TABLE %s');
SELECT rd_try('DROP TABLE IF EXISTS %s CASCADE');
SELECT rd_try('DROP TABLE IF EXISTS rt_missing_one, %s');
SELECT count(*) FROM rd;
SELECT * FROM spindle.verify('rd');
DROP TABLE rd;
DROP FUNCTION rd_try(text);
