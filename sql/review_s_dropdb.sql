--
-- review_s_dropdb: a database dropped and created again with the same OID
-- (CREATE DATABASE ... OID, as after an OID wraparound) from a template
-- that holds a queue: its queue table has the same relation OID and the
-- same msg_ids.  Neither the consumer state (queue_state.c) nor the event
-- cache (cache.c) of the dropped database may be used by the new one: all
-- the new database's events are delivered, and without an error.
--
SELECT current_database() AS regdb \gset
CREATE DATABASE rs_tmpl;
\c rs_tmpl
SET client_min_messages = warning;
CREATE EXTENSION spindle;
SELECT spindle.create_queue('q');
SELECT count(*) FROM spindle.enqueue_batch('q',
    ARRAY(SELECT jsonb_build_object('t', g) FROM generate_series(1, 3) g));
\c :regdb
CREATE DATABASE rs_x WITH OID = 4000000000 TEMPLATE rs_tmpl;
\c rs_x
-- four large events (the last one on the spindle's second page), cached;
-- two events consumed
SELECT count(*) FROM spindle.enqueue_batch('q',
    ARRAY(SELECT jsonb_build_object('x', g, 'pad',
                 (SELECT string_agg(md5(g::text || i::text), '')
                    FROM generate_series(1, 60) i))
            FROM generate_series(4, 7) g));
SELECT payload->>'t' AS t FROM spindle.dequeue('q', 2);
\c rs_tmpl
-- the template's own events 4 to 7, small: on its first page
SELECT count(*) FROM spindle.enqueue_batch('q',
    ARRAY(SELECT jsonb_build_object('t', g) FROM generate_series(4, 7) g));
\c :regdb
DROP DATABASE rs_x;
CREATE DATABASE rs_x WITH OID = 4000000000 TEMPLATE rs_tmpl;
\c rs_x
SELECT count(*) FROM spindle_q.q;
-- all seven, from the pages of this database
SELECT payload->>'t' AS t, payload ? 'x' AS from_dropped
  FROM spindle.dequeue('q', 10) ORDER BY msg_id;
SELECT count(*) FROM spindle_q.q;
\c :regdb
DROP DATABASE rs_x;
DROP DATABASE rs_tmpl;
