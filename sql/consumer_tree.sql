--
-- consumer_tree: the straggler tree of a queue's consumer relation
-- (docs/design.md, "Consumer state ...", sections 3 and 4, step 2),
-- driven by the test-only functions spindle._run_*(): upserts with leaf and
-- root splits, overlapping upserts replacing what they cover (read_count
-- kept at the maximum), removals, lookups, range scans, verification, and
-- freed pages reused only once no snapshot can see them.
--
SET client_min_messages = warning;
SELECT spindle.create_queue('ct');
CREATE FUNCTION crel_size() RETURNS bigint LANGUAGE sql AS
$$ SELECT pg_relation_size(c.oid) FROM pg_class c
   WHERE c.relnamespace = 'pg_spindle'::regnamespace
     AND c.relname = 'c' || 'spindle_q.ct'::regclass::oid $$;

-- superusers only; queue tables only; subscriptions 0 .. 63
CREATE ROLE ct_user;
GRANT USAGE ON SCHEMA spindle TO ct_user;
SET ROLE ct_user;
SELECT spindle._run_lookup('spindle_q.ct', 0, 1);
RESET ROLE;
CREATE TABLE ct_heap (a int);
SELECT spindle._run_lookup('ct_heap', 0, 1);
SELECT spindle._run_upsert('spindle_q.ct', 64, 1, 1);
SELECT spindle._run_upsert('spindle_q.ct', 0, 1, 0);
SELECT spindle._run_upsert('spindle_q.ct', 0, 1, 1, kind => 7);
DROP TABLE ct_heap;
REVOKE USAGE ON SCHEMA spindle FROM ct_user;
DROP ROLE ct_user;

-- no tree yet
SELECT * FROM spindle._run_verify('spindle_q.ct', 0);
SELECT * FROM spindle._run_lookup('spindle_q.ct', 0, 1);
SELECT spindle._run_remove('spindle_q.ct', 0, 1, 10);

-- 20 000 runs in msg_id order: leaf splits, then a root split
SELECT spindle._run_upsert('spindle_q.ct', 0, 1000, 3, kind => 3,
       due => '2030-01-01 00:00:00+00', read_count => 1,
       count => 20000, stride => 10);
SELECT height, pages > 50 AS many_leaves, runs, ids, incomplete_splits, problems
  FROM spindle._run_verify('spindle_q.ct', 0);
SELECT * FROM spindle._run_lookup('spindle_q.ct', 0, 1000);
SELECT * FROM spindle._run_lookup('spindle_q.ct', 0, 150002);
SELECT * FROM spindle._run_lookup('spindle_q.ct', 0, 150003);	-- a gap
SELECT * FROM spindle._run_lookup('spindle_q.ct', 0, 999);
SELECT count(*), min(first), max(first) FROM spindle._run_scan('spindle_q.ct', 0, 50001, 90001);
SELECT first, len FROM spindle._run_scan('spindle_q.ct', 0, 1001, 1021);

-- an upsert over several runs replaces them, cuts the runs at its ends,
-- and keeps the largest read_count
SELECT spindle._run_upsert('spindle_q.ct', 0, 2001, 25, kind => 1, read_count => 0);
SELECT first, len, kind, read_count FROM spindle._run_scan('spindle_q.ct', 0, 1995, 2035);
-- inside one run: it is split in three
SELECT spindle._run_upsert('spindle_q.ct', 0, 2011, 2, kind => 4, awaited => 747);
SELECT first, len, kind, read_count, awaited FROM spindle._run_scan('spindle_q.ct', 0, 2001, 2026);
-- removals: inside, across, over nothing
SELECT spindle._run_remove('spindle_q.ct', 0, 2005, 8);
SELECT spindle._run_remove('spindle_q.ct', 0, 2024, 10);
SELECT spindle._run_remove('spindle_q.ct', 0, -100, 50);
SELECT first, len, kind FROM spindle._run_scan('spindle_q.ct', 0, 1995, 2045);
-- a long upsert across leaves, then its removal
SELECT spindle._run_upsert('spindle_q.ct', 0, 100000, 30000, kind => 6);
SELECT count(*) FROM spindle._run_scan('spindle_q.ct', 0, 100000, 130000);
SELECT spindle._run_remove('spindle_q.ct', 0, 90000, 50000);
SELECT height, runs, ids, incomplete_splits, problems FROM spindle._run_verify('spindle_q.ct', 0);

-- random upserts and removals against a model, on small pages (deep tree)
SET spindle.test_tree_fanout = 8;
CREATE TEMP TABLE m (id bigint PRIMARY KEY, kind int, rc int);
CREATE TEMP TABLE removed (n bigint, expected bigint);
DO $$
DECLARE
  x bigint := 12345;
  a bigint; l bigint; k int; r int; op int; mx int; n bigint; e bigint;
BEGIN
  FOR i IN 1..3000 LOOP
    x := (x * 1103515245 + 12345) % 2147483648;
    op := x % 10;
    x := (x * 1103515245 + 12345) % 2147483648;
    a := x % 6000;
    x := (x * 1103515245 + 12345) % 2147483648;
    l := 1 + x % 12;
    k := 1 + i % 6;
    r := i % 7;
    IF op < 8 THEN
      SELECT coalesce(max(rc), 0) INTO mx FROM m WHERE id >= a AND id < a + l;
      PERFORM spindle._run_upsert('spindle_q.ct', 3, a, l, k, NULL, r, i);
      DELETE FROM m WHERE id >= a AND id < a + l;
      INSERT INTO m SELECT g, k, greatest(r, mx) FROM generate_series(a, a + l - 1) g;
    ELSE
      l := l * 5;
      n := spindle._run_remove('spindle_q.ct', 3, a, l);
      DELETE FROM m WHERE id >= a AND id < a + l;
      GET DIAGNOSTICS e = ROW_COUNT;
      INSERT INTO removed VALUES (n, e);
    END IF;
  END LOOP;
END $$;
SELECT height >= 3 AS deep, incomplete_splits, problems
  FROM spindle._run_verify('spindle_q.ct', 3);
SELECT count(*) > 100 AS removals, count(*) FILTER (WHERE n <> expected) AS wrong
  FROM removed;
CREATE TEMP VIEW tree_ids AS
  SELECT s.first + g AS id, s.kind, s.read_count
    FROM spindle._run_scan('spindle_q.ct', 3, -1000, 100000) s,
         generate_series(0, s.len - 1) g;
SELECT count(*) AS differ FROM (
  (SELECT * FROM tree_ids EXCEPT SELECT id, kind, rc FROM m)
  UNION ALL
  (SELECT id, kind, rc FROM m EXCEPT SELECT * FROM tree_ids)) d;
SELECT count(*) AS lookups_wrong FROM m
 WHERE (SELECT kind FROM spindle._run_lookup('spindle_q.ct', 3, m.id))
       IS DISTINCT FROM m.kind;
-- subscription 0's tree is untouched
SELECT runs, problems FROM spindle._run_verify('spindle_q.ct', 0);

-- a dropped tree's pages are not reused while a snapshot may see them ...
SELECT spindle._run_drop('spindle_q.ct', 3) > 10 AS dropped;
SELECT * FROM spindle._run_verify('spindle_q.ct', 3);
SELECT crel_size() AS size_dropped \gset
SELECT spindle._run_upsert('spindle_q.ct', 4, 1, 1);
SELECT crel_size() > :size_dropped AS extended;
-- ... and are once none can
SELECT txid_current() IS NOT NULL AS new_xid;
SELECT crel_size() AS size_now \gset
SELECT spindle._run_upsert('spindle_q.ct', 4, 10, 2, count => 400, stride => 3);
SELECT crel_size() = :size_now AS reused;
SELECT height, runs, problems FROM spindle._run_verify('spindle_q.ct', 4);
RESET spindle.test_tree_fanout;

-- VACUUM FULL keeps the trees; TRUNCATE of the queue empties them
SELECT 'pg_spindle.c' || 'spindle_q.ct'::regclass::oid AS crel \gset
VACUUM FULL :crel;
SELECT runs, problems FROM spindle._run_verify('spindle_q.ct', 0);
TRUNCATE spindle_q.ct;
SELECT * FROM spindle._run_verify('spindle_q.ct', 0);
SELECT crel_size();

DROP VIEW tree_ids;
SELECT spindle.drop_queue('ct');
DROP FUNCTION crel_size();
