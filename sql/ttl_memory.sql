-- A backend remembers the full spindles it purged completely, so that
-- later purges skip them; it forgets them once they are dropped, so a
-- long-lived backend (the worker) does not accumulate one entry per
-- spindle it ever purged.  Three rounds of 200 spindles, each purged and
-- dropped: the memory of that record does not grow after the first.
CREATE TABLE ttl_mem (id int) USING spindle WITH (events_per_spindle = 1);
CREATE FUNCTION ttl_mem_round(lo int) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    purged bigint;
BEGIN
    INSERT INTO ttl_mem SELECT g FROM generate_series(lo, lo + 199) g;
    PERFORM pg_sleep(1.1);
    purged := spindle.purge_expired('ttl_mem', '0 s');
    RETURN purged;
END $$;
SELECT ttl_mem_round(1);
SELECT spindle.drop_spindles('ttl_mem') > 0 AS dropped;
SELECT count(*) FROM spindle.spindles WHERE relation = 'ttl_mem'::regclass AND state = 'full';
SELECT ttl_mem_round(201);
SELECT total_bytes AS after_two FROM pg_backend_memory_contexts
 WHERE name = 'spindle purged spindles' \gset
SELECT spindle.drop_spindles('ttl_mem') > 0 AS dropped;
SELECT ttl_mem_round(401);
SELECT spindle.drop_spindles('ttl_mem') > 0 AS dropped;
SELECT ttl_mem_round(601);
SELECT total_bytes <= :after_two AS bounded FROM pg_backend_memory_contexts
 WHERE name = 'spindle purged spindles';
-- and nothing is skipped that should be purged
SELECT count(*) FROM ttl_mem;
DROP TABLE ttl_mem;
DROP FUNCTION ttl_mem_round(int);
