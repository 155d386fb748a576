# Range purges (src/storage/rangepurge.c) through WAL: a streaming standby and
# crash recovery replay the one-record-per-page purges of committed,
# aborted and in-progress transactions, with and without full-page images,
# to the same rows as the primary; the visibility map bits a purge clears
# stay cleared after a crash; and a standby without spindle preloaded stops
# at the first purge record instead of skipping it.
#
# wal_consistency_checking = 'spindle' makes every purge record carry a
# page image that redo compares with the page it replayed (heap_mask), on
# the standby and in crash recovery alike.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'spindle'
spindle.enable_worker = off
wal_consistency_checking = 'spindle'
wal_keep_size = '256MB'
});
$primary->start;
$primary->safe_psql(
	'postgres', q{
CREATE EXTENSION spindle;
CREATE EXTENSION pg_visibility;
CREATE EXTENSION pg_walinspect;
CREATE TABLE q (id int) USING spindle WITH (events_per_spindle = 10000);
INSERT INTO q SELECT generate_series(1, 600);
});

my $backup_name = 'my_backup';
$primary->backup($backup_name);
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, $backup_name, has_streaming => 1);
$standby->start;

# the same backup, on a standby that does not preload spindle
my $nolib = PostgreSQL::Test::Cluster->new('nolib');
$nolib->init_from_backup($primary, $backup_name, has_streaming => 1);
# (nor can it parse a wal_consistency_checking naming the spindle rmgr)
$nolib->append_conf('postgresql.conf',
	"shared_preload_libraries = ''\nwal_consistency_checking = ''\n");

my $ids_sql = q{SELECT count(*) || ':' || string_agg(id::text, ',' ORDER BY id) FROM q};

sub purge_sql
{
	my ($where) = @_;
	return "SELECT spindle._purge_events('q', array_agg(ctid)) FROM q WHERE $where";
}

sub same_rows
{
	my ($what, $expected_count) = @_;
	my $p = $primary->safe_psql('postgres', $ids_sql);
	like($p, qr/^$expected_count:/, "$what: $expected_count events on the primary");
	$primary->wait_for_catchup($standby);
	is($standby->safe_psql('postgres', $ids_sql), $p,
		"$what: same events on the standby");
	return;
}

# the spindle records since $from, as "count:with_an_image_redo_applies"
# (wal_consistency_checking adds an image to every record, which redo only
# compares: pg_walinspect shows it as "FPW for WAL verification")
sub spindle_records
{
	my ($from) = @_;
	return $primary->safe_psql(
		'postgres', qq{
SELECT count(*) || ':' || count(*) FILTER (WHERE block_ref LIKE '%FPW%'
                                             AND block_ref NOT LIKE '%for WAL verification%')
  FROM pg_get_wal_records_info('$from', pg_current_wal_lsn())
 WHERE resource_manager = 'spindle'});
}

sub lsn
{
	return $primary->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
}

# committed
is($primary->safe_psql('postgres', purge_sql('id <= 50')), '50', 'purged 50');
same_rows('committed purge', 550);

# rolled back, then a rolled-back savepoint and a purge after it
$primary->safe_psql('postgres',
	'BEGIN; ' . purge_sql('id BETWEEN 51 AND 100') . '; ROLLBACK');
same_rows('rolled-back purge', 550);
$primary->safe_psql(
	'postgres', 'BEGIN; SAVEPOINT s; '
	  . purge_sql('id BETWEEN 51 AND 100')
	  . '; ROLLBACK TO s; '
	  . purge_sql('id BETWEEN 51 AND 60')
	  . '; COMMIT');
same_rows('purge after ROLLBACK TO SAVEPOINT', 540);

# after a checkpoint the first purge of a page carries its full image
# (redo restores it), the next one on the same page does not
$primary->safe_psql('postgres', 'CHECKPOINT');
my $l = lsn();
$primary->safe_psql('postgres', purge_sql('id BETWEEN 61 AND 70'));
$primary->safe_psql('postgres', purge_sql('id BETWEEN 71 AND 80'));
is(spindle_records($l), '2:1',
	'two purge records, the first with a full-page image');
same_rows('purges across a checkpoint', 520);

# the standby without the library: replay stops at the first purge record
$nolib->start(fail_ok => 1);
my $nolib_log = $nolib->logfile;
my $found = 0;
for (1 .. 600)
{
	if (slurp_file($nolib_log) =~
		/resource manager with ID 128 not registered/)
	{
		$found = 1;
		last;
	}
	usleep(100_000);
}
ok($found, 'standby without spindle preloaded reports the unknown resource manager');
like(
	slurp_file($nolib_log),
	qr/Include the extension module that implements this resource manager in shared_preload_libraries/,
	'... with a hint');
# the postmaster logs the startup process's exit a moment after its FATAL
my $exited = 0;
for (1 .. 600)
{
	if (slurp_file($nolib_log) =~
		/startup process \(PID \d+\) exited with exit code 1/)
	{
		$exited = 1;
		last;
	}
	usleep(100_000);
}
ok($exited,
	'... and its startup process stops instead of skipping the record');
$nolib->stop('immediate', fail_ok => 1);
# with the library preloaded it replays the record and catches up
$nolib->append_conf('postgresql.conf',
	"shared_preload_libraries = 'spindle'\n");
$nolib->start;
$primary->wait_for_catchup($nolib);
is($nolib->safe_psql('postgres', $ids_sql),
	$primary->safe_psql('postgres', $ids_sql),
	'once spindle is preloaded, that standby replays the purges');
$nolib->stop;

# Visibility map: COPY FREEZE makes all-visible, all-frozen pages (VACUUM
# of a spindle never sets them); after a checkpoint the map bits are on
# disk, a purge clears those of its page, and redo must clear them again
# after a crash since the map page itself is not WAL-logged
$primary->safe_psql(
	'postgres', q{
BEGIN;
CREATE TABLE v (id int) USING spindle WITH (events_per_spindle = 10000);
COPY v FROM PROGRAM 'seq 1 400' WITH (FREEZE);
COMMIT;
VACUUM v;
CHECKPOINT;
});
my $segv = $primary->safe_psql('postgres',
	q{SELECT format('pg_spindle.s%s_1', 'v'::regclass::oid)});
my $vm_sql = qq{SELECT string_agg(blkno || ':' || all_visible::int || ':' || all_frozen::int, ',' ORDER BY blkno)
  FROM pg_visibility_map('$segv')};
my $pdav_sql = qq{SELECT string_agg(blkno || ':' || pd_all_visible::int, ',' ORDER BY blkno)
  FROM pg_visibility('$segv')};
is($primary->safe_psql('postgres', $vm_sql), '0:1:1,1:1:1,2:1:1',
	'COPY FREEZE pages are all-visible and all-frozen');
is( $primary->safe_psql(
		'postgres',
		"SELECT spindle._purge_events('v', array_agg(ctid)) FROM v WHERE id IN (3, 200)"
	),
	'2',
	'purged 2 events on all-visible pages');
is($primary->safe_psql('postgres', $vm_sql), '0:0:0,1:0:0,2:1:1',
	'the purged pages lost their map bits');
is($primary->safe_psql('postgres', $pdav_sql), '0:0,1:0,2:1',
	'... and PD_ALL_VISIBLE');
is($primary->safe_psql('postgres', "SELECT count(*) FROM pg_check_visible('$segv')"),
	'0', 'pg_check_visible finds nothing after the purge');
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', $vm_sql), '0:0:0,1:0:0,2:1:1',
	'the standby cleared the same map bits');
is($standby->safe_psql('postgres', "SELECT count(*) FROM v"), '398',
	'the standby sees the purge');

# A crash in the middle of an open purge: it is undone, the committed ones
# before and after it stay
my $bg = $primary->background_psql('postgres', on_error_stop => 0);
$bg->query_safe('BEGIN');
is($bg->query_safe(purge_sql('id BETWEEN 81 AND 90') . ' OR id > 590'),
	'20', 'open purge of 20 events');
is($primary->safe_psql('postgres', purge_sql('id BETWEEN 91 AND 100')),
	'10', 'committed purge while another is open');
$primary->safe_psql('postgres',
	"SELECT spindle._purge_events('v', array_agg(ctid)) FROM v WHERE id = 390");
$primary->stop('immediate');
# the background psql lost its server; ignore how it ends
eval { $bg->quit; };
$primary->start;

same_rows('after crash recovery', 510);
is( $primary->safe_psql(
		'postgres',
		q{SELECT count(*) FROM q WHERE id BETWEEN 81 AND 90 OR id > 590}),
	'20',
	'the open purge was undone');
is($primary->safe_psql('postgres', 'SELECT count(*) FROM v'), '397',
	'committed purges on all-visible pages survived the crash');
is($primary->safe_psql('postgres', $vm_sql), '0:0:0,1:0:0,2:0:0',
	'redo cleared the map bits the crash lost');
is($primary->safe_psql('postgres', $pdav_sql), '0:0,1:0,2:0',
	'... and PD_ALL_VISIBLE');
is($primary->safe_psql('postgres', "SELECT count(*) FROM pg_check_visible('$segv')"),
	'0', 'pg_check_visible finds nothing after crash recovery');
is($primary->safe_psql('postgres', "SELECT count(*) FROM pg_check_frozen('$segv')"),
	'0', 'pg_check_frozen finds nothing after crash recovery');

# the undone events can be purged again, and the standby follows
is($primary->safe_psql('postgres', purge_sql('id BETWEEN 81 AND 90')),
	'10', 'purge of the undone events');
same_rows('purge after recovery', 500);
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', $vm_sql), '0:0:0,1:0:0,2:0:0',
	'the standby has the same map bits');

$standby->stop;
$primary->stop;
done_testing();
