# CREATE EXTENSION spindle needs shared_preload_libraries: without it the
# command fails with SQLSTATE 55000 and a HINT that says what to set, and
# leaves nothing behind.  With it, the extension installs and works.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('nopreload');
$node->init;
$node->start;

my ($ret, $stdout, $stderr) = $node->psql(
	'postgres', q{
CREATE EXTENSION spindle;
\echo SQLSTATE :SQLSTATE
}, on_error_stop => 0);
like(
	$stderr,
	qr/ERROR:  spindle must be loaded via shared_preload_libraries/,
	'CREATE EXTENSION fails without the preload');
like(
	$stderr,
	qr/HINT:  Add spindle to shared_preload_libraries in postgresql\.conf and restart the server\./,
	'the HINT says what to set');
like($stdout, qr/^SQLSTATE 55000$/m, 'SQLSTATE 55000');

is( $node->safe_psql(
		'postgres', q{
SELECT (SELECT count(*) FROM pg_extension WHERE extname = 'spindle')
     + (SELECT count(*) FROM pg_namespace WHERE nspname = 'spindle')
     + (SELECT count(*) FROM pg_am WHERE amname LIKE 'spindle%')}),
	'0',
	'the failed CREATE EXTENSION leaves nothing behind');

# Loading the library in a session is not preloading it.
($ret, $stdout, $stderr) = $node->psql(
	'postgres', q{
LOAD 'spindle';
CREATE EXTENSION spindle;
\echo SQLSTATE :SQLSTATE
}, on_error_stop => 0);
like(
	$stderr,
	qr/ERROR:  spindle must be loaded via shared_preload_libraries/,
	'CREATE EXTENSION fails after a session LOAD');
like($stdout, qr/^SQLSTATE 55000$/m, 'SQLSTATE 55000 after a session LOAD');
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_extension WHERE extname = 'spindle'}),
	'0', 'still not installed');

# With the preload the same command succeeds.
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'spindle'\n");
$node->restart;
($ret, $stdout, $stderr) = $node->psql('postgres', 'CREATE EXTENSION spindle');
is($ret, 0, 'CREATE EXTENSION succeeds with the preload');
is($stderr, '', 'and prints no error');
$node->safe_psql(
	'postgres', q{
CREATE TABLE t (id int) USING spindle WITH (events_per_spindle = 3);
INSERT INTO t SELECT generate_series(1, 7);
});
is($node->safe_psql('postgres', 'SELECT count(*), sum(id) FROM t'),
	'7|28', 'a spindle table works after the restart with the preload');

$node->stop;
done_testing();
