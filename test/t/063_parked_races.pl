# Parked runs under races and crashes: three findings of a hostile review
# of leases on disk (commit 5091184) as regression tests.
#
# Part C (F1): an ack's commit cut one id out of a parked lease and left
# the rest of the run without a reference, so the other events read with
# it were never delivered again.  Three events read for 1 s, the first
# (queue c_first) or the middle one (queue c_mid) acknowledged; once the
# lease has ended a read returns the other two with read_count 2, and
# acking them empties the queue.
#
# Part A (F2, and F1 under concurrency): 2 000 events (some delayed up to
# 3 s); 4 pgbench clients read(q, 5, '0') for 4 s, then for 6 s they mix read(q, 5, '0') and
# read(q, 5, '1 s') followed by acks of some ids, rolled-back acks and
# set_visibility(id, '0'), with dequeue(q, 3) in transactions of which 20 %
# roll back.  Every committed completion (an ack that returned true, a
# dequeue) is logged in a heap table in the same transaction.  Then a
# drain dequeues every second until the queue table is empty or 60 s
# passed (a parked run taken back for a retry may come again up to 30 s
# later).  The queue ends empty, and each of the 2 000 msg_ids was
# completed exactly once; the drain itself takes under 15 s (it takes
# about 1 s: every lease has ended when it starts).  Before, a read parking its leases with VT 0
# before letting its claims go could lose the events to another consumer's
# take of due runs (they stayed in the table, in no item and on no tree,
# until a restart).
#
# Part B (F3): an ended lease was cut from disk when taken back, so a crash
# before the event was leased again reset its read count.  A queue with
# max_reads => 2 and a dead-letter queue holds e1, e2; six rounds of an
# autocommit read(q, 1, '1 s'), a crash (stop -m immediate), a start and a
# wait for the lease to end deliver e1:1, e1:2, e2:1, e2:2 and then
# nothing; the dead-letter queue holds e1 and e2, the queue is empty.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my $node = parked_node('parked_races');

# psql_ok, sleep_until and read_events are SpindleTest's.
sub sql_ok { return psql_ok($node, @_); }



# Enqueue events with payloads {"e": name} for @names, one at a time.
sub enqueue_named
{
	my ($q, @names) = @_;
	$node->safe_psql('postgres',
		join("\n", map { "SELECT spindle.enqueue('$q', jsonb_build_object('e', '$_'));" } @names));
	return;
}

# ---- Part C -------------------------------------------------------------
#
# Read e1..e3 for 1 s, ack $acked; once the lease ended the other two come
# with read_count 2.
sub ack_one_of_three
{
	my ($q, $acked, $rest) = @_;
	$node->safe_psql('postgres', "SELECT spindle.create_queue('$q')");
	enqueue_named($q, 'e1', 'e2', 'e3');
	my $t0 = time();
	is(read_events($node, $q, 3, '1 s', "$q: read three"), 'e1:1,e2:1,e3:1',
		"$q: e1, e2, e3 leased for 1 s");
	is( sql_ok(qq{SELECT spindle.ack('$q',
  (SELECT msg_id FROM spindle_q.$q WHERE payload->>'e' = '$acked'))}, "$q: ack $acked"),
		't', "$q: $acked acknowledged");
	sleep_until($t0 + 1.3);
	is(read_events($node, $q, 10, '1 hour', "$q: read after the lease ended"),
		$rest, "$q: after the lease ended the other two come with read_count 2");
	ack_all_verify($node, $q, '2', 'the two others');
	return;
}

ack_one_of_three('c_first', 'e1', 'e2:2,e3:2');
ack_one_of_three('c_mid', 'e2', 'e1:2,e3:2');

# ---- Part A -------------------------------------------------------------
$node->safe_psql('postgres', q{
SELECT spindle.create_queue('ra', events_per_spindle => 500);
-- the enqueued ids; committed completions (ack returned true, dequeue),
-- written in the transaction that completed them
CREATE TABLE a_ids (msg_id bigint);
CREATE TABLE a_done (msg_id bigint, how text, c int);
INSERT INTO a_ids
  SELECT spindle.enqueue('ra', jsonb_build_object('i', i), make_interval(secs => (i % 7) * 0.5))
    FROM generate_series(1, 2000) i;
-- read 5 for vt, then per id: ack (60 %), rolled-back ack (10 %),
-- set_visibility 0 (10 %), or let the lease run out (20 %)
CREATE PROCEDURE a_consume(c int, vt interval) LANGUAGE plpgsql AS $$
DECLARE
	ids bigint[];
	id bigint;
	r float8;
BEGIN
	SELECT array_agg(msg_id) INTO ids FROM spindle.read('ra', 5, vt);
	COMMIT;
	IF ids IS NULL THEN
		RETURN;
	END IF;
	FOREACH id IN ARRAY ids LOOP
		r := random();
		IF r < 0.6 THEN
			INSERT INTO a_done SELECT id, 'ack', c WHERE spindle.ack('ra', id);
			COMMIT;
		ELSIF r < 0.7 THEN
			PERFORM spindle.ack('ra', id);
			ROLLBACK;
		ELSIF r < 0.8 THEN
			PERFORM spindle.set_visibility('ra', id, '0');
			COMMIT;
		END IF;
	END LOOP;
END $$;
-- dequeue 3; 20 % of these transactions roll back
CREATE PROCEDURE a_deq(c int) LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO a_done SELECT msg_id, 'dequeue', c FROM spindle.dequeue('ra', 3);
	IF random() < 0.2 THEN
		ROLLBACK;
	ELSE
		COMMIT;
	END IF;
END $$;
-- dequeue everything every second until the queue table is empty or
-- max_s seconds passed
CREATE PROCEDURE a_drain(max_s float8) LANGUAGE plpgsql AS $$
DECLARE
	t0 timestamptz := clock_timestamp();
BEGIN
	LOOP
		INSERT INTO a_done SELECT msg_id, 'drain', 0 FROM spindle.dequeue('ra', 10000);
		COMMIT;
		EXIT WHEN NOT EXISTS (SELECT 1 FROM spindle_q.ra)
			OR clock_timestamp() > t0 + make_interval(secs => max_s);
		PERFORM pg_sleep(1);
	END LOOP;
END $$;
});

# first only reads with VT 0 (as review script 14): each parks its leases
# due at once, and the next read takes them back while the call that
# parked them may still hold its claims; nothing is completed here
$node->pgbench(
	'--no-vacuum --client=4 --jobs=2 --time=4',
	0,
	[qr{processed: [1-9]}],
	[],
	'ra: 4 pgbench clients reading with VT 0',
	{ '063_read0' => q{SELECT count(*) FROM spindle.read('ra', 5, '0');} });
is($node->safe_psql('postgres', 'SELECT count(*) FROM a_done'),
	'0', 'ra: nothing completed by reads alone');

$node->pgbench(
	'--no-vacuum --client=4 --jobs=2 --time=6',
	0,
	[qr{processed: [1-9]}],
	[],
	'ra: 4 pgbench clients mixing read (VT 0 and 1 s), ack, set_visibility and dequeue',
	{
		'063_consume' => q{
\set r random(1, 10)
\if :r <= 3
CALL a_deq(:client_id);
\elif :r <= 6
CALL a_consume(:client_id, '0');
\else
CALL a_consume(:client_id, '1 s');
\endif
}
	});

my $t_drain = time();
sql_ok('CALL a_drain(60)', 'ra: drain');
my $drain_s = time() - $t_drain;
note sprintf('ra: the drain took %.1f s', $drain_s);
# Every lease had ended (VT 1 s at most) and every delay passed by the
# time the drain began, and no consumer died: nothing should wait for the
# 30 s retry of a run taken back and not settled, which is there for
# crashes.  (With the F2 fix alone undone, the events lost to the race
# came back only through that retry, ~27 s into the drain.)
cmp_ok($drain_s, '<', 15,
	'ra: the drain ends within 15 s: no event waits for the retry of a run taken back');

is($node->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.ra'),
	'0', 'ra: the queue table is empty after the drain');
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM a_ids i WHERE NOT EXISTS (SELECT 1 FROM a_done d WHERE d.msg_id = i.msg_id)}),
	'0', 'ra: every enqueued msg_id was completed (acked or dequeued)');
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM (SELECT msg_id FROM a_done GROUP BY 1 HAVING count(*) > 1) x}),
	'0', 'ra: no msg_id was completed twice');
is( $node->safe_psql('postgres', q{
SELECT count(*) || ':' || count(DISTINCT msg_id) || ':' || min(msg_id) || ':' || max(msg_id)
  FROM a_done}),
	'2000:2000:1:2000', 'ra: 2 000 completions of msg_ids 1 .. 2 000 (count:distinct:min:max)');
note 'ra: completions by kind: ' . $node->safe_psql('postgres',
	q{SELECT string_agg(how || ' ' || n, ', ') FROM (SELECT how, count(*) n FROM a_done GROUP BY 1) x});
verify_ok($node, 'postgres', 'spindle_q.ra');

# ---- Part B -------------------------------------------------------------
$node->safe_psql('postgres', q{
SELECT spindle.create_queue('b_dlq');
SELECT spindle.create_queue('bq', max_reads => 2, dead_letter_queue => 'b_dlq');
});
enqueue_named('bq', 'e1', 'e2');
my @got;
for my $k (1 .. 6)
{
	push @got, read_events($node, 'bq', 1, '1 s', "bq: read, round $k");
	my $t1 = time();
	$node->stop('immediate');
	$node->start;
	sleep_until($t1 + 1.3);
}
is(join(' ', map { $_ eq '' ? '-' : $_ } @got), 'e1:1 e1:2 e2:1 e2:2 - -',
	'bq: with a crash after each read, e1 and e2 are delivered twice each, counted, then nothing');
is( $node->safe_psql('postgres',
		q{SELECT string_agg(payload->>'e', ',' ORDER BY msg_id) FROM spindle_q.b_dlq}),
	'e1,e2', 'bq: the dead-letter queue holds e1 and e2');
is($node->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.bq'),
	'0', 'bq: the queue is empty');
verify_ok($node, 'postgres', 'spindle_q.bq');
verify_ok($node, 'postgres', 'spindle_q.b_dlq');

$node->stop;
done_testing();
