# Review finding 14: COMMIT PREPARED of a transaction that enqueued must
# wake the consumers waiting on the queue (long poll), as a plain COMMIT
# does, and so must ROLLBACK PREPARED of one that deleted events (they are
# deliverable again).  Before the fix the waiter slept for its whole wait.
#
# Each waiter runs in a background psql with a 30 s wait and reports the
# rows it got and how long the statement ran (server clock); it must
# return well before its wait is over.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('queue_prepared_wake');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle'
max_worker_processes = 16
max_prepared_transactions = 4
spindle.enable_worker = off
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION spindle;');
$node->safe_psql('postgres', "SELECT spindle.create_queue('wq');");
# the queue's consumer state exists (spindle.queues.waiting_consumers)
$node->safe_psql('postgres', "SELECT count(*) FROM spindle.dequeue('wq', 1);");

# Start a waiter: $consume runs with a 30 s wait; returns the harness and
# its output buffer.
sub start_waiter
{
	my ($consume) = @_;
	my ($in, $out, $err) = ('', '', '');
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres') ],
		'<', \$in, '>', \$out, '2>', \$err,
		IPC::Run::timeout(120));
	$in .= "SELECT count(*) || ' ' || round(extract(epoch FROM clock_timestamp() - statement_timestamp()))::int FROM $consume;\n\\q\n";
	$h->pump_nb;
	return ($h, \$out, \$err);
}

# Wait until $n consumers sleep on queue wq.
sub wait_sleeping
{
	my ($n) = @_;
	ok( defined wait_for(
			$node, 'postgres',
			"SELECT waiting_consumers = $n FROM spindle.queues WHERE queue_name = 'wq'",
			30),
		"$n waiter(s) asleep");
}

# ---- COMMIT PREPARED of an enqueue ----
my ($h, $out, $err) = start_waiter("spindle.dequeue('wq', 1, wait => '30 s')");
wait_sleeping(1);
$node->safe_psql('postgres',
	"BEGIN; SELECT spindle.enqueue('wq', '{\"n\": 1}'); PREPARE TRANSACTION 'wake1';");
sleep(1);
$node->safe_psql('postgres', "COMMIT PREPARED 'wake1';");
$h->finish;
like($$out, qr/^1 \d+$/m, 'the waiter got the event of the prepared enqueue')
  or diag("stdout: $$out stderr: $$err");
my ($secs) = $$out =~ /^1 (\d+)$/m;
ok(defined $secs && $secs < 10,
	'COMMIT PREPARED woke the waiter (' . ($secs // '?') . ' s of a 30 s wait)');

# ---- ROLLBACK PREPARED of a delete ----
$node->safe_psql('postgres', "SELECT spindle.enqueue('wq', '{\"n\": 2}');");
$node->safe_psql('postgres',
	"BEGIN; DELETE FROM spindle_q.wq; PREPARE TRANSACTION 'wake2';");
($h, $out, $err) = start_waiter("spindle.read('wq', 1, '1 min', wait => '30 s')");
wait_sleeping(1);
sleep(1);
$node->safe_psql('postgres', "ROLLBACK PREPARED 'wake2';");
$h->finish;
like($$out, qr/^1 \d+$/m, 'the waiter got the event the prepared delete left')
  or diag("stdout: $$out stderr: $$err");
($secs) = $$out =~ /^1 (\d+)$/m;
# a pending delete is polled every second anyway: this only shows no harm
ok(defined $secs && $secs < 10,
	'ROLLBACK PREPARED: the waiter returned (' . ($secs // '?') . ' s of a 30 s wait)');

$node->stop;
done_testing();
