# The worker serves any number of databases: with 18 databases besides
# postgres and template1, and the extension only in the last two, both are
# served (listed in spindle.worker, their full and purged spindles dropped)
# within a bounded time, while spindle.max_workers (2) workers take turns.
# Databases without the extension are listed nowhere; one that gets the
# extension later is served at once, not after the 30 s recheck.  DROP
# DATABASE of a database without the extension and of a served one stays
# quick, and the other served database goes on being served.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;
use Time::HiRes qw(gettimeofday tv_interval usleep);

my $ndb = 18;

my $node = PostgreSQL::Test::Cluster->new('many');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle'
max_worker_processes = 16
spindle.naptime = 200ms
spindle.max_workers = 2
fsync = off
});
$node->start;

my @dbs = map { sprintf('db%02d', $_) } 1 .. $ndb;
$node->safe_psql('postgres', "CREATE DATABASE $_") for @dbs;
my @served = @dbs[ $ndb - 2 .. $ndb - 1 ];    # db17, db18

for my $db (@served)
{
	$node->safe_psql(
		$db, q{
CREATE EXTENSION spindle;
CREATE TABLE q (id int) USING spindle WITH (events_per_spindle = 5);
INSERT INTO q SELECT generate_series(1, 23);
DELETE FROM q;
});
}
my $t0 = [gettimeofday];

my $list = join(',', map { "'$_'" } @served);
ok( defined wait_for($node,
		$served[0], qq{
SELECT count(*) = 2 FROM spindle.worker
 WHERE database IN ($list) AND last_run IS NOT NULL},
		60),
	"both $served[0] and $served[1] appear in spindle.worker");
note(sprintf('both served after %.1f s', tv_interval($t0)));

for my $db (@served)
{
	ok( defined wait_for($node,
			$db, q{
SELECT NOT EXISTS (SELECT 1 FROM spindle.spindles
                    WHERE relation = 'q'::regclass AND state = 'full')},
			60),
		"$db: the full, purged spindles are dropped by the worker");
	is( $node->safe_psql(
			$db,
			q{SELECT spindles_dropped FROM spindle.tables WHERE relation = 'q'::regclass}),
		'4',
		"$db: spindle.tables counts 4 dropped spindles");
}
note(sprintf('spindles dropped after %.1f s', tv_interval($t0)));

is( $node->safe_psql(
		$served[0],
		q{SELECT string_agg(database, ',' ORDER BY database) FROM spindle.worker}),
	join(',', @served),
	'spindle.worker lists the served databases only');
is( $node->safe_psql(
		$served[0], qq{
SELECT count(*) = 2 AND bool_and(spindles_dropped = 4 AND bytes_freed > 0)
  FROM spindle.worker WHERE database IN ($list)}),
	't',
	'spindle.worker counts what each worker dropped');

# A database without the extension, looked at by the launcher already,
# that gets it now: served at once (CREATE EXTENSION wakes the launcher).
usleep(2_000_000);    # ten naptimes: every database has been looked at
$node->safe_psql(
	'db05', q{
CREATE EXTENSION spindle;
CREATE TABLE q (id int) USING spindle WITH (events_per_spindle = 5);
INSERT INTO q SELECT generate_series(1, 12);
DELETE FROM q;
});
$t0 = [gettimeofday];
ok( defined wait_for($node,
		'db05', q{
SELECT NOT EXISTS (SELECT 1 FROM spindle.spindles
                    WHERE relation = 'q'::regclass AND state = 'full')
   AND EXISTS (SELECT 1 FROM spindle.worker WHERE database = 'db05')},
		60),
	'db05: served once it has the extension');
my $took = tv_interval($t0);
note(sprintf('db05 served after %.1f s', $took));
ok($took < 15, 'db05: served well within the 30 s recheck');

# DROP DATABASE: of a database without the extension, and of a served one.
for my $db ('db03', $served[1])
{
	my $t = [gettimeofday];
	my ($ret, $out, $err) = $node->psql('postgres', "DROP DATABASE $db");
	my $dt = tv_interval($t);
	is($ret, 0, "DROP DATABASE $db succeeds") or diag($err);
	ok($dt < 5, "DROP DATABASE $db took under 5 s");
	note(sprintf('DROP DATABASE %s took %.2f s', $db, $dt));
}
ok( defined wait_for($node,
		$served[0], qq{
SELECT NOT EXISTS (SELECT 1 FROM spindle._worker_info() w
                    WHERE NOT EXISTS (SELECT 1 FROM pg_database d WHERE d.oid = w.database))},
		10),
	'no slot left for the dropped databases');

# The remaining database is still served.
$node->safe_psql(
	$served[0], q{
INSERT INTO q SELECT generate_series(100, 111);
DELETE FROM q;
});
ok( defined wait_for($node,
		$served[0], q{
SELECT NOT EXISTS (SELECT 1 FROM spindle.spindles
                    WHERE relation = 'q'::regclass AND state = 'full')},
		60),
	"$served[0]: still served after the drops");

# A new database with the extension, after all that.
$node->safe_psql('postgres', 'CREATE DATABASE db19');
$node->safe_psql(
	'db19', q{
CREATE EXTENSION spindle;
CREATE TABLE q (id int) USING spindle WITH (events_per_spindle = 5);
INSERT INTO q SELECT generate_series(1, 12);
DELETE FROM q;
});
ok( defined wait_for($node,
		'db19', q{
SELECT NOT EXISTS (SELECT 1 FROM spindle.spindles
                    WHERE relation = 'q'::regclass AND state = 'full')},
		60),
	'db19: a database created later is served');
is( $node->safe_psql(
		'db19',
		q{SELECT string_agg(database, ',' ORDER BY database) FROM spindle.worker}),
	"db05,db17,db19",
	'spindle.worker lists db05, db17 and db19');

# Three served databases, two workers: they take turns, each is served,
# and never more than two workers run at once.
my $max_seen = 0;
for my $db ('db05', 'db17', 'db19')
{
	$node->safe_psql(
		$db, q{
INSERT INTO q SELECT generate_series(200, 211);
DELETE FROM q;
});
}
for my $db ('db05', 'db17', 'db19')
{
	ok( defined wait_for($node,
			$db, q{
SELECT NOT EXISTS (SELECT 1 FROM spindle.spindles
                    WHERE relation = 'q'::regclass AND state = 'full')},
			60),
		"$db: served in turn with two workers");
}
for (1 .. 40)
{
	my $n = $node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'spindle worker'});
	$max_seen = $n if $n > $max_seen;
	usleep(50_000);
}
ok($max_seen <= 2, "at most spindle.max_workers workers at once (saw $max_seen)");

# More served databases than shared slots (spindle.max_workers * 4 = 8):
# eleven databases with the extension.  Each is served in turn, and when
# it is listed its counters are its own, kept while it had no slot.
my @more = map { sprintf('db%02d', $_) } 6 .. 13;
for my $db (@more)
{
	$node->safe_psql(
		$db, q{
CREATE EXTENSION spindle;
CREATE TABLE q (id int) USING spindle WITH (events_per_spindle = 5);
INSERT INTO q SELECT generate_series(1, 12);
DELETE FROM q;
});
}
for my $db (@more, 'db05', 'db17', 'db19')
{
	ok( defined wait_for($node,
			$db, q{
SELECT NOT EXISTS (SELECT 1 FROM spindle.spindles
                    WHERE relation = 'q'::regclass AND state = 'full')},
			60),
		"$db: served among eleven databases with eight slots");
}
for my $db (@more, 'db05', 'db17', 'db19')
{
	ok( defined wait_for($node,
			$db, q{
SELECT spindles_dropped = (SELECT sum(spindles_dropped) FROM spindle.tables)
  FROM spindle.worker WHERE database = current_database()},
			60),
		"$db: listed in spindle.worker with its own counters");
}
is( $node->safe_psql('db05', q{SELECT count(*) <= 8 FROM spindle._worker_info()}),
	't', 'no more slots than spindle.max_workers * 4');

$node->stop('fast');
done_testing();
