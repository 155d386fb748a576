--
-- hardening: defects a hostile review found in the core, each reproduced.
--
\set VERBOSITY terse

-- 1. The statements spindle runs as superuser use no name the caller's
-- search_path could redirect: a role that plants its own max() gains
-- nothing.
CREATE ROLE regress_spindle_alice;
CREATE SCHEMA alice AUTHORIZATION regress_spindle_alice;
GRANT USAGE ON SCHEMA spindle TO regress_spindle_alice;
SET ROLE regress_spindle_alice;
CREATE FUNCTION alice.evil(bigint, bigint) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        EXECUTE 'ALTER ROLE regress_spindle_alice SUPERUSER';
    END IF;
    RETURN greatest($1, $2);
END $$;
CREATE AGGREGATE alice.max(bigint) (SFUNC = alice.evil, STYPE = bigint);
SET search_path = alice, pg_catalog;
BEGIN;
CREATE TABLE alice.t (a int) USING spindle WITH (events_per_spindle = 1);
INSERT INTO alice.t VALUES (1), (2), (3);
COMMIT;
RESET search_path;
RESET ROLE;
SELECT rolsuper FROM pg_roles WHERE rolname = 'regress_spindle_alice';
SELECT count(*) FROM alice.t;
DROP SCHEMA alice CASCADE;
REVOKE USAGE ON SCHEMA spindle FROM regress_spindle_alice;
DROP ROLE regress_spindle_alice;

-- 2. ALTER TABLE SET (events_per_spindle) gives the empty spindles the new
-- capacity for real: no spindle holds more than its capacity, none stops
-- short of it.
CREATE TABLE hc (id int) USING spindle WITH (events_per_spindle = 1000);
ALTER TABLE hc SET (events_per_spindle = 5);
INSERT INTO hc SELECT generate_series(1, 12);
SELECT capacity, events FROM spindle.spindles
 WHERE relation = 'hc'::regclass AND state <> 'ready' ORDER BY spindle_no;
ALTER TABLE hc SET (events_per_spindle = 100);
INSERT INTO hc SELECT generate_series(13, 30);
SELECT capacity, events FROM spindle.spindles
 WHERE relation = 'hc'::regclass AND state <> 'ready' ORDER BY spindle_no;
SELECT count(*) AS over_capacity FROM spindle.spindles
 WHERE relation = 'hc'::regclass AND events > capacity;
-- rolled back: the old capacity stays
BEGIN;
ALTER TABLE hc SET (events_per_spindle = 7);
ROLLBACK;
INSERT INTO hc SELECT generate_series(31, 40);
SELECT capacity, events FROM spindle.spindles
 WHERE relation = 'hc'::regclass AND state <> 'ready' ORDER BY spindle_no;
SELECT count(*), count(DISTINCT ctid) FROM hc;

-- 3. A transaction may create any number of spindles (their pending TID
-- ranges are kept as one), in a table it made or in an existing one.
BEGIN;
CREATE TABLE hm (id int PRIMARY KEY) USING spindle WITH (events_per_spindle = 10);
INSERT INTO hm SELECT generate_series(1, 3000);
COMMIT;
CREATE TABLE hm2 USING spindle WITH (events_per_spindle = 100)
    AS SELECT g AS id FROM generate_series(1, 30000) g;
CREATE TABLE hm3 (id int PRIMARY KEY) USING spindle WITH (events_per_spindle = 10);
BEGIN;
LOCK TABLE hm3 IN ACCESS EXCLUSIVE MODE;
INSERT INTO hm3 SELECT generate_series(1, 3000);
COMMIT;
SELECT (SELECT count(*) FROM hm), (SELECT count(*) FROM hm2), (SELECT count(*) FROM hm3);
-- and rolled back, the same: nothing of it is ever found through an index
BEGIN;
LOCK TABLE hm3 IN ACCESS EXCLUSIVE MODE;
INSERT INTO hm3 SELECT generate_series(5001, 8000);
ROLLBACK;
SET enable_seqscan = off;
SELECT count(*) FROM hm3 WHERE id > 5000;
RESET enable_seqscan;
VACUUM hm3;
INSERT INTO hm3 SELECT generate_series(5001, 5100);
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT count(*), min(id), max(id) FROM hm3 WHERE id > 5000;
RESET enable_bitmapscan;
RESET enable_seqscan;

-- 4. A session's first insert neither walks nor locks the full spindles
\c -
BEGIN;
INSERT INTO hm VALUES (3001);
SELECT count(*) < 20 AS few_locks FROM pg_locks WHERE pid = pg_backend_pid();
COMMIT;

-- 5. A transaction that created spindles cannot be prepared (it would hold
-- the table's creation lock until COMMIT PREPARED)
CREATE TABLE hp (id int) USING spindle WITH (events_per_spindle = 2);
BEGIN;
LOCK TABLE hp IN ACCESS EXCLUSIVE MODE;
INSERT INTO hp SELECT generate_series(1, 10);
PREPARE TRANSACTION 'hp_create';
\echo :SQLSTATE
SELECT count(*) FROM pg_prepared_xacts;
SELECT count(*) FROM hp;
-- one that only inserts into existing spindles can
BEGIN;
INSERT INTO hp VALUES (100);
PREPARE TRANSACTION 'hp_insert';
COMMIT PREPARED 'hp_insert';
SELECT count(*) FROM hp;

-- 6. Dropping thousands of spindles at once takes a bounded number of locks
-- per transaction; successive calls drop the rest
CREATE TABLE hd (id int) USING spindle WITH (events_per_spindle = 1);
INSERT INTO hd SELECT generate_series(1, 600);
DELETE FROM hd;
SELECT spindle.drop_spindles('hd') AS d1 \gset
SELECT spindle.drop_spindles('hd') AS d2 \gset
SELECT spindle.drop_spindles('hd') AS d3 \gset
SELECT spindle.drop_spindles('hd') AS d4 \gset
SELECT :d1 + :d2 + :d3 + :d4 AS dropped, :d1 < 600 AS first_call_bounded;
SELECT count(*) FROM spindle.spindles WHERE relation = 'hd'::regclass AND state = 'full';

DROP TABLE hc, hm, hm2, hm3, hp, hd;

-- 7. The views are security barriers: a role's own function in a WHERE
-- clause sees no row of a table the role may not read
CREATE ROLE regress_spindle_peek;
CREATE TABLE hsecret (id int) USING spindle;
GRANT USAGE ON SCHEMA spindle TO regress_spindle_peek;
CREATE FUNCTION hpeek(regclass) RETURNS boolean LANGUAGE plpgsql COST 0.0000001
    AS $$ BEGIN RAISE NOTICE 'peeked at %', $1; RETURN true; END $$;
SET ROLE regress_spindle_peek;
SELECT count(*) FROM spindle.tables WHERE hpeek(relation);
SELECT count(*) FROM spindle.spindles WHERE hpeek(relation);
RESET ROLE;
DROP FUNCTION hpeek(regclass);
DROP TABLE hsecret;
REVOKE USAGE ON SCHEMA spindle FROM regress_spindle_peek;
DROP ROLE regress_spindle_peek;

-- 8. Nothing is purged or dropped in a read-only transaction
CREATE TABLE hro (id int) USING spindle WITH (events_per_spindle = 1);
INSERT INTO hro SELECT generate_series(1, 3);
BEGIN TRANSACTION READ ONLY;
SELECT spindle.purge_expired('hro', '0s');
ROLLBACK;
BEGIN TRANSACTION READ ONLY;
SELECT spindle.drop_spindles('hro');
ROLLBACK;
SELECT count(*) FROM hro;
DROP TABLE hro;

-- 9. ALTER TABLE SET (events_per_spindle) rolled back, or done twice in one
-- transaction, leaves every committed event reachable through the index
CREATE TABLE ha6 (id int PRIMARY KEY) USING spindle WITH (events_per_spindle = 5);
INSERT INTO ha6 SELECT generate_series(1, 10);
BEGIN;
ALTER TABLE ha6 SET (events_per_spindle = 7);
INSERT INTO ha6 VALUES (100);
ROLLBACK;
INSERT INTO ha6 VALUES (11);
BEGIN;
SAVEPOINT s;
ALTER TABLE ha6 SET (events_per_spindle = 3);
INSERT INTO ha6 VALUES (200);
ROLLBACK TO s;
INSERT INTO ha6 VALUES (12);
COMMIT;
SELECT spindle.drop_spindles('ha6');
VACUUM ha6;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT id FROM ha6 WHERE id IN (3, 11, 12, 100, 200) ORDER BY id;
INSERT INTO ha6 VALUES (11);
\echo :SQLSTATE
INSERT INTO ha6 VALUES (100), (200);
SELECT id FROM ha6 WHERE id IN (100, 200) ORDER BY id;
RESET enable_bitmapscan;
RESET enable_seqscan;
CREATE TABLE ht1 (id int PRIMARY KEY) USING spindle WITH (events_per_spindle = 10);
BEGIN;
ALTER TABLE ht1 SET (events_per_spindle = 20);
ALTER TABLE ht1 SET (events_per_spindle = 30);
INSERT INTO ht1 SELECT generate_series(1, 5);
COMMIT;
SELECT spindle.drop_spindles('ht1');
VACUUM ht1;
SET enable_seqscan = off;
SELECT count(*) FROM ht1 WHERE id BETWEEN 1 AND 5;
INSERT INTO ht1 VALUES (3);
\echo :SQLSTATE
RESET enable_seqscan;
SELECT capacity, events FROM spindle.spindles
 WHERE relation = 'ht1'::regclass AND state <> 'ready' ORDER BY spindle_no;
DROP TABLE ha6, ht1;

-- 10. SET TABLESPACE of a spindle table runs in a transaction of its own
CREATE TABLE hts (id int) USING spindle;
BEGIN;
ALTER TABLE hts SET TABLESPACE pg_default;
ROLLBACK;
ALTER TABLE hts SET TABLESPACE pg_default;
-- spindle.verify(): every spindle table left here is healthy
SELECT c.oid::regclass AS rel, v FROM pg_catalog.pg_class c, spindle.verify(c.oid) v
 WHERE c.relam = (SELECT oid FROM pg_catalog.pg_am WHERE amname = 'spindle')
 ORDER BY 1, 2;
DROP TABLE hts;
