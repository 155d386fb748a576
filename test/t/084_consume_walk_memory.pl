# A consumer walking over a long run of consumed events keeps no memory
# per event, and skips the events the consume log says are consumed
# (review rv3 of turn 4, session 10; queue.c, consume_now,
# attempt_context and skip_settled).  A lease on a queue's first event
# keeps the consume log from folding the entries of the events after it,
# so a queue state built from disk (after a restart) starts its head at
# the lease, and the first dequeue used to walk over every one of them,
# an attempt per claim: about 25 us and, until attempt_context, 4 KB of
# memory kept per event (1 000 000 events: 24 s and 4.2 GB; 16 800 000:
# the kernel killed the backend, and the server restarted).
#
# Queue walk: 100 000 events consumed by log entries behind a lease, one
# deleted by plain SQL among them.  After a restart the first dequeue
# moves its head over them by range reads of the log: it must deliver the
# next event reading a few thousand buffers at most (the walk read
# 1 802 931; with the gap, a look that found nothing there stopped the
# looks for the rest of the call, review rv5: 900 000).
#
# Queue xwalk: 100 000 events consumed by xmax (spindle.consume_log off:
# no log, so no look helps) behind a lease.  The first dequeue after the
# restart still walks them an attempt at a time; its backend must stay
# far below the 400 MB the old code reached, deliver the next event, and
# the next call must be quick.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

plan skip_all => 'needs /proc/<pid>/status (Linux)' unless -r "/proc/$$/status";

my $node = PostgreSQL::Test::Cluster->new('walk');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'spindle'
spindle.enable_worker = off
autovacuum = off
});
$node->start;
my $q = sub { $node->safe_psql('postgres', $_[0]) };
$q->(q{
CREATE EXTENSION spindle;
SELECT spindle.create_queue('walk', 1000000);
SELECT count(*) FROM spindle.enqueue_batch('walk',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 100010) g));
SELECT spindle.create_queue('xwalk', 1000000);
SELECT count(*) FROM spindle.enqueue_batch('xwalk',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 100010) g));
});
is($q->(q{SELECT payload->>'n' FROM spindle.read('walk', 1, '1 day')}), '1',
	'the first event leased');
# event 50000 deleted by plain SQL (xmax: a gap no log entry covers, as an
# aborted enqueue leaves too), the others of 2 .. 100001 consumed by log
# entries, one each (the test writer)
$q->(q{DELETE FROM spindle_q.walk WHERE payload->>'n' = '50000'});
$q->(q{
DO $$
DECLARE r record;
BEGIN
  FOR r IN SELECT msg_id FROM spindle_q.walk
            WHERE (payload->>'n')::int BETWEEN 2 AND 100001 ORDER BY msg_id LOOP
    PERFORM spindle._consume_log_write('spindle_q.walk', r.msg_id, 1);
  END LOOP;
END $$;
});
is($q->(q{SELECT count(*) FROM spindle_q.walk}), '10', 'plain SQL: the lease and nine waiting');
# xwalk: the same consumed by xmax
is($q->(q{SET spindle.consume_log = off;
	SELECT payload->>'n' FROM spindle.read('xwalk', 1, '1 day')}), '1',
	'xwalk: the first event leased');
$q->(q{SET spindle.consume_log = off;
	DO $$ BEGIN FOR i IN 1 .. 100 LOOP
	  PERFORM count(*) FROM spindle.dequeue('xwalk', 1000);
	END LOOP; END $$});
is($q->(q{SELECT count(*) FROM spindle_q.xwalk}), '10', 'xwalk: the lease and nine waiting');
is($q->(q{SELECT count(*) FROM spindle._run_scan('spindle_q.xwalk', 2, 0, 1000000000000)}),
	'0', 'xwalk has no consume log: its events went by xmax');
$node->restart;

# walk: the head moves over the log's entries, not an attempt per event
my $out = $q->(q{EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF)
	SELECT * FROM spindle.dequeue('walk', 1)});
my $buffers = 0;
$buffers += $1 while $out =~ /(?:hit|read)=(\d+)/g;
note "first dequeue of walk after the restart: $buffers buffers";
cmp_ok($buffers, '<', 5000,
	'the first dequeue after the restart skips 100 000 consumed events by the log (the walk read 1.8 million)');
is($q->(q{SELECT string_agg(payload->>'n', ',' ORDER BY msg_id) FROM spindle_q.walk}),
	'1,100003,100004,100005,100006,100007,100008,100009,100010',
	'it took the event after the consumed ones (plain SQL: the lease and the eight after it)');

# the dequeue runs while its backend's peak resident size is watched
$out = '';
my $deq = IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
		"SELECT pg_backend_pid() || ' ' || (SELECT string_agg(payload->>'n', ',') FROM spindle.dequeue('xwalk', 1))" ],
	'>', \$out);
my ($peak, $dpid) = (0, undef);
my $t0 = time();
while ($deq->pumpable && time() - $t0 < 300)
{
	$deq->pump_nb;
	$dpid //= $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE query LIKE '%spindle.dequeue(''xwalk''%' AND pid <> pg_backend_pid()"
	) || undef;
	if ($dpid && open(my $fh, '<', "/proc/$dpid/status"))
	{
		while (<$fh>)
		{
			$peak = $1 if /^VmHWM:\s+(\d+)/ && $1 > $peak;
		}
		close $fh;
	}
	usleep(100_000);
}
$deq->finish;
my $secs = time() - $t0;
my (undef, $got) = split / /, ($out =~ s/\s+$//r);
is($got, '100002', 'the first dequeue after the restart delivers the event after the walk');
note sprintf('first dequeue: %.1f s, its backend\'s peak resident size %d kB', $secs, $peak);
cmp_ok($peak, '>', 0, 'the backend was watched');
cmp_ok($peak, '<', 200 * 1024,
	'the walk over 100 000 consumed events keeps its backend under 200 MB (the old code: about 400 MB more)');
my $t1 = time();
is($q->(q{SELECT string_agg(payload->>'n', ',') FROM spindle.dequeue('xwalk', 1)}), '100003',
	'the next dequeue delivers the next event');
cmp_ok(time() - $t1, '<', 5, 'and is quick: the head moved past the walk');
is($q->(q{SELECT count(*) FROM spindle.verify('spindle_q.walk')}), '0', 'verify() is clean');
is($q->(q{SELECT count(*) FROM spindle.verify('spindle_q.xwalk')}), '0', 'verify() of xwalk is clean');

$node->stop;
done_testing();
