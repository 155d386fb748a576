# Runs taken back and not settled when the server crashed come back at
# once after the restart, with their read counts.  A lease that ends is
# taken back by the next consumer call: its run stays parked READY for
# PARK_RETRY (30 s) while the item made of it decides (here a dequeue whose
# transaction is still open when the server crashes).  Before, a state
# rebuilt after the crash waited out those 30 s: nothing examined the
# events meanwhile.  Now a state loaded afresh makes the READY runs due
# within PARK_RETRY due at once (no item holds them: a restart leaves
# none, and a state is never evicted while an item with a read count
# exists).
#
# Three events leased for 1 s; once the leases ended, a dequeue(q, 3) in a
# transaction left open takes them (read_count 1 each); another session's
# commit flushes the WAL; the server crashes (immediate).  After the
# restart a read(q, 3) returns the three at once with read_count 2, and a
# fourth event, delayed 20 s, is not returned before its time.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my $node = spindle_node('ready_after_crash', q{
autovacuum = off
});

$node->safe_psql('postgres', q{
SELECT spindle.create_queue('rc');
SELECT count(*) FROM spindle.enqueue_batch('rc',
  ARRAY(SELECT jsonb_build_object('e', 'e' || i) FROM generate_series(1, 3) i));
SELECT spindle.enqueue('rc', jsonb_build_object('e', 'e4'), delay => '20 s');
});
is(read_events($node, 'rc', 3, '1 s', 'rc: read'), 'e1:1,e2:1,e3:1',
	'three events leased for 1 s');
my $t_leased = time();
sleep_until($t_leased + 1.5);

my $s = $node->background_psql('postgres', on_error_stop => 0);
$s->query_safe('BEGIN');
is( $s->query_safe(
		q{SELECT string_agg((payload->>'e') || ':' || read_count, ',' ORDER BY msg_id) FROM spindle.dequeue('rc', 3)}),
	'e1:1,e2:1,e3:1',
	'a dequeue in an open transaction takes them back once the leases ended');
# a commit with a transaction id flushes the WAL: the READY runs are on disk
$node->safe_psql('postgres', 'CREATE TABLE flushed (t text)');
$node->stop('immediate');
$s->quit;
$node->start;

my $t0 = time();
is(read_events($node, 'rc', 3, '1 hour', 'rc: read after the crash'),
	'e1:2,e2:2,e3:2',
	'after the crash the three come at once, each read once more');
cmp_ok(time() - $t0, '<', 10, 'at once, not after PARK_RETRY');
is(read_events($node, 'rc', 3, '1 hour', 'rc: read again'), '',
	'the delayed event is not due yet');

$node->stop;
done_testing();
