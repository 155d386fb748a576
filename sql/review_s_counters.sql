--
-- review_s_counters: hostile review of the purge counters (counters.c).
--
-- A prepared transaction that writes in more spindles than a writer keeps
-- locked (SPINDLE_KEPT_WRITE_LOCKS, 16) lets the lock of the others go.
-- A view that counts those spindles while the transaction is prepared
-- sees its inserts (or deletes) in progress; COMMIT/ROLLBACK PREPARED runs
-- in another backend with no pending deltas, so nothing corrects the
-- count afterwards.  The counts must be exact once the transaction ends.
--
CREATE TABLE rs_p (id int, v text) USING spindle WITH (events_per_spindle = 1);
INSERT INTO rs_p SELECT g, 'x' FROM generate_series(1, 3) g;
SELECT sum(events) AS events, sum(purged_events) AS purged
  FROM spindle.spindles WHERE relation = 'rs_p'::regclass;

-- inserts into 30 spindles, rolled back after a view counted them
BEGIN;
INSERT INTO rs_p SELECT g, 'y' FROM generate_series(1, 30) g;
PREPARE TRANSACTION 'rs_ins';
SELECT sum(events) AS events, sum(purged_events) AS purged
  FROM spindle.spindles WHERE relation = 'rs_p'::regclass;
ROLLBACK PREPARED 'rs_ins';
SELECT count(*) FROM rs_p;
-- 3 events live: events - purged = 3
SELECT sum(events) AS events, sum(purged_events) AS purged,
       sum(events) - sum(purged_events) AS live
  FROM spindle.spindles WHERE relation = 'rs_p'::regclass;
SELECT events - purged_events AS live FROM spindle.tables
 WHERE relation = 'rs_p'::regclass;

-- deletes over 20 spindles, committed after a view counted them
INSERT INTO rs_p SELECT g, 'z' FROM generate_series(1, 20) g;
SELECT sum(events) - sum(purged_events) AS live
  FROM spindle.spindles WHERE relation = 'rs_p'::regclass;
BEGIN;
DELETE FROM rs_p WHERE v = 'z';
PREPARE TRANSACTION 'rs_del';
SELECT sum(events) - sum(purged_events) AS live_while_prepared
  FROM spindle.spindles WHERE relation = 'rs_p'::regclass;
COMMIT PREPARED 'rs_del';
SELECT count(*) FROM rs_p;
SELECT sum(events) - sum(purged_events) AS live
  FROM spindle.spindles WHERE relation = 'rs_p'::regclass;

DROP TABLE rs_p;
