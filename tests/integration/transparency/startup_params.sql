-- env: PGDATESTYLE=SQL, DMY
-- env: PGOPTIONS=-c search_path=myschema,public -c work_mem=8MB
-- env: PGTZ=America/New_York
-- Startup parameters: psql runs this script with PGDATESTYLE, PGTZ and PGOPTIONS set
-- (the harness reads the `-- env:` lines above), so the startup packet carries
-- datestyle, TimeZone and options. SHOW sees them, RESET returns to them (not to the
-- server defaults), RESET ALL too, and they hold in later transactions.
CREATE SCHEMA myschema;
CREATE TABLE myschema.where_am_i (v text);
INSERT INTO myschema.where_am_i VALUES ('myschema');
SHOW datestyle;
SHOW TimeZone;
SHOW search_path;
SHOW work_mem;
SELECT v FROM where_am_i;
SELECT '2024-03-04'::date AS d, '2024-03-04 12:00:00+00'::timestamptz AS ts;
SET datestyle TO ISO;
SHOW datestyle;
RESET datestyle;
SHOW datestyle;
SET work_mem = '32MB';
SET search_path = public;
SET TIME ZONE 'UTC';
SHOW work_mem;
RESET work_mem;
SHOW work_mem;
SET work_mem = '33MB';
RESET ALL;
SHOW work_mem;
SHOW search_path;
SHOW TimeZone;
SHOW datestyle;
BEGIN;
SET LOCAL datestyle = 'Postgres, MDY';
SELECT '2024-03-04'::date AS local_d;
COMMIT;
SELECT '2024-03-04'::date AS d;
SET datestyle = DEFAULT;
SHOW datestyle;
SELECT name, setting FROM pg_settings WHERE name IN ('DateStyle', 'work_mem', 'search_path', 'TimeZone') ORDER BY name;
SHOW application_name;
