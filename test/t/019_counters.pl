# Slot counters with far more full spindles than spindle.max_open_spindles
# (64, its minimum): inserts, the views, drop_spindles(), TRUNCATE, its
# rollback and a restart stay correct; a full spindle is never counted from
# disk again once it is known full (no counter rebuilt, no eviction after
# the fill), so the views read each full spindle once, not twice; and the
# planner's row estimate of a table of N full spindles is what it was when
# the estimate summed every spindle's counter.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('counters');
$node->init;
$node->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'spindle'
spindle.max_open_spindles = 64
spindle.enable_worker = off
max_parallel_workers_per_gather = 0
autovacuum = off
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION spindle');

my $nfull = 250;
my $cap = 10;
$node->safe_psql(
	'postgres', qq{
CREATE TABLE t (id int, body text) USING spindle WITH (events_per_spindle = $cap);
CREATE INDEX t_id ON t (id);
CREATE SEQUENCE t_seq START 1000000;
});
# 2500 events, 500 per transaction: 250 full spindles (and a ready one)
for my $b (0 .. 4)
{
	my $lo = $b * 500 + 1;
	my $hi = $lo + 499;
	$node->safe_psql('postgres',
		qq{INSERT INTO t SELECT g, 'e' || g FROM generate_series($lo, $hi) g});
}

# Run $sql in a new session with client_min_messages = debug1; return
# (its output, the number of full spindles whose slots it counted from
# disk, the number of evictions of counters).
sub debug_run
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	$node->psql(
		'postgres', "SET client_min_messages = debug1;\n$sql",
		stdout => \$out,
		stderr => \$err,
		on_error_die => 1);
	# (spindles that are not full are counted when they get no counter)
	my $counted = () = $err =~ /counted the slots of spindle \d+ .* used, full/g;
	my $evicted = () = $err =~ /evicted \d+ slot counters/g;
	return ($out, $counted, $evicted);
}

# The buffers (hit + read) the top node of EXPLAIN ANALYZE of $sql used,
# the second time it runs in a session (the relation cache is warm).
sub buffers_of
{
	my ($sql) = @_;
	my $json = $node->safe_psql('postgres',
		"$sql;\nEXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) $sql");
	my ($hit) = $json =~ /"Shared Hit Blocks": (\d+)/;
	my ($read) = $json =~ /"Shared Read Blocks": (\d+)/;
	return $hit + $read;
}

sub spindle_pages
{
	return $node->safe_psql(
		'postgres', q{
SELECT sum(pg_relation_size(segment) / 8192) FROM spindle.spindle_catalog
 WHERE relation = 't'::regclass AND dropped_at IS NULL});
}

# the row estimate of EXPLAIN SELECT * FROM t, in a new session
sub estimate
{
	my $plan = $node->safe_psql('postgres', 'EXPLAIN SELECT * FROM t');
	my ($rows) = $plan =~ /rows=(\d+)/;
	return $rows;
}

# the state every check below expects
sub consistent
{
	my ($what) = @_;
	is( $node->safe_psql(
			'postgres', q{
SELECT count(*) FROM spindle.spindles
 WHERE relation = 't'::regclass
   AND (events > capacity OR purged_events > events
        OR (state = 'full' AND events <> capacity))}),
		'0',
		"$what: no spindle over capacity, every full one holds its capacity");
	is( $node->safe_psql(
			'postgres', q{
SELECT (SELECT sum(events) - sum(purged_events) FROM spindle.spindles
         WHERE relation = 't'::regclass) = (SELECT count(*) FROM t)
       AND (SELECT count(*) = count(DISTINCT ctid) AND count(*) = count(DISTINCT id) FROM t)}),
		't',
		"$what: live events equal the rows, each with its own TID");
	is( $node->safe_psql(
			'postgres', q{
SELECT count(*) FILTER (WHERE state = 'open') <= 1
       AND coalesce(max(spindle_no) FILTER (WHERE state = 'open') = max(spindle_no), true)
  FROM spindle.spindles WHERE relation = 't'::regclass AND state <> 'ready'}),
		't',
		"$what: at most one open spindle, the newest in use");
	return;
}

# 1. After the fill.
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FILTER (WHERE state = 'full'), sum(events) FROM spindle.spindles
 WHERE relation = 't'::regclass}),
	"$nfull|" . ($nfull * $cap),
	"$nfull full spindles of $cap events");
consistent('after the fill');

# The planner's estimate: the events handed out, as when it summed every
# spindle's counter (a full spindle without one counted its capacity).
is(estimate(), $nfull * $cap, 'row estimate of the full spindles');

# 2. Known-full spindles are not counted again: not by the views, not by a
# session's first insert, not by drop_spindles(); and no eviction.
my ($out, $counted, $evicted) = debug_run(
	q{SELECT sum(events) FROM spindle.spindles WHERE relation = 't'::regclass});
is($out, $nfull * $cap, 'the views count every event');
is($counted, 0, 'the views count no full spindle from disk');
my $pages = spindle_pages();
my $bufs = buffers_of(
	q{SELECT sum(events) FROM spindle.spindles WHERE relation = 't'::regclass});
note("views: $bufs buffers for $pages spindle pages");
# each page is read once to count its purged events, plus some catalog
# pages; counting a spindle's slots again would read its page and its slot
# map page
ok($bufs < $pages + $nfull / 2,
	"the views read each full spindle once ($bufs buffers, $pages pages)");

($out, $counted, $evicted) = debug_run(
	q{INSERT INTO t VALUES (100001, 'first of a session');
SELECT spindle.drop_spindles('t');
SELECT spindle.drop_spindles('t');});
is($counted, 0, 'first insert and drop_spindles() count no full spindle');
is($evicted, 0, 'and evict no counter');
$bufs = buffers_of(q{SELECT spindle.drop_spindles('t')});
note("drop_spindles: $bufs buffers for $pages spindle pages");
ok($bufs < $pages + $nfull / 2,
	"drop_spindles() reads each full spindle once ($bufs buffers, $pages pages)");
consistent('after a first insert');

# 3. Inserts from many new sessions, across spindle boundaries, with 64
# counters: none overfills a spindle.
$node->pgbench(
	'--no-vacuum --connect --client=4 --jobs=2 --transactions=60',
	0,
	[qr{processed: 240/240}],
	[qr{^$}],
	'concurrent producers with 64 counters',
	{
		'019_produce' => q{
\set r random(1, 4)
BEGIN;
INSERT INTO t SELECT nextval('t_seq'), 'p' FROM generate_series(1, :r) g;
\if :r = 4
ROLLBACK;
\else
COMMIT;
\endif
}
	});
consistent('after concurrent producers');

# 4. Purge the first 100 spindles and drop them.
$node->safe_psql('postgres', 'DELETE FROM t WHERE id <= 1000');
($out, $counted, $evicted) =
  debug_run(q{SELECT spindle.drop_spindles('t')});
# (and any spindle that only rolled-back inserts filled)
ok($out >= 100, "drop_spindles() drops the 100 purged spindles ($out)");
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM spindle.spindles WHERE relation = 't'::regclass AND spindle_no <= 100}),
	'0',
	'the purged spindles are gone');
is($counted, 0, 'and counts no full spindle from disk');
is( $node->safe_psql(
		'postgres', q{SET enable_seqscan = off; SELECT count(*) FROM t WHERE id <= 1000}),
	'0',
	'no event of a dropped spindle is found through the index');
$node->safe_psql('postgres', q{SELECT spindle.drop_spindles('t')});
consistent('after drop_spindles()');

# A second table whose fill times nobody records (no drop_spindles()): after
# a restart only its counters in shared memory could tell that its spindles
# are full, and they are gone.
$node->safe_psql(
	'postgres', q{
CREATE TABLE u (id int) USING spindle WITH (events_per_spindle = 10);
INSERT INTO u SELECT g FROM generate_series(1, 1000) g;
});
($out, $counted, $evicted) = debug_run(
	q{SELECT count(*) FILTER (WHERE state = 'full') FROM spindle.spindles WHERE relation = 'u'::regclass});
is($out . ':' . $counted, '100:0',
	'u: 100 full spindles, none counted from disk');
is( $node->safe_psql('postgres', q{EXPLAIN SELECT * FROM u}) =~ /rows=(\d+)/
	? $1 : '',
	'1000', 'u: row estimate');

# 5. A restart: counters are rebuilt from disk; the open spindle goes on.
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM spindle.spindle_catalog
 WHERE relation = 'u'::regclass AND filled_at IS NOT NULL}),
	'0',
	'u: no fill time recorded');
my $open_before = $node->safe_psql('postgres',
	q{SELECT spindle_no || ':' || events FROM spindle.spindles
	   WHERE relation = 't'::regclass AND state = 'open'});
my $est_before = estimate();
$node->restart;
($out, $counted, $evicted) = debug_run(
	q{SELECT sum(events) FROM spindle.spindles WHERE relation = 't'::regclass});
# (the views read every table: u's 100 spindles have no fill time recorded
# and the restart took their counters; t's are all recorded)
ok($counted <= 100,
	"after a restart, the views count each full spindle of u once ($counted)");
($out, $counted, $evicted) = debug_run(
	q{SELECT sum(events) FROM spindle.spindles WHERE relation = 't'::regclass});
is($counted, 0, 'after a restart, a second read of the views counts none');
is( $node->safe_psql('postgres', q{EXPLAIN SELECT * FROM u}) =~ /rows=(\d+)/
	? $1 : '',
	'1000', 'u: row estimate after a restart');
($out, $counted, $evicted) = debug_run(
	q{SELECT count(*) FILTER (WHERE state = 'full') FROM spindle.spindles WHERE relation = 'u'::regclass;
INSERT INTO u VALUES (1001);
SELECT spindle.drop_spindles('u');});
like($out, qr/^100\n/, 'u: 100 full spindles after a restart');
is($counted, 0, 'u: none counted again (views, insert, drop_spindles())');
if ($open_before ne '')
{
	my ($no, $events) = split /:/, $open_before;
	$node->safe_psql('postgres', q{INSERT INTO t VALUES (100002, 'after restart')});
	is( $node->safe_psql(
			'postgres', qq{
SELECT state || ':' || events FROM spindle.spindles
 WHERE relation = 't'::regclass AND spindle_no = $no}),
		($events + 1 == $cap ? 'full' : 'open') . ':' . ($events + 1),
		'the open spindle takes the next event after a restart');
}
$node->safe_psql('postgres',
	q{INSERT INTO t SELECT 500000 + g, 'r' FROM generate_series(1, 35) g});
consistent('after a restart');
ok(estimate() >= $est_before + 36 - $cap && estimate() <= $est_before + 36 + 2 * $cap,
	'row estimate after a restart follows the events');

# 6. TRUNCATE rolled back: the spindles it made while it ran are gone, the
# old open spindle is open again and takes the next event.
$open_before = $node->safe_psql('postgres',
	q{SELECT spindle_no || ':' || events FROM spindle.spindles
	   WHERE relation = 't'::regclass AND state = 'open'});
$node->safe_psql('postgres',
	q{INSERT INTO t SELECT 600000 + g, 'x' FROM generate_series(1, 3) g})
  if $open_before eq '';
$open_before = $node->safe_psql('postgres',
	q{SELECT spindle_no || ':' || events FROM spindle.spindles
	   WHERE relation = 't'::regclass AND state = 'open'});
my ($open_no, $open_events) = split /:/, $open_before;
$node->safe_psql(
	'postgres', q{
BEGIN;
TRUNCATE t;
INSERT INTO t SELECT 700000 + g, 'in truncate' FROM generate_series(1, 35) g;
ROLLBACK;
});
$node->safe_psql('postgres', q{INSERT INTO t VALUES (100003, 'after rollback')});
is( $node->safe_psql(
		'postgres', qq{
SELECT events FROM spindle.spindles
 WHERE relation = 't'::regclass AND spindle_no = $open_no}),
	$open_events + 1,
	'after a rolled-back TRUNCATE, the open spindle takes the next event');
consistent('after a rolled-back TRUNCATE');

# 7. TRUNCATE committed: new spindles, new full mark; estimate follows.
$node->safe_psql(
	'postgres', q{
TRUNCATE t;
INSERT INTO t SELECT g, 'after truncate' FROM generate_series(1, 25) g;
});
consistent('after TRUNCATE');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FILTER (WHERE state = 'full') || ':' || count(*) FILTER (WHERE state = 'open')
  FROM spindle.spindles WHERE relation = 't'::regclass}),
	'2:1',
	'after TRUNCATE: two full spindles and an open one');
is(estimate(), 25, 'row estimate after TRUNCATE');

# 8. A counter rebuilt from disk for a large spindle holding few events
# reads the slot map's directory once per run of virtual map pages without
# a page, not once per such page (turn 4, session 12: a spindle of 400 000
# slots, about 294 map pages, of which one holds entries, cost each
# rebuild about 590 buffer reads, at every insert or dequeue whose
# counter had been evicted).  After a restart, the first insert rebuilds
# the counter: it takes the next slot, and reads few buffers doing so.
$node->safe_psql(
	'postgres', q{
CREATE TABLE big (id int) USING spindle WITH (events_per_spindle = 400000);
INSERT INTO big VALUES (1), (2);
});
$node->restart;
# Buffers read by an insert into big in a new session (its own catalog
# and relcache reads are about 150 in each); the first after the restart
# also rebuilds the counter.
sub insert_buffers
{
	my ($id) = @_;
	my $plan = $node->safe_psql('postgres',
		qq{EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF)
		   INSERT INTO big VALUES ($id)});
	note "insert $id into a spindle of 400 000 slots: $plan";
	return -1 unless $plan =~ /^\s*Insert on big.*?\n\s*Buffers: shared([^\n]*)/s;
	my $b = $1;
	my $n = 0;
	$n += $1 if $b =~ /hit=(\d+)/;
	$n += $1 if $b =~ /read=(\d+)/;
	return $n;
}
my $first = insert_buffers(3);
my $second = insert_buffers(4);
cmp_ok($second, '>', 0, 'big: the insert\'s buffers are reported');
cmp_ok($first - $second, '<', 60,
	"big: the counter rebuilt from disk costs few buffer reads ($first against $second)"
);
is( $node->safe_psql(
		'postgres', q{
SELECT events || ':' || (SELECT count(DISTINCT ctid) || ':' || string_agg(id::text, ',' ORDER BY id) FROM big)
  FROM spindle.spindles WHERE relation = 'big'::regclass}),
	'4:4:1,2,3,4', 'big: the inserts after the restart took the next slots');

$node->stop;
done_testing();
