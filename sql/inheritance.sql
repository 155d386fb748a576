--
-- inheritance: spindle tables as inheritance children and as partitions.
--
-- An ALTER TABLE that recurses (no ONLY) from a parent into a spindle
-- table refuses, with SQLSTATE 0A000 naming the spindle table, the
-- subcommands that it refuses on the spindle table itself (ADD/DROP
-- COLUMN, ALTER COLUMN TYPE): they would rewrite it and lose its spindles.
-- SELECT, INSERT, UPDATE, DELETE, COPY and TRUNCATE through the parent work
-- on the spindle table.  Spindle tables can be partitions (CREATE TABLE
-- ... PARTITION OF, ATTACH PARTITION), with their options.
--
\set VERBOSITY default

-- This test asserts exact spindle lists: the background worker must be off
-- (test/spindle.conf turns it off for pg_regress).
SHOW spindle.enable_worker;

CREATE VIEW inh_spindles AS
  SELECT relation, spindle_no, state, capacity, events, purged_events
    FROM spindle.spindles
   WHERE relation::text LIKE 'inh\_%' AND state <> 'ready';
CREATE VIEW inh_columns AS
  SELECT attrelid::regclass AS rel, attname, format_type(atttypid, atttypmod) AS type
    FROM pg_attribute
   WHERE attrelid::regclass::text LIKE 'inh\_%' AND attnum > 0 AND NOT attisdropped
     AND attrelid IN (SELECT oid FROM pg_class WHERE relkind IN ('r', 'p'));

-- ===================== an inheritance child ==============================
CREATE TABLE inh_base (id int, n int);
CREATE TABLE inh_q () INHERITS (inh_base) USING spindle
    WITH (events_per_spindle = 10);
INSERT INTO inh_q SELECT g, g FROM generate_series(1, 25) g;
INSERT INTO inh_base VALUES (0, 0);		-- a row of the heap parent itself
SELECT * FROM inh_spindles ORDER BY relation::text, spindle_no;

-- the ALTERs that would rewrite the spindle child are refused through the
-- parent (this one used to rewrite inh_q and crash the server)
ALTER TABLE inh_base ALTER COLUMN n TYPE bigint;
\echo :SQLSTATE
ALTER TABLE inh_base ALTER COLUMN n SET DATA TYPE numeric USING n::numeric;
\echo :SQLSTATE
ALTER TABLE inh_base ADD COLUMN w int;
\echo :SQLSTATE
ALTER TABLE inh_base ADD COLUMN w text DEFAULT 'x';
\echo :SQLSTATE
ALTER TABLE inh_base DROP COLUMN n;
\echo :SQLSTATE
ALTER TABLE IF EXISTS inh_base DROP COLUMN IF EXISTS n;
\echo :SQLSTATE
-- one refused subcommand refuses the whole statement
ALTER TABLE inh_base ALTER COLUMN n SET DEFAULT 1, ADD COLUMN w int;
\echo :SQLSTATE
-- through a grandparent
CREATE TABLE inh_top (id int, n int);
ALTER TABLE inh_base INHERIT inh_top;
ALTER TABLE inh_top ALTER COLUMN n TYPE bigint;
\echo :SQLSTATE
ALTER TABLE inh_top ADD COLUMN w int;
\echo :SQLSTATE
-- from a DO block, a PL/pgSQL function (its plan is cached: call it twice),
-- dynamic SQL and a SQL function
DO $$ BEGIN ALTER TABLE inh_base ALTER COLUMN n TYPE bigint; END $$;
\echo :SQLSTATE
CREATE FUNCTION inh_alter() RETURNS void LANGUAGE plpgsql
    AS $$ BEGIN ALTER TABLE inh_base ADD COLUMN w int; END $$;
SELECT inh_alter();
\echo :SQLSTATE
SELECT inh_alter();
\echo :SQLSTATE
DO $$ BEGIN EXECUTE 'ALTER TABLE inh_top DROP COLUMN n'; END $$;
\echo :SQLSTATE
CREATE FUNCTION inh_alter_sql() RETURNS void LANGUAGE sql
    AS 'ALTER TABLE inh_base ALTER COLUMN n TYPE numeric';
SELECT inh_alter_sql();
\echo :SQLSTATE
-- a rolled-back subtransaction around a refusal leaves everything in place
BEGIN;
SAVEPOINT s;
ALTER TABLE inh_base ALTER COLUMN n TYPE bigint;
ROLLBACK TO s;
SELECT count(*) FROM inh_base;
COMMIT;

-- ONLY on the parent does not reach the spindle table: core refuses what
-- the children would have to follow, and DROP COLUMN ONLY leaves the
-- child's column in place
ALTER TABLE ONLY inh_base ALTER COLUMN n TYPE bigint;
\echo :SQLSTATE
ALTER TABLE ONLY inh_base ADD COLUMN w int;
\echo :SQLSTATE

-- ALTERs through the parent that do not rewrite work (the CHECK constraint
-- is validated by a scan of the spindle table that crosses spindles, in a
-- memory context ALTER TABLE resets for every row)
ALTER TABLE inh_base ALTER COLUMN n SET DEFAULT 7;
ALTER TABLE inh_base ADD CONSTRAINT inh_n_nonneg CHECK (n >= 0);
ALTER TABLE inh_top RENAME COLUMN n TO m;
SELECT m FROM inh_q WHERE id = 1;
ALTER TABLE inh_top RENAME COLUMN m TO n;
ALTER TABLE inh_base ALTER COLUMN n SET STATISTICS 200;
INSERT INTO inh_q (id) VALUES (26);
SELECT n FROM inh_q WHERE id = 26;
INSERT INTO inh_q VALUES (27, -1);
\echo :SQLSTATE

-- and a hierarchy without spindle tables alters as usual
CREATE TABLE inh_heap_base (id int, n int);
CREATE TABLE inh_heap_child () INHERITS (inh_heap_base);
INSERT INTO inh_heap_child VALUES (1, 1);
ALTER TABLE inh_heap_base ALTER COLUMN n TYPE bigint, ADD COLUMN w int;
SELECT * FROM inh_heap_base;

-- nothing of the spindle table changed
SELECT * FROM inh_columns WHERE rel IN ('inh_q'::regclass, 'inh_base'::regclass)
 ORDER BY rel::text, attname;
SELECT * FROM inh_spindles ORDER BY relation::text, spindle_no;
SELECT count(*), sum(n) FROM inh_q;

-- SELECT, UPDATE, DELETE, FOR UPDATE through the parent
SELECT tableoid::regclass, count(*), sum(n) FROM inh_base GROUP BY 1 ORDER BY 1;
SELECT tableoid::regclass, count(*), sum(n) FROM inh_top GROUP BY 1 ORDER BY 1;
UPDATE inh_base SET n = n + 100 WHERE id <= 3;
DELETE FROM inh_base WHERE id BETWEEN 20 AND 22;
SELECT tableoid::regclass, id, n FROM inh_base WHERE id <= 3 ORDER BY id FOR UPDATE;
SELECT tableoid::regclass, count(*), sum(n) FROM inh_base GROUP BY 1 ORDER BY 1;
SELECT * FROM inh_spindles ORDER BY relation::text, spindle_no;
-- an index on the spindle child serves queries through the parent
CREATE INDEX inh_q_id ON inh_q (id);
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT tableoid::regclass, id, n FROM inh_base WHERE id IN (2, 24, 25) ORDER BY id;
RESET enable_bitmapscan;
RESET enable_seqscan;

-- TRUNCATE through the parent empties the spindle child and leaves it with
-- an open spindle that takes the next inserts
TRUNCATE inh_base;
SELECT tableoid::regclass, count(*) FROM inh_base GROUP BY 1 ORDER BY 1;
SELECT * FROM inh_spindles ORDER BY relation::text, spindle_no;
INSERT INTO inh_q SELECT g, g FROM generate_series(1, 12) g;
SELECT * FROM inh_spindles ORDER BY relation::text, spindle_no;
SELECT count(*), sum(n) FROM inh_base;
-- through the grandparent, in a transaction that goes on inserting
BEGIN;
TRUNCATE inh_top;
SELECT * FROM inh_spindles ORDER BY relation::text, spindle_no;
INSERT INTO inh_q SELECT g, g FROM generate_series(1, 3) g;
COMMIT;
SELECT * FROM inh_spindles ORDER BY relation::text, spindle_no;
-- rolled back: the spindles are as they were
BEGIN;
TRUNCATE inh_top;
ROLLBACK;
SELECT * FROM inh_spindles ORDER BY relation::text, spindle_no;
SELECT count(*) FROM inh_top;
-- TRUNCATE ONLY of the parent leaves the child alone
TRUNCATE ONLY inh_base;
SELECT count(*) FROM inh_q;
-- TRUNCATE ... CASCADE reaching a spindle table through a foreign key
CREATE TABLE inh_ref (id int PRIMARY KEY);
INSERT INTO inh_ref VALUES (1), (2);
CREATE TABLE inh_fk (ref_id int REFERENCES inh_ref, v text) USING spindle
    WITH (events_per_spindle = 4);
INSERT INTO inh_fk VALUES (1, 'a'), (2, 'b'), (1, 'c');
TRUNCATE inh_ref CASCADE;
SELECT count(*) FROM inh_fk;
SELECT * FROM inh_spindles WHERE relation = 'inh_fk'::regclass;
INSERT INTO inh_ref VALUES (1);
INSERT INTO inh_fk VALUES (1, 'again');
SELECT * FROM inh_spindles WHERE relation = 'inh_fk'::regclass;

-- a foreign table parent recurses too
CREATE FOREIGN DATA WRAPPER inh_fdw;
CREATE SERVER inh_server FOREIGN DATA WRAPPER inh_fdw;
CREATE FOREIGN TABLE inh_ft (id int, n int) SERVER inh_server;
CREATE TABLE inh_ft_child () INHERITS (inh_ft) USING spindle;
ALTER FOREIGN TABLE inh_ft ALTER COLUMN n TYPE bigint;
\echo :SQLSTATE
ALTER FOREIGN TABLE inh_ft ADD COLUMN w int;
\echo :SQLSTATE
DROP TABLE inh_ft_child;
DROP FOREIGN TABLE inh_ft;
DROP SERVER inh_server;
DROP FOREIGN DATA WRAPPER inh_fdw;

-- typed tables follow ALTER TYPE ... CASCADE
CREATE TYPE inh_row AS (id int, n int);
CREATE TABLE inh_typed OF inh_row USING spindle;
INSERT INTO inh_typed VALUES (1, 1);
ALTER TYPE inh_row ADD ATTRIBUTE w int CASCADE;
\echo :SQLSTATE
ALTER TYPE inh_row ALTER ATTRIBUTE n TYPE bigint CASCADE;
\echo :SQLSTATE
ALTER TYPE inh_row DROP ATTRIBUTE n CASCADE;
\echo :SQLSTATE
SELECT * FROM inh_columns WHERE rel = 'inh_typed'::regclass ORDER BY attname;
SELECT * FROM inh_typed;
DROP TABLE inh_typed;
DROP TYPE inh_row;

-- ===================== partitions ========================================
CREATE TABLE inh_p (id int, n int, body text) PARTITION BY RANGE (id);
CREATE TABLE inh_p1 PARTITION OF inh_p FOR VALUES FROM (1) TO (100)
    USING spindle WITH (events_per_spindle = 4);
-- the route pg_dump takes: default_table_access_method, options in WITH
SET default_table_access_method = spindle;
CREATE TABLE inh_p2 PARTITION OF inh_p FOR VALUES FROM (100) TO (200)
    WITH (events_per_spindle = 3, time_to_live = '1 hour');
RESET default_table_access_method;
CREATE TABLE inh_p3 PARTITION OF inh_p FOR VALUES FROM (200) TO (300);	-- heap
-- a spindle table attached as a partition keeps its events and options
-- (core validates the partition constraint with a scan across spindles)
CREATE TABLE inh_p4 (id int, n int, body text) USING spindle
    WITH (events_per_spindle = 5);
INSERT INTO inh_p4 SELECT g, g, 'before attach' FROM generate_series(300, 311) g;
ALTER TABLE inh_p ATTACH PARTITION inh_p4 FOR VALUES FROM (300) TO (400);
-- bad options of a partition are refused as for any spindle table
CREATE TABLE inh_p5 PARTITION OF inh_p FOR VALUES FROM (400) TO (500)
    USING spindle WITH (events_per_spindle = -1);
\echo :SQLSTATE
SELECT c.relname, a.amname, c.reloptions
  FROM pg_class c JOIN pg_am a ON a.oid = c.relam
 WHERE c.relname LIKE 'inh\_p_' ORDER BY 1;
SELECT relation, events_per_spindle, time_to_live FROM spindle.tables
 WHERE relation::text LIKE 'inh\_p%' ORDER BY relation::text;
SELECT * FROM inh_spindles WHERE relation::text LIKE 'inh\_p%'
 ORDER BY relation::text, spindle_no;

-- DML through the partitioned parent, including rows moving between
-- partitions
INSERT INTO inh_p SELECT g, g, 'b' || g FROM generate_series(1, 350, 7) g;
COPY inh_p FROM stdin;
5	5	copied
150	150	copied
250	250	copied
\.
UPDATE inh_p SET id = id + 100 WHERE id < 20;		-- inh_p1 -> inh_p2
UPDATE inh_p SET body = 'updated' WHERE id = 150;
DELETE FROM inh_p WHERE id > 340;
SELECT tableoid::regclass, count(*), sum(n) FROM inh_p GROUP BY 1 ORDER BY 1;
SELECT tableoid::regclass, id, n, body FROM inh_p WHERE id IN (101, 108, 115, 150, 300)
 ORDER BY id, body;
SELECT * FROM inh_spindles WHERE relation::text LIKE 'inh\_p%'
 ORDER BY relation::text, spindle_no;
-- indexes made on the parent reach the spindle partitions
CREATE INDEX inh_p_id ON inh_p (id);
SET enable_seqscan = off;
SELECT tableoid::regclass, id, n FROM inh_p WHERE id BETWEEN 85 AND 110 ORDER BY id;
RESET enable_seqscan;

-- rewriting ALTERs through the partitioned parent are refused
ALTER TABLE inh_p ALTER COLUMN n TYPE bigint;
\echo :SQLSTATE
ALTER TABLE inh_p ADD COLUMN w int;
\echo :SQLSTATE
ALTER TABLE inh_p DROP COLUMN body;
\echo :SQLSTATE
-- BRIN cannot reach a spindle table through a partitioned parent either
CREATE INDEX inh_p_brin ON inh_p USING brin (n);
\echo :SQLSTATE
CREATE INDEX inh_p3_brin ON inh_p3 USING brin (n);		-- the heap partition
CREATE TABLE inh_pb (id int) PARTITION BY LIST (id);
CREATE INDEX inh_pb_brin ON inh_pb USING brin (id);
CREATE TABLE inh_pb1 PARTITION OF inh_pb FOR VALUES IN (1) USING spindle;
\echo :SQLSTATE
CREATE TABLE inh_pb2 (id int) USING spindle;
ALTER TABLE inh_pb ATTACH PARTITION inh_pb2 FOR VALUES IN (2);
\echo :SQLSTATE
SELECT count(*) AS brin_on_spindle_tables FROM pg_index i
  JOIN pg_class ic ON ic.oid = i.indexrelid
  JOIN pg_am a ON a.oid = ic.relam
  JOIN pg_class t ON t.oid = i.indrelid
  JOIN pg_am ta ON ta.oid = t.relam
 WHERE a.amname = 'brin' AND ta.amname = 'spindle';
DROP TABLE inh_pb, inh_pb2;
-- a detached partition is an ordinary spindle table again
ALTER TABLE inh_p DETACH PARTITION inh_p4;
ALTER TABLE inh_p4 ADD COLUMN w int;
\echo :SQLSTATE
SELECT count(*) FROM inh_p4;
ALTER TABLE inh_p ATTACH PARTITION inh_p4 FOR VALUES FROM (300) TO (400);

-- TRUNCATE of the partitioned parent leaves each spindle partition with an
-- open spindle, ready for inserts
TRUNCATE inh_p;
SELECT count(*) FROM inh_p;
SELECT * FROM inh_spindles WHERE relation::text LIKE 'inh\_p%'
 ORDER BY relation::text, spindle_no;
INSERT INTO inh_p SELECT g, g, 'after truncate' FROM generate_series(1, 399, 50) g;
SELECT tableoid::regclass, count(*) FROM inh_p GROUP BY 1 ORDER BY 1;
SELECT * FROM inh_spindles WHERE relation::text LIKE 'inh\_p%'
 ORDER BY relation::text, spindle_no;

-- nothing of the partitions changed
SELECT * FROM inh_columns WHERE rel::text LIKE 'inh\_p%' AND attname = 'n'
 ORDER BY rel::text;

-- DROP of the parents takes the spindle tables and their spindles along
SELECT 'inh_p1'::regclass::oid AS p1_oid, 'inh_q'::regclass::oid AS q_oid \gset
-- spindle.verify(): every spindle table left here is healthy
SELECT c.oid::regclass AS rel, v FROM pg_catalog.pg_class c, spindle.verify(c.oid) v
 WHERE c.relam = (SELECT oid FROM pg_catalog.pg_am WHERE amname = 'spindle')
 ORDER BY 1, 2;
DROP TABLE inh_p;
DROP TABLE inh_q, inh_heap_child;
DROP TABLE inh_base, inh_top, inh_heap_base;
SELECT count(*) FROM spindle.spindle_catalog WHERE relation IN (:p1_oid, :q_oid);
SELECT count(*) FROM spindle.tables WHERE relation::text LIKE 'inh\_%'
   AND relation::text <> 'inh_fk';
DROP TABLE inh_fk, inh_ref;
DROP FUNCTION inh_alter(), inh_alter_sql();
DROP VIEW inh_spindles, inh_columns;
