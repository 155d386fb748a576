# VACUUM's freeze of the consume log and hot standbys (docs/design.md,
# "Consume log (built)", review of the writer side, finding 4).  An entry
# whose xid a standby snapshot does not see committed leaves its events
# visible to that snapshot; once VACUUM of the consumer relation makes
# the entry FROZEN (committed for every reader), the same snapshot would
# see them vanish.  As heap's freeze, the freeze must write a standby
# conflict first: with hot_standby_feedback off, a standby REPEATABLE READ
# transaction older than the freeze limit is cancelled (SQLSTATE 40001),
# it never goes on with fewer events.  Both VACUUM (FREEZE) and VACUUM
# (FULL, FREEZE) of the consumer relation freeze.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my ($primary, $standby) = standby_pair(
	'freeze_', q{
max_worker_processes = 16
autovacuum = off
# settle would fold the entries (with a conflict of its own) first
spindle.enable_worker = off
spindle.consume_log = on
}, q{
hot_standby_feedback = off
max_standby_streaming_delay = 100ms
wal_receiver_status_interval = 1s
log_error_verbosity = verbose
});

# A standby REPEATABLE READ transaction counting spindle_q.$q, in a
# subtransaction rolled back at once: the transaction keeps its snapshot
# but no lock of the consumer relation, whose AccessExclusiveLock (VACUUM
# FULL) would cancel it anyway.  The session, its pid and the count.
sub open_rr
{
	my ($q) = @_;
	my $rr = $standby->background_psql('postgres', on_error_stop => 0);
	my $pid = $rr->query_safe('SELECT pg_backend_pid()');
	$rr->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
	$rr->query_safe('SAVEPOINT s');
	my $count = $rr->query_safe("SELECT count(*) FROM spindle_q.$q");
	$rr->query_safe('ROLLBACK TO SAVEPOINT s');
	return ($rr, $pid, $count);
}

# Count again in that transaction: the count, or "cancelled" if the
# standby cancelled it for a recovery conflict.
sub count_again
{
	my ($rr, $pid, $q) = @_;
	return count_or_cancelled($standby, $rr, $pid,
		"SAVEPOINT t; SELECT count(*) FROM spindle_q.$q; ROLLBACK TO SAVEPOINT t"
	);
}

# dequeue 4 of 10 events after the standby snapshot, then freeze the
# entry with $vacuum; the old snapshot must see 10 events or be cancelled
sub freeze_case
{
	my ($q, $vacuum) = @_;
	$primary->safe_psql('postgres', qq{
SELECT spindle.create_queue('$q');
SELECT count(*) FROM (SELECT spindle.enqueue('$q', jsonb_build_object('n', g))
  FROM generate_series(1, 10) g) e;
});
	$primary->wait_for_catchup($standby);
	my ($rr, $pid, $count) = open_rr($q);
	is($count, '10', "$q: the standby snapshot sees 10 events");

	my $crel = $primary->safe_psql('postgres',
		"SELECT 'pg_spindle.c' || 'spindle_q.$q'::regclass::oid");
	my $frozen = $primary->safe_psql('postgres', qq{
SELECT count(*) FROM spindle.dequeue('$q', 4);
SELECT pg_current_xact_id() IS NOT NULL;
SELECT pg_current_xact_id() IS NOT NULL;
$vacuum $crel;
SELECT count(*) FROM spindle._run_scan('spindle_q.$q', 2, 0, 1000000000)
 WHERE due = timestamptz '2000-01-01 00:00:00.000002+00';
});
	is((split /\n/, $frozen)[-1], '1', "$q: $vacuum froze the entry");
	$primary->wait_for_catchup($standby);

	my $got = count_again($rr, $pid, $q);
	ok($got eq '10' || $got eq 'cancelled',
		"$q: after $vacuum, the old standby snapshot sees 10 events or is cancelled")
	  or diag("got: $got");
	is($standby->safe_psql('postgres', "SELECT count(*) FROM spindle_q.$q"),
		'6', "$q: a new standby snapshot sees the 6 events left");
	return;
}

freeze_case('fz', 'VACUUM (FREEZE)');
freeze_case('fzf', 'VACUUM (FULL, FREEZE)');

done_testing();
