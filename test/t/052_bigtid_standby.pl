# TIDs past the old cap of 38 141 952 virtual slots (block 131072) on a
# primary and its streaming standby: the slot map's far pages (placed
# through its directory, replayed from the WAL on the standby) resolve
# there too, and
# every kind of scan -- sequential, B-tree index and index-only, bitmap
# heap (exact and lossy, with prefetching asked for), hash, GIN, TID,
# ctid ranges -- gives the same answer on both, before and after UPDATE
# and DELETE, and ANALYZE runs.  spindle.test_vslot_base places the ranges
# from slot 40 000 000 on without inserting that many events.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SpindleTest;

my ($primary, $standby) = standby_pair(
	'', q{
spindle.enable_worker = off
effective_io_concurrency = 16
maintenance_io_concurrency = 16
max_parallel_workers_per_gather = 0
});

$primary->safe_psql(
	'postgres', q{
SET spindle.test_vslot_base = 40000000;
CREATE TABLE far (id int, tag int, arr int[]) USING spindle
    WITH (events_per_spindle = 50000);
CREATE INDEX far_id ON far (id);
CREATE INDEX far_tag ON far USING hash (tag);
CREATE INDEX far_arr ON far USING gin (arr);
INSERT INTO far SELECT i, i % 291, ARRAY[i % 7, i % 1000]
  FROM generate_series(1, 200000) i;
});
$primary->wait_for_catchup($standby);

is( $standby->safe_psql(
		'postgres',
		q{SELECT min((ctid::text::point)[0]) > 131072 FROM far}),
	't',
	'the standby sees every TID past block 131072');

# Each check: the plan's settings, the query, its name.
my @checks = (
	[ 'enable_indexscan = off, enable_bitmapscan = off',
		'SELECT count(*), sum(id) FROM far WHERE id BETWEEN 100 AND 150099',
		'seq scan' ],
	[ 'enable_seqscan = off, enable_bitmapscan = off, enable_indexonlyscan = off',
		'SELECT count(*), sum(id) FROM far WHERE id BETWEEN 100 AND 150099',
		'B-tree index scan' ],
	[ 'enable_seqscan = off, enable_bitmapscan = off',
		'SELECT count(id) FROM far WHERE id BETWEEN 100 AND 150099',
		'index-only scan' ],
	[ 'enable_seqscan = off, enable_indexscan = off',
		'SELECT count(*), sum(id) FROM far WHERE id BETWEEN 100 AND 150099',
		'bitmap heap scan' ],
	[ q{enable_seqscan = off, enable_indexscan = off, work_mem = '64kB'},
		'SELECT count(*), sum(id) FROM far WHERE tag = 5',
		'lossy bitmap heap scan (hash index)' ],
	[ 'enable_seqscan = off, enable_bitmapscan = off',
		'SELECT count(*), sum(id) FROM far WHERE tag = 5',
		'hash index scan' ],
	[ 'enable_seqscan = off, enable_indexscan = off',
		'SELECT count(*), sum(id) FROM far WHERE arr @> ARRAY[3, 500]',
		'GIN bitmap scan' ],
	[ 'enable_seqscan = off',
		q{SELECT count(*), sum(id) FROM far
		   WHERE ctid = ANY (ARRAY['(137457,14)', '(138000,1)', '(138000,2)']::tid[])},
		'TID scan' ],
	[ '',
		q{SELECT count(*), sum(id) FROM far
		   WHERE ctid >= '(137500,0)' AND ctid < '(137510,0)'},
		'ctid range' ],);

# The plan each check's settings give, so that the test says what it ran.
my %expect_node = (
	'seq scan'                            => 'Seq Scan',
	'B-tree index scan'                   => 'Index Scan using far_id',
	'index-only scan'                     => 'Index Only Scan',
	'bitmap heap scan'                    => 'Bitmap Heap Scan',
	'lossy bitmap heap scan (hash index)' => 'Bitmap Heap Scan',
	'hash index scan'                     => 'Index Scan using far_tag',
	'GIN bitmap scan'                     => 'Bitmap Heap Scan',
	'TID scan'                            => 'Tid Scan',
	'ctid range'                          => 'Seq Scan',);

sub run_check
{
	my ($node, $settings, $query) = @_;
	my $set = join '', map { "SET $_;" } grep { $_ ne '' }
	  split /,\s*/, $settings;
	my $plan = $node->safe_psql('postgres', "$set EXPLAIN (COSTS OFF) $query");
	my $result = $node->safe_psql('postgres', "$set $query");
	return ($plan, $result);
}

sub compare_all
{
	my ($what) = @_;
	my $seq_answer;
	$primary->wait_for_catchup($standby);
	for my $c (@checks)
	{
		my ($settings, $query, $name) = @$c;
		my ($pplan, $p) = run_check($primary, $settings, $query);
		my ($splan, $s) = run_check($standby, $settings, $query);
		like($splan, qr/\Q$expect_node{$name}\E/,
			"$what: $name is the plan on the standby");
		is($s, $p, "$what: $name agrees on the standby");
		isnt($p, '0|', "$what: $name finds rows") unless $name eq 'TID scan';
	}
	# the same count from every B-tree plan, on the standby
	my @answers = map { (run_check($standby, $_->[0], $_->[1]))[1] }
	  grep { $_->[1] =~ /BETWEEN 100 AND 150099/ && $_->[1] =~ /sum/ } @checks;
	is(scalar(keys %{ { map { $_ => 1 } @answers } }),
		1, "$what: seq, index and bitmap scans agree on the standby");
	return;
}

compare_all('after the inserts');

$primary->safe_psql(
	'postgres', q{
SET enable_seqscan = off;
UPDATE far SET tag = -1 WHERE id BETWEEN 1000 AND 1099;
DELETE FROM far WHERE id BETWEEN 2000 AND 2099;
UPDATE far SET tag = -2 WHERE ctid = '(138000,1)';
DELETE FROM far WHERE arr @> ARRAY[3, 501];
UPDATE far SET tag = 5 WHERE tag = 6;
});
compare_all('after UPDATE and DELETE');

# ANALYZE on the primary prefetches the blocks it samples (all of them
# here); its statistics reach the standby.
$primary->safe_psql('postgres', 'ANALYZE far');
$primary->wait_for_catchup($standby);
is( $standby->safe_psql(
		'postgres', q{SELECT reltuples FROM pg_class WHERE relname = 'far'}),
	$primary->safe_psql('postgres',
		q{SELECT count(*) FROM far}),
	'ANALYZE counted every row, and the standby has it');

# a restarted standby replays the far map pages from its own files
$standby->restart;
compare_all('after the standby restarted');

# a crashed primary replays the pages of its slot map and the far entries
$primary->stop('immediate');
$primary->start;
compare_all('after a crash of the primary');

# the slot map of a far range is its own pages and a directory path, with
# nothing below the range (no 230 MB hole), on the primary and the standby
my $path = $primary->safe_psql('postgres', q{SELECT pg_relation_filepath('far')});
my @st = stat($primary->data_dir . "/$path");
cmp_ok($st[12] * 512, '<', 10 * 1024 * 1024,
	'the slot map of the primary is a few pages on disk');
cmp_ok($st[7], '<', 10 * 1024 * 1024,
	'... and as many in its apparent size: no hole below the range');
@st = stat($standby->data_dir . "/$path");
cmp_ok($st[7], '<', 10 * 1024 * 1024,
	'... on the standby too');

# ANALYZE of a table whose ranges hold more than 131072 x 291 slots: each
# block it asks for stands for two (the spindles' ranges take 2 x 20 M
# slots, the second made ahead by the worker), and none is prefetched past
# the first segment.  Before, ANALYZE prefetched block 131072 and up.
$primary->safe_psql(
	'postgres', q{
CREATE TABLE wide (id int) USING spindle WITH (events_per_spindle = 20000000);
INSERT INTO wide SELECT generate_series(1, 200000);
ALTER SYSTEM SET spindle.enable_worker = on;
SELECT pg_reload_conf();
});
ok( $primary->poll_query_until(
		'postgres',
		q{SELECT count(*) = 2 FROM spindle.spindle_catalog
		   WHERE relation = 'wide'::regclass}),
	'the worker made a ready spindle for the wide table');
$primary->safe_psql(
	'postgres', q{
ALTER SYSTEM RESET spindle.enable_worker;
SELECT pg_reload_conf();
});
$primary->safe_psql('postgres', 'ANALYZE wide');
is( $primary->safe_psql(
		'postgres', q{SELECT relpages FROM pg_class WHERE relname = 'wide'}),
	'68729',
	'ANALYZE of 40 M slots samples 68729 blocks of two');
my $est = $primary->safe_psql('postgres',
	q{SELECT reltuples FROM pg_class WHERE relname = 'wide'});
ok($est > 100000 && $est < 300000,
	"ANALYZE's weighted estimate is near the 200000 rows ($est)");

done_testing();
