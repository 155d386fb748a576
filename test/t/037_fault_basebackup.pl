# pg_basebackup taken while producers, dequeue consumers and read/ack
# consumers run and the worker drops tiny spindles (files vanish under the
# copy): the restored server starts, its logs and queue agree (nothing
# committed lost, nothing delivered twice, counters consistent), and the
# queue works there: a load, a drain, the worker's drops.  The source
# stays consistent too.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;
use Time::HiRes qw(gettimeofday tv_interval usleep);

my $t_start = [gettimeofday];
my $q = 'bq';
my $src = queue_node('bb_source', init => { allows_streaming => 1 },
	conf => "spindle.naptime = '50ms'\n");
queue_logs($src, 'postgres', $q, 20);
my $dir = PostgreSQL::Test::Utils::tempdir;
my $f = load_scripts($dir, $q, batch => 15, dequeue => 5, vt => '1 second');
my @mix = ([ $f->{prod}, 3 ], [ $f->{batch}, 1 ], [ $f->{cons}, 5 ],
	[ $f->{reader}, 1 ]);

my $load = start_load($src, 'postgres', 5, 5, @mix);
sleep(1);
my $dropped0 = $src->safe_psql('postgres',
	"SELECT spindles_dropped FROM spindle.tables WHERE relation = 'spindle_q.$q'::regclass");
$src->backup('hot');
my $dropped1 = $src->safe_psql('postgres',
	"SELECT spindles_dropped FROM spindle.tables WHERE relation = 'spindle_q.$q'::regclass");
note "spindles dropped during the backup: " . ($dropped1 - $dropped0);
my ($out, $err) = stop_load($load);
like($out, qr/number of failed transactions: 0/, 'the load on the source ran without errors')
  or diag("$out\n$err");
check_consistent($src, 'postgres', "spindle_q.$q", 'the source after the load');
$src->stop;

my $node = PostgreSQL::Test::Cluster->new('bb_restored');
$node->init_from_backup($src, 'hot');
$node->start;
my $counts = log_counts($node, 'postgres', $q);
note "restored: produced:consumed:acked:in queue = $counts";
cmp_ok((split /:/, $counts)[0], '>', 100, 'the backup holds a load in progress');
next_epoch($node);
check_consistent($node, 'postgres', "spindle_q.$q", 'the restored backup');

$load = start_load($node, 'postgres', 3, 5, @mix);
($out, $err) = stop_load($load);
like($out, qr/number of failed transactions: 0/, 'a load on the restored server runs without errors')
  or diag("$out\n$err");
my $drained = drain_queue($node, 'postgres', $q);
check_consistent($node, 'postgres', "spindle_q.$q", 'the restored server after the drain');
check_read_counts($node, 'postgres', $q);
my ($p, $c, $a, $left) = split /:/, log_counts($node, 'postgres', $q);
note "events checked: $p produced, $c dequeued, $a acked";
is($c + $a, $p, 'enqueued = dequeued + acked');
ok( defined wait_for(
		$node, 'postgres', qq{
SELECT count(*) = 0 FROM spindle.spindles
 WHERE relation = 'spindle_q.$q'::regclass AND state = 'full'}, 60),
	'the worker of the restored server drops every full spindle')
  or diag($node->safe_psql('postgres', qq{
SELECT string_agg(spindle_no || ' ' || state || ' ' || events || '/' || purged_events, ', ' ORDER BY spindle_no)
  FROM spindle.spindles WHERE relation = 'spindle_q.$q'::regclass})
	  . "\n" . $node->safe_psql('postgres', q{SELECT last_error FROM spindle.worker}));

$node->stop;
note sprintf('run time %.1f s', tv_interval($t_start));
done_testing();
