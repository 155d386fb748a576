# The benchmark harness in its short mode (`make bench-short`, BENCH_SHORT=1):
# bench/run.sh makes its own throwaway cluster, runs every workload for a few
# seconds and writes the report; this checks that it ran to the end, that
# the report has every section and is labelled as a short-mode report,
# that no run failed and no section failed to render, that the dequeue
# table has figures, and that the plots exist.  It asserts nothing about
# speed.
use strict;
use warnings;

use Cwd qw(getcwd);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $out = PostgreSQL::Test::Utils::tempdir('bench_short');
my $bindir = `pg_config --bindir`;
chomp $bindir;
my $root = getcwd();
ok(-x "$root/bench/run.sh", 'bench/run.sh is there');

my ($stdout, $stderr) = ('', '');
my $ok;
{
	local $ENV{BENCH_SHORT} = 1;
	local $ENV{BENCH_OUT} = $out;
	local $ENV{BENCH_PORT} = PostgreSQL::Test::Cluster::get_free_port();
	local $ENV{PG_CONFIG} = "$bindir/pg_config";
	$ok = IPC::Run::run([ 'bash', "$root/bench/run.sh" ],
		'<', \undef, '>', \$stdout, '2>', \$stderr,
		IPC::Run::timeout(600));
}
note $stdout;
ok($ok, 'bench/run.sh ran to the end') or diag "stderr:\n$stderr";

my $md = "$out/benchmarks.md";
ok(-s $md, 'the report was written');
my $report = -f $md ? slurp_file($md) : '';
like($report, qr/\*\*SHORT MODE\*\*/, 'the report says it is a short-mode report');
unlike($report, qr/Workloads that failed/, 'no workload failed');
foreach my $section ('Summary: targets', 'Machine and settings', '1. Enqueue',
	'2. Dequeue from a backlog', '3. Steady state', '4. Held snapshot',
	'5. Head cost', '6. WAL per event', '7. Cache on and off', '8. Memory',
	'How to run')
{
	like($report, qr/^## \Q$section\E$/m, "section \"$section\"");
}
# the dequeue table is in section 2 (the steady table has a heap row too);
# its first column can be "—" (a PgQ-only configuration), so a row has
# figures when some cell of it starts with a digit
my ($dequeue) = $report =~ /^## 2\.(.*?)^## 3\./ms;
$dequeue //= '';
foreach my $system ('spindle dequeue', 'heap SKIP LOCKED')
{
	like($dequeue, qr/^\| \Q$system\E \|(?:[^|\n]*\|)*? \d[^|\n]*\|/m,
		"the dequeue table (section 2) has figures for $system");
}
unlike($report, qr/Runs that failed/, 'no run failed');
unlike($report, qr/failed to render/, 'every section and plot rendered');
like($report, qr/\| commit ceiling \| \d/, 'the commit ceiling was measured');
like($report, qr/\| target \| measured \| bar \| met\? \|/, 'the targets table');
like($report, qr/cache: not built|\| on \(cache_size = /, 'the cache section says what it found');
foreach my $png ('steady_size', 'steady_throughput', 'steady_catalog', 'held_size',
	'held_throughput')
{
	my $f = "$out/benchmarks/$png.png";
	ok(-s $f && substr(slurp_file($f), 1, 3) eq 'PNG', "plot $png.png");
	like($report, qr/\(benchmarks\/$png\.png\)/, "the report shows $png.png");
}
ok(-s "$out/benchmarks/results.json", 'the raw results are next to the report');

done_testing();
