# Consumer states are evicted when other queues need the room (review
# finding 12: the 257th queue consumed on a server failed until restart).
# With spindle.max_queues = 4, two databases consume 40 queues each in
# turn; a queue holding a lease, a queue with a sleeping consumer and a
# queue with a delayed and a pending event keep or rebuild what they had;
# only when every state holds a lease does a call fail, with 53400.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;
use IPC::Run;

my $node = spindle_node('queue_state_eviction', "spindle.max_queues = 4\n");
$node->safe_psql('postgres', 'CREATE DATABASE other;');
$node->safe_psql('other', 'CREATE EXTENSION spindle;');
for my $db ('postgres', 'other')
{
	$node->safe_psql($db, q{
SELECT spindle.create_queue('t' || g) FROM generate_series(1, 40) g;
SELECT spindle.enqueue('t' || g, jsonb_build_object('q', g, 'n', n))
  FROM generate_series(1, 40) g, generate_series(1, 3) n;
});
}

# a lease on queue 'held' that must outlive every eviction
$node->safe_psql('postgres', q{
SELECT spindle.create_queue('held');
SELECT spindle.enqueue('held', '{"h": 1}');
SELECT spindle.enqueue('held', '{"h": 2}');
});
my $leased = $node->safe_psql('postgres',
	q{SELECT msg_id FROM spindle.read('held', 1, '1 hour')});
is($leased, '1', 'the first event of held is leased');

# a queue with a delayed event and an event of an open transaction
$node->safe_psql('postgres', q{
SELECT spindle.create_queue('late');
SELECT spindle.enqueue('late', '{"late": 1}', delay => '3 s');
SELECT spindle.enqueue('late', '{"now": 1}');
});
my $open = $node->background_psql('postgres');
$open->query_safe(q{BEGIN; SELECT spindle.enqueue('late', '{"pending": 1}');});
is( $node->safe_psql('postgres',
		q{SELECT string_agg(payload::text, ',') FROM spindle.dequeue('late', 10)}),
	'{"now": 1}',
	'late: only the ordinary event is delivered yet');

# a long poll on 'sleepy' (60 s), asleep before the churn
$node->safe_psql('postgres', q{SELECT spindle.create_queue('sleepy');});
my ($in, $out, $err) = ('', '', '');
my $waiter = IPC::Run::start(
	[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres') ],
	'<', \$in, '>', \$out, '2>', \$err, IPC::Run::timeout(180));
$in .= "SELECT payload FROM spindle.dequeue('sleepy', 1, wait => '60 s');\n\\q\n";
$waiter->pump_nb;
ok( defined wait_for(
		$node, 'postgres',
		"SELECT waiting_consumers = 1 FROM spindle.queues WHERE queue_name = 'sleepy'",
		30),
	'the long poll sleeps on sleepy');

# the churn: every queue of both databases, three rounds, one event each
my %got;
for my $round (1 .. 3)
{
	for my $db ('postgres', 'other')
	{
		my $r = $node->safe_psql($db, q{
SELECT string_agg(coalesce((SELECT payload->>'n' FROM spindle.dequeue('t' || g, 1)), '-'), ' ' ORDER BY g)
  FROM generate_series(1, 40) g});
		$got{"$db $round"} = $r;
	}
}
my $expect = sub { join(' ', ($_[0]) x 40) };
for my $db ('postgres', 'other')
{
	is($got{"$db $_"}, $expect->($_), "$db: round $_ takes event $_ of each of 40 queues")
	  for 1 .. 3;
}
cmp_ok(
	$node->safe_psql('postgres',
		q{SELECT count(*) FROM spindle.dequeue('t1', 1)}),
	'==', 0, 't1 is empty: nothing delivered twice after its state was evicted');

# the lease held: its event is neither delivered again nor lost
is( $node->safe_psql('postgres',
		q{SELECT string_agg(payload::text, ',') FROM spindle.dequeue('held', 10)}),
	'{"h": 2}',
	'held: the leased event stays hidden through the evictions');
is($node->safe_psql('postgres', "SELECT spindle.ack('held', $leased)"),
	't', 'held: the lease is still there to acknowledge');

# the sleeper's state stayed: an enqueue wakes it at once
$node->safe_psql('postgres', q{SELECT spindle.enqueue('sleepy', '{"wake": 1}')});
$waiter->finish;
is($out, qq({"wake": 1}\n), 'the long poll is woken by the enqueue');

# the delayed and the pending event come back after the eviction
$open->query_safe('COMMIT');
$open->quit;
ok( defined wait_for(
		$node, 'postgres',
		q{SELECT count(*) = 0 FROM spindle_q.late WHERE visible_at > now()}, 30),
	'late: the delay has passed');
is( $node->safe_psql('postgres',
		q{SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle.dequeue('late', 10)}),
	'{"late": 1},{"pending": 1}',
	'late: the delayed and the formerly pending events are delivered once');

# leases are parked on disk and pin no state: four queues with a lease
# each, and a fifth queue is served; the leases outlive the evictions
$node->safe_psql('postgres', q{
SELECT spindle.enqueue('t' || g, '{"again": 1}') FROM generate_series(1, 4) g;
SELECT count(*) FROM generate_series(1, 4) g, LATERAL spindle.read('t' || g, 1, '1 hour');});
is($node->safe_psql('postgres', q{SELECT count(*) FROM spindle.dequeue('t5', 1)}),
	'0', 'a fifth queue is served while four hold leases (it is empty)');
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM generate_series(1, 4) g, LATERAL spindle.dequeue('t' || g, 10)}),
	'0', 'the four leases outlived the evictions: nothing to dequeue');
is( $node->safe_psql('postgres',
		q{SELECT sum(leased) FROM spindle.queues WHERE queue_name IN ('t1', 't2', 't3', 't4')}),
	'4', 'spindle.queues still counts the four leases');

# every state needed: four consumers asleep on four queues, a fifth queue
# is refused with a hint, and served once a sleeper is gone
my @sleepers;
for my $g (1 .. 4)
{
	my ($sin, $sout, $serr) = ('', '', '');
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('postgres') ],
		'<', \$sin, '>', \$sout, '2>', \$serr, IPC::Run::timeout(180));
	$sin .= "SELECT count(*) FROM spindle.dequeue('t$g', 1, wait => '20 s');\n\\q\n";
	$h->pump_nb;
	push @sleepers, $h;
}
ok( defined wait_for(
		$node, 'postgres',
		q{SELECT sum(waiting_consumers) = 4 FROM spindle.queues WHERE queue_name IN ('t1', 't2', 't3', 't4')},
		30),
	'four consumers sleep on t1 .. t4');
my ($ret, $stdout, $stderr) = $node->psql('postgres',
	q{SELECT count(*) FROM spindle.dequeue('t5', 1)});
like($stderr, qr/too many queues in use/, 'a fifth queue fails while four states have sleepers');
like($stderr, qr/waiting consumers/, 'the detail says what holds the states');
$node->safe_psql('postgres', q{SELECT spindle.enqueue('t1', '{"wake": 1}')});
$sleepers[0]->finish;
is($node->safe_psql('postgres', q{SELECT count(*) FROM spindle.dequeue('t5', 1)}),
	'0', 'once a sleeper is woken, the fifth queue is served (it is empty)');
$node->safe_psql('postgres',
	q{SELECT spindle.enqueue('t' || g, '{"wake": 1}') FROM generate_series(2, 4) g});
$_->finish for @sleepers[1 .. 3];

# a call cancelled while it holds its pin (asleep in a long poll) leaves
# no pin behind: each state must be evictable again after each cancelled
# call
for my $g (6 .. 9)
{
	my ($r, $o, $e) = $node->psql('postgres',
		"SET statement_timeout = '300ms'; SELECT count(*) FROM spindle.dequeue('t$g', 1, wait => '10 s')");
	like($e, qr/canceling statement due to statement timeout/, "t$g: the long poll is cancelled");
}
is($node->safe_psql('postgres', q{SELECT count(*) FROM spindle.dequeue('t10', 1)}),
	'0', 'the state of a cancelled call is evicted for another queue');

$node->stop;
done_testing();
