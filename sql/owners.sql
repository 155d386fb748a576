--
-- owners: spindles belong to the bootstrap superuser, whoever owns the
-- table, so owner changes and DROP OWNED / REASSIGN OWNED of a former owner
-- never touch them; they go with their table.
--
CREATE ROLE regress_spindle_owner1;
CREATE ROLE regress_spindle_owner2;
CREATE TABLE owned (id int PRIMARY KEY) USING spindle WITH (events_per_spindle = 10);
ALTER TABLE owned OWNER TO regress_spindle_owner1;
INSERT INTO owned SELECT generate_series(1, 35);
SELECT 'owned'::regclass::oid AS owned_oid \gset
ALTER TABLE owned OWNER TO regress_spindle_owner2;
DROP OWNED BY regress_spindle_owner1;
SELECT count(*) FROM owned;
SELECT count(*) AS spindles_not_superuser FROM spindle.spindle_catalog sc
  JOIN pg_class c ON c.oid = sc.segment
 WHERE sc.relation = 'owned'::regclass AND c.relowner <> 10;
REASSIGN OWNED BY regress_spindle_owner2 TO regress_spindle_owner1;
SELECT relowner::regrole FROM pg_class WHERE oid = 'owned'::regclass;
SELECT count(*) FROM owned;
-- the owner reads and writes the table, not its spindles
SET ROLE regress_spindle_owner1;
INSERT INTO owned SELECT generate_series(36, 40);
SELECT count(*) FROM owned;
RESET ROLE;
SELECT pg_catalog.format('SELECT count(*) FROM pg_spindle.%I', c.relname) AS q
  FROM spindle.spindle_catalog sc JOIN pg_class c ON c.oid = sc.segment
 WHERE sc.relation = 'owned'::regclass ORDER BY sc.spindle_no LIMIT 1 \gset
SET ROLE regress_spindle_owner1;
\set VERBOSITY terse
:q;
\echo :SQLSTATE
\set VERBOSITY default
RESET ROLE;
-- DROP OWNED of the current owner drops the table, and its spindles with it
DROP OWNED BY regress_spindle_owner1;
SELECT count(*) AS spindles_left FROM pg_class
 WHERE relnamespace = 'pg_spindle'::regnamespace
   AND relname LIKE 's' || :owned_oid || '\_%';
SELECT to_regclass('owned');
DROP ROLE regress_spindle_owner1;
DROP ROLE regress_spindle_owner2;
-- spindle.verify(): every spindle table left here is healthy
SELECT c.oid::regclass AS rel, v FROM pg_catalog.pg_class c, spindle.verify(c.oid) v
 WHERE c.relam = (SELECT oid FROM pg_catalog.pg_am WHERE amname = 'spindle')
 ORDER BY 1, 2;
