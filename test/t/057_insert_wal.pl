# WAL per single-event enqueue (issue 19, item 5): at most 250 bytes for
# the benchmark's 118-byte jsonb payload, one enqueue per transaction,
# counting everything the transactions write (pg_current_wal_insert_lsn
# before and after N enqueues, / N).  The event and its slot map entry go
# in one record of spindle's own (XLOG_SPINDLE_INSERT, eventinsert.c)
# instead of heap's INSERT plus XLOG_SPINDLE_MAP_SET.
#
# Its redo must do to the heap page exactly what heap's does: with
# wal_consistency_checking = 'all' on the primary, the standby and crash
# recovery compare every page each record replays (heap page and, when
# the record registers it, the map page) with the primary's image.  Both
# then return the primary's rows by sequential, index and TID scans
# (TID and index fetches go through the slot map), with checkpoints
# between and during the inserts, and spindle.verify() finds every map
# entry pointing at its event.  Last, a crash under two producers and a
# checkpoint every 100 ms (which makes some inserts write the map page's
# image in an XLOG_FPI right after their record): every committed event is
# there, through its map entry, once.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use IPC::Run;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

# bench/harness.py's PAYLOAD
my $payload =
  '{"type":"order","customer":12345,"note":"some payload text here","ts":"2026-11-30T11:00:00Z"}';
my $n = 500;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle'
spindle.enable_worker = off
autovacuum = off
wal_keep_size = '256MB'
# as in the benchmark's cluster (the test library turns it on)
wal_log_hints = off
});
$primary->start;
$primary->safe_psql(
	'postgres', q{
CREATE EXTENSION spindle;
CREATE EXTENSION pg_walinspect;
SELECT spindle.create_queue('w', events_per_spindle => 1000);
SELECT spindle.create_queue('m');
CREATE TABLE t (id int, body text, extra int) USING spindle
  WITH (events_per_spindle = 300);
CREATE INDEX t_id ON t (id);
});
$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;

# ---- WAL per enqueue ------------------------------------------------------
# one session, one enqueue per transaction, nothing else running
# (wal_consistency_checking is turned on after this)
my $one = "SELECT spindle.enqueue('m', '$payload');\n";
# (one session, whose statements all ran once before the measured run:
# their first catalog reads may prune catalog pages, with page images; the
# last line of the output, after the msg_ids of the enqueues)
my $out = (
	split /\n/,
	$primary->safe_psql(
		'postgres',
		($one x 50)
		  . "SELECT pg_current_wal_insert_lsn() AS start \\gset\n"
		  . "SELECT round(pg_wal_lsn_diff(pg_current_wal_insert_lsn(), :'start') / $n, 1)"
		  . " || ' ' || :'start' || ' ' || pg_current_wal_insert_lsn();\n"
		  . "SELECT pg_current_wal_insert_lsn() AS start \\gset\n"
		  . ($one x $n)
		  . "SELECT round(pg_wal_lsn_diff(pg_current_wal_insert_lsn(), :'start') / $n, 1)"
		  . " || ' ' || :'start' || ' ' || pg_current_wal_insert_lsn();"))[-1];
my ($wal, $lsn, $end) = split / /, $out;
$primary->poll_query_until('postgres',
	"SELECT pg_current_wal_flush_lsn() >= '$end'")
  or die "WAL not flushed";
my $records = $primary->safe_psql(
	'postgres', qq{
SELECT string_agg(format('%s/%s: %s x %s B', resource_manager, record_type, n, len), ', '
                  ORDER BY n DESC, resource_manager)
  FROM (SELECT resource_manager, record_type, count(*) AS n,
               round(avg(record_length)) AS len
          FROM pg_get_wal_records_info('$lsn', '$end')
         GROUP BY 1, 2) r}) . '; all records: ' . $primary->safe_psql('postgres', qq{
SELECT sum(record_length) || ' B, ' || pg_wal_lsn_diff(max(end_lsn), '$lsn') || ' B of WAL'
  FROM pg_get_wal_records_info('$lsn', '$end')});
note "WAL per enqueue: $wal B ($records)";
note "other records: " . $primary->safe_psql('postgres', qq{
SELECT string_agg(record_type || ' ' || coalesce(block_ref, '') || ' ' || description, '; ')
  FROM pg_get_wal_records_info('$lsn', '$end')
 WHERE resource_manager NOT IN ('spindle', 'Transaction')});
cmp_ok($wal, '<=', 250,
	"WAL per single-event enqueue of the 118-byte payload is at most 250 B");
is( $primary->safe_psql(
		'postgres', qq{
SELECT count(*) FROM pg_get_wal_records_info('$lsn', '$end')
 WHERE resource_manager = 'spindle' AND record_type LIKE 'INSERT%'}),
	$n,
	'each enqueue wrote one spindle INSERT record');
unlike($records, qr{MAP_SET|Heap/INSERT},
	'and no heap INSERT nor slot map record');

# ---- redo: standby and crash recovery, all pages checked --------------------
$primary->safe_psql('postgres',
	"ALTER SYSTEM SET wal_consistency_checking = 'all'; SELECT pg_reload_conf();");
# single events (the record) and batches (heap's multi-insert and the map
# record), rows with NULLs (a null bitmap) and without, checkpoints between
# and during them, new heap pages and new map pages, a rolled back insert
my $bg = $primary->background_psql('postgres');
$bg->query_safe('SELECT 1');
for my $round (1 .. 4)
{
	$bg->query_until(qr/started/,
		"\\echo started\nCHECKPOINT;\n");
	my $sql = '';
	for my $i (1 .. 150)
	{
		my $id = $round * 1000 + $i;
		$sql .= "SELECT spindle.enqueue('w', jsonb_build_object('n', $id, 'pad', repeat('x', $i)));\n";
		$sql .= $i % 3
		  ? "INSERT INTO t VALUES ($id, 'body $id', $i);\n"
		  : "INSERT INTO t VALUES ($id, NULL, NULL);\n";
	}
	$sql .= "SELECT count(*) FROM spindle.enqueue_batch('w', ARRAY(SELECT jsonb_build_object('b', g) FROM generate_series(1, 40) g));\n";
	$sql .= "BEGIN; INSERT INTO t VALUES (-$round, 'rolled back', 0); ROLLBACK;\n";
	$primary->safe_psql('postgres', $sql);
}
$bg->quit;
$primary->safe_psql('postgres', "SELECT count(*) FROM spindle.dequeue('w', 100)");
$primary->safe_psql('postgres', q{
SELECT spindle.enqueue('w', '{"after": "dequeue"}');
INSERT INTO t VALUES (9999, 'after', 1);});

my @checks = (
	q{SELECT count(*) || ':' || string_agg(msg_id || '=' || payload::text, ',' ORDER BY msg_id) FROM spindle_q.w},
	q{SELECT count(*) || ':' || string_agg(id || ':' || coalesce(body, '-') || ':' || coalesce(extra, 0), ',' ORDER BY id) FROM t},
	q{SET enable_seqscan = off; SET enable_bitmapscan = off;
	  SELECT count(*) || ':' || sum(id) FROM t WHERE id BETWEEN 1000 AND 5000},
	q{SET enable_seqscan = off; SET enable_indexscan = off;
	  SELECT count(*) || ':' || sum(id) FROM t WHERE id BETWEEN 2000 AND 3100},
	q{SELECT count(*) || ':' || string_agg(msg_id::text, ',' ORDER BY msg_id) FROM spindle_q.w
	   WHERE ctid = ANY (ARRAY(SELECT ctid FROM spindle_q.w WHERE msg_id % 5 = 0))},
	q{SELECT count(*) || ':' || string_agg(msg_id::text, ',' ORDER BY msg_id) FROM spindle_q.m
	   WHERE ctid = ANY (ARRAY(SELECT ctid FROM spindle_q.m))});
my @expect = map { $primary->safe_psql('postgres', $_) } @checks;
like($expect[1], qr/^601:/, 'the primary has the 601 rows of t');

$primary->wait_for_catchup($standby);
for my $i (0 .. $#checks)
{
	is($standby->safe_psql('postgres', $checks[$i]),
		$expect[$i], "the standby returns the primary's rows ($i)");
}
ok(!$standby->log_contains(qr/inconsistent page found/),
	'the standby found no page replayed differently');

# crash recovery replays everything since the last round's checkpoint
$primary->stop('immediate');
$primary->start;
for my $i (0 .. $#checks)
{
	is($primary->safe_psql('postgres', $checks[$i]),
		$expect[$i], "after crash recovery, the same rows ($i)");
}
ok(!$primary->log_contains(qr/inconsistent page found/),
	'crash recovery found no page replayed differently');
verify_ok($primary, 'postgres', 't');
verify_ok($primary, 'postgres', 'spindle_q.w');
verify_ok($primary, 'postgres', 'spindle_q.m');

$primary->wait_for_catchup($standby);
$primary->safe_psql('postgres', "SELECT spindle.enqueue('w', '{\"after\": \"crash\"}')");
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', $checks[0]),
	$primary->safe_psql('postgres', $checks[0]),
	'the standby follows the primary after its crash');

# ---- a crash in the middle of enqueues and checkpoints ----------------------
# two producers enqueue one event per transaction, logging each msg_id in
# the same transaction, while checkpoints come every 100 ms (some begin
# between an insert's look at the map page and its record: then the record
# is followed by the page's image); the server is killed under the load
$primary->safe_psql('postgres', q{
SELECT spindle.create_queue('s', events_per_spindle => 2000);
CREATE TABLE produced (msg_id bigint);});
my $script = $primary->basedir . '/enqueue.sql';
open(my $fh, '>', $script) or die "cannot write $script: $!";
print $fh "INSERT INTO produced SELECT spindle.enqueue('s', '$payload');\n";
close $fh;
my ($pb_out, $pb_err) = ('', '');
my $pgbench = IPC::Run::start(
	[
		'pgbench', '-n', '-c', '2', '-T', '60', '-f', $script,
		'-h', $primary->host, '-p', $primary->port, 'postgres'
	],
	'>', \$pb_out, '2>', \$pb_err);
my $checkpoints = $primary->background_psql('postgres', on_error_stop => 0);
for (1 .. 40)
{
	$checkpoints->query_until(qr/go/, "\\echo go\nCHECKPOINT;\n");
	usleep(100_000);
}
$primary->stop('immediate');
eval { $checkpoints->quit; };
eval { $pgbench->finish; };
$primary->start;
my $logged = $primary->safe_psql('postgres', 'SELECT count(*) FROM produced');
cmp_ok($logged, '>', 100, "the producers committed events before the crash ($logged)");
is( $primary->safe_psql(
		'postgres', q{
SELECT count(*) FROM produced p
 WHERE NOT EXISTS (SELECT FROM spindle_q.s q WHERE q.msg_id = p.msg_id)}),
	'0',
	'every committed enqueue is in the queue after crash recovery');
is( $primary->safe_psql(
		'postgres', q{
SELECT count(*) FROM spindle_q.s
 WHERE ctid = ANY (ARRAY(SELECT ctid FROM spindle_q.s))}),
	$primary->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.s'),
	'and each is found through its slot map entry');
verify_ok($primary, 'postgres', 'spindle_q.s');
is( $primary->safe_psql(
		'postgres', "SELECT count(*) FROM spindle.dequeue('s', 100000)"),
	$primary->safe_psql('postgres', 'SELECT count(*) FROM produced'),
	'a consumer takes every one of them');
ok(!$primary->log_contains(qr/inconsistent page found/),
	'crash recovery found no page replayed differently');
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.s'),
	'0', 'the standby replayed it all');
ok(!$standby->log_contains(qr/inconsistent page found/),
	'neither did the standby');

$standby->stop;
$primary->stop;
done_testing();
