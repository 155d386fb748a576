# Crash recovery: committed events survive an immediate shutdown, the events
# of a transaction in progress vanish (their slots count as purged), and the
# spindle views and the indexes agree with the table afterwards.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('crash');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'spindle'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION spindle');

$node->safe_psql(
	'postgres', q{
CREATE TABLE q (id int, body text) USING spindle WITH (events_per_spindle = 7);
CREATE INDEX q_id ON q (id);
INSERT INTO q SELECT g, repeat('x', g % 50) FROM generate_series(1, 100) g;
DELETE FROM q WHERE id <= 21;
UPDATE q SET body = 'updated' WHERE id BETWEEN 50 AND 55;
CREATE UNLOGGED TABLE u (id int) USING spindle WITH (events_per_spindle = 5);
INSERT INTO u SELECT generate_series(1, 12);
});
$node->safe_psql('postgres', 'SELECT spindle.drop_spindles()');

# the spindles full before the crash: the crashed transaction only adds
# events to later spindles, and its deletes were never committed
my $spindles_sql = q{
SELECT spindle_no, state, capacity, events, purged_events
  FROM spindle.spindles WHERE relation = 'q'::regclass AND state = 'full'
   AND spindle_no <= %s
 ORDER BY spindle_no};
my $rows_sql = q{SELECT string_agg(id || ':' || body, ',' ORDER BY id) FROM q};

my $rows_before = $node->safe_psql('postgres', $rows_sql);
my $last_full = $node->safe_psql('postgres',
	q{SELECT max(spindle_no) FROM spindle.spindles WHERE relation = 'q'::regclass AND state = 'full'});
my $spindles_before =
  $node->safe_psql('postgres', sprintf($spindles_sql, $last_full));
isnt($spindles_before, '', 'full spindles before the crash');

# A transaction left in progress: inserts and deletes, never committed.
my $bg = $node->background_psql('postgres', on_error_stop => 0);
$bg->query_safe('BEGIN');
$bg->query_safe(
	q{INSERT INTO q SELECT g, 'uncommitted' FROM generate_series(1001, 1020) g});
$bg->query_safe('DELETE FROM q WHERE id BETWEEN 60 AND 69');
$bg->query_safe(q{UPDATE q SET body = 'uncommitted update' WHERE id = 70});

# Committed after the transaction above started; its commit flushes the WAL
# of the uncommitted inserts too.
$node->safe_psql('postgres',
	q{INSERT INTO q VALUES (500, 'committed late'), (501, 'committed late')});
my $rows_committed = $node->safe_psql('postgres', $rows_sql);

$node->stop('immediate');
# The background psql lost its server; ignore how it ends.
eval { $bg->quit; };
$node->start;

is($node->safe_psql('postgres', $rows_sql),
	$rows_committed, 'committed rows survive the crash, uncommitted ones vanish');
is($node->safe_psql('postgres', 'SELECT count(*) FROM q WHERE id > 1000'),
	'0', 'no row of the crashed transaction is visible');
is( $node->safe_psql(
		'postgres', 'SELECT count(*) FROM q WHERE id BETWEEN 60 AND 70'),
	'11',
	'rows deleted by the crashed transaction are still there');
is($node->safe_psql('postgres', q{SELECT body FROM q WHERE id = 70}),
	'x' x 20, 'a row updated by the crashed transaction keeps its value');

# Index scans, bitmap scans and the sequential scan agree.
my $idx_rows = $node->safe_psql(
	'postgres', q{
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT string_agg(id || ':' || body, ',' ORDER BY id) FROM q WHERE id > 0});
is($idx_rows, $rows_committed, 'index scan agrees after the crash');
my $bitmap_rows = $node->safe_psql(
	'postgres', q{
SET enable_seqscan = off; SET enable_indexscan = off;
SELECT string_agg(id || ':' || body, ',' ORDER BY id) FROM q WHERE id > 0});
is($bitmap_rows, $rows_committed, 'bitmap scan agrees after the crash');
is( $node->safe_psql(
		'postgres', q{
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM q WHERE id > 1000 OR id <= 21}),
	'0',
	'no index scan returns a deleted or crashed event');

# Spindles holding only events of the crashed transaction are full and
# fully purged: the worker may drop them at any moment, so drop them here
# too; their catalog rows stay (dropped_at set) until cleanup.
$node->safe_psql('postgres', 'SELECT spindle.drop_spindles()');

# The views: no spindle over capacity, the books balance (slots of the
# crashed transaction count as events and as purged), spindles of the first
# snapshot still there.
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM spindle.spindles
 WHERE relation = 'q'::regclass AND (events > capacity OR purged_events > events)}),
	'0',
	'no spindle over capacity after the crash');
is( $node->safe_psql(
		'postgres', q{
SELECT sum(events) - sum(purged_events) FROM spindle.spindles
 WHERE relation = 'q'::regclass}),
	$node->safe_psql('postgres', 'SELECT count(*) FROM q'),
	'live events (events - purged) equal the rows after the crash');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM spindle.spindle_catalog sc
 WHERE sc.relation = 'q'::regclass AND sc.dropped_at IS NULL
   AND NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = sc.segment)}),
	'0',
	'every undropped spindle in the catalog has its segment');

is($node->safe_psql('postgres', sprintf($spindles_sql, $last_full)),
	$spindles_before, 'spindles full before the crash are unchanged');

# New events after recovery take new slots.
$node->safe_psql('postgres',
	q{INSERT INTO q SELECT g, 'after' FROM generate_series(2001, 2030) g});
is( $node->safe_psql(
		'postgres', 'SELECT count(*) = count(DISTINCT ctid) FROM q'),
	't',
	'new events after recovery have distinct TIDs');
is( $node->safe_psql(
		'postgres', q{
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM q WHERE id BETWEEN 1001 AND 1020 OR id BETWEEN 2001 AND 2030}),
	'30',
	'index scan finds new events and none of the crashed ones');

# Once everything is deleted, every full spindle goes, including those the
# crashed transaction filled.
$node->safe_psql('postgres', 'DELETE FROM q');
$node->safe_psql('postgres', q{SELECT spindle.drop_spindles('q')});
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM spindle.spindles
 WHERE relation = 'q'::regclass AND state = 'full'}),
	'0',
	'all full spindles dropped once every event is purged');
is($node->safe_psql('postgres', 'SELECT count(*) FROM q'), '0', 'table empty');

# An unlogged spindle table is empty after a crash, and usable.
is($node->safe_psql('postgres', 'SELECT count(*) FROM u'),
	'0', 'unlogged spindle table is empty after the crash');
$node->safe_psql('postgres', 'INSERT INTO u SELECT generate_series(1, 8)');
is($node->safe_psql('postgres', 'SELECT count(*), sum(id) FROM u'),
	'8|36', 'unlogged spindle table takes inserts after the crash');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM spindle.spindles
 WHERE relation = 'u'::regclass AND events > capacity}),
	'0',
	'unlogged table: no spindle over capacity');

# A second crash right after a spindle drop: the drop is durable.
$node->safe_psql(
	'postgres', q{
CREATE TABLE q2 (id int) USING spindle WITH (events_per_spindle = 4);
INSERT INTO q2 SELECT generate_series(1, 10);
DELETE FROM q2 WHERE id <= 8;
});
$node->safe_psql('postgres', q{SELECT spindle.drop_spindles('q2')});
my $q2_spindles = $node->safe_psql(
	'postgres', q{
SELECT string_agg(spindle_no || ':' || state, ',' ORDER BY spindle_no)
  FROM spindle.spindles WHERE relation = 'q2'::regclass AND state <> 'ready'});
$node->stop('immediate');
$node->start;
is( $node->safe_psql(
		'postgres', q{
SELECT string_agg(spindle_no || ':' || state, ',' ORDER BY spindle_no)
  FROM spindle.spindles WHERE relation = 'q2'::regclass AND state <> 'ready'}),
	$q2_spindles,
	'spindles after a drop and a crash are the same');
is($node->safe_psql('postgres', 'SELECT string_agg(id::text, \',\' ORDER BY id) FROM q2'),
	'9,10', 'rows after a drop and a crash');

$node->stop;
done_testing();
