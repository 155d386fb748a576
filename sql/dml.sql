--
-- dml: DELETE flags events purged, UPDATE purges the old version and appends
-- the new one to the open spindle, aborted inserts use a slot and count as
-- purged, savepoints, row locks and cursors.
--
\set VERBOSITY default

-- This test asserts exact drop counts and spindle lists: the background
-- worker, which drops spindles at moments of its own choosing, must be off
-- (test/spindle.conf turns it off for pg_regress).
SHOW spindle.enable_worker;

CREATE TABLE d (id int, v text) USING spindle WITH (events_per_spindle = 5);
-- a view of the spindles in use (never the 'ready' ones)
CREATE VIEW d_spindles AS
  SELECT spindle_no, state, capacity, events, purged_events
    FROM spindle.spindles WHERE relation = 'd'::regclass AND state <> 'ready';

INSERT INTO d SELECT g, 'v' || g FROM generate_series(1, 12) g;
SELECT * FROM d_spindles ORDER BY spindle_no;

-- DELETE
DELETE FROM d WHERE id IN (1, 2);
SELECT count(*), sum(id) FROM d;
SELECT id FROM d WHERE id <= 3 ORDER BY id;
SELECT * FROM d_spindles ORDER BY spindle_no;
DELETE FROM d WHERE id = 4 RETURNING id, v;
DELETE FROM d WHERE id = 4 RETURNING id, v;
DELETE FROM d WHERE id = 1000;
SELECT * FROM d_spindles ORDER BY spindle_no;

-- UPDATE: the old version is purged, the new one appended to the open spindle
SELECT ctid AS ctid_before FROM d WHERE id = 3 \gset
UPDATE d SET v = 'updated' WHERE id = 3 RETURNING id, v;
SELECT id, v, ctid <> :'ctid_before' AS moved FROM d WHERE id = 3;
SELECT count(*) FROM d WHERE id = 3;
SELECT * FROM d_spindles ORDER BY spindle_no;

-- an UPDATE of many rows fills the open spindle and starts the next one
UPDATE d SET v = v || '!' WHERE id BETWEEN 6 AND 10;
SELECT id, v FROM d ORDER BY id;
SELECT * FROM d_spindles ORDER BY spindle_no;
-- the key of a row can change too
UPDATE d SET id = id + 100 WHERE id = 11;
SELECT id, v FROM d WHERE id IN (11, 111);
SELECT * FROM d_spindles ORDER BY spindle_no;

-- updating the same row twice in one transaction, and deleting it afterwards
BEGIN;
UPDATE d SET v = 'first' WHERE id = 12;
UPDATE d SET v = 'second' WHERE id = 12;
SELECT id, v FROM d WHERE id = 12;
COMMIT;
SELECT id, v FROM d WHERE id = 12;
SELECT count(*) FROM d WHERE id = 12;
SELECT * FROM d_spindles ORDER BY spindle_no;

BEGIN;
INSERT INTO d VALUES (50, 'short-lived');
UPDATE d SET v = 'shorter-lived' WHERE id = 50;
DELETE FROM d WHERE id = 50;
COMMIT;
SELECT count(*) FROM d WHERE id = 50;
SELECT * FROM d_spindles ORDER BY spindle_no;

-- every slot used is an event; live events are the rows a scan returns
SELECT (SELECT sum(events) - sum(purged_events) FROM d_spindles) AS live_events,
       (SELECT count(*) FROM d) AS rows;

-- a rolled-back INSERT uses a slot and counts as a purged event
SELECT sum(events) AS events_before, sum(purged_events) AS purged_before
  FROM spindle.spindles WHERE relation = 'd'::regclass \gset
BEGIN;
INSERT INTO d VALUES (60, 'rolled back');
SELECT count(*) FROM d WHERE id = 60;
ROLLBACK;
SELECT count(*) FROM d WHERE id = 60;
SELECT sum(events) - :events_before AS new_events,
       sum(purged_events) - :purged_before AS new_purged
  FROM spindle.spindles WHERE relation = 'd'::regclass;
-- an INSERT that fails also uses its slot
INSERT INTO d SELECT 70, (1 / (g - 3))::text
  FROM generate_series(1, 3) g;
SELECT count(*) FROM d WHERE id = 70;
SELECT sum(events) - :events_before AS new_events,
       sum(purged_events) - :purged_before AS new_purged
  FROM spindle.spindles WHERE relation = 'd'::regclass;

-- an uncommitted DELETE is not counted, not by its own transaction either
SELECT sum(purged_events) AS purged_before
  FROM spindle.spindles WHERE relation = 'd'::regclass \gset
BEGIN;
DELETE FROM d WHERE id = 5;
SELECT count(*) FROM d WHERE id = 5;
SELECT sum(purged_events) - :purged_before AS new_purged
  FROM spindle.spindles WHERE relation = 'd'::regclass;
ROLLBACK;
SELECT count(*) FROM d WHERE id = 5;
SELECT sum(purged_events) - :purged_before AS new_purged
  FROM spindle.spindles WHERE relation = 'd'::regclass;
-- an UPDATE rolled back: the old version stays, the new slot counts as purged
SELECT sum(events) AS events_before, sum(purged_events) AS purged_before
  FROM spindle.spindles WHERE relation = 'd'::regclass \gset
BEGIN;
UPDATE d SET v = 'never' WHERE id = 5;
ROLLBACK;
SELECT id, v FROM d WHERE id = 5;
SELECT sum(events) - :events_before AS new_events,
       sum(purged_events) - :purged_before AS new_purged
  FROM spindle.spindles WHERE relation = 'd'::regclass;

-- savepoints
CREATE TABLE s (id int, v text) USING spindle WITH (events_per_spindle = 4);
BEGIN;
INSERT INTO s VALUES (1, 'a');
SAVEPOINT sp1;
INSERT INTO s VALUES (2, 'b');
ROLLBACK TO SAVEPOINT sp1;
INSERT INTO s VALUES (3, 'c');
SAVEPOINT sp2;
DELETE FROM s WHERE id = 1;
SELECT id FROM s ORDER BY id;
ROLLBACK TO SAVEPOINT sp2;
SELECT id FROM s ORDER BY id;
SAVEPOINT sp3;
UPDATE s SET v = 'c2' WHERE id = 3;
RELEASE SAVEPOINT sp3;
SAVEPOINT sp4;
INSERT INTO s VALUES (4, 'd');
SELECT 1/0;
ROLLBACK TO SAVEPOINT sp4;
INSERT INTO s VALUES (5, 'e');
COMMIT;
SELECT id, v FROM s ORDER BY id;
-- slots: 1, 2 (aborted), 3, 3's new version, 4 (aborted), 5
-- purged: 2, 4 (aborted inserts) and the old version of 3
SELECT sum(events) AS events, sum(purged_events) AS purged_events
  FROM spindle.spindles WHERE relation = 's'::regclass;
SELECT spindle_no, state, capacity, events, purged_events FROM spindle.spindles
 WHERE relation = 's'::regclass AND state <> 'ready' ORDER BY spindle_no;

-- row locks
BEGIN;
SELECT id FROM d WHERE id IN (5, 6) ORDER BY id FOR UPDATE;
SELECT id FROM d ORDER BY id LIMIT 3 FOR UPDATE SKIP LOCKED;
SELECT id FROM d WHERE id = 7 FOR NO KEY UPDATE;
SELECT id FROM d WHERE id = 8 FOR SHARE;
SELECT id FROM d WHERE id = 9 FOR KEY SHARE NOWAIT;
-- a row locked by us can be updated and deleted
UPDATE d SET v = 'locked and updated' WHERE id = 5;
DELETE FROM d WHERE id = 8;
COMMIT;
SELECT id, v FROM d WHERE id IN (5, 8) ORDER BY id;
-- the queue pattern in one statement
DELETE FROM d WHERE id IN (SELECT id FROM d ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 2)
  RETURNING id;

-- cursors: WHERE CURRENT OF
BEGIN;
DECLARE cur CURSOR FOR SELECT id, v FROM d WHERE id >= 9 ORDER BY id FOR UPDATE;
FETCH 1 FROM cur;
UPDATE d SET v = 'via cursor' WHERE CURRENT OF cur;
FETCH 1 FROM cur;
DELETE FROM d WHERE CURRENT OF cur;
CLOSE cur;
COMMIT;
SELECT id, v FROM d ORDER BY id;

-- the books still balance, and no spindle is over capacity
SELECT (SELECT sum(events) - sum(purged_events) FROM spindle.spindles
         WHERE relation = 'd'::regclass) AS live_events,
       (SELECT count(*) FROM d) AS rows;
SELECT count(*) AS over_capacity FROM spindle.spindles
 WHERE relation IN ('d'::regclass, 's'::regclass) AND events > capacity;
-- purged never exceeds events
SELECT count(*) AS over_purged FROM spindle.spindles
 WHERE relation IN ('d'::regclass, 's'::regclass) AND purged_events > events;

-- DELETE everything, then insert again
DELETE FROM d;
SELECT count(*) FROM d;
INSERT INTO d VALUES (200, 'after delete');
SELECT id, v FROM d;
SELECT (SELECT sum(events) - sum(purged_events) FROM spindle.spindles
         WHERE relation = 'd'::regclass) AS live_events;

DROP VIEW d_spindles;
-- spindle.verify(): every spindle table left here is healthy
SELECT c.oid::regclass AS rel, v FROM pg_catalog.pg_class c, spindle.verify(c.oid) v
 WHERE c.relam = (SELECT oid FROM pg_catalog.pg_am WHERE amname = 'spindle')
 ORDER BY 1, 2;
DROP TABLE d, s;

