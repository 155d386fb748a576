# time_to_live applied by the worker alone: tables with time_to_live = '1s'
# are purged and their spindles dropped, no event younger than its TTL is
# ever purged, tables with a long or no TTL keep their events, ALTER TABLE
# SET (time_to_live) takes effect, and a database that gets the extension
# after its worker first looked is served once the launcher looks again.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;
use Time::HiRes qw(gettimeofday tv_interval usleep);

my $naptime_ms = 200;

my $node = PostgreSQL::Test::Cluster->new('ttl');
$node->init;
$node->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'spindle'
max_worker_processes = 16
spindle.enable_worker = on
spindle.naptime = ${naptime_ms}ms
});
$node->start;

# The worker of a database that has no extension exits and the launcher
# looks again only after 30 s; either way the worker must come within
# about that.
$node->safe_psql('postgres', 'CREATE EXTENSION spindle');
my $t_postgres = [gettimeofday];

# A database whose worker looks before the extension exists.
$node->safe_psql('postgres', 'CREATE DATABASE late');
usleep(1_500_000);    # several naptimes: its worker has looked and left
$node->safe_psql(
	'late', q{
CREATE EXTENSION spindle;
CREATE TABLE lt (id int) USING spindle WITH (time_to_live = '1s', events_per_spindle = 10);
INSERT INTO lt SELECT generate_series(1, 25);
});
my $t_late = [gettimeofday];

ok( defined wait_for($node,
		'postgres', q{
SELECT count(*) = 1 FROM spindle.worker
 WHERE database = 'postgres' AND pid IS NOT NULL AND last_run IS NOT NULL},
		45),
	'a worker serves postgres');
my $took = tv_interval($t_postgres);
note(sprintf('worker of postgres after %.1f s', $took));
ok($took < 40, 'within the 30 s recheck');

$node->safe_psql(
	'postgres', q{
CREATE TABLE ttl1 (id int, ts timestamptz DEFAULT clock_timestamp())
    USING spindle WITH (time_to_live = '1s', events_per_spindle = 10);
CREATE INDEX ttl1_id ON ttl1 (id);
CREATE TABLE ttl1_audit (id int, ts timestamptz);
CREATE TABLE hour (id int) USING spindle
    WITH (time_to_live = '1 hour', events_per_spindle = 10);
CREATE TABLE nottl (id int) USING spindle WITH (events_per_spindle = 10);
CREATE TABLE later (id int) USING spindle WITH (events_per_spindle = 10);
CREATE UNLOGGED TABLE ul (id int) USING spindle
    WITH (time_to_live = '1s', events_per_spindle = 5);
INSERT INTO ul SELECT generate_series(1, 12);
});
is( $node->safe_psql(
		'postgres', q{
SELECT string_agg(relation || '=' || coalesce(time_to_live::text, '-'), ',' ORDER BY relation::text)
  FROM spindle.tables}),
	'hour=01:00:00,later=-,nottl=-,ttl1=00:00:01,ul=00:00:01',
	'time_to_live of each table');

# A steady producer for a few seconds; between inserts, check that no
# event younger than 1 s is missing.  (An event is missing from a snapshot
# only if its purge committed before the snapshot, and that purge's cutoff
# was more than ttl before clock_timestamp().)
my $young_missing = 0;
my $purged_seen = 0;
for my $i (1 .. 40)
{
	my $lo = 2 * $i - 1;
	my $hi = 2 * $i;
	$node->safe_psql(
		'postgres', qq{
WITH ins AS (INSERT INTO ttl1 (id) SELECT generate_series($lo, $hi) RETURNING id, ts)
INSERT INTO ttl1_audit SELECT id, ts FROM ins;
INSERT INTO hour SELECT generate_series($lo, $hi);
INSERT INTO nottl SELECT generate_series($lo, $hi);
INSERT INTO later SELECT generate_series($lo, $hi);
});
	my ($missing_young, $missing) = split /\|/,
	  $node->safe_psql(
		'postgres', q{
SELECT count(*) FILTER (WHERE a.ts > clock_timestamp() - interval '1 s'), count(*)
  FROM ttl1_audit a WHERE NOT EXISTS (SELECT 1 FROM ttl1 t WHERE t.id = a.id)});
	$young_missing += $missing_young;
	$purged_seen = $missing if $missing > $purged_seen;
	usleep(50_000);
}
is($young_missing, 0, 'no event younger than its time_to_live was purged');
ok($purged_seen > 0, 'the worker purged events while the producer ran');
note("purged while producing: $purged_seen of 80");

my $elapsed = wait_for($node,
	'postgres', q{
SELECT NOT EXISTS (SELECT 1 FROM ttl1)
   AND NOT EXISTS (SELECT 1 FROM spindle.spindles
                    WHERE relation = 'ttl1'::regclass AND state = 'full')},
	15);
ok(defined $elapsed, "time_to_live = '1s': every event purged and every full spindle dropped");
note(sprintf('%.2f s after the last insert', $elapsed // -1));
is( $node->safe_psql(
		'postgres', q{
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM ttl1 WHERE id > 0}),
	'0',
	'no index scan returns a purged event');
is( $node->safe_psql(
		'postgres',
		q{SELECT spindles_dropped >= 8 FROM spindle.tables WHERE relation = 'ttl1'::regclass}),
	't',
	'ttl1: its full spindles were dropped');

is($node->safe_psql('postgres', 'SELECT count(*), sum(id) FROM hour'),
	'80|3240', "time_to_live = '1 hour': nothing purged");
is( $node->safe_psql(
		'postgres',
		q{SELECT sum(purged_events) FROM spindle.spindles WHERE relation = 'hour'::regclass}),
	'0',
	"time_to_live = '1 hour': no purged event");
is($node->safe_psql('postgres', 'SELECT count(*), sum(id) FROM nottl'),
	'80|3240', 'no time_to_live: nothing purged');
is($node->safe_psql('postgres', 'SELECT count(*), sum(id) FROM later'),
	'80|3240', 'no time_to_live yet: nothing purged');

# Unlogged: purged a full spindle at a time.
ok( defined wait_for($node,
		'postgres', q{
SELECT NOT EXISTS (SELECT 1 FROM ul WHERE id <= 10)
   AND NOT EXISTS (SELECT 1 FROM spindle.spindles
                    WHERE relation = 'ul'::regclass AND state = 'full')},
		15),
	'unlogged table: the events of its full spindles purged and the spindles dropped');

# ALTER TABLE SET (time_to_live) applies from the next round.
$node->safe_psql('postgres', q{ALTER TABLE later SET (time_to_live = '1s')});
ok( defined wait_for($node,
		'postgres', q{
SELECT NOT EXISTS (SELECT 1 FROM later)
   AND NOT EXISTS (SELECT 1 FROM spindle.spindles
                    WHERE relation = 'later'::regclass AND state = 'full')},
		15),
	'after ALTER TABLE SET (time_to_live = 1s) the worker purges and drops');
is($node->safe_psql('postgres', 'SELECT count(*) FROM nottl'),
	'80', 'the table without time_to_live still has every event');

is( $node->safe_psql(
		'postgres',
		q{SELECT last_error IS NULL FROM spindle.worker WHERE database = 'postgres'}),
	't',
	'no error in the worker');

# The database that got the extension late.
ok( defined wait_for($node,
		'postgres', q{
SELECT count(*) = 1 FROM spindle.worker
 WHERE database = 'late' AND pid IS NOT NULL AND last_run IS NOT NULL},
		45),
	'a worker serves the database that got the extension after its worker looked');
$took = tv_interval($t_late);
note(sprintf('worker of late after %.1f s', $took));
ok($took < 40, 'within the 30 s recheck');
ok( defined wait_for($node,
		'late', q{
SELECT NOT EXISTS (SELECT 1 FROM lt)
   AND NOT EXISTS (SELECT 1 FROM spindle.spindles
                    WHERE relation = 'lt'::regclass AND state = 'full')},
		15),
	'and applies its time_to_live');

$node->stop;
done_testing();
