# Leases that a failed statement handed back come back at once after a
# restart too (review finding F4).  read() leases nothing if its statement
# fails: the abort hands its leases back (undo_leases) as items to examine
# again in shared memory, but the lease stayed parked LEASED on disk until
# its end, so after a restart (clean or not) the events came back only when
# the lease would have ended, here an hour later.  Now the backend saves
# the hand-back on disk (READY, due now, read count kept) at its next safe
# point: its next commit, its next consumer call, or its exit.
#
# Each round: 5 events; read(q, 5, '1 hour') in a statement that then
# fails (1/0 over the read's rows); the hand-back reaches the disk as the
# round says; the server restarts (fast or immediate); then read(q, 5)
# returns the 5 events at once, each with read_count 2 (the failed read
# counts a delivery: see undo_leases), and nothing else is left.
#
#   next_commit  the failing session commits another statement; immediate
#   exit         the failing session disconnects; fast
#   exit_crash   the failing session disconnects (and is gone); immediate
#   subxact      the failure is caught in a DO block (a subtransaction),
#                whose transaction commits; immediate
#
# Then: a hand-back that another read() leased again before it was saved
# is left alone (the new lease, 1 hour, holds across the crash).  This one
# guards the save (it passes before the change too).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my $node = spindle_node('handed_back', q{
autovacuum = off
});

# read() of all five, in a statement that fails after it returned
my $failing = q{SELECT msg_id, 1 / (read_count - 1) FROM spindle.read('%s', 5, '1 hour')};

sub make_queue
{
	my ($q) = @_;
	$node->safe_psql('postgres', qq{
SELECT spindle.create_queue('$q');
SELECT count(*) FROM spindle.enqueue_batch('$q',
  ARRAY(SELECT jsonb_build_object('e', 'e' || i) FROM generate_series(1, 5) i));
});
	return;
}

sub after_restart
{
	my ($q, $round) = @_;
	is(read_events($node, $q, 5, '1 hour', "$q: read after the restart"),
		'e1:2,e2:2,e3:2,e4:2,e5:2',
		"$round: the 5 handed-back events come at once, read_count 2");
	is(read_events($node, $q, 5, '0', "$q: read again"), '',
		"$round: nothing else");
	return;
}

# ---- next_commit ---------------------------------------------------------
make_queue('hb1');
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query(sprintf($failing, 'hb1'));
	like($s->{stderr}, qr/division by zero/, 'next_commit: the statement failed');
	is($s->query('SELECT 1'), '1', 'next_commit: the session goes on');
	$node->stop('immediate');
	$s->quit;
}
$node->start;
after_restart('hb1', 'next_commit');

# ---- exit ----------------------------------------------------------------
make_queue('hb2');
{
	my ($ret, $out, $err) = $node->psql('postgres', sprintf($failing, 'hb2'));
	like($err, qr/division by zero/, 'exit: the statement failed');
}
$node->restart(mode => 'fast');
after_restart('hb2', 'exit');

# ---- exit_crash ----------------------------------------------------------
make_queue('hb3');
{
	my ($ret, $out, $err) = $node->psql('postgres', sprintf($failing, 'hb3'));
	like($err, qr/division by zero/, 'exit_crash: the statement failed');
}
ok(defined wait_for($node, 'postgres', q{
SELECT count(*) = 0 FROM pg_stat_activity
 WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()}, 60),
	'exit_crash: the failing backend is gone');
$node->stop('immediate');
$node->start;
after_restart('hb3', 'exit_crash');

# ---- subxact -------------------------------------------------------------
make_queue('hb4');
is($node->safe_psql('postgres', q{
DO $$
BEGIN
  BEGIN
    PERFORM msg_id, 1 / (read_count - 1) FROM spindle.read('hb4', 5, '1 hour');
  EXCEPTION WHEN division_by_zero THEN
    RAISE NOTICE 'caught';
  END;
END $$;
SELECT 'done'}), 'done', 'subxact: the failure was caught');
$node->stop('immediate');
$node->start;
after_restart('hb4', 'subxact');

# ---- leased again before the hand-back was saved -------------------------
make_queue('hb5');
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query(sprintf($failing, 'hb5'));
	like($s->{stderr}, qr/division by zero/, 'leased again: the statement failed');
	is(read_events($node, 'hb5', 5, '1 hour', 'hb5: read again'),
		'e1:2,e2:2,e3:2,e4:2,e5:2', 'leased again: another read leases them');
	# without max_reads a lease reaches the disk as an asynchronous commit
	# does: make the new one durable (docs/queues.md)
	$node->safe_psql('postgres', 'CREATE TABLE flushed (t text)');
	# the failing session's next commit finds leases that are not its own
	is($s->query('SELECT 1'), '1', 'leased again: the session goes on');
	$node->stop('immediate');
	$s->quit;
}
$node->start;
is(read_events($node, 'hb5', 5, '0', 'hb5: read after the restart'), '',
	'leased again: the new lease holds across the crash');
is($node->safe_psql('postgres',
		q{SELECT leased FROM spindle.queues WHERE queue_name = 'hb5'}),
	'5', 'leased again: 5 leased');

# ---- exit while another session holds the queue ---------------------------
# The exit's save waits for no lock (review r1, finding 2): with a TRUNCATE
# of the queue open in another session, the failing session's backend used
# to wait for the consumer relation's lock with interrupts held, so that
# neither pg_terminate_backend nor a fast shutdown could end it.  Now it
# exits at once, the hand-back unsaved (the events come back when the
# lease would have ended, here never: the TRUNCATE empties the queue).
make_queue('hb6');
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $s->query('SELECT pg_backend_pid()');
	$s->query(sprintf($failing, 'hb6'));
	like($s->{stderr}, qr/division by zero/, 'exit_busy: the statement failed');
	my $t = $node->background_psql('postgres', on_error_stop => 0);
	$t->query_safe('BEGIN; TRUNCATE spindle_q.hb6');
	$s->quit;
	ok(defined wait_for($node, 'postgres',
			"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid", 20),
		'exit_busy: the failing backend exits while the TRUNCATE holds the queue');
	$t->query_safe('COMMIT');
	$t->quit;
}
$node->restart(mode => 'fast');
is(read_events($node, 'hb6', 5, '0', 'hb6: read after the restart'), '',
	'exit_busy: the truncated queue is empty');

$node->stop;
done_testing();
