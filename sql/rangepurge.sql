--
-- rangepurge: spindle._purge_events() purges events with one WAL record per
-- spindle page (src/storage/rangepurge.c), leaving each tuple as heap's DELETE
-- would: new snapshots lose the events at commit, ROLLBACK and ROLLBACK TO
-- SAVEPOINT bring them back, a purged spindle is dropped as after DELETE,
-- and the WAL grows with the pages touched, not with the events.
--
\set VERBOSITY default
-- exact counts below: the worker must not drop spindles meanwhile
SHOW spindle.enable_worker;
CREATE EXTENSION pageinspect;
CREATE EXTENSION pg_walinspect;
CREATE EXTENSION pg_visibility;

-- the resource manager is registered at server start
SELECT rm_id, rm_name, rm_builtin FROM pg_get_wal_resource_managers()
 WHERE rm_name = 'spindle';

-- small rows: about 185 per heap page
CREATE TABLE rp (id int) USING spindle WITH (events_per_spindle = 1000);
INSERT INTO rp SELECT generate_series(1, 400);
SELECT format('pg_spindle.s%s_1', 'rp'::regclass::oid) AS seg \gset
-- every tuple header of the spindle, with the event's id
CREATE FUNCTION rp_items(seg regclass)
RETURNS TABLE (blk int, lp int, id int, t_xmax xid, t_infomask int,
               t_infomask2 int, t_field3 int, ctid_is_self boolean)
LANGUAGE sql AS $$
  SELECT b, i.lp,
         get_byte(i.t_data, 0) + 256 * get_byte(i.t_data, 1)
           + 65536 * get_byte(i.t_data, 2),
         i.t_xmax, i.t_infomask, i.t_infomask2, i.t_field3,
         i.t_ctid = format('(%s,%s)', b, i.lp)::tid
    FROM generate_series(0, (pg_relation_size(seg) / 8192)::int - 1) b,
         heap_page_items(get_raw_page(seg::text, b)) i
$$;
SELECT count(DISTINCT blk) AS pages, count(*) AS tuples FROM rp_items(:'seg');

-- 50 events in one call: gone for new snapshots once committed
SELECT spindle._purge_events('rp', array_agg(ctid)) AS purged
  FROM rp WHERE id <= 50;
SELECT count(*), min(id), max(id) FROM rp;
SELECT spindle_no, events, purged_events FROM spindle.spindles
 WHERE relation = 'rp'::regclass AND state <> 'ready';

-- ROLLBACK brings them back
BEGIN;
SELECT spindle._purge_events('rp', array_agg(ctid)) AS purged
  FROM rp WHERE id BETWEEN 51 AND 100;
SELECT count(*), min(id) FROM rp;
ROLLBACK;
SELECT count(*), min(id) FROM rp;

-- ROLLBACK TO SAVEPOINT too; the transaction can then purge them itself
BEGIN;
SAVEPOINT s;
SELECT spindle._purge_events('rp', array_agg(ctid)) AS purged
  FROM rp WHERE id BETWEEN 51 AND 100;
SELECT count(*), min(id) FROM rp;
ROLLBACK TO SAVEPOINT s;
SELECT count(*), min(id) FROM rp;
SELECT spindle._purge_events('rp', array_agg(ctid)) AS purged
  FROM rp WHERE id BETWEEN 51 AND 60;
-- a committed subtransaction's purge stays
SAVEPOINT s2;
SELECT spindle._purge_events('rp', array_agg(ctid)) AS purged
  FROM rp WHERE id BETWEEN 61 AND 70;
RELEASE SAVEPOINT s2;
COMMIT;
SELECT count(*), min(id) FROM rp;

-- purging the same events twice purges nothing the second time, in the
-- same transaction and after its commit
CREATE TEMP TABLE saved AS SELECT id, ctid AS t FROM rp WHERE id BETWEEN 71 AND 80;
BEGIN;
SELECT spindle._purge_events('rp', array_agg(t)) AS purged FROM saved;
SELECT spindle._purge_events('rp', array_agg(t)) AS purged FROM saved;
COMMIT;
SELECT spindle._purge_events('rp', array_agg(t)) AS purged FROM saved;
-- the same TID twice in one call, and TIDs that hold no event
SELECT spindle._purge_events('rp', ARRAY[ctid, ctid]) AS purged
  FROM rp WHERE id = 81;
SELECT spindle._purge_events('rp', ARRAY['(0,0)', '(4000,1)', NULL]::tid[]) AS purged;
SELECT count(*), min(id) FROM rp;

-- Each tuple header is what heap's DELETE leaves (xmax, infomask bits,
-- t_ctid = self), and the page's prune hint is the purger's xid (page 2
-- holds ids 371..400 and had no delete yet)
BEGIN;
DELETE FROM rp WHERE id BETWEEN 91 AND 100;
SELECT spindle._purge_events('rp', array_agg(ctid)) AS purged
  FROM rp WHERE id BETWEEN 381 AND 390;
SELECT id BETWEEN 91 AND 100 AS by_delete, count(*),
       (heap_tuple_infomask_flags(t_infomask, t_infomask2)).raw_flags,
       t_xmax = pg_current_xact_id()::xid AS xmax_is_ours, ctid_is_self
  FROM rp_items(:'seg')
 WHERE id BETWEEN 91 AND 100 OR id BETWEEN 381 AND 390
 GROUP BY 1, 3, 4, 5 ORDER BY 1;
SELECT prune_xid = pg_current_xact_id()::xid AS prune_xid_is_ours
  FROM page_header(get_raw_page(:'seg', 2));
ROLLBACK;

-- cmax and combo CIDs: a cursor opened before the purge, in the purging
-- transaction, still sees the events, including those it inserted itself
BEGIN;
INSERT INTO rp SELECT generate_series(1001, 1010);
DECLARE c_old CURSOR FOR SELECT count(*) FROM rp WHERE id BETWEEN 111 AND 120;
DECLARE c_new CURSOR FOR SELECT count(*) FROM rp WHERE id > 1000;
SELECT spindle._purge_events('rp', array_agg(ctid)) AS purged
  FROM rp WHERE id BETWEEN 111 AND 120 OR id > 1000;
SELECT count(*) FROM rp WHERE id BETWEEN 111 AND 120 OR id > 1000;
FETCH c_old;
FETCH c_new;
-- the events inserted in this transaction got a combo CID, as on DELETE
SELECT id > 1000 AS inserted_here, count(*),
       (heap_tuple_infomask_flags(t_infomask, t_infomask2)).raw_flags
  FROM rp_items(:'seg') WHERE id BETWEEN 111 AND 120 OR id > 1000
 GROUP BY 1, 3 ORDER BY 1;
ROLLBACK;
SELECT count(*), min(id), max(id) FROM rp;

-- only superusers may call it
CREATE ROLE regress_rangepurge_user;
GRANT SELECT ON rp TO regress_rangepurge_user;
SET ROLE regress_rangepurge_user;
SELECT spindle._purge_events('rp', array_agg(ctid)) FROM rp WHERE id = 200;
RESET ROLE;
REVOKE SELECT ON rp FROM regress_rangepurge_user;
DROP ROLE regress_rangepurge_user;

-- A purged, full spindle is dropped like a deleted one
CREATE TABLE rpd (id int) USING spindle WITH (events_per_spindle = 50);
INSERT INTO rpd SELECT generate_series(1, 60);
SELECT spindle._purge_events('rpd', array_agg(ctid)) AS purged
  FROM rpd WHERE id <= 50;
SELECT spindle_no, state, events, purged_events FROM spindle.spindles
 WHERE relation = 'rpd'::regclass AND state <> 'ready' ORDER BY spindle_no;
SELECT spindle.drop_spindles('rpd');
SELECT spindle_no, state, events, purged_events FROM spindle.spindles
 WHERE relation = 'rpd'::regclass AND state <> 'ready' ORDER BY spindle_no;
SELECT count(*), min(id) FROM rpd;

-- All-visible pages: VACUUM of a spindle never sets them (segment_am.c),
-- COPY FREEZE into a table created in the same transaction does.  A purge
-- clears PD_ALL_VISIBLE and the map bits of its page only, and
-- pg_visibility finds nothing wrong
BEGIN;
CREATE TABLE rpv (id int) USING spindle WITH (events_per_spindle = 1000);
COPY rpv FROM PROGRAM 'seq 1 300' WITH (FREEZE);
COMMIT;
SELECT format('pg_spindle.s%s_1', 'rpv'::regclass::oid) AS segv \gset
VACUUM rpv;
SELECT blkno, all_visible, all_frozen, pd_all_visible FROM pg_visibility(:'segv');
SELECT spindle._purge_events('rpv', array_agg(ctid)) AS purged
  FROM rpv WHERE id IN (7, 8);
SELECT blkno, all_visible, all_frozen, pd_all_visible FROM pg_visibility(:'segv');
SELECT * FROM pg_check_visible(:'segv');
SELECT * FROM pg_check_frozen(:'segv');
SELECT count(*) FROM rpv;

-- WAL: one record per page.  400 small events on 3 pages; a first purge
-- touches every page (taking the full-page images a checkpoint since the
-- insert would need), then 100 events are purged and measured, then 100
-- are deleted by heap's DELETE for comparison, then one event is purged.
CREATE TABLE rw (id int) USING spindle WITH (events_per_spindle = 1000);
INSERT INTO rw SELECT generate_series(1, 400);
BEGIN;
SELECT spindle._purge_events('rw', array_agg(ctid)) AS purged
  FROM rw WHERE id % 4 = 1;
SELECT pg_current_wal_insert_lsn() AS lsn0 \gset
SELECT spindle._purge_events('rw', array_agg(ctid)) AS purged
  FROM rw WHERE id % 4 = 2;
SELECT pg_current_wal_insert_lsn() AS lsn1 \gset
DELETE FROM rw WHERE id % 4 = 3;
SELECT pg_current_wal_insert_lsn() AS lsn2 \gset
SELECT spindle._purge_events('rw', array_agg(ctid)) AS purged
  FROM rw WHERE id = 4;
SELECT pg_current_wal_insert_lsn() AS lsn3 \gset
SELECT pg_current_xact_id()::xid AS purger \gset
COMMIT;
-- the records (readable now that the commit flushed them)
SELECT resource_manager, record_type, count(*)
  FROM pg_get_wal_records_info(:'lsn0', :'lsn1') WHERE xid = :'purger'
 GROUP BY 1, 2;
-- (the offsets are left out when the record carries a page image)
SELECT regexp_replace(split_part(description, ':', 1), 'xmax [0-9]+', 'xmax N') AS description
  FROM pg_get_wal_records_info(:'lsn0', :'lsn1') WHERE resource_manager = 'spindle'
 ORDER BY start_lsn;
SELECT resource_manager, record_type, count(*)
  FROM pg_get_wal_records_info(:'lsn1', :'lsn2') WHERE xid = :'purger'
 GROUP BY 1, 2;
-- Bytes of WAL between the LSNs, less what other processes wrote meanwhile
-- (autovacuum, running-xacts records) and less full-page images.  Without
-- a page image a record is 24 (header) + 20 (block reference) + 2 + 8
-- (main data) + 2 per event bytes, so 100 events on 3 pages take about
-- 3 * 54 + 200 = 362 bytes plus alignment; one record per event would
-- take at least 56 bytes each (5 600): the bound of 1000 tells them apart.
CREATE FUNCTION wal_bytes(pg_lsn, pg_lsn, xid) RETURNS numeric
LANGUAGE sql AS $$
  SELECT pg_wal_lsn_diff($2, $1)
         - coalesce((SELECT sum(CASE WHEN xid = $3 THEN fpi_length ELSE record_length END)
                       FROM pg_get_wal_records_info($1, $2)), 0)
$$;
SELECT wal_bytes(:'lsn0', :'lsn1', :'purger') < 1000 AS purge_100_under_1000_bytes,
       wal_bytes(:'lsn1', :'lsn2', :'purger') > 5000 AS delete_100_over_5000_bytes,
       wal_bytes(:'lsn2', :'lsn3', :'purger') < 100 AS purge_1_under_100_bytes;
SELECT count(*) FROM rw;

-- spindle.verify(): every spindle table left here is healthy
SELECT c.oid::regclass AS rel, v FROM pg_catalog.pg_class c, spindle.verify(c.oid) v
 WHERE c.relam = (SELECT oid FROM pg_catalog.pg_am WHERE amname = 'spindle')
 ORDER BY 1, 2;
DROP TABLE rp, rpd, rpv, rw;
DROP FUNCTION rp_items(regclass), wal_bytes(pg_lsn, pg_lsn, xid);
