# What a restart (clean or crash) must keep of a queue's consumer state,
# whatever the state is rebuilt from: (A) a delayed event that came due,
# was dequeued and rolled back; (B) a delayed event whose ack rolled back;
# (C) a range of 1 000 events a rolled-back dequeue held, 300 of them then
# leased for an hour one by one.  After a fast restart A's and B's events
# are delivered, and none of C's leased events is.  Written by the hostile
# review of the head kept on disk (docs/reviews/head-on-disk-review.md),
# which lost A and B and delivered C's leases early; that change was
# taken back, and these cases stay to hold any later one to them.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my $node = spindle_node('restart_due_and_leases',
	"autovacuum = off\nspindle.enable_worker = on\nspindle.naptime = 100ms\n");
my $q = sub { $node->safe_psql('postgres', $_[0]) };

# (A) a delayed event comes due, a dequeue takes it and rolls back
$q->(q{SELECT spindle.create_queue('a')});
$q->(q{SELECT spindle.enqueue('a', '{"e": 1}', '2 seconds')});
$q->(q{SELECT count(*) FROM spindle.enqueue_batch('a', ARRAY['{"e": 2}'::jsonb, '{"e": 3}'])});
is($q->(q{SELECT string_agg(payload->>'e', ',') FROM spindle.dequeue('a', 10)}), '2,3', 'A: e2, e3 consumed, e1 delayed');
sleep 3;
is($q->(q{BEGIN; SELECT string_agg(payload->>'e', ',') FROM spindle.dequeue('a', 10); ROLLBACK;}), '1', 'A: e1 due, dequeued, rolled back');

# (B) an ack of a delayed event rolls back
$q->(q{SELECT spindle.create_queue('b')});
$q->(q{SELECT spindle.enqueue('b', '{"e": 1}', '3 seconds')});
$q->(q{SELECT count(*) FROM spindle.enqueue_batch('b', ARRAY['{"e": 2}'::jsonb, '{"e": 3}'])});
is($q->(q{SELECT string_agg(payload->>'e', ',') FROM spindle.dequeue('b', 10)}), '2,3', 'B: e2, e3 consumed, e1 delayed');
sleep 1;
$q->(q{BEGIN; SELECT spindle.ack('b', (SELECT msg_id FROM spindle_q.b WHERE payload->>'e' = '1')); ROLLBACK;});

# (C) a range with more than 256 parked leases
$q->(q{SELECT spindle.create_queue('c')});
$q->(q{SELECT count(*) FROM spindle.enqueue_batch('c', ARRAY(SELECT jsonb_build_object('e', g) FROM generate_series(1, 1000) g))});
$q->(q{BEGIN; SELECT count(*) FROM spindle.dequeue('c', 1000); SELECT pg_sleep(1); ROLLBACK;});
$q->(q{SELECT count(*) FROM spindle.read('c', 1, '1 hour')}) for 1 .. 300;
is($q->(q{SELECT leased FROM spindle.queues WHERE queue_name = 'c'}), '300', 'C: 300 leased for an hour');
sleep 1;

$node->restart;    # a clean restart (fast)
sleep 4;
is($q->(q{SELECT string_agg(payload->>'e', ',') FROM spindle.dequeue('a', 10)}), '1', 'A: e1 delivered after the restart');
is($q->(q{SELECT string_agg(payload->>'e', ',') FROM spindle.dequeue('b', 10)}), '1', 'B: e1 delivered after the restart');
is($q->(q{SELECT count(*) FILTER (WHERE (payload->>'e')::int <= 300) FROM spindle.dequeue('c', 1000)}), '0', 'C: no leased event delivered');
$node->stop;
done_testing();
