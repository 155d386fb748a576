# Immediate shutdowns under load: producers (single enqueues, 20 % rolled
# back, and batches that span several tiny spindles), dequeue consumers
# (10 % rolled back) and read/ack consumers run in pgbench while the
# server is stopped with `pg_ctl stop -m immediate` at random moments, six
# times: plain random moments, while the worker holds a dropped spindle's
# lock (in the middle of a drop of a backlog of droppable spindles), and
# while a spindle creator is running for a batch that crosses spindle
# boundaries.  Every operation logs what it got into a heap table in its
# own transaction, so after each restart the logs say exactly what
# committed: nothing committed may be lost, nothing delivered twice, and
# the spindle counters must agree with the table.  At the end everything
# is drained, every event was consumed exactly once, every redelivery of a
# read was counted, and the worker drops every spindle.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;
use Time::HiRes qw(gettimeofday tv_interval usleep);

my $t_start = [gettimeofday];
my $q = 'fi';
my $node = queue_node('fault_imm', conf => "spindle.naptime = '50ms'\n");
queue_logs($node, 'postgres', $q, 20);
install_wait_backend($node);
my $dir = PostgreSQL::Test::Utils::tempdir;
my $f = load_scripts($dir, $q, batch => 30, dequeue => 10, vt => '1 second');
my @mix = ([ $f->{prod}, 3 ], [ $f->{batch}, 1 ], [ $f->{cons}, 6 ],
	[ $f->{reader}, 1 ]);

srand($ENV{SPINDLE_TEST_SEED} // time);

sub set_worker
{
	my ($on) = @_;
	$node->append_conf('postgresql.conf',
		'spindle.enable_worker = ' . ($on ? 'on' : 'off') . "\n");
	$node->reload;
}

my @modes = qw(random drop boundary random drop boundary random);
my %hit = (drop => 0, boundary => 0);
my $last = '';
for my $round (1 .. @modes)
{
	my $mode = $modes[ $round - 1 ];
	my $load = start_load($node, 'postgres', 60, 6, @mix);
	my $what = "round $round ($mode)";

	if ($mode eq 'random')
	{
		usleep(int((0.5 + rand(2.0)) * 1_000_000));
	}
	elsif ($mode eq 'drop')
	{
		# a backlog of full, consumed spindles, then the worker drops them
		set_worker(0);
		usleep(1_500_000);
		set_worker(1);
		my $pid = $node->safe_psql('postgres',
			q{SELECT wait_worker_drop(5)});
		$hit{drop}++ if $pid;
		note "$what: worker $pid was dropping a spindle (held its AccessExclusiveLock) at the crash";
	}
	else
	{
		usleep(300_000);
		my $pid = $node->safe_psql('postgres',
			q{SELECT wait_backend('spindle creator', NULL, 5)});
		$hit{boundary}++ if $pid;
		note "$what: spindle creator $pid was running at the crash";
	}
	$node->stop('immediate');
	stop_load($load, 1);
	$node->start;
	next_epoch($node);

	my $counts = log_counts($node, 'postgres', $q);
	note "$what: produced:consumed:acked:in queue = $counts";
	isnt($counts, $last, "$what: the load made progress before the crash");
	$last = $counts;
	check_consistent($node, "postgres", "spindle_q.$q", "after crash $round ($mode)")
	  or diag("inconsistent after crash $round");
}
cmp_ok($hit{drop}, '>=', 1, "crashed during a worker's drop $hit{drop} times");
cmp_ok($hit{boundary}, '>=', 1,
	"crashed while a spindle creator ran $hit{boundary} times");

# A last load without a crash: the queue still works after all of them.
my $load = start_load($node, 'postgres', 3, 6, @mix);
my ($out, $err) = stop_load($load);
like($out, qr/number of failed transactions: 0/, 'the load after the crashes ran without errors')
  or diag("$out\n$err");

my $drained = drain_queue($node, 'postgres', $q);
note "drained $drained events";
check_consistent($node, 'postgres', "spindle_q.$q", 'after the drain');
check_read_counts($node, 'postgres', $q);
my ($produced, $consumed, $acked, $left) = split /:/,
  log_counts($node, 'postgres', $q);
note "events checked: $produced produced, $consumed dequeued, $acked acked";
is($consumed + $acked, $produced, 'enqueued = dequeued + acked');
is($left, 0, 'the queue is empty');

# the worker drops every full spindle now that all is consumed
ok( defined wait_for(
		$node, 'postgres', qq{
SELECT count(*) = 0 FROM spindle.spindles
 WHERE relation = 'spindle_q.$q'::regclass AND state = 'full'}, 30),
	'the worker drops every full spindle after the crashes');
check_consistent($node, 'postgres', "spindle_q.$q", 'after the drops');

$node->stop;
note sprintf('run time %.1f s', tv_interval($t_start));
done_testing();
