--
-- capacity_rollback: ALTER TABLE SET (events_per_spindle) gives the new
-- capacity to the table's spindles that have no events yet.  When the
-- transaction (or the savepoint) that made the change rolls back, the
-- spindles have their old capacity again, and no slot counter or full mark
-- in shared memory may still count with the capacity that was rolled
-- back: the spindle must not be left behind half empty (verify reports the
-- append order broken), and the next inserts fill it.
--
\set VERBOSITY default

CREATE TABLE cr (id int) USING spindle WITH (events_per_spindle = 100);

-- ROLLBACK: the inserts of the transaction filled spindle 1 at capacity 5
-- and went on to new spindles
BEGIN;
ALTER TABLE cr SET (events_per_spindle = 5);
INSERT INTO cr SELECT generate_series(1, 20);
SELECT spindle_no, state, capacity, events
  FROM spindle.spindles WHERE relation = 'cr'::regclass AND state <> 'ready'
 ORDER BY spindle_no;
ROLLBACK;
INSERT INTO cr SELECT generate_series(1, 20);
-- spindle 1 again has capacity 100 and takes the 20 events
SELECT spindle_no, state, capacity, events
  FROM spindle.spindles WHERE relation = 'cr'::regclass AND state <> 'ready'
 ORDER BY spindle_no;
SELECT * FROM spindle.verify('cr');
SELECT count(*) FROM cr;

-- ROLLBACK TO SAVEPOINT: the same, inside a transaction that commits
CREATE TABLE cs (id int) USING spindle WITH (events_per_spindle = 100);
BEGIN;
SAVEPOINT s;
ALTER TABLE cs SET (events_per_spindle = 5);
INSERT INTO cs SELECT generate_series(1, 20);
ROLLBACK TO SAVEPOINT s;
INSERT INTO cs SELECT generate_series(1, 20);
COMMIT;
SELECT spindle_no, state, capacity, events
  FROM spindle.spindles WHERE relation = 'cs'::regclass AND state <> 'ready'
 ORDER BY spindle_no;
SELECT * FROM spindle.verify('cs');
SELECT count(*) FROM cs;

-- the change made in a savepoint that was released is rolled back with
-- the savepoint around it
CREATE TABLE cn (id int) USING spindle WITH (events_per_spindle = 100);
BEGIN;
SAVEPOINT outer_sp;
SAVEPOINT inner_sp;
ALTER TABLE cn SET (events_per_spindle = 5);
INSERT INTO cn SELECT generate_series(1, 20);
RELEASE SAVEPOINT inner_sp;
ROLLBACK TO SAVEPOINT outer_sp;
INSERT INTO cn SELECT generate_series(1, 20);
COMMIT;
SELECT spindle_no, state, capacity, events
  FROM spindle.spindles WHERE relation = 'cn'::regclass AND state <> 'ready'
 ORDER BY spindle_no;
SELECT * FROM spindle.verify('cn');
SELECT count(*) FROM cn;

-- ROLLBACK PREPARED: the prepared transaction filled spindle 1 at capacity
-- 5 (it may create no spindle); the rollback runs in another backend
CREATE TABLE cp (id int) USING spindle WITH (events_per_spindle = 100);
BEGIN;
ALTER TABLE cp SET (events_per_spindle = 5);
INSERT INTO cp SELECT generate_series(1, 5);
PREPARE TRANSACTION 'capacity_rollback';
ROLLBACK PREPARED 'capacity_rollback';
INSERT INTO cp SELECT generate_series(1, 20);
SELECT spindle_no, state, capacity, events
  FROM spindle.spindles WHERE relation = 'cp'::regclass AND state <> 'ready'
 ORDER BY spindle_no;
SELECT * FROM spindle.verify('cp');
SELECT count(*) FROM cp;

-- a capacity change that commits still applies: spindle 1 is empty, takes
-- capacity 5 and fills at 5
CREATE TABLE cc (id int) USING spindle WITH (events_per_spindle = 100);
BEGIN;
SAVEPOINT s;
ALTER TABLE cc SET (events_per_spindle = 5);
RELEASE SAVEPOINT s;
INSERT INTO cc SELECT generate_series(1, 7);
COMMIT;
SELECT spindle_no, state, capacity, events
  FROM spindle.spindles WHERE relation = 'cc'::regclass AND state <> 'ready'
 ORDER BY spindle_no;
SELECT * FROM spindle.verify('cc');

DROP TABLE cr, cs, cn, cp, cc;
