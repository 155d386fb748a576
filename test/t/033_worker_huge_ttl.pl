# The worker applies a time_to_live of the largest interval (178 000 000
# years, which the option accepts) without failing: no event is that old,
# so it purges nothing.  It used to fail at every round for such a table
# with "timestamp out of range" (computing now - ttl), shown in
# spindle.worker.last_error.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my $node = PostgreSQL::Test::Cluster->new('huge_ttl');
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
CREATE TABLE forever (id int) USING spindle
    WITH (events_per_spindle = 10, time_to_live = '178000000 years');
INSERT INTO forever SELECT generate_series(1, 25);
SELECT spindle.create_queue('q_forever', time_to_live => '178000000 years');
SELECT spindle.enqueue('q_forever', '{}');
});
ok( defined wait_for(
		$node, 'postgres',
		q{SELECT count(*) > 0 FROM spindle.worker WHERE last_run IS NOT NULL},
		30),
	'the worker ran');
# a few more rounds
my $first = $node->safe_psql('postgres', 'SELECT last_run FROM spindle.worker');
ok( defined wait_for(
		$node, 'postgres',
		qq{SELECT last_run > '$first'::timestamptz + interval '300 ms' FROM spindle.worker},
		30),
	'the worker went on');
is($node->safe_psql('postgres', 'SELECT last_error IS NULL FROM spindle.worker'),
	't', 'the worker reports no error')
  or diag($node->safe_psql('postgres', 'SELECT last_error FROM spindle.worker'));
is($node->safe_psql('postgres', 'SELECT count(*) FROM forever'),
	'25', 'nothing was purged');
is($node->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.q_forever'),
	'1', 'nothing was purged from the queue');
unlike(slurp_file($node->logfile), qr/timestamp out of range/,
	'no "timestamp out of range" in the log');
verify_ok($node, 'postgres', 'forever');
$node->stop;
done_testing();
