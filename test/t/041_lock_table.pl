# Statements that reach every spindle of a table in one transaction hold a
# spindle's lock only while they work in it (facade_am.c, "Locks"), so on
# a table with more spindles than the shared lock table holds they work:
# VACUUM of the table and of the database, DELETE / UPDATE / SELECT ... FOR
# UPDATE of every event, INSERT ... SELECT into a new spindle per event,
# and CREATE TABLE AS, whose transaction creates the spindles itself (core
# locks each new relation, its TOAST table and index and its row type).
# Here the lock table holds a few hundred locks and the table 600 spindles
# (events_per_spindle = 1); at PostgreSQL's defaults the same failed at
# about 8 000 to 10 000 spindles before.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my $nevents = 600;

my $node = PostgreSQL::Test::Cluster->new('lock_table');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle'
max_worker_processes = 16
max_prepared_transactions = 0
autovacuum = off
spindle.enable_worker = off
});
$node->start;
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION spindle;
CREATE TABLE t (id int, body text) USING spindle WITH (events_per_spindle = 1);
CREATE INDEX ON t (id);
CREATE TABLE ins (id int, body text) USING spindle WITH (events_per_spindle = 1);
});
for my $b (0 .. $nevents / 100 - 1)
{
	my ($lo, $hi) = ($b * 100 + 1, $b * 100 + 100);
	$node->safe_psql('postgres',
		qq{INSERT INTO t SELECT g, 'p' || g FROM generate_series($lo, $hi) g;});
}
$node->safe_psql('postgres', q{COPY t TO '/dev/null'});

# 10 x (5 + 3 + 1 + 16 + 10) = 350 lock table entries, plus leftovers
$node->stop;
$node->append_conf(
	'postgresql.conf', q{
max_locks_per_transaction = 10
max_connections = 5
});
$node->start;

sub works
{
	my ($sql, $name) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', $sql);
	is($ret, 0, $name) or diag($err);
}

works('VACUUM t', 'VACUUM of a table of 600 spindles');
works('VACUUM', 'a database-wide VACUUM');
works('BEGIN; DELETE FROM t; ROLLBACK', 'DELETE of every event');
works('BEGIN; UPDATE t SET body = body; ROLLBACK', 'UPDATE of every event');
works('BEGIN; SELECT count(*) FROM (SELECT * FROM t FOR UPDATE) s; ROLLBACK',
	'SELECT ... FOR UPDATE of every event');
works(q{INSERT INTO ins SELECT g, 'i' || g FROM generate_series(1, 600) g},
	'INSERT ... SELECT of 600 events into 600 spindles');
works(q{CREATE TABLE ctas USING spindle WITH (events_per_spindle = 1) AS SELECT * FROM t},
	'CREATE TABLE AS of 600 events');
is($node->safe_psql('postgres', 'SELECT count(*) FROM t'),
	$nevents, 'nothing was lost');

$node->stop;
done_testing();
