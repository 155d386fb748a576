# Exactly once under load: producers (single enqueues, batches, 20 % of
# them rolled back) and consumers (each dequeue logs its payloads in the
# same transaction, 10 % rolled back) on queues with tiny spindles, where
# producers fill a spindle while consumers look at its end.  Every
# committed event must be delivered exactly once, and nothing else.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('qstress');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'spindle'
spindle.enable_worker = on
spindle.naptime = '200ms'
max_connections = 30
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION spindle');

my $dir = PostgreSQL::Test::Utils::tempdir;

sub stress
{
	my ($q, $eps, $batch) = @_;
	$node->safe_psql('postgres', qq{
SELECT spindle.create_queue('$q', events_per_spindle => $eps);
CREATE TABLE produced_$q (v bigint);
CREATE TABLE consumed_$q (v bigint, msg_id bigint);
CREATE SEQUENCE seq_$q;
});
	open my $f, '>', "$dir/prod_$q.sql" or die;
	print $f qq{\\set r random(1, 10)
BEGIN;
SELECT nextval('seq_$q') AS v \\gset
SELECT spindle.enqueue('$q', jsonb_build_object('v', :v));
INSERT INTO produced_$q SELECT :v WHERE :r > 2;
\\if :r > 2
COMMIT;
\\else
ROLLBACK;
\\endif
};
	close $f;
	open $f, '>', "$dir/prodb_$q.sql" or die;
	print $f qq{BEGIN;
SELECT nextval('seq_$q') AS a \\gset
SELECT nextval('seq_$q') AS b \\gset
SELECT nextval('seq_$q') AS c \\gset
SELECT spindle.enqueue_batch('$q', ARRAY[jsonb_build_object('v', :a), jsonb_build_object('v', :b), jsonb_build_object('v', :c)]);
INSERT INTO produced_$q VALUES (:a), (:b), (:c);
COMMIT;
};
	close $f;
	open $f, '>', "$dir/cons_$q.sql" or die;
	print $f qq{\\set r random(1, 10)
BEGIN;
INSERT INTO consumed_$q SELECT (payload->>'v')::bigint, msg_id FROM spindle.dequeue('$q', $batch);
\\if :r > 1
COMMIT;
\\else
ROLLBACK;
\\endif
};
	close $f;
	my ($out, $err) = run_command(
		[
			'pgbench', '-n', '-h', $node->host, '-p', $node->port,
			'-c', '8', '-j', '2', '-T', '8',
			'-f', "$dir/prod_$q.sql\@3", '-f', "$dir/prodb_$q.sql\@1",
			'-f', "$dir/cons_$q.sql\@4", 'postgres'
		]);
	like($out, qr/number of failed transactions: 0/, "$q: no transaction failed")
	  or diag($err);
	# drain what is left
	for (1 .. 50)
	{
		my $n = $node->safe_psql('postgres', qq{
WITH d AS (INSERT INTO consumed_$q SELECT (payload->>'v')::bigint, msg_id
             FROM spindle.dequeue('$q', 1000) RETURNING 1)
SELECT count(*) FROM d});
		last if $n eq '0';
	}
	my $produced = $node->safe_psql('postgres', "SELECT count(*) FROM produced_$q");
	cmp_ok($produced, '>', 100, "$q: producers committed $produced events");
	is( $node->safe_psql('postgres', qq{
SELECT count(*) FROM (SELECT v FROM produced_$q EXCEPT SELECT v FROM consumed_$q) x}),
		'0', "$q: no committed event lost");
	is( $node->safe_psql('postgres', qq{
SELECT count(*) FROM (SELECT v FROM consumed_$q GROUP BY v HAVING count(*) > 1) x}),
		'0', "$q: no event delivered twice");
	is( $node->safe_psql('postgres', qq{
SELECT count(*) FROM (SELECT v FROM consumed_$q EXCEPT SELECT v FROM produced_$q) x}),
		'0', "$q: no rolled-back event delivered");
	is($node->safe_psql('postgres', "SELECT count(*) FROM spindle_q.$q"),
		'0', "$q: the queue is empty");
}

stress('s2', 2, 1);
stress('s3', 3, 3);
stress('s1', 1, 2);

$node->stop;
done_testing();
