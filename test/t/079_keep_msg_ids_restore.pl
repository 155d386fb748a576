# A restore with spindle.keep_msg_ids keeps every event's msg_id.
# docs/queues.md "Dump and restore": PGOPTIONS='-c spindle.keep_msg_ids=on'
# pg_restore.  Without it a restore numbers the restored events anew, in
# load order (test 054); compaction will make load order differ from id
# order, and PGMQ users expect ids that survive a restore.
#
# The dumped queue has a consumed prefix (dequeued: purged), a gap inside a
# spindle (an acked lease), a leased event, and a jump to a later spindle
# (ids kept by an insert in the source already).  Restored with
# keep_msg_ids into a fresh database, the events have the same ids in the
# same order, survive a restart, and the consumers deliver exactly them;
# new events and a stale ack stay above and away from them.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my $node = spindle_node('keep_restore');

$node->safe_psql('postgres', 'CREATE DATABASE src');
$node->safe_psql('src', q{
CREATE EXTENSION spindle;
SELECT spindle.create_queue('r', 4);
SELECT count(spindle.enqueue('r', jsonb_build_object('n', g)))
  FROM generate_series(1, 10) g;
});
is($node->safe_psql('src',
		q{SELECT string_agg(msg_id::text, ',' ORDER BY msg_id) FROM spindle.dequeue('r', 3)}),
	'1,2,3', 'a prefix consumed before the dump');
is($node->safe_psql('src',
		q{SELECT string_agg(msg_id::text, ',' ORDER BY msg_id) FROM spindle.read('r', 2, '1 hour')}),
	'4,5', 'two events leased');
is($node->safe_psql('src', q{SELECT spindle.ack('r', 5)}), 't',
	'one acked: a gap in its spindle');
$node->safe_psql('src', q{
SET spindle.keep_msg_ids = on;
INSERT INTO spindle_q.r (msg_id, payload)
  VALUES (100, '{"n": 100}'), (101, '{"n": 101}');
RESET spindle.keep_msg_ids;
SELECT spindle.enqueue('r', '{"n": 102}');
});

my $ids_sql = q{SELECT string_agg(msg_id::text || ':' || (payload->>'n'), ','
  ORDER BY msg_id) FROM spindle_q.r};
my $before = $node->safe_psql('src', $ids_sql);
is($before, '4:4,6:6,7:7,8:8,9:9,10:10,100:100,101:101,102:102',
	'the dumped events');

my $dump = $node->basedir . '/keep.dump';
$node->command_ok(
	[ 'pg_dump', '-Fc', '-d', $node->connstr('src'), '-f', $dump ],
	'pg_dump');

# restored with keep_msg_ids into a fresh database
$node->safe_psql('postgres', 'CREATE DATABASE dst');
{
	local $ENV{PGOPTIONS} = '-c spindle.keep_msg_ids=on';
	$node->command_ok([ 'pg_restore', '-d', $node->connstr('dst'), $dump ],
		'pg_restore with keep_msg_ids');
}
is($node->safe_psql('dst', $ids_sql), $before,
	'the restored events keep their ids, in the same order');
verify_ok($node, 'dst', 'spindle_q.r');
my $depth_sql = q{SELECT depth FROM spindle.queues WHERE queue_name = 'r'};
is($node->safe_psql('dst', $depth_sql), '9',
	'the depth counts the events, not the skipped slots');

# for contrast: without it the ids change (test 054)
$node->safe_psql('postgres', 'CREATE DATABASE renumbered');
$node->command_ok(
	[ 'pg_restore', '-d', $node->connstr('renumbered'), $dump ],
	'pg_restore without keep_msg_ids');
isnt($node->safe_psql('renumbered', $ids_sql), $before,
	'without keep_msg_ids the ids are new');

# a restart after the restore: the counters are rebuilt from disk
$node->restart;
is($node->safe_psql('dst', $ids_sql), $before, 'the ids after a restart');
is($node->safe_psql('dst', $depth_sql), '9', 'and the depth');
is($node->safe_psql('dst', q{SELECT spindle.ack('r', 3)}), 'f',
	'a stale ack of an id consumed before the dump acks nothing');
is($node->safe_psql('dst',
		q{SELECT string_agg(msg_id::text, ',' ORDER BY msg_id) FROM spindle.dequeue('r', 100)}),
	'4,6,7,8,9,10,100,101,102',
	'the consumers deliver exactly the unconsumed events, by their ids');
cmp_ok($node->safe_psql('dst', q{SELECT spindle.enqueue('r', '{"n": "new"}')}),
	'>', 102, 'a new event is numbered above the restored ones');
verify_ok($node, 'dst', 'spindle_q.r');

# a kept id beyond an empty ready spindle: that spindle and the one before
# it (not full) are filled; after a restart, before any fill time is
# recorded, both still count as full, and the consumers go on past them
$node->safe_psql('dst', q{
SELECT spindle.create_queue('g', 4);
SELECT count(*) FROM spindle.enqueue_batch('g',
  ARRAY(SELECT jsonb_build_object('n', i) FROM generate_series(1, 5) i));
});
is($node->safe_psql('dst',
		q{SELECT count(*) FROM spindle.spindle_catalog
		   WHERE relation = 'spindle_q.g'::regclass}),
	'3', 'queue g: two spindles used, one ready');
my $gbase = $node->safe_psql('dst', q{SELECT min(msg_id) - 1 FROM spindle_q.g});
$node->safe_psql('dst', qq{
SET spindle.keep_msg_ids = on;
INSERT INTO spindle_q.g (msg_id, payload) VALUES ($gbase + 100, '{"n": 100}');
});
$node->restart;
is($node->safe_psql('dst',
		qq{SELECT string_agg((msg_id - $gbase)::text, ',' ORDER BY msg_id)
		   FROM spindle.dequeue('g', 10)}),
	'1,2,3,4,5,100', 'after a restart the consumers pass the filled spindles');
verify_ok($node, 'dst', 'spindle_q.g');
cmp_ok($node->safe_psql('dst', q{SELECT spindle.enqueue('g', '{"n": "new"}')}),
	'>', $gbase + 100, 'a new event goes after the kept one');

# and the dumped floor still holds: a drop + create numbers above it
$node->safe_psql('dst', q{SELECT spindle.drop_queue('r')});
$node->safe_psql('dst', q{SELECT spindle.create_queue('r', 4)});
cmp_ok($node->safe_psql('dst', q{SELECT spindle.enqueue('r', '{"n": "again"}')}),
	'>', 102, 'drop + create gives no restored id again');

# The worker makes a ready spindle after the one in use, numbered from
# the queue name's floor, which a restore loads before the events: one
# past every id being restored.  The kept ids below it move the empty
# spindle down to them.  (As pg_restore would load them, by hand to wait
# for the worker.)
$node->safe_psql('postgres', q{
ALTER SYSTEM SET spindle.enable_worker = on;
ALTER SYSTEM SET spindle.naptime = '100ms';
-- the lease below keeps its spindle, which the gap's move needs (with
-- none left below, the kept rows are numbered as usual: docs/design.md,
-- "Kept ids"); compaction would move the leased event and drop it
ALTER SYSTEM SET spindle.compaction_threshold = 0;
SELECT pg_reload_conf();
CREATE DATABASE jump;
});
$node->safe_psql('jump', q{
CREATE EXTENSION spindle;
SELECT spindle.create_queue('j', 4);
SET spindle.keep_msg_ids = on;
INSERT INTO spindle.queue_msg_id_floor VALUES ('j', 100000);
INSERT INTO spindle_q.j (msg_id, payload)
  SELECT i, jsonb_build_object('n', i) FROM generate_series(5, 8) i;
});
ok( defined wait_for(
		$node, 'jump', q{SELECT max(first_no) >= 100000
		  FROM spindle.spindle_catalog
		  WHERE relation = 'spindle_q.j'::regclass}, 60),
	'the worker made a ready spindle numbered from the floor');
# A consumer polls meanwhile (as an application may, during the restore):
# it leases 5 (so that its spindle stays) and delivers 6 to 8, which fill
# their spindle, and moves the queue's head on to the ready spindle, where
# it was numbered before the move.  The node is restarted (the next
# consumer rebuilds its state from disk); then a kept insert moves the
# spindle down below that head: every head goes back, and the kept
# events are delivered.
my $deq = q{SELECT coalesce(string_agg(msg_id::text, ',' ORDER BY msg_id), '')
  FROM spindle.dequeue('j', 20)};
is($node->safe_psql('jump',
		q{SELECT msg_id FROM spindle.read('j', 1, '1 hour')}),
	'5', 'a consumer leases the first restored event (its spindle stays)');
is($node->safe_psql('jump', $deq), '6,7,8',
	'and delivers the others of its spindle');
is($node->safe_psql('jump', $deq), '',
	'and polls on: its head moves to the ready spindle');
$node->restart;
$node->safe_psql('jump', q{
SET spindle.keep_msg_ids = on;
INSERT INTO spindle_q.j (msg_id, payload)
  SELECT i, jsonb_build_object('n', i) FROM generate_series(9, 12) i;
});
is($node->safe_psql('jump', $deq), '9,10,11,12',
	'kept below the head of before the restart: delivered');
# again, with the head moved in shared memory only
ok( defined wait_for(
		$node, 'jump', q{SELECT max(first_no) >= 100000
		  FROM spindle.spindle_catalog
		  WHERE relation = 'spindle_q.j'::regclass}, 60),
	'the worker made a ready spindle numbered from the floor again');
is($node->safe_psql('jump', $deq), '',
	'a consumer polls: its head moves to the ready spindle');
$node->safe_psql('jump', q{
SET spindle.keep_msg_ids = on;
INSERT INTO spindle_q.j (msg_id, payload)
  SELECT i, jsonb_build_object('n', i) FROM generate_series(13, 16) i;
});
is($node->safe_psql('jump',
		q{SELECT string_agg(msg_id::text, ',' ORDER BY msg_id) FROM spindle_q.j}),
	'5,13,14,15,16', 'ids below the ready spindle are kept (5 leased, 6 to 12 consumed)');
verify_ok($node, 'jump', 'spindle_q.j');
is($node->safe_psql('jump', $deq), '13,14,15,16', 'and delivered');
cmp_ok($node->safe_psql('jump', q{SELECT spindle.enqueue('j', '{"n": "new"}')}),
	'>', 16, 'a new event after them');

# The documented restore, with the worker on (it makes ready spindles
# from the restored floors while the events load): serially, several
# times, and in parallel (-j 2 sends a TRUNCATE before each COPY of a
# table it made).  Every id is compared.
$node->safe_psql('postgres', 'CREATE DATABASE src2');
$node->safe_psql('src2', q{
CREATE EXTENSION spindle;
SELECT spindle.create_queue('d1', 8);
SELECT spindle.create_queue('d2');
SELECT count(spindle.enqueue('d1', jsonb_build_object('i', g)))
  FROM generate_series(1, 100) g;
SELECT count(*) FROM spindle.dequeue('d1', 37);
BEGIN;
SELECT count(spindle.enqueue('d1', '{}')) FROM generate_series(1, 5) g;
ROLLBACK;
SELECT count(spindle.enqueue('d1', jsonb_build_object('j', g)))
  FROM generate_series(1, 50) g;
SELECT count(*) FROM spindle.enqueue_batch('d2',
  array(SELECT jsonb_build_object('k', g) FROM generate_series(1, 20000) g));
SELECT count(*) FROM spindle.dequeue('d2', 5000);
SELECT count(*) FROM spindle.enqueue_batch('d2',
  array(SELECT jsonb_build_object('k', g) FROM generate_series(1, 3000) g));
});
my $all_ids = q{SELECT md5(string_agg(msg_id::text || ':' || payload::text, ','
  ORDER BY msg_id)) || ' ' || count(*) FROM };
my %src_ids = map { $_ => $node->safe_psql('src2', $all_ids . "spindle_q.$_") }
  qw(d1 d2);
my $dump2 = $node->basedir . '/keep2.dump';
$node->command_ok(
	[ 'pg_dump', '-Fc', '-d', $node->connstr('src2'), '-f', $dump2 ],
	'pg_dump of two queues');
foreach my $run (1 .. 4, 'j')
{
	my $db = "rest_$run";
	my @par = $run eq 'j' ? ('-j', '2') : ();
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	{
		local $ENV{PGOPTIONS} = '-c spindle.keep_msg_ids=on';
		$node->command_ok(
			[ 'pg_restore', @par, '-d', $node->connstr($db), $dump2 ],
			"pg_restore $run with keep_msg_ids and the worker on");
	}
	foreach my $q (qw(d1 d2))
	{
		is($node->safe_psql($db, $all_ids . "spindle_q.$q"), $src_ids{$q},
			"restore $run: every id of $q kept");
	}
	verify_ok($node, $db, 'spindle_q.d1');
}

# Kept inserts beside ordinary producers: every kept id is kept (the
# kept slot is taken before the spindles before it count as full, so a
# producer sent on never takes it first).
$node->safe_psql('postgres', q{
CREATE DATABASE race;
});
$node->safe_psql('race', q{
CREATE EXTENSION spindle;
SELECT spindle.create_queue('st', 16);
CREATE TABLE made(id bigint, kind text);
CREATE SEQUENCE kseq;
});
my $prod = $node->basedir . '/prod.pgb';
my $keep = $node->basedir . '/kept.pgb';
open(my $fh, '>', $prod) or die;
print $fh "INSERT INTO made SELECT spindle.enqueue('st', '{}'), 'p';\n";
close $fh;
open($fh, '>', $keep) or die;
print $fh "SET spindle.keep_msg_ids = on;\n"
  . "WITH i AS (INSERT INTO spindle_q.st (msg_id, payload) VALUES "
  . "(nextval('kseq') * 100000, '{}') RETURNING msg_id) "
  . "INSERT INTO made SELECT msg_id, 'k' FROM i;\n";
close $fh;
$node->command_ok(
	[
		'pgbench', '-n', '-c', '3', '-j', '3', '-T', '6',
		'-f', "$prod\@2", '-f', "$keep\@1", $node->connstr('race')
	],
	'kept inserts beside two producers');
is($node->safe_psql('race',
		q{SELECT count(*) > 10 AND count(*) FILTER (WHERE id % 100000 <> 0) = 0
		  FROM made WHERE kind = 'k'}),
	't', 'every kept id was kept');
verify_ok($node, 'race', 'spindle_q.st');

done_testing();
