# The consume log's reader side through WAL and crashes (docs/design.md,
# "Consume log (built)"): entries written by
# spindle._consume_log_write are tree 2 runs of the consumer relation, so a
# streaming standby replays them (wal_consistency_checking 'all,spindle')
# and hides the same events as the primary, by sequential and index scans
# (a standby snapshot older than the entries' commits still sees them);
# a server stopped -m immediate while a consumer's transaction is open
# comes back with the committed entries hiding their events and the open
# one's ignored (its xid aborted by the crash), and a new consumer may take
# those events again.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'spindle'
spindle.enable_worker = off
wal_consistency_checking = 'all,spindle'
autovacuum = off
});
$primary->start;
$primary->safe_psql(
	'postgres', q{
CREATE EXTENSION spindle;
SELECT spindle.create_queue('q', 8);
SELECT count(*) FROM (SELECT spindle.enqueue('q', jsonb_build_object('n', g))
  FROM generate_series(1, 20) g) e;
CREATE INDEX q_msg_id ON spindle_q.q (msg_id);
});
$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;

# what a reader sees, by a sequential scan and by an index scan
my $seen = q{SELECT coalesce(string_agg(msg_id::text, ' ' ORDER BY msg_id), '')
  FROM spindle_q.q};
my $seen_idx = qq{SET enable_seqscan = off; SET enable_bitmapscan = off; $seen
  WHERE msg_id > 0};

# a standby snapshot from before the entries keeps every event
my $rr = $standby->background_psql('postgres');
$rr->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
is($rr->query_safe($seen), join(' ', 1 .. 20), 'standby: old snapshot taken');

# committed entries hide, an aborted one does not
$primary->safe_psql('postgres', q{
BEGIN;
SELECT spindle._consume_log_write('spindle_q.q', 1, 5);
COMMIT;
BEGIN;
SELECT spindle._consume_log_write('spindle_q.q', 6, 2);
ROLLBACK;
BEGIN;
SELECT spindle._consume_log_write('spindle_q.q', 9, 3);
COMMIT;
});
my $expect = join(' ', 6 .. 8, 12 .. 20);
is($primary->safe_psql('postgres', $seen), $expect, 'primary hides committed entries');
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', $seen), $expect, 'standby: sequential scan');
is($standby->safe_psql('postgres', $seen_idx), $expect, 'standby: index scan');
is($rr->query_safe($seen), join(' ', 1 .. 20),
	'standby: the older snapshot still sees the consumed events');
is($rr->query_safe($seen_idx), join(' ', 1 .. 20),
	'standby: the older snapshot, by index scan');
$rr->query_safe('COMMIT');
is($rr->query_safe($seen), $expect, 'standby: a new snapshot does not');
$rr->quit;
is($standby->safe_psql('postgres',
	q{SELECT count(*) FROM spindle._run_scan('spindle_q.q', 2, 0, 100)}),
	'3', 'standby: three entries replayed, the aborted one too');

# a consumer's transaction open when the server stops -m immediate
my ($out, $err) = ('', '');
my $h = IPC::Run::start(
	[
		'psql', '-X', '-h', $primary->host, '-p', $primary->port,
		'-d', 'postgres', '-c', q{
BEGIN;
SELECT spindle._consume_log_write('spindle_q.q', 12, 4);
SELECT pg_sleep(600);}
	],
	'<', \undef, '>', \$out, '2>', \$err);
$primary->poll_query_until('postgres',
	q{SELECT count(*) = 4 FROM spindle._run_scan('spindle_q.q', 2, 0, 100)})
  or die 'the open consumer wrote no entry';
is($primary->safe_psql('postgres', $seen), $expect,
	'an open consumer hides nothing from others');
# its entry reaches the WAL: flushed by the next commit
$primary->safe_psql('postgres', q{
BEGIN;
SELECT spindle._consume_log_write('spindle_q.q', 20);
COMMIT;
});
$expect = join(' ', 6 .. 8, 12 .. 19);
$primary->stop('immediate');
$h->kill_kill;
$primary->start;
is($primary->safe_psql('postgres', $seen), $expect,
	'after the crash: committed entries hide, the open one does not');
is($primary->safe_psql('postgres', $seen_idx), $expect,
	'after the crash: the same by an index scan');
is($primary->safe_psql('postgres',
	q{SELECT count(*) FROM spindle._run_scan('spindle_q.q', 2, 0, 100)}),
	'5', 'after the crash: five entries, the interrupted one kept');
# the events the crash un-consumed may be consumed again
$primary->safe_psql('postgres', q{
BEGIN;
SELECT spindle._consume_log_write('spindle_q.q', 12, 2);
COMMIT;
});
$expect = join(' ', 6 .. 8, 14 .. 19);
is($primary->safe_psql('postgres', $seen), $expect, 'consumed again after the crash');
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', $seen), $expect, 'standby follows');
is($standby->safe_psql('postgres', $seen_idx), $expect, 'standby follows: index scan');

$standby->stop;
$primary->stop;
done_testing();
