# The parked trees' space follows what is parked (docs/design.md, "Parked
# delayed and leased events"; queue_parked.c, spindle_park_compact).  Runs
# leave trees 0 and 1 only by takes and cuts, and no tree frees a page
# alone, so while anything stayed parked (one lease that lasts, a
# reminder) their emptied leaves stayed: tree 1's keys (due times) only
# grow, and a queue read and acked beside one lasting lease grew its tree 1
# by some 24 pages each 30 000 events, for good.  Now the
# worker's settle rebuilds a tree that holds more than twice the pages its
# runs need.
#
# Checked: read + ack rounds beside a lasting lease and 50 reminders keep
# tree 1 within a bound round after round (it grew by the same amount each
# round before); the lease, the reminders and
# a reminder that comes due meanwhile are unchanged by the rebuilds
# (spindle.queues, delivery at the due time, once); a crash (-m immediate)
# after a rebuild changes nothing; verify() is clean.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SpindleTest;

my $node = spindle_node('parked_space',
	"spindle.enable_worker = off\nautovacuum = off\nlog_min_messages = debug1\n");
my $q = sub { $node->safe_psql('postgres', $_[0]) };

$q->(q{
SELECT spindle.create_queue('ra');
-- one lease that lasts a day
SELECT spindle.enqueue('ra', '{"lease":1}');
SELECT count(*) FROM spindle.read('ra', 1, '1 day');
-- 50 reminders due in an hour
SELECT count(*) FROM (SELECT spindle.enqueue('ra', jsonb_build_object('r', g),
    delay => (3600 + g) * interval '1 s') FROM generate_series(1, 50) g) x;
CREATE TABLE got (n int);
-- read + ack of ten events a call, each read a lease of a second
CREATE PROCEDURE ra_loop(calls int) LANGUAGE plpgsql AS $$
DECLARE ids bigint[];
BEGIN
  FOR i IN 1 .. calls LOOP
    PERFORM spindle.enqueue_batch('ra',
        ARRAY(SELECT '{"x":1}'::jsonb FROM generate_series(1, 10)));
    COMMIT;
    SELECT array_agg(msg_id) INTO ids FROM spindle.read('ra', 10, '1 s');
    COMMIT;
    PERFORM spindle.ack('ra', ids);
    COMMIT;
  END LOOP;
END $$;
});

my $crel_q = q{SELECT pg_relation_size(('pg_spindle.c' || 'spindle_q.ra'::regclass::oid)::regclass) / 8192};
my $tree1_q = q{SELECT pages FROM spindle._run_verify('spindle_q.ra', 1)};
my $state_q = q{SELECT delayed || ' ' || leased FROM spindle.queues WHERE queue_name = 'ra'};

my (@crel, @tree1);
for my $round (1 .. 4)
{
	$q->('CALL ra_loop(2000)');
	# the leases' references come due and are taken by the next calls
	sleep 2;
	$q->('CALL ra_loop(2)');
	# the worker's settle (a new session: its first look at the trees)
	$q->(q{SELECT spindle._settle('spindle_q.ra')});
	push @crel, $q->($crel_q);
	push @tree1, $q->($tree1_q);
}
note "consumer relation pages after each round: @crel; tree 1: @tree1";
cmp_ok($tree1[3], '<=', 12,
	"tree 1 stays small beside a lasting lease ($tree1[3] pages after 80 000 events)");
cmp_ok($tree1[3], '<=', $tree1[1],
	"tree 1 does not grow from round to round (@tree1[1 .. 3] pages)");
# (the consumer relation itself still grows here: the consume log keeps
# every entry above the lasting lease, which stops its fold)
is($q->(q{SELECT problems::text FROM spindle._run_verify('spindle_q.ra', 0)})
	  . $q->(q{SELECT problems::text FROM spindle._run_verify('spindle_q.ra', 1)}),
	'{}{}', 'both parked trees are well formed');
is($q->($state_q), '50 1', 'spindle.queues: 50 delayed, 1 leased');
is($q->(q{SELECT count(*) FROM spindle.read('ra', 100, '1 s')}), '0',
	'nothing is deliverable: the lease lasts, the reminders are not due');

# a crash halfway through giving back the old parked tree of a rebuild: the
# next settle gives the rest back (review rv11, F1: a tree just rebuilt is
# not sparse again for long, so its next rebuild was far away)
$q->('CREATE EXTENSION pageinspect');
my $lost_q = lost_pages_sql('spindle_q.ra', 4);
$q->('CALL ra_loop(2000)');
sleep 2;
$q->('CALL ra_loop(2)');
crash_at_pause($node, 'tree_retire_half', q{SELECT spindle._settle('spindle_q.ra')});
cmp_ok($q->($lost_q), '>', 0, 'after the crash: pages of the old tree held by none');
my $reclaim_from = -s $node->logfile;
$q->(q{SELECT spindle._settle('spindle_q.ra')});
is($q->($lost_q), '0', 'the next settle gave them back');
like(substr(slurp_file($node->logfile), $reclaim_from),
	qr/gave back \d+ pages of a tree left aside beside tree [01] /,
	'... those of a parked tree (0 or 1), by the compaction');
is($q->($state_q), '50 1', 'spindle.queues: still 50 delayed, 1 leased');

# a reminder due in three seconds, parked beside the others, a rebuild of
# the trees that takes made sparse again, a crash
$q->('CALL ra_loop(2000)');
sleep 2;
$q->('CALL ra_loop(2)');
$q->(q{SELECT spindle.enqueue('ra', '{"soon":1}', delay => '3 s');
	SELECT count(*) FROM spindle.dequeue('ra', 1)});
my $log_from = -s $node->logfile;
$q->(q{SELECT spindle._settle('spindle_q.ra')});
like(substr(slurp_file($node->logfile), $log_from),
	qr/parked trees of "[^"]+" rebuilt/, 'the settle rebuilt the parked trees');
$node->stop('immediate');
$node->start;
ok( $node->poll_query_until(
		'postgres',
		q{WITH d AS (INSERT INTO got SELECT 1 FROM spindle.dequeue('ra', 10)
		               WHERE payload ? 'soon' RETURNING 1)
		  SELECT (SELECT count(*) FROM d) + (SELECT count(*) FROM got) > 0}),
	'after a crash: the reminder due in three seconds is delivered');
is($q->(q{SELECT count(*) FROM got}), '1', 'once');
is($q->($state_q), '50 1', 'the other 50 reminders and the lease stay');
is($q->(q{SELECT count(*) FROM spindle.verify('spindle_q.ra')}), '0',
	'verify() is clean');

$node->stop;
done_testing();
