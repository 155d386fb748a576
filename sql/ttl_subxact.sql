-- A TTL purge undone by ROLLBACK TO SAVEPOINT or by a PL/pgSQL exception
-- block must not be remembered as done: the next purge_expired() of the
-- session still purges those events.  (A backend remembers full spindles
-- it purged completely, from the commit of that purge on, and skips them.)
CREATE TABLE ttl_sx (id int, body text) USING spindle
    WITH (events_per_spindle = 2);
INSERT INTO ttl_sx SELECT g, 'a' || g FROM generate_series(1, 6) g;
SELECT pg_sleep(1.1);

-- rolled back to a savepoint
BEGIN;
SAVEPOINT a;
SELECT spindle.purge_expired('ttl_sx', '0 s');
ROLLBACK TO a;
COMMIT;
SELECT count(*) FROM ttl_sx;
SELECT spindle.purge_expired('ttl_sx', '0 s');
SELECT count(*) FROM ttl_sx;

-- undone by an exception block
INSERT INTO ttl_sx SELECT g, 'b' || g FROM generate_series(7, 12) g;
SELECT pg_sleep(1.1);
DO $$
BEGIN
    PERFORM spindle.purge_expired('ttl_sx', '0 s');
    RAISE EXCEPTION 'undo the purge';
EXCEPTION WHEN raise_exception THEN
    NULL;
END $$;
SELECT count(*) FROM ttl_sx;
SELECT spindle.purge_expired('ttl_sx', '0 s');
SELECT count(*) FROM ttl_sx;

-- released into a savepoint that is rolled back
INSERT INTO ttl_sx SELECT g, 'c' || g FROM generate_series(13, 18) g;
SELECT pg_sleep(1.1);
BEGIN;
SAVEPOINT a;
SAVEPOINT b;
SELECT spindle.purge_expired('ttl_sx', '0 s');
RELEASE b;
ROLLBACK TO a;
COMMIT;
SELECT spindle.purge_expired('ttl_sx', '0 s');
SELECT count(*) FROM ttl_sx;

-- released and committed: remembered, nothing left to purge
INSERT INTO ttl_sx SELECT g, 'd' || g FROM generate_series(19, 24) g;
SELECT pg_sleep(1.1);
BEGIN;
SAVEPOINT a;
SELECT spindle.purge_expired('ttl_sx', '0 s');
RELEASE a;
COMMIT;
SELECT spindle.purge_expired('ttl_sx', '0 s');
SELECT count(*) FROM ttl_sx;

-- a rolled-back top-level transaction
INSERT INTO ttl_sx SELECT g, 'e' || g FROM generate_series(25, 30) g;
SELECT pg_sleep(1.1);
BEGIN;
SELECT spindle.purge_expired('ttl_sx', '0 s');
ROLLBACK;
SELECT spindle.purge_expired('ttl_sx', '0 s');
SELECT count(*) FROM ttl_sx;

DROP TABLE ttl_sx;
