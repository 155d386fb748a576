--
-- review_s_cache: hostile review of the event cache (cache.c) and
-- spindle.cache_stats.
--
-- spindle._cache_stats() is callable by anyone (the view needs it): it must
-- not show the cache slots of tables the caller may not SELECT from.
--
CREATE ROLE rs_cache_nobody;
SELECT spindle.create_queue('rs_cq');
SELECT count(*) FROM spindle.enqueue_batch('rs_cq',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 3) g));
SELECT count(*) FROM spindle.dequeue('rs_cq', 1);
SELECT entries, hits FROM spindle._cache_stats()
 WHERE relid = 'spindle_q.rs_cq'::regclass;
SET ROLE rs_cache_nobody;
SELECT count(*) FROM spindle.cache_stats;
SELECT count(*) FROM spindle._cache_stats()
 WHERE relid = 'spindle_q.rs_cq'::regclass;
RESET ROLE;
GRANT SELECT ON spindle_q.rs_cq TO rs_cache_nobody;
SET ROLE rs_cache_nobody;
SELECT count(*) FROM spindle._cache_stats()
 WHERE relid = 'spindle_q.rs_cq'::regclass;
RESET ROLE;
SELECT spindle.drop_queue('rs_cq');
DROP ROLE rs_cache_nobody;
