# A large spindle table: more than 1.2 GB of spindle pages and more than
# 2 000 spindles, past the old limits (1 024 non-empty spindles, 1 GB of
# spindle pages) of the chunk map that virtual slots replaced.
#
# About 1 kB rows that are stored inline and uncompressed (32 md5 hashes of
# distinct strings), events_per_spindle = 500.  Then: count(*) and
# count(DISTINCT ctid) are the rows inserted; index scans and bitmap scans
# (exact and lossy) find the first, the last and rows in between, each with
# its own pad; ANALYZE works and gives reltuples and a row estimate close to
# the truth.  The first 60% of the ids are deleted: drop_spindles() drops
# every full, purged spindle and the remaining rows are all still found;
# VACUUM retires the index entries of the dropped spindles, new rows take
# the TIDs those spindles had, and no scan returns a wrong row for any id.
# A streaming standby agrees throughout.
#
# Runtime about 2-2.5 minutes on 2 cores, 1.4 GB of spindle pages on each
# node plus as much WAL (timings are printed with note()).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;
use Time::HiRes qw(gettimeofday tv_interval usleep);

my $t_test = [gettimeofday];

my $batch = 250_000;    # rows per INSERT ... SELECT
my $max_batches = 8;
my $capacity = 500;     # events_per_spindle
my $min_bytes = int(1.2 * 1024 * 1024 * 1024);    # 1.2 GB of spindle pages
my $min_spindles = 2000;

# Run $sql on $node, note how long it took, return its output.
sub timed
{
	my ($node, $what, $sql) = @_;
	my $t0 = [gettimeofday];
	my $res = $node->safe_psql('postgres', $sql);
	note(sprintf('%s: %.1f s', $what, tv_interval($t0)));
	return $res;
}

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle'
# With Cluster.pm's max_connections = 10, the lock table holds about
# 64 * (10 + 3 + 1 + 16 + 10) = 2 560 locks (plus slack).  Deliberately
# left alone: dropping the spindles of a purge must work with the lock
# table as configured, however many spindles became droppable at once.
max_worker_processes = 16
spindle.enable_worker = off
fsync = off
shared_buffers = 128MB
# no checkpoint while the test runs: no full-page images, no WAL recycling
max_wal_size = 8GB
checkpoint_timeout = 1h
wal_compression = off
# Cluster.pm sets it for pg_rewind; with it, hint bits set by the first
# scan of each page would be WAL-logged
wal_log_hints = off
log_statement = none
});
$primary->start;
$primary->safe_psql(
	'postgres', qq{
CREATE EXTENSION spindle;
-- 32 md5 hashes of distinct strings: 1024 hex digits pglz cannot compress
CREATE FUNCTION pad_of(g bigint) RETURNS text LANGUAGE sql IMMUTABLE
  AS \$\$ SELECT @{[ join(' || ', map { "md5(g::text || ':$_')" } 1 .. 32) ]} \$\$;
CREATE TABLE big (id bigint, pad text) USING spindle
  WITH (events_per_spindle = $capacity);
CREATE INDEX big_id ON big (id);
});
$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;

# ---------------------------------------------------------------- load
my $spindles_sql = q{
SELECT count(*) FILTER (WHERE pg_relation_size(segment) > 0) || ':' ||
       coalesce(sum(pg_relation_size(segment)), 0)
  FROM spindle.spindle_catalog
 WHERE relation = 'big'::regclass AND dropped_at IS NULL};
my ($nrows, $nspindles, $bytes) = (0, 0, 0);
for my $b (1 .. $max_batches)
{
	my ($from, $to) = ($nrows + 1, $nrows + $batch);
	timed($primary, "INSERT batch $b (ids $from..$to)",
		"INSERT INTO big SELECT g, pad_of(g) FROM generate_series($from, $to) g"
	);
	$nrows = $to;
	($nspindles, $bytes) = split /:/,
	  $primary->safe_psql('postgres', $spindles_sql);
	note(sprintf('%d rows: %d non-empty spindles, %.3f GB of spindle pages',
		$nrows, $nspindles, $bytes / 1024**3));
	last if $bytes > $min_bytes && $nspindles > $min_spindles;
}
cmp_ok($bytes, '>', $min_bytes, 'spindle pages pass 1.2 GB');
cmp_ok($nspindles, '>', $min_spindles, 'more than 2000 non-empty spindles');
my $last = $nrows;

is( $primary->safe_psql(
		'postgres', q{
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM big
 WHERE id <= 1000 AND pg_column_compression(pad) IS NULL
   AND pg_column_size(pad) = 1028 AND pad = pad_of(id)}),
	'1000',
	'pads are stored inline and uncompressed (1024 bytes + header)');

# ---------------------------------------------------------------- scans
my $index =
  'SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;';
my $bitmap =
  'SET enable_seqscan = off; SET enable_indexscan = off; SET enable_indexonlyscan = off;';
my $lossy = "$bitmap SET work_mem = '64kB';";

# Does $sql under $settings run with a plan matching $re?
sub plan_is
{
	my ($node, $settings, $sql, $re, $name) = @_;
	my $plan =
	  $node->safe_psql('postgres', "$settings EXPLAIN (COSTS OFF) $sql");
	like($plan, $re, "plan: $name") or diag($plan);
	return;
}

# ids to look up: first and last, the edges of spindles and batches, and
# some in between
my @probe_ids = (1, 2, 499, 500, 501, 1000, 1001);
for (my $i = $batch; $i < $last; $i += $batch)
{
	push @probe_ids, $i, $i + 1;
}
push @probe_ids, 123_457, 777_777, 1_000_003, $last - 500, $last - 1, $last;
@probe_ids = sort { $a <=> $b } grep { $_ >= 1 && $_ <= $last } @probe_ids;
my %seen;
@probe_ids = grep { !$seen{$_}++ } @probe_ids;

# The rows of the given ids as "id:pad is right", in id order.
sub probe_sql
{
	my (@ids) = @_;
	my $list = join(',', @ids);
	return qq{SELECT string_agg(id || ':' || (pad = pad_of(id)), ',' ORDER BY id)
  FROM big WHERE id = ANY ('{$list}'::bigint[])};
}

sub expected_probe
{
	return join(',', map { "$_:true" } @_);
}

# Every scan kind finds exactly the given live ids with their own pads.
sub check_probes
{
	my ($node, $what, @ids) = @_;
	my $sql = probe_sql(@ids);
	my $expected = expected_probe(@ids);
	my $t0 = [gettimeofday];
	plan_is($node, $index, $sql, qr/Index Scan using big_id/,
		"$what: index scan");
	is($node->safe_psql('postgres', "$index $sql"),
		$expected, "$what: index scan finds first, last and middle rows");
	plan_is($node, $bitmap, $sql, qr/Bitmap Heap Scan on big/,
		"$what: bitmap scan");
	is($node->safe_psql('postgres', "$bitmap $sql"),
		$expected, "$what: bitmap scan finds first, last and middle rows");
	note(sprintf('%s: probes: %.1f s', $what, tv_interval($t0)));
	return;
}

my $count = timed($primary, 'count(*)', 'SELECT count(*) FROM big');
is($count, $nrows, 'count(*) is the rows inserted');
is(timed($primary, 'count(DISTINCT ctid)', 'SELECT count(DISTINCT ctid) FROM big'),
	$nrows, 'every row has its own ctid');
check_probes($primary, 'after load', @probe_ids);

# whole-table scans by index and through a lossy bitmap: every row once,
# each with its own pad (first and last hash checked)
my $whole_sql = q{
SELECT count(*) || ':' || count(DISTINCT id) || ':' || sum(id) || ':' ||
       count(*) FILTER (WHERE left(pad, 32) <> md5(id || ':1')
                           OR right(pad, 32) <> md5(id || ':32'))
  FROM big WHERE id > 0};
my $sum = $nrows * ($nrows + 1) / 2;
is(timed($primary, 'whole index scan', "$index $whole_sql"),
	"$nrows:$nrows:$sum:0", 'an index scan over all ids finds every row once');
like(
	$primary->safe_psql(
		'postgres', "$lossy EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) SELECT count(*) FROM big WHERE id > 0"),
	qr/Heap Blocks: (exact=\d+ )?lossy=\d+/,
	'with work_mem = 64kB the bitmap becomes lossy');
is(timed($primary, 'whole lossy bitmap scan', "$lossy $whole_sql"),
	"$nrows:$nrows:$sum:0",
	'a lossy bitmap scan over all ids finds every row once');

# ANALYZE and the planner's estimate
timed($primary, 'ANALYZE', 'ANALYZE big');
my $reltuples = $primary->safe_psql('postgres',
	q{SELECT reltuples::bigint FROM pg_class WHERE oid = 'big'::regclass});
note("reltuples = $reltuples, truth = $nrows");
ok(abs($reltuples - $nrows) <= 0.2 * $nrows,
	'ANALYZE: reltuples within 20% of the rows');
is( $primary->safe_psql(
		'postgres', q{SELECT count(*) FROM pg_stats WHERE tablename = 'big' AND attname IN ('id', 'pad')}),
	'2',
	'ANALYZE: statistics for both columns');

# the row estimate of EXPLAIN SELECT * FROM big
sub estimate
{
	my $plan = $primary->safe_psql('postgres', 'EXPLAIN SELECT * FROM big');
	my ($rows) = $plan =~ /rows=(\d+)/;
	return $rows;
}
my $est = estimate();
note("EXPLAIN estimate = $est, truth = $nrows");
ok($est >= $nrows / 2 && $est <= $nrows * 2,
	'EXPLAIN: row estimate within 2x of the rows');

# ---------------------------------------------------------------- standby
# The same answer from the primary and, once caught up, from the standby.
sub same_on_standby
{
	my ($sql, $name) = @_;
	my $p = $primary->safe_psql('postgres', $sql);
	my $s = $standby->safe_psql('postgres', $sql);
	is($s, $p, "standby: $name");
	return;
}

sub compare_standby
{
	my ($what, @ids) = @_;
	my $t0 = [gettimeofday];
	$primary->wait_for_catchup($standby);
	note(sprintf('%s: standby catch-up: %.1f s', $what, tv_interval($t0)));
	$t0 = [gettimeofday];
	same_on_standby('SELECT count(*) || \':\' || sum(id) FROM big',
		"$what: same count and sum(id)");
	same_on_standby("$index " . probe_sql(@ids),
		"$what: same first, last and middle rows by index scan");
	same_on_standby("$bitmap " . probe_sql(@ids),
		"$what: same first, last and middle rows by bitmap scan");
	same_on_standby(
		q{SELECT count(*) || ':' || min(spindle_no) || ':' || max(spindle_no)
		    FROM spindle.spindle_catalog WHERE relation = 'big'::regclass AND dropped_at IS NULL},
		"$what: same spindles");
	note(sprintf('%s: standby checks: %.1f s', $what, tv_interval($t0)));
	return;
}
compare_standby('after load', @probe_ids);
is($standby->safe_psql('postgres', probe_sql(1, $last)),
	"1:true,$last:true", 'standby: first and last row by default plan');

# ---------------------------------------------------------------- purge, drop
my $cut = int($nrows * 0.6);    # ids 1..$cut deleted
my $full_spindles = int($cut / $capacity);    # spindle n holds ids 500n-499..500n
timed($primary, "DELETE ids 1..$cut", "DELETE FROM big WHERE id <= $cut");
my $droppable = timed(
	$primary, 'spindle.spindles (count droppable)', q{
SELECT count(*) FROM spindle.spindles
 WHERE relation = 'big'::regclass AND state = 'full' AND events = purged_events});
is($droppable, $full_spindles,
	"$full_spindles full spindles hold only deleted rows");

my ($before_spindles) = split /:/, $primary->safe_psql('postgres', $spindles_sql);
# Each call drops a bounded number of spindles (its transaction holds
# their locks until it commits); call it until it has dropped them all.
my ($dropped, $drop_err, $calls) = (0, '', 0);
my $t_drop = [gettimeofday];
for (1 .. 400)
{
	my $got = '';
	# the xmin horizon may lag behind the DELETE that just committed
	my $rc = $primary->psql(
		'postgres', q{SELECT spindle.drop_spindles('big')},
		stdout => \$got,
		stderr => \$drop_err);
	last if $rc != 0;
	$calls++;
	$dropped += $got;
	last if $dropped >= $full_spindles;
	usleep(100_000) if $got eq '0';
}
note(sprintf('drop_spindles: %.1f s, %d calls', tv_interval($t_drop), $calls));
is($drop_err, '', 'drop_spindles succeeds');
is($dropped, $full_spindles, 'drop_spindles drops every full purged spindle');
ok($calls > 1, 'one call drops a bounded number of spindles');
if ($drop_err ne '')
{
	# everything below depends on the drop
	$standby->stop;
	$primary->stop;
	done_testing();
	exit;
}
my ($after_spindles, $after_bytes) = split /:/,
  $primary->safe_psql('postgres', $spindles_sql);
is($after_spindles, $before_spindles - $full_spindles,
	'the dropped spindles are gone from the catalog');
note(sprintf('after the drop: %d non-empty spindles, %.3f GB',
	$after_spindles, $after_bytes / 1024**3));
is( $primary->safe_psql(
		'postgres', q{
SELECT count(*) FROM spindle.spindles
 WHERE relation = 'big'::regclass AND state = 'full' AND events = purged_events}),
	'0',
	'no full purged spindle is left');

my $remaining = $nrows - $cut;
is($primary->safe_psql('postgres', 'SELECT count(*) FROM big'),
	$remaining, 'count(*) after the drop: every remaining row is there');
my %left = map { $_ => 1 } ($cut + 1, $cut + 2, grep { $_ > $cut } @probe_ids);
my @left_ids = sort { $a <=> $b } keys %left;
check_probes($primary, 'after drop', @left_ids);
my $sum_left = $sum - $cut * ($cut + 1) / 2;
is(timed($primary, 'whole index scan after drop', "$index $whole_sql"),
	"$remaining:$remaining:$sum_left:0",
	'after the drop an index scan finds every remaining row once');
is( $primary->safe_psql('postgres',
		"$bitmap SELECT count(*) FROM big WHERE id <= $cut"),
	'0',
	'after the drop a bitmap scan finds no deleted id');

# ---------------------------------------------------------------- TID reuse
timed($primary, 'VACUUM big', 'VACUUM big');
is( $primary->safe_psql(
		'postgres', q{
SELECT count(*) FROM spindle.spindle_catalog
 WHERE relation = 'big'::regclass AND dropped_at IS NOT NULL}),
	'0',
	'VACUUM retired the index entries of every dropped spindle');

my $max_no = $primary->safe_psql('postgres',
	q{SELECT max(spindle_no) FROM spindle.spindle_catalog WHERE relation = 'big'::regclass});
# spindles made ahead and still empty are filled first, with their own
# (high) slot ranges
my $empty = $primary->safe_psql(
	'postgres', q{
SELECT count(*) FROM spindle.spindle_catalog
 WHERE relation = 'big'::regclass AND pg_relation_size(segment) = 0});
note("$empty empty spindles before the new rows");
my $new_from = 2_000_001;
my $new_n = 100_000;
my $new_to = $new_from + $new_n - 1;
timed($primary, "INSERT ids $new_from..$new_to",
	"INSERT INTO big SELECT g, pad_of(g) FROM generate_series($new_from, $new_to) g"
);

# past the empty spindles, the new rows must have taken TIDs that dropped
# spindles had: the freed slot ranges start at 0 and first fit hands out
# the lowest ones
my $freed_slots = $full_spindles * $capacity;
is( $primary->safe_psql(
		'postgres', qq{
SELECT count(*) FROM big
 WHERE id >= $new_from
   AND (ctid::text::point)[0] * 291 + (ctid::text::point)[1] - 1 < $freed_slots}),
	$new_n - $empty * $capacity,
	'the new rows took TIDs of dropped spindles');
cmp_ok(
	$primary->safe_psql(
		'postgres', qq{
SELECT max(spindle_no) FROM spindle.spindle_catalog
 WHERE relation = 'big'::regclass AND vbase < $freed_slots}),
	'>', $max_no, 'new spindles were given freed slot ranges');

my $total = $remaining + $new_n;
my $sum_total = $sum_left + ($new_from + $new_to) * $new_n / 2;
is($primary->safe_psql('postgres', 'SELECT count(*) FROM big'),
	$total, 'count(*) after the new rows');
is(timed($primary, 'whole index scan after reuse', "$index $whole_sql"),
	"$total:$total:$sum_total:0",
	'after TID reuse an index scan finds every row once, each with its own pad');
is(timed($primary, 'whole lossy bitmap scan after reuse', "$lossy $whole_sql"),
	"$total:$total:$sum_total:0",
	'after TID reuse a lossy bitmap scan finds every row once');
for my $s ([ 'index', $index ], [ 'bitmap', $bitmap ])
{
	is( $primary->safe_psql('postgres',
			"$s->[1] SELECT count(*) FROM big WHERE id <= $cut"),
		'0',
		"after TID reuse an $s->[0] scan returns no row for a deleted id");
	is( $primary->safe_psql('postgres',
			"$s->[1] SELECT count(*) FROM big WHERE id BETWEEN 1 AND $cut OR id = $new_from"),
		'1',
		"after TID reuse an $s->[0] scan of deleted ids and one new id returns one row");
}
my @final_ids = (@left_ids, $new_from, $new_from + 1, $new_from + 4999,
	$new_from + 5000, $new_to - 1, $new_to);
check_probes($primary, 'after reuse', @final_ids);
is( $primary->safe_psql(
		'postgres', "$index " . probe_sql(1, 2, $cut - 1, $cut)),
	'', 'index scan: deleted ids stay gone');

$est = estimate();
note("EXPLAIN estimate after reuse = $est, truth = $total");
ok($est >= $total / 2 && $est <= $total * 2,
	'EXPLAIN after drop and reuse: row estimate within 2x of the rows');

compare_standby('after drop and reuse', @final_ids);
is( $standby->safe_psql('postgres',
		"$index SELECT count(*) FROM big WHERE id <= $cut"),
	'0', 'standby: an index scan returns no row for a deleted id');

$standby->stop;
$primary->stop;
note(sprintf('total: %.1f s', tv_interval($t_test)));
done_testing();
