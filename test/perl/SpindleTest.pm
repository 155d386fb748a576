# SpindleTest.pm: helpers shared by spindle's TAP tests (test/t/*.pl).
package SpindleTest;

use strict;
use warnings;
use Exporter 'import';
use Time::HiRes qw(gettimeofday tv_interval usleep);
use Test::More;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils qw(slurp_file);
use Fcntl;
use JSON::PP ();

our @EXPORT = qw(small_mount fill_filesystem wait_for verify_ok queue_node queue_logs load_scripts
  start_load stop_load drain_queue check_consistent check_read_counts
  next_epoch log_counts install_wait_backend kill9_and_wait
  psql_ok sleep_until read_events spindle_node parked_node explain_cost median cost_beside
  ack_all_verify standby_pair count_or_cancelled reset_next_xid
  lost_pages_sql crash_at_pause);

# Why directory $d is no small file system of its own that this user can
# write to (at most 64 MB), or '' if it is one: the disk-full and disk
# alarm tests fill it (scripts/test.sh mounts an 8 MB tmpfs at
# /mnt/spindle-small when it runs as root).
sub small_mount
{
	my ($d) = @_;
	return "$d does not exist" unless -d $d;
	return "$d is not writable by this user" unless -w $d;
	my @st = stat($d);
	my @up = stat("$d/..");
	return "$d is not a mount point" if $st[0] == $up[0];
	my $df = `df -Pk '$d' 2>/dev/null`;
	my ($kb) = $df =~ /\n\S+\s+(\d+)\s/;
	return "cannot tell the size of $d" unless defined $kb;
	return "$d is not small (${kb} kB; at most 64 MB)" if $kb > 64 * 1024;
	return '';
}

# Fill the file system of $filler with that file, then give back $room
# bytes of it; returns the file's size when full.  The disk-full and disk
# alarm tests call it on their small file system.
sub fill_filesystem
{
	my ($filler, $room) = @_;
	sysopen(my $fh, $filler, O_WRONLY | O_CREAT) or die "$filler: $!";
	sysseek($fh, 0, 2);
	my $chunk = "\0" x 65536;
	while (1)
	{
		my $n = syswrite($fh, $chunk);
		last unless defined $n && $n == length($chunk);
	}
	my $size = -s $filler;
	truncate($fh, $size > $room ? $size - $room : 0) or die "truncate: $!";
	close $fh;
	return $size;
}

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


# ---- fault-injection helpers (tests 034-039) ------------------------------
#
# A queue under test has heap log tables written in the same transaction as
# the queue operation they log, so that after any fault the logs hold
# exactly what committed:
#   produced_Q (msg_id)                      enqueue committed
#   consumed_Q (msg_id, read_count)          dequeue committed
#   reads_Q    (msg_id, read_count, epoch)   read() returned it (a lease)
#   acked_Q    (msg_id)                      ack() committed, returned true
# epoch (e) counts server restarts: read counts are checked per epoch
# (check_read_counts: consecutive within one, never below the last).

# A new node for queue fault tests; %conf lines are appended as given.
sub queue_node
{
	my ($name, %opt) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%{ $opt{init} // {} });
	$node->append_conf(
		'postgresql.conf', qq{
shared_preload_libraries = 'spindle'
max_worker_processes = 24
max_connections = 40
spindle.naptime = '100ms'
restart_after_crash = on
autovacuum = off
} . ($opt{conf} // ''));
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION spindle');
	$node->safe_psql('postgres',
		'CREATE TABLE IF NOT EXISTS epoch (e int); INSERT INTO epoch SELECT 0 WHERE NOT EXISTS (SELECT FROM epoch)'
	);
	return $node;
}

# Create queue $q (events_per_spindle $eps) and its log tables.
sub queue_logs
{
	my ($node, $db, $q, $eps, $pre) = @_;
	$pre //= '';
	$node->safe_psql(
		$db, qq{
$pre
SELECT spindle.create_queue('$q', events_per_spindle => $eps);
RESET default_tablespace;
CREATE TABLE produced_$q (msg_id bigint);
CREATE TABLE consumed_$q (msg_id bigint, read_count int);
CREATE TABLE reads_$q (msg_id bigint, read_count int, epoch int);
CREATE TABLE acked_$q (msg_id bigint);
});
}

# After a restart: leases are gone, read counts start again.
sub next_epoch
{
	my ($node, $db) = @_;
	$node->safe_psql($db // 'postgres', 'UPDATE epoch SET e = e + 1');
}

# Write pgbench scripts for queue $q into $dir; returns a hash of file
# names: prod (one enqueue, 20 % rolled back), batch (enqueue_batch of
# $opt{batch} events), cons (dequeue of $opt{dequeue}, 10 % rolled back),
# reader (read with a lease of $opt{vt}, ack of about 60 % of what it got).
sub load_scripts
{
	my ($dir, $q, %opt) = @_;
	my $batch = $opt{batch} // 10;
	my $deq = $opt{dequeue} // 5;
	my $vt = $opt{vt} // '1 second';
	my %f = (
		prod => qq{\\set r random(1, 10)
BEGIN;
INSERT INTO produced_$q SELECT spindle.enqueue('$q', jsonb_build_object('r', :r, 'pad', repeat('x', 60)));
\\if :r > 2
COMMIT;
\\else
ROLLBACK;
\\endif
},
		batch => qq{INSERT INTO produced_$q SELECT * FROM spindle.enqueue_batch('$q', ARRAY(SELECT jsonb_build_object('g', g) FROM generate_series(1, $batch) g));
},
		cons => qq{\\set r random(1, 10)
BEGIN;
INSERT INTO consumed_$q SELECT msg_id, read_count FROM spindle.dequeue('$q', $deq);
\\if :r > 1
COMMIT;
\\else
ROLLBACK;
\\endif
},
		reader => qq{WITH r AS MATERIALIZED (SELECT msg_id, read_count FROM spindle.read('$q', 3, '$vt')),
     l AS (INSERT INTO reads_$q SELECT msg_id, read_count, (SELECT e FROM epoch) FROM r)
INSERT INTO acked_$q SELECT msg_id FROM r
 WHERE CASE WHEN random() < 0.6 THEN spindle.ack('$q', msg_id) ELSE false END;
});
	my %names;
	for my $k (keys %f)
	{
		my $file = "$dir/${k}_$q.sql";
		open my $fh, '>', $file or die "$file: $!";
		print $fh $f{$k};
		close $fh;
		$names{$k} = $file;
	}
	return \%names;
}

# Start pgbench in the background: $clients clients for $seconds, with
# scripts given as [file, weight] pairs.  Returns a handle for stop_load.
sub start_load
{
	my ($node, $db, $seconds, $clients, @scripts) = @_;
	my %h = (out => '', err => '');
	my @cmd = (
		'pgbench', '-n', '-h', $node->host, '-p', $node->port,
		'-c', $clients, '-j', 2, '-T', $seconds);
	push @cmd, '-f', "$_->[0]\@$_->[1]" for @scripts;
	push @cmd, $db;
	$h{run} = IPC::Run::start(\@cmd, '<', \undef, '>', \$h{out}, '2>',
		\$h{err});
	return \%h;
}

# Wait for (or, with $kill, end) a load; returns (stdout, stderr).
sub stop_load
{
	my ($h, $kill) = @_;
	if ($kill)
	{
		$h->{run}->kill_kill;
	}
	else
	{
		eval { $h->{run}->finish; };
	}
	return ($h->{out}, $h->{err});
}

# Dequeue everything left in $q into its consumed log, waiting for leases
# to run out; returns how many events it took.  Fails the test if the
# queue is not empty after $limit seconds.
sub drain_queue
{
	my ($node, $db, $q, $limit) = @_;
	$limit //= 30;
	my $t0 = [gettimeofday];
	my $total = 0;
	while (1)
	{
		my $n = $node->safe_psql(
			$db, qq{
WITH d AS (INSERT INTO consumed_$q SELECT msg_id, read_count
             FROM spindle.dequeue('$q', 1000) RETURNING 1)
SELECT count(*) FROM d});
		$total += $n;
		next if $n > 0;
		last
		  if $node->safe_psql($db, "SELECT count(*) FROM spindle_q.$q") eq
		  '0';
		if (tv_interval($t0) > $limit)
		{
			fail("drain of $q: queue empty within $limit s");
			last;
		}
		usleep(100_000);
	}
	return $total;
}

# "produced:consumed:acked:in queue" of queue $q.
sub log_counts
{
	my ($node, $db, $q) = @_;
	return $node->safe_psql(
		$db, qq{
SELECT (SELECT count(*) FROM produced_$q) || ':' || (SELECT count(*) FROM consumed_$q)
       || ':' || (SELECT count(*) FROM acked_$q) || ':' || (SELECT count(*) FROM spindle_q.$q)});
}

# Consistency of a spindle table with what exists today; the lead extends
# it with spindle.verify() (helper N's verify_ok) once that is on main.
# Call it with no load running.  For a queue (spindle_q.Q) with log
# tables, also: the queue holds exactly produced - consumed - acked, no
# msg_id was delivered twice (consumed, acked, or both), nothing delivered
# that was not produced.  Runs its checks as tests named after $what;
# returns true if all passed.
sub check_consistent
{
	my ($node, $db, $rel, $what) = @_;
	$what //= $rel;
	my $ok = 1;
	my $q;
	$q = $1 if $rel =~ /^spindle_q\.([a-z_][a-z0-9_]*)$/;

	# spindle.spindles: counters within bounds, one open spindle at most,
	# ready spindles empty, the live events are what a scan sees (annexes,
	# where compaction moved events, count as spindles of their own)
	$ok &= is(
		$node->safe_psql(
			$db, qq{
SELECT string_agg(spindle_no || ' ' || state || ' ' || events || '/' || purged_events || '/' || capacity, ', ')
  FROM spindle.spindles
 WHERE relation = '$rel'::regclass
   AND (purged_events < 0 OR purged_events > events
        OR (capacity > 0 AND events > capacity)
        OR (state = 'ready' AND events <> 0)
        OR (state = 'full' AND capacity > 0 AND events <> capacity)
        OR state NOT IN ('open', 'full', 'ready', 'annex'))}),
		'',
		"$what: every spindle's counters are within bounds");
	# (asked again for up to 10 s: the worker may be between a spindle's
	# last slot and its full mark, or making an annex, meanwhile)
	my $one_open_q = qq{
SELECT count(*) FILTER (WHERE state = 'open') <= 1
       AND count(*) = count(DISTINCT spindle_no)
  FROM spindle.spindles WHERE relation = '$rel'::regclass};
	my $one_open_t = [gettimeofday];
	my $one_open_r;
	while (($one_open_r = $node->safe_psql($db, $one_open_q)) ne 't'
		&& tv_interval($one_open_t) < 10)
	{
		usleep(200_000);
	}
	my $one_open = is($one_open_r, 't',
		"$what: at most one open spindle, spindle numbers unique");
	$ok &= $one_open;
	diag(
		$node->safe_psql(
			$db, qq{
SELECT string_agg(spindle_no || ' ' || state || ' ' || events || '/' || purged_events || ' gen ' || generation, ', ' ORDER BY spindle_no)
  FROM spindle.spindles WHERE relation = '$rel'::regclass}))
	  unless $one_open;
	# live events by the counters vs a scan: never fewer (the view never
	# hides an event), and equal when nothing is in flight, also after a
	# crash or an insert that failed while placing its tuples (disk full):
	# the slots such an insert had taken count as purged.  The worker's
	# compaction may be moving events meanwhile (a move's purge of its
	# source and its copy in an annex count at its commit, which the view
	# and the scan may see on either side): asked again for up to 10 s
	# until they agree.
	my ($live_view, $live_scan);
	my $t0 = [gettimeofday];
	while (1)
	{
		my $cmp = $node->safe_psql(
			$db, qq{
SELECT coalesce(sum(events - purged_events), 0) || ':' || (SELECT count(*) FROM $rel)
  FROM spindle.spindles WHERE relation = '$rel'::regclass});
		($live_view, $live_scan) = split /:/, $cmp;
		last if $live_view eq $live_scan || tv_interval($t0) > 10;
		usleep(200_000);
	}
	my $eq = is($live_view, $live_scan,
		"$what: spindle counters agree with count(*)");
	$ok &= $eq;
	diag(
		$node->safe_psql(
			$db, qq{
SELECT (SELECT count(*) FROM $rel) || ' rows; spindles: ' ||
       string_agg(spindle_no || ' ' || state || ' ' || events || '/' || purged_events, ', ' ORDER BY spindle_no)
  FROM spindle.spindles WHERE relation = '$rel'::regclass AND events <> purged_events}))
	  unless $eq;
	# every invariant spindle.verify() checks
	$ok &= verify_ok($node, $db, $rel, "$what: spindle.verify() finds nothing");

	return $ok
	  unless defined $q
	  && $node->safe_psql($db,
		"SELECT to_regclass('produced_$q') IS NOT NULL") eq 't';

	$ok &= is(
		$node->safe_psql(
			$db, qq{
SELECT (SELECT count(*) FROM (SELECT msg_id FROM consumed_$q GROUP BY 1 HAVING count(*) > 1) a)
    || ':' || (SELECT count(*) FROM (SELECT msg_id FROM acked_$q GROUP BY 1 HAVING count(*) > 1) b)
    || ':' || (SELECT count(*) FROM consumed_$q c JOIN acked_$q a USING (msg_id))
    || ':' || (SELECT count(*) FROM (SELECT msg_id FROM spindle_q.$q GROUP BY 1 HAVING count(*) > 1) q)}),
		'0:0:0:0',
		"$what: nothing delivered twice (dequeued twice:acked twice:both:twice in the queue)"
	);
	$ok &= is(
		$node->safe_psql(
			$db, qq{
SELECT (SELECT count(*) FROM (SELECT msg_id FROM consumed_$q UNION ALL SELECT msg_id FROM acked_$q
                              EXCEPT SELECT msg_id FROM produced_$q) x)
    || ':' || (SELECT count(*) FROM (SELECT msg_id FROM spindle_q.$q EXCEPT SELECT msg_id FROM produced_$q) y)}),
		'0:0',
		"$what: nothing delivered or queued that no committed enqueue produced");
	$ok &= is(
		$node->safe_psql(
			$db, qq{
SELECT count(*) FROM (SELECT msg_id FROM produced_$q
                      EXCEPT (SELECT msg_id FROM consumed_$q UNION ALL SELECT msg_id FROM acked_$q
                              UNION ALL SELECT msg_id FROM spindle_q.$q)) x}),
		'0',
		"$what: no committed event lost (every one consumed, acked or in the queue)"
	);
	$ok &= is(
		$node->safe_psql(
			$db, qq{
SELECT count(*) FROM (SELECT msg_id FROM spindle_q.$q
                      INTERSECT (SELECT msg_id FROM consumed_$q UNION ALL SELECT msg_id FROM acked_$q)) x}),
		'0',
		"$what: no consumed or acked event is still in the queue");
	return $ok;
}

# Every redelivery counted: within one epoch (no restart between), the
# reads of an event have consecutive read counts with no gap and no
# repeat, and no epoch starts below the count the event reached before
# (leases and read counts are parked on disk and survive restarts; a
# crash may forget a last read not yet flushed, so an epoch may repeat the
# previous epoch's last count, and a read whose logging transaction a
# crash undid may still count, so an epoch may start higher).
sub check_read_counts
{
	my ($node, $db, $q, $what) = @_;
	$what //= $q;
	my $bad = $node->safe_psql(
		$db, qq{
SELECT count(*) || ':' || coalesce(string_agg(msg_id || '\@' || epoch || '=' || rcs, ' '), '') FROM (
  SELECT msg_id, epoch, rcs FROM (
    SELECT msg_id, epoch, string_agg(read_count::text, ',' ORDER BY read_count) rcs,
           count(*) AS n, count(DISTINCT read_count) AS nd,
           min(read_count) AS lo, max(read_count) AS hi,
           lag(max(read_count)) OVER (PARTITION BY msg_id ORDER BY epoch) AS before,
           row_number() OVER (PARTITION BY msg_id ORDER BY epoch) AS k
      FROM reads_$q GROUP BY msg_id, epoch) e
   WHERE n <> hi - lo + 1 OR nd <> n OR (k > 1 AND lo < before)) x});
	my $ok = is($bad =~ s/:.*//sr, '0',
		"$what: read_count counts every redelivery (1..n per event and epoch)");
	diag("events with wrong read counts: $bad") unless $ok;
	return $ok;
}

# Install wait_backend(kind, lockmode, timeout_s): polls (server side, every
# 2 ms) for a process of backend_type kind, holding a granted relation lock
# of lockmode if that is not NULL; returns its pid, or 0 after timeout_s.
sub install_wait_backend
{
	my ($node, $db) = @_;
	$node->safe_psql(
		$db // 'postgres', q{
CREATE OR REPLACE FUNCTION wait_backend(kind text, lockmode text, timeout_s float8)
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
  p int;
  t0 timestamptz := clock_timestamp();
BEGIN
  LOOP
    PERFORM pg_stat_clear_snapshot();
    SELECT a.pid INTO p FROM pg_stat_activity a
     WHERE a.backend_type = kind
       AND (lockmode IS NULL OR EXISTS (
             SELECT FROM pg_locks l WHERE l.pid = a.pid AND l.granted
                AND l.locktype = 'relation' AND l.mode = lockmode))
     LIMIT 1;
    IF p IS NOT NULL THEN RETURN p; END IF;
    IF clock_timestamp() - t0 > make_interval(secs => timeout_s) THEN RETURN 0; END IF;
    PERFORM pg_sleep(0.002);
  END LOOP;
END $$;
-- the pid of the worker while it holds the AccessExclusiveLock of an
-- existing spindle (pg_spindle.s<table oid>_<spindle_no>, committed: one
-- it is creating is not visible here), that is while it drops it; 0 after
-- timeout_s
CREATE OR REPLACE FUNCTION wait_worker_drop(timeout_s float8)
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
  p int;
  t0 timestamptz := clock_timestamp();
BEGIN
  LOOP
    PERFORM pg_stat_clear_snapshot();
    SELECT a.pid INTO p FROM pg_stat_activity a
      JOIN pg_locks l ON l.pid = a.pid AND l.granted AND l.locktype = 'relation'
                     AND l.mode = 'AccessExclusiveLock'
      JOIN pg_class c ON c.oid = l.relation
      JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'pg_spindle'
     WHERE a.backend_type = 'spindle worker'
     LIMIT 1;
    IF p IS NOT NULL THEN RETURN p; END IF;
    IF clock_timestamp() - t0 > make_interval(secs => timeout_s) THEN RETURN 0; END IF;
    PERFORM pg_sleep(0.002);
  END LOOP;
END $$});
}

# SIGKILL process $pid of $node; the postmaster restarts every backend
# (restart_after_crash = on).  Waits until the server takes queries again.
# Returns true if the postmaster reported that $pid died of signal 9
# (false: it had exited before the signal came).
sub kill9_and_wait
{
	my ($node, $pid) = @_;
	my $off = -s $node->logfile;
	# never kill(0): that is this process group
	return 0 unless defined $pid && $pid =~ /^\d+$/ && $pid > 0;
	return 0 unless kill('KILL', $pid);
	my $t0 = [gettimeofday];
	until ($node->log_contains(qr/\(PID $pid\) was terminated by signal 9/, $off))
	{
		# it had exited by itself before the signal came
		return 0 if tv_interval($t0) > 10;
		usleep(20_000);
	}
	$node->wait_for_log(qr/all server processes terminated; reinitializing/,
		$off);
	$node->poll_query_until('postgres', 'SELECT 1', '1')
	  or die 'server did not come back after the SIGKILL';
	return 1;
}

# Run $sql in database postgres of $node; assert that it succeeded (the
# error in the diagnostics if not) and return its output.
sub psql_ok
{
	my ($node, $sql, $name) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', $sql, timeout => 180);
	ok($ret == 0, $name) or diag("error: $err");
	return $out;
}

# Sleep until time() >= $t (seconds, fractional).
sub sleep_until
{
	my ($t) = @_;
	my $d = $t - time();
	usleep(int($d * 1e6)) if $d > 0;
	return;
}

# What read() of queue $q returns ($n events, visibility timeout $vt), as
# "e:read_count" in msg_id order (e: the payload's "e"), joined with
# commas ('' for nothing); asserts that the call succeeded.
sub read_events
{
	my ($node, $q, $n, $vt, $name) = @_;
	return psql_ok($node, qq{
SELECT coalesce(string_agg((payload->>'e') || ':' || read_count, ',' ORDER BY msg_id), '')
  FROM spindle.read('$q', $n, '$vt')}, $name);
}

# Acknowledge every event left in queue $q, which must be $count of them,
# then check that the queue is empty and verify() finds nothing wrong.
sub ack_all_verify
{
	my ($node, $q, $count, $what) = @_;
	is( psql_ok($node,
			qq{SELECT count(*) FROM spindle.ack('$q', ARRAY(SELECT msg_id FROM spindle_q.$q))},
			"$q: ack all"),
		$count, "$q: $what acknowledged");
	is($node->safe_psql('postgres', "SELECT count(*) FROM spindle_q.$q"),
		'0', "$q: the queue is empty");
	verify_ok($node, 'postgres', "spindle_q.$q");
	return;
}

# ---- the parked-state tests (060, 061, 063) --------------------------------

# A started node with spindle preloaded and created in database postgres
# and the worker off; $conf is appended to postgresql.conf as given.
sub spindle_node
{
	my ($name, $conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf(
		'postgresql.conf', q{
shared_preload_libraries = 'spindle'
max_worker_processes = 16
spindle.enable_worker = off
} . ($conf // ''));
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION spindle');
	return $node;
}

# A primary (spindle preloaded, the extension created, $pconf appended)
# and a streaming standby made from its backup ($sconf appended), both
# started; the nodes are named $prefix . 'primary' and $prefix . 'standby'.
sub standby_pair
{
	my ($prefix, $pconf, $sconf) = @_;
	my $primary = PostgreSQL::Test::Cluster->new(($prefix // '') . 'primary');
	$primary->init(allows_streaming => 1);
	$primary->append_conf('postgresql.conf',
		"shared_preload_libraries = 'spindle'\n" . ($pconf // ''));
	$primary->start;
	$primary->safe_psql('postgres', 'CREATE EXTENSION spindle');
	$primary->backup('b');
	my $standby = PostgreSQL::Test::Cluster->new(($prefix // '') . 'standby');
	$standby->init_from_backup($primary, 'b', has_streaming => 1);
	$standby->append_conf('postgresql.conf', $sconf) if defined $sconf;
	$standby->start;
	return ($primary, $standby);
}

# Run $sql (a count) in the standby session $rr of backend $pid, then
# quit the session.  Returns the count, or "cancelled" if the query gave
# no count and $standby logged that it cancelled that backend's query or
# terminated its connection for a recovery conflict (SQLSTATE 40001), or
# what psql said.
sub count_or_cancelled
{
	my ($standby, $rr, $pid, $sql) = @_;
	my ($out, $ret) = ('', 1);
	eval { ($out, $ret) = $rr->query($sql); };
	my $said = ($rr->{stderr} // '') . ($@ // '');
	eval { $rr->quit; };
	return $out if !$ret && $out =~ /^\d+$/;
	my $log = slurp_file($standby->logfile);
	return 'cancelled'
	  if $log =~
	  /\[$pid\] [^\n]*(ERROR|FATAL):  40001: (canceling statement|terminating connection) due to conflict with recovery/;
	return "no count: [$out] [$said]";
}

# The same with autovacuum off too (nothing moves unless the test moves
# it), for the parked-state tests.
sub parked_node
{
	my ($name) = @_;
	return spindle_node($name, "shared_buffers = 128MB\nautovacuum = off\n");
}

# Run $sql under EXPLAIN (ANALYZE, BUFFERS) in the BackgroundPsql $session:
# returns (rows, execution ms, shared buffers hit or read).  A failed
# statement returns (0, 1e9, 1e9), so that it can never pass as cheap.
sub explain_cost
{
	my ($session, $sql) = @_;
	my ($json, $ret) =
	  $session->query("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) $sql");
	if ($ret)
	{
		diag("$sql failed: $session->{stderr}");
		$session->{stderr} = '';
		return (0, 1e9, 1e9);
	}
	my $top = JSON::PP::decode_json($json)->[0];
	my $plan = $top->{Plan};
	return ($plan->{'Actual Rows'}, $top->{'Execution Time'},
		$plan->{'Shared Hit Blocks'} + $plan->{'Shared Read Blocks'});
}

# A query for the pages of queue table $queue's consumer relation that no
# tree, no free list and no metapage holds (a tree set aside counts as
# held by none): the relation's size less the pages of its trees 0 to
# $maxsub (_run_verify's, meta blocks counted), the free list's length
# (the metapage's nfree, read with pageinspect, which the caller creates)
# and the metapage.
sub lost_pages_sql
{
	my ($queue, $maxsub) = @_;
	return qq{
WITH c AS (SELECT ('pg_spindle.c' || '$queue'::regclass::oid)::regclass AS crel),
m AS (SELECT get_raw_page(crel::text, 0) AS p, pg_relation_size(crel) / 8192 AS total FROM c),
t AS (SELECT sum(pages + CASE WHEN height > 0 THEN 1 ELSE 0 END) AS tree_pages
        FROM generate_series(0, $maxsub) s, spindle._run_verify('$queue', s))
SELECT total - tree_pages - 1
       - ('x' || encode(substring(p from 40 for 1) || substring(p from 39 for 1)
                        || substring(p from 38 for 1) || substring(p from 37 for 1),
                        'hex'))::bit(32)::int
  FROM m, t};
}

# Stop a writer of $node at the test-only pause point $point (running
# $sql with spindle.test_pause set), hold it there with the advisory lock
# (4242, 1), make sure what it wrote reached the WAL on disk (a commit of
# another session flushes it), and crash the server (-m immediate); then
# start it again.
sub crash_at_pause
{
	my ($node, $point, $sql) = @_;
	my $holder = $node->background_psql('postgres');
	$holder->query_safe('SELECT pg_advisory_lock(4242, 1)');
	my $writer = $node->background_psql('postgres', on_error_stop => 0);
	$writer->query_until(qr/sent/,
		"SET spindle.test_pause = '$point';\n\\echo sent\n$sql;\n");
	Test::More::ok(
		$node->poll_query_until(
			'postgres',
			q{SELECT count(*) > 0 FROM pg_locks
			   WHERE locktype = 'advisory' AND NOT granted}),
		"a writer waits at $point");
	$node->safe_psql('postgres', 'SELECT txid_current()');
	$node->stop('immediate');
	eval { $writer->quit; };
	eval { $holder->quit; };
	$node->start;
	return;
}

sub median
{
	my @s = sort { $a <=> $b } @_;
	return $s[ int(@s / 2) ];
}

# The cost of a call on queue $big beside the same call on $base:
# $measure->($q) returns (rows, ms, buffers) of one call; two warm-up
# rounds each, then $rounds rounds taking the queues in turn (so that the
# machine's noise falls on both).  Returns a hash of
#   rows => { q => rows of all measured calls },
#   ms   => { q => median ms },  buf => { q => median buffers }.
sub cost_beside
{
	my ($measure, $base, $big, $rounds) = @_;
	$measure->($_) for ($base, $big, $base, $big);
	my (%ms, %buf, %rows);
	for (1 .. $rounds)
	{
		for my $q ($base, $big)
		{
			my ($r, $t, $b) = $measure->($q);
			push @{ $ms{$q} }, $t;
			push @{ $buf{$q} }, $b;
			$rows{$q} += $r;
		}
	}
	return (
		rows => \%rows,
		ms => { map { $_ => median(@{ $ms{$_} }) } ($base, $big) },
		buf => { map { $_ => median(@{ $buf{$_} }) } ($base, $big) });
}

# ---- xid wraparound (098) --------------------------------------------------

# Stop $node, set its next xid to $xid with pg_resetwal -x (and its oldest
# unfrozen xid, which the server's wraparound limits start from, to
# $oldest with -u), then start it again.  As PostgreSQL's own tests do,
# the pg_xact (clog) segment holding $xid is made first, 256 kB of zeros
# named by the segment number in hex (1048576 xids a segment); $xid should
# be the first of a segment ("a safe value for -x": pg_resetwal's docs).
sub reset_next_xid
{
	my ($node, $xid, $oldest) = @_;
	$node->stop;
	my $seg = sprintf('%s/pg_xact/%04X', $node->data_dir, int($xid / 1048576));
	unless (-e $seg)
	{
		open my $fh, '>', $seg or die "$seg: $!";
		binmode $fh;
		print $fh "\0" x 262144;
		close $fh;
	}
	PostgreSQL::Test::Utils::system_or_bail('pg_resetwal', '-x', $xid, '-u',
		$oldest, $node->data_dir);
	$node->start;
	return;
}

1;
