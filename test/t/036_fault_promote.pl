# Failover: a primary with a synchronous standby (synchronous_commit =
# remote_apply) runs producers, dequeue consumers and read/ack consumers,
# each a psql client that prints what the server acknowledged (RETURNING);
# the primary is stopped with -m immediate in the middle of the load and
# the standby promoted.  The new primary must hold every event whose
# enqueue the old one acknowledged (in the queue or consumed), no event
# whose dequeue or ack was acknowledged may come back, the logs and the
# spindles must be consistent, and the queue must work there: enqueue,
# dequeue, read/ack and the worker's drops.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;
use Time::HiRes qw(gettimeofday tv_interval usleep);
use IPC::Run;

my $t_start = [gettimeofday];
my $q = 'pq';
my $primary = queue_node('old_primary', init => { allows_streaming => 1 });
queue_logs($primary, 'postgres', $q, 25);
$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('new_primary');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;
# only the old primary waits for its standby (postgresql.auto.conf is not
# in the backup)
$primary->safe_psql('postgres', q{
ALTER SYSTEM SET synchronous_standby_names = '*';
ALTER SYSTEM SET synchronous_commit = 'remote_apply';
SELECT pg_reload_conf();
});
ok( $primary->poll_query_until(
		'postgres',
		q{SELECT count(*) = 1 FROM pg_stat_replication WHERE sync_state = 'sync'}),
	'the standby is synchronous');
is($primary->safe_psql('postgres', 'SHOW synchronous_commit'),
	'remote_apply', 'synchronous_commit = remote_apply');

my $dir = PostgreSQL::Test::Utils::tempdir;

# A psql client running $n copies of $stmt, its output (what the server
# acknowledged) in a file.
my @clients;

sub client
{
	my ($name, $stmt, $n) = @_;
	my $sql = "$dir/$name.sql";
	open my $fh, '>', $sql or die;
	print $fh "$stmt;\n" x $n;
	close $fh;
	my $out = "$dir/$name.out";
	my $h = IPC::Run::start(
		[ 'psql', '-X', '-At', '-d', $primary->connstr('postgres'), '-f', $sql ],
		'<', \undef, '>', $out, '2>', "$dir/$name.err");
	push @clients, $h;
	return $out;
}

my @prod_out = (
	client('prod1',
		"INSERT INTO produced_$q SELECT spindle.enqueue('$q', '{\"p\": 1}') RETURNING msg_id",
		20000),
	client('prod2',
		"INSERT INTO produced_$q SELECT * FROM spindle.enqueue_batch('$q', ARRAY(SELECT '{\"p\": 2}'::jsonb FROM generate_series(1, 7))) RETURNING msg_id",
		20000));
my @cons_out = (
	client('cons1',
		"INSERT INTO consumed_$q SELECT msg_id, read_count FROM spindle.dequeue('$q', 4) RETURNING msg_id",
		20000),
	client('cons2',
		"INSERT INTO consumed_$q SELECT msg_id, read_count FROM spindle.dequeue('$q', 1) RETURNING msg_id",
		20000));
my @ack_out = (
	client('acker',
		"INSERT INTO acked_$q SELECT * FROM spindle.ack('$q', ARRAY(SELECT msg_id FROM spindle.read('$q', 3, '30 seconds'))) RETURNING msg_id",
		20000));

sleep(3);
my $acked_before = $primary->safe_psql('postgres', "SELECT count(*) FROM produced_$q");
cmp_ok($acked_before, '>', 100, "the load runs ($acked_before events produced so far)");
usleep(int(rand(1_000_000)));
$primary->stop('immediate');
for my $h (@clients)
{
	eval { $h->finish; };
}

sub read_ids
{
	my @ids;
	for my $file (@_)
	{
		open my $fh, '<', $file or die "$file: $!";
		while (<$fh>)
		{
			chomp;
			push @ids, $_ if /^\d+$/;
		}
		close $fh;
	}
	return @ids;
}
my @produced = read_ids(@prod_out);
my @consumed = read_ids(@cons_out);
my @acked = read_ids(@ack_out);
note sprintf('the old primary acknowledged %d enqueues, %d dequeues, %d acks',
	scalar @produced, scalar @consumed, scalar @acked);
cmp_ok(scalar @produced, '>', 100, 'producers got acknowledgements');
cmp_ok(scalar @consumed, '>', 10, 'consumers got acknowledgements');
cmp_ok(scalar @acked, '>', 5, 'the read/ack consumer got acknowledgements');

$standby->promote;
my $node = $standby;

# the client-side logs, on the new primary
$node->safe_psql('postgres', 'CREATE TABLE client_log (kind text, msg_id bigint)');
my $copy = '';
$copy .= "p\t$_\n" for @produced;
$copy .= "c\t$_\n" for @consumed;
$copy .= "a\t$_\n" for @acked;
$node->safe_psql('postgres', "COPY client_log FROM STDIN;\n$copy\\.\n");

is( $node->safe_psql('postgres', qq{
SELECT count(*) FROM client_log l WHERE kind = 'p'
   AND NOT EXISTS (SELECT FROM produced_$q p WHERE p.msg_id = l.msg_id)}),
	'0', 'every acknowledged enqueue is in the log on the new primary');
is( $node->safe_psql('postgres', qq{
SELECT count(*) FROM client_log l WHERE kind = 'p'
   AND NOT EXISTS (SELECT FROM spindle_q.$q e WHERE e.msg_id = l.msg_id)
   AND NOT EXISTS (SELECT FROM consumed_$q c WHERE c.msg_id = l.msg_id)
   AND NOT EXISTS (SELECT FROM acked_$q a WHERE a.msg_id = l.msg_id)}),
	'0', 'every acknowledged event is on the new primary: in the queue, dequeued or acked');
is( $node->safe_psql('postgres', qq{
SELECT count(*) FROM client_log l WHERE kind IN ('c', 'a')
   AND (EXISTS (SELECT FROM spindle_q.$q e WHERE e.msg_id = l.msg_id)
        OR NOT EXISTS (SELECT FROM consumed_$q c WHERE c.msg_id = l.msg_id
                       UNION ALL SELECT FROM acked_$q a WHERE a.msg_id = l.msg_id))}),
	'0', 'no event whose dequeue or ack was acknowledged is back in the queue');
check_consistent($node, 'postgres', "spindle_q.$q", 'after the promotion');

# the queue works on the new primary: a load, a drain, the worker's drops
my $f = load_scripts($dir, $q, batch => 10, dequeue => 5, vt => '1 second');
my $load = start_load($node, 'postgres', 4, 5, [ $f->{prod}, 3 ],
	[ $f->{batch}, 1 ], [ $f->{cons}, 5 ], [ $f->{reader}, 1 ]);
my ($out, $err) = stop_load($load);
like($out, qr/number of failed transactions: 0/, 'a load on the new primary runs without errors')
  or diag("$out\n$err");
my $drained = drain_queue($node, 'postgres', $q);
check_consistent($node, 'postgres', "spindle_q.$q", 'after the drain on the new primary');
my ($p, $c, $a, $left) = split /:/, log_counts($node, 'postgres', $q);
note "events checked: $p produced, $c dequeued, $a acked";
is($c + $a, $p, 'enqueued = dequeued + acked');
ok( defined wait_for(
		$node, 'postgres', qq{
SELECT count(*) = 0 FROM spindle.spindles
 WHERE relation = 'spindle_q.$q'::regclass AND state = 'full'}, 30),
	'the worker of the new primary drops every full spindle');
cmp_ok(
	$node->safe_psql('postgres',
		"SELECT spindles_dropped FROM spindle.worker WHERE database = 'postgres'"),
	'>', 0, 'the worker runs on the new primary');

$node->stop;
note sprintf('run time %.1f s', tv_interval($t_start));
done_testing();
