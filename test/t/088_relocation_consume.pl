# Consumers following moved events (docs/design.md, "Compaction of sparse
# spindles", section 4 "Consumers", "Step 3 as built") through a crash and
# on a streaming standby: delayed and leased events of a queue moved into
# annexes by the test-only spindle._relocate are acked and dequeued from
# the annexes after `pg_ctl -m immediate`, each exactly once; plain SQL on
# the standby shows exactly the events not consumed, before and after; a
# consumer purges an annex copy by xmax (the consume log holds event
# numbers only), which the standby replays.  verify() is clean on both.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SpindleTest;

my ($primary, $standby) = standby_pair('', "spindle.enable_worker = off\n");

# ids 1..4 and 5..8 in two spindles: 1 delayed, 2, 3 and 4 leased
$primary->safe_psql(
	'postgres', q{
SELECT spindle.create_queue('rt', 4);
SELECT spindle.enqueue('rt', '{"n": 1}', delay => '4 seconds');
SELECT spindle.enqueue('rt', jsonb_build_object('n', g)) FROM generate_series(2, 8) g;
SELECT count(*) FROM spindle.read('rt', 3, '1 hour');
SELECT spindle._create_annex('spindle_q.rt', 1);
SELECT spindle._create_annex('spindle_q.rt', 1);
BEGIN;
SELECT count(spindle._relocate('spindle_q.rt', i, 1)) FROM unnest(ARRAY[1, 2, 3, 5]) i;
COMMIT;
});
my $due = time() + 5;
my $left = q{SELECT coalesce(string_agg(msg_id::text || ':' || (payload->>'n'),
  ' ' ORDER BY msg_id), '') FROM spindle_q.rt};

is($primary->safe_psql('postgres', "SELECT spindle.ack('rt', 2)"),
	't', 'ack of a moved lease');
is($primary->safe_psql('postgres', $left),
	'1:1 3:3 4:4 5:5 6:6 7:7 8:8', 'the primary no longer sees it');
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', $left),
	'1:1 3:3 4:4 5:5 6:6 7:7 8:8', 'nor does the standby');

$primary->stop('immediate');
$primary->start;

is($primary->safe_psql('postgres', "SELECT spindle.ack('rt', 3)"),
	't', 'after a crash, ack of a moved lease');
is($primary->safe_psql('postgres', "SELECT spindle.ack('rt', 3)"),
	'f', 'once');
# 4's lease may or may not have reached the disk before the crash
$primary->safe_psql('postgres', "SELECT spindle.set_visibility('rt', 4, '0')");
sleep_until($due);
is( $primary->safe_psql(
		'postgres', q{
SELECT string_agg(msg_id::text || ':' || (payload->>'n'), ' ' ORDER BY msg_id)
  FROM spindle.dequeue('rt', 100)}),
	'1:1 4:4 5:5 6:6 7:7 8:8',
	'after a crash, moved and other events dequeued once each');
is($primary->safe_psql('postgres', 'SELECT count(*) FROM spindle.dequeue(\'rt\', 100)'),
	'0', 'nothing twice');
is($primary->safe_psql('postgres', $left), '', 'nothing left on the primary');
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', $left), '', 'nor on the standby');
verify_ok($primary, 'postgres', 'spindle_q.rt', 'primary: verify() is clean');
verify_ok($standby, 'postgres', 'spindle_q.rt', 'standby: verify() is clean');

$standby->stop;
$primary->stop;
done_testing();
