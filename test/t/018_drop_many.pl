# DROP TABLE, TRUNCATE, DROP SCHEMA ... CASCADE and DROP OWNED of spindle
# tables with far more spindles than the lock table has room for (dropping
# a spindle takes five locks: its relation, TOAST table and TOAST index, its
# two row types), on a node whose lock table holds a few hundred locks:
# each works, holds a handful of locks whatever the number of spindles,
# stays transactional (ROLLBACK, ROLLBACK TO SAVEPOINT, a crash), a reader
# waiting on the table gets a clean answer, nothing is left behind once the
# detached spindles are dropped, and a hot standby replays all of it
# without running out of lock space itself.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my $nevents = 400;    # one spindle each: 2 000 locks to drop them the old way

my $node = PostgreSQL::Test::Cluster->new('primary');
$node->init(allows_streaming => 1);
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle'
max_worker_processes = 16
max_prepared_transactions = 0
spindle.enable_worker = off
spindle.naptime = 200ms
restart_after_crash = on
});
$node->start;
$node->safe_psql(
	'postgres', qq{
CREATE EXTENSION spindle;
CREATE ROLE regress_drop_owner;
CREATE SCHEMA sch;
CREATE TABLE ta (id int, body text) USING spindle WITH (events_per_spindle = 1);
CREATE TABLE tb (id int, body text) USING spindle WITH (events_per_spindle = 1);
CREATE TABLE te (id int, body text) USING spindle WITH (events_per_spindle = 1);
CREATE TABLE tf (id int, body text) USING spindle WITH (events_per_spindle = 1);
CREATE TABLE ts (id int, body text) USING spindle WITH (events_per_spindle = 1);
CREATE TABLE sch.tc (id int, body text) USING spindle WITH (events_per_spindle = 1);
CREATE TABLE td (id int, body text) USING spindle WITH (events_per_spindle = 1);
ALTER TABLE td OWNER TO regress_drop_owner;
CREATE TABLE tp (id int, body text) PARTITION BY RANGE (id);
CREATE TABLE tp1 PARTITION OF tp FOR VALUES FROM (0) TO (200)
  USING spindle WITH (events_per_spindle = 1);
CREATE TABLE tp2 PARTITION OF tp FOR VALUES FROM (200) TO (1000)
  USING spindle WITH (events_per_spindle = 1);
CREATE INDEX ON ta (id);
CREATE INDEX ON tb (id);
CREATE INDEX ON tp (id);
INSERT INTO ta SELECT g, 'a' || g FROM generate_series(1, $nevents) g;
INSERT INTO tb SELECT g, 'b' || g FROM generate_series(1, $nevents) g;
INSERT INTO te SELECT g, 'e' || g FROM generate_series(1, $nevents) g;
INSERT INTO tf SELECT g, 'f' || g FROM generate_series(1, $nevents) g;
INSERT INTO ts SELECT g, 's' || g FROM generate_series(1, 5) g;
INSERT INTO sch.tc SELECT g, 'c' || g FROM generate_series(1, $nevents) g;
INSERT INTO td SELECT g, 'd' || g FROM generate_series(1, $nevents) g;
INSERT INTO tp SELECT g, 'p' || g FROM generate_series(1, $nevents) g;
-- TOASTed events too: their TOAST tables go with their spindles
UPDATE ta SET body = repeat(md5(id::text), 300) WHERE id % 50 = 0;
UPDATE tb SET body = repeat(md5(id::text), 300) WHERE id % 50 = 0;
});

# Now the small lock table: 10 x (5 + 3 + 1 + 16 + 10) = 350 entries.
$node->stop;
$node->append_conf(
	'postgresql.conf', q{
max_locks_per_transaction = 10
max_connections = 5
});
$node->start;

$node->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'b', has_streaming => 1);
$standby->start;

my %oid;
for my $t ('ta', 'tb', 'te', 'tf', 'ts', 'sch.tc', 'td', 'tp1', 'tp2')
{
	$oid{$t} = $node->safe_psql('postgres', qq{SELECT '$t'::regclass::oid});
}

sub rows
{
	my ($n, $t) = @_;
	return $n->safe_psql('postgres',
		qq{SELECT count(*) || ':' || coalesce(sum(id), 0) || ':' || coalesce(md5(string_agg(body, ',' ORDER BY id)), '') FROM $t}
	);
}

sub index_rows
{
	my ($n, $t) = @_;
	return $n->safe_psql(
		'postgres', qq{
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) || ':' || coalesce(sum(id), 0) || ':' || coalesce(md5(string_agg(body, ',' ORDER BY id)), '') FROM $t WHERE id > 0});
}

sub catalog_rows
{
	my ($n, $oid) = @_;
	return $n->safe_psql(
		'postgres', qq{
SELECT (SELECT count(*) FROM spindle.spindle_catalog WHERE relation = $oid) || ':' ||
       (SELECT count(*) FROM spindle.table_catalog WHERE relation = $oid)});
}

# the relations of spindles of table $oid still in pg_spindle
sub spindle_relations
{
	my ($n, $oid) = @_;
	return $n->safe_psql(
		'postgres', qq{
SELECT count(*) FROM pg_class
 WHERE relnamespace = 'pg_spindle'::regnamespace AND relname LIKE 's' || $oid || '\\_%'});
}

# spindle relations that no table has, and detached ones not yet dropped
my $unknown_sql = q{
SELECT (SELECT count(*) FROM pg_class c
         WHERE c.relnamespace = 'pg_spindle'::regnamespace AND c.relkind = 'r'
           AND c.oid NOT IN (SELECT segment FROM spindle.spindle_catalog
                              WHERE relation <> 0))
       + (SELECT count(*) FROM spindle.spindle_catalog WHERE relation = 0)};

# drop_spindles() (a superuser's) until no detached spindle is left
sub drain
{
	for my $i (1 .. 500)
	{
		return
		  if $node->safe_psql(
			'postgres', q{
SELECT spindle.drop_spindles();
SELECT count(*) FROM spindle.spindle_catalog WHERE relation = 0}) =~ /\n0$/;
	}
	fail('drop_spindles() never dropped every detached spindle');
	return;
}

my %before;
for my $t ('ta', 'tb', 'te', 'sch.tc', 'td', 'tp')
{
	$before{$t} = rows($node, $t);
}
my $ta_index = index_rows($node, 'ta');
my $tb_index = index_rows($node, 'tb');
is($before{ta}, $ta_index, 'ta: index scan agrees before');
my $ta_spindles = catalog_rows($node, $oid{ta});
like($ta_spindles, qr/^40[0-9]:1$/, 'ta has some 400 spindles');

# ---- a read-only transaction: core's error, nothing touched -------------
my ($ret, $out, $err) =
  $node->psql('postgres', 'BEGIN READ ONLY; DROP TABLE ta; COMMIT');
like($err, qr/cannot execute DROP TABLE in a read-only transaction/,
	'DROP TABLE in a read-only transaction: core refuses it');
is(catalog_rows($node, $oid{ta}), $ta_spindles, 'and ta keeps its spindles');

# ---- a table with few spindles: TRUNCATE drops them at once ------------
my $ts_segments = $node->safe_psql('postgres',
	qq{SELECT string_agg(segment::text, ',') FROM spindle.spindle_catalog WHERE relation = $oid{ts}}
);
$node->safe_psql('postgres', 'TRUNCATE ts');
is( $node->safe_psql(
		'postgres', qq{SELECT count(*) FROM pg_class WHERE oid IN ($ts_segments)}),
	'0',
	'TRUNCATE of a table with 6 spindles drops them at once');
is($node->safe_psql('postgres', $unknown_sql),
	'0', 'and detaches none');

# ---- TRUNCATE rolled back, and rolled back to a savepoint --------------
($ret, $out, $err) = $node->psql(
	'postgres', q{
BEGIN;
TRUNCATE ta;
SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid();
ROLLBACK;});
is($ret, 0, 'TRUNCATE of a table with 400 spindles works') or diag($err);
cmp_ok($out || 1000, '<', 50, "TRUNCATE holds a few locks ($out)");
is(rows($node, 'ta'), $before{ta}, 'TRUNCATE rolled back: every event is back');
is(index_rows($node, 'ta'), $ta_index, 'TRUNCATE rolled back: index agrees');
is(catalog_rows($node, $oid{ta}), $ta_spindles,
	'TRUNCATE rolled back: every spindle is back');

($ret, $out, $err) = $node->psql(
	'postgres', q{
BEGIN;
SAVEPOINT s;
TRUNCATE ta;
ROLLBACK TO SAVEPOINT s;
SELECT count(*) FROM ta;
COMMIT;});
is($ret, 0, 'TRUNCATE in a savepoint works') or diag($err);
is($out, $nevents, 'ROLLBACK TO SAVEPOINT after TRUNCATE: the events are back');
is(index_rows($node, 'ta'), $ta_index,
	'ROLLBACK TO SAVEPOINT after TRUNCATE: index agrees');

# ---- TRUNCATE committed, with a reader waiting for the table ------------
my $ta_segments = $node->safe_psql('postgres',
	qq{SELECT string_agg(segment::text, ',') FROM spindle.spindle_catalog WHERE relation = $oid{ta}}
);
my $t = $node->background_psql('postgres', on_error_stop => 0);
my $reader = $node->background_psql('postgres', on_error_stop => 0);
my $reader_pid = $reader->query_safe('SELECT pg_backend_pid()');
$t->query_safe('BEGIN');
$t->query_safe('TRUNCATE ta');
$reader->query_until(qr/sent/, "\\echo sent\nSELECT count(*) FROM ta;\n");
ok( defined wait_for($node, 'postgres',
		qq{SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $reader_pid AND NOT granted)},
		30),
	'a reader waits for the TRUNCATE');
$t->query_safe('COMMIT');
($out, $ret) = $reader->query('SELECT 1');
is($ret, 0, 'the waiting reader gets no error after TRUNCATE')
  or diag($reader->{stderr});
like($out, qr/^0\n1$/, 'the waiting reader counts 0 events');
is(rows($node, 'ta'), '0:0:', 'TRUNCATE committed: empty');
is( $node->safe_psql(
		'postgres', qq{
SELECT count(*) FROM spindle.spindle_catalog
 WHERE relation = $oid{ta} AND segment IN ($ta_segments)}),
	'0',
	'TRUNCATE committed: no catalog row of an old spindle');
drain();
is( $node->safe_psql(
		'postgres', qq{SELECT count(*) FROM pg_class WHERE oid IN ($ta_segments)}),
	'0',
	'TRUNCATE committed: every old spindle is dropped');
$node->safe_psql('postgres',
	q{INSERT INTO ta SELECT g, 'again' || g FROM generate_series(1, 30) g});
is(rows($node, 'ta'), index_rows($node, 'ta'),
	'after TRUNCATE: new events, index agrees');

# ---- DROP TABLE rolled back, and rolled back to a savepoint -------------
($ret, $out, $err) = $node->psql(
	'postgres', q{
BEGIN;
DROP TABLE tb;
SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid();
ROLLBACK;});
is($ret, 0, 'DROP TABLE of a table with 400 spindles works') or diag($err);
cmp_ok($out || 1000, '<', 50, "DROP TABLE holds a few locks ($out)");
is(rows($node, 'tb'), $before{tb}, 'DROP TABLE rolled back: every event is back');
is(index_rows($node, 'tb'), $tb_index, 'DROP TABLE rolled back: index agrees');

($ret, $out, $err) = $node->psql(
	'postgres', q{
BEGIN;
SAVEPOINT s;
DROP TABLE tb;
ROLLBACK TO SAVEPOINT s;
SELECT count(*) FROM tb;
COMMIT;});
is($ret, 0, 'DROP TABLE in a savepoint works') or diag($err);
is($out, $nevents, 'ROLLBACK TO SAVEPOINT after DROP TABLE: the events are back');
is(rows($node, 'tb'), $before{tb},
	'ROLLBACK TO SAVEPOINT after DROP TABLE: every event is back');
is(index_rows($node, 'tb'), $tb_index,
	'ROLLBACK TO SAVEPOINT after DROP TABLE: index agrees');
$node->wait_for_catchup($standby);
is(rows($standby, 'tb'), $before{tb}, 'standby: tb intact');

# ---- DROP TABLE committed, with a reader waiting; the standby follows ---
$t->query_safe('BEGIN');
$t->query_safe('DROP TABLE tb');
$reader->query_until(qr/sent/, "\\echo sent\nSELECT count(*) FROM tb;\n");
ok( defined wait_for($node, 'postgres',
		qq{SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $reader_pid AND NOT granted)},
		30),
	'a reader waits for the DROP TABLE');
# the standby holds the table's lock for the DROP, and no lock per spindle
ok( defined wait_for($standby, 'postgres',
		qq{SELECT EXISTS (SELECT 1 FROM pg_locks WHERE relation = $oid{tb} AND mode = 'AccessExclusiveLock')},
		30),
	'standby: the DROP TABLE in progress holds the table');
my $standby_locks = $standby->safe_psql(
	'postgres', q{
SELECT count(*) FROM pg_locks
 WHERE pid = (SELECT pid FROM pg_stat_activity WHERE backend_type = 'startup')});
cmp_ok($standby_locks, '<', 50,
	"standby: the startup process holds a few locks ($standby_locks)");
$t->query_safe('COMMIT');
$reader->query('SELECT 1');
like(
	$reader->{stderr},
	qr/relation "tb" does not exist/,
	'the waiting reader gets a clean error after DROP TABLE');
unlike($reader->{stderr}, qr/could not open|could not read/,
	'and no file error');
$t->quit;
$reader->quit;
is(catalog_rows($node, $oid{tb}), '0:0', 'DROP TABLE committed: no catalog row');
is( $node->safe_psql(
		'postgres',
		qq{SELECT count(*) FROM spindle.spindles WHERE relation::oid = $oid{tb}}),
	'0',
	'DROP TABLE committed: no spindle shown');

# ---- DROP SCHEMA ... CASCADE, DROP OWNED, DROP TABLE of a partitioned ----
# table with spindle partitions
for my $cmd ('DROP SCHEMA sch CASCADE', 'DROP OWNED BY regress_drop_owner',
	'DROP TABLE tp')
{
	($ret, $out, $err) = $node->psql('postgres', $cmd);
	is($ret, 0, "$cmd works") or diag($err);
}
for my $t ('sch.tc', 'td', 'tp1', 'tp2')
{
	is(catalog_rows($node, $oid{$t}), '0:0', "$t: no catalog row");
}

# The background worker drops the detached spindles by itself.
$node->append_conf('postgresql.conf', "spindle.enable_worker = on\n");
$node->reload;
for my $t ('tb', 'sch.tc', 'td', 'tp1', 'tp2')
{
	ok( defined wait_for($node, 'postgres',
			sprintf(q{SELECT (%s) = 0},
				qq{SELECT count(*) FROM pg_class
 WHERE relnamespace = 'pg_spindle'::regnamespace AND relname LIKE 's' || $oid{$t} || '\\_%'}
			),
			60),
		"$t: the worker dropped every spindle");
}
is($node->safe_psql('postgres', $unknown_sql), '0',
	'no spindle relation left that no table knows');
ok( $node->safe_psql('postgres',
		q{SELECT spindles_dropped FROM spindle.worker WHERE database = 'postgres'})
	  >= 4 * $nevents,
	'spindle.worker counts them');

$node->wait_for_catchup($standby);
is($standby->safe_psql('postgres', $unknown_sql),
	'0', 'standby: no spindle relation left that no table knows');
is(rows($standby, 'ta'), rows($node, 'ta'), 'standby: ta agrees');
is(index_rows($standby, 'ta'), rows($node, 'ta'), 'standby: ta index agrees');
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	't', 'standby still in recovery');

# ---- DROP EXTENSION: what the lock table cannot hold is refused first --
$node->append_conf('postgresql.conf', "spindle.enable_worker = off\n");
$node->reload;
$node->safe_psql('postgres', 'DROP TABLE tf');
isnt($node->safe_psql('postgres', $unknown_sql),
	'0', 'DROP TABLE tf detached its spindles');
($ret, $out, $err) =
  $node->psql('postgres', 'DROP EXTENSION spindle CASCADE');
isnt($ret, 0, 'DROP EXTENSION with 400 detached spindles is refused');
like(
	$err,
	qr/ERROR:  DROP EXTENSION spindle would take \d+ locks, more than the lock table holds.*HINT:  .*max_locks_per_transaction to at least \d+/s,
	'with the number of locks and the setting that would hold them');
is(rows($node, 'ta'), index_rows($node, 'ta'), 'and ta is intact');

# ---- a crash right after a committed DROP TABLE -------------------------
$node->safe_psql('postgres', 'DROP TABLE te');
$node->stop('immediate');
$node->start;
is($node->safe_psql('postgres', q{SELECT to_regclass('te') IS NULL}),
	't', 'after the crash: te is gone');
is(catalog_rows($node, $oid{te}), '0:0', 'after the crash: no catalog row');
is(rows($node, 'ta'), index_rows($node, 'ta'), 'after the crash: ta agrees');
drain();
is(spindle_relations($node, $oid{te}), '0',
	'after the crash: every spindle of te is dropped');
is($node->safe_psql('postgres', $unknown_sql), '0',
	'after the crash: no spindle relation left that no table knows');
$node->wait_for_catchup($standby);
is($standby->safe_psql('postgres', $unknown_sql),
	'0', 'standby after the crash: nothing left');

# once they are dropped, DROP EXTENSION works
($ret, $out, $err) =
  $node->psql('postgres', 'DROP EXTENSION spindle CASCADE');
is($ret, 0, 'DROP EXTENSION spindle CASCADE works now') or diag($err);
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_class WHERE relnamespace = 'pg_spindle'::regnamespace}),
	'0',
	'nothing is left in pg_spindle');

my $log = slurp_file($node->logfile);
unlike($log, qr/out of shared memory/, 'primary: no "out of shared memory"');
unlike($log, qr/could not open file|could not read block|PANIC/,
	'primary: no file error, no PANIC');
$log = slurp_file($standby->logfile);
unlike($log, qr/out of shared memory|PANIC|FATAL:  .*startup/,
	'standby: no lock or startup failure');

$standby->stop;
$node->stop;
done_testing();
