# amcheck on the indexes of spindle tables: bt_index_check with
# heapallindexed verifies that every live event has its index entry (and the
# tools of core must not crash on a spindle table).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('amcheck');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'spindle'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION spindle');
$node->safe_psql('postgres', 'CREATE EXTENSION amcheck');

$node->safe_psql(
	'postgres', q{
CREATE TABLE a (id int, k text) USING spindle WITH (events_per_spindle = 7);
CREATE INDEX a_id ON a (id);
CREATE UNIQUE INDEX a_k ON a (k);
INSERT INTO a SELECT g, 'k' || g FROM generate_series(1, 100) g;
DELETE FROM a WHERE id <= 30;
UPDATE a SET k = k || '!' WHERE id % 5 = 0;
SELECT spindle.drop_spindles('a');
INSERT INTO a SELECT g, 'k' || g FROM generate_series(101, 120) g;
});

# TAP clusters run with restart_after_crash = off: should a check crash the
# server, start it again so that the next check runs
sub ensure_up
{
	my ($ret) = $node->psql('postgres', 'SELECT 1');
	if ($ret != 0)
	{
		# wait for the postmaster to finish shutting down
		my $pidfile = $node->data_dir . '/postmaster.pid';
		for (1 .. 100)
		{
			last unless -e $pidfile;
			select(undef, undef, undef, 0.1);
		}
		$node->_update_pid(-1);
		$node->start;
	}
	return;
}

for my $index ('a_id', 'a_k')
{
	for my $mode ('false', 'true')
	{
		my ($ret, $stdout, $stderr) = $node->psql('postgres',
			"SELECT bt_index_check('$index', $mode)");
		is($ret, 0, "bt_index_check('$index', heapallindexed => $mode) succeeds");
		is($stderr, '', "bt_index_check('$index', $mode) reports nothing");
		ensure_up();
	}
}
my ($ret, $stdout, $stderr) = $node->psql('postgres',
	"SELECT bt_index_parent_check('a_id', true)");
is($ret, 0, 'bt_index_parent_check with heapallindexed succeeds');
is($stderr, '', 'bt_index_parent_check reports nothing');
ensure_up();

# the server is still up and the table intact
is($node->safe_psql('postgres', 'SELECT count(*), sum(id) FROM a'),
	'90|6795', 'table intact after amcheck');

$node->stop;
done_testing();
