# Leases no longer come from a server-wide pool (review finding 2): they
# are parked on disk, so with spindle.max_leases at its minimum of 16 one
# queue holds 40 leases taken one call at a time and another queue's
# read() still leases; spindle.max_leases bounds only the runs read()
# calls still running are leasing, so a single read() of scattered events
# leases at most that many runs and leaves the rest for the next call,
# never failing while events wait.  Acknowledging or releasing one event
# of a lease works as before.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my $node = spindle_node('lease_pool', q{
spindle.max_leases = 16
});
$node->safe_psql('postgres', q{
SELECT spindle.create_queue('victim');
SELECT spindle.create_queue('hog');
SELECT spindle.create_queue('gaps');
SELECT count(*) FROM spindle.enqueue_batch('victim',
  ARRAY(SELECT jsonb_build_object('v', g) FROM generate_series(1, 6) g));
SELECT count(*) FROM spindle.enqueue_batch('hog',
  ARRAY(SELECT jsonb_build_object('h', g) FROM generate_series(1, 40) g));
SELECT count(*) FROM spindle.enqueue_batch('gaps',
  ARRAY(SELECT jsonb_build_object('g', g) FROM generate_series(1, 100) g));
DELETE FROM spindle_q.gaps WHERE msg_id % 2 = 0;
CREATE TABLE mine AS SELECT msg_id FROM spindle.read('victim', 3, '1 hour');
});
is($node->safe_psql('postgres', 'SELECT count(*) FROM mine'), '3',
	'victim: three events leased together (one lease)');

# the hog takes one lease per call: 40 leases, more than spindle.max_leases
my $hogged = $node->safe_psql('postgres', q{
DO $$ DECLARE n int; got int := 0; BEGIN
  FOR i IN 1 .. 40 LOOP
    SELECT count(*) INTO n FROM spindle.read('hog', 1, '1 hour');
    got := got + n;
  END LOOP;
  RAISE NOTICE 'hogged %', got;
END $$;
SELECT leased FROM spindle.queues WHERE queue_name = 'hog';});
is($hogged, '40', 'hog: 40 leases, one per call, with spindle.max_leases = 16');
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM spindle.read('victim', 3, '30 s')}),
	'3', 'victim: read() still leases the other three events');

# one read() of 50 scattered events leases at most 16 runs, then the rest
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM spindle.read('gaps', 50, '1 hour')}),
	'16', 'gaps: one read() of scattered events leases spindle.max_leases runs');
is($node->safe_psql('postgres', q{
DO $$ DECLARE n int; BEGIN
  FOR i IN 1 .. 10 LOOP
    SELECT count(*) INTO n FROM spindle.read('gaps', 50, '1 hour');
    EXIT WHEN n = 0;
  END LOOP;
END $$;
SELECT leased FROM spindle.queues WHERE queue_name = 'gaps'}),
	'50', 'gaps: the next calls lease the rest');

# the events of the victim's lease can still be acknowledged or released
is( $node->safe_psql('postgres',
		q{SELECT spindle.ack('victim', (SELECT min(msg_id) FROM mine))}),
	't', 'ack of one event of a lease works');
is( $node->safe_psql('postgres',
		q{SELECT spindle.set_visibility('victim', (SELECT max(msg_id) FROM mine), '0')}),
	't', 'set_visibility of one event of a lease works');
# the released event is there for a dequeue, the rest is leased
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM spindle.dequeue('victim', 10)}),
	'1', 'dequeue takes the released event only');
is( $node->safe_psql('postgres',
		q{SELECT spindle.ack('victim', (SELECT min(msg_id) + 1 FROM mine))}),
	't', 'the middle event of the lease is still leased, and acknowledged');
foreach my $q ('victim', 'hog', 'gaps')
{
	is($node->safe_psql('postgres', qq{SELECT count(*) FROM spindle.verify('spindle_q.$q')}),
		'0', "verify() finds nothing wrong with $q");
}

$node->stop;
done_testing();
