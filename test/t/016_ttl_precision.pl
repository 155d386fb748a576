# TTL precision: each event carries its own append time, so a purge never
# takes an event younger than the TTL and takes every event older than the
# TTL plus a second, whatever its page LSN says (wal_level = minimal writes
# none for a table created in the same transaction) and whatever happened
# to its spindle (an unlogged table's spindles restart empty after a crash,
# with the fill times of their former events in the catalog).
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin . '/../perl';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SpindleTest;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('ttl');
$node->init;
$node->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'spindle'
wal_level = minimal
max_wal_senders = 0
spindle.enable_worker = off
spindle.naptime = 200ms
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION spindle');

# ---- wal_level = minimal: pages written without WAL have LSN 0 -----------
# (the server's last checkpoint must be older than the ttl for an LSN-based
# bound to take fresh events for old ones)
sleep 3;
my $fresh = $node->safe_psql(
	'postgres', q{
-- sync new relations at commit instead of WAL-logging their pages
SET wal_skip_threshold = 0;
CREATE TABLE t3 USING spindle WITH (time_to_live = '1 min', events_per_spindle = 1000)
    AS SELECT g AS id FROM generate_series(1, 50000) g;
BEGIN;
CREATE TABLE t4 (id int) USING spindle WITH (time_to_live = '1 min');
INSERT INTO t4 SELECT generate_series(1, 5000);
COMMIT;
BEGIN;
CREATE TABLE t5 (id int) USING spindle WITH (time_to_live = '1 min');
COPY t5 FROM PROGRAM 'seq 1 5000';
COMMIT;
SELECT spindle.purge_expired('t3', '2 s') || ',' || spindle.purge_expired('t4', '2 s')
       || ',' || spindle.purge_expired('t5', '2 s');
});
is($fresh, '0,0,0',
	'CREATE TABLE AS, CREATE + INSERT, CREATE + COPY under wal_level = minimal: no event younger than 2 s is purged');
is($node->safe_psql('postgres', q{SELECT spindle.purge_expired('t3')}),
	'0', 'nor with the table option');
# the worker neither
$node->append_conf('postgresql.conf', "spindle.enable_worker = on\n");
$node->reload;
ok( defined wait_for(
		$node, 'postgres',
		q{SELECT count(*) > 0 FROM spindle.worker WHERE last_run IS NOT NULL}, 30),
	'the worker runs');
sleep 1;
is( $node->safe_psql(
		'postgres',
		q{SELECT (SELECT count(*) FROM t3) || ',' || (SELECT count(*) FROM t4) || ',' || (SELECT count(*) FROM t5)}),
	'50000,5000,5000',
	'the worker purges none of them either');
$node->append_conf('postgresql.conf', "spindle.enable_worker = off\n");
$node->reload;

# ---- the worker applies time_to_live to the second (+ one naptime) --------
$node->append_conf('postgresql.conf', "spindle.enable_worker = on\n");
$node->reload;
$node->safe_psql('postgres',
	q{CREATE TABLE tw (id int) USING spindle WITH (time_to_live = '3s', events_per_spindle = 100000)});
my $t0 = time();
$node->safe_psql('postgres', 'INSERT INTO tw SELECT generate_series(1, 100)');
usleep(1_500_000);
is($node->safe_psql('postgres', 'SELECT count(*) FROM tw'),
	'100', 'nothing purged before the TTL');
my $took = wait_for($node, 'postgres', 'SELECT count(*) = 0 FROM tw', 30, 50);
ok(defined $took, 'the worker purges every expired event');
note(sprintf('purged %.1f s after insert (ttl 3 s, precision 1 s, naptime 0.2 s)',
		time() - $t0));
$node->append_conf('postgresql.conf', "spindle.enable_worker = off\n");
$node->reload;

# ---- unlogged tables after a crash ---------------------------------------
$node->safe_psql(
	'postgres', q{
CREATE UNLOGGED TABLE u (id int) USING spindle WITH (events_per_spindle = 10);
INSERT INTO u SELECT generate_series(1, 25);
});
sleep 3;
# the full spindles' fill times are recorded, then the crash
is($node->safe_psql('postgres', q{SELECT spindle.purge_expired('u', '1 hour')}),
	'0', 'unlogged: nothing is an hour old');
$node->safe_psql('postgres', q{SELECT spindle.drop_spindles('u')});
$node->stop('immediate');
$node->start;
is($node->safe_psql('postgres', 'SELECT count(*) FROM u'),
	'0', 'unlogged table empty after the crash');
# the spindles' fill times recorded before the crash are more than 2 s old
is( $node->safe_psql(
		'postgres', q{
INSERT INTO u SELECT generate_series(1, 50);
SELECT spindle.purge_expired('u', '2 seconds');}),
	'0', 'events inserted after the crash are not purged');
is($node->safe_psql('postgres', 'SELECT count(*) FROM u'),
	'50', 'all 50 are there');

$node->stop;
done_testing();
