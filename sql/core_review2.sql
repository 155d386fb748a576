-- Review of the table AM core, second round.  Each part failed before its
-- fix.
SET client_min_messages = warning;

-- a. A table created WITH (events_per_spindle = 0) has one spindle owning
-- every TID.  Changing it to another capacity is refused, as 0 on a table
-- with spindles is: before, an empty table's spindle took the new capacity
-- and kept owning every TID (after 5 events every insert failed with "no
-- room for another spindle"), and a non-empty table's ALTER was accepted
-- and changed nothing.
CREATE TABLE cr2_zero (id int) USING spindle WITH (events_per_spindle = 0);
ALTER TABLE cr2_zero SET (events_per_spindle = 5);
SET spindle.events_per_spindle = 5;
ALTER TABLE cr2_zero RESET (events_per_spindle);
RESET spindle.events_per_spindle;
-- 0 again changes nothing and is let through
ALTER TABLE cr2_zero SET (events_per_spindle = 0);
INSERT INTO cr2_zero SELECT generate_series(1, 7);
ALTER TABLE cr2_zero SET (events_per_spindle = 5);
SELECT count(*) FROM cr2_zero;
SELECT reloptions FROM pg_class WHERE oid = 'cr2_zero'::regclass;
SELECT spindle_no, capacity FROM spindle.spindle_catalog
 WHERE relation = 'cr2_zero'::regclass ORDER BY spindle_no;
DROP TABLE cr2_zero;
