# 1 000 producer transactions open at once on one queue (issue 18: review
# finding 1 said about 250 of them made every dequeue fail with 53400).
# Each open producer is a prepared transaction that enqueued one event,
# between two committed events.  Consumers must deliver every committed
# event meanwhile, without an error; the runs pending on open producers
# beyond what a queue keeps in shared memory are parked on disk and looked
# at again each second.  Then half the producers commit and half roll
# back: each committed event is delivered exactly once, no rolled-back
# one ever.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my $node = spindle_node('open_producers', q{
max_prepared_transactions = 1000
});
$node->safe_psql('postgres', q{
SELECT spindle.create_queue('op');
CREATE TABLE got (msg_id bigint, tag text);
});

# 1 000 open producers, each between two committed events
my $script = '';
for my $i (1 .. 1000)
{
	$script .= "SELECT spindle.enqueue('op', '{\"tag\": \"c$i\"}');\n";
	$script .= "BEGIN; SELECT spindle.enqueue('op', '{\"tag\": \"p$i\"}'); "
	  . "PREPARE TRANSACTION 'p$i';\n";
}
$script .= "SELECT spindle.enqueue('op', '{\"tag\": \"c1001\"}');\n";
$node->safe_psql('postgres', $script);
is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'),
	'1000', '1 000 producer transactions are open');

# Take until nothing comes: every call must succeed.
sub drain
{
	my ($rounds) = @_;
	my $errors = 0;
	for (1 .. $rounds)
	{
		my ($ret, $out, $err) = $node->psql('postgres', q{
WITH d AS (SELECT msg_id, payload->>'tag' AS tag FROM spindle.dequeue('op', 1000))
INSERT INTO got SELECT * FROM d RETURNING 1});
		$errors++ if $ret != 0;
		diag($err) if $ret != 0;
		last if $ret == 0 && $out eq '';
	}
	return $errors;
}

is(drain(20), 0, 'no dequeue fails while 1 000 producers are open');
is( $node->safe_psql('postgres', q{
SELECT count(*) || ':' || count(DISTINCT msg_id) FROM got WHERE tag LIKE 'c%'}),
	'1001:1001', 'every committed event is delivered once meanwhile');
is($node->safe_psql('postgres', q{SELECT count(*) FROM got WHERE tag LIKE 'p%'}),
	'0', 'no event of an open producer is delivered');

# half of them commit, half roll back
my $end = '';
for my $i (1 .. 1000)
{
	$end .= ($i % 2 ? 'COMMIT' : 'ROLLBACK') . " PREPARED 'p$i';\n";
}
$node->safe_psql('postgres', $end);
# parked pending runs are looked at again a second later
my $deadline = time() + 60;
while (time() < $deadline)
{
	drain(5);
	last if $node->safe_psql('postgres',
		q{SELECT count(*) FROM got WHERE tag LIKE 'p%'}) >= 500;
	sleep 1;
}
is( $node->safe_psql('postgres', q{
SELECT count(*) || ':' || count(DISTINCT msg_id) FROM got WHERE tag LIKE 'p%'}),
	'500:500', 'each committed producer event is delivered once');
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM got
 WHERE tag LIKE 'p%' AND substr(tag, 2)::int % 2 = 0}),
	'0', 'no rolled-back event is delivered');
is($node->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.op'),
	'0', 'the queue is empty');
is($node->safe_psql('postgres', q{SELECT count(*) FROM spindle.verify('spindle_q.op')}),
	'0', 'verify() finds nothing wrong');

$node->stop;
done_testing();
