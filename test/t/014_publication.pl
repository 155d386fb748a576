# Logical replication and spindle tables.  Decoding attributes the changes
# of a spindle table to its internal spindle relations (pg_spindle.s*),
# which no subscriber has and pgoutput cannot map back to the table, so
# spindle refuses every publication that would contain one, with SQLSTATE
# 0A000 and a hint: FOR TABLE (CREATE, ALTER ADD/SET), FOR TABLES IN SCHEMA
# of a schema with spindle tables or of pg_spindle, FOR ALL TABLES in a
# database with spindle tables; and, the other way round, a spindle table
# in a database with a FOR ALL TABLES publication or in a published schema
# (CREATE TABLE, CREATE TABLE AS, ALTER TABLE SET SCHEMA) or under a
# published partitioned table (PARTITION OF, ATTACH PARTITION).  The two
# checks cannot pass concurrently.  Publications of ordinary tables in the same database keep
# replicating, and no pg_spindle relation is ever published.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use SpindleTest;

my $pub = PostgreSQL::Test::Cluster->new('publisher');
$pub->init(allows_streaming => 'logical');
$pub->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle'
max_worker_processes = 16
spindle.naptime = 200ms
});
$pub->start;

my $sub = PostgreSQL::Test::Cluster->new('subscriber');
$sub->init;
$sub->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'spindle'
max_worker_processes = 16
});
$sub->start;

is($pub->safe_psql('postgres', 'SHOW wal_level'), 'logical', 'publisher: wal_level = logical');

$pub->safe_psql(
	'postgres', q{
CREATE EXTENSION spindle;
CREATE TABLE ev (id int PRIMARY KEY, body text) USING spindle
    WITH (events_per_spindle = 5);
INSERT INTO ev SELECT g, 'event ' || g FROM generate_series(1, 12) g;
CREATE TABLE plain (id int PRIMARY KEY, body text);
INSERT INTO plain SELECT g, 'row ' || g FROM generate_series(1, 10) g;
CREATE SCHEMA qs;
CREATE TABLE qs.ev2 (id int) USING spindle;
CREATE SCHEMA hs;
CREATE TABLE hs.h (id int PRIMARY KEY);
INSERT INTO hs.h SELECT generate_series(1, 5);
});
my $segment = $pub->safe_psql(
	'postgres', q{
SELECT c.oid::regclass FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'pg_spindle' AND c.relkind = 'r' ORDER BY c.oid LIMIT 1});
like($segment, qr/^pg_spindle\.s\d+_\d+$/, "an internal spindle relation: $segment");

# Run $sql on $node/$db; it must fail with SQLSTATE 0A000 and a hint.
sub refused
{
	my ($node, $db, $sql, $what) = @_;
	my ($ret, $out, $err) =
	  $node->psql($db, "\\set VERBOSITY verbose\n$sql", on_error_stop => 1);
	isnt($ret, 0, "$what: refused");
	like($err, qr/ERROR:  0A000: /, "$what: SQLSTATE 0A000")
	  or diag($err);
	like($err, qr/\nHINT:  \S/, "$what: with a hint");
	return $err;
}

# Publications naming spindle tables or their spindles.
my $err = refused($pub, 'postgres', 'CREATE PUBLICATION p1 FOR TABLE ev',
	'CREATE PUBLICATION FOR TABLE spindle_table');
like($err, qr/spindle table "ev"/, 'the error names the spindle table');
refused($pub, 'postgres', 'CREATE PUBLICATION p1 FOR TABLE plain, ev',
	'CREATE PUBLICATION FOR TABLE heap_table, spindle_table');
refused($pub, 'postgres', "CREATE PUBLICATION p1 FOR TABLE $segment",
	'CREATE PUBLICATION FOR TABLE pg_spindle.s...');
refused($pub, 'postgres', 'CREATE PUBLICATION p1 FOR TABLES IN SCHEMA qs',
	'CREATE PUBLICATION FOR TABLES IN SCHEMA with a spindle table');
refused($pub, 'postgres', 'CREATE PUBLICATION p1 FOR TABLES IN SCHEMA pg_spindle',
	'CREATE PUBLICATION FOR TABLES IN SCHEMA pg_spindle');
refused($pub, 'postgres', 'CREATE PUBLICATION p1 FOR TABLE plain, TABLES IN SCHEMA qs',
	'CREATE PUBLICATION FOR TABLE heap_table, TABLES IN SCHEMA with a spindle table');
refused($pub, 'postgres', 'CREATE PUBLICATION p1 FOR ALL TABLES',
	'CREATE PUBLICATION FOR ALL TABLES in a database with spindle tables');
refused($pub, 'postgres', 'BEGIN; CREATE PUBLICATION p1; ALTER PUBLICATION p1 ADD TABLE ev; COMMIT',
	'ALTER PUBLICATION ADD TABLE in the same transaction');
is($pub->safe_psql('postgres', 'SELECT count(*) FROM pg_publication'),
	'0', 'no publication was created');

# Publications of ordinary tables are fine, in the same database.
$pub->safe_psql(
	'postgres', q{
CREATE PUBLICATION p_plain FOR TABLE plain;
CREATE PUBLICATION p_schema FOR TABLES IN SCHEMA hs;
});
refused($pub, 'postgres', 'ALTER PUBLICATION p_plain ADD TABLE ev',
	'ALTER PUBLICATION ADD TABLE spindle_table');
refused($pub, 'postgres', 'ALTER PUBLICATION p_plain SET TABLE plain, ev',
	'ALTER PUBLICATION SET TABLE heap_table, spindle_table');
refused($pub, 'postgres', "ALTER PUBLICATION p_plain ADD TABLE $segment",
	'ALTER PUBLICATION ADD TABLE pg_spindle.s...');
refused($pub, 'postgres', 'ALTER PUBLICATION p_plain ADD TABLES IN SCHEMA qs',
	'ALTER PUBLICATION ADD TABLES IN SCHEMA with a spindle table');
refused($pub, 'postgres', 'ALTER PUBLICATION p_schema SET TABLES IN SCHEMA qs',
	'ALTER PUBLICATION SET TABLES IN SCHEMA with a spindle table');
is( $pub->safe_psql(
		'postgres',
		q{SELECT string_agg(pubname || ':' || schemaname || '.' || tablename, ',' ORDER BY pubname, tablename)
		    FROM pg_publication_tables}),
	'p_plain:public.plain,p_schema:hs.h',
	'the publications hold the heap tables only');


# Spindle tables where a publication would take them.
refused($pub, 'postgres', 'CREATE TABLE hs.ev3 (id int) USING spindle',
	'CREATE TABLE USING spindle in a published schema');
refused($pub, 'postgres',
	"SET default_table_access_method = spindle; CREATE TABLE hs.ev4 (id int)",
	'CREATE TABLE in a published schema with default_table_access_method = spindle');
refused($pub, 'postgres', 'CREATE TABLE hs.ev5 USING spindle AS SELECT 1 AS id',
	'CREATE TABLE AS USING spindle in a published schema');
refused($pub, 'postgres', 'ALTER TABLE ev SET SCHEMA hs',
	'ALTER TABLE spindle_table SET SCHEMA published_schema');
is( $pub->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_class WHERE relnamespace = 'hs'::regnamespace AND relname LIKE 'ev%'}),
	'0',
	'no spindle table in the published schema');
$pub->safe_psql('postgres', 'CREATE TABLE hs.h2 (id int PRIMARY KEY)');
pass('a heap table in the published schema is fine');

# Partitions: a spindle table under a published partitioned table.
$pub->safe_psql(
	'postgres', q{
CREATE TABLE parted (id int) PARTITION BY RANGE (id);
CREATE TABLE parted_heap PARTITION OF parted FOR VALUES FROM (0) TO (100);
CREATE PUBLICATION p_parted FOR TABLE parted;
CREATE TABLE loose (id int) USING spindle;
CREATE TABLE sparted (id int) PARTITION BY RANGE (id);
CREATE TABLE sparted_ev PARTITION OF sparted FOR VALUES FROM (0) TO (100) USING spindle;
});
refused($pub, 'postgres',
	'CREATE TABLE parted_ev PARTITION OF parted FOR VALUES FROM (100) TO (200) USING spindle',
	'CREATE TABLE PARTITION OF a published table USING spindle');
refused($pub, 'postgres',
	'ALTER TABLE parted ATTACH PARTITION loose FOR VALUES FROM (200) TO (300)',
	'ATTACH PARTITION of a spindle table to a published table');
refused($pub, 'postgres', 'CREATE PUBLICATION p1 FOR TABLE sparted',
	'CREATE PUBLICATION FOR TABLE partitioned_table_with_a_spindle_partition');
refused($pub, 'postgres', 'ALTER TABLE sparted SET SCHEMA hs',
	'ALTER TABLE SET SCHEMA of a partitioned table with a spindle partition into a published schema');
$pub->safe_psql('postgres',
	'CREATE TABLE parted_heap2 PARTITION OF parted FOR VALUES FROM (300) TO (400)');
pass('a heap partition of a published table is fine');
is( $pub->safe_psql(
		'postgres',
		q{SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_publication_tables WHERE pubname = 'p_parted'}),
	'parted_heap,parted_heap2',
	'p_parted publishes the heap partitions only');

# A database with a FOR ALL TABLES publication.
$pub->safe_psql('postgres', 'CREATE DATABASE allpub');
$pub->safe_psql(
	'allpub', q{
CREATE EXTENSION spindle;
CREATE PUBLICATION pall FOR ALL TABLES;
CREATE TABLE h (id int);
});
pass('FOR ALL TABLES in a database without spindle tables is fine');
refused($pub, 'allpub', 'CREATE TABLE t (id int) USING spindle',
	'CREATE TABLE USING spindle in a database with a FOR ALL TABLES publication');
refused($pub, 'allpub', 'CREATE TABLE t2 USING spindle AS SELECT 1 AS id',
	'CREATE TABLE AS USING spindle in a database with a FOR ALL TABLES publication');
is( $pub->safe_psql(
		'allpub',
		q{SELECT count(*) FROM pg_publication_tables WHERE schemaname = 'pg_spindle'}),
	'0',
	'allpub: no pg_spindle relation in pg_publication_tables');
$pub->safe_psql('allpub', 'DROP PUBLICATION pall');

# The two checks cannot pass concurrently, in either order.
my $s1 = $pub->background_psql('allpub');
my $s2 = $pub->background_psql('allpub', on_error_stop => 0);
my $waiting = q{
SELECT EXISTS (SELECT 1 FROM pg_locks
                WHERE NOT granted AND relation = 'pg_catalog.pg_publication'::regclass)};

$s1->query_safe('BEGIN');
$s1->query_safe('CREATE TABLE r1 (id int) USING spindle');
$s2->query_until(qr/started1/,
	"\\set VERBOSITY verbose\n\\echo started1\nCREATE PUBLICATION pr FOR ALL TABLES;\n");
ok(defined wait_for($pub, 'allpub', $waiting, 30),
	'CREATE PUBLICATION FOR ALL TABLES waits for the transaction creating a spindle table');
$s1->query_safe('COMMIT');
$s2->query('SELECT 1');
like($s2->{stderr}, qr/ERROR:  0A000: /,
	'then it sees the spindle table and is refused');
$s2->{stderr} = '';
is($pub->safe_psql('allpub', 'SELECT count(*) FROM pg_publication'),
	'0', 'no publication');

$pub->safe_psql('allpub', 'DROP TABLE r1');
$s1->query_safe('BEGIN');
$s1->query_safe('CREATE PUBLICATION pr FOR ALL TABLES');
$s2->query_until(qr/started2/,
	"\\echo started2\nCREATE TABLE r2 (id int) USING spindle;\n");
ok(defined wait_for($pub, 'allpub', $waiting, 30),
	'CREATE TABLE USING spindle waits for the transaction creating a FOR ALL TABLES publication');
$s1->query_safe('COMMIT');
$s2->query('SELECT 1');
like($s2->{stderr}, qr/ERROR:  0A000: /,
	'then it sees the publication and is refused');
is($pub->safe_psql('allpub', q{SELECT count(*) FROM pg_class WHERE relname = 'r2'}),
	'0', 'no spindle table');
$s1->quit;
$s2->quit;

# The heap tables replicate, while the spindle table next to them changes.
$sub->safe_psql(
	'postgres', q{
CREATE TABLE plain (id int PRIMARY KEY, body text);
CREATE SCHEMA hs;
CREATE TABLE hs.h (id int PRIMARY KEY);
CREATE TABLE hs.h2 (id int PRIMARY KEY);
});
my $connstr = $pub->connstr() . ' dbname=postgres';
$sub->safe_psql('postgres',
	"CREATE SUBSCRIPTION s CONNECTION '$connstr' PUBLICATION p_plain, p_schema");
$sub->wait_for_subscription_sync($pub, 's');
is($sub->safe_psql('postgres', 'SELECT count(*), sum(id) FROM plain'),
	'10|55', 'subscriber: initial copy of plain');
$pub->safe_psql(
	'postgres', q{
INSERT INTO ev SELECT g, 'event ' || g FROM generate_series(13, 30) g;
INSERT INTO plain SELECT g, 'row ' || g FROM generate_series(11, 20) g;
DELETE FROM ev WHERE id <= 10;
UPDATE plain SET body = 'changed' WHERE id = 1;
DELETE FROM plain WHERE id = 2;
INSERT INTO hs.h2 VALUES (7);
UPDATE ev SET body = 'changed' WHERE id = 20;
INSERT INTO hs.h VALUES (6);
});
$pub->wait_for_catchup('s');
is( $sub->safe_psql(
		'postgres',
		q{SELECT count(*), sum(id), string_agg(body, ',' ORDER BY id) FILTER (WHERE id = 1) FROM plain}),
	'19|208|changed',
	'subscriber: later changes of plain replicate');
is($sub->safe_psql('postgres', 'SELECT string_agg(id::text, \',\' ORDER BY id) FROM hs.h'),
	'1,2,3,4,5,6', 'subscriber: hs.h (FOR TABLES IN SCHEMA) replicates');
is($sub->safe_psql('postgres', 'SELECT string_agg(id::text, \',\') FROM hs.h2'),
	'7', 'subscriber: hs.h2, created later in the schema, replicates');
is( $sub->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_stat_subscription WHERE subname = 's' AND pid IS NOT NULL}),
	'1',
	'the subscription worker runs');
ok(!$sub->log_contains(qr/ERROR/), 'subscriber: no error logged');

is( $pub->safe_psql(
		'postgres', q{
SELECT count(*) FROM pg_publication_tables
 WHERE schemaname = 'pg_spindle'
    OR (quote_ident(schemaname) || '.' || quote_ident(tablename))::regclass IN
       (SELECT relation FROM spindle.tables)}),
	'0',
	'no pg_spindle relation nor spindle table in pg_publication_tables');
is($pub->safe_psql('postgres', 'SELECT count(*) FROM ev'),
	'20', 'the spindle table has its events');

$sub->stop('fast');
$pub->stop('fast');
done_testing();
