# SpindleTest.pm: helpers shared by spindle's TAP tests (test/t/*.pl).
package SpindleTest;

use strict;
use warnings;
use Exporter 'import';
use Time::HiRes qw(gettimeofday tv_interval usleep);

our @EXPORT = qw(wait_for);

# Poll $sql on $node in database $db until it returns 't'; return the
# seconds it took, or undef after $limit seconds.  $poll_ms defaults to 50.
sub wait_for
{
	my ($node, $db, $sql, $limit, $poll_ms) = @_;
	my $t0 = [gettimeofday];
	$poll_ms //= 50;
	while (1)
	{
		my $res = $node->safe_psql($db, $sql, timeout => 60);
		return tv_interval($t0) if $res eq 't';
		return undef if tv_interval($t0) > $limit;
		usleep($poll_ms * 1000);
	}
}

1;
