# Forgetting relocation entries through WAL and crashes (docs/design.md,
# "Compaction of sparse spindles", section 6, "Removal" and "Space of
# the trees"; src/storage/relocation_forget.c).  40 spindles keep one
# lease each, compaction moves them into four annexes and the spindles
# drop; 30 leases are acknowledged and three annexes drop; VACUUM of the
# queue table then forgets the entries of the dropped copies and, the
# trees being mostly empty pages, rebuilds trees 3 and 4 beside
# themselves and swaps them in.
#  - A crash in the middle of the rebuild (a PANIC once the leaves of the
#    tree being built are written, spindle.test_load_crash) leaves the trees in
#    use as they were: the moved events are found by msg_id and verify()
#    is clean; the next VACUUM does the rebuild.
#  - A streaming standby (wal_consistency_checking = 'all,spindle')
#    replays the detached tree, the swap and the frees to the primary's
#    trees, and plain SQL there sees the primary's rows.
#  - `-m immediate` after the rebuild: the same trees after recovery.
#  - After it, the moved events are still handed back and dequeued by
#    msg_id, once each.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SpindleTest;

# tree pages of 4 items, so that a few entries make many pages
my ($primary, $standby) = standby_pair('rfw_',
	"spindle.enable_worker = off\nautovacuum = off\nspindle.test_tree_fanout = 4\n"
	  . "wal_consistency_checking = 'all,spindle'\nwal_keep_size = '256MB'\n"
	  . "restart_after_crash = on\n");
my $q = sub { $primary->safe_psql('postgres', $_[0]) };

$q->(q{
SELECT spindle.create_queue('rg', 10);
CREATE INDEX rg_msg_id ON spindle_q.rg (msg_id);
CREATE PROCEDURE rf_fill(q text, nspindles int)
LANGUAGE plpgsql AS $$
BEGIN
  FOR s IN 0 .. nspindles - 1 LOOP
    PERFORM spindle.enqueue(q, jsonb_build_object('n', s * 10 + g))
       FROM generate_series(1, 10) g;
    COMMIT;
    PERFORM spindle.read(q, 1, '1 day');
    PERFORM spindle.dequeue(q, 10);
    COMMIT;
  END LOOP;
  PERFORM spindle.enqueue(q, jsonb_build_object('n', nspindles * 10 + g))
     FROM generate_series(1, 5) g;
END $$;
CALL rf_fill('rg', 40);
SELECT spindle.drop_spindles('spindle_q.rg');
});
# the moves; 30 of the moved leases acknowledged; then one pass drops
# the 40 event spindles and the three annexes whose copies are consumed
is($q->(q{SELECT moved FROM spindle._compact('spindle_q.rg')}),
	'40', 'the 40 leases moved');
is( $q->(q{SELECT count(*) FILTER (WHERE a) FROM
		  (SELECT spindle.ack('rg', msg_id) AS a FROM spindle_q.rg
		    WHERE (payload->>'n')::int <= 300) s}),
	'30', '30 leases acknowledged');
cmp_ok($q->(q{SELECT spindle.drop_spindles('spindle_q.rg')}),
	'>=', 43, 'the event spindles and three annexes dropped');

# every run of tree $sub, as one string; the rows of the queue table
sub tree_of
{
	my ($node, $sub) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) || ':' || coalesce(md5(string_agg(s::text, ',' ORDER BY first)), '')"
		  . " FROM spindle._run_scan('spindle_q.rg', $sub, -1, 9223372036854775807) s");
}
my $rows_q = q{SELECT string_agg(payload->>'n', ' ' ORDER BY msg_id) FROM spindle_q.rg};
my $want_rows = '301 311 321 331 341 351 361 371 381 391 401 402 403 404 405';
is($q->($rows_q), $want_rows, 'plain SQL: the ten leases and the open spindle');
my ($t3, $t4) = (tree_of($primary, 3), tree_of($primary, 4));
like($t3, qr/^40:/, 'tree 3: 40 entries before');
like($t4, qr/^40:/, 'tree 4: 40 ids before');

# a crash in the middle of the rebuild: after the leaves of the tree built
my ($out, $err) = ('', '');
$primary->psql('postgres',
	q{SET spindle.test_load_crash = on; VACUUM spindle_q.rg},
	stdout => \$out, stderr => \$err);
ok( $primary->poll_query_until('postgres', 'SELECT 1', '1'),
	'the server came back after the PANIC');
like(slurp_file($primary->logfile), qr/test_load_crash: stopping after the leaves/,
	'it stopped in the middle of building a tree');
is(tree_of($primary, 3), $t3, 'tree 3 as it was before the rebuild');
is(tree_of($primary, 4), $t4, 'tree 4 as it was before the rebuild');
is($q->($rows_q), $want_rows, 'plain SQL sees the same rows');
is($q->(q{SELECT count(*) FROM spindle.verify('spindle_q.rg')}), '0',
	'verify() is clean');

# the next VACUUM forgets, and rebuilds the mostly empty trees
my $pages_q = q{SELECT (SELECT pages FROM spindle._run_verify('spindle_q.rg', 3)) + (SELECT pages FROM spindle._run_verify('spindle_q.rg', 4))};
my $pages_before = $q->($pages_q);
$q->(q{VACUUM spindle_q.rg});
like(tree_of($primary, 3), qr/^0:/, 'tree 3: the entries of dropped copies forgotten');
like(tree_of($primary, 4), qr/^10:/, 'tree 4: the ten ids still leased');
cmp_ok($q->($pages_q), '<', $pages_before / 2, 'the trees were rebuilt smaller');
is( $q->(q{SELECT count(*) FROM spindle._run_scan('spindle_q.rg', 4, -1, 9223372036854775807) r
		  WHERE NOT EXISTS (SELECT 1 FROM spindle.spindle_catalog c
		    WHERE c.relation = 'spindle_q.rg'::regclass AND c.dropped_at IS NULL
		      AND c.kind = 'annex'
		      AND c.spindle_no = ((extract(epoch FROM r.due - '2000-01-01 00:00:00+00')
		                           * 1000000)::bigint >> 26))}),
	'0', 'tree 4 names copies in the annex still there');

# the standby replays it all (wal_consistency_checking compares pages)
$primary->wait_for_catchup($standby);
is(tree_of($standby, 3), tree_of($primary, 3), 'the standby has tree 3');
is(tree_of($standby, 4), tree_of($primary, 4), 'the standby has tree 4');
is($standby->safe_psql('postgres', $rows_q), $want_rows,
	'plain SQL on the standby sees the same rows');
is( $standby->safe_psql('postgres',
		q{SET enable_seqscan = off;
		  SELECT string_agg(payload->>'n', ' ' ORDER BY msg_id) FROM spindle_q.rg
		   WHERE msg_id > 0}),
	$want_rows, 'and so does an index scan there');
is($standby->safe_psql('postgres', q{SELECT count(*) FROM spindle.verify('spindle_q.rg')}),
	'0', 'verify() is clean on the standby');

# an immediate stop: recovery comes back to the same trees
($t3, $t4) = (tree_of($primary, 3), tree_of($primary, 4));
$primary->stop('immediate');
$primary->start;
is(tree_of($primary, 3), $t3, 'tree 3 the same after recovery');
is(tree_of($primary, 4), $t4, 'tree 4 the same after recovery');

# consumers still find the moved events by msg_id
is( $q->(q{SELECT count(*) FILTER (WHERE v) FROM
		  (SELECT spindle.set_visibility('rg', msg_id, '0 s') AS v FROM spindle_q.rg
		    WHERE payload->>'n' IN ('301', '341', '391')) s}),
	'3', 'three leases handed back by msg_id');
is( $q->(q{SELECT string_agg(payload->>'n', ' ' ORDER BY msg_id) FROM spindle.dequeue('rg', 100)}),
	'301 341 391 401 402 403 404 405', 'dequeued once each, in msg_id order');
is( $q->(q{SELECT count(*) FILTER (WHERE a) FROM
		  (SELECT spindle.ack('rg', msg_id) AS a FROM spindle_q.rg) s}),
	'7', 'the other seven leases acknowledged by msg_id');
is($q->($rows_q), '', 'the queue is empty');
is($q->(q{SELECT count(*) FROM spindle.verify('spindle_q.rg')}), '0',
	'verify() is clean at the end');

done_testing();
