# A TTL purge (spindle.purge_expired() and the worker's time_to_live step)
# of a table with more spindles than the shared lock table has room for.
# It purges every spindle in one transaction; if it kept a lock on each
# spindle (and on the TOAST table and TOAST index of each one whose
# out-of-line values it deletes) to the end of that transaction, it failed
# with "out of shared memory" -- every time, so the worker never applied
# time_to_live to such a table -- and, while it ran, left no room in the
# lock table for any other session.  Here the lock table holds a few
# hundred locks and the tables have 600 spindles (events_per_spindle = 1).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my $nevents = 600;

my $node = PostgreSQL::Test::Cluster->new('ttl_locks');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle'
max_worker_processes = 16
max_prepared_transactions = 0
autovacuum = off
spindle.enable_worker = off
spindle.naptime = 200ms
});
$node->start;
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION spindle;
CREATE TABLE plain (id int, body text) USING spindle WITH (events_per_spindle = 1);
CREATE TABLE toasted (id int, body text) USING spindle WITH (events_per_spindle = 1);
CREATE TABLE byworker (id int, body text) USING spindle WITH (events_per_spindle = 1);
CREATE INDEX ON plain (id);
});
# in batches: an insert holds a lock on each spindle it writes to
for my $b (0 .. $nevents / 100 - 1)
{
	my ($lo, $hi) = ($b * 100 + 1, $b * 100 + 100);
	$node->safe_psql(
		'postgres', qq{
INSERT INTO plain SELECT g, 'p' || g FROM generate_series($lo, $hi) g;
INSERT INTO toasted SELECT g, (SELECT string_agg(md5(random()::text || g || i), '') FROM generate_series(1, 100) i) FROM generate_series($lo, $hi) g;
INSERT INTO byworker SELECT g, 'w' || g FROM generate_series($lo, $hi) g;
});
}
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM spindle.spindles WHERE relation = 'toasted'::regclass AND events = 1}),
	$nevents,
	'one spindle per event');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM pg_class c JOIN spindle.spindle_catalog s ON s.segment = c.oid
 WHERE s.relation = 'toasted'::regclass AND c.reltoastrelid <> 0
   AND pg_relation_size(c.reltoastrelid) > 0}),
	$nevents,
	'each spindle of toasted keeps its events out of line');

# Now the small lock table: 10 x (5 + 3 + 1 + 16 + 10) = 350 entries,
# plus whatever shared memory is left over.
$node->stop;
$node->append_conf(
	'postgresql.conf', q{
max_locks_per_transaction = 10
max_connections = 5
});
$node->start;
sleep 1.1;    # every event is older than a ttl of 0 s

my ($ret, $out, $err) = $node->psql('postgres',
	q{SELECT spindle.purge_expired('plain', '0 s')});
is($ret, 0, 'purge_expired of 600 spindles works with a small lock table')
  or diag($err);
is($out, $nevents, 'it purged every event');

($ret, $out, $err) = $node->psql(
	'postgres', q{
BEGIN;
SELECT spindle.purge_expired('toasted', '0 s');
SELECT count(*) < 50 FROM pg_locks WHERE pid = pg_backend_pid();
ROLLBACK;});
is($ret, 0, 'purge_expired of 600 spindles with TOASTed events works')
  or diag($err);
is($out, "$nevents\nt", 'it purged every event and holds a few locks until commit');

($ret, $out, $err) = $node->psql(
	'postgres', q{
BEGIN;
SELECT spindle.purge_expired('toasted', '0 s');
SAVEPOINT a;
SELECT spindle.purge_expired('toasted', '0 s');
ROLLBACK TO a;
COMMIT;});
is($ret, 0, 'purge_expired twice in one transaction, once rolled back')
  or diag($err);
is($out, "$nevents\n0", 'the second finds nothing left');
is($node->safe_psql('postgres', 'SELECT count(*) FROM toasted'),
	0, 'the purge committed');
is( $node->safe_psql(
		'postgres', q{SELECT count(*) FROM plain; SET enable_seqscan = off;
SELECT count(*) FROM plain WHERE id > 0}),
	"0\n0",
	'plain is empty, by scan and by index');

# the spindles go, in transactions the lock table can hold
for my $i (1 .. 200)
{
	last
	  if $node->safe_psql('postgres',
		q{SELECT spindle.drop_spindles('plain') + spindle.drop_spindles('toasted')})
	  == 0;
}
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM spindle.spindles WHERE relation IN ('plain'::regclass, 'toasted'::regclass)
   AND state = 'full'}),
	0,
	'every purged spindle was dropped');

# the worker applies time_to_live to such a table; it deletes under
# DELETE's lock, so not while someone keeps writes out (LOCK TABLE ...
# SHARE, CREATE INDEX), and it does not wait or fail meanwhile
$node->safe_psql('postgres',
	q{ALTER TABLE byworker SET (time_to_live = '1 s')});
my $locker = $node->background_psql('postgres');
$locker->query_safe('BEGIN');
$locker->query_safe('LOCK TABLE byworker IN SHARE MODE');
$node->append_conf('postgresql.conf', 'spindle.enable_worker = on');
$node->reload;
ok( defined wait_for(
		$node, 'postgres',
		q{SELECT last_run IS NOT NULL FROM spindle.worker}, 30),
	'the worker runs');
sleep 2;
is($node->safe_psql('postgres', 'SELECT count(*) FROM byworker'),
	$nevents, 'no purge while the table is locked in SHARE mode');
is( $node->safe_psql(
		'postgres', q{SELECT coalesce(last_error, '') FROM spindle.worker}),
	'',
	'and no error either');
$locker->query_safe('COMMIT');
$locker->quit;
ok( defined wait_for(
		$node, 'postgres', q{SELECT count(*) = 0 FROM byworker}, 60),
	'the worker purged every expired event of byworker');
is( $node->safe_psql(
		'postgres', q{SELECT coalesce(last_error, '') FROM spindle.worker}),
	'',
	'the worker reports no error');
ok(!$node->log_contains('out of shared memory'),
	'nothing ran out of lock space');

# A TTL step that keeps failing (a foreign key references the table, so
# the purge is refused) is retried after a delay that doubles, not every
# naptime (200 ms here), while the table's other steps go on: its purged
# spindles are still dropped.
$node->safe_psql(
	'postgres', q{
CREATE TABLE referenced (id int PRIMARY KEY) USING spindle
    WITH (events_per_spindle = 2, time_to_live = '1 s');
CREATE TABLE referencing (rid int REFERENCES referenced (id));
INSERT INTO referenced SELECT generate_series(1, 7);
INSERT INTO referencing VALUES (7);
});
my $log_offset = -s $node->logfile;
sleep 6;
my $failures = () =
  slurp_file($node->logfile, $log_offset) =~
  /maintenance of table public\.referenced failed/g;
note("failed TTL steps in 6 s: $failures");
ok($failures >= 1 && $failures <= 6,
	'a failing TTL step is retried with a growing delay');
like(
	$node->safe_psql(
		'postgres', q{SELECT last_error FROM spindle.worker}),
	qr/foreign key constraint references it/,
	'spindle.worker says why');
$node->safe_psql('postgres', 'DELETE FROM referenced WHERE id < 5');
ok( defined wait_for(
		$node, 'postgres', q{
SELECT count(*) = 0 FROM spindle.spindles
 WHERE relation = 'referenced'::regclass AND spindle_no <= 2}, 20),
	'its purged spindles are dropped meanwhile');
is($node->safe_psql('postgres', 'SELECT count(*) FROM referenced'),
	3, 'and the purge deleted nothing');

$node->stop;
done_testing();
