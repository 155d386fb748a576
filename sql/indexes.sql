--
-- indexes: btree, hash and GIN indexes on a spindle table return what a
-- sequential scan returns, through index scans, bitmap scans and index-only
-- scans; REINDEX; unique indexes.
--
\set VERBOSITY default

CREATE TABLE ix (id int, k text, doc jsonb) USING spindle WITH (events_per_spindle = 10);
-- one index exists before the data, the others are built on existing rows
CREATE INDEX ix_id ON ix (id);
INSERT INTO ix
  SELECT g, 'k' || (g % 20),
         jsonb_build_object('id', g, 'tag', (ARRAY['a', 'b', 'c'])[g % 3 + 1])
    FROM generate_series(1, 100) g;
CREATE INDEX ix_k_hash ON ix USING hash (k);
CREATE INDEX ix_doc_gin ON ix USING gin (doc);
CREATE INDEX ix_doc_pathops ON ix USING gin (doc jsonb_path_ops);
-- some rows deleted, some updated (moved to the open spindle)
DELETE FROM ix WHERE id % 7 = 0;
UPDATE ix SET k = 'upd' || id WHERE id % 11 = 0;
-- and one index built after that
CREATE INDEX ix_tag ON ix ((doc ->> 'tag')) WHERE id > 50;
ANALYZE ix;

SELECT count(*), sum(id) FROM ix;

-- reference results from a sequential scan
SET enable_indexscan = off;
SET enable_bitmapscan = off;
SET enable_indexonlyscan = off;
EXPLAIN (COSTS OFF) SELECT id, k FROM ix WHERE id BETWEEN 5 AND 15 ORDER BY id;
SELECT id, k FROM ix WHERE id BETWEEN 5 AND 15 ORDER BY id;
SELECT id FROM ix WHERE k = 'k3' ORDER BY id;
SELECT id FROM ix WHERE k IN ('k2', 'upd22') ORDER BY id;
SELECT id FROM ix WHERE doc @> '{"tag": "a"}' AND id < 40 ORDER BY id;
SELECT id FROM ix WHERE doc ->> 'tag' = 'b' AND id > 50 ORDER BY id;
SELECT id FROM ix WHERE id < 10 OR id > 95 ORDER BY id;
SELECT count(*) FROM ix WHERE id % 7 = 0;
RESET enable_indexscan;
RESET enable_bitmapscan;
RESET enable_indexonlyscan;

-- index scans
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SET enable_indexonlyscan = off;
EXPLAIN (COSTS OFF) SELECT id, k FROM ix WHERE id BETWEEN 5 AND 15 ORDER BY id;
SELECT id, k FROM ix WHERE id BETWEEN 5 AND 15 ORDER BY id;
-- (array_agg sorts, so that the plan needs no order from the index)
EXPLAIN (COSTS OFF) SELECT array_agg(id ORDER BY id) FROM ix WHERE k = 'k3';
SELECT array_agg(id ORDER BY id) FROM ix WHERE k = 'k3';
SELECT array_agg(id ORDER BY id) FROM ix WHERE k = 'k2';
SELECT array_agg(id ORDER BY id) FROM ix WHERE k = 'upd22';
SELECT array_agg(id ORDER BY id) FROM ix WHERE k = 'k11';
SELECT array_agg(id ORDER BY id) FROM ix WHERE k = 'k14';
EXPLAIN (COSTS OFF) SELECT id FROM ix WHERE doc ->> 'tag' = 'b' AND id > 50 ORDER BY id;
SELECT id FROM ix WHERE doc ->> 'tag' = 'b' AND id > 50 ORDER BY id;
EXPLAIN (COSTS OFF) SELECT id FROM ix ORDER BY id DESC LIMIT 5;
SELECT id FROM ix ORDER BY id DESC LIMIT 5;
SELECT id FROM ix ORDER BY id LIMIT 5;
SELECT min(id), max(id) FROM ix;
-- no deleted event comes back from an index scan
SELECT count(*) FROM ix WHERE id IN (7, 14, 21, 28, 35, 42, 49, 56, 63, 70, 77, 84, 91, 98);
-- an updated row is found once, by its new version
SELECT id, k FROM ix WHERE id IN (11, 22, 33) ORDER BY id;
RESET enable_bitmapscan;
RESET enable_indexonlyscan;

-- bitmap scans
SET enable_indexscan = off;
SET enable_indexonlyscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM ix WHERE id < 10 OR id > 95 ORDER BY id;
SELECT id FROM ix WHERE id < 10 OR id > 95 ORDER BY id;
-- (id + 0: only the GIN index can serve this one)
EXPLAIN (COSTS OFF) SELECT id FROM ix WHERE doc @> '{"tag": "a"}' AND id + 0 < 40 ORDER BY id;
SELECT id FROM ix WHERE doc @> '{"tag": "a"}' AND id + 0 < 40 ORDER BY id;
SELECT count(*) FROM ix WHERE doc @> '{"tag": "c"}';
EXPLAIN (COSTS OFF) SELECT array_agg(id ORDER BY id) FROM ix WHERE doc ? 'id';
SELECT count(*) FROM ix WHERE doc ? 'id';
SELECT id FROM ix WHERE doc ? 'id' AND k = 'k3' ORDER BY id;
SELECT id, k FROM ix WHERE id BETWEEN 5 AND 15 ORDER BY id;
SELECT count(*) FROM ix WHERE id IN (7, 14, 21, 28, 35, 42, 49, 56, 63, 70, 77, 84, 91, 98);
RESET enable_indexscan;
RESET enable_indexonlyscan;

-- the same counts whatever the method
SELECT count(*) FILTER (WHERE doc @> '{"tag": "c"}') AS tag_c,
       count(*) FILTER (WHERE k LIKE 'upd%') AS updated
  FROM ix;

-- index-only scans, before and after VACUUM, and after a delete that follows
-- the VACUUM
SET enable_bitmapscan = off;
SET enable_indexscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM ix WHERE id BETWEEN 85 AND 100 ORDER BY id;
SELECT id FROM ix WHERE id BETWEEN 85 AND 100 ORDER BY id;
VACUUM ix;
SELECT id FROM ix WHERE id BETWEEN 85 AND 100 ORDER BY id;
DELETE FROM ix WHERE id IN (90, 95);
SELECT id FROM ix WHERE id BETWEEN 85 AND 100 ORDER BY id;
SELECT count(*) FROM ix WHERE id < 200;
RESET enable_bitmapscan;
RESET enable_indexscan;
RESET enable_seqscan;
SELECT count(*) FROM ix;

-- REINDEX changes no result
REINDEX INDEX ix_id;
REINDEX TABLE ix;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT id, k FROM ix WHERE id BETWEEN 5 AND 15 ORDER BY id;
SELECT array_agg(id ORDER BY id) FROM ix WHERE k = 'k3';
SELECT id FROM ix WHERE doc ->> 'tag' = 'b' AND id > 80 ORDER BY id;
SELECT count(*) FROM ix WHERE id IN (7, 14, 21, 28, 35, 42, 49, 56, 63, 70, 77, 84, 90, 91, 95, 98);
RESET enable_bitmapscan;
SET enable_indexscan = off;
SELECT id FROM ix WHERE doc @> '{"tag": "a"}' AND id < 40 ORDER BY id;
RESET enable_indexscan;
RESET enable_seqscan;

-- unique indexes
CREATE TABLE ux (id int PRIMARY KEY, v text) USING spindle WITH (events_per_spindle = 4);
INSERT INTO ux SELECT g, 'v' || g FROM generate_series(1, 6) g;
SELECT sum(events) AS events_before, sum(purged_events) AS purged_before
  FROM spindle.spindles WHERE relation = 'ux'::regclass \gset
INSERT INTO ux VALUES (3, 'duplicate');
\echo :SQLSTATE
-- the failed insert used a slot, now purged
SELECT sum(events) - :events_before AS new_events,
       sum(purged_events) - :purged_before AS new_purged
  FROM spindle.spindles WHERE relation = 'ux'::regclass;
UPDATE ux SET id = 4 WHERE id = 5;
\echo :SQLSTATE
SELECT id, v FROM ux ORDER BY id;
-- a deleted key can be inserted again
DELETE FROM ux WHERE id = 3;
INSERT INTO ux VALUES (3, 'again');
UPDATE ux SET id = 50 WHERE id = 5;
INSERT INTO ux VALUES (5, 'five again');
SELECT id, v FROM ux ORDER BY id;
-- ON CONFLICT
INSERT INTO ux VALUES (1, 'ignored') ON CONFLICT (id) DO NOTHING RETURNING id;
INSERT INTO ux VALUES (2, 'upserted'), (7, 'inserted')
  ON CONFLICT (id) DO UPDATE SET v = excluded.v RETURNING id, v;
SELECT id, v FROM ux ORDER BY id;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT id, v FROM ux WHERE id IN (1, 2, 3, 4, 5, 6, 7, 50) ORDER BY id;
RESET enable_bitmapscan;
RESET enable_seqscan;
CREATE UNIQUE INDEX ux_v ON ux (v);
INSERT INTO ux VALUES (8, 'v4');
\echo :SQLSTATE
CREATE TABLE ux2 (a int) USING spindle WITH (events_per_spindle = 4);
INSERT INTO ux2 VALUES (1), (2), (1);
CREATE UNIQUE INDEX ux2_a ON ux2 (a);
\echo :SQLSTATE
DELETE FROM ux2 WHERE ctid = (SELECT max(ctid) FROM ux2 WHERE a = 1);
CREATE UNIQUE INDEX ux2_a ON ux2 (a);
SELECT a FROM ux2 ORDER BY a;
-- an exclusion constraint: the check meets each row once (it found the
-- new row's own tuple twice and refused every insert), and refuses a
-- conflict, across spindles and after a DELETE
CREATE TABLE xc (id int, v text, EXCLUDE USING btree (id WITH =))
  USING spindle WITH (events_per_spindle = 4);
INSERT INTO xc SELECT g, 'v' || g FROM generate_series(1, 6) g;
INSERT INTO xc VALUES (3, 'again');
\echo :SQLSTATE
DELETE FROM xc WHERE id = 3;
INSERT INTO xc VALUES (3, 'again');
SELECT id, v FROM xc ORDER BY id;
DROP TABLE xc;

-- the books balance
SELECT (SELECT sum(events) - sum(purged_events) FROM spindle.spindles
         WHERE relation = 'ux'::regclass) AS live_events,
       (SELECT count(*) FROM ux) AS rows;
SELECT count(*) AS over_capacity FROM spindle.spindles
 WHERE relation IN ('ix'::regclass, 'ux'::regclass, 'ux2'::regclass) AND events > capacity;

-- spindle.verify(): every spindle table left here is healthy
SELECT c.oid::regclass AS rel, v FROM pg_catalog.pg_class c, spindle.verify(c.oid) v
 WHERE c.relam = (SELECT oid FROM pg_catalog.pg_am WHERE amname = 'spindle')
 ORDER BY 1, 2;
DROP TABLE ix, ux, ux2;
