# A queue's head kept on disk (src/queue/queue_head.c): a state loaded
# afresh after a restart, a crash or an eviction whose saved head is gone
# starts at the head its consumer relation keeps, not at the oldest
# spindle: the first call costs a bounded number of buffers whatever the
# number of consumed events behind the head, and returns exactly the
# events not consumed -- also those claimed by a dequeue and reserved by a
# producer that were running at a crash.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

# four states, so sixteen saved heads in shared memory; streaming for the
# standby
my $node = PostgreSQL::Test::Cluster->new('head_on_disk');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'spindle'
max_worker_processes = 16
shared_buffers = 128MB
autovacuum = off
spindle.enable_worker = on
spindle.naptime = 100ms
spindle.max_queues = 4
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION spindle');

# a buffer bound for a first call: the walk it replaces reads hundreds
my $BOUND = 120;

# $n events consumed (in the open spindle) on queue $q, then $left more
# numbered 1 .. $left left for later
sub consumed_queue
{
	my ($q, $n, $left) = @_;
	$node->safe_psql('postgres', qq{
SELECT spindle.create_queue('$q');
SELECT count(*) FROM spindle.enqueue_batch('$q',
    ARRAY(SELECT jsonb_build_object('old', g) FROM generate_series(1, $n) g));
});
	my $got = 0;
	$got += $node->safe_psql('postgres',
		"SELECT count(*) FROM spindle.dequeue('$q', 5000)")
	  while $got < $n;
	is($got, $n, "$q: $n events consumed");
	$node->safe_psql('postgres', qq{
SELECT count(*) FROM spindle.enqueue_batch('$q',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, $left) g));
}) if $left;
}

# the worker writes the heads of states that moved every naptime
sub let_worker_write { sleep 2; }

# the first dequeue of up to $max events of $q in a new session, after a
# warm-up call on queue warm (catalogs, directories): (rows, buffers, the
# payloads' n)
sub first_call
{
	my ($q, $max, $on) = @_;
	my $s = ($on // $node)->background_psql('postgres', on_error_stop => 0);
	$s->query_safe("SELECT count(*) FROM spindle.dequeue('warm', 1)");
	my ($rows, $ms, $buf) =
	  explain_cost($s, "SELECT * FROM spindle.dequeue('$q', $max)");
	$s->quit;
	return ($rows, $buf);
}

sub drain
{
	my ($q) = @_;
	return $node->safe_psql('postgres', qq{
SELECT coalesce(string_agg(payload->>'n', ',' ORDER BY (payload->>'n')::int), '')
  FROM spindle.dequeue('$q', 100000)});
}

$node->safe_psql('postgres', "SELECT spindle.create_queue('warm')");
$node->safe_psql('postgres',
	"SELECT spindle.enqueue('warm', '{}') FROM generate_series(1, 100)");

# ---- a clean restart: 20 000 consumed events behind the head, which the
# worker writes when it exits (its naptime is an hour: no round between)
$node->append_conf('postgresql.conf', "spindle.naptime = 1h\n");
$node->reload;
sleep 1;
consumed_queue('rs', 20000, 10);
$node->restart;
$node->append_conf('postgresql.conf', "spindle.naptime = 100ms\n");
$node->reload;
my ($rows, $buf) = first_call('rs', 4);
is($rows, 4, 'after a restart the first dequeue gets 4 events');
cmp_ok($buf, '<', $BOUND,
	"after a restart the first dequeue reads $buf buffers, not the 20 000 consumed events");
is(drain('rs'), '5,6,7,8,9,10', 'the rest once, none lost');

# ---- a crash with a dequeue's claims and a producer's events in flight
consumed_queue('cr', 20000, 20);
my $claimer = $node->background_psql('postgres', on_error_stop => 0);
$claimer->query_safe('BEGIN');
is( $claimer->query_safe(
		q{SELECT string_agg(payload->>'n', ',') FROM spindle.dequeue('cr', 5)}),
	'1,2,3,4,5',
	'a dequeue holds 1..5, uncommitted');
my $producer = $node->background_psql('postgres', on_error_stop => 0);
$producer->query_safe('BEGIN');
$producer->query_safe(
	q{SELECT spindle.enqueue('cr', jsonb_build_object('n', 100 + g)) FROM generate_series(1, 3) g}
);
$node->safe_psql('postgres',
	q{SELECT spindle.enqueue('cr', jsonb_build_object('n', 20 + g)) FROM generate_series(1, 5) g}
);
# a consumer passes both: its head moves past the claims and the open
# producer's events
is( $node->safe_psql('postgres',
		q{SELECT string_agg(payload->>'n', ',' ORDER BY (payload->>'n')::int) FROM spindle.dequeue('cr', 100)}),
	'6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25',
	'another consumer takes the rest, not the claims nor the open producer\'s');
let_worker_write();
$node->stop('immediate');
eval { $claimer->quit };
eval { $producer->quit };
$node->start;
($rows, $buf) = first_call('cr', 100);
is($rows, 5,
	'after a crash the first dequeue gets the 5 events the crashed dequeue held');
cmp_ok($buf, '<', $BOUND,
	"after a crash the first dequeue reads $buf buffers, not the 20 000 consumed events");
is(drain('cr'), '', 'nothing else: the open producer\'s events went with it');
$node->safe_psql('postgres',
	q{SELECT spindle.enqueue('cr', jsonb_build_object('n', 30 + g)) FROM generate_series(1, 3) g}
);
is(drain('cr'), '31,32,33', 'events enqueued after the crash come');

# ---- a slot a failed insert took: a crash gives it to the next event,
# which a head written past it would hide.  PLAIN storage reaches the
# spindles made after the ALTER; a 12 kB payload then fails after its
# slot was reserved ("row is too big").
$node->safe_psql('postgres', q{
SELECT spindle.create_queue('ls', events_per_spindle => 10);
ALTER TABLE spindle_q.ls ALTER COLUMN payload SET STORAGE PLAIN;
SELECT spindle.enqueue('ls', jsonb_build_object('n', g)) FROM generate_series(1, 25) g;
});
my ($ret, $out, $err) = $node->psql('postgres', q{
SELECT spindle.enqueue('ls', jsonb_build_object('big', repeat('x', 12000)))});
like($err, qr/too big/, 'an insert fails after taking its slot');
is(drain('ls'), join(',', 1 .. 25), 'a consumer passes the lost slot');
let_worker_write();
$node->stop('immediate');
$node->start;
$node->safe_psql('postgres',
	q{SELECT spindle.enqueue('ls', jsonb_build_object('n', g)) FROM generate_series(26, 28) g}
);
is(drain('ls'), '26,27,28',
	'after a crash, the events that got the lost slot again are delivered');

# ---- TRUNCATE gives the queue a consumer relation with no head; one that
# rolls back brings the old head back with the old events
consumed_queue('tr', 3000, 2);
let_worker_write();
$node->safe_psql('postgres', q{
BEGIN;
TRUNCATE spindle_q.tr;
SELECT spindle.enqueue('tr', '{"n": 50}');
ROLLBACK;
SELECT spindle.enqueue('tr', '{"n": 3}');
});
let_worker_write();
$node->restart;
($rows, $buf) = first_call('tr', 100);
is($rows, 3, 'after a rolled back TRUNCATE and a restart: the 3 events left');
cmp_ok($buf, '<', $BOUND, "... reading $buf buffers");
$node->safe_psql('postgres', q{
TRUNCATE spindle_q.tr;
SELECT spindle.enqueue('tr', jsonb_build_object('n', g)) FROM generate_series(7, 9) g;
});
$node->restart;
is(drain('tr'), '7,8,9', 'after TRUNCATE and a restart: the new events');
$node->safe_psql('postgres', q{
SELECT spindle.drop_queue('tr');
SELECT spindle.create_queue('tr');
SELECT spindle.enqueue('tr', jsonb_build_object('n', g)) FROM generate_series(1, 2) g;
});
$node->restart;
is(drain('tr'), '1,2', 'after drop and create and a restart: the new events');

# ---- a promoted standby starts at the head the primary wrote (its
# record replayed)
$node->backup('bk');
my $standby = PostgreSQL::Test::Cluster->new('head_standby');
$standby->init_from_backup($node, 'bk', has_streaming => 1);
$standby->start;
consumed_queue('sb', 20000, 3);
let_worker_write();
$node->wait_for_catchup($standby);
$standby->promote;
($rows, $buf) = first_call('sb', 100, $standby);
is($rows, 3, 'a promoted standby: the first dequeue gets the 3 events left');
cmp_ok($buf, '<', $BOUND,
	"a promoted standby: the first dequeue reads $buf buffers, not the 20 000 consumed events");
$standby->stop;

# ---- eviction: 24 queues through 4 states and 16 saved heads, with the
# worker off (only the evicting backend writes the heads)
$node->append_conf('postgresql.conf', "spindle.enable_worker = off\n");
$node->restart;
consumed_queue("ev$_", 3000, 2) for 1 .. 24;
my $s = $node->background_psql('postgres', on_error_stop => 0);
$s->query_safe("SELECT count(*) FROM spindle.dequeue('warm', 1)");
my ($max, $total) = (0, 0);
for my $round (1 .. 2)
{
	for my $i (1 .. 24)
	{
		my ($r, $ms, $b) =
		  explain_cost($s, "SELECT * FROM spindle.dequeue('ev$i', 1)");
		$total += $r;
		$max = $b if $b > $max;
	}
}
$s->quit;
is($total, 48, 'round robin over 24 queues: every event once');
cmp_ok($max, '<', $BOUND,
	"round robin over 24 queues through 4 states: a call reads at most $max buffers");
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM generate_series(1, 24) g, LATERAL spindle.dequeue('ev' || g, 10)}),
	'0', 'nothing left, nothing twice');

done_testing();
