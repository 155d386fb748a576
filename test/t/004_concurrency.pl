# Real concurrency (pgbench): producers racing across spindle boundaries never
# overfill a spindle; producers, SKIP LOCKED consumers and drop_spindles()
# running together never lose an event nor hand one out twice.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('concurrency');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'spindle'\n");
$node->append_conf('postgresql.conf', "max_connections = 30\n");
# parallel scans are tested by the regression tests (am_basic); here the
# sequential scan is the reference the index scans are compared with
$node->append_conf('postgresql.conf', "max_parallel_workers_per_gather = 0\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION spindle');

# 1. Concurrent producers, some rolling back, across boundaries of 3.
$node->safe_psql('postgres',
	q{CREATE TABLE ci (client int, n int) USING spindle WITH (events_per_spindle = 3)});
$node->pgbench(
	'--no-vacuum --client=6 --jobs=3 --transactions=150',
	0,
	[qr{processed: 900/900}],
	[qr{^$}],
	'concurrent producers',
	{
		'001_produce' => q{
\set r random(1, 4)
BEGIN;
INSERT INTO ci SELECT :client_id, g FROM generate_series(1, :r) g;
\if :r = 4
ROLLBACK;
\else
COMMIT;
\endif
}
	});

is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM spindle.spindles
 WHERE relation = 'ci'::regclass AND (events > capacity OR purged_events > events)}),
	'0',
	'no spindle over capacity after concurrent inserts');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM spindle.spindles
 WHERE relation = 'ci'::regclass AND state = 'full' AND events <> capacity}),
	'0',
	'every full spindle holds exactly its capacity');
# (when the events fill the last spindle exactly, there is no open one)
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FILTER (WHERE state = 'open') <= 1
       AND coalesce(max(spindle_no) FILTER (WHERE state = 'open') = max(spindle_no), true)
  FROM spindle.spindles WHERE relation = 'ci'::regclass AND state <> 'ready'}),
	't',
	'at most one open spindle, the newest in use');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM spindle.spindles
 WHERE relation = 'ci'::regclass AND state = 'open'
   AND spindle_no < (SELECT max(spindle_no) FROM spindle.spindles
                      WHERE relation = 'ci'::regclass AND state <> 'ready')}),
	'0',
	'no open spindle behind the newest one in use');
is( $node->safe_psql(
		'postgres', q{
SELECT (SELECT sum(events) - sum(purged_events) FROM spindle.spindles
         WHERE relation = 'ci'::regclass) = (SELECT count(*) FROM ci)}),
	't',
	'live events equal the rows');
is( $node->safe_psql(
		'postgres', q{SELECT count(*) = count(DISTINCT ctid) FROM ci}),
	't',
	'every row has its own TID');
# rows come in groups of 1..3 per committed transaction: the number of rows
# of each (client, n) pair is decreasing in n
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM (
  SELECT client, n, count(*) AS c,
         lag(count(*)) OVER (PARTITION BY client ORDER BY n) AS prev
    FROM ci GROUP BY client, n) x
 WHERE n NOT BETWEEN 1 AND 3 OR prev < c}),
	'0',
	'only committed transactions left rows');

# 2. Producers, SKIP LOCKED consumers and drop_spindles() together.
$node->safe_psql(
	'postgres', q{
CREATE SEQUENCE cq_seq;
CREATE TABLE cq (id bigint, payload text) USING spindle WITH (events_per_spindle = 10);
CREATE INDEX cq_id ON cq (id);
CREATE TABLE consumed (id bigint, consumer int);
INSERT INTO cq SELECT nextval('cq_seq'), 'initial' FROM generate_series(1, 1000);
});
$node->pgbench(
	'--no-vacuum --client=8 --jobs=4 --transactions=500',
	0,
	[qr{processed: 4000/4000}],
	[qr{^$}],
	'concurrent producers, consumers and drops',
	{
		'002_produce@4' => q{
INSERT INTO cq SELECT nextval('cq_seq'), 'p' || :client_id FROM generate_series(1, 3);
},
		'003_consume@5' => q{
WITH c AS (
  DELETE FROM cq WHERE id IN (SELECT id FROM cq ORDER BY id LIMIT 4 FOR UPDATE SKIP LOCKED)
  RETURNING id)
INSERT INTO consumed SELECT id, :client_id FROM c;
},
		'004_drop@1' => q{
SELECT spindle.drop_spindles('cq');
}
	});

my $produced = $node->safe_psql('postgres',
	q{SELECT last_value FROM cq_seq});
ok($produced > 1000, "events were produced ($produced)");
is( $node->safe_psql(
		'postgres', q{SELECT count(*) - count(DISTINCT id) FROM consumed}),
	'0',
	'no event was consumed twice');
is( $node->safe_psql(
		'postgres', q{
SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
SELECT count(*) FROM (
  SELECT id FROM consumed UNION ALL SELECT id FROM cq) x}),
	$produced,
	'consumed + remaining = produced');
is( $node->safe_psql(
		'postgres', q{
SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
SELECT count(*) FROM generate_series(1, (SELECT last_value FROM cq_seq)) g
 WHERE NOT EXISTS (SELECT 1 FROM consumed c WHERE c.id = g)
   AND NOT EXISTS (SELECT 1 FROM cq WHERE cq.id = g)}),
	'0',
	'no event was lost (sequential scans)');
is( $node->safe_psql(
		'postgres', q{
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM consumed c WHERE EXISTS (SELECT 1 FROM cq WHERE cq.id = c.id)}),
	'0',
	'no consumed event is found through the index');
is( $node->safe_psql(
		'postgres', q{
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT string_agg(id::text, ',' ORDER BY id) FROM cq WHERE id > 0}),
	$node->safe_psql('postgres',
		q{SELECT string_agg(id::text, ',' ORDER BY id) FROM cq}),
	'index scan and sequential scan agree');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM spindle.spindles
 WHERE relation = 'cq'::regclass AND (events > capacity OR purged_events > events)}),
	'0',
	'no spindle over capacity');
is( $node->safe_psql(
		'postgres', q{
SELECT (SELECT sum(events) - sum(purged_events) FROM spindle.spindles
         WHERE relation = 'cq'::regclass) = (SELECT count(*) FROM cq)}),
	't',
	'live events equal the rows');

# consume what is left, then every full spindle can go
$node->safe_psql('postgres',
	q{INSERT INTO consumed SELECT id, 0 FROM cq; DELETE FROM cq;});
$node->safe_psql('postgres', q{SELECT spindle.drop_spindles('cq')});
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM spindle.spindles WHERE relation = 'cq'::regclass AND state = 'full'}),
	'0',
	'every full spindle dropped once all is consumed');
ok( $node->safe_psql(
		'postgres', q{SELECT spindles_dropped FROM spindle.tables WHERE relation = 'cq'::regclass}
	  ) > 0,
	'spindles were dropped');
is( $node->safe_psql(
		'postgres', q{SELECT count(*) = count(DISTINCT id) AND count(*) = max(id) FROM consumed}),
	't',
	'every produced event consumed exactly once');

$node->stop;
done_testing();
