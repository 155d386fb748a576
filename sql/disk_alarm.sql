--
-- spindle.disk_free_limit (the disk alarm, docs/design.md "Disk alarm"):
-- memory units, default 1GB, 0 turns it off, changed only by a reload.
-- (Producers refused on a file system below it: test/t/047_disk_alarm.pl.)
--
SHOW spindle.disk_free_limit;
SELECT setting, unit, context, boot_val, min_val, max_val
  FROM pg_settings WHERE name = 'spindle.disk_free_limit';

-- not per session: every backend compares with the same limit
SET spindle.disk_free_limit = '2GB';
SET spindle.disk_free_limit = 0;
ALTER ROLE CURRENT_USER SET spindle.disk_free_limit = 0;

-- bad values
ALTER SYSTEM SET spindle.disk_free_limit = 'lots';
ALTER SYSTEM SET spindle.disk_free_limit = '-1MB';
ALTER SYSTEM SET spindle.disk_free_limit = -1;
ALTER SYSTEM SET spindle.disk_free_limit = '3000TB';
ALTER SYSTEM SET spindle.disk_free_limit = '5 parsecs';
-- good ones (written to postgresql.auto.conf, then taken back)
ALTER SYSTEM SET spindle.disk_free_limit = '512MB';
ALTER SYSTEM SET spindle.disk_free_limit = '2TB';
ALTER SYSTEM SET spindle.disk_free_limit = 0;
ALTER SYSTEM RESET spindle.disk_free_limit;
SHOW spindle.disk_free_limit;

-- what the launcher measured: for superusers and pg_monitor
SELECT has_function_privilege('pg_monitor', 'spindle.disk_alarm()', 'EXECUTE') AS pg_monitor,
       has_function_privilege('public', 'spindle.disk_alarm()', 'EXECUTE') AS public;
SELECT pg_get_function_arguments('spindle.disk_alarm'::regproc);
