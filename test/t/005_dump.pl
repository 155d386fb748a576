# pg_dump / pg_restore round-trip a spindle table with its options, its rows
# and its indexes; the restored table gets spindles of its own capacity.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('dump');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'spindle'\n");
$node->start;

$node->safe_psql('postgres', 'CREATE DATABASE src');
$node->safe_psql(
	'src', q{
CREATE EXTENSION spindle;
CREATE TABLE ev (id bigint, body jsonb) USING spindle
  WITH (events_per_spindle = 6, time_to_live = '1 day');
CREATE INDEX ev_id ON ev (id);
INSERT INTO ev SELECT g, jsonb_build_object('n', g) FROM generate_series(1, 40) g;
DELETE FROM ev WHERE id % 4 = 0;
SET spindle.events_per_spindle = 9;
CREATE TABLE ev_guc (id int) USING spindle;
RESET spindle.events_per_spindle;
INSERT INTO ev_guc SELECT generate_series(1, 20);
});

my $rows_sql = q{SELECT string_agg(id || ':' || body::text, ',' ORDER BY id) FROM ev};
my $src_rows = $node->safe_psql('src', $rows_sql);
my $opts_sql = q{
SELECT string_agg(c.relname || ' ' || a.amname || ' ' || array_to_string(c.reloptions, ';'), ', '
                  ORDER BY c.relname)
  FROM pg_class c JOIN pg_am a ON a.oid = c.relam
 WHERE c.relname IN ('ev', 'ev_guc')};
my $src_opts = $node->safe_psql('src', $opts_sql);
like($src_opts, qr/events_per_spindle=6/, 'source options');
like($src_opts, qr/events_per_spindle=9/, 'source options from the GUC');

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
unlike($plain, qr/spindle_catalog/i,
	'the spindle directory is not dumped');

for my $how ('pg_restore', 'psql')
{
	my $db = "dst_$how";
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	if ($how eq 'pg_restore')
	{
		$node->command_ok(
			[
				'pg_restore', '--exit-on-error', '-d', $node->connstr($db),
				$dumpfile
			],
			'pg_restore');
	}
	else
	{
		$node->command_ok(
			[
				'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d',
				$node->connstr($db), '-f', $plainfile
			],
			'psql restore');
	}

	is($node->safe_psql($db, $opts_sql),
		$src_opts, "$how: access method and options restored");
	is($node->safe_psql($db, $rows_sql), $src_rows, "$how: rows restored");
	is( $node->safe_psql(
			$db, q{
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT string_agg(id || ':' || body::text, ',' ORDER BY id) FROM ev WHERE id > 0}),
		$src_rows,
		"$how: index restored and agrees");
	is( $node->safe_psql(
			$db, q{
SELECT relation::text || ' ' || events_per_spindle || ' ' || coalesce(time_to_live::text, '-')
  FROM spindle.tables WHERE relation IN ('ev'::regclass, 'ev_guc'::regclass)
 ORDER BY relation::text}),
		"ev 6 1 day\nev_guc 9 -",
		"$how: spindle.tables shows the restored capacity and TTL");
	is( $node->safe_psql(
			$db, q{
SELECT count(*) FROM spindle.spindles
 WHERE relation IN ('ev'::regclass, 'ev_guc'::regclass)
   AND (events > capacity OR (state <> 'ready' AND capacity NOT IN (6, 9)))}),
		'0',
		"$how: restored events fill spindles of the restored capacity");
	is( $node->safe_psql(
			$db, q{
SELECT sum(events) || ' ' || sum(purged_events) FROM spindle.spindles
 WHERE relation = 'ev'::regclass}),
		'30 0',
		"$how: the restored table holds 30 events, none purged");
}

$node->stop;
done_testing();
