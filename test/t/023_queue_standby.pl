# A queue on a streaming standby: after enqueues, dequeues in batches
# (range purges) committed, rolled back and rolled back to a savepoint,
# acks, spindle drops and more enqueues, the standby shows the same rows
# of the queue table and the same spindles as the primary.  A REPEATABLE
# READ transaction on the standby opened before a dequeue and a drop on the
# primary either still sees every event it saw or is cancelled by a
# recovery conflict; it never silently loses rows.
#
# wal_consistency_checking = 'spindle' makes the standby compare each page
# a purge record replays with the primary's image of it.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle'
max_worker_processes = 16
# the test drops spindles itself
spindle.enable_worker = off
wal_consistency_checking = 'spindle'
});
$primary->start;
$primary->safe_psql(
	'postgres', q{
CREATE EXTENSION spindle;
SELECT spindle.create_queue('sq', events_per_spindle => 10);
SELECT spindle.create_queue('rq', events_per_spindle => 20);
});
$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->append_conf(
	'postgresql.conf', q{
hot_standby_feedback = off
max_standby_streaming_delay = 1s
wal_receiver_status_interval = 1s
});
$standby->start;

my $rows_sql = q{
SELECT count(*) || ':' || coalesce(string_agg(msg_id || '=' || (payload->>'n'), ',' ORDER BY msg_id), '')
  FROM spindle_q.sq};
my $payloads_sql = q{
SELECT coalesce(string_agg(payload->>'n', ',' ORDER BY msg_id), '') FROM spindle_q.sq};
my $spindles_sql = q{
SELECT string_agg(spindle_no || ':' || state || ':' || events || ':' || purged_events,
                  ',' ORDER BY spindle_no)
  FROM spindle.spindles WHERE relation = 'spindle_q.sq'::regclass};

sub compare
{
	my ($what) = @_;
	$primary->wait_for_catchup($standby);
	for my $sql ($rows_sql, $spindles_sql)
	{
		my $p = $primary->safe_psql('postgres', $sql);
		my $s = $standby->safe_psql('postgres', $sql);
		is($s, $p,
			$what . ': the standby shows the same '
			  . ($sql eq $rows_sql ? 'rows of the queue' : 'spindles'));
	}
	return;
}

# The payload numbers from $from to $to, as $payloads_sql shows them.
sub numbers { return join(',', map { $_->[0] .. $_->[1] } @_); }

# ---- enqueues --------------------------------------------------------------
$primary->safe_psql(
	'postgres', q{
SELECT count(*) FROM spindle.enqueue_batch('sq',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 25) g));
SELECT count(*) FROM (SELECT spindle.enqueue('sq', jsonb_build_object('n', g))
                        FROM generate_series(26, 30) g) s;
SELECT count(*) FROM spindle.enqueue_batch('sq',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(31, 35) g), '1 hour');
});
compare('after enqueues');

# ---- dequeues in batches ----------------------------------------------------
$primary->safe_psql(
	'postgres', q{
SELECT count(*) FROM spindle.dequeue('sq', 7);
SELECT count(*) FROM spindle.dequeue('sq', 7);
BEGIN;
SELECT count(*) FROM spindle.dequeue('sq', 5);
ROLLBACK;
BEGIN;
SAVEPOINT s;
SELECT count(*) FROM spindle.dequeue('sq', 3);
ROLLBACK TO SAVEPOINT s;
SELECT count(*) FROM spindle.dequeue('sq', 4);
COMMIT;
SELECT count(*) FROM spindle.dequeue('sq', 2);
});
is($primary->safe_psql('postgres', $payloads_sql),
	numbers([ 21, 35 ]), 'primary: 1-20 dequeued, the rolled-back dequeues undone');
compare('after committed and rolled-back dequeues');

# ---- drop ---------------------------------------------------------------------
# Drop the droppable spindles of $table on the primary, retrying while its
# horizon may still lag behind the purge that just committed.
sub drop_spindles
{
	my ($table) = @_;
	my $n = 0;
	for (1 .. 50)
	{
		$n = $primary->safe_psql('postgres',
			"SELECT spindle.drop_spindles('$table')");
		last if $n ne '0';
		usleep(100_000);
	}
	return $n;
}
is(drop_spindles('spindle_q.sq'), '2',
	'spindles 1 and 2 (events 1-20) are full, purged and dropped');
compare('after drop_spindles');
is( $standby->safe_psql(
		'postgres', q{
SELECT count(*) FROM spindle.spindles
 WHERE relation = 'spindle_q.sq'::regclass AND spindle_no <= 2}),
	'0',
	'the dropped spindles are gone on the standby');
is( $standby->safe_psql(
		'postgres', q{
SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'pg_spindle' AND c.relkind = 'r'
   AND c.relam <> (SELECT oid FROM pg_am WHERE amname = 'spindle_meta')
   AND c.oid NOT IN (SELECT segment FROM spindle.spindle_catalog)}),
	'0',
	'no orphan segment on the standby');

# ---- more enqueues, acks, dequeues past delayed events -------------------------
$primary->safe_psql('postgres',
	q{SELECT count(*) FROM spindle.enqueue_batch('sq',
        ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(36, 60) g))});
compare('after more enqueues');

$primary->safe_psql('postgres',
	q{CREATE TABLE leased AS SELECT * FROM spindle.read('sq', 3, '1 hour')});
is($primary->safe_psql('postgres', q{SELECT string_agg(payload->>'n', ',' ORDER BY msg_id) FROM leased}),
	'21,22,23', 'read leases 21-23');
is( $primary->safe_psql(
		'postgres',
		q{SELECT spindle.ack('sq', (SELECT msg_id FROM leased WHERE payload->>'n' = '21'))}),
	't',
	'21 acked');
is( $primary->safe_psql(
		'postgres',
		q{SELECT count(*) FROM spindle.ack('sq', ARRAY(SELECT msg_id FROM leased WHERE payload->>'n' = '22'))}),
	'1',
	'22 acked by an array');
# 24-30 and 36-50: past the lease and the delayed events
is($primary->safe_psql('postgres', q{SELECT count(*) FROM spindle.dequeue('sq', 22)}),
	'22', 'a dequeue of 22 events');
is($primary->safe_psql('postgres', $payloads_sql),
	numbers([ 23, 23 ], [ 31, 35 ], [ 51, 60 ]),
	'primary: the leased event, the delayed ones and the newest are left');
compare('after acks and a dequeue past leased and delayed events');

is(drop_spindles('spindle_q.sq'), '1',
	'the spindle of events 41-50 is full, purged and dropped');
$primary->safe_psql('postgres',
	q{SELECT count(*) FROM spindle.enqueue_batch('sq',
        ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(61, 70) g))});
compare('after a second drop and more enqueues');

# ---- REPEATABLE READ on the standby against dequeue + drop -----------------------
$primary->safe_psql('postgres',
	q{SELECT count(*) FROM spindle.enqueue_batch('rq',
        ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 25) g))});
$primary->wait_for_catchup($standby);

my $rq_sql = q{
SELECT count(*) || ':' || string_agg(payload->>'n', ',' ORDER BY msg_id) FROM spindle_q.rq};
my $all = '25:' . numbers([ 1, 25 ]);

# A REPEATABLE READ transaction on the standby whose snapshot read rq.
# With $unlocked it read in a subtransaction rolled back at once, so that
# it keeps its snapshot but holds no lock on the spindles (one holding a
# lock is cancelled anyway when the standby replays the drop's lock).
# Returns the session, its backend pid and what it saw.
sub open_rr
{
	my ($unlocked) = @_;
	my $rr = $standby->background_psql('postgres', on_error_stop => 0);
	my $pid = $rr->query_safe('SELECT pg_backend_pid()');
	$rr->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
	$rr->query_safe('SAVEPOINT s') if $unlocked;
	my $saw = $rr->query_safe($rq_sql);
	$rr->query_safe('ROLLBACK TO SAVEPOINT s') if $unlocked;
	return ($rr, $pid, $saw);
}

# What the transaction of $rr (backend $pid) sees of rq now, or
# "cancelled" if its query gave nothing and the standby logged that it
# cancelled it (or ended its session) for a recovery conflict (40001).
sub look_again
{
	my ($rr, $pid) = @_;
	my ($out, $ret) = ('', 1);
	eval { ($out, $ret) = $rr->query($rq_sql); };
	my $said = ($rr->{stderr} // '') . ($@ // '');
	eval { $rr->quit; };
	return $out if !$ret && $out =~ /^\d+:/;
	my $log = slurp_file($standby->logfile);
	return 'cancelled'
	  if $log =~
	  /\[$pid\] [^\n]*(ERROR|FATAL):  (canceling statement|terminating connection) due to conflict with recovery/;
	return "no answer: [$out] [$said]";
}

sub check_answer
{
	my ($got, $what) = @_;
	ok($got eq $all || $got eq 'cancelled',
		"$what: the old standby snapshot sees all 25 events or is cancelled")
	  or diag("got: $got");
	note "$what: " . ($got eq $all ? 'saw every event' : $got);
	return;
}

my ($rr_mvcc, $pid_mvcc, $saw_mvcc) = open_rr(1);
my ($rr_unlocked, $pid_unlocked, $saw_unlocked) = open_rr(1);
my ($rr_locked, $pid_locked, $saw_locked) = open_rr(0);
is($saw_mvcc . '|' . $saw_unlocked . '|' . $saw_locked,
	"$all|$all|$all", 'three standby snapshots see the 25 events');

is($primary->safe_psql('postgres', q{SELECT count(*) FROM spindle.dequeue('rq', 20)}),
	'20', 'the primary dequeues the first spindle of rq');
$primary->wait_for_catchup($standby);
check_answer(look_again($rr_mvcc, $pid_mvcc), 'after the dequeue');

is(drop_spindles('spindle_q.rq'), '1', 'the primary drops the purged spindle');
$primary->wait_for_catchup($standby);
check_answer(look_again($rr_unlocked, $pid_unlocked),
	'after the drop, no lock held');
check_answer(look_again($rr_locked, $pid_locked),
	'after the drop, spindle lock held');
is($standby->safe_psql('postgres', $rq_sql),
	'5:' . numbers([ 21, 25 ]), 'a new standby snapshot sees the 5 events left');

is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	't', 'the standby is still in recovery');
$standby->stop;
$primary->stop;
done_testing();
