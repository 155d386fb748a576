# enqueue stands for an INSERT into the queue's table, so a security or
# audit module's ExecutorCheckPerms_hook (sepgsql, pgaudit) sees it and may
# refuse it, whether enqueue places the events directly (queue_insert.c)
# or through SPI.  The test module spindle_test_perms refuses INSERT into
# the tables spindle_test_perms.deny_insert names.  Before the fix the
# direct path skipped the hook: enqueue placed events the INSERT refused.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my $node = PostgreSQL::Test::Cluster->new('review_w');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle, spindle_test_perms'
spindle.enable_worker = off
autovacuum = off
});
$node->start;
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION spindle;
SELECT spindle.create_queue('hq', events_per_spindle => 4);
});

my $deny = q{SET spindle_test_perms.deny_insert = 'hq';};
my %refused = (
	'INSERT' => q{INSERT INTO spindle_q.hq (payload) VALUES ('{"via": "insert"}')},
	'enqueue' => q{SELECT spindle.enqueue('hq', '{"via": "enqueue"}')},
	'enqueue_batch' =>
	  q{SELECT count(*) FROM spindle.enqueue_batch('hq', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[])},
);
for my $what (sort keys %refused)
{
	my ($ret, $out, $err) = $node->psql(
		'postgres',
		"\\set VERBOSITY verbose\n$deny\n$refused{$what};",
		on_error_stop => 1);
	isnt($ret, 0, "$what refused by the ExecutorCheckPerms_hook");
	like($err, qr/ERROR:  42501: spindle_test_perms: INSERT into "hq" denied/,
		"$what: the hook's error, SQLSTATE 42501");
}
is($node->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.hq'),
	'0', 'nothing was placed');

# the hook allowing it, enqueue works (and numbers the events)
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM spindle.enqueue_batch('hq',
  (SELECT array_agg(jsonb_build_object('n', g)) FROM generate_series(1, 10) g));
SELECT spindle.enqueue('hq', '{"n": 11}') > 0;
SELECT count(DISTINCT msg_id) FROM spindle_q.hq;}),
	"10\nt\n11",
	'allowed, enqueue places the events');
verify_ok($node, 'postgres', 'spindle_q.hq');

$node->stop;
done_testing();
