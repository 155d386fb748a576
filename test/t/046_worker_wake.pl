# The worker is woken when a dequeue takes the last events of a full
# spindle, so the spindle goes at that transaction's commit, not a naptime
# later.  In the steady benchmark (1 000 events/s, events_per_spindle =
# 1000, naptime 1 s) a naptime is a whole spindle's worth of events: the
# queue briefly held three spindles with a backlog of 16 events, over
# issue 9's bound of "backlog + 2 spindles".
#
# Here the naptime is 60 s, so only a wake-up can drop the spindle within
# the test's limits.  A dequeue that rolls back wakes nobody and drops
# nothing: its events come back, none is lost.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my $node = PostgreSQL::Test::Cluster->new('worker_wake');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle'
max_worker_processes = 8
spindle.naptime = '60s'
autovacuum = off
});
$node->start;
$node->safe_psql('postgres', q{CREATE EXTENSION spindle});
ok( defined wait_for($node, 'postgres',
		q{SELECT count(*) > 0 FROM spindle.worker
		   WHERE database = 'postgres' AND last_run IS NOT NULL}, 30),
	'the worker of postgres ran its first round');

$node->safe_psql(
	'postgres', q{
SELECT spindle.create_queue('wq', events_per_spindle => 10);
SELECT count(spindle.enqueue('wq', jsonb_build_object('n', i)))
  FROM generate_series(1, 25) i;
});

sub dropped
{
	return $node->safe_psql('postgres',
		q{SELECT spindles_dropped FROM spindle.tables
		   WHERE relation = 'spindle_q.wq'::regclass});
}

# Let the round the producer's nudges started end (it finds nothing to drop).
sleep 2;
is(dropped(), '0', 'nothing dropped before any dequeue');

# Take the whole first spindle and roll back: nothing goes, nothing is lost.
$node->safe_psql('postgres',
	q{BEGIN; SELECT count(*) FROM spindle.dequeue('wq', 10); ROLLBACK;});
sleep 2;
is(dropped(), '0', 'a rolled-back dequeue of a full spindle drops nothing');

# Now in two calls, the second taking the full spindle's last positions.
my $got = $node->safe_psql(
	'postgres', q{
SELECT string_agg((payload->>'n'), ',' ORDER BY msg_id) FROM spindle.dequeue('wq', 4);
});
is($got, '1,2,3,4', 'the rolled-back events are delivered again, in order');
my $t = wait_for($node, 'postgres',
	q{SELECT spindles_dropped >= 1 FROM spindle.tables
	   WHERE relation = 'spindle_q.wq'::regclass}, 3);
ok(!defined $t, 'a spindle with live events is not dropped');
$got = $node->safe_psql(
	'postgres', q{
SELECT string_agg((payload->>'n'), ',' ORDER BY msg_id) FROM spindle.dequeue('wq', 6);
});
is($got, '5,6,7,8,9,10', 'the rest of the first spindle');
$t = wait_for($node, 'postgres',
	q{SELECT spindles_dropped >= 1 FROM spindle.tables
	   WHERE relation = 'spindle_q.wq'::regclass}, 20);
ok(defined $t, 'the full, purged spindle is dropped well within the 60 s naptime');
note(sprintf('dropped %.2f s after the dequeue committed', $t // -1));

# A dequeue of exactly one spindle's events in one call, then the rest.
$got = $node->safe_psql(
	'postgres', q{
SELECT string_agg((payload->>'n'), ',' ORDER BY msg_id) FROM spindle.dequeue('wq', 10);
});
is($got, '11,12,13,14,15,16,17,18,19,20', 'the second spindle in one call');
$t = wait_for($node, 'postgres',
	q{SELECT spindles_dropped >= 2 FROM spindle.tables
	   WHERE relation = 'spindle_q.wq'::regclass}, 20);
ok(defined $t, 'the second spindle is dropped at once as well');
$got = $node->safe_psql(
	'postgres', q{
SELECT string_agg((payload->>'n'), ',' ORDER BY msg_id) FROM spindle.dequeue('wq', 100);
});
is($got, '21,22,23,24,25', 'every event delivered once');
verify_ok($node, 'postgres', 'spindle_q.wq');

done_testing();
