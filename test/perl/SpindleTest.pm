# SpindleTest.pm: helpers shared by spindle's TAP tests (test/t/*.pl).
package SpindleTest;

use strict;
use warnings;
use Exporter 'import';
use Time::HiRes qw(gettimeofday tv_interval usleep);

our @EXPORT = qw(wait_for verify_ok);

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

# Assert that spindle.verify($rel) returns no rows on $node in database
# $dbname (test name $name, or a default naming $rel); on failure the test's
# diagnostics list every problem it found.  Returns true if it passed.
sub verify_ok
{
	my ($node, $dbname, $rel, $name) = @_;
	my $quoted = $rel;
	$quoted =~ s/'/''/g;
	my ($ret, $out, $err) = $node->psql($dbname,
		"SELECT v FROM spindle.verify('$quoted') v", timeout => 300);
	$name //= "spindle.verify('$rel') finds nothing wrong";
	my $ok = ($ret == 0 && $out eq '');
	Test::More::ok($ok, $name);
	Test::More::diag("psql exit code $ret: $err") if $ret != 0;
	Test::More::diag("problems found by spindle.verify('$rel'):\n$out")
	  if $out ne '';
	return $ok;
}

1;
