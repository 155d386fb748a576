# Long poll: dequeue(..., wait => ...) and read(..., wait => ...) sleep
# until an enqueue commits, a delayed event becomes due or a lease expires,
# and return within 100 ms of it (asserted < 300 ms to allow for
# scheduling); an enqueue that has not committed, or rolled back, wakes no
# one; pg_cancel_backend and statement_timeout end a wait at once; a wait
# with nothing to deliver returns no rows when it runs out.
#
# Times are taken on the test side with Time::HiRes: when a statement's
# result (or error) reaches the test, with every session pumped in one
# loop; due times of delayed events come from the server's clock (the same
# machine's wall clock).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;
use Time::HiRes qw(gettimeofday tv_interval usleep);

my $node = spindle_node('queue_wait');

# ---- statements that run while the test goes on --------------------------
my $tag_no = 0;

sub now_s { return scalar gettimeofday(); }

# Start $sql in background psql $s; returns a handle for poll/finish.
sub start_query
{
	my ($s, $sql) = @_;
	my $tag = 'query_done_' . ++$tag_no;
	$s->{stdout} = '';
	$s->{stderr} = '';
	$s->{stdin} .= "$sql\n;\n\\echo '$tag'\n\\warn '$tag'\n";
	my $q = { s => $s, tag => $tag, sent => now_s() };
	$s->{run}->pump_nb;
	return $q;
}

# Whether $q has finished; the first time it has, records when (done),
# its output (out) and what it wrote to stderr (err).
sub poll_query
{
	my ($q) = @_;
	return 1 if defined $q->{done};
	my $s = $q->{s};
	$s->{run}->pump_nb;
	my $tag = $q->{tag};
	return 0
	  unless $s->{stdout} =~ /\Q$tag\E\r?\n/ && $s->{stderr} =~ /\Q$tag\E\r?\n/;
	$q->{done} = now_s();
	($q->{out}, $q->{err}) = ($s->{stdout}, $s->{stderr});
	$q->{out} =~ s/\r?\n?\Q$tag\E\r?\n//;
	$q->{err} =~ s/\r?\n?\Q$tag\E\r?\n//;
	$s->{stdout} = '';
	$s->{stderr} = '';
	return 1;
}

# Pump until every query of @q has finished (dies after $limit seconds).
sub finish_queries
{
	my ($limit, @q) = @_;
	my $t0 = now_s();
	while (grep { !poll_query($_) } @q)
	{
		die 'queries did not finish in time: '
		  . join(', ', map { "[$_->{tag}: $_->{s}{stdout} / $_->{s}{stderr}]" } @q)
		  if now_s() - $t0 > $limit;
		usleep(500);
	}
	return;
}

# Pump $q for $secs seconds; returns whether it finished meanwhile.
sub finished_within
{
	my ($q, $secs) = @_;
	my $t0 = now_s();
	while (now_s() - $t0 < $secs)
	{
		return 1 if poll_query($q);
		usleep(1_000);
	}
	return poll_query($q);
}

# Until backend $pid sleeps in the queue's wait (a condition variable
# sleep, wait event type Extension).
sub wait_until_sleeping
{
	my ($pid, $what) = @_;
	ok( defined wait_for($node, 'postgres',
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE pid = $pid AND wait_event_type = 'Extension'",
			30, 5),
		"$what: the waiter sleeps");
	return;
}

sub session
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	$s->query_safe('\set VERBOSITY sqlstate');
	return ($s, $pid);
}

my ($waiter, $waiter_pid) = session();
my ($producer) = session();

# ---- dequeue woken by an enqueue's commit --------------------------------
$node->safe_psql('postgres', q{SELECT spindle.create_queue('w1')});
my $w = start_query($waiter,
	q{SELECT payload->>'n' FROM spindle.dequeue('w1', 1, wait => '10 s')});
wait_until_sleeping($waiter_pid, 'dequeue');

$producer->query_safe('BEGIN');
$producer->query_safe(q{SELECT spindle.enqueue('w1', '{"n": 0}')});
$producer->query_safe('ROLLBACK');
ok(!finished_within($w, 0.2), 'a rolled-back enqueue delivers nothing');
$producer->query_safe('BEGIN');
$producer->query_safe(q{SELECT spindle.enqueue('w1', '{"n": 1}')});
ok(!finished_within($w, 0.2), 'an enqueue not committed yet delivers nothing');
my $c = start_query($producer, 'COMMIT');
finish_queries(15, $c, $w);
my $lat = $w->{done} - $c->{done};
note sprintf('dequeue waiter returned %.1f ms after the enqueue committed',
	1000 * $lat);
is($w->{out}, '1', 'the waiting dequeue gets the committed event');
is($w->{err}, '', 'without an error');
cmp_ok($lat, '<', 0.3, 'the waiting dequeue returns within 100 ms (< 300 ms) of the commit');

# ---- read woken by an enqueue's commit -----------------------------------
$node->safe_psql('postgres', q{SELECT spindle.create_queue('w2')});
$w = start_query($waiter,
	q{SELECT payload->>'n', read_count FROM spindle.read('w2', 1, '1 min', wait => '10 s')});
wait_until_sleeping($waiter_pid, 'read');
$producer->query_safe('BEGIN');
$producer->query_safe(q{SELECT spindle.enqueue('w2', '{"n": 2}')});
ok(!finished_within($w, 0.2), 'read: an enqueue not committed yet delivers nothing');
$c = start_query($producer, 'COMMIT');
finish_queries(15, $c, $w);
$lat = $w->{done} - $c->{done};
note sprintf('read waiter returned %.1f ms after the enqueue committed',
	1000 * $lat);
is($w->{out}, '2|1', 'the waiting read leases the committed event');
cmp_ok($lat, '<', 0.3, 'the waiting read returns within 100 ms (< 300 ms) of the commit');

# ---- a delayed event wakes a waiter when it becomes due -------------------
$node->safe_psql('postgres', q{SELECT spindle.create_queue('w3')});
$w = start_query($waiter,
	q{SELECT payload->>'n' FROM spindle.dequeue('w3', 1, wait => '10 s')});
wait_until_sleeping($waiter_pid, 'delayed');
$producer->query_safe(q{SELECT spindle.enqueue('w3', '{"n": 3}', '1 s')});
my $due = $node->safe_psql('postgres',
	q{SELECT extract(epoch FROM visible_at) FROM spindle_q.w3});
ok(!finished_within($w, 0.5), 'a delayed event is not delivered before it is due');
finish_queries(15, $w);
$lat = $w->{done} - $due;
note sprintf('dequeue waiter returned %.1f ms after the delayed event became due',
	1000 * $lat);
is($w->{out}, '3', 'the waiting dequeue gets the delayed event');
cmp_ok($lat, '>=', -0.005, 'not before it is due');
cmp_ok($lat, '<', 0.3, 'within 100 ms (< 300 ms) of it becoming due');

# ---- an expired lease wakes a waiter of read() ----------------------------
$node->safe_psql('postgres',
	q{SELECT spindle.create_queue('w4'); SELECT spindle.enqueue('w4', '{"n": 4}');});
my $t_lease = now_s();
is($producer->query_safe(q{SELECT payload->>'n' FROM spindle.read('w4', 1, '1 s')}),
	'4', 'leased for 1 s');
$w = start_query($waiter,
	q{SELECT payload->>'n', read_count FROM spindle.read('w4', 1, '1 min', wait => '10 s')});
wait_until_sleeping($waiter_pid, 'lease');
finish_queries(15, $w);
# the lease ended at least 1 s after $t_lease: an upper bound of the delay
$lat = $w->{done} - ($t_lease + 1.0);
note sprintf('read waiter returned at most %.1f ms after the lease expired',
	1000 * $lat);
is($w->{out}, '4|2', 'the waiting read gets the event again, read_count 2');
cmp_ok($lat, '>=', 0, 'not before the lease expired');
cmp_ok($lat, '<', 0.3, 'within 100 ms (< 300 ms) of the lease expiring');

# ---- a lease shortened by set_visibility ----------------------------------
# The waiter sleeps until the lease's end as it was when it went to sleep
# (an hour, so until its own 10 s deadline); set_visibility moves the end
# to 1 s from now, or to now.
$node->safe_psql('postgres',
	q{SELECT spindle.create_queue('w6'); SELECT spindle.enqueue('w6', '{"n": 6}');});
my $id6 = $producer->query_safe(
	q{SELECT msg_id FROM spindle.read('w6', 1, '1 hour')});
$w = start_query($waiter,
	q{SELECT payload->>'n', read_count FROM spindle.read('w6', 1, '1 min', wait => '10 s')});
wait_until_sleeping($waiter_pid, 'shortened lease');
my $t_sv = now_s();
is($producer->query_safe(qq{SELECT spindle.set_visibility('w6', $id6, '1 s')}),
	't', 'lease shortened to 1 s');
finish_queries(15, $w);
$lat = $w->{done} - ($t_sv + 1.0);
note sprintf('read waiter returned %.1f ms after the shortened lease expired',
	1000 * $lat);
is($w->{out}, '6|2', 'the waiting read gets the event of the shortened lease');
cmp_ok($lat, '<', 0.3,
	'within 100 ms (< 300 ms) of the shortened lease expiring');

# hand it back, lease it for an hour, and hand it back to a waiter
is($producer->query_safe(qq{SELECT spindle.set_visibility('w6', $id6, '0')}),
	't', 'lease handed back');
is($producer->query_safe(q{SELECT read_count FROM spindle.read('w6', 1, '1 hour')}),
	'3', 'leased again for an hour');
$w = start_query($waiter,
	q{SELECT payload->>'n', read_count FROM spindle.read('w6', 1, '1 min', wait => '10 s')});
wait_until_sleeping($waiter_pid, 'lease handed back');
$c = start_query($producer, qq{SELECT spindle.set_visibility('w6', $id6, '0')});
finish_queries(15, $c, $w);
$lat = $w->{done} - $c->{done};
note sprintf('read waiter returned %.1f ms after set_visibility(..., 0)',
	1000 * $lat);
is($w->{out}, '6|4', 'the waiting read gets the handed-back event');
cmp_ok($lat, '<', 0.3, "within 100 ms (< 300 ms) of set_visibility(..., '0')");

# ---- a rolled-back dequeue hands its event to a waiter ---------------------
$node->safe_psql('postgres',
	q{SELECT spindle.create_queue('w7'); SELECT spindle.enqueue('w7', '{"n": 7}');});
$producer->query_safe('BEGIN');
is($producer->query_safe(q{SELECT payload->>'n' FROM spindle.dequeue('w7', 1)}),
	'7', 'an open transaction dequeued the only event');
$w = start_query($waiter,
	q{SELECT payload->>'n' FROM spindle.dequeue('w7', 1, wait => '10 s')});
wait_until_sleeping($waiter_pid, 'rolled-back dequeue');
# an enqueue committed to another queue does not end the wait
$node->safe_psql('postgres', q{SELECT spindle.enqueue('w1', '{"n": "other"}')});
ok(!finished_within($w, 0.3), 'a commit to another queue delivers nothing');
$c = start_query($producer, 'ROLLBACK');
finish_queries(15, $c, $w);
$lat = $w->{done} - $c->{done};
note sprintf('dequeue waiter returned %.1f ms after the other dequeue rolled back',
	1000 * $lat);
is($w->{out}, '7', 'the waiter gets the event of the rolled-back dequeue');
cmp_ok($lat, '<', 0.3, 'within 100 ms (< 300 ms) of the rollback');

# ---- pg_cancel_backend ends a wait at once --------------------------------
$node->safe_psql('postgres', q{SELECT spindle.create_queue('w5')});
$w = start_query($waiter,
	q{SELECT payload FROM spindle.dequeue('w5', 1, wait => '10 s')});
wait_until_sleeping($waiter_pid, 'cancel');
my $t_cancel = now_s();
$node->safe_psql('postgres', "SELECT pg_cancel_backend($waiter_pid)");
finish_queries(15, $w);
$lat = $w->{done} - $t_cancel;
note sprintf('a cancelled wait ended %.1f ms after pg_cancel_backend', 1000 * $lat);
like($w->{err}, qr/ERROR:  57014/, 'pg_cancel_backend: query_canceled (57014)');
cmp_ok($lat, '<', 1, 'pg_cancel_backend ends the wait within 1 s');

# ---- statement_timeout ends a wait -----------------------------------------
$waiter->query_safe(q{SET statement_timeout = '200ms'});
$w = start_query($waiter,
	q{SELECT payload FROM spindle.dequeue('w5', 1, wait => '10 s')});
finish_queries(15, $w);
$lat = $w->{done} - $w->{sent};
note sprintf('a wait under statement_timeout = 200ms ended after %.1f ms',
	1000 * $lat);
like($w->{err}, qr/ERROR:  57014/, 'statement_timeout: query_canceled (57014)');
cmp_ok($lat, '>=', 0.2, 'not before the timeout');
cmp_ok($lat, '<', 1, 'statement_timeout ends a 10 s wait in < 1 s');
$waiter->query_safe('RESET statement_timeout');

# ---- a wait that runs out --------------------------------------------------
for my $f (q{spindle.dequeue('w5', 1, wait => '0.3 s')},
	q{spindle.read('w5', 1, '1 min', wait => '0.3 s')})
{
	$w = start_query($waiter,
		"SELECT count(*), extract(epoch FROM clock_timestamp() - statement_timestamp()) >= 0.3 FROM $f");
	finish_queries(15, $w);
	$lat = $w->{done} - $w->{sent};
	note sprintf('%s on an empty queue returned after %.1f ms', $f, 1000 * $lat);
	is($w->{out}, '0|t', "$f on an empty queue: 0 rows after >= 0.3 s");
	cmp_ok($lat, '<', 1, "$f returns in < 1 s");
}

$waiter->quit;
$producer->quit;
$node->stop;
done_testing();
