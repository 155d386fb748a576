# The worker is woken when a dequeue takes the last events of a full
# spindle, so the spindle goes at that transaction's commit, not a naptime
# later.  In the steady benchmark (1 000 events/s, events_per_spindle =
# 1000, naptime 1 s) a naptime is a whole spindle's worth of events: the
# queue briefly held three spindles with a backlog of 16 events, over
# issue 9's bound of "backlog + 2 spindles".
#
# Here the naptime is 60 s, so only a wake-up can drop the spindle within
# the test's limits: a dequeue that ends a spindle in two calls, in one
# call, and one whose spindle another consumer's purge still holds when it
# commits (the worker looks again soon after a wake-up), and one that takes
# a pending event in a spindle's last slot once its insert commits.  A
# dequeue that rolls back loses nothing: its events come back.
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
  FROM generate_series(1, 45) i;
});

sub dropped_at_least
{
	my ($n, $limit) = @_;
	return wait_for($node, 'postgres',
		qq{SELECT spindles_dropped >= $n FROM spindle.tables
		    WHERE relation = 'spindle_q.wq'::regclass}, $limit);
}

sub take
{
	my ($n) = @_;
	return $node->safe_psql('postgres',
		qq{SELECT string_agg((payload->>'n'), ',' ORDER BY msg_id) FROM spindle.dequeue('wq', $n)});
}

# The first spindle in two calls, the second taking its last positions.
is(take(4), '1,2,3,4', 'the first four events');
ok(!defined dropped_at_least(1, 2), 'a spindle with live events is not dropped');
is(take(6), '5,6,7,8,9,10', 'the rest of the first spindle');
my $t = dropped_at_least(1, 20);
ok(defined $t, 'the full, purged spindle is dropped well within the 60 s naptime');
note(sprintf('dropped %.2f s after the dequeue', $t // -1));

# The second spindle in one call.
is(take(10), '11,12,13,14,15,16,17,18,19,20', 'the second spindle in one call');
ok(defined dropped_at_least(2, 20), 'the second spindle is dropped at once as well');

# The third: the consumer that ends it commits first; the other consumer's
# purge of its first half is still running when the worker wakes.
my $other = $node->background_psql('postgres', on_error_stop => 1);
$other->query_safe(q{BEGIN});
is($other->query_safe(
		q{SELECT string_agg((payload->>'n'), ',' ORDER BY msg_id) FROM spindle.dequeue('wq', 5)}),
	'21,22,23,24,25', 'a second consumer takes the third spindle\'s first half');
is(take(5), '26,27,28,29,30', 'the first consumer ends the spindle and commits');
$other->query_safe(q{COMMIT});
$other->quit;
ok(defined dropped_at_least(3, 20),
	'dropped once the other consumer commits, without waiting a naptime');

# A pending run at a spindle's end: the event in its last slot is still
# being inserted when the consumer reaches it; taken once it commits, it
# finishes the spindle and wakes the worker.
$node->safe_psql(
	'postgres', q{
SELECT spindle.create_queue('pq', events_per_spindle => 10);
SELECT count(spindle.enqueue('pq', jsonb_build_object('n', i)))
  FROM generate_series(1, 9) i;
});
my $producer = $node->background_psql('postgres', on_error_stop => 1);
$producer->query_safe(
	q{BEGIN; SELECT spindle.enqueue('pq', '{"n": 10}')});
$node->safe_psql('postgres', q{SELECT spindle.enqueue('pq', '{"n": 11}')});
is($node->safe_psql('postgres',
		q{SELECT string_agg((payload->>'n'), ',' ORDER BY msg_id) FROM spindle.dequeue('pq', 20)}),
	'1,2,3,4,5,6,7,8,9,11', 'the consumer passes the event still being inserted');
$producer->query_safe(q{COMMIT});
$producer->quit;
is($node->safe_psql('postgres',
		q{SELECT string_agg((payload->>'n'), ',' ORDER BY msg_id) FROM spindle.dequeue('pq', 20)}),
	'10', 'and takes it once its insert commits');
ok( defined wait_for($node, 'postgres',
		q{SELECT spindles_dropped >= 1 FROM spindle.tables
		   WHERE relation = 'spindle_q.pq'::regclass}, 20),
	'which finishes the spindle: dropped without waiting a naptime');

# A dequeue that rolls back: its events come back, in order.
$node->safe_psql('postgres',
	q{BEGIN; SELECT count(*) FROM spindle.dequeue('wq', 10); ROLLBACK;});
is(take(100), '31,32,33,34,35,36,37,38,39,40,41,42,43,44,45',
	'every event delivered once, the rolled-back ones again');
verify_ok($node, 'postgres', 'spindle_q.wq');

done_testing();
