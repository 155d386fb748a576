--
-- views_counters: the monitoring views come from maintained counters.
-- Column names and types of every view; spindle.spindles' events and
-- purged_events exact after INSERT, DELETE, ROLLBACK, ROLLBACK TO
-- SAVEPOINT, RELEASE, UPDATE, a TTL purge, dequeue and ack, a prepared
-- transaction; spindle.queues' figures; drop_blocked_by naming a prepared
-- transaction; and the cost: the views read the same number of buffers
-- for a table of 400 000 events as for one of 2 000 with as many spindles.
--
-- The worker is off (test/spindle.conf).
SHOW spindle.enable_worker;

-- columns and types of every view
SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod)
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
 WHERE c.relnamespace = 'spindle'::regnamespace
   AND c.relname IN ('spindles', 'tables', 'queues', 'worker')
   AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY c.relname, a.attnum;

-- figures of one table, checked against what is really there
CREATE TABLE vc (id int, body text) USING spindle WITH (events_per_spindle = 10);
CREATE VIEW vc_fig AS
  SELECT sum(events) AS events, sum(purged_events) AS purged,
         sum(events) - sum(purged_events) AS unpurged,
         (SELECT count(*) FROM vc) AS rows
    FROM spindle.spindles WHERE relation = 'vc'::regclass;

INSERT INTO vc SELECT g, 'x' FROM generate_series(1, 25) g;
SELECT * FROM vc_fig;
SELECT spindle_no, state, events, purged_events FROM spindle.spindles
 WHERE relation = 'vc'::regclass AND state <> 'ready' ORDER BY spindle_no;

-- DELETE counts at commit, not before
BEGIN;
DELETE FROM vc WHERE id <= 3;
SELECT * FROM vc_fig;
COMMIT;
SELECT * FROM vc_fig;

-- a rolled-back DELETE counts nothing; a rolled-back INSERT is purged
BEGIN;
DELETE FROM vc WHERE id BETWEEN 4 AND 6;
INSERT INTO vc VALUES (100, 'gone'), (101, 'gone');
ROLLBACK;
SELECT * FROM vc_fig;

-- savepoints: what a rolled-back subtransaction deleted stays, what it
-- inserted is purged; a released one's work is its parent's
BEGIN;
DELETE FROM vc WHERE id = 4;
SAVEPOINT a;
DELETE FROM vc WHERE id = 5;
INSERT INTO vc VALUES (200, 'sub');
ROLLBACK TO SAVEPOINT a;
SAVEPOINT b;
DELETE FROM vc WHERE id = 6;
SAVEPOINT c;
DELETE FROM vc WHERE id = 7;
RELEASE SAVEPOINT c;
RELEASE SAVEPOINT b;
COMMIT;
SELECT * FROM vc_fig;
-- a released subtransaction of a transaction that rolls back counts nothing
BEGIN;
SAVEPOINT a;
DELETE FROM vc WHERE id = 8;
RELEASE SAVEPOINT a;
ROLLBACK;
SELECT * FROM vc_fig;
-- an error aborts the statement's inserts: purged
BEGIN;
SAVEPOINT a;
INSERT INTO vc SELECT g, (1 / (30 - g))::text FROM generate_series(20, 31) g;
ROLLBACK TO SAVEPOINT a;
COMMIT;
SELECT * FROM vc_fig;
-- UPDATE: the old version purged, the new one appended
UPDATE vc SET body = 'y' WHERE id = 9;
SELECT * FROM vc_fig;

-- the TTL purge counts at commit
CREATE TABLE vc_ttl (id int) USING spindle WITH (events_per_spindle = 10);
INSERT INTO vc_ttl SELECT generate_series(1, 15);
SELECT pg_sleep(2.1);
BEGIN;
SELECT spindle.purge_expired('vc_ttl', '1 s');
SELECT sum(purged_events) FROM spindle.spindles WHERE relation = 'vc_ttl'::regclass;
COMMIT;
SELECT sum(events) AS events, sum(purged_events) AS purged,
       (SELECT count(*) FROM vc_ttl) AS rows
  FROM spindle.spindles WHERE relation = 'vc_ttl'::regclass;
-- a rolled-back TTL purge counts nothing
INSERT INTO vc_ttl SELECT generate_series(16, 20);
SELECT pg_sleep(2.1);
BEGIN;
SELECT spindle.purge_expired('vc_ttl', '1 s');
ROLLBACK;
SELECT sum(events) AS events, sum(purged_events) AS purged,
       (SELECT count(*) FROM vc_ttl) AS rows
  FROM spindle.spindles WHERE relation = 'vc_ttl'::regclass;

-- a prepared DELETE: not counted while prepared; counted once committed
-- (the spindles it wrote are counted from disk again after COMMIT PREPARED)
BEGIN;
DELETE FROM vc WHERE id IN (10, 11);
PREPARE TRANSACTION 'vc_delete';
SELECT * FROM vc_fig;
COMMIT PREPARED 'vc_delete';
SELECT * FROM vc_fig;
BEGIN;
DELETE FROM vc WHERE id = 12;
INSERT INTO vc VALUES (300, 'prepared');
PREPARE TRANSACTION 'vc_rollback';
ROLLBACK PREPARED 'vc_rollback';
SELECT * FROM vc_fig;

-- drop_blocked_by: a full, fully purged spindle that a prepared
-- transaction (older than its purger) keeps
CREATE TABLE vc_blk (id int) USING spindle WITH (events_per_spindle = 5);
CREATE TABLE vc_other (id int);
INSERT INTO vc_blk SELECT generate_series(1, 7);
BEGIN;
INSERT INTO vc_other VALUES (1);
PREPARE TRANSACTION 'vc_blocker';
DELETE FROM vc_blk WHERE id <= 5;
SELECT spindle_no, state, events, purged_events,
       regexp_replace(drop_blocked_by, 'xid [0-9]+$', 'xid N') AS drop_blocked_by
  FROM spindle.spindles WHERE relation = 'vc_blk'::regclass AND state <> 'ready'
 ORDER BY spindle_no;
SELECT drop_blocked_by = format('prepared transaction "vc_blocker": xid %s',
                                (SELECT transaction FROM pg_prepared_xacts
                                  WHERE gid = 'vc_blocker')) AS names_gid_and_xid
  FROM spindle.tables WHERE relation = 'vc_blk'::regclass;
SELECT spindle.drop_spindles('vc_blk');
ROLLBACK PREPARED 'vc_blocker';
SELECT drop_blocked_by FROM spindle.tables WHERE relation = 'vc_blk'::regclass;
SELECT spindle.drop_spindles('vc_blk');
SELECT spindle_no, state, events, purged_events, drop_blocked_by
  FROM spindle.spindles WHERE relation = 'vc_blk'::regclass AND state <> 'ready'
 ORDER BY spindle_no;
-- a spindle with a live event is not blocked: it is not droppable at all
SELECT count(*) FROM spindle.spindles WHERE drop_blocked_by IS NOT NULL;

-- queues: dequeue and ack count at commit; spindle.queues' figures
SELECT spindle.create_queue('vcq', events_per_spindle => 4);
SELECT count(*) FROM spindle.enqueue_batch('vcq',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 10) g));
SELECT count(*) FROM spindle.dequeue('vcq', 2);
SELECT queue_name, relation, depth, leased, delayed, oldest_event_age IS NOT NULL AS has_age,
       enqueued_total, dequeued_total, dead_lettered_total, waiting_consumers
  FROM spindle.queues WHERE queue_name = 'vcq';
BEGIN;
SELECT count(*) FROM spindle.dequeue('vcq', 3);
SELECT sum(purged_events) FROM spindle.spindles WHERE relation = 'spindle_q.vcq'::regclass;
ROLLBACK;
SELECT sum(purged_events) FROM spindle.spindles WHERE relation = 'spindle_q.vcq'::regclass;
SELECT count(*) FROM spindle.read('vcq', 3, '1 hour');
SELECT depth, leased, delayed FROM spindle.queues WHERE queue_name = 'vcq';
SELECT spindle.ack('vcq', (SELECT min(msg_id) FROM spindle_q.vcq));
SELECT sum(events) AS events, sum(purged_events) AS purged,
       (SELECT count(*) FROM spindle_q.vcq) AS rows
  FROM spindle.spindles WHERE relation = 'spindle_q.vcq'::regclass;
SELECT depth, leased, delayed, dequeued_total FROM spindle.queues WHERE queue_name = 'vcq';
SELECT spindle.enqueue('vcq', '{"late": true}', '1 hour') > 0 AS enqueued;
SELECT count(*) FROM spindle.dequeue('vcq', 10);
SELECT depth, leased, delayed, enqueued_total, dequeued_total FROM spindle.queues WHERE queue_name = 'vcq';
-- a rolled-back enqueue is not counted
BEGIN;
SELECT spindle.enqueue('vcq', '{}') > 0 AS enqueued;
ROLLBACK;
SELECT enqueued_total FROM spindle.queues WHERE queue_name = 'vcq';
-- events read more than max_reads times are dead-lettered (here: purged)
SELECT spindle.create_queue('vcq_dl', max_reads => 1);
SELECT spindle.enqueue('vcq_dl', '{}') > 0 AS enqueued;
SELECT count(*) FROM spindle.read('vcq_dl', 1, '0 s');
SELECT count(*) FROM spindle.read('vcq_dl', 1, '0 s');
SELECT depth, enqueued_total, dequeued_total, dead_lettered_total
  FROM spindle.queues WHERE queue_name = 'vcq_dl';
SELECT spindle.drop_queue('vcq_dl');
SELECT spindle.drop_queue('vcq');
SELECT count(*) FROM spindle.queues WHERE queue_name = 'vcq';

-- cost: the views read as many buffers for a table of 400 000 events as
-- for one of 2 000, both in 41 spindles (events, purged and sizes come
-- from shared memory and the file system, never from the spindles' pages)
DROP VIEW vc_fig;
DROP TABLE vc, vc_ttl, vc_blk, vc_other;
CREATE FUNCTION vc_buffers(q text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    plan json;
BEGIN
    EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ' || q INTO plan;
    RETURN (plan -> 0 -> 'Plan' ->> 'Shared Hit Blocks')::bigint
         + (plan -> 0 -> 'Plan' ->> 'Shared Read Blocks')::bigint;
END $$;
CREATE TABLE vc_small (id int) USING spindle WITH (events_per_spindle = 50);
INSERT INTO vc_small SELECT generate_series(1, 2000);
DELETE FROM vc_small WHERE id % 2 = 0;
SELECT relation, spindles, events, purged_events FROM spindle.tables
 WHERE relation = 'vc_small'::regclass;
-- warm (the first call reads catalogs)
SELECT vc_buffers('SELECT * FROM spindle.spindles') > 0 AS warm,
       vc_buffers('SELECT * FROM spindle.tables') > 0 AS warm;
SELECT vc_buffers('SELECT * FROM spindle.spindles') AS small_spindles,
       vc_buffers('SELECT * FROM spindle.tables') AS small_tables
\gset
DROP TABLE vc_small;
CREATE TABLE vc_big (id int) USING spindle WITH (events_per_spindle = 10000);
INSERT INTO vc_big SELECT generate_series(1, 400000);
DELETE FROM vc_big WHERE id % 2 = 0;
SELECT relation, spindles, events, purged_events FROM spindle.tables
 WHERE relation = 'vc_big'::regclass;
SELECT vc_buffers('SELECT * FROM spindle.spindles') > 0 AS warm,
       vc_buffers('SELECT * FROM spindle.tables') > 0 AS warm;
SELECT vc_buffers('SELECT * FROM spindle.spindles') AS big_spindles,
       vc_buffers('SELECT * FROM spindle.tables') AS big_tables
\gset
-- the big table's spindles have pages to read: 40 full spindles of 10 000 events
SELECT sum(pg_relation_size(segment)) / 8192 > 1000 AS big_has_pages
  FROM spindle.spindle_catalog WHERE relation = 'vc_big'::regclass;
-- the same cost within a few catalog pages, far below the spindles' pages
SELECT :big_spindles <= :small_spindles + 5 AS spindles_same_cost,
       :big_spindles < 300 AS spindles_no_page_scan,
       :big_tables <= :small_tables + 5 AS tables_same_cost,
       :big_tables < 300 AS tables_no_page_scan;


DROP FUNCTION vc_buffers(text);
DROP TABLE vc_big;
