# Transaction ID wraparound with nobody running VACUUM by hand: once the
# spindles are older than autovacuum_freeze_max_age, anti-wraparound
# autovacuum freezes their events and advances their relfrozenxid (and the
# database's datfrozenxid), and reclaims no slot: every event is still
# there, index scans agree, the spindles' counts are unchanged, and new
# events take new slots.  The spindle worker runs all along.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;
use Time::HiRes qw(gettimeofday tv_interval usleep);

my $node = PostgreSQL::Test::Cluster->new('wrap');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle'
max_worker_processes = 16
spindle.naptime = 200ms
# on below, once the extension exists (a worker that finds no extension
# looks again only after 30 s)
spindle.enable_worker = off
autovacuum_freeze_max_age = 100000
autovacuum_naptime = 1s
});
$node->start;

$node->safe_psql(
	'postgres', q{
CREATE EXTENSION spindle;
CREATE EXTENSION pageinspect;
CREATE PROCEDURE burn(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM txid_current();
        COMMIT;
    END LOOP;
END $$;
CREATE TABLE w (id int, body text) USING spindle WITH (events_per_spindle = 100);
CREATE INDEX w_id ON w (id);
INSERT INTO w SELECT g, 'event ' || g FROM generate_series(1, 250) g;
DELETE FROM w WHERE id % 3 = 0;
UPDATE w SET body = 'updated' WHERE id IN (10, 20);
});
$node->safe_psql('postgres',
	q{BEGIN; INSERT INTO w SELECT g, 'aborted' FROM generate_series(1001, 1005) g; ROLLBACK;});

my $rows_sql =
  q{SELECT count(*) || ':' || string_agg(id || '=' || body, ',' ORDER BY id) FROM w};
my $spindles_sql = q{
SELECT string_agg(spindle_no || ':' || state || ':' || events || ':' || purged_events, ',' ORDER BY spindle_no)
  FROM spindle.spindles WHERE relation = 'w'::regclass AND state <> 'ready'};
my $ages_sql = q{
SELECT max(age(c.relfrozenxid))
  FROM spindle.spindle_catalog s JOIN pg_class c ON c.oid = s.segment
 WHERE s.relation = 'w'::regclass AND s.dropped_at IS NULL};
# line pointers of every spindle of w: normal, normal and frozen, unused
my $slots_sql = q{
SELECT count(*) FILTER (WHERE p.lp_flags = 1) || ':' ||
       count(*) FILTER (WHERE p.lp_flags = 1 AND (p.t_infomask & 768) = 768) || ':' ||
       count(*) FILTER (WHERE p.lp_flags = 0) || ':' || count(*)
  FROM spindle.spindle_catalog s,
       generate_series(0, pg_relation_size(s.segment) / 8192 - 1) AS b(blk),
       heap_page_items(get_raw_page(s.segment::regclass::text, b.blk::int)) AS p
 WHERE s.relation = 'w'::regclass AND s.dropped_at IS NULL};

$node->append_conf('postgresql.conf', "spindle.enable_worker = on\n");
$node->reload;
ok( defined wait_for($node,
		'postgres', q{
SELECT count(*) = 1 FROM spindle.worker
 WHERE database = 'postgres' AND pid IS NOT NULL AND last_run IS NOT NULL},
		30, 100),
	'a worker serves postgres');
my $rows_before     = $node->safe_psql('postgres', $rows_sql);
my $spindles_before = $node->safe_psql('postgres', $spindles_sql);
is($spindles_before, '1:full:100:35,2:full:100:33,3:open:57:22',
	'spindles before');
like($node->safe_psql('postgres', $slots_sql),
	qr/^257:0:0:257$/, 'before: 257 slots, none frozen');

$node->safe_psql(
	'postgres', q{
CREATE TABLE frozen_before AS
SELECT s.segment, c.relfrozenxid::text::bigint AS relfrozenxid
  FROM spindle.spindle_catalog s JOIN pg_class c ON c.oid = s.segment
 WHERE s.relation = 'w'::regclass AND s.dropped_at IS NULL});

# Burn more transaction ids than autovacuum_freeze_max_age.
$node->safe_psql('postgres', 'SET synchronous_commit = off; CALL burn(110000)');
ok($node->safe_psql('postgres', 'SELECT age(min(relfrozenxid)::text::xid) FROM frozen_before') > 100000,
	'the spindles were older than autovacuum_freeze_max_age');

my $took = wait_for($node,
	'postgres', qq{
SELECT ($ages_sql) < 100000
   AND (SELECT bool_and(c.relfrozenxid::text::bigint > b.relfrozenxid)
          FROM frozen_before b JOIN pg_class c ON c.oid = b.segment)},
	60, 100);
ok(defined $took,
	'without any manual VACUUM, the relfrozenxid of every spindle advanced (anti-wraparound autovacuum)');
note(sprintf('after %.1f s', $took // -1));

is($node->safe_psql('postgres', $rows_sql),
	$rows_before, 'every event is still there');
is( $node->safe_psql(
		'postgres', q{
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) || ':' || string_agg(id || '=' || body, ',' ORDER BY id) FROM w WHERE id > 0}),
	$rows_before,
	'index scan agrees');
is( $node->safe_psql(
		'postgres', q{
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM w WHERE id IN (3, 6, 9, 1001, 1005)}),
	'0',
	'no index scan returns a purged or aborted event');
is($node->safe_psql('postgres', $spindles_sql),
	$spindles_before, 'the spindles\' counts are unchanged');
# 167 live events, all frozen; 257 slots, none unused
is($node->safe_psql('postgres', $slots_sql),
	'167:167:0:257', 'every live event frozen, no slot reclaimed');

ok( defined wait_for($node,
		'postgres',
		q{SELECT age(datfrozenxid) < 100000 FROM pg_database WHERE datname = current_database()},
		60, 100),
	'the database\'s datfrozenxid advances');

# New events take new slots.
$node->safe_psql('postgres',
	q{INSERT INTO w SELECT g, 'after' FROM generate_series(2001, 2010) g});
is( $node->safe_psql(
		'postgres',
		q{SELECT events FROM spindle.spindles WHERE relation = 'w'::regclass AND spindle_no = 3}),
	'67',
	'new events are appended to the open spindle');
is($node->safe_psql('postgres', 'SELECT count(*) = count(DISTINCT ctid) FROM w'),
	't', 'every event has its own TID');
is( $node->safe_psql(
		'postgres', q{
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM w WHERE id > 2000 OR id IN (3, 6, 9, 1001, 1005)}),
	'10',
	'index scan finds the new events and none of the purged ones');

# The spindles stay droppable once purged.
$node->safe_psql('postgres', 'DELETE FROM w WHERE id <= 100');
ok( defined wait_for($node,
		'postgres', q{
SELECT NOT EXISTS (SELECT 1 FROM spindle.spindles
                    WHERE relation = 'w'::regclass AND spindle_no = 1)},
		20, 100),
	'the worker drops a frozen spindle once it is purged');
is($node->safe_psql('postgres', 'SELECT count(*), sum(id) FROM w'),
	'110|37605', 'the other events are all there');

$node->stop;
done_testing();
