# Compaction beside consumers, end to end (issue 19: "one lingering event
# holds its whole spindle"): batches of 50 events through a queue of
# 50-event spindles, one event of each batch delayed and one leased, the
# rest consumed at once.  Without compaction every spindle stays (two live
# events each); with the worker's relocator they move into an annex and
# the spindles drop, while the consumers go on: the leases are acked by
# msg_id after their events moved (true, once each), the delayed events
# are dequeued from the annex once due, each exactly once and in msg_id
# order, and the queue ends empty, its spindles dropped, verify() clean.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SpindleTest;

my $node = spindle_node('compaction_consume',
	"spindle.enable_worker = on\nspindle.naptime = 100\nautovacuum = off\n"
	  . "spindle.compaction_threshold = 0.25\n");
my $q = sub { $node->safe_psql('postgres', $_[0]) };
my $batches = 12;

$q->(q{SELECT spindle.create_queue('cc', 50)});
my (@leased, @delayed);
for my $b (1 .. $batches)
{
	# 49 ready events and one due in 20 s, in one transaction
	push @delayed, $q->(qq{
SELECT count(spindle.enqueue('cc', jsonb_build_object('b', $b, 'n', g)))
  FROM generate_series(1, 49) g;
SELECT spindle.enqueue('cc', jsonb_build_object('b', $b, 'late', true), delay => '20 s');})
	  =~ s/^\d+\n//r;
	push @leased, $q->(q{SELECT msg_id FROM spindle.read('cc', 1, '1 hour')});
	$q->(q{SELECT count(*) FROM spindle.dequeue('cc', 100)});
}
is($q->(q{SELECT count(*) FROM spindle_q.cc}), 2 * $batches,
	'one delayed and one leased event stay of each batch');
my $t_enq = time;

ok( defined wait_for(
		$node, 'postgres',
		q{SELECT coalesce(sum(events_moved), 0) >= 20 FROM spindle.worker}, 60, 50),
	'the worker moved the stragglers of the full spindles');
ok( defined wait_for(
		$node, 'postgres',
		q{SELECT count(*) <= 3 FROM spindle.spindles
		   WHERE relation = 'spindle_q.cc'::regclass AND state <> 'annex'}, 60, 50),
	'the emptied spindles dropped');
is($q->(q{SELECT count(*) FROM spindle_q.cc}), 2 * $batches,
	'plain SQL still sees every straggler once');
verify_ok($node, 'postgres', 'spindle_q.cc', 'verify() is clean after the moves');

# the leases, acked by msg_id after their events moved
my $acked = $q->('SELECT count(*) FILTER (WHERE spindle.ack(\'cc\', id))
  FROM unnest(ARRAY[' . join(',', @leased) . ']::bigint[]) id');
is($acked, $batches, 'every moved lease is acked');
is($q->('SELECT count(*) FILTER (WHERE spindle.ack(\'cc\', id))
  FROM unnest(ARRAY[' . join(',', @leased) . ']::bigint[]) id'), '0',
	'a second ack of each finds nothing');
is($q->(q{SELECT count(*) FROM spindle_q.cc}), $batches,
	'the delayed events are left');

# the delayed events, once due, each delivered once, in order
my $wait = 21 - (time - $t_enq);
sleep($wait) if $wait > 0;
my $got = '';
for (1 .. 50)
{
	my $r = $q->(q{SELECT string_agg(msg_id::text, ',' ORDER BY msg_id)
	  FROM spindle.dequeue('cc', 5)});
	last if $r eq '' && $got ne '';
	$got .= ($got ne '' && $r ne '' ? ',' : '') . $r;
	sleep(1) if $r eq '';
}
is($got, join(',', @delayed), 'each delayed event delivered once, in msg_id order');
is($q->(q{SELECT count(*) FROM spindle_q.cc}), '0', 'the queue is empty');
ok( defined wait_for(
		$node, 'postgres',
		q{SELECT count(*) <= 2 FROM spindle.spindles
		   WHERE relation = 'spindle_q.cc'::regclass}, 60, 50),
	'the annex and the spindles dropped');
verify_ok($node, 'postgres', 'spindle_q.cc', 'verify() is clean at the end');

done_testing();
