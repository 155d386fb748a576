# Consumers holding claims in open transactions never run a queue out of
# items (issue 18: "consumer state without fixed caps").  A claim of a
# dequeue or an ack holds one of the queue's 256 items until its
# transaction ends; consumers taking events one call at a time in open
# transactions, each call's claim apart from the last (another consumer
# took the events between), used to run the queue out: two such consumers
# failed with 53400 "no room in shared memory for more leases or claims"
# at their 129th dequeue(q, 1), and every other consumer of the queue with
# them.  Now a consumer moves its own purged claims to disk, as runs
# parked PENDING on the transaction that purged them, once the queue's
# items are more than half used, or when none is left (queue.c,
# spill_claims).
#
# Checked: 300 alternating dequeue(q, 1) calls in each of two open
# transactions all succeed, and a third consumer meanwhile gets none of
# their events; a rollback to a savepoint and a rollback give back their
# events (they come back within seconds, as parked runs), a commit
# consumes for good; every event is delivered, none twice; PREPARE is
# still refused to a transaction whose claims were spilled; spilled runs
# of open transactions are looked at less and less often; 800 scheduled
# events cancelled (acknowledged) in two statements; a crash (-m
# immediate) with both transactions open loses nothing.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my $node = spindle_node('claims_spill', "max_prepared_transactions = 2\n");
my $q = sub { $node->safe_psql('postgres', $_[0]) };
$q->(q{
SELECT spindle.create_queue('sp');
SELECT count(*) FROM spindle.enqueue_batch('sp',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 2000) g));
CREATE TABLE got (n int, who text);
});

# two consumers, each in one transaction, taking one event a call in turn
sub alternate
{
	my ($a, $b, $calls, $got) = @_;
	my $errors = 0;
	for my $i (1 .. $calls)
	{
		for my $s ([ 'A', $a ], [ 'B', $b ])
		{
			my ($name, $h) = @$s;
			my $n = $h->query(q{SELECT payload->>'n' FROM spindle.dequeue('sp', 1)});
			if ($h->{stderr} ne '' || $n !~ /^\d+$/)
			{
				diag("$name call $i: $h->{stderr}") if $errors++ < 3;
				$h->{stderr} = '';
				next;
			}
			push @{ $got->{$name} }, $n;
		}
	}
	return $errors;
}

my $a = $node->background_psql('postgres', on_error_stop => 0);
my $b = $node->background_psql('postgres', on_error_stop => 0);
$a->query_safe('BEGIN');
$b->query_safe('BEGIN');
my %got = (A => [], B => []);
is(alternate($a, $b, 150, \%got), 0, 'A and B: 150 dequeues each, no error');
$a->query_safe('SAVEPOINT s');
is(alternate($a, $b, 150, \%got), 0,
	'A (in a savepoint) and B: 150 more each, no error (the old code failed at the 129th)');
is(scalar(@{ $got{A} }) . ',' . scalar(@{ $got{B} }), '300,300', 'each got 300 events');

# a third consumer meanwhile gets none of theirs
my %held = map { $_ => 1 } (@{ $got{A} }, @{ $got{B} });
my @c = split /\n/,
  $q->(q{SELECT payload->>'n' FROM spindle.dequeue('sp', 10)});
is(scalar(@c), 10, 'a third consumer gets 10 events');
is(scalar(grep { $held{$_} } @c), 0, '... none of those A and B hold');
$q->("INSERT INTO got SELECT n, 'C' FROM unnest('{" . join(',', @c) . "}'::int[]) n");
is($q->(q{SELECT count(*) FROM spindle_q.sp}), '1990',
	'plain SQL: what A and B took is still there for others, under MVCC');

# A and B stay open: a consumer's spilled runs are looked at again after
# 1, 2, 4, then every 8 seconds while their transaction runs, not every
# second (review rv7: each consumer call parked every spilled run that
# came due again, 238 bytes of WAL a run a second).  Another consumer
# calls meanwhile (and rolls back what it takes).
my $backed_off = q{SELECT count(*) FROM spindle._run_scan('spindle_q.sp', 0,
	-9223372036854775808, 9223372036854775807)
	WHERE kind = 4 AND due > now() + interval '2500 ms'};
my $far = 0;
for (1 .. 60)
{
	$q->(q{BEGIN; SELECT count(*) FROM spindle.dequeue('sp', 1); ROLLBACK;});
	$far = $q->($backed_off);
	last if $far > 0;
	usleep(250_000);
}
cmp_ok($far, '>', 0,
	"spilled runs of open transactions back off: $far due more than 2.5 s ahead");

# PREPARE is still refused to a transaction that dequeued
my ($ret, $out, $err) = $node->psql('postgres', q{
BEGIN;
SELECT count(*) FROM spindle.dequeue('sp', 1);
PREPARE TRANSACTION 'x';});
like($err, qr/cannot PREPARE a transaction that dequeued/,
	'PREPARE refused after a dequeue');
my $berr = '';
$b->query(q{PREPARE TRANSACTION 'b'});
$berr = $b->{stderr};
$b->{stderr} = '';
like($berr, qr/cannot PREPARE a transaction that dequeued/,
	'PREPARE refused to B, whose claims went to disk');
# the failed PREPARE ended B's transaction: its events come back
$a->query_safe('ROLLBACK TO SAVEPOINT s');
# an event A took in the rolled-back savepoint, its claim spilled: nobody
# holds it now, so an ack purges it (review rv7, finding 2: false until a
# consumer had taken the parked run); that ack rolls back
my $n200 = $got{A}[200];
is( $q->(qq{BEGIN;
	SELECT spindle.ack('sp', (SELECT msg_id FROM spindle_q.sp WHERE payload->>'n' = '$n200'));
	ROLLBACK;}),
	't', 'an ack of an event of the rolled-back savepoint purges it at once');
$a->query_safe('COMMIT');
$a->quit;
$b->quit;
my @kept = @{ $got{A} }[ 0 .. 149 ];
$q->("INSERT INTO got SELECT n, 'A' FROM unnest('{" . join(',', @kept) . "}'::int[]) n");

# drain: the rest comes back, the events of the rollbacks among them
sub drain
{
	my ($who, $expect) = @_;
	for (1 .. 60)
	{
		$q->(qq{INSERT INTO got SELECT (payload->>'n')::int, '$who'
			FROM spindle.dequeue('sp', 1000)});
		last if $q->(q{SELECT count(*) FROM got}) >= $expect;
		usleep(250_000);
	}
}
drain('D', 2000);
is($q->(q{SELECT count(*) || ',' || count(DISTINCT n) || ',' || min(n) || ',' || max(n) FROM got}),
	'2000,2000,1,2000', 'every event delivered once: rollbacks gave theirs back');
my $back = join(',', @{ $got{A} }[ 150 .. 299 ], @{ $got{B} });
is($q->("SELECT count(*) FROM got WHERE who = 'D' AND n = ANY ('{$back}')"),
	'450', "A's events after the savepoint and all of B's came back");
is($q->(q{SELECT count(*) FROM spindle_q.sp}), '0', 'the queue is empty');
verify_ok($node, 'postgres', 'spindle_q.sp', 'verify() is clean');

# Cancelling scheduled events: an ack of a delayed event takes it out of
# its parked run as a claim, so one statement acknowledging 400 of them,
# each its own run, ran the queue's items out (53400) before.
$q->(q{SELECT spindle.create_queue('cancel');
SELECT count(*) FROM (SELECT spindle.enqueue('cancel', jsonb_build_object('n', g),
    delay => (3600 + 2 * g) * interval '1 s') FROM generate_series(1, 1200) g) x;
SELECT count(*) FROM spindle.dequeue('cancel', 2000);});
is($q->(q{SELECT count(*) FILTER (WHERE spindle.ack('cancel', msg_id))
	FROM (SELECT msg_id FROM spindle_q.cancel WHERE (payload->>'n')::int % 3 = 0
	      ORDER BY msg_id) x}),
	'400', '400 scheduled events cancelled by an ack each, in one statement');
is($q->(q{SELECT count(*) FROM (SELECT spindle.ack('cancel', array_agg(msg_id))
	FROM (SELECT msg_id FROM spindle_q.cancel WHERE (payload->>'n')::int % 3 = 1
	      ORDER BY msg_id) x) y}),
	'400', '400 more by one ack of an array');
is($q->(q{SELECT count(*) || ',' || count(*) FILTER (WHERE (payload->>'n')::int % 3 = 2)
	FROM spindle_q.cancel}), '400,400', 'the other 400 are still scheduled');
is($q->(q{SELECT delayed FROM spindle.queues WHERE queue_name = 'cancel'}), '400',
	'spindle.queues counts 400 delayed');
verify_ok($node, 'postgres', 'spindle_q.cancel', 'verify() of cancel is clean');

# a crash with both transactions open loses nothing
$q->(q{TRUNCATE got;
SELECT count(*) FROM spindle.enqueue_batch('sp',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 1000) g));});
$a = $node->background_psql('postgres', on_error_stop => 0);
$b = $node->background_psql('postgres', on_error_stop => 0);
$a->query_safe('BEGIN');
$b->query_safe('BEGIN');
%got = (A => [], B => []);
is(alternate($a, $b, 200, \%got), 0, 'again: 200 dequeues each in open transactions');
$node->stop('immediate');
eval { $a->quit };
eval { $b->quit };
$node->start;
drain('R', 1000);
is($q->(q{SELECT count(*) || ',' || count(DISTINCT n) FROM got}), '1000,1000',
	'after the crash every event is delivered once');
verify_ok($node, 'postgres', 'spindle_q.sp', 'verify() is clean after the crash');

$node->stop;
done_testing();
