# An acknowledgement of a parked lease cuts the lease's run from tree 0
# just before its commit record (queue.c, cut_acked_leases).  A crash in
# between must leave the event in the queue, deliverable: the ack did not
# commit.  spindle_test_hooks' crash_pre_commit() kills the backend at
# PRE_COMMIT, after spindle's callback and before the commit record, with
# the WAL written so far flushed.  (A head kept on disk lost the event
# here: docs/reviews/head-on-disk-review.md.)
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my $node = spindle_node('ack_crash_below_head',
	"autovacuum = off\nspindle.enable_worker = on\nspindle.naptime = 100ms\nrestart_after_crash = on\n");
$node->safe_psql('postgres', q{
SELECT spindle.create_queue('q');
SELECT count(*) FROM spindle.enqueue_batch('q',
    ARRAY(SELECT jsonb_build_object('e', g) FROM generate_series(1, 2000) g));
});

# e1 leased for an hour, the rest consumed: the head moves past e2000
is($node->safe_psql('postgres',
		"SELECT payload->>'e' FROM spindle.read('q', 1, '1 hour')"),
	'1', 'e1 leased');
my $got = 0;
$got += $node->safe_psql('postgres', "SELECT count(*) FROM spindle.dequeue('q', 1000)")
  while $got < 1999;
is($got, 1999, 'the 1 999 others consumed');
# the worker writes the moved head every naptime
sleep 2;

# a fresh session: the test hook's callback first, then spindle's
my ($ret, $out, $err) = $node->psql('postgres', q{
CREATE FUNCTION pg_temp.crash_pre_commit() RETURNS void
  AS 'spindle_test_hooks', 'spindle_test_crash_pre_commit' LANGUAGE C;
BEGIN;
SELECT pg_temp.crash_pre_commit();
SELECT spindle.ack('q', (SELECT msg_id FROM spindle_q.q WHERE payload->>'e' = '1'));
COMMIT;
});
isnt($ret, 0, 'the acknowledging backend was killed at its commit');
$node->poll_query_until('postgres', 'SELECT 1', '1')
  or die 'the server did not come back';

is($node->safe_psql('postgres', "SELECT count(*) FROM spindle_q.q"),
	'1', 'the acknowledgement did not commit: e1 is still in the queue');
is($node->safe_psql('postgres',
		"SELECT string_agg(payload->>'e', ',') FROM spindle.dequeue('q', 10)"),
	'1', 'e1 is delivered again after the crash');
is($node->safe_psql('postgres', "SELECT count(*) FROM spindle_q.q"),
	'0', 'nothing else was left');
verify_ok($node, 'postgres', 'spindle_q.q');

# the head comes back up once the worker writes it again
$node->safe_psql('postgres', q{
SELECT count(*) FROM spindle.enqueue_batch('q',
    ARRAY(SELECT jsonb_build_object('e', g) FROM generate_series(2001, 2010) g));
SELECT count(*) FROM spindle.dequeue('q', 100);
});
is($node->safe_psql('postgres', "SELECT count(*) FROM spindle_q.q"),
	'0', 'the queue drains after the crash');

$node->stop;
done_testing();
