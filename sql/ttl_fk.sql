-- A TTL purge deletes events without firing triggers, so it would also
-- skip the checks of foreign keys that reference the table and leave the
-- referencing rows orphaned.  Like TRUNCATE, it is refused on a table that
-- a foreign key references (from another table, from itself, or through a
-- partitioned parent), and changes nothing.
CREATE TABLE ttl_fk_p (id int PRIMARY KEY, body text) USING spindle
    WITH (events_per_spindle = 2, time_to_live = '1 hour');
CREATE TABLE ttl_fk_c (pid int REFERENCES ttl_fk_p (id));
INSERT INTO ttl_fk_p SELECT g, 'p' || g FROM generate_series(1, 4) g;
INSERT INTO ttl_fk_c VALUES (1), (2);
SELECT pg_sleep(1.1);
-- a DELETE is checked
DELETE FROM ttl_fk_p WHERE id = 1;
-- so is a purge: refused
SELECT spindle.purge_expired('ttl_fk_p', '0 s');
SELECT count(*) FROM ttl_fk_p;
SELECT count(*) FROM ttl_fk_c WHERE NOT EXISTS (SELECT 1 FROM ttl_fk_p WHERE id = pid);
-- without the foreign key it purges
ALTER TABLE ttl_fk_c DROP CONSTRAINT ttl_fk_c_pid_fkey;
SELECT spindle.purge_expired('ttl_fk_p', '0 s');
SELECT count(*) FROM ttl_fk_p;

-- a table that references itself
CREATE TABLE ttl_fk_s (id int PRIMARY KEY, parent int REFERENCES ttl_fk_s (id))
    USING spindle WITH (events_per_spindle = 2);
INSERT INTO ttl_fk_s VALUES (1, NULL);
INSERT INTO ttl_fk_s VALUES (2, 1);
SELECT pg_sleep(1.1);
SELECT spindle.purge_expired('ttl_fk_s', '0 s');
SELECT count(*) FROM ttl_fk_s;

-- a spindle partition of a partitioned table that a foreign key references
CREATE TABLE ttl_fk_pp (id int PRIMARY KEY, body text) PARTITION BY RANGE (id);
CREATE TABLE ttl_fk_pp1 PARTITION OF ttl_fk_pp FOR VALUES FROM (0) TO (100)
    USING spindle WITH (events_per_spindle = 2);
CREATE TABLE ttl_fk_pc (pid int REFERENCES ttl_fk_pp (id));
INSERT INTO ttl_fk_pp SELECT g, 'q' || g FROM generate_series(1, 4) g;
INSERT INTO ttl_fk_pc VALUES (3);
SELECT pg_sleep(1.1);
SELECT spindle.purge_expired('ttl_fk_pp1', '0 s');
SELECT count(*) FROM ttl_fk_pp;
-- a foreign key from the table to another one is no obstacle
CREATE TABLE ttl_fk_target (id int PRIMARY KEY);
INSERT INTO ttl_fk_target VALUES (1);
CREATE TABLE ttl_fk_r (id int REFERENCES ttl_fk_target (id)) USING spindle
    WITH (events_per_spindle = 2);
INSERT INTO ttl_fk_r VALUES (1), (1), (1);
SELECT pg_sleep(1.1);
SELECT spindle.purge_expired('ttl_fk_r', '0 s');

DROP TABLE ttl_fk_c, ttl_fk_p, ttl_fk_s, ttl_fk_pc, ttl_fk_pp, ttl_fk_r, ttl_fk_target;
