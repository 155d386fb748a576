--
-- creation: where new spindles' ranges of TIDs go, and how a backend's
-- directory follows its own transaction's changes (see directory.c).
-- Whatever happens, no two spindles have overlapping ranges, every event
-- has a TID of its own, and an index scan finds exactly the rows a
-- sequential scan finds.
--
CREATE FUNCTION cr_check(rel regclass, OUT overlapping bigint,
                         OUT events bigint, OUT distinct_tids bigint,
                         OUT by_seq bigint, OUT by_index bigint,
                         OUT live_in_spindles bigint)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT count(*) INTO overlapping
      FROM spindle.spindle_catalog a JOIN spindle.spindle_catalog b
        ON a.relation = b.relation AND a.spindle_no < b.spindle_no
       AND a.vbase < b.vbase + b.vcount AND b.vbase < a.vbase + a.vcount
     WHERE a.relation = rel;
    EXECUTE format('SELECT count(*), count(DISTINCT ctid) FROM %s', rel)
       INTO events, distinct_tids;
    PERFORM set_config('enable_indexscan', 'off', true);
    PERFORM set_config('enable_bitmapscan', 'off', true);
    EXECUTE format('SELECT sum(id) FROM %s WHERE id > 0', rel) INTO by_seq;
    PERFORM set_config('enable_indexscan', 'on', true);
    PERFORM set_config('enable_seqscan', 'off', true);
    EXECUTE format('SELECT sum(id) FROM %s WHERE id > 0', rel) INTO by_index;
    PERFORM set_config('enable_seqscan', 'on', true);
    PERFORM set_config('enable_bitmapscan', 'on', true);
    SELECT sum(s.events) - sum(s.purged_events) INTO live_in_spindles
      FROM spindle.spindles s WHERE s.relation = rel;
END $$;

-- 1. A transaction that created spindles itself (it holds ACCESS
-- EXCLUSIVE, so no helper can) and rolled some of them back to a
-- savepoint: its directory drops them, and its later spindles never take
-- their ranges (their index entries stay until cleanup).
CREATE TABLE cr1 (id int, v text) USING spindle WITH (events_per_spindle = 2);
CREATE INDEX ON cr1 (id);
INSERT INTO cr1 SELECT g, 'before' FROM generate_series(1, 4) g;
BEGIN;
LOCK TABLE cr1 IN ACCESS EXCLUSIVE MODE;
INSERT INTO cr1 SELECT g, 'kept' FROM generate_series(11, 14) g;
SAVEPOINT s;
INSERT INTO cr1 SELECT g, 'rolled back' FROM generate_series(21, 26) g;
SELECT count(*) AS spindles_in_savepoint FROM spindle.spindles
 WHERE relation = 'cr1'::regclass;
ROLLBACK TO s;
SELECT count(*) AS spindles_after_rollback FROM spindle.spindles
 WHERE relation = 'cr1'::regclass;
INSERT INTO cr1 SELECT g, 'after' FROM generate_series(31, 36) g;
COMMIT;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT id, v FROM cr1 WHERE id > 20 ORDER BY id;
RESET enable_seqscan;
RESET enable_bitmapscan;
SELECT * FROM cr_check('cr1');

-- 2. Spindles dropped in a savepoint that rolls back come back: the
-- directory of the transaction that dropped them is read in full again.
CREATE TABLE cr2 (id int, v text) USING spindle WITH (events_per_spindle = 2);
CREATE INDEX ON cr2 (id);
INSERT INTO cr2 SELECT g, 'x' FROM generate_series(1, 8) g;
DELETE FROM cr2 WHERE id <= 4;
BEGIN;
SAVEPOINT s;
SELECT spindle.drop_spindles('cr2') AS dropped;
SELECT spindle_no, state FROM spindle.spindles
 WHERE relation = 'cr2'::regclass ORDER BY spindle_no;
ROLLBACK TO s;
SELECT spindle_no, state FROM spindle.spindles
 WHERE relation = 'cr2'::regclass ORDER BY spindle_no;
COMMIT;
SELECT * FROM cr_check('cr2');

-- 3. First fit: with few ranges, a new spindle takes the lowest gap; with
-- many, a gap deeper than the first ranges is given again within the next
-- 64 spindle numbers (and a table that only grows stays compact).
CREATE TABLE cr3 (id int) USING spindle WITH (events_per_spindle = 1);
CREATE INDEX ON cr3 (id);
INSERT INTO cr3 SELECT generate_series(1, 200);
SELECT max(vbase + vcount) = sum(vcount) AS compact,
       count(*) AS spindles
  FROM spindle.spindle_catalog WHERE relation = 'cr3'::regclass;
-- a hole deep in the table: events 151..155 (slots 150..154)
DELETE FROM cr3 WHERE id BETWEEN 151 AND 155;
SELECT spindle.drop_spindles('cr3') AS dropped;
-- five dropped slots are too few for a pass over the index: VACUUM
-- retires them (see 4.)
SELECT spindle.drop_spindles('cr3') AS dropped_again;
SELECT count(*) AS waiting FROM spindle.spindle_catalog
 WHERE relation = 'cr3'::regclass AND dropped_at IS NOT NULL;
VACUUM cr3;
SELECT count(*) AS rows_in_the_hole FROM spindle.spindle_catalog
 WHERE relation = 'cr3'::regclass AND vbase BETWEEN 150 AND 154;
CREATE TEMP TABLE cr3_before AS
  SELECT max(spindle_no) AS last_no FROM spindle.spindle_catalog
   WHERE relation = 'cr3'::regclass;
INSERT INTO cr3 SELECT generate_series(1001, 1070);
SELECT count(*) AS new_spindles_in_the_hole FROM spindle.spindle_catalog
 WHERE relation = 'cr3'::regclass AND vbase BETWEEN 150 AND 154
   AND spindle_no > (SELECT last_no FROM cr3_before);
SELECT max(vbase + vcount) <= sum(vcount) + 5 AS nearly_compact
  FROM spindle.spindle_catalog WHERE relation = 'cr3'::regclass;
SELECT * FROM cr_check('cr3');
-- a hole among the first ranges is taken at once
DELETE FROM cr3 WHERE id BETWEEN 3 AND 4;
SELECT spindle.drop_spindles('cr3') AS dropped;
VACUUM cr3;
TRUNCATE cr3_before;
INSERT INTO cr3_before SELECT max(spindle_no) FROM spindle.spindle_catalog
 WHERE relation = 'cr3'::regclass;
INSERT INTO cr3 VALUES (2001), (2002), (2003);
SELECT vbase FROM spindle.spindle_catalog
 WHERE relation = 'cr3'::regclass
   AND spindle_no > (SELECT last_no FROM cr3_before)
 ORDER BY spindle_no LIMIT 2;
SELECT * FROM cr_check('cr3');

-- 4. After TRUNCATE, ranges start at 0 again and spindle numbers go on.
CREATE TEMP TABLE cr3_numbers AS
  SELECT max(spindle_no) AS last_no FROM spindle.spindle_catalog
   WHERE relation = 'cr3'::regclass;
TRUNCATE cr3;
INSERT INTO cr3 SELECT generate_series(1, 10);
SELECT min(vbase) AS lowest_vbase,
       min(spindle_no) > (SELECT last_no FROM cr3_numbers) AS numbers_go_on
  FROM spindle.spindle_catalog WHERE relation = 'cr3'::regclass;
SELECT * FROM cr_check('cr3');

-- spindle.verify(): every spindle table left here is healthy
SELECT c.oid::regclass AS rel, v FROM pg_catalog.pg_class c, spindle.verify(c.oid) v
 WHERE c.relam = (SELECT oid FROM pg_catalog.pg_am WHERE amname = 'spindle')
 ORDER BY 1, 2;
DROP TABLE cr1, cr2, cr3;
-- 4. Dropped spindles are retired (their index entries removed, their
-- ranges given back) in batches, once their slots are a tenth of the live
-- spindles' slots: a pass over the index then costs each dropped spindle
-- a bounded share, however large the table.
CREATE TABLE cr4 (id int) USING spindle WITH (events_per_spindle = 1);
CREATE INDEX ON cr4 (id);
INSERT INTO cr4 SELECT generate_series(1, 100);
DELETE FROM cr4 WHERE id <= 5;
SELECT spindle.drop_spindles('cr4') AS dropped;
SELECT spindle.drop_spindles('cr4') AS dropped_again;
SELECT count(*) AS waiting, (SELECT retire_slots FROM spindle.table_catalog
                              WHERE relation = 'cr4'::regclass)
  FROM spindle.spindle_catalog
 WHERE relation = 'cr4'::regclass AND dropped_at IS NOT NULL;
-- the index still has their entries, which no scan returns
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) AS below_11 FROM cr4 WHERE id < 11;
RESET enable_seqscan; RESET enable_bitmapscan;
DELETE FROM cr4 WHERE id <= 10;
SELECT spindle.drop_spindles('cr4') AS dropped;
-- ten waiting against some ninety live: the next call retires them
SELECT spindle.drop_spindles('cr4') AS dropped_again;
SELECT count(*) AS waiting, (SELECT retire_slots FROM spindle.table_catalog
                              WHERE relation = 'cr4'::regclass)
  FROM spindle.spindle_catalog
 WHERE relation = 'cr4'::regclass AND dropped_at IS NOT NULL;
-- a retirement rolled back to a savepoint leaves them waiting
DELETE FROM cr4 WHERE id <= 20;
SELECT spindle.drop_spindles('cr4') AS dropped;
BEGIN;
SAVEPOINT s;
SELECT spindle.drop_spindles('cr4') AS retires_in_savepoint;
SELECT count(*) AS waiting FROM spindle.spindle_catalog
 WHERE relation = 'cr4'::regclass AND dropped_at IS NOT NULL;
ROLLBACK TO s;
SELECT count(*) AS waiting FROM spindle.spindle_catalog
 WHERE relation = 'cr4'::regclass AND dropped_at IS NOT NULL;
COMMIT;
INSERT INTO cr4 SELECT generate_series(101, 130);
SELECT * FROM cr_check('cr4');
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FILTER (WHERE id < 21) AS below_21,
       count(*) FILTER (WHERE id > 100) AS new
  FROM cr4 WHERE id < 21 OR id > 100;
RESET enable_seqscan; RESET enable_bitmapscan;
-- TRUNCATE forgets them
DELETE FROM cr4 WHERE id <= 30;
SELECT spindle.drop_spindles('cr4') AS dropped;
TRUNCATE cr4;
SELECT retire_slots FROM spindle.table_catalog WHERE relation = 'cr4'::regclass;
DROP TABLE cr4;

-- 5. What a session reads of the directory: its first insert reads the
-- newest spindles only (back to one known full), and a drop re-reads only
-- the rows it changed; a lookup by TID then reads the rest.
CREATE TABLE cr5 (id int) USING spindle WITH (events_per_spindle = 1);
CREATE INDEX ON cr5 (id);
INSERT INTO cr5 SELECT generate_series(1, 300);
SELECT spindle.drop_spindles('cr5') AS dropped;
\c
BEGIN;
INSERT INTO cr5 VALUES (301), (302);
SELECT idx_tup_fetch < 10 AS few_rows_read
  FROM pg_stat_xact_all_tables WHERE relid = 'spindle.spindle_catalog'::regclass;
SELECT spindle_no, state, events FROM spindle.spindles
 WHERE relation = 'cr5'::regclass ORDER BY spindle_no DESC LIMIT 3;
COMMIT;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) AS found FROM cr5 WHERE id IN (1, 150, 301, 302);
RESET enable_seqscan; RESET enable_bitmapscan;
DELETE FROM cr5 WHERE id <= 3;
BEGIN;
SELECT spindle.drop_spindles('cr5') AS dropped;
SELECT idx_tup_fetch AS read_by_drop
  FROM pg_stat_xact_all_tables WHERE relid = 'spindle.spindle_catalog'::regclass \gset
SELECT count(*) AS found FROM cr5 WHERE id IN (1, 150, 301, 302);
SELECT idx_tup_fetch - :read_by_drop < 10 AS few_rows_reread
  FROM pg_stat_xact_all_tables WHERE relid = 'spindle.spindle_catalog'::regclass;
COMMIT;
SELECT * FROM cr_check('cr5');
DROP TABLE cr5;

DROP FUNCTION cr_check(regclass);
