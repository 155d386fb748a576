# Hot standby and dropped spindles: a standby snapshot that still needs
# rows of a spindle the primary drops is never answered wrongly.
#
# With hot_standby_feedback off, the primary's horizon ignores standby
# snapshots, so it may drop a spindle whose deleted rows a standby
# REPEATABLE READ transaction still sees.  As for heap's DELETE + VACUUM,
# replay must then cancel that transaction with a recovery conflict
# (SQLSTATE 40001); it must never go on and count the rows as gone.  Both
# drop_spindles() and the background worker drop spindles.
#
# With hot_standby_feedback on, the primary keeps the spindle while the
# standby transaction is open, and drops it once it has ended.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;
use Time::HiRes qw(usleep);

my ($primary, $standby) = standby_pair(
	'', q{
max_worker_processes = 16
spindle.naptime = 200ms
# on only for the worker case below
spindle.enable_worker = off
# the standby checks that replaying each heap2 record (the conflict record
# among them) gives the primary's page
wal_consistency_checking = 'heap2'
}, q{
hot_standby_feedback = off
max_standby_streaming_delay = 1s
wal_receiver_status_interval = 1s
log_error_verbosity = verbose
});

# Drop the droppable spindles of $table on the primary, retrying while the
# primary's xmin horizon may still lag behind the DELETE that just
# committed; returns how many went.
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

# A REPEATABLE READ transaction on the standby, its snapshot taken by
# counting $table.  With $unlocked, the count runs in a subtransaction
# rolled back at once, so that the transaction keeps its snapshot but no
# lock on the spindles it read: a transaction still holding such a lock is
# cancelled anyway when the standby replays the drop's AccessExclusiveLock;
# one whose snapshot came from elsewhere (another statement, a rolled-back
# subtransaction, pg_dump, which locks the table but not its spindles) is
# not.  Returns the session, its backend pid and the count.
sub open_rr
{
	my ($table, $unlocked) = @_;
	my $rr = $standby->background_psql('postgres', on_error_stop => 0);
	my $pid = $rr->query_safe('SELECT pg_backend_pid()');
	$rr->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
	$rr->query_safe('SAVEPOINT s') if $unlocked;
	my $count = $rr->query_safe("SELECT count(*) FROM $table");
	$rr->query_safe('ROLLBACK TO SAVEPOINT s') if $unlocked;
	return ($rr, $pid, $count);
}

# Count $table again in the standby transaction of backend $pid.  Returns
# the count, or "cancelled" if the query gave no count and the standby
# logged that it cancelled that backend's query or terminated its
# connection for a recovery conflict (SQLSTATE 40001), or what psql said.
sub count_again
{
	my ($rr, $pid, $table) = @_;
	return count_or_cancelled($standby, $rr, $pid,
		"SELECT count(*) FROM $table");
}

# Either every row, or a recovery conflict; never a silent wrong answer.
sub check_standby_answer
{
	my ($got, $rows, $what) = @_;
	ok( $got eq $rows || $got eq 'cancelled',
		"$what: the old standby snapshot sees all $rows rows or is cancelled by a recovery conflict"
	) or diag("got: $got");
	return;
}

# ---- hot_standby_feedback off: drop_spindles() ----------------------------
$primary->safe_psql(
	'postgres', q{
CREATE TABLE t (id int) USING spindle WITH (events_per_spindle = 20);
CREATE INDEX t_id ON t (id);
INSERT INTO t SELECT generate_series(1, 25);
});
$primary->wait_for_catchup($standby);

my ($rr, $pid, $count) = open_rr('t', 1);
is($count, '25', 'standby snapshot taken: 25 rows');

$primary->safe_psql('postgres', 'DELETE FROM t WHERE id <= 20');
is(drop_spindles('t'), '1',
	'feedback off: the primary drops the full, purged spindle');
$primary->wait_for_catchup($standby);

check_standby_answer(count_again($rr, $pid, 't'),
	'25', 'feedback off, drop_spindles');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM t'),
	'5', 'a new standby snapshot sees the 5 remaining rows');

# ---- hot_standby_feedback off: the worker ---------------------------------
# A session on the primary holding a lock on the spindle but no snapshot
# (READ COMMITTED, between statements) keeps the worker from dropping the
# purged spindle for a few rounds, so that the drop then goes by the
# worker's cached count.
$primary->safe_psql(
	'postgres', q{
CREATE TABLE w (id int) USING spindle WITH (events_per_spindle = 20);
CREATE INDEX w_id ON w (id);
INSERT INTO w SELECT generate_series(1, 25);
});
$primary->wait_for_catchup($standby);
($rr, $pid, $count) = open_rr('w', 1);
is($count, '25', 'standby snapshot taken on w: 25 rows');

my $w1_seg = $primary->safe_psql(
	'postgres', q{
SELECT 'pg_spindle.' || c.relname FROM spindle.spindle_catalog sc
  JOIN pg_class c ON c.oid = sc.segment
 WHERE sc.relation = 'w'::regclass AND sc.spindle_no = 1});
my $reader = $primary->background_psql('postgres');
$reader->query_safe('BEGIN');
$reader->query_safe("LOCK TABLE $w1_seg IN ACCESS SHARE MODE");
$primary->safe_psql('postgres', 'DELETE FROM w WHERE id <= 20');
$primary->append_conf('postgresql.conf', "spindle.enable_worker = on\n");
$primary->reload;
my $last_run_sql =
  q{SELECT max(last_run) FROM spindle.worker WHERE database = 'postgres'};
ok( defined wait_for($primary, 'postgres', "SELECT ($last_run_sql) IS NOT NULL",
		20),
	'the worker runs');
my $since = $primary->safe_psql('postgres', $last_run_sql);
ok( defined wait_for($primary,
		'postgres',
		"SELECT ($last_run_sql) > '$since'::timestamptz + interval '400 ms'",
		20),
	'the worker ran a few more rounds');
my $w1_sql = q{SELECT count(*) FROM spindle.spindle_catalog
                WHERE relation = 'w'::regclass AND spindle_no = 1 AND dropped_at IS NULL};
is($primary->safe_psql('postgres', $w1_sql),
	'1', 'the worker keeps a spindle a reader holds');
$reader->query_safe('COMMIT');
$reader->quit;
ok(defined wait_for($primary, 'postgres', "SELECT ($w1_sql) = 0", 20),
	'feedback off: the worker drops the full, purged spindle');
$primary->append_conf('postgresql.conf', "spindle.enable_worker = off\n");
$primary->reload;
ok( defined wait_for($primary,
		'postgres',
		q{SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'spindle worker'},
		10),
	'the worker stops');
$primary->wait_for_catchup($standby);

check_standby_answer(count_again($rr, $pid, 'w'), '25', 'feedback off, worker');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM w'),
	'5', 'a new standby snapshot sees the 5 remaining rows of w');

# ---- hot_standby_feedback on ----------------------------------------------
$standby->append_conf('postgresql.conf', "hot_standby_feedback = on\n");
$standby->reload;

# fill spindle 2 (ids 21-40) and start spindle 3 (41-45)
$primary->safe_psql('postgres',
	'INSERT INTO t SELECT generate_series(26, 45)');
$primary->wait_for_catchup($standby);
($rr, $pid, $count) = open_rr('t', 0);
is($count, '25', 'feedback on: standby snapshot taken: 25 rows');
# the standby's xmin has reached the primary (it reports it every second)
ok( defined wait_for($primary,
		'postgres',
		q{SELECT count(*) = 1 FROM pg_stat_replication WHERE backend_xmin IS NOT NULL},
		10),
	'feedback on: the primary knows the standby xmin');

$primary->safe_psql('postgres', 'DELETE FROM t WHERE id <= 40');
is($primary->safe_psql('postgres', q{SELECT spindle.drop_spindles('t')}),
	'0', 'feedback on: the spindle the standby still sees is kept');
$primary->wait_for_catchup($standby);
is($rr->query_safe('SELECT count(*) FROM t'),
	'25', 'feedback on: the standby snapshot still sees every row');
$rr->query_safe('COMMIT');
$rr->quit;

is(drop_spindles('t'), '1',
	'feedback on: the spindle drops once the standby transaction has ended');
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', 'SELECT count(*) FROM t'),
	'5', 'feedback on: the standby sees the 5 remaining rows');

$standby->stop;
$primary->stop;
done_testing();
