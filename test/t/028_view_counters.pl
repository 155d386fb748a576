# The counters behind spindle.spindles and spindle.tables are exact after
# an immediate shutdown and restart (shared memory is lost; each spindle
# is counted from disk once): per spindle, events - purged_events equals
# the rows that live in it, and purged_events equals what a heap log
# says was deleted plus what rolled back.  They stay exact after more
# work following the restart, and a hot standby (read-only) shows the
# same figures as the primary once it has replayed the WAL.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('view_counters');
$primary->init(allows_streaming => 1);
$primary->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle'
max_worker_processes = 16
max_prepared_transactions = 2
# the test asserts on spindles it keeps; the worker would drop some
spindle.enable_worker = off
autovacuum = off
});
$primary->start;
$primary->safe_psql(
	'postgres', q{
CREATE EXTENSION spindle;
CREATE TABLE t (id int, body text) USING spindle WITH (events_per_spindle = 100);
-- what committed deletes took away, written in the deleting transaction
CREATE TABLE deleted_log (id int);
SELECT spindle.create_queue('cq', events_per_spindle => 50);
});

my $backup = 'bk';
$primary->backup($backup);
my $standby = PostgreSQL::Test::Cluster->new('view_counters_standby');
$standby->init_from_backup($primary, $backup, has_streaming => 1);
$standby->start;

# 1 000 events, 250 deleted (logged), 30 rolled back, 40 dequeued
$primary->safe_psql(
	'postgres', q{
INSERT INTO t SELECT g, 'x' FROM generate_series(1, 1000) g;
WITH d AS (DELETE FROM t WHERE id % 4 = 0 RETURNING id)
  INSERT INTO deleted_log SELECT id FROM d;
BEGIN;
INSERT INTO t SELECT g, 'gone' FROM generate_series(2001, 2030) g;
ROLLBACK;
BEGIN;
WITH d AS (DELETE FROM t WHERE id BETWEEN 1 AND 99 AND id % 4 <> 0 RETURNING id)
  INSERT INTO deleted_log SELECT id FROM d;
ROLLBACK;
SELECT count(*) FROM spindle.enqueue_batch('cq',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 120) g));
SELECT count(*) FROM spindle.dequeue('cq', 40);
});

# Per spindle: events - purged must equal the rows living in its range of
# virtual slots (ctid -> slot: block * 291 + offset - 1).
my $per_spindle_sql = q{
SELECT count(*) FROM spindle.spindles s
  JOIN spindle.spindle_catalog c
    ON c.relation = s.relation::oid AND c.spindle_no = s.spindle_no
 WHERE s.relation IN ('t'::regclass, 'spindle_q.cq'::regclass)
   AND s.events - s.purged_events IS DISTINCT FROM
       (SELECT count(*) FROM (SELECT ctid FROM t WHERE s.relation = 't'::regclass
                              UNION ALL
                              SELECT ctid FROM spindle_q.cq
                               WHERE s.relation = 'spindle_q.cq'::regclass) r
         WHERE ((r.ctid::text::point)[0] * 291 + (r.ctid::text::point)[1] - 1)
               BETWEEN c.vbase AND c.vbase + c.vcount - 1)};
my $figures_sql = q{
SELECT string_agg(relation || ':' || events || ':' || purged_events, ' ' ORDER BY relation::text)
  FROM spindle.tables WHERE relation IN ('t'::regclass, 'spindle_q.cq'::regclass)};
my $spindles_sql = q{
SELECT string_agg(spindle_no || ':' || state || ':' || events || ':' || purged_events,
                  ',' ORDER BY spindle_no)
  FROM spindle.spindles WHERE relation = 't'::regclass AND state <> 'ready'};
my $truth_sql = q{
SELECT 'spindle_q.cq:120:' || 120 - (SELECT count(*) FROM spindle_q.cq)
       || ' t:' || (SELECT count(*) FROM t) + (SELECT count(*) FROM deleted_log) + 30
       || ':' || (SELECT count(*) FROM deleted_log) + 30};

my $before = $primary->safe_psql('postgres', $figures_sql);
is($before, 'spindle_q.cq:120:40 t:1030:280', 'figures before the crash');
is($primary->safe_psql('postgres', $truth_sql), $before,
	'figures agree with count(*) and the delete log');
is($primary->safe_psql('postgres', $per_spindle_sql), '0',
	'every spindle: events - purged = the rows in it');
my $spindles_before = $primary->safe_psql('postgres', $spindles_sql);
my $rest_sql = $spindles_sql . ' AND spindle_no > 1';
my $rest_before = $primary->safe_psql('postgres', $rest_sql);

# a prepared DELETE survives the crash; its spindle cannot be counted
# until it ends, then it is
$primary->safe_psql(
	'postgres', q{
BEGIN;
WITH d AS (DELETE FROM t WHERE id IN (1, 2, 3) RETURNING id)
  INSERT INTO deleted_log SELECT id FROM d;
PREPARE TRANSACTION 'before_crash';
});

$primary->stop('immediate');
$primary->start;

# the spindle the prepared transaction holds cannot be counted without
# waiting for it: unknown (NULL), and so is its table's total
is( $primary->safe_psql(
		'postgres', q{
SELECT events IS NULL AND purged_events IS NULL FROM spindle.spindles
 WHERE relation = 't'::regclass AND spindle_no = 1}), 't',
	'after the restart, the spindle a prepared transaction holds is not counted');
is( $primary->safe_psql(
		'postgres', q{
SELECT events IS NULL FROM spindle.tables WHERE relation = 't'::regclass}), 't',
	'nor is its table');
is($primary->safe_psql('postgres', $rest_sql), $rest_before,
	'every other spindle has the same figures after an immediate restart');
is( $primary->safe_psql(
		'postgres', q{
SELECT events || ':' || purged_events FROM spindle.tables
 WHERE relation = 'spindle_q.cq'::regclass}), '120:40',
	'the queue has the same figures after the restart');
$primary->safe_psql('postgres', "COMMIT PREPARED 'before_crash'");
is($primary->safe_psql('postgres', $spindles_sql) =~ s/^1:full:100:\d+/1:full:100:X/r,
	$spindles_before =~ s/^1:full:100:\d+/1:full:100:X/r,
	'all spindles counted once the prepared transaction ended');
is($primary->safe_psql('postgres', $figures_sql),
	'spindle_q.cq:120:40 t:1030:283',
	'the prepared delete counts once committed');
is($primary->safe_psql('postgres', $truth_sql),
	'spindle_q.cq:120:40 t:1030:283', 'and agrees with the delete log');

# more work after the restart, on counters rebuilt from disk
$primary->safe_psql(
	'postgres', q{
WITH d AS (DELETE FROM t WHERE id % 4 = 1 AND id > 500 RETURNING id)
  INSERT INTO deleted_log SELECT id FROM d;
INSERT INTO t SELECT g, 'y' FROM generate_series(3001, 3050) g;
BEGIN;
INSERT INTO t VALUES (4000, 'gone');
SAVEPOINT s;
DELETE FROM t WHERE id = 3001;
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT count(*) FROM spindle.dequeue('cq', 10);
});
my $after = $primary->safe_psql('postgres', $figures_sql);
is($after, $primary->safe_psql('postgres', q{
SELECT 'spindle_q.cq:120:' || 120 - (SELECT count(*) FROM spindle_q.cq)
       || ' t:' || (SELECT count(*) FROM t) + (SELECT count(*) FROM deleted_log) + 30
       || ':' || (SELECT count(*) FROM deleted_log) + 30}),
	'figures exact after more work');
is($primary->safe_psql('postgres', $per_spindle_sql), '0',
	'every spindle: events - purged = the rows in it, after more work');

# the standby: read-only, the same figures once replayed
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't',
	'the standby is in recovery');
is($standby->safe_psql('postgres', $figures_sql), $after,
	'the standby shows the same figures');
is($standby->safe_psql('postgres', $spindles_sql),
	$primary->safe_psql('postgres', $spindles_sql),
	'and the same spindles');
is($standby->safe_psql('postgres', $per_spindle_sql), '0',
	'every spindle on the standby: events - purged = the rows in it');
$primary->safe_psql('postgres', 'DELETE FROM t WHERE id > 3000');
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', $figures_sql),
	$primary->safe_psql('postgres', $figures_sql),
	'the standby follows a later delete');
is($standby->safe_psql('postgres',
		'SELECT count(*) FROM spindle.queues WHERE queue_name = \'cq\''),
	'1', 'spindle.queues works on the standby');

$standby->stop;
$primary->stop;
done_testing();
