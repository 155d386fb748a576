# A delayed event that compaction moved into an annex, whose spindle was
# then dropped, is reached only through its parked run in tree 0 (no head
# walks an annex).  A consumer that took it when due, or an ack that took
# it before, and then rolled back, used to cut that run: the event was
# left in shared memory only, and a restart lost it for good (plain SQL
# still showed it due; hostile review of turn 4, session 8, F1).  The run
# of a moved event now stays parked (READY) until what consumes it
# commits: after the rollback and a restart the event is delivered, once.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SpindleTest;

my $node = spindle_node('moved_delayed_restart',
	"spindle.enable_worker = on\nspindle.naptime = 100\nautovacuum = off\n");
my $q = sub { $node->safe_psql('postgres', $_[0]) };

# event 3 of each queue delayed, the rest consumed; the worker moves it and
# drops its spindle
for my $name ('md', 'ma')
{
	$q->(qq{SELECT spindle.create_queue('$name', 10)});
	$q->(qq{SELECT count(spindle.enqueue('$name', jsonb_build_object('n', g),
	           delay => CASE WHEN g = 3 THEN interval '10 s' ELSE interval '0' END))
	     FROM generate_series(1, 20) g});
	$q->(qq{SELECT count(*) FROM spindle.dequeue('$name', 100)});
}
my $t0 = time;
for my $name ('md', 'ma')
{
	ok( defined wait_for(
			$node, 'postgres', qq{
SELECT count(*) FILTER (WHERE state = 'annex') = 1
   AND count(*) FILTER (WHERE spindle_no = 1) = 0
  FROM spindle.spindles WHERE relation = 'spindle_q.$name'::regclass}, 60, 50),
		"$name: the delayed event moved into an annex, its spindle dropped");
}
my $id = $q->(q{SELECT msg_id FROM spindle_q.md});

# ma: an ack of the moved event, rolled back
is( $q->(qq{BEGIN; SELECT spindle.ack('ma', (SELECT msg_id FROM spindle_q.ma)); ROLLBACK;}),
	't', 'ma: the ack found the moved event (then rolled back)');

# md: taken when due by a dequeue that rolls back
my $wait = 11 - (time - $t0);
sleep($wait) if $wait > 0;
is($q->(q{BEGIN; SELECT msg_id FROM spindle.dequeue('md', 10); ROLLBACK;}),
	$id, 'md: a dequeue takes the moved event when due (then rolls back)');

$node->restart;
is($q->(q{SELECT string_agg(msg_id::text, ',') FROM spindle.dequeue('md', 10)}),
	$id, 'md: after the restart the event is delivered');
is($q->(q{SELECT count(*) FROM spindle.dequeue('md', 10)}), '0',
	'md: once');
is($q->(q{SELECT count(*) FROM spindle.dequeue('ma', 10)}), '1',
	'ma: after the restart the event is delivered');
is($q->(q{SELECT count(*) FROM spindle_q.md}) . $q->(q{SELECT count(*) FROM spindle_q.ma}),
	'00', 'both queues are empty');
verify_ok($node, 'postgres', 'spindle_q.md');
verify_ok($node, 'postgres', 'spindle_q.ma');

done_testing();
