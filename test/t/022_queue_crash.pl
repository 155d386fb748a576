# Queue consumers and crashes: after an immediate shutdown with committed
# dequeues, an open transaction holding dequeued events (an uncommitted
# claim) and leases taken by read(), every event is delivered exactly once
# in all: the committed dequeues stay purged, the claim's events come back,
# the leases survive (parked on disk, with their read counts) until they
# are handed back, nothing is lost or doubled.  Each dequeue logs
# what it got into a heap table in the same transaction, so the log holds
# exactly what committed.  Then the same for one backend killed with an
# open claim, without a restart: its events go to others at once.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(gettimeofday tv_interval usleep);

my $node = PostgreSQL::Test::Cluster->new('queue_crash');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle'
max_worker_processes = 16
# the test drops spindles itself and asserts on what drop_spindles() returns
spindle.enable_worker = off
# consumers purge by xmax, the path without a consume log (the log's
# crashes: 078_consume_log.pl, 083_consume_log_wal.pl)
spindle.consume_log = off
});
$node->start;
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION spindle;
SELECT spindle.create_queue('cq', events_per_spindle => 50);
-- the log of what each dequeue got, written in the dequeue's transaction
CREATE TABLE consumed (seq bigserial, msg_id bigint, n int, read_count int,
                       phase text);
});

# 1 000 events whose payloads carry their number, enqueued three ways
$node->safe_psql(
	'postgres', q{
SELECT count(*) FROM spindle.enqueue_batch('cq',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 400) g));
SELECT count(*) FROM (SELECT spindle.enqueue('cq', jsonb_build_object('n', g))
                        FROM generate_series(401, 450) g) s;
INSERT INTO spindle_q.cq (payload)
  SELECT jsonb_build_object('n', g) FROM generate_series(451, 1000) g;
});
is($node->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.cq'),
	'1000', '1 000 events enqueued');

# A dequeue of $n events of cq logged in consumed as $phase: one statement,
# so the log and the purge commit (or not) together.
sub log_dequeue
{
	my ($n, $phase) = @_;
	return
	  "INSERT INTO consumed (msg_id, n, read_count, phase) "
	  . "SELECT msg_id, (payload->>'n')::int, read_count, '$phase' "
	  . "FROM spindle.dequeue('cq', $n)";
}

# ---- helpers to run scripts in several sessions at the same time --------
my $tag_no = 0;

# Send $sql to the background psql $s without waiting; returns a tag.
sub send_script
{
	my ($s, $sql) = @_;
	my $tag = 'script_done_' . ++$tag_no;
	$s->{stdin} .= "$sql\n;\n\\echo '$tag'\n\\warn '$tag'\n";
	$s->{run}->pump_nb;
	return $tag;
}

# Wait for the script $tag of $s; returns (stdout, stderr).
sub wait_script
{
	my ($s, $tag) = @_;
	my $t0 = [gettimeofday];
	until ($s->{stdout} =~ /\Q$tag\E\r?\n/ && $s->{stderr} =~ /\Q$tag\E\r?\n/)
	{
		die "script $tag timed out: stdout [$s->{stdout}] stderr [$s->{stderr}]"
		  if tv_interval($t0) > $PostgreSQL::Test::Utils::timeout_default;
		usleep(2_000);
		$s->{run}->pump_nb;
	}
	my ($out, $err) = ($s->{stdout}, $s->{stderr});
	$out =~ s/\r?\n?\Q$tag\E\r?\n//;
	$err =~ s/\r?\n?\Q$tag\E\r?\n//;
	$s->{stdout} = '';
	$s->{stderr} = '';
	return ($out, $err);
}

# A consumer's script: committed dequeues of 1 to 11 events, some rolled
# back, one rolled back to a savepoint.
sub consumer_script
{
	my ($phase, $statements) = @_;
	my @lines;
	my @sizes = (1, 3, 7, 11, 2);
	for my $i (1 .. $statements)
	{
		my $n = $sizes[ $i % @sizes ];
		if ($i % 6 == 0)
		{
			push @lines,
			  'BEGIN; ' . log_dequeue(5, "$phase-rolled-back") . '; ROLLBACK;';
		}
		elsif ($i % 9 == 0)
		{
			push @lines,
			    'BEGIN; SAVEPOINT s; '
			  . log_dequeue(4, "$phase-rolled-back")
			  . '; ROLLBACK TO SAVEPOINT s; '
			  . log_dequeue(2, $phase)
			  . '; COMMIT;';
		}
		else
		{
			push @lines, log_dequeue($n, $phase) . ';';
		}
	}
	return join("\n", @lines);
}

# Run $phase with three concurrent consumers; returns how many events they
# logged in all.
my @consumers =
  map { $node->background_psql('postgres', on_error_stop => 0) } 1 .. 3;

sub run_consumers
{
	my ($phase, $statements) = @_;
	my @tags;
	for my $i (0 .. $#consumers)
	{
		push @tags,
		  send_script($consumers[$i],
			consumer_script("$phase-c$i", $statements));
	}
	for my $i (0 .. $#consumers)
	{
		my ($out, $err) = wait_script($consumers[$i], $tags[$i]);
		is($err, '', "$phase: consumer $i ran without errors");
	}
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM consumed WHERE phase LIKE '$phase-%'");
}

# ---- before the crash ----------------------------------------------------
my $first = run_consumers('before', 30);
note "committed dequeues before the claim: $first events";
cmp_ok($first, '>', 100, 'concurrent consumers dequeued events');
is( $node->safe_psql(
		'postgres', 'SELECT count(*) = count(DISTINCT n) FROM consumed'),
	't',
	'concurrent consumers never got the same event');
is( $node->safe_psql(
		'postgres', q{SELECT count(*) FROM consumed WHERE phase LIKE '%rolled-back'}),
	'0',
	'nothing logged by a rolled-back dequeue');

# An uncommitted claim: an open transaction holding 30 dequeued events.
my $claimer = $node->background_psql('postgres', on_error_stop => 0);
$claimer->query_safe('BEGIN');
my @claimed = split /\n/,
  $claimer->query_safe(log_dequeue(30, 'uncommitted') . ' RETURNING n');
is(scalar @claimed, 30, 'an open transaction holds 30 dequeued events');

# Leases: 25 events read for an hour (a lease takes effect at once).
my @leased = split /\n/,
  $node->safe_psql('postgres',
	q{SELECT payload->>'n' FROM spindle.read('cq', 25, '1 hour')});
is(scalar @leased, 25, 'a reader holds 25 leases');
my %held = map { $_ => 1 } @claimed, @leased;
is(scalar keys %held, 55, 'the claim and the leases are disjoint');

# The pages carrying the uncommitted claim's purge reach the disk, then
# more committed dequeues go through redo only.
$node->safe_psql('postgres', 'CHECKPOINT');
my $second = run_consumers('after-checkpoint', 20);
note "committed dequeues after the checkpoint: $second events";
cmp_ok($second, '>', 50, 'consumers went on past the claim and the leases');

my $held_list = join(',', sort { $a <=> $b } keys %held);
is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM consumed WHERE n IN ($held_list)"),
	'0',
	'no committed consumer got a claimed or leased event');
my $committed_before =
  $node->safe_psql('postgres', 'SELECT count(*) FROM consumed');
is($committed_before, $first + $second, 'the log holds what committed');
my $left_before = $node->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.cq');
note "events not purged by a committed transaction: $left_before (claimed and leased among them)";
is($left_before, 1000 - $committed_before,
	'the queue holds every event no committed dequeue took');

# ---- crash ---------------------------------------------------------------
$node->stop('immediate');
for my $s (@consumers, $claimer)
{
	eval { $s->quit; };
}
$node->start;

is( $node->safe_psql(
		'postgres', q{SELECT count(*) FROM consumed WHERE phase = 'uncommitted'}),
	'0',
	'the crashed transaction logged nothing');
is($node->safe_psql('postgres', 'SELECT count(*) FROM consumed'),
	$committed_before, 'every committed dequeue is in the log after the crash');
is($node->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.cq'),
	$left_before, 'committed dequeues stay purged, the claim is undone');

# The leases survived the crash: still held, so set_visibility(.., '0')
# finds each of them leased and hands it back for the drain.
my $leased_list = join(',', @leased);
is( $node->safe_psql(
		'postgres', qq{
SELECT count(*) FILTER (WHERE spindle.set_visibility('cq', msg_id, '0'))
  FROM spindle_q.cq WHERE (payload->>'n')::int IN ($leased_list)}),
	'25',
	'the 25 leases survived the crash and are handed back');

# Drain the queue with dequeue until it is empty.
my $drained = 0;
for my $round (1 .. 40)
{
	my $got = $node->safe_psql('postgres',
		'WITH d AS (' . log_dequeue(100, 'drain') . ' RETURNING 1) SELECT count(*) FROM d');
	last if $got == 0;
	$drained += $got;
}
is($drained, $left_before, 'the drain after the crash got every event left');
is($node->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.cq'),
	'0', 'the queue is empty after the drain');

is( $node->safe_psql(
		'postgres', q{
SELECT count(*) || ':' || count(DISTINCT n) || ':' || min(n) || ':' || max(n)
       || ':' || count(DISTINCT msg_id)
  FROM consumed}),
	'1000:1000:1:1000:1000',
	'every event 1..1000 was consumed exactly once (nothing lost, nothing doubled)');
is( $node->safe_psql(
		'postgres', q{
SELECT string_agg(n::text, ',') FROM (
  SELECT n FROM consumed GROUP BY n HAVING count(*) <> 1) d}),
	'',
	'no event consumed twice');

my $claimed_list = join(',', @claimed);
is( $node->safe_psql(
		'postgres', qq{
SELECT count(*) FROM consumed WHERE phase = 'drain' AND n IN ($claimed_list)}),
	'30',
	'the events of the uncommitted claim came back after the crash');
is( $node->safe_psql(
		'postgres', qq{
SELECT count(*) FROM consumed WHERE phase = 'drain' AND n IN ($leased_list)}),
	'25',
	'the leased events, handed back, came back after the crash');

# Leases are parked on disk with their read counts: after the crash an
# event read once before is delivered as read once.
my $leased_rc = $node->safe_psql(
	'postgres', qq{
SELECT string_agg(DISTINCT read_count::text, ',') FROM consumed
 WHERE phase = 'drain' AND n IN ($leased_list)});
note "read_count of the events leased before the crash, when dequeued after it: $leased_rc";
is($leased_rc, '1', 'read_count survives a crash: 1 after the restart');

# After the restart the state is rebuilt from disk: what is left comes out
# in enqueue order.
is( $node->safe_psql(
		'postgres', q{
SELECT bool_and(n > prev_n AND msg_id > prev_id) FROM (
  SELECT n, msg_id, lag(n) OVER w AS prev_n, lag(msg_id) OVER w AS prev_id
    FROM consumed WHERE phase = 'drain' WINDOW w AS (ORDER BY seq)) s
 WHERE prev_n IS NOT NULL}),
	't',
	'the drain after the crash delivers in enqueue order');

# The books balance and every full spindle, now fully purged, drops.
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM spindle.spindles
 WHERE relation = 'spindle_q.cq'::regclass AND events <> purged_events}),
	'0',
	'every spindle counts all its events as purged');

# Drop the droppable spindles of cq; each call is bounded, so call until
# none goes.  Returns how many went.
sub drop_all
{
	my $total = 0;
	for (1 .. 50)
	{
		my $n = $node->safe_psql('postgres',
			q{SELECT spindle.drop_spindles('spindle_q.cq')});
		last if $n == 0;
		$total += $n;
	}
	return $total;
}
my $full = $node->safe_psql(
	'postgres', q{
SELECT count(*) FROM spindle.spindles
 WHERE relation = 'spindle_q.cq'::regclass AND state = 'full'});
cmp_ok($full, '>=', 19, "$full full spindles before the drop");
is(drop_all(), $full, 'drop_spindles drops every full, purged spindle');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM spindle.spindles
 WHERE relation = 'spindle_q.cq'::regclass AND state = 'full'}),
	'0',
	'no full spindle left');
is($node->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.cq'),
	'0', 'count(*) of the queue is 0');

# ---- a backend killed with an open claim, no restart ----------------------
$node->safe_psql('postgres',
	q{SELECT count(*) FROM spindle.enqueue_batch('cq',
        ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1001, 1100) g))});
my $victim = $node->background_psql('postgres', on_error_stop => 0);
my $victim_pid = $victim->query_safe('SELECT pg_backend_pid()');
$victim->query_safe('BEGIN');
my @victim_got = split /\n/,
  $victim->query_safe(log_dequeue(40, 'killed') . ' RETURNING n');
is(scalar @victim_got, 40, 'the victim holds 40 dequeued events');
is( $node->safe_psql(
		'postgres', 'WITH d AS (' . log_dequeue(10, 'beside') . ' RETURNING n) SELECT min(n) FROM d'),
	'1041',
	'another consumer goes past the open claim');

is($node->safe_psql('postgres', "SELECT pg_terminate_backend($victim_pid, 10000)"),
	't', 'the victim is terminated');
eval { $victim->quit; };
my $t0 = [gettimeofday];
my $after = $node->safe_psql('postgres',
	'WITH d AS (' . log_dequeue(100, 'after-kill') . ' RETURNING n) '
	  . q{SELECT count(*) || ':' || count(*) FILTER (WHERE n <= 1040) FROM d});
note sprintf('dequeue after the kill took %.3f s', tv_interval($t0));
is($after, '90:40',
	"the killed backend's 40 events went to the next consumer at once, with the 50 left");
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) || ':' || count(DISTINCT n) || ':' || min(n) || ':' || max(n)
  FROM consumed}),
	'1100:1100:1:1100',
	'every event 1..1100 consumed exactly once');
is($node->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.cq'),
	'0', 'the queue is empty again');
cmp_ok(drop_all(), '>=', 1, 'the spindles it filled drop too');

$node->stop;
done_testing();
