# msg_ids across pg_dump and pg_restore (from a review of 16b6cac).
# DESIGN.md: "msg_ids are never reused for a queue name: not after
# drop_queue + create_queue, TRUNCATE or a restore.  An ack of a stale id
# acks nothing".  The restored events get new ids, above every id the
# dumped queue gave: its name's floor is dumped, and loading it renumbers
# the restored table's first spindles, made at CREATE TABLE before any
# data.  Before, the restore numbered them from 1 again, and a late ack of
# an id consumed before the dump purged an undelivered restored event.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('restore_ids');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'spindle'\n");
$node->start;

$node->safe_psql('postgres', 'CREATE DATABASE src');
$node->safe_psql('src', q{
CREATE EXTENSION spindle;
SELECT spindle.create_queue('r', 4);
SELECT count(spindle.enqueue('r', jsonb_build_object('n', g))) FROM generate_series(1, 10) g;
});
my $consumed = $node->safe_psql('src',
	q{SELECT string_agg(msg_id::text, ',' ORDER BY msg_id) FROM spindle.dequeue('r', 5)});
is($consumed, '1,2,3,4,5', 'five events consumed before the dump');

my $dump = $node->basedir . '/src.dump';
$node->command_ok(
	[ 'pg_dump', '-Fc', '-d', $node->connstr('src'), '-f', $dump ],
	'pg_dump');
$node->safe_psql('postgres', 'CREATE DATABASE dst');
$node->command_ok(
	[ 'pg_restore', '-d', $node->connstr('dst'), $dump ], 'pg_restore');

# a late ack of an id consumed before the dump acknowledges nothing ...
is($node->safe_psql('dst', q{SELECT spindle.ack('r', 3)}),
	'f', 'a stale id consumed before the dump acks nothing after the restore');
# ... and the five undelivered events are all still there
is($node->safe_psql('dst',
		q{SELECT string_agg(payload->>'n', ',' ORDER BY msg_id) FROM spindle_q.r}),
	'6,7,8,9,10', 'no restored event was purged by the stale ack');
cmp_ok($node->safe_psql('dst', q{SELECT min(msg_id) FROM spindle_q.r}),
	'>', 10, 'the restored events are numbered above every dumped id');

done_testing();
