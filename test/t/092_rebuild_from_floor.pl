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
my $dequeue = sub {
	my $out = $q->(q{SELECT count(*) FROM spindle.dequeue('t1', 1);
		EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF)
		SELECT * FROM spindle.dequeue('hist', 1);});
	my $n = 0;
	$n += $1 while $out =~ /(?:hit|read)=(\d+)/g;
	return $n;
};
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

done_testing();
