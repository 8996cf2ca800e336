-- SET / SET LOCAL / RESET / RESET ALL / SHOW: session settings survive across
-- transactions, SET LOCAL and a SET inside a rolled-back block (or rolled back to a
-- savepoint) do not, SET inside a committed block does, set_config(), unknown
-- settings, custom (dotted) settings, invalid values. All of it must behave as on a
-- dedicated connection in both pooling modes (the proxy replays session settings).
SHOW search_path;
SHOW statement_timeout;
SET search_path TO pg_catalog, public;
SHOW search_path;
SET statement_timeout = '5s';
SET TIME ZONE 'Europe/Paris';
SHOW TimeZone;
SET datestyle = 'German';
SELECT '2024-03-04'::date AS d;
BEGIN;
SET LOCAL statement_timeout = '7s';
SHOW statement_timeout;
COMMIT;
SHOW statement_timeout;
BEGIN;
SET work_mem = '12MB';
SHOW work_mem;
ROLLBACK;
SHOW work_mem;
BEGIN;
SET work_mem = '13MB';
COMMIT;
SHOW work_mem;
BEGIN;
SAVEPOINT sp;
SET work_mem = '14MB';
ROLLBACK TO sp;
SHOW work_mem;
SET work_mem = '15MB';
RELEASE sp;
COMMIT;
SHOW work_mem;
SELECT set_config('application_name', 'tr_from_set_config', false);
SHOW application_name;
SELECT current_setting('work_mem'), current_setting('tr.custom', true) IS NULL AS custom_unset;
SET tr.custom = 'hello';
SHOW tr.custom;
SELECT current_setting('tr.custom');
SET nosuch_setting = 1;
SET work_mem = 'lots';
SET statement_timeout = -1;
SHOW nosuch_setting;
RESET work_mem;
SHOW work_mem;
RESET TIME ZONE;
SHOW TimeZone;
SET SESSION work_mem = '16MB';
SET extra_float_digits = 0;
SELECT 0.1::float8 + 0.2::float8 AS sum;
SET intervalstyle = 'sql_standard';
SELECT interval '1 day 2 hours' AS i;
RESET ALL;
SHOW search_path;
SHOW statement_timeout;
SHOW datestyle;
SHOW work_mem;
SHOW extra_float_digits;
SHOW intervalstyle;
SHOW application_name;
SHOW tr.custom;
SET search_path = DEFAULT;
SET statement_timeout TO DEFAULT;
SHOW ALL \g /dev/null
SELECT name, setting FROM pg_settings WHERE name IN ('work_mem', 'search_path', 'DateStyle') ORDER BY name;
