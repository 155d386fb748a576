# Compaction by the worker alone (docs/design.md, "Compaction of sparse
# spindles", "Step 4 as built"): with spindle.compaction_threshold set, the
# worker moves the few parked survivors of full spindles of a queue table
# into an annex and then drops those spindles by the usual rule, so the
# table's size falls.  A crash (`pg_ctl -m immediate`) right after the
# first moves committed loses nothing and doubles nothing: plain SQL sees
# every live event exactly once, verify() is clean, and the worker goes
# on once a consumer call rebuilt the queue's state.  A streaming standby
# sees the same rows.  Nothing consumes a moved event (consumers following
# moves is another step): plain SQL, verify() and sizes only.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SpindleTest;

# compaction off at first (it is on by default): the spindles must stay
# full until the test turns it on
my ($primary, $standby) = standby_pair('',
	"spindle.naptime = 100\nautovacuum = off\nspindle.compaction_threshold = 0\n");

# 12 spindles of 20 events; every tenth event is delayed a day, the rest
# are consumed: 2 live of 20 (a tenth) in each full spindle, all parked
$primary->safe_psql(
	'postgres', q{
SELECT spindle.create_queue('cw', 20);
CREATE INDEX cw_msg_id ON spindle_q.cw (msg_id);
SELECT count(spindle.enqueue('cw', jsonb_build_object('n', g, 'pad', repeat('x', 200)),
         CASE WHEN g % 10 = 0 THEN interval '1 day' ELSE interval '0' END))
  FROM generate_series(1, 240) g;
SELECT count(*) FROM spindle.dequeue('cw', 216);
});
my $rows_q = q{SELECT count(*) || ':' || string_agg(msg_id::text, ',' ORDER BY msg_id)
  FROM spindle_q.cw};
my $want = $primary->safe_psql('postgres', $rows_q);
like($want, qr/^24:10,20,30,/, 'the 24 delayed events stay');
my $full_q = q{SELECT count(*) FROM spindle.spindles
  WHERE relation = 'spindle_q.cw'::regclass AND state = 'full'};

# the worker alone drops nothing: every full spindle has live events
ok( defined wait_for(
		$primary, 'postgres',
		q{SELECT count(filled_at) >= 11 FROM spindle.spindle_catalog
		   WHERE relation = 'spindle_q.cw'::regclass}, 60),
	'the worker recorded the fill times');
my $size_before = $primary->safe_psql('postgres',
	q{SELECT size_bytes FROM spindle.tables WHERE relation = 'spindle_q.cw'::regclass});
cmp_ok($primary->safe_psql('postgres', $full_q), '>=', 11,
	'full spindles stay while compaction is off');

# turn compaction on; crash as soon as the first moves committed
$primary->safe_psql('postgres',
	q{ALTER SYSTEM SET spindle.compaction_threshold = 0.25; SELECT pg_reload_conf()});
ok( defined wait_for(
		$primary, 'postgres',
		q{SELECT coalesce(sum(events_moved), 0) > 0 FROM spindle.worker}, 60, 10),
	'the worker moved events');
$primary->stop('immediate');
$primary->start;
is($primary->safe_psql('postgres', $rows_q), $want,
	'after the crash plain SQL sees every live event once');
verify_ok($primary, 'postgres', 'spindle_q.cw', 'after the crash verify() is clean');

# a consumer call rebuilds the queue's state (nothing is due); the worker
# then goes on until no full spindle is left
is($primary->safe_psql('postgres',
		q{SELECT count(*) FROM spindle.dequeue('cw', 1)}),
	'0', 'nothing is due');
ok( defined wait_for($primary, 'postgres', "SELECT ($full_q) = 0", 120),
	'the worker compacted and dropped every sparse spindle');
is($primary->safe_psql('postgres', $rows_q), $want,
	'plain SQL sees every live event once after the drops');
is($primary->safe_psql('postgres',
		q{SELECT count(*) >= 2 AND bool_and(generation = 1) FROM spindle.spindles
		   WHERE relation = 'spindle_q.cw'::regclass AND state = 'annex'}),
	't', 'the survivors live in annexes of generation 1');
my $size_after = $primary->safe_psql('postgres',
	q{SELECT size_bytes FROM spindle.tables WHERE relation = 'spindle_q.cw'::regclass});
cmp_ok($size_after, '<', $size_before / 2, "the table shrank ($size_before -> $size_after bytes)");
verify_ok($primary, 'postgres', 'spindle_q.cw', 'verify() is clean');
cmp_ok($primary->safe_psql('postgres',
		q{SELECT sum(spindles_emptied) FROM spindle.worker}),
	'>=', 1, 'spindle.worker counts the spindles emptied');

# the standby sees the same rows, by a sequential and an index scan
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', $rows_q), $want,
	'the standby sees every live event once');
is($standby->safe_psql('postgres',
		"SET enable_seqscan = off; SET enable_bitmapscan = off; $rows_q"),
	$want, 'the standby sees them by the index too');
verify_ok($standby, 'postgres', 'spindle_q.cw', 'verify() is clean on the standby');

done_testing();
