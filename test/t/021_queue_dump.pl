# pg_dump / pg_restore (custom format, also in parallel) and plain psql of a
# database with two queues, one the other's dead-letter queue: the registry
# rows (max_reads, dead_letter_queue, created_at, max_depth, overflow), the
# tables' options,
# owners and grants, and the events in msg_id order survive; the restored
# events get msg_ids of the restored spindles; the restored queues work.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('queue_dump');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'spindle'\n");
$node->start;

$node->safe_psql('postgres', q{
CREATE ROLE q_owner;
CREATE ROLE q_producer;
CREATE DATABASE src;
});
$node->safe_psql(
	'src', q{
CREATE EXTENSION spindle;
GRANT CREATE ON SCHEMA spindle_q TO q_owner;
SET ROLE q_owner;
SELECT spindle.create_queue('dead', events_per_spindle => 30, time_to_live => '7 days');
SELECT spindle.create_queue('work', events_per_spindle => 7, time_to_live => '2 days',
                            max_reads => 3, dead_letter_queue => 'dead',
                            max_depth => 100, overflow => 'dead_letter');
GRANT INSERT ON spindle_q.work TO q_producer;
SET ROLE q_producer;
SELECT count(*) FROM spindle.enqueue_batch('work',
  ARRAY(SELECT jsonb_build_object('w', g, 'pad', repeat('x', g)) FROM generate_series(1, 60) g));
SELECT spindle.enqueue('work', jsonb_build_object('w', g), '1 hour')
  FROM generate_series(61, 100) g;
RESET ROLE;
SET ROLE q_owner;
SELECT spindle.enqueue('dead', jsonb_build_object('d', g)) FROM generate_series(1, 100) g;
-- consumed (acked) events are not dumped: the first ten of work
DELETE FROM spindle_q.work WHERE (payload->>'w')::int <= 10;
});

my $registry_sql = q{
SELECT string_agg(queue_name || ' ' || relation::text || ' ' || coalesce(max_reads::text, '-')
                  || ' ' || coalesce(dead_letter_queue, '-') || ' ' || created_at::text
                  || ' ' || coalesce(max_depth::text, '-') || ' ' || overflow, E'\n'
                  ORDER BY queue_name)
  FROM spindle.queue_catalog};
my $tables_sql = q{
SELECT string_agg(c.relname || ' ' || a.amname || ' ' || pg_get_userbyid(c.relowner) || ' '
                  || array_to_string(c.reloptions, ';') || ' ' || coalesce(c.relacl::text, '-'),
                  E'\n' ORDER BY c.relname)
  FROM pg_class c JOIN pg_am a ON a.oid = c.relam
 WHERE c.relnamespace = 'spindle_q'::regnamespace};
my $events_sql = q{
SELECT (SELECT string_agg(payload::text || ' ' || (visible_at - enqueued_at)::text, ',' ORDER BY msg_id)
          FROM spindle_q.work) || E'\n' ||
       (SELECT string_agg(payload::text, ',' ORDER BY msg_id) FROM spindle_q.dead)};
my $count_sql = q{
SELECT (SELECT count(*) FROM spindle_q.work) || ' ' || (SELECT count(*) FROM spindle_q.dead)};

my $src_registry = $node->safe_psql('src', $registry_sql);
my $src_tables = $node->safe_psql('src', $tables_sql);
my $src_events = $node->safe_psql('src', $events_sql);
like($src_registry,
	qr/^dead spindle_q.dead - - .* - reject\nwork spindle_q.work 3 dead .* 100 dead_letter$/,
	'source registry, with the length limits');
like($src_tables, qr/events_per_spindle=7;time_to_live=2 days/, 'source options');
is($node->safe_psql('src', $count_sql), '90 100', 'source events');

my $tempdir = PostgreSQL::Test::Utils::tempdir;
my $dumpfile = "$tempdir/src.dump";
my $plainfile = "$tempdir/src.sql";
$node->command_ok(
	[ 'pg_dump', '-Fc', '-f', $dumpfile, '-d', $node->connstr('src') ],
	'pg_dump -Fc');
$node->command_ok(
	[ 'pg_dump', '-f', $plainfile, '-d', $node->connstr('src') ],
	'pg_dump plain');
my $plain = slurp_file($plainfile);
like($plain, qr/COPY spindle\.queue_catalog .* FROM stdin;\ndead\tspindle_q\.dead\t/s,
	'the registry is dumped, its relation by name');

for my $how ('pg_restore', 'pg_restore -j 2', 'psql')
{
	(my $db = "dst_$how") =~ s/\W+/_/g;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	if ($how eq 'psql')
	{
		$node->command_ok(
			[
				'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d',
				$node->connstr($db), '-f', $plainfile
			],
			'psql restore');
	}
	else
	{
		my @jobs = $how =~ /-j 2/ ? ('-j', '2') : ();
		$node->command_ok(
			[
				'pg_restore', '--exit-on-error', @jobs, '-d',
				$node->connstr($db), $dumpfile
			],
			$how);
	}

	is($node->safe_psql($db, $registry_sql), $src_registry,
		"$how: registry rows restored");
	is($node->safe_psql($db, $tables_sql), $src_tables,
		"$how: tables, options, owners and grants restored");
	is($node->safe_psql($db, $count_sql), '90 100', "$how: every event restored");
	is($node->safe_psql($db, $events_sql), $src_events,
		"$how: events restored in msg_id order, with their delays");
	is( $node->safe_psql(
			$db, q{
SELECT bool_and(relation = ('spindle_q.' || queue_name)::regclass) FROM spindle.queue_catalog}),
		't',
		"$how: the registry names the restored tables");

	# the restored events were numbered by the restored spindles: each id's
	# k is the slot of its TID in its spindle, and the first is k = 0
	for my $q ('work', 'dead')
	{
		is( $node->safe_psql(
				$db, qq{
SELECT count(*) FILTER (WHERE ((o.ctid::text::point)[0] * 291 + (o.ctid::text::point)[1] - 1)
                              - c.vbase = o.msg_id - c.first_no)
       || ' ' || min(o.msg_id - c.first_no)
  FROM spindle_q.$q o
  JOIN spindle.spindle_catalog c
    ON c.relation = 'spindle_q.$q'::regclass
   AND o.msg_id >= c.first_no AND o.msg_id < c.first_no + c.vcount}),
			$q eq 'work' ? '90 0' : '100 0',
			"$how: $q: msg_ids are positions in the restored spindles");
	}
	is( $node->safe_psql(
			$db, q{
SELECT count(*) FROM spindle.spindles
 WHERE relation = 'spindle_q.work'::regclass AND (events > 7 OR capacity <> 7)}),
		'0',
		"$how: work's events fill spindles of the restored capacity");

	# the restored queues work, with the restored privileges
	is( $node->safe_psql(
			$db, q{
SET ROLE q_producer;
SELECT spindle.enqueue('work', '{"after": "restore"}') > max(msg_id)
  FROM (SELECT 0::bigint AS msg_id) z;
RESET ROLE;
SELECT (SELECT max(msg_id) FROM spindle_q.work WHERE NOT payload ? 'after')
       < (SELECT msg_id FROM spindle_q.work WHERE payload ? 'after')}),
		"t\nt",
		"$how: enqueue after restore, as the producer, after the restored events");
	# the restored limit applies: 91 events, a batch of 10 moves the oldest
	# deliverable one to the dead-letter queue
	is( $node->safe_psql(
			$db, q{
SELECT count(*) FROM spindle.enqueue_batch('work', ARRAY(SELECT to_jsonb(g) FROM generate_series(1, 10) g));
SELECT (SELECT count(*) FROM spindle_q.work) || ' ' || (SELECT count(*) FROM spindle_q.dead)
       || ' ' || (SELECT payload->>'w' FROM spindle_q.dead ORDER BY msg_id DESC LIMIT 1)}),
		"10\n100 101 11",
		"$how: max_depth and overflow apply after the restore");
	my ($rc, $out, $err) = $node->psql($db, q{SELECT spindle.drop_queue('dead')});
	like($err, qr/cannot drop queue "dead" because queue "work" uses it/,
		"$how: the dead-letter queue is still in use");
}

# DROP EXTENSION ... CASCADE takes the queues and the registry with it
$node->safe_psql('dst_psql', 'DROP EXTENSION spindle CASCADE');
is( $node->safe_psql(
		'dst_psql', q{
SELECT count(*) FROM pg_class WHERE relname IN ('work', 'dead', 'queue_catalog')}),
	'0',
	'DROP EXTENSION CASCADE drops the queues and the registry');

$node->stop;
done_testing();
