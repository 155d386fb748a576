--
-- privileges: who may change, purge, drop and see spindle tables.
--
--  - ALTER TABLE ... SET/RESET of a spindle table needs its owner (42501
--    otherwise, raised before any lock is taken: see the isolation test
--    rights_before_locks).
--  - spindle.purge_expired() and spindle.drop_spindles(rel) need the
--    table's owner (42501 otherwise, before any lock).  A TTL purge is
--    retention maintenance: like TRUNCATE it fires no row triggers and is
--    not filtered by row-level security, so an owner who is subject to
--    FORCE ROW LEVEL SECURITY is refused (42501) instead of purging rows
--    its policies hide.  spindle.drop_spindles() without an argument works
--    on the tables the caller owns.
--  - spindle.spindles, spindle.tables and spindle._spindle_info() show a
--    role only the spindle tables it has SELECT privilege on.
--
\set VERBOSITY default

-- The worker is off (test/spindle.conf): it would purge and drop too.
SHOW spindle.enable_worker;

CREATE ROLE regress_spindle_owner;
CREATE ROLE regress_spindle_reader;		-- SELECT on priv_open
CREATE ROLE regress_spindle_deleter;	-- SELECT and DELETE on priv_open
CREATE ROLE regress_spindle_nobody;		-- nothing
CREATE ROLE regress_spindle_member IN ROLE regress_spindle_owner;
GRANT CREATE ON SCHEMA public TO regress_spindle_owner;

SET ROLE regress_spindle_owner;
CREATE TABLE priv_open (id int, n int) USING spindle WITH (events_per_spindle = 10);
CREATE TABLE priv_secret (id int, n int) USING spindle WITH (events_per_spindle = 10);
INSERT INTO priv_open SELECT g, g FROM generate_series(1, 15) g;
INSERT INTO priv_secret SELECT g, g FROM generate_series(1, 25) g;
GRANT SELECT ON priv_open TO regress_spindle_reader, regress_spindle_deleter;
GRANT DELETE ON priv_open TO regress_spindle_deleter;
RESET ROLE;

CREATE VIEW priv_spindles AS
  SELECT relation, spindle_no, state, capacity, events, purged_events
    FROM spindle.spindles
   WHERE relation::text LIKE 'priv\_%' AND state <> 'ready';
GRANT SELECT ON priv_spindles TO PUBLIC;

-- ===================== a) ALTER TABLE SET by a non-owner =================
SET ROLE regress_spindle_deleter;
ALTER TABLE priv_open SET (events_per_spindle = 5);
\echo :SQLSTATE
ALTER TABLE priv_open SET (time_to_live = '1 hour');
\echo :SQLSTATE
ALTER TABLE priv_open RESET (events_per_spindle);
\echo :SQLSTATE
ALTER TABLE priv_open SET (fillfactor = 50);
\echo :SQLSTATE
ALTER TABLE priv_open ADD COLUMN w int;
\echo :SQLSTATE
RESET ROLE;
SELECT reloptions FROM pg_class WHERE oid = 'priv_open'::regclass;
-- a member of the owning role may
SET ROLE regress_spindle_member;
ALTER TABLE priv_open SET (time_to_live = '1 day');
ALTER TABLE priv_open RESET (time_to_live);
RESET ROLE;
SELECT reloptions FROM pg_class WHERE oid = 'priv_open'::regclass;

-- ===================== drop_spindles =====================================
SET ROLE regress_spindle_owner;
DELETE FROM priv_open WHERE id <= 10;
DELETE FROM priv_secret WHERE id <= 10;
RESET ROLE;
SET ROLE regress_spindle_deleter;
SELECT spindle.drop_spindles('priv_open');
\echo :SQLSTATE
SELECT spindle.drop_spindles('priv_secret');
\echo :SQLSTATE
-- without an argument: only the tables it owns, here none
SELECT spindle.drop_spindles();
RESET ROLE;
SELECT * FROM priv_spindles ORDER BY relation::text, spindle_no;
SET ROLE regress_spindle_member;
SELECT spindle.drop_spindles('priv_open');
RESET ROLE;
SET ROLE regress_spindle_owner;
SELECT spindle.drop_spindles();
RESET ROLE;
SELECT * FROM priv_spindles ORDER BY relation::text, spindle_no;

-- ===================== c) the views ======================================
-- the superuser sees both tables
SELECT relation, events_per_spindle, spindles, events, purged_events, spindles_dropped
  FROM spindle.tables WHERE relation::text LIKE 'priv\_%' ORDER BY relation::text;
-- a role with SELECT on priv_open only sees priv_open
SET ROLE regress_spindle_reader;
SELECT relation, events_per_spindle, spindles, events, purged_events, spindles_dropped
  FROM spindle.tables WHERE relation::text LIKE 'priv\_%' ORDER BY relation::text;
SELECT * FROM priv_spindles ORDER BY relation::text, spindle_no;
SELECT DISTINCT relation FROM spindle._spindle_info()
 WHERE relation::text LIKE 'priv\_%';
RESET ROLE;
-- a role without rights sees neither
SET ROLE regress_spindle_nobody;
SELECT count(*) FROM spindle.tables WHERE relation::text LIKE 'priv\_%';
SELECT count(*) FROM spindle.spindles WHERE relation::text LIKE 'priv\_%';
SELECT count(*) FROM spindle._spindle_info() WHERE relation::text LIKE 'priv\_%';
RESET ROLE;
-- the owner sees both, and loses priv_secret when it revokes its own SELECT
SET ROLE regress_spindle_owner;
SELECT DISTINCT relation FROM spindle.spindles WHERE relation::text LIKE 'priv\_%'
 ORDER BY 1;
REVOKE SELECT ON priv_secret FROM regress_spindle_owner;
SELECT DISTINCT relation FROM spindle.spindles WHERE relation::text LIKE 'priv\_%'
 ORDER BY 1;
GRANT SELECT ON priv_secret TO regress_spindle_owner;
RESET ROLE;

-- ===================== b) purge_expired ==================================
SET ROLE regress_spindle_owner;
CREATE TABLE priv_rls (id int, tenant text) USING spindle
    WITH (events_per_spindle = 100);
INSERT INTO priv_rls SELECT g, CASE WHEN g <= 10 THEN 'a' ELSE 'b' END
  FROM generate_series(1, 20) g;
ALTER TABLE priv_rls ENABLE ROW LEVEL SECURITY;
CREATE POLICY priv_rls_a ON priv_rls USING (tenant = 'a');
GRANT SELECT, DELETE ON priv_rls TO regress_spindle_deleter;
CREATE TABLE priv_trig (id int) USING spindle;
INSERT INTO priv_trig SELECT generate_series(1, 5);
CREATE FUNCTION priv_no_delete() RETURNS trigger LANGUAGE plpgsql
    AS $$ BEGIN RAISE EXCEPTION 'deleting from % is forbidden', TG_TABLE_NAME; END $$;
CREATE TRIGGER priv_no_delete BEFORE DELETE ON priv_trig
    FOR EACH ROW EXECUTE FUNCTION priv_no_delete();
RESET ROLE;
-- events carry their append time to the second: a ttl of 0 takes every
-- event appended more than a second ago (see purge_expired.sql)
SELECT pg_sleep(1.1);

-- a role that may DELETE but does not own the table: 42501, nothing purged
-- (it sees 10 of the 20 rows; a purge would have taken all 20)
SET ROLE regress_spindle_deleter;
SELECT count(*) FROM priv_rls;
SELECT spindle.purge_expired('priv_rls', '0s');
\echo :SQLSTATE
SELECT spindle.purge_expired('priv_open', '0s');
\echo :SQLSTATE
SELECT spindle.purge_expired('priv_secret', '0s');
\echo :SQLSTATE
SELECT count(*) FROM priv_rls;
RESET ROLE;
SELECT count(*) FROM priv_rls;
SELECT count(*) FROM priv_open;

-- an owner subject to FORCE ROW LEVEL SECURITY is refused
SET ROLE regress_spindle_owner;
ALTER TABLE priv_rls FORCE ROW LEVEL SECURITY;
SELECT count(*) FROM priv_rls;
SELECT spindle.purge_expired('priv_rls', '0s');
\echo :SQLSTATE
RESET ROLE;
SELECT count(*) FROM priv_rls;
-- a role that bypasses row-level security (here the superuser) is not refused
SELECT spindle.purge_expired('priv_rls', '1 hour');
-- without FORCE the owner is not subject to its policies: everything goes
SET ROLE regress_spindle_owner;
ALTER TABLE priv_rls NO FORCE ROW LEVEL SECURITY;
SELECT spindle.purge_expired('priv_rls', '0s');
RESET ROLE;
SELECT count(*) FROM priv_rls;

-- row triggers do not fire: a purge is retention maintenance, like TRUNCATE
SET ROLE regress_spindle_owner;
DELETE FROM priv_trig WHERE id = 1;
SELECT spindle.purge_expired('priv_trig', '0s');
SELECT count(*) FROM priv_trig;
RESET ROLE;

-- a member of the owning role may purge
SET ROLE regress_spindle_owner;
INSERT INTO priv_trig SELECT generate_series(6, 8);
SELECT pg_sleep(1.1);
SELECT spindle.purge_expired('priv_open', '1 hour');
RESET ROLE;
SET ROLE regress_spindle_member;
SELECT spindle.purge_expired('priv_trig', '0s');
RESET ROLE;

-- the function's comment says who may call it
SELECT obj_description('spindle.purge_expired(regclass, interval)'::regprocedure,
                       'pg_proc');
SELECT obj_description('spindle.drop_spindles(regclass)'::regprocedure, 'pg_proc');

DROP VIEW priv_spindles;
DROP OWNED BY regress_spindle_owner, regress_spindle_reader,
    regress_spindle_deleter, regress_spindle_nobody, regress_spindle_member;
REVOKE CREATE ON SCHEMA public FROM regress_spindle_owner;
-- spindle.verify(): every spindle table left here is healthy
SELECT c.oid::regclass AS rel, v FROM pg_catalog.pg_class c, spindle.verify(c.oid) v
 WHERE c.relam = (SELECT oid FROM pg_catalog.pg_am WHERE amname = 'spindle')
 ORDER BY 1, 2;
DROP ROLE regress_spindle_member, regress_spindle_owner, regress_spindle_reader,
    regress_spindle_deleter, regress_spindle_nobody;
