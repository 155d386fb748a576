# The event cache (src/queue/cache.c).
#
#  1. The same queue scenario on two servers, one with the cache at its
#     default and one with spindle.cache_size = 0, gives the same output,
#     row for row (msg_ids, payloads, read counts, what is left): the cache
#     changes no result.  The scenario crosses spindles and has rolled-back
#     dequeues and acks, leases, set_visibility, DELETE, UPDATE,
#     purge_expired, an aborted producer, a delayed event and payloads
#     cached by location only (large, out of line).
#     A small cache (100) over spindles of 30 keeps a ring across spindle
#     boundaries: a consumer 90 events behind hits every event.
#  2. After a restart the cache is empty and is filled again by new
#     enqueues; events enqueued before the restart are still delivered
#     (misses), with no stale entry.
#  3. TRUNCATE of a cached queue and DROP of it, then a new queue with the
#     same name (whose msg_ids are the old ones again): consumers get only
#     the new events.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my %node;
for my $mode ('on', 'off')
{
	my $n = PostgreSQL::Test::Cluster->new("cache_$mode");
	$n->init;
	$n->append_conf(
		'postgresql.conf', q{
shared_preload_libraries = 'spindle'
max_worker_processes = 16
# the scenario drops spindles itself
spindle.enable_worker = off
autovacuum = off
});
	$n->append_conf('postgresql.conf', 'spindle.cache_size = 0')
	  if $mode eq 'off';
	$n->start;
	$n->safe_psql('postgres', 'CREATE EXTENSION spindle');
	$node{$mode} = $n;
}
is($node{on}->safe_psql('postgres', 'SHOW spindle.cache_size'),
	'10000', 'cache on at its default size');
is($node{off}->safe_psql('postgres', 'SHOW spindle.cache_size'),
	'0', 'cache off');

# ---- 1. the same scenario, cache on and off ------------------------------
my $scenario = q{
\pset footer off
SELECT spindle.create_queue('sq', events_per_spindle => 7);
SELECT spindle.create_queue('sq_dead');
SELECT count(*) FROM spindle.enqueue_batch('sq',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 30) g));
SELECT msg_id, payload, read_count FROM spindle.dequeue('sq', 4);
BEGIN;
SELECT msg_id, payload FROM spindle.dequeue('sq', 3);
ROLLBACK;
BEGIN;
SELECT msg_id, payload FROM spindle.dequeue('sq', 2);
SAVEPOINT s;
SELECT msg_id, payload FROM spindle.dequeue('sq', 2);
ROLLBACK TO SAVEPOINT s;
SELECT msg_id, payload FROM spindle.dequeue('sq', 1);
COMMIT;
-- leases
SELECT msg_id, payload, read_count FROM spindle.read('sq', 3, '1 hour');
SELECT spindle.set_visibility('sq', (SELECT min(msg_id) FROM spindle_q.sq), '0');
SELECT msg_id, payload, read_count FROM spindle.read('sq', 2, '1 hour');
BEGIN;
SELECT * FROM spindle.ack('sq', ARRAY(SELECT msg_id FROM spindle_q.sq ORDER BY msg_id LIMIT 2));
ROLLBACK;
SELECT * FROM spindle.ack('sq', ARRAY(SELECT msg_id FROM spindle_q.sq ORDER BY msg_id LIMIT 1));
SELECT spindle.ack('sq', (SELECT min(msg_id) FROM spindle_q.sq));
-- plain SQL on cached events
DELETE FROM spindle_q.sq WHERE (payload->>'n')::int IN (14, 15, 21);
UPDATE spindle_q.sq SET payload = '{"n": "updated 16"}' WHERE payload->>'n' = '16';
BEGIN;
SELECT count(*) FROM spindle.enqueue_batch('sq', ARRAY['{"n": "aborted 1"}', '{"n": "aborted 2"}']::jsonb[]);
ROLLBACK;
SELECT spindle.enqueue('sq', '{"n": "delayed"}', delay => '1 hour') > 0 AS delayed;
SELECT spindle.enqueue('sq', jsonb_build_object('n', 'big', 'pad', repeat('p', 2000))) > 0 AS big;
SELECT spindle.enqueue('sq', jsonb_build_object('n', 'huge',
    'pad', (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 20000) g))) > 0 AS huge;
SELECT msg_id, payload->'n' AS n, length(payload->>'pad') AS pad, read_count
  FROM spindle.dequeue('sq', 12);
-- dead letters: read past max_reads
SELECT spindle.create_queue('sm', max_reads => 1, dead_letter_queue => 'sq_dead');
SELECT count(*) FROM spindle.enqueue_batch('sm', ARRAY['{"m": 1}', '{"m": 2}']::jsonb[]);
SELECT msg_id, payload, read_count FROM spindle.read('sm', 2, '0');
SELECT msg_id, payload, read_count FROM spindle.read('sm', 2, '0');
SELECT msg_id, payload, read_count FROM spindle.dequeue('sq_dead', 5);
-- time to live, on a queue of its own (it purges everything older)
SELECT spindle.create_queue('st');
SELECT count(*) FROM spindle.enqueue_batch('st', ARRAY['{"t": "old 1"}', '{"t": "old 2"}']::jsonb[]);
SELECT pg_sleep(2.2);
SELECT spindle.enqueue('st', '{"t": "young"}') > 0 AS young;
SELECT spindle.purge_expired('spindle_q.st', '1 second') AS expired;
SELECT msg_id, payload, read_count FROM spindle.dequeue('st', 10);
SELECT spindle.enqueue('sq', '{"n": "last"}') > 0 AS last;
SELECT spindle.drop_spindles('spindle_q.sq') >= 0 AS dropped;
SELECT msg_id, payload->'n' AS n, read_count FROM spindle.dequeue('sq', 100);
SELECT msg_id, payload->'n' AS n FROM spindle_q.sq ORDER BY msg_id;
SELECT count(*) AS leased FROM spindle.read('sq', 100, '1 hour');
};

my %out;
for my $mode ('on', 'off')
{
	my ($ret, $stdout, $stderr) =
	  $node{$mode}->psql('postgres', $scenario, on_error_stop => 1);
	is($ret, 0, "scenario runs with the cache $mode")
	  or diag($stderr);
	$out{$mode} = $stdout;
	note("output with the cache $mode:\n$stdout");
}
ok(scalar(split /\n/, $out{on}) > 60, 'the scenario printed its results');
is($out{on}, $out{off}, 'same results with the cache on and off');

# the cache was used on one server and not on the other
my $on_stats = $node{on}->safe_psql('postgres',
	"SELECT hits > 0, capacity FROM spindle.cache_stats WHERE relation = 'spindle_q.sq'::regclass"
);
is($on_stats, 't|10000', 'cache on: hits');
is( $node{off}->safe_psql(
		'postgres',
		"SELECT count(*) FILTER (WHERE capacity > 0 OR hits > 0), count(*) FROM spindle.cache_stats"
	),
	'0|4',
	'cache off: no table has a cache');

# A small cache across spindle boundaries: a consumer 90 events behind,
# in a cache of 100, over spindles of 30, hits every event (entries of a
# new spindle follow those of the last one, they do not overwrite them).
my $small = $node{off};
$small->append_conf('postgresql.conf', 'spindle.cache_size = 100');
$small->restart;
$small->safe_psql(
	'postgres', q{
SELECT spindle.create_queue('bq', events_per_spindle => 30);
SELECT count(*) FROM spindle.enqueue_batch('bq',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 45) g));
SELECT count(*) FROM (SELECT spindle.enqueue('bq', jsonb_build_object('n', g))
                        FROM generate_series(46, 90) g) s;
});
is( $small->safe_psql(
		'postgres',
		"SELECT entries, evictions, capacity FROM spindle.cache_stats WHERE relation = 'spindle_q.bq'::regclass"
	),
	'90|0|100',
	'90 events over 3 spindles in a cache of 100: none evicted');
is( $small->safe_psql(
		'postgres',
		"SELECT string_agg(payload->>'n', ',' ORDER BY msg_id) FROM spindle.dequeue('bq', 100)"
	),
	join(',', 1 .. 90),
	'all delivered in order');
is( $small->safe_psql(
		'postgres',
		"SELECT hits, misses FROM spindle.cache_stats WHERE relation = 'spindle_q.bq'::regclass"
	),
	'90|0',
	'all hits');
# 150 more: the oldest 50 are pushed out before anyone takes them
$small->safe_psql('postgres',
	"SELECT count(*) FROM spindle.enqueue_batch('bq', ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(91, 240) g))"
);
is( $small->safe_psql(
		'postgres',
		"SELECT count(*), min((payload->>'n')::int), max((payload->>'n')::int) FROM spindle.dequeue('bq', 1000)"
	),
	'150|91|240',
	'a consumer further behind than the cache gets everything');
is( $small->safe_psql(
		'postgres',
		"SELECT entries, evictions, hits, misses FROM spindle.cache_stats WHERE relation = 'spindle_q.bq'::regclass"
	),
	'0|50|190|50',
	'from the cache for the newest 100, from the table for the rest');
$small->stop;

# ---- 2. restart ----------------------------------------------------------
my $n = $node{on};
$n->safe_psql(
	'postgres', q{
SELECT spindle.drop_queue('sq');
SELECT spindle.drop_queue('sm');
SELECT spindle.drop_queue('sq_dead');
SELECT spindle.drop_queue('st');
SELECT spindle.create_queue('rq', events_per_spindle => 40);
SELECT count(*) FROM spindle.enqueue_batch('rq',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 100) g));
});
is( $n->safe_psql(
		'postgres',
		"SELECT entries, capacity FROM spindle.cache_stats WHERE relation = 'spindle_q.rq'::regclass"
	),
	'100|10000',
	'100 events cached before the restart');
$n->restart;
is( $n->safe_psql(
		'postgres',
		"SELECT entries, capacity, hits, misses FROM spindle.cache_stats WHERE relation = 'spindle_q.rq'::regclass"
	),
	'0|0|0|0',
	'after a restart the cache is empty');
is( $n->safe_psql(
		'postgres',
		"SELECT string_agg(payload->>'n', ',' ORDER BY msg_id) FROM spindle.dequeue('rq', 50)"
	),
	join(',', 1 .. 50),
	'events enqueued before the restart are delivered');
$n->safe_psql('postgres',
	"SELECT count(*) FROM spindle.enqueue_batch('rq', ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(101, 110) g))"
);
is( $n->safe_psql(
		'postgres',
		"SELECT entries FROM spindle.cache_stats WHERE relation = 'spindle_q.rq'::regclass"
	),
	'10',
	'new enqueues fill the cache again');
is( $n->safe_psql(
		'postgres',
		"SELECT string_agg(payload->>'n', ',' ORDER BY msg_id) FROM spindle.dequeue('rq', 100)"
	),
	join(',', 51 .. 110),
	'all the rest delivered, in order');
is( $n->safe_psql(
		'postgres',
		"SELECT entries, hits, misses FROM spindle.cache_stats WHERE relation = 'spindle_q.rq'::regclass"
	),
	'0|10|50',
	'old events were misses, new ones hits');

# ---- 3. TRUNCATE, DROP and a new queue of the same name --------------------
$n->safe_psql('postgres',
	"SELECT count(*) FROM spindle.enqueue_batch('rq', ARRAY(SELECT jsonb_build_object('old', g) FROM generate_series(1, 20) g))"
);
$n->safe_psql('postgres', 'TRUNCATE spindle_q.rq');
is( $n->safe_psql(
		'postgres',
		"SELECT entries, capacity FROM spindle.cache_stats WHERE relation = 'spindle_q.rq'::regclass"
	),
	'0|0',
	'TRUNCATE empties the table\'s cache');
$n->safe_psql('postgres',
	"SELECT count(*) FROM spindle.enqueue_batch('rq', ARRAY(SELECT jsonb_build_object('new', g) FROM generate_series(1, 5) g))"
);
is( $n->safe_psql(
		'postgres',
		"SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle.dequeue('rq', 100)"
	),
	join(',', map { qq({"new": $_}) } 1 .. 5),
	'after TRUNCATE only the new events');

# a queue dropped with cached events, and a new one of another name (one
# of the same name never gives the old msg_ids again: queue_review_registry):
# its msg_ids start at the same values as the old queue's
my $old_ids = $n->safe_psql(
	'postgres', q{
SELECT spindle.create_queue('dq', events_per_spindle => 10);
SELECT string_agg(id::text, ',') FROM spindle.enqueue_batch('dq',
    ARRAY(SELECT jsonb_build_object('old', g) FROM generate_series(1, 8) g)) id;
});
$n->safe_psql('postgres', "SELECT spindle.drop_queue('dq')");
is($n->safe_psql('postgres', 'SELECT count(*) FROM spindle._cache_stats()'),
	'1', 'the dropped queue\'s cache slot is free');
my $new_ids = $n->safe_psql(
	'postgres', q{
SELECT spindle.create_queue('dq2', events_per_spindle => 10);
SELECT string_agg(id::text, ',') FROM spindle.enqueue_batch('dq2',
    ARRAY(SELECT jsonb_build_object('new', g) FROM generate_series(1, 3) g)) id;
});
$old_ids =~ s/.*\n//s;
$new_ids =~ s/.*\n//s;
is($new_ids, join(',', (split /,/, $old_ids)[ 0 .. 2 ]),
	'the new queue reuses the old msg_ids');
is( $n->safe_psql(
		'postgres',
		"SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle.dequeue('dq2', 100)"
	),
	join(',', map { qq({"new": $_}) } 1 .. 3),
	'the new queue delivers only its own events');
is( $n->safe_psql(
		'postgres',
		"SELECT entries, hits, misses FROM spindle.cache_stats WHERE relation = 'spindle_q.dq2'::regclass"
	),
	'0|3|0',
	'from its own cache entries');

$n->stop;
done_testing();
