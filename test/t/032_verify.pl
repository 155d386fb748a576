# spindle.verify() under load: producers, consumers (some rolling back),
# plain DELETEs, the worker dropping spindles and retiring their ranges,
# while other sessions run verify() on the same tables again and again.
# It must never report a problem on these healthy tables (no false alarm
# from a change it saw half done), and stay silent after a crash restart.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my $node = PostgreSQL::Test::Cluster->new('verify');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle'
max_worker_processes = 16
spindle.naptime = 100ms
});
$node->start;
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION spindle;
SELECT spindle.create_queue('vq', events_per_spindle => 20);
CREATE TABLE t (id bigserial, body text) USING spindle WITH (events_per_spindle = 25);
CREATE INDEX t_id ON t (id);
CREATE INDEX t_hash ON t USING hash (id);
CREATE TABLE problems (at timestamptz DEFAULT clock_timestamp(), rel text, v text);
});

my $dir = PostgreSQL::Test::Utils::tempdir;
my %scripts = (
	prod => q{
SELECT spindle.enqueue_batch('vq', ARRAY['{"a":1}', '{"b":2}', '{"c":3}']::jsonb[]);
INSERT INTO t (body) SELECT 'x' FROM generate_series(1, 5);
},
	cons => q{
\set r random(1, 4)
BEGIN;
SELECT count(*) FROM spindle.dequeue('vq', 4);
SELECT count(*) FROM spindle.read('vq', 2, '50 ms');
\if :r > 1
COMMIT;
\else
ROLLBACK;
\endif
DELETE FROM t WHERE id IN (SELECT id FROM t ORDER BY id LIMIT 6);
},
	verify => q{
INSERT INTO problems (rel, v) SELECT 'vq', v FROM spindle.verify('spindle_q.vq') v;
INSERT INTO problems (rel, v) SELECT 't', v FROM spindle.verify('t') v;
},);
for my $s (keys %scripts)
{
	open my $f, '>', "$dir/$s.sql" or die;
	print $f $scripts{$s};
	close $f;
}
my ($out, $err) = run_command(
	[
		'pgbench', '-n', '-h', $node->host, '-p', $node->port,
		'-c', '5', '-j', '2', '-T', '8',
		'-f', "$dir/prod.sql\@3", '-f', "$dir/cons.sql\@3",
		'-f', "$dir/verify.sql\@2", 'postgres'
	]);
like($out, qr/number of failed transactions: 0/, 'no transaction failed')
  or diag($err);
my ($verified) = $out =~ /SQL script 3: .*?\n - (\d+) transactions/s;
diag("verify ran " . ($verified // '?') . " times under load");
is($node->safe_psql('postgres', 'SELECT count(*) FROM problems'),
	'0', 'verify() found nothing under load')
  or diag($node->safe_psql('postgres', 'SELECT * FROM problems ORDER BY at LIMIT 20'));
cmp_ok(
	$node->safe_psql('postgres',
		'SELECT sum(spindles_dropped) FROM spindle.tables'),
	'>', 0, 'the worker dropped spindles meanwhile');

verify_ok($node, 'postgres', 'spindle_q.vq');
verify_ok($node, 'postgres', 't');

# a crash loses the consumer state and the slot counters: still healthy
$node->stop('immediate');
$node->start;
verify_ok($node, 'postgres', 'spindle_q.vq', 'queue healthy after a crash');
verify_ok($node, 'postgres', 't', 'table healthy after a crash');
$node->safe_psql('postgres', q{
SELECT count(*) FROM spindle.dequeue('vq', 7);
INSERT INTO t (body) SELECT 'y' FROM generate_series(1, 40);
});
verify_ok($node, 'postgres', 'spindle_q.vq', 'queue healthy after consuming again');
verify_ok($node, 'postgres', 't', 'table healthy after inserting again');

$node->stop;
done_testing();
