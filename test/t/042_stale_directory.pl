# A consumer whose cached directory is older than a committed spindle.
#
# A transaction that creates a spindle (the helper's, normally; here a
# producer's: max_worker_processes leaves no slot for the helper, so the
# producer creates its spindle itself) is visible in snapshots before it sends its invalidations
# (CommitTransaction: the proc array first, then the commit callbacks, then
# the invalidations).  In that window a new session reads the catalog
# afresh and finds the spindle and its event, while an older session's
# directory does not list it yet.  The test module spindle_test_hooks holds
# the producer's COMMIT in that window for a few seconds:
#   - a new session dequeues the event and rolls back: the event goes back
#     to the queue as an item to examine again;
#   - the older session then takes that item: it must deliver the event.
#     Before the fix it took the spindle for dropped, the event for gone,
#     and freed the item: the event stayed behind the head, never delivered
#     again (the CI failure of 037_fault_basebackup, "queue empty within
#     30 s", and of 027_queue_stress).
#   - the same for ack() of the event by msg_id, and for a read() lease.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('stale_dir');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle'
spindle.enable_worker = off
max_worker_processes = 1
autovacuum = off
});
$node->start;
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION spindle;
CREATE FUNCTION delay_commit(int) RETURNS void
  AS 'spindle_test_hooks', 'spindle_test_delay_commit' LANGUAGE C;
SELECT spindle.create_queue('q', events_per_spindle => 1);
});

# the older session: its directory is cached before each window
my $old = $node->background_psql('postgres', on_error_stop => 0);

# Run $what while the producer's COMMIT of two new events is held
# visible-but-not-announced for 6 s: the first goes into the spindle made
# ready ahead by the last creation (known to the older session), the second
# into a spindle the producer's transaction creates.  $what gets both
# msg_ids.  Returns the producer's session.
sub in_window
{
	my ($what) = @_;
	my $n0 = $node->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.q');
	# the older session's directory: up to date before the window
	$old->query_safe(q{SELECT count(*) FROM spindle_q.q});
	my $prod = $node->background_psql('postgres', on_error_stop => 0);
	$prod->query_safe(q{BEGIN});
	$prod->query_safe(q{SELECT delay_commit(6000)});
	my $xid = $prod->query_safe(q{SELECT txid_current()});
	my ($a, $b) = split /\n/,
	  $prod->query_safe(
		q{SELECT spindle.enqueue_batch('q', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[])});
	$prod->query_until(qr/committing/, "\\echo committing\nCOMMIT;\n");
	# visible to a new session (the commit is in the proc array) ...
	$node->poll_query_until('postgres',
		"SELECT count(*) = $n0 + 2 FROM spindle_q.q")
	  or die 'the events never became visible';
	# ... and the second one's spindle was created by that transaction
	is( $node->safe_psql(
			'postgres', qq{
SELECT count(*) FROM spindle.spindle_catalog
 WHERE relation = 'spindle_q.q'::regclass AND $b >= first_no AND $b < first_no + vcount AND xmin::text = '$xid'}),
		'1',
		'the second event is in a spindle its own transaction created');
	$what->($a, $b);
	return $prod;
}

$node->safe_psql('postgres', q{SELECT spindle.enqueue('q', '{"n": 0}')});
is($old->query_safe(q{SELECT count(*) FROM spindle.dequeue('q', 10)}),
	'1', 'the older session dequeues the first event');

# 1. dequeue
my $prod = in_window(
	sub {
		my ($a, $b) = @_;
		is( $node->safe_psql(
				'postgres', q{
BEGIN;
SELECT string_agg(msg_id::text, ',') FROM spindle.dequeue('q', 2);
ROLLBACK;}),
			"$a,$b",
			'a new session dequeues the new events (and rolls back)');
		is( $old->query_safe(
				q{SELECT string_agg(msg_id::text, ',' ORDER BY msg_id) FROM spindle.dequeue('q', 10)}),
			"$a,$b",
			'the older session, whose directory lacks a spindle, dequeues both');
	});
$prod->quit;
is($node->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.q'),
	'0', 'the queue is empty');

# 2. read, then ack by the older session
$prod = in_window(
	sub {
		my ($a, $b) = @_;
		is( $node->safe_psql(
				'postgres', q{SELECT string_agg(msg_id::text, ',') FROM spindle.read('q', 2, '0.2 s')}),
			"$a,$b",
			'a new session leases the new events');
		usleep(400_000);
		is( $old->query_safe(
				q{SELECT string_agg(msg_id::text || ':' || read_count, ',' ORDER BY msg_id) FROM spindle.read('q', 10, '30 s')}),
			"$a:2,$b:2",
			'the older session leases them again once the leases expired');
	});
$prod->quit;

$prod = in_window(
	sub {
		my ($a, $b) = @_;
		is($old->query_safe(qq{SELECT spindle.ack('q', $b)}),
			't', 'the older session acknowledges an event of a spindle it has not heard of');
	});
$prod->quit;
is( $node->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.q'),
	'3', 'the two leased events and the one not acknowledged are left');
is( $node->safe_psql(
		'postgres', q{SELECT count(*) FROM spindle.verify('spindle_q.q')}),
	'0', 'spindle.verify() finds nothing wrong');

$old->quit;
$node->stop;
done_testing();
