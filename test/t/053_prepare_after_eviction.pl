# Review of 211ce7a: docs/queues.md promises that "a transaction that
# dequeued cannot be prepared (PREPARE TRANSACTION is refused, 0A000)".
# The refusal looks for this backend's claims in the queue's state
# (holds_claims); once another queue's consumer evicted that state (a
# dequeue's claims are evictable), the claims are gone and PREPARE is
# accepted: whether it is refused depends on other sessions' traffic.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my $node = spindle_node('prepare_after_eviction',
	"max_prepared_transactions = 2\nspindle.max_queues = 2\n");
$node->safe_psql('postgres', q{
SELECT spindle.create_queue('q' || g) FROM generate_series(1, 3) g;
SELECT spindle.enqueue('q' || g, jsonb_build_object('n', n))
  FROM generate_series(1, 3) g, generate_series(1, 3) n;
});

# without eviction: refused
my $s = $node->background_psql('postgres', on_error_stop => 0);
$s->query_safe(q{BEGIN; SELECT msg_id FROM spindle.dequeue('q1', 1);});
$s->query(q{PREPARE TRANSACTION 'p0';});
like($s->{stderr}, qr/cannot PREPARE a transaction that dequeued/,
	'PREPARE after a dequeue is refused');
$s->{stderr} = '';
$s->query(q{ROLLBACK;});
$s->{stderr} = '';

# the same, after two other queues were consumed (max_queues = 2)
$s->query_safe(q{BEGIN; SELECT msg_id FROM spindle.dequeue('q1', 1);});
$node->safe_psql('postgres', q{
SELECT count(*) FROM spindle.dequeue('q2', 1);
SELECT count(*) FROM spindle.dequeue('q3', 1);
SELECT count(*) FROM spindle.dequeue('q2', 1);
});
$s->{stderr} = '';
$s->query(q{PREPARE TRANSACTION 'p1';});
like($s->{stderr}, qr/cannot PREPARE a transaction that dequeued/,
	'PREPARE after a dequeue is refused after its queue state was evicted too');
$s->query(q{ROLLBACK;});
$node->safe_psql('postgres', q{ROLLBACK PREPARED 'p1'})
  if $node->safe_psql('postgres',
	q{SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'p1'}) eq '1';
$s->quit;

done_testing();
