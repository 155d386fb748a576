# The consume log's emptied leaves given back through WAL, crashes and a
# standby (docs/design.md, "Consume log's pages"; consume_log.c,
# rebuild_if_sparse).  Settle cuts the entries of dropped spindles; when
# tree 2 then holds more than twice the pages its entries need, it is
# rebuilt beside itself and swapped in.
#  - A PANIC in the middle of a rebuild (once the leaves of the tree being
#    built are written, spindle.test_load_crash) leaves the tree in use as it
#    was: plain SQL shows the same rows, verify() is clean, and the next
#    settle rebuilds it, giving back first the pages the stopped build
#    held (the metapage names the tree being built: before turn 4,
#    session 13 they were lost to the relation for good).
#  - A streaming standby (wal_consistency_checking = 'all,spindle')
#    replays the rebuild to the primary's tree and rows; `-m immediate`
#    after it leaves the same tree.
#  - With the worker on, a queue consumed one event per transaction keeps
#    tree 2 within its bound round after round (it grew by a leaf or more
#    per spindle drained), the consumer relation stops growing (the pages
#    rebuilds free are taken again, from under the newest ones: the free
#    list's look-ahead, replayed under wal_consistency_checking), and every
#    event is delivered once.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use SpindleTest;

# tree pages of 4 items, so that a few entries make many pages
my ($primary, $standby) = standby_pair('clr_',
	"spindle.enable_worker = off\nspindle.naptime = 200ms\n"
	  . "spindle.compaction_threshold = 0\nautovacuum = off\n"
	  . "spindle.test_tree_fanout = 4\nlog_min_messages = debug1\n"
	  . "wal_consistency_checking = 'all,spindle'\nwal_keep_size = '256MB'\n"
	  . "restart_after_crash = on\n");
my $q = sub { $primary->safe_psql('postgres', $_[0]) };

# nspindles spindles of ten events, each event dequeued in a transaction
# of its own (one log entry each), what was dequeued noted in got
$q->(q{
CREATE TABLE got (n int);
SELECT spindle.create_queue('cl', 10);
CREATE PROCEDURE cl_fill(q text, first int, nspindles int)
LANGUAGE plpgsql AS $$
BEGIN
  FOR s IN first .. first + nspindles - 1 LOOP
    PERFORM spindle.enqueue(q, jsonb_build_object('n', s * 10 + g))
       FROM generate_series(0, 9) g;
    COMMIT;
    FOR i IN 1 .. 10 LOOP
      INSERT INTO got SELECT (payload->>'n')::int FROM spindle.dequeue(q, 1);
      COMMIT;
    END LOOP;
  END LOOP;
END $$;
CALL cl_fill('cl', 0, 40);
});
# the last spindle: its first event leased (the floor stops there), five
# consumed, four waiting
$q->(q{
SELECT spindle.enqueue('cl', jsonb_build_object('n', 400 + g)) FROM generate_series(0, 9) g;
});
$q->(q{SELECT count(*) FROM spindle.read('cl', 1, '1 day')});
$q->(q{INSERT INTO got SELECT (payload->>'n')::int FROM spindle.dequeue('cl', 1)})
  for 1 .. 5;
cmp_ok($q->(q{SELECT spindle.drop_spindles('spindle_q.cl')}), '>=', 40,
	'the 40 consumed spindles dropped');

my $pages_q = q{SELECT pages FROM spindle._run_verify('spindle_q.cl', 2)};
my $rows_q = q{SELECT string_agg(payload->>'n', ' ' ORDER BY msg_id) FROM spindle_q.cl};
my $want_rows = '400 406 407 408 409';
sub tree_of
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) || ':' || coalesce(md5(string_agg(s::text, ',' ORDER BY first)), '')"
		  . " FROM spindle._run_scan('spindle_q.cl', 2, -1, 9223372036854775807) s");
}
# Pages of the consumer relation that no tree, no free list and no
# metapage holds (a tree set aside counts as held by none)
$q->('CREATE EXTENSION pageinspect');
my $lost_q = lost_pages_sql('spindle_q.cl', 4);
is($q->($lost_q), '0', 'every page of the consumer relation is a tree\'s or free');
my $pages_before = $q->($pages_q);
cmp_ok($pages_before, '>', 60, "tree 2: $pages_before pages for 405 entries");
is($q->($rows_q), $want_rows, 'plain SQL: the leased event and the four waiting');

# ---- a PANIC in the middle of the rebuild ---------------------------------
my $log_offset = -s $primary->logfile;
my ($out, $err) = ('', '');
$primary->psql('postgres',
	q{SET spindle.test_load_crash = on; SELECT spindle._settle('spindle_q.cl')},
	stdout => \$out, stderr => \$err);
ok($primary->wait_for_log(qr/spindle\.test_load_crash: stopping/, $log_offset),
	'the rebuild stopped in the middle (PANIC)');
$primary->poll_query_until('postgres', 'SELECT true') or die 'no restart';
is($q->($rows_q), $want_rows, 'after the crash: the same rows');
is($q->(q{SELECT count(*) FROM spindle.verify('spindle_q.cl')}), '0',
	'after the crash: verify() is clean');
# (the cut of the dropped spindles' entries went before the rebuild)
like(tree_of($primary), qr/^5:/, 'after the crash: the cut was made');
cmp_ok($q->($pages_q), '>', 60,
	'after the crash: the tree in use is the old one, its leaves emptied');
cmp_ok($q->($lost_q), '>=', 3,
	'after the crash: the pages of the stopped build are held by no tree');

# ---- the rebuild, replayed by the standby ------------------------------------
$q->(q{SELECT spindle._settle('spindle_q.cl')});
my $pages_after = $q->($pages_q);
cmp_ok($pages_after, '<=', 8, "tree 2 rebuilt: $pages_after pages");
like(tree_of($primary), qr/^5:/, 'tree 2 keeps the five entries of the last spindle');
is($q->($lost_q), '0',
	'the pages the stopped build held were given back (none held by no tree)');
is($q->($rows_q), $want_rows, 'after the rebuild: the same rows');
$primary->wait_for_catchup($standby);
is(tree_of($standby), tree_of($primary), 'the standby has the primary\'s tree 2');
is($standby->safe_psql('postgres', $rows_q), $want_rows,
	'the standby returns the primary\'s rows');
ok(!$standby->log_contains(qr/inconsistent page found/),
	'no inconsistent page on the standby');
is($standby->safe_psql('postgres', $lost_q), '0',
	'the standby: no page held by no tree either');

my $tree = tree_of($primary);
$primary->stop('immediate');
$primary->start;
is(tree_of($primary), $tree, '-m immediate: the same tree after recovery');
is($q->($rows_q), $want_rows, '-m immediate: the same rows');

# ---- the worker keeps the tree small, round after round ------------------------
is( $q->(q{SELECT spindle.set_visibility('cl', msg_id, '0')
		  FROM spindle_q.cl WHERE payload->>'n' = '400'}),
	't', 'the lease handed back');
$q->(q{INSERT INTO got SELECT (payload->>'n')::int FROM spindle.dequeue('cl', 10)});
my $worker_from = -s $primary->logfile;
$q->(q{ALTER SYSTEM SET spindle.enable_worker = on});
$primary->reload;
my $crel_q = q{SELECT pg_relation_size(to_regclass('pg_spindle.c' || 'spindle_q.cl'::regclass::oid)) / 8192};
my @crel_pages;
for my $round (1 .. 3)
{
	$q->("CALL cl_fill('cl', " . (40 + 40 * $round) . ', 40)');
	ok( $primary->poll_query_until('postgres', "SELECT ($pages_q) <= 24"),
		"round $round: 400 more entries, tree 2 back within its bound");
	push @crel_pages, $q->($crel_q);
}
# the pages rebuilds free are taken again (the free list's look-ahead):
# with only its head looked at, the relation grew by dozens of pages a
# round
note "consumer relation pages after each round: @crel_pages";
cmp_ok($crel_pages[2], '<=', $crel_pages[0] + 8,
	'the consumer relation stops growing: rounds 2 and 3 reuse what rebuilds freed');
like(substr(slurp_file($primary->logfile), $worker_from),
	qr/consume log of "[^"]+" rebuilt/, 'the worker rebuilt it');
is($q->(q{SELECT count(*) || ' ' || count(DISTINCT n) FROM got}), '1610 1610',
	'every event was delivered once');
is($q->(q{SELECT count(*) FROM spindle_q.cl}), '0', 'plain SQL: none left');
is($q->(q{SELECT count(*) FROM spindle.verify('spindle_q.cl')}), '0',
	'verify() is clean');
$primary->wait_for_catchup($standby);
is(tree_of($standby), tree_of($primary), 'the standby has the primary\'s tree 2');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.cl'), '0',
	'the standby sees none left');
ok(!$standby->log_contains(qr/inconsistent page found/),
	'no inconsistent page on the standby');

$standby->stop;
$primary->stop;
done_testing();
