--
-- views: spindle.spindles and spindle.tables, their columns, the states
-- open/full, events <= capacity, purged counts after commit and rollback,
-- and agreement with spindle.spindle_catalog and pg_class.
--
\set VERBOSITY default

-- This test asserts exact drop counts and spindle lists: the background
-- worker, which drops spindles at moments of its own choosing, must be off
-- (test/spindle.conf turns it off for pg_regress).
SHOW spindle.enable_worker;

-- columns and types
SELECT attnum, attname, format_type(atttypid, atttypmod) FROM pg_attribute
 WHERE attrelid = 'spindle.spindles'::regclass AND attnum > 0 AND NOT attisdropped
 ORDER BY attnum;
SELECT attnum, attname, format_type(atttypid, atttypmod) FROM pg_attribute
 WHERE attrelid = 'spindle.tables'::regclass AND attnum > 0 AND NOT attisdropped
 ORDER BY attnum;

CREATE TABLE v (id int, body text) USING spindle WITH (events_per_spindle = 4);
CREATE VIEW v_spindles AS
  SELECT spindle_no, state, capacity, events, purged_events
    FROM spindle.spindles WHERE relation = 'v'::regclass AND state <> 'ready';

-- the first spindle of an empty table is open
SELECT * FROM v_spindles ORDER BY spindle_no;
SELECT created_at IS NOT NULL AS has_created_at, filled_at IS NULL AS not_filled,
       size_bytes >= 0 AS size_ok
  FROM spindle.spindles WHERE relation = 'v'::regclass AND state <> 'ready';
SELECT relation, events_per_spindle, time_to_live, events, purged_events,
       spindles >= 1 AS has_spindle, spindles_dropped, bytes_freed
  FROM spindle.tables WHERE relation = 'v'::regclass;

-- 9 events: full, full, open
INSERT INTO v SELECT g, repeat('x', 100) FROM generate_series(1, 9) g;
SELECT * FROM v_spindles ORDER BY spindle_no;
-- a full spindle has filled_at, an open one has not; created_at <= filled_at
SELECT spindle_no, state, filled_at IS NOT NULL AS filled,
       created_at <= coalesce(filled_at, created_at) AS created_first,
       size_bytes > 0 AS has_size
  FROM spindle.spindles WHERE relation = 'v'::regclass AND state <> 'ready'
 ORDER BY spindle_no;
-- exactly one open spindle, and it is the newest in use
SELECT count(*) FILTER (WHERE state = 'open') AS open_spindles,
       max(spindle_no) FILTER (WHERE state = 'open') = max(spindle_no) AS open_is_newest
  FROM spindle.spindles WHERE relation = 'v'::regclass AND state <> 'ready';
-- 'ready' spindles, whenever there are some, hold no event and come after
-- every spindle in use
SELECT count(*) AS bad_ready FROM spindle.spindles r
 WHERE r.relation = 'v'::regclass AND r.state = 'ready'
   AND (r.events <> 0 OR r.spindle_no < (SELECT max(spindle_no) FROM spindle.spindles s
                                          WHERE s.relation = 'v'::regclass AND s.state <> 'ready'));
-- only the three states exist, in every table
SELECT count(*) AS unknown_states FROM spindle.spindles
 WHERE state NOT IN ('open', 'full', 'ready');
-- events never exceed capacity; purged never exceed events
SELECT count(*) AS over_capacity FROM spindle.spindles
 WHERE capacity > 0 AND events > capacity;
SELECT count(*) AS over_purged FROM spindle.spindles WHERE purged_events > events;
-- a full spindle holds exactly its capacity
SELECT count(*) AS full_not_full FROM spindle.spindles
 WHERE state = 'full' AND events <> capacity;

-- spindle.tables sums spindle.spindles
SELECT t.events = s.events AS events_match, t.purged_events = s.purged AS purged_match,
       t.spindles = s.n AS spindles_match, t.size_bytes = s.size AS size_match
  FROM spindle.tables t,
       (SELECT sum(events) AS events, sum(purged_events) AS purged, count(*) AS n,
               sum(size_bytes) AS size
          FROM spindle.spindles WHERE relation = 'v'::regclass) s
 WHERE t.relation = 'v'::regclass;
SELECT events, purged_events FROM spindle.tables WHERE relation = 'v'::regclass;

-- purged counts: committed DELETE
DELETE FROM v WHERE id IN (1, 2, 5);
SELECT * FROM v_spindles ORDER BY spindle_no;
-- rolled-back DELETE: not counted, before or after the rollback
BEGIN;
DELETE FROM v WHERE id IN (3, 4);
SELECT * FROM v_spindles ORDER BY spindle_no;
ROLLBACK;
SELECT * FROM v_spindles ORDER BY spindle_no;
-- rolled-back INSERT: a used slot, purged
BEGIN;
INSERT INTO v VALUES (10, 'gone');
ROLLBACK;
SELECT * FROM v_spindles ORDER BY spindle_no;
-- committed UPDATE: the old version purged, the new one appended
UPDATE v SET body = 'new' WHERE id = 3;
SELECT * FROM v_spindles ORDER BY spindle_no;
SELECT events, purged_events FROM spindle.tables WHERE relation = 'v'::regclass;
-- a DELETE that deletes nothing counts nothing
DELETE FROM v WHERE id = 1;
SELECT sum(purged_events) FROM v_spindles;

-- another table's numbers are its own
CREATE TABLE v2 (id int) USING spindle WITH (events_per_spindle = 2);
INSERT INTO v2 VALUES (1), (2), (3);
DELETE FROM v2 WHERE id = 1;
SELECT relation, spindle_no, state, capacity, events, purged_events FROM spindle.spindles
 WHERE relation IN ('v'::regclass, 'v2'::regclass) AND state <> 'ready'
 ORDER BY relation::text, spindle_no;
SELECT relation, events_per_spindle, events, purged_events FROM spindle.tables
 WHERE relation IN ('v'::regclass, 'v2'::regclass) ORDER BY relation::text;

-- the catalog and the view list the same spindles (the catalog may keep a
-- dropped spindle's row a while; its segment is gone then); each spindle's
-- segment is a relation in schema pg_spindle
SELECT count(*) AS view_only FROM (
  SELECT relation::oid, spindle_no FROM spindle.spindles
   WHERE relation IN ('v'::regclass, 'v2'::regclass)
  EXCEPT
  SELECT relation, spindle_no FROM spindle.spindle_catalog
   WHERE relation IN ('v'::regclass, 'v2'::regclass)
     AND EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = segment)) x;
SELECT count(*) AS catalog_only FROM (
  SELECT relation, spindle_no FROM spindle.spindle_catalog
   WHERE relation IN ('v'::regclass, 'v2'::regclass)
     AND EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = segment)
  EXCEPT
  SELECT relation::oid, spindle_no FROM spindle.spindles
   WHERE relation IN ('v'::regclass, 'v2'::regclass)) x;
SELECT count(*) AS capacity_mismatch FROM spindle.spindles s
  JOIN spindle.spindle_catalog c ON c.relation = s.relation::oid AND c.spindle_no = s.spindle_no
 WHERE s.relation IN ('v'::regclass, 'v2'::regclass) AND c.capacity <> s.capacity;
SELECT n.nspname, count(*) > 0 AS has_segments FROM spindle.spindle_catalog sc
  JOIN pg_class c ON c.oid = sc.segment
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE sc.relation IN ('v'::regclass, 'v2'::regclass)
 GROUP BY n.nspname;

-- after a drop the view no longer lists the spindle; the table's counters
-- record it
DELETE FROM v WHERE id = 4;
SELECT * FROM v_spindles ORDER BY spindle_no;
SELECT spindle.drop_spindles('v') >= 0 AS ran;
SELECT * FROM v_spindles ORDER BY spindle_no;
SELECT spindles_dropped, bytes_freed > 0 AS freed FROM spindle.tables
 WHERE relation = 'v'::regclass;

-- a dropped table disappears from both views
SELECT 'v2'::regclass::oid AS v2_oid \gset
DROP TABLE v2;
SELECT count(*) FROM spindle.spindles WHERE relation::oid = :v2_oid;
SELECT count(*) FROM spindle.tables WHERE relation::oid = :v2_oid;
SELECT count(*) FROM spindle.spindle_catalog WHERE relation = :v2_oid;

DROP VIEW v_spindles;
-- spindle.verify(): every spindle table left here is healthy
SELECT c.oid::regclass AS rel, v FROM pg_catalog.pg_class c, spindle.verify(c.oid) v
 WHERE c.relam = (SELECT oid FROM pg_catalog.pg_am WHERE amname = 'spindle')
 ORDER BY 1, 2;
DROP TABLE v;

