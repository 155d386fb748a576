# Compaction under concurrent consumers, crashes and a standby (issue 19;
# docs/design.md, "Compaction of sparse spindles", section 9: "moves under
# concurrent dequeue/read/ack/set_visibility with `-m immediate` crashes
# and a standby under wal_consistency_checking, against a heap log").
#
# A queue of 50-event spindles, the worker compacting every 100 ms, a
# streaming standby (wal_consistency_checking = 'all,spindle': it compares
# every replayed page with the primary's image).  Load, in pgbench clients
# restarted after each crash:
#   - 3 producers, each numbering its events (payload {"p", "s"}), about 8 %
#     of them delayed 2-5 s, 10 % of the transactions rolled back, some
#     batches (enqueue_batch), the committed msg_id and sequence number
#     logged in produced_cf in the enqueue's transaction;
#   - 2 dequeue consumers (consumed_cf, same transaction); one call in ten
#     dequeues in a subtransaction that rolls back, logging the ids it
#     handed back (returned_cf, same top transaction);
#   - 2 read consumers: read with a 2 s lease (reads_cf), then ack about
#     70 % of it (acked_cf, in the ack's transaction, a tenth rolled back);
#     or read with a 10 s lease, and 1.5 s later ack it, or set_visibility
#     it to 0, 1.5 or 3 s.
# A pgbench client stops at an SQL error, which fails the test: the only
# errors expected are the connections the crashes cut, after which the
# clients start again (connect anew) in the next round.
# So full spindles keep a few delayed or leased events, all parked: the
# relocator moves them into annexes while consumers take, ack and hand
# back leases of those very events, and the spindles drop.
#
# Four times in the middle of the load the primary is stopped with
# SIGQUIT to the postmaster (what `pg_ctl stop -m immediate` sends): twice
# at a random moment, twice while the worker is moving events (it is in
# the sleep of an index expression that sleeps 5 ms only as the
# relocator, i.e. between a move's relocation entry and its commit).
# After each restart: every committed event is consumed once or still in
# the queue, verify() is clean on both nodes, and the standby, caught up,
# returns the same rows of the queue (by a sequential and an index scan)
# and of the log tables as the primary.  Then a load without crash, a
# drain (leases handed back by set_visibility, delays expired), and:
#   - every committed enqueue consumed exactly once (a committed dequeue,
#     or a committed ack: reads are deliveries, not consumptions, and a
#     lease that ran out is delivered again by design), nothing consumed
#     that was not enqueued, the queue empty, payloads intact;
#   - read counts count every re-delivery (check_read_counts);
#   - order (docs/queues.md, "Order, delays and what consumers see": "a
#     single producer's events come out in the order it enqueued them";
#     rolled-back and crashed consumers' events "come back, ahead of newer
#     events"; leases and delays come back when due).  A "single delivery"
#     is an event's one and only logged delivery, a first one (dequeue with
#     read_count 0, or read with read_count 1), of an event not delayed
#     and not handed back by a rolled-back dequeue.  Checked: for each
#     consumer session between two crashes (one pgbench client of one
#     round: no crash inside it, and every rollback of a claim is logged)
#     and each producer, its single deliveries come out in the producer's
#     sequence order (1) within each call, and (2) across the session's
#     calls.  Why (2) is the contract: consumers claim positions at the
#     head in msg_id order, a producer's ids increase in its order, and
#     what goes behind the head (events pending on a running producer,
#     examined again) is taken, ahead of the head, by the next call; the
#     documented exceptions (rollbacks, crashes, leases, delays) are left
#     out.  Concurrent consumers split a producer's events between them,
#     so no order across sessions is promised, nor for re-delivered
#     events.  (2) is a TODO test.  It failed now and then (about one run
#     in three) for two defects of the consumers, both fixed in e8d5656:
#     events behind the head were taken in the order of the queue state's
#     item list, not in msg_id order (ready_items now sorts them), and a
#     consumer read the time before it claimed positions, so a fresh event
#     with no delay looked delayed (the time is now read after the claim).
#     A narrower window stays and keeps it a TODO: a consumer that found s
#     pending and is descheduled before it records so, while the producer
#     commits s and s + 1 and another consumer takes s + 1, leaves s for
#     that consumer's next call.  (1) holds since a call returns its events
#     by msg_id;
#   - compaction happened: events moved, spindles emptied and dropped.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SpindleTest;
use Time::HiRes qw(gettimeofday tv_interval usleep);
use IPC::Run;

my $t_start = [gettimeofday];
my $seed = $ENV{SPINDLE_TEST_SEED} // time;
srand($seed);
note "seed $seed";

my ($primary, $standby) = standby_pair(
	'cf_', qq{
spindle.naptime = 100
spindle.compaction_threshold = 0.25
autovacuum = off
max_connections = 40
wal_consistency_checking = 'all,spindle'
});
my $q = 'cf';
my $qrel = "spindle_q.$q";

# the queue, its indexes (one on an expression that sleeps 5 ms when it
# runs as the relocator does: moves last long enough to crash amid them),
# and the heap logs
$primary->safe_psql(
	'postgres', qq{
CREATE FUNCTION slow_move(p jsonb) RETURNS int LANGUAGE plpgsql IMMUTABLE AS \$\$
BEGIN
  IF current_setting('search_path') = 'pg_catalog, pg_temp' THEN
    PERFORM pg_sleep(0.005);
  END IF;
  RETURN (p->>'p')::int;
END \$\$;
SELECT spindle.create_queue('$q', 50);
CREATE INDEX cf_msg_id ON $qrel (msg_id);
CREATE INDEX cf_slow ON $qrel (slow_move(payload));
CREATE SEQUENCE calls;
CREATE TABLE produced_$q (msg_id bigint PRIMARY KEY, prod int, seq int,
  delayed bool, UNIQUE (prod, seq));
CREATE TABLE consumed_$q (msg_id bigint, read_count int, cons text, seg int,
  call bigint, ord bigint, prod int, seq int,
  at timestamptz DEFAULT clock_timestamp());
CREATE TABLE acked_$q (msg_id bigint);
-- reads_cf.epoch is the round (check_read_counts: one per server start)
CREATE TABLE reads_$q (msg_id bigint, read_count int, epoch int, kind text,
  cons text, seg int, call bigint, ord bigint, prod int, seq int,
  at timestamptz DEFAULT clock_timestamp(), sv bool);
CREATE INDEX ON reads_$q (call);
CREATE INDEX ON reads_$q (at) WHERE kind = 'l' AND sv IS NULL;
CREATE TABLE returned_$q (msg_id bigint);
-- a dequeue in a subtransaction that rolls back: its events come back
-- ahead of newer ones (logged in the caller's top transaction)
CREATE FUNCTION deq_rollback(n int) RETURNS void LANGUAGE plpgsql AS \$\$
DECLARE
  ids bigint[];
BEGIN
  BEGIN
    SELECT array_agg(msg_id) INTO ids FROM spindle.dequeue('$q', n);
    RAISE EXCEPTION USING ERRCODE = 'P0001', MESSAGE = 'roll back';
  EXCEPTION WHEN SQLSTATE 'P0001' THEN
    NULL;
  END;
  INSERT INTO returned_$q SELECT unnest(ids);
END \$\$;
-- stop the server (SIGQUIT to the postmaster, as pg_ctl stop -m immediate)
-- as soon as the worker sleeps in slow_move(), that is in the middle of a
-- move; returns 0 (no stop) after timeout_s
CREATE FUNCTION crash_when_moving(pm int, timeout_s float8) RETURNS int
LANGUAGE plpgsql AS \$\$
DECLARE
  p int;
  t0 timestamptz := clock_timestamp();
BEGIN
  LOOP
    PERFORM pg_stat_clear_snapshot();
    SELECT pid INTO p FROM pg_stat_activity
     WHERE backend_type = 'spindle worker' AND wait_event = 'PgSleep' LIMIT 1;
    IF p IS NOT NULL THEN
      EXECUTE format('COPY (SELECT 1) TO PROGRAM %L', 'kill -QUIT ' || pm);
      PERFORM pg_sleep(10);
    END IF;
    IF clock_timestamp() - t0 > make_interval(secs => timeout_s) THEN
      RETURN 0;
    END IF;
    PERFORM pg_sleep(0.002);
  END LOOP;
END \$\$;
});

# ---- the load scripts ------------------------------------------------------
my $dir = PostgreSQL::Test::Utils::tempdir;
my %script = (
	# one event, 8 % delayed 2-5 s, 10 % rolled back
	prod => qq{\\set d random(1, 100)
\\set r random(1, 10)
BEGIN;
INSERT INTO produced_$q (msg_id, prod, seq, delayed)
SELECT spindle.enqueue('$q', jsonb_build_object('p', :client_id, 's', x.s, 'pad', repeat('x', 100)),
         CASE WHEN :d <= 8 THEN make_interval(secs => 2 + :d % 4) ELSE interval '0' END),
       :client_id, x.s, :d <= 8
  FROM (SELECT coalesce(max(seq), 0) + 1 AS s FROM produced_$q WHERE prod = :client_id) x;
\\if :r > 1
COMMIT;
\\else
ROLLBACK;
\\endif
},
	# three events in one enqueue_batch
	batch => qq{INSERT INTO produced_$q (msg_id, prod, seq, delayed)
SELECT e.msg_id, :client_id, x.s + e.o - 1, false
  FROM (SELECT coalesce(max(seq), 0) + 1 AS s FROM produced_$q WHERE prod = :client_id) x,
       LATERAL spindle.enqueue_batch('$q', ARRAY(SELECT jsonb_build_object('p', :client_id, 's', x.s + g - 1)
                                                 FROM generate_series(1, 3) g)) WITH ORDINALITY AS e(msg_id, o);
},
	# dequeue, logged in the same transaction
	deq => qq{SELECT nextval('calls') AS call \\gset
INSERT INTO consumed_$q (msg_id, read_count, cons, seg, call, ord, prod, seq)
SELECT d.msg_id, d.read_count, 'd' || :client_id, :seg, :call, d.ord,
       (d.payload->>'p')::int, (d.payload->>'s')::int
  FROM spindle.dequeue('$q', 6) WITH ORDINALITY AS d(msg_id, enqueued_at, read_count, payload, ord);
},
	# a dequeue rolled back to a savepoint
	deqrb => qq{SELECT deq_rollback(4);
},
	# read with a 2 s lease; ack ~70 % (all re-deliveries), a tenth rolled back
	rd => qq{\\set a random(1, 10)
SELECT nextval('calls') AS call \\gset
INSERT INTO reads_$q (msg_id, read_count, epoch, kind, cons, seg, call, ord, prod, seq)
SELECT r.msg_id, r.read_count, :seg, 'r', 'r' || :client_id, :seg, :call, r.ord,
       (r.payload->>'p')::int, (r.payload->>'s')::int
  FROM spindle.read('$q', 4, '2 s') WITH ORDINALITY AS r(msg_id, enqueued_at, read_count, payload, ord);
BEGIN;
INSERT INTO acked_$q SELECT msg_id FROM reads_$q
 WHERE call = :call
   AND CASE WHEN read_count >= 2 OR random() < 0.7 THEN spindle.ack('$q', msg_id) ELSE false END;
\\if :a > 1
COMMIT;
\\else
ROLLBACK;
\\endif
},
	# read with a 10 s lease; leases read 1.5 s ago are acked (msg_id % 4
	# = 0) or set to end in 0, 1.5 or 3 s
	lease => qq{SELECT nextval('calls') AS call \\gset
INSERT INTO reads_$q (msg_id, read_count, epoch, kind, cons, seg, call, ord, prod, seq)
SELECT r.msg_id, r.read_count, :seg, 'l', 'r' || :client_id, :seg, :call, r.ord,
       (r.payload->>'p')::int, (r.payload->>'s')::int
  FROM spindle.read('$q', 2, '10 s') WITH ORDINALITY AS r(msg_id, enqueued_at, read_count, payload, ord);
WITH u AS (UPDATE reads_$q SET sv = true
            WHERE kind = 'l' AND sv IS NULL AND at < clock_timestamp() - interval '1500 ms'
              AND msg_id % 4 = 0 RETURNING msg_id)
INSERT INTO acked_$q SELECT msg_id FROM u WHERE spindle.ack('$q', msg_id);
UPDATE reads_$q SET sv = spindle.set_visibility('$q', msg_id, make_interval(secs => (msg_id % 4 - 1) * 1.5))
 WHERE kind = 'l' AND sv IS NULL AND at < clock_timestamp() - interval '1500 ms'
   AND msg_id % 4 <> 0;
\\sleep 20 ms
});
my %file;
for my $k (keys %script)
{
	$file{$k} = "$dir/$k.sql";
	open my $fh, '>', $file{$k} or die "$file{$k}: $!";
	print $fh $script{$k};
	close $fh;
}

# pgbench runs for round $seg: producers (at most 250 transactions a
# second in all), dequeue consumers, read consumers
sub start_round
{
	my ($seg, $seconds) = @_;
	my @runs;
	for my $r (
		[ 3, [ 'prod', 9 ], [ 'batch', 1 ], [ '-R', 250 ] ],
		[ 2, [ 'deq', 9 ], [ 'deqrb', 1 ] ],
		[ 2, [ 'rd', 3 ], [ 'lease', 1 ] ])
	{
		my ($clients, @s) = @$r;
		my %h = (out => '', err => '');
		my @cmd = (
			'pgbench', '-n', '-h', $primary->host, '-p', $primary->port,
			'-c', $clients, '-j', 1, '-T', $seconds, '-D', "seg=$seg");
		for (@s)
		{
			push @cmd, $_->[0] eq '-R' ? ('-R', $_->[1])
			  : ('-f', "$file{$_->[0]}\@$_->[1]");
		}
		push @cmd, 'postgres';
		$h{run} = IPC::Run::start(\@cmd, '<', \undef, '>', \$h{out}, '2>',
			\$h{err});
		push @runs, \%h;
	}
	return \@runs;
}

# end the runs; returns their stderr lines that are not about the lost
# connection (with $crashed) or any error at all
sub stop_round
{
	my ($runs, $crashed) = @_;
	my @bad;
	for my $h (@$runs)
	{
		if ($crashed) { $h->{run}->kill_kill; }
		else { eval { $h->{run}->finish; }; }
		for my $line (split /\n/, $h->{err})
		{
			next if $line =~ /^\s*$/;
			# an SQL error is never the crash's
			next
			  if $crashed
			  && $line !~ /\bERROR:/
			  && $line =~
			  /server closed the connection|This probably means the server terminated abnormally|before or while processing the request|terminating connection (because of unexpected SIGQUIT|due to immediate shutdown)|connection to server .* failed|Connection refused|the database system is (shutting down|starting up|in recovery mode)|could not send data to server|no connection to the server|perhaps the backend died|client \d+ aborted|Run was aborted|pgbench: (fatal|error): .*(connection|aborted)|SSL SYSCALL|could not receive data|unexpected EOF/;
			push @bad, $line;
		}
	}
	return @bad;
}

# what both nodes must return alike: the queue's rows by a sequential and
# by an index scan, and the logs
my %same = (
	'queue (seq scan)' => qq{SET enable_indexscan = off; SET enable_bitmapscan = off;
SELECT count(*) || ' ' || coalesce(md5(string_agg(msg_id || ' ' || payload::text || ' ' || visible_at || ' ' || enqueued_at, ',' ORDER BY msg_id)), '') FROM $qrel},
	'queue (index scan)' => qq{SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) || ' ' || coalesce(md5(string_agg(msg_id || ' ' || payload::text || ' ' || visible_at || ' ' || enqueued_at, ',' ORDER BY msg_id)), '') FROM $qrel WHERE msg_id > 0},
	'logs' => qq{SELECT (SELECT count(*) || md5(coalesce(string_agg(msg_id::text, ',' ORDER BY msg_id), '')) FROM produced_$q)
  || ' ' || (SELECT count(*) || md5(coalesce(string_agg(msg_id::text, ',' ORDER BY msg_id), '')) FROM consumed_$q)
  || ' ' || (SELECT count(*) || md5(coalesce(string_agg(msg_id::text, ',' ORDER BY msg_id), '')) FROM acked_$q)
  || ' ' || (SELECT count(*) FROM reads_$q)});

sub same_on_standby
{
	my ($what) = @_;
	$primary->wait_for_catchup($standby);
	for my $k (sort keys %same)
	{
		my $p = $primary->safe_psql('postgres', $same{$k});
		my $s = $standby->safe_psql('postgres', $same{$k});
		is($s, $p, "$what: the standby returns the primary's $k");
	}
	verify_ok($primary, 'postgres', $qrel, "$what: verify() is clean on the primary");
	verify_ok($standby, 'postgres', $qrel, "$what: verify() is clean on the standby");
}

# nothing committed lost or consumed twice, so far
sub nothing_lost
{
	my ($what) = @_;
	is( $primary->safe_psql(
			'postgres', qq{
SELECT (SELECT count(*) FROM produced_$q p
         WHERE NOT EXISTS (SELECT FROM consumed_$q c WHERE c.msg_id = p.msg_id)
           AND NOT EXISTS (SELECT FROM acked_$q a WHERE a.msg_id = p.msg_id)
           AND NOT EXISTS (SELECT FROM $qrel e WHERE e.msg_id = p.msg_id))
  || ':' || (SELECT count(*) FROM (SELECT msg_id FROM (SELECT msg_id FROM consumed_$q UNION ALL SELECT msg_id FROM acked_$q) x
              GROUP BY msg_id HAVING count(*) > 1) y)
  || ':' || (SELECT count(*) FROM $qrel e
              WHERE EXISTS (SELECT FROM consumed_$q c WHERE c.msg_id = e.msg_id)
                 OR EXISTS (SELECT FROM acked_$q a WHERE a.msg_id = e.msg_id))}),
		'0:0:0',
		"$what: no committed event lost, none consumed twice, none consumed and still queued");
}

my $moved_q = q{SELECT coalesce(sum(events_moved), 0) || ':' || coalesce(sum(spindles_emptied), 0) FROM spindle.worker};
my ($moved, $emptied) = (0, 0);
sub add_moved
{
	my ($m, $e) = split /:/, $primary->safe_psql('postgres', $moved_q);
	$moved += $m;
	$emptied += $e;
}

# ---- the rounds --------------------------------------------------------------
my @modes = qw(random moving random moving);
my $hit_moving = 0;
my @client_errors;
my $seg = 0;
for my $mode (@modes)
{
	$seg++;
	my $runs = start_round($seg, 60);
	my $what = "crash $seg ($mode)";
	usleep(int((3 + rand(2)) * 1_000_000));
	add_moved();
	my $crashed_moving = 0;
	if ($mode eq 'moving')
	{
		my $pid = $primary->{_pid};
		my ($ret, $out, $err) = $primary->psql('postgres',
			"SELECT crash_when_moving($pid, 5)", timeout => 60);
		$crashed_moving = ($ret != 0 && $out ne '0');
		note "$what: psql said [$out] [$err]";
	}
	# the postmaster's stop (SIGQUIT, sent again if it is still up)
	$primary->stop('immediate', fail_ok => 1);
	if ($crashed_moving)
	{
		$hit_moving++;
		note "$what: the server stopped while the worker was in the middle of a move";
	}
	push @client_errors, stop_round($runs, 1);
	$primary->start;

	my $counts = $primary->safe_psql('postgres',
		"SELECT (SELECT count(*) FROM produced_$q) || ' produced, ' || (SELECT count(*) FROM consumed_$q) || ' dequeued, ' || (SELECT count(*) FROM acked_$q) || ' acked, ' || (SELECT count(*) FROM $qrel) || ' queued'");
	note "$what: $counts";
	nothing_lost("after $what");
	same_on_standby("after $what");
}
cmp_ok($hit_moving, '>=', 1,
	"the server stopped in the middle of a move $hit_moving times");

# ---- a round without a crash, then the drain ----------------------------------
$seg++;
my $runs = start_round($seg, 6);
push @client_errors, stop_round($runs, 0);
add_moved();
is(join("\n", @client_errors), '',
	'no client error but the lost connections of the crashes');

# delayed and leased events wait, most of them in annexes now: both nodes
# return the same rows
nothing_lost('after the last round');
same_on_standby('after the last round');

# hand every lease back, wait for the delays, dequeue the rest
$primary->safe_psql('postgres',
	"SELECT count(*) FILTER (WHERE spindle.set_visibility('$q', msg_id, '0')) FROM $qrel");
my $drained = 0;
my $t0 = [gettimeofday];
$seg++;
while (tv_interval($t0) < 30)
{
	my $n = $primary->safe_psql(
		'postgres', qq{
WITH c AS (SELECT nextval('calls') AS call),
     d AS (INSERT INTO consumed_$q (msg_id, read_count, cons, seg, call, ord, prod, seq)
           SELECT d.msg_id, d.read_count, 'drain', $seg, c.call, d.ord,
                  (d.payload->>'p')::int, (d.payload->>'s')::int
             FROM c, spindle.dequeue('$q', 500) WITH ORDINALITY AS d(msg_id, enqueued_at, read_count, payload, ord)
           RETURNING 1)
SELECT count(*) FROM d});
	$drained += $n;
	next if $n > 0;
	last if $primary->safe_psql('postgres', "SELECT count(*) FROM $qrel") eq '0';
	usleep(200_000);
}
note "drained $drained events";
is($primary->safe_psql('postgres', "SELECT count(*) FROM $qrel"),
	'0', 'the queue is empty after the drain');

# ---- the end: exactly once, order, compaction, both nodes --------------------
my ($produced, $consumed, $acked) = split /:/,
  $primary->safe_psql('postgres',
	"SELECT (SELECT count(*) FROM produced_$q) || ':' || (SELECT count(*) FROM consumed_$q) || ':' || (SELECT count(*) FROM acked_$q)");
note "$produced events produced, $consumed dequeued, $acked acked";
cmp_ok($produced, '>', 2000, 'the load produced events');
is($consumed + $acked, $produced, 'enqueued = dequeued + acked');
check_consistent($primary, 'postgres', $qrel, 'at the end');
check_read_counts($primary, 'postgres', $q);

is( $primary->safe_psql(
		'postgres', qq{
SELECT count(*) FROM (
  SELECT msg_id, prod, seq FROM consumed_$q
  UNION ALL SELECT msg_id, prod, seq FROM reads_$q) d
  JOIN produced_$q p USING (msg_id)
 WHERE (d.prod, d.seq) IS DISTINCT FROM (p.prod, p.seq)}),
	'0', 'every delivery carries the payload its producer enqueued');
is( $primary->safe_psql(
		'postgres', qq{
SELECT count(*) FROM (
  SELECT seq, lag(seq) OVER (PARTITION BY prod ORDER BY msg_id) AS prev
    FROM produced_$q) x WHERE seq <= prev}),
	'0', "each producer's msg_ids increase with its sequence numbers");

# the order property (see the header): $part partitions the single
# deliveries, ordered by call and place in the call; returns
# (deliveries checked, deliveries out of order, what they are)
sub out_of_order
{
	my ($part) = @_;
	my $r = $primary->safe_psql(
		'postgres', qq{
WITH dl AS (
  SELECT msg_id, read_count = 0 AS first, cons, seg, call, ord FROM consumed_$q
  UNION ALL
  SELECT msg_id, read_count = 1, cons, seg, call, ord FROM reads_$q),
once AS (SELECT msg_id FROM dl GROUP BY msg_id HAVING count(*) = 1 AND bool_and(first)),
clean AS (
  SELECT dl.*, p.prod, p.seq FROM dl JOIN once USING (msg_id) JOIN produced_$q p USING (msg_id)
   WHERE NOT p.delayed
     AND NOT EXISTS (SELECT FROM returned_$q r WHERE r.msg_id = dl.msg_id)),
o AS (
  SELECT *, lag(seq) OVER w AS prev_seq, lag(msg_id) OVER w AS prev_id,
         lag(call) OVER w AS prev_call
    FROM clean WINDOW w AS (PARTITION BY $part ORDER BY call, ord))
SELECT (SELECT count(*) FROM clean) || ':' || count(*) || ':'
       || coalesce(string_agg(format('%s seg %s prod %s: seq %s (id %s, call %s) after seq %s (id %s, call %s)',
                                     cons, seg, prod, seq, msg_id, call, prev_seq, prev_id, prev_call), '; '), '')
  FROM o WHERE seq < prev_seq});
	return split /:/, $r, 3;
}
my ($n_clean, $n_bad, $bad) = out_of_order('cons, seg, call, prod');
note "order checked over $n_clean single deliveries";
cmp_ok($n_clean, '>', 1000, 'the order check covers many events');
is($n_bad, '0',
	"within each call, each producer's single deliveries come out in its order")
  or diag("out of order: $bad");
($n_clean, $n_bad, $bad) = out_of_order('cons, seg, prod');
TODO:
{
	local $TODO =
	  'a consumer that finds an event pending and is descheduled before it '
	  . 'records so may see another consumer take the next one first';
	is($n_bad, '0',
		"across the calls of each consumer session, each producer's single deliveries come out in its order"
	) or diag("out of order: $bad");
}

# compaction happened, and the emptied spindles dropped
add_moved();
note "the worker moved $moved events, emptied $emptied spindles";
cmp_ok($moved, '>', 100, 'the worker moved events');
cmp_ok($emptied, '>', 5, 'the worker emptied spindles');
cmp_ok(
	$primary->safe_psql('postgres',
		"SELECT spindles_dropped FROM spindle.tables WHERE relation = '$qrel'::regclass"),
	'>', 50, 'spindles were dropped');
ok( defined wait_for(
		$primary, 'postgres', qq{
SELECT count(*) = 0 FROM spindle.spindles
 WHERE relation = '$qrel'::regclass AND state = 'full'}, 30),
	'the worker drops every full spindle once all is consumed');

same_on_standby('at the end');
ok(!$standby->log_contains(qr/inconsistent page found/),
	'wal_consistency_checking: every page the standby replayed matched');
ok(!$primary->log_contains(qr/inconsistent page found|PANIC|TRAP:/),
	'the primary logged no inconsistent page, PANIC or assertion failure');

$standby->stop;
$primary->stop;
note sprintf('run time %.1f s', tv_interval($t_start));
done_testing();
