# Length limits across a crash (issue 19).  A queue's max_depth is applied
# with an upper bound kept in shared memory (queue_limits.c); a crash
# (pg_ctl stop -m immediate) loses it, and the first enqueue after the
# restart counts the queue again from disk.  docs/queues.md: at max_depth
# deliverable plus delayed events an enqueue is refused (54000) or makes
# room by its policy; leased events do not count; the events of a
# producer whose transaction the crash cut off take no room after it.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use Time::HiRes ();
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my $node = spindle_node('queue_limits_restart', q{
autovacuum = off
max_prepared_transactions = 4
});

# ERROR's SQLSTATE of $sql, or 'ok'
sub sqlstate_of
{
	my ($sql) = @_;
	my ($ret, $out, $err) = $node->psql(
		'postgres', "\\set VERBOSITY verbose\n$sql",
		on_error_stop => 1);
	return 'ok' if $ret == 0;
	return $err =~ /ERROR:\s+([0-9A-Z]{5})/ ? $1 : "failed: $err";
}

sub payloads
{
	my ($q) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce(string_agg(payload::text, ',' ORDER BY msg_id), '') FROM spindle_q.$q"
	);
}

$node->safe_psql('postgres', q{
-- reject, max_reads so that leases are durable (docs/queues.md)
SELECT spindle.create_queue('lr', max_depth => 4, max_reads => 100);
SELECT spindle.enqueue_batch('lr', ARRAY['1', '2', '3', '4']::jsonb[]);
SELECT spindle.create_queue('ldrop', max_depth => 3, overflow => 'drop_oldest');
SELECT spindle.enqueue_batch('ldrop', ARRAY['1', '2', '3']::jsonb[]);
SELECT spindle.create_queue('lopen', max_depth => 2);
SELECT spindle.enqueue('lopen', '1');
});
# one event of lr leased for an hour, one more enqueued in its place;
# and one delayed event in place of a consumed one
is($node->safe_psql('postgres',
		"SELECT payload FROM spindle.read('lr', 1, '1 hour')"),
	'1', 'lr: event 1 leased');
is(sqlstate_of("SELECT spindle.enqueue('lr', '5')"), 'ok',
	'lr: a leased event takes no room');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM spindle.dequeue('lr', 1)"), '1',
	'lr: event 2 consumed');
is(sqlstate_of("SELECT spindle.enqueue('lr', '6', delay => '1 hour')"),
	'ok', 'lr: a delayed event in its place');
is(sqlstate_of("SELECT spindle.enqueue('lr', '7')"), '54000',
	'lr: full before the crash');

# a producer whose transaction the crash cuts off fills lopen
my $open = $node->background_psql('postgres', on_error_stop => 1);
$open->query_safe("BEGIN; SELECT spindle.enqueue('lopen', '2');");
is(sqlstate_of("SELECT spindle.enqueue('lopen', '3')"), '54000',
	'lopen: an open producer takes the last place');

$node->stop('immediate');
eval { $open->quit; };
$node->start;

is(sqlstate_of("SELECT spindle.enqueue('lr', '7')"), '54000',
	'lr: full after the crash (three deliverable, one delayed)');
is($node->safe_psql('postgres',
		"SELECT leased FROM spindle.queues WHERE queue_name = 'lr'"),
	'1', 'lr: the lease survived the crash');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM spindle.dequeue('lr', 1)"), '1',
	'lr: one consumed after the crash');
is(sqlstate_of("SELECT spindle.enqueue('lr', '7')"), 'ok',
	'lr: room for one');
is(sqlstate_of("SELECT spindle.enqueue('lr', '8')"), '54000',
	'lr: and only one');

is(sqlstate_of("SELECT spindle.enqueue('ldrop', '4')"), 'ok',
	'ldrop: admitted after the crash');
is(payloads('ldrop'), '2,3,4', 'ldrop: the oldest event was dropped');

is(sqlstate_of("SELECT spindle.enqueue('lopen', '3')"), 'ok',
	'lopen: the cut-off producer takes no room after the crash');
is(sqlstate_of("SELECT spindle.enqueue('lopen', '4')"), '54000',
	'lopen: full again');
is(payloads('lopen'), '1,3', 'lopen: the committed events');

# A prepared producer across a restart (review f1): its spindle keeps its
# lock, so no counter of it can be built from disk; the count reads the
# spindle's pages instead.  Its event takes room, and exactly one: never
# "could not count" (55P03), and drop_oldest drops no more than it must.
$node->safe_psql('postgres', q{
SELECT spindle.create_queue('lprep', max_depth => 3);
SELECT spindle.enqueue('lprep', '1');
BEGIN; SELECT spindle.enqueue('lprep', '2'); PREPARE TRANSACTION 'lprep_p';
SELECT spindle.create_queue('lpdrop', max_depth => 3, overflow => 'drop_oldest');
SELECT spindle.enqueue_batch('lpdrop', ARRAY['1', '2']::jsonb[]);
BEGIN; SELECT spindle.enqueue('lpdrop', '3'); PREPARE TRANSACTION 'lpdrop_p';
});
$node->restart;

is(sqlstate_of("SELECT spindle.enqueue('lprep', '3')"), 'ok',
	'lprep: admitted after the restart beside a prepared producer');
is(sqlstate_of("SELECT spindle.enqueue('lprep', '4')"), '54000',
	'lprep: the prepared event takes the last place');
is(sqlstate_of("SELECT spindle.enqueue('lprep', '4')"), '54000',
	'lprep: still full when counted again');
$node->safe_psql('postgres', "ROLLBACK PREPARED 'lprep_p'");
is(sqlstate_of("SELECT spindle.enqueue('lprep', '4')"), 'ok',
	'lprep: room again once the prepared producer rolled back');
is(payloads('lprep'), '1,3,4', 'lprep: the committed events');

is(sqlstate_of("SELECT spindle.enqueue('lpdrop', '4')"), 'ok',
	'lpdrop: admitted after the restart beside a prepared producer');
is(payloads('lpdrop'), '2,4', 'lpdrop: only the oldest event was dropped');
$node->safe_psql('postgres', "COMMIT PREPARED 'lpdrop_p'");
is(payloads('lpdrop'), '2,3,4', 'lpdrop: the prepared event committed');

# Leases beside a limit (review f2).  A count records, besides its bound
# of the events not purged, one of those not leased that holds until the
# first lease counted can end; below max_depth by it an enqueue counts
# nothing, however many events are leased (it recounted, walking every
# parked lease, at each enqueue once the leases alone passed max_depth).
# The leases end: at their time, or earlier when set_visibility or a
# failed statement hands them back; then they count again at once.
sub limit_setup
{
	my ($q, $lease) = @_;
	$node->safe_psql('postgres', qq{
SELECT spindle.create_queue('$q', max_depth => 4);
SELECT spindle.enqueue('$q', '1'); SELECT spindle.enqueue('$q', '2');
SELECT count(*) FROM spindle.read('$q', 2, '$lease');
SELECT spindle.enqueue('$q', '"a"'); SELECT spindle.enqueue('$q', '"b"');
});
}
# lexp: leased for 4 s; "c" recounts (two deliverable, two leased), then
# the leases end: "d" is refused although the bound of the events not
# leased (three) has room
limit_setup('lexp', '4 seconds');
# the leases began before this instant: they end before it plus 4 s
# (Time::HiRes: whole seconds made this sleep up to 1 s too short)
my $t_lexp = Time::HiRes::time();
is(sqlstate_of(q{SELECT spindle.enqueue('lexp', '"c"')}), 'ok',
	'lexp: the leased events take no room');
my $left = 4.5 - (Time::HiRes::time() - $t_lexp);
sleep($left) if $left > 0;
is(sqlstate_of(q{SELECT spindle.enqueue('lexp', '"d"')}), '54000',
	'lexp: leases that ended count again');
# lvis: a lease handed back by set_visibility counts again at once
limit_setup('lvis', '1 hour');
is(sqlstate_of(q{SELECT spindle.enqueue('lvis', '"c"')}), 'ok',
	'lvis: the leased events take no room');
is($node->safe_psql('postgres', q{
SELECT spindle.set_visibility('lvis', min(msg_id), '0') FROM spindle_q.lvis}),
	't', 'lvis: a lease handed back');
is(sqlstate_of(q{SELECT spindle.enqueue('lvis', '"d"')}), '54000',
	'lvis: the event handed back counts again');
# lfail: leases a failed statement granted are handed back and count
# again: its read() leased two of four events and its enqueue recounted
# (two deliverable) before it failed
$node->safe_psql('postgres', q{
SELECT spindle.create_queue('lfail', max_depth => 4);
SELECT count(*) FROM spindle.enqueue_batch('lfail', ARRAY['1', '2', '"a"', '"b"']::jsonb[]);
});
my ($ret, $out, $err) = $node->psql('postgres', q{
DO $$ BEGIN
	PERFORM * FROM spindle.read('lfail', 2, '1 hour');
	PERFORM spindle.enqueue('lfail', '"c"');
	RAISE EXCEPTION 'fails after its read and enqueue';
END $$});
like($err, qr/fails after its read and enqueue/,
	'lfail: the statement read, enqueued and failed');
is(sqlstate_of(q{SELECT spindle.enqueue('lfail', '"c"')}), '54000',
	'lfail: the leases it handed back count again');
is(payloads('lfail'), '1,2,"a","b"', 'lfail: the events');

# The cost of an enqueue far below max_depth beside 10 000 leases, each
# its own parked run (its own end), more than max_depth: the same buffers
# as on a queue with none (it recounted before, reading every leaf of the
# parked runs, at each call).
$node->safe_psql('postgres', q{
SELECT spindle.create_queue('cl_none', max_depth => 1000);
SELECT spindle.create_queue('cl_leased', max_depth => 1000);
INSERT INTO spindle_q.cl_leased (payload) SELECT to_jsonb(g) FROM generate_series(1, 10000) g;
CREATE PROCEDURE lease_each(qn text, n int) LANGUAGE plpgsql AS $$
BEGIN
	FOR i IN 1 .. n LOOP
		PERFORM spindle.read(qn, 1, make_interval(hours => 1, secs => i));
	END LOOP;
END $$;
CALL lease_each('cl_leased', 10000);
});
is($node->safe_psql('postgres',
		"SELECT depth || ':' || leased FROM spindle.queues WHERE queue_name = 'cl_leased'"),
	'0:10000', 'cl_leased: 10 000 events leased (depth:leased)');
my $session = $node->background_psql('postgres', on_error_stop => 0);
my %c = cost_beside(
	sub {
		my ($q) = @_;
		return explain_cost($session, "SELECT spindle.enqueue('$q', '1')");
	},
	'cl_none', 'cl_leased', 9);
$session->quit;
my ($base_buf, $big_buf) = ($c{buf}{cl_none}, $c{buf}{cl_leased});
note "median enqueue below max_depth: no leases $c{ms}{cl_none} ms, $base_buf buffers; "
  . "10 000 leases $c{ms}{cl_leased} ms, $big_buf buffers";
is($c{rows}{cl_none} + $c{rows}{cl_leased}, 18, 'every measured enqueue ran');
ok($big_buf <= $base_buf + 2,
	'enqueue beside 10 000 leases reads the buffers of one beside none');
is($node->safe_psql('postgres',
		"SELECT depth || ':' || leased FROM spindle.queues WHERE queue_name = 'cl_leased'"),
	'11:10000', 'cl_leased: the 11 enqueued events are there, the leases too');

for my $q (qw(lr ldrop lopen lprep lpdrop lexp lvis lfail))
{
	verify_ok($node, 'postgres', "spindle_q.$q");
}

$node->stop;
done_testing();
