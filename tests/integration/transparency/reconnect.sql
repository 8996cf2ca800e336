-- \c reconnects (same database, user and server): the new session starts with the
-- startup defaults (SHOW of settings changed before), a temp table, SQL prepared
-- statement, cursor, advisory lock and LISTEN from before \c are gone, and a
-- transaction open at \c is not carried over (its row is not committed). (QUIET
-- around \c keeps psql's "You are now connected ... port" line out of the output.)
CREATE TABLE r (id int);
SET work_mem = '20MB';
SET search_path = pg_catalog, public;
SET tr.custom = 'before';
SET datestyle = 'German';
SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE;
CREATE TEMP TABLE tmp_before (id int);
PREPARE before_c AS SELECT 1;
SELECT pg_advisory_lock(4242);
LISTEN tr_channel;
BEGIN;
INSERT INTO r VALUES (1);
DECLARE before_cur CURSOR WITH HOLD FOR SELECT 1;
\set QUIET on
\c
\set QUIET off
SHOW work_mem;
SHOW search_path;
SHOW tr.custom;
SHOW datestyle;
SHOW transaction_isolation;
SELECT count(*) FROM tmp_before;
SELECT count(*) FROM pg_temp.tmp_before;
EXECUTE before_c;
SELECT count(*) FROM pg_prepared_statements;
SELECT count(*) FROM pg_cursors;
SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
SELECT count(*) FROM pg_listening_channels();
SELECT count(*) FROM r;
SELECT pg_advisory_unlock(4242);
SET work_mem = '21MB';
CREATE TEMP TABLE tmp_before (id int);
\set QUIET on
\c
\set QUIET off
SHOW work_mem;
SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema();
SELECT current_user, current_database() = :'DBNAME' AS same_db;
