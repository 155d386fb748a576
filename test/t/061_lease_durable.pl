# Leases on disk: they and read_count survive restarts and crashes, and
# their number does not slow a queue down.  Before, leases lived in shared
# memory only: a restart (clean or not) handed every leased event out again
# at once with read_count starting from 0, so a poison message that crashes
# the server was delivered for ever and never reached its dead-letter
# queue; and at most spindle.max_leases (10 000) leases existed at once.
#
# Part A, once with a crash (pg_ctl stop -m immediate) and once with a
# clean restart: e1 leased for 8 s, e2 for 1 h, e3 never read (then a
# commit that flushes the WAL: without max_reads leases are written as an
# asynchronous commit is, see docs/queues.md).  After the
# restart a read gets e3 only; once e1's lease has ended, e1 comes with
# read_count 2; set_visibility(e2, '0') returns true (still leased) and e2
# comes with read_count 2.
#
# Part B: a queue with max_reads => 3 and a dead-letter queue; its head is
# a poison event.  Three rounds of: read(q, 1, '1 s') in its own
# transaction returns the poison event with read_count 1, 2, 3; the server
# crashes; it starts; the lease ends.  The next read moves the event to the
# dead-letter queue and returns the next event instead; the five other
# events are each dequeued exactly once.  The same with, instead of a
# crash, the consumer backend terminated (pg_terminate_backend) while its
# read is in an open transaction.
#
# Part C: 50 000 single-event leases (50 000 reads of one event, each
# lease ending 1 ms after the one before) in flight on one queue.
# read(q, 10, '1 h') of 10 fresh events plus ack of those 10 costs about
# what it costs on a queue with no leases: median time within 10x (or
# under 25 ms), median shared buffers (EXPLAIN BUFFERS of the read plus
# the ack, as in 025 and 060) within 64 of the other queue's -- no walk
# over the leases per call (50 000 lease entries fill well over 64 pages).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my $node = parked_node('lease_durable');

# psql_ok, sleep_until and read_events are SpindleTest's.
sub sql_ok { return psql_ok($node, @_); }



# ---- Part A -------------------------------------------------------------
sub lease_round
{
	my ($q, $mode) = @_;
	$node->safe_psql('postgres', qq{
SELECT spindle.create_queue('$q');
SELECT count(*) FROM spindle.enqueue_batch('$q',
  ARRAY[jsonb_build_object('e', 'e1'), jsonb_build_object('e', 'e2'), jsonb_build_object('e', 'e3')]);
});
	my $t0 = time();
	is(read_events($node, $q, 1, '8 s', "$q: read e1"), 'e1:1', "$q: e1 leased for 8 s");
	my $t1 = time();
	is(read_events($node, $q, 1, '1 hour', "$q: read e2"), 'e2:1', "$q: e2 leased for 1 h");
	# Without max_reads a read's leases reach the disk as an asynchronous
	# commit does: the next commit that flushes (one that wrote WAL) makes
	# them durable.  Redo still replays them: no checkpoint between.
	$node->safe_psql('postgres',
		"CREATE TABLE IF NOT EXISTS flushed (t text); INSERT INTO flushed VALUES ('$q')");

	if ($mode eq 'immediate')
	{
		$node->stop('immediate');
		$node->start;
	}
	else
	{
		$node->restart;
	}

	# e1's lease (from $t0 at the earliest) has not ended yet
	my $before = time();
	my $got = read_events($node, $q, 10, '1 hour', "$q: read after the $mode restart");
	cmp_ok($before - $t0, '<', 7,
		"$q: the read after the restart ran before e1's lease ended (precondition)");
	is($got, 'e3:1', "$q: after the $mode restart only e3 (never read) is delivered; e1, e2 still leased");

	# once e1's lease has ended it comes again, counted
	sleep_until($t1 + 8.3);
	is(read_events($node, $q, 10, '1 hour', "$q: read after e1's lease ended"),
		'e1:2', "$q: after its lease ended e1 is delivered with read_count 2");
	is( sql_ok(qq{SELECT spindle.set_visibility('$q',
  (SELECT msg_id FROM spindle_q.$q WHERE payload->>'e' = 'e2'), '0')}, "$q: set_visibility(e2)"),
		't', "$q: e2 is still leased after the $mode restart (set_visibility returns true)");
	is(read_events($node, $q, 10, '1 hour', "$q: read e2 again"),
		'e2:2', "$q: e2, handed back, is delivered with read_count 2");
	ack_all_verify($node, $q, '3', 'e1, e2, e3');
	return;
}

lease_round('la_crash', 'immediate');
lease_round('la_clean', 'clean');

# ---- Part B -------------------------------------------------------------
sub poison_queue
{
	my ($q) = @_;
	$node->safe_psql('postgres', qq{
SELECT spindle.create_queue('${q}_dlq');
SELECT spindle.create_queue('$q', max_reads => 3, dead_letter_queue => '${q}_dlq');
SELECT count(*) FROM spindle.enqueue_batch('$q', ARRAY[jsonb_build_object('e', 'poison')]);
SELECT count(*) FROM spindle.enqueue_batch('$q',
  ARRAY(SELECT jsonb_build_object('e', 'o' || g) FROM generate_series(1, 5) g));
});
	return;
}

# After max_reads rounds: the next read moves the poison event to the
# dead-letter queue and delivers o1; every other event is dequeued once.
sub poison_end
{
	my ($q) = @_;
	is(read_events($node, $q, 1, '1 s', "$q: fourth read"),
		'o1:1', "$q: the fourth read does not deliver the poison event: it gets o1");
	my $t1 = time();
	is( $node->safe_psql('postgres', qq{
SELECT count(*) FILTER (WHERE payload->>'e' = 'poison') || ':' || count(*) FROM spindle_q.${q}_dlq}),
		'1:1', "$q: the poison event is in the dead-letter queue, alone");
	is( $node->safe_psql('postgres', qq{
SELECT count(*) FROM spindle_q.$q WHERE payload->>'e' = 'poison'}),
		'0', "$q: the poison event is no longer in the queue");
	sleep_until($t1 + 1.3);
	is( sql_ok(qq{
SELECT string_agg(payload->>'e', ',' ORDER BY msg_id) FROM spindle.dequeue('$q', 100)},
			"$q: dequeue the rest"),
		'o1,o2,o3,o4,o5', "$q: the five other events are dequeued, each once");
	is(sql_ok("SELECT count(*) FROM spindle.dequeue('$q', 100)", "$q: dequeue again"),
		'0', "$q: nothing more");
	is($node->safe_psql('postgres', "SELECT count(*) FROM spindle_q.$q"),
		'0', "$q: the queue is empty");
	verify_ok($node, 'postgres', "spindle_q.$q");
	verify_ok($node, 'postgres', "spindle_q.${q}_dlq");
	return;
}

# B1: the server crashes after each delivery
poison_queue('pz');
for my $k (1 .. 3)
{
	is(read_events($node, 'pz', 1, '1 s', "pz: read, round $k"),
		"poison:$k", "pz: round $k delivers the poison event with read_count $k");
	my $t1 = time();
	$node->stop('immediate');
	$node->start;
	sleep_until($t1 + 1.3);
}
poison_end('pz');

# B2: the consumer is terminated with its read in an open transaction
poison_queue('pk');
for my $k (1 .. 3)
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	$s->query_safe('BEGIN');
	my $got = $s->query_safe(qq{
SELECT coalesce(string_agg((payload->>'e') || ':' || read_count, ','), '')
  FROM spindle.read('pk', 1, '1 s')});
	my $t1 = time();
	is($got, "poison:$k",
		"pk: round $k delivers the poison event with read_count $k (open transaction)");
	is($node->safe_psql('postgres', "SELECT pg_terminate_backend($pid, 10000)"),
		't', "pk: round $k: the consumer is terminated");
	eval { $s->quit; };
	sleep_until($t1 + 1.3);
}
poison_end('pk');

# ---- Part C -------------------------------------------------------------
$node->safe_psql('postgres', q{
SELECT spindle.create_queue('flat_empty', events_per_spindle => 200000);
SELECT spindle.create_queue('flat_big', events_per_spindle => 200000);
CREATE TABLE big_reads (msg_id bigint, read_count int);
-- n reads of one event each from qn, the i-th leased for 1 h + i ms;
-- a commit every 5 000 reads
CREATE PROCEDURE lease_one_by_one(qn text, n int)
LANGUAGE plpgsql AS $$
BEGIN
	FOR i IN 1 .. n LOOP
		INSERT INTO big_reads SELECT msg_id, read_count
		  FROM spindle.read(qn, 1, make_interval(hours => 1, secs => i / 1000.0));
		IF i % 5000 = 0 THEN
			COMMIT;
		END IF;
	END LOOP;
END $$;
SELECT count(*) FROM spindle.enqueue_batch('flat_big',
  ARRAY(SELECT jsonb_build_object('b', g) FROM generate_series(1, 50000) g));
});
my $t_lease = time();
sql_ok("CALL lease_one_by_one('flat_big', 50000)",
	'flat_big: 50 000 reads of one event each succeed');
note sprintf('flat_big: 50 000 reads of one event took %.1f s', time() - $t_lease);
is( $node->safe_psql('postgres',
		'SELECT count(*) || \':\' || count(DISTINCT msg_id) || \':\' || max(read_count) FROM big_reads'),
	'50000:50000:1', 'flat_big: 50 000 distinct events leased, each once');
is( $node->safe_psql('postgres', q{
SELECT depth || ':' || leased FROM spindle.queues WHERE queue_name = 'flat_big'}),
	'0:50000', 'flat_big: spindle.queues shows 50 000 leased (depth:leased)');

my $session = $node->background_psql('postgres', on_error_stop => 0);

# Enqueue 10 fresh events to $q, read them for 1 h and ack them: returns
# (rows read + rows acked, ms of both, shared buffers of both).
sub measure
{
	my ($q) = @_;
	my ($ids, $ret) = $session->query(qq{
SELECT string_agg(id::text, ',') FROM spindle.enqueue_batch('$q',
  ARRAY(SELECT jsonb_build_object('o', g) FROM generate_series(1, 10) g)) id});
	if ($ret)
	{
		diag("enqueue to $q failed: $session->{stderr}");
		$session->{stderr} = '';
		return (0, 1e9, 1e9);
	}
	my ($r1, $t1, $b1) = explain_cost($session, "SELECT * FROM spindle.read('$q', 10, '1 hour')");
	my ($r2, $t2, $b2) = explain_cost($session, "SELECT * FROM spindle.ack('$q', ARRAY[$ids]::bigint[])");
	return ($r1 + $r2, $t1 + $t2, $b1 + $b2);
}

# cost_beside warms both queues up, then measures them in turn
my %c = cost_beside(\&measure, 'flat_empty', 'flat_big', 9);
my %rows = %{ $c{rows} };
is($rows{flat_empty}, 180, 'flat_empty: each measured read and ack got its 10 events');
is($rows{flat_big}, 180, 'flat_big: each measured read and ack got its 10 events');
my ($base_ms, $big_ms) = ($c{ms}{flat_empty}, $c{ms}{flat_big});
my ($base_buf, $big_buf) = ($c{buf}{flat_empty}, $c{buf}{flat_big});
note "median read(q, 10) + ack of 10: no leases $base_ms ms, $base_buf buffers; "
  . "50 000 leases $big_ms ms, $big_buf buffers";
my $limit_ms = 10 * $base_ms > 25 ? 10 * $base_ms : 25;
# a failed call counts 1e9 ms and buffers: it must not pass as "flat"
my $all_ran = $rows{flat_empty} == 180 && $rows{flat_big} == 180;
ok($all_ran && $big_ms <= $limit_ms,
	'read + ack of 10 events beside 50 000 leases: median time within 10x of a queue with none (25 ms floor)')
  or diag("median $big_ms ms, limit $limit_ms ms; every call ran: " . ($all_ran ? 'yes' : 'no'));
ok($all_ran && $big_buf <= $base_buf + 64, '... and within 64 shared buffers of it')
  or diag("median $big_buf buffers, limit " . ($base_buf + 64) . '; every call ran: ' . ($all_ran ? 'yes' : 'no'));
is( $node->safe_psql('postgres', q{
SELECT depth || ':' || leased FROM spindle.queues WHERE queue_name = 'flat_big'}),
	'0:50000', 'flat_big: the 50 000 leases are still there, nothing else');
is( sql_ok(q{SELECT count(*) FROM spindle.ack('flat_big', ARRAY(SELECT msg_id FROM big_reads))},
		'flat_big: ack of the 50 000'),
	'50000', 'flat_big: the 50 000 leased events are acknowledged');
is($node->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.flat_big'),
	'0', 'flat_big: the queue is empty');
verify_ok($node, 'postgres', 'spindle_q.flat_big');

$session->quit;
$node->stop;
done_testing();
