# Streaming replication: a standby shows the same events and the same
# spindles as the primary after inserts, deletes, updates, spindle drops,
# large payloads and TRUNCATE, and its index scans agree.
# Modelled on contrib/bloom/t/001_wal.pl.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf',
	"shared_preload_libraries = 'spindle'\n");
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION spindle');
$primary->safe_psql(
	'postgres', q{
CREATE TABLE q (id int, body jsonb) USING spindle WITH (events_per_spindle = 8);
CREATE INDEX q_id ON q (id);
CREATE INDEX q_body ON q USING gin (body);
});

my $backup_name = 'my_backup';
$primary->backup($backup_name);
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, $backup_name, has_streaming => 1);
$standby->start;

my $rows_sql =
  q{SELECT string_agg(id || ':' || body::text, ',' ORDER BY id) FROM q};
my $index_sql = q{
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT string_agg(id || ':' || body::text, ',' ORDER BY id) FROM q WHERE id > 0};
my $bitmap_sql = q{
SET enable_seqscan = off; SET enable_indexscan = off;
SELECT string_agg(id::text, ',' ORDER BY id) FROM q WHERE body @> '{"even": true}'};
my $bitmap_seq_sql = q{
SELECT string_agg(id::text, ',' ORDER BY id) FROM q WHERE body @> '{"even": true}'};
my $spindles_sql = q{
SELECT string_agg(spindle_no || ':' || state || ':' || capacity || ':' || events
                  || ':' || purged_events, ',' ORDER BY spindle_no)
  FROM spindle.spindles WHERE relation = 'q'::regclass AND state <> 'ready'};
my $tables_sql = q{
SELECT events_per_spindle || ':' || events || ':' || purged_events || ':' || spindles_dropped
  FROM spindle.tables WHERE relation = 'q'::regclass};

# The background worker may drop a spindle at any moment on the primary, so
# a comparison is retried: the primary's answer is read, the standby catches
# up with it, and then the standby must give the same answer.
sub same_on_both
{
	my ($sql_primary, $sql_standby, $name) = @_;
	my ($p, $s);
	for my $attempt (1 .. 5)
	{
		$p = $primary->safe_psql('postgres', $sql_primary);
		$primary->wait_for_catchup($standby);
		$s = $standby->safe_psql('postgres', $sql_standby);
		last if $p eq $s;
	}
	is($s, $p, $name);
	return;
}

sub compare
{
	my ($what) = @_;
	same_on_both($rows_sql, $rows_sql, "$what: same rows on the standby");
	same_on_both($rows_sql, $index_sql,
		"$what: index scan on the standby agrees");
	same_on_both($bitmap_seq_sql, $bitmap_sql,
		"$what: GIN bitmap scan on the standby agrees");
	same_on_both($spindles_sql, $spindles_sql,
		"$what: same spindles on the standby");
	same_on_both($tables_sql, $tables_sql,
		"$what: same spindle.tables row on the standby");
	return;
}

$primary->safe_psql('postgres',
	q{INSERT INTO q SELECT g, jsonb_build_object('id', g, 'even', g % 2 = 0) FROM generate_series(1, 50) g}
);
compare('after inserts');

$primary->safe_psql(
	'postgres', q{
DELETE FROM q WHERE id <= 20;
UPDATE q SET body = body || '{"updated": true}' WHERE id BETWEEN 30 AND 35;
});
compare('after deletes and updates');

# spindles 1 and 2 (ids 1-16) are full and fully purged
$primary->safe_psql('postgres', q{SELECT spindle.drop_spindles('q')});
compare('after drop_spindles');
$primary->wait_for_catchup($standby);
is( $primary->safe_psql(
		'postgres', q{
SELECT count(*) FROM spindle.spindles WHERE relation = 'q'::regclass AND spindle_no <= 2}),
	'0',
	'spindles 1 and 2 are dropped on the primary');
is( $standby->safe_psql(
		'postgres', q{
SELECT count(*) FROM spindle.spindles WHERE relation = 'q'::regclass AND spindle_no <= 2}),
	'0',
	'spindles 1 and 2 are dropped on the standby');
is( $standby->safe_psql(
		'postgres', q{
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM q WHERE id <= 20}),
	'0',
	'no index scan on the standby returns a dropped or deleted event');

# the segments of the dropped spindles are gone on the standby too
is( $standby->safe_psql(
		'postgres', q{
SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'pg_spindle' AND c.relkind = 'r'
   AND c.oid NOT IN (SELECT segment FROM spindle.spindle_catalog)}),
	'0',
	'no orphan segment on the standby');

# more events after the drop take new slots, on both sides
$primary->safe_psql('postgres',
	q{INSERT INTO q SELECT g, jsonb_build_object('id', g, 'even', g % 2 = 0) FROM generate_series(101, 140) g}
);
compare('after inserts following a drop');

# a large payload
$primary->safe_psql(
	'postgres', q{
INSERT INTO q SELECT 1000, jsonb_build_object('big', string_agg(md5(g::text), ''))
  FROM generate_series(1, 32768) g});
$primary->wait_for_catchup($standby);
same_on_both(
	q{SELECT md5(body::text) FROM q WHERE id = 1000},
	q{SELECT md5(body::text) FROM q WHERE id = 1000},
	'a 1 MB payload is the same on the standby');

# a rolled-back insert: the slot is used and purged on both sides
$primary->safe_psql('postgres',
	q{BEGIN; INSERT INTO q VALUES (2000, '{}'); ROLLBACK;});
compare('after a rolled-back insert');

# everything deleted and dropped
$primary->safe_psql('postgres', 'DELETE FROM q');
$primary->safe_psql('postgres', q{SELECT spindle.drop_spindles('q')});
compare('after deleting everything');

# TRUNCATE
$primary->safe_psql('postgres',
	q{INSERT INTO q SELECT g, '{}' FROM generate_series(1, 20) g; TRUNCATE q;
	  INSERT INTO q SELECT g, jsonb_build_object('even', g % 2 = 0) FROM generate_series(1, 5) g;}
);
compare('after TRUNCATE');

# DROP TABLE: no segment left on the standby
my $q_oid = $primary->safe_psql('postgres', q{SELECT 'q'::regclass::oid});
$primary->safe_psql('postgres', 'DROP TABLE q');
$primary->wait_for_catchup($standby);
is( $standby->safe_psql(
		'postgres', qq{SELECT count(*) FROM spindle.spindle_catalog WHERE relation = $q_oid}),
	'0',
	'no spindle left on the standby after DROP TABLE');
is( $standby->safe_psql(
		'postgres', q{
SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'pg_spindle' AND c.relkind = 'r'}),
	'0',
	'no segment left on the standby after DROP TABLE');

# the standby is still healthy
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	't', 'standby still in recovery');

$standby->stop;
$primary->stop;
done_testing();
