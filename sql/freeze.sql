--
-- Wraparound: VACUUM (FREEZE) of a spindle table freezes its events and
-- advances the relfrozenxid of every spindle, without reclaiming a single
-- slot: every event is still there, index scans still right, and the
-- spindles' events and purged_events unchanged.
--
-- pageinspect shows the line pointers and the frozen bits.
CREATE EXTENSION pageinspect;

CREATE PROCEDURE fz_burn(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM txid_current();
        COMMIT;
    END LOOP;
END $$;

-- every spindle of rel: its age and its slots as pageinspect sees them
CREATE FUNCTION fz_spindle_pages(rel regclass, OUT spindle_no bigint, OUT segment oid,
    OUT age int, OUT normal bigint, OUT frozen bigint, OUT dead bigint,
    OUT unused bigint, OUT redirect bigint)
RETURNS SETOF record LANGUAGE sql AS $$
SELECT s.spindle_no, s.segment, age(c.relfrozenxid),
       count(*) FILTER (WHERE p.lp_flags = 1),
       count(*) FILTER (WHERE p.lp_flags = 1 AND (p.t_infomask & 768) = 768),
       count(*) FILTER (WHERE p.lp_flags = 3),
       count(*) FILTER (WHERE p.lp_flags = 0),
       count(*) FILTER (WHERE p.lp_flags = 2)
  FROM spindle.spindle_catalog s
  JOIN pg_class c ON c.oid = s.segment
  LEFT JOIN LATERAL generate_series(0, pg_relation_size(s.segment) / 8192 - 1) AS b(blk) ON true
  LEFT JOIN LATERAL heap_page_items(get_raw_page(s.segment::regclass::text, b.blk::int)) AS p ON true
 WHERE s.relation = rel
   AND pg_relation_size(s.segment) > 0   -- not the empty, ready ones
 GROUP BY s.spindle_no, s.segment, c.relfrozenxid
$$;

CREATE TABLE fz (id int, body text) USING spindle WITH (events_per_spindle = 100);
CREATE INDEX fz_id ON fz (id);
CREATE INDEX fz_body ON fz USING hash (body);
INSERT INTO fz SELECT g, 'event ' || g FROM generate_series(1, 250) g;
DELETE FROM fz WHERE id % 3 = 0;
-- an aborted insert: its slots count as purged events
BEGIN;
INSERT INTO fz SELECT g, 'aborted' FROM generate_series(1001, 1005) g;
ROLLBACK;
UPDATE fz SET body = 'updated ' || id WHERE id IN (10, 20);

-- a heap copy of what fz holds
CREATE TABLE fz_copy AS SELECT id, body FROM fz;
SELECT count(*), sum(id) FROM fz;

SELECT spindle_no, state, capacity, events, purged_events FROM spindle.spindles
 WHERE relation = 'fz'::regclass AND state <> 'ready' ORDER BY spindle_no;

-- burn transaction ids: the spindles' relfrozenxid grow old
CALL fz_burn(30);
CREATE TABLE fz_before AS
    SELECT f.*, sp.events, sp.purged_events
      FROM fz_spindle_pages('fz') f
      JOIN spindle.spindles sp
        ON sp.relation = 'fz'::regclass AND sp.spindle_no = f.spindle_no;
SELECT spindle_no, age >= 30 AS old, normal, frozen = normal AS all_frozen,
       unused, redirect
  FROM fz_before ORDER BY spindle_no;

SET vacuum_freeze_min_age = 0;
VACUUM (FREEZE) fz;
RESET vacuum_freeze_min_age;

-- every spindle's relfrozenxid advanced
SELECT count(*) AS spindles,
       bool_and(a.age < b.age) AS every_age_reduced
  FROM fz_spindle_pages('fz') a JOIN fz_before b USING (spindle_no);
SELECT count(*) FROM spindle.spindle_catalog s JOIN pg_class c ON c.oid = s.segment
 WHERE s.relation = 'fz'::regclass AND c.relfrozenxid = '0'::xid;
-- every live event frozen; no slot reclaimed (no unused line pointer)
SELECT spindle_no, normal, frozen = normal AS all_frozen,
       normal + dead + redirect AS slots, unused
  FROM fz_spindle_pages('fz') ORDER BY spindle_no;
-- the spindles' counts are unchanged
SELECT spindle_no, state, capacity, events, purged_events FROM spindle.spindles
 WHERE relation = 'fz'::regclass AND state <> 'ready' ORDER BY spindle_no;
SELECT count(*) FROM spindle.spindles sp JOIN fz_before b USING (spindle_no)
 WHERE sp.relation = 'fz'::regclass
   AND (sp.events, sp.purged_events) IS DISTINCT FROM (b.events, b.purged_events);

-- every event still there
SELECT count(*), sum(id) FROM fz;
(SELECT id, body FROM fz EXCEPT ALL SELECT id, body FROM fz_copy)
UNION ALL
(SELECT id, body FROM fz_copy EXCEPT ALL SELECT id, body FROM fz);
SELECT id, body FROM fz WHERE id IN (1, 3, 10, 20, 249, 250) ORDER BY id;

-- index scans still right
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT id, body FROM fz WHERE id BETWEEN 1 AND 12;
SELECT id, body FROM fz WHERE id BETWEEN 1 AND 12 ORDER BY id;
SELECT count(*), sum(id) FROM fz WHERE id > 0;
EXPLAIN (COSTS OFF) SELECT id FROM fz WHERE body = 'event 4';
SELECT id FROM fz WHERE body = 'event 4';
SELECT id FROM fz WHERE body = 'event 3';
SELECT id FROM fz WHERE body = 'event 10';
SELECT id FROM fz WHERE body = 'updated 10';
SELECT id FROM fz WHERE body = 'aborted';
RESET enable_bitmapscan;
SET enable_indexscan = off;
SELECT count(*), sum(id) FROM fz WHERE id > 0;
SELECT count(*) FROM fz WHERE id > 1000;
RESET enable_indexscan;
RESET enable_seqscan;

-- new events take new slots
INSERT INTO fz SELECT g, 'after' FROM generate_series(2001, 2010) g;
SELECT spindle_no, state, capacity, events, purged_events FROM spindle.spindles
 WHERE relation = 'fz'::regclass AND state <> 'ready' ORDER BY spindle_no;
SELECT count(*) = count(DISTINCT ctid) AS distinct_tids FROM fz;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT id, body FROM fz WHERE id > 2000 ORDER BY id;
SELECT count(*) FROM fz WHERE id IN (3, 6, 9, 1001, 1002);
RESET enable_seqscan;
RESET enable_bitmapscan;

-- A plain VACUUM with vacuum_freeze_min_age = 0 freezes as well, and the
-- spindles stay droppable once purged.
CALL fz_burn(30);
DROP TABLE fz_before;
CREATE TABLE fz_before AS SELECT * FROM fz_spindle_pages('fz');
SET vacuum_freeze_min_age = 0;
VACUUM fz;
RESET vacuum_freeze_min_age;
SELECT count(*) AS spindles,
       bool_and(a.age < b.age) AS every_age_reduced,
       bool_and(a.frozen = a.normal) AS all_frozen,
       sum(a.unused) AS unused
  FROM fz_spindle_pages('fz') a JOIN fz_before b USING (spindle_no);
DELETE FROM fz WHERE id <= 100;
SELECT spindle.drop_spindles('fz');
SELECT spindle_no, state, capacity, events, purged_events FROM spindle.spindles
 WHERE relation = 'fz'::regclass AND state <> 'ready' ORDER BY spindle_no;
SELECT count(*), sum(id) FROM fz;

-- VACUUM (FREEZE) of one spindle on its own (as anti-wraparound
-- autovacuum would run it) keeps its slots too.
CALL fz_burn(30);
DROP TABLE fz_before;
CREATE TABLE fz_before AS SELECT * FROM fz_spindle_pages('fz');
SET vacuum_freeze_min_age = 0;
-- (not echoed: the spindle's name holds an OID)
\set ECHO none
SELECT format('VACUUM (FREEZE) %s', segment::regclass) FROM fz_before
 WHERE spindle_no = 2 \gexec
\set ECHO all
RESET vacuum_freeze_min_age;
SELECT a.spindle_no, a.age < b.age AS age_reduced
  FROM fz_spindle_pages('fz') a JOIN fz_before b USING (spindle_no)
 WHERE a.spindle_no = 2;
SELECT spindle_no, frozen = normal AS all_frozen,
       normal + dead + redirect AS slots, unused
  FROM fz_spindle_pages('fz') ORDER BY spindle_no;
SELECT spindle_no, state, capacity, events, purged_events FROM spindle.spindles
 WHERE relation = 'fz'::regclass AND state <> 'ready' ORDER BY spindle_no;
SELECT count(*), sum(id) FROM fz;

-- spindle.verify(): every spindle table left here is healthy
SELECT c.oid::regclass AS rel, v FROM pg_catalog.pg_class c, spindle.verify(c.oid) v
 WHERE c.relam = (SELECT oid FROM pg_catalog.pg_am WHERE amname = 'spindle')
 ORDER BY 1, 2;
DROP TABLE fz, fz_copy, fz_before;
DROP FUNCTION fz_spindle_pages(regclass);
DROP PROCEDURE fz_burn(int);
DROP EXTENSION pageinspect;
