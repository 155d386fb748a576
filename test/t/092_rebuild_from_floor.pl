# A consumer state evicted with no saved head left is rebuilt from disk.
# It used to start at the queue's oldest spindle and examine every event in
# it, consumed ones included: a queue whose open spindle held 20 000
# consumed events answered dequeue(q, 1) by reading every page of them
# (issue 18: "a state rebuilt by walking the queue's whole undropped
# history", 189 ms, once per call on a server going round more queues than
# spindle.max_queues states and their saved heads).  Now it starts at the
# consume log's floor, below which every event is consumed for everyone:
# the rebuilt call reads a few pages and delivers what is left, a delayed
# event above the history included.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my $node = spindle_node('rebuild_from_floor',
	"autovacuum = off\nspindle.enable_worker = on\nspindle.naptime = '100ms'\nspindle.max_queues = 4\n");
my $q = sub { $node->safe_psql('postgres', $_[0]) };

$q->(q{SELECT spindle.create_queue('t' || g) FROM generate_series(1, 40) g});

# churn: 40 other queues take the 4 states and the 16 saved heads in turn
my $churn = sub {
	$q->(q{SELECT spindle.enqueue('t' || g, '{}') FROM generate_series(1, 40) g});
	$q->(q{SELECT count(*) FROM generate_series(1, 40) g,
	       LATERAL spindle.dequeue('t' || g, 1)});
};

# 20 000 events consumed, still in the queue's open spindle
$q->(q{SELECT spindle.create_queue('hist')});
$q->(q{SELECT count(*) FROM spindle.enqueue_batch('hist',
	ARRAY(SELECT jsonb_build_object('n', g, 'pad', repeat('x', 60))
	      FROM generate_series(1, 20000) g))});
for (1 .. 20)
{
	$q->(q{SELECT count(*) FROM spindle.dequeue('hist', 1000)});
}
is($q->(q{SELECT count(*) FROM spindle_q.hist}), '0', 'hist consumed');
$q->(q{SELECT spindle.enqueue('hist', jsonb_build_object('last', g))
       FROM generate_series(1, 3) g});
$q->(q{SELECT spindle.enqueue('hist', '{"late": 2}', delay => '1 hour')});
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM spindle._run_scan('spindle_q.hist', 2, 0, 1000000000000)}),
	'the worker folded the history into the floor');

# buffers one dequeue(hist, 1) touches in a session whose caches another
# call warmed, and the event it took
my $buffers_of = sub {
	my ($queue) = @_;
	my $out = $q->(qq{SELECT count(*) FROM spindle.dequeue('t1', 1);
		EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF)
		SELECT * FROM spindle.dequeue('$queue', 1);});
	my $n = 0;
	$n += $1 while $out =~ /(?:hit|read)=(\d+)/g;
	return $n;
};
my $dequeue = sub { $buffers_of->('hist') };
$churn->();
my $rebuilt = $dequeue->();
my $warm = $dequeue->();
ok($rebuilt < $warm + 100,
	"a rebuilt state starts at the floor: $rebuilt buffers, $warm with its state kept");
is($q->(q{SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.hist}),
	'{"last": 3},{"late": 2}',
	'the two calls took the first two events left, in order');
$churn->();
is($q->(q{SELECT string_agg(payload::text, ',') FROM spindle.dequeue('hist', 10)}),
	'{"last": 3}',
	'after another rebuild: the last one, nothing below the floor');
is($q->(q{SELECT payload::text FROM spindle_q.hist}), '{"late": 2}',
	'what stays is the delayed event');
verify_ok($node, 'postgres', 'spindle_q.hist', 'verify() is clean');

# Delayed events stop the fold, so a state rebuilt with no saved head
# starts at the first of them and moves its head over the parked runs and
# the consumed events above it.  It used to take one tree descent per
# parked run and one attempt per consumed event, again at every rebuild:
# 100 000 reminders enqueued one after the other cost every dequeue of an
# evicted state 65 to 120 ms.  Now it follows the parked runs by a walk of
# tree 0's leaves (spindle_park_next) and the consumed events by range
# reads of the consume log (skip_settled).
# remind: 20 000 reminders, one run each (due 2 s apart), one after the other
$q->(q{SELECT spindle.create_queue('remind', 100000)});
$q->(q{SELECT count(*) FROM (SELECT spindle.enqueue('remind', '{}',
	delay => (3600 + 2 * g) * interval '1 s') FROM generate_series(1, 20000) g) x});
# mixed: 2 000 reminders, each followed by 9 events consumed at once
$q->(q{SELECT spindle.create_queue('mixed', 100000)});
$q->(q{DO $$ BEGIN FOR g IN 1 .. 2000 LOOP
	PERFORM spindle.enqueue('mixed', '{}', delay => (3600 + 2 * g) * interval '1 s');
	PERFORM spindle.enqueue_batch('mixed', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 9)));
END LOOP; END $$});
for my $queue ('remind', 'mixed')
{
	# one transaction a call: a call's claims last until its commit
	$q->(qq{SELECT count(*) FROM spindle.dequeue('$queue', 1000)}) for 1 .. 25;
	$q->(qq{SELECT spindle.enqueue('$queue', '{"last": 1}')});
}
is($q->(q{SELECT count(*) FROM spindle_q.mixed}), '2001',
	'mixed: the reminders and the last event are left, the others consumed');
for my $queue ('remind', 'mixed')
{
	$churn->();
	my $rebuilt = $buffers_of->($queue);
	$q->(qq{SELECT spindle.enqueue('$queue', '{"last": 2}')});
	my $warm = $buffers_of->($queue);
	note "$queue: $rebuilt buffers rebuilt, $warm warm";
	cmp_ok($rebuilt, '<', 1000,
		"$queue: a state rebuilt among the parked runs reads few buffers (before: remind 80 080, mixed 476 112)");
	is($q->(qq{SELECT count(*) FROM spindle_q.$queue WHERE payload ? 'last'}), '0',
		"$queue: both calls took the event after the parked ones");
}
verify_ok($node, 'postgres', 'spindle_q.mixed', 'verify() of mixed is clean');

done_testing();
