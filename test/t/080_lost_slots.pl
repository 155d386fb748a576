# Lost slots are buried as tombstones (review r2, finding 2).  An insert
# that fails after taking its slot (here "row is too big": the payload
# column is SET STORAGE PLAIN, which holds for the spindles made after it,
# and the row 12 kB) used to pin its spindle's slot counter until the
# spindle got another insert or was dropped; with spindle.max_open_spindles
# counters (64, the minimum) pinned by idle tables, every other insert of
# the server failed with 53400.  The worker now writes the lost slots into
# the slot map as tombstones, so the counters can be evicted again, those
# of full spindles too.
#
# 66 tables (t1..t66) lose the last slot of their second spindle, which is
# then full; 66 more (t67..t132) lose a slot of their open second spindle.
# Each half alone pins more counters than there are: every table still
# takes inserts once the worker has run, and so do 70 fresh tables; the
# tombstones are in the map pages on disk; the full spindles whose last
# slot was lost are dropped once their events are deleted; after a crash
# the first insert into a table whose last used slot was buried goes past
# it (k 2, not k 1 again), and a queue's next enqueue gets msg_id 8, not
# its lost 7 again, while a consumer passes the buried slot and gets every
# event; no event is lost; the standby (with
# wal_consistency_checking = 'all' on the primary, it compares each page
# it replays) has the same events and tombstones; spindle.verify() finds
# nothing wrong on either.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(gettimeofday tv_interval usleep);

use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my $n = 66;                        # tables of each kind
my $all = 2 * $n;

my $node = PostgreSQL::Test::Cluster->new('lost_slots');
$node->init(allows_streaming => 1);
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle'
max_worker_processes = 16
spindle.max_open_spindles = 64
spindle.enable_worker = on
spindle.naptime = 100ms
autovacuum = off
wal_keep_size = '256MB'
wal_consistency_checking = 'all'
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION spindle; CREATE EXTENSION pg_walinspect');
$node->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('lost_slots_standby');
$standby->init_from_backup($node, 'b', has_streaming => 1);
$standby->start;

# Run $sql until it succeeds, for up to $limit seconds; its last error, or
# '' once it succeeded.  After one failure, every later call tries once (a
# broken build fails fast instead of waiting on every table).
my $gave_up = 0;

sub retry
{
	my ($sql, $limit) = @_;
	$limit = 0 if $gave_up;
	my $t0 = [gettimeofday];
	while (1)
	{
		my ($ret, $out, $err) = $node->psql('postgres', $sql);
		return '' if $ret == 0;
		if (tv_interval($t0) > $limit)
		{
			$gave_up = 1;
			return $err;
		}
		usleep(100_000);
	}
}

# SQL: does the first map page of table t<i> hold a tombstone on disk (an
# entry of six 0xff bytes: InvalidBlockNumber, offset 0xffff)?  The caller
# runs a checkpoint (a restartpoint on a standby) first.
# (anywhere past the metapage: the map page's block is the directory's)
my $tomb_sql = q{position('\\xffffffffffff'::bytea IN
  substr(pg_read_binary_file(pg_relation_filepath('t' || i)), 8193)) > 0};

sub has_tombstone
{
	my ($n, $t) = @_;
	$t =~ s/^t//;
	return $n->safe_psql('postgres',
		"CHECKPOINT; SELECT $tomb_sql FROM (SELECT $t AS i) x");
}

# Make table t$i lose a slot: $full says whether that fills its second
# spindle.  Returns the error of a good insert that never succeeded, or ''.
my $failed = 0;

sub lose_slot
{
	my ($i, $full) = @_;
	my $cap = $full ? 2 : 3;
	my $first = $full ? '(1), (2)' : '(1), (2), (3)';
	$node->safe_psql('postgres', qq{
CREATE TABLE t$i (id int, payload text) USING spindle WITH (events_per_spindle = $cap);
ALTER TABLE t$i ALTER COLUMN payload SET STORAGE PLAIN});
	# the first spindle filled, then one good event into the second
	my $err = retry("INSERT INTO t$i (id) VALUES $first", 30)
	  || retry("INSERT INTO t$i VALUES (4, 'good')", 30);
	my ($ret, $out, $e2) = $node->psql('postgres',
		"INSERT INTO t$i VALUES (5, repeat('x', 12000))");
	$failed++ if $ret != 0;
	note "t$i: $e2" if $ret != 0 && $e2 !~ /row is too big/;
	return $err;
}

# ---- 66 full spindles lose their last slot -------------------------------------
my $stuck = '';
for my $i (1 .. $n)
{
	my $err = lose_slot($i, 1);
	$stuck = "t$i: $err" if $err ne '' && $stuck eq '';
}
is($stuck, '',
	'every table takes inserts while full spindles whose last slot was lost pin counters');

# their drop, once their events are deleted
my $full_tables = join(', ', map { "'t$_'::regclass" } 1 .. $n);
$node->safe_psql('postgres', qq{
CREATE TABLE lost_spindles AS
SELECT relation, segment FROM spindle.spindle_catalog
 WHERE relation IN ($full_tables) AND spindle_no = 2});
is($node->safe_psql('postgres', 'SELECT count(*) FROM lost_spindles'),
	$n, 'the full spindles whose last slot was lost');
$node->safe_psql('postgres',
	join('', map { "DELETE FROM t$_ WHERE id < 5;\n" } 1 .. $n));
ok( defined wait_for(
		$node, 'postgres', q{
SELECT count(*) = 0 FROM lost_spindles f JOIN spindle.spindle_catalog c USING (relation, segment)
 WHERE c.dropped_at IS NULL}, 60),
	'the worker drops the full spindles whose last slot was lost');

# ---- 66 open spindles lose a slot ----------------------------------------------
my $start_lsn = $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
$stuck = '';
for my $i ($n + 1 .. $all)
{
	my $err = lose_slot($i, 0);
	$stuck = "t$i: $err" if $err ne '' && $stuck eq '';
}
is($stuck, '',
	'every table takes inserts while open spindles that lost their last slot pin counters');
is($failed, $all, 'the oversized row failed in every table');

ok( defined wait_for(
		$node, 'postgres', qq{
CHECKPOINT;
SELECT bool_and($tomb_sql) FROM generate_series($n + 1, $all) i}, 60, 500),
	'the worker buried the lost slot of every open spindle');
# (a record that carries the map page's image instead of its entries, the
# first change of the page after a checkpoint, does not count them)
is( $node->safe_psql('postgres', qq{
SELECT sum(split_part(description, 'tombstones: ', 2)::int) BETWEEN 1 AND $n
  FROM pg_get_wal_records_info('$start_lsn', pg_current_wal_flush_lsn())
 WHERE resource_manager = 'spindle' AND description LIKE '%tombstones: %'}),
	't', 'the WAL records of the slot map name the tombstones, no more than were lost');

# fresh tables, each needing a counter of its own
my $fresh = '';
for my $i (1 .. 70)
{
	$node->safe_psql('postgres',
		"CREATE TABLE f$i (id int, payload text) USING spindle");
	my $err = retry("INSERT INTO f$i VALUES ($i, 'fresh')", 30);
	$fresh = "f$i: $err" if $err ne '' && $fresh eq '';
}
is($fresh, '', 'inserts into 70 fresh tables work');

# a queue loses msg_id 7 (the first spindle holds 1 .. 5)
$node->safe_psql('postgres', q{
SELECT spindle.create_queue('lq', events_per_spindle => 5);
ALTER TABLE spindle_q.lq ALTER COLUMN payload SET STORAGE PLAIN;
SELECT spindle.enqueue_batch('lq', ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 5) g));
SELECT spindle.enqueue('lq', '{"n": 6}');});
my ($qret) = $node->psql('postgres',
	q{SELECT spindle.enqueue('lq', jsonb_build_object('n', 7, 'pad', repeat('x', 12000)))});
isnt($qret, 0, 'an enqueue of a row too big fails after taking its msg_id');
ok( defined wait_for(
		$node, 'postgres', q{
CHECKPOINT;
SELECT position('\xffffffffffff'::bytea IN
  substr(pg_read_binary_file(pg_relation_filepath('spindle_q.lq')), 8193)) > 0}, 60, 500),
	'the worker buried the lost msg_id');

# ---- a crash: the counters come back from disk, tombstones included ---------
$node->stop('immediate');
$node->start;
is($node->safe_psql('postgres', q{SELECT spindle.enqueue('lq', '{"n": 8}')}),
	'8', 'after a crash the next enqueue gets msg_id 8, not the lost 7 again');
is( $node->safe_psql('postgres', q{
SELECT string_agg(msg_id || ':' || (payload->>'n'), ',' ORDER BY msg_id) FROM spindle.dequeue('lq', 10)}),
	'1:1,2:2,3:3,4:4,5:5,6:6,8:8',
	'a consumer passes the buried slot and gets every event');
my $after = '';
my $slots = '';
for my $i (1 .. $all)
{
	my $err = retry("INSERT INTO t$i VALUES (6, 'after')", 30);
	$after = "t$i: $err" if $err ne '' && $after eq '';
	next if $i <= $n;
	# k of the new event in spindle 2: its virtual slot less the vbase
	$slots .= ' ' . $node->safe_psql('postgres', qq{
SELECT (e.ctid::text::point)[0] * 291 + (e.ctid::text::point)[1] - 1 - c.vbase
  FROM t$i e, spindle.spindle_catalog c
 WHERE id = 6 AND c.relation = 't$i'::regclass AND c.spindle_no = 2});
}
is($after, '', 'after a crash every table takes inserts');
is($slots, ' 2' x $n,
	'an open spindle whose slot 1 was buried gives its next event slot 2 (none handed out twice)');

my $rows = 'SELECT string_agg(i || \':\' || c, \' \' ORDER BY i) FROM ('
  . join(' UNION ALL ',
	map { "SELECT $_ AS i, string_agg(id::text, ',' ORDER BY id) AS c FROM t$_" }
	  1 .. $all)
  . ') x';
my $expect = join(' ', map { $_ <= $n ? "$_:6" : "$_:1,2,3,4,6" } 1 .. $all);
is($node->safe_psql('postgres', $rows), $expect,
	'every table holds its events, none lost, the oversized one never');

my $bad = '';
for my $i (1 .. $all)
{
	my $v = $node->safe_psql('postgres',
		"SELECT string_agg(v, '; ') FROM spindle.verify('t$i') v");
	$bad .= "t$i: $v\n" if $v ne '';
}
is($bad, '', 'spindle.verify() finds nothing wrong in any table');

# ---- the standby saw the same ----------------------------------------------
$node->safe_psql('postgres', 'CHECKPOINT');
$node->wait_for_catchup($standby);
is($standby->safe_psql('postgres', $rows), $expect,
	'the standby returns the same events');
is(has_tombstone($standby, 't' . ($n + 2)), 't', 'the standby has the tombstones');
$bad = '';
for my $i (1 .. $all)
{
	my ($ret, $v, $err) = $standby->psql('postgres',
		"SELECT string_agg(v, '; ') FROM spindle.verify('t$i') v");
	$bad .= "t$i: " . ($ret ? $err : $v) . "\n" if $ret != 0 || $v ne '';
}
is($bad, '', 'spindle.verify() finds nothing wrong on the standby');
my $log = slurp_file($standby->logfile);
unlike($log, qr/inconsistent page found/,
	'wal_consistency_checking: every replayed page matched');

$standby->stop;
$node->stop;
done_testing();
