# The Python example (examples/worker.py, psycopg 3) against a real server:
# it long-polls with read(), processes each event into a results table and
# acks it in the same transaction, retries failing events with
# set_visibility() backoff, and exits after its idle polls.  Every event is
# processed exactly once and the queue ends empty.  Then SIGTERM stops a
# worker that sleeps in a long poll at once.
#
# Skipped only when no python3 with psycopg 3 is installed
# (scripts/setup.sh installs python3-psycopg, so CI runs it).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;
use IPC::Run;
use Time::HiRes qw(gettimeofday tv_interval);

my $worker_py = "$FindBin::RealBin/../../examples/worker.py";

# The first python3 that has psycopg 3.
my $python;
for my $candidate ($ENV{PYTHON} // (), 'python3', '/usr/bin/python3')
{
	my ($out, $err) = ('', '');
	my $ok = eval {
		IPC::Run::run([ $candidate, '-c', 'import psycopg; print(psycopg.__version__)' ],
			'>', \$out, '2>', \$err);
	};
	if ($ok)
	{
		$python = $candidate;
		chomp $out;
		note "using $candidate with psycopg $out";
		last;
	}
}
plan skip_all =>
  'python3 with psycopg 3 not found: install python3-psycopg (scripts/setup.sh does)'
  unless defined $python;

my $node = PostgreSQL::Test::Cluster->new('python_example');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle'
max_worker_processes = 16
});
$node->start;
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION spindle;
SELECT spindle.create_queue('jobs');
-- 100 events; every 10th fails once, 55 fails twice before it succeeds
SELECT count(*) FROM spindle.enqueue_batch('jobs', ARRAY(
    SELECT CASE WHEN g = 55 THEN jsonb_build_object('n', g, 'fail', 2)
                WHEN g % 10 = 0 THEN jsonb_build_object('n', g, 'fail', 1)
                ELSE jsonb_build_object('n', g) END
      FROM generate_series(1, 100) g));
});
my $dsn = $node->connstr('postgres');

my ($out, $err) = ('', '');
my $t0 = [gettimeofday];
my $ok = IPC::Run::run(
	[
		$python, $worker_py,
		'--dsn' => $dsn,
		'--queue' => 'jobs',
		'--idle-exit' => 2,
		'--wait' => 1,
		'--batch' => 7,
		'--retry-base' => 0.2,
		'--results-table' => 'results',
		'-v'
	],
	'>', \$out, '2>', \$err,
	IPC::Run::timeout(120));
note sprintf("worker.py ran %.1f s; its log:\n%s", tv_interval($t0), $err);
ok($ok, 'worker.py exits with status 0');

is( $node->safe_psql(
		'postgres', q{
SELECT count(*) || ':' || count(DISTINCT payload->>'n') || ':' || count(DISTINCT msg_id)
       || ':' || min((payload->>'n')::int) || ':' || max((payload->>'n')::int)
  FROM results}),
	'100:100:100:1:100',
	'every event was processed exactly once');
is( $node->safe_psql(
		'postgres', q{
SELECT string_agg((payload->>'n') || '=' || read_count, ',' ORDER BY (payload->>'n')::int)
  FROM results WHERE payload ? 'fail'}),
	join(',', map { $_ == 55 ? '55=3' : "$_=2" } (10, 20, 30, 40, 50, 55, 60, 70, 80, 90, 100)),
	'failing events were retried and processed on the delivery after their failures');
is( $node->safe_psql(
		'postgres', q{SELECT count(*) FROM results WHERE NOT payload ? 'fail' AND read_count <> 1}),
	'0',
	'the others were processed on their first delivery');
is($node->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.jobs'),
	'0', 'the queue is empty');
is($node->safe_psql('postgres', q{SELECT count(*) FROM spindle.read('jobs', 10, '1 s')}),
	'0', 'nothing left to read');

# ---- without a results table it prints each event as a JSON line ---------
$node->safe_psql('postgres',
	q{SELECT spindle.create_queue('printed');
	  SELECT count(*) FROM spindle.enqueue_batch('printed',
	      ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[]);});
($out, $err) = ('', '');
ok( IPC::Run::run(
		[
			$python, $worker_py,
			'--dsn' => $dsn,
			'--queue' => 'printed',
			'--idle-exit' => 1,
			'--wait' => 0.5
		],
		'>', \$out, '2>', \$err,
		IPC::Run::timeout(60)),
	'worker.py printing events exits with status 0');
is( join(',', map { /"payload": \{"n": (\d+)\}/ ? $1 : "?$_" } split /\n/, $out),
	'1,2,3', 'it printed the three events in order, as JSON lines');
is($node->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.printed'),
	'0', 'and acknowledged them');

# ---- SIGTERM ends a worker sleeping in a long poll --------------------------
my ($out2, $err2) = ('', '');
my $h = IPC::Run::start(
	[
		$python, $worker_py,
		'--dsn' => $dsn,
		'--queue' => 'jobs',
		'--wait' => 60,
		'-v'
	],
	'>', \$out2, '2>', \$err2,
	IPC::Run::timeout(120));
ok( defined wait_for($node, 'postgres', q{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE application_name = 'spindle-example-worker' AND wait_event_type = 'Extension'},
		30),
	'the worker sleeps in its long poll');
my $t_term = [gettimeofday];
$h->signal('TERM');
my $finished = eval { $h->finish; 1 };
my $took = tv_interval($t_term);
note sprintf("worker.py exited %.2f s after SIGTERM; its log:\n%s", $took, $err2);
ok($finished && $h->result == 0, 'worker.py exits with status 0 on SIGTERM');
cmp_ok($took, '<', 3, 'at once, not after its 60 s poll');

$node->stop;
done_testing();
