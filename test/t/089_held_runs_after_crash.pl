# After a crash the state of a queue is rebuilt with its head at the
# oldest spindle, and parked runs that are due but lie past that head are
# "held": taken once the head has passed them, by the same call.  Each
# attempt of the call used to give every held run a new reference in
# tree 1 one probe past the batch; when the batch ended with READY runs
# made due at "now - 1" (ready_now, for runs an aborted consumer had
# taken), those new references climbed through the last microsecond
# before the call's limit and past it, and the call stopped seeing them
# due: read(q, 10000) returned a third of the events that were due, the
# rest one call later (seen as a flake of TAP 035).  Now a held run keeps
# its reference.
#
# Set-up: 2N events; the first N leased for an hour and the even ones
# acked (N/2 single-event leases), the next N leased for a second and the
# even ones acked; once those leases end, a dequeue in an open transaction
# takes them (they become READY runs on disk) and its backend is killed.
# After the restart the N/2 hour-long leases are handed back one by one
# (set_visibility 0).  One read must return all N events.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;
use Time::HiRes qw(usleep);

my $n = 100;
my $node = spindle_node('held_runs_after_crash',
	"autovacuum = off\nrestart_after_crash = on\n");
my $q = sub { $node->safe_psql('postgres', $_[0]) };

$q->(q{SELECT spindle.create_queue('h')});
$q->(
	"SELECT count(*) FROM spindle.enqueue_batch('h', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 2 * $n)))"
);
is($q->("SELECT count(*) FROM spindle.read('h', $n, '1 hour')"),
	$n, "$n events leased for an hour");
is( $q->(
		"SELECT count(*) FROM spindle.ack('h', ARRAY(SELECT g FROM generate_series(2, $n, 2) g))"
	),
	$n / 2,
	'the even ones acked: single-event leases');
is($q->("SELECT count(*) FROM spindle.read('h', $n, '1 second')"),
	$n, "$n more leased for a second");
is( $q->(
		"SELECT count(*) FROM spindle.ack('h', ARRAY(SELECT g FROM generate_series($n + 2, 2 * $n, 2) g))"
	),
	$n / 2,
	'their even ones acked');
sleep 2;

# a consumer takes the ended leases (READY on disk) and dies
my $victim = $node->background_psql('postgres', on_error_stop => 0);
my $vpid = $victim->query_safe('SELECT pg_backend_pid()');
$victim->query_safe('BEGIN');
is($victim->query_safe("SELECT count(*) FROM spindle.dequeue('h', $n)"),
	$n / 2, 'an open transaction dequeues the events whose leases ended');
# its parks reach the disk before the kill (no commit flushes them)
$q->('SELECT pg_switch_wal()');
ok(kill9_and_wait($node, $vpid), 'SIGKILL of that consumer: the server restarted');
eval { $victim->quit; };

is( $q->(
		"SELECT count(*) FILTER (WHERE spindle.set_visibility('h', g, '0')) FROM generate_series(1, $n, 2) g"
	),
	$n / 2,
	'the hour-long leases outlived the crash and are handed back');
is( $q->(
		"SELECT count(*) || ':' || count(DISTINCT msg_id) || ':' || count(*) FILTER (WHERE msg_id <= $n AND read_count = 2) FROM spindle.read('h', 10000, '1 hour')"
	),
	"$n:$n:" . ($n / 2),
	'one read returns every due event once, the handed-back ones read twice');
is($q->("SELECT count(*) FROM spindle.read('h', 10000, '1 hour')"),
	'0', 'nothing is left for a second read');
is($q->("SELECT count(*) FROM spindle.verify('spindle_q.h')"),
	'0', 'verify() finds nothing');

$node->stop;
done_testing();
