# From a review of 3c9a0bd (saved heads): consumers must never consume a queue in
# the transaction that truncated it ("the shared state must only ever know
# committed spindles", queue.c open_queue).  The check reads
# rd_newRelfilenodeSubid, which PostgreSQL forgets after TRUNCATE;
# SAVEPOINT; TRUNCATE; ROLLBACK TO (relcache.c: "or we have forgotten
# changing it"); rd_firstRelfilenodeSubid keeps it.  The dequeue then moves
# the shared head into the new storage's ids, and once the TRUNCATE rolls
# back the old storage's events lie behind the head, in no item: never
# delivered.  Before 3c9a0bd an eviction rebuilt the state from disk and
# healed this; now the evicted state leaves its head behind and only a
# restart does.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('forgotten_truncate');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle'
spindle.enable_worker = off
spindle.max_queues = 2
});
$node->start;
$node->safe_psql('postgres', q{
CREATE EXTENSION spindle;
SELECT spindle.create_queue('a');
SELECT spindle.create_queue('b');
SELECT spindle.create_queue('c');
SELECT spindle.enqueue('a', jsonb_build_object('n', g)) FROM generate_series(1, 3) g;
});

my ($ret, $out, $err) = $node->psql('postgres', q{
BEGIN;
TRUNCATE spindle_q.a;
SAVEPOINT s;
TRUNCATE spindle_q.a;
ROLLBACK TO s;
SELECT spindle.enqueue('a', '{"in_truncate": 1}');
SELECT count(*) FROM spindle.dequeue('a', 10);
ROLLBACK;
});
like($err, qr/cannot consume queue "a" in the transaction that created or truncated it/,
	'dequeue refused in the truncating transaction, also after a rolled-back savepoint');

# evict a's state (two states for three queues), then consume a
$node->safe_psql('postgres', q{
SELECT count(*) FROM spindle.dequeue('b', 1);
SELECT count(*) FROM spindle.dequeue('c', 1);
SELECT count(*) FROM spindle.dequeue('b', 1);
SELECT count(*) FROM spindle.dequeue('c', 1);
});
is($node->safe_psql('postgres',
		q{SELECT string_agg(payload->>'n', ',' ORDER BY msg_id) FROM spindle.dequeue('a', 10)}),
	'1,2,3', 'the events the rolled-back TRUNCATE left are delivered');

done_testing();
