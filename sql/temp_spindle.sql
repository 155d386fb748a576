-- Temporary spindle tables are refused however the table is made
-- temporary: TEMP, or a name or search_path that puts it in pg_temp.
-- (Named into pg_temp, one used to be created half-way, its spindles
-- temporary relations in the permanent schema pg_spindle, and every use
-- failed with "could not open file".)
CREATE TEMP TABLE temp_sp0 (a int) USING spindle;
CREATE TABLE pg_temp.temp_sp1 (a int) USING spindle;
CREATE TABLE pg_temp.temp_sp2 (a int, b text) USING spindle
    WITH (events_per_spindle = 2);
CREATE TABLE pg_temp.temp_sp3 USING spindle AS SELECT 1 AS a;
-- Without USING, under default_table_access_method = spindle, they are
-- made in heap (core_review2).
SET default_table_access_method = spindle;
CREATE TABLE pg_temp.temp_sp4 (a int);
SELECT 1 AS a INTO pg_temp.temp_sp5;
SET search_path = pg_temp, public;
CREATE TABLE temp_sp6 (a int);
RESET search_path;
RESET default_table_access_method;
SELECT c.relname, a.amname FROM pg_class c JOIN pg_am a ON a.oid = c.relam
 WHERE c.relname IN ('temp_sp4', 'temp_sp5', 'temp_sp6') ORDER BY 1;
DROP TABLE temp_sp4, temp_sp5, temp_sp6;
SELECT count(*) FROM pg_class c JOIN pg_am a ON a.oid = c.relam
 WHERE c.relpersistence = 't' AND a.amname IN ('spindle', 'spindle_segment');
-- a temporary heap table in pg_temp is still fine
CREATE TABLE pg_temp.temp_heap (a int);
INSERT INTO temp_heap VALUES (1);
SELECT * FROM temp_heap;
DROP TABLE temp_heap;
