# Many queues on one server (issue 18): 5 000 queues, each enqueued and
# consumed twice round, with a restart between the second round's enqueues
# and its dequeues.  spindle.max_open_spindles is lowered to 1 024 so that
# the queues with events far outnumber the slot counters (before their
# counters became evictable, the 1 025th queue's enqueue failed with "out
# of spindle slot counters"); 5 000 queues also pass spindle.max_queues
# (256) and each backend's directory cache.  Every event comes out exactly
# once, from its own queue, and spindle's shared memory is the same size
# before and after.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $nqueues = 5000;

my $node = PostgreSQL::Test::Cluster->new('many_queues');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle'
spindle.max_open_spindles = 1024
});
$node->start;
$node->safe_psql('postgres', q{
CREATE EXTENSION spindle;
CREATE TABLE got (queue int, q int, r int, msg_id bigint);
CREATE PROCEDURE make_queues(n int) LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..n LOOP
    PERFORM spindle.create_queue('q' || i);
    IF i % 1000 = 0 THEN COMMIT; END IF;
  END LOOP;
END $$;
-- one transaction per call, as clients do
CREATE PROCEDURE enq(r int, n int) LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..n LOOP
    PERFORM spindle.enqueue('q' || i, jsonb_build_object('q', i, 'r', r));
    COMMIT;
  END LOOP;
END $$;
CREATE PROCEDURE deq(n int) LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..n LOOP
    INSERT INTO got
      SELECT i, (payload->>'q')::int, (payload->>'r')::int, msg_id
        FROM spindle.dequeue('q' || i, 10);
    COMMIT;
  END LOOP;
END $$;
});

my $shm_query = q{
SELECT string_agg(name || '=' || size, ', ' ORDER BY name)
  FROM pg_shmem_allocations WHERE name LIKE 'spindle%'};
my $shm_before = $node->safe_psql('postgres', $shm_query);

$node->safe_psql('postgres', "CALL make_queues($nqueues)", timeout => 300);

# Each round's events came out once each, from their own queue.
sub check_round
{
	my ($r, $what) = @_;
	is( $node->safe_psql(
			'postgres', qq{
SELECT count(*), count(DISTINCT queue), count(DISTINCT (queue, msg_id)),
       count(*) FILTER (WHERE q <> queue)
  FROM got WHERE r = $r}),
		"$nqueues|$nqueues|$nqueues|0",
		"$what: each of the $nqueues events dequeued once, from its queue");
}

# round 1
my ($ret, $out, $err) =
  $node->psql('postgres', "CALL enq(1, $nqueues)", timeout => 300);
is($ret, 0, "round 1: $nqueues queues enqueued")
  or diag($err);
$node->safe_psql('postgres', "CALL deq($nqueues)", timeout => 300);
check_round(1, 'round 1');

# round 2, with a restart between the enqueues and the dequeues
($ret, $out, $err) =
  $node->psql('postgres', "CALL enq(2, $nqueues)", timeout => 300);
is($ret, 0, "round 2: $nqueues queues enqueued again")
  or diag($err);
my $shm_after = $node->safe_psql('postgres', $shm_query);
$node->restart;
$node->safe_psql('postgres', "CALL deq($nqueues)", timeout => 300);
check_round(2, 'round 2, after a restart');

# nothing is left, nothing came twice
$node->safe_psql('postgres', "CALL deq($nqueues)", timeout => 300);
is( $node->safe_psql(
		'postgres',
		'SELECT count(*), count(DISTINCT (queue, msg_id)) FROM got'),
	2 * $nqueues . '|' . 2 * $nqueues,
	'a third pass finds nothing left, and no msg_id came twice');

is($shm_after, $shm_before,
	"spindle's shared memory after using $nqueues queues is what it was at start"
);

$node->stop;
done_testing();
