--
-- TIDs past the old cap of 38 141 952 virtual slots (block 131072), where
-- the facade's main fork has no 1 GB segment: every kind of scan, ANALYZE,
-- UPDATE and DELETE through each, and the same counts from every plan.
-- spindle.test_vslot_base places the table's ranges from slot 40 000 000
-- on (block 137457) without inserting that many events.
--
SET spindle.test_vslot_base = 40000000;
-- core would prefetch facade blocks with these (bitmap scans, ANALYZE)
SET effective_io_concurrency = 16;
SET maintenance_io_concurrency = 16;
-- plans without parallel workers, but where said
SET max_parallel_workers_per_gather = 0;

CREATE TABLE far (id int, tag int, arr int[]) USING spindle
    WITH (events_per_spindle = 100000);
CREATE INDEX far_id ON far (id);
CREATE INDEX far_tag ON far USING hash (tag);
CREATE INDEX far_arr ON far USING gin (arr);
INSERT INTO far SELECT i, i % 291, ARRAY[i % 7, i % 1000]
  FROM generate_series(1, 300000) i;

-- every TID lies past block 131072, densely
SELECT min(ctid), max(ctid), count(*),
       min((ctid::text::point)[0]) > 131072 AS all_past_old_cap
  FROM far;
SELECT spindle_no, vbase, vcount FROM spindle.spindle_catalog
 WHERE relation = 'far'::regclass ORDER BY spindle_no;
-- the slot map holds the range's pages and a directory path, nothing below
SELECT pg_relation_size('far') BETWEEN 300000 / 1360 * 8192
                                   AND (300000 / 1360 + 8) * 8192 AS map_size;

-- count(*) of a predicate under one plan: the plan's scan node, then the count
CREATE FUNCTION plan_count(pred text, plan text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    node text;
    n bigint;
    line text;
BEGIN
    PERFORM set_config('enable_seqscan', (plan = 'seq')::text, true);
    PERFORM set_config('enable_indexscan', (plan IN ('index', 'ios'))::text, true);
    PERFORM set_config('enable_indexonlyscan', (plan = 'ios')::text, true);
    PERFORM set_config('enable_bitmapscan', (plan = 'bitmap')::text, true);
    PERFORM set_config('enable_tidscan', (plan = 'tid')::text, true);
    FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) SELECT count(*) FROM far WHERE ' || pred
    LOOP
        IF line ~ '(Scan|Tid)' AND node IS NULL AND line !~ 'Bitmap Index' THEN
            node := regexp_replace(line, '^[ ->]*', '');
        END IF;
    END LOOP;
    EXECUTE 'SELECT count(*) FROM far WHERE ' || pred INTO n;
    RETURN node || ': ' || n;
END $$;

CREATE FUNCTION all_plans(pred text, plans text[]) RETURNS SETOF text
LANGUAGE sql AS $$
    SELECT plan_count(pred, p) FROM unnest(plans) p
$$;

BEGIN;
-- B-tree: seq, index, index-only, bitmap
SELECT all_plans('id BETWEEN 1000 AND 50999', '{seq,index,ios,bitmap}');
-- hash: index and bitmap
SELECT all_plans('tag = 7', '{seq,index,bitmap}');
-- GIN (bitmap only)
SELECT all_plans('arr @> ARRAY[3, 500]', '{seq,bitmap}');
-- TID scans, one TID and several
SELECT all_plans('ctid = ''(137460,5)''', '{seq,tid}');
SELECT all_plans('ctid = ANY (ARRAY[''(137457,14)'', ''(138000,1)'', ''(138487,291)'', ''(138488,1)'']::tid[])', '{seq,tid}');
-- a TID range (spindle tables have no TID range scan: a filter)
SELECT all_plans('ctid >= ''(137500,0)'' AND ctid < ''(137510,0)''', '{seq}');
COMMIT;

-- a lossy bitmap: more pages than work_mem holds
BEGIN;
SET LOCAL work_mem = '64kB';
SET LOCAL enable_seqscan = off;
SET LOCAL enable_indexscan = off;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
SELECT count(*) FROM far WHERE tag = 5;
SELECT count(*) FROM far WHERE tag = 5;
COMMIT;

-- the index-only scan asks the facade's visibility map, which it has not
BEGIN;
SET LOCAL enable_seqscan = off;
SET LOCAL enable_bitmapscan = off;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
SELECT count(id) FROM far WHERE id < 100;
COMMIT;

-- ANALYZE samples every block here (fewer than 30000): the exact count
ANALYZE far;
SELECT reltuples FROM pg_class WHERE oid = 'far'::regclass;
SELECT attname, n_distinct FROM pg_stats
 WHERE tablename = 'far' AND attname IN ('id', 'tag') ORDER BY attname;

-- a parallel bitmap heap scan: core's, with its prefetching off in every
-- participant too
BEGIN;
SET LOCAL max_parallel_workers_per_gather = 2;
SET LOCAL parallel_setup_cost = 0;
SET LOCAL parallel_tuple_cost = 0;
SET LOCAL min_parallel_table_scan_size = 0;
SET LOCAL min_parallel_index_scan_size = 0;
SET LOCAL enable_seqscan = off;
SET LOCAL enable_indexscan = off;
EXPLAIN (COSTS OFF) SELECT count(*) FROM far WHERE id BETWEEN 1 AND 200000;
SELECT count(*) FROM far WHERE id BETWEEN 1 AND 200000;
COMMIT;

-- UPDATE and DELETE through each kind of scan
BEGIN;
SET LOCAL enable_seqscan = off;
SET LOCAL enable_bitmapscan = off;
SET LOCAL enable_indexscan = off;
UPDATE far SET tag = -5 WHERE ctid = '(137600,7)';         -- TID scan
DELETE FROM far WHERE ctid = '(137600,8)';
SET LOCAL enable_indexscan = on;
UPDATE far SET tag = -1 WHERE id = 12345;                -- B-tree index
DELETE FROM far WHERE id = 12346;
SET LOCAL enable_indexscan = off;
SET LOCAL enable_bitmapscan = on;
UPDATE far SET tag = -2 WHERE id BETWEEN 20000 AND 20009;  -- bitmap
DELETE FROM far WHERE id BETWEEN 20010 AND 20019;
UPDATE far SET tag = -3 WHERE arr @> ARRAY[6, 6] AND tag >= 0; -- GIN
DELETE FROM far WHERE arr @> ARRAY[6, 13];
SET LOCAL enable_bitmapscan = off;
SET LOCAL enable_indexscan = on;
UPDATE far SET tag = -4 WHERE tag = 290;                   -- hash index
SET LOCAL enable_indexscan = off;
SET LOCAL enable_tidscan = off;
SET LOCAL enable_seqscan = on;
UPDATE far SET tag = -6 WHERE id = 299999;                 -- seq scan
DELETE FROM far WHERE id = 300000;
COMMIT;
SELECT tag, count(*) FROM far WHERE tag < 0 GROUP BY tag ORDER BY tag;

-- after the changes, every plan still agrees
BEGIN;
SELECT all_plans('id BETWEEN 1 AND 300000', '{seq,index,ios,bitmap}');
SELECT all_plans('tag = -4', '{seq,index,bitmap}');
SELECT all_plans('arr @> ARRAY[6]', '{seq,bitmap}');
COMMIT;

-- VACUUM FULL copies the slot map, not its hole, and keeps every TID
SELECT sum(hashtext(ctid::text || ':' || id)) AS before FROM far \gset
VACUUM FULL far;
SELECT sum(hashtext(ctid::text || ':' || id)) = :before AS same_tids FROM far;
BEGIN;
SELECT all_plans('id BETWEEN 1000 AND 50999', '{seq,index,bitmap}');
COMMIT;

-- without the setting, new ranges go lowest first again
RESET spindle.test_vslot_base;
CREATE TABLE near (id int) USING spindle WITH (events_per_spindle = 10);
INSERT INTO near SELECT generate_series(1, 15);
SELECT spindle_no, vbase, vcount FROM spindle.spindle_catalog
 WHERE relation = 'near'::regclass AND vcount > 0 ORDER BY spindle_no;
-- past the (now far) limit, a new spindle still fails with 54000: a
-- catalog row made to take every slot from the newest range on
CREATE TABLE lim (id int) USING spindle WITH (events_per_spindle = 5);
INSERT INTO lim SELECT generate_series(1, 5);
BEGIN;
LOCK TABLE lim IN ACCESS EXCLUSIVE MODE;	-- spindles are made here, not by a helper
UPDATE spindle.spindle_catalog SET vcount = 1249835482845 - vbase
 WHERE relation = 'lim'::regclass
   AND vbase = (SELECT max(vbase) FROM spindle.spindle_catalog
                 WHERE relation = 'lim'::regclass);
INSERT INTO lim SELECT generate_series(1, 20);
ROLLBACK;
INSERT INTO lim SELECT generate_series(1, 20);
SELECT count(*) FROM lim;
DROP TABLE lim;
-- only a superuser sets it
CREATE ROLE bigtid_user;
SET ROLE bigtid_user;
SET spindle.test_vslot_base = 1;
RESET ROLE;
DROP ROLE bigtid_user;

-- a single-event insert past slot 2^29 goes in one record of spindle's own
-- naming its map entry (its description is what redo parses)
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pg_walinspect;
RESET client_min_messages;
SET spindle.test_vslot_base = 600000000;
CREATE TABLE wide (v int) USING spindle WITH (events_per_spindle = 10);
RESET spindle.test_vslot_base;
SELECT pg_current_wal_insert_lsn() AS wide_lsn \gset
INSERT INTO wide VALUES (1);
SELECT v, ctid FROM wide;
SELECT record_type, regexp_replace(description, ' of relfilenode .*', '') AS slot
  FROM pg_get_wal_records_info(:'wide_lsn', pg_current_wal_flush_lsn())
 WHERE resource_manager = 'spindle' AND record_type LIKE 'INSERT%';
SELECT v FROM wide WHERE ctid = (SELECT ctid FROM wide);
DROP TABLE wide;
DROP EXTENSION pg_walinspect;

DROP TABLE far, near;
DROP FUNCTION all_plans(text, text[]);
DROP FUNCTION plan_count(text, text);
