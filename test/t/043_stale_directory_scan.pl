# More readers whose cached directory is older than a committed spindle
# (see 042_stale_directory for the window: a transaction that created a
# spindle shows in snapshots before it sends its invalidations).  The test
# module spindle_test_hooks holds a producer's COMMIT in that window:
#   - a consumer waiting in dequeue(..., wait) is woken by that COMMIT (the
#     wake-up is sent from the commit callback, before the invalidations):
#     it must deliver the new events at once, not sleep until its wait ends
#     with events waiting;
#   - a scan of the table by an older session whose snapshot shows the
#     producer's transaction committed must show all of its events, not
#     those of the spindles its directory knows only.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep gettimeofday tv_interval);

my $node = PostgreSQL::Test::Cluster->new('stale_dir_scan');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle'
spindle.enable_worker = off
max_worker_processes = 1
autovacuum = off
});
$node->start;
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION spindle;
CREATE FUNCTION delay_commit(int) RETURNS void
  AS 'spindle_test_hooks', 'spindle_test_delay_commit' LANGUAGE C;
SELECT spindle.create_queue('q', events_per_spindle => 1);
CREATE INDEX q_msg_id ON spindle_q.q (msg_id);
});

# Begin a producer's transaction of two events, each in a spindle it
# creates itself (the ready spindles are used up first), and send its
# COMMIT, held $ms visible-but-not-announced.  Returns the producer's
# session and the two msg_ids.
sub start_window
{
	my ($ms, $before) = @_;
	my $prod = $node->background_psql('postgres', on_error_stop => 0);
	$prod->query_safe(q{BEGIN});
	# before the first enqueue: its commit callback then runs after the
	# queue's, which wakes the waiting consumers
	$prod->query_safe(qq{SELECT delay_commit($ms)});
	my $xid = $prod->query_safe(q{SELECT txid_current()});
	my @ids;
	my $n = 0;
	# fill spindles until the producer's transaction creates one itself
	for my $i (1 .. 10)
	{
		my $id = $prod->query_safe(q{SELECT spindle.enqueue('q', '{"n": 1}')});
		$n++;
		my $own = $prod->query_safe(
			qq{SELECT count(*) FROM spindle.spindle_catalog
			    WHERE relation = 'spindle_q.q'::regclass AND $id >= first_no AND $id < first_no + vcount AND xmin::text = '$xid'});
		push @ids, $id if $own eq '1';
		last if @ids == 2;
	}
	die 'the producer created no spindle itself' unless @ids == 2;
	$before->() if $before;
	$prod->query_until(qr/committing/, "\\echo committing\nCOMMIT;\n");
	return ($prod, $n, @ids);
}

# the older sessions: their directories are cached before each window
my $old = $node->background_psql('postgres', on_error_stop => 0);
my $waiter = $node->background_psql('postgres', on_error_stop => 0);
$node->safe_psql('postgres', q{SELECT spindle.enqueue('q', '{"n": 0}')});
is($old->query_safe(q{SELECT count(*) FROM spindle.dequeue('q', 10)}),
	'1', 'the older session dequeues the first event');
$waiter->query_safe(q{SELECT count(*) FROM spindle_q.q});

# 1. a consumer waiting for events is woken by the held COMMIT
my $t0;
my ($prod, $n, $a, $b) = start_window(
	4000,
	sub {
		$t0 = [gettimeofday];
		$waiter->query_until(qr/waiting/,
			"\\echo waiting\nSELECT 'got ' || count(*) FROM spindle.dequeue('q', 10, '20 s');\n"
		);
		usleep(300_000);
	});
my $out = $waiter->query_safe(q{SELECT 'elapsed ' || 1});
my $elapsed = tv_interval($t0);
like($out, qr/got $n\b/, "the waiting consumer delivers the $n events");
cmp_ok($elapsed, '<', 12,
	'... once the COMMIT is announced, not when its wait ends');
$prod->quit;

# 2. a scan by the older session in the window
$old->query_safe(q{SELECT count(*) FROM spindle_q.q});
($prod, $n, $a, $b) = start_window(4000);
$node->poll_query_until('postgres',
	"SELECT count(*) = $n FROM spindle_q.q")
  or die 'the events never became visible';
is($old->query_safe(q{SELECT count(*) FROM spindle.verify('spindle_q.q')}),
	'0', 'spindle.verify() by the older session finds nothing wrong');
is( $old->query_safe(
		qq{SELECT count(*) || ':' || count(*) FILTER (WHERE msg_id IN ($a, $b)) FROM spindle_q.q}),
	"$n:2",
	'a scan by the older session shows every event of the committed transaction');
$prod->quit;

# 3. an index lookup by the older session in the window, once VACUUM (or
# the worker's cleanup) has forgotten the creator's pending ranges: the
# new events are not dead to everyone, and their index entries must stay
$node->safe_psql('postgres', q{SELECT spindle.drop_spindles('spindle_q.q')});
$old->query_safe(q{SELECT count(*) FROM spindle_q.q});
$old->query_safe(q{SET enable_seqscan = off});
$old->query_safe(q{SET enable_bitmapscan = off});
my ($n3, $a3, $b3);
($prod, $n3, $a3, $b3) = start_window(4000);
$node->poll_query_until('postgres',
	"SELECT count(*) = $n + $n3 FROM spindle_q.q")
  or die 'the events never became visible';
$node->safe_psql('postgres', q{SELECT spindle.drop_spindles('spindle_q.q')});
is( $old->query_safe(
		qq{SELECT count(*) FROM spindle_q.q WHERE msg_id IN ($a3, $b3)}),
	'2', 'an index lookup by the older session finds the new events');
$prod->quit;
is( $node->safe_psql(
		'postgres', qq{SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM spindle_q.q WHERE msg_id IN ($a3, $b3)}),
	'2', 'and their index entries are alive afterwards');
$node->safe_psql('postgres', q{SELECT count(*) FROM spindle.dequeue('q', 100)});

# 4. a consumer waiting since before the window (its statement's catalog
# snapshot is older than the producer's commit) is woken in the window by
# another consumer's rollback and takes the items it returned, of a spindle
# its directory does not list: it reads the directory again, and must then
# find the spindle's relation too, not take the events for gone
my $waiter2 = $node->background_psql('postgres', on_error_stop => 0);
$waiter2->query_safe(q{SELECT count(*) FROM spindle_q.q});
my ($n4, $a4, $b4);
($prod, $n4, $a4, $b4) = start_window(
	4000,
	sub {
		$waiter2->query_until(qr/waiting/,
			"\\echo waiting\nSELECT 'got ' || count(*) FROM spindle.dequeue('q', 10, '8 s');\n"
		);
		usleep(300_000);
	});
# (the waiter may have taken them already: wait for the commit itself)
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM spindle.spindle_catalog WHERE relation = 'spindle_q.q'::regclass AND $b4 >= first_no AND $b4 < first_no + vcount")
  or die 'the commit never became visible';
$node->safe_psql('postgres',
	q{BEGIN; SELECT count(*) FROM spindle.dequeue('q', 10); ROLLBACK;});
$out = $waiter2->query_safe(q{SELECT 1});
my ($got4) = $out =~ /got (\d+)/;
my $rest = $node->safe_psql('postgres',
	q{SELECT count(*) FROM spindle.dequeue('q', 100)});
is($got4 + $rest, $n4, 'every event is delivered, by the waiter or after it');
$prod->quit;
$waiter2->quit;
is($node->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.q'),
	'0', 'the queue is empty');
is($node->safe_psql('postgres', q{SELECT count(*) FROM spindle.verify('spindle_q.q')}),
	'0', 'spindle.verify() finds nothing wrong');

$old->quit;
$waiter->quit;
$node->stop;
done_testing();
