# The slot map gives its free tail back (issue 19, item 5): a backlog of
# many spindles is consumed while a REPEATABLE READ snapshot is held, so
# nothing can be dropped; once the snapshot goes, the worker drops the
# spindles, retires their ranges and truncates the facade's main fork
# (the slot map) back to the size it had before the backlog, within 2
# naptimes.  A streaming standby replays the truncation
# (XLOG_SMGR_TRUNCATE) and the map pages written again after it, and its
# queries (sequential, by index, by TID) return the primary's rows.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

my $naptime_ms = 1000;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'spindle'
max_worker_processes = 16
spindle.naptime = ${naptime_ms}ms
autovacuum = off
log_min_messages = debug1
});
$primary->start;
$primary->safe_psql(
	'postgres', q{
CREATE EXTENSION spindle;
SELECT spindle.create_queue('bq', events_per_spindle => 100);
CREATE TABLE t (id int, body text) USING spindle WITH (events_per_spindle = 100);
CREATE INDEX t_id ON t (id);
});
$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->append_conf('postgresql.conf', "hot_standby_feedback = off\n");
$standby->start;

my $map_sql =
  "SELECT pg_relation_size('spindle_q.bq') + pg_relation_size('t')";
my $spindles_sql =
  "SELECT count(*) FROM spindle.spindles WHERE relation = 'spindle_q.bq'::regclass";

# the steady state: a few events through the queue, a few rows in t
$primary->safe_psql(
	'postgres', q{
SELECT count(*) FROM spindle.enqueue_batch('bq',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 100) g));
SELECT count(*) FROM spindle.dequeue('bq', 100);
INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, 50) g;
});
my $steady;
ok( $primary->poll_query_until(
		'postgres',
		"SELECT ($map_sql) <= 4 * 8192 AND ($spindles_sql) <= 2"),
	'steady state: the queue holds at most 2 spindles, each map 2 pages');
$steady = $primary->safe_psql('postgres', $map_sql);
note "map size in the steady state: $steady bytes";

# ---- the backlog, consumed under a held snapshot ---------------------------
my $hold = $primary->background_psql('postgres');
$hold->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
$hold->query_safe('SELECT count(*) FROM spindle_q.bq');

# 30 000 events: 300 full spindles, whose slots take 23 map pages; t gets
# as many rows (its first 50 stay), then loses all but those 50
$primary->safe_psql(
	'postgres', q{
SELECT count(*) FROM spindle.enqueue_batch('bq',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 30000) g));
INSERT INTO t SELECT g, 'gone ' || g FROM generate_series(1001, 30950) g;
DELETE FROM t WHERE id > 1000;
});
# one call takes at most what it can; take them all
while ($primary->safe_psql('postgres',
		"SELECT count(*) FROM spindle.dequeue('bq', 5000)") > 0)
{
}
is($primary->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.bq'),
	'0', 'the backlog is consumed');
my $backlog_map = $primary->safe_psql('postgres', $map_sql);
note "map size after the backlog: $backlog_map bytes";
cmp_ok($backlog_map, '>=', 2 * 20 * 8192,
	'the backlog took more than 20 map pages in each table');

# the held snapshot keeps every spindle, hence the map, for 2 naptimes
usleep(2 * $naptime_ms * 1000);
cmp_ok($primary->safe_psql('postgres', $spindles_sql),
	'>=', 300, 'the held snapshot keeps the drained spindles');
is($primary->safe_psql('postgres', $map_sql),
	$backlog_map, 'and the map keeps its size meanwhile');

# ---- the hold ends: back within the steady size within 2 naptimes ----------
$hold->query_safe('COMMIT');
my $released = time();
my $back;
while (time() - $released < 30)
{
	if ($primary->safe_psql('postgres', $map_sql) <= $steady)
	{
		$back = time() - $released;
		last;
	}
	usleep(50_000);
}
$hold->quit;
ok(defined $back, 'the map came back to its steady size after the hold');
note sprintf('back to %s bytes %.2f s after the hold ended',
	$steady, $back // -1);
cmp_ok($back // 1e9, '<=', 2 * $naptime_ms / 1000,
	'the map is back within its steady size within 2 naptimes');
ok( $primary->log_contains(qr/slot map truncated from \d+ to \d+ pages/),
	'the worker logged the truncation');

# ---- after it: producers write again, also into slots past the new end -----
$primary->safe_psql(
	'postgres', q{
SELECT count(*) FROM spindle.enqueue_batch('bq',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 250) g));
SELECT count(*) FROM (SELECT spindle.enqueue('bq', jsonb_build_object('n', g))
                        FROM generate_series(251, 260) g) e;
INSERT INTO t SELECT g, 'row ' || g FROM generate_series(51, 120) g;
});
is( $primary->safe_psql(
		'postgres',
		"SELECT count(*), min(payload->>'n'), count(DISTINCT msg_id) FROM spindle_q.bq"),
	'260|1|260',
	'the events enqueued after the truncation are all there');

# ---- the standby --------------------------------------------------------------
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', $map_sql),
	$primary->safe_psql('postgres', $map_sql),
	'the standby replayed the truncation and the map pages written after it');
for my $sql (
	"SELECT string_agg(msg_id || '=' || (payload->>'n'), ',' ORDER BY msg_id) FROM spindle_q.bq",
	"SELECT string_agg(id || ':' || body, ',' ORDER BY id) FROM t",
	q{SET enable_seqscan = off; SET enable_bitmapscan = off;
	  SELECT string_agg(id || ':' || body, ',' ORDER BY id) FROM t WHERE id > 0},
	q{SET enable_seqscan = off;
	  SELECT count(*) FROM t WHERE id BETWEEN 40 AND 60},
	q{SELECT string_agg(id::text, ',' ORDER BY id) FROM t
	   WHERE ctid = ANY (ARRAY(SELECT ctid FROM t WHERE id % 7 = 0))})
{
	is($standby->safe_psql('postgres', $sql),
		$primary->safe_psql('postgres', $sql),
		'the standby returns the primary\'s rows: ' . substr($sql, 0, 60));
}
# and by index on the primary, with the map re-extended
is( $primary->safe_psql(
		'postgres',
		q{SET enable_seqscan = off; SELECT count(*) FROM t WHERE id BETWEEN 40 AND 60}),
	'21',
	'index fetches on the primary find the rows');

# a consumer on the standby side of things: dequeue on the primary, compare
$primary->safe_psql('postgres', "SELECT count(*) FROM spindle.dequeue('bq', 100)");
$primary->wait_for_catchup($standby);
is( $standby->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.bq'),
	$primary->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.bq'),
	'the standby sees the same events after a dequeue');

$standby->stop;
$primary->stop;
done_testing();
