# msg_ids across pg_dump and pg_restore, the harder cases (from a second
# review of the restore renumbering): the restored events must be
# numbered above every id the dumped queue gave.
# (1) a session holds the queue table while the data is loaded: loading
#     the floor waits for it, then renumbers;
# (2) a data-only restore with --disable-triggers: the floor rows load
#     beside those the schema restore wrote (a name's floor is their
#     greatest), and a dropped queue keeps its floor.  Without the trigger
#     the restored events are not renumbered (docs/queues.md says so);
# (3) a restored database dumped and restored again: the renumbering
#     raised the name's floor row too, so the second restore starts above
#     the ids the first restored database gave.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('restore_skipped');
$node->init;
# no worker: nothing makes a spindle (which raises the floor) on its own;
# with it, (3) holds only until its next pass made a ready spindle
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'spindle'\nspindle.enable_worker = off\n");
$node->start;

$node->safe_psql('postgres', 'CREATE DATABASE src');
$node->safe_psql('src', q{
CREATE EXTENSION spindle;
SELECT spindle.create_queue('r', 4);
SELECT spindle.create_queue('gone', 4);
SELECT count(spindle.enqueue('r', jsonb_build_object('n', g))) FROM generate_series(1, 10) g;
SELECT count(spindle.enqueue('gone', jsonb_build_object('n', g))) FROM generate_series(1, 10) g;
SELECT count(*) FROM spindle.dequeue('r', 5);
SELECT spindle.drop_queue('gone');
});
my $dump = $node->basedir . '/src.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-d', $node->connstr('src'), '-f', $dump ],
	'pg_dump');

# (1) a session holds the queue table while the data is loaded
$node->safe_psql('postgres', 'CREATE DATABASE dst1');
$node->command_ok([ 'pg_restore', '-s', '-d', $node->connstr('dst1'), $dump ],
	'schema restored');
my $holder = $node->background_psql('dst1');
$holder->query_safe('BEGIN; LOCK spindle_q.r IN ROW EXCLUSIVE MODE;');
my ($rout, $rerr) = ('', '');
my $restore = IPC::Run::start(
	[ 'pg_restore', '-a', '-d', $node->connstr('dst1'), $dump ],
	'>', \$rout, '2>', \$rerr, IPC::Run::timeout(180));
# the load waits for the holder
ok( defined wait_for(
		$node, 'dst1',
		q{SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'COPY%'},
		60),
	'the floor load waits for the session holding the queue table');
$holder->query_safe('COMMIT;');
$holder->quit;
$restore->finish;
is($?, 0, 'data restored') or diag($rerr);
is($node->safe_psql('dst1', q{SELECT spindle.ack('r', 3)}),
	'f', 'lock held during the load: a stale id acks nothing');
is($node->safe_psql('dst1',
		q{SELECT string_agg(payload->>'n', ',' ORDER BY msg_id) FROM spindle_q.r}),
	'6,7,8,9,10', 'lock held during the load: no restored event purged');

# (2) data-only restore with --disable-triggers
$node->safe_psql('postgres', 'CREATE DATABASE dst2');
$node->command_ok([ 'pg_restore', '-s', '-d', $node->connstr('dst2'), $dump ],
	'schema restored');
$node->command_ok(
	[ 'pg_restore', '-a', '--disable-triggers', '-d', $node->connstr('dst2'), $dump ],
	'data restored with --disable-triggers');
is($node->safe_psql('dst2', q{SELECT count(*) FROM spindle_q.r}),
	'5', '--disable-triggers: every event restored');
is($node->safe_psql('dst2',
		q{SELECT count(*) FROM spindle.queue_msg_id_floor WHERE queue_name = 'gone'}),
	'1', '--disable-triggers: the dropped queue keeps its floor');

# (3) two hops: src -> hop1 (consume two) -> hop2
$node->safe_psql('postgres', 'CREATE DATABASE hop1');
$node->safe_psql('postgres', 'CREATE DATABASE hop2');
$node->safe_psql('src', q{SELECT spindle.create_queue('big')});
$node->safe_psql('src',
	q{SELECT count(spindle.enqueue('big', jsonb_build_object('n', g))) FROM generate_series(1, 10) g});
$node->safe_psql('src', q{SELECT count(*) FROM spindle.dequeue('big', 5)});
$node->command_ok([ 'pg_dump', '-Fc', '-d', $node->connstr('src'), '-f', $dump ], 'pg_dump src');
$node->command_ok([ 'pg_restore', '-d', $node->connstr('hop1'), $dump ], 'restore hop1');
my $given = $node->safe_psql('hop1',
	q{SELECT min(msg_id) FROM spindle.dequeue('big', 2)});
$node->command_ok([ 'pg_dump', '-Fc', '-d', $node->connstr('hop1'), '-f', $dump ], 'pg_dump hop1');
$node->command_ok([ 'pg_restore', '-d', $node->connstr('hop2'), $dump ], 'restore hop2');
is($node->safe_psql('hop2', qq{SELECT spindle.ack('big', $given)}),
	'f', 'an id hop1 delivered acks nothing in hop2');
is($node->safe_psql('hop2',
		q{SELECT string_agg(payload->>'n', ',' ORDER BY msg_id) FROM spindle_q.big}),
	'8,9,10', 'hop2 keeps the three undelivered events');

done_testing();
