# Relocation entries and consume log entries across xid wraparound
# (docs/design.md, "Compaction of sparse spindles", section 6,
# "Freezing", HIGH-3; "Consume log (built)").  A relocation entry in tree
# 3 of a queue's consumer relation carries its mover's xid, which decides
# for every reader whether the old copy of a moved event is hidden; a
# consume log entry in tree 2 carries its consumer's xid.  Those xids must
# stay resolvable in clog as long as the entries exist: VACUUM of the
# consumer relation freezes committed entries older than its freeze limit
# (xid FrozenTransactionId, 2) and keeps relfrozenxid at or below the
# oldest entry it left unfrozen, so datfrozenxid, hence clog truncation
# and the wraparound limits, never pass an entry that needs its xid.
#
# The xid counter is moved with pg_resetwal -x (clog segments made as
# PostgreSQL's tests make them), twice: by 2^30 with the entries unfrozen
# (they still work; VACUUM left relfrozenxid at or below them), then, after
# VACUUM (FREEZE) of every database, past 2^31 from the entries' xids,
# where an unfrozen xid would read as in the future.  In between, once
# every database is frozen, clog is truncated below the frozen point, so
# any xid left unfrozen there would fail to resolve.  Each live event must
# be seen once by plain SQL (seq and index scans) throughout, the leased
# moved event acked by msg_id once (or handed back and delivered once),
# the delayed moved event kept and not delivered before it is due,
# consumed events never seen again, and verify() clean.  The relocated queues are frozen three ways: w by
# VACUUM (FREEZE) of the database, wp by a plain VACUUM once its entries
# are older than vacuum_freeze_min_age, wf by VACUUM (FULL, FREEZE) of its
# consumer relation (the copy path); wc holds a chain of moves (into an
# annex, then on into an annex of the next generation, the emptied
# spindles dropped) and is frozen as w; every queue's consume log entries
# (the dequeues) are checked frozen too, and k has only those.
#
# Negative control (queue nf): the same relocated events with the
# consumer relation left out of the freeze.  While it holds an unfrozen
# entry its relfrozenxid holds datfrozenxid back and clog is kept
# (asserted).  The defect the freeze prevents is then simulated by moving
# its relfrozenxid past the unfrozen entries by hand: datfrozenxid
# advances, clog below it is truncated, and reading that queue fails (its
# entry xids cannot be resolved; asserted as an ERROR naming the entries'
# xid), which is what any of the checks above would do for a consumer
# relation that was not frozen.  The queue is then dropped so that the
# rest of the cluster can go on.  (Had relfrozenxid been left alone, the
# server's wraparound limits would refuse the second jump instead:
# relfrozenxid at the entry holds datfrozenxid and pg_control's oldest xid
# there.)  Checked to fail when written: with the freeze of tree 3 (or of
# tree 2) left out of relocation.c (consume_log.c) the entries keep their
# xids, relfrozenxid passes them, clog is truncated under them, and the
# frozen checks fail and the reads of w (k) fail on the entries' xid.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SpindleTest;

# autovacuum off and its anti-wraparound trigger as late as allowed, so
# that only this test vacuums (the jumps age everything by 2^30)
my $node = spindle_node('reloc_wrap',
	"autovacuum = off\nautovacuum_freeze_max_age = 2000000000\n");
# one session in database postgres for the test's queries (fewer psql
# starts on a busy machine), opened again after each restart
my $session;
my $q = sub {
	$session //= $node->background_psql('postgres');
	return $session->query_safe($_[0]);
};

# the jumps: the session ends first
sub jump
{
	my ($xid, $oldest) = @_;
	if (defined $session)
	{
		$session->quit;
		undef $session;
	}
	reset_next_xid($node, $xid, $oldest);
	return;
}

# ---- setup: relocated events of queues w, wp, wf and nf; k consumed ------

# One full spindle of 10 events: 3 delayed a day, 1 leased for a day, the
# other 8 dequeued; the relocator moves 1 and 3 into an annex, and nothing
# drops the source spindle (worker off, no drop after the move), so the
# tree 3 entries that hide the old copies stay.
sub relocated_queue
{
	my ($name) = @_;
	$q->(qq{
SELECT spindle.create_queue('$name', 10);
CREATE INDEX ${name}_msg ON spindle_q.$name (msg_id);
SELECT count(spindle.enqueue('$name', jsonb_build_object('n', g),
         CASE WHEN g = 3 THEN interval '1 day' ELSE interval '0' END))
  FROM generate_series(1, 10) g;});
	my $leased = $q->(qq{SELECT msg_id FROM spindle.read('$name', 1, '1 day')});
	is($q->(qq{SELECT count(*) FROM spindle.dequeue('$name', 100)}),
		'8', "$name: 8 events dequeued");
	# records the spindle's fill; nothing drops (it has live events)
	$q->(qq{SELECT spindle.drop_spindles('spindle_q.$name')});
	is($q->(qq{SELECT moved FROM spindle._compact('spindle_q.$name')}),
		'2', "$name: the leased and the delayed event moved into an annex");
	my $delayed = $q->(
		qq{SELECT msg_id FROM spindle_q.$name WHERE msg_id <> $leased});
	return ($leased, $delayed);
}

# A chain of moves: five full spindles of 10 events, the first with
# event 1 leased and 3 delayed a day, the others with two events leased
# each, the rest dequeued; the relocator moves the 10 live events into an
# annex (filling it), the 8 leases of spindles 2..5 are acked, and a
# second pass moves 1 and 3 on from that annex into an annex of the next
# generation.  The emptied spindles drop (drop_spindles), so their
# entries are forgotten once retired (the queue's VACUUM does that);
# those from the first annex stay.
sub chain_queue
{
	my ($name) = @_;
	my $read = qq{SELECT string_agg(msg_id::text, ',') FROM spindle.read('$name', 2, '1 day');
SELECT count(*) FROM spindle.dequeue('$name', 8);};
	$q->(qq{
SELECT spindle.create_queue('$name', 10);
CREATE INDEX ${name}_msg ON spindle_q.$name (msg_id);
SELECT count(spindle.enqueue('$name', jsonb_build_object('n', g),
         CASE WHEN g = 3 THEN interval '1 day' ELSE interval '0' END))
  FROM generate_series(1, 50) g;});
	my ($leased, $n) = split /\n/, $q->(qq{
SELECT msg_id FROM spindle.read('$name', 1, '1 day');
SELECT count(*) FROM spindle.dequeue('$name', 8);});
	my @rest = split /\n/, $q->("$read $read $read $read");
	my @acks = map { split /,/ } @rest[ grep { $_ % 2 == 0 } 0 .. $#rest ];
	is(scalar(@acks), 8, "$name: 8 more leases");
	$q->(qq{SELECT spindle.drop_spindles('spindle_q.$name')});
	is($q->(qq{SELECT moved FROM spindle._compact('spindle_q.$name')}),
		'10', "$name: the 10 live events moved into an annex");
	is( $q->(
			qq{SELECT count(*) FILTER (WHERE spindle.ack('$name', id))
	  FROM unnest('{@{[join ',', @acks]}}'::bigint[]) id}),
		'8', "$name: 8 moved leases acked");
	$q->(qq{SELECT spindle.drop_spindles('spindle_q.$name')});
	is($q->(qq{SELECT moved FROM spindle._compact('spindle_q.$name')}),
		'2', "$name: the 2 left moved on into an annex of the next generation");
	is( $q->(qq{SELECT max(generation) FROM spindle.spindles
	      WHERE relation = 'spindle_q.$name'::regclass AND state = 'annex'}),
		'2', "$name: a second generation annex");
	my $delayed = $q->(
		qq{SELECT msg_id FROM spindle_q.$name WHERE msg_id <> $leased});
	return ($leased, $delayed);
}

# the tree 3 entries of queue $name: "count min max" of their xids
sub reloc_xids
{
	my ($name) = @_;
	return $q->(qq{SELECT count(*) || ' ' || coalesce(min(awaited), 0)
	  || ' ' || coalesce(max(awaited), 0)
	  FROM spindle._run_scan('spindle_q.$name', 3, -1, 9223372036854775807)});
}

# the consume log entries of queue $name: "count min max" of their xids
# (an entry's xid is kept in the microseconds of its due column)
sub log_xids
{
	my ($name) = @_;
	return $q->(qq{SELECT count(*) || ' ' || coalesce(min(x), 0) || ' '
	  || coalesce(max(x), 0)
	  FROM (SELECT (extract(epoch FROM due - timestamptz '2000-01-01 00:00:00+00')
	                * 1000000)::bigint AS x
	          FROM spindle._run_scan('spindle_q.$name', 2, 0, 9223372036854775807)) s});
}

# what plain SQL sees of queue $name: by a seq scan and by an index scan
# on msg_id, "msg_id=n" for each row, in msg_id order
sub seen
{
	my ($name) = @_;
	my $rows = q{string_agg(msg_id || '=' || (payload->>'n'), ' ' ORDER BY msg_id)};
	my @out = split /\n/, $q->(qq{
SET enable_indexscan = off; SET enable_bitmapscan = off;
SELECT $rows FROM spindle_q.$name;
RESET enable_indexscan; SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT * FROM spindle_q.$name WHERE msg_id >= 0;
SELECT $rows FROM spindle_q.$name WHERE msg_id >= 0;
RESET enable_seqscan; RESET enable_bitmapscan;}), -1;
	my ($seq, $idx) = ($out[0], $out[-1]);
	my $plan = join("\n", @out[ 1 .. $#out - 1 ]);
	die "no index scan on spindle_q.$name: $plan" unless $plan =~ /Index Scan/;
	return "seq: $seq; index: $idx";
}

sub crel
{
	my ($name) = @_;
	return $q->(qq{SELECT 'pg_spindle.c' || 'spindle_q.$name'::regclass::oid});
}

# the queues: w, wp and wf relocated and frozen three ways (VACUUM
# (FREEZE) of the database; a plain VACUUM once their entries are older
# than vacuum_freeze_min_age; VACUUM (FULL, FREEZE) of the consumer
# relation), wc with a chain of moves (frozen as w), nf relocated and not
# frozen (the negative control), k only consumed
my @moved = qw(w wp wf wc);
my %Q;
for my $name (@moved, 'nf')
{
	@{ $Q{$name} }{qw(leased delayed)} =
	  $name eq 'wc' ? chain_queue($name) : relocated_queue($name);
}

# queue k: 10 events, 6 consumed (consume log entries, on by default)
$q->(q{
SELECT spindle.create_queue('k');
CREATE INDEX k_msg ON spindle_q.k (msg_id);
SELECT count(spindle.enqueue('k', jsonb_build_object('n', g)))
  FROM generate_series(1, 10) g;});
my $k_consumed = $q->(
	q{SELECT string_agg(msg_id::text, ',' ORDER BY msg_id) FROM spindle.dequeue('k', 6)});

my $normal = sub { $_[0] >= 3 && $_[0] < 2**32 };
for my $name (@moved, 'nf', 'k')
{
	my $e = $Q{$name} //= {};
	$e->{crel} = crel($name);
	$e->{before} = seen($name);
	my ($ln, $lmin, $lmax) = split / /, log_xids($name);
	@$e{qw(lmin lmax)} = ($lmin, $lmax);
	ok($ln >= 1 && $normal->($lmin),
		"$name: consume log entries ($ln) with a normal xid ($lmin)");
	$e->{oldest} = $lmin;
	next if $name eq 'k';
	like($e->{before}, qr/^seq: \d+=1 \d+=3; index: \d+=1 \d+=3$/,
		"$name: plain SQL sees the two moved events once each");
	my ($n, $rmin, $rmax) = split / /, reloc_xids($name);
	if ($name eq 'wc')
	{
		is($n, '12', "$name: 12 relocation entries in tree 3");
		ok($normal->($rmin) && $rmin < $rmax,
			"$name: their xids ($rmin..$rmax) are normal xids of two passes");
	}
	else
	{
		is($n, '2', "$name: two relocation entries in tree 3");
		ok($normal->($rmin) && $rmin == $rmax,
			"$name: their xid ($rmin) is a normal xid");
	}
	@$e{qw(reloc rmin rmax)} = ("$n $rmin $rmax", $rmin, $rmax);
	$e->{oldest} = $rmin if $rmin < $lmin;
}
like($Q{k}{before}, qr/^seq: \d+=7 \d+=8 \d+=9 \d+=10; index: /,
	'k: plain SQL sees the 4 events not consumed');

# a plain VACUUM freezes nothing this young, and must leave relfrozenxid
# at or below the entries' xids (what keeps clog and brings the
# anti-wraparound vacuum)
$q->("VACUUM $Q{$_}{crel}") for keys %Q;
for my $name (sort keys %Q)
{
	my $e = $Q{$name};
	is(reloc_xids($name), $e->{reloc},
		"$name: a plain VACUUM leaves the young relocation entries unfrozen")
	  if $name ne 'k';
	is( $q->(qq{SELECT age(relfrozenxid) >= age('$e->{oldest}'::xid) FROM pg_class
	     WHERE oid = '$e->{crel}'::regclass}),
		't',
		"$name: relfrozenxid of the consumer relation is not newer than its oldest entry");
}

# ---- jump 1: 2^30 xids on, entries unfrozen --------------------------------

my $oldest = $q->('SELECT oldest_xid FROM pg_control_checkpoint()');
my $jump1 = 2**30;
jump($jump1, $oldest);
$q->('SELECT pg_current_xact_id()') for 1 .. 3;
is($q->('SELECT pg_current_xact_id()::text::bigint >= ' . $jump1),
	't', 'the next xid is past the first jump');
is(seen($_), $Q{$_}{before}, "$_: after 2^30 xids, plain SQL sees the same")
  for sort keys %Q;

# ---- freeze every database, except the negative control's consumer -------

$q->('ALTER DATABASE template0 WITH ALLOW_CONNECTIONS true');
$node->safe_psql($_, 'VACUUM (FREEZE)') for qw(template0 template1);
$q->('ALTER DATABASE template0 WITH ALLOW_CONNECTIONS false');
my $others = join(', ', map { "'$Q{$_}{crel}'::regclass" } qw(wp wf nf));
my $rest = $q->(qq{SELECT string_agg(oid::regclass::text, ', ')
  FROM pg_class WHERE relkind IN ('r', 'm') AND oid NOT IN ($others)});
$q->("VACUUM (FREEZE) $rest");
$q->("VACUUM $Q{wp}{crel}");
$q->("VACUUM (FULL, FREEZE) $Q{wf}{crel}");

for my $name (@moved, 'k')
{
	my $e = $Q{$name};
	like(reloc_xids($name), qr/^[1-9]\d* 2 2$/,
		"$name: the relocation entries are frozen (xid 2)")
	  if $name ne 'k';
	my (undef, $lmin, $lmax) = split / /, log_xids($name);
	is("$lmin $lmax", '2 2', "$name: the consume log entries are frozen (xid 2)");
	is( $q->(qq{SELECT relfrozenxid::text::bigint >= $jump1
	     AND age(relfrozenxid) < age('$e->{oldest}'::xid) FROM pg_class
	     WHERE oid = '$e->{crel}'::regclass}),
		't', "$name: relfrozenxid of the consumer relation advanced");
}
is(reloc_xids('nf'), $Q{nf}{reloc},
	'nf: not vacuumed, its entries are unfrozen');

# the unfrozen consumer relation holds datfrozenxid, so clog is kept
my $clog0 = $node->data_dir . '/pg_xact/0000';
is( $q->(qq{SELECT datfrozenxid = (SELECT relfrozenxid FROM pg_class
	     WHERE oid = '$Q{nf}{crel}'::regclass) FROM pg_database
	     WHERE datname = 'postgres'}),
	't', 'nf: its relfrozenxid holds datfrozenxid back');
ok(-e $clog0, 'clog segment 0000 is kept while an entry there is unfrozen');
is(seen($_), $Q{$_}{before}, "$_: after the freeze, plain SQL sees the same")
  for sort keys %Q;

# ---- negative control: relfrozenxid past unfrozen entries -----------------
#
# What a freeze that advanced relfrozenxid without freezing the entries
# would do: datfrozenxid moves up, clog under it goes, and the entries'
# xids no longer resolve.  A queue left so is read with an ERROR (this is
# the failure the checks after the second jump would meet on the other
# queues had their entries not been frozen).  Dropped afterwards.
$q->(qq{UPDATE pg_class SET relfrozenxid =
  (SELECT relfrozenxid FROM pg_class WHERE oid = '$Q{w}{crel}'::regclass)
  WHERE oid = '$Q{nf}{crel}'::regclass});
$q->('VACUUM (FREEZE) pg_class');
ok(!-e $clog0, 'negative control: with that, clog segment 0000 is truncated');
my ($ret, $out, $err) =
  $node->psql('postgres', 'SELECT count(*) FROM spindle_q.nf');
note("negative control read: ret $ret, out [$out], err [$err]");
ok($ret != 0 && $err =~ /ERROR:  could not access status of transaction (\d+)/
	  && ($1 == $Q{nf}{rmin} || ($1 >= $Q{nf}{lmin} && $1 <= $Q{nf}{lmax})),
	'negative control: reading the queue whose entries were not frozen fails on an entry xid'
) or diag("got ret $ret, out [$out], err [$err]");
$q->(q{SELECT spindle.drop_queue('nf')});
delete $Q{nf};

# ---- jump 2: past 2^31 from the entries' xids ---------------------------

is(seen($_), $Q{$_}{before}, "$_: after clog truncation, plain SQL sees the same")
  for sort keys %Q;
$q->('CHECKPOINT');
$oldest = $q->('SELECT oldest_xid FROM pg_control_checkpoint()');
ok($oldest >= $jump1, "pg_control's oldest xid ($oldest) is past the first jump");
my $jump2 = 2**31 + 1048576;
ok(!grep({ $jump2 - $Q{$_}{lmax} <= 2**31 || $jump2 - ($Q{$_}{rmax} // 0) <= 2**31 } keys %Q),
	'the second jump is more than 2^31 past every entry');
jump($jump2, $oldest);
$q->('SELECT pg_current_xact_id()') for 1 .. 3;
is($q->('SELECT pg_current_xact_id()::text::bigint >= ' . $jump2),
	't', 'the next xid is past the second jump');

for my $round ('after the jump past 2^31', 'and after a VACUUM of it all')
{
	for my $name (sort keys %Q)
	{
		is(seen($name), $Q{$name}{before},
			"$name: $round, plain SQL sees each event once");
		verify_ok($node, 'postgres', "spindle_q.$name",
			"$name: $round, verify() is clean");
	}
	last if $round =~ /VACUUM/;
	$node->safe_psql($_, 'VACUUM') for qw(postgres template1);
}

# w and wp: the moved lease is acked; wf: it is handed back and
# delivered again, once
for my $name (@moved)
{
	my $e = $Q{$name};
	if ($name eq 'wf')
	{
		is( $q->(qq{SELECT spindle.set_visibility('$name', $e->{leased}, '0')}),
			't', "$name: the moved lease is handed back by msg_id");
		is( $q->(qq{SELECT string_agg(msg_id::text, ',') FROM spindle.dequeue('$name', 10)}),
			$e->{leased}, "$name: dequeue delivers the handed back event");
	}
	else
	{
		is($q->(qq{SELECT spindle.ack('$name', $e->{leased})}),
			't', "$name: the moved lease is acked by msg_id");
	}
	is($q->(qq{SELECT spindle.ack('$name', $e->{leased})}),
		'f', "$name: a second ack finds nothing");
	is($q->(qq{SELECT count(*) FROM spindle.dequeue('$name', 10)}),
		'0', "$name: dequeue delivers nothing (the delayed event is not due)");
	is($q->(qq{SELECT string_agg(msg_id::text, ',') FROM spindle_q.$name}),
		$e->{delayed}, "$name: the delayed event is still there, once");
	verify_ok($node, 'postgres', "spindle_q.$name",
		"$name: verify() is clean at the end");
}

my $k_rest = $q->(q{SELECT string_agg(msg_id::text, ',' ORDER BY msg_id)
  FROM spindle.dequeue('k', 100)});
is(scalar(split /,/, $k_rest), 4, 'k: dequeue delivers the 4 events not consumed');
ok(!grep({ my $c = $_; grep { $_ eq $c } split /,/, $k_rest } split /,/, $k_consumed),
	'k: none of the events consumed before the jumps is delivered again');
is($q->(q{SELECT count(*) FROM spindle_q.k}), '0', 'k: the queue is empty');
verify_ok($node, 'postgres', 'spindle_q.k', 'k: verify() is clean at the end');

$session->quit if defined $session;
$node->stop;
done_testing();
