# A consumer's spilled claims never replace a parked run that still holds
# their events (review rv7 of turn 4, session 11, finding 1).  A delayed
# event that compaction moved into an annex, its spindle then dropped, is
# reached only through its parked run (READY once taken), which stays in
# tree 0 until what consumes it commits.  A consumer that took it in an
# open transaction and then spilled its claims (queue.c, spill_claims)
# parked a PENDING run over it, replacing the READY one; after a rollback
# the PENDING run was taken and cut, the event lived in shared memory only,
# and a crash lost it for good (4 runs in 4).  Claims of events a parked
# run holds are no longer spilled: after the rollback and a crash the event
# is delivered.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my $node = spindle_node('spill_moved',
	"spindle.enable_worker = on\nspindle.naptime = '100ms'\n");
my $q = sub { $node->safe_psql('postgres', $_[0]) };

$q->(q{SELECT spindle.create_queue('mv', 10)});
my $t0 = time();
$q->(q{SELECT count(spindle.enqueue('mv', jsonb_build_object('n', g),
	delay => CASE WHEN g = 3 THEN interval '10 s' ELSE interval '0' END))
	FROM generate_series(1, 20) g});
is($q->(q{SELECT count(*) FROM spindle.dequeue('mv', 100)}), '19',
	'19 events dequeued, the delayed one parked');
ok( defined wait_for(
		$node, 'postgres', q{
SELECT count(*) FILTER (WHERE state = 'annex') = 1
   AND count(*) FILTER (WHERE spindle_no = 1) = 0
  FROM spindle.spindles WHERE relation = 'spindle_q.mv'::regclass}, 60),
	'the worker moved the delayed event into an annex and dropped its spindle');
my $mid = $q->(q{SELECT msg_id FROM spindle_q.mv});
$q->(q{SELECT count(*) FROM spindle.enqueue_batch('mv',
	ARRAY(SELECT jsonb_build_object('f', g) FROM generate_series(1, 600) g))});
usleep(1_000_000 * (11 - (time() - $t0))) if time() - $t0 < 11;

# A takes the moved event, then A, B and D take one event a call in turn
# in open transactions, so that their claims spill
my @s = map { $node->background_psql('postgres', on_error_stop => 0) } 1 .. 3;
my ($a, $b, $d) = @s;
$_->query_safe('BEGIN') for @s;
is($a->query_safe(q{SELECT msg_id FROM spindle.dequeue('mv', 1)}), $mid,
	'A takes the moved event, due now');
for my $i (1 .. 150)
{
	$_->query(q{SELECT msg_id FROM spindle.dequeue('mv', 1)}) for @s;
}
is($q->(qq{SELECT kind FROM spindle._run_lookup('spindle_q.mv', 0, $mid)}), '1',
	'its parked run stays READY, not replaced by a spilled PENDING one');
$b->query_safe('COMMIT');
$d->query_safe('COMMIT');
$a->query_safe('ROLLBACK');
$_->quit for @s;

# a consumer takes it back and rolls back too; then a crash
my $c = $node->background_psql('postgres', on_error_stop => 0);
$c->query_safe('BEGIN');
my $back = 0;
for (1 .. 600)
{
	my $got = $c->query(q{SELECT msg_id FROM spindle.dequeue('mv', 1)});
	if ($got eq $mid) { $back = 1; last; }
	usleep(20_000) if $got eq '';
}
ok($back, 'after the rollback the moved event is delivered again');
$c->query_safe('ROLLBACK');
$c->quit;
$node->stop('immediate');
$node->start;

my %got;
my $idle = 0;
while ($idle < 5)
{
	my @r = split /\n/, $q->(q{SELECT msg_id FROM spindle.dequeue('mv', 1000)});
	$got{$_}++ for @r;
	if (@r) { $idle = 0 } else { $idle++; usleep(500_000) }
}
ok($got{$mid}, 'after the crash the moved event is delivered');
is($q->(q{SELECT count(*) FROM spindle_q.mv}), '0', 'the queue is empty');
is(scalar(grep { $_ > 1 } values %got), 0, 'nothing delivered twice after the crash');
verify_ok($node, 'postgres', 'spindle_q.mv', 'verify() is clean');

$node->stop;
done_testing();
