# The disk alarm (spindle.disk_free_limit, docs/design.md "Disk alarm") on
# a small filesystem of its own (scripts/test.sh mounts an 8 MB tmpfs at
# /mnt/spindle-small when it runs as root; SPINDLE_SMALL_DIR names
# another one), holding a tablespace with a queue and a spindle table.
# With spindle.disk_free_limit = 4MB and a filler file leaving 1.5 MB:
# enqueue, enqueue_batch, INSERT, INSERT ... SELECT, COPY and UPDATE into
# the tablespace fail at once with SQLSTATE 53100 naming the tablespace's
# directory and the limit, while inserts into a spindle table elsewhere,
# dequeue, read, set_visibility, ack, DELETE and drop_queue go on and the
# worker drops the consumed spindles.  Producers work again once the filler is
# gone (after a launcher round), or once a reload sets the limit to 0.
# Then producers enqueue in a loop with the alarm on: they are refused
# before the disk fills, and the server never meets a real ENOSPC.
# Last, with 34 tablespaces the launcher watches the 32 with least free
# space and says so.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;
use Time::HiRes qw(gettimeofday tv_interval usleep);
use Fcntl;

my $t_start = [gettimeofday];
my $small = $ENV{SPINDLE_SMALL_DIR} // '/mnt/spindle-small';

my $why = small_mount($small);
plan skip_all =>
  "no small filesystem for the disk alarm test: $why (scripts/test.sh mounts an 8 MB tmpfs there when run as root)"
  if $why;

my $ts = "$small/ts_$$";
my $filler = "$small/filler_$$";
mkdir $ts or die "$ts: $!";

my $q = 'aq';
my $node = queue_node('disk_alarm',
	conf => "spindle.naptime = '100ms'\nspindle.disk_free_limit = '4MB'\n");
$node->safe_psql('postgres', "CREATE TABLESPACE small LOCATION '$ts'");
queue_logs($node, 'postgres', $q, 100, 'SET default_tablespace = small;');
$node->safe_psql(
	'postgres', q{
CREATE TABLE t (a int, b text) USING spindle TABLESPACE small;
CREATE TABLE elsewhere (a int) USING spindle;
SET default_tablespace = small;
SELECT spindle.create_queue('gone', events_per_spindle => 10);
SELECT count(*) FROM spindle.enqueue_batch('gone', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 25)));
RESET default_tablespace;
INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, 10) g;
});

# Fill the filesystem with the filler file, then give back $room bytes.
sub fill { return fill_filesystem($filler, @_); }

# Is the tablespace's file system low (by spindle.disk_alarm())?
sub wait_low
{
	my ($low) = @_;
	return wait_for($node, 'postgres',
		"SELECT coalesce(bool_or(low) = $low, false) FROM spindle.disk_alarm() WHERE name = 'small'",
		30);
}

# Run $sql (psql, verbose errors); returns (exit code, stderr).
sub try_sql
{
	my ($sql) = @_;
	my ($out, $err);
	my $rc = $node->psql('postgres', "\\set VERBOSITY verbose\n$sql",
		stdout => \$out, stderr => \$err);
	return ($rc, $err);
}

my $one = "INSERT INTO produced_$q SELECT spindle.enqueue('$q', '{\"x\": 1}')";
my $batch_sql =
  "INSERT INTO produced_$q SELECT * FROM spindle.enqueue_batch('$q', "
  . "ARRAY(SELECT jsonb_build_object('i', g, 'pad', repeat(md5(g::text || random()::text), 32)) FROM generate_series(1, 20) g))";

# ---- 0. the launcher watches the tablespace --------------------------------
ok(defined wait_low('false'), 'spindle.disk_alarm() lists the tablespace, not low');
is( $node->safe_psql('postgres',
		"SELECT path || ' ' || limit_bytes FROM spindle.disk_alarm() WHERE name = 'small'"),
	"$ts 4194304",
	'...with its directory and the limit');
is( $node->safe_psql('postgres',
		"SELECT string_agg(name, ',' ORDER BY name) FROM spindle.disk_alarm() WHERE NOT low AND free_bytes > 0"),
	'pg_default,pg_wal,small',
	'pg_wal and the default tablespace are watched too');
my ($rc, $err) = try_sql($batch_sql);
is($rc, 0, 'enqueue_batch works with free space above the limit');
for (1 .. 14) { ($rc, $err) = try_sql($batch_sql); }
is($node->safe_psql('postgres', "SELECT count(*) FROM spindle_q.$q"),
	'300', '300 events enqueued');

# a queue whose poison event (read once, max_reads 1) will move to its
# dead-letter queue while the alarm is on: the move is the consumer's
$node->safe_psql(
	'postgres', q{
SET default_tablespace = small;
SELECT spindle.create_queue('pz_dead');
SELECT spindle.create_queue('pz', max_reads => 1, dead_letter_queue => 'pz_dead');
SELECT spindle.enqueue('pz', '{"poison": true}');
SELECT count(*) FROM spindle.read('pz', 1, '0');
});

# ---- 1. below the limit: producers refused --------------------------------
fill(1_500_000);
ok(defined wait_low('true'), 'the launcher sees the file system below the limit');
my $refused = qr/ERROR:  53100: free space on the file system of "\Q$ts\E" \(\d+ kB\) is below spindle\.disk_free_limit \(4096 kB\)/;

($rc, $err) = try_sql($one);
isnt($rc, 0, 'enqueue fails');
like($err, $refused, 'enqueue: SQLSTATE 53100 naming the directory and the limit');
like($err, qr/HINT:  Free space on the file system of "\Q$ts\E".*or lower spindle\.disk_free_limit/s,
	'...with a hint: free space or lower the limit');
($rc, $err) = try_sql($batch_sql);
like($err, $refused, 'enqueue_batch fails with 53100');
($rc, $err) = try_sql("INSERT INTO t VALUES (11, 'x')");
like($err, $refused, 'INSERT fails with 53100');
($rc, $err) = try_sql("INSERT INTO t SELECT g, 'y' FROM generate_series(12, 100) g");
like($err, $refused, 'INSERT ... SELECT fails with 53100');
($rc, $err) = try_sql("COPY t FROM STDIN;\n12\tz\n13\tz\n\\.\n");
like($err, $refused, 'COPY fails with 53100');
($rc, $err) = try_sql("UPDATE t SET b = 'updated' WHERE a = 1");
like($err, $refused, 'UPDATE fails with 53100');
is($node->safe_psql('postgres', 'SELECT count(*) FROM t'), '10', 't is unchanged');
is( $node->safe_psql('postgres', 'INSERT INTO elsewhere VALUES (1) RETURNING a'),
	'1', 'a spindle table on another file system takes inserts');

# ---- 2. consumers go on, the worker drops consumed spindles ---------------
is( $node->safe_psql(
		'postgres', qq{
CREATE TEMP TABLE r AS SELECT msg_id FROM spindle.read('$q', 5, '1 min');
SELECT count(*) FILTER (WHERE spindle.set_visibility('$q', msg_id, '2 min')) FROM r;
INSERT INTO acked_$q SELECT * FROM spindle.ack('$q', ARRAY(SELECT msg_id FROM r));
SELECT count(*) FROM acked_$q;
}), "5\n5", 'read, set_visibility and ack work');
($rc, $err) = try_sql("SELECT count(*) FROM spindle.read('pz', 1, '1 min')");
is($rc, 0, 'read moves a dead event to its dead-letter queue under the alarm')
  or diag($err);
is($node->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.pz_dead'),
	'1', '...which holds it');
my $got = drain_queue($node, 'postgres', $q, 30);
is($got, 295, 'dequeue drained the rest of the queue');
($rc, $err) = try_sql('DELETE FROM t WHERE a <= 5');
is($rc, 0, 'DELETE works') or diag($err);
($rc, $err) = try_sql("SELECT spindle.drop_queue('gone')");
is($rc, 0, 'drop_queue works') or diag($err);
ok( defined wait_for(
		$node, 'postgres', qq{
SELECT count(*) = 0 FROM spindle.spindles
 WHERE relation = 'spindle_q.$q'::regclass AND state = 'full'}, 30),
	'the worker drops the consumed spindles');
check_consistent($node, 'postgres', "spindle_q.$q", 'consumed below the limit');

# ---- 3. space back: producers work again ------------------------------------
unlink $filler or die "$filler: $!";
ok(defined wait_low('false'), 'the launcher sees the space back');
($rc, $err) = try_sql($one);
is($rc, 0, 'enqueue works again') or diag($err);
($rc, $err) = try_sql("INSERT INTO t VALUES (11, 'x'); COPY t FROM STDIN;\n12\tz\n\\.\n");
is($rc, 0, 'INSERT and COPY work again') or diag($err);

# ---- 4. a reload to 0 lets producers in, a reload back refuses them -------
fill(1_500_000);
ok(defined wait_low('true'), 'below the limit again');
($rc, $err) = try_sql($one);
like($err, $refused, 'enqueue refused');
$node->safe_psql('postgres',
	"ALTER SYSTEM SET spindle.disk_free_limit = 0; SELECT pg_reload_conf()");
ok( defined wait_for(
		$node, 'postgres', q{SELECT current_setting('spindle.disk_free_limit') = '0'},
		30),
	'the reload took effect');
($rc, $err) = try_sql("$one; INSERT INTO t VALUES (13, 'w')");
is($rc, 0, 'with spindle.disk_free_limit = 0 producers are let in') or diag($err);
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET spindle.disk_free_limit; SELECT pg_reload_conf()");
ok( defined wait_for(
		$node, 'postgres', q{SELECT current_setting('spindle.disk_free_limit') = '4MB'},
		30),
	'the limit is back');
($rc, $err) = try_sql($one);
like($err, $refused, 'and producers are refused again at once');
unlink $filler or die "$filler: $!";
ok(defined wait_low('false'), 'space back');
drain_queue($node, 'postgres', $q, 30);

# ---- 5. producers in a loop never fill the disk ----------------------------
# 6 MB free, the limit 4 MB: 200 events of 1 kB (about 250 kB on disk) a
# call; the alarm must stop them before the disk is full, and the server
# must never have met ENOSPC.
fill(6_000_000);
ok(defined wait_low('false'), '6 MB free: not low');
my $big =
  "INSERT INTO produced_$q SELECT * FROM spindle.enqueue_batch('$q', "
  . "ARRAY(SELECT jsonb_build_object('i', g, 'pad', repeat(md5(g::text || random()::text), 32)) FROM generate_series(1, 200) g))";
my $calls = 0;
($rc, $err) = (0, '');
while ($calls < 500)
{
	($rc, $err) = try_sql($big);
	last if $rc != 0;
	$calls++;
}
note "$calls calls of 200 events before the alarm";
cmp_ok($calls, '>', 2, 'producers wrote until free space fell below the limit');
like($err, $refused, 'then the alarm refused them (53100, not a full disk)');
my $df = `df -Pk '$small'`;
my ($avail) = $df =~ /\n\S+\s+\d+\s+\d+\s+(\d+)\s/;
note "free on $small: $avail kB";
cmp_ok($avail, '>', 1024, 'more than 1 MB is still free on the file system');
my $log = slurp_file($node->logfile);
unlike($log, qr/No space left on device/, 'the server never met ENOSPC');
unlike($log, qr/could not extend/, 'no "could not extend" in the server log');
like($log, qr/spindle disk alarm: free space on the file system of "\Q$ts\E"/,
	'the launcher logged the alarm');
like($log, qr/is back above spindle\.disk_free_limit/, '...and its end');

# ---- 6. more tablespaces than shared memory watches (32) -----------------
unlink $filler or die "$filler: $!";
my $many = PostgreSQL::Test::Utils::tempdir();
$node->safe_psql('postgres',
	join('', map { mkdir "$many/$_"; "CREATE TABLESPACE many_$_ LOCATION '$many/$_';\n" } 1 .. 33));
ok( defined wait_for(
		$node, 'postgres',
		"SELECT count(*) = 34 AND bool_or(name = 'small') FROM spindle.disk_alarm()", 30),
	'with 34 tablespaces in pg_tblspc, pg_wal, pg_default and 32 of them are watched, the small one among them');
# (the view shows 32 watched already at 33 tablespaces, a round before
# the launcher can count the 34th: wait for its line rather than read the
# log once)
ok( $node->wait_for_log(
		qr/WARNING:  spindle disk alarm: 34 tablespaces, only the 32 with least free space are watched/),
	'the launcher says some are not watched');
$node->safe_psql('postgres', join('', map { "DROP TABLESPACE many_$_;\n" } 1 .. 33));
ok( defined wait_for(
		$node, 'postgres', "SELECT count(*) = 3 FROM spindle.disk_alarm()", 30),
	'dropped tablespaces leave the watch');

# ---- clean up ---------------------------------------------------------------
drain_queue($node, 'postgres', $q, 30);
check_consistent($node, 'postgres', "spindle_q.$q", 'at the end');
my ($p, $c, $a, $left) = split /:/, log_counts($node, 'postgres', $q);
is($c + $a, $p, 'every enqueued event was consumed, once');
$node->safe_psql('postgres',
	"SELECT spindle.drop_queue('$q'); SELECT spindle.drop_queue('pz'); SELECT spindle.drop_queue('pz_dead'); DROP TABLE t"
);
ok( defined wait_for(
		$node, 'postgres', q{
SELECT count(*) = 0 FROM pg_class WHERE reltablespace = (SELECT oid FROM pg_tablespace WHERE spcname = 'small')},
		30),
	'nothing is left in the tablespace');
$node->safe_psql('postgres', 'CHECKPOINT');
$node->safe_psql('postgres', 'DROP TABLESPACE small');
$node->stop;
rmdir $ts;
note sprintf('run time %.1f s', tv_interval($t_start));
done_testing();
