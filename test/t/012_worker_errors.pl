# The worker survives an error in one table (it logs it with the table's
# name, shows it in spindle.worker and keeps serving the other tables),
# follows spindle.enable_worker and spindle.naptime on reload, uses next
# to no CPU when idle, and never blocks DROP TABLE, ALTER EXTENSION UPDATE
# or DROP EXTENSION.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;
use POSIX ();
use Time::HiRes qw(gettimeofday tv_interval usleep);

my $node = PostgreSQL::Test::Cluster->new('errors');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle'
max_worker_processes = 16
spindle.naptime = 200ms
# on below, once the extension exists (a worker that finds no extension
# looks again only after 30 s)
spindle.enable_worker = off
});
$node->start;

sub set_worker
{
	my ($conf) = @_;
	$node->append_conf('postgresql.conf', "$conf\n");
	$node->reload;
}

$node->safe_psql(
	'postgres', q{
CREATE EXTENSION spindle;
CREATE TABLE good (id int) USING spindle WITH (events_per_spindle = 5);
INSERT INTO good SELECT generate_series(1, 12);
});
set_worker('spindle.enable_worker = on');
ok( defined wait_for($node,
		'postgres', q{
SELECT count(*) = 1 FROM spindle.worker
 WHERE database = 'postgres' AND pid IS NOT NULL AND last_run IS NOT NULL},
		30),
	'a worker serves postgres');

# An error in one table: "bad" is locked, so the worker cannot open it.
# Its events expire meanwhile (the lock is taken well within their time to
# live); the locking transaction has no xid and no snapshot, so it does
# not keep the spindles of "good" from being dropped.
my $log_offset = -s $node->logfile;
$node->safe_psql(
	'postgres', q{
CREATE TABLE bad (id int) USING spindle
    WITH (events_per_spindle = 5, time_to_live = '1s');
INSERT INTO bad SELECT generate_series(1, 12);
});
my $locker = $node->background_psql('postgres');
$locker->query_safe('BEGIN');
$locker->query_safe('LOCK TABLE bad IN ACCESS EXCLUSIVE MODE');
$node->safe_psql('postgres', 'DELETE FROM good');

# (spindle.spindles would wait for the lock on "bad": read the catalog)
ok( defined wait_for($node,
		'postgres', q{
SELECT NOT EXISTS (SELECT 1 FROM spindle.spindle_catalog
                    WHERE relation = 'good'::regclass AND spindle_no <= 2
                      AND dropped_at IS NULL)},
		20),
	'the worker keeps serving the other tables');
ok( defined wait_for($node,
		'postgres',
		q{SELECT last_error IS NOT NULL FROM spindle.worker WHERE database = 'postgres'},
		20),
	'spindle.worker shows the error');
my $last_error = $node->safe_psql('postgres',
	q{SELECT last_error FROM spindle.worker WHERE database = 'postgres'});
note("last_error: $last_error");
like($last_error, qr/\bbad\b/, 'last_error names the table');
$node->wait_for_log(qr/spindle worker: maintenance of table .* failed/,
	$log_offset);
my $log = slurp_file($node->logfile, $log_offset);
my ($log_line) = $log =~ /(spindle worker: maintenance of table .* failed[^\n]*)/;
note("log: $log_line");
like($log_line, qr/maintenance of table (public\.)?"?bad"? failed/,
	'the log names the table');
ok( defined wait_for($node,
		'postgres', q{
SELECT pid IS NOT NULL FROM spindle.worker WHERE database = 'postgres'},
		5),
	'the worker is still running');

$locker->query_safe('COMMIT');
$locker->quit;
ok( defined wait_for($node,
		'postgres', q{
SELECT NOT EXISTS (SELECT 1 FROM bad)
   AND NOT EXISTS (SELECT 1 FROM spindle.spindles
                    WHERE relation = 'bad'::regclass AND state = 'full')},
		20),
	'once the lock is gone the table is served again (purged, dropped)');

# spindle.enable_worker off and on again, by reload.
set_worker('spindle.enable_worker = off');
ok( defined wait_for($node,
		'postgres',
		q{SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'spindle worker'},
		10),
	'enable_worker = off: the worker stops');
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM spindle.worker WHERE pid IS NOT NULL}),
	'0',
	'spindle.worker lists no running worker');
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'spindle launcher'}),
	'1',
	'the launcher stays');
$node->safe_psql(
	'postgres', q{
INSERT INTO good SELECT generate_series(101, 110);
DELETE FROM good;
});
usleep(1_000_000);
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM spindle.spindles WHERE relation = 'good'::regclass AND state = 'full'}),
	'2',
	'with the worker off nothing is dropped');
set_worker('spindle.enable_worker = on');
ok( defined wait_for($node,
		'postgres', q{
SELECT NOT EXISTS (SELECT 1 FROM spindle.spindles
                    WHERE relation = 'good'::regclass AND state = 'full')},
		20),
	'enable_worker = on: the worker is back and drops');

# Idle: some tables, nothing to do, naptime back at its default of 1 s.
$node->safe_psql('postgres',
	join('', map { "CREATE TABLE idle$_ (id int) USING spindle; INSERT INTO idle$_ VALUES (1);\n" } 1 .. 10));
set_worker('spindle.naptime = 1s');
is($node->safe_psql('postgres', 'SHOW spindle.naptime'), '1s', 'naptime reloaded');
my $worker_pid = $node->safe_psql('postgres',
	q{SELECT pid FROM spindle.worker WHERE database = 'postgres'});
my $launcher_pid = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'spindle launcher'});
like($worker_pid,   qr/^\d+$/, 'worker pid');
like($launcher_pid, qr/^\d+$/, 'launcher pid');
usleep(2_000_000);    # the ready spindles are made, the reload seen

sub cpu_ticks
{
	my ($pid) = @_;
	my $stat = slurp_file("/proc/$pid/stat");
	$stat =~ s/^.*\) //s;    # after the command name
	my @f = split / /, $stat;
	return $f[11] + $f[12];  # utime + stime (fields 14 and 15)
}
SKIP:
{
	skip 'no /proc', 3 unless -r "/proc/$worker_pid/stat";
	my $hz = POSIX::sysconf(POSIX::_SC_CLK_TCK()) || 100;
	my $last_run = $node->safe_psql('postgres',
		q{SELECT last_run FROM spindle.worker WHERE database = 'postgres'});
	my ($w0, $l0, $t0) = (cpu_ticks($worker_pid), cpu_ticks($launcher_pid), [gettimeofday]);
	usleep(5_000_000);
	my ($w1, $l1, $wall) = (cpu_ticks($worker_pid), cpu_ticks($launcher_pid), tv_interval($t0));
	my $wcpu = ($w1 - $w0) / $hz;
	my $lcpu = ($l1 - $l0) / $hz;
	note(sprintf('idle for %.1f s: worker %.2f s CPU, launcher %.2f s CPU', $wall, $wcpu, $lcpu));
	is( $node->safe_psql(
			'postgres',
			qq{SELECT last_run > '$last_run'::timestamptz FROM spindle.worker WHERE database = 'postgres'}),
		't',
		'the worker ran rounds while idle');
	ok($wcpu < 0.05 * $wall, 'idle worker uses under 5% of a CPU');
	ok($lcpu < 0.05 * $wall, 'launcher uses under 5% of a CPU');
}
set_worker('spindle.naptime = 200ms');

# DROP TABLE, ALTER EXTENSION UPDATE and DROP EXTENSION do not wait for the
# worker.
$node->safe_psql(
	'postgres', q{
CREATE TABLE gone (id int) USING spindle WITH (events_per_spindle = 5);
INSERT INTO gone SELECT generate_series(1, 50);
DELETE FROM gone WHERE id <= 40;
});
usleep(300_000);
for my $cmd ('DROP TABLE gone', 'ALTER EXTENSION spindle UPDATE',
	'DROP EXTENSION spindle CASCADE')
{
	my $t0 = [gettimeofday];
	my ($ret, $out, $err) = $node->psql('postgres', $cmd);
	my $took = tv_interval($t0);
	is($ret, 0, "$cmd succeeds") or diag($err);
	ok($took < 5, "$cmd takes under 5 s");
	note(sprintf('%s took %.2f s', $cmd, $took));
}
$log_offset = -s $node->logfile;
ok( defined wait_for($node,
		'postgres', q{
SELECT count(*) = 0 FROM pg_stat_activity
 WHERE backend_type = 'spindle worker' AND datname = 'postgres'},
		10),
	'without the extension the worker leaves');
usleep(1_000_000);
$log = slurp_file($node->logfile, $log_offset);
unlike($log, qr/spindle worker: maintenance/, 'and logs no error');
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'spindle launcher'}),
	'1',
	'the launcher stays');

$node->stop;
done_testing();
