# The server-wide lease budget (spindle.max_leases, here its minimum of
# 16) used up by one queue: review finding 2.  A read() of another queue
# then fails with 53400 instead of returning no rows with events waiting;
# acknowledging or releasing one event of a lease still works (splitting
# a lease leases no more events), so the error's advice can be followed.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('lease_pool');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle'
max_worker_processes = 16
spindle.enable_worker = off
spindle.max_leases = 16
});
$node->start;
$node->safe_psql('postgres', q{
CREATE EXTENSION spindle;
SELECT spindle.create_queue('victim');
SELECT spindle.create_queue('hog');
SELECT count(*) FROM spindle.enqueue_batch('victim',
  ARRAY(SELECT jsonb_build_object('v', g) FROM generate_series(1, 6) g));
SELECT count(*) FROM spindle.enqueue_batch('hog',
  ARRAY(SELECT jsonb_build_object('h', g) FROM generate_series(1, 40) g));
CREATE TABLE mine AS SELECT msg_id FROM spindle.read('victim', 3, '1 hour');
});
is($node->safe_psql('postgres', 'SELECT count(*) FROM mine'), '3',
	'victim: three events leased together (one lease)');

# the hog takes one lease per call until none is left
my $hogged = $node->safe_psql('postgres', q{
DO $$ DECLARE n int; got int := 0; BEGIN
  FOR i IN 1 .. 40 LOOP
    BEGIN
      SELECT count(*) INTO n FROM spindle.read('hog', 1, '1 hour');
      got := got + n;
    EXCEPTION WHEN configuration_limit_exceeded THEN EXIT;
    END;
  END LOOP;
  RAISE NOTICE 'hogged %', got;
END $$;
SELECT count(*) FROM spindle.queues WHERE queue_name = 'hog';});
my ($ret, $out, $err) = $node->psql('postgres',
	q{SELECT count(*) FROM spindle.read('victim', 3, '30 s')});
isnt($ret, 0, 'victim: a read() with no lease left fails ...');
like($err, qr/no room in shared memory for more leases/, '... with 53400, not an empty result');
is($node->safe_psql('postgres', 'SELECT count(*) FROM spindle_q.victim'),
	'6', 'victim: nothing was consumed by the failed read()');

# the events of the victim's lease can still be acknowledged or released
is( $node->safe_psql('postgres',
		q{SELECT spindle.ack('victim', (SELECT min(msg_id) FROM mine))}),
	't', 'ack of one event of a lease works with no lease left');
is( $node->safe_psql('postgres',
		q{SELECT spindle.set_visibility('victim', (SELECT max(msg_id) FROM mine), '0')}),
	't', 'set_visibility of one event of a lease works with no lease left');
# the released event and the three never read are there for a dequeue
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM spindle.dequeue('victim', 10)}),
	'4', 'dequeue takes the released event and the three never read');
is( $node->safe_psql('postgres',
		q{SELECT spindle.ack('victim', (SELECT min(msg_id) + 1 FROM mine))}),
	't', 'the middle event of the lease is still leased, and acknowledged');
is($node->safe_psql('postgres', q{SELECT count(*) FROM spindle.verify('spindle_q.victim')}),
	'0', 'verify() finds nothing');

$node->stop;
done_testing();
