# The spindle background worker, with nobody calling drop_spindles():
# full and purged spindles go within a few naptimes, a spindle that still
# holds one live event or that an older snapshot can still see stays, every
# table keeps a ready spindle after its open one, CREATE DATABASE from a
# template it serves and DROP DATABASE of a database it serves complete at
# once, and a worker killed with SIGKILL comes back (crash restart) without
# losing a committed event.
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

my $node = PostgreSQL::Test::Cluster->new('worker');
$node->init;
$node->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'spindle'
max_worker_processes = 16
spindle.naptime = ${naptime_ms}ms
# PostgreSQL::Test::Cluster turns it off; the server default is on
restart_after_crash = on
# on below, once the extension exists: a worker that finds no extension
# looks again only after 30 s
spindle.enable_worker = off
});
$node->start;

# Wait until the worker of $db has finished $n more rounds.
sub wait_rounds
{
	my ($db, $n) = @_;
	my $since = $node->safe_psql('postgres',
		qq{SELECT coalesce(max(last_run), '-infinity') FROM spindle.worker WHERE database = '$db'}
	);
	my $ms = $n * $naptime_ms;
	ok( defined wait_for($node,
			'postgres',
			qq{SELECT coalesce(max(last_run), '-infinity') > '$since'::timestamptz + interval '$ms ms'
				 FROM spindle.worker WHERE database = '$db'},
			30),
		"worker of $db ran $n more rounds");
}

# The GUCs
is( $node->safe_psql(
		'postgres', q{
SELECT string_agg(name || ':' || context || ':' || coalesce(unit, '') || ':' || boot_val, ',' ORDER BY name)
  FROM pg_settings
 WHERE name IN ('spindle.naptime', 'spindle.enable_worker', 'spindle.max_workers')}),
	'spindle.enable_worker:sighup::on,spindle.max_workers:postmaster::4,spindle.naptime:sighup:ms:1000',
	'GUCs: naptime (ms, 1s, sighup), enable_worker (on, sighup), max_workers (4, postmaster)'
);

$node->safe_psql('postgres',  'CREATE EXTENSION spindle');
$node->safe_psql('template1', 'CREATE EXTENSION spindle');

# With the worker off: a launcher, no worker.
ok( defined wait_for($node,
		'postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'spindle launcher'},
		30),
	'the launcher runs');
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'spindle worker'}),
	'0',
	'no worker while spindle.enable_worker is off');
is($node->safe_psql('postgres', 'SELECT count(*) FROM spindle.worker'),
	'0', 'spindle.worker is empty while the worker is off');

# Tables made before the worker starts; nobody calls drop_spindles().
$node->safe_psql(
	'postgres', q{
CREATE TABLE purged (id int) USING spindle WITH (events_per_spindle = 10);
INSERT INTO purged SELECT generate_series(1, 25);
DELETE FROM purged;
CREATE TABLE onelive (id int, body text) USING spindle WITH (events_per_spindle = 10);
CREATE INDEX onelive_id ON onelive (id);
INSERT INTO onelive SELECT g, 'event ' || g FROM generate_series(1, 20) g;
DELETE FROM onelive WHERE id <> 5;
});

$node->append_conf('postgresql.conf', "spindle.enable_worker = on\n");
$node->reload;

ok( defined wait_for($node,
		'postgres',
		q{SELECT count(*) = 1 FROM spindle.worker
		   WHERE database = 'postgres' AND pid IS NOT NULL AND last_run IS NOT NULL},
		30),
	'after the reload a worker serves database postgres');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM pg_stat_activity a JOIN spindle.worker w ON w.pid = a.pid
 WHERE a.backend_type = 'spindle worker' AND a.application_name = 'spindle worker'
   AND a.datname = 'postgres' AND w.database = 'postgres'}),
	'1',
	'the worker is a "spindle worker" backend connected to its database');

my $elapsed = wait_for($node,
	'postgres', q{
SELECT NOT EXISTS (SELECT 1 FROM spindle.spindles
                    WHERE relation = 'purged'::regclass AND state = 'full')},
	10);
ok(defined $elapsed, 'full and purged spindles of "purged" dropped by the worker');

is( $node->safe_psql(
		'postgres', q{
SELECT string_agg(spindle_no || ':' || state || ':' || events || ':' || purged_events, ',' ORDER BY spindle_no)
  FROM spindle.spindles WHERE relation = 'purged'::regclass AND state <> 'ready'}),
	'3:open:5:5',
	'the purged spindle that is not full stays');
is( $node->safe_psql(
		'postgres',
		q{SELECT spindles_dropped FROM spindle.tables WHERE relation = 'purged'::regclass}),
	'2',
	'spindle.tables counts the dropped spindles');

# onelive: spindle 1 keeps its one live event, spindle 2 goes.
ok( defined wait_for($node,
		'postgres', q{
SELECT NOT EXISTS (SELECT 1 FROM spindle.spindles
                    WHERE relation = 'onelive'::regclass AND spindle_no = 2)},
		10),
	'onelive: the full, purged spindle 2 dropped');
wait_rounds('postgres', 3);
is( $node->safe_psql(
		'postgres', q{
SELECT string_agg(spindle_no || ':' || state || ':' || events || ':' || purged_events, ',' ORDER BY spindle_no)
  FROM spindle.spindles WHERE relation = 'onelive'::regclass AND spindle_no = 1}),
	'1:full:10:9',
	'a full spindle with one live event stays');
is( $node->safe_psql(
		'postgres', q{
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT string_agg(id || ':' || body, ',') FROM onelive WHERE id > 0}),
	'5:event 5',
	'its live event is still there, by index scan');
is($node->safe_psql('postgres', 'SELECT string_agg(id::text, \',\') FROM onelive'),
	'5', 'and by sequential scan');

# Steady state: a table filled and emptied while the worker runs.
$node->safe_psql(
	'postgres', q{
CREATE TABLE steady (id int) USING spindle WITH (events_per_spindle = 100);
INSERT INTO steady SELECT generate_series(1, 1050);
});
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM spindle.spindles WHERE relation = 'steady'::regclass AND state = 'full'}),
	'10',
	'steady: 10 full spindles');
$node->safe_psql('postgres', 'DELETE FROM steady WHERE id <= 1000');
$elapsed = wait_for($node,
	'postgres', q{
SELECT NOT EXISTS (SELECT 1 FROM spindle.spindles
                    WHERE relation = 'steady'::regclass AND state = 'full')},
	10);
ok(defined $elapsed, 'steady: the 10 full, purged spindles dropped');
note(sprintf('dropped after %.2f s', $elapsed // -1));
ok(defined $elapsed && $elapsed < 25 * $naptime_ms / 1000.0,
	'steady: dropped within a few naptimes');
is($node->safe_psql('postgres', 'SELECT count(*), min(id), max(id) FROM steady'),
	'50|1001|1050', 'steady: the live events are all there');

# Every table gets one ready spindle, after all its other spindles.
ok( defined wait_for($node,
		'postgres', q{
SELECT bool_and(ready = 1 AND last_ready > coalesce(last_other, 0))
  FROM spindle.tables t
  LEFT JOIN (SELECT relation,
                    count(*) FILTER (WHERE state = 'ready') AS ready,
                    max(spindle_no) FILTER (WHERE state = 'ready') AS last_ready,
                    max(spindle_no) FILTER (WHERE state <> 'ready') AS last_other
               FROM spindle.spindles GROUP BY relation) s
         ON s.relation = t.relation},
		10),
	'every table has one ready spindle after its open one');
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM spindle.spindles WHERE state = 'ready' AND (events <> 0 OR purged_events <> 0)}),
	'0',
	'ready spindles have no events');

# Invariant 2 through the worker: a full, purged spindle that an older
# snapshot can still see stays until that snapshot is gone.
$node->safe_psql(
	'postgres', q{
CREATE TABLE snap (id int) USING spindle WITH (events_per_spindle = 10);
CREATE INDEX snap_id ON snap (id);
INSERT INTO snap SELECT generate_series(1, 25);
});
my $rr = $node->background_psql('postgres');
$rr->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
is($rr->query_safe('SELECT count(*) FROM snap'), '25', 'old snapshot taken');
$node->safe_psql('postgres', 'DELETE FROM snap');
wait_rounds('postgres', 4);
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM spindle.spindles WHERE relation = 'snap'::regclass AND state = 'full'}),
	'2',
	'full, purged spindles an older snapshot can see are kept');
is($rr->query_safe('SELECT count(*), sum(id) FROM snap'),
	'25|325', 'the old snapshot still sees every event');
is( $rr->query_safe(
		'SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SELECT count(*), sum(id) FROM snap WHERE id > 0'
	),
	'25|325',
	'the old snapshot sees every event by index scan');
$rr->query_safe('COMMIT');
$rr->quit;
ok( defined wait_for($node,
		'postgres', q{
SELECT NOT EXISTS (SELECT 1 FROM spindle.spindles
                    WHERE relation = 'snap'::regclass AND state = 'full')},
		10),
	'dropped once the old snapshot is gone');

# The view
is( $node->safe_psql(
		'postgres', q{
SELECT state IN ('idle', 'running'), last_run > now() - interval '10 s',
       spindles_dropped >= 15, bytes_freed > 0, last_error IS NULL
  FROM spindle.worker WHERE database = 'postgres'}),
	't|t|t|t|t',
	'spindle.worker: state, last_run, spindles_dropped, bytes_freed, last_error');

# CREATE DATABASE from a template the worker serves, then DROP DATABASE of
# a database the worker serves: neither waits for the worker.
ok( defined wait_for($node,
		'postgres',
		q{SELECT count(*) = 1 FROM spindle.worker WHERE database = 'template1' AND pid IS NOT NULL},
		30),
	'a worker serves template1');
for my $round (1 .. 3)
{
	my $t0 = [gettimeofday];
	my ($ret, $out, $err) =
	  $node->psql('postgres', "CREATE DATABASE dropme$round");
	my $took = tv_interval($t0);
	is($ret, 0, "CREATE DATABASE from template1 succeeds ($round)")
	  or diag($err);
	ok($took < 5, "CREATE DATABASE took under 5 s ($round)");
	note(sprintf('CREATE DATABASE took %.2f s', $took));

	$node->safe_psql(
		"dropme$round", q{
CREATE TABLE q (id int) USING spindle WITH (events_per_spindle = 5);
INSERT INTO q SELECT generate_series(1, 50);
DELETE FROM q WHERE id % 2 = 0;
});
	ok( defined wait_for($node,
			'postgres', qq{
SELECT count(*) = 1 FROM spindle.worker w
  JOIN pg_stat_activity a ON a.pid = w.pid AND a.datname = 'dropme$round'
 WHERE w.database = 'dropme$round' AND w.last_run IS NOT NULL},
			30),
		"a worker is active in dropme$round");
	# keep it busy: spindles to drop on its next round
	$node->safe_psql("dropme$round", 'DELETE FROM q');

	$t0 = [gettimeofday];
	($ret, $out, $err) = $node->psql('postgres', "DROP DATABASE dropme$round");
	$took = tv_interval($t0);
	is($ret, 0, "DROP DATABASE of a database the worker serves succeeds ($round)")
	  or diag($err);
	ok($took < 5, "DROP DATABASE took under 5 s ($round)");
	note(sprintf('DROP DATABASE took %.2f s', $took));
	is( $node->safe_psql(
			'postgres',
			"SELECT count(*) FROM pg_database WHERE datname = 'dropme$round'"),
		'0',
		"dropme$round is gone");
}
ok( defined wait_for($node,
		'postgres', q{
SELECT NOT EXISTS (SELECT 1 FROM spindle._worker_info() w
                    WHERE NOT EXISTS (SELECT 1 FROM pg_database d WHERE d.oid = w.database))},
		10),
	'no worker left for the dropped databases');

# SIGKILL of the worker: the postmaster restarts all backends (crash
# recovery); no committed event is lost and a new worker comes back.
$node->safe_psql(
	'postgres', q{
CREATE TABLE keep (id int, body text) USING spindle WITH (events_per_spindle = 10);
CREATE INDEX keep_id ON keep (id);
INSERT INTO keep SELECT g, 'event ' || g FROM generate_series(1, 95) g;
DELETE FROM keep WHERE id <= 20 OR id % 7 = 0;
});
my $keep_sql = q{SELECT count(*) || ':' || string_agg(id || '=' || body, ',' ORDER BY id) FROM keep};
my $keep_before = $node->safe_psql('postgres', $keep_sql);
my $old_pid = $node->safe_psql('postgres',
	q{SELECT pid FROM spindle.worker WHERE database = 'postgres'});
like($old_pid, qr/^\d+$/, 'worker pid');
my $log_offset = -s $node->logfile;

is(kill('KILL', $old_pid), 1, 'SIGKILL sent to the worker');

# The server goes through crash recovery; wait until it takes queries.
$node->wait_for_log(qr/all server processes terminated; reinitializing/,
	$log_offset);
$node->poll_query_until('postgres', 'SELECT 1', '1')
  or die 'server did not come back';
ok( $node->log_contains(
		qr/background worker "spindle worker" \(PID $old_pid\) was terminated by signal 9/,
		$log_offset),
	'the postmaster saw the worker die');
is($node->safe_psql('postgres', $keep_sql),
	$keep_before, 'no committed event lost after the crash restart');
is( $node->safe_psql(
		'postgres', q{
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) || ':' || string_agg(id || '=' || body, ',' ORDER BY id) FROM keep WHERE id > 0}),
	$keep_before,
	'index scan agrees after the crash restart');
ok( defined wait_for($node,
		'postgres', qq{
SELECT count(*) = 1 FROM spindle.worker
 WHERE database = 'postgres' AND pid IS NOT NULL AND pid <> $old_pid AND last_run IS NOT NULL},
		30),
	'a new worker serves the database again');
$node->safe_psql('postgres', 'DELETE FROM keep WHERE id <= 90');
ok( defined wait_for($node,
		'postgres', q{
SELECT NOT EXISTS (SELECT 1 FROM spindle.spindles
                    WHERE relation = 'keep'::regclass AND state = 'full')},
		10),
	'after the restart the worker drops newly purged spindles');
is($node->safe_psql('postgres', 'SELECT string_agg(id::text, \',\' ORDER BY id) FROM keep'),
	'92,93,94,95', 'the live events are there');

# Shutdown does not wait for the worker.
my $t0 = [gettimeofday];
$node->stop('fast');
my $took = tv_interval($t0);
ok($took < 5, 'fast shutdown with the worker running takes under 5 s');
note(sprintf('shutdown took %.2f s', $took));

done_testing();
