--
-- queue_fk: dequeue and ack purge events by position (range purges), which
-- check no foreign key, so a queue whose table a foreign key references is
-- refused to consumers (as TRUNCATE and purge_expired refuse such a table),
-- and no referencing row is ever left without its event.
--
SELECT spindle.create_queue('q_fk') IS NOT NULL AS created;
ALTER TABLE spindle_q.q_fk ADD PRIMARY KEY (msg_id);
CREATE TABLE q_fk_ref (m bigint REFERENCES spindle_q.q_fk (msg_id));
INSERT INTO q_fk_ref SELECT spindle.enqueue('q_fk', jsonb_build_object('n', g))
  FROM generate_series(1, 3) g;
-- a DELETE is checked
DELETE FROM spindle_q.q_fk;
-- the consumers are refused, before anything is purged
\set VERBOSITY default
SELECT count(*) FROM spindle.dequeue('q_fk');
SELECT count(*) FROM spindle.read('q_fk', 1, '1 hour');
SELECT spindle.ack('q_fk', (SELECT min(m) FROM q_fk_ref));
SELECT spindle.set_visibility('q_fk', (SELECT min(m) FROM q_fk_ref), '1 second');
\set VERBOSITY terse
SELECT count(*) AS orphans FROM q_fk_ref
 WHERE NOT EXISTS (SELECT 1 FROM spindle_q.q_fk WHERE msg_id = m);
SELECT count(*) AS events FROM spindle_q.q_fk;
-- without the foreign key they are served
DROP TABLE q_fk_ref;
SELECT count(*) AS dequeued FROM spindle.dequeue('q_fk', 2);
-- a self-reference counts too
ALTER TABLE spindle_q.q_fk ADD CONSTRAINT q_fk_self
  FOREIGN KEY (msg_id) REFERENCES spindle_q.q_fk (msg_id);
SELECT count(*) FROM spindle.dequeue('q_fk');
ALTER TABLE spindle_q.q_fk DROP CONSTRAINT q_fk_self;
SELECT count(*) AS dequeued FROM spindle.dequeue('q_fk');
SELECT spindle.drop_queue('q_fk');
