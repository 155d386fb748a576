--
-- toast: 2 MB payloads are stored, read back intact, survive an UPDATE that
-- moves them to another spindle, and their out-of-line storage goes when the
-- spindle that held them is dropped.
--
\set VERBOSITY default

-- This test asserts exact drop counts and spindle lists: the background
-- worker, which drops spindles at moments of its own choosing, must be off
-- (test/spindle.conf turns it off for pg_regress).
SHOW spindle.enable_worker;

-- 2 MB of text that compresses badly, and its checksum
CREATE TEMP TABLE big_ref AS
  SELECT string_agg(md5(g::text), '' ORDER BY g) AS payload
    FROM generate_series(1, 65536) g;
SELECT length(payload), md5(payload) AS ref_md5 FROM big_ref \gset
SELECT :length AS payload_length;

CREATE TABLE tt (id int, t text, j jsonb) USING spindle WITH (events_per_spindle = 2);
INSERT INTO tt SELECT 1, payload, NULL FROM big_ref;
INSERT INTO tt SELECT 2, NULL, jsonb_build_object('data', payload, 'n', 2) FROM big_ref;
INSERT INTO tt VALUES (3, 'small', '{"small": true}');
SELECT spindle_no, state, capacity, events, purged_events FROM spindle.spindles
 WHERE relation = 'tt'::regclass AND state <> 'ready' ORDER BY spindle_no;

-- read back intact
SELECT id, length(t) AS t_len, md5(t) = :'ref_md5' AS t_ok,
       length(j ->> 'data') AS j_len, md5(j ->> 'data') = :'ref_md5' AS j_ok,
       j -> 'n' AS n
  FROM tt ORDER BY id;
SELECT id, substr(t, 1, 32) AS t_head, substr(t, 2097121) AS t_tail
  FROM tt WHERE id = 1;
SELECT count(*) FROM tt WHERE t = (SELECT payload FROM big_ref);

-- the payloads of spindle 1 are stored out of line, in storage that belongs
-- to spindle 1
CREATE TEMP TABLE first_spindle AS
  SELECT sc.spindle_no, sc.segment, c.reltoastrelid AS toast
    FROM spindle.spindle_catalog sc JOIN pg_class c ON c.oid = sc.segment
   WHERE sc.relation = 'tt'::regclass
   ORDER BY sc.spindle_no LIMIT 1;
SELECT spindle_no, toast <> 0 AS has_toast,
       pg_total_relation_size(toast) > 2000000 AS toast_holds_payloads
  FROM first_spindle;

-- an UPDATE moves the row with its payload to the open spindle; the payload
-- must not depend on spindle 1 any more
UPDATE tt SET id = 12 WHERE id = 2;
SELECT id, md5(j ->> 'data') = :'ref_md5' AS j_ok FROM tt ORDER BY id;

-- delete the other payload: spindle 1 is full and fully purged
DELETE FROM tt WHERE id = 1;
SELECT spindle_no, state, capacity, events, purged_events FROM spindle.spindles
 WHERE relation = 'tt'::regclass AND state <> 'ready' ORDER BY spindle_no;
SELECT spindle.drop_spindles('tt') >= 0 AS ran;
SELECT spindle_no, state, capacity, events, purged_events FROM spindle.spindles
 WHERE relation = 'tt'::regclass AND state <> 'ready' ORDER BY spindle_no;
-- spindle 1, its segment and its TOAST relation are gone
SELECT count(*) AS spindle_left FROM spindle.spindles
 WHERE relation = 'tt'::regclass AND spindle_no = (SELECT spindle_no FROM first_spindle);
SELECT count(*) AS segment_left FROM pg_class WHERE oid = (SELECT segment FROM first_spindle);
SELECT count(*) AS toast_left FROM pg_class WHERE oid = (SELECT toast FROM first_spindle);
SELECT spindles_dropped, bytes_freed > 2000000 AS freed_payloads
  FROM spindle.tables WHERE relation = 'tt'::regclass;

-- the moved payload is still intact
SELECT id, length(j ->> 'data') AS j_len, md5(j ->> 'data') = :'ref_md5' AS j_ok
  FROM tt ORDER BY id;

-- a large payload that is inserted and rolled back still reads as nothing
BEGIN;
INSERT INTO tt SELECT 4, payload, NULL FROM big_ref;
ROLLBACK;
SELECT count(*) FROM tt WHERE id = 4;

-- INSERT ... SELECT between spindle tables copies the payload
CREATE TABLE tt2 (id int, j jsonb) USING spindle WITH (events_per_spindle = 1);
INSERT INTO tt2 SELECT id, j FROM tt WHERE id = 12;
DELETE FROM tt WHERE id = 12;
SELECT spindle.drop_spindles('tt') >= 0 AS ran;
SELECT id, md5(j ->> 'data') = :'ref_md5' AS j_ok FROM tt2;
SELECT id, t, j FROM tt ORDER BY id;

-- spindle.verify(): every spindle table left here is healthy
SELECT c.oid::regclass AS rel, v FROM pg_catalog.pg_class c, spindle.verify(c.oid) v
 WHERE c.relam = (SELECT oid FROM pg_catalog.pg_am WHERE amname = 'spindle')
 ORDER BY 1, 2;
DROP TABLE tt, tt2, big_ref, first_spindle;

