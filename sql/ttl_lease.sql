-- Time to live on a queue table leaves leased events alone until their
-- lease ends (issue 18: "a leased event is purged when its lease ends").
SET client_min_messages = warning;
\set VERBOSITY terse
SELECT spindle.create_queue('tlq', time_to_live => '1 s');
SELECT spindle.enqueue('tlq', '{"leased": 1}') AS leased_id \gset
SELECT spindle.enqueue('tlq', '{"free": 1}') AS free_id \gset
SELECT msg_id = :leased_id AS leased_first FROM spindle.read('tlq', 1, '1 min');
SELECT pg_sleep(2.2);
-- both are past their time to live; only the one not leased goes
SELECT spindle.purge_expired('spindle_q.tlq') AS purged;
SELECT payload FROM spindle_q.tlq ORDER BY msg_id;
-- the consumer can still acknowledge it
SELECT spindle.ack('tlq', :leased_id) AS acked;
-- a lease that ended: the expired event is purged
SELECT spindle.enqueue('tlq', '{"short": 1}') AS short_id \gset
SELECT msg_id = :short_id AS leased FROM spindle.read('tlq', 1, '1 s');
SELECT pg_sleep(2.2);
SELECT spindle.purge_expired('spindle_q.tlq') AS purged_after_lease;
SELECT count(*) FROM spindle_q.tlq;
SELECT spindle.ack('tlq', :short_id) AS ack_of_purged;
SELECT * FROM spindle.verify('spindle_q.tlq');
SELECT spindle.drop_queue('tlq');
