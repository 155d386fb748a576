# Pages of a consumer tree are never lost to a crash (docs/design.md,
# "Known gaps", consume log's pages; consumer_tree.c, retire_tree and
# reclaim_aside).  The metapage names a tree set aside beside the one in
# use: one being built, or one whose pages are being given back after a
# swap or a drop.  A crash halfway through giving them back
# (spindle.test_pause holds the writer there; `-m immediate`) leaves the
# rest named aside, and they are given back before that tree number's next
# tree is made, or by the consume log's next settle; a crash halfway
# through that too leaves a shorter rest for the next one.  Before turn 4,
# session 13 the rest was lost to the relation for good.  Checked on the
# primary and on a streaming standby (wal_consistency_checking).
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SpindleTest;

my ($primary, $standby) = standby_pair('tsa_',
	"spindle.enable_worker = off\nspindle.compaction_threshold = 0\n"
	  . "autovacuum = off\nspindle.test_tree_fanout = 4\n"
	  . "log_min_messages = debug1\n"
	  . "wal_consistency_checking = 'all,spindle'\nwal_keep_size = '256MB'\n");
my $q = sub { $primary->safe_psql('postgres', $_[0]) };

$q->(q{
CREATE EXTENSION pageinspect;
SELECT spindle.create_queue('ta', 10);
SELECT spindle.enqueue('ta', '{}');
});

# Pages of the consumer relation that no tree in use, no free list and no
# metapage holds: a tree set aside counts as held by none, so this is 0
# only when none is left set aside.
my $lost_q = lost_pages_sql('spindle_q.ta', 63);
my $tree_q = q{SELECT height || ' ' || pages || ' ' || runs || ' ' || problems::text
                 FROM spindle._run_verify('spindle_q.ta', 9)};

is($q->($lost_q), '0', 'at first every page is a tree\'s, free or the metapage');

# Tree 9: 400 runs, four to a page.
$q->(q{SELECT spindle._run_upsert('spindle_q.ta', 9, 1000, 1, count => 400, stride => 10)});
like($q->($tree_q), qr/^\d+ (\d+) 400 \{\}$/, 'tree 9: 400 runs');
my ($pages9) = $q->($tree_q) =~ /^\d+ (\d+) /;
cmp_ok($pages9, '>', 100, "tree 9 takes $pages9 pages");

# Stop a writer at a pause point and crash the server there.
sub crash_at
{
	my ($point, $sql) = @_;
	crash_at_pause($primary, $point, $sql);
}

# ---- a drop stopped halfway --------------------------------------------------
crash_at('tree_retire_half', q{SELECT spindle._run_drop('spindle_q.ta', 9)});
is($q->($tree_q), '0 0 0 {}', 'after the crash: tree 9 is dropped (the metapage names none)');
my $lost1 = $q->($lost_q);
cmp_ok($lost1, '>=', $pages9 / 2 - 2,
	"after the crash: $lost1 pages held by no tree in use (the rest set aside)");

# ---- the reclaim stopped halfway too ------------------------------------------
crash_at('tree_reclaim_half',
	q{SELECT spindle._run_upsert('spindle_q.ta', 9, 5, 1)});
my $lost2 = $q->($lost_q);
cmp_ok($lost2, '<', $lost1, "a reclaim stopped halfway gave back some: $lost2 left");
cmp_ok($lost2, '>', 0, 'and left the rest set aside');

# ---- the next tree of that number gives the rest back ----------------------------
$q->(q{SELECT spindle._run_upsert('spindle_q.ta', 9, 5, 1)});
is($q->($lost_q), '0', 'the next tree 9 gave back the rest: no page held by nothing');
is($q->($tree_q), '1 1 1 {}', 'tree 9 holds the one new run');
is($q->(q{SELECT string_agg(first || ':' || len, ',') FROM spindle._run_scan('spindle_q.ta', 9, 0, 100000)}),
	'5:1', 'tree 9 has exactly the run written after the crashes');

# ---- the consume log: a rebuild's swap stopped halfway, then settle -------------
$q->(q{
CREATE PROCEDURE ta_fill(nspindles int)
LANGUAGE plpgsql AS $$
BEGIN
  FOR s IN 1 .. nspindles LOOP
    PERFORM spindle.enqueue('ta', '{}') FROM generate_series(1, 10);
    COMMIT;
    FOR i IN 1 .. 10 LOOP
      PERFORM spindle.dequeue('ta', 1);
      COMMIT;
    END LOOP;
  END LOOP;
END $$;
SELECT count(*) FROM spindle.dequeue('ta', 1);
CALL ta_fill(60);
SELECT spindle.enqueue('ta', '{}') FROM generate_series(1, 10);
});
# a spindle whose first event is leased (the floor stops there), five
# consumed, four waiting; then 20 more spindles consumed: their 200
# entries stay in the log (above the floor), which is rebuilt in bulk over
# several levels (four entries a page)
$q->(q{SELECT count(*) FROM spindle.read('ta', 1, '1 day')});
$q->(q{SELECT count(*) FROM spindle.dequeue('ta', 1)}) for 1 .. 5;
$q->(q{CALL ta_fill(20)});
cmp_ok($q->(q{SELECT spindle.drop_spindles('spindle_q.ta')}), '>=', 70,
	'the consumed spindles dropped');
my $log_pages = $q->(q{SELECT pages FROM spindle._run_verify('spindle_q.ta', 2)});
cmp_ok($log_pages, '>', 240, "the consume log holds $log_pages pages");
# what the rebuilt log must hold: the entries at or above the oldest
# spindle's first id, the leased event's
my $kept_q = q{SELECT count(*) || ':' || md5(string_agg(s::text, ',' ORDER BY first))
  FROM spindle._run_scan('spindle_q.ta', 2, (SELECT min(msg_id) FROM spindle_q.ta),
                         9223372036854775807) s};
my $kept = $q->($kept_q);
like($kept, qr/^(20[5-9]|21\d):/, "the entries to keep: $kept");
crash_at('tree_retire_half', q{SELECT spindle._settle('spindle_q.ta')});
my ($h, $p, $r, $problems) = split / /, $q->(
	q{SELECT height || ' ' || pages || ' ' || runs || ' ' || problems::text
	    FROM spindle._run_verify('spindle_q.ta', 2)});
cmp_ok($p, '<', $log_pages,
	"after the crash: the rebuilt log is the one in use ($p pages)");
cmp_ok($h, '>=', 3, "it was loaded over $h levels");
is($problems, '{}', 'the rebuilt log is a well-formed tree');
is($q->(q{SELECT count(*) || ':' || md5(string_agg(s::text, ',' ORDER BY first))
            FROM spindle._run_scan('spindle_q.ta', 2, -9223372036854775808,
                                   9223372036854775807) s}),
	$kept, 'it holds exactly the entries to keep');
cmp_ok($q->($lost_q), '>', 10,
	'after the crash: the old log\'s other half is held by no tree in use');
$q->(q{SELECT spindle._settle('spindle_q.ta')});
is($q->($lost_q), '0', 'the next settle gave it back');
is($q->(q{SELECT count(*) FROM spindle.verify('spindle_q.ta')}), '0',
	'verify() is clean');
is($q->(q{SELECT count(*) FROM spindle_q.ta}), '5',
	'plain SQL: the leased event and the four waiting');
is($q->(q{SELECT count(*) FROM spindle.dequeue('ta', 10)}), '4',
	'the four waiting are dequeued, no consumed one again');

# ---- the standby replayed it all ---------------------------------------------
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', $lost_q), '0',
	'the standby: no page held by nothing');
is($standby->safe_psql('postgres', $tree_q), '1 1 1 {}',
	'the standby: the same tree 9');
my $log_q = q{SELECT count(*) || ':' || coalesce(md5(string_agg(s::text, ',' ORDER BY first)), '')
  FROM spindle._run_scan('spindle_q.ta', 2, -9223372036854775808, 9223372036854775807) s};
is($standby->safe_psql('postgres', $log_q), $q->($log_q),
	'the standby: the same consume log');
ok(!$standby->log_contains(qr/inconsistent page found/),
	'no inconsistent page on the standby');

$standby->stop;
$primary->stop;
done_testing();
