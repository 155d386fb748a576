-- spindle.verify(): silent on healthy tables, and finds each problem it
-- claims to check when a table is broken on purpose.
SET client_min_messages = warning;

-- OIDs and spindle relation names vary between runs
CREATE FUNCTION verify_masked(r regclass) RETURNS SETOF text LANGUAGE sql AS $$
    SELECT regexp_replace(regexp_replace(regexp_replace(v,
             's[0-9]+_', 's#_', 'g'),
             'relation [0-9]+', 'relation #', 'g'),
             '\([0-9]{4,}\)', '(#)', 'g')
      FROM spindle.verify(r) v ORDER BY 1 $$;

-- healthy tables, after the usual life of one
CREATE TABLE v (id int, body text) USING spindle WITH (events_per_spindle = 10);
CREATE INDEX v_id ON v (id);
CREATE INDEX v_hash ON v USING hash (id);
INSERT INTO v SELECT g, 'x' || g FROM generate_series(1, 35) g;
SELECT * FROM spindle.verify('v');
DELETE FROM v WHERE id <= 10;
SELECT spindle.drop_spindles('v');
SELECT * FROM spindle.verify('v');		-- dropped, not yet retired
SELECT spindle.drop_spindles('v');
SELECT * FROM spindle.verify('v');		-- retired
BEGIN;
INSERT INTO v VALUES (100, 'rolled back');
ROLLBACK;
UPDATE v SET body = 'updated' WHERE id = 20;
DELETE FROM v WHERE id = 21;
VACUUM v;
SELECT * FROM spindle.verify('v');
BEGIN;
INSERT INTO v VALUES (101, 'in this transaction');
SELECT * FROM spindle.verify('v');
COMMIT;

CREATE TABLE vg (id int, tags text[]) USING spindle WITH (events_per_spindle = 5);
CREATE INDEX vg_tags ON vg USING gin (tags);
INSERT INTO vg SELECT g, ARRAY['a' || g, 'b'] FROM generate_series(1, 12) g;
SELECT * FROM spindle.verify('vg');

CREATE TABLE vone (id int) USING spindle WITH (events_per_spindle = 0);
INSERT INTO vone SELECT generate_series(1, 100);
SELECT * FROM spindle.verify('vone');

CREATE TABLE vempty (id int) USING spindle;
SELECT * FROM spindle.verify('vempty');
TRUNCATE v;
SELECT * FROM spindle.verify('v');
INSERT INTO v SELECT g, 'y' || g FROM generate_series(1, 25) g;

-- a queue with leases, a claim of this transaction and delayed events
SELECT spindle.create_queue('vq', events_per_spindle => 4);
SELECT count(*) FROM (SELECT spindle.enqueue('vq', jsonb_build_object('i', g))
                        FROM generate_series(1, 10) g) s;
SELECT spindle.enqueue('vq', '{"later": 1}', delay => '1 hour') > 0 AS enqueued;
SELECT count(*) FROM spindle.read('vq', 3, '1 hour');
BEGIN;
SELECT count(*) FROM spindle.dequeue('vq', 2);
SELECT * FROM spindle.verify('spindle_q.vq');
COMMIT;
SELECT * FROM spindle.verify('spindle_q.vq');

-- what verify needs
SELECT spindle.verify(NULL);
SELECT spindle.verify(0);
SELECT spindle.verify(4294967295::oid);
CREATE TABLE vheap (a int);
SELECT spindle.verify('vheap');
SELECT spindle.verify('v_id');
CREATE ROLE verify_nobody;
CREATE ROLE verify_reader;
GRANT SELECT ON v TO verify_reader;
SET ROLE verify_nobody;
SELECT spindle.verify('v');
SELECT spindle._verify_corrupt('v', 'map_clear', 0);
RESET ROLE;
SET ROLE verify_reader;
SELECT * FROM spindle.verify('v');
RESET ROLE;
-- it takes ACCESS SHARE only
BEGIN;
SELECT count(*) FROM spindle.verify('v');
SELECT mode FROM pg_locks WHERE locktype = 'relation' AND relation = 'v'::regclass
   AND pid = pg_backend_pid();
COMMIT;

-- ===== broken on purpose =====
-- c: 25 events in spindles of 10: spindles 1, 2 full, 3 open
CREATE TABLE c (id int) USING spindle WITH (events_per_spindle = 10);
CREATE INDEX c_id ON c (id);
CREATE INDEX c_hash ON c USING hash (id);
INSERT INTO c SELECT generate_series(1, 25);
SELECT * FROM spindle.verify('c');
SELECT spindle_no, vbase, vcount FROM spindle.spindle_catalog
 WHERE relation = 'c'::regclass ORDER BY spindle_no;

-- a directory row gone: its relation has none, its index entries no range
BEGIN;
DELETE FROM spindle.spindle_catalog WHERE relation = 'c'::regclass AND spindle_no = 3;
SELECT * FROM verify_masked('c');
ROLLBACK;
-- a row naming a relation that is not its spindle, or none
BEGIN;
UPDATE spindle.spindle_catalog SET segment = 'pg_class'::regclass
 WHERE relation = 'c'::regclass AND spindle_no = 2;
SELECT * FROM verify_masked('c') v WHERE v LIKE 'directory%';
UPDATE spindle.spindle_catalog SET segment = 4294967000
 WHERE relation = 'c'::regclass AND spindle_no = 2;
SELECT * FROM verify_masked('c') v WHERE v LIKE 'directory%';
ROLLBACK;
-- over capacity
BEGIN;
UPDATE spindle.spindle_catalog SET capacity = 8
 WHERE relation = 'c'::regclass AND spindle_no = 1;
SELECT * FROM verify_masked('c');
ROLLBACK;
-- overlapping ranges
BEGIN;
UPDATE spindle.spindle_catalog SET vbase = vbase - 3
 WHERE relation = 'c'::regclass AND spindle_no = 2;
SELECT * FROM verify_masked('c') v WHERE v LIKE 'ranges%';
UPDATE spindle.spindle_catalog SET vbase = 1249835482840
 WHERE relation = 'c'::regclass AND spindle_no = 2;
SELECT * FROM verify_masked('c') v WHERE v LIKE 'ranges%';
ROLLBACK;
-- appended past a spindle that is not full: spindle 1 of ca has 20 slots
-- but a capacity of 10 (ALTER TABLE while it was empty); give it 20
CREATE TABLE ca (id int) USING spindle WITH (events_per_spindle = 20);
ALTER TABLE ca SET (events_per_spindle = 10);
INSERT INTO ca SELECT generate_series(1, 15);
SELECT spindle_no, capacity, vbase, vcount FROM spindle.spindle_catalog
 WHERE relation = 'ca'::regclass ORDER BY spindle_no;
SELECT * FROM spindle.verify('ca');
BEGIN;
UPDATE spindle.spindle_catalog SET capacity = 20, filled_at = NULL
 WHERE relation = 'ca'::regclass AND spindle_no = 1;
SELECT * FROM verify_masked('ca');
ROLLBACK;
SELECT * FROM spindle.verify('c');

-- the slot map (not transactional: each on a table of its own)
CREATE TABLE c1 (id int) USING spindle WITH (events_per_spindle = 10);
CREATE INDEX c1_id ON c1 (id);
INSERT INTO c1 SELECT generate_series(1, 15);
SELECT spindle._verify_corrupt('c1', 'map_clear',
    (SELECT vbase + 3 FROM spindle.spindle_catalog WHERE relation = 'c1'::regclass AND spindle_no = 1));
SELECT * FROM verify_masked('c1');
DROP TABLE c1;
CREATE TABLE c2 (id int) USING spindle WITH (events_per_spindle = 10);
INSERT INTO c2 SELECT generate_series(1, 15);
-- slot 4's entry names the event of slot 5, at (0,6); slot 6's a line
-- pointer that does not exist
SELECT spindle._verify_corrupt('c2', 'map_set',
    (SELECT vbase + 4 FROM spindle.spindle_catalog WHERE relation = 'c2'::regclass AND spindle_no = 1),
    6);
SELECT spindle._verify_corrupt('c2', 'map_set',
    (SELECT vbase + 6 FROM spindle.spindle_catalog WHERE relation = 'c2'::regclass AND spindle_no = 1),
    200);
SELECT * FROM verify_masked('c2');
-- set_k through those entries: a clear error, nothing written (it wrote
-- past the page's line pointers before); and past the spindle's end
SELECT spindle._verify_corrupt('c2', 'set_k',
    (SELECT vbase + 6 FROM spindle.spindle_catalog WHERE relation = 'c2'::regclass AND spindle_no = 1),
    1);
SELECT spindle._verify_corrupt('c2', 'map_set',
    (SELECT vbase + 7 FROM spindle.spindle_catalog WHERE relation = 'c2'::regclass AND spindle_no = 1),
    (1000 << 16) + 1);
SELECT spindle._verify_corrupt('c2', 'set_k',
    (SELECT vbase + 7 FROM spindle.spindle_catalog WHERE relation = 'c2'::regclass AND spindle_no = 1),
    1);
DROP TABLE c2;
-- a map page the slot map's directory does not name (mapdir.c): reported,
-- and the map's compaction refuses to free or move it
CREATE TABLE c_orphan (id int) USING spindle WITH (events_per_spindle = 10);
INSERT INTO c_orphan SELECT generate_series(1, 5);
SELECT spindle._verify_corrupt('c_orphan', 'map_orphan', 0);
SELECT * FROM verify_masked('c_orphan');
VACUUM c_orphan;
SELECT count(*) FROM c_orphan;
DROP TABLE c_orphan;
-- an insert cut off between placing its tuple and writing its map entry
-- (a backend killed there, 035) leaves an aborted event with no entry: no
-- event, nothing to report (it was reported as an empty map entry)
CREATE TABLE c5 (id int) USING spindle WITH (events_per_spindle = 10);
INSERT INTO c5 SELECT generate_series(1, 3);
BEGIN;
INSERT INTO c5 VALUES (4);
ROLLBACK;
SELECT spindle._verify_corrupt('c5', 'map_clear',
    (SELECT vbase + 3 FROM spindle.spindle_catalog WHERE relation = 'c5'::regclass AND spindle_no = 1));
SELECT * FROM verify_masked('c5');
-- the same for a committed event is reported
SELECT spindle._verify_corrupt('c5', 'map_clear',
    (SELECT vbase + 2 FROM spindle.spindle_catalog WHERE relation = 'c5'::regclass AND spindle_no = 1));
SELECT * FROM verify_masked('c5');
DROP TABLE c5;
-- a slot used twice, and a slot number outside the spindle
CREATE TABLE c3 (id int) USING spindle WITH (events_per_spindle = 10);
INSERT INTO c3 SELECT generate_series(1, 15);
SELECT spindle._verify_corrupt('c3', 'set_k',
    (SELECT vbase + 3 FROM spindle.spindle_catalog WHERE relation = 'c3'::regclass AND spindle_no = 1),
    2);
SELECT spindle._verify_corrupt('c3', 'set_k',
    (SELECT vbase + 7 FROM spindle.spindle_catalog WHERE relation = 'c3'::regclass AND spindle_no = 1),
    50);
SELECT * FROM verify_masked('c3');
DROP TABLE c3;
-- index entries in no spindle's range, and for a slot with no event
CREATE TABLE c4 (id int) USING spindle WITH (events_per_spindle = 10);
CREATE INDEX c4_id ON c4 (id);
CREATE INDEX c4_hash ON c4 USING hash (id);
INSERT INTO c4 SELECT generate_series(1, 15);
SELECT spindle._verify_corrupt('c4', 'index_entry', 1000000);
SELECT spindle._verify_corrupt('c4', 'index_entry', 1000001, 7);
SELECT spindle._verify_corrupt('c4', 'index_entry',
    (SELECT vbase + 8 FROM spindle.spindle_catalog WHERE relation = 'c4'::regclass AND spindle_no = 2));
SELECT * FROM verify_masked('c4');
DROP TABLE c4;
-- GIN too
CREATE TABLE c5 (id int, tags text[]) USING spindle WITH (events_per_spindle = 10);
CREATE INDEX c5_tags ON c5 USING gin (tags);
INSERT INTO c5 SELECT g, ARRAY['t' || g] FROM generate_series(1, 15) g;
SELECT spindle._verify_corrupt('c5', 'index_entry', 2000000);
SELECT * FROM verify_masked('c5');
DROP TABLE c5;
-- a queue item ahead of the head, and one overlapping a lease
SELECT spindle.create_queue('vq2', events_per_spindle => 10);
SELECT count(*) FROM spindle.enqueue_batch('vq2',
    ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 6) g));
SELECT count(*) FROM spindle.read('vq2', 2, '1 hour');
SELECT * FROM spindle.verify('spindle_q.vq2');
SELECT spindle._verify_corrupt('spindle_q.vq2', 'queue_item', min(msg_id), 1)
  FROM spindle_q.vq2;
SELECT spindle._verify_corrupt('spindle_q.vq2', 'queue_item', max(msg_id) + 100, 2)
  FROM spindle_q.vq2;
SELECT regexp_replace(v, '[0-9]{6,}', '#', 'g') FROM spindle.verify('spindle_q.vq2') v ORDER BY 1;
SELECT spindle.drop_queue('vq2');

-- the test-only function is not for everyone
SELECT has_function_privilege('public', 'spindle._verify_corrupt(regclass, text, bigint, bigint)', 'EXECUTE');

DROP TABLE vheap;
DROP ROLE verify_nobody;
REVOKE ALL ON v FROM verify_reader;
DROP ROLE verify_reader;
