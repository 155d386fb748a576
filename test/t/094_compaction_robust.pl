# The worker's compaction under hostile or stuck tables (review rv1, F1
# and F2; docs/design.md "Step 4 as built: the relocator").
#
# F1: a table owner's index expression that sleeps 20 s only when it runs
# as the relocator does (search_path = pg_catalog, pg_temp) neither stalls
# the worker (another queue's consumed spindles are dropped within
# seconds) nor holds the table's locks for long (ACCESS EXCLUSIVE is had
# within a few seconds): the worker's compaction pass is cancelled by the
# statement timeout it arms (2 s), and the spindle is then left alone (one
# timeout, not one per round).
#
# F2: a sparse spindle whose live events are not parked is read once, not
# every round: its block reads (pg_statio) stop growing.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use SpindleTest;
use Time::HiRes qw(gettimeofday tv_interval usleep);

my $node = spindle_node('compaction_robust',
	"spindle.naptime = 100\nautovacuum = off\n"
	  . "spindle.compaction_threshold = 0.25\n");
my $q = sub { $node->safe_psql('postgres', $_[0]) };

# cs: spindle 1 (ids 1..10) keeps 3 and 7, delayed and parked; spindle 2
# is consumed; its index expression sleeps 20 s as the relocator
$q->(q{
CREATE FUNCTION sleepy(p jsonb) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF current_setting('search_path') = 'pg_catalog, pg_temp' THEN
    PERFORM pg_sleep(20);
  END IF;
  RETURN 1;
END $$;
SELECT spindle.create_queue('cs', 10);
CREATE INDEX cs_sleepy ON spindle_q.cs (sleepy(payload));
SELECT count(spindle.enqueue('cs', jsonb_build_object('n', g),
         CASE WHEN g IN (3, 7) THEN interval '1 day' ELSE interval '0' END))
  FROM generate_series(1, 25) g;
SELECT count(*) FROM spindle.dequeue('cs', 100);
});

# cp: spindle 1 keeps 9 and 10, live and never parked
$q->(q{
SELECT spindle.create_queue('cp', 10);
SELECT count(spindle.enqueue('cp', jsonb_build_object('n', g)))
  FROM generate_series(1, 25) g;
SELECT count(*) FROM spindle.dequeue('cp', 8);
});

# ok: an innocent queue, all consumed: the worker drops its full spindles
$q->(q{
SELECT spindle.create_queue('ok', 10);
SELECT count(spindle.enqueue('ok', jsonb_build_object('n', g)))
  FROM generate_series(1, 35) g;
SELECT count(*) FROM spindle.dequeue('ok', 100);
});

my $t0 = [gettimeofday];
$q->(q{ALTER SYSTEM SET spindle.enable_worker = on; SELECT pg_reload_conf()});

# F1: the worker goes on with the other tables
ok( defined wait_for(
		$node, 'postgres',
		q{SELECT count(*) = 0 FROM spindle.spindles
		   WHERE relation = 'spindle_q.ok'::regclass AND state = 'full'}, 15),
	'the worker dropped the innocent queue\'s spindles within seconds');

# the pass over cs was cancelled by the worker's own timeout
my $timeout_re =
  qr/LOG:  spindle worker: maintenance of table spindle_q\.cs failed: canceling statement due to statement timeout/;
sub timeouts
{
	my @m = slurp_file($node->logfile) =~ /$timeout_re/g;
	return scalar @m;
}
my $waited = 0;
$waited += 0.1, usleep(100_000) while timeouts() == 0 && $waited < 15;
cmp_ok(timeouts(), '>=', 1,
	'the compaction pass over the sleepy table timed out');

# ACCESS EXCLUSIVE on cs is had within a few seconds at any time
for my $try (1 .. 3)
{
	my ($ret, $out, $err) = $node->psql('postgres',
		q{SET lock_timeout = '4s'; BEGIN; LOCK TABLE spindle_q.cs IN ACCESS EXCLUSIVE MODE; ROLLBACK;});
	is($ret, 0, "ACCESS EXCLUSIVE on the sleepy table is had ($try)")
	  or diag($err);
	usleep(700_000);
}

# one timeout, not one per round: the spindle is remembered (60 s)
sleep 5;
is(timeouts(), 1, 'the sleepy spindle was tried once');

# nothing of cs moved, nothing lost
is($q->(q{SELECT string_agg(payload->>'n', ',' ORDER BY msg_id) FROM spindle_q.cs}),
	'3,7', 'the sleepy table keeps its events');
verify_ok($node, 'postgres', 'spindle_q.cs');

# F2: cp's spindle 1 was read once by the relocator, not every round
my $reads_q = q{SELECT heap_blks_read + heap_blks_hit FROM pg_statio_all_tables
  WHERE relid = (SELECT segment FROM spindle.spindle_catalog
                  WHERE relation = 'spindle_q.cp'::regclass
                  ORDER BY spindle_no LIMIT 1)};
my $r1 = $q->($reads_q);
sleep 3;
my $r2 = $q->($reads_q);
is($r2, $r1, 'a sparse spindle whose events are not parked is not read again');
is($q->(q{SELECT count(*) FROM spindle.spindles
           WHERE relation = 'spindle_q.cp'::regclass AND state = 'annex'}),
	'0', 'nothing of it moved');

# the worker is not stuck: a full consumed spindle of ok goes
$q->(q{SELECT count(spindle.enqueue('ok', jsonb_build_object('n', g)))
  FROM generate_series(1, 20) g;
SELECT count(*) FROM spindle.dequeue('ok', 100);});
ok( defined wait_for(
		$node, 'postgres',
		q{SELECT count(*) = 0 FROM spindle.spindles
		   WHERE relation = 'spindle_q.ok'::regclass AND state = 'full'}, 15),
	'the worker keeps dropping');

done_testing();
