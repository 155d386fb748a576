# The consumer relation's straggler tree through WAL (docs/design.md,
# "Consumer state ...", step 2): a streaming standby replays STRAGGLE,
# SPLIT, INSERT_UPPER, NEWROOT, FREE and REUSE records to the primary's
# tree (wal_consistency_checking compares every replayed page with the
# primary's image; in PostgreSQL 15 'all' leaves out custom resource
# managers, which must be named: 'all,spindle'); a server stopped with -m immediate while a tree is
# being built comes back with a tree that verifies and holds every upsert
# whose transaction committed; a crash between a SPLIT and its
# INSERT_UPPER leaves a flagged page that the next insert finishes; a
# standby reader scanning while splits are replayed stays consistent; a
# freed page taken again (REUSE) cancels a standby snapshot that could
# still read it; an
# unlogged queue's consumer relation comes back empty from its init fork;
# pg_dump writes no consumer relation, and a restore makes a new one.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'spindle'
spindle.enable_worker = off
wal_consistency_checking = 'all,spindle'
wal_keep_size = '256MB'
autovacuum = off
restart_after_crash = on
});
$primary->start;
$primary->safe_psql(
	'postgres', q{
CREATE EXTENSION spindle;
SELECT spindle.create_queue('q');
CREATE UNLOGGED TABLE spindle_q.u (
    msg_id bigint NOT NULL DEFAULT 0,
    enqueued_at timestamptz NOT NULL DEFAULT now(),
    visible_at timestamptz NOT NULL DEFAULT now(),
    payload jsonb NOT NULL) USING spindle;
CREATE TABLE done (sub int, first bigint);
});

$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;

# every run of a tree, as one string
sub tree_of
{
	my ($node, $sub) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) || ':' || coalesce(md5(string_agg(s::text, ',' ORDER BY first)), '')"
		  . " FROM spindle._run_scan('spindle_q.q', $sub, -9223372036854775807, 9223372036854775807) s");
}

# height|runs|incomplete splits|problems
sub verify_of
{
	my ($node, $sub, $q) = @_;
	$q //= 'spindle_q.q';
	return $node->safe_psql('postgres',
		"SELECT height || '|' || runs || '|' || incomplete_splits || '|' || problems::text"
		  . " FROM spindle._run_verify('$q', $sub)");
}

# sub 0: small pages (several root splits), upserts over one another and
# removals; sub 1: full pages in msg_id order; sub 2: a tree dropped and
# built again, so that its freed pages are reused (FREE, REUSE)
$primary->safe_psql(
	'postgres', q{
SET spindle.test_tree_fanout = 6;
SELECT spindle._run_upsert('spindle_q.q', 0, 1, 2, kind => 2, count => 3000, stride => 5);
DO $$
DECLARE x bigint := 777;
BEGIN
  FOR i IN 1..2000 LOOP
    x := (x * 1103515245 + 12345) % 2147483648;
    IF i % 5 = 0 THEN
      PERFORM spindle._run_remove('spindle_q.q', 0, x % 15000, 1 + x % 40);
    ELSE
      PERFORM spindle._run_upsert('spindle_q.q', 0, x % 15000, 1 + x % 9,
                                  1 + i % 6, now(), i % 4, i);
    END IF;
  END LOOP;
END $$;
RESET spindle.test_tree_fanout;
SELECT spindle._run_upsert('spindle_q.q', 1, 1000, 4, count => 60000, stride => 10);
SET spindle.test_tree_fanout = 6;
SELECT spindle._run_upsert('spindle_q.q', 2, 1, 1, count => 500, stride => 2);
SELECT spindle._run_drop('spindle_q.q', 2);
});
$primary->safe_psql('postgres', 'SELECT txid_current()');
$primary->safe_psql(
	'postgres', q{
SET spindle.test_tree_fanout = 6;
SELECT spindle._run_upsert('spindle_q.q', 2, 1, 1, count => 500, stride => 3);
});
like(verify_of($primary, 0), qr/^[4-9]\|\d+\|0\|\{\}$/,
	'primary: the small-page tree verifies, several levels high');
like(verify_of($primary, 1), qr/^2\|60000\|0\|\{\}$/,
	'primary: the full-page tree verifies, root split once');

# every record of ours carries an image for redo to compare with
$primary->safe_psql('postgres', 'CHECKPOINT');
my $lsn0 = $primary->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()');
$primary->safe_psql('postgres',
	q{SET spindle.test_tree_fanout = 4;
	  SELECT spindle._run_upsert('spindle_q.q', 8, 1, 1, count => 50, stride => 2);
	  SELECT spindle._run_drop('spindle_q.q', 8)});
$primary->safe_psql('postgres', 'SELECT txid_current()');
$primary->safe_psql('postgres',
	q{SET spindle.test_tree_fanout = 4;
	  SELECT spindle._run_upsert('spindle_q.q', 8, 1, 1, count => 50, stride => 2)});
$primary->safe_psql('postgres', 'CHECKPOINT');
$primary->safe_psql('postgres', 'CREATE EXTENSION pg_walinspect');
is( $primary->safe_psql(
		'postgres', qq{
SELECT string_agg(record_type || ':' || (n = checked)::text, ',' ORDER BY record_type)
  FROM (SELECT record_type, count(*) AS n,
               count(*) FILTER (WHERE block_ref LIKE '%for WAL verification%'
                                   OR block_ref LIKE '%FPW%') AS checked
          FROM pg_get_wal_records_info('$lsn0', pg_current_wal_flush_lsn())
         WHERE resource_manager = 'spindle' GROUP BY 1) s}),
	'FREE:true,INSERT_UPPER:true,NEWROOT:true,REUSE:true,SPLIT:true,STRAGGLE:true',
	'every consumer-tree record type is written, each with images to check');

$primary->wait_for_catchup($standby);
for my $sub (0 .. 2)
{
	my $p = tree_of($primary, $sub);
	is(tree_of($standby, $sub), $p, "standby: tree $sub has the primary's runs");
	is(verify_of($standby, $sub), verify_of($primary, $sub),
		"standby: tree $sub verifies as on the primary");
}
is( $standby->safe_psql('postgres',
		q{SELECT (spindle._run_lookup('spindle_q.q', 1, 300003)).first}),
	'300000', 'standby: lookup in read-only mode');
my ($rc, $out, $err) = $standby->psql('postgres',
	q{SELECT spindle._run_upsert('spindle_q.q', 1, 1, 1)});
like($err, qr/during recovery/, 'standby: writes refused');
ok($standby->log_contains(qr/inconsistent page/) == 0,
	'standby: no inconsistent page under wal_consistency_checking');

# a tree being built when the server stops -m immediate: every upsert whose
# transaction committed (its row in done) is there after recovery
my %h = (out => '', err => '');
$h{run} = IPC::Run::start(
	[
		'psql', '-X', '-h', $primary->host, '-p', $primary->port,
		'-d', 'postgres', '-c', 'SET spindle.test_tree_fanout = 5', '-c', q{
DO $$
BEGIN
  FOR i IN 1..100000 LOOP
    PERFORM spindle._run_upsert('spindle_q.q', 3, (i * 7919) % 1000003, 1);
    INSERT INTO done VALUES (3, (i * 7919) % 1000003);
    COMMIT;
  END LOOP;
END $$}
	],
	'<', \undef, '>', \$h{out}, '2>', \$h{err});
$primary->poll_query_until('postgres', 'SELECT count(*) > 3000 FROM done')
  or die 'the build did not start';
$primary->stop('immediate');
$h{run}->kill_kill;
$primary->start;
my $committed = $primary->safe_psql('postgres', 'SELECT count(*) FROM done WHERE sub = 3');
like(verify_of($primary, 3), qr/^\d+\|\d+\|[01]\|\{\}$/,
	"after -m immediate: the tree verifies ($committed upserts committed)");
is( $primary->safe_psql(
		'postgres', q{
SELECT count(*) FROM done d
 WHERE sub = 3
   AND (spindle._run_lookup('spindle_q.q', 3, d.first)).first IS DISTINCT FROM d.first}),
	'0',
	'after -m immediate: every committed upsert is in the tree');
ok(!$primary->log_contains(qr/inconsistent page/),
	'crash recovery: no inconsistent page under wal_consistency_checking');

# a crash between SPLIT and INSERT_UPPER: the left page stays flagged,
# readers cross it, the next insert finishes the split
$primary->safe_psql('postgres',
	q{SET spindle.test_tree_fanout = 4;
	  SELECT spindle._run_upsert('spindle_q.q', 4, 10, 1, count => 4, stride => 10)});
($rc, $out, $err) = $primary->psql('postgres',
	q{SET spindle.test_tree_fanout = 4;
	  SET spindle.test_split_crash = on;
	  SELECT spindle._run_upsert('spindle_q.q', 4, 50, 1)});
like($err, qr/server closed the connection|terminating connection/,
	'split crash: the server stopped after SPLIT');
$primary->poll_query_until('postgres', 'SELECT 1', '1')
  or die 'server did not come back after the PANIC';
like(verify_of($primary, 4), qr/^1\|\d+\|1\|\{\}$/,
	'split crash: one incomplete split, nothing else wrong');
is( $primary->safe_psql(
		'postgres',
		q{SELECT string_agg(first::text, ',' ORDER BY first)
		    FROM spindle._run_scan('spindle_q.q', 4, 0, 100)}),
	'10,20,30,40',
	'split crash: readers cross the flagged page by its right-link');
$primary->safe_psql('postgres',
	q{SET spindle.test_tree_fanout = 4;
	  SELECT spindle._run_upsert('spindle_q.q', 4, 50, 1)});
like(verify_of($primary, 4), qr/^2\|5\|0\|\{\}$/,
	'split crash: the next insert finished the split (a new root)');

# the standby followed all of it
$primary->wait_for_catchup($standby);
for my $sub (3, 4)
{
	is(tree_of($standby, $sub), tree_of($primary, $sub),
		"standby: tree $sub after the crashes has the primary's runs");
}

# a standby reader scanning a tree over and over while the primary splits
# it: it neither hangs nor errors, never sees a run twice or runs
# overlapping, and never loses a run it saw before
my $build = IPC::Run::start(
	[
		'psql', '-X', '-h', $primary->host, '-p', $primary->port,
		'-d', 'postgres', '-c', 'SET spindle.test_tree_fanout = 4', '-c',
		q{DO $$
BEGIN
  FOR i IN 1..60000 LOOP
    PERFORM spindle._run_upsert('spindle_q.q', 7, (i * 7919) % 1000003, 1);
  END LOOP;
END $$}
	],
	'<', \undef, '>', \$h{out}, '2>', \$h{err});
$standby->poll_query_until('postgres',
	q{SELECT (spindle._run_verify('spindle_q.q', 7)).height > 0})
  or die 'tree 7 never reached the standby';
my $loop = $standby->safe_psql(
	'postgres', q{
DO $$
DECLARE
  n bigint; prev bigint := 0; bad bigint; scans int := 0;
BEGIN
  FOR i IN 1..1000 LOOP
    SELECT count(*), count(*) FILTER (WHERE first < prev_end) INTO n, bad
      FROM (SELECT first, lag(first + len) OVER (ORDER BY first) AS prev_end
              FROM spindle._run_scan('spindle_q.q', 7, 0, 2000000)) s;
    IF bad > 0 OR n < prev THEN
      RAISE EXCEPTION 'scan %: % runs (% before), % overlapping', i, n, prev, bad;
    END IF;
    prev := n;
    scans := scans + 1;
    EXIT WHEN n = 60000;
  END LOOP;
  RAISE NOTICE 'scans %, last %', scans, prev;
END $$;
SELECT 'done'}, timeout => $PostgreSQL::Test::Utils::timeout_default);
is($loop, 'done', 'standby reader: scans across concurrent splits stay consistent');
$build->finish;
$primary->wait_for_catchup($standby);
is(tree_of($standby, 7), tree_of($primary, 7),
	'standby: tree 7 has the primary\'s runs');
like(verify_of($standby, 7), qr/^\d+\|60000\|0\|\{\}$/,
	'standby: tree 7 verifies');

# a freed page is not taken again under a standby snapshot that could still
# read it: the REUSE record cancels that standby transaction
$standby->append_conf('postgresql.conf',
	"max_standby_streaming_delay = 0\nhot_standby_feedback = off\n");
$standby->reload;
$primary->safe_psql('postgres',
	q{SET spindle.test_tree_fanout = 4;
	  SELECT spindle._run_upsert('spindle_q.q', 5, 1, 1, count => 40, stride => 2)});
$primary->wait_for_catchup($standby);
# (replay of the 40 upserts is done once the standby's own scan finds them)
$standby->poll_query_until('postgres',
	q{SELECT count(*) = 40 FROM spindle._run_scan('spindle_q.q', 5, 0, 100)})
  or die 'the standby never showed tree 5 whole';
my $reader = $standby->background_psql('postgres', on_error_stop => 0);
$reader->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
is( $reader->query_safe(
		q{SELECT count(*) FROM spindle._run_scan('spindle_q.q', 5, 0, 100)}),
	'40', 'standby reader: a snapshot that read tree 5');
my $off = -s $standby->logfile;
$primary->safe_psql('postgres', q{SELECT spindle._run_drop('spindle_q.q', 5)});
$primary->safe_psql('postgres', 'SELECT txid_current()');
$primary->wait_for_catchup($standby);
is($reader->query_safe('SELECT 1'), '1',
	'standby reader: freeing the pages (FREE) cancels nothing');
my $size_sql = q{SELECT pg_relation_size(c.oid) FROM pg_class c
  WHERE c.relnamespace = 'pg_spindle'::regnamespace
    AND c.relname = 'c' || 'spindle_q.q'::regclass::oid};
my $size = $primary->safe_psql('postgres', $size_sql);
$primary->safe_psql('postgres',
	q{SET spindle.test_tree_fanout = 4;
	  SELECT spindle._run_upsert('spindle_q.q', 6, 1, 1, count => 10, stride => 2)});
is($primary->safe_psql('postgres', $size_sql), $size,
	'primary: the freed pages were reused (no snapshot there could see them)');
# the upserts assign no xid, so their commit flushes nothing, and
# wait_for_catchup waits for the WAL written, not for the REUSE records
# still in the WAL buffers: an xid's commit flushes them first
$primary->safe_psql('postgres', 'SELECT txid_current()');
$primary->wait_for_catchup($standby);
ok( $standby->log_contains(qr/conflict with recovery/, $off),
	'standby reader: cancelled by the REUSE record');
eval { $reader->quit; };

# an unlogged queue's consumer relation: empty again after a crash
$primary->safe_psql('postgres',
	q{SELECT spindle._run_upsert('spindle_q.u', 0, 1, 1, count => 1000, stride => 2)});
like(verify_of($primary, 0, 'spindle_q.u'), qr/^2\|1000\|0\|\{\}$/, 'unlogged: a tree');
$primary->stop('immediate');
$primary->start;
is(verify_of($primary, 0, 'spindle_q.u'), '0|0|0|{}',
	'unlogged: empty after a crash (init fork)');
$primary->safe_psql('postgres',
	q{SELECT spindle._run_upsert('spindle_q.u', 0, 1, 1, count => 1000, stride => 2)});
like(verify_of($primary, 0, 'spindle_q.u'), qr/^2\|1000\|0\|\{\}$/,
	'unlogged: built again');

# pg_dump: no consumer relation in the dump; a restore makes a new one
my $dump = $primary->backup_dir . '/dump.sql';
$primary->command_ok(
	[ 'pg_dump', '-d', $primary->connstr('postgres'), '-f', $dump ],
	'pg_dump of a database with queues');
my $text = slurp_file($dump);
unlike($text, qr/pg_spindle\.c\d+|spindle_meta/,
	'pg_dump writes no consumer relation');
$primary->safe_psql('postgres', 'CREATE DATABASE restored');
$primary->command_ok(
	[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d',
		$primary->connstr('restored'), '-f', $dump ],
	'restore');
is( $primary->safe_psql(
		'restored', q{
SELECT string_agg(d.refobjid::regclass::text || ':' || d.deptype::text, ','
                  ORDER BY d.refobjid::regclass::text)
  FROM pg_class c JOIN pg_am a ON a.oid = c.relam
  JOIN pg_depend d ON d.objid = c.oid AND d.refclassid = 'pg_class'::regclass
 WHERE a.amname = 'spindle_meta'}),
	'spindle_q.q:i,spindle_q.u:i',
	'the restore made the queues their consumer relations');

done_testing();
