# SIGKILL of the processes that hold queue state, under a background load
# of producers, dequeue consumers and read/ack consumers (each logging what
# it got into heap tables in its own transaction):
#  1. a consumer backend with dequeued events in an open transaction: the
#     postmaster restarts every backend and the events come back;
#  2. a consumer that holds leases: they are parked on disk, so they are
#     still held after the restart, and once handed back one read returns
#     them all with their read counts plus one (TAP 089 has the case that
#     used to leave some for the next call);
#     and, without a restart (pg_terminate_backend), the leases stay until
#     they expire, then the events come back with read_count + 1;
#  3. the worker in the middle of dropping a backlog of spindles;
#  4. a spindle creator (backend_type 'spindle creator', started by a
#     producer whose batch needs new spindles).
# After each fault: nothing committed lost, nothing delivered twice, the
# counters agree; at the end everything drains exactly once and the worker
# drops every spindle.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;
use Time::HiRes qw(gettimeofday tv_interval usleep);

my $t_start = [gettimeofday];
my $q = 'fk';
my $node = queue_node('fault_kill', conf => "spindle.naptime = '50ms'\n");
queue_logs($node, 'postgres', $q, 20);
install_wait_backend($node);
my $dir = PostgreSQL::Test::Utils::tempdir;
my $f = load_scripts($dir, $q, batch => 10, dequeue => 5, vt => '1 second');
my @mix = ([ $f->{prod}, 3 ], [ $f->{batch}, 1 ], [ $f->{cons}, 5 ],
	[ $f->{reader}, 1 ]);

sub set_worker
{
	my ($on) = @_;
	$node->append_conf('postgresql.conf',
		'spindle.enable_worker = ' . ($on ? 'on' : 'off') . "\n");
	$node->reload;
}

sub ids_in
{
	my ($table, $ids) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM $table WHERE msg_id IN (" . join(',', @$ids) . ')');
}

# ---- 1. a consumer with an open transaction of dequeued events -----------
$node->safe_psql('postgres',
	"INSERT INTO produced_$q SELECT * FROM spindle.enqueue_batch('$q', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 200)))"
);
my $load = start_load($node, 'postgres', 60, 5, @mix);
usleep(500_000);
my $victim = $node->background_psql('postgres', on_error_stop => 0);
my $vpid = $victim->query_safe('SELECT pg_backend_pid()');
$victim->query_safe("INSERT INTO produced_$q SELECT * FROM spindle.enqueue_batch('$q', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 300)))");
$victim->query_safe('BEGIN');
my @held = split /\n/,
  $victim->query_safe(
	"INSERT INTO consumed_$q SELECT msg_id, read_count FROM spindle.dequeue('$q', 40) RETURNING msg_id");
is(scalar @held, 40, 'the victim holds 40 dequeued events in an open transaction');
usleep(700_000);    # the others consume past them
ok(kill9_and_wait($node, $vpid), 'SIGKILL of the consumer: the server restarted');
eval { $victim->quit; };
stop_load($load, 1);
next_epoch($node);
is(ids_in("consumed_$q", \@held), '0', "the killed consumer's dequeues did not commit");
is(ids_in("spindle_q.$q", \@held), '40', 'its 40 events are back in the queue');
check_consistent($node, 'postgres', "spindle_q.$q", 'after killing a consumer');
my $got = $node->safe_psql('postgres',
	"WITH d AS (INSERT INTO consumed_$q SELECT msg_id, read_count FROM spindle.dequeue('$q', 10000) RETURNING msg_id) "
	  . 'SELECT count(*) FILTER (WHERE msg_id IN (' . join(',', @held) . ')) FROM d');
is($got, '40', 'a consumer gets them at once after the restart');

# ---- 2. a consumer holding leases -----------------------------------------
$load = start_load($node, 'postgres', 60, 5, @mix);
usleep(500_000);
$victim = $node->background_psql('postgres', on_error_stop => 0);
$vpid = $victim->query_safe('SELECT pg_backend_pid()');
$victim->query_safe("INSERT INTO produced_$q SELECT * FROM spindle.enqueue_batch('$q', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 300)))");
my @leased = split /\n/,
  $victim->query_safe(
	"WITH r AS (SELECT msg_id, read_count FROM spindle.read('$q', 30, '1 hour')) "
	  . "INSERT INTO reads_$q SELECT msg_id, read_count, (SELECT e FROM epoch) FROM r RETURNING msg_id");
is(scalar @leased, 30, '30 events leased for an hour');
usleep(700_000);
is(ids_in("consumed_$q", \@leased) + ids_in("acked_$q", \@leased),
	0, 'nobody else got the leased events while the lease holder lived');
ok(kill9_and_wait($node, $vpid), 'SIGKILL of the lease holder: the server restarted');
eval { $victim->quit; };
stop_load($load, 1);
next_epoch($node);
check_consistent($node, 'postgres', "spindle_q.$q", 'after killing a lease holder');
is(ids_in("spindle_q.$q", \@leased), scalar(@leased), 'the leased events are still in the queue');
my $t0 = [gettimeofday];
# leases are parked on disk (their read committed, so they were flushed):
# still held after the crash, they come back once handed back, read twice
is( $node->safe_psql('postgres',
		'SELECT count(*) FILTER (WHERE spindle.set_visibility(\'' . $q . '\', msg_id, \'0\')) FROM unnest(ARRAY['
		  . join(',', @leased) . ']::bigint[]) msg_id'),
	scalar(@leased),
	'after the restart the 30 leases are still held (set_visibility finds them)');
# each comes back with the read count it had plus one: the load's readers
# may have leased it before the lease holder did, for a second
my $ids = join(',', @leased);
$got = $node->safe_psql('postgres',
	"WITH before AS (SELECT msg_id, max(read_count) AS rc FROM reads_$q WHERE msg_id IN ($ids) GROUP BY msg_id), "
	  . "r AS (SELECT msg_id, read_count FROM spindle.read('$q', 10000, '1 hour')), "
	  . "l AS (INSERT INTO reads_$q SELECT msg_id, read_count, (SELECT e FROM epoch) FROM r RETURNING *) "
	  . "SELECT count(*) || ':' || count(*) FILTER (WHERE l.read_count = before.rc + 1) FROM l JOIN before USING (msg_id)");
is($got, scalar(@leased) . ':' . scalar(@leased),
	'handed back, all in one read, each with its read count plus one (it survived the crash)');
# give them back, and ack them
is( $node->safe_psql('postgres',
		"WITH a AS (INSERT INTO acked_$q SELECT * FROM spindle.ack('$q', ARRAY(SELECT msg_id FROM spindle_q.$q)) RETURNING 1) SELECT count(*) > 0 FROM a"),
	't', 'the re-read events are acked');

# ...and without a restart: a lease holder ended by pg_terminate_backend
$node->safe_psql('postgres',
	"INSERT INTO produced_$q SELECT * FROM spindle.enqueue_batch('$q', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 20)))"
);
$victim = $node->background_psql('postgres', on_error_stop => 0);
$vpid = $victim->query_safe('SELECT pg_backend_pid()');
@leased = split /\n/,
  $victim->query_safe(
	"WITH r AS (SELECT msg_id, read_count FROM spindle.read('$q', 20, '3 seconds')) "
	  . "INSERT INTO reads_$q SELECT msg_id, read_count, (SELECT e FROM epoch) FROM r RETURNING msg_id");
is(scalar @leased, 20, '20 events leased for 3 s');
my $lease_t0 = [gettimeofday];
is($node->safe_psql('postgres', "SELECT pg_terminate_backend($vpid, 10000)"),
	't', 'the lease holder is terminated');
eval { $victim->quit; };
is( $node->safe_psql('postgres',
		"WITH d AS (INSERT INTO consumed_$q SELECT msg_id, read_count FROM spindle.dequeue('$q', 100) RETURNING 1) SELECT count(*) FROM d"),
	'0', 'the leases outlive their holder: nothing deliverable');
$got = $node->safe_psql('postgres',
	"WITH r AS (SELECT msg_id, read_count FROM spindle.read('$q', 100, '1 hour', wait => '10 seconds')), "
	  . "l AS (INSERT INTO reads_$q SELECT msg_id, read_count, (SELECT e FROM epoch) FROM r RETURNING *) "
	  . "SELECT count(*) || ':' || min(read_count) || ':' || max(read_count) FROM l");
my $waited = tv_interval($lease_t0);
is($got, '20:2:2', 'when the leases expire the events come back with read_count 2');
cmp_ok($waited, '>=', 2.9, sprintf('not before the lease ended (%.2f s)', $waited));
$node->safe_psql('postgres',
	"INSERT INTO acked_$q SELECT * FROM spindle.ack('$q', ARRAY[" . join(',', @leased) . '])');
check_consistent($node, 'postgres', "spindle_q.$q", 'after the leases expired');

# ---- 3. the worker in the middle of a drop --------------------------------
set_worker(0);
$node->safe_psql('postgres', qq{
INSERT INTO produced_$q SELECT * FROM spindle.enqueue_batch('$q', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 6000)));
INSERT INTO consumed_$q SELECT msg_id, read_count FROM spindle.dequeue('$q', 6000);
});
my $backlog = $node->safe_psql('postgres',
	"SELECT count(*) FROM spindle.spindles WHERE relation = 'spindle_q.$q'::regclass AND state = 'full'");
cmp_ok($backlog, '>=', 250, "$backlog full, consumed spindles wait for the worker");
$load = start_load($node, 'postgres', 60, 4, @mix);
my $dropped_before = $node->safe_psql('postgres',
	"SELECT spindles_dropped FROM spindle.tables WHERE relation = 'spindle_q.$q'::regclass");
set_worker(1);
my $wpid = $node->safe_psql('postgres',
	q{SELECT wait_worker_drop(10)});
ok($wpid, "the worker ($wpid) holds an existing spindle's AccessExclusiveLock: it is dropping it");
ok(kill9_and_wait($node, $wpid), 'SIGKILL of the worker mid-drop: the server restarted');
stop_load($load, 1);
next_epoch($node);
my $full_after = $node->safe_psql('postgres',
	"SELECT count(*) FROM spindle.spindles WHERE relation = 'spindle_q.$q'::regclass AND state = 'full'");
note "full spindles: $backlog before the worker, $full_after after its crash";
check_consistent($node, 'postgres', "spindle_q.$q", 'after killing the worker');
ok( defined wait_for(
		$node, 'postgres', qq{
SELECT count(*) = 0 FROM spindle.spindles
 WHERE relation = 'spindle_q.$q'::regclass AND state = 'full' AND events = purged_events}, 60),
	'a new worker drops the rest of the backlog (no full, consumed spindle left)');

# ---- 4. a spindle creator -------------------------------------------------
# batches of 200 events into spindles of 20: producers start creators
open my $fh, '>', "$dir/bigbatch.sql" or die;
print $fh "INSERT INTO produced_$q SELECT * FROM spindle.enqueue_batch('$q', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 200)));\n";
close $fh;
my $killed = 0;
for my $try (1 .. 6)
{
	$load = start_load($node, 'postgres', 60, 4, [ "$dir/bigbatch.sql", 1 ],
		[ $f->{cons}, 2 ], [ $f->{reader}, 1 ]);
	my $cpid = $node->safe_psql('postgres',
		q{SELECT wait_backend('spindle creator', NULL, 10)});
	if ($cpid && kill9_and_wait($node, $cpid))
	{
		$killed++;
		note "spindle creator $cpid killed (try $try)";
	}
	stop_load($load, 1);
	if ($killed)
	{
		next_epoch($node);
		last;
	}
}
ok($killed, 'SIGKILL of a spindle creator: the server restarted');
check_consistent($node, 'postgres', "spindle_q.$q", 'after killing a creator');

# ---- the queue works, and everything comes out exactly once --------------
$load = start_load($node, 'postgres', 3, 5, @mix);
my ($out, $err) = stop_load($load);
like($out, qr/number of failed transactions: 0/, 'the load after the kills ran without errors')
  or diag("$out\n$err");
my $drained = drain_queue($node, 'postgres', $q);
check_consistent($node, 'postgres', "spindle_q.$q", 'after the drain');
check_read_counts($node, 'postgres', $q);
my ($produced, $consumed, $acked, $left) = split /:/,
  log_counts($node, 'postgres', $q);
note "events checked: $produced produced, $consumed dequeued, $acked acked";
is($consumed + $acked, $produced, 'enqueued = dequeued + acked');
ok( defined wait_for(
		$node, 'postgres', qq{
SELECT count(*) = 0 FROM spindle.spindles
 WHERE relation = 'spindle_q.$q'::regclass AND state = 'full'}, 30),
	'the worker drops every full spindle');

$node->stop;
note sprintf('run time %.1f s', tv_interval($t_start));
done_testing();
