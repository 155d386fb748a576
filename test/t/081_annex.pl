# Annexes (docs/design.md, "Compaction of sparse spindles", section 2)
# through a crash and on a streaming standby: copies placed in an annex by
# the test-only spindle._annex_insert (heap insert, slot map entry, index
# entries, a TOASTed value) are replayed on the standby, which sees them by
# every scan; after `pg_ctl -m immediate` the annex and its copies are
# there, its slot counter is rebuilt from disk (a new copy takes the next
# slot, none twice), producers still never use it, and verify() is clean
# on both nodes.  pg_dump of the table dumps the copies as rows.  An annex
# whose copies are all dead goes by spindle.drop_spindles() (the drop
# replays on the standby) and by the worker.  Events of a queue table
# moved into an annex by spindle._relocate (compaction step 2) are seen
# once on both nodes, after a crash and after VACUUM froze their entries.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SpindleTest;

my ($primary, $standby) = standby_pair('', "spindle.enable_worker = off\n");

$primary->safe_psql(
	'postgres', q{
CREATE TABLE ax (id int, v text) USING spindle WITH (events_per_spindle = 8);
CREATE INDEX ax_id ON ax (id);
INSERT INTO ax SELECT g, 'e' || g FROM generate_series(1, 12) g;
SELECT spindle._create_annex('ax', 1);
SELECT spindle._annex_insert('ax', 1, ROW(101, 'a101')::ax);
SELECT spindle._annex_insert('ax', 1, ROW(102, repeat('x', 100000))::ax);
});

# what every node must answer, by each scan method
my @checks = (
	[ 'enable_indexscan = off, enable_bitmapscan = off', 'seq scan' ],
	[ 'enable_seqscan = off, enable_bitmapscan = off', 'index scan' ],
	[ 'enable_seqscan = off, enable_indexscan = off', 'bitmap scan' ]);
my $q = q{SELECT count(*), string_agg(id::text || ':' || length(v), ','
  ORDER BY id) FILTER (WHERE id > 100) FROM ax WHERE id > 0};

sub check_node
{
	my ($node, $want, $what) = @_;
	for my $c (@checks)
	{
		my ($settings, $name) = @$c;
		my $set = join('', map { "SET $_;" } split /, /, $settings);
		is($node->safe_psql('postgres', "$set $q"),
			$want, "$what: $name sees the annex's copies");
	}
	my $tid = $node->safe_psql('postgres',
		'SELECT ctid FROM ax WHERE id = 101');
	is($node->safe_psql('postgres',
			"SELECT id FROM ax WHERE ctid = '$tid'"),
		'101', "$what: a TID scan finds a copy")
	  if $tid ne '';
	verify_ok($node, 'postgres', 'ax', "$what: verify() is clean");
}

$primary->wait_for_catchup($standby);
check_node($primary, '14|101:4,102:100000', 'primary');
check_node($standby, '14|101:4,102:100000', 'standby');
is( $standby->safe_psql(
		'postgres',
		q{SELECT kind, generation, first_no IS NULL
		    FROM spindle.spindle_catalog WHERE kind = 'annex'}),
	'annex|1|t',
	'standby: the annex is in the catalog, without event numbers');

# a crash: the annex and its copies stay, its counter comes back from disk
$primary->stop('immediate');
$primary->start;
check_node($primary, '14|101:4,102:100000', 'primary after a crash');
$primary->safe_psql(
	'postgres', q{
SELECT spindle._annex_insert('ax', 1, ROW(103, 'a103')::ax);
INSERT INTO ax SELECT g, 'e' || g FROM generate_series(13, 30) g;
});
is( $primary->safe_psql(
		'postgres', q{
SELECT string_agg(id::text, ',' ORDER BY id) FROM ax
 WHERE ctid IN (SELECT ctid FROM ax WHERE id > 100)}),
	'101,102,103',
	'a copy placed after the crash takes a slot of its own');
is( $primary->safe_psql(
		'postgres', q{
SELECT s.events FROM spindle.spindles s JOIN spindle.spindle_catalog c
    ON c.relation = s.relation AND c.spindle_no = s.spindle_no
 WHERE c.kind = 'annex'}),
	'3',
	'producers placed nothing in the annex');
$primary->wait_for_catchup($standby);
check_node($primary, '33|101:4,102:100000,103:4', 'primary, more copies');
check_node($standby, '33|101:4,102:100000,103:4', 'standby, more copies');

# pg_dump dumps the copies as rows
my $dump = $primary->basedir . '/ax.sql';
$primary->command_ok(
	[ 'pg_dump', '-t', 'ax', '-f', $dump, '-d', $primary->connstr('postgres') ],
	'pg_dump of a table with an annex');
$primary->safe_psql('postgres', 'CREATE DATABASE r');
$primary->safe_psql('r', 'CREATE EXTENSION spindle');
$primary->command_ok(
	[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-f', $dump, '-d',
		$primary->connstr('r') ],
	'the dump restores');
is($primary->safe_psql('r', $q), '33|101:4,102:100000,103:4',
	'the restored table holds the copies as rows');

# all copies deleted: the annex goes by the usual rule, on both nodes
$primary->safe_psql('postgres', 'DELETE FROM ax WHERE id > 100');
is($primary->safe_psql('postgres', 'SELECT spindle.drop_spindles(\'ax\') > 0'),
	't', 'the annex of dead copies is dropped');
$primary->wait_for_catchup($standby);
is( $standby->safe_psql(
		'postgres',
		q{SELECT count(*) FROM spindle.spindle_catalog
		   WHERE kind = 'annex' AND dropped_at IS NULL}),
	'0',
	'standby: the annex is gone');
check_node($standby, '30|', 'standby after the drop');

# the worker drops an annex whose copies are all dead, as it drops
# spindles, also once it has counted (and cached) the annex with a live copy
$primary->safe_psql(
	'postgres', q{
SELECT spindle._create_annex('ax', 2);
SELECT spindle._annex_insert('ax', 2, ROW(201, 'a201')::ax);
SELECT spindle._annex_insert('ax', 2, ROW(202, 'a202')::ax);
DELETE FROM ax WHERE id = 201;
ALTER SYSTEM SET spindle.enable_worker = on;
ALTER SYSTEM SET spindle.naptime = '200ms';
SELECT pg_reload_conf();
});
sleep(3);
is( $primary->safe_psql(
		'postgres', q{
SELECT count(*) FROM spindle.spindle_catalog
 WHERE kind = 'annex' AND dropped_at IS NULL}),
	'1',
	'the worker keeps an annex with a live copy');
$primary->safe_psql('postgres', 'DELETE FROM ax WHERE id = 202');
ok( defined wait_for(
		$primary, 'postgres', q{
SELECT count(*) = 0 FROM spindle.spindle_catalog
 WHERE kind = 'annex' AND dropped_at IS NULL}, 120, 200),
	'the worker dropped the annex of dead copies');
verify_ok($primary, 'postgres', 'ax', 'verify() is clean after the worker\'s drop');

# Relocation (compaction step 2, design section 4 "Step 2 as built"):
# events of a queue table moved into an annex by spindle._relocate; the
# entries (tree 3 and 4 of the consumer relation, records of the tree)
# replay on the standby, which sees each event once, by every scan; a
# crash keeps them; an aborted move hides nothing; VACUUM's freeze of the
# entries replays too.
$primary->safe_psql(
	'postgres', q{
ALTER SYSTEM SET spindle.enable_worker = off;
SELECT pg_reload_conf();
SELECT spindle.create_queue('rq', 4);
SELECT spindle.enqueue('rq', jsonb_build_object('n', g)) FROM generate_series(1, 10) g;
CREATE INDEX rq_msg_id ON spindle_q.rq (msg_id);
CREATE TABLE rq_old AS SELECT msg_id, ctid::text AS t FROM spindle_q.rq;
SELECT spindle._create_annex('spindle_q.rq', 1);
});
$primary->safe_psql(
	'postgres', q{
WITH ids AS MATERIALIZED
  (SELECT msg_id FROM spindle_q.rq WHERE payload->>'n' IN ('2', '5', '9'))
SELECT count(spindle._relocate('spindle_q.rq', msg_id, 1)) FROM ids;
});
$primary->safe_psql(
	'postgres', q{
BEGIN;
SELECT spindle._relocate('spindle_q.rq', msg_id, 1)
  FROM spindle_q.rq WHERE payload->>'n' = '3';
ROLLBACK;
});
my $rq = q{SELECT count(*), count(DISTINCT msg_id),
  string_agg(payload->>'n', ',' ORDER BY msg_id) FROM spindle_q.rq WHERE msg_id > 0};
my $rq_moved = q{SELECT string_agg(q.payload->>'n', ',' ORDER BY q.msg_id)
  FROM spindle_q.rq q JOIN rq_old o USING (msg_id) WHERE q.ctid::text <> o.t};

sub check_moved
{
	my ($node, $what) = @_;
	for my $c (@checks)
	{
		my ($settings, $name) = @$c;
		my $set = join('', map { "SET $_;" } split /, /, $settings);
		is($node->safe_psql('postgres', "$set $rq"),
			'10|10|1,2,3,4,5,6,7,8,9,10',
			"$what: $name sees each moved event once");
	}
	is($node->safe_psql('postgres', $rq_moved), '2,5,9',
		"$what: the moved events are seen in their new copies");
	is( $node->safe_psql(
			'postgres', q{SELECT count(*) FROM spindle_q.rq
			  WHERE ctid IN (SELECT t::tid FROM rq_old)}),
		'7', "$what: TID scans of the old copies find the unmoved ones only");
	verify_ok($node, 'postgres', 'spindle_q.rq', "$what: verify() is clean");
}

$primary->wait_for_catchup($standby);
check_moved($primary, 'primary, moved');
check_moved($standby, 'standby, moved');
$primary->stop('immediate');
$primary->start;
check_moved($primary, 'primary, moved, after a crash');
$primary->safe_psql('postgres',
	q{SELECT format('VACUUM (FREEZE) pg_spindle.c%s', 'spindle_q.rq'::regclass::oid) \gexec});
is( $primary->safe_psql(
		'postgres', q{SELECT count(*) FILTER (WHERE awaited = 2), count(*)
		  FROM spindle._run_scan('spindle_q.rq', 3, 0, 9223372036854775806)}),
	'3|3', 'VACUUM froze the committed entries and removed the aborted one');
$primary->wait_for_catchup($standby);
check_moved($standby, 'standby, entries frozen');

done_testing();
