# A hot standby that never cancels queries (max_standby_streaming_delay =
# -1, hot_standby_feedback off) must not deadlock with replay when the
# primary drops a spindle whose deleted events a standby snapshot still
# sees.
#
# Replay of the drop's snapshot-conflict record waits, with delay -1, for
# the standby transactions whose snapshot may still see those events, as
# heap's prune and freeze redo do.  Such a transaction must then be able to
# read the table and finish: replay must not hold the spindle's replayed
# AccessExclusiveLock while it waits, or the query waits for the lock and
# replay for the query, and nothing detects it.  So the conflict record
# precedes the AccessExclusiveLock in the WAL.  As with heap's DELETE +
# VACUUM, the standby query sees every row its snapshot saw, and replay
# goes on once the transaction ends.
#
# A lock_timeout on the standby query bounds the wait: a deadlock shows as
# a lock timeout instead of a hung test.
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
spindle.enable_worker = off
}, q{
hot_standby_feedback = off
max_standby_streaming_delay = -1
wal_receiver_status_interval = 1s
});

$primary->safe_psql(
	'postgres', q{
CREATE TABLE t (id int) USING spindle WITH (events_per_spindle = 20);
CREATE INDEX t_id ON t (id);
INSERT INTO t SELECT generate_series(1, 25);
CREATE TABLE h (id int);
INSERT INTO h SELECT generate_series(1, 25);
});
$primary->wait_for_catchup($standby);

# A REPEATABLE READ transaction on the standby whose snapshot sees all 25
# rows, taken without touching t (so it holds no lock on its spindles).
my $rr = $standby->background_psql('postgres', on_error_stop => 0);
$rr->query_safe("SET lock_timeout = '30s'");
$rr->query_safe("SET statement_timeout = '60s'");
$rr->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
$rr->query_safe('SELECT count(*) FROM pg_class');

$primary->safe_psql('postgres', 'DELETE FROM t WHERE id <= 20');
my $dropped = '0';
for (1 .. 50)
{
	$dropped = $primary->safe_psql('postgres',
		"SELECT spindle.drop_spindles('t')");
	last if $dropped ne '0';
	usleep(100_000);
}
is($dropped, '1', 'the primary drops the full, purged spindle');
my $drop_lsn = $primary->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');

# Replay reaches the conflict and waits for the standby transaction.
ok( defined wait_for($standby,
		'postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity
		   WHERE backend_type = 'startup'
		     AND wait_event = 'RecoveryConflictSnapshot'},
		30),
	'replay waits for the standby snapshot that sees the deleted events');

# The transaction can still read the table: replay holds no lock on the
# spindle while it waits.
my ($out, $ret) = $rr->query('SELECT count(*) FROM t');
is($out, '25',
	'the standby query reads the spindle and sees every row of its snapshot'
) or diag('psql said: ' . ($rr->{stderr} // ''));
$rr->query('COMMIT');
$rr->quit;

# Once the transaction has ended, replay goes on to the drop.
ok( defined wait_for($standby,
		'postgres',
		"SELECT pg_last_wal_replay_lsn() >= '$drop_lsn'::pg_lsn",
		60),
	'replay goes on once the standby transaction has ended');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM t'),
	'5', 'a new standby snapshot sees the 5 remaining rows');
is( $standby->safe_psql(
		'postgres',
		q{SELECT count(*) FROM spindle.spindle_catalog
		   WHERE relation = 't'::regclass AND spindle_no = 1
		     AND dropped_at IS NULL}),
	'0',
	'the standby has replayed the drop');

# Two spindles dropped by one transaction, purged at different times: the
# standby snapshot is taken between the purges, so only the second one's
# horizon concerns it.  The record covering that horizon must still come
# before the first spindle's lock, which the snapshot's query also needs.
$primary->safe_psql(
	'postgres', q{
CREATE TABLE u (id int) USING spindle WITH (events_per_spindle = 10);
INSERT INTO u SELECT generate_series(1, 25);
DELETE FROM u WHERE id <= 10;
});
$primary->wait_for_catchup($standby);
$rr = $standby->background_psql('postgres', on_error_stop => 0);
$rr->query_safe("SET lock_timeout = '30s'");
$rr->query_safe("SET statement_timeout = '60s'");
$rr->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
$rr->query_safe('SELECT count(*) FROM pg_class');
$primary->safe_psql('postgres', 'DELETE FROM u WHERE id <= 20');
# nothing else holds back the primary's xmin horizon
ok( defined wait_for($primary,
		'postgres',
		q{SELECT count(*) = 0 FROM pg_stat_activity
		   WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()},
		30),
	'no other snapshot on the primary');
is($primary->safe_psql('postgres', "SELECT spindle.drop_spindles('u')"),
	'2', 'one transaction drops both purged spindles');
$drop_lsn = $primary->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
ok( defined wait_for($standby,
		'postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity
		   WHERE backend_type = 'startup'
		     AND wait_event = 'RecoveryConflictSnapshot'},
		30),
	'two spindles: replay waits for the standby snapshot');
($out, $ret) = $rr->query('SELECT count(*) FROM u');
is($out, '15',
	'two spindles: the standby query reads both spindles and sees the rows of its snapshot'
) or diag('psql said: ' . ($rr->{stderr} // ''));
$rr->query('COMMIT');
$rr->quit;
ok( defined wait_for($standby,
		'postgres',
		"SELECT pg_last_wal_replay_lsn() >= '$drop_lsn'::pg_lsn",
		60),
	'two spindles: replay goes on once the standby transaction has ended');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM u'),
	'5', 'two spindles: a new standby snapshot sees the 5 remaining rows');

# Heap's DELETE + VACUUM of the same rows behaves the same way: replay
# waits for the transaction, which reads every row and finishes.
$rr = $standby->background_psql('postgres', on_error_stop => 0);
$rr->query_safe("SET lock_timeout = '30s'");
$rr->query_safe("SET statement_timeout = '60s'");
$rr->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
$rr->query_safe('SELECT count(*) FROM pg_class');
$primary->safe_psql('postgres', 'DELETE FROM h WHERE id <= 20');
$primary->safe_psql('postgres', 'VACUUM h');
$drop_lsn = $primary->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
ok( defined wait_for($standby,
		'postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity
		   WHERE backend_type = 'startup'
		     AND wait_event = 'RecoveryConflictSnapshot'},
		30),
	'heap: replay waits for the standby snapshot too');
($out, $ret) = $rr->query('SELECT count(*) FROM h');
is($out, '25', 'heap: the standby query sees every row of its snapshot');
$rr->query('COMMIT');
$rr->quit;
ok( defined wait_for($standby,
		'postgres',
		"SELECT pg_last_wal_replay_lsn() >= '$drop_lsn'::pg_lsn",
		60),
	'heap: replay goes on once the standby transaction has ended');

$standby->stop;
$primary->stop;
done_testing();
